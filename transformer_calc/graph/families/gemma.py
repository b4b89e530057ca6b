"""Gemma, Gemma 2, Gemma 3 (text) and VaultGemma as transformers 5.23 runs them:
models/gemma/modeling_gemma.py (GemmaForCausalLM, GemmaModel, GemmaDecoderLayer,
GemmaTextScaledWordEmbedding, GemmaRMSNorm, GemmaMLP, GemmaAttention),
models/gemma2/modeling_gemma2.py (Gemma2DecoderLayer's four norms around attention and the
MLP, eager_attention_forward's soft-capped scores, the final logits soft-capped, a causal and
a sliding-window mask by layer_types; eager only: _supports_sdpa is False),
models/gemma3/modeling_gemma3.py (Gemma3ForCausalLM: Gemma 2's layer with q_norm and k_norm
over each head after the transpose, one RoPE table per layer type, SDPA too; its attention
passes no softcap) and models/vaultgemma/modeling_vaultgemma.py (Gemma 2's attention and
soft-capping with two norms a layer: input_layernorm, pre_feedforward_layernorm). Shared
with Llama (families/llama.py): the rotary tables, apply_rotary_pos_emb, repeat_kv, the
eager and SDPA attention interfaces, the loss.

Masks (masking_utils.py): eager adds a (B, 1, T, T) mask in the embeddings' dtype, one per
layer type in use (causal, sliding-window causal); the add keeps nothing, so only full
recomputation's checkpoints keep them (each layer its own type's). SDPA: the causal mask is
skipped (is_causal); a sliding layer's is skipped while T < sliding_window
(_ignore_causal_mask_sdpa), else it is a (1, 1, T, T) bool mask expanded over B, which torch
converts to a float (B, 1, T, T) mask in the query's dtype that the kernel keeps, and with a
mask K and V go through repeat_kv (use_gqa_in_sdpa wants no mask)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.llama import (
    apply_rotary,
    attention_mask,
    eager_attention,
    repeat_kv,
    rotary_tables,
    sdpa_attention,
)
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor

RMS_EPS = 1e-6


@dataclass(frozen=True)
class Gemma:
    """The config keys that shape the graph. Symbols: V vocab, E hidden, H heads, Hkv K/V
    heads, dh head_dim, F intermediate, L layers, G = H / Hkv. kinds: each layer's attention
    as ModelSpec.layer_attention spells it (F full, S sliding), or one letter for all."""

    V: int
    E: int
    H: int
    Hkv: int
    dh: int
    F: int
    L: int
    tied: bool = True
    bias: bool = False  # attention_bias: q, k, v and o
    attention_dropout: float = 0.0
    sandwich: bool = False  # Gemma 2/3: norms before and after attention and the MLP
    ffn_norm: str = "post_attention_layernorm"  # the MLP's input norm (VaultGemma: pre_...)
    qk_norm: bool = False  # Gemma 3: q_norm, k_norm over each head
    rope_per_kind: bool = False  # Gemma 3: a RoPE table per layer type (local, global)
    attn_softcap: float = 0.0  # attn_logit_softcapping (Gemma 2, VaultGemma)
    final_softcap: float = 0.0  # final_logit_softcapping
    window: int = 0  # sliding_window
    kinds: str = "F"

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "F": self.F, "L": self.L, "G": self.H // self.Hkv}


def forward(m: Builder, cfg: Gemma) -> Tensor:
    """GemmaForCausalLM.forward(input_ids=ids, labels=ids) (Gemma2ForCausalLM,
    Gemma3ForCausalLM, VaultGemmaForCausalLM): the loss."""
    if m.run.attention == "sdpa" and cfg.attn_softcap:
        # Gemma2PreTrainedModel._supports_sdpa = False; sdpa_attention_forward raises too
        raise ValueError("soft-capped attention scores run eager only (transformers 5.23)")
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = scaled_embedding(m, "embed_tokens", ids, V, E)
        # position_ids = arange(T) + past_seen_tokens, unsqueezed (one storage)
        positions = tr.tensor((T,), I64, False)
        present = sorted(set(cfg.kinds))
        # Gemma3TextModel: position_embeddings per layer type in use (rotary_emb's
        # forward with that type's inv_freq and scaling: the same shapes); the others one
        tables = {k: rotary_tables(m, h) for k in present} if cfg.rope_per_kind else \
            dict.fromkeys(present, rotary_tables(m, h))
        masks = {k: attention_mask(m, h, k, cfg.window) for k in present}

        def extras(kind: str) -> tuple[Tensor, ...]:
            mask = masks[kind]
            return (positions, *tables[kind]) + (() if mask is None else (mask,))

        h = m.layers_by_kind("layers", cfg.kinds,
                             lambda x, kind: _layer(m, cfg, x, tables[kind], masks[kind],
                                                    cfg.window if kind == "S" else 0),
                             h, extras)
        h = rms_norm(m, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.head(h, w, V)
    if cfg.final_softcap:  # logits / cap, tanh, * cap
        logits = ops.mul(ops.tanh(ops.div(logits, cfg.final_softcap)), cfg.final_softcap)
    return causal_lm_loss(logits, ids, V)


def scaled_embedding(m: Builder, name: str, ids: Tensor, V: Dim, E: Dim) -> Tensor:
    """GemmaTextScaledWordEmbedding.forward: embedding(ids) * embed_scale.to(weight.dtype),
    embed_scale a 0-d buffer of sqrt(hidden_size) in the model's dtype (model.to(dtype)
    casts buffers too): the product keeps the scale for the table's gradient, which is the
    buffer itself, not an activation (measured: no 2-byte tensor in a bf16 model)."""
    with m.module(name):
        x = ops.embedding(m.param("weight", V, E), ids)
        scale = m.trace.tensor((), m.run.dtype, False, "buffer",
                               f"{m.trace.scope}.embed_scale")
        return ops.mul(x, ops.to(scale, x.dtype))


def rms_norm(m: Builder, name: str, x: Tensor) -> Tensor:
    """GemmaRMSNorm.forward: output = x.float() * rsqrt(pow(2).mean(-1) + eps); output *
    (1.0 + weight.float()), in fp32; type_as(x). The product keeps the normalised fp32
    tensor (for the weight) and the fp32 (1 + weight) (for the input)."""
    with m.module(name):
        w = m.param("weight", x.shape[-1])
        xf = ops.to(x, F32)
        out = ops.mul(xf, ops.rsqrt(ops.add(ops.mean(ops.pow(xf, 2.0)), RMS_EPS)))
        out = ops.mul(out, ops.add(ops.to(w, F32), 1.0))
        return ops.to(out, x.dtype)


def _layer(m: Builder, cfg: Gemma, h: Tensor, rope: tuple[Tensor, Tensor],
           mask: Tensor | None, window: int = 0) -> Tensor:
    """GemmaDecoderLayer.forward (VaultGemma's: the MLP's norm is pre_feedforward_layernorm);
    Gemma2DecoderLayer / Gemma3DecoderLayer: the attention's and the MLP's outputs normed
    too (post_attention_layernorm, post_feedforward_layernorm) before the residual adds.
    window: a sliding layer's sliding_window (0: full attention)."""
    with m.module("self_attn"):
        a = _attention(m, cfg, rms_norm(m, "input_layernorm", h), rope, mask, window)
    if cfg.sandwich:
        a = rms_norm(m, "post_attention_layernorm", a)
    h = ops.add(h, a)
    x = _mlp(m, rms_norm(m, "pre_feedforward_layernorm" if cfg.sandwich else cfg.ffn_norm, h))
    if cfg.sandwich:
        x = rms_norm(m, "post_feedforward_layernorm", x)
    return ops.add(h, x)


def _mlp(m: Builder, x: Tensor) -> Tensor:
    """GemmaMLP.forward: down_proj(act_fn(gate_proj(x)) * up_proj(x)), act_fn GELU (tanh
    approximation, gelu_pytorch_tanh, or exact: one gelu op either way), no biases."""
    with m.module("mlp"):
        gate = ops.gelu(m.linear("gate_proj", x, m["F"], False))
        return m.linear("down_proj", ops.mul(gate, m.linear("up_proj", x, m["F"], False)),
                        m["E"], False)


def _attention(m: Builder, cfg: Gemma, x: Tensor, rope: tuple[Tensor, Tensor],
               mask: Tensor | None, window: int = 0) -> Tensor:
    """GemmaAttention.forward (Gemma2Attention, Gemma3Attention, VaultGemmaAttention):
    projections viewed as heads and transposed, Gemma 3's q_norm and k_norm on those,
    RoPE, (the cache's copies), eager, SDPA or flash_attention_2 attention (the window and
    Gemma 2's softcap the kernel's arguments), o_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]

    def heads(name: str, n: Dim) -> Tensor:
        return ops.transpose(ops.view(m.linear(name, x, n * dh, cfg.bias), (B, T, n, dh)), 1, 2)

    q, k, v = heads("q_proj", H), heads("k_proj", Hkv), heads("v_proj", Hkv)
    if cfg.qk_norm:
        q, k = rms_norm(m, "q_norm", q), rms_norm(m, "k_norm", k)
    cos, sin = (ops.unsqueeze(t, 1) for t in rope)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    if m.use_cache:  # DynamicLayer / DynamicSlidingWindowLayer.update: torch.cat, a copy
        k, v = (ops.cat([t], -2) for t in (k, v))
    G = m["G"]
    # scaling: query_pre_attn_scalar ** -0.5 (Gemma 2/3, VaultGemma), head_dim ** -0.5
    # (Gemma): a scalar either way, which changes no tensor
    scaling = float(dh.value) ** -0.5
    if m.run.attention == "eager":
        assert mask is not None
        out = eager_attention(m, q, repeat_kv(k, G), repeat_kv(v, G), mask,
                              dropout=cfg.attention_dropout, scaling=scaling,
                              softcap=cfg.attn_softcap)
    elif m.run.attention == "flash":
        out = flash_attention_forward(m, q, k, v, sliding_window=window,
                                      softcap=cfg.attn_softcap)
    else:
        out = sdpa_attention(q, k, v, G, dropout=cfg.attention_dropout, scaling=scaling,
                             mask=mask)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias)
