"""``softcuda compare-sweeps A B``: do two sweeps of one spec choose the same backends, and do
their medians repeat?

Thin over ``softcuda.analysis.compare``: load both raw CSVs (every attempt), compare them under
one metric, print the report (or ``--json``).  Exit 0 when they count as stable by the first
verdict (identical bucket assignments and at least 90% of the medians, each counted once, within
10%), 1 when not, 2 when a CSV cannot be read, the two have nothing in common to compare, or they
come from different devices: two devices' medians differ by the machine, not by the
instrument, so such a pair is compared only with ``--across-devices``, and the report then says
so first.  The restated verdict is reported beside the first and does not set the exit status
(it is "not applicable" to a CPU-only pair, which has no kernel-only medians).  The analysis
loads pandas, so it is imported when the command runs, not for ``softcuda --help``.
"""

from __future__ import annotations

import json

import click

from softcuda.errors import DataError
from softcuda.timings import DEFAULT_METRIC, METRICS, PROBE_BACKEND

from ._common import EXIT_FAILED, library_errors


@click.command("compare-sweeps")
@click.argument("a", type=click.Path(dir_okay=False))
@click.argument("b", type=click.Path(dir_okay=False))
@click.option(
    "--metric",
    type=click.Choice(list(METRICS)),
    default=DEFAULT_METRIC,
    show_default=True,
    help="Which curve decides the buckets (as a sweep spec's metric).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON on stdout.")
@click.option(
    "--across-devices",
    is_flag=True,
    help="Compare sweeps from different devices (refused otherwise); the report says so first.",
)
def compare_sweeps_command(
    a: str, b: str, metric: str, as_json: bool, across_devices: bool
) -> None:
    """Compare two raw sweep CSVs (.csv or .csv.gz) of one spec and one device, A then B: per
    op the bucket assignments and how far each boundary moved, how many medians agree within
    10%, and the host's speed while each point was measured.

    Exits 0 when they count as stable, 1 when the assignments differ or fewer than 90% of
    the medians agree, 2 when a CSV cannot be read, the two measured nothing in common, or
    they come from different devices (without --across-devices)."""
    from softcuda.analysis import compare_sweeps, format_comparison, load_csvs

    with library_errors():
        frames = [load_csvs([path], attempts="all") for path in (a, b)]
        comparison = compare_sweeps(frames, metric, names=(a, b), across_devices=across_devices)
        if comparison.table.empty:  # not two sweeps of one spec: an input error, not a verdict
            dtypes = [sorted(set(f.loc[f["backend"] != PROBE_BACKEND, "dtype"])) for f in frames]
            raise DataError(
                f"{a} and {b} have no (op, dtype, backend, size) in common (dtypes "
                f"{'/'.join(dtypes[0]) or 'none'} and {'/'.join(dtypes[1]) or 'none'}), so "
                "there is nothing to compare: give two sweeps of one spec"
            )
    metas = [_metadata(path) for path in (a, b)]
    unfinished = [path for path, meta in zip((a, b), metas) if meta.get("complete") is False]
    other_spec = "spec" in metas[0] and "spec" in metas[1] and metas[0]["spec"] != metas[1]["spec"]
    if as_json:
        data = {
            "a": a,
            "b": b,
            "unfinished": unfinished,
            "same_spec": not other_spec,
            **comparison.to_dict(),
        }
        click.echo(json.dumps(data, indent=2))
    else:
        if not comparison.same_device:  # only with --across-devices: said before anything
            one, two = comparison.devices
            click.echo(f"note: {a} and {b} are from different devices: {one}, and {two}")
        click.echo(f"comparing {a} and {b}")
        for path in unfinished:
            click.echo(
                f"note: {path} is an unfinished sweep (its metadata says so): the points it "
                "would have measured again and the sizes it would have added are missing"
            )
        if other_spec:
            click.echo(
                "note: the two sweeps ran different specs (their metadata's spec differ): "
                "sizes and settings that one lacks are not compared, and may move boundaries"
            )
        click.echo(format_comparison(comparison), nl=False)
    if not comparison.stable:
        raise SystemExit(EXIT_FAILED)


def _metadata(csv_path: str) -> dict:
    """The metadata beside ``csv_path``, or {} where there is none to read: the comparison
    needs only the rows, and the notes (an unfinished sweep, another spec) only what is
    there."""
    from softcuda.analysis import load_metadata

    try:
        return load_metadata(csv_path)
    except DataError:
        return {}
