"""Regenerate the generated sections of README.md and docs/*.md from the code: the preset table
from the shipped presets, the preset format from ModelSpec's field declarations, and the JSON
examples from what the commands emit. tests/test_readme.py asserts every file equals this
output, so a changed preset, field or JSON key fails the suite until this is re-run.

    python tools/readme.py           # rewrite README.md and docs/*.md in place
    python tools/readme.py --check   # exit 1 if any of them is out of date

A section is the text between ``<!-- generated: NAME -->`` and ``<!-- end: NAME -->``; it may
live in README.md or in any docs/*.md file, and each named in SECTIONS must be in exactly one.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _class_counted(source: str) -> str:
    """The class a preset's reference total came from: the first name in its source."""
    match = re.match(r"[A-Za-z_][A-Za-z0-9_.]*", source or "")
    return f"`{match.group(0)}`" if match else "(no reference)"


def presets_table() -> str:
    from transformer_calc import count_params, load_model
    from transformer_calc.presets import preset_names

    lines = ["| preset | what it is | reference class | total parameters |", "|---|---|---|---:|"]
    for name in preset_names():
        spec = load_model(name)
        b = count_params(spec)
        total = f"{b.total:,}"
        if b.active_total != b.total:
            total += f" ({b.active_total:,} active)"
        mtp = b.extra.get("mtp_params")
        if mtp:
            total += f"; MTP apart: {mtp:,}"
        lines.append(f"| {name} | {spec.description} | "
                     f"{_class_counted(spec.expected_params_source)} | {total} |")
    return "\n".join(lines)


# Required fields: shown with GPT-2's value (they have no default).
_EXAMPLE = "gpt2"


def preset_format() -> str:
    from transformer_calc.presets import BIAS_KEYS, REQUIRED, load_model
    from transformer_calc.spec import ModelSpec

    gpt2 = load_model(_EXAMPLE)
    lines = ["```yaml"]
    rows: list[tuple[str, str]] = []
    bias_done = False
    for f in dataclasses.fields(ModelSpec):
        meta = f.metadata
        if f.name.startswith("bias_"):
            if not bias_done:
                rows.append(("bias: true", "a bias on every projection, or per projection: "
                             "{" + ", ".join(BIAS_KEYS) + "}"))
                bias_done = True
            continue
        required = f.name in REQUIRED
        value = getattr(gpt2, f.name) if required else f.default
        text = json.dumps(value) if isinstance(value, str) else (
            "null" if value is None else str(value).lower() if isinstance(value, bool)
            else str(value))
        comment = meta["help"]
        if meta.get("choices"):
            comment += " [" + " | ".join(meta["choices"]) + "]"
        if required:
            comment = f"required ({_EXAMPLE}: shown); " + comment
        elif f.name == "n_layers":
            comment += "; required unless the model is encoder-decoder"
        rows.append((f"{f.name}: {text}", comment))
    width = max(len(k) for k, _ in rows) + 2
    lines += [f"{k:<{width}}# {c}" for k, c in rows]
    lines.append("```")
    return "\n".join(lines)


def _json(args: list[str]) -> dict:
    from typer.testing import CliRunner

    from transformer_calc.cli import app

    result = CliRunner().invoke(app, args, env={"COLUMNS": "100"})
    if result.exit_code:
        raise SystemExit(f"tcalc {' '.join(args)}: exit {result.exit_code}: {result.stderr}")
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _shape(value: object, depth: int = 0) -> object:
    """A JSON value with lists cut to their first element, for a readable example."""
    if isinstance(value, dict):
        return {k: _shape(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v, depth + 1) for v in value[:1]] + (["..."] if len(value) > 1 else [])
    return value


def json_example(*args: str) -> Callable[[], str]:
    def render() -> str:
        data = _shape(_json([*args, "--format", "json"]))
        return "```json\n" + json.dumps(data, indent=2, ensure_ascii=False) + "\n```"
    return render


SECTIONS: dict[str, Callable[[], str]] = {
    "presets": presets_table,
    "preset-format": preset_format,
    "params-json": json_example("params", "gpt2"),
    "memory-json": json_example("memory", "gpt2", "--mixed", "--batch-size", "8",
                                "--gpu", "A100-80GB"),
    "flops-json": json_example("flops", "gpt2", "--gpu", "A100-80GB", "--gpus", "8",
                               "--tokens", "10B"),
}


MARKER = re.compile(r"^<!-- generated: ([\w.-]+) -->$", re.M)  # a line of its own


def files() -> list[Path]:
    """The files that may hold generated sections: README.md, then docs/*.md by name."""
    return [README, *sorted(DOCS.glob("*.md"))]


def sections_in(text: str) -> list[str]:
    """The names of the generated sections a text holds, in order."""
    return MARKER.findall(text)


def render(text: str, where: str = "README.md") -> str:
    """The text with each generated section it holds rewritten from the code."""
    for name in sections_in(text):
        if name not in SECTIONS:
            raise SystemExit(f"{where}: unknown generated section '{name}'")
        pattern = re.compile(rf"(<!-- generated: {re.escape(name)} -->\n).*?(<!-- end: "
                             rf"{re.escape(name)} -->)", re.S)
        match = pattern.search(text)
        if match is None:
            raise SystemExit(f"{where}: section '{name}' has no <!-- end: {name} -->")
        text = (text[:match.start()] + match.group(1) + SECTIONS[name]() + "\n" + match.group(2)
                + text[match.end():])
    return text


def locations() -> dict[str, list[Path]]:
    """Where each section of SECTIONS is: every file holding it."""
    found: dict[str, list[Path]] = {name: [] for name in SECTIONS}
    for path in files():
        for name in sections_in(path.read_text(encoding="utf-8")):
            found.setdefault(name, []).append(path)
    return found


def render_all() -> dict[Path, tuple[str, str]]:
    """Each file's current text and the text this tool writes; every section in one file."""
    for name, paths in locations().items():
        if len(paths) != 1:
            where = ", ".join(str(p.relative_to(ROOT)) for p in paths) or "no file"
            raise SystemExit(f"section '{name}' must be in exactly one file (found: {where})")
    out: dict[Path, tuple[str, str]] = {}
    for path in files():
        current = path.read_text(encoding="utf-8")
        out[path] = (current, render(current, str(path.relative_to(ROOT))))
    return out


if __name__ == "__main__":
    results = render_all()
    stale = [p for p, (current, new) in results.items() if new != current]
    if "--check" in sys.argv[1:]:
        sys.exit(0 if not stale else "out of date: " + ", ".join(
            str(p.relative_to(ROOT)) for p in stale) + ": python tools/readme.py")
    for path in stale:
        path.write_text(results[path][1], encoding="utf-8")
