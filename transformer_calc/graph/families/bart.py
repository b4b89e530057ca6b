"""BART and Marian as transformers 5.23 runs them: models/bart/modeling_bart.py
(BartForConditionalGeneration, BartModel, BartEncoder, BartDecoder, BartEncoderLayer,
BartDecoderLayer, BartAttention with eager_attention_forward or
integrations/sdpa_attention.py, BartScaledWordEmbedding, BartLearnedPositionalEmbedding)
and BartForCausalLM (the decoder alone, its layers' cross-attention built but idle);
models/marian/modeling_marian.py (MarianMTModel: BART's layers, sinusoidal positions from a
frozen table looked up under no_grad, no layernorm_embedding, the encoder's and the
decoder's token tables apart unless share_encoder_decoder_embeddings).

The measurement's forward is model(input_ids=ids, labels=ids): the encoder reads ids, the
decoder shift_tokens_right(labels), a new (B, T) int64 tensor (BartForCausalLM: ids
themselves); both stacks run T tokens. With labels, BartForConditionalGeneration turns
use_cache off. No attention_mask: the encoder's create_bidirectional_mask returns None, the
decoder's create_causal_mask (over its torch.ones padding mask) the (B, 1, T, T) mask under
eager and None under SDPA (is_causal), the cross-attention's mask is None."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_mask
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import I64, Tensor

ACTIVATIONS = {"gelu": ops.gelu, "relu": ops.relu, "silu": ops.silu}


@dataclass(frozen=True)
class Bart:
    """The config keys that shape the graph. Symbols: V vocab, P max_position_embeddings
    (the position tables have P + 2 rows), E d_model, H heads, dh = E / H, F ffn dim, Le
    encoder layers, Ld decoder layers.

    causal_lm: BartForCausalLM (the decoder alone; Le unused, 1); act: activation_function;
    scale_embedding: the token embeddings times √E (a product that keeps nothing);
    sinusoidal: Marian's frozen position table of P rows (BART's: learned, P + 2 rows);
    embedding_norm: layernorm_embedding; shared_tables: one token table for both stacks
    (model.shared), else the encoder's and the decoder's own (the head tied to the
    decoder's)."""

    V: int
    P: int
    E: int
    H: int
    F: int
    Le: int
    Ld: int
    causal_lm: bool = False
    act: str = "gelu"
    scale_embedding: bool = False
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    sinusoidal: bool = False
    embedding_norm: bool = True
    shared_tables: bool = True

    def sizes(self) -> dict[str, int]:
        # (one set of symbols per class: BartForCausalLM's Le is 1, no layer reads it)
        return {"V": self.V, "P": self.P, "E": self.E, "H": self.H, "dh": self.E // self.H,
                "F": self.F, "Le": self.Le, "Ld": self.Ld}


def forward(m: Builder, cfg: Bart) -> Tensor:
    """BartForConditionalGeneration.forward(input_ids=ids, labels=ids): the encoder, the
    decoder over the shifted labels, the tied lm_head plus final_logits_bias (a buffer),
    CrossEntropyLoss over lm_logits.view(-1, V) and labels.view(-1) in the logits' dtype.
    BartForCausalLM: the decoder over ids, the lm_head tied to its table, the same loss
    (no shift)."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        if cfg.causal_lm:
            with m.module("decoder"):
                table = m.param("embed_tokens.weight", V, E)
                h = _decoder(m, cfg, ids, table, None)
        else:
            shared = m.param("shared.weight", V, E) if cfg.shared_tables else None
            with m.module("encoder"):
                table = shared if shared is not None else m.param("embed_tokens.weight", V, E)
                enc = _encoder(m, cfg, ids, table)
            # shift_tokens_right(labels): new_zeros, the shifted copy, the start token,
            # masked_fill_ (integer ops without a gradient): a new (B, T) int64 tensor
            with tr.no_grad():
                dec_ids = tr.tensor((B, T), I64, False, name="decoder_input_ids")
            with m.module("decoder"):
                table = shared if shared is not None else m.param("embed_tokens.weight", V, E)
                h = _decoder(m, cfg, dec_ids, table, enc)
    with m.module("lm_head"):
        logits = ops.linear(h, table)
    if not cfg.causal_lm:  # lm_logits + self.final_logits_bias: a (1, V) buffer
        logits = ops.add(logits, tr.tensor((Dim.const(1), V), logits.dtype, False, "buffer",
                                           "final_logits_bias"))
    return ops.cross_entropy(ops.view(logits, (B * T, V)), ops.view(ids, (B * T,)))


def _embed(m: Builder, cfg: Bart, ids: Tensor, table: Tensor, positions: Tensor) -> Tensor:
    """BartScaledWordEmbedding (the lookup times embed_scale, 1.0 unless scale_embedding),
    plus BartLearnedPositionalEmbedding at positions + 2 (a new int64 tensor the table keeps)
    or MarianSinusoidalPositionalEmbedding (under no_grad: a (T, E) tensor without a
    gradient), layernorm_embedding, dropout."""
    E = m["E"]
    x = ops.mul(ops.embedding(table, ids), float(E.value) ** 0.5 if cfg.scale_embedding
                else 1.0)
    with m.module("embed_positions"):
        if cfg.sinusoidal:
            # a frozen nn.Parameter (requires_grad False): not among the parameters tcalc
            # counts (those that train), so held as the model's buffer-like memory
            weight = m.trace.tensor((m["P"], E), m.run.dtype, False, "buffer",
                                    f"{m.trace.scope}.weight")
            with m.trace.no_grad():
                pos = ops.embedding(weight, positions)
        else:
            with m.trace.no_grad():
                shifted = ops.add(positions, 2.0)  # position_ids + self.offset
            pos = ops.embedding(m.param("weight", m["P"] + 2, E), shifted)
    h = ops.add(x, pos)
    if cfg.embedding_norm:
        h = m.layer_norm("layernorm_embedding", h)
    return m.dropout(h, cfg.dropout)


def _encoder(m: Builder, cfg: Bart, ids: Tensor, table: Tensor) -> Tensor:
    """BartEncoder.forward: the positions are arange(T).expand(B, -1) (needed for the
    shape: an expanded view, its + 2 a new (B, T) tensor; Marian's arange(T)), then the
    layers."""
    B, T = m["B"], m["T"]
    with m.trace.no_grad():
        positions = m.trace.tensor((T,), I64, False)  # Marian's arange(T)
        if not cfg.sinusoidal:
            positions = ops.expand(ops.unsqueeze(positions, 0), (B, T))
    h = _embed(m, cfg, ids, table, positions)
    return m.layers("layers", lambda x: _layer(m, cfg, x, None, None), h, count="Le")


def _decoder(m: Builder, cfg: Bart, ids: Tensor, table: Tensor, enc: Tensor | None
             ) -> Tensor:
    """BartDecoder.forward: the positions arange(T) unsqueezed to (1, T), the causal mask,
    the layers with the encoder's output (None: BartForCausalLM)."""
    T = m["T"]
    with m.trace.no_grad():
        positions = m.trace.tensor((T,), I64, False)
        if not cfg.sinusoidal:  # BartLearnedPositionalEmbedding: position_ids.unsqueeze(0)
            positions = ops.unsqueeze(positions, 0)
    h = _embed(m, cfg, ids, table, positions)
    mask = causal_mask(m, h) if m.run.attention == "eager" else None
    extras = tuple(t for t in (mask, enc) if t is not None)
    return m.layers("layers", lambda x: _layer(m, cfg, x, mask, enc, decoder=True), h,
                    extras, count="Ld")


def _layer(m: Builder, cfg: Bart, h: Tensor, mask: Tensor | None, enc: Tensor | None,
           decoder: bool = False) -> Tensor:
    """BartEncoderLayer / BartDecoderLayer.forward, post-norm: self-attention, dropout,
    residual, self_attn_layer_norm; (the decoder's) encoder_attn over the encoder's output,
    dropout, residual, encoder_attn_layer_norm; fc1, activation, fc2, dropout, residual,
    final_layer_norm (fc1's activation followed by dropout at activation_dropout).
    BartForCausalLM's layers have an encoder_attn that does not run."""
    E = m["E"]
    with m.module("self_attn"):
        a = _attention(m, cfg, h, h, mask, causal=decoder, cached=decoder and cfg.causal_lm)
    h = m.layer_norm("self_attn_layer_norm", ops.add(h, m.dropout(a, cfg.dropout)))
    if enc is not None:
        with m.module("encoder_attn"):
            a = _attention(m, cfg, h, enc, None, causal=False, cached=False)
        h = m.layer_norm("encoder_attn_layer_norm", ops.add(h, m.dropout(a, cfg.dropout)))
    elif decoder:  # built with the layer (is_decoder), idle: parameters, no ops
        with m.module("encoder_attn"):
            for name in ("k_proj", "v_proj", "q_proj", "out_proj"):
                m.idle_linear(name, E, E, True)
        with m.module("encoder_attn_layer_norm"):
            m.param("weight", E)
            m.param("bias", E)
    x = ACTIVATIONS[cfg.act](m.linear("fc1", h, m["F"], True))
    x = m.dropout(x, cfg.activation_dropout)
    x = m.dropout(m.linear("fc2", x, E, True), cfg.dropout)
    return m.layer_norm("final_layer_norm", ops.add(h, x))


def _attention(m: Builder, cfg: Bart, x: Tensor, kv: Tensor, mask: Tensor | None, *,
               causal: bool, cached: bool) -> Tensor:
    """BartAttention.forward: q_proj, k_proj, v_proj viewed as (B, T, H, dh) and transposed
    (BartForCausalLM's DynamicCache concatenating K and V under use_cache: copies); the
    attention interface with scaling dh^-0.5; the output reshaped, contiguous, out_proj."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    q, k, v = (ops.transpose(ops.view(m.linear(name, src, H * dh, True), (B, T, H, dh)), 1, 2)
               for name, src in (("q_proj", x), ("k_proj", kv), ("v_proj", kv)))
    if cached and m.use_cache:
        k, v = ops.cat([k], -2), ops.cat([v], -2)
    p, scaling = cfg.attention_dropout, float(dh.value) ** -0.5
    if m.run.attention == "eager":
        # eager_attention_forward (BERT's): matmul(q, kᵀ) · scaling, + the mask, softmax in
        # the scores' dtype, dropout, the product with V, transposed, contiguous
        w = ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), scaling)
        if mask is not None:
            w = ops.add(w, mask)
        w = m.dropout(ops.softmax(w), p)
        out = ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))
    elif m.run.attention == "flash":  # flash_attention_2: (B, T, H, dh) out, no mask,
        # causal for the decoder's self-attention (the keys: the source's, as many)
        out = flash_attention_forward(m, q, k, v)
    else:
        # sdpa_attention_forward: no mask, is_causal for the decoder's self-attention
        out = scaled_dot_product_attention(q, k, v, is_causal=causal and T.value > 1,
                                           dropout_p=p, scale=scaling)
        out = ops.contiguous(ops.transpose(ops.reshape(out, (B, H, T, dh)), 1, 2))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("out_proj", out, m["E"], True)
