"""Falcon as transformers 5.23 runs it: models/falcon/modeling_falcon.py (FalconForCausalLM,
FalconModel, FalconDecoderLayer, FalconAttention with its own eager and SDPA paths,
FalconMLP, FalconLinear, FalconRotaryEmbedding, build_alibi_tensor, dropout_add), with
masking_utils.create_causal_mask(allow_is_causal_skip=False) and cache_utils.DynamicLayer.
update when use_cache builds a DynamicCache in training.

FalconLinear computes input @ weight.T, then adds its bias (a separate add). The fused
query_key_value is split as the layout says: the new decoder architecture (Falcon-40B/180B)
views it as (B, T, Hkv, G + 2, dh), indexes K and V out of each group ([-2], [-1]: copies
that keep their index), broadcasts them to the group's query heads and flattens the heads
(copies of Q, K and V); the old layout with a K/V head per head views it as
(B, T, H, 3, dh), and its multi-query form (Falcon-7B) as (B, T, H + 2, dh), indexing its one
K and V head out (copies) that the attention broadcasts over the query heads (SDPA's math
kernel: the fused kernels want as many K/V heads as query heads). Positions are RoPE over
the whole head, or ALiBi: a (B·H, 1, T) bias built once, folded with the causal mask into a
(B, H, T, T) float mask that every layer reads. SDPA always gets an explicit mask
(create_causal_mask's bool mask, which torch converts into a float mask the kernel keeps, or
the ALiBi mask); eager divides the scores in place, adds the mask and takes the softmax in
the input's dtype (ALiBi: in fp32 from 16-bit scores, plus the bias, times 1/sqrt(dh) in
place, then attention dropout)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.llama import apply_rotary, rotary_tables
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BF16, BOOL, F16, F32, I64, Tensor


@dataclass(frozen=True)
class Falcon:
    """FalconConfig's keys that shape the graph. Symbols: V vocab, E hidden, H heads, Hkv
    K/V heads (num_kv_heads in the new layout; in the old, H, or 1 with multi_query),
    dh = E / H, F ffn_hidden_size,
    L layers, G = H / Hkv. new: new_decoder_architecture; parallel: parallel_attn (or the
    new layout); norms: LayerNorms a parallel layer has (num_ln_in_parallel_attn: ln_attn and
    ln_mlp, or one input_layernorm); act: activation (gelu: F.gelu)."""

    V: int
    E: int
    H: int
    Hkv: int
    F: int
    L: int
    new: bool = True
    parallel: bool = True
    norms: int = 1
    alibi: bool = False
    bias: bool = False
    tied: bool = True
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.E // self.H,
                "F": self.F, "L": self.L, "G": self.H // self.Hkv}


def forward(m: Builder, cfg: Falcon) -> Tensor:
    """FalconForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("transformer"):
        h = m.embedding("word_embeddings", ids, V, E)
        # position_ids = torch.arange(T) + past_seen_tokens, unsqueezed (a new tensor)
        positions = ops.unsqueeze(ops.add(tr.input((T,), I64, "arange"), 0), 0)
        # (flash_attention_2: create_causal_mask makes none without padding)
        mask = None if m.run.attention == "flash" else _mask(m, cfg, h)
        rope = None if cfg.alibi else rotary_tables(m, h)
        extras = (positions,) + (() if mask is None else (mask,)) + (rope or ())
        h = m.layers("h", lambda x: _layer(m, cfg, x, mask, rope), h, extras)
        h = m.layer_norm("ln_f", h)
    with m.module("lm_head"):
        w = m.tied("transformer.word_embeddings.weight") if cfg.tied \
            else m.param("weight", V, E)
        logits = m.head(h, w, V)
    return causal_lm_loss(logits, ids, V)


def _mask(m: Builder, cfg: Falcon, like: Tensor) -> Tensor:
    """The mask every layer reads, made once under no grad: create_causal_mask's (eager: a
    (B, 1, T, T) float mask in the embeddings' dtype; SDPA: a (1, 1, T, T) bool mask expanded
    over B); with ALiBi, masked_fill(alibi / sqrt(dh), mask < -1, min) broadcast to a new
    (B, H, T, T) float mask (a bool mask first made float by torch.where)."""
    B, T, H = m["B"], m["T"], m["H"]
    one = Dim.const(1)
    if m.run.attention == "eager":
        mask = causal_mask(m, like)
    else:
        mask = ops.expand(m.trace.input((one, one, T, T), BOOL, "causal_mask"), (B, one, T, T))
    if not cfg.alibi:
        return mask
    out = m.trace.tensor((B, H, T, T), like.dtype, False, name="causal_mask")
    m.trace.record("masked_fill", out)
    return out


def _layer(m: Builder, cfg: Falcon, h: Tensor, mask: Tensor | None,
           rope: tuple[Tensor, Tensor] | None) -> Tensor:
    """FalconDecoderLayer.forward: ln_attn and ln_mlp (two norms), or one input_layernorm
    for both (parallel), or input_layernorm, attention, dropout_add with attention_dropout,
    post_attention_layernorm (sequential); mlp_output += attention_output when parallel;
    dropout_add(mlp_output, residual, hidden_dropout)."""
    if cfg.parallel and cfg.norms == 2:
        x, y = m.layer_norm("ln_attn", h), m.layer_norm("ln_mlp", h)
    else:
        x = y = m.layer_norm("input_layernorm", h)
    with m.module("self_attention"):
        a = _attention(m, cfg, x, mask, rope)
    residual = h
    if not cfg.parallel:
        with m.module("self_attention"):  # (the residual's dropout named as the attention's)
            residual = ops.add(h, m.dropout(a, cfg.attention_dropout))
        y = m.layer_norm("post_attention_layernorm", residual)
    with m.module("mlp"):  # FalconMLP: dense_4h_to_h(act(dense_h_to_4h(x)))
        f = ops.gelu(m.linear("dense_h_to_4h", y, m["F"], cfg.bias, matmul=True))
        f = m.linear("dense_4h_to_h", f, m["E"], cfg.bias, matmul=True)
        if cfg.parallel:
            f = ops.add(f, a)  # mlp_output += attention_output (in place: keeps nothing)
        f = m.dropout(f, cfg.hidden_dropout)
    return ops.add(residual, f)


def _attention(m: Builder, cfg: Falcon, x: Tensor, mask: Tensor | None,
               rope: tuple[Tensor, Tensor] | None) -> Tensor:
    """FalconAttention.forward: Q, K, V as (B, H, T, dh), RoPE (or none with ALiBi), (cache),
    SDPA or eager, the output's heads merged, dense. FalconFlashAttention2.forward (RoPE
    only: with ALiBi it raises, memory.py refuses): the same Q, K, V transposed to
    (B, T, H, dh) views, _flash_attention_forward (K/V heads not repeated), the output
    reshaped to (B, T, E), dense."""
    B, T, E, H, dh = m["B"], m["T"], m["E"], m["H"], m["dh"]
    q, k, v = _split_heads(m, cfg, x)
    # query_layer.transpose(1, 2).reshape(B, H, T, dh) (views), K and V with num_kv_heads:
    # the query heads in the new layout, the old layout's own (one with multi_query)
    kv = H if cfg.new else m["Hkv"]
    q = ops.reshape(ops.transpose(q, 1, 2), (B, H, T, dh))
    k, v = (ops.reshape(ops.transpose(t, 1, 2), (B, kv, T, dh)) for t in (k, v))
    if rope is not None:  # apply_rotary_pos_emb over the whole head
        cos, sin = (ops.unsqueeze(t, 1) for t in rope)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
        k, v = (ops.cat([t], -2) for t in (k, v))
    if m.run.attention == "flash":
        out = ops.reshape(flash_attention_forward(m, q, k, v), (B, T, E))
    elif m.run.attention == "sdpa":
        assert mask is not None
        # the RoPE path passes dropout_p=0.0; the ALiBi path the attention dropout
        p = cfg.attention_dropout if cfg.alibi else 0.0
        out = scaled_dot_product_attention(q, k, v, is_causal=False, dropout_p=p,
                                           mask=mask)
        if cfg.alibi:  # attn_output.transpose(1, 2).reshape(B, T, E)
            out = ops.reshape(ops.transpose(out, 1, 2), (B, T, E))
        else:  # .view(B, H, T, dh).permute(0, 2, 1, 3).reshape(B, T, E)
            out = ops.reshape(ops.transpose(ops.view(out, (B, H, T, dh)), 1, 2), (B, T, E))
    else:
        assert mask is not None
        out = _eager(m, cfg, q, k, v, mask)
    return m.linear("dense", out, E, cfg.bias, matmul=True)


def _eager(m: Builder, cfg: Falcon, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """FalconAttention.forward's eager paths. RoPE: scores /= sqrt(dh) in place, softmax of
    scores + mask in the hidden states' dtype, the product with V. ALiBi: 16-bit scores
    cast to fp32, + alibi, *= 1/sqrt(dh) in place, softmax of + mask in the hidden states'
    dtype, attention dropout, the product with V; then _merge_heads (a copy either way)."""
    B, T, E, H, dh = m["B"], m["T"], m["E"], m["H"], m["dh"]
    dtype = m.run.dtype  # hidden_states.dtype: the model's (fp32 under autocast)
    scores = ops.matmul(q, ops.transpose(k, -1, -2))
    if cfg.alibi:
        if scores.dtype in (BF16, F16):
            scores = ops.to(scores, F32)
        with m.trace.no_grad():
            alibi = m.trace.tensor((B, H, Dim.const(1), T), dtype, False)
        scores = ops.mul(ops.add(scores, alibi), 1 / math.sqrt(dh.value))
        probs = m.dropout(ops.softmax(ops.add(scores, mask), dtype), cfg.attention_dropout)
    else:
        scores = ops.div(scores, math.sqrt(dh.value))
        probs = ops.softmax(ops.add(scores, mask), dtype)
    out = ops.matmul(probs, v)
    # view(B, H, T, dh).permute(0, 2, 1, 3).reshape(B, T, H·dh)
    return ops.reshape(ops.transpose(out, 1, 2), (B, T, E))


def _split_heads(m: Builder, cfg: Falcon, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """FalconAttention._split_heads of query_key_value's output, as (B, T, heads, dh)."""
    B, T, H, Hkv, dh, G = m["B"], m["T"], m["H"], m["Hkv"], m["dh"], m["G"]
    if cfg.new:
        qkv = m.linear("query_key_value", x, (H + 2 * Hkv) * dh, cfg.bias, matmul=True)
        groups = ops.view(qkv, (B, T, Hkv, G + 2, dh))
        q = ops.narrow(groups, 3, 0, G)  # qkv[:, :, :, :-2]
        one = Dim.const(1)
        k, v = (ops.index(groups, [m.trace.tensor((one,), I64, False)], 3)  # [[-2]], [[-1]]
                for _ in range(2))
        shape = (B, T, Hkv, G, dh)
        k, v = (ops.expand(t, shape) for t in (k, v))  # torch.broadcast_to(key, query.shape)
        # [x.flatten(2, 3) for x in (query, key, value)]: copies (not evenly strided)
        q, k, v = (ops.reshape(t, (B, T, H, dh)) for t in (q, k, v))
        return q, k, v
    one = Dim.const(1)
    if cfg.Hkv != cfg.H:  # multi_query: (B, T, H + 2, dh); [..., :-2, :], [[-2]], [[-1]]
        qkv = m.linear("query_key_value", x, (H + 2) * dh, cfg.bias, matmul=True)
        heads = ops.view(qkv, (B, T, H + 2, dh))
        k, v = (ops.index(heads, [m.trace.tensor((one,), I64, False)], 2) for _ in range(2))
        return ops.narrow(heads, 2, 0, H), k, v
    qkv = m.linear("query_key_value", x, 3 * (H * dh), cfg.bias, matmul=True)
    parts = ops.view(qkv, (B, T, H, Dim.const(3), dh))
    q, k, v = (ops.select(parts, 3, i) for i in range(3))  # fused_qkv[..., i, :]
    return q, k, v
