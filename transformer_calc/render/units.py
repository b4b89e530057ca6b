"""Human units (124.4M, 15.00 GiB): they exist only here; JSON carries exact integers."""

from __future__ import annotations


def human(n: float, unit: str = "") -> str:
    """124439808 -> '124.4M'; 1557611200 -> '1.56B'."""
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            v = n / div
            return f"{v:.3g}{suffix}{unit}" if v < 100 else f"{v:.1f}{suffix}{unit}"
    return f"{n:g}{unit}"


def human_bytes(n: float) -> str:
    """Binary units, as memory is sold and reported: 16,106,127,360 -> '15.00 GiB'."""
    for div, suffix in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(n) >= div:
            return f"{n / div:.2f} {suffix}"
    return f"{n:g} B"


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.2f}%" if whole else "-"


def error_pct(estimate: int, exact: int) -> float:
    return 100.0 * (estimate - exact) / exact if exact else 0.0


def sci(x: float) -> str:
    return f"{x:.3e}"
