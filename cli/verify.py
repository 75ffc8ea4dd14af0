"""``softcuda verify``: is this CONFIG.soft valid, meant for this machine, and are its backends
available and numerically right here?  The backends its [costs] name count as much as its
rules': a whole-graph planner may run any of them."""

from __future__ import annotations

import json

import click
import numpy as np

from softcuda import backends, format_bytes
from softcuda.check import check_op, shapes_for
from softcuda.config import PORTABLE_HASH
from softcuda.costs import CostModel
from softcuda.device import current_hash, host_memory_bytes
from softcuda.ops import OPS, base_op, work_power

from ._common import EXIT_FAILED, config_option, config_source, library_errors, resolve_config

# The self-check runs each (op, backend) pair once, at a size inside the pair's first bucket
# when that is modest, else at the cap: it checks the backend's arithmetic, not its speed.
_CHECK_SIZE = {"matmul": (67, 192), "elementwise": (1001, 1 << 16), "reduction": (1001, 1 << 16)}


# cpu_threads runs on one thread below about a mebibyte: checked at 2^19 elements, so that its
# pieces and the workers that run them are what is checked.
_THREADED = 1 << 19


def _check_size(op: str, backend: str, lo: int, hi: int | None) -> int:
    """The size ``op`` (or a variant, ``ops.VARIANTS``) is checked at on ``backend``: a
    variant at its op's work, in its own size metric (sum_rows' n is the square root of its
    elements)."""
    kind = OPS[base_op(op)].kind
    start, cap = _CHECK_SIZE[kind]
    if backend == "cpu_threads" and kind != "matmul":
        start = cap = _THREADED
    ratio = work_power(base_op(op)) / work_power(op)
    start, cap = round(start**ratio), round(cap**ratio)
    size = min(max(lo, start), cap)
    if hi is not None and size >= hi:
        size = max(hi - 1, 1)
    return max(size, 1)


@click.command("verify")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option(
    "--recheck",
    is_flag=True,
    help="Also re-time the sizes just outside every "
    "bucket boundary's recorded interval and report drift (a stale profile the "
    "device hash cannot see).",
)
def verify_command(config_path: str | None, as_json: bool, recheck: bool) -> None:
    """Check a CONFIG.soft: schema, device hash, backend availability, and a numerical
    self-check of every (op, backend) pair it uses against float64 numpy."""
    cfg = resolve_config(config_path)
    report: dict = {"config": cfg.path, "source": config_source(cfg), "ok": True}

    report["device_hash"] = _device_hash(cfg)
    report["ok"] &= report["device_hash"]["ok"]
    # A GPU profile should be measured for every op: one left to DEFAULT.soft runs on the CPU
    # whatever its size, and bounces its data over the bus between GPU neighbours.
    report["unmeasured"] = cfg.unmeasured_ops() if cfg.device_type == "cuda" else []
    report["settings"] = _settings(cfg)
    report["ok"] &= all(row["ok"] for row in report["settings"])
    report["costs"] = _costs(cfg)
    report["ok"] &= report["costs"]["ok"]

    checks = _checks(cfg, report["settings"])
    report["ok"] &= all(row["ok"] for row in checks)
    report["checks"] = checks
    if recheck:
        report["recheck"] = _recheck(cfg, report)

    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print_report(report)
    if not report["ok"]:
        raise SystemExit(EXIT_FAILED)


def _device_hash(cfg) -> dict:
    """The profile's device hash against this machine's."""
    recorded = cfg.device_hash
    if recorded == PORTABLE_HASH:
        return {
            "recorded": recorded,
            "here": None,
            "ok": True,
            "note": "portable profile (CPU backends only)",
        }
    here, note = current_hash(cfg.device_type, int(cfg.device.get("device_index", 0)))
    return {
        "recorded": recorded,
        "here": here,
        "ok": here == recorded,
        "note": note,
    }


def _checks(cfg, settings: list[dict]) -> list[dict]:
    """One row per (op, backend) the profile uses (its rules and its [costs]): available here,
    and within tolerance of float64 numpy at a size it is used at."""
    pairs: dict[tuple[str, str], tuple[int, int | None, int]] = {}
    for op, rules in sorted(cfg.rules.items()):
        for rule in rules:
            pairs.setdefault((op, rule.backend), (rule.lo, rule.hi, rule.line))
    for op, curves in sorted(cfg.costs.items()):
        for backend, curve in curves.items():  # checked from its smallest measured size
            pairs.setdefault((op, backend), (curve.sizes[0], None, curve.line))
    # A backend whose [device] setting cannot run here (a thread count from a larger machine)
    # is not run with another one: its settings row has already failed, naming the line.
    unusable = {
        row["backend"]: f"not run: {row['setting']} (line {row['line']}) cannot be used here"
        for row in settings
        if not row["ok"] and "backend" in row
    }
    checks = []
    for (op, backend), (lo, hi, line) in sorted(pairs.items(), key=lambda p: (p[0][0], p[1][2])):
        ok, reason = backends.available(backend)
        if ok and backend in unusable:
            ok, reason = False, unusable[backend]
        row = {
            "op": op,
            "backend": backend,
            "line": line,
            "available": ok,
            "reason": reason,
            "size": None,
            "error": None,
            "tolerance": None,
            "ok": ok,
        }
        if ok:
            size = _check_size(op, backend, lo, hi)
            with library_errors():
                result = check_op(
                    op,
                    backend,
                    shapes_for(op, size),
                    dtype=np.float32,
                    seed=size,
                    device=cfg.device,
                )
            row.update(size=size, error=result.error, tolerance=result.tolerance, ok=result.ok)
        checks.append(row)
    return checks


def _costs(cfg) -> dict:
    """Whether [costs] serves a whole-graph planner: present where the profile's rules were
    measured on a GPU (absent, one line says how to add them without measuring), and holding
    every op its rules measured (one without costs would be placed blind: that fails)."""
    unmeasured = set(cfg.unmeasured_ops())
    measured = [op for op in sorted(cfg.rules) if op not in unmeasured]
    row = {
        "present": cfg.has_costs,
        "curves": sum(len(curves) for curves in cfg.costs.values()),
        "ops": len(cfg.costs),
        "missing": CostModel(cfg).missing(measured) if cfg.has_costs else [],
        "note": "",
    }
    row["ok"] = not row["missing"]
    if not cfg.has_costs and cfg.device_type == "cuda" and measured:
        csv = cfg.sweep.get("csv", "CSV")
        row["note"] = (
            "none: whole-graph placement needs them; `softcuda init --from "
            f"{csv} --out {cfg.path}` adds them from the sweep's raw CSV without measuring"
        )
    elif row["missing"]:
        row["note"] = (
            f"{', '.join(row['missing'])} measured in [ops] but without costs: whole-graph "
            "placement cannot price them; `softcuda init --from` the profile's sweep writes "
            "them all"
        )
    return row


def _settings(cfg) -> list[dict]:
    """The [pool] and [device] settings a plan would use here: pinned host memory needs CUDA,
    and a thread count must fit the cores this process may use."""
    rows = []
    if cfg.host_memory == "pinned":
        ok, reason = backends.cuda_available()
        rows.append(
            {
                "setting": "host_memory = pinned",
                "line": cfg.lines.get("pool.host_memory"),
                "ok": ok,
                "reason": "" if ok else f"pinned host memory needs CUDA, but {reason}",
            }
        )
    block, pool = cfg.block_size, cfg.pool.get("device", "cpu")
    total = host_memory_bytes()[0] if pool == "cpu" else _device_memory_bytes()
    where = "host" if pool == "cpu" else "device"
    if total:
        rows.append(
            {
                "setting": f"block_size = {block}",
                "line": cfg.lines.get("pool.block_size"),
                "ok": block <= total,
                "reason": f"more than the {format_bytes(total)} of {where} memory this machine has",
            }
        )
    for info in backends.BACKENDS.values():  # the settings backends take from [device]
        for keyword, key in info.settings:
            if key not in cfg.device or not backends.available(info.id)[0]:
                continue
            problem = backends.get(info.id).check_setting(keyword, int(cfg.device[key]))
            rows.append(
                {
                    "setting": f"{key} = {cfg.device[key]}",
                    "backend": info.id,
                    "line": cfg.lines.get(f"device.{key}"),
                    "ok": problem is None,
                    "reason": problem or "",
                }
            )
    return rows


def _device_memory_bytes() -> int:
    """The current CUDA device's memory in bytes; 0 where there is none to ask."""
    if not backends.cuda_available()[0]:
        return 0
    import cupy

    return int(cupy.cuda.runtime.memGetInfo()[1])


def _recheck(cfg, report: dict) -> list[dict]:
    """Re-time both sides of each boundary; drift fails the check."""
    from softcuda.sweep import recheck_profile as recheck  # (pandas): not at --help

    if not (report["device_hash"]["ok"] and all(c["available"] for c in report["checks"])):
        report["recheck_note"] = "skipped: the profile is not this machine's"
        return []
    with library_errors():
        skipped: list[str] = []
        rows = recheck(
            cfg,
            on_settled=lambda s: report.update(recheck_settle=s.summary()),
            on_skipped=skipped.append,
        )
    if skipped:
        report["recheck_skipped"] = skipped
    out = [
        {
            "op": r.op,
            "boundary": r.boundary,
            "interval": list(r.interval),
            "size": r.size,
            "expected": r.expected,
            "other": r.other,
            "expected_s": r.expected_s,
            "other_s": r.other_s,
            "ratio": r.ratio,
            "status": r.status,
            "attempts": [*r.earlier, r.status],
        }
        for r in rows
    ]
    report["ok"] &= all(r["status"] != "DRIFT" for r in out)
    return out


def _print_report(report: dict) -> None:
    click.echo(f"config:       {report['config']} ({report['source']})")
    dh = report["device_hash"]
    if dh["here"] is None and dh["ok"]:
        click.echo(f"device hash:  {dh['recorded']} — {dh['note']}")
    else:
        state = "matches this machine" if dh["ok"] else "DOES NOT MATCH this machine"
        click.echo(f"device hash:  {dh['recorded'][:16]}… {state} ({dh['note']})")
        if not dh["ok"]:
            click.echo("              re-run `softcuda init` to profile this machine", err=True)
    if report["unmeasured"]:
        click.echo(
            f"not measured: {', '.join(report['unmeasured'])} (DEFAULT.soft's CPU rules decide "
            "them; a sweep that covers every op measures them)"
        )
    costs = report["costs"]
    if costs["note"]:
        click.echo(f"costs:        {'' if costs['ok'] else 'FAILED: '}{costs['note']}")
    elif costs["present"]:
        click.echo(f"costs:        {costs['curves']} (op, backend) curves of {costs['ops']} ops")
    for row in report["settings"]:
        where = f"line {row['line']}" if row["line"] else "default"
        state = "ok" if row["ok"] else f"FAILED: {row['reason']}"
        click.echo(f"setting:      {row['setting']} ({where}) {state}")
    click.echo("")
    head = ("op", "backend", "line", "available", "checked at", "rel. error", "tolerance", "")
    rows = []
    for c in report["checks"]:
        rows.append(
            (
                c["op"],
                c["backend"],
                str(c["line"]),
                "yes" if c["available"] else "no",
                "" if c["size"] is None else f"size {c['size']}",
                "" if c["error"] is None else f"{c['error']:.2e}",
                "" if c["tolerance"] is None else f"{c['tolerance']:.1e}",
                "ok"
                if c["ok"]
                else ("FAILED" if c["available"] else f"UNAVAILABLE: {c['reason']}"),
            )
        )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    if "recheck" in report:
        click.echo("")
        if report.get("recheck_note"):
            click.echo(f"recheck: {report['recheck_note']}")
        if report.get("recheck_settle"):
            click.echo(f"recheck: {report['recheck_settle']}")
        if not report["recheck"] and not report.get("recheck_note"):
            measurable = report.get("recheck_settle") or report.get("recheck_skipped")
            if measurable:  # there were boundaries, but no side was measured
                click.echo("recheck: no side of any boundary could be measured on this machine")
            else:
                click.echo("recheck: the profile has no boundary between two backends")
        for sentence in report.get("recheck_skipped", ()):
            click.echo(f"recheck: {sentence}")
        for r in report["recheck"]:
            click.echo(
                f"recheck {r['op']:<8} boundary {r['boundary']:<9} interval "
                f"[{r['interval'][0]}, {r['interval'][1]}]  at {r['size']:<9} "
                f"{r['expected']} {r['expected_s']:.3g} s vs {r['other']} "
                f"{r['other_s']:.3g} s  {r['status']}"
                + (
                    f" (attempt {len(r['attempts'])}, after {', '.join(r['attempts'][:-1])})"
                    if len(r["attempts"]) > 1
                    else ""
                )
            )
    click.echo("")
    click.echo("verify: ok" if report["ok"] else "verify: FAILED")
