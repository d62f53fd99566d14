"""The C++ runner (runtime_demo/): spec-edge-run and spec_edge.NativeRunner give the Python loop's
tokens; every build of the CLI (native, ASan + UBSan, aarch64 under qemu on Cortex-A72 and A76
models, aarch64 with sanitizers) gives the same tokens and refuses bad input with a message."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

import spec_edge
from fuzz_programs import fuzz
from small_pair import K, PROMPT
from tokenizer_families import FAMILIES, HARD, write_family

pytest.importorskip("executorch")
from spec_edge.demo import DEFAULT_PAIR, exported_pair, per_token_acceptance  # noqa: E402
from spec_edge.runtime import ProgramError, PteSpeculativeDecoder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Sanitizer findings exit with a status of their own (not the runner's 1 or 2) and are looked for
# in stderr too. Leak checking does not work under qemu.
SANITIZER_ENV = {"ASAN_OPTIONS": "exitcode=99", "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=99"}


@dataclass(frozen=True)
class Build:
    """One build of the runner's binaries and how to run them."""

    name: str
    bin_dir: Path
    made_by: str  # the make target that builds it
    qemu_cpu: str | None = None  # an aarch64 build, run under qemu-aarch64 with this CPU model
    sanitized: bool = False

    def command(self, tool: str = "spec-edge-run") -> tuple[list[str], dict]:
        """The command line that runs `tool` of this build, and its environment."""
        binary = self.bin_dir / tool
        if not binary.is_file():
            message = f"{binary} not built ({self.made_by} builds it)"
            if os.environ.get("CI"):
                raise AssertionError(message)
            pytest.skip(message)
        command, env = [str(binary)], dict(os.environ)
        if self.qemu_cpu:
            command = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", *command]
            env["QEMU_CPU"] = self.qemu_cpu
        if self.sanitized:
            env.update(SANITIZER_ENV)
            if self.qemu_cpu:
                env["ASAN_OPTIONS"] += ":detect_leaks=0"
        return command, env

    def run(self, *args: str, tool: str = "spec-edge-run", stdin: bytes | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
        command, env = self.command(tool)
        result = subprocess.run([*command, *args], input=stdin, capture_output=True, env=env, timeout=900)
        stderr = result.stderr.decode(errors="replace")
        assert result.returncode >= 0, f"{self.name}: killed by signal {-result.returncode}: {stderr[-3000:]}"
        assert "Sanitizer" not in stderr and "runtime error:" not in stderr, stderr[-5000:]
        if check:
            assert result.returncode == 0, stderr[-3000:]
        return result

    def tokens(self, model_dir: Path, *args: str, prompt: list[int] = PROMPT) -> list[int]:
        out = self.run("--model-dir", str(model_dir), "--prompt-ids", ",".join(map(str, prompt)), *args).stdout
        return [int(t) for t in out.split()]


NATIVE = Build("x86-64", Path(spec_edge.__file__).parent / "_lib", "make build")
BUILDS = [
    NATIVE,
    Build("x86-64-asan", ROOT / "build/sanitize/runtime_demo", "make test-sanitize", sanitized=True),
    Build("aarch64-a72", ROOT / "build/aarch64/runtime_demo", "make test-aarch64", qemu_cpu="cortex-a72"),
    Build("aarch64-a76", ROOT / "build/aarch64/runtime_demo", "make test-aarch64", qemu_cpu="cortex-a76"),
    Build("aarch64-a72-asan", ROOT / "build/aarch64-sanitize/runtime_demo", "make test-aarch64",
          qemu_cpu="cortex-a72", sanitized=True),
]
every_build = pytest.mark.parametrize("build", BUILDS, ids=[b.name for b in BUILDS])
other_builds = pytest.mark.parametrize("build", BUILDS[1:], ids=[b.name for b in BUILDS[1:]])

SAMPLED = dict(temperature=0.8, filters=spec_edge.Filters(top_k=20, top_p=0.9, repetition_penalty=1.1), seed=5)
SAMPLED_FLAGS = ["--temperature", "0.8", "--top-k", "20", "--top-p", "0.9", "--repetition-penalty", "1.1",
                 "--seed", "5"]


# ---- the same tokens as the Python loop (small random pair) ----------------------------------

@pytest.mark.parametrize("k", [1, K])
@pytest.mark.parametrize("speculative", [True, False])
def test_the_runner_gives_the_python_loops_tokens(pair, k, speculative):
    dec = PteSpeculativeDecoder(pair / "pair", k=k)
    native = spec_edge.NativeRunner(pair / "pair", k=k)
    flags = ["--max-new", "40", "--k", str(k)] + ([] if speculative else ["--no-spec"])
    for sampling, sampling_flags in [({}, []), (SAMPLED, SAMPLED_FLAGS)]:
        want = dec.generate(PROMPT, 40, speculative=speculative, **sampling)
        assert NATIVE.tokens(pair / "pair", *flags, *sampling_flags) == want
        assert native.generate(PROMPT, 40, speculative=speculative, **sampling) == want
        assert native.stats.rounds == dec.stats.rounds and native.stats.accepted_histogram == dec.stats.accepted_histogram


def test_stats(pair, tmp_path):
    NATIVE.tokens(pair / "self", "--max-new", "30", "--stats-json", str(tmp_path / "s.json"))
    stats = json.loads((tmp_path / "s.json").read_text())
    native = spec_edge.NativeRunner(pair / "self")
    native.generate(PROMPT, 30)
    for s in (stats, vars(native.stats)):
        assert s["new_tokens"] == 30 and sum(s["accepted_histogram"]) == s["rounds"] > 0
        assert s["accepted"] == s["proposed"]  # the draft equal to the target: always accepted
        assert s["draft_seconds"] > 0 and s["target_seconds"] > 0 and s["total_seconds"] > s["prefill_seconds"]
    assert stats["tokens_per_second"] > 0 and native.stats.tokens_per_second > 0


def end_ids(tokens: list[int]) -> list[int]:
    """Two end ids from an output, the one first emitted later listed first: a loop that stopped
    only at the list's first id would run past the right stop."""
    first_seen: dict[int, int] = {}
    for i, t in enumerate(tokens):
        first_seen.setdefault(t, i)
    order = sorted(first_seen, key=first_seen.get)
    assert len(order) >= 3, tokens
    return [order[-1], order[1]]


def test_native_runner_streams_and_stops_at_eos(pair):
    native = spec_edge.NativeRunner(pair / "pair")
    rounds: list[list[int]] = []
    out = native.generate(PROMPT, 40, on_tokens=rounds.append)
    assert [t for r in rounds for t in r] == out and len(rounds) == native.stats.rounds
    eos = out[10]
    stopped = native.generate(PROMPT, 40, eos_token_id=eos)
    assert stopped == out[:out.index(eos) + 1]
    ends = end_ids(out)  # several end ids (Llama 3 has three): the first one emitted ends the call
    first = min(out.index(t) for t in ends)
    assert native.generate(PROMPT, 40, eos_token_id=ends) == out[:first + 1]
    assert PteSpeculativeDecoder(pair / "pair").generate(PROMPT, 40, eos_token_id=ends) == out[:first + 1]

    def interrupt(tokens):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):  # a Python exception in the callback ends the call
        native.generate(PROMPT, 40, on_tokens=interrupt)
    assert native.generate(PROMPT, 40) == out  # and leaves the runner usable

    def stop_after_first(tokens):
        native.stop()
    assert native.generate(PROMPT, 40, on_tokens=stop_after_first) == rounds[0]  # that round, then stop
    native.stop()  # a stop with no generate in flight does not reach the next call
    assert native.generate(PROMPT, 40) == out


@pytest.mark.parametrize("loop", ["NativeRunner", "PteSpeculativeDecoder"])
def test_one_generation_at_a_time_per_instance(pair, loop):
    import threading
    make = spec_edge.NativeRunner if loop == "NativeRunner" else PteSpeculativeDecoder
    runner, other = make(pair / "pair"), make(pair / "pair")
    expected = runner.generate(PROMPT, 24)
    busy = f"{loop}.generate: this instance is already generating"
    if loop == "NativeRunner":  # re-entry from the callback
        def reenter(tokens):
            runner.generate(PROMPT, 4)
        with pytest.raises(RuntimeError, match=busy):
            runner.generate(PROMPT, 24, on_tokens=reenter)
    # Another thread while a call runs: refused, and the call in flight is unharmed.
    inside, release = threading.Event(), threading.Event()
    results, errors = [], []

    def held(*args):  # the call in flight waits here until the main thread has tried its own
        inside.set()
        release.wait(60)
    hold = {}
    if loop == "NativeRunner":
        hold = {"on_tokens": held}
    else:
        prefill = runner._prefill
        runner._prefill = lambda *args: (held(), prefill(*args))[1]
    thread = threading.Thread(target=lambda: results.append(runner.generate(PROMPT, 24, **hold)))
    thread.start()
    inside.wait(60)
    try:
        runner.generate(PROMPT, 24)
    except RuntimeError as error:
        errors.append(str(error))
    assert other.generate(PROMPT, 24) == expected  # another instance runs meanwhile
    release.set()
    thread.join(120)
    assert len(errors) == 1 and busy in errors[0] and results == [expected]
    assert runner.generate(PROMPT, 24) == expected  # usable after


@pytest.mark.parametrize("call,error,message", [
    (lambda d: spec_edge.NativeRunner(d / "missing"), ProgramError, "manifest.json: not found"),
    (lambda d: spec_edge.NativeRunner(d / "pair", k=0), ProgramError, "exported for K up to 3, got k=0"),
    (lambda d: spec_edge.NativeRunner(d / "pair", k=4), ProgramError, "exported for K up to 3, got k=4"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([], 4), ValueError, "prompt: expected at least one"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1, 48], 4), ValueError, r"ids must be in \[0, 48\)"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], -1), ValueError, "max_new: expected >= 0"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 2**62), ValueError, "exceeds the context length 96"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 4.7), TypeError, "max_new: expected an integer, got 4.7"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 4, seed=True), TypeError, "seed: expected an integer"),
    (lambda d: spec_edge.NativeRunner(d / "pair", k=2.9), TypeError, "k: expected an integer, got 2.9"),
    (lambda d: PteSpeculativeDecoder(d / "pair", k=2.9), TypeError, "k: expected an integer, got 2.9"),
    (lambda d: PteSpeculativeDecoder(d / "pair").generate([1], 4.7), TypeError, "max_new: expected an integer"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 93), ValueError, "exceeds the context length 96"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 4, temperature=float("nan")), ValueError,
     r"temperature\[0\] = nan: expected a finite value >= 0"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 4, temperature=1e-39), ValueError,
     r"temperature\[0\] = 1e-39 is too small: 1 / temperature overflows float"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 4, temperature=1e-300), ValueError,
     "temperature = 1e-300 is too small: it rounds to 0 in float32"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 4, temperature=1.0,
                                                            filters=spec_edge.Filters(repetition_penalty=float("inf"))),
     ValueError, r"repetition_penalty\[0\] = inf: expected a finite value > 0"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 4, filters=spec_edge.Filters(top_p=0.0)),
     ValueError, r"top_p\[0\] = 0: expected a value in \(0, 1\]"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 4, filters=spec_edge.Filters(top_k=-1)),
     ValueError, r"top_k\[0\] = -1: expected a value >= 0 \(0 is off; V=48"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate(
        [1], 4, filters=spec_edge.Filters(prev_tokens=torch.tensor([1]))), ValueError,
     "filters.prev_tokens"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate(
        [1], 4, filters=spec_edge.Filters(top_p=torch.tensor([0.9]))), TypeError,
     "filters.top_p: expected a number"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 4, filters=spec_edge.Filters(top_k=2.5)), TypeError,
     "filters.top_k: expected an integer, got 2.5"),
    # integers beyond what the runner holds, and ids that are not integers: named, never truncated
    (lambda d: spec_edge.NativeRunner(d / "pair", k=2**40), ValueError, r"k: expected an integer in \[-2147483648, "),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 4, seed=2**64), ValueError,
     r"seed: expected an integer in \[-9223372036854775808, 9223372036854775807\], got 18446744073709551616"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 2**64), ValueError, "max_new: expected an integer in"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1], 4, eos_token_id=2**63), ValueError,
     "eos_token_id: expected an integer in"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1, 2**63], 4), ValueError,
     r"prompt_ids\[1\]: expected an integer in"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate([1.9, 2.2], 4), TypeError,
     r"prompt_ids\[0\]: expected an integer, got 1.9"),
    (lambda d: spec_edge.NativeRunner(d / "pair").generate("12", 4), TypeError,
     "prompt_ids: expected a sequence of integer token ids, got str"),
    (lambda d: PteSpeculativeDecoder(d / "pair").generate([1.9, 2.2], 4), TypeError,
     r"prompt_ids\[0\]: expected an integer, got 1.9"),
    (lambda d: PteSpeculativeDecoder(d / "pair").generate("12", 4), TypeError,
     "prompt_ids: expected a sequence of integer token ids, got str"),
    (lambda d: PteSpeculativeDecoder(d / "pair").generate([1], 4, seed=2**64), ValueError, "seed: expected an integer in"),
])
def test_native_runner_bad_input(pair, call, error, message):
    with pytest.raises(error, match=message):
        call(pair)


def as_another_user(command: list[str]) -> list[str]:
    """``command`` run as user nobody where this process is root (root reads any file)."""
    if os.geteuid() != 0:
        return command
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is needed to drop root's rights")
    return ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *command]


def test_a_model_file_that_cannot_be_read_is_not_called_missing(pair, tmp_path):
    """A manifest that is a directory or that the user may not read: the reason, in every front end."""
    directory = tmp_path / "dir"
    (directory / "manifest.json").mkdir(parents=True)
    for load in (spec_edge.NativeRunner, PteSpeculativeDecoder):
        with pytest.raises(ProgramError, match=r"dir/manifest.json: (is a directory|cannot be read: Is a directory)"):
            load(directory)
    cli = NATIVE.run("--model-dir", str(directory), "--prompt-ids", "1", check=False).stderr.decode()
    assert "dir/manifest.json: is a directory, expected a file" in cli, cli
    locked = shutil.copytree(pair / "pair", tmp_path / "locked")
    tmp_path.chmod(0o755)
    (locked / "manifest.json").chmod(0)
    command, env = NATIVE.command("spec-edge-run")
    result = subprocess.run(as_another_user([*command, "--model-dir", str(locked), "--prompt-ids", "1"]),
                            capture_output=True, text=True, env=env)
    assert result.returncode == 1 and "locked/manifest.json: cannot be read: Permission denied" in result.stderr, \
        result.stderr
    script = ("import sys, spec_edge\nfrom spec_edge.runtime import PteSpeculativeDecoder\n"
              "for load in (spec_edge.NativeRunner, PteSpeculativeDecoder):\n"
              "    try:\n        load(sys.argv[1])\n    except Exception as e:\n        print(e)\n")
    result = subprocess.run(as_another_user([sys.executable, "-c", script, str(locked)]), capture_output=True,
                            text=True)
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all("locked/manifest.json: cannot be read: Permission denied" in x for x in lines), \
        result.stdout + result.stderr[-2000:]


# ---- bad input: a message and an exit status on every build ----------------------------------

@every_build
@pytest.mark.parametrize("flags,message", [
    (["--model-dir", "/nonexistent", "--prompt-ids", "1,2"], "manifest.json: not found"),
    (["--frobnicate", "1"], "unknown flag '--frobnicate'"),
    (["--prompt-ids", "1,2"], "--model-dir is required"),
    (["{dir}", "--prompt-ids", "1,x"], "--prompt-ids: expected an integer, got 'x'"),
    (["{dir}", "--prompt-ids", "1,2", "--k", "9"], "k: the programs were exported for K up to 3, got k=9"),
    (["{dir}", "--prompt-ids", "1,2", "--k", "0"], "got k=0"),
    (["{dir}", "--prompt-ids", "1,2", "--max-new", "1000"], "exceeds the context length 96"),
    (["{dir}", "--prompt-ids", "1,99"], r"prompt: ids must be in \[0, 48\)"),
    (["{dir}", "--prompt-ids", "1,2", "--top-p", "1.5"], r"top_p\[0\] = 1.5: expected a value in \(0, 1\]"),
    (["{dir}", "--prompt-ids", "1,2", "--temperature", "-1"], r"temperature\[0\] = -1: expected a finite value >= 0"),
    (["{dir}", "--prompt-ids", "1,2", "--temperature", "1e-39"], "1 / temperature overflows float"),
    (["{dir}", "--prompt-ids", "1,2", "--temperature", "1e-300"], "--temperature: 1e-300 is too small: it rounds to 0"),
    (["{dir}", "--prompt-ids", "1,2", "--temperature", "1e39"], r"temperature\[0\] = inf: expected a finite value"),
    (["{dir}", "--prompt-ids", "1,2", "--temperature", "1", "--repetition-penalty", "0"],
     r"repetition_penalty\[0\] = 0: expected a finite value > 0"),
    (["{dir}", "--prompt", "hello"], "tokenizer.json: not found"),
    (["{dir}", "--prompt-ids", "1,2", "--k", "4294967297"], r"--k: expected an integer in \[-2147483648, 2147483647\]"),
    (["{dir}", "--prompt-ids", "1,2", "--max-new", "9223372036854775807"], "exceeds the context length 96"),
    (["{dir}", "--prompt-ids", "1,2", "--max-new", "99999999999999999999"], r"--max-new: expected an integer in \[0,"),
    (["{dir}", "--prompt-ids", "1,2", "--seed", "1e20"], "--seed: expected an integer, got '1e20'"),
    (["{dir}", "--prompt-ids", "1,2", "--seed", "-99999999999999999999"], "--seed: expected an integer in"),
    (["{dir}", "--prompt-ids", "1,2", "--top-k", "-1"], r"--top-k: expected an integer in \[0,"),
    (["{dir}", "--prompt-ids", "1,2", "--stats-json", "/nonexistent/s.json"],
     "--stats-json: the directory '/nonexistent' does not exist or is not writable"),
])
def test_bad_input_is_a_message_and_an_exit_status(build, pair, flags, message):
    flags = [f for flag in flags for f in (["--model-dir", str(pair / "pair")] if flag == "{dir}" else [flag])]
    result = build.run(*flags, check=False)
    assert result.returncode in (1, 2)
    assert re.search(message, result.stderr.decode()), result.stderr.decode()


@every_build
def test_corrupted_programs_and_manifests_are_refused(build, pair, tmp_path):
    d = shutil.copytree(pair / "pair", tmp_path / "m")

    def refused(*flags: str) -> str:
        result = build.run("--model-dir", str(d), *flags, check=False)
        assert result.returncode == 1, result.stderr.decode()
        return result.stderr.decode()

    data = (d / "target.pte").read_bytes()
    good = (d / "manifest.json").read_text()
    (d / "target.pte").write_bytes(data[:len(data) // 3])
    assert "target.pte: does not match the manifest's sha256" in refused("--prompt-ids", "1,2")
    # A program that matches its (edited) hash but is truncated: ExecuTorch's own error, always shown.
    manifest = json.loads(good)
    manifest["programs"]["target.pte"] = hashlib.sha256(data[:len(data) // 3]).hexdigest()
    (d / "manifest.json").write_text(json.dumps(manifest))
    message = refused("--prompt-ids", "1,2")
    assert "target.pte: not a loadable ExecuTorch program" in message
    assert re.search(r"^E .*executorch:", message, re.M), message
    del manifest["programs"]["draft.pte"]
    (d / "manifest.json").write_text(json.dumps(manifest))
    assert "programs: expected the sha256 of draft.pte" in refused("--prompt-ids", "1,2")
    shutil.copy(pair / "pair" / "target.pte", d / "target.pte")
    (d / "manifest.json").write_text(good)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["ops"]["spec_edge::verify"] = 99
    (d / "manifest.json").write_text(json.dumps(manifest))
    message = refused("--prompt-ids", "1,2")
    assert "op versions" in message and "export them again" in message
    (d / "manifest.json").write_text('{"format": 2, "vocab_size": ')
    assert "malformed manifest" in refused("--prompt-ids", "1,2")
    shutil.copy(DEFAULT_PAIR / "target" / "tokenizer.json", d / "tokenizer.json")  # V=4096 for 48-token programs
    (d / "manifest.json").write_text((pair / "pair" / "manifest.json").read_text())
    assert "more than the programs' vocabulary of 48" in refused("--prompt", "def f():")


@every_build
def test_byte_flips_in_programs_and_manifests_never_crash_the_runner(build, pair):
    """Changed bytes, not a truncation (tests/fuzz_programs.py): each flip of a program refused by
    its sha256, a manifest flip refused naming manifest.json or decoding the clean tokens; no
    crash and no sanitizer finding, hundreds of flips natively, fewer under qemu."""
    command, env = build.command()
    outcomes = fuzz(pair / "pair", "cli", 30 if build.qemu_cpu else 400, 11, command, env)
    assert outcomes.get("refused draft.pte", 0) and outcomes.get("refused target.pte", 0), outcomes


@every_build
def test_quantized_token_embeddings_on_every_build(build, embedding_pair):
    """The command-line runner links ExecuTorch's quantized kernels: a program with 4-bit token
    embeddings decodes the Python loop's tokens, greedy and sampled."""
    dec = PteSpeculativeDecoder(embedding_pair)
    assert build.tokens(embedding_pair, "--max-new", "12") == dec.generate(PROMPT, 12)
    assert (build.tokens(embedding_pair, "--max-new", "12", *SAMPLED_FLAGS)
            == dec.generate(PROMPT, 12, **SAMPLED))


MANIFEST_FIELDS = [("prefill_chunk", -1), ("prefill_chunk", 0), ("prefill_chunk", 97), ("k", 2**32 + 8), ("k", True),
                   ("k", 8.5), ("k", 0), ("vocab_size", "48"), ("max_context_len", 1), ("max_context_len", 2**63 + 5)]


@every_build
def test_manifest_fields_are_checked_before_any_program_runs(build, pair, tmp_path):
    """Each field of the C++ runner's manifest: an integer in its range, as the Python loop checks."""
    d = shutil.copytree(pair / "pair", tmp_path / "m")
    good = json.loads((d / "manifest.json").read_text())
    for key, value in MANIFEST_FIELDS:
        (d / "manifest.json").write_text(json.dumps({**good, key: value}))
        expected = f"manifest.json: {key} = {json.dumps(value)}: expected an integer in"
        result = build.run("--model-dir", str(d), "--prompt-ids", "1,2", check=False)
        assert result.returncode == 1 and expected in result.stderr.decode(), (key, value, result.stderr.decode())
        if build is NATIVE:
            for load in (spec_edge.NativeRunner, PteSpeculativeDecoder):
                with pytest.raises(ProgramError, match=re.escape(expected)):
                    load(d)


@every_build
def test_a_manifest_k_other_than_the_programs_is_refused(build, pair, tmp_path):
    d = shutil.copytree(pair / "pair", tmp_path / "m")
    manifest = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**manifest, "k": K + 1}))
    expected = f"target.pte: exported for K={K}, the manifest says K={K + 1}"
    result = build.run("--model-dir", str(d), "--prompt-ids", "1,2", check=False)
    assert result.returncode == 1 and expected in result.stderr.decode(), result.stderr.decode()
    if build is NATIVE:
        for load in (spec_edge.NativeRunner, PteSpeculativeDecoder):
            with pytest.raises(ProgramError, match=re.escape(expected)):
                load(d)


@every_build
@pytest.mark.parametrize("field,value,expected", [
    ("max_context_len", 64, r"manifest.json: max_context_len = 64, but \S*/(draft|target).pte was exported for a "
                            r"context of 96"),
    ("max_context_len", 200, r"max_context_len = 200, but \S*/(draft|target).pte was exported for a context of 96"),
    ("prefill_chunk", 8, r"manifest.json: prefill_chunk = 8, but \S*/(draft|target).pte takes prefill chunks of "
                         r"up to 4 tokens"),
])
def test_a_manifest_that_disagrees_with_the_programs_shapes_is_refused_at_load(build, pair, tmp_path, field, value,
                                                                               expected):
    """Not the first call failing inside ExecuTorch: the manifest's context and prefill chunk
    checked against the programs' own input shapes, by every front end."""
    d = shutil.copytree(pair / "pair", tmp_path / "m")
    manifest = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**manifest, field: value}))
    result = build.run("--model-dir", str(d), "--prompt-ids", "1,2", check=False)
    assert result.returncode == 1 and re.search(expected, result.stderr.decode()), result.stderr.decode()
    if build is NATIVE:
        for load in (spec_edge.NativeRunner, PteSpeculativeDecoder):
            with pytest.raises(ProgramError, match=expected):
                load(d)


# ---- the same tokens on every build (the default pair) ---------------------------------------

@pytest.fixture(scope="session")
def default_programs() -> Path:
    """The shipped default pair exported as `make demo` exports it (the same cache)."""
    return exported_pair(DEFAULT_PAIR, ROOT / "build" / "demo")


@every_build
def test_executorch_info_messages_only_with_verbose(build, default_programs):
    flags = ["--model-dir", str(default_programs), "--prompt-ids", "1,2", "--max-new", "1"]
    info = re.compile(r"^I .*executorch:", re.M)  # e.g. its CPU probing when XNNPACK starts
    quiet = build.run(*flags).stderr.decode()
    assert not info.search(quiet), quiet
    verbose = build.run(*flags, "--verbose").stderr.decode()
    assert info.search(verbose), verbose


@pytest.mark.parametrize("show", [False, True], ids=["default", "shown"])
def test_native_runner_shows_executorch_info_messages_only_when_asked(pair, show):
    # In a fresh process: ExecuTorch probes the CPU once, when XNNPACK first starts.
    script = ("import spec_edge\n"
              f"if {show}:\n    spec_edge.NativeRunner.show_executorch_info()\n"
              f"spec_edge.NativeRunner({str(pair / 'pair')!r}).generate([1, 2], 2)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    info = re.compile(r"^\[\w+\.cpp:\d+\] ", re.M)  # the format of the Python bindings' emitter
    assert bool(info.search(result.stderr)) == show, result.stderr


DEFAULT_PROMPT = Tokenizer.from_file(str(DEFAULT_PAIR / "target" / "tokenizer.json")).encode("import os\n\n\ndef main(").ids
RUNS = {
    "greedy": ["--prompt-ids", ",".join(map(str, DEFAULT_PROMPT)), "--max-new", "32", "--k", "4"],
    "sampled": ["--prompt-ids", ",".join(map(str, DEFAULT_PROMPT)), "--max-new", "32", "--k", "4", *SAMPLED_FLAGS],
    "text": ["--prompt", "def parse_args(argv):\n    ", "--max-new", "32", "--k", "4"],
}


@pytest.fixture(scope="session")
def x86_64_outputs(default_programs) -> dict[str, bytes]:
    return {mode: NATIVE.run("--model-dir", str(default_programs), *flags).stdout for mode, flags in RUNS.items()}


def test_the_native_runner_gives_the_python_loops_tokens_on_the_default_pair(default_programs, x86_64_outputs):
    dec = PteSpeculativeDecoder(default_programs, k=4)
    assert [int(t) for t in x86_64_outputs["greedy"].split()] == dec.generate(DEFAULT_PROMPT, 32)
    assert [int(t) for t in x86_64_outputs["sampled"].split()] == dec.generate(DEFAULT_PROMPT, 32, **SAMPLED)
    assert len(x86_64_outputs["text"]) > 20


def test_the_shipped_programs_keep_the_acceptance_bar(default_programs):
    # The draft runs 8-bit; its held-out greedy acceptance must still clear the pair's 0.6 bar.
    assert json.loads((default_programs / "manifest.json").read_text())["quantize"] == {"target": None,
                                                                                      "draft": "8da8w",
                                                                                      "embedding": None,
                                                                                      "target_linears": None}
    tokenizer = Tokenizer.from_file(str(default_programs / "tokenizer.json"))
    dec = PteSpeculativeDecoder(default_programs, k=4)
    hist = [0] * 5
    for text in json.loads((DEFAULT_PAIR / "prompts.json").read_text())[:4]:
        dec.generate(tokenizer.encode(text).ids, 32)
        hist = [a + b for a, b in zip(hist, dec.stats.accepted_histogram)]
    assert per_token_acceptance(hist) >= 0.6


def test_text_generation_stops_at_any_of_the_checkpoints_end_tokens(default_programs, tmp_path):
    """spec-edge-run --prompt ends at any id of generation_config.json's eos_token_id list."""
    prompt = RUNS["text"][1]
    reference = Tokenizer.from_file(str(default_programs / "tokenizer.json"))
    full = NATIVE.tokens(default_programs, "--max-new", "32", "--k", "4", prompt=reference.encode(prompt).ids)
    model = tmp_path / "model"
    model.mkdir()
    for f in default_programs.iterdir():
        if f.name != "generation_config.json":
            (model / f.name).symlink_to(f)
    ends = end_ids(full)
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": ends}))
    stop_ids = spec_edge.NativeTokenizer(model / "tokenizer.json").eos_ids
    assert set(ends) <= set(stop_ids)
    first = min(full.index(t) for t in stop_ids if t in full)
    out = NATIVE.run("--model-dir", str(model), *RUNS["text"]).stdout.decode()
    assert out == prompt + reference.decode(full[:first + 1]) + "\n"


@other_builds
@pytest.mark.parametrize("mode", list(RUNS))
def test_every_build_gives_the_x86_64_tokens(build, mode, default_programs, x86_64_outputs):
    assert build.run("--model-dir", str(default_programs), *RUNS[mode]).stdout == x86_64_outputs[mode]


@every_build
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_runners_tokenizer_matches_tokenizers_on_every_family(build, family, tmp_path):
    path = write_family(family, tmp_path)
    reference = Tokenizer.from_file(str(path))
    text = "\n".join(HARD)
    for flags, add_special in (([], True), (["--no-special"], False)):
        want = reference.encode(text, add_special_tokens=add_special).ids
        got = build.run(str(path), *flags, tool="spec-edge-tokenize", stdin=text.encode()).stdout
        assert [int(t) for t in got.split()] == want
    for flags, skip in (([], True), (["--keep-special"], False)):
        back = build.run(str(path), "--decode", *flags, tool="spec-edge-tokenize", stdin=" ".join(map(str, want)).encode())
        assert back.stdout.decode() == reference.decode(want, skip_special_tokens=skip)
    # Fuzz: random bytes in, random ids out (ill-formed UTF-8 reads as U+FFFD): no crash, and
    # the same ids and text as tokenizers.
    rng = random.Random(family)
    noise = bytes(rng.randrange(256) for _ in range(4096))
    got = build.run(str(path), tool="spec-edge-tokenize", stdin=noise).stdout
    assert [int(t) for t in got.split()] == reference.encode(noise.decode("utf-8", errors="replace")).ids
    ids = [rng.randrange(reference.get_vocab_size()) for _ in range(2000)]
    back = build.run(str(path), "--decode", "--keep-special", tool="spec-edge-tokenize", stdin=" ".join(map(str, ids)).encode())
    assert back.stdout.decode() == reference.decode(ids, skip_special_tokens=False)


@every_build
def test_the_tokenizer_tool_refuses_hostile_files_and_loose_ids(build, tmp_path):
    """A file nested 100,000 deep, a vocabulary id of 2^31 - 1: a message naming the file and exit
    status 1, not a crash; --decode reads whitespace-separated decimal ids and nothing else."""
    source = json.loads((DEFAULT_PAIR / "target" / "tokenizer.json").read_text())
    deep = tmp_path / "deep" / "tokenizer.json"
    deep.parent.mkdir()
    deep.write_text(json.dumps(source).replace('"normalizer": null', '"normalizer": ' + "[" * 100_000 + "]" * 100_000))
    huge = tmp_path / "huge" / "tokenizer.json"
    huge.parent.mkdir()
    source["model"]["vocab"]["zzz"] = 2**31 - 1
    huge.write_text(json.dumps(source))
    for path, message in [(deep, "JSON nested more than 64 levels deep"), (huge, "id 2147483647 in a file of")]:
        result = build.run(str(path), tool="spec-edge-tokenize", stdin=b"hello", check=False)
        assert result.returncode == 1 and f"{path}: " in result.stderr.decode() and message in result.stderr.decode()
    good = str(DEFAULT_PAIR / "target" / "tokenizer.json")
    for ids in (b"5 x 6", b"5,6,7", b"5 -6", b"5 6.0", b"99999999999999999999"):
        result = build.run(good, "--decode", tool="spec-edge-tokenize", stdin=ids, check=False)
        assert result.returncode == 1 and result.stdout == b"", ids
        assert "stdin: expected whitespace-separated token ids" in result.stderr.decode(), ids
    assert build.run(good, "--decode", tool="spec-edge-tokenize", stdin=b" 5\n6\t7 ").stdout == \
        Tokenizer.from_file(good).decode([5, 6, 7]).encode()


@every_build
def test_the_runners_tokenizer_matches_tokenizers_on_code_and_unicode(build):
    path = DEFAULT_PAIR / "target" / "tokenizer.json"
    reference = Tokenizer.from_file(str(path))
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))
    texts = [f.read_text(errors="replace") for f in random.Random(0).sample(files, 12)]
    texts += ["héllo wörld 東京 ٣٤٥ ½ Ⅻ \u00a0 \u2028x", "don't 's 're  \n\n  x<|endoftext|>y", "a  b\t\tc \n",
              "   ", "x\r\n\r\ny", "😀 emoji 🎉!!", "'''\"\"\"'s'S", ""]
    if build.qemu_cpu:  # a process start costs seconds under qemu: the same texts in one input
        texts = ["\n".join(texts), "   ", ""]
    for text in texts:
        want = reference.encode(text).ids
        got = build.run(str(path), tool="spec-edge-tokenize", stdin=text.encode()).stdout
        assert [int(t) for t in got.split()] == want, text[:80]
        back = build.run(str(path), "--decode", tool="spec-edge-tokenize", stdin=" ".join(map(str, want)).encode())
        assert back.stdout.decode() == reference.decode(want)


def test_the_deploy_bundle_loads_only_its_own_libraries(default_programs, x86_64_outputs, tmp_path):
    a72 = BUILDS[2]
    a72.run("--help")  # skips (fails in CI) when the aarch64 build is missing
    bundle = tmp_path / "pi"
    subprocess.run([str(ROOT / "runtime_demo/tools/deploy.sh"), str(bundle), "--model-dir", str(default_programs)],
                   check=True, capture_output=True)
    assert sorted(p.name for p in (bundle / "model").iterdir()) == [
        "draft.pte", "manifest.json", "target.pte", "tokenizer.json"]
    trace = subprocess.run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-E", "LD_TRACE_LOADED_OBJECTS=1",
                            str(bundle / "spec-edge-run")], capture_output=True, text=True, check=True).stdout
    loaded = dict(re.findall(r"^\s*(\S+\.so[.\d]*) => (\S+)", trace, re.M))
    ours = {name: path for name, path in loaded.items() if "executorch" in name}
    # spec_edge's kernels, ExecuTorch's runtime, thread pool, optimized and quantized kernels, XNNPACK
    assert len(ours) == 6 and all(Path(path).parent == bundle for path in ours.values()), trace
    on_board = Build("bundle", bundle, "runtime_demo/tools/deploy.sh", qemu_cpu="cortex-a72")
    assert on_board.run("--model-dir", str(bundle / "model"), *RUNS["greedy"]).stdout == x86_64_outputs["greedy"]
