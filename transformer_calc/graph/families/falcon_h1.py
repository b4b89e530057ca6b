"""Falcon-H1 as transformers 5.23 runs it: models/falcon_h1/modeling_falcon_h1.py
(FalconH1ForCausalLM, FalconH1Model, FalconH1DecoderLayer, FalconH1Attention, FalconH1Mixer,
FalconH1MLP, FalconH1RMSNorm). Every layer runs the Mamba-2 mixer and attention in parallel
on the same normed input and adds their outputs; the muP multipliers are Python numbers, so
each is a product that keeps nothing (a new tensor even at 1.0), and the mixer's mup_vector
is a buffer its product keeps."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama
from transformer_calc.graph.families.mamba import mamba2_mixer
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import I64, Tensor


@dataclass(frozen=True)
class FalconH1:
    """FalconH1Config's sizes. Symbols: V, E, H, Hkv, dh, F, L, G = H / Hkv as Llama's; Gs,
    Hg, Ph, N, Kc, Q the mixer's (families/mamba.Mamba2)."""

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
    tied: bool = False
    bias_attn: bool = False  # attention_bias
    bias_mlp: bool = False  # mlp_bias
    conv_bias: bool = True  # mamba_conv_bias
    bias: bool = False  # mamba_proj_bias and projectors_bias
    norm: bool = True  # mamba_rms_norm: the gated norm, else y · silu(z)
    attention_dropout: float = 0.0

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "F": self.F, "L": self.L, "G": self.H // self.Hkv, "Gs": self.Gs,
                "Hg": self.Hg, "Ph": self.Ph, "N": self.N, "Kc": self.Kc, "Q": self.Q}


def forward(m: Builder, cfg: FalconH1) -> Tensor:
    """FalconH1ForCausalLM.forward(input_ids=ids, labels=ids): the embedding times
    embedding_multiplier, the layers, final_layernorm, the logits times lm_head_multiplier,
    the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = ops.mul(m.embedding("embed_tokens", ids, V, E), 1.0)
        positions = tr.tensor((T,), I64, False)  # arange(T) + past_seen_tokens
        cos, sin = llama.rotary_tables(m, h)
        mask = causal_mask(m, h) if m.run.attention == "eager" else None
        extras = (positions, cos, sin) + (() if mask is None else (mask,))
        h = m.layers("layers", lambda x: _layer(m, cfg, x, cos, sin, mask), h, extras)
        h = llama.rms_norm(m, "final_layernorm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.mul(ops.linear(h, w), 1.0)
    return causal_lm_loss(logits, ids, V)


def _layer(m: Builder, cfg: FalconH1, h: Tensor, cos: Tensor, sin: Tensor,
           mask: Tensor | None) -> Tensor:
    """FalconH1DecoderLayer.forward: input_layernorm; the mixer (its output times
    ssm_out_multiplier) and attention over the input times attention_in_multiplier (its
    output times attention_out_multiplier), summed onto the residual; pre_ff_layernorm, the
    MLP, the residual."""
    x = llama.rms_norm(m, "input_layernorm", h)
    with m.module("mamba"):
        y = ops.mul(mamba2_mixer(m, x, cfg.conv_bias, cfg.bias,
                                 "norm" if cfg.norm else "gate"), 1.0)
    with m.module("self_attn"):
        a = ops.mul(_attention(m, cfg, ops.mul(x, 1.0), cos, sin, mask), 1.0)
    h = ops.add(h, ops.add(y, a))
    x = llama.rms_norm(m, "pre_ff_layernorm", h)
    return ops.add(h, _mlp(m, cfg, x))


def _mlp(m: Builder, cfg: FalconH1, x: Tensor) -> Tensor:
    """FalconH1MLP.forward: up(x) * silu(gate(x) * gate_multiplier), down(...) *
    down_multiplier."""
    with m.module("feed_forward"):
        F, E = m["F"], m["E"]
        up = m.linear("up_proj", x, F, cfg.bias_mlp)
        act = ops.silu(ops.mul(m.linear("gate_proj", x, F, cfg.bias_mlp), 1.0))
        return ops.mul(m.linear("down_proj", ops.mul(up, act), E, cfg.bias_mlp), 1.0)


def _attention(m: Builder, cfg: FalconH1, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None) -> Tensor:
    """FalconH1Attention.forward: Llama's, with K times key_multiplier after the
    transpose."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]

    def heads(name: str, n: Dim) -> Tensor:
        y = m.linear(name, x, n * dh, cfg.bias_attn)
        return ops.transpose(ops.view(y, (B, T, n, dh)), 1, 2)

    q, k, v = heads("q_proj", H), ops.mul(heads("k_proj", Hkv), 1.0), heads("v_proj", Hkv)
    cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    q, k = llama.apply_rotary(q, cos, sin), llama.apply_rotary(k, cos, sin)
    G, scaling = m["G"], float(dh.value) ** -0.5
    if mask is not None:
        out = llama.eager_attention(m, q, llama.repeat_kv(k, G), llama.repeat_kv(v, G), mask,
                                    dropout=cfg.attention_dropout, scaling=scaling)
    elif m.run.attention == "flash":  # flash_attention_2: (B, T, H, dh) out
        out = flash_attention_forward(m, q, k, v)
    else:
        out = llama.sdpa_attention(q, k, v, G, dropout=cfg.attention_dropout,
                                   scaling=scaling)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias_attn)
