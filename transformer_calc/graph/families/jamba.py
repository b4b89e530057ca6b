"""Jamba as transformers 5.23 runs it: models/jamba/modeling_jamba.py (JambaForCausalLM,
JambaModel, JambaAttentionDecoderLayer and JambaMambaDecoderLayer, JambaAttention without
positions, JambaMambaMixer's torch path, JambaMLP, JambaSparseMoeBlock with JambaTopKRouter
and JambaExperts). Each layer is attention or a Mamba mixer with RMSNorms over dt, B and C
(families/mamba.py), then a gated SiLU MLP or the experts (Mixtral's, families/moe.py: the
router's softmax in fp32, its top-k cast back, not renormalised)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.families.bamba import gated_mlp
from transformer_calc.graph.families.mamba import mamba_mixer
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import I64, Tensor

# a layer's kind as one letter (Builder.layers_by_kind): its mixer (F attention, M Mamba) and
# its FFN (D the MLP, E the experts)
KINDS = {("F", "D"): "a", ("F", "E"): "b", ("M", "D"): "c", ("M", "E"): "d"}


@dataclass(frozen=True)
class Jamba:
    """JambaConfig's sizes. Symbols: V, E, H, Hkv, dh, F, L, G = H / Hkv as Llama's; Di, N,
    Kc, R the mixer's (families/mamba.Mamba); X experts, K per token, Fe = F an expert's
    inner size. kinds: each layer's letter of KINDS. grouped: the grouped_mm experts."""

    V: int
    E: int
    H: int
    Hkv: int
    dh: int
    F: int
    L: int
    Di: int
    N: int
    Kc: int
    R: int
    X: int
    K: int
    kinds: str
    tied: bool = False
    conv_bias: bool = True  # mamba_conv_bias
    bias: bool = False  # mamba_proj_bias
    attention_dropout: float = 0.0
    grouped: bool = False
    # what moe.sparse_moe_block reads
    shared_expert: bool = False
    shared_mlp: bool = False
    router: str = "jamba"
    norm_topk: bool = False

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "F": self.F, "L": self.L, "G": self.H // self.Hkv, "Di": self.Di,
                "N": self.N, "Kc": self.Kc, "Rd": self.R, "X": self.X, "K": self.K,
                "Fe": self.F, "Q": 2048}  # Q: the CUDA scan's chunk (its intermediates)

    @property
    def mixers(self) -> str:
        """Each layer's mixer, F or M (names.py's first norms)."""
        back = {v: k for k, v in KINDS.items()}
        return "".join(back[k][0] for k in self.kinds)


def forward(m: Builder, cfg: Jamba) -> Tensor:
    """JambaForCausalLM.forward(input_ids=ids, labels=ids), output_router_logits off (the
    config's default: no auxiliary loss)."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)  # arange(T) + past_seen_tokens
        mask = causal_mask(m, h) if m.run.attention == "eager" else None

        def extras(kind: str) -> tuple[Tensor, ...]:
            return (positions,) + ((mask,) if kind in "ab" and mask is not None else ())

        h = m.layers_by_kind("layers", cfg.kinds, lambda x, k: _layer(m, cfg, x, k, mask),
                             h, extras)
        h = llama.rms_norm(m, "final_layernorm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.linear(h, w)
    return causal_lm_loss(logits, ids, V)


def _layer(m: Builder, cfg: Jamba, h: Tensor, kind: str, mask: Tensor | None) -> Tensor:
    """Jamba{Attention,Mamba}DecoderLayer.forward: input_layernorm, attention or the mixer,
    the residual; pre_ff_layernorm, the MLP or the experts, the residual."""
    x = llama.rms_norm(m, "input_layernorm", h)
    if kind in "ab":
        with m.module("self_attn"):
            y = attention_without_positions(m, x, mask, cfg.attention_dropout)
    else:
        with m.module("mamba"):
            y = mamba_mixer(m, x, cfg.conv_bias, cfg.bias, dt_norms=True)
    h = ops.add(h, y)
    x = llama.rms_norm(m, "pre_ff_layernorm", h)
    if kind in "bd":
        f = moe.sparse_moe_block(m, cfg, x, "feed_forward", "router")  # type: ignore[arg-type]
    else:
        f = gated_mlp(m, x, False)
    return ops.add(h, f)


def attention_without_positions(m: Builder, x: Tensor, mask: Tensor | None,
                                dropout: float) -> Tensor:
    """JambaAttention.forward (NemotronHAttention's is the same): Llama's without a
    rotation, no biases."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]

    def heads(name: str, n: Dim) -> Tensor:
        y = m.linear(name, x, n * dh, False)
        return ops.transpose(ops.view(y, (B, T, n, dh)), 1, 2)

    q, k, v = heads("q_proj", H), heads("k_proj", Hkv), heads("v_proj", Hkv)
    G, scaling = m["G"], float(dh.value) ** -0.5
    if mask is not None:
        out = llama.eager_attention(m, q, llama.repeat_kv(k, G), llama.repeat_kv(v, G), mask,
                                    dropout=dropout, scaling=scaling)
    else:
        out = llama.sdpa_attention(q, k, v, G, dropout=dropout,
                                   scaling=scaling)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], False)
