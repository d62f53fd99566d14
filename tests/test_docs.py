"""The runnable examples in the public docstrings."""

import doctest

import pytest

import spec_edge.analysis
import spec_edge.decoder
import spec_edge.executorch
import spec_edge.ops


@pytest.mark.parametrize("module", [spec_edge.ops, spec_edge.analysis, spec_edge.decoder, spec_edge.executorch])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
