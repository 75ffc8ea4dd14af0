"""Read raw sweep CSVs and their metadata, refusing anything that does not fit the schema.

``load_csvs(paths)``
    Reads one or more raw-timings CSVs written in the format of ``softcuda.sweep.schema``,
    validates every file on its own, and returns one DataFrame holding exactly
    ``schema.COLUMNS`` in that order, rows in file order then row order, index 0..n-1.
    Dtypes: ``schema``, ``size``, ``repetition``, ``nbytes`` are int64, ``seconds`` float64,
    every other column str.  Extra columns in a file are dropped (a newer writer must bump the
    schema version if a column matters).  Rows from different devices are kept side by side;
    nothing is averaged here.

``load_metadata(csv_path)``
    Returns the JSON object stored beside a CSV in ``<csv path with .csv replaced by .meta.json>``
    (``results/h200/sweep.csv`` -> ``results/h200/sweep.meta.json``).

Every problem is a ``DataError`` whose message is one sentence starting with the file name:
missing or unreadable file, no rows, missing columns (named), a schema version other than
``SCHEMA_VERSION`` (both versions named), or a bad value (the first bad line named, counting the
header as line 1).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from softcuda.errors import DataError
from softcuda.sweep import schema

PathLike = str | Path

_INT_COLUMNS = ("schema", "size", "repetition", "nbytes")
_FLOAT_COLUMNS = ("seconds",)
# Columns that identify a curve: an empty value would silently merge unrelated rows.
_NONEMPTY_COLUMNS = ("device_hash", "device", "op", "dtype", "backend")


def load_csvs(paths: PathLike | Iterable[PathLike]) -> pd.DataFrame:
    """Read, validate and concatenate raw-timings CSVs (see the module docstring)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise DataError("No CSV files were given to load.")
    frames = [_load_one(p) for p in paths]
    return pd.concat(frames, ignore_index=True)


def load_metadata(csv_path: PathLike) -> dict[str, Any]:
    """Return the metadata object stored beside ``csv_path`` (see the module docstring)."""
    csv_path = Path(csv_path)
    if csv_path.suffix != ".csv":
        raise DataError(f"{csv_path}: is not a .csv file, so it has no .meta.json beside it.")
    meta_path = csv_path.with_suffix(".meta.json")
    try:
        text = meta_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(
            f"{meta_path}: metadata file is missing (expected beside {csv_path})."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{meta_path}: cannot be read ({exc}).") from exc
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{meta_path}: line {exc.lineno}: invalid JSON ({exc.msg}).") from exc
    if not isinstance(meta, dict):
        raise DataError(f"{meta_path}: must hold a JSON object, not {type(meta).__name__}.")
    return meta


def _load_one(path: Path) -> pd.DataFrame:
    header, rows, lines = _read_rows(path)
    if not rows:
        raise DataError(f"{path}: has no data rows.")

    width = len(header)
    for row, line in zip(rows, lines, strict=True):
        if len(row) != width:
            raise DataError(f"{path}: line {line}: has {len(row)} fields, header has {width}.")
    # The version is checked before the columns: an older file usually lacks columns too, and
    # "written by schema 0" is the explanation the reader needs, not the list of absentees.
    if "schema" in header:
        _check_version(path, [r[header.index("schema")] for r in rows], lines)
    missing = [c for c in schema.COLUMNS if c not in header]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)}.")
    raw = pd.DataFrame(rows, columns=header)[list(schema.COLUMNS)]
    return _coerce(path, raw, lines)


def _read_rows(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """Header, data rows and the 1-based line number of each row; blank lines are skipped."""
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            rows: list[list[str]] = []
            lines: list[int] = []
            for row in reader:
                if row:
                    rows.append(row)
                    lines.append(reader.line_num)
    except FileNotFoundError:
        raise DataError(f"{path}: file does not exist.") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: cannot be read as CSV ({exc}).") from exc
    if header is None:
        raise DataError(f"{path}: is empty (no header, no rows).")
    return [h.strip() for h in header], rows, lines


def _check_version(path: Path, values: list[str], lines: list[int]) -> None:
    for value, line in zip(values, lines, strict=True):
        try:
            version = int(value)
        except ValueError:
            raise DataError(f"{path}: line {line}: schema {value!r} is not an integer.") from None
        if version != schema.SCHEMA_VERSION:
            age = "an older" if version < schema.SCHEMA_VERSION else "a newer"
            raise DataError(
                f"{path}: line {line}: written in {age} format (schema version {version}), "
                f"expected schema version {schema.SCHEMA_VERSION}."
            )


def _coerce(path: Path, raw: pd.DataFrame, lines: list[int]) -> pd.DataFrame:
    """Convert dtypes and check values vectorised; report the first bad line with its reason."""
    n = len(raw)
    problem: list[str | None] = [None] * n

    def flag(mask: pd.Series, reason: Any) -> None:
        # Only the first reason per row is kept: the earliest check is the most basic one.
        for i in mask.to_numpy().nonzero()[0]:
            if problem[i] is None:
                problem[i] = reason(i) if callable(reason) else reason

    out = pd.DataFrame(index=raw.index)
    for col in schema.COLUMNS:
        out[col] = raw[col].str.strip()
    for col in _NONEMPTY_COLUMNS:
        flag(out[col] == "", f"{col} is empty")
    for col in _INT_COLUMNS:
        num = pd.to_numeric(out[col], errors="coerce")
        bad = num.isna() | (num < 0) | (num != num.round())
        flag(bad, lambda i, c=col: f"{c} {raw[c].iat[i]!r} is not a non-negative integer")
        out[col] = num.where(~bad, 0).astype("int64")
    seconds = pd.to_numeric(out["seconds"], errors="coerce")
    bad = ~np.isfinite(seconds.to_numpy(dtype=float, na_value=np.nan)) | (seconds < 0)
    flag(bad, lambda i: f"seconds {raw['seconds'].iat[i]!r} is not a non-negative number")
    out["seconds"] = seconds.astype("float64")
    flag(~out["phase"].isin(schema.PHASES), lambda i: _unknown(out, "phase", schema.PHASES, i))
    flag(
        ~out["host_memory"].isin(schema.HOST_MEMORY_KINDS),
        lambda i: _unknown(out, "host_memory", schema.HOST_MEMORY_KINDS, i),
    )

    for i, reason in enumerate(problem):
        if reason is not None:
            raise DataError(f"{path}: line {lines[i]}: {reason}.")
    return out


def _unknown(frame: pd.DataFrame, col: str, allowed: tuple[str, ...], i: int) -> str:
    return f"unknown {col} {frame[col].iat[i]!r} (expected one of {', '.join(allowed)})"
