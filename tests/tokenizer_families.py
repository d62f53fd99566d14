"""tokenizer.json files with the structure of each family people deploy, made with `tokenizers`
(trained on a small corpus written here): Llama 3, Qwen2, SmolLM2, GPT-2/RoBERTa-style byte-level
BPE, SentencePiece-style BPE (Llama 2: legacy Prepend/Replace, and Metaspace), and the added
tokens' flags. Plus a corpus of text that breaks tokenizers."""

import json
import random
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")

HARD = [
    "", " ", "  ", "\n", "\r\n", "\t", "a\r\n\r\n  b", "  \n  x", "hello   world\n\n\n  ", " leading", "trailing  ",
    "Ünïcödé façade naïve résumé", "Ελληνικά κείμενα", "Русский текст, ёлка", "עברית שלום", "العربية مرحبا",
    "हिन्दी देवनागरी", "日本語の文章と東京", "中文测试，标点。", "한국어 텍스트", "e\u0301 vs é and A\u030a Å",
    "👍🏽 👨\u200d👩\u200d👧\u200d👦 🏳️\u200d🌈 family 😀🎉", "zero\u200bwidth\u200djoiner\ufeffbom",
    "tabs\tand\u00a0nbsp\u3000ideographic", "1 12 123 1234 12345 1234567890 ²³ ½ ٣٤٥ Ⅻ",
    "I'm you're he'll she'd it's THEY'LL WE'VE I'M 'S 'Ll", "x'ſx 'ſ", "ａｂｃ full width ﬁ ligature",
    "Kelvin \u212a ß ẞ", "caf\u00e9 vs cafe\u0301", "\u1100\u1161\u11a8 jamo and 각", "a\u0308\u0301\u0323 marks",
    "a\u0316\u0301 \u1e0b\u0323 q\u0307\u0323 blocked and unblocked marks",
    "def f(x):\n\treturn x**2  # comment\r\n", "    indented\n        more\n", "$$$ !!! ... ---", "a\u2028b\u2029c\x85d",
    "<|endoftext|>inside<|im_start|>text<|im_end|>", "<s>Hello</s> world <unk> <0x41>", "<|begin_of_text|>hi<|eot_id|>",
    "x<mask>y <mask> z", "the [word] and x[word]y", "Hello hello HELLO",
]
INVALID_UTF8 = [b"\xff\xfe abc", b"a\xc3", b"\xe2\x28\xa1", b"\xf0\x9f\x98", b"ok \xed\xa0\x80 surrogate", b"\xc0\xaf",
                b"\xf4\x90\x80\x80", b"tail \xe6\x97"]


def training_corpus() -> list[str]:
    """Code and prose in several scripts, a few hundred lines."""
    code = Path(json.__file__).read_text().splitlines()
    prose = ["The quick brown fox jumps over the lazy dog. It's what they'll do.",
             "Les élèves étudient à l'école; naïve façade.", "Der Bär läuft über die Straße.",
             "Быстрая коричневая лиса прыгает.", "Η γρήγορη καφέ αλεπού.", "東京は日本の首都です。", "我们在学习中文。",
             "서울은 한국의 수도입니다.", "नमस्ते दुनिया", "مرحبا بالعالم", "שלום עולם", "Numbers 12345 and 2024-12-04."]
    return code + prose * 20


def _train(tok: Tokenizer, vocab_size: int, specials: list[str], alphabet: list[str] | None = None,
           limit_alphabet: int | None = None) -> Tokenizer:
    kwargs = dict(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    if alphabet is not None:
        kwargs["initial_alphabet"] = alphabet
    if limit_alphabet is not None:
        kwargs["limit_alphabet"] = limit_alphabet
    tok.train_from_iterator(training_corpus(), trainers.BpeTrainer(**kwargs))
    return tok


def llama3(vocab_size: int = 700) -> Tokenizer:
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    _train(tok, vocab_size, [], pre_tokenizers.ByteLevel.alphabet())
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def qwen2(vocab_size: int = 700) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    _train(tok, vocab_size, [], pre_tokenizers.ByteLevel.alphabet())
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])
    return tok


def smollm2(vocab_size: int = 600) -> Tokenizer:
    """Its specials are in the model's vocabulary; its byte alphabet is incomplete (unseen bytes dropped)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return _train(tok, vocab_size, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])


def roberta_style(vocab_size: int = 500) -> Tokenizer:
    """Byte-level BPE with add_prefix_space, and added tokens with every flag."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    _train(tok, vocab_size, [], pre_tokenizers.ByteLevel.alphabet())
    tok.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, rstrip=True, normalized=False),
                            AddedToken("<s>", special=True, normalized=False)])
    tok.add_tokens([AddedToken("[word]", single_word=True, normalized=False),
                    AddedToken("Hello", normalized=True), AddedToken("é!", normalized=False)])
    s = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A <s>", special_tokens=[("<s>", s)])
    return tok


def _with_byte_tokens(tok: Tokenizer, legacy: bool) -> Tokenizer:
    """Llama 2's layout: <unk> <s> </s>, then <0x00>..<0xFF>, then the learned tokens. Legacy
    files (hf-internal-testing/llama-tokenizer) also write merges as strings and mark the
    special tokens normalized: they are then matched after the normalizers (as "▁<s>")."""
    j = json.loads(tok.to_str())
    if legacy:
        for added in j["added_tokens"]:
            added["normalized"] = True
    vocab = j["model"]["vocab"]
    learned = sorted((i, t) for t, i in vocab.items() if i >= 3)
    vocab = {t: i for t, i in vocab.items() if i < 3}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    vocab.update({t: 259 + n for n, (_, t) in enumerate(learned)})
    j["model"]["vocab"] = vocab
    if legacy:
        j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    return Tokenizer.from_str(json.dumps(j))


def sentencepiece_bpe(style: str, vocab_size: int = 500) -> Tokenizer:
    """style: "legacy" (Llama 2: Prepend + Replace normalizers), "metaspace" (Metaspace first, no
    split), "metaspace_split" (Metaspace always, split; the Metaspace decoder)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if style == "legacy":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="▁", prepend_scheme="first" if style == "metaspace" else "always", split=style != "metaspace")
    _train(tok, vocab_size, ["<unk>", "<s>", "</s>"], limit_alphabet=70)
    tok = _with_byte_tokens(tok, legacy=style == "legacy")
    if style == "metaspace_split":
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(prepend_scheme="always")])
    else:
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                       special_tokens=[("<s>", 1)])
    return tok


FAMILIES = {
    "llama3": llama3, "qwen2": qwen2, "smollm2": smollm2, "roberta_style": roberta_style,
    "llama2_legacy": lambda **kw: sentencepiece_bpe("legacy", **kw),
    "sentencepiece_metaspace": lambda **kw: sentencepiece_bpe("metaspace", **kw),
    "sentencepiece_metaspace_split": lambda **kw: sentencepiece_bpe("metaspace_split", **kw),
}


def write_family(name: str, directory: Path, **options) -> Path:
    """directory/tokenizer.json of the family (options: vocab_size); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    FAMILIES[name](**options).save(str(path))
    return path


def random_texts(n: int, seed: int) -> list[str]:
    """Shuffled pieces of the hard corpus and random code points, for the fuzz comparison."""
    rng = random.Random(seed)
    pool = "".join(HARD) + "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(500))
    out = []
    for _ in range(n):
        k = rng.randrange(0, 40)
        out.append("".join(rng.choice([rng.choice(HARD), pool[rng.randrange(len(pool)):][:rng.randrange(1, 8)]])
                           for _ in range(rng.randrange(1, 5)))[:200] if k else "")
    return out
