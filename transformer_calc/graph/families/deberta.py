"""DeBERTa and DeBERTa-v2 with their masked-LM heads as transformers 5.23 runs them:
models/deberta/modeling_deberta.py (DebertaForMaskedLM with the legacy head: DebertaModel,
DebertaEmbeddings, DebertaLayerNorm, DebertaEncoder, DebertaLayer with
DisentangledSelfAttention, LegacyDebertaOnlyMLMHead) and
models/deberta_v2/modeling_deberta_v2.py (DebertaV2ForMaskedLM: nn.LayerNorm, separate
query/key/value projections made contiguous per head, the relative table optionally
normed once, projected by the attention's own projections (share_att_key) or its own, all
2·R rows; no convolution layer).

The forward passes no attention mask; DebertaModel makes one of ones, (B, T) in fp32, which
the embeddings multiply in (their product keeps it) and the encoder turns into a (B, 1, T, T)
float mask, whose negation each layer's masked_fill keeps as a bool tensor. Eager attention
only (DeBERTa has no SDPA path)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.bert import Bert, head
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I64, Tensor


@dataclass(frozen=True)
class Deberta(Bert):
    """Bert's sizes (P: the absolute position table's rows, read where position_biased)
    and R, max_relative_positions (the relative table has 2·R rows). c2p, p2c: the
    disentangled terms in pos_att_type (none: relative_attention off); position_biased:
    position_biased_input, the absolute table added to the embeddings; token_types: a
    token-type table (type_vocab_size > 0)."""

    R: int = 1
    c2p: bool = False
    p2c: bool = False
    position_biased: bool = True
    token_types: bool = True
    v2: bool = False  # DeBERTa-v2's forward (the fields below are v2's)
    relative_table: bool = False  # v2's relative_attention: the table even without terms
    shared_key: bool = False  # share_att_key: the table through query_proj and key_proj
    rel_norm: bool = False  # norm_rel_ebd layer_norm: the table normed once per forward

    @property
    def relative(self) -> bool:
        return self.c2p or self.p2c or self.relative_table

    def sizes(self) -> dict[str, int]:
        return {**super().sizes(), "R": self.R}


def forward(m: Builder, cfg: Deberta) -> Tensor:
    """DebertaForMaskedLM.forward(input_ids=ids, labels=ids): DebertaModel, the legacy MLM
    head (BERT's layout: cls.predictions), CrossEntropyLoss over the (B·T, V) view."""
    B, T, V = m["B"], m["T"], m["V"]
    tr = m.trace
    one = Dim.const(1)
    ids = tr.input((B, T), I64, "input_ids")
    with m.module(cfg.base):
        # DebertaModel.forward: attention_mask = ones(input_shape), token_type_ids =
        # zeros(input_shape, long): new tensors without a gradient
        mask = tr.tensor((B, T), F32, False, name="attention_mask")
        types = tr.tensor((B, T), I64, False, name="token_type_ids")
        h = _embeddings(m, cfg, ids, types, mask)
        with m.module("encoder"):
            # get_attention_mask: mask[:, None, None, :] * mask[:, None, :, None], (B, 1, T, T)
            # fp32; build_relative_position: (1, T, T) int64; the table's weight itself
            square = tr.tensor((B, one, T, T), F32, False, name="attention_mask")
            relative = rel = None
            if cfg.relative:
                relative = tr.tensor((one, T, T), I64, False, name="relative_pos")
                with m.module("rel_embeddings"):
                    rel = m.param("weight", m["R"] * 2, m["E"])
                if cfg.rel_norm:  # DebertaV2Encoder.get_rel_embedding: LayerNorm(weight)
                    rel = m.layer_norm("LayerNorm", rel)
            # (what a layer is called with: the mask, the positions, v2's normed table)
            extras = (square,) + ((relative,) if relative is not None else ()) + (
                (rel,) if rel is not None and rel.storage.kind != "param" else ())
            h = m.layers("layer", lambda x: _layer(m, cfg, x, square, relative, rel), h,
                         extras)
    scores = head(m, cfg, h)
    return ops.cross_entropy(ops.view(scores, (B * T, V)), ops.view(ids, (B * T,)))


def layer_norm(m: Builder, name: str, x: Tensor) -> Tensor:
    """DebertaLayerNorm.forward: in fp32, (x - mean) / sqrt(var + eps) with x - mean computed
    twice (once for the variance's pow, once for the division), cast back, weight · x̂ +
    bias."""
    with m.module(name):
        E = x.shape[-1]
        w, b = m.param("weight", E), m.param("bias", E)
        xf = ops.to(x, F32)
        mean = ops.mean(xf)
        variance = ops.mean(ops.pow(ops.sub(xf, mean), 2.0))
        std = ops.sqrt(ops.add(variance, 1e-7))
        x_hat = ops.to(ops.div_tensor(ops.sub(xf, mean), std), x.dtype)
        return ops.add(ops.mul(w, x_hat), b)


def _embeddings(m: Builder, cfg: Deberta, ids: Tensor, types: Tensor, mask: Tensor) -> Tensor:
    """DebertaEmbeddings.forward: word embeddings (plus the absolute positions, a slice of
    the position_ids buffer, where position_biased_input; plus the token types where the
    table exists), the LayerNorm, times mask.unsqueeze(2) in the embeddings' dtype,
    dropout."""
    T, E = m["T"], m["E"]
    one = Dim.const(1)
    with m.module("embeddings"):
        h = m.embedding("word_embeddings", ids, m["V"], E)
        if cfg.position_biased:
            buffer = m.trace.tensor((one, m["P"]), I64, False, "buffer", "position_ids")
            h = ops.add(h, m.embedding("position_embeddings", ops.narrow(buffer, 1, 0, T),
                                       m["P"], E))
        if cfg.token_types:
            h = ops.add(h, m.embedding("token_type_embeddings", types, m["Ty"], E))
        h = _norm(m, cfg, "LayerNorm", h)
        h = ops.mul(h, ops.to(ops.unsqueeze(mask, 2), h.dtype))
        return m.dropout(h, cfg.hidden_dropout)


def _layer(m: Builder, cfg: Deberta, h: Tensor, square: Tensor, relative: Tensor | None,
           rel: Tensor | None) -> Tensor:
    """DebertaLayer.forward: DebertaAttention (DisentangledSelfAttention, DebertaSelfOutput),
    DebertaIntermediate (dense, gelu), DebertaOutput: post-norm, DebertaLayerNorm."""
    with m.module("attention"):
        with m.module("self"):
            attention = _self_attention_v2 if cfg.v2 else _self_attention
            a = attention(m, cfg, h, square, relative, rel)
        a = _output(m, cfg, a, h)
    with m.module("intermediate"):
        x = ops.gelu(m.linear("dense", a, m["F"], True))
    return _output(m, cfg, x, a)


def _output(m: Builder, cfg: Deberta, x: Tensor, residual: Tensor) -> Tensor:
    """DebertaSelfOutput / DebertaOutput: LayerNorm(dropout(dense(x)) + input_tensor)."""
    with m.module("output"):
        x = m.dropout(m.linear("dense", x, m["E"], True), cfg.hidden_dropout)
        return _norm(m, cfg, "LayerNorm", ops.add(x, residual))


def _norm(m: Builder, cfg: Deberta, name: str, x: Tensor) -> Tensor:
    """DebertaLayerNorm (v1) or nn.LayerNorm (v2)."""
    return m.layer_norm(name, x) if cfg.v2 else layer_norm(m, name, x)


def _heads(m: Builder, x: Tensor) -> Tensor:
    """transpose_for_scores: (n, L, H·dh) viewed as (n, L, H, dh), permuted to (n, H, L, dh)."""
    n, length, _ = x.shape
    return ops.transpose(ops.view(x, (n, length, m["H"], m["dh"])), 1, 2)


def _scale(m: Builder) -> Tensor:
    """scaled_size_sqrt: sqrt(tensor(d, float) · scale_factor), a new 0-d fp32 tensor."""
    return m.trace.tensor((), F32, False, name="scale")


def _self_attention(m: Builder, cfg: Deberta, x: Tensor, square: Tensor,
                    relative: Tensor | None, rel: Tensor | None) -> Tensor:
    """DisentangledSelfAttention.forward: in_proj's (B, T, 3·E) output as heads, chunked
    into Q, K, V (views); q_bias and v_bias added (new tensors, laid out as the heads'
    views); Q divided by the 0-d scale cast to its dtype; the scores, the disentangled bias,
    masked_fill with the negated bool mask, softmax in the scores' dtype, dropout, the
    product with V, permuted back and made contiguous."""
    B, T, H, dh, E = m["B"], m["T"], m["H"], m["dh"], m["E"]
    qkv = m.linear("in_proj", x, H * dh * 3, False)
    qkv = ops.transpose(ops.view(qkv, (B, T, H, dh * 3)), 1, 2)
    q, k, v = (ops.narrow(qkv, -1, i * dh.value, dh) for i in range(3))
    one = Dim.const(1)

    def bias(name: str) -> Tensor:  # self.q_bias[None, None, :], as heads: (1, H, 1, dh)
        b = ops.view(m.param(name, E), (one, one, E))
        return ops.transpose(ops.view(b, (one, one, H, dh)), 1, 2)

    q, v = ops.add(q, bias("q_bias")), ops.add(v, bias("v_bias"))
    q = ops.div_tensor(q, ops.to(_scale(m), q.dtype))
    scores = ops.matmul(q, ops.transpose(k, -1, -2))
    if rel is not None and relative is not None:
        scores = ops.add(scores, _disentangled(m, cfg, q, k, relative, rel))
    else:
        scores = ops.add(scores, 0.0)  # attention_scores + rel_att (0)
    with m.trace.no_grad():  # ~(attention_mask.bool()): a new bool tensor per layer
        negated = m.trace.tensor(square.shape, BOOL, False)
    probs = m.dropout(ops.softmax(ops.masked_fill(scores, negated)), cfg.attention_dropout)
    out = ops.contiguous(ops.transpose(ops.matmul(probs, v), 1, 2))
    return ops.view(out, (B, T, H * dh))


def _disentangled(m: Builder, cfg: Deberta, q: Tensor, k: Tensor, relative: Tensor,
                  rel: Tensor) -> Tensor:
    """disentangled_att_bias: the table through pos_dropout, its 2·span middle rows (span
    = min(T, R), compute_attention_span); c2p: Q times pos_proj's keys, gathered at
    clamp(relative_pos + span) expanded to (B, H, T, T); p2c: pos_q_proj's queries divided
    in place by the 0-d scale, K times them, gathered at clamp(-relative_pos + span) and
    transposed; the terms summed (0 + c2p a new tensor, += p2c in place)."""
    B, T, H = m["B"], m["T"], m["H"]
    R = m["R"]
    span = T if T.value <= R.value else R
    one = Dim.const(1)
    with m.module("pos_dropout"):
        table = m.dropout(rel, cfg.hidden_dropout)
    window = ops.unsqueeze(ops.narrow(table, 0, R.value - span.value, span * 2), 0)

    def index() -> Tensor:  # clamp(±relative_pos + span, ...): a new (1, 1, T, T) int64
        with m.trace.no_grad():
            pos = m.trace.tensor((one, one, T, T), I64, False)
        return ops.expand(pos, (B, H, T, T))

    # (the c2p and p2c scopes name the terms' tensors; no module of the model's)
    score: Tensor | None = None
    if cfg.c2p:
        keys = _heads(m, m.linear("pos_proj", window, H * m["dh"], False))
        with m.module("c2p"):
            c2p = ops.matmul(q, ops.transpose(keys, -1, -2))
            score = ops.add(ops.gather(c2p, -1, index()), 0.0)
    if cfg.p2c:
        queries = _heads(m, m.linear("pos_q_proj", window, H * m["dh"], True))
        with m.module("p2c"):
            queries = ops.div_tensor(queries, _scale(m), inplace=True)
            p2c = ops.matmul(k, ops.to(ops.transpose(queries, -1, -2), k.dtype))
            p2c = ops.transpose(ops.gather(p2c, -1, index()), -1, -2)
            score = ops.add(p2c, 0.0) if score is None else ops.add(score, p2c)
    assert score is not None
    return score


def _heads_v2(m: Builder, x: Tensor) -> Tensor:
    """DeBERTa-v2's transpose_for_scores: (n, L, H·dh) viewed as heads, permuted,
    contiguous (a copy) and viewed as (n·H, L, dh)."""
    n, length, _ = x.shape
    x = ops.contiguous(_heads(m, x))
    return ops.view(x, (n * m["H"], length, m["dh"]))


def _self_attention_v2(m: Builder, cfg: Deberta, x: Tensor, square: Tensor,
                       relative: Tensor | None, rel: Tensor | None) -> Tensor:
    """DebertaV2's DisentangledSelfAttention.forward: Q, K, V as (B·H, T, dh) copies; the
    scores bmm(Q, Kᵀ / scale) (the division a new tensor); the relative table through
    pos_dropout and disentangled_attention_bias; masked_fill with the negated bool mask,
    softmax in the scores' dtype, dropout, bmm with V, back to (B, T, H·dh)."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    q, k, v = (_heads_v2(m, m.linear(name, x, H * dh, True))
               for name in ("query_proj", "key_proj", "value_proj"))
    scores = ops.bmm(q, ops.div_tensor(ops.transpose(k, -1, -2), ops.to(_scale(m), q.dtype)))
    if rel is not None and relative is not None:
        # (without a term, pos_dropout's output reaches nothing: its node and the noise it
        # keeps are freed with it before the forward ends, so the graph leaves it out)
        table = rel
        if cfg.c2p or cfg.p2c:
            with m.module("pos_dropout"):
                table = m.dropout(rel, cfg.hidden_dropout)
        scores = ops.add(scores, _disentangled_v2(m, cfg, q, k, table))
    scores = ops.view(scores, (B, H, T, T))
    with m.trace.no_grad():  # ~(attention_mask.bool()): a new bool tensor per layer
        negated = m.trace.tensor(square.shape, BOOL, False)
    probs = m.dropout(ops.softmax(ops.masked_fill(scores, negated)), cfg.attention_dropout)
    out = ops.bmm(ops.view(probs, (B * H, T, T)), v)
    out = ops.contiguous(ops.transpose(ops.view(out, (B, H, T, dh)), 1, 2))
    return ops.view(out, (B, T, H * dh))


def _disentangled_v2(m: Builder, cfg: Deberta, q: Tensor, k: Tensor, table: Tensor
                     ) -> Tensor | float:
    """DebertaV2's disentangled_attention_bias: the table's 2·R rows (att_span =
    pos_ebd_size, whatever T), projected by query_proj and key_proj (share_att_key) or
    pos_key_proj / pos_query_proj, as heads repeated over the batch (new tensors); c2p: Q
    times the keys, gathered at clamp(relative_pos + R) expanded to (B·H, T, T), divided by
    its 0-d scale; p2c: K times the queries, gathered, transposed, divided; the terms summed
    (0 + c2p a new tensor); no term: 0."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    one = Dim.const(1)
    window = ops.unsqueeze(table, 0)  # rel_embeddings[0 : 2·att_span, :]: the whole table

    def positions(name: str) -> Tensor:
        heads = _heads_v2(m, m.linear(name, window, H * dh, True))
        # .repeat(B, 1, 1): a new (B·H, 2R, dh) tensor (RepeatBackward0 keeps sizes)
        out = m.trace.tensor((B * H,) + heads.shape[1:], heads.dtype, heads.requires_grad)
        m.trace.record("repeat", out)
        return out

    def index() -> Tensor:  # clamp(±relative_pos + R, ...): a new (1, 1, T, T) int64
        with m.trace.no_grad():
            pos = m.trace.tensor((one, T, T), I64, False)
        return ops.expand(pos, (B * H, T, T))

    keys = queries = None
    if cfg.shared_key:
        queries, keys = positions("query_proj"), positions("key_proj")
    else:
        keys = positions("pos_key_proj") if cfg.c2p else None
        queries = positions("pos_query_proj") if cfg.p2c else None
    score: Tensor | float = 0.0
    if cfg.c2p and keys is not None:
        with m.module("c2p"):
            c2p = ops.gather(ops.bmm(q, ops.transpose(keys, -1, -2)), -1, index())
            score = ops.div_tensor(c2p, ops.to(_scale(m), c2p.dtype))
    if cfg.p2c and queries is not None:
        with m.module("p2c"):
            p2c = ops.gather(ops.bmm(k, ops.transpose(queries, -1, -2)), -1, index())
            p2c = ops.div_tensor(ops.transpose(p2c, -1, -2), ops.to(_scale(m), p2c.dtype))
            score = ops.add(p2c, score) if isinstance(score, float) else ops.add(score, p2c)
    return score
