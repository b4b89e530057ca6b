"""The layer plan: how a model is built, described once.

A model is a sequence of stacks (encoder, decoder); a stack is a short list of layer groups,
each ``count × block``; a block names its mixer (an attention variant), its cross-attention
(encoder-decoder decoders), its FFN (dense or a mixture of experts, with its own sizes) and its
norms. Parameters, FLOPs, saved activations, the KV cache and ``explain`` all walk this plan:
a cost that needs "how many norms does this block have" asks the block.

Layers that differ (sliding then full attention, dense then MoE FFNs) are written as two
per-layer patterns on the spec (``layer_attention``, ``layer_ffn``), parsed once here in the
manner of Megatron-LM's hybrid layer pattern (megatron/core/ssm/mamba_hybrid_layer_allocation.py)
and transformers' ``layer_types``. Identical layers share one group, so every cost grows with
the number of distinct blocks, not with the number of layers.

The parts are NamedTuples: a plan is built per spec, often thousands of times a second in a
sweep, and a tuple is 3-4x cheaper to make than a frozen dataclass (make bench).
"""


import math
import re
from collections import Counter
from functools import lru_cache
from typing import NamedTuple

from transformer_calc.errors import SpecError
from transformer_calc.spec import ATTENTION_LAYER_KINDS, FFN_LAYER_KINDS, ModelSpec


class Attention(NamedTuple):
    """One attention sublayer. MHA covers MQA and GQA (``kv_heads`` < ``heads``); MLA is
    DeepSeek's multi-head latent attention (``kv_lora_rank`` > 0)."""

    heads: int
    kv_heads: int
    d_head: int  # query/key width per head (MLA: d_nope + d_rope)
    d_v: int  # value width per head
    bias_q: bool
    bias_k: bool
    bias_v: bool
    bias_o: bool
    qk_norm: str = "none"  # none | head | width
    sinks: bool = False
    kind: str = "full"  # full | sliding | chunked | local
    window: int = 0  # keys a sliding layer sees, the chunk size or LongT5's block; 0: all
    rope: bool = True
    cross: bool = False
    fused_qkv: bool = False
    q_lora_rank: int = 0  # MLA
    kv_lora_rank: int = 0  # MLA
    d_rope: int = 0  # MLA: the RoPE part of d_head (its key part is shared by the heads)
    gate: str = "none"  # output gate from the block input: none | head | width
    gate_bias: str = "none"
    mechanism: str = "softmax"  # softmax | linformer | performer | linear
    proj_k: int = 0  # Linformer: the projected length k
    proj_n: int = 0  # Linformer: the length projected from (max_positions)
    sharing: str = "headwise"  # Linformer's E/F sharing
    features: int = 0  # Performer: random features m
    conv: int = 0  # Primer: depthwise convolution width after Q, K, V
    conv_bias: bool = False
    # DeepSeek Sparse Attention (DeepSeek-V3.2): a lightning indexer of index_heads heads of
    # index_dim scores every key; the attention then meets the index_topk best
    index_heads: int = 0
    index_dim: int = 0
    index_topk: int = 0
    sub_norm: bool = False  # BitNet: a norm over the output before o_proj (attn_sub_norm)
    differential: bool = False  # DiffLlama: two maps, λ from 4 · d_head parameters
    kv_shared: bool = False  # Gemma 4: K/V reused from an earlier layer (no K/V projections)
    v_is_k: bool = False  # Gemma 4's attention_k_eq_v: no value projection
    v_norm: bool = False  # Gemma 4: an RMSNorm without weight over each value head
    # LongT5's transient-global attention: tokens per global block (each query also meets
    # T // global_block summaries); 0: none
    global_block: int = 0
    # DeepSeek-V4: source tokens per compressed key/value entry beside the sliding window (0:
    # none); CSA's overlapping windows and indexer (heads, width, entries picked per query)
    compress: int = 0
    csa_heads: int = 0
    csa_dim: int = 0
    csa_topk: int = 0
    o_groups: int = 0  # DeepSeek-V4: grouped low-rank output projection (o_a, o_b)
    o_rank: int = 0
    # JetMoE's mixture of attention heads: query/output projection pairs of n_kv_heads ·
    # d_head, heads / kv_heads of them routed per token (0: one dense q and o)
    experts: int = 0

    def gate_width(self, which: str) -> int:
        """Outputs of the gate (or its bias): one per head, or one per output channel."""
        return {"none": 0, "head": self.heads, "width": self.heads * self.d_v}[which]

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    def keys(self, T: int) -> int:
        """Keys one query meets in a sequence of T (dense convention: causality not
        subtracted; a sliding window, a chunk or DSA's top-k bounds it; LongT5's local
        attention computes three blocks of keys per query, padding included)."""
        if self.index_topk:
            return min(T, self.index_topk)
        if self.compress:  # DeepSeek-V4: the window, then the compressed entries it meets
            return min(T, self.window) + self.entries(T)
        if self.kind == "local":
            return 3 * self.window + self.globals(T)
        return min(T, self.window) if self.window else T

    def entries(self, T: int) -> int:
        """DeepSeek-V4: compressed entries a query meets after T tokens: one per whole
        window of ``compress`` tokens (HCA all of them, CSA the indexer's top-k)."""
        n = T // self.compress if self.compress else 0
        return min(n, self.csa_topk) if self.csa_heads else n

    def globals(self, T: int) -> int:
        """LongT5's global tokens: one per whole global block of the sequence."""
        return T // self.global_block if self.global_block else 0

    def queries(self, T: int) -> int:
        """Query rows the attention computes for T tokens: T, or LongT5's local attention's
        sequence padded to whole blocks (_split_into_blocks pads Q, K and V with zeros)."""
        return padded_length(T, self.window) if self.kind == "local" else T

    def kv_per_token(self, tp: int = 1) -> int:
        """Cached values per token of context for one layer, on one of ``tp`` tensor-parallel
        ranks. MHA/GQA: K and V of each K/V head (Shazeer 2019; Ainslie et al. 2023); under
        tensor parallelism each rank caches its share of the K/V heads, and once tp exceeds
        them one whole head, replicated (vLLM: max(1, n_kv_heads // tp); Megatron-LM alike).
        MLA: the compressed latent and the shared RoPE key (DeepSeek-V2 paper, Sec. 2.1.2:
        (d_c + d_h^R) per token per layer), as serving engines (vLLM, SGLang) keep it, whole
        on every rank (the latent has no heads to split); transformers' eager cache keeps the
        decompressed K and V."""
        if self.mla:
            # DSA adds the indexer's key (DeepseekV32Indexer: update_indexer caches k)
            return self.kv_lora_rank + self.d_rope + self.index_dim
        if self.kv_shared:  # Gemma 4: reads an earlier layer's keys, writes no cache
            return 0
        return max(self.kv_heads // tp, 1) * (self.d_head + self.d_v)

    def v4_cache(self, T: int) -> int:
        """DeepSeek-V4: values a layer's cache holds after T tokens, as transformers' V4
        cache layers keep them (DeepseekV4HCACache, DeepseekV4CSACache): the window's one
        K=V head (its sliding-only layers' DynamicSlidingWindowLayer stores it as keys and
        again as values); the compressed entries so far; the tokens since the last whole
        window, whose compressor inputs (kv and gate) wait in a buffer; in a Q layer, the
        same for the indexer at its own width, and the last window's first halves (kv and
        gate) that the next window overlaps."""
        dh, m = self.d_head, self.compress
        out = min(T, self.window - 1) * dh
        if not m:  # a plain sliding layer's cache keeps the one head twice, as K and as V
            return 2 * out
        n, rest = divmod(T, m)
        if self.csa_heads:
            ic = self.csa_dim
            return out + n * (dh + ic) + 2 * rest * (2 * dh + 2 * ic) + (
                2 * m * (dh + ic) if n else 0)
        return out + n * dh + 2 * rest * dh

    def cached_tokens(self, T: int) -> int:
        """Tokens of context a layer keeps in its cache after T tokens. A sliding layer of
        window w keeps the w - 1 latest (the next query attends to them and to itself), as
        transformers' DynamicSlidingWindowLayer does; a chunked layer the same with its chunk
        (transformers 5.23's cache for Llama 4; measured: tools/reference_kv_cache.py); every
        other layer all T."""
        return min(T, self.window - 1) if self.window else T


def padded_length(T: int, block: int) -> int:
    """T rounded up to whole blocks (LongT5's _pad_to_multiple); T itself without blocks."""
    return -(-T // block) * block if block else T


def local_symbols(spec: ModelSpec, T: int) -> dict[str, int]:
    """The values of the symbols in FLOPs and memory formulas that depend on T: LongT5's
    local attention's, the rows of DeBERTa v1's relative table a sequence meets."""
    b, g = spec.encoder_local_block, spec.encoder_global_block
    return {"local_block": b, "T_blocks": padded_length(T, b),
            "global_tokens": T // g if g else 0, "rel_rows": spec.rel_rows(T)}


class FFN(NamedTuple):
    """The position-wise sublayer: dense, a mixture of experts, or attention over parameters."""

    kind: str  # plain | gated | param_attention
    d_ff: int  # the dense FFN's inner size, or one routed expert's
    ff_sym: str  # the symbol formulas show for d_ff ("d_ff", "d_ff_expert")
    activation: str
    bias_in: bool
    bias_out: bool
    experts: int = 0  # routed experts; 0: dense
    top_k: int = 0
    shared: int = 0  # always-active experts
    d_shared: int = 0
    shared_sym: str = ""
    router_bias: bool = False
    shared_gate: bool = False
    pattn: tuple[int, int, int, int] = (0, 0, 0, 0)  # h_p, n_p, d_pk, d_pv
    sub_norm: bool = False  # BitNet: a norm over the inner width before down (ffn_sub_norm)
    beside: int = 0  # Gemma 4: a dense FFN of this width runs beside the experts
    shortcut: bool = False  # LongCat-Flash: ... on the same normed input, nothing of their own
    zero: int = 0  # LongCat-Flash: zero-computation experts the router also chooses among
    sparse: bool = False  # Gemma 3n: the gate keeps its values above mean + z · std only
    out_bias: bool = False  # one d_model bias after the experts are combined (JetMoE)

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def matrices(self) -> int:
        """Weight matrices of one FFN (or one expert): in and out, and a gate when gated."""
        return 3 if self.kind == "gated" else 2

    @property
    def experts_per_token(self) -> int:
        """FFNs of width d_ff one token runs through: 1 dense; top_k routed (the shared ones,
        of their own width, apart)."""
        return self.top_k if self.experts else 1


class Mixer(NamedTuple):
    """A recurrent mixer: a layer whose state does not grow with the context. Sizes in the
    Mamba-2 paper's terms (Dao & Gu 2024): x has ``inner`` channels in ``heads`` heads; B and C
    (Gated DeltaNet: the keys and queries) have ``groups`` heads of ``state`` each."""

    kind: str  # mamba | mamba2 | gated_deltanet | short_conv | lightning | kda
    inner: int  # d_inner (short_conv: d_model)
    state: int  # N (gated_deltanet: key head size)
    heads: int  # mamba2 heads; gated_deltanet value heads (mamba: 0)
    groups: int  # mamba2 n_groups; gated_deltanet key heads (mamba: 0)
    conv: int  # causal depthwise convolution kernel
    dt_rank: int  # mamba
    conv_bias: bool
    bias: bool  # input and output projections
    norm: bool  # mamba2: gated RMSNorm over d_inner
    dt_norms: bool  # mamba: RMSNorms on dt, B, C (Jamba)
    chunk: int = 256  # mamba2 / gated_deltanet: chunk length of the chunked scan

    @property
    def head_dim(self) -> int:
        return self.inner // self.heads if self.heads else 0

    @property
    def conv_channels(self) -> int:
        """Channels the causal convolution runs over (and keeps K of in its cache)."""
        if self.kind == "mamba2":  # x, B, C (Mamba2Mixer.conv_dim)
            return self.inner + 2 * self.groups * self.state
        if self.kind in ("gated_deltanet", "kda"):  # q, k, v (Qwen3NextGatedDeltaNet.conv_dim)
            return 2 * self.groups * self.state + self.inner
        if self.kind == "lightning":  # no convolution
            return 0
        return self.inner

    def state_per_sequence(self) -> tuple[int, int]:
        """(convolution state, recurrent state) values one layer keeps per sequence, whatever
        the context: the last ``conv`` inputs of every convolution channel (transformers'
        caches keep the whole kernel window), and the SSM state: d_inner × N (mamba), heads ×
        head size × N (mamba2), value heads × key size × value size (gated_deltanet)."""
        conv = self.conv_channels * self.conv
        if self.kind == "mamba":
            return conv, self.inner * self.state
        if self.kind == "mamba2":
            return conv, self.heads * self.head_dim * self.state
        if self.kind in ("gated_deltanet", "kda"):
            return conv, self.heads * self.state * self.head_dim
        if self.kind == "lightning":  # the K^T·V state of every head: head size × head size
            return 0, self.heads * self.head_dim * self.head_dim
        return conv, 0


class Block(NamedTuple):
    attn: Attention | None  # None: a recurrent mixer (``mixer``) or no mixer at all
    cross: Attention | None
    ffn: FFN | None  # None: no FFN (Mamba, Nemotron-H's mixer layers)
    norm: str  # the kind of every d_model-wide norm: layernorm, layernorm_nobias, rmsnorm
    norms: tuple[str, ...]  # their names, e.g. ("attn.norm", "ffn.norm")
    norm_note: str
    parallel: bool  # attention and FFN read the same input (GPT-J, NeoX, Falcon, Phi)
    ffn_reads_attn_input: bool  # parallel with one shared norm: the FFN reads that norm's output
    mixer: Mixer | None = None
    # an encoder-attention sublayer (and its norm) that is built but never run: a decoder
    # alone of an encoder-decoder family (BartForCausalLM, WhisperForCausalLM) skips it
    # without encoder states. Parameters only: FLOPs, activations and the cache walk ``cross``
    idle_cross: Attention | None = None
    # Gemma 4: the width of the layer's own embedding, gated, projected back and normed after
    # the FFN (per_layer_input_gate, per_layer_projection, post_per_layer_input_norm); 0: none
    ple: int = 0
    altup: int = 0  # Gemma 3n: AltUp's streams around the layer (predict, correct); 0: none
    hc: int = 0  # DeepSeek-V4: hyper-connection streams around each sublayer; 0: none
    laurel: int = 0  # Gemma 3n: LAuReL's rank beside the attention; 0: none


class Group(NamedTuple):
    name: str  # id used in item names and as the item's stack: "decoder" or "decoder.moe"
    count: int  # type: ignore[assignment]  # layers of this block; shadows tuple.count
    block: Block
    kinds: str  # the pattern letters of this group, e.g. "SE" (sliding, experts)
    # sets of weights its layers hold, when they share them (ALBERT: layer_groups); 0: one per
    # layer
    weight_sets: int = 0

    @property
    def weights(self) -> int:
        """Layers' worth of parameters the group holds."""
        return self.weight_sets or self.count


class Stack(NamedTuple):
    name: str  # encoder | decoder
    layers: int
    groups: tuple[Group, ...]
    final_norm: bool
    # the group holding the last layer, when that layer alone has an attention output bias
    # (GPT-NeoX-Japanese); "": none
    last_o_bias: str = ""
    # the group holding the first layer, when that layer has no attention norm (ModernBERT's
    # nn.Identity); "": every layer has one
    bare_first: str = ""
    # layers built but skipped by a text-only forward (Mllama's cross-attention layers): the
    # parameters walk them, nothing else does
    idle: Group | None = None


class Plan(NamedTuple):
    stacks: tuple[Stack, ...]
    groups: tuple[Group, ...]  # every stack's, in order (read by every walk: kept, not rebuilt)

    @classmethod
    def of(cls, stacks: tuple[Stack, ...]) -> "Plan":
        return cls(stacks, tuple(g for s in stacks for g in s.groups))


# -- per-layer patterns ----------------------------------------------------------------------

_RUN = re.compile(r"\s*(\d*)\s*([A-Za-z])")


@lru_cache(maxsize=256)
def parse_pattern(text: str, letters: str, n_layers: int, key: str) -> tuple[str, ...]:
    """'3D 58E' -> ('D', 'D', 'D', 'E', ...): one letter per layer. A trailing '*' repeats the
    runs until n_layers are filled (the last repetition may be cut short, as in Gemma 3's
    5-sliding-1-full layout over 26 layers). Otherwise the runs must add up to n_layers."""
    body = text.strip()
    cyclic = body.endswith("*")
    body = body.removesuffix("*")
    expected = (f"runs of {'/'.join(letters)} like '3{letters[0]} 1{letters[-1]}' "
                f"covering {n_layers} layers, or a repeating unit ending in '*'")
    out: list[str] = []
    pos = 0
    while pos < len(body):
        m = _RUN.match(body, pos)
        if not m or m.group(2).upper() not in letters:
            raise SpecError(key, expected, text)
        count = int(m.group(1)) if m.group(1) else 1
        if count < 1 or count > n_layers:
            raise SpecError(key, f"run lengths from 1 to {n_layers} (the layers)", text)
        out += [m.group(2).upper()] * count
        pos = m.end()
        while pos < len(body) and body[pos] in " ,":
            pos += 1
    if not out:
        raise SpecError(key, expected, text)
    if cyclic:
        out = (out * (n_layers // len(out) + 1))[:n_layers]
    elif len(out) != n_layers:
        raise SpecError(key, f"runs covering exactly {n_layers} layers (found {len(out)}; end "
                        "with '*' to repeat the pattern)", text)
    return tuple(out)


def _layer_kinds(spec: ModelSpec, n_layers: int) -> Counter[str]:
    """How many layers of each (attention letter, FFN letter) pair the stack has; a third
    letter "r" marks the last kv_shared_layers layers, which reuse earlier keys (Gemma 4)."""
    if spec.kv_shared_layers or spec.sparse_ffn_layers:
        return Counter(layer_kinds_in_order(spec, n_layers))
    return _pair_counts(*_patterns(spec, n_layers), *default_kinds(spec), n_layers)


def _patterns(spec: ModelSpec, n_layers: int
              ) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    attn = parse_pattern(spec.layer_attention, "".join(ATTENTION_LAYER_KINDS), n_layers,
                         "layer_attention") if spec.layer_attention else None
    ffn = parse_pattern(spec.layer_ffn, "".join(FFN_LAYER_KINDS), n_layers,
                        "layer_ffn") if spec.layer_ffn else None
    return attn, ffn


def layer_kinds_in_order(spec: ModelSpec, n_layers: int) -> tuple[str, ...]:
    """The kinds of each layer of a stack of ``n_layers``, first to last, as ``Group.kinds``
    spells them (the plan keeps counts only: read where the order matters, LoRA's layers
    before the first adapter). "s": the first sparse_ffn_layers layers' FFN gate is
    sparsified (Gemma 3n)."""
    attn, ffn = _patterns(spec, n_layers)
    a0, f0 = default_kinds(spec)
    first, sparse = n_layers - spec.kv_shared_layers, spec.sparse_ffn_layers
    return tuple((attn[i] if attn else a0) + (ffn[i] if ffn else f0)
                 + ("r" if spec.kv_shared_layers and i >= first else "")
                 + ("s" if i < sparse else "")
                 for i in range(n_layers))


def default_kinds(spec: ModelSpec) -> tuple[str, str]:
    """The letters of a layer no pattern describes: the recurrent mixer if there is one, else
    sliding or full attention; experts, a dense FFN, or none when d_ff is 0."""
    a0 = "M" if spec.mixer != "none" else "S" if spec.sliding_window else "F"
    f0 = "E" if spec.n_experts else "D" if spec.d_ff else "X"
    return a0, f0


@lru_cache(maxsize=256)
def _pair_counts(attn: tuple[str, ...] | None, ffn: tuple[str, ...] | None, a0: str, f0: str,
                 n: int) -> Counter[str]:
    return Counter((attn[i] if attn else a0) + (ffn[i] if ffn else f0) for i in range(n))


def check_patterns(spec: ModelSpec) -> None:
    """Validate the per-layer patterns (or the default kinds) against the rest of the spec
    (called by ModelSpec when a pattern, a mixer, or a zero n_heads or d_ff is set)."""
    if spec.arch == "encoder-decoder":
        kinds = "F" + default_kinds(spec)[1]
        if spec.layer_ffn:
            # Switch Transformers, NLLB-MoE: experts every few layers, one pattern read over
            # each stack's own layers (a repeating unit, '1D 1E*', fits both)
            for _, n in spec.stacks:
                letters = parse_pattern(spec.layer_ffn, "".join(FFN_LAYER_KINDS), n,
                                        "layer_ffn")
                if set(letters) - set("DE"):
                    raise SpecError("layer_ffn", "D and E layers only for arch "
                                    "encoder-decoder", spec.layer_ffn)
                kinds += "".join(sorted(set(letters)))
        if spec.layer_attention:
            # T5Gemma: sliding and full layers in both stacks, one pattern for the two
            for _, n in spec.stacks:
                letters = parse_pattern(spec.layer_attention, "".join(ATTENTION_LAYER_KINDS),
                                        n, "layer_attention")
                if set(letters) - set("FS"):
                    raise SpecError("layer_attention", "F and S layers only for arch "
                                    "encoder-decoder", spec.layer_attention)
                kinds += "S" if "S" in letters else ""
    else:
        kinds = "".join(_layer_kinds(spec, spec.n_layers))
    needs = (("S", "sliding_window", "S (sliding) layers need sliding_window >= 1"),
             ("Q", "compress_csa", "Q (compressed sparse) layers need compress_csa >= 1"),
             ("H", "compress_hca", "H (heavily compressed) layers need compress_hca >= 1"),
             ("Q", "sliding_window", "Q layers attend a sliding window: sliding_window >= 1"),
             ("H", "sliding_window", "H layers attend a sliding window: sliding_window >= 1"),
             ("Q", "csa_index_heads", "Q layers' indexer needs csa_index_heads >= 1"),
             ("C", "attention_chunk", "C (chunked) layers need attention_chunk >= 1"),
             ("E", "n_experts", "E (expert) layers need n_experts >= 1"),
             ("M", "mixer", "M (recurrent mixer) layers need a mixer"),
             ("P", "mixer", "P (parallel attention and mixer) layers need a mixer"),
             ("D", "d_ff", "D (dense FFN) layers need d_ff >= 1"))
    for letter, key, why in needs:
        if letter in kinds and getattr(spec, key) in (0, "none"):
            raise SpecError(key, why, getattr(spec, key))
    if not spec.n_heads and any(a in kinds for a in "FSCNP"):
        raise SpecError("n_heads", "an integer >= 1 (the model has attention layers)", 0)
    if "E" in kinds and not spec.expert_ff:
        raise SpecError("d_ff_expert", "an integer >= 1 (E layers; or set d_ff)", 0)


# -- building the plan -----------------------------------------------------------------------

_ATTN_TAGS = {"F": "full", "S": "sliding", "C": "chunked", "N": "nope", "P": "parallel",
              "Q": "csa", "H": "hca", "X": ""}
_FFN_TAGS = {"D": "dense", "E": "moe", "X": ""}
_MIXER_TAGS = {"mamba": "mamba", "mamba2": "mamba", "gated_deltanet": "linear", "kda": "linear",
               "short_conv": "conv", "lightning": "linear", "none": "recurrent"}


def _group_name(spec: ModelSpec, stack: str, kinds: str, vary_a: bool, vary_f: bool) -> str:
    """'decoder' when every layer is alike; else the parts that differ: 'decoder.moe',
    'decoder.sliding', 'decoder.mamba.dense'. A layer without one of the two sublayers is named
    by the other alone (Nemotron-H: decoder.mamba, decoder.full, decoder.dense, decoder.moe)."""
    a = _MIXER_TAGS[spec.mixer] if kinds[0] == "M" else _ATTN_TAGS[kinds[0]]
    f = _FFN_TAGS[kinds[1]]
    if kinds[0] == "X" or kinds[1] == "X":
        tags = [a or f] if vary_a or vary_f else []
    else:
        tags = ([a] if vary_a else []) + ([f] if vary_f else [])
    if "r" in kinds[2:]:  # Gemma 4: reuses an earlier layer's keys and values
        tags.append("kv_shared")
    if "s" in kinds[2:]:  # Gemma 3n: a sparsified FFN gate
        tags.append("sparse")
    return ".".join([stack, *tags])


def plan_of(spec: ModelSpec) -> Plan:
    """The spec's layer plan, built once per spec (specs are immutable)."""
    p = spec._plan
    if p is None:
        p = _build(spec)
        object.__setattr__(spec, "_plan", p)
    return p  # type: ignore[no-any-return]


def _build(spec: ModelSpec) -> Plan:
    plan = _build_running(spec)
    if spec.idle_cross_layers:
        # MllamaCrossAttentionDecoderLayer: input_layernorm, cross_attn (q_norm, k_norm),
        # post_attention_layernorm, mlp; its two tanh gates are counted by the parameters
        cross = _attention(spec, "F", cross=True)._replace(qk_norm="head")
        block = Block(attn=None, cross=cross, ffn=_ffn(spec, "D"), norm=spec.norm,
                      norms=("cross.norm", "ffn.norm"), norm_note="pre-norm",
                      parallel=False, ffn_reads_attn_input=False)
        last = plan.stacks[-1]._replace(idle=Group(f"{spec.stacks[-1][0]}.idle",
                                                   spec.idle_cross_layers, block, "XD"))
        plan = Plan.of(plan.stacks[:-1] + (last,))
    return plan


def _build_running(spec: ModelSpec) -> Plan:
    enc_dec = spec.arch == "encoder-decoder"
    if (enc_dec and not spec.layer_attention and not spec.layer_ffn) or not (
            spec.layer_attention or spec.layer_ffn or spec.kv_shared_layers
            or spec.sparse_ffn_layers):
        # every layer of a stack alike (the common case): one group each, no pattern parsing
        kinds = "F" + default_kinds(spec)[1] if enc_dec else "".join(default_kinds(spec))
        # LongT5: block-local self-attention in the encoder ("L"), dense in the decoder
        local = "LD" if spec.encoder_local_block else kinds
        return Plan.of(tuple(
            Stack(name, n, (Group(name, n, _block(spec, local if name == "encoder" else kinds,
                                                  name == "decoder" and enc_dec),
                                  local if name == "encoder" else kinds, spec.layer_groups),),
                  spec.final_norm, name if spec.last_layer_o_bias else "",
                  name if not spec.first_attn_norm else "")
            for name, n in spec.stacks))
    stacks = []
    for name, n in spec.stacks:
        counts = _layer_kinds(spec, n)
        vary_a = len({k[0] for k in counts}) > 1
        vary_f = len({k[1] for k in counts}) > 1
        groups = []
        for kinds, count in counts.items():
            groups.append(Group(_group_name(spec, name, kinds, vary_a, vary_f), count,
                                _block(spec, kinds, enc_dec and name == "decoder",
                                       enc_dec and name == "encoder"), kinds))
        last = ""
        if spec.last_layer_o_bias:  # the group of the last layer's kinds
            a0, f0 = default_kinds(spec)
            attn = parse_pattern(spec.layer_attention, "".join(ATTENTION_LAYER_KINDS), n,
                                 "layer_attention")[-1] if spec.layer_attention else a0
            ffn = parse_pattern(spec.layer_ffn, "".join(FFN_LAYER_KINDS), n,
                                "layer_ffn")[-1] if spec.layer_ffn else f0
            last = next(g.name for g in groups if g.kinds == attn + ffn)
        first = ""
        if not spec.first_attn_norm:  # the group of the first layer's kinds
            a0, f0 = default_kinds(spec)
            attn = parse_pattern(spec.layer_attention, "".join(ATTENTION_LAYER_KINDS), n,
                                 "layer_attention")[0] if spec.layer_attention else a0
            ffn = parse_pattern(spec.layer_ffn, "".join(FFN_LAYER_KINDS), n,
                                "layer_ffn")[0] if spec.layer_ffn else f0
            first = next(g.name for g in groups if g.kinds == attn + ffn)
        stacks.append(Stack(name, n, tuple(groups), spec.final_norm, last, first))
    return Plan.of(tuple(stacks))


def _attention(spec: ModelSpec, letter: str, cross: bool = False,
               shared: bool = False, bidirectional: bool = False) -> Attention:
    # positional, in Attention's field order (a plan is built per spec: make bench)
    # an encoder-decoder's encoder slides both ways: a query meets the keys within
    # sliding_window on either side, 2 · sliding_window + 1 (transformers' bidirectional
    # sliding mask, |q − k| <= sliding_window: masking_utils, T5Gemma)
    kind, window = (("sliding", 2 * spec.sliding_window + 1 if bidirectional
                     else spec.sliding_window) if letter in "SQH" else
                    ("chunked", spec.attention_chunk) if letter == "C" else
                    ("local", spec.encoder_local_block) if letter == "L" else ("full", 0))
    rope = spec.position == "rope" and letter != "N"
    if cross:
        return Attention(spec.n_heads, spec.kv_heads, spec.head_dim, spec.head_dim,
                         spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, "none", False,
                         kind, window, rope, True, spec.fused_qkv)
    if spec.kv_lora_rank:  # MLA
        dn, dr = spec.qk_nope_head_dim, spec.qk_rope_head_dim
        return Attention(spec.n_heads, spec.n_heads, dn + dr, spec.v_head_dim, spec.bias_q,
                         spec.bias_k, spec.bias_v, spec.bias_o, spec.qk_norm,
                         spec.attention_sinks, kind, window, rope, False, spec.fused_qkv,
                         spec.q_lora_rank, spec.kv_lora_rank, dr, spec.attn_gate,
                         spec.attn_gate_bias, index_heads=spec.index_heads,
                         index_dim=spec.index_head_dim, index_topk=spec.index_topk)
    dh, kv = spec.head_dim, spec.kv_heads
    v_is_k = False
    if letter in "FN" and (spec.global_head_dim or spec.global_kv_heads or spec.global_k_eq_v):
        # Gemma 4: the full layers' own head width and K/V heads, values from the keys
        dh = spec.global_head_dim or dh
        kv = spec.global_kv_heads or kv
        v_is_k = spec.global_k_eq_v
    mech = spec.attention_mechanism
    features = spec.performer_features or (int(dh * math.log(dh)) if dh > 1 else 1)
    # MiMo-V2-Flash: value heads narrower than the query/key heads; sinks in sliding layers
    sinks = spec.attention_sinks and (letter == "S" or not spec.sinks_sliding_only)
    # Llama 4's weightless L2 norm runs in its RoPE layers only (Llama4TextAttention)
    qk_norm = "none" if spec.qk_norm == "l2" and not rope else spec.qk_norm
    if spec.o_groups:
        # DeepSeek-V4: one head read as both K and V (kv_proj), a low-rank query, a grouped
        # low-rank output, sinks everywhere; Q and H layers add compressed entries
        csa = letter == "Q"
        return Attention(spec.n_heads, 1, dh, dh, False, False, False, False, "none", True,
                         kind, window, rope, False, False, spec.q_lora_rank, v_is_k=True,
                         compress=spec.compress_csa if csa else spec.compress_hca
                         if letter == "H" else 0,
                         csa_heads=spec.csa_index_heads if csa else 0,
                         csa_dim=spec.csa_index_dim if csa else 0,
                         csa_topk=spec.csa_index_topk if csa else 0,
                         o_groups=spec.o_groups, o_rank=spec.o_lora_rank)
    return Attention(spec.n_heads, kv, dh, spec.v_head_dim or dh, spec.bias_q, spec.bias_k,
                     spec.bias_v, spec.bias_o, qk_norm, sinks, kind,
                     window, rope, False, spec.fused_qkv, 0, 0, 0, spec.attn_gate,
                     spec.attn_gate_bias, mech, spec.linformer_k if mech == "linformer" else 0,
                     spec.max_positions if mech == "linformer" else 0,
                     spec.linformer_sharing, features if mech == "performer" else 0,
                     spec.qkv_conv, spec.qkv_conv_bias, sub_norm=spec.sub_norms,
                     differential=spec.differential, kv_shared=shared, v_is_k=v_is_k,
                     v_norm=spec.value_norm,
                     global_block=spec.encoder_global_block if letter == "L" else 0,
                     experts=spec.n_experts if spec.attn_experts else 0)


def _ffn(spec: ModelSpec, letter: str, shared: bool = False) -> FFN:
    # positional, in FFN's field order (a plan is built per spec: make bench)
    pattn = (spec.pattn_heads, spec.pattn_n, spec.pattn_d_key, spec.pattn_d_value) \
        if spec.ffn == "param_attention" else (0, 0, 0, 0)
    wide = 2 if shared and spec.kv_shared_wide_ffn else 1  # Gemma 4's use_double_wide_mlp
    if letter == "D":
        return FFN(spec.ffn, wide * spec.d_ff, "2 · d_ff" if wide > 1 else "d_ff",
                   spec.activation, spec.bias_ffn_in,
                   spec.bias_ffn_out, 0, 0, 0, 0, "", False, False, pattn, spec.sub_norms)
    ff_sym = "d_ff_expert" if spec.d_ff_expert is not None else "d_ff"
    return FFN(spec.ffn, spec.expert_ff, ff_sym, spec.activation, spec.bias_ffn_in,
               spec.bias_ffn_out, spec.n_experts, spec.top_k, spec.n_shared_experts,
               spec.shared_ff, "d_ff_shared" if spec.d_ff_shared is not None else ff_sym,
               spec.router_bias, spec.shared_expert_gate, pattn,
               beside=wide * spec.d_ff if spec.moe_beside_dense else 0,
               shortcut=spec.moe_shortcut, zero=spec.zero_experts,
               out_bias=spec.moe_output_bias)


def _mixer(spec: ModelSpec) -> Mixer:
    inner = spec.d_model if spec.mixer == "short_conv" else spec.ssm_inner
    return Mixer(spec.mixer, inner, spec.ssm_state, spec.ssm_heads, spec.ssm_groups,
                 spec.ssm_conv, spec.ssm_dt_rank, spec.ssm_conv_bias, spec.ssm_bias,
                 spec.ssm_norm, spec.ssm_dt_norms, spec.ssm_chunk)


def _block(spec: ModelSpec, kinds: str, cross: bool, bidirectional: bool = False) -> Block:
    block = _block_parts(spec, kinds, cross, bidirectional)
    if spec.altup_inputs or spec.laurel_rank:  # Gemma 3n
        block = block._replace(altup=spec.altup_inputs, laurel=spec.laurel_rank)
    if spec.hc_streams:  # DeepSeek-V4
        block = block._replace(hc=spec.hc_streams)
    if "s" in kinds[2:] and block.ffn is not None:
        block = block._replace(ffn=block.ffn._replace(sparse=True))
    return block._replace(ple=spec.per_layer_input) if spec.per_layer_input else block


def _block_parts(spec: ModelSpec, kinds: str, cross: bool, bidirectional: bool) -> Block:
    a, f = kinds[0], kinds[1]
    kv_shared = "r" in kinds[2:]  # Gemma 4: reuses an earlier layer's keys and values
    if a == "P":
        # Falcon-H1: attention and the recurrent mixer read the same normed input, their
        # outputs summed; then the FFN
        norms_p: tuple[str, ...] = ("attn.norm", "ffn.norm")[:2 if f != "X" else 1]
        return Block(attn=_attention(spec, "F"), cross=None,
                     ffn=_ffn(spec, f) if f != "X" else None, norm=spec.norm, norms=norms_p,
                     norm_note="pre-norm, shared by attention and the mixer", parallel=False,
                     ffn_reads_attn_input=False, mixer=_mixer(spec))
    if "X" in kinds or a == "M":
        # a layer with a recurrent mixer, or with one sublayer only: a pre-norm per sublayer
        first = "mixer" if a == "M" else "attn"
        norms: tuple[str, ...] = tuple(n for n, on in ((f"{first}.norm", a != "X"),
                                                       ("ffn.norm", f != "X")) if on)
        if spec.sandwich_norm:
            norms += tuple(n.replace(".norm", ".post_norm") for n in norms)
        return Block(attn=_attention(spec, a) if a not in "MX" else None, cross=None,
                     ffn=_ffn(spec, f) if f != "X" else None, norm=spec.norm, norms=norms,
                     norm_note="sandwich: a norm before and after each sublayer"
                     if spec.sandwich_norm else "pre-norm" if a == "M"
                     else f"{spec.norm_position}-norm",
                     parallel=False, ffn_reads_attn_input=False,
                     mixer=_mixer(spec) if a == "M" else None)
    if spec.parallel_block:
        norms = ("attn.norm", "ffn.norm")[:spec.parallel_norms]
    else:
        norms = ("attn.norm", "cross.norm", "ffn.norm") if cross else ("attn.norm", "ffn.norm")
    if spec.sandwich_norm:  # (T5Gemma's decoder: after the cross-attention too)
        norms += ("attn.post_norm", "cross.post_norm", "ffn.post_norm") if cross else \
            ("attn.post_norm", "ffn.post_norm")
    elif spec.moe_post_norm and kinds[1] == "E":  # A.X K1: over the MoE block's output
        norms += ("ffn.post_norm",)
    shared = spec.parallel_block and spec.parallel_norms == 1
    note = f"{spec.norm_position}-norm" + (", shared by attention and FFN" if shared else "")
    if spec.sandwich_norm:
        note = "sandwich: a norm before and after each sublayer"
    return Block(attn=_attention(spec, kinds[0], shared=kv_shared, bidirectional=bidirectional),
                 cross=_attention(spec, "F", cross=True) if cross else None,
                 ffn=_ffn(spec, kinds[1], kv_shared), norm=spec.norm, norms=norms,
                 norm_note=note,
                 parallel=spec.parallel_block, ffn_reads_attn_input=shared,
                 idle_cross=_attention(spec, "F", cross=True)
                 if spec.idle_cross_attention else None)


def layers_before(spec: ModelSpec, stack: Stack, wanted: set[str] | frozenset[str]
                  ) -> tuple[str, Counter[str]]:
    """The group of the stack's first layer whose group is in ``wanted`` ("" if none), and
    how many layers of each group come before it. Walks the layers (a stack of one group
    needs no walk): only LoRA's activations ask, for the layers below the first adapter."""
    if len(stack.groups) == 1:
        g = stack.groups[0].name
        return (g, Counter()) if g in wanted else ("", Counter())
    by_kinds = {g.kinds: g.name for g in stack.groups}
    before: Counter[str] = Counter()
    for kinds in layer_kinds_in_order(spec, stack.layers):
        name = by_kinds[kinds]
        if name in wanted:
            return name, before
        before[name] += 1
    return "", before


def group_of_layer(spec: ModelSpec, stack: Stack, i: int) -> str:
    """The group holding layer i of the stack ("" past its last layer)."""
    if not 0 <= i < stack.layers:
        return ""
    if len(stack.groups) == 1:
        return stack.groups[0].name
    by_kinds = {g.kinds: g.name for g in stack.groups}
    return by_kinds[layer_kinds_in_order(spec, stack.layers)[i]]


def describe(plan: Plan) -> list[str]:
    """One line per stack with groups that differ: '61 layers: 3 × dense, 58 × moe'."""
    out = []
    for s in plan.stacks:
        if len(s.groups) > 1:
            parts = [f"{g.count} × {g.name.split('.', 1)[1] if '.' in g.name else s.name}"
                     for g in s.groups]
            out.append(f"{s.name}: {s.layers} layers: " + ", ".join(parts))
    return out
