"""Local Hugging Face checkpoints -> ExecuTorch Llama models and .pte pairs, against transformers.

The checkpoints are small random models the tests write with ``save_pretrained``; nothing is
downloaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import spec_edge

pytest.importorskip("executorch")
transformers = pytest.importorskip("transformers")

from spec_edge import demo  # noqa: E402
from spec_edge.demo import MAX_K, exported_pair  # noqa: E402
from spec_edge.export import build_model  # noqa: E402
from spec_edge.hf import CheckpointError, check_same_tokenizer, load_checkpoint  # noqa: E402
from spec_edge.runtime import ProgramError, PteSpeculativeDecoder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 300
SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
CONFIGS = {
    "llama-gqa-tied": lambda: transformers.LlamaConfig(**SMALL, max_position_embeddings=128,
                                                       tie_word_embeddings=True),
    "llama3-scaled-rope": lambda: transformers.LlamaConfig(**SMALL, max_position_embeddings=131072, head_dim=32,
                                                           rope_scaling=LLAMA3_ROPE),
    "qwen2-biases": lambda: transformers.Qwen2Config(**SMALL, max_position_embeddings=128,
                                                     tie_word_embeddings=False),
}


def tokenizer_json(path: Path, words: list[str]) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {w: i for i, w in enumerate(["<unk>"] + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))


def write_checkpoint(directory: Path, name: str, seed: int = 0):
    """A random checkpoint of family ``name`` (biases, norms and sharp attention randomized, so
    that every tensor's layout matters), with a shared word-level tokenizer."""
    torch.manual_seed(seed)
    config = CONFIGS[name]()
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "bias" in key or "norm" in key:
                p.normal_(1.0 if "norm" in key else 0.0, 0.5)
            elif "q_proj" in key or "k_proj" in key:  # sharp attention: positions (RoPE) matter
                p.normal_(0.0, 0.3)
    model.save_pretrained(directory)
    tokenizer_json(directory / "tokenizer.json", [f"w{i}" for i in range(VOCAB - 1)])
    return model


@pytest.mark.parametrize("name", CONFIGS)
def test_executorch_model_of_a_checkpoint_equals_transformers(tmp_path, name):
    reference = write_checkpoint(tmp_path, name)
    config, state = load_checkpoint(tmp_path, max_context_len=64)
    ids = torch.randint(0, VOCAB, (1, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = reference(input_ids=ids).logits
        got = build_model(config, state)(ids, {"input_pos": torch.tensor([0])})
    assert (got - want).abs().max() < 1e-4
    if name == "llama3-scaled-rope":  # control: the scaling matters at these sizes
        from dataclasses import replace
        unscaled = build_model(replace(config, rope_scale_factor=None), state)
        with torch.no_grad():
            assert (unscaled(ids, {"input_pos": torch.tensor([0])}) - want).abs().max() > 1e-3


PROMPT = [5, 17, 3, 29, 11, 40, 2, 8]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A Llama target and a Qwen2 draft checkpoint exported to .pte; and the target exported by
    ExecuTorch's own LLM export (KV cache, dynamic shapes, full logits, XNNPACK)."""
    root = tmp_path_factory.mktemp("hf")
    target = write_checkpoint(root / "target", "llama-gqa-tied", seed=1)
    write_checkpoint(root / "draft", "qwen2-biases", seed=2)
    # Laid out as the shipped default pair, exported as the demo exports it (K up to 8).
    (root / "prompts.json").write_text(json.dumps([" ".join(f"w{i}" for i in PROMPT)] * 2))
    (root / "training.json").write_text(json.dumps({"target_params": 1, "draft_params": 1}))
    exported_pair(root, root / "pte")
    export_with_executorch_llm(root / "target", root / "llm.pte", max_context_len=128)
    return root, target


def export_with_executorch_llm(checkpoint: Path, out: Path, max_context_len: int) -> None:
    from executorch.examples.models.llama.export_llama_lib import export_llama
    from executorch.extension.llm.export.config.llm_config import LlmConfig
    config, state = load_checkpoint(checkpoint, max_context_len)
    torch.save(state, out.with_suffix(".pth"))
    params = dict(dim=config.dim, n_layers=config.n_layers, n_heads=config.n_heads, n_kv_heads=config.n_kv_heads,
                  vocab_size=config.vocab_size, hidden_dim=config.hidden_dim, norm_eps=config.norm_eps,
                  rope_theta=config.rope_theta)
    out.with_suffix(".json").write_text(json.dumps(params))
    llm = LlmConfig()
    llm.base.checkpoint, llm.base.params = str(out.with_suffix(".pth")), str(out.with_suffix(".json"))
    llm.model.use_kv_cache = llm.model.enable_dynamic_shape = llm.debug.generate_full_logits = True
    llm.backend.xnnpack.enabled = True
    llm.export.max_seq_length, llm.export.max_context_length = 16, max_context_len
    llm.export.output_name = str(out)
    export_llama(llm)


def transformers_greedy(model, prompt: list[int], n: int) -> list[int]:
    return model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                          pad_token_id=0)[0, len(prompt):].tolist()


def test_a_pair_of_checkpoints_runs_as_pte_and_matches_transformers(pair):
    root, target = pair
    assert (root / "pte" / "tokenizer.json").read_bytes() == (root / "target" / "tokenizer.json").read_bytes()
    dec = PteSpeculativeDecoder(root / "pte")
    with torch.no_grad():
        want = target(input_ids=torch.tensor([PROMPT])).logits
    got = dec.target_logits(torch.tensor([PROMPT[:4]]), torch.tensor([0]))
    assert (got - want[:, :4]).abs().max() < 1e-4
    assert dec.generate(PROMPT, 24) == transformers_greedy(target, PROMPT, 24)  # speculative greedy


def test_a_target_from_executorch_llm_export_runs_through_verify_pte(pair):
    root, target = pair
    dec = PteSpeculativeDecoder(root / "pte", target_pte=root / "llm.pte")
    expected = transformers_greedy(target, PROMPT, 24)
    assert dec.generate(PROMPT, 24) == expected and dec.stats.rounds > 0
    assert dec.generate(PROMPT, 24, speculative=False) == expected
    fused = PteSpeculativeDecoder(root / "pte")  # the same sampled stream as the fused target
    sampled = dict(temperature=0.9, filters=spec_edge.Filters(top_k=40, repetition_penalty=1.2), seed=5)
    assert dec.generate(PROMPT, 24, **sampled) == fused.generate(PROMPT, 24, **sampled)
    assert dec.generate(PROMPT, 24, speculative=False, **sampled) == fused.generate(
        PROMPT, 24, speculative=False, **sampled)


def test_an_external_target_must_be_an_llm_program_for_the_exported_k(pair):
    root, _ = pair
    with pytest.raises(ProgramError, match=r"missing methods \['forward'\]"):
        PteSpeculativeDecoder(root / "pte", target_pte=root / "pte" / "verify.pte")
    with pytest.raises(ProgramError, match=f"verify.pte was exported for K={MAX_K}, got k=2"):
        PteSpeculativeDecoder(root / "pte", k=2, target_pte=root / "llm.pte")


@pytest.mark.parametrize("loop,flags", [("the C++ runner (spec_edge.NativeRunner)", []),
                                        ("the Python .pte loop", ["--python-loop"])])
def test_the_demo_runs_on_a_checkpoint_pair(pair, capsys, loop, flags):
    root, _ = pair
    demo.main(["--pair", str(root), "--cache", str(root / "pte"), "--prompts", "2", "--max-new", "12", *flags])
    out = capsys.readouterr().out
    assert "exporting" not in out  # the fixture's export is the demo's cache
    assert loop in out.splitlines()[0]
    assert "identical to target-only decoding: yes" in out and "tokens/s speculative vs" in out
    assert (root / "pte" / "accepted_lengths.png").stat().st_size > 0


def test_missing_and_corrupted_files_are_named(tmp_path):
    write_checkpoint(tmp_path, "llama-gqa-tied")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="model.safetensors: cannot read the weights"):
        load_checkpoint(tmp_path)
    weights.unlink()
    with pytest.raises(CheckpointError, match="model.safetensors: not found"):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("{truncated")
    with pytest.raises(CheckpointError, match="config.json: not a readable model config"):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json: not found"):
        load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="not a directory"):
        load_checkpoint(tmp_path / "nowhere")


def test_unsupported_architectures_list_what_is_supported(tmp_path):
    transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2)).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match=r"model_type 'gpt2' is not supported; supported: llama, qwen2"):
        load_checkpoint(tmp_path)


def test_unsupported_settings_are_named(tmp_path):
    transformers.LlamaConfig(**SMALL, hidden_act="gelu", max_position_embeddings=32).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match=r"hidden_act 'gelu'.*max_context_len 64 > max_position_embeddings 32"):
        load_checkpoint(tmp_path, max_context_len=64)


def test_draft_and_target_tokenizers_must_match(tmp_path):
    for name in ("target", "draft"):
        write_checkpoint(tmp_path / name, "llama-gqa-tied")
    check_same_tokenizer(tmp_path / "target", tmp_path / "draft")
    tokenizer_json(tmp_path / "draft" / "tokenizer.json", [f"v{i}" for i in range(VOCAB - 1)])
    with pytest.raises(CheckpointError, match="different tokenizers"):
        check_same_tokenizer(tmp_path / "target", tmp_path / "draft")
    (tmp_path / "draft" / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.json: not found"):
        check_same_tokenizer(tmp_path / "target", tmp_path / "draft")
    result = subprocess.run([sys.executable, str(ROOT / "export" / "export_pair.py"), "--hf-target",
                             str(tmp_path / "target"), "--hf-draft", str(tmp_path / "draft"), "--out",
                             str(tmp_path / "out")], capture_output=True, text=True)
    assert result.returncode != 0 and "draft/tokenizer.json: not found" in result.stderr


def test_the_demo_cache_key_follows_the_checkpoints_and_k(tmp_path):
    from spec_edge.demo import _source_key
    for name in ("target", "draft"):
        write_checkpoint(tmp_path / name, "llama-gqa-tied")
    key = _source_key(tmp_path, 8)
    assert _source_key(tmp_path, 8) == key and _source_key(tmp_path, 4) != key
    config = tmp_path / "draft" / "config.json"
    config.write_text(config.read_text().replace('"rms_norm_eps"', '"rms_norm_eps" ', 1))
    assert _source_key(tmp_path, 8) != key  # any byte of a checkpoint file
