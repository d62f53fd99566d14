"""Each op end to end through ExecuTorch: export -> to_edge -> to_executorch -> Runtime."""

import subprocess
import sys

import pytest
import torch

import spec_edge

et = pytest.importorskip("executorch")
import spec_edge.executorch  # noqa: E402
from executorch.exir import EdgeCompileConfig, to_edge  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

spec_edge.executorch.load()


class Greedy(torch.nn.Module):
    def forward(self, target, tokens):
        return torch.ops.spec_edge.verify_greedy(target, tokens)


class Accept(torch.nn.Module):
    def forward(self, target, draft, tokens, uniforms):
        return torch.ops.spec_edge.accept(target, draft, tokens, uniforms)


class AcceptDraftFree(torch.nn.Module):
    def forward(self, target, tokens, uniforms):
        return torch.ops.spec_edge.accept(target, None, tokens, uniforms)


class Verify(torch.nn.Module):
    def forward(self, target, draft, tokens, temperature, seed, offset, num_draft):
        return torch.ops.spec_edge.verify(target, draft, tokens, temperature, seed, offset, num_draft)


def to_program(module, args):
    edge = to_edge(torch.export.export(module, args), compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.to_executorch()


def load_forward(module, args):
    """The program's forward method; the method keeps its program alive."""
    program = Runtime.get().load_program(to_program(module, args).buffer)
    method = program.load_method("forward")
    method.program = program
    return method


def run(module, args):
    return load_forward(module, args).execute(list(args))


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert torch.equal(g, w), (g, w)


@pytest.fixture
def case():
    g = torch.Generator().manual_seed(0)
    B, K, V = 3, 4, 111
    logits = 2 * torch.randn(B, K + 1, V, generator=g)
    draft = logits[:, :K] + torch.randn(B, K, V, generator=g)
    p, q = torch.softmax(logits, -1), torch.softmax(draft, -1)
    tokens = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K)
    u = torch.rand(B, K + 1, dtype=torch.float64, generator=g)
    return logits, draft, p, q, tokens, u


def test_registry_lists_the_ops():
    assert spec_edge.executorch.registered_ops() == {
        "spec_edge::verify_greedy.out", "spec_edge::accept.out", "spec_edge::verify.out", "spec_edge::sample.out",
        "spec_edge::filter_logits.out", "spec_edge::update_cache.out", "spec_edge::attention.out"}


def test_program_contains_the_out_variants(case):
    _, _, p, _, tokens, _ = case
    plan = to_program(Greedy(), (p, tokens)).executorch_program.execution_plan[0]
    assert "spec_edge::verify_greedy.out" in {f"{op.name}.{op.overload}" for op in plan.operators}


@pytest.mark.parametrize("single", [False, True])
def test_verify_greedy(case, single):
    _, _, p, _, tokens, _ = case
    args = (p[0], tokens[0]) if single else (p, tokens)
    assert_same(run(Greedy(), args), Greedy()(*args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_accept(case, dtype):
    _, _, p, q, tokens, u = case
    args = (p.to(dtype), q.to(dtype), tokens, u)
    assert_same(run(Accept(), args), Accept()(*args))
    args = (p.to(dtype), tokens, u)
    assert_same(run(AcceptDraftFree(), args), AcceptDraftFree()(*args))


def test_verify_with_runtime_parameters(case):
    logits, draft, _, _, tokens, _ = case
    args = (logits, draft, tokens, torch.tensor([0.0, 0.7, 1.3]), torch.tensor(5), torch.tensor(2),
            torch.tensor([4, 2, 0]))
    method = load_forward(Verify(), args)
    for seed in range(3):  # temperature, seed and offset stay inputs of the program
        args = args[:4] + (torch.tensor(seed),) + args[5:]
        assert_same(method.execute(list(args)), Verify()(*args))


def test_bad_input_fails_the_call_without_crashing(case):
    _, _, p, _, tokens, _ = case
    method = load_forward(Greedy(), (p, tokens))
    bad = tokens.clone()
    bad[1, 2] = 111
    with pytest.raises(RuntimeError):
        method.execute([p, bad])
    assert_same(method.execute([p, tokens]), Greedy()(p, tokens))  # still usable afterwards


class Sample(torch.nn.Module):
    def forward(self, logits, temperature, seed, offset):
        return torch.ops.spec_edge.sample(logits, temperature, seed, offset)


def test_sample(case):
    logits = case[0][:, 0].contiguous()  # program inputs must be contiguous
    args = (logits, torch.tensor([0.0, 0.8, 1.5]), torch.tensor(3), torch.tensor(7))
    method = load_forward(Sample(), args)
    for offset in range(3):
        args = args[:3] + (torch.tensor(offset),)
        assert_same(method.execute(list(args)), [Sample()(*args)])


class FilteredSample(torch.nn.Module):
    def forward(self, logits, temperature, seed, offset, top_k, top_p, min_p, penalty, prev):
        return torch.ops.spec_edge.sample(logits, temperature, seed, offset, top_k, top_p, min_p, penalty, prev)


class FilteredVerify(torch.nn.Module):
    def forward(self, target, draft, tokens, temperature, seed, offset, top_k, top_p, min_p, penalty, prev):
        return torch.ops.spec_edge.verify(target, draft, tokens, temperature, seed, offset, None,
                                          top_k, top_p, min_p, penalty, prev)


class FilterLogits(torch.nn.Module):
    def forward(self, logits, temperature, top_k, top_p, min_p, penalty, prev):
        return torch.ops.spec_edge.filter_logits(logits, temperature, top_k, top_p, min_p, penalty, prev)


def filter_args(B, V):
    return (torch.tensor([5, 0, 40][:B]), torch.tensor(0.9), torch.tensor([0.05, 0.0, 0.2][:B]),
            torch.tensor(1.3), torch.randint(-1, V, (B, 6), generator=torch.Generator().manual_seed(1)))


def test_filtered_sample_and_verify_take_the_filters_at_run_time(case):
    logits, draft, _, _, tokens, _ = case
    B, V = logits.shape[0], logits.shape[-1]
    row = logits[:, 0].contiguous()
    args = (row, torch.tensor([0.0, 0.8, 1.5]), torch.tensor(3), torch.tensor(7)) + filter_args(B, V)
    method = load_forward(FilteredSample(), args)
    for top_p in (0.5, 0.9, 1.0):
        args = args[:5] + (torch.tensor(top_p),) + args[6:]
        assert_same(method.execute(list(args)), [FilteredSample()(*args)])
    args = (logits, draft, tokens, torch.tensor([0.0, 0.7, 1.3]), torch.tensor(5), torch.tensor(2)) + filter_args(B, V)
    method = load_forward(FilteredVerify(), args)
    for seed in range(3):
        args = args[:4] + (torch.tensor(seed),) + args[5:]
        assert_same(method.execute(list(args)), FilteredVerify()(*args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_filter_logits(case, dtype):
    logits = case[0][:, 0].contiguous().to(dtype)
    args = (logits, torch.tensor([0.0, 0.8, 1.5])) + filter_args(logits.shape[0], logits.shape[1])
    assert_same(run(FilterLogits(), args), [FilterLogits()(*args)])


# Run in a child process: an abort there fails the test instead of killing the test worker.
WRONG_TYPE_CHILD = """
import sys, torch, spec_edge, spec_edge.executorch
from executorch.runtime import Runtime
spec_edge.executorch.load()
program = Runtime.get().load_program(open(sys.argv[1], "rb").read())
method = program.load_method("forward")
try:
    method.execute([torch.randn(3, 111), torch.tensor([0.8, 0.8, 0.8]), torch.tensor(3), torch.tensor(7)])
    print("ran")
except RuntimeError as error:
    print("refused", error)
"""


@pytest.mark.parametrize("arg,value", [(0, "int"), (1, "none")])
def test_a_kernel_handed_a_value_of_another_type_fails_the_call(tmp_path, arg, value):
    """A damaged program whose instruction hands spec_edge::sample an int (or None) where its
    schema has a tensor: the call fails with InvalidArgument, where EValue::toTensor's check used
    to abort the process (beneath the hash, bench/below_the_hash.py)."""
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary
    from executorch.exir.schema import EValue, Int, Null
    args = (torch.randn(3, 111), torch.tensor([0.8, 0.8, 0.8]), torch.tensor(3), torch.tensor(7))
    pte = deserialize_pte_binary(to_program(Sample(), args).buffer)
    plan = pte.program.execution_plan[0]
    call = next(i.instr_args for i in plan.chains[0].instructions
                if getattr(i.instr_args, "op_index", None) is not None
                and plan.operators[i.instr_args.op_index].name == "spec_edge::sample")
    plan.values.append(EValue(Int(5) if value == "int" else Null()))
    call.args[arg] = len(plan.values) - 1
    (tmp_path / "damaged.pte").write_bytes(bytes(serialize_pte_binary(pte)))
    result = subprocess.run([sys.executable, "-c", WRONG_TYPE_CHILD, str(tmp_path / "damaged.pte")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"the process died (exit {result.returncode}): {result.stderr[-2000:]}"
    assert result.stdout.startswith("refused"), result.stdout + result.stderr[-2000:]
    name = "logits" if arg == 0 else "temperature"
    assert f"spec_edge::sample.out: argument {name} is not a tensor" in result.stderr, result.stderr[-2000:]
