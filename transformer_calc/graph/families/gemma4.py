"""Gemma 4's text decoders as transformers 5.23 runs them: models/gemma4/modeling_gemma4.py
(Gemma4ForCausalLM, Gemma4TextModel, Gemma4TextDecoderLayer, Gemma4TextAttention,
Gemma4TextMLP, Gemma4RMSNorm, Gemma4TextScaledWordEmbedding, Gemma4TextRotaryEmbedding) and
models/gemma4_unified/modeling_gemma4_unified.py (Gemma4UnifiedForCausalLM: the same layer
without the per-layer inputs). Gemma 3's sandwich-normed layer (families/gemma.py) with:

- Gemma4RMSNorm: x.float() * pow(x².mean + eps, -0.5), times weight.float() (not 1 + w),
  cast back; v_norm has no weight.
- attention: q_norm over each head before RoPE (applied to the (B, T, H, dh) view, the
  tables unsqueezed at dim 2), then transposed; k the same; v normed by v_norm; scaling 1.
  Full-attention layers have their own head_dim (global_head_dim) and, with
  attention_k_eq_v, num_global_key_value_heads K heads and no v_proj: V is K's projection
  (before k_norm), normed by v_norm. Each layer type its own RoPE table ("proportional" RoPE
  for full layers: as wide as their head_dim).
- KV sharing (num_kv_shared_layers): the last layers have no k/v projections and read the
  K and V of the last earlier layer of their type (kv_sharing_modes' "store"); with
  use_double_wide_mlp their MLP is twice as wide.
- per-layer inputs (hidden_size_per_layer_input, Gemma4TextModel.get_per_layer_inputs and
  project_per_layer_inputs): a scaled embedding of L·P per token plus the embeddings'
  projection (scaled, normed over P), summed and scaled by 2^-0.5; each layer then gates
  them: per_layer_projection(gelu(per_layer_input_gate(h)) * per_layer_input[:, :, i]),
  normed (post_per_layer_input_norm) and added.
- each layer's output multiplied in place by layer_scalar, a (1,) buffer (keeps only it).
- enable_moe_block: experts beside the dense MLP in every layer. The MLP's output normed
  (post_feedforward_layernorm_1); the router (Gemma4TextRouter) reads the layer's residual:
  an RMSNorm without weight, times its scale and hidden_size^-0.5, a linear to the
  experts, softmax in fp32, topk, the top values divided by their sum in place, times
  per_expert_scale[top_k_index]; the experts (Gemma4TextExperts: GELU-gated, the MoE
  family's loop or grouped_mm, families/moe.py) read pre_feedforward_layernorm_2 of the
  residual; their output normed (post_feedforward_layernorm_2) and added to the MLP's.

_maybe_slice_kv_shared_inputs slices the inputs of the shared layers with logits_to_keep = 0
(slice(0, None)): views of the same storages, which change nothing held."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from transformer_calc.graph import ops
from transformer_calc.graph.families import gemma, moe
from transformer_calc.graph.families.llama import (
    apply_rotary,
    attention_mask,
    eager_attention,
    repeat_kv,
    rotary_tables,
    sdpa_attention,
)
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor

# a layer's letter for Builder.layers_by_kind: its attention (S sliding, F full), its
# kv_sharing_modes entry (None, "store", "reuse") and, Gemma 3n, whether its FFN gate is
# sparsified (lower case); layers of one letter run one forward
_LETTERS = {(k, md, sp): (letter.lower() if sp else letter)
            for (k, md), letter in {("S", ""): "S", ("F", ""): "F", ("S", "store"): "A",
                                    ("F", "store"): "B", ("S", "reuse"): "X",
                                    ("F", "reuse"): "Y"}.items() for sp in (False, True)}
DECODE = {v: k for k, v in _LETTERS.items()}


@dataclass(frozen=True)
class Gemma4(gemma.Gemma):
    """Gemma's fields (kinds: S or F per layer) and Gemma 4's. Symbols beyond Gemma's: dg
    the full layers' head_dim, Hg their K/V heads, Gg = H / Hg, Ep the per-layer input's
    width and Vp its vocabulary (with ple: the per-layer inputs exist; 1 without)."""

    dg: int = 0
    Hg: int = 0
    k_eq_v: bool = False  # attention_k_eq_v: full layers' V is their K projection
    shared: int = 0  # num_kv_shared_layers
    wide: bool = False  # use_double_wide_mlp (on the shared layers)
    ple: bool = False  # hidden_size_per_layer_input set: the per-layer inputs
    Ep: int = 1
    Vp: int = 1
    experts: bool = False  # enable_moe_block: experts beside the dense MLP in every layer
    X: int = 1
    K: int = 1
    Fe: int = 1
    grouped: bool = False  # the grouped_mm experts (else transformers' eager loop)

    # the full layers have their own head_dim and K/V heads (Gemma 3n's do not)
    global_dims: ClassVar[bool] = True

    def sizes(self) -> dict[str, int]:
        return super().sizes() | {"dg": self.dg, "Hg": self.Hg, "Gg": self.H // self.Hg,
                                  "Ep": self.Ep, "Vp": self.Vp, "X": self.X, "K": self.K,
                                  "Fe": self.Fe}

    def modes(self) -> list[str]:
        """Gemma4TextConfig.kv_sharing_modes: "reuse" from L - shared on, "store" on the
        last earlier layer of each type, "" elsewhere."""
        kinds = self.kinds * self.L if len(self.kinds) == 1 else self.kinds
        if not self.shared:
            return [""] * self.L
        first = self.L - self.shared
        modes = ["" if i < first else "reuse" for i in range(self.L)]
        for k in set(kinds):
            modes[max(i for i in range(first) if kinds[i] == k)] = "store"
        return modes

    def sparse_layers(self) -> int:
        """The first layers whose FFN gate is sparsified (Gemma 3n; none here)."""
        return 0

    def letters(self) -> str:
        kinds = self.kinds * self.L if len(self.kinds) == 1 else self.kinds
        sparse = self.sparse_layers()
        out = "".join(_LETTERS[(k, md, i < sparse)]
                      for i, (k, md) in enumerate(zip(kinds, self.modes(), strict=True)))
        return out[0] if len(set(out)) == 1 else out


def forward(m: Builder, cfg: Gemma4) -> Tensor:
    """Gemma4ForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    tr.derived[("div", m["H"].poly, m["Hg"].poly)] = m["Gg"]
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = gemma.scaled_embedding(m, "embed_tokens", ids, V, E)
        pli = per_layer_inputs(m, ids, h) if cfg.ple else None
        positions = tr.tensor((T,), I64, False)
        present = sorted(set(cfg.kinds))
        masks = {k: attention_mask(m, h, k, cfg.window) for k in present}
        tables = {k: rotary_tables(m, h, width=m["dg"] if k == "F" else m["dh"])
                  for k in present}
        shared: dict[str, tuple[Tensor, Tensor]] = {}
        letters = cfg.letters()

        def extras(letter: str) -> tuple[Tensor, ...]:
            # what a checkpoint keeps: the layer's inputs and, in a layer that reuses K
            # and V, those (shared_kv_states holds them for its recomputation)
            kind, mode, _ = DECODE[letter]
            mask = masks[kind]
            return ((positions, *tables[kind]) + (() if mask is None else (mask,))
                    + (() if pli is None else (pli,))
                    + (shared[kind] if mode == "reuse" else ()))

        def layer(x: Tensor, letter: str) -> Tensor:
            kind, mode, _ = DECODE[letter]
            # per_layer_inputs[:, :, i, :]: a view, i the layer's index
            mine = None if pli is None else ops.select(pli, 2, m.trace.layer or 0)
            return _layer(m, cfg, x, kind, mode, tables[kind], masks[kind], shared, mine)

        h = m.layers_by_kind("layers", letters, layer, h, extras)
        h = norm(m, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.linear(h, w)
    if cfg.final_softcap:  # logits / cap, tanh, * cap
        logits = ops.mul(ops.tanh(ops.div(logits, cfg.final_softcap)), cfg.final_softcap)
    return causal_lm_loss(logits, ids, V)


def per_layer_inputs(m: Builder, ids: Tensor, embeds: Tensor, buffers: bool = False
                     ) -> Tensor:
    """get_per_layer_inputs: embed_tokens_per_layer(ids) (scaled by √P), reshaped to
    (B, T, L, P); project_per_layer_inputs: per_layer_model_projection(embeds) ·
    E^-0.5, reshaped, per_layer_projection_norm over P; (projection + token part) · 2^-0.5.
    buffers (Gemma3nTextModel): the ids first clamped into the table (torch.where: a new
    int64 tensor the embedding keeps), the two scales 0-d buffers (a product keeps them,
    not an activation)."""
    B, T, L, P = m["B"], m["T"], m["L"], m["Ep"]
    tr = m.trace
    if buffers:  # torch.where(in_table, input_ids, 0), under no grad
        ids = tr.tensor(ids.shape, ids.dtype, False)
    tok = gemma.scaled_embedding(m, "embed_tokens_per_layer", ids, m["Vp"], L * P)
    tok = ops.reshape(tok, (B, T, L, P))
    proj = m.linear("per_layer_model_projection", embeds, L * P, False)
    proj = ops.mul(proj, _scale(m, "per_layer_projection_scale") if buffers
                   else float(m["E"].value) ** -0.5)
    proj = norm(m, "per_layer_projection_norm", ops.reshape(proj, (B, T, L, P)))
    return ops.mul(ops.add(proj, tok), _scale(m, "per_layer_input_scale") if buffers
                   else 2.0 ** -0.5)


def _scale(m: Builder, name: str) -> Tensor:
    """A 0-d buffer of the model's dtype (.to(inputs_embeds.dtype): itself)."""
    return m.trace.tensor((), m.run.dtype, False, "buffer", f"{m.trace.scope}.{name}")


def norm(m: Builder, name: str, x: Tensor, scale: bool = True) -> Tensor:
    """Gemma4RMSNorm.forward (Gemma3nRMSNorm's the same): x.float() * pow(pow(2).mean(-1)
    + eps, -0.5) (pow keeps its input), times weight.float() with_scale (a product that
    keeps the normalised fp32 tensor for the weight and the fp32 weight for the input),
    type_as(x)."""
    with m.module(name):
        xf = ops.to(x, F32)
        out = ops.mul(xf, ops.pow(ops.add(ops.mean(ops.pow(xf, 2.0)), gemma.RMS_EPS), -0.5))
        if scale:
            out = ops.mul(out, ops.to(m.param("weight", x.shape[-1]), F32))
        return ops.to(out, x.dtype)


def _layer(m: Builder, cfg: Gemma4, h: Tensor, kind: str, mode: str,
           rope: tuple[Tensor, Tensor], mask: Tensor | None,
           shared: dict[str, tuple[Tensor, Tensor]], pli: Tensor | None) -> Tensor:
    """Gemma4TextDecoderLayer.forward: sandwich-normed attention and MLP, the per-layer
    input's gated residual, the output times layer_scalar."""
    x = norm(m, "input_layernorm", h)
    with m.module("self_attn"):
        a = attention(m, cfg, x, kind, mode, rope, mask, shared)
    h = ops.add(h, norm(m, "post_attention_layernorm", a))
    F = m["F"] * 2 if cfg.wide and mode == "reuse" else m["F"]
    x = norm(m, "pre_feedforward_layernorm", h)
    with m.module("mlp"):
        gate = ops.gelu(m.linear("gate_proj", x, F, False))
        x = m.linear("down_proj", ops.mul(gate, m.linear("up_proj", x, F, False)), m["E"],
                     False)
    if cfg.experts:
        x = ops.add(norm(m, "post_feedforward_layernorm_1", x), _experts(m, cfg, h))
    h = ops.add(h, norm(m, "post_feedforward_layernorm", x))
    if pli is not None:
        g = ops.gelu(m.linear("per_layer_input_gate", h, m["Ep"], False))
        g = m.linear("per_layer_projection", ops.mul(g, pli), m["E"], False)
        h = ops.add(h, norm(m, "post_per_layer_input_norm", g))
    # hidden_states *= self.layer_scalar: mul_ keeps the buffer only
    scalar = m.trace.tensor((Dim.const(1),), m.run.dtype, False, "buffer",
                            f"{m.trace.scope}.layer_scalar")
    return ops.mul(h, scalar)


def _experts(m: Builder, cfg: Gemma4, residual: Tensor) -> Tensor:
    """The layer's MoE block (module docstring): post_feedforward_layernorm_2 of the
    experts' output over the residual, flattened to (B·T, E)."""
    B, T, E = residual.shape
    flat = ops.reshape(residual, (B * T, E))
    weights, chosen = _router(m, flat)
    x = norm(m, "pre_feedforward_layernorm_2", flat)
    with m.module("experts"):
        run = moe.grouped_experts if cfg.grouped else moe.eager_experts
        x = run(m, x, chosen, weights, act=ops.gelu)
    return norm(m, "post_feedforward_layernorm_2", ops.reshape(x, (B, T, E)))


def _router(m: Builder, flat: Tensor) -> tuple[Tensor, Tensor]:
    """Gemma4TextRouter.forward: (top-k weights, top-k experts), (B·T, K) each."""
    E, X = flat.shape[-1], m["X"]
    with m.module("router"):
        x = ops.mul(norm(m, "norm", flat, scale=False), m.param("scale", E))
        x = ops.mul(x, float(E.value) ** -0.5)  # · scalar_root_size
        probs = ops.softmax(m.linear("proj", x, X, False), F32)
        values, chosen = ops.topk(probs, m["K"])
        values = ops.div_(values, ops.sum_dim(values, -1, keepdim=True))
        scale = ops.index(m.param("per_expert_scale", X), [chosen])
        return ops.mul(values, scale), chosen


def attention(m: Builder, cfg: Gemma4, x: Tensor, kind: str, mode: str,
               rope: tuple[Tensor, Tensor], mask: Tensor | None,
               shared: dict[str, tuple[Tensor, Tensor]]) -> Tensor:
    """Gemma4TextAttention.forward (Gemma3nTextAttention's: every layer of one head dim)."""
    full = kind == "F" and cfg.global_dims
    B, T, H = m["B"], m["T"], m["H"]
    dh = m["dg"] if full else m["dh"]
    Hkv, G = (m["Hg"], m["Gg"]) if full else (m["Hkv"], m["G"])
    cos, sin = (ops.unsqueeze(t, 2) for t in rope)

    def heads(name: str, n: Dim) -> Tensor:
        return ops.view(m.linear(name, x, n * dh, cfg.bias), (B, T, n, dh))

    q = ops.transpose(apply_rotary(norm(m, "q_norm", heads("q_proj", H)), cos, sin), 1, 2)
    if mode == "reuse":
        k, v = shared[kind]
    else:
        k = heads("k_proj", Hkv)
        v = k if full and cfg.k_eq_v else heads("v_proj", Hkv)
        k = ops.transpose(apply_rotary(norm(m, "k_norm", k), cos, sin), 1, 2)
        v = ops.transpose(norm(m, "v_norm", v, scale=False), 1, 2)
        if m.use_cache:  # DynamicLayer / DynamicSlidingWindowLayer.update: torch.cat
            k, v = (ops.cat([t], -2) for t in (k, v))
        if mode == "store":
            shared[kind] = (k, v)
    if m.run.attention == "eager":
        assert mask is not None
        out = eager_attention(m, q, repeat_kv(k, G), repeat_kv(v, G), mask,
                              dropout=cfg.attention_dropout, scaling=1.0)
    elif m.run.attention == "flash":  # flash_attention_2: the window the kernel's
        out = flash_attention_forward(m, q, k, v,
                                      sliding_window=cfg.window if kind == "S" else 0)
    else:
        out = sdpa_attention(q, k, v, G, dropout=cfg.attention_dropout, scaling=1.0,
                             mask=mask)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias)
