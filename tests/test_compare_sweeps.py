"""softcuda compare-sweeps: two raw CSVs in, the report (or JSON) out, exit 0 / 1 / 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from softcuda_cli import main

from tests.test_stability_check import runs


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
