"""``rescorer plot`` (issue 15, item 3; issue 26; issue 27, item 8): each figure is a PNG of the
expected size, and its JSON record (read back from the figure's artists) says that it shows
what it is meant to: the number of points drawn, the axis labels, which words or phrases are
named, at their own points, with no two labels overlapping."""

from __future__ import annotations

import gzip
import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import SLICE

from rescorer.analysis.plots import label
from rescorer.cli import cli
from rescorer.constants import SRC_VOCAB_FILE, TGT_VOCAB_FILE
from rescorer.io.table import read_table
from rescorer.vocab import Vocab

pytest.importorskip("matplotlib", reason="plot needs the analysis extra")
pytest.importorskip("sklearn", reason="plot needs the analysis extra")


VOCAB_FILES = {"source": SRC_VOCAB_FILE, "target": TGT_VOCAB_FILE}


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def run_plot(args: list[str], model: Path, tmp_path: Path) -> dict[str, Any]:
    """The command's record, after checking the PNG and that nothing else was left."""
    out = tmp_path / "fig.png"
    result = CliRunner().invoke(cli, ["plot", *args, "-m", str(model), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.json", "fig.png"]  # no temp file
    record: dict[str, Any] = json.loads((tmp_path / "fig.json").read_text(encoding="utf-8"))
    assert png_size(out) == tuple(record["size"])
    return record


def overlapping(boxes: list[list[float]]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i, a in enumerate(boxes)
        for j, b in enumerate(boxes[:i])
        if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
    ]


def check_labels(panel: dict[str, Any], points: list[list[float]], names: list[str]) -> list[str]:
    """Each label shows a point's name (Moses' escapes undone) at that point, lies inside the
    panel and overlaps no other label; returns the names labelled, in drawing order."""
    frame = panel["frame"]
    labels = [t for t in panel["texts"] if "point" in t]
    shown = {label(name): name for name in names}
    where = dict(zip(names, points, strict=True))
    for t in labels:
        assert t["point"] == where[shown[t["text"]]], t  # at its own point
        x0, y0, x1, y1 = t["box"]
        assert frame[0] <= x0 and x1 <= frame[2] and frame[1] <= y0 and y1 <= frame[3], t
    assert overlapping([t["box"] for t in labels]) == []
    return [shown[t["text"]] for t in labels]


def test_scatter_draws_the_sampled_pairs(tiny_model_dir: Path, tmp_path: Path) -> None:
    record = run_plot(["scatter", str(SLICE), "--pairs", "300"], tiny_model_dir, tmp_path)
    assert record["size"] == [700, 600]
    [panel] = record["axes"]
    assert panel["xlabel"] == "phrase table: ln p(e|f)"
    assert panel["ylabel"] == "RNN Encoder-Decoder: ln p(e|f)"
    assert "300 pairs, Pearson r = " in panel["title"]
    [points] = panel["scatters"]
    assert len(points) == 300
    # x: ln of the table's p(e|f) of 300 lines of the slice; y: a log-probability.
    table = {round(math.log(e.scores[2]), 4) for e in read_table(str(SLICE))}
    assert all(x in table for x, _ in points)
    assert len({x for x, _ in points}) > 20 and all(y < 0 for _, y in points)


@pytest.mark.parametrize(("side", "labels"), [("target", 20), ("both", 100)])
def test_words_names_frequent_words_without_overlap(
    side: str, labels: int, tiny_model_dir: Path, tmp_path: Path
) -> None:
    args = ["words", "--points", "60", "--labels", str(labels), "--side", side]
    record = run_plot(args, tiny_model_dir, tmp_path)
    sides = ["source", "target"] if side == "both" else ["target"]
    assert record["size"] == [1000 * len(sides), 1000]
    assert len(record["axes"]) == len(sides)
    for panel, name in zip(record["axes"], sides, strict=True):
        vocab = Vocab.load(tiny_model_dir / VOCAB_FILES[name])
        words = list(vocab.words[:60])  # the 60 most frequent, in frequency order
        assert panel["names"] == words
        drawn, named_points = panel["scatters"]
        assert len(drawn) == 60
        named = check_labels(panel, drawn, words)
        assert named_points == [drawn[words.index(w)] for w in named]
        assert named[0] == words[0]  # the most frequent word is always named
        assert named == sorted(named, key=words.index)  # the most frequent first
        assert 10 <= len(named) <= labels
        assert panel["title"].startswith(f"{name} words: the 60 most frequent, {len(named)} named")


@pytest.mark.parametrize("zoom", [(), ("a brand new phrase",)])
def test_phrases_zooms_with_the_centre_named_first(
    zoom: tuple[str, ...], tiny_model_dir: Path, tmp_path: Path
) -> None:
    args = ["phrases", str(SLICE), "--phrases", "80", "--neighbours", "12"]
    for phrase in zoom:
        args += ["--zoom", phrase]
    record = run_plot(args, tiny_model_dir, tmp_path)
    panels = 3 if not zoom else len(zoom)
    assert record["size"] == [1600, 1500 if panels == 3 else 1000]
    main, *zoomed = record["axes"]
    assert len(zoomed) == panels
    long_sources = {e.src for e in read_table(str(SLICE)) if len(e.src.split()) >= 4}
    phrases = main["names"]
    assert len(phrases) == 80 + len(zoom) and set(phrases) - set(zoom) <= long_sources
    [points] = main["scatters"]
    assert len(points) == len(phrases)
    assert [t["text"] for t in main["texts"]] == [str(k + 1) for k in range(panels)]
    for k, panel in enumerate(zoomed):
        members, centre = panel["scatters"]
        assert len(members) == 12 and centre == members[:1]
        assert all(p in points for p in members)  # the same map, zoomed
        named = check_labels(panel, members, panel["names"])
        assert named[0] == panel["names"][0]  # the centre phrase first
        assert panel["title"].startswith(f'{k + 1}: around "{label(named[0])}"')
        if zoom:
            assert named[0] == zoom[k]
        assert len(named) > len(members) // 2  # most neighbours are named


def test_a_missing_extra_or_a_bad_table_is_one_line(tmp_path: Path, tiny_model_dir: Path) -> None:
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress(b"a ||| b\n"))
    out = tmp_path / "x.png"
    args = ["plot", "scatter", str(bad), "-m", str(tiny_model_dir), "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.gz"]


def crossings(placed: list[Any], pixels: Any) -> list[tuple[int, int]]:
    """(label, other label) where a label's leader line, from its point to its box's centre,
    runs through the other label's box (sampled every ~0.2 px, its own box left out)."""
    import numpy as np

    found = []
    for a in (p for p in placed if p.moved):
        px, py = pixels[a.index]
        cx, cy = (a.box[0] + a.box[2]) / 2, (a.box[1] + a.box[3]) / 2
        n = int(max(abs(cx - px), abs(cy - py)) * 5) + 2
        t = np.linspace(0.0, 1.0, n)
        xs, ys = px + t * (cx - px), py + t * (cy - py)
        own = (xs > a.box[0]) & (xs < a.box[2]) & (ys > a.box[1]) & (ys < a.box[3])
        xs, ys = xs[~own], ys[~own]
        for b in placed:
            if b is a:
                continue
            x0, y0, x1, y1 = b.box
            inside = (xs > x0 + 0.5) & (xs < x1 - 0.5) & (ys > y0 + 0.5) & (ys < y1 - 0.5)
            if inside.any():
                found.append((a.index, b.index))
    return found


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_leader_lines_never_cross_another_label(seed: int) -> None:
    """Issue 39, item 8: in fig. 5 a leader line ran through another label (it was checked at
    ten points along it against the labels placed before, never against later ones). Now
    neither a leader through a label placed before nor a label over a leader drawn before."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from rescorer.analysis.labels import place_labels

    rng = np.random.default_rng(seed)
    xy = np.concatenate([rng.normal(0, 1, (150, 2)), rng.normal(0, 0.15, (60, 2))])
    texts = [f"phrase number {i} of the map" for i in range(len(xy))]
    fig, ax = plt.subplots(figsize=(6, 6), dpi=100)
    ax.scatter(xy[:, 0], xy[:, 1], s=4)
    ax.set_xlim(-3.5, 3.5)
    ax.set_ylim(-3.5, 3.5)
    placed = place_labels(ax, xy, texts, list(range(len(xy))), rings=4, fontsize=7)
    pixels = ax.transData.transform(xy)
    plt.close(fig)
    assert sum(p.moved for p in placed) >= 3  # leader lines were drawn
    assert crossings(placed, pixels) == []


def test_a_figure_names_the_model_by_its_folder_and_says_it_has_not_learned(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39, item 8: a plot of a model that has not learned looked like any other, and its
    title named the model by the path the command was given (../../runs/x/model/)."""
    import os

    monkeypatch.chdir(tmp_path)
    given = Path(os.path.relpath(tiny_model_dir) + "/")  # ../../.../model/
    record = run_plot(["scatter", str(SLICE), "--pairs", "300"], given, tmp_path)
    [panel] = record["axes"]
    assert panel["title"].startswith(f"{SLICE.name} vs {tiny_model_dir.name} (forward)\n")
    assert ".." not in panel["title"]
    # the tiny model (20 updates) has not learned: said across the picture and in the record
    assert record["note"].startswith("model NOT LEARNED: validation perplexity "), record
    assert "against a unigram model's " in record["note"]


@pytest.mark.parametrize("figure", ["scatter", "words"])
def test_the_not_learned_note_lies_wholly_inside_the_picture(
    tiny_model_dir: Path, tmp_path: Path, figure: str
) -> None:
    """Issue 59, item 8: the note ran off both edges of the scatter. No pixel of the note's
    red on the picture's outer frame (4 pixels), and some in its middle."""
    import matplotlib.image

    args = ["scatter", str(SLICE), "--pairs", "300"] if figure == "scatter" else ["words"]
    record = run_plot(args, tiny_model_dir, tmp_path)
    assert record["note"].startswith("model NOT LEARNED")
    rgb = matplotlib.image.imread(tmp_path / "fig.png")[:, :, :3]
    red = (rgb[:, :, 0] - rgb[:, :, 1] > 0.2) & (rgb[:, :, 0] - rgb[:, :, 2] > 0.2)
    frame = [red[:4, :], red[-4:, :], red[:, :4], red[:, -4:]]
    assert not any(edge.any() for edge in frame), [int(edge.sum()) for edge in frame]
    height, width = red.shape
    assert red[height // 4 : 3 * height // 4, width // 4 : 3 * width // 4].sum() > 500
