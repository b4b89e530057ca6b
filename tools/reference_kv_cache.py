"""KV cache bytes as transformers keeps them after a prefill (developer tool, needs torch).

How the cache sizes pinned in tests/test_plan.py and tests/test_mixers.py were obtained: the
HF class tcalc counts, built from a config.json (random weights, CPU, fp32 unless --dtype), a
forward over one sequence of T tokens with use_cache=True, then the bytes of every key and
value tensor the returned cache holds and, for recurrent layers, of every
convolution and recurrent state.

    python tools/reference_kv_cache.py --seq-len 32 tests/data/hf/variants/gpt_oss-tied-nobias.json
    python tools/reference_kv_cache.py --split --seq-len 16 48 tests/data/hf/variants/*-tiny.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_activations import input_vocab  # noqa: E402
from reference_flops import eager_model  # noqa: E402


def cache_parts(config: dict, seq_len: int, dtype: str = "float32") -> dict[str, int]:
    """Bytes by part: "kv" (attention keys and values), "conv" and "recurrent" (the states
    of recurrent layers), and the dtypes seen."""
    model = eager_model(config).to(getattr(torch, dtype)).eval()
    ids = torch.randint(0, input_vocab(model.config), (1, seq_len))
    # an encoder-decoder: T source and T target tokens; its cache holds the decoder's self-
    # and cross-attention keys and values (EncoderDecoderCache)
    extra = {"decoder_input_ids": ids} if model.config.is_encoder_decoder else {}
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, **extra)
    cache = getattr(out, "past_key_values", None) or out.cache_params  # Mamba: cache_params
    layers = [*cache.self_attention_cache.layers, *cache.cross_attention_cache.layers] \
        if hasattr(cache, "cross_attention_cache") else cache.layers
    parts: dict = {"kv": 0, "conv": 0, "recurrent": 0, "dtypes": set()}

    seen: set[int] = set()

    def add(part: str, t: object) -> None:
        # each tensor once: DeepSeek-V4's layers hold one K=V tensor as both keys and values
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            seen.add(id(t))
            parts[part] += t.numel() * t.element_size()
            parts["dtypes"].add(f"{part}:{str(t.dtype).removeprefix('torch.')}")

    for t in getattr(cache, "linear_cache", []):  # MiniMaxCache: the lightning layers' state
        add("recurrent", t)
    for layer in layers:
        # DSA layers (DynamicIndexedLayer) also keep the indexer's keys
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None),
                  getattr(layer, "indexer_keys", None)):
            add("kv", t)
        # DeepSeek-V4's compressor (and CSA's indexer) state: pending windows, compressed
        # entries, the last window's overlap
        for name in ("buffer_kv", "buffer_gate", "compressed_kv", "overlap_kv", "overlap_gate"):
            for t in (getattr(layer, name, None) or {}).values():
                add("kv", t)
        for name, part in (("conv_states", "conv"), ("recurrent_states", "recurrent")):
            states = getattr(layer, name, None)
            for t in (states.values() if isinstance(states, dict) else [states]):
                add(part, t)
    parts["dtypes"] = sorted(parts["dtypes"])
    return parts


def cache_bytes(config: dict, seq_len: int) -> int:
    parts = cache_parts(config, seq_len)
    return parts["kv"] + parts["conv"] + parts["recurrent"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="+", type=Path)
    ap.add_argument("--seq-len", type=int, nargs="+", default=[32])
    ap.add_argument("--split", action="store_true", help="bytes by part (kv, conv, recurrent)")
    ap.add_argument("--dtype", default="float32", help="the model's dtype (float32, bfloat16)")
    args = ap.parse_args()
    for path in args.configs:
        for T in args.seq_len:
            if args.split:
                print(json.dumps({"config": path.name, "seq_len": T, "dtype": args.dtype}
                                 | cache_parts(json.loads(path.read_text()), T, args.dtype)))
                continue
            print(f"{cache_bytes(json.loads(path.read_text()), T):>12,} bytes fp32  T={T}  "
                  f"{path.name}")


if __name__ == "__main__":
    main()
