"""bench/bench_real_pair.py refuses a bad argument by name before it loads or exports anything."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_real_pair  # noqa: E402


@pytest.mark.parametrize("passes", ["0", "-1"])
def test_passes_below_one_is_refused_by_name(monkeypatch, capsys, tmp_path, passes):
    monkeypatch.setattr(sys, "argv", ["bench_real_pair.py", "--passes", passes, "--cache", str(tmp_path / "none")])
    monkeypatch.setattr(bench_real_pair, "MODELS", tmp_path)  # past the check, it stops at once: no models here
    with pytest.raises(SystemExit) as stop:
        bench_real_pair.main()
    assert stop.value.code == 2
    assert f"--passes: expected at least 1, got {passes}" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
