"""Validate model files for CI: schema, types, shapes, expected_params, and a model folder's
checkpoint against its config. Pure apart from reading the files it is given; renders nothing.

In a folder, only files that look like models are checked: presets (YAML with tcalc's
architecture keys at the top level), config.json files (or JSON naming a model_type or
architectures), and .gguf files; a repository's workflows, package.json or pre-commit config
are not models. Files git ignores (.gitignore, .git/info/exclude) are skipped, and so is
anything --exclude names. A file or Hub id named on the command line is always checked.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

from transformer_calc.errors import PresetError, SpecError, TcalcError
from transformer_calc.params import count_params
from transformer_calc.presets import MAX_FILE_BYTES, SUFFIXES, load_file, preset_dir


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
    checkpoint: str = ""  # what the model folder's safetensors headers say, "" when none


# The JSON files beside a model's config.json in a Hugging Face model folder: not model configs
HF_SIDE_FILES = frozenset("""generation_config.json tokenizer_config.json tokenizer.json
    special_tokens_map.json preprocessor_config.json processor_config.json adapter_config.json
    chat_template.json vocab.json added_tokens.json trainer_state.json
    video_preprocessor_config.json feature_extractor_config.json quant_config.json
    quantize_config.json""".split())
# a preset: one of tcalc's required architecture keys at the top level of a YAML mapping
_PRESET_KEY = re.compile(r"^[\"']?(vocab_size|d_model|n_heads|d_ff|n_layers|n_encoder_layers|"
                         r"n_decoder_layers)[\"']?[ \t]*:", re.MULTILINE)
# a config.json: a model_type or architectures key (then looked for at the top level)
_CONFIG_KEY = re.compile(r'"(model_type|architectures)"\s*:')


def _side_file(path: Path) -> bool:
    name = path.name.lower()
    return name in HF_SIDE_FILES or name.endswith(".index.json")


def looks_like_model(path: Path) -> bool:
    """A file a folder search checks: a .gguf, a config.json, JSON with a model_type or
    architectures key, or YAML with a preset's architecture keys (read at most 1 MiB;
    larger text files are not model files)."""
    from transformer_calc.files import lfs_pointer, read_bounded

    name = path.name.lower()
    if name.endswith(".gguf"):
        return not lfs_pointer(path)  # (a clone without its LFS files: nothing to check)
    if name == "config.json":
        return True
    if _side_file(path) or not name.endswith((".yaml", ".yml", ".json")):
        return False
    try:
        text = read_bounded(path, str(path), "a model file", MAX_FILE_BYTES).decode(
            "utf-8", "replace")
    except TcalcError:
        return False  # (too large, not a regular file: not a model file)
    if not name.endswith(".json"):
        return _PRESET_KEY.search(text) is not None
    if _CONFIG_KEY.search(text) is None:
        return False
    import json

    try:  # the key at the top level, not in some list of cases or settings
        data = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and ("model_type" in data or "architectures" in data)


def _excluded(relative: str, patterns: list[str]) -> bool:
    """--exclude: a glob matching the path relative to the folder searched, or any one of
    its parts (``*.json``, ``node_modules``, ``tests/data/*``)."""
    parts = relative.split("/")
    return any(fnmatch.fnmatchcase(relative, p) or any(fnmatch.fnmatchcase(q, p) for q in parts)
               for p in patterns)


def _git_files(folder: Path) -> set[str] | None:
    """The files under ``folder`` git does not ignore (tracked, or untracked and not ignored
    by .gitignore or .git/info/exclude), relative to it; None outside a git work tree."""
    import shutil
    import subprocess

    git = shutil.which("git")
    if git is None:
        return None
    try:
        run = subprocess.run(  # noqa: S603 -- git by its full path, arguments of our own
            [git, "-C", str(folder), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard", "--", "."], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if run.returncode != 0:
        return None
    return {os.fsdecode(p) for p in run.stdout.split(b"\0") if p}


class _Ignores:
    """.gitignore files read as git reads them, for a folder outside a git work tree: each
    file's patterns apply below its folder; '!' re-includes, a trailing '/' matches folders
    only, a '/' elsewhere anchors to the .gitignore's folder, '**' spans folders."""

    def __init__(self) -> None:
        self.rules: list[tuple[str, re.Pattern[str], bool, bool]] = []  # base, rx, neg, dir

    def read(self, folder: str, base: str) -> None:
        from transformer_calc.files import read_bounded

        try:
            text = read_bounded(Path(folder) / ".gitignore", ".gitignore", "a .gitignore",
                                MAX_FILE_BYTES).decode("utf-8", "replace")
        except TcalcError:
            return
        for line in text.splitlines():
            line = line.rstrip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            line = line[1:] if negate else line
            only_dirs = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            line = line.lstrip("/")
            rx = _glob_regex(line, anchored)
            self.rules.append((base, rx, negate, only_dirs))

    def ignored(self, relative: str, is_dir: bool) -> bool:
        verdict = False
        for base, rx, negate, only_dirs in self.rules:
            if base and not relative.startswith(base + "/"):
                continue
            if only_dirs and not is_dir:
                continue
            if rx.fullmatch(relative[len(base) + 1:] if base else relative):
                verdict = not negate
        return verdict


def _glob_regex(pattern: str, anchored: bool) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    body = "".join(out)
    return re.compile(body if anchored else f"(?:.*/)?{body}")


def search(folder: Path, exclude: list[str]) -> list[Path]:
    """The model files of a folder, recursively: not ignored by git, not excluded, looking
    like models (looks_like_model). Never follows a symlink to a folder."""
    tracked = _git_files(folder)
    # the folders that hold a file git keeps: the others are not walked
    kept = {"/".join(f.split("/")[:i]) for f in tracked or () for i in range(1, f.count("/") + 1)}
    ignores = _Ignores()
    found: list[Path] = []
    for top, dirs, files in os.walk(folder, followlinks=False):
        rel_top = os.path.relpath(top, folder).replace(os.sep, "/")
        rel_top = "" if rel_top == "." else rel_top
        if tracked is None and ".gitignore" in files:
            ignores.read(top, rel_top)

        def rel(name: str, base: str = rel_top) -> str:
            return f"{base}/{name}" if base else name

        dirs[:] = sorted(d for d in dirs if d != ".git" and not _excluded(rel(d), exclude)
                         and (rel(d) in kept if tracked is not None
                              else not ignores.ignored(rel(d), True)))
        for name in sorted(files):
            r = rel(name)
            if not name.lower().endswith(SUFFIXES) or _excluded(r, exclude):
                continue
            if (r not in tracked) if tracked is not None else ignores.ignored(r, False):
                continue
            path = Path(top) / name
            if path.is_file() and looks_like_model(path):
                found.append(path)
    return found


def collect(paths: list[str], exclude: list[str] | None = None) -> list[Path | str]:
    """The model files named, folders searched (search), and Hub ids as given. Raises
    PresetError (usage)."""
    from transformer_calc.hub import parse

    exclude = exclude or []
    if not paths:
        return sorted(preset_dir().glob("*.yaml"))
    items: list[Path | str] = []
    for ref in paths:
        p = Path(ref)
        if p.is_dir():
            found = search(p, exclude)
            if not found:
                raise PresetError(f"{ref}: no model files in this folder (presets, config.json "
                                  "or .gguf files that git does not ignore)")
            items += found
        elif os.path.lexists(p):
            if not _excluded(p.as_posix(), exclude):
                items.append(p)
        elif parse(ref) is not None:
            items.append(ref)  # a Hub id: its config.json
        else:
            raise PresetError(f"{ref}: no such file or folder")
    return items


def display(path: Path) -> str:
    """A path as the user would write it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


@dataclass(frozen=True)
class Budget:
    """A memory budget every model must meet: the peak of ``settings``' run per GPU at most
    ``limit`` bytes (``name``: the GPU or size it was given as)."""

    settings: object  # memory.Settings (imported lazily: check without a budget needs none)
    limit: int
    name: str


def _load(item: Path | str) -> tuple[str, Path, object]:
    """(what the result names, the file read, the spec) of a file or a Hub id."""
    if isinstance(item, str):
        from transformer_calc.hub import config_path

        config = config_path(item)
        return item, config, load_file(config, shown=item)
    where = display(item)
    return where, item, load_file(item, shown=where)


def check_file(item: Path | str, budget: Budget | None = None) -> CheckResult:
    where = item if isinstance(item, str) else display(item)
    try:
        where, path, spec = _load(item)
    except TcalcError as e:
        message = str(e).removeprefix(f"{where}: ")
        key = e.key if isinstance(e, SpecError) else None
        line = e.line if e.line is not None else (
            _key_line(item, key) if isinstance(item, Path) else None)
        return CheckResult(where, False, message, line=line, key=key)
    total = count_params(spec).total  # type: ignore[arg-type]
    name = spec.name  # type: ignore[attr-defined]
    try:
        expected = _expected(spec, path)
    except SpecError as e:
        return CheckResult(where, False, str(e).removeprefix(f"{path}: "), model=name,
                           total=total, key=e.key, line=_key_line(path, e.key))
    if expected is not None and expected != total:
        return CheckResult(
            where, False,
            f"expected_params is {expected:,} but the architecture has {total:,} "
            f"(difference {total - expected:+,})",
            model=name, total=total, expected=expected,
            line=_key_line(path, "expected_params"), key="expected_params")
    ok, checkpoint = True, ""
    if path.name.lower() == "config.json":
        ok, checkpoint = _checkpoint(spec, path.parent, total)
    if not ok:
        return CheckResult(where, False, checkpoint, model=name, total=total, expected=expected)
    if budget is not None:
        over = _over_budget(spec, budget)
        if over:
            return CheckResult(where, False, over, model=name, total=total, expected=expected)
    return CheckResult(where, True, "", model=name, total=total, expected=expected,
                       checkpoint=checkpoint)


def _expected(spec: object, path: Path) -> int | None:
    """expected_params: the preset's, or a config.json's own top-level key (transformers
    keeps unknown keys; tcalc reads this one)."""
    expected = spec.expected_params  # type: ignore[attr-defined]
    if expected is not None or path.suffix.lower() != ".json":
        return expected  # type: ignore[no-any-return]
    import json

    from transformer_calc.files import read_bounded

    try:
        data = json.loads(read_bounded(path, str(path), "a config.json", MAX_FILE_BYTES))
    except (TcalcError, ValueError, RecursionError):
        return None  # (the spec was read from it: this cannot fail where that did not)
    value = data.get("expected_params") if isinstance(data, dict) else None
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise SpecError("expected_params", "a whole number of parameters (>= 0)", value,
                        source=str(path))
    return value


def _checkpoint(spec: object, folder: Path, total: int) -> tuple[bool, str]:
    """(passes, what to say) of the folder's safetensors headers against the architecture.
    Fewer elements than the architecture, or more that one or two whole tensor-name
    patterns do not account for (a buffer or a tied head saved beside the weights), is a
    checkpoint that does not hold this config's model. A quantised checkpoint's stored
    elements are not the parameters: not compared."""
    from transformer_calc.checkpoint import compare, files_of, read_checkpoint
    from transformer_calc.files import lfs_pointer

    try:
        if any(lfs_pointer(f) for f in files_of(folder)):  # a clone without its LFS files
            return True, "checkpoint not compared (git-lfs pointers: git lfs pull fetches it)"
        ckpt = read_checkpoint(folder)
    except TcalcError as e:
        return False, f"checkpoint: {e}"
    if ckpt is None:
        return True, ""
    if spec.weight_format:  # type: ignore[attr-defined]
        return True, (f"checkpoint not compared (stored as "
                      f"{spec.weight_format})")  # type: ignore[attr-defined]
    c = compare(ckpt, total)
    diff, named = c["difference"], ", ".join(c.get("explained_by", []))
    if diff == 0:
        return True, "checkpoint equal"
    if diff > 0 and named:
        return True, f"checkpoint +{diff:,} in {named}"
    held = "fewer" if diff < 0 else "more"
    largest = "; largest: " + ", ".join(f"{p['pattern']} {p['params']:,}"
                                       for p in c["largest_patterns"][:3])
    return False, (f"the checkpoint's tensors hold {ckpt.params:,} elements, {abs(diff):,} "
                   f"{held} than the config's architecture ({total:,})"
                   f"{f' (in {named})' if named else largest}")


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


def check(paths: list[str], budget: Budget | None = None,
          exclude: list[str] | None = None) -> list[CheckResult]:
    return [check_file(f, budget) for f in collect(paths, exclude)]


def _key_line(path: Path, key: str | None) -> int | None:
    """The line where a top-level key is written (YAML `key:` or JSON `"key":`), in a text
    model file of at most 1 MiB (never a GGUF, never more than that read)."""
    from transformer_calc.files import read_bounded

    if not key or path.suffix.lower() not in (".yaml", ".yml", ".json"):
        return None
    name = re.escape(key.split(".")[0])
    pattern = re.compile(rf'^\s*"?{name}"?\s*:')
    try:
        lines = read_bounded(path, str(path), "a model file", MAX_FILE_BYTES).decode(
            "utf-8").splitlines()
    except (TcalcError, UnicodeDecodeError):
        return None
    for n, text in enumerate(lines, 1):
        if pattern.match(text):
            return n
    return None
