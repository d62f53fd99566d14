"""The kernel cards' call forms: filter settings as keywords (and positionally, in the cards'
order), equal bit for bit to the `Filters` form, through `kernels`, `torch.compile` and exported
programs; each setting at its edges as transformers' processors behave."""

import inspect
import re
from pathlib import Path

import pytest
import torch
from transformers.generation.logits_process import (MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                                                    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

import spec_edge
from spec_edge.kernels_hub import write_kernels_variant

OPS_MD = Path(__file__).resolve().parents[1] / "docs" / "OPS.md"
V = 1000
g = torch.Generator().manual_seed(5)
X = torch.randn(4, V, generator=g) * 3
IDS = torch.randint(0, V, (4, 16), generator=g)
FULL = dict(top_k=50, top_p=0.95, min_p=0.05, repetition_penalty=1.1, prev_tokens=IDS)


def card_blocks() -> tuple[str, str]:
    """docs/OPS.md's call-form inputs and the card's lines, as published."""
    section = OPS_MD.read_text().split("## Python call forms", 1)[1]
    inputs, card = re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    return inputs, card


@pytest.mark.parametrize("module", ["kernels", "spec_edge"])
def test_card_lines_run_as_written_and_equal_the_filters_form(module):
    inputs, card = card_blocks()
    assert card.startswith("sdo = kernels.get_local_kernel(path)          # or the module itself: import spec_edge as sdo")
    if module == "spec_edge":  # the alternative the card's own comment gives
        card = "import spec_edge as sdo\n" + card.split("\n", 1)[1]
    ns: dict = {}
    exec(compile(inputs, "OPS.md", "exec"), ns)
    exec(compile(card, "OPS.md", "exec"), ns)
    assert ns["sdo"].__name__.startswith("spec_edge")
    F, logits, step, ids = spec_edge.Filters, ns["logits"], ns["step"], ns["ids"]
    want_tok = spec_edge.sample(logits, 0.8, seed=1234, offset=step, filters=F(top_k=50, top_p=0.95))
    want = spec_edge.verify(ns["target_logits"], ns["draft_logits"], ns["draft_tokens"], 0.8, 1234, step)
    want_masked = spec_edge.filter_logits(logits, 0.8, filters=F(50, 0.95, 0.05, 1.1, ids))
    assert torch.equal(ns["tok"], want_tok) and ns["tok"].dtype == torch.int64
    assert torch.equal(ns["accept_len"], want.accept_len) and torch.equal(ns["out"], want.tokens)
    assert torch.equal(ns["masked"], want_masked)
    assert torch.isinf(ns["masked"]).any()  # the filters did act


def test_positional_order_is_the_cards():
    names = list(inspect.signature(spec_edge.sample).parameters)
    assert names == ["logits", "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "prev_tokens",
                     "seed", "offset", "filters"]
    defaults = {n: p.default for n, p in inspect.signature(spec_edge.sample).parameters.items()}
    assert [defaults[n] for n in names[2:9]] == [0, 1.0, 0.0, 1.0, None, 0, 0]
    assert [repr(defaults[n]) for n in names[2:9]] == ["0", "1.0", "0.0", "1.0", "None", "0", "0"]  # as documented
    assert list(inspect.signature(spec_edge.filter_logits).parameters) == names[:7] + ["filters"]
    filters = spec_edge.Filters(**FULL)
    for T in (0.0, 0.8):
        assert torch.equal(spec_edge.sample(X, T, 50, 0.95, 0.05, 1.1, IDS, 9, 3),
                           spec_edge.sample(X, T, seed=9, offset=3, filters=filters))
        assert torch.equal(spec_edge.filter_logits(X, T, 50, 0.95, 0.05, 1.1, IDS),
                           spec_edge.filter_logits(X, T, filters=filters))
        t = X[:, None].expand(4, 3, V)
        d = t[:, :2] + 0.3
        assert torch.equal(spec_edge.verify(t, d, d.argmax(-1), T, 4, 1, **FULL).tokens,
                           spec_edge.verify(t, d, d.argmax(-1), T, 4, 1, filters=filters).tokens)


@pytest.mark.parametrize("name", ["top_k", "top_p", "min_p", "repetition_penalty", "prev_tokens"])
def test_a_setting_given_twice_is_an_error_naming_both(name):
    value = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0, "prev_tokens": IDS}[name]
    for call in (lambda: spec_edge.sample(X, 0.8, filters=spec_edge.Filters(top_k=5), **{name: value}),
                 lambda: spec_edge.filter_logits(X, 0.8, filters=spec_edge.Filters(), **{name: value})):
        with pytest.raises(TypeError, match=f"filters and {name}: both given"):
            call()


def test_unknown_keywords_and_wrong_filters_are_type_errors():
    with pytest.raises(TypeError, match="topk"):
        spec_edge.sample(X, 0.8, topk=5)
    with pytest.raises(TypeError, match="temprature"):
        spec_edge.filter_logits(X, temprature=0.8)
    with pytest.raises(TypeError, match="filters: expected a spec_edge.Filters, got dict"):
        spec_edge.sample(X, 0.8, filters={"top_k": 5})


def transformers_chain(x, T, top_k=0, top_p=1.0, min_p=0.0, penalty=1.0, prev=None):
    """The eager processor chain (the order generate() applies them)."""
    x = x.clone()
    if penalty != 1.0:
        x = RepetitionPenaltyLogitsProcessor(penalty)(prev, x)
    x = TemperatureLogitsWarper(T)(None, x)
    if top_k:
        x = TopKLogitsWarper(top_k)(None, x)
    x = TopPLogitsWarper(top_p)(None, x)
    return MinPLogitsWarper(min_p)(None, x) if min_p else x


@pytest.mark.parametrize("top_k", [V, V + 1, 10 * V, 2**62])
def test_top_k_of_v_or_more_keeps_every_token(top_k):
    assert torch.equal(spec_edge.filter_logits(X, 0.8, top_k=top_k), transformers_chain(X, 0.8, top_k=min(top_k, 2**31)))
    assert torch.equal(spec_edge.filter_logits(X, 0.8, top_k=top_k), X / torch.tensor(0.8))
    assert torch.equal(spec_edge.sample(X, 0.8, top_k=top_k, seed=2), spec_edge.sample(X, 0.8, seed=2))
    t = X[:, None].expand(4, 3, V)
    d = t[:, :2] - 0.2
    assert torch.equal(spec_edge.verify(t, d, d.argmax(-1), 0.8, 6, 0, top_k=top_k).tokens,
                       spec_edge.verify(t, d, d.argmax(-1), 0.8, 6, 0).tokens)


def test_neutral_settings_change_nothing_and_top_k_1_is_greedy():
    neutral = dict(top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0, prev_tokens=IDS)
    assert torch.equal(spec_edge.filter_logits(X, 0.7, **neutral), transformers_chain(X, 0.7, penalty=1.0))
    assert torch.equal(spec_edge.filter_logits(X, 0.7, **neutral), X / torch.tensor(0.7))
    for seed in range(5):
        assert torch.equal(spec_edge.sample(X, 0.7, **neutral, seed=seed), spec_edge.sample(X, 0.7, seed=seed))
        assert torch.equal(spec_edge.sample(X, 0.7, top_k=1, seed=seed), X.argmax(-1))
    assert torch.equal(spec_edge.sample(X, 0.0), X.argmax(-1))
    assert torch.equal(spec_edge.sample(X, 0.0, **FULL), spec_edge.filter_logits(X, 0.0, **FULL).argmax(-1))


def test_full_chain_equals_transformers():
    want = transformers_chain(X, 0.8, 50, 0.95, 0.05, 1.1, IDS)
    assert torch.equal(torch.isinf(spec_edge.filter_logits(X, 0.8, **FULL)), torch.isinf(want))
    torch.testing.assert_close(spec_edge.filter_logits(X, 0.8, **FULL), want)


def test_prev_tokens_as_a_ragged_list_of_lists_is_padded_with_minus_one():
    rows = [[3, 7, 7], [11], [], [V - 1, 0]]
    padded = torch.tensor([[3, 7, 7], [11, -1, -1], [-1, -1, -1], [V - 1, 0, -1]])
    for T in (0.0, 0.9):
        assert torch.equal(spec_edge.filter_logits(X, T, repetition_penalty=1.5, prev_tokens=rows),
                           spec_edge.filter_logits(X, T, repetition_penalty=1.5, prev_tokens=padded))
    assert torch.equal(spec_edge.sample(X, 0.9, repetition_penalty=1.5, prev_tokens=[3, 7], seed=1),
                       spec_edge.sample(X, 0.9, repetition_penalty=1.5, prev_tokens=torch.tensor([3, 7]), seed=1))
    for bad in ([["a"]], [[1, 2.5]], [True], "3 7"):
        with pytest.raises(TypeError, match="prev_tokens: expected"):
            spec_edge.sample(X, 0.9, repetition_penalty=1.5, prev_tokens=bad)


def test_keyword_forms_through_kernels_loader(tmp_path):
    ops = __import__("kernels").get_local_kernel(write_kernels_variant(tmp_path))
    assert torch.equal(ops.sample(X, 0.8, top_k=50, top_p=0.95, seed=1234, offset=2),
                       spec_edge.sample(X, 0.8, seed=1234, offset=2, filters=spec_edge.Filters(50, 0.95)))
    assert torch.equal(ops.filter_logits(X, 0.8, **FULL), spec_edge.filter_logits(X, 0.8, filters=spec_edge.Filters(**FULL)))


def test_keyword_forms_under_torch_compile_fullgraph():
    def step(logits, ids, offset):
        tok = spec_edge.sample(logits, temperature=0.8, top_k=50, top_p=0.95, seed=1234, offset=offset)
        masked = spec_edge.filter_logits(logits, temperature=0.8, top_k=50, min_p=0.05, repetition_penalty=1.1,
                                         prev_tokens=ids)
        return tok, masked
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for offset in (0, 1):
        got, want = compiled(X, IDS, offset), step(X, IDS, offset)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


class CardStep(torch.nn.Module):
    def forward(self, logits, ids, step):
        tok = spec_edge.sample(logits, temperature=0.8, top_k=50, top_p=0.95, seed=1234, offset=step)
        masked = spec_edge.filter_logits(logits, temperature=0.8, top_k=50, top_p=0.95, min_p=0.05,
                                         repetition_penalty=1.1, prev_tokens=ids)
        return tok, masked


def test_keyword_forms_inside_exported_programs():
    pytest.importorskip("executorch")
    import spec_edge.executorch
    from executorch.exir import EdgeCompileConfig, to_edge
    from executorch.runtime import Runtime
    spec_edge.executorch.load()
    args = (X, IDS, torch.tensor(3))
    exported = torch.export.export(CardStep(), args)
    assert "spec_edge.sample" in str(exported.graph)
    program = to_edge(exported, compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    got, want = method.execute(list(args)), CardStep()(*args)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
