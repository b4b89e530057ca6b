"""GPT-J and CodeGen as transformers 5.23 runs them (eager attention only: neither class
supports SDPA): models/gptj/modeling_gptj.py (GPTJForCausalLM, GPTJModel, GPTJBlock,
GPTJAttention, GPTJMLP, create_sinusoidal_positions, rotate_every_two,
apply_rotary_pos_emb) and models/codegen/modeling_codegen.py (CodeGenForCausalLM,
CodeGenModel, CodeGenBlock, CodeGenAttention, CodeGenMLP), with
cache_utils.DynamicLayer.update when use_cache builds a DynamicCache in training.

One LayerNorm feeds attention and MLP in parallel; RoPE rotates the first R dims of each
head in interleaved pairs (rotate_every_two), with sin and cos looked up from a fp32 table
in every layer and repeat_interleaved into a new (1, T, 1, R) tensor for each of Q and K;
the scores are computed in fp32. GPT-J has q/k/v projections and casts the looked-up sin
and cos to the activations' dtype; CodeGen has one qkv_proj whose output is split into
mp_num = 4 shards of (Q, V, K) and reshaped to heads (copies), and keeps sin and cos in
the model's dtype (so Q and K are fp32 after the rotation under autocast)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.gpt2 import new_gelu
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor

MODELS = ("gptj", "codegen")
MP_NUM = 4  # CodeGenAttention.forward: mp_num = 4


@dataclass(frozen=True)
class GPTJ:
    """The config keys that shape the graph. Symbols: V vocab, E n_embd, H n_head, dh = E / H,
    F n_inner, L n_layer, R rotary_dim, M = H / 4 (CodeGen's heads per shard).
    act: activation_function (gelu_new, or F.gelu's gelu)."""

    V: int
    E: int
    H: int
    F: int
    L: int
    R: int
    model: str = "gptj"
    tied: bool = False
    act: str = "gelu_new"
    resid_pdrop: float = 0.0
    embd_pdrop: float = 0.0
    attn_pdrop: float = 0.0

    def sizes(self) -> dict[str, int]:
        out = {"V": self.V, "E": self.E, "H": self.H, "dh": self.E // self.H, "F": self.F,
               "L": self.L, "R": self.R}
        if self.model == "codegen":
            out["M"] = self.H // MP_NUM
        return out


def forward(m: Builder, cfg: GPTJ) -> Tensor:
    """GPTJForCausalLM.forward / CodeGenForCausalLM.forward(input_ids=ids, labels=ids)."""
    if m.run.attention != "eager" and (m.run.attention, cfg.model) != ("flash", "gptj"):
        raise ValueError(f"{cfg.model}: eager attention only (the class supports no SDPA)")
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("transformer"):
        h = m.embedding("wte", ids, V, E)
        # position_ids = torch.arange(T) + past_length, unsqueezed (a new tensor)
        positions = ops.unsqueeze(ops.add(tr.input((T,), I64, "arange"), 0), 0)
        # create_causal_mask: flash_attention_2 makes none without padding
        mask = causal_mask(m, h) if m.run.attention == "eager" else None
        h = m.dropout(h, cfg.embd_pdrop)  # self.drop
        h = m.layers("h", lambda x: _block(m, cfg, x, mask), h,
                     (positions,) + (() if mask is None else (mask,)))
        h = m.layer_norm("ln_f", h)
    with m.module("lm_head"):  # nn.Linear(n_embd, vocab_size): a bias
        w = m.tied("transformer.wte.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.linear(h, w, m.param("bias", V))
    return causal_lm_loss(logits, ids, V)


def _block(m: Builder, cfg: GPTJ, h: Tensor, mask: Tensor | None) -> Tensor:
    """GPTJBlock.forward: attn_output + feed_forward_hidden_states + residual, both of
    ln_1(h)."""
    x = m.layer_norm("ln_1", h)
    with m.module("attn"):
        a = _attention(m, cfg, x, mask)
    with m.module("mlp"):  # GPTJMLP: fc_out(act(fc_in(x))), dropout
        y = m.linear("fc_in", x, m["F"], True)
        y = new_gelu(y) if cfg.act == "gelu_new" else ops.gelu(y)
        f = m.dropout(m.linear("fc_out", y, m["E"], True), cfg.resid_pdrop)
    return ops.add(ops.add(a, f), h)


def _attention(m: Builder, cfg: GPTJ, x: Tensor, mask: Tensor | None) -> Tensor:
    """GPTJAttention.forward / CodeGenAttention.forward: Q, K (B, T, H, dh) and V
    (B, H, T, dh); the first R dims of Q and K rotated, concatenated back, permuted to
    (B, H, T, dh); _attn; _merge_heads; out_proj; resid_dropout. GPTJFlashAttention2.forward:
    the same Q, K, V permuted back to (B, T, H, dh) and made contiguous (copies only of a
    cached K/V), _flash_attention_forward, the output reshaped to (B, T, E), out_proj,
    resid_dropout."""
    B, T, E, H, dh = m["B"], m["T"], m["E"], m["H"], m["dh"]
    q, k, v = _qkv(m, cfg, x)
    v = ops.transpose(v, 1, 2)  # value.permute(0, 2, 1, 3)
    sin, cos = _sincos(m, cfg, k)
    k, q = (ops.transpose(_rotate(t, sin, cos, m["R"]), 1, 2) for t in (k, q))
    if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
        k, v = (ops.cat([t], -2) for t in (k, v))
    if m.run.attention == "flash":
        q, k, v = (ops.transpose(ops.contiguous(ops.transpose(t, 1, 2)), 1, 2)
                   for t in (q, k, v))
        out = ops.reshape(flash_attention_forward(m, q, k, v), (B, T, H * dh))
        return m.dropout(m.linear("out_proj", out, E, False), cfg.resid_pdrop)
    assert mask is not None
    # _attn: query and key in fp32; scores / sqrt(dh) and + mask (GPT-J divides first,
    # CodeGen adds first: neither keeps anything); softmax; cast to V's dtype; dropout
    w = ops.matmul(ops.to(q, F32), ops.transpose(ops.to(k, F32), -1, -2))
    if cfg.model == "gptj":
        w = ops.add(ops.div(w, math.sqrt(dh.value)), mask)
    else:
        w = ops.div(ops.add(w, mask), math.sqrt(dh.value))
    w = m.dropout(ops.to(ops.softmax(w), v.dtype), cfg.attn_pdrop)
    out = ops.matmul(w, v)
    # _merge_heads: permute(0, 2, 1, 3).contiguous().view(B, T, H·dh)
    out = ops.view(ops.contiguous(ops.transpose(out, 1, 2)), (B, T, H * dh))
    return m.dropout(m.linear("out_proj", out, E, False), cfg.resid_pdrop)


def _qkv(m: Builder, cfg: GPTJ, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """GPT-J: q/k/v_proj viewed as (B, T, H, dh). CodeGen: qkv_proj's output reshaped to
    (B, T, 4, 3·M·dh) and split into Q, V, K of M·dh each (views); _split_heads reshapes
    each to (B, T, 4, M, dh), then (B, T, H, dh) (a copy: a shard's heads are not evenly
    strided across shards)."""
    B, T, E, H, dh = m["B"], m["T"], m["E"], m["H"], m["dh"]
    if cfg.model == "gptj":
        return tuple(ops.view(m.linear(name, x, E, False), (B, T, H, dh))  # type: ignore
                     for name in ("q_proj", "k_proj", "v_proj"))
    M, mp = m["M"], Dim.const(MP_NUM)
    qkv = m.linear("qkv_proj", x, 3 * (H * dh), False)
    shards = ops.reshape(qkv, (B, T, mp, 3 * (M * dh)))
    q, v, k = ops.split(shards, M * dh, -1)
    q, k, v = (ops.reshape(ops.reshape(t, (B, T, mp, M, dh)), (B, T, H, dh))
               for t in (q, k, v))
    return q, k, v


def _sincos(m: Builder, cfg: GPTJ, like: Tensor) -> tuple[Tensor, Tensor]:
    """In each layer, under no autograd: GPT-J's torch.gather(embed_positions.repeat(B, 1,
    1), 1, position ids).to(key.dtype), CodeGen's embed_positions[position_ids], of
    (1, T, R); sin and cos its halves (views). embed_positions is a buffer: in the model's
    dtype (model.to(dtype) casts it), fp32 under autocast."""
    one, T, R = Dim.const(1), m["T"], m["R"]
    half = R.halved()
    sincos = m.trace.tensor((one, T, R), m.run.dtype, False)
    if cfg.model == "gptj":
        sincos = ops.to(sincos, like.dtype)
    return ops.narrow(sincos, -1, 0, half), ops.narrow(sincos, -1, half.value, half)


def _rotate(x: Tensor, sin: Tensor, cos: Tensor, R: Dim) -> Tensor:
    """x[..., :R] through apply_rotary_pos_emb, then torch.cat([rotated, x[..., R:]])
    (a new tensor, even when the rest is empty)."""
    dh = x.shape[-1]
    rotated = _apply_rotary(ops.narrow(x, -1, 0, R), sin, cos)
    if R.value == dh.value:
        return ops.cat([rotated], -1)
    return ops.cat([rotated, ops.narrow(x, -1, R.value, dh + R * -1)], -1)


def _apply_rotary(x: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    """apply_rotary_pos_emb: sin and cos repeat_interleave(t[:, :, None, :], 2, 3), each a
    new (1, T, 1, R) tensor; (x * cos) + (rotate_every_two(x) * sin). rotate_every_two:
    torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2) (the strided halves' layout
    reaches nothing saved: the negation and the stack are new tensors)."""
    B, T, H, R = x.shape
    one, half = Dim.const(1), R.halved()
    sin, cos = (x.trace.tensor((one, T, one, R), t.dtype, False) for t in (sin, cos))
    for t in (sin, cos):
        x.trace.record("repeat_interleave", t)
    x1, x2 = ops.narrow(x, -1, 0, half), ops.narrow(x, -1, half.value, half)
    pairs = ops.cat([ops.unsqueeze(ops.neg(x2), -1), ops.unsqueeze(x1, -1)], -1)
    rotated = ops.view(pairs, (B, T, H, R))
    return ops.add(ops.mul(x, cos), ops.mul(rotated, sin))
