"""The speculative loop over exported draft/target programs, through ExecuTorch's runtime."""

from __future__ import annotations

import copy
import json
import math
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import spec_edge
from spec_edge import Filters
from filter_ref import filtered_law
from small_pair import K, PROMPT, configs, embedding_configs, export_embedding_pair
from stats_utils import chisquare_pvalue

pytest.importorskip("executorch")
from spec_edge.export import (ModelConfig, build_model, export_pair, quantize_model,  # noqa: E402
                               quantize_token_embedding)
from spec_edge.manifest import DRAFT_STEP_TOKENS  # noqa: E402
from spec_edge.drafters import Drafting  # noqa: E402
from spec_edge.runtime import PteSpeculativeDecoder, ProgramError  # noqa: E402

TARGET, DRAFT = configs()


def test_export_writes_the_programs_and_manifest(pair):
    manifest = json.loads((pair / "pair" / "manifest.json").read_text())
    assert {p.name for p in (pair / "pair").iterdir()} >= {"draft.pte", "target.pte", "verify.pte", "manifest.json"}
    assert manifest["k"] == K and manifest["vocab_size"] == 48 and set(manifest["programs"]) == {
        "draft.pte", "target.pte", "verify.pte"}


def test_the_output_layer_runs_on_the_last_row_only_where_one_row_is_read():
    """Prefill and the draft step read the last token's logits: their output layer (the last
    linear) takes one row whatever the chunk; the logits method's takes every row."""
    from spec_edge.export import _DraftStep, _export, _Logits, _Prefill, sampling_example
    model = build_model(TARGET, seed=1)
    tokens, pos = torch.zeros(1, 5, dtype=torch.long), torch.tensor([0])
    for wrapper, args, rows in ((_Prefill, (tokens, pos), 1), (_DraftStep, (tokens, pos, *sampling_example(TARGET)), 1),
                                (_Logits, (tokens, pos), 5)):
        linears = [n for n in _export(wrapper(model), args).graph.nodes if n.target == torch.ops.aten.linear.default]
        assert linears[-1].args[0].meta["val"].numel() == rows * TARGET.dim, wrapper.__name__


def test_greedy_equals_target_only_decoding_through_the_same_program(pair):
    dec = PteSpeculativeDecoder(pair / "pair")
    spec = dec.generate(PROMPT, 40)
    assert dec.stats.rounds > 0 and dec.stats.new_tokens == 40
    assert spec == dec.generate(PROMPT, 40, speculative=False)


@pytest.mark.parametrize("k", range(1, K))
def test_any_k_up_to_the_exported_one_runs_the_same_programs(pair, k):
    dec = PteSpeculativeDecoder(pair / "pair", k=k)
    assert dec.generate(PROMPT, 30) == dec.generate(PROMPT, 30, speculative=False)
    assert len(dec.stats.accepted_histogram) == k + 1


@pytest.mark.parametrize("exported_k", [1, 2])
def test_a_pair_exported_for_a_small_k_runs_every_k_up_to_it(tmp_path, exported_k):
    """K = 1 and 2 once failed to export: the tracer specialized the verify step's k to one value.
    Both loops decode them, greedy output equal to target-only."""
    target, draft = configs()
    export_pair(build_model(target, seed=1), target, build_model(draft, seed=2), draft, exported_k, tmp_path,
                prefill_chunk=4, progress=False)
    assert json.loads((tmp_path / "manifest.json").read_text())["k"] == exported_k
    for k in range(1, exported_k + 1):
        dec = PteSpeculativeDecoder(tmp_path, k=k)
        tokens = dec.generate(PROMPT, 24)
        assert tokens == dec.generate(PROMPT, 24, speculative=False)
        assert len(dec.stats.accepted_histogram) == k + 1
        assert spec_edge.NativeRunner(tmp_path, k=k).generate(PROMPT, 24) == tokens


def test_a_draft_equal_to_the_target_is_always_accepted(pair):
    dec = PteSpeculativeDecoder(pair / "self")
    spec = dec.generate(PROMPT, 41)
    assert dec.stats.accepted_histogram[K] == dec.stats.rounds  # every round keeps all K (rollback-free path)
    assert spec == dec.generate(PROMPT, 41, speculative=False)


def test_the_program_logits_equal_the_eager_model(pair):
    dec = PteSpeculativeDecoder(pair / "pair")
    eager = build_model(TARGET, seed=1)
    with torch.no_grad():
        want = eager(torch.tensor([PROMPT[:4]]), {"input_pos": torch.tensor([0])})
    got = dec.target["logits"].execute([torch.tensor([PROMPT[:4]]), torch.tensor([0])])[0]
    assert torch.allclose(got, want, atol=1e-4)


def test_sampled_decoding_is_reproducible_per_seed(pair):
    dec = PteSpeculativeDecoder(pair / "pair")
    f = spec_edge.Filters(top_k=20, top_p=0.9, repetition_penalty=1.2)
    a = dec.generate(PROMPT, 30, temperature=0.8, filters=f, seed=3)
    assert a == dec.generate(PROMPT, 30, temperature=0.8, filters=f, seed=3)
    assert a != dec.generate(PROMPT, 30, temperature=0.8, filters=f, seed=4)


def test_sampled_decoding_keeps_the_target_distribution(pair):
    """The first token of a speculative round, over seeds, is distributed as the target's filtered
    next-token law; the unfiltered law (the control) fails the same test."""
    dec = PteSpeculativeDecoder(pair / "pair")
    T, f = 1.3, spec_edge.Filters(top_k=30, top_p=0.95)
    n = 2000
    firsts = [dec.generate(PROMPT, 1, temperature=T, filters=f, seed=s)[0] for s in range(n)]
    prefill = dec.target["prefill"]
    prefill.execute([torch.tensor([PROMPT[:4]]), torch.tensor([0])])
    logits = prefill.execute([torch.tensor([PROMPT[4:]]), torch.tensor([4])])[0][0]
    law = filtered_law(logits.numpy(), T, 30, 0.95, 0.0)
    counts = np.bincount(firsts, minlength=48)
    assert chisquare_pvalue(counts, law) > 1e-4
    assert chisquare_pvalue(counts, filtered_law(logits.numpy(), 0.5, 0, 1.0, 0.0)) < 1e-4


def test_a_draft_over_part_of_the_vocabulary_keeps_the_target_distribution(tmp_path):
    """A draft restricted to 16 of 48 ids (spec_edge.draft_vocab) proposes only those, yet the
    output is the target's: greedy equals target-only decoding, and sampled first tokens follow
    the target's law, tokens outside the subset included; the control (the target's law
    restricted to the subset, what a draft-side sampler alone would give) fails."""
    ids = list(range(0, 48, 3))
    out = export_pair(build_model(TARGET, seed=1), TARGET, build_model(DRAFT, seed=2), DRAFT, K, tmp_path,
                      prefill_chunk=4, draft_vocab=ids, progress=False)
    assert json.loads((out / "manifest.json").read_text())["draft_vocab"] == 16
    dec = PteSpeculativeDecoder(out)
    sampling = dec.sampling_inputs(1.0, Filters(), PROMPT[:2], 0, 0)
    token, row = dec.draft["draft_step"].execute([torch.tensor([PROMPT[:2]]), torch.tensor([0]), *sampling])
    outside = torch.ones(48, dtype=torch.bool)
    outside[ids] = False
    assert int(token[0]) in ids and torch.isinf(row[0, outside]).all() and torch.isfinite(row[0, ids]).all()
    assert dec.generate(PROMPT, 30) == dec.generate(PROMPT, 30, speculative=False)
    assert spec_edge.NativeRunner(out).generate(PROMPT, 20, temperature=0.9, seed=4) == dec.generate(
        PROMPT, 20, temperature=0.9, seed=4)
    T, n = 1.3, 2000
    firsts = [dec.generate(PROMPT, 1, temperature=T, seed=s)[0] for s in range(n)]
    prefill = dec.target["prefill"]
    prefill.execute([torch.tensor([PROMPT[:4]]), torch.tensor([0])])
    logits = prefill.execute([torch.tensor([PROMPT[4:]]), torch.tensor([4])])[0][0].numpy()
    counts = np.bincount(firsts, minlength=48)
    assert counts[outside.numpy()].sum() > 0
    assert chisquare_pvalue(counts, filtered_law(logits, T, 0, 1.0, 0.0)) > 1e-4
    restricted = filtered_law(logits, T, 0, 1.0, 0.0) * ~outside.numpy()
    assert chisquare_pvalue(counts, restricted / restricted.sum()) < 1e-4
    with pytest.raises(ValueError, match=r"draft_vocab: expected distinct token ids in \[0, 48\)"):
        export_pair(build_model(TARGET), TARGET, build_model(DRAFT), DRAFT, K, tmp_path / "bad", draft_vocab=[1, 48])
    with pytest.raises(ValueError, match="draft_vocab: a number of tokens needs the tokenizer"):
        export_pair(build_model(TARGET), TARGET, build_model(DRAFT), DRAFT, K, tmp_path / "bad", draft_vocab=16)


def test_frequent_token_ids_rank_a_corpus_and_keep_the_special_tokens(tmp_path):
    from tokenizers import Tokenizer
    from tokenizer_families import write_family
    from spec_edge.draft_vocab import frequent_token_ids
    path = write_family("qwen2", tmp_path / "tok")
    tok = Tokenizer.from_file(str(path))
    (tmp_path / "a.py").write_text("return x\n" * 50 + "import os\n" * 20 + "pass\n")
    ids = frequent_token_ids(path, [tmp_path / "a.py"], 3)
    special = set(tok.get_added_tokens_decoder())
    assert special and special <= set(ids) and ids == sorted(ids)
    ranked = [i for i in ids if i not in special]
    counts = Counter(tok.encode((tmp_path / "a.py").read_text()).ids)
    assert len(ranked) == 3 and min(counts[i] for i in ranked) >= sorted(counts.values())[-3]
    assert not set(tok.encode("pass").ids) & set(ranked)  # once, against 50 and 20
    # More than the corpus holds: the lowest ids it lacks (BPE merge order) make up the rest.
    ids = frequent_token_ids(path, [tmp_path / "a.py"], 20)
    seen = set(counts)
    fill = [i for i in range(tok.get_vocab_size()) if i not in seen][:20 - len(seen)]
    assert set(ids) - special == seen | set(fill) and len(set(ids) - special) == 20
    with pytest.raises(ValueError, match="draft_vocab: expected a positive number"):
        frequent_token_ids(path, [tmp_path / "a.py"], 0)
    with pytest.raises(ValueError, match="draft_vocab_corpus: cannot read .*missing.txt"):
        frequent_token_ids(path, [tmp_path / "missing.txt"], 3)


# ---- bad input --------------------------------------------------------------------------------

def copy_pair(pair, tmp_path):
    return shutil.copytree(pair / "pair", tmp_path / "m")


def test_missing_directory_or_manifest(tmp_path):
    with pytest.raises(ProgramError, match="manifest not found"):
        PteSpeculativeDecoder(tmp_path)


def test_corrupted_program_is_refused(pair, tmp_path):
    d = copy_pair(pair, tmp_path)
    data = (d / "target.pte").read_bytes()
    (d / "target.pte").write_bytes(data[: len(data) // 2])
    with pytest.raises(ProgramError, match="target.pte"):
        PteSpeculativeDecoder(d)


def test_program_not_matching_the_manifest_is_refused(pair, tmp_path):
    d = copy_pair(pair, tmp_path)
    shutil.copy(pair / "self" / "draft.pte", d / "draft.pte")
    with pytest.raises(ProgramError, match="does not match the manifest's hash"):
        PteSpeculativeDecoder(d)


@pytest.mark.parametrize("field,value,match", [
    ("vocab_size", 50, "vocabulary 48 does not match the manifest's 50"),
    ("ops", {"spec_edge::verify": 1}, "op versions"),
    ("format", 99, "manifest format 99"),
    ("k", 4, "target.pte: exported for K=3, the manifest says K=4"),
])
def test_manifest_mismatches_are_refused(pair, tmp_path, field, value, match):
    d = copy_pair(pair, tmp_path)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest[field] = value
    (d / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ProgramError, match=match):
        PteSpeculativeDecoder(d)


def test_malformed_manifest(pair, tmp_path):
    d = copy_pair(pair, tmp_path)
    (d / "manifest.json").write_text("{not json")
    with pytest.raises(ProgramError, match="malformed manifest"):
        PteSpeculativeDecoder(d)


def test_k_mismatch_and_bad_generate_arguments(pair):
    for k in (0, K + 1):
        with pytest.raises(ProgramError, match=f"exported for K up to 3, got k={k}"):
            PteSpeculativeDecoder(pair / "pair", k=k)
    dec = PteSpeculativeDecoder(pair / "pair")
    with pytest.raises(ValueError, match="exceeds the context length 96"):
        dec.generate(list(range(40)) * 2, 20)
    with pytest.raises(ValueError, match=r"prompt_ids: ids must be in \[0, 48\)"):
        dec.generate([1, 48], 4)
    with pytest.raises(ValueError, match="prompt_ids: expected at least one token"):
        dec.generate([], 4)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(temperature=1e-39), ValueError, r"temperature\[0\] = 1e-39 is too small: 1 / temperature overflows"),
    (dict(temperature=1e-300), ValueError, "temperature = 1e-300 is too small: it rounds to 0 in float32"),
    (dict(temperature=math.inf), ValueError, r"temperature\[0\] = inf: expected a finite value >= 0"),
    (dict(temperature=1.0, filters=Filters(top_p=math.nan)), ValueError, r"top_p\[0\] = nan: expected a value in"),
    (dict(temperature=1.0, filters=Filters(top_k=-1)), ValueError, r"top_k\[0\] = -1: expected a value >= 0"),
    (dict(temperature=1.0, filters=Filters(top_k=1.5)), TypeError, "filters.top_k: expected an integer, got 1.5"),
    (dict(temperature=1.0, filters=Filters(repetition_penalty=math.inf)), ValueError,
     r"repetition_penalty\[0\] = inf: expected a finite value > 0"),
    (dict(temperature=torch.tensor([0.5])), TypeError, "temperature: expected a number"),
])
def test_bad_sampling_settings_are_named_before_any_program_runs(pair, kwargs, error, match):
    """The ops' own checks and messages, not ExecuTorch's error code from inside a program."""
    with pytest.raises(error, match=match):
        PteSpeculativeDecoder(pair / "pair").generate([1, 2], 4, seed=1, **kwargs)


def test_draft_and_target_vocabularies_must_match_at_export(tmp_path):
    other = ModelConfig(dim=32, n_layers=1, n_heads=2, vocab_size=40, max_context_len=96)
    with pytest.raises(ValueError, match="share a vocabulary: draft V=40, target V=48"):
        export_pair(build_model(TARGET), TARGET, build_model(other), other, K, tmp_path, progress=False)


def test_a_program_without_the_kernels_says_to_load_them(pair):
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from spec_edge.runtime import _load_program, ProgramError\n"
        f"try:\n    _load_program(Path({str(pair / 'pair' / 'target.pte')!r}), {{'verify'}}, None)\n"
        "except ProgramError as e:\n    print(e); sys.exit(3)\n")
    # spec_edge.runtime imports spec_edge (the torch ops) but not the ExecuTorch kernels
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "spec_edge::verify.out" in r.stdout and "spec_edge.executorch.load()" in r.stdout


def test_inspect_lists_methods_operators_and_delegates(pair):
    info = spec_edge.inspect(pair / "pair" / "target.pte")
    assert {"prefill", "logits", "decode_step", "verify", "k", "vocab_size",
            "spec_edge_op_version_verify"} <= set(info.methods)
    assert info.spec_edge_ops == ["spec_edge::attention.out", "spec_edge::sample.out",
                                  "spec_edge::update_cache.out", "spec_edge::verify.out"]
    # No op library beyond spec_edge's: ExecuTorch's LLM ops would need libtorch at run time.
    for name in ("draft.pte", "target.pte"):
        operators = {op for m in spec_edge.inspect(pair / "pair" / name).methods.values() for op in m.operators}
        assert not {op for op in operators if op.startswith("llama::")}, name
    assert "spec_edge::verify.out" in info.methods["verify"].operators
    assert "XnnpackBackend" in info.methods["verify"].delegates
    assert info.methods["verify"].inputs == 11 and info.methods["verify"].outputs == 2
    assert spec_edge.inspect(pair / "pair" / "verify.pte").spec_edge_ops == ["spec_edge::verify.out"]


def test_inspect_rejects_what_is_not_a_program(pair, tmp_path):
    with pytest.raises(ValueError, match="not an ExecuTorch program"):
        spec_edge.inspect(pair / "pair" / "manifest.json")
    data = (pair / "pair" / "target.pte").read_bytes()
    (tmp_path / "cut.pte").write_bytes(data[:2000])
    with pytest.raises(ValueError, match="cut.pte: truncated or corrupted"):
        spec_edge.inspect(tmp_path / "cut.pte")
    with pytest.raises(ValueError, match="cannot read"):
        spec_edge.inspect(tmp_path / "missing.pte")


# One quantized export covers the modes: a 4-bit grouped target with an 8-bit output layer, and a
# draft of its own size with 4-bit weights in groups of 64 (the target's: 32).
QUANTIZED_DRAFT = ModelConfig(dim=64, n_layers=1, n_heads=4, vocab_size=TARGET.vocab_size,
                              max_context_len=TARGET.max_context_len)


@pytest.fixture(scope="session")
def quantized(tmp_path_factory):
    from conftest import shared_dir
    return shared_dir(tmp_path_factory, "quantized", lambda out: export_pair(
        build_model(TARGET, seed=1), TARGET, build_model(QUANTIZED_DRAFT, seed=2), QUANTIZED_DRAFT, K, out,
        prefill_chunk=4, quantize="8da4w", quantize_linears={"output": "8da8w"}, draft_group_size=64, progress=False))


def test_quantized_pair_runs_and_stays_close_to_fp32(quantized, tmp_path):
    target, draft = build_model(TARGET, seed=1), build_model(DRAFT, seed=2)
    assert json.loads((quantized / "manifest.json").read_text())["quantize"] == {
        "target": "8da4w", "draft": "8da4w", "embedding": None, "target_linears": {"output": "8da8w"}}
    dec = PteSpeculativeDecoder(quantized)
    assert dec.generate(PROMPT, 24) == dec.generate(PROMPT, 24, speculative=False)

    def relative_error(model, tokens, got):  # got: the program's logits of the last len(got) tokens
        with torch.no_grad():
            want = model(torch.tensor([tokens]), {"input_pos": torch.tensor([0])})[0, -len(got):]
        return float((got - want).abs().max() / want.abs().max())

    got = dec.target["logits"].execute([torch.tensor([PROMPT[:4]]), torch.tensor([0])])[0][0]
    # Quantized: close to fp32, yet off by far more than float rounding (an fp32 program: ~1e-7).
    assert 1e-4 < relative_error(target, PROMPT[:4], got) < 0.2  # 4-bit weights
    # The output layer 8-bit, the others 4-bit: the eager model under the same transform, and
    # (the control) not the one with every linear 4-bit.
    same = relative_error(quantize_model(copy.deepcopy(target), "8da4w", 32, {"output": "8da8w"}), PROMPT[:4], got)
    all_4bit = relative_error(quantize_model(copy.deepcopy(target), "8da4w", 32), PROMPT[:4], got)
    assert same < 0.02 and all_4bit > 3 * same
    for bad, message in ((dict(quantize="8da4w", quantize_linears={"output": "8da4w"}),
                          r"linears\['output'\]: expected one of \('8da8w', 'fp32'\), got '8da4w'"),
                         (dict(quantize="8da4w", quantize_linears={"layers.0.attention": "fp32"}),
                          "linears: 'layers.0.attention' is not a linear layer of the model"),
                         (dict(quantize="8da4w", quantize_linears={"layers.9.attention.wv": "fp32"}),
                          "linears: 'layers.9.attention.wv' is not a linear layer of the model"),
                         (dict(quantize_linears={"output": "fp32"}),
                          "quantize_linears: sets linears of the quantized target apart; give quantize too")):
        with pytest.raises(ValueError, match=message):
            export_pair(target, TARGET, draft, DRAFT, K, tmp_path / "bad", progress=False, **bad)


def test_quantized_token_embeddings(embedding_pair, tmp_path):
    """4-bit grouped token embeddings (ExecuTorch's quantized embedding kernels): the program equals
    the eager model under the same transform, the embedding takes about a sixth of its fp32
    bytes, and the Python loop and NativeRunner (which uses the kernels ExecuTorch's plugin
    registers) decode the same tokens. The command-line runner: tests/test_runner.py."""
    target_config, draft_config = embedding_configs()
    fp32 = export_embedding_pair(tmp_path / "fp32", None)
    assert json.loads((embedding_pair / "manifest.json").read_text())["quantize"]["embedding"] == "4,32"
    saved = (fp32 / "target.pte").stat().st_size - (embedding_pair / "target.pte").stat().st_size
    assert saved > 0.8 * target_config.vocab_size * target_config.dim * 4, saved  # 4 bits + a scale per 32
    target = build_model(target_config, seed=1)
    quantized = quantize_token_embedding(copy.deepcopy(target), "4,32")
    dec = PteSpeculativeDecoder(embedding_pair)
    tokens = torch.tensor([PROMPT[:4]])
    with torch.no_grad():
        want, unquantized = (m(tokens, {"input_pos": torch.tensor([0])}) for m in (quantized, target))
    got = dec.target["logits"].execute([tokens, torch.tensor([0])])[0]
    assert torch.allclose(got, want, atol=1e-4)
    assert (got - unquantized).abs().max() > 1e-3  # the control: 4-bit rows are not the fp32 ones
    greedy = dec.generate(PROMPT, 20)
    assert greedy == dec.generate(PROMPT, 20, speculative=False)
    native = spec_edge.NativeRunner(embedding_pair)
    assert native.generate(PROMPT, 20) == greedy
    assert native.generate(PROMPT, 20, temperature=0.8, seed=3) == dec.generate(PROMPT, 20, temperature=0.8, seed=3)
    draft = build_model(draft_config, seed=2)
    with pytest.raises(ValueError, match=r"quantize_embedding: expected 'BITS,GROUP' with BITS 2, 4 or 8"):
        export_pair(target, target_config, draft, draft_config, K, tmp_path / "bad", quantize_embedding="3,32")
    with pytest.raises(ValueError, match="quantize_embedding: group size 64 does not divide the model dim 32"):
        export_pair(target, target_config, draft, draft_config, K, tmp_path / "bad", quantize_embedding="4,64")


def test_a_program_with_the_same_source_and_settings_is_reused(tmp_path, capsys):
    target = build_model(TARGET, seed=1)
    export_pair(target, TARGET, build_model(DRAFT, seed=2), DRAFT, K, tmp_path, prefill_chunk=4, progress=True)
    inode = (tmp_path / "target.pte").stat().st_ino
    old_draft = (tmp_path / "draft.pte").read_bytes()
    capsys.readouterr()
    # A new draft for the same target: target.pte stays as it is, the draft is exported.
    export_pair(target, TARGET, build_model(DRAFT, seed=3), DRAFT, K, tmp_path, prefill_chunk=4, progress=True)
    printed = capsys.readouterr().out
    assert "target.pte: reused" in printed and "draft.pte: reused" not in printed, printed
    assert (tmp_path / "target.pte").stat().st_ino == inode and (tmp_path / "draft.pte").read_bytes() != old_draft
    dec = PteSpeculativeDecoder(tmp_path)
    assert dec.generate(PROMPT, 16) == dec.generate(PROMPT, 16, speculative=False)
    # Another K changes the target's program; a damaged draft.pte is never reused: both exported.
    flipped = bytearray((tmp_path / "draft.pte").read_bytes())
    flipped[len(flipped) // 2] ^= 1
    (tmp_path / "draft.pte").write_bytes(bytes(flipped))
    export_pair(target, TARGET, build_model(DRAFT, seed=3), DRAFT, K + 1, tmp_path, prefill_chunk=4, progress=True)
    assert "reused" not in capsys.readouterr().out
    assert PteSpeculativeDecoder(tmp_path).generate(PROMPT, 8) == dec.generate(PROMPT, 8)


def test_float16_kv_caches(tmp_path, capsys):
    """kv_cache="fp16": both programs keep their caches in float16 (the bytes said at export and
    in the manifest); the target's logits are the eager model's with float16 caches, and
    speculative decoding stays exact with respect to that target in the Python loop and the C++
    runner."""
    from spec_edge.export import set_kv_cache_dtype
    with pytest.raises(ValueError, match="kv_cache: expected one of fp32, fp16, got 'bf16'"):
        export_pair(build_model(TARGET, seed=1), TARGET, build_model(DRAFT, seed=2), DRAFT, K, tmp_path / "no",
                    kv_cache="bf16", progress=False)
    assert not (tmp_path / "no" / "manifest.json").exists()
    export_pair(build_model(TARGET, seed=1), TARGET, build_model(DRAFT, seed=2), DRAFT, K, tmp_path,
                prefill_chunk=4, kv_cache="fp16", progress=True)
    assert "KV caches (fp16, 96 positions): target 0.0 MiB, draft 0.0 MiB" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    # layers x (keys, values) x KV heads x head dim x positions x 2 bytes
    assert manifest["kv_cache"] == "fp16"
    assert manifest["kv_cache_bytes"] == {"target": 2 * 2 * 4 * 16 * 96 * 2, "draft": 1 * 2 * 2 * 16 * 96 * 2}
    dec = PteSpeculativeDecoder(tmp_path)
    tokens, pos = torch.tensor([PROMPT[:4]]), torch.tensor([0])  # a prefill chunk
    got = dec.target["logits"].execute([tokens, pos])[0]
    eager = {}
    for kv_cache in ("fp16", "fp32"):
        model = build_model(TARGET, seed=1)
        set_kv_cache_dtype(model, kv_cache)
        with torch.no_grad():
            eager[kv_cache] = model(tokens, {"input_pos": pos})
    near, far = (float((got - eager[c]).abs().max()) for c in ("fp16", "fp32"))
    assert near < 1e-4 and far > 10 * near, (near, far)  # the control: float32 caches are further away
    assert dec.generate(PROMPT, 40) == dec.generate(PROMPT, 40, speculative=False)
    native = spec_edge.NativeRunner(tmp_path)
    assert native.generate(PROMPT, 40) == dec.generate(PROMPT, 40)


def test_the_draft_takes_its_own_group_size(quantized, tmp_path, capsys):
    """``draft_group_size`` quantizes the draft's 8da4w weights in groups of its own (here 64
    against the target's 32): the draft's program is the eager draft under that transform, and
    exporting the draft again with the target's groups reuses the target's program."""
    target, draft = build_model(TARGET, seed=1), build_model(QUANTIZED_DRAFT, seed=2)
    dec = PteSpeculativeDecoder(quantized)
    sampling = dec.sampling_inputs(0.0, spec_edge.Filters(), PROMPT[:2], 0, 0)
    _, got = dec.draft["draft_step"].execute([torch.tensor([PROMPT[:2]]), torch.tensor([0]), *sampling])

    def error(group):
        with torch.no_grad():
            want = quantize_model(copy.deepcopy(draft), "8da4w", group)(
                torch.tensor([PROMPT[:2]]), {"input_pos": torch.tensor([0])})[0, -1]
        return float((got.flatten() - want).abs().max() / want.abs().max())
    # Dynamic 8-bit activations round apart from the eager transform's (0.6% here); the control,
    # the target's groups of 32, is 12x further.
    assert error(64) < 0.02 and error(32) > 3 * error(64)
    again = shutil.copytree(quantized, tmp_path / "again")
    export_pair(target, TARGET, draft, QUANTIZED_DRAFT, K, again, prefill_chunk=4, quantize="8da4w",
                quantize_linears={"output": "8da8w"}, progress=True)
    printed = capsys.readouterr().out
    assert "target.pte: reused" in printed and "draft.pte: reused" not in printed, printed
    assert (quantized / "draft.pte").stat().st_size < (again / "draft.pte").stat().st_size  # half the scales
    for bad, message in ((dict(quantize="8da4w", draft_group_size=0), "draft_group_size: expected weights per"),
                         (dict(quantize="8da4w", draft_group_size=True), "draft_group_size: expected weights per"),
                         (dict(quantize="8da4w", draft_group_size=48), "draft_group_size: expected weights per"),
                         (dict(quantize="8da4w", group_size=-32), "group_size: expected weights per"),
                         (dict(draft_group_size=64), "draft_group_size: sets the groups of an 8da4w draft"),
                         (dict(quantize="8da4w", quantize_draft="8da8w", draft_group_size=64),
                          "draft_group_size: sets the groups of an 8da4w draft")):
        with pytest.raises(ValueError, match=message):
            export_pair(target, TARGET, draft, QUANTIZED_DRAFT, K, tmp_path / "bad", progress=False, **bad)
    assert not (tmp_path / "bad").exists()
    # The command line hands --draft-group-size to the same check.
    configs = [tmp_path / "target.json", tmp_path / "draft.json"]
    for path, config in zip(configs, (TARGET, QUANTIZED_DRAFT)):
        path.write_text(json.dumps({"dim": config.dim, "n_layers": config.n_layers, "n_heads": config.n_heads,
                                    "vocab_size": config.vocab_size, "max_context_len": config.max_context_len}))
    cli = Path(__file__).resolve().parents[1] / "export" / "export_pair.py"
    result = subprocess.run([sys.executable, str(cli), "--target", str(configs[0]), "--draft",
                             str(configs[1]), "--out", str(tmp_path / "bad"), "--quantize", "8da4w",
                             "--draft-group-size", "48"], capture_output=True, text=True)
    assert result.returncode == 1 and "export_pair: draft_group_size: expected weights per scale in a positive " \
        "multiple of 32 (XNNPACK's 4-bit groups), got 48" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "bad").exists()


def test_quantize_mode_is_checked(tmp_path):
    for argument in ("quantize", "quantize_draft"):
        with pytest.raises(ValueError, match=f"{argument}: expected one of"):
            export_pair(build_model(TARGET), TARGET, build_model(DRAFT), DRAFT, K, tmp_path, progress=False,
                        **{argument: "4bit"})
        with pytest.raises(ValueError, match=f"{argument}: the quantized linears run on XNNPACK"):
            export_pair(build_model(TARGET), TARGET, build_model(DRAFT), DRAFT, K, tmp_path, progress=False,
                        xnnpack=False, **{argument: "8da8w"})
    with pytest.raises(ValueError, match="^mode: expected one of"):
        quantize_model(build_model(DRAFT), "4bit", 32)


def test_standalone_verify_program_equals_the_eager_op(pair):
    from executorch.runtime import Runtime
    program = Runtime.get().load_program((pair / "pair" / "verify.pte").read_bytes())
    method = program.load_method("verify")
    g = torch.Generator().manual_seed(4)
    target, draft = torch.randn(1, K + 1, 48, generator=g), torch.randn(1, K, 48, generator=g)
    tokens = torch.randint(0, 48, (1, K), generator=g)
    dec = PteSpeculativeDecoder(pair / "pair")
    for T, f in [(0.0, spec_edge.Filters()), (0.9, spec_edge.Filters(10, 0.9, 0.02, 1.3))]:
        for seed in range(5):
            sampling = dec.sampling_inputs(T, f, PROMPT, seed=seed, offset=1)
            got = method.execute([target, draft, tokens, *sampling])
            want = torch.ops.spec_edge.verify(target, draft, tokens, sampling[0], sampling[6], sampling[7], None,
                                              *sampling[1:6])
            assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_programs_carry_their_op_versions_and_shapes(pair):
    from executorch.runtime import Runtime
    program = Runtime.get().load_program((pair / "pair" / "target.pte").read_bytes())
    assert int(program.load_method("k").execute([])[0]) == K
    assert int(program.load_method("vocab_size").execute([])[0]) == 48
    from spec_edge.manifest import OP_VERSIONS
    assert int(program.load_method("spec_edge_op_version_verify").execute([])[0]) == OP_VERSIONS["spec_edge::verify"]


def test_a_program_built_for_another_op_version_is_refused(pair, tmp_path, monkeypatch):
    import spec_edge.manifest
    import spec_edge.runtime
    d = copy_pair(pair, tmp_path)
    newer = dict(spec_edge.manifest.OP_VERSIONS, **{"spec_edge::verify": 99})
    for module in (spec_edge.manifest, spec_edge.runtime):  # the manifest's reader and the programs' check
        monkeypatch.setattr(module, "OP_VERSIONS", newer)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["ops"] = newer  # the manifest agrees; the program itself does not
    (d / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ProgramError, match="built for spec_edge::verify version 2, this spec_edge has version 99"):
        PteSpeculativeDecoder(d)


class _Recorder:
    """Stands in for the programs' methods: records what each call writes into a KV cache
    (token at position) and answers like the real ones."""

    def __init__(self, cache: dict, answer):
        self.cache, self.answer = cache, answer

    def execute(self, inputs):
        tokens, pos = inputs[0][0].tolist(), int(inputs[1][0])
        for i, t in enumerate(tokens):
            self.cache[pos + i] = t
        return self.answer(tokens, pos)


@pytest.mark.parametrize("accepts", [[4, 4, 4, 4, 4, 4], [0, 4, 2, 4, 4, 1, 3], [1, 2, 3, 0, 4]])
@pytest.mark.parametrize("drafting", [Drafting(), Drafting("hybrid", min_ngram=1, max_ngram=2, min_match=1),
                                      Drafting(adaptive_k=True)], ids=["model", "hybrid", "adaptive"])
def test_the_draft_cache_always_holds_the_context_before_it_is_read(accepts, drafting):
    """Every draft step sees, at every earlier position, exactly the tokens of the context (and
    of this round's drafts), whatever the target accepts: the catch-up of the K-th draft token
    after a fully accepted round included, and after the rounds prompt lookup served."""
    k, vocab = 4, 50
    dec = object.__new__(PteSpeculativeDecoder)
    dec.drafting = drafting
    dec.k = dec.max_k = k
    dec.vocab_size, dec.max_context_len, dec.prefill_chunk, dec.external_target = vocab, 96, 4, False
    draft_cache, target_cache, truth, rounds = {}, {}, {}, iter(accepts * 10)

    def draft_step(tokens, pos):
        assert len(tokens) <= DRAFT_STEP_TOKENS, "the draft step takes its last token (or two); prefill catches up"
        for p in range(pos):  # everything before what this call writes
            assert draft_cache[p] == truth[p], f"draft reads position {p}: stale"
        truth.update({pos + i: t for i, t in enumerate(tokens)})
        nxt = (tokens[-1] * 7 + pos) % vocab
        truth[pos + len(tokens)] = nxt  # what the next draft step will feed at that position
        return torch.tensor([nxt]), torch.zeros(1, vocab)

    def verify(tokens, pos):
        n = min(next(rounds), len(tokens) - 1)
        out = tokens[1:n + 1] + [(tokens[n] * 3 + 1) % vocab]  # keep n drafts, then a correction
        truth.update({pos + 1 + i: t for i, t in enumerate(out)})
        return torch.tensor([n]), torch.tensor([out + [-1] * (k - n)])

    dec.draft = {"prefill": _Recorder(draft_cache, lambda t, p: None),
                 "draft_step": _Recorder(draft_cache, draft_step)}
    dec.target = {"prefill": _Recorder(target_cache, lambda t, p: None),
                  "verify": _Recorder(target_cache, verify)}
    prompt = [3, 1, 4, 1, 5, 9]
    truth.update(enumerate(prompt))
    out = dec.generate(prompt, 40)
    assert len(out) == 40 and dec.stats.rounds >= len(accepts)
    assert dec.stats.lookup_rounds > 0 if drafting.drafter == "hybrid" else dec.stats.lookup_rounds == 0


def test_generate_stats_add_up_over_calls():
    from spec_edge.stats import GenerationStats
    total = GenerationStats(accepted_histogram=[0, 0, 0])
    for n in (1, 2):
        total.add(GenerationStats(new_tokens=4 * n, rounds=n, proposed=2 * n, accepted=n, accepted_histogram=[0, n, 0],
                                prefill_seconds=0.5, draft_seconds=0.25 * n, target_seconds=n, total_seconds=2.0 * n))
    assert (total.new_tokens, total.rounds, total.proposed, total.accepted) == (12, 3, 6, 3)
    assert (total.prefill_seconds, total.draft_seconds, total.target_seconds, total.total_seconds) == (1.0, 0.75, 3.0, 6.0)
    assert total.accepted_histogram == [0, 3, 0]
    assert total.tokens_per_second == 12 / 5.0 and total.acceptance_rate == 0.5
    target_only = GenerationStats()  # keeps no histogram
    target_only.add(GenerationStats(new_tokens=3, accepted_histogram=[1, 0, 0]))
    assert target_only.new_tokens == 3 and target_only.accepted_histogram == []
