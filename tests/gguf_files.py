"""Small GGUF files written as llama.cpp's convert_hf_to_gguf.py writes them, from random
transformers models and tokenizers made by `tokenizers`: the gguf package's writer, llama.cpp's
tensor names, a llama file's query/key rows permuted to the interleaved rotary order, 1-D
tensors in F32, and the 2-D weights in a chosen type (F32, F16, Q8_0, or Q4_K; F64 on demand)."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import torch

_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.down_proj": "ffn_down", "mlp.up_proj": "ffn_up",
}
Q = gguf.GGMLQuantizationType


def gguf_name(hf_name: str) -> str:
    if hf_name in _TO_GGUF:
        return _TO_GGUF[hf_name]
    _, _, layer, *rest = hf_name.split(".")  # model.layers.N.<module>.<weight|bias>
    return f"blk.{layer}.{_TO_GGUF['.'.join(rest[:-1])]}.{rest[-1]}"


def llama_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def random_q4_k(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Valid Q4_K blocks with random contents (the gguf package dequantizes K-quants but cannot
    quantize to them): per 256 values a half-precision scale and minimum, twelve bytes of 6-bit
    sub-block scales and 128 bytes of 4-bit quants."""
    blocks = rows * cols // 256
    d = rng.uniform(2e-5, 1.5e-4, (blocks, 1)).astype(np.float16).view(np.uint8)
    dmin = rng.uniform(2e-5, 1.5e-4, (blocks, 1)).astype(np.float16).view(np.uint8)
    rest = rng.integers(0, 256, (blocks, 140), dtype=np.uint8)
    return np.concatenate([d, dmin, rest], axis=1).reshape(rows, cols // 256 * 144)


def _tensor(w: np.ndarray, kind: Q, rng: np.random.Generator) -> tuple[np.ndarray, Q]:
    if kind == Q.F64:
        return w.astype(np.float64), Q.F64
    if w.ndim == 1 or kind == Q.F32:
        return w.astype(np.float32), Q.F32
    if kind == Q.F16:
        return w.astype(np.float16), Q.F16
    if kind == Q.Q4_K:
        return random_q4_k(*w.shape, rng), Q.Q4_K
    return gguf.quants.quantize(w.astype(np.float32), kind), kind


def tokenizer_metadata(writer: gguf.GGUFWriter, tokenizer, pre: str, eos: str, bos: str | None = None) -> None:
    """A byte-level BPE tokenizer (``tokenizers``) as llama.cpp stores one: model gpt2, the
    pre-tokenizer's name, tokens by id, token types (control for special added tokens), merges,
    the EOS token and, when the tokenizer adds one, the BOS token."""
    spec = json.loads(tokenizer.to_str())
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    tokens = [""] * len(vocab)
    for token, i in vocab.items():
        tokens[i] = token
    special = {a["id"] for a in spec["added_tokens"] if a["special"]}
    user = {a["id"] for a in spec["added_tokens"] if not a["special"]}
    types = [gguf.TokenType.CONTROL if i in special else gguf.TokenType.USER_DEFINED if i in user
             else gguf.TokenType.NORMAL for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(vocab[eos])
    if bos is not None:
        writer.add_bos_token_id(vocab[bos])
    writer.add_add_bos_token(bos is not None)


def write_gguf(path: Path, model, tokenizer, pre: str, eos: str, kind: Q = Q.F32, seed: int = 0,
               rope_freqs: np.ndarray | None = None, bos: str | None = None, types: dict | None = None) -> Path:
    """``model`` (a transformers LlamaForCausalLM or Qwen2ForCausalLM) and ``tokenizer`` as a GGUF
    file; ``rope_freqs`` adds llama.cpp's Llama 3 RoPE tensor, ``types`` overrides the type of
    tensors by GGUF name. Returns the path."""
    config = model.config
    arch = config.model_type
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, arch)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_dimension_count(head_dim)
    if head_dim != config.hidden_size // config.num_attention_heads:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_vocab_size(config.vocab_size)
    tokenizer_metadata(writer, tokenizer, pre, eos, bos)
    if rope_freqs is not None:
        writer.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
    for name, value in model.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        w = value.detach().to(torch.float32).numpy()
        if arch == "llama" and ".q_proj." in name:
            w = llama_permute(w, config.num_attention_heads)
        elif arch == "llama" and ".k_proj." in name:
            w = llama_permute(w, config.num_key_value_heads)
        data, dtype = _tensor(w, (types or {}).get(gguf_name(name), kind), rng)
        writer.add_tensor(gguf_name(name), data, raw_dtype=dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _patched(path: Path, part: np.ndarray, reader, value, out: Path) -> Path:
    """A copy of ``path`` with one part of its header (a numpy view into ``reader``'s map of it)
    set to ``value``."""
    data = bytearray(path.read_bytes())
    at = part.ctypes.data - reader.data.ctypes.data
    data[at:at + part.nbytes] = np.array([value], dtype=part.dtype).tobytes()
    out.write_bytes(bytes(data))
    return out


def with_metadata_value(path: Path, key: str, value, out: Path) -> Path:
    """A copy of ``path`` with the scalar metadata ``key`` set to ``value`` in place."""
    reader = gguf.GGUFReader(path)
    field = reader.fields[key]
    return _patched(path, field.parts[field.data[0]], reader, value, out)


def with_tensor_offset(path: Path, index: int, offset: int, out: Path) -> Path:
    """A copy of ``path`` whose tensor ``index`` says its data starts at ``offset`` (relative to
    the data section, as the file stores it)."""
    reader = gguf.GGUFReader(path)
    return _patched(path, reader.tensors[index].field.parts[-1], reader, offset, out)
