"""The on-device tokenizer (runtime_demo/runner/tokenizer) against Hugging Face `tokenizers`: every
family's structure, a corpus that breaks tokenizers, ill-formed UTF-8, random texts and ids,
streaming, special tokens from the checkpoint's configuration, and bad files."""

import json
import random

import pytest

import spec_edge
from spec_edge.manifest import ProgramError
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


@pytest.mark.parametrize("file,config,match", [
    ("generation_config.json", {"bos_token_id": 2**31 - 1}, r"generation_config.json: bos_token_id = 2147483647: "
     r"expected a token id in \[0, 705\)"),
    ("generation_config.json", {"eos_token_id": [701, 5.5]}, r"eos_token_id\[1\] = 5.5: expected a token id"),
    ("generation_config.json", {"eos_token_id": "701"}, r"eos_token_id = \"701\": expected a token id"),
    ("generation_config.json", [1], r"generation_config.json: expected a JSON object"),
    ("tokenizer_config.json", {"eos_token": "<|nowhere|>"}, r"tokenizer_config.json: eos_token = \"<\|nowhere\|>\": "
     r"expected a token of .*tokenizer.json"),
    ("tokenizer_config.json", {"bos_token": {"content": 7}}, r"bos_token = \{\"content\":7\}: expected a token"),
])
def test_ids_in_the_configuration_are_tokens_of_the_vocabulary(tmp_path, file, config, match):
    """An id or a token the vocabulary lacks is an error naming the file and field, never dropped
    (an EOS dropped in silence lets generation run past the end of a turn)."""
    path = write_family("llama3", tmp_path)
    (tmp_path / file).write_text(json.dumps(config))
    with pytest.raises(ProgramError, match=match):
        spec_edge.NativeTokenizer(path)
    (tmp_path / file).write_text(json.dumps({"bos_token": None, "eos_token_id": None}))  # null: none given
    assert spec_edge.NativeTokenizer(path).bos_id == -1


def test_a_tokenizer_whose_steps_can_blow_a_text_up_is_refused(tmp_path):
    """Steps chained into an exponential growth are refused at load, not run out of memory on the
    first prompt; the families' steps (a Replace of a space by U+2581: 3-fold) load; eleven ByteLevel steps
    are 2^11-fold."""
    spec = _family_json(tmp_path, "llama3")
    spec["pre_tokenizer"]["pretokenizers"] += [{"type": "ByteLevel", "add_prefix_space": False}] * 10
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ProgramError, match=r"tokenizer.json: unsupported tokenizer: steps that "
                       r"can make a text 2048 times longer \(normalizers and pre-tokenizers, or decoders; at most 64"):
        spec_edge.NativeTokenizer(tmp_path / "tokenizer.json")
    spec = _family_json(tmp_path, "llama2_legacy")
    spec["decoder"]["decoders"].append({"type": "Replace", "pattern": {"String": "a"}, "content": "b" * 100})
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ProgramError, match=r"can make a text 100 times longer"):
        spec_edge.NativeTokenizer(tmp_path / "tokenizer.json")


def test_a_post_processor_template_reads_one_sequence(tmp_path):
    spec = _family_json(tmp_path, "llama3")
    single = spec["post_processor"]["processors"][-1]["single"] if spec["post_processor"]["type"] == "Sequence" \
        else spec["post_processor"]["single"]
    single.append({"Sequence": {"id": "A", "type_id": 0}})
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ProgramError, match=r"unsupported tokenizer: TemplateProcessing single "
                       r"template .* \(one \$A is read\)"):
        spec_edge.NativeTokenizer(tmp_path / "tokenizer.json")


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
    with pytest.raises(ProgramError, match=message) as e:
        spec_edge.NativeTokenizer(path)
    assert str(path) in str(e.value)


def test_missing_truncated_and_non_json_files(tmp_path):
    with pytest.raises(ProgramError, match=r"tokenizer.json: not found"):
        spec_edge.NativeTokenizer(tmp_path / "tokenizer.json")
    full = write_family("qwen2", tmp_path / "src").read_bytes()
    for name, data in [("truncated", full[: len(full) // 2]), ("binary", b"\x00\x01\x02"), ("list", b"[1, 2]")]:
        path = tmp_path / name / "tokenizer.json"
        path.parent.mkdir()
        path.write_bytes(data)
        with pytest.raises(ProgramError, match=rf"{name}/tokenizer.json: (not a readable|malformed)"):
            spec_edge.NativeTokenizer(path)


def test_decode_refuses_ids_outside_the_vocabulary(family):
    _, _, ref, native = family
    for bad in (-1, native.vocab_size, 2**40):
        with pytest.raises(ValueError, match=rf"decode: id {bad} is not in the vocabulary \[0, {native.vocab_size}\)"):
            native.decode([0, bad])
    with pytest.raises(TypeError, match="text: expected str or bytes"):
        native.encode(["a"])


# ---- hostile files: bounded nesting, ids checked, every error naming the file -------------------

DEEP = 100_000


def _deep_text(j: dict, key_path: list, nested: str) -> str:
    """`j` as JSON text with the value at `key_path` replaced by the raw text `nested`."""
    node = j
    for key in key_path[:-1]:
        node = node[key]
    node[key_path[-1]] = "@@deep@@"
    return json.dumps(j, ensure_ascii=False).replace('"@@deep@@"', nested, 1)


@pytest.mark.parametrize("where,key_path,nested", [
    ("normalizer Sequence", ["normalizer"],
     '{"type": "Sequence", "normalizers": [' * DEEP + '{"type": "NFC"}' + "]}" * DEEP),
    ("model type", ["model", "type"], "[" * DEEP + "]" * DEEP),
    ("Split pattern", ["pre_tokenizer", "pretokenizers", 0, "pattern"], '{"Regex": ' + "[" * DEEP + "]" * DEEP + "}"),
    ("30,000 levels", ["decoder"], "[" * 30_000 + "]" * 30_000),
])
def test_deeply_nested_files_are_refused_by_name(tmp_path, where, key_path, nested):
    path = tmp_path / "tokenizer.json"
    path.write_text(_deep_text(_family_json(tmp_path), key_path, nested))
    with pytest.raises(ProgramError, match=r"JSON nested more than 64 levels deep") as e:
        spec_edge.NativeTokenizer(path)
    assert str(path) in str(e.value)


def test_deeply_nested_configuration_files_are_refused_by_name(tmp_path):
    path = write_family("qwen2", tmp_path)
    for name in ("tokenizer_config.json", "generation_config.json"):
        (tmp_path / name).write_text('{"eos_token": ' + "[" * DEEP + "]" * DEEP + "}")
        with pytest.raises(ProgramError, match=rf"{name}: JSON nested more than 64 levels"):
            spec_edge.NativeTokenizer(path)
        (tmp_path / name).unlink()
    # Nesting within the bound, and brackets inside strings, load.
    (tmp_path / "tokenizer_config.json").write_text('{"x": ' + "[" * 60 + "]" * 60 + ', "y": "[[[[{{{{"}')
    spec_edge.NativeTokenizer(path)


@pytest.mark.parametrize("edit,message", [
    (lambda j: j["model"]["vocab"].update(zzz=2**31 - 1), r"malformed tokenizer: id 2147483647 in a file of \d+ tokens"),
    (lambda j: j["model"]["vocab"].update(zzz=len(j["model"]["vocab"]) + 5000),
     r"malformed tokenizer: id \d+ in a file of \d+ tokens"),
    (lambda j: j["model"]["vocab"].update(zzz=5.5), "vocab id 5.5 of 'zzz' is not an integer"),
    (lambda j: j["model"]["vocab"].update(zzz="5"), "vocab id \"5\" of 'zzz' is not an integer"),
    (lambda j: j["post_processor"]["processors"][1]["special_tokens"]["<|begin_of_text|>"].update(ids=[99999999]),
     r"post-processor id 99999999 \(the vocabulary has \d+ ids\)"),
    (lambda j: j["post_processor"]["processors"][1].update(
        single=j["post_processor"]["processors"][1]["single"] + [{"SpecialToken": {"id": "END", "type_id": 0}}],
        special_tokens={**j["post_processor"]["processors"][1]["special_tokens"],
                        "END": {"id": "END", "ids": [99999999], "tokens": ["END"]}}),
     r"post-processor id 99999999 \(the vocabulary has \d+ ids\)"),
    (lambda j: j["post_processor"]["processors"][1]["special_tokens"]["<|begin_of_text|>"].update(ids=[1.5]),
     "post-processor id 1.5 of '<|begin_of_text|>' is not an integer"),
])
def test_ids_in_the_file_are_checked(tmp_path, edit, message):
    j = _family_json(tmp_path, "llama3")
    edit(j)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(j, ensure_ascii=False))
    with pytest.raises(ProgramError, match=message) as e:
        spec_edge.NativeTokenizer(path)
    assert str(path) in str(e.value)


def test_a_byte_that_is_not_utf8_is_an_error_naming_the_file(tmp_path):
    text = write_family("qwen2", tmp_path / "src").read_bytes()
    path = tmp_path / "tokenizer.json"
    path.write_bytes(text.replace(b'"vocab": {', b'"vocab": {"\xff": 0, ', 1))
    with pytest.raises(ProgramError, match=r"tokenizer.json: not a readable tokenizer") as e:
        spec_edge.NativeTokenizer(path)
    assert str(path) in str(e.value) and "\ufffd" in str(e.value)  # the byte shown as U+FFFD


def test_decode_takes_integer_ids_only_and_a_stream_survives_a_refused_push(tmp_path):
    native = spec_edge.NativeTokenizer(write_family("qwen2", tmp_path))
    for bad, error, message in [([3.7], TypeError, r"ids\[0\]: expected an integer, got 3.7"),
                                (["5"], TypeError, r"ids\[0\]: expected an integer, got '5'"),
                                ([True], TypeError, r"ids\[0\]: expected an integer, got True"),
                                ("12", TypeError, "ids: expected a sequence of integer token ids, got str"),
                                ([2**64], ValueError, r"ids\[0\]: expected an integer in")]:
        with pytest.raises(error, match=message):
            native.decode(bad)
    ids = native.encode("hello world")
    stream = native.stream()
    with pytest.raises(ValueError, match="is not in the vocabulary"):
        stream.push([99999999])
    assert stream.push(ids) + stream.finish() == native.decode(ids, skip_special_tokens=True).encode()


def test_many_added_tokens_sharing_a_prefix_encode_as_tokenizers(tmp_path):
    """20,000 added tokens that all start with "a" (a list scan per position once made 100 KB of
    "a" take seconds): the longest match at each position, as tokenizers' trie finds it."""
    path = write_family("qwen2", tmp_path / "src")
    j = json.loads(path.read_text())
    first = len(j["model"]["vocab"]) + len(j["added_tokens"])
    words = ["a" + format(n, "b").replace("0", "a").replace("1", "b") for n in range(20_000)]
    j["added_tokens"] += [{"id": first + n, "content": w, "single_word": False, "lstrip": False, "rstrip": False,
                           "normalized": False, "special": False} for n, w in enumerate(words)]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(j, ensure_ascii=False))
    reference, native = tokenizers.Tokenizer.from_file(str(path)), spec_edge.NativeTokenizer(path)
    rng = random.Random(7)
    for text in ["a" * 100_000, "ab" * 3000 + " x", " ".join(rng.choice(words) for _ in range(2000)),
                 "".join(rng.choice("ab x") for _ in range(20_000))]:
        assert native.encode(text) == reference.encode(text).ids, text[:40]
