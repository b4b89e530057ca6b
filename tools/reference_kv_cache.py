"""KV cache bytes as transformers keeps them after a prefill (developer tool, needs torch).

How the cache sizes pinned in tests/test_plan.py were obtained: the HF class tcalc counts,
built from a config.json (fp32, random weights, CPU), a forward over one sequence of T tokens
with use_cache=True, then the bytes of every key and value tensor the returned cache holds.

    python tools/reference_kv_cache.py --seq-len 32 tests/data/hf/variants/gpt_oss-tied-nobias.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_flops import eager_model  # noqa: E402


def cache_bytes(config: dict, seq_len: int) -> int:
    model = eager_model(config).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, seq_len))
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
    total = 0
    for layer in cache.layers:
        for t in (layer.keys, layer.values):
            total += t.numel() * t.element_size()
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="+", type=Path)
    ap.add_argument("--seq-len", type=int, nargs="+", default=[32])
    args = ap.parse_args()
    for path in args.configs:
        for T in args.seq_len:
            print(f"{cache_bytes(json.loads(path.read_text()), T):>12,} bytes fp32  T={T}  "
                  f"{path.name}")


if __name__ == "__main__":
    main()
