"""spec_edge's verification and sampling inside vLLM: a ``vllm.general_plugins`` plugin.

Off by default. With ``SPEC_EDGE_VLLM=1`` in the environment that starts vLLM (its engine and
worker processes inherit it), vLLM's speculative-decoding rejection sampler and its final-token
sampler run on :func:`spec_edge.verify` and :func:`spec_edge.sample` (CPU tensors on the core,
CUDA tensors on the CUDA kernels where the library was built with them). vLLM's own logits
processors (penalties, bad words, allowed tokens, min-tokens) still run first: they are masks
and offsets, not sampling.

Where the two contracts differ, the plugin adapts:

- vLLM hands the target's rows flattened (``[drafted + batch, V]``, each request's draft
  positions, then its bonus position); ``verify`` takes ``[B, K+1, V]`` with a draft length per
  row. Its output (the kept drafts, the correction or bonus token, then ``-1``) is vLLM's layout.
- n-gram drafts carry no probabilities (``draft_probs=None``): the draft is a point mass, which
  ``verify`` takes as one-hot draft logits, the exact draft-free rule. A draft of ``-1`` (vLLM's
  padding) ends that row's proposals there.
- A request's seed is vLLM's ``torch.Generator``; each step draws one 62-bit key from it, which
  becomes that row's Philox seed (offset 0). The ops key their stream by the row too
  (docs/OPS.md), so a seeded request runs through the op alone: its row in the batch does not
  enter its draws, as with vLLM's sampler. Unseeded rows go
  through the op together, their keys drawn from torch's global generator, which vLLM seeds.

What it does not serve it leaves to vLLM's own code, saying so once in the log: draft
probabilities (draft-model and EAGLE methods), logprobs, min-p together with top-k or top-p
(vLLM applies min-p first, spec_edge last), custom sampling-time logits processors, and a
device the library has no kernels for. A step whose settings the ops refuse goes to vLLM's
code too.
"""

from __future__ import annotations

import logging
import os

import torch

ENV = "SPEC_EDGE_VLLM"
SUPPORTED = ("0.32.",)  # the vLLM releases whose sampler internals this adapter is written for
_logger = logging.getLogger("vllm.spec_edge")
_said: set[str] = set()
_original: dict[str, object] = {}


def _once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        _logger.warning("spec_edge: %s; vLLM's own code serves it", message)


def enabled() -> bool:
    return os.environ.get(ENV, "0").lower() in ("1", "true", "yes", "on")


def register() -> None:
    """The entry point: patches vLLM's samplers when SPEC_EDGE_VLLM is set (idempotent: vLLM
    calls it once in each of its processes)."""
    if not enabled():
        return
    import vllm
    if not vllm.__version__.startswith(SUPPORTED):
        _logger.warning("spec_edge: vLLM %s is not a release this plugin was written for (%s); it stays off",
                        vllm.__version__, ", ".join(v + "x" for v in SUPPORTED))
        return
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler
    if _original:
        return
    _original["sample"], _original["forward"] = Sampler.sample, RejectionSampler.forward
    switch(True)
    _logger.info("spec_edge: vLLM's rejection sampler and sampler run on spec_edge.verify and spec_edge.sample")


def switch(on: bool) -> None:
    """Routes vLLM's samplers to spec_edge (``on``) or back to vLLM's own code, once ``register``
    has installed the plugin: tests and benchmarks compare the two in one process."""
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler
    if not _original:
        raise RuntimeError("spec_edge's vLLM plugin is not installed (SPEC_EDGE_VLLM=1, then register())")
    Sampler.sample = _sample if on else _original["sample"]
    RejectionSampler.forward = _rejection_sample if on else _original["forward"]


def _has_kernels(device: torch.device) -> bool:
    from spec_edge import has_cuda_kernels
    return device.type == "cpu" or (device.type == "cuda" and has_cuda_kernels())


def _row_keys(generators: dict, rows: int, device: torch.device) -> torch.Tensor:
    """One Philox seed per row for this step: from the request's generator where it has a seed."""
    keys = torch.randint(0, 2 ** 62, (rows,), dtype=torch.long)
    for row, generator in generators.items():
        keys[row] = torch.randint(0, 2 ** 62, (1,), dtype=torch.long, generator=generator)
    return keys.to(device)


def _by_request(call, settings: dict, rows: int, generators: dict) -> torch.Tensor:
    """``call(index, settings)``'s tokens for all rows: the unseeded rows in one call, each seeded
    row in its own (its draws then depend on its seed alone, not on its row in the batch)."""
    groups = [[row] for row in sorted(generators)]
    rest = [row for row in range(rows) if row not in generators]
    if rest:
        groups.append(rest)
    if len(groups) == 1:
        return call(slice(None), settings)
    out = None
    for group in groups:  # a seeded row as a slice: no gather
        index = (slice(group[0], group[0] + 1) if len(group) == 1
                 else torch.tensor(group, device=settings["seed"].device))
        part = call(index, {name: value[index] if isinstance(value, torch.Tensor) and value.dim() else value
                            for name, value in settings.items()})
        out = part.new_empty((rows, *part.shape[1:])) if out is None else out
        out[index] = part
    return out


def _min_p(sampling_metadata):
    """The rows' min-p (``[B]``) where a request sets one, else None; False for a sampling-time
    processor the plugin cannot fold into the op."""
    from vllm.v1.sample.logits_processor.builtin import MinPLogitsProcessor
    min_p = None
    for processor in sampling_metadata.logitsprocs.argmax_invariant:
        if not isinstance(processor, MinPLogitsProcessor):
            return False
        if processor.min_p_count:
            min_p = processor.min_p.reshape(-1)
    return min_p


def _settings(sampling_metadata, rows: int, device: torch.device) -> dict | str:
    """The op's temperature, filters and seeds for the rows, or why the plugin leaves them."""
    sm = sampling_metadata
    min_p = _min_p(sm)
    if min_p is False:
        return "custom sampling-time logits processors"
    if min_p is not None and (sm.top_k is not None or sm.top_p is not None):
        return "min-p together with top-k or top-p"
    settings = dict(temperature=torch.zeros(rows, device=device) if sm.temperature is None else sm.temperature,
                    seed=_row_keys(sm.generators, rows, device), offset=0)
    if sm.top_k is not None:
        settings["top_k"] = sm.top_k.long()
    if sm.top_p is not None:
        settings["top_p"] = sm.top_p
    if min_p is not None:
        settings["min_p"] = min_p
    return settings


def _sample(self, logits, sampling_metadata, logprobs_mode_override=None):
    """Sampler.sample: the next token of each row (``[B]``), with no processed logprobs."""
    import spec_edge
    sm = sampling_metadata
    mode = logprobs_mode_override or self.logprobs_mode
    wants_logprobs = sm.max_num_logprobs is not None or bool(sm.logprob_token_ids)
    reason = None
    if wants_logprobs and mode.startswith("processed"):
        reason = "logprobs of the processed logits"
    elif not _has_kernels(logits.device):
        reason = f"a device spec_edge has no kernels for ({logits.device})"
    settings = reason or _settings(sm, logits.shape[0], logits.device)
    if isinstance(settings, str):
        _once(settings)
        return _original["sample"](self, logits, sm, logprobs_mode_override)
    try:
        return _by_request(lambda index, s: spec_edge.sample(logits[index], **s), settings, logits.shape[0],
                           sm.generators), None
    except (RuntimeError, ValueError) as error:
        _once(f"settings spec_edge.sample refuses ({error})")
        return _original["sample"](self, logits, sm, logprobs_mode_override)


def _verify_rows(metadata, target: torch.Tensor, bonus: torch.Tensor) -> tuple:
    """vLLM's flattened rows as ``verify`` takes them: ``[B, K+1, V]`` target logits (each row's
    draft positions, then its bonus position), the drafts ``[B, K]`` (0 past a row's length) and
    the lengths ``[B]``, cut at a ``-1`` draft (vLLM's padding: no proposal from there on)."""
    device = target.device
    counts = torch.tensor(metadata.num_draft_tokens, dtype=torch.long, device=device)
    rows, k = counts.numel(), metadata.max_spec_len
    column = torch.arange(k + 1, device=device)
    starts = metadata.cu_num_draft_tokens.to(device=device, dtype=torch.long) - counts
    flat = (starts[:, None] + column).clamp(max=target.shape[0] - 1)  # past a row's drafts: any row
    drafted = column[:k] < counts[:, None]
    drafts = torch.where(drafted, metadata.draft_token_ids.to(device=device, dtype=torch.long)[flat[:, :k]], 0)
    logits = target[flat]
    logits[torch.arange(rows, device=device), counts] = bonus
    padding = drafted & (drafts < 0)  # cut there, the row's next token comes from that position
    counts = torch.where(padding.any(1), padding.int().argmax(1), counts)
    return logits, drafts.clamp_min(0), counts


def _rejection_sample(self, metadata, draft_probs, logits, sampling_metadata):
    """RejectionSampler.forward on spec_edge.verify."""
    import spec_edge
    from vllm.v1.outputs import SamplerOutput
    sm = sampling_metadata
    reason = None
    if draft_probs is not None:
        reason = "draft probabilities (draft-model and EAGLE drafts)"
    elif sm.max_num_logprobs is not None or sm.logprob_token_ids:
        reason = "logprobs with speculative decoding"
    elif self.synthetic_mode:
        reason = "synthetic acceptance rates"
    elif not _has_kernels(logits.device):
        reason = f"a device spec_edge has no kernels for ({logits.device})"
    settings = reason or _settings(sm, len(metadata.num_draft_tokens), logits.device)
    if isinstance(settings, str):
        _once(settings)
        return _original["forward"](self, metadata, draft_probs, logits, sm)
    # vLLM's processors on the draft positions (penalties counting the drafts before each one)
    # and on the bonus positions, as its own rejection sampler applies them.
    target = self.apply_logits_processors(logits[metadata.target_logits_indices].to(torch.float32), sm, metadata)
    bonus = self.sampler.apply_logits_processors(logits[metadata.bonus_logits_indices].to(torch.float32), sm,
                                                 predict_bonus_token=True)
    try:
        if metadata.max_spec_len == 0:  # no request drafted (prefill steps): the bonus tokens alone
            def call(index, s):
                return spec_edge.sample(bonus[index], **s)[:, None]
        else:
            rows, drafts, counts = _verify_rows(metadata, target, bonus)
            point_mass = torch.full(drafts.shape + rows.shape[-1:], float("-inf"), device=rows.device)
            point_mass.scatter_(-1, drafts[..., None], 0.0)

            def call(index, s):
                return spec_edge.verify(rows[index], point_mass[index], drafts[index], num_draft=counts[index],
                                        **s).tokens
        tokens = _by_request(call, settings, bonus.shape[0], sm.generators)
    except (RuntimeError, ValueError) as error:
        _once(f"settings spec_edge.verify refuses ({error})")
        return _original["forward"](self, metadata, draft_probs, logits, sm)
    return SamplerOutput(sampled_token_ids=tokens.to(torch.int32), logprobs_tensors=None)
