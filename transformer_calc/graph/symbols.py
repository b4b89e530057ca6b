"""Symbolic sizes: each tensor dimension is a polynomial in named symbols (B, T, E, H, ...)
carried with its value, so a trace gives both the bytes and the formula they came from."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

# a monomial: the symbols multiplied, sorted, with repetition (("B", "T", "T") is B·T²)
Monomial = tuple[str, ...]
Coef = int | Fraction  # RoPE's half head is dh/2


@dataclass(frozen=True)
class Poly:
    """A polynomial with integer coefficients: terms as (monomial, coefficient), sorted."""

    terms: tuple[tuple[Monomial, Coef], ...]

    @staticmethod
    def of(terms: dict[Monomial, Coef]) -> Poly:
        return Poly(tuple(sorted((m, c) for m, c in terms.items() if c)))

    def __add__(self, other: Poly) -> Poly:
        out = dict(self.terms)
        for m, c in other.terms:
            out[m] = out.get(m, 0) + c
        return Poly.of(out)

    def __mul__(self, other: Poly) -> Poly:
        out: dict[Monomial, Coef] = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                m = tuple(sorted(m1 + m2))
                out[m] = out.get(m, 0) + c1 * c2
        return Poly.of(out)

    def evaluate(self, values: dict[str, int]) -> int:
        total: Coef = 0
        for m, c in self.terms:
            for s in m:
                c *= values[s]
            total += c
        return int(total)

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m, c in sorted(self.terms, key=lambda t: (-len(t[0]), t[0])):
            powers = []
            for s in dict.fromkeys(m):
                k = m.count(s)
                powers.append(s if k == 1 else f"{s}^{k}")
            factors = ([str(c)] if c != 1 or not m else []) + powers
            parts.append("·".join(factors))
        return " + ".join(parts)


@dataclass(frozen=True)
class Dim:
    """One size: its value and the polynomial it is (``Dim.sym("T", 128)``)."""

    value: int
    poly: Poly

    @staticmethod
    def sym(name: str, value: int) -> Dim:
        return Dim(value, Poly((((name,), 1),)))

    @staticmethod
    def const(n: int) -> Dim:
        return Dim(n, Poly.of({(): n}))

    def __mul__(self, other: Dim | int) -> Dim:
        o = other if isinstance(other, Dim) else Dim.const(other)
        return Dim(self.value * o.value, self.poly * o.poly)

    __rmul__ = __mul__

    def halved(self) -> Dim:
        """Half of an even size (RoPE's halves of a head)."""
        return Dim(self.value // 2, self.poly * Poly((((), Fraction(1, 2)),)))

    def __add__(self, other: Dim | int) -> Dim:
        o = other if isinstance(other, Dim) else Dim.const(other)
        return Dim(self.value + o.value, self.poly + o.poly)

    def __str__(self) -> str:
        return str(self.poly)


def product(dims: tuple[Dim, ...]) -> Dim:
    out = Dim.const(1)
    for d in dims:
        out = out * d
    return out
