"""Cohere (Command R) and Cohere 2 as transformers 5.23 runs them:
models/cohere/modeling_cohere.py (CohereForCausalLM, CohereModel, CohereDecoderLayer,
CohereLayerNorm, CohereRotaryEmbedding, rotate_half, apply_rotary_pos_emb, CohereAttention,
CohereMLP) and models/cohere2/modeling_cohere2.py (Cohere2ForCausalLM: the same layer with
a causal or a sliding-window mask by layer_types, RoPE in the sliding layers only, no q/k
norms). Each layer is parallel: one CohereLayerNorm feeds attention and the MLP, whose
outputs are added to the residual together. CohereLayerNorm is written out in fp32 (the
centred input computed twice, its square, 1/std, the weight cast to fp32); RoPE rotates
interleaved pairs (x[..., ::2], x[..., 1::2], stacked) in fp32; the logits are scaled by
logit_scale. Shared with Llama (families/llama.py): the rotary tables, the masks, repeat_kv,
the eager and SDPA attention interfaces, the gated SiLU MLP, the loss."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor

LAYER_NORM_EPS = 1e-5


@dataclass(frozen=True)
class Cohere(llama.Llama):
    """Llama's sizes and flags as they apply (tied, attention biases on q, k, v, o, the
    sliding window), and Cohere's own: qk_norm (use_qk_norm: a CohereLayerNorm over each
    head of Q and K, its weight (heads, head_dim)), logit_scale (CohereConfig's default; a
    Python number that changes no tensor). kinds: each layer's attention, F full, S
    sliding, N full without RoPE (Cohere 2's full layers)."""

    logit_scale: float = 0.0625
    cohere_qk_norm: bool = False


@dataclass(frozen=True)
class CohereMoe(Cohere, moe.Moe):
    """Cohere 2 MoE (models/cohere2_moe/modeling_cohere2_moe.py): Cohere 2's layers (the
    same Cohere2MoeLayerNorm, RoPE in the sliding layers only) with Cohere2MoeSparseMoeBlock
    for the MLP: moe.Moe's X, K, Fe (intermediate_size), Fs and router "cohere2_moe"
    (Cohere2MoeTopKRouter with expert_selection_fn softmax); shared_experts: its
    Cohere2MoeMLP of intermediate_size · num_shared_experts."""


def moe_forward(m: Builder, cfg: CohereMoe) -> Tensor:
    """Cohere2MoeForCausalLM.forward(input_ids=ids, labels=ids): every layer's MLP a
    Cohere2MoeSparseMoeBlock (moe.sparse_moe_block)."""
    return forward(m, cfg, lambda m, c, x: moe.sparse_moe_block(m, cfg, x))


def forward(m: Builder, cfg: Cohere, mlp: llama.Mlp = llama._mlp) -> Tensor:
    """CohereForCausalLM.forward(input_ids=ids, labels=ids) (Cohere2ForCausalLM): the
    loss. mlp: each layer's (Cohere 2 MoE's experts)."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)
        cos, sin = llama.rotary_tables(m, h)
        masks = {k: llama.attention_mask(m, h, k, cfg.window) for k in sorted(set(cfg.kinds))}

        def extras(kind: str) -> tuple[Tensor, ...]:
            mask = masks[kind]
            return (positions, cos, sin) + (() if mask is None else (mask,))

        h = m.layers_by_kind("layers", cfg.kinds,
                             lambda x, kind: _layer(m, cfg, x, cos, sin, masks[kind], kind,
                                                    mlp),
                             h, extras)
        h = layer_norm(m, "norm", h, (E,))
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.mul(ops.linear(h, w), cfg.logit_scale)  # logits * self.logit_scale
    return causal_lm_loss(logits, ids, V)


def layer_norm(m: Builder, name: str, h: Tensor, shape: tuple[Dim, ...]) -> Tensor:
    """CohereLayerNorm.forward: x = h.to(float32); mean = x.mean(-1, keepdim=True);
    variance = (x - mean).pow(2).mean(-1, keepdim=True); x = (x - mean) * rsqrt(variance +
    eps); weight.to(float32) * x; .to(input_dtype). The weight's shape: (hidden,) or, over
    each head, (heads, head_dim)."""
    with m.module(name):
        w = m.param("weight", *shape)
        x = ops.to(h, F32)
        mean = ops.mean(x)
        variance = ops.mean(ops.pow(ops.sub(x, mean), 2.0))
        x = ops.mul(ops.sub(x, mean), ops.rsqrt(ops.add(variance, LAYER_NORM_EPS)))
        return ops.to(ops.mul(ops.to(w, F32), x), h.dtype)


def _layer(m: Builder, cfg: Cohere, h: Tensor, cos: Tensor, sin: Tensor,
           mask: Tensor | None, kind: str, mlp: llama.Mlp) -> Tensor:
    """CohereDecoderLayer.forward: x = input_layernorm(h); h + self_attn(x) + mlp(x)."""
    x = layer_norm(m, "input_layernorm", h, (m["E"],))
    with m.module("self_attn"):
        a = _attention(m, cfg, x, cos, sin, mask, rotate=kind != "N",
                       window=cfg.window if kind == "S" else 0)
    return ops.add(ops.add(h, a), mlp(m, cfg, x))


def _attention(m: Builder, cfg: Cohere, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None, *, rotate: bool, window: int = 0) -> Tensor:
    """CohereAttention.forward: q, k, v viewed as heads, q_norm and k_norm on those views
    (use_qk_norm), transposed, RoPE (Cohere2Attention: in sliding layers only), (the
    cache's copies), eager, SDPA or flash_attention_2 attention (window: a sliding layer's
    sliding_window, the kernel's), o_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]

    def heads(name: str, n: Dim, bias: bool, norm: str = "") -> Tensor:
        y = ops.view(m.linear(name, x, n * dh, bias), (B, T, n, dh))
        if norm and cfg.cohere_qk_norm:
            y = layer_norm(m, norm, y, (n, dh))
        return ops.transpose(y, 1, 2)

    q = heads("q_proj", H, cfg.bias_q, "q_norm")
    k = heads("k_proj", Hkv, cfg.bias_k, "k_norm")
    v = heads("v_proj", Hkv, cfg.bias_v)
    if rotate:
        c, s = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
        q, k = _apply_rotary(q, c, s), _apply_rotary(k, c, s)
    out = llama.attend(m, q, k, v, mask, dropout=cfg.attention_dropout, window=window)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias_o)


def _apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Cohere's apply_rotary_pos_emb: x.float(); (x * cos) + (rotate_half(x) * sin), cast
    back to x's dtype; rotate_half: torch.stack([-x[..., 1::2], x[..., ::2]],
    dim=-1).flatten(-2) (the stack a new tensor, its flatten a view)."""
    dtype = x.dtype
    x = ops.to(x, F32)
    half = x.shape[-1].halved()
    x1, x2 = ops.slice_step(x, -1, 0, half, 2), ops.slice_step(x, -1, 1, half, 2)
    stacked = ops.cat([ops.unsqueeze(ops.neg(x2), -1), ops.unsqueeze(x1, -1)], -1)
    rotated = ops.view(stacked, x.shape)
    return ops.to(ops.add(ops.mul(x, cos), ops.mul(rotated, sin)), dtype)
