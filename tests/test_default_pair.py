"""The shipped default pair keeps its promises: sizes, one tokenizer, held-out acceptance."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from spec_edge.demo import DEFAULT_PAIR, accepted_length_law, per_token_acceptance  # noqa: E402
from spec_edge.hf import check_same_tokenizer, read_config, read_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def train_default():
    spec = importlib.util.spec_from_file_location("train_default", ROOT / "export" / "train_default.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def params(directory: Path) -> int:
    from safetensors import safe_open
    with safe_open(directory / "model.safetensors", "pt") as f:
        return sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())


def test_sizes_and_one_tokenizer():
    check_same_tokenizer(DEFAULT_PAIR / "target", DEFAULT_PAIR / "draft")
    target, draft = read_config(DEFAULT_PAIR / "target"), read_config(DEFAULT_PAIR / "draft")
    assert target.vocab_size == draft.vocab_size == read_tokenizer(DEFAULT_PAIR / "target").get_vocab_size()
    n_target, n_draft = params(DEFAULT_PAIR / "target"), params(DEFAULT_PAIR / "draft")
    assert 4 * n_target > 32 * 2**20  # fp32 weights read per token exceed the 32 MiB last-level cache
    assert n_target >= 8 * n_draft
    shipped = sum(p.stat().st_size for p in DEFAULT_PAIR.rglob("*") if p.is_file())
    assert shipped <= 30e6


@pytest.fixture(scope="module")
def models():
    load = transformers.AutoModelForCausalLM.from_pretrained
    return (load(DEFAULT_PAIR / "target", dtype=torch.float32).eval(),
            load(DEFAULT_PAIR / "draft", dtype=torch.float32).eval(),
            read_tokenizer(DEFAULT_PAIR / "target"))


def test_held_out_greedy_acceptance_is_at_least_0_6(models):
    target, draft, tok = models
    prompts = json.loads((DEFAULT_PAIR / "prompts.json").read_text())[:4]
    measure = train_default().greedy_acceptance
    assert measure(target, draft, tok, prompts, new_tokens=32) >= 0.6
    # Control: an untrained draft of the same shape must fail the same bar.
    untrained = transformers.AutoModelForCausalLM.from_config(draft.config).eval()
    assert measure(target, untrained, tok, prompts, new_tokens=32) < 0.6


def test_accepted_length_law():
    law = accepted_length_law(0.8, 4)
    assert law.sum() == pytest.approx(1.0) and law[4] == pytest.approx(0.8 ** 4)
    assert law[0] == pytest.approx(0.2) and law[2] == pytest.approx(0.8 ** 2 * 0.2)
    # 2 rounds accepting all 4 and 1 round rejecting the first: 8 accepted, 1 rejection.
    assert per_token_acceptance([1, 0, 0, 0, 2]) == pytest.approx(8 / 9)
    assert per_token_acceptance([0, 0, 0]) == 0.0
