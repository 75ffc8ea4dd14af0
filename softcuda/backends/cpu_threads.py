"""cpu_threads: elementwise ops and reductions across every core — the CPU at its best.

numpy runs one ufunc call on one core, and releases the GIL while its inner loop runs.  So a
large op is cut, at compile time, into contiguous pieces of its output (and the matching views
of its inputs, broadcast where they broadcast), each a cpu_fallback kernel over its own slice;
at run time the calling thread and persistent worker threads pull the pieces from one queue.
Nothing starts a thread per call and no array is allocated per call.  A binary op's constant
operand comes as a numpy scalar (as it does to cpu_fallback) and goes to every piece as it is.

A hand-off costs far more than a small op itself (a worker must wake and take the GIL for a
moment), so an op moving fewer than ``MIN_CHUNK_BYTES`` per chunk runs on the calling thread
alone, as cpu_fallback's kernel: a small op pays nothing for the threads it does not use.

Reductions: where the output has an axis of its own to cut (a row sum of a tall matrix), each
chunk reduces its own rows into the output.  Otherwise (a full reduction, or one along the only
long axis) each chunk reduces its slice with cpu_fallback's kernel into a partial, and the
calling thread adds the partials in float64: the sum of many float32 values stays accurate.

Matmul goes to numpy's BLAS, which runs its own threads (cpu_blas's kernel); the sweep measures
it once, as cpu_blas.

The thread count is a setting: ``[device] cpu_threads`` in the profile, else every core this
process may run on.  Kernels made for a count share one pool of workers per count.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from ..device import usable_cores
from ..ops import OPS
from .cpu_fallback import Kernel
from .cpu_fallback import make_kernel as fallback_kernel

MIN_CHUNK_BYTES = 1 << 20
"""Bytes (inputs read plus output written) below which a chunk is not worth a hand-off: an op
of less than two runs as cpu_fallback's kernel on the calling thread (the registry's
``runs_as_below``)."""

PIECE_BYTES = 4 << 20
"""Elementwise work is cut into pieces of about this many bytes (inputs read plus output
written), and every thread pulls the next piece from one queue as it finishes the last: a
thread that woke late or shares its core does less, instead of holding up the op.  On the
reference host this beat one chunk per thread handed out up front by 10-30% from 2^22
elements up (benchmarks/cpu_threads.py --pieces, results/nvidia-h200/cpu-threads.txt)."""


def default_threads() -> int:
    return usable_cores()


def check_setting(keyword: str, value: int) -> str | None:
    """Why the profile's ``threads`` cannot be used here, or None."""
    cores = usable_cores()
    if keyword == "threads" and not 1 <= value <= cores:
        return f"[device] cpu_threads = {value}, but this process may use 1 to {cores} cores"
    return None


class Workers:
    """``threads - 1`` persistent workers; ``run(tasks)`` runs tasks[0] on the calling thread
    and the others on workers, and returns when all are done.

    Each worker waits on its own lock (taken, so that acquiring it blocks) and answers on
    another: a hand-off is two lock releases and no queue.  A lock around ``run`` keeps two
    threads evaluating plans at once from sharing workers.  Workers run under the caller's
    ``np.errstate``.  A hand-off cut short (Ctrl-C while the caller releases or waits) leaves
    the locks out of step: the pool then starts fresh workers on its next run instead of
    trusting them, and the old ones finish their task and wait forever, harmless.
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._busy = threading.Lock()
        self._spawn()

    def _spawn(self) -> None:
        count = self.threads - 1
        self._go = [threading.Lock() for _ in range(count)]
        self._done = [threading.Lock() for _ in range(count)]
        for lock in (*self._go, *self._done):
            lock.acquire()
        self._tasks: list[Callable[[], Any] | None] = [None] * count
        self._errors: list[BaseException | None] = [None] * count
        self._broken = False
        for i in range(count):
            threading.Thread(
                target=self._serve,
                args=(self._go[i], self._done[i], self._tasks, self._errors, i),
                name=f"softcuda-cpu-{i + 1}",
                daemon=True,
            ).start()

    @staticmethod
    def _serve(go, done, tasks, errors, i: int) -> None:
        while True:
            go.acquire()
            try:
                tasks[i]()  # type: ignore[misc]
            except BaseException as exc:  # handed to the caller, which raises it
                errors[i] = exc
            done.release()

    def run(self, tasks: Sequence[Callable[[], Any]]) -> None:
        others = len(tasks) - 1
        with self._busy:
            if self._broken:
                self._spawn()
            first: Exception | None = None
            settled = False
            try:
                state = np.geterr()  # threads start with numpy's default error state
                for i in range(others):
                    self._tasks[i] = partial(_under, state, tasks[i + 1])
                    self._go[i].release()
                try:
                    tasks[0]()
                except Exception as exc:  # raised once every worker has answered
                    first = exc
                for i in range(others):
                    self._done[i].acquire()
                settled = True
            finally:
                if not settled:  # interrupted mid hand-off: these workers are not trusted again
                    self._broken = True
            errors = [e for e in self._errors[:others] if e is not None]
            self._errors[:others] = [None] * others
            if first is not None:
                raise first
            if errors:
                raise errors[0]

    def share(self, kernels: Sequence[Callable[[], Any]]) -> None:
        """Run ``kernels`` on every thread, each pulling the next one as it finishes: a thread
        that started late or runs slow takes fewer."""
        queue = iter(kernels)  # a list iterator's next() is atomic under the GIL
        self.run([partial(_drain, queue)] * min(self.threads, len(kernels)))


def _under(state: dict, task: Callable[[], Any]) -> None:
    with np.errstate(**state):
        task()


def _drain(queue) -> None:
    for kernel in queue:
        kernel()


_pools: dict[int, Workers] = {}
_pools_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads: every pool starts fresh workers."""
    global _pools_lock
    _pools_lock = threading.Lock()
    for pool in _pools.values():
        pool._busy = threading.Lock()
        pool._broken = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def workers(threads: int) -> Workers:
    with _pools_lock:
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = Workers(threads)
        return pool


def _slices(extent: int, parts: int) -> list[slice]:
    bounds = [extent * i // parts for i in range(parts + 1)]
    return [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def _pick_axis(shape: tuple[int, ...], parts: int, skip: int | None = None) -> int | None:
    """The outermost axis with at least ``parts`` entries (chunks along it are contiguous
    for row-major data), else the longest; None when no axis has two."""
    axes = [a for a in range(len(shape)) if a != skip and shape[a] >= 2]
    if not axes:
        return None
    for a in axes:
        if shape[a] >= parts:
            return a
    return max(axes, key=lambda a: shape[a])


def _cut(array: np.ndarray, axis: int, part: slice) -> np.ndarray:
    index = [slice(None)] * array.ndim
    index[axis] = part
    return array[tuple(index)]


def _parts(nbytes: int, threads: int) -> int:
    return max(1, min(threads, nbytes // MIN_CHUNK_BYTES))


def make_kernel(
    op: str, attrs: dict, inputs: list, out: np.ndarray, threads: int | None = None
) -> Kernel:
    threads = threads or default_threads()
    if op == "matmul":
        return partial(np.matmul, inputs[0], inputs[1], out)
    nbytes = sum(x.nbytes for x in inputs) + out.nbytes
    parts = _parts(nbytes, threads)
    kernel = None
    if parts > 1:
        pool, family = workers(threads), OPS[op].family
        if family == "reduce":
            kernel = _reduction(pool, op, attrs, inputs[0], out, parts)
        elif family == "softmax":
            kernel = _rows(pool, op, attrs, inputs[0], out, parts, attrs["axis"], True)
        else:
            kernel = _elementwise(pool, op, attrs, inputs, out, max(parts, nbytes // PIECE_BYTES))
    return kernel or fallback_kernel(op, attrs, inputs, out)


def _then(run: Callable[[list], None], tasks: list, finish: Kernel) -> None:
    run(tasks)
    finish()


def _elementwise(pool: Workers, op: str, attrs: dict, inputs: list, out: np.ndarray, parts: int):
    """Pieces whose part of ``out`` is contiguous: a run of whole rows, or a stretch of one
    row where the leading axes are too short to give every thread rows of its own, pulled from
    one queue.  (Besides streaming better, this keeps clear of a numpy 2.4 fault: float32
    ``negative`` reading and writing the same non-unit stride gives wrong values.)"""
    pieces = _row_pieces(out.shape, parts)
    if len(pieces) < 2:
        return None
    full = [x if isinstance(x, np.generic) else np.broadcast_to(x, out.shape) for x in inputs]
    kernels = [fallback_kernel(op, attrs, [_piece(x, p) for x in full], out[p]) for p in pieces]
    return partial(pool.share, kernels)


def _piece(x, index: tuple):
    """``x``'s part of one piece: a view of an array; a binary op's constant operand, which
    the plan passes as a numpy scalar, is the same number in every piece."""
    return x if isinstance(x, np.generic) else x[index]


def _row_pieces(shape: tuple[int, ...], parts: int) -> list[tuple]:
    """Index tuples (whole leading indices, then one slice) that cut a C-contiguous array of
    ``shape`` into at least ``parts`` contiguous, nearly equal pieces where it can."""
    lead = 1
    for axis, extent in enumerate(shape):
        if lead * extent >= parts or axis == len(shape) - 1:
            cuts = _slices(extent, max(1, min(extent, -(-parts // lead))))
            return [
                (*index, cut)
                for index in np.ndindex(*shape[:axis])
                for cut in cuts
                if cut.stop > cut.start
            ]
        lead *= extent
    return [()]


def _reduction(pool: Workers, op: str, attrs: dict, x: np.ndarray, out: np.ndarray, parts: int):
    reduced, keepdims = attrs["axis"], attrs["keepdims"]
    rows = _rows(pool, op, attrs, x, out, parts, reduced, keepdims)
    if rows is not None:
        return rows
    # Partials along the reduced axis (or over everything): each chunk reduced by cpu_fallback's
    # own kernel (accurate at any length) into a slot of the input's dtype, the slots combined
    # in float64 by the calling thread.
    axis = reduced if reduced is not None else _pick_axis(x.shape, parts)
    if axis is None or x.shape[axis] < 2:
        return None
    parts = min(parts, x.shape[axis])
    kept = tuple(1 if reduced is None or a == axis else d for a, d in enumerate(x.shape))
    partials = np.empty((parts, *kept), x.dtype)  # made once, at compile time
    chunk_attrs = {"axis": reduced, "keepdims": True}
    chunk_op = "sum" if op == "mean" else op
    run = [
        fallback_kernel(chunk_op, chunk_attrs, [_cut(x, axis, s)], partials[i])
        for i, s in enumerate(_slices(x.shape[axis], parts))
    ]
    count = (x.shape[axis] if reduced is not None else x.size) if op == "mean" else 0
    ufunc = np.maximum if op == "max" else np.add
    finish = partial(_combine, ufunc, partials, out.reshape(kept), count)
    return partial(_then, pool.run, run, finish)


def _rows(
    pool: Workers,
    op: str,
    attrs: dict,
    x: np.ndarray,
    out: np.ndarray,
    parts: int,
    along: int | None,
    kept: bool,
):
    """Cut along an axis other than ``along`` (the axis the op works along: a reduction's, a
    softmax's), so that every chunk owns whole rows of the output, where the output's piece is
    contiguous: no partials, nothing to combine.  None where no such axis is long enough."""
    if along is None:
        return None
    axis = _pick_axis(x.shape, parts, skip=along)
    if axis is None or x.shape[axis] < parts:
        return None
    out_axis = axis if kept or axis < along else axis - 1
    if any(d != 1 for d in out.shape[:out_axis]):
        return None
    run = [
        fallback_kernel(op, attrs, [_cut(x, axis, s)], _cut(out, out_axis, s))
        for s in _slices(x.shape[axis], parts)
    ]
    return partial(pool.run, run)


def _combine(ufunc: np.ufunc, partials: np.ndarray, out: np.ndarray, count: int) -> None:
    dtype = None if ufunc is np.maximum else np.float64
    ufunc.reduce(partials, 0, dtype, out)
    if count:
        np.divide(out, count, out=out)
