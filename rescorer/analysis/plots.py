"""The paper's figures as PNG files (docs/analyses.md): Fig. 3 (RNN score against the table's),
Fig. 4 (word embeddings) and Fig. 5 (phrase representations c).

The 2-D maps use scikit-learn's Barnes-Hut t-SNE (the method the paper names), seeded, with PCA
initialisation so that a seed gives the same map on every run. matplotlib draws with its Agg
backend (no display needed). Both are optional dependencies (``pip install 'rescorer[analysis]'``)
and are imported only when a figure is drawn. Labels never overlap (labels.place_labels).

Beside each PNG goes a JSON file (``fig.png`` -> ``fig.json``): what the figure shows, read
back from its artists (labels.figure_record): per panel its title, axis labels, the points
drawn, the words or phrases they are, and the labels with their boxes.
"""

from __future__ import annotations

import contextlib
import html
import io
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rescorer.analysis.labels import figure_record, place_labels, watermark
from rescorer.analysis.sides import FORWARD_SIDES, Sides
from rescorer.batching import pad_batch
from rescorer.constants import FIRST_WORD_ID
from rescorer.errors import RescorerError
from rescorer.io.jsonfiles import write_json
from rescorer.io.outputs import atomic_path
from rescorer.io.progress import Progress, Stages
from rescorer.io.table import TableReader, split_tokens
from rescorer.model.encdec import EncoderDecoder
from rescorer.vocab import Vocab

if TYPE_CHECKING:
    from matplotlib.axes import Axes

DPI = 100
MISSING = "plot needs matplotlib and scikit-learn: pip install 'rescorer[analysis]'"
LABEL_SIZE = 8  # points: readable at 100% zoom at DPI 100
CENTRE_STYLE: dict[str, Any] = {  # the phrase a zoomed panel is about: red, bold, boxed
    "fontweight": "bold",
    "fontsize": 9,
    "color": "tab:red",
    "zorder": 4,
    "bbox": {"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "tab:red", "lw": 0.8},
}


def label(text: str) -> str:
    """A token or phrase as a label: Moses' escapes (&apos; &#124; ...) undone, and '$'
    escaped so matplotlib does not read it as maths."""
    return html.unescape(text).replace("$", r"\$")


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RescorerError(MISSING) from exc
    return plt


class _TsneLog(io.TextIOBase):
    """Where scikit-learn's t-SNE prints (verbose=2): each "Iteration N" line told to a
    Progress; the rest dropped."""

    def __init__(self, progress: Progress, iterations: int) -> None:
        self.progress, self.iterations = progress, iterations

    def write(self, text: str) -> int:
        for found in re.finditer(r"Iteration (\d+)", text):
            done = int(found[1])
            self.progress.update(done, min(1.0, done / self.iterations))
        return len(text)


def tsne_2d(
    points: np.ndarray,
    seed: int,
    perplexity: float = 30.0,
    *,
    stages: Stages | None = None,
    what: str = "points",
) -> np.ndarray:
    """Barnes-Hut t-SNE of points (n, d) to (n, 2), seeded; its iterations reported to a stage
    ``t-SNE map of WHAT`` of ``stages``."""
    try:
        from sklearn.manifold import TSNE
    except ImportError as exc:
        raise RescorerError(MISSING) from exc
    n = len(points)
    if n < 5:
        raise RescorerError(f"a 2-D map needs at least 5 points, got {n}")
    tsne = TSNE(
        n_components=2,
        method="barnes_hut",
        perplexity=min(perplexity, (n - 1) / 3),
        init="pca",
        random_state=seed,
        verbose=2 if stages is not None else 0,
    )
    data = points.astype(np.float32)
    # scikit-learn's own OpenMP threads, as many as torch's (--threads)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=torch.get_num_threads()):
        if stages is None:
            return np.asarray(tsne.fit_transform(data), dtype=np.float64)
        iterations = int(tsne.max_iter)
        progress = stages(f"t-SNE map of {what}", "iterations", f"of {iterations:,} at most")
        try:
            with contextlib.redirect_stdout(_TsneLog(progress, iterations)):
                return np.asarray(tsne.fit_transform(data), dtype=np.float64)
        finally:
            progress.close()


def record_path(path: str) -> str:
    """The JSON file beside a figure: ``fig.png`` -> ``fig.json`` (other names: + ``.json``)."""
    return (path[:-4] if path.lower().endswith(".png") else path) + ".json"


def _save(
    fig: Any, path: str, names: Mapping[int, Sequence[str]] | None = None, note: str | None = None
) -> None:
    """The PNG and, beside it, the JSON record of what it shows. ``note`` (a model that has not
    learned) is written across the picture, where no crop or caption can lose it, and kept in
    the record."""
    plt = _pyplot()
    if note:
        watermark(fig, note)
    record = figure_record(fig, names)
    if note:
        record["note"] = note
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=DPI, format="png")
    write_json(record_path(path), record, indent=None)
    plt.close(fig)


# ------------------------------------------------------------------------ Fig. 3: scatter
@dataclass(frozen=True)
class PairSample:
    src: list[str]
    tgt: list[str]
    table_p: np.ndarray  # (n,) the table's probability in the chosen column


def sample_pairs(
    path: str, size: int, seed: int, direct_column: int, stages: Stages | None = None
) -> PairSample:
    """A seeded uniform sample of ``size`` pairs of a table (reservoir sampling, one pass)."""
    rng = random.Random(seed)
    kept: list[tuple[str, str, float]] = []
    with TableReader(path, progress=stages.reading(path) if stages else None) as reader:
        for i, entry in enumerate(reader):
            if direct_column >= len(entry.scores):
                raise RescorerError(
                    f"{reader.name}:{entry.lineno}: {len(entry.scores)} scores, no column "
                    f"{direct_column} to compare with (--table-column counts from 0)"
                )
            item = (entry.src, entry.tgt, entry.scores[direct_column])
            if i < size:
                kept.append(item)
            else:
                j = rng.randint(0, i)
                if j < size:
                    kept[j] = item
    if not kept:
        raise RescorerError(f"{path}: no phrase pairs")
    return PairSample(
        [s for s, _, _ in kept], [t for _, t, _ in kept], np.array([p for _, _, p in kept])
    )


def correlations(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Pearson's r and Spearman's rho of two samples."""
    from scipy.stats import pearsonr, spearmanr

    return float(pearsonr(x, y)[0]), float(spearmanr(x, y)[0])


def plot_scatter(
    path: str,
    table_p: np.ndarray,
    rnn_logp: np.ndarray,
    title: str,
    probability: str = "p(e|f)",
    note: str | None = None,
) -> str:
    """Fig. 3: RNN ln p against the table's ln p, both ``probability`` (p(e|f), or an inverse
    model's p(f|e)); returns the caption line."""
    plt = _pyplot()
    x = np.log(np.clip(table_p, 1e-300, None))
    r, rho = correlations(x, rnn_logp)
    fig, ax = plt.subplots(figsize=(7, 6))
    ax.scatter(x, rnn_logp, s=4, alpha=0.3, color="tab:blue", linewidths=0)
    ax.set_xlabel(f"phrase table: ln {probability}")
    ax.set_ylabel(f"RNN Encoder-Decoder: ln {probability}")
    caption = f"{len(x):,} pairs, Pearson r = {r:.3f}, Spearman rho = {rho:.3f}"
    ax.set_title(f"{title}\n{caption}", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path, note=note)
    return caption


# --------------------------------------------------------------------- Fig. 4: embeddings
def embedding_rows(model: EncoderDecoder, side: str) -> np.ndarray:
    """The word embeddings (rows, E) of one side, bias included, as the model uses them."""
    layer = model.dec_input if side == "target" else model.enc_input
    with torch.no_grad():
        return (layer.embed.weight + layer.embed_bias).float().cpu().numpy()


def plot_words(
    path: str,
    panels: Sequence[tuple[str, np.ndarray, Vocab]],
    points: int,
    labels: int,
    seed: int,
    title: str,
    stages: Stages | None = None,
    note: str | None = None,
) -> list[int]:
    """Fig. 4: a t-SNE map per (side, embeddings, vocab) of its ``points`` most frequent words;
    up to ``labels`` of them named, the most frequent first, each where it overlaps no other
    label (so a dense cluster of frequent words gets a few names and the rest of the map the
    others). Returns the number of words named per panel."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(10 * len(panels), 10), squeeze=False, dpi=DPI)
    maps = []
    for ax, (side, emb, vocab) in zip(axes[0], panels, strict=True):
        n = min(points, len(vocab.words))
        ids = np.arange(FIRST_WORD_ID, FIRST_WORD_ID + n)  # ids are in frequency order
        xy = tsne_2d(emb[ids], seed, stages=stages, what=f"{n:,} {side} words")
        maps.append((ax, side, vocab.words[:n], xy))
        ax.scatter(xy[:, 0], xy[:, 1], s=3, color="0.65", linewidths=0)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"{side} words: the {n:,} most frequent", fontsize=11)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    named = []
    for ax, side, words, xy in maps:
        placed = place_labels(
            ax, xy, [label(w) for w in words], range(len(words)), limit=labels, rings=1,
            fontsize=LABEL_SIZE, color="0.1",
        )  # fmt: skip
        chosen = [p.index for p in placed]
        ax.scatter(xy[chosen, 0], xy[chosen, 1], s=5, color="tab:blue", linewidths=0)
        ax.set_title(
            f"{side} words: the {len(words):,} most frequent, {len(placed):,} named "
            "(the most frequent that fit)",
            fontsize=11,
        )
        named.append(len(placed))
    # Each panel's first scatter holds every word, in frequency order.
    _save(fig, path, {k: list(words) for k, (_, _, words, _) in enumerate(maps)}, note)
    return named


# ----------------------------------------------------------------- Fig. 5: phrase space
def long_phrase_sample(
    path: str,
    size: int,
    min_words: int,
    seed: int,
    stages: Stages | None = None,
    sides: Sides = FORWARD_SIDES,
) -> list[str]:
    """A seeded uniform sample of the distinct phrases of >= ``min_words`` words on the side of
    a table the model reads (``sides``: sources, or an inverse model's targets)."""
    rng = random.Random(seed)
    kept: list[str] = []
    seen: set[str] = set()  # long ones only; a table is sorted by source, not by target
    with TableReader(path, progress=stages.reading(path) if stages else None) as reader:
        for entry in reader:
            phrase = sides.given_of(entry)
            if phrase in seen or len(split_tokens(phrase)) < min_words:
                continue
            if len(seen) < size:
                kept.append(phrase)
            else:
                j = rng.randint(0, len(seen))
                if j < size:
                    kept[j] = phrase
            seen.add(phrase)
    return kept


@torch.inference_mode()
def summary_vectors(
    model: EncoderDecoder,
    src_vocab: Vocab,
    sources: Sequence[str],
    batch: int = 512,
    stages: Stages | None = None,
) -> np.ndarray:
    """The summary vectors c (n, H) of source phrases."""
    device = next(model.parameters()).device
    progress = stages("encoding", "phrases", "of the phrases") if stages else None
    out = []
    for start in range(0, len(sources), batch):
        ids = [src_vocab.encode_eos(split_tokens(s)) for s in sources[start : start + batch]]
        src_ids, src_lens = pad_batch(ids)  # (B,S), (B,)
        out.append(model.encode(src_ids.to(device), src_lens.to(device)).float().cpu().numpy())
        if progress is not None:
            done = min(start + batch, len(sources))
            progress.update(done, done / len(sources))
    if progress is not None:
        progress.close()
    return np.concatenate(out) if out else np.zeros((0, model.config.hidden_size))


def nearest(xy: np.ndarray, centre: int, k: int) -> np.ndarray:
    """Indices of the k points nearest to point ``centre`` in the map (itself first)."""
    d = ((xy - xy[centre]) ** 2).sum(axis=1)
    return np.argsort(d, kind="stable")[:k]


def _zoom_panel(ax: Axes, xy: np.ndarray, phrases: Sequence[str], members: np.ndarray) -> None:
    """The ``members`` of one region (the centre first): points, limits with room for labels."""
    pts = xy[members]
    ax.scatter(pts[:, 0], pts[:, 1], s=8, color="tab:blue", linewidths=0)
    ax.scatter(pts[:1, 0], pts[:1, 1], s=40, color="tab:red", linewidths=0, zorder=3)
    (x0, y0), (x1, y1) = pts.min(axis=0), pts.max(axis=0)
    dx, dy = max(x1 - x0, 1e-6), max(y1 - y0, 1e-6)
    ax.set_xlim(x0 - 0.45 * dx, x1 + 0.45 * dx)  # labels are wide: room on both sides
    ax.set_ylim(y0 - 0.12 * dy, y1 + 0.12 * dy)
    ax.set_xticks([])
    ax.set_yticks([])


def plot_phrases(
    path: str,
    phrases: Sequence[str],
    vectors: np.ndarray,
    zoom: Sequence[int],
    neighbours: int,
    seed: int,
    title: str,
    min_words: int = 4,
    stages: Stages | None = None,
    side: str = "source",
    note: str | None = None,
) -> None:
    """Fig. 5: the t-SNE map of phrases' c (n, H) with a zoomed panel around each phrase index
    in ``zoom``: its ``neighbours`` nearest points in the map, named where they fit, the centre
    phrase first, in bold on a white box."""
    plt = _pyplot()
    xy = tsne_2d(vectors, seed, stages=stages, what=f"{len(phrases):,} phrases")
    fig = plt.figure(figsize=(16, max(10, 5 * len(zoom))), dpi=DPI)
    grid = fig.add_gridspec(max(len(zoom), 1), 2, width_ratios=(1, 1.2))
    main = fig.add_subplot(grid[:, 0])
    main.scatter(xy[:, 0], xy[:, 1], s=3, color="0.6", linewidths=0)
    main.set_title(f"{len(phrases):,} {side} phrases of {min_words} or more words", fontsize=11)
    main.set_xticks([])
    main.set_yticks([])
    panels = []
    for row, centre in enumerate(zoom):
        members = nearest(xy, centre, neighbours)
        lo, hi = xy[members].min(axis=0), xy[members].max(axis=0)
        main.add_patch(plt.Rectangle(lo, *(hi - lo), fill=False, color="tab:red", linewidth=1))
        main.annotate(str(row + 1), hi, color="tab:red", fontsize=10)
        ax = fig.add_subplot(grid[row, 1])
        _zoom_panel(ax, xy, phrases, members)
        ax.set_title(f'{row + 1}: around "{label(phrases[centre])}"', fontsize=10)
        panels.append((ax, members))
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    for ax, members in panels:
        placed = place_labels(
            ax, xy[members], [label(phrases[i]) for i in members], range(len(members)),
            rings=6, skip_covered=False, fontsize=LABEL_SIZE, color="0.1",
            first_style=CENTRE_STYLE,
        )  # fmt: skip
        if len(placed) < len(members):
            ax.set_title(f"{ax.get_title()} ({len(placed)} of {len(members)} named)", fontsize=10)
    names = {0: list(phrases)}
    for k, (_, members) in enumerate(panels, start=1):
        names[k] = [phrases[i] for i in members]
    _save(fig, path, names=names, note=note)
