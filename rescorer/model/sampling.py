"""The model's own target phrases, drawn: ancestral sampling as GroundHog's ``sample.py``
without ``--beam-search`` (research notes §5), batched over many source phrases.

At most ``3 x source words`` steps, each word drawn from softmax(alpha * logits) (alpha is an
inverse temperature), the sample cut at its first EOS. Each source's draws come from its own
random stream (seed and the source's index, or a stream id the caller gives), so its samples do
not depend on the other phrases in the batch or on the batch size. The padding id 0 and unused
shortlist ids are never drawn (they are no words), so a result's log p is that of the pair as
``rescorer score`` computes it (natural-log sum over its words and EOS). Unlike GroundHog, a
sample's reported log p is the model's, not the tempered distribution's (the two agree at
alpha = 1).

Used by the paper's analyses (rescorer/analysis/generate.py, which adds GroundHog's beam
search) and by ``rescorer extend --samples``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from rescorer.batching import pad_batch
from rescorer.constants import FIRST_WORD_ID, PAD_ID, UNK_ID
from rescorer.io.table import split_tokens
from rescorer.model.encdec import DecoderContext, EncoderDecoder
from rescorer.vocab import Vocab


@dataclass(frozen=True)
class Generated:
    """One distinct generated target phrase of one source phrase."""

    words: tuple[str, ...]  # target words, EOS not included; <unk> for the UNK id
    logp: float  # ln p(words + EOS | source) under the model (without EOS if not finished)
    count: int = 1  # how many samples gave it (1 for beam search)
    finished: bool = True  # ended with EOS within the length limit
    has_unk: bool = False  # contains the UNK id

    @property
    def text(self) -> str:
        return " ".join(self.words)


def source_context(
    model: EncoderDecoder, src_vocab: Vocab, sources: Sequence[str]
) -> tuple[DecoderContext, list[int]]:
    """Decoder context (B rows) of the source phrases and their word counts."""
    device = next(model.parameters()).device
    ids = [src_vocab.encode_eos(split_tokens(s)) for s in sources]
    src_ids, src_lens = pad_batch(ids)  # (B,S), (B,)
    c = model.encode(src_ids.to(device), src_lens.to(device))  # (B,H)
    return model.decoder_context(c), [len(x) - 1 for x in ids]


def mask_invalid(logits: Tensor, tgt_vocab: Vocab) -> Tensor:
    """logits or log-probabilities (R,V), in place, with the padding id and unused shortlist
    ids (a table with fewer words than the shortlist) never chosen."""
    logits[:, PAD_ID] = float("-inf")
    logits[:, FIRST_WORD_ID + len(tgt_vocab.words) : tgt_vocab.eos_id] = float("-inf")
    return logits


@torch.inference_mode()
def sample_phrases(
    model: EncoderDecoder,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    sources: Sequence[str],
    *,
    num_samples: int = 50,
    alpha: float = 1.0,
    seed: int = 1,
    first_index: int = 0,
    stream_ids: Sequence[int] | None = None,
) -> list[list[Generated]]:
    """Per source phrase, its distinct samples best first (by log p, then by count, then text);
    counts sum to ``num_samples``. ``first_index`` is the index of ``sources[0]`` in the whole
    input (the random stream of source i is seeded by (seed, i)); ``stream_ids``, if given, are
    the streams' ids instead, one per source (e.g. a hash of the phrase, for draws that do not
    depend on where the phrase is in its input)."""
    if not sources:
        return []
    device = next(model.parameters()).device
    ctx, words = source_context(model, src_vocab, sources)
    B, N = len(sources), num_samples
    rows = torch.arange(B, device=device).repeat_interleave(N)  # (B*N,) source of each row
    ctx = ctx.index_select(rows)
    max_steps = max(3 * max(words), 1)
    limits = torch.tensor([max(3 * w, 1) for w in words], device=device).repeat_interleave(N)
    ids = stream_ids if stream_ids is not None else range(first_index, first_index + B)
    generators = [torch.Generator().manual_seed(seed * 1_000_003 + i) for i in ids]
    eos = tgt_vocab.eos_id

    s = ctx.s0  # (R,H) R = B*N
    prev: Tensor | None = None
    tokens = torch.full((B * N, max_steps), PAD_ID, dtype=torch.long, device=device)  # (R,L)
    logp = torch.zeros(B * N, dtype=torch.float64, device=device)  # (R,)
    alive = torch.ones(B * N, dtype=torch.bool, device=device)  # (R,) no EOS yet, within limit
    finished = torch.zeros(B * N, dtype=torch.bool, device=device)  # (R,)
    for t in range(max_steps):
        alive &= limits > t
        if not bool(alive.any()):
            break
        logits = model.next_word_logits(ctx, s, prev)  # (R,V)
        log_probs = torch.log_softmax(logits, dim=1)  # (R,V) the model's, as score has them
        tempered = torch.softmax(mask_invalid(alpha * logits, tgt_vocab), dim=1).double()
        # One uniform per row from its source's own stream, then the inverse CDF.
        uniform = torch.cat([torch.rand(N, generator=g, dtype=torch.float64) for g in generators])
        cdf = tempered.cumsum(dim=1)  # (R,V)
        u = uniform.to(device).unsqueeze(1) * cdf[:, -1:]  # (R,1)
        word = torch.searchsorted(cdf, u, right=True).squeeze(1)  # (R,)
        word = word.clamp(max=logits.shape[1] - 1)  # u rounding up to the total
        word = torch.where(alive, word, torch.full_like(word, PAD_ID))
        tokens[:, t] = word
        logp += torch.where(alive, log_probs.gather(1, word.unsqueeze(1)).squeeze(1), 0).double()
        ended = alive & (word == eos)
        finished |= ended
        alive &= ~ended
        s = model.next_state(ctx, s, word)  # (R,H) (rows that stopped are ignored from now)
        prev = word

    results: list[list[Generated]] = []
    token_rows, logps, done = tokens.cpu().tolist(), logp.cpu().tolist(), finished.cpu().tolist()
    for b in range(B):
        counts: Counter[tuple[int, ...]] = Counter()
        scores: dict[tuple[int, ...], tuple[float, bool]] = {}
        for r in range(b * N, (b + 1) * N):
            ids = tuple(i for i in token_rows[r] if i not in (PAD_ID, eos))
            counts[ids] += 1
            scores[ids] = (logps[r], done[r])
        results.append(_distinct(tgt_vocab, counts, scores))
    return results


def _distinct(
    tgt_vocab: Vocab,
    counts: Counter[tuple[int, ...]],
    scores: dict[tuple[int, ...], tuple[float, bool]],
) -> list[Generated]:
    out = [
        Generated(
            words=tuple(tgt_vocab.decode(ids)),
            logp=scores[ids][0],
            count=n,
            finished=scores[ids][1],
            has_unk=UNK_ID in ids,
        )
        for ids, n in counts.items()
    ]
    out.sort(key=lambda g: (not g.finished, -g.logp, -g.count, g.words))
    return out
