"""Python API over ``torch.ops.spec_edge``, and the fake kernels that let the ops trace.

The schemas are written once, in ``custom_ops/core/include/spec_edge/op_schemas.h``, and
registered by the native library (``custom_ops/aten``); this module adds fake (meta) kernels for
``torch.export`` / ``torch.compile``, whose signatures tests/test_op_schemas.py checks against the
registered schemas, and friendly wrappers.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._native import load_library

load_library()


class VerifyResult(NamedTuple):
    """Outcome of one verification: how many draft tokens were kept, and the token after them."""

    n_accepted: torch.Tensor  # int64, [] or [B]
    next_token: torch.Tensor  # int64, [] or [B]


class BatchVerifyResult(NamedTuple):
    """Outcome of batched ``verify``: per row, the kept length and the emitted tokens."""

    accept_len: torch.Tensor  # int64 [B]
    tokens: torch.Tensor  # int64 [B, K+1]: kept draft tokens, the next token, then -1


# The fake kernel of each op, by op name.
_FAKE_KERNELS: dict = {}


def _fake(op: str):
    def register(kernel):
        _FAKE_KERNELS[op] = kernel
        return torch.library.register_fake(f"spec_edge::{op}")(kernel)
    return register


def _check_rank(t: torch.Tensor, ranks: tuple[int, ...], name: str, layout: str) -> None:
    torch._check(t.dim() in ranks, lambda: f"{name}: expected shape {layout}, got {tuple(t.shape)}")


def _check_devices(scores: dict, small: dict) -> None:
    """The native kernels' placement rule, for calls that reach the fake kernels (a ``meta``
    tensor among CPU ones dispatches here): the score tensors on the device of the first, the
    small inputs there or on the CPU. Without it a mixed call returns uninitialised tensors."""
    (first, t0), *rest = scores.items()
    for name, t in rest:
        if t is not None and t.device != t0.device:
            raise ValueError(f"{name}: expected a tensor on {t0.device} (as {first}), got one on {t.device}")
    cpu = torch.device("cpu")
    for name, t in small.items():
        if t is not None and t.device not in (t0.device, cpu):
            where = "the CPU" if t0.device == cpu else f"the CPU or on {t0.device} (as {first})"
            raise ValueError(f"{name}: expected a tensor on {where}, got one on {t.device}")


@_fake("verify_greedy")
def _verify_greedy_fake(target_probs, draft_tokens):
    _check_devices({"target_probs": target_probs}, {"draft_tokens": draft_tokens})
    _check_rank(target_probs, (2, 3), "target_probs", "[K+1, V] or [B, K+1, V]")
    shape = target_probs.shape[:-2]
    return (target_probs.new_empty(shape, dtype=torch.long),
            target_probs.new_empty(shape, dtype=torch.long))


@_fake("accept")
def _accept_fake(target_probs, draft_probs, draft_tokens, uniforms):
    _check_devices({"target_probs": target_probs, "draft_probs": draft_probs},
                   {"draft_tokens": draft_tokens, "uniforms": uniforms})
    _check_rank(target_probs, (2, 3), "target_probs", "[K+1, V] or [B, K+1, V]")
    shape = target_probs.shape[:-2]
    return (target_probs.new_empty(shape, dtype=torch.long),
            target_probs.new_empty(shape, dtype=torch.long))


@_fake("verify")
def _verify_fake(target_logits, draft_logits, draft_tokens, temperature, seed, offset, num_draft=None,
                 top_k=None, top_p=None, min_p=None, repetition_penalty=None, prev_tokens=None):
    _check_devices({"target_logits": target_logits, "draft_logits": draft_logits},
                   dict(draft_tokens=draft_tokens, temperature=temperature, seed=seed, offset=offset,
                        num_draft=num_draft, top_k=top_k, top_p=top_p, min_p=min_p,
                        repetition_penalty=repetition_penalty, prev_tokens=prev_tokens))
    _check_rank(target_logits, (3,), "target_logits", "[B, K+1, V]")
    batch, rows = target_logits.shape[0], target_logits.shape[1]
    return (target_logits.new_empty((batch,), dtype=torch.long),
            target_logits.new_empty((batch, rows), dtype=torch.long))


@_fake("sample")
def _sample_fake(logits, temperature, seed, offset, top_k=None, top_p=None, min_p=None,
                 repetition_penalty=None, prev_tokens=None):
    _check_devices({"logits": logits}, dict(temperature=temperature, seed=seed, offset=offset, top_k=top_k,
                                            top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty,
                                            prev_tokens=prev_tokens))
    _check_rank(logits, (2,), "logits", "[B, V]")
    return logits.new_empty(logits.shape[:1], dtype=torch.long)


@_fake("filter_logits")
def _filter_logits_fake(logits, temperature, top_k=None, top_p=None, min_p=None,
                        repetition_penalty=None, prev_tokens=None):
    _check_devices({"logits": logits}, dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                            repetition_penalty=repetition_penalty, prev_tokens=prev_tokens))
    _check_rank(logits, (2,), "logits", "[B, V]")
    return torch.empty_like(logits)


def _check_start_pos(start_pos, seq: int, cache: torch.Tensor) -> None:
    # The position is data-dependent in exported programs (read from input_pos): tell the tracer
    # its range, as ExecuTorch's own cache ops do.
    torch._check(start_pos >= 0)
    torch._check(start_pos + seq <= cache.shape[1])


@_fake("update_cache")
def _update_cache_fake(value, cache, start_pos):
    _check_devices({"value": value, "cache": cache}, {})
    _check_rank(value, (4,), "value", "[B, S, H, D]")
    _check_start_pos(start_pos, value.shape[1], cache)
    return value.new_empty((1,))


@_fake("attention")
def _attention_fake(q, k_cache, v_cache, start_pos):
    _check_devices({"q": q, "k_cache": k_cache, "v_cache": v_cache}, {})
    _check_rank(q, (4,), "q", "[B, S, H, D]")
    _check_start_pos(start_pos, q.shape[1], k_cache)
    return torch.empty_like(q)


def verify_greedy(target_probs: torch.Tensor, draft_tokens: torch.Tensor) -> VerifyResult:
    """Greedy verification: keep draft tokens while they equal the target's argmax.

    Args:
        target_probs: ``[K+1, V]`` (or ``[B, K+1, V]``) target scores, probabilities or logits;
            float32, float16 or bfloat16.
        draft_tokens: ``[K]`` (or ``[B, K]``) int64 proposed tokens.

    Returns:
        ``VerifyResult(n_accepted, next_token)``; ``next_token`` is the target's argmax at the
        first mismatch, or at row K when every draft token matched. Ties go to the lowest id.

    Example:
        >>> import torch, spec_edge
        >>> p = torch.tensor([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
        >>> spec_edge.verify_greedy(p, torch.tensor([1, 2]))
        VerifyResult(n_accepted=tensor(1), next_token=tensor(0))
    """
    return VerifyResult(*torch.ops.spec_edge.verify_greedy(target_probs, draft_tokens))


def accept(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    generator: torch.Generator | None = None,
) -> VerifyResult:
    """Speculative sampling: the kept prefix and the next token, distributed exactly as ``p``.

    Token ``t_i`` is accepted iff ``u_i * q_i(t_i) <= p_i(t_i)``; at the first rejection the
    next token is drawn from ``norm(max(0, p_i - q_i))``, and if all ``K`` are accepted from
    ``p_K``. Rows need not be normalized. ``draft_probs=None`` is the draft-free mode for
    deterministic drafts (prompt lookup, n-grams): ``q`` is one-hot on the draft token.

    Args:
        target_probs: ``[K+1, V]`` or ``[B, K+1, V]`` target probabilities (>= 0, finite).
        draft_probs: ``[K, V]`` or ``[B, K, V]`` draft probabilities, or ``None``.
        draft_tokens: ``[K]`` or ``[B, K]`` int64 tokens sampled from the draft.
        generator: source of the ``K+1`` uniforms per sequence (float64); a generator in a
            fixed state gives a fixed result.

    Example:
        >>> import torch, spec_edge
        >>> p = torch.tensor([[0.5, 0.5], [0.25, 0.75]])
        >>> q = torch.tensor([[1.0, 0.0]])
        >>> g = torch.Generator().manual_seed(0)
        >>> r = spec_edge.accept(p, q, torch.tensor([0]), generator=g)
        >>> int(r.n_accepted) in (0, 1) and int(r.next_token) in (0, 1)
        True
    """
    uniforms = torch.rand(target_probs.shape[:-1], dtype=torch.float64, generator=generator,
                          device=target_probs.device)
    return VerifyResult(*torch.ops.spec_edge.accept(target_probs, draft_probs, draft_tokens, uniforms))


def accept_with_uniforms(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    uniforms: torch.Tensor,
) -> VerifyResult:
    """``accept`` with caller-supplied uniforms ``[K+1]`` (or ``[B, K+1]``) in ``[0, 1)``:
    ``u_i`` decides position ``i``, ``u_K`` draws the emitted token."""
    return VerifyResult(*torch.ops.spec_edge.accept(target_probs, draft_probs, draft_tokens, uniforms))


def float32_number(value: float, name: str) -> float:
    """A Python float for a float32 parameter; one that rounds to 0 is refused by name (a
    temperature of 1e-300 would silently mean greedy)."""
    if 0.0 < abs(value) <= 2.0 ** -150:
        raise ValueError(f"{name} = {value!r} is too small: it rounds to 0 in float32")
    return float(value)


def _param(value, dtype: torch.dtype, name: str) -> torch.Tensor:
    """A parameter as the op's tensor. A Python number goes through ``torch.scalar_tensor``, about
    2 us cheaper than ``torch.tensor`` (three per call in a decode loop); anything else (a list),
    and a float beyond float32, through ``torch.tensor``. Conversion errors name the argument."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, bool):  # an int to Python, a mistake here (seed=True)
        raise TypeError(f"{name}: expected {'a number' if dtype.is_floating_point else 'an integer'}, got {value!r}")
    if isinstance(value, float) and not dtype.is_floating_point:
        raise TypeError(f"{name}: expected an integer, got {value!r}")
    if isinstance(value, float) and dtype == torch.float32:
        float32_number(value, name)
    if isinstance(value, int) and dtype == torch.long and not -2**63 <= value < 2**63:
        # checked here, not by scalar_tensor's OverflowError, so that torch.compile traces the
        # same error
        raise ValueError(f"{name}: {value!r} does not fit {dtype}")
    if isinstance(value, (int, float)):
        try:
            return torch.scalar_tensor(value, dtype=dtype)
        except OverflowError as e:
            raise ValueError(f"{name}: {value!r} does not fit {dtype}") from e
        except RuntimeError:
            pass  # a float beyond float32: torch.tensor makes it inf, which the op refuses by name
    try:
        return torch.tensor(value, dtype=dtype)
    except TypeError as e:
        raise TypeError(f"{name}: expected a number or a tensor, got {type(value).__name__}") from e
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from e


class _Unset(int):
    """An int default that reads as its value but says it was not given (see _filter_args)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return int.__repr__(self)


class _UnsetFloat(float):
    __slots__ = ()

    def __repr__(self) -> str:
        return float.__repr__(self)


# The filter keywords' neutral defaults, told apart from the same values given explicitly.
_TOP_K, _TOP_P, _MIN_P, _PENALTY = _Unset(0), _UnsetFloat(1.0), _UnsetFloat(0.0), _UnsetFloat(1.0)


def _prev_tokens_arg(value) -> torch.Tensor | None:
    """``prev_tokens`` as the ops take it: a tensor as it is; a list of ids, or a list of lists
    (one per row, ragged allowed), as int64 padded with -1."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"prev_tokens: expected a tensor or a list of ids, got {type(value).__name__}")
    rows = value if value and all(isinstance(r, (list, tuple)) for r in value) else [value]
    for row in rows:
        for t in row:
            if not isinstance(t, int) or isinstance(t, bool):  # torch.tensor would truncate 2.5 to 2
                raise TypeError(f"prev_tokens: expected integer ids, got {t!r}")
    if rows is value:
        width = max(len(r) for r in rows)
        value = [list(r) + [-1] * (width - len(r)) for r in rows]
    return _param(value, torch.long, "prev_tokens")


class Filters(NamedTuple):
    """The sampling filters of the transformers chain, applied in its order (docs/FILTERS.md).

    Each is a scalar or a per-row ``[B]`` tensor; the neutral value switches a filter off and
    costs nothing. ``top_k`` of V or more keeps every token (transformers clamps k to V).
    ``prev_tokens`` (``[L]`` or ``[B, L]`` int64 with ``-1`` as padding, or a list of id lists)
    lists the ids the repetition penalty applies to, once per distinct id. Build one to reuse
    the settings across calls (``filters=``); the ops also take them as keywords.
    """

    top_k: int | torch.Tensor = 0
    top_p: float | torch.Tensor = 1.0
    min_p: float | torch.Tensor = 0.0
    repetition_penalty: float | torch.Tensor = 1.0
    prev_tokens: torch.Tensor | list | None = None

    def op_args(self) -> tuple:
        """The optional tensors of the ops, ``None`` for a filter left at its neutral value."""
        def opt(name, neutral, dtype):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor) and value == neutral:
                return None
            return _param(value, dtype, name)
        return (opt("top_k", 0, torch.long), opt("top_p", 1.0, torch.float32),
                opt("min_p", 0.0, torch.float32),
                opt("repetition_penalty", 1.0, torch.float32), _prev_tokens_arg(self.prev_tokens))


def _filter_args(filters: Filters | None, top_k, top_p, min_p, repetition_penalty, prev_tokens) -> tuple:
    """The ops' filter tensors from the keywords, or from ``filters`` when one is given (then no
    keyword may set a filter too)."""
    if filters is None:
        return Filters(top_k, top_p, min_p, repetition_penalty, prev_tokens).op_args()
    if not isinstance(filters, Filters):
        raise TypeError(f"filters: expected a spec_edge.Filters, got {type(filters).__name__}")
    keywords = (top_k, top_p, min_p, repetition_penalty, prev_tokens)
    for name, value in zip(Filters._fields, keywords):
        if value is not None and type(value) not in (_Unset, _UnsetFloat):
            raise TypeError(f"filters and {name}: both given; set {name} in one of them")
    return filters.op_args()


def verify(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
    seed: int | torch.Tensor = 0,
    offset: int | torch.Tensor = 0,
    num_draft: torch.Tensor | None = None,
    *,
    top_k: int | torch.Tensor = _TOP_K,
    top_p: float | torch.Tensor = _TOP_P,
    min_p: float | torch.Tensor = _MIN_P,
    repetition_penalty: float | torch.Tensor = _PENALTY,
    prev_tokens: torch.Tensor | list | None = None,
    filters: Filters | None = None,
) -> BatchVerifyResult:
    """Batched verification from logits with seeded, counter-based randomness.

    ``p = softmax(target_logits / T)`` and ``q = softmax(draft_logits / T)``, then the rule of
    :func:`accept`, with uniform ``j`` of row ``b`` taken from the Philox4x32-10 stream keyed by
    ``(seed, offset, b)`` (see ``docs/OPS.md``). ``temperature == 0`` is greedy. Advance
    ``offset`` by one per call.

    Args:
        target_logits: ``[B, K+1, V]``; draft_logits: ``[B, K, V]``; draft_tokens: ``[B, K]``.
        temperature, seed, offset: a scalar or a per-row ``[B]`` tensor.
        num_draft: optional ``[B]`` int tensor, draft length of each row (``0..K``).
        top_k, top_p, min_p, repetition_penalty, prev_tokens: the sampling filters (as in
            :func:`sample`), applied identically to target and draft rows inside the op (both
            renormalized over their kept sets); the penalty of row ``i`` also counts the draft
            tokens before ``i``. Or ``filters``, a :class:`Filters` holding them.

    Returns:
        ``BatchVerifyResult(accept_len [B], tokens [B, K+1])``; ``tokens[b]`` holds the kept
        draft tokens, then the correction or bonus token, then ``-1``.

    Example:
        >>> import torch, spec_edge
        >>> t = torch.randn(2, 4, 50); d = t[:, :3] + 0.1 * torch.randn(2, 3, 50)
        >>> accept_len, out = spec_edge.verify(t, d, d.argmax(-1), temperature=0.8, seed=7, offset=0)
        >>> out.shape
        torch.Size([2, 4])
    """
    return BatchVerifyResult(*torch.ops.spec_edge.verify(
        target_logits, draft_logits, draft_tokens,
        _param(temperature, torch.float32, "temperature"), _param(seed, torch.long, "seed"),
        _param(offset, torch.long, "offset"), num_draft,
        *_filter_args(filters, top_k, top_p, min_p, repetition_penalty, prev_tokens)))


def sample(
    logits: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
    top_k: int | torch.Tensor = _TOP_K,
    top_p: float | torch.Tensor = _TOP_P,
    min_p: float | torch.Tensor = _MIN_P,
    repetition_penalty: float | torch.Tensor = _PENALTY,
    prev_tokens: torch.Tensor | list | None = None,
    seed: int | torch.Tensor = 0,
    offset: int | torch.Tensor = 0,
    *,
    filters: Filters | None = None,
) -> torch.Tensor:
    """One token per row from the filtered ``softmax(logits / temperature)``; ``temperature == 0``
    is argmax (of the penalized logits).

    Exact sampling with the Philox4x32-10 stream keyed by ``(seed, offset, row)`` (the layout of
    :func:`verify`; give the two ops distinct offsets), over the kept set of
    :func:`filter_logits`: unfiltered, by rejection from an envelope of the softmax built from each
    block's maximum in one pass over the row (``docs/OPS.md``); with top-k, top-p or min-p, by
    inverse CDF over the kept set.
    Masked (``-inf``) logits are never drawn. The same inputs and seed give the same tokens on
    every CPU path.

    Args:
        logits: ``[B, V]`` float32, float16 or bfloat16.
        temperature: a scalar or a per-row ``[B]`` tensor; ``0`` is argmax.
        top_k: keep the k highest scores (``0`` off; ``>= V`` keeps every token); ``1`` is greedy.
        top_p: keep the smallest set of top tokens with this much probability, in ``(0, 1]``.
        min_p: keep tokens with probability ``>= min_p *`` the top one's, in ``[0, 1]``.
        repetition_penalty: ``> 0``; the logits of ``prev_tokens`` are divided by it (positive)
            or multiplied by it (negative), once per distinct id; ``1.0`` changes nothing.
        prev_tokens: ``[L]`` or ``[B, L]`` int64 with ``-1`` as padding, or a list of id lists.
        seed, offset: the Philox key; a scalar or a per-row ``[B]`` tensor.
        filters: a :class:`Filters` instead of the five filter keywords.

    Each filter is a scalar or a per-row ``[B]`` tensor.

    Returns:
        ``[B]`` int64 tokens.

    Example:
        >>> import torch, spec_edge
        >>> logits = torch.tensor([[0.0, -float("inf"), 2.0], [5.0, 1.0, 0.0]])
        >>> spec_edge.sample(logits, temperature=0.0).tolist()
        [2, 0]
        >>> spec_edge.sample(logits, temperature=0.7, seed=3)[0].item() in (0, 2)
        True
        >>> spec_edge.sample(logits, 0.7, top_k=1, seed=3).tolist()
        [2, 0]
    """
    return torch.ops.spec_edge.sample(logits, _param(temperature, torch.float32, "temperature"),
                                      _param(seed, torch.long, "seed"), _param(offset, torch.long, "offset"),
                                      *_filter_args(filters, top_k, top_p, min_p, repetition_penalty, prev_tokens))


def filter_logits(
    logits: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
    top_k: int | torch.Tensor = _TOP_K,
    top_p: float | torch.Tensor = _TOP_P,
    min_p: float | torch.Tensor = _MIN_P,
    repetition_penalty: float | torch.Tensor = _PENALTY,
    prev_tokens: torch.Tensor | list | None = None,
    *,
    filters: Filters | None = None,
) -> torch.Tensor:
    """The logits the transformers chain hands to softmax: penalized, divided by the
    temperature, removed tokens at ``-inf`` (``RepetitionPenaltyLogitsProcessor``,
    ``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``,
    ``MinPLogitsWarper``, in that order). ``temperature == 0`` keeps only the argmax.

    Sort-free: top-k by selection, top-p and min-p by a threshold search over the candidates.
    Ties with a kept score are kept (see ``docs/FILTERS.md``).

    Args:
        logits: ``[B, V]`` float32, float16 or bfloat16.
        temperature, top_k, top_p, min_p, repetition_penalty, prev_tokens: as in :func:`sample`.
        filters: a :class:`Filters` instead of the five filter keywords.

    Returns:
        ``[B, V]`` tensor of the logits' dtype.

    Example:
        >>> import torch, spec_edge
        >>> x = torch.tensor([[3.0, 1.0, 2.0, -1.0]])
        >>> spec_edge.filter_logits(x, 0.5, top_k=2)
        tensor([[6., -inf, 4., -inf]])
    """
    return torch.ops.spec_edge.filter_logits(logits, _param(temperature, torch.float32, "temperature"),
                                             *_filter_args(filters, top_k, top_p, min_p, repetition_penalty,
                                                           prev_tokens))
