"""softcuda diff-config and softcuda.analysis.diff, on crafted pairs of profiles."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from softcuda_cli import main

from softcuda.analysis.diff import diff_configs, format_diff
from softcuda.config import parse_config
from tests.test_config import DESIGN_EXAMPLE

# The CONFIG.soft example of docs/design.md, verbatim but for the hash.
BASE = DESIGN_EXAMPLE.replace("<sha256 of gpu_name+compute_cap+vram+driver>", "aaaa")


def _diff(tmp_path, new_text: str, *extra: str, old_text: str = BASE):
    a, b = tmp_path / "a.soft", tmp_path / "b.soft"
    a.write_text(old_text)
    b.write_text(new_text)
    return CliRunner().invoke(main, ["diff-config", str(a), str(b), *extra])


def test_identical_profiles_exit_0(tmp_path):
    result = _diff(tmp_path, BASE)
    assert result.exit_code == 0, result.output
    assert "assignments: same" in result.output and "device: same" in result.output
    cfg = parse_config(BASE, "a.soft")
    assert diff_configs(cfg, cfg).same_assignments


def test_notes_bus_and_sweep_do_not_count(tmp_path):
    new = (
        BASE.replace(
            "matmul | size >= 512", "# cuda_tiled 1.2 ms vs cpu_blas 9.9 ms\nmatmul | size >= 512"
        )
        + "\n[bus]\nh2d_pinned_gbps = 25.0\n\n[sweep]\nmetric = e2e_pinned\n"
    )
    result = _diff(tmp_path, new)
    assert result.exit_code == 0, result.output
    assert "[bus] h2d_pinned_gbps: (absent) -> 25.0" in result.output


def test_backend_changed_in_one_bucket_exit_1_and_named(tmp_path):
    result = _diff(tmp_path, BASE.replace("= cuda_naive", "= cuda_blas"))
    assert result.exit_code == 1, result.output
    assert "matmul:" in result.output
    assert "~ 128 <= size < 512: cuda_naive -> cuda_blas" in result.output
    assert "backends added:   cuda_blas" in result.output
    assert "backends removed: cuda_naive" in result.output
    assert "assignments: DIFFER (1 op)" in result.output


def test_threshold_moved_reports_old_new_and_ratio(tmp_path):
    new = BASE.replace("size < 128 ", "size < 256 ").replace("128 <= size", "256 <= size")
    result = _diff(tmp_path, new, "--json")
    assert result.exit_code == 1, result.output
    (op,) = json.loads(result.output)["ops"]
    assert op["op"] == "matmul"
    (move,) = op["thresholds"]
    assert move["old_size"] == 128 and move["new_size"] == 256 and move["ratio"] == 2.0
    assert move["kind"] == "moved"
    assert (move["old_below"], move["old_above"]) == ("cpu_blas", "cuda_naive")
    text = _diff(tmp_path, new).output
    assert "threshold cpu_blas -> cuda_naive: size 128 -> 256 (x2)" in text


def test_threshold_moved_and_retargeted_is_paired(tmp_path):
    old = BASE.replace("matmul | size >= 512       = cuda_tiled\n", "").replace(
        "128 <= size < 512", "size >= 128"
    )
    new = old.replace("size < 128 ", "size < 64 ").replace("size >= 128", "size >= 64")
    new = new.replace("cuda_naive", "cuda_tiled")
    diff = diff_configs(parse_config(old, "a"), parse_config(new, "b"))
    (move,) = diff.ops[0].thresholds
    assert (move.old_size, move.new_size, move.ratio) == (128, 64, 0.5)
    assert (move.old_above, move.new_above) == ("cuda_naive", "cuda_tiled")


def test_threshold_added_when_an_any_bucket_splits(tmp_path):
    new = BASE.replace(
        "add    | any               = cuda_elementwise",
        "add | size < 4096 = cpu_blas\nadd | size >= 4096 = cuda_elementwise",
    )
    diff = diff_configs(parse_config(BASE, "a"), parse_config(new, "b"))
    (op,) = diff.ops
    assert op.op == "add" and {c.kind for c in op.buckets} == {"added", "removed"}
    (t,) = op.thresholds
    assert t.kind == "added" and t.new_size == 4096 and t.ratio is None
    assert "threshold added at size 4,096: cpu_blas -> cuda_elementwise" in format_diff(
        diff, "a", "b"
    )


def test_device_fields_only_exit_0_but_shown(tmp_path):
    new = BASE.replace("device_hash  = aaaa", "device_hash  = bbbb").replace("8192", "16384")
    result = _diff(tmp_path, new)
    assert result.exit_code == 0, result.output
    assert "[meta] device_hash: aaaa -> bbbb" in result.output
    assert "[device] vram_mb: 8192 -> 16384" in result.output
    assert "assignments: same" in result.output


def test_op_only_in_one_profile(tmp_path):
    new = BASE.replace("relu   | any               = cuda_elementwise\n", "")
    new = new.replace("add    | any", "exp | any = cpu_blas\nadd    | any")
    result = _diff(tmp_path, new, "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    assert data["ops_only_a"] == ["relu"] and data["ops_only_b"] == ["exp"]
    assert data["ops"] == [] and data["same_assignments"] is False


@pytest.mark.parametrize(
    ("new_text", "where"),
    [
        (BASE.replace("= cuda_naive", "= cuda_warp"), "b.soft:14: unknown backend"),
        (BASE.replace("matmul | size >= 512       = cuda_tiled\n", ""), "b.soft:14: matmul"),
        (None, "b.soft: cannot read the file"),
    ],
)
def test_malformed_or_missing_file_exit_2_with_file_and_line(tmp_path, new_text, where):
    a = tmp_path / "a.soft"
    a.write_text(BASE)
    if new_text is not None:
        (tmp_path / "b.soft").write_text(new_text)
    result = CliRunner().invoke(main, ["diff-config", str(a), str(tmp_path / "b.soft")])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and where in line


def test_json_is_complete(tmp_path):
    result = _diff(tmp_path, BASE, "--json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["same_assignments"] is True
    assert set(data) == {
        "a", "b", "device", "settings", "ops", "ops_only_a", "ops_only_b", "same_assignments"
    }  # fmt: skip
