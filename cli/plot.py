"""``softcuda plot CSV...``: the crossover figures (and, on request, the crossover table).

Thin over ``softcuda.analysis.report``: load and validate the CSVs, build the report (devices
split, never averaged), write the figures, print one line per file written.  The analysis
modules load pandas, so they are imported when the command runs, not for ``softcuda --help``.
"""

from __future__ import annotations

from pathlib import Path

import click

from ._common import InputError, library_errors


def _formats(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    from softcuda.analysis import FORMATS  # pandas: not at --help

    formats = tuple(dict.fromkeys(f.strip().lower() for f in value.split(",") if f.strip()))
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise click.BadParameter(
            f"{value!r}: expected a comma-separated list of {', '.join(FORMATS)}"
        )
    return formats


@click.command("plot")
@click.argument("csvs", nargs=-1, type=click.Path(dir_okay=False))
@click.option(
    "--chains",
    "chains_csv",
    type=click.Path(dir_okay=False),
    default=None,
    help="The placement benchmark's raw CSV (benchmarks/placement.py): draw the crossover of a "
    "chain of k ops against k, measured, beside the model of --config.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="A profile with [costs] and [bus]: draw the chain crossover its model predicts (with "
    "or without --chains).",
)
@click.option("--op", "ops", multiple=True, help="Only this op (repeatable; default: every op).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default="results/figures",
    show_default=True,
    help="Folder for the figures (created as needed).",
)
@click.option(
    "--format",
    "formats",
    default="png",
    show_default=True,
    callback=_formats,
    help="Comma-separated file formats: png, pdf, svg.",
)
@click.option("--summary", is_flag=True, help="Print the Markdown crossover table on stdout.")
@click.option(
    "--summary-out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the Markdown crossover table to this file.",
)
def plot_command(
    csvs: tuple[str, ...],
    ops: tuple[str, ...],
    out_dir: str,
    formats: tuple[str, ...],
    summary: bool,
    summary_out: str | None,
    chains_csv: str | None,
    config_path: str | None,
) -> None:
    """Draw the crossover figures from raw sweep CSVs: per op, time vs size, GPU speedup and
    where the CUDA time goes (h2d / kernel / d2h); once, the bus bandwidth.

    Several devices overlay in one figure, told apart by marker; they are never averaged.
    Crossovers (best CPU vs best CUDA backend) come with 95% bootstrap intervals. Titles carry
    the date each sweep started (its .meta.json, else its file name), not today's."""
    if chains_csv or config_path:
        _chains(chains_csv, config_path, out_dir, formats)
        if not csvs:
            return
    elif not csvs:
        raise click.UsageError("give sweep CSVs, or --chains / --config for the chain figure")
    from softcuda.analysis import (
        build_report,
        load_csvs,
        summary_markdown,
        write_figures,
    )

    with library_errors():
        frame = load_csvs(csvs)
        report = build_report(frame, ops=ops or None)
        # when the sweeps ran, from their metadata or file names: a figure of old data drawn
        # today must not pass for today's measurement
        date = _dates(csvs)
        for item in write_figures(report, out_dir, formats, date=date):
            click.echo(f"wrote {item}" if isinstance(item, Path) else f"note: {item}")
    if summary or summary_out:
        text = summary_markdown(report)
        if summary:
            click.echo(text, nl=False)
        if summary_out:
            try:
                Path(summary_out).write_text(text, encoding="utf-8")
            except OSError as exc:
                raise InputError(f"{summary_out}: cannot be written ({exc.strerror}).") from None
            click.echo(f"wrote {summary_out}")


def _dates(csvs) -> str:
    """The sweeps' dates in the order a figure names their devices (by name): an H200 sweep of
    one day and an H100 sweep of a later one read "NVIDIA H100 ..., NVIDIA H200 | <later>,
    <earlier>", not the dates sorted apart from the names they belong to."""
    import pandas as pd

    from softcuda.analysis import sweep_date

    pairs = set()
    for path in csvs:
        device = str(pd.read_csv(path, usecols=["device"], nrows=1)["device"].iloc[0])
        pairs.add((device, sweep_date(path) or "date unknown"))
    return ", ".join(date for _, date in sorted(pairs))


def _chains(chains_csv: str | None, config_path: str | None, out_dir: str, formats) -> None:
    """The chain crossover figure and its table: the model of ``config_path``, the measurements
    of ``chains_csv``, either or both."""
    import pandas as pd

    from softcuda.analysis import (
        chain_figure,
        measured_crossovers,
        model_crossovers,
        save_figure,
    )
    from softcuda.config import load_config

    with library_errors():
        model = measured = None
        names = []
        if config_path:
            config = load_config(config_path)
            if not config.has_costs or config.device_type != "cuda":
                raise InputError(
                    f"{config_path}: the chain model needs a CUDA profile with [costs] and "
                    "[bus]; `softcuda init --from CSV` adds the costs to a profile"
                )
            model = model_crossovers(config)
            names.append(f"model of {config.made_on}")
        if chains_csv:
            try:
                raw = pd.read_csv(chains_csv)
                measured = measured_crossovers(raw)
            except (ValueError, pd.errors.ParserError) as exc:
                raise InputError(f"{chains_csv}: {str(exc).splitlines()[0]}") from None
            names.append(f"measured ({Path(chains_csv).name})")
        fig = chain_figure(
            model, measured, "chain of k ops, all-CUDA vs all-CPU: " + "; ".join(names)
        )
        for path in save_figure(fig, out_dir, "chain-crossover", formats):
            click.echo(f"wrote {path}")
    for frame, what in ((model, "model"), (measured, "measured")):
        if frame is None:
            continue
        click.echo(f"chain crossover, {what} (elements from which all-CUDA is faster):")
        for row in frame.itertuples():
            start = "never" if pd.isna(row[3]) else f"{row[3]:,.0f}"
            until = "" if pd.isna(row[4]) else f", CPU again from {row[4]:,.0f}"
            click.echo(f"  {row.family:<7} k={row.k:<3} {start}{until}")
