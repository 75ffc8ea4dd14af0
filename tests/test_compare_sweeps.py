"""softcuda compare-sweeps: two raw CSVs in, the report (or JSON) out, exit 0 / 1 / 2."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from softcuda_cli import main

from softcuda.analysis.compare import compare_sweeps, format_comparison
from tests.test_stability_check import cpu_runs, runs


def _csvs(tmp_path, frames) -> list[str]:
    """The two runs written as a plain and a gzipped CSV, as a sweep and the repository keep
    them."""
    paths = [tmp_path / "run-1.csv", tmp_path / "run-2.csv.gz"]
    for frame, path in zip(frames, paths):
        frame.to_csv(path, index=False)
    return [str(p) for p in paths]


def test_two_runs_that_agree_are_stable(tmp_path):
    a, b = _csvs(tmp_path, runs())
    result = CliRunner().invoke(main, ["compare-sweeps", a, b])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"comparing {a} and {b}\n")
    assert "add      same" in result.stdout
    assert "assignments identical; 100.0% of medians within 10% -> STABLE" in result.stdout


def test_json_says_the_same(tmp_path):
    a, b = _csvs(tmp_path, runs())
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, "--json", "--metric", "resident"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["a"], data["b"], data["metric"]) == (a, b, "resident")
    assert data["stable"] is True and data["same_assignments"] is True
    assert data["assignments"]["add"]["same"] is True
    assert data["medians"]["within"] == data["medians"]["compared"] > 0


def test_runs_whose_assignments_differ_fail_the_verdict(tmp_path):
    one, two = runs()
    two.loc[two["backend"] == "cpu_blas", "seconds"] *= 1e3  # run 2: the CPU backend never wins
    a, b = _csvs(tmp_path, [one, two])
    result = CliRunner().invoke(main, ["compare-sweeps", a, b])
    assert result.exit_code == 1, result.output
    assert "DIFFERENT" in result.stdout and "-> NOT STABLE" in result.stdout
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, "--json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["stable"] is False


def test_an_unfinished_sweep_is_named(tmp_path):
    """An interrupted sweep lacks its retries and added sizes: the report says which run is
    one, from the metadata beside it; a CSV without metadata, or a finished one, is not named."""
    a, b = _csvs(tmp_path, runs())
    (tmp_path / "run-1.meta.json").write_text(json.dumps({"complete": False}))
    (tmp_path / "run-2.meta.json").write_text(json.dumps({"complete": True}))
    result = CliRunner().invoke(main, ["compare-sweeps", a, b])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: ")]
    assert notes == [
        f"note: {a} is an unfinished sweep (its metadata says so): the points it would have "
        "measured again and the sizes it would have added are missing"
    ]
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, "--json"])
    assert json.loads(result.stdout)["unfinished"] == [a]
    assert "different specs" not in result.stdout  # neither names its spec
    (tmp_path / "run-1.meta.json").unlink()
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, "--json"])
    assert json.loads(result.stdout)["unfinished"] == []


def test_sweeps_of_different_specs_are_named(tmp_path):
    a, b = _csvs(tmp_path, runs())
    for name, stop in (("run-1", 4096), ("run-2", 2048)):
        meta = {"complete": True, "spec": {"ops": {"matmul_tn": {"stop": stop}}}}
        (tmp_path / f"{name}.meta.json").write_text(json.dumps(meta))
    result = CliRunner().invoke(main, ["compare-sweeps", a, b])
    assert "note: the two sweeps ran different specs" in result.stdout
    assert (
        json.loads(CliRunner().invoke(main, ["compare-sweeps", a, b, "--json"]).stdout)["same_spec"]
        is False
    )
    (tmp_path / "run-2.meta.json").write_text((tmp_path / "run-1.meta.json").read_text())
    result = CliRunner().invoke(main, ["compare-sweeps", a, b])
    assert "different specs" not in result.stdout


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("none.csv", None, "none.csv: does not exist"),
        ("bad.csv", "schema,device\n2,x\n", "bad.csv: missing column(s)"),
        ("empty.csv.gz", "", "empty.csv.gz: "),
    ],
)
def test_a_missing_or_bad_csv_is_one_sentence_and_exit_2(tmp_path, name, text, words):
    a, _ = _csvs(tmp_path, runs())
    other = tmp_path / name
    if text is not None:
        other.write_text(text)
    result = CliRunner().invoke(main, ["compare-sweeps", a, str(other)])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and words in line


def test_an_unknown_metric_is_a_usage_error(tmp_path):
    a, b = _csvs(tmp_path, runs())
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, "--metric", "fastest"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "'fastest' is not one of" in result.output


def _float64(frame: pd.DataFrame) -> pd.DataFrame:
    """The same rows as a float64 sweep writes them (its probe rows stay float32)."""
    return frame.assign(dtype=frame["dtype"].where(frame["backend"] == "machine", "float64"))


@pytest.mark.parametrize("as_json", [False, True], ids=["report", "json"])
def test_sweeps_with_nothing_in_common_are_an_input_error(tmp_path, as_json):
    """A float32 and a float64 sweep: --json ended in KeyError: 'backend' (an empty table's
    column of object dtype selected columns, not rows); the report said NOT STABLE, exit 1."""
    one, two = runs()
    a, b = _csvs(tmp_path, [one, _float64(two)])
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, *(["--json"] if as_json else [])])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line == (
        f"error: {a} and {b} have no (op, dtype, backend, size) in common (dtypes float32 and "
        "float64), so there is nothing to compare: give two sweeps of one spec"
    )


def test_a_comparison_with_nothing_in_common_still_reads(tmp_path):
    one, two = runs()
    c = compare_sweeps([one, _float64(two)])
    assert c.to_dict()["medians"]["compared"] == 0 and not c.stable
    assert "nothing to compare" in format_comparison(c)
    one, two = runs()  # first attempts apart too: a retried point in run 2
    again = two[two["size"] == two["size"].min()].assign(attempt=1)
    c = compare_sweeps([one, _float64(pd.concat([two, again], ignore_index=True))])
    assert c.firsts is not None and c.firsts.empty


def test_the_verdict_is_the_same_either_way_round():
    """Only run 1's ops were judged: an op that run 2 alone decided passed A against B and
    failed B against A."""
    one, two = runs()
    two = pd.concat([two, two.assign(op="mul")], ignore_index=True)
    there, back = compare_sweeps([one, two]), compare_sweeps([two, one])
    assert there.same_assignments is back.same_assignments is False
    assert there.to_dict()["assignments"]["mul"]["same"] is False
    assert "mul      DIFFERENT  run 1: not measured" in format_comparison(there)


def test_a_cpu_only_sweep_against_itself_is_stable_and_the_restated_verdict_not_applicable(
    tmp_path,
):
    """It printed both STABLE and NOT STABLE (restated): the restated verdict needs CUDA
    kernel-only medians, which a CPU-only sweep lacks.  The exit status is the first verdict's."""
    one, _ = cpu_runs()
    a, b = _csvs(tmp_path, [one, one])
    result = CliRunner().invoke(main, ["compare-sweeps", a, b])
    assert result.exit_code == 0, result.output
    assert "assignments identical; 100.0% of medians within 10% -> STABLE\n" in result.stdout
    assert "-> not applicable (restated: no CUDA kernel-only medians to compare)" in result.stdout
    assert "NOT STABLE" not in result.stdout
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["stable"] is True
    assert data["restated"]["applicable"] is False and data["restated"]["stable"] is None


def _elsewhere(frame: pd.DataFrame, device: str = "Other GPU", digit: str = "6") -> pd.DataFrame:
    """The same rows as another device measured them (another name, another device hash)."""
    return frame.assign(device=device, device_hash=digit * 64)


@pytest.mark.parametrize("as_json", [False, True], ids=["report", "json"])
def test_sweeps_of_two_devices_are_refused_in_one_sentence(tmp_path, as_json):
    """Two devices' sweeps compared without a word about it: their medians differ by the
    machine, not by the instrument."""
    one, two = runs()
    a, b = _csvs(tmp_path, [one, _elsewhere(two)])
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, *(["--json"] if as_json else [])])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line == (
        f"error: {a} and {b} were measured on different devices (Synthetic GPU, device hash "
        f"{'5' * 12}, and Other GPU, device hash {'6' * 12}), so they are no repeat of one "
        "sweep: compare them only on purpose, with --across-devices"
    )


def test_one_device_name_with_another_hash_is_another_device(tmp_path):
    """Two machines of one name (another driver, say) differ by device hash alone."""
    one, two = runs()
    a, b = _csvs(tmp_path, [one, _elsewhere(two, device="Synthetic GPU")])
    result = CliRunner().invoke(main, ["compare-sweeps", a, b])
    assert result.exit_code == 2, result.output
    assert f"(Synthetic GPU, device hash {'5' * 12}, and Synthetic GPU, device hash" in (
        result.stderr
    )


def test_across_devices_compares_and_says_so_first(tmp_path):
    one, two = runs()
    a, b = _csvs(tmp_path, [one, _elsewhere(two)])
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, "--across-devices"])
    assert result.exit_code == 0, result.output
    first, second = result.stdout.splitlines()[:2]
    assert first == (
        f"note: {a} and {b} are from different devices: Synthetic GPU, device hash {'5' * 12}, "
        f"and Other GPU, device hash {'6' * 12}"
    )
    assert second == f"comparing {a} and {b}"
    assert "-> STABLE\n" in result.stdout
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, "--across-devices", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["same_device"] is False
    assert data["devices"] == [
        f"Synthetic GPU, device hash {'5' * 12}",
        f"Other GPU, device hash {'6' * 12}",
    ]
    # one device: no note, and the flag changes nothing
    a, b = _csvs(tmp_path, runs())
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, "--across-devices"])
    assert result.exit_code == 0 and result.stdout.startswith(f"comparing {a} and {b}\n")
    result = CliRunner().invoke(main, ["compare-sweeps", a, b, "--json"])
    assert json.loads(result.stdout)["same_device"] is True
