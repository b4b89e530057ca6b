"""Bamba as transformers 5.23 runs it: models/bamba/modeling_bamba.py (BambaForCausalLM,
BambaModel, BambaDecoderLayer, BambaAttention with BambaConfig's partial_rotary_factor 0.5,
BambaMixer, BambaMLP, BambaRMSNorm). Each layer is a Mamba-2 mixer or attention
(layers_block_type), then a gated SiLU MLP; the mixer's torch path is Mamba2Mixer's
(families/mamba.py); attention is Llama's (families/llama.py) with the rotation over the
first half of each head and the rest concatenated back (a copy)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama
from transformer_calc.graph.families.mamba import mamba2_mixer
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor


@dataclass(frozen=True)
class Bamba:
    """BambaConfig's sizes. Symbols: V, E, H, Hkv, dh, F, L, G = H / Hkv as Llama's; Dr the
    rotated width of a head (BambaRotaryEmbedding: cat(freqs, freqs) over int(dh / 2) / 2
    frequencies, rounded up); Gs, Hg, Ph, N, Kc, Q the mixer's (families/mamba.Mamba2).
    kinds: each layer's, "F" attention or "M" the mixer (layers_block_type)."""

    V: int
    E: int
    H: int
    Hkv: int
    dh: int
    F: int
    L: int
    Gs: int
    Hg: int
    Ph: int
    N: int
    Kc: int
    Q: int
    kinds: str
    tied: bool = False
    bias_attn: bool = False  # attention_bias: q, k, v, o
    bias_mlp: bool = False  # mlp_bias
    conv_bias: bool = True  # mamba_conv_bias
    bias: bool = False  # mamba_proj_bias: in_proj, out_proj
    attention_dropout: float = 0.0

    def sizes(self) -> dict[str, int]:
        rotated = self.dh // 2  # int(head_dim * partial_rotary_factor)
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "F": self.F, "L": self.L, "G": self.H // self.Hkv,
                "Dr": 2 * -(-rotated // 2), "Gs": self.Gs, "Hg": self.Hg, "Ph": self.Ph,
                "N": self.N, "Kc": self.Kc, "Q": self.Q}


def forward(m: Builder, cfg: Bamba) -> Tensor:
    """BambaForCausalLM.forward(input_ids=ids, labels=ids) (z_loss_coefficient 0): the
    loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)  # arange(T).unsqueeze(0)
        cos, sin = _rotary_tables(m, h)
        # create_causal_mask for the attention layers; create_recurrent_attention_mask
        # (None without padding) for the mixers
        mask = causal_mask(m, h) if m.run.attention == "eager" else None

        def extras(kind: str) -> tuple[Tensor, ...]:
            return (positions, cos, sin) + ((mask,) if kind == "F" and mask is not None
                                            else ())

        def layer(x: Tensor, kind: str) -> Tensor:
            return _layer(m, cfg, x, kind, cos, sin, mask)

        h = m.layers_by_kind("layers", cfg.kinds, layer, h, extras)
        h = llama.rms_norm(m, "final_layernorm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.linear(h, w)
    return causal_lm_loss(logits, ids, V)


def _rotary_tables(m: Builder, like: Tensor) -> tuple[Tensor, Tensor]:
    """BambaRotaryEmbedding.forward under no_grad, once for the model: cos and sin of
    (1, T, Dr) in fp32, cast to the activation dtype."""
    one, T, Dr = Dim.const(1), m["T"], m["Dr"]
    with m.trace.no_grad(), m.module("rotary_emb"):
        pair = []
        for _ in ("cos", "sin"):
            emb = m.trace.tensor((one, T, Dr), F32, False)
            pair.append(ops.to(ops.mul(emb, 1.0), like.dtype))  # · attention_scaling
        return pair[0], pair[1]


def _layer(m: Builder, cfg: Bamba, h: Tensor, kind: str, cos: Tensor, sin: Tensor,
           mask: Tensor | None) -> Tensor:
    """BambaDecoderLayer.forward: input_layernorm, the mixer or attention, the residual;
    pre_ff_layernorm, the MLP, the residual."""
    x = llama.rms_norm(m, "input_layernorm", h)
    if kind == "M":
        with m.module("mamba"):
            y = mamba2_mixer(m, x, cfg.conv_bias, cfg.bias)
    else:
        with m.module("self_attn"):
            y = _attention(m, cfg, x, cos, sin, mask)
    h = ops.add(h, y)
    x = llama.rms_norm(m, "pre_ff_layernorm", h)
    return ops.add(h, gated_mlp(m, x, cfg.bias_mlp))


def gated_mlp(m: Builder, x: Tensor, bias: bool) -> Tensor:
    """BambaMLP.forward (JambaMLP's is the same): down_proj(silu(gate_proj(x)) *
    up_proj(x)), in the module feed_forward."""
    with m.module("feed_forward"):
        F, E = m["F"], m["E"]
        gate = ops.silu(m.linear("gate_proj", x, F, bias))
        return m.linear("down_proj", ops.mul(gate, m.linear("up_proj", x, F, bias)), E, bias)


def _attention(m: Builder, cfg: Bamba, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None) -> Tensor:
    """BambaAttention.forward: q, k, v viewed as heads; apply_rotary_pos_emb over the first
    Dr of each head, torch.cat with the rest (a new tensor); Llama's attention; o_proj."""
    B, T, H, Hkv, dh, Dr = m["B"], m["T"], m["H"], m["Hkv"], m["dh"], m["Dr"]

    def heads(name: str, n: Dim) -> Tensor:
        y = m.linear(name, x, n * dh, cfg.bias_attn)
        return ops.transpose(ops.view(y, (B, T, n, dh)), 1, 2)

    q, k, v = heads("q_proj", H), heads("k_proj", Hkv), heads("v_proj", Hkv)
    cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    rest = dh + Dim(-Dr.value, -Dr.poly)

    def rotate(t: Tensor) -> Tensor:
        rot = llama.apply_rotary(ops.narrow(t, -1, 0, Dr), cos, sin)
        return ops.cat([rot, ops.narrow(t, -1, Dr.value, rest)], -1)

    q, k = rotate(q), rotate(k)
    G, scaling = m["G"], float(dh.value) ** -0.5
    if mask is not None:
        out = llama.eager_attention(m, q, llama.repeat_kv(k, G), llama.repeat_kv(v, G), mask,
                                    dropout=cfg.attention_dropout, scaling=scaling)
    else:
        out = llama.sdpa_attention(q, k, v, G, dropout=cfg.attention_dropout,
                                   scaling=scaling)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias_attn)
