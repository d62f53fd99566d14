"""Reading ``.pte`` programs without loading them: a ``.pte`` is a flatbuffer of ExecuTorch's
``program.fbs`` schema (``executorch/exir/_serialize/program.fbs``); this reads the few tables
spec_edge needs with the ``flatbuffers`` runtime."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import flatbuffers
from flatbuffers.table import Table

FILE_IDENTIFIER = b"ET12"

# Field slots (declaration order) of the program.fbs tables read here.
PROGRAM_VERSION, PROGRAM_EXECUTION_PLAN = 0, 1
PLAN_NAME, PLAN_INPUTS, PLAN_OUTPUTS, PLAN_OPERATORS, PLAN_DELEGATES = 0, 3, 4, 6, 7
OPERATOR_NAME, OPERATOR_OVERLOAD = 0, 1
DELEGATE_ID = 0


@dataclass
class MethodInfo:
    name: str
    inputs: int
    outputs: int
    operators: list[str] = field(default_factory=list)  # "namespace::op.overload"
    delegates: list[str] = field(default_factory=list)  # backend ids, e.g. "XnnpackBackend"


@dataclass
class ProgramInfo:
    version: int
    methods: dict[str, MethodInfo]

    @property
    def spec_edge_ops(self) -> list[str]:
        """The spec_edge operators any method calls, sorted."""
        return sorted({op for m in self.methods.values() for op in m.operators if op.startswith("spec_edge::")})


def _field(table: Table, slot: int) -> int:
    return table.Offset(4 + 2 * slot)


def _string(table: Table, slot: int) -> str:
    o = _field(table, slot)
    return table.String(o + table.Pos).decode() if o else ""


def _tables(table: Table, slot: int) -> list[Table]:
    o = _field(table, slot)
    if not o:
        return []
    start, n = table.Vector(o), table.VectorLen(o)
    return [Table(table.Bytes, table.Indirect(start + 4 * i)) for i in range(n)]


def _length(table: Table, slot: int) -> int:
    o = _field(table, slot)
    return table.VectorLen(o) if o else 0


def inspect(path: str | Path) -> ProgramInfo:
    """The methods of a ``.pte`` with their operators and delegates.

    Raises ``ValueError`` naming the file when it is not an ExecuTorch program (missing,
    truncated or corrupted).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ValueError(f"{path}: cannot read ({error.strerror})") from error
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        raise ValueError(f"{path}: not an ExecuTorch program (no '{FILE_IDENTIFIER.decode()}' identifier)")
    try:
        buf = bytearray(data)
        root = Table(buf, flatbuffers.encode.Get(flatbuffers.packer.uoffset, buf, 0))
        version_at = _field(root, PROGRAM_VERSION)
        version = flatbuffers.encode.Get(flatbuffers.packer.uint32, root.Bytes, root.Pos + version_at) if version_at else 0
        methods = {}
        for plan in _tables(root, PROGRAM_EXECUTION_PLAN):
            info = MethodInfo(_string(plan, PLAN_NAME), _length(plan, PLAN_INPUTS), _length(plan, PLAN_OUTPUTS))
            for op in _tables(plan, PLAN_OPERATORS):
                overload = _string(op, OPERATOR_OVERLOAD)
                info.operators.append(_string(op, OPERATOR_NAME) + (f".{overload}" if overload else ""))
            info.delegates = [_string(d, DELEGATE_ID) for d in _tables(plan, PLAN_DELEGATES)]
            methods[info.name] = info
    except (IndexError, UnicodeDecodeError, ValueError, struct.error) as error:
        raise ValueError(f"{path}: truncated or corrupted ExecuTorch program ({error})") from error
    return ProgramInfo(version, methods)
