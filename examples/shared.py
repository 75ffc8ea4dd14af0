"""A graph with shared subexpressions: ``h`` feeds three consumers but is computed once,
and appears once in the plan (the ``evaluated`` memo bit of the design).

    softcuda run examples/shared.py --explain
"""

import softcuda as sc


def build():
    x = sc.randn((512, 512), seed=0)
    h = sc.tanh(x @ x.T)  # x.T is a view: no copy, no extra node to compute
    a = sc.sigmoid(h) * h
    b = sc.exp(-h) + h
    return sc.sum(a + b, axis=1), sc.max(h)


if __name__ == "__main__":
    row_sums, peak = sc.compile(build()).evaluate()
    print(row_sums.shape, float(peak))
