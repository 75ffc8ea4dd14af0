"""The rows a running sweep keeps per op (sweep/kept.py): selection asked about one op's frame
must answer exactly as it does on a frame of every row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from softcuda.sweep.kept import KeptRows
from softcuda.timings import schema, select, stats
from tests.synthetic import Cost, Scenario

OPS = ("add", "exp", "sum")


def _points(seed: int = 0) -> list[list[tuple]]:
    """A synthetic sweep as a sweep writes it, one list of rows per point measured: every size
    of three ops with its probe rows (the host slow at about a third of them, and slower
    through exp than through add, so that one op's probes alone would judge otherwise than
    all), then attempts 1 and 2 of some points, one of them torn (a series missing)."""
    rng = np.random.default_rng(seed)
    scenario = Scenario(
        costs={"cpu_fallback": Cost(2e-6, 1e-9), "cuda_elementwise": Cost(6e-6, 2e-11)}, ops=OPS
    )
    sizes = [round(256 * 2 ** (k / 2)) for k in range(22)]
    frame = scenario.frame(sizes=sizes, reps=9, noise=0.12, seed=seed, bus_sizes=[])

    def probe(like: pd.Series, attempt: int, slow: float) -> list[tuple]:
        seconds = 3e-6 * slow * np.exp(0.02 * rng.standard_normal(7))
        row = like.to_dict() | {"backend": schema.PROBE_BACKEND, "host_memory": "pageable"}
        row |= {"phase": schema.PROBE_PHASE, "nbytes": 0, "attempt": attempt, "shape": "16384"}
        return [
            tuple({**row, "repetition": r, "seconds": s}.values()) for r, s in enumerate(seconds)
        ]

    points, again = [], []
    for (op, _size), rows in frame.groupby(["op", "size"], sort=False):
        slow = 1.0 + (0.4 if op == "exp" else 0.3) * (rng.random() < 0.35)
        points.append(list(rows.itertuples(index=False, name=None)) + probe(rows.iloc[0], 0, slow))
        if slow > 1 or rng.random() < 0.2:
            again.append(rows)
    for attempt in (1, 2):
        for rows in again[attempt - 1 :: 2]:
            redo = rows.assign(attempt=attempt, seconds=rows["seconds"] * rng.uniform(0.8, 1.2))
            if attempt == 2 and rows is again[1]:  # torn: its pageable series never written
                redo = redo[redo["host_memory"] != "pageable"]
            slow = rng.choice([1.0, 1.3])
            points.append(
                list(redo.itertuples(index=False, name=None)) + probe(rows.iloc[0], attempt, slow)
            )
    return points


def _answers(frame: pd.DataFrame, op: str) -> tuple:
    scores = stats.attempt_scores(frame)
    scores = scores[scores.index.get_level_values("op") == op]
    chosen = stats.current_rows(frame)
    chosen = chosen[chosen["op"] == op]
    return (
        select.refinement_sizes(frame, op),
        select.scan_sizes(frame, op, steps=4),
        scores,
        sorted(chosen[["size", "attempt"]].drop_duplicates().itertuples(index=False)),
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_an_op_frame_answers_as_a_frame_of_every_row(seed):
    kept, every = KeptRows(), []
    asked = 0
    points = _points(seed)
    for k, rows in enumerate(points):
        kept.add(rows)
        every += rows
        # as the sweep asks: once an op's sizes are in, and in the retry passes at the end
        last_of_op = k + 1 == len(points) or points[k + 1][0][3] != rows[0][3]
        if not last_of_op:
            continue
        full = pd.DataFrame(every, columns=list(schema.COLUMNS))
        for op in {row[3] for row in every}:
            refine, scan, scores, chosen = _answers(kept.op_frame(op), op)
            want = _answers(full, op)
            assert refine == want[0] and scan == want[1] and chosen == want[3]
            pd.testing.assert_series_equal(scores, want[2])
            asked += bool(refine)
    assert asked  # the boundaries were there to refine
    # the op's probes alone would put the host's best elsewhere: the whole sweep's is used
    exp = kept.op_frame("exp")
    assert stats.best_probe(exp).iloc[0] == pytest.approx(stats.best_probe(full).iloc[0])
    alone = exp[exp["phase"] == schema.PROBE_PHASE].copy()
    alone.attrs.clear()
    assert stats.best_probe(alone).iloc[0] != pytest.approx(stats.best_probe(full).iloc[0])
    # every row, in the order taken
    pd.testing.assert_frame_equal(kept.frame(), full, check_dtype=False)
    assert len(kept) == len(full)


def test_rows_read_back_keep_their_order_and_answer_alike():
    """A resumed sweep's rows (one frame of every op) join the rows it measures next."""
    points = _points(2)
    half = len(points) // 2
    before = pd.DataFrame([r for rows in points[:half] for r in rows], columns=list(schema.COLUMNS))
    kept = KeptRows()
    kept.add_frame(before)
    for rows in points[half:]:
        kept.add(rows)
    full = pd.DataFrame([r for rows in points for r in rows], columns=list(schema.COLUMNS))
    pd.testing.assert_frame_equal(kept.frame(), full, check_dtype=False)
    for op in OPS:
        refine, scan, scores, chosen = _answers(kept.op_frame(op), op)
        want = _answers(full, op)
        assert (refine, scan, chosen) == (want[0], want[1], want[3])
        pd.testing.assert_series_equal(scores, want[2])


def test_an_op_never_measured_has_an_empty_frame():
    kept = KeptRows()
    kept.add(_points()[0])
    assert kept.op_frame("mul").empty
    assert select.refinement_sizes(kept.op_frame("mul"), "mul") == []
    assert KeptRows().frame().empty and len(KeptRows()) == 0
