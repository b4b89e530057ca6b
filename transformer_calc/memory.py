"""Memory: model states, activations, KV cache and inference weights -> Breakdown (bytes).

Pure: no I/O. Every byte count is an exact integer; the formulas and their sources are in
the comments and in each item's formula.
"""

from __future__ import annotations

import math

from transformer_calc.errors import TcalcError
from transformer_calc.spec import ModelSpec

# Quantised weight formats: bits per weight, and one fp16 scale per group of weights
# (GPTQ/AWQ-style group quantisation; group 128 is their common default).
QUANT_BITS = {"int8": 8, "int4": 4}
SCALE_BYTES = 2


def kv_elements_per_token(spec: ModelSpec) -> int:
    """Cached K and V elements per token of context, all layers.

    2 (K and V) · n_kv_heads · d_head per attention layer that caches keys: the decoder's
    self-attention (and an encoder-only model's layers when used causally). MQA/GQA shrink it
    by n_heads / n_kv_heads. An encoder-decoder's cross-attention caches the encoder output's
    K/V per source token, counted here per token as well (equal source and target lengths).
    """
    per_layer = 2 * spec.kv_heads * spec.head_dim
    if spec.arch == "encoder-decoder":
        return per_layer * spec.n_decoder_layers * 2  # self + cross
    return per_layer * spec.n_layers


def weight_bytes(params: int, dtype: str, group_size: int = 128) -> int:
    """Bytes of weights stored in ``dtype``; int8/int4 add one fp16 scale per group."""
    from transformer_calc.hardware import DTYPE_BYTES

    if dtype in QUANT_BITS:
        if group_size < 1:
            raise TcalcError(f"--group-size: expected an integer >= 1, got {group_size}")
        data = math.ceil(params * QUANT_BITS[dtype] / 8)
        return data + math.ceil(params / group_size) * SCALE_BYTES
    if dtype not in DTYPE_BYTES:
        raise TcalcError(f"unknown dtype '{dtype}' (known: {', '.join(DTYPE_BYTES)})")
    return math.ceil(params * DTYPE_BYTES[dtype])
