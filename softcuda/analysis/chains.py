"""Where the threshold goes once data stays on the device: the crossover of a chain of k ops.

A lone elementwise op pays its round trip over the bus by itself; a chain of k ops pays it once
(its leaves over, its result back) and k kernels.  So the size from which the GPU wins falls as
k grows.  This module gives that crossover against k, per op family:

* as the profile's model predicts it: the chain compiled with ``placement="cpu"`` and
  ``"cuda"`` (``allocate=False``: nothing runs) at sizes 4 per octave, each plan's
  ``predicted_s`` compared;
* as measured: the all-CPU and all-CUDA medians of the same chains in the placement benchmark's
  raw CSV (``benchmarks/placement.py``).

The crossover is where the all-CUDA chain becomes faster than the all-CPU one, interpolated in
log(size) on log(cpu / cuda); where the CPU wins again at larger sizes (the whole CPU streams
memory faster than the bus carries it), the size where it does is the band's upper end.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

FAMILIES: dict[str, tuple[str, ...]] = {
    "unary": ("tanh", "relu", "sigmoid", "neg"),
    "binary": ("add", "mul", "sub"),
    "mixed": ("relu", "add", "mul", "tanh"),
}
"""Each family's chain: its ops in turn, bounded however long the chain (binary ops read the
chain's value and one other leaf of the same size).  "mixed" is a plain network's elementwise
tail, and the chain the placement targets are stated for."""

KS = (1, 2, 4, 8, 16)
MEASURED_COLUMNS = ("case", "placement", "round", "seconds", "family", "k", "n")


def chain_graph(family: str, k: int, n: int):
    """k ops of ``family`` in turn on n float32 elements, from one or two leaves."""
    import softcuda as sc

    x = sc.randn((n,), seed=1)
    other = sc.randn((n,), seed=2)
    y = x
    for i in range(k):
        op = FAMILIES[family][i % len(FAMILIES[family])]
        if op == "add":
            y = y + other
        elif op == "sub":
            y = y - other
        elif op == "mul":
            y = y * other
        else:
            y = getattr(sc, op)(y)
    return y


def crossing(sizes: Iterable[int], cpu_s: Iterable[float], cuda_s: Iterable[float]):
    """(from, until): the size from which the GPU side is faster, and the size from which the
    CPU is faster again (None where it is not); from is None where the GPU never wins.
    Both interpolated in log(size) where log(cpu / cuda) changes sign."""
    frame = pd.DataFrame({"size": list(sizes), "cpu": list(cpu_s), "cuda": list(cuda_s)})
    frame = frame.dropna().sort_values("size")
    if frame.empty:
        return None, None
    with np.errstate(divide="ignore"):  # a side priced at inf: a gain of -inf, not a warning
        gain = np.log(frame["cpu"].to_numpy() / frame["cuda"].to_numpy())
    logs = np.log(frame["size"].to_numpy(dtype=float))
    wins = gain > 0
    if not wins.any():
        return None, None
    first = int(np.argmax(wins))
    start = _between(logs, gain, first) if first > 0 else float(frame["size"].iloc[0])
    after = np.nonzero(~wins[first:])[0]
    if not len(after):
        return start, None
    back = first + int(after[0])
    return start, _between(logs, gain, back)


def _between(logs: np.ndarray, gain: np.ndarray, i: int) -> float:
    """The size where ``gain`` crosses 0 between points i - 1 and i."""
    g0, g1 = gain[i - 1], gain[i]
    if not (math.isfinite(g0) and math.isfinite(g1)):  # a side that cannot run at one of them
        return float(math.exp(logs[i] if not math.isfinite(g0) else logs[i - 1]))
    t = g0 / (g0 - g1) if g0 != g1 else 0.5
    return float(math.exp(logs[i - 1] + t * (logs[i] - logs[i - 1])))


def chain_times(costs, family: str, k: int, n: int) -> tuple[float, float]:
    """(all-CPU, all-CUDA) predicted seconds of ``chain_graph(family, k, n)``: what
    ``compile(..., placement="cpu" | "cuda")`` predicts for it (a test checks that), added up
    without building the chain, whose leaves would need their data at every size.  All-CPU:
    each op's fastest CPU backend; all-CUDA: the leaves' copies over, each op's fastest CUDA
    backend (never below the host's time to issue a step), the result's copy back."""
    ops = [FAMILIES[family][i % len(FAMILIES[family])] for i in range(k)]
    nbytes = 4 * n  # float32
    leaves = 2 if any(op in ("add", "sub", "mul") for op in ops) else 1  # the other leaf
    over, back = costs.transfer_s("h2d", nbytes), costs.transfer_s("d2h", nbytes)
    moves = math.inf if over is None or back is None else leaves * over + back
    cpu = sum(costs.best(op, n, "cpu")[1] for op in ops)
    return cpu, moves + sum(costs.issued_s(costs.best(op, n, "cuda")[1]) for op in ops)


def model_crossovers(config, host_memory: str = "pinned", ks: Iterable[int] = KS) -> pd.DataFrame:
    """Columns family, k, from, until: the profile's predicted crossover of each chain, from
    sizes 4 per octave between 2^8 and 2^28."""
    from softcuda.costs import CostModel

    costs = CostModel(config, host_memory)
    sizes = [int(round(2 ** (e / 4))) for e in range(32, 4 * 28 + 1)]
    rows = []
    for family in FAMILIES:
        for k in ks:
            times = [chain_times(costs, family, k, n) for n in sizes]
            start, until = crossing(sizes, [t[0] for t in times], [t[1] for t in times])
            rows.append({"family": family, "k": k, "from": start, "until": until})
    return pd.DataFrame(rows, columns=["family", "k", "from", "until"])


def measured_crossovers(raw: pd.DataFrame) -> pd.DataFrame:
    """Columns family, k, from, until from the placement benchmark's raw rows (its chains'
    all-CPU and all-CUDA medians)."""
    missing = [c for c in MEASURED_COLUMNS if c not in raw.columns]
    if missing:
        raise ValueError(f"not a placement benchmark CSV: no column {', '.join(missing)}")
    chains = raw.dropna(subset=["family"])
    chains = chains[chains["placement"].isin(["cpu", "cuda"])]
    medians = chains.groupby(["family", "k", "n", "placement"])["seconds"].median().unstack()
    rows = []
    for (family, k), frame in medians.groupby(level=["family", "k"]):
        frame = frame.droplevel(["family", "k"])
        if not {"cpu", "cuda"} <= set(frame.columns):
            continue
        start, until = crossing(frame.index, frame["cpu"], frame["cuda"])
        rows.append({"family": family, "k": int(k), "from": start, "until": until})
    return pd.DataFrame(rows, columns=["family", "k", "from", "until"])


def chain_figure(model: pd.DataFrame | None, measured: pd.DataFrame | None, title: str):
    """Crossover size against k, one panel per family: the model as lines, the measurements as
    points; a band's upper end dashed."""
    from softcuda.analysis.plots import _figure

    families = [
        f
        for f in FAMILIES
        if any(d is not None and f in set(d["family"]) for d in (model, measured))
    ]
    fig = _figure(4.2 * max(len(families), 1), 3.6)
    axes = fig.subplots(1, max(len(families), 1), squeeze=False)[0]
    for ax, family in zip(axes, families):
        for frame, style, label in ((model, "-", "model"), (measured, "o", "measured")):
            if frame is None:
                continue
            part = frame[frame["family"] == family].sort_values("k")
            if part.empty:
                continue
            ax.plot(part["k"], part["from"], style, color="C0", label=f"{label}: GPU wins from")
            if part["until"].notna().any():
                ax.plot(
                    part["k"],
                    part["until"],
                    "--" if style == "-" else style,
                    color="C3",
                    alpha=0.8,
                    label=f"{label}: CPU wins again from",
                )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ops in the chain (k)")
        ax.set_ylabel("elements")
        ax.set_title(f"{family}: " + ", ".join(FAMILIES[family]))
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig
