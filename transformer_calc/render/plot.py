"""The training step's memory timeline (costs/timeline.py) as a chart: plain text for the
terminal, or a small self-contained SVG. One chart, two renderers over the same columns:
bytes allocated per GPU against the step's op groups, the phases marked, the peak pointed
at, and the GPU's capacity as a line where one is given."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, NamedTuple

from transformer_calc.render.units import human_bytes

if TYPE_CHECKING:
    from transformer_calc.costs.timeline import Point, Timeline

EIGHTHS = " ▁▂▃▄▅▆▇█"
HELD, TRANSIENT, CAPACITY, OVER = "█", "░", "─", "━"
LEGEND = (f"{HELD} allocated after each op group   {TRANSIENT} its transient high point   "
          "| phase boundaries")
SHORT_LEGEND = f"{HELD} allocated  {TRANSIENT} transient  | phases"
MIN_WIDTH, HEIGHT = 20, 14
SHORT = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}


class Chart(NamedTuple):
    """What both renderers draw: a title, the points, the top of the y axis, its unit, the
    capacity (0: none) and the peak's point."""

    title: str
    points: tuple[Point, ...]
    top: int
    unit: tuple[int, str]  # (bytes per unit, its name)
    capacity: int
    capacity_label: str
    peak: int  # index of the highest point


def chart(timeline: Timeline, title: str, capacity: int = 0, capacity_label: str = ""
          ) -> Chart:
    points = timeline.points
    peak = max(range(len(points)), key=lambda i: points[i].peak)
    top = max(points[peak].peak, capacity, 1)
    unit = (1 << 30, "GiB") if top >= 1 << 30 else (1 << 20, "MiB")
    return Chart(title, points, top, unit, capacity, capacity_label, peak)


def _columns(n: int, width: int) -> list[range]:
    """The points each of ``width`` columns shows: a run of them when there are more points
    than columns, one point over several columns when there are fewer."""
    return [range(c * n // width, max(c * n // width + 1, (c + 1) * n // width))
            for c in range(width)]


def _cell(held: float, high: float, lo: float, step: float) -> str:
    """The character of a cell spanning [lo, lo + step) of the y axis."""
    if held >= lo + step:
        return HELD
    if held > lo:
        return EIGHTHS[max(1, round(8 * (held - lo) / step))]
    return TRANSIENT if high > lo else " "


def text(c: Chart, width: int) -> str:
    """The chart in ``width`` columns of plain text (unicode blocks), axes labelled."""
    div, name = c.unit
    label_w = max(len(f"{c.top / div:.1f}"), 4) + 1
    plot_w = max(width - label_w - 2 - (len(c.capacity_label) + 1 if c.capacity else 0),
                 MIN_WIDTH)
    cols = _columns(len(c.points), plot_w)
    held = [c.points[r[-1]].allocated for r in cols]
    high = [max(c.points[i].peak for i in r) for r in cols]
    step = c.top / HEIGHT
    cap_row = min(int(c.capacity / step), HEIGHT - 1) if c.capacity else -1
    peak_row = min(int(c.points[c.peak].peak / step), HEIGHT - 1)
    bounds = [i for i in range(1, plot_w) if c.points[cols[i][0]].phase
              != c.points[cols[i - 1][0]].phase]
    lines = [c.title, LEGEND if len(LEGEND) <= width else SHORT_LEGEND, f"{name:>{label_w}}"]
    for row in reversed(range(HEIGHT)):
        lo = row * step
        cells = [_cell(held[i], high[i], lo, step) for i in range(plot_w)]
        for i in bounds:
            cells[i] = "|" if cells[i] == " " else cells[i]
        if row == cap_row:  # drawn over the bars too
            cells = [CAPACITY if ch in (" ", "|") else OVER for ch in cells]
        value = c.capacity if row == cap_row else c.points[c.peak].peak if row == peak_row \
            else (row + 1) * step if row in (HEIGHT - 1, HEIGHT // 2 - 1) else None
        tick = "" if value is None else f"{value / div:.1f}"
        end = f" {c.capacity_label}" if row == cap_row else ""
        lines.append(f"{tick:>{label_w}} ┤{''.join(cells)}{end}")
    lines.append(f"{'0':>{label_w}} └{'─' * plot_w}")
    full = max(width - label_w - 2, plot_w)  # the last phase's name may run past the plot
    names = [" "] * full
    for start in [0, *bounds]:
        phase = c.points[cols[start][0]].phase
        room = next((b for b in bounds if b > start), full + 1) - start - 1
        for k, ch in enumerate(phase if room >= len(phase) else SHORT[phase][:max(room, 1)]):
            if start + k < full:
                names[start + k] = ch
    lines.append(f"{'':>{label_w}}  {''.join(names).rstrip()}")
    at = next(i for i, r in enumerate(cols) if c.peak in r)
    p = c.points[c.peak]
    notes = [f"peak {human_bytes(p.peak)} {p.when} ({p.step})"]
    if len(notes[0]) > full:  # a narrow terminal: the bytes, then where, as much as fits
        notes = [f"peak {human_bytes(p.peak)}", p.step[:full]]
    lines.append(f"{'':>{label_w}}  {' ' * at}▲")
    lines += [f"{'':>{label_w}}  {' ' * max(min(at, full - len(n)), 0)}{n}" for n in notes]
    axis = f"op groups of one training step, in order ({len(c.points)} points) →"
    lines.append(f"{'':>{label_w}}  {axis if len(axis) <= full else 'op groups →'}")
    return "\n".join(lines) + "\n"


SVG_W, SVG_H = 760, 360
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 40, 56


def svg(c: Chart) -> str:
    """The chart as a self-contained SVG: every string in it escaped."""
    div, name = c.unit
    n = len(c.points)
    w, h = SVG_W - LEFT - RIGHT, SVG_H - TOP - BOTTOM

    def x(i: float) -> float:
        return LEFT + w * i / n

    def y(v: float) -> float:
        return TOP + h * (1 - v / c.top)

    held = " ".join(f"{x(i):.1f},{y(p.allocated):.1f} {x(i + 1):.1f},{y(p.allocated):.1f}"
                    for i, p in enumerate(c.points))
    bars = "".join(f'<rect x="{x(i):.1f}" y="{y(p.peak):.1f}" width="{w / n:.2f}" '
                   f'height="{y(0) - y(p.peak):.2f}" class="transient"/>'
                   for i, p in enumerate(c.points) if p.peak > p.allocated)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_W}" height="{SVG_H}" '
           f'viewBox="0 0 {SVG_W} {SVG_H}" font-family="sans-serif" font-size="11">',
           f"<title>{escape(c.title)}</title>",
           "<style>.transient{fill:#f4c27a}.held{fill:#3b6ea8;stroke:none}"
           ".axis{stroke:#333}.bound{stroke:#999;stroke-dasharray:3 3}"
           ".cap{stroke:#c0392b;stroke-dasharray:6 3}</style>",
           f'<text x="{LEFT}" y="16" font-size="13">{escape(c.title)}</text>', bars,
           f'<polygon class="held" points="{x(0):.1f},{y(0):.1f} {held} '
           f'{x(n):.1f},{y(0):.1f}"/>',
           f'<line class="axis" x1="{LEFT}" y1="{y(0):.1f}" x2="{LEFT + w}" y2="{y(0):.1f}"/>',
           f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{y(0):.1f}"/>']
    for k in range(5):
        v = c.top * k / 4
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">'
                   f"{v / div:.1f}</text>")
    out.append(f'<text x="12" y="{TOP + h / 2:.1f}" transform="rotate(-90 12 {TOP + h / 2:.1f})'
               f'" text-anchor="middle">{escape(name)} allocated per GPU</text>')
    starts = [i for i in range(n) if i == 0 or c.points[i].phase != c.points[i - 1].phase]
    for i in starts:
        if i:
            out.append(f'<line class="bound" x1="{x(i):.1f}" y1="{TOP}" x2="{x(i):.1f}" '
                       f'y2="{y(0):.1f}"/>')
        out.append(f'<text x="{x(i) + 3:.1f}" y="{y(0) + 14:.1f}">'
                   f"{escape(c.points[i].phase)}</text>")
    out.append(f'<text x="{LEFT + w / 2:.1f}" y="{SVG_H - 8}" text-anchor="middle">op groups '
               "of one training step, in order</text>")
    if c.capacity:
        out.append(f'<line class="cap" x1="{LEFT}" y1="{y(c.capacity):.1f}" x2="{LEFT + w}" '
                   f'y2="{y(c.capacity):.1f}"/><text x="{LEFT + w - 4}" '
                   f'y="{y(c.capacity) - 4:.1f}" text-anchor="end">'
                   f"{escape(c.capacity_label)}</text>")
    p = c.points[c.peak]
    px, py = x(c.peak + 0.5), y(p.peak)
    anchor = "end" if px > LEFT + w / 2 else "start"
    out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="#c0392b"/>'
               f'<text x="{px + (-6 if anchor == "end" else 6):.1f}" y="{py + 4:.1f}" '
               f'text-anchor="{anchor}">'
               f"{escape(f'peak {human_bytes(p.peak)} {p.when} ({p.step})')}</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
