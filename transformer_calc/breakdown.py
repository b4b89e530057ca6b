"""Item / Breakdown: the one structure every output renders from.

A breakdown keeps leaves only. Subtotals and the total are computed from the leaves, so
``total == sum(item.total for item in items)`` holds by construction.

Speed (make bench): the core builds a breakdown per configuration, often thousands per second,
and most of them are only ever asked for their total. So the builders append plain tuples in
``Item``'s field order ("rows"), the total is summed from the rows, and ``Item`` objects (with
the numbers written into each formula) are made only when someone reads ``items``.
"""


import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple


class Item(NamedTuple):
    """One leaf: a tensor (or a group of same-shaped tensors) and the formula of its size.

    ``count`` is per occurrence; an item inside a layer occurs ``repeat`` times (the stack's
    layer count). ``active`` is the part of ``count`` one token uses (mixture of experts);
    ``None`` means all of it. ``expr`` is the formula with the numbers in; builders leave it
    empty and the breakdown derives it from the formula and its symbols (see ``substitute``),
    so what is shown is what was computed.
    """

    name: str  # stable dotted id, e.g. "decoder.attn.q.weight"
    count: int  # type: ignore[assignment]  # shadows tuple.count; the domain name wins
    formula: str  # symbolic, e.g. "d_model × (n_heads · d_head)"
    expr: str = ""  # the same with numbers, e.g. "768 × (12 · 64)"
    repeat: int = 1
    stack: str = ""  # "encoder" / "decoder" / "" (outside the layers)
    note: str = ""
    active: int | None = None
    shape: tuple[int, ...] = ()  # one tensor's shape, where it is one (Adafactor needs it)

    @property
    def per_layer(self) -> bool:
        return bool(self.stack)

    @property
    def total(self) -> int:
        return self.count * self.repeat

    @property
    def active_total(self) -> int:
        return (self.count if self.active is None else self.active) * self.repeat


# A row: an Item's fields in order, not yet an Item (an Item is a row too). The sums below
# index rows directly: 0 name, 1 count, 4 repeat, 5 stack, 7 active.
Row = tuple
Symbols = Callable[[], Mapping[str, int]]

# A symbol is a word; a parenthesised remark that still has words after substitution is prose.
_WORD = r"[A-Za-z_][A-Za-z_0-9]*"
_REMARK = r"\s*\([^()]*[A-Za-z][^()]*\)"


def substitute(formula: str, symbols: Mapping[str, int]) -> str:
    """The formula with each known symbol replaced by its value, and parenthesised remarks
    that are still words dropped: "2 · d_model (scale + shift)" -> "2 · 768"."""

    def value(m: re.Match[str]) -> str:
        v = symbols.get(m.group())
        return m.group() if v is None else f"{v:,}" if v >= 100_000 else str(v)

    return re.sub(_REMARK, "", re.sub(_WORD, value, formula)).strip()


@dataclass(frozen=True, init=False)
class Breakdown:
    """An ordered list of items in one unit, with notes that explain choices made.

    ``rows`` may hold Items or plain tuples in Item's field order; read ``items`` for Items.
    ``symbols`` (called only when items are read) maps the formulas' symbols to this
    breakdown's values, from which each item's ``expr`` is written.
    """

    model: str
    unit: str  # "params", "bytes", "flops"
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = ()
    extra: dict[str, int | float | str] = field(default_factory=dict)
    symbols: Symbols | None = field(default=None, compare=False, repr=False)
    total: int = 0  # Σ item totals, computed once: it is read a lot

    def __init__(self, model: str, unit: str, rows: tuple[Row, ...], notes: tuple[str, ...] = (),
                 extra: dict[str, int | float | str] | None = None,
                 symbols: Symbols | None = None) -> None:
        # Frozen: attributes are set once, here, through __dict__ (a frozen dataclass's own
        # __init__ calls object.__setattr__ per field: 3x slower; make bench).
        total = sum([r[1] * r[4] for r in rows])  # count × repeat
        d = self.__dict__
        d["model"], d["unit"], d["rows"], d["notes"] = model, unit, rows, notes
        d["extra"] = {} if extra is None else extra
        d["symbols"], d["total"] = symbols, total

    @cached_property
    def items(self) -> tuple[Item, ...]:
        symbols = self.symbols() if self.symbols is not None else None
        out = []
        for r in self.rows:
            item = r if type(r) is Item else Item._make(r)
            if symbols is not None and not item.expr:
                item = item._replace(expr=substitute(item.formula, symbols))
            out.append(item)
        return tuple(out)

    @property
    def active_total(self) -> int:
        return sum([(r[1] if r[7] is None else r[7]) * r[4] for r in self.rows])

    def layer_total(self, stack: str) -> int:
        """One layer of a stack: the per-layer subtotal."""
        return sum([r[1] for r in self.rows if r[5] == stack])

    def get(self, name: str) -> Item:
        for i in self.items:
            if i.name == name:
                return i
        raise KeyError(name)

    def sum_prefix(self, prefix: str) -> int:
        """Total of the items whose name starts with ``prefix`` (e.g. "decoder.attn.")."""
        return sum([r[1] * r[4] for r in self.rows if r[0].startswith(prefix)])

    def sum_where(self, keep: Callable[[str], Any]) -> int:
        """Total of the items whose name ``keep`` accepts."""
        return sum([r[1] * r[4] for r in self.rows if keep(r[0])])

    @property
    def stacks(self) -> tuple[str, ...]:
        seen: list[str] = []
        for r in self.rows:
            if r[5] and r[5] not in seen:
                seen.append(r[5])
        return tuple(seen)
