"""The small random pair the runtime and runner tests decode with (V=48, context 96, K=3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

K = 3
PROMPT = [5, 17, 3, 29, 11, 40, 2, 8]


def configs():
    from spec_edge.export import ModelConfig
    return (ModelConfig(dim=64, n_layers=2, n_heads=4, vocab_size=48, max_context_len=96),
            ModelConfig(dim=32, n_layers=1, n_heads=2, vocab_size=48, max_context_len=96))


def export_small_pair(root: Path) -> Path:
    """``root/pair``: a random target and a smaller random draft; ``root/self``: the target paired
    with itself (the same target.pte, with a draft.pte exported from the target)."""
    from spec_edge.export import build_model, export_draft, export_pair
    from spec_edge.manifest import sha256
    target_config, draft_config = configs()
    target = build_model(target_config, seed=1)
    export_pair(target, target_config, build_model(draft_config, seed=2), draft_config, K, root / "pair",
                prefill_chunk=4, progress=False)
    shutil.copytree(root / "pair", root / "self")
    manifest = json.loads((root / "self" / "manifest.json").read_text())
    manifest["programs"]["draft.pte"] = sha256(export_draft(target, target_config, root / "self" / "draft.pte", 4))
    (root / "self" / "manifest.json").write_text(json.dumps(manifest))
    return root


def embedding_configs():
    """A pair with a vocabulary large enough for its token embedding to dominate a program."""
    from spec_edge.export import ModelConfig
    return (ModelConfig(dim=64, n_layers=1, n_heads=4, vocab_size=1024, max_context_len=64),
            ModelConfig(dim=32, n_layers=1, n_heads=2, vocab_size=1024, max_context_len=64))


def export_embedding_pair(out: Path, mode: str | None) -> Path:
    """The embedding_configs pair (seeds 1, 2), its token embeddings quantized as `mode`."""
    from spec_edge.export import build_model, export_pair
    target_config, draft_config = embedding_configs()
    return export_pair(build_model(target_config, seed=1), target_config, build_model(draft_config, seed=2),
                       draft_config, K, out, prefill_chunk=4, quantize_embedding=mode, progress=False)
