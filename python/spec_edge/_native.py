"""Locating and loading the native library that registers ``torch.ops.spec_edge``.

The library is loaded once per process from one canonical path: loading the same library from
two paths would register the ops twice and abort.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

_LIB_NAME = "libspec_edge_aten.so"
_loaded: Path | None = None
_handle: ctypes.CDLL | None = None


def native_library(name: str, what: str) -> Path:
    """Canonical path of library `name` in ``$SPEC_EDGE_LIB_DIR`` or the package's ``_lib``."""
    lib_dir = Path(os.environ.get("SPEC_EDGE_LIB_DIR") or Path(__file__).parent / "_lib")
    path = lib_dir / name
    if not path.is_file():
        raise ImportError(
            f"spec_edge: cannot find {what} at {path}. Build it with `make build` (or "
            f"`pip install --no-build-isolation .`), or point SPEC_EDGE_LIB_DIR at the directory "
            f"that holds {name}."
        )
    return path.resolve()


def library_path() -> Path:
    """Path of the ATen op library."""
    return native_library(_LIB_NAME, "the op library")


def load_library() -> Path:
    """Loads the op library (idempotent) and returns its path."""
    global _loaded, _handle
    if _loaded is None:
        path = library_path()
        torch.ops.load_library(str(path))
        _handle = ctypes.CDLL(str(path))  # same handle: dlopen is reference-counted
        _handle.spec_edge_active_isa.restype = ctypes.c_char_p
        _handle.spec_edge_available_isas.restype = ctypes.c_char_p
        _handle.spec_edge_select_isa.restype = ctypes.c_char_p
        _handle.spec_edge_select_isa.argtypes = [ctypes.c_char_p]
        _handle.spec_edge_check_sampling.restype = ctypes.c_char_p
        _handle.spec_edge_check_sampling.argtypes = [ctypes.c_int64, ctypes.c_float, ctypes.c_int64,
                                                     ctypes.c_float, ctypes.c_float, ctypes.c_float]
        _loaded = path
    return _loaded


def has_cuda_kernels() -> bool:
    """Whether the loaded library runs the ops on CUDA tensors (a build with
    ``SPEC_EDGE_BUILD_CUDA=ON``; see ``custom_ops/cuda``)."""
    load_library()
    return torch._C._dispatch_has_kernel_for_dispatch_key("spec_edge::sample", "CUDA")


def active_isa() -> str:
    """The ISA path the CPU kernels run on: ``"scalar"``, ``"sse2"``, ``"avx2"``, ``"avx512"`` or ``"neon"``."""
    load_library()
    return _handle.spec_edge_active_isa().decode()


def available_isas() -> list[str]:
    """The ISA paths this build and CPU can run, the automatic choice first."""
    load_library()
    return _handle.spec_edge_available_isas().decode().split(",")


def select_isa(name: str) -> None:
    """Forces an ISA path for the rest of the process (as ``SPEC_EDGE_ISA`` does at start)."""
    load_library()
    error = _handle.spec_edge_select_isa(name.encode())
    if error is not None:
        raise ValueError(error.decode())


def check_sampling(vocab: int, temperature: float, top_k: int, top_p: float, min_p: float,
                   repetition_penalty: float) -> None:
    """The ops' checks of one sequence's sampling settings (``spec_edge::check_sampling_settings``),
    for front ends that pass them to exported programs: a ValueError with the ops' message."""
    load_library()
    error = _handle.spec_edge_check_sampling(vocab, temperature, top_k, top_p, min_p, repetition_penalty)
    if error is not None:
        raise ValueError(error.decode())
