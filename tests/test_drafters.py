"""Drafting without a draft model (spec_edge.drafters; runtime_demo/runner/include/spec_edge/drafting.h):
prompt lookup, the hybrid drafter and adaptive K. The same decisions in Python and C++; greedy
output identical to the target alone for every drafter; sampled output distributed as the
target's; the same tokens from the Python loop, NativeRunner and spec-edge-run for a seed."""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import spec_edge
from filter_ref import filtered_law
from small_pair import K, PROMPT
from stats_utils import chisquare_pvalue
from spec_edge.demo import DEFAULT_PAIR
from spec_edge.drafters import MAX_REWRITE, AdaptiveK, Drafting, PromptLookup, Proposal

pytest.importorskip("executorch")
from spec_edge.native_runner import _load_extension  # noqa: E402
from spec_edge.runtime import ProgramError, PteSpeculativeDecoder  # noqa: E402
from test_android import SAMPLED as JAVA_SAMPLED, classes, driver_tokens, every_jvm  # noqa: E402,F401
from test_runner import NATIVE, SAMPLED_FLAGS as JAVA_SAMPLED_FLAGS, default_programs  # noqa: E402,F401

# Text that repeats itself, so that prompt lookup has proposals to make.
REPETITIVE = PROMPT + PROMPT + PROMPT[:3]
SAMPLED = dict(temperature=0.9, filters=spec_edge.Filters(top_k=20, top_p=0.95), seed=11)
SAMPLED_FLAGS = ["--temperature", "0.9", "--top-k", "20", "--top-p", "0.95", "--seed", "11"]
SETTINGS = [("model", False), ("model", True), ("lookup", False), ("lookup", True), ("hybrid", False),
            ("hybrid", True)]


# ---- the decisions --------------------------------------------------------------------------

def test_prompt_lookup_proposes_what_followed_the_most_recent_earlier_occurrence():
    lookup = PromptLookup(1, 3)
    lookup.extend([1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3])
    assert lookup.propose(4) == Proposal(3, [7, 5, 1, 2])  # (1, 2, 3) last ended at 6, not at 2
    assert lookup.propose(10) == Proposal(3, [7, 5, 1, 2, 3])  # up to the end of the text
    lookup.append(1)  # only (1) recurs: it last ended at 9
    assert lookup.propose(3) == Proposal(1, [2, 3, 1])


def test_prompt_lookup_resumes_after_a_replaced_token():
    lookup = PromptLookup(2, 3)
    lookup.extend([1, 2, 3, 9, 7, 1, 2, 3, 8, 5, 6, 1, 2, 3])
    lookup.append(4)  # (2, 3, 4), (3, 4): never seen before; the copy of 5..7 expected 8
    assert lookup.propose(3) == Proposal(0, [5, 6, 1])  # a guess: 4 took 8's place
    assert lookup.propose(3, resume=False) == Proposal()  # exact matches only
    lookup.append(5)  # the text follows the guess
    assert lookup.propose(2) == Proposal(1, [6, 1])
    lookup.append(6)
    assert lookup.propose(2) == Proposal(2, [1, 2])  # (5, 6) recurs: in step again
    edited = PromptLookup(2, 2)
    edited.extend([6, 1, 2, 9, 8, 5, 1, 2, 4])  # the copy of 1..5 expected 9
    assert edited.propose(2) == Proposal(0, [8, 5])
    assert edited.propose(2, after=[3]) == Proposal()  # (4, 3) never ended; (2, 4) not before the end
    assert edited.propose(5, after=[1, 2, 3]) == Proposal()  # 3 took the place of the text's last token
    edited.append(7)
    assert edited.propose(5, after=[1, 2, 3]) == Proposal(2, [7])  # 3 took 4's place
    assert edited.propose(5, after=[1, 2]) == Proposal(2, [4, 7])  # in step, not edited
    assert edited.propose(5, after=[1, 2, 3], resume=False) == Proposal()  # exact matches only
    first = PromptLookup(2, 2)
    first.extend([1, 2, 7])
    assert first.propose(2) == Proposal()  # (1, 2) has no earlier occurrence than its own


# A function (50 a name in it), then its copy begun with the name changed.
FUNCTION = [10, 11, 50, 12, 13, 50, 14, 15, 50, 16]


def test_prompt_lookup_learns_an_edit_and_applies_it_where_the_copy_meets_the_old_tokens_again():
    lookup = PromptLookup(2, 3)
    lookup.extend(FUNCTION + [99, 10, 11])
    assert lookup.propose(4) == Proposal(2, [50, 12, 13, 50])  # (10, 11) recurs: the copy
    lookup.extend([60, 12])  # 60 took 50's place
    assert lookup.propose(4) == Proposal(1, [13, 50, 14, 15])  # not yet a rewrite: one token followed
    lookup.append(13)  # min_ngram tokens followed the edit: 50 -> 60 is a rewrite
    assert lookup.propose(4) == Proposal(2, [60, 14, 15, 60])  # at each of 50's next uses
    lookup.append(50)  # the text did not follow the rewrite: forgotten; (12, 13, 50) recurs
    assert lookup.propose(4) == Proposal(3, [14, 15, 50, 16])
    # An edit of one token into two: the text copies again from just after the replaced one.
    longer = PromptLookup(2, 3)
    longer.extend(FUNCTION + [99, 10, 11, 60, 61, 12, 13])
    assert longer.propose(6) == Proposal(2, [60, 61, 14, 15, 60, 61])
    assert longer.propose(3, after=[60, 61, 14]) == Proposal(5, [15, 60, 61])  # drafts that follow the copy
    assert longer.propose(3, after=[60, 62]) == Proposal()  # drafts that leave it: the lookup's
    # An edit of up to MAX_REWRITE tokens is a rewrite; a longer one is not.
    for replacement, proposal in ((MAX_REWRITE, list(range(60, 63))), (MAX_REWRITE + 1, [50, 14, 15])):
        edited = PromptLookup(2, 3)
        edited.extend(FUNCTION + [99, 10, 11] + list(range(60, 60 + replacement)) + [12, 13])
        assert edited.propose(3).tokens == proposal


def test_prompt_lookup_never_matches_the_last_tokens_themselves_and_keeps_its_bounds():
    lookup = PromptLookup(1, 2)
    lookup.append(5)
    assert lookup.propose(2) == Proposal()
    lookup.append(5)
    assert lookup.propose(2) == Proposal(1, [5])
    two = PromptLookup(2, 3)
    two.extend([1, 2, 1])
    assert two.propose(2) == Proposal()  # (1) recurs, but one token is below min_ngram
    # Tokens not yet in the text end the n-gram; what follows comes from the text.
    text = PromptLookup(2, 3)
    text.extend([1, 2, 3, 4, 5, 9])
    assert text.propose(4) == Proposal()
    assert text.propose(4, after=[2, 3]) == Proposal(2, [4, 5, 9])
    assert text.propose(4, after=[1, 2, 3]) == Proposal(3, [4, 5, 9])
    assert text.propose(2, after=[7]) == Proposal()  # (9, 7) never occurred
    text.append(1)
    assert text.propose(3, after=[2]) == Proposal(2, [3, 4, 5])  # (1, 2) across the text's end
    with pytest.raises(ValueError, match="min_ngram, max_ngram: expected 1 <= min_ngram <= max_ngram"):
        PromptLookup(3, 2)


def test_adaptive_k_grows_with_acceptance_and_shrinks_without_it():
    k = AdaptiveK(Drafting(draft_step_cost=0.35, verify_row_cost=0.1).round_costs(8, model_drafts=True))
    for _ in range(10):
        k.record(k.next(), k.next())  # everything accepted
    assert k.next() == 8
    for _ in range(10):
        k.record(k.next(), 0)
    assert k.next() == 1
    assert AdaptiveK([1.0] * 8).next() == 8  # free proposals: always the most


# The real target's verify step (BENCHMARKS: what a verify step's rows cost): about flat from 2 to
# 8 rows, then a second tile of rows for the 9th.
TILED = (1.33, 1.36, 1.39, 1.44, 1.49, 1.60, 1.71, 2.37)


def test_adaptive_k_weighs_the_measured_verify_costs():
    """With the verify step's measured costs, adaptive K never pays for a second tile of rows
    and, where more rows cost little more, proposes more than the linear default would."""
    tiled, linear = Drafting(verify_costs=TILED), Drafting()
    assert tiled.round_costs(3, model_drafts=False) == [1.33, 1.36, 1.39]
    assert Drafting(draft_step_cost=0.25, verify_costs=TILED).round_costs(2, True) == [1.33 + 0.25, 1.36 + 0.5]
    assert linear.round_costs(2, False) == [1.0 + 0.1, 1.0 + 0.2]
    for costs, most in ((tiled, 7), (linear, 8)):
        k = AdaptiveK(costs.round_costs(8, False))
        for _ in range(10):
            k.record(k.next(), k.next())  # everything accepted
        assert k.next() == most
    # at the prior's acceptance of 1/2
    assert AdaptiveK(tiled.round_costs(8, False)).next() == 3
    assert AdaptiveK(linear.round_costs(8, False)).next() == 2


def test_python_and_cpp_make_the_same_decisions():
    ext = _load_extension()
    rng = random.Random(5)
    for trial in range(200):
        lo = rng.randint(1, 3)
        hi = rng.randint(lo, 5)
        python, cpp = PromptLookup(lo, hi), ext.PromptLookup(lo, hi)
        for _ in range(rng.randint(1, 60)):
            token = rng.randrange(4 if trial % 2 else 40)
            python.append(token)
            cpp.extend([token])
            k = rng.randint(1, 8)
            assert cpp.propose(k) == (python.propose(k).ngram, python.propose(k).tokens)
            after = [rng.randrange(4 if trial % 2 else 40) for _ in range(rng.randint(1, 4))]
            for resume in (True, False):
                want = python.propose(k, after, resume=resume)
                assert cpp.propose(k, after, resume) == (want.ngram, want.tokens)
        d = Drafting(draft_step_cost=rng.choice([0.0, 0.1, 0.45]), verify_row_cost=rng.choice([0.0, 0.1, 1.3]),
                     verify_costs=rng.choice([(), tuple(rng.uniform(0.5, 3.0) for _ in range(8))]))
        costs = d.round_costs(8, model_drafts=trial % 3 > 0)
        assert ext.round_costs(d.draft_step_cost, d.verify_row_cost, d.verify_costs, 8, trial % 3 > 0) == costs
        python_k, cpp_k = AdaptiveK(costs), ext.AdaptiveK(costs)
        for _ in range(50):
            assert python_k.next() == cpp_k.next()
            proposed = rng.randint(1, 8)
            accepted = rng.randint(0, proposed)
            python_k.record(proposed, accepted)
            cpp_k.record(proposed, accepted)


# ---- decoding --------------------------------------------------------------------------------

def cli_flags(drafter: str, adaptive: bool) -> list[str]:
    return ["--drafter", drafter] + (["--adaptive-k"] if adaptive else [])


@pytest.mark.parametrize("drafter,adaptive", SETTINGS)
@pytest.mark.parametrize("prompt", [PROMPT, REPETITIVE], ids=["prompt", "repetitive"])
def test_every_drafter_decodes_greedily_as_the_target_alone_and_alike_in_every_front_end(pair, drafter, adaptive,
                                                                                         prompt):
    loop = PteSpeculativeDecoder(pair / "pair", drafter=drafter, adaptive_k=adaptive)
    native = spec_edge.NativeRunner(pair / "pair", drafter=drafter, adaptive_k=adaptive)
    target_only = loop.generate(prompt, 40, speculative=False)
    assert loop.generate(prompt, 40) == target_only
    assert native.generate(prompt, 40) == target_only
    assert NATIVE.tokens(pair / "pair", "--max-new", "40", *cli_flags(drafter, adaptive), prompt=prompt) == target_only
    sampled = loop.generate(prompt, 40, **SAMPLED)
    assert native.generate(prompt, 40, **SAMPLED) == sampled
    assert NATIVE.tokens(pair / "pair", "--max-new", "40", *cli_flags(drafter, adaptive), *SAMPLED_FLAGS,
                         prompt=prompt) == sampled
    s = native.stats
    assert vars(s) | {"prefill_seconds": 0, "draft_seconds": 0, "target_seconds": 0, "total_seconds": 0} == \
        vars(loop.stats) | {"prefill_seconds": 0, "draft_seconds": 0, "target_seconds": 0, "total_seconds": 0}
    assert s.model_rounds + s.lookup_rounds == s.rounds and sum(s.accepted_histogram) == s.rounds
    assert s.model_proposed + s.lookup_proposed == s.proposed and s.model_accepted + s.lookup_accepted == s.accepted
    assert s.lookup_rounds == 0 if drafter == "model" else s.lookup_rounds > 0 or prompt is PROMPT
    assert s.model_rounds == 0 if drafter == "lookup" else s.model_rounds > 0


class CountingLookup(PromptLookup):
    """PromptLookup that counts the proposals it completes after a draft model's tokens."""

    handovers = 0

    def propose(self, k, after=(), resume=True):
        proposal = super().propose(k, after, resume)
        CountingLookup.handovers += bool(after) and bool(proposal.tokens)
        return proposal


@pytest.mark.parametrize("prompt", [PROMPT, REPETITIVE], ids=["prompt", "repetitive"])
def test_the_hybrid_hands_a_round_over_to_lookup_alike_in_every_front_end(pair, prompt, monkeypatch):
    """A model round that lookup completes once the drafts end with a match: greedy output as the
    target's alone, and the same tokens and counts from the Python loop, NativeRunner and
    spec-edge-run, sampled too (each front end hands over at the same step, or the seeds' draws
    part)."""
    import spec_edge.runtime
    monkeypatch.setattr(spec_edge.runtime, "PromptLookup", CountingLookup)
    settings = dict(drafter="hybrid", min_ngram=1, min_match=1)
    flags = ["--drafter", "hybrid", "--min-ngram", "1", "--min-match", "1"]
    loop, native = PteSpeculativeDecoder(pair / "pair", **settings), spec_edge.NativeRunner(pair / "pair", **settings)
    CountingLookup.handovers = 0
    assert loop.generate(prompt, 60) == native.generate(prompt, 60) == loop.generate(prompt, 60, speculative=False)
    sampled = loop.generate(prompt, 60, **SAMPLED)
    assert CountingLookup.handovers > 0
    assert native.generate(prompt, 60, **SAMPLED) == sampled
    assert NATIVE.tokens(pair / "pair", "--max-new", "60", *flags, *SAMPLED_FLAGS, prompt=prompt) == sampled
    assert vars(native.stats) | {"prefill_seconds": 0, "draft_seconds": 0, "target_seconds": 0, "total_seconds": 0} \
        == vars(loop.stats) | {"prefill_seconds": 0, "draft_seconds": 0, "target_seconds": 0, "total_seconds": 0}


def test_every_drafter_decodes_the_default_pair_greedily_as_its_target_alone(default_programs):
    """The shipped pair, a held-out prompt and an edit of code in the prompt (what lookup is for)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_drafters import FUNCTIONS, edit_prompt
    tokenizer = spec_edge.NativeTokenizer(default_programs / "tokenizer.json")
    prompts = [tokenizer.encode(json.loads((DEFAULT_PAIR / "prompts.json").read_text())[0]),
               tokenizer.encode(edit_prompt(*FUNCTIONS[0]))]
    for drafter, adaptive in SETTINGS:
        native = spec_edge.NativeRunner(default_programs, drafter=drafter, adaptive_k=adaptive)
        for prompt in prompts:
            assert native.generate(prompt, 48) == native.generate(prompt, 48, speculative=False), (drafter, adaptive)


@pytest.mark.parametrize("costs,per_round", [((5.0, 5.0, 1.0), 3), ((1.0, 5.0, 5.0), 1)])
def test_verify_costs_set_adaptive_k_alike_in_every_front_end(pair, tmp_path, costs, per_round):
    """Verify costs under which one K is by far the cheapest: adaptive K proposes that many in
    every round, with the same tokens from the Python loop, NativeRunner and spec-edge-run."""
    settings = dict(adaptive_k=True, verify_costs=costs)
    loop, native = PteSpeculativeDecoder(pair / "pair", **settings), spec_edge.NativeRunner(pair / "pair", **settings)
    sampled = loop.generate(PROMPT, 40, **SAMPLED)
    assert loop.stats.proposed == per_round * loop.stats.rounds
    assert native.generate(PROMPT, 40, **SAMPLED) == sampled
    flags = ["--adaptive-k", "--verify-costs", ",".join(map(str, costs)), "--stats-json", str(tmp_path / "s.json")]
    assert NATIVE.tokens(pair / "pair", "--max-new", "40", *flags, *SAMPLED_FLAGS, prompt=PROMPT) == sampled
    assert json.loads((tmp_path / "s.json").read_text())["proposed"] == native.stats.proposed == loop.stats.proposed
    assert native.generate(PROMPT, 40) == loop.generate(PROMPT, 40, speculative=False)


def test_measured_step_costs_are_what_spec_edge_run_calibrate_prints(pair, tmp_path):
    """Each step's cost on this machine, from NativeRunner and as spec-edge-run's flags, which
    load and decode as the target alone; lookup has no draft step to cost."""
    native = spec_edge.NativeRunner(pair / "pair")
    costs = native.measure_step_costs(repeats=3)
    assert costs["context"] == 96 - K - 1  # 128 tokens, fewer where the context is shorter
    assert len(costs["verify_costs"]) == K and min(costs["verify_costs"]) > 0 and costs["draft_step_cost"] > 0
    assert costs["decode_step_seconds"] > 0
    assert native.measure_step_costs(PROMPT, repeats=1)["context"] == len(PROMPT)
    sampled = native.measure_step_costs(PROMPT, temperature=0.9, filters=spec_edge.Filters(top_k=20), repeats=1)
    assert len(sampled["verify_costs"]) == K and min(sampled["verify_costs"]) > 0
    assert native.stats.rounds == 0  # the timed steps were no generation
    target_only = native.generate(PROMPT, 30, speculative=False)
    result = NATIVE.run("--model-dir", str(pair / "pair"), "--calibrate", "--stats-json", str(tmp_path / "c.json"))
    flags = result.stdout.decode().split()
    assert flags[0::2] == ["--draft-step-cost", "--verify-costs"] and len(flags[3].split(",")) == K, flags
    assert json.loads((tmp_path / "c.json").read_text())["context"] == costs["context"]
    assert NATIVE.tokens(pair / "pair", "--max-new", "30", "--adaptive-k", *flags, prompt=PROMPT) == target_only
    lookup = spec_edge.NativeRunner(pair / "pair", drafter="lookup").measure_step_costs(repeats=1)
    assert lookup["draft_step_cost"] == 0 and len(lookup["verify_costs"]) == K
    for bad, message in ((dict(repeats=0), "repeats: expected >= 1, got 0"),
                         (dict(prompt_ids=[1] * 93), r"prompt \(93 tokens\) \+ max_new \(0\) \+ K\+1 \(4\)")):
        with pytest.raises(ValueError, match=message):
            native.measure_step_costs(**bad)


def test_lookup_needs_no_draft_program_and_the_others_say_they_do(pair, tmp_path):
    target_only = tmp_path / "target_only"
    shutil.copytree(pair / "pair", target_only)
    (target_only / "draft.pte").unlink()
    want = PteSpeculativeDecoder(pair / "pair", drafter="lookup").generate(REPETITIVE, 30, **SAMPLED)
    assert PteSpeculativeDecoder(target_only, drafter="lookup").generate(REPETITIVE, 30, **SAMPLED) == want
    assert spec_edge.NativeRunner(target_only, drafter="lookup").generate(REPETITIVE, 30, **SAMPLED) == want
    assert NATIVE.tokens(target_only, "--max-new", "30", "--drafter", "lookup", *SAMPLED_FLAGS,
                         prompt=REPETITIVE) == want
    for drafter in ("model", "hybrid"):
        for make in (PteSpeculativeDecoder, spec_edge.NativeRunner):
            with pytest.raises(ProgramError, match=f"draft.pte: not found; drafter {drafter} needs the draft model"):
                make(target_only, drafter=drafter)
        result = NATIVE.run("--model-dir", str(target_only), "--prompt-ids", "1,2", "--drafter", drafter, check=False)
        assert result.returncode == 1 and b"drafter lookup runs on target.pte alone" in result.stderr


@pytest.mark.parametrize("settings,message", [
    (dict(drafter="ngram"), "drafter: expected one of model, lookup, hybrid, got 'ngram'"),
    (dict(drafter="lookup", min_ngram=0), r"min_ngram, max_ngram: expected 1 <= min_ngram <= max_ngram <= 64"),
    (dict(drafter="lookup", min_ngram=3, max_ngram=2), "min_ngram, max_ngram: .* got 3, 2"),
    (dict(drafter="lookup", max_ngram=65), "min_ngram, max_ngram: .* got 2, 65"),
    (dict(drafter="hybrid", min_match=5), r"min_match: expected min_ngram <= min_match <= max_ngram \(2..4\), got 5"),
    (dict(adaptive_k=True, draft_step_cost=float("nan")), "draft_step_cost: expected a cost in"),
    (dict(adaptive_k=True, verify_row_cost=-1.0), "verify_row_cost: expected a cost in"),
    (dict(adaptive_k=True, verify_costs=(1.2, 1.3)), r"verify_costs: expected a cost for each K in 1..3 \(k=3\), "
     r"and at most one for each K the programs verify \(3\), got 2"),
    (dict(adaptive_k=True, verify_costs=(1.2, 1.3, 1.4, 1.5)), r"verify_costs: .* got 4"),
    (dict(adaptive_k=True, k=2, verify_costs=(1.2, 1.3, 1.4, 1.5)), r"verify_costs: expected a cost for each K in "
     r"1..2 \(k=2\), and at most one for each K the programs verify \(3\), got 4"),
    (dict(adaptive_k=True, verify_costs=(1.2, 0.0, 1.4)), r"verify_costs: expected costs in \(0, 1e6\]"),
    (dict(adaptive_k=True, verify_costs=(1.2, float("nan"), 1.4)), r"verify_costs: expected costs in \(0, 1e6\]"),
])
def test_bad_drafting_settings_are_named(pair, settings, message):
    for make in (PteSpeculativeDecoder, spec_edge.NativeRunner):
        with pytest.raises(ValueError, match=message):
            make(pair / "pair", **settings)


@pytest.mark.parametrize("flags,message", [
    (["--drafter", "ngram"], "--drafter: expected one of model, lookup, hybrid, got 'ngram'"),
    (["--drafter", "lookup", "--min-ngram", "0"], r"--min-ngram: expected an integer in \[1, 64\]"),
    (["--drafter", "lookup", "--min-ngram", "3", "--max-ngram", "2"], "min_ngram, max_ngram: .* got 3, 2"),
    (["--drafter", "hybrid", "--min-match", "65"], r"--min-match: expected an integer in \[1, 64\]"),
    (["--drafter", "hybrid", "--min-match", "6"], r"min_match: expected min_ngram <= min_match <= max_ngram"),
    (["--adaptive-k", "--k-max", "9"], "k: the programs were exported for K up to 3, got k=9"),
    (["--adaptive-k", "--verify-costs", "1.2,1.3"], r"verify_costs: expected a cost for each K in 1..3 \(k=3\), .* "
     r"got 2"),
    (["--adaptive-k", "--k-max", "2", "--verify-costs", "1.2,1.3,1.4,1.5"], r"verify_costs: expected a cost for each "
     r"K in 1..2 \(k=2\), and at most one for each K the programs verify \(3\), got 4"),
    (["--adaptive-k", "--verify-costs", "1.2,x,1.4"], "--verify-costs: expected a number, got 'x'"),
    (["--adaptive-k", "--verify-costs", "1.2,-1,1.4"], r"verify_costs: expected costs in \(0, 1e6\]"),
    (["--adaptive-k", "--draft-step-cost", "nan"], r"draft_step_cost: expected a cost in \[0, 1e6\]"),
])
def test_bad_drafting_flags_are_a_message_and_an_exit_status(pair, flags, message):
    result = NATIVE.run("--model-dir", str(pair / "pair"), "--prompt-ids", "1,2", *flags, check=False)
    assert result.returncode in (1, 2) and __import__("re").search(message, result.stderr.decode()), result.stderr


def test_stats_json_reports_each_drafter(pair, tmp_path):
    NATIVE.tokens(pair / "pair", "--max-new", "30", "--drafter", "hybrid", "--min-match", "2", "--stats-json",
                  str(tmp_path / "s.json"), prompt=REPETITIVE)
    stats = json.loads((tmp_path / "s.json").read_text())
    native = spec_edge.NativeRunner(pair / "pair", drafter="hybrid", min_match=2)
    native.generate(REPETITIVE, 30)
    for name in ("model_rounds", "model_proposed", "model_accepted", "lookup_rounds", "lookup_proposed",
                 "lookup_accepted", "plain_steps"):
        assert stats[name] == getattr(native.stats, name)
    assert stats["lookup_rounds"] > 0 and stats["model_rounds"] > 0


@pytest.mark.parametrize("drafter", ["lookup", "hybrid"])
def test_sampled_lookup_keeps_the_target_distribution(pair, drafter):
    """The first token of the first round, over seeds, follows the target's filtered law, although
    lookup proposes the same tokens every time; verifying those proposals as if the draft were
    the target (the control: every proposal accepted) fails the same test."""
    native = spec_edge.NativeRunner(pair / "pair", drafter=drafter, min_match=2)
    T, f, n = 1.2, spec_edge.Filters(top_k=30), 3000
    firsts = [native.generate(REPETITIVE, 1, temperature=T, filters=f, seed=s)[0] for s in range(n)]
    assert native.stats.lookup_rounds == 1
    loop = PteSpeculativeDecoder(pair / "pair")
    loop._prefill(loop.target["prefill"], REPETITIVE, 0, len(REPETITIVE) - 1)
    logits = loop.target["logits"].execute([torch.tensor([REPETITIVE[-1:]]), torch.tensor([len(REPETITIVE) - 1])])[0]
    law = filtered_law(logits[0, -1].numpy(), T, 30, 1.0, 0.0)
    counts = np.bincount(firsts, minlength=48)
    assert chisquare_pvalue(counts, law) > 1e-4
    proposed = PromptLookup(2, 4)
    proposed.extend(REPETITIVE)
    control = np.bincount([proposed.propose(K).tokens[0]] * n, minlength=48)
    assert chisquare_pvalue(control, law) < 1e-4


@every_jvm
@pytest.mark.parametrize("drafter,adaptive,costs", [("lookup", True, ()), ("hybrid", False, ()),
                                                    ("hybrid", True, (5.0, 5.0, 1.0))])
def test_the_java_api_gives_the_clis_tokens(jvm, classes, pair, drafter, adaptive, costs):
    flags = ["--verify-costs", ",".join(map(str, costs))] if costs else []
    cli = NATIVE.tokens(pair / "pair", "--max-new", "40", *cli_flags(drafter, adaptive), *flags, *JAVA_SAMPLED_FLAGS,
                        prompt=REPETITIVE)
    tokens, stats = driver_tokens(jvm, classes, pair / "pair", 0, 40, True, JAVA_SAMPLED, REPETITIVE,
                                  (drafter, adaptive, *([",".join(map(str, costs))] if costs else [])))
    assert tokens == cli
    fields = dict(item.split("=", 1) for item in stats.split())
    native = spec_edge.NativeRunner(pair / "pair", drafter=drafter, adaptive_k=adaptive, verify_costs=costs)
    native.generate(REPETITIVE, 40, temperature=0.8, filters=spec_edge.Filters(top_k=20, top_p=0.9,
                                                                               repetition_penalty=1.1), seed=5)
    for name in ("model_rounds", "model_proposed", "model_accepted", "lookup_rounds", "lookup_proposed",
                 "lookup_accepted", "plain_steps"):
        assert int(fields[name]) == getattr(native.stats, name), name
    assert int(fields["lookup_rounds"]) > 0
