"""Byte-flip fuzzing of a program directory (draft.pte, target.pte, manifest.json) through one
front end, run as a child process of tests/test_fuzz_programs.py so that a crash is reported
with the trial that caused it (which then becomes a kept case).

    python tests/fuzz_programs.py FRONT_END MODEL_DIR TRIALS SEED [COMMAND...]

FRONT_END: native (spec_edge.NativeRunner), python (PteSpeculativeDecoder) or cli (COMMAND: a
build of spec-edge-run, with qemu-aarch64 in front for an aarch64 build; one process per trial). Each trial flips 1-4 random bits of one
file in a copy of MODEL_DIR, loads the directory and, when it loads, decodes greedy and sampled.
Prints each trial on stderr before running it and a JSON summary on stdout:
{"outcomes": {outcome: count}, "unnamed": [errors that name no file]}. Outcomes: "refused FILE"
(an error naming the file), "same" (it ran and gave the clean directory's tokens), "different".
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

FILES = ("draft.pte", "target.pte", "manifest.json")
PROMPT = [5, 17, 3, 29, 11, 40, 2, 8]
SAMPLED = dict(temperature=0.8, seed=5)


def flipped(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out))
        out[at] ^= 1 << rng.randrange(8)
    return bytes(out)


def run_command(command: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """A front end's process for one trial: SystemExit (the fuzzer stops, naming the trial) on a
    signal or a sanitizer's report, RuntimeError with its last line of stderr on an error exit."""
    r = subprocess.run(command, input=stdin, capture_output=True, timeout=300)
    stderr = r.stderr.decode(errors="replace")
    if r.returncode < 0:
        raise SystemExit(f"crash: signal {-r.returncode}: {stderr[-2000:]}")
    if "Sanitizer" in stderr or "runtime error:" in stderr:
        raise SystemExit(f"sanitizer: {stderr[-4000:]}")
    if r.returncode != 0:
        raise RuntimeError(stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {r.returncode}")
    return r


def decoder(front_end: str, command: list[str]):
    """A function of a model directory that returns its greedy and sampled tokens, or raises."""
    if front_end == "cli":
        def run(d: Path):
            return [run_command([*command, "--model-dir", str(d), "--prompt-ids", ",".join(map(str, PROMPT)),
                                 "--max-new", "6", *flags]).stdout.split()
                    for flags in ([], ["--temperature", "0.8", "--seed", "5"])]
        return run
    import spec_edge
    from spec_edge.runtime import PteSpeculativeDecoder
    load = spec_edge.NativeRunner if front_end == "native" else PteSpeculativeDecoder

    def run(d: Path):
        r = load(d)
        return [r.generate(PROMPT, 6), r.generate(PROMPT, 6, **SAMPLED)]
    return run


def main(front_end: str, model_dir: str, trials: int, seed: int, command: list[str]) -> None:
    src = Path(model_dir)
    run = decoder(front_end, command)
    clean = run(src)
    originals = {name: (src / name).read_bytes() for name in FILES}
    outcomes: dict[str, int] = {}
    unnamed: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(shutil.copytree(src, Path(tmp) / "m"))
        rng = random.Random(seed)
        for trial in range(trials):
            name = rng.choice(FILES)
            data = flipped(originals[name], rng)
            print(f"trial {trial}: {name} seed {seed}", file=sys.stderr, flush=True)
            (work / name).write_bytes(data)
            try:
                outcome = "same" if run(work) == clean else "different"
            except SystemExit:
                raise
            except Exception as e:  # an error: it must name the file
                message = str(e)
                named = re.search(r"(draft\.pte|target\.pte|manifest\.json)", message)
                outcome = f"refused {named.group(1)}" if named else "unnamed"
                if not named:
                    unnamed.append(f"{type(e).__name__}: {message[:200]}")
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            (work / name).write_bytes(originals[name])
    print(json.dumps({"outcomes": outcomes, "unnamed": unnamed[:20]}))


def fuzz(model_dir: Path, front_end: str, trials: int, seed: int, command: list[str] = (),
         env: dict | None = None) -> dict:
    """Runs the fuzzer in a child process; fails on a crash (naming the trial to keep), on an error
    that names no file, or on a damaged directory that decodes other tokens. Returns the outcomes."""
    summary = run_child(__file__, [front_end, str(model_dir), str(trials), str(seed), *command], env, 1800)
    assert summary["outcomes"].get("different", 0) == 0, summary
    return summary["outcomes"]


def run_child(script: str, args: list[str], env: dict | None, timeout: int) -> dict:
    """A fuzzer ``script`` run in a child process: fails on its death (naming the last trial it
    began, to keep as a case) or on an error that named no file; returns its JSON summary."""
    result = subprocess.run([sys.executable, script, *args], capture_output=True, env=env, timeout=timeout)
    stderr = result.stderr.decode(errors="replace")
    trial = [line for line in stderr.splitlines() if line.startswith("trial ")]
    assert result.returncode == 0, (
        f"{args[0]}: {trial[-1] if trial else 'before the first trial'} failed (exit {result.returncode}); "
        f"keep it as a case: {stderr[-3000:]}")
    summary = json.loads(result.stdout.decode().splitlines()[-1])
    assert not summary["unnamed"], summary
    return summary


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
