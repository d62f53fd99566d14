"""The real checkpoints of `make fetch-models` (build/models), where present: each skips with a
message otherwise (CI does not hold 1.7 GB of weights)."""

import sys
import sysconfig
from pathlib import Path

import pytest

import spec_edge
from tokenizer_families import HARD

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "build" / "models"
sys.path.insert(0, str(ROOT / "export"))
from fetch_models import MODELS as PINNED  # noqa: E402


def present(name: str) -> Path:
    path = MODELS / PINNED[name].file
    if not path.is_file():
        pytest.skip(f"{path} is absent: `make fetch-models` downloads it (about a minute)")
    return path


def sample_texts() -> list[str]:
    """A few kilobytes of code and prose, and the corpus that breaks tokenizers."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = [(stdlib / name).read_text()[:4000] for name in ("json/decoder.py", "textwrap.py", "heapq.py")]
    prose = [(stdlib / "LICENSE.txt").read_text()[:4000]] if (stdlib / "LICENSE.txt").is_file() else []
    return code + prose + HARD + ["\n".join(HARD)]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_native_tokenizer_equals_transformers_on_the_gguf_tokenizers(name, tmp_path):
    path = present(name)
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    reference = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).backend_tokenizer
    reference.save(str(tmp_path / "tokenizer.json"))
    native = spec_edge.NativeTokenizer(tmp_path / "tokenizer.json")
    assert native.vocab_size == reference.get_vocab_size()
    for text in sample_texts():
        ids = reference.encode(text).ids
        assert native.encode(text) == ids, text[:80]
        for skip in (False, True):
            assert native.decode(ids, skip) == reference.decode(ids, skip_special_tokens=skip)
