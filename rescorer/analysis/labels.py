"""Labels on a map that do not overlap, and what a figure shows, as data.

:func:`place_labels` puts each label, in priority order, at the first place around its point
where it overlaps no label placed before and no labelled point, inside the axes, and where no
leader line crosses a label (its own to a label placed before, or one drawn before through it);
a label with no such place within reach is left out. So a dense cluster gets a few labels and
the rest of the map gets the others: a spread-out subset, not a blob. Deterministic: no
randomness, no iteration to a tolerance; the same map gives the same labels.

:func:`figure_record` reads back from the figure objects what was drawn (points, labels and
their boxes, titles, axis labels), for the JSON file written beside each PNG.

:func:`watermark` writes a note across a figure (a model that has not learned), whole.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

GAP = 3.0  # pixels between a point and its label
PAD = 1.0  # pixels kept free around each label
DOT = 3.0  # half the side of the square kept free around a labelled point


@dataclass(frozen=True)
class Placed:
    index: int  # the point's index in the caller's arrays
    box: tuple[float, float, float, float]  # the label's x0, y0, x1, y1 in pixels
    moved: bool  # placed away from its point, with a leader line to it


def _candidates(w: float, h: float, rings: int) -> np.ndarray:
    """Lower-left corners (K, 2) of a w x h label around a point at (0, 0), nearest first:
    beside the point (right, left, above, below, the corners), then rings further out."""
    g = GAP
    near = [
        (g, -h / 2),
        (-w - g, -h / 2),
        (-w / 2, g),
        (-w / 2, -h - g),
        (g, g),
        (-w - g, g),
        (g, -h - g),
        (-w - g, -h - g),
    ]
    far = []
    for ring in range(1, rings + 1):
        d = ring * 1.5 * h
        for k in range(16):
            a = 2 * math.pi * k / 16
            cx = math.cos(a) * (d + w / 2 + g)
            cy = math.sin(a) * (d + h / 2 + g)
            far.append((cx - w / 2, cy - h / 2))
    return np.array(near + far, dtype=np.float64)


def place_labels(
    ax: Axes,
    xy: np.ndarray,
    texts: Sequence[str],
    order: Sequence[int],
    *,
    limit: int | None = None,
    rings: int = 3,
    skip_covered: bool = True,
    first_style: dict[str, Any] | None = None,
    **style: Any,
) -> list[Placed]:
    """Label points ``xy`` (n, 2, data coordinates) with ``texts``, trying them in ``order``
    until ``limit`` labels are placed. A point under a label placed before is skipped when
    ``skip_covered``. The first label of ``order`` gets ``first_style`` on top of ``style``
    (``Axes.annotate`` keywords) and goes before the others.

    The axes' limits and the figure's layout must be final: places are found in pixels."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    frame = ax.get_window_extent(renderer)
    points = ax.transData.transform(np.asarray(xy, dtype=np.float64))  # (n, 2) pixels
    boxes = np.zeros((0, 4))  # placed labels and labelled points: x0, y0, x1, y1
    leaders: list[tuple[float, float, float, float]] = []  # point, then label centre (pixels)
    placed: list[Placed] = []
    to_points = 72.0 / fig.dpi
    for rank, i in enumerate(order):
        if limit is not None and len(placed) >= limit:
            break
        px, py = points[i]
        if not (frame.x0 <= px <= frame.x1 and frame.y0 <= py <= frame.y1):
            continue
        covered = (
            (boxes[:, 0] <= px) & (px <= boxes[:, 2]) & (boxes[:, 1] <= py) & (py <= boxes[:, 3])
        )
        if skip_covered and rank > 0 and covered.any():
            continue
        kw = {**style, **(first_style or {})} if rank == 0 else style
        probe = ax.text(0, 0, texts[i], ha="left", va="bottom", **kw)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        pad = PAD + (4.0 if kw.get("bbox") else 0.0)  # a drawn box reaches beyond the text
        w, h = extent.width + 2 * pad, extent.height + 2 * pad
        found = _first_free(px, py, w, h, rings, frame, boxes, leaders)
        if found is None:
            continue
        x0, y0, centre, moved = found
        leader = {"arrowstyle": "-", "color": "0.45", "lw": 0.5, "shrinkA": 0, "shrinkB": 2}
        ax.annotate(
            texts[i],
            xy[i],
            xytext=((x0 + pad - px) * to_points, (y0 + pad - py) * to_points),
            textcoords="offset points",
            ha="left",
            va="bottom",
            arrowprops=leader if moved else None,
            **kw,
        )
        box = (x0, y0, x0 + w, y0 + h)
        dot = (px - DOT, py - DOT, px + DOT, py + DOT)
        boxes = np.vstack([boxes, box, dot])
        if moved:
            leaders.append((px, py, *centre))
        placed.append(Placed(int(i), box, moved))
    return placed


def _first_free(
    px: float,
    py: float,
    w: float,
    h: float,
    rings: int,
    frame: Any,
    boxes: np.ndarray,
    leaders: list[tuple[float, float, float, float]],
) -> tuple[float, float, tuple[float, float], bool] | None:
    """The first of the places around point (px, py) (pixels) for a label ``w`` x ``h``
    pixels that is inside ``frame``, over none of ``boxes`` (M, 4), whose leader line crosses
    none of them and which no leader drawn before (``leaders``) crosses: its lower-left corner,
    its centre and whether it is beyond the eight places beside the point (a leader line to
    it); None if there is none."""
    corners = _candidates(w, h, rings) + np.array([px, py])  # (K, 2)
    x0, y0 = corners[:, 0], corners[:, 1]
    x1, y1 = x0 + w, y0 + h
    inside = (x0 >= frame.x0) & (x1 <= frame.x1) & (y0 >= frame.y0) & (y1 <= frame.y1)
    clash = (
        (x0[:, None] < boxes[None, :, 2])
        & (x1[:, None] > boxes[None, :, 0])
        & (y0[:, None] < boxes[None, :, 3])
        & (y1[:, None] > boxes[None, :, 1])
    ).any(axis=1)
    # A leader line (from the label's centre to its point, beyond the eight places beside
    # it) crossing another label would make it unclear which point a label names: neither
    # this label's leader may cross a label placed before, nor this label a leader drawn
    # before (checked exactly, not at sample points along the line).
    point = np.array([[px, py]])
    centres = corners + np.array([w / 2, h / 2])  # (K, 2)
    crossed = segments_cross_boxes(np.repeat(point, len(corners), axis=0), centres, boxes)
    crossed[:8] = False  # beside the point: no leader line
    cand = np.stack([x0, y0, x1, y1], axis=1)  # (K, 4)
    if leaders:
        ends = np.array(leaders)  # (L, 4): point, then label centre
        on = boxes_cross_segments(cand, ends[:, :2], ends[:, 2:])
        crossed |= on
    free = np.flatnonzero(inside & ~clash & ~crossed)
    if len(free) == 0:
        return None
    k = int(free[0])
    centre = (float(centres[k, 0]), float(centres[k, 1]))
    return float(x0[k]), float(y0[k]), centre, k >= 8


def segments_cross_boxes(starts: np.ndarray, ends: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """(K,) bool: segment k (``starts[k]`` to ``ends[k]``, pixels) passes through the inside of
    any of ``boxes`` (M, 4: x0, y0, x1, y1). Liang-Barsky clipping: the segment's parameter
    interval inside each box, non-empty when it crosses it."""
    if len(boxes) == 0 or len(starts) == 0:
        return np.zeros(len(starts), dtype=bool)
    return np.asarray(_clip(starts, ends, boxes).any(axis=1))


def boxes_cross_segments(boxes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """(K,) bool: box k (``boxes`` (K, 4)) has any of the segments (``starts``, ``ends``:
    (L, 2)) passing through its inside."""
    if len(boxes) == 0 or len(starts) == 0:
        return np.zeros(len(boxes), dtype=bool)
    return np.asarray(_clip(starts, ends, boxes).any(axis=0))


def _clip(starts: np.ndarray, ends: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """(S, M) bool: segment s crosses the open box m (a positive length inside it)."""
    p0 = starts[:, None, :]  # (S, 1, 2)
    d = (ends - starts)[:, None, :]  # (S, 1, 2)
    lo, hi = boxes[None, :, :2], boxes[None, :, 2:]  # (1, M, 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_lo = (lo - p0) / d  # (S, M, 2): where each axis enters and leaves the slab
        t_hi = (hi - p0) / d
    t_in = np.where(d != 0, np.minimum(t_lo, t_hi), -np.inf)
    t_out = np.where(d != 0, np.maximum(t_lo, t_hi), np.inf)
    # parallel to an axis: inside the slab on that axis, or never
    parallel_outside = (d == 0) & ((p0 <= lo) | (p0 >= hi))
    enter = np.maximum(t_in.max(axis=2), 0.0)
    leave = np.minimum(t_out.min(axis=2), 1.0)
    return (enter < leave - 1e-9) & ~parallel_outside.any(axis=2)


def _round(values: Any, digits: int = 4) -> Any:
    """Numbers for JSON: a (nested) list of floats rounded to ``digits`` decimals."""
    return np.round(np.asarray(values, dtype=np.float64), digits).tolist()


def figure_record(fig: Figure, names: Mapping[int, Sequence[str]] | None = None) -> dict[str, Any]:
    """What ``fig`` shows, read from its artists: per axes its title, axis labels, frame (pixels),
    the points of each of its scatter plots (data coordinates, in drawing order) and its texts
    (text, box in pixels; for a label, the point it names and whether a leader line joins
    them). ``names[k]``: what each point of the first scatter plot of axes k is (a word, a
    phrase)."""
    from matplotlib.text import Annotation, Text

    fig.canvas.draw()  # boxes as they are drawn
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    axes = []
    for k, ax in enumerate(fig.axes):
        texts = []
        for t in ax.texts:
            b = Text.get_window_extent(t, renderer)  # the text alone, not its leader line
            item: dict[str, Any] = {
                "text": t.get_text(),
                "box": _round([b.x0, b.y0, b.x1, b.y1], 1),
            }
            if isinstance(t, Annotation):
                item["point"] = _round(t.xy)
                item["leader"] = t.arrow_patch is not None
            texts.append(item)
        f = ax.get_window_extent(renderer)
        entry: dict[str, Any] = {
            "title": ax.get_title(),
            "xlabel": ax.get_xlabel(),
            "ylabel": ax.get_ylabel(),
            "frame": _round([f.x0, f.y0, f.x1, f.y1], 1),
            "scatters": [_round(c.get_offsets()) for c in ax.collections],
            "texts": texts,
        }
        if names is not None and k in names:
            entry["names"] = list(names[k])
        axes.append(entry)
    size = [round(v) for v in fig.get_size_inches() * fig.dpi]
    return {"title": fig.get_suptitle(), "size": size, "axes": axes}


WATERMARK_SIZE = 22  # points, where the note fits the figure at that size
WATERMARK_MARGIN = 0.94  # the share of the figure's width and height the note may take


def watermark(fig: Any, note: str) -> None:
    """``note`` across the middle of ``fig``, turned 25 degrees, red and half transparent, in
    the largest size up to WATERMARK_SIZE at which the whole of it lies inside the figure (at
    22 points the verdict of a 7-inch scatter ran off both edges)."""
    text = fig.text(0.5, 0.5, note, ha="center", va="center", rotation=25,
                    fontsize=WATERMARK_SIZE, color="tab:red", alpha=0.45, weight="bold",
                    zorder=10)  # fmt: skip
    box = text.get_window_extent(renderer=fig.canvas.get_renderer())  # the turned text's
    room = WATERMARK_MARGIN * min(fig.bbox.width / box.width, fig.bbox.height / box.height)
    if room < 1:
        text.set_fontsize(WATERMARK_SIZE * room)
