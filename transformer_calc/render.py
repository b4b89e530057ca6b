"""Render a Breakdown as a rich table, JSON or markdown. The only module that imports rich.

Human units (124.4M) exist only here; JSON carries exact integers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from transformer_calc.breakdown import Breakdown, Item
from transformer_calc.spec import ARCH_FIELDS, ModelSpec

PARAMS_SCHEMA = "tcalc.params/1"


def human(n: float, unit: str = "") -> str:
    """124439808 -> '124.4M'; 1557611200 -> '1.56B'."""
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            v = n / div
            return f"{v:.3g}{suffix}{unit}" if v < 100 else f"{v:.1f}{suffix}{unit}"
    return f"{n:g}{unit}"


def human_bytes(n: float) -> str:
    """Binary units, as memory is sold and reported: 16,106,127,360 -> '15.00 GiB'."""
    for div, suffix in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(n) >= div:
            return f"{n / div:.2f} {suffix}"
    return f"{n:g} B"


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.2f}%" if whole else "-"


def error_pct(estimate: int, exact: int) -> float:
    return 100.0 * (estimate - exact) / exact if exact else 0.0


def spec_dict(spec: ModelSpec) -> dict[str, Any]:
    return {f.name: getattr(spec, f.name) for f in ARCH_FIELDS}


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


def _section(item: Item) -> str:
    if item.stack:
        return f"{item.stack} layer (× {item.repeat})"
    if ".embed." in f".{item.name}":
        return "embeddings"
    if item.name.startswith("head."):
        return "heads"
    return "final norms" if item.name.endswith("final_norm") else "other"


def _short(item: Item) -> str:
    """The name without the stack prefix its section header already shows."""
    return item.name[len(item.stack) + 1:] if item.stack else item.name


def params_rows(b: Breakdown, *, exprs: bool = False) -> list[tuple[str, ...]]:
    """(component, formula, per layer, params, share[, active]) rows, subtotals included.

    Section headers are rows of the form ("[title]", "", ...). With ``exprs`` the formula
    cell also shows the numbers substituted (markdown has the room).
    """
    moe = b.active_total != b.total
    rows: list[tuple[str, ...]] = []
    total = b.total
    current = None
    for n, item in enumerate(b.items):
        title = _section(item)
        if title != current:
            current = title
            rows.append((f"[{title}]",) + ("",) * (4 + moe))
        formula = item.formula
        if exprs and item.expr and item.expr != item.formula and item.count:
            formula = f"{item.formula} = {item.expr}"
        row: tuple[str, ...] = (_short(item), formula, f"{item.count:,}" if item.per_layer else "",
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


def render_params(b: Breakdown, spec: ModelSpec, fmt: str,
                  ckpt: Any = None) -> str | None:
    extra = checkpoint_dict(ckpt, b.total) if ckpt is not None else None
    if fmt == "json":
        return dumps(params_dict(b, spec) | ({"checkpoint": extra} if extra else {}))
    if fmt == "markdown":
        return params_markdown(b, spec) + ("".join(f"- {line}\n" for line in
                                                   checkpoint_lines(extra)) if extra else "")
    print_table(f"{spec.name}: trainable parameters", params_headers(b), params_rows(b),
                params_summary(b, spec) + (checkpoint_lines(extra) if extra else []),
                right=(2, 3, 4, 5))
    return None


def checkpoint_dict(ckpt: Any, architecture: int) -> dict[str, Any]:
    """JSON "checkpoint" (issue 17): what the folder's safetensors headers hold, against the
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


def params_markdown(b: Breakdown, spec: ModelSpec) -> str:
    lines = [f"## {spec.name}: trainable parameters", ""]
    lines.append(md_table(params_headers(b),
                          [(f"**{r[0][1:-1]}**", *r[1:]) if r[0].startswith("[") else r
                           for r in params_rows(b, exprs=True)]))
    lines.append("")
    lines += [f"- {s}" for s in params_summary(b, spec)]
    return "\n".join(lines) + "\n"


# -- shared helpers ------------------------------------------------------------------------

def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)


def _console() -> Any:
    """rich's Console, but a closed stdout raises BrokenPipeError (rich would exit 1 silently),
    so that the CLI says why in one line (issue 16)."""
    from rich.console import Console

    class Quiet(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return Quiet()


def _plain(text: str) -> str:
    """A cell or line from the user, made safe for a terminal (no control characters)."""
    from transformer_calc.errors import printable

    return printable(text, one_line=True)


def _markup_safe(text: str) -> str:
    """For places rich parses as markup (table titles): escaped, so '[/bold]' is text."""
    from rich.markup import escape

    return escape(_plain(text))


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def esc(s: str) -> str:  # a cell stays one cell: no pipe, no newline
        return _plain(s).replace("|", "\\|")
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]],
                footer: Sequence[str] = (), right: tuple[int, ...] = ()) -> None:
    from rich.table import Table

    table = Table(title=_markup_safe(title), title_justify="left")
    for n, h in enumerate(headers):
        # numbers never fold across lines (issue 16): the text columns wrap instead
        table.add_column(h, justify="right" if n in right else "left",
                         overflow="fold", no_wrap=n in right, min_width=len(h) if n in right
                         else None)
    for r in rows:
        if r[0].startswith("[") and r[0].endswith("]") and not any(r[1:]):
            table.add_row(f"[bold]{r[0][1:-1]}[/bold]", *r[1:], end_section=False)
        else:
            table.add_row(*(_plain(c).replace("[", "\\[") for c in r))
    console = _console()
    console.print(table)
    for line in footer:
        console.print(_plain(line), markup=False, highlight=False)


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
            lines.append(f"ok    {r.path}: {r.model}, {r.total:,} parameters{ref}")
        else:
            at = f" (line {r.line})" if r.line else ""
            lines.append(f"FAIL  {r.path}{at}: {r.message}")
    return lines + [check_summary(results)]


def _gh_escape(text: str, prop: bool = False) -> str:
    # GitHub Actions workflow commands: escape %, CR, LF (and ':' ',' in properties).
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def github_annotations(results: list[Any]) -> list[str]:
    out = []
    for r in results:
        if not r.ok:
            loc = f"file={_gh_escape(r.path, True)}"
            if r.line:
                loc += f",line={r.line}"
            out.append(f"::error {loc},title=tcalc check::{_gh_escape(r.message)}")
    return out


def render_check(results: list[Any], fmt: str) -> str:
    if fmt == "json":
        return dumps({
            "schema": CHECK_SCHEMA,
            "ok": sum(r.ok for r in results),
            "failed": sum(not r.ok for r in results),
            "files": [{"path": r.path, "ok": r.ok, "model": r.model, "total_params": r.total,
                       "expected_params": r.expected, "message": r.message, "line": r.line,
                       "key": r.key} for r in results],
        })
    if fmt == "markdown":
        rows = [(r.path, "ok" if r.ok else "FAIL", f"{r.total:,}" if r.total is not None else "",
                 r.message) for r in results]
        return md_table(("file", "result", "params", "message"), rows) + "\n\n" + (
            check_summary(results) + "\n")
    return "\n".join(check_lines(results)) + "\n"


# -- flops ---------------------------------------------------------------------------------

FLOPS_SCHEMA = "tcalc.flops/1"


def sci(x: float) -> str:
    return f"{x:.3e}"


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


def flops_rows(r: Any) -> list[tuple[str, ...]]:
    b = r.forward
    rows: list[tuple[str, ...]] = []
    current = None
    for n, item in enumerate(b.items):
        title = _section(item).replace("layer (×", "layer, forward (×")
        if title != current:
            current = title
            rows.append((f"[{title}]", "", "", "", ""))
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


def render_flops(r: Any, fmt: str) -> str | None:
    if fmt == "json":
        return dumps(flops_dict(r))
    headers = ("component", "formula", "per layer", "FLOPs/token", "share")
    if fmt == "markdown":
        rows = [(f"**{x[0][1:-1]}**", *x[1:]) if x[0].startswith("[") else x
                for x in flops_rows(r)]
        return (f"## {r.forward.model}: FLOPs per token\n\n" + md_table(headers, rows) + "\n\n"
                + "\n".join(f"- {s}" for s in flops_summary(r)) + "\n")
    print_table(f"{r.forward.model}: forward FLOPs per token (T = {r.seq_len})", headers,
                flops_rows(r), flops_summary(r), right=(2, 3, 4))
    return None


# -- memory --------------------------------------------------------------------------------

MEMORY_SCHEMA = "tcalc.memory/1"


def memory_dict(r: Any) -> dict[str, Any]:
    s = r.settings
    out: dict[str, Any] = {
        "schema": MEMORY_SCHEMA,
        "model": r.model,
        "params": r.params,
        "trainable_params": r.trainable_params,
        "mode": "inference" if s.inference else "training",
        "settings": {k: getattr(s, k) for k in s.__dataclass_fields__},
        "seq_len": r.seq_len,
        "total_bytes": r.components.total,
        "per_gpu_bytes": r.per_gpu.total,
        "peak_bytes": r.peak,
        "peak_phase": r.peak_phase.name if r.phases else "inference",
        "phases": [{"name": p.name, "when": p.when, "bytes": p.items.total,
                    "components": [{"name": i.name, "bytes": i.total, "formula": i.formula}
                                   for i in p.items.items]} for p in r.phases],
        "components": [{"name": i.name, "bytes": i.total, "formula": i.formula,
                        "expr": i.expr, "per_gpu_bytes": r.per_gpu.get(i.name).total}
                       for i in r.components.items],
        "bytes_per_param": [{"name": n, "bytes": b, "why": w} for n, b, w in r.bytes_per_param],
        "notes": list(r.notes),
    }
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
                      "prefill_activation_bytes": f.prefill}
    return out


def memory_lines(r: Any) -> list[str]:
    s = r.settings
    lines = []
    if s.inference:
        lines.append(f"inference: {s.dtype} weights, batch {s.batch_size}, context {r.seq_len}")
    else:
        mode = f"mixed {s.precision}" if s.mixed else f"pure {s.precision}"
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
                          else "") + " (Hugging Face performance docs)")
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
        lines.append(f"{f.gpu} ({human_bytes(f.capacity)}): {verdict}"
                     f"{' (by the peak)' if r.phases else ''}, headroom "
                     f"{human_bytes(f.headroom)}; largest batch that fits: {f.max_batch_size}"
                     f" at {r.seq_len:,}; longest {seq} at batch {s.batch_size}: "
                     f"{f.max_seq_len:,}" + (" (the model's limit)"
                                             if f.max_seq_len == f.seq_ceiling else ""))
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


def render_memory(r: Any, fmt: str) -> str | None:
    if fmt == "json":
        return dumps(memory_dict(r))
    headers = ("component", "formula", "bytes", "", "share", "per GPU")
    aheaders = ("saved tensor", "formula", "per layer", "bytes", "share")
    if fmt == "markdown":
        text = f"## {r.model}: memory\n\n" + md_table(headers, memory_rows(r)) + "\n\n"
        if not r.settings.inference:
            text += "### activations\n\n" + md_table(aheaders, activation_rows(r)) + "\n\n"
        return text + "\n".join(f"- {x}" for x in memory_lines(r)) + "\n"
    print_table(f"{r.model}: memory", headers, memory_rows(r), right=(2, 3, 4, 5))
    if not r.settings.inference:
        print_table("activations saved for backward (one micro-batch)", aheaders,
                    activation_rows(r), right=(2, 3, 4))

    console = _console()
    for line in memory_lines(r):
        console.print(_plain(line), markup=False, highlight=False)
    return None


def bytes_per_param_rows(rows: list[tuple[str, float, str]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = [(n, f"{b:g}", w) for n, b, w in rows]
    return out + [
        ("total", f"{sum(b for _, b, _ in rows):g}", "")]


# -- explain, compare, sweep ---------------------------------------------------------------

def render_explain(model: str, topic: str, sections: list[Any], fmt: str) -> str:
    if fmt == "json":
        return dumps({"schema": "tcalc.explain/1", "model": model, "topic": topic,
                      "sections": [{"title": s.title, "steps": [
                          {"label": st.label, "formula": st.formula, "expr": st.expr,
                           "value": st.value, "unit": st.unit, "text": st.text,
                           "line": st.render()} for st in s.steps]} for s in sections]})
    md = fmt == "markdown"
    out = [f"{'# ' if md else ''}{model}: {topic}", ""]
    for s in sections:
        out.append(f"## {s.title}" if md else s.title)
        out += [f"- {st.render()}" if md else f"  {st.render()}" for st in s.steps]
        out.append("")
    return "\n".join(out)


def compare_dict(models: list[str], rows: list[tuple[str, str, list[float]]]) -> dict[str, Any]:
    return {"schema": "tcalc.compare/1", "models": models,
            "rows": [{"metric": m, "unit": u, "values": v,
                      "diff_vs_first": [x - v[0] for x in v]} for m, u, v in rows]}


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


def render_compare(models: list[str], rows: list[tuple[str, str, list[float]]],
                   fmt: str) -> str | None:
    if fmt == "json":
        return dumps(compare_dict(models, rows))
    headers = ("metric", models[0], *(f"{m} (Δ vs {models[0]})" for m in models[1:]))
    table = [(m, _fmt_value(v[0], u), *(f"{_fmt_value(x, u)}  {_fmt_diff(x, v[0], u)}"
                                        for x in v[1:])) for m, u, v in rows]
    if fmt == "markdown":
        return md_table(headers, table) + "\n"
    print_table("compare", headers, table, right=tuple(range(1, len(headers))))
    return None


def render_sweep(model: str, gpu: str | None, batches: list[int], seqs: list[int],
                 cells: dict[tuple[int, int], Any], fmt: str) -> str | None:
    """cells[(B, T)] = MemoryReport; fit marks need a GPU."""
    if fmt == "json":
        return dumps({"schema": "tcalc.sweep/1", "model": model, "gpu": gpu, "cells": [
            {"batch_size": b, "seq_len": t, "per_gpu_bytes": r.per_gpu.total,
             "peak_bytes": r.peak,
             "fits": None if r.fit is None else r.fit.fits,
             "components": [{"name": i.name, "bytes": i.total} for i in r.per_gpu.items]}
            for (b, t), r in cells.items()]})

    def mark(r: Any, rich: bool) -> str:
        text = human_bytes(r.peak)
        if r.fit is None:
            return text
        if not rich:
            return f"{text} {'✓' if r.fit.fits else '✗'}"
        return f"[green]{text} ✓[/green]" if r.fit.fits else f"[red]{text} ✗[/red]"

    headers = ("batch \\ seq", *(str(t) for t in seqs))
    largest = cells[(batches[-1], seqs[-1])]
    bars = bar_chart(largest)
    kind = "serving memory" if largest.settings.inference else "peak of a training step"
    title = (f"{model}: {kind} per GPU" + (f" on {gpu} (✓ fits, ✗ does not)" if gpu else ""))
    if fmt == "markdown":
        rows = [(str(b), *(mark(cells[(b, t)], False) for t in seqs)) for b in batches]
        return (f"## {title}\n\n" + md_table(headers, rows) + "\n\n"
                + f"where the memory goes at batch {batches[-1]}, seq {seqs[-1]}:\n\n```\n"
                + "\n".join(bars) + "\n```\n")
    from rich.table import Table

    table = Table(title=_markup_safe(title), title_justify="left")
    for n, h in enumerate(headers):
        table.add_column(h, justify="left" if n == 0 else "right")
    for b in batches:
        table.add_row(str(b), *(mark(cells[(b, t)], True) for t in seqs))
    console = _console()
    console.print(table)
    console.print(f"where the memory goes at batch {batches[-1]}, seq {seqs[-1]}:",
                  markup=False)
    for line in bars:
        console.print(_plain(line), markup=False, highlight=False)
    return None


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
