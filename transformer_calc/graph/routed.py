"""The Llama-attention decoders routed as DeepSeek-V3 routes (a sigmoid router whose top-k is
chosen on bias-corrected scores, ungated shared experts added to the routed ones), each as a
mapper from its ModelSpec to the MoE graph's flags (families/moe.py) or the routed family's
(families/routed_moe.py): GLM-4.5 (glm4_moe), Solar Open (solar_open), K-EXAONE
(exaone_moe), Kolibri1 (kolibri1) and AFMoE (afmoe). A mapper refuses, naming the type, any
layout its graph does not transcribe (the rules answer it then)."""

from __future__ import annotations

from transformer_calc.errors import TcalcError
from transformer_calc.graph.families import moe, routed_moe
from transformer_calc.spec import ModelSpec

# the spec fields these mappers read beside the MoE family's (evaluate._READS["moe"])
READS = frozenset(("router_fp32", "rotary_fraction", "sliding_window", "layer_attention",
                   "sandwich_norm", "norm_fp32", "attn_gate", "attn_gate_named_gate_proj"))

# the model types whose forward families/moe.py transcribes (Dots1MoE's block and router:
# Glm4MoeMoE, SolarOpenMoE are the same code)
MOE_TYPES = ("glm4_moe", "solar_open")
# the model types whose forward families/routed_moe.py transcribes
ROUTED_TYPES = tuple(routed_moe.NORMS)


def _common(spec: ModelSpec, unread: list[str]) -> bool:
    """What every type here shares: pre-norm RMSNorm layers, RoPE, gated SiLU MLPs and
    experts, the eager softmax in fp32, an fp32 sigmoid router, ungated shared experts of
    n_shared_experts · moe_intermediate_size (or their own width) on the block's input,
    peft's qwen2_moe conversion or none, no dropout, no bias beyond q, k and v (Laguna's o
    too; AFMoE's and Laguna's routers run in the model's dtype, their logits cast to fp32
    after); an even head (rotate_half splits it in halves: torch fails on an odd one)."""
    return (spec.head_dim % 2 == 0 and spec.norm == "rmsnorm" and spec.position == "rope"
            and spec.ffn == "gated"
            and spec.activation == "silu" and spec.softmax_fp32 and not spec.dropout
            and not spec.attention_dropout and spec.norm_position == "pre"
            and spec.router_fp32 == (spec.model_type not in ("afmoe", "laguna"))
            and spec.n_shared_experts >= 1 and not spec.fused_qkv
            and not spec.fused_gate_up and not spec.rope_fp32
            and spec.bias_o == (spec.bias_q and spec.model_type == "laguna")
            and not spec.bias_ffn_in and not spec.bias_ffn_out
            and spec.bias_q == spec.bias_k == spec.bias_v and not spec.shared_expert_gate
            and not spec.peft_router_linear and not spec.router_bias and not unread)


def glm4_moe(spec: ModelSpec, unread: list[str]) -> moe.Moe:
    """Glm4MoeForCausalLM and SolarOpenForCausalLM (models/glm4_moe/modeling_glm4_moe.py,
    models/solar_open/modeling_solar_open.py): Llama's layers (q, k and v biased with
    attention_bias; GLM's q_norm and k_norm per head before the transpose with use_qk_norm),
    the first first_k_dense_replace layers dense, the rest Glm4MoeMoE: DeepSeek-V3's sigmoid
    router (Dots1TopkRouter's code: moe.sigmoid_router, its group ranking keeping nothing,
    renormalised in place with norm_topk_prob) and the shared experts added to the routed
    ones. GLM's apply_rotary_pos_emb rotates the first 2 · ceil(int(head_dim ·
    partial_rotary_factor) / 2) lanes and concatenates the rest after them (a copy even when
    nothing is left); Solar Open's rotates the whole head."""
    glm = spec.model_type == "glm4_moe"
    dh = spec.head_dim
    # Glm4MoeRotaryEmbedding: inv_freq of arange(0, int(head_dim · factor), 2), cat twice
    dr = int(dh * spec.rotary_fraction)
    dr += dr % 2
    if not (_common(spec, unread) and spec.peft_moe == "qwen2_moe"
            and spec.qk_norm in (("none", "head") if glm else ("none",))
            and spec.router_topk in ("renorm", "none") and spec.d_ff_shared is None
            and not spec.norm_fp32 and not spec.sandwich_norm and spec.attn_gate == "none"
            and not spec.sliding_window and not spec.layer_attention
            and spec.rope_concat == glm and 2 <= dr <= dh
            and (glm or dr == dh)):
        raise TcalcError(f"{spec.name}: no op graph for this {spec.model_type} layout yet "
                         "(the graph engine covers its config class's layout: Llama's "
                         "attention, DeepSeek-V3's sigmoid router and shared experts)")
    from transformer_calc.plan import parse_pattern

    kinds = parse_pattern(spec.layer_ffn, "DE", spec.n_layers, "layer_ffn") \
        if spec.layer_ffn else ("E",) * spec.n_layers
    H = spec.n_heads
    return moe.Moe(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H, dh=dh,
                   F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                   bias_q=spec.bias_q, bias_k=spec.bias_k, bias_v=spec.bias_v,
                   qk_norm=spec.qk_norm, rope_concat=glm, partial_rotary=dr < dh,
                   dr=dr if dr < dh else 0, X=spec.n_experts, K=spec.top_k,
                   Fe=spec.expert_ff, Fs=spec.n_shared_experts * spec.shared_ff,
                   pattern="" if set(kinds) == {"E"} else "".join(kinds), router="dots1",
                   norm_topk=spec.router_topk == "renorm", shared_experts=True,
                   grouped=spec.experts_grouped)


def routed(spec: ModelSpec, unread: list[str]) -> routed_moe.RoutedMoe:
    """ExaoneMoeForCausalLM, Kolibri1ForCausalLM, AfmoeForCausalLM and LagunaForCausalLM
    (families/routed_moe.py) as spec_from_hf reads them: Laguna's full layers with RoPE on
    the first dr lanes and sliding ones on all of them (both concatenated back), its softplus
    output gate per head or channel, its router (renorm_cast) and shared expert of its own
    width; the others': sliding layers with RoPE and full ones without (layer_attention
    S and N), q_norm and k_norm per head, K-EXAONE's DeepSeek-V3 router (router_topk renorm
    with norm_topk_prob, else none), Kolibri1's sigmoid of the top-k logits (topk_sigmoid,
    renormalised: topk_sigmoid_renorm) and sandwich norms, AFMoE's always renormalised
    nn.Linear router, fp32 norm weights, sandwich norms and sigmoid output gate; dense layers
    where layer_ffn says D."""
    from transformer_calc.plan import layer_kinds_in_order, parse_pattern

    model = spec.model_type
    laguna = model == "laguna"
    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    ffn = parse_pattern(spec.layer_ffn, "DE", spec.n_layers, "layer_ffn") \
        if spec.layer_ffn else ("E",) * spec.n_layers
    routers = {"exaone_moe": ("renorm", "none"), "afmoe": ("none",),
               "kolibri1": ("topk_sigmoid_renorm", "topk_sigmoid"), "laguna": ("renorm_cast",)}
    gates = {"afmoe": ("width",), "laguna": ("head", "width")}
    dh = spec.head_dim
    # Laguna's full layers: the first 2 · ceil(int(head_dim · factor) / 2) lanes rotated
    dr = int(dh * spec.rotary_fraction)
    dr += dr % 2
    if not (_common(spec, unread) and spec.qk_norm == "head" and spec.rope_concat == laguna
            and spec.router_topk in routers[model]
            and (2 <= dr <= dh if laguna else spec.rotary_fraction == 1.0)
            and spec.norm_fp32 == (model == "afmoe")
            and spec.sandwich_norm == (model in ("kolibri1", "afmoe"))
            and spec.attn_gate in gates.get(model, ("none",))
            and spec.attn_gate_named_gate_proj == (model == "afmoe")
            and not set(kinds) - ({"F", "S"} if laguna else {"S", "N"})
            and (spec.sliding_window or "S" not in kinds)
            and spec.peft_moe == ("none" if model in ("kolibri1", "laguna") else "qwen2_moe")
            and (spec.d_ff_shared is None) == (model not in ("kolibri1", "laguna"))
            and (not laguna or spec.n_shared_experts == 1)
            and not (model == "kolibri1" and "D" in ffn)):
        raise TcalcError(f"{spec.name}: no op graph for this {model} layout yet (the graph "
                         "engine covers its config class's layout)")
    H = spec.n_heads
    shared = spec.shared_ff if model in ("kolibri1", "laguna") else \
        spec.n_shared_experts * spec.shared_ff
    return routed_moe.RoutedMoe(
        V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H, dh=dh,
        F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings, bias_q=spec.bias_q,
        bias_k=spec.bias_k, bias_v=spec.bias_v, bias_o=spec.bias_o, norm_fp32=spec.norm_fp32,
        rope_concat=laguna, partial_rotary=laguna and dr < dh,
        dr=dr if laguna and dr < dh else 0, gate_width=spec.attn_gate,
        qk_norm="head" if model in ("afmoe", "laguna") else "head_t",
        window=spec.sliding_window or 0, kinds=kinds if len(set(kinds)) > 1 else kinds[0],
        X=spec.n_experts, K=spec.top_k, Fe=spec.expert_ff, Fs=shared,
        pattern="" if set(ffn) == {"E"} else "".join(ffn),
        router="dots1" if model == "exaone_moe" else model,
        norm_topk=spec.router_topk in ("renorm", "topk_sigmoid_renorm"),
        shared_experts=True, grouped=spec.experts_grouped, model=model)
