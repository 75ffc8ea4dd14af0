"""softcuda.timings.stats on synthetic timings whose curves and crossovers are known."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softcuda.errors import DataError
from softcuda.timings import schema, stats
from tests.synthetic import Cost, Link, Scenario, from_medians, two_backend

METRIC = "e2e_pinned"
SIZES = tuple(2**k for k in range(4, 23))


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    # cpu 2 us + 1 ns/elem; cuda 21 us + 0.49 ns/elem end to end (pinned): n* ~ 37 000.
    return two_backend()


@pytest.fixture(scope="module")
def nstar(scenario: Scenario) -> float:
    return scenario.crossover("add", "cpu_blas", "cuda_elementwise", METRIC)


def test_known_crossover_matches_the_closed_form(scenario: Scenario, nstar: float) -> None:
    # cpu t = 2e-6 + 1e-9 n; cuda t = L + b n with L = 5e-6 + 2 * 8e-6 and
    # b = 1e-11 + 12 bytes / 25e9 B/s  ->  n* = (L - 2e-6) / (1e-9 - b)
    big_l, b = 5e-6 + 16e-6, 1e-11 + 12 / 25e9
    assert nstar == pytest.approx((big_l - 2e-6) / (1e-9 - b), rel=1e-9)


# --------------------------------------------------------------------------------------------
# curves


def test_curves_one_row_per_key_with_the_median_inside_its_ci(scenario: Scenario) -> None:
    df = scenario.frame(reps=15, seed=3)
    cv = stats.curves(df, METRIC)
    assert list(cv.columns) == stats.CURVE_COLUMNS
    assert len(cv) == 2 * len(SIZES)
    assert not cv.duplicated(stats.CURVE_KEYS).any()
    assert (cv["ci_lo_s"] <= cv["median_s"]).all() and (cv["median_s"] <= cv["ci_hi_s"]).all()
    assert (cv["q25_s"] <= cv["median_s"]).all() and (cv["median_s"] <= cv["q75_s"]).all()
    assert (cv["n"] == 15).all()
    # The medians follow the noise-free model (5% noise, 15 reps).
    cuda = cv[cv["backend"] == "cuda_elementwise"]
    truth = scenario.expected_metric("add", "cuda_elementwise", cuda["size"], METRIC)
    assert np.allclose(cuda["median_s"], truth, rtol=0.06)


def test_curves_use_the_metric_rows_and_skip_bus_rows(scenario: Scenario) -> None:
    df = scenario.frame(sizes=[1024], reps=5)
    resident = stats.curves(df, "resident")
    kernel = resident[resident["backend"] == "cuda_elementwise"]
    # resident pools the kernel rows of both host memory kinds
    assert kernel["n"].tolist() == [10]
    assert set(stats.curves(df, METRIC)["op"]) == {"add"}
    with pytest.raises(DataError, match="unknown metric"):
        stats.curves(df, "fastest")


def test_curves_never_pool_devices(scenario: Scenario) -> None:
    a = scenario.frame(sizes=[64, 128], reps=5)
    b = a.assign(device="Other GPU", device_hash="6" * 64, seconds=a["seconds"] * 2)
    cv = stats.curves(pd.concat([a, b]), METRIC)
    assert sorted(cv["device"].unique()) == ["Other GPU", "Synthetic GPU"]
    assert (cv.groupby(stats.CURVE_KEYS).size() == 1).all()


def test_curves_flag_spread_short_timings_and_few_reps() -> None:
    noisy = two_backend(Cost(2e-6, 1e-9)).frame(sizes=[4096], reps=41, noise=0.5, seed=1)
    cv = stats.curves(noisy, METRIC)
    assert cv["unstable"].all() and cv["reason"].str.contains("IQR").all()

    fast = two_backend(Cost(1e-7, 0.0)).frame(sizes=[16], reps=21, noise=0.01)
    cv = stats.curves(fast, METRIC).set_index("backend")
    assert cv.at["cpu_blas", "unstable"] and "below 1e-06 s" in cv.at["cpu_blas", "reason"]
    assert not cv.at["cuda_elementwise", "unstable"]
    assert cv.at["cuda_elementwise", "reason"] == ""

    few = two_backend().frame(sizes=[4096], reps=3, noise=0.01)
    cv = stats.curves(few, METRIC)
    assert cv["unstable"].all() and cv["reason"].str.contains("only 3 repetitions").all()


def test_median_ci_ranks_match_the_binomial_table() -> None:
    # Classic table values (1-based ranks): n=6 -> (1, 6), n=10 -> (2, 9), n=100 -> (40, 61).
    assert stats.median_ci(np.arange(6.0)) == (0.0, 5.0)
    assert stats.median_ci(np.arange(10.0)) == (1.0, 8.0)
    assert stats.median_ci(np.arange(100.0)) == (39.0, 60.0)
    assert stats.min_reps_for_ci() == 6


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-9, 1.0), min_size=1, max_size=60))
def test_median_ci_brackets_the_median(values: list[float]) -> None:
    lo, hi = stats.median_ci(np.array(values))
    assert lo <= float(np.median(values)) <= hi


def test_median_ci_covers_about_95_percent() -> None:
    rng = np.random.default_rng(7)
    draws = rng.lognormal(0.0, 0.3, size=(2000, 25))  # true median exp(0) = 1
    hits = sum(lo <= 1.0 <= hi for lo, hi in map(stats.median_ci, draws))
    assert 0.93 <= hits / len(draws) <= 0.995


# --------------------------------------------------------------------------------------------
# crossover


def test_crossover_finds_the_known_crossing(scenario: Scenario, nstar: float) -> None:
    df = scenario.frame(sizes=SIZES, reps=30, seed=1)
    c = stats.crossover(df, "add", METRIC)
    assert c.status == "crossing"
    assert (c.cpu_backend, c.cuda_backend) == ("cpu_blas", "cuda_elementwise")
    assert (c.device, c.op, c.dtype, c.metric) == ("Synthetic GPU", "add", "float32", METRIC)
    assert c.lo <= c.size <= c.hi
    assert c.lo <= nstar <= c.hi
    assert c.size == pytest.approx(nstar, rel=0.05)
    assert c.note == ""


def test_crossover_interval_narrows_with_more_repetitions(scenario: Scenario) -> None:
    widths = []
    for reps in (8, 200):
        c = stats.crossover(scenario.frame(reps=reps, seed=2), "add", METRIC, n_boot=400)
        widths.append(math.log(c.hi / c.lo))
    assert widths[1] < 0.5 * widths[0]


def test_crossover_is_reproducible_by_seed(scenario: Scenario) -> None:
    df = scenario.frame(reps=10, seed=4)
    a = stats.crossover(df, "add", METRIC, n_boot=200, seed=5)
    b = stats.crossover(df, "add", METRIC, n_boot=200, seed=5)
    assert a == b


def test_crossover_uses_each_familys_lower_envelope() -> None:
    # cpu_fallback is best below ~1000 elements, cpu_blas above; the crossing (~37 000) is
    # against cpu_blas, and cuda_blas (always slower than cuda_elementwise) never matters.
    sc = Scenario(
        costs={
            "cpu_fallback": Cost(1e-6, 2e-9),
            "cpu_blas": Cost(2e-6, 1e-9),
            "cuda_elementwise": Cost(5e-6, 1e-11),
            "cuda_blas": Cost(9e-6, 2e-11),
        }
    )
    c = stats.crossover(sc.frame(reps=20, seed=1), "add", METRIC, n_boot=300)
    assert (c.cpu_backend, c.cuda_backend) == ("cpu_blas", "cuda_elementwise")
    truth = sc.crossover("add", "cpu_blas", "cuda_elementwise", METRIC)
    assert c.lo <= truth <= c.hi


def test_crossover_everywhere_and_no_data() -> None:
    cpu_wins = two_backend(Cost(1e-6, 1e-12)).frame(reps=9)
    c = stats.crossover(cpu_wins, "add", METRIC)
    assert c.status == "cpu_everywhere" and c.size is None and c.lo is None
    assert (c.cpu_backend, c.cuda_backend) == ("cpu_blas", "cuda_elementwise")

    # resident: no bus, a cheap kernel against a slow CPU op
    cuda_wins = two_backend(Cost(5e-5, 1e-8), Cost(4e-6, 1e-12)).frame(reps=9)
    c = stats.crossover(cuda_wins, "add", "resident")
    assert c.status == "cuda_everywhere" and c.size is None

    only_cpu = cpu_wins[cpu_wins["backend"] == "cpu_blas"]
    c = stats.crossover(only_cpu, "add", METRIC)
    assert c.status == "no_data" and "CUDA" in c.note
    assert stats.crossover(cpu_wins, "relu", METRIC).status == "no_data"


def test_crossover_reports_the_last_cpu_to_cuda_change() -> None:
    # CUDA wins between 1000 and 10 000 only, then again from 100 000 on.
    sizes = [100, 300, 1000, 3000, 10000, 30000, 100000, 300000]
    cpu = {s: 1e-5 for s in sizes}
    cuda = dict(zip(sizes, [2e-5, 1.5e-5, 5e-6, 5e-6, 2e-5, 1.5e-5, 5e-6, 5e-6], strict=True))
    df = from_medians({"cpu_blas": cpu, "cuda_naive": cuda}, reps=11)
    c = stats.crossover(df, "add", METRIC, n_boot=200)
    assert c.status == "crossing"
    assert 30000 < c.size < 100000
    # the first change interpolates to 300 * (1000/300)**(log 1.5 / log 3) = 468, the last
    # likewise to 46,784
    assert "3 sign changes, between 468 and 46,784;" in c.note, c.note


def test_crossover_refuses_mixed_devices_naming_them(scenario: Scenario) -> None:
    a = scenario.frame(sizes=[64, 128], reps=5)
    b = a.assign(device="Other GPU", device_hash="6" * 64)
    with pytest.raises(DataError, match="Other GPU.*Synthetic GPU"):
        stats.crossover(pd.concat([a, b]), "add", METRIC)
    with pytest.raises(DataError, match="device hashes"):
        stats.crossover(pd.concat([a, a.assign(device_hash="7" * 64)]), "add", METRIC)


def test_crossover_needs_a_dtype_when_there_are_several(scenario: Scenario) -> None:
    a = scenario.frame(sizes=[64, 128], reps=5)
    both = pd.concat([a, a.assign(dtype="float64")])
    with pytest.raises(DataError, match="float32, float64"):
        stats.crossover(both, "add", METRIC)
    assert stats.crossover(both, "add", METRIC, dtype="float64").dtype == "float64"


def test_frames_of_another_schema_version_are_refused(scenario: Scenario) -> None:
    df = scenario.frame(sizes=[64], reps=3).assign(schema=schema.SCHEMA_VERSION + 1)
    with pytest.raises(DataError, match="schema version"):
        stats.curves(df, METRIC)


# --------------------------------------------------------------------------------------------
# phases, bus, transfer model


def test_phase_shares_add_up_and_follow_the_model(scenario: Scenario) -> None:
    df = scenario.frame(reps=11, noise=0.02)
    shares = stats.phase_shares(df, "add", "cuda_elementwise", "pinned")
    assert list(shares.columns) == [
        "size",
        "h2d_s",
        "kernel_s",
        "d2h_s",
        "h2d_share",
        "kernel_share",
        "d2h_share",
    ]
    assert shares["size"].tolist() == list(SIZES)
    total = shares[["h2d_share", "kernel_share", "d2h_share"]].sum(axis=1)
    assert np.allclose(total, 1.0)
    big = shares.iloc[-1]  # 4M floats: h2d moves twice the bytes of d2h
    assert big["h2d_share"] == pytest.approx(2 * big["d2h_share"], rel=0.1)
    with pytest.raises(DataError, match="no rows"):
        stats.phase_shares(df, "add", "cuda_tiled", "pinned")


@pytest.mark.parametrize("memory", ["pinned", "pageable"])
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_bus_fit_recovers_latency_and_bandwidth(direction: str, memory: str) -> None:
    sc = two_backend(links={"pinned": (Link(7e-6, 24e9), Link(9e-6, 20e9)),
                            "pageable": (Link(14e-6, 9e9), Link(16e-6, 6e9))})  # fmt: skip
    df = sc.frame(sizes=[64], reps=15, noise=0.03)
    fit = stats.bus_fit(df, direction, memory)
    truth = sc.links[memory][0 if direction == "h2d" else 1]
    assert (fit.direction, fit.host_memory) == (direction, memory)
    assert fit.latency_s == pytest.approx(truth.latency_s, rel=0.1)
    assert fit.bandwidth_Bps == pytest.approx(truth.bandwidth_Bps, rel=0.05)


def test_bus_fit_refuses_what_it_cannot_fit(scenario: Scenario) -> None:
    one = scenario.frame(sizes=[64], reps=3, bus_sizes=[4096])
    with pytest.raises(DataError, match="two copy sizes"):
        stats.bus_fit(one, "h2d", "pinned")
    with pytest.raises(DataError, match="direction"):
        stats.bus_fit(one, "up", "pinned")


def test_io_bytes_splits_inputs_and_output() -> None:
    assert stats.io_bytes("add", "1000", 12000, "float32") == (8000, 4000)
    assert stats.io_bytes("relu", "1000", 8000, "float32") == (4000, 4000)
    assert stats.io_bytes("sum", "1000", 4004, "float32") == (4000, 4)
    # 64x32 @ 32x16 in float64: inputs 2048 + 512 elements, output 1024
    assert stats.io_bytes("matmul", "64x32x16", (2048 + 512 + 1024) * 8, "float64") == (
        (2048 + 512) * 8,
        1024 * 8,
    )
    assert stats.io_bytes("matmul", "4x8x8x8", 4 * 3 * 64 * 4, "float32")[1] == 4 * 64 * 4
    with pytest.raises(DataError, match="MxKxN"):
        stats.io_bytes("matmul", "64", 100, "float32")


def test_transfer_model_explains_the_end_to_end_time() -> None:
    sc = Scenario(
        ops=("add", "matmul"),
        costs={
            "cpu_blas": Cost(2e-6, 1e-9),
            "cuda_elementwise": Cost(5e-6, 1e-11),
            ("matmul", "cuda_tiled"): Cost(6e-6, 2e-13, 3.0),
        },
    )
    df = sc.frame(sizes=[2**k for k in range(3, 13)], reps=11, noise=0.02)
    model = stats.transfer_model(df, "matmul", "cuda_tiled", "pinned")
    assert list(model.columns) == ["size", "model_s", "transfer_s", "kernel_s", "measured_s"]
    assert np.allclose(model["model_s"], model["transfer_s"] + model["kernel_s"])
    assert np.allclose(model["model_s"], model["measured_s"], rtol=0.08)

    # Noise-free truth: the kernel (n^3) overtakes the copies (3 n^2 floats) from some n on.
    grid = model["size"].to_numpy()
    kernel = sc.expected("matmul", "cuda_tiled", grid, "kernel", "pinned")
    copies = sum(sc.expected("matmul", "cuda_tiled", grid, p, "pinned") for p in ("h2d", "d2h"))
    expected = int(grid[np.argmax(kernel > copies)])
    assert stats.transfer_dominance_size(df, "matmul", "cuda_tiled", "pinned") == expected
    # Elementwise add never leaves the bus behind.
    assert stats.transfer_dominance_size(df, "add", "cuda_elementwise", "pinned") is None


def test_curves_flag_a_point_measured_while_the_host_was_off_its_best_speed() -> None:
    df = two_backend().frame(sizes=[1024, 2048, 4096, 8192], reps=21, noise=0.01, seed=2)
    assert not stats.curves(df, METRIC)["unstable"].any()  # no probe rows: nothing to say

    def probe(size: int, seconds: float) -> pd.DataFrame:
        row = df.iloc[0]
        return pd.DataFrame(
            [
                {**row.to_dict(), "size": size, "backend": "machine", "phase": "probe",
                 "repetition": r, "seconds": seconds, "nbytes": 0}
                for r in range(5)
            ]
        )  # fmt: skip

    probes = [probe(1024, 5e-6), probe(2048, 5.1e-6), probe(4096, 7.5e-6), probe(8192, 4.9e-6)]
    cv = stats.curves(pd.concat([df, *probes]), METRIC)
    flagged = cv[cv["unstable"]]
    # best: the 10th percentile of 4.9, 5, 5.1, 7.5 us = 4.93 us; the others are within 10%
    assert set(flagged["size"]) == {4096}
    assert flagged["reason"].str.contains("host at 1.52x its best time").all()  # 7.5 / 4.93
    assert set(cv["backend"]) == {"cpu_blas", "cuda_elementwise"}  # probe rows are no curve


def _probe_rows(like: pd.Series, size: int, seconds: float, attempt: int = 0) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {**like.to_dict(), "size": size, "backend": "machine", "phase": "probe",
             "repetition": r, "seconds": seconds, "nbytes": 0, "attempt": attempt}
            for r in range(5)
        ]
    )  # fmt: skip


def test_the_steadiest_attempt_of_a_point_is_the_one_read() -> None:
    """A point measured again: every attempt's rows stay in the frame, but curves, probe medians
    and the host-speed flag read only the attempt with the lowest score."""
    sizes = [1024, 2048, 4096, 8192]
    df = two_backend().frame(sizes=sizes, reps=21, noise=0.01, seed=3)
    like = df.iloc[0]
    probes = [_probe_rows(like, s, 5e-6) for s in sizes if s != 4096]
    # 4096, first attempt: the host at 1.5x its best time and every timing 40% slower
    first = df[(df["size"] == 4096) & (df["op"] == "add")]  # (not the 4096-byte bus copies)
    slow = first.assign(seconds=first["seconds"] * 1.4)
    second = first.assign(attempt=1)  # the same timings, host at its best speed
    third = first.assign(attempt=2, seconds=first["seconds"] * 1.2)  # host off again
    probes += [
        _probe_rows(like, 4096, 7.5e-6, 0),
        _probe_rows(like, 4096, 5.1e-6, 1),
        _probe_rows(like, 4096, 6.5e-6, 2),
    ]
    rest = df.drop(first.index)
    frame = pd.concat([rest, slow, second, third, *probes], ignore_index=True)

    scores = stats.attempt_scores(frame)
    at = scores.xs(("add", 4096), level=("op", "size")).droplevel("device")
    assert at[0] == pytest.approx(5.0) and at[1] == pytest.approx(0.2) and at[2] > 1
    # best: the 10th percentile of the first attempts' probes (5, 5, 5, 7.5 us)
    assert stats.best_probe(frame).iloc[0] == pytest.approx(5e-6)

    kept = stats.current_rows(frame)
    assert set(kept.query("op == 'add' and size == 4096")["attempt"]) == {1}
    assert stats.current_rows(kept) is kept  # chosen once: its slices need no second choice
    assert len(kept) == len(frame) - len(slow) - len(third) - 10  # two attempts' probe rows too
    cv = stats.curves(frame, METRIC).set_index(["backend", "size"])
    ref = stats.curves(pd.concat([df, *[_probe_rows(like, s, 5e-6) for s in sizes]]), METRIC)
    ref = ref.set_index(["backend", "size"])
    assert np.allclose(cv["median_s"], ref["median_s"])  # attempt 1's timings, not 1.4x or 1.2x
    assert not cv["unstable"].any()  # its probe is within 10% of the best
    assert stats.probe_medians(frame).xs(4096, level="size").iloc[0] == pytest.approx(5.1e-6)


def test_an_attempt_is_chosen_for_its_spread_and_a_tie_goes_to_the_later_one() -> None:
    df = two_backend().frame(sizes=[1024, 2048], reps=21, noise=0.01, seed=5)
    point = df[(df["size"] == 2048) & (df["op"] == "add")]
    rng = np.random.default_rng(0)
    spread = point.assign(seconds=point["seconds"] * rng.choice([1.0, 2.0], len(point)))
    again = point.assign(attempt=1)
    frame = pd.concat([df.drop(point.index), spread, again], ignore_index=True)
    scores = stats.attempt_scores(frame).xs(2048, level="size")
    assert scores.xs(0, level="attempt").iloc[0] > 1 > scores.xs(1, level="attempt").iloc[0]
    assert set(stats.current_rows(frame).query("size == 2048")["attempt"]) == {1}

    tie = pd.concat([df, point.assign(attempt=1)], ignore_index=True)  # identical timings
    assert set(stats.current_rows(tie).query("size == 2048")["attempt"]) == {1}
    # a frame of first attempts only (or without the column) comes back with every row
    assert stats.current_rows(df).equals(df) and not df.attrs  # (the input is not marked)
    assert stats.current_rows(df.drop(columns="attempt")).equals(df.drop(columns="attempt"))


def test_the_host_is_judged_against_its_fast_state_not_a_sweep_median() -> None:
    """Two sweeps that met the same fast state for different shares of their points: the
    reference stays the fast state, so a point measured in it counts as steady in both."""
    sizes = [2**k for k in range(10, 20)]
    df = two_backend().frame(sizes=sizes, reps=21, noise=0.01, seed=6)
    like = df.iloc[0]
    for slow_share in (3, 7):  # of the 10 points, this many in the slow spell (1.5x)
        probes = [
            _probe_rows(like, s, 7.5e-6 if i < slow_share else 5e-6) for i, s in enumerate(sizes)
        ]
        frame = pd.concat([df, *probes], ignore_index=True)
        assert stats.best_probe(frame).iloc[0] == pytest.approx(5e-6)
        cv = stats.curves(frame, METRIC)
        flagged = set(cv.loc[cv["reason"].str.contains("host at 1.50x"), "size"])
        assert flagged == set(sizes[:slow_share])


def _retried_frame() -> tuple[pd.DataFrame, pd.DataFrame]:
    """add at 4 sizes with the host at 5 us; mul at 4 sizes with the host at 6 us (a slow spell
    through the whole op), its 2048 measured again at 5 us with timings 30% faster."""
    sizes = [1024, 2048, 4096, 8192]
    add = two_backend().frame(sizes=sizes, reps=21, noise=0.01, seed=7)
    add = add[add["op"] == "add"]
    slow = add.assign(op="mul", seconds=add["seconds"] * 1.3)
    again = slow[slow["size"] == 2048].assign(attempt=1, seconds=lambda f: f["seconds"] / 1.3)
    like = add.iloc[0]
    probes = [_probe_rows(like, s, 5e-6) for s in sizes]
    probes += [_probe_rows(like, s, 6e-6).assign(op="mul") for s in sizes]
    probes.append(_probe_rows(like, 2048, 5e-6, 1).assign(op="mul"))
    return pd.concat([add, slow, again, *probes], ignore_index=True), again


def test_a_point_is_judged_against_the_whole_sweep_whatever_rows_the_caller_passes() -> None:
    from softcuda.timings import select

    frame, again = _retried_frame()
    whole = stats.current_rows(frame)
    assert set(whole.query("op == 'mul' and size == 2048")["attempt"]) == {1}  # 5 us = best
    # one op's rows taken from the chosen frame keep the whole sweep's judgement ...
    mul = whole[whole["op"] == "mul"]
    assert stats.best_probe(mul).iloc[0] == pytest.approx(5e-6)
    # ... and selection narrows to an op only after choosing over the whole frame
    cv = select._op_curves(frame, "mul", METRIC, None).set_index(["backend", "size"])
    expected = again[again["phase"].isin(["wall", "end_to_end"])]
    expected = expected[(expected["backend"] == "cpu_blas")]["seconds"].median()
    assert cv.loc[("cpu_blas", 2048), "median_s"] == pytest.approx(expected)
    assert select.buckets(frame, "mul") == select.decide(frame)["mul"]


def test_an_attempt_that_lacks_a_series_is_never_chosen() -> None:
    """A sweep stopped while writing an attempt leaves it without some backend's rows."""
    df = two_backend().frame(sizes=[1024, 2048], reps=21, noise=0.01, seed=8)
    point = df[(df["size"] == 2048) & (df["op"] == "add")]
    spread = point.assign(seconds=point["seconds"] * np.tile([1.0, 2.0], len(point))[: len(point)])
    torn = point[point["backend"] == "cpu_blas"].assign(attempt=1)  # the CUDA rows never came
    frame = pd.concat([df.drop(point.index), spread, torn], ignore_index=True)
    scores = stats.attempt_scores(frame).xs(2048, level="size")
    assert np.isinf(scores.xs(1, level="attempt").iloc[0])
    assert set(stats.current_rows(frame).query("op == 'add' and size == 2048")["attempt"]) == {0}


def test_a_crossover_against_numpy_on_one_core_sits_below_the_one_against_every_core():
    # cpu_threads streams 8x faster than cpu_fallback past its start-up cost: the GPU must be
    # larger to win against it, and the one-core comparison says how much lower it would look
    scenario = Scenario(
        costs={
            "cpu_fallback": Cost(1e-6, 1e-9),
            "cpu_threads": Cost(4e-6, 1.25e-10),
            "cuda_elementwise": Cost(5e-6, 1e-11),
        }
    )
    frame = scenario.frame(reps=9, noise=0.02)
    every = stats.crossover(frame, "add", "resident", n_boot=200)
    one = stats.crossover(frame, "add", "resident", n_boot=200, cpu_backends=(stats.ONE_CORE,))
    assert every.against == "every CPU backend" and one.against == "cpu_fallback"
    truth = scenario.crossover("add", "cpu_threads", "cuda_elementwise", "resident")
    assert every.lo <= truth <= every.hi
    truth = scenario.crossover("add", "cpu_fallback", "cuda_elementwise", "resident")
    assert one.lo <= truth <= one.hi and one.size < every.size
    assert one.cpu_backend == "cpu_fallback"
