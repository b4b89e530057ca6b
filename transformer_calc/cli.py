"""The typer layer: parse -> core -> render. One error boundary (``_command``).

Start-up is a feature: this module imports typer and the small spec module only; presets
(yaml), the core and render (rich) are imported inside the commands that need them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer
import typer.core

from transformer_calc.choices import (
    ADAPTER_DTYPES,
    ATTENTIONS,
    DEVICES,
    EXPERTS_IMPLS,
    LOGITS_FP32,
    METRICS,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PATTERNS,
    PRECISIONS,
    RECIPES,
    RECOMPUTE,
    SDPA_KERNELS,
    TOPICS,
)
from transformer_calc.errors import TcalcError
from transformer_calc.spec import ARCH_FIELDS, field_type

APP_OPTIONS: dict[str, Any] = dict(
    name="tcalc",
    help="Exact parameter counts, memory and compute for transformer models, offline.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
# name -> a function that builds the command (its typer signature, ~130 options for some;
# given a set of field names, only those architecture overrides): built only for the command
# being run, or for all when the full app is asked for.
COMMANDS: dict[str, Callable[..., Callable[..., Any]]] = {}

EXIT_USAGE = 2


class Format(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


FormatOpt = typer.Option(Format.table, "--format", "-f", help="table, json or markdown.")
ModelArg = typer.Argument(..., metavar="MODEL",
                          help="A preset name (see `tcalc presets`) or a path to a YAML preset "
                               "or a Hugging Face config.json.")


# Every numeric option's range: an int outside it, or a float that is not finite or
# is outside it, is one error line naming the option. Integers stop at 2^40 (spec.MAX_SIZE),
# where every result stays exact and printable; GPU counts at 2^30.
_BIG = 2**40
NUMERIC_LIMITS: dict[str, tuple[float, float, bool]] = {  # name: (low, high, low exclusive)
    "batch_size": (1, _BIG, False), "seq_len": (1, _BIG, False), "gpus": (1, 2**30, False),
    "tp": (1, 2**30, False), "pp": (1, 2**30, False), "zero": (0, 3, False),
    "ep": (1, 2**30, False), "cp": (1, 2**30, False),
    "group_size": (1, _BIG, False), "window": (0, _BIG, False), "block": (0, _BIG, False),
    "summary": (1, _BIG, False), "global_tokens": (0, _BIG, False), "random": (0, _BIG, False),
    # a subnormal MFU or throughput divides into an infinite time: the floor is one in 1e9
    "mfu": (1e-9, 1, False), "tokens_per_second": (1e-9, 1e18, False),
    "grad_accum": (1, _BIG, False), "lora": (0, 2**20, False), "lora_dropout": (0, 0.99, False),
    "kv_block": (0, 2**20, False), "micro_batches": (0, _BIG, False),
    "gpu_util": (0, 1, True), "prefill_chunk": (1, _BIG, False),
    "loss_chunks": (1, 2**20, False),
}


def check_numbers(values: dict[str, Any]) -> None:
    """Reject 0, negatives, NaN, inf and values past what a result can represent, per option."""
    import math

    for name, value in values.items():
        if name not in NUMERIC_LIMITS or isinstance(value, bool) \
                or not isinstance(value, (int, float)):
            continue  # (sweep's lists are strings: parse_ints checks them)
        low, high, exclusive = NUMERIC_LIMITS[name]
        flag = "--" + name.replace("_", "-")
        if isinstance(value, float) and not math.isfinite(value):
            raise TcalcError(f"{flag}: expected a finite number, got {value}")
        if (value <= low if exclusive else value < low) or value > high:
            kind = "an integer" if isinstance(value, int) else "a number"
            bound = f"> {low:g}" if exclusive else f">= {low:g}"
            top = f"{high:,}" if isinstance(high, int) else f"{high:g}"
            raise TcalcError(f"{flag}: expected {kind} {bound} and <= {top}, got {value}")


def _command(*, overrides: bool = False, training: bool = False
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a command. ``overrides`` adds one --field option per architecture field
    (passed as ``overrides``); ``training`` adds the shared memory options (passed as
    ``train``, a dict for _settings).

    The wrapper is the CLI's single error boundary: a TcalcError becomes one line on stderr
    and exit code 2. Anything else is a bug and keeps its traceback.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.cache
        def build(named: frozenset[str] | None = None) -> Callable[..., Any]:
            """The command; with ``named``, only those architecture overrides (the ones a
            command line names: _app_for), else all of them."""
            sig = inspect.signature(fn)
            params = [p for p in sig.parameters.values() if p.name not in ("overrides", "train")]
            fields = [f for f in ARCH_FIELDS if named is None or f.name in named] \
                if overrides else []
            extra = [_override_param(f) for f in fields]
            if overrides:
                extra.insert(0, _TEXT_ONLY)
            group = _training_params() if training else []

            @functools.wraps(fn)
            def wrapper(**kwargs: Any) -> Any:
                if overrides:
                    text_only = kwargs.pop("text_only")
                    kwargs["overrides"] = {
                        f.name: getattr(v, "value", v)  # Enum choice -> its string
                        for f in fields for v in [kwargs.pop(f.name)]}
                    kwargs["overrides"]["text_only"] = text_only
                if training:
                    kwargs["train"] = {p.name: getattr(v, "value", v)
                                       for p in group for v in [kwargs.pop(p.name)]}
                try:
                    check_numbers(kwargs)
                    check_numbers(kwargs.get("train") or {})
                    return fn(**kwargs)
                except TcalcError as e:
                    typer.echo(error_line(str(e)), err=True)
                    raise typer.Exit(EXIT_USAGE) from None

            everything = params + group + extra
            wrapper.__signature__ = sig.replace(parameters=everything)  # type: ignore[attr-defined]
            wrapper.__annotations__ = {p.name: p.annotation for p in everything}
            return wrapper

        COMMANDS[fn.__name__.rstrip("_").replace("_", "-")] = build
        return fn

    return decorate


def error_line(message: str) -> str:
    """One line, printable, of bounded length: what every error prints."""
    from transformer_calc.errors import MAX_ERROR_LINE, printable

    text = "Error: " + printable(" ".join(message.splitlines()), one_line=True)
    if len(text) > MAX_ERROR_LINE:
        text = text[:MAX_ERROR_LINE - 30] + f" ... ({len(text):,} characters, cut)"
    return text


def _override_param(f: Any) -> inspect.Parameter:
    typ = field_type(f)
    flag = "--" + f.name.replace("_", "-")
    help_text = f.metadata["help"]
    panel = "Architecture overrides (what if?)"
    if typ is bool:
        opt = typer.Option(None, f"{flag}/--no-{flag[2:]}", help=help_text, rich_help_panel=panel,
                           show_default=False)
    elif f.metadata["choices"]:
        typ = _choice_enum(f.name, f.metadata["choices"])  # type: ignore[assignment]
        opt = typer.Option(None, flag, help=help_text, rich_help_panel=panel, show_default=False)
    else:
        opt = typer.Option(None, flag, help=help_text, rich_help_panel=panel, show_default=False)
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=opt,
                             annotation=Optional[typ])


@functools.cache
def _choice_enum(name: str, choices: tuple[str, ...]) -> type[Enum]:
    """typer offers choices through Enum types: one per choice field, shared by commands."""
    return Enum(name, {c: c for c in choices}, type=str)  # type: ignore[return-value]


# a vision-language or speech model's language model alone (ModelSpec.text_only)
_TEXT_ONLY = inspect.Parameter(
    "text_only", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
    default=typer.Option(False, "--text-only", help="The language model alone: a "
                         "vision-language or speech model's tower and projector left out.",
                         rich_help_panel="Architecture overrides (what if?)"))


def _load(model: str, overrides: dict[str, Any]) -> Any:
    from transformer_calc.presets import apply_overrides, load_model

    overrides = dict(overrides)
    text_only = overrides.pop("text_only", False)
    spec = apply_overrides(load_model(model), overrides)
    return spec.text_only() if text_only else spec


def _emit(text: str | None) -> None:
    if text is not None:  # (JSON carries control characters escaped already)
        from transformer_calc.errors import printable

        typer.echo(printable(text.rstrip("\n")))


@_command(overrides=True)
def params(model: str = ModelArg, format: Format = FormatOpt,
           overrides: dict[str, Any] | None = None) -> None:
    """Trainable parameters, exactly, component by component.

    Every row carries its formula; the total equals what transformers (or torch.nn)
    instantiates for the same config. Override any field to ask "what if", e.g.
    `tcalc params gpt2 --n-heads 4` (same total) or `--no-tie-embeddings` (+ V·d_model).
    """
    from transformer_calc.params import count_params
    from transformer_calc.render import params_doc, show

    spec = _load(model, overrides or {})
    ckpt = None
    folder = Path(model).expanduser()
    if folder.is_dir():  # a model folder: what its safetensors headers hold
        from transformer_calc.checkpoint import read_checkpoint

        ckpt = read_checkpoint(folder)
    elif not folder.exists() and _is_hub_id(model):  # a Hub id: its remote headers
        from transformer_calc.hub import checkpoint

        ckpt, why = checkpoint(model)
        if ckpt is None:
            spec = dataclasses_replace_note(spec, f"checkpoint: {why}")
    elif model.lower().endswith(".gguf"):  # what the GGUF's tensors hold
        from transformer_calc.checkpoint import Checkpoint
        from transformer_calc.gguf_file import read_gguf

        g = read_gguf(folder)
        ckpt = Checkpoint((folder.name,), g.params, g.bytes, g.types,
                          {name: _numel(shape) for name, (shape, _) in g.tensors.items()})
    show(params_doc(count_params(spec), spec, ckpt), format.value)


def _is_hub_id(model: str) -> bool:
    if "/" not in model:  # every Hub id and URL has one (and the hub module costs start-up)
        return False
    from transformer_calc.hub import parse
    from transformer_calc.presets import preset_dir

    return parse(model) is not None and not (preset_dir() / f"{model}.yaml").is_file()


def dataclasses_replace_note(spec: Any, note: str) -> Any:
    import dataclasses

    return dataclasses.replace(spec, note="; ".join(n for n in (spec.note, note) if n))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def parse_count(text: str, option: str) -> int:
    """'300e9', '1.4T', '20B', '1_000' -> an integer count."""
    suffixes = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
    raw = text.strip().replace("_", "").replace(",", "")
    scale = suffixes.get(raw[-1:].upper(), 1.0) if raw else 1.0
    number = raw[:-1] if scale != 1.0 else raw
    try:
        value = float(number) * scale
    except ValueError:
        raise TcalcError(f"{option}: expected a number such as 300e9 or 1.4T, got {text!r}") \
            from None
    if not 1 <= value <= 1e30:  # NaN fails too; 1e30 keeps every product finite
        raise TcalcError(f"{option}: expected a number from 1 to 1e30, got {text!r}")
    return round(value)


# Enums for typer, from the core's one declaration of each choice (transformer_calc.choices).
Pattern = Enum("Pattern", {c: c for c in PATTERNS}, type=str)  # type: ignore[misc]
Recompute = Enum("Recompute", {c: c for c in RECOMPUTE}, type=str)  # type: ignore[misc]


SeqLenOpt = typer.Option(None, "--seq-len", "-T",
                         help="Context length T. Default: the model's max_positions, else 2048; "
                              "memory: at most 4096.")
DEFAULT_SEQ_LEN = 4096  # tcalc memory's length unless --seq-len says another


def _seq_len(spec: Any, seq_len: int | None) -> int:
    if seq_len is not None:
        return seq_len  # validated by the core (>= 1)
    return spec.default_seq_len


_PATTERN_PANEL = "Efficient attention pattern"
PatternOpt = typer.Option(Pattern["dense"], "--attention-pattern", rich_help_panel=_PATTERN_PANEL,
                          help="Efficient attention pattern (the keys each query meets).")
WindowOpt = typer.Option(0, help="Sliding-window keys per query (local, longformer, bigbird).",
                         rich_help_panel=_PATTERN_PANEL)
BlockOpt = typer.Option(0, help="Block / stride l (Sparse Transformer strided, fixed).",
                        rich_help_panel=_PATTERN_PANEL)
SummaryOpt = typer.Option(1, help="Summary positions c per block (fixed).",
                          rich_help_panel=_PATTERN_PANEL)
GlobalOpt = typer.Option(0, help="Global tokens (longformer, bigbird).",
                         rich_help_panel=_PATTERN_PANEL)
RandomOpt = typer.Option(0, help="Random keys per query (bigbird).",
                         rich_help_panel=_PATTERN_PANEL)


def _pattern(kind: str, window: int, block: int, summary: int, global_tokens: int,
             random: int) -> Any:
    """The pattern flops and memory share; its options without one: an error."""
    from transformer_calc.flops import AttentionPattern

    if kind == "dense":
        for flag, value, default in (("--window", window, 0), ("--block", block, 0),
                                     ("--summary", summary, 1),
                                     ("--global-tokens", global_tokens, 0),
                                     ("--random", random, 0)):
            if value != default:
                raise TcalcError(f"{flag}: applies with --attention-pattern (local, strided, "
                                 "fixed, longformer, bigbird)")
    return AttentionPattern(kind, window, block, summary, global_tokens, random)


@_command(overrides=True)
def flops(
    model: str = ModelArg,
    seq_len: Optional[int] = SeqLenOpt,
    recompute: Recompute = typer.Option(Recompute["none"], help="Activation recomputation."),
    attention_pattern: Pattern = PatternOpt,
    window: int = WindowOpt,
    block: int = BlockOpt,
    summary: int = SummaryOpt,
    global_tokens: int = GlobalOpt,
    random: int = RandomOpt,
    tokens: Optional[str] = typer.Option(
        None, help="Training tokens, e.g. 300e9 or 1.4T (default with --gpu: 20 per "
                   "parameter, Chinchilla)."),
    gpu: Optional[str] = typer.Option(None, help="GPU preset for the run and the roofline "
                                                 "(see `tcalc gpus`)."),
    gpus: int = typer.Option(1, help="Number of GPUs for the run."),
    mfu: Optional[float] = typer.Option(None, help="Model FLOPs utilisation, 0-1 (default "
                                                   "0.40, an assumption)."),
    tokens_per_second: Optional[float] = typer.Option(
        None, help="Measured training throughput: derive the MFU from it."),
    dtype: str = typer.Option("bf16", help="Compute / weight dtype: fp32, tf32, bf16, fp16, "
                                           "fp8, int8, int4."),
    batch_size: int = typer.Option(1, help="Batch for the inference roofline."),
    format: Format = FormatOpt,
    overrides: dict[str, Any] | None = None,
) -> None:
    """FLOPs per token by matmul, training cost, and the inference roofline.

    Forward FLOPs per token at context T, split by matmul (QKV, scores, attention × V,
    output projection, FFN, LM head); backward = 2 × forward; the 6N and Kaplan rules of
    thumb with their error. With --gpu: GPU-hours and days for a run, and prefill/decode
    bounds from the roofline model.
    """
    from transformer_calc.flops import flops_report
    from transformer_calc.render import flops_doc, show

    pattern = _pattern(attention_pattern.value, window, block, summary, global_tokens, random)
    spec = _load(model, overrides or {})
    report = flops_report(
        spec, _seq_len(spec, seq_len), recompute=recompute.value, pattern=pattern, gpu=gpu,
        n_gpus=gpus, tokens=None if tokens is None else parse_count(tokens, "--tokens"), mfu=mfu,
        dtype=dtype, tokens_per_second=tokens_per_second, batch=batch_size)
    show(flops_doc(report), format.value)


# --help's panels for the run's options: what most runs set first, the rest by topic
_PANELS = {"Training / serving": "precision mixed recipe optimizer lora qlora recompute "
                                 "attention gpu gpus zero tp",
           "Recipes' settings": "adapter_dtype loss_chunks logits_fp32 compile_loss "
                                "optimizer_in_backward paged_optimizer metric",
           "Fine-tuning and quantisation": "lora_targets lora_dropout quant double_quant "
                                           "bnb_legacy freeze adamw8bit",
           "Parallelism": "tp_plan pp ep cp sequence_parallel offload micro_batches "
                          "activations",
           "Serving": "kv_dtype group_size kv_block gpu_util prefill_chunk inference dtype",
           "Implementation details": "optimizer_impl grad_accum use_cache sdpa_kernel experts "
                                     "device dropout"}
_PANEL_OF = {name: panel for panel, names in _PANELS.items() for name in names.split()}


def _training_params() -> list[inspect.Parameter]:
    """The options memory, sweep and compare share: how the model is trained or served."""

    def opt(name: str, annotation: Any, default: Any, *decls: str, help: str) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                 default=typer.Option(default, *decls, help=help,
                                                      rich_help_panel=_PANEL_OF[name]))

    Precision = _choice_enum("precision", PRECISIONS)
    Optimizer = _choice_enum("optimizer", OPTIMIZERS)
    OptimizerImpl = _choice_enum("optimizer_impl", OPTIMIZER_IMPLS)
    Attention = _choice_enum("attention", ("auto", *ATTENTIONS))
    TpPlan = _choice_enum("tp_plan", ("auto", "layers", "vocab"))
    Device = _choice_enum("device", DEVICES)
    Activations = _choice_enum("activations", ("hf", "megatron"))
    Recipe = _choice_enum("recipe", RECIPES)
    Offload = _choice_enum("offload", ("none", "optimizer", "all", "activations"))
    AdapterDtype = _choice_enum("adapter_dtype", ADAPTER_DTYPES)
    LogitsFp32 = _choice_enum("logits_fp32", LOGITS_FP32)
    Metric = _choice_enum("metric", METRICS)
    SdpaKernel = _choice_enum("sdpa_kernel", SDPA_KERNELS)
    Experts = _choice_enum("experts", EXPERTS_IMPLS)
    return [
        opt("precision", Optional[Precision], None, "--precision",
            help="Weights dtype (default: --mixed bf16). fp32, bf16 or fp16, pure (or the "
                 "16-bit dtype with --mixed); the default is torch AMP as the Trainer runs "
                 "bf16=True."),
        opt("mixed", bool, False, "--mixed", help="Mixed precision (AMP). fp32 master weights "
                                                 "+ 16-bit copies (bf16 unless --precision "
                                                 "fp16)."),
        opt("recipe", Recipe, Recipe["hf"], "--recipe",
            help="The framework. Its settings as data, each a flag too (a flag given wins): "
                 "hf (amp): the Trainer, torch AMP over fp32 weights, PEFT's "
                 "fp32 adapters; torchtune and litgpt: a bf16 model, bf16 adapters, their "
                 "own loss; megatron, deepspeed: a 16-bit model, fp32 master weights and "
                 "gradients (18 bytes per parameter held throughout). docs/memory.md cites "
                 "each."),
        opt("adapter_dtype", Optional[AdapterDtype], None, "--adapter-dtype",
            help="LoRA adapters' dtype, their gradients' and moments' too (default: the "
                 "recipe's; fp32 as PEFT upcasts them)."),
        opt("loss_chunks", Optional[int], None, "--loss-chunks",
            help="The head and loss in N chunks, each upcast to fp32 in turn (torchtune's "
                 "CEWithChunkedOutputLoss: 8). Default: the recipe's."),
        opt("logits_fp32", Optional[LogitsFp32], None, "--logits-fp32",
            help="Where the logits become fp32: loss (transformers' loss function), model "
                 "(torchtune's output(h).float()), never (LitGPT's 16-bit cross-entropy)."),
        opt("compile_loss", bool, False, "--compile-loss",
            help="torch.compile of the cross-entropy with its upcast: keeps the 16-bit logits, "
                 "not the fp32 log-softmax (torchtune's compile=True). The layers are counted "
                 "uncompiled."),
        opt("optimizer_in_backward", bool, False, "--optim-in-bwd",
            help="Each parameter's optimizer step runs in backward and frees its gradient at "
                 "once (torchtune's optimizer_in_bwd)."),
        opt("paged_optimizer", bool, False, "--paged",
            help="bitsandbytes' paged AdamW (32- or 8-bit): the states in CUDA unified "
                 "memory, outside max_memory_allocated."),
        opt("metric", Metric, Metric["allocated"], "--metric",
            help="The peak reported. allocated (torch.cuda.max_memory_allocated), reserved "
                 "(the caching allocator's, a measured reserve model) or nvidia-smi (reserved "
                 "+ the CUDA context)."),
        opt("optimizer", Optimizer, Optimizer["adamw"], "--optimizer", help="Optimizer."),
        opt("adamw8bit", bool, False, "--adamw8bit", help="Shorthand for --optimizer adamw8bit."),
        opt("optimizer_impl", OptimizerImpl, OptimizerImpl["foreach"], "--optimizer-impl",
            help="Adam's implementation: foreach (torch's CUDA default: one parameter-sized "
                 "temporary), fused (none), for-loop (two of the largest tensor)."),
        opt("grad_accum", int, 1, "--grad-accum",
            help="Micro-batches per optimizer step: gradients stay live across them."),
        opt("lora", int, 0, "--lora",
            help="LoRA adapters of this rank over a frozen base. PEFT's count and dtypes: fp32 "
                 "adapters, gradients and states only for them."),
        opt("lora_targets", str, "all-linear", "--lora-targets",
            help="Layers LoRA adapts: all-linear (PEFT's: every linear layer but the output "
                 "head) or names, comma-separated: tcalc's (q,k,v,o,gate,up,down,...) or "
                 "the model's transformers names (q_proj,v_proj,...)."),
        opt("lora_dropout", float, 0.0, "--lora-dropout",
            help="Dropout on each adapter's input (PEFT's lora_dropout): keeps a mask and a "
                 "copy per adapted layer."),
        opt("quant", str, "", "--quant",
            help="Weights in a real quantised format, as it stores them: gptq, gptq-int8, "
                 "awq, bnb-nf4, bnb-fp4, bnb-int8, fp8 (128x128 blocks), fp8-channel, "
                 "fp8-tensor, mxfp4, nvfp4, gguf-q4_k_m, gguf-q8_0, ... Serving "
                 "(--inference), or a frozen base under --lora."),
        opt("use_cache", Optional[bool], None, "--use-cache/--no-use-cache",
            help="Training: transformers' generation cache in the forward (default: as "
                 "transformers does, on unless --recompute full), whose concatenation copies "
                 "K and V."),
        opt("double_quant", bool, True, "--double-quant/--no-double-quant",
            help="bitsandbytes 4-bit: double-quantised block scales (QLoRA's recipe; off: "
                 "fp32 scales, BitsAndBytesConfig's default)."),
        opt("bnb_legacy", bool, False, "--bnb-legacy",
            help="bitsandbytes before 0.44, whose 4-bit matmul keeps each layer's input "
                 "for backward (the QLoRA paper's runs)."),
        opt("qlora", bool, False, "--qlora",
            help="QLoRA: --lora over a bnb-nf4 base. Double-quantised, computed in bf16 unless "
                 "--precision says otherwise."),
        opt("freeze", str, "", "--freeze",
            help="Full fine-tuning with parts frozen, comma-separated: embeddings, "
                 "attention, mixers, ffn, norms, heads (no gradients or states for them)."),
        opt("activations", Activations, Activations["hf"], "--activations",
            help="Whose layers: hf (transformers' code, tensor by tensor, measured) or "
                 "megatron (Megatron-LM's theoretical formula for its own layers)."),
        opt("micro_batches", int, 0, "--micro-batches",
            help="--activations megatron with --pp: micro-batches per step (fewer than pp "
                 "discount the in-flight activations; 0: at least pp)."),
        opt("recompute", Recompute, Recompute["none"], "--recompute",
            help="Activation recomputation."),
        opt("attention", Attention, Attention["auto"], "--attention",
            help="Attention implementation. auto: what transformers runs for the class (sdpa "
                 "where it has that path, else eager); eager, sdpa, flash."),
        opt("sdpa_kernel", SdpaKernel, SdpaKernel["auto"], "--sdpa-kernel",
            help="With --attention sdpa: the kernel, as torch.nn.attention.sdpa_kernel would "
                 "force it; auto: as torch 2.13 picks it for the device, dtype, dropout and "
                 "heads (the report says which)."),
        opt("experts", Experts, Experts["auto"], "--experts",
            help="How MoE experts run: grouped_mm (sorted slots, one grouped matmul per "
                 "projection) or eager (a loop over the experts, which keeps more); auto: "
                 "transformers 5.23's default for the model's class."),
        opt("device", Device, Device["cuda"], "--device",
            help="cuda: 1-byte dropout masks, SDPA's kernel as torch picks it on a GPU; cpu: "
                 "masks in the activation dtype, SDPA's math kernel with dropout, its CPU "
                 "flash kernel without."),
        opt("dropout", Optional[bool], None, "--dropout/--no-dropout",
            help="Default: the model's own dropout setting."),
        opt("gpus", int, 1, "--gpus", help="GPUs in all (data × tensor × pipeline)."),
        opt("zero", int, 0, "--zero", help="ZeRO stage 0-3 (3 = FSDP full sharding)."),
        opt("tp", int, 1, "--tp", help="Tensor-parallel degree."),
        opt("pp", int, 1, "--pp", help="Pipeline-parallel degree (the most loaded stage: its "
                                         "layers and the embeddings)."),
        opt("ep", int, 1, "--ep", help="Expert-parallel degree (Megatron-LM: the experts split "
                                       "over ep ranks of data × context parallel)."),
        opt("cp", int, 1, "--cp", help="Context-parallel degree: each GPU holds seq-len / cp "
                                       "of every sequence's activations."),
        opt("offload", Offload, Offload["none"], "--offload",
            help="DeepSpeed: optimizer (ZeRO-Offload: fp32 master weights, gradients and "
                 "states in CPU memory, --zero >= 1) or all (ZeRO-Infinity: parameters too, "
                 "--zero 3); activations (torchtune: the saved tensors, with --recompute "
                 "full); reported as host memory."),
        opt("tp_plan", TpPlan, TpPlan["auto"], "--tp-plan",
            help="Tensor parallelism's plan: layers (attention and MLP split; embeddings, head "
                 "and loss whole: transformers' tp_plan, torchtitan) or vocab (Megatron-LM's "
                 "vocabulary-parallel ones too); auto follows --recipe."),
        opt("sequence_parallel", bool, False, "--sequence-parallel",
            help="Megatron sequence parallelism (needs --tp)."),
        opt("inference", bool, False, "--inference", help="Serving: weights + KV cache."),
        opt("dtype", str, "bf16", "--dtype",
            help="Inference weights dtype. fp32, fp16, bf16, int8, int4."),
        opt("kv_dtype", str, "", "--kv-dtype", help="Inference KV-cache dtype (default bf16)."),
        opt("group_size", int, 128, "--group-size", help="int8/int4: weights per fp16 scale."),
        opt("kv_block", int, 0, "--kv-block",
            help="Serving: a paged KV cache's block of tokens (vLLM's block_size 16): each "
                 "layer's tokens in whole blocks. 0: exact."),
        opt("gpu_util", float, 0.9, "--gpu-util",
            help="Serving with --gpu: the share of the GPU the runtime may take (vLLM's "
                 "gpu_memory_utilization, 0.9)."),
        opt("prefill_chunk", int, 2048, "--prefill-chunk",
            help="Serving with --gpu: tokens per prefill chunk, whose activations are set "
                 "aside from the budget."),
        opt("gpu", Optional[str], None, "--gpu",
            help="A GPU (`tcalc gpus`) or a size (48GB). Fits?, headroom, largest batch."),
    ]


def _settings(train: dict[str, Any], batch_size: int = 1, seq_len: int | None = None) -> Any:
    from transformer_calc.memory import Settings

    if seq_len is not None and seq_len < 1:
        raise TcalcError(f"--seq-len: expected an integer >= 1, got {seq_len}")
    t = dict(train)
    if t.pop("gpu") is not None and not train["gpu"].strip():
        raise TcalcError("--gpu: expected a GPU (tcalc gpus lists them) or a capacity such as "
                         "48GB, got nothing")
    if not t.get("inference", True):  # serving options without --inference: an error, not ignored
        for key, default in (("dtype", "bf16"), ("kv_dtype", ""), ("group_size", 128),
                             ("kv_block", 0), ("gpu_util", 0.9), ("prefill_chunk", 2048)):
            if t.get(key, default) != default:
                raise TcalcError(f"--{key.replace('_', '-')}: applies to --inference (training "
                                 "precision is --precision / --mixed)")
    if t.get("inference") and (t.get("lora") or t.get("freeze")):
        raise TcalcError("--lora and --freeze: apply to training, not --inference")
    if t.pop("qlora", False):
        if not t.get("lora"):
            raise TcalcError("--qlora: give the adapters' rank with --lora RANK")
        if t.get("quant", "") not in ("", "bnb-nf4"):
            raise TcalcError("--qlora: the base is bnb-nf4; drop --quant or --qlora")
        t["quant"] = "bnb-nf4"
        t["precision"] = t.get("precision") or "bf16"
    if t.get("tp_plan") == "auto":
        t["tp_plan"] = ""  # the recipe's
    if t.get("offload") == "activations":
        t["offload"], t["offload_activations"] = "none", True
    _apply_recipe(t)
    lora = t.pop("lora", 0)
    t["lora_rank"] = lora
    targets = t.pop("lora_targets", "all-linear")
    t["lora_targets"] = tuple(x.strip() for x in targets.split(",") if x.strip())
    if not t["lora_targets"]:  # PEFT's LoraConfig takes no empty list either
        raise TcalcError(f"--lora-targets {targets!r}: expected all-linear or module names, "
                         "comma-separated (q_proj,v_proj or tcalc's q,v)")
    if lora == 0 and (t["lora_targets"] != ("all-linear",) or t.get("lora_dropout")):
        raise TcalcError("--lora-targets and --lora-dropout: need --lora RANK")
    t["freeze"] = tuple(x.strip() for x in t.pop("freeze", "").split(",") if x.strip())
    precision = t.pop("precision")
    if precision is None and not t.get("inference"):
        # training as the Hugging Face Trainer runs bf16=True: torch AMP over fp32 weights
        # (--precision fp32 for pure fp32, --precision bf16 for pure bf16)
        precision, t["mixed"] = "bf16", True
    precision = precision or ("bf16" if t["mixed"] else "fp32")
    if t.pop("adamw8bit"):
        t["optimizer"] = "adamw8bit"
    return Settings(precision=precision, batch_size=batch_size, seq_len=seq_len or 0, **t)


def _named_head(settings: Any, overrides: dict[str, Any] | None) -> Any:
    """--tie-embeddings given wins over a recipe that holds the LM head apart (LitGPT's)."""
    if settings.untied_head and (overrides or {}).get("tie_embeddings"):
        import dataclasses

        return dataclasses.replace(settings, untied_head=False)
    return settings


def _apply_recipe(t: dict[str, Any]) -> None:
    """Fill the settings the user left unsaid from the recipe (recipes.RECIPE_SETTINGS); a
    flag given wins. --precision or --mixed given: the recipe's precision is not used."""
    from transformer_calc.recipes import recipe_settings

    fixed = recipe_settings(t.get("recipe", "hf"))
    if t.get("inference"):  # serving: none of a training recipe's settings apply
        fixed = {"recipe": fixed["recipe"]}
    elif t.get("precision") is None and not t.get("mixed"):
        t["precision"], t["mixed"] = fixed["precision"], fixed["mixed"]
    unsaid = {"adapter_dtype": "", "logits_fp32": "loss", "loss_chunks": 1,
              "untied_head": False, "lightning_bnb": False, "keeps_previous_graph": False}
    for key, default in unsaid.items():
        if t.get(key) is None:
            t[key] = fixed.get(key, default)


BatchOpt = typer.Option(1, "--batch-size", "-b", help="Micro-batch per GPU.")
# --plot alone draws in the terminal; --plot FILE.svg writes a file (an option whose value
# may be left out: _GroupedHelp.parse_args)
PLOT_TERMINAL = "-"
_OPTIONAL_VALUE = {"--plot": PLOT_TERMINAL}


@_command(overrides=True, training=True)
def memory(
    model: Optional[str] = typer.Argument(
        None, metavar="[MODEL]",
        help="A preset, YAML or config.json. Without it: the bytes-per-parameter accounting "
             "and every shipped preset's totals."),
    batch_size: int = BatchOpt,
    seq_len: Optional[int] = SeqLenOpt,
    attention_pattern: Pattern = PatternOpt,
    window: int = WindowOpt,
    block: int = BlockOpt,
    summary: int = SummaryOpt,
    global_tokens: int = GlobalOpt,
    random: int = RandomOpt,
    format: Format = FormatOpt,
    require_fit: bool = typer.Option(
        False, "--require-fit",
        help="Exit 1 when the run does not fit --gpu. A memory budget for CI; 0 when it fits."),
    plot: Optional[str] = typer.Option(
        None, "--plot", metavar="[FILE.svg]",
        help="Chart the step's memory (or write FILE.svg). Op group by op group over time, "
             "the timeline whose maxima are the phases' peaks (docs/memory.md)."),
    overrides: dict[str, Any] | None = None,
    train: dict[str, Any] | None = None,
) -> None:
    """Training or serving memory: weights, gradients, states, activations.

    Training: bytes per parameter for the precision and optimizer (HF performance docs),
    activations tensor by tensor (Korthikanti et al. 2022 with the implementation knobs),
    sharding across --gpus (ZeRO, --tp, --pp). --inference: weights per dtype + KV cache.
    --gpu: does it fit, headroom, and the largest batch size that fits.
    """
    train = train or {}
    settings = _named_head(_settings(train, batch_size, seq_len), overrides)
    if require_fit and not train.get("gpu"):
        raise TcalcError("--require-fit: give the GPU (or a size) to fit with --gpu")
    if model is None:
        _memory_overview(settings, format)
        return
    from transformer_calc.memory import memory_report
    from transformer_calc.render import memory_doc, show

    pattern = _pattern(attention_pattern.value, window, block, summary, global_tokens, random)
    spec = _load(model, overrides or {})
    if seq_len is None:
        import dataclasses

        # a length people train and serve at, not the model's whole context (131,072 tokens
        # of Llama 3.1 would be a 97 TiB answer): said in the verdict
        settings = dataclasses.replace(settings, seq_len=min(spec.default_seq_len,
                                                             DEFAULT_SEQ_LEN))
    if spec.weight_format and settings.inference and not settings.quant \
            and settings.dtype == "bf16":
        # a quantised checkpoint serves in its own format (its quantization_config)
        import dataclasses

        settings = dataclasses.replace(settings, quant=spec.weight_format,
                                       group_size=spec.weight_group_size or settings.group_size)
    elif model.lower().endswith(".gguf") and settings.inference and not settings.quant \
            and settings.dtype == "bf16":
        # a GGUF serves in its own types: its general.file_type's recipe
        import dataclasses

        from transformer_calc.gguf_file import read_gguf, recipe

        fmt = recipe(read_gguf(Path(model).expanduser()))
        if fmt:
            settings = dataclasses.replace(settings, quant=fmt)
    if plot is not None:
        _check_plot(plot, settings, format)
    report = memory_report(spec, settings, train["gpu"], pattern)
    show(memory_doc(report), format.value)
    if plot is not None:
        _plot(report, plot, model)
    if require_fit and report.fit is not None and not report.fit.fits:
        raise typer.Exit(1)


def _check_plot(plot: str, settings: Any, format: Format) -> None:
    """--plot's value and what it can draw, before anything is computed."""
    if settings.inference:
        raise TcalcError("--plot: draws a training step's timeline; --inference has none")
    if plot == PLOT_TERMINAL and format != Format.table:
        raise TcalcError(f"--plot: draws in the terminal beside the table; with --format "
                         f"{format.value} give a file: --plot FILE.svg")
    if plot != PLOT_TERMINAL and not plot.lower().endswith(".svg"):
        from transformer_calc.errors import printable

        raise TcalcError(f"--plot: {printable(plot, one_line=True)}: expected FILE.svg (or "
                         "--plot alone, for the terminal)")


def _plot(report: Any, plot: str, model: str) -> None:
    """The report's timeline as a chart: on stdout, or written to FILE.svg."""
    import shutil

    from transformer_calc.errors import printable
    from transformer_calc.render import human_bytes
    from transformer_calc.render.plot import chart, svg, text

    fit = report.fit
    c = chart(report.timeline, f"tcalc memory {report.model}: bytes allocated per GPU over "
              "one training step", fit.capacity if fit else 0,
              f"{fit.gpu} {human_bytes(fit.capacity)}" if fit else "")
    if plot == PLOT_TERMINAL:
        width = min(max(shutil.get_terminal_size((100, 24)).columns, 40), 200)
        typer.echo("\n" + printable(text(c, width)), nl=False)
        return
    from transformer_calc.files import write_atomically

    # a regular file is replaced (it is a drawing); a special file, a link to one or the
    # model's own file never
    write_atomically(Path(plot), svg(c), source=Path(model), force=True)
    typer.echo(printable(f"wrote {plot}: {len(c.points)} points", one_line=True), err=True)


Topic = Enum("Topic", {c: c for c in TOPICS}, type=str)  # type: ignore[misc]


@_command(overrides=True)
def explain(
    model: str = ModelArg,
    topic: Topic = typer.Option(Topic["params"], help="What to derive."),
    batch_size: int = BatchOpt,
    seq_len: Optional[int] = SeqLenOpt,
    gpu: Optional[str] = typer.Option(None, help="--topic step: the GPU (see `tcalc gpus`); "
                                                 "the cluster is its DGX/HGX node."),
    gpus: int = typer.Option(8, help="--topic step: GPUs in the cluster."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch",
                                               help="--topic step: sequences per optimizer "
                                                    "step (default: one per GPU)."),
    framework: str = typer.Option("megatron", help="--topic step: megatron, megatron-2022, "
                                                   "torchtitan or fsdp."),
    format: Format = FormatOpt,
    overrides: dict[str, Any] | None = None,
) -> None:
    """Show the work: each derivation as formula, numbers substituted, result.

    Topics: params (the whole count, why the head count does not matter, attention against
    FFN, the 12·L·E² rule, tying), attention, ffn, embeddings, memory (16 bytes per parameter,
    what dominates activations), flops (per matmul, 6N), step (where a training step's time
    goes: the fastest layout `tcalc plan` finds, op by op).
    """
    from transformer_calc.explain import explain as derive
    from transformer_calc.render import explain_doc, show

    spec = _load(model, overrides or {})
    sections = derive(spec, topic.value, batch_size=batch_size, seq_len=seq_len, gpu=gpu,
                      gpus=gpus, global_batch=global_batch, framework=framework)
    show(explain_doc(spec.name, topic.value, sections), format.value)


def parse_ints(text: str, option: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8] (sorted, unique, each >= 1)."""
    try:
        values = sorted({int(x) for x in text.replace(" ", "").split(",") if x})
    except ValueError:
        raise TcalcError(f"{option}: expected integers separated by commas, got {text!r}") \
            from None
    if not values or values[0] < 1 or values[-1] > _BIG:
        raise TcalcError(f"{option}: expected integers from 1 to {_BIG:,}, got {text!r}")
    if len(values) > 64:
        raise TcalcError(f"{option}: at most 64 values")
    return values


@_command(overrides=True, training=True)
def sweep(
    model: str = ModelArg,
    batch_size: str = typer.Option("1,2,4,8", "--batch-size", "-b",
                                   help="Batch sizes, comma-separated."),
    seq_len: Optional[str] = typer.Option(
        None, "--seq-len", "-T", help="Context lengths, comma-separated (default 512,1024,2048, "
                                      "those the model's position table allows)."),
    format: Format = FormatOpt,
    overrides: dict[str, Any] | None = None,
    train: dict[str, Any] | None = None,
) -> None:
    """Memory over a grid of batch sizes and context lengths, with fit marks and a bar chart.

    With --gpu each cell is marked as fitting (green ✓) or not (red ✗); the bar chart shows
    where the memory goes in the largest cell.
    """
    import dataclasses

    from transformer_calc.memory import memory_report
    from transformer_calc.render import show, sweep_doc

    train = train or {}
    spec = _load(model, overrides or {})
    batches = parse_ints(batch_size, "--batch-size")
    if seq_len is None:
        seqs = [t for t in (512, 1024, 2048) if t <= (spec.max_context or t)] \
            or [spec.max_context]
    else:
        seqs = parse_ints(seq_len, "--seq-len")
    base = _named_head(_settings(train), overrides)
    cells = {(b, t): memory_report(spec, dataclasses.replace(base, batch_size=b, seq_len=t),
                                   train["gpu"]) for b in batches for t in seqs}
    show(sweep_doc(spec.name, train["gpu"], batches, seqs, cells), format.value)


@_command(training=True)
def compare(
    models: list[str] = typer.Argument(..., metavar="MODEL...",
                                       help="Two or more presets, YAML or config.json files."),
    batch_size: int = BatchOpt,
    seq_len: Optional[int] = typer.Option(None, "--seq-len", "-T",
                                          help="Context length for memory and FLOPs "
                                               "(default 1024)."),
    format: Format = FormatOpt,
    train: dict[str, Any] | None = None,
) -> None:
    """Models side by side: parameters by part, memory and FLOPs, with the difference to the
    first."""
    from transformer_calc.compare import compare_models
    from transformer_calc.render import compare_doc, show

    if len(models) < 2:
        raise TcalcError("compare: give at least two models")
    specs = [_load(m, {}) for m in models]
    # default: 1,024 tokens, or the shortest learned position table among the models
    T = seq_len or min([1024] + [s.max_context for s in specs if s.max_context])
    rows = compare_models(specs, _settings(train or {}, batch_size, T),
                          (train or {}).get("gpu"), T)
    show(compare_doc([s.name for s in specs], rows), format.value)


def _memory_overview(settings: Any, format: Format) -> None:
    """`tcalc memory` without MODEL: the accounting, then a row per shipped preset."""
    import dataclasses

    from transformer_calc.memory import memory_report, state_bytes_per_param
    from transformer_calc.presets import load_model, preset_names
    from transformer_calc.render import memory_overview_doc, show

    # One context for every preset (their max_positions range from 512 to 131,072), or the
    # length of a learned position table that is shorter (BERT: 512)
    T = settings.seq_len or 2048
    specs = [load_model(n) for n in preset_names()]
    reports = [memory_report(s, dataclasses.replace(settings, seq_len=min(
        T, s.max_context or T))) for s in specs]
    show(memory_overview_doc(settings, T, state_bytes_per_param(settings), reports),
         format.value)


@_command(overrides=True)
def plan(
    model: str = ModelArg,
    gpu: Optional[str] = typer.Option(None, help="GPU preset (see `tcalc gpus`); the "
                                                 "cluster is its DGX/HGX node."),
    gpus: int = typer.Option(8, help="GPUs in the cluster."),
    global_batch: int = typer.Option(..., "--global-batch", help="Sequences per optimizer "
                                                                 "step."),
    seq_len: Optional[int] = SeqLenOpt,
    tokens: Optional[str] = typer.Option(None, help="Training tokens, e.g. 15T: days and "
                                                    "GPU-hours for the run."),
    framework: str = typer.Option("megatron", help="megatron, megatron-2022, torchtitan or "
                                                   "fsdp: the layouts it allows, how it "
                                                   "overlaps communication."),
    precision: str = typer.Option("bf16", help="The layers' GEMMs: bf16 or fp8."),
    cluster: Optional[str] = typer.Option(None, help="A cluster preset instead of --gpu "
                                                     "(docs/planner.md lists them)."),
    top: int = typer.Option(5, help="Layouts to show."),
    tp: Optional[int] = typer.Option(None, help="Hold tensor parallelism at this degree."),
    pp: Optional[int] = typer.Option(None, help="Hold pipeline parallelism at this degree."),
    cp: Optional[int] = typer.Option(None, help="Hold context parallelism at this degree."),
    ep: Optional[int] = typer.Option(None, help="Hold expert parallelism at this degree."),
    zero: Optional[int] = typer.Option(None, help="Hold the ZeRO stage."),
    recompute: Optional[Recompute] = typer.Option(None, help="Hold the recomputation."),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch",
                                              help="Hold the sequences per micro-batch."),
    format: Format = FormatOpt,
    overrides: dict[str, Any] | None = None,
) -> None:
    """The fastest parallel layouts for a cluster: step time, throughput, MFU, run cost.

    Searches the layouts the framework allows (tensor, pipeline, context, expert and data
    parallel degrees, ZeRO stage, micro-batch, interleaving, recomputation, sequence
    parallelism), keeps those whose busiest GPU fits its memory (tcalc memory), and ranks
    them by a step-time model calibrated on published runs (docs/planner.md). The verdict
    first, then each layout's step split into compute, pipeline bubble, exposed TP, CP, EP,
    PP and DP communication and the optimizer.
    """
    from transformer_calc.planner import plan_training
    from transformer_calc.render import show
    from transformer_calc.render.planner import plan_doc

    spec = _load(model, overrides or {})
    fixed: dict[str, Any] = {k: v for k, v in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep),
                                               ("zero", zero), ("mb", micro_batch))
                             if v is not None}
    if recompute is not None:
        fixed["recompute"] = recompute.value
    report = plan_training(
        spec, gpus=gpus, global_batch=global_batch, seq_len=_seq_len(spec, seq_len),
        gpu=gpu, cluster=cluster, framework=framework, precision=precision, top=top,
        fixed=fixed, tokens=None if tokens is None else parse_count(tokens, "--tokens"))
    show(plan_doc(report), format.value)


@_command()
def gpus(format: Format = FormatOpt) -> None:
    """List the GPU presets: memory, bandwidth and dense peak FLOP/s per dtype."""
    from transformer_calc.hardware import GPUS
    from transformer_calc.render import gpus_doc, show

    show(gpus_doc(list(GPUS.values())), format.value)


@_command()
def presets(format: Format = FormatOpt) -> None:
    """List the shipped presets with their description and exact total."""
    from transformer_calc.params import count_params
    from transformer_calc.presets import load_model, preset_names
    from transformer_calc.render import presets_doc, show

    rows = []
    for name in preset_names():
        spec = load_model(name)
        b = count_params(spec)
        rows.append((name, spec.description, b.total, b.active_total))
    show(presets_doc(rows), format.value)


@_command(training=True)
def check(
    paths: Optional[list[str]] = typer.Argument(
        None, metavar="[PATH]...",
        help="YAML presets, config.json or .gguf files, folders or Hub ids (default: the "
             "shipped presets)."),
    format: Format = FormatOpt,
    exclude: Optional[list[str]] = typer.Option(
        None, "--exclude", metavar="GLOB",
        help="Skip files and folders matching GLOB (a path relative to the folder searched, "
             "or any one of its parts: '*.json', 'tests/data/*'); repeatable."),
    max_memory: Optional[str] = typer.Option(
        None, "--max-memory",
        help="A memory budget: each model's peak per GPU, for the run the training / "
             "serving options describe, at most this (a size such as 80GiB, or a GPU)."),
    batch_size: int = BatchOpt,
    seq_len: Optional[int] = SeqLenOpt,
    train: dict[str, Any] | None = None,
) -> None:
    """Validate model files for CI: keys, types, shapes, expected_params, a model folder's
    checkpoint against its config, and with --max-memory a memory budget.

    Files, folders and Hub ids. A folder is searched for model files only (presets,
    config.json and .gguf files), skipping what git ignores and what --exclude names. One
    line per file and a summary. Exit 0 when all pass, 1 when any fails, 2 for usage
    errors. With GITHUB_ACTIONS=true, failures are also printed as ::error annotations.
    """
    import os

    from transformer_calc.check import Budget
    from transformer_calc.check import check as run_check
    from transformer_calc.render import check_doc, github_annotations, show

    budget = None
    if max_memory is not None:
        from transformer_calc.hardware import get_gpu

        budget = Budget(_settings(train or {}, batch_size, seq_len),
                        get_gpu(max_memory).memory_bytes, max_memory)
    results = run_check(paths or [], budget, exclude or [])
    show(check_doc(results), format.value)
    if os.environ.get("GITHUB_ACTIONS") == "true":  # on stderr: stdout stays the result
        for line in github_annotations(results):
            typer.echo(line, err=True)
    if not all(r.ok for r in results):
        raise typer.Exit(1)


@_command()
def import_(
    config: str = typer.Argument(..., metavar="CONFIG_JSON",
                                 help="A local Hugging Face config.json."),
    output: Optional[str] = typer.Option(None, "--output", "-o",
                                         help="Write the YAML preset here (default: stdout)."),
    name: Optional[str] = typer.Option(None, "--name", help="Preset name (default: file name)."),
    force: bool = typer.Option(False, "--force", help="Replace OUTPUT if it exists."),
) -> None:
    """Convert a Hugging Face config.json into an equivalent tcalc YAML preset.

    The preset counts the same parameters as the config (tests check the round trip). The
    output is written to a temporary file beside it and renamed into place: an existing file
    is replaced only with --force, never the input itself, and a failed write leaves nothing.
    """

    from transformer_calc.errors import printable, text_of
    from transformer_calc.files import write_atomically
    from transformer_calc.params import count_params
    from transformer_calc.presets import dump_yaml, load_file, parse_yaml, spec_from_mapping

    if name is not None and text_of(name) != name:
        raise TcalcError(f"--name: {printable(name, one_line=True)} is not UTF-8 text")
    spec = load_file(Path(config))
    # a name from a file name that is not UTF-8 gets U+FFFD for its stray bytes: YAML
    # cannot hold them, and the preset must read back
    spec = spec.replace(name=name or text_of(Path(output).stem if output else spec.name))
    text = dump_yaml(spec)
    total = count_params(spec).total
    try:  # what is written is what tcalc reads back, with the same count
        again = count_params(spec_from_mapping(parse_yaml(text, "the preset"), spec.name))
    except TcalcError as e:
        raise TcalcError(f"cannot write a preset that reads back: {e}") from None
    if again.total != total:
        raise TcalcError(f"cannot write a preset that reads back: {again.total:,} parameters "
                         f"instead of {total:,}")
    if output is None:
        _emit(text)
        return
    write_atomically(Path(output), text, source=Path(config), force=force)
    typer.echo(printable(f"wrote {output}: {spec.name}, {total:,} parameters", one_line=True),
               err=True)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"tcalc {version('transformer-calc')}")
        except PackageNotFoundError:  # pragma: no cover - a source tree without install
            typer.echo("tcalc (not installed: no version)")
        raise typer.Exit()


def _new_app(names: list[str], named: frozenset[str] | None = None) -> typer.Typer:
    app = typer.Typer(**APP_OPTIONS)

    @app.callback()
    def group(version: bool = typer.Option(False, "--version", callback=_version,
                                           is_eager=True, help="Show the version and exit.")
              ) -> None:  # keeps `tcalc COMMAND ...` a group, with or without --version
        pass

    for name in names:
        app.command(name=name, cls=_GroupedHelp)(COMMANDS[name](named))
    return app


@functools.cache
def _full_app() -> typer.Typer:
    return _new_app(list(COMMANDS))


def __getattr__(name: str) -> Any:
    """``app``, the full typer app (for --help, tests and embedding), built on first use."""
    if name == "app":
        return _full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _app_for(argv: list[str], named: bool = True) -> typer.Typer:
    """The app to run: only the invoked command when argv names one, and of its ~130
    architecture overrides only those argv names (``named``). Turning options into
    typer/click parameters is most of tcalc's start-up (make bench), so the rest are not
    built; --help and unknown words get the full app. (An option argv misspells is not
    found in the narrowed command: main runs the whole command again for click's message.)"""
    if not argv or argv[0] not in COMMANDS:
        return _full_app()
    if not named or "--help" in argv or "--help-all" in argv:
        return _new_app([argv[0]])
    flags = {word.split("=", 1)[0] for word in argv[1:] if word.startswith("--")}
    return _new_app([argv[0]], frozenset(
        f.name for f in ARCH_FIELDS
        if f"--{f.name.replace('_', '-')}" in flags or f"--no-{f.name.replace('_', '-')}" in flags))


# --help shows these panels in full; the rest as their flags, explained by --help-all
_FIRST_SCREEN = ("Options", "Training / serving")
# the overrides --help names, of the ~180 --help-all lists
_COMMON_OVERRIDES = ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_head", "d_ff",
                     "vocab_size", "max_positions", "tie_embeddings", "n_experts")


def _first_sentence(text: str) -> str:
    """An option's help up to its first full stop (a "(...)" or "e.g." not cut)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == "." and depth == 0 and text[i + 1:i + 2] in (" ", "") \
                and not text[:i].endswith(("e.g", "i.e", "vs", "etc")):
            return text[:i + 1]
    return text


def _help_all(ctx: Any, param: Any, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        ctx.meta["tcalc.help_all"] = True
        typer.echo(ctx.get_help(), color=ctx.color)
        ctx.exit()


class _GroupedHelp(typer.core.TyperCommand):
    """--help with the options under their panels (typer draws panels only in rich mode,
    which tcalc leaves off for start-up): what the command takes first, then the run's
    settings, the architecture overrides last. A command with more than a screen of options
    shows the first panels in --help and the rest as their flags; --help-all explains all."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        if any(getattr(p, "rich_help_panel", None) for p in params):
            params.append(typer.core.TyperOption(
                param_decls=["--help-all"], is_flag=True, expose_value=False, is_eager=True,
                callback=_help_all, help="Every option explained, the overrides too."))
        return params

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """An option whose value may be left out (_OPTIONAL_VALUE) gets its default value
        where none follows it (the end, or another option): typer's parser has no such
        options."""
        given = []
        for i, word in enumerate(args):
            given.append(word)
            if word == "--":
                given.extend(args[i + 1:])
                break
            nxt = args[i + 1] if i + 1 < len(args) else None
            if word in _OPTIONAL_VALUE and (nxt is None or nxt.startswith("-") and nxt != "-"):
                given.append(_OPTIONAL_VALUE[word])
        return super().parse_args(ctx, given)  # type: ignore[no-any-return]

    def _brief(self, ctx: Any) -> bool:
        return not ctx.meta.get("tcalc.help_all") and len(self.get_params(ctx)) > 40

    def format_help_text(self, ctx: Any, formatter: Any) -> None:
        """--help of a long command: the docstring's first paragraph only."""
        if not self._brief(ctx) or not self.help:
            super().format_help_text(ctx, formatter)
            return
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(inspect.cleandoc(self.help).split("\n\n")[0])

    def format_options(self, ctx: Any, formatter: Any) -> None:
        groups: dict[str, list[tuple[Any, tuple[str, str]]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record:
                panel = getattr(param, "rich_help_panel", None) or "Options"
                groups.setdefault(panel, []).append((param, record))
        last = [k for k in groups if k.startswith("Architecture")]
        order = [k for k in groups if k not in last] + last
        brief = self._brief(ctx)
        for name in order:
            if not brief:
                with formatter.section(name):
                    formatter.write_dl([record for _, record in groups[name]])
            elif name in _FIRST_SCREEN:
                with formatter.section(name):
                    formatter.write_dl([(flags, _first_sentence(text))
                                        for _, (flags, text) in groups[name]])
        if brief:
            self._format_the_rest(ctx, formatter, [k for k in order if k not in _FIRST_SCREEN],
                                  groups)

    def _format_the_rest(self, ctx: Any, formatter: Any, panels: list[str],
                         groups: dict[str, list[tuple[Any, tuple[str, str]]]]) -> None:
        rows = []
        for name in panels:
            flags = [max(p.opts, key=len) for p, _ in groups[name]]
            if name.startswith("Architecture"):
                common = {p.name: max(p.opts, key=len) for p, _ in groups[name]}
                flags = [common[n] for n in _COMMON_OVERRIDES if n in common]
                flags.append(f"... ({len(groups[name])} in all)")
            rows.append((name.split(" (")[0], " ".join(flags)))
        with formatter.section(f"More (tcalc {ctx.info_name} --help-all explains each)"):
            formatter.write_dl(rows)


def _run(argv: list[str]) -> Any:
    try:
        return _app_for(argv)(standalone_mode=False)
    except typer.TyperException as e:
        if type(e).__name__ != "NoSuchOption" or not argv or argv[0] not in COMMANDS:
            raise
    # nothing ran (click stops while parsing): the whole command, for click's own message
    # and its "Did you mean" among every option
    return _app_for(argv, named=False)(standalone_mode=False)


# What a terminal that cannot show a character gets instead (a non-UTF-8 locale)
ASCII_FALLBACK = {"×": "x", "·": "*", "Σ": "sum", "≈": "~", "−": "-", "—": "-", "–": "-",
                  "✓": "ok", "✗": "X", "²": "^2", "→": "->", "←": "<-", "↔": "<->", "≤": "<=",
                  "≥": ">=", "µ": "u", "⌈": "ceil(", "⌉": ")", "√": "sqrt", "ᵀ": "^T",
                  "⊙": "*", "Δ": "D", "…": "...", "≠": "!=", "±": "+/-",
                  **dict.fromkeys("█▉▊▋▌▍▎▏", "#")}


def _ascii_fallback(e: UnicodeError) -> tuple[str, int]:
    assert isinstance(e, UnicodeEncodeError)
    text = e.object[e.start:e.end]
    return "".join(ASCII_FALLBACK.get(ch, "?") for ch in text), e.end


def _fit_the_terminal() -> None:
    """A stream that cannot encode what tcalc writes (LANG=C with an old Python, latin-1,
    PYTHONIOENCODING=ascii) gets ASCII stand-ins instead of a UnicodeEncodeError."""
    import codecs

    codecs.register_error("tcalc-ascii", _ascii_fallback)
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if not encoding.startswith("utf") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="tcalc-ascii")


MIN_COLUMNS = 40  # a COLUMNS narrower than this is read as this (COLUMNS=1: a letter a line)


class _ClosedStream:
    """stdout when its descriptor was closed before tcalc started (`tcalc ... >&-`): writing
    to it fails as writing to a closed descriptor does, so that main says so and exits 1
    instead of exiting 0 with nothing written."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, text: str) -> int:
        import errno

        raise OSError(errno.EBADF, "stdout is closed")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise ValueError("stdout is closed")  # (as a closed file's fileno does)


def _standard_streams() -> None:
    """Descriptors 0-2 that were closed at start are opened on the null device, so that no
    file tcalc opens later takes their number (and a write to "stdout" lands in it); a closed
    stdout then fails on the first write (_ClosedStream). COLUMNS that is not a positive
    number is dropped, and one below MIN_COLUMNS read as MIN_COLUMNS."""
    import os

    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None:
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, os.O_RDWR)
                if null != fd:  # (lower descriptors were open: this one was not closed)
                    os.close(null)
    if sys.stdout is None:
        sys.stdout = _ClosedStream()  # type: ignore[assignment]
    columns = os.environ.get("COLUMNS")
    if columns is not None:
        if not (columns.strip().isdigit() and int(columns) > 0):
            del os.environ["COLUMNS"]
        elif int(columns) < MIN_COLUMNS:
            os.environ["COLUMNS"] = str(MIN_COLUMNS)


def main() -> None:
    """Console entry point (`tcalc`, `python -m transformer_calc`).

    Runs typer in non-standalone mode so that usage errors (a bad option value, an unknown
    option) print one line, like every other error, instead of usage + hint + message.
    """
    _standard_streams()
    _fit_the_terminal()
    try:
        code = _run(sys.argv[1:])
    except SystemExit as e:
        # click turns a broken pipe on stdout into a silent exit 1, its stdout replaced by a
        # PacifyFlushWrapper: say why, in one line
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":
            _output_failed(BrokenPipeError())
        raise e from None
    except typer.TyperException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `tcalc`: show the help
            ctx = getattr(e, "ctx", None)
            typer.echo(ctx.get_help() if ctx else "tcalc --help", err=True)
            sys.exit(EXIT_USAGE)
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        typer.echo(error_line(message), err=True)
        sys.exit(getattr(e, "exit_code", EXIT_USAGE))
    except typer.Abort:  # pragma: no cover - Ctrl-C at a prompt
        sys.exit(130)
    except KeyboardInterrupt:  # pragma: no cover - interactive only
        sys.exit(130)
    except OSError as e:  # stdout closed (a pipe's reader gone) or full: one line, exit 1
        _output_failed(e)
    sys.exit(code if isinstance(code, int) else 0)


def _output_failed(e: OSError) -> None:
    import errno
    import os

    closed = isinstance(e, BrokenPipeError) or e.errno == errno.EPIPE
    # nothing more can go to stdout, not even Python's flush at exit (a stdout without a file
    # descriptor raises ValueError; a closed stderr leaves nothing to say)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if closed:
        # the reader went away (`| head`): end quietly, as a process SIGPIPE ends does in a
        # shell (128 + SIGPIPE's 13)
        sys.exit(128 + 13)
    with contextlib.suppress(OSError):
        sys.stderr.write(error_line(f"cannot write the output: {e.strerror or e}") + "\n")
    sys.exit(1)
