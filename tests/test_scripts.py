"""Every script in benchmarks/ and extra/ still imports against the package (a renamed or moved
name breaks a script nobody runs for weeks); .ci/run runs the CPU benchmarks themselves."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from softcuda.costs import CostModel
from softcuda.device import slug
from softcuda.sweep import folders, timers
from softcuda.sweep.machine import detect

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "extra").glob("*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_script_imports_and_has_a_main(path, monkeypatch):
    monkeypatch.delenv("CUPY_TF32", raising=False)  # some set it at import; restored after
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the module's top level only: main() is not run
    assert callable(module.main)
    assert module.__doc__ and "python " in module.__doc__  # says how it is run


def stability(*args: str) -> subprocess.CompletedProcess:
    script = ROOT / "benchmarks" / "stability.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)


def test_stability_says_in_one_line_that_a_spec_cannot_be_used_here(tmp_path):
    """A spec refused by the sweep (cpu_blas alone times no sum) was a traceback, exit 1: the
    code of "not stable", which CI accepted."""
    spec = tmp_path / "sum.yaml"
    ops = {"sum": {"sizes": {"start": 256, "stop": 4096, "per_octave": 1}}}
    spec.write_text(yaml.safe_dump({"name": "sum", "backends": ["cpu_blas"], "ops": ops}))
    done = stability(str(spec), "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {spec}: ops.sum: none of the backends")


def test_stability_holds_the_results_folder_as_init_does(tmp_path):
    folder = tmp_path / "results" / slug(detect().label)
    folder.mkdir(parents=True)
    with folders.hold(folder / folders.LOCK_NAME, "that folder"):
        done = stability(str(ROOT / "sweeps" / "smoke.yaml"), "--results", str(folder.parent))
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {folder} is in use by another softcuda init (process ")
    assert not list(folder.glob("*.csv"))


def h200_sweep(
    tmp_path: Path,
    writes_profile: bool,
    cwd: Path | None = None,
    mode: str = "sweep",
    status: int = 0,
    init_exit: int | None = None,
) -> tuple[str, list[str]]:
    """`bash benchmarks/h200.sh sweep` with the GPU machine's commands stubbed: its output,
    and the softcuda commands it ran (from ``cwd``, the checkout the device tool sends).  The
    stubbed init exits ``init_exit``: by default 0 where it writes the profile, else 130, as
    an init stopped by SIGINT with its rows kept.  By default it runs from an empty folder, so
    that a developer's own .resume/ or .whl/ in the checkout cannot change what it does."""
    if cwd is None:
        cwd = tmp_path / "checkout"
        cwd.mkdir(exist_ok=True)
    if init_exit is None:
        init_exit = 0 if writes_profile else 130
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "calls.txt"
    stubs = {
        # pip install and the CuPy version line do nothing; a script (-c) runs in this Python
        "python3": f'[ "$1" = -c ] && exec "{sys.executable}" "$@"\nexit 0',
        "nvidia-smi": "exit 0",
        "lscpu": "exit 0",
        "softcuda": f'echo "$*" >>{calls}\n'
        + (f'[ "$1" = init ] && touch {out}/CONFIG.soft\n' if writes_profile else "")
        + f'[ "$1" = init ] && exit {init_exit}\n'
        + "exit 0",
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "OUT": str(out),
        "RESULTS": str(tmp_path / "results"),
    }
    shutil.rmtree(out, ignore_errors=True)
    calls.unlink(missing_ok=True)
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "h200.sh"), mode],
        cwd=cwd, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == status, done.stdout + done.stderr
    return done.stdout, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_gpu_session_resumes_an_unfinished_reference_sweep(tmp_path):
    """default.yaml's budget is 900 s and a device call 10 minutes: the sweep mode stopped the
    sweep at 560 s, then verified a profile that did not exist, and the next call started over."""
    said, calls = h200_sweep(tmp_path, writes_profile=False)
    assert len(calls) == 1 and calls[0].startswith("init --spec sweeps/default.yaml --out ")
    assert "--resume" not in calls[0] and "again at once to resume it" in said
    folder = tmp_path / "results" / "nvidia-h200"
    folder.mkdir(parents=True)
    meta = folder / "sweep-default-20261201T215542Z.meta.json"
    meta.write_text(json.dumps({"complete": False}, indent=2))
    said, calls = h200_sweep(tmp_path, writes_profile=True)
    assert calls[0].startswith("init --spec sweeps/default.yaml --resume --out ")
    assert calls[1].startswith("verify --config ") and len(calls) == 2
    meta.write_text(json.dumps({"complete": True}, indent=2))
    said, calls = h200_sweep(tmp_path, writes_profile=True)
    assert "--resume" not in calls[0] and calls[1].startswith("verify --config ")


def carry(where: Path, name: str, complete: bool, rows: str | None = "rows\n") -> dict:
    """A sweep's metadata and (unless ``rows`` is None) gzipped CSV, as a device call brings
    them back and the next call carries them in .resume/."""
    where.mkdir(parents=True, exist_ok=True)
    meta = {"schema": 2, "complete": complete, "device": "NVIDIA H200", "device_hash": "x"}
    (where / f"{name}.meta.json").write_text(json.dumps(meta, indent=2))
    if rows is not None:
        with gzip.open(where / f"{name}.csv.gz", "wt") as f:
            f.write(rows)
    return meta


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_gpu_session_resumes_a_sweep_carried_back_to_a_fresh_machine(tmp_path):
    """The device tool gives its machine back after about 30 s idle, and with it the unfinished
    sweep under $RESULTS: the rows the last call brought back, carried in .resume/, are put
    where `init --resume` finds them, under the device's folder, instead of starting over."""
    checkout, folder = tmp_path / "checkout", tmp_path / "results" / "nvidia-h200"
    name = "sweep-default-20261202T233544Z"
    meta = carry(checkout / ".resume", name, complete=False, rows="schema,op\n2,add\n")
    said, calls = h200_sweep(tmp_path, writes_profile=True, cwd=checkout)
    assert (folder / f"{name}.csv").read_text() == "schema,op\n2,add\n"
    assert json.loads((folder / f"{name}.meta.json").read_text()) == meta
    assert f"restored the unfinished sweep {name}" in said
    assert calls[0].startswith("init --spec sweeps/default.yaml --resume --out ")
    # the same machine, the sweep finished since: the carried copy is stale and a new sweep
    # (the second of a stability pair) starts, leaving the finished one as it is
    (folder / f"{name}.meta.json").write_text(json.dumps({**meta, "complete": True}))
    (folder / f"{name}.csv").write_text("finished")
    said, calls = h200_sweep(tmp_path, writes_profile=True, cwd=checkout)
    assert (folder / f"{name}.csv").read_text() == "finished" and "restored" not in said
    assert "--resume" not in calls[0]
    # an unfinished sweep already on the machine wins over the carried one
    (folder / f"{name}.meta.json").write_text(json.dumps(meta, indent=2))
    said, calls = h200_sweep(tmp_path, writes_profile=True, cwd=checkout)
    assert (folder / f"{name}.csv").read_text() == "finished" and "restored" not in said
    assert "--resume" in calls[0]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_gpu_session_restores_only_the_newest_carried_sweep_and_only_whole(tmp_path):
    checkout, folder = tmp_path / "checkout", tmp_path / "results" / "nvidia-h200"
    carry(checkout / ".resume", "sweep-default-20261203T010000Z", complete=False)
    carry(checkout / ".resume", "sweep-default-20261203T020000Z", complete=True)
    said, calls = h200_sweep(tmp_path, writes_profile=True, cwd=checkout)
    assert not folder.exists() and "--resume" not in calls[0]  # a newer one finished
    carry(checkout / ".resume", "sweep-default-20261203T030000Z", complete=False, rows=None)
    said, calls = h200_sweep(tmp_path, writes_profile=True, cwd=checkout, status=1)
    assert "sweep-default-20261203T030000Z.meta.json is carried without its .csv.gz" in said
    assert calls == [] and not folder.exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_a_sweep_init_refuses_is_a_failure_not_a_call_to_try_again(tmp_path):
    """An unfinished sweep init cannot resume here (another spec or device hash) made every
    `sweep` call print "run again" and exit 0; init's own error and exit status now stand."""
    said, calls = h200_sweep(tmp_path, writes_profile=False, init_exit=2, status=2)
    assert "the sweep failed (init exited 2" in said and "again at once" not in said
    said, calls = h200_sweep(tmp_path, writes_profile=False)  # stopped by SIGINT: go on
    assert "again at once to resume it" in said


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_gpu_session_compares_the_last_two_finished_sweeps_carried_or_not(tmp_path):
    """`compare` takes the two latest finished reference sweeps, from $RESULTS or, where the
    machine was given back after one finished, from .resume/; the one on the machine wins."""
    checkout, folder = tmp_path / "checkout", tmp_path / "results" / "nvidia-h200"
    (checkout / ".resume").mkdir(parents=True)
    folder.mkdir(parents=True)

    def sweep(where: Path, name: str, complete: bool, suffix: str) -> None:
        (where / f"{name}.meta.json").write_text(json.dumps({"complete": complete}, indent=2))
        (where / f"{name}{suffix}").write_text("rows")

    first, second, third = (f"sweep-default-20261203T0{h}0000Z" for h in (1, 2, 3))
    sweep(checkout / ".resume", first, True, ".csv.gz")
    said, calls = h200_sweep(tmp_path, False, cwd=checkout, mode="compare", status=2)
    assert "needs two finished reference sweeps" in said and calls == []
    sweep(checkout / ".resume", second, True, ".csv.gz")
    sweep(folder, second, True, ".csv")
    sweep(folder, third, False, ".csv")  # unfinished: not compared
    said, calls = h200_sweep(tmp_path, False, cwd=checkout, mode="compare")
    assert calls == [f"compare-sweeps .resume/{first}.csv.gz {folder}/{second}.csv"]


def test_no_commit_hash_in_the_code_s_prose():
    """A docstring that cites a commit (or a file named after one) points at a state of the
    tree nobody has; results are cited by file, ARCHIVE.md says where the old ones went."""
    found = [
        f"{path.relative_to(ROOT)}:{n}: {word}"
        for folder in ("softcuda", "cli", "benchmarks", "extra", "sweeps")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in (".py", ".sh", ".yaml")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for word in re.findall(r"\b[0-9a-f]{7,40}\b", line)
        if re.search("[a-f]", word) and re.search("[0-9]", word)
    ]
    assert found == []


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_training_benchmark_runs_on_the_cpu_and_prints_its_table(tmp_path):
    out = tmp_path / "training.csv"
    script = ROOT / "benchmarks" / "training.py"
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--cases", "digits", "--csv", str(out),
         "--nodes", str(tmp_path / "nodes.csv")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    header = ["contestant", "median", "ms", "spread", "predicted", "alone", "against"]
    assert header in [line.split() for line in lines]
    (row,) = [line.split() for line in lines if line.startswith("softcuda cpu ")]
    assert float(row[2]) > 0 and float(row[4]) > 0  # the median and its steps timed alone
    for row in ("softcuda cpu ", "numpy "):
        assert any(line.startswith(row) for line in lines), done.stdout
    assert any(line.startswith("target: at the digits size on the CPU") for line in lines)
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["contestant"] for r in rows} == {"softcuda", "numpy"} | (
        {"cupy"} if "cupy: skipped" not in done.stdout else set()
    )
    assert all(float(r["seconds"]) > 0 for r in rows)
    with (tmp_path / "nodes.csv").open() as fh:
        nodes = list(csv.DictReader(fh))
    assert {n["placement"] for n in nodes} >= {"cpu"} and all(
        float(n["median_s"]) > 0 for n in nodes
    )
    ops = {n["op"] for n in nodes}  # the step's elementwise ops run fused, in groups
    assert "matmul" in ops and any(op.startswith("fused(") for op in ops), ops


def test_the_training_benchmark_predicts_each_placement_without_a_gpu(capsys):
    """--predict prices every placement's plan from a profile's costs, here the H200's on a
    machine without one; the graph plan is never predicted slower than another."""
    training = load_script(ROOT / "benchmarks" / "training.py")
    profile = ROOT / "results" / "nvidia-h200" / "CONFIG-as-measured.soft"
    assert training.main(["--predict", "--config", str(profile)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:5] == ["case", "graph", "per-op", "cpu", "cuda"]
    for name in ("digits", "large"):
        (row,) = [line.split() for line in lines if line.startswith(name)]
        graph, *others = map(float, row[1:])
        assert graph > 0 and all(graph <= other * (1 + 1e-9) for other in others)
    assert training.main(["--predict", "--config", str(ROOT / "DEFAULT.soft")]) == 2
    assert "has no [costs]" in capsys.readouterr().out


def test_the_training_benchmark_says_which_plan_its_profile_cannot_price(tmp_path, capsys):
    """A per-op rule naming a backend without a [costs] curve leaves that plan unpriced: a dash
    in its cell, not a crash."""
    training = load_script(ROOT / "benchmarks" / "training.py")
    profile = ROOT / "results" / "nvidia-h200" / "CONFIG-as-measured.soft"
    lines = profile.read_text().splitlines(keepends=True)
    unpriced = tmp_path / "CONFIG.soft"
    unpriced.write_text("".join(x for x in lines if not x.startswith("matmul    | cuda_blas")))
    assert len(unpriced.read_text()) < len(profile.read_text())
    assert training.main(["--predict", "--config", str(unpriced), "--cases", "large"]) == 0
    (row,) = [x.split() for x in capsys.readouterr().out.splitlines() if x.startswith("large")]
    assert row[2] == "—" and all(float(cell) > 0 for cell in row[1:2] + row[3:])


def test_the_training_benchmark_stops_where_a_contestant_disagrees(tmp_path, monkeypatch, capsys):
    """A numpy loop whose steps are 5% too long (a wrong learning rate, say) ends the run before
    anything is timed, naming it."""
    training = load_script(ROOT / "benchmarks" / "training.py")
    step = training.HandLoop.step

    def too_long(self):
        before = [p.copy() for p in self.params]
        loss = step(self)
        for p, old in zip(self.params, before):
            p += 0.05 * (p - old)
        return loss

    monkeypatch.setattr(training.HandLoop, "step", too_long)
    argv = ["--quick", "--cases", "digits", "--csv", str(tmp_path / "training.csv")]
    assert training.main(argv) == 1
    said = capsys.readouterr().out.splitlines()
    assert said[-1].startswith("training benchmark: digits: numpy disagrees: ")
    assert "median ms" not in "\n".join(said)


def test_the_training_benchmark_s_contestants_take_turns_in_a_balanced_order():
    """Five contestants (the GPU machine's): within the rounds, each contestant runs right
    after each other one twice per 10 rounds.  The rotation before had cupy right before
    softcuda graph in 4 rounds of 5, and numpy never."""
    training = load_script(ROOT / "benchmarks" / "training.py")
    ran: list[str] = []

    class Runner:
        def __init__(self, label: str) -> None:
            self.label = label

        def reset(self) -> None:
            ran.append(f"reset {self.label}")

        def step(self) -> float:
            ran.append(self.label)
            return 0.0

    names = [("softcuda", "graph"), ("softcuda", "cpu"), ("softcuda", "cuda"), ("numpy", "")]
    found = [
        training.Contestant(name, placement, Runner(f"{name} {placement}".strip()), "", list)
        for name, placement in [*names, ("cupy", "")]
    ]
    rows: list[list] = []
    reps = 10 * training.BLOCK
    times = training.time_case(
        training.CASES["digits"], found, reps, SimpleNamespace(writerow=rows.append)
    )
    assert all(len(t) == reps for t in times.values()) and len(rows) == 5 * reps
    blocks = [i for i, what in enumerate(ran) if what.startswith("reset ")]
    assert len(blocks) == 50  # 10 rounds of 5 blocks
    follows: dict[tuple[str, str], int] = {}
    for b, i in enumerate(blocks):
        if b % 5:  # within a round
            pair = (ran[i - 1], ran[i].removeprefix("reset "))
            follows[pair] = follows.get(pair, 0) + 1
    labels = [c.label for c in found]
    assert follows == {(a, b): 2 for a in labels for b in labels if a != b}


class Clock:
    """A host clock that only plans move, and the log of which plan ran."""

    def __init__(self) -> None:
        self.now, self.ran = 0.0, []

    def perf_counter(self) -> float:
        return self.now


class FakePlan:
    """A plan whose run takes ``cost_s`` on ``clock``, and ``carryover_s`` more when the run
    before it was the all-CUDA plan's: on the H200 an all-CPU plan of 3.4 us read about 1.5 us
    slower right after it."""

    def __init__(self, clock: Clock, name: str, cost_s: float, carryover_s: float = 0.0):
        self.clock, self.name, self.cost_s, self.carryover_s = clock, name, cost_s, carryover_s
        self.predicted_s = cost_s
        op = SimpleNamespace(op="tanh" if cost_s < 1e-5 else "relu")
        self.steps = [SimpleNamespace(kind="kernel", device="cpu", backend_id="cpu", node=op)]

    def evaluate(self, copy: bool = True) -> None:
        after_cuda = self.clock.ran[-1:] == ["cuda"] and self.name != "cuda"
        self.clock.now += self.cost_s + (self.carryover_s if after_cuda else 0.0)
        self.clock.ran.append(self.name)


def fake_case(clock: Clock, cpu_s: float = 3.4e-6) -> dict[str, FakePlan]:
    """Three placements compiled to one CPU plan and an all-CUDA one, as at 2^10 elements."""
    costs = {"graph": cpu_s, "per-op": cpu_s, "cpu": cpu_s, "cuda": 25e-6}
    return {p: FakePlan(clock, p, cost, 1.5e-6) for p, cost in costs.items()}


def test_the_placement_benchmark_times_blocks_in_a_balanced_order(monkeypatch):
    """Identical plans read alike: no block counts the all-CUDA plan's carryover whole, and
    over every 4 rounds each placement follows each other once (and, leading a round, an
    untimed run of itself); the old rotation had graph after cuda in 3 rounds of 4."""
    bench = load_script(ROOT / "benchmarks" / "placement.py")
    clock = Clock()
    monkeypatch.setattr(bench, "time", clock)
    monkeypatch.setattr(timers, "time", clock)  # the blocks' timer (timers.per_call)
    calls, taken = timers.in_turns(fake_case(clock), rounds=16)
    assert clock.ran[:8] == [p for p in ("graph", "per-op", "cpu", "cuda") for _ in (1, 2)]
    assert calls == 59  # 0.2 ms of the fastest (3.4 us) placement
    assert len(taken) == 64 and [r for _, r, _ in taken] == [r for r in range(16) for _ in "abcd"]
    per_call = {p: [s for q, _, s in taken if q == p] for p in ("graph", "per-op", "cpu", "cuda")}
    assert max(max(per_call[p]) for p in ("graph", "per-op", "cpu")) < 3.4e-6 * 1.01
    assert min(per_call["cuda"]) == pytest.approx(25e-6)
    # who ran right before each block's first call
    runs, before = clock.ran[8:], {p: [] for p in per_call}
    i = 0
    for r in range(16):
        lead = runs[i]
        i += 1  # the round's untimed first run
        for placement, round_, _ in taken[4 * r : 4 * r + 4]:
            assert runs[i : i + calls] == [placement] * calls and round_ == r
            before[placement].append(runs[i - 1])
            i += calls
        assert lead == taken[4 * r][0]
    assert i == len(runs)
    for placement, predecessors in before.items():
        assert sorted(predecessors) == sorted(list(per_call) * 4), placement


def test_a_placement_block_lasts_0_2_ms_of_the_fastest_plan_within_1_to_1000_calls():
    block_calls = timers.block_calls
    assert block_calls(2.5e-6) == 80 and block_calls(3e-6) == 67
    assert block_calls(1e-3) == 1 and block_calls(2e-4) == 1
    assert block_calls(1e-8) == 1000 and block_calls(0.0) == 1000


def test_the_placement_csv_keeps_seconds_per_call_and_the_chain_figure_reads_it(
    tmp_path, monkeypatch
):
    from softcuda.analysis.chains import measured_crossovers

    bench = load_script(ROOT / "benchmarks" / "placement.py")
    clock = Clock()
    monkeypatch.setattr(bench, "time", clock)
    monkeypatch.setattr(timers, "time", clock)  # the blocks' timer (timers.per_call)
    plans = {}

    def compile(outputs, config, host_memory, placement):  # each n's cpu cost is n ns
        n = outputs["n"]
        plans[n, placement] = FakePlan(clock, placement, 2e-5 if placement == "cuda" else n * 1e-9)
        return plans[n, placement]

    monkeypatch.setattr(bench, "sc", SimpleNamespace(compile=compile))
    path = tmp_path / "placement.csv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(bench.COLUMNS)
        for e in (12, 16):
            chain = {"family": "unary", "k": 1, "n": 1 << e}
            found, calls = bench.time_case(
                lambda n=1 << e: {"n": n}, None, 4, writer, f"unary k=1 2^{e}", chain
            )
            assert found["cpu"]["median_s"] == pytest.approx((1 << e) * 1e-9, rel=0.01)
            assert calls == math.ceil(2e-4 / min((1 << e) * 1e-9, 2e-5))
    raw = pd.read_csv(path)
    assert list(raw.columns) == bench.COLUMNS and len(raw) == 2 * 4 * 4
    assert set(raw["calls"]) == {49, 10}
    (crossing,) = measured_crossovers(raw)["from"]
    assert 4096 < crossing < 65536  # the cpu's 4.1 us and 65.5 us against the cuda's 20 us


def test_the_finding_table_reads_gpu_stretches_from_buckets():
    """extra/finding_table.py writes the README's cells from a profile's buckets: adjacent CUDA
    buckets are one stretch, a CPU bucket above ends it, and none or all is said in words."""
    from softcuda.timings.select import Bucket

    table = load_script(ROOT / "extra" / "finding_table.py")

    def cells(*spans):
        return table.bands([Bucket("add", lo, hi, backend, False, "") for lo, hi, backend in spans])

    assert cells((0, 255_411, "cpu_threads"), (255_411, 3_292_421, "cuda_elementwise"),
                 (3_292_421, None, "cpu_threads")) == "255 K – 3.3 M"  # fmt: skip
    assert cells((0, 157, "cpu_blas"), (157, 300, "cuda_naive"), (300, None, "cuda_blas")) == "157"
    assert cells((0, 2_500, "cpu_threads"), (2_500, None, "cuda_elementwise")) == "2.5 K"
    assert cells((0, None, "cpu_threads")) == "never"
    assert cells((0, None, "cuda_elementwise")) == "always"
    assert cells((0, 9_000, "cuda_elementwise"), (9_000, None, "cpu_fallback")) == "below 9.0 K"


def test_the_finding_table_against_torch_names_where_the_best_gpu_beats_the_best_cpu(
    tmp_path, capsys
):
    """--torch: per op and size the faster CUDA plan against the faster CPU side, medians
    against medians (a slow repetition does not decide), from vs_torch.py's raw JSON."""
    import gzip
    import json

    table = load_script(ROOT / "extra" / "finding_table.py")

    def row(library, device, k, us):
        return {"library": library, "device": device, "op": "add", "log2": k, "first_s": 1.0,
                "reps_s": [us * 1e-6, us * 1e-6, 1.0]}  # fmt: skip

    rows = [
        row("softcuda", "cpu", 12, 3), row("torch", "cpu", 12, 2),  # the CPU: 2 us
        row("softcuda", "cuda", 12, 20), row("torch", "cuda", 12, 30),  # the GPU: 20 us
        row("softcuda", "cpu", 14, 90), row("torch", "cpu", 14, 80),  # the CPU: 80 us
        row("softcuda", "cuda", 14, 50), row("torch", "cuda", 14, 40),  # the GPU: 40 us
    ]  # fmt: skip
    path = tmp_path / "vs-torch.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(rows, f)
    table.against_torch(str(path))
    line = [s for s in capsys.readouterr().out.splitlines() if s.startswith("| add")]
    assert line == ["| add | 2^12 – 2^14 | 2^14 | 0.50 – 10.00 |"]


def test_a_calibration_writes_its_line_into_the_profile_and_leaves_the_rest(tmp_path, monkeypatch):
    """calibrate.into_profile with the GPU check and the measurement stubbed: the [bus] line is
    written, everything else read back as it was; figures the line cannot hold exit 1 and
    leave the file untouched."""
    import shutil

    from softcuda import backends
    from softcuda.config import load_config
    from softcuda.sweep.calibrate import into_profile

    monkeypatch.setattr(backends, "cuda_available", lambda: (True, ""))
    profile = tmp_path / "P.soft"
    shutil.copy(ROOT / "CONFIG.soft", profile)
    before = load_config(profile)
    found = {"seconds": [2e-6, 3e-6]}
    line = "4096:2.00 16384:3.00"
    status = into_profile(
        [str(profile)], "switch", "switch_us", lambda: found, lambda f: line, lambda f: "ok"
    )
    after = load_config(profile)
    assert (
        status == 0 and after.bus["switch_us"] == line and CostModel(after).switch_s(4096) == 2e-6
    )
    assert after.rules == before.rules and after.costs == before.costs
    assert {k: v for k, v in after.bus.items() if k != "switch_us"} == {
        k: v for k, v in before.bus.items() if k != "switch_us"
    }
    text = profile.read_text()
    assert into_profile([str(profile)], "switch", "switch_us", dict, lambda f: None, str) == 1
    assert profile.read_text() == text


@pytest.mark.parametrize("module", ["launch", "switch"])
def test_a_calibration_without_a_gpu_says_why_in_one_line(tmp_path, module):
    """``python -m softcuda.sweep.launch|switch PROFILE`` (one [bus] figure into a profile)."""
    import subprocess
    import sys

    from softcuda.backends import cuda_available

    if cuda_available()[0]:
        pytest.skip("a GPU is here: tests/test_cuda_graph.py runs the calibration")
    profile = tmp_path / "P.soft"
    profile.write_text("not read")
    done = subprocess.run(
        [sys.executable, "-m", f"softcuda.sweep.{module}", str(profile)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith(f"{module} calibration: needs CUDA")
    assert len(done.stderr.strip().splitlines()) == 1 and profile.read_text() == "not read"
    usage = subprocess.run(
        [sys.executable, "-m", f"softcuda.sweep.{module}"], capture_output=True, text=True
    )
    assert usage.returncode == 2 and f"softcuda.sweep.{module} PROFILE" in usage.stderr


def test_the_placement_replay_prices_a_gpu_run_without_a_gpu(tmp_path):
    """--replay compiles the cases with a profile (allocate=False) and reads the measured times:
    the graph plan's time is known where it is step for step a plan the run measured."""
    import subprocess
    import sys

    root = Path(__file__).parent.parent
    measured = root / "results" / "nvidia-h200" / "placement.csv.gz"
    profile = root / "results" / "nvidia-h200" / "CONFIG-as-measured.soft"
    args = [sys.executable, str(root / "benchmarks" / "placement.py"), "--replay"]
    done = subprocess.run(
        [*args, str(measured), "--config", str(profile), "--quick"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    rows = [line for line in lines if "chain k=" in line]
    assert len(rows) == 12  # the quick cases' chains, every one in the run
    summary = next(line for line in lines if line.startswith("graph plan against the fastest"))
    assert "within 10% at" in summary
    assert any(line.startswith("the model on the measured") for line in lines)
    bad = tmp_path / "bad.csv"
    bad.write_text("case,seconds\nx,1\n")
    refused = subprocess.run(
        [*args, str(bad), "--config", str(profile)], capture_output=True, text=True
    )
    assert refused.returncode == 2
    assert refused.stdout.strip() == f"placement replay: {bad} lacks column(s) placement"


PAIR_INIT = r"""
echo "$*" >>CALLS
if [ "$1" = init ]; then
  folder="$RESULTS/nvidia-h200"; mkdir -p "$folder"
  open=$(grep -l '"complete": false' "$folder"/sweep-default-*.meta.json 2>/dev/null | head -1)
  if [ -n "$open" ]; then  # --resume: this call finishes it
    sed -i 's/"complete": false/"complete": true/' "$open"; touch "$OUT/CONFIG.soft"; exit 0
  fi
  n=$(ls "$folder"/*.meta.json 2>/dev/null | wc -l)
  name="sweep-default-2026120$((n + 1))T000000Z"
  echo '{"complete": false, "device": "NVIDIA H200"}' >"$folder/$name.meta.json"
  echo rows >"$folder/$name.csv"
  exit 130  # stopped by the call's time, rows kept
fi
exit 0
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_gpu_session_runs_a_pair_of_sweeps_across_calls_and_compares_them(tmp_path):
    """`pair`: the first sweep runs out of its call; the next call finishes it and starts the
    second in the time left; the one after finishes that and compares the two.  A machine
    given back between calls loses nothing that the calls brought back and .resume/ carries."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()

    # h200_sweep's stub keeps no state: softcuda here is one that does
    bin_dir, out, calls = tmp_path / "bin", tmp_path / "out", tmp_path / "calls.txt"

    def run(results: Path) -> tuple[str, list[str]]:
        bin_dir.mkdir(exist_ok=True)
        for name, body in {
            "python3": f'[ "$1" = -c ] && exec "{sys.executable}" "$@"\nexit 0',
            "nvidia-smi": "exit 0",
            "lscpu": "exit 0",
            "softcuda": PAIR_INIT.replace("CALLS", str(calls)),
        }.items():
            (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
            (bin_dir / name).chmod(0o755)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        calls.unlink(missing_ok=True)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out)}
        env["RESULTS"] = str(results)
        done = subprocess.run(
            ["bash", str(ROOT / "benchmarks" / "h200.sh"), "pair"],
            cwd=checkout, env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout, calls.read_text().splitlines()

    results = tmp_path / "results"
    said, made = run(results)
    assert [c.split(" --out")[0] for c in made] == ["init --spec sweeps/default.yaml"]
    assert "pair: the sweep is not finished" in said
    said, made = run(results)
    assert [c.split(" --")[0] for c in made] == ["init", "verify", "init"]
    assert "--resume" in made[0] and "--resume" not in made[2]
    # the machine is given back: the next call is a fresh one, with what came back carried
    resume = checkout / ".resume"
    resume.mkdir()
    for f in out.iterdir():
        if f.name.startswith("sweep-default-"):
            shutil.copy(f, resume / f.name)
    said, made = run(tmp_path / "fresh-results")
    assert "restored the unfinished sweep sweep-default-20261202T000000Z" in said
    assert [c.split(" ")[0] for c in made] == ["init", "verify", "compare-sweeps"]
    first, second = made[2].split()[1:]
    assert first == ".resume/sweep-default-20261201T000000Z.csv.gz"
    assert second.endswith("fresh-results/nvidia-h200/sweep-default-20261202T000000Z.csv")
    assert (out / "stability-back-to-back.txt").exists()


def test_the_placement_replay_prices_only_the_plans_the_run_ran(tmp_path, capsys):
    """With the run's plan ids, a placement whose recompiled plan is not the one the run ran
    has no measured time: here the all-CUDA plans are marked as other plans, and the replay
    neither prices them nor takes them for the graph plan."""
    import pandas as pd

    from softcuda.config import load_config

    bench = load_script(ROOT / "benchmarks" / "placement.py")
    profile = load_config(ROOT / "results" / "nvidia-h200" / "CONFIG-as-measured.soft")
    raw = pd.read_csv(ROOT / "results" / "nvidia-h200" / "placement.csv.gz")
    ids = {}
    for name, _chain, build in bench.cases(True):
        for p in bench.PLACEMENTS:
            plan = bench.sc.compile(
                build(), config=profile, host_memory="pinned", placement=p, allocate=False
            )
            ids[name, p] = "another" if p == "cuda" else bench.plan_id(plan)
    raw = raw[[(c, p) in ids for c, p in zip(raw["case"], raw["placement"])]].copy()
    raw["plan"] = [ids[c, p] for c, p in zip(raw["case"], raw["placement"])]
    named = tmp_path / "named.csv"
    raw.to_csv(named, index=False)
    assert bench.replay(profile, str(named), True) == 0
    said = capsys.readouterr().out
    rows = [line for line in said.splitlines() if " chain k=" in line or "mlp" in line]
    guesses = [line[34 + 14 + 13 + 11 :] for line in rows]  # the predicted/measured column
    assert rows and all("per-op " in g and "cpu " in g for g in guesses)
    assert not any(re.search(r"\bcuda \d", g) for g in guesses)
    # a graph plan measured as the all-CUDA placement cannot be found: the run "ran another"
    assert not any(line[34 + 14 : 34 + 14 + 13].strip() == "cuda" for line in rows)
    assert "names no plans" not in said


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_a_pair_counts_no_sweep_older_than_its_start(tmp_path):
    """A stale .resume/ held two finished sweeps: `pair` compared them without sweeping.
    PAIR_SINCE leaves them out, and `compare` with it finds none."""
    checkout = tmp_path / "checkout"
    for name in ("sweep-default-20261201T010000Z", "sweep-default-20261201T020000Z"):
        carry(checkout / ".resume", name, complete=True)
    said, calls = h200_sweep(tmp_path, False, cwd=checkout, mode="compare")
    assert calls and calls[0].startswith("compare-sweeps")
    os.environ["PAIR_SINCE"] = "20261203T000000Z"
    try:
        said, calls = h200_sweep(tmp_path, False, cwd=checkout, mode="compare", status=2)
    finally:
        del os.environ["PAIR_SINCE"]
    assert "found 0" in said and calls == []


def test_the_switch_cost_investigation_says_in_one_line_that_it_needs_a_gpu():
    from softcuda.backends import cuda_available

    if cuda_available()[0]:
        pytest.skip("a GPU is usable here: the script would run")
    script = ROOT / "extra" / "switch_cost.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("switch_cost.py needs a usable CUDA GPU")


def test_every_mode_of_the_gpu_session_is_listed_in_its_header_and_its_unknown_mode_message():
    import re

    text = (ROOT / "benchmarks" / "h200.sh").read_text()
    modes = re.findall(r"^  ([a-z]+)\)$", text, re.M)
    assert "switchcal" in modes and "launch" in modes
    listed = re.search(r"unknown mode \$MODE \(([^)]*)\)", text)[1].split(" | ")
    header = re.findall(r"^#   bash benchmarks/h200\.sh ([a-z]+)", text, re.M)
    assert sorted(listed) == sorted(modes) and set(header) == set(modes)
    switchcal = text[text.index("  switchcal)") :].split(";;")[0]
    assert 'python3 -m softcuda.sweep.switch "${2:-CONFIG.soft}"' in switchcal
    assert '"$OUT/switch.txt"' in switchcal and 'cp "${2:-CONFIG.soft}" "$OUT/"' in switchcal


@pytest.mark.parametrize(
    "script, hidden",
    [("vs_torch.py", ["torch"]), ("cpu_threads.py", ["numpy_nonexistent_rival"])],
)
def test_a_comparison_without_its_rival_says_so_in_one_line_and_exits_2(script, hidden):
    """PyTorch is optional: without it vs_torch.py names it in one line and exits 2 (the rival
    hidden from the child as an uninstalled package looks to importlib)."""
    args = ["--rivals", hidden[0]] if script == "cpu_threads.py" else []
    code = (
        "import runpy, sys\n"
        f"for name in {hidden!r}: sys.modules[name] = None\n"
        f"sys.argv = ['{script}', *{args!r}]\n"
        f"runpy.run_path({str(ROOT / 'benchmarks' / script)!r}, run_name='__main__')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert hidden[0] in line and "not installed" in line


def test_kernel_time_adds_a_plans_gpu_kernels_per_repetition_and_leaves_out_copies():
    """rivals.py --device kernel: softcuda's time is the plan's CUDA kernel steps, summed
    repetition by repetition from plan.profile(); its copies are left out, and a host step
    (which kernel time would leave out) stops it."""
    rivals = load_script(ROOT / "benchmarks" / "rivals.py")

    class Plan:
        def profile(self, repeat, warmup):
            self.asked = repeat
            step = [1e-6 * (i + 1) for i in range(repeat)]
            return [
                {"device": "cuda", "op": "h2d", "repetitions_s": [9.0] * repeat},
                {"device": "cuda", "op": "matmul", "repetitions_s": step},
                {"device": "cuda", "op": "softmax", "repetitions_s": [2e-6] * repeat},
                {"device": "cuda", "op": "leaf", "repetitions_s": []},
                {"device": "cuda", "op": "d2h", "repetitions_s": [9.0] * repeat},
            ]

    plan = Plan()
    reps = rivals._softcuda_kernel_reps(plan)
    assert len(reps) == plan.asked
    assert reps[:3] == pytest.approx([3e-6, 4e-6, 5e-6])

    class HostStep(Plan):
        def profile(self, repeat, warmup):
            rows = super().profile(repeat, warmup)
            return rows + [{"device": "cpu", "op": "mean", "repetitions_s": [5.0] * repeat}]

    with pytest.raises(RuntimeError, match=r"\['mean'\] on the host"):
        rivals._softcuda_kernel_reps(HostStep())
    calls = iter([0.5, 0.1, 0.1, 0.1] + [0.03] * 5000)
    first, timed = rivals._kernel_reps(lambda: next(calls))
    assert first == 0.5 and timed[0] == 0.03  # the first call and three warm-ups apart
    assert len(timed) >= rivals.REPS and sum(timed) >= rivals.SECONDS


def test_train_vs_torch_says_where_two_placements_ran_one_plan(capsys):
    """report(): a placement whose plan is the fastest one's step for step is said to be one
    plan with it (the ratio between them is the measurement's), and the report still holds
    every ratio; plans that differ get no such words."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        train = load_script(ROOT / "benchmarks" / "train_vs_torch.py")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    def row(placement, ms, plan):
        return {"library": "softcuda", "placement": placement, "net": "8-4:2", "first_s": 0.1,
                "losses": [1.0], "reps_s": [ms * 1e-3] * 3, "predicted_s": None,
                "plan": plan}  # fmt: skip

    rows = [row("graph", 1.4, "aaa"), row("tuned", 1.06, "bbb"), row("per-op", 1.0, "aaa"),
            row("cpu", 1.2, "ccc")]  # fmt: skip
    assert train.report(rows) == 0
    out = capsys.readouterr().out
    graph = [line for line in out.splitlines() if line.startswith("graph plan /")]
    tuned = [line for line in out.splitlines() if line.startswith("tuned graph plan /")]
    assert graph == [
        "graph plan / fastest softcuda placement (per-op): 1.40 (one plan with per-op, step for "
        "step: the ratio is the measurement's spread)"
    ]
    assert tuned == ["tuned graph plan / fastest softcuda placement (per-op): 1.06"]
