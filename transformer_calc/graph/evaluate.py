"""Run a family's graph for one configuration, every layer traced (the reference the
compiled path, compile.py, is checked against), and read its costs: the storages autograd
holds when the forward is over (each once; under the run's recomputation policy, held.py),
the parameters it touched (a tied table once), and the forward's matmul FLOPs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from transformer_calc.errors import TcalcError
from transformer_calc.graph import variants
from transformer_calc.graph.families import (
    bert,
    cohere,
    gemma,
    gemma3n,
    gemma4,
    gpt2,
    llama,
    mla,
    moe,
)
from transformer_calc.graph.held import held
from transformer_calc.graph.modules import Builder, Run
from transformer_calc.graph.symbols import Dim, Poly
from transformer_calc.graph.trace import OpRecord, Saved
from transformer_calc.spec import ModelSpec

Family = (gpt2.GPT2 | llama.Llama | bert.Bert | moe.Moe | gemma.Gemma | cohere.Cohere
          | mla.Mla | gemma4.Gemma4)

# each family's forward, by the class of its config (a subclass runs its base's forward)
_FORWARDS: dict[type, Callable[..., object]] = {
    gpt2.GPT2: gpt2.forward, llama.Llama: llama.forward, bert.Bert: bert.forward,
    moe.Moe: moe.forward, gemma.Gemma: gemma.forward, cohere.Cohere: cohere.forward,
    mla.Mla: mla.forward, gemma4.Gemma4: gemma4.forward, gemma3n.Gemma3n: gemma3n.forward}


@dataclass(frozen=True)
class Result:
    """saved: every storage held for backward (activations, inputs such as the token ids,
    and under autocast the parameters' 16-bit copies); weight_copy_bytes: autocast's cache
    of those copies, all held until the forward's autocast region ends; ops: the forward,
    op by op; recomputed_layer_bytes: under full recomputation, the largest layer's saved
    set, rebuilt in backward (0 otherwise)."""

    saved: tuple[Saved, ...]
    weight_copy_bytes: int
    params: int
    trainable_params: int
    forward_flops: int
    flops_formula: Poly
    ops: tuple[OpRecord, ...]
    recomputed_layer_bytes: int = 0

    @property
    def activation_bytes(self) -> int:
        """What saved_tensors_hooks counts with parameters excluded: all but weight copies."""
        return sum(s.nbytes for s in self.saved if s.storage.kind != "weight_copy")

    @property
    def activation_formula(self) -> Poly:
        total = Poly(())
        for s in self.saved:
            if s.storage.kind != "weight_copy":
                total = total + s.storage.formula
        return total


def trace(family: Family, run: Run, symbolic: bool = False,
          replaced: Callable[[Builder], Family] | None = None) -> Builder:
    """Run the family's forward on a Builder. symbolic (compile.py): sizes are SInts, and
    `replaced` gives the forward a config whose sizes are the Builder's SInts, so any
    decision the forward takes on a size is recorded as a guard."""
    m = Builder(run, family.sizes(), symbolic)
    cfg = replaced(m) if replaced is not None else family
    forward = next(_FORWARDS[k] for k in type(cfg).__mro__ if k in _FORWARDS)
    forward(m, cfg)
    return m


def evaluate(family: Family, run: Run) -> Result:
    tr = trace(family, run).trace
    kept = held(tr, run.recompute)
    params = list(tr.params.values())
    copies = sum(t.storage.nbytes for t in tr.weight_casts.values())
    rebuilt = max((sum(st.nbytes for st in layer) for layer in kept.rebuilt), default=0)
    return Result(tuple(s for s, _ in kept.saved), copies,
                  sum(p.storage.numel.value for p in params),
                  sum(p.storage.numel.value for p in params if p.requires_grad),
                  tr.flops, tr.flops_poly, tuple(tr.ops), rebuilt)


# The ModelSpec fields each family's graph reads (or that change no tensor: the spec's
# metadata, the positions a model may reach, how MoE experts would be stored). A spec with
# any other field away from its default describes a forward the graph does not transcribe
# (Phi-3's fused projections, MLA, a recurrent mixer, attention sinks...): refused.
_METADATA = frozenset(("name", "description", "source", "expected_params",
                       "expected_params_source", "note", "module_names", "max_positions",
                       "experts_grouped", "model_type"))
_COMMON = frozenset(("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "tie_embeddings",
                     "position", "ffn", "activation", "norm", "dropout", "attention_dropout"))
_READS = {"gpt2": _METADATA | _COMMON | {"fused_qkv"},
          "llama": _METADATA | _COMMON | {"n_kv_heads", "d_head", "softmax_fp32", "bias_q",
                                          "bias_k", "bias_v", "bias_o", "bias_ffn_in",
                                          "bias_ffn_out", "fused_qkv", "fused_gate_up",
                                          "rope_concat", "qk_norm", "norm_position",
                                          "norm_fp32", "rope_fp32"},
          # (the encoders' loss_fp32 False, their biases True, their sdpa_path: read as
          # family_of requires them)
          "bert": _METADATA | _COMMON | {"arch", "norm_position", "final_norm",
                                         "embedding_norm", "token_types", "lm_head",
                                         "mlm_head", "loss_fp32", "embed_proj_dim",
                                         "embed_factorized", "mlm_bias", "n_kv_heads",
                                         "d_head"},
          "gemma": _METADATA | _COMMON | {"n_kv_heads", "d_head", "softmax_fp32", "bias_q",
                                          "bias_k", "bias_v", "bias_o", "bias_ffn_in",
                                          "bias_ffn_out", "qk_norm", "norm_fp32",
                                          "sandwich_norm", "logit_softcapping",
                                          "attn_softcapping", "sliding_window",
                                          "layer_attention", "sdpa_path"}}
# Gemma 4's text decoders (gemma4.py): Gemma's fields, its norms' form and its layouts
_READS["gemma4"] = _READS["gemma"] | {"norm_mean_square", "global_head_dim", "global_kv_heads",
                                     "global_k_eq_v", "kv_shared_layers", "kv_shared_wide_ffn",
                                     "value_norm", "per_layer_input", "per_layer_vocab",
                                     "n_experts", "top_k", "d_ff_expert", "layer_ffn",
                                     "moe_beside_dense", "peft_moe"}
# Gemma 3n's (gemma3n.py): Gemma 4's dense fields and AltUp, LAuReL, the sparse FFN gates
_READS["gemma3n"] = _READS["gemma4"] - {"global_head_dim", "global_kv_heads", "global_k_eq_v",
                                         "kv_shared_wide_ffn", "n_experts", "top_k",
                                         "d_ff_expert", "layer_ffn", "moe_beside_dense",
                                         "peft_moe"} | {"altup_inputs", "laurel_rank",
                                                        "sparse_ffn_layers"}
# The encoders whose forward bert.py transcribes: model_type -> (the encoder's attribute,
# the MLM head's layout, position ids counted from the token ids). Other BERT-shaped types
# (TAPAS's seven token-type tables, BigBird's sparse attention, ...) keep the rules.
_ENCODERS = {"bert": ("bert", "bert", False), "ernie": ("ernie", "bert", False),
             "roberta": ("roberta", "roberta", True),
             "camembert": ("roberta", "roberta", True),
             "xlm-roberta": ("roberta", "roberta", True),
             "data2vec-text": ("data2vec_text", "roberta", True),
             "electra": ("electra", "electra", False)}
# The model types whose forward gemma.py transcribes
_GEMMAS = ("gemma", "gemma2", "gemma3_text", "vaultgemma")
# the MoE decoders: Llama's fields and the experts' (peft_moe says how peft adapts them:
# graph_activations reads it with the LoRA targets)
_READS["moe"] = _READS["llama"] | {"n_experts", "top_k", "d_ff_expert", "n_shared_experts",
                                   "d_ff_shared", "shared_expert_gate", "layer_ffn",
                                   "router_topk", "peft_moe", "peft_router_linear"}


# the MLA decoders (DeepSeek-V3, MiniCPM3): Llama's fields, the latents' and head widths,
# DeepSeek-V3's experts and sigmoid router (mtp_layers: modules transformers does not build)
_READS["mla"] = _READS["llama"] | {"kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
                                   "qk_rope_head_dim", "v_head_dim", "mtp_layers",
                                   "n_experts", "top_k", "d_ff_expert", "n_shared_experts",
                                   "d_ff_shared", "layer_ffn", "router_topk", "router_fp32",
                                   "peft_moe", "index_heads", "index_head_dim", "index_topk",
                                   "moe_beside_dense", "moe_shortcut", "peft_router_linear"}
# the model types whose forward mla.py transcribes ("": a preset, read as DeepSeek-V3, or
# with an indexer as V3.2), and those with DSA's indexer (GLM-MoE-DSA: V3.2's layers, its
# indexer's RoPE interleaved, which keeps nothing either way; spec_from_hf refuses its layers
# that reuse another's top-k)
_MLAS = ("", "deepseek_v3", "minicpm3", "deepseek_v32", "glm_moe_dsa", "longcat_flash")
_DSAS = ("", "deepseek_v32", "glm_moe_dsa")


@functools.cache
def _defaults(family: str) -> tuple[Callable[[ModelSpec], tuple[object, ...]],
                                    tuple[str, ...], tuple[object, ...]]:
    """The ModelSpec fields the family's graph does not read: a getter of their values (one
    C call: a sweep asks this of thousands of specs), their names and their defaults."""
    import dataclasses
    import operator

    names, defaults = [], []
    for f in dataclasses.fields(ModelSpec):
        if f.name in _READS[family]:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            continue
        names.append(f.name)
        defaults.append(default)
    getter = operator.attrgetter(*names)
    return getter, tuple(names), tuple(defaults)


def _unread(spec: ModelSpec, family: str) -> list[str]:
    """The spec's fields away from their defaults that the family's graph does not read."""
    getter, names, defaults = _defaults(family)
    values = getter(spec)
    if values == defaults:
        return []
    return [n for n, v, d in zip(names, values, defaults, strict=True) if v != d]


def family_of(spec: ModelSpec) -> Family:
    """The graph a ModelSpec's layout runs as: the first family whose mapper takes the spec
    (_MAPPERS, below), or a TcalcError saying it has no graph yet. A mapper returns None
    when the layout is not its family's, or raises TcalcError to refuse with its reason."""
    for mapper in _MAPPERS:
        family = mapper(spec)
        if family is not None:
            return family
    raise TcalcError(f"{spec.name}: no op graph for this layout yet (the graph engine covers "
                     "GPT-2, the Llama/Qwen2/Qwen3/OLMo2/Phi-3 family with Ministral, OLMo, "
                     "BitNet, Nemotron, Apertus, NanoChat and DiffLlama, Cohere 1-2, Gemma "
                     "1-3, VaultGemma, Gemma 3n and Gemma 4, the MoE and latent-attention "
                     "decoders docs/op-graph.md lists, and BERT, RoBERTa, ELECTRA with their "
                     "masked-LM heads)")


def _gpt2(spec: ModelSpec) -> gpt2.GPT2 | None:
    if not (spec.norm == "layernorm" and spec.position == "learned" and spec.ffn == "plain"
            and spec.activation == "gelu_new" and spec.fused_qkv
            and not _unread(spec, "gpt2")):
        return None
    p = spec.dropout
    pa = spec.attention_dropout if spec.attention_dropout is not None else p
    return gpt2.GPT2(V=spec.vocab_size, P=spec.max_positions, E=spec.d_model, H=spec.n_heads,
                     F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                     resid_pdrop=p, embd_pdrop=p, attn_pdrop=pa)


def _llama(spec: ModelSpec) -> llama.Llama | None:
    if not (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation == "silu" and spec.softmax_fp32 and not spec.dropout
            and spec.qk_norm in ("none", "head", "width")
            and spec.norm_position in ("pre", "post")
            and not _unread(spec, "llama")):
        return None
    H = spec.n_heads
    pa = spec.attention_dropout if spec.attention_dropout is not None else spec.dropout
    return llama.Llama(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                       dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers,
                       tied=spec.tie_embeddings, bias_q=spec.bias_q, bias_k=spec.bias_k,
                       bias_v=spec.bias_v, bias_o=spec.bias_o,
                       bias_mlp_in=spec.bias_ffn_in, bias_mlp_out=spec.bias_ffn_out,
                       attention_dropout=pa, fused_qkv=spec.fused_qkv,
                       fused_gate_up=spec.fused_gate_up, rope_concat=spec.rope_concat,
                       qk_norm=spec.qk_norm, post_norm=spec.norm_position == "post",
                       norm_fp32=spec.norm_fp32, rope_fp32=spec.rope_fp32)


def _bert(spec: ModelSpec) -> bert.Bert | None:
    if spec.model_type in _ENCODERS and not _unread(spec, "bert"):
        return _encoder(spec)
    return None


def _gemma_family(spec: ModelSpec) -> gemma.Gemma | None:
    if (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation in ("gelu", "gelu_tanh") and spec.norm_fp32
            and spec.softmax_fp32 and not spec.dropout and spec.norm_position == "pre"
            and spec.model_type in ("", *_GEMMAS) and not _unread(spec, "gemma")):
        return _gemma(spec)
    return None


def _gemma4_family(spec: ModelSpec) -> gemma4.Gemma4 | None:
    """Gemma 4's text decoders by their model type (Gemma4ForCausalLM,
    Gemma4UnifiedForCausalLM: the latter has no per-layer inputs) without experts: Gemma4RMSNorm
    (norm_mean_square with norm_fp32), sandwich norms, q/k norms over each head and v_norm,
    gelu_tanh, attention biases all or none, layers full or sliding; experts beside the
    dense MLP in every layer (enable_moe_block), the router an nn.Linear to peft."""
    if spec.model_type not in ("gemma4_text", "gemma4_unified_text"):
        return None
    from transformer_calc.plan import layer_kinds_in_order, parse_pattern

    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    H, Hkv = spec.n_heads, spec.n_kv_heads or spec.n_heads
    Hg = spec.global_kv_heads or Hkv
    unified = spec.model_type == "gemma4_unified_text"
    if not (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation == "gelu_tanh" and spec.norm_fp32 and spec.norm_mean_square
            and spec.softmax_fp32 and not spec.dropout and spec.norm_position == "pre"
            and spec.sandwich_norm and spec.qk_norm == "head" and spec.value_norm
            and not spec.attn_softcapping and not spec.bias_ffn_in and not spec.bias_ffn_out
            and len({spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o}) == 1
            and not set(kinds) - {"F", "S"} and H % Hkv == 0 and H % Hg == 0
            and spec.head_dim % 2 == 0 and (spec.global_head_dim or 2) % 2 == 0
            and not (unified and spec.per_layer_input)
            and (not spec.per_layer_input or spec.per_layer_vocab)
            and spec.kv_shared_layers < spec.n_layers
            and (not spec.n_experts or (
                spec.moe_beside_dense and spec.top_k and spec.peft_moe == "linear_router"
                and not unified and set(parse_pattern(spec.layer_ffn or "E", "DEX",
                                                      spec.n_layers, "layer_ffn")) == {"E"}))
            and set(kinds[:spec.n_layers - spec.kv_shared_layers]) >= set(
                kinds[spec.n_layers - spec.kv_shared_layers:])
            and not _unread(spec, "gemma4")):
        return None
    pa = spec.attention_dropout if spec.attention_dropout is not None else spec.dropout
    return gemma4.Gemma4(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=Hkv, dh=spec.head_dim,
                         F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                         bias=spec.bias_q, attention_dropout=pa, sandwich=True,
                         qk_norm=True, rope_per_kind=True,
                         final_softcap=spec.logit_softcapping, window=spec.sliding_window,
                         kinds=kinds if len(set(kinds)) > 1 else kinds[0],
                         dg=spec.global_head_dim or spec.head_dim, Hg=Hg,
                         k_eq_v=spec.global_k_eq_v, shared=spec.kv_shared_layers,
                         wide=spec.kv_shared_wide_ffn, ple=bool(spec.per_layer_input),
                         Ep=spec.per_layer_input or 1, Vp=spec.per_layer_vocab or 1,
                         experts=bool(spec.n_experts), X=spec.n_experts or 1,
                         K=spec.top_k or 1, Fe=spec.expert_ff if spec.n_experts else 1,
                         grouped=spec.experts_grouped)


def _gemma3n_family(spec: ModelSpec) -> gemma3n.Gemma3n | None:
    """Gemma 3n's text decoder by its model type (Gemma3nForCausalLM): Gemma 4's norms,
    attention and per-layer inputs (every layer of one head dim) with AltUp's streams,
    LAuReL and the first layers' sparse FFN gates."""
    if spec.model_type != "gemma3n_text":
        return None
    from transformer_calc.plan import layer_kinds_in_order

    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    L, H, Hkv = spec.n_layers, spec.n_heads, spec.n_kv_heads or spec.n_heads
    if not (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation == "gelu_tanh" and spec.norm_fp32 and spec.norm_mean_square
            and spec.softmax_fp32 and not spec.dropout and spec.norm_position == "pre"
            and spec.sandwich_norm and spec.qk_norm == "head" and spec.value_norm
            and not spec.attn_softcapping and not spec.bias_ffn_in and not spec.bias_ffn_out
            and len({spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o}) == 1
            and not set(kinds) - {"F", "S"} and H % Hkv == 0 and spec.head_dim % 2 == 0
            and spec.altup_inputs >= 2 and spec.laurel_rank >= 1
            and spec.per_layer_input >= 1 and spec.per_layer_vocab >= 1
            and spec.sparse_ffn_layers <= L and spec.kv_shared_layers < L
            and set(kinds[:L - spec.kv_shared_layers]) >= set(kinds[L - spec.kv_shared_layers:])
            and not _unread(spec, "gemma3n")):
        return None
    pa = spec.attention_dropout if spec.attention_dropout is not None else spec.dropout
    return gemma3n.Gemma3n(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=Hkv, dh=spec.head_dim,
                           F=spec.d_ff, L=L, tied=spec.tie_embeddings, bias=spec.bias_q,
                           attention_dropout=pa, sandwich=True, qk_norm=True,
                           rope_per_kind=True, final_softcap=spec.logit_softcapping,
                           window=spec.sliding_window,
                           kinds=kinds if len(set(kinds)) > 1 else kinds[0],
                           dg=spec.head_dim, Hg=Hkv, shared=spec.kv_shared_layers, ple=True,
                           Ep=spec.per_layer_input, Vp=spec.per_layer_vocab,
                           streams=spec.altup_inputs, R=spec.laurel_rank,
                           sparse=spec.sparse_ffn_layers)


def _moe_family(spec: ModelSpec) -> moe.Moe | None:
    return _moe(spec) if spec.n_experts else None


def _encoder(spec: ModelSpec) -> bert.Bert | None:
    """A BERT-style MaskedLM spec as transformers builds it for its model_type: post-norm
    layers, learned positions and token types, the erf GELU, the MLM head with its
    decoder's bias, nn.CrossEntropyLoss in the scores' dtype; ELECTRA's embeddings of
    their own width, projected (its head as wide, the decoder's bias its own)."""
    base, head, from_ids = _ENCODERS[spec.model_type]
    E, H = spec.d_model, spec.n_heads
    electra = head == "electra"
    if not (spec.arch == "encoder" and spec.norm == "layernorm" and spec.position == "learned"
            and spec.norm_position == "post" and spec.embedding_norm and not spec.final_norm
            and spec.ffn == "plain" and spec.activation == "gelu" and spec.mlm_head
            and not spec.lm_head and not spec.loss_fp32 and spec.token_types >= 1
            and spec.n_kv_heads in (None, H) and spec.d_head in (None, E // H)
            and H and E % H == 0 and spec.d_ff
            and spec.mlm_bias == ("decoder" if electra else "bert")
            and spec.embed_factorized == (electra and spec.embed_proj_dim is not None)):
        return None
    p = spec.dropout
    pa = spec.attention_dropout if spec.attention_dropout is not None else p
    family = bert.Bert(V=spec.vocab_size, P=spec.max_positions, Ty=spec.token_types, E=E,
                       H=H, F=spec.d_ff, L=spec.n_layers, base=base, head=head,
                       positions_from_ids=from_ids, tied=spec.tie_embeddings,
                       hidden_dropout=p, attention_dropout=pa)
    if spec.embed_factorized and spec.embed_proj_dim:
        return bert.Factorized(**vars(family), Ee=spec.embed_proj_dim)
    return family


def _gemma(spec: ModelSpec) -> gemma.Gemma | None:
    """Gemma's layouts from what the spec says (GemmaRMSNorm is norm_fp32's x̂ · (1 + w),
    the scaled embedding comes with the model types that have it): sandwich norms with a
    per-head q/k norm are Gemma 3 (whose attention ignores attn_logit_softcapping: a spec
    that sets it is refused), sandwich norms alone Gemma 2 (eager only, as soft-capped
    scores must be: a spec that says SDPA runs them is refused); two norms a layer with
    soft-capping are VaultGemma, without it Gemma (full attention only). Attention biases
    all or none, no MLP biases; layers full or sliding, as layer_attention says. A spec read
    from a config.json must be of the model type its layout says."""
    from transformer_calc.plan import layer_kinds_in_order

    v3 = spec.qk_norm == "head"
    vault = not spec.sandwich_norm and bool(spec.attn_softcapping or spec.logit_softcapping)
    variant = "gemma3_text" if v3 else "gemma2" if spec.sandwich_norm else \
        "vaultgemma" if vault else "gemma"
    if spec.model_type and spec.model_type != variant:
        return None
    if (spec.qk_norm not in ("none", "head") or (v3 and not spec.sandwich_norm)
            or (v3 and spec.attn_softcapping)
            or (spec.attn_softcapping and spec.sdpa_path)  # no SDPA with soft-capped scores
            or len({spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o}) != 1
            or spec.bias_ffn_in or spec.bias_ffn_out):
        return None
    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    if set(kinds) - {"F", "S"} or ("S" in kinds and not spec.sandwich_norm and not vault):
        return None
    pa = spec.attention_dropout if spec.attention_dropout is not None else spec.dropout
    return gemma.Gemma(V=spec.vocab_size, E=spec.d_model, H=spec.n_heads,
                       Hkv=spec.n_kv_heads or spec.n_heads, dh=spec.head_dim, F=spec.d_ff,
                       L=spec.n_layers, tied=spec.tie_embeddings, bias=spec.bias_q,
                       attention_dropout=pa, sandwich=spec.sandwich_norm,
                       ffn_norm="pre_feedforward_layernorm" if vault
                       else "post_attention_layernorm", qk_norm=v3, rope_per_kind=v3,
                       attn_softcap=spec.attn_softcapping, final_softcap=spec.logit_softcapping,
                       window=spec.sliding_window,
                       kinds=kinds if len(set(kinds)) > 1 else kinds[0])
def _moe(spec: ModelSpec) -> moe.Moe:
    """Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, PhiMoE and HunYuan-MoE (spec_from_hf's fields
    for them): the Llama layout with a router whose top-k handling the spec names
    (router_topk), gate/up/down experts, at most one shared expert with its sigmoid gate
    (HunYuan's without), and dense layers where layer_ffn says D.
    Anything else (fused projections, a router bias or fp32 router, zero experts, several
    shared experts, a norm after the experts...) is refused."""
    from transformer_calc.plan import parse_pattern

    shared = spec.n_shared_experts
    # PhiMoE: nn.LayerNorm and its sparsemixer router; the rest RMSNorm. HunYuan (by its
    # model type: its router, an nn.Linear, renormalises and casts as Qwen's with
    # norm_topk_prob; its shared MLP has no gate; its q/k norms follow RoPE)
    phimoe = spec.router_topk == "sparsemixer"
    hunyuan = spec.model_type == "hunyuan_v1_moe"
    norm = "layernorm" if phimoe else "rmsnorm"
    if not ((spec.router_topk != "none") != hunyuan and spec.norm == norm
            and spec.peft_router_linear == hunyuan and (spec.qk_norm == "head" or not hunyuan)
            and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.dropout and spec.qk_norm in ("none", "head", "width")
            and spec.norm_position == "pre" and not spec.fused_qkv
            and not spec.fused_gate_up and not spec.rope_concat and not spec.norm_fp32
            and not spec.rope_fp32 and not spec.bias_ffn_in and not spec.bias_ffn_out
            and (shared == 0 or (shared == 1 and spec.shared_expert_gate != hunyuan
                                 and spec.shared_ff > 0))
            and not _unread(spec, "moe")):
        raise TcalcError(f"{spec.name}: no op graph for this mixture of experts yet (the "
                         "graph engine covers Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, PhiMoE and "
                         "HunYuan-MoE)")
    kinds = parse_pattern(spec.layer_ffn, "DEX", spec.n_layers, "layer_ffn") \
        if spec.layer_ffn else ("E",) * spec.n_layers
    if "X" in kinds:
        raise TcalcError(f"{spec.name}: layers without an FFN have no op graph yet")
    H = spec.n_heads
    pa = spec.attention_dropout if spec.attention_dropout is not None else spec.dropout
    return moe.Moe(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                   dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                   bias_q=spec.bias_q, bias_k=spec.bias_k, bias_v=spec.bias_v,
                   bias_o=spec.bias_o, attention_dropout=pa,
                   qk_norm="rotated" if hunyuan else spec.qk_norm,
                   X=spec.n_experts, K=spec.top_k, Fe=spec.expert_ff,
                   Fs=spec.shared_ff if shared else 1,
                   pattern="" if set(kinds) == {"E"} else "".join(kinds),
                   router="hunyuan" if hunyuan else {
                       "renorm": "mixtral", "sparsemixer": "sparsemixer"}.get(
                       spec.router_topk, "qwen"), layer_norm=phimoe,
                   norm_topk=spec.router_topk != "cast",
                   shared_expert=bool(shared) and not hunyuan,
                   shared_mlp=bool(shared) and hunyuan,
                   grouped=spec.experts_grouped)


def _llama_variant(spec: ModelSpec) -> Family | None:
    """A Llama variant's graph by its model type (graph/variants.py), from what _llama maps
    once the variant's own fields are set aside."""
    variant = variants.MAPPERS.get(spec.model_type)
    return variant(spec, _llama) if variant is not None else None


def _mla_family(spec: ModelSpec) -> mla.Mla | None:
    return _mla(spec) if spec.kv_lora_rank else None


def _mla(spec: ModelSpec) -> mla.Mla:
    """DeepSeek-V3 and MiniCPM3 (spec_from_hf's fields for them): MLA with or without a
    query latent, RMSNorm, RoPE on qk_rope_head_dim, gated SiLU MLPs; one attention_bias
    (q_a_proj, kv_a_proj_with_mqa, o_proj); DeepSeek-V3's experts from first_k_dense_replace
    on, with the fp32 sigmoid router renormalising its top-k (router_topk renorm:
    norm_topk_prob) and shared experts; DeepSeek-V3.2's and GLM-MoE-DSA's lightning indexer;
    LongCat-Flash's paired sublayers with its shortcut MoE. Other MLA types (DeepSeek-V2's
    complex RoPE, A.X K1's norm after the experts, LongCat-Flash's zero experts...) are
    refused."""
    from transformer_calc.plan import parse_pattern

    H, dn, dr, dv = spec.n_heads, spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
    minicpm = spec.model_type == "minicpm3"
    # DeepSeek-V3.2: a query latent always, an indexer in every layer (its RoPE's
    # concatenation is what rope_concat says of it)
    indexer = spec.index_heads > 0
    # LongCat-Flash: two sublayers a layer (n_layers counts them), the MoE beside the first
    # one's MLP and added after the second, no shared experts, no zero experts (identity
    # experts save by the routing)
    longcat = spec.model_type == "longcat_flash"
    X = spec.n_experts
    Fs = spec.n_shared_experts * spec.shared_ff  # moe_intermediate_size · n_shared_experts
    if not (spec.model_type in _MLAS and spec.norm == "rmsnorm" and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.dropout and spec.norm_position == "pre" and spec.qk_norm == "none"
            and not spec.fused_qkv and not spec.fused_gate_up
            and spec.rope_concat == indexer
            and (spec.model_type in _DSAS if indexer else spec.model_type not in _DSAS[1:])
            and (not indexer or (spec.q_lora_rank > 0 and spec.index_head_dim >= 1))
            and not spec.norm_fp32 and not spec.rope_fp32 and not spec.bias_v
            and spec.bias_q == spec.bias_k == spec.bias_o
            and not spec.bias_ffn_in and not spec.bias_ffn_out
            and spec.n_kv_heads in (None, H) and spec.head_dim == dn + dr
            and min(dn, dr, dv, spec.d_ff) >= 1 and dr % 2 == 0
            and (not X or longcat or (not minicpm and spec.router_fp32
                                      and spec.router_topk == "renorm" and Fs > 0))
            and longcat == spec.moe_beside_dense == spec.moe_shortcut
            and (not longcat or (X and spec.router_fp32 and not spec.n_shared_experts
                                 and spec.q_lora_rank > 0 and spec.n_layers % 2 == 0
                                 and spec.layer_ffn == "1E 1D *"))
            and spec.peft_router_linear == longcat
            and not _unread(spec, "mla")):
        raise TcalcError(f"{spec.name}: no op graph for this latent-attention layout yet (the "
                         "graph engine covers DeepSeek-V3, V3.2, GLM-MoE-DSA, LongCat-Flash and "
                         "MiniCPM3)")
    L = spec.n_layers // 2 if longcat else spec.n_layers
    kinds = ("E",) * L if longcat else \
        parse_pattern(spec.layer_ffn, "DEX", L, "layer_ffn") if spec.layer_ffn \
        else ("E" if X else "D",) * L
    if "X" in kinds or ("E" in kinds and not X):
        raise TcalcError(f"{spec.name}: this layer pattern has no op graph yet")
    pa = spec.attention_dropout if spec.attention_dropout is not None else spec.dropout
    # (Llama's Hkv and dh: not read, 1)
    family = mla.Mla(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=1, dh=1, F=spec.d_ff, L=L,
                     tied=spec.tie_embeddings, bias_q=spec.bias_q, bias_k=spec.bias_k,
                     bias_o=spec.bias_o, attention_dropout=pa,
                     q_latent=spec.q_lora_rank > 0, rq=max(spec.q_lora_rank, 1),
                     rkv=spec.kv_lora_rank, dn=dn, dr=dr, dv=dv,
                     interleave=not minicpm, minicpm=minicpm, indexer=indexer,
                     Hi=max(spec.index_heads, 1), di=max(spec.index_head_dim, 1),
                     longcat=longcat)
    if "E" not in kinds:
        return family
    return mla.MlaMoe(**vars(family), X=X, K=spec.top_k, Fe=spec.expert_ff, Fs=max(Fs, 1),
                      pattern="" if set(kinds) == {"E"} else "".join(kinds),
                      router="softmax" if longcat else "sigmoid", norm_topk=not longcat,
                      shared_expert=not longcat, grouped=spec.experts_grouped)

# the mappers family_of asks, in order (a MoE spec is the experts' family, not Llama's; an
# MLA spec, with experts or not, the MLA family's)
_MAPPERS: tuple[Callable[[ModelSpec], Family | None], ...] = (
    _gpt2, _gemma4_family, _gemma3n_family, _mla_family, _moe_family, _llama_variant, _llama,
    _bert, _gemma_family)


def symbols(family: Family, run: Run) -> dict[str, Dim]:
    """The symbols the graph is written in, with their values."""
    m = Builder(run, family.sizes())
    return dict(m.dims)
