"""The coefficients of the native CPU kernels' float32 tanh (softcuda/backends/kernels/cpu.cpp).

tanh(x) ~ x P(x^2) / Q(x^2) on 0 < x <= 9, P of degree M and Q of degree N with Q(0) = 1, fitted
for relative error by Lawson's iteration: weighted linear least squares on the linearized
residual P - (tanh(x)/x) Q, the weights multiplied each round by the last round's error, so that
the fit tends to the minimax one.  Prints the best round's worst relative error (in float64
arithmetic) and the coefficients, lowest degree first.

    python extra/tanh_fit.py [M N]      # default 5 4, the degrees cpu.cpp uses
"""

from __future__ import annotations

import sys

import numpy as np


def fit(m: int, n: int, rounds: int = 200) -> tuple[float, np.ndarray, np.ndarray]:
    x = np.concatenate([np.linspace(0.0, 9.0, 20001)[1:], np.linspace(1e-4, 0.5, 2000)])
    f, t = np.tanh(x) / x, x * x
    weights = np.full(x.size, 1.0 / x.size)
    best = (np.inf, np.zeros(m + 1), np.zeros(n + 1))
    for _ in range(rounds):
        a = np.hstack(
            [t[:, None] ** np.arange(m + 1), -f[:, None] * t[:, None] ** np.arange(1, n + 1)]
        )
        w = np.sqrt(weights) / f
        scale = np.abs(a).max(axis=0)
        sol = np.linalg.lstsq((a / scale) * w[:, None], f * w, rcond=None)[0] / scale
        p, q = sol[: m + 1], np.concatenate([[1.0], sol[m + 1 :]])
        approx = x * np.polyval(p[::-1], t) / np.polyval(q[::-1], t)
        err = np.abs(approx - np.tanh(x)) / np.tanh(x)
        if err.max() < best[0]:
            best = (float(err.max()), p.copy(), q.copy())
        weights = weights * err / np.sum(weights * err)
    return best


def main() -> int:
    m, n = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) == 3 else (5, 4)
    worst, p, q = fit(m, n)
    print(f"degrees {m}/{n}: worst relative error {worst:.3g}")
    print("P:", ", ".join(repr(float(c)) for c in p))
    print("Q:", ", ".join(repr(float(c)) for c in q))
    return 0


if __name__ == "__main__":
    sys.exit(main())
