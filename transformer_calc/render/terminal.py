"""--format table (the default): rich tables on a terminal. The only module that imports rich."""

from __future__ import annotations

import sys
from typing import Any

from transformer_calc.render.doc import Cell, Doc, Mark, Pair, Section, Table, Text, Wide


def _plain(text: str) -> str:
    """A cell or line from the user, made safe for a terminal (no control characters)."""
    from transformer_calc.errors import printable

    return printable(text, one_line=True)


def _markup_safe(text: str) -> str:
    """For places rich parses as markup (table titles): escaped, so '[/bold]' is text."""
    from rich.markup import escape

    return escape(_plain(text))


def _console() -> Any:
    """rich's Console, but a closed stdout raises BrokenPipeError (rich would exit 1 silently),
    so that the CLI says why in one line."""
    import os

    from rich.console import Console

    class Quiet(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    # COLUMNS that is not a positive number (COLUMNS=0, COLUMNS=abc) is ignored, as if unset:
    # rich would lay everything out in no width and print nothing
    out: Any = _RunnerSafe(sys.stdout)  # (rich asks for an IO[str]; this is one in practice)
    columns = os.environ.get("COLUMNS", "")
    if columns and not (columns.isdigit() and int(columns) > 0):
        return Quiet(file=out, width=80 if not sys.stdout.isatty() else None,
                     _environ={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    return Quiet(file=out)


class _RunnerSafe:
    """stdout as rich writes to it, each line made inert for a CI log (errors.runner_safe):
    a cell's words wrapped to the start of a line cannot start a workflow command there."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        from transformer_calc.errors import runner_safe

        return self.stream.write(runner_safe(text))

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, flush, ...
        return getattr(self.stream, name)


def _cell(c: Cell, stacked: bool) -> str:
    if isinstance(c, Mark):
        colour = "green" if c.ok else "red"
        return f"[{colour}]{_markup_safe(c.text)}[/{colour}]"
    if isinstance(c, Pair):
        return _cell(c.first, False) + ("\n" if stacked else "  ") + _cell(c.second, False)
    return _plain(c.text if isinstance(c, Wide) else c).replace("[", "\\[")


def _width(c: Cell, stacked: bool) -> int:
    """Columns a cell needs on one line (a Pair stacked: the wider of its two)."""
    from rich.cells import cell_len

    if isinstance(c, Pair):
        a, b = cell_len(c.first), cell_len(c.second)
        return max(a, b) if stacked else a + 2 + b
    text = c.text if isinstance(c, (Mark, Wide)) else c
    return cell_len(text)


def _min_width(t: Table, n: int, stacked: bool) -> int:
    """The narrowest column ``n`` may be: a number whole, text down to 12 columns or its
    longest word (rich would otherwise squeeze a text column to nothing)."""
    from rich.cells import cell_len

    col = t.columns[n]
    cells = [r[n] for r in t.rows if not isinstance(r, Section)]
    if col.numeric:
        return max([cell_len(col.header)] + [_width(c, stacked) for c in cells])
    words = [cell_len(w) for c in cells if isinstance(c, str) for w in c.split()]
    return max([min(cell_len(col.header), 12), min(max(words, default=0), 12)]
               + [min(_width(c, stacked), 12) for c in cells])


def _fit(t: Table, width: int) -> tuple[list[int], bool]:
    """The columns shown and whether pairs stack, so that the table fits ``width``: first
    stack pairs, then leave columns out by their drop rank (no number split)."""
    shown = list(range(len(t.columns)))
    stacked = False

    def need() -> int:  # "│ a │ b │": three per column and one
        return sum(_min_width(t, n, stacked) + 3 for n in shown) + 1

    if need() > width and any(isinstance(c, Pair) for r in t.rows
                              if not isinstance(r, Section) for c in r):
        stacked = True
    while need() > width:
        droppable = [n for n in shown if t.columns[n].drop]
        if not droppable:
            break
        shown.remove(max(droppable, key=lambda n: (t.columns[n].drop, n)))
    return shown, stacked


def print_table(console: Any, t: Table) -> None:
    from rich.table import Table as RichTable

    shown, stacked = _fit(t, console.width)
    table = RichTable(title=_markup_safe(t.title) if t.title else None, title_justify="left")
    for n in shown:
        c = t.columns[n]
        # numbers never fold across lines: the text columns wrap instead
        table.add_column(c.header, justify="right" if c.numeric else "left", overflow="fold",
                         no_wrap=c.numeric, min_width=_min_width(t, n, stacked))
    for r in t.rows:
        if isinstance(r, Section):
            table.add_row(f"[bold]{_markup_safe(r.title)}[/bold]",
                          *([""] * (len(shown) - 1)), end_section=False)
        else:
            table.add_row(*(_cell(r[n], stacked) for n in shown))
    console.print(table)
    left_out = [t.columns[n].header for n in range(len(t.columns)) if n not in shown]
    if left_out:
        console.print(f"left out at {console.width} columns: {', '.join(left_out)} (a wider "
                      "terminal or --format markdown shows them)", markup=False, highlight=False)


def render(doc: Doc) -> None:
    from transformer_calc.errors import printable

    console = _console()
    verbatim: list[str] = []  # text printed as is (no wrapping), paragraphs apart

    def flush() -> None:
        if verbatim:
            sys.stdout.write(printable("\n\n".join(verbatim).rstrip("\n")) + "\n")
            sys.stdout.flush()
            verbatim.clear()

    for b in doc.blocks_for("table"):
        if isinstance(b, Table):
            flush()
            print_table(console, b)
        elif b.style == "title":
            verbatim.append(_plain(b.title))
        elif b.style == "steps":  # (each line one line, whatever a name in it holds)
            verbatim.append("\n".join([_plain(b.title)] + [f"  {_plain(x)}" for x in b.lines]))
        elif b.style == "lines":
            verbatim.append("\n".join(_plain(x) for x in b.lines))
        else:  # notes, chart: wrapped to the terminal by rich
            assert isinstance(b, Text)
            flush()
            for line in ([b.title] if b.title else []) + list(b.lines):
                console.print(_plain(line), markup=False, highlight=False)
    flush()
