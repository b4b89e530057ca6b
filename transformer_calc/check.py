"""Validate model files for CI: schema, types, shapes and expected_params. Pure apart from
reading the files it is given; renders nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from transformer_calc.errors import PresetError, SpecError, TcalcError
from transformer_calc.params import count_params
from transformer_calc.presets import SUFFIXES, load_file, preset_dir


@dataclass(frozen=True)
class CheckResult:
    path: str
    ok: bool
    message: str  # what is wrong, without the path; "" when ok
    model: str | None = None
    total: int | None = None
    expected: int | None = None
    line: int | None = None  # 1-based, where known
    key: str | None = None


def collect(paths: list[str]) -> list[Path]:
    """The model files named, folders searched recursively. Raises PresetError (usage)."""
    if not paths:
        return sorted(preset_dir().glob("*.yaml"))
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.suffix.lower() in SUFFIXES
                           and f.is_file() and not _side_file(f))
            if not found:
                raise PresetError(f"{p}: no .yaml, .yml or .json files in this folder")
            files += found
        elif p.exists():
            files.append(p)
        else:
            raise PresetError(f"{p}: no such file or folder")
    return files


# The JSON files beside a model's config.json in a Hugging Face model folder: not model configs
HF_SIDE_FILES = frozenset("""generation_config.json tokenizer_config.json tokenizer.json
    special_tokens_map.json preprocessor_config.json processor_config.json adapter_config.json
    chat_template.json vocab.json added_tokens.json trainer_state.json
    video_preprocessor_config.json feature_extractor_config.json quant_config.json
    quantize_config.json""".split())


def _side_file(path: Path) -> bool:
    name = path.name.lower()
    return name in HF_SIDE_FILES or name.endswith(".index.json")


def display(path: Path) -> str:
    """A path as the user would write it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class Budget:
    """A memory budget every model must meet: the peak of ``settings``' run per GPU at most
    ``limit`` bytes (``name``: the GPU or size it was given as)."""

    settings: object  # memory.Settings (imported lazily: check without a budget needs none)
    limit: int
    name: str


def check_file(path: Path, budget: Budget | None = None) -> CheckResult:
    where = display(path)
    try:
        spec = load_file(path, shown=where)
    except TcalcError as e:
        message = str(e).removeprefix(f"{where}: ")
        key = e.key if isinstance(e, SpecError) else None
        line = e.line if e.line is not None else _key_line(path, key)
        return CheckResult(where, False, message, line=line, key=key)
    total = count_params(spec).total
    expected = spec.expected_params
    if expected is not None and expected != total:
        return CheckResult(
            where, False,
            f"expected_params is {expected:,} but the architecture has {total:,} "
            f"(difference {total - expected:+,})",
            model=spec.name, total=total, expected=expected,
            line=_key_line(path, "expected_params"), key="expected_params")
    if budget is not None:
        over = _over_budget(spec, budget)
        if over:
            return CheckResult(where, False, over, model=spec.name, total=total,
                               expected=expected)
    return CheckResult(where, True, "", model=spec.name, total=total, expected=expected)


def _over_budget(spec: object, budget: Budget) -> str:
    """Why the model's run does not meet the budget, or "" when it does."""
    import dataclasses

    from transformer_calc.memory import memory_report
    from transformer_calc.render.units import human_bytes

    s = budget.settings
    if not s.seq_len:  # type: ignore[attr-defined]
        s = dataclasses.replace(s, seq_len=min(spec.default_seq_len, 4096))  # type: ignore
    try:
        r = memory_report(spec, s)  # type: ignore[arg-type]
    except TcalcError as e:
        return f"--max-memory: {e}"
    if r.peak <= budget.limit:
        return ""
    phase = r.peak_phase
    when = f"peak {phase.when}" if phase is not None else "to serve"
    return (f"{human_bytes(r.peak)} per GPU {when} ({r.settings.precision}"
            f"{' AMP' if r.settings.mixed else ''}, batch {r.settings.batch_size} × "
            f"{r.seq_len:,}), over --max-memory {budget.name} ({human_bytes(budget.limit)})")


def check(paths: list[str], budget: Budget | None = None) -> list[CheckResult]:
    return [check_file(f, budget) for f in collect(paths)]


def _key_line(path: Path, key: str | None) -> int | None:
    """The line where a top-level key is written (YAML `key:` or JSON `"key":`)."""
    if not key:
        return None
    name = re.escape(key.split(".")[0])
    pattern = re.compile(rf'^\s*"?{name}"?\s*:')
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for n, text in enumerate(lines, 1):
        if pattern.match(text):
            return n
    return None
