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


@pytest.fixture(scope="session")
def pair(tmp_path_factory):
    """The small random pair of tests/small_pair.py, exported once per session."""
    pytest.importorskip("executorch")
    from small_pair import export_small_pair
    return export_small_pair(tmp_path_factory.mktemp("pte"))


@pytest.fixture(scope="session")
def embedding_pair(tmp_path_factory):
    """small_pair.embedding_configs exported with 4-bit grouped token embeddings ("4,32")."""
    pytest.importorskip("executorch")
    from small_pair import export_embedding_pair
    return export_embedding_pair(tmp_path_factory.mktemp("embedding") / "q4", "4,32")
