"""The model against the explicit equations of rnnenc-spec.md §1, and its batching invariances."""

from __future__ import annotations

import torch
from torch import Tensor

from rescorer.model.encdec import (
    DecoderContext,
    EncoderDecoder,
    ModelConfig,
    count_parameters,
    init_weights_,
    sequence_logprobs,
)

ATOL = 1e-6


def noisy_model(config: ModelConfig, seed: int = 0) -> EncoderDecoder:
    """Every parameter, biases included, drawn from N(0, 0.5): no term can hide behind a zero."""
    model = EncoderDecoder(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    return model


def sig(x: Tensor) -> Tensor:
    return torch.sigmoid(x)


class Weights:
    """The spec's symbols, read out of the module (float64, column-vector convention)."""

    def __init__(self, model: EncoderDecoder) -> None:
        cfg = model.config
        H, PM = cfg.hidden_size, cfg.maxout_units * cfg.maxout_pool

        def d(t: Tensor) -> Tensor:
            return t.detach().double()

        enc_in, dec_in = model.enc_input, model.dec_input
        # Encoder (§1.2).
        self.E_x, self.b_e = d(enc_in.embed.weight), d(enc_in.embed_bias)
        self.W_r, self.W_u, self.W = d(enc_in.input_proj.weight).split(H)
        self.b = d(enc_in.cand_bias)
        self.U_r, self.U_u = d(model.enc_rec.gate_proj.weight).split(H)
        self.U = d(model.enc_rec.cand_proj.weight)
        # Decoder (§1.4-1.5).
        self.W_init, self.b_init = d(model.dec_init.weight), d(model.dec_init.bias)
        self.C_r, self.C_u, self.C, self.O_c = d(model.dec_context.weight).split([H, H, H, PM])
        self.E_y, self.b_f = d(dec_in.embed.weight), d(dec_in.embed_bias)
        self.Wd_r, self.Wd_u, self.Wd = d(dec_in.input_proj.weight).split(H)
        self.bd = d(dec_in.cand_bias)
        self.Ud_r, self.Ud_u = d(model.dec_rec.gate_proj.weight).split(H)
        self.Ud = d(model.dec_rec.cand_proj.weight)
        # Deep output and softmax (§1.6-1.7).
        self.O_h, self.b_o = d(model.out_hidden.weight), d(model.out_hidden.bias)
        self.O_y = d(model.out_prev_word.weight)
        self.W_1 = d(model.out_rank.weight)  # (E, M): m -> m W_1
        self.W_2, self.b_out = d(model.out_vocab.weight), d(model.out_vocab.bias)  # (V, E)
        self.M, self.P = cfg.maxout_units, cfg.maxout_pool


def spec_encode(w: Weights, src: list[int]) -> Tensor:
    """c for one source (ids ending in EOS), step by step from §1.2-1.3."""
    h = torch.zeros(w.U.shape[0], dtype=torch.float64)
    for x in src:
        e = w.E_x[x] + w.b_e
        r = sig(w.W_r @ e + w.U_r @ h)
        u = sig(w.W_u @ e + w.U_u @ h)
        h_cand = torch.tanh(w.W @ e + w.b + w.U @ (r * h))
        h = u * h_cand + (1 - u) * h
    return h


def spec_token_logprobs(w: Weights, c: Tensor, tgt: list[int]) -> Tensor:
    """ln p(y_t | y_<t, c) for one target (ids ending in EOS), from §1.4-1.7."""
    s = torch.tanh(w.W_init @ c + w.b_init)  # s_0
    f_prev = None
    out = []
    for y in tgt:
        # Readout: predict y_t from s_{t-1}, c and f(y_{t-1}) (zero at t = 1).
        o = w.O_c @ c + w.O_h @ s + w.b_o
        if f_prev is not None:
            o = o + w.O_y @ f_prev
        m = torch.stack([o[i * w.P : (i + 1) * w.P].max() for i in range(w.M)])
        logits = w.W_2 @ (w.W_1 @ m) + w.b_out
        out.append(torch.log_softmax(logits, dim=0)[y])
        # Consume y_t: s_t = GRU(s_{t-1}, f(y_t), c).
        f = w.E_y[y] + w.b_f
        r = sig(w.Wd_r @ f + w.Ud_r @ s + w.C_r @ c)
        u = sig(w.Wd_u @ f + w.Ud_u @ s + w.C_u @ c)
        s_cand = torch.tanh(w.Wd @ f + w.bd + w.C @ c + w.Ud @ (r * s))
        s = u * s_cand + (1 - u) * s
        f_prev = f
    return torch.stack(out)


def test_encoder_steps_match_the_equations(tiny_config: ModelConfig) -> None:
    model = noisy_model(tiny_config)
    w = Weights(model)
    eos = tiny_config.src_vocab_size
    src = [3, 17, 2, eos]  # h_0 = 0 hides U at step 1; the later steps exercise it
    c = model.encode(torch.tensor([src]), torch.tensor([len(src)]))
    torch.testing.assert_close(c[0].double(), spec_encode(w, src), atol=ATOL, rtol=0)
    # And the single step function with a nonzero state.
    h = torch.randn(1, tiny_config.hidden_size, generator=torch.Generator().manual_seed(1))
    x = model.enc_input.project(model.enc_input.embed_ids(torch.tensor([[5]])))[:, 0]
    e = w.E_x[5] + w.b_e
    hd = h[0].double()
    r = sig(w.W_r @ e + w.U_r @ hd)
    u = sig(w.W_u @ e + w.U_u @ hd)
    expected = u * torch.tanh(w.W @ e + w.b + w.U @ (r * hd)) + (1 - u) * hd
    torch.testing.assert_close(model.enc_rec.step(x, h)[0].double(), expected, atol=ATOL, rtol=0)


def test_decoder_steps_match_the_equations(tiny_config: ModelConfig) -> None:
    model = noisy_model(tiny_config, seed=1)
    w = Weights(model)
    src = [4, 9, tiny_config.src_vocab_size]
    tgt = [7, 1, 12, tiny_config.tgt_vocab_size]  # UNK is an ordinary class; EOS is predicted
    token_logp = model(
        torch.tensor([src]), torch.tensor([len(src)]), torch.tensor([tgt]), torch.tensor([4])
    )
    c = spec_encode(w, src)
    expected = spec_token_logprobs(w, c, tgt)
    torch.testing.assert_close(token_logp[0].double(), expected, atol=ATOL, rtol=0)
    assert token_logp.dtype == torch.float32


def test_decoder_context_terms(tiny_config: ModelConfig) -> None:
    model = noisy_model(tiny_config, seed=2)
    w = Weights(model)
    c = torch.randn(3, tiny_config.hidden_size)
    ctx = model.decoder_context(c)
    cd = c.double()
    close = {"atol": ATOL, "rtol": 0}
    torch.testing.assert_close(ctx.s0.double(), torch.tanh(cd @ w.W_init.T + w.b_init), **close)
    gates = torch.cat([cd @ w.C_r.T, cd @ w.C_u.T], 1)
    torch.testing.assert_close(ctx.c_gates.double(), gates, **close)
    torch.testing.assert_close(ctx.c_cand.double(), cd @ w.C.T, **close)
    torch.testing.assert_close(ctx.c_out.double(), cd @ w.O_c.T, **close)
    picked = ctx.index_select(torch.tensor([2, 2, 0]))
    assert isinstance(picked, DecoderContext)
    torch.testing.assert_close(picked.c_out, ctx.c_out[[2, 2, 0]])


def pad(seqs: list[list[int]]) -> tuple[Tensor, Tensor]:
    ids = torch.zeros(len(seqs), max(map(len, seqs)), dtype=torch.long)
    for i, seq in enumerate(seqs):
        ids[i, : len(seq)] = torch.tensor(seq)
    return ids, torch.tensor([len(s) for s in seqs])


def test_logprob_is_independent_of_padding_and_batch_order(tiny_model: EncoderDecoder) -> None:
    cfg = tiny_model.config
    s_eos, t_eos = cfg.src_vocab_size, cfg.tgt_vocab_size
    pairs = [
        ([5, 6, 7, 8, 9, s_eos], [3, t_eos]),
        ([2, s_eos], [4, 5, 6, 7, 8, 9, 10, t_eos]),
        ([s_eos], [t_eos]),
        ([11, 1, s_eos], [1, 1, t_eos]),
    ]
    noisy = noisy_model(cfg, seed=3)
    for model in (tiny_model, noisy):
        alone = [sequence_logprobs(model(*pad([src]), *pad([tgt])))[0].item() for src, tgt in pairs]
        for order in ([0, 1, 2, 3], [3, 1, 0, 2], [2, 3, 1, 0]):
            batch = [pairs[i] for i in order]
            src_ids, src_lens = pad([s for s, _ in batch])
            tgt_ids, tgt_lens = pad([t for _, t in batch])
            token_logp = model(src_ids, src_lens, tgt_ids, tgt_lens)
            got = sequence_logprobs(token_logp)
            expected = torch.tensor([alone[i] for i in order])
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
            # Padding positions are exactly 0.
            positions = torch.arange(tgt_ids.shape[1])
            assert (token_logp[positions >= tgt_lens.unsqueeze(1)] == 0).all()
        assert all(lp < 0 for lp in alone)


def test_autocast_bf16_stays_close_and_fp32(tiny_model: EncoderDecoder) -> None:
    cfg = tiny_model.config
    src_ids, src_lens = pad([[5, 6, cfg.src_vocab_size], [7, cfg.src_vocab_size]])
    tgt_ids, tgt_lens = pad([[3, 4, cfg.tgt_vocab_size], [cfg.tgt_vocab_size]])
    ref = tiny_model(src_ids, src_lens, tgt_ids, tgt_lens)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = tiny_model(src_ids, src_lens, tgt_ids, tgt_lens)
    assert low.dtype == torch.float32
    torch.testing.assert_close(low, ref, atol=0.05, rtol=0)


def test_init_weights(tiny_model: EncoderDecoder) -> None:
    H = tiny_model.config.hidden_size
    for block in tiny_model.recurrent_matrices():
        torch.testing.assert_close(block @ block.T, torch.eye(H), atol=1e-5, rtol=0)
    for name, param in tiny_model.named_parameters():
        if name.endswith("bias"):
            assert (param == 0).all(), name
    std = tiny_model.out_vocab.weight.std().item()
    assert 0.007 < std < 0.013
    # A fresh model with the same generator seed is identical.
    again = EncoderDecoder(tiny_model.config)
    init_weights_(again, torch.Generator().manual_seed(0))
    for a, b in zip(tiny_model.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)


def test_paper_parameter_count() -> None:
    """rnnenc-spec.md §1.7 counts 4,801,200 (encoder) + 12,468,301 (decoder) by hand.

    The module matches it exactly: GroundHog's frozen zero biases of the update and reset
    projections (learn_bias=False) are not parameters here, as they are not in the hand count.
    """
    with torch.device("meta"):
        model = EncoderDecoder(ModelConfig())
    encoder = sum(
        p.numel() for n, p in model.named_parameters() if n.startswith(("enc_input", "enc_rec"))
    )
    assert encoder == 4_801_200
    assert count_parameters(model) - encoder == 12_468_301
    assert count_parameters(model) == 17_269_501


def test_config_round_trip() -> None:
    cfg = ModelConfig(hidden_size=256)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    for bad in ({"hidden_size": 0}, {"embed_size": 1.5}, {"hidden": 3}):
        try:
            ModelConfig.from_dict(bad)  # type: ignore[arg-type]
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")
