"""Raw text to Moses tokens: the only module that imports sacremoses.

Phrase tables, n-best lists and the decoder's input are already tokenised and escaped by
Moses' tokenizer.perl (``|`` -> ``&#124;``, ``[`` -> ``&#91;`` ...); they pass through rescorer
untouched. This module is for *raw* text only, e.g. ``rescorer filter --input raw.txt
--tokenize en``: sacremoses reproduces tokenizer.perl with its default escaping.
"""

from __future__ import annotations

from collections.abc import Callable


def moses_tokenizer(lang: str, *, lowercase: bool = False) -> Callable[[str], str]:
    """A function turning a raw line into Moses tokens (escaped; lowercased if asked)."""
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=lang)

    def tokenize(line: str) -> str:
        tokens = tokenizer.tokenize(line, escape=True, return_str=True)
        return tokens.lower() if lowercase else tokens

    return tokenize
