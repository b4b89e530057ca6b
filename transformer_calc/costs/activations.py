"""The activations a training step saves for backward, read off the op graph.

`graph_activations` answers memory_report's question (what autograd holds when the forward
is over, as Breakdown rows named as tcalc names them) from the model's op graph
(transformer_calc.graph) wherever the graph expresses the run exactly: a family with a
graph, transformers' eager or SDPA attention, torch's own kernel choice, full training or
LoRA over an unquantised base, a bitsandbytes one or torchtune's NF4 one. It returns
None elsewhere, and the caller keeps its rules.

The graph derives what the rules enumerate: LoRA, recomputation and autocast compose
because each op states once what it saves (derivatives.yaml) and requires_grad flows from
the parameters that train. Tensor parallelism is applied afterwards, as to every row: a row
whose bytes have a term in H, Hkv or F carries the note "tp".
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from transformer_calc.breakdown import Breakdown, Row
from transformer_calc.errors import TcalcError

if TYPE_CHECKING:
    from transformer_calc.graph.compile import Structure
    from transformer_calc.graph.evaluate import Family
    from transformer_calc.graph.families.minimax import Minimax
    from transformer_calc.graph.families.moe import Moe
    from transformer_calc.graph.families.qwen3_next import Qwen3Next
    from transformer_calc.graph.lora import Lora
    from transformer_calc.graph.modules import Run
    from transformer_calc.graph.tensor import DType
    from transformer_calc.memory import Settings
    from transformer_calc.spec import ModelSpec

# tcalc's LoRA roles as the graph's module names (peft matches a target against the module
# name's last part): Llama's projections, GPT-2's Conv1D layers. GPT-2's two c_proj (the
# attention's output, the MLP's down projection) are one name to peft: adapting one alone is
# not a target list peft takes by that name.
_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
            "up": "up_proj", "down": "down_proj", "qkv": "qkv_proj", "gate_up": "gate_up_proj",
            "lm_head": "lm_head", "in_proj": "in_proj", "out_proj": "out_proj"}
_GPT2_MODULES = {"qkv": "c_attn", "up": "c_fc", "o": "c_proj", "down": "c_proj",
                 "lm_head": "lm_head"}
# BERT-style encoders (peft matches a target against the path's end after a dot):
# "output.dense" is both the attention's output and the layer's down projection, so o and
# down go together or not at all
_BERT_MODULES = {"q": "query", "k": "key", "v": "value", "up": "intermediate.dense",
                 "o": "output.dense", "down": "output.dense"}
# T5's projections (self- and cross-attention alike, as peft matches them) and FFN: wi, or
# wi_0 (the activated gate) and wi_1
_T5_MODULES = {"q": "q", "k": "k", "v": "v", "o": "o", "gate": "wi_0", "down": "wo"}
_BART_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj", "up": "fc1",
                 "down": "fc2"}
# the NeoX-style decoders' module names by model type (families/neox.py)
_NEOX_MODULES = {"gpt_neox": {"qkv": "query_key_value", "o": "dense", "up": "dense_h_to_4h",
                              "down": "dense_4h_to_h"},
                 "phi": {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "dense",
                         "up": "fc1", "down": "fc2"},
                 "stablelm": _MODULES,
                 "gptj": {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj",
                          "up": "fc_in", "down": "fc_out"},
                 "codegen": {"qkv": "qkv_proj", "o": "out_proj", "up": "fc_in",
                             "down": "fc_out"}}
_NEOX_MODULES |= {t: _NEOX_MODULES["gpt_neox"]
                  for t in ("persimmon", "falcon", "gpt_neox_japanese")}  # (and BLOOM's)
# ModernBERT and its decoder (graph/families/modernbert.py): Wqkv or q/k/v_proj, the
# attention's and the MLP's Wo told apart by their module, the fused GeGLU Wi
_MODERNBERT_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "qkv": "Wqkv",
                       "o": "attn.Wo", "gate_up": "Wi", "down": "mlp.Wo"}
# CTRL (graph/families/gptlike.py): Wq, Wk, Wv, dense; the MLP an nn.Sequential
_CTRL_MODULES = {"q": "Wq", "k": "Wk", "v": "Wv", "o": "dense", "up": "ffn.0",
                 "down": "ffn.2", "lm_head": "lm_head"}
# GPT-Neo (graph/families/gptlike.py): q/k/v_proj and out_proj, GPT-2's c_fc and c_proj
_GPT_NEO_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj",
                    "up": "c_fc", "down": "c_proj", "lm_head": "lm_head"}
# MPT (graph/families/gptlike.py): the fused Wqkv, out_proj, up_proj and down_proj
_MPT_MODULES = {"qkv": "Wqkv", "o": "out_proj", "up": "up_proj", "down": "down_proj",
                "lm_head": "lm_head"}
# DBRX (graph/families/dbrx.py): the fused Wqkv, out_proj, the router's nn.Linear (its
# experts are plain parameters no target reaches), the LM head
_DBRX_MODULES = {"qkv": "Wqkv", "o": "out_proj", "router": "router.layer", "lm_head": "lm_head"}
# OPT (graph/families/opt.py): out_proj, fc1, fc2; "project" is both projections of the
# embeddings (project_in, project_out), as transformer_calc.lora gives the role
# XLM's, Flaubert's and DistilBERT's projections and FFN
_XLM_MODULES = {"q": "q_lin", "k": "k_lin", "v": "v_lin", "o": "out_lin", "up": "lin1",
                "down": "lin2"}
_OPT_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj", "up": "fc1",
                "down": "fc2", "project": "project_in"}

FULL_NOTE = ("full recomputation: each layer's input is kept; one layer is rebuilt at a time "
             "in backward")
SELECTIVE_NOTE = "selective recomputation: the attention probabilities are recomputed"
LORA_NOTE = ("LoRA: the frozen base keeps only what its inputs' gradients need; each adapter "
             "keeps its input and the B·T·r output of lora_A")
KEPT_NOTE = "kept per layer (full recomputation)"
KERNEL_NOTE = "from the kernel's source, not measured on a GPU"
FLASH_NOTE = ("flash_attention_2 runs flash-attn 2's FlashAttnFunc: it keeps q, k, v (K/V "
              "heads not repeated), the output and a B·H·T log-sum-exp in fp32, and a 16-byte "
              "RNG state; a sliding window is its window_size (from the kernel's source, not "
              "measured on a GPU)")


def graph_activations(spec: ModelSpec, s: Settings, T: int, *, amp: bool, amp16: bool,
                      adapted_roles: frozenset[str] | None, pattern: object = None
                      ) -> Breakdown | None:
    """The saved activations from the op graph, or None where the graph does not express
    this run (the caller's rules answer it). ``amp``: autocast over fp32 weights; ``amp16``:
    autocast over a 16-bit model (LoRA's base under --mixed, FSDP2's bf16 gathers);
    ``adapted_roles``: the LoRA roles the targets select (transformer_calc.lora), None for
    full training."""
    if not _expressible(spec, s, T, pattern):
        return None
    family = _family(spec)
    if family is None:
        return None
    if s.attention == "flash" and not _flash_attention_2(spec, family):
        return None
    if _sparse_note(pattern, T) and not _flash_branch(family):
        return None  # (a family whose attention is not one interface call throughout)
    if _t5_cuda_sdpa(family, s) or _no_global_tokens(family, T) or _encoder_block_sparse(
            family, T) or not _deepseek_v4_run(family, s, T, amp or amp16, adapted_roles):
        return None
    family = _dropout(family, s)
    if family is None:
        return None
    if not _mixer_run(family, s, adapted_roles, amp or amp16):
        return None
    family = _experts(spec, family, s, amp or amp16)
    if family is None:
        return None
    lora = None
    if adapted_roles is not None:
        lora = _lora(family, s, adapted_roles, spec.peft_moe)
        if lora is None:
            return None
        if s.quant:
            lora = _quantised(spec, family, lora, s, amp or amp16)
            if lora is None:
                return None
    run = _run(s, T, amp, amp16, lora)
    if s.freeze and not _parts_agree(spec, family, run):
        return None
    return _breakdown(spec, family, run, _sparse_note(pattern, T))


def _sparse_note(pattern: object, T: int) -> str:
    """An --attention-pattern whose keys do not cover the sequence: the rules' note (memory.
    activation_breakdown's), which the graph answers only where its kernel keeps no score
    tensor (a block-sparse flash kernel keeps what the dense one keeps; the pattern saves
    compute, not memory); "" for dense attention."""
    from transformer_calc.flops import pattern_keys

    if pattern is None or getattr(pattern, "kind", "dense") == "dense":
        return ""
    keys = pattern_keys(pattern, T)  # type: ignore[arg-type]
    if keys == T:
        return ""
    return (f"attention pattern {pattern.describe()}: {keys:,} keys per query of "  # type: ignore[attr-defined]
            f"{T:,}; the kernel keeps no score tensor, so the pattern saves compute, not "
            "memory (a block-sparse flash kernel keeps the output and log-sum-exp as the "
            "dense one does)")


def _encoder_block_sparse(family: Family, T: int) -> bool:
    """BigBird-Pegasus's encoder at T from block_sparse_from on: transformers runs its
    block-sparse attention there, which the graph does not express (the rules answer)."""
    from transformer_calc.graph.families.bart import Bart

    return isinstance(family, Bart) and 0 < family.block_sparse_from <= T


def _parts_agree(spec: ModelSpec, family: Family, run: Run) -> bool:
    """--freeze: the graph's parameters that still train, by its module paths
    (graph/parts.py), are count_params' trainable ones, by its row names; where they are not,
    the graph reads a module's part otherwise and does not answer."""
    from transformer_calc.graph.compile import evaluate_fast
    from transformer_calc.params import by_category, count_params

    frozen = sum(n for c, n in by_category(count_params(spec)).items() if c in run.frozen)
    got = evaluate_fast(family, run)
    return got.params - got.trainable_params == frozen


# specs seen, by identity (a sweep asks about one spec thousands of times; hashing a
# ModelSpec's ~190 fields costs more than the answer): id -> (the spec, its family)
_FAMILIES: dict[int, tuple[ModelSpec, Family | None]] = {}


def _family(spec: ModelSpec) -> Family | None:
    """The spec's graph family, or None where it has none (or a size 0: no FFN...)."""
    from transformer_calc.graph.evaluate import family_of

    hit = _FAMILIES.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    try:
        family: Family | None = family_of(spec)
    except TcalcError:
        family = None
    if family is not None and min(family.sizes().values()) < 1:
        family = None
    if len(_FAMILIES) > 256:
        _FAMILIES.clear()
    _FAMILIES[id(spec)] = (spec, family)
    return family


def _expressible(spec: ModelSpec, s: Settings, T: int, pattern: object) -> bool:
    """The settings the graph models: transformers' eager or SDPA attention with torch's
    kernel choice or its flash_attention_2 on CUDA (_flash_attention_2), dense attention
    or a pattern whose keys cover the sequence, or one under SDPA or flash_attention_2
    (--attention-pattern describes a block-sparse kernel transformers does not run: a
    fused kernel's saved set is the dense one's, _breakdown; eager's masked T² scores are
    not the block-sparse softmax the rules describe), transformers' layers, an
    unquantised base or one _bnb names."""
    dense = s.attention != "eager" or not _sparse_note(pattern, T)
    flash = s.attention == "flash" and s.device == "cuda"
    return (dense and (s.attention in ("eager", "sdpa") or flash)
            and (spec.sdpa_path or s.attention != "sdpa")
            and s.device in ("cpu", "cuda") and s.activations == "hf"
            and (not s.quant or _bnb(s) is not None) and (bool(s.quant) or not s.bnb_legacy))


def _flash_attention_2(spec: ModelSpec, family: Family) -> bool:
    """Whether the graph runs this model under transformers' flash_attention_2: its class
    takes it (_supports_flash_attn, hf_defaults.NO_FLASH lists those that do not: the rules
    answer them, as for a class without an SDPA path) and the family's forward has the
    flash branch (_flash_branch)."""
    from transformer_calc.hf_defaults import NO_FLASH

    return spec.model_type not in NO_FLASH and _flash_branch(family)


def _flash_branch(family: Family) -> bool:
    """Whether the family's forward runs every attention through one call of transformers'
    attention interface, with the flash branch (graph/flash.py): the Llama graph (DiffLlama's
    two calls over V's halves too) and the MoE families on its layers, Gemma 1-3,
    VaultGemma, Gemma 3n and Gemma 4 (text), GPT-2, the NeoX-style decoders (GPT-NeoX, Phi,
    StableLM, Persimmon), Cohere 1-2, the latent attention (DeepSeek-V2/V3 and their kin,
    V padded to the query's head dim; DSA's indexer builds a mask: no flash path), OPT,
    BioGPT, GPTBigCode, CTRL, Beam (its sliding layers' window), Falcon-H1's attention, the
    BERT-style encoders (bidirectional: the kernel's causal off), BART and its kin,
    Whisper's decoder; and the classes of their own FlashAttention2 module: GPT-J, GPT-Neo,
    Falcon with RoPE (with ALiBi it raises: memory.py refuses)."""
    from transformer_calc.graph.families.albert import Albert
    from transformer_calc.graph.families.bart import Bart
    from transformer_calc.graph.families.beam import Beam
    from transformer_calc.graph.families.bert import Bert, Factorized, RoCBert
    from transformer_calc.graph.families.cohere import Cohere, CohereMoe
    from transformer_calc.graph.families.falcon import Falcon
    from transformer_calc.graph.families.falcon_h1 import FalconH1
    from transformer_calc.graph.families.gemma import Gemma
    from transformer_calc.graph.families.gemma3n import Gemma3n
    from transformer_calc.graph.families.gemma4 import Gemma4
    from transformer_calc.graph.families.gpt2 import GPT2
    from transformer_calc.graph.families.gptj import GPTJ
    from transformer_calc.graph.families.gptlike import Ctrl, GPTBigCode, GPTNeo
    from transformer_calc.graph.families.llama import Llama
    from transformer_calc.graph.families.mla import Mla, MlaMoe
    from transformer_calc.graph.families.moe import Moe
    from transformer_calc.graph.families.neox import NeoX
    from transformer_calc.graph.families.opt import OPT, BioGpt
    from transformer_calc.graph.families.rope_encoder import RopeEncoder
    from transformer_calc.graph.families.whisper import Whisper

    if type(family) is Llama:  # (DiffLlama: two calls, each through the interface)
        return True
    if type(family) in (Mla, MlaMoe):
        return not family.indexer  # type: ignore[union-attr]
    if type(family) is GPTJ:
        return family.model == "gptj"  # type: ignore[union-attr]
    if type(family) is Falcon:
        return not family.alibi  # type: ignore[union-attr]
    return type(family) in (Moe, Gemma, Gemma4, Gemma3n, GPT2, NeoX, Cohere, CohereMoe, OPT,
                            BioGpt, GPTBigCode, Ctrl, GPTNeo, Beam, FalconH1, Bert,
                            Factorized, RoCBert, Albert, RopeEncoder, Bart, Whisper)


def _bnb(s: Settings) -> str | None:
    """The base's quantised layers as graph/lora.py's Lora names them, or None where the graph
    does not model them: torchtune's torchao NF4 ("nf4": its recipe's --qlora); bitsandbytes'
    4-bit (before or since 0.44) or 8-bit layers, computed in the model's dtype (16- or
    32-bit), under peft's adapters of any dtype (Lightning's 4-bit layers quantise the LM
    head too: _quantised)."""
    if s.recipe == "torchtune" and s.quant == "bnb-nf4":
        return "nf4"
    if s.quant in ("bnb-nf4", "bnb-fp4"):
        return "4bit-legacy" if s.bnb_legacy else "4bit"
    return "int8" if s.quant == "bnb-int8" else None


# model types whose class names modules to keep in fp32 (transformers 5.23:
# _keep_in_fp32_modules): from_pretrained with a quantization_config leaves them out of
# replace_with_bnb_linear (get_modules_to_not_convert), and loads them in fp32 only under an
# fp16 dtype (_get_dtype_plan; the graph's one model dtype does not say that). Those whose
# quantised rows the graph reproduces, with the modules left out that are nn.Linear layers
# (T5's "wo"; gpt-oss keeps its norms, none a linear):
_KEPT_LINEARS: dict[str, frozenset[str]] = {
    "t5": frozenset(("wo",)), "mt5": frozenset(("wo",)), "umt5": frozenset(("wo",)),
    "gpt_oss": frozenset()}
# and the rest, unmeasured (the rules answer)
_KEEP_IN_FP32 = frozenset(("afmoe", "axk2", "deepseek_v32", "deepseek_v4", "glm_moe_dsa",
                           "longcat_flash", "mistral_large4", "pop2piano", "udop"))


def _quantised(spec: ModelSpec, family: Family, lora: Lora, s: Settings, amp: bool
               ) -> Lora | None:
    """LoRA over a quantised base: every Builder.linear and Builder.conv1d of a family is an
    nn.Linear or Conv1D that transformers' replace_with_bnb_linear converts (the LM heads,
    which it leaves out, are ops.linear; Falcon's FalconLinear, a subclass it does not
    convert, is Builder.linear(matmul=True)); torchtune's NF4 over its model in bf16, no
    autocast. The families whose quantised CPU rows the graph reproduces
    (tests/data/quantised_base_activations_cpu.jsonl, quantised_base_more_activations_cpu.jsonl):
    Llama (Phi-3's fused qkv_proj too), Gemma, GPT-2, BERT, Falcon, OPT, T5 (its wo left
    unquantised: _KEPT_LINEARS), BART, the dense MLA decoders, GPT-NeoX, the MoE decoders
    whose router is a parameter (Mixtral's, Qwen2-MoE's, DeepSeek-V3's sigmoid router,
    gpt-oss's: nothing replace_with_bnb_linear converts there but the nn.Linear layers) and
    Jamba (its mixer calls dt_proj on a quantised model). The rest is unmeasured."""
    import dataclasses

    from transformer_calc.graph.families.bart import Bart
    from transformer_calc.graph.families.bert import Bert
    from transformer_calc.graph.families.falcon import Falcon
    from transformer_calc.graph.families.gemma import Gemma
    from transformer_calc.graph.families.gpt2 import GPT2
    from transformer_calc.graph.families.gpt_oss import GptOss
    from transformer_calc.graph.families.jamba import Jamba
    from transformer_calc.graph.families.llama import Llama
    from transformer_calc.graph.families.mla import Mla, MlaMoe
    from transformer_calc.graph.families.moe import Moe
    from transformer_calc.graph.families.neox import NeoX
    from transformer_calc.graph.families.opt import OPT
    from transformer_calc.graph.families.t5 import T5

    quant = _bnb(s)
    if quant is None or spec.model_type in _KEEP_IN_FP32 or (quant == "nf4" and amp):
        return None
    if spec.model_type in _KEPT_LINEARS and s.precision == "fp16":
        return None  # its kept modules in fp32 under a 16-bit model
    if spec.model_type == "longt5" and quant != "int8":
        # LongT5 over a 4-bit base fails in transformers 5.23 (a RuntimeError in
        # LongT5LayerFF's dropout, tools/measure_activations_hf.py --quant bnb-nf4): unmeasured
        return None
    measured = type(family) in (Llama, Gemma, GPT2, Falcon, OPT, Bert, NeoX, T5, Bart) or (
        type(family) is Mla and not spec.n_experts) or (
        isinstance(family, Moe | Jamba) and type(family) in (Moe, Jamba, MlaMoe, GptOss)
        and family.router in ("mixtral", "qwen", "jamba", "sigmoid", "gpt_oss")
        and not spec.peft_router_linear)
    if not measured:
        return None
    # Lightning's BitsandbytesPrecision replaces every nn.Linear, the LM head's too (4-bit:
    # Builder.head), where the head is one the families build with Builder.head
    head = s.lightning_bnb and quant.startswith("4bit")
    if head and type(family) not in (Llama, Gemma, Falcon):
        return None
    lora = dataclasses.replace(lora, quant=quant, head=head,
                               unconverted=_KEPT_LINEARS.get(spec.model_type, frozenset()))
    # MatMul4Bit before 0.44 and MatMul8bitLt hold A as a ctx attribute, not through
    # save_for_backward: non-reentrant checkpointing's saved-tensor hooks do not see it, so
    # under full recomputation each layer's inputs would stay held; unmeasured, the rules answer
    if lora.base_keeps_input and s.recompute == "full":
        return None
    return lora


def _t5_cuda_sdpa(family: Family, s: Settings) -> bool:
    """T5's SDPA on CUDA: its position bias is a float mask that requires a gradient, which
    the memory-efficient kernel pads and keeps as it chooses; no GPU measurement shows which
    (the CPU rows are measured: the flash kernel keeps the mask, the math kernel not)."""
    from transformer_calc.graph.families.t5 import T5

    return isinstance(family, T5) and s.device == "cuda" and s.attention == "sdpa"


def _deepseek_v4_run(family: Family, s: Settings, T: int, autocast: bool,
                     adapted_roles: frozenset[str] | None) -> bool:
    """Whether the graph expresses this run of DeepSeek-V4 (families/deepseek_v4.py): what
    the measured rows ran, the CPU without autocast and without LoRA (peft's Linear over
    its grouped o_a_proj is not DeepseekV4GroupedLinear's bmm), and at least one entry per
    compressor (fewer tokens than a compress rate: new_zeros entries the graph does not
    express; the rules answer)."""
    from transformer_calc.graph.families.deepseek_v4 import DeepseekV4

    if not isinstance(family, DeepseekV4):
        return True
    rates = [r for k, r in (("Q", family.Mc), ("H", family.Mh)) if k in family.kinds]
    return s.device == "cpu" and not autocast and adapted_roles is None and max(
        rates, default=1) <= T


def _no_global_tokens(family: Family, T: int) -> bool:
    """LongT5's transient-global attention over fewer than global_block_size tokens: no
    global tokens, zero-size side keys the graph does not express; BigBird's block-sparse
    attention, from its sparse_from on (the rules answer both)."""
    from transformer_calc.graph.families.bert import BigBird
    from transformer_calc.graph.families.t5 import T5

    if isinstance(family, BigBird):
        return 0 < family.sparse_from <= T
    return isinstance(family, T5) and family.global_block > T


def _dropout(family: Family, s: Settings) -> Family | None:
    """The family with dropout as the run has it: the model's own (None), or off (False);
    on where the model has none is not a probability the graph can know (None)."""
    import dataclasses

    from transformer_calc.graph.families.bart import Bart
    from transformer_calc.graph.families.bert import Bert
    from transformer_calc.graph.families.dbrx import Dbrx
    from transformer_calc.graph.families.falcon import Falcon
    from transformer_calc.graph.families.fsmt import Fsmt
    from transformer_calc.graph.families.gpt2 import GPT2
    from transformer_calc.graph.families.gptj import GPTJ
    from transformer_calc.graph.families.gptlike import Ctrl, GPTNeo, Mpt
    from transformer_calc.graph.families.lfm2 import Lfm2
    from transformer_calc.graph.families.mamba import Mamba, Mamba2
    from transformer_calc.graph.families.minimax import Minimax
    from transformer_calc.graph.families.neox import NeoX
    from transformer_calc.graph.families.olmo_hybrid import OlmoHybrid
    from transformer_calc.graph.families.paper import Paper
    from transformer_calc.graph.families.t5 import T5
    from transformer_calc.graph.families.whisper import Whisper

    if s.dropout is None:
        return family
    off: Family
    # no dropout in these models (OLMo Hybrid's graph: its attention_dropout 0, as mapped;
    # MiniMax's: refused)
    if isinstance(family, Mamba | Mamba2 | OlmoHybrid | Lfm2 | Minimax):
        on, off = 0.0, family
    elif isinstance(family, T5):
        on = family.dropout
        off = dataclasses.replace(family, dropout=0.0)
    elif isinstance(family, Bart | Fsmt | Whisper):
        on = family.dropout or family.attention_dropout or family.activation_dropout
        off = dataclasses.replace(family, dropout=0.0, attention_dropout=0.0,
                                  activation_dropout=0.0)
    elif isinstance(family, Bert):
        on = family.hidden_dropout or family.attention_dropout
        off = dataclasses.replace(family, hidden_dropout=0.0, attention_dropout=0.0)
    elif isinstance(family, GPT2 | GPTJ):
        on = family.resid_pdrop or family.embd_pdrop or family.attn_pdrop
        off = dataclasses.replace(family, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    elif isinstance(family, Ctrl):  # (no dropout on its scores)
        on = family.resid_pdrop or family.embd_pdrop
        off = dataclasses.replace(family, resid_pdrop=0.0, embd_pdrop=0.0)
    elif isinstance(family, Dbrx):  # resid_pdrop and attn_pdrop
        on = family.dropout or family.attention_dropout
        off = dataclasses.replace(family, dropout=0.0, attention_dropout=0.0)
    elif isinstance(family, Paper | Mpt):  # one dropout throughout (MPT: attn_pdrop)
        on = family.dropout
        off = dataclasses.replace(family, dropout=0.0)
    elif isinstance(family, GPTNeo):
        on = family.dropout or family.attention_dropout or family.embed_dropout
        off = dataclasses.replace(family, dropout=0.0, attention_dropout=0.0,
                                  embed_dropout=0.0)
    elif isinstance(family, Falcon):
        on = family.hidden_dropout or family.attention_dropout
        off = dataclasses.replace(family, hidden_dropout=0.0, attention_dropout=0.0)
    elif isinstance(family, NeoX):
        on = family.hidden_dropout or family.embd_dropout or family.attention_dropout
        off = dataclasses.replace(family, hidden_dropout=0.0, embd_dropout=0.0,
                                  attention_dropout=0.0)
    else:
        on = family.attention_dropout
        off = dataclasses.replace(family, attention_dropout=0.0)
    if s.dropout:
        return family if on else None
    return off


def _mixer_run(family: Family, s: Settings, adapted_roles: frozenset[str] | None,
               autocast: bool = False) -> bool:
    """Whether the graph expresses this run of a recurrent-mixer family. Mamba, Mamba-2,
    Bamba, Falcon-H1, Jamba, Nemotron-H, OLMo Hybrid, Kimi Linear, Qwen3-Next and Qwen3.5 are
    transcribed as transformers' torch path runs them on the CPU, with or without autocast
    (tests/data/autocast_activations_mixers_cpu.jsonl); LoRA where measured (the hybrids'
    rows). On CUDA transformers calls the mamba_ssm, causal-conv1d and fla kernels where
    installed: the graph transcribes Mamba's MambaInnerFn and Mamba-2's, Bamba's,
    Falcon-H1's and Nemotron-H's fused kernel, their weight casts under autocast included,
    Jamba's CausalConv1dFn and SelectiveScanFn and LFM2's CausalConv1dFn (from their
    source, not measured on a GPU); the others keep the rules there."""
    from transformer_calc.graph.families.bamba import Bamba
    from transformer_calc.graph.families.falcon_h1 import FalconH1
    from transformer_calc.graph.families.jamba import Jamba
    from transformer_calc.graph.families.kimi_linear import KimiLinear
    from transformer_calc.graph.families.lfm2 import Lfm2
    from transformer_calc.graph.families.mamba import Mamba, Mamba2
    from transformer_calc.graph.families.minimax import Minimax
    from transformer_calc.graph.families.nemotron_h import NemotronH
    from transformer_calc.graph.families.olmo_hybrid import OlmoHybrid
    from transformer_calc.graph.families.qwen3_next import Qwen3Next

    if isinstance(family, Qwen3Next):
        # the Gated DeltaNet's torch fallbacks (the CPU's; on CUDA transformers calls fla's
        # and causal-conv1d's kernels where installed); an attention-only Qwen3.5-MoE runs
        # no fallback
        mixer = "c" in family.kinds or "d" in family.kinds
        lora_ok = adapted_roles is None or "lm_head" not in adapted_roles
        return (s.device == "cpu" or not mixer) and lora_ok
    if isinstance(family, Minimax):
        # MiniMax's lightning attention: its Python loop over blocks, what the CPU rows ran;
        # transformers has no kernel for it, so CUDA runs the same torch ops (not measured
        # on a GPU)
        return s.device in ("cpu", "cuda")
    if isinstance(family, Lfm2):
        # LFM2's short convolution: causal_conv1d_fn's torch fallback, what the CPU runs; on
        # CUDA LFM2's and LFM2-MoE's call causal-conv1d's kernel (ops.causal_conv1d_fn, from
        # its source), which takes widths 2 to 4 and, over Bx's channel-last layout,
        # channels in multiples of 8 (else it raises: the rules answer); LFM3's fallback on
        # CUDA (F.conv1d's layout there) is not modelled. An LFM2 of convolutions alone says
        # no head_dim, which the rotary table every checkpointed layer keeps has: full
        # recomputation keeps the rules (LFM3's convolutions get no table)
        kernel = s.device == "cpu" or (
            s.device == "cuda" and ("M" not in family.mixers or (
                not family.lfm3 and 2 <= family.Kc <= 4 and family.E % 8 == 0)))
        return kernel and ("F" in family.mixers or family.lfm3 or s.recompute != "full")
    hybrids = Bamba | FalconH1 | Jamba | OlmoHybrid | KimiLinear | NemotronH
    if not isinstance(family, Mamba | Mamba2 | hybrids):
        return True
    if isinstance(family, Bamba) and "F" not in family.kinds and s.recompute == "full":
        # mixers alone (BambaConfig's and GraniteMoeHybridConfig's defaults): every
        # checkpointed layer keeps the rotary table BambaModel makes (GraniteMoeHybrid's
        # where position_embedding_type is "rope"), of a head_dim a spec without heads does
        # not say: full recomputation keeps the rules
        return False
    # (their graphs' LM heads are plain linears: an adapted lm_head keeps the rules)
    lora_ok = adapted_roles is None or (isinstance(family, hybrids)
                                        and "lm_head" not in adapted_roles)
    if isinstance(family, OlmoHybrid | KimiLinear) and adapted_roles is not None \
            and s.lora_targets != ("all-linear",) and adapted_roles & {"q", "k", "v", "o"}:
        # the delta attention's q_proj, k_proj, v_proj, o_proj are peft's names too: a
        # target list adapts both kinds of layer, where tcalc's roles name the attention's
        lora_ok = False
    if s.device == "cuda":  # mamba_ssm's fused kernels (families/mamba.py), without LoRA
        # (peft's out_proj adapter is bypassed: the kernel reads out_proj.weight itself);
        # NemotronHMamba2Mixer calls the same mamba2_split_conv1d_scan_combined
        # Jamba's causal-conv1d and selective-scan kernels (families/mamba.py) in full
        # training without autocast (under it, its norms' fp32 products give the scan a B
        # and C of another dtype than u, which selective_scan_cuda refuses), where
        # causal-conv1d takes the channel-last input: widths 2 to 4, channels in 8s
        jamba = isinstance(family, Jamba) and not autocast and 2 <= family.Kc <= 4 \
            and family.Di % 8 == 0
        return (isinstance(family, Mamba | Mamba2 | Bamba | FalconH1 | NemotronH) or jamba) \
            and adapted_roles is None
    return s.device == "cpu" and lora_ok


def _experts(spec: ModelSpec, family: Family, s: Settings, autocast: bool) -> Family | None:
    """An MoE family with the experts implementation the run uses (memory.experts_impl:
    --experts, or transformers' default), or None where the graph does not model it (Llama 4
    and DBRX under autocast: no row measures them)."""
    import dataclasses

    from transformer_calc.graph.families.gemma4 import Gemma4
    from transformer_calc.graph.families.jamba import Jamba
    from transformer_calc.graph.families.lfm2 import Lfm2Moe
    from transformer_calc.graph.families.minimax import Minimax
    from transformer_calc.graph.families.moe import Moe
    from transformer_calc.memory import experts_impl

    if isinstance(family, Gemma4) and family.experts:  # Gemma4TextExperts: either path
        impl = experts_impl(spec, s.experts)
        if impl not in ("eager", "grouped_mm"):
            return None
        return dataclasses.replace(family, grouped=impl == "grouped_mm")
    from transformer_calc.graph.families.mimo_v2_flash import MiMoV2Flash
    from transformer_calc.graph.families.minimax_m3 import MiniMaxM3
    from transformer_calc.graph.families.nemotron_h import NemotronH

    if isinstance(family, MiniMaxM3):  # its experts' own loop (grouped_mm: unmeasured)
        return family if experts_impl(spec, s.experts) == "eager" else None
    from transformer_calc.graph.families.deepseek_v4 import DeepseekV4

    if isinstance(family, NemotronH | MiMoV2Flash | DeepseekV4):  # their loop or grouped_mm
        impl = experts_impl(spec, s.experts)
        if impl not in ("eager", "grouped_mm"):
            return None
        return dataclasses.replace(family, grouped=impl == "grouped_mm")
    from transformer_calc.graph.families.granitemoehybrid import GraniteMoeHybrid

    if isinstance(family, Lfm2Moe | Minimax | GraniteMoeHybrid):  # Mixtral's experts
        impl = experts_impl(spec, s.experts)
        if impl not in ("eager", "grouped_mm"):
            return None
        return dataclasses.replace(family, grouped=impl == "grouped_mm")
    from transformer_calc.graph.families.llama4 import Llama4

    if isinstance(family, Llama4):
        # Llama4TextExperts' own bmm over every token, whatever the experts implementation
        # (no row measures autocast)
        return None if autocast else family
    if not isinstance(family, Moe | Jamba):
        return family
    impl = experts_impl(spec, s.experts)
    # (DBRX under autocast: no row measures it)
    if (autocast and family.router == "dbrx") or impl not in ("eager", "grouped_mm"):
        return None
    return dataclasses.replace(family, grouped=impl == "grouped_mm")


def _lora(family: Family, s: Settings, roles: frozenset[str], peft_moe: str = "none"
          ) -> Lora | None:
    """peft's targets for the roles tcalc resolved, or None where no module-name list gives
    exactly those layers."""
    from transformer_calc.graph.families.bart import Bart
    from transformer_calc.graph.families.bert import Bert
    from transformer_calc.graph.families.bloom import Bloom
    from transformer_calc.graph.families.dbrx import Dbrx
    from transformer_calc.graph.families.deberta import Deberta
    from transformer_calc.graph.families.distilbert import DistilBert
    from transformer_calc.graph.families.falcon import Falcon
    from transformer_calc.graph.families.fsmt import Fsmt
    from transformer_calc.graph.families.gpt2 import GPT2
    from transformer_calc.graph.families.gptj import GPTJ
    from transformer_calc.graph.families.gptlike import Ctrl, GPTNeo, Mpt
    from transformer_calc.graph.families.lfm2 import Lfm2
    from transformer_calc.graph.families.llama import Llama
    from transformer_calc.graph.families.minimax import Minimax
    from transformer_calc.graph.families.mla import MLA_MODULES, Mla, converted_all_linear
    from transformer_calc.graph.families.modernbert import ModernBert
    from transformer_calc.graph.families.moe import Moe
    from transformer_calc.graph.families.neox import NeoX
    from transformer_calc.graph.families.opt import OPT
    from transformer_calc.graph.families.paper import Paper
    from transformer_calc.graph.families.qwen3_next import Qwen3Next
    from transformer_calc.graph.families.rope_encoder import RopeEncoder
    from transformer_calc.graph.families.t5 import T5
    from transformer_calc.graph.families.whisper import Whisper
    from transformer_calc.graph.families.xlm import XLM
    from transformer_calc.graph.lora import Lora
    from transformer_calc.graph.tensor import BF16, F16

    if isinstance(family, Paper):
        return _paper_lora(s, roles)
    # FSDP2 under --mixed gathers every parameter, the adapters too, in 16-bit; torchtune and
    # LitGPT make the adapters in the model's dtype (--adapter-dtype)
    named = {"bf16": BF16, "fp16": F16}.get(s.adapter_dtype)
    dtype = (F16 if s.precision == "fp16" else BF16) if s.fsdp2_mixed else named
    table = (_GPT2_MODULES if isinstance(family, GPT2) else
             _rope_encoder_modules(family) if isinstance(family, RopeEncoder) else
             _deberta_modules(family) if isinstance(family, Deberta) else
             _XLM_MODULES if isinstance(family, XLM | DistilBert) else
             _BERT_MODULES if isinstance(family, Bert) else
             _OPT_MODULES if isinstance(family, OPT) else
             _MODERNBERT_MODULES if isinstance(family, ModernBert) else
             _CTRL_MODULES if isinstance(family, Ctrl) else
             _GPT_NEO_MODULES if isinstance(family, GPTNeo) else
             _MPT_MODULES if isinstance(family, Mpt) else
             _NEOX_MODULES[family.model] if isinstance(family, NeoX | GPTJ) else
             _NEOX_MODULES["falcon"] if isinstance(family, Falcon | Bloom) else _MODULES)
    if isinstance(family, Llama) and not family.gated:  # NanoChat's fc1, fc2
        table = {**_MODULES, "up": family.mlp_names[0], "down": family.mlp_names[1]}
    if isinstance(family, Minimax):
        # Mixtral's experts and router, which peft 0.21 converts (its all-linear too:
        # measured, minimax-mixer.json), beside the lightning layers' nn.Linear
        if peft_moe != "mixtral":
            return None
        return _converted(family, s, roles, dtype, {"output_gate": "output_gate",
                                                    "qkv_proj": "qkv_proj"})
    if isinstance(family, Lfm2):
        # Lfm2MLP's w1, w3, w2; LFM2's attention output projection and its convolution's
        # are both out_proj to peft: in a model of both, o and out_proj go together or not
        # at all (LFM3's attention has o_proj, and its gate g_proj)
        table = {**_MODULES, "gate": "w1", "up": "w3", "down": "w2", "attn_gate": "g_proj"}
        if not family.lfm3:
            both = len(set(family.mixers)) == 2
            if both and s.lora_targets != ("all-linear",) \
                    and len(roles & {"o", "out_proj"}) == 1:
                return None
            table["o"] = "out_proj"
    if isinstance(family, T5):
        table = {**_T5_MODULES, "up": "wi_1" if family.gated else "wi"}
    elif isinstance(family, Bart | Whisper):
        table = _BART_MODULES
    elif isinstance(family, Fsmt):  # and its output projection, an nn.Linear to peft
        table = {**_BART_MODULES, "head": "output_projection"}
    if isinstance(family, Qwen3Next):
        return _qwen3_next_lora(family, s, roles, peft_moe, dtype)
    if isinstance(family, Dbrx):  # Wqkv, out_proj, router.layer: its only nn.Linear
        table = _DBRX_MODULES
    elif isinstance(family, Moe):
        if peft_moe in ("mixtral", "qwen2_moe"):
            return _converted(family, s, roles, dtype)
        # (Qwen2-MoE's experts are left alone: its gate/up/down are the dense and
        # shared-expert MLPs', and its shared_expert_gate an nn.Linear)
        table = {**_MODULES, "shared_gate": "shared_expert_gate"}
        if peft_moe == "linear_router":  # PhiMoE's PhimoeTopKRouter is an nn.Linear
            table["router"] = "router"
        if family.router == "llama4":
            return _llama4_lora(s, roles, dtype, table)
        if "shared" in roles and not (family.router in ("aria", "granitemoe_swa", "kolibri1")
                                      and s.lora_targets == ("all-linear",)):
            # the shared expert's gate/up/down: the names those roles give (all-linear
            # adapts Aria's shared experts, GraniteMoeShared's and Kolibri1's shared MLP,
            # their only MLPs of nn.Linear: measured)
            if not roles & {"gate", "up", "down"}:
                return None
            roles = roles - {"shared"}
    if _is_nemotron_h(family) and "shared" in roles:  # its shared MLP's up_proj, down_proj
        if not roles & {"up", "down"}:
            return None
        roles = roles - {"shared"}
    if isinstance(family, Mla):  # the latent attention's projections
        table = {**table, **MLA_MODULES}
        if peft_moe in ("mixtral", "qwen2_moe") and not isinstance(family, Moe):
            if roles & {"gate", "up", "down"}:
                return None  # names peft moves to the fused experts' weights
            if s.lora_targets == ("all-linear",):
                return Lora(s.lora_rank, converted_all_linear(family), s.lora_dropout, dtype)
    if s.lora_targets == ("all-linear",):
        return Lora(s.lora_rank, frozenset(("all-linear",)), s.lora_dropout, dtype)
    if _is_minimax_m3(family) and "shared" in roles:
        # its shared MLP's gate_up_proj and down_proj (the dense layers' names too): which
        # of them the targets name (peft matches gate_proj or up_proj to neither)
        wanted = {t.removesuffix("_proj") for t in s.lora_targets}
        shared = {n for n in ("gate_up_proj", "down_proj") if n.removesuffix("_proj") in wanted}
        rest = _lora(family, s, roles - {"shared"}, peft_moe) if roles - {"shared"} else None
        if not shared or (rest is None and roles - {"shared"}):
            return None
        return Lora(s.lora_rank, frozenset(shared) | (rest.targets if rest else frozenset()),
                    s.lora_dropout, dtype)
    if _is_gemma3n(family) and "laurel" in roles:  # LAuReL's two linears, one role
        rest = _lora(family, s, roles - {"laurel"}, peft_moe) if roles - {"laurel"} else None
        if rest is None and roles - {"laurel"}:
            return None
        laurel = frozenset(("linear_left", "linear_right"))
        return Lora(s.lora_rank, laurel | (rest.targets if rest else frozenset()),
                    s.lora_dropout, dtype)
    if not roles <= table.keys():
        return None
    if (isinstance(family, GPT2 | Bert) and not isinstance(family, RopeEncoder | DistilBert)
            and len(roles & {"o", "down"}) == 1):
        return None  # one of the two c_proj (output.dense) alone
    names = frozenset(table[r] for r in roles)
    if isinstance(family, OPT) and "project" in roles:
        if not family.projected:
            return None
        names |= {"project_out"}
    return Lora(s.lora_rank, names, s.lora_dropout, dtype)


def _paper_lora(s: Settings, roles: frozenset[str]) -> Lora | None:
    """The paper's Transformer: peft adapts nn.MultiheadAttention whole (lora.MultiheadAttention:
    in_proj and out_proj together, self_attn and multihead_attn by name) and the feed-forward's
    linear1 and linear2; None where the roles name one of the attention's two projections
    without the other, which no module name gives peft (transformers' adapter dtype aside)."""
    from transformer_calc.graph.lora import Lora

    attention = roles & {"qkv", "q", "k", "v", "o"}
    if attention and not ({"qkv", "o"} <= roles or s.lora_targets == ("all-linear",)):
        return None  # (transformer_calc.lora refuses it)
    if not roles <= {"qkv", "q", "k", "v", "o", "up", "down"} or s.fsdp2_mixed \
            or s.adapter_dtype not in ("", "fp32"):
        return None  # (adapters of the model's dtype: unmeasured)
    names = ({"self_attn", "multihead_attn"} if attention else set()) \
        | ({"linear1"} if "up" in roles else set()) | ({"linear2"} if "down" in roles else set())
    return Lora(s.lora_rank, frozenset(names), s.lora_dropout)


def _llama4_lora(s: Settings, roles: frozenset[str], dtype: DType | None,
                 table: dict[str, str]) -> Lora | None:
    """peft's targets on Llama 4: the shared expert's gate_proj, up_proj, down_proj (the
    shared role: those the targets name, which the dense layers' share) and the attention's;
    None over the router (Llama4Router returns a tuple: peft 0.21's lora.Linear fails on it,
    all-linear too)."""
    from transformer_calc.graph.lora import Lora

    if "router" in roles or s.lora_targets == ("all-linear",):
        return None
    named = frozenset(s.lora_targets) & {"gate_proj", "up_proj", "down_proj"}
    if "shared" in roles and not named:
        return None
    rest = roles - {"shared"}
    if not rest <= table.keys():
        return None
    return Lora(s.lora_rank, frozenset(table[r] for r in rest) | named, s.lora_dropout, dtype)


def _is_nemotron_h(family: Family) -> bool:
    from transformer_calc.graph.families.nemotron_h import NemotronH

    return isinstance(family, NemotronH)


def _is_minimax_m3(family: Family) -> bool:
    from transformer_calc.graph.families.minimax_m3 import MiniMaxM3

    return isinstance(family, MiniMaxM3)


def _is_gemma3n(family: Family) -> bool:
    from transformer_calc.graph.families.gemma3n import Gemma3n

    return isinstance(family, Gemma3n)


def _qwen3_next_lora(family: Qwen3Next, s: Settings, roles: frozenset[str], peft_moe: str,
                     dtype: DType | None) -> Lora | None:
    """peft's targets on Qwen3-Next and Qwen3.5: the Gated DeltaNet's input projections
    (tcalc's in_proj role) by their own names; Qwen3-Next converted as the qwen2_moe pattern
    (_converted); Qwen3.5-MoE not converted: its experts left alone, gate_proj, up_proj and
    down_proj naming the shared expert's linears (the shared role: those the targets name)."""
    from dataclasses import replace

    from transformer_calc.graph.lora import Lora

    in_proj = frozenset(("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")
                        if family.split_proj else ("in_proj_qkvz", "in_proj_ba"))
    extra = in_proj if "in_proj" in roles else frozenset()
    if peft_moe == "qwen2_moe":
        lora = _converted(family, s, roles - {"in_proj"}, dtype)
        return None if lora is None else replace(lora, targets=lora.targets | extra)
    if s.lora_targets == ("all-linear",):
        return Lora(s.lora_rank, frozenset(("all-linear",)), s.lora_dropout, dtype)
    table = {**_MODULES, "shared_gate": "shared_expert_gate"}
    if "shared" in roles:
        named = frozenset(s.lora_targets) & {"gate_proj", "up_proj", "down_proj"}
        if not named:
            return None
        extra |= named
    rest = roles - {"in_proj", "shared"}
    if not rest <= table.keys():
        return None
    return Lora(s.lora_rank, frozenset(table[r] for r in rest) | extra, s.lora_dropout, dtype)


def _converted(family: Moe | Minimax, s: Settings, roles: frozenset[str],
               dtype: DType | None, modules_of: dict[str, str] | None = None) -> Lora | None:
    """peft 0.21's targets for a MoE whose layout it converts (Mixtral's, the qwen2_moe
    pattern's: utils/transformers_weight_conversion.py, _convert_peft_config_moe): the
    router's and the experts' names (gate, w1/w3/w2 or gate_proj/up_proj/down_proj) become
    target_parameters, each wrapped by a ParamWrapper (gate.weight, gate_up_proj,
    down_proj), and leave target_modules (a dense MLP's gate_proj/up_proj/down_proj is not
    adapted: transformer_calc.lora.adapted_layers gives no such role). roles: the router,
    experts.gate_up, experts.out and the nn.Linear layers' roles. None where peft refuses a
    ParamWrapper (dropout) or computes it otherwise (16-bit adapters on the CPU).
    modules_of: the family's own module names beside Llama's (MiniMax's output_gate)."""
    from transformer_calc.graph.lora import Lora

    wrapped = {"router": "gate.weight", "experts.gate_up": "gate_up_proj",
               "experts.out": "down_proj"}
    from transformer_calc.graph.families.mla import MLA_MODULES, Mla

    table = {**_MODULES, "shared_gate": "shared_expert_gate", **(modules_of or {})}
    if isinstance(family, Mla):  # DeepSeek-V3's latent attention
        table.update(MLA_MODULES)
    if family.router == "hunyuan":  # its router is an nn.Linear: gate.wg, adapted as one
        del wrapped["router"]
        table["router"] = "wg"
    modules = roles - wrapped.keys()
    if s.lora_dropout or dtype is not None or not modules <= table.keys():
        return None
    return Lora(s.lora_rank, frozenset(table[r] for r in modules), s.lora_dropout, dtype,
                frozenset(wrapped[r] for r in roles & wrapped.keys()))


def _deberta_modules(family: Family) -> dict[str, str]:
    """DeBERTa's: v1's fused in_proj and pos_proj/pos_q_proj, v2's query/key/value_proj
    and pos_key_proj/pos_query_proj; BERT's intermediate and output dense."""
    ffn = {"up": "intermediate.dense", "o": "output.dense", "down": "output.dense"}
    if getattr(family, "v2", False):
        return {"q": "query_proj", "k": "key_proj", "v": "value_proj",
                "pos_key": "pos_key_proj", "pos_query": "pos_query_proj", **ffn}
    return {"qkv": "in_proj", "in_proj": "in_proj", "pos_key": "pos_proj",
            "pos_query": "pos_q_proj", **ffn}


def _rope_encoder_modules(family: Family) -> dict[str, str]:
    """GTE's and NomicBERT's module names are Llama's; Jina's plain MLP is fc1, fc2."""
    if getattr(family, "gated", True):
        return _MODULES
    return {**_MODULES, "up": "fc1", "down": "fc2"}


def _run(s: Settings, T: int, amp: bool, amp16: bool, lora: Lora | None) -> Run:
    from transformer_calc.graph.modules import Run
    from transformer_calc.graph.tensor import BF16, F16, F32

    half = F16 if s.precision == "fp16" else BF16
    if amp:  # torch autocast over fp32 weights
        dtype, autocast = F32, half
    elif amp16:  # autocast over a 16-bit model
        dtype, autocast = half, half
    else:
        dtype, autocast = (F32 if s.act_bytes == 4 else half), None
    return Run(s.batch_size, T, dtype, s.device, s.attention, autocast,
               use_cache=s.cache_in_training, lora=lora, recompute=s.recompute,
               frozen=frozenset(s.freeze),
               sdpa_kernel=s.sdpa_kernel if s.attention == "sdpa" else "auto")


def _breakdown(spec: ModelSpec, family: Family, run: Run, sparse_note: str = ""
               ) -> Breakdown | None:
    from transformer_calc.graph.compile import compile_run
    from transformer_calc.graph.families.moe import Moe
    from transformer_calc.graph.modules import symbol_values
    from transformer_calc.graph.names import tcalc_symbols

    values = symbol_values(run, family.sizes())
    st = compile_run(family, run)
    if sparse_note and run.attention == "sdpa" and (not st.kernels or "math" in st.kernels):
        return None  # the math kernel keeps T² probabilities: the rules' sparse softmax
    numbers = st.named_values(values)
    rows: list[Row] = []
    # (a replayed layer's storages are its traced layer's, so their rows merge: every row's
    # repeat is at least 1)
    for i, (name, text, stack, note) in enumerate(_templates(st, run)):
        rows.append((name, numbers[2 * i], text, "", numbers[2 * i + 1], stack, note, None, ()))
    notes: tuple[str, ...] = ()
    from transformer_calc.graph.families.deepseek_v4 import DeepseekV4
    from transformer_calc.graph.families.jamba import Jamba
    from transformer_calc.graph.families.lfm2 import Lfm2Moe
    from transformer_calc.graph.families.mimo_v2_flash import MiMoV2Flash
    from transformer_calc.graph.families.minimax import Minimax
    from transformer_calc.graph.families.nemotron_h import NemotronH

    # the experts' path, as the rules say it
    if isinstance(family, Moe | Jamba | Lfm2Moe | Minimax) or (
            isinstance(family, NemotronH) and "E" in family.kinds) or (
            isinstance(family, MiMoV2Flash) and set(family.kinds) & {"b", "d"}) or (
            isinstance(family, DeepseekV4)):
        from transformer_calc.memory import EXPERTS_NOTE

        # (the experts' path, as the rules say it; Llama 4's every expert on every token)
        impl = "every_expert" if getattr(family, "router", "") == "llama4" else \
            "grouped_mm" if getattr(family, "grouped", False) else "eager"
        notes += (f"experts run transformers' {impl} path"
                  + (" (this class's default)" if impl != "eager" else "") + ": "
                  + EXPERTS_NOTE[impl],)
    if run.attention == "sdpa":  # the execution profile, shown
        from transformer_calc.memory import KERNELS

        how = "as torch picks it" if run.sdpa_kernel == "auto" else "forced by --sdpa-kernel"
        notes += tuple(f"sdpa on {run.device} runs {k} ({how}): {KERNELS[k]}"
                       for k in sorted(st.kernels))
    if run.attention == "flash":
        notes += (FLASH_NOTE,)
    if sparse_note:
        notes += (sparse_note,)
    if run.lora is not None:
        notes += (LORA_NOTE,)
    if run.recompute == "selective":
        notes += (SELECTIVE_NOTE,)
    if run.recompute == "full":
        from transformer_calc.graph.families.bert import Bert
        from transformer_calc.graph.families.modernbert import ModernBert, ModernBertDecoder

        stack = "encoder" if isinstance(family, Bert | ModernBert) \
            and not isinstance(family, ModernBertDecoder) else "decoder"
        rows += _rebuilt(run, st, numbers[2 * len(st.named):], values, stack)
        notes += (FULL_NOTE,)
    # (a partial, not a lambda: reports pickle with their symbols)
    return Breakdown(spec.name, "bytes", tuple(rows), notes, {},
                     functools.partial(dict, tcalc_symbols(values)))


def _templates(st: Structure, run: Run) -> tuple[tuple[str, str, str, str], ...]:
    """Each named row's name, formula, stack and note, written once per structure."""
    from transformer_calc.graph.names import KERNEL_ROWS, row_of

    if st.templates is None:
        out = []
        for named in st.named:
            row = row_of(named, 0, 0)
            note = KEPT_NOTE if (run.recompute == "full" and named.name in (
                "decoder.checkpoint_input", "encoder.checkpoint_input")) else \
                KERNEL_NOTE if (run.device == "cuda" and named.name.split(".", 1)[-1]
                                in KERNEL_ROWS.values()) else row[6]
            out.append((row[0], row[2], row[5], note))
        st.templates = tuple(out)
    return st.templates


def _rebuilt(run: Run, st: Structure, per_layer: tuple[int, ...],
             values: dict[str, int], stack: str) -> list[Row]:
    """Full recomputation's rebuilt layer, live in backward only: the largest traced
    layer's rebuild (what its forward saves and allocates itself; its inputs are kept
    already), split into the part tensor parallelism splits and the rest; and the
    gradients its largest op holds while it runs backward: twice the largest tensor the
    rebuild saves (its output's gradient and its input's; measured on an H100,
    docs/peak_cuda_h100.md)."""
    from transformer_calc.memory import RECOMPUTED, RECOMPUTED_TP

    if not per_layer:
        return []
    totals = [int(x) for x in st.costs(values)]
    rebuilt = totals[-1]
    splits = per_layer[0::2]
    layer = max(range(len(splits)), key=lambda i: (
        _rebuilt_total(st, i, values), -i))
    split = splits[layer]
    rows: list[Row] = []
    for part, note, suffix, what in ((split, RECOMPUTED_TP, "_split",
                                      " that tensor parallelism splits"),
                                     (rebuilt - split, RECOMPUTED, "", "")):
        if part:
            rows.append((f"{stack}.recomputed_layer{suffix}", part,
                         f"one layer's activations{what}", f"{part:,}", 1, "", note, None,
                         ()))
    one = per_layer[1::2][layer]
    if one:
        note = RECOMPUTED_TP if one in _split_storages(st, layer, values) else RECOMPUTED
        rows.append((f"{stack}.rebuild_gradients", 2 * one, "2 · the largest tensor the "
                     "rebuilt layer saves (its gradient, and its input's)", f"2 · {one:,}", 1,
                     "", note, None, ()))
    return rows


def _rebuilt_total(st: Structure, layer: int, values: dict[str, int]) -> int:
    return int(st.rebuilt[layer].evaluate(values))


def _split_storages(st: Structure, layer: int, values: dict[str, int]) -> set[int]:
    """The sizes of the rebuilt layer's storages that tensor parallelism splits."""
    from transformer_calc.graph.names import tensor_parallel

    return {int(p.evaluate(values)) for p in st.rebuilt_storages[layer] if tensor_parallel(p)}
