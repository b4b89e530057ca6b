"""--format markdown: GitHub-flavoured markdown, for PR comments and docs."""

from __future__ import annotations

from collections.abc import Sequence

from transformer_calc.render.doc import Block, Cell, Doc, Mark, Pair, Section, Table, Text, Wide


def _plain(text: str) -> str:
    from transformer_calc.errors import printable

    return printable(text, one_line=True)


def _cell(c: Cell) -> str:
    if isinstance(c, Mark):
        return c.text
    if isinstance(c, Pair):
        return f"{c.first}  {c.second}"
    return c.wide if isinstance(c, Wide) else c


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Cell] | Section]) -> str:
    def esc(s: str) -> str:  # a cell stays one cell: no pipe, no newline
        return _plain(s).replace("|", "\\|")
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        cells = ([f"**{r.title}**"] + [""] * (len(headers) - 1) if isinstance(r, Section)
                 else [_cell(c) for c in r])
        out.append("| " + " | ".join(esc(c) for c in cells) + " |")
    return "\n".join(out)


def _block(b: Block) -> str:
    if isinstance(b, Table):
        head = f"{'#' * b.heading} {b.title}\n\n" if b.title else ""
        return head + md_table([c.header for c in b.columns], b.rows)
    assert isinstance(b, Text)
    if b.style == "title":
        return f"# {b.title}"
    if b.style == "steps":
        return "\n".join([f"## {b.title}"] + [f"- {x}" for x in b.lines])
    if b.style == "chart":
        return f"{b.title}\n\n```\n" + "\n".join(b.lines) + "\n```"
    if b.style == "lines":
        return "\n".join(b.lines)
    return "\n".join(f"- {x}" for x in b.lines)


def render(doc: Doc) -> str:
    return "\n\n".join(_block(b) for b in doc.blocks_for("markdown")) + "\n"
