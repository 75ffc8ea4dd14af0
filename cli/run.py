"""``softcuda run SCRIPT``: compile a graph script's outputs, run them, show the plan."""

from __future__ import annotations

import json
from typing import Any

import click
import numpy as np

from softcuda import PLACEMENTS, Plan, compile, format_seconds, load_graph

from ._common import config_option, config_source, library_errors, resolve_config


@click.command("run")
@click.argument("script", type=click.Path(dir_okay=False))
@config_option
@click.option(
    "--dry-run",
    "--explain",
    "dry_run",
    is_flag=True,
    help="Place and predict, print the plan and stop: nothing runs, no memory is taken, and "
    "the profile's backends need not be available here (see what a graph would do on the "
    "profiled machine, from a machine without its GPU).",
)
@click.option(
    "--placement",
    type=click.Choice(PLACEMENTS),
    default=None,
    help="How nodes get their device: graph (least predicted time for the whole plan; the "
    "default where the profile has [costs]), per-op (each node's own rule; the default "
    "without costs), cpu or cuda (everything on one device).",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Timed runs per node; the table shows medians.",
)
@click.option(
    "--host-memory",
    type=click.Choice(["pageable", "pinned"]),
    default=None,
    help="Host memory for the plan's host buffers (default: the config's [pool]).",
)
@click.option(
    "--no-fuse",
    "no_fuse",
    is_flag=True,
    help="One kernel per node: no fused groups (compare against the default, fused plan).",
)
@click.option(
    "--tune",
    is_flag=True,
    help="Time the placement's plan against the one-device and per-op plans and keep the "
    'fastest; the choice is cached for the next run (docs/design.md, "Tuning").',
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan, times and outputs as JSON.")
def run_command(
    script: str,
    config_path: str | None,
    dry_run: bool,
    placement: str | None,
    repeat: int,
    host_memory: str | None,
    no_fuse: bool,
    tune: bool,
    as_json: bool,
) -> None:
    """Evaluate the graph that SCRIPT's build() returns and show the plan: per node op, shape,
    size, bucket, backend, device and time; baked transfers; pool use; the outputs.  Where the
    profile has costs, each row shows the predicted time beside the measured one."""
    cfg = resolve_config(config_path)
    with library_errors():
        outputs = load_graph(script)
        plan = compile(
            outputs,
            config=cfg,
            host_memory=host_memory,
            allocate=not dry_run,
            placement=placement,
            fuse=not no_fuse,
            tune=tune and not dry_run,
        )
        if dry_run:
            _emit_plan(plan, cfg.path, config_source(cfg), None, None, as_json)
            return
        values = plan.evaluate()
        timings = plan.profile(repeat=repeat, warmup=1)
    _emit_plan(plan, cfg.path, config_source(cfg), timings, values, as_json)


def _named(values: Any) -> list[tuple[str, np.ndarray]]:
    if isinstance(values, dict):
        return list(values.items())
    if isinstance(values, tuple):
        return [(f"output[{i}]", v) for i, v in enumerate(values)]
    return [("output", values)]


def _finite_or_none(x: float) -> float | None:
    """Strict JSON has no NaN or infinity: a value that is not finite is written as null (a
    head value; a mean past float64's range, of finite values near its maximum)."""
    return float(x) if np.isfinite(x) else None


def _summary(value: np.ndarray) -> dict[str, Any]:
    """Shape, dtype, statistics of the finite values, the count of the others and the first
    values as they are (NaN and infinities included: the JSON writes those as null)."""
    flat = np.asarray(value).ravel()
    finite = flat[np.isfinite(flat)]
    return {
        "shape": list(np.shape(value)),
        "dtype": str(np.asarray(value).dtype),
        "min": float(finite.min()) if finite.size else None,
        "mean": _finite_or_none(np.mean(finite, dtype=np.float64)) if finite.size else None,
        "max": float(finite.max()) if finite.size else None,
        "not_finite": int(flat.size - finite.size),
        "head": [float(x) for x in flat[:4]],
    }


def _emit_plan(plan: Plan, path, why: str, timings, values, as_json: bool) -> None:
    rows = plan.rows()
    if timings is not None:
        for row, t in zip(rows, timings):
            row["median_s"] = t["median_s"]
    outs = [(name, _summary(v)) for name, v in _named(values)] if values is not None else []
    if as_json:
        _emit_json(plan, path, why, rows, outs)
        return
    click.echo(f"config: {path} ({why})")
    click.echo(plan.explain())
    if timings is not None:
        _print_times(plan, rows)
    for name, s in outs:
        _print_output(name, s)


def _emit_json(plan: Plan, path, why: str, rows: list[dict], outs: list) -> None:
    stats = plan.stats
    pool = (
        {
            "host_arena_bytes": stats.host_arena_bytes,
            "device_arena_bytes": stats.device_arena_bytes,
            "planned_bytes": stats.planned_bytes,
            "leaf_bytes": stats.leaf_bytes,
            "host_memory": plan.host_memory,
        }
        if stats
        else {}
    )
    strict = {n: {**s, "head": [_finite_or_none(x) for x in s["head"]]} for n, s in outs}
    click.echo(
        json.dumps(
            {
                "config": str(path),
                "source": why,
                "placement": plan.placement,
                "predicted_s": None
                if plan.predicted_s is None
                else _finite_or_none(plan.predicted_s),
                "plan": rows,
                "pool": pool,
                "outputs": strict,
            },
            indent=2,
            allow_nan=False,
        )
    )


def _print_times(plan: Plan, rows: list[dict]) -> None:
    """The timed nodes' medians added up, beside the plan's predicted total where the profile
    prices it (each node's own median is explain()'s measured column, above)."""
    total = sum(
        row["median_s"]
        for row in rows
        if row["op"] not in ("leaf", "const") and row["backend"] != "view"
    )
    line = f"\ntime per node: the measured column above (medians); in all {format_seconds(total)}"
    predicted = plan.predicted_s
    if predicted is not None:
        ratio = total / predicted if predicted > 0 else float("nan")
        line += f", predicted {format_seconds(predicted)} (measured/predicted {ratio:.2f})"
    click.echo(line)


def _print_output(name: str, s: dict) -> None:
    """One output in a line: shape, dtype, statistics and its first values."""
    shape = "x".join(map(str, s["shape"])) or "scalar"
    if not s["head"]:
        click.echo(f"{name}: {shape} {s['dtype']} (empty)")
        return
    # as numpy prints them: nan, inf, -inf (Python's format writes the same words)
    head = ", ".join(f"{x:.4g}" for x in s["head"])
    if len(s["head"]) < int(np.prod(s["shape"] or [1])):
        head += ", …"
    others = f"  ({s['not_finite']} not finite)" if s["not_finite"] else ""
    if s["min"] is None:  # nothing finite: no statistics
        click.echo(f"{name}: {shape} {s['dtype']}  [{head}]{others}")
        return
    mean = "beyond float64" if s["mean"] is None else f"{s['mean']:.4g}"
    click.echo(
        f"{name}: {shape} {s['dtype']}  min {s['min']:.4g}  mean {mean}  "
        f"max {s['max']:.4g}  [{head}]{others}"
    )
