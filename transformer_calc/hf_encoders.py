"""Encoders on BERT's layout whose layers hold tensors of their own: one record per model_type
(transformers 5.23), registered by hf.py beside its ENCODERS.

Each record names the class counted, hf.Encoder's fields (the BERT-style layout it shares),
the heads its classification classes put on it, and what its forward runs that tcalc's FLOPs
and training activations do not model: ``tcalc flops`` and training ``tcalc memory`` refuse
these types naming it, rather than print a number for another attention (ESMC's FLOPs are
modelled, its training activations refused). This module imports
hf lazily (hf imports it), so it holds data and mappers only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from transformer_calc.errors import SpecError
from transformer_calc.spec import MAX_LAYERS

if TYPE_CHECKING:
    from collections.abc import Callable

    from transformer_calc.hf import Config


class Layered(NamedTuple):
    """A model_type on hf.Encoder's layout with tensors beyond it (``fields``: the spec fields
    the file decides), its heads (hf.HEADS' entry it shares, or Heads' fields) and what its
    forward runs that tcalc does not model."""

    encoder: dict[str, Any]  # hf.Encoder's fields
    fields: Callable[[Config], dict[str, Any]]
    unmodelled: str
    heads: str | dict[str, Any] = "roberta"
    # what the training activations' rules do not model when the FLOPs are
    activations_unmodelled: str = ""
    # (the config class's dropout keys and their default)
    dropout: tuple[tuple[str, ...], float] = (
        ("hidden_dropout_prob", "attention_probs_dropout_prob"), 0.1)


def _size(c: Config, key: str) -> int:
    """A size the record derives others from: an integer >= 1 (null takes none)."""
    value = c.t(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(key, "an integer >= 1", value, source=c.where)
    return value


def _longformer(c: Config) -> dict[str, Any]:
    """LongformerSelfAttention: query_global, key_global and value_global beside the local
    projections."""
    return {"global_qkv": True}


def _xlnet(c: Config) -> dict[str, Any]:
    """XLNetModel: a token table and mask_emb, no positions (relative encodings, projected by
    each layer's r), layers of XLNetRelativeAttention (q, k, v, o without biases) and
    XLNetFeedForward, post-norm; XLNetLMHeadModel's lm_loss is tied to the tokens with a bias
    of its own. The classification heads' SequenceSummary is a biased d_model projection
    (summary_use_proj) before logits_proj."""
    c.refuse("summary_type", lambda v: v == "attn", "XLNet's 'attn' summary: transformers "
             "5.23 raises NotImplementedError")
    c.refuse("summary_proj_to_labels", bool, "a summary projected to the labels before "
             "logits_proj is not modelled")
    if c.task in ("seq_cls", "multiple_choice") and not c.t("summary_use_proj", True):
        raise SpecError("summary_use_proj", "true (a sequence summary without its projection "
                        "is not modelled)", c.data.get("summary_use_proj"), source=c.where)
    return {"xl_relative": True, "mask_embedding": True, "max_positions": 0}


def _funnel(c: Config) -> dict[str, Any]:
    """FunnelModel: block_sizes layers in the encoder (block_repeats runs a block's layers
    again with the same weights) and num_decoder_layers more in the decoder; FunnelBaseModel
    (under the sequence classification and multiple choice classes) has no decoder. Each layer
    is FunnelRelMultiheadAttention (q_head without a bias; r_kernel and its biases, seg_embed)
    and FunnelPositionwiseFFN, post-norm; the embeddings are tokens and a norm."""
    blocks, repeats = c.t("block_sizes"), c.t("block_repeats")
    if not isinstance(blocks, (list, tuple)) or not blocks or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in blocks):
        raise SpecError("block_sizes", "a list of integers >= 1 (layers per block)", blocks,
                        source=c.where)
    if repeats is not None and (not isinstance(repeats, (list, tuple))
                                or len(repeats) != len(blocks)):
        raise SpecError("block_repeats", f"a list of {len(blocks)} integers, one per block "
                        "(FunnelConfig)", repeats, source=c.where)
    if sum(blocks) > MAX_LAYERS:
        raise SpecError("block_sizes", f"layers summing to at most {MAX_LAYERS:,}", blocks,
                        source=c.where)
    decoder = c.t("num_decoder_layers", 2)
    if isinstance(decoder, bool) or not isinstance(decoder, int) or decoder < 0:
        raise SpecError("num_decoder_layers", "an integer >= 0", decoder, source=c.where)
    base = c.task in ("seq_cls", "multiple_choice")  # FunnelBaseModel
    if repeats is not None and any(r != 1 for r in repeats):
        c.notes.append("block_repeats runs a block's layers again with the same weights: "
                       "counted once, as transformers builds them")
    return {"n_layers": sum(blocks) + (0 if base else decoder), "xl_relative": True,
            "bias_q": False, "max_positions": 0}


def _xmod(c: Config) -> dict[str, Any]:
    """XmodOutput: one XmodAdapter (dense1 to hidden_size // adapter_reduction_factor,
    dense2 back) per entry of languages, after the FFN's output; a norm of their own when
    adapter_layer_norm. pre_norm moves the layers' norms before their sublayers and adds the
    encoder's final norm (XmodEncoder.LayerNorm)."""
    languages = c.t("languages", ["en_XX"])
    if not isinstance(languages, (list, tuple)) or not languages \
            or not all(isinstance(code, str) for code in languages):
        raise SpecError("languages", "a list of language codes (one adapter each)", languages,
                        source=c.where)
    factor = c.t("adapter_reduction_factor", 2)
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise SpecError("adapter_reduction_factor", "an integer >= 1", factor, source=c.where)
    pre = bool(c.t("pre_norm", False))
    # (an nn.ModuleDict keyed by str(language): a repeated code is one adapter)
    return {"lang_adapters": len(dict.fromkeys(str(code) for code in languages)),
            "adapter_width": _size(c, "hidden_size") // factor,
            "adapter_norm": bool(c.t("adapter_layer_norm", False)),
            "norm_position": "pre" if pre else "post", "final_norm": pre}


def _nystromformer(c: Config) -> dict[str, Any]:
    """NystromformerSelfAttention: a depthwise nn.Conv2d over each head's values, of width
    conv_kernel_size (NystromformerConfig types it int: a null is refused, as transformers
    5.23's strict config refuses it)."""
    k = c.data.get("conv_kernel_size", c.t("conv_kernel_size"))
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise SpecError("conv_kernel_size", "an integer >= 1", k, source=c.where)
    return {"value_conv": k}


def _convbert(c: Config) -> dict[str, Any]:
    """ConvBertSelfAttention: num_attention_heads // head_ratio heads (at least one), each
    (hidden_size // heads) // 2 wide, beside the span-based convolution of conv_kernel_size;
    the FFN as BERT's when num_groups is 1 (GroupedLinearLayer otherwise)."""
    c.refuse("num_groups", lambda v: v != 1, "ConvBERT's grouped FFN (GroupedLinearLayer) is "
             "not modelled")
    E, heads = _size(c, "hidden_size"), _size(c, "num_attention_heads")
    ratio, k = c.t("head_ratio", 2), c.t("conv_kernel_size", 9)
    for key, value in (("head_ratio", ratio), ("conv_kernel_size", k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(key, "an integer >= 1", value, source=c.where)
    H = max(heads // ratio, 1)
    if E % H:
        raise SpecError("num_attention_heads", f"a count whose num_attention_heads // "
                        f"head_ratio ({H}) divides hidden_size={E} (ConvBertSelfAttention)",
                        heads, source=c.where)
    if (E // H) // 2 < 1:
        raise SpecError("hidden_size", f"at least 2 per attention head ({H} heads)", E,
                        source=c.where)
    return {"n_heads": H, "d_head": (E // H) // 2, "span_conv": k}


def _fnet(c: Config) -> dict[str, Any]:
    """FNetModel: embeddings normed, then projected (FNetEmbeddings.projection, biased); layers
    of a Fourier transform (no parameters) and its norm, then BERT's FFN; the pooler in every
    class; the MLM head as BERT's."""
    L = c.t("num_hidden_layers")
    return {"n_heads": 0, "layer_attention": "X*", "fourier_mixer": True,
            "embed_factorized": True, "embed_proj_dim": c.t("hidden_size"),
            "pooler": True, "n_layers": L}


def _luke(c: Config) -> dict[str, Any]:
    """LukeModel: RoBERTa's embeddings and layers beside LukeEntityEmbeddings, the entity-aware
    queries when use_entity_aware_attention, BERT's pooler; LukeForMaskedLM's word decoder is
    its own (only the entity decoder is tied), and its entity prediction head."""
    Ne, We = c.t("entity_vocab_size"), c.t("entity_emb_size")
    for key, value in (("entity_vocab_size", Ne), ("entity_emb_size", We)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(key, "an integer >= 1", value, source=c.where)
    return {"entity_vocab": Ne, "entity_width": We,
            "entity_queries": bool(c.t("use_entity_aware_attention", True)),
            "entity_head": c.task == "lm", "mlm_decoder_untied": c.task == "lm"}


def _esmc(c: Config) -> dict[str, Any]:
    """EsmcModel: a token table, pre-norm layers (EsmcLayerNorm with a bias) of rotary
    attention with K/V heads, QK-norms over the heads' width and a gated MLP, a final norm
    without a bias; EsmcMaskedLMHead's decoder is its own (the class ties nothing)."""
    E, H, dh = _size(c, "hidden_size"), _size(c, "num_attention_heads"), c.t("head_dim")
    if dh is not None and dh * H != E:
        raise SpecError("head_dim", f"hidden_size / num_attention_heads = {E} / {H} (EsmcAttention "
                        "norms the queries and keys over hidden_size: another width cannot run)",
                        dh, source=c.where)
    return {"n_kv_heads": c.kv_heads(None, H), "qk_norm": "width",
            "qk_final_norm": "layernorm_nobias", "mlm_bias": "decoder"}


def _ultrabert(c: Config) -> dict[str, Any]:
    """UltrabertModel: Llama's layers (RMSNorm, rotary attention with K/V heads, a gated MLP)
    run bidirectionally, full or sliding by layer_types; UltrabertForMaskedLM's prediction head
    is two bias-free projections through prediction_head_size before a bias-free decoder, tied
    to the tokens when tie_word_embeddings."""
    R = c.t("prediction_head_size", 768)
    if isinstance(R, bool) or not isinstance(R, int) or R < 1:
        raise SpecError("prediction_head_size", "an integer >= 1", R, source=c.where)
    return {"n_kv_heads": c.kv_heads(None, c.t("num_attention_heads")), "norm": "rmsnorm",
            "lm_head_bias": False, "head_bottleneck": R if c.task == "lm" else 0}


LAYERED: dict[str, Layered] = {
    "longformer": Layered(
        {"cls": "LongformerForMaskedLM"}, _longformer,
        "its sliding-window attention over attention_window keys, run in overlapping chunks, "
        "with global tokens (LongformerSelfAttention)"),
    "xlnet": Layered(
        {"cls": "XLNetLMHeadModel", "keys": (
            ("hidden_size", "d_model"), ("num_hidden_layers", "n_layer"),
            ("num_attention_heads", "n_head"), ("intermediate_size", "d_inner"),
            ("hidden_act", "ff_activation")),
         "token_types": False, "qkv_bias": False, "o_bias": False, "embedding_norm": False,
         "head": "bias", "position": "none"},
        _xlnet, "XLNet's two-stream relative attention (XLNetRelativeAttention: position "
        "and segment terms, relative shifts)",
        heads={"seq_cls": "dense", "seq_bias": True, "qa_labels": 0,
               "multiple_choice": "dense"},
        dropout=(("dropout",), 0.1)),
    "funnel": Layered(
        {"cls": "FunnelForMaskedLM", "keys": (
            ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
            ("intermediate_size", "d_inner"), ("head_dim", "d_head")),
         "token_types": False, "head": "bias", "position": "none", "head_dim": True},
        _funnel, "Funnel's pooling of the sequence between blocks and its relative attention "
        "(FunnelRelMultiheadAttention)", heads="dense",
        dropout=(("hidden_dropout", "attention_dropout"), 0.1)),
    "xmod": Layered(
        {"cls": "XmodForMaskedLM"}, _xmod,
        "X-MOD's language adapters, each run on its language's tokens (XmodOutput)"),
    "convbert": Layered(
        {"cls": "ConvBertForMaskedLM", "factorized": "embedding_size", "mlm_bias": "decoder"},
        _convbert, "ConvBERT's span-based dynamic convolution heads (ConvBertSelfAttention)",
        # (its multiple choice summary has no projection: ConvBertConfig has no
        # summary_use_proj)
        heads={"seq_cls": "dense", "seq_bias": True, "qa_labels": 0}),
    "fnet": Layered(
        {"cls": "FNetForMaskedLM"}, _fnet,
        "FNet's Fourier transforms over the sequence and the hidden width "
        "(FNetBasicFourierTransform)",
        heads={"pooled": ("base", "seq_cls", "token_cls", "qa", "multiple_choice"),
               "seq_bias": True, "qa_labels": 0},
        dropout=(("hidden_dropout_prob",), 0.1)),
    "esmc": Layered(
        {"cls": "EsmcForMaskedLM", "token_types": False, "embedding_norm": False,
         "norm_position": "pre", "final_norm": True, "ffn": "gated", "position": "rope",
         "head_dim": True, "qkv_bias": "attention_bias", "o_bias": "attention_bias",
         "ffn_in_bias": "mlp_bias", "ffn_out_bias": "mlp_bias", "untied_head": True}, _esmc,
        "", heads={"seq_cls": "dense", "seq_bias": True}, dropout=(("attention_dropout",), 0.0),
        activations_unmodelled="ESMC's layer norms cast back to the input's dtype "
        "(EsmcLayerNorm) and its bidirectional rotary attention, not measured"),
    "ultrabert": Layered(
        {"cls": "UltrabertForMaskedLM", "token_types": False, "embedding_norm": False,
         "norm_position": "pre", "final_norm": True, "ffn": "gated", "position": "rope",
         "head_dim": True, "qkv_bias": "attention_bias", "o_bias": "attention_bias",
         "ffn_in_bias": "mlp_bias", "ffn_out_bias": "mlp_bias", "head": "bias"}, _ultrabert,
        "Ultrabert's bidirectional sliding-window layers (layer_types, sliding_window)",
        # (its question-answering head has 2 outputs whatever num_labels says)
        heads={"seq_bias": True}, dropout=(("attention_dropout",), 0.0)),
    "luke": Layered(
        {"cls": "LukeForMaskedLM", "pooler": True}, _luke,
        "LUKE's entity inputs and entity-aware attention (LukeSelfAttention)", heads="roberta"),
    "nystromformer": Layered(
        {"cls": "NystromformerForMaskedLM", "position_offset": 2}, _nystromformer,
        "Nyström attention over num_landmarks segment means and its value convolution "
        "(NystromformerSelfAttention)",
        # (its question-answering class sets num_labels 2 before qa_outputs)
        heads={"seq_cls": "dense", "seq_bias": True, "qa_labels": 2,
               "multiple_choice": "dense"}),
}


def mapper(model_type: str) -> Callable[[Config], dict[str, Any]]:
    """The model type's mapper: hf's encoder mapping, the record's own fields over it."""
    record = LAYERED[model_type]

    def read(c: Config) -> dict[str, Any]:
        from transformer_calc.hf import ENCODERS, _encoder

        values = _encoder(c, ENCODERS[model_type])
        if record.unmodelled or record.activations_unmodelled:
            c.notes.append(f"tcalc {'flops and ' if record.unmodelled else ''}training memory "
                           "refuse this model: "
                           f"{record.unmodelled or record.activations_unmodelled} not modelled")
        return values | record.fields(c) | {
            "unmodelled": record.unmodelled,
            "activations_unmodelled": record.activations_unmodelled}
    return read
