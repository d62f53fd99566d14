"""Export a draft/target pair to draft.pte, target.pte, verify.pte and manifest.json.

Models are ExecuTorch's Llama-family transformer, given as GGUF files (llama.cpp's format, any
quantization the gguf package reads; the tokenizer comes from the file's metadata), as local
Hugging Face checkpoint directories (config.json + safetensors + tokenizer.json; Llama 3.x,
SmolLM, Qwen2.x), or as JSON files of spec_edge.export.ModelConfig fields with, optionally, a
state dict (torch.save) of their weights (random, seeded weights otherwise: useful for trying
the pipeline).

    python export/export_pair.py --gguf-target FILE --gguf-draft FILE --k 8 --out OUT [--max-context 512]
    python export/export_pair.py --hf-target DIR --hf-draft DIR --k 8 --out OUT [--max-context 512]
    python export/export_pair.py --target target.json [--target-weights t.pt] \\
        --draft draft.json [--draft-weights d.pt] --k 4 --out OUT [--tokenizer tokenizer.json]
    common: [--no-xnnpack] [--quantize 8da4w|8da8w [--group-size 32] [--draft-group-size 128]]
            [--quantize-draft 8da8w] [--quantize-embedding 4,32]
            [--keep-gguf-precision [--four-bit-output]]
            [--draft-vocab 32768 [--draft-vocab-corpus FILE...]]
            [--prefill-chunk 32] [--kv-cache fp32|fp16]

The target's verify step takes any K up to --k; the runtime picks one per run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from spec_edge.export import QUANTIZE_MODES, ModelConfig, build_model, export_pair


def load_json_model(config_path: str, weights: str | None, seed: int):
    try:
        config = ModelConfig(**json.loads(Path(config_path).read_text()))
    except (OSError, ValueError, TypeError) as error:
        sys.exit(f"{config_path}: not a model config ({error})")
    state = None
    if weights is not None:
        try:
            state = torch.load(weights, map_location="cpu", weights_only=True)
        except Exception as error:  # noqa: BLE001  (any unreadable file)
            sys.exit(f"{weights}: cannot read the weights ({error})")
    return build_model(config, state, seed=seed), config


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--gguf-target", metavar="FILE", help="target: GGUF file")
    target.add_argument("--hf-target", metavar="DIR", help="target: local Hugging Face checkpoint directory")
    target.add_argument("--target", metavar="JSON", help="target: ModelConfig JSON")
    draft = parser.add_mutually_exclusive_group(required=True)
    draft.add_argument("--gguf-draft", metavar="FILE", help="draft: GGUF file")
    draft.add_argument("--hf-draft", metavar="DIR", help="draft: local Hugging Face checkpoint directory")
    draft.add_argument("--draft", metavar="JSON", help="draft: ModelConfig JSON")
    parser.add_argument("--target-weights")
    parser.add_argument("--draft-weights")
    parser.add_argument("--max-context", type=int, help="context length of the programs from GGUF files or checkpoints "
                        "(default: the checkpoint's, at most 512)")
    parser.add_argument("--k", type=int, default=4, help="most draft tokens per round")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--prefill-chunk", type=int, default=32)
    parser.add_argument("--kv-cache", choices=["fp32", "fp16"],
                        help="the programs' KV caches (default: fp16 from GGUF files and checkpoints, fp32 from "
                        "configs): float16 halves the bytes a long context's steps read and the programs hold")
    parser.add_argument("--no-xnnpack", action="store_true", help="portable kernels only")
    parser.add_argument("--tokenizer", help="tokenizer.json to ship with config-given models "
                        "(checkpoints ship their own)")
    parser.add_argument("--quantize", choices=QUANTIZE_MODES,
                        help="both models: 8-bit dynamic activations, 4-bit grouped or 8-bit per-channel weights "
                        "(XNNPACK)")
    parser.add_argument("--quantize-draft", choices=QUANTIZE_MODES, help="the draft alone (default: as --quantize)")
    parser.add_argument("--group-size", type=int, default=32, help="weight group size for 8da4w")
    parser.add_argument("--draft-group-size", type=int, help="the 8da4w draft's weight group size (default: "
                        "--group-size): larger groups make a shorter draft step and a draft further from its "
                        "model (on Qwen2.5-Coder-0.5B, 64 and 128 were no faster in the end)")
    parser.add_argument("--keep-gguf-precision", action="store_true",
                        help="with --quantize and --gguf-target: the target keeps its file's weights: its 4-bit "
                        "linears (Q4_0, Q4_1, Q4_K) their values, scales and minima, those above 5 bits per weight "
                        "(Q5, Q6_K, Q8_0, F16) 8-bit weights")
    parser.add_argument("--four-bit-output", action="store_true",
                        help="with --keep-gguf-precision: the output layer in --quantize's 4 bits, also where the "
                        "file keeps it above 5 bits (on Qwen2.5-Coder-1.5B: perplexity +0.95%% from the source "
                        "against +0.84%%, 8%% faster speculative decoding)")
    parser.add_argument("--draft-vocab", type=int, metavar="N",
                        help="the draft proposes only the N tokens most frequent on --draft-vocab-corpus (a cheaper "
                        "draft step; the output is still the target's)")
    parser.add_argument("--draft-vocab-corpus", nargs="+", metavar="FILE",
                        help="text files that rank the tokens (default: the Python standard library's sources)")
    parser.add_argument("--quantize-embedding", metavar="BITS,GROUP",
                        help="both models' token embeddings: 2, 4 or 8 bits with a scale per GROUP columns "
                        "(0: per row), as ExecuTorch's --embedding-quantize; e.g. 4,32")
    args = parser.parse_args(argv)
    kinds = {"GGUF files (--gguf-target, --gguf-draft)": (args.gguf_target, args.gguf_draft),
             "checkpoints (--hf-target, --hf-draft)": (args.hf_target, args.hf_draft),
             "configs (--target, --draft)": (args.target, args.draft)}
    if not any(target and draft for target, draft in kinds.values()):
        parser.error(f"give both models the same way: as {', as '.join(kinds)}")
    if args.keep_gguf_precision and not (args.gguf_target and args.quantize):
        parser.error("--keep-gguf-precision keeps precise linears of a quantized GGUF target: give --gguf-target "
                     "and --quantize")
    if args.four_bit_output and not args.keep_gguf_precision:
        parser.error("--four-bit-output sets the output layer of a --keep-gguf-precision export apart: give "
                     "--keep-gguf-precision")
    options = dict(prefill_chunk=args.prefill_chunk, xnnpack=not args.no_xnnpack, quantize=args.quantize,
                   quantize_draft=args.quantize_draft, group_size=args.group_size,
                   draft_group_size=args.draft_group_size,
                   quantize_embedding=args.quantize_embedding, draft_vocab=args.draft_vocab,
                   draft_vocab_corpus=args.draft_vocab_corpus)
    if args.kv_cache is not None:
        options["kv_cache"] = args.kv_cache
    try:
        if args.gguf_target:
            from spec_edge.gguf_checkpoint import export_gguf_pair
            out = export_gguf_pair(args.gguf_target, args.gguf_draft, args.k, args.out, args.max_context,
                                   keep_gguf_precision=args.keep_gguf_precision,
                                   four_bit_output=args.four_bit_output, **options)
        elif args.hf_target:
            from spec_edge.hf import export_hf_pair
            out = export_hf_pair(args.hf_target, args.hf_draft, args.k, args.out, args.max_context, **options)
        else:
            target, target_config = load_json_model(args.target, args.target_weights, seed=1)
            draft, draft_config = load_json_model(args.draft, args.draft_weights, seed=2)
            out = export_pair(target, target_config, draft, draft_config, args.k, args.out,
                              tokenizer=args.tokenizer, **options)
    except ValueError as error:
        sys.exit(f"export_pair: {error}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
