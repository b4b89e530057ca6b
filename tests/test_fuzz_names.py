"""Untrusted names in every output channel: a file or folder name, a preset's name, a YAML
key, a checkpoint's tensor name, drawn with the characters that matter (newlines, CR, '::',
'##[', '%', control and C1 characters, lone surrogates of a non-UTF-8 file name), through
`check`, `params` and `import` in every format, under GitHub Actions.

No line tcalc writes may be a workflow command to the runner, except the annotations it
means: actions/runner (src/Runner.Common/ActionCommand.cs) reads a line, ended by CR, LF or
CR LF (src/Runner.Worker/Handlers/ProcessInvoker.cs, TextReader.ReadLine), as a command when
it starts with '::' after leading white space (TryParseV2) or holds '##[' anywhere (TryParse),
on stdout and stderr alike. JSON must stay valid JSON and valid UTF-8. Derandomized."""

from __future__ import annotations

import json
import os
import re
import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from transformer_calc.cli import app

# each CLI run costs ~0.1 s: few examples, a format drawn for each; the channel functions
# themselves take many
FUZZ = settings(max_examples=18, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
MANY = settings(max_examples=500, derandomize=True, deadline=None)
FORMATS = st.sampled_from(["table", "json", "markdown"])
TINY = {"vocab_size": 100, "d_model": 64, "n_layers": 1, "n_heads": 4, "d_ff": 128}
# the characters a forged command is made of, and any others
HOSTILE = st.text(st.one_of(st.sampled_from(list(":#[]%,=\r\n\t \x1b\x85\x9b\u2028\udcff")),
                            st.characters(codec="utf-8")), min_size=1, max_size=24)
LINES = re.compile(r"\r\n|\r|\n")


def runner_commands(text: str) -> list[str]:
    """The lines of ``text`` the runner would run as workflow commands."""
    def v2(line: str) -> bool:  # TryParseV2: '::command ...::data' after white space
        bare = line.lstrip()
        return bare.startswith("::") and "::" in bare[2:]

    def v1(line: str) -> bool:  # TryParse: '##[command]data' anywhere
        return "##[" in line and "]" in line[line.index("##["):]

    return [line for line in LINES.split(text) if v2(line) or v1(line)]


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args), env={"GITHUB_ACTIONS": "true", "COLUMNS": "60"})
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


def assert_inert(stdout: str, stderr: str, fmt: str, failures: int = 0) -> None:
    assert runner_commands(stdout) == [], stdout
    ours = [c for c in runner_commands(stderr) if c.startswith("::error file=")]
    assert runner_commands(stderr) == ours and len(ours) == failures, stderr
    for line in ours:  # our annotation: one line, its values escaped
        assert "\r" not in line and "\n" not in line
    if fmt == "json":
        json.loads(stdout)
        stdout.encode("utf-8")  # (strict: no lone surrogate reaches the output)


def _file_name(name: str) -> str | None:
    """``name`` as a file name this file system takes, or None."""
    name = name.replace("/", "_").replace("\0", "_")
    if name in (".", "..") or len(os.fsencode(name)) > 200:
        return None
    try:
        name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return None
    return name


@MANY
@given(st.text(st.one_of(st.sampled_from(list(":#[\r\n \t\x85")), st.characters()),
               max_size=40))
def test_each_channel_escape_leaves_no_command(text: str) -> None:
    from transformer_calc.errors import printable
    from transformer_calc.render.json import dumps
    from transformer_calc.render.reports import workflow_command

    assert runner_commands(printable(text, one_line=True)) == []
    assert runner_commands(printable(text)) == []  # (its own newlines kept: no line a command)
    assert json.loads(dumps({"k": text})) == {"k": text} and runner_commands(dumps([text])) == []
    line = workflow_command("error", {"file": text, "title": text}, text)
    assert LINES.split(line) == [line] and runner_commands(line) == [line]


@FUZZ
@given(HOSTILE, HOSTILE, HOSTILE, FORMATS)
def test_names_and_keys_never_forge_a_workflow_command(file_name, model_name, key,
                                                        fmt) -> None:
    import yaml

    fname = _file_name(file_name)
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        good = folder / f"{fname or 'model'}.yaml"
        good.write_text(yaml.safe_dump({"name": model_name, **TINY,
                                        "expected_params": 1}), encoding="utf-8",
                        errors="surrogateescape")
        bad = folder / "sub" / f"{fname or 'bad'}.yml"
        bad.parent.mkdir()
        bad.write_text(yaml.safe_dump({**TINY, key: 1} if key not in TINY else {key: "x"},
                                       allow_unicode=True), encoding="utf-8",
                       errors="surrogatepass")
        code, out, err = run("check", str(good), str(bad), "--format", fmt)
        assert code == 1
        assert_inert(out, err, fmt, failures=2)
        code, out, err = run("params", str(good), "--format", fmt)
        assert code == 0
        assert_inert(out, err, fmt)


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    header, at = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = 1
        for dim in shape:
            n *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + 2 * n]}
        at += 2 * n
    body = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + b"\0" * at)


@FUZZ
@given(HOSTILE, FORMATS)
def test_a_tensor_name_never_forges_a_workflow_command(tensor, fmt) -> None:
    from conftest import DATA

    config = (DATA / "checkpoints" / "tiny-llama" / "config.json").read_text()
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / "m"
        folder.mkdir()
        (folder / "config.json").write_text(config)
        # the tiny Llama's 69,952 parameters as one tensor, and one more with the name
        _safetensors(folder / "model.safetensors",
                     {"model.embed_tokens.weight": ("BF16", [69_952]),
                      tensor: ("BF16", [3])})
        code, out, err = run("params", str(folder), "--format", fmt)
        assert code == 0
        assert_inert(out, err, fmt)
        code, out, err = run("check", str(folder), "--format", fmt)
        assert_inert(out, err, fmt, failures=int(code == 1))


@FUZZ
@given(HOSTILE)
def test_an_output_name_never_forges_a_command_and_reads_back(name) -> None:
    from conftest import ROOT

    fname = _file_name(name)
    if fname is None:
        return
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / f"{fname}.yaml"
        code, stdout, err = run("import", str(ROOT / "configs" / "gpt2.yaml"), "-o", str(out))
        assert code == 0, err
        assert_inert(stdout, err, "table")
        code, stdout, err = run("params", str(out), "--format", "json")
        assert code == 0, err
        assert json.loads(stdout)["total_params"] == 124_439_808
