"""Bytes PyTorch saves for backward, for any config.json tcalc reads (developer tool, needs torch
+ transformers), beside tcalc's activation estimate: the measurement of
tools/measure_activations.py (GPT-2 only), generalised to every architecture.

Method (as measure_activations.py): the class tcalc counts (hf.counted_class), built from the
config with random weights on the CPU, cast to the dtype, train mode, a forward with labels;
inside torch.autograd.graph.saved_tensors_hooks every tensor autograd packs is recorded by its
storage, each storage once, parameters excluded, and counted if autograd still holds it when the
forward is over (what backward reads; a storage freed mid-forward no longer counts, nor does a
later one at its address go uncounted). MoE experts run transformers' eager
implementation, or --experts grouped_mm (its default; the row then says so). One JSON line per
case.

    python tools/measure_activations_hf.py tests/data/hf/variants/qwen3-sliding-bias.json

--lora R: the same with peft's LoRA of rank R over the frozen base (--lora-targets,
--lora-dropout), beside tcalc's estimate with the same settings;
tests/data/activations_lora_cpu.jsonl holds B=2 T=128 --lora 8 on 11 variants, B=1 T=64
--lora 16 --lora-dropout 0.05 on 3, B=2 T=128 --lora 8 --lora-targets q_proj,v_proj on 2.
--tcalc-targets names the same layers in tcalc's roles where peft's module names are not
among tcalc's aliases (BERT's intermediate.dense is tcalc's up); the row records it.

--autocast: an fp32 model whose forward and loss run under torch.autocast("cpu",
torch.bfloat16); the rows say "autocast": "bf16" and count autocast's saved weight copies
too (saved_tensors_hooks sees them). tests/data/autocast_activations_moe_cpu.jsonl was written
by

    python tools/measure_activations_hf.py --autocast tests/data/hf/variants/{llama-head-dim,\
        mixtral-top1,qwen3_moe-sparse-step,olmoe-tiny,phimoe-top1,qwen2_moe-tiny}.json
    python tools/measure_activations_hf.py --autocast --experts grouped_mm \
        tests/data/hf/variants/{mixtral-top1,olmoe-tiny}.json
    python tools/measure_activations_hf.py --autocast --lora 8 --lora-targets q_proj,v_proj \
        tests/data/hf/variants/mixtral-top1.json
    python tools/measure_activations_hf.py --autocast --lora 8 --lora-targets w1,w2,w3 \
        tests/data/hf/variants/mixtral-top1.json
    python tools/measure_activations_hf.py --autocast --lora 8 \
        tests/data/hf/variants/qwen3_moe-sparse-step.json
    python tools/measure_activations_hf.py --autocast \
        tests/data/hf/variants/hunyuan_v1_moe-tiny.json

--quant bnb-nf4|bnb-fp4|bnb-int8 (with --lora): the base loaded as transformers loads a
bitsandbytes checkpoint (the random weights saved, then from_pretrained with a
BitsAndBytesConfig: replace_with_bnb_linear's own choice of layers, the compute dtype the
row's dtype), then peft's LoRA; the rows count, beside what the saved-tensor hooks see, what
the bitsandbytes autograd functions hold on ctx (MatMul8bitFp's ctx.A, the CPU's int8 path
in training; MatMul8bitLt's and MatMul4Bit's ctx.tensors), which the hooks do not see.
tests/data/quantised_base_activations_cpu.jsonl (bitsandbytes 0.50.2) was written by

    for q in bnb-nf4 bnb-int8; do python tools/measure_activations_hf.py --lora 8 --quant $q \
        tests/data/hf/variants/{llama-head-dim,gemma-gqa,gpt2-n-inner,bert-seq-cls,\
t5-gated-asym,falcon-new-rope,mixtral-top1,qwen2_moe-tiny,opt-projected,\
neox-sequential-nobias,phi3-gqa-tied,deepseek_v3-all-dense,jamba-tiny}.json; done
and tests/data/quantised_base_more_activations_cpu.jsonl (the SDPA rows of gpt-oss and LongT5
skipped: their classes have none; LongT5 over a 4-bit base raises in transformers 5.23) by

    for q in bnb-nf4 bnb-int8; do python tools/measure_activations_hf.py --lora 8 --quant $q \
        tests/data/hf/variants/{bart-asymmetric,deepseek_v3-no-q-lora-bias,\
gpt_oss-tied-nobias,t5-big-vocab,umt5-tiny,longt5-tglobal}.json; done
tests/data/autocast_activations_routers_mixers_cpu.jsonl (the routers and recurrent mixers;
its tcalc_bytes under --lora are tcalc's --mixed LoRA, a 16-bit base, not the fp32 base
measured) was written by

    V=tests/data/hf/variants
    python tools/measure_activations_hf.py --autocast $V/{deepseek_v3-no-q-lora-bias,\
        longcat_flash-tiny,hy_v3-tiny,dots1-tiny,beam-tiny,gpt_oss-tied-nobias,flint-tiny,\
        granitemoe_swa-tiny,minimax_m3_vl_text-tiny,mimo_v2_flash-tiny,mamba-mixer,\
        mamba2-mixer,bamba-tiny,falcon_h1-tiny,jamba-tiny,nemotron_h-tiny,olmo_hybrid-tiny,\
        kimi_linear-tiny,qwen3_next-tiny,qwen3_5_text-tiny,lfm2-tiny,lfm2_moe-tiny,\
        minimax-tiny}.json
    python tools/measure_activations_hf.py --autocast -B 1 -T 37 $V/{phimoe-top1,\
        deepseek_v3-no-q-lora-bias,hy_v3-tiny,gpt_oss-tied-nobias,mamba-mixer,mamba2-mixer,\
        bamba-tiny,falcon_h1-tiny,jamba-tiny,nemotron_h-tiny,olmo_hybrid-tiny,\
        kimi_linear-tiny,qwen3_next-tiny,lfm2-tiny,minimax-tiny}.json
    python tools/measure_activations_hf.py --autocast --lora 8 --lora-targets q_proj,v_proj \
        $V/{deepseek_v3-no-q-lora-bias,longcat_flash-tiny,gpt_oss-tied-nobias,\
        granitemoe_swa-tiny,mimo_v2_flash-tiny,bamba-tiny,falcon_h1-tiny,jamba-tiny,\
        nemotron_h-tiny,qwen3_next-tiny,qwen3_5_text-tiny,lfm2-tiny,minimax-tiny,\
        minimax_m3_vl_text-tiny}.json
    python tools/measure_activations_hf.py --autocast --lora 8 \
        $V/{dots1-tiny,beam-tiny,flint-tiny,jamba-tiny}.json
    python tools/measure_activations_hf.py --autocast --experts grouped_mm \
        $V/{deepseek_v3-no-q-lora-bias,hy_v3-tiny,gpt_oss-tied-nobias,mimo_v2_flash-tiny,\
        nemotron_h-tiny,lfm2_moe-tiny}.json

(the rows the measurement skipped, classes without SDPA, left out), and
tests/data/autocast_activations_deberta_v2_cpu.jsonl (torch.bmm at the top level, a LayerNorm
over a 16-bit input) by

    python tools/measure_activations_hf.py --autocast $V/deberta-v2-c2p-p2c.json

(its SDPA row skipped). tests/data/activations_bart_kin_cpu.jsonl (BART's kin, each config
class's defaults with small sizes; MVP's and BigBird-Pegasus's SDPA rows skipped: no SDPA
path; BigBird-Pegasus's T 160 rows block-sparse) by

    V=tests/data/hf/variants
    for a in "" "-B 1 -T 37" "--lora 8" "--lora 8 --lora-targets q_proj,v_proj" --autocast \
        "--fp16 -B 2 -T 8"; do
        python tools/measure_activations_hf.py $a $V/{mbart,plbart,blenderbot,\
blenderbot-small,pegasus,m2m_100,mvp}-tiny.json; done > tests/data/activations_bart_kin_cpu.jsonl
    for a in "" "-B 1 -T 37" --autocast "-B 1 -T 160" "--lora 8" "--fp16 -B 2 -T 8"; do
        python tools/measure_activations_hf.py $a $V/bigbird_pegasus-tiny.json
    done >> tests/data/activations_bart_kin_cpu.jsonl

tests/data/activations_moe_kin_a_cpu.jsonl (GraniteMoe, GraniteMoeShared, Aria's text
model, ERNIE 4.5 MoE, FlexOlmo, MiniMax-M2, Mellum, and ERNIE 4.5's dense model; its
tcalc_bytes tcalc's estimate before these types' graphs: the rules', ERNIE 4.5's a graph
without its interleaved fp32 RoPE) and tests/data/autocast_activations_moe_kin_a_cpu.jsonl
were written by

    python tools/measure_activations_hf.py $V/{granitemoe,granitemoeshared,aria_text,\
        ernie4_5_moe,flex_olmo,minimax_m2,mellum}-tiny.json $V/minimax_m2-rotary-dim.json
    python tools/measure_activations_hf.py --lora 8 $V/{granitemoe,granitemoeshared,\
        aria_text,ernie4_5_moe,flex_olmo,minimax_m2,mellum}-tiny.json
    python tools/measure_activations_hf.py --autocast $V/{granitemoe,granitemoeshared,\
        aria_text,ernie4_5_moe,flex_olmo,minimax_m2,mellum}-tiny.json
    for a in "" "--lora 8" --autocast; do python tools/measure_activations_hf.py $a \
        $V/ernie4_5-tiny.json; done

tests/data/activations_llama_kin_cpu.jsonl (dense decoders near Llama,
EuroBERT and BLOOM; OMP_NUM_THREADS=1; BLOOM's skipped SDPA rows left out) was written by

    V=tests/data/hf/variants
    for c in starcoder2-tiny starcoder2-sliding-dropout seed_oss-tiny arcee-tiny jais2-tiny \
            glm4-tiny hyperclovax-tiny youtu-tiny eurobert-tiny bloom-tiny; do
        case $c in youtu*) QV=q_b_proj,kv_b_proj;; bloom*) QV=query_key_value;;
                   *) QV=q_proj,v_proj;; esac
        python tools/measure_activations_hf.py $V/$c.json
        python tools/measure_activations_hf.py -B 1 -T 37 $V/$c.json
        python tools/measure_activations_hf.py --lora 8 $V/$c.json
        python tools/measure_activations_hf.py --lora 8 --lora-targets $QV $V/$c.json
        python tools/measure_activations_hf.py --autocast $V/$c.json
    done
    python tools/measure_activations_hf.py $V/glm-quarter-rotary.json
    python tools/measure_activations_hf.py --lora 8 $V/glm-quarter-rotary.json

--mixers: only the bytes saved inside the recurrent mixer modules (Mamba, Mamba-2,
Gated DeltaNet, LFM2's short convolution: forward hooks mark when one runs), beside tcalc's
mixer rows; B ∈ {1, 2} and three lengths, fp32 and bf16, on transformers' torch path (the
one the CPU runs). tests/data/activations_mixers_cpu.jsonl was written by

    python tools/measure_activations_hf.py --mixers tests/data/hf/variants/{mamba,mamba2,\
        qwen3_5_text,lfm2,minimax}-mixer.json \
        tests/data/hf/variants/{nemotron_h,jamba,bamba,falcon_h1,kimi_linear}-tiny.json \
        > tests/data/activations_mixers_cpu.jsonl

tests/data/activations_encoders_kin_cpu.jsonl (BERT's kin: DistilBERT, RoBERTa-PreLayerNorm,
XLM-RoBERTa-XL, Megatron-BERT, Flaubert, RoFormer, BigBird; its skipped rows left out) was
written by

    V=tests/data/hf/variants
    C="$V/distilbert-tiny.json $V/roberta-prelayernorm-tiny.json \
        $V/xlm-roberta-xl-tiny.json $V/megatron-bert-tiny.json $V/flaubert-tiny.json \
        $V/roformer-tiny.json $V/big_bird-tiny.json"
    for a in "" "--lora 8" --autocast; do
        OMP_NUM_THREADS=1 python tools/measure_activations_hf.py $a $C; done
    for a in "" "--lora 8" --autocast; do
        OMP_NUM_THREADS=1 python tools/measure_activations_hf.py $a \
            $V/roformer-rotary-value.json; done
    OMP_NUM_THREADS=1 python tools/measure_activations_hf.py --lora 8 \
        --lora-targets q_lin,v_lin --tcalc-targets q,v $V/distilbert-tiny.json \
        $V/flaubert-tiny.json
    OMP_NUM_THREADS=1 python tools/measure_activations_hf.py --lora 8 \
        --lora-targets out_lin,lin2 --tcalc-targets o,down $V/distilbert-tiny.json
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_activations import saved_bytes  # noqa: E402

from transformer_calc.hf import counted_class, spec_from_hf  # noqa: E402
from transformer_calc.memory import Settings, activation_breakdown, memory_report  # noqa: E402

DTYPES = {"fp32": (torch.float32, 4), "bf16": (torch.bfloat16, 2)}
# --fp16: a float16 model (the CPU runs it too), its rows apart from the default two dtypes
FP16 = {"fp16": (torch.float16, 2)}


def measure(config: dict, attention: str, dtype: str, B: int, T: int,
            lora: tuple[int, str, float] | None = None, experts: str = "eager",
            autocast: bool = False, freeze: tuple[str, ...] = (),
            use_cache: bool = False, sdpa_kernel: str = "auto", quant: str = ""
            ) -> tuple[int, int]:
    """Saved bytes, and the parameters that train (all of them; under LoRA, peft's; with
    freeze, those outside the parts named, `part`); autocast: the forward (and its loss)
    inside torch.autocast("cpu", torch.bfloat16); sdpa_kernel: the forward inside
    torch.nn.attention.sdpa_kernel (math: SDPBackend.MATH, cpu_flash: FLASH_ATTENTION, the
    CPU's flash kernel)."""
    import contextlib

    import transformers

    # a seq2seq model shifts the labels right by its decoder start token: give it one
    seq2seq = transformers.AutoConfig.for_model(config["model_type"]).is_encoder_decoder
    extra = {k: 0 for k in ("decoder_start_token_id", "pad_token_id")
             if seq2seq and k not in config}
    cfg = transformers.AutoConfig.for_model(**config, **extra, attn_implementation=attention,
                                            experts_implementation=experts)
    torch.manual_seed(0)
    model = getattr(transformers, counted_class(config))(cfg)
    model = model.to((DTYPES | FP16)[dtype][0]).train()
    if quant:
        model = _quantised(model, cfg, DTYPES[dtype][0], quant).train()
    if lora:  # peft's defaults but rank, targets and dropout (adapters stay fp32)
        import peft

        rank, targets, dropout = lora
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=rank, lora_dropout=dropout,
            target_modules=targets if targets == "all-linear" else targets.split(",")))
    for name, p in model.named_parameters():
        if part(name) in freeze:
            p.requires_grad_(False)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    labels = _labels(counted_class(config), cfg)
    from torch.nn.attention import SDPBackend
    from torch.nn.attention import sdpa_kernel as forced

    backends = {"math": SDPBackend.MATH, "cpu_flash": SDPBackend.FLASH_ATTENTION}
    with (torch.autocast("cpu", dtype=torch.bfloat16) if autocast
          else contextlib.nullcontext()), \
            (forced(backends[sdpa_kernel]) if sdpa_kernel != "auto"
             else contextlib.nullcontext()):
        if quant:
            return _saved_with_ctx(model, B, T, labels, use_cache), trainable
        return saved_bytes(model, B, T, labels=labels, use_cache=use_cache)["saved_bytes"], \
            trainable


def _quantised(model, cfg, dtype, quant: str):  # type: ignore[no-untyped-def]
    """The model as from_pretrained loads it with a BitsAndBytesConfig (its defaults but the
    quant type and the compute dtype): its weights saved, then loaded quantised on the CPU."""
    import tempfile

    import transformers

    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        q = (transformers.BitsAndBytesConfig(load_in_8bit=True) if quant == "bnb-int8" else
             transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=dtype,
                                             bnb_4bit_quant_type=quant.removeprefix("bnb-")))
        return type(model).from_pretrained(d, config=cfg, dtype=dtype, device_map="cpu",
                                           quantization_config=q)


def _saved_with_ctx(model, B: int, T: int, labels, use_cache: bool) -> int:  # type: ignore[no-untyped-def]
    """saved_bytes, and the storages bitsandbytes' autograd functions hold on ctx (ctx.A,
    ctx.tensors: attributes of the backward node, out of the saved-tensor hooks' sight),
    each storage once, parameters out."""
    from measure_activations import input_vocab, recorded

    params = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    torch.manual_seed(0)
    ids = torch.randint(0, input_vocab(model.config), (B, T))
    with recorded(model) as storages:
        loss = model(input_ids=ids, labels=ids if labels is None else labels(ids),
                     use_cache=use_cache).loss
    held: dict[int, int] = {}
    stack, seen = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__.startswith(("MatMul8bit", "MatMul4Bit")):
            kept = [getattr(node, "A", None), *(getattr(node, "tensors", None) or ())]
            for t in kept:
                if isinstance(t, torch.Tensor):
                    s = t.untyped_storage()
                    if s.data_ptr() not in params:
                        held[s.data_ptr()] = s.nbytes()
        stack += [n for n, _ in node.next_functions]
    del loss
    return sum({**storages, **held}.values())


def part(name: str) -> str:
    """The part of the model a parameter belongs to, by the module names transformers gives
    (embeddings, attention, mixers, ffn, norms, heads): what --freeze names, classified here from
    the real module tree; each row records the frozen count beside tcalc's."""
    modules = [m.lower() for m in name.split(".")[:-1]]
    if modules and ("norm" in modules[-1] or modules[-1].startswith("ln_")):
        return "norms"
    # (BERT's pooler and prediction head sit under the model: bert.pooler, cls.predictions)
    if any(m in ("lm_head", "score", "classifier", "pooler", "cls") for m in modules[:2]):
        return "heads"
    if any("embed" in m or m in ("wte", "wpe", "shared") for m in modules):
        return "embeddings"
    # (the recurrent mixers' modules, as MIXER_CLASSES' instances are named: Qwen3-Next's
    # linear_attn is a mixer, not attention)
    if any(m in ("mixer", "mamba", "linear_attn") for m in modules):
        return "mixers"
    if any("attn" in m or "attention" in m for m in modules):
        return "attention"
    return "ffn"


def _bnb_version() -> str:
    import bitsandbytes

    return str(bitsandbytes.__version__)


def _labels(cls: str, cfg: object) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """A classifier's labels (random classes: one per sequence for ForSequenceClassification,
    one per token for ForTokenClassification), or None (the token ids: a language model's)."""
    n = getattr(cfg, "num_labels", 2)
    if cls.endswith("ForSequenceClassification"):
        return lambda ids: torch.randint(0, n, (ids.shape[0],))
    if cls.endswith("ForTokenClassification"):
        return lambda ids: torch.randint(0, n, ids.shape)
    return None


# class-name endings of the recurrent mixer modules (transformers 5.23)
MIXER_CLASSES = ("MambaMixer", "Mamba2Mixer", "BambaMixer", "H1Mixer", "MambaLayer",
                 "GatedDeltaNet", "ShortConv", "LightningAttention", "DeltaAttention")


def measure_mixers(config: dict, dtype: str, B: int, T: int) -> int:
    """Bytes of the storages first saved while a mixer module runs (parameters excluded)."""
    import transformers

    cfg = transformers.AutoConfig.for_model(**config, attn_implementation="eager",
                                            experts_implementation="eager")
    torch.manual_seed(0)
    model = getattr(transformers, counted_class(config))(cfg)
    model = model.to(DTYPES[dtype][0]).train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    depth = [0]
    for m in model.modules():
        if type(m).__name__.endswith(MIXER_CLASSES):
            m.register_forward_pre_hook(lambda *_: depth.__setitem__(0, depth[0] + 1))
            m.register_forward_hook(lambda *_: depth.__setitem__(0, depth[0] - 1))
    # as measure_activations.recorded: detached aliases, counted if still saved at the end
    packed: list[tuple[weakref.ref[torch.Tensor], int, int, bool]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        alias = t.detach()
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            packed.append((weakref.ref(alias), s.data_ptr(), s.nbytes(), depth[0] > 0))
        return alias

    ids = torch.randint(0, cfg.vocab_size, (B, T))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    gc.collect()
    first: dict[int, tuple[int, bool]] = {}  # storage -> (bytes, first saved inside a mixer)
    for ref, ptr, nbytes, inside in packed:
        if ref() is not None:
            first.setdefault(ptr, (nbytes, inside))
    del loss
    return sum(n for n, inside in first.values() if inside)


def mixer_rows(spec, B: int, T: int, dtype: str) -> int:  # type: ignore[no-untyped-def]
    """tcalc's saved bytes of the mixers: their rows, the in_proj input (the norm's output,
    first saved inside the mixer) included, the layer's own pre-norm not."""
    b = activation_breakdown(spec, B, T, act_bytes=DTYPES[dtype][1], device="cpu",
                             attention="eager", dropout=False)
    return sum(i.total for i in b.items
               if ".mixer." in i.name and ".mixer.norm." not in i.name)


def main() -> None:
    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="+", type=Path)
    ap.add_argument("-B", type=int, default=2)
    ap.add_argument("-T", type=int, default=64)
    ap.add_argument("--mixers", action="store_true", help="the recurrent mixers' bytes only")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank (peft): a frozen base")
    ap.add_argument("--lora-targets", default="all-linear")
    ap.add_argument("--lora-dropout", type=float, default=0.0)
    ap.add_argument("--tcalc-targets", default="",
                    help="tcalc's names for the same layers, where --lora-targets are module "
                         "names tcalc does not alias (BERT's intermediate.dense: up)")
    ap.add_argument("--experts", default="eager", choices=("eager", "grouped_mm"),
                    help="transformers' experts_implementation (rows without an experts key "
                         "were measured with eager)")
    ap.add_argument("--autocast", action="store_true",
                    help="an fp32 model under CPU autocast to bf16 (rows: dtype fp32, "
                         "autocast bf16)")
    ap.add_argument("--fp16", action="store_true",
                    help="a float16 model instead of fp32 and bf16 (rows: dtype fp16)")
    ap.add_argument("--use-cache", action="store_true",
                    help="the forward with use_cache=True (the rows say so)")
    ap.add_argument("--freeze", default="",
                    help="parts that do not train (comma-separated: embeddings, attention, "
                         "ffn, norms, heads), as tcalc's --freeze")
    ap.add_argument("--quant", default="", choices=("", "bnb-nf4", "bnb-fp4", "bnb-int8"),
                    help="the base in bitsandbytes' format (with --lora), computed in the "
                         "row's dtype")
    ap.add_argument("--sdpa-kernel", default="auto", choices=("auto", "math", "cpu_flash"),
                    help="the SDPA kernel torch.nn.attention.sdpa_kernel forces (SDPA rows "
                         "only), as tcalc's --sdpa-kernel")
    args = ap.parse_args()
    freeze = tuple(x for x in args.freeze.split(",") if x)
    if args.mixers:
        for path in args.configs:
            config = json.loads(path.read_text())
            spec = spec_from_hf(config, str(path))
            for dtype in DTYPES:
                for B, T in ((1, 64), (2, 128), (1, 200)):
                    got = measure_mixers(config, dtype, B, T)
                    est = mixer_rows(spec, B, T, dtype)
                    print(json.dumps({"config": path.name, "dtype": dtype, "B": B, "T": T,
                                      "measured_bytes": got, "tcalc_bytes": est,
                                      "error_pct": round(100 * (est - got) / got, 1)}))
        return
    print(f"# torch {torch.__version__}, transformers {transformers.__version__}, CPU",
          file=sys.stderr)
    for path in args.configs:
        config = json.loads(path.read_text())
        spec = spec_from_hf(config, str(path))
        for attention in ("eager", "sdpa") if args.sdpa_kernel == "auto" else ("sdpa",):
            for dtype in ("fp32",) if args.autocast else FP16 if args.fp16 else DTYPES:
                lora = (args.lora, args.lora_targets, args.lora_dropout) if args.lora else None
                try:
                    got, trainable = measure(config, attention, dtype, args.B, args.T, lora,
                                             args.experts, args.autocast, freeze,
                                             args.use_cache, args.sdpa_kernel, args.quant)
                except ValueError as e:  # e.g. a class without an SDPA path
                    print(json.dumps({"config": path.name, "attention": attention,
                                      "dtype": dtype, "skipped": str(e)[:100]}))
                    continue
                report = memory_report(spec, Settings(
                    precision="fp32" if dtype == "fp32" and not args.autocast else
                    "fp16" if dtype == "fp16" else "bf16",
                    mixed=args.autocast, batch_size=args.B,
                    seq_len=args.T, attention=attention, device="cpu",
                    lora_rank=args.lora, lora_targets=tuple(
                        (args.tcalc_targets or args.lora_targets).split(",")),
                    lora_dropout=args.lora_dropout, experts=args.experts, freeze=freeze,
                    sdpa_kernel=args.sdpa_kernel, use_cache=args.use_cache, quant=args.quant,
                    double_quant=not args.quant.startswith("bnb-") or args.quant == "bnb-int8"))
                est = report.activations.total
                print(json.dumps({"config": path.name, "attention": attention, "dtype": dtype,
                                  **({"autocast": "bf16"} if args.autocast else {}),
                                  **({"use_cache": True} if args.use_cache else {}),
                                  **({"sdpa_kernel": args.sdpa_kernel}
                                     if args.sdpa_kernel != "auto" else {}),
                                  **({"quant": args.quant, "bitsandbytes": _bnb_version()}
                                     if args.quant else {}),
                                  "B": args.B, "T": args.T, "lora": list(lora or ()),
                                  **({"tcalc_targets": args.tcalc_targets}
                                     if args.tcalc_targets else {}),
                                  **({"experts": args.experts} if spec.n_experts else {}),
                                  # the adapters' parameters, peft's and tcalc's: the same
                                  # layers adapted on both sides
                                  **({"trainable": [trainable, report.trainable_params]}
                                     if lora or freeze else {}),
                                  **({"freeze": list(freeze)} if freeze else {}),
                                  "measured_bytes": got,
                                  "tcalc_bytes": est,
                                  "error_pct": round(100 * (est - got) / got, 1)}))


if __name__ == "__main__":
    main()
