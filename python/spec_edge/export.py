"""Export of the draft, target and verify programs (``.pte``) with spec_edge's ops fused in.

The models are ExecuTorch's own Llama-family definition (``executorch.examples.models.llama``)
with KV caches as mutable buffers indexed by position. Each program has several methods that
share those buffers (``share_mutable_buffers``), so a rejected draft is rolled back just by
position: the next step overwrites the stale entries.

``draft.pte``
    ``prefill(tokens [1, n], input_pos [1]) -> logits [1, V]`` (n up to the prefill chunk),
    ``draft_step(tokens [1, n], input_pos, temperature, top_k, top_p, min_p,
    repetition_penalty, prev_tokens [1, C], seed, offset) -> (token [1], logits [1, V])``: the
    model and the ``sample`` op in one call, over the last of ``n`` <= 2 tokens; the logits row
    goes to the target's verify step. Two tokens when the last round accepted all K drafts: the
    draft has not seen its own last one yet, and catches up in the same call.
``target.pte``
    ``prefill`` as above; ``logits(tokens [1, n], input_pos) -> logits [1, n, V]`` (n up to
    K+1); ``decode_step(token [1, 1], input_pos, <sampling>) -> token [1]`` (target-only
    decoding through the same program); ``verify(tokens [1, K+1], input_pos, draft_logits
    [1, K, V], <sampling>) -> (accept_len [1], tokens [1, K+1])``: the model over the last
    token and the K draft tokens and the ``verify`` op, so the target logits never leave the
    program.
``verify.pte``
    ``verify(target_logits [1, K+1, V], draft_logits [1, K, V], draft_tokens [1, K],
    <sampling>) -> (accept_len [1], tokens [1, K+1])`` for targets exported elsewhere.

Every program also carries constant methods: ``spec_edge_op_version_<op>`` for each op,
``vocab_size`` and (target, verify) ``k``.

``<sampling>`` is ``temperature [1], top_k [1], top_p [1], min_p [1], repetition_penalty [1],
prev_tokens [1, C], seed [1], offset [1]``: runtime inputs, the same for both programs, so draft
and target are always warped identically. ``prev_tokens`` is the context padded with -1 to
``C = max_context_len``.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from . import executorch as se_executorch
from .draft_vocab import check_draft_vocab, frequent_token_ids, restrict_draft_vocab, stdlib_corpus
from . import ops  # noqa: F401  (registers the fake kernels the export traces through)
from .manifest import (DRAFT_STEP_TOKENS, MANIFEST, OP_VERSIONS, TOKENIZER_FILES, reusable, sha256,
                       write_manifest)



@dataclass(frozen=True)
class ModelConfig:
    """Sizes of a Llama-family model (ExecuTorch's ``ModelArgs`` subset spec_edge uses)."""

    dim: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int | None = None
    vocab_size: int = 512
    hidden_dim: int | None = None
    max_context_len: int = 256
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    head_dim: int | None = None  # dim // n_heads when None
    qkv_bias: bool = False  # biases on the q/k/v projections (Qwen2)
    rope_scale_factor: float | None = None  # Llama 3 scaled RoPE when set
    rope_high_freq_factor: float = 4.0

    def model_args(self):
        from executorch.examples.models.llama.model_args import ModelArgs
        return ModelArgs(dim=self.dim, n_layers=self.n_layers, n_heads=self.n_heads,
                         n_kv_heads=self.n_kv_heads, vocab_size=self.vocab_size,
                         hidden_dim=self.hidden_dim, head_dim=self.head_dim, max_seq_len=self.max_context_len,
                         max_context_len=self.max_context_len, norm_eps=self.norm_eps,
                         rope_freq_base=self.rope_theta, attention_qkv_bias=self.qkv_bias,
                         use_scaled_rope=self.rope_scale_factor is not None,
                         rope_scale_factor=self.rope_scale_factor or 8,
                         high_freq_factor=self.rope_high_freq_factor, use_kv_cache=True,
                         generate_full_logits=True, enable_dynamic_shape=True)


class KVCache(torch.nn.Module):
    """One attention layer's KV cache as [1, C, H, D] buffers, written in place by
    ``spec_edge::update_cache`` at the step's position (a drop-in for ExecuTorch's ``KVCache``)."""

    def __init__(self, max_batch_size: int, max_context_length: int, n_heads: int, head_dim: int,
                 dtype: torch.dtype):
        super().__init__()
        shape = (max_batch_size, max_context_length, n_heads, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype))

    def update(self, input_pos, k_val, v_val):
        # ExecuTorch's attention hands k, v as [B, H, S, D] and reads the caches back the same way.
        start = input_pos[0].item()
        torch.ops.spec_edge.update_cache(k_val.transpose(1, 2), self.k_cache, start)
        torch.ops.spec_edge.update_cache(v_val.transpose(1, 2), self.v_cache, start)
        return self.k_cache.transpose(1, 2), self.v_cache.transpose(1, 2)


class SDPA(torch.nn.Module):
    """Causal attention of the step's queries over the cache by ``spec_edge::attention`` (a
    drop-in for ExecuTorch's ``SDPA``; the position, not a mask, bounds what each query reads)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, input_pos, q, k, v, bsz, seqlen, mask):
        out = torch.ops.spec_edge.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                            input_pos[0].item())
        return out.reshape(bsz, seqlen, self.dim)


# The programs' KV caches: float32, or float16 (half the bytes a long context's steps read and the
# programs hold; attention reads each half as the float it is, docs/OPS.md).
KV_CACHE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


def set_kv_cache_dtype(model: torch.nn.Module, kv_cache: str) -> None:
    """Gives every layer of ``model`` (from build_model) empty caches of ``kv_cache``'s dtype."""
    dtype = KV_CACHE_DTYPES[kv_cache]
    for module in model.modules():
        if isinstance(module, KVCache):
            for name in ("k_cache", "v_cache"):
                setattr(module, name, torch.zeros_like(getattr(module, name), dtype=dtype))


def kv_cache_bytes(config: ModelConfig, kv_cache: str) -> int:
    """Bytes of one model's caches: keys and values of every layer over the whole context."""
    head_dim = config.head_dim or config.dim // config.n_heads
    per_position = 2 * config.n_layers * (config.n_kv_heads or config.n_heads) * head_dim
    return per_position * config.max_context_len * KV_CACHE_DTYPES[kv_cache].itemsize


def _use_spec_edge_attention(module: torch.nn.Module) -> None:
    from executorch.examples.models.llama.attention import SDPA as EtSDPA
    from executorch.examples.models.llama.attention import KVCache as EtKVCache
    for name, child in module.named_children():
        if isinstance(child, EtKVCache):
            batch, heads, context, head_dim = child.k_cache.shape
            setattr(module, name, KVCache(batch, context, heads, head_dim, child.k_cache.dtype))
        elif isinstance(child, EtSDPA):
            setattr(module, name, SDPA(child.dim))
        else:
            _use_spec_edge_attention(child)


def build_model(config: ModelConfig, state_dict=None, seed: int = 0) -> torch.nn.Module:
    """ExecuTorch's Llama transformer with KV caches, random (seeded) or loaded weights:
    ``state_dict`` is a dict or an iterable of (name, tensor) pairs, copied in one at a time as
    they come (so a stream of dequantized tensors is never held whole).

    Attention and the cache update run as spec_edge's fused ops (``spec_edge::attention``,
    ``spec_edge::update_cache``): decomposed into aten ops they leave the program as dozens of
    small delegate islands joined by portable copies, several times slower; and unlike
    ExecuTorch's own fused LLM ops they need no library beyond spec_edge's kernels at run time,
    so the C++ runner runs the same programs."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    torch.manual_seed(seed)
    model = construct_transformer(config.model_args()).eval()
    _use_spec_edge_attention(model)
    for p in model.parameters():
        p.requires_grad_(False)
    if state_dict is None:
        return model
    # The model's own tensors (state_dict shares their storage), copied into in place; the caches,
    # masks and RoPE tables may come too but need not.
    weights = model.state_dict()
    required = {k for k in weights if "kv_cache" not in k and "mask" not in k and "rope" not in k}
    loaded, unexpected = set(), []
    for name, value in state_dict.items() if isinstance(state_dict, dict) else state_dict:
        if name not in weights:
            unexpected.append(name)
            continue
        if value.shape != weights[name].shape:
            raise ValueError(f"weights do not fit the model config: {name} has shape {list(value.shape)}, "
                             f"the model's {list(weights[name].shape)}")
        weights[name].copy_(value)
        loaded.add(name)
    missing = sorted(required - loaded)
    if missing or unexpected:
        raise ValueError(f"weights do not fit the model config: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    return model


def sampling_example(config: ModelConfig) -> tuple[torch.Tensor, ...]:
    """Example values of the <sampling> inputs (shapes and dtypes the programs take)."""
    return (torch.tensor([0.0]), torch.tensor([0]), torch.tensor([1.0]), torch.tensor([0.0]),
            torch.tensor([1.0]), torch.full((1, config.max_context_len), -1, dtype=torch.long),
            torch.tensor([0]), torch.tensor([0]))


class _Prefill(torch.nn.Module):
    """The logits of the last token. The output layer runs on that row alone: over a vocabulary
    of 150k tokens it is a small model's largest matrix, and no other row of a prefill chunk (or
    of a draft step that catches up on two tokens) needs it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def last_logits(self, tokens, input_pos):
        # Read as the model is traced: h[:, -1] is taken before the norm and the output layer.
        full, self.model.generate_full_logits = self.model.generate_full_logits, False
        try:
            return self.model(tokens, {"input_pos": input_pos})
        finally:
            self.model.generate_full_logits = full

    def forward(self, tokens, input_pos):
        return self.last_logits(tokens, input_pos)


class _Logits(_Prefill):
    def forward(self, tokens, input_pos):
        return self.model(tokens, {"input_pos": input_pos})


class _DraftStep(_Prefill):
    def forward(self, tokens, input_pos, temperature, top_k, top_p, min_p, penalty, prev, seed, offset):
        logits = self.last_logits(tokens, input_pos)
        nxt = torch.ops.spec_edge.sample(logits, temperature, seed, offset, top_k, top_p, min_p, penalty, prev)
        return nxt, logits


class _DecodeStep(_Prefill):
    def forward(self, token, input_pos, temperature, top_k, top_p, min_p, penalty, prev, seed, offset):
        logits = self.last_logits(token, input_pos)
        return torch.ops.spec_edge.sample(logits, temperature, seed, offset, top_k, top_p, min_p, penalty, prev)


class _VerifyStep(_Prefill):
    def forward(self, tokens, input_pos, draft_logits, temperature, top_k, top_p, min_p, penalty, prev,
                seed, offset):
        logits = self.model(tokens, {"input_pos": input_pos})
        return torch.ops.spec_edge.verify(logits, draft_logits, tokens[:, 1:], temperature, seed, offset,
                                          None, top_k, top_p, min_p, penalty, prev)


class _Verify(torch.nn.Module):
    def forward(self, target_logits, draft_logits, draft_tokens, temperature, top_k, top_p, min_p, penalty,
                prev, seed, offset):
        return torch.ops.spec_edge.verify(target_logits, draft_logits, draft_tokens, temperature, seed,
                                          offset, None, top_k, top_p, min_p, penalty, prev)


def _metadata(vocab_size: int, k: int | None = None) -> dict:
    """Constant methods every program carries, so a loader can check a program on its own: the
    spec_edge op versions it was built for, its vocabulary and (target, verify) its K."""
    meta = {f"spec_edge_op_version_{name.split('::')[1]}": v for name, v in OP_VERSIONS.items()}
    meta["vocab_size"] = vocab_size
    if k is not None:
        meta["k"] = k
    return meta


# What `_lower` does to a program, in its reuse key: a cached program lowered before a change that
# makes programs faster (2: the transposes around the caches dropped) is exported again.
LOWERING = 2


def _lower_method(name: str, program, xnnpack: bool):
    """One method's ATen ``program`` lowered to an edge program (XNNPACK taking what it runs)."""
    from executorch.backends.transforms.fuse_cascaded_transpose_or_permute_ops import (
        FuseCascadedTransposeOrPermuteOps)
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    partitioners = []
    if xnnpack:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        partitioners.append(XnnpackPartitioner())
    # ExecuTorch's attention hands the caches on as [B, H, C, D] and spec_edge's reads them as
    # stored, [B, C, H, D]: two transposes that cancel, which XNNPACK would run as two copies of
    # every cache per layer and step (and the same for q, k and v). The pass drops them.
    edge = to_edge_transform_and_lower({name: program}, partitioner=partitioners,
                                       transform_passes=[FuseCascadedTransposeOrPermuteOps()],
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.exported_program(name)


def _lower(programs: dict, path: Path, xnnpack: bool, constants: dict) -> bytes:
    """Lowers ``programs`` (method name -> ATen program; the dict is emptied) into one program at
    ``path``. Each method is lowered on its own, its ATen program released before the next:
    lowered together, every method's intermediate copies of the weights are held at once, which
    multiplied the peak memory of a 4-method 1.5B export. The lowered methods join in one
    program, whose delegates' weights are stored once."""
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.program._program import EdgeProgramManager
    lowered, blobs = {}, {}
    for name in list(programs):
        lowered[name] = _lower_method(name, programs.pop(name), xnnpack)
        _shed_delegate_copies(lowered[name], blobs)
        release_memory()
    config = EdgeCompileConfig(_check_ir_validity=False)
    program = EdgeProgramManager(lowered, constants, config).to_executorch(ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False, share_mutable_buffers=True)))
    del lowered
    data = program.buffer
    path.write_bytes(data)
    return data


def _shed_delegate_copies(program, blobs: dict) -> None:
    """Drops what each lowered method would hold beside the others until the program is
    written: its delegates' copies of the weights they packed (named data, keyed by its sha256
    and stored once in the program: ``blobs`` keeps the first copy of each) and the values of the
    constants of the edge programs they were lowered from (later passes read their shapes, not
    their values: an uninitialised tensor of the same shape takes no memory until written). The
    1.5B target's export peaked at 11.2 GiB with this, 12.05 GiB without; the bytes are the same."""
    from executorch.exir.lowered_backend_module import LoweredBackendModule
    for module in program.graph_module.modules():
        if not isinstance(module, LoweredBackendModule):
            continue
        store = module.named_data_store_output
        for key, entry in (store.pte_data.items() if store is not None else ()):
            store.buffers[entry.buffer_index] = blobs.setdefault(key, store.buffers[entry.buffer_index])
        for constants in (module.original_module.state_dict, module.original_module.constants):
            for name, value in constants.items():
                if isinstance(value, torch.Tensor):
                    empty = torch.empty_like(value)
                    constants[name] = torch.nn.Parameter(empty, False) if isinstance(value, torch.nn.Parameter) else empty


def _export(module, args, dynamic=None):
    with torch.no_grad():
        return torch.export.export(module, args, dynamic_shapes=dynamic, strict=False)


# export_draft and export_target use ``model`` up: lowering leaves it unfit for another export.
def export_draft(model, config: ModelConfig, path: Path, prefill_chunk: int, xnnpack: bool = True) -> bytes:
    chunk = torch.export.Dim("chunk", min=1, max=prefill_chunk)
    step = torch.export.Dim("step", min=1, max=DRAFT_STEP_TOKENS)
    two, pos = torch.zeros(1, 2, dtype=torch.long), torch.tensor([0])
    sampling = sampling_example(config)
    return _lower({
        "prefill": _export(_Prefill(model), (two, pos), ({1: chunk}, None)),
        "draft_step": _export(_DraftStep(model), (two, pos, *sampling), ({1: step}, None) + (None,) * len(sampling)),
    }, path, xnnpack, _metadata(config.vocab_size))


def export_target(model, config: ModelConfig, k: int, path: Path, prefill_chunk: int,
                  xnnpack: bool = True) -> bytes:
    # Any K up to the exported one. The tracer specializes an example size of 1 and assumes a
    # dynamic size is not 1 (k = 1 still runs), so a range must hold two values above 1: the
    # examples are at least 2 and the ranges reach 3 (the manifest and the program's `k` say the
    # exported K).
    traced_k = max(k, 2)
    chunk = torch.export.Dim("chunk", min=1, max=prefill_chunk)
    rows = torch.export.Dim("rows", min=1, max=max(k + 1, 3))
    drafted = torch.export.Dim("k", min=1, max=max(k, 3))
    one, pos = torch.zeros(1, 1, dtype=torch.long), torch.tensor([0])
    draft_logits = torch.zeros(1, traced_k, config.vocab_size)
    verify_args = (torch.zeros(1, traced_k + 1, dtype=torch.long), pos, draft_logits, *sampling_example(config))
    verify_dims = ({1: drafted + 1}, None, {1: drafted}) + (None,) * len(sampling_example(config))
    return _lower({
        "prefill": _export(_Prefill(model), (torch.zeros(1, 2, dtype=torch.long), pos), ({1: chunk}, None)),
        "logits": _export(_Logits(model), (torch.zeros(1, 2, dtype=torch.long), pos), ({1: rows}, None)),
        "decode_step": _export(_DecodeStep(model), (one, pos, *sampling_example(config))),
        "verify": _export(_VerifyStep(model), verify_args, verify_dims),
    }, path, xnnpack, _metadata(config.vocab_size, k))


def export_verify(vocab_size: int, k: int, config: ModelConfig, path: Path) -> bytes:
    args = (torch.zeros(1, k + 1, vocab_size), torch.zeros(1, k, vocab_size),
            torch.zeros(1, k, dtype=torch.long), *sampling_example(config))
    return _lower({"verify": _export(_Verify(), args)}, path, xnnpack=False,
                  constants=_metadata(vocab_size, k))


QUANTIZE_MODES = ("8da4w", "8da8w")


def _check_quantize(argument: str, mode: str | None) -> None:
    if mode is not None and mode not in QUANTIZE_MODES:
        raise ValueError(f"{argument}: expected one of {QUANTIZE_MODES} or None, got {mode!r}")


def _check_group_size(argument: str, group: int | None) -> None:
    if group is not None and (isinstance(group, bool) or not isinstance(group, int) or group < 1 or group % 32):
        raise ValueError(f"{argument}: expected weights per scale in a positive multiple of 32 (XNNPACK's "
                         f"4-bit groups), got {group!r}")


LINEAR_MODES = ("8da8w", "fp32")


def quantize_model(model: torch.nn.Module, mode: str, group_size: int,
                   linears: dict[str, str] | None = None) -> torch.nn.Module:
    """``model``, changed in place: 8-bit dynamic activations with 4- or 8-bit weights on the
    linears, through ExecuTorch's own quantizer for its Llama models (torchao underneath). 8da4w
    weights come in groups of ``group_size`` (linears whose input size is not a multiple of it
    stay fp32); 8da8w weights have a scale per output channel, the only 8-bit layout XNNPACK
    runs. ``linears`` sets named linears apart (``{"output": "8da8w"}``; "fp32" keeps one float)."""
    from executorch.examples.models.llama.source_transformation.quantize import quantize
    _check_quantize("mode", mode)
    _check_linear_modes("linears", linears)
    apart = {}
    for name in linears or {}:
        owner_name, _, attribute = name.rpartition(".")
        try:
            owner = model.get_submodule(owner_name)
        except AttributeError:
            owner = None
        layer = getattr(owner, attribute, None)
        if not isinstance(layer, torch.nn.Linear):
            raise ValueError(f"linears: {name!r} is not a linear layer of the model")
        apart[name] = (owner, attribute, layer)
    for owner, attribute, _ in apart.values():  # out of the model-wide pass (every name checked first)
        setattr(owner, attribute, torch.nn.Identity())
    quantize(model, mode, group_size=group_size if mode == "8da4w" else 0)
    for name, (owner, attribute, layer) in apart.items():
        if linears[name] != "fp32":
            layer = quantize(torch.nn.Sequential(layer), linears[name], group_size=0)[0]
        setattr(owner, attribute, layer)
    return model


def _check_linear_modes(argument: str, linears: dict[str, str] | None) -> None:
    for name, mode in (linears or {}).items():
        if mode not in LINEAR_MODES:
            raise ValueError(f"{argument}[{name!r}]: expected one of {LINEAR_MODES}, got {mode!r}")


def _check_embedding_mode(argument: str, mode: str | None, *configs: ModelConfig) -> None:
    """``BITS,GROUP`` as ExecuTorch's LLM export spells ``--embedding-quantize``: 2, 4 or 8 bits,
    GROUP columns per scale (0: one scale per row), GROUP dividing every model's dim."""
    if mode is None:
        return
    match = re.fullmatch(r"(2|4|8),(\d+)", mode)
    if not match:
        raise ValueError(f"{argument}: expected 'BITS,GROUP' with BITS 2, 4 or 8 (e.g. '4,32', '8,0'), got {mode!r}")
    group = int(match.group(2))
    for config in configs:
        if group and config.dim % group:
            raise ValueError(f"{argument}: group size {group} does not divide the model dim {config.dim}")


def quantize_token_embedding(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    """``model`` with its token embedding quantized (``mode`` as ``_check_embedding_mode``), in
    place, by ExecuTorch's own LLM export transform: rows of BITS-bit weights with a float scale
    per GROUP columns, looked up by ``quantized_decomposed::embedding_*`` (ExecuTorch's quantized
    kernels, which the runners load). A tied output layer keeps the float weight it shares."""
    import executorch.kernels.quantized  # noqa: F401  (the ops the transform calls, for tracing)
    from executorch.examples.models.llama.source_transformation.quantize import get_quant_embedding_transform
    return get_quant_embedding_transform(mode)(model)


def _draft_ids(draft_vocab, corpus, tokenizer, vocab: int) -> list[int] | None:
    """export_pair's draft_vocab as sorted ids (None: the whole vocabulary)."""
    if draft_vocab is None:
        return None
    if isinstance(draft_vocab, int) and not isinstance(draft_vocab, bool):
        if tokenizer is None:
            raise ValueError("draft_vocab: a number of tokens needs the tokenizer that ranks them (tokenizer=...), "
                             "or give the token ids")
        draft_vocab = frequent_token_ids(tokenizer, stdlib_corpus() if corpus is None else corpus, draft_vocab)
    return check_draft_vocab(draft_vocab, vocab)


def state_dict_sha256(model: torch.nn.Module) -> str:
    """A model's identity for program reuse: its tensors' names, dtypes, shapes and bytes."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def release_memory() -> None:
    """Frees what Python no longer references and hands the C heap's free pages back to the
    system (glibc's malloc_trim): freed tensors below glibc's mmap threshold otherwise stay in the
    heap and count against every later stage of an export."""
    import ctypes
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def peak_rss_gib() -> float:
    """This process's peak resident memory so far."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def export_pair(target, target_config: ModelConfig, draft, draft_config: ModelConfig, k: int,
                out_dir: str | Path, prefill_chunk: int = 32, xnnpack: bool = True,
                tokenizer: str | Path | None = None, progress: bool = True,
                quantize: str | None = None, quantize_draft: str | None = None, group_size: int = 32,
                draft_group_size: int | None = None, quantize_embedding: str | None = None,
                quantize_linears: dict[str, str] | None = None, kv_cache: str = "fp32",
                sources: dict[str, str] | None = None, draft_vocab=None, draft_vocab_corpus=None) -> Path:
    """Writes draft.pte, target.pte, verify.pte, the tokenizer (if given) and the manifest.
    ``target`` and ``draft`` are modules (exported from a copy) or zero-argument callables that
    build them (each built when its program is exported, and released after). ``quantize="8da4w"``
    (or ``"8da8w"``) quantizes both models' linears first (XNNPACK runs them), ``quantize_draft``
    the draft's alone (default: as ``quantize``); fp32 otherwise. 8da4w weights have a scale per
    ``group_size`` of them, the draft's per ``draft_group_size`` (default: the same): larger
    groups make a shorter draft step and a draft further from its model (docs/BENCHMARKS.md).
    ``quantize_embedding`` (``"4,32"``: 4 bits, a scale per 32 columns; ``"8,0"``: 8 bits, a
    scale per row) quantizes both models' token embeddings. ``quantize_linears`` keeps named
    linears of the quantized target at higher precision than ``quantize`` (``{"output":
    "8da8w", "layers.0.feed_forward.w2": "fp32"}``; the draft's errors cost acceptance, never
    exactness, so it has no such setting). ``kv_cache`` (``"fp32"`` or ``"fp16"``) is the
    dtype of both programs' KV caches; the speculative output stays exact with respect to the
    exported target whichever it is.
    Prints each program's size, time and the peak memory so far, and the caches' bytes.

    ``draft_vocab`` restricts the draft's proposals to a subset of the vocabulary (a cheaper
    draft step; exact, see :mod:`spec_edge.draft_vocab`): token ids, or a number N for the N
    tokens most frequent when ``tokenizer`` encodes ``draft_vocab_corpus`` (text files; default:
    the Python standard library's sources).

    A program already in ``out_dir`` is reused, not exported again, when the manifest beside it
    records the same source and export settings for it (a new draft for the same target keeps
    target.pte). A module's source is its weights' hash; a callable's is ``sources["target"]`` /
    ``sources["draft"]`` (the GGUF and checkpoint exports pass their files' hash), without which
    it is always exported."""
    from tqdm import tqdm
    if draft_config.vocab_size != target_config.vocab_size:
        raise ValueError(f"draft and target must share a vocabulary: draft V={draft_config.vocab_size}, "
                         f"target V={target_config.vocab_size}")
    if draft_config.max_context_len != target_config.max_context_len:
        raise ValueError(f"draft and target must share the context length: draft "
                         f"{draft_config.max_context_len}, target {target_config.max_context_len}")
    if not 1 <= k < target_config.max_context_len:
        raise ValueError(f"k: expected 1..{target_config.max_context_len - 1}, got {k}")
    if kv_cache not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache: expected one of {', '.join(KV_CACHE_DTYPES)}, got {kv_cache!r}")
    _check_quantize("quantize", quantize)
    _check_quantize("quantize_draft", quantize_draft)
    _check_group_size("group_size", group_size)
    _check_group_size("draft_group_size", draft_group_size)
    if draft_group_size is not None and (quantize_draft or quantize) != "8da4w":
        raise ValueError("draft_group_size: sets the groups of an 8da4w draft; give quantize (or quantize_draft) "
                         "8da4w")
    _check_embedding_mode("quantize_embedding", quantize_embedding, target_config, draft_config)
    _check_linear_modes("quantize_linears", quantize_linears)
    if quantize_linears and quantize is None:
        raise ValueError("quantize_linears: sets linears of the quantized target apart; give quantize too")
    modes = {"target": quantize, "draft": quantize_draft or quantize, "embedding": quantize_embedding,
             "target_linears": dict(sorted((quantize_linears or {}).items())) or None}
    groups = {"target": group_size, "draft": draft_group_size or group_size}
    draft_ids = _draft_ids(draft_vocab, draft_vocab_corpus, tokenizer, draft_config.vocab_size)
    if not xnnpack and any(modes.values()):
        argument = "quantize" if quantize else "quantize_draft"
        raise ValueError(f"{argument}: the quantized linears run on XNNPACK; drop --no-xnnpack")
    se_executorch.load()
    from . import __version__
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def model(source, mode, group, vocab_ids=None, linears=None):
        # The caller's module stays intact (a copy is exported); a callable builds the model
        # when its turn comes, so that a lean export holds one model at a time.
        # The linears are quantized before the embedding: the embedding's quantizer needs several
        # times the embedding's size in temporaries, which then add to a 4-bit model, not an fp32 one.
        built = copy.deepcopy(source) if isinstance(source, torch.nn.Module) else source()
        if vocab_ids is not None:
            restrict_draft_vocab(built, vocab_ids, draft_config.vocab_size)
        if mode is not None:
            quantize_model(built, mode, group, linears)
            release_memory()  # the fp32 linears, before the embedding's temporaries
        if quantize_embedding is not None:
            quantize_token_embedding(built, quantize_embedding)
        set_kv_cache_dtype(built, kv_cache)
        return built

    def key(role: str, source, config: ModelConfig) -> str | None:
        """What a program is made from; None: unknown, so never reused."""
        identity = state_dict_sha256(source) if isinstance(source, torch.nn.Module) else (sources or {}).get(role)
        if identity is None:
            return None
        settings = dict(role=role, source=identity, config=asdict(config), quantize=modes[role],
                        embedding=quantize_embedding, group_size=groups[role], prefill_chunk=prefill_chunk,
                        xnnpack=xnnpack, k=k if role == "target" else None, ops=OP_VERSIONS, version=__version__,
                        lowering=LOWERING, vocab_ids=draft_ids if role == "draft" else None)
        if role == "target" and quantize_linears:  # absent when unset: earlier keys still match
            settings["linears"] = modes["target_linears"]
        if kv_cache != "fp32":  # likewise
            settings["kv_cache"] = kv_cache
        return sha256(json.dumps(settings, sort_keys=True).encode())

    keys = {"draft.pte": key("draft", draft, draft_config), "target.pte": key("target", target, target_config)}
    # Everything is written beside the output first and moved in once whole, the manifest last:
    # a failed or interrupted export leaves the directory as it was.
    with tempfile.TemporaryDirectory(dir=out, prefix=".partial-") as staging:
        stage = Path(staging)
        steps = [("draft.pte", lambda p: export_draft(model(draft, modes["draft"], groups["draft"], draft_ids),
                                                      draft_config, p, prefill_chunk, xnnpack)),
                 ("target.pte", lambda p: export_target(model(target, modes["target"], groups["target"],
                                                              linears=quantize_linears),
                                                        target_config, k, p, prefill_chunk, xnnpack)),
                 ("verify.pte", lambda p: export_verify(target_config.vocab_size, k, target_config, p))]
        hashes = {}
        cache_bytes = {role: kv_cache_bytes(config, kv_cache) for role, config in (("target", target_config),
                                                                                    ("draft", draft_config))}
        bar = tqdm(steps, desc="export", disable=not progress)
        if progress:
            bar.write(f"KV caches ({kv_cache}, {target_config.max_context_len} positions): target "
                      f"{cache_bytes['target'] / 2**20:.1f} MiB, draft {cache_bytes['draft'] / 2**20:.1f} MiB")
        for name, step in bar:
            start = time.monotonic()
            if keys.get(name) is not None and reusable(out, name, keys[name]):
                os.link(out / name, stage / name)
                hashes[name] = sha256((stage / name).read_bytes())
                if progress:
                    bar.write(f"{name}: reused (the same source and settings as the one in {out})")
                continue
            hashes[name] = sha256(step(stage / name))
            release_memory()  # nothing of one program's export held through the next
            if progress:
                bar.write(f"{name}: {(stage / name).stat().st_size / 2**20:.1f} MiB in "
                          f"{time.monotonic() - start:.0f} s, peak RSS so far {peak_rss_gib():.2f} GiB")
        if tokenizer is not None:
            for name in TOKENIZER_FILES:  # BOS/EOS and the chat template live beside tokenizer.json
                source = Path(tokenizer) if name == "tokenizer.json" else Path(tokenizer).parent / name
                if name == "tokenizer.json" or source.is_file():
                    (stage / name).write_bytes(source.read_bytes())
        write_manifest(stage, spec_edge_version=__version__, vocab_size=target_config.vocab_size, k=k,
                       max_context_len=target_config.max_context_len, prefill_chunk=prefill_chunk,
                       xnnpack=xnnpack, quantize=modes, draft_vocab=None if draft_ids is None else len(draft_ids),
                       kv_cache=kv_cache, kv_cache_bytes=cache_bytes,
                       programs=hashes,
                       program_keys={name: value for name, value in keys.items() if value is not None},
                       models={"target": asdict(target_config), "draft": asdict(draft_config)},
                       tokenizer="tokenizer.json" if tokenizer is not None else None)
        (out / MANIFEST).unlink(missing_ok=True)
        for name in [*TOKENIZER_FILES, *hashes, MANIFEST]:
            if (stage / name).is_file():
                os.replace(stage / name, out / name)
            elif name in TOKENIZER_FILES:
                (out / name).unlink(missing_ok=True)  # none stale from an earlier export
    return out
