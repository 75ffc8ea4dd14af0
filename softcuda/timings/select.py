"""Backend selection: raw timings of one device -> size buckets per op -> the [ops] of CONFIG.soft.

The rule, per op, under one metric (default schema.DEFAULT_METRIC, end to end with pinned host
memory):

1. At every measured size the backend with the lowest median wins.  The win is *decided* only
   when its median CI and the runner-up's do not overlap and the runner-up is at least
   MIN_EFFECT (5%) slower; otherwise it is a tie and the simpler of the two is kept
   (SIMPLICITY), because a more complex backend must earn its place.
   Then every boundary must pay for itself (``_segment``): a backend that wins a short run of
   sizes by little (SWITCH_COST, summed over the run) does not get a bucket of its own, and a
   tie next to a boundary goes to the side that avoids one.  Without this, two sweeps on one
   machine disagreed on islands of small wins among GPU matmuls whose end-to-end time is all
   transfer (docs/findings.md, "The history of the reference").
2. Neighbouring sizes with one winner merge into a bucket.  Buckets tile [0, inf): the first
   starts at 0, the last is open (hi = None), each hi is the next lo.
3. Between the last size s1 of one bucket (winner A) and the first size s2 of the next (winner
   B) the boundary is where A's and B's median curves cross, linear in log(size) and log(time)
   between s1 and s2, rounded to an int in (s1, s2]; if they do not cross there, the geometric
   mean of s1 and s2.  Lower bounds are inclusive: size s1 stays with A, s2 goes to B.
4. ``refinement_sizes`` proposes sizes between s1 and s2 until every boundary is bracketed
   within a relative tolerance; the runner measures them and asks again.
5. ``scan_sizes`` (spec key ``scan``) then proposes sizes on both sides of every boundary,
   SCAN_STEP apart.  Where A's and B's times do not cross once but alternate (cpu_blas's matmul
   time is not monotone in n and jumps from one n to the next near the crossover, while the
   GPU's stays flat: docs/findings.md, "The matmul crossover is a band"), the sizes within
   ALTERNATION_REACH of the boundary, in its two buckets, where the other side's backend won
   decidedly are named in the note, and the interval the note gives is widened to cover them
   ("winners alternate over [lo, hi]"), which is what ``softcuda verify --recheck`` re-times
   outside of.  The boundary stays where the DP put it: a win at one scanned size does not pay
   for buckets of its own.

One device at a time: every function raises DataError for a frame holding several devices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from softcuda.backends import BACKENDS
from softcuda.errors import DataError
from softcuda.timings import schema, stats

SIMPLICITY = tuple(BACKENDS)
"""Backends from simplest to most complex (the registry's order); a tie keeps the earlier one.
Backends not listed come after these, alphabetically."""

PREFERRED_DTYPE = "float32"
"""The dtype selection uses when an op was measured in several and none is asked for: the
library's default dtype, which is what CONFIG.soft serves."""

MIN_EFFECT = 0.05
"""A win is decided only when the runner-up's median is at least this much slower (relative) as
well as the CIs separating: with hundreds of repetitions the CIs of two equally fast backends
(cpu_fallback and cpu_blas run the same elementwise code) separate on drift alone, and the
profile would flip between them at every other size."""

SWITCH_COST = 0.2
"""What a change of backend must save, in log(time) beyond MIN_EFFECT summed over the sizes it
covers, each size weighted by the half-octaves of log(size) it stands for (0.2 is about 22% at
one size of a sweep at two sizes per octave): see ``_segment``."""

MIN_SPAN = 0.5
"""The least weight of one size in ``_segment`` (1 = a size of a sweep at two per octave): a
threefold win at one size between two close neighbours still pays for its two boundaries."""

DEFAULT_N_BOOT = 1000
"""Bootstrap resamples for the interval of each boundary quoted in a bucket's note."""

REFINE_STEP = 0.45
"""Refinement probes sit at boundary * (1 + tol)**(+-REFINE_STEP): two points closer together
than the tolerance (2 * 0.45 < 1), so an accurate boundary estimate is bracketed in one round."""

SCAN_STEP = 0.06
"""Relative spacing of the sizes ``scan_sizes`` proposes (4 on each side reach 26% away, just
beyond recheck.MARGIN)."""

ALTERNATION_REACH = (1.0 + SCAN_STEP) ** 4.5
"""How far from a boundary (a factor, about 1.30) a win on the wrong side of it counts as the
winners alternating there: the reach of default.yaml's 4-step scan and half a step.  A win
further out, in a bucket's far end, is not about where this boundary lies (and would send
``verify --recheck`` to sizes the sweep never measured)."""

CURVE_VALUES = ("median_s", "ci_lo_s", "ci_hi_s")

WINNER_COLUMNS = [
    "size",
    "winner",
    "runner_up",
    "winner_median_s",
    "runner_up_median_s",
    "decided",
    "tie",
]


def simplicity_key(backend: str) -> tuple[int, str]:
    """Sort key: position in SIMPLICITY, unknown backends after them by name."""
    rank = SIMPLICITY.index(backend) if backend in SIMPLICITY else len(SIMPLICITY)
    return rank, backend


def simpler(a: str, b: str) -> str:
    """The simpler of two backends."""
    return min(a, b, key=simplicity_key)


@dataclass(frozen=True)
class Bucket:
    """One line of CONFIG.soft's [ops]: sizes lo <= size < hi (hi None = no upper end) use backend.

    ``tie`` is True when at least one measured size in the bucket was not decided (the CIs of
    the two best backends overlapped and the simpler was kept).  ``note`` is the one-line comment
    written beside the line: the contenders' medians at the bucket's edge and the crossover.
    """

    op: str
    lo: int
    hi: int | None
    backend: str
    tie: bool
    note: str

    def contains(self, size: int) -> bool:
        return self.lo <= size and (self.hi is None or size < self.hi)


@dataclass(frozen=True)
class _Flip:
    """A change of winner between neighbouring measured sizes s1 < s2 (A wins s1, B wins s2)."""

    s1: int
    s2: int
    a: str
    b: str
    at: int  # the boundary: first size that goes to b, s1 < at <= s2
    crossed: bool  # False: the curves do not cross in (s1, s2], at is the geometric mean


# --------------------------------------------------------------------------------------------


def _op_rows(df: pd.DataFrame, op: str) -> pd.DataFrame:
    """The rows selection reads for one op: each point's attempt, judged over the whole sweep,
    a backend's timings read as its kernels ran (``stats.shared_kernels``)."""
    stats.check_columns(df)
    stats.single_device(df)
    df = stats.current_rows(df)
    return stats.shared_kernels(df[df["op"] == op])


def _op_curves(
    df: pd.DataFrame, op: str, metric: str, dtype: str | None, *, rows: pd.DataFrame | None = None
) -> pd.DataFrame:
    """stats.curves of one op and one dtype (PREFERRED_DTYPE if several and none asked for), of
    ``_op_rows`` (or ``rows``, already those)."""
    cv = stats.curves(_op_rows(df, op) if rows is None else rows, metric)
    dtype = stats.pick_dtype(cv, f"op {op!r}", dtype, prefer=PREFERRED_DTYPE)
    return cv[cv["dtype"] == dtype]


def _winners(cv: pd.DataFrame) -> pd.DataFrame:
    cv = cv.sort_values(["size", "median_s", "backend"])
    size = cv["size"].to_numpy()
    name = cv["backend"].to_numpy()
    med, ci_lo, ci_hi = (cv[c].to_numpy() for c in ("median_s", "ci_lo_s", "ci_hi_s"))
    firsts = np.flatnonzero(np.r_[True, size[1:] != size[:-1]])
    out = []
    for i in firsts:  # i: the fastest backend at this size, i + 1 the runner-up if any
        if i + 1 == len(size) or size[i + 1] != size[i]:
            out.append((size[i], name[i], None, med[i], math.nan, True, False))
            continue
        decided = bool(ci_hi[i] < ci_lo[i + 1] and med[i + 1] > med[i] * (1 + MIN_EFFECT))
        win, run = i, i + 1
        if not decided and simpler(name[i], name[i + 1]) == name[i + 1]:
            win, run = i + 1, i
        out.append((size[i], name[win], name[run], med[win], med[run], decided, not decided))
    table = pd.DataFrame(out, columns=WINNER_COLUMNS)
    table = table.astype({"size": "int64", "decided": "bool", "tie": "bool"})
    chosen = _segment(cv)
    moved = table["winner"].to_numpy() != np.array([chosen[z] for z in table["size"]])
    if moved.any():  # a short, small win that did not pay for a boundary of its own
        med = cv.pivot(index="size", columns="backend", values="median_s")
        for i in np.flatnonzero(moved):
            size, raw = int(table.at[i, "size"]), table.at[i, "winner"]
            table.loc[i, ["winner", "runner_up", "decided", "tie"]] = [
                chosen[size],
                raw,
                False,
                True,
            ]
            table.loc[i, ["winner_median_s", "runner_up_median_s"]] = [
                med.at[size, chosen[size]],
                med.at[size, raw],
            ]
    return table


def _segment(cv: pd.DataFrame) -> dict[int, str]:
    """One backend per measured size such that every boundary pays for itself.

    Minimises, over all assignments, the summed *excess* time (log of the chosen backend's
    median over the fastest one's, less MIN_EFFECT, zero where the two CIs overlap; each size
    weighted by the span of log(size) it stands for) plus SWITCH_COST per change of backend,
    by dynamic programming over the sizes.  A backend that
    wins a single size by a few percent between two sizes won by another (noise, or a real but
    immaterial win) no longer splits the profile; a real crossover, whose gains grow with
    size, is kept where the curves cross.  Ties go to the simpler backend (a tiny cost per
    SIMPLICITY rank).
    """
    med = cv.pivot(index="size", columns="backend", values="median_s")
    lo = cv.pivot(index="size", columns="backend", values="ci_lo_s").to_numpy()
    hi = cv.pivot(index="size", columns="backend", values="ci_hi_s").to_numpy()
    names = [str(c) for c in med.columns]
    m = med.to_numpy()
    best = np.nanargmin(np.where(np.isnan(m), np.inf, m), axis=1)
    rows = np.arange(len(m))
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = np.log(m / m[rows, best][:, None]) - math.log1p(MIN_EFFECT)
    excess = np.clip(excess, 0.0, None)
    excess[lo <= hi[rows, best][:, None]] = 0.0  # CIs overlap: statistically a tie
    # Each size speaks for the stretch of log(size) around it (half-way to each neighbour, in
    # half octaves, the sweeps' usual spacing): refinement adds sizes near a boundary, and if
    # each counted in full, a near-tie would win a bucket in the sweep that happened to refine
    # there and lose it in the next (as cuda_naive's matmul near the crossover once did).
    octaves = np.log2(med.index.to_numpy(dtype=float))
    gaps = np.diff(octaves)
    span = (np.r_[gaps[:1], gaps] + np.r_[gaps, gaps[-1:]]) if len(gaps) else np.ones(1)
    # 2 x half the gaps on both sides: 1 at two sizes per octave; never below MIN_SPAN, so
    # that a large win at one size crowded by its neighbours still counts
    excess *= np.maximum(span, MIN_SPAN)[:, None]
    excess[np.isnan(m)] = np.inf
    excess += 1e-9 * np.array([simplicity_key(n)[0] for n in names])[None, :]
    total = excess[0].copy()
    back = np.zeros(excess.shape, dtype=int)
    for i in range(1, len(m)):
        stay = total
        switch = total.min() + SWITCH_COST
        back[i] = np.where(stay <= switch, np.arange(len(names)), int(total.argmin()))
        total = np.minimum(stay, switch) + excess[i]
    choice = [int(total.argmin())]
    for i in range(len(m) - 1, 0, -1):
        choice.append(int(back[i, choice[-1]]))
    choice.reverse()
    return {int(z): names[c] for z, c in zip(med.index, choice)}


def winners(
    df: pd.DataFrame, op: str, metric: str = schema.DEFAULT_METRIC, *, dtype: str | None = None
) -> pd.DataFrame:
    """The winning backend of ``op`` at every measured size (columns WINNER_COLUMNS).

    winner = lowest median; ``decided`` when its median CI lies entirely below the runner-up's;
    otherwise ``tie`` is True and winner is the simpler of the two best (runner_up the other),
    with the medians following the names.  A size with a single backend is decided, with
    runner_up None.  Sorted by size.
    """
    return _winners(_op_curves(df, op, metric, dtype))


def _place(s1: int, s2: int, ta: tuple[float, float], tb: tuple[float, float]) -> tuple[int, bool]:
    """Boundary between s1 (A wins) and s2 (B wins) from both medians at both sizes; the
    geometric mean when the curves do not cross in between or a median is missing (NaN) or
    not positive (a CSV from elsewhere may hold a zero time; its log ratio is undefined)."""
    at, crossed = math.sqrt(s1 * s2), False
    if all(t > 0 for t in (*ta, *tb)):  # a NaN is not > 0 either
        r1, r2 = math.log(ta[0] / tb[0]), math.log(ta[1] / tb[1])
        if r1 != r2 and r1 * r2 <= 0:
            at = math.exp(float(stats.interp_crossing(math.log(s1), math.log(s2), r1, r2)))
            crossed = True
    return min(max(round(at), s1 + 1), s2), crossed


def _flips(cv: pd.DataFrame, table: pd.DataFrame) -> list[_Flip]:
    med = cv.pivot(index="size", columns="backend", values="median_s")
    flips = []
    sizes, names = table["size"].to_list(), table["winner"].to_list()
    for i in range(len(sizes) - 1):
        (s1, a), (s2, b) = (sizes[i], names[i]), (sizes[i + 1], names[i + 1])
        if a == b:
            continue
        ta, tb = (med.at[s1, a], med.at[s2, a]), (med.at[s1, b], med.at[s2, b])
        at, crossed = _place(s1, s2, ta, tb)  # a median not measured (NaN) never crosses
        flips.append(_Flip(s1, s2, a, b, at, crossed))
    return flips


def _flip_interval(
    samples: dict[tuple[str, int], np.ndarray], flip: _Flip, n_boot: int, rng: np.random.Generator
) -> tuple[int, int] | None:
    """Bootstrap CI of the boundary within [s1, s2]: resample A's and B's repetitions there.

    A resample whose curves do not cross in between puts the boundary at the end where the
    winner changes (s2 if A is faster at both sizes, s1 if B is).
    """
    boot = {}
    for backend in (flip.a, flip.b):
        for size in (flip.s1, flip.s2):
            if (backend, size) not in samples:
                return None
            boot[backend, size] = stats.bootstrap_medians(samples[backend, size], n_boot, rng)
    l1, l2 = math.log(flip.s1), math.log(flip.s2)
    # a zero median: see _place; a resample that does not cross in between may extrapolate
    # its crossing far enough for exp to overflow, and np.where below drops those
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r1 = np.log(boot[flip.a, flip.s1] / boot[flip.b, flip.s1])
        r2 = np.log(boot[flip.a, flip.s2] / boot[flip.b, flip.s2])
        inside = np.exp(stats.interp_crossing(l1, l2, r1, r2))
    cross = np.isfinite(r1) & np.isfinite(r2) & (r1 != r2) & (r1 * r2 <= 0)
    at = np.where(cross, inside, np.where(r2 < 0, flip.s2, flip.s1))
    alpha = (1.0 - stats.CI_LEVEL) / 2.0
    lo = float(np.quantile(at, alpha, method="lower"))
    hi = float(np.quantile(at, 1.0 - alpha, method="higher"))
    return min(round(lo), flip.at), max(round(hi), flip.at)


def _faster(cv: pd.DataFrame, x: str, y: str) -> list[int]:
    """Sizes where backend x won over y decidedly (CIs apart, y at least MIN_EFFECT slower)."""
    piv = {c: cv.pivot(index="size", columns="backend", values=c) for c in CURVE_VALUES}
    med, lo, hi = piv["median_s"], piv["ci_lo_s"], piv["ci_hi_s"]
    won = (hi[x] < lo[y]) & (med[y] > med[x] * (1 + MIN_EFFECT))
    return [int(z) for z in med.index[won.to_numpy()]]


def _alternation(cv: pd.DataFrame, flips: list[_Flip], k: int) -> tuple[list[int], list[int]]:
    """Where flip k's two backends won on the wrong side of its boundary, within its two
    buckets and ALTERNATION_REACH of it: (sizes below it that B won, sizes at or above it that
    A won)."""
    flip = flips[k]
    lo = max(flips[k - 1].at if k > 0 else 0, flip.at / ALTERNATION_REACH)
    hi = min(flips[k + 1].at if k + 1 < len(flips) else math.inf, flip.at * ALTERNATION_REACH)
    below = [z for z in _faster(cv, flip.b, flip.a) if lo <= z < flip.at]
    above = [z for z in _faster(cv, flip.a, flip.b) if flip.at <= z < hi]
    return below, above


def _vs(a: str, b: str | None, size: int, med: pd.DataFrame) -> str:
    """'a 1.21e-05 s vs b 3.40e-05 s at 128' (b omitted when nobody else was measured)."""
    text = f"{a} {med.at[size, a]:.2e} s"
    if isinstance(b, str) and not np.isnan(med.at[size, b]):  # None, or NaN from the table
        text += f" vs {b} {med.at[size, b]:.2e} s"
    return f"{text} at {size}"


def buckets(
    df: pd.DataFrame,
    op: str,
    metric: str = schema.DEFAULT_METRIC,
    *,
    dtype: str | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> list[Bucket]:
    """The size buckets of ``op``, in order, tiling [0, inf) (see the module docstring).

    The note of a bucket followed by another gives both winners' medians at its last measured
    size and the boundary with its bootstrap interval ("crossover 181 [165, 197]", or "no
    crossing in (s1, s2], boundary at the geometric mean"); the last bucket's note compares it
    with its runner-up at its first and last measured sizes.  "; tie at k/m sizes" is appended
    where ties were resolved by simplicity.  Raises DataError if ``op`` has no rows.
    """
    op_rows = _op_rows(df, op)
    cv = _op_curves(df, op, metric, dtype, rows=op_rows)
    if cv.empty:
        raise DataError(f"no rows for op {op!r} under metric {metric!r}")
    table = _winners(cv)
    flips = _flips(cv, table)
    med = cv.pivot(index="size", columns="backend", values="median_s")
    rows = stats.metric_rows(op_rows, metric)
    rows = rows[rows["dtype"] == cv["dtype"].iloc[0]]
    samples = {
        (str(b), int(z)): g.to_numpy(dtype=float)
        for (b, z), g in rows.groupby(["backend", "size"], sort=True)["seconds"]
    }
    rng = np.random.default_rng(seed)

    result = []
    lo = 0
    starts = [0, *[table.index[table["size"] == f.s2][0] for f in flips], len(table)]
    for k in range(len(starts) - 1):
        part = table.iloc[starts[k] : starts[k + 1]]
        backend = part["winner"].iloc[0]
        if k < len(flips):
            flip = flips[k]
            text = _vs(flip.a, flip.b, flip.s1, med)
            interval = _flip_interval(samples, flip, n_boot, rng)
            span = f" [{interval[0]}, {interval[1]}]" if interval else ""
            if flip.crossed:
                text += f"; crossover {flip.at}{span}"
            else:
                text += f"; no crossing in ({flip.s1}, {flip.s2}], boundary {flip.at}{span}"
            below, above = _alternation(cv, flips, k)
            if below or above:
                first, last = interval if interval else (flip.at, flip.at)
                first, last = min([first, *below]), max([last, *above])
                text += f"; winners alternate over [{first}, {last}]:"
                text += "".join(
                    f" {who} faster at {', '.join(map(str, sizes))};"
                    for who, sizes in ((flip.b, below), (flip.a, above))
                    if sizes
                ).rstrip(";")
            hi: int | None = flip.at
        else:
            first, last = part.iloc[0], part.iloc[-1]
            text = _vs(backend, first["runner_up"], int(first["size"]), med)
            if len(part) > 1:
                text += "; " + _vs(backend, last["runner_up"], int(last["size"]), med)
            hi = None
        ties = int(part["tie"].sum())
        if ties:
            text += f"; tie at {ties}/{len(part)} sizes"
        result.append(Bucket(op, lo, hi, backend, bool(ties), text))
        lo = hi if hi is not None else lo
    return result


def refinement_sizes(
    df: pd.DataFrame,
    op: str,
    metric: str = schema.DEFAULT_METRIC,
    tol: float = 0.10,
    *,
    dtype: str | None = None,
) -> list[int]:
    """Sizes to measure next so that every boundary of ``op`` gets bracketed within ``tol``.

    For each change of winner between neighbouring measured sizes s1 < s2 with s2 / s1 > 1 + tol,
    proposes the geometric midpoint and two probes around the current boundary estimate
    (boundary * (1 + tol)**(+-REFINE_STEP)), keeping the integers strictly between s1 and s2.
    Returns them sorted, without duplicates, none of them measured yet ([] when every boundary
    is bracketed, or when no integer lies between s1 and s2).

    Termination: every proposed size is an unmeasured integer strictly between two measured
    sizes, so each round the runner adds at least one new size inside the finite range
    [smallest, largest measured size]; the loop therefore ends, and in practice each round
    at least halves the bracket in log(size) (the midpoint), usually much more (the probes).
    """
    cv = _op_curves(df, op, metric, dtype)
    if cv.empty:
        return []
    measured = set(cv["size"].tolist())
    out: set[int] = set()
    for flip in _flips(cv, _winners(cv)):
        if flip.s2 / flip.s1 <= 1.0 + tol or flip.s2 - flip.s1 < 2:
            continue
        step = (1.0 + tol) ** REFINE_STEP
        candidates = {
            round(math.sqrt(flip.s1 * flip.s2)),
            round(flip.at / step),
            round(flip.at * step),
            (flip.s1 + flip.s2) // 2,  # in case rounding pushed all the others onto s1 or s2
        }
        out |= {c for c in candidates if flip.s1 < c < flip.s2 and c not in measured}
    return sorted(out)


def scan_sizes(
    df: pd.DataFrame,
    op: str,
    metric: str = schema.DEFAULT_METRIC,
    steps: int = 4,
    *,
    dtype: str | None = None,
) -> list[int]:
    """Sizes that look on both sides of every boundary of ``op`` for winners that alternate.

    For each boundary b: round(b * (1 + SCAN_STEP)**k) for k = +-1 .. +-steps, keeping those
    strictly inside the measured range and more than half a step (in log(size)) from every
    measured size, so that a second call after measuring them (or a resumed sweep) proposes
    none of them again.  Sorted, without duplicates; [] when ``steps`` is 0 or nothing flips.
    """
    cv = _op_curves(df, op, metric, dtype)
    if cv.empty or steps <= 0:
        return []
    sizes = sorted(set(cv["size"].tolist()))
    measured = np.log(np.array(sizes, dtype=float))
    near = math.log1p(SCAN_STEP) / 2
    out: set[int] = set()
    for flip in _flips(cv, _winners(cv)):
        for k in (*range(-steps, 0), *range(1, steps + 1)):
            size = round(flip.at * (1.0 + SCAN_STEP) ** k)
            if sizes[0] < size < sizes[-1] and np.min(np.abs(measured - math.log(size))) > near:
                out.add(size)
    return sorted(out)


def decide(
    df: pd.DataFrame,
    metric: str = schema.DEFAULT_METRIC,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> dict[str, list[Bucket]]:
    """Buckets of every op measured under ``metric`` in ``df`` (bus rows excluded), by op name."""
    stats.check_columns(df)
    stats.single_device(df)
    rows = stats.metric_rows(df, metric)  # once, not once per op: buckets() only narrows it
    return {
        str(op): buckets(group, str(op), metric, n_boot=n_boot, seed=seed)
        for op, group in rows.groupby(rows["op"].astype(str), sort=True)
    }
