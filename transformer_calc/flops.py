"""FLOPs per token, training cost and the inference roofline. Pure, O(1) in model size.

Conventions (stated in every output's notes):
- one multiply-add = 2 FLOPs; only matrix multiplications are counted (norms, softmax,
  activations and bias adds are O(d_model) per token and left out, as in Kaplan et al. 2020);
- attention: every query meets all T keys of its sequence (PaLM, App. B, and Kaplan et al.
  count it so; a causal mask makes half of that work useless, but dense kernels do most of
  it). Efficient patterns replace T by the keys each query really meets;
- backward = 2 × forward (gradients w.r.t. inputs and weights), so training = 3 × forward;
  full recomputation adds one more forward, selective recomputation (Korthikanti et al.
  2022) adds the attention score and value products again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import partial

from transformer_calc.breakdown import Breakdown
from transformer_calc.choices import PATTERNS, RECOMPUTE
from transformer_calc.errors import TcalcError
from transformer_calc.params import count_params, symbols
from transformer_calc.plan import FFN, Attention, Mixer, local_symbols, plan_of
from transformer_calc.spec import ModelSpec

# Hoffmann et al. 2022 (Chinchilla): compute-optimal training uses ~20 tokens per parameter.
CHINCHILLA_TOKENS_PER_PARAM = 20
# Default model FLOPs utilisation: an assumption, said as such. PaLM 540B reached 46.2 %
# (Chowdhery et al. 2022, Table 3); 40 % is typical of well-tuned dense training.
DEFAULT_MFU = 0.40
MFU_SOURCE = "assumed 40% (PaLM 540B reached 46.2%, Chowdhery et al. 2022)"


@dataclass(frozen=True)
class AttentionPattern:
    """Which keys each query meets. Sizes are in tokens."""

    kind: str = "dense"
    window: int = 0  # local, longformer, bigbird: sliding-window keys per query
    block: int = 0  # strided, fixed: Sparse Transformer block / stride length l
    summary: int = 1  # fixed: summary positions (c) per block
    global_tokens: int = 0  # longformer, bigbird: tokens that attend to and from all
    random: int = 0  # bigbird: random keys per query

    def __post_init__(self) -> None:
        if self.kind not in PATTERNS:
            raise TcalcError(f"--attention-pattern: expected one of {', '.join(PATTERNS)}, "
                             f"got '{self.kind}'")
        need = {"local": "window", "longformer": "window", "bigbird": "window",
                "strided": "block", "fixed": "block"}.get(self.kind)
        if need and getattr(self, need) < 1:
            raise TcalcError(f"--{need}: the {self.kind} pattern needs --{need} >= 1")
        for name in ("window", "block", "summary", "global_tokens", "random"):
            if getattr(self, name) < 0:
                raise TcalcError(f"--{name.replace('_', '-')}: expected >= 0")

    def pairs(self, T: int) -> int:
        """Query-key pairs scored in one sequence of T tokens (dense: T²)."""
        if self.kind == "dense":
            return T * T
        if self.kind == "local":
            return T * min(T, self.window)
        if self.kind == "strided":
            # Child et al. 2019: the previous l positions plus every l-th position.
            return T * min(T, self.block + math.ceil(T / self.block))
        if self.kind == "fixed":
            # Child et al. 2019: own block of l plus c summary positions of every block.
            return T * min(T, self.block + self.summary * math.ceil(T / self.block))
        # Longformer (Beltagy et al. 2020): window (dilation spreads it, same count) + global;
        # BigBird (Zaheer et al. 2020): window + global + random. Global tokens see all T.
        g = min(self.global_tokens, T)
        extra = self.random if self.kind == "bigbird" else 0
        return (T - g) * min(T, self.window + g + extra) + g * T

    def describe(self) -> str:
        kind = self.kind
        if kind == "dense":
            return "dense: every query meets all T keys"
        if kind == "local":
            return f"local window of {self.window}"
        if kind == "strided":
            return f"Sparse Transformer strided, l = {self.block}"
        if kind == "fixed":
            return f"Sparse Transformer fixed, l = {self.block}, c = {self.summary}"
        if kind == "longformer":
            return f"Longformer, window {self.window} + {self.global_tokens} global"
        return (f"BigBird, window {self.window} + {self.global_tokens} global + "
                f"{self.random} random")


DENSE = AttentionPattern()


def keys_per_query(pattern: AttentionPattern, T: int) -> Fraction:
    return Fraction(pattern.pairs(T), T)


def pattern_keys(pattern: AttentionPattern, T: int) -> int:
    """The keys one query meets, as FLOPs and memory both count them (one place):
    T for dense attention, the pattern's pairs / T rounded to the nearest key otherwise."""
    return T if pattern.kind == "dense" else round(keys_per_query(pattern, T))


def count_flops(spec: ModelSpec, seq_len: int, pattern: AttentionPattern = DENSE) -> Breakdown:
    """Forward FLOPs per token at context length ``seq_len``, one item per matmul."""
    if seq_len < 1:
        raise TcalcError(f"--seq-len: expected an integer >= 1, got {seq_len}")
    spec.require_runnable()
    if spec.costs_unmodelled:
        raise TcalcError(f"{spec.name}: FLOPs not modelled ({spec.costs_unmodelled})")
    spec.check_context(seq_len)
    # Rows are Item's fields in order: (name, count, formula, expr, repeat, stack, note,
    # active, shape); expr is written from the formula when items are read
    rows: list[tuple] = []  # type: ignore[type-arg]
    add = rows.append
    E = spec.d_model
    V, Ve = spec.vocab_size, spec.embed_dim
    T = seq_len
    dense = pattern.kind == "dense"
    # integer FLOPs: the average keys per query, rounded (exact when dense)
    k = pattern_keys(pattern, T)
    keys_note = "" if dense else pattern.describe()
    for g in plan_of(spec).groups:
        blk = g.block
        for a, blk_name in ((blk.attn, "attn"), (blk.cross, "cross")):
            if a is not None:
                _attention_flops(add, a, E, T, k, keys_note, f"{g.name}.{blk_name}.", g.name,
                                 g.count)
        if blk.attn is not None and spec.rel_embeddings and blk.attn.mechanism == "softmax":
            _relative_flops(add, spec, blk.attn, E, T, f"{g.name}.attn.", g.name, g.count)
        if blk.mixer is not None:
            _mixer_flops(add, blk.mixer, E, f"{g.name}.mixer.", g.name, g.count)
        if blk.ffn is not None:
            _ffn_flops(blk.ffn, E, add, f"{g.name}.ffn", g.name, g.count)
        if blk.ple:  # Gemma 4: the gate and the projection of the layer's own embedding
            P = blk.ple
            add((f"{g.name}.ple", 4 * E * P, "2 · 2 · d_model · per_layer_input", "", g.count,
                 g.name, "", None, ()))
        if blk.altup:
            # Gemma3nTextAltUp: the router over the first stream in predict and in correct,
            # the prediction coefficients (N -> N²), the per-token (d_model, N) × (N, N) mix of
            # the streams, the correction coefficients (N -> N)
            N = blk.altup
            add((f"{g.name}.altup", 4 * E * N + 2 * N ** 3 + 2 * E * N * N + 2 * N * N,
                 "2 · 2 · d_model · altup_inputs + 2 · altup_inputs³ + 2 · d_model · "
                 "altup_inputs² + 2 · altup_inputs²", "", g.count, g.name, "", None, ()))
        if blk.hc:
            # DeepseekV4HyperConnection, twice a layer: the flattened streams to (2 + N)·N
            # weights, and the streams mixed by the N × N matrix
            N = blk.hc
            add((f"{g.name}.hc", 2 * (2 * N * E * (2 + N) * N + 2 * N * N * E),
                 "2 · (2 · hc_streams · d_model · (2 + hc_streams) · hc_streams + 2 · "
                 "hc_streams² · d_model)", "", g.count, g.name, "", None, ()))
        if blk.laurel:  # Gemma 3n: LAuReL's d_model -> rank -> d_model
            add((f"{g.name}.laurel", 4 * E * blk.laurel, "2 · 2 · d_model · laurel_rank", "",
                 g.count, g.name, "", None, ()))

    if spec.per_layer_input:  # Gemma 4: the embeddings projected to every layer's input
        add(("embed.project_per_layer", 2 * E * spec.n_layers * spec.per_layer_input,
             "2 · d_model · n_layers · per_layer_input", "", 1, "", "", None, ()))
    if spec.hc_streams:  # DeepSeek-V4: the hyper head's collapse of the streams
        N = spec.hc_streams
        add(("head.hc", 2 * N * E * N, "2 · hc_streams · d_model · hc_streams", "", 1, "", "",
             None, ()))
    if spec.altup_inputs:  # Gemma 3n: the embeddings to each further stream and back
        n = spec.altup_inputs - 1
        add(("embed.project_altup", 2 * n * E * E, "2 · (altup_inputs − 1) · d_model²", "", 1,
             "", "", None, ()))
        add(("head.altup_unembed", 2 * n * E * E, "2 · (altup_inputs − 1) · d_model²", "", 1,
             "", "", None, ()))
    if spec.side_concat:
        cin = E + sum(w for _, w in spec.side_tables)
        add(("embed.project_side", 2 * cin * E, "2 · (d_model + side widths) · d_model", "", 1,
             "", "", None, ()))
    if Ve != E or spec.embed_factorized:
        add(("embed.project_in", 2 * Ve * E, "2 · d_embed · d_model", "", 1, "", "", None, ()))
        if not spec.embed_factorized:  # OPT projects back before its head
            add(("embed.project_out", 2 * E * Ve, "2 · d_model · d_embed", "", 1, "", "", None,
                 ()))
    if spec.pooler:
        # BertPooler: a dense layer on the first token of each sequence, per token 1/T of it
        add(("head.pooler", 2 * E * E // seq_len, "⌊2 · d_model² / T⌋", "", 1, "",
             "the first token of each sequence only (rounded down per token)", None, ()))
    if spec.mlm_head:
        W = spec.head_width
        if W == E:
            add(("head.mlm.dense", 2 * E * E, "2 · d_model²", "", 1, "", "", None, ()))
            add(("head.mlm.decoder", 2 * E * V, "2 · d_model · vocab_size", "", 1, "", "", None,
                 ()))
        else:  # ALBERT, ELECTRA (d_embed), RemBERT (output_embedding_size)
            add(("head.mlm.dense", 2 * E * W, "2 · d_model · mlm_width", "", 1, "", "", None,
                 ()))
            add(("head.mlm.decoder", 2 * W * V, "2 · mlm_width · vocab_size", "", 1, "", "",
                 None, ()))
    if spec.lm_head:
        add(("head.lm", 2 * Ve * V, "2 · d_embed · vocab_size" if Ve != E
             else "2 · d_model · vocab_size", "", 1, "", "a matmul even when its weights are tied",
             None, ()))
    notes = [
        "one multiply-add = 2 FLOPs; matmuls only (norms, softmax, activations, biases left out)",
        f"attention: {pattern.describe()} (T = {T}); causal masking not subtracted",
    ]
    if spec.arch == "encoder-decoder":
        notes.append("encoder-decoder: per token = one source and one target token, both of "
                     f"length T = {T}")
    if spec.n_experts:
        notes.append(f"mixture of experts: top-{spec.top_k} of {spec.n_experts} experts run "
                     "per token (plus the router)")
    if spec.attention_mechanism != "softmax":
        notes.append(crossover_note(spec))

    return Breakdown(spec.name, "flops", tuple(rows), tuple(notes),
                     {"seq_len": T, "pattern": pattern.kind},
                     partial(symbols, spec, T=T, keys=k,
                             sliding_keys=min(T, spec.sliding_window or T),
                             chunk_keys=min(T, spec.attention_chunk or T),
                             index_keys=min(T, spec.index_topk or T),
                             **local_symbols(spec, T)))


def _relative_flops(add, spec: ModelSpec, a: Attention, E: int, T: int,  # type: ignore[no-untyped-def]
                    p: str, group: str, L: int) -> None:
    """DeBERTa's disentangled terms (DisentangledSelfAttention.disentangled_attention_bias):
    the relative table (2·att_span = rel_embeddings rows) projected once per sequence, by the
    attention's own query and key projections under share_att_key (both, whatever the terms)
    or by one position projection per term; then per term a product of the queries (c2p) or
    keys (p2c) with the projected table. (FlopCounterMode, deberta-v2-c2p-p2c.json.)"""
    terms = spec.rel_term_count
    # (DeBERTa v1: the 2 · min(T, max_relative_positions) rows the sequence meets)
    R, H, dh = spec.rel_rows(T), a.heads, a.d_head
    rsym = "rel_rows" if spec.rel_span == "sequence" else "rel_embeddings"
    projections = 2 if spec.rel_shared_key else terms
    if projections:
        add((p + "relative_projections", projections * 2 * R * E * E // T,
             f"⌊{projections} · 2 · {rsym} · d_model² / T⌋", "", L, group,
             "the table is projected once per sequence (rounded down per token)", None, ()))
    if terms:
        add((p + "relative_terms", terms * 2 * H * R * dh,
             f"{terms} · 2 · n_heads · {rsym} · d_head", "", L, group,
             "c2p: Q × the projected keys; p2c: K × the projected queries", None, ()))


def _v4_attention_flops(add, a: Attention, E: int, T: int, p: str,  # type: ignore[no-untyped-def]
                        group: str, L: int) -> None:
    """DeepseekV4Attention: the low-rank query, the K=V head, scores and values over the
    window's keys and the compressed entries a query meets (the indexer's top-k in a Q layer;
    eager attention masks them from all T + T / compress instead), the grouped output; the
    compressor's two projections over every token and, in a Q layer, the indexer's: its
    compressor, its query from the latent, its per-head weights, and its scores against every
    compressed entry (T // compress_csa)."""
    H, dh, rq, g, ro = a.heads, a.d_head, a.q_lora_rank, a.o_groups, a.o_rank
    keys = a.keys(T)
    add((p + "q_a", 2 * E * rq, "2 · d_model · q_lora_rank", "", L, group, "", None, ()))
    add((p + "q_b", 2 * rq * H * dh, "2 · q_lora_rank · n_heads · d_head", "", L, group, "",
         None, ()))
    add((p + "kv", 2 * E * dh, "2 · d_model · d_head", "", L, group, "one head, K and V",
         None, ()))
    note = f"min(T, {a.window}) window keys + {a.entries(T)} compressed entries per query"
    add((p + "scores", 2 * H * dh * keys, "2 · n_heads · d_head · keys", "", L, group, note,
         None, ()))
    add((p + "values", 2 * H * dh * keys, "2 · n_heads · d_head · keys", "", L, group, "",
         None, ()))
    add((p + "o_a", 2 * H * dh * ro, "2 · n_heads · d_head · o_lora_rank", "", L, group,
         "each group of heads to o_lora_rank", None, ()))
    add((p + "o_b", 2 * g * ro * E, "2 · o_groups · o_lora_rank · d_model", "", L, group, "",
         None, ()))
    if not a.compress:
        return
    w, wsym = (2 * dh, "2 · d_head") if a.csa_heads else (dh, "d_head")
    add((p + "compressor", 4 * E * w, f"2 · 2 · d_model · {wsym} (its kv and gate)", "", L,
         group, "", None, ()))
    if a.csa_heads:
        Hi, ic, C = a.csa_heads, a.csa_dim, T // a.compress
        add((p + "indexer", 8 * E * ic + 2 * rq * Hi * ic + 2 * E * Hi,
             "2 · 2 · d_model · 2 · csa_index_dim + 2 · q_lora_rank · csa_index_heads · "
             "csa_index_dim + 2 · d_model · csa_index_heads", "", L, group, "", None, ()))
        add((p + "indexer_scores", 2 * Hi * ic * C, "2 · csa_index_heads · csa_index_dim · "
             "entries", "", L, group, f"against all {C} compressed entries", None, ()))


def _attention_flops(add, a: Attention, E: int, T: int, k: int, keys_note: str,  # type: ignore[no-untyped-def]
                     p: str, group: str, L: int) -> None:
    """One attention sublayer: projections, the score and value products, the output."""
    H, Hkv, dh, dv = a.heads, a.kv_heads, a.d_head, a.d_v
    if a.cross:
        keys, keys_sym, note = T, "T", "every target token meets all T source tokens"
    elif a.index_topk:
        # DeepSeek Sparse Attention: the indexer picks the keys a query meets (what a sparse
        # kernel computes; eager attention masks a dense T × T instead)
        keys, keys_sym = a.keys(T), "index_keys"
        note = f"DSA: min(T, index_topk = {a.index_topk}) keys per query"
    elif a.kind == "local":
        # LongT5's local attention (LongT5LocalAttention): the sequence padded to whole blocks,
        # each block's queries against its own and its two neighbours' keys (zeros past the
        # ends included): 3·block keys for each query of the padded length (per token,
        # rounded down)
        keys = a.keys(T)
        keys_sym = ("(3·local_block + global_tokens)" if a.global_block else "3·local_block") \
            + " · T_blocks / T"
        note = f"local: blocks of {a.window}, the sequence padded to {a.queries(T)}" + (
            f", and {a.globals(T)} global tokens" if a.global_block else "")
    elif a.window:
        # a sliding window (or a chunk) bounds the keys a query meets; the sparse pattern
        # (--attention-pattern) applies to the layers that see every key
        keys = a.keys(T)
        keys_sym = "sliding_keys" if a.kind == "sliding" else "chunk_keys"
        note = f"{a.kind}: min(T, {a.window}) keys per query"
    else:
        keys, keys_sym, note = k, "keys", keys_note
    if a.o_groups:
        _v4_attention_flops(add, a, E, T, p, group, L)
        return
    if a.mla:
        # DeepSeek-V2/V3 MLA: low-rank query and latent K/V projections, then per-head
        # scores over d_nope + d_rope and values of width d_v
        rq, rkv, dr = a.q_lora_rank, a.kv_lora_rank, a.d_rope
        if rq:
            add((p + "q_a", 2 * E * rq, "2 · d_model · q_lora_rank", "", L, group, "", None, ()))
            add((p + "q_b", 2 * rq * H * dh, "2 · q_lora_rank · n_heads · (d_nope + d_rope)", "",
                 L, group, "", None, ()))
        else:
            add((p + "q", 2 * E * H * dh, "2 · d_model · n_heads · (d_nope + d_rope)", "", L,
                 group, "", None, ()))
        add((p + "kv_a", 2 * E * (rkv + dr), "2 · d_model · (kv_lora_rank + d_rope)", "", L,
             group, "", None, ()))
        add((p + "kv_b", 2 * rkv * H * (dh - dr + dv), "2 · kv_lora_rank · n_heads · "
             "(d_nope + d_v)", "", L, group, "", None, ()))
        add((p + "scores", 2 * H * dh * keys, f"2 · n_heads · (d_nope + d_rope) · {keys_sym}",
             "", L, group, note, None, ()))
        add((p + "values", 2 * H * dv * keys, f"2 · n_heads · d_v · {keys_sym}", "", L, group,
             note, None, ()))
        add((p + "o", 2 * H * dv * E, "2 · (n_heads · d_v) · d_model", "", L, group, "", None,
             ()))
        if a.index_heads:
            _indexer_flops(add, a, E, T, p, group, L)
        return
    if a.mechanism == "linformer" and a.sharing == "kv":  # the package's share_kv: V = K
        add((p + "qk", 2 * E * (H + Hkv) * dh, "2 · d_model · (n_heads + n_kv_heads) · d_head",
             "", L, group, "values are the keys", None, ()))
    elif a.kv_shared:  # Gemma 4: the keys and values of an earlier layer
        add((p + "q", 2 * E * H * dh, "2 · d_model · n_heads · d_head", "", L, group,
             "keys and values reused from an earlier layer", None, ()))
    elif a.v_is_k:  # Gemma 4's attention_k_eq_v: no value projection
        add((p + "qk", 2 * E * (H + Hkv) * dh, "2 · d_model · (n_heads + n_kv_heads) · d_head",
             "", L, group, "values are the keys' projection", None, ()))
    elif dv != dh:  # MiMo-V2-Flash: value heads of their own width
        add((p + "qkv", 2 * E * ((H + Hkv) * dh + Hkv * dv),
             "2 · d_model · ((n_heads + n_kv_heads) · d_head + n_kv_heads · d_v)", "", L, group,
             "", None, ()))
    else:
        add((p + "qkv", 2 * E * (H + 2 * Hkv) * dh,
             "2 · d_model · (n_heads + 2·n_kv_heads) · d_head", "", L, group,
             "K/V of the encoder output, per source token" if a.cross else "", None, ()))
    if a.experts:
        # JetMoeMoA's router; its routed query and output projections run n_heads heads in
        # all, as the dense ones above and below count them
        add((p + "router", 2 * E * a.experts, "2 · d_model · n_experts", "", L, group, "",
             None, ()))
    if a.conv:
        add((p + "qkv_conv", 2 * a.conv * (H + 2 * Hkv) * dh,
             "2 · qkv_conv · (n_heads + 2·n_kv_heads) · d_head", "", L, group,
             "Primer's depthwise convolutions", None, ()))
    if a.gate != "none":
        w = a.gate_width(a.gate)
        add((p + "gate", 2 * E * w, "2 · d_model · " + ("n_heads" if a.gate == "head"
                                                         else "n_heads · d_head"), "", L, group,
             "", None, ()))
    if a.mechanism != "softmax" and not a.cross:
        _efficient_core(add, a, p, group, L)
    elif a.differential:
        # DiffLlamaAttention: two attention calls over the same Q and K, each with V of all
        # n_heads · d_head (half the K/V heads, repeated): scores and values twice
        sv = 4 * H * dh * keys
        add((p + "scores", sv, f"2 · 2 · n_heads · d_head · {keys_sym}", "", L, group,
             "two attention maps", None, ()))
        add((p + "values", sv, f"2 · 2 · n_heads · d_head · {keys_sym}", "", L, group,
             "two attention maps", None, ()))
    elif a.kind == "local":
        Tq = a.queries(T)
        add((p + "scores", 2 * H * dh * keys * Tq // T, f"⌊2 · n_heads · d_head · {keys_sym}⌋",
             "", L, group, note, None, ()))
        add((p + "values", 2 * H * dv * keys * Tq // T, f"⌊2 · n_heads · d_head · {keys_sym}⌋",
             "", L, group, note, None, ()))
        if a.global_block:
            # LongT5TransientGlobalAttention: every token summed into its global block (an
            # einsum with the one-hot block ids), then K and V of those global_tokens, once
            # per sequence (rounded down per token)
            G = a.globals(T)
            add((p + "global_aggregates", 2 * G * E, "2 · global_tokens · d_model", "", L,
                 group, "the one-hot sum of each global block", None, ()))
            add((p + "global_kv", 2 * 2 * G * E * Hkv * dh // T, "⌊2 · 2 · global_tokens · "
                 "d_model · n_kv_heads · d_head / T⌋", "", L, group, "K and V of the global "
                 "tokens, once per sequence", None, ()))
    else:
        vsym = "d_v" if dv != dh else "d_head"
        add((p + "scores", 2 * H * dh * keys, f"2 · n_heads · d_head · {keys_sym}", "", L,
             group, note, None, ()))
        add((p + "values", 2 * H * dv * keys, f"2 · n_heads · {vsym} · {keys_sym}", "", L,
             group, note, None, ()))
    add((p + "o", 2 * H * dv * E, "2 · (n_heads · d_v) · d_model" if dv != dh else
         "2 · (n_heads · d_head) · d_model", "", L, group, "", None, ()))


def _indexer_flops(add, a: Attention, E: int, T: int, p: str, group: str,  # type: ignore[no-untyped-def]
                   L: int) -> None:
    """DSA's lightning indexer (transformers 5.23 DeepseekV32Indexer.forward): its three
    projections, then per query a score against every one of the T keys in each index head
    (q · k), and those scores summed over the heads with the per-head weights."""
    Hi, di, rq = a.index_heads, a.index_dim, a.q_lora_rank
    add((p + "index_q", 2 * rq * Hi * di, "2 · q_lora_rank · index_heads · index_head_dim", "",
         L, group, "", None, ()))
    add((p + "index_k", 2 * E * di, "2 · d_model · index_head_dim", "", L, group, "", None, ()))
    add((p + "index_weights", 2 * E * Hi, "2 · d_model · index_heads", "", L, group, "", None,
         ()))
    add((p + "index_scores", 2 * Hi * di * T, "2 · index_heads · index_head_dim · T", "", L,
         group, "every key is scored, whatever index_topk keeps", None, ()))
    add((p + "index_sum", 2 * Hi * T, "2 · index_heads · T", "", L, group,
         "the heads' scores weighted and summed", None, ()))


def crossover(spec: ModelSpec) -> tuple[int, int]:
    """(the mechanism's attention-core FLOPs per token and layer, the shortest context from
    which it costs less than dense softmax attention, whose core is 4 · n_heads · d_head · T
    per token): the two sides of the rows count_flops writes, compared."""
    a = next(g.block.attn for g in plan_of(spec).groups if g.block.attn is not None)
    rows: list[tuple] = []  # type: ignore[type-arg]
    _efficient_core(rows.append, a, "", "", 1)
    core = sum(r[1] for r in rows)
    dense_per_key = 4 * a.heads * a.d_head
    return core, core // dense_per_key + 1


def crossover_note(spec: ModelSpec) -> str:
    core, t = crossover(spec)
    name = {"linformer": f"Linformer (k = {spec.linformer_k})",
            "performer": "Performer (FAVOR+)", "linear": "linear attention (elu + 1)"}
    return (f"{name[spec.attention_mechanism]}: {core:,} attention-core FLOPs per token per "
            f"layer whatever T; dense softmax attention costs no more up to T = {t - 1:,}, "
            f"more from T = {t:,}")


def _efficient_core(add, a: Attention, p: str, group: str, L: int) -> None:  # type: ignore[no-untyped-def]
    """Per token, the attention core of the efficient mechanisms, matmuls as
    torch.utils.flop_counter counts them on the reference implementations
    (tools/reference_efficient.py):
    - Linformer: E·K and F·V project the keys and values to k (2 · k per key channel each,
      both taken when the values are the keys), then scores and values over k keys;
    - Performer (FAVOR+, non-causal): the random-feature maps of Q and K (2 · m · d_head
      each), the m × d_head context φ(K)ᵀ·V, φ(Q)·context and the normaliser φ(Q)·Σφ(K);
    - linear attention (elu + 1): φ(K)ᵀ·V, φ(Q)·(φ(K)ᵀ·V) and the normaliser (the feature
      map is elementwise, not counted)."""
    H, Hkv, dh = a.heads, a.kv_heads, a.d_head
    if a.mechanism == "linformer":
        k = a.proj_k
        # E·K and F·V; with shared E = F and values = keys both products are still taken
        # (the package's share_kv: FlopCounterMode counts two)
        add((p + "linformer_proj", 2 * 2 * k * Hkv * dh, "2 · 2 · linformer_k · n_kv_heads · "
             "d_head", "", L, group, "E·K and F·V", None, ()))
        add((p + "scores", 2 * H * dh * k, "2 · n_heads · d_head · linformer_k", "", L, group,
             "over the k projected keys", None, ()))
        add((p + "values", 2 * H * dh * k, "2 · n_heads · d_head · linformer_k", "", L, group,
             "", None, ()))
    elif a.mechanism == "performer":
        m = a.features
        add((p + "favor_features", 2 * 2 * H * m * dh, "2 · 2 · n_heads · m · d_head", "", L,
             group, "random-feature maps of Q and K", None, ()))
        add((p + "favor_context", 2 * H * m * dh, "2 · n_heads · m · d_head", "", L, group,
             "φ(K)ᵀ·V", None, ()))
        add((p + "favor_out", 2 * H * m * dh + 2 * H * m, "2 · n_heads · m · (d_head + 1)",
             "", L, group, "φ(Q)·context and the normaliser", None, ()))
    else:  # linear (elu + 1)
        add((p + "linear_context", 2 * H * dh * dh, "2 · n_heads · d_head²", "", L, group,
             "φ(K)ᵀ·V", None, ()))
        add((p + "linear_out", 2 * H * dh * dh + 2 * H * dh, "2 · n_heads · d_head · "
             "(d_head + 1)", "", L, group, "φ(Q)·context and the normaliser", None, ()))


def _mixer_flops(add, m: Mixer, E: int, p: str, group: str, L: int) -> None:  # type: ignore[no-untyped-def]
    """Forward FLOPs per token of a recurrent mixer: its projections and convolution, and its
    scan's matmuls, which do not depend on the context (linear in T overall).

    Mamba-2: the chunked SSD algorithm (Dao & Gu 2024, Sec. 6) with chunk Q: within a chunk,
    scores C·Bᵀ per group of B and C and scores × x per head (quadratic in Q); the chunk's state
    Bᵀ·x, the outputs from the state entering it C·h, and the state passed from chunk to chunk.
    Gated DeltaNet: the chunked WY form (Yang et al. 2025), per value head: k·kᵀ and q·kᵀ within
    a chunk, two unit-triangular solves, and three products with the d_k × d_v state per token.
    Mamba-1: y = C·h; its elementwise state update (Δ·A, Δ·B·x, Ā·h + B̄·x) is left out like
    every elementwise operation."""
    Di, N, H, G, K, Q = m.inner, m.state, m.heads, m.groups, m.conv, m.chunk
    C = m.conv_channels

    def row(name: str, flops: int, formula: str, note: str = "") -> None:
        add((p + name, flops, formula, "", L, group, note, None, ()))

    conv_note = "depthwise: ssm_conv taps per channel"
    if m.kind == "lightning":
        # MiniMax lightning attention (Qin et al. 2024): blocks of ssm_chunk tokens; within a
        # block q·kᵀ and the scores × v, across blocks q · the K^T·V state and its update
        dh = Di // H
        row("qkv_proj", 2 * E * 3 * Di, "2 · d_model · 3 · ssm_inner")
        row("output_gate", 2 * E * Di, "2 · d_model · ssm_inner")
        row("scan.intra", 2 * 2 * Q * Di, "2 · 2 · ssm_chunk · ssm_inner",
            "q·kᵀ and the scores × v within a block")
        row("scan.state", 2 * 2 * Di * dh, "2 · 2 · ssm_inner · (ssm_inner / ssm_heads)",
            "q · the state, and the state's update kᵀ·v")
        row("out_proj", 2 * Di * E, "2 · ssm_inner · d_model")
        return
    if m.kind == "short_conv":
        row("in_proj", 2 * E * 3 * E, "2 · d_model · 3 · d_model")
        row("conv", 2 * E * K, "2 · d_model · ssm_conv", conv_note)
        row("out_proj", 2 * E * E, "2 · d_model · d_model")
        return
    if m.kind == "mamba":
        R = m.dt_rank
        row("in_proj", 2 * E * 2 * Di, "2 · d_model · 2 · ssm_inner")
        row("conv", 2 * Di * K, "2 · ssm_inner · ssm_conv", conv_note)
        row("x_proj", 2 * Di * (R + 2 * N), "2 · ssm_inner · (ssm_dt_rank + 2 · ssm_state)")
        row("dt_proj", 2 * R * Di, "2 · ssm_dt_rank · ssm_inner")
        row("scan.output", 2 * Di * N, "2 · ssm_inner · ssm_state",
            "y = C·h per channel; the elementwise state update is left out")
    elif m.kind == "mamba2":
        row("in_proj", 2 * E * (2 * Di + 2 * G * N + H),
            "2 · d_model · (2 · ssm_inner + 2 · ssm_groups · ssm_state + ssm_heads)")
        row("conv", 2 * C * K, "2 · (ssm_inner + 2 · ssm_groups · ssm_state) · ssm_conv",
            conv_note)
        row("ssd.scores", 2 * Q * G * N, "2 · ssm_chunk · ssm_groups · ssm_state",
            "C·Bᵀ within a chunk, per group")
        row("ssd.values", 2 * Q * Di, "2 · ssm_chunk · ssm_inner",
            "masked scores × x within a chunk, per head")
        row("ssd.states", 2 * Di * N, "2 · ssm_inner · ssm_state", "each chunk's state Bᵀ·x")
        row("ssd.outputs", 2 * Di * N, "2 · ssm_inner · ssm_state",
            "C · the state entering the chunk")
        row("ssd.passing", round(2 * Di * N / Q), "2 · ssm_inner · ssm_state / ssm_chunk",
            "the state carried from chunk to chunk")
    else:  # gated_deltanet, kda
        dk, dv = N, Di // H
        if m.kind == "kda":
            # KimiLinearDeltaAttention: q, k, v; the forget gate's and the output gate's
            # rank-d_head bottlenecks; β per head. Its scan is Gated DeltaNet's chunked WY form
            # with a decay per channel (Kimi Linear report, Sec. 2)
            row("in_proj", 2 * E * 3 * Di, "2 · d_model · 3 · ssm_inner")
            row("gates", 2 * (2 * E * dv + 2 * dv * Di + E * H),
                "2 · (2 · d_model · d_head + 2 · d_head · ssm_inner + d_model · ssm_heads)",
                "f_a, f_b, g_a, g_b and b_proj")
            row("conv", 2 * C * K, "2 · 3 · ssm_inner · ssm_conv", conv_note)
        else:
            row("in_proj", 2 * E * (2 * G * N + 2 * Di + 2 * H),
                "2 · d_model · (2 · ssm_groups · ssm_state + 2 · ssm_inner + 2 · ssm_heads)")
            row("conv", 2 * C * K, "2 · (2 · ssm_groups · ssm_state + ssm_inner) · ssm_conv",
                conv_note)
        row("scan.intra", 2 * Q * H * (2 * dk + dv),
            "2 · ssm_chunk · ssm_heads · (2 · ssm_state + ssm_inner / ssm_heads)",
            "k·kᵀ, q·kᵀ and the scores × values within a chunk, per value head")
        row("scan.solve", (Q - 1) * H * (dk + dv),
            "(ssm_chunk − 1) · ssm_heads · (ssm_state + ssm_inner / ssm_heads)",
            "two unit-lower-triangular solves per chunk (the WY form)")
        row("scan.state", 6 * H * dk * dv, "6 · ssm_heads · ssm_state · (ssm_inner / ssm_heads)",
            "k_cumdecay·S, q·S and kᵀ·v_new per token")
    row("out_proj", 2 * Di * E, "2 · ssm_inner · d_model")


def _ffn_flops(f: FFN, E: int, add, p: str, group: str, L: int) -> None:  # type: ignore[no-untyped-def]
    if f.kind == "param_attention":
        hp, n_p, dk, dv = f.pattn
        for name, flops, formula in (
                ("q", 2 * E * hp * dk, "2 · d_model · h_p · d_pk"),
                ("scores", 2 * hp * n_p * dk, "2 · h_p · n_p · d_pk"),
                ("values", 2 * hp * n_p * dv, "2 · h_p · n_p · d_pv"),
                ("o", 2 * hp * dv * E, "2 · h_p · d_pv · d_model")):
            add((f"{p}.pattn.{name}", flops, formula, "", L, group, "", None, ()))
        return
    mats = f.matrices
    gated = "2 · 3 (gated) · d_model · " if mats == 3 else "2 · 2 · d_model · "
    if not f.moe:
        add((p, 2 * mats * E * f.d_ff, gated + f.ff_sym, "", L, group, "", None, ()))
        return
    X, k, S = f.experts, f.top_k, f.shared
    if f.zero:  # LongCat-Flash: the router scores the zero-computation experts too
        add((p + ".router", 2 * E * (X + f.zero), "2 · d_model · (n_experts + zero_experts)",
             "", L, group, "", None, ()))
    else:
        add((p + ".router", 2 * E * X, "2 · d_model · n_experts", "", L, group, "", None, ()))
    add((p + ".experts", 2 * mats * E * f.d_ff * k, gated + f.ff_sym + " · top_k", "", L, group,
         "an upper bound: a token routed to a zero-computation expert computes nothing"
         if f.zero else "", None, ()))
    if f.beside:  # Gemma 4, LongCat-Flash: the dense FFN beside the experts
        add((p + ".dense", 2 * mats * E * f.beside, gated + "d_ff", "", L, group,
             "runs beside the experts", None, ()))
    if S:
        add((p + ".shared", 2 * mats * E * f.d_shared * S,
             gated + f.shared_sym + " · n_shared_experts", "", L, group, "", None, ()))
    if f.shared_gate:
        # Qwen2-MoE: sigmoid(x W) scales the shared experts' output (W: d_model -> 1)
        add((p + ".shared_gate", 2 * E, "2 · d_model", "", L, group, "", None, ()))


def attention_core(b: Breakdown) -> int:
    """Forward FLOPs of the score and value products (what selective recompute redoes)."""
    return b.sum_where(lambda name: name.endswith((".scores", ".values"))
                       and ".pattn." not in name)


def training_flops_per_token(b: Breakdown, recompute: str = "none") -> int:
    if recompute not in RECOMPUTE:
        raise TcalcError(f"--recompute: expected one of {', '.join(RECOMPUTE)}, got '{recompute}'")
    forward = b.total
    extra = {"none": 0, "full": forward, "selective": attention_core(b)}[recompute]
    return 3 * forward + extra  # backward = 2 × forward


def rule_6n(params: int) -> int:
    """Training FLOPs per token, the rule of thumb: 6N (2N forward + 4N backward)."""
    return 6 * params


def kaplan_forward(spec: ModelSpec, non_embedding: int, seq_len: int) -> int:
    """Kaplan et al. 2020, Eq. 2.2: C_forward ≈ 2N + 2 · n_layer · n_ctx · d_attn (N without
    embeddings)."""
    return 2 * non_embedding + 2 * spec.total_layers * seq_len * spec.n_heads * spec.head_dim


# -- training run ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainingRun:
    tokens: int
    tokens_source: str
    flops_per_token: int
    total_flops: int
    gpu: str | None  # without a GPU: total FLOPs only
    n_gpus: int
    peak_flops: float | None  # one GPU, the compute dtype
    mfu: float | None
    mfu_source: str
    gpu_hours: float | None
    wall_days: float | None


def training_run(flops_per_token: int, params: int, gpu_name: str | None, n_gpus: int = 1,
                 tokens: int | None = None, mfu: float | None = None, dtype: str = "bf16",
                 tokens_per_second: float | None = None) -> TrainingRun:
    from transformer_calc.hardware import get_gpu

    if n_gpus < 1:
        raise TcalcError(f"--gpus: expected an integer >= 1, got {n_gpus}")
    if tokens is None:
        tokens = CHINCHILLA_TOKENS_PER_PARAM * params
        tokens_source = f"Chinchilla default: {CHINCHILLA_TOKENS_PER_PARAM} tokens per parameter"
    else:
        tokens_source = "given"
        if tokens < 1:
            raise TcalcError(f"--tokens: expected a number >= 1, got {tokens}")
    total = flops_per_token * tokens
    if gpu_name is None:
        if mfu is not None or tokens_per_second is not None:
            raise TcalcError("--mfu and --tokens-per-second need --gpu")
        return TrainingRun(tokens, tokens_source, flops_per_token, total, None, n_gpus, None,
                           None, "", None, None)
    gpu = get_gpu(gpu_name)
    peak = gpu.peak(dtype)
    if tokens_per_second is not None:
        if mfu is not None:
            raise TcalcError("--mfu and --tokens-per-second: give one (the other is derived)")
        if tokens_per_second <= 0:
            raise TcalcError("--tokens-per-second: expected a number > 0")
        # MFU = achieved model FLOP/s ÷ peak (PaLM, App. B)
        mfu = tokens_per_second * flops_per_token / (n_gpus * peak)
        mfu_source = f"measured: {tokens_per_second:,.0f} tokens/s"
    elif mfu is None:
        mfu, mfu_source = DEFAULT_MFU, MFU_SOURCE
    else:
        if not 0 < mfu <= 1:
            raise TcalcError(f"--mfu: expected a fraction in (0, 1], got {mfu}")
        mfu_source = "given"
    gpu_seconds = total / (peak * mfu)
    return TrainingRun(tokens, tokens_source, flops_per_token, total, gpu.name, n_gpus, peak,
                       mfu, mfu_source, gpu_seconds / 3600, gpu_seconds / n_gpus / 86400)


# -- inference roofline ---------------------------------------------------------------------

@dataclass(frozen=True)
class Phase:
    name: str
    flops: int
    bytes: int
    seconds: float
    intensity: float  # FLOPs per byte moved
    bound: str  # "compute" or "memory"
    tokens_per_second: float


@dataclass(frozen=True)
class Roofline:
    gpu: str
    dtype: str
    kv_dtype: str
    batch: int
    context: int
    peak_flops: float
    bandwidth: float
    ridge: float  # FLOPs per byte where compute and memory time meet
    prefill: Phase
    decode: Phase
    decode_mha: Phase | None  # the same model with n_kv_heads = n_heads, for comparison


def roofline(spec: ModelSpec, gpu_name: str, batch: int, context: int,
             dtype: str = "bf16", kv_dtype: str | None = None,
             pattern: AttentionPattern = DENSE) -> Roofline:
    """Upper bounds from the roofline model: time = max(FLOPs / peak, bytes / bandwidth).

    Prefill processes batch × context tokens at once (weights read once: compute-bound);
    decode makes one token per sequence, reading every weight and the whole KV cache for a
    handful of FLOPs each (memory-bound) -- Pope et al. 2022, Efficiently Scaling Transformer
    Inference. Activation traffic and kernel overheads are left out: real speeds are lower.
    """
    from transformer_calc.hardware import DTYPE_BYTES, get_gpu
    from transformer_calc.memory import kv_cache_elements, weight_bytes

    spec.require_runnable()
    if batch < 1 or context < 1:
        raise TcalcError("--batch-size and --seq-len: expected integers >= 1")
    kv_dtype = kv_dtype or ("bf16" if dtype in ("int8", "int4", "fp8") else dtype)
    if kv_dtype not in DTYPE_BYTES:
        raise TcalcError(f"--kv-dtype: unknown dtype '{kv_dtype}'")
    gpu = get_gpu(gpu_name)
    peak, bw = gpu.peak(dtype), gpu.bandwidth

    def phases(s: ModelSpec) -> tuple[Phase, Phase]:
        p = count_params(s)
        experts = p.sum_where(lambda name: ".ffn.experts." in name)
        # Decode reads only the experts its batch routes to: at most batch · top_k of them.
        used = min(s.n_experts, batch * s.top_k) if s.n_experts else 0
        read = p.total - experts + (experts * used // s.n_experts if s.n_experts else 0)
        kv_seq = math.ceil(kv_cache_elements(s, context) * DTYPE_BYTES[kv_dtype])
        per_token = count_flops(s, context, pattern).total
        pre_flops = batch * context * per_token
        pre_bytes = weight_bytes(p.total, dtype) + batch * kv_seq  # KV cache out
        dec_flops = batch * per_token
        dec_bytes = weight_bytes(read, dtype) + batch * kv_seq  # KV cache in
        return (_phase("prefill", pre_flops, pre_bytes, peak, bw, batch * context),
                _phase("decode", dec_flops, dec_bytes, peak, bw, batch))

    prefill, decode = phases(spec)
    mha = None
    if spec.kv_heads != spec.n_heads:
        mha = phases(spec.replace(n_kv_heads=None))[1]
    return Roofline(gpu.name, dtype, kv_dtype, batch, context, peak, bw, peak / bw, prefill,
                    decode, mha)


def _phase(name: str, flops: int, nbytes: int, peak: float, bw: float, tokens: int) -> Phase:
    seconds = max(flops / peak, nbytes / bw)
    intensity = flops / nbytes
    return Phase(name, flops, nbytes, seconds, intensity,
                 "compute" if intensity >= peak / bw else "memory", tokens / seconds)


# -- one report for all renderers ---------------------------------------------------------

SCAN_LENGTHS = (512, 2048, 8192, 32768, 131072)


@dataclass(frozen=True)
class FlopsReport:
    forward: Breakdown
    seq_len: int
    recompute: str
    training: int
    params: int  # N for 6N: all parameters (active ones for mixture of experts)
    non_embedding: int
    rule_6n: int
    kaplan: int
    pattern: AttentionPattern
    scan: tuple[tuple[int, int, int], ...]  # (T, dense, pattern) score+value FLOPs per token
    run: TrainingRun | None = None
    roofline: Roofline | None = None
    # recurrent hybrids: (T, forward FLOPs/token, the same with every mixer layer as full
    # attention, cache bytes per sequence (bf16 K/V and conv state, the state's own dtype),
    # the all-attention cache)
    hybrid: tuple[tuple[int, int, int, int, int], ...] = ()


def flops_report(spec: ModelSpec, seq_len: int, *, recompute: str = "none",
                 pattern: AttentionPattern = DENSE, gpu: str | None = None, n_gpus: int = 1,
                 tokens: int | None = None, mfu: float | None = None, dtype: str = "bf16",
                 tokens_per_second: float | None = None, batch: int = 1) -> FlopsReport:
    forward = count_flops(spec, seq_len, pattern)
    training = training_flops_per_token(forward, recompute)
    p = count_params(spec)
    n = p.active_total
    embeddings = p.sum_where(lambda name: name.startswith("embed.") or ".embed." in name)
    non_embedding = n - embeddings
    scan: tuple[tuple[int, int, int], ...] = ()
    if pattern.kind != "dense":
        lengths = _scan_lengths(spec, seq_len)
        scan = tuple((t, attention_core(count_flops(spec, t)),
                      attention_core(count_flops(spec, t, pattern))) for t in lengths)
    run = roof = None
    if gpu is not None or tokens is not None:
        run = training_run(training, p.total, gpu, n_gpus, tokens, mfu, dtype,
                           tokens_per_second)
    elif mfu is not None or tokens_per_second is not None:
        raise TcalcError("--mfu and --tokens-per-second need --gpu")
    if gpu is not None:
        roof = roofline(spec, gpu, batch, seq_len, dtype, pattern=pattern)
    return FlopsReport(forward, seq_len, recompute, training, n, non_embedding, rule_6n(n),
                       kaplan_forward(spec, non_embedding, seq_len), pattern, scan, run, roof,
                       hybrid_scan(spec, seq_len))


def _scan_lengths(spec: ModelSpec, seq_len: int) -> list[int]:
    """SCAN_LENGTHS and T, up to what a learned position table allows."""
    limit = spec.max_context or max(*SCAN_LENGTHS, seq_len)
    return sorted(t for t in set(SCAN_LENGTHS) | {seq_len} if t <= limit)


def all_attention(spec: ModelSpec) -> ModelSpec | None:
    """The same model with every recurrent mixer layer as full attention (what a hybrid is
    measured against); None without attention heads to build it from (pure Mamba)."""
    if spec.mixer == "none" or not spec.n_heads:
        return None
    from transformer_calc.plan import parse_pattern

    n = spec.n_layers
    letters = parse_pattern(spec.layer_attention, "FSCNMPX", n, "layer_attention") \
        if spec.layer_attention else ("M",) * n
    runs = " ".join(f"1{'F' if ch in 'MP' else ch}" for ch in letters)
    return spec.replace(layer_attention=runs, mixer="none")


def hybrid_scan(spec: ModelSpec, seq_len: int) -> tuple[tuple[int, int, int, int, int], ...]:
    """Where a hybrid pays off: forward FLOPs per token and the inference cache per sequence
    against its all-attention counterpart, over SCAN_LENGTHS and T."""
    dense = all_attention(spec)
    if dense is None:
        return ()
    from transformer_calc.memory import kv_cache_elements, recurrent_state_elements

    conv, state = recurrent_state_elements(spec)
    state_bytes = 2 * conv + {"fp32": 4}.get(spec.ssm_state_dtype, 2) * state  # bf16 cache
    out = []
    for t in _scan_lengths(spec, seq_len):
        out.append((t, count_flops(spec, t).total, count_flops(dense, t).total,
                    2 * kv_cache_elements(spec, t) + state_bytes,
                    2 * kv_cache_elements(dense, t)))
    return tuple(out)
