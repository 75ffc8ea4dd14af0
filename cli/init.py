"""``softcuda init``: the benchmark sweep that measures this machine and writes CONFIG.soft.

Options and printing over ``softcuda.sweep.run`` (and ``decide_again`` for ``--from``): the
sweep's events are shown as they come, its result as the decisions and notes at the end.
``softcuda.sweep`` loads pandas only when a sweep runs, so ``softcuda --help`` does not pay
for it."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import click

from softcuda import sweep
from softcuda.errors import SpecError

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
    if from_csv is not None:
        if resume:
            raise click.UsageError(
                "--resume and --from exclude each other: --from measures nothing"
            )
        _decide_again(from_csv, Path(out_path), Path(results_dir))
        return
    shown = Shown()
    with library_errors() as said:
        if not Path(spec_path).exists() and spec_path == "sweeps/default.yaml":
            raise_missing_default(spec_path)
        spec = sweep.load_spec(spec_path)
        shown.said = said
        try:
            result = sweep.run(
                spec,
                spec_path,
                out=out_path,
                results_dir=results_dir,
                device_index=device_index,
                resume=resume,
                on_event=shown.show,
            )
        finally:  # a sweep that raised leaves no bar open over its error
            shown.close()
    again = f"softcuda init --resume --spec {spec_path} --results {results_dir} --out {out_path}"
    if device_index:
        again += f" --device {device_index}"
    unwritten = (  # once the metadata says the sweep is complete
        f"the sweep is complete in {result.csv_path}, but {out_path} was not written; write it "
        f"with `softcuda init --from {result.csv_path} --out {out_path} --results {results_dir}`"
    )
    if result.stopped is not None:
        _stopped(result, shown.measuring, out_path, again, unwritten)
    _report(result.written)  # written: a Ctrl-C now says nothing of it
    _notes(result)
    click.echo(
        f"wrote {out_path} ({result.written.rows} raw rows in {result.csv_path}, "
        f"metadata {result.meta_path}) in {result.elapsed_s:.0f} s"
    )


class Shown:
    """The sweep's events as init shows them: the header and the settling on stdout, the
    progress on stderr (a bar on a terminal, else ``LogProgress``'s lines)."""

    def __init__(self) -> None:
        self.bar = None
        self.measuring = "the first point"  # the point last shown, for the errors of a stop
        self.said = None

    def show(self, event: sweep.Event) -> None:
        if self.said is not None:  # what the library warned of so far, as it happens
            self.said.flush()
        if isinstance(event, sweep.SweepStarted):
            _header(event)
        elif isinstance(event, sweep.KernelsCompiled):
            click.echo(f"compiled softcuda's CUDA kernels in {event.seconds:.1f} s\n")
        elif isinstance(event, sweep.SettlingStarted):
            click.echo(
                f"settling: timing fixed workloads until this machine runs them at a steady "
                f"speed (at most {event.limit_s:g} s)"
            )
        elif isinstance(event, sweep.SettlingDone):
            click.echo(f"  {event.summary}\n")
        elif isinstance(event, sweep.MeasuringStarted):
            self.bar = _progress(event.points).__enter__()
        elif isinstance(event, sweep.PointStarted):
            self.measuring = _label(event)
            self.bar.length = event.total
            self.bar.update(event.index - self.bar.pos, self.measuring)
        elif isinstance(event, sweep.MeasuringDone):
            self.bar.update(self.bar.length - self.bar.pos, "done")
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _header(event) -> None:
    spec, machine = event.spec, event.machine
    click.echo(f"softcuda init — sweep '{spec.name}' ({event.spec_path}), metric {spec.metric}")
    for key, value in machine.fields.items():
        click.echo(f"  {key:<18} {value}")
    click.echo(f"  {'device_hash':<18} {machine.device_hash}")
    click.echo(f"  {'hash over':<18} {machine.hash_string}")
    for backend, reason in machine.unavailable.items():
        click.echo(f"  skipped {backend}: {reason}")
    click.echo(f"  backends           {', '.join(event.backends)}")
    if event.load_average is not None:
        click.echo(f"  load average       {event.load_average:g} (1 min)")
        if event.load_average >= BUSY_LOAD:
            click.echo(
                f"warning: the load average is {event.load_average:g}: other work is running "
                "on this machine, and the CPU timings (settling cannot tell) will include it",
                err=True,
            )
    click.echo(f"  raw rows           {event.csv_path}")
    click.echo("")


def _progress(points: int):
    if sys.stderr.isatty():
        return click.progressbar(
            length=points,
            label="measuring",
            show_eta=True,
            show_pos=True,
            item_show_func=lambda item: item,
            file=sys.stderr,
            width=24,
        )
    return LogProgress(points)  # a log: click would print its label once and nothing till the end


def _label(point) -> str:
    if point.op == "bus":
        return f"bus {point.size} B, both ways"
    if point.attempt:
        return f"{point.op} {point.size} again (attempt {point.attempt})"
    # every backend of a point is measured together, interleaved
    return f"{point.op} {point.size} on {', '.join(point.backends)}"


def _stopped(result, measuring: str, out_path: str, again: str, unwritten: str) -> None:
    """Say why the sweep stopped and how to go on, and exit: 130 for Ctrl-C, 2 for a profile
    that could not be decided or written, else 1."""
    stopped, csv, rows = result.stopped, result.csv_path, result.rows
    if stopped.why == "unwritten":
        raise InputError(f"{stopped.message.rstrip('.')}; {unwritten}")
    if stopped.why == "interrupted":
        if not stopped.started:  # stopped while settling: no file was started
            click.echo(
                f"\ninterrupted before anything was measured: nothing was written and {out_path} "
                "was not touched; run the same command again to start over",
                err=True,
            )
        elif stopped.complete:  # --resume finds no unfinished sweep
            click.echo(f"\ninterrupted: {unwritten}", err=True)
        else:
            click.echo(
                f"\ninterrupted: {rows} rows are kept in {csv}; "
                f"{out_path} was not touched; continue with `{again}`",
                err=True,
            )
        raise SystemExit(EXIT_INTERRUPTED)
    kept = f"the {rows} rows measured before are kept in {csv}"
    message = {
        "compile": f"{stopped.message}; nothing was measured and {out_path} was not touched",
        "budget": f"{stopped.message}; the rows are kept in {csv}; continue with `{again}`",
        "disk": f"the sweep stopped: {stopped.message}; {kept}; continue with `{again}` once "
        "it can be written",
        "memory": f"the sweep stopped at {measuring}: {stopped.message}; {kept}; it can go on "
        f"(`{again}`) where more memory is free",
    }[stopped.why]
    click.echo(f"error: {message}", err=True)
    raise SystemExit(EXIT_FAILED)


def _notes(result) -> None:
    """The notes of a finished sweep: what failed, was skipped, cut, left unrefined or
    measured again."""
    if result.launch_error:
        click.echo(f"note: the launch calibration failed ({result.launch_error})")
    if result.switch_error:
        click.echo(f"note: the hand-off calibration failed ({result.switch_error})")
    for skipped in result.skipped:
        click.echo(
            f"note: {skipped.backend} was not timed at {skipped.op} sizes above "
            f"{skipped.above} (median {skipped.median_s:.3g} s above max_point_s)"
        )
    if result.cut:
        click.echo(
            f"note: the time budget of {result.spec.time_budget_s:g} s ran out after every op's "
            f"sizes were measured: {result.cut} point(s) were not measured again or scanned, "
            "and the profile is decided from what was measured"
        )
    for op in result.unrefined:
        click.echo(
            f"note: a boundary of {op} is not bracketed within 10% by measured sizes (its "
            "rule's note gives the sizes it lies between); `softcuda init --resume` cannot "
            "add sizes to a finished sweep, a new one can"
        )
    if result.attempts_again:
        click.echo(
            f"note: {result.measured_again} point(s) were measured again "
            f"({result.attempts_again} attempt(s) in all) because the host ran off its best "
            "speed while they were measured; the rules read each point's steadiest attempt, "
            "the costs each backend's fastest, and every attempt's rows are kept"
            + (
                f"; {result.waited_s:.1f} s went to waiting for the host's best speed first"
                if result.waited_s
                else ""
            )
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


def _decide_again(csv_path: str, target: Path, results_dir: Path) -> None:
    with library_errors():
        written = sweep.decide_again(csv_path, target, results_dir)
    _report(written)
    click.echo(
        f"wrote {target} from {csv_path}: {written.rows:,} rows (nothing measured; the rules "
        "read each point's steadiest attempt, the costs each backend's fastest)"
    )


def _report(written) -> None:
    """Print the decisions of a written profile, and where the one it replaced went."""
    _print_decisions(written.profile, written.unstable, written.metric)
    if written.archived is not None:
        why = "could not be read" if written.archived_unreadable else "profiled another device"
        click.echo(f"the previous {written.target} {why}: archived as {written.archived}")
    for note in calibration_notes(written.profile, written.target):
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


def _print_decisions(profile, unstable: dict[str, int], metric: str) -> None:
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
