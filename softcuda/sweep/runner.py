"""The sweep runner: the soft_init experiment, measured through softcuda's own plans.

For every (op, size) of the spec and every available backend it builds the one-op graph,
compiles it with a profile that sends the op to that backend, and times it:

* CPU backends: ``Plan.evaluate`` on the host clock (phase ``wall``);
* CUDA backends, once per host memory kind (pageable, pinned): ``Plan.evaluate`` end to end
  (host arrays in, host result out, synchronized; phase ``end_to_end``), then each step on its own
  with CUDA events (``Plan.profile``): the baked host->device copies (``h2d``), the kernel
  (``kernel``) and the device->host copy (``d2h``).

Each (op, size, backend) point gets fresh leaves copied from one random master array per
(op, size), so a pinned plan (which moves its leaves into page-locked memory) never speeds up a
pageable one.  The bus is calibrated with plain copies between a host buffer (pinned and
pageable) and device memory, both ways.

Every repetition is one CSV row (``softcuda.timings.schema``), appended and flushed as soon as its
point is measured: an interrupted sweep keeps every finished point, and ``resume=True`` skips
them.  Boundaries are refined by measuring between the two sizes where the winner flips until
they are known within 10% (``select.refinement_sizes``), a few rounds at most; with the spec's
``scan``, sizes on both sides of each boundary are then measured too (``select.scan_sizes``).

A point measured while the host ran off its best speed, or whose host-clock timings spread, is
measured again (``repetitions.retries`` times at most, points up to ROTATE_MAX_BYTES) in passes
after every op is done, one pass per retry; the boundaries are refined once more after them,
and the sizes that adds get their passes too.
The host's slow spells last seconds to tens of seconds, so a retry a moment later would mostly
meet the same spell; a pass over the whole sweep comes back to each point much later.  Each
attempt's rows carry its number (column ``attempt``); all are kept, and the analysis reads the
steadiest (``timings.stats.current_rows``).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import backends
from ..config import single_rule_config
from ..errors import DataError, SoftcudaError
from ..ops import OPS, byte_count
from ..pool import leaf_pool
from ..timings import schema
from .settle import Settled, host_time, probe, settle, wait_for_host
from .spec import Spec
from .timers import interleaved, repeat

REFINE_ROUNDS = 3
GATE_MIN_READINGS = 3
"""The retry gate judges the host only once it has this many ``host_time`` readings."""
_OP, _SIZE, _BACKEND, _PHASE, _NBYTES, _ATTEMPT = (
    schema.COLUMNS.index(c) for c in ("op", "size", "backend", "phase", "nbytes", "attempt")
)

PROFILE_REPS = 25
"""At most this many event-timed repetitions of each copy's phases (h2d, kernel, d2h): with
every step gated they repeat closely (kernel medians within 10% in every trial on the H200),
and each gated step costs the gate's spin."""

ROTATE_MAX_BYTES = 64 << 20
"""A point whose data (inputs and output) exceeds this is measured on one copy of each plan, not
``repetitions.buffers``: its data fits no cache, and each copy would cost a large allocation
(pinning GiBs takes seconds); nor is it timed hot (``timers.interleaved``), which would double
the sweep's longest calls for no change."""


@dataclass(frozen=True)
class Point:
    """One unit of work: an op at one size on every backend ("*"), or a bus size ("bus")."""

    op: str
    size: int
    backend: str
    attempt: int = 0  # 1, 2, ...: measured again (``Sweep._retries``)


@dataclass
class Machine:
    """What was detected, once, before the sweep starts."""

    device_type: str  # "cuda" or "cpu"
    device_index: int
    fields: dict[str, str]
    device_hash: str
    hash_string: str
    backends: tuple[str, ...]
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.fields.get("name") or self.fields["cpu_model"]

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Machine:
        """The machine a sweep's metadata (``Sweep.write_meta``) describes."""
        fields = meta["machine"]
        return cls(
            fields["type"],
            int(fields.get("device_index", 0)),
            fields,
            meta["device_hash"],
            meta["hash_string"],
            tuple(meta["backends"]),
            dict(meta.get("unavailable") or {}),
        )


def detect(device_index: int = 0) -> Machine:
    from ..device import canonical_string, describe_machine, hash_fields, identity_fields

    ok, reason = backends.cuda_available()
    device_type = "cuda" if ok else "cpu"
    if ok:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        if not 0 <= device_index < count:
            raise SoftcudaError(
                f"--device {device_index}: this machine has {count} CUDA "
                f"device(s), numbered 0 to {count - 1}"
            )
        cupy.cuda.Device(device_index).use()
    elif device_index:  # the sweep would be CPU-only: profiling "GPU 1" would be a wrong label
        raise SoftcudaError(f"--device {device_index}: no CUDA device is usable here ({reason})")
    identity = identity_fields(device_type, device_index)
    usable = tuple(b for b, info in backends.BACKENDS.items() if ok or info.device == "cpu")
    unavailable = {} if ok else {b: reason for b in backends.CUDA_BACKENDS}
    return Machine(
        device_type,
        device_index,
        describe_machine(device_type, device_index),
        hash_fields(identity),
        canonical_string(identity),
        usable,
        unavailable,
    )


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class RowWriter:
    """Appends rows to the raw CSV: each point's rows in one write, then fsync."""

    def __init__(self, path: Path, exclusive: bool = False) -> None:
        """``exclusive``: the file must not exist yet (FileExistsError otherwise), so that two
        sweeps started in the same second never share one."""
        self.path = path
        new = exclusive or not path.exists() or path.stat().st_size == 0
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_EXCL if exclusive else 0)
        self._fd = os.open(path, flags, 0o666)
        if new:
            self.write([schema.COLUMNS])

    def write(self, rows: list[tuple]) -> None:
        """One os.write for all of ``rows`` (a loop only where the kernel writes less), so that a
        process killed while writing leaves, almost always, a cut-off line that a resumed sweep
        can see (``drop_torn_point``) rather than a point cut between two whole lines."""
        text = io.StringIO()
        csv.writer(text).writerows(rows)
        data = memoryview(text.getvalue().encode("utf-8"))
        while data:
            data = data[os.write(self._fd, data) :]
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def drop_torn_point(path: Path) -> str | None:
    """Cut off the rows of a point whose writing was stopped (the process killed while its rows
    went to disk).  Where the CSV ends inside a line, that line goes, and so do the whole rows
    of its point before it (a point's rows are written at once, so they are the last rows with
    its op, size and attempt), so that a resumed sweep measures the point again instead of
    reading part of it as done.  Returns "<op> <size>" of the point cut, "a cut-off line" where
    that line began a point of its own, None where the file ends with a whole line."""

    def point(fields: list[bytes]) -> tuple[bytes, ...]:  # (a short line: what it has)
        return tuple(fields[i].strip() if i < len(fields) else b"" for i in (_OP, _SIZE, _ATTEMPT))

    with open(path, "rb+") as fh:
        data = fh.read()
        if not data or data.endswith(b"\n"):
            return None
        cut = data.rfind(b"\n") + 1  # where the cut-off line starts (0: inside the header)
        lines = data[:cut].splitlines(keepends=True)
        partial = data[cut:].split(b",")[:-1]  # its whole fields
        what = "a cut-off line"
        if len(lines) > 1:  # rows before it
            last = point(lines[-1].split(b","))
            if len(partial) <= _SIZE or tuple(partial[_OP : _SIZE + 1]) == last[:2]:
                # the cut line is the last point's, or too short to tell: that point goes too
                while len(lines) > 1 and point(lines[-1].split(b",")) == last:
                    cut -= len(lines.pop())
                what = f"{last[0].decode()} {last[1].decode()}"
        fh.truncate(cut)
    return what


class Noise:
    """Standard normal values for the points' inputs, drawn once per sweep and handed out as
    views, one array per input position (a second operand never aliases the first).

    Drawing them afresh for every point and attempt took 57 s of a 348 s partial default sweep
    on the H200 (2^28 float32 values, with the page faults of a new array, cost about 4.6 s
    there); the timings depend on the values' distribution, not on which values they are.
    Each array is drawn at ``capacity`` elements (or more where a point asks for more), so a
    sweep draws each once however its sizes come."""

    def __init__(self, rng: np.random.Generator, capacity: int = 0) -> None:
        self.rng = rng
        self.capacity = int(capacity)
        self._arrays: dict[tuple[int, str], np.ndarray] = {}

    def take(self, position: int, count: int, dtype: np.dtype) -> np.ndarray:
        """``count`` values (a read-only view) for input ``position`` of a point."""
        key = (position, np.dtype(dtype).str)
        values = self._arrays.get(key)
        if values is None or values.size < count:
            values = self.rng.standard_normal(max(count, self.capacity), dtype=dtype)
            values.flags.writeable = False
            self._arrays[key] = values
        return values[:count]


def _shapes(op: str, size: int) -> tuple[list[tuple[int, ...]], tuple[int, ...], str]:
    """The input shapes, the output shape and the shape text of one point of ``op``."""
    kind = OPS[op].kind
    if kind == "matmul":
        return [(size, size), (size, size)], (size, size), f"{size}x{size}x{size}"
    out_shape = () if kind == "reduction" else (size,)
    return [(size,)] * OPS[op].arity, out_shape, str(size)


def _inputs(op: str, size: int, dtype: np.dtype, noise: Noise):
    """Master input arrays (read-only views of ``noise``), the shape text and the bytes
    crossing the bus for one point."""
    shapes, out_shape, shape_text = _shapes(op, size)
    masters = []
    for position, shape in enumerate(shapes):
        x = noise.take(position, int(np.prod(shape)), dtype).reshape(shape)
        if op == "log":
            x = np.abs(x) + dtype.type(0.1)
        masters.append(x)
    return masters, shape_text, byte_count(shapes, out_shape, dtype.itemsize)


def _graph(op: str, masters: list[np.ndarray]):
    import softcuda as sc

    leaves = [sc.tensor(m) for m in masters]
    fn = getattr(sc, op)
    return fn(leaves[0]) if OPS[op].arity == 1 else fn(*leaves)


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
        from ..device import slug

        self.spec = spec
        self.spec_path = str(spec_path)
        self.machine = machine or detect()
        self.dtype = np.dtype(spec.dtype)
        self.backends = spec.select_backends(self.machine.backends)
        if not self.backends:
            from ..errors import SpecError

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
        largest = max(
            (int(np.prod(shape)) for op, size in spec.points() for shape in _shapes(op, size)[0]),
            default=0,
        )
        self.noise = Noise(np.random.default_rng(seed), largest)
        self.folder = Path(results_dir) / slug(self.machine.label)
        self.started = time.monotonic()
        self.elapsed_s: float | None = None  # set when run() finishes
        self.skipped: dict[tuple[str, str], float] = {}  # (op, backend) -> median that was too slow
        self.stopped_at: dict[tuple[str, str], int] = {}  # (op, backend) -> the size it was at
        self.rows: list[tuple] = []
        self.first_backends: dict[tuple[str, int], set[str]] = {}  # of each point's attempt 0
        self.waited_s = 0.0  # spent waiting for the host's best speed before retries
        self.host_readings: list[float] = []  # settle.host_time after each point measured
        self.resumed = resume
        # other work on the host shows in every CPU timing: said at the start, kept in the
        # metadata (the 1-minute average, while this process has done little yet)
        try:
            self.load_average: float | None = round(os.getloadavg()[0], 2)
        except (AttributeError, OSError):  # not on every platform, nor always readable
            self.load_average = None
        self.csv_path = self._pick_csv(resume)
        self.done: set[Point] = set()
        self.settled: Settled | None = None  # set by settle(), before anything is measured
        self.compile_s: float | None = None  # set by compile_kernels(), before settle()
        if resume:
            self._load_previous()

    # -- files ----------------------------------------------------------------------------------

    def _pick_csv(self, resume: bool) -> Path:
        if resume:
            candidates = []  # (meta path, how its spec differs from this one)
            metas = self.folder.glob(f"sweep-{self.spec.name}-*.meta.json")
            for meta_path in sorted(metas, key=_started_order):
                try:
                    meta = json.loads(meta_path.read_text())
                except (OSError, ValueError) as exc:
                    raise SoftcudaError(f"{meta_path}: cannot be read ({exc})") from None
                if (
                    not meta.get("complete")
                    and meta.get("device_hash") == self.machine.device_hash
                    and (meta.get("spec") or {}).get("name", self.spec.name) == self.spec.name
                ):  # (the glob also matches a spec named "<name>-more")
                    candidates.append((meta_path, spec_changes(meta.get("spec"), self.spec)))
            if not candidates:
                raise SoftcudaError(
                    f"--resume: no unfinished '{self.spec.name}' sweep of this "
                    f"device in {self.folder}"
                )
            same = [path for path, changes in candidates if not changes]
            if not same:  # rows measured one way must not be finished another way
                path, changes = candidates[-1]
                raise SoftcudaError(
                    f"--resume: the unfinished '{self.spec.name}' sweep in {path.parent} was "
                    f"measured with another spec ({'; '.join(changes[:3])}"
                    f"{'; ...' if len(changes) > 3 else ''}); resume with that spec, or start "
                    "a new sweep without --resume"
                )
            return same[-1].with_name(same[-1].name.replace(".meta.json", ".csv"))
        return self._new_csv()

    def _new_csv(self) -> Path:
        """sweep-<spec>-<UTC time>.csv, with -2, -3, ... where that name is taken."""
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        path, n = self.folder / f"sweep-{self.spec.name}-{stamp}.csv", 1
        while path.exists() or self._meta_of(path).exists():
            n += 1
            path = path.with_name(f"sweep-{self.spec.name}-{stamp}-{n}.csv")
        return path

    @property
    def meta_path(self) -> Path:
        return self._meta_of(self.csv_path)

    @staticmethod
    def _meta_of(csv_path: Path) -> Path:
        return csv_path.with_name(csv_path.name.replace(".csv", ".meta.json"))

    def _load_previous(self) -> None:
        from ..timings.load import load_csvs

        if not self.csv_path.exists():
            return
        with open(self.csv_path, encoding="utf-8", errors="replace", newline="") as fh:
            header = fh.readline()
        if header.endswith("\n") and tuple(header.strip().split(",")) != schema.COLUMNS:
            raise SoftcudaError(  # checked first: a file of another version is left as it is
                f"--resume: {self.csv_path} was written by another version of softcuda (its "
                f"columns are not schema version {schema.SCHEMA_VERSION}'s); start a new sweep"
            )
        dropped = drop_torn_point(self.csv_path)
        if dropped:
            warnings.warn(
                f"{self.csv_path}: the sweep was stopped while writing {dropped}; those rows "
                "are dropped and the point is measured again",
                stacklevel=2,
            )
        with open(self.csv_path, encoding="utf-8", newline="") as fh:
            header, first = fh.readline(), fh.readline()
        if not header or not first:  # stopped before its header or its first row was written
            return
        try:  # every row checked, a bad one named by its line
            frame = load_csvs([self.csv_path], attempts="all")
        except DataError as exc:
            raise DataError(f"--resume: {exc} Start a new sweep without --resume.") from None
        for row in frame.itertuples(index=False):
            self._keep(tuple(row))
            self.done.add(Point(row.op, int(row.size), row.backend))  # bus rows: backend "bus"
        # what was too slow before stays skipped (else the resumed sweep would time the
        # slowest point of all, the next size up), judged as measure() judges it: first
        # attempts only
        for (op, backend, size), median in _slowest_first(frame).items():
            self._judge(str(op), str(backend), float(median), int(size))

    def _keep(self, row: tuple) -> None:
        self.rows.append(row)
        if row[_ATTEMPT] == 0:
            self.first_backends.setdefault((row[_OP], int(row[_SIZE])), set()).add(row[_BACKEND])

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

    def write_meta(self, complete: bool, **extra: Any) -> None:
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
            "updated_at": _now(),
            "load_average_at_start": self.load_average,
            **({} if self.settled is None else {"settle": self.settled.to_dict()}),
            **({} if self.compile_s is None else {"compile_s": round(self.compile_s, 2)}),
            **extra,
        }
        tmp = self.meta_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta, indent=2) + "\n")
        os.replace(tmp, self.meta_path)

    # -- the work -------------------------------------------------------------------------------

    def op_backends(self, op: str) -> list[str]:
        return [b for b in self.backends if op in backends.BACKENDS[b].measured_ops]

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
            from ..backends import cuda_kernels

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
        that was done.  Returns every row (previous and new)
        as a DataFrame.  Raises ``BudgetSpent`` when the spec's time budget runs out (rows stay
        on disk; resume later).
        """
        self.compile_kernels()
        self.settle()
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:  # a new sweep's file is made here, and only here: exclusively
            try:
                writer = RowWriter(self.csv_path, exclusive=not self.resumed)
                break
            except FileExistsError:  # another sweep took the name since it was picked
                self.csv_path = self._new_csv()
        self.write_meta(False, started_at=_now())
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
                    self._measure_all(self._scan(op), writer, on_point, extra=True)
                    self._refine(op, writer, on_point)
            # the sizes that refinement added get their retries too (and a resumed sweep,
            # which cannot tell them from the others, does the same as one never stopped)
            self._retry_passes(ops, writer, on_point)
        finally:
            writer.close()
        self.elapsed_s = round(time.monotonic() - self.started, 1)
        self.write_meta(
            True,
            finished_at=_now(),
            rows=len(self.rows),
            elapsed_s=self.elapsed_s,
            waited_for_host_s=round(self.waited_s, 1),
            skipped={f"{op} {b}": s for (op, b), s in self.skipped.items()},
            stopped_at={f"{op} {b}": z for (op, b), z in self.stopped_at.items()},
        )
        return self.frame()

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=list(schema.COLUMNS))

    def _measure_all(
        self,
        points: list[Point],
        writer: RowWriter,
        on_point: Callable[[Point, int, int], None] | None,
        extra: bool = False,
        before: Callable[[], None] | None = None,
    ) -> None:
        """Measure ``points`` in order (``_one``, with ``before``); ``extra`` work was not in
        ``points()`` and grows the progress total."""
        if extra:
            self._total += len(points)
        for point in points:
            self._one(point, writer, on_point, before)
            self._index += 1

    def _retry_passes(
        self, ops: list[str], writer: RowWriter, on_point: Callable[[Point, int, int], None] | None
    ) -> None:
        for _ in range(self.spec.repetitions.retries):
            again = [p for op in ops for p in self._retries(op)]
            if not again:
                break
            self._measure_all(again, writer, on_point, extra=True, before=self._host_gate())

    def _host_gate(self) -> Callable[[], None] | None:
        """What a retry pass does before each point: wait (``settle.wait_for_host``) until the
        probe, read alone by ``settle.host_time``, runs within HOST_DRIFT of its fast state —
        the HOST_BEST_Q quantile of the same readings taken after every point so far, so that
        like is compared with like (read alone, the probe runs up to 20% faster than as a
        point's rider beside sleeping CUDA plans).  Spends at most the spec's ``retry_wait_s``
        in this process and never more than half the time budget left.  None when there is
        nothing to judge by or no time to wait with."""
        from ..timings.stats import HOST_BEST_Q, HOST_DRIFT

        allowance = self.spec.repetitions.retry_wait_s
        if allowance <= self.waited_s or len(self.host_readings) < GATE_MIN_READINGS:
            return None
        best_s = float(np.quantile(self.host_readings, HOST_BEST_Q))
        budget = self.spec.time_budget_s

        def gate() -> None:
            left = allowance - self.waited_s
            if budget is not None:
                left = min(left, (budget - (time.monotonic() - self.started)) / 2)
            if left > 0:
                self.waited_s += wait_for_host(best_s, HOST_DRIFT, left, measure=host_time)

        return gate

    def _refine(
        self, op: str, writer: RowWriter, on_point: Callable[[Point, int, int], None] | None
    ) -> None:
        for _ in range(REFINE_ROUNDS):
            extra = self._refinement(op)
            if not extra:
                break
            self._measure_all(extra, writer, on_point, extra=True)

    def _one(
        self,
        point: Point,
        writer: RowWriter,
        on_point: Callable[[Point, int, int], None] | None,
        before: Callable[[], None] | None = None,
    ) -> None:
        """Measure one point and keep its rows; ``before()`` runs once the progress shows it."""
        index, total = self._index, self._total
        if on_point is not None:
            on_point(point, index, total)
        if before is not None:
            before()
        if point.op == "bus" and point in self.done:
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
        budget = self.spec.time_budget_s
        if budget is not None and time.monotonic() - self.started > budget:
            raise BudgetSpent(
                f"the spec's time budget of {budget:g} s is spent after {index} of {total} points"
            )
        rows = self.measure_bus(point.size) if point.op == "bus" else self.measure(point)
        reps = self.spec.repetitions
        if point.op != "bus" and reps.retries and reps.retry_wait_s:
            self.host_readings.append(host_time())  # the retry gate's yardstick
        writer.write(rows)
        for row in rows:
            self._keep(row)
        self.done.update(Point(r[_OP], r[_SIZE], r[_BACKEND]) for r in rows)  # attempt 0 form

    def _retries(self, op: str) -> list[Point]:
        """The points of ``op`` to measure again, each with its next attempt number: those up
        to ROTATE_MAX_BYTES with fewer than 1 + ``retries`` attempts and none yet with an
        ``attempt_scores`` score of at most 1 (the host at its best speed, no series spread).
        The host's best speed is judged over every point measured so far, all ops."""
        from ..timings.stats import attempt_scores

        limit = self.spec.repetitions.retries
        small = {
            r[_SIZE]
            for r in self.rows
            if r[_OP] == op
            and r[_BACKEND] != schema.PROBE_BACKEND
            and r[_NBYTES] <= ROTATE_MAX_BYTES
        }
        if not limit or not small:
            return []
        rows = [r for r in self.rows if r[_PHASE] == schema.PROBE_PHASE or r[_OP] == op]
        frame = pd.DataFrame(rows, columns=list(schema.COLUMNS))
        cap = self.spec.repetitions.max_point_s
        if cap is not None:  # a point where a backend was too slow is not timed again
            slowest = _slowest_first(frame[frame["op"] == op])
            small -= set(slowest[slowest > cap].index.get_level_values("size"))
        scores = attempt_scores(frame)
        op_level, size_level = (
            scores.index.get_level_values("op"),
            scores.index.get_level_values("size"),
        )
        scores = scores[(op_level == op) & size_level.isin(small)]
        per_point = scores.groupby(level="size").agg(["min", "size"])
        again = per_point[(per_point["min"] > 1) & (per_point["size"] <= limit)]
        return [Point(op, int(size), "*", int(n)) for size, n in again["size"].items()]

    def unrefined(self) -> list[str]:
        """The ops with a boundary still not bracketed within 10% by measured sizes: refinement
        ran out of its rounds, or re-measuring moved a boundary after the last of them."""
        ops = dict.fromkeys(p.op for p in self.points() if p.op != "bus")
        return [op for op in ops if self._refinement(op)]

    def _refinement(self, op: str) -> list[Point]:
        from ..timings import select

        return self._new_sizes(op, select.refinement_sizes)

    def _scan(self, op: str) -> list[Point]:
        from ..timings import select

        return self._new_sizes(
            op, lambda frame, op, metric: select.scan_sizes(frame, op, metric, self.spec.scan)
        )

    def _new_sizes(self, op: str, propose: Callable[[pd.DataFrame, str, str], list[int]]):
        """The points ``propose(frame, op, metric)`` asks for, judged on the op's rows and every
        probe row (the host's best time is judged over all points); none where it cannot
        judge."""
        rows = [r for r in self.rows if r[_OP] == op or r[_PHASE] == schema.PROBE_PHASE]
        frame = pd.DataFrame(rows, columns=list(schema.COLUMNS))
        try:
            sizes = propose(frame, op, self.spec.metric)
        except SoftcudaError:
            return []
        return [Point(op, s, "*") for s in sizes]

    # -- measuring ------------------------------------------------------------------------------

    def _row(
        self,
        point: Point,
        shape: str,
        host_memory: str,
        phase: str,
        reps,
        nbytes: int,
        dtype: str | None = None,
    ) -> list[tuple]:
        return [
            (
                schema.SCHEMA_VERSION,
                self.machine.device_hash,
                self.machine.label,
                point.op,
                point.size,
                shape,
                dtype or self.dtype.name,
                point.backend,
                host_memory,
                phase,
                i,
                float(s),
                nbytes,
                point.attempt,
            )
            for i, s in enumerate(reps)
        ]

    def measure(self, point: Point) -> list[tuple]:
        """Time every backend of one (op, size), repetitions interleaved.

        All the point's plans are built first (``buffers`` copies of each, with their own
        inputs and buffers, while the point's data is under ROTATE_MAX_BYTES); each round then
        runs every plan once, in an order that rotates from round to round, until each has its
        repetitions.  Drift (clocks, a busy neighbour) then lands on every backend alike instead
        of on whichever was measured last — the comparison is what the profile is made of — and
        where a copy's data happens to sit in memory averages out over the copies.  Under
        ROTATE_MAX_BYTES each timed call follows an untimed call of the same plan, so its data
        is as hot in the caches as it will go: a state every run reproduces.  One more group,
        ``settle.probe``, times a fixed workload in the same rounds: its rows (backend
        "machine", phase "probe") record how fast the host ran while the point was measured.
        """
        masters, shape, nbytes = _inputs(point.op, point.size, self.dtype, self.noise)
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
        reps_policy = self.spec.repetitions
        small = nbytes <= ROTATE_MAX_BYTES
        copies = reps_policy.buffers if small else 1
        rows: list[tuple] = []
        try:
            plans = []  # (backend, host memory kind, phase, [plan per copy])
            for backend in todo:
                config = single_rule_config(point.op, backend)
                kinds: tuple[str, ...]
                if backends.BACKENDS[backend].device == "cpu":
                    kinds, phase = ("pageable",), "wall"
                else:
                    kinds, phase = self.spec.host_memory, "end_to_end"
                for kind in kinds:
                    group = [
                        _compile(_graph(point.op, masters), config, kind) for _ in range(copies)
                    ]
                    plans.append((backend, kind, phase, group))
            groups = [[partial(plan.evaluate, copy=False) for plan in p[3]] for p in plans]
            machine = Point(point.op, point.size, schema.PROBE_BACKEND, point.attempt)
            # a resumed point has its probe rows; an attempt again takes its own
            probing = (
                point.attempt > 0 or Point(point.op, point.size, machine.backend) not in self.done
            )
            if probing:
                groups.append([probe])  # the host's speed, timed in the same rounds
            # hot while the data may fit a cache; above ROTATE_MAX_BYTES it streams either way
            times = interleaved(groups, reps_policy, hot=small, riders=int(probing))
            if probing:
                host_speed = times.pop()[0]
                rows += self._row(
                    machine, "16384", "pageable", schema.PROBE_PHASE, host_speed, 0, "float32"
                )
            slowest: dict[str, float] = {}
            for (backend, kind, phase, group), series in zip(plans, times):
                reps = _rounds(series)
                p = Point(point.op, point.size, backend, point.attempt)
                rows += self._row(p, shape, kind, phase, reps, nbytes)
                slowest[backend] = max(slowest.get(backend, 0.0), float(np.median(reps)))
                if phase == "end_to_end":
                    profiles = [
                        plan.profile(repeat=min(len(s), PROFILE_REPS), warmup=0)
                        for plan, s in zip(group, series)
                    ]
                    for name in ("h2d", "kernel", "d2h"):
                        per_copy = [
                            [st["repetitions_s"] for st in steps if _phase(st) == name]
                            for steps in profiles
                        ]
                        if per_copy[0]:
                            # profiled one copy after the other, so listed in that order
                            summed = [x for parts in per_copy for x in np.sum(parts, axis=0)]
                            rows += self._row(p, shape, kind, name, summed, nbytes)
            del plans
        finally:
            leaf_pool().reset()  # this point's leaves are done with: release them at once
        if not point.attempt:  # a later attempt at a size already judged changes nothing
            for backend, median in slowest.items():
                self._judge(point.op, backend, median, point.size)
        return rows

    def measure_bus(self, nbytes: int) -> list[tuple]:
        """Plain copies of ``nbytes`` between host memory of each kind and the device, both
        ways, made the way a plan's baked transfers are (``cuda_transfer.make_transfer``)."""
        import cupy

        from ..backends.cuda_transfer import make_transfer

        device = cupy.empty(nbytes, dtype=np.uint8)
        device.fill(7)
        stream = cupy.cuda.get_current_stream()
        rows: list[tuple] = []
        for kind in self.spec.host_memory:
            if kind == "pinned":
                memory = cupy.cuda.alloc_pinned_memory(nbytes)
                host = np.frombuffer(memory, dtype=np.uint8, count=nbytes)
            else:
                host = np.empty(nbytes, dtype=np.uint8)
            host[:] = 3
            for direction in ("h2d", "d2h"):
                src, dst = (host, device) if direction == "h2d" else (device, host)
                transfer = make_transfer(direction, src, dst, stream)

                def copy(transfer=transfer) -> None:
                    transfer()
                    stream.synchronize()

                reps = repeat(copy, self.spec.repetitions)
                point = Point(f"copy_{direction}", nbytes, "bus")
                rows += self._row(point, str(nbytes), kind, "transfer", reps, nbytes, "uint8")
        return rows


class BudgetSpent(SoftcudaError):
    """The spec's time budget ran out; the rows so far are on disk."""


class CompileFailed(SoftcudaError):
    """softcuda's CUDA kernels did not compile; nothing was measured."""


def _started_order(meta_path: Path) -> tuple[str, int]:
    """sweep-<spec>-<time>[-<n>].meta.json in the order the sweeps were started: by time, then
    n (a name sort puts "-2" before "." and "-10" before "-2")."""
    stem = meta_path.name.removesuffix(".meta.json")
    match = re.fullmatch(r".*-(\d{8}T\d{6}Z)(?:-(\d+))?", stem)
    return (match.group(1), int(match.group(2) or 1)) if match else (stem, 0)


RESUMABLE_CHANGES = ("time_budget_s", "settle_s", "repetitions.retry_wait_s")
"""Spec keys a resumed sweep may change: how long this run may take or wait, not what it
measures."""


def spec_changes(stored: dict[str, Any] | None, spec: Spec) -> list[str]:
    """How ``spec`` differs from the spec an unfinished sweep recorded in its metadata, key by
    key ("repetitions.min_reps: 3 there, 5 here"), leaving out RESUMABLE_CHANGES; [] when
    nothing else differs or the metadata holds no spec to compare."""
    if not isinstance(stored, dict):
        return []

    def flat(value: Any, key: str = "") -> dict[str, Any]:
        if isinstance(value, dict):
            return {k: v for sub in value for k, v in flat(value[sub], f"{key}{sub}.").items()}
        return {key.rstrip("."): value}

    there = flat(stored)
    here = flat(json.loads(json.dumps(spec.to_dict())))  # the form the metadata holds
    keys = sorted(set(there) | set(here), key=lambda k: (k not in here, k))
    return [
        f"{k}: {there.get(k, 'absent')} there, {here.get(k, 'absent')} here"
        for k in keys
        if k not in RESUMABLE_CHANGES and there.get(k) != here.get(k)
    ]


def _slowest_first(frame: pd.DataFrame) -> pd.Series:
    """Median host-clock seconds of each (op, backend, size) in its slowest host memory kind,
    first attempts only: what ``Sweep._judge`` holds against ``max_point_s``."""
    timed = frame[frame["phase"].isin(("wall", "end_to_end")) & (frame["attempt"] == 0)]
    kinds = ["op", "backend", "size", "host_memory"]
    return timed.groupby(kinds)["seconds"].median().groupby(level=[0, 1, 2]).max()


def _rounds(series: list[list[float]]) -> list[float]:
    """The repetitions of several copies in the order they were taken: round by round."""
    return [s[r] for r in range(max(map(len, series))) for s in series if r < len(s)]


def _phase(step: dict[str, Any]) -> str | None:
    if step["op"] in ("h2d", "d2h"):
        return step["op"]
    if step["repetitions_s"] and step["backend"] not in ("copy", "view", "leaf"):
        return "kernel"
    return None


def _compile(out, config, host_memory: str):
    from ..graph import compile as compile_graph

    return compile_graph(out, config, host_memory=host_memory)
