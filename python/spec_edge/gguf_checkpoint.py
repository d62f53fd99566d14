"""GGUF checkpoints (llama.cpp's files) of the Llama family, as ExecuTorch Llama models.

A GGUF file is read where it lies, with no fp32 checkpoint written anywhere:
- the sizes through transformers' reading of the metadata (``AutoConfig`` with ``gguf_file``),
  checked by the rules of the Hugging Face path (``hf.model_config``);
- the weights with the ``gguf`` package (llama.cpp's own reader), dequantized one tensor at a
  time. llama.cpp stores a llama file's query/key rows already in the interleaved rotary order
  ExecuTorch's RoPE uses; a qwen2 file keeps Hugging Face's order, reordered here as
  ``hf.py`` reorders it. A file without ``output.weight`` ties the output to the embedding;
- Llama 3's scaled RoPE from the ``rope_freqs`` tensor llama.cpp writes in place of a config;
- the tokenizer as transformers builds it from the metadata (``AutoTokenizer`` with
  ``gguf_file``), saved as ``tokenizer.json`` and ``tokenizer_config.json`` (EOS, BOS), and the
  ids that end generation as llama.cpp finds them, saved as ``generation_config.json``.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from .export import ModelConfig
from .hf import SUPPORTED, CheckpointError, _interleave_rotary, check_same_tokenization, model_config

_TO_EXECUTORCH = {
    "token_embd.weight": "tok_embeddings.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "output.weight",
    "blk.{}.attn_q.weight": "layers.{}.attention.wq.weight",
    "blk.{}.attn_q.bias": "layers.{}.attention.wq.bias",
    "blk.{}.attn_k.weight": "layers.{}.attention.wk.weight",
    "blk.{}.attn_k.bias": "layers.{}.attention.wk.bias",
    "blk.{}.attn_v.weight": "layers.{}.attention.wv.weight",
    "blk.{}.attn_v.bias": "layers.{}.attention.wv.bias",
    "blk.{}.attn_output.weight": "layers.{}.attention.wo.weight",
    "blk.{}.attn_norm.weight": "layers.{}.attention_norm.weight",
    "blk.{}.ffn_norm.weight": "layers.{}.ffn_norm.weight",
    "blk.{}.ffn_gate.weight": "layers.{}.feed_forward.w1.weight",
    "blk.{}.ffn_down.weight": "layers.{}.feed_forward.w2.weight",
    "blk.{}.ffn_up.weight": "layers.{}.feed_forward.w3.weight",
}
_ROPE_FREQS = "rope_freqs.weight"


def _reader(path: Path):
    import gguf
    if not path.is_file():
        raise CheckpointError(f"{path}: not found (expected a GGUF file)")
    try:
        reader = gguf.GGUFReader(path)
        architecture = reader.fields["general.architecture"].contents()
    except Exception as error:  # noqa: BLE001  (truncated, corrupted or not GGUF at all)
        raise CheckpointError(f"{path}: not a readable GGUF file, truncated or corrupted "
                              f"({type(error).__name__}: {error})") from error
    if architecture not in SUPPORTED:
        raise CheckpointError(f"{path}: architecture {architecture!r} is not supported; supported: "
                              f"{', '.join(SUPPORTED)} (Llama 3.x, SmolLM, Qwen2.x)")
    _check_sizes(path, reader, architecture)
    _check_tensor_layout(path, reader)
    return reader, architecture


# The model's sizes in the metadata; each a positive integer (a 0 would divide by zero or build an
# empty model further on). head_count_kv may be absent (it is then head_count).
_SIZES = ("context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count")


def _check_sizes(path: Path, reader, architecture: str) -> None:
    values = {}
    for key in (*_SIZES, "attention.head_count_kv"):
        field = reader.fields.get(f"{architecture}.{key}")
        if field is None and key == "attention.head_count_kv":
            continue
        value = None if field is None else field.contents()
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
            raise CheckpointError(f"{path}: metadata {architecture}.{key} = {value!r}: expected a positive integer")
        values[key] = value
    heads, kv_heads = values["attention.head_count"], values.get("attention.head_count_kv", 1)
    if heads % kv_heads:
        raise CheckpointError(f"{path}: metadata {architecture}.attention.head_count_kv = {kv_heads} does not divide "
                              f"head_count = {heads}")


def _check_tensor_layout(path: Path, reader) -> None:
    """Every tensor's data inside the file and apart from every other's: a tensor info pointing
    into another tensor's bytes would load that tensor's weights under its name."""
    for t in reader.tensors:
        if not all(0 < int(n) < 2**31 for n in t.shape):
            raise CheckpointError(f"{path}: tensor {t.name} has shape {[int(n) for n in reversed(t.shape)]}: expected "
                                  "dimensions in [1, 2^31)")
    spans = sorted((int(t.data_offset), int(t.data_offset) + int(t.n_bytes), t.name) for t in reader.tensors)
    for (start, end, name), (next_start, _, next_name) in zip(spans, spans[1:]):
        if end > next_start:
            raise CheckpointError(f"{path}: tensor {name} (bytes {start}..{end}) overlaps tensor {next_name} "
                                  f"(from byte {next_start})")
    if spans and spans[-1][1] > len(reader.data):
        raise CheckpointError(f"{path}: tensor {spans[-1][2]} ends at byte {spans[-1][1]}, past the end of the file "
                              f"({len(reader.data)} bytes)")


def _dequantized(path: Path, tensor) -> torch.Tensor:
    """One tensor in fp32, dequantized a block of rows at a time straight into the result: the
    gguf package's temporaries are several times the size of what they work on, and for a
    151,936-row embedding they would outweigh the rest of the model's loading."""
    from gguf import quants
    shape = [int(n) for n in reversed(tensor.shape)]
    data = tensor.data.reshape(-1, tensor.data.shape[-1]) if tensor.data.ndim > 1 else tensor.data.reshape(1, -1)
    if data.shape[0] == 0 or math.prod(shape) % data.shape[0]:
        raise CheckpointError(f"{path}: tensor {tensor.name} holds {data.shape[0]} rows for shape {shape}")
    out = np.empty((data.shape[0], math.prod(shape) // data.shape[0]), dtype=np.float32)
    step = max(1, (4 << 20) // data[0].nbytes)  # about 4 MiB of the file at a time
    try:
        for start in range(0, data.shape[0], step):
            out[start:start + step] = quants.dequantize(data[start:start + step], tensor.tensor_type)
    except NotImplementedError as error:
        raise CheckpointError(f"{path}: tensor {tensor.name} has type {tensor.tensor_type.name}, which the gguf "
                              "package cannot dequantize") from error
    except Exception as error:  # noqa: BLE001  (a tensor cut short or malformed)
        raise CheckpointError(f"{path}: tensor {tensor.name} ({tensor.tensor_type.name}) is unreadable "
                              f"({type(error).__name__}: {error})") from error
    return torch.from_numpy(out).reshape(shape)


def _llama3_rope(path: Path, rope_freqs: torch.Tensor, config: ModelConfig) -> ModelConfig:
    """The config with Llama 3's RoPE scaling, found from the per-frequency divisors llama.cpp
    stores (``rope_freqs``): the largest is the scale factor, and every divisor must be what
    ExecuTorch's scaling gives for it with high_freq_factor 4 (low 1, original context 8192)."""
    from executorch.examples.models.llama.rope import apply_scaling
    head_dim = config.head_dim or config.dim // config.n_heads
    freqs = 1.0 / (config.rope_theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    if rope_freqs.shape != freqs.shape:
        raise CheckpointError(f"{path}: {_ROPE_FREQS} has shape {list(rope_freqs.shape)}, expected "
                              f"[{head_dim // 2}]")
    factor = float(rope_freqs.max())
    if factor <= 1.0:
        return config
    if not torch.allclose(freqs / rope_freqs, apply_scaling(freqs, factor, 4), rtol=1e-4):
        raise CheckpointError(f"{path}: {_ROPE_FREQS} is not Llama 3's RoPE scaling (supported: factor "
                              "from the file, high_freq_factor 4, low_freq_factor 1, original context 8192)")
    return replace(config, rope_scale_factor=factor, rope_high_freq_factor=4.0)


def gguf_config(path: str | Path, max_context_len: int | None = None) -> ModelConfig:
    """The ModelConfig of a GGUF file of the llama or qwen2 architecture (metadata, and the
    ``rope_freqs`` tensor where there is one); CheckpointError naming the file otherwise."""
    from transformers import AutoConfig
    path = Path(path)
    reader, _ = _reader(path)
    try:
        hf_config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    except Exception as error:  # noqa: BLE001
        raise CheckpointError(f"{path}: metadata transformers cannot read ({error})") from error
    config = model_config(hf_config, path, max_context_len)
    for tensor in reader.tensors:
        if tensor.name == _ROPE_FREQS:
            config = _llama3_rope(path, _dequantized(path, tensor), config)
    return config


def gguf_tensors(path: str | Path, config: ModelConfig) -> Iterator[tuple[str, torch.Tensor]]:
    """The file's weights as (ExecuTorch name, fp32 tensor) pairs, dequantized one at a time. A
    file without ``output.weight`` is tied: its embedding comes twice, under both names."""
    from executorch.examples.models.checkpoint import get_mapped_key
    path = Path(path)
    reader, architecture = _reader(path)
    tied = all(t.name != "output.weight" for t in reader.tensors)
    for tensor in reader.tensors:
        if tensor.name == _ROPE_FREQS:
            continue
        try:
            name = get_mapped_key(tensor.name, _TO_EXECUTORCH)
        except Exception as error:  # noqa: BLE001  (KeyError or ExecuTorch's own)
            raise CheckpointError(f"{path}: unexpected tensor {tensor.name!r} for a {architecture} "
                                  "checkpoint") from error
        value = _dequantized(path, tensor)
        if architecture == "qwen2" and ".attention.wq." in name:
            value = _interleave_rotary(value, config.n_heads, config.head_dim)
        elif architecture == "qwen2" and ".attention.wk." in name:
            value = _interleave_rotary(value, config.n_kv_heads or config.n_heads, config.head_dim)
        yield name, value
        if tied and name == "tok_embeddings.weight":
            yield "output.weight", value


def load_gguf(path: str | Path, max_context_len: int | None = None) -> tuple[ModelConfig, dict]:
    """(config, ExecuTorch-layout fp32 state dict) of a GGUF file of the llama or qwen2
    architecture; CheckpointError naming the file otherwise."""
    config = gguf_config(path, max_context_len)
    return config, dict(gguf_tensors(path, config))


def gguf_model(path: str | Path, config: ModelConfig, exact_four_bit: bool = False) -> torch.nn.Module:
    """The ExecuTorch model of a GGUF file, its weights streamed in a tensor at a time: memory
    holds the fp32 model and one dequantized tensor, never a second copy of the weights.
    ``exact_four_bit``: the linears the file stores in a 4-bit type become ExactFourBitLinear
    (gguf_exact.py), the file's own values and scales in 8da4w, which a later model-wide
    quantization leaves alone."""
    from .export import build_model, release_memory
    try:
        model = build_model(config, gguf_tensors(path, config))
    except CheckpointError:
        raise
    except ValueError as error:
        raise CheckpointError(f"{path}: {error}") from error
    if exact_four_bit:
        _keep_four_bit(model, Path(path), config)
        release_memory()  # the fp32 copies of the linears it replaced
    return model


def _keep_four_bit(model: torch.nn.Module, path: Path, config: ModelConfig) -> None:
    from executorch.examples.models.checkpoint import get_mapped_key
    from .gguf_exact import EXACT_TYPES, ExactFourBitLinear, four_bit_groups
    reader, architecture = _reader(path)
    for tensor in reader.tensors:
        if tensor.tensor_type.name not in EXACT_TYPES or tensor.name == "token_embd.weight":
            continue
        name = get_mapped_key(tensor.name, _TO_EXECUTORCH).removesuffix(".weight")
        q, scale, offset = four_bit_groups(tensor)
        if architecture == "qwen2" and name.endswith((".wq", ".wk")):
            heads = config.n_heads if name.endswith(".wq") else config.n_kv_heads or config.n_heads
            q, scale, offset = (_interleave_rotary(t, heads, config.head_dim) for t in (q, scale, offset))
        owner_name, _, attribute = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        setattr(owner, attribute, ExactFourBitLinear(q, scale, offset, getattr(owner, attribute).bias))


# The token texts llama.cpp ends generation at besides the file's EOS (llama-vocab.cpp's list, the
# families spec_edge reads): a Qwen2.5 instruct model ends a plain completion with <|endoftext|>,
# its chat turn with <|im_end|>, the file's EOS.
END_OF_GENERATION = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|end|>",
                     "<end_of_turn>", "<EOT>")


def end_of_generation_ids(reader) -> list[int]:
    """The file's EOS (and EOT/EOM) ids, then every token whose text is in END_OF_GENERATION."""
    tokens = reader.fields["tokenizer.ggml.tokens"]
    ids = [int(reader.fields[key].parts[reader.fields[key].data[0]][0]) for key in
           ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
           if key in reader.fields]
    for i, part in enumerate(tokens.data):
        if bytes(tokens.parts[part]).decode("utf-8", "replace") in END_OF_GENERATION:
            ids.append(i)
    return list(dict.fromkeys(i for i in ids if 0 <= i < len(tokens.data)))


def save_gguf_tokenizer(path: str | Path, directory: str | Path):
    """Writes the tokenizer transformers builds from a GGUF file's metadata to ``directory``
    (``tokenizer.json``, ``tokenizer_config.json``, ...) and the ids that end generation
    (``generation_config.json``: ``end_of_generation_ids``), and returns the tokenizer (``tokenizers``).

    Tokens the file does not have are dropped: transformers adds ``<|endoftext|>`` as a special
    token after the vocabulary of a file that lacks it (a Llama 3 file), an id no model row has."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    path, directory = Path(path), Path(directory)
    reader, _ = _reader(path)
    try:
        count = len(reader.fields["tokenizer.ggml.tokens"].data)
        AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True).save_pretrained(directory)
    except Exception as error:  # noqa: BLE001
        raise CheckpointError(f"{path}: no tokenizer transformers can build from the metadata ({error})") from error
    for name, key in (("tokenizer.json", "added_tokens"), ("tokenizer_config.json", "added_tokens_decoder")):
        spec = json.loads((directory / name).read_text())
        added = spec.get(key)  # a list in tokenizer.json, a mapping by id in tokenizer_config.json
        if added is None:
            continue
        spec[key] = ([a for a in added if a["id"] < count] if isinstance(added, list)
                     else {i: a for i, a in added.items() if int(i) < count})
        (directory / name).write_text(json.dumps(spec, ensure_ascii=False, indent=2))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": end_of_generation_ids(reader)}))
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    if tokenizer.get_vocab_size() != count:
        raise CheckpointError(f"{path}: the tokenizer built from the metadata has {tokenizer.get_vocab_size()} "
                              f"tokens, the file {count}")
    return tokenizer


# Above this many bits per weight a GGUF tensor was kept precise on purpose (Q5_*, Q6_K, Q8_0, F16:
# llama.cpp's Q4_K_M mixes keep attn_v, ffn_down and the output layer so); Q4_0, Q4_1, Q4_K are below.
PRECISE_BITS = 5.0


def gguf_precise_linears(path: str | Path, output: bool = True) -> dict[str, str]:
    """The linears a GGUF file stores with more than PRECISE_BITS bits per weight, as ExecuTorch
    module names mapped to "8da8w": ``export_pair``'s ``quantize_linears`` for a 4-bit export
    that keeps the file's own precision where it has it; the output layer among them only with
    ``output``."""
    from executorch.examples.models.checkpoint import get_mapped_key
    from gguf import GGML_QUANT_SIZES
    reader, _ = _reader(Path(path))
    precise = {}
    for tensor in reader.tensors:
        block, size = GGML_QUANT_SIZES[tensor.tensor_type]
        if len(tensor.shape) == 2 and tensor.name != "token_embd.weight" and 8 * size / block > PRECISE_BITS:
            precise[get_mapped_key(tensor.name, _TO_EXECUTORCH).removesuffix(".weight")] = "8da8w"
    if not output:
        precise.pop("output", None)
    return precise


def export_gguf_pair(target_file: str | Path, draft_file: str | Path, k: int, out_dir: str | Path,
                     max_context_len: int | None = None, keep_gguf_precision: bool = False,
                     four_bit_output: bool = False, kv_cache: str = "fp16", **export_options) -> Path:
    """draft.pte, target.pte, verify.pte, the tokenizer and the manifest from two GGUF files
    that share a tokenizer (``export_options``: those of ``export_pair``; KV caches in float16
    unless ``kv_cache`` says otherwise). ``keep_gguf_precision``
    (with ``quantize``) keeps the target's weights as its file has them: the linears it stores in a
    4-bit type keep their values and scales (gguf_exact.py), those above 5 bits per weight get
    8-bit weights (``gguf_precise_linears``), the others ``quantize``'s. ``four_bit_output`` (with
    ``keep_gguf_precision``) gives the output layer ``quantize``'s weights wherever the file
    stores it: on Qwen2.5-Coder-1.5B perplexity +0.95% from the source against +0.84%, an output
    layer of 44% fewer bytes (docs/BENCHMARKS.md)."""
    from .export import export_pair
    from .manifest import files_sha256
    for path in (target_file, draft_file):
        _reader(Path(path))  # a missing or malformed file named before anything is read
    if four_bit_output and not keep_gguf_precision:
        raise ValueError("four_bit_output: sets the output layer of a keep_gguf_precision export apart; give "
                         "keep_gguf_precision too")
    if keep_gguf_precision:
        if export_options.get("quantize") is None:
            raise ValueError("keep_gguf_precision: keeps precise linears of a quantized target; give quantize too")
        export_options["quantize_linears"] = gguf_precise_linears(target_file, output=not four_bit_output)
    sources = {role: "gguf " + files_sha256([path]) for role, path in (("target", target_file), ("draft", draft_file))}
    if keep_gguf_precision:  # not the program of a plain 8da4w export of the same file
        sources["target"] += " exact-4-bit"
    with tempfile.TemporaryDirectory() as scratch:
        target_dir, draft_dir = Path(scratch) / "target", Path(scratch) / "draft"
        check_same_tokenization(save_gguf_tokenizer(target_file, target_dir), Path(target_file),
                                save_gguf_tokenizer(draft_file, draft_dir), Path(draft_file))
        target_config = gguf_config(target_file, max_context_len)
        draft_config = gguf_config(draft_file, target_config.max_context_len)
        # Built one at a time, each when its program is exported (unless the one in out_dir is reused).
        out = export_pair(lambda: gguf_model(target_file, target_config, keep_gguf_precision), target_config,
                          lambda: gguf_model(draft_file, draft_config), draft_config, k, out_dir,
                          tokenizer=target_dir / "tokenizer.json", sources=sources, kv_cache=kv_cache,
                          **export_options)
    if export_options.get("progress", True):
        for name, source in (("target.pte", Path(target_file)), ("draft.pte", Path(draft_file))):
            print(f"{name}: {(out / name).stat().st_size / source.stat().st_size:.2f}x the size of {source.name}")
    return out
