"""In the student's kernel under autograde: each cell's printed output kept to a cap where it is buffered.

The grader keeps ``IsolatedExecute.max_output_bytes`` of a cell's output and notes what it cut
(:mod:`autograder.nbgrader.execute`), but ipykernel sends what a cell printed between two flushes as one message: a
cell printing a gigabyte in a loop made messages of hundreds of MiB, held whole by the grader before it could cut
them.  Here the kernel's ``sys.stdout`` and ``sys.stderr`` (ipykernel's ``OutStream``, which carries what native code writes
to descriptors 1 and 2 too where ipykernel captures them) keep no more than ``limit`` characters of a cell's text in the buffers they send
from, a little more than the grader keeps, so the grader still sees that there was more and says so.

The cap sits in the stream's buffers, not in its ``write``: IPython swaps ``write`` for one of its own around every
cell and puts the one it found back.  It relies on ipykernel 7.4's ``OutStream`` (``_buffers``, ``_buffer_lock``,
``_rotate_buffers``; the version is pinned in pyproject.toml); a stream without them is left as it is.  Code that
undoes this (it runs in the student's kernel) only loses its own output: the grader's sockets drop any message past
``execute.MAX_KERNEL_MESSAGE_BYTES`` before holding it.
"""
from __future__ import annotations

import io
import sys


def cap(limit: int, streams=None) -> None:
    """Keep at most ``limit`` characters a cell (an execute request) writes to each of ``streams`` (default: the
    kernel's stdout and stderr); the rest is dropped."""
    for stream in streams if streams is not None else (sys.stdout, sys.stderr):
        if isinstance(stream, _Capped) or not all(hasattr(stream, name) for name in
                                                    ("_buffers", "_buffer_lock", "_rotate_buffers")):
            continue
        stream.__class__ = type(f"Capped{type(stream).__name__}", (_Capped, type(stream)), {})
        stream._cell_output = {"limit": limit, "counts": {}}
        with stream._buffer_lock:
            stream._buffers = _CellBuffers(stream._cell_output, stream._buffers)


class _Capped:
    """Mixed into the stream's own class: each new set of buffers counts against the cell's cap."""

    __slots__ = ()  # the instance's layout stays its class's: ``__class__`` can be set

    def _rotate_buffers(self):
        with self._buffer_lock:
            old, self._buffers = self._buffers, _CellBuffers(self._cell_output)
        return old


class _CellBuffers(dict):
    """The stream's buffers, one per parent message (a cell), each a :class:`_CappedBuffer`."""

    def __init__(self, counter: dict, existing=()):
        super().__init__()
        self.counter = counter
        for key, buffer in dict(existing).items():
            self[key] = _CappedBuffer(counter, key)
            self[key].write(buffer.getvalue())

    def __missing__(self, key):
        buffer = self[key] = _CappedBuffer(self.counter, key)
        return buffer


class _CappedBuffer(io.StringIO):
    """A StringIO that takes a cell's text only while the cell is under its cap (writes are under the stream's
    buffer lock)."""

    def __init__(self, counter: dict, cell):
        super().__init__()
        self.counter, self.cell = counter, cell

    def write(self, string: str) -> int:
        counts = self.counter["counts"]  # a cell's count stays, also while another cell's thread writes
        room = self.counter["limit"] - counts.get(self.cell, 0)
        if room > 0:
            part = string[:room]
            counts[self.cell] = counts.get(self.cell, 0) + len(part)
            super().write(part)
        return len(string)
