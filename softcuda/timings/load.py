"""Read raw sweep CSVs and their metadata, refusing anything that does not fit the schema.

``load_csvs(paths)``
    Reads one or more raw-timings CSVs written in the format of ``softcuda.timings.schema``,
    validates every file on its own, and returns one DataFrame holding exactly
    ``schema.COLUMNS`` in that order, rows in file order then row order, index 0..n-1.
    A version 1 file (written before the ``attempt`` column) reads with ``attempt`` 0 and keeps
    its ``schema`` value 1.  Dtypes: ``schema``, ``size``, ``repetition``, ``nbytes``,
    ``attempt`` are int64, ``seconds`` float64,
    every other column object holding str.  Blank lines are skipped.  Numbers are parsed by
    pandas' C reader, so a million-row sweep loads in seconds.  Extra columns in a file are
    dropped (a newer writer must bump the schema version if a column matters).  Rows from
    different devices are kept side by side; nothing is averaged here.  By default each
    file keeps each point's chosen attempt only (``attempts="all"`` keeps every row).

``sweep_date(csv_path)``
    The UTC date (YYYY-MM-DD) a sweep started: its metadata's ``started_at``, else the time
    stamp the sweep writes into the CSV's name (``sweep-<spec>-<YYYYmmddTHHMMSSZ>[-n].csv``);
    None where neither says.  The figures' titles carry it.

``load_metadata(csv_path)``
    Returns the JSON object stored beside a CSV in ``metadata_path(csv_path)``: the name with
    its suffix ``.csv`` (or ``.csv.gz``) replaced by ``.meta.json``, and nothing else of it
    (``results/h200/sweep-v1.csvdata-T.csv`` -> ``results/h200/sweep-v1.csvdata-T.meta.json``).
    The sweep's writer names its metadata with the same function.

Every problem is a ``DataError`` whose message is one sentence starting with the file name:
missing or unreadable file, no rows, missing columns (named), a schema version outside
``schema.READABLE_VERSIONS`` (both named), a bad value (the first bad line named, counting
the header as line 1), or a file that ends mid-row (a copy or a write cut short: its last line
lacks fields and its line end), named as that rather than by the values it lacks.

The frame carries, in ``DataFrame.attrs`` under ``stats.SOURCES``, each file and the (device,
device hash) pairs of its rows, so that a refusal of rows from several machines
(``stats.single_device``) names the file that holds them.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import gzip
import json
import re
import warnings
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from softcuda.errors import DataError, cut
from softcuda.timings import schema, stats

PathLike = str | Path

_INT_COLUMNS = ("schema", "size", "repetition", "nbytes", "attempt")
_FLOAT_COLUMNS = ("seconds",)
_NUMERIC_COLUMNS = _INT_COLUMNS + _FLOAT_COLUMNS
# Columns that identify a curve: an empty value would silently merge unrelated rows.
_NONEMPTY_COLUMNS = ("device_hash", "device", "op", "dtype", "backend")


def load_csvs(paths: PathLike | Iterable[PathLike], attempts: str = "chosen") -> pd.DataFrame:
    """Read, validate and concatenate raw-timings CSVs (see the module docstring).

    ``attempts="chosen"`` keeps, in each file on its own, each point's chosen attempt
    (``stats.current_rows``: one file is one sweep, and a point measured again in one sweep
    must not displace another sweep's rows of the same size); the result is marked as reduced.
    ``attempts="all"`` keeps every row, for reading one sweep's attempts side by side.
    """
    if attempts not in ("chosen", "all"):
        raise ValueError(f"attempts must be 'chosen' or 'all', not {attempts!r}")
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files = [Path(p) for p in paths]
    if not files:
        raise DataError("No CSV files were given to load.")
    frames = [_load_one(p) for p in files]
    sources = {str(p): _machines(f) for p, f in zip(files, frames, strict=True)}
    if attempts == "all":
        out = pd.concat(frames, ignore_index=True)
    else:
        # the host's best time over every file's first attempts, as one sweep would have it
        best = stats.best_probe(pd.concat(frames, ignore_index=True))
        reduced = pd.concat([stats.current_rows(f) for f in frames], ignore_index=True)
        out = stats.mark_reduced(reduced, best)
    out.attrs[stats.SOURCES] = sources
    return out


def _machines(frame: pd.DataFrame) -> list[list[str]]:
    """The (device, device hash) pairs of ``frame``'s rows, as lists (attrs are copied deep)."""
    pairs = frame[["device", "device_hash"]].drop_duplicates()
    return sorted([str(d), str(h)] for d, h in pairs.itertuples(index=False))


def metadata_path(csv_path: PathLike) -> Path:
    """Where the metadata of ``csv_path`` lies: its suffix replaced, nothing else of its name
    (a spec's name may hold ".csv"); the one rule both the writer and the readers use."""
    csv_path = Path(csv_path)
    for suffix in (".csv.gz", ".csv"):  # a committed raw CSV may be gzipped
        if csv_path.name.endswith(suffix):
            return csv_path.with_name(csv_path.name[: -len(suffix)] + ".meta.json")
    raise DataError(f"{csv_path}: is not a .csv file, so it has no .meta.json beside it.")


_NAME_STAMP = re.compile(r"-(\d{8})T\d{6}Z(?:-\d+)?\.csv(?:\.gz)?\Z")


def sweep_date(csv_path: PathLike) -> str | None:
    """The UTC date the sweep of ``csv_path`` started (see the module docstring).  Metadata
    that is missing or cannot be read is passed over: the figures need none, and a date from
    the file's name is still the sweep's."""
    csv_path = Path(csv_path)
    try:
        started = load_metadata(csv_path).get("started_at")
    except DataError:
        started = None
    if isinstance(started, str):
        with contextlib.suppress(ValueError):
            return _dt.datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").date().isoformat()
    match = _NAME_STAMP.search(csv_path.name)
    if match:
        with contextlib.suppress(ValueError):
            return _dt.datetime.strptime(match.group(1), "%Y%m%d").date().isoformat()
    return None


def load_metadata(csv_path: PathLike) -> dict[str, Any]:
    """Return the metadata object stored beside ``csv_path`` (see the module docstring)."""
    csv_path = Path(csv_path)
    meta_path = metadata_path(csv_path)
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
    except RecursionError:  # json decodes nested arrays and objects recursively
        raise DataError(f"{meta_path}: nests arrays or objects too deeply to be read.") from None
    except ValueError as exc:  # valid JSON Python refuses: an integer of thousands of digits
        raise DataError(f"{meta_path}: cannot be read as JSON ({cut(str(exc))}).") from None
    if not isinstance(meta, dict):
        raise DataError(f"{meta_path}: must hold a JSON object, not {type(meta).__name__}.")
    return meta


def _load_one(path: Path) -> pd.DataFrame:
    raw = _read_raw(path)
    fields = len(raw.columns)  # the header's
    raw = raw[~_blank_rows(raw)]
    if raw.empty:
        raise DataError(f"{path}: has no data rows.")
    lines = (raw.index.to_numpy() + 2).tolist()  # line 1 is the header
    try:
        return _check_rows(path, raw, lines)
    except _BadLine as exc:
        # a file cut mid-row: its last line's missing fields read as empty values, the first
        # of which would be named as if the row had been written so
        if exc.line != lines[-1] or not _ends_mid_row(path, fields):
            raise
        raise DataError(
            f"{path}: line {exc.line}: the file ends mid-row (truncated?); cut that line off to "
            "read the rows before it."
        ) from None


class _BadLine(DataError):
    """A bad value on one line: the message names the line, and ``line`` keeps it."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        self.line = line
        super().__init__(f"{path}: line {line}: {reason}.")


def _check_rows(path: Path, raw: pd.DataFrame, lines: list[int]) -> pd.DataFrame:
    # The version is checked before the columns: an older file usually lacks columns too, and
    # "written by schema 0" is the explanation the reader needs, not the list of absentees.
    if "schema" in raw.columns:
        _check_version(path, raw["schema"], lines)
        if "attempt" not in raw.columns and (_numbers(raw["schema"]) == 1).all():
            raw = raw.assign(attempt=0)  # version 1: every point was measured once
    missing = [c for c in schema.COLUMNS if c not in raw.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)}.")
    return _coerce(path, raw[list(schema.COLUMNS)].reset_index(drop=True), lines)


_TAIL_BYTES = 1 << 16
"""How much of a file's end ``_ends_mid_row`` reads: hundreds of rows' length."""


def _ends_mid_row(path: Path, fields: int) -> bool:
    """Whether the file's last line lacks its line end and some of the header's ``fields``
    (or the last field's value): what a copy or a write cut short leaves.  A whole row without
    its line end reads as whole: a sweep writes whole lines, each point's at once, and a
    resumed sweep cuts a torn one off before it reads them (``sweep.storage.drop_torn_point``).
    """
    try:
        if path.name.endswith(".gz"):
            tail = b""
            with gzip.open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    tail = (tail + chunk)[-_TAIL_BYTES:]
        else:
            with open(path, "rb") as fh:
                fh.seek(max(0, path.stat().st_size - _TAIL_BYTES))
                tail = fh.read()
    except (OSError, EOFError, zlib.error):  # it was read a moment ago: let its rows speak
        return False
    if not tail or tail.endswith(b"\n"):
        return False
    last = tail.rsplit(b"\n", 1)[-1].decode("utf-8", errors="replace")
    cells = next(csv.reader([last]), [""])
    return len(cells) < fields or cells[-1] == ""


def _read_raw(path: Path) -> pd.DataFrame:
    """Text columns as strings, numeric columns parsed by the C parser (sweeps write millions of
    rows; a column with a bad value stays text and is checked row by row later).  Blank lines
    are kept as rows and the schema has no quoted newlines, so data row i is line i + 2."""
    if not path.is_file():
        what = "does not exist" if not path.exists() else "is not a file"
        raise DataError(f"{path}: {what}.")
    try:
        with warnings.catch_warnings():
            # index_col=False: a first data row with one field more than the header must not
            # make the first column the index (every column would move one place); pandas
            # then warns of the field it drops, and that warning is the error here
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(
                path,
                dtype={c: object for c in schema.COLUMNS if c not in _NUMERIC_COLUMNS},
                na_filter=False,
                skip_blank_lines=False,
                encoding="utf-8",
                index_col=False,
            )
    except pd.errors.ParserWarning:
        raise DataError(f"{path}: cannot be parsed as CSV ({_long_line(path)}).") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: is empty (no header, no rows).") from None
    except pd.errors.ParserError as exc:
        # The C parser says "Expected 13 fields in line 5, saw 14"; keep its line number.
        detail = str(exc).split("C error: ")[-1].strip().rstrip(".")
        raise DataError(f"{path}: cannot be parsed as CSV ({detail}).") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read ({exc}).") from exc
    except EOFError:  # gzip's way of saying so (and click's of aborting, were it let through)
        raise DataError(
            f"{path}: cannot be read (its compressed data ends early: truncated)."
        ) from None
    except zlib.error as exc:  # a damaged .gz: not an OSError
        raise DataError(
            f"{path}: cannot be read (its compressed data is damaged: {exc})."
        ) from None


def _long_line(path: Path) -> str:
    """Which line has more fields than the header: read again as text, on this path only."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, [])
        for fields in reader:
            if len(fields) > len(header):
                return f"line {reader.line_num} has {len(fields)} fields, the header {len(header)}"
    return "a line has more fields than the header"


def _blank_rows(raw: pd.DataFrame) -> np.ndarray:
    """Rows that came from blank lines: every cell empty (text "" or, in a numeric column, NaN).
    Only rows whose first cell is empty are examined, so the usual case costs one comparison."""
    first = _numbers(raw.iloc[:, 0]) if _is_numeric(raw.iloc[:, 0]) else None
    candidate = np.isnan(first) if first is not None else (raw.iloc[:, 0] == "").to_numpy()
    blank = np.zeros(len(raw), dtype=bool)
    idx = candidate.nonzero()[0]
    if len(idx):
        part = raw.iloc[idx].astype(str)
        blank[idx] = part.isin(["", "nan"]).all(axis=1).to_numpy()
    return blank


def _is_numeric(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)


def _numbers(values: pd.Series) -> np.ndarray:
    """Float view of a column; text that is not a number becomes NaN."""
    if not _is_numeric(values):
        values = pd.to_numeric(values, errors="coerce")
    return values.to_numpy(dtype=float, na_value=np.nan)


def _check_version(path: Path, values: pd.Series, lines: list[int]) -> None:
    versions = _numbers(values)
    bad = (~np.isin(versions, schema.READABLE_VERSIONS)).nonzero()[0]  # NaN is in nothing
    if len(bad) == 0:
        return
    i = int(bad[0])
    if not float(versions[i]).is_integer():
        raise _BadLine(path, lines[i], f"schema {_show(values.iat[i])} is not an integer")
    version = int(versions[i])
    age = "an older" if version < min(schema.READABLE_VERSIONS) else "a newer"
    raise _BadLine(
        path,
        lines[i],
        f"written in {age} format (schema version {version}), "
        f"expected schema version {' or '.join(map(str, schema.READABLE_VERSIONS))}",
    )


def _coerce(path: Path, raw: pd.DataFrame, lines: list[int]) -> pd.DataFrame:
    """Convert dtypes and check values vectorised; report the first bad line with its reason.

    Checks are listed from the most basic to the most specific; on the first bad row the
    first failing check gives the reason."""
    checks: list[tuple[np.ndarray, Callable[[int], str]]] = []
    out = pd.DataFrame(index=raw.index)
    for col in schema.COLUMNS:
        out[col] = raw[col] if col in _NUMERIC_COLUMNS else raw[col].astype(object)
    for col in _NONEMPTY_COLUMNS:
        checks.append(((out[col] == "").to_numpy(), _reason(f"{col} is empty")))
    for col in _INT_COLUMNS:
        num = _numbers(out[col])
        bad = ~np.isfinite(num) | (num < 0) | (num != np.round(num))
        checks.append((bad, _reason("{} is not a non-negative integer", raw[col], col)))
        huge = ~bad & (num >= 2.0**63)  # int64 would wrap it (1e23 read as "below 1")
        checks.append((huge, _reason("{} is larger than a 64-bit integer holds", raw[col], col)))
        out[col] = np.where(bad | huge, 0, num).astype("int64")
    seconds = _numbers(out["seconds"])
    bad = ~np.isfinite(seconds) | (seconds < 0)
    checks.append((bad, _reason("{} is not a non-negative number", raw["seconds"], "seconds")))
    out["seconds"] = seconds
    for col, allowed in (("phase", schema.PHASES), ("host_memory", schema.HOST_MEMORY_KINDS)):
        bad = ~out[col].isin(allowed).to_numpy()
        why = f"{{}} is unknown (expected one of {', '.join(allowed)})"
        checks.append((bad, _reason(why, out[col], col)))
    # every size is a size metric of at least 1 (a sweep measures from 1): size 0 has no place
    # on the figures' log axes nor in selection's log-size interpolation
    bad = (out["size"] < 1).to_numpy()
    checks.append(
        (bad, _reason("{} is below 1, the smallest size a sweep measures", raw["size"], "size"))
    )
    # the analysis tells a backend's family by its id (stats.is_cpu_backend): a row whose phase
    # is not one its family records would fall out of every curve without a word
    backend = out["backend"].astype(str)
    family = np.select(
        [
            (backend == schema.PROBE_BACKEND).to_numpy(),
            (backend == "bus").to_numpy(),
            backend.str.startswith(stats.CPU_PREFIX).to_numpy(),
        ],
        ["probe", "bus", "cpu"],
        "cuda",
    )
    fits = np.zeros(len(out), dtype=bool)
    for name, phases in _FAMILY_PHASES.items():
        fits |= (family == name) & out["phase"].isin(phases).to_numpy()
    checks.append((~fits, lambda i: _family_reason(out, family, i)))

    firsts = [int(mask.argmax()) for mask, _ in checks if mask.any()]
    if firsts:
        i = min(firsts)
        reason = next(why for mask, why in checks if mask[i])
        raise _BadLine(path, lines[i], reason(i))
    return out


_FAMILY_PHASES = {
    "probe": (schema.PROBE_PHASE,),
    "bus": ("transfer",),
    "cpu": ("wall",),
    "cuda": ("h2d", "kernel", "d2h", "end_to_end"),
}
_FAMILY_NAMES = {
    "probe": f"the probe (backend {schema.PROBE_BACKEND})",
    "bus": "bus rows",
    "cpu": f"a CPU backend ({stats.CPU_PREFIX}*)",
    "cuda": "a CUDA backend",
}


def _family_reason(out: pd.DataFrame, family: np.ndarray, i: int) -> str:
    backend, phase = _show(out["backend"].iat[i]), _show(out["phase"].iat[i])
    allowed = ", ".join(_FAMILY_PHASES[family[i]])
    return f"backend {backend} has phase {phase}, but {_FAMILY_NAMES[family[i]]} records {allowed}"


def _reason(template: str, values: pd.Series | None = None, col: str = "") -> Callable[[int], str]:
    """The message for row i: ``template`` with "<col> <value of row i>" in its {} slot.
    Built lazily because only the first bad row is ever reported."""
    if values is None:
        return lambda i: template
    return lambda i: template.format(f"{col} {_show(values.iat[i])}")


def _show(value: Any) -> str:
    # Text quoted (so an empty or padded value is visible), numbers as the parser read them.
    return repr(value) if isinstance(value, str) else str(value)
