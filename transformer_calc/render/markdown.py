"""--format markdown: GitHub-flavoured markdown, for PR comments and docs."""

from __future__ import annotations

from collections.abc import Sequence

from transformer_calc.render.doc import Block, Cell, Doc, Mark, Pair, Section, Table, Text, Wide

# what GFM would read as a link, an image, an autolink or raw HTML in a name a file chose
# (a tensor, a preset, a path): shown as itself, backslash-escaped (GFM's own escapes)
_INLINE = str.maketrans({c: "\\" + c for c in "[]<>`"})


def _plain(text: str) -> str:
    """One line, printable, with GFM's inline markup shown as itself (a backslash escaped
    first: GFM reads it and the character after it as one)."""
    from transformer_calc.errors import printable

    return printable(text, one_line=True).replace("\\", "\\\\").translate(_INLINE)


def _cell(c: Cell) -> str:
    if isinstance(c, Mark):
        return c.text
    if isinstance(c, Pair):
        return f"{c.first}  {c.second}"
    return c.wide if isinstance(c, Wide) else c


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Cell] | Section]) -> str:
    def esc(s: str) -> str:  # a cell stays one cell: no newline, no pipe that splits it
        return _plain(s).replace("|", "\\|")
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        cells = ([f"**{r.title}**"] + [""] * (len(headers) - 1) if isinstance(r, Section)
                 else [_cell(c) for c in r])
        out.append("| " + " | ".join(esc(c) for c in cells) + " |")
    return "\n".join(out)


def _block(b: Block) -> str:
    if isinstance(b, Table):
        head = f"{'#' * b.heading} {_plain(b.title)}\n\n" if b.title else ""
        return head + md_table([c.header for c in b.columns], b.rows)
    assert isinstance(b, Text)
    if b.style == "chart":  # inside a code fence GFM escapes nothing: only a fence can break it
        from transformer_calc.errors import printable

        code = [printable(x, one_line=True).replace("`", "'") for x in b.lines]
        return f"{_plain(b.title)}\n\n```\n" + "\n".join(code) + "\n```"
    lines = [_plain(x) for x in b.lines]  # a line stays one line, whatever a name holds
    if b.style == "title":
        return f"# {_plain(b.title)}"
    if b.style == "steps":
        return "\n".join([f"## {_plain(b.title)}"] + [f"- {x}" for x in lines])
    if b.style == "lines":
        return "\n".join(lines)
    return "\n".join(f"- {x}" for x in lines)


def render(doc: Doc) -> str:
    return "\n\n".join(_block(b) for b in doc.blocks_for("markdown")) + "\n"
