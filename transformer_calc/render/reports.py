"""Each command's result as a Doc: its JSON value and its blocks (tables, notes). The one
place that decides what a command shows; json.py, markdown.py and terminal.py render it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformer_calc.breakdown import Breakdown, Item
from transformer_calc.render.doc import (
    Cell,
    Column,
    Doc,
    Mark,
    Pair,
    Section,
    Table,
    Text,
    Wide,
)
from transformer_calc.render.units import error_pct, human, human_bytes, pct, sci
from transformer_calc.spec import ARCH_FIELDS, ModelSpec

PARAMS_SCHEMA = "tcalc.params/1"


def spec_dict(spec: ModelSpec) -> dict[str, Any]:
    return {f.name: getattr(spec, f.name) for f in ARCH_FIELDS}


def _columns(headers: Sequence[str], numeric: Sequence[int] = ()) -> list[Column]:
    return [Column(h, n in numeric) for n, h in enumerate(headers)]


# -- params ------------------------------------------------------------------------------

def params_dict(b: Breakdown, spec: ModelSpec) -> dict[str, Any]:
    """The documented JSON schema of `tcalc params` (see README, "JSON output")."""
    rot = int(b.extra["rule_of_thumb"])
    out: dict[str, Any] = {
        "schema": PARAMS_SCHEMA,
        "model": b.model,
        "total_params": b.total,
        "active_params": b.active_total,
        "per_layer_params": {s: b.layer_total(s) for s in b.stacks},
        "components": [
            {
                "name": i.name,
                "count": i.total,
                "per_layer": i.per_layer,
                "layers": i.repeat,
                "count_per_layer": i.count if i.per_layer else None,
                "active": i.active_total,
                "formula": i.formula,
                "expr": i.expr,
                "note": i.note,
            }
            for i in b.items
        ],
        "rule_of_thumb": {"formula": b.extra["rule_of_thumb_formula"], "params": rot,
                          "error_pct": round(error_pct(rot, b.total), 4)},
        "notes": list(b.notes),
        "spec": spec_dict(spec),
    }
    if "mtp_params" in b.extra:
        # DeepSeek-V3's multi-token prediction: not in total_params (transformers does not
        # build it); "stored" adds the copies of the embedding and head its checkpoint holds
        out["mtp_params"] = {"params": b.extra["mtp_params"],
                             "stored": b.extra["mtp_params_stored"]}
    if spec.expected_params is not None:
        out["expected_params"] = {"params": spec.expected_params,
                                  "source": spec.expected_params_source,
                                  "matches": spec.expected_params == b.total}
    return out


# an encoder tower's per-layer rows (towers.py): outside the language model's stacks
_TOWER_LAYERS = {"tower.layer.": "tower layer", "tower.global_layer.": "tower global layer",
                 "tower.audio_layer.": "audio tower layer"}


def _tower_layer(item: Item) -> str:
    return next((p for p in _TOWER_LAYERS if item.name.startswith(p)), "")


def _section(item: Item) -> str:
    if item.stack:
        return f"{item.stack} layer (× {item.repeat})"
    if item.name.startswith(("tower.", "projector.")):
        layer = _tower_layer(item)
        return f"{_TOWER_LAYERS[layer]} (× {item.repeat})" if layer else \
            item.name.split(".")[0]
    if ".embed." in f".{item.name}":
        return "embeddings"
    if item.name.startswith("head."):
        return "heads"
    return "final norms" if item.name.endswith("final_norm") else "other"


def _short(item: Item) -> str:
    """The name without the stack prefix its section header already shows."""
    return item.name[len(item.stack) + 1:] if item.stack else \
        item.name[len(_tower_layer(item)):]


Row = Sequence[Cell] | Section


def params_rows(b: Breakdown) -> list[Row]:
    """(component, formula, per layer, params, share[, active]) rows, subtotals included,
    under a Section per part; the formula cell also has the numbers substituted (Wide), for
    formats with the room."""
    moe = b.active_total != b.total
    rows: list[Row] = []
    total = b.total
    current = None
    for n, item in enumerate(b.items):
        title = _section(item)
        if title != current:
            current = title
            rows.append(Section(title))
        formula: Cell = item.formula
        if item.expr and item.expr != item.formula and item.count:
            formula = Wide(item.formula, f"{item.formula} = {item.expr}")
        row: tuple[Cell, ...] = (_short(item), formula,
                                 f"{item.count:,}" if item.per_layer or _tower_layer(item)
                                 else "",
                                 f"{item.total:,}", pct(item.total, total))
        if moe:
            row += (f"{item.active_total:,}",)
        rows.append(row)
        nxt = b.items[n + 1] if n + 1 < len(b.items) else None
        if item.stack and (nxt is None or nxt.stack != item.stack):
            one, reps = b.layer_total(item.stack), item.repeat
            sub: tuple[str, ...] = ("layer subtotal", f"one layer × {reps}", f"{one:,}",
                                    f"{one * reps:,}", pct(one * reps, total))
            if moe:
                act = sum(i.active_total for i in b.items if i.stack == item.stack)
                sub += (f"{act:,}",)
            rows.append(sub)
    return rows


def params_headers(b: Breakdown) -> tuple[str, ...]:
    base = ("component", "formula", "per layer", "params", "share")
    return base + (("active",) if b.active_total != b.total else ())


def params_summary(b: Breakdown, spec: ModelSpec) -> list[str]:
    rot = int(b.extra["rule_of_thumb"])
    lines = [f"total trainable parameters: {b.total:,} ({human(b.total)})"]
    if b.active_total != b.total:
        lines.append(f"active per token: {b.active_total:,} ({human(b.active_total)})")
    lines.append(f"rule of thumb {b.extra['rule_of_thumb_formula']} = {rot:,} "
                 f"({error_pct(rot, b.total):+.2f}% vs exact)")
    if spec.expected_params is not None:
        ok = "matches" if spec.expected_params == b.total else (
            f"DIFFERS by {b.total - spec.expected_params:+,}")
        lines.append(f"reference {spec.expected_params:,} {ok} ({spec.expected_params_source})")
    seen: set[str] = set()
    for item in b.items:
        if item.note and item.note not in seen:
            seen.add(item.note)
            lines.append(f"{_short(item)}: {item.note}")
    lines += [f"note: {n}" for n in b.notes]
    return lines


def checkpoint_dict(ckpt: Any, architecture: int) -> dict[str, Any]:
    """JSON "checkpoint": what the folder's safetensors headers hold, against the
    architecture's count."""
    from transformer_calc.checkpoint import compare

    return {"files": list(ckpt.files), "params": ckpt.params, "bytes": ckpt.bytes,
            "dtypes": dict(sorted(ckpt.dtypes.items()))} | compare(ckpt, architecture)


def checkpoint_lines(c: dict[str, Any]) -> list[str]:
    dtypes = ", ".join(f"{d} {n:,}" for d, n in c["dtypes"].items())
    kind = "GGUF" if c["files"][0].lower().endswith(".gguf") else "safetensors"
    lines = [f"checkpoint ({len(c['files'])} {kind} file{'s' * (len(c['files']) > 1)}): "
             f"{c['params']:,} stored elements ({dtypes}), {c['bytes']:,} bytes"]
    if c["matches"]:
        lines.append("checkpoint equals the architecture's count")
    else:
        why = (f"; {' + '.join(c['explained_by'])} hold{'s' * (len(c['explained_by']) == 1)} "
               "exactly that" if c["explained_by"] else "")
        lines.append(f"checkpoint differs from the architecture's count by "
                     f"{c['difference']:+,}{why}")
    return lines




def params_doc(b: Breakdown, spec: ModelSpec, ckpt: Any = None) -> Doc:
    extra = checkpoint_dict(ckpt, b.total) if ckpt is not None else None
    data = params_dict(b, spec) | ({"checkpoint": extra} if extra else {})
    return Doc(data, [
        # too wide for a terminal: "per layer" goes first, then "share"
        Table(f"{spec.name}: trainable parameters",
              [Column(h, n > 1, drop={2: 2, 4: 1}.get(n, 0))
               for n, h in enumerate(params_headers(b))], params_rows(b)),
        Text(params_summary(b, spec) + (checkpoint_lines(extra) if extra else [])),
    ])


# -- check ---------------------------------------------------------------------------------

CHECK_SCHEMA = "tcalc.check/1"


def check_summary(results: list[Any]) -> str:
    failed = sum(not r.ok for r in results)
    files = "file" if len(results) == 1 else "files"
    return f"{len(results)} {files} checked: {len(results) - failed} ok, {failed} failed"


def check_lines(results: list[Any]) -> list[str]:
    """One line per file, then the summary."""
    lines = []
    for r in results:
        if r.ok:
            ref = " = expected_params" if r.expected is not None else ""
            ckpt = f", {r.checkpoint}" if getattr(r, "checkpoint", "") else ""
            lines.append(f"ok    {r.path}: {r.model}, {r.total:,} parameters{ref}{ckpt}")
        else:
            at = f" (line {r.line})" if r.line else ""
            lines.append(f"FAIL  {r.path}{at}: {r.message}")
    return lines + [check_summary(results)]


def workflow_command(command: str, properties: dict[str, object], message: str) -> str:
    """A GitHub Actions workflow command line, every value escaped as the runner unescapes it
    (actions/runner src/Runner.Common/ActionCommand.cs: data %25 %0D %0A; properties also
    %3A %2C), then the other control characters made printable: one line, whatever it
    holds, which the runner reads back as it was."""
    from transformer_calc.errors import without_controls

    def data(text: str) -> str:
        return without_controls(text.replace("%", "%25").replace("\r", "%0D")
                                .replace("\n", "%0A"))

    def prop(text: str) -> str:
        return data(text).replace(":", "%3A").replace(",", "%2C")

    props = ",".join(f"{k}={prop(str(v))}" for k, v in properties.items() if v is not None)
    return f"::{command} {props}::{data(message)}"


def github_annotations(results: list[Any]) -> list[str]:
    return [workflow_command("error", {"file": r.path, "line": r.line, "title": "tcalc check"},
                             r.message) for r in results if not r.ok]


def check_doc(results: list[Any]) -> Doc:
    data = {
        "schema": CHECK_SCHEMA,
        "ok": sum(r.ok for r in results),
        "failed": sum(not r.ok for r in results),
        "files": [{"path": r.path, "ok": r.ok, "model": r.model, "total_params": r.total,
                   "expected_params": r.expected, "message": r.message, "line": r.line,
                   "key": r.key, "checkpoint": getattr(r, "checkpoint", "") or None}
                  for r in results],
    }
    rows = [(r.path, "ok" if r.ok else "FAIL", f"{r.total:,}" if r.total is not None else "",
             r.message) for r in results]
    # one grep-able line per file on a terminal and in CI logs; a table in markdown
    return Doc(data, [
        Text(check_lines(results), "lines", only="table"),
        Table("", _columns(("file", "result", "params", "message")), rows, only="markdown"),
        Text([check_summary(results)], "lines", only="markdown"),
    ])


# -- flops ---------------------------------------------------------------------------------

FLOPS_SCHEMA = "tcalc.flops/1"


def flops_dict(r: Any) -> dict[str, Any]:
    """The documented JSON of `tcalc flops` from a FlopsReport."""
    b = r.forward
    out: dict[str, Any] = {
        "schema": FLOPS_SCHEMA,
        "model": b.model,
        "seq_len": r.seq_len,
        "forward_flops_per_token": b.total,
        "backward_flops_per_token": 2 * b.total,
        "recompute": r.recompute,
        "training_flops_per_token": r.training,
        "components": [{"name": i.name, "flops": i.total, "per_layer": i.per_layer,
                        "layers": i.repeat, "flops_per_layer": i.count if i.per_layer else None,
                        "formula": i.formula, "expr": i.expr, "note": i.note}
                       for i in b.items],
        "rules_of_thumb": {
            "6N": {"params": r.params, "training_flops_per_token": r.rule_6n,
                   "error_pct": round(error_pct(r.rule_6n, r.training), 4)},
            "kaplan_forward": {"non_embedding_params": r.non_embedding,
                               "forward_flops_per_token": r.kaplan,
                               "error_pct": round(error_pct(r.kaplan, b.total), 4)},
        },
        "attention": {"pattern": r.pattern.kind, "description": r.pattern.describe(),
                      "scan": [{"seq_len": t, "dense_flops": d, "pattern_flops": p}
                               for t, d, p in r.scan]},
        "notes": list(b.notes),
    }
    if r.hybrid:
        out["hybrid"] = {"against": "every recurrent mixer layer as full attention",
                         "scan": [{"seq_len": t, "forward_flops_per_token": f,
                                   "all_attention_forward_flops_per_token": fa,
                                   "cache_bytes": c, "all_attention_cache_bytes": ca}
                                  for t, f, fa, c, ca in r.hybrid]}
    if r.run is not None:
        run = r.run
        out["run"] = {"tokens": run.tokens, "tokens_source": run.tokens_source,
                      "total_flops": run.total_flops, "gpu": run.gpu, "gpus": run.n_gpus,
                      "peak_flops_per_gpu": run.peak_flops,
                      "mfu": None if run.mfu is None else round(run.mfu, 6),
                      "mfu_source": run.mfu_source, "gpu_hours": run.gpu_hours,
                      "wall_clock_days": run.wall_days}
    if r.roofline is not None:
        ro = r.roofline
        out["roofline"] = {
            "gpu": ro.gpu, "dtype": ro.dtype, "kv_dtype": ro.kv_dtype, "batch_size": ro.batch,
            "context": ro.context, "peak_flops": ro.peak_flops, "bandwidth": ro.bandwidth,
            "ridge_flops_per_byte": ro.ridge,
            **{p.name: _phase_dict(p) for p in (ro.prefill, ro.decode)},
        }
        if ro.decode_mha is not None:
            out["roofline"]["decode_if_mha"] = _phase_dict(ro.decode_mha)
    return out


def _phase_dict(p: Any) -> dict[str, Any]:
    return {"flops": p.flops, "bytes": p.bytes, "seconds": p.seconds,
            "arithmetic_intensity": p.intensity, "bound": p.bound,
            "tokens_per_second": p.tokens_per_second}


def flops_rows(r: Any) -> list[Row]:
    b = r.forward
    rows: list[Row] = []
    current = None
    for n, item in enumerate(b.items):
        title = _section(item).replace("layer (×", "layer, forward (×")
        if title != current:
            current = title
            rows.append(Section(title))
        rows.append((_short(item), item.formula, f"{item.count:,}" if item.per_layer else "",
                     f"{item.total:,}", pct(item.total, b.total)))
        nxt = b.items[n + 1] if n + 1 < len(b.items) else None
        if item.stack and (nxt is None or nxt.stack != item.stack):
            one = b.layer_total(item.stack)
            rows.append(("layer subtotal", f"one layer × {item.repeat}", f"{one:,}",
                         f"{one * item.repeat:,}", pct(one * item.repeat, b.total)))
    return rows


def flops_summary(r: Any) -> list[str]:
    b = r.forward
    lines = [
        f"forward: {b.total:,} FLOPs per token ({sci(b.total)}) at T = {r.seq_len}",
        f"backward: {2 * b.total:,} (2 × forward)",
        f"training: {r.training:,} per token ({sci(r.training)}; recompute {r.recompute})",
        f"rule 6N = 6 × {r.params:,} = {r.rule_6n:,} ({error_pct(r.rule_6n, r.training):+.2f}% "
        "vs itemised training)",
        f"Kaplan forward 2N + 2·n_layer·n_ctx·d_attn = {r.kaplan:,} "
        f"({error_pct(r.kaplan, b.total):+.2f}% vs itemised forward; N = {r.non_embedding:,} "
        "non-embedding, so the LM head's 2·d_model·V is not in it)",
    ]
    if r.pattern.kind != "dense" or len(r.scan) > 0:
        lines.append(f"attention pattern: {r.pattern.describe()}")
        lines.append("   T  | dense scores+values/token | pattern | pattern/dense")
        for t, d, p in r.scan:
            mark = "  <- pays" if p < d else ""
            lines.append(f"  {t:>7,} | {d:>20,} | {p:>16,} | {p / d:.3f}{mark}")
    if r.hybrid:
        lines.append("hybrid vs all-attention (each mixer layer as attention), per sequence:")
        lines.append("        T | FLOPs/token | all-attention | ratio |      cache | "
                     "all-attention cache")
        for t, f, fa, c, ca in r.hybrid:
            pays = [what for what, yes in (("FLOPs", f < fa), ("cache", c < ca)) if yes]
            mark = f"  <- pays ({', '.join(pays)})" if pays else ""
            lines.append(f"  {t:>7,} | {sci(f):>11} | {sci(fa):>13} | {f / fa:.3f} | "
                         f"{human_bytes(c):>10} | {human_bytes(ca)}{mark}")
    if r.run is not None:
        run = r.run
        lines += [f"run: {run.tokens:,} tokens ({run.tokens_source}): "
                  f"{sci(run.total_flops)} training FLOPs"]
        if run.gpu is not None:
            lines += [
                f"  {run.n_gpus} × {run.gpu} at {sci(run.peak_flops)} FLOP/s peak, "
                f"MFU {100 * run.mfu:.1f}% ({run.mfu_source})",
                f"  {run.gpu_hours:,.0f} GPU-hours, {run.wall_days:,.2f} days wall-clock",
            ]
    if r.roofline is not None:
        ro = r.roofline
        lines.append(f"roofline on {ro.gpu} ({ro.dtype} weights, {ro.kv_dtype} KV cache), batch "
                     f"{ro.batch}, context {ro.context}: ridge {ro.ridge:.0f} FLOPs/byte")
        phases = [ro.prefill, ro.decode] + ([ro.decode_mha] if ro.decode_mha else [])
        for p, label in zip(phases, ["prefill", "decode", "decode if MHA"], strict=False):
            lines.append(f"  {label}: {sci(p.flops)} FLOPs, {human_bytes(p.bytes)} moved, "
                         f"intensity {p.intensity:,.1f} -> {p.bound}-bound, "
                         f"<= {p.tokens_per_second:,.0f} tokens/s")
    lines += [f"note: {n}" for n in b.notes]
    return lines



def flops_doc(r: Any) -> Doc:
    headers = ("component", "formula", "per layer", "FLOPs/token", "share")
    return Doc(flops_dict(r), [
        Table(f"{r.forward.model}: forward FLOPs per token (T = {r.seq_len})",
              # narrow: the share goes first, then the per-layer count
              [Column(headers[0]), Column(headers[1]), Column(headers[2], True, drop=1),
               Column(headers[3], True), Column(headers[4], True, drop=2)], flops_rows(r)),
        Text(flops_summary(r)),
    ])


# -- memory --------------------------------------------------------------------------------

MEMORY_SCHEMA = "tcalc.memory/1"


def timeline_dict(t: Any) -> dict[str, Any] | None:
    """The step's timeline (costs/timeline.py): a point per op group (or run of layers),
    the bytes allocated after it and the highest moment inside it; None in inference."""
    if t is None:
        return None
    return {"layers_per_point": t.layers_per_point, "notes": list(t.notes),
            "points": [{"phase": p.phase, "step": p.step, "allocated_bytes": p.allocated,
                        "peak_bytes": p.peak} for p in t.points]}


def memory_dict(r: Any) -> dict[str, Any]:
    s = r.settings
    out: dict[str, Any] = {
        "schema": MEMORY_SCHEMA,
        "model": r.model,
        "params": r.params,
        "trainable_params": r.trainable_params,
        "mode": "inference" if s.inference else "training",
        "verdict": verdict_lines(r),
        "settings": {k: getattr(s, k) for k in s.__dataclass_fields__},
        "seq_len": r.seq_len,
        "total_bytes": r.components.total,
        "per_gpu_bytes": r.per_gpu.total,
        "peak_bytes": r.peak,
        "peak_phase": r.peak_phase.name if r.phases else "inference",
        # the peak in each metric, and the one asked for (--metric)
        "metric": s.metric,
        "peaks": {**r.peaks, "cuda_context_gpu": r.cuda_context[0]},
        "phases": [{"name": p.name, "when": p.when, "bytes": p.items.total,
                    "components": [{"name": i.name, "bytes": i.total, "formula": i.formula}
                                   for i in p.items.items]} for p in r.phases],
        "timeline": timeline_dict(r.timeline),
        "components": [{"name": i.name, "bytes": i.total, "formula": i.formula,
                        "expr": i.expr, "per_gpu_bytes": r.per_gpu.get(i.name).total}
                       for i in r.components.items],
        "bytes_per_param": [{"name": n, "bytes": b, "why": w} for n, b, w in r.bytes_per_param],
        "notes": list(r.notes),
    }
    if r.__dict__.get("unified"):
        out["unified_memory_bytes"] = r.__dict__["unified"]
    if r.host.rows:
        out["host_bytes"] = r.host.total
        out["host_components"] = [{"name": i.name, "bytes": i.total} for i in r.host.items]
    if not s.inference:
        out["activations"] = {
            "bytes": r.activations.total,
            "korthikanti_per_layer_16bit": r.korthikanti_per_layer,
            "components": [{"name": i.name, "bytes": i.total, "per_layer": i.per_layer,
                            "layers": i.repeat,
                            "bytes_per_layer": i.count if i.per_layer else None,
                            "formula": i.formula, "expr": i.expr,
                            "tensor_parallel_split": i.note == "tp"}
                           for i in r.activations.items]}
    if r.fit is not None:
        f = r.fit
        out["fit"] = {"gpu": f.gpu, "capacity_bytes": f.capacity, "fits": f.fits,
                      "headroom_bytes": f.headroom, "max_batch_size": f.max_batch_size,
                      "max_seq_len": f.max_seq_len, "budget_bytes": f.budget,
                      "prefill_activation_bytes": f.prefill,
                      "changes": [{"flags": c.flags, "bytes": c.used, "fits": c.fits}
                                  for c in f.changes]}
        if f.reserve[1]:
            out["fit"]["reserve"] = {
                "allocator_cache_bytes": list(f.reserve),
                "source": "max_memory_reserved − max_memory_allocated, 2.0-12.1 % of the "
                          "peak over 20 H100 training runs; the CUDA context is not included",
                "in_peak": False}
    return out


def _held(r: Any, per: float) -> str:
    """When the bytes per parameter are really held: the phases' model states
    divided by the parameters, per recipe."""
    s = r.settings
    if not r.phases or s.freeze or s.gpus > 1 or s.optimizer != "adamw":
        return ""
    states = ("weights", "gradients", "optimizer_states", "autocast_copies",
              "optimizer_temporary")

    def held(phase: Any) -> float:
        return sum(i.total for i in phase.items.items if i.name in states) / r.params

    fwd, opt = held(r.phases[0]), held(r.phases[2])
    temp = " (with its temporary)" if any(i.name == "optimizer_temporary"
                                          for i in r.phases[2].items.items) else ""
    if s.mixed and s.recipe in ("megatron", "deepspeed"):
        return f"; held throughout: {fwd:.4g} in forward, {opt:.4g} in the step{temp}"
    never = f", so {per:g} at no single moment" if per not in (fwd, opt) else ""
    return f"; held: {fwd:.4g} in forward (no gradients yet), {opt:.4g} in the optimizer " \
           f"step{temp}{never}"


def _largest_term(r: Any) -> Any:
    """The largest item of what the verdict is about: the peak phase, or the serving total."""
    items = r.peak_phase.items.items if r.phases else r.per_gpu.items
    return max(items, key=lambda i: i.total)


# how a peak in another metric than allocated is said (--metric)
METRIC_LABELS = {"reserved": " (reserved by the caching allocator: {})",
                 "nvidia-smi": " (as nvidia-smi shows it: {})"}


def verdict_lines(r: Any) -> list[str]:
    """The answer first: the peak per GPU and its phase, whether it fits and by how much, and
    when it does not, its largest term and the changes that would make it fit (computed)."""
    s = r.settings
    per = " per GPU" if s.gpus > 1 else ""
    run = (f"{s.precision} AMP" if s.mixed and not s.sixteen_bit_model else
           f"{s.precision} Megatron/DeepSpeed" if s.mixed else f"pure {s.precision}")
    what = (f"LoRA r{s.lora_rank}" + (f" over {s.quant}" if s.quant else "")
            if s.lora_rank else "training")
    shown = METRIC_LABELS[s.metric].format(human_bytes(r.peaks[s.metric])) \
        if s.metric != "allocated" else ""
    head = (f"{r.model} ({s.quant or s.dtype}, batch {s.batch_size} × {r.seq_len:,}): "
            f"{human_bytes(r.peak)}{per} to serve{shown}" if s.inference else
            f"{r.model} ({what}, {run}, {s.attention}, batch {s.batch_size} × {r.seq_len:,}"
            + (f", recipe {s.recipe}" if s.recipe not in ("hf", "amp") else "") + "): "
            f"peak {human_bytes(r.peak)}{per} {r.peak_phase.when}{shown}")
    if r.fit is None:
        return [head + "; --gpu NAME (or a size, --gpu 80GB) says whether it fits"]
    f = r.fit
    budget = f" of a {human_bytes(f.budget)} serving budget" if s.inference else ""
    if f.fits:
        return [head + f": fits {f.gpu} ({human_bytes(f.capacity)}{budget}), headroom "
                f"{human_bytes(f.headroom)}"]
    big = _largest_term(r)
    out = [head + f": does NOT fit {f.gpu} ({human_bytes(f.capacity)}{budget}), "
           f"{human_bytes(-f.headroom)} over; the largest term: {big.name} "
           f"{human_bytes(big.total)}"]
    if f.changes:
        out.append("would fit: " if any(c.fits for c in f.changes) else "closest: " + "")
        out[-1] += "; ".join(f"{c.flags}: {human_bytes(c.used)}"
                             + (", fits" if c.fits else ", still over") for c in f.changes)
    return out


def memory_lines(r: Any) -> list[str]:
    s = r.settings
    lines = []
    if s.inference:
        lines.append(f"inference: {s.quant or s.dtype} weights, batch {s.batch_size}, "
                     f"context {r.seq_len}")
    else:
        recipe = ("Megatron-LM/DeepSpeed: the model in 16-bit, fp32 master weights"
                  if s.sixteen_bit_model else "torch AMP autocast over fp32 weights")
        mode = f"mixed {s.precision} ({recipe})" if s.mixed else f"pure {s.precision}"
        lines.append(f"training: {mode}, {s.optimizer}, batch {s.batch_size} × seq {r.seq_len}, "
                     f"attention {s.attention} on {s.device}, recompute {s.recompute}")
        share = f"{r.trainable_params:,} trainable of {r.params:,} parameters " \
                f"({100 * r.trainable_params / r.params:.2f}%)" if r.params else ""
        if s.lora_rank:
            lines.append(f"LoRA rank {s.lora_rank} on {','.join(s.lora_targets)}"
                         + (f", dropout {s.lora_dropout:g}" if s.lora_dropout else "")
                         + f": {share}; the base frozen in "
                         + (f"{s.quant} (computed in {s.precision})" if s.quant else s.precision)
                         + ", the adapters, their gradients and optimizer states in fp32 "
                           "(PEFT)")
        else:
            per = sum(b for _, b, _ in r.bytes_per_param)
            acc = " + ".join(f"{n} {b:g}" for n, b, _ in r.bytes_per_param)
            lines.append(f"bytes per parameter: {acc} = {per:g}" +
                         (" + Adafactor's factored statistics" if s.optimizer == "adafactor"
                          else "") + " (Hugging Face performance docs)"
                         + _held(r, per))
            if s.freeze:
                lines.append(f"frozen: {', '.join(s.freeze)}: {share}; gradients and optimizer "
                             "states only for what trains")
    if s.gpus > 1:
        lines.append(f"{s.gpus} GPUs: data {s.dp} × tensor {s.tp} × pipeline {s.pp}"
                     + (f" × context {s.cp}" if s.cp > 1 else "")
                     + (f" (experts over {s.ep})" if s.ep > 1 else "") + ", ZeRO "
                     f"stage {s.zero}{', sequence parallel' if s.sequence_parallel else ''}: "
                     f"{human_bytes(r.per_gpu.total)} per GPU")
    if r.host.rows:
        lines.append(f"in CPU memory per GPU (--offload {s.offload}): "
                     + " + ".join(f"{i.name} {human_bytes(i.total)}" for i in r.host.items)
                     + f" = {human_bytes(r.host.total)}")
    if s.metric != "allocated":
        q = r.peaks
        lines.append(f"peak per metric{' per GPU' if s.gpus > 1 else ''}: allocated "
                     f"{human_bytes(q['allocated'])} (torch.cuda.max_memory_allocated); reserved "
                     f"{human_bytes(q['reserved'])} (+4.73 %, the median of 42 H100 runs, 2.0 to "
                     f"13.8 %); nvidia-smi {human_bytes(q['nvidia-smi'])} (+ the CUDA context, "
                     f"{human_bytes(r.cuda_context[1])}, measured on an {r.cuda_context[0]})")
    if r.phases:
        p = r.peak_phase
        lines.append(f"peak of a training step{' per GPU' if s.gpus > 1 else ''}: "
                     f"{human_bytes(p.items.total)} {p.when} ("
                     + " + ".join(f"{i.name} {human_bytes(i.total)}" for i in p.items.items)
                     + "); " + ", ".join(f"{q.name} {human_bytes(q.items.total)}"
                                         for q in r.phases if q is not p))
    if r.fit is not None:
        f = r.fit
        verdict = "fits" if f.fits else "does NOT fit"
        if s.inference:
            lines.append(f"{f.gpu} ({human_bytes(f.capacity)}): serving budget "
                         f"{human_bytes(f.budget)} = {s.gpu_util:g} of it (the runtime's share, "
                         f"vLLM's gpu_memory_utilization) less {human_bytes(f.prefill)} for a "
                         f"{s.prefill_chunk}-token prefill chunk's activations (an estimate)")
        seq = "context" if s.inference else "sequence"
        why0 = (" (even batch 1 is over: " + ("the weights alone take "
                f"{human_bytes(r.per_gpu.get('weights').total)})" if s.inference else
                "the model states and one sequence's activations)")) \
            if f.max_batch_size == 0 else ""
        lines.append(f"{f.gpu} ({human_bytes(f.capacity)}): {verdict}"
                     f"{' (by the peak)' if r.phases else ''}, headroom "
                     f"{human_bytes(f.headroom)}; largest batch that fits: {f.max_batch_size}"
                     f" at {r.seq_len:,}{why0}; longest {seq} at batch {s.batch_size}: "
                     f"{f.max_seq_len:,}" + (" (the model's limit)"
                                             if f.max_seq_len == f.seq_ceiling else
                                             " (not even one token fits)"
                                             if f.max_seq_len == 0 else ""))
        if f.reserve[1]:
            tight = "; the headroom is less than that: it may not fit" \
                if 0 <= f.headroom < f.reserve[1] else ""
            lines.append(f"not in the peak: the caching allocator's cache, "
                         f"{human_bytes(f.reserve[0])} to {human_bytes(f.reserve[1])} (2.0-12.1 % "
                         "of the peak, measured on an H100), and the CUDA context (not "
                         f"measured){tight}")
    if not s.inference:
        b = r.activations

        def per_gpu(i: Any) -> int:  # as the per-GPU total splits them (memory._shard)
            split = s.tp > 1 and (i.note == "tp" or s.sequence_parallel)
            return i.total // s.tp if split else i.total

        top = sorted(b.items, key=lambda i: -per_gpu(i))[:3]
        lines.append("largest saved tensors" + (" per GPU" if s.gpus > 1 else "") + ": "
                     + ", ".join(f"{i.name} {human_bytes(per_gpu(i))}" for i in top))
        lines.append(f"Korthikanti et al. 2022: s·b·h·(34 + 5·a·s/h) = "
                     f"{human_bytes(r.korthikanti_per_layer)} per layer (16-bit, 1-byte masks, "
                     "no implementation copies)")
    lines += [f"note: {n}" for n in r.notes]
    return lines


def memory_rows(r: Any) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    total = r.components.total
    for i in r.components.items:
        rows.append((i.name, i.formula, f"{i.total:,}", human_bytes(i.total), pct(i.total, total),
                     human_bytes(r.per_gpu.get(i.name).total)))
    names = {i.name for i in r.components.items}
    for i in r.per_gpu.items:  # per GPU only: ZeRO-3's gathered parameters
        if i.name not in names:
            rows.append((i.name, i.formula, "", "", "", human_bytes(i.total)))
    rows.append(("total", "", f"{total:,}", human_bytes(total), "100.00%",
                 human_bytes(r.per_gpu.total)))
    return rows


def activation_rows(r: Any) -> list[tuple[str, ...]]:
    b = r.activations
    return [(i.name, i.formula, f"{i.count:,}" if i.per_layer else "", f"{i.total:,}",
             pct(i.total, b.total)) for i in b.items]



def memory_doc(r: Any) -> Doc:
    headers = ("component", "formula", "bytes", "", "share", "per GPU")
    aheaders = ("saved tensor", "formula", "per layer", "bytes", "share")
    # too wide for a terminal: the exact bytes go first (the human size stays beside them),
    # then the share; per GPU, the number compared with a GPU, stays
    columns = [Column(headers[0]), Column(headers[1]), Column(headers[2], True, drop=3),
               Column(headers[3], True, drop=1), Column(headers[4], True, drop=2),
               Column(headers[5], True)]
    blocks: list[Table | Text] = [Table(f"{r.model}: memory", columns, memory_rows(r))]
    if not r.settings.inference:
        acolumns = [Column(aheaders[0]), Column(aheaders[1]), Column(aheaders[2], True, drop=2),
                    Column(aheaders[3], True), Column(aheaders[4], True, drop=1)]
        blocks.append(Table("activations saved for backward (one micro-batch)", acolumns,
                            activation_rows(r), heading=3))
    return Doc(memory_dict(r), [Text(verdict_lines(r))] + blocks + [Text(memory_lines(r))])


def bytes_per_param_rows(rows: list[tuple[str, float, str]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = [(n, f"{b:g}", w) for n, b, w in rows]
    return out + [
        ("total", f"{sum(b for _, b, _ in rows):g}", "")]



def memory_overview_doc(settings: Any, seq_len: int, rows: list[tuple[str, float, str]],
                        reports: list[Any]) -> Doc:
    """`tcalc memory` without MODEL: the bytes per parameter, then a row per preset, each at
    ``seq_len`` or the length of its learned position table where that is shorter."""
    data = {"schema": "tcalc.memory-overview/1",
            "bytes_per_param": [{"name": n, "bytes": b, "why": w} for n, b, w in rows],
            "models": [{"model": r.model, "params": r.params,
                        "total_bytes": r.components.total, "peak_bytes": r.peak,
                        "components": [{"name": i.name, "bytes": i.total}
                                       for i in r.components.items]}
                       for r in reports]}
    names = [i.name for i in reports[0].components.items]
    table = [(r.model, f"{r.params:,}", *(human_bytes(i.total) for i in r.components.items),
              human_bytes(r.components.total), human_bytes(r.peak)) for r in reports]
    return Doc(data, [
        Table("bytes per parameter", _columns(("component", "bytes/param", "why"), (1,)),
              bytes_per_param_rows(rows)),
        # too wide for a terminal: the total stays, the components go first
        Table(f"every preset (batch {settings.batch_size}, seq {seq_len} or the model's limit)",
              [Column("model"), Column("params", True)]
              + [Column(n, True, drop=len(names) - k + 1) for k, n in enumerate(names)]
              + [Column("sum", True, drop=1), Column("peak", True)], table),
    ])


def gpus_doc(gpus: Sequence[Any]) -> Doc:
    data = [{"name": g.name, "memory_bytes": g.memory_bytes, "bandwidth": g.bandwidth,
             "peak_flops": g.peak_flops, "source": g.source} for g in gpus]
    rows = [(g.name, f"{g.memory_bytes / 2**30:g} GiB", f"{g.bandwidth / 1e9:,.0f} GB/s",
             ", ".join(f"{k} {v / 1e12:g}" for k, v in g.peak_flops.items()), g.source)
            for g in gpus]
    headers = ("gpu", "memory", "bandwidth", "peak TFLOP/s (dense)", "source")
    columns = [Column(headers[0]), Column(headers[1]), Column(headers[2], drop=1),
               Column(headers[3]), Column(headers[4], drop=2)]  # narrow: the source first
    return Doc(data, [Table(f"{len(rows)} GPU presets", columns, rows)])


def presets_doc(rows: list[tuple[str, str, int, int]]) -> Doc:
    """rows: (name, description, total, active) per shipped preset."""
    data = [{"name": n, "description": d, "total_params": t, "active_params": a}
            for n, d, t, a in rows]
    table = [(n, d, f"{t:,}", human(t)) for n, d, t, _ in rows]
    return Doc(data, [Table(f"{len(rows)} presets",
                            _columns(("preset", "description", "params", ""), (2, 3)), table)])


# -- explain, compare, sweep ---------------------------------------------------------------

def explain_doc(model: str, topic: str, sections: list[Any]) -> Doc:
    data = {"schema": "tcalc.explain/1", "model": model, "topic": topic,
            "sections": [{"title": s.title, "steps": [
                {"label": st.label, "formula": st.formula, "expr": st.expr,
                 "value": st.value, "unit": st.unit, "text": st.text,
                 "line": st.render()} for st in s.steps]} for s in sections]}
    return Doc(data, [Text([], "title", f"{model}: {topic}")] + [
        Text([st.render() for st in s.steps], "steps", s.title) for s in sections])


def compare_dict(models: list[str], rows: Sequence[Any]) -> dict[str, Any]:
    """rows: compare.Metric (name, unit, values)."""
    return {"schema": "tcalc.compare/1", "models": models,
            "rows": [{"metric": r.name, "unit": r.unit, "values": r.values,
                      "diff_vs_first": [x - r.values[0] for x in r.values]} for r in rows]}


def _fmt_value(v: float, unit: str) -> str:
    if unit == "bytes":
        return human_bytes(v)
    if unit == "fits":
        return "yes" if v else "no"
    if unit == "FLOPs":
        return sci(v)
    return f"{int(v):,}"


def _fmt_diff(v: float, first: float, unit: str) -> str:
    d = v - first
    rel = f" ({100 * d / first:+.1f}%)" if first else ""
    if unit == "fits":
        return ""
    if unit == "bytes":
        return ("+" if d >= 0 else "-") + human_bytes(abs(d)) + rel
    if unit == "FLOPs":
        return f"{d:+.3e}{rel}"
    return f"{int(d):+,}{rel}"



def compare_doc(models: list[str], rows: Sequence[Any]) -> Doc:
    headers = ("metric", models[0], *(f"{m} (Δ vs {models[0]})" for m in models[1:]))
    table: list[Row] = [
        (r.name, _fmt_value(r.values[0], r.unit),
         *(Pair(_fmt_value(x, r.unit), _fmt_diff(x, r.values[0], r.unit)) for x in r.values[1:]))
        for r in rows]
    return Doc(compare_dict(models, rows),
               [Table("compare", _columns(headers, range(1, len(headers))), table)])


def sweep_doc(model: str, gpu: str | None, batches: list[int], seqs: list[int],
              cells: dict[tuple[int, int], Any]) -> Doc:
    """cells[(B, T)] = MemoryReport; fit marks need a GPU."""
    data = {"schema": "tcalc.sweep/1", "model": model, "gpu": gpu, "cells": [
        {"batch_size": b, "seq_len": t, "per_gpu_bytes": r.per_gpu.total,
         "peak_bytes": r.peak,
         "fits": None if r.fit is None else r.fit.fits,
         "components": [{"name": i.name, "bytes": i.total} for i in r.per_gpu.items]}
        for (b, t), r in cells.items()]}

    def mark(r: Any) -> Cell:
        text = human_bytes(r.peak)
        if r.fit is None:
            return text
        return Mark(f"{text} {'✓' if r.fit.fits else '✗'}", r.fit.fits)

    headers = ("batch \\ seq", *(str(t) for t in seqs))
    largest = cells[(batches[-1], seqs[-1])]
    kind = "serving memory" if largest.settings.inference else "peak of a training step"
    title = (f"{model}: {kind} per GPU" + (f" on {gpu} (✓ fits, ✗ does not)" if gpu else ""))
    rows = [(str(b), *(mark(cells[(b, t)]) for t in seqs)) for b in batches]
    return Doc(data, [
        # too wide for a terminal: the grid keeps its first and last context longest
        Table(title, [Column(headers[0])] + [
            Column(h, True, drop=0 if k in (0, len(seqs) - 1) else k)
            for k, h in enumerate(headers[1:])], rows),
        Text(bar_chart(largest), "chart",
             f"where the memory goes at batch {batches[-1]}, seq {seqs[-1]}:"),
    ])


def bar_chart(report: Any, columns: int = 80) -> list[str]:
    """One bar per component, the largest activation tensors named; fits ``columns``."""
    parts = [(i.name, i.total) for i in report.per_gpu.items if i.total]
    if not report.settings.inference and report.activations.items:
        top = sorted(report.activations.items, key=lambda i: -i.total)[:3]
        parts += [(f"  of which {i.name}", i.total) for i in top]
    peak = max((v for _, v in parts), default=1)
    label = max((len(n) for n, _ in parts), default=0)
    width = max(10, columns - label - 14)  # room for " 123.45 GiB"
    return [f"{n:<{label}} {'█' * max(1, round(width * v / peak)):<{width}} {human_bytes(v)}"
            for n, v in parts]
