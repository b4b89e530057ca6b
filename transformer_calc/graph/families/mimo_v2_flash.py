"""MiMo-V2-Flash as transformers 5.23 runs it: models/mimo_v2_flash/modeling_mimo_v2_flash.py
(MiMoV2FlashForCausalLM, MiMoV2FlashModel, MiMoV2FlashDecoderLayer, MiMoV2FlashRMSNorm =
LlamaRMSNorm's ops, MiMoV2FlashRotaryEmbedding, MiMoV2FlashAttention with its own
eager_attention_forward, MiMoV2FlashMLP, MiMoV2FlashMoE with MiMoV2FlashTopkRouter and
MiMoV2FlashExperts). Eager attention only (the class has no SDPA path).

Each layer is sliding or full attention (layer_types) and a dense MLP or the experts
(mlp_layer_types):
- the sliding layers have twice num_key_value_heads and one sink logit per head; Q and K
  heads of head_dim, V heads of v_head_dim; V times attention_value_scale (a new tensor);
  RoPE over the first int(head_dim · partial_rotary_factor) of each head (one cos/sin pair
  per layer type, made once), concatenated with the rest (Nemotron's: families/llama.py);
- the eager attention: scores · scaling + the layer type's mask; on a sliding layer the
  sinks, (1, H, 1, 1) expanded over (B, H, T, 1), concatenated as one more column; minus
  the row's max (max.dim keeps its int64 indices); softmax in the scores' dtype (kept);
  the sink column dropped (a view: the product with V reads a contiguous copy of it);
  dropout; the product with repeat_kv's V;
- the experts: DeepSeek-V3's fp32 sigmoid router (families/mla.py), Mixtral's gated experts
  (families/moe.py, eager loop or grouped_mm), no shared experts."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, mla
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import I64, Tensor

# a layer's kind as one letter (Builder.layers_by_kind): its attention (F full, S sliding)
# and its FFN (D the MLP, E the experts)
KINDS = {("F", "D"): "a", ("F", "E"): "b", ("S", "D"): "c", ("S", "E"): "d"}


@dataclass(frozen=True)
class MiMoV2Flash:
    """MiMoV2FlashConfig's sizes. Symbols: V, E, H, F, L as Llama's; Hkv the full layers' K/V
    heads (the sliding layers' are Hs = 2·Hkv), G = H / Hkv and Gs = H / Hs; dh the Q and K
    head width, dv V's; Dr the rotated width; X experts, K per token, Fe an expert's inner
    size. kinds: each layer's letter of KINDS. grouped: the grouped_mm experts."""

    V: int
    E: int
    H: int
    Hkv: int
    dh: int
    dv: int
    F: int
    L: int
    Dr: int
    X: int
    K: int
    Fe: int
    kinds: str
    tied: bool = False
    bias_qkv: bool = False  # attention_bias: q, k, v (o_proj has none)
    attention_dropout: float = 0.0
    grouped: bool = False
    # what mla's MoE block reads: DeepSeek-V3's router renormalising, no shared experts
    norm_topk: bool = True
    shared_expert: bool = False
    longcat: bool = False
    moe_norm: bool = False

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "Hs": 2 * self.Hkv,
                "G": self.H // self.Hkv, "Gs": self.H // (2 * self.Hkv), "dh": self.dh,
                "dv": self.dv, "F": self.F, "L": self.L, "Dr": self.Dr, "X": self.X,
                "K": self.K, "Fe": self.Fe}

    @property
    def attention_kinds(self) -> str:
        """Each layer's attention, F or S."""
        back = {v: k for k, v in KINDS.items()}
        return "".join(back[k][0] for k in self.kinds)


def forward(m: Builder, cfg: MiMoV2Flash) -> Tensor:
    """MiMoV2FlashForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)  # arange(T).unsqueeze(0)
        types = sorted(set(cfg.attention_kinds))
        # causal_mask_mapping and position_embeddings: one per layer type in use
        masks = {k: causal_mask(m, h) for k in types}
        tables = {k: llama.rotary_tables(m, h, width=m["Dr"]) for k in types}

        def extras(kind: str) -> tuple[Tensor, ...]:
            a = _attention_kind(kind)
            return (positions, *tables[a], masks[a])

        def layer(x: Tensor, kind: str) -> Tensor:
            a = _attention_kind(kind)
            return _layer(m, cfg, x, kind, tables[a], masks[a])

        h = m.layers_by_kind("layers", cfg.kinds, layer, h, extras)
        h = llama.rms_norm(m, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _attention_kind(kind: str) -> str:
    return next(a for (a, _), k in KINDS.items() if k == kind)


def _layer(m: Builder, cfg: MiMoV2Flash, h: Tensor, kind: str, table: tuple[Tensor, Tensor],
           mask: Tensor) -> Tensor:
    """MiMoV2FlashDecoderLayer.forward: pre-norm attention and MLP (or experts) around the
    residual."""
    x = llama.rms_norm(m, "input_layernorm", h)
    with m.module("self_attn"):
        h = ops.add(h, _attention(m, cfg, x, table, mask, _attention_kind(kind) == "S"))
    x = llama.rms_norm(m, "post_attention_layernorm", h)
    if kind in "bd":
        return ops.add(h, mla._moe_block(m, cfg, x))  # type: ignore[arg-type]
    return ops.add(h, _mlp(m, x))


def _mlp(m: Builder, x: Tensor) -> Tensor:
    """MiMoV2FlashMLP.forward: down_proj(silu(gate_proj(x)) * up_proj(x)), no biases."""
    with m.module("mlp"):
        F, E = m["F"], m["E"]
        gate = ops.silu(m.linear("gate_proj", x, F, False))
        return m.linear("down_proj", ops.mul(gate, m.linear("up_proj", x, F, False)), E, False)


def _attention(m: Builder, cfg: MiMoV2Flash, x: Tensor, table: tuple[Tensor, Tensor],
               mask: Tensor, sliding: bool) -> Tensor:
    """MiMoV2FlashAttention.forward (module docstring)."""
    B, T, H, dh, dv = m["B"], m["T"], m["H"], m["dh"], m["dv"]
    n, G = (m["Hs"], m["Gs"]) if sliding else (m["Hkv"], m["G"])

    def heads(name: str, count: Dim, width: Dim) -> Tensor:
        y = m.linear(name, x, count * width, cfg.bias_qkv)
        return ops.transpose(ops.view(y, (B, T, count, width)), 1, 2)

    q, k = heads("q_proj", H, dh), heads("k_proj", n, dh)
    v = ops.mul(heads("v_proj", n, dv), 1.0)  # * self.v_scale (a number)
    cos, sin = (ops.unsqueeze(t, 1) for t in table)
    q, k = (llama._partial_rotary(t, cos, sin, m["Dr"]) for t in (q, k))
    k, v = llama.repeat_kv(k, G), llama.repeat_kv(v, G)
    w = ops.add(ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), float(dh.value) ** -0.5), mask)
    if sliding:  # sinks.reshape(1, -1, 1, 1).expand(B, -1, T, -1), one more column
        one = Dim.const(1)
        sinks = ops.expand(ops.view(m.param("sinks", H), (one, H, one, one)), (B, H, T, one))
        w = ops.cat([w, sinks], -1)
    w = ops.softmax(ops.sub(w, ops.max_dim(w)))  # F.softmax(..., dtype=attn_weights.dtype)
    if sliding:  # probs[..., :-1]
        w = ops.narrow(w, -1, 0, T)
    w = m.dropout(w, cfg.attention_dropout)
    out = ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dv)))
    return m.linear("o_proj", out, m["E"], False)
