"""ExecuTorch runtime kernels for the spec_edge ops.

``load()`` loads ``libspec_edge_executorch.so`` once per process, from one canonical path, into
the same operator registry that ExecuTorch's Python runtime uses, so ``.pte`` programs that call
``spec_edge::*.out`` run through ``executorch.runtime.Runtime``. It also loads ExecuTorch's own
LLM kernels (``llama::custom_sdpa``, ``llama::update_cache``), which targets made by ExecuTorch's
LLM export call (spec_edge's own programs use spec_edge's attention ops instead), and its
quantized kernels (``quantized_decomposed::embedding_*``), which quantized token embeddings call.

Example:
    >>> import spec_edge.executorch
    >>> path = spec_edge.executorch.load()
    >>> sorted(spec_edge.executorch.registered_ops())  # doctest: +NORMALIZE_WHITESPACE
    ['spec_edge::accept.out', 'spec_edge::attention.out', 'spec_edge::filter_logits.out',
     'spec_edge::sample.out', 'spec_edge::update_cache.out', 'spec_edge::verify.out',
     'spec_edge::verify_greedy.out']
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ._native import native_library

_LIB_NAME = "libspec_edge_executorch.so"
_loaded: Path | None = None


def library_path() -> Path:
    """Path of the ExecuTorch kernel library (built when executorch is installed at build time)."""
    return native_library(_LIB_NAME, "the ExecuTorch kernel library")


def load() -> Path:
    """Registers the spec_edge kernels with ExecuTorch's runtime (idempotent)."""
    global _loaded
    if _loaded is None:
        # The runtime whose registry the kernels join (it loads libexecutorch.so), and
        # ExecuTorch's LLM kernels, for targets from ExecuTorch's own LLM export.
        import executorch.extension.pybindings.portable_lib  # noqa: F401
        from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401
        # ExecuTorch's quantized kernels (quantized token embeddings), into the same registry
        # (NativeRunner's library uses this registration; the command-line runner links them).
        import executorch.kernels.quantized  # noqa: F401

        path = library_path()
        ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL)
        _loaded = path
    return _loaded


def registered_ops() -> set[str]:
    """The spec_edge operators ExecuTorch's runtime can run in this process."""
    from executorch.runtime import Runtime

    return {name for name in Runtime.get().operator_registry.operator_names if name.startswith("spec_edge::")}
