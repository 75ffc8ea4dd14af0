"""The sweep as one library call: ``run`` measures a spec on this machine and writes its
profile; ``decide_again`` writes a profile from a finished sweep's raw CSV, measuring nothing.

Both hold the sweep's locks while they work (``folders.hold``: one sweep at a time on a
profile and in a device's folder), print nothing, and return what they did
(``events.SweepResult``, ``events.Written``); ``run`` reports its progress as events to the
caller's callback.  A sweep stopped while it measures (Ctrl-C, its time budget, a full disk, too
little memory, kernels that do not compile) keeps its rows and returns, saying so
(``SweepResult.stopped``); what is wrong before it measures (the spec, the folders, a lock held
by another sweep) raises a SoftcudaError.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import DataError, PoolError, SoftcudaError
from ..timings.load import load_csvs, load_metadata, metadata_path
from . import folders, profile
from .events import (
    Event,
    KernelsCompiled,
    MeasuringDone,
    MeasuringStarted,
    PointStarted,
    SettlingDone,
    SettlingStarted,
    Skipped,
    Stopped,
    SweepResult,
    SweepStarted,
    Written,
)
from .machine import Machine, detect
from .runner import BudgetSpent, CompileFailed, Sweep, device_folder
from .spec import Spec, spec_from_dict


def run(
    spec: Spec,
    spec_path: str | Path,
    *,
    out: str | Path = "CONFIG.soft",
    results_dir: str | Path = "results",
    device_index: int = 0,
    machine: Machine | None = None,
    resume: bool = False,
    on_event: Callable[[Event], None] | None = None,
) -> SweepResult:
    """Measure ``spec`` on this machine (``device_index``'s GPU, or ``machine``), its rows
    under ``results_dir``, and write its profile to ``out`` (a profile of another device there
    archived first); with ``resume``, go on with the last unfinished sweep of the spec here."""
    emit = on_event or (lambda event: None)
    out = Path(out)
    with contextlib.ExitStack() as held:
        folders.check_writable(out.parent, "--out")  # before the sweep, not after it
        machine = machine or detect(device_index)
        # one sweep at a time on one profile and in a device's folder (a resumed sweep reads,
        # and may cut, its CSV as it starts: locked before that); the profile first, so that
        # a refusal leaves no folder made
        held.enter_context(folders.hold(profile_lock(out), str(out)))
        folder = device_folder(results_dir, machine)
        existed = folder.is_dir()
        if existed:
            held.enter_context(folders.hold(folder / folders.LOCK_NAME, str(folder)))
        sweep = Sweep(spec, spec_path, results_dir, machine=machine, resume=resume)
        folders.make_folder(sweep.folder)  # once nothing else can fail
        if not existed:
            held.enter_context(folders.hold(folder / folders.LOCK_NAME, str(folder)))
        emit(
            SweepStarted(
                spec,
                str(spec_path),
                machine,
                tuple(sweep.backends),
                sweep.load_average,
                sweep.csv_path,
                len(sweep.points()),
            )
        )
        frame, stopped = _measure(sweep, emit)
        if stopped is not None:
            return _result(sweep, stopped=stopped)
        try:  # the sweep is complete: what stops the profile now is met by decide_again
            written = decide_and_write(
                frame,
                machine,
                spec,
                str(spec_path),
                sweep.csv_path,
                sweep.elapsed_s,
                out,
                results_dir,
                sweep.launch,
                sweep.switch,
            )
        except KeyboardInterrupt:
            return _result(sweep, stopped=Stopped("interrupted", "", True, True))
        except (SoftcudaError, OSError) as exc:
            return _result(sweep, stopped=Stopped("unwritten", _sentence(exc), True, True))
        return _result(sweep, frame=frame, written=written)


def _measure(
    sweep: Sweep, emit: Callable[[Event], None]
) -> tuple[pd.DataFrame | None, Stopped | None]:
    """Compile, settle and measure every point of ``sweep``; its rows, or why it stopped."""
    try:
        compile_s = sweep.compile_kernels()
        if compile_s is not None:
            emit(KernelsCompiled(compile_s))
        if sweep.spec.settle_s > 0:
            emit(SettlingStarted(sweep.spec.settle_s))
            emit(SettlingDone(sweep.settle().summary()))
        emit(MeasuringStarted(len(sweep.points())))

        def on_point(point, index: int, total: int) -> None:
            on = () if point.op == "bus" else tuple(sweep.op_backends(point.op))
            emit(PointStarted(point.op, point.size, on, point.attempt, index, total))

        frame = sweep.run(on_point)
        emit(MeasuringDone())
        return frame, None
    except KeyboardInterrupt:
        why, message = "interrupted", ""
    except CompileFailed as exc:
        why, message = "compile", str(exc)
    except BudgetSpent as exc:
        why, message = "budget", str(exc)
    except OSError as exc:  # the disk filled, or the folder went, while the rows were written
        why, message = "disk", f"{exc.filename or sweep.csv_path}: {exc.strerror or exc}"
    except (MemoryError, PoolError) as exc:  # more than the check before settling foresaw
        why, message = "memory", str(exc).rstrip(".") or "this machine ran out of memory"
    started = sweep.csv_path.exists()  # else stopped while settling: no file was started
    return None, Stopped(why, message, started, folders.is_complete(sweep.meta_path))


def _result(sweep: Sweep, *, stopped=None, frame=None, written=None) -> SweepResult:
    """What ``run`` returns of ``sweep``: the notes of a finished one where ``frame`` is given."""
    found: dict[str, Any] = {}
    if frame is not None:
        again = frame[frame["attempt"] > 0].drop_duplicates(["op", "size", "attempt"])
        found = {
            "skipped": tuple(
                Skipped(op, backend, median, sweep.stopped_at[(op, backend)])
                for (op, backend), median in sorted(sweep.skipped.items())
            ),
            "cut": sweep.cut,
            "unrefined": tuple(sweep.unrefined()),
            "measured_again": len(again.drop_duplicates(["op", "size"])),
            "attempts_again": len(again),
            "waited_s": sweep.waited_s,
        }
    return SweepResult(
        sweep.spec,
        sweep.machine,
        sweep.csv_path,
        sweep.meta_path,
        len(sweep.rows),
        sweep.elapsed_s,
        stopped=stopped,
        written=written,
        launch=sweep.launch,
        launch_error=sweep.launch_error,
        switch=sweep.switch,
        switch_error=sweep.switch_error,
        **found,
    )


def _sentence(exc: BaseException) -> str:
    """An error of deciding or writing the profile, in one sentence."""
    if isinstance(exc, OSError):  # a path we were told to read or write
        return f"{exc.filename or 'a file'}: {exc.strerror or exc}"
    return str(exc)


def decide_and_write(
    frame: pd.DataFrame,
    machine: Machine,
    spec: Spec,
    spec_path: str,
    csv_path: Path,
    elapsed_s: float | None,
    target: Path,
    results_dir: str | Path,
    launch: Any = None,
    switch: Any = None,
) -> Written:
    """Decide, archive a profile of another device at ``target`` and write the new one
    atomically: the common end of ``run`` and ``decide_again``."""
    config = profile.build_profile(
        frame, machine, spec, spec_path, csv_path, elapsed_s, launch, switch
    )
    archived = profile.archive_if_foreign(target, machine.device_hash, Path(results_dir))
    profile.write_profile(config, target)
    unreadable = archived is not None and archived.parent.name == profile.UNREADABLE
    unstable = profile.unstable_points(frame, spec.metric)
    return Written(config, target, archived, unreadable, spec.metric, unstable, len(frame))


def decide_again(
    csv_path: str | Path, out: str | Path = "CONFIG.soft", results_dir: str | Path = "results"
) -> Written:
    """Write the profile of a finished sweep's raw CSV (and the metadata beside it) to ``out``,
    measuring nothing; a DataError for an unfinished sweep or a CSV ``softcuda init`` did not
    write."""
    csv, target = str(csv_path), Path(out)
    with contextlib.ExitStack() as held:
        if not csv.isprintable():  # the profile's [sweep] csv line would end inside it
            raise DataError(f"{csv!r}: a file name of more than one line; rename it")
        folders.check_writable(target.parent, "--out")
        held.enter_context(folders.hold(profile_lock(target), str(target)))  # not raced
        # nor a sweep appending to the CSV (a --resume): its folder's lock, as a sweep takes
        # it (a folder this user cannot write to holds no sweep of this user's)
        folder = Path(csv).parent
        if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK):
            held.enter_context(folders.hold(folder / folders.LOCK_NAME, str(folder)))
        meta = load_metadata(csv)
        source = str(metadata_path(csv))
        if meta.get("complete") is not True:  # stopped: the rest of its points are not here
            spec_path = meta.get("spec_path") if _one_line(meta.get("spec_path")) else "SPEC"
            raise DataError(
                f"{source}: the sweep is not complete (it was stopped before its end), and a "
                "profile decided from part of it would not be what its spec measures; finish "
                f"it with `softcuda init --resume --spec {spec_path} --results "
                f"{folder.parent}` first"
            )
        frame = load_csvs([csv], attempts="all")  # each reader picks its attempts, as in a run
        needed = ("machine", "device_hash", "hash_string", "backends", "spec")
        missing = [k for k in needed if k not in meta]
        if missing:
            raise DataError(
                f"{csv}: its metadata lacks {', '.join(missing)}; it was not "
                "written by `softcuda init`"
            )
        machine = Machine.from_meta(meta, source)
        # the spec is the one the metadata stores: named as that, not as the file it was once
        # read from (which may have changed since, or never have been here)
        spec = spec_from_dict(meta["spec"], f"{source}: spec")
        # provenance only: where these two are not what init writes, the profile says where the
        # spec it was decided by is (the metadata beside the CSV), and goes without the time
        spec_path, elapsed = meta.get("spec_path"), meta.get("elapsed_s")
        if not _one_line(spec_path):
            spec_path = csv
        if not (isinstance(elapsed, (int, float)) and math.isfinite(elapsed) and elapsed >= 0):
            elapsed = None
        return decide_and_write(
            frame,
            machine,
            spec,
            spec_path,
            Path(csv),
            elapsed,
            target,
            results_dir,
            meta.get("launch"),  # build_profile keeps it only where it is a measured time
            meta.get("switch"),  # likewise: only figures the [bus] switch_us line can hold
        )


def profile_lock(target: Path) -> Path:
    """The lock file of a profile: beside it, hidden."""
    return target.parent / f".{target.name}.lock"


def _one_line(text: object) -> bool:
    """Whether ``text`` can stand as one line of a message or of the profile."""
    return isinstance(text, str) and bool(text) and text.isprintable()
