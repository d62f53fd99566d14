"""The on-device tokenizer (runtime_demo/runner/tokenizer) against Hugging Face `tokenizers`: every
family's structure, a corpus that breaks tokenizers, ill-formed UTF-8, random texts and ids,
streaming, special tokens from the checkpoint's configuration, and bad files."""

import json
import random

import pytest

import spec_edge
from tokenizer_families import FAMILIES, HARD, INVALID_UTF8, random_texts, write_family

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    """(name, path, the reference tokenizer, the native one)."""
    path = write_family(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, path, tokenizers.Tokenizer.from_file(str(path)), spec_edge.NativeTokenizer(path)


def special_texts(ref) -> list[str]:
    specials = [t.content for t in ref.get_added_tokens_decoder().values()]
    return [f"{a}x {b}" for a in specials for b in specials] + ["".join(specials)]


@pytest.mark.parametrize("add_special", [True, False])
def test_encode_equals_tokenizers(family, add_special):
    name, _, ref, native = family
    for text in HARD + special_texts(ref) + random_texts(300, seed=len(name)):
        assert native.encode(text, add_special) == ref.encode(text, add_special_tokens=add_special).ids, repr(text)


def test_words_equal_tokenizers_pre_tokenization(family):
    """The normalizers and pre-tokenizers alone (texts without added tokens), where equal ids
    could hide a different split."""
    name, _, ref, native = family
    added = [t.content for t in ref.get_added_tokens_decoder().values()]
    for text in HARD + random_texts(300, seed=3):
        if any(a in text for a in added):
            continue
        normalized = ref.normalizer.normalize_str(text) if ref.normalizer else text
        want = [w for w, _ in ref.pre_tokenizer.pre_tokenize_str(normalized)] if ref.pre_tokenizer else [normalized]
        assert native.pre_tokenize(text) == [w for w in want if w], (name, text)


def test_ill_formed_utf8_reads_as_replacement_characters(family):
    _, _, ref, native = family
    rng = random.Random(11)
    noise = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))) for _ in range(300)]
    for raw in INVALID_UTF8 + noise:
        want = ref.encode(raw.decode("utf-8", errors="replace")).ids
        assert native.encode(raw) == want, raw


@pytest.mark.parametrize("skip", [False, True])
def test_decode_equals_tokenizers(family, skip):
    name, _, ref, native = family
    rng = random.Random(7)
    cases = [ref.encode(t).ids for t in HARD + special_texts(ref)]
    cases += [[rng.randrange(ref.get_vocab_size()) for _ in range(rng.randrange(1, 12))] for _ in range(300)]
    for ids in cases:
        assert native.decode(ids, skip) == ref.decode(ids, skip_special_tokens=skip), (name, ids)


def test_vocab_size_and_ids(family):
    _, _, ref, native = family
    assert native.vocab_size == ref.get_vocab_size()
    for token, i in list(ref.get_vocab().items())[:200]:
        assert native.token_id(token) == i
    assert native.token_id("surely not a token \u2603\u2603") == -1


def test_streaming_holds_split_characters(family):
    """Token by token, the stream never prints a replacement character for a character still
    arriving, and what it prints adds up to decode()."""
    _, _, ref, native = family
    for text in HARD + special_texts(ref):
        ids = ref.encode(text, add_special_tokens=False).ids
        stream = native.stream(skip_special_tokens=True)
        chunks = [stream.push([i]) for i in ids] + [stream.finish()]
        for c in chunks[:-1]:
            assert "\ufffd" not in c.decode("utf-8") or "\ufffd" in native.decode(ids, True), (text, chunks)
        assert b"".join(chunks).decode("utf-8") == native.decode(ids, True), text


def test_streaming_of_emoji_byte_pieces_prints_whole_characters(tmp_path):
    path = write_family("llama3", tmp_path)
    native = spec_edge.NativeTokenizer(path)
    ids = native.encode("👨\u200d👩\u200d👧 東京", add_special_tokens=False)
    stream = native.stream()
    pieces = [stream.push([i]) for i in ids]
    assert b"".join(pieces) + stream.finish() == "👨\u200d👩\u200d👧 東京".encode()
    assert any(p == b"" for p in pieces)  # a character's first byte pieces are held
    assert all(p.decode("utf-8") == p.decode("utf-8", errors="strict") for p in pieces)


def test_bos_and_eos_from_the_checkpoint_configuration(tmp_path):
    path = write_family("llama3", tmp_path)
    ref = tokenizers.Tokenizer.from_file(str(path))
    ids = {t: ref.token_to_id(t) for t in ("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>")}
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": ids["<|begin_of_text|>"], "eos_token_id": [ids["<|end_of_text|>"], ids["<|eot_id|>"]]}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|start_header_id|>"}}))
    native = spec_edge.NativeTokenizer(path)
    assert native.bos_id == ids["<|begin_of_text|>"]
    assert native.eos_ids == [ids["<|end_of_text|>"], ids["<|eot_id|>"], ids["<|start_header_id|>"]]
    assert native.encode("hi")[0] == native.bos_id  # BOS as Llama 3's post-processor adds it
    (tmp_path / "generation_config.json").write_text("{not json")
    with pytest.raises(spec_edge.runtime.ProgramError, match=r"generation_config.json: not readable JSON"):
        spec_edge.NativeTokenizer(path)


def _family_json(tmp_path, name="qwen2") -> dict:
    return json.loads(write_family(name, tmp_path / "source").read_text())


@pytest.mark.parametrize("edit,message", [
    (lambda j: j.update(normalizer={"type": "Lowercase"}), "unsupported tokenizer: normalizer Lowercase"),
    (lambda j: j["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex=r"\w+"),
     r"unsupported tokenizer: Split pattern \{\"Regex\":\"\\\\w\+\"\}"),
    (lambda j: j["pre_tokenizer"]["pretokenizers"].append({"type": "Whitespace"}), "pre-tokenizer Whitespace"),
    (lambda j: j["model"].update(type="WordPiece"), r"model type \"WordPiece\" \(expected BPE\)"),
    (lambda j: j["model"].update(dropout=0.1), "BPE dropout"),
    (lambda j: j["model"].update(continuing_subword_prefix="##"), "continuing_subword_prefix"),
    (lambda j: j.update(decoder={"type": "WordPiece"}), "decoder WordPiece"),
    (lambda j: j.update(post_processor={"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]}),
     "post-processor BertProcessing"),
    (lambda j: j["model"]["merges"].append(["Ġnot", "atoken"]), r"merge \"Ġnot atoken\" names a token that is not in"),
    (lambda j: j["model"].update(merges=["a b c"]), r"merge \"a b c\" is not two tokens"),
    (lambda j: j["model"].update(unk_token="<nope>"), "unk_token '<nope>' is not in the vocabulary"),
    (lambda j: j["model"].pop("vocab"), "malformed tokenizer"),
])
def test_unsupported_or_broken_files_are_refused_by_name(tmp_path, edit, message):
    j = _family_json(tmp_path)
    edit(j)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(j, ensure_ascii=False))
    with pytest.raises(spec_edge.runtime.ProgramError, match=message) as e:
        spec_edge.NativeTokenizer(path)
    assert str(path) in str(e.value)


def test_missing_truncated_and_non_json_files(tmp_path):
    with pytest.raises(spec_edge.runtime.ProgramError, match=r"tokenizer.json: not found"):
        spec_edge.NativeTokenizer(tmp_path / "tokenizer.json")
    full = write_family("qwen2", tmp_path / "src").read_bytes()
    for name, data in [("truncated", full[: len(full) // 2]), ("binary", b"\x00\x01\x02"), ("list", b"[1, 2]")]:
        path = tmp_path / name / "tokenizer.json"
        path.parent.mkdir()
        path.write_bytes(data)
        with pytest.raises(spec_edge.runtime.ProgramError, match=rf"{name}/tokenizer.json: (not a readable|malformed)"):
            spec_edge.NativeTokenizer(path)


def test_decode_refuses_ids_outside_the_vocabulary(family):
    _, _, ref, native = family
    for bad in (-1, native.vocab_size, 2**40):
        with pytest.raises(ValueError, match=rf"decode: id {bad} is not in the vocabulary \[0, {native.vocab_size}\)"):
            native.decode([0, bad])
    with pytest.raises(TypeError, match="text: expected str or bytes"):
        native.encode(["a"])
