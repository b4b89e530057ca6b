"""A Hugging Face config.json -> ModelSpec, offline, for the usual head class of each model_type.

Each mapper reads the keys that decide parameter shapes, with the default the transformers
config class fills in when a key is absent (defaults read from transformers 5.23.0, e.g.
``LlamaConfig().to_dict()``). A key that would add tensors tcalc does not model is refused
with a message naming it, never silently ignored. Keys with no effect on parameters
(dropouts, epsilons, token ids, rope_theta, ...) are ignored.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from transformer_calc.errors import PresetError, SpecError, value_error_text
from transformer_calc.spec import MAX_LAYERS, MAX_SIZE, ModelSpec

# model_type -> the class whose parameters tcalc counts (what reference_counts.py builds).
HEAD_CLASS = {
    "gpt2": "GPT2LMHeadModel",
    "gpt-sw3": "GPT2LMHeadModel",
    "bert": "BertForMaskedLM",
    "roberta": "RobertaForMaskedLM",
    "gemma": "GemmaForCausalLM",
    "phi": "PhiForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
    "falcon": "FalconForCausalLM",
    "opt": "OPTForCausalLM",
    "t5": "T5ForConditionalGeneration",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "axk1": "AXK1ForCausalLM",
    "longcat_flash": "LongcatFlashForCausalLM",
    "dbrx": "DbrxForCausalLM",
    "kimi_linear": "KimiLinearForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "modernbert": "ModernBertForMaskedLM",
    "modernbert-decoder": "ModernBertDecoderForCausalLM",
    "fsmt": "FSMTForConditionalGeneration",
    "gemma4_text": "Gemma4ForCausalLM",
    "gemma4_unified_text": "Gemma4UnifiedForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "mimo_v2_flash": "MiMoV2FlashForCausalLM",
    "t5gemma": "T5GemmaForConditionalGeneration",
    "gemma3n_text": "Gemma3nForCausalLM",
    "deepseek_v4": "DeepseekV4ForCausalLM",
}

# transformers' ACT2FN names -> tcalc's activation (no parameters either way).
ACTIVATIONS = {
    "relu": "relu", "gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh", "silu": "silu", "swish": "silu", "tanh": "tanh",
    "sigmoid": "sigmoid", "linear": "identity", "quick_gelu": "gelu", "relu2": "relu2",
    "xielu": "xielu",
}


# The type each shape key must have; a config.json is untrusted input, checked before any
# arithmetic so that an error names the file's own key.
INT_KEYS = frozenset("""
    vocab_size hidden_size n_embd n_layer n_head n_inner n_positions num_hidden_layers
    num_attention_heads intermediate_size max_position_embeddings type_vocab_size head_dim
    num_key_value_heads num_local_experts num_experts_per_tok ffn_hidden_size num_kv_heads
    num_ln_in_parallel_attn ffn_dim word_embed_proj_dim d_model num_layers num_decoder_layers
    num_heads d_kv d_ff relative_attention_num_buckets encoder_layers decoder_layers
    encoder_attention_heads decoder_attention_heads encoder_ffn_dim decoder_ffn_dim
    decoder_vocab_size moe_intermediate_size decoder_sparse_step num_experts n_routed_experts
    n_shared_experts first_k_dense_replace q_lora_rank kv_lora_rank qk_nope_head_dim
    qk_rope_head_dim v_head_dim sliding_window sliding_window_size sliding_window_pattern
    experts_per_token
    num_nextn_predict_layers moe_layer_freq shared_expert_intermediate_size num_shared_experts
    shared_intermediate_size n_group topk_group max_target_positions
    cross_attention_hidden_size index_n_heads index_head_dim index_topk index_topk_freq
    hc_mult o_groups o_lora_rank block_multiple_of moe_shared_expert_intermediate_size
    intermediate_multiple_size local_attention global_attn_every_n_layers src_vocab_size
    attn_layer_period attn_layer_offset expert_layer_period expert_layer_offset
    full_attention_interval tgt_vocab_size pad_token_id embedding_size input_embedding_size
    output_embedding_size num_hidden_groups inner_group_num shape_vocab_size shape_embed_dim
    pronunciation_vocab_size pronunciation_embed_dim global_head_dim num_global_key_value_heads
    num_kv_shared_layers altup_num_inputs laurel_rank hidden_size_per_layer_input
    vocab_size_per_layer_input top_k_experts
    local_radius global_block_size linear_num_key_heads linear_num_value_heads
    linear_key_head_dim linear_value_head_dim expert_ffn_hidden_size zero_expert_num moe_topk
    qk_head_dim num_labels
    """.split())
# Sizes and periods a class divides by or counts layers with: 0 is no value tcalc can count
# (transformers fails on it, or builds a model without layers)
POSITIVE_KEYS = frozenset("""
    num_hidden_layers num_attention_heads n_layer n_head num_layers num_heads decoder_sparse_step
    attn_layer_period expert_layer_period global_attn_every_n_layers full_attention_interval
    global_block_size linear_num_key_heads linear_num_value_heads linear_key_head_dim
    linear_value_head_dim block_multiple_of num_labels
    """.split())
BOOL_KEYS = frozenset("""
    tie_word_embeddings attention_bias mlp_bias use_parallel_residual new_decoder_architecture
    parallel_attn multi_query bias alibi do_layer_norm_before _remove_final_layer_norm
    enable_bias share_encoder_decoder_embeddings add_cross_attention is_decoder qk_layernorm
    layer_norm_elementwise_affine use_sliding_window use_bias use_qkv_bias attention_out_bias
    use_qk_norm use_parallel_residual layernorm_embedding use_learned_position_embeddings
    router_bias
    use_sandwich_norm use_attention_gate norm_bias classifier_bias decoder_bias concat_input
    enable_shape enable_pronunciation attention_k_eq_v use_double_wide_mlp enable_moe_block
    """.split())
# the keys that count a stack's layers (each mapper may build a per-layer list from them)
LAYER_KEYS = frozenset({"num_hidden_layers", "n_layer", "n_layers", "num_layers",
                        "num_decoder_layers", "encoder_layers", "decoder_layers"})
FLOAT_KEYS = frozenset({"partial_rotary_factor", "rotary_pct", "resid_pdrop", "embd_pdrop",
                        "attn_pdrop", "hidden_dropout_prob", "attention_probs_dropout_prob",
                        "dropout", "attention_dropout", "dropout_rate", "hidden_dropout",
                        "activation_dropout", "resid_dropout", "embed_dropout"})
# Where each model type keeps its dropout probability (training), and its class default.
DROPOUT_KEYS = {
    "dbrx": (("resid_pdrop", "emb_pdrop", "attn_pdrop"), 0.0),
    "gpt2": (("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.1),
    "bert": (("hidden_dropout_prob", "attention_probs_dropout_prob"), 0.1),
    "roberta": (("hidden_dropout_prob", "attention_probs_dropout_prob"), 0.1),
    "t5": (("dropout_rate",), 0.1),
    "bart": (("dropout", "attention_dropout"), 0.1),
    "marian": (("dropout", "attention_dropout"), 0.1),
    "opt": (("dropout", "attention_dropout"), 0.1),
    "gpt_neox": (("hidden_dropout", "attention_dropout"), 0.0),
    "falcon": (("hidden_dropout", "attention_dropout"), 0.0),
    "phi": (("resid_pdrop", "embd_pdrop", "attention_dropout"), 0.0),
    "gptj": (("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.0),
    "codegen": (("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.0),
    "modernbert": (("embedding_dropout", "mlp_dropout", "attention_dropout"), 0.0),
    "fsmt": (("dropout", "attention_dropout"), 0.1),
    "t5gemma": (("dropout_rate", "attention_dropout"), 0.0),
    "modernbert-decoder": (("embedding_dropout", "mlp_dropout", "attention_dropout"), 0.0),
    # the config classes' own dropout keys (0.1 by default), not attention_dropout (absent:
    # 0.0, which would count no masks; measured)
    "biogpt": (("hidden_dropout_prob", "attention_probs_dropout_prob"), 0.1),
    "ctrl": (("resid_pdrop", "embd_pdrop", "attention_dropout"), 0.1),  # none on the scores
    "gpt-sw3": (("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.1),
    "gpt_bigcode": (("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.1),
    "openai-gpt": (("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.1),
    "gpt_neo": (("resid_dropout", "embed_dropout", "attention_dropout"), 0.0),
}

# Config classes whose attention dropout defaults to 0.0 while the rest defaults to 0.1
# (transformers 5.23: OPTConfig, BartConfig, ... attention_dropout=0.0; GteConfig
# attention_probs_dropout_prob=0.0): no mask on the attention probabilities.
ATTENTION_DROPOUT_DEFAULTS = dict.fromkeys(
    ("opt", "bart", "marian", "mbart", "pegasus", "blenderbot", "blenderbot-small", "mvp",
     "bigbird_pegasus", "gte", "fsmt", "ctrl"), 0.0)


class Config:
    """A config.json mapping with defaults; every value read is type-checked by key."""

    def __init__(self, data: dict[str, Any], where: str, table: dict[str, Any] | None = None):
        self.data = data
        self.where = where
        self.table = table or {}  # the config class's defaults (hf_defaults.py), generic records
        self.notes: list[str] = []
        # ``architectures`` names a seq2seq family's *ForCausalLM: count its decoder alone
        self.decoder_alone = False
        self.task = "lm"  # the task of the class counted (Counted.task)

    def t(self, key: str, fallback: Any = None) -> Any:
        """The file's value, else the config class's default for this model_type, else
        ``fallback`` (a derived value, e.g. head_dim = hidden_size / num_attention_heads). An
        explicit null is passed to the config class as None, which derives the value: it
        takes ``fallback``, not the class default."""
        if key in self.data and self.data[key] is None:
            return fallback
        value = self.get(key, None)
        if value is None:
            value = self.table.get(key)
        return fallback if value is None else value

    def with_data(self, data: dict[str, Any]) -> Config:
        """The same config reading ``data`` (a record's derived defaults filled in); notes and
        errors stay the file's."""
        view = Config(data, self.where, self.table)
        view.notes, view.decoder_alone, view.task = self.notes, self.decoder_alone, self.task
        return view

    def renamed(self, names: dict[str, str]) -> Config:
        """A view that reads a family's own spelling of the standard keys (n_embd for
        hidden_size, ...); errors still name the file's key."""
        view = _Renamed(self.data, self.where, self.table)
        view.names, view.notes, view.decoder_alone = names, self.notes, self.decoder_alone
        view.task = self.task
        return view

    def spelled(self, key: str) -> str:
        return key

    def flag(self, spec: bool | str) -> bool:
        """A record's switch: fixed (True/False) or read from a config key."""
        return spec if isinstance(spec, bool) else bool(self.t(spec, False))

    def get(self, key: str, default: Any) -> Any:
        value = self.data.get(key)
        if value is None:
            return default
        self._check_type(key, value)
        return value

    def _check_type(self, key: str, value: Any, shown: str = "") -> None:
        name = shown or key
        spelled = _non_finite(value)
        if spelled is not None:
            raise SpecError(name, "a finite number (tcalc reads this key)", _Spelled(spelled),
                            source=self.where)
        if key in INT_KEYS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(name, "a non-negative integer", value, source=self.where)
            if value == 0 and key in POSITIVE_KEYS:
                raise SpecError(name, "an integer >= 1", value, source=self.where)
            if value > MAX_SIZE:
                raise SpecError(name, f"an integer <= {MAX_SIZE:,} (2^40)", value,
                                source=self.where)
            if value > MAX_LAYERS and key in LAYER_KEYS:  # read layer by layer (layer_types)
                raise SpecError(name, f"an integer <= {MAX_LAYERS:,} (layers)", value,
                                source=self.where)
        elif key in BOOL_KEYS and not isinstance(value, bool):
            raise SpecError(name, "true or false", value, source=self.where)
        elif key in FLOAT_KEYS and (isinstance(value, bool)
                                    or not isinstance(value, (int, float))):
            raise SpecError(name, "a number", value, source=self.where)

    def kv_heads(self, absent: int | None, n_heads: int) -> int:
        """num_key_value_heads: a class default when absent; null means n_heads (MHA)."""
        if "num_key_value_heads" not in self.data:
            return n_heads if absent is None else absent
        return self.get("num_key_value_heads", n_heads)

    def first(self, keys: tuple[str, ...], default: Any) -> Any:
        """The first key present (configs name one thing several ways: n_embd, hidden_size)."""
        for key in keys:
            if self.data.get(key) is not None:
                return self.get(key, default)
        return default

    def refuse(self, key: str, unsupported: Callable[[Any], bool], why: str) -> None:
        if key in self.data and self.data[key] is not None and unsupported(self.data[key]):
            raise SpecError(key, f"a value tcalc can count ({why})", self.data[key],
                            source=self.where)

    def activation(self, key: str, default: str) -> str:
        name = self.get(key, default)
        if not isinstance(name, str) or name not in ACTIVATIONS:
            raise SpecError(key, "one of " + ", ".join(sorted(ACTIVATIONS)), name,
                            source=self.where)
        return ACTIVATIONS[name]


def _mpt_attn_config(c: Config) -> dict[str, Any]:
    """MptConfig.attn_config (a mapping, transformers 5.23's MptAttentionConfig): attn_pdrop
    is every dropout MptBlock and MptMLP apply (on the scores, the attention's output and the
    MLP's); clip_qkv clamps Wqkv's output, a kept tensor tcalc does not model: refused."""
    a = c.data.get("attn_config") or {}
    if not isinstance(a, dict):
        raise SpecError("attn_config", "a mapping", a, source=c.where)
    if a.get("clip_qkv"):
        raise SpecError("attn_config.clip_qkv", "null or absent (MptAttention's clamp of the "
                        "fused projection is not modelled)", a["clip_qkv"], source=c.where)
    p = a.get("attn_pdrop", 0.0)
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p < 1:
        raise SpecError("attn_config.attn_pdrop", "a probability in [0, 1)", p, source=c.where)
    return {"dropout": float(p)} if p else {}


def _table(model_type: str) -> dict[str, Any]:
    from transformer_calc.hf_defaults import DEFAULTS  # generated; read only for these types

    return DEFAULTS.get(model_type, {})


# Hybrid and recurrent model types: refused with that reason, not just "unknown".
RECURRENT = frozenset("""zamba zamba2 bailing_hybrid recurrent_gemma rwkv xlstm""".split())


def _known_types(found: object) -> str:
    """What a model_type error expects: short, with the closest names and where the list is."""
    import difflib

    if isinstance(found, str) and found in RECURRENT:
        return ("a model_type tcalc can count (its recurrent mixer or hybrid layout is not "
                "modelled yet: Mamba, Mamba-2, Gated DeltaNet, Kimi's delta attention, "
                "lightning attention and LFM2's convolutions are; Zamba's shared blocks, "
                "Bailing's hybrid, RecurrentGemma, RWKV and xLSTM are not)")
    close = difflib.get_close_matches(found, sorted(MAPPERS), n=3, cutoff=0.6) \
        if isinstance(found, str) else []
    return (f"one of the {len(MAPPERS)} model types in docs/model_types.md"
            + (f" (closest: {', '.join(close)})" if close else ""))


class _Spelled(str):
    """A value quoted as the file spells it (Infinity, not 'Infinity' or inf)."""

    def __repr__(self) -> str:
        return str(self)


def _non_finite(value: Any) -> str | None:
    """How the file spells a value that is no finite number: Python's json writes NaN and
    Infinity bare (transformers 4.x: Mamba-2's and Nemotron-H's time_step_limit [0.0,
    Infinity]); transformers 5 writes {"__float__": "Infinity"}. None for anything else."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("__float__"), str):
        return value["__float__"]
    return None


def spec_from_hf_text(text: str, where: str) -> ModelSpec:
    try:
        # NaN and Infinity parse as transformers parses them (Python's json): a key tcalc
        # never reads may hold one; a key it reads refuses it by name (Config.get)
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise PresetError(f"{where}: invalid JSON (line {e.lineno}, column {e.colno}): "
                          f"{e.msg}", line=e.lineno) from None
    except RecursionError:
        raise PresetError(f"{where}: invalid JSON: nested too deeply") from None
    except ValueError as e:  # e.g. an integer of over 4,300 digits (sys.int_info)
        raise PresetError(f"{where}: invalid JSON: {value_error_text(e)}") from None
    if not isinstance(data, dict):
        raise PresetError(f"{where}: expected a JSON object (a config.json), got "
                          f"{type(data).__name__}")
    return spec_from_hf(data, where)


# The model types on which PEFT refuses LoRA for modules named out_proj or conv1d
# (peft 0.21.2, tuners/tuners_utils.py, _check_lora_target_modules_mamba)
PEFT_MAMBA = frozenset({"falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"})
# MoE types PEFT converts whose router is an nn.Linear of its own (peft 0.21: a LoRA Linear
# there, a ParamWrapper on the router's weight in the others; probed on the registries'
# configs with all-linear)
PEFT_ROUTER_LINEAR = frozenset({"hunyuan_v1_moe", "longcat_flash"})


# Classes whose trainable parameters equal the head class's (checked with transformers 5.23:
# BartModel and BartForConditionalGeneration both 139,420,416 for bart-base; the head is tied).
# FSMTModel keeps the decoder's output projection (FSMTDecoder.output_projection).
SAME_COUNT = {"bart": ("BartModel",), "t5": ("T5WithLMHeadModel",), "fsmt": ("FSMTModel",)}
ENCODER_DECODER = ("t5", "mt5", "umt5", "longt5")  # no *ForCausalLM class in transformers


# The tasks whose classes tcalc counts beside a type's head class (HEAD_CLASS, task "lm"):
# the base model (AutoModel) and the classification and question-answering heads
HEAD_TASKS = ("base", "seq_cls", "token_cls", "qa", "multiple_choice")
# The ends of transformers' class names, by task: a name transformers does not have (a
# remote-code class, another spelling) is read by its end, as transformers' auto classes read
# the config by its model_type whatever architectures says
_SUFFIXES = (("ForSequenceClassification", "seq_cls"), ("ForTokenClassification", "token_cls"),
             ("ForQuestionAnswering", "qa"), ("ForMultipleChoice", "multiple_choice"),
             ("ForCausalLM", "causal"), ("LMHeadModel", "causal"), ("ForMaskedLM", "masked"),
             ("ForConditionalGeneration", "seq2seq"), ("Model", "base"))


class Counted(NamedTuple):
    """The transformers class tcalc counts for a config.json, and its task: lm (the type's
    head class), decoder (a seq2seq family's *ForCausalLM), or one of HEAD_TASKS."""

    cls: str
    task: str
    note: str = ""  # how architectures was read, when it names no class of transformers


def _classes(model_type: str) -> dict[str, str]:
    """The classes tcalc counts for a model type, and the task of each."""
    from transformer_calc.hf_defaults import TASK_CLASSES

    head = HEAD_CLASS[model_type]
    out = {cls: task for task, cls in TASK_CLASSES.get(model_type, {}).items()
           if task in HEAD_TASKS and cls != head}
    record = SEQ2SEQ.get(model_type)
    if record is not None and record.decoder_cls:
        out[record.decoder_cls] = "decoder"
    same: tuple[str, ...] = SAME_COUNT.get(model_type, ())
    causal = TASK_CLASSES.get(model_type, {}).get("causal")
    if causal and causal != head and (model_type in ENCODERS or model_type in _BERTS):
        same += (causal,)  # the encoder run causally (BertLMHeadModel): the MLM head's count
    return out | dict.fromkeys((head, *same), "lm")


_BERTS = ("bert", "roberta")  # the hand-mapped encoders beside ENCODERS


def _check_architecture(data: dict[str, Any], model_type: str, where: str) -> Counted:
    """Honour ``architectures``: the class it names if tcalc counts it (the head class, the
    base model, a classification or question-answering head, a seq2seq family's
    *ForCausalLM), matched as transformers matches it: the exact name, another spelling of it
    (PhiMoEForCausalLM: PhimoeForCausalLM), or a class transformers lacks read by its task
    (the end of its name); else refuse naming it."""
    from transformer_calc.hf_defaults import TASK_CLASSES

    head = HEAD_CLASS[model_type]
    names = data.get("architectures")
    if names is None:
        return Counted(head, "lm")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise SpecError("architectures", "a list of class names", names, source=where)
    cls, known = names[0], _classes(model_type)
    if cls in known:
        return Counted(cls, known[cls], _same(cls, head))
    spelled = {k.lower(): k for k in known}
    if cls.lower() in spelled:
        real = spelled[cls.lower()]
        return Counted(real, known[real], f"architectures names {cls}, transformers' {real}")
    task = next((t for end, t in _SUFFIXES if cls.endswith(end)), "")
    real = TASK_CLASSES.get(model_type, {}).get(task, "")
    if real in known:
        return Counted(real, known[real],
                       f"architectures names {cls}; transformers builds {real} for model_type "
                       f"{model_type} (its auto classes read the model_type)")
    if model_type in ENCODER_DECODER and cls.endswith("ForCausalLM"):
        why = f"transformers 5.23 has no {cls}"
    else:
        why = f"the classes tcalc counts for model_type {model_type}"
    raise SpecError("architectures", f"one of {', '.join(sorted(known, key=_by_task(known)))} "
                    f"({why})", names, source=where)


def _same(cls: str, head: str) -> str:
    """Why a class other than the head class counts the same (SAME_COUNT, an encoder's
    *ForCausalLM: its MLM head on the encoder run causally)."""
    return f"the same parameters as {head}" if cls != head and (
        cls in _ALL_SAME or head.endswith("ForMaskedLM")) else ""


_ALL_SAME = frozenset(c for names in SAME_COUNT.values() for c in names)


def _by_task(known: dict[str, str]) -> Callable[[str], int]:
    order = ("lm", "decoder", *HEAD_TASKS)
    return lambda cls: order.index(known[cls])


class Heads(NamedTuple):
    """How a model type's classification and question-answering classes sit on its base
    model (transformers 5.23): which keep BERT's pooler (a biased d_model × d_model dense on
    the first token), and each head's kind (ModelSpec.classifier)."""

    pooled: tuple[str, ...] = ()  # the tasks whose class keeps the pooler ("base": AutoModel)
    seq_cls: str = "linear"
    # GenericForSequenceClassification's score has no bias (a key: the config decides)
    seq_bias: bool | str = False
    tagging: str = "linear"  # token classification's head
    qa: str = "linear"
    qa_labels: int = 2  # GenericForQuestionAnswering: 2 outputs; 0: num_labels (BERT's)
    multiple_choice: str = "linear"
    labels: int = 2  # the config class's num_labels (BartConfig: 3)
    refused: tuple[tuple[str, str], ...] = ()  # (task, why): a class whose head is not modelled


# BertForSequenceClassification: the pooler, then a linear layer; RobertaForSequence-
# Classification: no pooler, RobertaClassificationHead (dense, then out_proj); both keep the
# pooler in *ForMultipleChoice and read num_labels in *ForQuestionAnswering
_BERT_HEADS = Heads(pooled=("base", "seq_cls", "multiple_choice"), seq_bias=True, qa_labels=0)
_ROBERTA_HEADS = Heads(pooled=("base", "multiple_choice"), seq_cls="dense", seq_bias=True,
                       qa_labels=0)
# The encoders without a pooler: RoBERTa's heads, or a dense with a bias before the linear
# layer (DeBERTa's ContextPooler, DistilBERT's pre_classifier, ELECTRA's summary) for
# multiple choice too
_DENSE_HEADS = Heads(seq_cls="dense", seq_bias=True, qa_labels=0, multiple_choice="dense")
# The BART lineage and T5: BartClassificationHead (dense, then out_proj) on the whole model,
# qa_outputs of 2 (BART's sets num_labels 2; T5's reads num_labels); T5's token
# classification runs the encoder alone
_SEQ2SEQ_HEADS = Heads(seq_cls="dense", seq_bias=True)
_T5_HEADS = _SEQ2SEQ_HEADS._replace(qa_labels=0, refused=(
    ("token_cls", "it runs the encoder alone (T5EncoderModel), not modelled"),))
# ModernBERT: ModernBertPredictionHead (a dense, classifier_bias; a norm) before every head
_MODERNBERT_HEADS = Heads(seq_cls="dense_norm", seq_bias=True, tagging="dense_norm",
                          qa="dense_norm", qa_labels=0, multiple_choice="dense_norm")
# XLM, FlauBERT: SequenceSummary's linear layer (biased) and qa_outputs of num_labels; their
# multiple choice adds a projection of the labels to one logit (logits_proj)
_XLM_HEADS = Heads(seq_bias=True, qa_labels=0, refused=(
    ("multiple_choice", "SequenceSummary to num_labels, then logits_proj to one: not "
     "modelled"),))
# The encoders whose classes differ from those of decoders (GenericFor*), and the
# encoder-decoders
HEADS: dict[str, Heads] = {
    "bert": _BERT_HEADS, "roberta": _ROBERTA_HEADS,
    **dict.fromkeys(("albert", "ernie", "megatron-bert", "rembert", "roc_bert", "tapas"),
                    _BERT_HEADS),
    **dict.fromkeys(("camembert", "data2vec-text", "ibert", "jina_embeddings_v3",
                     "roberta-prelayernorm", "xlm-roberta", "xlm-roberta-xl", "mpnet"),
                    _ROBERTA_HEADS),
    **dict.fromkeys(("deberta", "deberta-v2", "distilbert", "electra", "eurobert"),
                    _DENSE_HEADS),
    # (their qa_outputs has 2 outputs whatever num_labels says)
    **dict.fromkeys(("mra", "yoso"), _DENSE_HEADS._replace(qa_labels=2)),
    "roformer": _DENSE_HEADS._replace(multiple_choice="linear", qa_labels=2),
    "gptj": Heads(qa_labels=0),
    # GTE, NomicBERT: no pooler in the base model, one under the sequence classifier
    **dict.fromkeys(("gte", "nomic_bert"), _BERT_HEADS._replace(pooled=("seq_cls",))),
    "modernbert": _MODERNBERT_HEADS,
    "modernbert-decoder": _MODERNBERT_HEADS._replace(seq_bias="classifier_bias"),
    **dict.fromkeys(("xlm", "flaubert"), _XLM_HEADS),
    **dict.fromkeys(("mbart", "mvp", "plbart", "bigbird_pegasus"), _SEQ2SEQ_HEADS),
    "bart": _SEQ2SEQ_HEADS._replace(labels=3),
    **dict.fromkeys(("t5", "mt5", "umt5"), _T5_HEADS),
    "t5gemma": Heads(seq_bias=True),
    # their base models hold the vision or audio tower
    "mllama": Heads(refused=(("base", "MllamaModel holds the vision tower and projector: "
                                      "architectures MllamaForConditionalGeneration counts "
                                      "them"),)),
    "whisper": Heads(refused=(("base", "WhisperModel holds the audio encoder: "
                                       "architectures WhisperForConditionalGeneration counts "
                                       "it, with the head tied"),)),
    # LayoutLM keeps its pooler for tokens too; BigBird as well, under RoBERTa's head, and its
    # question-answering head is a block of its own (BigBirdForQuestionAnsweringHead)
    "layoutlm": _BERT_HEADS._replace(pooled=("base", "seq_cls", "token_cls")),
    "big_bird": _ROBERTA_HEADS._replace(
        pooled=("base", "seq_cls", "token_cls", "multiple_choice"),
        refused=(("qa", "its question-answering head, an intermediate dense and a normed "
                        "output before qa_outputs, is not modelled"),)),
}


def _num_labels(c: Config, default: int) -> int:
    """The classifier's outputs as PreTrainedConfig reads them: id2label's size when the file
    has one (num_labels beside it must agree), else num_labels, else the class's default."""
    labels = c.data.get("id2label")
    if labels is None:
        return int(c.get("num_labels", default))
    if not isinstance(labels, dict) or not labels:
        raise SpecError("id2label", "a mapping of label ids to names", labels, source=c.where)
    n = c.get("num_labels", len(labels))
    if n != len(labels):
        raise SpecError("num_labels", f"equal to id2label's size ({len(labels)}), as "
                        "transformers requires", n, source=c.where)
    return len(labels)


def _head(c: Config, model_type: str, counted: Counted) -> dict[str, Any]:
    """The fields that turn the type's head class into the class counted: the base model (no
    LM or MLM head), or a classification or question-answering head on it."""
    h = HEADS.get(model_type, Heads())
    task = counted.task
    for refused, why in h.refused:
        if refused == task:
            raise SpecError("architectures", f"a class tcalc counts ({counted.cls}: {why})",
                            c.data.get("architectures"), source=c.where)
    out: dict[str, Any] = {"lm_head": False, "lm_head_bias": False, "mlm_head": False,
                           "mlm_width": None, "pooler": task in h.pooled}
    if task == "base":
        return out
    kind = {"seq_cls": h.seq_cls, "token_cls": h.tagging, "qa": h.qa,
            "multiple_choice": h.multiple_choice}[task]
    labels = 1 if task == "multiple_choice" else h.qa_labels if task == "qa" and h.qa_labels \
        else _num_labels(c, h.labels)
    return out | {"classifier": kind, "num_labels": labels,
                  "classifier_bias": c.flag(h.seq_bias) if task == "seq_cls" else True}


def counted_class(data: dict[str, Any]) -> str:
    """The transformers class tcalc counts for a config.json of a known model_type: its head
    class, or the class its ``architectures`` names (the developer tools build it); a
    wrapper's whole-model class."""
    wrapper = _wrapper(data)
    if wrapper is not None:
        return wrapper.cls
    return _check_architecture(data, data["model_type"], "config.json").cls


class Wrapper(NamedTuple):
    """A model type that wraps a language model: its text_config read by a text record (a
    model type tcalc maps, with the defaults of the wrapper's own text config class), its
    tower read from vision_config (towers.py), and the projector between them."""

    cls: str  # the whole model's class (the one its auto mapping builds)
    text: str  # the record that reads text_config (a model type in MAPPERS)
    text_type: str  # text_config's model_type in transformers (its defaults: hf_defaults)
    tower: str  # ModelSpec.tower
    projector: str = "none"
    flat_text: bool = False  # the text keys may sit at the top level (Qwen2.5-VL's files)
    # the tower's sub-config (audio_config: an audio LM; "": the model's own keys, Whisper)
    tower_key: str = "vision_config"
    # the model's language-model class, what --text-only counts
    text_cls: str = ""
    # an audio projector's input: the encoder's intermediate_size (Voxtral's, four frames
    # at a time) rather than its d_model (Audio Flamingo 3's)
    projector_from_ff: bool = False
    # the class ties its head where the config says (Voxtral, Qwen2-Audio and Audio Flamingo
    # 3 have no tied-weight keys: their heads are their own whatever the file says)
    ties_head: bool = True
    # the class builds no tower when the file has no tower_key (Gemma 4's are optional)
    tower_optional: bool = False
    # a sub-config of audio frames projected beside the tower, when the file has it (Gemma 4
    # Unified's audio_config: embed_audio, audio_embed_dim wide), and whether a conformer
    # encodes them first (Gemma 4's Gemma4AudioModel, output_proj_dims wide)
    audio_key: str = ""
    audio_conformer: bool = False
    # the top-level keys read as the language model's when the file has no text_config
    # (FuyuConfig pops its text defaults' keys from a flat file); its tower keys are its own
    flat_text_keys: tuple[str, ...] = ()


WRAPPERS: dict[str, Wrapper] = {
    "gemma3": Wrapper("Gemma3ForConditionalGeneration", "gemma3_text", "gemma3_text", "siglip",
                      "gemma3", text_cls="Gemma3ForCausalLM"),
    # Qwen2_5_VLTextModel: Qwen2's layers (biased Q, K, V), M-RoPE (no parameters)
    "qwen2_5_vl": Wrapper("Qwen2_5_VLForConditionalGeneration", "qwen2", "qwen2_5_vl_text",
                          "qwen2_5_vl", flat_text=True,
                          text_cls="Qwen2_5_VLTextModel + lm_head"),
    # Qwen3VLTextModel and Qwen3VLMoeTextModel: Qwen3's and Qwen3-MoE's layers
    "qwen3_vl": Wrapper("Qwen3VLForConditionalGeneration", "qwen3", "qwen3_vl_text",
                        "qwen3_vl", text_cls="Qwen3VLTextModel + lm_head"),
    "qwen3_vl_moe": Wrapper("Qwen3VLMoeForConditionalGeneration", "qwen3_moe",
                            "qwen3_vl_moe_text", "qwen3_vl",
                            text_cls="Qwen3VLMoeTextModel + lm_head"),
    # Qwen3.5 and Qwen3.5-MoE: Qwen3-VL's tower without deepstack mergers, beside the
    # Gated DeltaNet language models tcalc reads as qwen3_5_text and qwen3_5_moe_text
    "qwen3_5": Wrapper("Qwen3_5ForConditionalGeneration", "qwen3_5_text", "qwen3_5_text",
                       "qwen3_vl", text_cls="Qwen3_5TextModel + lm_head"),
    "qwen3_5_moe": Wrapper("Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe_text",
                           "qwen3_5_moe_text", "qwen3_vl",
                           text_cls="Qwen3_5MoeTextModel + lm_head"),
    # Mistral 3 (Mistral Small 3.1+, Ministral 3): a Mistral or Ministral 3 language model
    "mistral3": Wrapper("Mistral3ForConditionalGeneration", "mistral", "mistral", "pixtral",
                        "mistral3", text_cls="MistralForCausalLM"),
    "mllama": Wrapper("MllamaForConditionalGeneration", "mllama", "mllama_text_model",
                      "mllama", "linear", text_cls="MllamaForCausalLM"),
    # LFM2-VL: a SigLIP2 tower (its linear patch embedding counts as SigLIP's convolution) and
    # a LayerNorm + two-layer projector over merged patches; Kimi-K2.5: MoonViT (SigLIP's
    # layers with a height × width position table) and a merger as projector, DeepSeek-V3's
    # language model; EXAONE 4.5: Qwen2.5-VL's tower with fewer K/V heads, EXAONE 4's language
    # model
    "lfm2_vl": Wrapper("Lfm2VlForConditionalGeneration", "lfm2", "lfm2", "siglip", "lfm2_vl",
                       text_cls="Lfm2ForCausalLM"),
    "kimi_k25": Wrapper("Kimi_K25ForConditionalGeneration", "deepseek_v3", "deepseek_v3",
                        "siglip", "kimi_k25", text_cls="DeepseekV3ForCausalLM"),
    "exaone4_5": Wrapper("Exaone4_5_ForConditionalGeneration", "exaone4", "exaone4",
                         "qwen2_5_vl", text_cls="Exaone4ForCausalLM"),
    # Voxtral and Qwen2-Audio: Whisper's encoder (audio_config), a projector, a Llama or
    # Qwen2 language model (VoxtralMultiModalProjector: two bias-free linear layers from the
    # encoder's intermediate_size; Qwen2AudioMultiModalProjector: one biased linear layer)
    "voxtral": Wrapper("VoxtralForConditionalGeneration", "llama", "llama", "whisper", "mlp",
                       tower_key="audio_config", text_cls="LlamaForCausalLM",
                       projector_from_ff=True, ties_head=False),
    "qwen2_audio": Wrapper("Qwen2AudioForConditionalGeneration", "qwen2", "qwen2", "whisper",
                           "linear", tower_key="audio_config", text_cls="Qwen2ForCausalLM",
                           ties_head=False),
    # Audio Flamingo 3 and Music Flamingo: Whisper's encoder (the AudioFlamingo3Encoder, its
    # keys spelt hidden_size or d_model), a two-layer projector from d_model
    # (projector_bias), a Qwen2 language model
    "audioflamingo3": Wrapper("AudioFlamingo3ForConditionalGeneration", "qwen2", "qwen2",
                              "whisper", "mlp", tower_key="audio_config",
                              text_cls="Qwen2ForCausalLM", ties_head=False),
    "musicflamingo": Wrapper("MusicFlamingoForConditionalGeneration", "qwen2", "qwen2",
                             "whisper", "mlp", tower_key="audio_config",
                             text_cls="Qwen2ForCausalLM", ties_head=False),
    # Gemma 4: Gemma4VisionModel (when the file has a vision_config) and embed_vision (a
    # scale-free RMSNorm and a bias-free projection), Gemma4AudioModel (a conformer, when it
    # has an audio_config) and embed_audio, before Gemma4TextModel
    "gemma4": Wrapper("Gemma4ForConditionalGeneration", "gemma4_text", "gemma4_text", "gemma4",
                      "linear", text_cls="Gemma4TextModel + lm_head", tower_optional=True,
                      audio_key="audio_config", audio_conformer=True),
    # Gemma 4 Unified: no vision encoder; embed_vision (Gemma4UnifiedVisionEmbedder) takes
    # merged patches straight to the language model's width, embed_audio projects raw audio
    # frames (each optional)
    "gemma4_unified": Wrapper("Gemma4UnifiedForConditionalGeneration", "gemma4_unified_text",
                              "gemma4_unified_text", "gemma4_unified", "linear",
                              text_cls="Gemma4UnifiedTextModel + lm_head", tower_optional=True,
                              audio_key="audio_config"),
    # Qwen3-ASR: its own audio encoder (audio_config), a two-layer projector, Qwen3's
    # language model
    "qwen3_asr": Wrapper("Qwen3ASRForConditionalGeneration", "qwen3", "qwen3", "qwen3_asr",
                         "qwen3_asr", tower_key="audio_config",
                         text_cls="Qwen3Model + lm_head"),
    # GOT-OCR 2: Segment Anything's ViT and neck, two convolutions and a linear layer to
    # Qwen2's language model
    "got_ocr2": Wrapper("GotOcr2ForConditionalGeneration", "qwen2", "qwen2", "got_ocr2",
                        "got_ocr2", text_cls="Qwen2Model + lm_head"),
    # GLM-ASR: a Whisper-style encoder with rotary positions (audio_config), a two-layer
    # projector from its intermediate_size, Llama's language model (its defaults laid under a
    # file's text_config)
    "glmasr": Wrapper("GlmAsrForConditionalGeneration", "llama", "llama", "glmasr", "glmasr",
                      tower_key="audio_config", text_cls="LlamaModel + lm_head"),
    # Fuyu: no encoder; vision_embed_tokens, one biased linear layer, takes each patch's
    # pixels to Persimmon's language model (patch_size and num_channels are Fuyu's own keys)
    "fuyu": Wrapper("FuyuForCausalLM", "persimmon", "persimmon", "fuyu", tower_key="",
                    text_cls="PersimmonModel + lm_head", flat_text_keys=(
                        "vocab_size", "max_position_embeddings", "hidden_size",
                        "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "hidden_act", "layer_norm_eps", "qk_layernorm", "hidden_dropout",
                        "attention_dropout", "rope_scaling", "rope_theta")),
    # MOSS-Transcribe-Diarize: Whisper's encoder (audio_config), a two-layer projector over
    # audio_merge_size frames and a LayerNorm, Qwen3's language model
    "moss_transcribe_diarize": Wrapper("MossTranscribeDiarizeForConditionalGeneration",
                                       "qwen3", "qwen3", "whisper", "moss",
                                       tower_key="audio_config", text_cls="Qwen3Model + lm_head"),
    # WhisperForConditionalGeneration: the decoder WhisperForCausalLM counts (its
    # cross-attention runs here) and the audio encoder, both read from the one flat config
    "whisper": Wrapper("WhisperForConditionalGeneration", "whisper", "whisper", "whisper",
                       flat_text=True, tower_key="", text_cls="WhisperForCausalLM"),
}


def _wrapper(data: dict[str, Any]) -> Wrapper | None:
    """The wrapper record a file names: its model_type, unless that type is mapped itself and
    architectures names another class (Mllama: MllamaForCausalLM counts the text alone)."""
    model_type = data.get("model_type")
    wrapper = WRAPPERS.get(model_type) if isinstance(model_type, str) else None
    if wrapper is None or model_type not in MAPPERS:
        return wrapper
    archs = data.get("architectures")
    named = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    return wrapper if named.lower() == wrapper.cls.lower() or named.endswith(
        "ForConditionalGeneration") else None


def _spec_from_wrapper(data: dict[str, Any], w: Wrapper, where: str, name: str) -> ModelSpec:
    """The whole model: the language model as its text record counts it (its class's
    defaults, the head tied as the wrapper's config says), then the tower and projector."""
    from transformer_calc.hf_defaults import DEFAULTS, WRAPPER_DEFAULTS

    model_type = str(data["model_type"])
    top = Config(data, where, WRAPPER_DEFAULTS.get(model_type, {}))
    text = data.get("text_config")
    # without a text_config the wrapper builds its own default one; Qwen2_5_VLConfig reads a
    # flat file's keys as the text's
    absent = text is None and not w.flat_text
    if text is None and w.flat_text:
        text = {k: v for k, v in data.items() if k not in ("vision_config", "architectures")}
    if text is None and w.flat_text_keys:  # (Fuyu's flat files)
        text = {k: data[k] for k in w.flat_text_keys if k in data} or None
        absent = text is None
    text = text if text is not None else {}
    if not isinstance(text, dict):
        raise SpecError("text_config", "a mapping of the language model's keys", text,
                        source=where)
    inner = text.get("model_type")
    record = inner if isinstance(inner, str) and inner in MAPPERS and not w.flat_text \
        and inner != model_type else w.text
    defaults = DEFAULTS.get("absent:" + model_type, {}) if absent else \
        DEFAULTS.get(w.text_type, {}) if record == w.text else {}
    # transformers 5 ties the head as the outer config says (Qwen2.5-VL also reads a tied
    # text_config, for files saved before v5)
    tie = top.t("tie_word_embeddings") and w.ties_head
    if w.flat_text and not tie:
        tie = bool(text.get("tie_word_embeddings"))
    # (VoxtralConfig lays its own text defaults under a file's text_config)
    merged = {} if absent else DEFAULTS.get("merged:" + model_type, {})
    text_data = {**{k: v for k, v in defaults.items() if v is not None}, **merged, **text,
                 "model_type": record, "tie_word_embeddings": bool(tie)}
    text_data.pop("architectures", None)
    if model_type == "mllama":  # its record reads the language model from text_config
        text_data = {"model_type": record, "text_config": text_data,
                     "architectures": [w.text_cls]}
    whisper = not w.tower_key and w.tower == "whisper"
    if whisper:  # the encoder's and the decoder's keys side by side
        text_data = {**data, "architectures": [w.text_cls]}
    spec = spec_from_hf(text_data, where if w.flat_text or (
        w.flat_text_keys and "text_config" not in data) else f"{where} (text_config)", name)
    if whisper:
        return _whisper(spec, data, w, where, name)
    key = w.tower_key
    stem = where.rsplit("/", 1)[-1].removesuffix(".json")
    audio = _audio_in(data, w, where, model_type)
    if w.tower_optional and data.get(key) is None:
        text_note = spec.note.split("; ", 1)[1] if "; " in spec.note else ""
        alone = f"its audio {'encoder' if w.audio_conformer else 'embedder'} ({w.audio_key}) "\
            "and language model" if audio else \
            "its language model"
        return spec.replace(**audio,
                            note=f"counted as transformers' {w.cls}: {alone} ({w.text_cls}), "
                            f"as the class builds it without a {key}"
                            + (f"; {text_note}" if text_note else ""),
                            name=name or (stem if stem != "config" else model_type),
                            description=f"{model_type} from {where}", source=where)
    vision = (data.get(key) if key else data) or {}
    if not isinstance(vision, dict):
        raise SpecError(key, "a mapping of the tower's keys", vision, source=where)
    from transformer_calc.hf_defaults import TOWER_DEFAULTS

    v = Config(vision, f"{where} ({key})" if key else where, TOWER_DEFAULTS.get(
        ("absent:" if key and key not in data else "") + model_type, {}))
    fields = _tower_fields(w, v, top, spec.d_model) | audio
    text_note = spec.note.split("; ", 1)[1] if "; " in spec.note else ""
    # (said where the language model's own class would not tie: Mistral 3's text model)
    text_tie = text.get("tie_word_embeddings", DEFAULTS.get("absent:" + model_type, {}).get(
        "tie_word_embeddings"))
    if tie and "tie_word_embeddings" not in data and not text_tie:
        text_note = ("the file does not set tie_word_embeddings: its config class's default "
                     "(true) ties the LM head to the token embedding in transformers 5.23, as "
                     "counted (a checkpoint storing lm_head apart holds "
                     f"{spec.vocab_size * spec.embed_dim:,} more)") + (
            f"; {text_note}" if text_note else "")
    note = (f"counted as transformers' {w.cls}: its {w.tower} tower"
            + (f", projector ({w.projector})" if w.projector != "none" else "")
            + f" and language model ({w.text_cls})") + (f"; {text_note}" if text_note else "")
    try:
        return spec.replace(**fields, note=note,
                            name=name or (stem if stem != "config" else model_type),
                            description=f"{model_type} from {where}", source=where)
    except SpecError as e:
        raise _in_file_terms(e, vision, f"{where} ({key})" if key else where) from None


def _audio_in(data: dict[str, Any], w: Wrapper, where: str,
              model_type: str) -> dict[str, int]:
    """The audio beside a wrapper's tower, when the file has its sub-config: Gemma 4's
    conformer (Gemma4AudioConfig's sizes) and the width projected to the language model,
    output_proj_dims; Gemma 4 Unified's raw frames, audio_embed_dim wide (or its aliases
    output_proj_dims and audio_samples_per_token, Gemma4UnifiedAudioConfig's properties)."""
    if not w.audio_key or data.get(w.audio_key) is None:
        return {}
    from transformer_calc.hf_defaults import TOWER_DEFAULTS

    audio = data[w.audio_key]
    if not isinstance(audio, dict):
        raise SpecError(w.audio_key, "a mapping of the audio encoder's keys", audio,
                        source=where)
    a = Config(audio, f"{where} ({w.audio_key})", TOWER_DEFAULTS.get("audio:" + model_type, {}))

    def size(key: str) -> int:
        value = a.t(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise SpecError(key, "an integer", value, source=a.where)
        return value

    if w.audio_conformer:
        channels = a.t("subsampling_conv_channels")
        if not isinstance(channels, list | tuple) or len(channels) != 2 or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in channels):
            raise SpecError("subsampling_conv_channels", "two integers >= 1 (the two "
                            "subsampling convolutions' channels)", channels, source=a.where)
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                    "conv_kernel_size", "output_proj_dims"):
            if size(key) < 1:
                raise SpecError(key, "an integer >= 1", a.t(key), source=a.where)
        if size("hidden_size") % size("num_attention_heads"):
            raise SpecError("num_attention_heads", "a divisor of hidden_size="
                            f"{size('hidden_size')}", a.t("num_attention_heads"),
                            source=a.where)
        return {"tower_audio_d_model": size("hidden_size"),
                "tower_audio_layers": size("num_hidden_layers"),
                "tower_audio_heads": size("num_attention_heads"),
                "tower_audio_kernel": size("conv_kernel_size"),
                "tower_audio_subsample": channels[0], "tower_audio_channels": channels[1],
                "tower_audio_in": size("output_proj_dims")}
    for key in ("output_proj_dims", "audio_samples_per_token", "audio_embed_dim"):
        if key in audio or key == "audio_embed_dim":
            if size(key) < 1:
                raise SpecError(key, "an integer >= 1", a.t(key), source=a.where)
            return {"tower_audio_in": size(key)}
    return {}


def _whisper(spec: ModelSpec, data: dict[str, Any], w: Wrapper, where: str,
             name: str) -> ModelSpec:
    """WhisperForConditionalGeneration: WhisperForCausalLM's decoder (whose cross-attention
    now reads the encoder: its FLOPs and activations are not modelled, as the encoder's) and
    WhisperEncoder, sized by the config's encoder keys."""
    from transformer_calc.hf_defaults import TOWER_DEFAULTS

    c = Config(data, where, TOWER_DEFAULTS.get("whisper", {}))

    def size(key: str) -> int:
        value = c.t(key)
        if value is None:
            raise SpecError(key, "an integer (the class has no default for it)", None,
                            source=where)
        return int(value)

    fields = {"tower": "whisper", "tower_d_model": size("d_model"),
              "tower_layers": size("encoder_layers"),
              "tower_heads": size("encoder_attention_heads"),
              "tower_d_ff": size("encoder_ffn_dim"), "tower_channels": size("num_mel_bins"),
              "tower_positions": size("max_source_positions")}
    text_note = spec.note.split("; ", 1)[1] if "; " in spec.note else ""
    note = (f"counted as transformers' {w.cls}: its whisper tower (the audio encoder) and "
            f"language model ({w.text_cls}); the decoder's cross-attention runs here, yet "
            "tcalc's FLOPs, activations and cache count it idle (the encoder's states are not "
            "modelled)") + (f"; {text_note}" if text_note else "")
    stem = where.rsplit("/", 1)[-1].removesuffix(".json")
    try:
        return spec.replace(**fields, note=note, name=name or (stem if stem != "config"
                                                               else "whisper"))
    except SpecError as e:
        raise _in_file_terms(e, data, where) from None


def _tower_fields(w: Wrapper, v: Config, top: Config, d_model: int) -> dict[str, Any]:
    """The spec's tower fields from a vision_config (its class's defaults filled in)."""
    def size(*keys: str) -> int:
        for key in keys:
            if v.t(key) is not None:
                return int(v.t(key))
        raise SpecError(keys[0], "an integer (the class has no default for it)", None,
                        source=v.where)

    if w.tower == "gemma4_unified":
        # Gemma4UnifiedVisionEmbedder: model_patch_size = patch_size · pooling_kernel_size;
        # its embedder projects output_proj_dims to the language model's width
        return {"tower": w.tower, "projector": w.projector,
                "tower_d_model": size("mm_embed_dim"),
                "tower_patch": size("patch_size") * size("pooling_kernel_size"),
                "tower_positions": size("mm_posemb_size"),
                "tower_out": size("output_proj_dims"), "projector_bias": False}
    if w.tower == "qwen3_asr":  # Qwen3ASREncoderConfig's keys
        return {"tower": w.tower, "projector": w.projector, "tower_d_model": size("d_model"),
                "tower_layers": size("encoder_layers"),
                "tower_heads": size("encoder_attention_heads"),
                "tower_d_ff": size("encoder_ffn_dim"), "tower_channels": size("num_mel_bins"),
                "tower_conv_channels": size("downsample_hidden_size"),
                "tower_out": size("output_dim")}
    if w.tower == "got_ocr2":
        return _sam_fields(w, v, size)
    if w.tower == "fuyu":  # FuyuModel.vision_embed_tokens: patch_size² · num_channels -> d
        return {"tower": w.tower, "tower_d_model": d_model, "tower_patch": size("patch_size"),
                "tower_channels": size("num_channels")}
    if w.tower == "glmasr":  # GlmAsrEncoderConfig: heads of head_dim (hidden / heads unless set)
        D, H = size("hidden_size"), size("num_attention_heads")
        return {"tower": w.tower, "projector": w.projector, "tower_d_model": D,
                "tower_d_ff": size("intermediate_size"), "tower_heads": H,
                "tower_layers": size("num_hidden_layers"),
                "tower_kv_heads": int(v.t("num_key_value_heads") or H),
                "tower_head_dim": int(v.t("head_dim") or D // H),
                "tower_channels": size("num_mel_bins"), "tower_out": size("intermediate_size")}
    out: dict[str, Any] = {"tower": w.tower, "projector": w.projector,
                           "tower_d_model": size("hidden_size", "d_model"),
                           "tower_d_ff": size("intermediate_size", "encoder_ffn_dim")}
    if w.tower == "whisper" and w.projector == "moss":
        # MossTranscribeDiarizeMultiModalProjector reads audio_merge_size frames at a time
        merge = top.t("audio_merge_size")
        if not isinstance(merge, int) or isinstance(merge, bool) or merge < 1:
            raise SpecError("audio_merge_size", "an integer >= 1 (frames per projected "
                            "vector)", merge, source=top.where)
        out |= {"tower_out": out["tower_d_model"] * merge,
                "projector_bias": bool(top.t("projector_bias"))}
    if w.tower == "whisper":  # an audio language model's WhisperEncoder (audio_config)
        return {"tower_layers": size("num_hidden_layers", "encoder_layers"),
                      "tower_heads": size("num_attention_heads", "encoder_attention_heads"),
                      "tower_channels": size("num_mel_bins"),
                      "tower_positions": size("max_source_positions"),
                      # Voxtral's projector reads the encoder's states four frames at a time
                      # (intermediate_size wide), without biases; Qwen2-Audio's one biased layer
                      # and Audio Flamingo 3's two (projector_bias) read d_model
                      "tower_out": out["tower_d_ff"] if w.projector_from_ff else 0,
                      "projector_bias": w.projector == "linear" or (
                          w.projector == "mlp" and not w.projector_from_ff
                          and bool(top.t("projector_bias", True)))} | out
    channels = ("num_channels", "in_channels", "in_chans")
    out |= {"tower_patch": size("patch_size"),  # (MoonViT's class has no channel key: 3)
            "tower_channels": size(*channels) if any(k in v.table or v.t(k) is not None
                                                      for k in channels) else 3}
    if w.tower == "siglip":
        out |= {"tower_layers": size("num_hidden_layers"),
                "tower_heads": size("num_attention_heads"),
                "tower_positions": _positions(v, out["tower_patch"], size),
                # (read where the class has the key: MoonViT has no pooling head)
                "tower_head": "vision_use_head" in v.table and bool(v.t("vision_use_head"))}
        out |= _projector_fields(w, v, top, size)
    elif w.tower in ("qwen2_5_vl", "qwen3_vl"):
        out |= {"tower_layers": size("depth"), "tower_heads": size("num_heads"),
                "tower_temporal": size("temporal_patch_size"),
                "tower_merge": size("spatial_merge_size"), "tower_out": size("out_hidden_size")}
        kv = v.t("num_key_value_heads")  # EXAONE 4.5's vision attention
        if kv is not None and kv != out["tower_heads"]:
            out["tower_kv_heads"] = int(kv)
        if w.tower == "qwen3_vl":
            # (Qwen3.5's vision config class has no deepstack: the key is not read)
            deep = v.t("deepstack_visual_indexes", []) \
                if "deepstack_visual_indexes" in v.table else []
            if not isinstance(deep, list):
                raise SpecError("deepstack_visual_indexes", "a list of layer indices", deep,
                                source=v.where)
            out |= {"tower_positions": size("num_position_embeddings"),
                    "tower_deepstack": len(deep)}
    elif w.tower == "gemma4":
        # Gemma4VisionAttention: head_dim wide heads, num_key_value_heads of them for K and V;
        # Gemma4MultimodalEmbedder: one bias-free projection from the tower's width
        out |= {"tower_layers": size("num_hidden_layers"),
                "tower_heads": size("num_attention_heads"),
                "tower_kv_heads": size("num_key_value_heads"),
                "tower_head_dim": size("head_dim"),
                "tower_positions": size("position_embedding_size"), "projector_bias": False}
    elif w.tower == "pixtral":
        # Mistral3MultiModalProjector: linear_1 reads every feature layer, concatenated
        layers = top.t("vision_feature_layer", -1)
        n = len(layers) if isinstance(layers, list) else 1
        out |= {"tower_layers": size("num_hidden_layers"),
                "tower_heads": size("num_attention_heads"),
                "tower_merge": int(top.t("spatial_merge_size", 2)),
                "tower_out": n * out["tower_d_model"],
                "projector_bias": bool(top.t("multimodal_projector_bias", False))}
    else:  # mllama
        ratios = v.t("supported_aspect_ratios", [])
        if not isinstance(ratios, list):
            raise SpecError("supported_aspect_ratios", "a list of [width, height] tile counts",
                            ratios, source=v.where)
        out |= {"tower_layers": size("num_hidden_layers"),
                "tower_global_layers": size("num_global_layers"),
                "tower_heads": size("attention_heads", "num_attention_heads"),
                "tower_positions": (size("image_size") // out["tower_patch"]) ** 2 + 1,
                "tower_tiles": size("max_num_tiles"),
                # MllamaVisionModel: max_aspect_ratio_id = len(supported_aspect_ratios), and
                # a row for it
                "tower_aspect_ratios": len(ratios) + 1,
                "tower_out": size("vision_output_dim")}
    return out


def _sam_fields(w: Wrapper, v: Config, size: Callable[..., int]) -> dict[str, Any]:
    """GotOcr2VisionConfig: the grid is image_size // patch_size (both integers: its attention
    divides them); the layers whose index global_attn_indexes names attend globally."""
    for key in ("image_size", "patch_size"):
        if not isinstance(v.t(key), int) or isinstance(v.t(key), bool):
            raise SpecError(key, "an integer (a square image: GotOcr2VisionAttention divides "
                            "image_size by patch_size)", v.t(key), source=v.where)
    for key in ("qkv_bias", "use_abs_pos", "use_rel_pos"):
        v.refuse(key, lambda x: x is False, f"GOT-OCR 2's encoder without {key} is not "
                 "modelled")
    L, grid = size("num_hidden_layers"), size("image_size") // size("patch_size")
    picked = v.t("global_attn_indexes", [])
    if not isinstance(picked, list | tuple) or not all(isinstance(i, int) for i in picked):
        raise SpecError("global_attn_indexes", "a list of layer indices", picked,
                        source=v.where)
    return {"tower": w.tower, "projector": w.projector, "tower_d_model": size("hidden_size"),
            "tower_d_ff": size("mlp_dim"), "tower_layers": L,
            "tower_heads": size("num_attention_heads"), "tower_patch": size("patch_size"),
            "tower_channels": size("num_channels"), "tower_grid": grid,
            "tower_positions": grid * grid, "tower_window": int(v.t("window_size", 0)),
            "tower_global_attn": len(set(picked) & set(range(L))),
            "tower_out": size("output_channels")}


def _positions(v: Config, patch: int, size: Callable[..., int]) -> int:
    """Rows of a SigLIP-style position table: SigLIP2's num_patches, MoonViT's height ×
    width, else SigLIP's (image_size / patch_size)²."""
    if "num_patches" in v.table or v.t("num_patches") is not None:
        return size("num_patches")
    if "pos_emb_height" in v.table or v.t("pos_emb_height") is not None:
        return size("pos_emb_height") * size("pos_emb_width")
    return (size("image_size") // patch) ** 2


def _projector_fields(w: Wrapper, v: Config, top: Config,
                      size: Callable[..., int]) -> dict[str, Any]:
    """The projector sizes a SigLIP-tower wrapper's config gives beside the tower's."""
    if w.projector == "lfm2_vl":
        # Lfm2VlMultiModalProjector: downsample_factor² patches merged, projector_hidden_size
        top.refuse("projector_use_layernorm", lambda x: x is False,
                   "LFM2-VL's projector without its LayerNorm is not modelled")
        return {"tower_merge": int(top.t("downsample_factor", 2)),
                "projector_d_ff": int(top.t("projector_hidden_size")),
                "projector_bias": bool(top.t("projector_bias", True))}
    if w.projector == "kimi_k25":
        kernel = v.t("merge_kernel_size", [2, 2])
        if not isinstance(kernel, list) or len(kernel) != 2 or kernel[0] != kernel[1] \
                or not isinstance(kernel[0], int) or kernel[0] < 1:
            raise SpecError("merge_kernel_size", "[k, k] (a square merge; others are not "
                            "modelled)", kernel, source=v.where)
        return {"tower_merge": kernel[0],
                "tower_out": int(top.t("projection_hidden_size", size("hidden_size")))}
    return {}


def spec_from_hf(data: dict[str, Any], where: str = "config.json", name: str = "") -> ModelSpec:
    wrapper = _wrapper(data)
    if wrapper is not None:
        return _spec_from_wrapper(data, wrapper, where, name)
    model_type = data.get("model_type")
    tower = ""
    text = data.get("text_config")
    known = isinstance(model_type, str) and model_type in MAPPERS
    if not known and isinstance(text, dict) and isinstance(text.get("model_type"), str) \
            and text["model_type"] in MAPPERS:
        # a multimodal wrapper (e.g. Gemma 3, Mistral 3): count its language model
        tower = (f"the {model_type} wrapper's vision/audio tower and projector are not counted: "
                 "the language model (text_config) is")
        data, model_type = text, text["model_type"]
        where = f"{where} (text_config)"
    if not isinstance(model_type, str) or model_type not in MAPPERS:
        raise SpecError("model_type", _known_types(model_type), model_type,
                        source=where)
    record = TABLE_DRIVEN.get(model_type)
    if isinstance(record, Layout) and record.text_config:
        # MllamaConfig: the class counted (MllamaForCausalLM) builds from its text_config;
        # keys beside it (the vision tower's) are not read, as transformers does not
        inner = data.get("text_config", {})
        if not isinstance(inner, dict):
            raise SpecError("text_config", "a mapping of the language model's keys", inner,
                            source=where)
        archs = data.get("architectures")
        if isinstance(archs, list) and any(isinstance(a, str) and a.endswith(
                "ForConditionalGeneration") for a in archs):
            # the published file names the whole model (MllamaForConditionalGeneration)
            tower = (f"the {model_type} wrapper's vision tower and projector are not counted: "
                     f"its language model ({HEAD_CLASS[model_type]}) is")
            archs = None
        data = {**inner, "model_type": model_type,
                **({"architectures": archs} if archs is not None else {})}
        where = f"{where} (text_config)"
    counted = Counted(HEAD_CLASS[model_type], "lm") if tower else \
        _check_architecture(data, model_type, where)
    cfg = Config(data, where, _table(model_type) if model_type in TABLE_DRIVEN else None)
    cfg.decoder_alone = counted.task == "decoder"
    cfg.task = counted.task
    if tower:
        cfg.notes.append(tower)
    if counted.note:
        cfg.notes.append(counted.note)
    values = MAPPERS[model_type](cfg)
    if counted.task in HEAD_TASKS:
        values |= _head(cfg, model_type, counted)
    stem = where.rsplit("/", 1)[-1].removesuffix(".json")
    values.setdefault("name", name or (stem if stem != "config" else model_type))
    values.setdefault("description", f"{model_type} from {where}")
    values.setdefault("source", where)
    values["model_type"] = model_type
    keys, default = DROPOUT_KEYS.get(model_type, (GENERIC[model_type].dropout, 0.0)
                                     if model_type in GENERIC else
                                     (("hidden_dropout_prob", "attention_probs_dropout_prob"),
                                      0.1) if model_type in ENCODERS
                                     else (("dropout", "attention_dropout"), 0.1)
                                     if model_type in SEQ2SEQ else (("dropout_rate",), 0.1)
                                     if model_type in T5S else (("attention_dropout",), 0.0))
    from transformer_calc.hf_defaults import DEFAULTS

    # an absent key takes its config class's default (hf_defaults.py), else the family's
    class_default = DEFAULTS.get(model_type, {})
    probs = [cfg.get(k, class_default.get(k, default)) for k in keys]
    # the residual and embedding dropout: the keys that are not the attention's, when the
    # record has any (GPT-NeoX-Japanese: hidden_dropout 0.0 beside attention_dropout 0.1)
    rest = [p for k, p in zip(keys, probs, strict=True) if "att" not in k]
    values["dropout"] = float(max(rest or probs)) if probs else 0.0
    # the embeddings' own key beside the residual's (Phi-2: embd_pdrop 0.0, resid_pdrop 0.1):
    # dropout is then the residual's and embed_dropout the embeddings'
    emb = [float(p) for k, p in zip(keys, probs, strict=True) if "emb" in k]
    resid = [float(p) for k, p in zip(keys, probs, strict=True)
             if "att" not in k and "emb" not in k]
    if emb and resid and emb[0] != max(resid):
        values["dropout"], values["embed_dropout"] = max(resid), emb[0]
    attn = [cfg.get(k, class_default.get(k, ATTENTION_DROPOUT_DEFAULTS.get(model_type, default)))
            for k in keys if "att" in k]
    if attn and float(attn[0]) != values["dropout"]:
        values["attention_dropout"] = float(attn[0])
    if model_type == "mpt":
        values |= _mpt_attn_config(cfg)
    if model_type in SEQ2SEQ or model_type == "fsmt":  # after the FFN's activation
        # (an absent key: the config classes' default, 0.0 in transformers 5.23)
        values["activation_dropout"] = float(cfg.get("activation_dropout", 0.0))
    from transformer_calc.hf_defaults import (
        ATTN_FP32,
        EXPERTS_EVERY,
        EXPERTS_GROUPED,
        LINEAR_NAMES,
        LOSS_NO_UPCAST,
        NO_SDPA,
        NORM_FP32,
        NORM_KEEPS_INPUT,
        NORM_MANUAL,
        NORM_MEAN_SQUARE,
        PEFT_MOE,
        ROPE_CONCAT,
        ROPE_FP32,
        ROUTER_FP32,
        ROW_MAX,
        SCORES_CLAMPED,
        SINK_COLUMN,
        SINK_LSE,
        SOFTMAX_FP32,
    )

    values["softmax_fp32"] = model_type in SOFTMAX_FP32
    values["sdpa_path"] = model_type not in NO_SDPA
    values["softmax_sink_column"] = model_type in SINK_COLUMN
    values["softmax_row_max"] = model_type in ROW_MAX
    values["scores_clamped"] = model_type in SCORES_CLAMPED
    values["softmax_sink_lse"] = model_type in SINK_LSE
    values["experts_grouped"] = model_type in EXPERTS_GROUPED
    values["experts_every_token"] = model_type in EXPERTS_EVERY
    values["norm_manual"] = model_type in NORM_MANUAL
    values["rope_concat"] = model_type in ROPE_CONCAT
    values["rope_fp32"] = model_type in ROPE_FP32
    values["attn_fp32"] = model_type in ATTN_FP32
    values["norm_fp32"] = model_type in NORM_FP32
    values["loss_fp32"] = model_type not in LOSS_NO_UPCAST
    values["router_fp32"] = model_type in ROUTER_FP32
    values["norm_keeps_input"] = model_type in NORM_KEEPS_INPUT
    values["norm_mean_square"] = model_type in NORM_MEAN_SQUARE
    # PEFT's conversion follows the model type, with or without experts in the config
    values["peft_moe"] = PEFT_MOE.get(model_type, values.get("peft_moe", "none"))
    values["peft_mamba"] = model_type in PEFT_MAMBA
    values["peft_router_linear"] = model_type in PEFT_ROUTER_LINEAR
    from transformer_calc.quant import from_quantization_config

    # (a format tcalc does not model is said in the note, never served silently as bf16)
    quant = from_quantization_config(data.get("quantization_config"), where)
    quant_note = quant.pop("note", None)
    values.update(quant)
    names = ",".join(LINEAR_NAMES.get(model_type, ())) or "none"
    if {"q_proj", "query"} <= set(names.split(",")):
        # BigBird-Pegasus: query in the encoder, q_proj in the decoder; tcalc's roles do not
        # tell the stacks apart, so its transformers names are refused, not half-applied
        names = "none"
    values["module_names"] = names
    n = values.get("num_labels", 0)
    label = f"counted as transformers' {counted.cls}" + (
        f" ({n} label{'s' * (n != 1)})" if n else "")
    values["note"] = "; ".join([label] + cfg.notes + ([str(quant_note)] if quant_note else []))
    try:
        return ModelSpec(**values)
    except SpecError as e:
        raise _in_file_terms(e, data, where) from None


# tcalc's fields and the keys config.json files spell them with, the common spelling first: an
# error found on the spec names the file's own key (the first of these the file has)
FILE_KEYS: dict[str, tuple[str, ...]] = {
    "n_kv_heads": ("num_key_value_heads", "num_kv_heads", "kv_n_heads", "multi_query"),
    "n_heads": ("num_attention_heads", "n_head", "n_heads", "num_heads", "attention_heads",
                "encoder_attention_heads"),
    "d_model": ("hidden_size", "n_embd", "d_model", "dim", "emb_dim"),
    "d_head": ("head_dim", "d_kv", "d_head"),
    "d_ff": ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "hidden_dim", "dff",
             "encoder_ffn_dim", "ffn_hidden_size", "d_inner"),
    "n_layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "n_encoder_layers": ("encoder_layers", "num_layers"),
    "n_decoder_layers": ("decoder_layers", "num_decoder_layers"),
    "vocab_size": ("vocab_size",),
    "max_positions": ("max_position_embeddings", "n_positions", "max_seq_len",
                      "max_target_positions"),
    "n_experts": ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"),
    "top_k": ("num_experts_per_tok", "moe_topk", "moe_k", "experts_per_token", "top_k_experts",
              "moe_top_k"),
    "d_ff_expert": ("moe_intermediate_size", "expert_ffn_hidden_size"),
    "n_shared_experts": ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"),
    "ssm_heads": ("mamba_num_heads", "num_heads", "mamba_n_heads", "linear_num_value_heads",
                  "linear_num_heads"),
    "ssm_groups": ("n_groups", "mamba_n_groups", "linear_num_key_heads"),
    "ssm_state": ("state_size", "ssm_state_size", "mamba_d_state", "linear_key_head_dim"),
    "ssm_conv": ("conv_kernel", "mamba_d_conv", "linear_conv_kernel_dim", "conv_L_cache"),
    "global_kv_heads": ("num_global_key_value_heads",),
    "kv_shared_layers": ("num_kv_shared_layers",),
    "index_heads": ("index_n_heads",),
    "num_labels": ("num_labels", "id2label"),
    "layer_attention": ("layer_types", "hybrid_override_pattern", "layers_block_type"),
    # (hf_encoders.py's records)
    "entity_vocab": ("entity_vocab_size",), "entity_width": ("entity_emb_size",),
    "head_bottleneck": ("prediction_head_size",), "span_conv": ("conv_kernel_size",),
    "value_conv": ("conv_kernel_size",),
    "layer_ffn": ("mlp_layer_types", "mlp_only_layers", "hybrid_override_pattern",
                  "layers_block_type"),
    # a wrapper's tower, as its vision_config or audio_config spells it
    "tower_d_model": ("hidden_size", "d_model", "mm_embed_dim"),
    "tower_layers": ("num_hidden_layers", "depth", "encoder_layers"),
    "tower_heads": ("num_attention_heads", "num_heads", "attention_heads",
                    "encoder_attention_heads"),
    "tower_kv_heads": ("num_key_value_heads",),
    "tower_head_dim": ("head_dim",),
    "tower_d_ff": ("intermediate_size", "mlp_dim", "encoder_ffn_dim"),
    "tower_channels": ("num_channels", "num_mel_bins", "in_channels", "in_chans"),
    "tower_patch": ("patch_size",),
    "tower_temporal": ("temporal_patch_size",),
    "tower_positions": ("num_position_embeddings", "position_embedding_size",
                        "mm_posemb_size", "num_patches", "max_source_positions"),
    "tower_merge": ("spatial_merge_size", "merge_kernel_size", "downsample_factor"),
    "tower_out": ("out_hidden_size", "output_channels", "output_dim", "vision_output_dim",
                  "output_proj_dims"),
    "tower_conv_channels": ("downsample_hidden_size",),
    "tower_grid": ("image_size",),
    "tower_tiles": ("max_num_tiles",),
    "projector_d_ff": ("projector_hidden_size",),
}
_FIELD_WORD = re.compile(r"\b(" + "|".join(sorted(FILE_KEYS, key=len, reverse=True)) + r")\b")


def _file_key(field: str, data: dict[str, Any], model_type: str) -> tuple[str, bool]:
    """The file's key for a spec field, and whether the file has it (else its config class's
    default stood in): the first spelling the file has, else the first its class has."""
    from transformer_calc.hf_defaults import CONFIG_KEYS

    keys = FILE_KEYS.get(field, ())
    present = next((k for k in keys if data.get(k) is not None), None)
    if present:
        return present, True
    spelled = CONFIG_KEYS.get(model_type, ())
    return next((k for k in keys if k in spelled), keys[0] if keys else field), not keys


def _in_file_terms(e: SpecError, data: dict[str, Any], where: str) -> SpecError:
    """An error the spec found, named as the file names it: its key and the keys its expected
    value mentions (num_key_value_heads, not n_kv_heads)."""
    model_type = str(data.get("model_type", ""))
    key, present = _file_key(e.key, data, model_type)
    from transformer_calc.hf_defaults import CONFIG_KEYS

    expected = e.expected
    if "head_dim" not in CONFIG_KEYS.get(model_type, ("head_dim",)):
        expected = expected.replace(" (or set d_head)", "")  # the class reads no head_dim
    expected = _FIELD_WORD.sub(lambda m: _file_key(m.group(), data, model_type)[0], expected)
    if not present:
        expected += f" (the file has no {key}: its config class's default stood in)"
    return SpecError(key, expected, e.found, source=where, unknown=e.unknown)


def _present(c: Config, key: str) -> int:
    """A key the record cannot count without (its class default included)."""
    value = c.t(key)
    if value is None:
        raise SpecError(key, "an integer (the class has no default for it)", value,
                        source=c.where)
    return int(value)


def _int(cfg: Config, keys: tuple[str, ...], default: Any = None) -> Any:
    """A size the model needs: the first key the file gives, else the class default. An
    explicit null is refused by the config class (transformers 5.23's strict dataclass
    validation: "expected int, got NoneType"): an error naming the key, not the default."""
    value = cfg.first(keys, None)
    if value is None:
        spelled = [k for k in keys if k in cfg.data]
        if spelled:
            raise SpecError(cfg.spelled(spelled[0]), "an integer (transformers' config "
                            "refuses null here)", None, source=cfg.where)
        value = default
    if value is None:
        raise SpecError(keys[0], "to be present", None, source=cfg.where)
    return value


def _bias(q: bool, k: bool, v: bool, o: bool, ffn_in: bool, ffn_out: bool) -> dict[str, bool]:
    return {"bias_q": q, "bias_k": k, "bias_v": v, "bias_o": o, "bias_ffn_in": ffn_in,
            "bias_ffn_out": ffn_out}


def _gpt2(c: Config) -> dict[str, Any]:
    c.refuse("add_cross_attention", bool, "cross-attention in GPT-2 is not modelled")
    E = _int(c, ("n_embd", "hidden_size"), 768)
    return dict(arch="decoder", vocab_size=c.get("vocab_size", 50257), d_model=E,
                n_layers=_int(c, ("n_layer", "num_hidden_layers"), 12),
                n_heads=_int(c, ("n_head", "num_attention_heads"), 12),
                d_ff=c.get("n_inner", 4 * E),  # GPT2MLP: n_inner or 4 * n_embd
                max_positions=_int(c, ("n_positions", "max_position_embeddings"), 1024),
                position="learned", activation=c.activation("activation_function", "gelu_new"),
                norm="layernorm", norm_position="pre", fused_qkv=True,
                tie_embeddings=c.get("tie_word_embeddings", True))


def _bert(c: Config, roberta: bool) -> dict[str, Any]:
    c.refuse("position_embedding_type", lambda v: v != "absolute",
             "only absolute position embeddings")
    c.refuse("add_cross_attention", bool, "decoder cross-attention is not modelled")
    return dict(arch="encoder", vocab_size=c.get("vocab_size", 50265 if roberta else 30522),
                d_model=c.get("hidden_size", 768), n_layers=c.get("num_hidden_layers", 12),
                n_heads=c.get("num_attention_heads", 12), d_ff=c.get("intermediate_size", 3072),
                max_positions=c.get("max_position_embeddings", 512), position="learned",
                token_types=c.get("type_vocab_size", 2), activation=c.activation("hidden_act",
                                                                                 "gelu"),
                norm="layernorm", norm_position="post", embedding_norm=True, final_norm=False,
                lm_head=False, pooler=False, mlm_head=True,  # *ForMaskedLM: no pooler
                tie_embeddings=c.get("tie_word_embeddings", True))


def _llama_like(c: Config, *, qkv_bias: bool = False, bias_keys: bool = True,
                head_dim_default: int | None = None, tie: bool = False, act: str = "silu",
                kv_default: int | None = None) -> dict[str, Any]:
    E = c.get("hidden_size", 4096)
    H = c.get("num_attention_heads", 32)
    attn_bias = c.get("attention_bias", False) if bias_keys else False
    mlp_bias = c.get("mlp_bias", False) if bias_keys else False
    d_head = c.get("head_dim", head_dim_default)
    return dict(arch="decoder", vocab_size=c.get("vocab_size", 32000), d_model=E,
                n_layers=c.get("num_hidden_layers", 32), n_heads=H,
                n_kv_heads=c.kv_heads(kv_default, H),
                d_head=d_head if d_head is not None and d_head * H != E else None,
                d_ff=c.get("intermediate_size", 11008),
                max_positions=c.get("max_position_embeddings", 2048), position="rope",
                ffn="gated", activation=c.activation("hidden_act", act), norm="rmsnorm",
                norm_position="pre",
                **_bias(qkv_bias or attn_bias, qkv_bias or attn_bias, qkv_bias or attn_bias,
                        attn_bias, mlp_bias, mlp_bias),
                tie_embeddings=c.get("tie_word_embeddings", tie))


def _gemma(c: Config) -> dict[str, Any]:
    # GemmaConfig: head_dim 256 and 16 K/V heads by default, whatever hidden_size and
    # num_attention_heads are; embeddings tied.
    _no_parameter_notes(c)
    E, H = c.get("hidden_size", 3072), c.get("num_attention_heads", 16)
    d_head = c.get("head_dim", 256)
    return _llama_like(c, head_dim_default=256, tie=True, act="gelu_pytorch_tanh") | {
        "vocab_size": c.get("vocab_size", 256000), "d_model": E, "n_heads": H,
        "n_kv_heads": c.kv_heads(16, H), "d_head": None if d_head * H == E else d_head,
        "n_layers": c.get("num_hidden_layers", 28), "d_ff": c.get("intermediate_size", 24576),
        "max_positions": c.get("max_position_embeddings", 8192), "norm_fp32": True}


def _phi(c: Config) -> dict[str, Any]:
    c.refuse("qk_layernorm", bool, "Phi's q/k LayerNorms are not modelled")
    E, H = c.get("hidden_size", 2048), c.get("num_attention_heads", 32)
    return dict(arch="decoder", vocab_size=c.get("vocab_size", 51200), d_model=E,
                n_layers=c.get("num_hidden_layers", 24), n_heads=H,
                n_kv_heads=c.kv_heads(None, H),
                d_ff=c.get("intermediate_size", 8192),
                max_positions=c.get("max_position_embeddings", 2048), position="rope",
                rotary_fraction=c.get("partial_rotary_factor", 0.5),
                activation=c.activation("hidden_act", "gelu_new"), norm="layernorm",
                norm_position="pre", parallel_block=True, parallel_norms=1,
                tie_embeddings=c.get("tie_word_embeddings", False), lm_head_bias=True)


def _gpt_neox(c: Config) -> dict[str, Any]:
    bias = c.get("attention_bias", True)
    return dict(arch="decoder", vocab_size=c.get("vocab_size", 50432),
                d_model=c.get("hidden_size", 6144), n_layers=c.get("num_hidden_layers", 44),
                n_heads=c.get("num_attention_heads", 64), d_ff=c.get("intermediate_size", 24576),
                max_positions=c.get("max_position_embeddings", 2048), position="rope",
                rotary_fraction=c.get("rotary_pct", 0.25),
                activation=c.activation("hidden_act", "gelu"), norm="layernorm",
                norm_position="pre", fused_qkv=True,
                # GPTNeoXLayer keeps input_layernorm and post_attention_layernorm either way.
                parallel_block=c.get("use_parallel_residual", True), parallel_norms=2,
                **_bias(bias, bias, bias, bias, True, True),
                tie_embeddings=c.get("tie_word_embeddings", False))


def _falcon(c: Config) -> dict[str, Any]:
    E, H = c.get("hidden_size", 4544), c.get("num_attention_heads", 71)
    new = c.get("new_decoder_architecture", False)
    parallel = c.get("parallel_attn", True)
    if new:
        kv = c.get("num_kv_heads", H)
        norms = c.get("num_ln_in_parallel_attn", 2)
    else:
        kv = 1 if c.get("multi_query", True) else H
        norms = 1
    bias = c.get("bias", False)
    return dict(arch="decoder", vocab_size=c.get("vocab_size", 65024), d_model=E,
                n_layers=c.get("num_hidden_layers", 32), n_heads=H, n_kv_heads=kv,
                d_ff=c.get("ffn_hidden_size", 4 * E),
                max_positions=c.get("max_position_embeddings", 2048),
                position="alibi" if c.get("alibi", False) else "rope",
                activation=c.activation("activation", "gelu"), norm="layernorm",
                norm_position="pre", fused_qkv=True,
                # old layout: one input_layernorm; new (40B/180B): ln_attn + ln_mlp;
                # sequential blocks: input_layernorm + post_attention_layernorm.
                parallel_block=bool(parallel or new), parallel_norms=norms if parallel or new
                else 1, **_bias(bias, bias, bias, bias, bias, bias),
                tie_embeddings=c.get("tie_word_embeddings", True),
                # FalconModel: create_causal_mask(allow_is_causal_skip=False), ALiBi added onto
                # it; FalconAttention._split_heads broadcasts K and V to every head (new
                # layout) before the attention (measured, falcon variants under SDPA)
                explicit_mask=True, kv_broadcast=bool(new))


def _opt(c: Config) -> dict[str, Any]:
    c.refuse("layer_norm_elementwise_affine", lambda v: v is False,
             "LayerNorms without parameters are not modelled")
    E = c.get("hidden_size", 768)
    pre = c.get("do_layer_norm_before", True)
    bias = c.get("enable_bias", True)
    proj = c.get("word_embed_proj_dim", E)
    return dict(arch="decoder", vocab_size=c.get("vocab_size", 50272), d_model=E,
                n_layers=c.get("num_hidden_layers", 12), n_heads=c.get("num_attention_heads", 12),
                d_ff=c.get("ffn_dim", 3072), max_positions=c.get("max_position_embeddings", 2048),
                position="learned", position_offset=2,  # OPTLearnedPositionalEmbedding
                activation=c.activation("activation_function", "relu"), norm="layernorm",
                norm_position="pre" if pre else "post",
                # OPTDecoder keeps final_layer_norm only for pre-norm models
                final_norm=pre and not c.get("_remove_final_layer_norm", False),
                embed_proj_dim=proj if proj != E else None,
                **_bias(bias, bias, bias, bias, bias, bias),
                tie_embeddings=c.get("tie_word_embeddings", True))


class T5Like(NamedTuple):
    """A T5-style encoder-decoder: relative position buckets, RMSNorm, no biases."""

    cls: str
    relative_scope: str = "first"  # UMT5: a bias table in every layer
    tied_head: bool = True  # transformers 5 ties T5's lm_head whatever the config says
    local: bool = False  # LongT5: the encoder's attention is local or transient-global


def _t5(c: Config, r: T5Like = T5Like("T5ForConditionalGeneration")) -> dict[str, Any]:
    proj = c.t("feed_forward_proj", "relu")
    if not isinstance(proj, str):
        raise SpecError("feed_forward_proj", "an activation, or gated-<activation>", proj,
                        source=c.where)
    gated = proj.startswith("gated-")
    act = proj.split("-")[-1]
    if proj == "gated-gelu":  # T5Config maps it to gelu_new for backward compatibility
        act = "gelu_new"
    if act not in ACTIVATIONS:
        raise SpecError("feed_forward_proj", "an activation, or gated-<activation>", proj,
                        source=c.where)
    local: dict[str, Any] = {}
    if r.local:
        kind = c.t("encoder_attention_type", "local")
        if kind not in ("local", "transient-global"):
            raise SpecError("encoder_attention_type", "local or transient-global", kind,
                            source=c.where)
        # LongT5LocalAttention: block_len = local_radius + 1 (int keys: checked by c.t);
        # LongT5TransientGlobalAttention adds a summary of every global_block_size tokens
        local = {"encoder_local_block": c.t("local_radius", 127) + 1}
        if kind == "transient-global":
            local["encoder_global_block"] = c.t("global_block_size", 16)
    V, E = c.t("vocab_size", 32128), c.t("d_model", 512)
    tie = True
    if r.tied_head:
        if c.data.get("tie_word_embeddings") is False:
            c.notes.append(f"config says tie_word_embeddings: false; transformers >= 5.0 ties "
                           f"T5's lm_head regardless (4.x kept it: +{V * E:,})")
    else:
        tie = bool(c.t("tie_word_embeddings", True))
    L = c.t("num_layers", 6)
    return dict(arch="encoder-decoder", vocab_size=V, d_model=E, n_encoder_layers=L,
                n_decoder_layers=c.t("num_decoder_layers", L), n_heads=c.t("num_heads", 8),
                d_head=c.t("d_kv", 64), d_ff=c.t("d_ff", 2048), position="relative",
                relative_buckets=c.t("relative_attention_num_buckets", 32),
                relative_scope=r.relative_scope, ffn="gated" if gated else "plain",
                activation=ACTIVATIONS[act],
                norm="rmsnorm", norm_position="pre", final_norm=True, t5_dropouts=True,
                **_bias(False, False, False, False, False, False),
                tie_embeddings=tie, tie_encoder_decoder=True, **local)


T5S: dict[str, T5Like] = {
    "mt5": T5Like("MT5ForConditionalGeneration"),
    "umt5": T5Like("UMT5ForConditionalGeneration", relative_scope="every"),
    "longt5": T5Like("LongT5ForConditionalGeneration", local=True),
}


class Seq2Seq(NamedTuple):
    """A BART-style encoder-decoder (the fairseq lineage), counted as its
    *ForConditionalGeneration class; the families differ in where the norms sit and how
    positions are made."""

    cls: str
    norm_position: str = "post"
    final_norm: bool = False  # a LayerNorm after each stack (mBART, Pegasus, Blenderbot)
    embedding_norm: bool | str = True  # layernorm_embedding (BART, mBART, Blenderbot-small)
    position: str = "learned"  # learned | sinusoidal (a buffer or frozen: not trainable)
    position_offset: int = 0  # BART's learned table keeps 2 extra rows
    separate_vocab: bool = False  # Marian: share_encoder_decoder_embeddings, decoder_vocab_size
    attn_bias: bool | str = True  # a key (BigBird-Pegasus use_bias), or fixed
    decoder_cls: str = ""  # the family's *ForCausalLM: its decoder alone (``architectures``)
    decoder_only: bool = False  # the type has no encoder in transformers' text classes
    positions: str = "max_position_embeddings"  # the decoder's position-table key
    k_bias: bool = True  # Whisper's k_proj has none (self- and cross-attention)
    learned: str = ""  # a key that switches the learned table to a sinusoidal buffer (TrOCR)
    # the *ForCausalLM declares no tied weights: its lm_head is its own whatever
    # tie_word_embeddings says (BigBirdPegasusForCausalLM, transformers 5.23)
    decoder_untied: bool = False
    # BigBird-Pegasus's encoder: attention_type, block_size, num_random_blocks
    block_sparse: bool = False
    layerdrop: float = 0.0  # the config class's encoder_layerdrop and decoder_layerdrop


def _seq2seq(c: Config, r: Seq2Seq) -> dict[str, Any]:
    if r.decoder_only or c.decoder_alone:
        return _seq2seq_decoder(c, r)
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"),
                 ("encoder_ffn_dim", "decoder_ffn_dim")):
        if c.t(a) != c.t(b):
            raise SpecError(b, f"equal to {a}={c.t(a)} (tcalc models one head count "
                            "and FFN size for both stacks)", c.t(b), source=c.where)
    V = c.t("vocab_size")
    shared = c.t("share_encoder_decoder_embeddings", True) if r.separate_vocab else True
    # transformers 5.23 then keeps the shared table unused beside untied encoder and decoder
    # tables (checked: BartForConditionalGeneration, tools/check_registry.py)
    c.refuse("tie_word_embeddings", lambda v: v is False and shared,
             "with shared embeddings, false adds an unused table that is not modelled")
    if r.separate_vocab and c.t("decoder_vocab_size", V) != V:
        raise SpecError("decoder_vocab_size", f"equal to vocab_size={V}",
                        c.t("decoder_vocab_size", V), source=c.where)
    c.refuse("use_prompt", bool, "MVP's prompt tables are not modelled")
    drop = [k for k in ("encoder_layerdrop", "decoder_layerdrop") if c.t(k, r.layerdrop)]
    if drop:
        c.notes.append(f"{' and '.join(drop)}: in training transformers skips each layer with "
                       "that probability; FLOPs and memory count every layer (an upper bound)")
    ab = c.flag(r.attn_bias)
    return dict(arch="encoder-decoder", **_bias(ab, ab, ab, ab, True, True), vocab_size=V,
                d_model=c.t("d_model"),
                n_encoder_layers=c.t("encoder_layers"), n_decoder_layers=c.t("decoder_layers"),
                n_heads=c.t("encoder_attention_heads"), d_ff=c.t("encoder_ffn_dim"),
                max_positions=c.t("max_position_embeddings"), position=r.position,
                position_offset=r.position_offset,
                activation=c.activation("activation_function",
                                        c.table.get("activation_function") or "gelu"),
                norm="layernorm", norm_position=r.norm_position, final_norm=r.final_norm,
                embedding_norm=c.flag(r.embedding_norm),
                tie_embeddings=bool(c.t("tie_word_embeddings", True)),
                tie_encoder_decoder=bool(shared),
                **({"block_sparse_from": _block_sparse_from(c)} if r.block_sparse else {}))


def _fsmt(c: Config) -> dict[str, Any]:
    """FSMTForConditionalGeneration (transformers 5.23; fairseq's WMT19 models): BART-style
    post-norm layers, a token table per stack (src_vocab_size, tgt_vocab_size) and an output
    projection tied to the decoder's table when tie_word_embeddings is set. Its sinusoidal
    position tables are nn.Parameters that transformers 5.23 leaves trainable (measured:
    they receive gradients), max_position_embeddings + pad_token_id + 1 rows each."""
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"),
                 ("encoder_ffn_dim", "decoder_ffn_dim")):
        if c.get(a, 16 if "heads" in a else 4096) != c.get(b, 16 if "heads" in b else 4096):
            raise SpecError(b, f"equal to {a} (tcalc models one head count and FFN size for "
                            "both stacks)", c.get(b, None), source=c.where)
    src, tgt = c.get("src_vocab_size", 42024), c.get("tgt_vocab_size", 42024)
    tie = c.get("tie_word_embeddings", False)
    if tie and src != tgt:
        raise SpecError("tie_word_embeddings", "false when src_vocab_size and tgt_vocab_size "
                        "differ (FSMTModel ties the encoder's table to the decoder's)", tie,
                        source=c.where)
    pad = c.get("pad_token_id", 1)
    return dict(arch="encoder-decoder", vocab_size=tgt, encoder_vocab_size=src,
                d_model=c.get("d_model", 1024), n_encoder_layers=c.get("encoder_layers", 12),
                n_decoder_layers=c.get("decoder_layers", 12),
                n_heads=c.get("encoder_attention_heads", 16),
                d_ff=c.get("encoder_ffn_dim", 4096),
                max_positions=c.get("max_position_embeddings", 1024), position="learned",
                position_offset=pad + 1, activation=c.activation("activation_function", "relu"),
                norm="layernorm", norm_position="post", final_norm=False, embedding_norm=False,
                **_bias(True, True, True, True, True, True),
                tie_embeddings=tie, tie_encoder_decoder=tie,
                # FSMTForConditionalGeneration.get_output_embeddings is the decoder's table:
                # peft's all-linear does not see output_projection as the output layer
                peft_head=True)


def _seq2seq_decoder(c: Config, r: Seq2Seq) -> dict[str, Any]:
    """The decoder alone (BartForCausalLM, WhisperForCausalLM, TrOCRForCausalLM): its
    layers keep the cross-attention transformers builds (``is_decoder``), idle without encoder
    states; the LM head is tied to the decoder's embedding."""
    width = c.t("d_model")
    c.refuse("cross_attention_hidden_size", lambda v: v != width,
             "cross-attention keys and values read d_model-wide encoder states")
    if r.separate_vocab and c.t("decoder_vocab_size", c.t("vocab_size")) != c.t("vocab_size"):
        raise SpecError("decoder_vocab_size", f"equal to vocab_size={c.t('vocab_size')}",
                        c.t("decoder_vocab_size"), source=c.where)
    c.refuse("use_prompt", bool, "MVP's prompt tables are not modelled")
    ab = c.flag(r.attn_bias)
    learned = r.position == "learned" and (not r.learned or c.flag(r.learned))
    return dict(arch="decoder", **_bias(ab, ab and r.k_bias, ab, ab, True, True),
                vocab_size=c.t("vocab_size"), d_model=width, n_layers=c.t("decoder_layers"),
                n_heads=c.t("decoder_attention_heads"), d_ff=c.t("decoder_ffn_dim"),
                max_positions=c.t(r.positions), position="learned" if learned else "sinusoidal",
                position_offset=r.position_offset if learned else 0,
                activation=c.activation("activation_function",
                                        c.table.get("activation_function") or "gelu"),
                norm="layernorm", norm_position=r.norm_position, final_norm=r.final_norm,
                embedding_norm=c.flag(r.embedding_norm),
                tie_embeddings=bool(c.t("tie_word_embeddings", True)) and not r.decoder_untied,
                idle_cross_attention=True)


SEQ2SEQ: dict[str, Seq2Seq] = {
    "bart": Seq2Seq("BartForConditionalGeneration", position_offset=2,
                    decoder_cls="BartForCausalLM"),
    # Marian: a frozen sinusoidal table, no embedding norm, its own vocabulary keys
    "marian": Seq2Seq("MarianMTModel", embedding_norm=False, position="sinusoidal",
                      separate_vocab=True, decoder_cls="MarianForCausalLM"),
    "mbart": Seq2Seq("MBartForConditionalGeneration", norm_position="pre", final_norm=True,
                     position_offset=2, decoder_cls="MBartForCausalLM"),
    "mvp": Seq2Seq("MvpForConditionalGeneration", position_offset=2,
                   decoder_cls="MvpForCausalLM"),
    "plbart": Seq2Seq("PLBartForConditionalGeneration", position_offset=2,
                      decoder_cls="PLBartForCausalLM"),
    "blenderbot": Seq2Seq("BlenderbotForConditionalGeneration", norm_position="pre",
                          final_norm=True, embedding_norm=False,
                          decoder_cls="BlenderbotForCausalLM"),
    "blenderbot-small": Seq2Seq("BlenderbotSmallForConditionalGeneration",
                                decoder_cls="BlenderbotSmallForCausalLM"),
    "pegasus": Seq2Seq("PegasusForConditionalGeneration", norm_position="pre",
                       final_norm=True, embedding_norm=False, position="sinusoidal",
                       decoder_cls="PegasusForCausalLM"),
    "bigbird_pegasus": Seq2Seq("BigBirdPegasusForConditionalGeneration", norm_position="pre",
                               final_norm=True, embedding_norm=False, attn_bias="use_bias",
                               decoder_cls="BigBirdPegasusForCausalLM", decoder_untied=True,
                               block_sparse=True),
    # decoders alone: Whisper's text decoder (its k_proj has no bias; learned positions up to
    # max_target_positions) and TrOCR's (BART-like, post-norm, a sinusoidal buffer when
    # use_learned_position_embeddings is false)
    "whisper": Seq2Seq("WhisperForCausalLM", norm_position="pre", final_norm=True,
                       embedding_norm=False, decoder_only=True, positions="max_target_positions",
                       k_bias=False),
    "trocr": Seq2Seq("TrOCRForCausalLM", position_offset=2, decoder_only=True,
                     embedding_norm="layernorm_embedding",
                     learned="use_learned_position_embeddings"),
    "m2m_100": Seq2Seq("M2M100ForConditionalGeneration", norm_position="pre",
                       final_norm=True, embedding_norm=False, position="sinusoidal",
                       layerdrop=0.05),
}


class _Renamed(Config):
    names: dict[str, str]

    def spelled(self, key: str) -> str:
        return self.names.get(key, key)

    def t(self, key: str, fallback: Any = None) -> Any:
        spelled = self.spelled(key)
        if spelled != key and self.data.get(spelled) is not None:
            # the family's spelling is checked as the standard key it stands for (emb_dim as
            # hidden_size), the error naming the file's own key
            self._check_type(key, self.data[spelled], shown=spelled)
        return super().t(spelled, fallback)

    def flag(self, spec: bool | str) -> bool:
        return spec if isinstance(spec, bool) else bool(self.t(spec, False))


def _runs(letters: list[str]) -> str:
    """Per-layer letters -> the spec's run notation: ['D', 'D', 'E'] -> '2D 1E'."""
    out: list[str] = []
    prev, n = "", 0
    for ch in letters + [""]:
        if ch == prev:
            n += 1
            continue
        if prev:
            out.append(f"{n}{prev}")
        prev, n = ch, 1
    return " ".join(out)


_LAYER_TYPES = {"full_attention": "F", "sliding_attention": "S", "chunked_attention": "C"}


def _layer_attention(c: Config, n_layers: int, sliding: list[bool] | None,
                     window_default: int | None) -> dict[str, Any]:
    """transformers' ``layer_types`` (or the class's own rule when the file has none) ->
    layer_attention and sliding_window. ``sliding``: the class default per layer."""
    types = c.data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n_layers or any(
                not isinstance(t, str) or t not in _LAYER_TYPES for t in types):
            raise SpecError("layer_types", f"a list of {n_layers} of "
                            + ", ".join(_LAYER_TYPES), types, source=c.where)
        letters = [_LAYER_TYPES[t] for t in types]
    else:
        letters = ["S" if s else "F" for s in (sliding or [False] * n_layers)]
    if "S" not in letters:
        return {}
    window = c.get("sliding_window", window_default)
    if not window:
        raise SpecError("sliding_window", "an integer >= 1 (layer_types has sliding layers)",
                        window, source=c.where)
    return {"layer_attention": _runs(letters), "sliding_window": window}


def _qwen3(c: Config) -> dict[str, Any]:
    # Qwen3Attention: q_norm / k_norm (RMSNorm over head_dim); biases follow attention_bias
    L = c.get("num_hidden_layers", 32)
    # Qwen3Config: sliding only with use_sliding_window, from layer max_window_layers on
    first = c.get("max_window_layers", 28)
    use = c.get("use_sliding_window", False)
    return _llama_like(c, head_dim_default=128, kv_default=32) | {
        "bias_ffn_in": False, "bias_ffn_out": False, "qk_norm": "head",
        "vocab_size": c.get("vocab_size", 151936), "n_layers": L,
        "d_ff": c.get("intermediate_size", 22016),
        "max_positions": c.get("max_position_embeddings", 32768),
    } | _layer_attention(c, L, [use and i >= first for i in range(L)], 4096)


def _qwen3_moe(c: Config) -> dict[str, Any]:
    L = c.get("num_hidden_layers", 24)
    E, H = c.get("hidden_size", 2048), c.get("num_attention_heads", 32)
    X = c.first(("num_experts", "num_local_experts"), 128)
    step = c.get("decoder_sparse_step", 1)
    dense = c.data.get("mlp_only_layers") or []
    if not isinstance(dense, list) or any(type(i) is not int for i in dense):
        raise SpecError("mlp_only_layers", "a list of layer indices", dense, source=c.where)
    # Qwen3MoeDecoderLayer: experts where i not in mlp_only_layers and (i + 1) % step == 0
    ffn = ["E" if X and i not in dense and (i + 1) % step == 0 else "D" for i in range(L)]
    moe = "E" in ffn
    out = _qwen3(c) | {"d_model": E, "n_heads": H, "n_layers": L,
                       "n_kv_heads": c.kv_heads(4, H),
                       "d_head": None if c.get("head_dim", E // H) * H == E
                       else c.get("head_dim", E // H),
                       "d_ff": c.get("intermediate_size", 6144)}
    if moe:
        out |= {"n_experts": X, "top_k": c.get("num_experts_per_tok", 8),
                "d_ff_expert": c.get("moe_intermediate_size", 768),
                "router_topk": _router_topk(c, "qwen")}
        if "D" in ffn:
            out["layer_ffn"] = _runs(ffn)
    return out


def _deepseek_v3(c: Config) -> dict[str, Any]:
    # DeepseekV3Attention (MLA) and DeepseekV3MoE: layers from first_k_dense_replace on are
    # MoE (a sigmoid router whose e_score_correction_bias is a buffer, not a parameter)
    L = c.get("num_hidden_layers", 61)
    H = c.get("num_attention_heads", 128)
    k = min(c.get("first_k_dense_replace", 3), L)
    bias = c.get("attention_bias", False)
    mtp = c.get("num_nextn_predict_layers", 0)
    q_rank = c.get("q_lora_rank", 1536)
    out = dict(arch="decoder", vocab_size=c.get("vocab_size", 129280),
               d_model=c.get("hidden_size", 7168), n_layers=L, n_heads=H,
               d_head=c.get("qk_nope_head_dim", 128) + c.get("qk_rope_head_dim", 64),
               d_ff=c.get("intermediate_size", 18432),
               max_positions=c.get("max_position_embeddings", 4096), position="rope",
               ffn="gated", activation=c.activation("hidden_act", "silu"), norm="rmsnorm",
               norm_position="pre", kv_lora_rank=c.get("kv_lora_rank", 512),
               q_lora_rank=q_rank if "q_lora_rank" not in c.data
               else (c.data["q_lora_rank"] or 0),
               qk_nope_head_dim=c.get("qk_nope_head_dim", 128),
               qk_rope_head_dim=c.get("qk_rope_head_dim", 64),
               v_head_dim=c.get("v_head_dim", 128),
               **_bias(bias, bias, False, bias, False, False),
               tie_embeddings=c.get("tie_word_embeddings", False), mtp_layers=mtp)
    if k < L:
        shared = c.get("n_shared_experts", 1)
        out |= {"n_experts": c.get("n_routed_experts", 256),
                "top_k": c.get("num_experts_per_tok", 8),
                "d_ff_expert": c.get("moe_intermediate_size", 2048),
                "n_shared_experts": shared,
                "router_topk": _router_topk(c, "deepseek")}
        if not shared:
            # DeepseekV3MoE builds its shared MLP whatever the count: moe_intermediate_size ·
            # n_shared_experts = 0 wide, no parameters, yet three linear layers PEFT adapts
            out |= {"n_shared_experts": 1, "d_ff_shared": 0}
        if k:
            out["layer_ffn"] = f"{k}D {L - k}E"
    return out


# AXK1Config's defaults (transformers 5.23), where DeepseekV3Config's differ
_AXK1_DEFAULTS = {"vocab_size": 163840, "num_attention_heads": 64, "n_routed_experts": 192,
                  "max_position_embeddings": 32768}


def _axk1(c: Config) -> dict[str, Any]:
    """AXK1ForCausalLM (SK Telecom's A.X K1): DeepSeek-V3 (MLA, always with a query latent;
    the sigmoid router; shared experts) with a norm over each MoE block's output
    (post_mlp_layernorm), and the dense/sparse layers as mlp_layer_types lists them (derived
    from first_k_dense_replace, default 1, and moe_layer_freq, default 1, when absent). It
    builds no multi-token-prediction layers."""
    data = _AXK1_DEFAULTS | {k: v for k, v in c.data.items() if v is not None or k not in
                             _AXK1_DEFAULTS}
    q_rank = data.get("q_lora_rank", 1536)
    if isinstance(q_rank, bool) or not isinstance(q_rank, int) or q_rank < 1:
        raise SpecError("q_lora_rank", "an integer >= 1 (A.X K1's attention always has a query "
                        "latent)", q_rank, source=c.where)
    out = _deepseek_v3(c.with_data(data | {"num_nextn_predict_layers": 0,
                                           "first_k_dense_replace": 0}))
    L = out["n_layers"]
    types = c.data.get("mlp_layer_types")
    if types is None:
        k, every = c.get("first_k_dense_replace", 1), c.get("moe_layer_freq", 1)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise SpecError("moe_layer_freq", "an integer >= 1", every, source=c.where)
        types = ["sparse" if i >= k and i % every == 0 else "dense" for i in range(L)]
    if not isinstance(types, list) or len(types) != L \
            or any(t not in ("dense", "sparse") for t in types):
        raise SpecError("mlp_layer_types", f"a list of {L} of dense, sparse", types,
                        source=c.where)
    if "sparse" not in types:  # every layer dense: no experts at all
        for key in ("n_experts", "top_k", "d_ff_expert", "n_shared_experts"):
            out.pop(key, None)
        out.pop("layer_ffn", None)
        return out
    out["layer_ffn"] = _runs(["E" if t == "sparse" else "D" for t in types])
    return out | {"moe_post_norm": True}


# LongcatFlashConfig's defaults (transformers 5.23); router_bias is not one of its fields
# (LongcatFlashTopkRouter reads getattr(config, "router_bias", False))
_LONGCAT_DEFAULTS = {"vocab_size": 131072, "hidden_size": 6144, "num_layers": 28,
                     "num_attention_heads": 64, "max_position_embeddings": 131072,
                     "tie_word_embeddings": False, "attention_bias": False,
                     "ffn_hidden_size": 12288, "q_lora_rank": 1536, "kv_lora_rank": 512,
                     "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
                     "moe_topk": 12, "n_routed_experts": 512, "zero_expert_num": 256,
                     "expert_ffn_hidden_size": 2048, "router_bias": False}


def _longcat_flash(c: Config) -> dict[str, Any]:
    """LongcatFlashForCausalLM (Meituan's LongCat-Flash, transformers 5.23): num_layers decoder
    layers, each two MLA sublayers (DeepSeek-V3's latent attention, the query latent always on)
    each followed by a dense MLP of ffn_hidden_size, and a shortcut MoE that reads the first
    MLP's normed input and adds its output after the second. In the plan: 2 · num_layers
    layers alternating an "E" layer (MLA, the dense MLP and the experts beside it:
    moe_beside_dense, moe_shortcut) and a "D" layer. The router (an nn.Linear, with
    router_bias) chooses top moe_topk of n_routed_experts + zero_expert_num experts; a
    zero-computation expert returns its input (no FLOPs, so the active count is an upper
    bound), yet LongcatFlashExperts builds gate/up weights for it."""
    for key in ("q_lora_rank", "kv_lora_rank", "zero_expert_num"):
        if key in c.data and c.data[key] is None:
            raise SpecError(key, "an integer (LongcatFlashMLA and its experts read it)", None,
                            source=c.where)
    data = {k: x for k, x in c.data.items() if x is not None}
    # LongcatFlashConfig.attribute_map: the standard names set these keys
    for key, alias in (("n_routed_experts", "num_local_experts"),
                       ("moe_topk", "num_experts_per_tok"),
                       ("ffn_hidden_size", "intermediate_size"),
                       ("expert_ffn_hidden_size", "moe_intermediate_size")):
        if alias in data and key not in data:
            data[key] = data.pop(alias)
    if "num_hidden_layers" in data and "num_layers" not in data:
        # num_hidden_layers is a property: 2 · num_layers, its setter halving (rounding down)
        data["num_layers"] = c.get("num_hidden_layers", 0) // 2
    v = c.with_data(_LONGCAT_DEFAULTS | data)
    if v.get("num_layers", 0) < 1:
        raise SpecError("num_layers", "an integer >= 1 (decoder layers, two attention "
                        "sublayers each)", v.data["num_layers"], source=c.where)
    X = v.get("n_routed_experts", 0)
    if X < 1:
        raise SpecError("n_routed_experts", "an integer >= 1 (routed experts; an MoE of "
                        "zero-computation experts alone is not modelled)", X, source=c.where)
    nope, rope = v.get("qk_nope_head_dim", 0), v.get("qk_rope_head_dim", 0)
    qk = v.get("qk_head_dim", nope + rope)
    if qk != nope + rope:
        raise SpecError("qk_head_dim", f"qk_nope_head_dim + qk_rope_head_dim = {nope + rope} "
                        "(the attention splits each query head so)", qk, source=c.where)
    bias = bool(v.get("attention_bias", False))
    c.notes.append("MLA's LoRA scales (√(d_model / rank)) and the router's scaling factor "
                   "have no parameters")
    return dict(arch="decoder", vocab_size=v.get("vocab_size", 0),
                d_model=v.get("hidden_size", 0), n_layers=2 * v.get("num_layers", 0),
                n_heads=v.get("num_attention_heads", 0), d_head=nope + rope,
                d_ff=v.get("ffn_hidden_size", 0),
                max_positions=v.get("max_position_embeddings", 0), position="rope",
                ffn="gated", activation=v.activation("hidden_act", "silu"), norm="rmsnorm",
                norm_position="pre", kv_lora_rank=v.get("kv_lora_rank", 0),
                q_lora_rank=v.get("q_lora_rank", 0), qk_nope_head_dim=nope,
                qk_rope_head_dim=rope, v_head_dim=v.get("v_head_dim", 0),
                **_bias(bias, bias, False, bias, False, False),
                tie_embeddings=bool(v.get("tie_word_embeddings", False)), n_experts=X,
                top_k=v.get("moe_topk", 0), d_ff_expert=v.get("expert_ffn_hidden_size", 0),
                zero_experts=v.get("zero_expert_num", 0),
                router_bias=bool(v.get("router_bias", False)),
                moe_beside_dense=True, moe_shortcut=True, layer_ffn="1E 1D *")


# DbrxConfig's, DbrxAttentionConfig's and DbrxFFNConfig's defaults (transformers 5.23)
_DBRX_DEFAULTS = {"d_model": 2048, "n_heads": 16, "n_layers": 24, "max_seq_len": 2048,
                  "vocab_size": 32000, "tie_word_embeddings": False}
_DBRX_ATTN = {"kv_n_heads": 1, "clip_qkv": None, "attn_pdrop": 0.0}
_DBRX_FFN = {"ffn_hidden_size": 3584, "moe_num_experts": 4, "moe_top_k": 1,
             "moe_jitter_eps": None, "ffn_act_fn": None}


def _dbrx(c: Config) -> dict[str, Any]:
    """DbrxForCausalLM (Databricks' DBRX): every layer a LayerNorm without bias, a fused Wqkv
    (GQA with attn_config.kv_n_heads), its output clamped to ±clip_qkv when set, and an MoE of
    moe_num_experts gated experts (w1, v1, w2: one (experts · ffn_hidden_size, d_model) matrix
    each) under a linear router, top moe_top_k. The attention and FFN keys sit in
    attn_config and ffn_config; the router's jitter (moe_jitter_eps) multiplies its input in
    training."""
    sub = {}
    for key, defaults in (("attn_config", _DBRX_ATTN), ("ffn_config", _DBRX_FFN)):
        given = c.data.get(key) or {}
        if not isinstance(given, dict):
            raise SpecError(key, "a mapping of DBRX's keys", given, source=c.where)
        sub[key] = Config(defaults | {k: v for k, v in given.items() if v is not None
                                      or k not in defaults}, f"{c.where} ({key})", {})
    a, f = sub["attn_config"], sub["ffn_config"]
    if a.data.get("rope_theta") is None:
        raise SpecError("rope_theta", "to be set in attn_config (DbrxAttention reads it there; "
                        "DbrxAttentionConfig has no default, so transformers 5.23 cannot build "
                        "the model without it)", None, source=a.where)
    v = c.with_data(_DBRX_DEFAULTS | {k: x for k, x in c.data.items() if x is not None})
    if v.get("tie_word_embeddings", False):
        raise SpecError("tie_word_embeddings", "false (DbrxConfig refuses tied embeddings)",
                        True, source=c.where)
    act = f.data.get("ffn_act_fn") or {"name": "silu"}
    if not isinstance(act, dict) or not isinstance(act.get("name", "silu"), str):
        raise SpecError("ffn_act_fn", 'a mapping like {"name": "silu"}', act, source=f.where)
    H, F = v.get("n_heads", 0), f.get("ffn_hidden_size", 0)
    clip = a.data.get("clip_qkv")
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int | float)):
        raise SpecError("clip_qkv", "a number or null", clip, source=a.where)
    # DbrxFFNConfig.moe_normalize_expert_weights (default 1.0; null: not normalised)
    p_norm = (c.data.get("ffn_config") or {}).get("moe_normalize_expert_weights", 1.0)
    if p_norm is not None and (isinstance(p_norm, bool) or not isinstance(p_norm, int | float)):
        raise SpecError("moe_normalize_expert_weights", "a number or null", p_norm,
                        source=f.where)
    if clip is None:
        c.notes.append("clip_qkv is null: transformers 5.23's DbrxAttention then cannot run a "
                       "forward (torch.clamp with neither bound); counted as built")
    # the dropouts, read by spec_from_hf's DROPOUT_KEYS from the top level
    c.data = {**c.data, "attn_pdrop": a.data.get("attn_pdrop", 0.0)}
    return dict(arch="decoder", vocab_size=v.get("vocab_size", 0),
                d_model=v.get("d_model", 0), n_layers=v.get("n_layers", 0), n_heads=H,
                n_kv_heads=a.get("kv_n_heads", 1), d_ff=F,
                max_positions=v.get("max_seq_len", 0), position="rope", ffn="gated",
                activation=Config({"ffn_act_fn": act.get("name", "silu")}, f.where, {})
                .activation("ffn_act_fn", "silu"),
                norm="layernorm_nobias", norm_position="pre", fused_qkv=True,
                **_bias(False, False, False, False, False, False), tie_embeddings=False,
                n_experts=f.get("moe_num_experts", 0), top_k=f.get("moe_top_k", 0),
                d_ff_expert=F, qkv_clamp=clip is not None,
                router_jitter=f.data.get("moe_jitter_eps") is not None,
                # DbrxFFN.route_tokens_to_experts: the top-k softmax values divided by their
                # p-norm unless moe_normalize_expert_weights is null (left to the rules)
                router_topk="pnorm" if p_norm is not None else "none",
                # DbrxRouter.layer is an nn.Linear: all-linear adapts it (the experts are
                # plain 2-D parameters, which it does not)
                peft_moe="linear_router")


# KimiLinearConfig's defaults (transformers 5.23); first_k_dense_replace is no field of it
# (__post_init__ reads it from the extra keys, default 1)
_KIMI_DEFAULTS = {"vocab_size": 163840, "hidden_size": 2304, "intermediate_size": 9216,
                  "moe_intermediate_size": 1024, "num_hidden_layers": 27,
                  "num_attention_heads": 32, "n_shared_experts": 1, "kv_lora_rank": 512,
                  "q_lora_rank": None, "qk_rope_head_dim": 64, "v_head_dim": 128,
                  "qk_nope_head_dim": 128, "num_experts_per_tok": 8,
                  "max_position_embeddings": 1048576, "tie_word_embeddings": False,
                  "attention_bias": False, "num_local_experts": 256, "linear_head_dim": 128,
                  "linear_num_heads": 32, "linear_conv_kernel_dim": 4,
                  "first_k_dense_replace": 1}


def _kimi_linear(c: Config) -> dict[str, Any]:
    """KimiLinearForCausalLM (Moonshot's Kimi Linear, transformers 5.23): Kimi Delta
    Attention layers (mixer kda: q, k, v of linear_num_heads heads of linear_head_dim, each
    convolved; per-channel decay through f_a/f_b; β; an output gate through g_a/g_b into a
    gated norm) and MLA layers without any position encoding, as layer_types says (or the
    checkpoint's linear_attn_config lists, 1-indexed, or every 4th layer from the 5th); dense
    MLPs in the first first_k_dense_replace layers (or mlp_layer_types), then DeepSeek-V3's
    MoE (a sigmoid router, n_shared_experts · moe_intermediate_size wide shared MLP)."""
    data = {k: x for k, x in c.data.items() if x is not None or k == "q_lora_rank"}
    linear = data.get("linear_attn_config") or {}
    if not isinstance(linear, dict):
        raise SpecError("linear_attn_config", "a mapping", linear, source=c.where)
    # KimiLinearConfig.__post_init__: the checkpoint's sub-dict overrides the flat keys
    for key, sub in (("linear_head_dim", "head_dim"), ("linear_num_heads", "num_heads"),
                     ("linear_conv_kernel_dim", "short_conv_kernel_size")):
        if linear.get(sub) is not None:
            data[key] = linear[sub]
    v = c.with_data(_KIMI_DEFAULTS | data)
    L = v.get("num_hidden_layers", 0)
    types = v.data.get("layer_types")
    if types is None and "full_attn_layers" in linear and "kda_layers" in linear:
        types = [None] * L
        for key, kind in (("full_attn_layers", "full_attention"),
                          ("kda_layers", "linear_attention")):
            listed = linear[key]
            if not isinstance(listed, list) or any(type(i) is not int or not 1 <= i <= L
                                                   for i in listed):
                raise SpecError(key, f"a list of layer numbers from 1 to {L}", listed,
                                source=c.where)
            for i in listed:
                types[i - 1] = kind
        types = [t or "linear_attention" for t in types]  # an unlisted layer builds KDA
    if types is None:
        types = ["full_attention" if i and i % 4 == 0 else "linear_attention"
                 for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(
            t not in ("full_attention", "linear_attention") for t in types):
        raise SpecError("layer_types", f"a list of {L} of full_attention, linear_attention",
                        types, source=c.where)
    mlp = v.data.get("mlp_layer_types")
    if mlp is None:
        k = v.get("first_k_dense_replace", 1)
        mlp = ["dense" if i < k else "sparse" for i in range(L)]
    if not isinstance(mlp, list) or len(mlp) != L or any(t not in ("dense", "sparse")
                                                         for t in mlp):
        raise SpecError("mlp_layer_types", f"a list of {L} of dense, sparse", mlp,
                        source=c.where)
    E, H = v.get("hidden_size", 0), v.get("num_attention_heads", 0)
    heads, dh = v.get("linear_num_heads", 0), v.get("linear_head_dim", 0)
    nope, rope = v.get("qk_nope_head_dim", 0), v.get("qk_rope_head_dim", 0)
    bias = bool(v.get("attention_bias", False))
    if v.get("tie_word_embeddings", False):
        c.notes.append("config says tie_word_embeddings: true; KimiLinearForCausalLM ties "
                       "nothing (transformers 5.23), so its head is counted apart")
    out: dict[str, Any] = dict(
        arch="decoder", vocab_size=v.get("vocab_size", 0), d_model=E, n_layers=L, n_heads=H,
        d_head=nope + rope, d_ff=v.get("intermediate_size", 0),
        max_positions=v.get("max_position_embeddings", 0), position="none", ffn="gated",
        activation=v.activation("hidden_act", "silu"), norm="rmsnorm", norm_position="pre",
        kv_lora_rank=v.get("kv_lora_rank", 0), q_lora_rank=v.data.get("q_lora_rank") or 0,
        qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v.get("v_head_dim", 0),
        **_bias(bias, bias, False, bias, False, False),
        # KimiLinearForCausalLM._tied_weights_keys is empty: the head is its own whatever the
        # config says
        tie_embeddings=False,
        mixer="kda", ssm_inner=heads * dh, ssm_state=dh, ssm_heads=heads, ssm_groups=heads,
        ssm_conv=v.get("linear_conv_kernel_dim", 0), ssm_chunk=64, ssm_conv_bias=False,
        ssm_bias=False, ssm_norm=True, ssm_in_projs=3, peft_names_shared=True,
        layer_attention=_runs(["F" if t == "full_attention" else "M" for t in types]))
    if "sparse" in mlp:
        S = v.get("n_shared_experts", 1)
        out |= {"n_experts": v.get("num_local_experts", 0),
                "top_k": v.get("num_experts_per_tok", 0),
                "d_ff_expert": v.get("moe_intermediate_size", 0),
                "n_shared_experts": S or 1, "d_ff_shared": v.get("moe_intermediate_size", 0)
                if S else 0,
                "layer_ffn": _runs(["E" if t == "sparse" else "D" for t in mlp]),
                # KimiLinearTopkRouter: DeepSeek-V3's (norm_topk_prob, spelled
                # moe_renormalize in the checkpoints' files; the config's default true)
                "router_topk": "renorm" if v.data.get(
                    "moe_renormalize", v.data.get("norm_topk_prob", True)) else "none"}
    return out


def _no_parameter_notes(c: Config) -> None:
    """What changes the computation but holds no parameters, said rather than counted."""
    c.notes.append("embeddings are scaled by √d_model (no parameters)")
    caps = [f"{what} logits soft-capped at {c.get(key, None)}"
            for key, what in (("attn_logit_softcapping", "attention"),
                              ("final_logit_softcapping", "final"))
            if isinstance(c.get(key, None), (int, float))]
    if caps:
        c.notes.append(", ".join(caps) + " (tanh soft-capping: no parameters)")


def _softcap(c: Config, default: float | None, key: str = "final_logit_softcapping") -> float:
    """A soft-capping value (final_logit_softcapping, attn_logit_softcapping), as the config
    class defaults it when absent; null or 0: none."""
    cap = c.data.get(key, default)
    c._check_type(key, cap)  # (NaN, Infinity: refused by name)
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))
                            or cap < 0):
        raise SpecError(key, "a number >= 0 or null", cap, source=c.where)
    return float(cap or 0.0)


def _gemma2(c: Config, v3: bool = False) -> dict[str, Any]:
    # Gemma2/3DecoderLayer: input, post_attention, pre_feedforward, post_feedforward norms
    _no_parameter_notes(c)
    L = c.get("num_hidden_layers", 26)
    E, H = c.get("hidden_size", 2304), c.get("num_attention_heads", 8)
    d_head = c.get("head_dim", 256)
    bias = c.get("attention_bias", False)
    if v3:  # Gemma3TextConfig: every sliding_window_pattern-th layer is full
        every = c.get("sliding_window_pattern", 6)
        sliding = [bool(every) and (i + 1) % every != 0 for i in range(L)]
    else:  # Gemma2Config: sliding, full, sliding, ...
        sliding = [i % 2 == 0 for i in range(L)]
    # Gemma2Config: final 30.0, attention 50.0; Gemma3TextConfig: final None, attention None
    cap = _softcap(c, None if v3 else 30.0)
    attn_cap = _softcap(c, None if v3 else 50.0, "attn_logit_softcapping")
    return dict(arch="decoder", logit_softcapping=cap, attn_softcapping=attn_cap,
                vocab_size=c.get("vocab_size", 262208 if v3 else 256000),
                d_model=E, n_layers=L, n_heads=H, n_kv_heads=c.kv_heads(4, H),
                d_head=None if d_head * H == E else d_head,
                d_ff=c.get("intermediate_size", 9216),
                max_positions=c.get("max_position_embeddings", 131072 if v3 else 8192),
                position="rope", ffn="gated",
                activation=c.activation("hidden_activation", "gelu_pytorch_tanh"),
                norm="rmsnorm", norm_position="pre", sandwich_norm=True, norm_fp32=True,
                qk_norm="head" if v3 else "none",
                **_bias(bias, bias, bias, bias, False, False),
                tie_embeddings=c.get("tie_word_embeddings", True)) | _layer_attention(
                    c, L, sliding, 4096)


# T5GemmaModuleConfig's defaults (transformers 5.23): each stack's keys, in the file's
# "encoder" and "decoder" mappings
_T5GEMMA_MODULE = {"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
                   "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                   "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
                   "max_position_embeddings": 8192, "attention_bias": False,
                   "sliding_window": 4096, "layer_types": None,
                   "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0}
# the keys both stacks must agree on: tcalc's spec has one width, one attention and one FFN
_T5GEMMA_SHARED = ("hidden_size", "intermediate_size", "num_attention_heads",
                   "num_key_value_heads", "head_dim", "hidden_activation", "attention_bias",
                   "sliding_window", "attn_logit_softcapping")


def _t5gemma(c: Config) -> dict[str, Any]:
    """T5GemmaForConditionalGeneration (transformers 5.23): an encoder and a decoder of Gemma 2
    layers (sandwich RMSNorms, the decoder's cross-attention normed before and after too),
    sliding and full layers by layer_types (default: sliding, full, ...), the encoder's
    sliding window bidirectional; a token table per stack and the LM head tied to the
    decoder's (tie_word_embeddings). Each stack's keys sit in the file's encoder and decoder
    mappings; the unbalanced checkpoints (t5gemma-9b-2b: a wider encoder) are refused, since
    tcalc's spec has one width."""
    stacks = {}
    for key in ("encoder", "decoder"):
        given = c.data.get(key) or {}
        if not isinstance(given, dict):
            raise SpecError(key, "a mapping of T5GemmaModuleConfig's keys", given,
                            source=c.where)
        stacks[key] = Config(_T5GEMMA_MODULE | {k: v for k, v in given.items()
                                                if v is not None or k == "layer_types"},
                             f"{c.where} ({key})", {})
    enc, dec = stacks["encoder"], stacks["decoder"]
    for key in _T5GEMMA_SHARED:
        enc.get(key, None), dec.get(key, None)  # each type-checked first, in its own mapping
        if enc.data.get(key) != dec.data.get(key):
            raise SpecError(key, f"equal to the encoder's {enc.data.get(key)!r} (tcalc models "
                            "one width, attention and FFN for both stacks)", dec.data.get(key),
                            source=dec.where)
    patterns = []
    for s in (enc, dec):
        L = s.get("num_hidden_layers", 26)
        # T5GemmaModuleConfig.__post_init__: layer i slides when (i + 1) % 2 is true
        letters = _layer_attention(s, L, [(i + 1) % 2 == 1 for i in range(L)], 4096)
        patterns.append((L, letters.get("layer_attention", f"{L}F")))
    (Le, pe), (Ld, pd) = patterns
    from transformer_calc.plan import parse_pattern

    e_letters = parse_pattern(pe, "FS", Le, "layer_types")
    d_letters = parse_pattern(pd, "FS", Ld, "layer_types")
    longer, shorter = (e_letters, d_letters) if Le >= Ld else (d_letters, e_letters)
    # one pattern gives both stacks when the shorter begins the longer; the unit is the
    # longer's shortest period (Knuth-Morris-Pratt's failure function: linear in the layers)
    if longer[:len(shorter)] != shorter:
        raise SpecError("layer_types", "the encoder's pattern of sliding and full layers, or "
                        "one repeating unit for both stacks (tcalc reads one pattern)",
                        dec.data.get("layer_types"), source=dec.where)
    fail = [0] * len(longer)
    for i in range(1, len(longer)):
        k = fail[i - 1]
        while k and longer[i] != longer[k]:
            k = fail[k - 1]
        fail[i] = k + (longer[i] == longer[k])
    pattern = _runs(list(longer[:len(longer) - fail[-1]])) + " *"
    _no_parameter_notes(dec)
    c.notes.extend(n for n in dec.notes if n not in c.notes)
    E, H = dec.get("hidden_size", 2304), dec.get("num_attention_heads", 8)
    d_head = dec.get("head_dim", 256)
    bias = dec.get("attention_bias", False)
    Ve, Vd = enc.get("vocab_size", 256000), dec.get("vocab_size", 256000)
    sliding = "S" in e_letters + d_letters
    return dict(arch="encoder-decoder", vocab_size=Vd, encoder_vocab_size=Ve,
                tie_encoder_decoder=False, tie_embeddings=c.get("tie_word_embeddings", True),
                d_model=E, n_layers=0, n_encoder_layers=Le, n_decoder_layers=Ld, n_heads=H,
                n_kv_heads=dec.kv_heads(4, H), d_head=None if d_head * H == E else d_head,
                d_ff=dec.get("intermediate_size", 9216),
                max_positions=max(enc.get("max_position_embeddings", 8192),
                                  dec.get("max_position_embeddings", 8192)),
                position="rope", ffn="gated", ffn_dropout=True,
                activation=dec.activation("hidden_activation", "gelu_pytorch_tanh"),
                norm="rmsnorm", norm_position="pre", sandwich_norm=True, norm_fp32=True,
                logit_softcapping=_softcap(dec, 30.0),
                attn_softcapping=_softcap(dec, 50.0, "attn_logit_softcapping"),
                **_bias(bias, bias, bias, bias, False, False),
                **({"layer_attention": pattern,
                    "sliding_window": dec.get("sliding_window", 4096)} if sliding else {}))


def _modernbert(c: Config, decoder: bool = False) -> dict[str, Any]:
    """ModernBertForMaskedLM / ModernBertDecoderForCausalLM (transformers 5.23): pre-norm
    layers whose first has no attention norm (nn.Identity), GeGLU in one Wi matrix,
    LayerNorms with or without bias (norm_bias), RoPE, every global_attn_every_n_layers-th
    layer global and the rest local, and a prediction head (dense, activation, norm) before
    the decoder, whose bias is its own (decoder_bias)."""
    L = c.get("num_hidden_layers", 22)
    E, H = c.get("hidden_size", 768), c.get("num_attention_heads", 12)
    every = c.get("global_attn_every_n_layers", 3)
    local = c.get("local_attention", 128)
    if c.data.get("layer_types") is None and every < 1:
        raise SpecError("global_attn_every_n_layers", "an integer >= 1", every, source=c.where)
    # layer i is global when i % every == 0 (ModernBertConfig, ModernBertDecoderConfig)
    sliding = [i % every != 0 for i in range(L)] if every else [False] * L
    # the decoder's causal window is local_attention // 2 keys; the encoder's bidirectional
    # one local_attention // 2 + 1 on each side (ModernBertAttention.sliding_window), so a
    # query meets 2 · (local_attention // 2) + 1 keys
    window = (local // 2 if decoder else 2 * (local // 2) + 1) if local else 0
    layers = _layer_attention(_Window(c.data, c.where, {"sliding_window": window or None}), L,
                              sliding, None)
    bias = c.get("attention_bias", False)
    mlp_bias = c.get("mlp_bias", False)
    norm = "layernorm" if c.get("norm_bias", False) else "layernorm_nobias"
    act = c.activation("hidden_activation", "gelu")
    if c.activation("classifier_activation", "gelu") != "gelu":
        c.notes.append("the prediction head's activation is counted in FLOPs as any other; "
                       "its memory as gelu's")
    return dict(arch="decoder" if decoder else "encoder", vocab_size=c.get("vocab_size", 50368),
                d_model=E, n_layers=L, n_heads=H, d_ff=c.get("intermediate_size", 1152),
                max_positions=c.get("max_position_embeddings", 8192), position="rope",
                ffn="gated", activation=act, norm=norm, norm_position="pre",
                embedding_norm=True, final_norm=True, first_attn_norm=False,
                fused_qkv=not decoder, fused_gate_up=True,
                **_bias(bias, bias, bias, bias, mlp_bias, mlp_bias),
                lm_head=False, mlm_head=True,
                mlm_dense_bias=c.get("classifier_bias", False),
                mlm_bias="decoder" if c.get("decoder_bias", True) else "none",
                tie_embeddings=c.get("tie_word_embeddings", True)) | layers


class _Window(Config):
    """A config whose sliding_window is the one a class derives (ModernBERT's from
    local_attention), whatever the file says."""

    def __init__(self, data: dict[str, Any], where: str, fixed: dict[str, Any]):
        super().__init__(data, where)
        self.fixed = fixed

    def get(self, key: str, default: Any) -> Any:
        return self.fixed[key] if key in self.fixed else super().get(key, default)


def _gemma4(c: Config, unified: bool = False) -> dict[str, Any]:
    """Gemma4ForCausalLM / Gemma4UnifiedForCausalLM (transformers 5.23): Gemma 3's sandwich
    norms and QK-norm, a weightless norm on the values, full layers (every sixth, and the
    last) of their own head width (global_head_dim) and, with attention_k_eq_v, their own
    K/V heads and no value projection; the last num_kv_shared_layers layers reuse earlier
    keys and values (and, with use_double_wide_mlp, have a 2 · d_ff FFN); Gemma4 alone adds
    per-layer embeddings (hidden_size_per_layer_input) and experts beside the dense FFN
    (enable_moe_block)."""
    _no_parameter_notes(c)
    L = c.get("num_hidden_layers", 30)
    E, H = c.get("hidden_size", 2304), c.get("num_attention_heads", 8)
    d_head = c.get("head_dim", 256)
    c.refuse("use_bidirectional_attention", lambda v: v == "all",
             "bidirectional text attention is not modelled")
    c.refuse("per_layer_config", lambda v: True, "per-layer overrides beyond global_head_dim "
             "and num_global_key_value_heads are not modelled")
    types = c.data.get("layer_types")
    if types is None:  # Gemma4TextConfig: every sixth layer full
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(L)]
    if isinstance(types, list) and types:
        types = [*types[:-1], "full_attention"]  # the config forces the last layer full
    k_eq_v = c.get("attention_k_eq_v", False)
    shared = c.get("num_kv_shared_layers", 0)
    bias = c.get("attention_bias", False)
    if shared and isinstance(types, list) and len(types) == L and shared < L and \
            set(types[:L - shared]) != set(types):
        raise SpecError("num_kv_shared_layers", "a count leaving a layer of each kind before "
                        "the shared ones (they reuse its keys)", shared, source=c.where)
    out: dict[str, Any] = dict(
        arch="decoder", logit_softcapping=_softcap(c, None),
        vocab_size=c.get("vocab_size", 262144), d_model=E, n_layers=L, n_heads=H,
        n_kv_heads=c.kv_heads(4, H), d_head=None if d_head * H == E else d_head,
        d_ff=c.get("intermediate_size", 9216),
        max_positions=c.get("max_position_embeddings", 262144 if unified else 131072),
        position="rope", ffn="gated",
        activation=c.activation("hidden_activation", "gelu_pytorch_tanh"),
        norm="rmsnorm", norm_position="pre", sandwich_norm=True, qk_norm="head",
        value_norm=True, **_bias(bias, bias, bias, bias, False, False),
        tie_embeddings=c.get("tie_word_embeddings", True),
        global_head_dim=c.get("global_head_dim", 512),
        global_kv_heads=c.get("num_global_key_value_heads", None) if k_eq_v else None,
        global_k_eq_v=bool(k_eq_v), kv_shared_layers=shared,
        kv_shared_wide_ffn=bool(shared and c.get("use_double_wide_mlp", False)))
    if out["global_head_dim"] == (d_head if out["d_head"] else E // H):
        out["global_head_dim"] = None
    if not unified:
        P = c.get("hidden_size_per_layer_input", 256)
        if P:
            out |= {"per_layer_input": P,
                    "per_layer_vocab": c.get("vocab_size_per_layer_input", 262144)}
        if c.get("enable_moe_block", False):
            X, k = c.get("num_experts", None), c.get("top_k_experts", None)
            F = c.get("moe_intermediate_size", None)
            for key, value in (("num_experts", X), ("top_k_experts", k),
                               ("moe_intermediate_size", F)):
                if not value:
                    raise SpecError(key, "an integer >= 1 with enable_moe_block", value,
                                    source=c.where)
            # Gemma4TextRouter.proj is an nn.Linear: peft's all-linear adapts it (the
            # experts' 3-D weights it leaves alone, peft 0.21)
            out |= {"n_experts": X, "top_k": k, "d_ff_expert": F, "moe_beside_dense": True,
                    "layer_ffn": f"{L}E", "peft_moe": "linear_router"}
    c.data = {**c.data, "layer_types": types}
    return out | _layer_attention(c, L, None, 1024 if unified else 512)


def _gemma3n(c: Config) -> dict[str, Any]:
    """Gemma3nForCausalLM (transformers 5.23; Gemma 3n's language model): Gemma 3's sandwich
    norms, QK-norm and a weightless value norm, every fifth layer full, the last
    num_kv_shared_layers reusing earlier keys and values; per-layer embeddings as Gemma 4's;
    AltUp (altup_num_inputs streams: the embeddings projected to the others and back, a router
    and coefficients per layer), LAuReL (a rank-laurel_rank path beside the attention) and,
    in the first layers of activation_sparsity_pattern, a sparsified FFN gate."""
    _no_parameter_notes(c)
    L = c.get("num_hidden_layers", 35)
    E, H = c.get("hidden_size", 2048), c.get("num_attention_heads", 8)
    d_head = c.get("head_dim", 256)
    F = c.data.get("intermediate_size", 16384)
    if isinstance(F, list):
        if len(F) != L or len(set(F)) != 1:
            raise SpecError("intermediate_size", f"one width, or a list of {L} equal widths "
                            "(tcalc models one FFN size)", F, source=c.where)
        F = F[0]
    F = c.with_data({"intermediate_size": F}).get("intermediate_size", 16384)
    sparsity = c.data.get("activation_sparsity_pattern")
    if sparsity is None:  # Gemma3nTextConfig: 0.95 in the first 10 layers (when there are more)
        sparse = 10 if L > 10 else 0
    else:
        ok = isinstance(sparsity, list) and len(sparsity) == L and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1
            for v in sparsity)
        sparse = next((i for i, v in enumerate(sparsity) if not v), L) if ok else 0
        if not ok or any(sparsity[sparse:]):
            raise SpecError("activation_sparsity_pattern", f"a list of {L} numbers in [0, 1): "
                            "the sparse layers first, then zeros", sparsity, source=c.where)
    types = c.data.get("layer_types")
    if types is None:  # Gemma3nTextConfig: every fifth layer full
        types = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention"
                 for i in range(L)]
    shared = c.get("num_kv_shared_layers", 15)
    if shared and isinstance(types, list) and len(types) == L and shared < L and \
            set(types[:L - shared]) != set(types):
        raise SpecError("num_kv_shared_layers", "a count leaving a layer of each kind before "
                        "the shared ones (they reuse its keys)", shared, source=c.where)
    altup = c.get("altup_num_inputs", 4)
    if altup < 2:
        raise SpecError("altup_num_inputs", "an integer >= 2 (Gemma3nTextModel projects the "
                        "embeddings to altup_num_inputs - 1 further streams)", altup,
                        source=c.where)
    bias = c.get("attention_bias", False)
    P = c.get("hidden_size_per_layer_input", 256)
    if not P:
        raise SpecError("hidden_size_per_layer_input", "an integer >= 1 (Gemma3nTextDecoderLayer "
                        "builds its per-layer gate, projection and norm whatever the width; "
                        "tcalc reads 0 as none)", P, source=c.where)
    c.data = {**c.data, "layer_types": types}
    return dict(arch="decoder", logit_softcapping=_softcap(c, 30.0),
                vocab_size=c.get("vocab_size", 262400), d_model=E, n_layers=L, n_heads=H,
                n_kv_heads=c.kv_heads(2, H), d_head=None if d_head * H == E else d_head,
                d_ff=F, max_positions=c.get("max_position_embeddings", 32768),
                position="rope", ffn="gated",
                activation=c.activation("hidden_activation", "gelu_pytorch_tanh"),
                norm="rmsnorm", norm_position="pre", sandwich_norm=True, qk_norm="head",
                value_norm=True, **_bias(bias, bias, bias, bias, False, False),
                tie_embeddings=c.get("tie_word_embeddings", True), kv_shared_layers=shared,
                altup_inputs=altup, laurel_rank=c.get("laurel_rank", 64),
                sparse_ffn_layers=sparse,
                per_layer_input=P,
                per_layer_vocab=c.get("vocab_size_per_layer_input", 262144)
                ) | _layer_attention(c, L, None, 512)


_V4_KINDS = {"sliding_attention": "S", "compressed_sparse_attention": "Q",
             "heavily_compressed_attention": "H"}


def _deepseek_v4(c: Config) -> dict[str, Any]:
    """DeepseekV4ForCausalLM (transformers 5.23): every layer attends a sliding window of one
    K=V head with a low-rank query, a grouped low-rank output and sinks; its Q layers
    (compressed_sparse_attention) add overlapping compressed entries an indexer picks from,
    its H layers (heavily_compressed_attention) non-overlapping ones, all attended; the
    residual is hc_mult streams (manifold-constrained hyper-connections around each
    sublayer, a hyper head before the final norm); every layer's FFN a mixture of experts
    with one shared expert (the first hash-routed: same weights). The multi-token-prediction
    layers (num_nextn_predict_layers) are not built by transformers."""
    L = c.get("num_hidden_layers", 43)
    E, H = c.get("hidden_size", 4096), c.get("num_attention_heads", 64)
    rates = c.data.get("compress_rates") or {}
    if not isinstance(rates, dict):
        raise SpecError("compress_rates", "a mapping of layer type to tokens per entry", rates,
                        source=c.where)
    csa = rates.get("compressed_sparse_attention", c.get("compress_rate_csa", 4))
    hca = rates.get("heavily_compressed_attention", c.get("compress_rate_hca", 128))
    for key, v in (("compress_rates", csa), ("compress_rates", hca)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecError(key, "integers >= 1 (tokens per compressed entry)", rates,
                            source=c.where)
    types = c.data.get("layer_types")
    ratios = c.data.get("compress_ratios")
    if types is None and isinstance(ratios, list):  # the checkpoints' legacy per-layer rates
        by_rate = {0: "sliding_attention", 4: "compressed_sparse_attention",
                   128: "heavily_compressed_attention"}
        if any(isinstance(r, bool) or not isinstance(r, int) or r not in by_rate
               for r in ratios):
            raise SpecError("compress_ratios", "a list of 0, 4 and 128", ratios,
                            source=c.where)
        types = [by_rate[r] for r in ratios]
    if types is None:  # DeepseekV4Config: two H layers, then Q and H alternating
        types = ["heavily_compressed_attention"] * min(L, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
            for i in range(max(L - 2, 0))]
    if not isinstance(types, list) or len(types) < L or any(
            not isinstance(t, str) or t not in _V4_KINDS for t in types):
        raise SpecError("layer_types", f"a list of {L} of " + ", ".join(_V4_KINDS), types,
                        source=c.where)
    c.refuse("mlp_bias", bool, "biases on the shared expert are not modelled")
    F = c.get("moe_intermediate_size", 2048)
    shared = c.get("n_shared_experts", 1)
    if shared != 1:
        c.notes.append(f"n_shared_experts is {shared}: DeepseekV4SparseMoeBlock builds one "
                       "shared expert whatever it says, as counted")
    c.notes.append("its multi-token-prediction layers (num_nextn_predict_layers) are not "
                   "built by transformers 5.23: not counted")
    letters = [_V4_KINDS[t] for t in types[:L]]
    dh = c.get("head_dim", 512)
    # DeepseekV4Config.__post_init__: partial_rotary_factor, else the legacy
    # qk_rope_head_dim / head_dim, else 64 / 512 (the rotated width: its inv_freq's pairs)
    rope = c.data.get("partial_rotary_factor")
    if rope is None:
        legacy = c.data.get("qk_rope_head_dim")
        rope = legacy / dh if isinstance(legacy, int) and legacy > 0 and dh else 64 / 512
    if isinstance(rope, bool) or not isinstance(rope, int | float) or not 0 < rope <= 1:
        raise SpecError("partial_rotary_factor", "a number in (0, 1]", rope, source=c.where)
    return dict(arch="decoder", vocab_size=c.get("vocab_size", 129280), d_model=E, n_layers=L,
                rotary_fraction=float(rope),
                n_heads=H, n_kv_heads=1, d_head=dh, d_ff=0,
                max_positions=c.get("max_position_embeddings", 1048576), position="rope",
                ffn="gated", activation="silu", norm="rmsnorm", norm_position="pre",
                tie_embeddings=c.get("tie_word_embeddings", False),
                **_bias(False, False, False, False, False, False),
                q_lora_rank=c.get("q_lora_rank", 1024), attention_sinks=True,
                sliding_window=c.get("sliding_window", 128),
                layer_attention=_runs(letters), n_experts=c.get("n_routed_experts", 256),
                top_k=c.get("num_experts_per_tok", 6), d_ff_expert=F, n_shared_experts=1,
                hc_streams=c.get("hc_mult", 4), compress_csa=csa, compress_hca=hca,
                csa_index_heads=c.get("index_n_heads", 64),
                csa_index_dim=c.get("index_head_dim", 128),
                csa_index_topk=c.get("index_topk", 512), o_groups=c.get("o_groups", 8),
                o_lora_rank=c.get("o_lora_rank", 1024), swiglu_clamp=True,
                hc_sinkhorn_iters=c.get("hc_sinkhorn_iters", 20))


def _gpt_oss(c: Config) -> dict[str, Any]:
    # GptOssAttention (sinks, biased projections), GptOssMLP: a biased router and experts
    # with biases (gate_up_proj_bias, down_proj_bias)
    L = c.get("num_hidden_layers", 36)
    E, H = c.get("hidden_size", 2880), c.get("num_attention_heads", 64)
    d_head = c.get("head_dim", 64)
    bias = c.get("attention_bias", True)
    return dict(arch="decoder", vocab_size=c.get("vocab_size", 201088), d_model=E,
                n_layers=L, n_heads=H, n_kv_heads=c.kv_heads(8, H),
                d_head=None if d_head * H == E else d_head,
                d_ff=c.get("intermediate_size", 2880),
                max_positions=c.get("max_position_embeddings", 131072), position="rope",
                ffn="gated", activation="swiglu_oss", norm="rmsnorm", norm_position="pre",
                attention_sinks=True, router_bias=True,
                n_experts=c.get("num_local_experts", 128),
                top_k=c.first(("num_experts_per_tok", "experts_per_token"), 4),
                **_bias(bias, bias, bias, bias, True, True),
                tie_embeddings=c.get("tie_word_embeddings", False)) | _layer_attention(
                    c, L, [i % 2 == 0 for i in range(L)], 128)


def _mimo_v2_flash(c: Config) -> dict[str, Any]:
    """MiMoV2FlashForCausalLM (transformers 5.23; Xiaomi's MiMo-V2-Flash, 2025): Q and K heads
    of head_dim, V heads of v_head_dim; the sliding layers have twice num_key_value_heads and
    a sink logit per head, the full layers (the first and every sixth) neither; a dense first
    layer, then DeepSeek-V3's sigmoid router (its e_score_correction_bias a buffer) over
    experts without shared ones. attention_value_scale and the partial RoPE hold no
    parameters."""
    L = c.get("num_hidden_layers", 48)
    E, H = c.get("hidden_size", 4096), c.get("num_attention_heads", 64)
    kv = c.kv_heads(4, H)
    d_head = c.get("head_dim", 192)
    bias = c.get("attention_bias", False)
    types = c.data.get("layer_types")
    if types is None:  # MiMoV2FlashConfig.__post_init__
        types = ["full_attention" if i == 0 or not (i + 1) % 6 else "sliding_attention"
                 for i in range(L)]
    # the config class adds one to sliding_window_size (the SGLang reference's window)
    window = (c.get("sliding_window_size", 0) + 1 if c.data.get("sliding_window_size")
              is not None else c.get("sliding_window", 129))
    layers = _layer_attention(_Window(c.data | {"layer_types": types}, c.where,
                                      {"sliding_window": window}), L, None, None)
    sliding = "S" in layers.get("layer_attention", "")
    if kv < 1 or (sliding and H % (2 * kv)):
        raise SpecError("num_key_value_heads", f"an integer >= 1 dividing num_attention_heads="
                        f"{H} / 2 (the sliding layers have twice as many)", kv, source=c.where)
    if c.get("v_head_dim", 128) < 1:
        raise SpecError("v_head_dim", "an integer >= 1", c.get("v_head_dim", 128),
                        source=c.where)
    out = dict(arch="decoder", vocab_size=c.get("vocab_size", 152576), d_model=E,
               n_layers=L, n_heads=H, n_kv_heads=2 * kv if sliding else kv,
               global_kv_heads=kv if sliding else None,
               d_head=None if d_head * H == E else d_head,
               v_head_dim=0 if c.get("v_head_dim", 128) == d_head else c.get("v_head_dim", 128),
               d_ff=c.get("intermediate_size", 16384),
               max_positions=c.get("max_position_embeddings", 131072), position="rope",
               ffn="gated", activation=c.activation("hidden_act", "silu"), norm="rmsnorm",
               norm_position="pre", attention_sinks=sliding, sinks_sliding_only=sliding,
               **_bias(bias, bias, bias, False, False, False),
               tie_embeddings=c.get("tie_word_embeddings", False)) | layers
    # _keys_to_ignore_on_load_unexpected = [r"^model\.mtp\."]: the checkpoint's MTP modules
    c.notes.append("the checkpoint's multi-token-prediction modules (model.mtp.*) are not "
                   "built by transformers 5.23, so not counted")
    kinds = c.data.get("mlp_layer_types")
    if kinds is None:  # MiMoV2FlashConfig: one dense layer, then experts
        kinds = ["dense"] + ["sparse"] * (L - 1)
    if not isinstance(kinds, list) or len(kinds) != L or any(
            k not in ("dense", "sparse") for k in kinds):
        raise SpecError("mlp_layer_types", f"a list of {L} of dense, sparse", kinds,
                        source=c.where)
    ffn = ["E" if k == "sparse" else "D" for k in kinds]
    if "E" in ffn:
        out |= {"n_experts": c.first(("n_routed_experts", "num_local_experts"), 256),
                "top_k": c.get("num_experts_per_tok", 8),
                "d_ff_expert": c.get("moe_intermediate_size", 2048),
                "router_topk": _router_topk(c, "deepseek")}
        if "D" in ffn:
            out["layer_ffn"] = _runs(ffn)
    # the rotated share of each head (MiMoV2FlashRotaryEmbedding: partial_rotary_factor per
    # layer type, 0.334 by default); one value where the types agree, else left unread
    rope = c.data.get("rope_parameters")
    if rope is None:
        rope = {t: {} for t in set(types)}
    if isinstance(rope, dict) and all(isinstance(rope.get(t), dict) for t in set(types)):
        factors = {rope[t].get("partial_rotary_factor", 0.334) for t in set(types)}
        if len(factors) == 1 and all(isinstance(f, int | float) and 0 < f < 1
                                     for f in factors):
            out["rotary_fraction"] = float(factors.pop())
    return out


class Moe(NamedTuple):
    """Where a record's mixture of experts reads its sizes (config keys, or fixed values)."""

    experts: tuple[str, ...] = ("num_experts", "num_local_experts", "n_routed_experts")
    top_k: tuple[str, ...] = ("num_experts_per_tok",)
    expert_ff: str = "moe_intermediate_size"  # "" : the dense intermediate_size
    shared: str | int = 0  # a count key, or a fixed count of shared experts
    shared_ff: str = ""  # a key with the shared experts' total width ("": expert size)
    shared_gate: bool = False
    shared_absent_at_zero: bool = False  # width 0 means no shared MLP module (GraniteMoeShared)
    router_bias: bool = False
    first_dense: str = ""  # key: this many dense layers first (DeepSeek, GLM-4.5)
    step: str = ""  # key: experts every step-th layer (Qwen2/3-MoE decoder_sparse_step)
    mlp_only: str = ""  # key: a list of dense layer indices (Qwen2/3-MoE mlp_only_layers)
    layer_types: str = ""  # key: a per-layer list of "dense"/"sparse" (GLM-4.7-Flash)
    dense_first: int = 0  # without that list, this many dense layers first
    span: tuple[str, str, str] = ("", "", "")  # keys: first and last MoE layer, interval
    mlp_only_default: tuple[int, ...] = ()  # the class's value for a null mlp_only (Flint)
    layer_list: str = ""  # key: the MoE layers' indices, when the file lists them (Llama 4)
    period: tuple[str, str] = ("", "")  # keys: experts where i % period == offset (Jamba)
    routes: int = 0  # experts per token the class always routes to, whatever top_k says
    # the router's top-k values (spec.router_topk): "renorm" (Mixtral), "sparsemixer"
    # (PhiMoE), "qwen" (cast, and renormalised where the config's norm_topk_prob says so),
    # "qwen_renorm" (Qwen3-Next's: qwen's, norm_topk_prob true unless the file says),
    # "renorm_cast" (Qwen3.5-MoE's, always renormalised), "deepseek" (fp32 sigmoid scores,
    # renormalised where norm_topk_prob says so), "" (not read)
    router_topk: str = ""
    # the class reads top_k only in its router's forward (DeepseekV2TopkRouter): a null one
    # builds (parameters counted) but cannot run (FLOPs and memory refused naming the key)
    top_k_in_forward: bool = False


class Ssm(NamedTuple):
    """A record's recurrent mixer: its kind, the config keys of its sizes (this
    family's spelling of Mamba2Config's names), and how the config says which layers use it.

    ``layers``: all (every layer: Mamba, Mamba-2), layer_types (a per-layer list of
    linear_attention / full_attention, or the class's every-k-th rule), jamba (attn_layer_period
    and attn_layer_offset), bamba (attn_layer_indices), nemotron (hybrid_override_pattern or
    layers_block_type: M mamba, * attention, - MLP, E MoE; one sublayer per layer), lfm2
    (layer_types of conv / full_attention, or full_attn_idxs)."""

    kind: str  # mamba | mamba2 | gated_deltanet | short_conv
    layers: str = "all"
    expand: str = "expand"  # d_inner = expand · hidden_size ("": heads · head_dim)
    state: str = "state_size"
    heads: str = "num_heads"
    head_dim: str = "head_dim"
    groups: str = "n_groups"
    conv: str = "conv_kernel"
    dt_rank: str = "time_step_rank"
    conv_bias: str | bool = "use_conv_bias"
    bias: str | bool = "use_bias"
    chunk: str | int = "chunk_size"
    norm: str | bool = True  # mamba2's gated RMSNorm (Falcon-H1: mamba_rms_norm)
    dt_norms: bool = False  # Jamba
    every: int = 4  # layer_types: the class's default full_attention_interval
    in_projs: int = 1  # separate input projection matrices (Qwen3-Next 2, Qwen3.5 4)
    full_when: int = 0  # ... a layer i is full attention when (i + 1) % every == full_when
    inner: str = ""  # a key whose value, when the file has it, is d_inner (MambaConfig)
    out_bias: str = ""  # a key for out_proj's bias when it differs from in_proj's (Falcon-H1)
    window: int = 0  # the class's sliding_window for sliding_attention layers (Lfm3Config: 256)


# Per-layer type names in configs -> (mixer letter, FFN letter); the FFN letter "" means the
# layer's FFN as the record's MoE rule says (dense or experts).
def _indices(c: Config, key: str) -> list[int] | None:
    """A list of layer indices (attn_layer_indices, full_attn_idxs), or None when absent."""
    idx = c.data.get(key)
    if idx is not None and (not isinstance(idx, list) or any(
            isinstance(i, bool) or not isinstance(i, int) for i in idx)):
        raise SpecError(key, "a list of layer indices", idx, source=c.where)
    return idx


_HYBRID_TYPES = {"linear_attention": ("M", ""), "mamba": ("M", ""), "conv": ("M", ""),
                 "full_attention": ("F", ""), "attention": ("F", ""),
                 "sliding_attention": ("S", "")}
_NEMOTRON = {"M": ("M", "X"), "*": ("F", "X"), "-": ("X", "D"), "E": ("X", "E"),
             "linear_attention": ("M", "X"), "mamba": ("M", "X"), "full_attention": ("F", "X"),
             "attention": ("F", "X"), "mlp": ("X", "D"), "moe": ("X", "E")}


def _hybrid_layers(c: Config, s: Ssm, L: int) -> list[tuple[str, str]]:
    """(mixer letter, FFN letter) per layer, as the config class derives them."""
    if s.layers == "all":
        return [("M", "")] * L
    if s.layers == "parallel":  # Falcon-H1: attention and Mamba-2 side by side in each layer
        return [("P", "")] * L
    if s.layers == "jamba":  # JambaConfig.layers_block_type
        period, offset = c.t("attn_layer_period", 8), c.t("attn_layer_offset", 4)
        return [("F" if i % period == offset else "M", "") for i in range(L)]
    if s.layers == "bamba":  # BambaConfig.layers_block_type
        idx = _indices(c, "attn_layer_indices") or []
        return [("F" if i in idx else "M", "") for i in range(L)]
    if s.layers == "nemotron":
        raw = c.data.get("hybrid_override_pattern")
        kinds = list(raw) if isinstance(raw, str) else c.data.get("layers_block_type") \
            or c.data.get("layer_types") or ["linear_attention", "moe", "full_attention", "mlp"]
        key = "hybrid_override_pattern" if isinstance(raw, str) else "layers_block_type"
        if not isinstance(kinds, list) or any(not isinstance(k, str) or k not in _NEMOTRON
                                              for k in kinds):
            raise SpecError(key, "M, *, - and E (or mamba, attention, mlp, moe) per layer",
                            raw if isinstance(raw, str) else kinds, source=c.where)
        return [_NEMOTRON[k] for k in kinds]
    types = c.data.get("layer_types")
    if types is None and s.layers == "lfm3":  # Lfm3Config.__post_init__
        return [("F" if i % 4 == 2 else "S" if i % 4 == 0 and i > 0 else "M", "")
                for i in range(L)]
    if types is None and s.layers == "lfm2":  # Lfm2Config: full_attn_idxs, default all
        full = _indices(c, "full_attn_idxs")
        return [("F" if full is None or i in full else "M", "") for i in range(L)]
    if types is None:
        every = c.t("full_attention_interval", s.every)
        if s.layers == "layer_types_all":  # GraniteMoeHybridConfig: every layer mamba
            return [("M", "")] * L
        return [("F" if (i + 1) % every == s.full_when else "M", "") for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(not isinstance(t, str)
                                                             or t not in _HYBRID_TYPES
                                                             for t in types):
        raise SpecError("layer_types", f"a list of {L} of "
                        + ", ".join(sorted(_HYBRID_TYPES)), types, source=c.where)
    return [_HYBRID_TYPES[t] for t in types]


def _ssm(c: Config, s: Ssm, E: int) -> dict[str, Any]:
    """The spec's mixer fields from the family's keys (defaults: hf_defaults.py)."""
    def num(key: str, fallback: Any = None) -> Any:
        value = c.t(key, fallback) if key else fallback
        if isinstance(value, bool) or not isinstance(value, int):  # null, or not a number
            raise SpecError(key, "an integer", value, source=c.where)
        return value

    def switch(spec: str | bool) -> bool:
        return spec if isinstance(spec, bool) else bool(c.t(spec, False))

    out: dict[str, Any] = {"mixer": s.kind}
    if s.kind == "short_conv":
        return out | {"ssm_conv": num(s.conv), "ssm_conv_bias": switch(s.conv_bias)}
    if s.kind == "lightning":  # the attention heads' sizes; the state in the cache's dtype
        heads = num(s.heads)
        head_dim = c.t(s.head_dim) or E // heads
        return out | {"ssm_heads": heads, "ssm_inner": heads * head_dim,
                      "ssm_chunk": s.chunk if isinstance(s.chunk, int) else num(s.chunk, 256),
                      "ssm_state_dtype": "cache"}
    heads = num(s.heads) if s.kind != "mamba" else 0
    if s.inner and c.t(s.inner) is not None:
        # MambaConfig.__post_init__ sets intermediate_size = expand · hidden_size, then the
        # file's own intermediate_size overrides it (Falcon-Mamba-7B: expand 16, 8192);
        # Falcon-H1's mamba_d_ssm, unless null
        inner = num(s.inner)
    elif s.expand:
        expand = c.t(s.expand, 2)
        if isinstance(expand, bool) or not isinstance(expand, (int, float)):
            raise SpecError(s.expand, "a number", expand, source=c.where)
        inner = int(expand * E)
    else:
        inner = heads * num(s.head_dim)
    if heads and s.head_dim:
        head_dim = c.t(s.head_dim, "auto")
        if head_dim not in ("auto", None) and head_dim * heads != inner:
            raise SpecError(s.head_dim, f"{s.heads} · {s.head_dim} = the mixer width {inner} "
                            "(the model's forward needs it)", head_dim, source=c.where)
    if s.out_bias and switch(s.out_bias) != switch(s.bias):
        raise SpecError(s.out_bias, f"equal to {s.bias}={switch(s.bias)} (a bias on one of the "
                        "mixer's projections but not the other is not modelled)",
                        switch(s.out_bias), source=c.where)
    out |= {"ssm_inner": inner, "ssm_state": num(s.state), "ssm_conv": num(s.conv),
            "ssm_heads": heads, "ssm_groups": num(s.groups) if s.kind != "mamba" else 0,
            "ssm_conv_bias": switch(s.conv_bias), "ssm_bias": switch(s.bias),
            "ssm_norm": switch(s.norm), "ssm_dt_norms": s.dt_norms,
            "ssm_in_projs": s.in_projs}
    cache = c.data.get("mamba_ssm_cache_dtype")
    if cache is not None:  # Nemotron-H: the dtype serving engines keep the state in
        names = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
        if cache not in names:
            raise SpecError("mamba_ssm_cache_dtype", "one of " + ", ".join(names), cache,
                            source=c.where)
        out["ssm_state_dtype"] = names[cache]
    if s.kind == "mamba":
        rank = c.t(s.dt_rank, "auto")
        out["ssm_dt_rank"] = -(-E // 16) if rank == "auto" else rank  # math.ceil(E / 16)
    if s.kind != "mamba":
        out["ssm_chunk"] = s.chunk if isinstance(s.chunk, int) else num(s.chunk, 256)
    return out


class Layout(NamedTuple):
    """A Llama-style decoder: embeddings, L × (attention + FFN + norms), final norm, LM head.
    One record per model_type says how it differs; the sizes come from the file, or from the
    config class's defaults (hf_defaults.py, generated from transformers by
    tools/hf_defaults.py)."""

    cls: str  # the class counted
    qkv_bias: bool | str = "attention_bias"  # fixed, or the config key that decides
    o_bias: bool | str = "attention_bias"
    mlp_bias: bool | str = "mlp_bias"
    ffn: str = "gated"  # gated (gate, up, down) | plain (up, down)
    act: str = "hidden_act"  # the key naming the activation, or "=name" for a fixed one
    # the class's own table of activation names where it is not ACT2FN's (OpenAI GPT's
    # ACT_FNS maps "gelu" to gelu_new): (the file's name, tcalc's)
    act_names: tuple[tuple[str, str], ...] = ()
    norm: str = "rmsnorm"
    norms: str = "pre"  # pre | post (after each sublayer) | sandwich | parallel | parallel_key
    # (parallel_key: parallel when use_parallel_residual is set, StableLM)
    qk_norm: str = "none"  # none | head | width
    qk_norm_key: str = ""  # a config key that switches qk_norm on ("": always on)
    pre_norm_key: str = ""  # a config key that makes post norms pre norms (Flaubert's)
    # a config key: the probability that training skips a layer (notes an upper bound)
    layerdrop_key: str = ""
    sinks: bool = False
    lm_head_bias: bool | str = False
    full_width: str = ""  # why n_heads · head_dim must equal hidden_size ("": it need not)
    refuse: tuple[tuple[str, str], ...] = ()  # (key, why): a true value adds tensors not modelled
    needs: tuple[tuple[str, str], ...] = ()  # (key, why): a false value removes tensors counted
    # (key, what): a count of layers the checkpoint holds but the class does not build
    unbuilt: tuple[tuple[str, str], ...] = ()
    keys: tuple[tuple[str, str], ...] = ()  # (standard key, this family's spelling)
    position: str = "rope"  # rope | learned | sinusoidal | alibi
    position_offset: int = 0
    embedding_norm: bool = False  # a norm right after the embeddings (BLOOM)
    final_norm: bool = True
    ffn_ratio: str = ""  # a key: d_ff = ratio · hidden_size (MPT expansion_ratio)
    ffn_default_4x: bool = False  # intermediate_size absent or null: 4 · hidden_size
    kv_from: str = ""  # a key: true means one K/V head (multi_query), false n_heads
    mla: bool = False  # DeepSeek-style latent attention (kv_lora_rank, q_lora_rank, ...)
    dsa: bool = False  # DeepSeek Sparse Attention's indexer (index_n_heads, index_head_dim, ...)
    o_bias_last: bool = False  # a bias on the last layer's attention output (GPT-NeoX-Japanese)
    # config keys that switch the sandwich norms and the attention gate off (LFM3's
    # use_sandwich_norm, use_attention_gate; "": as the record says)
    sandwich_key: str = ""
    gate_key: str = ""
    parallel_norms: int = 1
    fused_qkv: bool = False
    arch: str = "decoder"  # encoder: the same layers read bidirectionally (EuroBERT)
    lang_emb: bool = False  # XLM: a table of n_langs rows when use_lang_emb and n_langs > 1
    gate: tuple[str, str] = ("none", "none")  # attention output gate and its bias
    chunked: bool = False  # Llama 4: chunked attention, full attention without RoPE (NoPE)
    dense_ff: str = ""  # a key for the dense layers' FFN size when it differs (Llama 4)
    moe: Moe | None = None
    dropout: tuple[str, ...] = ("attention_dropout",)
    ssm: Ssm | None = None  # a recurrent mixer in some or all layers
    ff_key: str = ""  # the dense FFN's size under another key (GraniteMoeHybrid)
    ffn_adjust: str = ""  # lfm2: Lfm2MLP's 2/3 and multiple-of rounding of intermediate_size
    untied: bool = False  # the class ties nothing (_tied_weights_keys empty: Nemotron-H)
    # how PEFT sees the linear layers (LoRA): gate and up as one gate_up matrix
    # (dense and shared-expert FFNs); the router an nn.Linear subclass; the attention gate
    # a module named gate_proj
    fused_gate_up: bool = False
    linear_router: bool = False
    gate_proj: bool = False
    gate_in_q: bool = False  # the attention gate is the second half of q_proj (Qwen3-Next)
    sub_norms: bool = False  # BitNet: norms before o_proj and before down_proj
    differential: bool = False  # DiffLlama's differential attention
    # Mllama: the key listing the cross-attention layers a text-only forward skips (and the
    # class default), and the token table's rows beyond vocab_size
    idle_cross: tuple[str, tuple[int, ...]] = ("", ())
    extra_rows: int = 0
    text_config: bool = False  # the type's config keeps the model's keys in text_config (Mllama)
    # Beam: without layer_types, every sliding_every-th layer (and the last) is full, the rest
    # sliding; full layers without RoPE (full_nope); final_logit_softcapping's class default
    sliding_every: int = 0
    full_nope: bool = False
    softcap: float = 0.0
    attn_softcap: float = 0.0  # attn_logit_softcapping's class default (VaultGemma: 50)
    window_default: int = 0  # the class's sliding_window when the file has none
    # a key giving one sliding window over every layer (Starcoder2's sliding_window; null or
    # absent: full attention)
    window: str = ""
    fp32_math: bool = False  # Beam: the FFN's act · up and the final soft-capping in fp32
    # the key giving the fraction of each head RoPE rotates, and the class's default
    # (StableLmConfig: partial_rotary_factor 0.25; "": the whole head)
    rotary: tuple[str, float] = ("", 1.0)
    # or the key giving the rotated dims themselves (GPT-J's, CodeGen's rotary_dim, 64 by
    # default; null: the whole head)
    rotary_dims: str = ""


def _rotary_fraction(c: Config, r: Layout, d_head: int) -> float:
    """The fraction of each head RoPE rotates, as the record's key gives it."""
    if r.rotary_dims:
        dims = c.get(r.rotary_dims, c.table.get(r.rotary_dims, 64))
        return 1.0 if dims is None or not d_head else min(1.0, dims / d_head)
    if not r.rotary[0]:
        return 1.0
    rope = c.get("rope_parameters", None)  # transformers 5 keeps it there when it writes one
    if isinstance(rope, dict) and rope.get(r.rotary[0]) is not None:
        return float(rope[r.rotary[0]])
    return float(c.get(r.rotary[0], r.rotary[1]))


def _generic(c: Config, r: Layout) -> dict[str, Any]:
    for key, why in r.refuse:
        if c.t(key):
            raise SpecError(key, f"false or absent ({why})", c.t(key), source=c.where)
    for key, why in r.needs:
        if not c.t(key, True):
            raise SpecError(key, f"true or absent ({why})", c.t(key), source=c.where)
    for key, what in r.unbuilt:
        if c.t(key):
            c.notes.append(f"{key} is {c.t(key)}: its {what} are not built by transformers "
                           "5.23, so not counted")
    if r.keys:
        c = c.renamed(dict(r.keys))
    E, H = c.t("hidden_size"), c.t("num_attention_heads")
    L = c.t("num_hidden_layers")
    F = c.t("intermediate_size", c.t("moe_intermediate_size"))
    if r.ff_key:
        F = c.t(r.ff_key)
    if r.ffn_adjust == "lfm2" and F is not None and c.t("block_auto_adjust_ff_dim", True):
        F = int(2 * F / 3)  # Lfm2MLP.__init__
        mult, step = c.t("block_ffn_dim_multiplier", 1.0), c.t("block_multiple_of", 256)
        if mult is not None:
            F = step * ((int(mult * F) + step - 1) // step)
    kinds: list[tuple[str, str]] = []
    if r.ssm is not None:
        if r.ssm.layers == "nemotron":  # NemotronHConfig: the layer count is the pattern's
            L = len(_hybrid_layers(c, r.ssm, 0))
        if L is not None:
            kinds = _hybrid_layers(c, r.ssm, L)
        if r.ssm.layers == "all":  # Mamba, Mamba-2: no attention, no FFN
            H, F = 0, 0
    if r.ffn_ratio and E is not None:
        F = c.t(r.ffn_ratio) * E
    elif r.ffn_default_4x and F is None and E is not None:
        F = 4 * E  # e.g. GPTNeoMLP: intermediate_size or 4 * hidden_size
    for key, value in (("hidden_size", E), ("num_attention_heads", H),
                       ("num_hidden_layers", L), ("vocab_size", c.t("vocab_size")),
                       ("intermediate_size", F)):
        if value is None:
            raise SpecError(c.spelled(key), "to be present", None, source=c.where)
    d_head = c.t("head_dim", E // H if H else None) if H else 0
    if r.full_width and d_head * H != E:
        raise SpecError("head_dim", f"num_attention_heads · head_dim = hidden_size = {E} "
                        f"({r.full_width})", d_head, source=c.where)
    kv = (1 if c.flag(r.kv_from) else H) if r.kv_from else c.t("num_key_value_heads", H)
    qk = r.qk_norm if not r.qk_norm_key or c.flag(r.qk_norm_key) else "none"
    if r.layerdrop_key and c.t(r.layerdrop_key, 0.0):
        c.notes.append(f"{r.layerdrop_key}: in training transformers skips each layer with "
                       "that probability; FLOPs and memory count every layer (an upper bound)")
    qkv, o, mlp = c.flag(r.qkv_bias), c.flag(r.o_bias), c.flag(r.mlp_bias)
    if r.dense_ff and c.t(r.dense_ff) is not None:
        F = c.t(r.dense_ff)
    out: dict[str, Any] = dict(
        arch=r.arch, vocab_size=c.t("vocab_size"), d_model=E, n_layers=L, n_heads=H,
        n_kv_heads=kv, d_head=None if d_head * H == E else d_head,
        # all-MoE records may have no dense size (SolarOpen): the expert size stands in
        d_ff=F, max_positions=c.t("max_position_embeddings", 0), position=r.position,
        position_offset=r.position_offset, ffn=r.ffn,
        activation=r.act[1:] if r.act.startswith("=") else
        dict(r.act_names).get(str(c.get(c.spelled(r.act), c.table.get(c.spelled(r.act)))))
        or c.activation(c.spelled(r.act), c.table.get(c.spelled(r.act)) or "silu"),
        norm=r.norm, norm_position="post" if r.norms == "post" and not (
            r.pre_norm_key and c.flag(r.pre_norm_key)) else "pre",
        sandwich_norm=r.norms == "sandwich" and (not r.sandwich_key
                                                 or c.flag(r.sandwich_key)),
        parallel_block=r.norms == "parallel" or (r.norms == "parallel_key"
                                                 and c.flag("use_parallel_residual")),
        parallel_norms=r.parallel_norms, qk_norm=qk, attention_sinks=r.sinks,
        lm_head_bias=c.flag(r.lm_head_bias), embedding_norm=r.embedding_norm,
        final_norm=r.final_norm,
        fused_qkv=r.fused_qkv,
        attn_gate=r.gate[0] if not r.gate_key or c.flag(r.gate_key) else "none",
        attn_gate_bias=r.gate[1] if not r.gate_key or c.flag(r.gate_key) else "none",
        fused_gate_up=r.fused_gate_up, attn_gate_named_gate_proj=r.gate_proj,
        attn_gate_in_q=r.gate_in_q,
        **_bias(qkv, qkv, qkv, o, mlp, mlp),
        tie_embeddings=bool(c.t("tie_word_embeddings")) and not r.untied,
        last_layer_o_bias=r.o_bias_last, sub_norms=r.sub_norms, differential=r.differential,
        rotary_fraction=_rotary_fraction(c, r, d_head))
    if r.untied and c.t("tie_word_embeddings"):
        c.notes.append(f"config says tie_word_embeddings: true; {r.cls} ties nothing "
                       "(transformers 5.23), so its head is counted apart")
    if r.lang_emb and c.flag("use_lang_emb") and c.t("n_langs", 1) > 1:
        out["token_types"] = c.t("n_langs")  # same shape as a segment table: n_langs × d
    if r.mla:
        out |= {"kv_lora_rank": c.t("kv_lora_rank"), "q_lora_rank": c.t("q_lora_rank") or 0,
                "qk_nope_head_dim": _present(c, "qk_nope_head_dim"),
                "qk_rope_head_dim": _present(c, "qk_rope_head_dim"),
                # MiniCPM3Config: v_head_dim null means hidden_size / num_attention_heads
                "v_head_dim": c.t("v_head_dim", E // H),
                "n_kv_heads": None,
                "d_head": _present(c, "qk_nope_head_dim") + _present(c, "qk_rope_head_dim"),
                "bias_v": False}
    if r.dsa:
        # GLM-MoE-DSA: a "shared" layer reuses the previous layer's top-k and has no indexer
        c.refuse("indexer_types", lambda v: isinstance(v, list) and "shared" in v,
                 "layers that reuse another layer's top-k (no indexer of their own) are not "
                 "modelled")
        c.refuse("index_topk_freq", lambda v: v != 1, "layers that reuse another layer's "
                 "top-k are not modelled")
        c.refuse("index_topk_pattern", lambda v: "S" in v or "shared" in v,
                 "layers that reuse another layer's top-k are not modelled")
        # DeepSeek-V3's multi-token-prediction layers, which transformers does not build:
        # counted apart (ModelSpec.mtp_layers)
        out |= {"index_heads": c.t("index_n_heads"), "index_head_dim": c.t("index_head_dim"),
                "index_topk": c.t("index_topk"),
                "mtp_layers": c.t("num_nextn_predict_layers", 0)}
        c.notes.append("DSA's indexer runs under torch.no_grad in transformers 5.23: its "
                       "parameters are counted, but training gives them no gradient")
    if r.idle_cross[0]:
        key, default = r.idle_cross
        listed = c.data.get(key)
        if listed is None:
            listed = list(default)
        if not isinstance(listed, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in listed):
            raise SpecError(key, "a list of layer indices", listed, source=c.where)
        idle = len({i for i in listed if 0 <= i < L})  # MllamaTextModel: idx in the list
        if idle == L:
            raise SpecError(key, f"fewer than num_hidden_layers={L} layers (a text-only "
                            "forward needs self-attention layers)", listed, source=c.where)
        out |= {"n_layers": L - idle, "idle_cross_layers": idle,
                "extra_token_rows": r.extra_rows}
    if r.moe is not None:
        out |= _generic_moe(c, r.moe, L)
        if r.linear_router:
            out["peft_moe"] = "linear_router"
    if r.softcap:
        out["logit_softcapping"] = _softcap(c, r.softcap)
    if r.attn_softcap:
        out["attn_softcapping"] = _softcap(c, r.attn_softcap, "attn_logit_softcapping")
    if r.fp32_math:
        out |= {"ffn_act_fp32": True, "softcap_fp32": True}
    if r.sliding_every and L >= 1:  # (no layers: the spec names num_hidden_layers)
        types = c.data.get("layer_types")
        if types is None:  # BeamConfig: every sliding_every-th layer full, and the last
            types = ["sliding_attention" if (i + 1) % r.sliding_every else "full_attention"
                     for i in range(L)]
            types[-1] = "full_attention"
        layers = _layer_attention(_Window(c.data | {"layer_types": types}, c.where,
                                          {"sliding_window": c.t("sliding_window",
                                                                 r.window_default)}),
                                  L, None, None)
        if r.full_nope and "layer_attention" in layers:  # full layers run without RoPE
            layers["layer_attention"] = layers["layer_attention"].replace("F", "N")
        elif r.full_nope:
            layers = {"layer_attention": f"{L}N"}
        out |= layers
    elif r.chunked:
        out |= _chunked_layers(c, L)
    elif r.window and c.get(r.window, None) and L >= 1:
        out |= _layer_attention(c, L, [True] * L, None)
    elif r.ssm is not None:
        out |= _ssm_layers(c, r.ssm, kinds, out)
    elif "layer_types" in c.data:
        out |= _layer_attention(c, L, None, None)
    return out


def _ssm_layers(c: Config, s: Ssm, kinds: list[tuple[str, str]],
                out: dict[str, Any]) -> dict[str, Any]:
    """The mixer's fields and the per-layer patterns of a recurrent or hybrid model."""
    mixers = [k[0] for k in kinds]
    if any(k[1] for k in kinds):  # the config names each layer's FFN (Nemotron-H)
        ffns = [k[1] for k in kinds]
    elif out.get("layer_ffn"):
        from transformer_calc.plan import parse_pattern

        ffns = list(parse_pattern(out["layer_ffn"], "DEX", len(kinds), "layer_ffn"))
    else:
        ffns = ["E" if out.get("n_experts") else "D" if out["d_ff"] else "X"] * len(kinds)
    extra: dict[str, Any] = {"layer_attention": "", "layer_ffn": ""}
    if "M" in mixers or "P" in mixers:
        extra |= _ssm(c, s, out["d_model"])
    if len(set(mixers)) > 1 or mixers[0] != ("M" if "M" in mixers else "F"):
        extra["layer_attention"] = _runs(mixers)
    if "E" not in ffns:  # the config's expert keys build nothing (a hybrid without MoE layers)
        extra |= {"n_experts": 0, "top_k": 0, "d_ff_expert": None, "router_bias": False,
                  "n_shared_experts": 0, "d_ff_shared": None, "shared_expert_gate": False}
    if "D" not in ffns and not out.get("d_ff"):
        extra["d_ff"] = 0
    default = "E" if "E" in ffns and len(set(ffns)) == 1 else "X" if set(ffns) == {"X"} else "D"
    if len(set(ffns)) > 1 or ffns[0] != default:
        extra["layer_ffn"] = _runs(ffns)
    if set(ffns) == {"X"}:
        extra["d_ff"] = 0
    if "S" in mixers:
        extra["sliding_window"] = c.t("sliding_window", s.window)
    if not set(mixers) & set("FSP"):
        extra |= {"n_heads": 0, "n_kv_heads": None, "d_head": None}
    return extra


def _chunked_layers(c: Config, L: int) -> dict[str, Any]:
    """Llama4TextConfig: a layer with RoPE attends within chunks of attention_chunk_size, a
    NoPE layer (no_rope_layers[i] == 0; by default every no_rope_layer_interval-th) to every
    key; layer_types, when given, says the same per layer."""
    every = c.t("no_rope_layer_interval", 4)
    rope = c.data.get("no_rope_layers") or [int((i + 1) % every != 0) for i in range(L)]
    types = c.data.get("layer_types") or ["chunked_attention" if r else "full_attention"
                                          for r in rope]
    if not isinstance(types, list) or len(types) != L or any(
            t not in ("chunked_attention", "full_attention") for t in types):
        raise SpecError("layer_types", f"a list of {L} of chunked_attention, full_attention",
                        types, source=c.where)
    letters = ["C" if t == "chunked_attention" else "N" for t in types]
    chunk = c.t("attention_chunk_size")
    if not chunk:  # attention_chunk_size null: the "chunked" layers see every key
        letters = ["F" if x == "C" else x for x in letters]
    return {"layer_attention": _runs(letters)} | ({"attention_chunk": chunk} if chunk else {})


def _top_k(c: Config, m: Moe) -> int:
    k = next((c.t(key) for key in m.top_k if c.t(key) is not None), None)
    if k is None and m.top_k_in_forward:
        return 0  # (_generic_moe says why the forward cannot run)
    if k is None:
        raise SpecError(m.top_k[0], "an integer >= 1 (experts per token; this config class "
                        "leaves it null)", None, source=c.where)
    return k  # type: ignore[no-any-return]


def _generic_moe(c: Config, m: Moe, L: int) -> dict[str, Any]:
    X = next((c.t(k) for k in m.experts if c.t(k) is not None), None)
    if not X:
        return {}
    first = c.t(m.first_dense, 0) if m.first_dense else 0
    step = c.t(m.step, 1) if m.step else 1
    dense = c.t(m.mlp_only, list(m.mlp_only_default)) if m.mlp_only else []
    if not isinstance(dense, list) or any(type(i) is not int for i in dense):
        raise SpecError(m.mlp_only, "a list of layer indices", dense, source=c.where)
    ffn = ["E" if i >= first and i not in dense and (i + 1) % step == 0 else "D"
           for i in range(L)]
    if m.span[0]:
        # ERNIE-4.5: experts from moe_layer_start_index to moe_layer_end_index (inclusive),
        # every moe_layer_interval-th layer (Ernie4_5_MoeDecoderLayer)
        lo, hi, every = c.t(m.span[0], 0), c.t(m.span[1], L - 1), c.t(m.span[2], 1)
        hi = L - 1 if hi < 0 else hi
        ffn = ["E" if lo <= i <= hi and (i - lo) % every == 0 else "D" for i in range(L)]
    if m.layer_list and c.data.get(m.layer_list) is not None:
        moe = c.data[m.layer_list]
        if not isinstance(moe, list) or any(type(i) is not int for i in moe):
            raise SpecError(m.layer_list, "a list of layer indices", moe, source=c.where)
        ffn = ["E" if i in moe else "D" for i in range(L)]
    if m.period[0]:
        every, offset = c.t(m.period[0], 1), c.t(m.period[1], 0)
        ffn = ["E" if X > 1 and i % every == offset else "D" for i in range(L)]
    if m.layer_types:
        kinds = c.data.get(m.layer_types)
        if kinds is None:  # the config class derives it from first_k_dense_replace
            n = min(first if m.first_dense else m.dense_first, L)
            kinds = ["dense"] * n + ["sparse"] * (L - n)
        if not isinstance(kinds, list) or len(kinds) != L or any(
                k not in ("dense", "sparse") for k in kinds):
            raise SpecError(m.layer_types, f"a list of {L} of dense, sparse", kinds,
                            source=c.where)
        ffn = ["E" if k == "sparse" else "D" for k in kinds]
    if "E" not in ffn:
        return {}
    Fe = c.t(m.expert_ff) if m.expert_ff else c.t("intermediate_size")
    S = c.t(m.shared, 0) if isinstance(m.shared, str) else m.shared
    k = _top_k(c, m)
    if m.routes and k != min(m.routes, X):
        c.notes.append(f"num_experts_per_tok {k} is not read: the class routes every token to "
                       f"{min(m.routes, X)} experts")
        k = min(m.routes, X)
    out: dict[str, Any] = {
        "n_experts": X, "top_k": k,
        "d_ff_expert": Fe, "router_bias": m.router_bias}
    if m.router_topk:
        out["router_topk"] = _router_topk(c, m.router_topk)
    if not k:
        out["unrunnable"] = str(SpecError(
            m.top_k[0], "an integer >= 1 to count FLOPs and memory (the config class leaves "
            "it null: transformers builds the model, so its parameters are counted, but the "
            "router reads it in the forward, which cannot run without it)", None,
            source=c.where))
    if m.shared_ff and c.t(m.shared_ff) is not None and not (m.shared_absent_at_zero
                                                              and c.t(m.shared_ff) == 0):
        # one shared MLP of this width (Qwen2-MoE; its gate exists even at width 0), or S of
        # width shared_ff / S
        S = S or 1
        out |= {"n_shared_experts": S, "d_ff_shared": c.t(m.shared_ff) // S,
                "shared_expert_gate": m.shared_gate}
    elif S:
        out["n_shared_experts"] = S
    if "D" in ffn:
        out["layer_ffn"] = _runs(ffn)
    return out


def _router_topk(c: Config, kind: str) -> str:
    """spec.router_topk: MixtralTopKRouter always renormalises; PhimoeTopKRouter samples
    two experts (sparsemixer); Qwen2MoeTopKRouter, Qwen3MoeTopKRouter and OlmoeTopKRouter
    cast to the logits' dtype, renormalising with norm_topk_prob (their configs' default:
    false; Qwen3-Next's: true, "qwen_renorm"; Qwen3.5-MoE's router always does,
    "renorm_cast"); DeepSeek-V3's sigmoid router keeps fp32."""
    if kind in ("renorm", "sparsemixer"):  # PhiMoE's sparsemixer: two experts, sampled
        return kind
    if kind == "deepseek":
        # DeepseekV3TopkRouter (V3.2's, GLM-MoE-DSA's): the gathered sigmoid scores (fp32)
        # divided by their sum in place with norm_topk_prob (their configs' default: true);
        # without it none ("none": the op graph leaves the router to the per-tensor rules)
        return "renorm" if c.get("norm_topk_prob", True) else "none"
    if kind == "granitemoe_swa":  # GraniteMoeSWATopKRouter: topk of the fp32 logits, softmax
        return "topk_softmax"
    if kind == "flint":  # FlintTopKRouter: topk of the fp32 sigmoid scores, renormalised
        # (a new tensor) with norm_topk_prob (FlintConfig's default: true)
        return "topk_sigmoid_renorm" if c.get("norm_topk_prob", True) else "topk_sigmoid"
    if kind == "cohere2_moe":  # Cohere2MoeTopKRouter: softmax over the top-k logits (fp32),
        # cast to the input's dtype; its sigmoid selection is left to the per-tensor rules
        return "topk_softmax" if c.get("expert_selection_fn", "softmax") == "softmax" \
            else "none"
    if kind == "kolibri1":  # Kolibri1TopKRouter: sigmoid of the top-k fp32 logits,
        # renormalised (a new tensor) with norm_topk_prob (Kolibri1Config's default: false)
        return "topk_sigmoid_renorm" if c.get("norm_topk_prob", False) else "topk_sigmoid"
    if kind == "dots1":  # Dots1TopkRouter: DeepSeek-V3's, norm_topk_prob false by default
        return "renorm" if c.get("norm_topk_prob", False) else "none"
    if kind == "renorm_cast":  # Qwen3_5MoeTopKRouter: always renormalised, then cast
        return kind
    # Qwen2-MoE's router (Qwen3NextTopKRouter too: its config's norm_topk_prob true by
    # default)
    return "renorm_cast" if c.get("norm_topk_prob", kind == "qwen_renorm") else "cast"


# GPT-2's spelling of the standard keys (GPTBigCode, OpenAI GPT, GPT-J, CodeGen)
_GPT_KEYS = (("hidden_size", "n_embd"), ("num_hidden_layers", "n_layer"),
             ("num_attention_heads", "n_head"), ("intermediate_size", "n_inner"),
             ("max_position_embeddings", "n_positions"))

# One record per model_type that is a Llama-style decoder; checked against transformers 5.23
# (tests/test_registry.py pins each type's default total).
GENERIC: dict[str, Layout] = {
    "llama": Layout("LlamaForCausalLM"),
    # Mistral and Mixtral: no bias keys (MistralAttention / MistralMLP have none)
    "mistral": Layout("MistralForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=False),
    "mixtral": Layout("MixtralForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=False,
                      moe=Moe(experts=("num_local_experts",), expert_ff="",
                              router_topk="renorm")),
    # Qwen2Attention: q/k/v carry a bias, o_proj does not
    "qwen2": Layout("Qwen2ForCausalLM", qkv_bias=True, o_bias=False, mlp_bias=False),
    # OLMo-2: q_norm / k_norm over the whole projection; norms after attention and FFN only
    "olmo2": Layout("Olmo2ForCausalLM", mlp_bias=False, norms="post", qk_norm="width"),
    # Phi3: fused qkv_proj and gate_up_proj, no biases (same count as separate matrices)
    "phi3": Layout("Phi3ForCausalLM", fused_gate_up=True, qkv_bias=False, o_bias=False,
                   mlp_bias=False, fused_qkv=True,
                   dropout=("resid_pdrop", "embd_pdrop", "attention_dropout")),
    "cwm": Layout("CwmForCausalLM"),
    "ernie4_5": Layout("Ernie4_5ForCausalLM", qkv_bias="use_bias", o_bias="use_bias",
                       mlp_bias="use_bias"),
    "granite": Layout("GraniteForCausalLM"),
    # HeliumAttention / HeliumMLP: no biases, whatever attention_bias and mlp_bias say
    "helium": Layout("HeliumForCausalLM", o_bias=False,
                     full_width="HeliumAttention's o_proj takes hidden_size inputs"),
    "internlm3": Layout("LlamaForCausalLM"),
    "iquestcoder": Layout("LlamaForCausalLM"),
    "ministral3": Layout("Ministral3ForCausalLM", qkv_bias=False, o_bias=False,
                         mlp_bias=False),
    "smollm3": Layout("SmolLM3ForCausalLM"),
    # SeedOssAttention and SeedOssMLP: residual_dropout over their outputs
    "seed_oss": Layout("SeedOssForCausalLM", o_bias="attention_out_bias",
                       dropout=("attention_dropout", "residual_dropout")),
    # GLM's RoPE: the first partial_rotary_factor of each head (GlmConfig's default 0.5)
    "glm": Layout("GlmForCausalLM", fused_gate_up=True, o_bias=False,
                  rotary=("partial_rotary_factor", 0.5)),
    "glm4": Layout("Glm4ForCausalLM", fused_gate_up=True, o_bias=False, norms="sandwich",
                   rotary=("partial_rotary_factor", 0.5)),
    "hyperclovax": Layout("HyperCLOVAXForCausalLM", norms="sandwich"),
    "olmo3": Layout("Olmo3ForCausalLM", mlp_bias=False, norms="post", qk_norm="width"),
    # OLMo Hybrid: OLMo 3's attention layers (QK-norm over the width, norms after attention
    # and FFN) every 4th layer; the others Gated DeltaNet (Qwen3-Next's kernel) with separate
    # q, k, v, a, b and g projections and pre-norms. Derived defaults: _olmo_hybrid
    "olmo_hybrid": Layout("OlmoHybridForCausalLM", mlp_bias=False, norms="post",
                          qk_norm="width",
                          ssm=Ssm("gated_deltanet", layers="layer_types", expand="",
                                  state="linear_key_head_dim", heads="linear_num_value_heads",
                                  head_dim="linear_value_head_dim",
                                  groups="linear_num_key_heads", conv="linear_conv_kernel_dim",
                                  conv_bias=False, bias=False, chunk=64, in_projs=6)),
    "cohere": Layout("CohereForCausalLM", o_bias="attention_bias", mlp_bias=False,
                     norm="layernorm_nobias", norms="parallel", qk_norm="width",
                     qk_norm_key="use_qk_norm"),
    "cohere2": Layout("Cohere2ForCausalLM", mlp_bias=False, norm="layernorm_nobias",
                      norms="parallel", qk_norm="width", qk_norm_key="use_qk_norm"),
    "starcoder2": Layout("Starcoder2ForCausalLM", qkv_bias="use_bias", o_bias="use_bias",
                         mlp_bias="use_bias", ffn="plain", norm="layernorm",
                         dropout=("attention_dropout", "residual_dropout",
                                  "embedding_dropout"), window="sliding_window"),
    "qwen2_moe": Layout("Qwen2MoeForCausalLM", qkv_bias="qkv_bias", o_bias=False,
                        mlp_bias=False,
                        moe=Moe(shared_ff="shared_expert_intermediate_size", shared_gate=True,
                                step="decoder_sparse_step", mlp_only="mlp_only_layers",
                                router_topk="qwen")),
    "granitemoe": Layout("GraniteMoeForCausalLM", mlp_bias=False,
                         moe=Moe(expert_ff="", router_topk="granitemoe_swa")),
    "olmoe": Layout("OlmoeForCausalLM", mlp_bias=False, qk_norm="width",
                    moe=Moe(expert_ff="", router_topk="qwen")),
    "flex_olmo": Layout("FlexOlmoForCausalLM", mlp_bias=False, norms="post", qk_norm="width",
                        moe=Moe(expert_ff="", router_topk="qwen")),
    "olmo": Layout("OlmoForCausalLM", mlp_bias=False, norm="layernorm_noaffine"),
    # NanoChatModel: its weightless norm also runs on the embeddings, a weightless RMS norm
    # per head on Q and K (NanoChatRMSNorm), the logits soft-capped (final_logit_softcapping)
    "nanochat": Layout("NanoChatForCausalLM", mlp_bias=False, ffn="plain",
                       norm="rmsnorm_noaffine", embedding_norm=True, qk_norm="l2",
                       softcap=15.0),
    "arcee": Layout("ArceeForCausalLM", ffn="plain"),
    # VaultGemma: Gemma 2's soft-capping of the attention scores and the logits
    "vaultgemma": Layout("VaultGemmaForCausalLM", mlp_bias=False, act="hidden_activation",
                         softcap=30.0, attn_softcap=50.0),
    "exaone4": Layout("Exaone4ForCausalLM", mlp_bias=False, norms="post", qk_norm="head"),
    "stablelm": Layout("StableLmForCausalLM", qkv_bias="use_qkv_bias", o_bias=False,
                       mlp_bias=False, norm="layernorm", norms="parallel_key",
                       rotary=("partial_rotary_factor", 0.25),
                       refuse=(("qk_layernorm", "per-head LayerNorms are not modelled"),)),
    # PhimoeSparseMoeBlock: sparsemixer picks the best expert, then the best of the rest:
    # two per token whatever num_experts_per_tok says
    "phimoe": Layout("PhimoeForCausalLM", linear_router=True, mlp_bias=False, norm="layernorm",
                     moe=Moe(expert_ff="", routes=2, router_topk="sparsemixer")),
    "granite_swa": Layout("GraniteSWAForCausalLM", sinks=True),
    "granitemoe_swa": Layout("GraniteMoeSWAForCausalLM", fused_gate_up=True, mlp_bias=False,
                             sinks=True,
                             moe=Moe(expert_ff="", shared_ff="shared_intermediate_size",
                                     shared_absent_at_zero=True,
                                     router_topk="granitemoe_swa")),
    "granitemoeshared": Layout("GraniteMoeSharedForCausalLM", fused_gate_up=True, mlp_bias=False,
                               moe=Moe(expert_ff="", shared_ff="shared_intermediate_size",
                                       shared_absent_at_zero=True,
                                       router_topk="granitemoe_swa")),
    # MellumTopKRouter: Qwen's, norm_topk_prob true by default; mlp_layer_types' dense
    # layers are a MellumMLP of intermediate_size
    "mellum": Layout("MellumForCausalLM", mlp_bias=False, qk_norm="head",
                     moe=Moe(layer_types="mlp_layer_types", router_topk="qwen_renorm")),
    # (its legacy rotary_dim: _minimax_m2)
    "minimax_m2": Layout("MiniMaxM2ForCausalLM", mlp_bias=False, qk_norm="width", moe=Moe(),
                         rotary=("partial_rotary_factor", 1.0)),
    "solar_open": Layout("SolarOpenForCausalLM", o_bias=False, mlp_bias=False,
                         moe=Moe(shared="n_shared_experts", first_dense="first_k_dense_replace",
                                 router_topk="deepseek")),
    # Hunyuan 3: QK-norm per head, a dense first layer then MoE with a shared expert
    "hy_v3": Layout("HYV3ForCausalLM", qk_norm="head",
                    needs=(("num_shared_experts", "HYV3MLP falls back to intermediate_size "
                            "for a zero-width shared expert, which is not modelled"),),
                    refuse=(("mlp_bias", "biases on the dense and shared MLPs but not on the "
                             "experts are not modelled"),),
                    moe=Moe(shared="num_shared_experts", layer_types="mlp_layer_types",
                            dense_first=1)),
    # GLM-4.5 (Glm4MoeConfig: partial_rotary_factor 0.5 unless the file says)
    "glm4_moe": Layout("Glm4MoeForCausalLM", o_bias=False, mlp_bias=False,
                       qk_norm="head", qk_norm_key="use_qk_norm",
                       rotary=("partial_rotary_factor", 0.5),
                       moe=Moe(shared="n_shared_experts", first_dense="first_k_dense_replace",
                               router_topk="deepseek")),
    # K-EXAONE: sliding layers and full ones without RoPE (_nope_full_layers)
    "exaone_moe": Layout("ExaoneMoeForCausalLM", mlp_bias=False, qk_norm="head",
                         moe=Moe(shared="num_shared_experts",
                                 first_dense="first_k_dense_replace", router_topk="deepseek")),
    "jais2": Layout("Jais2ForCausalLM", ffn="plain", norm="layernorm"),
    # dots.llm1 (Dots1ForCausalLM): Qwen3's attention (QK-norm per head, biases on all four
    # projections by attention_bias) and DeepSeek-V3's MoE without latent attention: dense
    # layers before first_k_dense_replace, then routed experts and one shared MLP of
    # n_shared_experts · moe_intermediate_size. Checks and sliding layers: _dots1
    "dots1": Layout("Dots1ForCausalLM", mlp_bias=False, qk_norm="head",
                    moe=Moe(shared="n_shared_experts", first_dense="first_k_dense_replace",
                            router_topk="dots1")),
    # Hunyuan (HunYuanDenseV1ForCausalLM, HunYuanMoEV1ForCausalLM): Llama with an RMSNorm over
    # each query and key head (query_layernorm, key_layernorm); the MoE class routes every layer
    # to num_experts experts of intermediate_size beside a shared MLP of the same size. Head
    # size and per-layer lists: _hunyuan
    "hunyuan_v1_dense": Layout("HunYuanDenseV1ForCausalLM", mlp_bias=False, qk_norm="head"),
    "hunyuan_v1_moe": Layout("HunYuanMoEV1ForCausalLM", mlp_bias=False, qk_norm="head",
                             moe=Moe(top_k=("num_experts_per_tok", "moe_topk"), expert_ff="",
                                     shared=1)),
    # Nemotron (NemotronForCausalLM: Nemotron-4, Minitron): a plain MLP (up, down; squared ReLU
    # by default) and LayerNorm1P, a LayerNorm with weight and bias applied as weight + 1
    "nemotron": Layout("NemotronForCausalLM", ffn="plain", norm="layernorm"),
    # Ministral (MinistralForCausalLM): Mistral's layers, sliding per layer_types (which
    # MinistralConfig fills with sliding layers whenever sliding_window is set): _ministral
    "ministral": Layout("MinistralForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=False),
    "persimmon": Layout("PersimmonForCausalLM", qkv_bias=True, o_bias=True, mlp_bias=True,
                        ffn="plain", norm="layernorm", qk_norm="head",
                        qk_norm_key="qk_layernorm", fused_qkv=True,
                        rotary=("partial_rotary_factor", 0.5)),
    "biogpt": Layout("BioGptForCausalLM", qkv_bias=True, o_bias=True, mlp_bias=True,
                     ffn="plain", norm="layernorm", position="learned", position_offset=2),
    "xglm": Layout("XGLMForCausalLM", qkv_bias=True, o_bias=True, mlp_bias=True, ffn="plain",
                   norm="layernorm", position="sinusoidal", act="activation_function",
                   keys=(("hidden_size", "d_model"), ("num_hidden_layers", "num_layers"),
                         ("num_attention_heads", "attention_heads"),
                         ("intermediate_size", "ffn_dim"))),
    "gpt_neo": Layout("GPTNeoForCausalLM", qkv_bias=False, o_bias=True, mlp_bias=True,
                      ffn="plain", norm="layernorm", position="learned",
                      act="activation_function", ffn_default_4x=True,
                      keys=(("num_hidden_layers", "num_layers"),
                            ("num_attention_heads", "num_heads"))),
    "gpt_bigcode": Layout("GPTBigCodeForCausalLM", qkv_bias=True, o_bias=True, mlp_bias=True,
                          ffn="plain", norm="layernorm", position="learned",
                          act="activation_function", ffn_default_4x=True, fused_qkv=True,
                          kv_from="multi_query", keys=_GPT_KEYS),
    "openai-gpt": Layout("OpenAIGPTLMHeadModel", qkv_bias=True, o_bias=True, mlp_bias=True,
                         ffn="plain", norm="layernorm", norms="post", position="learned",
                         act="afn", act_names=(("gelu", "gelu_new"),), final_norm=False,
                         fused_qkv=True, ffn_default_4x=True,
                         keys=_GPT_KEYS),
    "gptj": Layout("GPTJForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=True,
                   ffn="plain", norm="layernorm", norms="parallel", lm_head_bias=True,
                   act="activation_function", ffn_default_4x=True, keys=_GPT_KEYS,
                   rotary_dims="rotary_dim"),
    "codegen": Layout("CodeGenForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=True,
                      ffn="plain", norm="layernorm", norms="parallel", lm_head_bias=True,
                      act="activation_function", ffn_default_4x=True, fused_qkv=True,
                      keys=_GPT_KEYS, rotary_dims="rotary_dim"),
    "bloom": Layout("BloomForCausalLM", qkv_bias=True, o_bias=True, mlp_bias=True,
                    ffn="plain", norm="layernorm", position="alibi", embedding_norm=True,
                    fused_qkv=True, act="=gelu_tanh", ffn_default_4x=True,
                    dropout=("attention_dropout", "hidden_dropout"),
                    keys=(("num_hidden_layers", "n_layer"),
                          ("num_attention_heads", "n_head"))),
    "mpt": Layout("MptForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=False,
                  ffn="plain", norm="layernorm_nobias", position="alibi", fused_qkv=True,
                  # MptMLP is 4 · d_model wide whatever expansion_ratio says (transformers
                  # 5.23's modeling_mpt.py builds Linear(hidden_size, 4 * hidden_size))
                  act="=gelu", ffn_default_4x=True,
                  keys=(("hidden_size", "d_model"), ("num_hidden_layers", "n_layers"),
                        ("num_attention_heads", "n_heads"),
                        ("max_position_embeddings", "max_seq_len"))),
    "deepseek_v2": Layout("DeepseekV2ForCausalLM", mlp_bias=False, mla=True,
                          refuse=(("mlp_bias", "the shared experts' biases (kept even at zero "
                                   "width) are not modelled"),),
                          moe=Moe(shared="n_shared_experts",
                                  first_dense="first_k_dense_replace",
                                  top_k_in_forward=True)),
    # DeepSeek-V3.2 and GLM-5: DeepSeek-V3's layers with DSA's lightning indexer in each
    "deepseek_v32": Layout("DeepseekV32ForCausalLM", mlp_bias=False, mla=True, dsa=True,
                           refuse=(("mlp_bias", "the shared experts' biases are not "
                                    "modelled"),),
                           moe=Moe(shared="n_shared_experts", layer_types="mlp_layer_types",
                                   first_dense="first_k_dense_replace",
                                   router_topk="deepseek")),
    "glm_moe_dsa": Layout("GlmMoeDsaForCausalLM", mlp_bias=False, mla=True, dsa=True,
                          refuse=(("mlp_bias", "the shared experts' biases are not "
                                   "modelled"),),
                          moe=Moe(shared="n_shared_experts", layer_types="mlp_layer_types",
                                  first_dense="first_k_dense_replace",
                                  router_topk="deepseek")),
    "minicpm3": Layout("MiniCPM3ForCausalLM", mla=True),
    # Apertus: a plain up/down MLP through xIELU (two trainable scalars per layer), per-head
    # QK-norm
    "apertus": Layout("ApertusForCausalLM", mlp_bias=False, ffn="plain", qk_norm="head"),
    # GPT-NeoX-Japanese: sequential pre-norm LayerNorm blocks, bias-free fused QKV, dense and
    # MLP (d_ff = intermediate_multiple_size · hidden_size); only the last layer's attention
    # output has a bias; its residual dropout (hidden_dropout) apart from the attention's
    "gpt_neox_japanese": Layout("GPTNeoXJapaneseForCausalLM", qkv_bias=False, o_bias=False,
                                mlp_bias=False, ffn="plain", norm="layernorm", fused_qkv=True,
                                ffn_ratio="intermediate_multiple_size", o_bias_last=True,
                                rotary=("rotary_pct", 1.0),
                                dropout=("hidden_dropout", "attention_dropout")),
    "youtu": Layout("YoutuForCausalLM", mlp_bias=False, mla=True),
    "glm4_moe_lite": Layout("Glm4MoeLiteForCausalLM", mlp_bias=False, mla=True,
                            moe=Moe(shared="n_shared_experts", layer_types="mlp_layer_types",
                                    dense_first=1, router_topk="deepseek")),
    "aria_text": Layout("AriaTextForCausalLM", mlp_bias=False,
                        refuse=(("mlp_bias", "biases on the shared experts alone are not "
                                 "modelled"),),
                        # AriaTextTopKRouter: a softmax over the top-k logits
                        moe=Moe(experts=("moe_num_experts",), top_k=("moe_topk",),
                                expert_ff="", shared="moe_num_shared_experts",
                                router_topk="granitemoe_swa")),
    # Kolibri1: sandwich norms, sliding layers and full ones without RoPE
    # (_nope_full_layers), the sigmoid of the top-k logits renormalised with norm_topk_prob
    "kolibri1": Layout("Kolibri1ForCausalLM", mlp_bias=False, norms="sandwich",
                       qk_norm="head", moe=Moe(shared_ff="shared_expert_intermediate_size",
                                               router_topk="kolibri1")),
    # MiniMax-M3: gpt-oss's clamped SwiGLU in every MLP (swiglu_alpha, swiglu_limit); its
    # text RoPE rotates int(head_dim · rope_parameters' partial_rotary_factor) of each head
    # (rotary_dim is not read)
    "minimax_m3_vl_text": Layout("MiniMaxM3VLForCausalLM", fused_gate_up=True, mlp_bias=False,
                                 qk_norm="head", act="=swiglu_oss",
                                 rotary=("partial_rotary_factor", 1.0),
                                 dense_ff="dense_intermediate_size",
                                 moe=Moe(expert_ff="intermediate_size",
                                         shared_ff="shared_intermediate_size",
                                         layer_types="mlp_layer_types")),
    # EuroBertForMaskedLM: its lm_head carries a bias when mlp_bias is set
    "eurobert": Layout("EuroBertForMaskedLM", arch="encoder", lm_head_bias="mlp_bias"),
    "llama4_text": Layout("Llama4ForCausalLM", linear_router=True, mlp_bias=False,
                          dense_ff="intermediate_size_mlp", qk_norm="l2",
                          qk_norm_key="use_qk_norm", chunked=True,
                          moe=Moe(experts=("num_local_experts",), expert_ff="intermediate_size",
                                  shared=1, step="interleave_moe_layer_step",
                                  layer_list="moe_layers")),
    "ctrl": Layout("CTRLLMHeadModel", qkv_bias=True, o_bias=True, mlp_bias=True, ffn="plain",
                   norm="layernorm", position="sinusoidal", lm_head_bias=True, act="=relu",
                   keys=(("hidden_size", "n_embd"), ("num_hidden_layers", "n_layer"),
                         ("num_attention_heads", "n_head"), ("intermediate_size", "dff"),
                         ("max_position_embeddings", "n_positions"))),
    **{t: Layout(cls, qkv_bias=True, o_bias=True, mlp_bias=True, ffn="plain",
                 norm="layernorm", norms="post", position="learned", embedding_norm=True,
                 final_norm=False, lm_head_bias=True, act="=gelu", ffn_default_4x=True,
                 arch="encoder", lang_emb=True,
                 refuse=(("sinusoidal_embeddings", "XLM's frozen sinusoidal table is not "
                          "modelled"),),
                 keys=(("hidden_size", "emb_dim"), ("num_hidden_layers", "n_layers"),
                       ("num_attention_heads", "n_heads")),
                 # FlaubertModel's pre_norm and layerdrop (XLMModel has neither)
                 pre_norm_key=keys, layerdrop_key=keys and "layerdrop")
       for t, cls, keys in (("xlm", "XLMWithLMHeadModel", ""),
                            ("flaubert", "FlaubertWithLMHeadModel", "pre_norm"))},
    "flint": Layout("FlintForCausalLM", mlp_bias=False, qk_norm="head", sinks=True,
                    moe=Moe(shared_ff="shared_expert_intermediate_size",
                            mlp_only="mlp_only_layers", mlp_only_default=(0, 1),
                            step="decoder_sparse_step", router_topk="flint")),
    "ernie4_5_moe": Layout("Ernie4_5_MoeForCausalLM", qkv_bias=False, o_bias=False,
                           mlp_bias=False,
                           refuse=(("use_bias", "biases on attention and the dense and shared "
                                    "FFNs but not the experts are not modelled"),),
                           moe=Moe(experts=("moe_num_experts",), top_k=("moe_k",),
                                   # moe_statics.e_score_correction_bias is frozen
                                   # (requires_grad=False): not trainable, not counted
                                   shared="moe_num_shared_experts",
                                   span=("moe_layer_start_index", "moe_layer_end_index",
                                         "moe_layer_interval"))),
    "afmoe": Layout("AfmoeForCausalLM", gate_proj=True, mlp_bias=False, norms="sandwich",
                    qk_norm="head",
                    gate=("width", "none"),
                    moe=Moe(shared="num_shared_experts", first_dense="num_dense_layers")),
    # Laguna: QK-norm, a per-head output gate (g_proj), dense then MoE with a shared expert
    "laguna": Layout("LagunaForCausalLM", mlp_bias=False, qk_norm="head", gate=("head", "none"),
                     refuse=(("num_attention_heads_per_layer", "a head count per layer is not "
                              "modelled"),),
                     needs=(("gating", "without it there is no output gate; not modelled"),),
                     moe=Moe(shared_ff="shared_expert_intermediate_size",
                             layer_types="mlp_layer_types", dense_first=1)),
    # -- recurrent and hybrid models: a mixer record (Ssm) on a Llama-style layout
    **{t: Layout(cls, qkv_bias=False, o_bias=False, mlp_bias=False, position="none",
                 ssm=Ssm("mamba", inner="intermediate_size"), dropout=())
       # FalconMambaMixer normalises dt, B and C with parameter-free RMS norms: same count
       for t, cls in (("mamba", "MambaForCausalLM"), ("falcon_mamba", "FalconMambaForCausalLM"))},
    "mamba2": Layout("Mamba2ForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=False,
                     position="none", ssm=Ssm("mamba2"), dropout=()),
    # NemotronHBlock: one norm and one mixer per layer (Mamba-2, attention without RoPE, a
    # squared-ReLU MLP, or MoE with non-gated experts and one shared MLP)
    "nemotron_h": Layout("NemotronHForCausalLM", qkv_bias=False, o_bias=False, ffn="plain",
                         act="mlp_hidden_act", position="none",
                         untied=True,
                         refuse=(("moe_latent_size", "the experts' latent projections are "
                                  "not modelled"),
                                 ("mlp_bias", "biases on the MLPs and the shared expert but "
                                  "not the routed experts are not modelled"),
                                 ),
                         unbuilt=(("num_nextn_predict_layers", "multi-token-prediction layers "
                                   "(mtp.*, which NemotronHForCausalLM ignores on loading)"),),
                         ssm=Ssm("mamba2", layers="nemotron", expand="",
                                 state="ssm_state_size", heads="mamba_num_heads",
                                 head_dim="mamba_head_dim"),
                         moe=Moe(experts=("n_routed_experts",), shared=1,
                                 shared_ff="moe_shared_expert_intermediate_size",
                                 router_topk="deepseek")),
    **{t: Layout(cls, mlp_bias="mlp_bias" if t == "bamba" else False,
                 ff_key="" if t == "bamba" else "shared_intermediate_size",
                 ssm=Ssm("mamba2", layers="bamba" if t == "bamba" else "layer_types_all",
                         expand="mamba_expand", state="mamba_d_state", heads="mamba_n_heads",
                         head_dim="mamba_d_head", groups="mamba_n_groups", conv="mamba_d_conv",
                         conv_bias="mamba_conv_bias", bias="mamba_proj_bias",
                         chunk="mamba_chunk_size"),
                 # GraniteMoeHybrid: experts of intermediate_size and a gated shared MLP of
                 # shared_intermediate_size in every layer (the dense FFN without experts)
                 fused_gate_up=t != "bamba",  # GraniteMoeHybridMLP.input_linear
                 moe=None if t == "bamba" else Moe(
                     experts=("num_local_experts",), expert_ff="intermediate_size",
                     shared_ff="shared_intermediate_size"))
       for t, cls in (("bamba", "BambaForCausalLM"),
                      ("granitemoehybrid", "GraniteMoeHybridForCausalLM"))},
    # Jamba: Mamba-1 mixers with RMSNorms on dt, B and C; attention every attn_layer_period-th
    # layer; experts every expert_layer_period-th
    "jamba": Layout("JambaForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=False,
                    position="none",
                    ssm=Ssm("mamba", layers="jamba", expand="mamba_expand",
                            state="mamba_d_state", conv="mamba_d_conv", dt_rank="mamba_dt_rank",
                            conv_bias="mamba_conv_bias", bias="mamba_proj_bias",
                            dt_norms=True),
                    moe=Moe(experts=("num_experts",), expert_ff="",
                            period=("expert_layer_period", "expert_layer_offset"))),
    # Qwen3-Next / Qwen3.5: Gated DeltaNet in 3 of 4 layers; the others full attention with
    # QK-norm and an output gate (q_proj doubled); torch_chunk_gated_delta_rule's chunk is 64
    # (Qwen3NextConfig's, Qwen3_5TextConfig's partial_rotary_factor: 0.25)
    **{t: Layout(cls, mlp_bias=False, qk_norm="head", gate=("width", "none"), gate_in_q=True,
                 rotary=("partial_rotary_factor", 0.25),
                 refuse=(("attention_bias", "the output gate's half of q_proj's bias is not "
                          "modelled"),),
                 ssm=Ssm("gated_deltanet", layers="layer_types", expand="",
                         state="linear_key_head_dim", heads="linear_num_value_heads",
                         head_dim="linear_value_head_dim", groups="linear_num_key_heads",
                         conv="linear_conv_kernel_dim", conv_bias=False, bias=False, chunk=64,
                         in_projs=in_projs),
                 moe=moe)
       # in_proj_qkvz + in_proj_ba (Qwen3-Next); in_proj_qkv, _z, _b, _a (Qwen3.5)
       for t, cls, moe, in_projs in (
           ("qwen3_next", "Qwen3NextForCausalLM",
            Moe(shared_ff="shared_expert_intermediate_size", shared_gate=True,
                mlp_only="mlp_only_layers", step="decoder_sparse_step",
                router_topk="qwen_renorm"), 2),
           ("qwen3_5_text", "Qwen3_5ForCausalLM", None, 4),
           ("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM",
            Moe(shared_ff="shared_expert_intermediate_size", shared_gate=True,
                router_topk="renorm_cast"), 4))},
    # Falcon-H1: attention and Mamba-2 in parallel in every layer (their outputs summed), then
    # the MLP; muP multipliers scale activations and hold no parameters
    "falcon_h1": Layout("FalconH1ForCausalLM",
                        ssm=Ssm("mamba2", layers="parallel", inner="mamba_d_ssm",
                                out_bias="projectors_bias",
                                expand="mamba_expand", state="mamba_d_state",
                                heads="mamba_n_heads", head_dim="mamba_d_head",
                                groups="mamba_n_groups", conv="mamba_d_conv",
                                conv_bias="mamba_conv_bias", bias="mamba_proj_bias",
                                chunk="mamba_chunk_size", norm="mamba_rms_norm")),
    # MiniMax(-Text-01): lightning (linear) attention in every other layer by default (layer 0
    # full), softmax attention in the rest; MoE FFN in every layer
    "minimax": Layout("MiniMaxForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=False,
                      ssm=Ssm("lightning", layers="layer_types", heads="num_attention_heads",
                              head_dim="head_dim", chunk="block_size", every=2, full_when=1),
                      moe=Moe(experts=("num_local_experts",), expert_ff="")),
    # LFM2: short gated convolutions and attention with QK-norm; the FFN size is adjusted
    # LFM2-MoE (Lfm2MoeForCausalLM): LFM2's convolutions and attention, its first
    # num_dense_layers with a dense FFN of intermediate_size as it stands (no 2/3 rounding),
    # the rest routed experts (the router's expert_bias is a buffer). layer_types: _lfm2
    "lfm2_moe": Layout("Lfm2MoeForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=False,
                       qk_norm="head",
                       ssm=Ssm("short_conv", layers="lfm2", conv="conv_L_cache",
                               conv_bias="conv_bias"),
                       moe=Moe(first_dense="num_dense_layers")),
    "lfm2": Layout("Lfm2ForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=False,
                   qk_norm="head", ffn_adjust="lfm2",
                   ssm=Ssm("short_conv", layers="lfm2", conv="conv_L_cache",
                           conv_bias="conv_bias")),
    # LFM3: LFM2's convolutions and attention, with sliding-window layers, sandwich norms and
    # a sigmoid gate per head on the attention output (g_proj), all switched by the config
    "lfm3": Layout("Lfm3ForCausalLM", mlp_bias=False,
                   qk_norm="head", norms="sandwich", sandwich_key="use_sandwich_norm",
                   gate=("head", "none"), gate_key="use_attention_gate",
                   ssm=Ssm("short_conv", layers="lfm3", conv="conv_L_cache",
                           conv_bias="conv_bias", window=256)),
    # Llama 3.2 Vision's language model (MllamaForCausalLM): Llama's layers, and the
    # cross-attention layers listed in cross_attention_layers, which a forward without image
    # states skips; the token table holds 8 more rows than the head
    "mllama": Layout("MllamaForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=False,
                     idle_cross=("cross_attention_layers", (3, 8, 13, 18, 23, 28, 33, 38)),
                     extra_rows=8, text_config=True, untied=True),
    # DiffLlama: Llama's layers with differential attention (DiffLlamaAttention)
    "diffllama": Layout("DiffLlamaForCausalLM", mlp_bias=False, differential=True,
                        refuse=(("attention_dropout", "DiffLlama refuses attention dropout: "
                                 "its two maps have no defined shared mask"),)),
    # Beam: sandwich norms, QK-norm, a sigmoid gate per channel with a bias per head on the
    # attention output (gate_proj, gate_bias), sliding layers and full layers without RoPE
    # (every sixth and the last), dense first layers then experts with group routing (no
    # parameters), final logits soft-capped at 30
    "beam": Layout("BeamForCausalLM", o_bias="attention_bias", mlp_bias=False,
                   norms="sandwich", qk_norm="head", gate=("width", "head"), gate_proj=True,
                   sliding_every=6, full_nope=True, softcap=30.0, window_default=512,
                   fp32_math=True,
                   moe=Moe(experts=("num_experts",), layer_types="mlp_layer_types",
                           dense_first=3, router_topk="deepseek")),
    # BitNet b1.58: Llama's layers with an RMSNorm over the attention output before o_proj
    # and one over the FFN's inner width before down_proj (BitNetAttention, BitNetMLP: the
    # ternary weights are a quantizer's business; the modelling code holds nn.Linear)
    "bitnet": Layout("BitNetForCausalLM", mlp_bias=False, sub_norms=True,
                     full_width="BitNetAttention's attn_sub_norm is hidden_size wide"),
    "cohere2_moe": Layout("Cohere2MoeForCausalLM", mlp_bias=False, norm="layernorm_nobias",
                          norms="parallel", moe=Moe(expert_ff="", shared="num_shared_experts",
                                                    layer_types="mlp_layer_types",
                                                    router_topk="cohere2_moe")),
}


class Encoder(NamedTuple):
    """A BERT-style encoder counted as its *ForMaskedLM class: learned positions (and token
    types), an embedding norm, post-norm layers, the MLM head (dense + norm + tied decoder +
    bias). ``keys`` renames the config keys where a family spells them its own way."""

    cls: str
    keys: tuple[tuple[str, str], ...] = ()  # (tcalc's standard key, this family's key)
    token_types: bool = True
    type_vocab_sizes: bool = False  # TAPAS: a token-type table per type_vocab_sizes entry
    pooler: bool = False  # the *ForMaskedLM class keeps BERT's pooler (BigBird)
    qkv_bias: bool | str = True  # fixed, or the key that decides (BigBird use_bias)
    position_offset: int = 0  # extra rows in the position table (MRA, YOSO: 2)
    untied: str = ""  # why tie_word_embeddings: false is refused ("": it is counted)
    norm_position: str = "post"  # pre: RoBERTa-PreLayerNorm, XLM-R XL, Megatron-BERT
    final_norm: bool = False  # a norm after the last layer (the pre-norm ones)
    embedding_norm: bool = True
    ffn: str = "plain"  # gated: GTE, NomicBERT
    position: str = "learned"  # rope: GTE, NomicBERT (no table)
    o_bias: bool | str = True
    ffn_in_bias: bool | str = True
    ffn_out_bias: bool | str = True
    # DeBERTa's relative tables: "v2" (position_buckets, norm_rel_ebd, share_att_key) or "v1"
    # (one fused Q/K/V projection with q_bias and v_bias, a table sliced to the sequence)
    deberta: str = ""
    quant_linear: bool = False  # the layers are QuantLinear, not nn.Linear (I-BERT): no LoRA
    head: str = "mlm"  # mlm: dense + norm + decoder + bias; bias: the decoder and its bias
    layout: bool = False  # LayoutLM's 2-D position tables (max_2d_position_embeddings)
    decoder: bool = False  # a causal LM (BertGenerationDecoder): is_decoder is its own setting
    head_dim: bool = False  # the heads' width is head_dim, not hidden_size / heads (NomicBERT)
    relative_bias: bool = False  # an encoder-level relative-position bias table (MPNet)
    # ALBERT, ELECTRA, RemBERT: the key of the embeddings' own width (tables, norm), projected
    # to hidden_size by a biased matrix; the key of the MLM head's width when it is not that
    # one (RemBERT's output_embedding_size); the decoder's bias is its own (mlm_bias)
    factorized: str = ""
    head_width: str = ""
    mlm_bias: str = "bert"
    untied_head: bool = False  # the class ties no decoder (RemBertForMaskedLM)
    always_project: bool = False  # the projection even when the widths agree (ALBERT, RemBERT)
    # RoCBERT: side tables (rows key, width key), concatenated and projected when the key says
    side: tuple[tuple[str, str], ...] = ()
    side_concat: str = ""
    block_sparse: bool = False  # BigBird's attention_type, block_size, num_random_blocks
    # ALBERT: num_hidden_groups sets of inner_group_num layers, shared by the layers
    shared: bool = False
    ffn_dropout: bool = False  # a dropout on the FFN's inner width, before down_proj (GTE)


def _encoder(c: Config, r: Encoder) -> dict[str, Any]:
    name = dict(r.keys)

    def t(key: str, fallback: Any = None) -> Any:
        return c.t(name.get(key, key), fallback)

    c.refuse("position_embedding_type", lambda v: v != "absolute",
             "only absolute position embeddings")
    c.refuse("add_cross_attention", bool, "decoder cross-attention is not modelled")
    c.refuse("use_task_id", bool, "ERNIE's task-type embeddings are not modelled")
    yoso = r.cls == "YosoForMaskedLM"
    if yoso:
        c.refuse("use_expectation", lambda v: not v, "YOSO's LSH cumulation runs CUDA kernels, "
                 "not modelled; its expectation attention is")
        c.refuse("conv_window", lambda v: True, "YOSO's depthwise convolution over V is not "
                 "modelled")
    if not r.factorized and c.t("embedding_size") not in (None, t("hidden_size")):
        raise SpecError("embedding_size", f"equal to hidden_size={t('hidden_size')} (a "
                        "projected embedding is not modelled for this type)",
                        c.t("embedding_size"), source=c.where)
    if r.untied:
        c.refuse("tie_word_embeddings", lambda v: v is False, r.untied)
    qkv, o = c.flag(r.qkv_bias), c.flag(r.o_bias)
    extra: dict[str, Any] = {}
    if r.deberta:
        extra = _deberta(c, t("max_position_embeddings"), r.deberta)
    if r.factorized:
        Ve = t(r.factorized)
        if Ve is None:
            raise SpecError(r.factorized, "to be present", None, source=c.where)
        # ELECTRA projects only when the widths differ; ALBERT and RemBERT always
        # (embedding_hidden_mapping_in)
        project = r.always_project or Ve != t("hidden_size")
        extra |= {"embed_proj_dim": Ve if project else None, "embed_factorized": project,
                  "mlm_bias": r.mlm_bias}
        if r.head_width:
            extra["mlm_width"] = t(r.head_width)
        if r.untied_head and t("tie_word_embeddings", True):
            c.notes.append(f"{r.cls} ties no decoder (transformers 5.23): its head is "
                           "counted apart whatever tie_word_embeddings says")
    if r.side:
        sizes = [(t(rows), t(width)) for rows, width in r.side]
        for (rows, width), size in zip(r.side, sizes, strict=True):
            for key, value in zip((rows, width), size, strict=True):
                if not value:  # RoCBertEmbeddings builds both tables whatever else is set
                    raise SpecError(key, "an integer >= 1", value, source=c.where)
        extra["side_embeddings"] = " ".join(f"{n}x{w}" for n, w in sizes)
        extra["side_concat"] = bool(t(r.side_concat, True))
        if extra["side_concat"]:
            for key in ("enable_shape", "enable_pronunciation"):
                c.refuse(key, lambda v: v is False, "a side table built but left out of the "
                         "concatenation is not modelled")
    tied = bool(t("tie_word_embeddings", True)) and not r.untied_head
    L = t("num_hidden_layers")
    if r.shared:
        # AlbertTransformer: layer i runs group int(i / (L / G)), each group inner_group_num
        # AlbertLayers: L · inner layers run, G · inner sets of weights
        G, inner = c.t("num_hidden_groups", 1), c.t("inner_group_num", 1)
        if not L:
            raise SpecError("num_hidden_layers", "an integer >= 1", L, source=c.where)
        if not 1 <= G <= L or L % G:
            raise SpecError("num_hidden_groups", f"a divisor of num_hidden_layers={L} (each "
                            "group then runs for as many layers)", G, source=c.where)
        if inner < 1:
            raise SpecError("inner_group_num", "an integer >= 1", inner, source=c.where)
        extra["layer_groups"] = G * inner
        L *= inner
    if r.block_sparse:
        extra["block_sparse_from"] = _block_sparse_from(c)
    if r.type_vocab_sizes:  # TapasEmbeddings: a table per entry, positions per cell
        sizes = c.t("type_vocab_sizes")
        extra |= {"type_tables": len(sizes) if isinstance(sizes, (list, tuple)) else 0,
                  "cell_positions": c.flag("reset_position_index_per_cell")}
    return extra | dict(arch="encoder", vocab_size=t("vocab_size"), d_model=t("hidden_size"),
                n_layers=L, n_heads=t("num_attention_heads"),
                d_head=t("head_dim") if r.head_dim else None,
                d_ff=t("intermediate_size"), max_positions=t("max_position_embeddings"),
                position=extra.pop("position", r.position), position_offset=r.position_offset,
                token_types=_token_types(c, r),
                layout_positions=t("max_2d_position_embeddings") if r.layout else 0,
                relative_bias=r.relative_bias,
                relative_buckets=t("relative_attention_num_buckets") if r.relative_bias else 32,
                # (DeBERTa v1: the fused projection's q_bias and v_bias, no key bias)
                **_bias(qkv, qkv and r.deberta != "v1", qkv, o, c.flag(r.ffn_in_bias),
                        c.flag(r.ffn_out_bias)),
                ffn=r.ffn,
                activation=c.activation(name.get("hidden_act", "hidden_act"),
                                        c.table.get(name.get("hidden_act", "hidden_act"))
                                        or "gelu"),
                norm="layernorm", norm_position=r.norm_position,
                embedding_norm=r.embedding_norm, final_norm=r.final_norm,
                lm_head=r.head == "bias", lm_head_bias=r.head == "bias", pooler=r.pooler,
                mlm_head=r.head == "mlm",
                layers_nn_linear=not r.quant_linear, tie_embeddings=tied,
                ffn_dropout=r.ffn_dropout,
                # IntLayerNorm written out where quant_mode is off (IBertConfig's default)
                norm_int=r.quant_linear and not c.t("quant_mode", False),
                yoso_expectation=yoso)


def _block_sparse_from(c: Config) -> int:
    """BigBirdModel.forward: attention_type block_sparse runs block-sparse attention only
    past (5 + 2 · num_random_blocks) · block_size tokens, switching to original_full below
    (0: original_full at every length)."""
    kind = c.t("attention_type", "block_sparse")
    if kind not in ("block_sparse", "original_full"):
        raise SpecError("attention_type", "block_sparse or original_full", kind,
                        source=c.where)
    if kind == "original_full":
        return 0
    block, blocks = c.t("block_size", 64), c.t("num_random_blocks", 3)
    for key, value in (("block_size", block), ("num_random_blocks", blocks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(key, "an integer >= 1", value, source=c.where)
    return (5 + 2 * blocks) * block + 1


def _token_types(c: Config, r: Encoder) -> int:
    """Rows of the token-type tables: one table (BERT), or TAPAS's seven, one per
    type_vocab_sizes entry, each d_model wide and summed into the input (a single table of
    their total rows, parameter for parameter)."""
    if not r.token_types:
        return 0
    sizes = c.t("type_vocab_sizes") if r.type_vocab_sizes else None
    if sizes is None:
        return int(c.t("type_vocab_size", 0))
    if not isinstance(sizes, (list, tuple)) or not all(isinstance(n, int) and n >= 0
                                                       for n in sizes):
        raise SpecError("type_vocab_sizes", "a list of integers >= 0", sizes, source=c.where)
    return sum(sizes)


def _deberta(c: Config, max_positions: int, version: str) -> dict[str, Any]:
    """DebertaV2Embeddings / DebertaV2Encoder / DisentangledSelfAttention (transformers 5.23);
    v1 (modeling_deberta): in_proj, one bias-free d_model × 3·d_model matrix, with q_bias and
    v_bias beside it; pos_proj (c2p) without a bias, pos_q_proj (p2c) with one; each layer
    slices 2 · min(T, max_relative_positions) rows of the table (compute_attention_span)."""
    c.refuse("conv_kernel_size", lambda v: v > 0, "DeBERTa's convolution layer is not modelled")
    out: dict[str, Any] = {}
    if version == "v1":
        c.refuse("talking_head", bool, "DeBERTa's talking-head projections are not modelled")
        out |= {"fused_qkv": True, "rel_key_bias": False, "rel_span": "sequence",
                "norm_manual_cast": True}
    if not c.t("position_biased_input", True):
        out["position"] = "none"  # no absolute table; the relative table below
    if c.t("relative_attention", False):
        buckets = c.t("position_buckets", -1)
        span = c.t("max_relative_positions", -1)
        span = max_positions if span < 1 else span
        out["rel_embeddings"] = 2 * (buckets if buckets > 0 else span)
        norm = c.t("norm_rel_ebd", "none")
        out["rel_embeddings_norm"] = isinstance(norm, str) and "layer_norm" in norm
        raw = c.t("pos_att_type", [])
        kinds = raw.split("|") if isinstance(raw, str) else raw
        if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
            raise SpecError("pos_att_type", "a list of 'c2p' / 'p2c', or them joined by '|'",
                            raw, source=c.where)
        out["rel_terms"] = "|".join(k for k in ("c2p", "p2c") if k in kinds) or "none"
        out["rel_shared_key"] = bool(c.t("share_att_key", False))
        if not out["rel_shared_key"]:
            out["rel_projections"] = ("c2p" in kinds) + ("p2c" in kinds)
    return out


# One record per BERT-style model_type (checked like GENERIC)
ENCODERS: dict[str, Encoder] = {
    "camembert": Encoder("CamembertForMaskedLM"),
    "xlm-roberta": Encoder("XLMRobertaForMaskedLM"),
    "data2vec-text": Encoder("Data2VecTextForMaskedLM"),
    "ibert": Encoder("IBertForMaskedLM", quant_linear=True),
    "ernie": Encoder("ErnieForMaskedLM"),
    "big_bird": Encoder("BigBirdForMaskedLM", pooler=True, qkv_bias="use_bias",
                        block_sparse=True),
    "mra": Encoder("MraForMaskedLM", position_offset=2),
    "yoso": Encoder("YosoForMaskedLM", position_offset=2),
    "roberta-prelayernorm": Encoder("RobertaPreLayerNormForMaskedLM", norm_position="pre",
                                    final_norm=True),
    "xlm-roberta-xl": Encoder("XLMRobertaXLForMaskedLM", norm_position="pre", final_norm=True,
                              embedding_norm=False),
    "megatron-bert": Encoder("MegatronBertForMaskedLM", norm_position="pre", final_norm=True,
                             embedding_norm=False),
    "gte": Encoder("GteForMaskedLM", ffn="gated", position="rope", ffn_in_bias=False,
                   untied="GTE's untied decoder keeps one bias, not modelled",
                   ffn_dropout=True),
    "roformer": Encoder("RoFormerForMaskedLM", position="rope",
                        untied="RoFormer's untied decoder keeps one bias, not modelled"),
    "deberta-v2": Encoder("DebertaV2ForMaskedLM", deberta="v2"),
    "deberta": Encoder("DebertaForMaskedLM", deberta="v1"),
    "bert-generation": Encoder("BertGenerationDecoder", token_types=False, head="bias",
                               decoder=True, untied="BertGeneration's untied decoder keeps "
                               "a second bias, not modelled"),
    "tapas": Encoder("TapasForMaskedLM", type_vocab_sizes=True),
    # MPNet: BERT's layers, no token types, and a relative-position bias (buckets × heads)
    # owned by the encoder and added in every layer, beside the learned position table
    "mpnet": Encoder("MPNetForMaskedLM", token_types=False, relative_bias=True),
    # Jina Embeddings v3 (its XLM-RoBERTa backbone with RoPE instead of a position table)
    "jina_embeddings_v3": Encoder("JinaEmbeddingsV3ForMaskedLM", position="rope"),
    "layoutlm": Encoder("LayoutLMForMaskedLM", pooler=True, layout=True),
    "nomic_bert": Encoder("NomicBertForMaskedLM", ffn="gated", position="rope", head_dim=True,
                          qkv_bias=False, o_bias=False, ffn_in_bias=False, ffn_out_bias=False),
    # RoCBERT: BERT with a shape and a pronunciation table, concatenated to the word
    # embedding and projected back to hidden_size (map_inputs_layer) when concat_input
    "roc_bert": Encoder("RoCBertForMaskedLM",
                        side=(("shape_vocab_size", "shape_embed_dim"),
                              ("pronunciation_vocab_size", "pronunciation_embed_dim")),
                        side_concat="concat_input"),
    # ELECTRA's generator: embeddings of embedding_size projected to hidden_size
    # (embeddings_project, when they differ), a head back to embedding_size
    # (generator_predictions) and a decoder tied to the token table with a bias of its own
    "electra": Encoder("ElectraForMaskedLM", factorized="embedding_size", mlm_bias="decoder"),
    # ALBERT: factorised embeddings (embedding_hidden_mapping_in) and layers that share their
    # weights (num_hidden_groups groups of inner_group_num layers); the head as ELECTRA's
    "albert": Encoder("AlbertForMaskedLM", factorized="embedding_size", shared=True,
                      always_project=True),
    # RemBERT: input embeddings of input_embedding_size (embedding_hidden_mapping_in), a head
    # of output_embedding_size and an untied decoder with its bias
    "rembert": Encoder("RemBertForMaskedLM", factorized="input_embedding_size",
                       head_width="output_embedding_size", mlm_bias="decoder",
                       untied_head=True, always_project=True),
    "distilbert": Encoder("DistilBertForMaskedLM", keys=(
        ("hidden_size", "dim"), ("num_hidden_layers", "n_layers"),
        ("num_attention_heads", "n_heads"), ("intermediate_size", "hidden_dim"),
        ("hidden_act", "activation")), token_types=False,
        untied="DistilBERT's untied vocab_projector keeps one bias, not modelled"),
}
# the records of transformer_calc/hf_more.py (it reads this module's record types)
from transformer_calc import hf_more  # noqa: E402

GENERIC |= hf_more.RECORDS
T5S |= hf_more.T5S
SEQ2SEQ |= hf_more.SEQ2SEQ
TABLE_DRIVEN: dict[str, Layout | Encoder | Seq2Seq | T5Like] = {
    **GENERIC, **ENCODERS, **SEQ2SEQ, **T5S}


def _needs(c: Config, key: str, why: str) -> None:
    """A key the class reads without a default: null (or absent, with a null class default)
    is refused, as the class cannot be built from it."""
    if c.t(key) is None:
        raise SpecError(key, f"to be set ({why})", c.data.get(key), source=c.where)


# the classes whose full layers run without RoPE when sliding layers are configured:
# model_type -> (the key of the period of full layers, its class default, the class's
# sliding_window); layer i is full when (i + 1) % period == 0 (ExaoneMoeConfig,
# Kolibri1Config, AfmoeConfig.__post_init__, when the file has no layer_types)
_NOPE_FULL = {"exaone_moe": ("sliding_window_pattern", 4, 4096),
              "kolibri1": ("", 5, 513), "afmoe": ("global_attn_every_n_layers", 4, 1024)}


def _nope_full_layers(c: Config, model_type: str) -> dict[str, Any]:
    """ExaoneMoeForCausalLM, Kolibri1ForCausalLM, AfmoeForCausalLM: the generic record with
    layer_types (or the class's rule, _NOPE_FULL) read as sliding layers with RoPE and full
    layers without (ExaoneMoeAttention and Kolibri1Attention rotate only where
    sliding_window is None or the layer slides, AfmoeAttention only where it slides). A null
    sliding_window: K-EXAONE's layers listed in layer_types all rotate, unwindowed (F); else
    refused (ExaoneMoeConfig derives no layer_types from it, Kolibri1Config refuses it)."""
    # (the layer kinds read below, not as the generic record reads layer_types)
    out = _generic(c.with_data({k: v for k, v in c.data.items() if k != "layer_types"}),
                   GENERIC[model_type])
    key, period, window = _NOPE_FULL[model_type]
    L = out["n_layers"]
    data = dict(c.data)
    null = "sliding_window" in c.data and c.data["sliding_window"] is None
    if null and model_type == "exaone_moe" and isinstance(data.get("layer_types"), list):
        return out | {"layer_attention": f"{L}F", "sliding_window": 0}
    if data.get("layer_types") is None:
        n = c.t(key, period) if key else period
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise SpecError(key, "an integer >= 1 (every n-th layer is full attention)", n,
                            source=c.where)
        data["layer_types"] = ["full_attention" if (i + 1) % n == 0 else "sliding_attention"
                               for i in range(L)]
    if null:
        raise SpecError("sliding_window", "an integer >= 1 (the class derives its sliding "
                        "layers from it)", None, source=c.where)
    layers = _layer_attention(_Window(data, c.where, {"sliding_window": c.t(
        "sliding_window", window)}), L, None, None)
    # (full layers run without RoPE: N)
    out["layer_attention"] = layers.pop("layer_attention", f"{L}F").replace("F", "N")
    return out | layers


def _laguna(c: Config) -> dict[str, Any]:
    """LagunaForCausalLM: the generic record with its layers' kinds (layer_types: full by
    default, sliding ones windowed by sliding_window), the full layers' rotated fraction
    (rope_parameters["full_attention"]'s partial_rotary_factor, 0.5 by default; the sliding
    layers' must be their default 1.0), the output gate's granularity (gating True or
    "per-head": one softplus gate per head; "per-element": one per channel) and the router:
    LagunaTopKRouter's sigmoid scores, the gathered top-k divided by their sum and cast to the
    model's dtype (router_topk renorm_cast); with moe_router_logit_softcapping, none (left to
    the per-tensor rules)."""
    out = _generic(c, GENERIC["laguna"])
    rope = c.data.get("rope_parameters")
    fractions = {}
    for kind, default in (("full_attention", 0.5), ("sliding_attention", 1.0)):
        params = rope.get(kind) if isinstance(rope, dict) else None
        value = params.get("partial_rotary_factor") if isinstance(params, dict) else None
        fractions[kind] = default if value is None else value
    if "S" in out.get("layer_attention", "") and fractions["sliding_attention"] != 1.0:
        raise SpecError("rope_parameters", "a sliding_attention partial_rotary_factor of 1.0 "
                        "(sliding layers rotating part of each head are not modelled)",
                        fractions["sliding_attention"], source=c.where)
    gating = c.t("gating", True)
    if gating not in (True, "per-head", "per-element"):
        raise SpecError("gating", "true, \"per-head\" or \"per-element\"", gating,
                        source=c.where)
    return out | {"rotary_fraction": float(fractions["full_attention"]),
                  "attn_gate": "width" if gating == "per-element" else "head",
                  "router_topk": "none" if c.t("moe_router_logit_softcapping", 0.0)
                  else "renorm_cast"}


def _dots1(c: Config) -> dict[str, Any]:
    """Dots1ForCausalLM: the generic record, with the keys Dots1Config leaves null checked
    (n_routed_experts, num_experts_per_tok and n_shared_experts are read by every MoE layer)
    and the sliding layers Dots1Config derives: from max_window_layers on, when
    sliding_window is set."""
    L, first = c.t("num_hidden_layers"), c.t("first_k_dense_replace", 0)
    if isinstance(L, int) and isinstance(first, int) and first < L:
        for key in ("n_routed_experts", "num_experts_per_tok", "n_shared_experts"):
            _needs(c, key, "Dots1Config leaves it null; every MoE layer reads it")
    data = dict(c.data)
    # Dots1Config's sliding_window 4096 and max_window_layers 62 (an explicit null: none)
    window, start = data.get("sliding_window", 4096), data.get("max_window_layers", 62)
    if data.get("layer_types") is None and isinstance(L, int) and window is not None:
        if isinstance(start, bool) or not isinstance(start, int):
            raise SpecError("max_window_layers", "an integer (the first sliding layer)", start,
                            source=c.where)
        if start < L:
            data |= {"sliding_window": window,
                     "layer_types": ["sliding_attention" if i >= start else "full_attention"
                                     for i in range(L)]}
    # (with n_shared_experts 0 Dots1MoE still builds its shared MLP, 0 wide: no parameters,
    # and PEFT's conversion leaves it unadapted, so no count depends on it)
    return _generic(c.with_data(data), GENERIC["dots1"])


def _hunyuan(c: Config, moe: bool) -> dict[str, Any]:
    """HunYuanDenseV1ForCausalLM / HunYuanMoEV1ForCausalLM: the generic record; head_dim must
    be given (the attention reads it with no fallback: null fails in transformers 5.23), and
    the MoE class's num_experts must be one integer (its experts read it whole), moe_topk one
    integer or a list of one value per layer, all alike (tcalc's MoE layers route alike)."""
    _needs(c, "head_dim", "the attention reads it; transformers 5.23 derives none")
    data = dict(c.data)
    if moe:
        X = data.get("num_experts")
        if X is not None and (isinstance(X, bool) or not isinstance(X, int) or X < 1):
            raise SpecError("num_experts", "an integer >= 1 (HunYuanMoEV1Experts reads one "
                            "count for every layer)", X, source=c.where)
        k = data.get("moe_topk")
        if isinstance(k, list):
            L = c.t("num_hidden_layers")
            if len(k) != L or len(set(map(str, k))) != 1:
                raise SpecError("moe_topk", f"one integer, or a list of {L} equal integers "
                                "(layers that route to different numbers of experts are not "
                                "modelled)", k, source=c.where)
            data["moe_topk"] = k[0]
    return _generic(c.with_data(data),
                    GENERIC["hunyuan_v1_moe" if moe else "hunyuan_v1_dense"])


def _nemotron(c: Config) -> dict[str, Any]:
    """NemotronForCausalLM: the generic record; NemotronConfig leaves num_key_value_heads null
    and the attention divides by it (transformers 5.23 cannot build a null)."""
    _needs(c, "num_key_value_heads", "NemotronAttention divides the heads by it; "
           "NemotronConfig derives none")
    # NemotronConfig: kwargs.setdefault("partial_rotary_factor", 0.5), kept in
    # rope_parameters, whose value NemotronRotaryEmbedding reads
    rope = c.data.get("rope_parameters")
    fraction = rope.get("partial_rotary_factor") if isinstance(rope, dict) else None
    if fraction is None:
        fraction = c.get("partial_rotary_factor", 0.5)
    elif isinstance(fraction, bool) or not isinstance(fraction, int | float) \
            or not 0 < fraction <= 1:
        raise SpecError("rope_parameters.partial_rotary_factor", "a number in (0, 1]",
                        fraction, source=c.where)
    return _generic(c, GENERIC["nemotron"]) | {"rotary_fraction": fraction}


def _ministral(c: Config) -> dict[str, Any]:
    """MinistralForCausalLM: the generic record; head_dim must be given (as Hunyuan's), and
    without layer_types every layer slides when sliding_window is set (MinistralConfig)."""
    _needs(c, "head_dim", "the attention reads it; transformers 5.23 derives none")
    data = dict(c.data)
    L = c.t("num_hidden_layers")
    window = data.get("sliding_window", 4096)  # MinistralConfig's (an explicit null: none)
    if data.get("layer_types") is None and isinstance(L, int) and window is not None:
        data |= {"sliding_window": window, "layer_types": ["sliding_attention"] * L}
    elif "sliding_window" not in data:
        data["sliding_window"] = window
    return _generic(c.with_data(data), GENERIC["ministral"])


def _cohere2(c: Config) -> dict[str, Any]:
    """Cohere2ForCausalLM: the generic record with its layers' kinds (Cohere2Config: without
    layer_types, layer i slides unless (i + 1) is a multiple of sliding_window_pattern, 4;
    sliding_window 4096); Cohere2Attention applies RoPE in the sliding layers only, so its
    full layers are N (no positions)."""
    data = dict(c.data)
    L = c.t("num_hidden_layers")
    if data.get("layer_types") is None and isinstance(L, int):
        every = c.get("sliding_window_pattern", 4)
        data["layer_types"] = ["sliding_attention" if every and (i + 1) % every
                               else "full_attention" for i in range(L)]
    if "sliding_window" not in data:
        data["sliding_window"] = 4096
    out = _generic(c.with_data(data), GENERIC["cohere2"])
    if "layer_attention" in out:
        out["layer_attention"] = out["layer_attention"].replace("F", "N")
    elif isinstance(L, int) and L:
        out["layer_attention"] = f"{L}N"
    return out


def _granitemoe_swa(c: Config) -> dict[str, Any]:
    """GraniteMoeSWAForCausalLM: the generic record with its layers' kinds as
    GraniteMoeSWAConfig derives them (without layer_types: full attention every fourth layer
    from the first, sliding elsewhere; sliding_window 128) and layer_rope_theta (0: no RoPE,
    N; a full layer only, and one base for the rest, are modelled)."""
    data = dict(c.data)
    L = c.t("num_hidden_layers")
    if data.get("layer_types") is None and isinstance(L, int):
        data["layer_types"] = ["full_attention" if i % 4 == 0 else "sliding_attention"
                               for i in range(L)]
    if "sliding_window" not in data:
        data["sliding_window"] = 128
    out = _generic(c.with_data(data), GENERIC["granitemoe_swa"])
    thetas = data.get("layer_rope_theta")
    if isinstance(L, int) and L and "layer_attention" in out:
        from transformer_calc.plan import parse_pattern

        kinds = list(parse_pattern(out["layer_attention"], "FS", L, "layer_types"))
        if isinstance(thetas, list) and len(thetas) == L:
            if len({t for t in thetas if t}) > 1 or any(
                    not t and k != "F" for t, k in zip(thetas, kinds, strict=True)):
                raise SpecError("layer_rope_theta", "one RoPE base, or 0 on full-attention "
                                "layers (several bases, or a sliding layer without RoPE, are "
                                "not modelled)", thetas, source=c.where)
            kinds = ["N" if not t else k for t, k in zip(thetas, kinds, strict=True)]
        out["layer_attention"] = " ".join(f"1{k}" for k in kinds)
    return out


def _minimax_m2(c: Config) -> dict[str, Any]:
    """MiniMaxM2ForCausalLM: the generic record; a file's legacy rotary_dim is
    partial_rotary_factor = rotary_dim / head_dim where the file gives no factor
    (MiniMaxM2Config.convert_rope_params_to_dict)."""
    out = _generic(c, GENERIC["minimax_m2"])
    rope = c.data.get("rope_parameters")
    dims = c.data.get("rotary_dim")
    if dims is None or c.data.get("partial_rotary_factor") is not None or (
            isinstance(rope, dict) and rope.get("partial_rotary_factor") is not None):
        return out
    d_head = out.get("d_head") or c.t("hidden_size") // c.t("num_attention_heads")
    if not isinstance(dims, int) or isinstance(dims, bool) or not 2 <= dims <= d_head \
            or dims % 2:
        raise SpecError("rotary_dim", f"an even integer in [2, {d_head}] (head_dim)", dims,
                        source=c.where)
    return out | {"rotary_fraction": dims / d_head}


def _flint(c: Config) -> dict[str, Any]:
    """FlintForCausalLM: the generic record with its layers' kinds as FlintConfig derives
    them (without layer_types: full attention in the first two layers, every fourth from
    the second and the last, sliding elsewhere; sliding_window 513). FlintAttention applies
    RoPE in sliding layers only: its full layers are N (no positions)."""
    data = dict(c.data)
    L = c.t("num_hidden_layers")
    if data.get("layer_types") is None and isinstance(L, int):
        data["layer_types"] = ["full_attention" if i < 2 or i % 4 == 1 or i == L - 1
                               else "sliding_attention" for i in range(L)]
    if data.get("sliding_window") is None:
        data["sliding_window"] = 513
    out = _generic(c.with_data(data), GENERIC["flint"])
    if "layer_attention" in out:
        out["layer_attention"] = out["layer_attention"].replace("F", "N")
    elif isinstance(L, int) and L:
        out["layer_attention"] = f"{L}N"
    return out


def _cohere2_moe(c: Config) -> dict[str, Any]:
    """Cohere2MoeForCausalLM: the generic record with its layers' kinds as Cohere2MoeConfig
    derives them (without layer_types: the first first_k_dense_replace layers by
    prefix_dense_sliding_window_pattern, 1, the rest by sliding_window_pattern, 4; layer i
    of a run slides unless (i + 1) is a multiple of its pattern), its dense layers
    (mlp_layer_types, or the first first_k_dense_replace), sliding_window 4096. Its
    attention applies RoPE in sliding layers, and in dense layers when the prefix pattern
    is 1 (force_rope): full layers are N (no positions) unless forced (F)."""
    data = dict(c.data)
    L = c.t("num_hidden_layers")
    first = data.get("first_k_dense_replace") or 0
    prefix_every = data.get("prefix_dense_sliding_window_pattern", 1)
    if isinstance(L, int) and isinstance(first, int):
        if data.get("layer_types") is None:
            every = data.get("sliding_window_pattern", 4)
            data["layer_types"] = [
                "sliding_attention" if (i + 1) % prefix_every else "full_attention"
                for i in range(min(first, L))] + [
                "sliding_attention" if (i + 1) % every else "full_attention"
                for i in range(L - min(first, L))]
        if data.get("mlp_layer_types") is None:
            data["mlp_layer_types"] = ["dense" if i < first else "sparse" for i in range(L)]
    if "sliding_window" not in data:
        data["sliding_window"] = 4096
    out = _generic(c.with_data(data), GENERIC["cohere2_moe"])
    dense = data.get("mlp_layer_types") or []
    if "layer_attention" in out and isinstance(L, int):
        from transformer_calc.plan import parse_pattern

        kinds = list(parse_pattern(out["layer_attention"], "FS", L, "layer_types"))
        out["layer_attention"] = " ".join(
            "1F" if k == "F" and dense[i] == "dense" and prefix_every == 1 else
            "1N" if k == "F" else "1S" for i, k in enumerate(kinds))
    if data.get("rms_norm_eps") is not None:  # Cohere2MoeRMSNorm, not its LayerNorm
        out |= {"norm": "rmsnorm", "norm_manual": False}
    return out


def _lfm2(c: Config, moe: bool) -> dict[str, Any]:
    """Lfm2ForCausalLM / Lfm2MoeForCausalLM: the generic record, with the files' tie_embedding
    (their config classes take it over tie_word_embeddings: __post_init__ pops it); the MoE
    class has no full_attn_idxs rule, so its layer_types must be given."""
    data = dict(c.data)
    if "tie_embedding" in data:
        data["tie_word_embeddings"] = data.pop("tie_embedding")
    if moe:
        _needs(c, "layer_types", "Lfm2MoeDecoderLayer reads it; Lfm2MoeConfig derives none")
    return _generic(c.with_data(data), GENERIC["lfm2_moe" if moe else "lfm2"])


def _olmo_hybrid(c: Config) -> dict[str, Any]:
    """OlmoHybridForCausalLM (transformers 5.23): the generic record, with the sizes
    OlmoHybridConfig.__post_init__ derives when the file leaves them out, and without RoPE
    when rope_parameters says rope_theta: null (OlmoHybridModel then builds no rotary
    embedding: the released checkpoints' NoPE)."""
    data = dict(c.data)
    E, H, L = c.t("hidden_size"), c.t("num_attention_heads"), c.t("num_hidden_layers")
    types = data.get("layer_types")
    if types is None and isinstance(L, int) and L > 0:
        # every 4th layer full attention, and the last when none is
        types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(L)]
        if "full_attention" not in types:
            types[-1] = "full_attention"
        data["layer_types"] = types
    if types is not None and (not isinstance(types, list) or any(
            not isinstance(t, str) for t in types)):
        raise SpecError("layer_types", "a list of full_attention and linear_attention",
                        types, source=c.where)
    if isinstance(types, list) and not {"full_attention", "linear_attention"} <= set(types):
        raise SpecError("layer_types", "at least one linear_attention and one full_attention "
                        "layer (OlmoHybridConfig.validate_architecture)", types,
                        source=c.where)
    for key in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                "linear_value_head_dim"):
        c.t(key)  # type-checks a value the file gives (a positive integer)
    for key in ("linear_num_key_heads", "linear_num_value_heads"):
        if data.get(key) is None:
            data[key] = H
    if data.get("linear_key_head_dim") is None and isinstance(E, int) \
            and isinstance(data["linear_num_key_heads"], int) and data["linear_num_key_heads"]:
        data["linear_key_head_dim"] = int(0.75 * E / data["linear_num_key_heads"])
    if data.get("linear_value_head_dim") is None \
            and isinstance(data.get("linear_key_head_dim"), int):
        data["linear_value_head_dim"] = 2 * data["linear_key_head_dim"]
    out = _generic(c.with_data(data), GENERIC["olmo_hybrid"])
    rope = c.data.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope and rope["rope_theta"] is None:
        out["position"] = "none"
    return out | {"peft_names_shared": True}


MAPPERS: dict[str, Callable[[Config], dict[str, Any]]] = {
    "gpt2": _gpt2,
    "gpt-sw3": _gpt2,  # GPTSw3 is GPT2LMHeadModel with its own tokenizer
    "bert": lambda c: _bert(c, roberta=False),
    "roberta": lambda c: _bert(c, roberta=True),
    "gemma": _gemma,
    "phi": _phi,
    "gpt_neox": _gpt_neox,
    "falcon": _falcon,
    "opt": _opt,
    "t5": _t5,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v3": _deepseek_v3,
    "axk1": _axk1,
    "gemma2": _gemma2,
    "gemma3_text": lambda c: _gemma2(c, v3=True),
    "gpt_oss": _gpt_oss,
    "mimo_v2_flash": _mimo_v2_flash,
    "modernbert": _modernbert,
    "modernbert-decoder": lambda c: _modernbert(c, decoder=True),
    "fsmt": _fsmt,
    "gemma4_text": _gemma4,
    "gemma4_unified_text": lambda c: _gemma4(c, unified=True),
} | {model_type: partial(_generic, r=r) for model_type, r in GENERIC.items()} \
  | {model_type: partial(_encoder, r=r) for model_type, r in ENCODERS.items()} \
  | {model_type: partial(_seq2seq, r=r) for model_type, r in SEQ2SEQ.items()} \
  | {model_type: partial(_t5, r=r) for model_type, r in T5S.items()} \
  | {t: partial(_nope_full_layers, model_type=t) for t in _NOPE_FULL} \
  | {"olmo_hybrid": _olmo_hybrid, "dots1": _dots1, "longcat_flash": _longcat_flash,
     "laguna": _laguna, "dbrx": _dbrx, "kimi_linear": _kimi_linear,
     "hunyuan_v1_dense": partial(_hunyuan, moe=False),
     "hunyuan_v1_moe": partial(_hunyuan, moe=True), "nemotron": _nemotron,
     "ministral": _ministral, "cohere2": _cohere2, "cohere2_moe": _cohere2_moe,
     "flint": _flint, "granitemoe_swa": _granitemoe_swa, "minimax_m2": _minimax_m2,
     "lfm2": partial(_lfm2, moe=False),
     "t5gemma": _t5gemma,
     "gemma3n_text": _gemma3n, "deepseek_v4": _deepseek_v4,
     "lfm2_moe": partial(_lfm2, moe=True)} | hf_more.MAPPERS
HEAD_CLASS.update({model_type: r.cls for model_type, r in TABLE_DRIVEN.items()})

# Encoders whose layers hold tensors beyond BERT's (hf_encoders.py, which imports this module
# lazily): one record each, registered as ENCODERS' are
from transformer_calc.hf_encoders import LAYERED, mapper  # noqa: E402

for _type, _layered in LAYERED.items():
    ENCODERS[_type] = TABLE_DRIVEN[_type] = Encoder(**_layered.encoder)
    MAPPERS[_type] = mapper(_type)
    HEAD_CLASS[_type] = _layered.encoder["cls"]
    HEADS[_type] = Heads(**_layered.heads) if isinstance(_layered.heads, dict) else {
        "roberta": _ROBERTA_HEADS, "dense": _DENSE_HEADS}[_layered.heads]
    DROPOUT_KEYS[_type] = _layered.dropout
