"""softcuda.timings.select: winners, ties, buckets and refinement on synthetic timings."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from softcuda.errors import DataError
from softcuda.timings import select
from tests.synthetic import Cost, Scenario, from_medians, two_backend

METRIC = "e2e_pinned"
CPU, CUDA = "cpu_blas", "cuda_elementwise"


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return two_backend()  # end-to-end crossover near 37 000 elements


@pytest.fixture(scope="module")
def nstar(scenario: Scenario) -> float:
    return scenario.crossover("add", CPU, CUDA, METRIC)


def check_tiling(buckets: list[select.Bucket]) -> None:
    assert buckets[0].lo == 0 and buckets[-1].hi is None
    for left, right in zip(buckets, buckets[1:], strict=False):
        assert left.hi == right.lo and left.lo < left.hi
        assert left.backend != right.backend


# --------------------------------------------------------------------------------------------


def test_simplicity_order_puts_unknown_backends_last_alphabetically() -> None:
    order = sorted(["zeta_gpu", "cuda_blas", "alpha_gpu", "cpu_fallback", "cuda_tiled"],
                   key=select.simplicity_key)  # fmt: skip
    assert order == ["cpu_fallback", "cuda_tiled", "cuda_blas", "alpha_gpu", "zeta_gpu"]
    assert select.simpler("cuda_naive", "cuda_elementwise") == "cuda_elementwise"


def test_winners_follow_the_known_crossover(scenario: Scenario, nstar: float) -> None:
    sizes = [2**k for k in range(6, 22)]
    table = select.winners(scenario.frame(sizes, reps=15, seed=1), "add")
    assert list(table.columns) == select.WINNER_COLUMNS
    assert table["size"].tolist() == sizes
    clear = table[(table["size"] < nstar / 1.5) | (table["size"] > nstar * 1.5)]
    expected = np.where(clear["size"] < nstar, CPU, CUDA)
    assert clear["winner"].tolist() == expected.tolist()
    assert clear["decided"].all() and not clear["tie"].any()
    assert (clear["winner_median_s"] < clear["runner_up_median_s"]).all()


@pytest.mark.parametrize(
    ("simple", "complex_"),
    # the last two pairs sort the other way by name: the order is SIMPLICITY's, not the names'
    [("cuda_naive", "cuda_tiled"), ("cpu_fallback", "cpu_blas"), ("cuda_tiled", "cuda_blas")],
)
def test_ties_keep_the_simpler_backend_and_are_marked(simple: str, complex_: str) -> None:
    # Two backends with the same cost: every size is a tie, whatever the noise says.
    same = Scenario(costs={complex_: Cost(2e-5, 1e-9), simple: Cost(2e-5, 1e-9)})
    df = same.frame([256, 1024, 4096, 16384], reps=9, noise=0.05, seed=3)
    metric = "resident" if simple.startswith("cuda") else "e2e_pinned"
    table = select.winners(df, "add", metric)
    assert table["tie"].all() and not table["decided"].any()
    assert set(table["winner"]) == {simple} and set(table["runner_up"]) == {complex_}
    (bucket,) = select.buckets(df, "add", metric)
    assert (bucket.lo, bucket.hi, bucket.backend, bucket.tie) == (0, None, simple, True)
    assert "tie at 4/4 sizes" in bucket.note


def test_a_tie_with_an_unknown_backend_keeps_the_listed_one() -> None:
    df = from_medians({"cuda_blas": {100: 1.0e-4}, "my_gpu": {100: 0.99e-4}}, noise=0.05)
    row = select.winners(df, "add").iloc[0]
    assert (row["winner"], row["runner_up"], row["tie"]) == ("cuda_blas", "my_gpu", True)
    assert row["winner_median_s"] == pytest.approx(1.0e-4)


def test_buckets_of_the_known_crossover(scenario: Scenario, nstar: float) -> None:
    df = scenario.frame([2**k for k in range(6, 22)], reps=15, seed=1)
    low, high = select.buckets(df, "add")
    check_tiling([low, high])
    assert (low.backend, high.backend) == (CPU, CUDA)
    # the boundary falls between the two measured sizes that bracket n* (32768, 65536)
    assert 32768 < low.hi <= 65536
    assert low.hi == pytest.approx(nstar, rel=0.1)
    pattern = (
        r"^cpu_blas \d\.\d\de-\d\d s vs cuda_elementwise \d\.\d\de-\d\d s at 32768; "
        r"crossover (\d+) \[(\d+), (\d+)\]"
    )
    m = re.match(pattern, low.note)
    assert m, low.note
    at, lo, hi = map(int, m.groups())
    assert at == low.hi and lo <= at <= hi and 32768 <= lo and hi <= 65536
    assert "\n" not in high.note and "cuda_elementwise" in high.note


def test_single_bucket_when_one_family_wins_everywhere() -> None:
    cpu_wins = two_backend(Cost(1e-6, 1e-12)).frame(reps=9)
    (bucket,) = select.buckets(cpu_wins, "add")
    assert (bucket.lo, bucket.hi, bucket.backend) == (0, None, CPU)
    cuda_wins = two_backend(Cost(5e-5, 1e-8), Cost(4e-6, 1e-12)).frame(reps=9)
    (bucket,) = select.buckets(cuda_wins, "add", "resident")
    assert (bucket.lo, bucket.hi, bucket.backend) == (0, None, CUDA)


def test_a_backend_stopped_at_large_sizes_leaves_a_note_without_a_runner_up() -> None:
    # max_point_s stopped cpu_fallback after 2^20: at the last bucket's last sizes only the GPU
    # is left, and the note names no runner-up there (it used to raise KeyError: nan)
    sizes = [2**k for k in range(10, 25)]
    medians = {
        "cpu_fallback": {z: 1e-9 * z for z in sizes if z <= 2**20},
        "cuda_elementwise": {z: 2e-5 + 1e-10 * z for z in sizes},
    }
    low, high = select.buckets(from_medians(medians), "add", n_boot=20)
    assert (low.backend, high.backend) == ("cpu_fallback", "cuda_elementwise")
    assert high.note.endswith(f"cuda_elementwise {2e-5 + 1e-10 * 2**24:.2e} s at {2**24}")


def test_boundary_is_the_interpolated_crossing_or_the_geometric_mean() -> None:
    # A = 1e-4 at both sizes; B falls from 4e-4 to 2.5e-5: log-linear crossing at the
    # geometric point where log(tB/tA) = 0, i.e. 100 * 16**(log 4 / log 16) = 400.
    medians = {"cpu_blas": {100: 1e-4, 1600: 1e-4}, "cuda_tiled": {100: 4e-4, 1600: 2.5e-5}}
    low, high = select.buckets(from_medians(medians), "add")
    assert low.hi == 400 and "crossover 400" in low.note
    # If B ties A at s1 and wins clearly at s2, giving the tie to the simpler A would open a
    # boundary that buys nothing at s1: the tie goes to B, marked, and B takes every size.
    medians = {"cpu_blas": {100: 1e-4, 900: 1e-4}, "cuda_tiled": {100: 0.999e-4, 900: 2e-5}}
    (only,) = select.buckets(from_medians(medians, noise=0.05), "add")
    assert only.backend == "cuda_tiled" and only.tie and "tie at 1/2 sizes" in only.note


def test_without_a_crossing_the_boundary_is_the_geometric_mean() -> None:
    # cuda_tiled was not measured at 100 (NaN there): no crossing can be read, and the boundary
    # goes to sqrt(100 * 1600) = 400, not to the arithmetic mean (850)
    medians = {"cpu_blas": {100: 1e-4, 1600: 1e-4}, "cuda_tiled": {1600: 2.5e-5}}
    low, high = select.buckets(from_medians(medians), "add")
    assert (low.backend, low.hi, high.backend) == ("cpu_blas", 400, "cuda_tiled")
    assert "no crossing in (100, 1600], boundary 400" in low.note


def test_a_zero_median_places_a_boundary_instead_of_raising() -> None:
    # a CSV from elsewhere may hold a time of 0 s: its log ratio is undefined, so the boundary
    # falls back to the geometric mean (it used to raise ValueError: math domain error)
    medians = {"cpu_blas": {100: 0.0, 400: 2e-5}, "cuda_tiled": {100: 5e-5, 400: 1e-6}}
    low, high = select.buckets(from_medians(medians, noise=0.05), "add", n_boot=50)
    assert (low.backend, low.hi, high.backend) == ("cpu_blas", 200, "cuda_tiled")


def test_the_crossover_interval_spreads_with_the_noise() -> None:
    # the bootstrap interval is the spread of the crossing over resampled repetitions: with 10%
    # noise it is a stretch around the boundary, and it holds the true crossing (400)
    medians = {"cpu_blas": {100: 1e-4, 1600: 1e-4}, "cuda_tiled": {100: 4e-4, 1600: 2.5e-5}}
    df = from_medians(medians, reps=15, noise=0.10, seed=2)
    low, _ = select.buckets(df, "add", n_boot=200)
    at, lo, hi = map(int, re.search(r"crossover (\d+) \[(\d+), (\d+)\]", low.note).groups())
    assert lo < at < hi and lo <= 400 <= hi and hi / lo < 2


def test_an_island_win_does_not_split_the_profile() -> None:
    # B is 8% faster at one size between sizes A wins: real or noise, it is not worth a bucket.
    medians = {
        "cpu_blas": {100: 1e-4, 200: 2e-4, 400: 4e-4},
        "cuda_tiled": {100: 2e-4, 200: 1.85e-4, 400: 8e-4},
    }
    (only,) = select.buckets(from_medians(medians), "add")
    assert only.backend == "cpu_blas" and only.tie
    # ...but the same island, 3x faster, is kept
    medians["cuda_tiled"][200] = 0.6e-4
    assert [b.backend for b in select.buckets(from_medians(medians), "add")] == [
        "cpu_blas",
        "cuda_tiled",
        "cpu_blas",
    ]


def test_a_near_tie_gets_the_same_buckets_however_densely_it_was_measured() -> None:
    """Refinement adds sizes near a boundary; a 12% win over two half-octave steps is not worth
    a bucket, and six more sizes inside the same stretch must not make it one."""
    sizes = [64, 91, 128, 181, 256, 362, 512]
    a = {z: 1e-6 * z for z in sizes}  # A: linear in size
    b = {z: 2e-6 * z for z in sizes}  # B: twice as slow, but 12% faster at 181 and 256
    b.update({181: a[181] / 1.12, 256: a[256] / 1.12})
    sparse = [
        b.backend for b in select.buckets(from_medians({"cpu_blas": a, "cuda_tiled": b}), "add")
    ]
    for z in (190, 200, 210, 220, 230, 240):  # refined inside the near-tie
        a[z], b[z] = 1e-6 * z, 1e-6 * z / 1.12
    dense = [
        b.backend for b in select.buckets(from_medians({"cpu_blas": a, "cuda_tiled": b}), "add")
    ]
    assert sparse == dense == ["cpu_blas"]


@st.composite
def winner_patterns(draw: st.DrawFn) -> tuple[list[int], list[str]]:
    sizes = sorted(draw(st.sets(st.integers(1, 10**7), min_size=1, max_size=12)))
    names = draw(
        st.lists(
            st.sampled_from(["cpu_blas", "cuda_naive", "cuda_tiled"]),
            min_size=len(sizes),
            max_size=len(sizes),
        )
    )
    return sizes, names


@settings(max_examples=30, deadline=None)
@given(winner_patterns())
# a 3x win at one size crowded by its neighbours (found by CI with MIN_SPAN = 0.25)
@example(([1, 43, 49, 52], ["cpu_blas", "cpu_blas", "cuda_naive", "cpu_blas"]))
def test_buckets_tile_and_follow_any_winner_sequence(pattern: tuple[list[int], list[str]]) -> None:
    sizes, names = pattern
    backends = ["cpu_blas", "cuda_naive", "cuda_tiled"]
    medians = {
        b: {s: (1e-4 if w == b else 3e-4) for s, w in zip(sizes, names, strict=True)}
        for b in backends
    }
    df = from_medians(medians, reps=7, noise=0.01)
    buckets = select.buckets(df, "add", n_boot=20)
    check_tiling(buckets)
    runs = 1 + sum(a != b for a, b in zip(names, names[1:], strict=False))
    assert len(buckets) == runs
    for size, winner in zip(sizes, names, strict=True):
        (home,) = [b for b in buckets if b.contains(size)]
        assert home.backend == winner and not home.tie
    # each boundary lies in (s1, s2] of the flip it separates
    for left in buckets[:-1]:
        s1 = max(s for s in sizes if s < left.hi)
        s2 = min(s for s in sizes if s >= left.hi)
        assert s1 < left.hi <= s2


# --------------------------------------------------------------------------------------------
# refinement


def test_refinement_converges_to_the_known_crossover(scenario: Scenario, nstar: float) -> None:
    # Ties keep the simpler backend until CUDA is *proven* faster, which moves the boundary up
    # by about the resolution of the median CIs; 41 reps at 3% noise make that a few percent.
    sizes = [2**k for k in range(4, 23, 2)]  # a coarse first pass: factor 4
    df = scenario.frame(sizes, reps=41, noise=0.03, seed=0)
    for round_ in range(1, 30):
        new = select.refinement_sizes(df, "add")
        if not new:
            break
        measured = set(df["size"])
        assert all(isinstance(s, int) and s not in measured for s in new)
        more = scenario.frame(new, reps=41, noise=0.03, seed=round_, bus_sizes=())
        df = pd.concat([df, more])
    else:
        pytest.fail("refinement did not terminate")
    assert round_ <= 6
    low, high = select.buckets(df, "add", n_boot=100)
    assert (low.backend, high.backend) == (CPU, CUDA)
    assert low.hi == pytest.approx(nstar, rel=0.10)
    flip = select.winners(df, "add")
    s1 = flip.loc[flip["size"] < low.hi, "size"].max()
    s2 = flip.loc[flip["size"] >= low.hi, "size"].min()
    assert s2 / s1 <= 1.10


def test_refinement_brackets_each_boundary_within_ten_percent() -> None:
    # a flip between 1000 and 1150 (15% apart) needs sizes between them; 1000 and 1090 are
    # known within 10%
    def flip_between(s1: int, s2: int) -> list[int]:
        medians = {"cpu_blas": {s1: 1e-4, s2: 1e-4}, "cuda_tiled": {s1: 2e-4, s2: 0.5e-4}}
        return select.refinement_sizes(from_medians(medians), "add")

    new = flip_between(1000, 1150)
    assert new and all(1000 < z < 1150 for z in new)
    assert flip_between(1000, 1090) == []


def test_refinement_stops_when_no_integer_is_left() -> None:
    medians = {"cpu_blas": {1: 1e-5, 2: 1e-5}, "cuda_tiled": {1: 5e-5, 2: 1e-6}}
    assert select.refinement_sizes(from_medians(medians), "add") == []
    medians = {"cpu_blas": {1: 1e-5, 3: 1e-5}, "cuda_tiled": {1: 5e-5, 3: 1e-6}}
    assert select.refinement_sizes(from_medians(medians), "add") == [2]


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 120))
def test_refinement_terminates_even_when_winners_flip_at_random(seed: int, top: int) -> None:
    # An adversary: every newly measured size gets a random winner.  Refinement may only ask
    # for unmeasured integers inside the measured range, so the loop must end.
    rng = np.random.default_rng(seed)
    backends = ["cpu_blas", "cuda_tiled"]

    def measure(sizes: list[int]) -> dict[str, dict[int, float]]:
        wins = rng.integers(0, 2, size=len(sizes))
        return {
            b: {s: (1e-4 if wins[i] == k else 3e-4) for i, s in enumerate(sizes)}
            for k, b in enumerate(backends)
        }

    medians = measure([1, top])
    for _ in range(top + 1):
        new = select.refinement_sizes(from_medians(medians, reps=5), "add")
        if not new:
            break
        assert all(1 < s < top and s not in medians["cpu_blas"] for s in new)
        for b, points in measure(new).items():
            medians[b].update(points)
    else:
        pytest.fail("refinement did not terminate")


# --------------------------------------------------------------------------------------------
# the scan around each boundary, and winners that alternate there


def crossing_at_400(sizes: list[int]) -> dict[str, dict[int, float]]:
    """cpu_blas flat at 1e-4 s, cuda_tiled 1e-4 * (400 / size)**2: they cross at exactly 400,
    and either wins by more than MIN_EFFECT at 5% from it."""
    return {
        "cpu_blas": {z: 1e-4 for z in sizes},
        "cuda_tiled": {z: 1e-4 * (400 / z) ** 2 for z in sizes},
    }


def test_scan_looks_on_both_sides_of_the_boundary_once() -> None:
    medians = crossing_at_400([100, 200, 300, 380, 420, 600, 1600])
    (low, _) = select.buckets(from_medians(medians), "add", n_boot=20)
    assert low.hi == 400 and "alternate" not in low.note
    sizes = select.scan_sizes(from_medians(medians), "add", steps=4)
    # 400 * 1.06**k, k = -4..4: 317 336 356 (377: next to 380) | (424: next to 420) 449 476 505
    assert sizes == [317, 336, 356, 449, 476, 505]
    assert select.scan_sizes(from_medians(medians), "add", steps=0) == []
    assert select.scan_sizes(from_medians(medians), "add", steps=1) == []  # both next to one
    again = crossing_at_400([100, 200, 300, 380, 420, 600, 1600, *sizes])
    assert select.scan_sizes(from_medians(again), "add", steps=4) == []  # measured: not again
    # nothing flips: nothing to scan; and never outside the measured range
    assert select.scan_sizes(from_medians({"cpu_blas": {1: 1e-5, 9: 1e-5}}), "add") == []
    edge = crossing_at_400([380, 420])
    assert select.scan_sizes(from_medians(edge), "add", steps=4) == []


def test_winners_that_alternate_near_the_boundary_widen_its_interval() -> None:
    sizes = [100, 150, 200, 250, 300, 330, 350, 380, 420, 450, 500, 600, 1600]
    medians = crossing_at_400(sizes)
    medians["cuda_tiled"][330] = 0.9e-4  # 10% faster below the boundary: too little for a bucket
    medians["cpu_blas"][500] = 0.6e-4  # and 7% faster above it
    medians["cuda_tiled"][150] = 0.85e-4  # far below it (400 / 150 > ALTERNATION_REACH)
    low, high = select.buckets(from_medians(medians), "add", n_boot=20)
    assert (low.backend, low.hi, high.backend) == ("cpu_blas", 400, "cuda_tiled")
    assert re.search(
        r"crossover 400 \[\d+, \d+\]; winners alternate over \[330, 500\]: "
        r"cuda_tiled faster at 330; cpu_blas faster at 500;",
        low.note,
    ), low.note
    assert "150" not in low.note
    # a win by less than MIN_EFFECT is not alternation
    medians["cuda_tiled"][330] = 0.97e-4
    medians["cpu_blas"][500] = 1e-4 * (400 / 500) ** 2 * 0.99
    low, _ = select.buckets(from_medians(medians), "add", n_boot=20)
    assert "alternate" not in low.note, low.note


def curves_of(rows: list[tuple[str, int, float, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["backend", "size", *select.CURVE_VALUES])


def test_a_decided_win_needs_the_intervals_apart_and_min_effect() -> None:
    cv = curves_of([
        ("cpu_blas", 10, 1.0, 0.99, 1.01), ("cuda_tiled", 10, 2.0, 1.9, 2.1),    # apart, 2x
        ("cpu_blas", 20, 1.0, 0.5, 1.5), ("cuda_tiled", 20, 2.0, 1.4, 2.6),      # overlap
        ("cpu_blas", 30, 1.0, 0.99, 1.01), ("cuda_tiled", 30, 1.03, 1.02, 1.04),  # apart, 3%
    ])  # fmt: skip
    assert select._faster(cv, "cpu_blas", "cuda_tiled") == [10]
    assert select._faster(cv, "cuda_tiled", "cpu_blas") == []


def test_alternation_counts_wins_in_the_flips_own_buckets_near_its_boundary() -> None:
    # A | B from 100 | C from 120.  Seconds of (A, B, C) per size:
    times = {
        40: (2, 1, 3), 60: (2, 1, 3),  # B beats A, but further than ALTERNATION_REACH below 100
        90: (2, 1, 3),                  # B beats A below 100: alternation
        95: (2, 1, 0.5),                # also C beats B, but in A's bucket: not flip 1's
        105: (2, 1, 0.5),               # C beats B below 120: alternation
        110: (1, 2, 3),                 # A beats B above 100: alternation
        118: (2, 1, 3),
        125: (1, 2, 3),                 # B beats C above 120; A beats B, but in C's bucket
    }  # fmt: skip
    rows = [
        (name, size, t, t * 0.99, t * 1.01)
        for size, abc in times.items()
        for name, t in zip("ABC", map(float, abc), strict=True)
    ]
    cv = curves_of(rows)
    flips = [
        select._Flip(90, 110, "A", "B", 100, True),
        select._Flip(118, 125, "B", "C", 120, True),
    ]
    assert 40 < 60 < 100 / select.ALTERNATION_REACH < 90 and 125 < 100 * select.ALTERNATION_REACH
    assert select._alternation(cv, flips, 0) == ([90, 95], [110])
    assert select._alternation(cv, flips, 1) == ([105], [125])


# --------------------------------------------------------------------------------------------


def test_decide_covers_every_op_but_the_bus() -> None:
    sc = Scenario(
        ops=("add", "relu"),
        costs={CPU: Cost(2e-6, 1e-9), CUDA: Cost(5e-6, 1e-11)},
    )
    df = sc.frame([2**k for k in range(6, 20, 2)], reps=7)
    decided = select.decide(df, n_boot=50)
    assert sorted(decided) == ["add", "relu"]
    for op, buckets in decided.items():
        check_tiling(buckets)
        assert all(b.op == op for b in buckets)


def test_selection_refuses_mixed_devices_naming_them(scenario: Scenario) -> None:
    a = scenario.frame([64, 128], reps=5)
    mixed = pd.concat([a, a.assign(device="Other GPU", device_hash="6" * 64)])
    for call in (
        lambda: select.winners(mixed, "add"),
        lambda: select.buckets(mixed, "add"),
        lambda: select.refinement_sizes(mixed, "add"),
        lambda: select.decide(mixed),
    ):
        with pytest.raises(DataError, match=r"Other GPU, Synthetic GPU"):
            call()


def test_selection_prefers_float32_and_rejects_unknown_ops(scenario: Scenario) -> None:
    a = scenario.frame([64, 1 << 20], reps=5)
    doubled = a.assign(dtype="float64", seconds=a["seconds"] * 100)
    table = select.winners(pd.concat([a, doubled]), "add")
    assert math.isclose(table["winner_median_s"].iloc[0], 2.06e-6, rel_tol=0.1)
    with pytest.raises(DataError, match="no rows for op 'relu'"):
        select.buckets(a, "relu")


def test_a_backend_running_another_s_kernel_is_read_as_that_kernel(monkeypatch) -> None:
    # A backend that runs another's kernel below some size (``runs_as_below``; no backend does
    # now, so the registry entry is made so here): below 2 MiB of add (174,762 elements)
    # cpu_threads runs cpu_fallback's kernel, and its 20% "win" there is one kernel timed
    # twice.  Read as that kernel, it ties, and the simpler backend keeps every size where
    # threads do not pay...
    import dataclasses

    from softcuda.backends import BACKENDS
    from softcuda.timings import stats

    made = dataclasses.replace(BACKENDS["cpu_threads"], runs_as_below=("cpu_fallback", 2 << 20))
    monkeypatch.setitem(BACKENDS, "cpu_threads", made)

    medians = {
        "cpu_fallback": {2**12: 1e-6, 2**14: 10e-6, 2**17: 80e-6, 2**18: 160e-6, 2**20: 1e-3},
        "cpu_threads": {2**12: 0.8e-6, 2**14: 8e-6, 2**17: 64e-6, 2**18: 250e-6, 2**20: 2e-3},
    }
    frame = from_medians(medians)
    assert [b.backend for b in select.buckets(frame, "add")] == ["cpu_fallback"]
    read = stats.shared_kernels(frame)
    assert len(read) == len(frame)
    mine = read[read["backend"] == "cpu_threads"].sort_values(["size", "seconds"])
    theirs = read[read["backend"] == "cpu_fallback"].sort_values(["size", "seconds"])
    small = mine["size"] < 174_763
    below = theirs.loc[theirs["size"] < 174_763, "seconds"].tolist()
    assert mine.loc[small, "seconds"].tolist() == below
    assert np.median(mine.loc[mine["size"] == 2**20, "seconds"]) == pytest.approx(2e-3)
    # ...and where they pay, the backend that runs the same kernel below takes the whole range
    # (one bucket: at run time the small sizes run cpu_fallback's kernel either way)
    medians["cpu_threads"].update({2**18: 50e-6, 2**20: 0.3e-3})
    assert [b.backend for b in select.buckets(from_medians(medians), "add")] == ["cpu_threads"]
    # where cpu_fallback was not timed, cpu_threads' timing is the only one of that kernel
    del medians["cpu_fallback"][2**14]
    read = stats.shared_kernels(from_medians(medians))
    at = read[(read["backend"] == "cpu_threads") & (read["size"] == 2**14)]
    assert np.median(at["seconds"]) == pytest.approx(8e-6)
    # and an op cpu_threads was not timed for gets no rows of it
    alone = from_medians({"cpu_fallback": medians["cpu_fallback"]})
    assert set(stats.shared_kernels(alone)["backend"]) == {"cpu_fallback"}
