"""Component names for the graph's saved storages: the rows
`transformer_calc.memory.activation_breakdown` (and `lora_activations`) write for the same
configuration, so explain, the JSON components and name-based tests can read the graph.

A saved storage is named from where autograd saved it (the module scope of its first saver
and the op's role), where it was made (its storage's scope: RoPE's table, the fused c_attn
output) and its size (a T² term: the attention probabilities; r: LoRA's A output):

    decoder.attn.norm.input_fp32      pow.self in model.layers.i.self_attn.input_layernorm
    decoder.attn.qkv                  sdpa_*.query/key/value
    decoder.ffn.activation            silu.self, mul.self/other in model.layers.i.mlp
    decoder.attn.q.lora_input         mm.self (no r) in an adapted q_proj
    rope.cos_sin, loss.log_softmax, embed.token_ids, ...

`component_rows` groups them in Breakdown's row shape (name, count, formula, expr, repeat,
stack, note, active, shape): a per-layer row has stack "decoder" and repeats over the layers
that keep the same bytes under that name (LoRA's first adapted layer keeps less: a row of
its own); note "tp" where the bytes have a term in H, Hkv or F (what tensor parallelism
splits). A storage no rule names raises ValueError: a new graph needs its names first."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import NamedTuple

from transformer_calc.breakdown import Row, substitute
from transformer_calc.graph.evaluate import Family, Result, evaluate, symbols
from transformer_calc.graph.families.bamba import Bamba
from transformer_calc.graph.families.bart import Bart
from transformer_calc.graph.families.bert import HEADS, Bert, IBert, Yoso
from transformer_calc.graph.families.cohere import Cohere
from transformer_calc.graph.families.dbrx import Dbrx
from transformer_calc.graph.families.deberta import Deberta
from transformer_calc.graph.families.deepseek_v4 import DeepseekV4
from transformer_calc.graph.families.falcon import Falcon
from transformer_calc.graph.families.fsmt import Fsmt
from transformer_calc.graph.families.gemma import Gemma
from transformer_calc.graph.families.gemma3n import Gemma3n
from transformer_calc.graph.families.gemma4 import Gemma4
from transformer_calc.graph.families.gpt2 import GPT2
from transformer_calc.graph.families.gptj import GPTJ
from transformer_calc.graph.families.gptlike import Ctrl, GraniteSwa
from transformer_calc.graph.families.granitemoehybrid import GraniteMoeHybrid
from transformer_calc.graph.families.jamba import Jamba
from transformer_calc.graph.families.kimi_linear import KINDS as KIMI_KINDS
from transformer_calc.graph.families.kimi_linear import KimiLinear
from transformer_calc.graph.families.lfm2 import Lfm2, Lfm2Moe
from transformer_calc.graph.families.llama import Llama
from transformer_calc.graph.families.llama4 import Llama4
from transformer_calc.graph.families.mamba import Mamba, Mamba2
from transformer_calc.graph.families.mimo_v2_flash import MiMoV2Flash
from transformer_calc.graph.families.minimax import Minimax
from transformer_calc.graph.families.minimax_m3 import MiniMaxM3
from transformer_calc.graph.families.modernbert import ModernBert, ModernBertDecoder
from transformer_calc.graph.families.moe import Moe
from transformer_calc.graph.families.nemotron_h import NemotronH
from transformer_calc.graph.families.neox import NeoX
from transformer_calc.graph.families.olmo_hybrid import OlmoHybrid
from transformer_calc.graph.families.paper import Paper
from transformer_calc.graph.families.qwen3_next import Qwen3Next
from transformer_calc.graph.families.switch import Switch
from transformer_calc.graph.families.t5 import T5
from transformer_calc.graph.families.t5gemma import T5Gemma
from transformer_calc.graph.families.xlm import XLM
from transformer_calc.graph.held import quadratic_in_t
from transformer_calc.graph.modules import Run
from transformer_calc.graph.symbols import Poly, product
from transformer_calc.graph.trace import OpRecord, Saved

_LAYER = re.compile(r"^(?:transformer\.h|transformer\.blocks"
                    r"|(?:model|gpt_neox|gpt_neox_japanese|backbone|biogpt)"
                    r"\.layers|model\.decoder\.layers)\.(\d+)(?:\.(.*))?$")
# the norms, by their module's last name: GPT-2's LayerNorms, Llama's RMSNorms
_NORMS = {"ln_1": "attn.norm", "input_layernorm": "attn.norm", "ln_2": "ffn.norm",
          "q_norm": "attn.q_norm", "k_norm": "attn.k_norm",
          "post_attention_layernorm": "ffn.norm", "pre_feedforward_layernorm": "ffn.norm",
          "query_layernorm": "attn.q_norm", "key_layernorm": "attn.k_norm",
          "ln_f": "final_norm", "norm": "final_norm", "norm_f": "final_norm",
          "attn_sub_norm": "attn.sub_norm",
          "ffn_sub_norm": "ffn.sub_norm", "attention_layernorm": "attn.norm",
          "feedforward_layernorm": "ffn.norm", "groupnorm": "attn.head_pair_norm",
          "q_a_layernorm": "attn.q_latent_norm", "kv_a_layernorm": "attn.kv_latent_norm",
          "post_mlp_layernorm": "ffn.post_norm",  # A.X K1: over the MoE block's output
          # GLM-4's and HyperCLOVA X's norms over each sublayer's output
          "post_self_attn_layernorm": "attn.post_norm", "post_norm1": "attn.post_norm",
          "post_norm2": "ffn.post_norm",
          # the NeoX-style decoders' (families/neox.py)
          "q_layernorm": "attn.q_norm", "k_layernorm": "attn.k_norm",
          "final_layernorm": "final_norm",
          "ln_attn": "attn.norm", "ln_mlp": "ffn.norm",
          "pre_ff_layernorm": "ffn.norm",  # (Falcon's two parallel norms)
          # OPT's and BioGPT's (families/opt.py; the model's final norm outside the layers)
          "self_attn_layer_norm": "attn.norm", "final_layer_norm": "ffn.norm",
          "layer_norm": "final_norm",
          "norm_1": "attn.norm", "norm_2": "ffn.norm",  # (MPT's)
          # LFM2's (families/lfm2.py): the operator's and the MLP's, the model's last
          "operator_norm": "attn.norm", "ffn_norm": "ffn.norm",
          "embedding_norm": "final_norm", "post_operator_norm": "attn.post_norm",
          "post_ffn_norm": "ffn.post_norm"}
# Gemma 2/3's sandwich: the attention's and the MLP's outputs normed before the residual add
_SANDWICH = dict(_NORMS, post_attention_layernorm="attn.post_norm",
                 post_feedforward_layernorm="ffn.post_norm")
# a norm's saved tensors by the role of their first saver: torch.nn.LayerNorm, Llama's
# RMSNorm (the weight's mul keeps the normalised tensor as its other operand) and
# GemmaRMSNorm (x̂ · (1 + w): x̂ as self, the fp32 1 + w as other)
_NORM_PARTS = {"native_layer_norm.input": "input", "native_layer_norm.result1": "stats",
               "native_layer_norm.result2": "stats", "pow.self": "input_fp32",
               "native_layer_norm.weight": "weight_plus_one",
               "native_layer_norm.bias": "bias_cast",
               "rsqrt.result": "rstd", "mul.self": "input_fp32", "mul.other": "normalized"}
_GEMMA_NORM_PARTS = dict(_NORM_PARTS, **{"mul.self": "normalized",
                                         "mul.other": "one_plus_weight"})
# CohereLayerNorm (families/cohere.py): the centred fp32 input twice (its square's, the
# normalisation's), 1/std, the normalised tensor the weight multiplies; in a 16-bit model
# the weight's fp32 copy (a mul.self without T, named weight_fp32)
_COHERE_NORM_PARTS = dict(_NORM_PARTS, **{"pow.self": "fp32_terms", "mul.self": "fp32_terms"})
# DebertaLayerNorm, written out in fp32: x - mean (twice: the variance's pow and the
# division keep one each), sqrt(var + eps), the weight's mul keeps x̂
_DEBERTA_NORM_PARTS = dict(_NORM_PARTS, **{"pow.self": "centered", "div.self": "centered",
                                          "sqrt.result": "std", "div.other": "std"})
# I-BERT's IntLayerNorm (quant_mode off), written out in the activations' dtype: x - mean
# (kept by its square and the division) and the normalised tensor the weight multiplies, as
# the rules name them (terms), and sqrt(eps + var) (std)
_INT_NORM_PARTS = dict(_NORM_PARTS, **{"pow.self": "terms", "div.self": "terms",
                                       "mul.self": "terms", "sqrt.result": "std",
                                       "div.other": "std"})
# YOSO's expectation attention (families/yoso.py): what YosoCumulation saves (the int32
# mask, twice; the expectation; the normalised Q and K; V's copy) and the l2 norms
_YOSO_PARTS = {"YosoCumulation.saved0": "mask", "YosoCumulation.saved2": "expectation",
               "YosoCumulation.saved3": "qk_normalised", "YosoCumulation.saved4": "qk_normalised",
               "YosoCumulation.saved5": "qkv", "linalg_vector_norm.result": "norms",
               "div.other": "norms"}
# a linear's input, as the base layer keeps it (and a LoRA adapter reading it as it is)
_INPUTS = {"c_attn": "attn.input", "qkv_proj": "attn.input", "gate_up_proj": "ffn.input",
           "q_proj": "attn.input", "k_proj": "attn.input",
           "v_proj": "attn.input", "attn.c_proj": "attn.o_input", "o_proj": "attn.o_input",
           "c_fc": "ffn.input", "gate_proj": "ffn.input", "up_proj": "ffn.input",
           "mlp.c_proj": "ffn.out_input", "down_proj": "ffn.out_input",
           "shared_expert_gate": "ffn.input", "router": "ffn.input", "wg": "ffn.input",
           "fc1": "ffn.input", "fc2": "ffn.out_input",
           "q_a_proj": "attn.input", "kv_a_proj_with_mqa": "attn.input",
           "q_b_proj": "attn.q_b_input", "kv_b_proj": "attn.kv_b_input",
           "query_key_value": "attn.input", "dense": "attn.o_input",
           "dense_h_to_4h": "ffn.input", "dense_4h_to_h": "ffn.out_input",
           "out_proj": "attn.o_input", "fc_in": "ffn.input", "fc_out": "ffn.out_input",
           "Wqkv": "attn.input",  # (MPT's)
           "w1": "ffn.input", "w3": "ffn.input", "w2": "ffn.out_input", "g_proj": "attn.input",
           # GraniteMoeHybrid's and GraniteMoeShared's shared MLP (fused gate and up; its
           # output projection)
           "input_linear": "ffn.input", "output_linear": "ffn.shared.out_input"}
# the adapted layer's name (transformer_calc.lora.adapted_layers)
_ADAPTED = {"c_attn": "attn.qkv", "qkv_proj": "attn.qkv", "gate_up_proj": "ffn.gate_up",
            "q_proj": "attn.q", "k_proj": "attn.k", "v_proj": "attn.v",
            "attn.c_proj": "attn.o", "o_proj": "attn.o", "c_fc": "ffn.in",
            "gate_proj": "ffn.gate", "up_proj": "ffn.in", "mlp.c_proj": "ffn.out",
            "down_proj": "ffn.out", "fc1": "ffn.in", "fc2": "ffn.out",
            "shared_expert_gate": "ffn.shared_gate", "router": "ffn.router",
            "wg": "ffn.router", "q_a_proj": "attn.q_a",
            "q_b_proj": "attn.q_b", "kv_a_proj_with_mqa": "attn.kv_a", "kv_b_proj": "attn.kv_b",
            "query_key_value": "attn.qkv", "dense": "attn.o",
            "dense_h_to_4h": "ffn.in", "dense_4h_to_h": "ffn.out", "out_proj": "attn.o",
            "fc_in": "ffn.in", "fc_out": "ffn.out", "Wqkv": "attn.qkv", "w1": "ffn.gate",
            "w3": "ffn.in", "w2": "ffn.out", "g_proj": "attn.gate",
            "input_linear": "ffn.shared.gate_up", "output_linear": "ffn.shared.out"}
# the ops that keep what Gemma 3n's stream rescaling reads (pow, clamp, sqrt, mul, div)
_RESCALE_ROLES = frozenset(("pow.self", "clamp.self", "sqrt.result", "mul.self", "mul.other",
                            "div.self", "div.other"))
# Gemma 4's per-layer input linears: (the adapted layer's name, their input's)
_GEMMA4_LINEARS = {
    "per_layer_model_projection": ("embed.project_per_layer", "embed.project_per_layer_input"),
    "per_layer_input_gate": ("decoder.ple.gate", "decoder.ple.gate_input"),
    "per_layer_projection": ("decoder.ple.project", "decoder.ple.project_input")}
# BERT-style encoders (families/bert.py): a layer's modules as the decoders' tables above
# key them (post-norm: the attention output's LayerNorm is tcalc's attn.norm, the layer
# output's its ffn.norm); their rows are named encoder.* in place of decoder.*
_ENCODER_LAYER = re.compile(r"^\w+\.(?:encoder\.layer|layers|transformer\.layer"
                            r"|encoder\.albert_layer_groups"
                            r"\.\d+\.albert_layers)\.(\d+)(?:\.(.*))?$")
_ENCODER_MODULES = {"attention.self.query": "q_proj", "attention.self.key": "k_proj",
                    "attention.self.value": "v_proj", "attention.output.dense": "o_proj",
                    "intermediate.dense": "up_proj", "output.dense": "down_proj",
                    "attention.output.LayerNorm": "ln_1", "output.LayerNorm": "ln_2",
                    "attention.self": "self_attn", "attention.output": "self_attn",
                    "intermediate": "mlp", "output": "mlp",
                    # the rotary encoders (families/rope_encoder.py)
                    "self_attn.q_proj": "q_proj", "self_attn.k_proj": "k_proj",
                    "self_attn.v_proj": "v_proj", "self_attn.o_proj": "o_proj",
                    "self_attn": "self_attn", "post_attention_dropout": "self_attn",
                    "mlp.gate_proj": "gate_proj", "mlp.up_proj": "up_proj",
                    "mlp.down_proj": "down_proj", "mlp.fc1": "up_proj",
                    "mlp.fc2": "down_proj", "mlp": "mlp", "post_mlp_dropout": "mlp",
                    "post_attention_layernorm": "ln_1", "post_mlp_layernorm": "ln_2",
                    # DeBERTa (families/deberta.py)
                    "attention.self.in_proj": "qkv_proj",
                    "attention.self.pos_proj": "pos_proj",
                    "attention.self.pos_q_proj": "pos_q_proj",
                    "attention.self.query_proj": "q_proj",
                    "attention.self.key_proj": "k_proj",
                    "attention.self.value_proj": "v_proj",
                    "attention.self.pos_key_proj": "pos_proj",
                    "attention.self.pos_query_proj": "pos_q_proj",
                    # ALBERT (families/albert.py)
                    "attention.query": "q_proj", "attention.key": "k_proj",
                    "attention.value": "v_proj", "attention.dense": "o_proj",
                    "attention.LayerNorm": "ln_1", "attention": "self_attn",
                    "ffn": "up_proj", "ffn_output": "down_proj", "activation": "mlp",
                    "full_layer_layer_norm": "ln_2",
                    # MPNet (families/mpnet.py)
                    "attention.attn.q": "q_proj", "attention.attn.k": "k_proj",
                    "attention.attn.v": "v_proj", "attention.attn.o": "o_proj",
                    "attention.attn": "self_attn",
                    # the pre-norm encoders' norms (families/prenorm_bert.py)
                    "intermediate.LayerNorm": "ln_2", "attention.self_attn_layer_norm": "ln_1",
                    "LayerNorm": "ln_2", "attention.ln": "ln_1", "ln": "ln_2"}
# DistilBERT's layer modules (families/distilbert.py), over _ENCODER_MODULES (its ffn is the
# MLP's module, ALBERT's a linear)
_DISTILBERT = {"attention.q_lin": "q_proj", "attention.k_lin": "k_proj",
               "attention.v_lin": "v_proj", "attention.out_lin": "o_proj",
               "sa_layer_norm": "ln_1", "ffn.lin1": "up_proj", "ffn.lin2": "down_proj",
               "ffn": "mlp", "output_layer_norm": "ln_2"}
# the pre-norm encoders' final norms (families/prenorm_bert.py)
_ENCODER_FINAL_NORMS = frozenset(("roberta_prelayernorm.LayerNorm", "roberta.encoder.LayerNorm",
                                  "bert.encoder.ln"))
# peft's ParamWrapper over a MoE's expert weights, by the weight it wraps: the names
# lora_activations gives their rows
_WRAPPED = {"gate_up_proj": "gate_up", "down_proj": "out"}
# T5 (families/t5.py): a block's sublayers by their index (the decoder's layer.1 is the
# cross-attention), its linears' inputs and adapted layers, T5LayerNorm's saved tensors (its
# product with the input keeps the input as it is, the weight's the normalised tensor)
_T5_SUBLAYERS = {"encoder": ("attn", "ffn"), "decoder": ("attn", "cross", "ffn")}
_T5_INPUTS = {"q": "input", "k": "input", "v": "input", "o": "o_input", "wi": "input",
              "wi_0": "input", "wi_1": "input", "wo": "out_input"}
_T5_ADAPTED = {"q": "q", "k": "k", "v": "v", "o": "o", "wi": "in", "wi_0": "gate",
               "wi_1": "in", "wo": "out"}
_T5_NORM_PARTS = {"pow.self": "input_fp32", "rsqrt.result": "rstd", "mul.self": "input",
                  "mul.other": "normalized"}
_T5_LAYER = re.compile(r"^(encoder|decoder)\.block\.\d+\.layer\.(\d+)(?:\.(.*))?$")
# BART (families/bart.py): a layer's modules -> (sublayer, part); its linears' adapted names
_BART_LAYER = re.compile(r"^model\.(encoder|decoder)\.layers\.\d+(?:\.(.*))?$")
_BART_MODULES = {"self_attn": ("attn", ""), "encoder_attn": ("cross", ""),
                 "self_attn.q_proj": ("attn", "input"), "self_attn.k_proj": ("attn", "input"),
                 "self_attn.v_proj": ("attn", "input"),
                 "self_attn.out_proj": ("attn", "o_input"),
                 "encoder_attn.q_proj": ("cross", "input"),
                 "encoder_attn.k_proj": ("cross", "input"),
                 "encoder_attn.v_proj": ("cross", "input"),
                 "encoder_attn.out_proj": ("cross", "o_input"),
                 "fc1": ("ffn", "input"), "fc2": ("ffn", "out_input"),
                 "self_attn_layer_norm": ("attn", "norm"),
                 "encoder_attn_layer_norm": ("cross", "norm"),
                 "final_layer_norm": ("ffn", "norm"),
                 # BigBird-Pegasus's encoder attention (BigBirdPegasusSelfAttention)
                 "self_attn.self": ("attn", ""), "self_attn.self.query": ("attn", "input"),
                 "self_attn.self.key": ("attn", "input"),
                 "self_attn.self.value": ("attn", "input"),
                 "self_attn.output": ("attn", "o_input")}
# T5Gemma (families/t5gemma.py): a layer's modules -> its sublayer (and norm)
_T5GEMMA_LAYER = re.compile(r"^model\.(encoder|decoder)\.layers\.\d+(?:\.(.*))?$")
_T5GEMMA_SUBLAYERS = {"self_attn": "attn", "cross_attn": "cross", "mlp": "ffn"}
_T5GEMMA_NORMS = {"pre_self_attn_layernorm": "attn.norm",
                  "post_self_attn_layernorm": "attn.post_norm",
                  "pre_cross_attn_layernorm": "cross.norm",
                  "post_cross_attn_layernorm": "cross.post_norm",
                  "pre_feedforward_layernorm": "ffn.norm",
                  "post_feedforward_layernorm": "ffn.post_norm"}
# torch.nn.Transformer (families/paper.py): a layer's modules -> (sublayer, part) per stack
_PAPER_LAYER = re.compile(r"^transformer\.(encoder|decoder)\.layers\.\d+(?:\.(.*))?$")
_PAPER_MODULES = {"self_attn": ("attn", ""), "multihead_attn": ("cross", ""),
                  "self_attn.out_proj": ("attn", "o_input"),
                  "multihead_attn.out_proj": ("cross", "o_input"),
                  "linear1": ("ffn", "input"), "linear2": ("ffn", "out_input")}
_PAPER_NORMS = {"encoder": {"norm1": "attn", "norm2": "ffn"},
                "decoder": {"norm1": "attn", "norm2": "cross", "norm3": "ffn"}}
_BART_ADAPTED = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "out_proj": "o", "fc1": "in",
                 "fc2": "out", "query": "q", "key": "k", "value": "v", "output": "o"}
# DeBERTa's position projections: the relative table's window is their input
_INPUTS.update({"pos_proj": "attn.relative_table", "pos_q_proj": "attn.relative_table"})
_ADAPTED.update({"pos_proj": "attn.pos_key", "pos_q_proj": "attn.pos_query"})
# ModernBERT's modules (families/modernbert.py) as the decoders' tables key them
_MODERNBERT = {"Wqkv": "qkv_proj", "attn.Wo": "o_proj", "Wi": "gate_up_proj",
               "mlp.Wo": "down_proj", "attn_norm": "input_layernorm",
               "mlp_norm": "post_attention_layernorm"}
_XLM = {"q_lin": "q_proj", "k_lin": "k_proj", "v_lin": "v_proj", "out_lin": "o_proj",
        "lin1": "up_proj", "lin2": "down_proj", "layer_norm1": "ln_1", "layer_norm2": "ln_2",
        "attention": "self_attn", "ffn": "mlp"}
# CTRL's layer modules (families/gptlike.py) as the decoders' tables name them
_CTRL = {"multi_head_attention.Wq": "q_proj", "multi_head_attention.Wk": "k_proj",
         "multi_head_attention.Wv": "v_proj", "multi_head_attention.dense": "o_proj",
         "multi_head_attention": "self_attn", "ffn.0": "up_proj", "ffn.2": "down_proj",
         "ffn": "mlp", "layernorm1": "ln_1", "layernorm2": "ln_2"}
# Granite SWA's sink (families/gptlike.py): what its logsumexp, sigmoid and the output's
# scaling keep
_SINK_ROLES = {"logsumexp.self": "sink_scores", "logsumexp.result": "sink_lse",
               "sigmoid.result": "sink_scale", "mul.self": "sink_input",
               "mul.other": "sink_scale_cast"}
_TP = frozenset(("H", "Hkv", "F", "Fe", "Fs"))
_ROPES = ("model.rotary_emb", "gpt_neox.rotary_emb", "transformer.rotary_emb",
          "gpt_neox_japanese.rotary_emb")  # the model's RoPE table
_MASK = "decoder.causal_mask"  # the eager (B, 1, T, T) mask, once for the model


def _nemotron_scope(s: Saved, kinds: str) -> Saved:
    """A Nemotron-H layer's storage with its scope as the hybrids' layers name theirs: the
    block's norm as input_layernorm (the mixer's, attention's) or post_attention_layernorm
    (the MLP's, experts'), the mixer as mamba, self_attn or mlp."""
    layer = _LAYER.match(s.scope)
    if layer is None:
        return s
    kind = kinds[int(layer.group(1))]
    head, rest = s.scope[:layer.start(2) if layer.group(2) else len(s.scope)], \
        layer.group(2) or ""
    first, _, tail = rest.partition(".")
    if first == "norm":
        first = "input_layernorm" if kind in "MF" else "post_attention_layernorm"
    elif first == "mixer":
        first = {"M": "mamba", "F": "self_attn"}.get(kind, "mlp")
    scope = head + ".".join(p for p in (first, tail) if p)
    return replace(s, scope=scope)


# DeepSeek-V4's RMSNorms (DeepseekV4RMSNorm: the weight's product in fp32), by module
_V4_NORMS = {"input_layernorm": "attn.norm", "post_attention_layernorm": "ffn.norm",
             "self_attn.q_a_norm": "attn.q_a_norm", "self_attn.kv_norm": "attn.kv_norm",
             "self_attn.compressor.kv_norm": "attn.compressor_norm"}
# its hyper-connections' storages by role (families/deepseek_v4.py): the streams (or their
# fp32 copy), the weightless norm (1/rms, its cast, the normed streams the projection
# reads), the projection's fp32 weight, its outputs and sigmoids, the Sinkhorn divisions
_V4_HC = {"pow.self": "streams", "rsqrt.result": "norm", "mm.self": "norm",
          "mm.mat2": "weight_fp32", "sigmoid.result": "weights", "softmax.result": "sinkhorn",
          "div.self": "sinkhorn", "div.other": "sinkhorn"}
# its attention core's and compressors' storages by role
_V4_ATTN = {"max.indices": "row_max_indices", "softmax.result": "probs",
            "bmm.mat2": "kv", "pow.self": "q_b_norm", "rsqrt.result": "q_b_norm"}


def _deepseek_v4(scope: str, role: str, s: Saved) -> str | None:
    """DeepSeek-V4's storages (families/deepseek_v4.py) named as the rules name them, or
    None for those the generic names cover (the embeddings, the experts, the loss)."""
    st = s.storage
    layer = _LAYER.match(scope)
    rest = (layer.group(2) or "") if layer else ""
    if scope == "model.hc_head":
        return "head.hc." + ("weight_fp32" if role == "mul.other" and st.op == "to" else
                             "streams" if role == "mul.other" else
                             "weights" if role in ("mul.self", "sigmoid.result") else
                             _V4_HC[role])
    if layer is None:
        return None
    if rest in _V4_NORMS:
        return "decoder." + _NORM_PARTS_V4.get(role, "normalized").join(
            (_V4_NORMS[rest] + ".", ""))
    hc = rest.split(".")[0]
    if hc in ("attn_hc", "ffn_hc"):
        if rest.endswith(".mix"):
            return f"decoder.{hc}.mix"
        if role == "mul.other":  # the collapse's streams, or the norm's 1/rms cast
            return f"decoder.{hc}." + ("norm" if st.op == "to" else "streams")
        if role == "mul.self":  # the projection's output the scales read, or pre
            return f"decoder.{hc}.weights"
        return f"decoder.{hc}.{_V4_HC[role]}"
    if rest in ("self_attn.q_a_proj", "self_attn.kv_proj") or rest.startswith(
            "self_attn.compressor.") and role == "mm.self":
        return "decoder.attn.input"
    if rest == "self_attn.q_b_proj":
        return "decoder.attn.q_b_input"
    if rest == "self_attn.o_a_proj":
        return "decoder.attn.o_a_input"
    if rest == "self_attn.o_b_proj":
        return "decoder.attn.o_b_input"
    if rest == "self_attn.compressor":
        if role == "mul.other" and not st.dtype.floating or st.op == "":
            return "decoder.attn.compressor_rope_cos_sin"
        return "decoder.attn." + ("compressor_kv" if role == "mul.self" else
                                  "compressor_weights")
    if rest == "self_attn":
        if role == "mul.other" and st.op == "":  # cos and sin, repeat_interleaved
            return "decoder.attn.rope_cos_sin"
        if role in ("mul.self", "mul.other"):  # q_b's output and 1/rms (cast)
            return "decoder.attn.q_b_norm"
        if role == "bmm.self":  # the rotated Q (a cat) or V repeated
            return "decoder.attn." + ("q" if st.op == "cat" else "kv")
        return "decoder.attn." + _V4_ATTN[role]
    if rest == "mlp.gate":
        return "decoder.ffn." + ("input" if role == "mm.self" else "router")
    if rest.startswith("mlp.shared_experts"):
        return "decoder.ffn.shared." + ("out_input" if role == "mm.self" else
                                        "clamp_inputs" if role == "clamp.self" else
                                        "activation")
    return None


_NORM_PARTS_V4 = {"pow.self": "input_fp32", "rsqrt.result": "rstd", "mul.other": "normalized"}
# DBRX's block modules (families/dbrx.py) as the decoders' tables key them: the norms and
# attention out of norm_attn_norm, the FFN as an MoE block's mlp, its routing (run in DbrxFFN
# itself) as the router's gate, router.layer as the router's linear
_DBRX = (("norm_attn_norm.attn", "self_attn"), ("norm_attn_norm.", ""),
         ("ffn.router.layer", "mlp.router"), ("ffn.experts", "mlp.experts"))


def _dbrx_scope(s: Saved) -> Saved:
    """A DBRX block's storage with its scope as the MoE decoders' layers name theirs."""
    layer = _LAYER.match(s.scope)
    if layer is None or not layer.group(2):
        return s
    rest = layer.group(2)
    for old, new in _DBRX:
        if rest.startswith(old):
            rest = new + rest[len(old):]
            break
    else:
        if rest == "ffn":
            rest = "mlp.gate"
        elif rest == "norm_attn_norm":  # the attention's residual dropout: the layer's own
            return replace(s, scope=s.scope[:layer.start(2) - 1])
    return replace(s, scope=s.scope[:layer.start(2)] + rest)


def _module(rest: str) -> str:
    """A layer-relative scope as the tables above key it: 'self_attn.q_proj' -> 'q_proj',
    'attn.c_proj' and 'mlp.c_proj' kept whole (two modules share the last name)."""
    parts = rest.split(".")
    if len(parts) > 1 and parts[-1].isdigit():  # a ModuleList's entry (LongCat's self_attn.0)
        parts = parts[:-1]
    return ".".join(parts[-2:]) if parts[-1] in ("c_proj", "Wo") else parts[-1]


_ORDER = ("K", "B", "T", "G", "Hkv", "H", "dh", "R", "dn", "dr", "dv", "E", "Ee", "rq", "rkv",
          "F", "Fe", "Fs", "X", "V", "P", "Ty", "NL", "r", "T32", "L")
# the graph's symbols as tcalc's formulas name them (the symbols activation_breakdown's rows
# and explain use)
SYMBOL_NAMES = {"B": "B", "T": "T", "G": "n_groups", "Hkv": "n_kv_heads", "H": "n_heads",
                "dh": "d_head", "E": "d_model", "F": "d_ff", "V": "vocab_size",
                "P": "max_positions", "r": "r", "T32": "T32", "L": "n_layers",
                "Ee": "d_embed", "Ty": "token_types", "X": "n_experts", "K": "top_k",
                "Fe": "d_ff_expert", "Fs": "d_ff_shared", "rq": "q_lora_rank",
                "rkv": "kv_lora_rank", "dn": "d_nope", "dr": "d_rope", "dv": "d_v",
                "R": "rotary_dims",
                "Di": "ssm_inner",
                "N": "ssm_state", "Kc": "ssm_conv", "Rd": "ssm_dt_rank", "Gs": "ssm_groups",
                "Hg": "heads_per_group", "Ph": "ssm_head_dim", "Q": "ssm_chunk",
                "Tq": "chunks", "NL": "num_labels",
                # DeepSeek-V4 (families/deepseek_v4.py)
                "Ns": "hc_streams", "Og": "o_groups", "Ro": "o_lora_rank",
                "Dg": "o_group_width", "Mc": "compress_csa", "Mh": "compress_hca",
                "Wc": "csa_entries", "Wh": "hca_entries", "Ih": "csa_index_heads",
                "Id": "csa_index_dim"}
# what each component is, beside its formula (no symbol names inside: they are words here)
DESCRIPTIONS = {
    "embed.token_ids": "int64 indices", "embed.position_ids": "int64 positions",
    "embed.dropout_mask": "dropout mask",
    "embed.scale": "the 0-d embedding scale cast to the model's dtype",
    "rope.cos_sin": "cos and sin, once for the model (Gemma 3: a pair per layer type)",
    "decoder.attn.rope_cos_sin": "sin and cos repeat_interleaved for Q and for K",
    "decoder.attn.kv_index": "int64 index of K and V in each group",
    "attn.alibi_mask": "ALiBi's bias as the attention mask, shared by the layers",
    "input": "norm input", "stats": "mean, rstd", "input_fp32": "the fp32 upcast",
    "rstd": "reciprocal std", "normalized": "the weight's mul keeps it",
    "decoder.attn.input": "Q/K/V matmul input",
    "decoder.cross.input": "Q matmul input",
    "decoder.cross.kv_input": "the encoder's output copied for K and V, per layer",
    "decoder.cross.weight_cast": "autocast's 16-bit copies of in_proj_weight's slices (a "
    "slice is cast at every call: only a parameter itself is cached)",
    "decoder.ffn.dropout_mask": "the FFN's inner dropout mask",
    "decoder.attn.qkv_output": "fused output, Q, K and V views of it",
    "decoder.attn.qkv": "the kernel's query, key and value",
    "decoder.attn.output_gate": "the sigmoid of the output gate (per channel, or per head)",
    "decoder.attn.gated_out": "the attention output the gate multiplies",
    "decoder.attn.query_scale": "the fp32 per-position query scale, shared by the layers",
    "decoder.attn.sink_lse": "the scores' logsumexp per row",
    "decoder.attn.sink_scale": "the sigmoid sink scale (fp32) and its cast",
    "decoder.attn.sink_scaled_out": "the attention output the sink scale multiplies",
    "decoder.attn.sink_row_max_index": "int64 index of each row's maximum over the scores "
    "and the sink column",
    "decoder.attn.qk_rotated": "Q and K rotated into new tensors",
    "decoder.attn.q": "Q·Kᵀ keeps Q", "decoder.attn.k": "Q·Kᵀ keeps K",
    "decoder.attn.v": "A·V keeps V", "decoder.attn.kv_cache_copies": "the generation cache's "
    "K and V", "decoder.attn.out": "the kernel's output", "decoder.attn.logsumexp":
    "log-sum-exp", "decoder.attn.rng_state": "flash-attn's (2,) int64 RNG state",
    "decoder.attn.mask": "attention mask", "decoder.attn.softmax":
    "softmax output", "decoder.attn.dropout_mask": "attention dropout mask",
    "decoder.attn.dropout_output": "A·V input",
    "decoder.attn.scores_clamp_input": "the masked scores, which the clamp's max keeps",
    "decoder.attn.scores_clamp_floor": "the clamp's 0-d fp32 finfo.min",
    "decoder.attn.softmax_cast": "cast back: the A·V input",
    "decoder.attn.o_input": "output projection input",
    "residual_dropout_mask": "dropout mask", "decoder.ffn.input": "FFN input",
    "decoder.ffn.activation": "what the activation keeps",
    "decoder.ffn.out_input": "down projection input", "head.input": "LM head input",
    "loss.log_softmax": "log-softmax", "loss.targets": "int64 labels",
    "loss.total_weight": "nll_loss's total weight", _MASK: "the eager causal mask",
    "decoder.checkpoint_input": "each layer's input", "lora_input": "the adapter's input",
    "head.project_input": "project_out's input",
    "embed.token_type_ids": "int64 token types", "embed.project_input": "the projection's "
    "input", "head.mlm.activation": "the head's activation "
    "keeps its input", "head.mlm.decoder_input": "the decoder's input",
    "one_plus_weight": "fp32 1 + weight, kept by the product",
    "weight_plus_one": "weight + 1, kept by the LayerNorm (Nemotron's LayerNorm1P)",
    "bias_cast": "the bias cast to autocast's dtype, kept by the LayerNorm",
    "fp32_terms": "x − mean twice, fp32", "weight_fp32": "the weight's fp32 copy",
    "decoder.attn.maps_concat": "the two calls' outputs concatenated",
    "decoder.attn.lambda": "λ, 0-d",
    "decoder.attn.softcap_tanh": "tanh of the scores / cap",
    "decoder.attn.row_max_index": "int64 index of each row's max (scores less it)",
    "decoder.ffn.post_norm.input_fp32": "the MoE output's fp32 upcast (its norm)",
    "decoder.attn.sink_scores": "the masked scores, which the sink's logsumexp keeps",
    "decoder.attn.sink_input": "A·V, which the sink's scale "
    "multiplies", "decoder.attn.sink_scale_cast": "the sink's scale cast to A·V's dtype",
    "head.softcap_tanh": "tanh of the logits / cap",
    "lora_dropout_mask": "the adapter's dropout mask", "lora_a_output": "lora_A's output",
    "decoder.ffn.router": "router scores (softmax; DeepSeek's sigmoid)",
    "decoder.ffn.router_fp32_input": "the router's fp32 copy of its input",
    "decoder.ffn.router_fp32_weight": "the router's fp32 copy of its weight",
    "decoder.attn.q_b_input": "q_b_proj's input", "decoder.attn.kv_b_input": "kv_b_proj's "
    "input (the normed latent)", "decoder.ffn.router_topk": "the top-k indices; "
    "the renormalisation's sum and original values; sparsemixer's masks, samples, "
    "softmaxes", "decoder.ffn.expert_index": "the "
    "routing's int64 token indices, int32 group offsets", "decoder.ffn.routed_input": "each "
    "expert's copy of its tokens", "decoder.ffn.routing_weight": "each slot's routing weight",
    "decoder.ffn.expert_output": "scaled by the routing weight", "decoder.ffn.expert_scatter":
    "index_add_'s source", "decoder.ffn.shared.activation": "what the shared expert's "
    "activation keeps", "decoder.ffn.shared.out_input": "the shared expert's down input",
    "decoder.ffn.shared_gate_product": "the shared expert's output and its sigmoid gate",
    "lora_merged_weight": "W + s·B·A, kept", "lora_weight_casts": "A and B, cast",
    "decoder.ffn.expert_weight_casts": "autocast's 16-bit copy of each expert's weight "
    "slices, made anew per expert (a slice is not a leaf: not in autocast's cache)",
    "decoder.mixer.input": "in_proj input", "decoder.mixer.in_proj_output": "the "
    "convolution's input, a view of in_proj's output", "decoder.mixer.conv_output":
    "the padded convolution's output (SiLU input)", "decoder.mixer.x": "x_proj input",
    "decoder.mixer.x_proj_output": "dt, B and C", "decoder.mixer.dt": "the step sizes "
    "(softplus, clamp)", "decoder.mixer.decay": "exp of the discretised A, the segment "
    "sums", "decoder.mixer.chunk_masks": "the segment sums' bool masks",
    "decoder.mixer.scan_operands": "each step's state (Mamba), the einsums' operands "
    "(Mamba-2)", "decoder.mixer.scan": "the scan's other products",
    "decoder.mixer.gated_norm": "y, silu(z), their product in fp32, rstd",
    "decoder.mixer.gated_norm.normalized": "the group-normed y the weight multiplies",
    "decoder.mixer.out_proj_input": "out_proj input",
    "decoder.mixer.conv_input": "B ⊙ x, the short convolution's input",
    "decoder.attn.gated_output": "the attention's output the gate multiplies",
    "decoder.mixer.scan_output": "the scan's output, kept by the fused kernel",
    "decoder.mixer.norm_rstd": "the gated RMSNorm's rstd, fp32",
    "decoder.mixer.A": "A = −exp(A_log) in fp32",
    "decoder.mixer.B_C": "B and C, contiguous copies", "decoder.mixer.D_dt_bias": "D and "
    "dt_proj's bias as fp32 copies", "decoder.mixer.scan_intermediates": "the scan's state "
    "per 2048-token chunk, fp32"}

# flash-attn's FlashAttnFunc: what it saves, as the SDPA kernels' roles
_FLASH_PARTS = {"q": "query", "k": "key", "v": "value", "out_padded": "output",
                "softmax_lse": "logsumexp"}
# mamba_ssm's MambaSplitConv1dScanCombinedFn and MambaInnerFn: each activation they save ->
# its row
KERNEL_ROWS = {"MambaSplitConv1dScanCombinedFn.zxbcdt": "mixer.in_proj_output",
               "MambaSplitConv1dScanCombinedFn.out_x": "mixer.scan_output",
               "MambaSplitConv1dScanCombinedFn.rstd": "mixer.norm_rstd",
               "MambaSplitConv1dScanCombinedFn.A": "mixer.A",
               "MambaInnerFn.xz": "mixer.in_proj_output",
               "MambaInnerFn.x_dbl": "mixer.x_proj_output", "MambaInnerFn.A": "mixer.A",
               "MambaInnerFn.B": "mixer.B_C", "MambaInnerFn.C": "mixer.B_C",
               "MambaInnerFn.D": "mixer.D_dt_bias", "MambaInnerFn.delta_bias": "mixer.D_dt_bias",
               "MambaInnerFn.scan_intermediates": "mixer.scan_intermediates",
               "MambaInnerFn.out": "mixer.scan_output",
               # causal-conv1d's CausalConv1dFn (LFM2's short convolution on CUDA): its saved
               # input, and its output (the row C's product keeps it under, noted alike)
               "CausalConv1dFn.x": "mixer.conv_input", "CausalConv1dFn.out": "mixer.conv_output",
               # mamba_ssm's SelectiveScanFn (Jamba's scan on CUDA): its contiguous inputs,
               # fp32 intermediates and output
               "SelectiveScanFn.u": "mixer.scan_input", "SelectiveScanFn.delta": "mixer.dt",
               "SelectiveScanFn.A": "mixer.A", "SelectiveScanFn.B": "mixer.B_C",
               "SelectiveScanFn.C": "mixer.B_C", "SelectiveScanFn.D": "mixer.D_dt_bias",
               "SelectiveScanFn.delta_bias": "mixer.D_dt_bias",
               "SelectiveScanFn.z": "mixer.gate",
               "SelectiveScanFn.x": "mixer.scan_intermediates",
               "SelectiveScanFn.out": "mixer.scan_output"}


def description(name: str) -> str:
    """The component's description: by its name, else by its last part (a norm's, an
    adapter's)."""
    if name.startswith("encoder."):  # an encoder layer's tensors are the decoders'
        name = "decoder." + name.removeprefix("encoder.")
    return DESCRIPTIONS.get(name) or DESCRIPTIONS.get(name.rsplit(".", 1)[-1], "")


def tcalc_symbols(values: dict[str, int]) -> dict[str, int]:
    """The graph's symbol values under the names its formulas are written with."""
    return {SYMBOL_NAMES.get(k, k): v for k, v in values.items()}


def formula(p: Poly) -> str:
    """Bytes as tcalc's formulas write them: sizes first, in B, T, heads, widths order,
    the bytes per element last ("B·T·d_model · 4")."""
    if not p.terms:
        return "0"
    parts = []
    for m, c in sorted(p.terms, key=lambda t: (-len(t[0]), t[0])):
        if "G" in m and "Hkv" in m:  # G·Hkv = H: repeat_kv's heads are the query heads
            rest = list(m)
            rest.remove("G")
            rest.remove("Hkv")
            m = (*rest, "H")
        sizes = [SYMBOL_NAMES.get(s, s)
                 for s in sorted(m, key=lambda s: (_ORDER.index(s) if s in _ORDER
                                                   else len(_ORDER), s))]
        body = "·".join(sizes)
        parts.append(str(c) if not body else body if c == 1 else f"{body} · {c}")
    return " + ".join(parts)


def _has(p: Poly, symbols: Iterable[str]) -> bool:
    wanted = set(symbols)
    return any(wanted.intersection(m) for m, _ in p.terms)


def _llama4(rest: str, role: str, s: Saved, pattern: str) -> str | None:
    """Llama 4's own storages (families/llama4.py): the L2 norms' fp32 input and 1/rms (Q's
    and K's, told apart by their heads), the NoPE layers' temperature scales, Llama4TextMoe's
    routing products (the tokens repeated per expert, the scores' column) and the experts'
    input; None for the rest, which Llama's and the MoE's names cover."""
    st = s.storage
    if rest.endswith("self_attn.qk_norm"):
        return "attn.k_l2norm" if _has(st.numel.poly, ("Hkv",)) else "attn.q_l2norm"
    if rest == "self_attn" and role == "mul.other" and not _has(st.numel.poly, ("B",)):
        return "attn.temperature_scales"  # attn_scales, fp32 (T,)
    in_moe = s.layer is not None and pattern[s.layer] == "E"
    if in_moe and rest == "feed_forward" and role in ("mul.self", "mul.other"):
        return "ffn.routing_products"
    if in_moe and rest == "feed_forward.experts" and role == "bmm.self":
        return "ffn.out_input" if _has(st.numel.poly, ("Fe",)) else "ffn.routed_input"
    return None


def _deltanet(sub: str, proj: str, role: str, s: Saved, adapted: bool) -> str:
    """A delta-rule mixer's storages (families/olmo_hybrid.py's Gated DeltaNet,
    families/kimi_linear.py's Kimi Delta Attention), by its submodule (sub), the projection
    in it (proj) and the op that made each: the projections' inputs, the convolution's input
    and output, beta and the decays, the L2-normed q and k, the padded inputs, the chunks'
    (Q, Q) scores and their other terms, the forward substitution's clones, the loop's
    states and new values, the gated norm."""
    st, poly = s.storage, s.storage.numel.poly
    if sub == "o_norm":  # the weight's product keeps the normed output
        return "mixer.gated_norm.normalized" if role == "mul.other" and st.op == "mul" \
            else "mixer.gated_norm"
    if adapted:
        part = _lora_part(role, s)
        if part:
            return f"mixer.{proj}.{part}"
    if proj == "o_proj":
        return "mixer.out_proj_input"
    if proj in ("f_b_proj", "g_b_proj"):  # Kimi's gates' low-rank inner inputs
        return "mixer.gate_inputs"
    if proj:
        return "mixer.input"
    if sub == "forget_gate":
        return "mixer.forget_gate"
    if role == "convolution.input":
        return "mixer.in_proj_output"
    if role == "silu.self" and st.op == "convolution":
        return "mixer.conv_output"
    if not _has(poly, ("T", "Tq")):
        # the loop's states (the zeros it starts from; each chunk's); A_log's decay
        return "mixer.loop" if _has(poly, ("dv", "dl")) else "mixer.beta_g"
    if st.op in ("sigmoid", "softplus", "neg") or role == "softplus.self":
        return "mixer.beta_g"
    if st.op in ("rsqrt", "sqrt", "to", "repeat_interleave") or (
            role == "mul.self" and st.op in ("silu", "clone")):
        return "mixer.qk_l2norm"
    if st.op == "pad":
        return "mixer.padded_inputs"
    if role == "masked_fill.mask":
        return "mixer.chunk_masks"
    if st.op == "clone":  # Kimi's forward substitution: each row's and block's clones
        return "mixer.solve"
    if st.op == "sub":  # each chunk's new values
        return "mixer.loop"
    if any(m.count("Q") >= 2 for m, _ in poly.terms):
        return "mixer.chunk_scores"
    return "mixer.chunk_terms"


class _Namer:
    """Names one trace's saved storages, reading the ops that saved them."""

    def __init__(self, family: Family, run: Run, ops: tuple[OpRecord, ...]) -> None:
        self.run = run
        self.ops = ops
        self.fused = isinstance(family, GPT2)
        # Phi-3's rotary concatenation: Q and K are new tensors, the rotated ones
        # (GPT-NeoX and Persimmon: Q and K rotated out of views of the fused projection)
        self.rope_concat = getattr(family, "rope_concat", False) or (
            isinstance(family, NeoX) and family.model in ("gpt_neox", "persimmon")) or (
            isinstance(family, Falcon) and not family.new)
        # OLMo2: post_attention_layernorm normalises the attention's output, and
        # post_feedforward_layernorm the MLP's (tcalc's attn.norm and ffn.norm)
        self.norms = dict(_NORMS, post_attention_layernorm="attn.norm",
                          post_feedforward_layernorm="ffn.norm") \
            if getattr(family, "post_norm", False) else \
            _SANDWICH if getattr(family, "sandwich", False) else _NORMS
        # K-EXAONE's, Kolibri1's and AFMoE's norms by their place (families/routed_moe.py)
        self.norms = dict(self.norms, **getattr(family, "norm_roles", {}))
        self.norm_parts = _GEMMA_NORM_PARTS if isinstance(family, Gemma | T5Gemma) else \
            _COHERE_NORM_PARTS if isinstance(family, Cohere) else \
            _DEBERTA_NORM_PARTS if isinstance(family, Deberta) else \
            _INT_NORM_PARTS if isinstance(family, IBert) else _NORM_PARTS
        self.yoso = isinstance(family, Yoso)
        self.deberta = isinstance(family, Deberta)
        # ModernBERT's and XLM's modules as the decoders' tables key them
        self.causal = isinstance(family, ModernBertDecoder)  # its layers are a decoder's
        # EuroBERT: Llama's layers read bidirectionally, named as the encoders' (encoder.*)
        self.bidirectional = isinstance(family, Llama) and family.bidirectional
        self.ctrl = isinstance(family, Ctrl)
        self.sink = isinstance(family, GraniteSwa)
        self.renamed = _MODERNBERT if isinstance(family, ModernBert) else \
            _XLM if isinstance(family, XLM) else None
        self.attn_dropout = (family.attn_pdrop if isinstance(family, GPT2 | GPTJ)
                             else family.dropout if isinstance(family, T5 | Paper)
                             else getattr(family, "attention_dropout", 0.0)) != 0
        self.t5 = isinstance(family, T5)
        self.bart = isinstance(family, Bart | Fsmt)
        # BigBird-Pegasus's stacks end in norms named layernorm_embedding
        self.bart_final_embedding_norm = isinstance(family, Bart) and family.bigbird
        self.paper = isinstance(family, Paper)
        self.t5gemma = isinstance(family, T5Gemma)
        self.mixer = isinstance(family, Mamba | Mamba2)
        # Bamba: a layer's kind (F attention, M the mixer) names its first norm
        self.kinds = family.kinds if isinstance(family, Bamba | OlmoHybrid) else \
            family.mixers if isinstance(family, Jamba | KimiLinear | Lfm2 | Minimax) else \
            "".join("M" if k in "cd" else "F" for k in family.kinds) \
            if isinstance(family, Qwen3Next) else ""
        self.short_conv = isinstance(family, Lfm2)
        # the delta-rule mixers' module (OLMo Hybrid's, Kimi Linear's); OLMo Hybrid: OLMo 3's
        # post-norms in the attention layers, pre-norms in the others
        self.olmo_hybrid = isinstance(family, OlmoHybrid)
        self.delta = "linear_attn" if self.olmo_hybrid else \
            "self_attn" if isinstance(family, KimiLinear) else ""
        if self.olmo_hybrid:
            self.norms = dict(_NORMS, post_attention_layernorm="attn.norm",
                              post_feedforward_layernorm="ffn.norm")
        self.encoder = isinstance(family, Bert)
        self.encoder_modules = {**_ENCODER_MODULES, **_DISTILBERT} \
            if type(family).__name__ == "DistilBert" else _ENCODER_MODULES
        if isinstance(family, Bert):  # the MLM head's modules: scope -> tcalc's name
            scope, dense, norm, decoder, _ = HEADS[family.head]
            at = (scope + ".") if scope else ""
            self.head = {at + dense: "dense", at + norm: "norm", at + decoder: "decoder"}
        self.moe = isinstance(family, Moe | Jamba | NemotronH | MiMoV2Flash | MiniMaxM3
                              | Lfm2Moe | Minimax | DeepseekV4 | GraniteMoeHybrid)
        self.lightning = isinstance(family, Minimax)
        self.dbrx = isinstance(family, Dbrx)
        # Nemotron-H: every layer's module is `mixer`, named by the layer's kind
        self.nemotron = family.kinds if isinstance(family, NemotronH) else ""
        if self.nemotron:
            self.kinds = self.nemotron
        # Beam's attention output gate (families/beam.py)
        self.output_gate = type(family).__name__ == "Beam" or getattr(family, "output_gate",
                                                                       False)
        self.jamba = isinstance(family, Jamba)
        self.parameter_router = self.jamba or type(family).__name__ in (
            "GptOss", "GraniteMoeSwa", "GraniteMoeHybrid", "GraniteMoe") or getattr(
            family, "router", "") == "aria"
        # GraniteMoeSWA's sink, applied after attention (families/granitemoe_swa.py)
        self.sink_lse = type(family).__name__ == "GraniteMoeSwa"
        self.out_gate = isinstance(family, Qwen3Next)
        self.gemma4 = isinstance(family, Gemma4)
        self.gemma3n = isinstance(family, Gemma3n)
        self.deepseek_v4 = isinstance(family, DeepseekV4)
        self.llama4 = family.pattern if isinstance(family, Llama4) else ""

    def _scores(self, s: Saved) -> bool:
        """Whether the op that saved s made the scores (Q·Kᵀ: a T² output) rather than
        the probabilities' product with V."""
        out = product(self.ops[s.op_index].shape).poly
        return any(m.count("T") >= 2 for m, _ in out.terms)

    def name(self, s: Saved) -> str:
        scope, role = s.scope, s.role
        if role == "checkpoint.input":
            return self._checkpoint_input(s)
        if self.deepseek_v4:
            named = _deepseek_v4(scope, role, s)
            if named is not None:
                return named
        if self.nemotron:
            s = _nemotron_scope(s, self.nemotron)
            scope = s.scope
        if role == "bnb_matmul.A":
            # a bitsandbytes linear's input (ops.bnb_matmul), named as the input of the
            # nn.Linear (Conv1D) it replaces
            role = "mm.self"
        if self.dbrx:
            if role == "clamp.self":  # qkv_states.clamp(±clip_qkv): Wqkv's output
                return "decoder.attn.qkv_clamp_input"
            if role == "mul_.other":  # the router's jitter: hidden_states *= noise
                return "decoder.ffn.router_jitter"
            s = _dbrx_scope(s)
            scope = s.scope
        if self.gemma4:
            named = self._gemma4(scope, role, s)
            if named is not None:
                return named
        if self.encoder:
            return self._encoder(scope, role, s)
        if self.t5:
            return self._t5(scope, role, s)
        if self.bart:
            return self._bart(scope, role, s)
        if self.paper:
            return self._paper(scope, role, s)
        if self.ctrl:
            return self._ctrl(scope, role, s)
        if self.t5gemma:
            return self._t5gemma(scope, role, s)
        if self.renamed is not None:  # encoders named as the decoders' layers are
            name = self._modernbert(scope, role, s)
            return "encoder." + name.removeprefix("decoder.") \
                if name.startswith("decoder.") and not self.causal else name
        layer = _LAYER.match(scope)
        name = self._outside(scope, role, s) if layer is None else \
            self._in_layer(_module(layer.group(2) or ""), role, s)
        return "encoder." + name.removeprefix("decoder.") \
            if self.bidirectional and name.startswith("decoder.") else name

    def _ctrl(self, scope: str, role: str, s: Saved) -> str:
        """CTRL's storages: its layers' modules by _CTRL, the layer's two functional
        dropouts by the module that ran before (the attention's dense or the MLP's)."""
        layer = _LAYER.match(scope)
        if layer is None:
            if scope == "transformer.layernorm":
                return "decoder." + self._norm("final_norm", role)
            return self._outside(scope, role, s)
        rest = layer.group(2) or ""
        if not rest and role in ("mul.other", "native_dropout.result1"):
            last = next(r.scope for r in reversed(self.ops[:s.op_index]) if r.scope != scope)
            return "decoder.attn.residual_dropout_mask" if ".multi_head_attention" in last \
                else "decoder.ffn.residual_dropout_mask"
        return self._in_layer(_CTRL.get(rest, rest), role, s)

    def _modernbert(self, scope: str, role: str, s: Saved) -> str:
        """ModernBERT's storages (families/modernbert.py) and XLM's (families/xlm.py): their
        layers' by the decoders' tables (_MODERNBERT: Wqkv, Wo, Wi, the norms; _XLM), the
        embeddings', the heads'."""
        table = self.renamed or {}
        if scope.startswith("lm_head"):  # ModernBertDecoderForCausalLM's prediction head
            scope = "head" + scope.removeprefix("lm_head")
        layer = _LAYER.match(scope)
        if layer is not None:
            module = _module(layer.group(2) or "")
            if role == "masked_fill.mask":
                return "decoder.attn.mask"  # XLM's mask == 0
            if not module and role in ("mul.other", "native_dropout.result1"):
                # XLM's attention dropout before the residual (in the layer's scope), and
                # its mask multiplied in after each layer
                return "decoder.attn.residual_dropout_mask" if _has(
                    s.storage.numel.poly, ("E",)) else "decoder.mask"
            return self._in_layer(table.get(module, module), role, s)
        if scope == "transformer.embeddings" and role == "embedding.indices":
            return "embed.token_ids"
        if scope == "transformer.layer_norm_emb":
            return "embed." + self._norm("norm", role)
        if scope == "transformer" and role in ("mul.other", "native_dropout.result1"):
            return "embed.dropout_mask" if _has(s.storage.numel.poly, ("E",)) else \
                "embed.mask"
        if scope == "pred_layer.proj" and role == "addmm.self":
            return "head.input"
        if scope == "model.embeddings.norm":
            return "embed." + self._norm("norm", role)
        if scope == "model.embeddings.tok_embeddings":
            return "embed.token_ids"
        if scope == "head.norm":
            return "head.mlm." + self._norm("norm", role)
        if scope == "head.dense":
            part = _lora_part(role, s) if self.run.lora and self.run.lora.adapts(scope) \
                else None
            return f"head.mlm.dense.{part}" if part else "head.input"
        if scope == "head" and role == "gelu.self":
            return "head.mlm.activation"
        if scope == "decoder" and role == "addmm.self":
            return "head.mlm.decoder_input"
        if scope == "model.final_norm":
            return "decoder." + self._norm("final_norm", role)
        return self._outside(scope, role, s)

    def _in_layer(self, module: str, role: str, s: Saved) -> str:
        scope, st = s.scope, s.storage
        layer = _LAYER.match(scope)
        rest = (layer.group(2) or "") if layer else ""
        if self.mixer or rest.startswith("mamba"):
            return "decoder." + self._mixer(rest, role, s)
        if self.delta and s.layer is not None and self.kinds[s.layer] == "M":
            if rest.startswith(self.delta):
                parts = rest.split(".")[1:]
                proj = next((p for p in parts if p.endswith("_proj")), "")
                lora = self.run.lora
                adapted = bool(proj) and lora is not None and lora.adapts(scope)
                return "decoder." + _deltanet(parts[0] if parts else "", proj, role, s,
                                              adapted)
            if self.olmo_hybrid and module == "post_attention_layernorm":
                return "decoder." + self._norm("ffn.norm", role)  # the MLP's pre-norm
        if rest.startswith("linear_attn"):  # Qwen3-Next's Gated DeltaNet: a mixer's names
            return "decoder." + self._mixer(rest.replace("linear_attn", "mixer", 1),
                                            role, s)
        if self.short_conv and rest.startswith("conv"):
            return "decoder." + self._short_conv(rest, role, s)
        if self.lightning and rest.startswith("self_attn") and s.layer is not None \
                and self.kinds[s.layer] == "M":
            return "decoder." + self._lightning(rest, role, s)
        if self.kinds and module in ("input_layernorm", "operator_norm",
                                     "post_operator_norm") \
                and s.layer is not None \
                and self.kinds[s.layer] == "M":
            where = "mixer.post_norm" if module.startswith("post") else "mixer.norm"
            return "decoder." + self._norm(where, role)
        if self.short_conv and module == "self_attn" and (role == "sigmoid.result" or role in (
                "mul.self", "mul.other") and st.op == "sigmoid"):
            return "decoder.attn.output_gate"  # LFM3's sigmoid(g_proj(x)), per head
        if self.short_conv and module == "self_attn" and role == "mul.self":
            return "decoder.attn.gated_output"  # the attention's output the gate scales
        if st.name in _ROPES or st.name.endswith(".rotary_emb"):
            return "rope.cos_sin"
        if st.op == "repeat_interleave":  # GPT-J, CodeGen: sin and cos for Q and for K
            return "decoder.attn.rope_cos_sin"
        if st.name == "causal_mask" and role.endswith(".attn_mask"):
            return "attn.alibi_mask"  # Falcon: ALiBi's masked bias, one for the layers
        if role == "index.indices0" and st.dtype.name == "int64" and not self.moe:
            return "decoder.attn.kv_index"  # Falcon's qkv[:, :, :, [-2]] and [[-1]]
        lora = self.run.lora
        # (Jamba's and GPT-OSS's routers are parameters, not nn.Linear: peft leaves them)
        if module in _ADAPTED and lora is not None and lora.adapts(scope) \
                and not (self.parameter_router and module == "router"):
            return "decoder." + self._adapter(module, role, s)
        if module in self.norms:
            if role == "native_layer_norm.input" and st.name.endswith(".query_key_value"):
                return "decoder.attn.qkv_output"  # Persimmon's q_layernorm: a view of it
            return "decoder." + self._norm(self.norms[module], role, s)
        llama4 = _llama4(rest, role, s, self.llama4) if self.llama4 else None
        if llama4 is not None:
            return "decoder." + llama4
        moe = self._moe(rest, role, s) if self.moe else None
        if moe is not None:
            return "decoder." + moe
        if module in _INPUTS and role in ("mm.self", "addmm.self"):
            return "decoder." + _INPUTS[module]
        if module in ("attn", "self_attn", "attention", "self_attention"):
            return "decoder.attn." + self._attention(role, s)
        if module == "" and role in ("mul.other", "native_dropout.result1"):
            # OPT's (BioGPT's, TrOCR's) functional dropouts in the layer: on the attention's
            # output or on fc2's, as the last op in a module before it says
            last = next(r.scope for r in reversed(self.ops[:s.op_index]) if r.scope != scope)
            return "decoder.attn.residual_dropout_mask" if ".self_attn" in last \
                or ".attn." in last else "decoder.ffn.residual_dropout_mask"  # (MPT's attn)
        if module == "" and role == "relu.result":  # OPT's activation_fn: fc2's input
            return "decoder.ffn.out_input"
        if module == "" and role == "gelu.self":  # BioGPT's activation_fn: fc1's output
            return "decoder.ffn.activation"
        if module == "act_fn":  # xIELU's module: its alphas (1,) and its tensors
            return "decoder.ffn.activation_mask" if role == "where.condition" else \
                "decoder.ffn.activation"
        if module in ("mlp", "mlps", "feed_forward", "ffn"):  # (LongCat-Flash's mlps.i)
            if role in ("mul.other", "native_dropout.result1") and not _has(
                    st.numel.poly, ("F",)):
                return "decoder.ffn.residual_dropout_mask"
            # (GteMLP's dropout on the gated product: its CPU noise is a mul.other, CUDA's
            # mask native_dropout's; both F wide, kept with the activation)
            if role in ("pow.self", "tanh.result", "silu.self", "gelu.self", "mul.self",
                        "mul.other", "relu.result", "native_dropout.result1",
                        "clamp.self", "sigmoid.result",  # (MiniMax-M3's clamped SwiGLU)
                        "GeLUFunction.saved0"):  # (BLOOM's BloomGelu keeps its input)
                return "decoder.ffn.activation"
        raise ValueError(f"no component name for {role} saved in {scope} "
                         f"(made in {st.name or 'the model'})")

    def _encoder(self, scope: str, role: str, s: Saved) -> str:
        """A BERT-style encoder's storage: a layer's as the decoders' (encoder.* names),
        the embeddings', the projection's (ELECTRA), the MLM head's and the loss's."""
        layer = _ENCODER_LAYER.match(scope)
        if layer is not None and self.deberta:
            rel = _deberta_attention(layer.group(2) or "", role, s)
            if rel is not None:
                return "encoder.attn." + rel
        if layer is not None:
            module = self.encoder_modules.get(layer.group(2) or "")
            if module is None:
                raise ValueError(f"no component name for {role} saved in {scope}")
            return "encoder." + self._in_layer(module, role, s).removeprefix("decoder.")
        last = scope.rsplit(".", 1)[-1]
        lora = self.run.lora
        adapted = lora is not None and lora.adapts(scope)
        classifier = _classifier(scope, role, s, adapted)
        if classifier is not None:
            return classifier
        if role == "embedding.indices":
            return {"word_embeddings": "embed.token_ids",
                    "position_embeddings": "embed.position_ids",
                    "token_type_embeddings": "embed.token_type_ids",
                    # LayoutLM's bbox (B, T, 4) and its heights and widths
                    "x_position_embeddings": "embed.bbox", "y_position_embeddings":
                    "embed.bbox", "h_position_embeddings": "embed.bbox_extents",
                    "w_position_embeddings": "embed.bbox_extents",
                    # RoCBert's shape and pronunciation ids (zeros)
                    "shape_embed": "embed.side_ids", "pronunciation_embed": "embed.side_ids",
                    # MPNet's relative position buckets, (T, T)
                    "relative_attention_bias": "encoder.relative_position"}[last]
        if self.deberta and last == "embeddings" and role == "mul.other" and not _has(
                s.storage.numel.poly, ("E",)):
            return "embed.mask"  # DeBERTa's attention mask of ones multiplied in
        if last == "embeddings" and role in ("mul.other", "native_dropout.result1"):
            return "embed.dropout_mask"
        if last == "LayerNorm" and scope.endswith("embeddings.LayerNorm"):
            return "embed." + self._norm("norm", role)
        if scope in _ENCODER_FINAL_NORMS:
            return "encoder." + self._norm("final_norm", role)
        if self.deberta and scope.endswith("encoder.LayerNorm"):  # v2's norm_rel_ebd
            return "encoder.rel_table." + self._norm("norm", role)
        if last in ("embeddings_project", "map_inputs_layer", "embedding_hidden_mapping_in"):
            # ELECTRA's projection to hidden_size (ALBERT's in its encoder); RoCBert's from
            # the concatenated tables
            part = _lora_part(role, s) if adapted else None
            return f"embed.project_in.{part}" if part else "embed.project_input"
        part_of_head = self.head.get(scope)
        if part_of_head == "dense":
            part = _lora_part(role, s) if adapted else None
            return f"head.mlm.dense.{part}" if part else "head.input"
        if part_of_head == "norm":
            return "head.mlm." + self._norm("norm", role)
        if part_of_head == "decoder" and role == "addmm.self":
            return "head.mlm.decoder_input"
        if role in ("gelu.self", "silu.self") or last == "activation":
            return "head.mlm.activation"  # (ALBERT's gelu_new: its ops' tensors)
        return self._outside(scope, role, s)

    def _t5(self, scope: str, role: str, s: Saved) -> str:
        """T5's storages: a block's as its sublayer's (encoder.attn.*, decoder.cross.*,
        decoder.ffn.*), the relative buckets, the encoder's output the cross-attention
        reads (once for the model), each stack's embeddings and final norm, the head's."""
        st = s.storage
        stack = scope.split(".", 1)[0]
        if role == "embedding.indices":
            # (each stack's token ids: the input ids and the shifted labels)
            return ("embed.token_ids" if st.name in ("input_ids", "decoder_input_ids")
                    else f"{stack}.attn.side_buckets"  # LongT5's transient-global (B, T, Tg)
                    if st.name == "side_relative_position_bucket"
                    else f"{stack}.attn.relative_buckets")
        layer = _T5_LAYER.match(scope)
        if layer is None:
            if scope in ("encoder", "decoder") and role in ("mul.other",
                                                             "native_dropout.result1"):
                final = any(o.scope.startswith(stack + ".block.")
                            for o in self.ops[:s.op_index])
                return f"{stack}.final_dropout_mask" if final else "embed.dropout_mask"
            if scope.endswith(".final_layer_norm"):
                return f"{stack}.final_norm.{_T5_NORM_PARTS[role]}"
            return self._outside(scope, role, s)
        if stack == "decoder" and not st.name.startswith("decoder"):
            # the encoder's output, read by every layer's K and V: once for the model
            return "decoder.cross.encoder_output"
        sub = _T5_SUBLAYERS[stack][int(layer.group(2))]
        rest = layer.group(3) or ""
        module = rest.rsplit(".", 1)[-1]
        prefix = f"{stack}.{sub}."
        if role == "where.condition":
            return prefix + "causal_mask"
        if rest == "layer_norm":
            return prefix + "norm." + _T5_NORM_PARTS[role]
        if rest.startswith(("mlp.router", "mlp.experts")):  # Switch Transformers' sparse MLP
            return prefix + self._switch_mlp(scope, rest, role, s)
        if module == "global_input_layer_norm":  # LongT5's transient-global inputs' norm
            return prefix + "global_norm." + _T5_NORM_PARTS[role]
        lora = self.run.lora
        if module in _T5_INPUTS and lora is not None and lora.adapts(scope):
            part = _lora_part(role, s)
            if part:
                return f"{prefix}{_T5_ADAPTED[module]}.{part}"
            if st.op.startswith("sdpa_"):
                return prefix + "out"
            return prefix + _T5_INPUTS[module]
        if module in _T5_INPUTS and role == "mm.self":
            return prefix + _T5_INPUTS[module]
        dropout = role in ("mul.other", "native_dropout.result1") and st.op == ""
        if not rest:  # the sublayer's own dropout, before the residual add
            return prefix + "residual_dropout_mask"
        if module in ("DenseReluDense", "mlp"):  # (Switch Transformers' dense MLP: mlp)
            return prefix + ("inner_dropout_mask" if dropout else "activation")
        if module in ("LocalSelfAttention", "TransientGlobalSelfAttention"):
            if st.name == "one_hot_block_ids":  # the global aggregates' einsum keeps it
                return prefix + "global_one_hot"
            return prefix + self._local_attention(role, s, dropout)
        return prefix + self._attention(role, s)

    def _switch_mlp(self, scope: str, rest: str, role: str, s: Saved) -> str:
        """Switch Transformers' sparse MLP (families/switch.py): the router's jitter noise,
        its input (or fp32 copy) and fp32 weight, softmax and top index; the experts' (their
        loop run by expert_0 for all tokens) named as the MoE family's; peft's adapters'."""
        st, parts = s.storage, rest.split(".")
        lora = self.run.lora
        if role.endswith("mm.mat2"):  # a 16-bit model's classifier, made fp32
            return "router_fp32_weight"
        part = _lora_part(role, s) if parts[-1] in ("classifier", "wi", "wo") and \
            lora is not None and lora.adapts(scope) else None
        if parts[1] == "router":
            if part:
                return f"router.{part}"
            if role == "mul_.other":
                return "router_jitter"
            if role in ("mm.self", "addmm.self"):
                return "router_fp32_input" if st.op == "to" else "input"
            return "router" if role == "softmax.result" else "router_topk"
        if part:
            return f"experts.{_T5_ADAPTED[parts[-1]]}.{part}"
        if not st.dtype.floating:
            return "expert_index"
        if role == "index_add_.source":
            return "expert_scatter"
        if st.op == "index":  # the tokens' copies, the routing weights gathered
            return "routed_input" if role.endswith("mm.self") else "routing_weight"
        if role.endswith("mm.self"):
            return "out_input"
        if role in ("mul.other", "native_dropout.result1") and st.op == "":
            return "inner_dropout_mask"
        return "activation" if _has(st.numel.poly, ("F",)) else "expert_output"

    def _local_attention(self, role: str, s: Saved, dropout: bool) -> str:
        """LongT5's local attention core: its two einsums' operands (bmm's, or a product
        where the contracted size is 1), the fp32 softmax, the dropout's noise."""
        if role == "softmax.result":
            return "softmax"
        if dropout:
            return "dropout_mask"
        out = product(self.ops[s.op_index].shape).poly  # the scores: (Q, 3Q) per block
        scores = any(m.count("Q") >= 2 for m, _ in out.terms)
        first = role in ("bmm.self", "mul.self")
        if not scores:
            return ("dropout_output" if self.attn_dropout else "softmax_cast") if first \
                else "v"
        return "q" if first else "k"

    def _bart(self, scope: str, role: str, s: Saved) -> str:
        """BART's (and its kin's), Marian's and FSMT's storages: a layer's as its sublayer's
        (encoder.attn.*, decoder.cross.*, decoder.ffn.*), the encoder's output the
        cross-attention reads (once for the model), each stack's embeddings and final norm,
        the head's."""
        st = s.storage
        layer = _BART_LAYER.match(scope)
        if layer is None:
            last = scope.rsplit(".", 1)[-1]
            if role == "embedding.indices":
                return "embed.position_ids" if last == "embed_positions" else "embed.token_ids"
            if last in ("encoder", "decoder") and role in ("mul.other",
                                                           "native_dropout.result1"):
                return "embed.dropout_mask"
            if last == "layernorm_embedding" and not self.bart_final_embedding_norm:
                return "embed." + self._norm("norm", role)
            if last in ("layer_norm", "layernorm_embedding"):  # the pre-norm kin's final norms
                return f"{scope.split('.')[1]}." + self._norm("final_norm", role)
            if last == "output_projection":  # FSMT's head, an adapted nn.Linear to peft
                lora = self.run.lora
                part = _lora_part(role, s) if lora is not None and lora.adapts(scope) else None
                return f"head.{part}" if part else "head.input"
            return self._outside(scope, role, s)
        stack, rest = layer.group(1), layer.group(2) or ""
        if stack == "decoder" and not st.name.startswith("model.decoder"):
            return "decoder.cross.encoder_output"  # once for the model, read by every layer
        if not rest:  # the layer's own ops: the activation, the residual dropouts
            if role in ("mul.other", "native_dropout.result1"):
                return f"{stack}.residual_dropout_mask"
            if role == "clamp.self":  # the pre-norm kin's float16 clamp of the output
                return f"{stack}.output_clamp_input"
            if role == "mul.other" and st.op == "add":
                return f"{stack}.ffn.activation"  # gelu_new's 1 + tanh(...)
            return f"{stack}.ffn.activation"
        sub, part = _BART_MODULES[rest]
        prefix = f"{stack}.{sub}."
        if part == "norm":
            return prefix + self._norm("norm", role)
        if not part:
            return prefix + self._attention(role, s)
        lora = self.run.lora
        if lora is not None and lora.adapts(scope):
            adapted = _lora_part(role, s)
            if adapted:
                return f"{prefix}{_BART_ADAPTED[rest.rsplit('.', 1)[-1]]}.{adapted}"
            if st.op.startswith("sdpa_"):
                return prefix + "out"
        return prefix + part

    def _paper(self, scope: str, role: str, s: Saved) -> str:
        """torch.nn.Transformer's storages: a layer's as its sublayer's (encoder.attn.*,
        decoder.cross.*, decoder.ffn.*), nn.MultiheadAttention's copies of its transposed
        inputs (the cross-attention's of the encoder's output, per layer), the stacks' final
        norms, the embeddings' dropout, the output projection's input."""
        layer = _PAPER_LAYER.match(scope)
        if layer is None:
            if not scope and role in ("mul.other", "native_dropout.result1"):
                return "embed.dropout_mask"
            if not scope and role == "mm.self":
                return "head.input"  # F.linear(out, embed.weight)
            stack = scope.removeprefix("transformer.").removesuffix(".norm")
            if scope.endswith(".norm") and stack in ("encoder", "decoder"):
                return f"{stack}." + self._norm("final_norm", role)
            return self._outside(scope, role, s)
        stack, rest = layer.group(1), layer.group(2) or ""
        if not rest:  # the layer's ReLU and dropouts (the FFN's inner one is F wide)
            if role == "relu.result":
                return f"{stack}.ffn.activation"
            inner = _has(s.storage.numel.poly, ("F",))
            return f"{stack}.ffn.dropout_mask" if inner else f"{stack}.residual_dropout_mask"
        if rest in _PAPER_NORMS[stack]:
            return f"{stack}.{_PAPER_NORMS[stack][rest]}." + self._norm("norm", role)
        sub, part = _PAPER_MODULES[rest]
        if part:
            return f"{stack}.{sub}.{part}"
        if role in ("mm.mat2", "addmm.mat2"):  # autocast's cast of an in_proj slice
            return f"{stack}.{sub}.weight_cast"
        if role in ("mm.self", "addmm.self"):  # in_proj's input (copied from its (T, B,
            # E) view, unless B = 1 makes that view contiguous)
            width = product(self.ops[s.op_index].shape).poly
            kv = sub == "cross" and any(c == 2 for _, c in width.terms)
            return f"{stack}.{sub}.kv_input" if kv else f"{stack}.{sub}.input"
        return f"{stack}.{sub}." + self._attention(role, s)

    def _t5gemma(self, scope: str, role: str, s: Saved) -> str:
        """T5Gemma's storages: a layer's as its sublayer's (encoder.attn.*, decoder.cross.*,
        decoder.ffn.post_norm.*), the encoder's output the cross-attention reads (once for
        the model), each stack's embeddings, scale, RoPE tables and final norm, the head's."""
        st = s.storage
        if st.name.endswith("rotary_emb"):
            return "rope.cos_sin"
        layer = _T5GEMMA_LAYER.match(scope)
        if layer is None:
            last = scope.rsplit(".", 1)[-1]
            if last in ("encoder", "decoder") and role == "mul.other" \
                    and st.name == "normalizer":
                return "embed.scale"  # torch.tensor(hidden_size ** 0.5), per stack
            if last in ("encoder", "decoder") and role in ("mul.other",
                                                           "native_dropout.result1"):
                return f"{last}.final_dropout_mask" if st.name.endswith(".norm") \
                    else "embed.dropout_mask"
            if last == "norm":
                return scope.split(".")[1] + "." + self._norm("final_norm", role)
            if scope == "lm_head.out_proj" and role == "mm.self":
                return "head.input"
            return self._outside(scope, role, s)
        stack, rest = layer.group(1), layer.group(2) or ""
        if stack == "decoder" and st.name.startswith("model.encoder"):
            return "decoder.cross.encoder_output"  # once for the model, read by every layer
        first, _, tail = rest.partition(".")
        if first in _T5GEMMA_NORMS:
            return f"{stack}." + self._norm(_T5GEMMA_NORMS[first], role)
        if not first:  # the layer's residual dropouts
            return f"{stack}.residual_dropout_mask"
        sub = _T5GEMMA_SUBLAYERS[first]
        prefix = f"{stack}.{sub}."
        if not tail:
            if sub == "ffn":  # the gate's GELU, the product's dropout
                return prefix + "activation"
            return prefix + self._attention(role, s)
        lora = self.run.lora
        if lora is not None and lora.adapts(scope):
            part = _lora_part(role, s)
            if part:
                return f"{prefix}{_ADAPTED[tail].split('.')[1]}.{part}"
        return prefix + _INPUTS[tail].split(".")[1]

    def _outside(self, scope: str, role: str, s: Saved) -> str:
        last = scope.rsplit(".", 1)[-1]
        if role == "embedding.indices":
            return "embed.position_ids" if last in ("wpe", "embed_positions") \
                else "embed.token_ids"
        if role == "index.indices0" and last == "embed_positions":  # Whisper's weight[ids]
            return "embed.position_ids"
        if last in ("layernorm_embedding", "word_embeddings_layernorm"):  # TrOCR's, BLOOM's
            return "embed." + self._norm("norm", role, s)
        if last in ("project_in", "project_out"):  # OPT's projections of the embeddings
            lora = self.run.lora
            part = _lora_part(role, s) if lora is not None and lora.adapts(scope) else None
            where = "embed" if last == "project_in" else "head"
            return f"{where}.{last}.{part}" if part else f"{where}.project_input"
        if scope in ("transformer", "gpt_neox", "model", "biogpt", "model.decoder") \
                and role in ("mul.other", "native_dropout.result1"):
            return "embed.dropout_mask"
        if last == "embed_tokens" and role == "mul.other":  # MiniCPM3's cast scale
            return "embed.scale"
        if last in _NORMS and scope != "model.layers":
            return "decoder." + self._norm("final_norm", role, s)
        lora = self.run.lora
        if scope == "lm_head" and lora is not None and "all-linear" not in lora.targets \
                and lora.adapts(scope):
            part = _lora_part(role, s)  # peft's lm_head target (transformer_calc.lora)
            return f"head.lm.{part}" if part else "head.input"
        if scope in ("lm_head", "embed_out", "output_projection", "proj_out") \
                and role in ("mm.self", "addmm.self"):
            return "head.input"
        if role == "tanh.result" and not scope:
            return "head.softcap_tanh"  # Gemma 2's final logits: cap · tanh(logits / cap)
        if role == "log_softmax.result":
            return "loss.log_softmax"
        if role == "nll_loss.target":
            return "loss.targets"
        if role == "nll_loss.total_weight":
            return "loss.total_weight"
        raise ValueError(f"no component name for {role} saved in {scope or 'the model'}")

    def _gemma4(self, scope: str, role: str, s: Saved) -> str | None:
        """Gemma 4's own storages (families/gemma4.py): its norms' parts (Gemma4RMSNorm:
        pow keeps the fp32 input, then the mean square; the product keeps 1/rms; the
        weight's product its fp32 copy), v_norm, the per-layer inputs and each layer's
        gated use of them; None: named as Gemma's."""
        st = s.storage
        last = scope.rsplit(".", 1)[-1]
        layer = _LAYER.match(scope)
        where = "decoder." if layer is not None else ""
        linear = _GEMMA4_LINEARS.get(last)
        if linear is not None:  # its input; peft's adapter tensors where it is adapted
            lora = self.run.lora
            part = _lora_part(role, s) if lora is not None and lora.adapts(scope) else None
            return f"{linear[0]}.{part}" if part else linear[1]
        if layer is not None and layer.group(2) is None and role in ("mul.self", "mul.other"):
            # hidden_states * per_layer_input: the activation and the per-layer inputs
            return "embed.per_layer_inputs" if st.layer is None else "decoder.ple.activation"
        if layer is not None and layer.group(2) is None and role == "gelu.self":
            return "decoder.ple.activation"
        rest = (layer.group(2) or "") if layer is not None else ""
        if self.gemma3n:
            named = self._gemma3n(scope, rest if layer is not None else None, role, s)
            if named is not None:
                return named
        if rest == "router" or rest.startswith(("router.", "experts")):
            return "decoder." + self._gemma4_experts(rest, role, s)
        norm = {"per_layer_projection_norm": "embed.per_layer_norm",
                "post_per_layer_input_norm": "decoder.ple.norm",
                "v_norm": "decoder.attn.v_norm",
                "post_feedforward_layernorm_1": "decoder.ffn.dense_post_norm",
                "pre_feedforward_layernorm_2": "decoder.ffn.experts_norm",
                "post_feedforward_layernorm_2": "decoder.ffn.experts_post_norm"}.get(last)
        if norm is None and (last in self.norms or last == "norm"):
            norm = (where + self.norms.get(last, "final_norm")) if layer is not None \
                else "decoder.final_norm"
        return None if norm is None else _gemma4_norm(norm, role, s)

    def _gemma3n(self, scope: str, rest: str | None, role: str, s: Saved) -> str | None:
        """Gemma 3n's own storages (families/gemma3n.py): AltUp's (the streams' projections
        and rescaling outside the layers; per layer the router, the coefficients, the
        prediction's product, the correction's), LAuReL's and the sparse FFN gate's; None:
        named as Gemma 4's. rest: the scope within the layer (None outside the layers)."""
        parts = scope.rsplit(".", 2)
        lora = self.run.lora
        adapted = lora is not None and lora.adapts(scope)
        if rest is None:
            if len(parts) >= 2 and parts[-2] in ("altup_projections",
                                                 "altup_unembed_projections"):
                way = "project" if parts[-2] == "altup_projections" else "unembed"
                part = _lora_part(role, s) if adapted else None
                return f"altup.{way}.{part}" if part else f"altup.{way}_input"
            if scope == "model" and role in _RESCALE_ROLES:
                return "altup.rescale"  # each stream's magnitude and its rescaled product
            return None
        if rest == "altup.router_norm":
            return _gemma4_norm("decoder.altup.router_norm", role, s)
        linear = {"altup.modality_router": "router", "altup.prediction_coefs":
                  "prediction_coefs", "laurel.linear_right": "laurel.right"}.get(rest)
        if linear is not None:
            part = _lora_part(role, s) if adapted else None
            pre = linear if linear.startswith("laurel") else f"altup.{linear}"
            return f"decoder.{pre}.{part}" if part else f"decoder.{pre}_input"
        if rest == "laurel.linear_left":  # it reads the attention's normed input
            part = _lora_part(role, s) if adapted else None
            return f"decoder.laurel.left.{part}" if part else "decoder.attn.input"
        if rest == "laurel.post_laurel_norm":
            return _gemma4_norm("decoder.laurel.norm", role, s)
        if rest == "altup.correction_coefs":  # F.linear with the clamped weight
            return "decoder.altup.correction_coefs"
        if rest == "altup":
            return {"tanh.result": "decoder.altup.modalities", "bmm.self":
                    "decoder.altup.predict", "bmm.mat2": "decoder.altup.predict",
                    "mul.self": "decoder.altup.correct", "mul.other":
                    "decoder.altup.correct"}.get(role)
        if rest == "mlp":  # _gaussian_topk
            return {"std.self": "decoder.ffn.sparse_gate_input",
                    "std.result": "decoder.ffn.sparse_std",
                    "mul.other": "decoder.ffn.sparse_z" if not _has(s.storage.numel.poly, (
                        "F",)) else None,
                    "relu.result": "decoder.ffn.activation"}.get(role)
        return None

    def _gemma4_experts(self, rest: str, role: str, s: Saved) -> str:
        """Gemma 4's router (its weightless norm, the scaled input its linear keeps, the
        fp32 probabilities, the top-k weights and the per-expert scales gathered) and its
        experts (named as the MoE family's)."""
        if rest == "router.norm":
            named = _gemma4_norm("ffn.router_norm", role, s)
            if named is None:
                raise ValueError(f"no component name for {role} in a norm")
            return named
        if rest.startswith("router"):
            lora = self.run.lora
            scope = s.scope
            if rest == "router.proj":
                part = _lora_part(role, s) if lora is not None and lora.adapts(scope) \
                    else None
                return f"ffn.router.{part}" if part else "ffn.router_input"
            if role == "softmax.result":
                return "ffn.router"
            return "ffn.router_normed" if role == "mul.self" and \
                _has(s.storage.numel.poly, ("E",)) else "ffn.router_topk"
        named = self._moe("mlp." + rest, role, s)
        if named is None:
            raise ValueError(f"no component name for {role} saved in {s.scope}")
        return named

    def _moe(self, rest: str, role: str, s: Saved) -> str | None:
        """A sparse MoE block's storages (families/moe.py): the router's, the experts'
        (whose rows are the K·B·T routed slots), the shared expert's and its gate's."""
        st, parts = s.storage, rest.split(".")
        where = parts[1] if len(parts) > 1 and parts[0] in (
            "mlp", "feed_forward", "block_sparse_moe") else \
            parts[0] if parts[0] == "shared_mlp" else ""  # (GraniteMoeHybrid's, -Shared's)
        # peft's ParamWrapper (graph/lora.py): the merged weight the router's linear or the
        # experts' matmuls keep, the factors' 16-bit copies the experts' baddbmm keeps
        if where == "gate" and role == "mm.mat2" and st.op != "to":
            return "ffn.router.lora_merged_weight"
        wrapped = _WRAPPED.get(st.name.rsplit(".", 1)[-1]) if where == "experts" else None
        if wrapped:
            part = "merged_weight" if st.op == "baddbmm" else "weight_casts"
            return f"ffn.experts.{wrapped}.lora_{part}"
        if where in ("gate", "router"):  # PhiMoE's router: an nn.Linear and sparsemixer
            if role == "addmm.self":  # GPT-OSS's router: F.linear with its bias
                return "ffn.input"
            if role == "mm.self":  # DeepSeek-V3's router reads an fp32 copy of a 16-bit input
                return "ffn.router_fp32_input" if st.op == "to" else "ffn.input"
            if role == "mm.mat2":  # and of its weight
                return "ffn.router_fp32_weight"
            return "ffn.router" if role in ("softmax.result", "sigmoid.result") \
                else "ffn.router_topk"
        if where == "experts":
            if not st.dtype.floating:
                return "ffn.expert_index"
            if role == "index_add_.source":
                return "ffn.expert_scatter"
            if role.endswith("mm.mat2"):  # autocast's copies of the experts' slices
                return "ffn.expert_weight_casts"
            if st.op == "index":  # the tokens' copies, the slots' weights gathered
                return "ffn.routed_input" if role.endswith("mm.self") else "ffn.routing_weight"
            if role.endswith("mm.self"):
                return "ffn.out_input"
            out = product(self.ops[s.op_index].shape).poly
            return "ffn.activation" if _has(out, ("Fe",)) else "ffn.expert_output"
        if where in ("shared_expert", "shared_mlp", "shared_experts"):  # Qwen2-MoE's,
            # HunYuan's, DeepSeek-V3's
            if role == "mm.self":
                return "ffn.shared.out_input" if parts[-1] in ("down_proj", "output_linear") \
                    else "ffn.input"
            return "ffn.shared.activation"
        if rest == "mlp" and (role == "sigmoid.result" or st.op == "sigmoid"
                              or st.name.endswith("shared_expert.down_proj")):
            return "ffn.shared_gate_product"
        return None

    def _mixer(self, rest: str, role: str, s: Saved) -> str:
        """A Mamba or Mamba-2 layer's storages (families/mamba.py): the block's norm, the
        projections' inputs, the convolution's input (in_proj's output) and output, the
        scan's step sizes, decays, states and operands, the gated norm."""
        st, parts = s.storage, rest.split(".")
        if role == "CausalConv1dFn.x" and s.storage.name.endswith(".in_proj"):
            return "mixer.in_proj_output"  # (Jamba's: a view of in_proj's output)
        if role in KERNEL_ROWS:  # a CUDA kernel's saved set
            return KERNEL_ROWS[role]
        if parts[0] == "norm":
            return "mixer." + self._norm("norm", role)
        sub = parts[1] if len(parts) > 1 else ""
        if sub == "norm":  # MambaRMSNormGated: the weight's product keeps the normed y
            normed = role == "mul.other" and st.op == "mul"
            return "mixer.gated_norm.normalized" if normed else "mixer.gated_norm"
        inputs = {"in_proj": "input", "x_proj": "x", "dt_proj": "x_proj_output",
                  "out_proj": "out_proj_input", "conv1d": "in_proj_output"}
        lora = self.run.lora
        if sub in ("in_proj", "out_proj", "x_proj") and lora is not None \
                and lora.adapts(s.scope):
            part = _lora_part(role, s)
            return f"mixer.{sub}.{part}" if part else "mixer." + inputs[sub]
        if sub in inputs and role in ("mm.self", "addmm.self", "convolution.input"):
            return "mixer." + inputs[sub]
        if role == "silu.self" and st.op == "convolution":
            return "mixer.conv_output"
        if st.op in ("softplus", "clamp") or role in ("softplus.self", "clamp.self"):
            return "mixer.dt"
        if role == "exp.result":
            return "mixer.decay"
        if role == "masked_fill.mask":
            return "mixer.chunk_masks"
        if st.op in ("add", "repeat_interleave", "pad", "clone") or role.startswith("bmm."):
            return "mixer.scan_operands"  # the loop's states, the einsums' operands
        return "mixer.scan"

    def _short_conv(self, rest: str, role: str, s: Saved) -> str:
        """LFM2's short convolution (families/lfm2.py): in_proj's input and output (B, C and
        x, views), B·x (the convolution's input), the convolution's output (C's product
        keeps it), out_proj's input; an adapted in_proj's or out_proj's adapter."""
        sub = rest.split(".")[1] if "." in rest else ""
        lora = self.run.lora
        inputs = {"in_proj": "mixer.input", "out_proj": "mixer.out_proj_input"}
        if sub in inputs:
            part = _lora_part(role, s) if lora is not None and lora.adapts(s.scope) else None
            return f"mixer.{sub}.{part}" if part else inputs[sub]
        if role in ("convolution.input", "CausalConv1dFn.x"):
            return "mixer.conv_input"
        if s.storage.op in ("convolution", "CausalConv1dFn"):
            return "mixer.conv_output"
        if s.storage.name.endswith(".in_proj"):
            return "mixer.in_proj_output"
        raise ValueError(f"no component name for {role} saved in {s.scope}")

    def _lightning(self, rest: str, role: str, s: Saved) -> str:
        """MiniMax's lightning attention (families/minimax.py): its input, silu's input (the
        fused projection's output), the blocks' operands (their copies of Q, K, V and the
        decayed Q, K, the masked scores), the states entering the blocks and their decays,
        the output norm, the sigmoid gate and its product, out_proj's input; an adapted
        projection's adapter."""
        st, sub = s.storage, rest.split(".")[1] if "." in rest else ""
        lora = self.run.lora
        inputs = {"qkv_proj": "mixer.input", "output_gate": "mixer.input",
                  "out_proj": "mixer.out_proj_input"}
        if sub in inputs:
            part = _lora_part(role, s) if lora is not None and lora.adapts(s.scope) else None
            return f"mixer.{sub}.{part}" if part else inputs[sub]
        if sub == "norm":
            return "mixer.out_norm." + _NORM_PARTS[role]
        if role == "silu.self":
            return "mixer.qkv_output"
        if role == "sigmoid.result" or st.op == "sigmoid" or st.name.endswith(".norm"):
            return "mixer.gate"
        if st.op in ("add", "expand") or role == "mul.other":
            return "mixer.block_states"  # the states entering the blocks, their decays
        if quadratic_in_t(st) or _has(st.numel.poly, ("Q",)) and not _has(
                st.numel.poly, ("dh",)):
            return "mixer.block_scores"
        return "mixer.block_copies"

    def _norm(self, prefix: str, role: str, s: Saved | None = None) -> str:
        if s is not None and role == "mul.self" and self.norm_parts is _COHERE_NORM_PARTS \
                and not _has(s.storage.numel.poly, ("T",)):
            return f"{prefix}.weight_fp32"  # CohereLayerNorm's weight.to(float32)
        part = self.norm_parts.get(role)
        if part is None:
            raise ValueError(f"no component name for {role} in a norm")
        return f"{prefix}.{part}"

    def _adapter(self, module: str, role: str, s: Saved) -> str:
        """peft's lora.Linear around a frozen base: the adapter's input (its fp32 cast or
        dropout's output), the dropout's mask, lora_A's output (B·T·r); an input read as
        it is (no cast, no dropout) keeps the base input's name."""
        ad = _ADAPTED[module]
        part = _lora_part(role, s)
        if part:
            return f"{ad}.{part}"
        if s.storage.op.startswith("sdpa_") or s.storage.op == "FlashAttnFunc":
            return "attn.out"  # o_proj reads the kernel's output itself
        return _INPUTS[module]

    def _attention(self, role: str, s: Saved) -> str:
        """The attention core, eager or SDPA (its fused kernels or its math ops)."""
        st = s.storage
        if self.yoso and role == "linalg_vector_norm.self":  # a copy of Q or K, or the output
            return "qkv" if st.op == "clone" else "output"
        if self.yoso and role in _YOSO_PARTS:
            return _YOSO_PARTS[role]
        T2 = quadratic_in_t(st)
        op, _, part = role.partition(".")
        if op == "FlashAttnFunc":  # flash-attn's saved set (ops.flash_attn_func)
            if part == "rng_state":
                return "rng_state"
            op, part = "sdpa_flash", _FLASH_PARTS[part]
        if op.startswith("sdpa_"):
            if part in ("query", "key", "value") and st.name.endswith(
                    (".qkv_proj", ".query_key_value")):
                return "qkv_output"  # a view of the fused projection keeps it whole
            if part in ("query", "key") and self.rope_concat:
                return "qk_rotated"
            if part in ("query", "key", "value"):
                # GPT-2's K and V as the generation cache's torch.cat copied them
                cached = self.fused and part != "query" and st.name == s.scope
                return "kv_cache_copies" if cached else "qkv"
            return {"output": "out", "logsumexp": "logsumexp", "attn_mask": "mask"}[part]
        if st.name.endswith((".c_attn", ".qkv_proj", ".query_key_value", ".Wqkv")):
            return "qkv_output"  # a view of the fused projection's output keeps it whole
        if role == "masked_fill.mask":
            return "mask"  # MPT's causal mask cast to bool, one for the layers
        if role in ("softmax.result", "_safe_softmax.result"):
            return "softmax"
        if self.sink_lse and role in ("logsumexp.self", "logsumexp.result",
                                      "sigmoid.result", "mul.self", "mul.other"):
            # GraniteMoeSWA: logsumexp keeps the masked scores and itself; the sink scale
            # sigmoid((lse - sinks).float()) and the output it multiplies
            return {"logsumexp.self": "scores", "logsumexp.result": "sink_lse",
                    "mul.self": "sink_scaled_out"}.get(role, "sink_scale")
        if self.output_gate and role in ("sigmoid.result", "mul.self"):
            # Beam: out * sigmoid(gate_proj(x) + gate_bias): the gate and the output
            return "output_gate" if role == "sigmoid.result" else "gated_out"
        if self.output_gate and role == "mul.other" and not _has(st.numel.poly, ("B",)):
            return "query_scale"  # Beam's full layers: q.float() * attention_scaling
        if self.output_gate and role in ("softplus.self", "mul.other"):
            return "output_gate"  # Laguna: out * softplus(g_proj(x).float()).to(out's dtype)
        if self.out_gate and (role == "sigmoid.result"
                              or role == "mul.other" and st.op == "sigmoid"):
            return "out_gate"  # Qwen3-Next: the output times sigmoid(gate)
        if self.out_gate and role == "mul.self" and not quadratic_in_t(st):
            return "out"
        if st.op == "cat" and role.startswith("mul."):
            return "maps_concat"  # DiffLlama: the two calls' outputs, kept by λ's mul
        if role == "exp.result" or (role.startswith("mul.") and not _has(st.numel.poly,
                                                                          ("B",))):
            return "lambda"  # DiffLlama's λ (0-d)
        if role == "max.indices":
            return "sink_row_max_index"  # GPT-OSS: the (scores, sink) row's argmax
        if role == "maximum.self":
            return "scores_clamp_input"  # XGLM: torch.max(scores + mask, finfo.min)
        if role == "maximum.other":
            return "scores_clamp_floor"  # its 0-d fp32 finfo.min
        if role == "tanh.result":
            return "softcap_tanh"  # Gemma 2's eager scores: cap · tanh(scores / cap)
        if role == "max.indices":
            return "row_max_index"  # MiMo-V2-Flash: the scores less their row's max
        sink = _SINK_ROLES.get(role) if self.sink else None  # Granite SWA's sink after
        # the attention (its scale a (B, H, T, 1) mul.other, beside a dropout's T² mask)
        if sink is not None and (role != "mul.other" or not (T2 or _has(st.numel.poly,
                                                                       ("dh",)))):
            return sink
        if role in ("mul.other", "native_dropout.result1"):
            return "dropout_mask" if T2 else "residual_dropout_mask"
        if role == "bmm.self":
            if self._scores(s):
                return "q"
            return "dropout_output" if self.attn_dropout else "softmax_cast"
        if role == "bmm.mat2":
            return "k" if self._scores(s) else "v"
        if role in ("baddbmm.batch1", "baddbmm.batch2"):  # GPT-NeoX-Japanese's scores
            return "q" if role.endswith("1") else "k"
        raise ValueError(f"no component name for {role} in attention")

    def _checkpoint_input(self, s: Saved) -> str:
        """What full recomputation keeps: each layer's hidden-state input, and the
        model-level tensors the layers are called with (positions, RoPE's cos and sin, the
        eager mask), once."""
        st = s.storage
        if st.name in _ROPES or st.name.endswith(".rotary_emb"):
            return "rope.cos_sin"
        if st.name == "causal_mask":
            return _MASK
        if st.name in ("attention_mask", "relative_pos", "sliding_mask"):
            return f"encoder.{st.name}"  # DeBERTa's, ModernBERT's, kept by checkpoints
        if st.dtype.name == "int64":
            return "embed.position_ids"
        return ("encoder" if self.encoder else "decoder") + ".checkpoint_input"


# the classification heads' modules (families/bert.py _classify): BERT's pooler, the
# dropout before the classifier, the classifier; RoBERTa's classification head
_CLASSIFIER = {"pooler": "head.pooler", "pooler.dense": "head.pooler", "dropout": "head.cls",
               "classifier": "head.cls", "classifier.dense": "head.cls.dense",
               "classifier.out_proj": "head.cls"}


def _classifier(scope: str, role: str, s: Saved, adapted: bool) -> str | None:
    """A classification head's storage: a linear's input (or its adapter's parts), tanh's
    output, a dropout's noise or mask; None outside the heads."""
    parts = scope.split(".")
    where = ".".join(parts[1:]) if parts[0] != "dropout" and parts[0] != "classifier" \
        else scope
    prefix = _CLASSIFIER.get(where)
    if prefix is None:
        return None
    if role in ("mul.other", "native_dropout.result1"):
        return f"{prefix}.dropout_mask"
    if role == "tanh.result":
        return f"{prefix}.tanh"
    part = _lora_part(role, s) if adapted else None
    if part:
        return f"{prefix}.{part}"
    if role in ("mm.self", "addmm.self"):
        return f"{prefix}.input"
    raise ValueError(f"no component name for {role} saved in {scope}")


def _deberta_attention(rest: str, role: str, s: Saved) -> str | None:
    """DeBERTa's disentangled attention beside what the decoders' names cover: the 0-d
    scales, the relative table's dropout, the c2p and p2c products' operands (copies of Q or
    K and of the position keys or queries), their gathered scores and int64 indices, the
    negated bool mask; None for the rest."""
    if rest == "attention.self.pos_dropout":
        return "relative_table_dropout_mask"
    if role.endswith("mm.self") and _has(s.storage.numel.poly, ("R",)):
        return "relative_table"  # DeBERTa-v2's table through query_proj/key_proj (share_att_key)
    for term in ("c2p", "p2c"):
        if rest == f"attention.self.{term}":
            return {"bmm.self": f"{term}.content", "bmm.mat2": f"{term}.position",
                    "gather.self": f"{term}.scores", "gather.index": f"{term}.index",
                    "div_.other": "scale", "div.other": "scale"}[role]
    if rest == "attention.self":
        return {"div.other": "scale", "masked_fill.mask": "mask"}.get(role)
    return None


def _gemma4_norm(norm: str, role: str, s: Saved) -> str | None:
    """Gemma4RMSNorm's saved tensors: pow keeps the fp32 input, then the mean square (made
    in the norm); the product keeps 1/rms (made in it) and the normalised tensor; the
    weight's product its fp32 copy of the weight."""
    st = s.storage
    mine = st.name == s.scope
    if role == "pow.self":
        return f"{norm}.mean_square" if mine else f"{norm}.input_fp32"
    if role == "mul.other":
        return f"{norm}.rstd" if mine and st.op == "pow" else f"{norm}.weight_fp32"
    if role == "mul.self":
        return f"{norm}.normalized"
    return None


def _lora_part(role: str, s: Saved) -> str | None:
    """Which of peft's lora.Linear tensors an adapted layer's saved storage is: the
    dropout's mask, lora_A's output (B·T·r), the adapter's own input (its fp32 cast or
    dropout's output, made in the layer); None: the input as the base layer reads it."""
    if role in ("mul.other", "native_dropout.result1"):
        return "lora_dropout_mask"
    if role not in ("mm.self", "addmm.self"):
        raise ValueError(f"no component name for {role} in the adapted {s.scope}")
    if _has(s.storage.numel.poly, ("r",)):
        return "lora_a_output"
    if s.storage.name == s.scope:
        return "lora_input"
    return None


def saved_names(family: Family, run: Run, result: Result | None = None
                ) -> list[tuple[str, Saved]]:
    """Each activation the forward leaves saved (weight copies left out), with its
    component name, in the order autograd saved them."""
    r = result if result is not None else evaluate(family, run)
    namer = _Namer(family, run, r.ops)
    return [(namer.name(s), s) for s in r.saved if s.storage.kind != "weight_copy"]


class NamedRow(NamedTuple):
    """A component row as polynomials: one layer's bytes under the name and how many
    layers keep those bytes (1 outside the layers)."""

    name: str
    in_layer: bool
    nbytes: Poly
    repeat: Poly
    group: str = ""  # the layer kind where layers differ (an MoE's "dense", "moe")


def _llama4_groups(family: Llama4) -> tuple[str, dict[str, str]]:
    """Llama 4's layers by kind (a letter each) and the plan's group name of each kind:
    the parts that differ, chunked or nope, dense or moe."""
    kinds = list(zip(family.kinds, family.pattern, strict=True))
    vary_a, vary_f = len(set(family.kinds)) > 1, len(set(family.pattern)) > 1
    if not (vary_a or vary_f):
        return "", {}
    letters = {("C", "D"): "c", ("C", "E"): "C", ("N", "D"): "n", ("N", "E"): "N"}
    groups = {letters[a, f]: ".".join(([{"C": "chunked", "N": "nope"}[a]] if vary_a else [])
                                      + ([{"D": "dense", "E": "moe"}[f]] if vary_f else []))
              for a, f in set(kinds)}
    return "".join(letters[k] for k in kinds), groups


def named_rows(family: Family, run: Run, ops: Sequence[OpRecord],
               held: Iterable[tuple[Saved, Poly]]) -> tuple[NamedRow, ...]:
    """The held storages (each with how many such storages: 1, or a replayed layer's
    count) named and grouped into rows: storages of one name summed per layer, layers with
    equal bytes under a name merged into one row repeated over them."""
    namer = _Namer(family, run, tuple(ops))
    one = Poly.const(1)
    # the plan's group of each layer where layers differ (plan._group_name: an MoE's dense
    # or moe layers, Gemma 2/3's sliding or full ones), as the rules name their rows
    pattern, groups = "", {}
    if isinstance(family, KimiLinear):  # the mixer's and the MLP's kind, as the rules' stacks
        names = {"F": "full", "M": "linear", "D": "dense", "E": "moe"}
        groups = {v: f"{names[k[0]]}.{names[k[1]]}" for k, v in KIMI_KINDS.items()}
        pattern = family.layers if len(set(family.layers)) > 1 else ""
    elif isinstance(family, Llama4):  # its chunked and NoPE, dense and MoE layers
        pattern, groups = _llama4_groups(family)
    elif isinstance(family, Moe) and len(set(family.pattern)) > 1:
        pattern, groups = family.pattern, {"D": "dense", "E": "moe"}
    elif isinstance(family, Switch) and len(set(family.kinds_e + family.kinds_d)) > 1:
        # (the encoder's layers numbered first, the decoder's after them)
        pattern, groups = family.kinds_e + family.kinds_d, {"D": "dense", "E": "moe"}
    elif isinstance(family, Gemma | Llama) and len(set(family.kinds)) > 1 \
            and not isinstance(family, Qwen3Next):  # (its kinds: mixer and MLP, unnamed)
        pattern, groups = family.kinds, {"S": "sliding", "F": "full", "N": "nope"}
    elif isinstance(family, OlmoHybrid) and len(set(family.kinds)) > 1:
        pattern, groups = family.kinds, {"M": "linear", "F": "full"}
    # (name, in layer, group) -> (layer, replayed) -> [bytes, how many]
    per: dict[tuple[str, bool, str], dict[tuple[int | None, bool], list[Poly]]] = {}
    traced: set[int] = set()  # storages met once: a second item is its layer's replays
    for s, n in held:
        if s.storage.kind == "weight_copy":
            continue
        name = namer.name(s)
        # per layer: what a layer's ops saved (its first saver's layer), but the tensors
        # made once for the model that a layer is first to save or keep
        in_layer = (s.layer is not None and name.startswith(("decoder.", "encoder."))
                    and name != _MASK)
        replayed = n != one or id(s.storage) in traced
        traced.add(id(s.storage))
        slot = (s.layer, replayed) if in_layer else (None, False)
        tag = groups[pattern[s.layer]] if in_layer and pattern and s.layer is not None \
            else ""
        group = per.setdefault((name, in_layer, tag), {})
        if slot not in group:
            group[slot] = [Poly(()), n if in_layer else one]
        group[slot][0] = group[slot][0] + (s.storage.formula if in_layer
                                           else n * s.storage.formula)
    rows: list[NamedRow] = []
    for (name, in_layer, tag), slots in per.items():
        merged: dict[Poly, Poly] = {}  # one layer's bytes -> how many layers
        for nbytes, count in slots.values():
            merged[nbytes] = merged.get(nbytes, Poly(())) + count
        rows.extend(NamedRow(name, in_layer, nbytes, count, tag)
                    for nbytes, count in merged.items())
    return tuple(rows)


def tensor_parallel(nbytes: Poly) -> bool:
    """Whether tensor parallelism splits these bytes: a term in H, Hkv or F."""
    return _has(nbytes, _TP)


def row_of(r: NamedRow, nbytes: int, repeat: int) -> Row:
    """Breakdown's row for a named row's values (expr left for Breakdown's symbols)."""
    what = description(r.name)
    text = formula(r.nbytes) + (f" ({what})" if what else "")
    stack = r.name.split(".", 1)[0] if r.in_layer else ""  # decoder or encoder
    if r.group:  # the layer's group where layers differ (an MoE's decoder.dense, .moe)
        stack = f"{stack}.{r.group}"
    name = f"{stack}.{r.name.split('.', 1)[1]}" if r.group else r.name
    return (name, nbytes, text, "", repeat, stack, "tp" if _has(r.nbytes, _TP) else "", None,
            ())


def component_rows(family: Family, run: Run, result: Result | None = None
                   ) -> tuple[Row, ...]:
    """The saved activations as activation_breakdown's rows (Breakdown.rows' tuple shape),
    from a full trace: formula: the bytes as a polynomial in the graph's symbols (B, T, E,
    H, Hkv, dh, F, V, r; one layer's), expr: the same with the numbers in."""
    r = result if result is not None else evaluate(family, run)
    values = {k: d.value for k, d in symbols(family, run).items()}
    words = tcalc_symbols(values)
    one = Poly.const(1)
    out = []
    for named in named_rows(family, run, r.ops, ((s, one) for s in r.saved)):
        row = row_of(named, named.nbytes.evaluate(values), named.repeat.evaluate(values))
        out.append(row[:3] + (substitute(row[2], words),) + row[4:])
    return tuple(out)


def by_name(rows: Iterable[Row]) -> dict[str, int]:
    """Bytes per component name (count × repeat summed over a name's rows)."""
    out: dict[str, int] = {}
    for r in rows:
        out[r[0]] = out.get(r[0], 0) + r[1] * r[4]
    return out
