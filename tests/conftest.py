import os
import shutil
from pathlib import Path

import pytest


def pytest_addoption(parser):
    parser.addoption("--stat-full", action="store_true", default=False,
                     help="run the statistical conformance suite at >= 10^7 trials per case "
                          "and write docs/CONFORMANCE.md")
    parser.addoption("--real-models", action="store_true", default=False,
                     help="also run the long tests on the real GGUF files of build/models (make test-real)")
    parser.addoption("--vllm-k", type=int, default=3,
                     help="num_speculative_tokens of the vLLM engine tests (make test-vllm runs 2..5)")


@pytest.fixture(scope="session")
def stat_full(request) -> bool:
    return request.config.getoption("--stat-full")


def shared_dir(tmp_path_factory, name: str, make) -> Path:
    """A directory ``make(path)`` fills once per test session, whichever worker asks first: the
    pytest-xdist workers' temporary directories share a parent, and the others wait on a lock
    and take what the first made (an export is minutes; each worker used to make its own)."""
    from filelock import FileLock
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    path = root / name
    with FileLock(f"{path}.lock"):
        if not (root / f"{name}.done").exists():
            shutil.rmtree(path, ignore_errors=True)  # a first try that failed halfway
            make(path)
            (root / f"{name}.done").touch()
    return path


@pytest.fixture(scope="session")
def pair(tmp_path_factory):
    """The small random pair of tests/small_pair.py, exported once per session."""
    pytest.importorskip("executorch")
    from small_pair import export_small_pair
    return shared_dir(tmp_path_factory, "pte", export_small_pair)


@pytest.fixture(scope="session")
def embedding_pair(tmp_path_factory):
    """small_pair.embedding_configs exported with 4-bit grouped token embeddings ("4,32")."""
    pytest.importorskip("executorch")
    from small_pair import export_embedding_pair
    return shared_dir(tmp_path_factory, "embedding", lambda path: export_embedding_pair(path / "q4", "4,32")) / "q4"
