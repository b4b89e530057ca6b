"""count_params(spec) -> Breakdown of trainable parameters. Pure: no I/O, O(1) in model size.

The layouts follow the Hugging Face ``transformers`` modeling code (and ``torch.nn.Transformer``
for Vaswani et al. 2017): one item per tensor kind, with per-layer items repeated over the
stack. Trainable means ``requires_grad``; a tensor shared by two modules (tied embeddings)
counts once, as ``model.parameters()`` yields it once.
"""

from __future__ import annotations

from functools import partial

from transformer_calc.breakdown import Breakdown
from transformer_calc.plan import FFN, Attention, Mixer, describe, plan_of
from transformer_calc.spec import ModelSpec

# Rule of thumb (Kaplan et al. 2020, Sec. 2.1; nanoGPT): embeddings V·E plus 12·E² per layer,
# i.e. 4·E² for Q, K, V, O and 8·E² for an FFN with d_ff = 4·E; biases and norms ignored.
RULE_OF_THUMB = "V·E + 12·L·E²"


def norm_params(spec: ModelSpec) -> tuple[int, str]:
    """Parameters of one norm over d_model, and why."""
    return norm_of(spec.norm, spec.d_model)


def norm_of(kind: str, width: int, sym: str = "d_model") -> tuple[int, str]:
    """Parameters of one norm of ``kind`` over ``width`` (shown as ``sym``), and why."""
    if kind == "layernorm":
        return 2 * width, f"2 · {sym} (scale + shift)"
    if kind.endswith("_noaffine"):
        return 0, f"0 ({kind.split('_')[0]} without parameters, over {sym})"
    if kind == "layernorm_nobias":
        return width, f"{sym} (scale; LayerNorm without bias)"
    return width, f"{sym} (RMSNorm scale)"


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
        "d_pv": spec.pattn_d_value, "d_ff_expert": spec.expert_ff,
        "d_ff_shared": spec.shared_ff, "q_lora_rank": spec.q_lora_rank,
        "kv_lora_rank": spec.kv_lora_rank, "d_nope": spec.qk_nope_head_dim,
        "d_rope": spec.qk_rope_head_dim, "d_v": spec.v_head_dim,
        "rel_embeddings": spec.rel_embeddings, "index_heads": spec.index_heads,
        "encoder_vocab_size": spec.encoder_vocab_size or spec.vocab_size,
        "mlm_width": spec.head_width, "extra_token_rows": spec.extra_token_rows,
        "index_head_dim": spec.index_head_dim, "index_topk": spec.index_topk,
        "altup_inputs": spec.altup_inputs, "laurel_rank": spec.laurel_rank,
        "hc_streams": spec.hc_streams, "compress_csa": spec.compress_csa,
        "compress_hca": spec.compress_hca, "csa_index_heads": spec.csa_index_heads,
        "csa_index_dim": spec.csa_index_dim, "csa_index_topk": spec.csa_index_topk,
        "o_groups": spec.o_groups, "o_lora_rank": spec.o_lora_rank,
        "num_labels": spec.num_labels, "tower_d_model": spec.tower_d_model,
        "tower_d_ff": spec.tower_d_ff, "tower_channels": spec.tower_channels,
        "tower_patch": spec.tower_patch, "tower_temporal": spec.tower_temporal,
        "tower_positions": spec.tower_positions, "tower_merge": spec.tower_merge,
        "tower_out": spec.tower_out or spec.tower_d_model, "tower_tiles": spec.tower_tiles,
        "tower_aspect_ratios": spec.tower_aspect_ratios, "tower_kv_heads": spec.tower_kv_heads,
        "value_conv": spec.value_conv, "span_conv": spec.span_conv,
        "entity_vocab": spec.entity_vocab, "entity_width": spec.entity_width,
        "lang_adapters": spec.lang_adapters, "adapter_width": spec.adapter_width,
        "head_bottleneck": spec.head_bottleneck,
        "tower_heads": spec.tower_heads, "projector_d_ff": spec.projector_d_ff,
        "tower_audio_in": spec.tower_audio_in, "tower_conv_channels": spec.tower_conv_channels,
        "tower_grid": spec.tower_grid, "tower_window": spec.tower_window,
        "tower_audio_d_model": spec.tower_audio_d_model,
        "tower_audio_heads": spec.tower_audio_heads,
        "tower_audio_kernel": spec.tower_audio_kernel,
        "tower_audio_subsample": spec.tower_audio_subsample,
        "tower_audio_channels": spec.tower_audio_channels,
        "tower_head_dim": spec.tower_head_dim or (
            spec.tower_d_model // spec.tower_heads if spec.tower_heads else 0)}


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
    table = token_table(spec)
    if enc_dec and not spec.tie_encoder_decoder:
        for stack, _ in stacks:
            if stack == "encoder" and spec.encoder_vocab_size not in (None, V):
                Vs = spec.encoder_vocab_size  # FSMT: the source language's vocabulary
                add((f"{stack}.embed.tokens", Vs * Ve, table.replace("vocab_size",
                                                                     "encoder_vocab_size"),
                     "", 1, "", "", None, (Vs, Ve)))
                continue
            add((f"{stack}.embed.tokens", V * Ve, table, "", 1, "", "", None, (V, Ve)))
    elif spec.extra_token_rows:  # Mllama: 8 image-token rows the head does not predict
        Vx = V + spec.extra_token_rows
        add(("embed.tokens", Vx * Ve, table.replace("vocab_size", "(vocab_size + "
                                                     "extra_token_rows)"), "", 1, "",
             f"{spec.extra_token_rows} rows beyond the vocabulary", None, (Vx, Ve)))
    else:
        add(("embed.tokens", V * Ve, table, "", 1, "",
             "one table shared by encoder and decoder" if enc_dec else "", None, (V, Ve)))
    # ALBERT, ELECTRA, RemBERT: every table and the embedding norm at d_embed, then one
    # biased projection to d_model (embeddings_project, embedding_hidden_mapping_in)
    Wp, wsym = (Ve, "d_embed") if spec.embed_factorized else (E, "d_model")
    if spec.embed_factorized:  # ALBERT and RemBERT have it even when the widths agree
        add(("embed.project_in", Ve * E, "d_embed × d_model", "", 1, "", "", None, (E, Ve)))
        add(("embed.project_in.bias", E, "d_model", "", 1, "", "", None, ()))
    elif Ve != E:
        # OPT-350M: embeddings narrower than the model, projected in and out (no bias).
        add(("embed.project_in", Ve * E, "d_embed × d_model", "", 1, "", "", None, (E, Ve)))
        add(("embed.project_out", E * Ve, "d_model × d_embed", "", 1, "", "", None, (Ve, E)))
    for i, (rows_n, width) in enumerate(spec.side_tables):
        # RoCBERT: its shape and pronunciation tables beside the word table
        add((f"embed.side_{i}", rows_n * width, "rows × width (a side table)", "", 1, "", "",
             None, (rows_n, width)))
    if spec.side_concat:
        cin = E + sum(w for _, w in spec.side_tables)
        add(("embed.project_side", cin * E, "(d_model + side widths) × d_model", "", 1, "",
             "the word and side vectors, concatenated, back to d_model", None, (E, cin)))
        add(("embed.project_side.bias", E, "d_model", "", 1, "", "", None, ()))
    if spec.per_layer_input:
        # Gemma 4's per-layer embeddings (Gemma4TextModel): a table of per_layer_vocab rows
        # holding every layer's vector, a projection of the embeddings to all of them and a
        # norm over one layer's vector
        P, Vp, Lp = spec.per_layer_input, spec.per_layer_vocab, spec.n_layers
        add(("embed.per_layer", Vp * Lp * P, "per_layer_vocab × (n_layers · per_layer_input)",
             "", 1, "", "", None, (Vp, Lp * P)))
        add(("embed.project_per_layer", E * Lp * P, "d_model × (n_layers · per_layer_input)",
             "", 1, "", "", None, (Lp * P, E)))
        n_ple, why_ple = norm_of(spec.norm, P, "per_layer_input")
        add(("embed.per_layer_norm", n_ple, why_ple, "", 1, "", "", None, ()))
    if spec.altup_inputs:
        # Gemma3nTextModel.altup_projections: the embeddings to each further stream
        add(("embed.project_altup", E * E, "d_model × d_model", "",
             spec.altup_inputs - 1, "", "one per AltUp stream after the first", None, (E, E)))
    prefixes = [f"{s}." for s, _ in stacks] if enc_dec else [""]
    for prefix in prefixes:
        if spec.position == "learned":
            P, off = spec.max_positions, spec.position_offset
            if off:
                add((f"{prefix}embed.positions", (P + off) * E,
                     "(max_positions + offset) × d_model", "", 1, "",
                     f"{off} extra rows, as OPT/BART keep for padding", None, (P + off, E)))
            else:
                add((f"{prefix}embed.positions", P * Wp, f"max_positions × {wsym}", "", 1, "",
                     "", None, (P, Wp)))
        else:
            add((f"{prefix}embed.positions", 0, "0", "", 1, "",
                 _NO_POSITION_TABLE[spec.position], None, ()))
    if spec.token_types:
        add(("embed.token_types", spec.token_types * Wp, f"token_types × {wsym}", "", 1, "",
             "", None, (spec.token_types, Wp)))
    if spec.mask_embedding:  # XLNetModel.mask_emb, (1, 1, d_model)
        add(("embed.mask", E, "d_model", "", 1, "", "the masked tokens' stand-in (XLNet)", None,
             (1, 1, E)))
    if spec.layout_positions:  # LayoutLMEmbeddings: x, y, h and w tables, summed in
        n = spec.layout_positions
        add(("embed.layout_positions", 4 * n * E, "4 · layout_positions × d_model", "", 1, "",
             "x, y, height and width of each token's box", None, (4, n, E)))
    if spec.embedding_norm:
        n_embed_norm, why_embed_norm = norm_of(spec.norm, Wp, wsym)
        for prefix in prefixes:
            add((f"{prefix}embed.norm", n_embed_norm, why_embed_norm, "", 1, "", "", None, ()))

    if spec.entity_vocab:
        _entity_embeddings(add, spec, (norm_n, norm_why))

    # -- layers: walked from the layer plan ------------------------------------------------
    outer = spec.qk_final_norm  # the QK-norms' and the final norm's kind (ESMC)
    for st in plan_of(spec).stacks:
        L = st.layers
        if spec.position == "relative" or spec.relative_bias:
            # T5: a (buckets × heads) bias table in the first layer only, shared by all layers
            # (MPNet: the encoder's, beside its learned position table).
            nb = spec.relative_buckets
            first = spec.relative_scope == "first"
            add((f"{st.name}.attn.relative_bias", nb * H, "relative_buckets × n_heads", "",
                 1 if first else L, "" if first else st.name,
                 "first layer only, shared by every layer (T5)" if first else "", None, (nb, H)))
            if spec.encoder_global_block and st.name == "encoder":
                # LongT5TransientGlobalAttention: the global tokens' own bias table, in the
                # first layer (global_relative_attention_bias)
                add((f"{st.name}.attn.global_relative_bias", nb * H, "relative_buckets × "
                     "n_heads", "", 1, "", "first layer only: the global tokens' (LongT5)",
                     None, (nb, H)))
        if spec.rel_embeddings:
            # DeBERTa-v2/v3 (DebertaV2Encoder.rel_embeddings): one table for every layer
            R = spec.rel_embeddings
            add((f"{st.name}.attn.relative_embeddings", R * E, "rel_embeddings × d_model", "", 1,
                 "", "shared by every layer (DeBERTa)", None, (R, E)))
            if spec.rel_embeddings_norm:
                add((f"{st.name}.attn.relative_embeddings.norm", norm_n, norm_why, "", 1, "",
                     "", None, ()))
        for g in st.groups:
            blk = g.block
            # ALBERT: layer_groups sets of weights, each run by n_layers / layer_groups layers
            n = g.weights
            if blk.attn is not None:
                _attention(add, blk.attn, outer if outer != "same" else blk.norm, E,
                           f"{g.name}.attn.", g.name, n)
                _attention_extras(add, spec, f"{g.name}.attn.", g.name, n)
            if blk.mixer is not None:
                _recurrent(add, blk.mixer, blk.norm, E, f"{g.name}.mixer.", g.name, n)
            for which in _position_projections(spec) if spec.rel_projections else ():
                add((f"{g.name}.attn.{which}.weight", E * E, "d_model × d_model", "", n,
                     g.name, "DeBERTa: position projection (share_att_key false)", None, (E, E)))
                if which == "pos_query" or spec.rel_key_bias:
                    add((f"{g.name}.attn.{which}.bias", E, "d_model", "", n, g.name, "", None,
                         ()))
            if blk.cross is not None:
                _attention(add, blk.cross, blk.norm, E, f"{g.name}.cross.", g.name, n)
            if blk.idle_cross is not None:
                _attention(add, blk.idle_cross, blk.norm, E, f"{g.name}.cross.", g.name,
                           n)
                add((f"{g.name}.cross.norm", norm_n, norm_why, "", n, g.name,
                     "built, never run by a decoder alone (no encoder states)", None, ()))
            if blk.ffn is not None:
                _ffn(add, blk.ffn, E, f"{g.name}.ffn.", g.name, n, blk.norm)
            if spec.fourier_mixer:  # FNetFourierTransform's output LayerNorm
                add((f"{g.name}.mixer.norm", norm_n, norm_why, "", n, g.name,
                     "after the Fourier mixing (FNet)", None, ()))
            if spec.lang_adapters:
                _lang_adapters(add, spec, f"{g.name}.adapters.", g.name, n, (norm_n, norm_why))
            if blk.ple:
                # Gemma4TextDecoderLayer: per_layer_input_gate, per_layer_projection,
                # post_per_layer_input_norm
                _down_up(add, f"{g.name}.ple.", ("gate", "project"), E, blk.ple,
                         "per_layer_input", "gates the layer's own embedding", g.name, n,
                         (norm_n, norm_why))
            if blk.altup:
                # Gemma3nTextAltUp: modality_router, prediction_coefs, correction_coefs
                # (nn.Linear each, no bias), correct_output_scale and router_norm
                N = blk.altup
                add((f"{g.name}.altup.router.weight", N * E, "altup_inputs × d_model", "", n,
                     g.name, "AltUp's router over the first stream", None, (N, E)))
                add((f"{g.name}.altup.predict.weight", N ** 3, "altup_inputs² × altup_inputs",
                     "", n, g.name, "a stream-mixing matrix per token, from the router",
                     None, (N * N, N)))
                add((f"{g.name}.altup.correct.weight", N * N, "altup_inputs × altup_inputs",
                     "", n, g.name, "", None, (N, N)))
                add((f"{g.name}.altup.output_scale", E, "d_model", "", n, g.name, "", None,
                     ()))
                add((f"{g.name}.altup.router_norm", norm_n, norm_why, "", n, g.name, "", None,
                     ()))
            if blk.hc:
                # DeepseekV4HyperConnection before attention and before the FFN: fn projects
                # the flattened streams to (2 + N)·N weights (pre, post, the N × N mix), a
                # bias for each, and three scales
                N = blk.hc
                for sub in ("attn_hc", "ffn_hc"):
                    add((f"{g.name}.{sub}.fn", (2 + N) * N * N * E, "(2 + hc_streams) · "
                         "hc_streams × (hc_streams · d_model)", "", n, g.name, "", None,
                         ((2 + N) * N, N * E)))
                    add((f"{g.name}.{sub}.base", (2 + N) * N + 3, "(2 + hc_streams) · "
                         "hc_streams + 3 (biases and scales)", "", n, g.name, "", None, ()))
            if blk.laurel:
                # Gemma3nTextLaurelBlock: linear_left, linear_right, post_laurel_norm
                _down_up(add, f"{g.name}.laurel.", ("left", "right"), E, blk.laurel,
                         "laurel_rank", "LAuReL: a low-rank path beside the attention", g.name,
                         n, (norm_n, norm_why))
            for norm in blk.norms:
                bare = norm == "attn.norm" and g.name == st.bare_first
                add((f"{g.name}.{norm}", norm_n, norm_why, "", n - bare, g.name,
                     "none in the first layer (nn.Identity)" if bare else blk.norm_note,
                     None, ()))
        if st.idle is not None:
            g, blk = st.idle, st.idle.block
            note = "built, skipped by a text-only forward"
            if blk.cross is not None:
                _attention(add, blk.cross, blk.norm, E, f"{g.name}.cross.", g.name, g.count)
            add((f"{g.name}.gates", 2 * 1, "2 (tanh gates on the attention and the FFN)", "",
                 g.count, g.name, note, None, ()))
            if blk.ffn is not None:
                _ffn(add, blk.ffn, E, f"{g.name}.ffn.", g.name, g.count, blk.norm)
            for norm in blk.norms:
                add((f"{g.name}.{norm}", norm_n, norm_why, "", g.count, g.name, note, None, ()))
        if st.last_o_bias:
            # GPTNeoXJapaneseAttention(use_bias=layer_number == num_hidden_layers - 1)
            add((f"{st.last_o_bias}.attn.o.bias", E, "d_model", "", 1, st.last_o_bias,
                 "the last layer's only", None, ()))
        if st.final_norm:
            add((f"{st.name}.final_norm", *(norm_of(outer, E) if outer != "same"
                                             else (norm_n, norm_why)), "", 1, "", "", None, ()))

    # -- heads -----------------------------------------------------------------------------
    if spec.head_bottleneck:  # UltrabertPredictionHead: linear1, linear2 (no biases)
        R = spec.head_bottleneck
        add(("head.bottleneck.down", E * R, "d_model × head_bottleneck", "", 1, "", "", None,
             (R, E)))
        add(("head.bottleneck.up", R * E, "head_bottleneck × d_model", "", 1, "", "", None,
             (E, R)))
    if spec.lm_head:
        _vocab_projection(add, spec, "head.lm", notes)
        if spec.lm_head_bias:
            add(("head.lm.bias", V, "vocab_size", "", 1, "", "", None, ()))
    if spec.hc_streams:
        # DeepseekV4HyperHead: the final collapse of the streams (hc_fn, hc_base, hc_scale)
        N = spec.hc_streams
        add(("head.hc.fn", N * N * E, "hc_streams × (hc_streams · d_model)", "", 1, "", "",
             None, (N, N * E)))
        add(("head.hc.base", N + 1, "hc_streams + 1 (biases and a scale)", "", 1, "", "",
             None, ()))
    if spec.altup_inputs:
        # Gemma3nTextModel.altup_unembed_projections: each further stream back, before the
        # streams are averaged and normed
        add(("head.altup_unembed", E * E, "d_model × d_model", "", spec.altup_inputs - 1, "",
             "one per AltUp stream after the first", None, (E, E)))
    if spec.pooler:
        add(("head.pooler.weight", E * E, "d_model × d_model", "", 1, "", "", None, (E, E)))
        add(("head.pooler.bias", E, "d_model", "", 1, "", "", None, ()))
    if spec.mlm_head:
        W = spec.head_width
        hsym = "d_model" if W == E else "mlm_width" if spec.mlm_width else "d_embed"
        add(("head.mlm.dense.weight", E * W, f"d_model × {hsym}", "", 1, "", "", None, (W, E)))
        if spec.mlm_dense_bias:
            add(("head.mlm.dense.bias", W, hsym, "", 1, "", "", None, ()))
        n_head_norm, why_head_norm = norm_of(spec.norm, W, hsym)
        add(("head.mlm.norm", n_head_norm, why_head_norm, "", 1, "", "", None, ()))
        if spec.mlm_decoder_untied:  # LukeForMaskedLM: its word decoder is never tied
            add(("head.mlm.decoder.weight", V * W, "vocab_size × d_model", "", 1, "",
                 "never tied to the token table", None, (V, W)))
        elif Ve != W and not spec.tie_embeddings:  # RemBERT: the decoder reads mlm_width
            add(("head.mlm.decoder.weight", V * W, "vocab_size × mlm_width", "", 1, "", "",
                 None, (V, W)))
        else:
            _vocab_projection(add, spec, "head.mlm.decoder", notes)
        if spec.mlm_bias != "none":
            add(("head.mlm.bias", V, "vocab_size", "", 1, "",
                 "the decoder's own" if spec.mlm_bias == "decoder" else "", None, ()))
        if not spec.tie_embeddings and spec.mlm_bias == "bert":
            # transformers 5.x ties decoder.bias to the head's bias together with the weight
            # (_tied_weights_keys); untied, the decoder Linear keeps a bias of its own.
            add(("head.mlm.decoder.bias", V, "vocab_size", "", 1, "",
                 "untied decoder keeps its own bias beside head.mlm.bias", None, ()))
    if spec.entity_head:
        _entity_head(add, spec)
    if spec.classifier != "none":
        _classifier(add, spec, norm_n, norm_why)
    if spec.tower != "none" or spec.tower_audio_in or spec.tower_audio_layers:
        _tower(spec, rows, notes)

    if spec.note:
        notes.insert(0, spec.note)
    if spec.idle_cross_layers:
        notes.append(f"{spec.idle_cross_layers} cross-attention layers are counted: built, "
                     "they are skipped without image states (no FLOPs, activations or "
                     "cache)")
    if spec.idle_cross_attention:
        notes.append("each layer's cross-attention (and its norm) is counted: the decoder "
                     "alone builds it but, without encoder states, never runs it (no FLOPs, "
                     "activations or cache)")
    if spec.d_head is None and not spec.mla and H:
        if spec.kv_heads == H:
            notes.append(f"d_head = d_model / n_heads = {E} / {H} = {dh}: the head count "
                         "splits d_model, so it does not change the parameter count.")
        else:
            notes.append(f"d_head = d_model / n_heads = {E} / {H} = {dh}: K and V are "
                         f"n_kv_heads · d_head = {spec.kv_heads * dh} wide, so with n_kv_heads "
                         "fixed the head count changes the parameter count.")
    if spec.n_experts and spec.unrunnable:
        notes.append(f"mixture of experts: {spec.n_experts} experts, the number each token "
                     "uses unset, so no active count: " + spec.unrunnable)
    elif spec.n_experts:
        notes.append(f"mixture of experts: {spec.n_experts} experts, top-{spec.top_k} per token"
                     + (f", {spec.n_shared_experts} shared" if spec.n_shared_experts else "")
                     + "; 'active' counts what one token uses.")
    if spec.zero_experts:
        unused = sum([r[1] * r[4] for r in rows
                      if r[0].endswith(".experts.zero_gate_up.weight")])
        notes.append(f"{spec.zero_experts} zero-computation experts: a token routed to one "
                     "computes nothing, so the active count (top-k real experts) is an upper "
                     f"bound; transformers 5.23 builds gate/up weights for them, {unused:,} "
                     "parameters no checkpoint holds (counted, as transformers instantiates "
                     "them)")
    plan = plan_of(spec)
    if len(plan.stacks[-1].groups) > 1 or len(plan.stacks[0].groups) > 1:
        notes += describe(plan)
    if spec.attention_mechanism in ("performer", "linear"):
        notes.append("Performer's random features (m × d_head per layer) are a buffer, redrawn, "
                     "not a parameter" if spec.attention_mechanism == "performer" else
                     "linear attention's feature map (elu + 1) has no parameters")
    extra: dict[str, int | float | str] = {"rule_of_thumb": rule_of_thumb(spec),
                                           "rule_of_thumb_formula": RULE_OF_THUMB}
    if spec.mtp_layers:
        extra |= _mtp(spec, rows, norm_n, notes)
    return Breakdown(spec.name, "params", tuple(rows), tuple(notes), extra,
                     partial(symbols, spec))


def _tower(spec: ModelSpec, rows: list[tuple], notes: list[str]) -> None:  # type: ignore[type-arg]
    """The encoder tower and its projector (towers.py), before the language model's rows, and
    a note with each part's total."""
    from transformer_calc.towers import tower_rows

    language = sum([r[1] * r[4] for r in rows])
    tower = tower_rows(spec)
    rows[:0] = tower
    parts = {"tower": 0, "projector": 0}
    for r in tower:
        parts[r[0].split(".")[0]] += r[1] * r[4]
    notes.append((f"{spec.tower} tower {parts['tower']:,}" if spec.tower != "none" else
                  "no tower")
                 + (f" + projector {parts['projector']:,}" if parts["projector"] else "")
                 + f" + language model {language:,}; tcalc's FLOPs, activations and KV cache "
                 "are the language model's on text tokens (the tower's are not modelled)")


def _classifier(add, spec: ModelSpec, norm_n: int,  # type: ignore[no-untyped-def]
                norm_why: str) -> None:
    """The head of a sequence/token classification or question-answering class: a linear
    layer to num_labels (GenericForSequenceClassification's score, BertForTokenClassification's
    classifier, qa_outputs), after a biased d_model × d_model dense (RobertaClassificationHead,
    BartClassificationHead, DeBERTa's ContextPooler) and a norm (ModernBertPredictionHead)."""
    E, n = spec.d_model, spec.num_labels
    if spec.classifier in ("dense", "dense_norm"):
        add(("head.classifier.dense.weight", E * E, "d_model × d_model", "", 1, "", "", None,
             (E, E)))
        if spec.classifier == "dense" or spec.mlm_dense_bias:
            add(("head.classifier.dense.bias", E, "d_model", "", 1, "", "", None, ()))
        if spec.classifier == "dense_norm":
            add(("head.classifier.norm", norm_n, norm_why, "", 1, "", "", None, ()))
    add(("head.classifier.weight", E * n, "d_model × num_labels", "", 1, "", "", None, (n, E)))
    if spec.classifier_bias:
        add(("head.classifier.bias", n, "num_labels", "", 1, "", "", None, ()))


def _attention_extras(add, spec: ModelSpec, p: str, group: str,  # type: ignore[no-untyped-def]
                      n: int) -> None:
    """The attention's tensors beyond Q, K, V and O that some encoders add, per layer."""
    E, H, dh = spec.d_model, spec.n_heads, spec.head_dim
    if spec.entity_queries:
        # LukeSelfAttention (use_entity_aware_attention): w2e_query, e2w_query, e2e_query
        for which in ("w2e_query", "e2w_query", "e2e_query"):
            add((f"{p}{which}.weight", E * H * dh, "d_model × (n_heads · d_head)", "", n,
                 group, "an entity-aware query (LUKE)", None, (H * dh, E)))
            add((f"{p}{which}.bias", H * dh, "n_heads · d_head", "", n, group, "", None, ()))
    if spec.global_qkv:
        # LongformerSelfAttention: query_global, key_global, value_global (nn.Linear)
        for which in ("query_global", "key_global", "value_global"):
            add((f"{p}{which}.weight", E * H * dh, "d_model × (n_heads · d_head)", "", n, group,
                 "global attention's own projection (Longformer)", None, (H * dh, E)))
            add((f"{p}{which}.bias", H * dh, "n_heads · d_head", "", n, group, "", None, ()))
    if spec.xl_relative:
        # XLNetRelativeAttention (r, r_w_bias, r_r_bias, r_s_bias, seg_embed); Funnel's
        # FunnelRelMultiheadAttention names them r_kernel, r_w_bias, r_r_bias, r_s_bias,
        # seg_embed, the same shapes
        add((f"{p}relative.weight", E * H * dh, "d_model × (n_heads · d_head)", "", n, group,
             "projects the relative positions' encodings (no bias)", None, (E, H, dh)))
        add((f"{p}relative.biases", 3 * H * dh, "3 · n_heads · d_head", "", n, group,
             "content, position and segment biases", None, (3, H, dh)))
        add((f"{p}segment_embed", 2 * H * dh, "2 · n_heads · d_head", "", n, group,
             "same and different segment", None, (2, H, dh)))
    if spec.span_conv:
        # ConvBertSelfAttention: key_conv_attn_layer (SeparableConv1D: a depthwise kernel per
        # input channel, a pointwise projection, a bias), conv_kernel_layer, conv_out_layer;
        # ConvBertSelfOutput.dense reads the attention's and the convolution's outputs
        # concatenated: d_model × d_model, of which the O row above counts n_heads · d_head
        k, A = spec.span_conv, H * dh
        add((f"{p}span_conv.depthwise", E * k, "d_model · span_conv", "", n, group,
             "ConvBERT: the keys' input, convolved per channel (no bias)", None, (E, 1, k)))
        add((f"{p}span_conv.pointwise", E * A, "d_model × (n_heads · d_head)", "", n, group,
             "", None, (A, E, 1)))
        add((f"{p}span_conv.bias", A, "n_heads · d_head", "", n, group, "", None, (A, 1)))
        add((f"{p}span_conv.kernel.weight", A * H * k, "(n_heads · d_head) × (n_heads · "
             "span_conv)", "", n, group, "a kernel per head and position", None, (H * k, A)))
        add((f"{p}span_conv.kernel.bias", H * k, "n_heads · span_conv", "", n, group, "", None,
             ()))
        add((f"{p}span_conv.out.weight", E * A, "d_model × (n_heads · d_head)", "", n, group,
             "the values the kernels convolve", None, (A, E)))
        add((f"{p}span_conv.out.bias", A, "n_heads · d_head", "", n, group, "", None, ()))
        add((f"{p}o_conv_half.weight", (E - A) * E, "(d_model − n_heads · d_head) × d_model",
             "", n, group, "the output projection's columns that read the convolution", None,
             (E, E - A)))
    if spec.value_conv:
        # NystromformerSelfAttention.conv: nn.Conv2d(heads, heads, (k, 1), groups=heads,
        # bias=False)
        k = spec.value_conv
        add((f"{p}value_conv.weight", H * k, "n_heads · value_conv", "", n, group,
             "a depthwise convolution over each head's values", None, (H, 1, k, 1)))


def _entity_embeddings(add, spec: ModelSpec,  # type: ignore[no-untyped-def]
                       norm: tuple[int, str]) -> None:
    """LukeEntityEmbeddings: the entity table, entity_embedding_dense (no bias) when
    entity_width is not d_model, position and token-type tables, a LayerNorm."""
    E, Ne, We = spec.d_model, spec.entity_vocab, spec.entity_width
    add(("embed.entities", Ne * We, "entity_vocab × entity_width", "", 1, "", "", None,
         (Ne, We)))
    if We != E:
        add(("embed.entities.project", We * E, "entity_width × d_model", "", 1, "",
             "no bias", None, (E, We)))
    P = spec.max_positions
    add(("embed.entities.positions", P * E, "max_positions × d_model", "", 1, "", "", None,
         (P, E)))
    if spec.token_types:
        add(("embed.entities.token_types", spec.token_types * E, "token_types × d_model", "",
             1, "", "", None, (spec.token_types, E)))
    add(("embed.entities.norm", norm[0], norm[1], "", 1, "", "", None, ()))


def _entity_head(add, spec: ModelSpec) -> None:  # type: ignore[no-untyped-def]
    """EntityPredictionHead: EntityPredictionHeadTransform (dense, activation, LayerNorm over
    entity_emb_size), a decoder tied to the entity table, a bias."""
    E, Ne, We = spec.d_model, spec.entity_vocab, spec.entity_width
    add(("head.entity.dense.weight", E * We, "d_model × entity_width", "", 1, "", "", None,
         (We, E)))
    add(("head.entity.dense.bias", We, "entity_width", "", 1, "", "", None, ()))
    n, why = norm_of(spec.norm, We, "entity_width")
    add(("head.entity.norm", n, why, "", 1, "", "", None, ()))
    if spec.tie_embeddings:
        add(("head.entity.decoder.weight", 0, "0 (tied)", "", 1, "",
             "the entity table (tied)", None, ()))
    else:
        add(("head.entity.decoder.weight", Ne * We, "entity_vocab × entity_width", "", 1, "",
             "", None, (Ne, We)))
    add(("head.entity.bias", Ne, "entity_vocab", "", 1, "", "", None, ()))


def _lang_adapters(add, spec: ModelSpec, p: str, group: str, n: int,  # type: ignore[no-untyped-def]
                   norm: tuple[int, str]) -> None:
    """XmodOutput: a bottleneck adapter per language (XmodAdapter: dense1, dense2), and a
    norm of their own when adapter_layer_norm."""
    E, A, N = spec.d_model, spec.adapter_width, spec.lang_adapters
    add((f"{p}down.weight", N * E * A, "lang_adapters · d_model × adapter_width", "", n, group,
         "one adapter per language", None, (N, A, E)))
    add((f"{p}down.bias", N * A, "lang_adapters · adapter_width", "", n, group, "", None,
         (N, A)))
    add((f"{p}up.weight", N * A * E, "lang_adapters · adapter_width × d_model", "", n, group,
         "", None, (N, E, A)))
    add((f"{p}up.bias", N * E, "lang_adapters · d_model", "", n, group, "", None, (N, E)))
    if spec.adapter_norm:
        add((f"{p}norm", norm[0], norm[1], "", n, group, "", None, ()))


def _position_projections(spec: ModelSpec) -> tuple[str, ...]:
    """DeBERTa's position projections: the key's for c2p, the query's for p2c
    (DisentangledSelfAttention: pos_key_proj / pos_proj, pos_query_proj / pos_q_proj)."""
    terms = tuple(w for w, term in (("pos_key", "c2p"), ("pos_query", "p2c"))
                  if term in spec.rel_terms)
    return (terms or ("pos_key", "pos_query"))[:spec.rel_projections]


def _mtp(spec: ModelSpec, rows: list[tuple], norm_n: int,  # type: ignore[type-arg]
         notes: list[str]) -> dict[str, int | float | str]:
    """DeepSeek-V3's multi-token-prediction modules (DeepSeek-V3 report, Sec. 2.2): each is the
    stack's last kind of layer, a projection of [norm(h); norm(emb)] (2·d_model -> d_model, no
    bias), two norms before it and one before the shared head. The embedding and the head are
    shared with the main model; DeepSeek's checkpoint stores a copy of each per module."""
    E, V, D = spec.d_model, spec.vocab_size, spec.mtp_layers
    last = plan_of(spec).stacks[-1].groups[-1].name
    block = sum([r[1] for r in rows if r[5] == last])
    one = block + 2 * E * E + 3 * norm_n
    copies = 2 * V * spec.embed_dim
    notes.append(f"multi-token prediction: {D} module(s) of {one:,} parameters (a layer like "
                 f"{last}'s, eh_proj 2·d_model × d_model, 3 norms) are not in the total: "
                 f"transformers does not build them; stored with copies of the embedding and "
                 f"head, as DeepSeek's checkpoint holds them: {D * (one + copies):,}")
    return {"mtp_params": D * one, "mtp_params_stored": D * (one + copies)}


def token_table(spec: ModelSpec) -> str:
    """The formula of a vocabulary-sized matrix (token embedding, untied LM head)."""
    return "vocab_size × d_embed" if spec.embed_dim != spec.d_model else "vocab_size × d_model"


def _vocab_projection(add, spec: ModelSpec, name: str, notes: list[str]) -> None:  # type: ignore[no-untyped-def]
    V, Ve = spec.vocab_size, spec.embed_dim
    if spec.tie_embeddings:
        add((f"{name}.weight", 0, "0 (tied)", "", 1, "", "tied to the token embedding: saves "
             f"{token_table(spec)} = {V * Ve:,}", None, ()))
        notes.append(f"{name}.weight is the token embedding matrix (tied), counted once.")
    else:
        add((f"{name}.weight", V * Ve, token_table(spec), "", 1, "", "", None, (V, Ve)))


def _down_up(add, p: str, names: tuple[str, str], E: int, w: int,  # type: ignore[no-untyped-def]
             wsym: str, note: str, group: str, n: int, norm: tuple[int, str]) -> None:
    """Two bias-free linear layers through a narrower width, d_model -> w -> d_model, and a
    norm over d_model after them (Gemma 4's per-layer input, Gemma 3n's LAuReL)."""
    add((p + names[0] + ".weight", E * w, f"d_model × {wsym}", "", n, group, note, None,
         (w, E)))
    add((p + names[1] + ".weight", w * E, f"{wsym} × d_model", "", n, group, "", None, (E, w)))
    add((p + "norm", norm[0], norm[1], "", n, group, "", None, ()))


def _v4_attention(add, a: Attention, norm: str, E: int, p: str,  # type: ignore[no-untyped-def]
                  group: str, L: int) -> None:
    """DeepseekV4Attention (transformers 5.23): a low-rank query (q_a_proj, q_a_norm,
    q_b_proj; its per-head norm has no weight), one head kv_proj reads as both K and V
    (kv_norm), the grouped low-rank output (o_a_proj: each group of heads to o_lora_rank;
    o_b_proj), a sink per head; the Q and H layers' compressor (kv_proj and gate_proj, a
    position bias per slot of its window and kv_norm; CSA's twice as wide, for its
    overlapping windows) and CSA's indexer (its own compressor at index_head_dim, q_b_proj
    from the query latent, weights_proj)."""
    H, dh, rq, g, ro = a.heads, a.d_head, a.q_lora_rank, a.o_groups, a.o_rank
    qw = H * dh
    n_rq, why_rq = norm_of(norm, rq, "q_lora_rank")
    n_dh, why_dh = norm_of(norm, dh, "d_head")
    add((p + "q_a.weight", E * rq, "d_model × q_lora_rank", "", L, group, "", None, (rq, E)))
    add((p + "q_a.norm", n_rq, why_rq, "", L, group, "", None, ()))
    add((p + "q_b.weight", rq * qw, "q_lora_rank × (n_heads · d_head)", "", L, group, "",
         None, (qw, rq)))
    add((p + "kv.weight", E * dh, "d_model × d_head", "", L, group,
         "one head, read as both K and V", None, (dh, E)))
    add((p + "kv.norm", n_dh, why_dh, "", L, group, "", None, ()))
    add((p + "o_a.weight", g * ro * (qw // g), "o_groups · o_lora_rank × (n_heads · d_head / "
         "o_groups)", "", L, group, "each group of heads to o_lora_rank", None,
         (g * ro, qw // g)))
    add((p + "o_b.weight", g * ro * E, "(o_groups · o_lora_rank) × d_model", "", L, group, "",
         None, (E, g * ro)))
    add((p + "sinks", H, "n_heads", "", L, group, "", None, ()))
    if not a.compress:
        return
    w, wsym = (2 * dh, "2 · d_head") if a.csa_heads else (dh, "d_head")
    m = a.compress
    msym = "compress_csa" if a.csa_heads else "compress_hca"
    for part in ("kv", "gate"):
        add((p + f"compressor.{part}.weight", E * w, f"d_model × {wsym}", "", L, group,
             "CSA: two overlapping series" if a.csa_heads and part == "kv" else "", None,
             (w, E)))
    add((p + "compressor.position_bias", m * w, f"{msym} × {wsym}", "", L, group, "", None,
         ()))
    add((p + "compressor.norm", n_dh, why_dh, "", L, group, "", None, ()))
    if a.csa_heads:
        Hi, ic = a.csa_heads, a.csa_dim
        n_ic, why_ic = norm_of(norm, ic, "csa_index_dim")
        for part in ("kv", "gate"):
            add((p + f"indexer.{part}.weight", E * 2 * ic, "d_model × 2 · csa_index_dim", "",
                 L, group, "", None, (2 * ic, E)))
        add((p + "indexer.position_bias", m * 2 * ic, "compress_csa × 2 · csa_index_dim", "",
             L, group, "", None, ()))
        add((p + "indexer.norm", n_ic, why_ic, "", L, group, "", None, ()))
        add((p + "indexer.q_b.weight", rq * Hi * ic, "q_lora_rank × (csa_index_heads · "
             "csa_index_dim)", "", L, group, "", None, (Hi * ic, rq)))
        add((p + "indexer.weights.weight", E * Hi, "d_model × csa_index_heads", "", L, group,
             "", None, (Hi, E)))


def _attention(add, a: Attention, norm: str, E: int, p: str, group: str,  # type: ignore[no-untyped-def]
               L: int) -> None:
    """The tensors of one attention sublayer (self or cross); ``p`` is its name prefix."""
    if a.mla:
        _latent_attention(add, a, norm, E, p, group, L)
        return
    if a.o_groups:
        _v4_attention(add, a, norm, E, p, group, L)
        return
    H, Hkv, dh = a.heads, a.kv_heads, a.d_head
    qw, kvw = H * dh, Hkv * dh
    kv_note = "" if Hkv == H else ("multi-query: one K/V head" if Hkv == 1
                                   else f"grouped-query: {Hkv} K/V heads for {H} Q heads")
    X = a.experts
    if X:
        # JetMoeMoA: a router, and X query projections of n_kv_heads · d_head each (a token
        # runs heads / kv_heads of them: n_heads query heads in all)
        add((p + "router.weight", E * X, "d_model × n_experts", "", L, group,
             "picks the query/output experts", None, (X, E)))
        add((p + "q.weight", X * E * kvw, "n_experts · d_model × (n_kv_heads · d_head)", "", L,
             group, f"top-{H // Hkv} of {X} active per token", E * qw, (X, kvw, E)))
    else:
        add((p + "q.weight", E * qw, "d_model × (n_heads · d_head)", "", L, group,
             "fused with Q, K, V in one matrix; counted by part" if a.fused_qkv else "", None,
             (qw, E)))
    if a.bias_q:
        add((p + "q.bias", qw, "n_heads · d_head", "", L, group, "", None, ()))
    if not a.kv_shared:  # Gemma 4's KV-shared layers read an earlier layer's keys
        add((p + "k.weight", E * kvw, "d_model × (n_kv_heads · d_head)", "", L, group,
             kv_note, None, (kvw, E)))
        if a.bias_k:
            add((p + "k.bias", kvw, "n_kv_heads · d_head", "", L, group, "", None, ()))
    # the linformer package's share_kv, and Gemma 4's attention_k_eq_v, have no value
    # projection
    values_are_keys = (a.mechanism == "linformer" and a.sharing == "kv") or a.v_is_k \
        or a.kv_shared
    # MiMo-V2-Flash: value heads of their own width d_v (v_proj, and o_proj reading them)
    dv, vsym = (a.d_v, "d_v") if a.d_v != dh else (dh, "d_head")
    vw, ow = Hkv * dv, H * dv
    if not values_are_keys:
        add((p + "v.weight", E * vw, f"d_model × (n_kv_heads · {vsym})", "", L, group,
             kv_note, None, (vw, E)))
        if a.bias_v:
            add((p + "v.bias", vw, f"n_kv_heads · {vsym}", "", L, group, "", None, ()))
    if X:
        add((p + "o.weight", X * vw * E, f"n_experts · (n_kv_heads · {vsym}) × d_model", "", L,
             group, f"top-{H // Hkv} of {X} active per token", ow * E, (X, E, vw)))
    else:
        add((p + "o.weight", ow * E, f"(n_heads · {vsym}) × d_model", "", L, group, "", None,
             (E, ow)))
    if a.bias_o:
        add((p + "o.bias", E, "d_model", "", L, group,
            "one, after the experts are combined" if X else "", None, ()))
    if a.qk_norm != "none":
        _qk_norms(add, a._replace(qk_norm="q_only") if a.kv_shared else a, norm, p, group, L)
    if a.sub_norm:
        n, why = norm_of(norm, qw, "n_heads · d_head")
        add((p + "sub_norm", n, why, "", L, group, "BitNet: over the output before o", None,
             ()))
    if a.conv:
        # Primer (So et al. 2021), multi-dconv-head attention: a depthwise convolution over
        # the sequence per channel of Q, K and V (conv taps each)
        for which, width, sym in (("q", qw, "n_heads · d_head"), ("k", kvw, "n_kv_heads · d_head"),
                                  ("v", kvw, "n_kv_heads · d_head")):
            add((p + which + "_conv.weight", width * a.conv, f"{sym} · qkv_conv", "", L, group,
                 "depthwise, over the sequence", None, (width, 1, a.conv)))
            if a.conv_bias:
                add((p + which + "_conv.bias", width, sym, "", L, group, "", None, ()))
    if a.mechanism == "linformer":
        _linformer(add, a, p, group, L)
    if a.gate != "none" or a.gate_bias != "none":
        _gate(add, a, E, p, group, L)
    if a.differential:
        # DiffLlamaAttention: lambda_q1, lambda_k1, lambda_q2, lambda_k2 (d_head each); its
        # groupnorm is an RMSNorm without parameters
        add((p + "lambdas", 4 * dh, "4 · d_head (λ's q1, k1, q2, k2)", "", L, group,
             "differential attention", None, ()))
    if a.global_block:
        # LongT5TransientGlobalAttention.global_input_layer_norm: over the global tokens
        n, why = norm_of(norm, E, "d_model")
        add((p + "global_input_norm", n, why, "", L, group, "over the global tokens (LongT5)",
             None, ()))
    if a.sinks:
        # gpt-oss (GptOssAttention.sinks): one learned logit per head joins the softmax
        add((p + "sinks", H, "n_heads (one sink logit per head)", "", L, group, "", None, ()))


def _linformer(add, a: Attention, p: str, group: str, L: int) -> None:  # type: ignore[no-untyped-def]
    """Linformer (Wang et al. 2020): E and F project the n = max_positions keys and values
    to k. Shared as linformer_sharing says: a pair per layer for all heads (the linformer
    package's LinformerSelfAttention: proj_k, proj_v of (seq_len, k)), one matrix per layer
    with the values equal to the keys (its share_kv), one for all layers (the paper's
    layerwise sharing), or a pair per head."""
    n, k, H = a.proj_n, a.proj_k, a.heads
    if a.sharing == "none":
        for which in ("E", "F"):
            add((p + "linformer_" + which, H * n * k, "n_heads · max_positions · linformer_k",
                 "", L, group, "one per head", None, (H, n, k)))
    elif a.sharing == "headwise":
        for which in ("E", "F"):
            add((p + "linformer_" + which, n * k, "max_positions · linformer_k", "", L, group,
                 "shared by the heads", None, (n, k)))
    elif a.sharing == "kv":
        add((p + "linformer_E", n * k, "max_positions · linformer_k", "", L, group,
             "keys and values share it (and values = keys)", None, (n, k)))
    else:  # layerwise: one matrix for every layer, head, key and value
        add((p.split(".", 1)[0] + ".attn.linformer_E", n * k, "max_positions · linformer_k",
             "", 1, "", "one for every layer", None, (n, k)))


def _gate(add, a: Attention, E: int, p: str, group: str, L: int) -> None:  # type: ignore[no-untyped-def]
    """An output gate sigmoid(x W_g) ⊙ attention, from the block input x (AFMoE, Beam; per head
    or per channel)."""
    if a.gate != "none":
        w = a.gate_width(a.gate)
        sym = "n_heads" if a.gate == "head" else "(n_heads · d_head)"
        add((p + "gate.weight", E * w, f"d_model × {sym}", "", L, group,
             "sigmoid gate on the attention output", None, (w, E)))
    if a.gate_bias != "none":
        w = a.gate_width(a.gate_bias)
        add((p + "gate.bias", w, "n_heads" if a.gate_bias == "head" else "n_heads · d_head", "",
             L, group, "", None, ()))


def _qk_norms(add, a: Attention, norm: str, p: str, group: str, L: int) -> None:  # type: ignore[no-untyped-def]
    if a.qk_norm in ("head", "q_only"):
        # Qwen3, Gemma 3 (q_norm / k_norm over head_dim): one norm shared by every head
        # (Gemma 4's KV-shared layers: q_norm only)
        n, why = norm_of(norm, a.d_head, "d_head")
        for which in ("q_norm", "k_norm")[:1 if a.qk_norm == "q_only" else 2]:
            add((p + which, n, why, "", L, group, "over one head, shared by the heads", None,
                 ()))
    elif a.qk_norm == "width":
        # OLMo-2 (RMSNorm over the projection's width), Cohere (a (heads, d_head) scale)
        for which, heads, sym in (("q_norm", a.heads, "n_heads"), ("k_norm", a.kv_heads,
                                                                    "n_kv_heads")):
            n, why = norm_of(norm, heads * a.d_head, f"{sym} · d_head")
            add((p + which, n, why, "", L, group, "over the whole projection", None, ()))


def _latent_attention(add, a: Attention, norm: str, E: int, p: str, group: str,  # type: ignore[no-untyped-def]
                      L: int) -> None:
    """DeepSeek-V2/V3 multi-head latent attention (transformers DeepseekV3Attention): queries
    through an optional low-rank bottleneck, keys and values through a shared latent of width
    kv_lora_rank plus one RoPE key shared by the heads."""
    H, rq, rkv, dr, dv = a.heads, a.q_lora_rank, a.kv_lora_rank, a.d_rope, a.d_v
    dq = a.d_head  # d_nope + d_rope
    if rq:
        add((p + "q_a.weight", E * rq, "d_model × q_lora_rank", "", L, group, "", None,
             (rq, E)))
        if a.bias_q:
            add((p + "q_a.bias", rq, "q_lora_rank", "", L, group, "", None, ()))
        n, why = norm_of(norm, rq, "q_lora_rank")
        add((p + "q_a.norm", n, why, "", L, group, "", None, ()))
        add((p + "q_b.weight", rq * H * dq, "q_lora_rank × (n_heads · (d_nope + d_rope))", "",
             L, group, "", None, (H * dq, rq)))
    else:
        add((p + "q.weight", E * H * dq, "d_model × (n_heads · (d_nope + d_rope))", "", L,
             group, "", None, (H * dq, E)))
    add((p + "kv_a.weight", E * (rkv + dr), "d_model × (kv_lora_rank + d_rope)", "", L, group,
         "the latent and the shared RoPE key", None, (rkv + dr, E)))
    if a.bias_k:
        add((p + "kv_a.bias", rkv + dr, "kv_lora_rank + d_rope", "", L, group, "", None, ()))
    n, why = norm_of(norm, rkv, "kv_lora_rank")
    add((p + "kv_a.norm", n, why, "", L, group, "", None, ()))
    add((p + "kv_b.weight", rkv * H * (dq - dr + dv), "kv_lora_rank × (n_heads · (d_nope + d_v))",
         "", L, group, "", None, (H * (dq - dr + dv), rkv)))
    add((p + "o.weight", H * dv * E, "(n_heads · d_v) × d_model", "", L, group, "", None,
         (E, H * dv)))
    if a.bias_o:
        add((p + "o.bias", E, "d_model", "", L, group, "", None, ()))
    if a.index_heads:
        _indexer(add, a, E, p, group, L)


def _indexer(add, a: Attention, E: int, p: str, group: str, L: int) -> None:  # type: ignore[no-untyped-def]
    """DeepSeek Sparse Attention's lightning indexer (transformers 5.23 DeepseekV32Indexer):
    queries from the query latent (wq_b), one key per token shared by its heads (wk, then a
    LayerNorm with bias), and a weight per head from the block input (weights_proj)."""
    Hi, di, rq = a.index_heads, a.index_dim, a.q_lora_rank
    note = "runs under torch.no_grad in transformers: no gradient reaches it"
    add((p + "index_q.weight", rq * Hi * di, "q_lora_rank × (index_heads · index_head_dim)",
         "", L, group, note, None, (Hi * di, rq)))
    add((p + "index_k.weight", E * di, "d_model × index_head_dim", "", L, group, "", None,
         (di, E)))
    add((p + "index_k.norm", 2 * di, "2 · index_head_dim (LayerNorm weight and bias)", "", L,
         group, "", None, ()))
    add((p + "index_weights.weight", E * Hi, "d_model × index_heads", "", L, group, "", None,
         (Hi, E)))


def _recurrent(add, m: Mixer, norm: str, E: int, p: str, group: str,  # type: ignore[no-untyped-def]
               L: int) -> None:
    """The tensors of one recurrent mixer, as transformers 5.23 builds them: MambaMixer (Gu &
    Dao 2023), Mamba2Mixer (Dao & Gu 2024), Qwen3NextGatedDeltaNet (Yang et al. 2025) and
    Lfm2ShortConv. Convolutions are depthwise: one kernel of ``ssm_conv`` taps per channel."""
    Di, N, H, G, K, R = m.inner, m.state, m.heads, m.groups, m.conv, m.dt_rank
    C = m.conv_channels

    def proj(name: str, fan_in: int, fan_out: int, formula: str, bias: bool,
             note: str = "") -> None:
        add((p + name + ".weight", fan_in * fan_out, formula, "", L, group, note, None,
             (fan_out, fan_in)))
        if bias:
            out_sym = formula.split(" × ", 1)[1].strip("()")
            add((p + name + ".bias", fan_out, out_sym, "", L, group, "", None, ()))

    def conv(formula: str, channels_sym: str) -> None:
        add((p + "conv.weight", C * K, f"{formula} · ssm_conv", "", L, group,
             "causal depthwise convolution", None, (C, 1, K)))
        if m.conv_bias:
            add((p + "conv.bias", C, channels_sym, "", L, group, "", None, ()))

    def vector(name: str, n: int, formula: str, note: str = "") -> None:
        add((p + name, n, formula, "", L, group, note, None, ()))

    if m.kind == "mamba":
        proj("in_proj", E, 2 * Di, "d_model × (2 · ssm_inner)", m.bias, "x and the gate z")
        conv("ssm_inner", "ssm_inner")
        proj("x_proj", Di, R + 2 * N, "ssm_inner × (ssm_dt_rank + 2 · ssm_state)", False,
             "dt, B, C from x")
        proj("dt_proj", R, Di, "ssm_dt_rank × ssm_inner", True)
        vector("A_log", Di * N, "ssm_inner · ssm_state", "log of −A, one per channel and state")
        vector("D", Di, "ssm_inner", "skip connection")
        if m.dt_norms:  # JambaMambaMixer: RMSNorms on dt, B and C
            for name, width, sym in (("dt_norm", R, "ssm_dt_rank"), ("b_norm", N, "ssm_state"),
                                     ("c_norm", N, "ssm_state")):
                n, why = norm_of("rmsnorm", width, sym)
                vector(name, n, why)
        proj("out_proj", Di, E, "ssm_inner × d_model", m.bias)
    elif m.kind == "mamba2":
        proj("in_proj", E, 2 * Di + 2 * G * N + H,
             "d_model × (2 · ssm_inner + 2 · ssm_groups · ssm_state + ssm_heads)", m.bias,
             "z, x, B, C and dt")
        conv("(ssm_inner + 2 · ssm_groups · ssm_state)", "ssm_inner + 2 · ssm_groups · ssm_state")
        vector("dt_bias", H, "ssm_heads")
        vector("A_log", H, "ssm_heads", "one decay per head")
        vector("D", H, "ssm_heads", "skip connection")
        if m.norm:
            n, why = norm_of("rmsnorm", Di, "ssm_inner")
            vector("gated_norm", n, why, "gated RMSNorm before out_proj")
        proj("out_proj", Di, E, "ssm_inner × d_model", m.bias)
    elif m.kind == "gated_deltanet":
        proj("in_proj", E, 2 * G * N + 2 * Di + 2 * H,
             "d_model × (2 · ssm_groups · ssm_state + 2 · ssm_inner + 2 · ssm_heads)", False,
             "q, k (key heads), v, the gate z, and β, a per value head")
        conv("(2 · ssm_groups · ssm_state + ssm_inner)", "2 · ssm_groups · ssm_state + ssm_inner")
        vector("dt_bias", H, "ssm_heads")
        vector("A_log", H, "ssm_heads", "one decay per value head")
        n, why = norm_of("rmsnorm", Di // H, "ssm_inner / ssm_heads")
        vector("gated_norm", n, why, "gated RMSNorm over one value head, shared by the heads")
        proj("out_proj", Di, E, "ssm_inner × d_model", False)
    elif m.kind == "kda":
        # KimiLinearDeltaAttention (transformers 5.23): q, k, v of ssm_heads heads of
        # ssm_state, each convolved; the per-channel forget gate through a rank-d_head
        # bottleneck (f_a, f_b) with dt_bias and one A_log per head; β per head (b_proj); the
        # output gate through another bottleneck (g_a, g_b) into a gated RMSNorm over one head
        Dh = Di // H
        proj("in_proj", E, 3 * Di, "d_model × (3 · ssm_inner)", False, "q, k and v")
        conv("(3 · ssm_inner)", "3 · ssm_inner")
        proj("f_a_proj", E, Dh, "d_model × (ssm_inner / ssm_heads)", False,
             "the forget gate's low-rank input")
        proj("f_b_proj", Dh, Di, "(ssm_inner / ssm_heads) × ssm_inner", False,
             "a decay per channel")
        vector("dt_bias", Di, "ssm_inner")
        vector("A_log", H, "ssm_heads", "one decay rate per head")
        proj("b_proj", E, H, "d_model × ssm_heads", False, "β, one per head")
        proj("g_a_proj", E, Dh, "d_model × (ssm_inner / ssm_heads)", False,
             "the output gate's low-rank input")
        proj("g_b_proj", Dh, Di, "(ssm_inner / ssm_heads) × ssm_inner", False)
        n, why = norm_of("rmsnorm", Dh, "ssm_inner / ssm_heads")
        vector("gated_norm", n, why, "gated RMSNorm over one head, shared by the heads")
        proj("out_proj", Di, E, "ssm_inner × d_model", False)
    elif m.kind == "lightning":  # MiniMaxLightningAttention: linear attention, gated output
        proj("qkv_proj", E, 3 * Di, "d_model × (3 · ssm_inner)", False, "Q, K, V of the heads")
        proj("output_gate", E, Di, "d_model × ssm_inner", False, "sigmoid gate on the output")
        n, why = norm_of("rmsnorm", Di, "ssm_inner")
        vector("out_norm", n, why, "over the heads' output")
        proj("out_proj", Di, E, "ssm_inner × d_model", False)
    else:  # short_conv (Lfm2ShortConv): B, C, x from one projection, y = C ⊙ conv(B ⊙ x)
        proj("in_proj", E, 3 * E, "d_model × (3 · d_model)", m.conv_bias, "B, C and x")
        add((p + "conv.weight", E * K, "d_model · ssm_conv", "", L, group,
             "causal depthwise convolution", None, (E, 1, K)))
        if m.conv_bias:
            add((p + "conv.bias", E, "d_model", "", L, group, "", None, ()))
        proj("out_proj", E, E, "d_model × d_model", m.conv_bias)


def _ffn(add, f: FFN, E: int, p: str, group: str, L: int,  # type: ignore[no-untyped-def]
         norm: str = "rmsnorm") -> None:
    if f.kind == "param_attention":
        # Vaswani et al. 2017, appendix: the FFN replaced by attention over n_p trainable
        # key-value pairs per head; only the query and output projections see the input.
        hp, n_p, dk, dv = f.pattn
        add((p + "pattn.q.weight", E * hp * dk, "d_model × (h_p · d_pk)", "", L, group, "",
             None, (hp * dk, E)))
        add((p + "pattn.keys", hp * n_p * dk, "h_p · n_p · d_pk", "", L, group, "", None,
             (hp, n_p, dk)))
        add((p + "pattn.values", hp * n_p * dv, "h_p · n_p · d_pv", "", L, group, "", None,
             (hp, n_p, dv)))
        add((p + "pattn.o.weight", hp * dv * E, "(h_p · d_pv) × d_model", "", L, group, "",
             None, (E, hp * dv)))
        return
    if not f.moe:
        for name, n, formula, shape in _mlp(f, f.d_ff, f.ff_sym, E):
            add((p + name, n, formula, "", L, group, "", None, shape))
        if f.sub_norm:
            n, why = norm_of(norm, f.d_ff, f.ff_sym)
            add((p + "sub_norm", n, why, "", L, group, "BitNet: over the inner width before out",
                 None, ()))
        return
    X, k, Z = f.experts, f.top_k, f.zero
    # LongCat-Flash's router also scores its zero-computation experts
    Xr, xsym = (X + Z, "(n_experts + zero_experts)") if Z else (X, "n_experts")
    add((p + "router.weight", E * Xr, "d_model × " + xsym, "", L, group, "", None, (Xr, E)))
    if f.router_bias:
        add((p + "router.bias", Xr, xsym, "", L, group, "", None, ()))
    if f.beside:
        # the dense MLP beside the experts (Gemma4TextDecoderLayer with enable_moe_block;
        # LongcatFlashDecoderLayer's mlps[0] beside its shortcut MoE)
        for name, n, formula, shape in _mlp(f._replace(bias_in=False, bias_out=False),
                                            f.beside, "d_ff", E):
            add((p + "dense." + name, n, formula, "", L, group, "runs beside the experts",
                 None, shape))
    if f.beside and not f.shortcut:
        # Gemma 4: a norm after the dense MLP, one before and one after the experts;
        # Gemma4TextRouter scales its normed input per channel (scale) and its weights per
        # expert (per_expert_scale)
        add((p + "router.scale", E, "d_model", "", L, group, "", None, ()))
        add((p + "router.per_expert_scale", X, "n_experts", "", L, group, "", None, ()))
        n_norm, why = norm_of(norm, E)
        for name in ("dense.post_norm", "experts.pre_norm", "experts.post_norm"):
            add((p + name, n_norm, why, "", L, group, "", None, ()))
    # (top_k 0: the config leaves it unset, ModelSpec.unrunnable; no active count is claimed)
    if f.out_bias:  # JetMoeMoE.bias: added once the experts' outputs are combined
        add((p + "experts.out_bias", E, "d_model", "", L, group, "after the experts combine",
             None, ()))
    note = f"top-{k} of {X} active per token" if k else "top_k unset: no active count"
    for name, n, formula, shape in _mlp(f, f.d_ff, f.ff_sym, E):
        add((p + "experts." + name, X * n, "n_experts · " + formula, "", L, group, note,
             k * n if k else None,
             (X, *shape) if shape else (X, n)))
    if Z:
        # LongcatFlashExperts (transformers 5.23) sizes gate_up_proj for every expert the
        # router knows, the zero-computation ones included; down_proj for the real ones
        F = f.d_ff
        add((p + "experts.zero_gate_up.weight", Z * 2 * E * F, f"zero_experts · 2 · d_model × "
             f"{f.ff_sym}", "", L, group, "built for the zero-computation experts, never used",
             0, (Z, 2 * F, E)))
    if f.shared:
        S = f.shared
        for name, n, formula, shape in _mlp(f, f.d_shared, f.shared_sym, E):
            add((p + "shared." + name, S * n, "n_shared_experts · " + formula, "", L, group, "",
                 None, (S, *shape) if shape else (S, n)))
        if f.shared_gate:
            add((p + "shared_gate.weight", E, "d_model", "", L, group,
                 "sigmoid gate on the shared experts' output", None, (1, E)))


def _mlp(f: FFN, F: int, ff: str, E: int) -> list[tuple[str, int, str, tuple[int, ...]]]:
    """One FFN's (or one expert's) tensors: in (and gate) d_model -> F, out F -> d_model."""
    gated = f.kind == "gated"
    parts: list[tuple[str, int, str, tuple[int, ...]]] = [
        ("in.weight", E * F, f"d_model × {ff}", (F, E))]
    if gated:
        parts.insert(0, ("gate.weight", E * F, f"d_model × {ff}", (F, E)))
    if f.bias_in:
        parts.append(("in.bias", F, ff, ()))
        if gated:
            parts.append(("gate.bias", F, ff, ()))
    parts.append(("out.weight", F * E, f"{ff} × d_model", (E, F)))
    if f.bias_out:
        parts.append(("out.bias", E, "d_model", ()))
    if f.activation == "xielu":
        # transformers' XIELUActivation: alpha_p and alpha_n, one trainable scalar each (its
        # beta and eps are buffers)
        parts.append(("activation.alphas", 2, "2 (xIELU's alpha_p and alpha_n)", ()))
    return parts


CATEGORIES = ("embeddings", "attention", "mixers", "ffn", "norms", "heads", "tower")


def category(name: str) -> str:
    """Which part of the model an item of count_params belongs to (the encoder tower and its
    projector are one part: --freeze tower)."""
    if name.startswith(("tower.", "projector.")):
        return "tower"
    dotted = f".{name}"
    if dotted.endswith("norm") or ".norm." in dotted or dotted.endswith(".norm"):
        return "norms"
    if name.startswith("head."):
        return "heads"
    if ".embed." in dotted:
        return "embeddings"
    if ".attn." in dotted or ".cross." in dotted:
        return "attention"
    if ".mixer." in dotted:
        return "mixers"
    return "ffn"


def by_category(b: Breakdown) -> dict[str, int]:
    out = dict.fromkeys(CATEGORIES, 0)
    for r in b.rows:
        out[category(r[0])] += r[1] * r[4]  # name, count × repeat
    return out
