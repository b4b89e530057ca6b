"""DBRX as transformers 5.23 runs it: models/dbrx/modeling_dbrx.py (DbrxForCausalLM, DbrxModel,
DbrxBlock, DbrxNormAttentionNorm, DbrxAttention, DbrxRotaryEmbedding, apply_rotary_pos_emb,
repeat_kv, eager_attention_forward, DbrxFFN, DbrxRouter, DbrxExperts, DbrxExpertGLU).

Every block: nn.LayerNorm without a bias (norm_1), the fused Wqkv clamped to ±clip_qkv (the
clamp keeps the projection's output) and split into Q, K and V (views), Llama's RoPE and
attention (GQA with kv_n_heads), out_proj, resid_pdrop's dropout, the residual; norm_2;
DbrxFFN (then resid_pdrop's dropout and the residual): the router's input
multiplied in place by uniform noise in training where moe_jitter_eps is set (the multiply
keeps the noise), router.layer (an nn.Linear), softmax over the experts in the logits' dtype,
topk, the top values divided by their moe_normalize_expert_weights-norm (torch.norm: a
linalg_vector_norm keeping its input and result; the division keeps both); DbrxExperts'
loop over the experts hit, each taking its tokens and its (Fe, E) slices of the fused
w1, v1, w2 (views of one parameter each): x @ w1ᵀ, x @ v1ᵀ, act(gate) · up, @ w2, times the
routing weight, index_add_-ed into zeros. As in moe.py the loop runs once for all K·B·T
slots (its saved tensors sum over the experts to the same bytes). DbrxExperts has no
grouped_mm path (no @use_experts_implementation); peft's all-linear adapts Wqkv, out_proj
and router.layer, never the experts' plain parameters (measured)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import I64, Tensor


@dataclass(frozen=True)
class Dbrx(moe.Moe):
    """moe.Moe's sizes (X moe_num_experts, K moe_top_k, Fe ffn_hidden_size; F = Fe) and
    Llama's (Hkv kv_n_heads, attention_dropout attn_pdrop); jitter: moe_jitter_eps is set;
    dropout: resid_pdrop, after the attention and after the FFN (emb_pdrop is read by no
    forward). router "dbrx" (its top values divided by their norm:
    moe_normalize_expert_weights set, as family_of requires)."""

    jitter: bool = True
    dropout: float = 0.0


def forward(m: Builder, cfg: Dbrx) -> Tensor:
    """DbrxForCausalLM.forward(input_ids=ids, labels=ids): the loss (output_router_logits
    off, DbrxConfig's default: no auxiliary loss)."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("transformer"):
        h = m.embedding("wte", ids, V, E)  # (emb_pdrop: read by no forward)
        positions = tr.tensor((T,), I64, False)
        cos, sin = llama.rotary_tables(m, h)
        mask = llama.attention_mask(m, h, "F", 0)
        extras = (positions, cos, sin) + (() if mask is None else (mask,))
        h = m.layers("blocks", lambda x: _block(m, cfg, x, cos, sin, mask), h, extras)
        h = _norm(m, "norm_f", h)
    with m.module("lm_head"):
        logits = m.lm_head_lora(h, ops.linear(h, m.param("weight", V, E)), V)
    return causal_lm_loss(logits, ids, V)


def _norm(m: Builder, name: str, h: Tensor) -> Tensor:
    """nn.LayerNorm(d_model, bias=False)."""
    with m.module(name):
        return ops.layer_norm(h, m.param("weight", h.shape[-1]), None)


def _block(m: Builder, cfg: Dbrx, h: Tensor, cos: Tensor, sin: Tensor,
           mask: Tensor | None) -> Tensor:
    """DbrxBlock.forward: DbrxNormAttentionNorm (norm_1, attention, dropout with
    resid_pdrop, the residual, norm_2), DbrxFFN, dropout with resid_pdrop, the residual."""
    with m.module("norm_attn_norm"):
        x = _norm(m, "norm_1", h)
        with m.module("attn"):
            a = _attention(m, cfg, x, cos, sin, mask)
        h = ops.add(m.dropout(a, cfg.dropout), h)
        x = _norm(m, "norm_2", h)
    return ops.add(h, m.dropout(_ffn(m, cfg, x), cfg.dropout))


def _attention(m: Builder, cfg: Dbrx, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None) -> Tensor:
    """DbrxAttention.forward: qkv_states = Wqkv(x).clamp(min=-clip_qkv, max=clip_qkv);
    split into E, Hkv·dh, Hkv·dh (views), each viewed as heads and transposed; RoPE;
    (the cache); the attention interface; reshape, contiguous, out_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]
    qkv = ops.clamp(m.linear("Wqkv", x, (H + 2 * Hkv) * dh, False))

    def heads(start: int, n: Dim) -> Tensor:
        y = ops.narrow(qkv, -1, start, n * dh)
        return ops.transpose(ops.view(y, (B, T, n, dh)), 1, 2)

    q, k, v = heads(0, H), heads(H.value * dh.value, Hkv), \
        heads((H.value + Hkv.value) * dh.value, Hkv)
    c, s = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    q, k = llama.apply_rotary(q, c, s), llama.apply_rotary(k, c, s)
    if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
        k, v = (ops.cat([t], -2) for t in (k, v))
    G, scaling = m["G"], float(dh.value) ** -0.5
    if m.run.attention == "eager":
        assert mask is not None
        out = llama.eager_attention(m, q, llama.repeat_kv(k, G), llama.repeat_kv(v, G), mask,
                                    dropout=cfg.attention_dropout, scaling=scaling)
    else:
        out = llama.sdpa_attention(q, k, v, G, dropout=cfg.attention_dropout,
                                   scaling=scaling, mask=mask)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("out_proj", out, m["E"], False)


def _ffn(m: Builder, cfg: Dbrx, x: Tensor) -> Tensor:
    """DbrxFFN.forward: the router's logits, route_tokens_to_experts, the experts."""
    B, T, E = x.shape
    N = B * T
    with m.module("ffn"):
        with m.module("router"):
            if cfg.jitter:
                # DbrxRouter: hidden_states *= torch.empty_like(hidden_states).uniform_(...):
                # in place on norm_2's output, which the experts then read too
                with m.trace.no_grad():
                    noise = m.trace.tensor(x.shape, x.dtype, False)
                x = ops.mul_(x, noise)
            logits = m.linear("layer", ops.view(x, (N, E)), m["X"], False)
        weights, chosen = _route(m, logits)
        with m.module("experts"):
            out = _experts(m, ops.reshape(x, (N, E)), chosen, weights)
        return ops.view(out, (B, T, E))


def _route(m: Builder, logits: Tensor) -> tuple[Tensor, Tensor]:
    """DbrxFFN.route_tokens_to_experts: softmax(router_logits, dim=1, dtype=the logits'),
    topk; the top values / torch.norm(values, p=moe_normalize_expert_weights, dim=-1,
    keepdim=True) (a linalg_vector_norm: its input and result kept whatever p)."""
    values, chosen = ops.topk(ops.softmax(logits), m["K"])
    return ops.div(values, ops.vector_norm(values)), chosen


def _experts(m: Builder, flat: Tensor, chosen: Tensor, weights: Tensor) -> Tensor:
    """DbrxExperts.forward, its loop over the experts hit run once for the n = K·B·T slots
    (moe.py's docstring): torch.where(expert_mask[expert_idx]) (idx, token_idx: the columns
    of one int64 nonzero); each of w1, v1, w2 viewed (X, Fe, E) and indexed by the expert
    (views); DbrxExpertGLU(hidden_states[token_idx], w1, v1, w2): x.matmul(w1.T),
    x.matmul(v1.T), act(gate) * up, .matmul(w2); times top_k_weights[token_idx, idx, None];
    next_states.index_add_(0, token_idx, states)."""
    X, Fe, E = m["X"], m["Fe"], flat.shape[-1]
    with m.module("mlp"):
        w1, v1, w2 = (m.param(name, X * Fe, E) for name in ("w1", "v1", "w2"))
    w1, v1, w2 = (moe._expert_slice(m, ops.view(w, (X, Fe, E))) for w in (w1, v1, w2))
    n = chosen.shape[0] * chosen.shape[1]
    final = m.trace.tensor(flat.shape, flat.dtype, False)  # torch.zeros_like(hidden_states)
    with m.trace.no_grad():
        pairs = m.trace.tensor((n, Dim.const(2)), I64, False)
    top_k_pos, token_idx = (ops.select(pairs, 1, j) for j in (0, 1))
    state = ops.index(flat, [token_idx])
    with m.module("mlp"):
        gate = ops.matmul(state, ops.transpose(w1, 0, 1))
        up = ops.matmul(state, ops.transpose(v1, 0, 1))
        with m.module("activation_fn"):
            gate = ops.silu(gate)
        h = ops.matmul(ops.mul(gate, up), w2)
    h = ops.mul(h, ops.unsqueeze(ops.index(weights, [token_idx, top_k_pos]), -1))
    return ops.index_add_(final, token_idx, h)
