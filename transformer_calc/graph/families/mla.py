"""Multi-head latent attention (MLA) decoders as transformers 5.23 runs them: DeepSeek-V3,
DeepSeek-V3.2 and GLM-MoE-DSA, LongCat-Flash, MiniCPM3.

models/deepseek_v3/modeling_deepseek_v3.py: DeepseekV3ForCausalLM, DeepseekV3Model,
DeepseekV3DecoderLayer, DeepseekV3RMSNorm (LlamaRMSNorm's ops), DeepseekV3RotaryEmbedding
(cos and sin of qk_rope_head_dim, once for the model), DeepseekV3Attention:

- the query: q_b_proj(q_a_layernorm(q_a_proj(x))) with a query latent (q_lora_rank), else
  q_proj(x); viewed (B, T, H, dn + dr), transposed, split into its pass and rotary parts
  (views);
- kv_a_proj_with_mqa(x) split into the latent (kv_lora_rank, normed by kv_a_layernorm: the
  norm reads a view of the projection, so in fp32 it keeps the projection whole) and the
  shared rotary key (dr), both viewed as one head;
- RoPE on the rotary parts: apply_rotary_pos_emb_interleave under rope_interleave (the
  config's default: the even and odd lanes as strided views, cos and sin's first halves,
  the rotated halves concatenated), else apply_rotary_pos_emb (rotate_half);
- the query as cat(pass, rotated); expand_kv: kv_b_proj(latent) viewed (B, T, H, dn + dv),
  transposed and split into the key's pass part and the value (views), the rotary key
  expanded over the heads, and the key written into a new_empty tensor by two copy_ (a new
  contiguous tensor, as a cat makes it; copy_ keeps nothing);
- eager or SDPA attention (integrations/sdpa_attention.py; a value narrower than the query
  makes torch's kernel choice fall back to math on the CPU), the output made contiguous,
  o_proj.

DeepseekV3MoE, from first_k_dense_replace on (DeepseekV3MLP before): DeepseekV3TopkRouter
(F.linear of the fp32 input and an fp32 copy of the weight, sigmoid; the choice among the
bias-corrected, group-masked scores leaves only its int64 indices, so none of its
tensors stay held; the chosen scores gathered, renormalised in place with norm_topk_prob,
times routed_scaling_factor), the experts as transformers' eager loop or grouped_mm
(moe.py's, one expert for the K·B·T routed slots), plus the shared experts
(DeepseekV3MLP of n_shared_experts · moe_intermediate_size) on the block's input.

models/deepseek_v32/modeling_deepseek_v32.py (models/glm_moe_dsa/modeling_glm_moe_dsa.py the
same, its indexer's RoPE interleaved): DeepSeek-V3's layers with DeepseekV32Indexer, under
no_grad (its projections and scores: parameters and FLOPs, nothing kept), whose top-k masks
every layer's attention (a new mask per layer); the model's mask made for SDPA too.

models/longcat_flash/modeling_longcat_flash.py: LongcatFlashDecoderLayer, two MLA sublayers
with their MLPs, the MoE (LongcatFlashTopkRouter: softmax over an nn.Linear classifier's
fp32 weight, no shared experts) on the first one's MLP input, added after the second; the
query and key latents scaled (mla_scale_q_lora, mla_scale_kv_lora).

models/axk1/modeling_axk1.py: DeepSeek-V3's layers with a query latent always, its MoE block's
output normalised by post_mlp_layernorm (an RMSNorm in the mlp module), the MoE layers those
mlp_layer_types calls sparse.

models/minicpm3/modeling_minicpm3.py: the same attention with rotate_half's RoPE, the
embedding times a 0-d scale buffer (MiniCPM3ScaledWordEmbedding), each residual branch times
scale_depth / sqrt(num_hidden_layers), the final hidden state divided by logits_scaling before
lm_head; dense MLPs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I64, Tensor

# peft's module names for tcalc's latent-attention LoRA roles (transformer_calc.lora)
MLA_MODULES = {"q_a": "q_a_proj", "q_b": "q_b_proj", "kv_a": "kv_a_proj_with_mqa",
               "kv_b": "kv_b_proj", "index_q": "wq_b", "index_k": "wk",
               "index_weights": "weights_proj"}


@dataclass(frozen=True)
class Mla(llama.Llama):
    """An MLA decoder with dense MLPs. Symbols beside Llama's V, E, H, F, L: rq the query
    latent (q_lora_rank, read where q_latent says there is one: else a plain q_proj), rkv
    the key/value latent (kv_lora_rank), dn, dr, dv the query/key pass and rotary head dims
    and the value's. interleave: DeepSeek's interleaved RoPE; minicpm: MiniCPM3's scaled
    embedding, residual branches and final hidden state; indexer: DeepSeek-V3.2's, Hi heads
    of di; longcat: LongCat-Flash's paired sublayers. (Llama's Hkv and dh are not read: the
    key and value heads are H, their widths dn + dr and dv.)"""

    q_latent: bool = True
    rq: int = 1
    rkv: int = 1
    dn: int = 1
    dr: int = 2
    dv: int = 1
    interleave: bool = False
    minicpm: bool = False
    indexer: bool = False
    longcat: bool = False
    Hi: int = 1
    di: int = 1

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "F": self.F, "L": self.L,
                "rq": self.rq, "rkv": self.rkv, "dn": self.dn, "dr": self.dr, "dv": self.dv,
                "Hi": self.Hi, "di": self.di}


@dataclass(frozen=True)
class MlaMoe(Mla, moe.Moe):
    """DeepSeek-V3 (V3.2, GLM-MoE-DSA, LongCat-Flash) with its experts: moe.Moe's X, K, Fe,
    Fs (Fs the shared experts' width, n_shared_experts · moe_intermediate_size; shared_expert
    whether there are any), pattern (D dense, E experts; "" all E), grouped; router
    "sigmoid" (DeepSeek's, norm_topk: norm_topk_prob) or "softmax" (LongCat-Flash's)."""

    moe_norm: bool = False  # A.X K1 (AXK1MoE): post_mlp_layernorm over the block's output

    def sizes(self) -> dict[str, int]:
        return {**Mla.sizes(self), "X": self.X, "K": self.K, "Fe": self.Fe, "Fs": self.Fs}


def forward(m: Builder, cfg: Mla) -> Tensor:
    """DeepseekV3ForCausalLM (DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM,
    LongcatFlashForCausalLM, MiniCPM3ForCausalLM).forward(input_ids=ids, labels=ids)."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = _scaled_embedding(m, ids, V, E) if cfg.minicpm else \
            m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)  # position_ids, as Llama's
        cos, sin = llama.rotary_tables(m, h, width=m["dr"])
        mask = causal_mask(m, h) if m.run.attention == "eager" else \
            _sdpa_mask(m) if cfg.indexer else None
        extras = (positions, cos, sin) + (() if mask is None else (mask,))

        def layer(x: Tensor, kind: str) -> Tensor:
            return _layer(m, cfg, x, cos, sin, mask, kind)

        h = _stack(m, cfg, layer, h, extras)
        h = llama.rms_norm(m, "norm", h)
    if cfg.minicpm:  # hidden_states / self.config.logits_scaling (a number)
        h = ops.div(h, 1.0)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _scaled_embedding(m: Builder, ids: Tensor, V: Dim, E: Dim) -> Tensor:
    """MiniCPM3ScaledWordEmbedding.forward: embedding(ids) * embed_scale.to(weight.dtype),
    embed_scale = torch.tensor(scale_emb), an int64 0-d buffer for the config's integer
    scale_emb (12, MiniCPM3Config's default and MiniCPM3-4B's): model.to(dtype) leaves it,
    so the cast is a new 0-d tensor in the model's dtype, which the product keeps for the
    table's gradient (measured: 4 bytes fp32, 2 bf16; Gemma's float buffer is cast with the
    model and keeps nothing of its own). A float scale_emb would keep the buffer itself:
    the spec does not say which, the graph takes the integer."""
    with m.module("embed_tokens"):
        x = ops.embedding(m.param("weight", V, E), ids)
        scale = m.trace.tensor((), I64, False, "buffer", "model.embed_tokens.embed_scale")
        return ops.mul(x, ops.to(scale, x.dtype))


def _stack(m: Builder, cfg: Mla, layer: Callable[[Tensor, str], Tensor], h: Tensor,
           extras: tuple[Tensor, ...]) -> Tensor:
    """The decoder layers: of one kind (traced until one repeats, L a symbol), or the
    pattern's kinds one by one (L is then the pattern's length)."""
    pattern = (cfg.pattern or "E" * cfg.L) if isinstance(cfg, MlaMoe) else ""
    if len(set(pattern)) <= 1:
        kind = pattern[:1] or "D"
        return m.layers("layers", lambda x: layer(x, kind), h, extras)
    for i, kind in enumerate(pattern):
        with m.module(f"layers.{i}"), m.trace.in_layer(i, (h, *extras)):
            h = layer(h, kind)
    return h


def _layer(m: Builder, cfg: Mla, h: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None,
           kind: str) -> Tensor:
    """DeepseekV3DecoderLayer / MiniCPM3DecoderLayer.forward: pre-norm attention and MLP
    (or MoE) around the residual; MiniCPM3 scales each branch by a number first."""

    def residual(x: Tensor, branch: Tensor) -> Tensor:
        # MiniCPM3: residual + hidden_states * self.residual_scale (a number: keeps nothing)
        return ops.add(x, ops.mul(branch, 1.0) if cfg.minicpm else branch)

    if cfg.longcat and isinstance(cfg, MlaMoe):
        return _longcat_layer(m, cfg, h, cos, sin, mask)
    x = llama.rms_norm(m, "input_layernorm", h)
    with m.module("self_attn"):
        h = residual(h, _attention(m, cfg, x, cos, sin, mask))
    x = llama.rms_norm(m, "post_attention_layernorm", h)
    if kind == "E" and isinstance(cfg, MlaMoe):
        return residual(h, _moe_block(m, cfg, x))
    return residual(h, llama._mlp(m, cfg, x))


def _longcat_layer(m: Builder, cfg: MlaMoe, h: Tensor, cos: Tensor, sin: Tensor,
                   mask: Tensor | None) -> Tensor:
    """LongcatFlashDecoderLayer.forward: two pre-norm sublayers (self_attn.i, mlps.i, their
    norms indexed i); the MoE (mlp) reads the first sublayer's MLP input and its output is
    added after the second: residual + hidden_states + shortcut_mlp_output."""
    shortcut = h
    for i in (0, 1):
        x = llama.rms_norm(m, f"input_layernorm.{i}", h)
        with m.module(f"self_attn.{i}"):
            h = ops.add(h, _attention(m, cfg, x, cos, sin, mask))
        x = llama.rms_norm(m, f"post_attention_layernorm.{i}", h)
        if i == 0:
            shortcut = _moe_block(m, cfg, x)
        h = ops.add(h, llama._mlp(m, cfg, x, f"mlps.{i}"))
    return ops.add(h, shortcut)


def _attention(m: Builder, cfg: Mla, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None) -> Tensor:
    """DeepseekV3Attention.forward (module docstring)."""
    B, T, H, E = m["B"], m["T"], m["H"], m["E"]
    rkv, dn, dr, dv = m["rkv"], m["dn"], m["dr"], m["dv"]
    dq = dn + dr
    latent = None
    if cfg.q_latent:
        latent = llama.rms_norm(m, "q_a_layernorm", m.linear("q_a_proj", x, m["rq"],
                                                             cfg.bias_q))
        q = m.linear("q_b_proj", latent, H * dq, False)
    else:
        q = m.linear("q_proj", x, H * dq, False)
    q = ops.transpose(ops.view(q, (B, T, H, dq)), 1, 2)
    q_pass, q_rot = ops.narrow(q, -1, 0, dn), ops.narrow(q, -1, dn.value, dr)
    compressed = m.linear("kv_a_proj_with_mqa", x, rkv + dr, cfg.bias_k)
    kv, k_rot = ops.narrow(compressed, -1, 0, rkv), ops.narrow(compressed, -1, rkv.value, dr)
    one = Dim.const(1)
    kv = llama.rms_norm(m, "kv_a_layernorm", kv)
    if cfg.longcat:  # LongcatFlashMLA: q_pass, q_rot and k_pass times mla_scale_*_lora
        q_pass, q_rot, kv = ops.mul(q_pass, 1.0), ops.mul(q_rot, 1.0), ops.mul(kv, 1.0)
    kv = ops.view(kv, (B, one, T, rkv))
    k_rot = ops.view(k_rot, (B, one, T, dr))
    cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    rotate = _rotate_interleaved if cfg.interleave else llama.apply_rotary
    q_rot, k_rot = rotate(q_rot, cos, sin), rotate(k_rot, cos, sin)
    if m.use_cache:  # DynamicLayer.update on the latents: torch.cat onto the empty cache
        kv, k_rot = ops.cat([kv], -2), ops.cat([k_rot], -2)
    query = ops.cat([q_pass, q_rot], -1)
    # expand_kv
    kv = ops.transpose(ops.view(m.linear("kv_b_proj", kv, H * (dn + dv), False),
                                (B, T, H, dn + dv)), 1, 2)
    k_pass, value = ops.narrow(kv, -1, 0, dn), ops.narrow(kv, -1, dn.value, dv)
    k_rot = ops.expand(k_rot, (B, H, T, dr))
    key = ops.cat([k_pass, k_rot], -1)  # new_empty, then copy_ into each slice
    scaling = float(dq.value) ** -0.5  # (yarn's mscale changes a number, not a tensor)
    if cfg.indexer and latent is not None and mask is not None:
        mask = _indexed_mask(m, x, latent, mask)
    if mask is not None and m.run.attention == "eager":
        out = llama.eager_attention(m, query, key, value, mask,
                                    dropout=cfg.attention_dropout, scaling=scaling)
    elif m.run.attention == "flash":  # V padded to the query's head dim, the output cropped
        assert mask is None
        out = flash_attention_forward(m, query, key, value)
    else:  # sdpa_attention_forward: is_causal without a mask, the output transposed back
        out = scaled_dot_product_attention(query, key, value, is_causal=mask is None,
                                           dropout_p=cfg.attention_dropout, scale=scaling,
                                           mask=mask)
        out = ops.contiguous(ops.transpose(out, 1, 2))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dv)))
    return m.linear("o_proj", out, E, cfg.bias_o)


def _sdpa_mask(m: Builder) -> Tensor:
    """DeepseekV32Model's mask for SDPA (create_causal_mask with allow_is_causal_skip off:
    the indexer needs one): sdpa_mask's (1, 1, T, T) bool mask expanded over B, once for the
    model, no grad."""
    one, T = Dim.const(1), m["T"]
    causal = m.trace.input((one, one, T, T), BOOL, "causal_mask")
    return ops.expand(causal, (m["B"], one, T, T))


def _indexed_mask(m: Builder, x: Tensor, latent: Tensor, mask: Tensor) -> Tensor:
    """DeepseekV32Attention.forward's mask: DeepseekV32Indexer.forward (under no_grad: it
    keeps nothing; its projections, k_norm and two matmuls are parameters and FLOPs), its
    top-k scattered into a (B, 1, T, T) bool index_mask, and the causal mask with the keys it
    leaves out masked: eager, attention_mask.masked_fill(index_mask, min), a new mask in the
    model's dtype; SDPA, attention_mask & ~index_mask, a new bool mask."""
    B, T, E = x.shape
    Hi, di = m["Hi"], m["di"]
    one = Dim.const(1)
    with m.module("indexer"), m.trace.no_grad():
        # q = wq_b(q_resid) as (B, T, Hi, di), k = k_norm(wk(x)) as (B, T, di); RoPE on the
        # first qk_rope_head_dim lanes of each, concatenated back (no matmul, nothing kept)
        q = ops.view(m.linear("wq_b", latent, Hi * di, False), (B, T, Hi, di))
        k = m.layer_norm("k_norm", m.linear("wk", x, di, False))
        # torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)): (B, T, Hi, T)
        scores = ops.relu(ops.matmul(ops.to(q, F32), ops.unsqueeze(
            ops.to(ops.transpose(k, -1, -2), F32), 1)))
        # weights_proj(x).float() · n_heads^-0.5, (B, T, 1, Hi) @ scores: (B, T, 1, T)
        weights = ops.to(m.linear("weights_proj", x, Hi, False), F32)
        ops.matmul(ops.unsqueeze(weights, -2), scores)
        index_mask = m.trace.tensor((B, one, T, T), BOOL, False)  # ones, scatter of top-k
        if mask.dtype != BOOL:
            return ops.masked_fill(mask, index_mask)
        out = m.trace.tensor((B, one, T, T), BOOL, False)
        m.trace.record("bitwise_and", out)
        return out


def _rotate_interleaved(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """apply_rotary_pos_emb_interleave for one of q, k: cos and sin's first halves
    (views), x's even and odd lanes (strided views), cat([x1·cos - x2·sin,
    x2·cos + x1·sin])."""
    half = x.shape[-1].halved()
    cos, sin = ops.narrow(cos, -1, 0, half), ops.narrow(sin, -1, 0, half)
    x1, x2 = ops.slice_step(x, -1, 0, half, 2), ops.slice_step(x, -1, 1, half, 2)
    return ops.cat([ops.sub(ops.mul(x1, cos), ops.mul(x2, sin)),
                    ops.add(ops.mul(x2, cos), ops.mul(x1, sin))], -1)


def _moe_block(m: Builder, cfg: MlaMoe, x: Tensor) -> Tensor:
    """DeepseekV3MoE.forward: the router, the experts over the flattened tokens, plus the
    shared experts on the block's input."""
    B, T, E = x.shape
    with m.module("mlp"):
        weights, chosen = _softmax_router(m, x) if cfg.longcat else _router(m, cfg, x)
        flat = ops.view(x, (B * T, E))
        with m.module("experts"):
            run = moe.grouped_experts if cfg.grouped else moe.eager_experts
            out = ops.view(run(m, flat, chosen, weights), (B, T, E))
        if cfg.shared_expert:
            out = ops.add(out, llama._mlp(m, cfg, x, "shared_experts", "Fs"))
        if cfg.moe_norm:  # AXK1MoE: self.post_mlp_layernorm(hidden_states)
            out = llama.rms_norm(m, "post_mlp_layernorm", out)
        return out


def _router(m: Builder, cfg: MlaMoe, x: Tensor) -> tuple[Tensor, Tensor]:
    """DeepseekV3TopkRouter.forward: (B·T, K) routing weights (fp32) and expert indices."""
    N, E = x.shape[0] * x.shape[1], x.shape[-1]
    with m.module("gate"):
        # (peft's ParamWrapper where LoRA targets the router: moe.py's parametrised read)
        w = moe._as_read(m, [("weight", m.param("weight", m["X"], E), 1)], scoped=False)[
            "weight"]()
        flat = ops.view(x, (N, E))
        # F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
        scores = ops.sigmoid(ops.linear(ops.to(flat, F32), ops.to(w, F32)))
        with m.trace.no_grad():
            # topk of the bias-corrected, group-masked scores: only its indices leave
            chosen = m.trace.tensor((N, m["K"]), I64, False)
        weights = ops.gather(scores, 1, chosen)
        if cfg.norm_topk:  # topk_weights /= topk_weights.sum(dim=-1, keepdim=True) + 1e-20
            weights = ops.div_(weights, ops.add(ops.sum_dim(weights, -1, keepdim=True),
                                                1e-20))
        # topk_weights * self.routed_scaling_factor (a number: keeps nothing)
        return ops.mul(weights, 1.0), chosen


def _softmax_router(m: Builder, x: Tensor) -> tuple[Tensor, Tensor]:
    """LongcatFlashTopkRouter.forward: F.linear of fp32 copies of the input and of
    classifier.weight, softmax, the top-k (get_topk_indices under no_grad: the indices
    alone) gathered, times routed_scaling_factor, kept fp32."""
    N, E = x.shape[0] * x.shape[1], x.shape[-1]
    with m.module("router"):
        with m.module("classifier"):
            w = m.param("weight", m["X"], E)
            lora = m.run.lora
            if lora is not None and lora.adapts(m.trace.scope):
                # peft wraps the nn.Linear (all-linear names it), but the forward reads its
                # weight alone: the adapters train and run nothing
                with m.module("lora_A"):
                    m.param("weight", m["r"], E, adapter=True)
                with m.module("lora_B"):
                    m.param("weight", m["X"], m["r"], adapter=True)
        flat = ops.view(x, (N, E))
        scores = ops.softmax(ops.linear(ops.to(flat, F32), ops.to(w, F32)))
        with m.trace.no_grad():
            chosen = m.trace.tensor((N, m["K"]), I64, False)
        return ops.mul(ops.gather(scores, 1, chosen), 1.0), chosen


def converted_all_linear(cfg: Mla) -> frozenset[str]:
    """What peft 0.21 adapts for "all-linear" on a dense model of a type transformers converts
    with the qwen2_moe pattern (DeepSeek-V3: conversion_mapping._MODEL_TO_CONVERSION_PATTERN):
    _convert_peft_config_moe resolves all-linear to the linear layers' names and moves
    gate_proj, up_proj and down_proj to target_parameters naming fused experts' weights, so a
    dense MLP's nn.Linear layers are not adapted (measured with peft 0.21.2 on
    deepseek_v3-all-dense: q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj,
    12,416 parameters), the indexer's nn.Linear layers too."""
    query = ("q_a_proj", "q_b_proj") if cfg.q_latent else ("q_proj",)
    indexer = ("wq_b", "wk", "weights_proj") if cfg.indexer else ()
    return frozenset((*query, "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", *indexer))
