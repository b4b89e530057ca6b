"""FSMT (fairseq's WMT19 translation models) as transformers 5.23 runs it:
models/fsmt/modeling_fsmt.py (FSMTForConditionalGeneration, FSMTModel with
_prepare_fsmt_decoder_inputs, FSMTEncoder, FSMTDecoder, EncoderLayer, DecoderLayer, its own
Attention over (T, B, C) tensors, SinusoidalPositionalEmbedding). Eager only (the class
has no SDPA path).

The measurement's forward is model(input_ids=ids, labels=ids): the encoder reads ids, the
decoder shift_tokens_right(ids), a new (B, T) int64 tensor; both stacks run T tokens.
make_padding_mask finds no padding token in the batch (a batch without padding: the masks
are None), the decoder's causal mask is a (T, T) tensor in the tables' dtype. The position
tables are nn.Parameters that train (measured: the lookups keep their positions)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import I64, Tensor

ACTIVATIONS = {"relu": ops.relu, "gelu": ops.gelu, "silu": ops.silu}


@dataclass(frozen=True)
class Fsmt:
    """The config keys that shape the graph. Symbols: V the target vocabulary (the
    decoder's table and the output projection), Vs the source vocabulary, P
    max_position_embeddings (the position tables have P + offset rows, offset =
    pad_token_id + 1), E d_model, H heads, dh = E / H, F ffn dim, Le and Ld the stacks'
    layers. tied: output_projection is the decoder's table (tie_word_embeddings)."""

    V: int
    Vs: int
    P: int
    E: int
    H: int
    F: int
    Le: int
    Ld: int
    offset: int = 2
    act: str = "relu"
    tied: bool = False
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "Vs": self.Vs, "P": self.P, "E": self.E, "H": self.H,
                "dh": self.E // self.H, "F": self.F, "Le": self.Le, "Ld": self.Ld}


def forward(m: Builder, cfg: Fsmt) -> Tensor:
    """FSMTForConditionalGeneration.forward(input_ids=ids, labels=ids): the encoder, the
    decoder over shift_tokens_right(ids) with the (T, T) causal mask, its
    output_projection, CrossEntropyLoss over lm_logits.view(-1, V) and labels.view(-1) in
    the logits' dtype."""
    if m.run.attention != "eager":
        raise ValueError("FSMTForConditionalGeneration has no SDPA path: eager attention only")
    B, T, V = m["B"], m["T"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with tr.no_grad():  # shift_tokens_right: the clone, gathered, shifted
        dec_ids = tr.tensor((B, T), I64, False, name="decoder_input_ids")
        # triu(fill_with_neg_inf(zeros(T, T, dtype=the tables' dtype)), 1)
        causal = tr.tensor((T, T), m.run.dtype, False, name="causal_mask")
    with m.module("model"):
        with m.module("encoder"):
            enc = _stack(m, cfg, ids, m["Vs"], None, None)
        with m.module("decoder"):
            h = _stack(m, cfg, dec_ids, V, enc, causal)
            # an nn.Linear peft's all-linear adapts: get_output_embeddings is the decoder's
            # table, not this projection (tied to it or not)
            logits = m.linear("output_projection", h, V, False,
                              "model.decoder.embed_tokens.weight" if cfg.tied else "")
    return ops.cross_entropy(ops.view(logits, (B * T, V)), ops.view(ids, (B * T,)))


def _stack(m: Builder, cfg: Fsmt, ids: Tensor, rows: Dim, enc: Tensor | None,
           causal: Tensor | None) -> Tensor:
    """FSMTEncoder / FSMTDecoder.forward: embed_tokens times embed_scale (a product that
    keeps nothing), plus the positions' lookup (make_positions and + past length: a new
    (B, T) int64 tensor the trainable table keeps), dropout, the layers over the (T, B, C)
    transpose, transposed back (the decoder's then projected to the vocabulary)."""
    B, T, E = m["B"], m["T"], m["E"]
    x = ops.mul(m.embedding("embed_tokens", ids, rows, E), 1.0)
    with m.trace.no_grad():
        positions = m.trace.tensor((B, T), I64, False, name="positions")
    pos = m.embedding("embed_positions", positions, m["P"] + cfg.offset, E)
    x = m.dropout(ops.add(x, pos), cfg.dropout)  # (the decoder's `x += positions`)
    x = ops.transpose(x, 0, 1)
    if enc is None:
        x = m.layers("layers", lambda h: _layer(m, cfg, h, None, None), x, count="Le")
        return ops.transpose(x, 0, 1)
    kv = ops.transpose(enc, 0, 1)  # encoder_hidden_states.transpose(0, 1)
    extras = tuple(t for t in (kv, causal) if t is not None)
    x = m.layers("layers", lambda h: _layer(m, cfg, h, kv, causal), x, extras, count="Ld")
    return ops.transpose(x, 0, 1)


def _layer(m: Builder, cfg: Fsmt, x: Tensor, enc: Tensor | None, causal: Tensor | None
           ) -> Tensor:
    """EncoderLayer / DecoderLayer.forward, post-norm: self_attn (the decoder's with the
    causal mask), dropout, residual, LayerNorm; the decoder's encoder_attn; fc1, activation,
    dropout at activation_dropout, fc2, dropout, residual, final_layer_norm."""
    E = m["E"]
    with m.module("self_attn"):
        a = _attention(m, cfg, x, x, causal)
    x = m.layer_norm("self_attn_layer_norm", ops.add(x, m.dropout(a, cfg.dropout)))
    if enc is not None:
        with m.module("encoder_attn"):
            a = _attention(m, cfg, x, enc, None)
        x = m.layer_norm("encoder_attn_layer_norm", ops.add(x, m.dropout(a, cfg.dropout)))
    h = ACTIVATIONS[cfg.act](m.linear("fc1", x, m["F"], True))
    h = m.dropout(h, cfg.activation_dropout)
    h = m.dropout(m.linear("fc2", h, E, True), cfg.dropout)
    return m.layer_norm("final_layer_norm", ops.add(x, h))


def _attention(m: Builder, cfg: Fsmt, x: Tensor, kv: Tensor, mask: Tensor | None) -> Tensor:
    """Attention.forward over (T, B, C): k_proj and v_proj viewed (S, B, H, dh) and
    permuted to (B, H, S, dh); q_proj times scaling, viewed (T, B·H, dh) and transposed;
    K and V reshaped to (B·H, S, dh); bmm(q, kᵀ), + the mask over a (B, H, T, S) view,
    softmax in the scores' dtype, dropout, bmm with V, transposed, contiguous, viewed
    (T, B, E), out_proj."""
    T, B, E = x.shape
    H, dh = m["H"], m["dh"]
    S = kv.shape[0]

    def heads(name: str) -> Tensor:  # .view(-1, bsz, H, dh).permute(1, 2, 0, 3)
        y = ops.view(m.linear(name, kv, E, True), (S, B, H, dh))
        y = ops.transpose(ops.transpose(y, 0, 1), 1, 2)  # (B, S, H, dh) -> (B, H, S, dh)
        return ops.reshape(y, (B * H, S, dh))

    k, v = heads("k_proj"), heads("v_proj")
    q = ops.mul(m.linear("q_proj", x, E, True), float(dh.value) ** -0.5)
    q = ops.transpose(ops.view(q, (T, B * H, dh)), 0, 1)
    w = ops.bmm(q, ops.transpose(k, 1, 2))
    if mask is not None:
        w = ops.view(ops.add(ops.view(w, (B, H, T, S)), mask), (B * H, T, S))
    w = m.dropout(ops.softmax(w), cfg.attention_dropout)
    out = ops.contiguous(ops.transpose(ops.bmm(w, v), 0, 1))
    return m.linear("out_proj", ops.view(out, (T, B, E)), E, True)
