"""Structure-aware mutations of the tokenizer files and of GGUF headers through every front end
that reads them (tests/fuzz_files.py; the Java API: tests/test_android.py), each in a child
process so that a crash names its trial: no crash, no hang, every id given is in the vocabulary
and equals the tokenizers library's where it loads the file too, every error names its file.

`make test` runs the counts below; `make fuzz-files` runs 2,000 per front end and family."""

import os
import shutil

import pytest

from fuzz_files import fuzz, write_tokenizer_base
from test_runner import NATIVE, default_programs  # noqa: F401

FULL = bool(os.environ.get("SPEC_EDGE_FUZZ_FULL"))


def trials(ci: int) -> int:
    return 2000 if FULL else ci


@pytest.fixture(scope="module")
def tokenizer_bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokenizers")
    return {family: write_tokenizer_base(root / family, family)
            for family in ("llama3", "qwen2", "llama2_legacy", "smollm2")}


@pytest.mark.parametrize("family,ci", [("llama3", 2000), ("qwen2", 500), ("llama2_legacy", 500), ("smollm2", 500)])
def test_tokenizer_mutations_through_native_tokenizer(tokenizer_bases, family, ci):
    outcomes = fuzz(tokenizer_bases[family], "native", trials(ci), 3)
    assert sum(outcomes.values()) == trials(ci)
    for outcome in ("loaded", "refused tokenizer.json", "refused tokenizer_config.json",
                    "refused generation_config.json"):
        assert outcomes.get(outcome, 0) > trials(ci) // 50, outcomes  # each kind of file reached


def test_tokenizer_mutations_through_spec_edge_tokenize(tokenizer_bases):
    command, _ = NATIVE.command("spec-edge-tokenize")
    outcomes = fuzz(tokenizer_bases["llama3"], "tokenize", trials(1000), 5, command)
    assert outcomes.get("loaded", 0) > 0 and outcomes.get("refused tokenizer.json", 0) > 0, outcomes


def test_tokenizer_mutations_through_spec_edge_run(tokenizer_bases, default_programs, tmp_path):  # noqa: F811
    """The runner with the default pair's programs and the family's tokenizer files."""
    base = shutil.copytree(tokenizer_bases["llama3"], tmp_path / "m")
    for name in ("draft.pte", "target.pte", "verify.pte", "manifest.json"):
        shutil.copy(default_programs / name, base / name)
    command, _ = NATIVE.command("spec-edge-run")
    outcomes = fuzz(base, "run", trials(150), 7, command)
    assert outcomes.get("loaded", 0) > 0 and outcomes.get("refused tokenizer.json", 0) > 0, outcomes


def test_gguf_header_mutations_through_the_loaders(tmp_path):
    """Counts, lengths, type codes, sizes and tensor offsets of a small llama file set to extreme
    values, and bit flips in its header, through the config, tokenizer and weight loaders."""
    pytest.importorskip("gguf")
    from gguf_files import write_gguf
    from test_gguf import QWEN2, TOKENIZER, random_model
    write_gguf(tmp_path / "model.gguf", random_model("llama", dim=32), TOKENIZER, **QWEN2)
    outcomes = fuzz(tmp_path, "gguf", trials(500), 1)
    assert outcomes.get("loaded", 0) > 0 and outcomes.get("refused model.gguf", 0) > trials(500) // 2, outcomes
