"""GroundHog's beam search (the one of :func:`rescorer.analysis.generate.beam_search`), with
every step one batched operation over all the sources of a batch and all their hypotheses, so
that thousands of sources go through the model at once, on a CPU or a GPU.

The rules are GroundHog's ``BeamSearch.search`` (sample.py:47-135, research notes §5): at most
``3 x (source words + 1)`` steps; no EOS before ``(source words + 1) // 2`` steps; each step
keeps the ``width`` best extensions of the live hypotheses, and a hypothesis that ends (EOS)
shrinks its source's width by one; hypotheses still open at the step limit are dropped. The
difference: a source none of whose hypotheses ends gets none (GroundHog retries with a wider
beam), and the UNK word is never proposed (``extend`` drops UNK-bearing targets anyway; ruled
out in the search, it leaves room for N others). Hypotheses are ranked in float32 and their
log p summed in float64.

On a CPU each step runs the model on the rows that still hold a live hypothesis only (at the
first step one row of K per source; later, as hypotheses end or sources reach their limit,
fewer; on a GPU every row runs, ``compact``), and ranks each source's extensions among its
rows' K best words (the K best of a source are always among them), so no (B*K, V) tensor is
made beyond the live rows' logits: on a trained hidden-256 model, 2.25x the sources a second
of ranking all B*K rows over V (BENCHMARKS.md).
A word's ln p is its logit less the row's log-sum-exp, which rounds in float32 a few 1e-6
apart from log_softmax, and the model's products over fewer rows round apart too: the targets
are the same up to near ties (a 1-ulp tie may rank the other way), their log p within about
5e-5 on a trained model.

Shapes: B sources, K = beam size, V = target shortlist + EOS, H hidden, L the step limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rescorer.batching import pad_batch
from rescorer.constants import FIRST_WORD_ID, PAD_ID, UNK_ID
from rescorer.errors import RescorerError
from rescorer.model.encdec import EncoderDecoder
from rescorer.vocab import Vocab


@dataclass(frozen=True)
class Found:
    """A finished hypothesis: target ids without EOS and ln p(ids + EOS | source)."""

    ids: tuple[int, ...]
    logp: float


class NotFiniteError(RescorerError):
    """The model's next-word scores for source ``source`` (its index in the batch) were not
    finite at some step (``value``, nan or inf: weights that overflow), so none of its
    hypotheses could be ranked: the search would find nothing and say nothing."""

    def __init__(self, source: int, value: float) -> None:
        self.source, self.value = source, value
        super().__init__(f"source {source}: next-word scores of {value}, not finite")


def _rows(t: torch.Tensor, live: torch.Tensor | None) -> torch.Tensor:
    """The rows ``live`` (n,) of ``t`` (BK,...), or all of them (None)."""
    return t if live is None else t.index_select(0, live)


INF = float("inf")


@dataclass
class _Beam:
    """The search's state over B sources of K rows each (shapes: the module docstring's)."""

    cost: torch.Tensor  # (B,K) -ln p of each row's hypothesis so far; inf: none
    tokens: torch.Tensor  # (B,K,L) each row's words so far
    width: torch.Tensor  # (B,) hypotheses a source may still finish
    done_cost: torch.Tensor  # (B,K) -ln p of the finished ones; inf: none
    done_tokens: torch.Tensor  # (B,K,L)
    done_len: torch.Tensor  # (B,K) their words before EOS
    done_n: torch.Tensor  # (B,) how many each source has finished
    rank: torch.Tensor  # (K,) 0..K-1
    not_finite: torch.Tensor  # (BK,) float32: a row's last non-finite log-sum-exp, else 0

    @classmethod
    def start(cls, B: int, K: int, L: int, device: torch.device) -> _Beam:
        """One live hypothesis (the empty one) per source."""
        f64, i64 = torch.float64, torch.long
        cost = torch.full((B, K), INF, dtype=f64, device=device)
        cost[:, 0] = 0.0
        return cls(
            cost,
            torch.zeros((B, K, L), dtype=i64, device=device),
            torch.full((B,), K, dtype=i64, device=device),
            torch.full((B, K), INF, dtype=f64, device=device),
            torch.zeros((B, K, L), dtype=i64, device=device),
            torch.zeros((B, K), dtype=i64, device=device),
            torch.zeros((B,), dtype=i64, device=device),
            torch.arange(K, device=device),
            torch.zeros((B * K,), dtype=torch.float32, device=device),
        )

    def note(self, lse: torch.Tensor, live: torch.Tensor | None) -> None:
        """Keep the rows ``live`` (n,) (None: all) whose scores' log-sum-exp ``lse`` (n,1) is
        not finite (read once, at the end: no wait for the device at each step)."""
        lse = lse.squeeze(1)
        mine = _rows(self.not_finite, live)
        kept = torch.where(torch.isfinite(lse), mine, lse)  # (n,)
        if live is None:
            self.not_finite = kept
        else:
            self.not_finite.index_copy_(0, live, kept)

    def refuse_not_finite(self) -> None:
        """NotFiniteError for the first source a row of which had scores not finite."""
        bad = (~torch.isfinite(self.not_finite)).nonzero()
        if len(bad):
            row = int(bad[0, 0])
            raise NotFiniteError(row // len(self.rank), float(self.not_finite[row]))

    def finish(
        self, ended: torch.Tensor, new_cost: torch.Tensor, history: torch.Tensor, k: int
    ) -> None:
        """Record the rows ``ended`` (B,K) (EOS at step k) as finished hypotheses."""
        slot = self.done_n.unsqueeze(1) + ended.long().cumsum(dim=1) - 1  # (B,K) where it goes
        b_idx, j_idx = ended.nonzero(as_tuple=True)
        self.done_cost[b_idx, slot[b_idx, j_idx]] = new_cost[b_idx, j_idx]
        self.done_tokens[b_idx, slot[b_idx, j_idx]] = history[b_idx, j_idx]
        self.done_len[b_idx, slot[b_idx, j_idx]] = k  # the words before EOS
        ends = ended.long().sum(dim=1)  # (B,)
        self.done_n += ends
        self.width -= ends

    def found(self) -> list[list[Found]]:
        """Per source, its finished hypotheses best first."""
        done_cost_l, done_len_l = self.done_cost.cpu().tolist(), self.done_len.cpu().tolist()
        done_tokens_l = self.done_tokens.cpu().tolist()
        found: list[list[Found]] = []
        for b in range(len(done_cost_l)):
            hyps = [
                Found(tuple(done_tokens_l[b][j][: done_len_l[b][j]]), -done_cost_l[b][j])
                for j in range(len(done_cost_l[b]))
                if done_cost_l[b][j] != INF
            ]
            hyps.sort(key=lambda h: (-h.logp, h.ids))
            found.append(hyps)
        return found


@torch.inference_mode()
def beam_search_batched(
    model: EncoderDecoder,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    sources: Sequence[Sequence[str]],
    beam_size: int,
    compact: bool | None = None,
) -> list[list[Found]]:
    """Per source phrase (its tokens), its finished hypotheses best first (module docstring).
    ``compact``: run the model on the live rows only (None: on a CPU, where it is 2.25x as fast
    with a trained model; not on a GPU, where picking the rows out waits for the device at
    every step and the step's launches, not its rows, set the time; unmeasured there)."""
    if not sources:
        return []
    device = next(model.parameters()).device
    if compact is None:
        compact = device.type == "cpu"
    ids = [src_vocab.encode_eos(list(s)) for s in sources]
    src_ids, src_lens = pad_batch(ids)  # (B,S), (B,)
    ctx = model.decoder_context(model.encode(src_ids.to(device), src_lens.to(device)))
    B, K = len(sources), beam_size
    lengths = src_lens.to(device)  # (B,) source words + EOS: GroundHog's len(seq)
    max_steps = 3 * lengths  # (B,)
    min_eos = (lengths // 2).repeat_interleave(beam_size)  # (B*K,) EOS allowed from this step on
    L = int(max_steps.max())
    rows = torch.arange(B, device=device).repeat_interleave(K)  # (B*K,) the source of a row
    ctx = ctx.index_select(rows)
    s = ctx.s0  # (B*K,H)
    prev: torch.Tensor | None = None
    beam = _Beam.start(B, K, L, device)
    for k in range(L):
        beam.cost = torch.where(k < max_steps.unsqueeze(1), beam.cost, INF)  # past the limit
        going, live = _live_rows(beam.cost, compact)
        if not going:
            break
        cand, words_k, logp_k, lse = _candidates(
            model, ctx, s, prev, live, beam.cost, k < _rows(min_eos, live), tgt_vocab
        )
        beam.note(lse, live)
        word, flat_parent, open_rows = _advance(beam, cand, words_k, logp_k, k, tgt_vocab.eos_id)
        s = _next_states(model, ctx, s, flat_parent, word, open_rows if compact else None)
        prev = word.view(-1)
    beam.refuse_not_finite()
    return beam.found()


def _live_rows(cost: torch.Tensor, compact: bool) -> tuple[bool, torch.Tensor | None]:
    """Whether any row (of ``cost`` (B,K)) holds a hypothesis, and the rows the model runs on:
    (n,) the live ones when ``compact`` and not all are, else None (every row)."""
    alive = torch.isfinite(cost).view(-1)  # (BK,) rows with a hypothesis
    if not compact:  # every row runs: a dead one's candidates cost inf
        return bool(alive.any()), None
    live = alive.nonzero().squeeze(1)
    if len(live) == 0:
        return False, None
    return True, None if len(live) == cost.numel() else live


def _candidates(
    model: EncoderDecoder,
    ctx: Any,
    s: torch.Tensor,
    prev: torch.Tensor | None,
    live: torch.Tensor | None,
    cost: torch.Tensor,
    early: torch.Tensor,
    tgt_vocab: Vocab,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's kk best next words: their costs (the row's cost less their ln p), the words,
    their ln p, each (BK,kk), a dead row's candidates costing inf; and the rows' log-sum-exp
    (n,1) (not finite: the model's scores overflow). The model runs on the rows
    ``live`` only (None: all), and each keeps its K best words: a source's K best extensions
    are among its hypotheses' K best words, so the ranking never touches a (B*K, V) tensor
    beyond the logits themselves. ``early`` (n,): rows where EOS may not come yet."""
    B, K = cost.shape
    device, eos = cost.device, tgt_vocab.eos_id
    logits = model.next_word_logits(
        ctx if live is None else ctx.index_select(live),
        _rows(s, live),
        None if prev is None else _rows(prev, live),
    ).float()  # (n,V)
    lse = torch.logsumexp(logits, dim=1, keepdim=True)  # (n,1) log_softmax's normaliser
    logits[:, PAD_ID] = -INF
    logits[:, FIRST_WORD_ID + len(tgt_vocab.words) : eos] = -INF  # ids no word has
    logits[:, UNK_ID] = -INF
    logits[:, eos] = torch.where(early, -INF, logits[:, eos])
    kk = min(K, logits.shape[1])  # a beam wider than the vocabulary: all of a row's words
    top, top_word = logits.topk(kk, dim=1)  # (n,kk) each row's kk best words, best first
    top_logp = top - lse  # (n,kk) their ln p
    row_cost = _rows(cost.view(-1), live).float().unsqueeze(1)  # (n,1)
    if live is None:
        return row_cost - top_logp, top_word, top_logp, lse  # (BK,kk) each, (n,1)
    f32, i64 = torch.float32, torch.long
    cand = torch.full((B * K, kk), INF, dtype=f32, device=device)
    cand.index_copy_(0, live, row_cost - top_logp)
    words_k = torch.zeros((B * K, kk), dtype=i64, device=device)
    words_k.index_copy_(0, live, top_word)
    logp_k = torch.zeros((B * K, kk), dtype=f32, device=device)
    logp_k.index_copy_(0, live, top_logp)
    return cand, words_k, logp_k, lse


def _advance(
    beam: _Beam,
    cand: torch.Tensor,
    words_k: torch.Tensor,
    logp_k: torch.Tensor,
    k: int,
    eos: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step k: each source keeps its ``width`` best candidates (BK,kk); those ending in EOS
    are finished. The chosen words (B,K), their parent rows (BK,) and the rows still open
    (B,K)."""
    B, K, L = beam.tokens.shape
    kk = cand.shape[1]
    device = cand.device
    best, index = cand.view(B, K * kk).topk(K, dim=1, largest=False)  # (B,K) ascending
    keep = (beam.rank < beam.width.unsqueeze(1)) & torch.isfinite(best)  # (B,K)
    parent, choice = index // kk, (index % kk).view(-1)  # (B,K), (BK,)
    flat_parent = (parent + torch.arange(B, device=device).unsqueeze(1) * K).view(-1)
    word = words_k[flat_parent, choice].view(B, K)  # (B,K)
    new_cost = (
        beam.cost.view(-1)[flat_parent].view(B, K) - logp_k[flat_parent, choice].view(B, K).double()
    )  # (B,K) summed in float64
    history = beam.tokens.view(B * K, L)[flat_parent].view(B, K, L)  # (B,K,L)
    history[:, :, k] = word
    ended = keep & (word == eos)  # (B,K)
    if bool(ended.any()):
        beam.finish(ended, new_cost, history, k)
    open_rows = keep & ~ended  # (B,K)
    beam.cost = torch.where(open_rows, new_cost, INF)  # (B,K)
    beam.tokens = history
    return word, flat_parent, open_rows


def _next_states(
    model: EncoderDecoder,
    ctx: Any,
    s: torch.Tensor,
    flat_parent: torch.Tensor,
    word: torch.Tensor,
    open_rows: torch.Tensor | None,
) -> torch.Tensor:
    """The decoder states (BK,H) after ``word`` (B,K), each row from its parent's state; with
    ``open_rows`` (B,K) only those rows are computed (a dead row's state is never read)."""
    if open_rows is None:
        return model.next_state(ctx, s.index_select(0, flat_parent), word.view(-1))  # (BK,H)
    going = open_rows.view(-1).nonzero().squeeze(1)  # (m,) live at the next step
    parents = flat_parent.index_select(0, going)
    words = word.view(-1).index_select(0, going)
    s_next = s.new_zeros(s.shape)  # (BK,H)
    s_next.index_copy_(
        0, going, model.next_state(ctx.index_select(going), s.index_select(0, parents), words)
    )
    return s_next
