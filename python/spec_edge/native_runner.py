"""``NativeRunner``: the C++ runner of ``runtime_demo/`` driven from Python.

The same API, checks and tokens as :class:`spec_edge.runtime.PteSpeculativeDecoder`; the loop
runs in C++ (without the GIL), so each round costs what it costs on the device::

    runner = spec_edge.NativeRunner("out/")
    ids = runner.generate(prompt_ids, max_new=64, temperature=0.8, filters=Filters(top_p=0.95), seed=1)
    runner.stats.tokens_per_second, runner.stats.accepted_histogram
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from . import executorch as se_executorch
from ._native import native_library
from .drafters import Drafting
from .ops import Filters
from .stats import GenerationStats
from .runtime import eos_ids, integer, one_call_at_a_time, sampling_settings, token_ids

_extension = None


def _load_extension():
    global _extension
    if _extension is None:
        # ExecuTorch's runtime and spec_edge's kernels from their canonical paths first: the
        # extension links the same files, so the process keeps one registry.
        se_executorch.load()
        name = "_runner_ext" + importlib.machinery.EXTENSION_SUFFIXES[0]
        path = native_library(name, "the runner's Python extension (built with the runner, when pybind11 is installed)")
        spec = importlib.util.spec_from_file_location("spec_edge._runner_ext", path)
        _extension = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_extension)
    return _extension


class NativeRunner:
    """Speculative decoding over ``draft.pte`` + ``target.pte`` in ``model_dir`` by the C++ runner.

    ``k`` proposals per round: any K up to the one the programs were exported for (the default);
    with ``adaptive_k``, the most per round. ``drafter`` and ``drafting``: as
    :class:`spec_edge.runtime.PteSpeculativeDecoder`'s (the same decisions, so the same tokens).
    Raises :class:`spec_edge.runtime.ProgramError` for a directory, manifest or program
    it cannot run and ``ValueError`` for arguments out of range, as the Python loop does.
    """

    def __init__(self, model_dir: str | Path, k: int | None = None, drafter: str = "model", **drafting):
        self.drafting = Drafting(drafter, **drafting)
        self.drafting.check()
        self._runner = _load_extension().Runner(str(model_dir), None if k is None else integer(k, "k", -2**31, 2**31 - 1),
                                                **asdict(self.drafting))
        self.dir = Path(model_dir)
        self.k, self.max_k = self._runner.k, self._runner.max_k
        self.vocab_size, self.max_context_len = self._runner.vocab_size, self._runner.max_context_len
        self.stats = GenerationStats()

    @one_call_at_a_time
    def generate(self, prompt_ids, max_new: int, temperature: float = 0.0, filters: Filters = Filters(),
                 seed: int = 0, speculative: bool = True, eos_token_id: int | Sequence[int] | None = None,
                 on_tokens: Callable[[list[int]], None] | None = None) -> list[int]:
        """Up to ``max_new`` new token ids after ``prompt_ids`` (fewer at ``eos_token_id``: one id
        or several; the end token is kept).

        ``on_tokens`` receives each round's tokens as soon as they are decided (streaming). One
        call at a time per instance: a second one, from another thread or from ``on_tokens``,
        raises RuntimeError (``stop`` is allowed from both); separate instances run in parallel.
        """
        tokens = self._runner.generate(token_ids(prompt_ids, "prompt_ids"), integer(max_new, "max_new"),
                                       self._sampling(temperature, filters, seed), bool(speculative),
                                       eos_ids(eos_token_id), on_tokens)
        self.stats = GenerationStats(**self._runner.stats())
        return tokens

    @one_call_at_a_time
    def measure_step_costs(self, prompt_ids=(), temperature: float = 0.0, filters: Filters = Filters(),
                           repeats: int = 9) -> dict:
        """What each step costs on this device, for adaptive K: the median of ``repeats`` runs of a
        target decode step, a draft step and the verify step for each K in 1..k, at the end of
        ``prompt_ids`` (empty: 128 tokens) with these sampling settings. Returns ``context``,
        ``decode_step_seconds`` and, in decode steps, ``draft_step_cost`` and ``verify_costs``:
        the settings to load the runner with (``NativeRunner(dir, adaptive_k=True,
        draft_step_cost=..., verify_costs=...)``)."""
        return self._runner.measure_step_costs(token_ids(prompt_ids, "prompt_ids"), self._sampling(temperature, filters, 0),
                                               integer(repeats, "repeats"))

    def _sampling(self, temperature: float, filters: Filters, seed: int):
        """The runner's Sampling, the arguments checked as the Python loop checks them."""
        T, top_k, top_p, min_p, penalty = sampling_settings(self.vocab_size, temperature, filters)
        return _load_extension().Sampling(temperature=T, top_k=top_k, top_p=top_p, min_p=min_p,
                                          repetition_penalty=penalty, seed=integer(seed, "seed"))

    def stop(self) -> None:
        """Ends the ``generate`` in flight after its current round, from another thread or from ``on_tokens``."""
        self._runner.stop()

    @staticmethod
    def show_executorch_info(show: bool = True) -> None:
        """ExecuTorch's info messages (its CPU probing when XNNPACK starts, program loading) on
        stderr from now on, in this process; hidden by default, as the command-line runner hides
        them without ``--verbose``. Its errors are always shown."""
        _load_extension().show_executorch_info(bool(show))


class NativeTokenizer:
    """The C++ runner's tokenizer over a Hugging Face ``tokenizer.json``: what ``spec-edge-run``,
    ``NativeRunner`` text and the Android API encode and decode with, on the device without Python.

    Encode and decode equal the ``tokenizers`` library's for the constructs of the Llama 3.x,
    Qwen2.x, SmolLM2, GPT-2-style and SentencePiece-style (Llama 2) families; a file using anything
    else is refused at load with a message naming it. BOS and EOS come from the
    ``tokenizer_config.json`` / ``generation_config.json`` beside the file, when present.

    Example::

        tok = spec_edge.NativeTokenizer("out/tokenizer.json")
        ids = tok.encode("def parse(path):")            # as Tokenizer.from_file(...).encode(...).ids
        tok.decode(ids, skip_special_tokens=True), tok.eos_ids
    """

    def __init__(self, path: str | Path):
        self._tokenizer = _load_extension().Tokenizer(str(path))
        self.path = Path(path)

    def encode(self, text: str | bytes, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text`` (bytes: ill-formed UTF-8 reads as U+FFFD, as ``errors="replace"``)."""
        if not isinstance(text, (str, bytes)):
            raise TypeError(f"text: expected str or bytes, got {type(text).__name__}")
        return self._tokenizer.encode(text, bool(add_special_tokens))

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """The text of ``ids``; an id outside ``[0, vocab_size)`` is a ``ValueError``."""
        return self._tokenizer.decode(token_ids(ids, "ids"), bool(skip_special_tokens))

    def pre_tokenize(self, text: str | bytes) -> list[str]:
        """The words the model encodes, after added tokens, normalizers and pre-tokenizers (an
        added token as its text): ``tokenizers``' ``pre_tokenize_str``, for tests and debugging."""
        return self._tokenizer.pre_tokenize(text)

    def stream(self, skip_special_tokens: bool = True):
        """The runner's streaming decoder: ``push(ids) -> bytes`` of the characters completed so
        far, ``finish() -> bytes`` of the rest (the concatenation is ``decode``'s UTF-8)."""
        return _load_extension().TextStream(self._tokenizer, bool(skip_special_tokens))

    def token_id(self, token: str) -> int:
        """The id of ``token``, or -1."""
        return self._tokenizer.token_id(token)

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.vocab_size

    @property
    def bos_id(self) -> int:
        """-1 when the checkpoint names none."""
        return self._tokenizer.bos_id

    @property
    def eos_ids(self) -> list[int]:
        """Every id that ends generation (Llama 3 has three)."""
        return list(self._tokenizer.eos_ids)
