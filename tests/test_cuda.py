"""The CUDA build (custom_ops/cuda) against the CPU core: the same tokens for the same inputs and
seed, the same laws, the same errors. Runs where torch sees a GPU and the library was built with
SPEC_EDGE_BUILD_CUDA=ON (bench/gpu_check.sh); skips, saying why, everywhere else."""

import math

import numpy as np
import pytest
import torch

import spec_edge
from spec_edge import Filters as F
from stats_utils import chisquare_pvalue

if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch: the GPU tests run in bench/gpu_check.sh on a GPU "
                "machine", allow_module_level=True)
if not spec_edge.has_cuda_kernels():
    pytest.skip(f"{spec_edge.library_path()} has no CUDA kernels: build with SPEC_EDGE_BUILD_CUDA=ON "
                "(bench/gpu_check.sh does)", allow_module_level=True)

DEV = torch.device("cuda")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
VOCABS = [111, 32000, 128256]
ALPHA = 1e-4
AGREEMENT: dict[str, list[int]] = {}  # op -> [agreeing rows, rows], printed at the end


def agree(op: str, cpu: torch.Tensor, gpu: torch.Tensor) -> None:
    """Records the rows on which the two builds agree and requires all of them to."""
    cpu, gpu = cpu.reshape(cpu.shape[0], -1), gpu.cpu().reshape(gpu.shape[0], -1)
    same = (cpu == gpu).all(-1)
    counts = AGREEMENT.setdefault(op, [0, 0])
    counts[0] += int(same.sum())
    counts[1] += len(same)
    assert bool(same.all()), f"{op}: rows {torch.nonzero(~same)[:, 0].tolist()} differ from the CPU build"


@pytest.fixture(scope="module", autouse=True)
def report_agreement():
    yield
    for op, (ok, n) in sorted(AGREEMENT.items()):
        print(f"CPU/GPU token agreement {op}: {ok}/{n} rows ({ok / n:.4%})")


def logits(B, R, V, dtype, g, scale=3.0):
    x = scale * torch.randn(B, R, V, generator=g)
    x[:, :, :: max(1, V // 7)] -= 40.0  # some tokens far below the rest
    return x.to(dtype)


def near_copies(t: torch.Tensor, g, noise=0.3) -> torch.Tensor:
    """Draft scores close to the target's, so that some drafts are accepted."""
    return (t.float() + noise * torch.randn(t.shape, generator=g)).to(t.dtype)


@pytest.mark.parametrize("V", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_verify_greedy_agrees(V, dtype):
    g = torch.Generator().manual_seed(V)
    B, K = 16, 4
    probs = torch.softmax(logits(B, K + 1, V, torch.float32, g), -1).to(dtype)
    tokens = probs[:, :K].float().argmax(-1)
    tokens[::3, 1] = (tokens[::3, 1] + 1) % V  # a miss at position 1 in every third row
    cpu = spec_edge.verify_greedy(probs, tokens)
    gpu = spec_edge.verify_greedy(probs.to(DEV), tokens.to(DEV))
    assert gpu.n_accepted.device.type == DEV.type
    agree("verify_greedy", torch.stack([cpu.n_accepted, cpu.next_token], 1),
          torch.stack([gpu.n_accepted, gpu.next_token], 1))


@pytest.mark.parametrize("draft_free", [False, True])
@pytest.mark.parametrize("V", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_accept_agrees(V, dtype, draft_free):
    g = torch.Generator().manual_seed(V + 1)
    B, K = 16, 4
    p = torch.softmax(logits(B, K + 1, V, torch.float32, g), -1)
    q = torch.softmax(near_copies(p.log()[:, :K], g), -1)
    p, q = p.to(dtype), q.to(dtype)
    tokens = torch.multinomial(q.float().reshape(-1, V), 1, generator=g).reshape(B, K)
    u = torch.rand(B, K + 1, dtype=torch.float64, generator=g)
    qd = None if draft_free else q
    cpu = spec_edge.accept_with_uniforms(p, qd, tokens, u)
    gpu = spec_edge.accept_with_uniforms(p.to(DEV), None if draft_free else q.to(DEV), tokens.to(DEV), u.to(DEV))
    agree("accept", torch.stack([cpu.n_accepted, cpu.next_token], 1),
          torch.stack([gpu.n_accepted, gpu.next_token], 1))


@pytest.mark.parametrize("penalty", [1.0, 1.3])
@pytest.mark.parametrize("T", [0.0, 0.7, 1.3])
@pytest.mark.parametrize("V", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_verify_agrees(V, dtype, T, penalty):
    g = torch.Generator().manual_seed(V + 2)
    B, K = 32, 4
    t = logits(B, K + 1, V, torch.float32, g)
    d = near_copies(t[:, :K], g)
    t, d = t.to(dtype), d.to(dtype)
    tokens = d.float().argmax(-1)
    num_draft = torch.randint(0, K + 1, (B,), generator=g)
    prev = torch.randint(-1, V, (B, 12), generator=g)
    f = F(repetition_penalty=penalty, prev_tokens=prev)
    seed, offset = torch.randint(0, 2**62, (B,), generator=g), torch.arange(B) * 7
    cpu = spec_edge.verify(t, d, tokens, T, seed, offset, num_draft, filters=f)
    gpu = spec_edge.verify(t.to(DEV), d.to(DEV), tokens.to(DEV), T, seed, offset, num_draft.to(DEV),
                           filters=F(repetition_penalty=penalty, prev_tokens=prev.to(DEV)))
    agree("verify", torch.cat([cpu.accept_len[:, None], cpu.tokens], 1),
          torch.cat([gpu.accept_len[:, None], gpu.tokens], 1))


@pytest.mark.parametrize("penalty", [1.0, 0.8])
@pytest.mark.parametrize("T", [0.0, 0.6, 1.0, 2.0])
@pytest.mark.parametrize("V", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_sample_agrees(V, dtype, T, penalty):
    g = torch.Generator().manual_seed(V + 3)
    B = 64
    x = logits(B, 1, V, dtype, g)[:, 0]
    x[0, :] = -math.inf
    x[0, 5] = 0.0  # one allowed token
    x[1] = x[1, 0]  # a flat row
    prev = torch.randint(-1, V, (B, 16), generator=g)
    f = F(repetition_penalty=penalty, prev_tokens=prev)
    cpu = spec_edge.sample(x, T, seed=11, offset=3, filters=f)
    gpu = spec_edge.sample(x.to(DEV), T, seed=11, offset=3, filters=F(repetition_penalty=penalty,
                                                                      prev_tokens=prev.to(DEV)))
    assert gpu.device.type == DEV.type
    agree("sample", cpu[:, None], gpu[:, None])


FILTERS = [dict(top_k=1), dict(top_k=50), dict(top_k=50, top_p=0.9, min_p=0.05, repetition_penalty=1.1),
           dict(top_k=1000, top_p=0.95), dict(top_k=20, min_p=0.2), dict(top_p=0.9),
           dict(top_p=0.6, min_p=0.02, repetition_penalty=1.3), dict(min_p=0.1)]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
@pytest.mark.parametrize("V", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_filtered_ops_agree(V, dtype, filters):
    g = torch.Generator().manual_seed(V + 4)
    B, K = 16, 4
    x = logits(B, 1, V, dtype, g)[:, 0]
    x[1] = torch.floor(x[1].float()).to(dtype)  # ties at the top-k boundary
    prev = torch.randint(-1, V, (B, 16), generator=g)
    cfg = {**filters, "top_k": min(filters.get("top_k", 0), V)}
    f_cpu, f_gpu = F(**cfg, prev_tokens=prev), F(**cfg, prev_tokens=prev.to(DEV))
    for T in [0.0, 0.8, 1.5]:
        agree("sample (filtered)", spec_edge.sample(x, T, seed=3, offset=1, filters=f_cpu)[:, None],
              spec_edge.sample(x.to(DEV), T, seed=3, offset=1, filters=f_gpu)[:, None])
        want, got = spec_edge.filter_logits(x, T, filters=f_cpu), spec_edge.filter_logits(x.to(DEV), T, filters=f_gpu)
        assert got.dtype == dtype and torch.equal(got.cpu(), want)
    t = logits(B, K + 1, V, torch.float32, g)
    d = near_copies(t[:, :K], g)
    t, d = t.to(dtype), d.to(dtype)
    tokens = d.float().argmax(-1)
    for T in [0.7, 1.3]:
        cpu = spec_edge.verify(t, d, tokens, T, 9, 2, None, filters=f_cpu)
        gpu = spec_edge.verify(t.to(DEV), d.to(DEV), tokens.to(DEV), T, 9, 2, None, filters=f_gpu)
        agree("verify (filtered)", torch.cat([cpu.accept_len[:, None], cpu.tokens], 1),
              torch.cat([gpu.accept_len[:, None], gpu.tokens], 1))


def test_sample_agrees_on_many_seeds_and_runs_on_the_current_stream():
    g = torch.Generator().manual_seed(5)
    x = logits(256, 1, 32000, torch.float32, g, scale=1.0)[:, 0]
    stream = torch.cuda.Stream()
    xs = x.to(DEV)
    for offset in range(8):
        cpu = spec_edge.sample(x, 0.9, seed=offset * 1000003, offset=offset)
        with torch.cuda.stream(stream):
            gpu = spec_edge.sample(xs, 0.9, seed=offset * 1000003, offset=offset)
        stream.synchronize()
        agree("sample", cpu[:, None], gpu[:, None])


def multi_block_row() -> torch.Tensor:
    """The row of test_sample.py: five blocks, the first all -inf, the maximum in the last."""
    g = torch.Generator().manual_seed(3)
    row = 0.6 * torch.randn(300, generator=g)
    row[:64] = -math.inf
    row[290] = 2.5
    return row


def test_sample_follows_the_law_with_a_negative_control():
    row, T, n = multi_block_row(), 0.7, 400_000
    tokens = spec_edge.sample(row.to(DEV)[None].expand(n, -1), T, seed=1, offset=0).cpu()
    counts = np.bincount(tokens.numpy(), minlength=len(row))
    law = torch.softmax(row.double() / T, -1).numpy()
    assert counts[:64].sum() == 0
    assert chisquare_pvalue(counts, law) > ALPHA
    # Negative control: a sampler that ignores the temperature fails the same test.
    wrong = np.bincount(spec_edge.sample(row.to(DEV)[None].expand(n, -1), 1.0, seed=1, offset=0).cpu().numpy(),
                        minlength=len(row))
    assert chisquare_pvalue(wrong, law) < ALPHA


def test_verify_follows_the_target_law_with_a_negative_control():
    """Emitted first tokens of sampled verify are distributed as softmax(target / T)."""
    g = torch.Generator().manual_seed(9)
    V, T, n = 40, 0.9, 200_000
    t, d = torch.randn(1, 2, V, generator=g), torch.randn(1, 1, V, generator=g)
    draft = torch.multinomial(torch.softmax(d[0, 0] / T, -1), n, replacement=True, generator=g)[:, None]
    r = spec_edge.verify(t.to(DEV).expand(n, -1, -1), d.to(DEV).expand(n, -1, -1), draft.to(DEV), T,
                         seed=3, offset=torch.arange(n).to(DEV))
    first = r.tokens[:, 0].cpu().numpy()
    law = torch.softmax(t[0, 0].double() / T, -1).numpy()
    assert chisquare_pvalue(np.bincount(first, minlength=V), law) > ALPHA
    assert chisquare_pvalue(np.bincount(draft[:, 0].numpy(), minlength=V), law) < ALPHA  # the draft's own law


def test_batch_times_vocab_past_2_31():
    """int64 indexing: B * V = 2^31 + 2^17 bfloat16 logits (4 GiB)."""
    B, V = 16385, 131072
    x = torch.randn(B, V, device=DEV, dtype=torch.bfloat16)
    x[-1, V - 3] = 100.0
    tokens = spec_edge.sample(x, 0.0)
    assert torch.equal(tokens, x.float().argmax(-1)) and int(tokens[-1]) == V - 3
    r = spec_edge.verify_greedy(x[:, None], torch.empty(B, 0, dtype=torch.long, device=DEV))
    assert torch.equal(r.next_token, tokens)


def cpu_error(fn, *args):
    with pytest.raises(Exception) as e:
        fn(*args)
    return type(e.value), str(e.value).splitlines()[0]


@pytest.mark.parametrize("case", ["nan_logit", "inf_logit", "masked_row", "bad_token", "bad_temperature",
                                  "negative_prob", "zero_mass", "nan_prob", "penalty_overflow"])
def test_value_errors_match_the_cpu_build(case):
    V = 300
    x = torch.randn(2, 3, V)
    tokens = torch.tensor([[1, 2], [3, 4]])
    p = torch.softmax(x, -1)
    calls = {
        "nan_logit": (spec_edge.verify, lambda a: (a(x), a(x[:, :2]), a(tokens), 0.8)),
        "inf_logit": (spec_edge.sample, lambda a: (a(torch.where(torch.arange(V) == 200, math.inf, x[:, 0])), 0.8)),
        "masked_row": (spec_edge.sample, lambda a: (a(torch.full((2, V), -math.inf)), 0.8)),
        "bad_token": (spec_edge.verify_greedy, lambda a: (a(p), a(tokens + V))),
        "bad_temperature": (spec_edge.sample, lambda a: (a(x[:, 0]), -1.0)),
        "negative_prob": (spec_edge.accept_with_uniforms,
                          lambda a: (a(p.index_put((torch.tensor([1]), torch.tensor([2]), torch.tensor([7])),
                                                   torch.tensor(-0.1))), a(p[:, :2]), a(tokens), a(torch.rand(2, 3, dtype=torch.float64)))),
        "zero_mass": (spec_edge.accept_with_uniforms,
                      lambda a: (a(p), a(torch.zeros(2, 2, V)), a(tokens), a(torch.rand(2, 3, dtype=torch.float64)))),
        "nan_prob": (spec_edge.verify_greedy, lambda a: (a(p.index_put((torch.tensor([0]), torch.tensor([0]), torch.tensor([9])),
                                                                        torch.tensor(math.nan))), a(tokens))),
        "penalty_overflow": (spec_edge.sample, lambda a: (a(torch.full((2, V), 3e38)), 0.8, 0, 0,
                                                          F(repetition_penalty=0.5, prev_tokens=a(torch.tensor([4]))))),
    }
    fn, make = calls[case]
    if case == "nan_logit":
        x[1, 0, 17] = math.nan  # row 0 of sequence 1: read whatever the draws
    want = cpu_error(fn, *make(lambda t: t))
    got = cpu_error(fn, *make(lambda t: t.to(DEV) if isinstance(t, torch.Tensor) else t))
    assert got == want


def test_device_and_layout_errors():
    t = torch.randn(2, 3, 50, device=DEV)
    tokens = torch.zeros(2, 2, dtype=torch.long, device=DEV)
    with pytest.raises(ValueError, match=r"draft_logits: expected a tensor on cuda"):
        spec_edge.verify(t, t[:, :2].cpu(), tokens, 0.8)
    with pytest.raises(ValueError, match=r"contiguous vocabulary axis"):
        spec_edge.verify_greedy(t.transpose(1, 2).contiguous().transpose(1, 2), tokens)
    with pytest.raises(TypeError, match=r"draft_logits: dtype float16 does not match"):
        spec_edge.verify(t, t[:, :2].half(), tokens, 0.8)
    if torch.cuda.device_count() > 1:
        with pytest.raises(ValueError, match=r"expected a tensor on cuda:0"):
            spec_edge.verify_greedy(t, tokens.to("cuda:1"))
