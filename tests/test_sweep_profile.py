"""Deciding a profile from a sweep (softcuda.sweep.profile) through `softcuda init`: a CPU
profile verify accepts, archiving another device's profile, `init --from` and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from softcuda_cli import main

from softcuda.config import load_config
from softcuda.sweep.runner import Sweep
from softcuda.sweep.spec import spec_from_dict
from tests.profiles import default_profile
from tests.sweep_helpers import TINY, one_error_line, write_spec


def test_init_writes_a_cpu_profile_that_verify_accepts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, settle_s=0.01)  # one round of windows, then it gives up
    result = CliRunner().invoke(main, ["init", "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    assert "settling: timing fixed workloads" in result.output
    assert "machine not steady after" in result.output and "fewer than 3 windows" in result.output
    assert "device_hash" in result.output and "decisions (e2e_pinned)" in result.output
    cfg = load_config("CONFIG.soft")
    assert cfg.device_type == "cpu" and set(cfg.rules) >= {"matmul", "add", "relu"}
    assert "vs" in cfg.rules["matmul"][0].note[0] and "at 8" in cfg.rules["matmul"][0].note[0]
    assert "not measured" in cfg.rules["relu"][0].note[0]
    assert list((tmp_path / "results").rglob("sweep-tiny-*.csv"))
    verify = CliRunner().invoke(main, ["verify", "--config", "CONFIG.soft"])
    assert verify.exit_code == 0, verify.output


def test_a_profile_of_another_device_is_archived_before_it_is_replaced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    other = default_profile("f" * 64, "Another Machine")
    Path("CONFIG.soft").write_text(other)
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 0, result.output
    (archived,) = Path("results/another-machine").glob("CONFIG-*.soft")
    assert archived.read_text() == other and "archived as" in result.output
    assert load_config("CONFIG.soft").device_type == "cpu"
    assert "profiled another device: archived as" in result.output
    # a profile of this same device is simply replaced (atomically), not archived
    again = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert again.exit_code == 0 and "archived" not in again.output
    # one that cannot be read is kept too, and said to be unreadable
    Path("CONFIG.soft").write_text("not a profile\n")
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 0 and "could not be read: archived as" in result.output
    (kept,) = Path("results/unreadable").glob("CONFIG-*.soft")
    assert kept.read_text() == "not a profile\n"


def test_decide_again_from_a_raw_csv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path)
    assert CliRunner().invoke(main, ["init", "--spec", str(spec)]).exit_code == 0
    first = load_config("CONFIG.soft")
    (csv,) = Path("results").rglob("sweep-tiny-*.csv")
    result = CliRunner().invoke(main, ["init", "--from", str(csv), "--out", "again.soft"])
    assert result.exit_code == 0, result.output
    assert load_config("again.soft").rules == first.rules


@pytest.fixture
def finished_sweep(tmp_path):
    """A finished tiny sweep's CSV (its metadata beside it), measured on the clock."""
    sweep = Sweep(spec_from_dict(TINY, "tiny"), "tiny.yaml", tmp_path / "results")
    sweep.run()
    return sweep.csv_path


def _no_type(meta, rows):
    del meta["machine"]["type"]
    return rows


def _backends_5(meta, rows):
    meta["backends"] = 5
    return rows


def _machine_3(meta, rows):
    meta["machine"] = 3
    return rows


def _backends_nested(meta, rows):
    meta["backends"] = [[1]]
    return rows


def _settle_s_too_large(meta, rows):
    meta["spec"]["settle_s"] = 10**400
    return rows


def _model_two_lines(meta, rows):
    meta["machine"]["cpu_model"] = "AMD\nEPYC"
    return rows


def _hash_two_lines(meta, rows):
    meta["device_hash"] = "ab\ncd"
    return rows


def _hash_string_two_lines(meta, rows):
    meta["hash_string"] += "\n[ops]"
    return rows


def _unknown_op(meta, rows):
    return rows.assign(op=rows["op"].where(rows["op"] != "add", "frobnicate"))


def _unknown_backends(meta, rows):
    return rows.assign(backend=rows["backend"].where(rows["backend"] == "machine", "cpu_magic"))


def _probes_only(meta, rows):
    return rows[rows["backend"] == "machine"]


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (_no_type, "meta.json: machine.type is missing"),
        (_backends_5, "meta.json: backends is 5, not a list of backend ids"),
        (_machine_3, "meta.json: machine is 3, not an object"),
        (_backends_nested, "meta.json: backends is [[1]], not a list of backend ids"),
        (_model_two_lines, "meta.json: machine.cpu_model is 'AMD\\nEPYC', not one line of "),
        (_hash_two_lines, "meta.json: device_hash is 'ab\\ncd', not one line of printable text"),
        (_hash_string_two_lines, "meta.json: hash_string is 'cpu_model="),
        (_unknown_op, ".csv: holds timings of op(s) frobnicate, which this softcuda does not know"),
        (_settle_s_too_large, "meta.json: spec: settle_s: must be a number of at most 1.8e308"),
        (_unknown_backends, "backend(s) cpu_magic, which this softcuda does not know"),
        (_probes_only, "no timings of any op"),
    ],
)
def test_decide_again_refuses_what_it_cannot_decide_from(
    finished_sweep, tmp_path, monkeypatch, damage, words
):
    """Metadata that does not describe a machine, and a CSV whose timings are all of unknown
    backends or that holds only probe rows: one sentence, exit 2, no profile.  A profile of
    DEFAULT.soft's rules alone would pass for a measurement, so none is written."""
    monkeypatch.chdir(tmp_path)
    meta_path = finished_sweep.with_name(finished_sweep.name.replace(".csv", ".meta.json"))
    meta = json.loads(meta_path.read_text())
    rows = pd.read_csv(finished_sweep, dtype={"shape": str})
    rows = damage(meta, rows)
    meta_path.write_text(json.dumps(meta))
    rows.to_csv(finished_sweep, index=False)
    result = CliRunner().invoke(main, ["init", "--from", str(finished_sweep), "--out", "C.soft"])
    assert words in one_error_line(result)
    assert not Path("C.soft").exists()


def test_decide_again_refuses_an_unfinished_sweep_and_one_that_a_sweep_holds(
    finished_sweep, tmp_path, monkeypatch
):
    """--from decided from a CSV that a running --resume appended to, and from an interrupted
    sweep, without a word: a profile of part of a sweep is not what its spec measures."""
    from softcuda.sweep import folders

    monkeypatch.chdir(tmp_path)
    meta_path = finished_sweep.with_name(finished_sweep.name.replace(".csv", ".meta.json"))
    meta = json.loads(meta_path.read_text())
    with folders.hold(finished_sweep.parent / folders.LOCK_NAME, "that folder"):
        result = CliRunner().invoke(
            main, ["init", "--from", str(finished_sweep), "--out", "C.soft"]
        )
        expected = f"{finished_sweep.parent} is in use by another softcuda init (process "
        assert expected in one_error_line(result)
    for complete in (False, None):
        meta_path.write_text(json.dumps({**meta, "complete": complete}))
        result = CliRunner().invoke(
            main, ["init", "--from", str(finished_sweep), "--out", "C.soft"]
        )
        line = one_error_line(result)
        assert f"{meta_path}: the sweep is not complete" in line
        assert f"softcuda init --resume --spec tiny.yaml --results {tmp_path / 'results'}" in line
    meta_path.write_text(json.dumps({**meta, "complete": False, "spec_path": "a.yaml\nb"}))
    result = CliRunner().invoke(main, ["init", "--from", str(finished_sweep), "--out", "C.soft"])
    assert "softcuda init --resume --spec SPEC --results" in one_error_line(result)
    assert not Path("C.soft").exists()


@pytest.mark.parametrize("spec_path", [None, 3, "", "sweeps/x.yaml\n[ops]"])
def test_decide_again_records_the_csv_where_the_metadata_has_no_spec_path(
    finished_sweep, tmp_path, monkeypatch, spec_path
):
    """spec_path is provenance only: without a usable one the profile was refused as
    "C.soft:65: [sweep] spec: must not be empty", a profile --from never wrote."""
    monkeypatch.chdir(tmp_path)
    meta_path = finished_sweep.with_name(finished_sweep.name.replace(".csv", ".meta.json"))
    meta = json.loads(meta_path.read_text())
    if spec_path is None:
        del meta["spec_path"]
    else:
        meta["spec_path"] = spec_path
    meta_path.write_text(json.dumps(meta))
    result = CliRunner().invoke(main, ["init", "--from", str(finished_sweep), "--out", "C.soft"])
    assert result.exit_code == 0, result.output
    assert load_config("C.soft").sweep["spec"] == str(finished_sweep)


def test_a_bad_spec_stored_in_the_metadata_is_named_as_that(finished_sweep, tmp_path, monkeypatch):
    """init --from and --resume read the spec the metadata stores: an error in it names the
    .meta.json, not the YAML file it was once read from."""
    monkeypatch.chdir(tmp_path)
    meta_path = finished_sweep.with_name(finished_sweep.name.replace(".csv", ".meta.json"))
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "spec": {**meta["spec"], "dtype": "float16"}}))
    result = CliRunner().invoke(main, ["init", "--from", str(finished_sweep), "--out", "C.soft"])
    line = one_error_line(result)
    assert f"{meta_path}: spec: dtype: must be one of float32, float64" in line
    assert "tiny.yaml" not in line
    spec = write_spec(tmp_path)
    meta_path.write_text(
        json.dumps({**meta, "complete": False, "spec": {**meta["spec"], "scan": -1}})
    )
    result = CliRunner().invoke(main, ["init", "--spec", str(spec), "--resume"])
    found = meta_path.relative_to(tmp_path)  # as --resume finds it, under ./results
    assert f"{found}: spec: scan: must be an integer >= 0" in one_error_line(result)
    meta_path.write_text(json.dumps([meta]))  # not an object at all
    result = CliRunner().invoke(main, ["init", "--spec", str(spec), "--resume"])
    assert f"{found}: holds [" in one_error_line(result)
