"""Item / Breakdown: the one structure every output renders from.

A breakdown keeps leaves only. Subtotals and the total are computed from the leaves, so
``total == sum(item.total for item in items)`` holds by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class Item(NamedTuple):
    """One leaf: a tensor (or a group of same-shaped tensors) and the formula of its size.

    ``count`` is per occurrence; an item inside a layer occurs ``repeat`` times (the stack's
    layer count). ``active`` is the part of ``count`` one token uses (mixture of experts);
    ``None`` means all of it. A NamedTuple rather than a frozen dataclass: just as immutable,
    and several times cheaper to build, which the core's throughput depends on (make bench).
    """

    name: str  # stable dotted id, e.g. "decoder.attn.q.weight"
    count: int  # type: ignore[assignment]  # shadows tuple.count; the domain name wins
    formula: str  # symbolic, e.g. "d_model × (n_heads · d_head)"
    expr: str = ""  # the same with numbers, e.g. "768 × 768"
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


@dataclass(frozen=True)
class Breakdown:
    """An ordered list of items in one unit, with notes that explain choices made."""

    model: str
    unit: str  # "params", "bytes", "flops"
    items: tuple[Item, ...]
    notes: tuple[str, ...] = ()
    extra: dict[str, int | float | str] = field(default_factory=dict)
    total: int = field(init=False)  # Σ item totals, computed once: it is read a lot

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", sum(i.count * i.repeat for i in self.items))

    @property
    def active_total(self) -> int:
        return sum(i.active_total for i in self.items)

    def layer_total(self, stack: str) -> int:
        """One layer of a stack: the per-layer subtotal."""
        return sum(i.count for i in self.items if i.stack == stack)

    def get(self, name: str) -> Item:
        for i in self.items:
            if i.name == name:
                return i
        raise KeyError(name)

    def sum_prefix(self, prefix: str) -> int:
        """Total of the items whose name starts with ``prefix`` (e.g. "decoder.attn.")."""
        return sum(i.total for i in self.items if i.name.startswith(prefix))

    @property
    def stacks(self) -> tuple[str, ...]:
        seen: list[str] = []
        for i in self.items:
            if i.stack and i.stack not in seen:
                seen.append(i.stack)
        return tuple(seen)
