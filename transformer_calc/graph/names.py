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
from typing import NamedTuple

from transformer_calc.breakdown import Row, substitute
from transformer_calc.graph.evaluate import Family, Result, evaluate, symbols
from transformer_calc.graph.families.bert import HEADS, Bert
from transformer_calc.graph.families.cohere import Cohere
from transformer_calc.graph.families.gemma import Gemma
from transformer_calc.graph.families.gpt2 import GPT2
from transformer_calc.graph.families.llama import Llama
from transformer_calc.graph.families.moe import Moe
from transformer_calc.graph.held import quadratic_in_t
from transformer_calc.graph.modules import Run
from transformer_calc.graph.symbols import Poly, product
from transformer_calc.graph.trace import OpRecord, Saved

_LAYER = re.compile(r"^(?:transformer\.h|model\.layers|model\.decoder\.layers|biogpt\.layers)"
                    r"\.(\d+)(?:\.(.*))?$")
# the norms, by their module's last name: GPT-2's LayerNorms, Llama's RMSNorms
_NORMS = {"ln_1": "attn.norm", "input_layernorm": "attn.norm", "ln_2": "ffn.norm",
          "q_norm": "attn.q_norm", "k_norm": "attn.k_norm",
          "post_attention_layernorm": "ffn.norm", "pre_feedforward_layernorm": "ffn.norm",
          "query_layernorm": "attn.q_norm", "key_layernorm": "attn.k_norm",
          "ln_f": "final_norm", "norm": "final_norm", "attn_sub_norm": "attn.sub_norm",
          "ffn_sub_norm": "ffn.sub_norm", "attention_layernorm": "attn.norm",
          "feedforward_layernorm": "ffn.norm", "groupnorm": "attn.head_pair_norm",
          "self_attn_layer_norm": "attn.norm", "final_layer_norm": "ffn.norm",
          "layer_norm": "final_norm"}
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
# a linear's input, as the base layer keeps it (and a LoRA adapter reading it as it is)
_INPUTS = {"c_attn": "attn.input", "qkv_proj": "attn.input", "gate_up_proj": "ffn.input",
           "q_proj": "attn.input", "k_proj": "attn.input",
           "v_proj": "attn.input", "attn.c_proj": "attn.o_input", "o_proj": "attn.o_input",
           "c_fc": "ffn.input", "gate_proj": "ffn.input", "up_proj": "ffn.input",
           "mlp.c_proj": "ffn.out_input", "down_proj": "ffn.out_input",
           "shared_expert_gate": "ffn.input", "router": "ffn.input", "wg": "ffn.input",
           "fc1": "ffn.input", "fc2": "ffn.out_input", "out_proj": "attn.o_input"}
# the adapted layer's name (transformer_calc.lora.adapted_layers)
_ADAPTED = {"c_attn": "attn.qkv", "qkv_proj": "attn.qkv", "gate_up_proj": "ffn.gate_up",
            "q_proj": "attn.q", "k_proj": "attn.k", "v_proj": "attn.v",
            "attn.c_proj": "attn.o", "o_proj": "attn.o", "c_fc": "ffn.in",
            "gate_proj": "ffn.gate", "up_proj": "ffn.in", "mlp.c_proj": "ffn.out",
            "down_proj": "ffn.out", "fc1": "ffn.in", "fc2": "ffn.out",
            "shared_expert_gate": "ffn.shared_gate", "router": "ffn.router",
            "wg": "ffn.router", "out_proj": "attn.o"}
# BERT-style encoders (families/bert.py): a layer's modules as the decoders' tables above
# key them (post-norm: the attention output's LayerNorm is tcalc's attn.norm, the layer
# output's its ffn.norm); their rows are named encoder.* in place of decoder.*
_ENCODER_LAYER = re.compile(r"^\w+\.encoder\.layer\.(\d+)(?:\.(.*))?$")
_ENCODER_MODULES = {"attention.self.query": "q_proj", "attention.self.key": "k_proj",
                    "attention.self.value": "v_proj", "attention.output.dense": "o_proj",
                    "intermediate.dense": "up_proj", "output.dense": "down_proj",
                    "attention.output.LayerNorm": "ln_1", "output.LayerNorm": "ln_2",
                    "attention.self": "self_attn", "attention.output": "self_attn",
                    "intermediate": "mlp", "output": "mlp"}
# peft's ParamWrapper over a MoE's expert weights, by the weight it wraps: the names
# lora_activations gives their rows
_WRAPPED = {"gate_up_proj": "gate_up", "down_proj": "out"}
_TP = frozenset(("H", "Hkv", "F", "Fe", "Fs"))
_ROPE = "model.rotary_emb"
_MASK = "decoder.causal_mask"  # the eager (B, 1, T, T) mask, once for the model


def _module(rest: str) -> str:
    """A layer-relative scope as the tables above key it: 'self_attn.q_proj' -> 'q_proj',
    'attn.c_proj' and 'mlp.c_proj' kept whole (two modules share the last name)."""
    parts = rest.split(".")
    return ".".join(parts[-2:]) if parts[-1] == "c_proj" else parts[-1]


_ORDER = ("K", "B", "T", "G", "Hkv", "H", "dh", "E", "Ee", "F", "Fe", "Fs", "X", "V", "P", "Ty",
          "r", "T32", "L")
# the graph's symbols as tcalc's formulas name them (the symbols activation_breakdown's rows
# and explain use)
SYMBOL_NAMES = {"B": "B", "T": "T", "G": "n_groups", "Hkv": "n_kv_heads", "H": "n_heads",
                "dh": "d_head", "E": "d_model", "F": "d_ff", "V": "vocab_size",
                "P": "max_positions", "r": "r", "T32": "T32", "L": "n_layers",
                "Ee": "d_embed", "Ty": "token_types", "X": "n_experts", "K": "top_k",
                "Fe": "d_ff_expert", "Fs": "d_ff_shared"}
# what each component is, beside its formula (no symbol names inside: they are words here)
DESCRIPTIONS = {
    "embed.token_ids": "int64 indices", "embed.position_ids": "int64 positions",
    "embed.dropout_mask": "dropout mask",
    "rope.cos_sin": "cos and sin, once for the model (Gemma 3: a pair per layer type)",
    "input": "norm input", "stats": "mean, rstd", "input_fp32": "the fp32 upcast",
    "rstd": "reciprocal std", "normalized": "the weight's mul keeps it",
    "decoder.attn.input": "Q/K/V matmul input",
    "decoder.attn.qkv_output": "fused output, Q, K and V views of it",
    "decoder.attn.qkv": "the kernel's query, key and value",
    "decoder.attn.qk_rotated": "Q and K rotated into new tensors",
    "decoder.attn.q": "Q·Kᵀ keeps Q", "decoder.attn.k": "Q·Kᵀ keeps K",
    "decoder.attn.v": "A·V keeps V", "decoder.attn.kv_cache_copies": "the generation cache's "
    "K and V", "decoder.attn.out": "the kernel's output", "decoder.attn.logsumexp":
    "log-sum-exp", "decoder.attn.mask": "attention mask", "decoder.attn.softmax":
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
    "head.softcap_tanh": "tanh of the logits / cap",
    "lora_dropout_mask": "the adapter's dropout mask", "lora_a_output": "lora_A's output",
    "decoder.ffn.router": "router softmax", "decoder.ffn.router_topk": "the top-k indices; "
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
    "slices, made anew per expert (a slice is not a leaf: not in autocast's cache)"}


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


class _Namer:
    """Names one trace's saved storages, reading the ops that saved them."""

    def __init__(self, family: Family, run: Run, ops: tuple[OpRecord, ...]) -> None:
        self.run = run
        self.ops = ops
        self.fused = isinstance(family, GPT2)
        # Phi-3's rotary concatenation: Q and K are new tensors, the rotated ones
        self.rope_concat = getattr(family, "rope_concat", False)
        # OLMo2: post_attention_layernorm normalises the attention's output, and
        # post_feedforward_layernorm the MLP's (tcalc's attn.norm and ffn.norm)
        self.norms = dict(_NORMS, post_attention_layernorm="attn.norm",
                          post_feedforward_layernorm="ffn.norm") \
            if getattr(family, "post_norm", False) else \
            _SANDWICH if getattr(family, "sandwich", False) else _NORMS
        self.norm_parts = _GEMMA_NORM_PARTS if isinstance(family, Gemma) else \
            _COHERE_NORM_PARTS if isinstance(family, Cohere) else _NORM_PARTS
        self.attn_dropout = (family.attn_pdrop if isinstance(family, GPT2)
                             else family.attention_dropout) != 0
        self.encoder = isinstance(family, Bert)
        if isinstance(family, Bert):  # the MLM head's modules: scope -> tcalc's name
            scope, dense, norm, decoder, _ = HEADS[family.head]
            at = (scope + ".") if scope else ""
            self.head = {at + dense: "dense", at + norm: "norm", at + decoder: "decoder"}
        self.moe = isinstance(family, Moe)

    def _scores(self, s: Saved) -> bool:
        """Whether the op that saved s made the scores (Q·Kᵀ: a T² output) rather than
        the probabilities' product with V."""
        out = product(self.ops[s.op_index].shape).poly
        return any(m.count("T") >= 2 for m, _ in out.terms)

    def name(self, s: Saved) -> str:
        scope, role = s.scope, s.role
        if role == "checkpoint.input":
            return self._checkpoint_input(s)
        if self.encoder:
            return self._encoder(scope, role, s)
        layer = _LAYER.match(scope)
        if layer is None:
            return self._outside(scope, role, s)
        return self._in_layer(_module(layer.group(2) or ""), role, s)

    def _in_layer(self, module: str, role: str, s: Saved) -> str:
        scope, st = s.scope, s.storage
        if st.name == _ROPE:
            return "rope.cos_sin"
        lora = self.run.lora
        if module in _ADAPTED and lora is not None and lora.adapts(scope):
            return "decoder." + self._adapter(module, role, s)
        if module in self.norms:
            return "decoder." + self._norm(self.norms[module], role, s)
        layer = _LAYER.match(scope)
        rest = (layer.group(2) or "") if layer else ""
        moe = self._moe(rest, role, s) if self.moe else None
        if moe is not None:
            return "decoder." + moe
        if module in _INPUTS and role in ("mm.self", "addmm.self"):
            return "decoder." + _INPUTS[module]
        if module in ("attn", "self_attn"):
            return "decoder.attn." + self._attention(role, s)
        if module == "" and role in ("mul.other", "native_dropout.result1"):
            # OPT's (BioGPT's, TrOCR's) functional dropouts in the layer: on the attention's
            # output or on fc2's, as the last op in a module before it says
            last = next(r.scope for r in reversed(self.ops[:s.op_index]) if r.scope != scope)
            return "decoder.attn.residual_dropout_mask" if ".self_attn" in last else \
                "decoder.ffn.residual_dropout_mask"
        if module == "" and role == "relu.result":  # OPT's activation_fn: fc2's input
            return "decoder.ffn.out_input"
        if module == "" and role == "gelu.self":  # BioGPT's activation_fn: fc1's output
            return "decoder.ffn.activation"
        if module == "act_fn":  # xIELU's module: its alphas (1,) and its tensors
            return "decoder.ffn.activation_mask" if role == "where.condition" else \
                "decoder.ffn.activation"
        if module == "mlp":
            if role in ("mul.other", "native_dropout.result1") and not _has(
                    st.numel.poly, ("F",)):
                return "decoder.ffn.residual_dropout_mask"
            if role in ("pow.self", "tanh.result", "silu.self", "gelu.self", "mul.self",
                        "mul.other", "relu.result"):
                return "decoder.ffn.activation"
        raise ValueError(f"no component name for {role} saved in {scope} "
                         f"(made in {st.name or 'the model'})")

    def _encoder(self, scope: str, role: str, s: Saved) -> str:
        """A BERT-style encoder's storage: a layer's as the decoders' (encoder.* names),
        the embeddings', the projection's (ELECTRA), the MLM head's and the loss's."""
        layer = _ENCODER_LAYER.match(scope)
        if layer is not None:
            module = _ENCODER_MODULES.get(layer.group(2) or "")
            if module is None:
                raise ValueError(f"no component name for {role} saved in {scope}")
            return "encoder." + self._in_layer(module, role, s).removeprefix("decoder.")
        last = scope.rsplit(".", 1)[-1]
        lora = self.run.lora
        adapted = lora is not None and lora.adapts(scope)
        if role == "embedding.indices":
            return {"word_embeddings": "embed.token_ids",
                    "position_embeddings": "embed.position_ids",
                    "token_type_embeddings": "embed.token_type_ids"}[last]
        if last == "embeddings" and role in ("mul.other", "native_dropout.result1"):
            return "embed.dropout_mask"
        if last == "LayerNorm" and scope.endswith("embeddings.LayerNorm"):
            return "embed." + self._norm("norm", role)
        if last == "embeddings_project":  # ELECTRA's projection to hidden_size
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
        if role == "gelu.self":
            return "head.mlm.activation"
        return self._outside(scope, role, s)

    def _outside(self, scope: str, role: str, s: Saved) -> str:
        last = scope.rsplit(".", 1)[-1]
        if role == "embedding.indices":
            return "embed.position_ids" if last in ("wpe", "embed_positions") \
                else "embed.token_ids"
        if last == "layernorm_embedding":  # TrOCR's norm of the embeddings' sum
            return "embed." + self._norm("norm", role, s)
        if last in ("project_in", "project_out"):  # OPT's projections of the embeddings
            lora = self.run.lora
            part = _lora_part(role, s) if lora is not None and lora.adapts(scope) else None
            where = "embed" if last == "project_in" else "head"
            return f"{where}.{last}.{part}" if part else f"{where}.project_input"
        if scope in ("transformer", "biogpt", "model", "model.decoder") and role in ("mul.other",
                                                                    "native_dropout.result1"):
            return "embed.dropout_mask"
        if last in _NORMS and scope != "model.layers":
            return "decoder." + self._norm("final_norm", role, s)
        lora = self.run.lora
        if scope == "lm_head" and lora is not None and "all-linear" not in lora.targets \
                and lora.adapts(scope):
            part = _lora_part(role, s)  # peft's lm_head target (transformer_calc.lora)
            return f"head.lm.{part}" if part else "head.input"
        if scope in ("lm_head", "output_projection") and role == "mm.self":
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

    def _moe(self, rest: str, role: str, s: Saved) -> str | None:
        """A sparse MoE block's storages (families/moe.py): the router's, the experts'
        (whose rows are the K·B·T routed slots), the shared expert's and its gate's."""
        st, parts = s.storage, rest.split(".")
        where = parts[1] if len(parts) > 1 and parts[0] == "mlp" else ""
        # peft's ParamWrapper (graph/lora.py): the merged weight the router's linear or the
        # experts' matmuls keep, the factors' 16-bit copies the experts' baddbmm keeps
        if where == "gate" and role == "mm.mat2":
            return "ffn.router.lora_merged_weight"
        wrapped = _WRAPPED.get(st.name.rsplit(".", 1)[-1]) if where == "experts" else None
        if wrapped:
            part = "merged_weight" if st.op == "baddbmm" else "weight_casts"
            return f"ffn.experts.{wrapped}.lora_{part}"
        if where in ("gate", "router"):  # PhiMoE's router: an nn.Linear and sparsemixer
            return "ffn.input" if role == "mm.self" else \
                "ffn.router" if role == "softmax.result" else "ffn.router_topk"
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
        if where in ("shared_expert", "shared_mlp"):  # Qwen2-MoE's, HunYuan's
            if role == "mm.self":
                return "ffn.shared.out_input" if parts[-1] == "down_proj" else "ffn.input"
            return "ffn.shared.activation"
        if rest == "mlp" and (role == "sigmoid.result" or st.op == "sigmoid"
                              or st.name.endswith("shared_expert.down_proj")):
            return "ffn.shared_gate_product"
        return None

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
        if s.storage.op.startswith("sdpa_"):
            return "attn.out"  # o_proj reads the kernel's output itself
        return _INPUTS[module]

    def _attention(self, role: str, s: Saved) -> str:
        """The attention core, eager or SDPA (its fused kernels or its math ops)."""
        st = s.storage
        T2 = quadratic_in_t(st)
        op, _, part = role.partition(".")
        if op.startswith("sdpa_"):
            if part in ("query", "key", "value") and st.name.endswith(".qkv_proj"):
                return "qkv_output"  # a view of the fused projection keeps it whole
            if part in ("query", "key") and self.rope_concat:
                return "qk_rotated"
            if part in ("query", "key", "value"):
                # GPT-2's K and V as the generation cache's torch.cat copied them
                cached = self.fused and part != "query" and st.name == s.scope
                return "kv_cache_copies" if cached else "qkv"
            return {"output": "out", "logsumexp": "logsumexp", "attn_mask": "mask"}[part]
        if st.name.endswith((".c_attn", ".qkv_proj")):
            return "qkv_output"  # a view of the fused projection's output keeps it whole
        if role in ("softmax.result", "_safe_softmax.result"):
            return "softmax"
        if st.op == "cat" and role.startswith("mul."):
            return "maps_concat"  # DiffLlama: the two calls' outputs, kept by λ's mul
        if role == "exp.result" or (role.startswith("mul.") and not _has(st.numel.poly,
                                                                          ("B",))):
            return "lambda"  # DiffLlama's λ (0-d)
        if role == "maximum.self":
            return "scores_clamp_input"  # XGLM: torch.max(scores + mask, finfo.min)
        if role == "maximum.other":
            return "scores_clamp_floor"  # its 0-d fp32 finfo.min
        if role == "tanh.result":
            return "softcap_tanh"  # Gemma 2's eager scores: cap · tanh(scores / cap)
        if role in ("mul.other", "native_dropout.result1"):
            return "dropout_mask" if T2 else "residual_dropout_mask"
        if role == "bmm.self":
            if self._scores(s):
                return "q"
            return "dropout_output" if self.attn_dropout else "softmax_cast"
        if role == "bmm.mat2":
            return "k" if self._scores(s) else "v"
        raise ValueError(f"no component name for {role} in attention")

    def _checkpoint_input(self, s: Saved) -> str:
        """What full recomputation keeps: each layer's hidden-state input, and the
        model-level tensors the layers are called with (positions, RoPE's cos and sin, the
        eager mask), once."""
        st = s.storage
        if st.name == _ROPE:
            return "rope.cos_sin"
        if st.name == "causal_mask":
            return _MASK
        if st.dtype.name == "int64":
            return "embed.position_ids"
        return ("encoder" if self.encoder else "decoder") + ".checkpoint_input"


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
    if isinstance(family, Moe) and len(set(family.pattern)) > 1:
        pattern, groups = family.pattern, {"D": "dense", "E": "moe"}
    elif isinstance(family, Gemma | Llama) and len(set(family.kinds)) > 1:
        pattern, groups = family.kinds, {"S": "sliding", "F": "full", "N": "nope"}
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
    name = r.name.replace("decoder.", stack + ".", 1) if r.group else r.name
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
