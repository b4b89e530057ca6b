"""GraniteMoeHybrid as transformers 5.23 runs it: models/granitemoehybrid/
modeling_granitemoehybrid.py (GraniteMoeHybridForCausalLM, GraniteMoeHybridModel,
GraniteMoeHybridDecoderLayer, GraniteMoeHybridRMSNorm, GraniteMoeHybridMambaLayer,
GraniteMoeHybridMoE, GraniteMoeHybridTopKRouter, GraniteMoeHybridExperts,
GraniteMoeHybridMLP). GraniteMoeHybridConfig's default layout: every layer the Mamba-2 mixer
(layer_types "linear_attention"; its torch path is BambaMixer's, line for line:
families/mamba.mamba2_mixer), then the experts behind the softmax-over-top-k router
(GraniteMoeSWA's, families/granitemoe_swa.py) plus the shared MLP (input_linear's output
chunked into gate and up, SiLU, output_linear); Granite's multipliers (embeddings, residual
branches, logits: Python numbers, nothing kept). Attention layers are not modelled (the mapper
refuses them: their RoPE follows position_embedding_type, which the spec does not say)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama
from transformer_calc.graph.families.bamba import Bamba
from transformer_calc.graph.families.granitemoe_swa import moe_block
from transformer_calc.graph.families.mamba import mamba2_mixer
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.tensor import I64, Tensor


@dataclass(frozen=True)
class GraniteMoeHybrid(Bamba):
    """Bamba's sizes (the mixer's Gs, Hg, Ph, N, Kc, Q; attention's stand in: no layer has
    it) and the experts': X num_local_experts, K num_experts_per_tok, Fe intermediate_size;
    F the shared MLP's width (shared_intermediate_size). grouped: the grouped_mm experts."""

    X: int = 1
    K: int = 1
    Fe: int = 1
    grouped: bool = False

    def sizes(self) -> dict[str, int]:
        return {**super().sizes(), "X": self.X, "K": self.K, "Fe": self.Fe}


def forward(m: Builder, cfg: GraniteMoeHybrid) -> Tensor:
    """GraniteMoeHybridForCausalLM.forward(input_ids=ids, labels=ids): the embeddings times
    embedding_multiplier, the layers (no rotary embedding: position_embedding_type None; the
    mixers' mask None without padding), the norm, logits / logits_scaling, the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    ids = m.trace.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = ops.mul(m.embedding("embed_tokens", ids, V, E), 1.0)  # * embedding_multiplier
        h = m.layers_by_kind("layers", cfg.kinds, lambda x, kind: _layer(m, cfg, x), h,
                             lambda kind: ())
        h = llama.rms_norm(m, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(ops.div(logits, 1.0), ids, V)  # logits / logits_scaling


def _layer(m: Builder, cfg: GraniteMoeHybrid, h: Tensor) -> Tensor:
    """GraniteMoeHybridDecoderLayer.forward of a mixer layer: residual + mamba(norm(h)) ·
    residual_multiplier; residual + (moe(x) + shared_mlp(x)) · residual_multiplier."""
    x = llama.rms_norm(m, "input_layernorm", h)
    with m.module("mamba"):
        y = mamba2_mixer(m, x, cfg.conv_bias, cfg.bias)
    h = ops.add(h, ops.mul(y, 1.0))
    x = llama.rms_norm(m, "post_attention_layernorm", h)
    y = ops.add(moe_block(m, cfg.grouped, x), _shared_mlp(m, x))
    return ops.add(h, ops.mul(y, 1.0))


def _shared_mlp(m: Builder, x: Tensor) -> Tensor:
    """GraniteMoeHybridMLP.forward: input_linear (no bias) to 2·F, chunk(2, -1) into views,
    silu(first) * second, output_linear."""
    with m.module("shared_mlp"):
        gate, up = ops.split(m.linear("input_linear", x, 2 * m["F"], False), m["F"], -1)
        return m.linear("output_linear", ops.mul(ops.silu(gate), up), m["E"], False)
