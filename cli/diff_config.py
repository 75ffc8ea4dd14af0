"""``softcuda diff-config A B``: what moved between two profiles (A old, B new).

Exit 0 when every (op, bucket, backend) assignment is the same (device fields, notes, [bus] and
[sweep] values may still differ, and are shown), 1 when the assignments differ, 2 when a file
cannot be read or parsed.
"""

from __future__ import annotations

import json

import click

from softcuda.config import load_config

from ._common import EXIT_FAILED, library_errors


@click.command("diff-config")
@click.argument("a", type=click.Path(dir_okay=False))
@click.argument("b", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON on stdout.")
def diff_config_command(a: str, b: str, as_json: bool) -> None:
    """Compare two CONFIG.soft profiles, A (old) and B (new): device fields, buckets and
    backends added, removed or changed per op, and how far each threshold moved.

    Exits 0 when the assignments are the same, 1 when they differ."""
    from softcuda.analysis import diff_configs, format_diff  # pandas: not at --help

    with library_errors():
        diff = diff_configs(load_config(a), load_config(b))
    if as_json:
        click.echo(json.dumps(diff.to_dict(), indent=2))
    else:
        click.echo(format_diff(diff, a, b), nl=False)
    if not diff.same_assignments:
        raise SystemExit(EXIT_FAILED)
