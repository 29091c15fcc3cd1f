"""Shared-memory slots: a chunk's bytes go to a worker process, and its output comes back,
without crossing a pipe.

Through the pool's pipes every chunk of a streamed job crossed four times (to the parser, back,
to the formatter, back), pickled and copied each time by the main process's threads, and the
main process's own ceiling stayed under 1,000,000 lines/s whatever the workers (issue 57). Now
the main process (:class:`Slots`) copies each chunk's bytes into a slot, a segment of shared
memory, and a worker reads them through a :class:`SharedText`, a handle that pickles as the
segment's name and the length. The parse stage's result comes back with its arrays in the
slot's second region (:func:`result_into`: pickle protocol 5's out-of-band buffers, which the
main process copies out of the slot: a memory copy in place of a pipe's), and the format stage
writes its output into the first region, over the chunk it has read (:func:`output_into`); the
main process writes it to OUT from there. A slot is reused once its chunk's output is written.

Where no slot can be had, the chunk's bytes cross through the pipe as before, and the output is
the same: a chunk larger than a slot (one source phrase over many chunks' worth of lines), an
output larger than its slot (and result arrays beyond the second region: they cross in the
pickle), or no room in /dev/shm (each segment's space is reserved when it is
made, so a full tmpfs is a fallback here and not a SIGBUS later). The slots take at most half
the memory the run could still take (:func:`~rescorer.io.shm.free_memory`: a /dev/shm may be
larger than the memory). Segments are unlinked when the run ends; a killed run's are unlinked
by multiprocessing's resource tracker, or, where it was killed too, by a later run: their
names say whose they are (:mod:`rescorer.io.shm`). No torch here.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import pickle
from collections.abc import Callable, Sized
from multiprocessing import resource_tracker, shared_memory
from typing import Any

from rescorer.io.shm import free_memory, owner, shm_room

OUT_OF_BAND = 4096  # a result's buffers of at least this many bytes go in the slot
ALIGN = 64

_segments: dict[str, shared_memory.SharedMemory] = {}  # by name: made here, or attached


def _buf(segment: shared_memory.SharedMemory) -> memoryview:
    buf = segment.buf
    assert buf is not None  # an open segment's
    return buf


def _segment(name: str) -> shared_memory.SharedMemory:
    """The segment ``name``: this process's own, or attached once (a worker's)."""
    segment = _segments.get(name)
    if segment is None:
        segment = _segments[name] = _attach(name)
    return segment


def _attach(name: str) -> shared_memory.SharedMemory:
    """Another process's segment, left out of the resource tracker: its owner alone registers
    and unlinks it. Before Python 3.13 attaching registered it too, and a worker still
    attaching while a failing run unlinked its segments registered a name already gone: the
    tracker then warned of a leak at exit (and a process outside the pool's tracker unlinked
    the segment when it ended, under its owner's feet)."""
    try:
        return shared_memory.SharedMemory(name, track=False)  # type: ignore[call-arg]
    except TypeError:  # before 3.13: no track argument
        pass
    register = resource_tracker.register
    resource_tracker.register = _not_tracked
    try:
        return shared_memory.SharedMemory(name)
    finally:
        resource_tracker.register = register


def _not_tracked(name: Sized, rtype: str) -> None:
    """resource_tracker.register's stand-in while a worker attaches (:func:`_attach`)."""


class SharedText:
    """Bytes [0, ``length``) of shared-memory segment ``name``: what crosses to a worker in
    place of the bytes themselves. The segment's first ``room`` bytes are the text's region
    (the chunk, then its output); the rest, the parse result's."""

    __slots__ = ("length", "name", "room")

    def __init__(self, name: str, length: int, room: int) -> None:
        self.name, self.length, self.room = name, length, room

    def __reduce__(self) -> tuple[Any, ...]:
        return SharedText, (self.name, self.length, self.room)

    def __len__(self) -> int:
        return self.length

    def view(self) -> memoryview:
        """The bytes, in place (release the view before the segment's owner closes it)."""
        return _buf(_segment(self.name))[: self.length]

    def tobytes(self) -> bytes:
        """A copy of the bytes."""
        with self.view() as view:
            return view.tobytes()


def as_bytes(data: bytes | SharedText) -> bytes:
    """``data``'s bytes, copied out of its slot where it is a :class:`SharedText`."""
    return data.tobytes() if isinstance(data, SharedText) else data


def output_into(
    slot: SharedText, func: Callable[..., bytes], args: tuple[Any, ...]
) -> bytes | SharedText:
    """``func(*args)`` (a format stage, in a worker) written into ``slot``, whose chunk it has
    read: the handle of the output, or the output's bytes where it does not fit."""
    data = func(*args)
    if len(data) > slot.room:
        return data
    _buf(_segment(slot.name))[: len(data)] = data
    return SharedText(slot.name, len(data), slot.room)


class InSlot:
    """A parse result pickled with its large buffers left in its slot's result region, at
    ``spans`` (offset, bytes): :meth:`load` reads them in place."""

    __slots__ = ("data", "name", "spans")

    def __init__(self, name: str, data: bytes, spans: list[tuple[int, int]]) -> None:
        self.name, self.data, self.spans = name, data, spans

    def __reduce__(self) -> tuple[Any, ...]:
        return InSlot, (self.name, self.data, self.spans)

    def load(self) -> Any:
        """The result, its arrays copied out of the slot (a memory copy, not a pipe's: the
        arrays outlive the slot's reuse, and no view of it stays exported)."""
        buf = _buf(_segment(self.name))
        buffers = []
        for at, n in self.spans:
            with buf[at : at + n] as span:
                buffers.append(bytearray(span))
        return pickle.loads(self.data, buffers=buffers)


def result_into(slot: SharedText, func: Callable[..., Any], args: tuple[Any, ...]) -> InSlot:
    """``func(*args)`` (a parse stage, in a worker) pickled for the main process with its
    buffers of :data:`OUT_OF_BAND` bytes or more (numpy arrays) in ``slot``'s result region,
    as many as fit there; the rest crosses the pipe."""
    result = func(*args)
    buf = _buf(_segment(slot.name))
    spans: list[tuple[int, int]] = []
    end = slot.room  # where the region's free bytes start

    def place(buffer: pickle.PickleBuffer) -> bool:
        nonlocal end
        with buffer.raw() as raw:
            at = -(-end // ALIGN) * ALIGN
            if raw.nbytes < OUT_OF_BAND or at + raw.nbytes > len(buf):
                return True  # in the pickle
            buf[at : at + raw.nbytes] = raw
            spans.append((at, raw.nbytes))
            end = at + raw.nbytes
        return False

    return InSlot(slot.name, pickle.dumps(result, protocol=5, buffer_callback=place), spans)


def loaded(value: Any) -> Any:
    """A stage's result as the main process receives it: an :class:`InSlot` loaded."""
    return value.load() if isinstance(value, InSlot) else value


class Slots:
    """The main process's slots: at most ``count`` segments, each ``capacity`` bytes for a
    chunk and its output, then ``results`` bytes for its parse result's arrays, made as the
    run needs them (:meth:`put`), reused once freed (:meth:`free`), unlinked by
    :meth:`close`. Fewer where they would take more than half of ``memory`` (None: the
    memory this process could still take, :func:`~rescorer.io.shm.free_memory`)."""

    def __init__(
        self,
        capacity: int,
        count: int,
        refused: Callable[[str], None] | None = None,
        results: int = 0,
        memory: int | None = None,
    ) -> None:
        """``refused`` is told once, in words, if there is room for fewer slots than
        ``count`` or the system refuses a segment."""
        self.capacity = -(-capacity // ALIGN) * ALIGN
        self.size = -(-(self.capacity + results) // mmap.PAGESIZE) * mmap.PAGESIZE
        self.refused = refused
        self._free: list[str] = []
        self._made: list[str] = []
        self._failed = False  # /dev/shm refused a segment: no more are tried
        memory = free_memory() if memory is None else memory
        self.count = count
        if memory is not None and memory // 2 // self.size < count:
            self.count = memory // 2 // self.size
            self._say(
                f"shared memory for {self.count} of the {count} chunks in flight "
                f"({self.size / (1 << 20):,.1f} MiB each; the slots take at most half of the "
                f"{memory / (1 << 20):,.0f} MiB of memory this run could still take): the "
                "others cross to the workers through pipes, which is slower"
            )

    def put(self, data: bytes) -> SharedText | None:
        """``data`` in a free slot, or None (too large, every slot in use, no room)."""
        if len(data) > self.capacity:
            return None
        name = self._free.pop() if self._free else self._make()
        if name is None:
            return None
        _buf(_segments[name])[: len(data)] = data
        return SharedText(name, len(data), self.capacity)

    def free(self, name: str) -> None:
        """Slot ``name``'s chunk is written: the slot takes the next chunk."""
        self._free.append(name)

    def _make(self) -> str | None:
        if self._failed or len(self._made) >= self.count:
            return None
        try:
            made_by = owner()  # a name that says whose it is, where /dev/shm is a folder
            name = made_by.name() if made_by is not None else None
            segment = shared_memory.SharedMemory(name, create=True, size=self.size)
        except OSError as exc:
            self._refuse(exc)
            return None
        try:  # reserve the pages now: a full /dev/shm fails here, not with SIGBUS on a write
            os.posix_fallocate(segment._fd, 0, self.size)  # type: ignore[attr-defined]
        except OSError as exc:
            segment.close()
            segment.unlink()
            self._refuse(exc)
            return None
        _segments[segment.name] = segment
        self._made.append(segment.name)
        return segment.name

    def _refuse(self, exc: OSError) -> None:
        self._failed = True
        self._say(
            f"no shared memory for another {self.size / (1 << 20):,.1f} MiB slot "
            f"({exc.strerror}{shm_room()}, {len(self._made)} slots made): the chunks "
            "that find no slot cross to the workers through pipes, which is slower; a container "
            "needs more shared memory (docker run --shm-size)"
        )

    def _say(self, text: str) -> None:
        """``text`` to ``refused``, the first time only."""
        if self.refused is not None:
            self.refused(text)
            self.refused = None

    def close(self) -> None:
        """Every segment made unlinked (workers still holding one keep their mapping)."""
        for name in self._made:
            segment = _segments.pop(name)
            with contextlib.suppress(BufferError):  # a view still held: the mapping stays
                segment.close()
            segment.unlink()
        self._made, self._free = [], []

    def __enter__(self) -> Slots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def keep_freed_memory() -> None:
    """glibc's malloc keeps the blocks a chunk frees for the next chunk: by default it hands
    blocks of 128 KiB and more back to the system, and every chunk faulted its pages in again
    (3,360 page faults a 1 MiB chunk, about 2 us each; parse and format 1.27x faster at
    1c5e99a without them). For the processes that stream chunks through a pool: its workers,
    and the main process that copies each chunk in and its results out. Their memory stays
    bounded by the chunks in flight. Not glibc: nothing."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, 256 << 20)  # blocks up to 256 MiB from the heap
        libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)  # the heap shrinks past 1 GiB free only
    except (OSError, AttributeError):
        pass


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
