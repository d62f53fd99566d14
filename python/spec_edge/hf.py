"""Local Hugging Face checkpoints of the Llama family, as ExecuTorch Llama models.

A checkpoint directory holds ``config.json``, ``model.safetensors`` (or a sharded index) and
``tokenizer.json``, as ``save_pretrained`` writes them; nothing is downloaded. The config is
read by ``transformers``; the weights are renamed to ExecuTorch's Llama layout (the names of
ExecuTorch's own converters) and the query/key projections are put back in the interleaved
rotary order that ExecuTorch's RoPE uses, so that Llama 3 scaled RoPE is supported as well.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .export import ModelConfig

SUPPORTED = ("llama", "qwen2")  # ExecuTorch's Llama transformer runs both (Qwen2: q/k/v biases)

_TO_EXECUTORCH = {
    "model.embed_tokens.weight": "tok_embeddings.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{}.self_attn.q_proj.weight": "layers.{}.attention.wq.weight",
    "model.layers.{}.self_attn.q_proj.bias": "layers.{}.attention.wq.bias",
    "model.layers.{}.self_attn.k_proj.weight": "layers.{}.attention.wk.weight",
    "model.layers.{}.self_attn.k_proj.bias": "layers.{}.attention.wk.bias",
    "model.layers.{}.self_attn.v_proj.weight": "layers.{}.attention.wv.weight",
    "model.layers.{}.self_attn.v_proj.bias": "layers.{}.attention.wv.bias",
    "model.layers.{}.self_attn.o_proj.weight": "layers.{}.attention.wo.weight",
    "model.layers.{}.input_layernorm.weight": "layers.{}.attention_norm.weight",
    "model.layers.{}.post_attention_layernorm.weight": "layers.{}.ffn_norm.weight",
    "model.layers.{}.mlp.gate_proj.weight": "layers.{}.feed_forward.w1.weight",
    "model.layers.{}.mlp.down_proj.weight": "layers.{}.feed_forward.w2.weight",
    "model.layers.{}.mlp.up_proj.weight": "layers.{}.feed_forward.w3.weight",
}


class CheckpointError(ValueError):
    """A checkpoint directory spec_edge cannot export; the message names the file."""


DEFAULT_MAX_CONTEXT = 512


def read_config(directory: str | Path, max_context_len: int | None = None) -> ModelConfig:
    """The ModelConfig of a checkpoint, or CheckpointError saying what is unsupported. The
    programs' context is ``max_context_len``, by default the checkpoint's, at most 512."""
    from transformers import AutoConfig
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: not found (expected a Hugging Face checkpoint directory)")
    try:
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
    except Exception as error:  # noqa: BLE001  (any unreadable or malformed config)
        raise CheckpointError(f"{path}: not a readable model config ({error})") from error
    return model_config(config, path, max_context_len)


def model_config(config, source: Path, max_context_len: int | None = None) -> ModelConfig:
    """The ModelConfig of a transformers config read from ``source`` (a config.json or a GGUF
    file, named in the CheckpointError that lists whatever is unsupported)."""
    if config.model_type not in SUPPORTED:
        raise CheckpointError(f"{source}: model_type {config.model_type!r} is not supported; supported: "
                              f"{', '.join(SUPPORTED)} (Llama 3.x, SmolLM, Qwen2.x)")
    problems = []
    if config.hidden_act != "silu":
        problems.append(f"hidden_act {config.hidden_act!r} (expected 'silu')")
    if getattr(config, "mlp_bias", False):
        problems.append("mlp_bias")
    if getattr(config, "use_sliding_window", False):
        problems.append("use_sliding_window")
    rope = dict(config.rope_parameters or {})
    rope_type = rope.get("rope_type", "default")
    scale = None
    if rope_type == "llama3":
        # ExecuTorch's scaled RoPE fixes low_freq_factor = 1 and the original context 8192.
        if rope.get("low_freq_factor") != 1 or rope.get("original_max_position_embeddings") != 8192:
            problems.append(f"llama3 rope_parameters {rope} (supported: low_freq_factor 1, "
                            "original_max_position_embeddings 8192)")
        scale = (float(rope["factor"]), float(rope["high_freq_factor"]))
    elif rope_type != "default":
        problems.append(f"rope_type {rope_type!r} (supported: default, llama3)")
    if max_context_len is None:
        max_context_len = min(DEFAULT_MAX_CONTEXT, config.max_position_embeddings)
    if max_context_len > config.max_position_embeddings:
        problems.append(f"max_context_len {max_context_len} > max_position_embeddings "
                        f"{config.max_position_embeddings}")
    if problems:
        raise CheckpointError(f"{source}: unsupported: {'; '.join(problems)}")
    qkv_bias = config.model_type == "qwen2" or bool(getattr(config, "attention_bias", False))
    return ModelConfig(dim=config.hidden_size, n_layers=config.num_hidden_layers,
                       n_heads=config.num_attention_heads, n_kv_heads=config.num_key_value_heads,
                       vocab_size=config.vocab_size, hidden_dim=config.intermediate_size,
                       head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
                       max_context_len=max_context_len, norm_eps=config.rms_norm_eps,
                       rope_theta=float(rope.get("rope_theta", 10000.0)), qkv_bias=qkv_bias,
                       rope_scale_factor=scale[0] if scale else None,
                       rope_high_freq_factor=scale[1] if scale else 4.0)


def _read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError) as error:
            raise CheckpointError(f"{index}: malformed index ({error!r})") from error
    elif (directory / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise CheckpointError(f"{directory / 'model.safetensors'}: not found (nor a sharded "
                              "model.safetensors.index.json)")
    state = {}
    for name in files:
        try:
            state.update(load_file(directory / name))
        except Exception as error:  # noqa: BLE001  (missing, truncated or corrupted)
            raise CheckpointError(f"{directory / name}: cannot read the weights ({error})") from error
    return state


def _interleave_rotary(w: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:
    """Hugging Face keeps each head's rotary pairs as (first half, second half); ExecuTorch's
    RoPE rotates adjacent pairs. Reorders the output rows (weight or bias) to match."""
    rest = w.shape[1:]
    return w.reshape(n_heads, 2, head_dim // 2, *rest).transpose(1, 2).reshape(n_heads * head_dim, *rest)


def load_checkpoint(directory: str | Path, max_context_len: int | None = None) -> tuple[ModelConfig, dict]:
    """(config, ExecuTorch-layout fp32 state dict) of a local Hugging Face checkpoint."""
    from executorch.examples.models.checkpoint import get_mapped_key
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a directory")
    config = read_config(directory, max_context_len)
    head_dim = config.head_dim
    state = {}
    for key, value in _read_safetensors(directory).items():
        if key.endswith("rotary_emb.inv_freq"):
            continue
        try:
            name = get_mapped_key(key, _TO_EXECUTORCH)
        except Exception as error:  # noqa: BLE001  (KeyError or ExecuTorch's own)
            raise CheckpointError(f"{directory}: unexpected tensor {key!r} for a {SUPPORTED} checkpoint") from error
        value = value.to(torch.float32)
        if ".attention.wq." in name:
            value = _interleave_rotary(value, config.n_heads, head_dim)
        elif ".attention.wk." in name:
            value = _interleave_rotary(value, config.n_kv_heads or config.n_heads, head_dim)
        state[name] = value
    if "output.weight" not in state and "tok_embeddings.weight" in state:  # tied embeddings
        state["output.weight"] = state["tok_embeddings.weight"]
    return config, state


def read_tokenizer(directory: str | Path):
    """The checkpoint's ``tokenizer.json`` (``tokenizers``), or CheckpointError naming the file."""
    from tokenizers import Tokenizer
    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: not found (the pair needs its tokenizer)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # noqa: BLE001
        raise CheckpointError(f"{path}: not a readable tokenizer ({error})") from error


def check_same_tokenizer(target_dir: str | Path, draft_dir: str | Path) -> None:
    """Speculation compares token ids: the draft must tokenize exactly as the target does."""
    check_same_tokenization(read_tokenizer(target_dir), Path(target_dir) / "tokenizer.json",
                            read_tokenizer(draft_dir), Path(draft_dir) / "tokenizer.json")


def check_same_tokenization(target, target_source: Path, draft, draft_source: Path) -> None:
    """CheckpointError naming both sources unless two ``tokenizers`` tokenizers agree on the
    vocabulary, the merges, the added tokens, the normalizer and the pre-tokenizer."""
    def tokenization(tokenizer):
        spec = json.loads(tokenizer.to_str())
        return [spec.get(part) for part in ("model", "added_tokens", "normalizer", "pre_tokenizer")]
    if tokenization(target) != tokenization(draft):
        raise CheckpointError(f"{draft_source} and {target_source}: draft and target have different tokenizers; "
                              "speculation needs one vocabulary")


def export_hf_pair(target_dir: str | Path, draft_dir: str | Path, k: int, out_dir: str | Path,
                   max_context_len: int | None = None, kv_cache: str = "fp16", **export_options) -> Path:
    """draft.pte, target.pte, verify.pte, tokenizer.json and the manifest from two local
    checkpoints that share a tokenizer (``export_options``: those of ``export_pair``; KV caches
    in float16 unless ``kv_cache`` says otherwise)."""
    from .export import build_model, export_pair
    from .manifest import files_sha256
    check_same_tokenizer(target_dir, draft_dir)
    target_config = read_config(target_dir, max_context_len)
    draft_config = read_config(draft_dir, target_config.max_context_len)
    sources = {role: "checkpoint " + files_sha256([Path(d) / "config.json", *sorted(Path(d).glob("*.safetensors"))])
               for role, d in (("target", target_dir), ("draft", draft_dir))}
    # Built one at a time, each when its program is exported (unless the one in out_dir is reused).
    return export_pair(lambda: build_model(*load_checkpoint(target_dir, target_config.max_context_len)),
                       target_config,
                       lambda: build_model(*load_checkpoint(draft_dir, target_config.max_context_len)),
                       draft_config, k, out_dir, tokenizer=Path(target_dir) / "tokenizer.json", sources=sources,
                       kv_cache=kv_cache, **export_options)
