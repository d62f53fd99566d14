"""A local build directory in the layout of the `kernels` library (``kernels.get_local_kernel``).

The variant is a thin package over the installed ``spec_edge``: it exposes the same API and
loads the same native library from its one canonical path, so ``torch.ops.spec_edge`` keeps its
stable op names (what ``.pte`` programs refer to).

Example:
    >>> import pathlib, tempfile, kernels                       # doctest: +SKIP
    >>> repo = write_kernels_variant(pathlib.Path(tempfile.mkdtemp()))
    >>> ops = kernels.get_local_kernel(repo)
    >>> ops.verify_greedy(...)
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch

from . import __version__

PACKAGE = "spec_edge_kernels"

_INIT = '''"""spec_edge through the `kernels` loader: the same API and ops as `import spec_edge`."""
from spec_edge import *  # noqa: F401,F403
from spec_edge import __all__, __version__  # noqa: F401
'''


def variant_name() -> str:
    """``torch{major}{minor}-cxx11-cpu-{arch}-{os}``, the variant this torch loads."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    abi = "cxx11" if torch.compiled_with_cxx11_abi() else "cxx98"
    return f"torch{major}{minor}-{abi}-cpu-{platform.machine()}-{platform.system().lower()}"


def write_kernels_variant(repo_dir: Path) -> Path:
    """Writes ``repo_dir/build/<variant>/`` (metadata.json + the package); returns ``repo_dir``."""
    variant = Path(repo_dir) / "build" / variant_name()
    (variant / PACKAGE).mkdir(parents=True, exist_ok=True)
    (variant / PACKAGE / "__init__.py").write_text(_INIT)
    metadata = {
        "id": f"{PACKAGE}_{__version__.replace('.', '_')}",
        "name": PACKAGE.replace("_", "-"),
        "version": 1,
        "license": "Apache-2.0",
        "python-depends": [],
        "backend": {"type": "cpu"},
    }
    (variant / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    return Path(repo_dir)
