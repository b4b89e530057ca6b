"""Llama 4's text decoder as transformers 5.23 runs it: models/llama4/modeling_llama4.py
(Llama4ForCausalLM, Llama4TextModel, Llama4TextDecoderLayer, Llama4TextRMSNorm,
Llama4TextL2Norm, Llama4TextRotaryEmbedding, apply_rotary_emb, Llama4TextAttention, its
eager_attention_forward, Llama4TextMLP, Llama4Router, Llama4TextExperts, Llama4TextMoe).

Llama's pre-norm layers with two kinds of attention (layer_types, from no_rope_layers): a
RoPE layer ("C") attends within chunks of attention_chunk_size (create_chunked_causal_mask:
SDPA gets a bool mask once T reaches the chunk, as a sliding layer's) and, with use_qk_norm,
normalises Q and K over each head (Llama4TextL2Norm, no weight) after the rotation; a NoPE
layer ("N") attends causally to every key and scales Q by attn_temperature_tuning's
per-position factor (an fp32 (T,) tensor, which the product keeps). RoPE runs on complex
numbers: the (1, T, dh/2) complex64 freqs_cis made once, each head's pairs viewed as
complex, multiplied (the product keeps freqs_cis), viewed back as real and cast. The eager
softmax runs in the scores' dtype (no fp32 upcast).

The feed-forward (interleave_moe_layer_step / moe_layers): dense layers a Llama4TextMLP of
intermediate_size_mlp; the others Llama4TextMoe, whose experts see every token: the router
(an nn.Linear) picks top-k logits, scatters them into -inf, takes the fp32 sigmoid (zero
for the experts not picked), and every token, repeated once per expert and scaled by its
score, runs through every expert as two bmm over the 3-D weights; the shared expert (a
Llama4TextMLP of intermediate_size) adds the experts' sum. No experts implementation
applies: the bytes do not depend on the routing."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import C64, F32, I64, Tensor


@dataclass(frozen=True)
class Llama4(moe.Moe):
    """moe.Moe's sizes: X experts, K per token, Fe the experts' and the shared expert's
    width (intermediate_size), F the dense layers' (intermediate_size_mlp); pattern: per
    layer D (dense) or E (experts); kinds: per layer C (chunked, RoPE) or N (NoPE, full);
    window: attention_chunk_size; l2_qk: use_qk_norm (the RoPE layers' L2 norms)."""

    l2_qk: bool = True


def forward(m: Builder, cfg: Llama4) -> Tensor:
    """Llama4ForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        # position_ids = arange(T) + past_seen_tokens, unsqueezed (one storage)
        positions = tr.tensor((T,), I64, False)
        # causal_mask_mapping: full_attention (create_causal_mask) and chunked_attention
        # (create_chunked_causal_mask, a sliding layer's mask for SDPA)
        masks = {k: llama.attention_mask(m, h, "S" if k == "C" else "F", cfg.window)
                 for k in sorted(set(cfg.kinds))}
        freqs = _freqs_cis(m)
        for i, (kind, ffn) in enumerate(zip(cfg.kinds, cfg.pattern, strict=True)):
            mask = masks[kind]
            extras = (positions, freqs) + (() if mask is None else (mask,))
            with m.module(f"layers.{i}"), tr.in_layer(i, (h, *extras)):
                h = _layer(m, cfg, h, freqs, mask, kind, ffn)
        h = llama.rms_norm(m, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _freqs_cis(m: Builder) -> Tensor:
    """Llama4TextRotaryEmbedding.forward under no_grad: freqs = position_ids[..., None]
    .float() * inv_freq; torch.polar(ones_like(freqs), freqs) * attention_scaling: a
    (1, T, dh/2) complex64 tensor, once for the model."""
    with m.trace.no_grad(), m.module("rotary_emb"):
        polar = m.trace.tensor((Dim.const(1), m["T"], m["dh"].halved()), C64, False)
        return ops.mul(polar, 1.0)


def _layer(m: Builder, cfg: Llama4, h: Tensor, freqs: Tensor, mask: Tensor | None,
           kind: str, ffn: str) -> Tensor:
    """Llama4TextDecoderLayer.forward: pre-norm attention and feed-forward around the
    residual (residual + hidden_states.view(residual.shape))."""
    with m.module("self_attn"):
        a = _attention(m, cfg, llama.rms_norm(m, "input_layernorm", h), freqs, mask, kind)
    h = ops.add(h, a)
    x = llama.rms_norm(m, "post_attention_layernorm", h)
    out = _moe(m, cfg, x) if ffn == "E" else llama._mlp(m, cfg, x, "feed_forward")
    return ops.add(h, ops.view(out, h.shape))


def _attention(m: Builder, cfg: Llama4, x: Tensor, freqs: Tensor, mask: Tensor | None,
               kind: str) -> Tensor:
    """Llama4TextAttention.forward: Q and K viewed as (B, T, heads, dh), V transposed too;
    RoPE and the L2 norms (RoPE layers) or the temperature (NoPE layers); Q and K
    transposed; the attention; o_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]
    q = ops.view(m.linear("q_proj", x, H * dh, cfg.bias_q), (B, T, H, dh))
    k = ops.view(m.linear("k_proj", x, Hkv * dh, cfg.bias_k), (B, T, Hkv, dh))
    v = ops.transpose(ops.view(m.linear("v_proj", x, Hkv * dh, cfg.bias_v),
                               (B, T, Hkv, dh)), 1, 2)
    if kind == "C":
        q, k = _rotary(q, freqs), _rotary(k, freqs)
        if cfg.l2_qk:
            with m.module("qk_norm"):
                q, k = _l2_norm(q), _l2_norm(k)
    else:  # attn_temperature_tuning on the NoPE layers
        q = _temperature(m, q)
    q, k = ops.transpose(q, 1, 2), ops.transpose(k, 1, 2)
    if m.use_cache:  # DynamicLayer / DynamicSlidingWindowLayer.update: torch.cat, a copy
        k, v = (ops.cat([t], -2) for t in (k, v))
    G = m["G"]
    scaling = float(dh.value) ** -0.5
    if m.run.attention == "eager":
        assert mask is not None
        out = _eager(m, q, llama.repeat_kv(k, G), llama.repeat_kv(v, G), mask, scaling,
                     cfg.attention_dropout)
    else:
        out = llama.sdpa_attention(q, k, v, G, dropout=cfg.attention_dropout,
                                   scaling=scaling, mask=mask)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias_o)


def _rotary(x: Tensor, freqs: Tensor) -> Tensor:
    """apply_rotary_emb for one of Q, K: view_as_complex(x.float().reshape(..., -1, 2)) *
    freqs_cis[:, :, None, :] (the product keeps freqs_cis for x's gradient), view_as_real,
    flatten(3), type_as(x)."""
    B, T, n, dh = x.shape
    pairs = ops.reshape(ops.to(x, F32), (B, T, n, dh.halved(), Dim.const(2)))
    rotated = ops.mul(ops.view_as_complex(pairs), ops.unsqueeze(freqs, 2))
    return ops.to(ops.reshape(ops.view_as_real(rotated), (B, T, n, dh)), x.dtype)


def _l2_norm(x: Tensor) -> Tensor:
    """Llama4TextL2Norm.forward: (x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) over
    x.float(), type_as(x)."""
    xf = ops.to(x, F32)
    y = ops.mul(xf, ops.rsqrt(ops.add(ops.mean(ops.pow(xf, 2.0)), 1e-6)))
    return ops.to(y, x.dtype)


def _temperature(m: Builder, q: Tensor) -> Tensor:
    """attn_scales = log1p(floor((positions.float() + 1) / floor_scale)) * attn_scale + 1,
    an fp32 (T,) tensor (no grad) viewed (1, T, 1, 1) and expanded over B;
    (query_states * attn_scales).to(query_states.dtype): the product, fp32, keeps it."""
    B, T = m["B"], m["T"]
    one = Dim.const(1)
    with m.trace.no_grad():
        scales = m.trace.tensor((T,), F32, False)
    scales = ops.expand(ops.view(scales, (one, T, one, one)), (B, T, one, one))
    return ops.to(ops.mul(q, scales), q.dtype)


def _eager(m: Builder, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scaling: float,
           dropout: float) -> Tensor:
    """Llama 4's eager_attention_forward: matmul(query, key.T) * scaling + mask; softmax in
    the scores' dtype (not upcast); dropout; the product with V, transposed, contiguous."""
    w = ops.add(ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), scaling), mask)
    w = m.dropout(ops.softmax(w), dropout)
    return ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))


def _moe(m: Builder, cfg: Llama4, x: Tensor) -> Tensor:
    """Llama4TextMoe.forward: the router's scores; routed_in = hidden_states.repeat(X, 1) *
    router_scores.transpose(0, 1).reshape(-1, 1) (a copy: the transpose is not
    contiguous); the experts; out = shared_expert(hidden_states), out.add_(the experts'
    output summed over X) (in place: the shared expert's output, which nothing keeps)."""
    B, T, E = x.shape
    N, X = B * T, m["X"]
    with m.module("feed_forward"):
        flat = ops.reshape(x, (N, E))
        scores = _router(m, flat)
        routed = ops.mul(ops.repeat(flat, 0, X),
                         ops.reshape(ops.transpose(scores, 0, 1), (X * N, Dim.const(1))))
        with m.module("experts"):
            routed = _experts(m, routed, N)
        out = llama._mlp(m, cfg, flat, "shared_expert", "Fe")
        return ops.add(out, ops.sum_dim(ops.reshape(routed, (X, N, E)), 0))


def _router(m: Builder, flat: Tensor) -> Tensor:
    """Llama4Router.forward: router_logits = linear(x); torch.topk(logits, top_k, dim=1)
    (topk keeps its indices); full_like(logits, -inf).scatter_(1, indices, values) (keeps
    the indices); sigmoid(scores.float()) (keeps its fp32 result), cast to the logits'
    dtype. Returns the (B·T, X) scores."""
    logits = m.linear("router", flat, m["X"], False)
    with m.module("router"):
        values, indices = ops.topk(logits, m["K"])
        with m.trace.no_grad():
            full = m.trace.tensor(logits.shape, logits.dtype, False)
        scores = ops.scatter_(full, indices, values)
        return ops.to(ops.sigmoid(ops.to(scores, F32)), scores.dtype)


def _experts(m: Builder, routed: Tensor, N: Dim) -> Tensor:
    """Llama4TextExperts.forward: hidden_states.view(X, -1, E); gate_up = bmm(hidden,
    gate_up_proj) (X, E, 2·Fe); gate, up = chunk(2) (views); bmm(up * act_fn(gate),
    down_proj) (X, Fe, E); viewed (X·B·T, E)."""
    X, E, Fe = m["X"], m["E"], m["Fe"]
    gate_up_w = m.param("gate_up_proj", X, E, 2 * Fe)
    down_w = m.param("down_proj", X, Fe, E)
    h = ops.view(routed, (X, N, E))
    gate, up = ops.split(ops.bmm(h, gate_up_w), Fe, -1)
    with m.module("act_fn"):
        a = ops.silu(gate)
    out = ops.bmm(ops.mul(up, a), down_w)
    return ops.view(out, (routed.shape[0], E))

