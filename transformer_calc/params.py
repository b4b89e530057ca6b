"""count_params(spec) -> Breakdown of trainable parameters. Pure: no I/O, O(1) in model size.

The layouts follow the Hugging Face ``transformers`` modeling code (and ``torch.nn.Transformer``
for Vaswani et al. 2017): one item per tensor kind, with per-layer items repeated over the
stack. Trainable means ``requires_grad``; a tensor shared by two modules (tied embeddings)
counts once, as ``model.parameters()`` yields it once.
"""

from __future__ import annotations

from transformer_calc.breakdown import Breakdown, Item
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


def count_params(spec: ModelSpec) -> Breakdown:
    items: list[Item] = []
    notes: list[str] = []
    V, E = spec.vocab_size, spec.d_model
    H, dh = spec.n_heads, spec.head_dim
    norm_n, norm_why = norm_params(spec)
    enc_dec = spec.arch == "encoder-decoder"

    def add(name: str, count: int, formula: str, expr: str = "", *, repeat: int = 1,
            stack: str = "", note: str = "", active: int | None = None,
            shape: tuple[int, ...] = ()) -> None:
        items.append(Item(name, count, formula, expr, repeat, stack, note, active,
                          shape or ((count,) if count else ())))

    # -- embeddings ------------------------------------------------------------------------
    Ve = spec.embed_dim
    if enc_dec and not spec.tie_encoder_decoder:
        for stack, _ in spec.stacks:
            add(f"{stack}.embed.tokens", V * Ve, "vocab_size × d_model", f"{V} × {Ve}",
                shape=(V, Ve))
    else:
        add("embed.tokens", V * Ve, "vocab_size × d_embed" if Ve != E else "vocab_size × d_model",
            f"{V} × {Ve}", shape=(V, Ve),
            note="one table shared by encoder and decoder" if enc_dec else "")
    if Ve != E:
        # OPT-350M: embeddings narrower than the model, projected in and out (no bias).
        add("embed.project_in", Ve * E, "d_embed × d_model", f"{Ve} × {E}", shape=(E, Ve))
        add("embed.project_out", E * Ve, "d_model × d_embed", f"{E} × {Ve}", shape=(Ve, E))
    pos_stacks = [s for s, _ in spec.stacks] if enc_dec else [""]
    for stack in pos_stacks:
        prefix = f"{stack}." if stack else ""
        if spec.position == "learned":
            P, off = spec.max_positions, spec.position_offset
            if off:
                add(f"{prefix}embed.positions", (P + off) * E, "(max_positions + offset) × d_model",
                    f"({P} + {off}) × {E}", note=f"{off} extra rows, as OPT/BART keep for padding",
                    shape=(P + off, E))
            else:
                add(f"{prefix}embed.positions", P * E, "max_positions × d_model", f"{P} × {E}",
                    shape=(P, E))
        else:
            why = {"sinusoidal": "sinusoidal: computed, not learned",
                   "rope": "RoPE: a rotation computed from the position, nothing learned",
                   "alibi": "ALiBi: a fixed linear bias per head, nothing learned",
                   "relative": "relative: a learned bias inside attention (below), no table here",
                   "none": "no position encoding"}[spec.position]
            add(f"{prefix}embed.positions", 0, "0", "0", note=why)
    if spec.token_types:
        add("embed.token_types", spec.token_types * E, "token_types × d_model",
            f"{spec.token_types} × {E}", shape=(spec.token_types, E))
    if spec.embedding_norm:
        for stack in pos_stacks:
            prefix = f"{stack}." if stack else ""
            add(f"{prefix}embed.norm", norm_n, norm_why, str(norm_n))

    # -- layers ----------------------------------------------------------------------------
    for stack, L in spec.stacks:
        def layer(name: str, count: int, formula: str, expr: str = "", *, note: str = "",
                  active: int | None = None, shape: tuple[int, ...] = (), _s: str = stack,
                  _L: int = L) -> None:
            add(f"{_s}.{name}", count, formula, expr, repeat=_L, stack=_s, note=note,
                active=active, shape=shape)

        if spec.position == "relative":
            # T5: a (buckets × heads) bias table in the first layer only, shared by all layers.
            nb = spec.relative_buckets
            if spec.relative_scope == "first":
                add(f"{stack}.attn.relative_bias", nb * H, "relative_buckets × n_heads",
                    f"{nb} × {H}", note="first layer only, shared by every layer (T5)",
                    shape=(nb, H))
            else:
                layer("attn.relative_bias", nb * H, "relative_buckets × n_heads", f"{nb} × {H}",
                      shape=(nb, H))

        blocks = ["attn", "cross"] if stack == "decoder" and enc_dec else ["attn"]
        for blk in blocks:
            _attention(layer, spec, blk)
        _ffn(layer, spec)
        # Norms: one before (pre) or after (post) each sublayer; same parameters either way.
        n_norms = len(blocks) + 1
        if spec.parallel_block:
            n_norms = spec.parallel_norms
        for blk in (["attn", "cross", "ffn"] if n_norms == 3 else ["attn", "ffn"])[:n_norms]:
            layer(f"{blk}.norm", norm_n, norm_why, str(norm_n),
                  note=f"{spec.norm_position}-norm" + (", shared by attention and FFN"
                                                       if spec.parallel_block and n_norms == 1
                                                       else ""))
        if spec.final_norm:
            add(f"{stack}.final_norm", norm_n, norm_why, str(norm_n))

    # -- heads -----------------------------------------------------------------------------
    if spec.lm_head:
        _vocab_projection(add, spec, "head.lm", notes)
        if spec.lm_head_bias:
            add("head.lm.bias", V, "vocab_size", str(V))
    if spec.pooler:
        add("head.pooler.weight", E * E, "d_model × d_model", f"{E} × {E}", shape=(E, E))
        add("head.pooler.bias", E, "d_model", str(E))
    if spec.mlm_head:
        add("head.mlm.dense.weight", E * E, "d_model × d_model", f"{E} × {E}", shape=(E, E))
        add("head.mlm.dense.bias", E, "d_model", str(E))
        add("head.mlm.norm", norm_n, norm_why, str(norm_n))
        _vocab_projection(add, spec, "head.mlm.decoder", notes)
        add("head.mlm.bias", V, "vocab_size", str(V))
        if not spec.tie_embeddings:
            # transformers 5.x ties decoder.bias to the head's bias together with the weight
            # (_tied_weights_keys); untied, the decoder Linear keeps a bias of its own.
            add("head.mlm.decoder.bias", V, "vocab_size", str(V),
                note="untied decoder keeps its own bias beside head.mlm.bias")

    if spec.note:
        notes.insert(0, spec.note)
    if spec.d_head is None:
        notes.append(f"d_head = d_model / n_heads = {E} / {H} = {dh}: the head count splits "
                     f"d_model, so it does not change the parameter count.")
    if spec.n_experts:
        notes.append(f"mixture of experts: {spec.n_experts} experts, top-{spec.top_k} per token"
                     + (f", {spec.n_shared_experts} shared" if spec.n_shared_experts else "")
                     + "; 'active' counts what one token uses.")
    return Breakdown(
        model=spec.name,
        unit="params",
        items=tuple(items),
        notes=tuple(notes),
        extra={"rule_of_thumb": rule_of_thumb(spec), "rule_of_thumb_formula": RULE_OF_THUMB},
    )


def _vocab_projection(add, spec: ModelSpec, name: str, notes: list[str]) -> None:  # type: ignore[no-untyped-def]
    V, Ve = spec.vocab_size, spec.embed_dim
    if spec.tie_embeddings:
        add(f"{name}.weight", 0, "0 (tied)", "0",
            note=f"tied to the token embedding: saves vocab_size × d_model = {V * Ve:,}")
        notes.append(f"{name}.weight is the token embedding matrix (tied), counted once.")
    else:
        add(f"{name}.weight", V * Ve, "vocab_size × d_model", f"{V} × {Ve}", shape=(V, Ve))


def _attention(layer, spec: ModelSpec, blk: str) -> None:  # type: ignore[no-untyped-def]
    """Q, K, V, O of one attention sublayer (self or cross)."""
    E, H, Hkv, dh = spec.d_model, spec.n_heads, spec.kv_heads, spec.head_dim
    kv_note = "" if Hkv == H else ("multi-query: one K/V head" if Hkv == 1
                                   else f"grouped-query: {Hkv} K/V heads for {H} Q heads")
    fused = "fused with Q, K, V in one matrix; counted by part" if spec.fused_qkv else ""
    layer(f"{blk}.q.weight", E * H * dh, "d_model × (n_heads · d_head)", f"{E} × ({H} · {dh})",
          note=fused, shape=(H * dh, E))
    if spec.bias_q:
        layer(f"{blk}.q.bias", H * dh, "n_heads · d_head", f"{H} · {dh}")
    for p, bias in (("k", spec.bias_k), ("v", spec.bias_v)):
        layer(f"{blk}.{p}.weight", E * Hkv * dh, "d_model × (n_kv_heads · d_head)",
              f"{E} × ({Hkv} · {dh})", note=kv_note, shape=(Hkv * dh, E))
        if bias:
            layer(f"{blk}.{p}.bias", Hkv * dh, "n_kv_heads · d_head", f"{Hkv} · {dh}")
    layer(f"{blk}.o.weight", H * dh * E, "(n_heads · d_head) × d_model", f"({H} · {dh}) × {E}",
          shape=(E, H * dh))
    if spec.bias_o:
        layer(f"{blk}.o.bias", E, "d_model", str(E))


def _ffn(layer, spec: ModelSpec) -> None:  # type: ignore[no-untyped-def]
    E, F = spec.d_model, spec.d_ff
    if spec.ffn == "param_attention":
        # Vaswani et al. 2017, appendix: the FFN replaced by attention over n_p trainable
        # key-value pairs per head; only the query and output projections see the input.
        hp, n_p, dk, dv = spec.pattn_heads, spec.pattn_n, spec.pattn_d_key, spec.pattn_d_value
        layer("ffn.pattn.q.weight", E * hp * dk, "d_model × (h_p · d_pk)", f"{E} × ({hp} · {dk})",
              shape=(hp * dk, E))
        layer("ffn.pattn.keys", hp * n_p * dk, "h_p · n_p · d_pk", f"{hp} · {n_p} · {dk}",
              shape=(hp, n_p, dk))
        layer("ffn.pattn.values", hp * n_p * dv, "h_p · n_p · d_pv", f"{hp} · {n_p} · {dv}",
              shape=(hp, n_p, dv))
        layer("ffn.pattn.o.weight", hp * dv * E, "(h_p · d_pv) × d_model", f"({hp} · {dv}) × {E}",
              shape=(E, hp * dv))
        return
    gated = spec.ffn == "gated"
    # One expert's (or the dense FFN's) tensors: in (and gate) d_model -> d_ff, out d_ff -> d_model.
    parts: list[tuple[str, int, str, str, tuple[int, ...]]] = [
        ("in.weight", E * F, "d_model × d_ff", f"{E} × {F}", (F, E))]
    if gated:
        parts.insert(0, ("gate.weight", E * F, "d_model × d_ff", f"{E} × {F}", (F, E)))
    if spec.bias_ffn_in:
        parts += [("in.bias", F, "d_ff", str(F), (F,))] + (
            [("gate.bias", F, "d_ff", str(F), (F,))] if gated else [])
    parts.append(("out.weight", F * E, "d_ff × d_model", f"{F} × {E}", (E, F)))
    if spec.bias_ffn_out:
        parts.append(("out.bias", E, "d_model", str(E), (E,)))
    if not spec.n_experts:
        for name, n, formula, expr, shape in parts:
            layer(f"ffn.{name}", n, formula, expr, shape=shape)
        return
    X, k, S = spec.n_experts, spec.top_k, spec.n_shared_experts
    layer("ffn.router.weight", E * X, "d_model × n_experts", f"{E} × {X}", shape=(X, E))
    for name, n, formula, expr, shape in parts:
        layer(f"ffn.experts.{name}", X * n, f"n_experts · {formula}", f"{X} · {expr}",
              active=k * n, note=f"top-{k} of {X} active per token", shape=(X, *shape))
    for name, n, formula, expr, shape in parts if S else []:
        layer(f"ffn.shared.{name}", S * n, f"n_shared_experts · {formula}", f"{S} · {expr}",
              shape=(S, *shape))


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
    for i in b.items:
        out[category(i.name)] += i.total
    return out
