"""load_csvs / load_metadata: good files round-trip, every bad file is one named DataError."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from softcuda.errors import DataError
from softcuda.timings import schema
from softcuda.timings.load import load_csvs, load_metadata


def _rows(device: str = "NVIDIA H200", n: int = 3) -> list[dict[str, object]]:
    rows = []
    for rep in range(n):
        rows.append(
            {
                "schema": schema.SCHEMA_VERSION,
                "device_hash": "ab" * 32,
                "device": device,
                "op": "add",
                "size": 1024,
                "shape": "1024",
                "dtype": "float32",
                "backend": "cuda_elementwise",
                "host_memory": "pinned",
                "phase": "end_to_end",
                "repetition": rep,
                "seconds": 1.5e-5 * (rep + 1),
                "nbytes": 12288,
                "attempt": 0,
            }
        )
    return rows


def _write(path: Path, rows: list[dict[str, object]], columns=schema.COLUMNS) -> Path:
    pd.DataFrame(rows, columns=list(columns)).to_csv(path, index=False)
    return path


def test_good_file_round_trips(tmp_path: Path) -> None:
    rows = _rows()
    df = load_csvs(_write(tmp_path / "a.csv", rows))
    assert list(df.columns) == list(schema.COLUMNS)
    assert df.to_dict("records") == rows
    for col in ("schema", "size", "repetition", "nbytes", "attempt"):
        assert df[col].dtype == "int64"
    assert df["seconds"].dtype == "float64"


def test_several_files_concatenate_in_order(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.csv", _rows("GPU A", 2))
    b = _write(tmp_path / "b.csv", _rows("GPU B", 3))
    df = load_csvs([a, b])
    assert df["device"].tolist() == ["GPU A"] * 2 + ["GPU B"] * 3
    assert df.index.tolist() == list(range(5))


def test_extra_columns_are_dropped(tmp_path: Path) -> None:
    rows = [dict(r, note="x") for r in _rows()]
    df = load_csvs(_write(tmp_path / "a.csv", rows, (*schema.COLUMNS, "note")))
    assert list(df.columns) == list(schema.COLUMNS)


def _error(path: Path) -> str:
    with pytest.raises(DataError) as info:
        load_csvs(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert "\n" not in message
    return message


def test_missing_file(tmp_path: Path) -> None:
    assert "does not exist" in _error(tmp_path / "nope.csv")


def test_empty_file_and_header_only(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert "empty" in _error(empty)
    header_only = tmp_path / "header.csv"
    header_only.write_text(",".join(schema.COLUMNS) + "\n")
    assert "no data rows" in _error(header_only)


def test_missing_columns_are_named(tmp_path: Path) -> None:
    cols = [c for c in schema.COLUMNS if c not in ("phase", "nbytes")]
    path = _write(tmp_path / "m.csv", [{c: r[c] for c in cols} for r in _rows()], cols)
    message = _error(path)
    assert "phase" in message and "nbytes" in message


@pytest.mark.parametrize(
    ("version", "word"), [(0, "older"), (max(schema.READABLE_VERSIONS) + 1, "newer")]
)
def test_other_schema_version(tmp_path: Path, version: int, word: str) -> None:
    rows = [dict(r, schema=version) for r in _rows()]
    # An older file missing a column must still be explained by its version.
    cols = [c for c in schema.COLUMNS if c != "nbytes"]
    message = _error(_write(tmp_path / "v.csv", rows, cols))
    assert word in message
    assert f"version {version}" in message
    assert "expected schema version 1 or 2" in message


def test_version_1_file_reads_as_first_attempts(tmp_path: Path) -> None:
    """A file written before the ``attempt`` column: every row is a point's first attempt."""
    rows = [dict(r, schema=1) for r in _rows()]
    for r in rows:
        del r["attempt"]
    cols = [c for c in schema.COLUMNS if c != "attempt"]
    df = load_csvs(_write(tmp_path / "v1.csv", rows, cols))
    assert list(df.columns) == list(schema.COLUMNS)
    assert df["attempt"].tolist() == [0, 0, 0] and df["schema"].tolist() == [1, 1, 1]


def test_version_2_file_needs_its_attempt_column(tmp_path: Path) -> None:
    rows = _rows()
    for r in rows:
        del r["attempt"]
    cols = [c for c in schema.COLUMNS if c != "attempt"]
    assert "missing column(s) attempt" in _error(_write(tmp_path / "v2.csv", rows, cols))


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("phase", "warp", "phase 'warp'"),
        ("host_memory", "managed", "host_memory 'managed'"),
        ("seconds", "fast", "seconds 'fast'"),
        ("seconds", "-1e-6", "seconds -1e-06 is not"),
        ("seconds", "nan", "seconds"),
        ("size", "1.5", "size 1.5 is not"),
        ("repetition", "-1", "repetition -1 is not"),
        ("op", "", "op is empty"),
        ("size", "0", "size 0 is below 1"),
        ("size", "1e23", "size 1e+23 is larger than a 64-bit integer holds"),
        ("nbytes", "99999999999999999999", "nbytes 99999999999999999999 is larger than a 64-bit"),
        ("phase", "wall", "backend 'cuda_elementwise' has phase 'wall', but a CUDA backend"),
        ("backend", "machine", "backend 'machine' has phase 'end_to_end', but the probe"),
    ],
)
def test_bad_value_names_first_bad_line(
    tmp_path: Path, column: str, value: str, expected: str
) -> None:
    rows = _rows(n=4)
    rows[2][column] = value  # data row 2 is line 4: the header is line 1
    rows[3][column] = value
    message = _error(_write(tmp_path / "bad.csv", rows))
    assert "line 4:" in message
    assert expected in message


def test_ragged_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.csv", _rows())
    good = path.read_text()
    path.write_text(good + "1,2,3\n")  # short: its missing fields read as empty
    assert "line 5:" in _error(path)
    path.write_text(good + ",".join(["1"] * (len(schema.COLUMNS) + 1)) + "\n")
    saw = len(schema.COLUMNS) + 1
    assert f"Expected {len(schema.COLUMNS)} fields in line 5, saw {saw}" in _error(path)


def test_blank_lines_keep_line_numbers(tmp_path: Path) -> None:
    rows = _rows(n=3)
    rows[2]["phase"] = "warp"
    path = _write(tmp_path / "b.csv", rows)
    head, *data = path.read_text().splitlines()
    path.write_text("\n".join([head, data[0], "", data[1], data[2]]) + "\n")
    assert "line 5: phase 'warp' is unknown" in _error(path)


def test_metadata_beside_csv(tmp_path: Path) -> None:
    csv_path = _write(tmp_path / "sweep.csv", _rows())
    with pytest.raises(DataError, match="sweep.meta.json: metadata file is missing"):
        load_metadata(csv_path)
    (tmp_path / "sweep.meta.json").write_text(json.dumps({"numpy": "2.0"}))
    assert load_metadata(csv_path) == {"numpy": "2.0"}
    (tmp_path / "sweep.meta.json").write_text("{\n  oops")
    with pytest.raises(DataError, match=r"sweep.meta.json: line 2: invalid JSON"):
        load_metadata(csv_path)
    (tmp_path / "sweep.meta.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match=r"sweep.meta.json: nests arrays or objects too deeply"):
        load_metadata(csv_path)


def test_each_file_keeps_its_own_chosen_attempts(tmp_path: Path) -> None:
    """Two sweeps of one device: one measured size 1024 again, the other did not.  Loaded
    together, each keeps its own rows of 1024 (one attempt each), not one file's only."""
    first = pd.DataFrame(_rows(n=5))
    again = first.assign(attempt=1, seconds=first["seconds"] * 2)
    a = _write(tmp_path / "a.csv", pd.concat([first, again]).to_dict("records"))
    b = _write(tmp_path / "b.csv", _rows(n=4))
    both = load_csvs([a, b])
    assert len(both) == 5 + 4  # a: the steadier attempt's 5 rows; b: its 4
    assert len(load_csvs([a, b], attempts="all")) == 5 + 5 + 4
    with pytest.raises(ValueError, match="attempts"):
        load_csvs([a], attempts="some")


def test_a_truncated_gzip_file_is_one_sentence(tmp_path: Path) -> None:
    import gzip

    whole = gzip.compress(_write(tmp_path / "a.csv", _rows(n=200)).read_bytes())
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=r"cut\.csv\.gz: cannot be read .*truncated"):
        load_csvs(cut)


def test_rows_with_one_field_more_than_the_header_are_named(tmp_path: Path) -> None:
    """Where the first data row has one field more, pandas took the first column for the
    index and every column moved one place ("schema '<hash>' is not an integer")."""
    path = _write(tmp_path / "r.csv", _rows())
    head, *data = path.read_text().splitlines()
    fields = len(schema.COLUMNS)
    for rows in ([d + ",x" for d in data], [data[0] + ",x", *data[1:]]):
        path.write_text("\n".join([head, *rows]) + "\n")
        assert _error(path) == (
            f"{path}: cannot be parsed as CSV (line 2 has {fields + 1} fields, the header "
            f"{fields})."
        )


def test_metadata_with_an_integer_too_long_to_read_is_one_sentence(tmp_path: Path) -> None:
    csv_path = _write(tmp_path / "sweep.csv", _rows())
    (tmp_path / "sweep.meta.json").write_text('{"elapsed_s": 1' + "0" * 5000 + "}")
    with pytest.raises(DataError) as info:
        load_metadata(csv_path)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'sweep.meta.json'}: cannot be read as JSON (")
    assert len(message) < 300


def test_probe_rows_alone_measured_again_load(tmp_path: Path) -> None:
    """Probe rows only, one point with attempt 1: judging the attempts by their timings (none)
    raised KeyError: 0.75."""
    probe = [
        dict(r, backend=schema.PROBE_BACKEND, phase=schema.PROBE_PHASE, attempt=a, nbytes=0)
        for a in (0, 1)
        for r in _rows(n=3)
    ]
    assert len(load_csvs(_write(tmp_path / "p.csv", probe))) == 3


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
@pytest.mark.parametrize("kept", [0.5, -2])  # half the last line; all of it but "0\n"
def test_a_file_cut_mid_row_says_so(tmp_path: Path, suffix: str, kept: float) -> None:
    """A copy stopped mid-row: its last line lacks fields (or the last one's value) and its line
    end.  Read as a row, it said "line 5: dtype is empty", as if the row were bad."""
    import gzip

    text = _write(tmp_path / "whole.csv", _rows(n=4)).read_text()
    last = text.rstrip("\n").rsplit("\n", 1)[1]
    cut = text[: int(len(text) - len(last) - 1 + len(last) * kept)] if kept > 0 else text[:kept]
    assert cut.endswith(",") == (kept < 0) and cut.count("\n") == 4
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(gzip.compress(cut.encode()) if suffix.endswith(".gz") else cut.encode())
    assert _error(path) == (
        f"{path}: line 5: the file ends mid-row (truncated?); cut that line off to read the "
        "rows before it."
    )


def test_a_whole_last_row_without_its_line_end_reads(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.csv", _rows())
    path.write_text(path.read_text().rstrip("\n"))
    assert len(load_csvs(path)) == 3


def test_a_short_row_with_its_line_end_is_a_bad_row_not_a_cut(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.csv", _rows())
    path.write_text(path.read_text() + "2,abab\n")
    message = _error(path)
    assert "line 5: device is empty" in message and "mid-row" not in message


def test_a_file_of_two_device_hashes_is_refused_naming_it(tmp_path: Path) -> None:
    """A sweep CSV is one machine's; where its rows carry two device hashes the statistics
    refuse it, and the refusal names the file (not "the frame") and the two hashes."""
    from softcuda.timings import stats

    rows = _rows(n=4)
    for r in rows[2:]:
        r["device_hash"] = "cd" * 32
    path = _write(tmp_path / "sweep.csv", rows)
    with pytest.raises(DataError) as info:
        stats.single_device(load_csvs(path))
    assert str(info.value) == (
        f"{path}: holds the rows of 2 device hashes under device 'NVIDIA H200' "
        "(abababababab, cdcdcdcdcdcd), so of more than one machine or driver; split the CSV "
        "by device_hash, or pass one device's rows"
    )
    other = _write(tmp_path / "other.csv", _rows("GPU B"))  # hash abab... too
    both = load_csvs([other, path])
    with pytest.raises(DataError) as info:
        stats.single_device(both)
    assert str(info.value) == (
        f"{other}, {path}: hold the timings of 2 devices (GPU B, NVIDIA H200); pass one "
        "device's rows"
    )
    with pytest.raises(DataError, match=rf"^{path}: holds the rows of 2 device hashes"):
        stats.single_device(both[both["device"] == "NVIDIA H200"])


def test_a_frame_of_two_devices_from_one_file_names_it(tmp_path: Path) -> None:
    from softcuda.timings import stats

    path = _write(tmp_path / "sweep.csv", _rows("GPU A", 2) + _rows("GPU B", 2))
    with pytest.raises(DataError) as info:
        stats.single_device(load_csvs(path))
    assert str(info.value) == (
        f"{path}: holds the timings of 2 devices (GPU A, GPU B); split the CSV by device, or "
        "pass one device's rows"
    )


@pytest.mark.parametrize(
    ("name", "meta", "date"),
    [
        (
            "sweep-default-20261203T113331Z.csv",
            {"started_at": "2026-12-01T23:59:59Z"},
            "2026-12-01",
        ),
        ("sweep-default-20261203T113331Z.csv", None, "2026-12-03"),
        ("sweep-default-20261203T113331Z-2.csv.gz", {"started_at": 5}, "2026-12-03"),
        ("sweep-default-20261203T113331Z.csv", "{ damaged", "2026-12-03"),
        ("mine.csv", {"started_at": "2026-11-30T01:00:00Z"}, "2026-11-30"),
        ("mine.csv", {}, None),
        ("sweep-default-20261399T113331Z.csv", None, None),
    ],
)
def test_sweep_date_reads_the_metadata_then_the_file_name(
    tmp_path: Path, name: str, meta: object, date: str | None
) -> None:
    from softcuda.timings.load import metadata_path, sweep_date

    path = tmp_path / name
    if meta is not None:
        text = meta if isinstance(meta, str) else json.dumps(meta)
        metadata_path(path).write_text(text)
    assert sweep_date(path) == date
