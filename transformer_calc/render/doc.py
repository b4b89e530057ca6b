"""What a command shows, independent of the format: a Doc of blocks (tables and text) and the
JSON value. Each command builds one Doc (reports.py); json.py, markdown.py and terminal.py
each render every Doc, so a new format is one new module (structlog's processors: one event,
several renderers). NamedTuples, not dataclasses: a frozen slotted dataclass costs 1.3 ms to
create at import, eight of them 10 ms of every command's start-up (make bench)."""


from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, Union


class Mark(NamedTuple):
    """A cell with a verdict: green or red on a terminal, the text alone elsewhere."""

    text: str
    ok: bool


class Wide(NamedTuple):
    """A cell with a longer form (a formula with its numbers) where the format has room."""

    text: str
    wide: str


class Pair(NamedTuple):
    """Two values sharing a cell (a value and its difference): side by side where there is
    room, one above the other where there is not."""

    first: str
    second: str


Cell = Union[str, Mark, Wide, Pair]


class Section(NamedTuple):
    """A row that heads the rows below it (bold, spanning nothing else)."""

    title: str


class Column(NamedTuple):
    header: str
    numeric: bool = False  # right-aligned and never folded across lines
    drop: int = 0  # where a table is too wide: 0 always shown, else the highest goes first


class Table(NamedTuple):
    title: str  # "" for none
    columns: Sequence[Column]
    rows: Sequence[Sequence[Cell] | Section]
    heading: int = 2  # its title's markdown heading level
    only: str = ""  # the one format it is for ("" = every format)


TextStyle = Literal["notes", "title", "steps", "lines", "chart"]


class Text(NamedTuple):
    """Lines of text. notes: a table's footer (bullets in markdown, wrapped on a terminal);
    title: a document heading; steps: a titled list (a derivation); lines: verbatim (one per
    file, for grep and CI logs); chart: pre-formatted (a code block in markdown)."""

    lines: Sequence[str]
    style: TextStyle = "notes"
    title: str = ""
    only: str = ""  # the one format it is for ("" = every format)


Block = Union[Table, Text]


class Doc(NamedTuple):
    data: Any  # what --format json prints
    blocks: Sequence[Block] = ()

    def blocks_for(self, fmt: str) -> list[Block]:
        return [b for b in self.blocks if b.only in ("", fmt)]
