"""The ops' one schema source (custom_ops/core/include/spec_edge/op_schemas.h) against what Python
holds of the ops: each fake kernel's signature, and the Filters fields the wrappers pass in schema
order. The ExecuTorch kernels read their arguments by name from the same header, checked when they
compile."""

import inspect

import pytest
import torch

import spec_edge
from spec_edge import ops


def registered_ops() -> list[str]:
    """The functional ops the native library registers."""
    names = {str(s.name) for s in torch._C._jit_get_all_schemas()}
    return sorted(n.split("::")[1] for n in names if n.startswith("spec_edge::"))


def signature_mismatch(kernel, schema) -> str | None:
    """What differs between a Python kernel's signature and an op schema, or None: the names and
    order of the arguments, which have a default of None, and which are keyword-only."""
    params = list(inspect.signature(kernel).parameters.values())
    got = [(p.name, p.default is None, p.kind == p.KEYWORD_ONLY) for p in params]
    want = [(a.name, a.has_default_value() and a.default_value is None, a.kwarg_only) for a in schema.arguments]
    if got == want:
        return None
    return f"{kernel.__name__}{inspect.signature(kernel)} against {schema}"


def test_every_registered_op_has_a_fake_kernel():
    assert registered_ops() == sorted(ops._FAKE_KERNELS)


@pytest.mark.parametrize("op", sorted(ops._FAKE_KERNELS))
def test_fake_kernel_signature_equals_the_registered_schema(op):
    schema = getattr(torch.ops.spec_edge, op).default._schema
    assert signature_mismatch(ops._FAKE_KERNELS[op], schema) is None


def test_a_fake_kernel_that_disagrees_is_caught():
    """Negative controls: swapped arguments, a lost default, a missing argument."""
    schema = torch.ops.spec_edge.filter_logits.default._schema

    def swapped(temperature, logits, top_k=None, top_p=None, min_p=None, repetition_penalty=None,
                prev_tokens=None): ...

    def no_default(logits, temperature, top_k, top_p=None, min_p=None, repetition_penalty=None,
                   prev_tokens=None): ...

    def missing(logits, temperature, top_k=None, top_p=None, min_p=None, repetition_penalty=None): ...

    for kernel in (swapped, no_default, missing):
        assert signature_mismatch(kernel, schema) is not None, kernel.__name__


@pytest.mark.parametrize("op", ["verify", "sample", "filter_logits"])
def test_filters_fields_are_the_schema_filter_arguments_in_order(op):
    """Filters.op_args() returns its fields in order, spliced into the call as the op's last
    inputs."""
    names = [a.name for a in getattr(torch.ops.spec_edge, op).default._schema.arguments]
    assert tuple(names[-len(spec_edge.Filters._fields):]) == spec_edge.Filters._fields
    assert len(spec_edge.Filters().op_args()) == len(spec_edge.Filters._fields)
