"""BART and its kin as transformers 5.23 runs them: models/bart/modeling_bart.py
(BartForConditionalGeneration, BartModel, BartEncoder, BartDecoder, BartEncoderLayer,
BartDecoderLayer, BartAttention with eager_attention_forward or
integrations/sdpa_attention.py, BartScaledWordEmbedding, BartLearnedPositionalEmbedding)
and BartForCausalLM (the decoder alone, its layers' cross-attention built but idle);
models/marian/modeling_marian.py (MarianMTModel: BART's layers, sinusoidal positions from a
frozen table looked up under no_grad, no layernorm_embedding, the encoder's and the
decoder's token tables apart unless share_encoder_decoder_embeddings). The same classes
with a flag or two: models/plbart/modeling_plbart.py (PLBartForConditionalGeneration:
BART's); models/mbart/modeling_mbart.py (MBartForConditionalGeneration: pre-norm layers,
each stack's final layer_norm); models/blenderbot/modeling_blenderbot.py
(BlenderbotForConditionalGeneration: pre-norm, final norms, no layernorm_embedding, learned
positions looked up at arange(T) without an offset); models/blenderbot_small/
modeling_blenderbot_small.py (BlenderbotSmallForConditionalGeneration: BART's layers,
Blenderbot's positions, the decoder's layernorm_embedding over the token embeddings before
the positions are added); models/pegasus/modeling_pegasus.py
(PegasusForConditionalGeneration: pre-norm, final norms, Marian's frozen sinusoidal table);
models/m2m_100/modeling_m2m_100.py (M2M100ForConditionalGeneration: pre-norm, final norms, a
sinusoidal buffer of P + 2 rows read by index_select under no_grad, no final_logits_bias);
models/mvp/modeling_mvp.py (MvpForConditionalGeneration without prompts, use_prompt's
default: BART's layout, MvpAttention's own bmm over (B·H, T, dh), eager only);
models/bigbird_pegasus/modeling_bigbird_pegasus.py (BigBirdPegasusForConditionalGeneration
where transformers runs the encoder's original_full attention, below block_sparse_from
tokens: Blenderbot's layout with gelu_new, no attention biases unless use_bias, the
encoder's BigBirdPegasusSelfAttention (query, key, value, output; the scores divided by
√dh) and FFN without an activation dropout, the stacks' final norms named
layernorm_embedding; eager only).

The measurement's forward is model(input_ids=ids, labels=ids): the encoder reads ids, the
decoder shift_tokens_right(labels), a new (B, T) int64 tensor (BartForCausalLM: ids
themselves); both stacks run T tokens. With labels, BartForConditionalGeneration turns
use_cache off. No attention_mask: the encoder's create_bidirectional_mask returns None, the
decoder's create_causal_mask (over its torch.ones padding mask) the (B, 1, T, T) mask under
eager and None under SDPA (is_causal), the cross-attention's mask is None."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.gpt2 import new_gelu
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_mask
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F16, I64, Tensor

ACTIVATIONS = {"gelu": ops.gelu, "relu": ops.relu, "silu": ops.silu, "gelu_new": new_gelu}


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
    decoder's).

    pre_norm: each sublayer's norm before it, each stack's final layer_norm (mBART,
    Blenderbot, Pegasus, M2M-100); position_offset: learned tables of P + offset rows, BART's
    2 (its positions + 2: new (B, T) and (1, T) tensors the lookups keep), Blenderbot's 0
    (arange(T) looked up as is), a sinusoidal table's extra rows (M2M-100's 2);
    norm_before_positions: the decoder's layernorm_embedding over the token embeddings alone
    (BlenderbotSmall); logits_bias: final_logits_bias added to the logits (not M2M-100's);
    bmm_attention: MvpAttention's bmm over (B·H, T, dh) copies; decoder_batch_positions:
    the decoder's positions + 2 over (B, T) as the encoder's (MVP); fp16_clamp: the encoder
    layer's torch.clamp of a float16 output (mBART, Blenderbot, Pegasus, M2M-100: whatever
    the values); attention_bias: q, k, v and the output projections' biases (BigBird-
    Pegasus's use_bias); bigbird: BigBird-Pegasus's encoder attention, FFN and final norms
    (_bigbird_attention); block_sparse_from: the length from which its encoder runs
    block-sparse attention, which the graph does not express (0: never)."""

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
    pre_norm: bool = False
    position_offset: int = 2
    norm_before_positions: bool = False
    logits_bias: bool = True
    bmm_attention: bool = False
    decoder_batch_positions: bool = False
    fp16_clamp: bool = False
    attention_bias: bool = True
    bigbird: bool = False
    block_sparse_from: int = 0

    def sizes(self) -> dict[str, int]:
        # (one set of symbols per class: BartForCausalLM's Le is 1, no layer reads it)
        return {"V": self.V, "P": self.P, "E": self.E, "H": self.H, "dh": self.E // self.H,
                "F": self.F, "Le": self.Le, "Ld": self.Ld}


def forward(m: Builder, cfg: Bart) -> Tensor:
    """BartForConditionalGeneration.forward(input_ids=ids, labels=ids): the encoder, the
    decoder over the shifted labels, the tied lm_head plus final_logits_bias (a buffer),
    CrossEntropyLoss over lm_logits.view(-1, V) and labels.view(-1) in the logits' dtype.
    BartForCausalLM: the decoder over ids, the lm_head tied to its table, the same loss
    (no shift). MvpForConditionalGeneration has no SDPA path: eager only."""
    if (cfg.bmm_attention or cfg.bigbird) and m.run.attention != "eager":
        raise ValueError("MvpForConditionalGeneration and BigBirdPegasusForConditional"
                         "Generation have no SDPA path: eager attention only")
    if cfg.block_sparse_from and m["T"].value >= cfg.block_sparse_from:
        raise ValueError(f"BigBird-Pegasus's encoder runs block-sparse attention from "
                         f"{cfg.block_sparse_from} tokens: not expressed by the graph")
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
    if not cfg.causal_lm and cfg.logits_bias:  # + self.final_logits_bias: a (1, V) buffer
        logits = ops.add(logits, tr.tensor((Dim.const(1), V), logits.dtype, False, "buffer",
                                           "final_logits_bias"))
    return ops.cross_entropy(ops.view(logits, (B * T, V)), ops.view(ids, (B * T,)))


def _embed(m: Builder, cfg: Bart, ids: Tensor, table: Tensor, positions: Tensor,
           decoder: bool) -> Tensor:
    """BartScaledWordEmbedding (the lookup times embed_scale, 1.0 unless scale_embedding),
    plus the positions: BartLearnedPositionalEmbedding at positions + 2 (a new int64 tensor
    the table keeps), Blenderbot's at positions as they are, or a sinusoidal table looked up
    under no_grad (Marian's and Pegasus's frozen nn.Embedding, M2M-100's buffer by
    index_select: a tensor without a gradient); layernorm_embedding over the sum (the
    BlenderbotSmall decoder's over the token embeddings alone), dropout."""
    E, P, offset = m["E"], m["P"], cfg.position_offset
    x = ops.mul(ops.embedding(table, ids), float(E.value) ** 0.5 if cfg.scale_embedding
                else 1.0)
    norm_first = cfg.embedding_norm and cfg.norm_before_positions and decoder
    if norm_first:
        x = m.layer_norm("layernorm_embedding", x)
    with m.module("embed_positions"):
        if cfg.sinusoidal:
            # a frozen nn.Parameter (requires_grad False) or a buffer: not among the
            # parameters tcalc counts (those that train), so held as the model's buffer
            weight = m.trace.tensor((P + offset if offset else P, E), m.run.dtype, False,
                                    "buffer", f"{m.trace.scope}.weight")
            with m.trace.no_grad():
                pos = ops.embedding(weight, positions)
        elif offset:
            with m.trace.no_grad():
                shifted = ops.add(positions, float(offset))  # position_ids + self.offset
            pos = ops.embedding(m.param("weight", P + offset, E), shifted)
        else:  # BlenderbotLearnedPositionalEmbedding: arange(T) itself
            pos = ops.embedding(m.param("weight", P, E), positions)
    h = ops.add(x, pos)
    if cfg.embedding_norm and not norm_first:
        h = m.layer_norm("layernorm_embedding", h)
    return m.dropout(h, cfg.dropout)


def _positions(m: Builder, cfg: Bart, decoder: bool) -> Tensor:
    """The position ids (without a gradient): BART's arange(T) expanded to (B, T) in the
    encoder (an expanded view, its + 2 a new (B, T) tensor), unsqueezed to (1, T) in the
    decoder (MVP's decoder: expanded to (B, T) as well, no position_ids passed); arange(T)
    for Blenderbot's learned and Marian's and Pegasus's sinusoidal
    tables; M2M-100's create_position_ids_from_input_ids, a (B, T) tensor from the ids."""
    B, T = m["B"], m["T"]
    with m.trace.no_grad():
        if cfg.sinusoidal and cfg.position_offset:
            return m.trace.tensor((B, T), I64, False)
        positions = m.trace.tensor((T,), I64, False)
        if not cfg.sinusoidal and cfg.position_offset:
            positions = ops.unsqueeze(positions, 0)
            if not decoder or cfg.decoder_batch_positions:
                positions = ops.expand(positions, (B, T))
    return positions


# the stacks' final norms (BigBird-Pegasus's: named layernorm_embedding)
_FINAL_NORM = {False: "layer_norm", True: "layernorm_embedding"}


def _encoder(m: Builder, cfg: Bart, ids: Tensor, table: Tensor) -> Tensor:
    """BartEncoder.forward: the embeddings, the layers, the final layer_norm of the
    pre-norm kin."""
    h = _embed(m, cfg, ids, table, _positions(m, cfg, False), False)
    h = m.layers("layers", lambda x: _layer(m, cfg, x, None, None), h, count="Le")
    return m.layer_norm(_FINAL_NORM[cfg.bigbird], h) if cfg.pre_norm else h


def _decoder(m: Builder, cfg: Bart, ids: Tensor, table: Tensor, enc: Tensor | None
             ) -> Tensor:
    """BartDecoder.forward: the embeddings, the causal mask, the layers with the encoder's
    output (None: BartForCausalLM), the final layer_norm of the pre-norm kin."""
    h = _embed(m, cfg, ids, table, _positions(m, cfg, True), True)
    mask = causal_mask(m, h) if m.run.attention == "eager" else None
    extras = tuple(t for t in (mask, enc) if t is not None)
    h = m.layers("layers", lambda x: _layer(m, cfg, x, mask, enc, decoder=True), h,
                 extras, count="Ld")
    return m.layer_norm(_FINAL_NORM[cfg.bigbird], h) if cfg.pre_norm else h


def _layer(m: Builder, cfg: Bart, h: Tensor, mask: Tensor | None, enc: Tensor | None,
           decoder: bool = False) -> Tensor:
    """BartEncoderLayer / BartDecoderLayer.forward: self-attention, dropout, residual;
    (the decoder's) encoder_attn over the encoder's output, dropout, residual; fc1,
    activation, dropout at activation_dropout, fc2, dropout, residual. Post-norm (BART):
    each sublayer's norm after its residual; pre-norm (mBART's kin): before the sublayer,
    on its input. BartForCausalLM's layers have an encoder_attn that does not run. The
    pre-norm kin's encoder layer clamps a float16 output to ±(finfo.max - 1000)."""
    E = m["E"]

    def sublayer(h: Tensor, norm: str, run: Callable[[Tensor], Tensor]) -> Tensor:
        x = run(m.layer_norm(norm, h) if cfg.pre_norm else h)
        h = ops.add(h, m.dropout(x, cfg.dropout))
        return h if cfg.pre_norm else m.layer_norm(norm, h)

    def self_attn(x: Tensor) -> Tensor:
        with m.module("self_attn"):
            if cfg.bigbird and not decoder:
                return _bigbird_attention(m, cfg, x)
            return _attention(m, cfg, x, x, mask, causal=decoder,
                              cached=decoder and cfg.causal_lm)

    def cross_attn(x: Tensor) -> Tensor:
        assert enc is not None
        with m.module("encoder_attn"):
            return _attention(m, cfg, x, enc, None, causal=False, cached=False)

    def ffn(x: Tensor) -> Tensor:
        x = ACTIVATIONS[cfg.act](m.linear("fc1", x, m["F"], True))
        if not (cfg.bigbird and not decoder):  # (BigBirdPegasusEncoderLayer has none)
            x = m.dropout(x, cfg.activation_dropout)
        return m.linear("fc2", x, E, True)

    h = sublayer(h, "self_attn_layer_norm", self_attn)
    if enc is not None:
        h = sublayer(h, "encoder_attn_layer_norm", cross_attn)
    elif decoder:  # built with the layer (is_decoder), idle: parameters, no ops
        with m.module("encoder_attn"):
            for name in ("k_proj", "v_proj", "q_proj", "out_proj"):
                m.idle_linear(name, E, E, True)
        with m.module("encoder_attn_layer_norm"):
            m.param("weight", E)
            m.param("bias", E)
    h = sublayer(h, "final_layer_norm", ffn)
    if cfg.fp16_clamp and not decoder and h.dtype == F16:
        h = ops.clamp(h)  # torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
    return h


def _attention(m: Builder, cfg: Bart, x: Tensor, kv: Tensor, mask: Tensor | None, *,
               causal: bool, cached: bool) -> Tensor:
    """BartAttention.forward: q_proj, k_proj, v_proj viewed as (B, T, H, dh) and transposed
    (BartForCausalLM's DynamicCache concatenating K and V under use_cache: copies); the
    attention interface with scaling dh^-0.5; the output reshaped, contiguous, out_proj.
    MVP's: _bmm_attention."""
    if cfg.bmm_attention:
        return _bmm_attention(m, cfg, x, kv, mask)
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    bias = cfg.attention_bias
    q, k, v = (ops.transpose(ops.view(m.linear(name, src, H * dh, bias), (B, T, H, dh)), 1, 2)
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
    return m.linear("out_proj", out, m["E"], bias)


def _bmm_attention(m: Builder, cfg: Bart, x: Tensor, kv: Tensor, mask: Tensor | None
                   ) -> Tensor:
    """MvpAttention.forward (eager only): q_proj times scaling; K and V viewed (B, S, H, dh)
    and transposed; Q likewise; the three reshaped to (B·H, ·, dh) (copies of the
    transposed views); bmm(q, kᵀ), + the mask over a (B, H, T, S) view, softmax in the
    scores' dtype, dropout, bmm with V, viewed (B, H, T, dh), transposed, reshaped to
    (B, T, E) (a copy), out_proj."""
    B, T, E = x.shape
    S = kv.shape[1]
    H, dh = m["H"], m["dh"]
    q = ops.mul(m.linear("q_proj", x, E, True), float(dh.value) ** -0.5)
    k, v = (ops.transpose(ops.view(m.linear(name, kv, E, True), (B, S, H, dh)), 1, 2)
            for name in ("k_proj", "v_proj"))
    q = ops.reshape(ops.transpose(ops.view(q, (B, T, H, dh)), 1, 2), (B * H, T, dh))
    k, v = ops.reshape(k, (B * H, S, dh)), ops.reshape(v, (B * H, S, dh))
    w = ops.bmm(q, ops.transpose(k, 1, 2))
    if mask is not None:
        w = ops.view(ops.add(ops.view(w, (B, H, T, S)), mask), (B * H, T, S))
    w = m.dropout(ops.softmax(w), cfg.attention_dropout)
    out = ops.transpose(ops.view(ops.bmm(w, v), (B, H, T, dh)), 1, 2)
    return m.linear("out_proj", ops.reshape(out, (B, T, E)), E, True)


def _bigbird_attention(m: Builder, cfg: Bart, x: Tensor) -> Tensor:
    """BigBirdPegasusEncoderAttention.forward under original_full (eager only):
    BigBirdPegasusSelfAttention's query, key and value viewed (B, T, H, dh) and transposed,
    matmul(q, kᵀ) / √dh (the all-ones padding mask adds nothing it keeps), softmax in the
    scores' dtype, dropout at attention_dropout, matmul with V, permuted, contiguous, viewed
    (B, T, E); then the output projection."""
    B, T, E, H, dh = m["B"], m["T"], m["E"], m["H"], m["dh"]
    bias = cfg.attention_bias
    with m.module("self"):
        q, k, v = (ops.transpose(ops.view(m.linear(name, x, E, bias), (B, T, H, dh)), 1, 2)
                   for name in ("query", "key", "value"))
        w = ops.div(ops.matmul(q, ops.transpose(k, 2, 3)), math.sqrt(dh.value))
        w = m.dropout(ops.softmax(w), cfg.attention_dropout)
        out = ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))
    return m.linear("output", ops.view(out, (B, T, E)), E, bias)
