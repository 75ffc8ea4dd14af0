"""The sweep runner: the soft_init experiment, scheduled point by point.

``Sweep`` is the schedule: it takes the machine (``machine.detect``), lists the spec's points,
decides what to measure next and has a ``measurer.Measurer`` measure each point (how one point
is measured is the measurer's: ``measure.time_point``, ``measure.time_bus``), writes its rows
to the raw CSV as soon as it is measured (``storage.RowWriter``) and keeps them in memory per
op (``kept.KeptRows``), where selection reads one op at a time to decide what to measure next.
An interrupted sweep keeps every finished point, and ``resume=True`` goes on from the rows on
disk (``storage.read_previous``).

Boundaries are refined by measuring between the two sizes where the winner flips until
they are known within 10% (``select.refinement_sizes``), a few rounds at most; with the spec's
``scan``, sizes on both sides of each boundary are then measured too (``select.scan_sizes``).

A point measured while the host ran off its best speed (its probe says so) is measured again
(``repetitions.retries`` times at most, points up to ROTATE_MAX_BYTES) in passes after every op
is done, one pass per retry, each point only once the host reads fast again (``_host_gate``);
the boundaries are refined once more after them, and the sizes that adds get their passes too.
The spec's time budget is the whole sweep's; past it the passes and the scan are left out.
The host's slow spells last seconds to tens of seconds, so a retry a moment later would mostly
meet the same spell; a pass over the whole sweep comes back to each point much later.  Each
attempt's rows carry its number (column ``attempt``); all are kept, and the analysis reads the
steadiest (``timings.stats.current_rows``).

A backend whose median call at some size exceeds the spec's ``max_point_s`` is not timed above
that size of that op (``_judge``, ``_too_slow``).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import backends, device
from ..backends import cuda_kernels
from ..device import slug
from ..errors import SoftcudaError, SpecError
from ..fuse import cpu_fusable
from ..ops import CHAINS, OPS, base_op, byte_count
from ..timings import schema, select
from ..timings.load import metadata_path
from ..timings.stats import HOST_BEST_Q, HOST_DRIFT, attempt_parts
from . import measure, storage
from .kept import KeptRows
from .machine import Machine, detect
from .measure import Noise, Point, point_shapes
from .measurer import Measurer
from .settle import Settled, host_time, settle, wait_for_host
from .spec import Spec

REFINE_ROUNDS = 3
META_PERIOD_S = 30.0
"""While measuring, the metadata (this process's time so far) is rewritten this often."""
GATE_MIN_READINGS = 3
"""The retry gate judges the host only once it has this many ``host_time`` readings."""
_OP, _SIZE, _BACKEND, _ATTEMPT = (
    schema.COLUMNS.index(c) for c in ("op", "size", "backend", "attempt")
)


class Sweep:
    """One run of a spec on this machine: ``points()`` lists the work, ``run()`` does it."""

    def __init__(
        self,
        spec: Spec,
        spec_path: str | Path,
        results_dir: str | Path = "results",
        *,
        machine: Machine | None = None,
        resume: bool = False,
        seed: int = 0,
    ) -> None:
        self.spec = spec
        self.spec_path = str(spec_path)
        self.machine = machine or detect()
        self.backends = spec.select_backends(self.machine.backends)
        if not self.backends:
            listed = ", ".join(spec.backends or ())
            raise SpecError(
                f"{spec_path}: backends: none of {listed} is available on this "
                "machine"
                + "".join(
                    f" ({b}: {r})"
                    for b, r in self.machine.unavailable.items()
                    if b in (spec.backends or ())
                )[:300]
            )
        for entry in spec.ops:  # else refinement would judge an op of probe rows alone
            if not self.op_backends(entry.op):
                raise SpecError(_unmeasured(spec_path, entry.op, self.backends, self.machine))
        largest = max(
            (int(np.prod(s)) for op, size in spec.points() for s in point_shapes(op, size)[0]),
            default=0,
        )
        self._check_memory(largest)
        self.measurer = Measurer(spec, self.machine, Noise(np.random.default_rng(seed), largest))
        self.folder = device_folder(results_dir, self.machine)
        self.started = time.monotonic()
        self.elapsed_s: float | None = None  # set when run() finishes: every process's time
        self.process_started_at = storage.now()  # with self.started: this process's start
        self.started_at = self.process_started_at  # the sweep's: a resumed one keeps its first's
        self.earlier: list[dict[str, Any]] = []  # the spans of the processes resumed from
        self._meta_written = -math.inf
        self.skipped: dict[tuple[str, str], float] = {}  # (op, backend) -> median that was too slow
        self.stopped_at: dict[tuple[str, str], int] = {}  # (op, backend) -> the size it was at
        self.rows = KeptRows()  # every row, previous and new, as selection reads them
        self.first_backends: dict[tuple[str, int], set[str]] = {}  # of each point's attempt 0
        self.bus_done: set[int] = set()  # bus sizes with every direction and kind measured
        self.waited_s = 0.0  # spent waiting for the host's best speed before retries
        self.cut = 0  # points measured again or scanned that the time budget left out
        self.host_readings: list[float] = []  # settle.host_time after each point measured
        self.resumed = resume
        # other work on the host shows in every CPU timing: said at the start, kept in the
        # metadata (the 1-minute average, while this process has done little yet)
        try:
            self.load_average: float | None = round(os.getloadavg()[0], 2)
        except (AttributeError, OSError):  # not on every platform, nor always readable
            self.load_average = None
        if resume:
            self.csv_path = storage.unfinished_csv(self.folder, spec, self.machine.device_hash)
        else:
            self.csv_path = storage.new_csv(self.folder, spec.name)
        self.done: set[Point] = set()
        self.settled: Settled | None = None  # set by settle(), before anything is measured
        self.launch: dict[str, Any] | None = None  # set by run(), at the end (sweep/launch.py)
        self.launch_error: str | None = None  # why the launch calibration failed, if it did
        self.switch: dict[str, Any] | None = None  # set by run(), after launch (sweep/switch.py)
        self.switch_error: str | None = None  # why the hand-off calibration failed, if it did
        self.compile_s: float | None = None  # set by compile_kernels(), before settle()
        if resume:
            self._load_previous()

    def _check_memory(self, largest: int) -> None:
        """Refuse, before anything is measured, a spec whose points cannot be held here: the
        inputs drawn once for the whole sweep (``Noise``: one array of ``largest`` elements
        per input position), and every plan of a point, each with its own inputs and output,
        built before the point is timed (``measure.time_point``; a pinned plan keeps a
        page-locked copy of its inputs as well); on a GPU, each CUDA plan's inputs and output
        on the device.  Otherwise the sweep settled, measured the smaller sizes and then died
        of a MemoryError.

        Each op is judged at its stop and at its largest size whose data is at most
        ROTATE_MAX_BYTES, built ``repetitions.buffers`` times (refinement and the scan can
        land anywhere below stop).  The bus (``measure.time_bus``) holds a device buffer and a
        host buffer of each kind of its largest size at once, and CuPy's pools keep them for
        the points measured after it (refinement, retries): they are added to every op's."""
        total, available = device.host_memory_bytes()
        vram = self.machine.fields.get("vram_mb", "")
        limits = (
            (available or total, "host memory", "available" if available else "in all"),
            (int(vram) << 20 if vram.isdigit() else 0, "device memory", "on the GPU"),
        )
        itemsize = np.dtype(self.spec.dtype).itemsize
        positions = max(OPS[base_op(entry.op)].arity for entry in self.spec.ops)
        drawn = positions * largest * itemsize
        bus_bytes = 0
        if self.spec.bus and self.machine.device_type == "cuda":
            bus_bytes = self.spec.bus.bytes.stop
            bus = (drawn + bus_bytes * len(self.spec.host_memory), bus_bytes)
            for need, (limit, what, how) in zip(bus, limits):
                if limit and need > limit:
                    raise SpecError(
                        f"{self.spec_path}: bus.stop_bytes: the bus at {bus_bytes} B needs about "
                        f"{_gib(need)} of {what} (a buffer of that size on the GPU and one of "
                        f"each host memory kind, and the inputs drawn for the sweep), and this "
                        f"machine has {_gib(limit)} {how}; lower stop_bytes"
                    )
        for entry in self.spec.ops:
            stop = entry.sizes.stop
            sizes = {stop, _largest_rotated(entry.op, stop, itemsize)} - {0}
            for size in sorted(sizes, reverse=True):
                host, gpu, copies = self._point_need(entry.op, size, itemsize)
                needs = (drawn + host + bus_bytes * len(self.spec.host_memory), gpu + bus_bytes)
                for need, (limit, what, how) in zip(needs, limits):
                    if limit and need > limit:
                        copied = f", {copies} copies of each (repetitions.buffers)" * (copies > 1)
                        held = f", the bus's buffers of {bus_bytes} B" if bus_bytes else ""
                        advice = "lower stop" + " or repetitions.buffers" * (copies > 1)
                        advice += " or bus.stop_bytes" * bool(bus_bytes)
                        raise SpecError(
                            f"{self.spec_path}: ops.{entry.op}.sizes.stop: {entry.op} at {size} "
                            f"needs about {_gib(need)} of {what} (the inputs and output of "
                            f"each of its plans{copied}, the inputs drawn for the sweep{held}), "
                            f"and this machine has {_gib(limit)} {how}; {advice}"
                        )

    def _point_need(self, op: str, size: int, itemsize: int) -> tuple[int, int, int]:
        """(host bytes, device bytes, copies) that the plans of one point hold while it is
        timed (``measure.time_point``)."""
        shapes, out_shape, _ = point_shapes(op, size)
        nbytes = byte_count(shapes, out_shape, itemsize)
        copies = self.spec.repetitions.buffers if nbytes <= measure.ROTATE_MAX_BYTES else 1
        host = gpu = 0
        kinds = self.spec.host_memory
        for b in self.op_backends(op):
            if backends.BACKENDS[b].device == "cpu":
                host += copies * nbytes
            else:
                host += copies * nbytes * (len(kinds) + ("pinned" in kinds))
                gpu += copies * nbytes * len(kinds)
        return host, gpu, copies

    # -- files ----------------------------------------------------------------------------------

    @property
    def meta_path(self) -> Path:
        return metadata_path(self.csv_path)

    def _load_previous(self) -> None:
        """Take the rows of the sweep being resumed as measured, what was too slow there as too
        slow here, and when it started and how long its processes ran."""
        self.started_at, self.earlier = storage.previous_spans(self.meta_path, self.started_at)
        frame = storage.read_previous(self.csv_path)
        if frame is None:
            return
        self.rows.add_frame(frame)
        done = frame.drop_duplicates(["op", "size", "backend"])
        self.done.update(Point(o, int(z), b) for o, z, b in done[["op", "size", "backend"]].values)
        first = frame[frame["attempt"] == 0].drop_duplicates(["op", "size", "backend"])
        for (op, size), backends_ in first.groupby(["op", "size"])["backend"]:
            self.first_backends[(str(op), int(size))] = set(backends_)
        # a bus size is done once both directions are there from every host memory kind (the
        # bus's rows are ops copy_h2d and copy_d2h: its point, "bus", is in no row)
        bus = frame[frame["backend"] == "bus"]
        need = {(f"copy_{d}", kind) for d in ("h2d", "d2h") for kind in self.spec.host_memory}
        for size, group in bus.groupby("size"):
            if need <= set(zip(group["op"], group["host_memory"])):
                self.bus_done.add(int(size))
        # what was too slow before stays skipped (else the resumed sweep would time the
        # slowest point of all, the next size up), judged as measure() judges it: first
        # attempts only
        for (op, backend, size), median in _slowest_first(frame).items():
            self._judge(str(op), str(backend), float(median), int(size))

    def _keep(self, rows: list[tuple]) -> None:
        """Keep one measured point's rows (or a bus size's) and mark what they measured done."""
        self.rows.add(rows)
        kinds = {(r[_OP], r[_SIZE], r[_BACKEND], r[_ATTEMPT]) for r in rows}
        self.done.update(Point(op, size, backend) for op, size, backend, _ in kinds)  # attempt 0
        for op, size, backend, attempt in kinds:
            if attempt == 0:
                self.first_backends.setdefault((op, int(size)), set()).add(backend)

    def _judge(self, op: str, backend: str, median: float, size: int) -> None:
        """Skip ``backend``'s larger sizes of ``op`` once its median call at ``size``, from its
        slowest host memory kind, exceeds the spec's max_point_s."""
        limit = self.spec.repetitions.max_point_s
        if limit is not None and median > limit:
            key = (op, backend)
            self.skipped[key] = max(median, self.skipped.get(key, 0.0))
            self.stopped_at[key] = min(size, self.stopped_at.get(key, size))

    def _too_slow(self, op: str, backend: str, size: int) -> bool:
        """Whether ``backend`` is stopped at this size of ``op``: only sizes above the one it
        was too slow at, so that refinement and the scan, which come after the op's grid, still
        time it below (where it may be the winner the boundary is placed against)."""
        stop = self.stopped_at.get((op, backend))
        return stop is not None and size > stop

    def elapsed(self) -> float:
        """Seconds the sweep has taken so far: its earlier processes' (a resumed sweep's) and
        this one's.  The time budget is the whole sweep's, not each process's: a sweep resumed
        by ``benchmarks/h200.sh`` call after call otherwise never met it."""
        return sum(span["elapsed_s"] for span in self.earlier) + time.monotonic() - self.started

    def spans(self) -> list[dict[str, Any]]:
        """When each process of the sweep started and how long it ran, this one so far."""
        elapsed_s = round(time.monotonic() - self.started, 1)
        return [*self.earlier, {"started_at": self.process_started_at, "elapsed_s": elapsed_s}]

    def write_meta(self, complete: bool, **extra: Any) -> None:
        """Replace the metadata; ``started_at`` is the sweep's first process's start and
        ``elapsed_s`` the sum over its processes (``processes``: each one's span), so that a
        resumed sweep reports the time it took, not its last process's."""
        spans = self.spans()
        self._meta_written = time.monotonic()
        meta = {
            "schema": schema.SCHEMA_VERSION,
            "complete": complete,
            "device": self.machine.label,
            "device_hash": self.machine.device_hash,
            "hash_string": self.machine.hash_string,
            "machine": self.machine.fields,
            "backends": list(self.backends),
            "unavailable": self.machine.unavailable,
            "spec_path": self.spec_path,
            "spec": self.spec.to_dict(),
            "started_at": self.started_at,
            "updated_at": storage.now(),
            "elapsed_s": round(sum(span["elapsed_s"] for span in spans), 1),
            "processes": spans,
            "load_average_at_start": self.load_average,
            "hot_max_bytes": measure.hot_max_bytes(),
            **({} if self.settled is None else {"settle": self.settled.to_dict()}),
            **({} if self.compile_s is None else {"compile_s": round(self.compile_s, 2)}),
            **({} if self.launch is None else {"launch": self.launch}),
            **({} if self.switch is None else {"switch": self.switch}),
            **extra,
        }
        storage.write_meta(self.meta_path, meta)
        self.elapsed_s = meta["elapsed_s"]

    # -- the work -------------------------------------------------------------------------------

    def op_backends(self, op: str) -> list[str]:
        """The backends that measure ``op`` here: a chain variant (``ops.CHAINS``) only where
        its device fuses it into one group (on the CPU, not without a C++ compiler, where its
        sample would be 23 kernels and its curve would price a fused group wrong)."""
        found = [b for b in self.backends if op in backends.BACKENDS[b].measured_ops]
        if op in CHAINS and not cpu_fusable():
            found = [b for b in found if backends.BACKENDS[b].device != "cpu"]
        return found

    def points(self) -> list[Point]:
        """The planned work, in order (refinement adds more while running)."""
        work = [Point(op, size, "*") for op, size in self.spec.points()]
        if self.spec.bus and self.machine.device_type == "cuda":
            work += [Point("bus", n, "bus") for n in self.spec.bus.bytes.values()]
        return work

    def compile_kernels(self) -> float | None:
        """Compile softcuda's CUDA kernels now, side by side (``cuda_kernels.compile_builds``), so
        that a cold kernel cache costs one wait before settling and none inside a timing; the
        seconds it took, or None when the sweep runs no CUDA backend."""
        uses_cuda = any(backends.BACKENDS[b].device == "cuda" for b in self.backends)
        if self.compile_s is None and uses_cuda:
            try:
                self.compile_s = cuda_kernels.compile_builds()
            except Exception as exc:  # NVRTC missing or failing: CuPy raises several kinds
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                raise CompileFailed(
                    f"softcuda's CUDA kernels did not compile ({type(exc).__name__}: {reason}); "
                    "CuPy needs NVRTC from the CUDA version it was built for"
                ) from None
        return self.compile_s

    def settle(self) -> Settled:
        """Wait, at most the spec's ``settle_s``, for the machine to run fixed workloads at a
        steady speed (``settle.settle``); once per sweep, recorded in the metadata."""
        if self.settled is None:
            self.settled = settle(self.machine.device_type == "cuda", self.spec.settle_s)
        return self.settled

    def run(self, on_point: Callable[[Point, int, int], None] | None = None) -> pd.DataFrame:
        """Measure every point not yet done; call ``on_point(point, index, total)`` before each.

        Compiles the CUDA kernels and settles first (``compile_kernels``, ``settle``) unless
        that was done.  Returns every row (previous and new) as a DataFrame.

        The spec's time budget is the whole sweep's (``elapsed``).  Once it is spent, the sweep
        measures no point again and scans no further (``cut`` counts what it left out), but
        still refines: a profile needs every op's sizes and its boundaries placed, not those.
        Spent before every op's sizes are measured, it raises ``BudgetSpent`` (rows stay on
        disk; resume with a larger budget).
        """
        self.compile_kernels()
        self.settle()
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:  # a new sweep's file is made here, and only here: exclusively
            try:
                writer = storage.RowWriter(self.csv_path, exclusive=not self.resumed)
                break
            except FileExistsError:  # another sweep took the name since it was picked
                self.csv_path = storage.new_csv(self.folder, self.spec.name)
        self.write_meta(False)
        # Every point's timing starts with a full collection (timers.interleaved).  What lives
        # now (modules, caches, the drawn inputs) lives to the end: frozen, the collector
        # leaves it alone, and a collection costs what the points since made, not tens of ms.
        frozen = gc.get_freeze_count() == 0
        if frozen:
            gc.collect()
            gc.freeze()
        try:
            work = self.points()
            by_op: dict[str, list[Point]] = {}
            for p in work:
                by_op.setdefault(p.op, []).append(p)
            self._index, self._total = 0, len(work)
            ops = [op for op in by_op if op != "bus"]
            for op, op_points in by_op.items():
                self._measure_all(op_points, writer, on_point)
                if op != "bus":
                    self._refine(op, writer, on_point)
            self._retry_passes(ops, writer, on_point)
            for op in ops:  # the steadier attempts may have moved a boundary
                self._refine(op, writer, on_point)
                if self.spec.scan:  # then look around it for winners that alternate
                    scan = self._scan(op)
                    self._measure_all(scan, writer, on_point, extra=True, optional=True)
                    self._refine(op, writer, on_point)
            # the sizes that refinement added get their retries too (and a resumed sweep,
            # which cannot tell them from the others, does the same as one never stopped)
            self._retry_passes(ops, writer, on_point)
        except BaseException:  # stopped: this process's time, for when the sweep is resumed
            with contextlib.suppress(OSError):  # (a full disk: the rows' error is the one said)
                self.write_meta(False)
            raise
        finally:
            writer.close()
            if frozen:
                gc.unfreeze()
        if self.machine.device_type == "cuda":
            # the placement model's floor of a CUDA step, then what a GPU->CPU hand-off adds
            # beyond its copy; a failure leaves the finished sweep finished, without that figure
            # (the profile then has no launch_us or switch_us, and init says so)
            calibrations = (("launch", self.measurer.launch), ("switch", self.measurer.switch))
            for name, measure_it in calibrations:
                if getattr(self, name) is not None:
                    continue
                try:
                    setattr(self, name, measure_it())
                except Exception as exc:  # noqa: BLE001 - any failure of the calibration alone
                    setattr(self, f"{name}_error", f"{type(exc).__name__}: {exc}")
        self.write_meta(
            True,
            finished_at=storage.now(),
            rows=len(self.rows),
            waited_for_host_s=round(self.waited_s, 1),
            cut_by_budget=self.cut,
            skipped={f"{op} {b}": s for (op, b), s in self.skipped.items()},
            stopped_at={f"{op} {b}": z for (op, b), z in self.stopped_at.items()},
        )
        return self.frame()

    def frame(self) -> pd.DataFrame:
        return self.rows.frame()

    def over_budget(self) -> bool:
        budget = self.spec.time_budget_s
        return budget is not None and self.elapsed() > budget

    def _measure_all(
        self,
        points: list[Point],
        writer: storage.RowWriter,
        on_point: Callable[[Point, int, int], None] | None,
        extra: bool = False,
        before: Callable[[], bool] | None = None,
        optional: bool = False,
    ) -> None:
        """Measure ``points`` in order (``_one``, with ``before`` and ``optional``); ``extra``
        work was not in ``points()`` and grows the progress total."""
        if extra:
            self._total += len(points)
        for point in points:
            self._one(point, writer, on_point, before, optional=optional, planned=not extra)
            self._index += 1

    def _retry_passes(
        self,
        ops: list[str],
        writer: storage.RowWriter,
        on_point: Callable[[Point, int, int], None] | None,
    ) -> None:
        for _ in range(self.spec.repetitions.retries):
            again = [p for op in ops for p in self._retries(op)]
            if not again:
                break
            if self.over_budget():  # (said, not measured: the progress total stays)
                self.cut += len(again)
                break
            gate = self._host_gate()
            self._measure_all(again, writer, on_point, extra=True, before=gate, optional=True)

    def _host_gate(self) -> Callable[[], bool] | None:
        """What a retry pass asks before each point: is the host at its best speed?  The
        probe, read alone by ``settle.host_time``, must run within HOST_DRIFT of its fast
        state — the HOST_BEST_Q quantile of the same readings taken after every point so far,
        so that like is compared with like (read alone, the probe runs faster than as a
        point's rider beside sleeping CUDA plans).  While it does not, the gate waits
        (``settle.wait_for_host``), at most the spec's ``retry_wait_s`` in this process and
        never more than half the time budget left; a point the host is still slow for is not
        measured in this pass: a retry taken in a slow spell mostly reads the slow spell again
        (docs/method.md, "Measuring again").  None (measure every point) when there is nothing
        to judge by or waiting is off (``retry_wait_s`` 0)."""
        allowance = self.spec.repetitions.retry_wait_s
        if not allowance or len(self.host_readings) < GATE_MIN_READINGS:
            return None
        best_s = float(np.quantile(self.host_readings, HOST_BEST_Q))
        budget = self.spec.time_budget_s

        def gate() -> bool:
            left = allowance - self.waited_s
            if budget is not None:
                left = min(left, (budget - self.elapsed()) / 2)
            waited, fast = wait_for_host(best_s, HOST_DRIFT, max(left, 0.0), measure=host_time)
            self.waited_s += waited
            return fast

        return gate

    def _refine(
        self, op: str, writer: storage.RowWriter, on_point: Callable[[Point, int, int], None] | None
    ) -> None:
        for _ in range(REFINE_ROUNDS):
            extra = self._refinement(op)
            if not extra:
                break
            self._measure_all(extra, writer, on_point, extra=True)

    def _one(
        self,
        point: Point,
        writer: storage.RowWriter,
        on_point: Callable[[Point, int, int], None] | None,
        before: Callable[[], bool] | None = None,
        *,
        optional: bool = False,
        planned: bool = True,
    ) -> None:
        """Measure one point and keep its rows; ``before()`` runs once the progress shows it,
        and the point is left for a later pass where it says False.  Once the time budget is
        spent, an ``optional`` point (measured again, or scanned) is left out, a ``planned``
        one (of ``points()``) raises BudgetSpent, and refinement's are measured."""
        index, total = self._index, self._total
        if on_point is not None:
            on_point(point, index, total)
        if point.op == "bus" and point.size in self.bus_done:
            return
        if (
            point.attempt == 0
            and point.op != "bus"
            and all(
                Point(point.op, point.size, b) in self.done
                or self._too_slow(point.op, b, point.size)
                for b in self.op_backends(point.op)
            )
        ):
            return
        if (optional or planned) and self.over_budget():
            if optional:
                self.cut += 1
                return
            raise BudgetSpent(
                f"the spec's time budget of {self.spec.time_budget_s:g} s is spent after "
                f"{index} of {total} points, before every op's sizes were measured; raise "
                "time_budget_s to finish the sweep"
            )
        if before is not None and not before():
            return
        rows = self.measurer.bus(point.size) if point.op == "bus" else self.measure(point)
        reps = self.spec.repetitions
        if point.op != "bus" and reps.retries and reps.retry_wait_s:
            self.host_readings.append(host_time())  # the retry gate's yardstick
        writer.write(rows)
        self._keep(rows)
        if point.op == "bus":
            self.bus_done.add(point.size)
        if time.monotonic() - self._meta_written >= META_PERIOD_S:
            self.write_meta(False)  # a process killed outright loses at most this much time

    def _retries(self, op: str) -> list[Point]:
        """The points of ``op`` to measure again, each with its next attempt number: those up
        to ROTATE_MAX_BYTES with fewer than 1 + ``retries`` attempts and none yet whose probe
        ran within HOST_DRIFT of the host's fast state (``attempt_parts``' host part at most
        1), the fast state judged over every point measured so far, all ops.

        The probe alone decides: a retry is for a point measured while the host ran slow.  A
        series' spread is mostly the backend's own (cpu_threads' workers), and came back when
        such points were measured again (docs/method.md, "Measuring again").  The analysis
        still reads each point's steadiest attempt by both parts (``stats.current_rows``), and
        ``curves`` flags the spread."""
        limit = self.spec.repetitions.retries
        if not limit:
            return []
        frame = self.rows.op_frame(op)
        timed = frame[frame["backend"] != schema.PROBE_BACKEND]
        small = set(timed.loc[timed["nbytes"] <= measure.ROTATE_MAX_BYTES, "size"].tolist())
        if not small:
            return []
        cap = self.spec.repetitions.max_point_s
        if cap is not None:  # a point where a backend was too slow is not timed again
            slowest = _slowest_first(frame)
            small -= set(slowest[slowest > cap].index.get_level_values("size"))
        parts = attempt_parts(frame)
        # the host's part; a torn attempt (spread infinite) counts as no attempt at all
        score = parts["host"].fillna(0.0).where(~np.isinf(parts["spread"]), np.inf)
        score = score[score.index.get_level_values("size").isin(small)]
        per_point = score.groupby(level="size").agg(["min", "size"])
        again = per_point[(per_point["min"] > 1) & (per_point["size"] <= limit)]
        return [Point(op, int(size), "*", int(n)) for size, n in again["size"].items()]

    def unrefined(self) -> list[str]:
        """The ops with a boundary still not bracketed within 10% by measured sizes: refinement
        ran out of its rounds, or re-measuring moved a boundary after the last of them."""
        ops = dict.fromkeys(p.op for p in self.points() if p.op != "bus")
        return [op for op in ops if self._refinement(op)]

    def _refinement(self, op: str) -> list[Point]:
        return self._new_sizes(op, select.refinement_sizes)

    def _scan(self, op: str) -> list[Point]:
        return self._new_sizes(
            op, lambda frame, op, metric: select.scan_sizes(frame, op, metric, self.spec.scan)
        )

    def _new_sizes(self, op: str, propose: Callable[[pd.DataFrame, str, str], list[int]]):
        """The points ``propose(frame, op, metric)`` asks for, judged on the op's rows against
        the host's best time over all points (``KeptRows.op_frame``); none where it cannot
        judge."""
        try:
            sizes = propose(self.rows.op_frame(op), op, self.spec.metric)
        except SoftcudaError:
            return []
        return [Point(op, s, "*") for s in sizes]

    # -- measuring ------------------------------------------------------------------------------

    def measure(self, point: Point) -> list[tuple]:
        """Time every backend of one (op, size) that is still to do (``measure.time_point``)
        and return its rows; a first attempt's medians decide which backends are too slow for
        the op's larger sizes.  An attempt again times every backend the first attempt timed,
        stopped or not, and takes its own probe rows; a resumed point keeps the probe rows it
        has."""
        if point.attempt:  # again: every backend the first attempt measured, skipped or not
            first = self.first_backends.get((point.op, point.size), set())
            todo = [b for b in self.op_backends(point.op) if b in first]
        else:
            todo = [
                b
                for b in self.op_backends(point.op)
                if Point(point.op, point.size, b) not in self.done
                and not self._too_slow(point.op, b, point.size)
            ]
        probed = Point(point.op, point.size, schema.PROBE_BACKEND) in self.done
        probing = point.attempt > 0 or not probed
        rows, slowest = self.measurer.point(point, todo, probing)
        if not point.attempt:  # a later attempt at a size already judged changes nothing
            for backend, median in slowest.items():
                self._judge(point.op, backend, median, point.size)
        return rows

    @property
    def noise(self) -> Noise:
        """The inputs drawn once for the whole sweep (the measurer's)."""
        return self.measurer.noise

    @noise.setter
    def noise(self, noise: Noise) -> None:
        self.measurer.noise = noise


def device_folder(results_dir: str | Path, machine: Machine) -> Path:
    """Where a sweep of ``machine`` writes its rows: ``<results>/<its label as a slug>``."""
    return Path(results_dir) / slug(machine.label)


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def _largest_rotated(op: str, stop: int, itemsize: int) -> int:
    """The largest size of ``op`` up to ``stop`` whose data is at most ROTATE_MAX_BYTES, the
    largest that a point is built ``repetitions.buffers`` times at; 0 where there is none."""

    def small(size: int) -> bool:
        shapes, out_shape, _ = point_shapes(op, size)
        return byte_count(shapes, out_shape, itemsize) <= measure.ROTATE_MAX_BYTES

    lo, hi = 0, stop  # small(lo) holds (or lo is 0); the data grows with the size
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if small(mid) else (lo, mid - 1)
    return lo


def _unmeasured(spec_path: str | Path, op: str, chosen: tuple[str, ...], machine: Machine) -> str:
    """Why no backend of the sweep times ``op``, and which backends would."""
    runs = [b for b in chosen if op in backends.BACKENDS[b].ops]
    why = (
        f" ({', '.join(runs)} {'runs' if len(runs) == 1 else 'run'} another backend's code for "
        "it, timed as that backend)"
        if runs
        else ""
    )
    could = [b for b, info in backends.BACKENDS.items() if op in info.measured_ops]
    here = [b for b in could if b in machine.backends]
    hint = (
        f"add {' or '.join(here)} to backends"
        if here
        else f"{', '.join(could)} could, and none of them is available here"
    )
    return (
        f"{spec_path}: ops.{op}: none of the backends this sweep runs ({', '.join(chosen)}) "
        f"times {op}{why}; {hint}"
    )


class BudgetSpent(SoftcudaError):
    """The spec's time budget ran out; the rows so far are on disk."""


class CompileFailed(SoftcudaError):
    """softcuda's CUDA kernels did not compile; nothing was measured."""


def _slowest_first(frame: pd.DataFrame) -> pd.Series:
    """Median host-clock seconds of each (op, backend, size) in its slowest host memory kind,
    first attempts only: what ``Sweep._judge`` holds against ``max_point_s``."""
    timed = frame[frame["phase"].isin(("wall", "end_to_end")) & (frame["attempt"] == 0)]
    kinds = ["op", "backend", "size", "host_memory"]
    return timed.groupby(kinds)["seconds"].median().groupby(level=[0, 1, 2]).max()
