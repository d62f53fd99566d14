"""The manifest beside exported programs (``manifest.json``): the one definition of its names,
its format, the op versions and the program hashes, imported by the writer
(:mod:`spec_edge.export`) and the readers (:mod:`spec_edge.runtime`, the native runner through
``program_format.json``, which CMake compiles into it as a header). The same file holds what the
two loops over the programs share: the round's constants (``ROUND``).

Loaders refuse programs built for another format or other op versions; the programs carry the op
versions too (``spec_edge_op_version_*`` methods)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = "manifest.json"
# The tokenizer and, when the source has them, its BOS/EOS settings and chat template.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja")

_PROGRAM_FORMAT = json.loads((Path(__file__).parent / "program_format.json").read_text())
# The manifest format and each op's version, bumped when its schema or semantics change.
MANIFEST_FORMAT: int = _PROGRAM_FORMAT["manifest_format"]
OP_VERSIONS: dict[str, int] = _PROGRAM_FORMAT["op_versions"]
# The round's constants, the Python loop's and the C++ runner's: the draft step's tokens, the
# drafters' defaults and limits, adaptive K's decay (spec_edge.drafters).
ROUND: dict = _PROGRAM_FORMAT["round"]
# The draft step's tokens: its last one, after the draft's own K-th when all were accepted. A
# draft further behind catches up through its prefill.
DRAFT_STEP_TOKENS: int = ROUND["draft_step_tokens"]


class ProgramError(RuntimeError):
    """A model directory, manifest or program that spec_edge cannot run."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_sha256(paths) -> str:
    """One sha256 over files' bytes in order: a checkpoint's identity for program reuse."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                digest.update(block)
    return digest.hexdigest()


def write_manifest(directory: Path, **entries) -> None:
    """``directory``/manifest.json: the format and op versions, then ``entries``."""
    manifest = {"format": MANIFEST_FORMAT, **entries, "ops": OP_VERSIONS}
    (Path(directory) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def _number(manifest: dict, path: Path, key: str, lo: int, hi: int) -> int:
    """A manifest number: an int (not a bool, not 8.5) in [lo, hi], or a ProgramError naming it
    (the C++ runner's manifest_int, word for word)."""
    value = manifest[key]
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ProgramError(f"{path}: {key} = {json.dumps(value)}: expected an integer in [{lo}, {hi}]")
    return value


def read_model_file(path: Path, missing: str) -> bytes:
    """The bytes of a file of a model directory; a ProgramError naming it otherwise: ``missing``
    where it is not there, the system's reason where it cannot be read (permission, a directory)."""
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise ProgramError(f"{path}: {missing}") from None
    except OSError as error:
        raise ProgramError(f"{path}: cannot be read: {error.strerror}") from None


def read_manifest(directory: Path) -> dict:
    """``directory``/manifest.json, checked: its numbers in range (vocab_size, max_context_len,
    k, prefill_chunk), a programs table, this spec_edge's format and op versions; a ProgramError
    naming the file and the problem otherwise."""
    path = Path(directory) / MANIFEST
    text = read_model_file(path, f"manifest not found (is {directory} a directory written by export/export_pair.py?)")
    try:
        manifest = json.loads(text)
        _number(manifest, path, "vocab_size", 1, 2**31)
        context = _number(manifest, path, "max_context_len", 2, 2**31)
        _number(manifest, path, "k", 1, min(context - 1, 4096))
        _number(manifest, path, "prefill_chunk", 1, context)
        manifest["programs"] = dict(manifest["programs"])
    except (ValueError, KeyError, TypeError) as error:
        raise ProgramError(f"{path}: malformed manifest ({error!r})") from error
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ProgramError(f"{path}: manifest format {manifest.get('format')!r}; this spec_edge reads format "
                           f"{MANIFEST_FORMAT}")
    if manifest.get("ops") != OP_VERSIONS:
        raise ProgramError(f"{path}: programs built for op versions {manifest.get('ops')}, this spec_edge has "
                           f"{OP_VERSIONS}: export them again")
    return manifest


def reusable(directory: Path, name: str, key: str) -> bool:
    """Whether ``directory``/``name`` is the program ``key`` describes: the manifest beside it
    recorded that key for it, and its bytes still match the manifest's hash."""
    try:
        manifest = json.loads((Path(directory) / MANIFEST).read_text())
        return (manifest.get("program_keys", {}).get(name) == key
                and sha256((Path(directory) / name).read_bytes()) == manifest["programs"][name])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
