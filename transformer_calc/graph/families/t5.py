"""T5, mT5 and UMT5 as transformers 5.23 runs them: models/t5/modeling_t5.py
(T5ForConditionalGeneration, T5Stack, T5Block, T5LayerSelfAttention,
T5LayerCrossAttention, T5Attention with its relative position bias, eager_attention_forward
or integrations/sdpa_attention.py with create_position_bias_mask, T5LayerFF with
T5DenseActDense or T5DenseGatedActDense, T5LayerNorm); models/mt5/modeling_mt5.py (the
same code); models/umt5/modeling_umt5.py (a relative position bias in every layer's
self-attention, cross-attention's zero bias made in every layer);
models/longt5/modeling_longt5.py (LongT5ForConditionalGeneration: T5's decoder, the encoder's
self-attention LongT5LocalAttention over blocks of local_radius + 1 tokens, eager only).

The measurement's forward is model(input_ids=ids, labels=ids): the encoder reads ids, the
decoder _shift_right(labels), a new (B, T) int64 tensor; both stacks run T tokens (the
source and target lengths tcalc assumes equal). Neither stack gets an attention_mask: the
encoder's create_bidirectional_mask returns None (eager and SDPA), the decoder's
create_causal_mask the (B, 1, T, T) mask under eager and None under SDPA, and the
cross-attention's mask is None."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.gpt2 import new_gelu
from transformer_calc.graph.modules import Builder, causal_mask
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I64, Tensor

# T5LayerFF's activation by dense_act_fn (ACT2FN): relu keeps its result, silu and the
# erf gelu their input, gelu_new ("gated-gelu") its eight ops
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": ops.relu, "silu": ops.silu, "gelu": ops.gelu, "gelu_new": new_gelu}


@dataclass(frozen=True)
class T5:
    """The config keys that shape the graph. Symbols: V vocab, E d_model, H heads, dh d_kv,
    F d_ff, Nb relative_attention_num_buckets, Le encoder layers, Ld decoder layers.

    gated: feed_forward_proj "gated-*" (wi_0, wi_1); act: dense_act_fn; scale_output: the
    decoder's output times d_model^-0.5 before the tied lm_head (T5's scale_decoder_outputs,
    UMT5's tie_word_embeddings); bias_every_layer: UMT5's relative bias in each layer;
    local_block: LongT5's local attention in the encoder, blocks of Q = local_radius + 1
    tokens (symbol Tq: the blocks, T / Q rounded up); global_block: with it, LongT5's
    transient-global attention, every block also attending the sums of each Gb tokens
    (symbol Tg: T / Gb rounded down)."""

    V: int
    E: int
    H: int
    dh: int
    F: int
    Nb: int
    Le: int
    Ld: int
    gated: bool = False
    act: str = "relu"
    scale_output: bool = True
    bias_every_layer: bool = False
    dropout: float = 0.1
    local_block: int = 0
    global_block: int = 0

    def sizes(self) -> dict[str, int]:
        local = {"Q": self.local_block} if self.local_block else {}
        if self.global_block:
            local["Gb"] = self.global_block
        return {"V": self.V, "E": self.E, "H": self.H, "dh": self.dh, "F": self.F,
                "Nb": self.Nb, "Le": self.Le, "Ld": self.Ld, **local}


Stack = Callable[[Builder, T5, Tensor, Tensor, Tensor | None], Tensor]


def forward(m: Builder, cfg: T5, stack: Stack | None = None) -> Tensor:
    """T5ForConditionalGeneration.forward(input_ids=ids, labels=ids): the encoder, the
    decoder over the shifted labels, the rescaled output, the tied lm_head and
    CrossEntropyLoss over lm_logits.view(-1, V) and labels.view(-1) in the logits' dtype.
    stack: a model's own T5Stack (Switch Transformers', families/switch.py)."""
    stack = stack or _stack
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    shared = m.param("shared.weight", V, E)
    with m.module("encoder"):
        enc = stack(m, cfg, ids, shared, None)
    # _shift_right(labels): new_zeros, the shifted copy, the start token, masked_fill_
    # (integer ops without a gradient): a new (B, T) int64 tensor
    with tr.no_grad():
        dec_ids = tr.tensor((B, T), I64, False, name="decoder_input_ids")
    with m.module("decoder"):
        h = stack(m, cfg, dec_ids, shared, enc)
    if cfg.scale_output:  # sequence_output * (model_dim ** -0.5)
        h = ops.mul(h, float(E.value) ** -0.5)
    with m.module("lm_head"):
        logits = ops.linear(h, m.tied("shared.weight"))
    return ops.cross_entropy(ops.view(logits, (B * T, V)), ops.view(ids, (B * T,)))


def _stack(m: Builder, cfg: T5, ids: Tensor, shared: Tensor, enc: Tensor | None) -> Tensor:
    """T5Stack.forward: embed_tokens (the shared table), dropout, the blocks, the final
    T5LayerNorm, dropout. The first block's self-attention computes the relative position
    bias (and, in the decoder, the cross-attention's zero bias) and the blocks after it
    are called with them (UMT5: every block makes its own)."""
    decoder = enc is not None
    h = m.dropout(ops.embedding(shared, ids), cfg.dropout)
    mask = causal_mask(m, h) if decoder and m.run.attention == "eager" else None
    if cfg.local_block and not decoder:
        # LongT5Stack: _get_local_attention_mask over torch.ones(B, T): a (B, 1, Tq, Q, 3Q)
        # bool mask, no gradient
        if m.run.attention != "eager":
            raise ValueError("LongT5 runs eager attention only (transformers 5.23)")
        one, Q = Dim.const(1), m["Q"]
        mask = m.trace.input((m["B"], one, m["Tq"], Q, Q * 3), BOOL, "local_attention_mask")
        if cfg.global_block:  # transient-global: the (B, T) float attention_mask of ones
            mask = m.trace.input((m["B"], m["T"]), F32, "attention_mask")
    biases: list[Tensor] = []

    def block(x: Tensor) -> Tensor:
        first = not biases or cfg.bias_every_layer
        with m.module("layer.0"):
            x, bias = _self_attention(m, cfg, x, mask, None if first else biases[0], decoder)
        cross = None
        if enc is not None:
            with m.module("layer.1"):
                x, cross = _cross_attention(m, cfg, x, enc,
                                            None if first else biases[1])
        if first and not biases:
            biases.extend([bias] if cross is None else [bias, cross])
        with m.module("layer.2" if decoder else "layer.1"):
            return _ff(m, cfg, x)

    def extras() -> tuple[Tensor, ...]:  # what a block is called with besides h
        passed = () if cfg.bias_every_layer else tuple(biases)
        return tuple(t for t in (mask, enc, *passed) if t is not None)

    h = m.layers("block", block, h, extras, count="Ld" if decoder else "Le",
                 distinct_first=not cfg.bias_every_layer)
    h = t5_layer_norm(m, "final_layer_norm", h)
    return m.dropout(h, cfg.dropout)


def t5_layer_norm(m: Builder, name: str, h: Tensor) -> Tensor:
    """T5LayerNorm.forward: variance = h.to(float32).pow(2).mean(-1, keepdim=True);
    h * rsqrt(variance + eps) (the input as it is, promoted to fp32); cast to a 16-bit
    weight's dtype; weight * h."""
    with m.module(name):
        w = m.param("weight", h.shape[-1])
        variance = ops.mean(ops.pow(ops.to(h, F32), 2.0))
        x = ops.mul(h, ops.rsqrt(ops.add(variance, 1e-6)))
        if w.dtype != F32:
            x = ops.to(x, w.dtype)
        return ops.mul(w, x)


def _self_attention(m: Builder, cfg: T5, h: Tensor, mask: Tensor | None,
                    bias: Tensor | None, decoder: bool) -> tuple[Tensor, Tensor]:
    """T5LayerSelfAttention.forward: layer_norm, SelfAttention (is_causal in the decoder),
    h + dropout(output); the position bias returned for the next blocks."""
    x = t5_layer_norm(m, "layer_norm", h)
    if cfg.local_block and not decoder:  # LongT5LayerLocalSelfAttention
        name = "TransientGlobalSelfAttention" if cfg.global_block else "LocalSelfAttention"
        with m.module(name):
            out, bias = _local_attention(m, cfg, x, bias)
        return ops.add(h, m.dropout(out, cfg.dropout)), bias
    with m.module("SelfAttention"):
        out, bias = _attention(m, cfg, x, x, mask, bias, causal=decoder,
                               relative=True, cached=decoder)
    return ops.add(h, m.dropout(out, cfg.dropout)), bias


def _cross_attention(m: Builder, cfg: T5, h: Tensor, enc: Tensor, bias: Tensor | None
                     ) -> tuple[Tensor, Tensor]:
    """T5LayerCrossAttention.forward: layer_norm, EncDecAttention over the encoder's
    output (key_value_states), h + dropout(output)."""
    x = t5_layer_norm(m, "layer_norm", h)
    with m.module("EncDecAttention"):
        out, bias = _attention(m, cfg, x, enc, None, bias, causal=False, relative=False,
                               cached=True)
    return ops.add(h, m.dropout(out, cfg.dropout)), bias


def _attention(m: Builder, cfg: T5, x: Tensor, kv: Tensor, mask: Tensor | None,
               bias: Tensor | None, *, causal: bool, relative: bool, cached: bool
               ) -> tuple[Tensor, Tensor]:
    """T5Attention.forward: q, k, v viewed as (B, T, H, dh) and transposed; the position
    bias when none is passed: compute_bias (relative) or zeros (1, H, T, S) in the query's
    dtype; the decoder's cache (cached: the decoder's self- and cross-attention); the
    attention interface with scaling 1.0; the output reshaped to
    (B, T, H·dh), made contiguous, o."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    q, k, v = (ops.transpose(ops.view(m.linear(name, src, H * dh, False), (B, T, H, dh)), 1, 2)
               for name, src in (("q", x), ("k", kv), ("v", kv)))
    if cached and m.use_cache:
        # the decoder's EncoderDecoderCache (use_cache): DynamicLayer.update concatenates K
        # and V onto the empty self- or cross-attention cache, copies
        k, v = ops.cat([k], -2), ops.cat([v], -2)
    if bias is None:
        if relative:
            bias = _compute_bias(m, T)
        else:
            # torch.zeros; requires_grad set when gradient checkpointing trains
            bias = m.trace.tensor((Dim.const(1), H, T, T), q.dtype,
                                  m.run.recompute == "full")
            m.trace.record("zeros", bias)
    if m.run.attention == "eager":
        # eager_attention_forward: matmul(q, kᵀ) · 1.0, + position_bias, + the mask,
        # softmax in the scores' dtype, dropout, the product with V, transposed, contiguous
        w = ops.add(ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), 1.0), bias)
        if mask is not None:
            w = ops.add(w, mask)
        w = m.dropout(ops.softmax(w), cfg.dropout)
        out = ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))
    else:
        out = _sdpa(m, cfg, q, k, v, bias, causal)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o", out, m["E"], False), bias


def _local_attention(m: Builder, cfg: T5, x: Tensor, bias: Tensor | None
                     ) -> tuple[Tensor, Tensor]:
    """LongT5LocalAttention.forward (LongT5TransientGlobalAttention.forward: _global first):
    q, k, v viewed as (B, T, H, dh); _split_into_blocks (padded to Tq·Q where T is no
    multiple of Q: F.pad, a new tensor; reshaped to (B, Tq, Q, H, dh));
    _concatenate_3_blocks for K and V (padded by a block on each side, three slices
    concatenated: (B, Tq, 3Q, H, dh), a new tensor); the scores
    einsum("...qhd,...khd->...hqk"); the first layer's bias: compute_bias(Q) ((Q, 3Q)
    buckets through relative_attention_bias, permuted, (1, 1, H, Q, 3Q)) plus
    torch.where(local mask > 0, 0.0, -1e10) (a new fp32 tensor) transposed: a
    (B, Tq, H, Q, 3Q) tensor in the promoted dtype, which the later layers are passed;
    scores += bias (in place: the scores' dtype); softmax(scores.float()).type_as(scores);
    dropout; einsum("...hqk,...khd->...qhd") with V; made contiguous, viewed
    (B, Tq·Q, H·dh), the first T tokens (a view), o."""
    B, T, H, dh, Q, Tq = m["B"], m["T"], m["H"], m["dh"], m["Q"], m["Tq"]
    pad = Tq * Q + Dim(-T.value, -T.poly)  # -T % Q

    def heads(y: Tensor) -> Tensor:
        return ops.view(y, (B, y.shape[1], H, dh))

    def blocks(y: Tensor) -> Tensor:  # _split_into_blocks(dim=1)
        if pad.value > 0:
            y = ops.pad(y, pad, 1)
        return ops.reshape(y, (B, Tq, Q, *y.shape[2:]))

    def three(y: Tensor) -> Tensor:  # _concatenate_3_blocks(block_dim=1, sequence_dim=2)
        y = ops.pad(y, 2, 1)
        return ops.cat([ops.narrow(y, 1, i, Tq) for i in range(3)], 2)

    side = _global_inputs(m, x) if cfg.global_block else None
    q = blocks(heads(m.linear("q", x, H * dh, False)))
    k = three(blocks(heads(m.linear("k", x, H * dh, False))))
    v = three(blocks(heads(m.linear("v", x, H * dh, False))))
    if side is not None:
        # side K and V: k and v over the global inputs, unsqueeze(1).repeat over the
        # blocks (a new tensor), concatenated after the three blocks: (B, Tq, 3Q + Tg, H, dh)
        Tg = m["Tg"]
        sk, sv = (ops.contiguous(ops.expand(ops.unsqueeze(heads(m.linear(n, side, H * dh,
                                                                          False)), 1),
                                            (B, Tq, Tg, H, dh))) for n in ("k", "v"))
        k, v = ops.cat([k, sk], 2), ops.cat([v, sv], 2)
    scores = ops.einsum("bnqhd,bnkhd->bnhqk", q, k)
    if bias is None:
        one = Dim.const(1)
        with m.trace.no_grad():
            buckets = m.trace.tensor((Q, Q * 3), I64, False, name="relative_position_bucket")
            neg = m.trace.tensor((B, one, Tq, Q, Q * 3), F32, False)  # torch.where(...)
        values = m.embedding("relative_attention_bias", buckets, m["Nb"], H)
        values = ops.permute(values, (2, 0, 1))
        values = ops.unsqueeze(ops.unsqueeze(values, 0), 0)
        bias = ops.add(values, ops.transpose(neg, 1, 2))
        if side is not None:
            bias = ops.cat([ops.to(bias, scores.dtype), _side_bias(m, pad, scores)], -1)
    w = ops.to(ops.add(scores, bias), scores.dtype)  # scores += position_bias
    w = ops.to(ops.softmax(ops.to(w, F32)), w.dtype)
    w = m.dropout(w, cfg.dropout)
    out = ops.einsum("bnhqk,bnkhd->bnqhd", w, v)
    out = ops.view(ops.contiguous(out), (B, Tq * Q, H * dh))
    out = ops.narrow(out, 1, 0, T)
    return m.linear("o", out, m["E"], False), bias


def _global_inputs(m: Builder, x: Tensor) -> Tensor:
    """LongT5TransientGlobalAttention's global inputs: _make_global_fixed_block_ids (integer
    and float ops over the mask, no gradient); _create_global_aggregates: one_hot(block ids,
    Tg + 1)[:, :, :-1] cast to x's dtype (a new (B, T, Tg) tensor) and
    einsum("...nd,...ng->...gd", x, it); global_input_layer_norm."""
    B, T, Tg = m["B"], m["T"], m["Tg"]
    with m.trace.no_grad():
        one_hot = m.trace.tensor((B, T, Tg), x.dtype, False, name="one_hot_block_ids")
    return t5_layer_norm(m, "global_input_layer_norm",
                         ops.einsum("bnd,bng->bgd", x, one_hot))


def _side_bias(m: Builder, pad: Dim, scores: Tensor) -> Tensor:
    """compute_side_bias: torch.where(side mask > 0, 0.0, -1e10) (a new fp32 (B, 1, T, Tg)
    tensor), the (B, T, Tg) side buckets through global_relative_attention_bias (the
    embedding keeps them), permuted to (B, H, T, Tg), their sum; _split_into_blocks over T
    (padded where T is no multiple of Q), transposed to (B, Tq, H, Q, Tg), cast to the
    scores' dtype."""
    B, T, H, Tg = m["B"], m["T"], m["H"], m["Tg"]
    with m.trace.no_grad():
        neg = m.trace.tensor((B, Dim.const(1), T, Tg), F32, False)
        buckets = m.trace.tensor((B, T, Tg), I64, False, name="side_relative_position_bucket")
    side = m.embedding("global_relative_attention_bias", buckets, m["Nb"], H)
    side = ops.add(neg, ops.permute(side, (0, 3, 1, 2)))
    if pad.value > 0:
        side = ops.pad(side, pad, 2)
    side = ops.transpose(ops.reshape(side, (B, H, m["Tq"], m["Q"], Tg)), 1, 2)
    return ops.to(side, scores.dtype)


def _compute_bias(m: Builder, T: Dim) -> Tensor:
    """T5Attention.compute_bias: the (T, S) relative_position_bucket (integer ops, no
    gradient: a new int64 tensor), relative_attention_bias (Nb, H) looked up at it (the
    embedding keeps the buckets for the table's gradient), permute([2, 0, 1]), unsqueeze(0):
    a (1, H, T, S) view."""
    with m.trace.no_grad():
        buckets = m.trace.tensor((T, T), I64, False, name="relative_position_bucket")
    values = m.embedding("relative_attention_bias", buckets, m["Nb"], m["H"])
    values = ops.transpose(ops.transpose(values, 0, 2), 1, 2)  # permute([2, 0, 1])
    return ops.unsqueeze(values, 0)


def _sdpa(m: Builder, cfg: T5, q: Tensor, k: Tensor, v: Tensor, bias: Tensor,
          causal: bool) -> Tensor:
    """sdpa_attention_forward with a position bias: is_causal = q_length > 1 and no mask
    and the module's is_causal; create_position_bias_mask: with is_causal, where(the
    (1, 1, T, S) bool causal mask, bias, min) (a new tensor; `where` keeps the condition),
    else the bias; made contiguous (a copy of the permuted bias); SDPA with that mask,
    is_causal False; the (B, H, T, dh) output transposed back and made contiguous."""
    B, H, T, dh = q.shape
    if causal and T.value > 1:
        with m.trace.no_grad():
            tril = m.trace.tensor((Dim.const(1), Dim.const(1), T, T), BOOL, False)
        bias = ops.where(tril, bias, -3.4e38)  # torch.finfo(key.dtype).min
    bias = ops.contiguous(bias)
    out = scaled_dot_product_attention(q, k, v, is_causal=False, dropout_p=cfg.dropout,
                                       scale=1.0, mask=bias)
    return ops.contiguous(ops.transpose(ops.reshape(out, (B, H, T, dh)), 1, 2))


def _ff(m: Builder, cfg: T5, h: Tensor) -> Tensor:
    """T5LayerFF.forward: layer_norm, DenseReluDense, h + dropout(output).
    T5DenseActDense: wo(dropout(act(wi(x)))); T5DenseGatedActDense: wo(dropout(act(wi_0(x))
    · wi_1(x))) (the cast to wo's dtype a no-op: the model is one dtype)."""
    x = t5_layer_norm(m, "layer_norm", h)
    act = ACTIVATIONS[cfg.act]
    with m.module("DenseReluDense"):
        F = m["F"]
        if cfg.gated:
            y = ops.mul(act(m.linear("wi_0", x, F, False)), m.linear("wi_1", x, F, False))
        else:
            y = act(m.linear("wi", x, F, False))
        y = m.linear("wo", m.dropout(y, cfg.dropout), m["E"], False)
    return ops.add(h, m.dropout(y, cfg.dropout))
