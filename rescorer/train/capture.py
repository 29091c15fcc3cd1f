"""The update at fixed shapes, replayed as a CUDA graph (``train --capture``).

On a GPU an update of the paper's model is a few hundred small kernels launched from Python,
and the device waits on the launches (issue 56). Here the whole update (forward, backward,
global-norm clip, Adadelta) runs on static buffers of one shape per length bucket
(rescorer/batching.py's ``bucketed_batches``), so that it can be captured once per shape and
replayed:

- a batch is padded to (``batch_size``, its bucket's length) on both sides; a short batch is
  filled with empty rows (source: one PAD token; target: length 0), which add nothing to the
  loss and so nothing to the gradients;
- the forward pass is the model's per-step code (``per_step_training``: the straightforward
  reference, fixed shapes, no host synchronisation) and a readout over every (row, position),
  padding masked out; the same function as the packed one (encdec.py) to float rounding;
- the clip and Adadelta's step are computed on the device with a mask: a non-finite gradient
  norm leaves the weights and the optimiser state as they were (ClippedAdadelta's skip) without
  the host ever reading the norm;
- the loss, the non-finite losses and the skipped steps accumulate on the device; the loop reads
  them back every --log-every updates (:meth:`StaticUpdate.take`).

``mode``: ``graph`` captures each shape as a ``torch.cuda.CUDAGraph`` (after two warm-up runs
on a side stream that change nothing: the mask is off) and replays it; ``compile`` runs the
forward and backward through ``torch.compile(mode="reduce-overhead")`` (torch's own CUDA graphs)
and the masked step eagerly; ``eager`` runs the same fixed-shape update without either (the
CPU, and the reference the GPU test compares the graph with). The host prepares the next
batch (padding, pinned memory, an asynchronous copy into the static buffers) while the device
still runs the previous update: nothing in an update waits for the device.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rescorer.batching import PairArrays, PairBatch, pad_flat
from rescorer.constants import PAD_ID
from rescorer.model.encdec import EncoderDecoder, Kernels, sequence_logprobs

#: --capture's choices; auto: off (the eager update) on every device until the GPU tests have
#: passed on a GPU (issue 64, item 7: the captured update has never run on one); on opts in.
CAPTURE_CHOICES = ("auto", "on", "off", "compile")
MODES = {"on": "graph", "compile": "compile"}
#: What the first line adds for --capture auto on a GPU.
UNTESTED = "CUDA graphs not yet tested on a GPU; --capture on replays the update as one"


def capture_mode(choice: str, device: torch.device) -> str:
    """The StaticUpdate mode of --capture ``choice`` ('' for today's eager update; ``auto`` is
    that on every device for now): on a CPU ``on`` runs the fixed-shape update without a graph
    (there are none), ``compile`` compiles it without CUDA graphs."""
    if choice in ("auto", "off"):
        return ""
    if device.type != "cuda":
        return "eager" if choice == "on" else "compile"
    return MODES[choice]


def describe_mode(mode: str, choice: str, device: torch.device) -> str:
    """The first line's words for the update's mode (on a GPU, why auto does not capture)."""
    if not mode:
        why = f": {UNTESTED}" if choice == "auto" and device.type == "cuda" else ""
        return f"the update eager (--capture {choice}{why})"
    how = {
        "graph": "replayed as a CUDA graph",
        "compile": "through torch.compile(mode='reduce-overhead')",
        "eager": "run eagerly (no CUDA graphs on this device)",
    }[mode]
    return f"the update at fixed shapes (length buckets), {how} (--capture {choice})"


def padded_batch(
    pairs: PairArrays, index: np.ndarray, batch_size: int, length: int, pin: bool = False
) -> PairBatch:
    """The pairs ``index`` (n <= batch_size,) as a batch of exactly ``batch_size`` rows padded
    to ``length`` on both sides (CPU tensors, pinned if asked); rows n.. are empty (source: one
    PAD token, target: length 0)."""
    index = np.asarray(index, dtype=np.int64)
    n = len(index)
    out = []
    for flat, offsets in ((pairs.src, pairs.src_offsets), (pairs.tgt, pairs.tgt_offsets)):
        ids = np.full((batch_size, length), PAD_ID, dtype=np.int64)  # (B,L)
        rows = pad_flat(flat, offsets, index)  # (n,l) l <= length
        ids[:n, : rows.shape[1]] = rows
        lens = np.zeros(batch_size, dtype=np.int64)  # (B,)
        lens[:n] = (offsets[index + 1] - offsets[index]) if n else 0
        out += [torch.from_numpy(ids), torch.from_numpy(lens)]
    out[1][n:] = 1  # an empty row's source: one PAD token (the encoder reads one step)
    if pin:
        out = [t.pin_memory() for t in out]
    return PairBatch(*out)


def fixed_shape_loss(
    model: EncoderDecoder, batch: PairBatch, kernels: Kernels | None = None
) -> Tensor:
    """batch_loss (loop.py) at the batch's padded shape: the per-step recurrences over every
    position and the readout over every (row, position), padding masked out; a 0-d fp32.
    The model must have ``per_step_training`` set (fixed shapes: encdec.py's per-step code)."""
    assert model.per_step_training, "fixed shapes need the per-step code"
    src_ids, src_lens, tgt_ids, tgt_lens = batch
    B, T = tgt_ids.shape
    ctx = model.decoder_context(model.encode(src_ids, src_lens, kernels))
    prev_states, f = model.decoder_states(ctx, tgt_ids, kernels, tgt_lens)  # (B,T,H), (B,T,E)
    mask = torch.arange(T, device=tgt_ids.device) < tgt_lens.unsqueeze(1)  # (B,T)
    f_prev = torch.cat([torch.zeros_like(f[:, :1]), f[:, :-1]], dim=1)  # (B,T,E) f(y_{t-1})
    c_out = ctx.c_out.unsqueeze(1).expand(B, T, ctx.c_out.shape[1])  # (B,T,PM)
    targets = torch.where(mask, tgt_ids, 0)  # (B,T)
    readout = kernels.readout if kernels else model.readout_logprobs
    tok = readout(
        prev_states.reshape(B * T, -1),
        f_prev.reshape(B * T, -1),
        c_out.reshape(B * T, -1),
        targets.reshape(B * T),
    )  # (B*T,)
    token_logp = torch.where(mask, tok.view(B, T).float(), 0.0)  # (B,T)
    return -sequence_logprobs(token_logp).sum()


def masked_adadelta_(
    params: list[Tensor],
    states: list[tuple[Tensor, Tensor]],
    coef: Tensor,
    ok: Tensor,
    lr: float,
    rho: float,
    eps: float,
) -> None:
    """optim.py's _adadelta_update on the gradients times ``coef``, applied where ``ok`` (a 0-d
    bool on the device) holds and nothing changed where not: no host synchronisation."""
    for param, (square_avg, acc_delta) in zip(params, states, strict=True):
        assert param.grad is not None
        grad = torch.where(ok, param.grad * coef, 0.0)  # a non-finite gradient never reaches
        new_square = torch.addcmul(square_avg * rho, grad, grad, value=1 - rho)
        std = new_square.add(eps).sqrt_()
        delta = acc_delta.add(eps).sqrt_().div_(std).mul_(grad)  # 0 where not ok
        new_acc = torch.addcmul(acc_delta * rho, delta, delta, value=1 - rho)
        square_avg.copy_(torch.where(ok, new_square, square_avg))
        acc_delta.copy_(torch.where(ok, new_acc, acc_delta))
        param.add_(delta, alpha=-lr)


@contextmanager
def _precision(device: torch.device, precision: str) -> Iterator[None]:
    """device.autocast without autocast's weight-cast cache (which a graph must not keep)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
    if precision == "bf16":
        with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False):
            yield
    else:
        yield


class StaticUpdate:
    """The fixed-shape update of ``model`` with ``optim`` (a torch Adadelta of one group), one
    static input buffer per padded length (module docstring). From here on the model's
    training forward pass is its per-step code (``per_step_training`` set on it)."""

    def __init__(
        self,
        model: EncoderDecoder,
        optim: torch.optim.Adadelta,
        clip_norm: float,
        precision: str,
        batch_size: int,
        mode: str = "graph",
        kernels: Kernels | None = None,
    ) -> None:
        self.model, self.optim, self.mode, self.kernels = model, optim, mode, kernels
        self.clip_norm, self.precision, self.batch_size = clip_norm, precision, batch_size
        self.device = next(model.parameters()).device
        model.per_step_training = True
        group: dict[str, Any] = optim.param_groups[0]
        self.lr, self.rho, self.eps = float(group["lr"]), float(group["rho"]), float(group["eps"])
        self.params = [p for p in group["params"] if p.requires_grad]
        self.states: list[tuple[Tensor, Tensor]] = []
        for p in self.params:  # the state Adadelta.step would create, on the device
            p.grad = torch.zeros_like(p)  # static: zeroed and accumulated in place
            state = optim.state[p]
            if not state:
                state["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["acc_delta"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] = torch.as_tensor(state.get("step", 0.0), dtype=torch.float32).to(
                self.device
            )
            self.states.append((state["square_avg"], state["acc_delta"]))
        # On the device: summed loss, non-finite losses, skipped steps (read by take()).
        self.totals = torch.zeros(3, dtype=torch.float64, device=self.device)
        self.enabled = torch.ones((), dtype=torch.bool, device=self.device)  # off: warm-up
        self.inputs: dict[int, PairBatch] = {}
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.pool: Any = None
        self.loss_fn: Callable[[EncoderDecoder, PairBatch, Kernels | None], Tensor]
        self.loss_fn = fixed_shape_loss
        if mode == "compile":
            compile_mode = "reduce-overhead" if self.device.type == "cuda" else "default"
            self.loss_fn = torch.compile(fixed_shape_loss, mode=compile_mode, dynamic=False)

    @property
    def shapes(self) -> list[int]:
        """The padded lengths seen so far (a graph each in graph mode)."""
        return sorted(self.inputs)

    def body(self, batch: PairBatch) -> None:
        """One update on the static ``batch``: no host synchronisation anywhere."""
        for p in self.params:
            assert p.grad is not None
            p.grad.zero_()
        with _precision(self.device, self.precision):
            if self.mode == "compile" and self.device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()
            loss = self.loss_fn(self.model, batch, self.kernels)
        loss.backward()
        grads = [p.grad for p in self.params]
        with torch.no_grad():
            total = torch.nn.utils.get_total_norm(grads, 2.0)  # clip_grad_norm_'s
            ok = torch.isfinite(total) & self.enabled
            coef = torch.clamp(self.clip_norm / (total + 1e-6), max=1.0)
            masked_adadelta_(self.params, self.states, coef, ok, self.lr, self.rho, self.eps)
            for p in self.params:
                self.optim.state[p]["step"].add_(ok.float())
            finite_loss = torch.isfinite(loss.detach())
            counts = torch.stack([loss.detach().double(), (~finite_loss).double(), (~ok).double()])
            self.totals.add_(torch.where(self.enabled, counts, 0.0))

    def __call__(self, pairs: PairArrays, index: np.ndarray, length: int) -> None:
        """Queue the update on the pairs ``index`` padded to ``length`` (returns at once)."""
        host = padded_batch(pairs, index, self.batch_size, length, pin=self.device.type == "cuda")
        static = self.inputs.get(length)
        if static is None:
            static = self.inputs[length] = PairBatch(*(t.to(self.device) for t in host))
        else:
            for dst, src in zip(static, host, strict=True):
                dst.copy_(src, non_blocking=True)
        if self.mode != "graph":
            self.body(static)
            return
        graph = self.graphs.get(length)
        if graph is None:
            try:
                graph = self.graphs[length] = self.capture(static)
            except RuntimeError as exc:  # a kernel that cannot be captured: no graphs at all
                torch.cuda.synchronize(self.device)
                self.enabled.fill_(True)
                self.mode = "eager"
                self.graphs.clear()
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                print(
                    f"rescorer: warning: capturing the update as a CUDA graph failed ({first});"
                    " continuing with the same update uncaptured (slower)",
                    file=sys.stderr,
                    flush=True,
                )
                self.body(static)
                return
        graph.replay()

    def capture(self, static: PairBatch) -> torch.cuda.CUDAGraph:
        """Two warm-up runs on a side stream with the mask off (nothing changes), then the
        capture; every shape's graph shares one memory pool (they never run at once, and what
        outlives an update, the weights, gradients, state and totals, is allocated outside)."""
        self.enabled.fill_(False)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.body(static)
        torch.cuda.current_stream().wait_stream(side)
        self.enabled.fill_(True)
        graph = torch.cuda.CUDAGraph()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self.pool):
            self.body(static)
        return graph

    def take(self) -> tuple[float, int, int]:
        """(summed loss, non-finite losses, skipped steps) since the last call: the one read
        back from the device (it waits for the queued updates)."""
        loss, bad, skipped = self.totals.tolist()
        self.totals.zero_()
        return loss, int(bad), int(skipped)
