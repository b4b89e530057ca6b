"""YOSO's attention as transformers 5.23 runs it on the CPU: models/yoso/modeling_yoso.py
(YosoSelfAttention.forward with use_expectation, YosoCumulation: the expectation of the
LSH collision, no softmax, no attention dropout; the CUDA kernels of the LSH path are not
loaded on the CPU). The rest of YosoForMaskedLM is BERT's (families/bert.py, the Yoso
config)."""

from __future__ import annotations

import math

from transformer_calc.graph import ops
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.tensor import I32, Tensor


def normalize(x: Tensor) -> Tensor:
    """F.normalize(x, p=2, dim=-1): x / x.norm(p, dim, keepdim=True).clamp_min(eps)
    .expand_as(x); the norm keeps x and its result, clamp_min its input, the division x and
    the (expanded) denominator."""
    denominator = ops.expand(ops.clamp(ops.vector_norm(x)), x.shape)
    return ops.div(x, denominator)


def expectation_attention(m: Builder, q: Tensor, k: Tensor, v: Tensor, ones: Tensor) -> Tensor:
    """From the heads (B, H, T, dh) on: each reshaped to (B·H, T, dh) (copies of the
    transposed views); the layer's mask 1.0 + attention_mask / 10000.0 (YosoModel's (B, T)
    fp32 ones), unsqueezed, repeat_interleave over the heads, reshaped to (B·H, T) and
    .int(): a new int32 tensor, no gradient; query and key normalized (self.training);
    YosoCumulation.apply: (1 - acos(q kᵀ) / π) ** hash_code_len times both masks, in its
    forward (no autograd inside), its output that times V; ctx.save_for_backward(query_mask,
    key_mask (the same tensor), expectation, query, key, value). Then the output normalized,
    reshaped to (B, H, T, dh), permuted back and made contiguous, viewed as (B, T, H·dh)."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    q, k, v = (ops.reshape(t, (B * H, T, dh)) for t in (q, k, v))
    with m.trace.no_grad():
        mask = ops.add(ops.div(ones, 10000.0), 1.0)
        mask = ops.repeat_interleave(ops.unsqueeze(mask, 1), H, 1)
        mask = ops.to(ops.reshape(mask, (B * H, T)), I32)
    q, k = normalize(q), normalize(k)
    with m.trace.no_grad():  # YosoCumulation.forward
        w = ops.matmul(q, ops.transpose(k, -1, -2))
        w = ops.pow(ops.add(ops.neg(ops.div(ops.acos(w), math.pi)), 1.0), 9.0)  # (1 - .)^n
        w = ops.mul(ops.mul(w, ops.unsqueeze(mask, 2)), ops.unsqueeze(mask, 1))
        out = ops.matmul(w, v)
    out = ops.function("YosoCumulation", [q, k, v], [mask, mask, w, q, k, v], out)
    out = ops.reshape(normalize(out), (B, H, T, dh))
    out = ops.contiguous(ops.permute(out, (0, 2, 1, 3)))
    return ops.view(out, (B, T, H * dh))
