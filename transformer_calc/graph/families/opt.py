"""OPT and BioGPT as transformers 5.23 runs them. models/opt/modeling_opt.py
(OPTForCausalLM, OPTDecoder, OPTLearnedPositionalEmbedding, OPTDecoderLayer, OPTAttention
with its eager_attention_forward or integrations/sdpa_attention.py): token embeddings of
their own width (word_embed_proj_dim) projected in and out by bias-free linears where it
differs from hidden_size; learned positions from a cumulative sum over an all-ones mask,
offset by 2; layers pre- or post-norm (do_layer_norm_before), the MLP over a (B·T, E) view;
Q scaled after its projection, the attention called with scaling 1.0.
models/biogpt/modeling_biogpt.py (BioGptForCausalLM, BioGptModel, BioGptScaledWordEmbedding,
BioGptLearnedPositionalEmbedding, BioGptDecoderLayer, BioGptAttention): OPT's layer
pre-norm, the token embeddings times a Python scale (which keeps nothing), positions
arange(T) offset by 2, dropout on the embeddings' sum, the scaling passed to the attention,
a softmax in the scores' dtype, the erf GELU and the final layer_norm.
models/xglm/modeling_xglm.py (XGLMForCausalLM, XGLMModel, XGLMSinusoidalPositionalEmbedding,
XGLMDecoderLayer, XGLMAttention): BioGPT's layout with a sinusoidal table read under no_grad
(nothing kept) and its own attention, always eager: Q scaled after q_proj, Q, K and V
reshaped to (B·H, T, dh) copies, bmm, the mask added, torch.max against a 0-d
finfo.min, the softmax (in fp32 only for fp16), dropout, bmm, reshaped back. Shared with Llama
(families/llama.py): the eager and SDPA attention interfaces."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F16, F32, I64, Tensor

# OPTLearnedPositionalEmbedding.offset: the table keeps 2 rows before position 0
POSITION_OFFSET = 2


@dataclass(frozen=True)
class OPT:
    """OPTConfig's keys that shape the graph. Symbols: V vocab, P positions
    (max_position_embeddings), E width, H heads, dh = E / H, F ffn_dim, L layers, Ee the
    token embeddings' width (word_embed_proj_dim; projected when it is not E)."""

    V: int
    P: int
    E: int
    H: int
    F: int
    L: int
    Ee: int
    tied: bool = True
    bias: bool = True  # enable_bias
    pre_norm: bool = True  # do_layer_norm_before
    final_norm: bool = True  # pre-norm and not _remove_final_layer_norm
    dropout: float = 0.1
    attention_dropout: float = 0.0

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "P": self.P, "E": self.E, "H": self.H, "dh": self.E // self.H,
                "F": self.F, "L": self.L, "Ee": self.Ee}

    @property
    def projected(self) -> bool:
        return self.Ee != self.E


@dataclass(frozen=True)
class BioGpt(OPT):
    """BioGptConfig's keys (hidden_dropout_prob as dropout, attention_probs_dropout_prob as
    attention_dropout); always pre-norm with its final layer_norm, no projections."""

    pre_norm: bool = True
    final_norm: bool = True


@dataclass(frozen=True)
class TrOcr(OPT):
    """TrOCRConfig's keys (decoder_*; dropout, attention_dropout): learned positions,
    layernorm_embedding, post-norm layers, XGLM's attention without the clamp."""

    pre_norm: bool = False
    final_norm: bool = False


@dataclass(frozen=True)
class Xglm(BioGpt):
    """XGLMConfig's keys (d_model, attention_heads, ffn_dim, num_layers; dropout,
    attention_dropout): BioGPT's layout, sinusoidal positions, its own attention."""


def forward(m: Builder, cfg: OPT) -> Tensor:
    """OPTForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V, Ee = m["B"], m["T"], m["E"], m["V"], m["Ee"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"), m.module("decoder"):
        h = m.embedding("embed_tokens", ops.view(ids, (B, T)), V, Ee if cfg.projected else E)
        # position_ids = (torch.cumsum(ones(B, T), 1) * ones - 1).long(): no grad, (B, T)
        positions = tr.input((B, T), I64, "position_ids")
        pos = m.embedding("embed_positions", ops.add(positions, POSITION_OFFSET),
                          m["P"] + POSITION_OFFSET, E)
        if cfg.projected:
            h = m.linear("project_in", h, E, bias=False)
        h = ops.add(h, pos)
        mask = causal_mask(m, h) if m.run.attention == "eager" else None
        extras = (positions,) if mask is None else (positions, mask)
        h = m.layers("layers", lambda x: _layer(m, cfg, x, mask), h, extras)
        if cfg.final_norm:
            h = m.layer_norm("final_layer_norm", h)
        if cfg.projected:
            h = m.linear("project_out", h, Ee, bias=False)
    with m.module("lm_head"):
        w = m.tied("model.decoder.embed_tokens.weight") if cfg.tied else \
            m.param("weight", V, Ee if cfg.projected else E)
        logits = ops.contiguous(ops.linear(h, w))
    return causal_lm_loss(logits, ids, V)


def _layer(m: Builder, cfg: OPT, h: Tensor, mask: Tensor | None) -> Tensor:
    """OPTDecoderLayer.forward: attention and MLP each added to the residual, the norms
    before (do_layer_norm_before) or after the sums; the MLP runs on h.reshape(-1, E) and
    its sum is viewed back to (B, T, E)."""
    B, T, E = m["B"], m["T"], m["E"]
    x = m.layer_norm("self_attn_layer_norm", h) if cfg.pre_norm else h
    a = m.dropout(_attention(m, cfg, x, mask), cfg.dropout)
    h = ops.add(h, a)
    if not cfg.pre_norm:
        h = m.layer_norm("self_attn_layer_norm", h)
    h = ops.reshape(h, (B * T, E))
    x = m.layer_norm("final_layer_norm", h) if cfg.pre_norm else h
    x = ops.relu(m.linear("fc1", x, m["F"], cfg.bias))
    x = m.dropout(m.linear("fc2", x, E, cfg.bias), cfg.dropout)
    h = ops.view(ops.add(h, x), (B, T, E))
    if not cfg.pre_norm:
        h = m.layer_norm("final_layer_norm", h)
    return h


def _attention(m: Builder, cfg: OPT, x: Tensor, mask: Tensor | None) -> Tensor:
    """OPTAttention.forward: q_proj(x) * head_dim**-0.5, then K and V, each viewed as
    (B, T, H, dh) and transposed; the interface called with scaling 1.0; the output
    reshaped to (B, T, E), contiguous, and out_proj."""
    B, T, E, H, dh = m["B"], m["T"], m["E"], m["H"], m["dh"]
    with m.module("self_attn"):
        biogpt = isinstance(cfg, BioGpt)
        # OPT scales Q after q_proj and calls the interface with scaling 1.0; BioGPT passes
        # head_dim**-0.5 to it
        scaling = 1.0 if not biogpt else dh.value ** -0.5
        q = m.linear("q_proj", x, E, cfg.bias)
        q = q if biogpt else ops.mul(q, dh.value ** -0.5)

        def heads(y: Tensor) -> Tensor:
            return ops.transpose(ops.view(y, (B, T, H, dh)), 1, 2)

        q = heads(q)
        k = heads(m.linear("k_proj", x, E, cfg.bias))
        v = heads(m.linear("v_proj", x, E, cfg.bias))
        if mask is not None and biogpt:
            out = _eager_biogpt(m, q, k, v, mask, cfg.attention_dropout, scaling)
        elif mask is not None:
            out = llama.eager_attention(m, q, k, v, mask, dropout=cfg.attention_dropout,
                                        scaling=scaling)
        elif m.run.attention == "flash":  # flash_attention_2: (B, T, H, dh) out
            out = flash_attention_forward(m, q, k, v)
        else:
            out = llama.sdpa_attention(q, k, v, Dim.const(1), dropout=cfg.attention_dropout,
                                       scaling=scaling)
        out = ops.contiguous(ops.reshape(out, (B, T, E)))
        return m.linear("out_proj", out, E, cfg.bias)


def _xglm_attention(m: Builder, cfg: OPT, x: Tensor, mask: Tensor) -> Tensor:
    """XGLMAttention.forward (self-attention), as described above (TrOCRAttention's: no
    clamp)."""
    B, T, E, H, dh = m["B"], m["T"], m["E"], m["H"], m["dh"]
    with m.module("self_attn"):
        q = ops.mul(m.linear("q_proj", x, E, cfg.bias), dh.value ** -0.5)
        k = m.linear("k_proj", x, E, cfg.bias)
        v = m.linear("v_proj", x, E, cfg.bias)
        q, k, v = (ops.reshape(ops.transpose(ops.view(t, (B, T, H, dh)), 1, 2), (B * H, T, dh))
                   for t in (q, k, v))
        w = ops.view(ops.bmm(q, ops.transpose(k, 1, 2)), (B, H, T, T))
        # torch.full((), torch.finfo(dtype).min): a Python float, so a 0-d fp32 tensor
        floor = m.trace.tensor((), F32, False)
        w = ops.add(w, mask)
        if isinstance(cfg, Xglm):
            w = ops.maximum(w, floor)
        w = ops.view(w, (B * H, T, T))
        w = ops.to(ops.softmax(w, F32), w.dtype) if w.dtype == F16 else ops.softmax(w)
        w = m.dropout(w, cfg.attention_dropout)
        out = ops.transpose(ops.view(ops.bmm(w, v), (B, H, T, dh)), 1, 2)
        return m.linear("out_proj", ops.reshape(out, (B, T, E)), E, cfg.bias)


def _eager_biogpt(m: Builder, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout: float,
                  scaling: float) -> Tensor:
    """eager_attention_forward (modeling_biogpt.py): scores · scaling plus the mask, softmax
    in the scores' dtype, dropout, the product with V, transposed and made contiguous."""
    w = ops.add(ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), scaling), mask)
    w = m.dropout(ops.softmax(w), dropout)
    return ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))


def biogpt_forward(m: Builder, cfg: BioGpt) -> Tensor:
    """BioGptForCausalLM.forward(input_ids=ids, labels=ids) (XGLMForCausalLM's): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    xglm = isinstance(cfg, Xglm)
    base, head = ("model", "lm_head") if xglm else ("biogpt", "output_projection")
    ids = tr.input((B, T), I64, "input_ids")
    with m.module(base):
        h = ops.mul(m.embedding("embed_tokens", ids, V, E), 1.0)  # · embed_scale
        # position_ids = torch.arange(T).unsqueeze(0); the table reads position_ids + 2
        positions = ops.unsqueeze(tr.input((T,), I64, "arange"), 0)
        if xglm:  # weights.index_select(0, position_ids + 2) under no_grad, detached
            pos = tr.tensor((Dim.const(1), T, E), h.dtype, False)
        else:
            pos = m.embedding("embed_positions", ops.add(positions, POSITION_OFFSET),
                              m["P"] + POSITION_OFFSET, E)
        h = m.dropout(ops.add(h, pos), cfg.dropout)
        mask = causal_mask(m, h) if m.run.attention == "eager" or xglm else None
        extras = (() if xglm else (positions,)) + (() if mask is None else (mask,))
        h = m.layers("layers", lambda x: _biogpt_layer(m, cfg, x, mask), h, extras)
        h = m.layer_norm("layer_norm", h)
    with m.module(head):
        w = m.tied(f"{base}.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.linear(h, w)
    return causal_lm_loss(logits, ids, V)


def _biogpt_layer(m: Builder, cfg: BioGpt, h: Tensor, mask: Tensor | None) -> Tensor:
    """BioGptDecoderLayer.forward: pre-norm attention and MLP (fc1, GELU, activation
    dropout (BioGptConfig's 0.0), fc2, dropout), each added to the residual."""
    x = m.layer_norm("self_attn_layer_norm", h)
    a = _xglm_attention(m, cfg, x, mask) if isinstance(cfg, Xglm) and mask is not None else \
        _attention(m, cfg, x, mask)
    a = m.dropout(a, cfg.dropout)
    h = ops.add(h, a)
    x = ops.gelu(m.linear("fc1", m.layer_norm("final_layer_norm", h), m["F"], cfg.bias))
    x = m.dropout(m.linear("fc2", x, m["E"], cfg.bias), cfg.dropout)
    return ops.add(h, x)


def trocr_forward(m: Builder, cfg: TrOcr) -> Tensor:
    """TrOCRForCausalLM.forward(input_ids=ids, labels=ids): the decoder (learned positions
    arange(T) + 2, layernorm_embedding, dropout), output_projection, and CrossEntropyLoss
    over logits.view(-1, V) and the labels unshifted, in the logits' dtype."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"), m.module("decoder"):
        h = ops.mul(m.embedding("embed_tokens", ops.view(ids, (B, T)), V, E), 1.0)
        # TrOCRLearnedPositionalEmbedding: arange(T).expand(B, -1) + 2, a (B, T) tensor
        positions = ops.expand(tr.input((T,), I64, "arange"), (B, T))
        pos = m.embedding("embed_positions", ops.add(positions, POSITION_OFFSET),
                          m["P"] + POSITION_OFFSET, E)
        h = m.layer_norm("layernorm_embedding", ops.add(h, pos))
        h = m.dropout(h, cfg.dropout)
        mask = causal_mask(m, h)
        h = m.layers("layers", lambda x: _trocr_layer(m, cfg, x, mask), h, (mask,))
    with m.module("output_projection"):
        w = m.tied("model.decoder.embed_tokens.weight") if cfg.tied else \
            m.param("weight", V, E)
        logits = ops.linear(h, w)
    return ops.cross_entropy(ops.view(logits, (B * T, V)), ops.view(ids, (B * T,)))


def _trocr_layer(m: Builder, cfg: TrOcr, h: Tensor, mask: Tensor) -> Tensor:
    """TrOCRDecoderLayer.forward (no encoder states): post-norm attention and MLP (fc1,
    GELU, activation dropout (TrOCRConfig's 0.0), fc2, dropout)."""
    a = m.dropout(_xglm_attention(m, cfg, h, mask), cfg.dropout)
    h = m.layer_norm("self_attn_layer_norm", ops.add(h, a))
    x = ops.gelu(m.linear("fc1", h, m["F"], cfg.bias))
    x = m.dropout(m.linear("fc2", x, m["E"], cfg.bias), cfg.dropout)
    return m.layer_norm("final_layer_norm", ops.add(h, x))
