"""Run a family's graph for one configuration, every layer traced (the reference the
compiled path, compile.py, is checked against), and read its costs: the storages autograd
holds when the forward is over (each once; under the run's recomputation policy, held.py),
the parameters it touched (a tied table once), and the forward's matmul FLOPs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

from transformer_calc.errors import TcalcError
from transformer_calc.graph import variants
from transformer_calc.graph.families import bert, cohere, gemma, gpt2, llama, moe, opt
from transformer_calc.graph.held import held
from transformer_calc.graph.modules import Builder, Run
from transformer_calc.graph.symbols import Dim, Poly
from transformer_calc.graph.trace import OpRecord, Saved
from transformer_calc.spec import ModelSpec

Family = (gpt2.GPT2 | llama.Llama | bert.Bert | moe.Moe | gemma.Gemma | cohere.Cohere
          | opt.OPT)

# each family's forward, by the class of its config (a subclass runs its base's forward)
_FORWARDS: dict[type, Callable[..., object]] = {
    gpt2.GPT2: gpt2.forward, llama.Llama: llama.forward, bert.Bert: bert.forward,
    moe.Moe: moe.forward, gemma.Gemma: gemma.forward, cohere.Cohere: cohere.forward,
    opt.OPT: opt.forward, opt.BioGpt: opt.biogpt_forward,
    opt.TrOcr: opt.trocr_forward}


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
# OPT (its biases all or none, as enable_bias sets them), BioGPT
_READS["trocr"] = _METADATA | _COMMON | {"arch", "position_offset", "norm_position",
                                         "final_norm", "embedding_norm", "loss_fp32",
                                         "softmax_fp32", "sdpa_path", "idle_cross_attention",
                                         "n_kv_heads", "d_head", "bias_q", "bias_k", "bias_v",
                                         "bias_o", "bias_ffn_in", "bias_ffn_out"}
_READS["biogpt"] = _METADATA | _COMMON | {"arch", "position_offset", "norm_position",
                                          "final_norm", "embed_proj_dim", "softmax_fp32",
                                          "n_kv_heads", "d_head", "bias_q", "bias_k", "bias_v",
                                          "bias_o", "bias_ffn_in", "bias_ffn_out"}
_READS["opt"] = _METADATA | _COMMON | {"arch", "position_offset", "norm_position", "final_norm",
                                       "embed_proj_dim", "softmax_fp32", "bias_q", "bias_k",
                                       "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out"}


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
                     "1-3 and VaultGemma, OPT, BioGPT, XGLM, TrOCR, and BERT, RoBERTa, "
                     "ELECTRA with their masked-LM heads)")


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


def _opt(spec: ModelSpec) -> opt.OPT | None:
    """OPTForCausalLM by its model type (spec_from_hf's _opt): LayerNorm, learned positions
    offset by 2, a ReLU MLP, the fp32 softmax, biases all on or all off, the final norm
    only in a pre-norm model; anything else keeps the rules."""
    biases = {spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
              spec.bias_ffn_out}
    pre = spec.norm_position == "pre"
    if not (spec.model_type == "opt" and spec.arch == "decoder" and spec.norm == "layernorm"
            and spec.position == "learned" and spec.position_offset == opt.POSITION_OFFSET
            and spec.ffn == "plain" and spec.activation == "relu" and spec.softmax_fp32
            and spec.norm_position in ("pre", "post") and (pre or not spec.final_norm)
            and len(biases) == 1 and spec.n_heads and spec.d_model % spec.n_heads == 0
            and spec.d_ff and not _unread(spec, "opt")):
        return None
    pa = spec.attention_dropout if spec.attention_dropout is not None else 0.0
    return opt.OPT(V=spec.vocab_size, P=spec.max_positions, E=spec.d_model, H=spec.n_heads,
                   F=spec.d_ff, L=spec.n_layers, Ee=spec.embed_proj_dim or spec.d_model,
                   tied=spec.tie_embeddings, bias=spec.bias_q, pre_norm=pre,
                   final_norm=spec.final_norm, dropout=spec.dropout, attention_dropout=pa)


def _biogpt(spec: ModelSpec) -> opt.BioGpt | None:
    """BioGptForCausalLM by its model type (spec_from_hf's Layout): pre-norm LayerNorm
    layers with biases, learned positions offset by 2, an erf-GELU MLP, the scores' own
    softmax dtype, one dropout probability for the hidden states."""
    biases = {spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
              spec.bias_ffn_out}
    if not (spec.model_type == "biogpt" and spec.arch == "decoder"
            and spec.norm == "layernorm" and spec.norm_position == "pre" and spec.final_norm
            and spec.position == "learned" and spec.position_offset == opt.POSITION_OFFSET
            and spec.ffn == "plain" and spec.activation == "gelu" and not spec.softmax_fp32
            and biases == {True} and spec.n_kv_heads in (None, spec.n_heads)
            and spec.d_head in (None, spec.head_dim) and not spec.embed_proj_dim
            and spec.n_heads and spec.d_model % spec.n_heads == 0 and spec.d_ff
            and not _unread(spec, "biogpt")):
        return None
    pa = spec.attention_dropout if spec.attention_dropout is not None else spec.dropout
    return opt.BioGpt(V=spec.vocab_size, P=spec.max_positions, E=spec.d_model,
                      H=spec.n_heads, F=spec.d_ff, L=spec.n_layers, Ee=spec.d_model,
                      tied=spec.tie_embeddings, dropout=spec.dropout, attention_dropout=pa)


def _xglm(spec: ModelSpec) -> opt.Xglm | None:
    """XGLMForCausalLM by its model type: BioGPT's layout with sinusoidal positions and its
    clamped eager scores (it has no SDPA path)."""
    if not (spec.model_type == "xglm" and spec.position == "sinusoidal"
            and spec.scores_clamped and not spec.sdpa_path):
        return None
    family = _biogpt(replace(spec, model_type="biogpt", position="learned",
                             position_offset=2, scores_clamped=False, sdpa_path=True))
    return opt.Xglm(**vars(family)) if family is not None else None


def _trocr(spec: ModelSpec) -> opt.TrOcr | None:
    """TrOCRForCausalLM by its model type (spec_from_hf's decoder-only Seq2Seq): learned
    positions offset by 2, layernorm_embedding, post-norm layers with biases, GELU, the
    loss in the logits' dtype, eager only; the cross-attention it builds is idle."""
    biases = {spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
              spec.bias_ffn_out}
    if not (spec.model_type == "trocr" and spec.arch == "decoder"
            and spec.norm == "layernorm" and spec.norm_position == "post"
            and not spec.final_norm and spec.embedding_norm and not spec.loss_fp32
            and spec.position == "learned" and spec.position_offset == opt.POSITION_OFFSET
            and spec.ffn == "plain" and spec.activation == "gelu" and not spec.softmax_fp32
            and not spec.sdpa_path and biases == {True}
            and spec.n_kv_heads in (None, spec.n_heads) and spec.d_head in (None, spec.head_dim)
            and spec.n_heads and spec.d_model % spec.n_heads == 0 and spec.d_ff
            and not _unread(spec, "trocr")):
        return None
    pa = spec.attention_dropout if spec.attention_dropout is not None else spec.dropout
    return opt.TrOcr(V=spec.vocab_size, P=spec.max_positions, E=spec.d_model,
                     H=spec.n_heads, F=spec.d_ff, L=spec.n_layers, Ee=spec.d_model,
                     tied=spec.tie_embeddings, dropout=spec.dropout, attention_dropout=pa)


# the mappers family_of asks, in order (a MoE spec is the experts' family, not Llama's)
_MAPPERS: tuple[Callable[[ModelSpec], Family | None], ...] = (
    _gpt2, _opt, _biogpt, _xglm, _trocr, _moe_family, _llama_variant, _llama, _bert, _gemma_family)


def symbols(family: Family, run: Run) -> dict[str, Dim]:
    """The symbols the graph is written in, with their values."""
    m = Builder(run, family.sizes())
    return dict(m.dims)
