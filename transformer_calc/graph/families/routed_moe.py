"""K-EXAONE, Kolibri1, AFMoE and Laguna as transformers 5.23 runs them: Llama-shaped decoders
whose sliding layers rotate Q and K (and whose full layers run without RoPE, Laguna's with
part of it), experts routed by a sigmoid router with ungated shared experts beside them.

models/exaone_moe/modeling_exaone_moe.py (ExaoneMoeForCausalLM): q_norm and k_norm per head
after the transpose; RoPE where sliding_window is None or the layer slides; the first
first_k_dense_replace layers dense (mlp_layer_types), the rest ExaoneMoeSparseMoEBlock, whose
router and shared experts are DeepSeek-V3's (Dots1's code: moe.sparse_moe_block with router
dots1).

models/kolibri1/modeling_kolibri1.py (Kolibri1ForCausalLM): the same attention, a sandwich of
four LlamaRMSNorms (input_layernorm, post_self_attn_layernorm after attention,
post_attention_layernorm before the MLP, post_mlp_layernorm after it), every layer
Kolibri1SparseMoeBlock: Kolibri1TopKRouter (F.linear of fp32 copies of the input and the
weight; the top-k of the logits plus e_score_correction_bias, whose ranking keeps nothing;
the sigmoid of the gathered logits, divided by its sum, a new tensor, with norm_topk_prob),
the experts on the flattened tokens, plus shared_experts (a Kolibri1MLP of
shared_expert_intermediate_size) on the block's input.

models/afmoe/modeling_afmoe.py (AfmoeForCausalLM): AfmoeRMSNorm's weight applied in fp32
(Olmo2's), q_norm and k_norm per head before the transpose, the attention output times
sigmoid(gate_proj(x)) before o_proj, RoPE in the sliding layers only, the same sandwich
(input_layernorm, post_attention_layernorm, pre_mlp_layernorm, post_mlp_layernorm), the first
num_dense_layers layers dense, the rest AfmoeSparseMoeBlock: AfmoeTokenChoiceRouter (the
nn.Linear router.gate, its logits cast to fp32, sigmoid, the top-k of the scores plus
expert_bias, the chosen scores gathered and divided by their sum + 1e-20, a new tensor,
times route_scale, a number; peft 0.21 converts its gate.weight as Mixtral's router
parameter), shared_experts on the flattened tokens plus the experts'.

models/laguna/modeling_laguna.py (LagunaForCausalLM): pre-norm layers, q_norm and k_norm per
head before the transpose, a rotary table per layer type (the full layers' over the first
2 · ceil(int(head_dim · partial_rotary_factor) / 2) lanes, the rest concatenated back; the
sliding layers' over all of them, concatenated with the empty rest: a copy), the attention
output times F.softplus(g_proj(x).float()) cast back (one gate per head, broadcast over its
channels, or one per channel), o_proj biased with attention_bias; dense layers where
mlp_layer_types says, the rest LagunaSparseMoeBlock: shared_experts on the flattened tokens,
LagunaTopKRouter (F.linear in the model's dtype, .float(), sigmoid, the top-k of the scores
plus e_score_correction_bias, the gathered scores over their sum, a new tensor, cast to the
input's dtype), the experts times moe_routed_scaling_factor (a number), plus the shared output.

Shared with Llama (families/llama.py): RMSNorm, the rotary tables, rotate_half, repeat_kv, the
masks, the eager, SDPA and flash interfaces, the loss; with moe.py: the experts' loop or
grouped_mm, peft's parametrised router and experts."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor

# each model type's norms: before and after attention, before and after the MLP ("": none)
NORMS = {"exaone_moe": ("input_layernorm", "", "post_attention_layernorm", ""),
         "kolibri1": ("input_layernorm", "post_self_attn_layernorm",
                      "post_attention_layernorm", "post_mlp_layernorm"),
         "afmoe": ("input_layernorm", "post_attention_layernorm", "pre_mlp_layernorm",
                   "post_mlp_layernorm"),
         "laguna": ("input_layernorm", "", "post_attention_layernorm", "")}


@dataclass(frozen=True)
class RoutedMoe(moe.Moe):
    """moe.Moe's sizes (X experts, K per token, Fe an expert's width, Fs the shared
    experts'), pattern (D dense, E experts per layer; "" every layer E), norm_topk and
    grouped; kinds: each layer's attention (S sliding with RoPE, N full without; one letter:
    every layer), window its sliding_window; model: the model type (its norms, router and
    output gate); qk_norm "head" (before the transpose) or "head_t" (after it); norm_fp32
    AFMoE's RMSNorm."""

    model: str = "exaone_moe"

    gate_width: str = "head"  # Laguna's softplus gate: one per head, or "width" per channel

    @property
    def output_gate(self) -> bool:
        """AFMoE's sigmoid gate, Laguna's softplus gate on the attention output (names.py
        reads it)."""
        return self.model in ("afmoe", "laguna")

    @property
    def norm_roles(self) -> dict[str, str]:
        """Each norm module's place, as tcalc names its rows (names.py reads it)."""
        roles = ("attn.norm", "attn.post_norm", "ffn.norm", "ffn.post_norm")
        return {n: r for n, r in zip(NORMS[self.model], roles, strict=True) if n}


def forward(m: Builder, cfg: RoutedMoe) -> Tensor:
    """ExaoneMoeForCausalLM / Kolibri1ForCausalLM / AfmoeForCausalLM.forward(input_ids=ids,
    labels=ids): the loss (AFMoE's mup_enabled scales the embeddings by a number: nothing
    kept either way)."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    kinds = cfg.kinds * cfg.L if len(cfg.kinds) == 1 else cfg.kinds
    pattern = cfg.pattern or "E" * cfg.L
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)
        # the rotary tables: one for the model, Laguna's one per layer type (its full
        # layers' of the rotated width dr)
        tables: dict[str, tuple[Tensor, Tensor]] = {}
        for k in sorted(set(kinds) - {"N"}):
            wide = cfg.partial_rotary and k == "F"
            tables[k] = llama.rotary_tables(m, h, width=m["dr"] if wide else None) \
                if cfg.model == "laguna" or not tables else next(iter(tables.values()))
        # causal_mask_mapping: the full layers' causal mask, the sliding ones' windowed
        masks = {k: llama.attention_mask(m, h, "S" if k == "S" else "F", cfg.window)
                 for k in sorted(set(kinds))}
        for i, (kind, ffn) in enumerate(zip(kinds, pattern, strict=True)):
            mask, table = masks[kind], tables.get(kind)
            extras = (positions, *(table or ())) + (() if mask is None else (mask,))
            with m.module(f"layers.{i}"), tr.in_layer(i, (h, *extras)):
                h = _layer(m, cfg, h, table, mask, kind, ffn)
        h = llama.rms_norm(m, "norm", h, cfg.norm_fp32)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.head(h, w, V)
    return causal_lm_loss(logits, ids, V)


def _layer(m: Builder, cfg: RoutedMoe, h: Tensor, table: tuple[Tensor, Tensor] | None,
           mask: Tensor | None, kind: str, ffn: str) -> Tensor:
    """The decoder layer's forward: the pre-norm, attention, its post-norm (Kolibri1's and
    AFMoE's sandwich), the residual add; the same around the MLP or the MoE block."""
    pre_attn, post_attn, pre_ffn, post_ffn = NORMS[cfg.model]

    def norm(name: str, x: Tensor) -> Tensor:
        return llama.rms_norm(m, name, x, cfg.norm_fp32) if name else x

    with m.module("self_attn"):
        a = _attention(m, cfg, norm(pre_attn, h), table, mask, kind)
    h = ops.add(h, norm(post_attn, a))
    x = norm(pre_ffn, h)
    y = _moe_block(m, cfg, x) if ffn == "E" else llama._mlp(m, cfg, x)
    return ops.add(h, norm(post_ffn, y))


def _attention(m: Builder, cfg: RoutedMoe, x: Tensor, table: tuple[Tensor, Tensor] | None,
               mask: Tensor | None, kind: str) -> Tensor:
    """ExaoneMoeAttention / Kolibri1Attention / AfmoeAttention.forward: the projections
    viewed as heads, q_norm and k_norm, RoPE where the layer slides (table), (cache),
    attention, the output reshaped (AFMoE's times sigmoid(gate_proj(x))), o_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]

    def heads(name: str, n: Dim, norm: str = "") -> Tensor:
        bias = {"q_proj": cfg.bias_q, "k_proj": cfg.bias_k, "v_proj": cfg.bias_v}[name]
        y = ops.view(m.linear(name, x, n * dh, bias), (B, T, n, dh))
        if norm and cfg.qk_norm == "head":  # AfmoeAttention: q_norm(view), then transpose
            y = llama.rms_norm(m, norm, y, cfg.norm_fp32)
        y = ops.transpose(y, 1, 2)
        if norm and cfg.qk_norm == "head_t":  # ExaoneMoe, Kolibri1: after the transpose
            y = llama.rms_norm(m, norm, y, cfg.norm_fp32)
        return y

    q, k, v = heads("q_proj", H, "q_norm"), heads("k_proj", Hkv, "k_norm"), heads("v_proj", Hkv)
    gate = m.linear("gate_proj", x, H * dh, False) if cfg.model == "afmoe" else None
    if table is not None:  # apply_rotary_pos_emb
        cos, sin = (ops.unsqueeze(t, 1) for t in table)
        if cfg.partial_rotary and kind == "F":  # Laguna's full layers: cat([rotated, pass])
            q, k = (llama._partial_rotary(t, cos, sin, m["dr"]) for t in (q, k))
        else:
            q, k = llama.apply_rotary(q, cos, sin), llama.apply_rotary(k, cos, sin)
            if cfg.rope_concat:  # Laguna's: torch.cat([q_embed, q_pass]), the pass empty
                q, k = ops.cat([q], -1), ops.cat([k], -1)
    out = llama.attend(m, q, k, v, mask, dropout=cfg.attention_dropout,
                       window=cfg.window if kind == "S" else 0)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    if gate is not None:  # output * torch.sigmoid(gate_states)
        out = ops.mul(out, ops.sigmoid(gate))
    if cfg.model == "laguna":  # F.softplus(self.g_proj(hidden_states).float()).to(dtype)
        head = cfg.gate_width == "head"
        g = m.linear("g_proj", x, H if head else H * dh, False)
        g = ops.to(ops.softplus(ops.to(g, F32)), out.dtype)
        out = ops.view(ops.mul(ops.view(out, (B, T, H, dh)), ops.unsqueeze(g, -1)),
                       (B, T, H * dh)) if head else ops.mul(out, g)
    return m.linear("o_proj", out, m["E"], cfg.bias_o)


def _moe_block(m: Builder, cfg: RoutedMoe, x: Tensor) -> Tensor:
    """ExaoneMoeSparseMoEBlock (moe.sparse_moe_block, Dots1's), Kolibri1SparseMoeBlock or
    AfmoeSparseMoeBlock.forward."""
    if cfg.model == "exaone_moe":
        return moe.sparse_moe_block(m, cfg, x)
    if cfg.model == "laguna":
        return _laguna_block(m, cfg, x)
    B, T, E = x.shape
    with m.module("mlp"):
        flat = ops.view(x, (B * T, E))
        weights, chosen = _afmoe_router(m, flat) if cfg.model == "afmoe" else \
            _kolibri1_router(m, cfg, flat)
        if cfg.model == "afmoe":  # shared_experts(hidden_states_flat).view(B, T, E) first
            shared = ops.view(llama._mlp(m, cfg, flat, "shared_experts", "Fs"), x.shape)
        with m.module("experts"):
            run = moe.grouped_experts if cfg.grouped else moe.eager_experts
            out = ops.view(run(m, flat, chosen, weights), x.shape)
        if cfg.model == "kolibri1":  # + self.shared_experts(residuals)
            shared = llama._mlp(m, cfg, x, "shared_experts", "Fs")
            return ops.add(out, shared)
        return ops.add(shared, out)


def _kolibri1_router(m: Builder, cfg: RoutedMoe, flat: Tensor) -> tuple[Tensor, Tensor]:
    """Kolibri1TopKRouter.forward (not CUDA's no-grad mm path): router_logits =
    F.linear(hidden_states.type(float32), self.weight.type(float32)); the top-k of the
    logits plus the bias (its indices alone leave: the ranking keeps nothing); the gathered
    logits' sigmoid, divided by its sum (a new tensor) with norm_topk_prob. Returns (fp32
    weights, indices), (B·T, K) each."""
    N, X, K = flat.shape[0], m["X"], m["K"]
    with m.module("gate"):
        w = moe._as_read(m, [("weight", m.param("weight", X, flat.shape[-1]), 1)],
                         scoped=False)["weight"]()
        logits = ops.linear(ops.to(flat, F32), ops.to(w, F32))
        with m.trace.no_grad():
            chosen = m.trace.tensor((N, K), I64, False)
        weights = ops.sigmoid(ops.gather(logits, 1, chosen))
        if cfg.norm_topk:
            weights = ops.div(weights, ops.sum_dim(weights, -1, keepdim=True))
        return weights, chosen


def _afmoe_router(m: Builder, flat: Tensor) -> tuple[Tensor, Tensor]:
    """AfmoeTokenChoiceRouter.forward: self.gate(hidden_states).to(float32), sigmoid; the
    top-k of the scores plus expert_bias (its indices alone leave); the chosen scores over
    their sum + 1e-20 (a new tensor), times route_scale (a number). Returns (fp32 weights,
    indices), (B·T, K) each."""
    N, K = flat.shape[0], m["K"]
    with m.module("router"), m.module("gate"):
        # (peft's qwen2_moe conversion wraps gate.weight in a ParamWrapper, as Mixtral's
        # router parameter: the nn.Linear's forward reads the parametrised weight)
        w = moe._as_read(m, [("weight", m.param("weight", m["X"], flat.shape[-1]), 1)],
                         scoped=False)["weight"]()
        scores = ops.sigmoid(ops.to(ops.linear(flat, w), F32))
        with m.trace.no_grad():
            chosen = m.trace.tensor((N, K), I64, False)
        top = ops.gather(scores, 1, chosen)
        top = ops.div(top, ops.add(ops.sum_dim(top, -1, keepdim=True), 1e-20))
        return ops.mul(top, 1.0), chosen


def _laguna_block(m: Builder, cfg: RoutedMoe, x: Tensor) -> Tensor:
    """LagunaSparseMoeBlock.forward: the shared experts on the flattened tokens, the router,
    the experts, their output times moe_routed_scaling_factor (a number), plus the shared
    output, reshaped back."""
    B, T, E = x.shape
    N = B * T
    with m.module("mlp"):
        flat = ops.view(x, (N, E))
        shared = llama._mlp(m, cfg, flat, "shared_experts", "Fs")
        with m.module("gate"):
            # LagunaTopKRouter: F.linear(hidden_states, self.weight).float(); sigmoid; the
            # top-k of the scores plus e_score_correction_bias (its indices alone leave);
            # the gathered scores over their sum (a new tensor), cast to the input's dtype
            w = moe._as_read(m, [("weight", m.param("weight", m["X"], E), 1)],
                             scoped=False)["weight"]()
            scores = ops.sigmoid(ops.to(ops.linear(flat, w), F32))
            with m.trace.no_grad():
                chosen = m.trace.tensor((N, m["K"]), I64, False)
            top = ops.gather(scores, -1, chosen)
            top = ops.to(ops.div(top, ops.sum_dim(top, -1, keepdim=True)), flat.dtype)
        with m.module("experts"):
            run = moe.grouped_experts if cfg.grouped else moe.eager_experts
            out = run(m, flat, chosen, top)
        return ops.reshape(ops.add(ops.mul(out, 1.0), shared), (B, T, E))
