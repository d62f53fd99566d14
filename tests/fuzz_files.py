"""Structure-aware mutation of the files that arrive beside the programs, from the same untrusted
place: a tokenizer (tokenizer.json, tokenizer_config.json, generation_config.json) and a GGUF
file's header. Run as a child process of tests/test_fuzz_files.py so that a crash names its trial.

    python tests/fuzz_files.py FRONT_END BASE_DIR TRIALS SEED [COMMAND...]

FRONT_END: native (NativeTokenizer, in this process), tokenize (COMMAND: spec-edge-tokenize, a
process per trial), run (COMMAND: spec-edge-run over BASE_DIR's programs, a process per trial)
or gguf (the GGUF loaders, in this process; BASE_DIR holds model.gguf). Each trial mutates one
file of a copy of BASE_DIR: a node of the JSON document, chosen by a random walk from the root,
nested 10^2-10^5 deep, given an extreme number or another type, dropped, repeated, swapped for a
subtree of another family's file, or made a long or ill-formed string; a GGUF header's counts,
lengths, type codes, sizes and tensor offsets; and random bit flips beside those. It then loads
what it can and uses it. Prints each trial on stderr before running it, and a JSON summary on
stdout: {"outcomes": {outcome: count}, "unnamed": [...], "wrong": [...]}. Outcomes: "refused
FILE" (an error naming the file), "refused prompt" (the runner's: a prompt the tokenizer made
longer than the programs' context), "loaded" (it loaded and every id it gave is in the vocabulary).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fuzz_programs import run_command, run_child

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
TEXTS = ["def parse(path):\n    return open(path).read()", "Ünïcödé  façade, 日本語 — ok?", "<|im_end|> a <s>b</s>", ""]
EXTREMES = [0, -1, 1, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, -2**63, 2**64, 1e308, -1e308, 5.5, 1e-320]
OTHER_TYPES = [None, True, False, "", "x", [], {}, 0, "5", [1, 2], {"type": "Sequence"}]


# ---- JSON documents ------------------------------------------------------------------------------

def _walk(doc, rng: random.Random) -> list:
    """A path to a node of ``doc``: from the root, stop with probability 0.3 at each container."""
    path, node = [], doc
    while isinstance(node, (dict, list)) and node and (not path or rng.random() > 0.3):
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path.append(key)
        node = node[key]
    return path


def _nodes(doc) -> list:
    """Every container of ``doc`` (the donors' subtrees)."""
    out, stack = [], [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, (dict, list)):
            out.append(node)
            stack.extend(node.values() if isinstance(node, dict) else node)
    return out


def mutate_json(text: bytes, donors: list, rng: random.Random) -> bytes:
    try:
        doc = json.loads(text)
    except ValueError:
        doc = {}
    path = _walk(doc, rng)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    kind = rng.choice(["nest", "number", "type", "drop", "repeat", "donor", "string", "flip"])
    marker = "\u0000nested\u0000"
    replacement = None
    if kind == "number":
        replacement = rng.choice(EXTREMES)
    elif kind == "type":
        replacement = rng.choice(OTHER_TYPES)
    elif kind == "donor" and donors:
        replacement = rng.choice(_nodes(rng.choice(donors)))
    elif kind == "string":
        replacement = rng.choice(["a" * rng.choice([10**3, 10**6]), "\ud800", "\u0000", "x\uffff\U0010ffff",
                                  "".join(chr(rng.randrange(1, 0x3000)) for _ in range(50))])
    elif kind in ("nest", "drop", "repeat"):
        replacement = marker if kind == "nest" else None
    if not path:  # the root itself
        doc = replacement if kind not in ("drop", "repeat") else doc
    elif kind == "drop":
        del parent[path[-1]]
    elif kind == "repeat":
        node = parent[path[-1]]
        if isinstance(node, list) and node:
            node.extend(rng.choice(node) for _ in range(rng.choice([10, 10**4, 10**5])))
        elif isinstance(parent, list):
            parent.extend([node] * rng.choice([10, 10**4]))
    elif kind != "flip":
        parent[path[-1]] = replacement
    out = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    if kind == "nest":
        depth = rng.choice([100, 1000, 10**4, 10**5])
        open_, close = rng.choice([("[", "]"), ('{"type":"Sequence","normalizers":[', "]}"),
                                   ('{"type":"Sequence","pretokenizers":[', "]}"), ('{"a":', "}")])
        inner = json.dumps(marker).encode()
        if inner in out:
            out = out.replace(inner, open_.encode() * depth + b"1" + close.encode() * depth, 1)
    if kind == "flip" or rng.random() < 0.1:
        data = bytearray(out)
        for _ in range(rng.randint(1, 4)):
            if data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        out = bytes(data)
    return out


# ---- GGUF headers --------------------------------------------------------------------------------

def mutate_gguf(data: bytes, rng: random.Random) -> bytes:
    """One part of the header (a count, a length, a type code, a value, a tensor's dims, type or
    offset) set to an extreme value of its width, or bits flipped in the header."""
    import gguf
    import numpy as np
    out = bytearray(data)
    with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
        f.write(data)
        f.flush()
        reader = gguf.GGUFReader(f.name)
        if rng.random() < 0.25:  # bit flips anywhere in the header
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(reader.data_offset)
                out[at] ^= 1 << rng.randrange(8)
            return bytes(out)
        fields = list(reader.fields.values()) + [t.field for t in reader.tensors]
        parts = [p for p in rng.choice(fields).parts if p.size <= 8]  # the scalar parts: lengths, codes, values
        part = rng.choice(parts)
        at = part.ctypes.data - reader.data.ctypes.data
        if part.dtype.kind in "iuf":
            info = np.iinfo(part.dtype) if part.dtype.kind in "iu" else np.finfo(part.dtype)
            value = rng.choice([0, 1, info.max, info.min, int(info.max) // 2, 31, 255, 2**31 - 1])
            raw = np.array([value]).astype(part.dtype).tobytes()
        else:  # a boolean: any other byte
            raw = bytes([rng.randrange(256)])
        out[at:at + part.itemsize] = raw[:part.itemsize]
        del reader
    return bytes(out)


def write_tokenizer_base(directory: Path, family: str) -> Path:
    """A family's tokenizer.json (tests/tokenizer_families.py) with a tokenizer_config.json and a
    generation_config.json naming its BOS and EOS, and the other families' files as donors."""
    from tokenizer_families import FAMILIES, write_family
    write_family(family, directory)
    added = [a["content"] for a in json.loads((directory / "tokenizer.json").read_text())["added_tokens"]]
    (directory / "tokenizer_config.json").write_text(json.dumps({"bos_token": added[0],
                                                                 "eos_token": {"content": added[-1]}}))
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [2, 3]}))
    (directory / "donors").mkdir()
    for name in FAMILIES:
        if name != family:
            FAMILIES[name]().save(str(directory / "donors" / f"{name}.json"))
    return directory


# ---- front ends ----------------------------------------------------------------------------------

def _check_ids(ids, vocab_size: int, what: str) -> None:
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise AssertionError(f"silent wrong output: {what} gave ids {bad[:5]} outside the vocabulary of {vocab_size}")


def _compare_with_tokenizers(path: Path, tok) -> None:
    """Where the tokenizers library loads the file too, the ids must be its ids: a mutation the
    runner reads differently is a silent wrong output."""
    from tokenizers import Tokenizer
    try:
        reference = Tokenizer.from_file(str(path))
        want = [reference.encode(text).ids for text in TEXTS]
    except BaseException:  # noqa: BLE001  (it refuses or panics: nothing to compare)
        return
    got = [tok.encode(text) for text in TEXTS]
    if got != want:
        raise AssertionError(f"silent wrong output: ids {got} where tokenizers gives {want}")


def native(work: Path) -> None:
    import spec_edge
    tok = spec_edge.NativeTokenizer(work / "tokenizer.json")
    _check_ids(tok.eos_ids, tok.vocab_size, "eos_ids")
    if tok.bos_id != -1:
        _check_ids([tok.bos_id], tok.vocab_size, "bos_id")
    for text in TEXTS:
        for special in (True, False):
            ids = tok.encode(text, special)
            _check_ids(ids, tok.vocab_size, "encode")
            tok.decode(ids, skip_special_tokens=not special)
    _compare_with_tokenizers(work / "tokenizer.json", tok)
    stream = tok.stream()
    for start in range(0, tok.vocab_size, 97):
        stream.push(list(range(start, min(start + 97, tok.vocab_size))))
    stream.finish()


def command_front_end(kind: str, command: list[str]):
    def run(work: Path) -> None:
        if kind == "tokenize":
            calls = [([str(work / "tokenizer.json")], text.encode()) for text in TEXTS[:2]]
        else:
            calls = [(["--model-dir", str(work), "--prompt", TEXTS[0], "--max-new", "2"], None)]
        for args, stdin in calls:
            r = run_command([*command, *args], stdin)
            if kind == "tokenize":
                ids = r.stdout.split()
                d = subprocess.run([*command, str(work / "tokenizer.json"), "--decode"], input=b" ".join(ids),
                                   capture_output=True, timeout=300)
                if d.returncode != 0:
                    raise SystemExit(f"the ids it encoded do not decode (exit {d.returncode}): {d.stderr[-2000:]}")
    return run


def gguf_front_end(work: Path) -> None:
    from spec_edge.gguf_checkpoint import gguf_config, gguf_tensors, save_gguf_tokenizer
    path = work / "model.gguf"
    config = gguf_config(path, 16)
    save_gguf_tokenizer(path, work / "tokenizer")
    for _ in gguf_tensors(path, config):
        pass


def mutations(base: Path, files: tuple[str, ...], trials: int, seed: int):
    """(trial, file name, mutated bytes) for each trial: the first of ``files`` seven times in ten."""
    originals = {name: (base / name).read_bytes() for name in files if (base / name).exists()}
    donors = [json.loads(p.read_text()) for p in sorted(base.glob("donors/*.json"))]
    rng = random.Random(seed)
    for trial in range(trials):
        name = rng.choice(list(originals)) if rng.random() < 0.3 else files[0]
        data = mutate_gguf(originals[name], rng) if name.endswith(".gguf") else mutate_json(originals[name], donors, rng)
        yield trial, name, data


def write_mutations(base: Path, out: Path, trials: int, seed: int) -> Path:
    """The tokenizer mutations as files under ``out`` and a list of them (``out``/list: a line
    "TRIAL NAME PATH" each), for a front end that runs them itself (the Java API)."""
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for trial, name, data in mutations(base, TOKENIZER_FILES, trials, seed):
        (out / f"{trial}-{name}").write_bytes(data)
        lines.append(f"{trial} {name} {out / f'{trial}-{name}'}")
    (out / "list").write_text("\n".join(lines) + "\n")
    return out / "list"


def main(front_end: str, base: str, trials: int, seed: int, command: list[str]) -> None:
    run = {"native": native, "gguf": gguf_front_end}.get(front_end) or command_front_end(front_end, command)
    files = ("model.gguf",) if front_end == "gguf" else TOKENIZER_FILES
    src = Path(base)
    run(src)  # the clean directory loads
    outcomes: dict[str, int] = {}
    unnamed: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(shutil.copytree(src, Path(tmp) / "m", ignore=shutil.ignore_patterns("donors")))
        for trial, name, data in mutations(src, files, trials, seed):
            print(f"trial {trial}: {name} seed {seed}", file=sys.stderr, flush=True)
            (work / name).write_bytes(data)
            try:
                run(work)
                outcome = "loaded"
            except (SystemExit, AssertionError):
                raise
            except Exception as e:  # an error: it must name the file
                message = str(e)
                # a file named, or the prompt a tokenizer made too long for the programs' context
                named = re.search("|".join(re.escape(f) for f in files) + r"|^spec-edge-run: prompt", message)
                outcome = f"refused {named.group(0).removeprefix('spec-edge-run: ')}" if named else "unnamed"
                if not named:
                    unnamed.append(f"trial {trial}: {type(e).__name__}: {message[:300]}")
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            (work / name).write_bytes((src / name).read_bytes())
    print(json.dumps({"outcomes": outcomes, "unnamed": unnamed[:20]}))


def fuzz(base: Path, front_end: str, trials: int, seed: int, command: list[str] = (), env: dict | None = None) -> dict:
    """Runs the fuzzer in a child process; fails on a crash or hang (naming the trial to keep), an
    id outside the vocabulary, or an error that names no file. Returns the outcomes."""
    return run_child(__file__, [front_end, str(base), str(trials), str(seed), *command], env, 3600)["outcomes"]


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
