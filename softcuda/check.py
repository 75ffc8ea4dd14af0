"""Numerical checks: run one op on one backend and compare it with a float64 numpy reference.

Used by ``softcuda verify`` (a self-check of every (op, backend) a config uses) and by the test
suite, so that one helper decides what "correct" means for every backend.  Inputs are fresh
random values (never zeros); ``log`` gets positive inputs; outputs are compared by
max |out - ref| / max(|ref|, 1e-30) over the whole array, with a tolerance that grows with the
reduction length for float32 (sums and matmul accumulate rounding error).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass

import numpy as np

from . import graph
from .backends import BACKENDS
from .config import single_rule_config
from .ops import OPS, VARIANTS, sample_form, sample_graph

# The tensor module itself: in the package, the name ``tensor`` is the function sc.tensor().
_tensor = importlib.import_module(".tensor", __package__)


def reference(op: str, attrs: dict, inputs: list[np.ndarray]) -> np.ndarray:
    """The op computed in float64 with plain numpy (the registry's reference)."""
    compute = OPS[op].reference
    if compute is None:
        raise KeyError(op)
    return compute([np.asarray(x, dtype=np.float64) for x in inputs], attrs)


def lazy_op(op: str, *operands, **attrs):
    """``op`` applied to lazy ``operands`` by its name (``ops.sample_graph``'s ``apply``)."""
    return getattr(_tensor, op)(*operands, **attrs)


def _reference(op: str, *operands, **attrs) -> np.ndarray:
    return reference(op, attrs, list(operands))


def random_input(op: str, shape: tuple[int, ...], dtype, rng: np.random.Generator) -> np.ndarray:
    """Random values from the op's domain in the registry: standard normal, positive and away
    from zero (log, pow), or away from zero with either sign (div)."""
    x = rng.standard_normal(shape)
    if OPS[op].domain == "positive":
        x = np.abs(x) + 0.1
    elif OPS[op].domain == "nonzero":
        x = np.copysign(np.abs(x) + 0.1, x)
    return x.astype(dtype)


def tolerance(op: str, dtype, reduce_len: int = 1) -> float:
    eps = float(np.finfo(dtype).eps)
    grows = OPS[op].kind in ("matmul", "reduction") or OPS[op].family == "softmax"
    return eps * (64 + (16 * math.sqrt(reduce_len) if grows else 0))


def error_scale(op: str, attrs: dict, inputs: list[np.ndarray], ref: np.ndarray) -> float:
    """What rounding error is relative to: for sums and products the same op on |inputs|
    (cancellation can make the result itself tiny), otherwise the result's magnitude."""
    if op in ("sum", "mean", "matmul"):
        ref = reference(op, attrs, [np.abs(np.asarray(x, dtype=np.float64)) for x in inputs])
    finite = np.isfinite(ref)
    return max(float(np.max(np.abs(ref[finite]), initial=0.0)), 1e-30)


def relative_error(out: np.ndarray, ref: np.ndarray, scale: float) -> float:
    """max |out - ref| / scale (``error_scale``); inf when shapes or finiteness differ."""
    out = np.asarray(out, dtype=np.float64)
    if out.shape != ref.shape:
        return math.inf
    if not np.all(np.isfinite(out) == np.isfinite(ref)):
        return math.inf
    finite = np.isfinite(ref)
    return float(np.max(np.abs(out[finite] - ref[finite]), initial=0.0)) / scale


@dataclass(frozen=True)
class CheckResult:
    op: str
    backend: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.error <= self.tolerance


def shapes_for(op: str, size: int) -> list[tuple[int, ...]]:
    """Input shapes whose size metric is about ``size`` (odd sizes keep tiles honest); a
    variant's are its sample's (``VariantDef.shapes``) with the first input a row longer."""
    if op in VARIANTS:
        first, *rest = VARIANTS[op].shapes(max(1, size))
        return [(first[0] + 1, *first[1:]), *rest]
    kind = OPS[op].kind
    if kind == "matmul":
        n = max(1, size)
        return [(n, n + 1), (n + 1, max(1, n - 1))]
    if kind == "reduction":
        cols = 7 if size >= 7 else 1
        return [(max(1, size // cols), cols)]
    shape = (max(1, size // 3), 3) if size >= 3 else (max(1, size),)
    return [shape] * OPS[op].arity


def check_op(
    op: str,
    backend: str,
    shapes: list[tuple[int, ...]],
    *,
    dtype=np.float32,
    attrs: dict | None = None,
    seed: int | None = None,
    transpose: tuple[bool, ...] = (),
    device: dict[str, str] | None = None,
) -> CheckResult:
    """Compile ``op`` alone on ``backend`` and compare it with the float64 reference.

    ``transpose[i]`` feeds input i as a transposed view (strided data) of a leaf of the
    reversed shape.  ``device`` passes a profile's [device] settings the backend takes (its
    thread count), so that the check runs the op as the profile would.  ``op`` may name a
    variant: its base op is run in the variant's shape (its transposed inputs and attributes,
    ``ops.VARIANTS``), decided by a rule of the variant's name.
    """
    name, (op, sample, flips) = op, sample_form(op)
    transpose = transpose or flips
    attrs = {**sample, **(attrs or {})}
    rng = np.random.default_rng(seed)
    arrays, nodes = [], []
    for i, shape in enumerate(shapes):
        flip = i < len(transpose) and transpose[i]
        raw = random_input(op, tuple(reversed(shape)) if flip else shape, dtype, rng)
        node = _tensor.tensor(raw, dtype=dtype)
        arrays.append(raw.T if flip else raw)
        nodes.append(node.T if flip else node)
    out = sample_graph(name, nodes, lazy_op, **attrs)
    config = single_rule_config(name, backend)
    for _, key in BACKENDS[backend].settings:  # a profile's [device] settings, as it runs them
        if device and key in device:
            config.device[key] = device[key]
    plan = graph.compile(out, config)
    plan.poison()  # unwritten elements read back as NaN and fail the check
    result = plan.evaluate()
    ref = sample_graph(name, arrays, _reference, **attrs)
    return CheckResult(
        name,
        backend,
        tuple(shapes),
        np.dtype(dtype).name,
        relative_error(result, ref, error_scale(op, attrs, arrays, ref)),
        tolerance(op, dtype, _reduce_len(op, shapes, attrs)),
    )


def _reduce_len(op: str, shapes: list[tuple[int, ...]], attrs: dict) -> int:
    """How many terms each output sums: the rounding error a float32 result may carry grows
    with it."""
    kind, axis = OPS[op].kind, attrs.get("axis")
    if kind == "matmul":
        return shapes[0][-1]
    if kind == "reduction" or OPS[op].family == "softmax":
        return int(np.prod(shapes[0])) if axis is None else shapes[0][axis]
    return 1
