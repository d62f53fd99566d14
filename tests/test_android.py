"""The Android bindings (android/): the Java API (org.specedge) over the JNI bridge, run on a
desktop JVM (x86-64) and on Debian's arm64 JVM under qemu-aarch64 (the aarch64 JNI library, as on
a phone's CPU). Tokens equal spec-edge-run's; bad input is a Java exception with a message; the
Android-only code compiles for the aarch64-linux-android target."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from tokenizers import Tokenizer

import spec_edge
from spec_edge.drafters import Drafting

from small_pair import K, PROMPT
from tokenizer_families import FAMILIES, HARD, write_family
from test_runner import (DEFAULT_PROMPT, NATIVE, RUNS, SAMPLED_FLAGS, default_programs, end_ids,  # noqa: F401
                         x86_64_outputs)

ROOT = Path(__file__).resolve().parents[1]
API_SOURCES = sorted((ROOT / "android/src/main/java").rglob("*.java"))
JNI_SOURCE = ROOT / "android/src/main/cpp/spec_edge_jni.cpp"
JRE_ARM64 = ROOT / "build/third_party/jre-arm64"


def missing(message: str):
    if os.environ.get("CI"):
        raise AssertionError(message)
    pytest.skip(message)


@dataclass(frozen=True)
class Jvm:
    """A JVM and the JNI library it loads."""

    name: str
    lib_dir: Path  # holds libspec_edge_jni.so
    made_by: str
    qemu_cpu: str | None = None

    def command(self) -> list[str]:
        if not (self.lib_dir / "libspec_edge_jni.so").is_file():
            missing(f"{self.lib_dir}/libspec_edge_jni.so not built ({self.made_by} builds it)")
        if not self.qemu_cpu:
            return [shutil.which("java") or missing("java is not installed")]
        if not (JRE_ARM64 / "java/bin/java").is_file():
            missing("the arm64 JRE is not unpacked (make test-aarch64 runs android/tools/fetch_jre.sh)")
        return ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-E",
                f"LD_LIBRARY_PATH={JRE_ARM64 / 'lib/aarch64-linux-gnu'}", str(JRE_ARM64 / "java/bin/java")]

    def run(self, classes: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        if self.qemu_cpu:
            env["QEMU_CPU"] = self.qemu_cpu
        command = [*self.command(), f"-Djava.library.path={self.lib_dir}", "-Dsun.stdout.encoding=UTF-8",
                   "-cp", str(classes), "ApiDriver", *args]
        result = subprocess.run(command, capture_output=True, encoding="utf-8", env=env, timeout=900)
        assert result.returncode >= 0, f"{self.name}: the JVM died of signal {-result.returncode}: {result.stderr}"
        assert "hs_err" not in result.stdout + result.stderr, result.stdout + result.stderr  # a VM crash
        if check:
            assert result.returncode == 0, result.stderr[-3000:]
        return result


JVMS = [Jvm("x86-64", ROOT / "build/cmake/android", "make build"),
        Jvm("aarch64-a72", ROOT / "build/aarch64/android", "make test-aarch64", qemu_cpu="cortex-a72")]
every_jvm = pytest.mark.parametrize("jvm", JVMS, ids=[j.name for j in JVMS])


@pytest.fixture(scope="session")
def classes(tmp_path_factory) -> Path:
    """The API compiled as an Android library would be (Java 8 language and library level, every
    lint a failure), and the test driver."""
    if shutil.which("javac") is None:
        missing("javac is not installed (.ci/run installs openjdk-17-jdk-headless)")
    out = tmp_path_factory.mktemp("classes")
    subprocess.run(["javac", "--release", "8", "-Xlint:all", "-Werror", "-d", str(out), *map(str, API_SOURCES)],
                   check=True, capture_output=True, text=True)
    subprocess.run(["javac", "-cp", str(out), "-d", str(out), str(ROOT / "tests/android/ApiDriver.java")],
                   check=True, capture_output=True, text=True)
    return out


def test_the_api_is_documented(classes, tmp_path):
    result = subprocess.run(["javadoc", "-Xdoclint:all", "-Werror", "-quiet", "-d", str(tmp_path),
                             *map(str, API_SOURCES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def driver_tokens(jvm: Jvm, classes: Path, model_dir: Path, k: int, max_new: int, speculative: bool,
                  sampling: list[str], prompt: list[int], drafting: tuple | None = None) -> tuple[list[int], str]:
    """``drafting``: (drafter, adaptive_k) or (drafter, adaptive_k, verify_costs)."""
    extra = [] if drafting is None else [drafting[0], "1" if drafting[1] else "0", *map(str, drafting[2:])]
    out = jvm.run(classes, "tokens", str(model_dir), str(k), str(max_new), "1" if speculative else "0", *sampling,
                  ",".join(map(str, prompt)), *extra).stdout.splitlines()
    tokens = [int(t) for t in out[0].split()]
    assert out[1] == out[0], "the streamed tokens differ from the returned ones"
    return tokens, out[2]


GREEDY = ["0", "0", "1", "0", "1", "0"]  # temperature top_k top_p min_p penalty seed
SAMPLED = ["0.8", "20", "0.9", "0", "1.1", "5"]
assert SAMPLED_FLAGS == ["--temperature", "0.8", "--top-k", "20", "--top-p", "0.9", "--repetition-penalty", "1.1",
                         "--seed", "5"]


@every_jvm
def test_the_java_drafting_defaults_are_the_python_loops(jvm, classes):
    """DraftingConfig's defaults come from the native runner, whose come from program_format.json,
    as spec_edge.Drafting's do."""
    line = jvm.run(classes, "defaults").stdout.strip()
    d = Drafting()
    assert line == (f"drafter={d.drafter} min_ngram={d.min_ngram} max_ngram={d.max_ngram} min_match={d.min_match} "
                    f"adaptive_k={str(d.adaptive_k).lower()} draft_step_cost={d.draft_step_cost!r} "
                    f"verify_row_cost={d.verify_row_cost!r}")


@every_jvm
@pytest.mark.parametrize("k", [1, K])
def test_the_java_api_gives_the_clis_tokens(jvm, classes, pair, k):
    for speculative in (True, False):
        for sampling, flags in ((GREEDY, []), (SAMPLED, SAMPLED_FLAGS)):
            if jvm.qemu_cpu and (k == 1 or not speculative) and sampling is SAMPLED:
                continue  # a JVM start costs seconds under qemu: the other combinations suffice there
            cli = NATIVE.tokens(pair / "pair", "--max-new", "40", "--k", str(k), *flags,
                                *([] if speculative else ["--no-spec"]))
            tokens, stats = driver_tokens(jvm, classes, pair / "pair", k, 40, speculative, sampling, PROMPT)
            assert tokens == cli
            fields = dict(item.split("=", 1) for item in stats.split())
            assert (fields["k"], fields["max_k"], fields["vocab"], fields["context"]) == (str(k), str(K), "48", "96")
            assert fields["new_tokens"] == "40" and fields["target_seconds"] == "true"
            hist = [int(n) for n in fields["hist"].split(",") if n]
            if speculative:
                assert fields["callbacks"] == fields["rounds"] and sum(hist) == int(fields["rounds"]) > 0
                assert fields["draft_seconds"] == "true"
            else:
                assert fields["callbacks"] == "40" and fields["rounds"] == "0"


@every_jvm
def test_quantized_token_embeddings_through_the_jni_library(jvm, classes, embedding_pair):
    """The JNI library links ExecuTorch's quantized kernels: 4-bit token embeddings decode the CLI's tokens."""
    for sampling, flags in ((GREEDY, []), (SAMPLED, SAMPLED_FLAGS)):
        tokens, _ = driver_tokens(jvm, classes, embedding_pair, K, 12, True, sampling, PROMPT)
        assert tokens == NATIVE.tokens(embedding_pair, "--max-new", "12", *flags)


@every_jvm
def test_the_default_pair_through_the_jni_library(jvm, classes, default_programs, x86_64_outputs):  # noqa: F811
    for mode, sampling in (("greedy", GREEDY), ("sampled", SAMPLED)):
        tokens, _ = driver_tokens(jvm, classes, default_programs, 4, 32, True, sampling, DEFAULT_PROMPT)
        assert tokens == [int(t) for t in x86_64_outputs[mode].split()], mode
    prompt = RUNS["text"][1]
    out = jvm.run(classes, "text", str(default_programs), "32", prompt).stdout.split("\n")
    text, streamed, ids, round_trip = (line.replace("\\n", "\n").replace("\\\\", "\\") for line in out[:4])
    assert (prompt + text + "\n").encode() == x86_64_outputs["text"]  # the CLI prints the prompt, then the text
    assert streamed == text and round_trip == prompt
    reference = Tokenizer.from_file(str(default_programs / "tokenizer.json"))
    assert [int(t) for t in ids.split()] == reference.encode(prompt).ids
    # Java's UTF-16 to UTF-8 and back, surrogate pairs included, through the tokenizer
    prompt = "# héllo wörld 東京 ½ 😀🎉\n"
    out = jvm.run(classes, "text", str(default_programs), "4", prompt).stdout.split("\n")
    assert [int(t) for t in out[2].split()] == reference.encode(prompt).ids
    assert out[3].replace("\\n", "\n") == prompt


@every_jvm
def test_the_tokenizer_families_through_the_jni_library(jvm, classes, default_programs, tmp_path):  # noqa: F811
    text, args, references = "\n".join(HARD), [], []
    for family in sorted(FAMILIES):
        model_dir = tmp_path / family
        model_dir.mkdir()
        for f in default_programs.iterdir():
            if f.name != "tokenizer.json":
                (model_dir / f.name).symlink_to(f)
        references.append(Tokenizer.from_file(str(write_family(family, model_dir))))
        args += [str(model_dir), text.encode().hex()]
    out = jvm.run(classes, "codec", *args).stdout.split("\n")
    for family, reference, (ids_line, text_line) in zip(sorted(FAMILIES), references, zip(out[0::2], out[1::2])):
        ids = reference.encode(text).ids
        assert [int(t) for t in ids_line.split()] == ids, family
        assert bytes.fromhex(text_line).decode() == reference.decode(ids, skip_special_tokens=True), family


@every_jvm
def test_text_generation_stops_at_any_of_the_checkpoints_end_tokens(jvm, classes, default_programs, tmp_path):  # noqa: F811
    prompt = RUNS["text"][1]
    reference = Tokenizer.from_file(str(default_programs / "tokenizer.json"))
    full, _ = driver_tokens(jvm, classes, default_programs, 4, 32, True, GREEDY, reference.encode(prompt).ids)
    model = tmp_path / "model"
    model.mkdir()
    for f in default_programs.iterdir():
        if f.name != "generation_config.json":
            (model / f.name).symlink_to(f)
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": end_ids(full)}))
    stop_ids = spec_edge.NativeTokenizer(model / "tokenizer.json").eos_ids
    first = min(full.index(t) for t in stop_ids if t in full)
    text = jvm.run(classes, "text", str(model), "32", prompt).stdout.split("\n")[0]
    assert text.replace("\\n", "\n").replace("\\\\", "\\") == reference.decode(full[:first + 1])


@every_jvm
def test_stop_close_concurrency_and_callback_exceptions(jvm, classes, pair):
    out = jvm.run(classes, "control", str(pair / "pair")).stdout.splitlines()
    assert len(out) == 8 and all(line.startswith("ok ") for line in out), out


BAD_INPUT = {
    "null_dir": ("IllegalArgumentException", "modelDir: expected the path of a model directory, got null"),
    "missing_dir": ("SpecEdgeException", r"missing/manifest.json: not found \(is the directory written by"),
    "k_too_big": ("SpecEdgeException", "k: the programs were exported for K up to 3, got k=99"),
    "k_negative": ("IllegalArgumentException", "k: expected 0 .* got -1"),
    "drafter": ("IllegalArgumentException", "drafter: expected one of model, lookup, hybrid, got 'ngram'"),
    "drafter_null": ("IllegalArgumentException", "drafter: expected one of model, lookup, hybrid, got null"),
    "ngrams": ("IllegalArgumentException", "min_ngram, max_ngram: expected 1 <= min_ngram <= max_ngram <= 64, got 3, 2"),
    "min_match": ("IllegalArgumentException", r"min_match: expected min_ngram <= min_match <= max_ngram \(2..4\), got 7"),
    "costs": ("IllegalArgumentException", "draft_step_cost: expected a cost in"),
    "verify_costs": ("IllegalArgumentException", r"verify_costs: expected a cost for each K in 1..3 \(k=3\), .* got 1"),
    "verify_costs_null": ("IllegalArgumentException", "verifyCosts: expected an array of costs, got null"),
    "null_prompt": ("IllegalArgumentException", "promptIds: expected a value, got null"),
    "null_sampling": ("IllegalArgumentException", "sampling: expected a value, got null"),
    "empty_prompt": ("IllegalArgumentException", "prompt: expected at least one token"),
    "id_out_of_vocab": ("IllegalArgumentException", r"prompt: ids must be in \[0, 48\), got 1073741824"),
    "negative_max_new": ("IllegalArgumentException", "max_new: expected >= 0, got -1"),
    "too_long": ("IllegalArgumentException", "exceeds the context length 96"),
    # the ops' own checks and messages (spec_edge::check_sampling_settings), before any program runs
    "temperature": ("IllegalArgumentException", r"temperature\[0\] = -1: expected a finite value >= 0"),
    "temperature_nan": ("IllegalArgumentException", r"temperature\[0\] = nan: expected a finite value >= 0"),
    "temperature_tiny": ("IllegalArgumentException", r"temperature\[0\] = 1e-39 is too small: 1 / temperature"),
    "top_k": ("IllegalArgumentException", r"top_k\[0\] = -3: expected a value >= 0 \(0 is off"),
    "top_p": ("IllegalArgumentException", r"top_p\[0\] = 0: expected a value in \(0, 1\]"),
    "min_p": ("IllegalArgumentException", r"min_p\[0\] = 2: expected a value in \[0, 1\]"),
    "penalty": ("IllegalArgumentException", r"repetition_penalty\[0\] = 0: expected a finite value > 0"),
    "null_text": ("IllegalArgumentException", "prompt: expected a value, got null"),
    "repeats": ("IllegalArgumentException", "repeats: expected >= 1, got 0"),
    "decode_bad_id": ("SpecEdgeException", "tokenizer.json: not found"),  # the small pair ships none
    "still_usable": ("none", ""),
}


@every_jvm
def test_the_java_api_measures_step_costs(jvm, classes, pair):
    costs, identical = jvm.run(classes, "costs", str(pair / "pair")).stdout.splitlines()
    context, seconds, draft, *positive = costs.split()
    assert int(context) == 96 - K - 1 and float(seconds) > 0 and float(draft) > 0
    assert positive == ["1"] * K  # a positive cost for each K
    assert identical == "true"


@every_jvm
def test_bad_input_is_a_java_exception_with_a_message(jvm, classes, pair):
    lines = jvm.run(classes, "errors", str(pair / "pair")).stdout.splitlines()
    got = {name: (cls.rsplit(".", 1)[-1], message) for name, cls, message in (line.split("\t", 2) for line in lines)}
    assert sorted(got) == sorted(BAD_INPUT)
    for name, (cls, message) in BAD_INPUT.items():
        assert got[name][0] == cls and re.search(message, got[name][1]), (name, got[name])


@every_jvm
def test_corrupted_programs_and_unknown_tokens_are_refused(jvm, classes, pair, default_programs, tmp_path):  # noqa: F811
    d = shutil.copytree(pair / "pair", tmp_path / "m")
    data = (d / "target.pte").read_bytes()
    (d / "target.pte").write_bytes(data[:len(data) // 3])
    name, cls, message = jvm.run(classes, "load", str(d)).stdout.strip().split("\t", 2)
    assert cls == "org.specedge.SpecEdgeException" and "target.pte" in message, message
    # decode of an id outside the vocabulary, with a tokenizer present
    lines = jvm.run(classes, "errors", str(default_programs)).stdout.splitlines()
    decode = next(line for line in lines if line.startswith("decode_bad_id")).split("\t")
    assert decode[1] == "java.lang.IllegalArgumentException" and "decode: id -5 is not in the vocabulary" in decode[2]


@every_jvm
def test_byte_flips_never_crash_the_jni_library(jvm, classes, pair, tmp_path):
    """tests/fuzz_programs.py's fuzzing through the Java API: every flip of a program refused by
    its hash, a manifest flip refused naming manifest.json or decoding the clean tokens; no crash."""
    d = shutil.copytree(pair / "pair", tmp_path / "m")
    trials = 20 if jvm.qemu_cpu else 300
    lines = jvm.run(classes, "fuzz", str(d), str(trials), "13").stdout.splitlines()
    outcomes = {name: int(count) for name, count in (line.rsplit("\t", 1) for line in lines)}
    assert sum(outcomes.values()) == trials, outcomes
    assert set(outcomes) <= {"refused draft.pte", "refused target.pte", "refused manifest.json", "same"}, outcomes


@every_jvm
def test_tokenizer_mutations_never_crash_the_jni_library(jvm, classes, default_programs, tmp_path):
    """tests/fuzz_files.py's tokenizer mutations through the Java API: each loaded beside the
    default pair's programs, used to encode and decode, or refused by an exception naming it."""
    from fuzz_files import write_mutations, write_tokenizer_base
    base = write_tokenizer_base(tmp_path / "base", "llama3")
    d = shutil.copytree(base, tmp_path / "m", ignore=shutil.ignore_patterns("donors"))
    for name in ("draft.pte", "target.pte", "verify.pte", "manifest.json"):
        shutil.copy(default_programs / name, d / name)
    full = bool(os.environ.get("SPEC_EDGE_FUZZ_FULL"))  # make fuzz-files
    trials = (200 if full else 20) if jvm.qemu_cpu else 2000 if full else 150
    listing = write_mutations(base, tmp_path / "mutations", trials, 9)
    lines = jvm.run(classes, "tokenizer-fuzz", str(d), str(listing)).stdout.splitlines()
    outcomes = {name: int(count) for name, count in (line.rsplit("\t", 1) for line in lines)}
    assert sum(outcomes.values()) == trials, outcomes
    assert set(outcomes) <= {"loaded", "refused tokenizer.json", "refused tokenizer_config.json",
                             "refused generation_config.json"}, outcomes
    assert outcomes.get("loaded", 0) > 0 and outcomes.get("refused tokenizer.json", 0) > 0, outcomes


def android_syntax_check(source: Path) -> subprocess.CompletedProcess:
    """clang's aarch64-linux-android24 front end over the JNI source (__ANDROID__ defined), with
    the cross toolchain's C/C++ headers and the NDK's declarations of the logging calls it makes."""
    clang = shutil.which("clang++") or missing("clang++ is not installed (.ci/run installs clang)")
    jdk = Path(os.path.realpath(shutil.which("javac") or missing("javac is not installed"))).parents[1]
    cxx = sorted(Path("/usr/aarch64-linux-gnu/include/c++").glob("*"))
    if not cxx:
        missing("the aarch64 C++ headers are not installed (g++-aarch64-linux-gnu)")
    resource = subprocess.run([clang, "-print-resource-dir"], capture_output=True, text=True).stdout.strip()
    return subprocess.run(
        [clang, "--target=aarch64-linux-android24", "-fsyntax-only", "-std=c++17", "-Wall", "-Wextra", "-Werror",
         "-nostdinc++", "-nostdlibinc", "-isystem", str(cxx[-1]), "-isystem", str(cxx[-1] / "aarch64-linux-gnu"),
         "-isystem", f"{resource}/include", "-isystem", "/usr/aarch64-linux-gnu/include",
         "-I", str(ROOT / "tests/android/ndk_declarations"), "-I", str(ROOT / "runtime_demo/runner/include"),
         "-I", str(ROOT / "build/cmake/runtime_demo/generated"),
         "-I", str(jdk / "include"), "-I", str(jdk / "include/linux"), str(source)],
        capture_output=True, text=True)


def test_the_android_code_paths_compile_for_android(tmp_path):
    result = android_syntax_check(JNI_SOURCE)
    assert result.returncode == 0, result.stderr
    # Negative control: a mistake inside the __ANDROID__ branch is caught.
    broken = tmp_path / JNI_SOURCE.name
    broken.write_text(JNI_SOURCE.read_text().replace("ANDROID_LOG_ERROR", "ANDROID_LOG_ERRROR"))
    assert android_syntax_check(broken).returncode != 0
