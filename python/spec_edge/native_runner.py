"""``NativeRunner``: the C++ runner of ``runtime_demo/`` driven from Python.

The same API, checks and tokens as :class:`spec_edge.runtime.PteSpeculativeDecoder`; the loop
runs in C++ (without the GIL), so each round costs what it costs on the device::

    runner = spec_edge.NativeRunner("out/")
    ids = runner.generate(prompt_ids, max_new=64, temperature=0.8, filters=Filters(top_p=0.95), seed=1)
    runner.stats.tokens_per_s, runner.stats.accepted_hist
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import numbers
from collections.abc import Callable
from pathlib import Path

from . import executorch as se_executorch
from ._native import native_library
from .ops import Filters
from .runtime import GenerateStats

_extension = None


def _load_extension():
    global _extension
    if _extension is None:
        # ExecuTorch's runtime and spec_edge's kernels from their canonical paths first: the
        # extension links the same files, so the process keeps one registry.
        se_executorch.load()
        name = "_runner_ext" + importlib.machinery.EXTENSION_SUFFIXES[0]
        path = native_library(name, "the runner's Python extension (built with the runner, when pybind11 is installed)")
        spec = importlib.util.spec_from_file_location("spec_edge._runner_ext", path)
        _extension = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_extension)
    return _extension


class NativeRunner:
    """Speculative decoding over ``draft.pte`` + ``target.pte`` in ``model_dir`` by the C++ runner.

    ``k`` draft tokens per round: any K up to the one the programs were exported for (the
    default). Raises :class:`spec_edge.runtime.ProgramError` for a directory, manifest or program
    it cannot run and ``ValueError`` for arguments out of range, as the Python loop does.
    """

    def __init__(self, model_dir: str | Path, k: int | None = None):
        self._runner = _load_extension().Runner(str(model_dir), None if k is None else int(k))
        self.dir = Path(model_dir)
        self.k, self.max_k = self._runner.k, self._runner.max_k
        self.vocab_size, self.max_context_len = self._runner.vocab_size, self._runner.max_context_len
        self.stats = GenerateStats()

    def generate(self, prompt_ids, max_new: int, temperature: float = 0.0, filters: Filters = Filters(),
                 seed: int = 0, speculative: bool = True, eos_token_id: int | None = None,
                 on_tokens: Callable[[list[int]], None] | None = None) -> list[int]:
        """Up to ``max_new`` new token ids after ``prompt_ids`` (fewer at ``eos_token_id``).

        ``on_tokens`` receives each round's tokens as soon as they are decided (streaming).
        """
        if filters.prev_tokens is not None:
            raise ValueError("filters.prev_tokens: the loop passes the context itself; leave it None")
        for name in ("top_k", "top_p", "min_p", "repetition_penalty"):
            value = getattr(filters, name)
            if not isinstance(value, numbers.Real):  # per-row tensors are for batched ops, not one sequence
                raise ValueError(f"filters.{name}: expected a number (one sequence), got {type(value).__name__}")
        ext = _load_extension()
        sampling = ext.Sampling(temperature=float(temperature), top_k=int(filters.top_k), top_p=float(filters.top_p),
                                min_p=float(filters.min_p), repetition_penalty=float(filters.repetition_penalty),
                                seed=int(seed))
        tokens = self._runner.generate([int(t) for t in prompt_ids], int(max_new), sampling, bool(speculative),
                                       -1 if eos_token_id is None else int(eos_token_id), on_tokens)
        self.stats = GenerateStats(**self._runner.stats())
        return tokens

    def stop(self) -> None:
        """Ends the ``generate`` in flight after its current round, from another thread or from ``on_tokens``."""
        self._runner.stop()

    @staticmethod
    def show_executorch_info(show: bool = True) -> None:
        """ExecuTorch's info messages (its CPU probing when XNNPACK starts, program loading) on
        stderr from now on, in this process; hidden by default, as the command-line runner hides
        them without ``--verbose``. Its errors are always shown."""
        _load_extension().show_executorch_info(bool(show))
