"""Where a sweep's rows live: the raw CSV, the metadata beside it, and reading both back to
resume an unfinished sweep.

A sweep writes ``<folder>/sweep-<spec>-<UTC time>[-n].csv`` (rows of ``softcuda.timings.schema``)
and ``sweep-<spec>-<time>[-n].meta.json`` beside it.  Invariants:

* a new sweep's CSV is created exclusively, so two sweeps started in the same second never
  share one (the second takes ``-2``, ``-3``, ...);
* each point's rows go to disk in one write, then fsync: a kill leaves whole points and at most
  one cut-off line, which ``drop_torn_point`` removes with the rest of its point;
* the metadata is replaced atomically (temporary file, then rename); it says whether the sweep
  is ``complete``;
* a resumed sweep continues the newest unfinished sweep of its spec name on its device, and
  only where its spec measures the same way (``spec_changes``; RESUMABLE_CHANGES may differ);
* one sweep at a time writes to a device's folder (``folders.hold``, which the caller takes).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import DataError, SoftcudaError, cut, excerpt
from ..timings import schema
from ..timings.load import load_csvs, metadata_path
from .spec import Spec, recorded_repetitions, spec_from_dict

_OP, _SIZE, _ATTEMPT = (schema.COLUMNS.index(c) for c in ("op", "size", "attempt"))

RESUMABLE_CHANGES = ("time_budget_s", "settle_s", "repetitions.retry_wait_s")
"""Spec keys a resumed sweep may change: how long this run may take or wait, not what it
measures."""


def now() -> str:
    """The UTC time, to the second, as the metadata and the profile's generated_at record it."""
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


def new_csv(folder: Path, spec_name: str) -> Path:
    """sweep-<spec>-<UTC time>.csv in ``folder``, with -2, -3, ... where that name (or its
    metadata's) is taken."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path, n = folder / f"sweep-{spec_name}-{stamp}.csv", 1
    while path.exists() or metadata_path(path).exists():
        n += 1
        path = path.with_name(f"sweep-{spec_name}-{stamp}-{n}.csv")
    return path


def unfinished_csv(folder: Path, spec: Spec, device_hash: str) -> Path:
    """The CSV of the newest unfinished sweep of ``spec``'s name on this device in ``folder``
    whose spec measures as ``spec`` does; a SoftcudaError saying why when there is none."""
    candidates = []  # (meta path, how its spec differs from this one)
    metas = folder.glob(f"sweep-{spec.name}-*.meta.json")
    for path in sorted(metas, key=started_order):
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as exc:
            raise SoftcudaError(f"{path}: cannot be read ({excerpt(exc)})") from None
        if not isinstance(meta, dict):
            raise DataError(f"{path}: holds {excerpt(meta)}, not the metadata of a sweep")
        stored = meta.get("spec")
        if meta.get("complete") or meta.get("device_hash") != device_hash:
            continue
        if isinstance(stored, dict) and stored.get("name", spec.name) != spec.name:
            continue  # (the glob also matches a spec named "<name>-more")
        if stored is not None:  # named as what it is: the spec stored in this metadata
            spec_from_dict(stored, f"{path}: spec")
        candidates.append((path, spec_changes(stored, spec)))
    if not candidates:
        raise SoftcudaError(
            f"--resume: no unfinished '{spec.name}' sweep of this device in {folder}"
        )
    same = [path for path, changes in candidates if not changes]
    if not same:  # rows measured one way must not be finished another way
        path, changes = candidates[-1]
        raise SoftcudaError(
            f"--resume: the unfinished '{spec.name}' sweep in {path.parent} was "
            f"measured with another spec ({'; '.join(changes[:3])}"
            f"{'; ...' if len(changes) > 3 else ''}); resume with that spec, or start "
            "a new sweep without --resume"
        )
    return same[-1].with_name(same[-1].name.removesuffix(".meta.json") + ".csv")


def previous_spans(meta_path: Path, default: str) -> tuple[str, list[dict[str, Any]]]:
    """When the sweep whose metadata is at ``meta_path`` started (``default`` where it does not
    say), and the spans of its processes (``Sweep.spans``) that it records."""
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError, RecursionError):
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    started = meta.get("started_at")
    spans = meta.get("processes")
    spans = [
        {"started_at": s["started_at"], "elapsed_s": float(s["elapsed_s"])}
        for s in (spans if isinstance(spans, list) else [])
        if isinstance(s, dict)
        and isinstance(s.get("started_at"), str)
        and isinstance(s.get("elapsed_s"), (int, float))
        and not isinstance(s.get("elapsed_s"), bool)
        and 0 <= s["elapsed_s"] < float("inf")
    ]
    return (started if isinstance(started, str) else default), spans


def started_order(meta_path: Path) -> tuple[str, int]:
    """sweep-<spec>-<time>[-<n>].meta.json in the order the sweeps were started: by time, then
    n (a name sort puts "-2" before "." and "-10" before "-2")."""
    stem = meta_path.name.removesuffix(".meta.json")
    match = re.fullmatch(r".*-(\d{8}T\d{6}Z)(?:-(\d+))?", stem)
    return (match.group(1), int(match.group(2) or 1)) if match else (stem, 0)


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

    if "repetitions" in stored:
        stored = {**stored, "repetitions": recorded_repetitions(stored["repetitions"])}
    there = flat(stored)
    here = flat(json.loads(json.dumps(spec.to_dict())))  # the form the metadata holds
    keys = sorted(set(there) | set(here), key=lambda k: (k not in here, k))
    return [
        f"{k}: {_shown(there.get(k, 'absent'))} there, {_shown(here.get(k, 'absent'))} here"
        for k in keys
        if k not in RESUMABLE_CHANGES and there.get(k) != here.get(k)
    ]


def _shown(value: Any) -> str:
    return cut(value) if isinstance(value, str) else excerpt(value)


def read_previous(csv_path: Path) -> pd.DataFrame | None:
    """Every row (all attempts) of an unfinished sweep's CSV, for a resumed sweep to go on
    from; None where the file or its first row was never written.

    A file of another schema version is refused before anything is cut; then a point whose
    writing was stopped is dropped (``drop_torn_point``) with a warning, so that it is
    measured again; then every row is checked, a bad one named by its line."""
    if not csv_path.exists():
        return None
    with open(csv_path, encoding="utf-8", errors="replace", newline="") as fh:
        header = fh.readline()
    if header.endswith("\n") and tuple(header.strip().split(",")) != schema.COLUMNS:
        raise SoftcudaError(  # checked first: a file of another version is left as it is
            f"--resume: {csv_path} was written by another version of softcuda (its "
            f"columns are not schema version {schema.SCHEMA_VERSION}'s); start a new sweep"
        )
    dropped = drop_torn_point(csv_path)
    if dropped:
        warnings.warn(
            f"{csv_path}: the sweep was stopped while writing {dropped}; those rows "
            "are dropped and the point is measured again",
            stacklevel=2,
        )
    with open(csv_path, encoding="utf-8", newline="") as fh:
        header, first = fh.readline(), fh.readline()
    if not header or not first:  # stopped before its header or its first row was written
        return None
    try:
        return load_csvs([csv_path], attempts="all")
    except DataError as exc:
        raise DataError(f"--resume: {exc} Start a new sweep without --resume.") from None


def write_meta(path: Path, meta: dict[str, Any]) -> None:
    """Replace the metadata at ``path`` atomically (a temporary file, then a rename); a write
    that fails (a full disk) leaves the previous metadata and no temporary file."""
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(meta, indent=2) + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
