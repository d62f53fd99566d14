"""Export a draft/target pair to draft.pte, target.pte, verify.pte and manifest.json.

Models are ExecuTorch's Llama-family transformer; each is given by a JSON file of
spec_edge.export.ModelConfig fields and, optionally, a state dict (torch.save) of its weights
(random, seeded weights otherwise: useful for trying the pipeline).

    python export/export_pair.py --target target.json [--target-weights t.pt] \\
        --draft draft.json [--draft-weights d.pt] --k 4 --out DIR [--no-xnnpack] [--tokenizer tokenizer.json] \\
        [--quantize 8da4w [--group-size 32]]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from spec_edge.export import ModelConfig, build_model, export_pair


def load(config_path: str, weights: str | None, seed: int):
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
    parser.add_argument("--target", required=True, help="target ModelConfig JSON")
    parser.add_argument("--target-weights")
    parser.add_argument("--draft", required=True, help="draft ModelConfig JSON")
    parser.add_argument("--draft-weights")
    parser.add_argument("--k", type=int, default=4, help="draft tokens per round")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--prefill-chunk", type=int, default=32)
    parser.add_argument("--no-xnnpack", action="store_true", help="portable kernels only")
    parser.add_argument("--tokenizer", help="tokenizer.json to ship with the programs")
    parser.add_argument("--quantize", choices=["8da4w", "8da8w"],
                        help="8-bit dynamic activations, 4/8-bit grouped weights (XNNPACK)")
    parser.add_argument("--group-size", type=int, default=32, help="weight group size for --quantize")
    args = parser.parse_args(argv)
    target, target_config = load(args.target, args.target_weights, seed=1)
    draft, draft_config = load(args.draft, args.draft_weights, seed=2)
    try:
        out = export_pair(target, target_config, draft, draft_config, args.k, args.out,
                          prefill_chunk=args.prefill_chunk, xnnpack=not args.no_xnnpack,
                          tokenizer=args.tokenizer, quantize=args.quantize, group_size=args.group_size)
    except ValueError as error:
        sys.exit(f"export_pair: {error}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
