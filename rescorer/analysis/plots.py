"""The paper's figures as PNG files (docs/analyses.md): Fig. 3 (RNN score against the table's),
Fig. 4 (word embeddings) and Fig. 5 (phrase representations c).

The 2-D maps use scikit-learn's Barnes-Hut t-SNE (the method the paper names), seeded, with PCA
initialisation so that a seed gives the same map on every run. matplotlib draws with its Agg
backend (no display needed). Both are optional dependencies (``pip install 'rescorer[analysis]'``)
and are imported only when a figure is drawn.
"""

from __future__ import annotations

import html
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rescorer.batching import pad_batch
from rescorer.constants import FIRST_WORD_ID
from rescorer.errors import RescorerError
from rescorer.io.files import atomic_path
from rescorer.io.table import TableReader, split_tokens
from rescorer.model.encdec import EncoderDecoder
from rescorer.vocab import Vocab

if TYPE_CHECKING:
    from matplotlib.axes import Axes

DPI = 100
MISSING = "plot needs matplotlib and scikit-learn: pip install 'rescorer[analysis]'"
LABEL_SIZE = 8  # points: readable at 100% zoom at DPI 100


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


def tsne_2d(points: np.ndarray, seed: int, perplexity: float = 30.0) -> np.ndarray:
    """Barnes-Hut t-SNE of points (n, d) to (n, 2), seeded."""
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
    )
    return np.asarray(tsne.fit_transform(points.astype(np.float32)), dtype=np.float64)


def _save(fig: Any, path: str) -> None:
    plt = _pyplot()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=DPI, format="png")
    plt.close(fig)


# ------------------------------------------------------------------------ Fig. 3: scatter
@dataclass(frozen=True)
class PairSample:
    src: list[str]
    tgt: list[str]
    table_p: np.ndarray  # (n,) the table's p(e|f)


def sample_pairs(path: str, size: int, seed: int, direct_column: int) -> PairSample:
    """A seeded uniform sample of ``size`` pairs of a table (reservoir sampling, one pass)."""
    rng = random.Random(seed)
    kept: list[tuple[str, str, float]] = []
    with TableReader(path) as reader:
        for i, entry in enumerate(reader):
            if direct_column >= len(entry.scores):
                raise RescorerError(
                    f"{reader.name}:{entry.lineno}: {len(entry.scores)} scores, no column "
                    f"{direct_column} for p(e|f)"
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


def plot_scatter(path: str, table_p: np.ndarray, rnn_logp: np.ndarray, title: str) -> str:
    """Fig. 3: RNN ln p(e|f) against the table's ln p(e|f); returns the caption line."""
    plt = _pyplot()
    x = np.log(np.clip(table_p, 1e-300, None))
    r, rho = correlations(x, rnn_logp)
    fig, ax = plt.subplots(figsize=(7, 6))
    ax.scatter(x, rnn_logp, s=4, alpha=0.3, color="tab:blue", linewidths=0)
    ax.set_xlabel("phrase table: ln p(e|f)")
    ax.set_ylabel("RNN Encoder-Decoder: ln p(e|f)")
    caption = f"{len(x):,} pairs, Pearson r = {r:.3f}, Spearman rho = {rho:.3f}"
    ax.set_title(f"{title}\n{caption}", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
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
) -> None:
    """Fig. 4: a t-SNE map per (side, embeddings, vocab) of its ``points`` most frequent words,
    the ``labels`` most frequent of them named."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(10 * len(panels), 10), squeeze=False)
    for ax, (side, emb, vocab) in zip(axes[0], panels, strict=True):
        n = min(points, len(vocab.words))
        ids = np.arange(FIRST_WORD_ID, FIRST_WORD_ID + n)  # ids are in frequency order
        xy = tsne_2d(emb[ids], seed)
        ax.scatter(xy[:, 0], xy[:, 1], s=3, color="0.6", linewidths=0)
        for i in range(min(labels, n)):
            ax.annotate(label(vocab.words[i]), xy[i], fontsize=LABEL_SIZE, alpha=0.9)
        ax.set_title(f"{side} words: {n:,} most frequent, {min(labels, n):,} named", fontsize=11)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    _save(fig, path)


# ----------------------------------------------------------------- Fig. 5: phrase space
def long_source_sample(path: str, size: int, min_words: int, seed: int) -> list[str]:
    """A seeded uniform sample of the distinct sources of >= ``min_words`` words of a table."""
    rng = random.Random(seed)
    kept: list[str] = []
    seen = 0
    previous = None
    with TableReader(path) as reader:
        for entry in reader:
            if entry.src == previous:
                continue
            previous = entry.src
            if len(split_tokens(entry.src)) < min_words:
                continue
            if seen < size:
                kept.append(entry.src)
            else:
                j = rng.randint(0, seen)
                if j < size:
                    kept[j] = entry.src
            seen += 1
    return kept


@torch.inference_mode()
def summary_vectors(
    model: EncoderDecoder, src_vocab: Vocab, sources: Sequence[str], batch: int = 512
) -> np.ndarray:
    """The summary vectors c (n, H) of source phrases."""
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(sources), batch):
        ids = [src_vocab.encode_eos(split_tokens(s)) for s in sources[start : start + batch]]
        src_ids, src_lens = pad_batch(ids)  # (B,S), (B,)
        out.append(model.encode(src_ids.to(device), src_lens.to(device)).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, model.config.hidden_size))


def nearest(xy: np.ndarray, centre: int, k: int) -> np.ndarray:
    """Indices of the k points nearest to point ``centre`` in the map (itself first)."""
    d = ((xy - xy[centre]) ** 2).sum(axis=1)
    return np.argsort(d, kind="stable")[:k]


def _zoom_panel(ax: Axes, xy: np.ndarray, phrases: Sequence[str], members: np.ndarray) -> None:
    pts = xy[members]
    ax.scatter(pts[:, 0], pts[:, 1], s=6, color="tab:blue", linewidths=0)
    ax.scatter(pts[:1, 0], pts[:1, 1], s=30, color="tab:red", linewidths=0)
    for i in members:
        ax.annotate(label(phrases[i]), xy[i], fontsize=LABEL_SIZE)
    # Room on the right for the labels, which start at their points.
    (x0, y0), (x1, y1) = pts.min(axis=0), pts.max(axis=0)
    dx, dy = max(x1 - x0, 1e-6), max(y1 - y0, 1e-6)
    ax.set_xlim(x0 - 0.05 * dx, x1 + 0.8 * dx)
    ax.set_ylim(y0 - 0.08 * dy, y1 + 0.08 * dy)
    ax.set_title(f'around "{label(phrases[members[0]])}"', fontsize=10)
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
) -> None:
    """Fig. 5: the t-SNE map of phrases' c (n, H) with a zoomed panel around each phrase index
    in ``zoom`` (its ``neighbours`` nearest points in the map, named)."""
    plt = _pyplot()
    xy = tsne_2d(vectors, seed)
    fig = plt.figure(figsize=(16, max(10, 5 * len(zoom))))
    grid = fig.add_gridspec(max(len(zoom), 1), 2, width_ratios=(1.2, 1))
    main = fig.add_subplot(grid[:, 0])
    main.scatter(xy[:, 0], xy[:, 1], s=3, color="0.6", linewidths=0)
    main.set_title(f"{len(phrases):,} source phrases of 4 or more words", fontsize=11)
    main.set_xticks([])
    main.set_yticks([])
    for row, centre in enumerate(zoom):
        members = nearest(xy, centre, neighbours)
        lo, hi = xy[members].min(axis=0), xy[members].max(axis=0)
        main.add_patch(plt.Rectangle(lo, *(hi - lo), fill=False, color="tab:red", linewidth=1))
        main.annotate(str(row + 1), hi, color="tab:red", fontsize=10)
        ax = fig.add_subplot(grid[row, 1])
        _zoom_panel(ax, xy, phrases, members)
        ax.set_title(f"{row + 1}: {ax.get_title()}", fontsize=10)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    _save(fig, path)
