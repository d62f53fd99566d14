"""GGUF files -> ExecuTorch Llama models, tokenizers and .pte pairs, against transformers.

The files are small random models the tests write as llama.cpp's converter does
(tests/gguf_files.py): llama with tied embeddings, qwen2 untied with biases, weights in F32, F16,
Q8_0 and Q4_K. The reference is transformers reading the same file (``gguf_file=``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("executorch")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")  # transformers loads GGUF weights with it
transformers = pytest.importorskip("transformers")

import spec_edge  # noqa: E402
import spec_edge.export as se_export  # noqa: E402
import spec_edge.gguf_checkpoint as se_gguf  # noqa: E402
import gguf  # noqa: E402
from gguf_files import Q, with_metadata_value, with_tensor_offset, write_gguf  # noqa: E402
from spec_edge.export import ModelConfig, build_model, export_pair  # noqa: E402
from spec_edge.gguf_checkpoint import load_gguf, save_gguf_tokenizer  # noqa: E402
from spec_edge.hf import CheckpointError  # noqa: E402
from spec_edge.runtime import PteSpeculativeDecoder  # noqa: E402
from test_hf import LLAMA3_ROPE, transformers_greedy  # noqa: E402
from tokenizer_families import FAMILIES, HARD, random_texts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = FAMILIES["qwen2"](vocab_size=300)
VOCAB = TOKENIZER.get_vocab_size()
QWEN2 = dict(pre="qwen2", eos="<|im_end|>")


def random_model(arch: str, dim: int = 64, seed: int = 0, **config):
    """A random transformers model (biases, norms and sharp attention randomized, so that every
    tensor's layout matters)."""
    torch.manual_seed(seed)
    make = transformers.LlamaConfig if arch == "llama" else transformers.Qwen2Config
    options = dict(vocab_size=VOCAB, hidden_size=dim, intermediate_size=2 * dim, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                   tie_word_embeddings=arch == "llama")
    model = transformers.AutoModelForCausalLM.from_config(make(**{**options, **config})).eval()
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "bias" in key or "norm" in key:
                p.normal_(1.0 if "norm" in key else 0.0, 0.5)
            elif "q_proj" in key or "k_proj" in key:
                p.normal_(0.0, 0.3)
    return model


def logits(config: ModelConfig, state: dict, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return build_model(config, state)(ids, {"input_pos": torch.tensor([0])})


def transformers_logits(path: Path, ids: torch.Tensor) -> torch.Tensor:
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                              dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=ids).logits


IDS = torch.randint(1, VOCAB, (1, 40), generator=torch.Generator().manual_seed(1))  # no 0: the pad id of transformers_greedy
CASES = [("llama", Q.F32, 64), ("llama", Q.F16, 64), ("llama", Q.Q8_0, 64), ("llama", Q.Q4_K, 256),
         ("qwen2", Q.F32, 64), ("qwen2", Q.Q8_0, 64), ("qwen2", Q.Q4_K, 256)]


@pytest.mark.parametrize("arch,kind,dim", CASES, ids=[f"{a}-{k.name}" for a, k, _ in CASES])
def test_the_model_of_a_gguf_file_equals_transformers_on_it(tmp_path, arch, kind, dim):
    source = random_model(arch, dim)
    path = write_gguf(tmp_path / "model.gguf", source, TOKENIZER, **QWEN2, kind=kind)
    config, state = load_gguf(path, max_context_len=64)
    got, want = logits(config, state, IDS), transformers_logits(path, IDS)
    assert (got - want).abs().max() < 1e-4 * max(1.0, want.abs().max().item())
    if kind == Q.F32:  # the file is the model: llama's permuted rows are put back right
        with torch.no_grad():
            assert (got - source(input_ids=IDS).logits).abs().max() < 1e-4
    # Tied files name one tensor twice; untied ones keep two.
    tied = state["output.weight"] is state["tok_embeddings.weight"]
    assert tied == (arch == "llama")


def llama_cpp_rope_freqs(head_dim: int, theta: float, rope: dict) -> np.ndarray:
    """The divisors convert_hf_to_gguf.py writes as rope_freqs for a llama3 rope config."""
    factor, low, high, old = (rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"],
                              rope["original_max_position_embeddings"])
    out = []
    for freq in 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim):
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def test_llama3_scaled_rope_comes_from_the_rope_freqs_tensor(tmp_path):
    source = random_model("llama", head_dim=32, max_position_embeddings=131072, rope_scaling=LLAMA3_ROPE)
    freqs = llama_cpp_rope_freqs(32, source.config.rope_parameters["rope_theta"], LLAMA3_ROPE)
    config, state = load_gguf(write_gguf(tmp_path / "scaled.gguf", source, TOKENIZER, **QWEN2, rope_freqs=freqs), 64)
    assert config.rope_scale_factor == 32.0
    with torch.no_grad():
        want = source(input_ids=IDS).logits
    assert (logits(config, state, IDS) - want).abs().max() < 1e-4
    # Control: the same weights without the tensor are another model at these sizes.
    plain, _ = load_gguf(write_gguf(tmp_path / "plain.gguf", source, TOKENIZER, **QWEN2), 64)
    assert plain.rope_scale_factor is None and (logits(plain, state, IDS) - want).abs().max() > 1e-3
    other = llama_cpp_rope_freqs(32, source.config.rope_parameters["rope_theta"], {**LLAMA3_ROPE, "high_freq_factor": 2.0})
    with pytest.raises(CheckpointError, match="rope_freqs.weight is not Llama 3's RoPE scaling"):
        load_gguf(write_gguf(tmp_path / "other.gguf", source, TOKENIZER, **QWEN2, rope_freqs=other), 64)


# (family, llama.cpp pre-tokenizer name, EOS, BOS the tokenizer adds, the tokens that end generation)
TOKENIZERS = [("qwen2", "qwen2", "<|im_end|>", None, ["<|im_end|>", "<|endoftext|>"]),
              ("llama3", "llama-bpe", "<|eot_id|>", "<|begin_of_text|>", ["<|eot_id|>", "<|end_of_text|>"]),
              ("smollm2", "smollm", "<|im_end|>", None, ["<|im_end|>", "<|endoftext|>"])]


@pytest.mark.parametrize("family,pre,eos,bos,ends", TOKENIZERS, ids=[t[0] for t in TOKENIZERS])
def test_the_tokenizer_from_gguf_metadata_tokenizes_as_the_original(tmp_path, family, pre, eos, bos, ends):
    import unicodedata
    original = FAMILIES[family]()
    model = random_model("llama", dim=32, vocab_size=original.get_vocab_size())
    path = write_gguf(tmp_path / "model.gguf", model, original, pre, eos, bos=bos)
    built = save_gguf_tokenizer(path, tmp_path / "tokenizer")
    # Exactly the file's tokens: transformers' own build adds <|endoftext|> to a Llama 3 vocabulary.
    assert built.get_vocab_size() == original.get_vocab_size()
    assert json.loads((tmp_path / "tokenizer" / "tokenizer_config.json").read_text())["eos_token"] == eos
    # Generation ends where llama.cpp's does: the EOS first, then the other end-of-text tokens.
    generation = json.loads((tmp_path / "tokenizer" / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [original.token_to_id(t) for t in ends]
    assert spec_edge.NativeTokenizer(tmp_path / "tokenizer" / "tokenizer.json").eos_ids == generation["eos_token_id"]
    # The directory is one transformers loads again (for its chat template, say).
    reloaded = transformers.AutoTokenizer.from_pretrained(tmp_path / "tokenizer")
    assert reloaded.encode(HARD[0], add_special_tokens=False) == built.encode(HARD[0], add_special_tokens=False).ids
    for text in HARD + random_texts(300, seed=3):
        if family == "qwen2":  # a GGUF file has no normalizer: Qwen2's NFC step is not in it (nor in llama.cpp)
            text = unicodedata.normalize("NFC", text)
        ids = original.encode(text).ids
        assert built.encode(text).ids == ids, text
        assert built.decode(ids, skip_special_tokens=False) == original.decode(ids, skip_special_tokens=False)


@pytest.fixture(scope="module")
def gguf_pair(tmp_path_factory):
    """A tied llama Q8_0 target and an untied qwen2 F16 draft sharing a tokenizer, exported by
    the command line with float32 caches (``pte``, compared with transformers' float32) and with
    the default float16 ones (``pte16``)."""
    root = tmp_path_factory.mktemp("gguf")
    target = write_gguf(root / "target.gguf", random_model("llama", seed=1), TOKENIZER, **QWEN2, kind=Q.Q8_0)
    draft = write_gguf(root / "draft.gguf", random_model("qwen2", seed=2), TOKENIZER, **QWEN2, kind=Q.F16)
    for out, flags in (("pte", ["--kv-cache", "fp32"]), ("pte16", [])):
        result = subprocess.run([sys.executable, str(ROOT / "export" / "export_pair.py"), "--gguf-target",
                                 str(target), "--gguf-draft", str(draft), "--k", "4", "--max-context", "96",
                                 "--out", str(root / out), *flags], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-3000:]
    return root


def test_the_command_line_refuses_four_bit_output_without_keep_gguf_precision(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "export" / "export_pair.py"), "--gguf-target", "t.gguf",
                             "--gguf-draft", "d.gguf", "--quantize", "8da4w", "--four-bit-output",
                             "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert result.returncode == 2
    assert "--four-bit-output sets the output layer of a --keep-gguf-precision export apart" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_gguf_pair_runs_as_pte_and_matches_transformers(gguf_pair):
    target = gguf_pair / "target.gguf"
    reference = transformers.AutoModelForCausalLM.from_pretrained(gguf_pair, gguf_file=target.name,
                                                                  dtype=torch.float32).eval()
    prompt = IDS[0, :12].tolist()
    dec = PteSpeculativeDecoder(gguf_pair / "pte")
    with torch.no_grad():
        want = reference(input_ids=torch.tensor([prompt])).logits
    got = dec.target_logits(torch.tensor([prompt[:5]]), torch.tensor([0]))
    assert (got - want[:, :5]).abs().max() < 1e-4
    with pytest.raises(ValueError, match=r"tokens: the logits method takes 1..K\+1 = 5 tokens, got 12"):
        dec.target_logits(torch.tensor([prompt]), torch.tensor([0]))
    assert dec.generate(prompt, 24) == transformers_greedy(reference, prompt, 24)
    files = sorted(p.name for p in (gguf_pair / "pte").iterdir())
    assert files == ["draft.pte", "generation_config.json", "manifest.json", "target.pte", "tokenizer.json",
                     "tokenizer_config.json", "verify.pte"]


def test_a_gguf_pair_exports_float16_caches_by_default(gguf_pair):
    """The default for GGUF files: float16 caches, the target's logits within 2e-3 of
    transformers' float32 (against 1e-4 with float32 caches), decoding exact with respect to it."""
    manifest = json.loads((gguf_pair / "pte16" / "manifest.json").read_text())
    assert manifest["kv_cache"] == "fp16" and json.loads((gguf_pair / "pte" / "manifest.json").read_text())[
        "kv_cache"] == "fp32"
    reference = transformers.AutoModelForCausalLM.from_pretrained(gguf_pair, gguf_file="target.gguf",
                                                                  dtype=torch.float32).eval()
    prompt = IDS[0, :12].tolist()
    dec = PteSpeculativeDecoder(gguf_pair / "pte16")
    with torch.no_grad():
        want = reference(input_ids=torch.tensor([prompt[:5]])).logits
    error = float((dec.target_logits(torch.tensor([prompt[:5]]), torch.tensor([0])) - want).abs().max())
    assert 0 < error < 2e-3, error
    assert dec.generate(prompt, 24) == dec.generate(prompt, 24, speculative=False)


def test_bad_gguf_files_are_named(tmp_path):
    path = write_gguf(tmp_path / "model.gguf", random_model("llama"), TOKENIZER, **QWEN2)
    data = path.read_bytes()
    for cut in (100, len(data) // 2, len(data) - 10):
        (tmp_path / "cut.gguf").write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match="cut.gguf: not a readable GGUF file, truncated or corrupted"):
            load_gguf(tmp_path / "cut.gguf")
    with pytest.raises(CheckpointError, match="nowhere.gguf: not found"):
        load_gguf(tmp_path / "nowhere.gguf")
    for arch in ("gemma3", "phi3"):
        writer = gguf.GGUFWriter(tmp_path / f"{arch}.gguf", arch)
        writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
        writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file()
        writer.close()
        with pytest.raises(CheckpointError, match=f"architecture '{arch}' is not supported; supported: llama, qwen2"):
            load_gguf(tmp_path / f"{arch}.gguf")
    write_gguf(tmp_path / "f64.gguf", random_model("llama"), TOKENIZER, **QWEN2, types={"output_norm.weight": Q.F64})
    with pytest.raises(CheckpointError, match="tensor output_norm.weight has type F64, which the gguf package"):
        load_gguf(tmp_path / "f64.gguf")


@pytest.mark.parametrize("key", ["attention.head_count", "attention.head_count_kv", "context_length",
                                 "embedding_length", "block_count", "feed_forward_length"])
def test_a_gguf_file_with_a_size_of_zero_is_named(tmp_path, key):
    path = write_gguf(tmp_path / "model.gguf", random_model("llama"), TOKENIZER, **QWEN2)
    bad = with_metadata_value(path, f"llama.{key}", 0, tmp_path / "zero.gguf")
    for call in (lambda: load_gguf(bad), lambda: save_gguf_tokenizer(bad, tmp_path / "tokenizer")):
        with pytest.raises(CheckpointError, match=rf"zero.gguf: metadata llama\.{key} = 0: expected a positive integer"):
            call()
    if key == "attention.head_count_kv":  # and 3 does not divide the 4 query heads
        with pytest.raises(CheckpointError, match=r"head_count_kv = 3 does not divide head_count = 4"):
            load_gguf(with_metadata_value(path, f"llama.{key}", 3, tmp_path / "three.gguf"))


def test_a_gguf_tensor_over_another_or_past_the_end_is_refused(tmp_path):
    """A tensor info pointing into another tensor's bytes would load those weights under its name."""
    path = write_gguf(tmp_path / "model.gguf", random_model("llama"), TOKENIZER, **QWEN2)
    load_gguf(with_tensor_offset(path, 1, gguf.GGUFReader(path).tensors[1].field.parts[-1][0], tmp_path / "same.gguf"))
    with pytest.raises(CheckpointError, match=r"overlap.gguf: tensor blk.0.attn_q.weight \(bytes \d+..\d+\) overlaps "
                       r"tensor token_embd.weight"):
        load_gguf(with_tensor_offset(path, 1, 0, tmp_path / "overlap.gguf"))
    with pytest.raises(CheckpointError, match=r"past.gguf: (tensor .* past the end of the file|not a readable GGUF)"):
        load_gguf(with_tensor_offset(path, len(gguf.GGUFReader(path).tensors) - 1, 10**9, tmp_path / "past.gguf"))


def test_the_command_line_names_a_missing_gguf_file(tmp_path):
    draft = write_gguf(tmp_path / "draft.gguf", random_model("qwen2"), TOKENIZER, **QWEN2)
    result = subprocess.run([sys.executable, str(ROOT / "export" / "export_pair.py"), "--gguf-target",
                             str(tmp_path / "nowhere.gguf"), "--gguf-draft", str(draft), "--out", str(tmp_path / "out")],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert f"export_pair: {tmp_path / 'nowhere.gguf'}: not found (expected a GGUF file)" in result.stderr
    assert not (tmp_path / "out").exists()


def test_draft_and_target_tokenizers_must_match_and_nothing_is_written(tmp_path):
    from spec_edge.gguf_checkpoint import export_gguf_pair
    target = write_gguf(tmp_path / "target.gguf", random_model("llama"), TOKENIZER, **QWEN2)
    other = FAMILIES["qwen2"](vocab_size=299)
    draft = write_gguf(tmp_path / "draft.gguf", random_model("llama", vocab_size=other.get_vocab_size()), other,
                       **QWEN2)
    with pytest.raises(CheckpointError, match="draft.gguf and .*target.gguf: draft and target have different tok"):
        export_gguf_pair(target, draft, 4, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_failed_export_leaves_the_directory_as_it_was(tmp_path, monkeypatch):
    def program(*args, **kwargs) -> bytes:  # writes to the path among its arguments
        next(a for a in args if isinstance(a, Path)).write_bytes(b"program")
        return b"program"

    def broken(*args, **kwargs) -> bytes:
        next(a for a in args if isinstance(a, Path)).write_bytes(b"half")
        raise RuntimeError("lowering failed")

    config = ModelConfig(dim=32, n_layers=1, n_heads=2, vocab_size=64, max_context_len=32)
    model = build_model(config)
    out = tmp_path / "out"
    out.mkdir()
    (out / "draft.pte").write_bytes(b"an earlier export")
    monkeypatch.setattr(se_export, "export_draft", program)
    monkeypatch.setattr(se_export, "export_verify", program)
    monkeypatch.setattr(se_export, "export_target", broken)
    with pytest.raises(RuntimeError, match="lowering failed"):
        export_pair(model, config, model, config, 4, out, progress=False)
    assert [p.name for p in out.iterdir()] == ["draft.pte"] and (out / "draft.pte").read_bytes() == b"an earlier export"
    monkeypatch.setattr(se_export, "export_target", program)
    export_pair(model, config, model, config, 4, out, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["draft.pte", "manifest.json", "target.pte", "verify.pte"]


def test_the_linears_a_gguf_file_keeps_precise_are_named(tmp_path):
    # A Q4_K_M-like mix: 4-bit K-quants, with one layer's ffn_down and the output layer at 8 bits
    # and one attn_v in F16; the 4.5- and 5-bit types (Q4_K, Q4_1's class) are not kept apart.
    from spec_edge.gguf_checkpoint import gguf_precise_linears
    types = {"blk.1.ffn_down.weight": Q.Q8_0, "output.weight": Q.Q8_0, "blk.0.attn_v.weight": Q.F16}
    path = write_gguf(tmp_path / "mixed.gguf", random_model("qwen2", dim=256), TOKENIZER, **QWEN2, kind=Q.Q4_K,
                      types=types)
    assert gguf_precise_linears(path) == {"layers.1.feed_forward.w2": "8da8w", "output": "8da8w",
                                          "layers.0.attention.wv": "8da8w"}
    plain = write_gguf(tmp_path / "plain.gguf", random_model("qwen2", dim=256), TOKENIZER, **QWEN2, kind=Q.Q4_K)
    assert gguf_precise_linears(path, output=False) == {"layers.1.feed_forward.w2": "8da8w",
                                                        "layers.0.attention.wv": "8da8w"}
    assert gguf_precise_linears(plain) == {}
    with pytest.raises(ValueError, match="keep_gguf_precision: keeps precise linears of a quantized target; give "
                                         "quantize too"):
        se_gguf.export_gguf_pair(path, path, 2, tmp_path / "out", keep_gguf_precision=True)
    with pytest.raises(ValueError, match="four_bit_output: sets the output layer of a keep_gguf_precision export "
                                         "apart; give keep_gguf_precision too"):
        se_gguf.export_gguf_pair(path, path, 2, tmp_path / "out", quantize="8da4w", four_bit_output=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", [Q.Q4_0, Q.Q4_1, Q.Q4_K], ids=lambda k: k.name)
def test_a_4bit_tensor_is_the_files_groups_exactly(tmp_path, kind):
    # Every weight the gguf package dequantizes is scale * q + offset of its group of 32, with q
    # in [-8, 7] (the symmetric 4-bit values 8da4w stores); a group of zero scale keeps its offset.
    from gguf_files import random_q4_k
    from spec_edge.gguf_exact import four_bit_groups
    rng = np.random.default_rng(0)
    w = rng.normal(0.0, 0.05, (8, 512)).astype(np.float32)
    w[0, :32] = 0.25  # Q4_0 / Q4_1: a constant group; Q4_K: overwritten below
    data = random_q4_k(8, 512, rng) if kind == Q.Q4_K else gguf.quants.quantize(w, kind)
    if kind == Q.Q4_K:
        data[0, 4] &= 0xC0  # the first group's 6-bit scale: 0
    path = tmp_path / "t.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tensor("w", data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tensor = gguf.GGUFReader(path).tensors[0]
    q, scale, offset = four_bit_groups(tensor)
    want = torch.from_numpy(gguf.quants.dequantize(tensor.data, kind)).reshape(8, 512)
    got = q.float() * scale.repeat_interleave(32, 1) + offset.repeat_interleave(32, 1)
    assert q.dtype == torch.int8 and -8 <= q.min() and q.max() <= 7
    assert torch.equal(got, want)
    assert (offset == 0).all() == (kind == Q.Q4_0)


def test_a_q4_k_target_keeps_the_files_weights_in_its_program(tmp_path):
    # keep_gguf_precision: the Q4_K linears keep the file's values and scales (8da4w) with their
    # groups' offsets (an 8-bit linear over the group sums), the Q8_0 ones get 8-bit weights.
    # Their weights are the file's to the offsets' 8-bit rounding; a plain 8da4w export (the
    # negative control) quantizes the file's weights again, 20 times as far off. The program's
    # logits equal the eager model's.
    from spec_edge.export import quantize_model
    from spec_edge.gguf_checkpoint import gguf_config, gguf_model, gguf_precise_linears, gguf_tensors
    from spec_edge.gguf_exact import ExactFourBitLinear
    path = write_gguf(tmp_path / "t.gguf", random_model("qwen2", dim=256), TOKENIZER, **QWEN2, kind=Q.Q4_K,
                      types={"output.weight": Q.Q8_0})
    config = gguf_config(path, 64)
    source = dict(gguf_tensors(path, config))
    exact = gguf_model(path, config, exact_four_bit=True)
    assert sum(isinstance(m, ExactFourBitLinear) for m in exact.modules()) == 2 * 7
    requantized = quantize_model(gguf_model(path, config), "8da4w", 32)
    for name in ("layers.0.attention.wq", "layers.1.attention.wk", "layers.1.feed_forward.w2"):
        layer, want = exact.get_submodule(name), source[name + ".weight"]
        kept = layer.weight.dequantize() + (layer.offset.dequantize() / 32).repeat_interleave(32, 1)
        error = (kept - want).norm() / want.norm()
        control = (requantized.get_submodule(name).weight.dequantize() - want).norm() / want.norm()
        assert error < 0.01 and control > 5 * error, (name, error, control)
    quantize_model(exact, "8da4w", 32, gguf_precise_linears(path))
    ids = IDS[:, :3]
    with torch.no_grad():
        eager = exact(ids, {"input_pos": torch.tensor([0])})
    from executorch.runtime import Runtime
    import spec_edge.executorch
    se_export.export_target(exact, config, 3, tmp_path / "target.pte", 4)
    spec_edge.executorch.load()
    program = Runtime.get().load_program(tmp_path / "target.pte")
    got = program.load_method("logits").execute([ids, torch.tensor([0])])[0]
    assert (got - eager).abs().max() < 2e-3 * eager.abs().max()
