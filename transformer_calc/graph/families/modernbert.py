"""ModernBERT with its masked-LM head as transformers 5.23 runs it:
models/modernbert/modeling_modernbert.py (ModernBertForMaskedLM: ModernBertModel with
ModernBertEmbeddings, a RoPE table per layer type, ModernBertEncoderLayer (pre-norm, the
first layer's attn_norm an Identity) with ModernBertAttention (Wqkv unbound into views, RoPE
in fp32, eager softmax in fp32) and the GeGLU ModernBertMLP, final_norm;
ModernBertPredictionHead, the decoder tied to the token table; ForMaskedLMLoss over the
logits' fp32 copy).

Layers alternate full and sliding attention (global_attn_every_n_layers): they differ in
the RoPE table they read and in their mask. Without an attention mask, as measured, the
full layers' mask is None (create_bidirectional_mask), and so is the sliding layers' while
T < sliding_window (local_attention // 2: _ignore_bidirectional_mask_sdpa's skip, eager
and SDPA alike); from there on create_bidirectional_sliding_window_mask builds one, once
for the model: SDPA's a bool (1, 1, T, T) expanded over B (which each sliding layer's
kernel converts to a float mask and keeps), eager's a (B, 1, T, T) float mask in the
activations' dtype (added, kept by nothing). LayerNorms have no bias (norm_bias False);
dropout is off (ModernBERT's defaults)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.llama import rotary_tables
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I64, Tensor


@dataclass(frozen=True)
class ModernBert:
    """Symbols: V vocab, E hidden, H heads, dh = E / H, F intermediate, L layers. kinds: a
    letter per layer, F (full) or S (sliding); window: the sliding layers' reach each side
    (local_attention // 2); tied: the decoder's weight is the token table."""

    V: int
    E: int
    H: int
    F: int
    L: int
    kinds: str = "F"
    window: int = 0
    tied: bool = True
    attention_dropout: float = 0.0  # (always: the mapper takes no dropout)

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "dh": self.E // self.H, "F": self.F,
                "L": self.L}


def forward(m: Builder, cfg: ModernBert) -> Tensor:
    """ModernBertForMaskedLM.forward(input_ids=ids, labels=ids)."""
    B, T, V, E = m["B"], m["T"], m["V"], m["E"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        with m.module("embeddings"):
            h = _norm(m, "norm", m.embedding("tok_embeddings", ids, V, E))
        # position_ids = arange(T).unsqueeze(0); a cos/sin pair per layer type
        positions = tr.tensor((T,), I64, False)
        tables = {}
        for kind in sorted(set(cfg.kinds)):
            tables[kind] = rotary_tables(m, h)
        masks: dict[str, Tensor | None] = {"F": None, "S": None}
        if "S" in cfg.kinds and T.value >= cfg.window:  # a guard: T < window skips it
            masks["S"] = _sliding_mask(m, h)
        # the first layer is its own kind (its attn_norm is an Identity)
        kinds = "".join(k.lower() if i == 0 else k for i, k in enumerate(cfg.kinds))
        if len(set(kinds)) == 1:
            kinds = kinds[0]

        def extras(kind: str) -> tuple[Tensor, ...]:
            mask = masks[kind.upper()]
            return (positions, *tables[kind.upper()]) + (() if mask is None else (mask,))

        h = m.layers_by_kind("layers", kinds, lambda x, kind: _layer(
            m, x, tables[kind.upper()], masks[kind.upper()], kind.islower()), h, extras)
        h = _norm(m, "final_norm", h)
    with m.module("head"):
        h = _norm(m, "norm", ops.gelu(m.linear("dense", h, E, False)))
    with m.module("decoder"):
        w = m.tied("model.embeddings.tok_embeddings.weight") if cfg.tied \
            else m.param("weight", V, E)
        logits = ops.linear(h, w, m.param("bias", V))
    # ForMaskedLMLoss: logits.float(), viewed (B·T, V); labels.view(-1)
    logits = ops.to(logits, F32)
    return ops.cross_entropy(ops.view(logits, (B * T, V)), ops.view(ids, (B * T,)))


def _sliding_mask(m: Builder, like: Tensor) -> Tensor:
    """create_bidirectional_sliding_window_mask (no padding, T >= sliding_window): sdpa_mask's
    bool (1, 1, T, T) expanded over B; eager_mask's torch.where of it, (B, 1, T, T) in the
    activations' dtype. No gradient."""
    B, T = m["B"], m["T"]
    one = Dim.const(1)
    if m.run.attention == "eager":
        return m.trace.tensor((B, one, T, T), like.dtype, False, name="sliding_mask")
    mask = m.trace.tensor((one, one, T, T), BOOL, False, name="sliding_mask")
    return ops.expand(mask, (B, one, T, T))


def _norm(m: Builder, name: str, x: Tensor) -> Tensor:
    """nn.LayerNorm(bias=False): the weight alone."""
    with m.module(name):
        return ops.layer_norm(x, m.param("weight", x.shape[-1]), None)


def _layer(m: Builder, h: Tensor, table: tuple[Tensor, Tensor], mask: Tensor | None,
           first: bool) -> Tensor:
    """ModernBertEncoderLayer.forward: h + attn(attn_norm(h)), h + mlp(mlp_norm(h))."""
    with m.module("attn"):
        a = _attention(m, h if first else _norm(m, "attn_norm", h), table, mask)
    h = ops.add(h, a)
    return ops.add(h, _mlp(m, _norm(m, "mlp_norm", h)))


def _mlp(m: Builder, x: Tensor) -> Tensor:
    """ModernBertMLP: input, gate = Wi(x).chunk(2) (views); Wo(act(input) · gate)."""
    F = m["F"]
    with m.module("mlp"):
        up, gate = ops.split(m.linear("Wi", x, F * 2, False), F, -1)
        return m.linear("Wo", ops.mul(ops.gelu(up), gate), m["E"], False)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """ModernBERT's apply_rotary_pos_emb for one of q, k: (x.float() · cos) +
    (rotate_half(x.float()) · sin), each .float() its own copy of a 16-bit x, cast back."""
    half = x.shape[-1].halved()
    xf = ops.to(x, F32)
    xr = ops.to(x, F32)
    x1, x2 = ops.narrow(xr, -1, 0, half), ops.narrow(xr, -1, half.value, half)
    rotated = ops.cat([ops.neg(x2), x1], -1)
    return ops.to(ops.add(ops.mul(xf, cos), ops.mul(rotated, sin)), x.dtype)


def _attention(m: Builder, x: Tensor, table: tuple[Tensor, Tensor],
               mask: Tensor | None) -> Tensor:
    """ModernBertAttention.forward: Wqkv viewed (B, T, 3, H, dh) and unbound (views),
    transposed; RoPE; eager (the mask added, softmax in fp32, cast back) or SDPA (the mask
    as attn_mask); reshaped, Wo (out_drop an Identity without dropout)."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    qkv = ops.view(m.linear("Wqkv", x, H * dh * 3, False), (B, T, Dim.const(3), H, dh))
    q, k, v = (ops.transpose(ops.select(qkv, 2, i), 1, 2) for i in range(3))
    cos, sin = (ops.unsqueeze(t, 1) for t in table)
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    scaling = float(dh.value) ** -0.5
    if m.run.attention == "eager":
        w = ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), scaling)
        if mask is not None:
            w = ops.add(w, mask)
        w = ops.to(ops.softmax(w, F32), q.dtype)
        out = ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))
    else:
        out = scaled_dot_product_attention(q, k, v, is_causal=False, scale=scaling, mask=mask)
        out = ops.contiguous(ops.transpose(ops.reshape(out, (B, H, T, dh)), 1, 2))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("Wo", out, m["E"], False)


@dataclass(frozen=True)
class ModernBertDecoder(ModernBert):
    """ModernBertDecoderConfig's keys: ModernBert's symbols; kinds F (full causal) or S
    (sliding causal); window: sliding_window (local_attention // 2), the reach back."""


def decoder_forward(m: Builder, cfg: ModernBertDecoder) -> Tensor:
    """ModernBertDecoderForCausalLM.forward(input_ids=ids, labels=ids)
    (models/modernbert_decoder/modeling_modernbert_decoder.py): the embeddings' norm (their
    dropout and every other one 0.0: identities); position_ids arange(T) expanded to (B, T),
    so each layer type's cos/sin (no grad) is (B, T, dh); create_causal_mask and
    create_sliding_window_causal_mask as Llama's layers read them; ModernBertDecoderLayer
    (the first without attn_norm) with q/k/v_proj, ModernBERT's fp32 RoPE, eager_attention_
    forward (softmax in fp32) or SDPA; final_norm; lm_head (dense, GELU, norm), the decoder
    tied with its bias; ForCausalLMLoss."""
    from transformer_calc.graph.families import llama
    from transformer_calc.graph.modules import causal_lm_loss

    B, T, V, E, dh = m["B"], m["T"], m["V"], m["E"], m["dh"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        with m.module("embeddings"):
            h = _norm(m, "norm", m.embedding("tok_embeddings", ids, V, E))
        positions = ops.expand(ops.unsqueeze(tr.tensor((T,), I64, False), 0), (B, T))
        masks = {k: llama.attention_mask(m, h, k, cfg.window) for k in sorted(set(cfg.kinds))}
        tables: dict[str, tuple[Tensor, Tensor]] = {}
        with tr.no_grad(), m.module("rotary_emb"):
            for kind in sorted(set(cfg.kinds)):  # emb.cos() * scaling, .to(x.dtype)
                pair = [ops.to(ops.mul(tr.tensor((B, T, dh), F32, False), 1.0), h.dtype)
                        for _ in range(2)]
                tables[kind] = (pair[0], pair[1])
        kinds = "".join(k.lower() if i == 0 else k for i, k in enumerate(cfg.kinds))
        if len(set(kinds)) == 1:
            kinds = kinds[0]

        def extras(kind: str) -> tuple[Tensor, ...]:
            mask = masks[kind.upper()]
            return (positions, *tables[kind.upper()]) + (() if mask is None else (mask,))

        h = m.layers_by_kind("layers", kinds, lambda x, kind: _decoder_layer(
            m, cfg, x, tables[kind.upper()], masks[kind.upper()], kind.islower()), h, extras)
        h = _norm(m, "final_norm", h)
    with m.module("lm_head"):
        h = _norm(m, "norm", ops.gelu(m.linear("dense", h, E, False)))
    with m.module("decoder"):
        w = m.tied("model.embeddings.tok_embeddings.weight") if cfg.tied \
            else m.param("weight", V, E)
        logits = ops.linear(h, w, m.param("bias", V))
    return causal_lm_loss(logits, ids, V)


def _decoder_layer(m: Builder, cfg: ModernBertDecoder, h: Tensor,
                   table: tuple[Tensor, Tensor], mask: Tensor | None, first: bool) -> Tensor:
    """ModernBertDecoderLayer.forward: h + attn(attn_norm(h)), h + mlp(mlp_norm(h))."""
    from transformer_calc.graph.families import llama

    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    x = h if first else _norm(m, "attn_norm", h)
    with m.module("attn"):
        q, k, v = (ops.transpose(ops.view(m.linear(name, x, H * dh, False), (B, T, H, dh)), 1, 2)
                   for name in ("q_proj", "k_proj", "v_proj"))
        cos, sin = (ops.unsqueeze(t, 1) for t in table)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if m.use_cache:  # (Dynamic|DynamicSlidingWindow)Layer.update: a torch.cat copy
            k, v = (ops.cat([t], -2) for t in (k, v))
        scaling = float(dh.value) ** -0.5
        if mask is not None and m.run.attention == "eager":
            out = llama.eager_attention(m, q, k, v, mask, dropout=cfg.attention_dropout,
                                        scaling=scaling)
        else:
            out = llama.sdpa_attention(q, k, v, Dim.const(1), dropout=cfg.attention_dropout,
                                       scaling=scaling, mask=mask)
        out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
        a = m.linear("Wo", out, m["E"], False)
    h = ops.add(h, a)
    return ops.add(h, _mlp(m, _norm(m, "mlp_norm", h)))
