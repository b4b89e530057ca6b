"""Nemotron-H as transformers 5.23 runs it on the CPU: models/nemotron_h/modeling_nemotron_h.py
(NemotronHForCausalLM, NemotronHModel, NemotronHBlock, NemotronHRMSNorm, NemotronHMamba2Mixer,
NemotronHAttention, NemotronHMLP, NemotronHMoE with NemotronHTopkRouter and NemotronHExperts).

Every layer is one pre-norm block around the residual whose mixer (module `mixer`) is one of
four (layers_block_type): the Mamba-2 mixer (its torch path is Mamba2Mixer's, with
NemotronHRMSNormGated = MambaRMSNormGated: families/mamba.py), attention without positions
(Jamba's: families/jamba.py), a squared-ReLU MLP down_proj(relu2(up_proj(x))), or the
experts. NemotronHRMSNorm keeps the weight's product in fp32: (weight.to(fp32) · x).to(dtype),
so a 16-bit model keeps an fp32 copy of the weight for x's gradient. The experts
(NemotronHMoE): DeepSeek-V3's fp32 sigmoid router (families/mla.py), NemotronHExperts' eager
loop over ungated experts (up_proj, relu2, down_proj; moe.py's one-expert transcription for
the K·B·T routed slots) accumulating into an fp32 zeros_like (the routing weights' dtype),
cast back; plus the shared MLP (shared_experts) on the block's input."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import mla, moe
from transformer_calc.graph.families.jamba import attention_without_positions
from transformer_calc.graph.families.mamba import mamba2_mixer
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I32, I64, Tensor

# layers_block_type -> the letter of NemotronH.kinds
KINDS = {"mamba": "M", "attention": "F", "mlp": "D", "moe": "E"}


@dataclass(frozen=True)
class NemotronH:
    """NemotronHConfig's sizes. Symbols: V, E, H, Hkv, dh, F, L, G = H / Hkv as Llama's; Gs,
    Hg, Ph, N, Kc, Q the mixer's (families/mamba.Mamba2); X experts, K per token, Fe an
    expert's inner size (moe_intermediate_size), Fs the shared MLP's
    (moe_shared_expert_intermediate_size). kinds: each layer's mixer, M (Mamba-2), F
    (attention), D (MLP) or E (experts). norm_topk: the router's norm_topk_prob."""

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
    X: int
    K: int
    Fe: int
    Fs: int
    kinds: str
    tied: bool = False
    conv_bias: bool = True  # use_conv_bias
    bias: bool = False  # use_bias: the mixer's in_proj and out_proj
    attention_dropout: float = 0.0
    norm_topk: bool = True
    grouped: bool = False  # the experts as grouped_mm_experts_forward runs them

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "F": self.F, "L": self.L, "G": self.H // self.Hkv, "Gs": self.Gs,
                "Hg": self.Hg, "Ph": self.Ph, "N": self.N, "Kc": self.Kc, "Q": self.Q,
                "X": self.X, "K": self.K, "Fe": self.Fe, "Fs": self.Fs}


def forward(m: Builder, cfg: NemotronH) -> Tensor:
    """NemotronHForCausalLM.forward(input_ids=ids, labels=ids): the layers, norm_f, lm_head,
    logits .float(), the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embeddings", ids, V, E)
        positions = tr.tensor((T,), I64, False)  # arange(T).unsqueeze(0)
        # create_causal_mask for the attention layers (eager: a float mask; SDPA: none);
        # create_recurrent_attention_mask (None without padding) for the mixers
        mask = causal_mask(m, h) if m.run.attention == "eager" else None

        def extras(kind: str) -> tuple[Tensor, ...]:
            return (positions,) + ((mask,) if kind == "F" and mask is not None else ())

        h = m.layers_by_kind("layers", cfg.kinds, lambda x, k: _block(m, cfg, x, k, mask),
                             h, extras)
        h = rms_norm_fp32(m, "norm_f", h)
    with m.module("lm_head"):
        w = m.tied("model.embeddings.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.linear(h, w)
    return causal_lm_loss(logits, ids, V)


def rms_norm_fp32(m: Builder, name: str, h: Tensor) -> Tensor:
    """NemotronHRMSNorm.forward: x = h.to(fp32); x * rsqrt(pow(2).mean + eps);
    (weight.to(fp32) * x).to(the input's dtype): in a 16-bit model the weight's fp32 copy
    is a new tensor, kept by the product for x's gradient."""
    with m.module(name):
        w = m.param("weight", h.shape[-1])
        x = ops.to(h, F32)
        x = ops.mul(x, ops.rsqrt(ops.add(ops.mean(ops.pow(x, 2.0)), 1e-6)))
        return ops.to(ops.mul(ops.to(w, F32), x), h.dtype)


def _block(m: Builder, cfg: NemotronH, h: Tensor, kind: str, mask: Tensor | None) -> Tensor:
    """NemotronHBlock.forward: residual + mixer(norm(h.to(norm's dtype)))."""
    x = rms_norm_fp32(m, "norm", h)
    with m.module("mixer"):
        if kind == "M":
            y = mamba2_mixer(m, x, cfg.conv_bias, cfg.bias)
        elif kind == "F":
            y = attention_without_positions(m, x, mask, cfg.attention_dropout)
        elif kind == "D":
            y = _mlp(m, x, "F")
        else:
            y = _moe(m, cfg, x)
    return ops.add(h, y)


def _relu2(x: Tensor) -> Tensor:
    """ReLUSquaredActivation: torch.square(relu(x)) (relu keeps its result, square = pow(x,
    2) its input: one storage)."""
    return ops.pow(ops.relu(x), 2.0)


def _mlp(m: Builder, x: Tensor, width: str) -> Tensor:
    """NemotronHMLP.forward: down_proj(relu2(up_proj(x))), no biases (mlp_bias refused)."""
    up = _relu2(m.linear("up_proj", x, m[width], False))
    return m.linear("down_proj", up, m["E"], False)


def _moe(m: Builder, cfg: NemotronH, x: Tensor) -> Tensor:
    """NemotronHMoE.forward: the router, the experts over the flattened tokens (no latent
    projections: moe_latent_size refused), viewed back, plus shared_experts(x)."""
    B, T, E = x.shape
    weights, chosen = mla._router(m, cfg, x)  # type: ignore[arg-type]
    flat = ops.view(x, (B * T, E))
    with m.module("experts"):
        run = _grouped_experts if cfg.grouped else _experts
        out = ops.view(run(m, flat, chosen, weights), (B, T, E))
    with m.module("shared_experts"):
        shared = _mlp(m, x, "Fs")
    return ops.add(out, shared)


def _experts(m: Builder, flat: Tensor, chosen: Tensor, weights: Tensor) -> Tensor:
    """NemotronHExperts.forward, its loop over the experts hit run once for all n = K·B·T
    slots (moe.py's docstring): current_state = hidden_states[token_idx];
    linear(up_proj[e]), relu2, linear(down_proj[e]); times top_k_weights[token_idx,
    top_k_pos, None] (fp32); index_add_ into zeros_like(hidden_states, dtype=fp32); .to(the
    input's dtype)."""
    up, down = _expert_weights(m, flat.shape[-1])
    n = chosen.shape[0] * chosen.shape[1]
    final = m.trace.tensor(flat.shape, weights.dtype, False)
    with m.trace.no_grad():  # torch.where(expert_mask[expert_idx]): (top_k_pos, token_idx)
        pairs = m.trace.tensor((n, Dim.const(2)), I64, False)
    top_k_pos, token_idx = (ops.select(pairs, 1, j) for j in (0, 1))
    state = ops.index(flat, [token_idx])
    h = ops.linear(state, moe._expert_slice(m, up))
    with m.module("act_fn"):
        h = _relu2(h)
    h = ops.linear(h, moe._expert_slice(m, down))
    h = ops.mul(h, ops.unsqueeze(ops.index(weights, [token_idx, top_k_pos]), -1))
    final = ops.index_add_(final, token_idx, ops.to(h, final.dtype))
    return ops.to(final, flat.dtype)


def _expert_weights(m: Builder, E: Dim) -> tuple[Tensor, Tensor]:
    """NemotronHExperts' 3-D up_proj (X, Fe, E) and down_proj (X, E, Fe)."""
    X, Fe = m["X"], m["Fe"]
    return m.param("up_proj", X, Fe, E), m.param("down_proj", X, E, Fe)


def _grouped_experts(m: Builder, flat: Tensor, chosen: Tensor, weights: Tensor) -> Tensor:
    """grouped_mm_experts_forward (integrations/moe.py) without a gate (has_gate False, the
    weights not transposed): the slots sorted by expert (perm, perm // K, int32 offsets: no
    grad), the tokens gathered, _grouped_mm(input.to(weight's dtype), up_proj.transpose),
    act_fn, the same over down_proj, times the sorted routing weights (fp32), put back in
    order (inv_perm), summed over the K slots of each token, cast to the input's dtype."""
    up, down = _expert_weights(m, flat.shape[-1])
    N, K = chosen.shape
    n = N * K
    sample_weights = ops.reshape(weights, (n,))
    with m.trace.no_grad():
        perm = m.trace.tensor((n,), I64, False)
        token_of = m.trace.tensor((n,), I64, False)
        offsets = m.trace.tensor((m["X"],), I32, False)
    selected = ops.index(flat, [token_of])
    sample_weights = ops.index(sample_weights, [perm])
    h = ops.grouped_mm(ops.to(selected, up.dtype), ops.transpose(up, -2, -1), offsets)
    with m.module("act_fn"):
        h = _relu2(h)
    h = ops.grouped_mm(ops.to(h, down.dtype), ops.transpose(down, -2, -1), offsets)
    weighted = ops.mul(h, ops.unsqueeze(sample_weights, -1))
    with m.trace.no_grad():  # inv_perm[perm] = arange(S)
        inv_perm = m.trace.tensor((n,), I64, False)
    weighted = ops.index(weighted, [inv_perm])
    out = ops.sum_dim(ops.view(weighted, (N, K, flat.shape[-1])), 1)
    return ops.to(out, flat.dtype)
