"""spec_edge: exact speculative-decoding verification and sampling ops for devices.

Importing the package loads the native library that registers ``torch.ops.spec_edge``.
"""

from ._native import active_isa, available_isas, has_cuda_kernels, library_path, load_library, select_isa
from .analysis import (
    acceptance_rate,
    accepted_length_distribution,
    draft_free_acceptance_rate,
    expected_accepted_length,
    expected_tokens_per_round,
    greedy_acceptance_rate,
)
from .decoder import SpeculativeDecoder
from .stats import GenerationStats
from .pte import inspect
from .ops import (
    BatchVerifyResult,
    Filters,
    VerifyResult,
    accept,
    accept_with_uniforms,
    filter_logits,
    sample,
    verify,
    verify_greedy,
)

__version__ = "0.1.0"


def __getattr__(name: str):
    # The ExecuTorch side loads on first use: importing spec_edge needs only torch.
    if name in ("NativeRunner", "NativeTokenizer"):
        from . import native_runner
        return getattr(native_runner, name)
    raise AttributeError(f"module 'spec_edge' has no attribute {name!r}")


__all__ = [
    "BatchVerifyResult", "Filters", "GenerationStats", "NativeRunner", "NativeTokenizer", "SpeculativeDecoder", "VerifyResult", "accept",
    "accept_with_uniforms", "acceptance_rate", "accepted_length_distribution", "active_isa",
    "available_isas", "draft_free_acceptance_rate", "filter_logits", "expected_accepted_length",
    "expected_tokens_per_round", "greedy_acceptance_rate", "has_cuda_kernels", "inspect", "library_path", "load_library",
    "sample", "select_isa", "verify", "verify_greedy",
]
