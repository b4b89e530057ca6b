"""count_params(spec) -> Breakdown of trainable parameters. Pure: no I/O, O(1) in model size.

The layouts follow the Hugging Face ``transformers`` modeling code (and ``torch.nn.Transformer``
for Vaswani et al. 2017): one item per tensor kind, with per-layer items repeated over the
stack. Trainable means ``requires_grad``; a tensor shared by two modules (tied embeddings)
counts once, as ``model.parameters()`` yields it once.
"""

from __future__ import annotations

from functools import partial

from transformer_calc.breakdown import Breakdown
from transformer_calc.spec import ModelSpec

# Rule of thumb (Kaplan et al. 2020, Sec. 2.1; nanoGPT): embeddings V·E plus 12·E² per layer,
# i.e. 4·E² for Q, K, V, O and 8·E² for an FFN with d_ff = 4·E; biases and norms ignored.
RULE_OF_THUMB = "V·E + 12·L·E²"


def norm_params(spec: ModelSpec) -> tuple[int, str]:
    """Parameters of one norm over d_model, and why."""
    E = spec.d_model
    if spec.norm == "layernorm":
        return 2 * E, "2 · d_model (scale + shift)"
    if spec.norm == "layernorm_nobias":
        return E, "d_model (scale; LayerNorm without bias)"
    return E, "d_model (RMSNorm scale)"


def rule_of_thumb(spec: ModelSpec) -> int:
    V, E, L = spec.vocab_size, spec.d_model, spec.total_layers
    return V * E + 12 * L * E * E


def symbols(spec: ModelSpec, **more: int) -> dict[str, int]:
    """The values of the symbols the formulas use (what ``expr`` shows): the spec's, and
    ``more`` (FLOPs and memory add T, B, bytes per element...)."""
    return more | {
        "vocab_size": spec.vocab_size, "d_model": spec.d_model, "d_embed": spec.embed_dim,
        "n_heads": spec.n_heads, "n_kv_heads": spec.kv_heads, "d_head": spec.head_dim,
        "d_ff": spec.d_ff, "max_positions": spec.max_positions,
        "offset": spec.position_offset, "token_types": spec.token_types,
        "relative_buckets": spec.relative_buckets, "n_experts": spec.n_experts,
        "top_k": spec.top_k, "n_shared_experts": spec.n_shared_experts,
        "h_p": spec.pattn_heads, "n_p": spec.pattn_n, "d_pk": spec.pattn_d_key,
        "d_pv": spec.pattn_d_value}


_NO_POSITION_TABLE = {
    "sinusoidal": "sinusoidal: computed, not learned",
    "rope": "RoPE: a rotation computed from the position, nothing learned",
    "alibi": "ALiBi: a fixed linear bias per head, nothing learned",
    "relative": "relative: a learned bias inside attention (below), no table here",
    "none": "no position encoding"}


def count_params(spec: ModelSpec) -> Breakdown:
    # Rows are Item's fields in order: (name, count, formula, expr, repeat, stack, note,
    # active, shape); expr is left "" and written from the formula when items are read.
    rows: list[tuple] = []  # type: ignore[type-arg]
    add = rows.append
    notes: list[str] = []
    V, E = spec.vocab_size, spec.d_model
    H, dh = spec.n_heads, spec.head_dim
    norm_n, norm_why = norm_params(spec)
    enc_dec = spec.arch == "encoder-decoder"
    stacks = spec.stacks

    # -- embeddings ------------------------------------------------------------------------
    Ve = spec.embed_dim
    table = _token_table(spec)
    if enc_dec and not spec.tie_encoder_decoder:
        for stack, _ in stacks:
            add((f"{stack}.embed.tokens", V * Ve, table, "", 1, "", "", None, (V, Ve)))
    else:
        add(("embed.tokens", V * Ve, table, "", 1, "",
             "one table shared by encoder and decoder" if enc_dec else "", None, (V, Ve)))
    if Ve != E:
        # OPT-350M: embeddings narrower than the model, projected in and out (no bias).
        add(("embed.project_in", Ve * E, "d_embed × d_model", "", 1, "", "", None, (E, Ve)))
        add(("embed.project_out", E * Ve, "d_model × d_embed", "", 1, "", "", None, (Ve, E)))
    prefixes = [f"{s}." for s, _ in stacks] if enc_dec else [""]
    for prefix in prefixes:
        if spec.position == "learned":
            P, off = spec.max_positions, spec.position_offset
            if off:
                add((f"{prefix}embed.positions", (P + off) * E,
                     "(max_positions + offset) × d_model", "", 1, "",
                     f"{off} extra rows, as OPT/BART keep for padding", None, (P + off, E)))
            else:
                add((f"{prefix}embed.positions", P * E, "max_positions × d_model", "", 1, "", "",
                     None, (P, E)))
        else:
            add((f"{prefix}embed.positions", 0, "0", "", 1, "",
                 _NO_POSITION_TABLE[spec.position], None, ()))
    if spec.token_types:
        add(("embed.token_types", spec.token_types * E, "token_types × d_model", "", 1, "", "",
             None, (spec.token_types, E)))
    if spec.embedding_norm:
        for prefix in prefixes:
            add((f"{prefix}embed.norm", norm_n, norm_why, "", 1, "", "", None, ()))

    # -- layers ----------------------------------------------------------------------------
    for stack, L in stacks:
        if spec.position == "relative":
            # T5: a (buckets × heads) bias table in the first layer only, shared by all layers.
            nb = spec.relative_buckets
            first = spec.relative_scope == "first"
            add((f"{stack}.attn.relative_bias", nb * H, "relative_buckets × n_heads", "",
                 1 if first else L, "" if first else stack,
                 "first layer only, shared by every layer (T5)" if first else "", None, (nb, H)))

        blocks = ("attn", "cross") if stack == "decoder" and enc_dec else ("attn",)
        for blk in blocks:
            _attention(add, spec, f"{stack}.{blk}.", stack, L)
        _ffn(add, spec, f"{stack}.ffn.", stack, L)
        # Norms: one before (pre) or after (post) each sublayer; same parameters either way.
        n_norms = spec.parallel_norms if spec.parallel_block else len(blocks) + 1
        note = f"{spec.norm_position}-norm" + (", shared by attention and FFN"
                                               if spec.parallel_block and n_norms == 1 else "")
        for blk in (("attn", "cross", "ffn") if n_norms == 3 else ("attn", "ffn"))[:n_norms]:
            add((f"{stack}.{blk}.norm", norm_n, norm_why, "", L, stack, note, None, ()))
        if spec.final_norm:
            add((f"{stack}.final_norm", norm_n, norm_why, "", 1, "", "", None, ()))

    # -- heads -----------------------------------------------------------------------------
    if spec.lm_head:
        _vocab_projection(add, spec, "head.lm", notes)
        if spec.lm_head_bias:
            add(("head.lm.bias", V, "vocab_size", "", 1, "", "", None, ()))
    if spec.pooler:
        add(("head.pooler.weight", E * E, "d_model × d_model", "", 1, "", "", None, (E, E)))
        add(("head.pooler.bias", E, "d_model", "", 1, "", "", None, ()))
    if spec.mlm_head:
        add(("head.mlm.dense.weight", E * E, "d_model × d_model", "", 1, "", "", None, (E, E)))
        add(("head.mlm.dense.bias", E, "d_model", "", 1, "", "", None, ()))
        add(("head.mlm.norm", norm_n, norm_why, "", 1, "", "", None, ()))
        _vocab_projection(add, spec, "head.mlm.decoder", notes)
        add(("head.mlm.bias", V, "vocab_size", "", 1, "", "", None, ()))
        if not spec.tie_embeddings:
            # transformers 5.x ties decoder.bias to the head's bias together with the weight
            # (_tied_weights_keys); untied, the decoder Linear keeps a bias of its own.
            add(("head.mlm.decoder.bias", V, "vocab_size", "", 1, "",
                 "untied decoder keeps its own bias beside head.mlm.bias", None, ()))

    if spec.note:
        notes.insert(0, spec.note)
    if spec.d_head is None:
        notes.append(f"d_head = d_model / n_heads = {E} / {H} = {dh}: the head count splits "
                     f"d_model, so it does not change the parameter count.")
    if spec.n_experts:
        notes.append(f"mixture of experts: {spec.n_experts} experts, top-{spec.top_k} per token"
                     + (f", {spec.n_shared_experts} shared" if spec.n_shared_experts else "")
                     + "; 'active' counts what one token uses.")
    return Breakdown(spec.name, "params", tuple(rows), tuple(notes),
                     {"rule_of_thumb": rule_of_thumb(spec), "rule_of_thumb_formula": RULE_OF_THUMB},
                     partial(symbols, spec))


def _token_table(spec: ModelSpec) -> str:
    """The formula of a vocabulary-sized matrix (token embedding, untied LM head)."""
    return "vocab_size × d_embed" if spec.embed_dim != spec.d_model else "vocab_size × d_model"


def _vocab_projection(add, spec: ModelSpec, name: str, notes: list[str]) -> None:  # type: ignore[no-untyped-def]
    V, Ve = spec.vocab_size, spec.embed_dim
    if spec.tie_embeddings:
        add((f"{name}.weight", 0, "0 (tied)", "", 1, "", "tied to the token embedding: saves "
             f"{_token_table(spec)} = {V * Ve:,}", None, ()))
        notes.append(f"{name}.weight is the token embedding matrix (tied), counted once.")
    else:
        add((f"{name}.weight", V * Ve, _token_table(spec), "", 1, "", "", None, (V, Ve)))


def _attention(add, spec: ModelSpec, p: str, stack: str, L: int) -> None:  # type: ignore[no-untyped-def]
    """Q, K, V, O of one attention sublayer (self or cross); ``p`` is its name prefix."""
    E, H, Hkv, dh = spec.d_model, spec.n_heads, spec.kv_heads, spec.head_dim
    qw, kvw = H * dh, Hkv * dh
    kv_note = "" if Hkv == H else ("multi-query: one K/V head" if Hkv == 1
                                   else f"grouped-query: {Hkv} K/V heads for {H} Q heads")
    add((p + "q.weight", E * qw, "d_model × (n_heads · d_head)", "", L, stack,
         "fused with Q, K, V in one matrix; counted by part" if spec.fused_qkv else "", None,
         (qw, E)))
    if spec.bias_q:
        add((p + "q.bias", qw, "n_heads · d_head", "", L, stack, "", None, ()))
    add((p + "k.weight", E * kvw, "d_model × (n_kv_heads · d_head)", "", L, stack, kv_note, None,
         (kvw, E)))
    if spec.bias_k:
        add((p + "k.bias", kvw, "n_kv_heads · d_head", "", L, stack, "", None, ()))
    add((p + "v.weight", E * kvw, "d_model × (n_kv_heads · d_head)", "", L, stack, kv_note, None,
         (kvw, E)))
    if spec.bias_v:
        add((p + "v.bias", kvw, "n_kv_heads · d_head", "", L, stack, "", None, ()))
    add((p + "o.weight", qw * E, "(n_heads · d_head) × d_model", "", L, stack, "", None, (E, qw)))
    if spec.bias_o:
        add((p + "o.bias", E, "d_model", "", L, stack, "", None, ()))


def _ffn(add, spec: ModelSpec, p: str, stack: str, L: int) -> None:  # type: ignore[no-untyped-def]
    E, F = spec.d_model, spec.d_ff
    if spec.ffn == "param_attention":
        # Vaswani et al. 2017, appendix: the FFN replaced by attention over n_p trainable
        # key-value pairs per head; only the query and output projections see the input.
        hp, n_p, dk, dv = spec.pattn_heads, spec.pattn_n, spec.pattn_d_key, spec.pattn_d_value
        add((p + "pattn.q.weight", E * hp * dk, "d_model × (h_p · d_pk)", "", L, stack, "", None,
             (hp * dk, E)))
        add((p + "pattn.keys", hp * n_p * dk, "h_p · n_p · d_pk", "", L, stack, "", None,
             (hp, n_p, dk)))
        add((p + "pattn.values", hp * n_p * dv, "h_p · n_p · d_pv", "", L, stack, "", None,
             (hp, n_p, dv)))
        add((p + "pattn.o.weight", hp * dv * E, "(h_p · d_pv) × d_model", "", L, stack, "", None,
             (E, hp * dv)))
        return
    gated = spec.ffn == "gated"
    # One expert's (or the dense FFN's) tensors: in (and gate) d_model -> d_ff, out d_ff -> d_model.
    parts: list[tuple[str, int, str, tuple[int, ...]]] = [
        ("in.weight", E * F, "d_model × d_ff", (F, E))]
    if gated:
        parts.insert(0, ("gate.weight", E * F, "d_model × d_ff", (F, E)))
    if spec.bias_ffn_in:
        parts.append(("in.bias", F, "d_ff", ()))
        if gated:
            parts.append(("gate.bias", F, "d_ff", ()))
    parts.append(("out.weight", F * E, "d_ff × d_model", (E, F)))
    if spec.bias_ffn_out:
        parts.append(("out.bias", E, "d_model", ()))
    if not spec.n_experts:
        for name, n, formula, shape in parts:
            add((p + name, n, formula, "", L, stack, "", None, shape))
        return
    X, k, S = spec.n_experts, spec.top_k, spec.n_shared_experts
    add((p + "router.weight", E * X, "d_model × n_experts", "", L, stack, "", None, (X, E)))
    note = f"top-{k} of {X} active per token"
    for name, n, formula, shape in parts:
        add((p + "experts." + name, X * n, "n_experts · " + formula, "", L, stack, note, k * n,
             (X, *shape) if shape else (X, n)))
    for name, n, formula, shape in parts if S else []:
        add((p + "shared." + name, S * n, "n_shared_experts · " + formula, "", L, stack, "",
             None, (S, *shape) if shape else (S, n)))


CATEGORIES = ("embeddings", "attention", "ffn", "norms", "heads")


def category(name: str) -> str:
    """Which part of the model an item of count_params belongs to."""
    dotted = f".{name}"
    if dotted.endswith("norm") or ".norm." in dotted or dotted.endswith(".norm"):
        return "norms"
    if name.startswith("head."):
        return "heads"
    if ".embed." in dotted:
        return "embeddings"
    if ".attn." in dotted or ".cross." in dotted:
        return "attention"
    return "ffn"


def by_category(b: Breakdown) -> dict[str, int]:
    out = dict.fromkeys(CATEGORIES, 0)
    for r in b.rows:
        out[category(r[0])] += r[1] * r[4]  # name, count × repeat
    return out
