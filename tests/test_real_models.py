"""The real checkpoints of `make fetch-models` (build/models), where present: each skips with a
message otherwise (CI does not hold 1.7 GB of weights). The long ones (the larger models' logits,
an export of a real file) run with --real-models: `make test-real`."""

import sys
import sysconfig
from pathlib import Path

import pytest
import torch

import spec_edge
from tokenizer_families import HARD

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "build" / "models"
sys.path.insert(0, str(ROOT / "export"))
from fetch_models import MODELS as PINNED  # noqa: E402


def present(name: str) -> Path:
    path = MODELS / PINNED[name].file
    if not path.is_file():
        pytest.skip(f"{path} is absent: `make fetch-models` downloads it (about a minute)")
    return path


def long_test(request, name: str = "") -> None:
    if not request.config.getoption("--real-models") and name != "smollm2-135m":
        pytest.skip("a long real-model test: run with --real-models (make test-real)")


def sample_texts() -> list[str]:
    """A few kilobytes of code and prose, and the corpus that breaks tokenizers."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = [(stdlib / name).read_text()[:4000] for name in ("json/decoder.py", "textwrap.py", "heapq.py")]
    prose = [(stdlib / "LICENSE.txt").read_text()[:4000]] if (stdlib / "LICENSE.txt").is_file() else []
    return code + prose + HARD + ["\n".join(HARD)]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_native_tokenizer_equals_transformers_on_the_gguf_tokenizers(name, tmp_path):
    path = present(name)
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    reference = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).backend_tokenizer
    reference.save(str(tmp_path / "tokenizer.json"))
    native = spec_edge.NativeTokenizer(tmp_path / "tokenizer.json")
    assert native.vocab_size == reference.get_vocab_size()
    for text in sample_texts():
        ids = reference.encode(text).ids
        assert native.encode(text) == ids, text[:80]
        for skip in (False, True):
            assert native.decode(ids, skip) == reference.decode(ids, skip_special_tokens=skip)


def transformers_model(path: Path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    return transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                             dtype=torch.float32).eval()


CODE_PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_model_of_each_real_gguf_file_equals_transformers_on_it(name, tmp_path, request):
    from spec_edge.export import build_model
    from spec_edge.gguf_checkpoint import load_gguf, save_gguf_tokenizer
    path = present(name)
    long_test(request, name)
    ids = torch.tensor([save_gguf_tokenizer(path, tmp_path).encode(CODE_PROMPT).ids])
    config, state = load_gguf(path, max_context_len=64)
    with torch.no_grad():
        got = build_model(config, state)(ids, {"input_pos": torch.tensor([0])})
    del state
    with torch.no_grad():
        want = transformers_model(path)(input_ids=ids).logits
    assert (got - want).abs().max() < 1e-3 * want.abs().max()
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.timeout(3600)
def test_the_real_smollm2_file_exported_decodes_as_transformers(tmp_path, request):
    """The smallest real file as both draft and target: greedy speculative decoding through the
    programs gives transformers' greedy tokens. The export takes about 26 minutes here."""
    from spec_edge.gguf_checkpoint import export_gguf_pair
    from spec_edge.runtime import PteSpeculativeDecoder
    path = present("smollm2-135m")
    long_test(request)
    out = export_gguf_pair(path, path, 4, tmp_path / "pte", max_context_len=128, kv_cache="fp32", progress=False)
    from tokenizers import Tokenizer
    prompt = Tokenizer.from_file(str(out / "tokenizer.json")).encode(CODE_PROMPT).ids
    want = transformers_model(path).generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)
    dec = PteSpeculativeDecoder(out)
    assert dec.generate(prompt, 24) == want[0, len(prompt):].tolist()
    assert dec.stats.accepted >= 0.9 * dec.stats.proposed  # the draft is the target (up to ties between paths)


def test_the_real_pair_demo_names_the_files_it_lacks(tmp_path):
    from spec_edge import demo_real
    with pytest.raises(SystemExit, match=f"{tmp_path}: {demo_real.TARGET}, {demo_real.DRAFT} absent; "
                                         "`make fetch-models` downloads them"):
        demo_real.exported(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_exported_real_pair_decodes_greedily_as_its_target_alone():
    """The Qwen2.5-Coder pair as `make demo-real` exports it (build/real/qwen-coder), through the
    C++ runner and the Python loop: greedy speculative tokens equal target-only decoding's."""
    from spec_edge import demo_real
    from spec_edge.runtime import PteSpeculativeDecoder
    out = ROOT / "build" / "real" / "qwen-coder"
    if not (out / "manifest.json").is_file():
        pytest.skip(f"{out} holds no exported pair: `make demo-real` exports it (about 40 minutes)")
    prompt = spec_edge.NativeTokenizer(out / "tokenizer.json").encode(demo_real.PROMPTS[0])
    runner = spec_edge.NativeRunner(out, k=4)
    want = runner.generate(prompt, 32, speculative=False)
    assert runner.generate(prompt, 32) == want
    assert runner.stats.accepted > 0
    assert PteSpeculativeDecoder(out, k=4).generate(prompt, 32) == want
