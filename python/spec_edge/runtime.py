"""The speculative loop over exported programs, entirely through ExecuTorch's runtime.

``PteSpeculativeDecoder(model_dir)`` loads ``draft.pte`` and ``target.pte`` (see
:mod:`spec_edge.export`), checks them against the manifest, and decodes: prefill in chunks, K
draft steps (model + ``sample`` fused), one fused verify step of the target, rollback by
position. ``generate(..., speculative=False)`` is target-only decoding through the same
``target.pte``.

A target exported by ExecuTorch's own LLM export (``export_llama`` with a KV cache, dynamic
shapes and full logits: a ``forward(tokens [1, n], input_pos [1]) -> logits [1, n, V]`` method)
runs too, given as ``target_pte``: its logits go through ``verify.pte``.

This loop is the reference of the round: the C++ runner (``runtime_demo/runner``, behind
``spec-edge-run``, :class:`spec_edge.NativeRunner` and the Android API) is tested to give its
tokens, and the constants the two share come from ``program_format.json``
(:data:`spec_edge.manifest.ROUND`). It needs only ExecuTorch's Python runtime, so it runs where
the native runner is not built (docs/ARCHITECTURE.md says why both exist).
"""

from __future__ import annotations

import functools
import numbers
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from . import executorch as se_executorch
from .manifest import (DRAFT_STEP_TOKENS, MANIFEST, OP_VERSIONS, ProgramError, read_manifest, read_model_file,
                       sha256)
from ._native import check_sampling
from .drafters import AdaptiveK, Drafting, PromptLookup
from .ops import Filters, float32_number
from .pte import inspect
from .stats import GenerationStats



INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


def integer(value, name: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    """An int argument as an int: a float (2.9), a bool or a string is a TypeError naming it,
    never truncated; outside ``[lo, hi]`` (int64 by default, what the programs and the runner
    hold) a ValueError naming it."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name}: expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name}: expected an integer in [{lo}, {hi}], got {value}")
    return int(value)


def token_ids(ids, name: str) -> list[int]:
    """A sequence of token ids as a list of ints by :func:`integer`'s rule: a string ("12"), or a
    float or a bool among the ids, is a TypeError naming ``name`` (never read as ``[1, 2]``)."""
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise TypeError(f"{name}: expected a 1-D integer tensor, got {ids.dtype} of shape {list(ids.shape)}")
        ids = ids.tolist()
    if isinstance(ids, (str, bytes, dict)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"{name}: expected a sequence of integer token ids, got {type(ids).__name__}")
    return [integer(t, f"{name}[{i}]") for i, t in enumerate(ids)]


def sampling_settings(vocab_size: int, temperature, filters: Filters) -> tuple[float, int, float, float, float]:
    """One sequence's ``(temperature, top_k, top_p, min_p, repetition_penalty)`` as the programs
    take them, checked by the ops' own rules and messages before any program runs (not an
    ExecuTorch error code from inside one)."""
    if filters.prev_tokens is not None:
        raise ValueError("filters.prev_tokens: the loop passes the context itself; leave it None")
    values = {"temperature": temperature, "filters.top_p": filters.top_p, "filters.min_p": filters.min_p,
              "filters.repetition_penalty": filters.repetition_penalty}
    for name, value in values.items():
        if not isinstance(value, numbers.Real) or isinstance(value, bool):  # per-row tensors are for batched ops
            raise TypeError(f"{name}: expected a number (one sequence), got {value!r}")
    T, top_p, min_p, penalty = (float32_number(float(v), name) for name, v in values.items())
    top_k = integer(filters.top_k, "filters.top_k")
    if not -2**63 <= top_k < 2**63:
        raise ValueError(f"filters.top_k: {top_k} does not fit int64")
    check_sampling(vocab_size, T, top_k, top_p, min_p, penalty)
    return T, top_k, top_p, min_p, penalty


def eos_ids(eos_token_id) -> list[int]:
    """``eos_token_id`` (``None``, one id, or several) as the list of ids that end generation."""
    if eos_token_id is None:
        return []
    ids = [eos_token_id] if isinstance(eos_token_id, numbers.Integral) else list(eos_token_id)
    for t in ids:
        if not isinstance(t, numbers.Integral) or isinstance(t, bool):
            raise TypeError(f"eos_token_id: expected an int or a list of ints, got {t!r}")
    return [integer(t, "eos_token_id") for t in ids]

def one_call_at_a_time(method):
    """Refuses (RuntimeError) a second call of ``method`` on an instance while one runs, from
    another thread or from inside its own ``on_tokens`` callback: the programs' KV caches belong
    to one generation at a time. Separate instances run in parallel."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        busy = self.__dict__.setdefault("_busy", threading.Lock())  # setdefault: atomic under the GIL
        if not busy.acquire(blocking=False):
            raise RuntimeError(f"{type(self).__name__}.{method.__name__}: this instance is already generating "
                               "(in another thread, or this call comes from its on_tokens); use one instance "
                               "per thread")
        try:
            return method(self, *args, **kwargs)
        finally:
            busy.release()
    return guarded


def _load_program(path: Path, methods: set[str], expected_sha256: str | None):
    """The program at `path` with `methods` loaded; checked against `expected_sha256` (the
    manifest's) before ExecuTorch reads a byte of it (None: a user's own program)."""
    from executorch.runtime import Runtime
    data = read_model_file(path, "program not found")
    if expected_sha256 is not None and sha256(data) != expected_sha256:
        raise ProgramError(f"{path}: does not match the manifest's hash (rebuilt or corrupted since export)")
    try:
        info = inspect(path)
    except ValueError as error:
        raise ProgramError(str(error)) from error
    unregistered = set(info.spec_edge_ops) - se_executorch.registered_ops()
    if unregistered:
        raise ProgramError(f"{path}: calls {sorted(unregistered)}, which ExecuTorch's runtime does not have "
                           "in this process: load spec_edge's kernels first (spec_edge.executorch.load())")
    try:
        program = Runtime.get().load_program(data)
    except Exception as error:
        raise ProgramError(f"{path}: not a loadable ExecuTorch program (truncated or corrupted?): "
                           f"{error}") from error
    missing = methods - set(program.method_names)
    if missing:
        raise ProgramError(f"{path}: missing methods {sorted(missing)}; has {sorted(program.method_names)}")
    loaded = {}
    for name in methods:
        try:
            loaded[name] = program.load_method(name)
        except Exception as error:
            raise ProgramError(
                f"{path}: method {name!r} does not load: {error}. If an operator is missing, load "
                "spec_edge's ExecuTorch kernels first (spec_edge.executorch.load()) and make sure "
                "the runtime links XNNPACK") from error
    return program, loaded


class PteSpeculativeDecoder:
    """Speculative decoding over ``draft.pte`` + ``target.pte`` in ``model_dir``.

    ``k`` proposals per round: any K up to the one the programs were exported for (the default);
    with ``adaptive_k``, the most per round. ``drafter``: ``"model"`` (draft.pte), ``"lookup"``
    (prompt lookup; no draft.pte needed) or ``"hybrid"``; ``drafting``: the other settings of
    :class:`spec_edge.drafters.Drafting` (``adaptive_k``, ``min_ngram``, ``max_ngram``,
    ``min_match``, the costs).

    Example (with a directory written by ``export/export_pair.py``)::

        dec = PteSpeculativeDecoder("out/")
        ids = dec.generate(prompt_ids, max_new=64, temperature=0.8,
                           filters=Filters(top_p=0.95), seed=1)
        dec.stats.tokens_per_second, dec.stats.accepted_histogram
    """

    def __init__(self, model_dir: str | Path, k: int | None = None, target_pte: str | Path | None = None,
                 drafter: str = "model", **drafting):
        self.drafting = Drafting(drafter, **drafting)
        self.drafting.check()
        self.dir = Path(model_dir)
        manifest_path = self.dir / MANIFEST
        self.manifest = read_manifest(self.dir)
        self.vocab_size = self.manifest["vocab_size"]
        self.max_context_len = self.manifest["max_context_len"]
        self.max_k = self.manifest["k"]
        self.prefill_chunk = self.manifest["prefill_chunk"]
        programs = self.manifest["programs"]
        k = None if k is None else integer(k, "k")
        if k is not None and not 1 <= k <= self.max_k:
            raise ProgramError(f"k: the programs were exported for K up to {self.max_k}, got k={k}")
        self.k = self.max_k if k is None else k
        self.drafting.check(self.k, self.max_k)  # verify_costs against this K and the programs'
        se_executorch.load()
        self.external_target = target_pte is not None
        def ours(name: str, methods: set[str]):
            if not isinstance(programs.get(name), str):
                raise ProgramError(f"{manifest_path}: programs: expected the sha256 of {name}")
            return _load_program(self.dir / name, methods, programs[name])

        self._draft_program, self.draft, loaded = None, None, []
        if drafter != "lookup":
            if not (self.dir / "draft.pte").is_file():
                raise ProgramError(f"{self.dir / 'draft.pte'}: not found; drafter {drafter} needs the draft model "
                                   "(drafter lookup runs on target.pte alone)")
            self._draft_program, self.draft = ours("draft.pte", {"prefill", "draft_step"})
            loaded.append(("draft.pte", self._draft_program))
        if self.external_target:
            if drafter != "model" or self.drafting.adaptive_k:
                raise ProgramError("drafter: verify.pte beside an external target verifies exactly K proposals per "
                                   "round; use the model drafter without adaptive_k")
            if self.k != self.max_k:
                raise ProgramError(f"k: verify.pte was exported for K={self.max_k}, got k={self.k}")
            self._verify_program, verify = ours("verify.pte", {"verify"})
            self._target_program, self.target = _load_program(Path(target_pte), {"forward"}, None)
            self.target["verify"] = verify["verify"]
            loaded.append(("verify.pte", self._verify_program))
        else:
            self._target_program, self.target = ours("target.pte", {"prefill", "logits", "decode_step", "verify"})
            loaded.append(("target.pte", self._target_program))
        self._check_programs(loaded)
        if self.external_target:
            self._check_llm_target(Path(target_pte))
        self.stats = GenerationStats()

    def _check_llm_target(self, path: Path):
        """A target from ExecuTorch's LLM export: full logits over the vocabulary for up to K+1
        tokens per call, with a KV cache (its constant methods, where it has them)."""
        meta = self._target_program.metadata("forward")
        out = list(meta.output_tensor_meta(0).sizes())
        rows = list(meta.input_tensor_meta(0).sizes())
        if len(out) != 3 or out[-1] != self.vocab_size:
            raise ProgramError(f"{path}: forward returns logits {out}, expected full logits [1, n, "
                               f"V={self.vocab_size}] (export it with generate_full_logits)")
        if rows[-1] < self.k + 1:
            raise ProgramError(f"{path}: forward takes up to {rows[-1]} tokens, the verify step needs K+1 = "
                               f"{self.k + 1} (export it with dynamic shapes and a KV cache)")
        names = set(self._target_program.method_names)
        for method, want in (("use_kv_cache", True), ("get_vocab_size", self.vocab_size)):
            if method in names and self._target_program.load_method(method).execute([])[0] != want:
                raise ProgramError(f"{path}: {method} is not {want}")
        self.prefill_chunk = min(self.prefill_chunk, rows[-1])

    # Each step's <sampling> inputs follow its fixed inputs (export.py); their sixth, prev_tokens,
    # is [1, max_context_len].
    SAMPLING_STARTS = {"draft_step": 2, "decode_step": 2, "verify": 3}

    def _check_shapes(self, name: str, program):
        """The manifest's context and prefill chunk against the program's own input shapes (the
        C++ runner's check): a manifest that disagrees would fail the first call inside ExecuTorch."""
        methods = set(program.method_names)
        for method, start in self.SAMPLING_STARTS.items():
            if method in methods:
                context = int(program.metadata(method).input_tensor_meta(start + 5).sizes()[1])
                if context != self.max_context_len:
                    raise ProgramError(f"{self.dir / MANIFEST}: max_context_len = {self.max_context_len}, but "
                                       f"{self.dir / name} was exported for a context of {context}")
        if "prefill" in methods:
            chunk = int(program.metadata("prefill").input_tensor_meta(0).sizes()[1])
            if chunk < self.prefill_chunk:
                raise ProgramError(f"{self.dir / MANIFEST}: prefill_chunk = {self.prefill_chunk}, but {self.dir / name} "
                                   f"takes prefill chunks of up to {chunk} tokens")

    def _check_programs(self, programs):
        """The programs' own metadata and shapes against the manifest and this spec_edge: op
        versions, the vocabulary of all, the largest K of the verify step."""
        for name, program in programs:
            for op, version in OP_VERSIONS.items():
                method = f"spec_edge_op_version_{op.split('::')[1]}"
                if method not in program.method_names:
                    raise ProgramError(f"{self.dir / name}: carries no {method}; export it again with this "
                                       "spec_edge")
                built = int(program.load_method(method).execute([])[0])
                if built != version:
                    raise ProgramError(f"{self.dir / name}: built for {op} version {built}, this spec_edge "
                                       f"has version {version}: export it again")
            self._check_shapes(name, program)
        name, program = programs[-1]  # the target's program (verify.pte beside an external target)
        vocab = None if self._draft_program is None else \
            int(self._draft_program.metadata("draft_step").output_tensor_meta(1).sizes()[-1])
        if vocab not in (None, self.vocab_size):
            raise ProgramError(f"{self.dir / 'draft.pte'}: vocabulary {vocab} does not match the manifest's "
                               f"{self.vocab_size} (draft and target must share a tokenizer)")
        if "k" not in program.method_names:
            raise ProgramError(f"{self.dir / name}: carries no k; export it again with this spec_edge")
        exported_k = int(program.load_method("k").execute([])[0])
        if exported_k != self.max_k:
            raise ProgramError(f"{self.dir / name}: exported for K={exported_k}, the manifest says K={self.max_k}")
        # Up to [1, K, V] (a target exported for K < 3 takes up to 3 rows: see export_target).
        draft_logits = list(program.metadata("verify").input_tensor_meta(1 if self.external_target else 2).sizes())
        if len(draft_logits) != 3 or draft_logits[::2] != [1, self.vocab_size] or draft_logits[1] < self.max_k:
            raise ProgramError(f"{self.dir / name}: its verify step takes draft logits "
                               f"{draft_logits}, not up to [1, K={self.max_k}, V={self.vocab_size}] as "
                               "the manifest says")

    # ---- the loop ---------------------------------------------------------------------------

    def sampling_inputs(self, temperature: float, filters: Filters, context: list[int], seed: int, offset: int):
        """The <sampling> inputs of the programs (see spec_edge.export), checked: the context
        becomes ``prev_tokens`` padded with -1 (only when the repetition penalty is on)."""
        T, top_k, top_p, min_p, penalty = sampling_settings(self.vocab_size, temperature, filters)
        prev = self._prev_tokens(context if penalty != 1.0 else [])
        return [torch.tensor([T]), torch.tensor([top_k]), torch.tensor([top_p]), torch.tensor([min_p]),
                torch.tensor([penalty]), prev, torch.tensor([int(seed)]), torch.tensor([int(offset)])]

    def _prev_tokens(self, context: list[int]) -> torch.Tensor:
        prev = torch.full((1, self.max_context_len), -1, dtype=torch.long)
        prev[0, :len(context)] = torch.tensor(context, dtype=torch.long)
        return prev

    def target_logits(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """The target's logits [1, n, V] over ``tokens`` [1, n] at ``input_pos`` (writes its cache);
        the fused target's ``logits`` method takes up to K+1 tokens."""
        if not self.external_target and not 1 <= tokens.shape[-1] <= self.max_k + 1:
            raise ValueError(f"tokens: the logits method takes 1..K+1 = {self.max_k + 1} tokens, "
                             f"got {tokens.shape[-1]}")
        return self.target["forward" if self.external_target else "logits"].execute([tokens, input_pos])[0]

    def _target_decode(self, token: int, pos: int, sampling: list[torch.Tensor]) -> int:
        if not self.external_target:
            return int(self.target["decode_step"].execute([torch.tensor([[token]]), torch.tensor([pos]),
                                                           *sampling])[0][0])
        T, top_k, top_p, min_p, penalty, prev, seed, offset = sampling
        logits = self.target_logits(torch.tensor([[token]]), torch.tensor([pos]))[:, -1]
        return int(torch.ops.spec_edge.sample(logits, T, seed, offset, top_k, top_p, min_p, penalty, prev)[0])

    def _target_verify(self, tokens: torch.Tensor, pos: int, draft_logits: torch.Tensor,
                       sampling: list[torch.Tensor]):
        if not self.external_target:
            return self.target["verify"].execute([tokens, torch.tensor([pos]), draft_logits, *sampling])
        logits = self.target_logits(tokens, torch.tensor([pos]))
        return self.target["verify"].execute([logits, draft_logits, tokens[:, 1:], *sampling])

    def _call_inputs(self, fixed: list[torch.Tensor], filters: Filters, context: list[int], offset: int):
        """The <sampling> inputs of one call: ``fixed`` (built once per generate) with this
        call's offset and, when the penalty reads it, its context."""
        inputs = list(fixed)
        if filters.repetition_penalty != 1.0:
            inputs[5] = self._prev_tokens(context)  # the settings were checked once, in generate
        inputs[7] = torch.tensor([offset])
        return inputs

    def _prefill(self, method, tokens: list[int], begin: int, end: int):
        """tokens[begin:end] into the program's cache at their positions, a chunk at a time."""
        for at in range(begin, end, self.prefill_chunk):
            chunk = torch.tensor([tokens[at:min(at + self.prefill_chunk, end)]], dtype=torch.long)
            method.execute([chunk, torch.tensor([at])])

    @one_call_at_a_time
    def generate(self, prompt_ids, max_new: int, temperature: float = 0.0, filters: Filters = Filters(),
                 seed: int = 0, speculative: bool = True,
                 eos_token_id: int | Sequence[int] | None = None) -> list[int]:
        """Up to ``max_new`` new token ids after ``prompt_ids`` (fewer at ``eos_token_id``: one id
        or several, such as Llama 3's three; the end token is kept). One call at a time per
        instance: a second one from another thread raises RuntimeError."""
        stop_ids = eos_ids(eos_token_id)
        max_new, seed = integer(max_new, "max_new"), integer(seed, "seed")
        prompt = token_ids(prompt_ids, "prompt_ids")
        if not prompt:
            raise ValueError("prompt_ids: expected at least one token")
        if any(not 0 <= t < self.vocab_size for t in prompt):
            raise ValueError(f"prompt_ids: ids must be in [0, {self.vocab_size})")
        if max_new < 0:
            raise ValueError(f"max_new: expected >= 0, got {max_new}")
        if len(prompt) + max_new + self.k + 1 > self.max_context_len:
            raise ValueError(f"prompt ({len(prompt)} tokens) + max_new ({max_new}) + K+1 ({self.k + 1}) "
                             f"exceeds the context length {self.max_context_len}")
        fixed = self.sampling_inputs(temperature, filters, [], seed, 0)  # checked before any program runs
        stats = GenerationStats(accepted_histogram=[0] * (self.k + 1))
        t_start = time.perf_counter()
        context = list(prompt)
        self._prefill(self.target["forward" if self.external_target else "prefill"], prompt, 0, len(prompt) - 1)
        if speculative and self.draft is not None:
            self._prefill(self.draft["prefill"], prompt, 0, len(prompt) - 1)
        d = self.drafting
        lookup = PromptLookup(d.min_ngram, d.max_ngram)
        lookup.extend(prompt)
        state = _Round(0, len(prompt) - 1, AdaptiveK(d.round_costs(self.k, model_drafts=True)),
                       AdaptiveK(d.round_costs(self.k, model_drafts=False)))
        stats.prefill_seconds = time.perf_counter() - t_start
        new: list[int] = []
        while len(new) < max_new:
            if not speculative:
                emitted = [self._decode_step(context, fixed, filters, state.offset, stats)]
                state.offset += 1
            else:
                emitted = self._round(context, fixed, filters, state, stats, lookup)
            emitted = emitted[:max_new - len(new)]
            stop = next((i for i, token in enumerate(emitted) if token in stop_ids), None)
            emitted = emitted if stop is None else emitted[:stop + 1]
            new += emitted
            context += emitted
            lookup.extend(emitted)
            if stop is not None:
                break
        stats.total_seconds = time.perf_counter() - t_start
        stats.new_tokens = len(new)
        self.stats = stats
        return new

    def _decode_step(self, context: list[int], fixed, filters: Filters, offset: int, stats: GenerationStats) -> int:
        """One token from the target alone, at Philox offset ``offset``."""
        t0 = time.perf_counter()
        token = self._target_decode(context[-1], len(context) - 1, self._call_inputs(fixed, filters, context, offset))
        stats.target_seconds += time.perf_counter() - t0
        return token

    def _round(self, context: list[int], fixed: list[torch.Tensor], filters: Filters, state: _Round,
               stats: GenerationStats, lookup: PromptLookup) -> list[int]:
        """One round: proposals from the drafter (prompt lookup's when it serves the round, the
        draft model's otherwise), one fused verify step; returns the emitted tokens. A round
        proposing K tokens takes Philox offsets offset..offset+K (draft steps, then the verify)."""
        d = self.drafting
        # The hybrid gives a round to lookup on an exact match only: the draft model predicts
        # better than a guess past an edit, until its own drafts make the edit (below).
        proposal = lookup.propose(state.lookup_k.next() if d.adaptive_k else self.k,
                                  resume=d.drafter == "lookup") if d.drafter != "model" else None
        if d.drafter == "lookup" or (d.drafter == "hybrid" and proposal.ngram >= d.min_match):
            if not proposal.tokens:  # nothing to verify: the target decodes one token
                stats.plain_steps += 1
                state.offset += 1
                return [self._decode_step(context, fixed, filters, state.offset - 1, stats)]
            k = len(proposal.tokens)
            rows = self._point_masses(proposal.tokens) if float(fixed[0]) != 0.0 else None
            emitted = self._verify(context, proposal.tokens, rows, fixed, filters, state.offset + k, stats)
            state.lookup_k.record(k, len(emitted) - 1)
            stats.lookup_rounds += 1
            stats.lookup_proposed += k
            stats.lookup_accepted += len(emitted) - 1
            state.offset += k + 1
            return emitted  # the draft's cache is left behind; it catches up when it next drafts
        drafted, rows, stepped = self._draft(context, fixed, filters, state,
                                             state.model_k.next() if d.adaptive_k else self.k, stats, lookup)
        k = len(drafted)
        emitted = self._verify(context, drafted, rows, fixed, filters, state.offset + k, stats)
        state.model_k.record(k, len(emitted) - 1)
        stats.model_rounds += 1
        stats.model_proposed += k
        stats.model_accepted += len(emitted) - 1
        # The draft saw the context and its drafts up to the last it stepped to, which it only proposed.
        pos = len(context) - 1
        state.draft_seen = min(pos + len(emitted), pos + stepped)
        state.offset += k + 1
        return emitted

    def _draft(self, context: list[int], fixed, filters: Filters, state: _Round, k: int, stats: GenerationStats,
               lookup: PromptLookup):
        """``k`` proposals from draft-model steps at Philox offsets state.offset..: (tokens, their
        logits rows [1, k, V] when sampling, else None, the steps taken). The first step also feeds
        the draft what it has not seen of the context. The hybrid drafter hands over to prompt
        lookup as soon as the context and the drafts so far end with a match of ``min_match``
        tokens, or the last draft replaced the token after one (the model bridges a stretch the
        text does not repeat, a renamed word say): lookup's tokens complete the proposal, each a
        point mass."""
        t0 = time.perf_counter()
        pos = len(context) - 1
        if len(context) - state.draft_seen > DRAFT_STEP_TOKENS:  # behind after lookup rounds
            self._prefill(self.draft["prefill"], context, state.draft_seen, pos)
            state.draft_seen = pos
        drafted: list[int] = []
        rows = []
        sampled = float(fixed[0]) != 0.0  # greedy verification reads no draft row (the tokens decide)
        for i in range(k):
            step = context[state.draft_seen:] if i == 0 else drafted[-1:]
            nxt, logits = self.draft["draft_step"].execute(
                [torch.tensor([step]), torch.tensor([pos + i - len(step) + 1]),
                 *self._call_inputs(fixed, filters, context + drafted, state.offset + i)])
            drafted.append(int(nxt[0]))
            rows.append(logits)
            if self.drafting.drafter != "hybrid" or i + 1 == k:
                continue
            tail = lookup.propose(k - i - 1, drafted)
            if tail.ngram >= self.drafting.min_match and tail.tokens:
                stepped = i + 1
                drafted += tail.tokens
                if sampled:
                    rows += list(self._point_masses(tail.tokens).unbind(1))
                break
        else:
            stepped = k
        stats.draft_seconds += time.perf_counter() - t0
        return drafted, torch.stack(rows, 1) if sampled else None, stepped

    def _point_masses(self, tokens: list[int]) -> torch.Tensor:
        """Draft rows [1, len(tokens), V], each a point mass on its token (-inf elsewhere): proposals
        that are a function of the context alone, verified through the exact draft-free rule."""
        rows = torch.full((1, len(tokens), self.vocab_size), float("-inf"))
        rows[0, torch.arange(len(tokens)), torch.tensor(tokens)] = 0.0
        return rows

    def _verify(self, context: list[int], proposed: list[int], rows, fixed, filters: Filters, offset: int,
                stats: GenerationStats) -> list[int]:
        """The fused verify step over the last token and ``proposed`` (``rows``: their draft
        logits, None when greedy), at Philox offset ``offset``: the accepted prefix and one more."""
        t0 = time.perf_counter()
        k = len(proposed)
        rows = torch.empty(1, k, self.vocab_size) if rows is None else rows
        accept_len, out = self._target_verify(torch.tensor([[context[-1]] + proposed]), len(context) - 1, rows,
                                              self._call_inputs(fixed, filters, context, offset))
        n = int(accept_len[0])
        stats.target_seconds += time.perf_counter() - t0
        stats.rounds += 1
        stats.proposed += k
        stats.accepted += n
        stats.accepted_histogram[n] += 1
        return out[0, :n + 1].tolist()


@dataclass
class _Round:
    """Where the loop stands between rounds: the next Philox offset, how much of the context the
    draft's cache holds, and adaptive K's evidence per drafter."""

    offset: int
    draft_seen: int
    model_k: AdaptiveK
    lookup_k: AdaptiveK
