"""``softcuda init``: the benchmark sweep that measures this machine and writes CONFIG.soft.

The modules that load pandas (the runner, storage, the timings, the profile) are imported
inside the command and its helpers, so that ``softcuda --help`` does not pay for them; what
init checks before the sweep (``softcuda.sweep.folders``) loads no pandas."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import click

from softcuda.errors import DataError, PoolError, SpecError
from softcuda.sweep import folders
from softcuda.sweep.machine import Machine, detect
from softcuda.sweep.spec import load_spec, spec_from_dict

from ._common import EXIT_FAILED, InputError, library_errors

EXIT_INTERRUPTED = 130
BUSY_LOAD = 1.0
"""A 1-minute load average from this much on, before the sweep starts, means other work."""


@click.command("init")
@click.option(
    "--spec",
    "spec_path",
    type=click.Path(dir_okay=False),
    default="sweeps/default.yaml",
    show_default=True,
    help="Sweep spec (YAML); sweeps/quick.yaml runs in a minute.",
)
@click.option(
    "--device",
    "device_index",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which CUDA device to profile on a multi-GPU host.",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False),
    default="CONFIG.soft",
    show_default=True,
    help="Where to write the profile (atomically).",
)
@click.option(
    "--results",
    "results_dir",
    type=click.Path(file_okay=False),
    default="results",
    show_default=True,
    help="Folder for raw CSVs, metadata and archived profiles.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the last unfinished sweep of this spec "
    "on this device instead of starting a new one.",
)
@click.option(
    "--from",
    "from_csv",
    type=click.Path(dir_okay=False),
    default=None,
    help="Measure nothing: decide again from a finished sweep's raw CSV (and the .meta.json "
    "beside it), e.g. after a change to the selection rules. An unfinished sweep (finish it "
    "with --resume), a CSV with timings of a backend or an op this softcuda does not know, of "
    "more than one dtype or device, or with no timings of any op, is refused.",
)
def init_command(
    spec_path: str,
    device_index: int,
    out_path: str,
    results_dir: str,
    resume: bool,
    from_csv: str | None,
) -> None:
    """Measure every (op, size, backend) of the spec on this machine, pick the winner per size
    bucket, and write CONFIG.soft with the measured times beside each decision.

    Progress is shown on stderr. Ctrl-C keeps every row measured so far and the previous
    CONFIG.soft; continue with --resume (or, once the sweep is complete, write the profile
    with --from). A profile of another device is archived under
    the results folder before it is replaced. While init runs, a second one on the same
    results folder or profile is refused. Without a GPU the sweep is CPU-only.
    """
    from softcuda.sweep.runner import (  # pandas: not at --help
        BudgetSpent,
        CompileFailed,
        Sweep,
        device_folder,
    )

    if from_csv is not None:
        if resume:
            raise click.UsageError(
                "--resume and --from exclude each other: --from measures nothing"
            )
        _decide_again(from_csv, Path(out_path), Path(results_dir))
        return
    with library_errors():
        if not Path(spec_path).exists() and spec_path == "sweeps/default.yaml":
            raise_missing_default(spec_path)
        spec = load_spec(spec_path)
        folders.check_writable(Path(out_path).parent, "--out")  # before the sweep, not after it
        machine = detect(device_index)
        # one sweep at a time on one profile and in a device's folder (a resumed sweep reads,
        # and may cut, its CSV as it starts: locked before that), held until init exits; the
        # profile first, so that a refusal leaves no folder made
        _hold(_profile_lock(Path(out_path)), out_path)
        folder = device_folder(results_dir, machine)
        held = folder.is_dir()
        if held:
            _hold(folder / folders.LOCK_NAME, str(folder))
        sweep = Sweep(spec, spec_path, results_dir, machine=machine, resume=resume)
        folders.make_folder(sweep.folder)  # once nothing else can fail
        if not held:
            _hold(folder / folders.LOCK_NAME, str(folder))
    again = f"softcuda init --resume --spec {spec_path} --results {results_dir} --out {out_path}"
    if device_index:
        again += f" --device {device_index}"
    unwritten = (  # once the metadata says the sweep is complete
        f"the sweep is complete in {sweep.csv_path}, but {out_path} was not written; write it "
        f"with `softcuda init --from {sweep.csv_path} --out {out_path} --results {results_dir}`"
    )
    click.echo(f"softcuda init — sweep '{spec.name}' ({spec_path}), metric {spec.metric}")
    for key, value in machine.fields.items():
        click.echo(f"  {key:<18} {value}")
    click.echo(f"  {'device_hash':<18} {machine.device_hash}")
    click.echo(f"  {'hash over':<18} {machine.hash_string}")
    for backend, reason in machine.unavailable.items():
        click.echo(f"  skipped {backend}: {reason}")
    click.echo(f"  backends           {', '.join(sweep.backends)}")
    if sweep.load_average is not None:
        click.echo(f"  load average       {sweep.load_average:g} (1 min)")
        if sweep.load_average >= BUSY_LOAD:
            click.echo(
                f"warning: the load average is {sweep.load_average:g}: other work is running "
                "on this machine, and the CPU timings (settling cannot tell) will include it",
                err=True,
            )
    click.echo(f"  raw rows           {sweep.csv_path}")
    click.echo("")

    points = sweep.points()
    measuring = ["the first point"]  # the point on_point last showed, for the errors below
    try:
        compile_s = sweep.compile_kernels()
        if compile_s is not None:
            click.echo(f"compiled softcuda's CUDA kernels in {compile_s:.1f} s\n")
        if spec.settle_s > 0:
            click.echo(
                f"settling: timing fixed workloads until this machine runs them at a steady "
                f"speed (at most {spec.settle_s:g} s)"
            )
            click.echo(f"  {sweep.settle().summary()}\n")
        if sys.stderr.isatty():
            progress = click.progressbar(
                length=len(points),
                label="measuring",
                show_eta=True,
                show_pos=True,
                item_show_func=lambda item: item,
                file=sys.stderr,
                width=24,
            )
        else:  # a log: click would print its label once and nothing until the end
            progress = LogProgress(len(points))
        with progress as bar:

            def on_point(point, index: int, total: int) -> None:
                bar.length = total
                if point.op == "bus":
                    label = f"bus {point.size} B, both ways"
                else:  # every backend of a point is measured together, interleaved
                    label = f"{point.op} {point.size} on {', '.join(sweep.op_backends(point.op))}"
                    if point.attempt:
                        label = f"{point.op} {point.size} again (attempt {point.attempt})"
                measuring[0] = label
                bar.update(index - bar.pos, label)

            frame = sweep.run(on_point)
            bar.update(bar.length - bar.pos, "done")
    except KeyboardInterrupt:
        if not sweep.csv_path.exists():  # stopped while settling: no file was started
            click.echo(
                f"\ninterrupted before anything was measured: nothing was written and {out_path} "
                "was not touched; run the same command again to start over",
                err=True,
            )
        elif folders.is_complete(sweep.meta_path):  # --resume finds no unfinished sweep
            click.echo(f"\ninterrupted: {unwritten}", err=True)
        else:
            click.echo(
                f"\ninterrupted: {len(sweep.rows)} rows are kept in {sweep.csv_path}; "
                f"{out_path} was not touched; continue with `{again}`",
                err=True,
            )
        raise SystemExit(EXIT_INTERRUPTED) from None
    except CompileFailed as exc:
        click.echo(f"error: {exc}; nothing was measured and {out_path} was not touched", err=True)
        raise SystemExit(EXIT_FAILED) from None
    except BudgetSpent as exc:
        click.echo(
            f"error: {exc}; the rows are kept in {sweep.csv_path}; continue with `{again}`",
            err=True,
        )
        raise SystemExit(EXIT_FAILED) from None
    except OSError as exc:  # the disk filled, or the folder went, while the rows were written
        click.echo(
            f"error: the sweep stopped: {exc.filename or sweep.csv_path}: {exc.strerror or exc}"
            f"; the {len(sweep.rows)} rows measured before are kept in {sweep.csv_path}; "
            f"continue with `{again}` once it can be written",
            err=True,
        )
        raise SystemExit(EXIT_FAILED) from None
    except (MemoryError, PoolError) as exc:  # more than the check before settling foresaw
        why = str(exc).rstrip(".") or "this machine ran out of memory"
        click.echo(
            f"error: the sweep stopped at {measuring[0]}: {why}; the {len(sweep.rows)} rows "
            f"measured before are kept in {sweep.csv_path}; it can go on (`{again}`) where "
            "more memory is free",
            err=True,
        )
        raise SystemExit(EXIT_FAILED) from None

    target = Path(out_path)
    try:  # the sweep is complete: what stops the profile now is met by --from, not --resume
        written = _write(
            frame,
            machine,
            spec,
            spec_path,
            sweep.csv_path,
            sweep.elapsed_s,
            target,
            results_dir,
            sweep.launch,
            sweep.switch,
        )
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: {unwritten}", err=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except InputError as exc:
        raise InputError(f"{exc.message.rstrip('.')}; {unwritten}") from None
    _report(*written, frame, spec.metric, target)  # written: a Ctrl-C now says nothing of it
    if sweep.launch_error:
        click.echo(f"note: the launch calibration failed ({sweep.launch_error})")
    if sweep.switch_error:
        click.echo(f"note: the hand-off calibration failed ({sweep.switch_error})")
    if sweep.skipped:
        for (op, backend), median in sorted(sweep.skipped.items()):
            click.echo(
                f"note: {backend} was not timed at {op} sizes above "
                f"{sweep.stopped_at[(op, backend)]} (median {median:.3g} s above max_point_s)"
            )
    if sweep.cut:
        click.echo(
            f"note: the time budget of {spec.time_budget_s:g} s ran out after every op's sizes "
            f"were measured: {sweep.cut} point(s) were not measured again or scanned, and the "
            "profile is decided from what was measured"
        )
    for op in sweep.unrefined():
        click.echo(
            f"note: a boundary of {op} is not bracketed within 10% by measured sizes (its "
            "rule's note gives the sizes it lies between); `softcuda init --resume` cannot "
            "add sizes to a finished sweep, a new one can"
        )
    again = frame[frame["attempt"] > 0].drop_duplicates(["op", "size", "attempt"])
    if len(again):
        points = again.drop_duplicates(["op", "size"])
        click.echo(
            f"note: {len(points)} point(s) were measured again ({len(again)} attempt(s) in all) "
            "because the host ran off its best speed while they were measured; each point's "
            "steadiest attempt is used and every attempt's rows are kept"
            + (
                f"; {sweep.waited_s:.1f} s went to waiting for the host's best speed first"
                if sweep.waited_s
                else ""
            )
        )
    click.echo(
        f"wrote {target} ({len(frame)} raw rows in {sweep.csv_path}, "
        f"metadata {sweep.meta_path}) in {sweep.elapsed_s:.0f} s"
    )


class LogProgress:
    """The progress bar's stand-in where stderr is not a terminal: one line on stderr every
    PERIOD_S seconds (and the last), with the point, how far the sweep is and the time left:
    the points left at the pace since the line before (a resumed sweep passes its finished
    points in no time, so the pace over the whole run would promise too little; refinement
    adds points as it goes)."""

    PERIOD_S = 15.0

    def __init__(self, length: int) -> None:
        self.length, self.pos = length, 0
        self.started = time.monotonic()
        self.shown = -math.inf
        self.shown_pos = 0

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, n: int, item: str | None = None) -> None:
        self.pos += n
        now = time.monotonic()
        if item is None or (now - self.shown < self.PERIOD_S and item != "done"):
            return
        since, done = now - max(self.shown, self.started), self.pos - self.shown_pos
        self.shown, self.shown_pos = now, self.pos
        spent = now - self.started
        left = since / done * (self.length - self.pos) if done and since > 0 else math.nan
        click.echo(
            f"measuring: {self.pos} of {self.length} points, {_clock(spent)} in, "
            f"about {_clock(left)} left: {item}",
            err=True,
        )


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes} min {s:02d} s" if minutes else f"{s} s"


def _hold(lock: Path, what: str) -> None:
    """Hold ``folders.hold(lock, what)`` until the command ends."""
    click.get_current_context().with_resource(folders.hold(lock, what))


def _profile_lock(target: Path) -> Path:
    return target.parent / f".{target.name}.lock"


def _decide_again(csv_path: str, target: Path, results_dir: Path) -> None:
    from softcuda.timings.load import (  # pandas: not at --help
        load_csvs,
        load_metadata,
        metadata_path,
    )

    with library_errors():
        if not csv_path.isprintable():  # the profile's [sweep] csv line would end inside it
            raise DataError(f"{csv_path!r}: a file name of more than one line; rename it")
        folders.check_writable(target.parent, "--out")
        _hold(_profile_lock(target), str(target))  # a sweep writing it may not be raced
        # nor a sweep appending to the CSV (a --resume): its folder's lock, as a sweep takes
        # it (a folder this user cannot write to holds no sweep of this user's)
        folder = Path(csv_path).parent
        if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK):
            _hold(folder / folders.LOCK_NAME, str(folder))
        meta = load_metadata(csv_path)
        source = str(metadata_path(csv_path))
        if meta.get("complete") is not True:  # stopped: the rest of its points are not here
            spec_path = meta.get("spec_path") if _one_line(meta.get("spec_path")) else "SPEC"
            raise DataError(
                f"{source}: the sweep is not complete (it was stopped before its end), and a "
                "profile decided from part of it would not be what its spec measures; finish "
                f"it with `softcuda init --resume --spec {spec_path} --results "
                f"{folder.parent}` first"
            )
        frame = load_csvs([csv_path])
        missing = [
            k
            for k in ("machine", "device_hash", "hash_string", "backends", "spec")
            if k not in meta
        ]
        if missing:
            raise DataError(
                f"{csv_path}: its metadata lacks {', '.join(missing)}; it was not "
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
        spec_path = csv_path
    if not (isinstance(elapsed, (int, float)) and math.isfinite(elapsed) and elapsed >= 0):
        elapsed = None
    written = _write(
        frame,
        machine,
        spec,
        spec_path,
        Path(csv_path),
        elapsed,
        target,
        results_dir,
        meta.get("launch"),  # build_profile keeps it only where it is a measured time
        meta.get("switch"),  # likewise: only figures the [bus] switch_us line can hold
    )
    _report(*written, frame, spec.metric, target)
    click.echo(
        f"wrote {target} from {csv_path}: {len(frame):,} rows, each point's steadiest attempt "
        "(nothing measured)"
    )


def _one_line(text) -> bool:
    """Whether ``text`` can stand as one line of a message or of the profile."""
    return isinstance(text, str) and bool(text) and text.isprintable()


def _write(
    frame,
    machine,
    spec,
    spec_path,
    csv_path,
    elapsed_s,
    target: Path,
    results_dir,
    launch=None,
    switch=None,
):
    """Decide, archive a profile of another device at ``target`` and write the new one
    atomically: the common end of a sweep and of ``--from``.  Returns the profile and where the
    previous one was archived (None), for ``_report`` once the profile is written."""
    from softcuda.sweep.profile import (  # pandas: not at --help
        archive_if_foreign,
        build_profile,
        write_profile,
    )

    with library_errors():
        profile = build_profile(
            frame, machine, spec, spec_path, csv_path, elapsed_s, launch, switch
        )
        archived = archive_if_foreign(target, machine.device_hash, Path(results_dir))
        write_profile(profile, target)
    return profile, archived


def _report(profile, archived: Path | None, frame, metric: str, target: Path) -> None:
    """Print the decisions of a written profile, and where the one it replaced went."""
    from softcuda.sweep.profile import UNREADABLE  # pandas: not at --help

    _print_decisions(profile, frame, metric)
    if archived is not None:
        why = (
            "could not be read" if archived.parent.name == UNREADABLE else "profiled another device"
        )
        click.echo(f"the previous {target} {why}: archived as {archived}")
    for note in calibration_notes(profile, target):
        click.echo(note)


CALIBRATIONS = (
    ("launch", "the host's time to issue a GPU step", "each CUDA step at its kernel alone"),
    (
        "switch",
        "what handing a value from the GPU to a CPU step costs beyond its copy",
        "a hand-off at its copy alone",
    ),
)
"""The [bus] figures a CUDA sweep measures at its end: module, what it measures, and how the
placement model prices without it."""


def calibration_notes(profile, target) -> list[str]:
    """One note per [bus] figure a CUDA profile lacks (a sweep whose calibration failed, or one
    from before it measured it): what the model does without it, and the command that adds it."""
    if profile.device_type != "cuda":
        return []
    return [
        f"note: {target} has no [bus] {module}_us (the sweep did not measure {measured}), so "
        f"the placement model prices {priced}; measure it here with "
        f"`python -m softcuda.sweep.{module} {target}`"
        for module, measured, priced in CALIBRATIONS
        if f"{module}_us" not in profile.bus
    ]


def raise_missing_default(spec_path: str) -> None:
    raise SpecError(
        f"{spec_path}: not found; run from the softcuda checkout or pass --spec "
        "with a sweep spec (see sweeps/ in the repository)"
    )


def _print_decisions(profile, frame, metric: str) -> None:
    from softcuda.timings.stats import curves  # pandas: not at --help

    unstable: dict[str, int] = {}
    if len(frame):
        for op, flags in curves(frame, metric).groupby("op")["unstable"]:  # bus rows drop out
            unstable[op] = int(flags.sum())
    click.echo("")
    click.echo(f"decisions ({metric}):")
    width = max(8, *(len(op) for op in profile.rules))  # a variant's name is longer than an op's
    for op in sorted(profile.rules):
        if op not in unstable:
            continue
        for rule in profile.rules[op]:
            click.echo(f"  {op:<{width}} {rule.bucket:<24} {rule.backend:<17} {rule.note[0]}")
        if unstable.get(op):
            click.echo(
                f"  {'':<{width}} {unstable[op]} unstable point(s): large spread, too short, or "
                "measured while the host was off its best speed; see `softcuda plot --summary`"
            )
    if profile.costs:
        curves = sum(len(by_backend) for by_backend in profile.costs.values())
        click.echo(
            f"costs: resident medians of {curves} (op, backend) curves of {len(profile.costs)} "
            "ops, for whole-graph placement"
        )
    if profile.bus:
        click.echo("bus: " + ", ".join(f"{k} {v}" for k, v in profile.bus.items()))
