"""`softcuda verify --recheck`: drift beyond the recorded interval of a boundary."""

from __future__ import annotations

import json

from click.testing import CliRunner
from softcuda_cli import main

from softcuda.config import parse_config
from softcuda.device import cpu_identity, hash_fields
from softcuda.sweep.recheck import Recheck, boundaries


def profile(rules: str) -> str:
    return f"""[meta]
soft_version = 0.1.0
device_hash  = {hash_fields(cpu_identity())}

[device]
type = cpu

[ops]
{rules}

[pool]
device     = cpu
block_size = 2097152
"""


# cpu_fallback (einsum, no BLAS) loses to BLAS by ~50x at n = 513: this profile is stale
STALE = """# cpu_blas 1e-04 s vs cpu_fallback 2e-04 s at 380; crossover 400 [390, 410]
matmul | size < 400 = cpu_blas
matmul | size >= 400 = cpu_fallback"""


def test_boundaries_read_the_recorded_interval():
    cfg = parse_config(profile(STALE), "p.soft")
    assert boundaries(cfg) == [("matmul", 400, (390, 410), "cpu_blas", "cpu_fallback")]
    plain = parse_config(
        profile("add | size < 1000 = cpu_blas\nadd | size >= 1000 = cpu_fallback"), "q.soft"
    )
    assert boundaries(plain) == [("add", 1000, (909, 1100), "cpu_blas", "cpu_fallback")]


def test_boundaries_read_where_the_winners_alternate_before_the_crossover_interval():
    note = (
        "# cpu_blas 2.77e-05 s vs cuda_blas 3.39e-05 s at 152; crossover 158 [158, 159]; "
        "winners alternate over [126, 177]: cuda_blas faster at 126; cpu_blas faster at 177"
    )
    rules = f"{note}\nmatmul | size < 158 = cpu_blas\nmatmul | size >= 158 = cuda_blas"
    cfg = parse_config(profile(rules), "p.soft")
    assert boundaries(cfg) == [("matmul", 158, (126, 177), "cpu_blas", "cuda_blas")]


def test_status():
    assert Recheck("matmul", 96, (90, 100), 126, "a", "b", 1.0, 2.0).status == "ok"
    assert Recheck("matmul", 96, (90, 100), 126, "a", "b", 1.0, 0.98).status == "tie"
    assert Recheck("matmul", 96, (90, 100), 126, "a", "b", 1.0, 0.5).status == "DRIFT"


def quick_settle(monkeypatch, seen=None):
    """The recheck settles as the sweep did; here a stand-in that notes how long it may take."""
    from softcuda.sweep import recheck as module
    from softcuda.sweep.settle import Settled

    def fake(cuda, max_s):
        if seen is not None:
            seen.append(max_s)
        return Settled(0.5, True, {"cpu add 2^14": [6.0, 5.0, 5.0, 5.0]})

    monkeypatch.setattr(module, "settle", fake)


def test_verify_recheck_reports_drift_and_fails(tmp_path, monkeypatch, modelled_timings):
    seen = []
    quick_settle(monkeypatch, seen)
    # as BLAS runs on an idle host (on the clock, a loaded host slowed cpu_blas 60-fold and
    # made this a tie): cpu_fallback loses from n ~ 40 on, by ~50x at 513
    modelled_timings(
        {"cpu_blas": lambda n: 1e-5 + 2e-12 * n**3, "cpu_fallback": lambda n: 2e-10 * n**3}
    )
    path = tmp_path / "stale.soft"
    path.write_text(profile(STALE))
    result = CliRunner().invoke(main, ["verify", "--config", str(path), "--recheck"])
    assert result.exit_code == 1, result.output
    assert "recheck: machine steady after 0.5 s (cpu add 2^14 6 -> 5 us)" in result.output
    assert seen == [60]  # no metadata: default.yaml's settling time, once for all boundaries
    result = CliRunner().invoke(main, ["verify", "--config", str(path), "--recheck", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    by_size = {r["size"]: r for r in report["recheck"]}
    assert set(by_size) == {312, 513}  # 390 / 1.25 and 410 * 1.25 + 1
    assert by_size[312]["expected"] == "cpu_blas" and by_size[312]["status"] == "ok"
    above = by_size[513]
    assert above["expected"] == "cpu_fallback" and above["status"] == "DRIFT"


def test_recheck_is_skipped_for_another_machines_profile(tmp_path):
    path = tmp_path / "other.soft"
    path.write_text(profile(STALE).replace(hash_fields(cpu_identity()), "0" * 64))
    result = CliRunner().invoke(main, ["verify", "--config", str(path), "--recheck"])
    assert result.exit_code == 1 and "recheck: skipped" in result.output


def test_a_recheck_measures_in_the_company_the_sweep_measured_in(tmp_path, monkeypatch):
    from softcuda.sweep.recheck import FALLBACK, measured_like

    spec = {
        "backends": ["cpu_fallback"],
        "host_memory": ["pageable"],
        "repetitions": {"warmup": 0, "min_time_s": 0.0, "min_reps": 2, "max_reps": 2, "buffers": 2},
    }
    (tmp_path / "results").mkdir()
    meta = {"spec": spec, "skipped": {"matmul cpu_blas": 2.0}}
    (tmp_path / "results" / "sweep-x-1.meta.json").write_text(json.dumps(meta))
    text = profile(STALE) + "\n[sweep]\ncsv = results/sweep-x-1.csv.gz\n"
    path = tmp_path / "CONFIG.soft"
    path.write_text(text)
    cfg = parse_config(text, str(path))
    monkeypatch.chdir(tmp_path.parent)  # found beside the profile, not only from the cwd
    # older: no settle_s (the default), no stopped_at (stopped at every size), no block_s
    # (every call timed alone: so it is timed again)
    alone = {**spec, "repetitions": {**spec["repetitions"], "block_s": 0.0}}
    assert measured_like(cfg) == ({**alone, "settle_s": 30.0}, {"matmul cpu_blas": 0})
    meta["spec"]["settle_s"] = 4
    meta["spec"]["repetitions"]["block_s"] = 5e-5
    meta["stopped_at"] = {"matmul cpu_blas": 512}
    (tmp_path / "results" / "sweep-x-1.meta.json").write_text(json.dumps(meta))
    assert measured_like(cfg) == ({**spec, "settle_s": 4}, {"matmul cpu_blas": 512})
    (tmp_path / "results" / "sweep-x-1.meta.json").unlink()
    assert measured_like(cfg) == (FALLBACK, {})


def test_contenders_are_measured_even_when_the_sweep_found_one_too_slow(tmp_path):
    """Neither the sweep's max_point_s nor its list of backends skipped as too slow may drop a
    side of a boundary."""
    from softcuda.sweep import recheck as module

    spec = {
        "backends": "all",
        "host_memory": ["pageable"],
        "repetitions": {
            "warmup": 0,
            "min_time_s": 0.0,
            "min_reps": 2,
            "max_reps": 2,
            "max_point_s": 1e-9,
            "buffers": 2,
        },
        "settle_s": 0,
    }
    meta = {"spec": spec, "skipped": {"matmul cpu_fallback": 2.0, "matmul cpu_blas": 3.0}}
    (tmp_path / "sweep-x-1.meta.json").write_text(json.dumps(meta))
    only_blas = """# cpu_blas 1e-04 s vs cpu_blas 1e-04 s at 380; crossover 400 [390, 410]
matmul | size < 400 = cpu_blas
matmul | size >= 400 = cpu_fallback"""
    text = profile(only_blas) + f"\n[sweep]\ncsv = {tmp_path}/sweep-x-1.csv.gz\n"
    cfg = parse_config(text, str(tmp_path / "CONFIG.soft"))
    results = module.recheck(cfg)
    assert [r.size for r in results] == [312, 513]  # both sides, though both were "too slow"


def _fake_sides(monkeypatch, readings, retries=None):
    """A recheck whose measurements are ``readings``: one (cpu_blas s, cpu_fallback s) per
    attempt, in the order the recheck asks for them; returns the sizes asked for, in order."""
    from softcuda.sweep import recheck as module

    asked = []

    class FakeSweep:
        def __init__(self, spec, *args, **kwargs):
            self.spec = spec

        def measure(self, point):
            asked.append(point.size)
            return readings.pop(0)

    way = {
        "backends": ["cpu_fallback", "cpu_blas"],
        "host_memory": ["pageable"],
        "repetitions": {"warmup": 0, "min_time_s": 0.0, "min_reps": 2, "max_reps": 2},
        "settle_s": 0,
    }
    if retries is not None:
        way["repetitions"]["retries"] = retries
    monkeypatch.setattr(module, "Sweep", FakeSweep)
    monkeypatch.setattr(module, "measured_like", lambda cfg: (way, {}))
    monkeypatch.setattr(module, "_medians", lambda pair, metric: dict(zip(BOTH, pair)))
    quick_settle(monkeypatch)
    return asked


BOTH = ("cpu_blas", "cpu_fallback")  # STALE: cpu_blas below 400, cpu_fallback above


def test_a_side_that_drifts_is_measured_again_after_the_others(monkeypatch):
    from softcuda.sweep import recheck as module

    cfg = parse_config(profile(STALE), "p.soft")
    # below: ok at once; above (cpu_fallback expected): drift, drift, then ok
    readings = [(1.0, 2.0), (1.0, 2.0), (1.0, 2.0), (1.2, 1.0)]
    asked = _fake_sides(monkeypatch, readings)
    below, above = module.recheck(cfg)
    assert asked == [312, 513, 513, 513]  # passes after all the sides, while it drifts
    assert below.status == "ok" and below.earlier == ()
    # (expected cpu_fallback 1.0 vs cpu_blas 1.2 on the last attempt)
    assert above.status == "ok" and above.earlier == ("DRIFT", "DRIFT")
    # the first side drifts: it is measured again after the second, not right away
    asked = _fake_sides(monkeypatch, [(2.0, 1.0), (2.0, 1.0), (1.0, 2.0)])
    below, above = module.recheck(cfg)
    assert asked == [312, 513, 312] and below.earlier == ("DRIFT",) and below.status == "ok"


def test_drift_is_reported_where_every_attempt_read_it(monkeypatch):
    from softcuda.sweep import recheck as module

    cfg = parse_config(profile(STALE), "p.soft")
    asked = _fake_sides(monkeypatch, [(1.0, 2.0)] * 3, retries=1)
    below, above = module.recheck(cfg)
    assert asked == [312, 513, 513] and (below.status, above.status) == ("ok", "DRIFT")
    assert above.earlier == ("DRIFT",)
    # retries 0: one attempt each, as before
    asked = _fake_sides(monkeypatch, [(1.0, 2.0)] * 2, retries=0)
    assert [r.status for r in module.recheck(cfg)] == ["ok", "DRIFT"] and asked == [312, 513]
    # a tie is not drift: not measured again
    asked = _fake_sides(monkeypatch, [(1.0, 2.0), (1.0, 1.02)])
    assert [r.status for r in module.recheck(cfg)] == ["ok", "tie"] and asked == [312, 513]


def test_the_report_lists_each_attempt(tmp_path, monkeypatch):
    path = tmp_path / "stale.soft"
    path.write_text(profile(STALE))
    _fake_sides(monkeypatch, [(1.0, 2.0)] * 4)
    result = CliRunner().invoke(main, ["verify", "--config", str(path), "--recheck"])
    assert result.exit_code == 1, result.output
    assert "DRIFT (attempt 3, after DRIFT, DRIFT)" in result.output
    _fake_sides(monkeypatch, [(1.0, 2.0), (1.0, 2.0), (1.2, 1.0)])
    result = CliRunner().invoke(main, ["verify", "--config", str(path), "--recheck", "--json"])
    assert result.exit_code == 0, result.output
    attempts = [r["attempts"] for r in json.loads(result.output)["recheck"]]
    assert attempts == [["ok"], ["DRIFT", "ok"]]


THREE = """# cpu_blas 1e-04 s vs cpu_fallback 2e-04 s at 90; crossover 100 [95, 120]
add | size < 100 = cpu_blas
# cpu_fallback 1e-04 s vs cpu_blas 2e-04 s at 125; crossover 130 [{lo}, 135]
add | 100 <= size < 130 = cpu_fallback
add | size >= 130 = cpu_blas"""


def test_each_side_is_timed_inside_its_own_bucket(monkeypatch):
    """A side MARGIN beyond the interval but past the next boundary would time two backends
    neither of which the profile serves there: it moves to its bucket's edge."""
    from softcuda.sweep import recheck as module

    cfg = parse_config(profile(THREE.format(lo=128)), "p.soft")
    readings = [(1.0, 2.0), (2.0, 1.0), (2.0, 1.0), (1.0, 2.0)]  # all as the profile says
    asked = _fake_sides(monkeypatch, readings)
    skipped = []
    results = module.recheck(cfg, on_skipped=skipped.append)
    # 95 / 1.25 = 76; 120 * 1.25 + 1 = 151 -> 129, the last size of cpu_fallback's bucket;
    # 128 / 1.25 = 102; 135 * 1.25 + 1 = 169
    assert asked == [76, 129, 102, 169] and skipped == []
    assert [r.status for r in results] == ["ok"] * 4


def test_a_side_with_no_room_in_its_bucket_is_reported_not_timed(tmp_path, monkeypatch):
    from softcuda.sweep import recheck as module

    cfg = parse_config(profile(THREE.format(lo=100)), "p.soft")
    asked = _fake_sides(monkeypatch, [(1.0, 2.0), (2.0, 1.0), (1.0, 2.0)])
    skipped = []
    module.recheck(cfg, on_skipped=skipped.append)
    assert asked == [76, 129, 169]  # cpu_fallback's bucket starts at 100: nothing below [100, .]
    assert skipped == [
        "add boundary 130: no size of cpu_fallback's bucket lies below the interval [100, 135], "
        "so that side is not rechecked"
    ]
    path = tmp_path / "three.soft"
    path.write_text(profile(THREE.format(lo=100)))
    _fake_sides(monkeypatch, [(1.0, 2.0), (2.0, 1.0), (1.0, 2.0)])
    result = CliRunner().invoke(main, ["verify", "--config", str(path), "--recheck"])
    assert result.exit_code == 0, result.output
    assert f"recheck: {skipped[0]}" in result.output
    _fake_sides(monkeypatch, [(1.0, 2.0), (2.0, 1.0), (1.0, 2.0)])
    result = CliRunner().invoke(main, ["verify", "--config", str(path), "--recheck", "--json"])
    assert json.loads(result.output)["recheck_skipped"] == skipped


def test_a_backend_stopped_above_a_side_keeps_its_place_in_that_sides_company(
    tmp_path, monkeypatch
):
    """The sweep timed a backend below the size where max_point_s stopped it: the recheck keeps
    it there, beside the contenders, and leaves it out above (metadata from before d4dd9b1,
    without stopped_at, leaves it out everywhere)."""
    from softcuda.sweep import recheck as module
    from softcuda.sweep.measure import Point, rows

    spec = {
        "backends": ["cpu_fallback", "cpu_blas", "cuda_naive"],
        "host_memory": ["pageable"],
        "repetitions": {"warmup": 0, "min_time_s": 0.0, "min_reps": 2, "max_reps": 2},
        "settle_s": 0,
    }
    meta = {"spec": spec, "skipped": {"matmul cuda_naive": 2.0}}
    meta_path = tmp_path / "sweep-x-1.meta.json"
    rules = (
        "# crossover 400 [390, 410]\n"
        "matmul | size < 400 = cpu_fallback\nmatmul | size >= 400 = cpu_blas"
    )
    cfg = parse_config(profile(rules) + f"\n[sweep]\ncsv = {tmp_path}/sweep-x-1.csv.gz\n", "p")
    company = {}

    def measure(self, point):
        company[point.size] = list(self.spec.backends)
        return [
            row
            for b in ("cpu_fallback", "cpu_blas")
            for row in rows(
                self.machine,
                Point("matmul", point.size, b),
                "s",
                "float32",
                "pageable",
                "wall",
                [1e-5],
                0,
            )
        ]

    monkeypatch.setattr(module.Sweep, "measure", measure)
    for stopped_at, below in (({"matmul cuda_naive": 400}, True), ({}, False)):
        meta_path.write_text(json.dumps({**meta, "stopped_at": stopped_at}))
        company.clear()
        module.recheck(cfg, machine=module.detect())
        assert ("cuda_naive" in company[312]) is below  # 390 / 1.25: below its stop at 400
        assert company[513] == ["cpu_fallback", "cpu_blas"]  # above it: left out


def test_a_boundary_beyond_what_a_sweep_measures_is_said_in_the_profiles_terms(
    tmp_path, monkeypatch
):
    """A matmul boundary at 100,000 (no sweep measures n above 65,536): the recheck said
    `<recheck>: ops.matmul.sizes.stop`, a key of a spec the user never wrote, after settling."""
    seen = []
    quick_settle(monkeypatch, seen)
    path = tmp_path / "big.soft"
    path.write_text(
        profile("matmul | size < 100000 = cpu_blas\nmatmul | size >= 100000 = cpu_fallback")
    )
    result = CliRunner().invoke(main, ["verify", "--config", str(path), "--recheck"])
    assert result.exit_code == 0, result.output
    assert "<recheck>" not in result.output and "sizes.stop" not in result.output
    line = f"matmul boundary 100000 ({path}:10): the size {{}} it, {{}}, is larger than a sweep"
    assert line.format("below", 72727) in result.output  # 100,000 / 1.1 / 1.25
    assert line.format("above", 137501) in result.output
    assert "measures matmul at (65536), so that side is not rechecked" in result.output
    assert seen == []  # nothing to time: no wait for a steady machine either


def test_a_bad_spec_in_the_sweeps_metadata_is_named_as_that(tmp_path, monkeypatch):
    quick_settle(monkeypatch)
    spec = {
        "backends": ["cpu_fallback"],
        "host_memory": ["pageable"],
        "repetitions": {"min_reps": 0},
    }
    (tmp_path / "sweep-x-1.meta.json").write_text(json.dumps({"spec": spec}))
    path = tmp_path / "p.soft"
    path.write_text(profile(STALE) + f"\n[sweep]\ncsv = {tmp_path}/sweep-x-1.csv.gz\n")
    result = CliRunner().invoke(main, ["verify", "--config", str(path), "--recheck"])
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert message.startswith(f"error: {tmp_path}/sweep-x-1.meta.json: spec: repetitions.min_reps")
    assert "<recheck>" not in message and "Traceback" not in result.output
