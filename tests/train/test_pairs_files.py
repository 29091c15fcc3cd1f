"""``train --pairs SRC TGT``: two files, one pair per line, and equal line counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from rescorer.errors import InputError
from rescorer.train.data import iter_pairs


@pytest.mark.parametrize("longer", ["src", "tgt"])
@pytest.mark.parametrize("extra", [1, 2])
def test_unequal_pairs_files_are_refused(tmp_path: Path, longer: str, extra: int) -> None:
    """SRC with one more line gave 2 training pairs and exit 0 (issue 29 item 5): zip read
    SRC's extra line before it found TGT at its end, and the line was lost unseen."""
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    lines = ["a b", "c d"]
    more = [*lines, *(["e f"] * extra)]
    src.write_text("\n".join(more if longer == "src" else lines) + "\n")
    tgt.write_text("\n".join(more if longer == "tgt" else lines) + "\n")
    longer_path = src if longer == "src" else tgt
    with pytest.raises(InputError, match="more lines than the other --pairs file") as caught:
        list(iter_pairs((str(src), str(tgt)), None, [0]))
    assert str(caught.value).startswith(f"{longer_path}:3:")


def test_equal_pairs_files_give_every_pair(tmp_path: Path) -> None:
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("a b\nc d\n")
    tgt.write_text("x\ny z\n")
    counter = [0]
    assert list(iter_pairs((str(src), str(tgt)), None, counter)) == [("a b", "x"), ("c d", "y z")]
    assert counter[0] == 2
