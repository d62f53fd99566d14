"""Trains the default draft/target pair shipped in python/spec_edge/default_pair/ (`make train-default`).

Corpus: this interpreter's Python standard library sources (no tests), present offline on every
machine; files whose path hashes into 1/25 are held out. Steps:
1. a byte-level BPE tokenizer (`tokenizers`), shipped as tokenizer.json;
2. the target, a Llama-family model (`transformers`' LlamaForCausalLM) trained on next-token loss;
3. the draft, 10x smaller, distilled from the target (KL to the target's next-token distribution);
4. held-out evaluation: the draft's greedy acceptance rate per token against the target's greedy
   continuations of held-out prompts, which are written to prompts.json for the demo.
Weights are saved as fp16 safetensors Hugging Face checkpoints, so the pair goes through the same
export path as any local checkpoint (`export/export_pair.py --hf-target --hf-draft`).

    python export/train_default.py [--out DIR] [--target-tokens N] [--draft-tokens N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sysconfig
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "python" / "spec_edge" / "default_pair"
EOS = "<|endoftext|>"
VOCAB = 4096
SEQ = 256
# Target: 10.2M parameters, 41 MB of fp32 weights read per decoded token (over this machine's
# 32 MiB last-level cache). Draft: 0.95M, 10.7x smaller.
TARGET = dict(hidden_size=320, intermediate_size=896, num_hidden_layers=7, num_attention_heads=5,
              num_key_value_heads=5)
DRAFT = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=2)


def corpus_files() -> tuple[list[Path], list[Path]]:
    """(train, held-out) .py files of the standard library, tests excluded, split by path hash."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"}
    files = sorted(f for f in root.rglob("*.py") if not skip & set(f.relative_to(root).parts))
    held = [f for f in files if hashlib.sha1(str(f.relative_to(root)).encode()).digest()[0] % 25 == 0]
    return [f for f in files if f not in held], held


def train_tokenizer(files: list[Path], path: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([str(f) for f in files], trainer)
    tok.save(str(path))
    return tok


def encode(tok, files: list[Path]) -> torch.Tensor:
    eos = tok.token_to_id(EOS)
    ids: list[int] = []
    for enc in tok.encode_batch([f.read_text(encoding="utf-8", errors="replace") for f in files]):
        ids += enc.ids + [eos]
    return torch.tensor(ids, dtype=torch.int32)


def batches(stream: torch.Tensor, tokens: int, batch: int, seed: int):
    """Random SEQ+1 windows of the token stream, `tokens` training tokens in all."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(tokens // (batch * SEQ)):
        starts = torch.randint(0, len(stream) - SEQ - 1, (batch,), generator=g)
        yield torch.stack([stream[s:s + SEQ + 1] for s in starts.tolist()]).long()


def make_model(shape: dict, tok, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), max_position_embeddings=SEQ, tie_word_embeddings=True,
                         bos_token_id=tok.token_to_id(EOS), eos_token_id=tok.token_to_id(EOS), **shape)
    return LlamaForCausalLM(config)


def fit(model, stream, tokens: int, lr: float, seed: int, desc: str, loss_fn):
    batch = 8
    steps = tokens // (batch * SEQ)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))))
    model.train()
    bar = tqdm(batches(stream, tokens, batch, seed), total=steps, desc=desc, unit="step")
    for x in bar:
        loss = loss_fn(model, x)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    return model


def next_token_loss(model, x):
    return F.cross_entropy(model(input_ids=x[:, :-1]).logits.flatten(0, 1), x[:, 1:].flatten())


def distill_loss(target):
    def loss(draft, x):
        with torch.no_grad():
            teacher = F.log_softmax(target(input_ids=x[:, :-1]).logits.float(), -1)
        student = F.log_softmax(draft(input_ids=x[:, :-1]).logits, -1)
        return F.kl_div(student.flatten(0, 1), teacher.flatten(0, 1), log_target=True, reduction="batchmean")
    return loss


def held_out_prompts(tok, files: list[Path], count: int, prompt_tokens: int = 48) -> list[str]:
    """The first `def` of each held-out file with the lines before it as context, cut to
    `prompt_tokens` tokens ending inside the function."""
    prompts = []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        at = text.find("\n    def ")
        at = text.find("\ndef ") if at < 0 else at
        if at < 0:
            continue
        context = tok.decode(tok.encode(text[:at + 1]).ids[-prompt_tokens // 2:])
        body = tok.decode(tok.encode(text[at + 1:]).ids[:prompt_tokens // 2])
        prompts.append(context[context.find("\n") + 1:] + body)
        if len(prompts) == count:
            break
    return prompts


@torch.no_grad()
def greedy_acceptance(target, draft, tok, prompts: list[str], new_tokens: int = 64) -> float:
    """Per-token greedy acceptance: on the target's greedy continuation, how often the draft's
    argmax equals the target's (exactly when speculative greedy decoding accepts a draft token)."""
    agree = total = 0
    for prompt in prompts:
        ids = torch.tensor([tok.encode(prompt).ids])
        out = target.generate(ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
        n = ids.shape[1]
        t = target(input_ids=out).logits[0, n - 1:-1].argmax(-1)
        d = draft(input_ids=out).logits[0, n - 1:-1].argmax(-1)
        agree += int((t == d).sum())
        total += len(t)
    return agree / total


def save(model, tok_path: Path, out: Path):
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.float16).save_pretrained(out, safe_serialization=True)
    model.to(torch.float32)
    (out / "tokenizer.json").write_bytes(tok_path.read_bytes())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--target-tokens", type=int, default=2_400_000)
    parser.add_argument("--draft-tokens", type=int, default=1_600_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.time()
    train_files, held_files = corpus_files()
    args.out.mkdir(parents=True, exist_ok=True)
    tok_path = args.out / "tokenizer.json"
    tok = train_tokenizer(train_files, tok_path)
    stream = encode(tok, train_files)
    print(f"corpus: {len(train_files)} files, {len(stream):,} tokens (held out: {len(held_files)} files); "
          f"tokenizer V={tok.get_vocab_size()}")

    target = make_model(TARGET, tok, args.seed)
    fit(target, stream, args.target_tokens, 2e-3, args.seed, "target", next_token_loss)
    for p in target.parameters():
        p.requires_grad_(False)
    draft = make_model(DRAFT, tok, args.seed + 1)
    fit(draft, stream, args.draft_tokens, 3e-3, args.seed + 1, "draft (distilled)", distill_loss(target))

    prompts = held_out_prompts(tok, held_files, 16)
    rate = greedy_acceptance(target, draft, tok, prompts)
    held = encode(tok, held_files)[: 64 * (SEQ + 1)].view(64, SEQ + 1).long()
    with torch.no_grad():
        held_loss = {name: float(next_token_loss(m, held)) for name, m in (("target", target), ("draft", draft))}
    save(target, tok_path, args.out / "target")
    save(draft, tok_path, args.out / "draft")
    tok_path.unlink()
    report = {
        "python": sysconfig.get_python_version(),
        "corpus_tokens": len(stream),
        "target_params": sum(p.numel() for p in target.parameters()),
        "draft_params": sum(p.numel() for p in draft.parameters()),
        "target_tokens": args.target_tokens,
        "draft_tokens": args.draft_tokens,
        "held_out_loss": held_loss,
        "held_out_greedy_acceptance": rate,
        "train_seconds": round(time.time() - started),
    }
    (args.out / "prompts.json").write_text(json.dumps(prompts, indent=1) + "\n")
    (args.out / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
