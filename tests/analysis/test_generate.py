"""Sampling and beam search (issue 15, item 1): reproducible, counted, exact on a tiny model."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from rescorer.analysis.generate import Generated, _beam_search, beam_search, sample_phrases
from rescorer.constants import UNK_ID
from rescorer.model.checkpoint import LoadedModel, load_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.scorer import score_pairs
from rescorer.vocab import Vocab

SOURCES = ["la maison", "le chat noir", "un", "la maison bleue et le chat"]


@pytest.fixture(scope="module")
def trained(tiny_model_dir: Path) -> LoadedModel:
    return load_model_dir(tiny_model_dir)


def test_samples_are_counted_reproducible_and_independent_of_the_batch(
    trained: LoadedModel,
) -> None:
    m, sv, tv = trained.model, trained.src_vocab, trained.tgt_vocab
    first = sample_phrases(m, sv, tv, SOURCES, num_samples=40, seed=7)
    again = sample_phrases(m, sv, tv, SOURCES, num_samples=40, seed=7)
    assert first == again
    for results in first:
        assert sum(g.count for g in results) == 40
        assert len({g.words for g in results}) == len(results)  # distinct
        logps = [g.logp for g in results if g.finished]
        assert logps == sorted(logps, reverse=True)
    # One phrase alone, at its index in the input: the same samples.
    alone = sample_phrases(m, sv, tv, SOURCES[2:3], num_samples=40, seed=7, first_index=2)
    assert alone[0] == first[2]
    other = sample_phrases(m, sv, tv, SOURCES, num_samples=40, seed=8)
    assert other != first


def test_sample_and_beam_logp_is_the_score_of_the_pair(trained: LoadedModel) -> None:
    m, sv, tv = trained.model, trained.src_vocab, trained.tgt_vocab
    found = sample_phrases(m, sv, tv, SOURCES, num_samples=30, seed=1)
    found += beam_search(m, sv, tv, SOURCES, beam_size=4)
    pairs, expected = [], []
    for src, results in zip(SOURCES + SOURCES, found, strict=True):
        for g in results:
            if g.finished and not g.has_unk:
                pairs.append((src, g.text))
                expected.append(g.logp)
    assert len(pairs) >= 10
    scored = score_pairs(m, sv, tv, pairs)
    assert scored.tolist() == pytest.approx(expected, abs=1e-5)


# ------------------------------------------------------------------ exhaustive beam check
def _peaked_model() -> tuple[EncoderDecoder, Vocab, Vocab]:
    """Two target words (+ UNK, EOS): few enough sequences to enumerate; sharp distributions
    so the argmax is unique."""
    config = ModelConfig(
        src_vocab_size=4, tgt_vocab_size=4, hidden_size=6, embed_size=3, maxout_units=4
    )
    model = EncoderDecoder(config)
    gen = torch.Generator().manual_seed(3)
    init_weights_(model, gen)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.8)
    return model.eval(), Vocab(("a", "b"), 4), Vocab(("x", "y"), 4)


def _exhaustive(
    model: EncoderDecoder, src_vocab: Vocab, tgt_vocab: Vocab, src: str, ignore_unk: bool
) -> tuple[tuple[int, ...], float]:
    """The best target under GroundHog's limits, by scoring every allowed sequence."""
    words = len(src.split())
    limit, min_len = 3 * (words + 1), (words + 1) // 2
    choices = [2, 3] if ignore_unk else [UNK_ID, 2, 3]
    candidates = [
        (*body, tgt_vocab.eos_id)
        for n in range(min_len, limit)
        for body in itertools.product(choices, repeat=n)
    ]
    src_ids = torch.tensor([src_vocab.encode_eos(src.split())] * len(candidates))
    width = max(len(c) for c in candidates)
    tgt = torch.zeros(len(candidates), width, dtype=torch.long)
    for i, c in enumerate(candidates):
        tgt[i, : len(c)] = torch.tensor(c)
    lens = torch.tensor([len(c) for c in candidates])
    with torch.no_grad():
        logp = model(src_ids, torch.full((len(candidates),), src_ids.shape[1]), tgt, lens)
    total = logp.sum(dim=1)
    best = int(total.argmax())
    return candidates[best], float(total[best])


@pytest.mark.parametrize("ignore_unk", [False, True])
@pytest.mark.parametrize("src", ["a", "a b"])
def test_a_wide_beam_finds_the_exhaustive_argmax(src: str, ignore_unk: bool) -> None:
    model, sv, tv = _peaked_model()
    ids, logp = _exhaustive(model, sv, tv, src, ignore_unk)
    [found] = beam_search(model, sv, tv, [src], beam_size=4000, ignore_unk=ignore_unk)
    best = found[0]
    assert best == Generated(tuple(tv.decode(ids[:-1])), best.logp, has_unk=UNK_ID in ids)
    assert best.logp == pytest.approx(logp, abs=1e-5)
    assert [g.logp for g in found] == sorted((g.logp for g in found), reverse=True)


def _greedy(model: EncoderDecoder, sv: Vocab, tv: Vocab, src: str) -> list[int]:
    """Greedy decoding under GroundHog's limits, written out step by step: the word ids, with
    EOS last when it came within 3 x (source words + 1) steps."""
    words = src.split()
    with torch.no_grad():
        ctx = model.decoder_context(
            model.encode(torch.tensor([sv.encode_eos(words)]), torch.tensor([len(words) + 1]))
        )
        s, prev, greedy = ctx.s0, None, []
        for k in range(3 * (len(words) + 1)):
            logp = torch.log_softmax(model.next_word_logits(ctx, s, prev), dim=1)[0]
            logp[0] = float("-inf")
            if k < (len(words) + 1) // 2:
                logp[tv.eos_id] = float("-inf")
            word = int(logp.argmax())
            greedy.append(word)
            if word == tv.eos_id:
                break
            prev = torch.tensor([word])
            s = model.next_state(ctx, s, prev)
    return greedy


def test_beam_of_one_is_greedy_when_greedy_finishes() -> None:
    model, sv, tv = _peaked_model()
    with torch.no_grad():
        model.out_vocab.bias[tv.eos_id] += 20.0  # EOS wins as soon as it is allowed
    greedy = _greedy(model, sv, tv, "a b")
    assert len(greedy) == 2 and greedy[-1] == tv.eos_id  # the case this test is about
    [found] = beam_search(model, sv, tv, ["a b"], beam_size=1)
    assert [g.words for g in found] == [tuple(tv.decode(greedy[:-1]))]


def test_beam_of_one_that_never_ends_retries_with_a_doubled_beam() -> None:
    """GroundHog: nothing finished within the limit, so the search runs again with beam 2."""
    model, sv, tv = _peaked_model()
    greedy = _greedy(model, sv, tv, "a b")
    assert len(greedy) == 9 and tv.eos_id not in greedy  # the case this test is about
    assert _beam_search(model, sv, tv, ["a b"], 1, False, False) == [[]]
    doubled = _beam_search(model, sv, tv, ["a b"], 2, False, False)
    assert doubled[0]  # beam 2 finishes, so that is the answer
    assert beam_search(model, sv, tv, ["a b"], beam_size=1) == doubled


def test_normalize_ranks_per_word() -> None:
    model, sv, tv = _peaked_model()
    [ranked] = beam_search(model, sv, tv, ["a b"], beam_size=8, normalize=True)
    assert len(ranked) >= 3
    per_word = [-g.logp / (len(g.words) + 1) for g in ranked]
    assert per_word == sorted(per_word)
