"""The runnable examples in the public docstrings, the README and docs/OPS.md: every ```python
block of a page runs, in order, in one namespace, so the docs cannot drift from the API."""

import doctest
import re
from pathlib import Path

import pytest

import spec_edge.analysis
import spec_edge.decoder
import spec_edge.executorch
import spec_edge.ops

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", [spec_edge.ops, spec_edge.analysis, spec_edge.decoder, spec_edge.executorch])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def run_python_blocks(page: Path) -> dict:
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)
    assert blocks, f"{page}: no python blocks"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)
    return namespace


def test_readme_blocks_run(pair, tmp_path, monkeypatch):
    (tmp_path / "out").symlink_to(pair / "pair")  # the on-device block's exported programs
    monkeypatch.chdir(tmp_path)
    ns = run_python_blocks(ROOT / "README.md")
    assert ns["tok"].shape == (2,) and ns["out"].shape == (2, 5) and len(ns["new_tokens"]) == 64
    assert len(ns["ids"]) == 16  # the on-device block's output


def test_ops_md_blocks_run():
    ns = run_python_blocks(ROOT / "docs" / "OPS.md")
    assert ns["tok"].shape == (4,) and ns["masked"].shape == (4, 32000)
