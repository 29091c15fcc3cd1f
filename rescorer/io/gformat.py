"""``%g`` of many numbers at once with numpy (:func:`g_texts`), byte for byte what Python's
``f"{v:g}"`` writes, and the "prob" column's texts (:func:`prob_texts`, ``format_prob`` of
each log-probability): the formatting half of a scoring worker's fast path
(:mod:`rescorer.io.columns` puts the texts into the lines)."""

from __future__ import annotations

import math

import numpy as np

from rescorer.constants import LOGP_FLOOR

G_WIDTH = 13  # the longest text of "%g": "-1.23457e-308"
_POW10 = 10.0 ** np.arange(-10, 60)  # _POW10[k + 10] = 10**k
_MIN_EXP, _MAX_EXP = -45, 5  # the decimal exponents g_texts writes itself
# A row's bytes are picked from its "alphabet": its six digits, '0', '.', 'e', '-', the two
# digits of its exponent; which ones, in which places, depends only on the exponent e and the
# count of significant digits (1-6): a layout per (e, count), made once.
_ZERO, _DOT, _E, _MINUS, _TENS, _ONES = range(6, 12)


def _layout(e: int, nz: int) -> list[int]:
    """Where each byte of ``f"{v:g}"`` comes from in the alphabet, for a value with decimal
    exponent ``e`` and ``nz`` significant digits."""
    digits = list(range(nz))
    if e < -4:  # scientific: d[.ddddd]e-XX
        return [0, *([_DOT, *digits[1:]] if nz > 1 else []), _E, _MINUS, _TENS, _ONES]
    if e < 0:  # 0.000ddd
        return [_ZERO, _DOT, *[_ZERO] * (-e - 1), *digits]
    whole = list(range(e + 1))  # e+1 digits, then the rest after a point, if any
    return whole + ([_DOT, *digits[e + 1 :]] if nz > e + 1 else [])


def _layouts() -> tuple[np.ndarray, np.ndarray]:
    """Every layout, (K, G_WIDTH) alphabet indices (padded) and (K,) lengths; layout
    (e - _MIN_EXP) * 6 + nz - 1."""
    table = [_layout(e, nz) for e in range(_MIN_EXP, _MAX_EXP + 1) for nz in range(1, 7)]
    index = np.zeros((len(table), G_WIDTH), dtype=np.intp)
    for k, layout in enumerate(table):
        index[k, : len(layout)] = layout
    return index, np.array([len(layout) for layout in table], dtype=np.int64)


_LAYOUT, _LAYOUT_LEN = _layouts()


_DIGITS3 = np.array([list(f"{k:03d}".encode()) for k in range(1000)], dtype=np.uint8)
_TRAILING3 = np.array([3 - len(f"{k:03d}".rstrip("0")) for k in range(1000)], dtype=np.int64)


def _g_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`g_texts` where numpy can promise it: rows (N, G_WIDTH) uint8, lengths (N,), and
    (U,) the values it cannot promise (their rows are to be written by Python)."""
    safe = (values >= 1e-44) & (values < 1e5)  # (N,) else Python writes it
    v = np.where(safe, values, 1.0)
    e = np.floor(np.log10(v)).astype(np.int64)  # (N,) the decimal exponent, maybe one off
    x = v * _POW10[15 - e]  # (N,) six digits before the point, if e is right
    e += (x >= 1e6).astype(np.int64) - (x < 1e5).astype(np.int64)
    e = np.clip(e, _MIN_EXP, _MAX_EXP)
    x = v * _POW10[15 - e]
    digits = np.rint(x)  # the rounding of the exact value unless x is too near a half
    safe &= np.abs(x - np.floor(x) - 0.5) > 1e-6
    safe &= (x >= 1e5) & (digits < 1e6)  # 999999.5 and up: the exponent moves
    d = np.where(safe, digits, 1e5).astype(np.int64)  # (N,) 100000..999999
    high, low = np.divmod(d, 1000)  # (N,) each: its first and last three digits
    alphabet = np.empty((len(values), 12), dtype=np.uint8)  # (N,12)
    alphabet[:, 0:3] = _DIGITS3[high]
    alphabet[:, 3:6] = _DIGITS3[low]
    alphabet[:, _ZERO : _MINUS + 1] = np.frombuffer(b"0.e-", dtype=np.uint8)
    alphabet[:, _TENS] = 48 + (-e) // 10 % 10
    alphabet[:, _ONES] = 48 + (-e) % 10
    zeros = np.where(low == 0, 3 + _TRAILING3[high], _TRAILING3[low])  # (N,) trailing zeros
    layout = (e - _MIN_EXP) * 6 + 5 - zeros  # (N,)
    rows = np.take_along_axis(alphabet, _LAYOUT[layout], axis=1)  # (N, G_WIDTH)
    return rows, _LAYOUT_LEN[layout], np.flatnonzero(~safe)


def _write_python(rows: np.ndarray, lens: np.ndarray, at: np.ndarray, values: list[float]) -> None:
    """Rows ``at`` (U,) made ``f"{v:g}"`` of ``values`` (U,) by Python itself."""
    for i, value in zip(at.tolist(), values, strict=True):
        text = f"{value:g}".encode("ascii")
        rows[i, : len(text)] = np.frombuffer(text[:G_WIDTH], dtype=np.uint8)
        lens[i] = len(text)


def g_texts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``f"{v:g}"`` of each value (N,) float64 as rows of ASCII bytes (N, G_WIDTH) uint8 and
    their lengths (N,), made with numpy instead of one Python call per value; byte for byte
    what Python writes (a value whose sixth digit's rounding is too close to call in float64,
    or one outside [1e-44, 1e5), is written by Python itself)."""
    rows, lens, unsafe = _g_rows(values)
    _write_python(rows, lens, unsafe, values[unsafe].tolist())
    return rows, lens


def prob_texts(logp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`g_texts` of ``math.exp(max(v, LOGP_FLOOR))`` of each log-probability (N,): the
    text of ``format_prob``. numpy's exp may differ from math.exp in the last bit, which
    changes no text that :func:`_g_rows` promises (it keeps 1e-12 of the value away from
    every rounding boundary); the rest is written by Python from math.exp."""
    with np.errstate(over="ignore"):  # past 709.78: math.exp's OverflowError below
        rows, lens, unsafe = _g_rows(np.exp(np.maximum(logp, LOGP_FLOOR)))
    exact = [math.exp(max(v, LOGP_FLOOR)) for v in logp[unsafe].tolist()]
    _write_python(rows, lens, unsafe, exact)
    return rows, lens
