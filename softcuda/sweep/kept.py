"""The rows a running sweep holds, kept per op as numpy columns for selection to read.

While it runs, a sweep asks selection about one op at a time: after the op's sizes (what to
refine), after the scan, and before every retry pass (which points to measure again).  It used
to keep every row as a Python tuple in one list and build a DataFrame of the op's rows and every
probe row from that list at each question, a cost that grew with every row of the sweep (a
full default sweep holds about two million), and every collection of the garbage collector
(one before each point's timing, ``timers.interleaved``) walked the whole list.

Here each point's rows become one chunk of numpy columns (arrays hold no objects the collector
walks), filed under its op; a frame of one op is made from its chunks when asked for and kept
until the op has new rows.  Each op's frame is judged against the host's best time of the whole
sweep (``stats.judged_against``): the probe medians of every point's first attempt, kept as
they come.  Selection therefore answers exactly as it would on a frame of every row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..timings import schema, stats

_OP = schema.COLUMNS.index("op")
_NUMBERS = {"schema": np.int64, "size": np.int64, "repetition": np.int64, "seconds": np.float64}
_NUMBERS |= {"nbytes": np.int64, "attempt": np.int64}
_PROBE_KEYS = ["device", "op", "size", "phase", "seconds", "attempt"]

Columns = dict[str, np.ndarray]


class KeptRows:
    """Every row of a sweep, in the order taken: ``add`` a point's rows, ``add_frame`` the rows
    a resumed sweep read back; ``op_frame(op)`` for selection, ``frame()`` for all."""

    def __init__(self) -> None:
        self._chunks: list[Columns] = []  # every row, in the order taken
        self._by_op: dict[str, list[Columns]] = {}  # each op's rows, not yet in its frame
        self._frames: dict[str, pd.DataFrame] = {}  # each op's rows so far
        self._probes: list[pd.DataFrame] = []  # the probe rows of first attempts
        self._best: pd.Series | None = None  # stats.best_probe over them; None: not yet made
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, rows: list[tuple]) -> None:
        """Keep the rows of one measured point (or one bus size: both directions)."""
        if not rows:
            return
        columns = {
            name: np.array(values, dtype=_NUMBERS.get(name, object))
            for name, values in zip(schema.COLUMNS, zip(*rows))
        }
        self._keep(columns, {row[_OP] for row in rows})

    def add_frame(self, frame: pd.DataFrame) -> None:
        """Keep rows read back from disk (``storage.read_previous``), in their order."""
        columns = {
            name: frame[name].to_numpy(dtype=_NUMBERS.get(name, object)) for name in schema.COLUMNS
        }
        self._keep(columns, set(frame["op"].unique()))

    def _keep(self, columns: Columns, ops: set[str]) -> None:
        self._chunks.append(columns)
        self._count += len(columns["op"])
        for op in ops:
            if len(ops) == 1:
                part = columns
            else:  # (the bus's two directions, a resumed sweep's rows)
                mask = columns["op"] == op
                part = {name: values[mask] for name, values in columns.items()}
            self._by_op.setdefault(op, []).append(part)
        probe = (columns["phase"] == schema.PROBE_PHASE) & (columns["attempt"] == 0)
        if probe.any():
            self._probes.append(
                pd.DataFrame({k: _series(columns[k][probe], k) for k in _PROBE_KEYS})
            )
            self._best = None

    def best(self) -> pd.Series:
        """``stats.best_probe`` of every row kept: the host's best time, per device."""
        if self._best is None:
            probes = pd.concat(self._probes) if self._probes else _frame({}, _PROBE_KEYS)
            self._best = stats.best_probe(probes)
        return self._best

    def op_frame(self, op: str) -> pd.DataFrame:
        """Every row of ``op`` (all attempts, its probe rows included), in the order taken,
        judged against the best host time of every row kept: what selection would make of
        one op in a frame of all rows.  A fresh frame over shared columns: do not write to it."""
        new = self._by_op.pop(op, [])
        kept = self._frames.get(op)
        if new or kept is None:
            parts = ([_columns(kept)] if kept is not None else []) + new
            merged = {
                name: np.concatenate([part[name] for part in parts])
                if parts
                else np.empty(0, dtype=_NUMBERS.get(name, object))
                for name in schema.COLUMNS
            }
            kept = self._frames[op] = _frame(merged, schema.COLUMNS)
        return stats.judged_against(kept.copy(deep=False), self.best())

    def frame(self) -> pd.DataFrame:
        """Every row kept, in the order taken."""
        merged = {
            name: np.concatenate([chunk[name] for chunk in self._chunks])
            if self._chunks
            else np.empty(0, dtype=_NUMBERS.get(name, object))
            for name in schema.COLUMNS
        }
        return _frame(merged, schema.COLUMNS)


def _series(values: np.ndarray, name: str) -> pd.Series:
    return pd.Series(values, dtype=_NUMBERS.get(name, object), copy=False)


def _frame(columns: Columns, names) -> pd.DataFrame:
    """A frame over ``columns`` (text as object columns, as ``load_csvs`` reads them)."""
    if not columns:
        columns = {n: np.empty(0, dtype=_NUMBERS.get(n, object)) for n in names}
    return pd.DataFrame({n: _series(columns[n], n) for n in names}, copy=False)


def _columns(frame: pd.DataFrame) -> Columns:
    return {name: frame[name].to_numpy() for name in schema.COLUMNS}
