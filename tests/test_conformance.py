"""Statistical conformance: every verifier keeps the target distribution exactly.

For greedy, accept, draft-free, point-mass and handed-over rows and verify (T in {0.5, 1, 1.5})
over 10 (p, q) pairs, each trial is one batch row (the target and draft rows are broadcast with
stride 0), and the suite checks against the analytic law:
  - the accepted-length distribution (chi-square) and its mean (z-test),
  - the acceptance rate at every position against sum(min(p, q)) (binomial z-test),
  - the token emitted at every position j, given that the round reached j, against p_j
    (chi-square; for greedy: always argmax p_j), with the first token's TVD reported next to
    the TVD an exact sampler shows at the same number of trials.
All p-values share one Bonferroni budget. Negative controls (deliberately wrong verifiers run on
the same draws) must fail the same battery; a correct Python verifier must pass it.
`--stat-full` runs 10^7 trials per case and writes docs/CONFORMANCE.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

import spec_edge
from filter_ref import filtered_law
from stats_utils import binomial_z_pvalue, chisquare_pvalue, exact_sampler_tvd_floor, tvd

K, V = 3, 6
N_CI, N_FULL, CHUNK = 40_000, 10_000_000, 1_000_000
MODES = ["greedy", "accept", "draft_free", "verify_T0.5", "verify_T1", "verify_T1.5", "verify_filtered",
         "verify_point_mass_T1", "verify_handover_T1"]
CONTROLS = ["no_residual_renormalization", "accept_min_q_over_p", "bonus_from_q", "reused_uniform",
            "draft_unfiltered", "point_mass_as_target", "handover_rows_shifted"]
# verify_point_mass: proposals that come with no draft distribution (prompt lookup), verified by
# the verify op with draft rows of -inf but at the proposed token, as the runners do; its control
# verifies them as if the draft were the target (every proposal accepted).
# verify_handover: a hybrid round the draft model hands over to lookup after HANDOVER steps: its
# first rows the draft's distributions, the rest point masses; its control builds the point
# masses one position off (each at the token before its own).
HANDOVER = 1
# verify_filtered: the filters of the sampling issue inside verify, on target and draft alike.
FILTERED_T = 0.8
FILTERED = spec_edge.Filters(top_k=4, top_p=0.9, min_p=0.05)
TESTS_PER_CASE = 2 + K + (K + 1)
FAMILY_ALPHA = 0.01
N_BATTERIES = 10 * (len(MODES) + len(CONTROLS) + 1)
ALPHA = FAMILY_ALPHA / (N_BATTERIES * TESTS_PER_CASE)  # Bonferroni over the whole suite


@dataclass
class Case:
    name: str
    p: torch.Tensor  # [K+1, V] float64, rows normalized
    q: torch.Tensor  # [K+1, V]; q[K] is used only by the bonus_from_q control


def _dirichlet(alpha: float, g: torch.Generator, rows: int = K + 1) -> torch.Tensor:
    x = torch.distributions.Gamma(torch.full((rows, V), alpha, dtype=torch.float64), 1.0)
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=g)))
    return x.sample()


def make_cases() -> list[Case]:
    g = torch.Generator().manual_seed(2024)
    norm = lambda x: x / x.sum(-1, keepdim=True)
    randn = lambda: torch.randn(K + 1, V, generator=g, dtype=torch.float64)
    zeros_at = lambda x, cols: norm(x.index_fill(-1, torch.tensor(cols), 0.0))
    cases = [
        ("dirichlet_1", _dirichlet(1.0, g), _dirichlet(1.0, g)),
        ("dirichlet_0.3", _dirichlet(0.3, g), _dirichlet(0.3, g)),
        ("high_overlap", None, None),
        ("low_overlap", _dirichlet(0.15, g), _dirichlet(0.15, g)),
        ("peaked_p_flat_q", torch.softmax(4 * randn(), -1), torch.ones(K + 1, V)),
        ("flat_p_peaked_q", torch.ones(K + 1, V), torch.softmax(4 * randn(), -1)),
        ("p_with_zeros", zeros_at(_dirichlet(1.0, g), [1, 4]), _dirichlet(1.0, g)),
        ("q_with_zeros", _dirichlet(1.0, g), zeros_at(_dirichlet(1.0, g), [0, 5])),
        ("shared_dominant", None, None),
        ("uniform_p", torch.ones(K + 1, V), _dirichlet(0.5, g)),
    ]
    out = []
    for name, p, q in cases:
        if name == "high_overlap":
            p = _dirichlet(1.0, g)
            q = 0.8 * p + 0.2 * _dirichlet(1.0, g)
        if name == "shared_dominant":
            p = 0.3 * _dirichlet(1.0, g)
            q = 0.3 * _dirichlet(1.0, g)
            p[:, 2] += 0.7
            q[:, 2] += 0.7
        out.append(Case(name, norm(p), norm(q)))
    return out


CASES = make_cases()


def temperature_of(mode: str) -> float | None:
    if mode == "verify_filtered":
        return FILTERED_T
    return float(mode.split("_T")[1]) if mode.startswith("verify") else None


def law(case: Case, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, q) as the verifier sees them: tempered for verify, and filtered (docs/FILTERS.md,
    restated in numpy by filter_ref) for verify_filtered."""
    T = temperature_of(mode)
    if T is None:
        return case.p, case.q
    if mode == "verify_filtered":
        f = FILTERED
        warp = lambda x: torch.stack([torch.from_numpy(filtered_law(
            torch.log(row).float().numpy(), T, f.top_k, f.top_p, f.min_p)) for row in x])
        return warp(case.p), warp(case.q)
    temper = lambda x: torch.softmax(torch.log(x) / T, -1)
    return temper(case.p), temper(case.q)


def alphas(case: Case, mode: str) -> torch.Tensor:
    p, q = law(case, mode)
    if mode == "greedy":
        return spec_edge.greedy_acceptance_rate(p[:K], q[:K])
    if mode == "draft_free" or "point_mass" in mode:
        return spec_edge.draft_free_acceptance_rate(p[:K], q[:K])
    if "handover" in mode:
        return torch.cat([spec_edge.acceptance_rate(p[:HANDOVER], q[:HANDOVER]),
                          spec_edge.draft_free_acceptance_rate(p[HANDOVER:K], q[HANDOVER:K])])
    return spec_edge.acceptance_rate(p[:K], q[:K])


def control_verifier(p, q, tokens, u, bug: str | None):
    """A vectorized Python verifier: exact for bug=None, deliberately wrong otherwise."""
    m = tokens.shape[0]
    n = torch.full((m,), K, dtype=torch.long)
    nxt = torch.full((m,), -1, dtype=torch.long)
    alive = torch.ones(m, dtype=torch.bool)

    def inverse_cdf(weights, draws, normalize=True):
        cdf = torch.cumsum(weights, 0)
        if normalize:
            cdf = cdf / cdf[-1]
        return torch.searchsorted(cdf, draws.contiguous(), right=True).clamp(max=V - 1)

    for i in range(K):
        pt, qt = p[i][tokens[:, i]], q[i][tokens[:, i]]
        if bug == "accept_min_q_over_p":
            ok = u[:, i] <= torch.clamp(qt / pt, max=1.0)
        else:
            ok = u[:, i] * qt <= pt
        rejected = alive & ~ok
        draws = u[:, i] if bug == "reused_uniform" else u[:, K]
        residual = torch.clamp(p[i] - q[i], min=0)
        token = inverse_cdf(residual, draws, normalize=bug != "no_residual_renormalization")
        nxt[rejected], n[rejected] = token[rejected], i
        alive &= ok
    bonus = inverse_cdf(q[K] if bug == "bonus_from_q" else p[K], u[:, K])
    nxt[alive] = bonus[alive]
    return n, nxt


def simulate(case: Case, mode: str, trials: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Runs `trials` verification rounds; returns n_accepted [N] and emitted tokens [N, K+1]."""
    p, q = law(case, "verify_filtered" if mode == "draft_unfiltered" else mode)
    all_n, all_emitted = [], []
    for chunk, start in enumerate(range(0, trials, CHUNK)):
        m = min(CHUNK, trials - start)
        g = torch.Generator().manual_seed(seed * 7919 + chunk)
        tokens = torch.stack([torch.multinomial(q[i], m, replacement=True, generator=g) for i in range(K)], 1)
        u = torch.rand(m, K + 1, dtype=torch.float64, generator=g)
        expand = lambda x: x.float()[None].expand(m, *x.shape)
        if mode == "greedy":
            n, nxt = spec_edge.verify_greedy(expand(p), tokens)
        elif mode == "accept":
            n, nxt = spec_edge.accept_with_uniforms(expand(p), expand(q[:K]), tokens, u)
        elif mode == "draft_free":
            n, nxt = spec_edge.accept_with_uniforms(expand(p), None, tokens, u)
        elif mode in ("verify_point_mass_T1", "verify_handover_T1", "handover_rows_shifted"):
            # The draft's rows for the positions the model drafted (none in a lookup round), then
            # a point mass at each proposal (the control's one position off).
            drafted = HANDOVER if "handover" in mode else 0
            marked = tokens[:, drafted - 1:K - 1] if mode == "handover_rows_shifted" else tokens[:, drafted:]
            rows = torch.cat([expand(torch.log(case.q[:drafted])),
                              torch.full((m, K - drafted, V), float("-inf")).scatter_(2, marked[:, :, None], 0.0)], 1)
            n, out = spec_edge.verify(expand(torch.log(case.p)), rows, tokens, temperature=1.0, seed=seed,
                                      offset=chunk)
            nxt = out.gather(1, n[:, None])[:, 0]
        elif mode == "point_mass_as_target":
            n, out = spec_edge.verify(expand(torch.log(case.p)), expand(torch.log(case.p[:K])), tokens,
                                      temperature=1.0, seed=seed, offset=chunk)
            nxt = out.gather(1, n[:, None])[:, 0]
        elif mode.startswith("verify"):
            filters = FILTERED if mode == "verify_filtered" else spec_edge.Filters()
            n, out = spec_edge.verify(expand(torch.log(case.p)), expand(torch.log(case.q[:K])), tokens,
                                      temperature=temperature_of(mode), seed=seed, offset=chunk,
                                      filters=filters)
            nxt = out.gather(1, n[:, None])[:, 0]
        elif mode == "draft_unfiltered":  # the classic bug: the draft warped differently
            n, nxt = control_verifier(p, law(case, f"verify_T{FILTERED_T}")[1], tokens, u, None)
        else:
            n, nxt = control_verifier(p, q, tokens, u, None if mode == "python_exact" else mode)
        cols = torch.arange(K + 1)[None]
        emitted = torch.where(cols < n[:, None], torch.cat([tokens, tokens[:, :1]], 1),
                              torch.where(cols == n[:, None], nxt[:, None], -1))
        all_n.append(n.numpy())
        all_emitted.append(emitted.numpy())
    return np.concatenate(all_n), np.concatenate(all_emitted)


@dataclass
class Battery:
    pvalues: dict[str, float]
    n: int
    mean_length: float
    expected_length: float
    rate: float
    expected_rate: float
    first_tvd: float
    tvd_floor: float

    @property
    def min_p(self) -> float:
        return min(self.pvalues.values())

    @property
    def passed(self) -> bool:
        return self.min_p >= ALPHA


def run_battery(case: Case, mode: str, trials: int, law_mode: str | None = None) -> Battery:
    law_mode = law_mode or mode
    n_acc, emitted = simulate(case, mode, trials)
    p, _ = law(case, law_mode)
    a = alphas(case, law_mode)
    dist = spec_edge.accepted_length_distribution(a).numpy()
    pv = {"length": chisquare_pvalue(np.bincount(n_acc, minlength=K + 1), dist)}
    support = np.arange(K + 1)
    mean, var = float((support * dist).sum()), float((support**2 * dist).sum() - (support * dist).sum() ** 2)
    pv["mean_length"] = float(math.erfc(abs(n_acc.mean() - mean) / math.sqrt(2 * var / trials))) if var > 0 else float(n_acc.mean() == mean)
    for i in range(K):
        reached = n_acc >= i
        pv[f"rate_{i}"] = binomial_z_pvalue(float((n_acc[reached] > i).sum()), float(reached.sum()), float(a[i]))
    for j in range(K + 1):
        tok = emitted[n_acc >= j, j]
        if law_mode == "greedy":
            pv[f"token_{j}"] = float(np.all(tok == int(p[j].argmax())))
        else:
            pv[f"token_{j}"] = chisquare_pvalue(np.bincount(tok, minlength=V), p[j].numpy())
    first = np.bincount(emitted[:, 0], minlength=V)
    first_law = np.eye(V)[int(p[0].argmax())] if law_mode == "greedy" else p[0].numpy()
    floor = 0.0 if law_mode == "greedy" else exact_sampler_tvd_floor(first_law, trials)
    return Battery(pv, trials, float(n_acc.mean()), mean, float((n_acc > 0).mean()), float(a[0]),
                   tvd(first, first_law), floor)


REPORT: list[tuple[str, str, Battery]] = []


@pytest.fixture(scope="module")
def trials(stat_full) -> int:
    return N_FULL if stat_full else N_CI


@pytest.mark.stat
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verifier_preserves_target_distribution(case, mode, trials):
    battery = run_battery(case, mode, trials)
    REPORT.append((mode, case.name, battery))
    worst = min(battery.pvalues, key=battery.pvalues.get)
    assert battery.passed, f"{mode}/{case.name}: {worst} p={battery.pvalues[worst]:.3g} < {ALPHA:.3g}"


@pytest.mark.stat
def test_python_exact_verifier_passes_the_same_battery(trials):
    """The harness itself: a plain exact verifier written in torch passes."""
    for case in CASES:
        assert run_battery(case, "python_exact", min(trials, N_CI), law_mode="accept").passed, case.name


@pytest.mark.stat
@pytest.mark.parametrize("control", CONTROLS)
def test_negative_control_fails_the_battery(control, trials):
    law_mode = {"draft_unfiltered": "verify_filtered", "point_mass_as_target": "verify_point_mass_T1",
                "handover_rows_shifted": "verify_handover_T1"}.get(control, "accept")
    failed = [c.name for c in CASES if not run_battery(c, control, min(trials, N_CI), law_mode=law_mode).passed]
    REPORT.append((f"control:{control}", f"fails {len(failed)}/{len(CASES)} cases", None))
    assert len(failed) > len(CASES) // 2, f"{control} fails only {failed}"


def adaptive_round(case: Case, trials: int, k_from: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rounds per trial; the second's K is 1 + (the first's accepted length) mod K (``"past"``,
    as adaptive K chooses), or, for the control, the number of its own proposals its uniforms
    accept, at least one (``"current"``). Returns the second round's accepted lengths [N] and
    emitted tokens [N, K+1] (-1 past the end)."""
    p, q = case.p, case.q
    g = torch.Generator().manual_seed(3)
    rows = torch.arange(K)

    def draw():
        tokens = torch.stack([torch.multinomial(q[i], trials, replacement=True, generator=g) for i in range(K)], 1)
        return tokens, torch.rand(trials, K + 1, dtype=torch.float64, generator=g)

    def accept(tokens, u, k):
        m = tokens.shape[0]
        return spec_edge.accept_with_uniforms(p[:k + 1].float()[None].expand(m, k + 1, V),
                                              q[:k].float()[None].expand(m, k, V), tokens, u)

    first_n, _ = accept(*draw(), K)
    tokens, u = draw()
    if k_from == "past":
        ks = 1 + first_n % K
    else:
        accepts = u[:, :K] * q[rows, tokens] <= p[rows, tokens]
        ks = accepts.long().cumprod(1).sum(1).clamp(min=1)
    n = torch.zeros(trials, dtype=torch.long)
    emitted = torch.full((trials, K + 1), -1)
    for k in range(1, K + 1):
        chosen = ks == k
        if not chosen.any():
            continue
        nk, nxt = accept(tokens[chosen, :k], torch.cat([u[chosen, :k], u[chosen, K:]], 1), k)
        cols = torch.arange(k + 1)[None]
        out = torch.where(cols < nk[:, None], torch.cat([tokens[chosen, :k], tokens[chosen, :1]], 1),
                          torch.where(cols == nk[:, None], nxt[:, None], -1))
        emitted[chosen, :k + 1] = out
        n[chosen] = nk
    return n, emitted


def adaptive_pvalues(case: Case, trials: int, k_from: str) -> list[float]:
    """The token emitted at every position j, given that the round reached j, against p_j."""
    n, emitted = adaptive_round(case, trials, k_from)
    return [chisquare_pvalue(np.bincount(emitted[n >= j, j].numpy(), minlength=V), case.p[j].numpy())
            for j in range(K + 1)]


ADAPTIVE_ALPHA = FAMILY_ALPHA / (2 * len(CASES) * (K + 1))


@pytest.mark.stat
def test_k_chosen_from_past_rounds_keeps_the_target_distribution(trials):
    """Adaptive K: a round's K follows from the rounds before it, never from its own draws."""
    for case in CASES:
        pvalues = adaptive_pvalues(case, min(trials, 10 * N_CI), "past")
        assert min(pvalues) >= ADAPTIVE_ALPHA, (case.name, pvalues)


@pytest.mark.stat
def test_k_chosen_from_the_rounds_own_uniforms_fails(trials):
    """The control: stopping the proposals where this round's uniforms would reject one biases
    the emitted tokens towards the draft's."""
    failed = [c.name for c in CASES if min(adaptive_pvalues(c, min(trials, 10 * N_CI), "current")) < ADAPTIVE_ALPHA]
    REPORT.append(("control:k_from_current_uniforms", f"fails {len(failed)}/{len(CASES)} cases", None))
    assert len(failed) > len(CASES) // 2, f"fails only {failed}"


def test_same_seed_same_bits_and_fresh_offset_fresh_draws():
    case = CASES[0]
    m = 5000
    tl = torch.log(case.p).float()[None].expand(m, K + 1, V)
    dl = torch.log(case.q[:K]).float()[None].expand(m, K, V)
    tokens = torch.randint(0, V, (m, K), generator=torch.Generator().manual_seed(1))
    a = spec_edge.verify(tl, dl, tokens, temperature=1.0, seed=11, offset=3).tokens
    b = spec_edge.verify(tl, dl, tokens, temperature=1.0, seed=11, offset=3).tokens
    c = spec_edge.verify(tl, dl, tokens, temperature=1.0, seed=11, offset=4).tokens
    d = spec_edge.verify(tl, dl, tokens, temperature=1.0, seed=12, offset=3).tokens
    assert torch.equal(a, b)
    assert (a != c).any() and (a != d).any()
    # rows are independent streams: the accepted counts of neighbouring rows are uncorrelated
    n = (a[:, 0] == tokens[:, 0]).double()
    assert abs(float(torch.corrcoef(torch.stack([n[:-1], n[1:]]))[0, 1])) < 5 / math.sqrt(m)


def test_write_report(stat_full):
    """With --stat-full, writes the figures to docs/CONFORMANCE.md (after the cases above)."""
    if not stat_full:
        pytest.skip("figures are written by `make stat-full`")
    lines = [
        "# Conformance figures",
        "",
        f"`make stat-full`: {N_FULL:,} trials per case, K={K}, V={V}; every p-value shares one",
        f"Bonferroni budget (family alpha {FAMILY_ALPHA}, per test {ALPHA:.2e}). TVD of the first",
        "emitted token against its law (p_0; for greedy the point mass on argmax p_0), next to the",
        "mean TVD of an exact multinomial sampler at the same number of draws. Negative controls",
        "run at the CI size "
        f"({N_CI:,} trials per case).",
        "",
        "| verifier | case | min p | mean accepted (obs / law) | rate pos 0 (obs / law) | TVD first token | exact-sampler TVD |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, name, b in REPORT:
        if b is None:
            lines.append(f"| {mode} | {name} | | | | | |")
        else:
            lines.append(f"| {mode} | {name} | {b.min_p:.3g} | {b.mean_length:.5f} / {b.expected_length:.5f} | "
                         f"{b.rate:.5f} / {b.expected_rate:.5f} | {b.first_tvd:.2e} | {b.tvd_floor:.2e} |")
    path = Path(__file__).resolve().parents[1] / "docs" / "CONFORMANCE.md"
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
