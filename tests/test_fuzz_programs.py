"""Byte-flip fuzzing of program directories through the in-process front ends (NativeRunner and
PteSpeculativeDecoder; every build of the command-line runner: tests/test_runner.py), each in a
child process (tests/fuzz_programs.py) so that a crash names its trial: no crash, every error
names its file, and a directory that still loads decodes the clean tokens."""

import pytest

from fuzz_programs import fuzz

pytest.importorskip("executorch")


@pytest.mark.parametrize("front_end,trials", [("native", 2000), ("python", 1000)])
def test_byte_flips_never_crash_a_front_end(pair, front_end, trials):
    outcomes = fuzz(pair / "pair", front_end, trials, 7)
    for name in ("draft.pte", "target.pte", "manifest.json"):
        assert outcomes.get(f"refused {name}", 0) > trials // 10, outcomes
    assert sum(outcomes.values()) == trials
