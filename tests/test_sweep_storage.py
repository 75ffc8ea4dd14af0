"""The sweep's files (softcuda.sweep.storage, folders): CSV and metadata names and writes, torn
lines after a kill, files of another version, the locks on a results folder and a profile."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from softcuda_cli import main

from softcuda.config import load_config
from softcuda.errors import SoftcudaError
from softcuda.sweep.machine import detect
from softcuda.sweep.runner import Sweep
from softcuda.sweep.spec import spec_from_dict
from softcuda.timings import schema
from tests.sweep_helpers import TINY, interrupted_sweep, no_settling, one_error_line, write_spec


def test_the_profile_and_the_metadata_tell_the_time_by_one_clock(tmp_path, monkeypatch):
    from softcuda.sweep import storage

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(storage, "now", lambda: "2030-01-02T03:04:05Z")
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 0, result.output
    (meta,) = Path("results").rglob("*.meta.json")
    times = json.loads(meta.read_text())
    assert times["started_at"] == times["finished_at"] == "2030-01-02T03:04:05Z"
    assert load_config("CONFIG.soft").meta["generated_at"] == "2030-01-02T03:04:05Z"


def test_resuming_a_csv_of_the_older_schema_is_refused(tmp_path):
    spec = spec_from_dict(TINY, "tiny")
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    sweep.folder.mkdir(parents=True)
    old_columns = [c for c in schema.COLUMNS if c != "attempt"]
    sweep.csv_path.write_text(",".join(old_columns) + "\n")
    sweep.write_meta(False)
    with pytest.raises(SoftcudaError, match="another version of softcuda"):
        Sweep(spec, "tiny.yaml", tmp_path, resume=True)


def test_resume_picks_the_unfinished_sweep_of_its_own_spec_name(tmp_path):
    """sweep-tiny-*.meta.json also matches the files of a spec named tiny-more."""
    more = spec_from_dict({**TINY, "name": "tiny-more"}, "tiny-more")
    interrupted_sweep(more, tmp_path, 2)
    tiny = interrupted_sweep(spec_from_dict(TINY, "tiny"), tmp_path, 2)
    interrupted_sweep(more, tmp_path, 2)  # the newest unfinished file that the glob matches
    again = Sweep(spec_from_dict(TINY, "tiny"), "tiny.yaml", tmp_path, resume=True)
    assert again.csv_path == tiny.csv_path


def test_a_spec_name_with_csv_inside_keeps_its_metadata_beside_its_csv(tmp_path, monkeypatch):
    """The writer replaced every ".csv" in the name: `name: v1.csvdata` wrote its metadata
    as sweep-v1.meta.jsondata-..., which --resume and --from never found."""
    from softcuda.timings.load import metadata_path

    monkeypatch.chdir(tmp_path)
    spec = spec_from_dict({**TINY, "name": "v1.csvdata"}, "v1.yaml")
    sweep = interrupted_sweep(spec, "results", 3)
    assert sweep.meta_path == metadata_path(sweep.csv_path)
    assert sweep.meta_path.name == sweep.csv_path.name.removesuffix(".csv") + ".meta.json"
    again = Sweep(spec, "v1.yaml", "results", resume=True)
    assert again.csv_path == sweep.csv_path
    again.run()
    result = CliRunner().invoke(main, ["init", "--from", str(sweep.csv_path), "--out", "C.soft"])
    assert result.exit_code == 0, result.output


def test_resume_after_a_kill_mid_write_measures_the_cut_point_again(tmp_path):
    """A kill while a point's rows went to disk leaves a cut-off last line (and maybe some of
    the point's rows before it): the resumed sweep drops that point, says so, and measures it
    again; the CSV stays readable."""
    from softcuda.timings.load import load_csvs

    spec = spec_from_dict(TINY, "tiny")
    sweep = interrupted_sweep(spec, tmp_path, 4)
    whole = sweep.csv_path.read_bytes()
    last = pd.read_csv(sweep.csv_path).iloc[-1]
    cut_point = (last["op"], int(last["size"]))
    lines = whole.splitlines(keepends=True)
    sweep.csv_path.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])  # cut inside its line
    with pytest.warns(UserWarning, match=f"stopped while writing {cut_point[0]} {cut_point[1]}"):
        again = Sweep(spec, "tiny.yaml", tmp_path, resume=True)
    measured = []
    frame = again.run(lambda p, i, t: measured.append((p.op, p.size)))
    assert cut_point in measured
    on_disk = load_csvs([sweep.csv_path], attempts="all")  # parses: no torn line left
    assert len(on_disk) == len(frame)
    counts = on_disk[on_disk["phase"] == "wall"].groupby(["op", "size", "backend"]).size()
    assert (counts == 3).all()  # every point whole, none twice


def test_a_cut_off_line_that_began_a_point_of_its_own_leaves_the_point_before(tmp_path):
    from softcuda.sweep.storage import drop_torn_point

    header = ",".join(schema.COLUMNS) + "\r\n"
    row = "2,h,d,{op},{size},{size},float32,cpu_fallback,pageable,wall,{i},1e-06,0,0\r\n"
    a = "".join(row.format(op="add", size=256, i=i) for i in range(3))
    path = tmp_path / "x.csv"
    path.write_bytes((header + a + row.format(op="add", size=512, i=0)[:25]).encode())
    assert drop_torn_point(path) == "a cut-off line"
    assert path.read_bytes() == (header + a).encode()
    b = "".join(row.format(op="add", size=512, i=i) for i in range(2))
    path.write_bytes((header + a + b + "2,h,d,ad").encode())  # too short to tell: 512 goes
    assert drop_torn_point(path) == "add 512" and path.read_bytes() == (header + a).encode()
    cut = row.format(op="add", size=512, i=2)[:40]  # past the size: the same point, which goes
    path.write_bytes((header + a + b + cut).encode())
    assert drop_torn_point(path) == "add 512" and path.read_bytes() == (header + a).encode()
    assert drop_torn_point(path) is None  # a whole file is left as it is
    path.write_bytes(b"schema,device")  # stopped inside the header
    assert drop_torn_point(path) == "a cut-off line" and path.read_bytes() == b""


def test_resume_names_the_line_of_a_bad_row_in_one_sentence(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec_path = write_spec(tmp_path)
    sweep = interrupted_sweep(spec_from_dict(TINY, "tiny"), "results", 3)
    n = len(sweep.csv_path.read_text().splitlines())
    with open(sweep.csv_path, "a") as fh:
        fh.write("garbage,,,\r\n")
    result = CliRunner().invoke(main, ["init", "--spec", str(spec_path), "--resume"])
    assert result.exit_code == 2, result.output
    assert f"line {n + 1}:" in result.output and "Traceback" not in result.output
    assert "Start a new sweep without --resume" in result.output


def _frozen_clock(monkeypatch):
    """Every sweep starts in the same second."""
    import datetime as dt

    from softcuda.sweep import storage

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2026, 1, 1, tzinfo=tz)

    monkeypatch.setattr(storage._dt, "datetime", Frozen)


def test_two_sweeps_started_in_the_same_second_write_two_files(tmp_path, monkeypatch):
    _frozen_clock(monkeypatch)
    spec = spec_from_dict(TINY, "tiny")
    first, second = Sweep(spec, "tiny.yaml", tmp_path), Sweep(spec, "tiny.yaml", tmp_path)
    assert first.csv_path == second.csv_path  # picked before either made its file
    first.run()
    second.run()  # its picked name was taken in the meantime: it takes the next one
    assert second.csv_path.name == "sweep-tiny-20260101T000000Z-2.csv"
    assert second.meta_path != first.meta_path
    for sweep in (first, second):
        assert len(pd.read_csv(sweep.csv_path)) == len(sweep.rows)
    third = Sweep(spec, "tiny.yaml", tmp_path)
    assert third.csv_path.name.endswith("-3.csv")
    first.csv_path.unlink()  # a name whose metadata is left is taken too
    assert Sweep(spec, "tiny.yaml", tmp_path).csv_path.name.endswith("-3.csv")


def test_resume_takes_the_newest_of_sweeps_started_in_the_same_second(tmp_path, monkeypatch):
    """By name, "...Z-2.meta.json" sorts before "...Z.meta.json" and "-10" before "-2"."""
    _frozen_clock(monkeypatch)
    spec = spec_from_dict(TINY, "tiny")
    started = [interrupted_sweep(spec, tmp_path, 2).csv_path for _ in range(11)]
    assert started[-1].name.endswith("-11.csv")
    assert Sweep(spec, "tiny.yaml", tmp_path, resume=True).csv_path == started[-1]


def test_a_damaged_gzip_csv_is_one_sentence(tmp_path):
    import gzip

    from softcuda.timings.load import load_csvs

    data = bytearray(
        gzip.compress(("\n".join(",".join(schema.COLUMNS) for _ in range(99))).encode())
    )
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "bad.csv.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(SoftcudaError, match=r"bad\.csv\.gz: cannot be read \(its compressed data"):
        load_csvs(path)


def test_a_point_is_written_in_one_write(tmp_path, monkeypatch):
    """So that a kill leaves a cut-off line (which a resume sees), not a point cut between lines."""
    import os

    from softcuda.sweep.storage import RowWriter

    writer = RowWriter(tmp_path / "x.csv", exclusive=True)
    calls = []
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: calls.append(len(data)) or real(fd, data))
    row = (2, "h" * 64, "d", "add", 256, "256", "float32", "b", "pinned", "h2d", 0, 1e-6, 0, 0)
    writer.write([row] * 500)  # about 60 KB
    writer.close()
    assert len(calls) == 1 and calls[0] > 50_000
    with pytest.raises(FileExistsError):
        RowWriter(tmp_path / "x.csv", exclusive=True)


def test_a_sweep_keeps_seconds_to_four_significant_digits(tmp_path):
    from softcuda.sweep.measure import Point, rows
    from softcuda.sweep.storage import RowWriter

    times = [3.051000007303628e-06, 0.123456789, 1.0, 2.5e-9]
    machine = SimpleNamespace(device_hash="h", label="d")
    kept = rows(machine, Point("add", 256, "b", 0), "256", "float32", "pinned", "h2d", times, 0)
    assert [r[11] for r in kept] == [schema.kept(t) for t in times]
    writer = RowWriter(tmp_path / "x.csv", exclusive=True)
    writer.write(kept)
    writer.close()
    lines = (tmp_path / "x.csv").read_text().splitlines()
    text = [line.split(",")[schema.COLUMNS.index("seconds")] for line in lines[1:]]
    assert text == ["3.051e-06", "0.1235", "1.0", "2.5e-09"]
    # what the CSV reads back is what the sweep kept in memory, bit for bit
    assert [float(t) for t in text] == [r[11] for r in kept]
    for value, t in zip(text, times):
        assert float(value) == pytest.approx(t, rel=5e-4)  # half a unit of the 4th digit


def test_resume_leaves_a_file_of_another_version_as_it_is(tmp_path):
    spec = spec_from_dict(TINY, "tiny")
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    sweep.folder.mkdir(parents=True)
    old = ",".join(c for c in schema.COLUMNS if c != "attempt") + "\n2,h,d,add,25"  # cut off
    sweep.csv_path.write_text(old)
    sweep.write_meta(False)
    with pytest.raises(SoftcudaError, match="another version of softcuda"):
        Sweep(spec, "tiny.yaml", tmp_path, resume=True)
    assert sweep.csv_path.read_text() == old


def test_a_results_folder_that_cannot_take_the_rows_is_refused_before_settling(
    tmp_path, monkeypatch
):
    from softcuda.device import slug

    monkeypatch.chdir(tmp_path)
    no_settling(monkeypatch)
    spec = str(write_spec(tmp_path, settle_s=5))
    folder = Path("results") / slug(detect().label)
    folder.parent.mkdir()
    folder.write_text("a file where the device's folder goes\n")
    line = one_error_line(CliRunner().invoke(main, ["init", "--spec", spec]))
    assert f"{folder} is a file, not a folder" in line
    folder.unlink()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: real(p, mode) and Path(p) != folder)
    line = one_error_line(CliRunner().invoke(main, ["init", "--spec", spec]))
    assert f"{folder} is not a folder this user can write to" in line
    assert not list(Path("results").rglob("*.csv")) and not Path("CONFIG.soft").exists()


def test_metadata_that_cannot_be_written_leaves_the_previous_and_no_temporary(
    tmp_path, monkeypatch
):
    from softcuda.sweep import storage

    path = tmp_path / "sweep.meta.json"
    storage.write_meta(path, {"complete": False})

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(storage.os, "replace", full)
    with pytest.raises(OSError):
        storage.write_meta(path, {"complete": True})
    assert json.loads(path.read_text()) == {"complete": False}
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.meta.json"]


def test_a_lock_is_held_once_and_names_its_holder(tmp_path):
    from softcuda.sweep import folders

    lock = tmp_path / folders.LOCK_NAME
    with folders.hold(lock, "the folder"):
        assert lock.read_text() == f"{os.getpid()}\n"
        with pytest.raises(SoftcudaError) as info, folders.hold(lock, "the folder"):
            pass
        assert str(info.value).startswith(
            f"the folder is in use by another softcuda init (process {os.getpid()}); "
        )
    assert not lock.exists()  # released: no file is left in the folder
    with folders.hold(lock, "the folder"):  # and it can be held again
        pass


def test_an_init_refused_by_the_profile_lock_leaves_no_folder_behind(tmp_path, monkeypatch):
    from softcuda.sweep import folders

    monkeypatch.chdir(tmp_path)
    with folders.hold(Path(".CONFIG.soft.lock"), "CONFIG.soft"):
        result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
        assert "CONFIG.soft is in use by another softcuda init" in one_error_line(result)
    assert not Path("results").exists()


SLOW = {**TINY, "name": "slow", "repetitions": {**TINY["repetitions"], "min_time_s": 60.0}}
"""A sweep whose first point lasts a minute."""


@contextlib.contextmanager
def another_init(*args: str):
    """A second `softcuda init` of SLOW; yields its process id once it measures, and kills it
    (as a crash would end it) after."""
    Path("slow.yaml").write_text(yaml.safe_dump(SLOW))
    command = [sys.executable, "-m", "softcuda_cli", "init", "--spec", "slow.yaml", *args]
    other = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        for line in other.stderr:  # its progress lines: once one comes, it is measuring
            if line.startswith(b"measuring: "):
                break
        yield other.pid
    finally:
        other.kill()  # its locks go with it: the OS releases them
        other.wait()


def test_a_second_sweep_in_one_folder_or_on_one_profile_is_refused(tmp_path, monkeypatch):
    """Two `init --resume` of one unfinished sweep appended to one CSV (many duplicate
    (point, repetition) keys); two plain inits in one folder raced for CONFIG.soft."""
    monkeypatch.chdir(tmp_path)
    # SLOW as far as --resume can tell (the time budget may change), and quick to give up
    spec = tmp_path / "budget.yaml"
    spec.write_text(yaml.safe_dump({**SLOW, "time_budget_s": 1e-9}))
    with another_init() as pid:
        for args in ([], ["--resume"]):
            result = CliRunner().invoke(main, ["init", "--spec", str(spec), *args])
            line = one_error_line(result)
            assert "is in use by another softcuda init (process " + str(pid) in line
        (csv,) = Path("results").rglob("sweep-slow-*.csv")
        assert len(list(csv.parent.glob("*.csv"))) == 1  # nothing started beside it
    with another_init("--results", "elsewhere") as pid:  # another folder, the same profile
        result = CliRunner().invoke(main, ["init", "--spec", str(spec)])
        expected = f"CONFIG.soft is in use by another softcuda init (process {pid})"
        assert expected in one_error_line(result)
        result = CliRunner().invoke(main, ["init", "--from", str(csv)])
        assert expected in one_error_line(result)
    # the processes that held them were killed: the locks went with them (their files stay,
    # held by no one), and a sweep runs, and removes the files it held when it ends
    assert Path(".CONFIG.soft.lock").exists()
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 0, result.output
    assert not list(Path("results").rglob("*.lock")) and not Path(".CONFIG.soft.lock").exists()
