"""Beam as transformers 5.23 runs it: models/beam/modeling_beam.py (BeamForCausalLM, BeamModel,
BeamDecoderLayer, BeamRMSNorm, BeamRotaryEmbedding, BeamAttention, BeamMLP, BeamMoE,
BeamTopKRouter, BeamExperts). Each layer: a sandwich of four BeamRMSNorms (the weight's
product in fp32, then cast, as Olmo2RMSNorm) around attention and the MLP, each sublayer
added to the residual with depth scaling (Python numbers: nothing kept). The attention: Q and
K normed per head before the transpose; the sliding layers rotate them with fp32 tables
(cos and sin stay fp32: the products fp32, cast back); the full layers have no RoPE and
scale Q by the scalable-softmax factor (1 + position / 2048) ** 0.1, an fp32 (1, 1, T, 1)
tensor made once; the output gated per channel, sigmoid(gate_proj(x) + gate_bias per head).
BeamMLP and the experts' gate run in fp32 (act(gate.float()) * up.float(), cast back). The
first layers dense, the rest routed by DeepSeek-V3's sigmoid router with groups
(moe.sigmoid_router: the ranking's nodes die, only gather's indices stay), renormalised in
place with norm_topk_prob and the block's output times routed_scaling_factor (a number).
The logits are soft-capped in fp32 (logits.float() / cap, tanh, * cap). Shared with Llama
(families/llama.py): the masks, repeat_kv, the eager and SDPA interfaces, rotate_half, the
loss."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor


@dataclass(frozen=True)
class Beam(moe.Moe):
    """moe.Moe's sizes (X experts, K per token, Fe moe_intermediate_size), pattern (D dense,
    E experts per layer), kinds (S sliding with RoPE, N full without), window, norm_topk;
    softcap: final_logit_softcapping (0: none). sandwich: its four norms per layer (names.py
    reads it)."""

    softcap: float = 30.0
    sandwich: bool = True


def forward(m: Builder, cfg: Beam) -> Tensor:
    """BeamForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    one = Dim.const(1)
    ids = tr.input((B, T), I64, "input_ids")
    kinds = cfg.kinds * cfg.L if len(cfg.kinds) == 1 else cfg.kinds
    pattern = cfg.pattern or "E" * cfg.L
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)
        masks = {k: llama.attention_mask(m, h, k, cfg.window) for k in sorted(set(kinds))}
        tables: dict[str, tuple[Tensor, ...]] = {}
        if "N" in kinds:  # compute_attention_scaling(position_ids)[:, None, :, None]
            scale = tr.tensor((one, T), F32, False)
            tables["N"] = (ops.unsqueeze(ops.unsqueeze(scale, 1), -1),)
        if "S" in kinds:  # self.rotary_emb(hidden_states, position_ids, layer_type): fp32
            tables["S"] = llama.rotary_tables(m, h, fp32=True)
        for i, (kind, ffn) in enumerate(zip(kinds, pattern, strict=True)):
            mask = masks[kind]
            extras = (positions, *tables[kind]) + (() if mask is None else (mask,))
            with m.module(f"layers.{i}"), tr.in_layer(i, (h, *extras)):
                h = _layer(m, cfg, h, tables[kind], mask, kind, ffn)
        h = llama.rms_norm(m, "norm", h, fp32_weight=True)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    if cfg.softcap:  # logits.float() / cap; tanh; * cap
        logits = ops.mul(ops.tanh(ops.div(ops.to(logits, F32), cfg.softcap)), cfg.softcap)
    return causal_lm_loss(logits, ids, V)


def _layer(m: Builder, cfg: Beam, h: Tensor, table: tuple[Tensor, ...],
           mask: Tensor | None, kind: str, ffn: str) -> Tensor:
    """BeamDecoderLayer.forward: input_layernorm, attention, post_attention_layernorm, the
    depth-scaled residual add (hidden * 1/sqrt(i) + residual * sqrt((i-1)/i)); then
    pre_feedforward_layernorm, the MLP, post_feedforward_layernorm, the same add."""
    def norm(name: str, x: Tensor) -> Tensor:
        return llama.rms_norm(m, name, x, fp32_weight=True)

    with m.module("self_attn"):
        a = _attention(m, cfg, norm("input_layernorm", h), table, mask, kind)
    h = ops.add(ops.mul(norm("post_attention_layernorm", a), 0.5), ops.mul(h, 0.5))
    x = norm("pre_feedforward_layernorm", h)
    y = moe_block(m, cfg, x) if ffn == "E" else _mlp(m, x)
    return ops.add(ops.mul(norm("post_feedforward_layernorm", y), 0.5), ops.mul(h, 0.5))


def _attention(m: Builder, cfg: Beam, x: Tensor, table: tuple[Tensor, ...],
               mask: Tensor | None, kind: str) -> Tensor:
    """BeamAttention.forward: q_norm(q_proj(x).view(...)).transpose(1, 2), k likewise, v;
    RoPE in fp32 cast back (sliding layers) or (q.float() * attention_scaling).to(q's
    dtype) (full layers); attention; gate = gate_proj(x).view_as(out) + gate_bias[None,
    None, :, None]; out * sigmoid(gate), reshaped, o_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]

    def heads(name: str, n: Dim, bias: bool, norm: str = "") -> Tensor:
        y = ops.view(m.linear(name, x, n * dh, bias), (B, T, n, dh))
        if norm:
            y = llama.rms_norm(m, norm, y, fp32_weight=True)
        return ops.transpose(y, 1, 2)

    q, k = heads("q_proj", H, cfg.bias_q, "q_norm"), heads("k_proj", Hkv, cfg.bias_k, "k_norm")
    v = heads("v_proj", Hkv, cfg.bias_v)
    if kind == "S":  # apply_rotary_pos_emb: fp32 cos and sin, q_embed.to(q_type)
        cos, sin = (ops.unsqueeze(t, 1) for t in table)
        q, k = (ops.to(llama.apply_rotary(t, cos, sin), t.dtype) for t in (q, k))
    else:
        q = ops.to(ops.mul(ops.to(q, F32), table[0]), q.dtype)
    # (flash: sliding_window=self.sliding_window, None: full)
    out = llama.attend(m, q, k, v, mask, dropout=cfg.attention_dropout,
                       window=cfg.window if kind == "S" else 0)
    gate = ops.view(m.linear("gate_proj", x, H * dh, False), out.shape)
    bias = ops.unsqueeze(ops.unsqueeze(ops.unsqueeze(m.param("gate_bias", H), 0), 0), -1)
    out = ops.mul(out, ops.sigmoid(ops.add(gate, bias)))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias_o)


def _mlp(m: Builder, x: Tensor) -> Tensor:
    """BeamMLP.forward: gate = gate_proj(x); up = up_proj(x); (act_fn(gate.float()) *
    up.float()).to(gate.dtype); down_proj."""
    with m.module("mlp"):
        F, E = m["F"], m["E"]
        gate = m.linear("gate_proj", x, F, False)
        up = m.linear("up_proj", x, F, False)
        h = ops.to(ops.mul(ops.silu(ops.to(gate, F32)), ops.to(up, F32)), gate.dtype)
        return m.linear("down_proj", h, E, False)


def moe_block(m: Builder, cfg: Beam, x: Tensor) -> Tensor:
    """BeamMoE.forward: the router on the flattened tokens, the experts (their gate in fp32:
    BeamExperts._apply_gate, on either path), times routed_scaling_factor (a number)."""
    B, T, E = x.shape
    with m.module("mlp"):
        flat = ops.view(x, (B * T, E))
        weights, chosen = moe.sigmoid_router(m, cfg, flat)
        with m.module("experts"):
            run = moe.grouped_experts if cfg.grouped else moe.eager_experts
            out = run(m, flat, chosen, weights, fp32_gate=True)
        return ops.reshape(ops.mul(out, 1.0), (B, T, E))
