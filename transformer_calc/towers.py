"""The encoder tower before a language model, and the projector after it: their parameters.

A vision-language or speech model is a language model reading the output of an encoder: a
vision transformer over image patches, or Whisper's encoder over a mel spectrogram, and a
projector to the language model's width. Each tower kind is one record (how transformers 5.23
builds its modules); the sizes come from the spec (ModelSpec.tower_*). Rows are
count_params's rows (breakdown.Item's fields in order), named ``tower.`` and ``projector.``
and kept out of the layer stacks: the language model's layer plan does not hold them.
"""

from __future__ import annotations

from typing import NamedTuple

from transformer_calc.spec import ModelSpec

Row = tuple  # (name, count, formula, expr, repeat, stack, note, active, shape)


class Tower(NamedTuple):
    """One kind of tower: its norms, biases, MLP and embeddings, as its modelling code builds
    them (the module named beside each record)."""

    norm: str  # layernorm (weight and bias) | rmsnorm (weight)
    qkv_bias: bool
    k_bias: bool
    o_bias: bool
    mlp: str  # plain (fc1, fc2) | gated (gate, up, down)
    mlp_bias: bool
    patch_bias: bool  # a bias on the patch embedding (the convolution)
    pre_norm: bool = False  # a norm on the embeddings before the first layer
    post_norm: bool = False  # a norm after the last layer
    class_token: bool = False  # a learned class embedding before the patches (Mllama)
    qk_norm: bool = False  # a norm over each head's queries and keys (head_dim wide)
    norms: int = 2  # norms per layer: before the attention and the MLP (4: after them too)


TOWERS: dict[str, Tower] = {
    # SiglipVisionTransformer: patch_embedding (Conv2d with a bias), position_embedding,
    # layers of layer_norm1, self_attn (q, k, v, out_proj, biased), layer_norm2, mlp (fc1,
    # fc2), then post_layernorm
    "siglip": Tower("layernorm", True, True, True, "plain", True, True, post_norm=True),
    # Qwen2_5_VisionTransformerPretrainedModel: a 3-D patch_embed without a bias, blocks of
    # RMSNorm, a fused biased qkv and proj, a gated biased MLP; no position table (2-D RoPE)
    "qwen2_5_vl": Tower("rmsnorm", True, True, True, "gated", True, False),
    # Qwen3VLVisionModel: a biased 3-D patch_embed, a learned pos_embed, blocks of LayerNorm,
    # qkv and proj, linear_fc1 and linear_fc2
    "qwen3_vl": Tower("layernorm", True, True, True, "plain", True, True),
    # PixtralVisionModel: patch_conv without a bias, ln_pre, layers of attention_norm, bias-free
    # q, k, v, o and a gated MLP, ffn_norm (RMSNorms); 2-D RoPE
    "pixtral": Tower("rmsnorm", False, False, False, "gated", False, False, pre_norm=True),
    # MllamaVisionModel: class_embedding, patch_embedding without a bias, gated position and
    # tile embeddings, layernorm_pre; layers of bias-free attention and a biased MLP between
    # LayerNorms (the global encoder's gated); layernorm_post
    "mllama": Tower("layernorm", False, False, False, "plain", True, False, pre_norm=True,
                    post_norm=True, class_token=True),
    # WhisperEncoder: conv1 and conv2 (biased Conv1d), a frozen position table, layers of
    # self-attention (k_proj without a bias) and fc1, fc2 between LayerNorms, layer_norm
    "whisper": Tower("layernorm", True, False, True, "plain", True, True, post_norm=True),
    # Gemma4VisionModel: patch_embedder (input_proj, a bias-free linear over 3 · patch² pixels,
    # and an x and a y position table), layers of bias-free q, k, v, o (Gemma4ClippableLinear:
    # its clipping bounds are buffers), q_norm and k_norm (v_norm has no scale), a gated MLP,
    # and RMSNorms before and after the attention and the MLP; the pooler has no parameters
    "gemma4": Tower("rmsnorm", False, False, False, "gated", False, False, qk_norm=True,
                    norms=4),
    # Qwen3ASREncoder: three biased Conv2d (stride 2) over the spectrogram and conv_out, a
    # bias-free linear from the flattened channels; sinusoidal positions (a buffer); layers of
    # biased q, k, v, out_proj and fc1, fc2 between LayerNorms; ln_post
    "qwen3_asr": Tower("layernorm", True, True, True, "plain", True, True, post_norm=True),
    # GotOcr2VisionEncoder (Segment Anything's ViT): a biased patch convolution, an absolute
    # position table (1, grid, grid, d), layers of a biased qkv and proj, lin1 and lin2
    # between LayerNorms, each with a height and a width table of relative positions (its
    # window's, or the whole grid's for a global layer); then the neck
    "got_ocr2": Tower("layernorm", True, True, True, "plain", True, True),
    # GlmAsrEncoder: Whisper's conv1 and conv2 and layers (q, v and o biased, k not; fc1, fc2
    # between LayerNorms), K/V heads of their own (num_key_value_heads), rotary positions
    # (nothing learned), a final LayerNorm
    "glmasr": Tower("layernorm", True, False, True, "plain", True, True, post_norm=True),
}


def tower_rows(spec: ModelSpec) -> list[Row]:
    """The tower's and the projector's parameters, one row per tensor kind."""
    rows: list[Row] = []

    def add(name: str, count: int, formula: str, repeat: int = 1, note: str = "",
            shape: tuple[int, ...] = ()) -> None:
        rows.append((name, count, formula, "", repeat, "", note, None, shape))

    if spec.tower == "gemma4_unified":
        _patch_embedder(spec, add)
    elif spec.tower == "fuyu":
        # FuyuModel.vision_embed_tokens: a biased linear layer from a patch's pixels to d_model
        D, C, p = spec.tower_d_model, spec.tower_channels, spec.tower_patch
        add("tower.embed.patch.weight", C * p * p * D, "tower_channels · tower_patch² · "
            "tower_d_model", shape=(D, C * p * p))
        add("tower.embed.patch.bias", D, "tower_d_model")
    elif spec.tower != "none":
        _encoder(spec, add)
    if spec.projector != "none":
        _projector(spec, add)
    if spec.tower_audio_layers:
        _conformer(spec, add)
    if spec.tower_audio_in:
        # Gemma4UnifiedMultimodalEmbedder over audio frames: a scale-free RMSNorm and a
        # bias-free embedding_projection
        A, E = spec.tower_audio_in, spec.d_model
        add("projector.audio", A * E, "tower_audio_in × d_model", shape=(E, A))
    return rows


def _conformer(spec: ModelSpec, add) -> None:  # type: ignore[no-untyped-def]
    """Gemma4AudioModel: subsample_conv_projection (two bias-free 3 × 3 convolutions, stride 2,
    each with a bias-free LayerNorm, then input_proj_linear from (c0 // 4) · c1), conformer
    layers (two half-step feed-forwards of 4 · d, each between RMSNorms; q, k, v, post and
    relative_k_proj with a per_dim_scale; a light convolution: linear_start to 2 · d, a
    depthwise kernel, linear_end and two RMSNorms; norm_pre_attn, norm_post_attn, norm_out;
    Gemma4ClippableLinear's bounds are buffers), then output_proj (biased) to tower_audio_in."""
    D, L, K = spec.tower_audio_d_model, spec.tower_audio_layers, spec.tower_audio_kernel
    c0, c1, W = spec.tower_audio_subsample, spec.tower_audio_channels, spec.tower_audio_in
    add("tower.audio.subsample.convs", 9 * c0 + c0 + 9 * c0 * c1 + c1,
        "10 · tower_audio_subsample + (9 · tower_audio_subsample + 1) · tower_audio_channels",
        note="layer0 and layer1: each a convolution and its norm")
    add("tower.audio.subsample.proj", c0 // 4 * c1 * D, "⌊tower_audio_subsample / 4⌋ · "
        "tower_audio_channels × tower_audio_d_model", shape=(D, c0 // 4 * c1))
    p = "tower.audio_layer."
    add(p + "feed_forward", 2 * (8 * D * D + 2 * D), "2 · (8 · tower_audio_d_model² + 2 · "
        "tower_audio_d_model)", L, "feed_forward1 and feed_forward2, their norms")
    add(p + "attn", 5 * D * D + D // spec.tower_audio_heads, "5 · tower_audio_d_model² + "
        "tower_audio_d_model / tower_audio_heads", L,
        "q, k, v, post, relative_k_proj and per_dim_scale")
    add(p + "lconv", 3 * D * D + K * D + 2 * D, "3 · tower_audio_d_model² + (tower_audio_kernel "
        "+ 2) · tower_audio_d_model", L, "linear_start, the depthwise convolution, "
        "linear_end, pre_layer_norm and conv_norm")
    add(p + "norms", 3 * D, "3 · tower_audio_d_model", L)
    add("tower.audio.output_proj", D * W + W, "tower_audio_d_model × tower_audio_in + "
        "tower_audio_in")


def _patch_embedder(spec: ModelSpec, add) -> None:  # type: ignore[no-untyped-def]
    """Gemma4UnifiedVisionEmbedder: no encoder layers; each merged patch (tower_patch = patch_size
    · pooling_kernel_size pixels a side) through patch_ln1, patch_dense and patch_ln2, plus a
    factorised x and y position table and pos_norm (LayerNorms, biased)."""
    D, C, p, P = spec.tower_d_model, spec.tower_channels, spec.tower_patch, spec.tower_positions
    W = C * p * p
    add("tower.embed.patch_norm", 2 * W, "2 · tower_channels · tower_patch²", note="patch_ln1")
    add("tower.embed.patch.weight", W * D, "tower_channels · tower_patch² · tower_d_model",
        shape=(D, W))
    add("tower.embed.patch.bias", D, "tower_d_model")
    add("tower.embed.positions", 2 * P * D, "2 · tower_positions × tower_d_model",
        note="an x and a y table", shape=(P, 2, D))
    add("tower.embed.norms", 4 * D, "4 · tower_d_model", note="patch_ln2 and pos_norm")


def _encoder(spec: ModelSpec, add) -> None:  # type: ignore[no-untyped-def]
    """A vision or audio encoder's rows (the tower record's kind)."""
    t = TOWERS[spec.tower]
    D, F = spec.tower_d_model, spec.tower_d_ff
    norm_n, norm_f = (2 * D, "2 · tower_d_model") if t.norm == "layernorm" else \
        (D, "tower_d_model")
    _embeddings(spec, t, add)
    if t.pre_norm:
        add("tower.embed.norm", norm_n, norm_f)
    _layers(spec, t, "tower.layer.", spec.tower_layers, add, (norm_n, norm_f))
    if spec.tower_global_layers:
        # MllamaVisionEncoderLayer(is_gated=True): a tanh gate on the attention and the MLP
        _layers(spec, t, "tower.global_layer.", spec.tower_global_layers, add,
                (norm_n, norm_f))
        add("tower.global_layer.gates", 2, "2 (gate_attn, gate_ffn)", spec.tower_global_layers)
    if t.post_norm:
        add("tower.final_norm", norm_n, norm_f)
    if spec.tower_head:
        # SiglipMultiheadAttentionPoolingHead: a probe, nn.MultiheadAttention, a LayerNorm and
        # an MLP
        add("tower.head.probe", D, "tower_d_model")
        add("tower.head.attn", 4 * D * D + 4 * D, "4 · tower_d_model² + 4 · tower_d_model",
            note="in_proj (Q, K, V) and out_proj, biased")
        add("tower.head.norm", 2 * D, "2 · tower_d_model")
        add("tower.head.mlp", 2 * D * F + F + D, "2 · tower_d_model · tower_d_ff + tower_d_ff "
            "+ tower_d_model")
    if spec.tower in ("qwen2_5_vl", "qwen3_vl"):
        _merger(spec, add)
    if spec.tower == "got_ocr2":
        _sam(spec, add)


def _embeddings(spec: ModelSpec, t: Tower, add) -> None:  # type: ignore[no-untyped-def]
    """The patch (or spectrogram) embedding and the position tables."""
    D, C, P = spec.tower_d_model, spec.tower_channels, spec.tower_positions
    if spec.tower == "qwen3_asr":
        # conv2d1 (1 -> c), conv2d2 and conv2d3 (c -> c), 3 × 3 kernels, biased; conv_out reads
        # c channels × the mel bins left after three stride-2 halvings, ((M + 1)//2 + 1)//2 + 1)//2
        c = spec.tower_conv_channels
        bins = (((C + 1) // 2 + 1) // 2 + 1) // 2
        add("tower.embed.convs", 9 * c + c + 2 * (9 * c * c + c), "9 · tower_conv_channels + "
            "tower_conv_channels + 2 · (9 · tower_conv_channels² + tower_conv_channels)")
        add("tower.embed.conv_out", c * bins * D, f"tower_conv_channels · {bins} (the mel bins "
            "/ 8, rounded up) × tower_d_model", shape=(D, c * bins))
        return
    if spec.tower in ("whisper", "glmasr"):
        # WhisperEncoder.conv1 (num_mel_bins -> d_model) and conv2 (d_model -> d_model, stride
        # 2), kernel 3, biased; embed_positions is frozen (requires_grad_(False)); GLM-ASR's
        # positions are rotary
        add("tower.embed.conv1", 3 * C * D + D, "3 · tower_channels · tower_d_model + "
            "tower_d_model")
        add("tower.embed.conv2", 3 * D * D + D, "3 · tower_d_model² + tower_d_model")
        if spec.tower == "whisper":
            add("tower.embed.positions", 0, "0", note=f"{P:,} × {D:,} sinusoidal, frozen: not "
                "trainable")
        return
    k, p = spec.tower_temporal, spec.tower_patch
    kernel = "tower_temporal · tower_patch²" if k > 1 else "tower_patch²"
    add("tower.embed.patch.weight", C * k * p * p * D,
        f"tower_channels · {kernel} · tower_d_model", shape=(D, C, *((k,) if k > 1 else ()), p,
                                                               p))
    if t.patch_bias:
        add("tower.embed.patch.bias", D, "tower_d_model")
    if t.class_token:
        add("tower.embed.class", D, "tower_d_model")
    if spec.tower == "mllama":
        _tiles(spec, add)
    elif spec.tower == "got_ocr2":
        add("tower.embed.positions", P * D, "tower_grid² × tower_d_model",
            shape=(spec.tower_grid, spec.tower_grid, D))
    elif spec.tower == "gemma4":
        # Gemma4VisionPatchEmbedder.position_embedding_table: (2, position_embedding_size, D)
        add("tower.embed.positions", 2 * P * D, "2 · tower_positions × tower_d_model",
            note="an x and a y table", shape=(2, P, D))
    elif P:
        add("tower.embed.positions", P * D, "tower_positions × tower_d_model", shape=(P, D))


def _tiles(spec: ModelSpec, add) -> None:  # type: ignore[no-untyped-def]
    """MllamaPrecomputedPositionEmbedding (a gate, the patch positions and a table per aspect
    ratio of every tile's positions) and MllamaPrecomputedAspectRatioEmbedding before and
    after the local encoder (a gate and a table per aspect ratio of each tile's vector)."""
    D, P, T, A = spec.tower_d_model, spec.tower_positions, spec.tower_tiles, \
        spec.tower_aspect_ratios
    add("tower.embed.positions", P * D, "tower_positions × tower_d_model", shape=(P, D))
    add("tower.embed.tile_positions", A * T * P * D, "tower_aspect_ratios × (tower_tiles · "
        "tower_positions · tower_d_model)", shape=(A, T * P * D))
    add("tower.embed.tile_embeddings", 2 * A * T * D, "2 · tower_aspect_ratios × (tower_tiles "
        "· tower_d_model)", note="before and after the local encoder")
    add("tower.embed.gates", 3, "3 (tanh gates on the position and tile embeddings)")


def _layers(spec: ModelSpec, t: Tower, p: str, L: int, add,  # type: ignore[no-untyped-def]
            norm: tuple[int, str]) -> None:
    """One kind of tower layer: two norms, Q, K, V and O, the MLP; repeated L times."""
    D, F = spec.tower_d_model, spec.tower_d_ff
    if spec.tower_head_dim:  # heads of their own width (Gemma 4's head_dim)
        _attention(spec, t, p, L, add)
    elif spec.tower_kv_heads:  # fewer K/V heads (EXAONE 4.5's vision attention)
        kv = spec.tower_kv_heads * (D // spec.tower_heads)
        add(p + "attn.qkv.weight", (D + 2 * kv) * D, "(tower_d_model + 2 · tower_kv_heads · "
            "tower_d_model / tower_heads) · tower_d_model", L, shape=(D + 2 * kv, D))
        if t.qkv_bias:
            add(p + "attn.qkv.bias", D + 2 * kv, "tower_d_model + 2 · tower_kv_heads · "
                "tower_d_model / tower_heads", L)
    else:
        add(p + "attn.qkv.weight", 3 * D * D, "3 · tower_d_model²", L, shape=(3 * D, D))
        bias = (2 + t.k_bias) * D if t.qkv_bias else 0
        if bias:
            add(p + "attn.qkv.bias", bias, "3 · tower_d_model" if t.k_bias else
                "2 · tower_d_model (Q and V; K has none)", L)
    if not spec.tower_head_dim:
        add(p + "attn.o.weight", D * D, "tower_d_model²", L, shape=(D, D))
    if t.o_bias:
        add(p + "attn.o.bias", D, "tower_d_model", L)
    if t.qk_norm:
        hd = spec.tower_head_dim or D // spec.tower_heads
        add(p + "attn.qk_norm", 2 * hd, "2 · tower_head_dim", L, "q_norm and k_norm")
    mats = 3 if t.mlp == "gated" else 2
    add(p + "mlp.weight", mats * D * F, f"{mats} · tower_d_model · tower_d_ff", L,
        "gate, up and down" if mats == 3 else "fc1 and fc2")
    if t.mlp_bias:
        add(p + "mlp.bias", (mats - 1) * F + D, ("2 · " if mats == 3 else "") +
            "tower_d_ff + tower_d_model", L)
    n = t.norms
    add(p + "norms", n * norm[0], f"{n} · " + norm[1] if t.norm == "rmsnorm" else
        f"{2 * n} · tower_d_model", L, "before the attention and the MLP" + (
            " and after them" if n == 4 else ""))


def _attention(spec: ModelSpec, t: Tower, p: str, L: int,
               add) -> None:  # type: ignore[no-untyped-def]
    """Q, K, V and O over heads of tower_head_dim (tower_kv_heads of them for K and V)."""
    D, H, hd = spec.tower_d_model, spec.tower_heads, spec.tower_head_dim
    KV = spec.tower_kv_heads or H
    kv = "tower_kv_heads" if spec.tower_kv_heads else "tower_heads"
    add(p + "attn.qkv.weight", (H + 2 * KV) * hd * D, f"(tower_heads + 2 · {kv}) · "
        "tower_head_dim × tower_d_model", L, shape=((H + 2 * KV) * hd, D))
    if t.qkv_bias:
        add(p + "attn.qkv.bias", (H + (1 + t.k_bias) * KV) * hd, "(tower_heads + " + (
            "2 · " if t.k_bias else "") + f"{kv}) · tower_head_dim" + (
            "" if t.k_bias else " (Q and V; K has none)"), L)
    add(p + "attn.o.weight", H * hd * D, "tower_heads · tower_head_dim × tower_d_model", L,
        shape=(D, H * hd))


def _sam(spec: ModelSpec, add) -> None:  # type: ignore[no-untyped-def]
    """GOT-OCR 2's relative position tables (GotOcr2VisionAttention.rel_pos_h and rel_pos_w:
    2 · side - 1 rows of head_dim each, side the window's or the grid's) and its neck (conv1, a
    1 × 1 convolution to tower_out channels, conv2, 3 × 3, both bias-free, each followed by a
    channels-first LayerNorm)."""
    D, C, L = spec.tower_d_model, spec.tower_out, spec.tower_layers
    hd, w, g = D // spec.tower_heads, spec.tower_window, spec.tower_grid
    G = spec.tower_global_attn if w else L
    if L - G:
        add("tower.rel_pos.windowed", 2 * (2 * w - 1) * hd, "2 · (2 · tower_window - 1) · "
            "tower_d_model / tower_heads", L - G, "height and width, in windowed layers")
    if G:
        add("tower.rel_pos.global", 2 * (2 * g - 1) * hd, "2 · (2 · tower_grid - 1) · "
            "tower_d_model / tower_heads", G, "height and width, in global layers")
    add("tower.neck.conv1", D * C, "tower_d_model × tower_out", shape=(C, D))
    add("tower.neck.conv2", 9 * C * C, "9 · tower_out²", shape=(C, C, 3, 3))
    add("tower.neck.norms", 4 * C, "4 · tower_out")


def _merger(spec: ModelSpec, add) -> None:  # type: ignore[no-untyped-def]
    """Qwen-VL's patch merger: a norm, then m² neighbouring patches (concatenated) through two
    biased linear layers to the language model's width (Qwen2_5_VLPatchMerger: ln_q, an RMSNorm;
    Qwen3VLVisionPatchMerger: a LayerNorm); Qwen3-VL's deepstack mergers norm after the
    concatenation."""
    D, m, out = spec.tower_d_model, spec.tower_merge, spec.tower_out or spec.tower_d_model
    W = D * m * m
    mlp = W * W + W + W * out + out
    mlp_f = ("(tower_d_model · tower_merge²)² + tower_d_model · tower_merge² + tower_d_model · "
             "tower_merge² × tower_out + tower_out")
    qwen3 = spec.tower == "qwen3_vl"
    add("tower.merger.norm", 2 * D if qwen3 else D, "2 · tower_d_model" if qwen3 else
        "tower_d_model")
    add("tower.merger.mlp", mlp, mlp_f, note="merges tower_merge² patches into one token")
    if spec.tower_deepstack:
        K = spec.tower_deepstack
        add("tower.deepstack.norm", 2 * W, "2 · tower_d_model · tower_merge²", K,
            "one merger per deepstack layer, its norm after the merge")
        add("tower.deepstack.mlp", mlp, mlp_f, K)


def _projector(spec: ModelSpec, add) -> None:  # type: ignore[no-untyped-def]
    """The projector from the tower's output to the language model's width (d_model)."""
    Dv, E, m = spec.tower_d_model, spec.d_model, spec.tower_merge
    out = spec.tower_out or Dv
    b = spec.projector_bias
    if spec.projector == "gemma3":
        # Gemma3MultiModalProjector: mm_soft_emb_norm (RMSNorm), mm_input_projection_weight
        add("projector.norm", Dv, "tower_d_model")
        add("projector.weight", Dv * E, "tower_d_model × d_model", shape=(Dv, E))
    elif spec.projector == "mistral3":
        # Mistral3MultiModalProjector: an RMSNorm, the patch merger (merging_layer: m² patches
        # to one, no bias), linear_1 and linear_2 (multimodal_projector_bias)
        add("projector.norm", Dv, "tower_d_model")
        add("projector.patch_merger", Dv * m * m * Dv, "tower_d_model · tower_merge² × "
            "tower_d_model", shape=(Dv, Dv * m * m))
        add("projector.linear_1", out * E + E * b, "tower_out × d_model" + " + d_model" * b)
        add("projector.linear_2", E * E + E * b, "d_model²" + " + d_model" * b)
    elif spec.projector == "lfm2_vl":
        # Lfm2VlMultiModalProjector: a LayerNorm over m² merged patches (pixel unshuffle),
        # linear_1 to projector_hidden_size, linear_2 to d_model (projector_bias)
        W, F = Dv * m * m, spec.projector_d_ff
        add("projector.norm", 2 * W, "2 · tower_d_model · tower_merge²")
        add("projector.linear_1", W * F + F * b, "tower_d_model · tower_merge² × "
            "projector_d_ff" + " + projector_d_ff" * b)
        add("projector.linear_2", F * E + E * b, "projector_d_ff × d_model" + " + d_model" * b)
    elif spec.projector == "kimi_k25":
        # Kimi_K25MultiModalProjector: pre_norm (a LayerNorm over the tower's output), in_proj
        # over m² merged patches, out_proj to d_model, both biased
        W = out * m * m
        add("projector.norm", 2 * out, "2 · tower_out")
        add("projector.in_proj", W * W + W, "(tower_out · tower_merge²)² + tower_out · "
            "tower_merge²")
        add("projector.out_proj", W * E + E, "tower_out · tower_merge² × d_model + d_model")
    elif spec.projector == "got_ocr2":
        # GotOcr2MultiModalProjector: conv_upsampler1 (tower_out -> 2 · tower_out) and
        # conv_upsampler2 (-> d_model), 3 × 3, stride 2, bias-free; multimodal_projector, biased
        add("projector.conv_upsampler1", 9 * out * 2 * out, "9 · tower_out · 2 · tower_out",
            shape=(2 * out, out, 3, 3))
        add("projector.conv_upsampler2", 9 * 2 * out * E, "9 · 2 · tower_out × d_model",
            shape=(E, 2 * out, 3, 3))
        add("projector.linear", E * E + E, "d_model² + d_model")
    elif spec.projector == "moss":
        # MossTranscribeDiarizeMultiModalProjector: linear_1 (tower_out, audio_merge_size
        # frames, -> d_model) and linear_2 (projector_bias), then a biased LayerNorm
        add("projector.linear_1", out * E + E * b, "tower_out × d_model" + " + d_model" * b)
        add("projector.linear_2", E * E + E * b, "d_model²" + " + d_model" * b)
        add("projector.norm", 2 * E, "2 · d_model")
    elif spec.projector == "glmasr":
        # GlmAsrMultiModalProjector: linear_1 (the encoder's intermediate_size -> 2 · d_model)
        # and linear_2 (-> d_model), both biased
        add("projector.linear_1", out * 2 * E + 2 * E, "tower_out × 2 · d_model + 2 · d_model")
        add("projector.linear_2", 2 * E * E + E, "2 · d_model² + d_model")
    elif spec.projector == "qwen3_asr":
        # Qwen3ASRMultiModalProjector: linear_1 (d_model -> d_model), linear_2 (d_model ->
        # output_dim), both biased; output_dim need not be the language model's width
        add("projector.linear_1", Dv * Dv + Dv, "tower_d_model² + tower_d_model")
        add("projector.linear_2", Dv * out + out, "tower_d_model × tower_out + tower_out")
    elif spec.projector == "mlp":
        # VoxtralMultiModalProjector: linear_1 (tower_out -> d_model), an activation, linear_2
        add("projector.linear_1", out * E + E * b, "tower_out × d_model" + " + d_model" * b,
            shape=() if b else (E, out))
        add("projector.linear_2", E * E + E * b, "d_model²" + " + d_model" * b,
            shape=() if b else (E, E))
    else:  # linear: MllamaForConditionalGeneration's, Qwen2AudioMultiModalProjector
        add("projector.weight", out * E, "tower_out × d_model", shape=(E, out))
        if b:
            add("projector.bias", E, "d_model")
