"""The op registry: every op softcuda knows, as data.

One frozen ``OpDef`` per op carries what the rest of the library needs to know about it without
running it: arity, kind, how its output shape follows from its inputs, the size metric used to
pick a CONFIG.soft bucket, and FLOP / byte counts for the roofline and the plots.  Backends say
which ops they implement; the graph never special-cases an op by name except through ``kind``.

Kinds
-----
``leaf``         data supplied by the user (``sc.tensor``, ``sc.randn``, a Python scalar)
``elementwise``  numpy broadcasting of the inputs to one output shape (softmax: its input's shape,
                 normalised along ``axis``)
``reduction``    sum / mean / max over all elements or one axis (``axis``, ``keepdims``)
``matmul``       (M,K)@(K,N) or batched (B,M,K)@(B,K,N); a 2-D or batch-1 operand broadcasts
``view``         transpose and reshape: no data moves (reshape of non-contiguous data copies)

Zero-size dimensions follow numpy: they broadcast against 1 (and only 1), a batch of 0 gives
an empty product, k = 0 a product of zeros.  Over nothing, sum is 0 and mean NaN (numpy's
values) on every backend, without numpy's "Mean of empty slice" warning: the NaN in the result
says it, and a plan would otherwise warn on every run.  max over nothing has no value: defining
the node raises ShapeError, where numpy raises ValueError.

Gradient rules live one layer up, in ``softcuda.autograd`` (one table keyed by op): they are
written with the lazy ops, which this registry sits beneath.

Size metric (docs/design.md, "Ops: one registry"): elementwise ops and reductions use the
element count (output elements for elementwise, input elements for reductions); matmul uses the
equivalent square size ``round(cbrt(batch * m * k * n))``, so an n x n by n x n product has
size n.

Variants (``VARIANTS``, docs/design.md, "Variants"): shapes of an op whose cost differs from the
op's own sweep shape -- a bias's gradient (``sum_rows``), a product with a transposed operand
(``matmul_tn``, ``matmul_nt``) -- named so that a profile can measure and price them apart.  A
node keeps its op; ``variant_of(node)`` names its variant, and a profile without the variant's
lines decides and prices the node as its op.  A chain variant (``tanh_chain``) is no node's
shape: it is a fused group of its op applied ``CHAIN_LENGTH`` times (``sample_graph``), swept on
the fusing backends so that the cost model learns what one more heavy member adds to a group.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ShapeError

Shape = tuple[int, ...]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp of -|x| only: it never overflows, and e / (1 + e) keeps the negative tail's accuracy
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _shifted(x: np.ndarray, axis: int | None) -> np.ndarray:
    """x less its maximum along ``axis``: exp of it never overflows."""
    return x - np.max(x, axis=axis, keepdims=True)


def _log_softmax(x: np.ndarray, axis: int | None) -> np.ndarray:
    if x.size == 0:
        return np.empty_like(x)
    shifted = _shifted(x, axis)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _softmax(x: np.ndarray, axis: int | None) -> np.ndarray:
    if x.size == 0:
        return np.empty_like(x)
    e = np.exp(_shifted(x, axis))
    return e / np.sum(e, axis=axis, keepdims=True)


# ---- the CPU expressions: what cpu_fallback runs, into the ``out`` the plan gives it -----------


def _relu_into(x: np.ndarray, out: np.ndarray) -> None:
    np.maximum(x, 0.0, out=out)  # NaN propagates, as the CUDA expression's does


def _step_into(x: np.ndarray, out: np.ndarray) -> None:
    # x > 0 cast into out: 1 or 0, and 0 for NaN, which compares false
    np.greater(x, 0.0, out)


def _sigmoid_into(x: np.ndarray, out: np.ndarray) -> None:
    # 1/(1+exp(-x)) is accurate to a few ulps in both tails: for x << 0 exp(-x) is large and
    # its reciprocal tiny but still exact relative to itself (0.5*tanh(x/2)+0.5 cancels to 0
    # from x = -17 in float32).  exp(-x) overflows only where the true value is below the
    # smallest normal number (x < -88.7 in float32, -709 in float64); 1/inf then gives 0, so
    # the overflow is expected and not warned about.
    with np.errstate(over="ignore"):
        np.negative(x, out=out)
        np.exp(out, out=out)
    np.add(out, 1.0, out=out)
    np.divide(1.0, out, out=out)  # faster than np.reciprocal for float32 here


@dataclass(frozen=True)
class OpDef:
    """What the library knows about an op: one definition, from which the rest is made.

    The entry carries the op's description (the docstring of ``sc.<op>`` and ``Tensor.<op>``,
    which ``tensor`` generates for the unary, binary and reduction ops), its float64 reference,
    its CPU expression (the numpy function cpu_fallback runs) and, for a unary op, its CUDA
    expression (the functor body ``cuda_kernels`` compiles into elementwise.cu's kernels).
    Adding a unary op is an entry here, its gradient rule in ``autograd``, its line in
    DEFAULT.soft and a test case (a binary op also its functor in elementwise.cu); every other
    list of ops (the package's exports, the kernels', the sweeps', the checks', the tests') is
    read off this table."""

    name: str
    arity: int
    kind: str
    # how the CUDA backends compute it: binary, unary (kernels named after the op, made from
    # ``cuda``), power (the binary pow kernel with the exponent as a device scalar), softmax (a
    # composition of reduce and elementwise kernels), reduce, matmul
    family: str = ""
    # the float64 numpy reference: reference(inputs, attrs) -> array (checks and tests)
    reference: Callable[[list[np.ndarray], dict], np.ndarray] | None = None
    # the inputs it is measured and checked on: "real" (standard normal), "positive" (log,
    # pow: away from zero and the poles) or "nonzero" (div: either sign, but |x| >= 0.1, since
    # a float32 normal draw of 2^26 values holds exact zeros)
    domain: str = "real"
    # the attributes the sweep and the checks give it (pow's exponent, softmax's axis)
    sample: tuple[tuple[str, Any], ...] = ()
    # FLOPs per output element for elementwise ops (a rough, documented count; exp/log/tanh
    # count as one "special" op each).
    flops_per_element: int = 1
    # one line or more: what the op computes (the generated functions' docstring)
    doc: str = ""
    # the CPU expression of a unary or binary op: cpu(x, out) or cpu(x, y, out) writes the op
    # of its inputs (numpy arrays, broadcasting) into ``out``, called positionally (a numpy
    # ufunc where one fits: its call is the cheapest)
    cpu: Callable[..., Any] | None = None
    # the C++ expression of a unary op (of ``x``) or a binary op (of ``x`` and ``y``), of type
    # ``T`` (float or double): for a unary op the body of the functor that elementwise.cu's
    # SC_UNARY instantiates, and for both the body of the native CPU kernels' functor
    # (kernels/cpu.cpp).  It may call the helpers both files define (sc_exp, sc_step, ...)
    cuda: str = ""
    # rows about this long that the sweep measures it along, its last axis (0: one flat input;
    # the checks keep ``sample``): an op along an axis is priced from rows as graphs hold them,
    # not from one row of every element
    sample_row: int = 0

    @property
    def configurable(self) -> bool:
        """Whether CONFIG.soft assigns this op a backend (views and leaves need none)."""
        return self.kind in ("elementwise", "reduction", "matmul")

    @property
    def sample_attrs(self) -> dict[str, Any]:
        return dict(self.sample)

    @property
    def work_power(self) -> int:
        """How the op's work grows with its size metric: as the size itself where the size
        counts elements, as its cube for matmul, whose size is the cube root of its m*k*n
        multiply-adds.  A cost measured up to one size is carried beyond it by this power."""
        return 3 if self.kind == "matmul" else 1


def _binary(name: str, fn: Callable, expr: str, doc: str, domain: str = "real") -> OpDef:
    """A binary elementwise op: ``fn``, a numpy ufunc, is its reference and its CPU expression;
    ``expr`` its C++ expression of ``x`` and ``y``, which the native CPU kernels compile (its
    CUDA functor is elementwise.cu's own, in SC_ALL_FOR: a test holds the two lists equal)."""

    def reference(xs: list[np.ndarray], attrs: dict) -> np.ndarray:
        return fn(xs[0], xs[1])

    return OpDef(name, 2, "elementwise", "binary", reference, domain, (), 1, doc, fn, expr)


def _unary(
    name: str,
    reference: Callable,
    cuda: str,
    doc: str,
    cpu: Callable | None = None,
    flops: int = 1,
    domain: str = "real",
) -> OpDef:
    """A unary elementwise op: its float64 ``reference(x)``, its CUDA expression, its
    description and its CPU expression (``cpu(x, out)``; the reference, a ufunc, by default)."""

    def ref(xs: list[np.ndarray], attrs: dict) -> np.ndarray:
        return reference(xs[0])

    kernel = cpu if cpu is not None else reference
    return OpDef(name, 1, "elementwise", "unary", ref, domain, (), flops, doc, kernel, cuda)


def _reduction(name: str, fn: Callable, doc: str) -> OpDef:
    def reference(xs: list[np.ndarray], attrs: dict) -> np.ndarray:
        return fn(xs[0], axis=attrs.get("axis"), keepdims=attrs.get("keepdims", False))

    return OpDef(name, 1, "reduction", "reduce", reference, sample=(("axis", None),), doc=doc)


SOFTMAX_SAMPLE_ROW = 128
"""The row length softmax and log_softmax are swept along: between a classifier's logits (tens)
and attention's rows (thousands).  Swept over every element, one row on the GPU sat on one
block (2^16 elements in 129 us on the lent H100, where rows of it take a few), and the
planner moved every softmax of a graph to the CPU for it."""


def sample_shape(op: str, size: int) -> tuple[int, ...]:
    """The input shape an elementwise op is swept and checked at for ``size`` elements: flat,
    or rows about ``OpDef.sample_row`` long (at most ``size`` elements, fewer by under one row
    length's share where ``size`` has no such divisor)."""
    row = OPS[op].sample_row
    if not row:
        return (size,)
    rows = max(1, size // row)
    return (rows, max(1, size // rows))


OPS: dict[str, OpDef] = {
    op.name: op
    for op in (
        _binary("add", np.add, "x + y", "``x + y`` elementwise, broadcasting as numpy does."),
        _binary("sub", np.subtract, "x - y", "``x - y`` elementwise, broadcasting."),
        _binary("mul", np.multiply, "x * y", "``x * y`` elementwise, broadcasting."),
        _binary("div", np.divide, "x / y", "``x / y`` elementwise, broadcasting.", "nonzero"),
        _unary("neg", np.negative, "-x", "``-x`` elementwise."),
        # NaN propagates as through numpy.maximum(x, 0) (no comparison with NaN holds, so x
        # is kept), and -0 gives +0 as numpy's does (`x < 0 ? 0 : x` kept -0); one comparison,
        # where `x > 0 || x != x` made gcc blend twice per vector (a fused tanh, relu 1.5x tanh's)
        _unary(
            "relu",
            lambda x: np.maximum(x, 0.0),
            "x <= T(0) ? T(0) : x",
            "``max(x, 0)`` elementwise (NaN stays NaN).",
            _relu_into,
        ),
        _unary("exp", np.exp, "sc_exp(x)", "``e ** x`` elementwise."),
        _unary("log", np.log, "sc_log(x)", "The natural logarithm elementwise.", domain="positive"),
        _unary("tanh", np.tanh, "sc_tanh(x)", "The hyperbolic tangent, elementwise."),
        _unary(
            "sigmoid",
            _sigmoid,
            "sc_sigmoid(x)",
            "``1 / (1 + exp(-x))`` elementwise, accurate in both tails.",
            _sigmoid_into,
            flops=4,
        ),
        _unary("square", np.square, "x * x", "``x * x`` elementwise."),
        # relu's gradient mask, max's ties; sc_step reads the sign off the bits (elementwise.cu)
        _unary(
            "step",
            lambda x: (x > 0.0).astype(x.dtype),
            "sc_step(x)",
            "1 where ``x > 0``, else 0 (NaN gives 0), in ``x``'s dtype; its gradient is zero.",
            _step_into,
        ),
        _unary("abs", np.absolute, "fabs(x)", "``|x|`` elementwise; its gradient is ``sign(x)``."),
        # x ** p for a number p; measured and checked at a non-integer p, on positive x.  Its
        # CUDA kernel is the binary pow (the exponent the second operand)
        OpDef(
            "pow",
            1,
            "elementwise",
            "power",
            lambda xs, at: np.power(xs[0], at["exponent"]),
            "positive",
            (("exponent", 1.5),),
            doc="``x ** exponent`` elementwise, for a number ``exponent``.",
        ),
        # exp(x - max) / sum(exp(x - max)) along an axis (None: over every element)
        OpDef(
            "softmax",
            1,
            "elementwise",
            "softmax",
            lambda xs, at: _softmax(xs[0] * at.get("scale", 1.0), at.get("axis")),
            sample=(("axis", None),),
            flops_per_element=5,
            sample_row=SOFTMAX_SAMPLE_ROW,
        ),
        # x - max - log(sum(exp(x - max))) along an axis: log(softmax) without its underflow
        # (a probability below float32's smallest is -inf there, finite here)
        OpDef(
            "log_softmax",
            1,
            "elementwise",
            "softmax",
            lambda xs, at: _log_softmax(xs[0] * at.get("scale", 1.0), at.get("axis")),
            sample=(("axis", None),),
            flops_per_element=5,
            sample_row=SOFTMAX_SAMPLE_ROW,
        ),
        _reduction("sum", np.sum, "The sum over every element, or along ``axis``."),
        _reduction("mean", np.mean, "The mean over every element, or along ``axis``."),
        _reduction("max", np.max, "The maximum over every element, or along ``axis``."),
        OpDef(
            "matmul",
            2,
            "matmul",
            "matmul",
            lambda xs, at: np.matmul(xs[0], xs[1]),
        ),
        OpDef("transpose", 1, "view"),
        OpDef("reshape", 1, "view"),
        OpDef("none", 0, "leaf"),
    )
}

CONFIGURABLE_OPS: tuple[str, ...] = tuple(name for name, op in OPS.items() if op.configurable)
ELEMENTWISE_OPS: tuple[str, ...] = tuple(n for n, op in OPS.items() if op.kind == "elementwise")
REDUCTION_OPS: tuple[str, ...] = tuple(n for n, op in OPS.items() if op.kind == "reduction")


# ---- variants: shapes of an op priced under their own name -------------------------------------


@dataclass(frozen=True)
class VariantDef:
    """A shape of a configurable op whose cost differs from the op's own sweep shape, measured
    and priced under its own name (docs/design.md, "Variants").  A node keeps its op; a
    variant is only a name the profile may hold rules and costs under (``variant_of``), and a
    backend runs it iff it runs ``base``.  Adding a variant is an entry in VARIANTS."""

    name: str
    base: str
    doc: str
    # whether a node of op ``base`` has this shape (its inputs already checked by the op)
    matches: Callable[[Any], bool]
    # the sample the sweep times and verify checks at ``size``: its inputs' shapes as the op
    # reads them; ``transposed[i]`` makes input i a transpose view of a stored leaf of the
    # reversed shape; ``attrs`` the op's attributes
    shapes: Callable[[int], list[Shape]]
    # size metric: (input shapes, output shape) -> the number a bucket is looked up with
    size: Callable[[list[Shape], Shape], int]
    # how its work grows with that size (``OpDef.work_power``)
    work_power: int
    transposed: tuple[bool, ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()
    # > 0: a chain variant, whose sample is ``chain`` terms of its op (``sample_graph``), one
    # fused group where the backend fuses (``BackendInfo.fuses``); it matches no node
    chain: int = 0


def _is_transpose(t: Any) -> bool:
    """Whether a 2-D operand is read transposed: its layout, not its op (a transpose of a
    transpose, or of an n x 1 matrix, is contiguous and multiplies as a plain matmul)."""
    return not is_contiguous(t.dims, t.stride)


def _matmul_2d(node: Any) -> bool:
    return node.a.ndims == 2 and node.b.ndims == 2


def _square(size: int) -> list[Shape]:
    return [(size, size)]


def _square_pair(size: int) -> list[Shape]:
    return [(size, size), (size, size)]


def _matmul_size(in_shapes: list[Shape], out_shape: Shape) -> int:
    return size_metric("matmul", in_shapes, out_shape)


SHORT_ROW = 32
"""Rows shorter than this, along a softmax's last axis, are priced as the ``*_short`` variants:
a classifier's logits (rows of 10 cost 2.7 to 4.4 times rows of 128 per element on the CPU)."""
SHORT_SAMPLE_ROW = 10
"""The short rows those variants are swept along."""


def _short_rows(node: Any) -> bool:
    """A softmax along the last axis of rows shorter than ``SHORT_ROW``, more than one row."""
    axis, dims = node.attrs.get("axis"), node.a.dims
    if axis is None or len(dims) < 2:
        return False
    return axis % len(dims) == len(dims) - 1 and dims[-1] < SHORT_ROW and numel(dims) > dims[-1]


def _short_row_shapes(size: int) -> list[Shape]:
    return [(max(1, size // SHORT_SAMPLE_ROW), SHORT_SAMPLE_ROW)]


def _elements(in_shapes: list[Shape], out_shape: Shape) -> int:
    return numel(out_shape)


HEAVY_MATH = ("sc_exp", "sc_log", "sc_tanh", "sc_sigmoid", "sc_pow")
"""The math functions that make an op heavy: an op whose expression calls one costs several
simple ops per element (``heavy``)."""


def heavy(op: str) -> bool:
    """Whether an element of ``op`` costs a transcendental function (exp, log, tanh, sigmoid,
    a general pow): compute-bound where a simple op is memory-bound."""
    expr = OPS[op].cuda if op != "pow" else "sc_pow"
    return any(h in expr for h in HEAVY_MATH)


CHAIN_LENGTH = 8
"""How many terms of its op a chain variant's sample sums (``sample_graph``)."""
CHAIN_SCALES = tuple(1.0 - k / (2 * CHAIN_LENGTH) for k in range(CHAIN_LENGTH))
"""Each term's input is x times one of these (1 down to 0.5625, exact in binary): distinct
scalars, so that no compiler folds two terms into one, and inside every op's domain."""


def _never(node: Any) -> bool:
    return False


def _vector(size: int) -> list[Shape]:
    return [(size,)]


VARIANTS: dict[str, VariantDef] = {
    v.name: v
    for v in (
        VariantDef(
            "sum_rows",
            "sum",
            "sum over axis 0 of a 2-D input: a bias's gradient (reduce_cols on the GPU)",
            lambda n: n.a.ndims == 2 and n.attrs.get("axis") == 0,
            _square,
            size=lambda ins, out: round(math.sqrt(numel(ins[0]))),
            work_power=2,
            attrs=(("axis", 0),),
        ),
        VariantDef(
            "matmul_tn",
            "matmul",
            "a.T @ b, a a transpose view, b not: a weight's gradient (X^T g)",
            lambda n: _matmul_2d(n) and _is_transpose(n.a) and not _is_transpose(n.b),
            _square_pair,
            size=_matmul_size,
            work_power=3,
            transposed=(True, False),
        ),
        VariantDef(
            "matmul_nt",
            "matmul",
            "a @ b.T, b a transpose view, a not: a gradient passed back through a layer (g W^T)",
            lambda n: _matmul_2d(n) and not _is_transpose(n.a) and _is_transpose(n.b),
            _square_pair,
            size=_matmul_size,
            work_power=3,
            transposed=(False, True),
        ),
        *(
            VariantDef(
                f"{base}_short",
                base,
                f"{base} along rows shorter than {SHORT_ROW}: a classifier's logits",
                _short_rows,
                _short_row_shapes,
                size=_elements,
                work_power=1,
                attrs=(("axis", -1),),
            )
            for base in ("softmax", "log_softmax")
        ),
        *(
            VariantDef(
                f"{base}_chain",
                base,
                f"{CHAIN_LENGTH} terms {base}(x * s) summed, one fused group: what each heavy "
                "member adds to a fused kernel",
                _never,
                _vector,
                size=_elements,
                work_power=1,
                chain=CHAIN_LENGTH,
            )
            for base in ELEMENTWISE_OPS
            if OPS[base].arity == 1 and OPS[base].family != "softmax" and heavy(base)
        ),
    )
}
CHAINS: tuple[str, ...] = tuple(v.name for v in VARIANTS.values() if v.chain)
"""The chain variants' names (one per heavy unary op)."""
PROFILE_OPS: tuple[str, ...] = CONFIGURABLE_OPS + tuple(VARIANTS)
"""Every name a CONFIG.soft's [ops] and [costs] lines and a sweep spec may use: the
configurable ops, then their variants."""


def variant_of(node: Any) -> str | None:
    """The variant ``node``'s shape is (VARIANTS' first that matches), or None."""
    for variant in VARIANTS.values():
        if variant.base == node.op and variant.matches(node):
            return variant.name
    return None


def base_op(name: str) -> str:
    """The op a profile name runs as: a variant's base, else the name itself."""
    variant = VARIANTS.get(name)
    return name if variant is None else variant.base


def work_power(name: str) -> int:
    """How the work of an op or a variant grows with its size metric."""
    variant = VARIANTS.get(name)
    return OPS[name].work_power if variant is None else variant.work_power


def with_variants(ops: frozenset[str], chains: bool = False) -> frozenset[str]:
    """``ops`` and the variants of those of them that have any: what a backend running
    ``ops`` can be assigned (it runs a variant as its base op); the chain variants only where
    ``chains`` (a fusing backend's: elsewhere a chain is its ops one by one)."""
    return ops | {v.name for v in VARIANTS.values() if v.base in ops and (chains or not v.chain)}


def sample_ops(name: str) -> tuple[str, ...]:
    """The names whose rules a one-backend sample of ``name`` needs: its own, and for a chain
    variant the ops its sample is built of (``sample_graph``)."""
    variant = VARIANTS.get(name)
    if variant is None or not variant.chain:
        return (name,)
    return (name, *dict.fromkeys(sample_members(name)))


def sample_members(name: str) -> list[str]:
    """The ops of the nodes ``name``'s sample computes (``sample_graph``), one per node: its
    op, or a chain's terms, their scalings and the adds that sum them."""
    variant = VARIANTS.get(name)
    if variant is None or not variant.chain:
        return [base_op(name)]
    k = variant.chain
    return [variant.base] * k + ["mul"] * k + ["add"] * (k - 1)


def sample_graph(name: str, inputs: Sequence[Any], apply: Callable[..., Any], **attrs: Any) -> Any:
    """``name``'s sample (an op or a variant) computed from ``inputs`` (already read as the
    sample reads them: ``sample_form``'s transposes made) by ``apply(op, *operands, **attrs)``:
    lazy ops for a plan, numpy float64 for the reference.  ``attrs`` override the sample's.
    A chain variant's is sum over k of op(x * CHAIN_SCALES[k])."""
    base, sample, _ = sample_form(name)
    sample = {**sample, **attrs}
    variant = VARIANTS.get(name)
    if variant is None or not variant.chain:
        return apply(base, *inputs, **sample)
    total = None
    for scale in CHAIN_SCALES[: variant.chain]:
        term = apply(base, apply("mul", inputs[0], scale), **sample)
        total = term if total is None else apply("add", total, term)
    return total


SQUARE_LIKE_EXPONENTS = (0.5, 2.0)
"""pow's exponents that the kernels take as a square root or x * x (cpu_math.hpp's sc_pow, and
numpy's power): such a node costs what ``square`` costs, not what the sweep's pow sample (a
general exponent through libm's pow) does.  Adam's step takes the square root of its second
moment this way."""


def priced_op(node: Any) -> str:
    """The op whose costs price ``node``: ``square`` for a pow by 0.5 or 2, else its op."""
    if node.op == "pow" and float(node.attrs.get("exponent", 0.0)) in SQUARE_LIKE_EXPONENTS:
        return "square"
    return node.op


def profile_name(node: Any, table: Any) -> str:
    """The name ``node`` is looked up under in ``table`` (a profile's rules or costs, keyed
    by name): its variant's where the table holds it, else its op's."""
    variant = variant_of(node)
    return variant if variant is not None and variant in table else node.op


def sample_form(name: str) -> tuple[str, dict[str, Any], tuple[bool, ...]]:
    """How a sample of ``name`` (an op or a variant) is built, for the sweep and the checks: the
    op it runs, its attributes (the op's sample's, then the variant's), and for each input
    whether it is read as a transpose view of a leaf of the reversed shape (missing: no)."""
    variant = VARIANTS.get(name)
    base = base_op(name)
    if variant is None:
        return base, OPS[base].sample_attrs, ()
    return base, {**OPS[base].sample_attrs, **dict(variant.attrs)}, variant.transposed


def variant_sample(name: str, size: int) -> tuple[list[Shape], list[Shape], Shape]:
    """A variant's sample at ``size``: the shapes of the leaves it is built from (a transposed
    input's leaf has the reversed shape), the shapes its op reads, and its output's shape."""
    variant = VARIANTS[name]
    shapes = variant.shapes(size)
    _, attrs, flips = sample_form(name)
    flips = flips + (False,) * len(shapes)
    stored = [tuple(reversed(s)) if flip else s for s, flip in zip(shapes, flips)]
    if OPS[variant.base].kind == "matmul":
        out = matmul_shape(shapes[0], shapes[1])
    elif OPS[variant.base].kind == "elementwise":  # softmax's short rows: the input's shape
        out = shapes[0]
    else:
        out = reduction_shape(shapes[0], attrs.get("axis"), attrs.get("keepdims", False))
    return stored, shapes, out


def node_size(name: str, node: Any) -> int:
    """``node``'s size in the metric of ``name`` (its op or its variant)."""
    return size_metric(name, [t.dims for t in node.inputs], node.dims)


def ops_of(family: str) -> tuple[str, ...]:
    """The ops whose CUDA kernels are of ``family`` (registry order)."""
    return tuple(n for n, op in OPS.items() if op.family == family)


def numel(shape: Shape) -> int:
    return math.prod(shape)


def contiguous_strides(shape: Shape) -> Shape:
    """Row-major strides in elements."""
    strides = []
    step = 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))


def split_axis(shape: Shape, axis: int | None) -> tuple[int, int, int]:
    """(outer, len, inner): a C-contiguous array of ``shape`` seen as outer blocks of ``len``
    runs of ``inner`` elements along ``axis`` (negative counts from the end; None: one run of
    everything).  How every kernel that reduces or normalises along one axis walks its input."""
    if axis is None or len(shape) == 0:
        return 1, math.prod(shape), 1
    ax = axis + len(shape) if axis < 0 else axis
    if not 0 <= ax < len(shape):
        raise ValueError(f"axis {axis} out of range for {len(shape)}-d input")
    return math.prod(shape[:ax]), shape[ax], math.prod(shape[ax + 1 :])


def collapse_dims(
    shape: Sequence[int], strides: Sequence[Sequence[int]]
) -> tuple[Shape, list[Shape]]:
    """``shape`` walked by several operands (``strides``: one per operand, in elements), with
    the dimensions of extent 1 dropped and each pair of neighbours merged where every operand
    steps over them as one run (stride[i] == stride[i+1] * shape[i+1]): the same elements in
    the same order, fewer loops.  No dimension left gives (1,) with strides 0."""
    keep = [i for i, d in enumerate(shape) if d != 1]
    dims = [shape[i] for i in keep]
    cols = [[s[i] for i in keep] for s in strides]
    i = len(dims) - 2
    while i >= 0:
        if all(c[i] == c[i + 1] * dims[i + 1] for c in cols):
            dims[i] *= dims[i + 1]
            for c in cols:
                c[i] = c[i + 1]
                del c[i + 1]
            del dims[i + 1]
        i -= 1
    if not dims:
        return (1,), [(0,) for _ in cols]
    return tuple(dims), [tuple(c) for c in cols]


def is_contiguous(shape: Shape, stride: Shape) -> bool:
    """Row-major contiguous, ignoring the strides of size-1 dimensions."""
    step = 1
    for dim, st in zip(reversed(shape), reversed(stride)):
        if dim != 1 and st != step:
            return False
        step *= dim
    return True


# ---- shape rules: each raises ShapeError naming the shapes involved -----------------------------


def broadcast_shape(op: str, a: Shape, b: Shape) -> Shape:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and da != 1 and db != 1:
            raise ShapeError(f"{op}: shapes {a} and {b} cannot be broadcast together")
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


def matmul_shape(a: Shape, b: Shape) -> Shape:
    if len(a) not in (2, 3) or len(b) not in (2, 3):
        raise ShapeError(f"matmul: shapes {a} and {b} must be 2-D or batched 3-D")
    if a[-1] != b[-2]:
        raise ShapeError(
            f"matmul: shapes {a} and {b} do not fit: inner dimensions {a[-1]} and {b[-2]} differ"
        )
    batch_a = a[0] if len(a) == 3 else 1
    batch_b = b[0] if len(b) == 3 else 1
    if batch_a != batch_b and 1 not in (batch_a, batch_b):
        raise ShapeError(f"matmul: shapes {a} and {b} have batch sizes {batch_a} and {batch_b}")
    mn = (a[-2], b[-1])
    if len(a) == 2 and len(b) == 2:
        return mn
    # The batch that is not 1 wins, as in numpy; max() would turn a batch of 0 against 1 into 1.
    return (batch_b if batch_a == 1 else batch_a, *mn)


def normalize_axis(op: str, shape: Shape, axis: int | None) -> int | None:
    if axis is None:
        return None
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ShapeError(f"{op}: axis must be an integer or None, got {axis!r}")
    if not -len(shape) <= axis < len(shape):
        raise ShapeError(f"{op}: axis {int(axis)} is out of range for shape {shape}")
    return int(axis) % len(shape)


def reduction_shape(shape: Shape, axis: int | None, keepdims: bool) -> Shape:
    if axis is None:
        return tuple(1 for _ in shape) if keepdims else ()
    if keepdims:
        return tuple(1 if i == axis else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i != axis)


def reshape_shape(shape: Shape, new: Shape) -> Shape:
    total = numel(shape)
    if sum(1 for d in new if d == -1) > 1 or any(d < -1 for d in new):
        raise ShapeError(f"reshape: cannot reshape {shape} to {new}")
    if -1 in new:
        known = numel(tuple(d for d in new if d != -1))
        if known == 0 or total % known:
            raise ShapeError(f"reshape: cannot reshape {shape} to {new}")
        new = tuple(total // known if d == -1 else d for d in new)
    if numel(new) != total:
        raise ShapeError(f"reshape: cannot reshape {shape} ({total} elements) to {new}")
    return tuple(new)


# ---- size metric and cost counts ----------------------------------------------------------------


def size_metric(op: str, in_shapes: list[Shape], out_shape: Shape) -> int:
    """The number a CONFIG.soft bucket is looked up with (see the module docstring); ``op``
    may name a variant, measured in its own metric."""
    if op in VARIANTS:
        return VARIANTS[op].size(in_shapes, out_shape)
    kind = OPS[op].kind
    if kind == "matmul":
        a, b = in_shapes
        batch = out_shape[0] if len(out_shape) == 3 else 1
        return round((batch * a[-2] * a[-1] * b[-1]) ** (1.0 / 3.0))
    if kind == "reduction":
        return numel(in_shapes[0])
    return numel(out_shape)


def flop_count(op: str, in_shapes: list[Shape], out_shape: Shape) -> int:
    kind = OPS[op].kind
    if kind == "matmul":
        return 2 * numel(out_shape) * in_shapes[0][-1]
    if kind == "reduction":
        return numel(in_shapes[0])
    if kind == "elementwise":
        return OPS[op].flops_per_element * numel(out_shape)
    return 0


def byte_count(in_shapes: list[Shape], out_shape: Shape, itemsize: int) -> int:
    """Fewest bytes the op must move: each input read once, the output written once."""
    return itemsize * (sum(numel(s) for s in in_shapes) + numel(out_shape))
