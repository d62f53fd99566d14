"""Builds the native libraries with CMake as part of `pip install` (editable or not)."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent.resolve()


def cmake_command() -> str:
    """The cmake of this Python environment (PyPI `cmake`, >= 3.28), else the one on PATH."""
    try:
        import cmake

        return str(Path(cmake.CMAKE_BIN_DIR) / "cmake")
    except ImportError:
        return shutil.which("cmake") or "cmake"


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        if os.environ.get("SPEC_EDGE_USE_BUILT_LIBRARIES") == "1":
            # Another environment with the same torch (make vllm-venv): the editable package with
            # the libraries a build already put in python/spec_edge/_lib.
            if not self.editable_mode or not list((ROOT / "python" / "spec_edge" / "_lib").glob("*.so")):
                raise RuntimeError("SPEC_EDGE_USE_BUILT_LIBRARIES=1: needs an editable install (-e) and the "
                                   "libraries of `make build` in python/spec_edge/_lib")
            return
        try:
            import torch  # the torch the libraries must match (hence --no-build-isolation)
        except ImportError as error:
            raise RuntimeError(
                "spec_edge links the installed torch (torch==2.13.0): install torch first, then "
                "`pip install --no-build-isolation .`") from error

        package = ROOT / "python" if self.editable_mode else Path(self.build_lib).resolve()
        prefixes = [torch.utils.cmake_prefix_path]
        executorch = importlib.util.find_spec("executorch")  # optional: the ExecuTorch kernels
        if executorch is not None:
            prefixes.append(executorch.submodule_search_locations[0])
        try:  # optional: spec_edge.NativeRunner's extension module
            import pybind11
            prefixes.append(pybind11.get_cmake_dir())
        except ImportError:
            pass
        build_dir = Path(os.environ.get("SPEC_EDGE_CMAKE_BUILD_DIR", ROOT / "build" / "cmake"))
        cmake = cmake_command()
        configure = [
            cmake, "-S", str(ROOT), "-B", str(build_dir),
            f"-DCMAKE_PREFIX_PATH={';'.join(prefixes)}",
            f"-DSPEC_EDGE_BUILD_EXECUTORCH={'ON' if executorch is not None else 'OFF'}",
            f"-DSPEC_EDGE_BUILD_RUNNER={'ON' if executorch is not None else 'OFF'}",
            f"-DSPEC_EDGE_PYTHON_LIB_DIR={package / 'spec_edge' / '_lib'}",
            f"-DPython_EXECUTABLE={sys.executable}",  # the extension's Python: this one
        ]
        # SPEC_EDGE_BUILD_{TESTS,BENCH,...} from the environment become CMake options.
        configure += [f"-D{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("SPEC_EDGE_BUILD_")]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja"]
        subprocess.check_call(configure)
        subprocess.check_call([cmake, "--build", str(build_dir), "-j", str(os.cpu_count() or 1)])
        subprocess.check_call([cmake, "--install", str(build_dir)])


setup(cmdclass={"build_py": BuildWithCMake})
