"""The RNN Encoder-Decoder of Cho et al. (2014), as GroundHog's code computes it.

Every equation is in ``docs/model.md`` §1; the comments cite its items. Notation (row
vectors, as in GroundHog): ``B`` batch, ``S`` source length, ``T`` target length (both counting
the EOS the caller appends), ``E`` embedding size (the rank, 100), ``H`` hidden size (1000),
``M`` maxout units (500), ``P`` maxout pool (2), ``V`` softmax rows (shortlist size + 1 for EOS).

The gated unit (§1.2), written by hand because ``nn.GRU`` resets *after* the recurrent matmul::

    r  = σ(W_r e + U_r h)             u = σ(W_u e + U_u h)          (no gate biases)
    h~ = tanh(W e + b + U (r ⊙ h))    h = u ⊙ h~ + (1 - u) ⊙ h      (u = 1 - z of the paper)

The decoder adds ``C_r c``, ``C_u c`` inside the gates and ``C c`` (not reset) in the candidate;
its readout is ``o_t = O_c c + O_h s_{t-1} + b_o + [t>1] O_y f(y_{t-1})``, maxout, then the
rank-E factorised softmax ``(m W_1) W_2 + b_out`` (§1.4-1.7).

For speed the input side of all steps is projected with one matmul before the recurrence, each
step does one ``[U_r;U_u] h`` and one ``U (r ⊙ h)`` matmul, and the readout and softmax run after
the loop on the packed non-padding positions only. Under ``torch.autocast`` the matmuls run in
bf16 while the recurrent state, the log-softmax and every sum stay in fp32.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rescorer.device import CompileGuard, soft_compile
from rescorer.model.config import ModelConfig
from rescorer.model.gated import GatedEmbeddingInput, GatedRecurrence
from rescorer.model.init import init_weights_
from rescorer.model.recurrence import gated_sequence
from rescorer.model.softmax import picked_log_softmax

# The packed readout rows are padded to a multiple of this (see token_logprobs).
ROW_BUCKET = 64

__all__ = [
    "DecoderContext",
    "EncoderDecoder",
    "GatedEmbeddingInput",
    "GatedRecurrence",
    "Kernels",
    "ModelConfig",
    "compile_kernels",
    "init_weights_",
    "sequence_logprobs",
]


class Kernels(NamedTuple):
    """Compiled versions of the encoder step, the decoder step and the readout (see
    :func:`compile_kernels`); passed to ``encode`` and ``token_logprobs``, never kept on a model."""

    enc_step: Callable[[Tensor, Tensor], Tensor]
    dec_step: Callable[[Tensor, Tensor], Tensor]
    readout: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
    readout_picks: Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
    dec_tree_step: Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]


class DecoderContext(NamedTuple):
    """The decoder's per-source terms, computed once per source phrase (B = sources)."""

    c: Tensor  # (B,H) summary vector
    s0: Tensor  # (B,H) initial state tanh(W_init c + b_init)
    c_gates: Tensor  # (B,2H) [C_r c ; C_u c]
    c_cand: Tensor  # (B,H) C c
    c_out: Tensor  # (B,P*M) O_c c

    def index_select(self, index: Tensor) -> DecoderContext:
        """Rows ``index`` (K,) of every term, e.g. to expand one source to its many targets."""
        return DecoderContext(*(t.index_select(0, index) for t in self))


class EncoderDecoder(nn.Module):
    """The paper's model; ``token_logprobs`` is the one function behind training and scoring."""

    # True: training runs the per-step code through autograd, as scoring does (the
    # straightforward reference of tests/train/test_step.py).
    per_step_training = False

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        H, E = config.hidden_size, config.embed_size
        PM = config.maxout_units * config.maxout_pool
        # Encoder (docs/model.md §1.2).
        self.enc_input = GatedEmbeddingInput(config.src_rows, E, H)
        self.enc_rec = GatedRecurrence(H)
        # Decoder initial state s0 = tanh(W_init c + b_init) (§1.4).
        self.dec_init = nn.Linear(H, H, bias=True)
        # c enters the decoder through [C_r; C_u; C] (§1.5) and O_c (§1.6): one (H, 3H+PM) product.
        self.dec_context = nn.Linear(H, 3 * H + PM, bias=False)
        # Decoder recurrence (§1.5).
        self.dec_input = GatedEmbeddingInput(config.tgt_rows, E, H)
        self.dec_rec = GatedRecurrence(H)
        # Deep output (§1.6): O_h has the readout's only bias; O_y takes f(y_{t-1}).
        self.out_hidden = nn.Linear(H, PM, bias=True)  # O_h, b_o
        self.out_prev_word = nn.Linear(E, PM, bias=False)  # O_y
        # Rank-E factorised softmax (§1.7): W_1 (M x E), W_2 (E x V) and b_out.
        self.out_rank = nn.Linear(config.maxout_units, E, bias=False)  # W_1
        self.out_vocab = nn.Linear(E, config.tgt_rows, bias=True)  # W_2, b_out

    def sequence_steps(self) -> bool:
        """Whether the recurrences run as whole sequences (rescorer/model/recurrence.py):
        when training (gradients on, train mode), unless ``per_step_training`` is set."""
        return self.training and torch.is_grad_enabled() and not self.per_step_training

    # ----------------------------------------------------------------------------- encoder
    def encode(self, src_ids: Tensor, src_lens: Tensor, kernels: Kernels | None = None) -> Tensor:
        """Summary vectors c (B,H) fp32: the encoder state after the EOS step (§1.3).

        src_ids: (B,S) long, each row ending with EOS, padded with PAD_ID after it;
        src_lens: (B,) long, lengths including the EOS (>= 1);
        kernels: compiled steps to use instead of the eager ones (same results).
        """
        B, S = src_ids.shape
        x = self.enc_input.project(self.enc_input.embed_ids(src_ids))  # (B,S,3H)
        h = x.new_zeros(B, self.config.hidden_size)  # (B,H) h_0 = 0
        if self.sequence_steps():  # training: padding skipped, backward by hand
            rec = self.enc_rec
            seq = gated_sequence(x, h, src_lens, rec.gate_proj.weight, rec.cand_proj.weight)
            last = (src_lens - 1).to(seq.device)  # (B,)
            return seq[torch.arange(B, device=seq.device), last]  # (B,H)
        states = []
        enc_step = kernels.enc_step if kernels else self.enc_rec.step
        for t in range(S):
            h = enc_step(x[:, t], h)  # (B,H)
            states.append(h)
        # Padding never reaches c: take each row's state at its true last step.
        all_states = torch.stack(states, dim=1)  # (B,S,H)
        last = (src_lens - 1).to(all_states.device)  # (B,)
        return all_states[torch.arange(B, device=all_states.device), last]  # (B,H)

    def encode_step(
        self, tokens: Tensor, h: Tensor | None, kernels: Kernels | None = None
    ) -> Tensor:
        """One encoder step for n sequences at once: their next tokens (n,) long and states
        h (n,H) fp32 (None: h_0 = 0, the first step). Returns the new states (n,H). Stepping
        :meth:`encode`'s rows one token at a time gives its states; a prefix tree of sources
        (rescorer/score) steps each distinct prefix once."""
        x = self.enc_input.project(self.enc_input.embed_ids(tokens))  # (n,3H)
        if h is None:
            h = x.new_zeros(len(tokens), self.config.hidden_size)  # (n,H) as encode's h_0
        return (kernels.enc_step if kernels else self.enc_rec.step)(x, h)  # (n,H)

    # ----------------------------------------------------------------------------- decoder
    def decoder_context(self, c: Tensor) -> DecoderContext:
        """The per-source decoder terms of summary vectors c (B,H)."""
        H = self.config.hidden_size
        s0 = torch.tanh(self.dec_init(c).float())  # (B,H)
        proj = self.dec_context(c).float()  # (B,3H+PM)
        return DecoderContext(
            c=c,
            s0=s0,
            c_gates=proj[:, : 2 * H],  # (B,2H)
            c_cand=proj[:, 2 * H : 3 * H],  # (B,H)
            c_out=proj[:, 3 * H :],  # (B,PM)
        )

    def token_logprobs(
        self,
        ctx: DecoderContext,
        tgt_ids: Tensor,
        tgt_lens: Tensor,
        kernels: Kernels | None = None,
    ) -> Tensor:
        """ln p(y_t | y_<t, x) for every target position, fp32 (B,T), 0.0 at padding.

        ctx: the decoder context of each row's source (B rows);
        tgt_ids: (B,T) long, each row ending with EOS (which is predicted and scored);
        tgt_lens: (B,) long, lengths including the EOS (>= 1);
        kernels: compiled steps and readout to use instead of the eager ones.
        """
        states = self.decoder_states(ctx, tgt_ids, kernels, tgt_lens)
        return self.packed_readout(ctx, tgt_ids, tgt_lens, states, kernels)

    def decoder_states(
        self,
        ctx: DecoderContext,
        tgt_ids: Tensor,
        kernels: Kernels | None = None,
        tgt_lens: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The recurrence of ``token_logprobs``: prev_states (B,T,H) fp32, row t holding the
        state s_{t-1} that predicts y_t (1-based t), and the target embeddings f (B,T,E).
        With tgt_lens (B,) given, rows past their length may hold anything (see encode)."""
        T = tgt_ids.shape[1]
        f = self.dec_input.embed_ids(tgt_ids)  # (B,T,E) f(y_t)
        # Input side of the decoder unit, with C_r c, C_u c and C c added at every step.
        x = self.dec_input.project(f, torch.cat([ctx.c_gates, ctx.c_cand], dim=1))  # (B,T,3H)
        # s_t (after consuming y_t) predicts y_{t+1}: only s_0 .. s_{T-1} are needed.
        s = ctx.s0.float()  # (B,H)
        if self.sequence_steps() and tgt_lens is not None:  # training: see encode
            rec = self.dec_rec
            steps = (tgt_lens - 1).to(x.device)  # (B,) s_1 .. s_{len-1} are read
            seq = gated_sequence(
                x[:, : T - 1], s, steps, rec.gate_proj.weight, rec.cand_proj.weight
            )  # (B,T-1,H)
            return torch.cat([s.unsqueeze(1), seq], dim=1), f  # (B,T,H), (B,T,E)
        states = [s]
        dec_step = kernels.dec_step if kernels else self.dec_rec.step
        for t in range(T - 1):
            s = dec_step(x[:, t], s)  # (B,H)
            states.append(s)
        return torch.stack(states, dim=1), f  # (B,T,H), (B,T,E)

    def decoder_tree_step(
        self, tokens: Tensor, parents: Tensor, node_src: Tensor, s_prev: Tensor, terms: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One level of a prefix tree of (source, target prefix), rescorer/score: n nodes, each
        its parent's prefix extended by one word. tokens (n,) long the words; parents (n,) long
        rows of the previous level; node_src (m,) long and s_prev (m,H) fp32 that level's
        sources and states; terms (U,3H) [C_r c ; C_u c ; C c] of every source. Returns the
        new states (n,H) fp32, the words' embeddings f (n,E) and the nodes' sources (n,).
        Compiled, the gathers and additions fuse into the step's elementwise work."""
        src = node_src.index_select(0, parents)  # (n,)
        f = self.dec_input.embed_ids(tokens)  # (n,E)
        x = self.dec_input.project(f, terms.index_select(0, src))  # (n,3H)
        return self.dec_rec.step(x, s_prev.index_select(0, parents)), f, src

    def packed_readout(
        self,
        ctx: DecoderContext,
        tgt_ids: Tensor,
        tgt_lens: Tensor,
        states: tuple[Tensor, Tensor],
        kernels: Kernels | None = None,
    ) -> Tensor:
        """The readout of ``token_logprobs`` on the packed non-padding positions only, from
        ``decoder_states``' result; token_logp (B,T) fp32, 0.0 at padding."""
        prev_states, f = states  # (B,T,H), (B,T,E)
        B, T = tgt_ids.shape
        mask = torch.arange(T, device=tgt_ids.device) < tgt_lens.to(tgt_ids.device).unsqueeze(1)
        rows, cols = mask.nonzero(as_tuple=True)  # (N,), (N,) in row-major order
        N = rows.numel()
        # Round N up to a multiple of ROW_BUCKET with copies of position (0, 0), dropped below:
        # few distinct matrix shapes keep oneDNN's per-shape caches and the heap from growing.
        extra = -N % ROW_BUCKET
        if extra:
            rows = torch.cat([rows, rows.new_zeros(extra)])  # (N',)
            cols = torch.cat([cols, cols.new_zeros(extra)])  # (N',)
        s_prev = prev_states[rows, cols]  # (N,H)
        # The previous word f(y_{t-1}); zero for t = 1 (no BOS; ff_layers.py Shift).
        has_prev = cols > 0  # (N,)
        f_prev = f[rows, (cols - 1).clamp(min=0)] * has_prev.unsqueeze(1).to(f.dtype)  # (N,E)
        c_out = ctx.c_out.index_select(0, rows)  # (N,PM)
        readout = kernels.readout if kernels else self.eager_readout_logprobs
        tok = readout(s_prev, f_prev, c_out, tgt_ids[rows, cols])  # (N',)
        rows, cols, tok = rows[:N], cols[:N], tok[:N]  # (N,)
        token_logp = torch.zeros(B, T, dtype=torch.float32, device=tgt_ids.device)  # (B,T)
        return token_logp.index_put((rows, cols), tok)

    def readout_logits(self, s_prev: Tensor, f_prev: Tensor, c_out: Tensor) -> Tensor:
        """Unnormalised scores (N,V) fp32 at N positions: deep output, maxout, softmax layer
        (§1.6). s_prev: (N,H) the decoder state before each position; f_prev: (N,E) the previous
        word's embedding (zeros at t = 1); c_out: (N,PM) O_c c of each position's source."""
        return self._unbiased_logits(s_prev, f_prev, c_out).float() + self.out_vocab.bias.float()

    def _unbiased_logits(self, s_prev: Tensor, f_prev: Tensor, c_out: Tensor) -> Tensor:
        """readout_logits without b_out, in the products' precision (N,V)."""
        return F.linear(self._rank_output(s_prev, f_prev, c_out), self.out_vocab.weight)

    def _rank_output(self, s_prev: Tensor, f_prev: Tensor, c_out: Tensor) -> Tensor:
        """m W_1 (N,E): the deep output, maxout and the softmax's first factor (§1.6-1.7)."""
        o = self.out_hidden(s_prev) + self.out_prev_word(f_prev) + c_out.to(s_prev.dtype)
        M, P = self.config.maxout_units, self.config.maxout_pool
        m = o.view(-1, M, P).amax(dim=-1)  # (N,M): m[i] = max(o[P i], ..., o[P i + P - 1])
        return self.out_rank(m)  # (N,E)

    def readout_logprobs(
        self, s_prev: Tensor, f_prev: Tensor, c_out: Tensor, targets: Tensor
    ) -> Tensor:
        """ln p(y_t | ...) (N,) fp32 of targets (N,) at N packed positions (see readout_logits).

        The bias b_out is added in fp32 on the way into the log-sum-exp, not in the (N,E) x (E,V)
        product: compiled, the (N,V) logits are then written once and read once (a bias in the
        product is first copied into its whole output, then read back)."""
        logits = self.readout_logits(s_prev, f_prev, c_out)  # (N,V) fp32
        picked = logits.gather(1, targets.unsqueeze(1)).squeeze(1)  # (N,)
        return picked - torch.logsumexp(logits, dim=1)  # (N,) fp32

    def trained_readout_logprobs(
        self, s_prev: Tensor, f_prev: Tensor, c_out: Tensor, targets: Tensor
    ) -> Tensor:
        """readout_logprobs for training: the same numbers, the softmax's last product and its
        backward pass written out (rescorer/model/softmax.py: fewer passes over the logits)."""
        x = self._rank_output(s_prev, f_prev, c_out)  # (N,E)
        return picked_log_softmax(x, self.out_vocab.weight, self.out_vocab.bias, targets)

    def eager_readout_logprobs(
        self, s_prev: Tensor, f_prev: Tensor, c_out: Tensor, targets: Tensor
    ) -> Tensor:
        """The readout ``packed_readout`` runs without kernels: in training the written-out
        one, else readout_logprobs. A compiled readout falls back to it, so a compile that
        fails trains as ``--compile no`` does, bit for bit."""
        if self.sequence_steps():
            return self.trained_readout_logprobs(s_prev, f_prev, c_out, targets)
        return self.readout_logprobs(s_prev, f_prev, c_out, targets)

    def readout_picks(
        self, s_prev: Tensor, f_prev: Tensor, c_out: Tensor, rows: Tensor, targets: Tensor
    ) -> Tensor:
        """ln p (K,) fp32 of K picks at N positions: pick k is word targets[k] at position
        rows[k]. One log-sum-exp per position serves all its picks (targets that share a
        prefix under one source share their positions: rescorer/score). s_prev, f_prev,
        c_out as in readout_logits (N rows)."""
        logits = self.readout_logits(s_prev, f_prev, c_out)  # (N,V) fp32
        lse = torch.logsumexp(logits, dim=1)  # (N,)
        return logits[rows, targets] - lse[rows]  # (K,)

    # ----------------------------------------------------------- one target word at a time
    def next_word_logits(self, ctx: DecoderContext, s_prev: Tensor, prev: Tensor | None) -> Tensor:
        """Scores (B,V) fp32 of the next word of B partial targets, for generation: their
        states s_prev (B,H) and last words prev (B,) long (None at the first word, which has
        no previous word). ``log_softmax`` of the result is what ``token_logprobs`` scores."""
        if prev is None:
            f_prev = s_prev.new_zeros(len(s_prev), self.config.embed_size)  # (B,E)
        else:
            f_prev = self.dec_input.embed_ids(prev)  # (B,E)
        return self.readout_logits(s_prev, f_prev, ctx.c_out)  # (B,V)

    def next_state(self, ctx: DecoderContext, s_prev: Tensor, words: Tensor) -> Tensor:
        """The decoder states (B,H) fp32 after consuming words (B,) long from s_prev (B,H)."""
        f = self.dec_input.embed_ids(words)  # (B,E)
        x = self.dec_input.project(f, torch.cat([ctx.c_gates, ctx.c_cand], dim=1))  # (B,3H)
        return self.dec_rec.step(x, s_prev.float())  # (B,H)

    def forward(
        self,
        src_ids: Tensor,
        src_lens: Tensor,
        tgt_ids: Tensor,
        tgt_lens: Tensor,
        kernels: Kernels | None = None,
    ) -> Tensor:
        """token_logp (B,T) fp32 of the pairs (src_ids (B,S), tgt_ids (B,T), both ending in EOS),
        with ``kernels`` (compiled steps and readout, forward and backward) if given."""
        ctx = self.decoder_context(self.encode(src_ids, src_lens, kernels))
        return self.token_logprobs(ctx, tgt_ids, tgt_lens, kernels)

    def recurrent_matrices(self) -> list[Tensor]:
        """The H x H recurrent blocks U_r, U_u, U (encoder, then decoder), as views."""
        H = self.config.hidden_size
        blocks = []
        for rec in (self.enc_rec, self.dec_rec):
            blocks += [rec.gate_proj.weight[:H], rec.gate_proj.weight[H:], rec.cand_proj.weight]
        return blocks


def compile_kernels(model: EncoderDecoder, guard: CompileGuard | None = None) -> Kernels:
    """``torch.compile`` versions of ``model``'s recurrent steps and readout (the model is not
    changed; pass the result to ``encode`` / ``token_logprobs``).

    Inductor fuses each step's gate arithmetic and the log-softmax (one pass over the logits
    instead of several); the matrix products stay library calls, so results agree with eager
    mode to float rounding. Compiling takes tens of seconds once per process (faster with
    inductor's on-disk cache), so it pays off on large tables only. A compile error falls back
    to the eager functions, all five at once (``guard``, shared by them: rescorer/device.py).
    """
    compile_ = functools.partial(soft_compile, guard=guard or CompileGuard(), dynamic=True)
    return Kernels(
        compile_(model.enc_rec.step),
        compile_(model.dec_rec.step),
        compile_(model.readout_logprobs, fallback=model.eager_readout_logprobs),
        compile_(model.readout_picks),
        compile_(model.decoder_tree_step),
    )


def sequence_logprobs(token_logp: Tensor) -> Tensor:
    """log p(y|x) (B,) fp32: the sum over target tokens and EOS of token_logp (B,T)."""
    return token_logp.float().sum(dim=1)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
