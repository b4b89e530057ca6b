"""One renderer per format: every command builds one Doc; json, markdown and the
terminal each render any Doc, and a terminal table stays whole at 80 columns."""

from __future__ import annotations

import json
import re

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from transformer_calc.cli import app
from transformer_calc.render import json as json_format
from transformer_calc.render import markdown, terminal
from transformer_calc.render.doc import Column, Doc, Mark, Pair, Section, Table, Text, Wide

DOC = Doc({"answer": 42}, [
    Table("a [title]", [Column("name"), Column("count", True, drop=1),
                        Column("total", True)],
          [Section("part"), ("x", Wide("a", "a = 1 + 2"), Pair("3", "+1 (+50.0%)")),
           ("y|z", Mark("ok ✓", True), Mark("no ✗", False))]),
    Text(["a note"]),
    Text(["line one"], "lines", only="table"),
    Text(["code"], "chart", "a chart:", only="markdown"),
])


def test_markdown_renders_every_block_kind() -> None:
    assert markdown.render(DOC) == (
        "## a \\[title\\]\n\n| name | count | total |\n|---|---|---|\n| **part** |  |  |\n"
        "| x | a = 1 + 2 | 3  +1 (+50.0%) |\n| y\\|z | ok ✓ | no ✗ |\n\n- a note\n\n"
        "a chart:\n\n```\ncode\n```\n")


def test_markdown_shows_a_names_inline_markup_as_itself() -> None:
    # a name a file chose (a tensor, a preset, a path) is neither a link, an image, an
    # autolink nor HTML in a PR comment: GFM's backslash escapes, a backslash itself first
    doc = Doc({}, (Text(("w[x](http://e) ![i](j) <img src=x> `c` \\[",), "lines"),))
    assert markdown.render(doc) == ("w\\[x\\](http://e) !\\[i\\](j) \\<img src=x\\> "
                                    "\\`c\\` \\\\\\[\n")


def test_json_is_the_data_alone_and_never_nan() -> None:
    assert json.loads(json_format.render(DOC)) == {"answer": 42}
    with pytest.raises(ValueError):
        json_format.render(Doc({"x": float("nan")}))


def _terminal(doc: Doc, columns: int, capsys: pytest.CaptureFixture[str],
              monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setenv("NO_COLOR", "1")
    terminal.render(doc)
    return capsys.readouterr().out


def test_terminal_wide_pairs_side_by_side_and_markup_is_text(capsys, monkeypatch) -> None:
    out = _terminal(DOC, 120, capsys, monkeypatch)
    assert out.startswith("a [title]")  # rich markup in a title is text
    assert "│     a │ 3  +1 (+50.0%) │" in out  # the short form of a Wide cell
    assert "a = 1 + 2" not in out
    assert out.endswith("a note\nline one\n")  # notes, then the terminal-only lines
    assert "a chart" not in out


def test_terminal_narrow_stacks_pairs_then_drops_by_rank(capsys, monkeypatch) -> None:
    out = _terminal(DOC, 30, capsys, monkeypatch)  # stacked, all columns shown
    assert "│ +1 (+50.0%) │" in out and "left out" not in out
    assert max(cell_len(line) for line in out.splitlines() if line[:1] in "┏┃┡│└") <= 30
    out = _terminal(DOC, 26, capsys, monkeypatch)  # then the column ranked to drop goes
    assert "count" not in out.split("left out")[0]
    assert "left out at 26 columns: count (a wider" in " ".join(out.split())


def _run(columns: int, *args: str) -> str:
    r = CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1",
                                                 "GITHUB_ACTIONS": ""})
    assert r.exit_code == 0, r.output
    return r.stdout


WIDE_TABLES = [
    ["params", "mixtral-8x7b"],
    ["params", "deepseek-v3"],
    ["memory", "llama-3.1-8b", "--lora", "16", "--gpu", "H100-80GB"],
    ["memory", "--mixed"],
    ["compare", "gpt2", "bert-base", "llama-3.1-8b"],
    ["sweep", "llama-3.1-8b", "--seq-len", "512,1024,2048,4096,8192,16384", "--gpu",
     "H100-80GB"],
    ["flops", "llama-3.1-8b", "--gpu", "H100-80GB"],
    ["gpus"],
    ["presets"],
]


@pytest.mark.parametrize("args", WIDE_TABLES, ids=lambda a: "-".join(a[:2]))
def test_tables_stay_whole_at_80_columns(args: list[str]) -> None:
    """Every table line fits, no cell is cut with an ellipsis, no column is squeezed to
    nothing, and every number of the wide table is still there unless its column is named
    as left out."""
    narrow, wide = _run(80, *args), _run(250, *args)
    table_lines = [x for x in narrow.splitlines() if x[:1] in "┏┃┡│└"]
    assert table_lines and max(cell_len(x) for x in table_lines) <= 80
    assert "…" not in narrow
    assert not any(x.startswith(("┃┃", "││")) for x in table_lines)
    if "left out at 80 columns" not in narrow:
        numbers = set(re.findall(r"\d{1,3}(?:,\d{3})+", "".join(
            x for x in wide.splitlines() if x[:1] == "│")))
        assert numbers <= set(re.findall(r"\d{1,3}(?:,\d{3})+", narrow))


def test_what_goes_first_when_too_wide() -> None:
    out = _run(80, "memory", "--mixed")
    assert "left out at 80 columns: weights, master_weights, gradients" in out
    assert "│ gpt2 " in out and "total" in out  # the total stays
    out = _run(80, "params", "mixtral-8x7b")
    assert "left out at 80 columns: per layer" in out and "share" in out
    assert "left out" not in _run(200, "params", "mixtral-8x7b")


def test_every_command_renders_through_the_one_show() -> None:
    # a format is one module: no command builds its own table, JSON or markdown
    import inspect

    from transformer_calc import cli

    source = inspect.getsource(cli)
    assert not re.search(r"import .*(rich|md_table|print_table|dumps)", source)
    assert source.count("show(") >= 10
