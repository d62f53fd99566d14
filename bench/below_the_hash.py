"""Damage beneath the trust boundary: 1-4 random bits of a program flipped and its sha256
recomputed into the manifest, so that the runner's hash check passes and ExecuTorch reads the
damaged program. Each trial runs spec-edge-run (greedy, then sampled) in its own process and
counts what happened: refused (an error and exit 1), the clean tokens, other tokens, an abort
inside ExecuTorch (SIGABRT), another signal, a hang.

    python bench/below_the_hash.py [--model-dir build/demo] [--trials 1000] [--region program|all]

--region program flips bits in the program's flatbuffer (its instructions, values and
operators, what ExecuTorch interprets); all: anywhere in the file (mostly weights)."""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import struct
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "build/cmake/runtime_demo/spec-edge-run"


def flatbuffer_size(data: bytes) -> int:
    """The bytes of the program's flatbuffer: ExecuTorch's extended header ("eh00" at byte 8)
    gives program_size; without one, the whole file is the flatbuffer."""
    if data[8:12] != b"eh00":
        return len(data)
    return struct.unpack_from("<Q", data, 16)[0]


def run(runner: Path, model_dir: Path) -> list[str]:
    outs = []
    for flags in ([], ["--temperature", "0.8", "--seed", "5"]):
        r = subprocess.run([str(runner), "--model-dir", str(model_dir), "--prompt-ids", "5,17,3,29,11",
                            "--max-new", "8", *flags], capture_output=True, timeout=120)
        if r.returncode < 0:
            return ["abort" if r.returncode == -6 else f"signal {-r.returncode}"]
        if r.returncode != 0:
            return ["refused"]
        outs.append(r.stdout.decode())
    return outs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=ROOT / "build/demo")
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--region", choices=("program", "all"), default="program")
    parser.add_argument("--runner", type=Path, default=RUNNER)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="copy each model directory that aborted or crashed here")
    args = parser.parse_args()
    clean = run(args.runner, args.model_dir)
    rng = random.Random(args.seed)
    counts: dict[str, Counter] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(shutil.copytree(args.model_dir, Path(tmp) / "m"))
        manifest = json.loads((work / "manifest.json").read_text())
        for trial in range(args.trials):
            name = rng.choice(["draft.pte", "target.pte"])
            original = (args.model_dir / name).read_bytes()
            data = bytearray(original)
            span = flatbuffer_size(original) if args.region == "program" else len(data)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(span)] ^= 1 << rng.randrange(8)
            (work / name).write_bytes(bytes(data))
            damaged = json.loads(json.dumps(manifest))
            damaged["programs"][name] = hashlib.sha256(data).hexdigest()
            (work / "manifest.json").write_text(json.dumps(damaged))
            try:
                result = run(args.runner, work)
                outcome = result[0] if len(result) == 1 else "clean tokens" if result == clean else "other tokens"
            except subprocess.TimeoutExpired:
                outcome = "hang"
            counts.setdefault(name, Counter())[outcome] += 1
            if args.keep and (outcome == "abort" or outcome.startswith("signal")):
                shutil.copytree(work, args.keep / f"{trial}-{outcome.replace(' ', '')}")
            (work / name).write_bytes(original)
    outcomes = sorted({o for c in counts.values() for o in c})
    print(f"{args.trials} trials, region {args.region}, {args.model_dir}")
    print("| program | " + " | ".join(outcomes) + " |")
    for name, c in sorted(counts.items()):
        print(f"| {name} | " + " | ".join(str(c[o]) for o in outcomes) + " |")


if __name__ == "__main__":
    main()
