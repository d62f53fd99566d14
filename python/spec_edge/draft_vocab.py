"""A draft that proposes only the most frequent tokens (as FR-Spec does), for a cheaper draft step.

A real draft's step is dominated by its output layer when the vocabulary is large (Qwen2.5's
151,936 rows against a 0.5B model's 896-wide hidden state). ``restrict_draft_vocab`` replaces the
layer by one over a subset of the vocabulary, ranked by frequency on a corpus, whose logits are
scattered into a full row of ``-inf``: the draft never proposes a token outside the subset, and
verification sees ``q = 0`` there, so the speculative output is still distributed exactly as the
target's (the residual ``max(0, p - q)`` gives those tokens their full target mass). The runners
and the verify step see a full ``[V]`` row as before.

Example:
    >>> from spec_edge.draft_vocab import frequent_token_ids
    >>> ids = frequent_token_ids("tokenizer.json", ["corpus.txt"], 8192)  # doctest: +SKIP
"""

from __future__ import annotations

import sysconfig
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch


def stdlib_corpus() -> list[Path]:
    """The Python standard library's sources: a code corpus every machine with Python has."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.glob("*.py"))


def frequent_token_ids(tokenizer: str | Path, corpus: Iterable[str | Path], n: int) -> list[int]:
    """The ``n`` ids most frequent when ``tokenizer`` (a ``tokenizer.json``) encodes the text
    files of ``corpus`` (ties to the lower id), plus every added (special) token, so that the
    draft can still propose an end token; ascending. Where the corpus holds fewer than ``n``
    distinct tokens, the lowest ids it lacks make up the rest: a BPE vocabulary is numbered in
    merge order, most frequent in the tokenizer's training text first."""
    from tokenizers import Tokenizer
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"draft_vocab: expected a positive number of tokens, got {n!r}")
    tok = Tokenizer.from_file(str(tokenizer))
    counts: Counter[int] = Counter()
    files = [Path(p) for p in corpus]
    if not files:
        raise ValueError("draft_vocab_corpus: expected at least one text file")
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            raise ValueError(f"draft_vocab_corpus: cannot read {path}: {error.strerror}") from error
        counts.update(tok.encode(text, add_special_tokens=False).ids)
    vocab = tok.get_vocab_size()
    ranked = sorted(counts, key=lambda i: (-counts[i], i))[:n]
    seen = set(ranked)
    ranked += [i for i in range(vocab) if i not in seen][:n - len(ranked)]
    special = list(tok.get_added_tokens_decoder())
    return sorted({i for i in [*ranked, *special] if i < vocab})


class VocabSubsetHead(torch.nn.Module):
    """An output layer over the rows ``ids`` of ``output`` (an ``nn.Linear``), written into a full
    row of ``vocab`` logits with ``-inf`` elsewhere."""

    def __init__(self, output: torch.nn.Linear, ids: Sequence[int], vocab: int):
        super().__init__()
        index = torch.tensor(list(ids), dtype=torch.long)
        self.head = torch.nn.Linear(output.in_features, len(index), bias=output.bias is not None)
        with torch.no_grad():
            self.head.weight.copy_(output.weight[index])
            if output.bias is not None:
                self.head.bias.copy_(output.bias[index])
        self.register_buffer("ids", index)
        self.vocab = vocab

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        y = self.head(h)
        full = torch.full((*y.shape[:-1], self.vocab), float("-inf"), dtype=y.dtype)
        return full.scatter(-1, self.ids.expand(*y.shape[:-1], len(self.ids)), y)


def check_draft_vocab(ids: Sequence[int], vocab: int) -> list[int]:
    """``ids`` as a sorted list of distinct ids in ``[0, vocab)``, or a ValueError naming them."""
    out = sorted(set(int(i) for i in ids))
    if not out or len(out) != len(list(ids)) or out[0] < 0 or out[-1] >= vocab:
        raise ValueError(f"draft_vocab: expected distinct token ids in [0, {vocab}), {len(list(ids))} given")
    return out


def restrict_draft_vocab(model: torch.nn.Module, ids: Sequence[int], vocab: int) -> torch.nn.Module:
    """``model`` (ExecuTorch's Llama transformer) with its output layer over ``ids`` only, in place."""
    model.output = VocabSubsetHead(model.output, ids, vocab)
    return model
