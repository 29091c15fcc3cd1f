"""log p(y|x) of phrase pairs: the model side of ``rescorer score``.

Pairs arrive as flat id arrays (:class:`GroupedPairs`): the distinct source phrases of a chunk
once each, every pair pointing at its source. The fast path:

1. encodes each distinct source once (sources sorted by length, token-bounded batches),
2. sorts the pairs by target length (then by source), cuts token-bounded batches, computes the
   per-source decoder terms (s0, C c, O_c c) once per distinct source in the batch and expands
   them to that source's targets,
3. runs the model's own ``token_logprobs`` (input projections and the readout/softmax as large
   products outside the recurrence; log-softmax in fp32), sums in fp32,
4. puts every result back at its pair's input position.

``score_pairs_straightforward`` is the reference the benchmark compares against: batches of 64
pairs in file order, fp32, every pair encoding its own source.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from rescorer.batching import pad_batch, pad_flat
from rescorer.device import autocast, bound_kernel_caches
from rescorer.io.table import split_tokens
from rescorer.model.encdec import EncoderDecoder, compile_kernels, sequence_logprobs
from rescorer.score.pairs import GroupedPairs, encode_pairs, prefix_tree, token_batches
from rescorer.score.profile import nothing
from rescorer.vocab import Vocab


def gather_padded(flat: np.ndarray, off: np.ndarray, rows: np.ndarray) -> tuple[Tensor, Tensor]:
    """Rows ``rows`` of a flat ragged array as a padded id matrix (B,L) and lengths (B,)."""
    lens = off[rows + 1] - off[rows]  # (B,)
    return torch.from_numpy(pad_flat(flat, off, rows)), torch.from_numpy(lens.astype(np.int64))


ROW_MULTIPLE = 8  # rows of a prefix-tree level are padded to a multiple of this


@dataclass
class Work:
    """What the model has done so far (per-pair work, without padding)."""

    source_tokens: int = 0  # tokens of the distinct sources, EOS included
    encoder_steps: int = 0  # encoder steps run: source_tokens, or distinct prefixes if shared
    decoder_positions: int = 0  # target tokens scored, EOS included


class Scorer:
    """Scores GroupedPairses with a model on one device, fast path (see module docstring)."""

    def __init__(
        self,
        model: EncoderDecoder,
        precision: str = "fp32",
        batch_tokens: int = 4096,
        compile: bool = False,
        share_prefixes: bool = True,
    ) -> None:
        """``model`` is used as it is handed over (already on its device); with ``compile`` the
        scorer keeps compiled kernels of its own and leaves the model unchanged."""
        bound_kernel_caches()
        self.model = model
        self.device = next(model.parameters()).device
        self.kernels = compile_kernels(model) if compile else None
        self.precision = precision
        self.batch_tokens = batch_tokens
        self.share_prefixes = share_prefixes
        self.work = Work()
        self.phase: Callable[[str], AbstractContextManager[None]] = nothing  # Phases to profile

    @torch.inference_mode()
    def score(self, batch: GroupedPairs) -> np.ndarray:
        """log p(y|x) (N,) float64 for every pair, in input order."""
        n = batch.num_pairs
        out = np.empty(n, dtype=np.float64)
        if n == 0:
            return out
        dev = self.device
        model = self.model
        with autocast(dev, self.precision):
            # 1. Each distinct source once; with share_prefixes each distinct prefix once.
            src_lens = np.diff(batch.src_off)  # (U,)
            c_all = torch.empty(
                len(src_lens), model.config.hidden_size, dtype=torch.float32, device=dev
            )  # (U,H)
            self.work.source_tokens += int(src_lens.sum())
            phase = self.phase
            if self.share_prefixes:
                with phase("encoder"):
                    self._encode_prefix_tree(batch, c_all)
            else:
                self.work.encoder_steps += int(src_lens.sum())
                src_order = np.argsort(src_lens, kind="stable")
                for rows in token_batches(src_lens, src_order, self.batch_tokens):
                    ids, lens = gather_padded(batch.src_ids, batch.src_off, rows)
                    with phase("h2d"):
                        ids, lens = self._to_device(ids), self._to_device(lens)
                    with phase("encoder"):
                        c = model.encode(ids, lens, self.kernels)  # (B,H)
                        c_all[torch.from_numpy(rows).to(dev)] = c.float()
            # 2-3. Pairs sorted by target length, then by source.
            tgt_lens = np.diff(batch.tgt_off)  # (N,)
            order = np.lexsort((batch.pair_src, tgt_lens))
            pending: list[tuple[np.ndarray, Tensor]] = []
            for rows in token_batches(tgt_lens, order, self.batch_tokens):
                srcs = batch.pair_src[rows]  # (B,)
                uniq, inverse = np.unique(srcs, return_inverse=True)
                ids, lens = gather_padded(batch.tgt_ids, batch.tgt_off, rows)
                with phase("h2d"):
                    ids, lens = self._to_device(ids), self._to_device(lens)
                with phase("decoder"):
                    ctx = model.decoder_context(c_all[torch.from_numpy(uniq).to(dev)])  # (U_b,.)
                    if not np.array_equal(uniq, srcs):  # expand to rows (np.unique sorts)
                        ctx = ctx.index_select(torch.from_numpy(inverse.astype(np.int64)).to(dev))
                    states = model.decoder_states(ctx, ids, self.kernels)
                with phase("readout"):
                    token_logp = model.packed_readout(ctx, ids, lens, states, self.kernels)
                    pending.append((rows, sequence_logprobs(token_logp)))  # (B,)
        self.work.decoder_positions += int(tgt_lens.sum())
        # 4. Back to input order (one device-to-host copy per batch, after all are queued).
        with self.phase("d2h"):
            for rows, seq_logp in pending:
                out[rows] = seq_logp.double().cpu().numpy()
        return out

    def _to_device(self, t: Tensor) -> Tensor:
        """A host tensor on the scorer's device. On a GPU it is pinned first, so the copy is
        asynchronous and overlaps the work already queued (from pageable memory a copy
        waits for the device)."""
        if self.device.type != "cuda":
            return t
        return t.pin_memory().to(self.device, non_blocking=True)

    def _encode_prefix_tree(self, batch: GroupedPairs, c_all: Tensor) -> None:
        """c of every distinct source (into c_all (U,H)), one encoder step per distinct prefix:
        each level of the tree is one batched step from the parents' states."""
        dev = self.device
        h: Tensor | None = None  # (n_{t-1},H) states of the previous level's prefixes
        for level in prefix_tree(batch.src_ids, batch.src_off):
            n = len(level.tokens)
            # Rows padded to a multiple of 8 (pad rows repeat prefix 0 and are dropped): MKL's
            # fp32 products of 5-7 and 9-11 rows give other last bits with 1 and 2 threads, and
            # a deep level can have any row count; the bytes must not depend on the threads.
            pad = -n % ROW_MULTIPLE
            tokens = torch.from_numpy(np.pad(level.tokens, (0, pad)).astype(np.int64)).to(dev)
            if h is not None:  # each prefix continues from its parent's state
                parents = torch.from_numpy(np.pad(level.parents, (0, pad))).to(dev)
                h = h.index_select(0, parents)  # (n_t+pad,H)
            h = self.model.encode_step(tokens, h, self.kernels)[:n]  # (n_t,H)
            self.work.encoder_steps += n
            if len(level.ending):
                rows = torch.from_numpy(level.ending_node).to(dev)
                c_all[torch.from_numpy(level.ending).to(dev)] = h.index_select(0, rows).float()


def score_pairs(
    model: EncoderDecoder,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    pairs: Sequence[tuple[str, str]],
    *,
    precision: str = "fp32",
    batch_tokens: int = 4096,
) -> np.ndarray:
    """log p(y|x) (N,) of (source, target) phrase pairs with the fast path, in input order, on
    the device the model is on."""
    scorer = Scorer(model, precision, batch_tokens)
    return scorer.score(encode_pairs(src_vocab, tgt_vocab, pairs))


@torch.inference_mode()
def score_pairs_straightforward(
    model: EncoderDecoder,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    pairs: Sequence[tuple[str, str]],
    *,
    batch_size: int = 64,
) -> np.ndarray:
    """The baseline: batches of ``batch_size`` pairs in file order, fp32, no encoder reuse."""
    device = next(model.parameters()).device
    model.eval()
    out = np.empty(len(pairs), dtype=np.float64)
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        src = [src_vocab.encode_eos(split_tokens(s)) for s, _ in chunk]
        tgt = [tgt_vocab.encode_eos(split_tokens(t)) for _, t in chunk]
        src_ids, src_lens = pad_batch(src)
        tgt_ids, tgt_lens = pad_batch(tgt)
        token_logp = model(
            src_ids.to(device), src_lens.to(device), tgt_ids.to(device), tgt_lens.to(device)
        )  # (B,T)
        out[start : start + len(chunk)] = sequence_logprobs(token_logp).double().cpu().numpy()
    return out
