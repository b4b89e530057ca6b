"""GPT-2 as transformers 5.23 runs it: models/gpt2/modeling_gpt2.py (GPT2LMHeadModel,
GPT2Model, GPT2Block, GPT2Attention with eager_attention_forward or
integrations/sdpa_attention.py, GPT2MLP with activations.NewGELUActivation), and
cache_utils.DynamicLayer.update when use_cache builds a DynamicCache in training."""

from __future__ import annotations

import math
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.tensor import I64, Tensor


@dataclass(frozen=True)
class GPT2:
    """GPT2Config's keys that shape the graph. Symbols: V vocab, P positions, E width,
    H heads, dh = E / H, F inner width (n_inner or 4·E), L layers."""

    V: int
    P: int
    E: int
    H: int
    F: int
    L: int
    tied: bool = True
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "P": self.P, "E": self.E, "H": self.H, "dh": self.E // self.H,
                "F": self.F, "L": self.L}


def forward(m: Builder, cfg: GPT2) -> Tensor:
    """GPT2LMHeadModel.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("transformer"):
        # GPT2Model.forward: input_ids.view(-1, T); position_ids = arange(T) + 0, unsqueezed
        h = m.embedding("wte", ops.view(ids, (B, T)), V, E)
        positions = tr.input((T,), I64, "arange")
        positions = ops.unsqueeze(ops.add(positions, 0), 0)
        h = ops.add(h, m.embedding("wpe", positions, m["P"], E))
        h = m.dropout(h, cfg.embd_pdrop)
        # the blocks' other inputs: cache_position/position_ids (one storage) and, eager,
        # the model's causal mask
        mask = causal_mask(m, h) if m.run.attention == "eager" else None
        extras = (positions,) if mask is None else (positions, mask)
        h = m.layers("h", lambda x: _block(m, cfg, x, mask), h, extras)
        h = m.layer_norm("ln_f", h)
    with m.module("lm_head"):
        w = m.tied("transformer.wte.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _block(m: Builder, cfg: GPT2, h: Tensor, mask: Tensor | None) -> Tensor:
    """GPT2Block.forward: pre-norm attention and MLP, each added to the residual."""
    a = _attention(m, cfg, m.layer_norm("ln_1", h), mask)
    h = ops.add(a, h)
    with m.module("mlp"):
        x = m.conv1d("c_fc", m.layer_norm("ln_2", h), m["F"])
        x = m.dropout(m.conv1d("c_proj", new_gelu(x), m["E"]), cfg.resid_pdrop)
    return ops.add(h, x)


def new_gelu(x: Tensor) -> Tensor:
    """NewGELUActivation: 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
    (input + 0.044715 * torch.pow(input, 3.0)))), op by op in Python's order."""
    half = ops.mul(x, 0.5)
    inner = ops.add(x, ops.mul(ops.pow(x, 3.0), 0.044715))
    t = ops.add(ops.tanh(ops.mul(inner, math.sqrt(2.0 / math.pi))), 1.0)
    return ops.mul(half, t)


def _attention(m: Builder, cfg: GPT2, x: Tensor, mask: Tensor | None) -> Tensor:
    """GPT2Attention.forward: the fused c_attn output split into views of (B, H, T, dh).
    Its width is written 3·H·dh (= 3·E), the heads tensor parallelism splits."""
    B, T, E, H, dh = m["B"], m["T"], m["E"], m["H"], m["dh"]
    with m.module("attn"):
        qkv = m.conv1d("c_attn", x, 3 * (H * dh))
        q, k, v = (ops.transpose(ops.view(t, (B, T, H, dh)), 1, 2)
                   for t in ops.split(qkv, H * dh, 2))
        if m.use_cache:
            # DynamicLayer.update: self.keys = torch.cat([self.keys, key_states], dim=-2)
            # over the lazily initialised empty tensor: a contiguous copy of K and of V
            k, v = (ops.cat([t], -2) for t in (k, v))
        if mask is not None:
            out = _eager(m, cfg, q, k, v, mask)
        elif m.run.attention == "flash":  # flash_attention_2: (B, T, H, dh) out
            out = flash_attention_forward(m, q, k, v)
        else:
            # sdpa_attention_forward: no mask (is_causal), the output made contiguous
            out = scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=cfg.attn_pdrop, scale=dh.value ** -0.5)
            out = ops.contiguous(ops.transpose(out, 1, 2))
        out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))  # reshape(*input_shape, -1)
        return m.dropout(m.conv1d("c_proj", out, E), cfg.resid_pdrop)


def _eager(m: Builder, cfg: GPT2, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """eager_attention_forward (modeling_gpt2.py): scaled scores plus the causal mask,
    softmax, cast to V's dtype, dropout, the product with V, transposed (not copied)."""
    w = ops.mul(ops.matmul(q, ops.transpose(k, -1, -2)), m["dh"].value ** -0.5)
    w = ops.add(w, mask)
    w = ops.to(ops.softmax(w), v.dtype)
    w = m.dropout(w, cfg.attn_pdrop)
    return ops.transpose(ops.matmul(w, v), 1, 2)

