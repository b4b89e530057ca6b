"""Flint as transformers 5.23 runs it: models/flint/modeling_flint.py (FlintForCausalLM,
FlintModel, FlintDecoderLayer, FlintRMSNorm, FlintAttention, eager_attention_forward, FlintMLP,
FlintTopKRouter, FlintExperts, FlintSparseMoeBlock). Llama's pre-norm layers with FlintRMSNorm
(the weight's product in fp32, then cast), q/k norms per head before the transpose, RoPE in
the sliding layers only (layer_types), eager attention only (no SDPA) with its scores in fp32
(query.float() @ key.float().T, autocast off) and a learned sink column per head: softmax
over torch.cat([scores, sinks]), the sink column dropped (a view), cast to V's dtype. Dense
layers (mlp_only_layers, decoder_sparse_step) run FlintMLP; the others the sparse block:
FlintTopKRouter (F.linear of fp32 copies, topk of the sigmoid scores, divided by their sum
with norm_topk_prob), the experts (moe.py's eager loop or grouped_mm) and the ungated shared
expert, a FlintMLP of shared_expert_intermediate_size (0 wide in some configs: its linears
still keep their input), added."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import autocast, ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor


@dataclass(frozen=True)
class Flint(moe.Moe):
    """moe.Moe's sizes (X, K, Fe; Fs the shared expert's width, shared_width False where
    it is 0) and pattern (D dense, E sparse), Llama's kinds (S sliding with RoPE, N full
    without) and window, norm_topk: norm_topk_prob."""

    shared_width: bool = True


def forward(m: Builder, cfg: Flint) -> Tensor:
    """FlintForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    kinds = cfg.kinds * cfg.L if len(cfg.kinds) == 1 else cfg.kinds
    pattern = cfg.pattern or "E" * cfg.L
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)
        masks = {k: llama.attention_mask(m, h, k, cfg.window) for k in sorted(set(kinds))}
        cos, sin = llama.rotary_tables(m, h)
        for i, (kind, ffn) in enumerate(zip(kinds, pattern, strict=True)):
            mask = masks[kind]
            extras = (positions, cos, sin) + (() if mask is None else (mask,))
            with m.module(f"layers.{i}"), tr.in_layer(i, (h, *extras)):
                h = _layer(m, cfg, h, cos, sin, mask, kind, ffn)
        h = llama.rms_norm(m, "norm", h, fp32_weight=True)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _layer(m: Builder, cfg: Flint, h: Tensor, cos: Tensor, sin: Tensor,
           mask: Tensor | None, kind: str, ffn: str) -> Tensor:
    """FlintDecoderLayer.forward: pre-norm attention and MLP around the residual."""
    with m.module("self_attn"):
        a = _attention(m, cfg, llama.rms_norm(m, "input_layernorm", h, fp32_weight=True),
                       cos, sin, mask, kind)
    h = ops.add(h, a)
    x = llama.rms_norm(m, "post_attention_layernorm", h, fp32_weight=True)
    return ops.add(h, _sparse_block(m, cfg, x) if ffn == "E" else llama._mlp(m, cfg, x))


def _attention(m: Builder, cfg: Flint, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None, kind: str) -> Tensor:
    """FlintAttention.forward with eager_attention_forward: repeat_kv; matmul(query.float(),
    key.float().transpose(2, 3)) * scaling + mask; softmax(cat([scores, sinks.reshape(1,
    -1, 1, 1).expand(B, H, T, 1)], -1))[..., :-1].to(V's dtype); dropout; the product with
    V, transposed, contiguous; o_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]
    one = Dim.const(1)

    def heads(name: str, n: Dim, bias: bool, norm: str = "") -> Tensor:
        y = ops.view(m.linear(name, x, n * dh, bias), (B, T, n, dh))
        if norm:
            y = llama.rms_norm(m, norm, y, fp32_weight=True)
        return ops.transpose(y, 1, 2)

    q, k = heads("q_proj", H, cfg.bias_q, "q_norm"), heads("k_proj", Hkv, cfg.bias_k, "k_norm")
    v = heads("v_proj", Hkv, cfg.bias_v)
    if kind == "S":
        c, s = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
        q, k = llama.apply_rotary(q, c, s), llama.apply_rotary(k, c, s)
    if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
        k, v = (ops.cat([t], -2) for t in (k, v))
    assert mask is not None  # eager only
    G = m["G"]
    k, v = llama.repeat_kv(k, G), llama.repeat_kv(v, G)
    with autocast.disabled(m.trace):  # maybe_autocast(enabled=False)
        w = ops.matmul(ops.to(q, F32), ops.transpose(ops.to(k, F32), 2, 3))
    w = ops.add(ops.mul(w, float(dh.value) ** -0.5), mask)
    sinks = ops.expand(ops.view(m.param("sinks", H), (one, H, one, one)), (B, H, T, one))
    probs = ops.narrow(ops.softmax(ops.cat([w, sinks], -1)), -1, 0, T)  # [..., :-1]
    probs = m.dropout(ops.to(probs, v.dtype), cfg.attention_dropout)
    out = ops.contiguous(ops.transpose(ops.matmul(probs, v), 1, 2))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias_o)


def _sparse_block(m: Builder, cfg: Flint, x: Tensor) -> Tensor:
    """FlintSparseMoeBlock.forward: hidden_states.view(-1, E); the router; the experts; plus
    self.shared_expert(hidden_states); reshaped back."""
    B, T, E = x.shape
    with m.module("mlp"):
        flat = ops.view(x, (B * T, E))
        with m.module("gate"):
            # F.linear(hidden_states.float(), self.weight.float()) with autocast off;
            # topk(router_logits.sigmoid(), top_k) (its values used: the indices kept)
            w = m.param("weight", m["X"], E)
            with autocast.disabled(m.trace):
                logits = ops.linear(ops.to(flat, F32), ops.to(w, F32))
            scores = ops.sigmoid(logits)
            weights, chosen = ops.topk(scores, m["K"])
            if cfg.norm_topk:  # routing_weights / routing_weights.sum(dim=-1, keepdim=True)
                weights = ops.div(weights, ops.sum_dim(weights, -1, keepdim=True))
        with m.module("experts"):
            run = moe.grouped_experts if cfg.grouped else moe.eager_experts
            out = run(m, flat, chosen, weights)
        out = ops.add(out, _shared_expert(m, cfg, flat))
        return ops.reshape(out, (B, T, E))


def _shared_expert(m: Builder, cfg: Flint, x: Tensor) -> Tensor:
    """FlintMLP(config, shared_expert_intermediate_size): down(silu(gate(x)) * up(x)); 0
    wide, its linears still keep x."""
    F = m["Fs"] if cfg.shared_width else Dim.const(0)
    with m.module("shared_expert"):
        gate = ops.silu(m.linear("gate_proj", x, F, False))
        return m.linear("down_proj", ops.mul(gate, m.linear("up_proj", x, F, False)), m["E"],
                        False)
