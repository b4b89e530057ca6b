"""The README and docs/ cannot drift: every console example in README.md and docs/*.md runs,
and the lines it shows are in the output; the generated sections of every file equal what
tools/readme.py writes from the code; the two commands of a fresh checkout print no
warnings."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from transformer_calc.cli import app

README = (ROOT / "README.md").read_text(encoding="utf-8")
# README.md first, then every docs/*.md by name: each file's text, by its path in the repository
PAGES = {"README.md": README} | {
    f"docs/{p.name}": p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))}

# Examples that exit non-zero on purpose: the error example (usage/input error, 2), the
# check example with a failing file (1) and the budget that is not met (1). Every other
# example must exit 0.
EXIT_CODES = {"tcalc params tests/data/bad/unknown_key.yaml": 2,
              "tcalc check configs/ tests/data/bad/expected_mismatch.yaml": 1,
              "tcalc memory llama-3.1-8b --gpu H100 --require-fit": 1,
              "tcalc check configs/gpt2.yaml configs/llama-3-8b.yaml --max-memory 40GB": 1}


def examples(text: str | None = None) -> list[tuple[str, list[str]]]:
    """(command, the output lines the page shows for it) for every `$ tcalc` line of every
    console block of one page's text, or of every page (README.md and docs/*.md)."""
    texts = [text] if text is not None else list(PAGES.values())
    out: list[tuple[str, list[str]]] = []
    for page in texts:
        for block in re.findall(r"```console\n(.*?)```", page, re.S):
            for line in block.splitlines():
                if line.startswith("$ "):
                    out.append((line[2:], []))
                elif out and line.strip():
                    out[-1][1].append(line.rstrip())
    return [(cmd, shown) for cmd, shown in out if cmd.startswith("tcalc ")]


def _subcommand(command: str) -> str:
    return shlex.split(command, comments=True)[1]


def test_the_readme_has_examples_to_run() -> None:
    from transformer_calc.cli import COMMANDS

    commands = [cmd for cmd, _ in examples()]
    assert len(commands) >= 25
    assert len({_subcommand(c) for c in commands}) >= 8  # subcommands
    # the README's own tour shows every command `tcalc --help` lists
    assert set(COMMANDS) <= {_subcommand(c) for c, _ in examples(README)}


@pytest.fixture
def readme_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch working directory holding what the examples name: a copy of configs/ (the
    check example lists it) and tests/data (read); examples that write, write here."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "data").symlink_to(ROOT / "tests" / "data")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _all_examples() -> list[tuple[str, str, list[str]]]:
    return [(page, cmd, shown) for page, text in PAGES.items() for cmd, shown in examples(text)]


@pytest.mark.parametrize(("page", "command", "shown"), _all_examples(),
                         ids=[f"{p}: {c}" for p, c, _ in _all_examples()])
def test_readme_example_runs_and_shows_what_it_says(page: str, command: str, shown: list[str],
                                                    readme_dir: Path) -> None:
    args = shlex.split(command, comments=True)[1:]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "100", "GITHUB_ACTIONS": ""})
    key = " ".join(["tcalc", *args])
    assert result.exit_code == EXIT_CODES.get(key, 0), (result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line.rstrip() for line in (result.stdout + result.stderr).splitlines()]
    at = 0
    for want in shown:
        if want == "...":
            continue
        assert want in lines[at:], f"{page} shows {want!r} for `{command}`; not in the output"
        at = lines.index(want, at) + 1


def _readme_tool():  # type: ignore[no-untyped-def]
    from conftest import load_tool

    return load_tool("readme")


def test_generated_sections_equal_what_the_code_generates() -> None:
    tool = _readme_tool()
    # every section the tool writes is in exactly one page, README.md or docs/*.md ...
    where = {name: [page for page, text in PAGES.items() for n in tool.sections_in(text)
                    if n == name] for name in tool.SECTIONS}
    assert all(len(pages) == 1 for pages in where.values()), where
    assert [p.relative_to(ROOT).as_posix() for p in tool.files()] == list(PAGES)
    # ... and every page equals what the tool writes
    for page, text in PAGES.items():
        assert tool.render(text, page) == text, f"{page}: run: python tools/readme.py"


def test_preset_format_names_every_field_and_the_table_every_preset() -> None:
    import dataclasses

    from transformer_calc.presets import preset_names
    from transformer_calc.spec import ModelSpec

    tool = _readme_tool()
    block = tool.preset_format()
    for f in dataclasses.fields(ModelSpec):
        key = "bias" if f.name.startswith("bias_") else f.name
        assert re.search(rf"^{key}: ", block, re.M), key
    table = tool.presets_table()
    for name in preset_names():
        assert f"| {name} |" in table, name


def _keys(value: object, at: str = "") -> set[str]:
    """Every key path in a JSON value, lists read through their first element."""
    if isinstance(value, dict):
        return {f"{at}.{k}" for k in value} | {p for k, v in value.items()
                                              for p in _keys(v, f"{at}.{k}")}
    if isinstance(value, list) and value and value[0] != "...":
        return _keys(value[0], f"{at}[]")
    return set()


@pytest.mark.parametrize(("section", "args"), [
    ("params-json", ["params", "gpt2"]),
    ("memory-json", ["memory", "gpt2", "--mixed", "--batch-size", "8", "--gpu", "A100-80GB"]),
    ("flops-json", ["flops", "gpt2", "--gpu", "A100-80GB", "--gpus", "8", "--tokens", "10B"]),
])
def test_readme_json_keys_are_the_emitted_ones(cli, section: str,  # type: ignore[no-untyped-def]
                                               args: list[str]) -> None:
    # the documented example is the real output cut to one element per list: its keys are
    # the command's keys, at every level, in order
    found = [m for text in PAGES.values()
             for m in re.finditer(rf"<!-- generated: {section} -->\n```json\n(.*?)```", text, re.S)]
    assert len(found) == 1, section
    generated = found[0]
    import json

    shown = json.loads(generated.group(1))
    real = cli.json(*args)
    assert list(shown) == list(real)
    assert _keys(shown) == _keys(real)


@pytest.mark.slow
def test_fresh_checkout_make_run_is_quiet(tmp_path: Path) -> None:
    """`make run` on a fresh copy of the tracked files: one line per step, the table, no
    warning from pip or setuptools."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=False).stdout.split(b"\0")
    if not any(files):
        pytest.skip("not a git checkout")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            dst = tmp_path / name.decode()
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    # as a user's shell runs it: not inside this venv, nor inside `make test` (a nested make
    # would print its "Entering directory" lines)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VIRTUAL_ENV", "PYTHON", "MAKE", "MFLAGS"))}
    run = subprocess.run(["make", "run"], cwd=tmp_path, capture_output=True, text=True,
                         env=env, check=False, timeout=600)
    assert run.returncode == 0, run.stderr
    output = (run.stdout + run.stderr).splitlines()
    assert output[:3] == [output[0], "installing transformer-calc (editable) with its dev "
                          "tools into .venv", "$ tcalc params gpt2-medium"]
    assert output[0].startswith("creating .venv (Python 3.")
    noisy = [line for line in output if re.search(r"warn|deprecat|notice", line, re.I)]
    assert noisy == []
    assert "total trainable parameters: 354,823,168 (354.8M)" in output


def test_the_format_claim_is_true(cli) -> None:  # type: ignore[no-untyped-def]
    claim = re.search(r"`--format table\|json\|markdown` works on every command that prints a "
                      r"result: (.*?) \(`import`", README, re.S)
    assert claim
    listed = re.findall(r"`(\w+)`", claim.group(1))
    from transformer_calc.cli import COMMANDS

    assert set(listed) | {"import"} == set(COMMANDS)
    for name in listed:
        assert "--format" in cli(name, "--help").stdout, name
    assert "--format" not in cli("import", "--help").stdout
