"""The tensor node: soft-cuda's ``tensor_instance``, lazy.

Defining an op builds a node and nothing else: its shape, strides and dtype are inferred on the
spot (a mismatch raises ``ShapeError`` naming both shapes), its data stays ``None`` until a plan
runs.  Leaves hold data from the start, copied into the host leaf pool.

Field names follow the original design (docs/design.md, "The tensor node"): ``ndims, dims,
stride, data, op, a, b, device, grad_compute, grad, evaluated, backend_id``.  ``stride`` is
row-major in elements; a view (transpose, reshape of contiguous data) changes ``stride`` and
shares its input's buffer.
``data``, ``device``, ``backend_id`` and ``evaluated`` describe the most recently compiled plan
that holds the node.

A leaf's values live in the host leaf pool, and its ``data`` is a read-only view of them: any
number of plans read the same leaf, so new values go through ``assign``, which also refreshes
the page-locked mirror that plans with pinned host memory copy to the GPU from (``_mirror``).

A leaf that a plan updates on the GPU (a training step's weights, placed there) also has a
resident copy in device memory (``_resident``), which is then where its values are kept: each
run writes the new values there and marks the host copy as behind (``_behind``), and the host
copy is refreshed only when something reads it (``data``, ``numpy()``, a plan that reads the
leaf from the host); ``assign`` writes both.
"""

from __future__ import annotations

import builtins
import itertools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from . import ops as _ops
from .errors import ShapeError, excerpt
from .pool import leaf_pool

DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_labels = itertools.count()
# Bumped whenever a leaf is given new values, so that cached ``numpy()`` results go stale.
_leaf_epoch = [0]
# id(leaf) -> a weak reference to it, for the leaves whose resident (device) copy is newer than
# their host copy; an entry goes when its leaf does (_behind_ref).
_behind: dict[int, weakref.ref] = {}


def _behind_ref(leaf: Tensor) -> weakref.ref:
    """A weak reference to ``leaf`` for ``_behind`` that takes its entry out when the leaf
    goes (so that a dead leaf's id, reused, is never read as behind)."""
    key = id(leaf)

    def forget(ref: weakref.ref) -> None:
        if _behind.get(key) is ref:
            del _behind[key]

    return weakref.ref(leaf, forget)


def _check_dtype(dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in DTYPES:
        raise ShapeError(f"dtype {dt} is not supported; use float32 or float64")
    return dt


class Tensor:
    """A node of the lazy graph.  Build them with ``sc.tensor``/``sc.randn`` and operators."""

    __slots__ = (
        "ndims",
        "dims",
        "stride",
        "_data",
        "op",
        "a",
        "b",
        "device",
        "grad",
        "requires_grad",
        "evaluated",
        "backend_id",
        "dtype",
        "attrs",
        "label",
        "_allocation",
        "_mirror",
        "_resident",
        "_cache",
        "_product",
        "__weakref__",
    )
    # numpy must hand mixed expressions (array * tensor) to our reflected operators
    __array_ufunc__ = None
    # What the layers above the node give it (this module imports none of them; the package
    # imports both, so they are set before any Tensor is used): each op's gradient rule and
    # backward() (softcuda.autograd), and numpy()'s compile and run (softcuda.graph).
    gradient_rules: ClassVar[dict[str, Callable[..., tuple[Tensor, ...]]]] = {}
    backward_hook: ClassVar[Callable[[Tensor, Any], None]]
    numpy_hook: ClassVar[Callable[[Tensor], np.ndarray]]

    def __init__(
        self,
        op: str,
        dims: tuple[int, ...],
        dtype: np.dtype,
        a: Tensor | None = None,
        b: Tensor | None = None,
        stride: tuple[int, ...] | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> None:
        self.op = op
        self.dims = tuple(int(d) for d in dims)
        self.ndims = len(self.dims)
        self.stride = stride if stride is not None else _ops.contiguous_strides(self.dims)
        self.dtype = dtype
        self.a = a
        self.b = b
        self.attrs = attrs or {}
        self._data: Any = None
        self.device = "cpu"
        self.grad: Tensor | None = None  # filled by backward() on leaves with requires_grad
        self.requires_grad = False
        self.evaluated = False
        self.backend_id: str | None = None
        self.label = f"%{next(_labels)}"
        self._allocation: Any = None  # a leaf's pool Allocation
        self._mirror: Any = None  # a leaf's pinned copy, made by the first pinned plan using it
        self._resident: Any = None  # a leaf's device copy, made by the first plan keeping it there
        self._cache: tuple[int, Any, np.ndarray] | None = None  # (leaf epoch, plan, value)
        # a softmax built from ``x * c`` as a softmax of x scaled by c: the product it stands
        # for, which gradients go through (``differentiated_inputs``)
        self._product: Tensor | None = None

    # -- description ---------------------------------------------------------------------------

    @property
    def grad_compute(self) -> Callable[..., tuple[Tensor, ...]] | None:
        """The op's gradient rule (``softcuda.autograd.GRADIENTS``); None for a leaf."""
        return Tensor.gradient_rules.get(self.op)

    @property
    def data(self) -> Any:
        """The node's values from the last plan that computed it; a leaf's, read-only, brought
        up to date from its resident copy first if a plan has updated that since."""
        if self._resident is not None:
            self._refresh_host()
        return self._data

    @data.setter
    def data(self, values: Any) -> None:
        self._data = values

    @property
    def shape(self) -> tuple[int, ...]:
        return self.dims

    @property
    def size(self) -> int:
        return _ops.numel(self.dims)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        if self.a is None:
            return ()
        return (self.a,) if self.b is None else (self.a, self.b)

    @property
    def is_leaf(self) -> bool:
        return self.op == "none"

    def __repr__(self) -> str:
        if self.is_leaf:
            what = f"const {self.attrs['value']!r}" if "value" in self.attrs else "leaf"
        else:
            args = ", ".join(t.label for t in self.inputs)
            extra = "".join(f", {k}={v}" for k, v in self.attrs.items())
            what = f"{self.op}({args}{extra})"
        return f"Tensor({self.label} = {what}, shape={self.dims}, {self.dtype})"

    # -- leaves --------------------------------------------------------------------------------

    def _not_writable(self) -> str | None:
        """What this node is, where new values may not be written into it (by ``assign`` or a
        plan's updates), or None for a leaf that takes them."""
        if not self.is_leaf:
            return f"a {self.op} node, not a leaf"
        if "value" in self.attrs:
            return "a constant (a Python number in the graph)"
        if self.attrs.get("frozen"):
            return "a constant that a gradient rule made"
        return None

    def assign(self, values: Any) -> None:
        """Give a leaf new values in place; plans that use it see them on their next run."""
        what = self._not_writable()
        if what is not None:
            raise ShapeError(f"assign: {self.label} is {what}")
        arr = _real_array(values, "assign")
        if arr.shape != self.dims:
            raise ShapeError(f"assign: shape {arr.shape} does not match the leaf's {self.dims}")
        self._store(arr)  # integers and other floats convert, as in tensor()

    def _store(self, values: Any, home: Any = None) -> None:
        """Write ``values`` into this leaf's buffer (``home``, its view, when the caller holds
        one) and into the page-locked mirror a pinned plan keeps of it; cached ``numpy()``
        results go stale.  ``assign`` and a plan's update steps both write through here."""
        if home is None:
            home = self._allocation.view(self.dims, self.dtype)  # raises if the pool was reset
        np.copyto(home, values, casting="unsafe")
        self._stored(home)

    def _stored(self, home: Any) -> None:
        """What follows new values in this leaf's buffer (``home``, its view): the pinned
        mirror, the resident device copy, cached reads.  ``_store`` after its copy, and a plan's
        update whose kernel wrote the leaf in place."""
        self._mirror_from(home)
        if self._resident is not None:  # the device copy is where plans read it: same values
            self._resident.view(self.dims, self.dtype).set(home)
            _synchronize_device()
            _behind.pop(id(self), None)
        _leaf_epoch[0] += 1

    def _keep_on_device(self, allocation: Any) -> None:
        """Make ``allocation`` (device memory) this leaf's resident copy, filled from the host."""
        host = self.data  # up to date: a leaf has one resident copy at most, made once
        allocation.view(self.dims, self.dtype).set(host)  # host: C-contiguous, of any rank
        _synchronize_device()
        self._resident = allocation

    def _refresh_host(self) -> None:
        """The host copy brought up to date, where a plan has written the resident copy since."""
        if id(self) in _behind:
            self._sync_host()

    def _sync_host(self) -> None:
        """Copy the resident values into the host buffer (and the pinned mirror): the plans
        that write them have finished, each synchronises its stream at the end of a run."""
        home = self._allocation.view(self.dims, self.dtype)
        self._resident.view(self.dims, self.dtype).get(out=home)
        self._mirror_from(home)
        _behind.pop(id(self), None)

    def _mirror_from(self, home: Any) -> None:
        """The page-locked mirror a pinned plan keeps of this leaf, made equal to ``home``."""
        if self._mirror is not None:
            np.copyto(self._mirror.view(self.dims, self.dtype), home)

    # -- gradients ----------------------------------------------------------------------------

    def backward(self, seed: Any = None) -> None:
        """Add this node's gradient to ``.grad`` of every leaf beneath it made with
        ``requires_grad=True``, as lazy tensors (see ``softcuda.autograd.grad``)."""
        Tensor.backward_hook(self, seed)

    # -- evaluation ----------------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """Compile with the resolved default config and evaluate; cached until a leaf changes."""
        if self.is_leaf:
            return np.array(self.data)
        return Tensor.numpy_hook(self)

    # -- operators -----------------------------------------------------------------------------

    def __add__(self, other: Any) -> Tensor:
        return _binary("add", self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _binary("add", other, self)

    def __sub__(self, other: Any) -> Tensor:
        return _binary("sub", self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _binary("sub", other, self)

    def __mul__(self, other: Any) -> Tensor:
        return _binary("mul", self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _binary("mul", other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return _binary("div", self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _binary("div", other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return matmul(other, self)

    def __neg__(self) -> Tensor:
        return _unary("neg", self)

    def __abs__(self) -> Tensor:
        return _unary("abs", self)

    def matmul(self, other: Any) -> Tensor:
        return matmul(self, other)

    if TYPE_CHECKING:  # the registry's unary, binary and reduction ops (``_generate``)

        def __getattr__(self, name: str) -> Callable[..., Tensor]: ...

    def pow(self, exponent: float) -> Tensor:
        return pow(self, exponent)

    def __pow__(self, exponent: float) -> Tensor:
        return pow(self, exponent)

    def __rpow__(self, base: Any) -> Tensor:
        raise ShapeError(
            f"pow: the base must be a Tensor and the exponent a number; {type(base).__name__} "
            "** Tensor is not an op (exp(x * log(base)) is)"
        )

    def softmax(self, axis: int | None = -1) -> Tensor:
        return softmax(self, axis)

    def log_softmax(self, axis: int | None = -1) -> Tensor:
        return log_softmax(self, axis)

    @property
    def T(self) -> Tensor:  # noqa: N802 - numpy's name
        return self.transpose()

    def transpose(self, *axes: int) -> Tensor:
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        perm = tuple(axes) if axes else tuple(reversed(range(self.ndims)))
        if sorted(perm) != list(range(self.ndims)):
            raise ShapeError(f"transpose: axes {perm} do not fit shape {self.dims}")
        dims = tuple(self.dims[i] for i in perm)
        stride = tuple(self.stride[i] for i in perm)
        return Tensor("transpose", dims, self.dtype, a=self, stride=stride, attrs={"axes": perm})

    def reshape(self, *shape: int) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        dims = _ops.reshape_shape(self.dims, tuple(int(d) for d in shape))
        # A reshape of contiguous data is a view; otherwise the plan copies (still contiguous).
        return Tensor("reshape", dims, self.dtype, a=self, attrs={"shape": dims})


# ---- leaves -------------------------------------------------------------------------------------


def differentiated_inputs(node: Tensor) -> tuple[Tensor, ...]:
    """The inputs gradients flow through: a node's own, except a softmax that reads ``x`` for
    the product ``x * c`` it was built from (``_scaled_row_input``), whose gradient goes to the
    product, so that the gradient with respect to the product is there to be asked for."""
    return (node._product,) if node._product is not None else node.inputs


def topological_order(
    roots: list[Tensor], inputs: Callable[[Tensor], tuple[Tensor, ...]] | None = None
) -> list[Tensor]:
    """Every node beneath ``roots``, each after its inputs (``inputs``: what a node's inputs
    are taken to be, its own by default): post-order DFS without recursion (a 100,000-node
    chain must not hit the stack limit)."""
    order: list[Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for child in reversed(node.inputs if inputs is None else inputs(node)):
            if id(child) not in seen:
                stack.append((child, False))
    return order


def frozen(leaf: Tensor) -> Tensor:
    """``leaf``, marked as a constant nothing may write (a gradient rule's ones, a loss's seed):
    a plan may keep it on the device its readers run on for good."""
    leaf.attrs["frozen"] = True
    return leaf


def _synchronize_device() -> None:
    """Wait for the current device's work (a copy into a resident leaf, made on the default
    stream, must land before a plan's own stream reads it)."""
    import cupy  # only leaves with a resident copy get here: CuPy is there

    cupy.cuda.runtime.deviceSynchronize()


def tensor(values: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """A leaf holding a copy of ``values`` in the host leaf pool.

    Without ``dtype``: a numpy array keeps its dtype when it is float32 or float64; anything
    else (a Python list or number, an integer array) becomes float32, the library's default,
    so that ``sc.tensor([1.0, 2.0]) + sc.randn(2)`` works as written.  ``requires_grad``
    marks the leaf for ``backward()``.
    """
    arr = _real_array(values, "tensor")
    keeps = isinstance(values, (np.ndarray, np.generic)) and arr.dtype in DTYPES
    dt = _check_dtype(dtype if dtype is not None else (arr.dtype if keeps else np.float32))
    node = Tensor("none", arr.shape, dt)
    node._allocation = leaf_pool().alloc(node.nbytes)
    node.data = node._allocation.view(node.dims, dt)
    np.copyto(node.data, arr, casting="unsafe")
    node.data.flags.writeable = False  # plans share it: new values go through assign()
    node.evaluated = True
    node.backend_id = "leaf"
    node.requires_grad = bool(requires_grad)
    return node


def zeros(shape: Any, dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    return tensor(np.zeros(_as_shape(shape), _check_dtype(dtype)), requires_grad=requires_grad)


def ones(shape: Any, dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    return tensor(np.ones(_as_shape(shape), _check_dtype(dtype)), requires_grad=requires_grad)


def randn(
    shape: Any, seed: int | None = None, dtype: Any = np.float32, requires_grad: bool = False
) -> Tensor:
    """Standard normal values from numpy's default generator (reproducible with ``seed``)."""
    dt = _check_dtype(dtype)
    rng = np.random.default_rng(_as_seed(seed, "randn"))
    values = rng.standard_normal(_as_shape(shape), dtype=dt)
    return tensor(values, requires_grad=requires_grad)


def _real_array(values: Any, op: str) -> np.ndarray:
    """``values`` as a numpy array of real numbers (booleans and integers convert), or one
    sentence saying why not."""
    if isinstance(values, Tensor):
        raise ShapeError(
            f"{op}: expected values (an array or numbers), got the Tensor {values.label}; its "
            ".numpy() gives its values"
        )
    try:
        arr = np.asarray(values)
    except ValueError:  # a ragged list
        raise ShapeError(f"{op}: the values are not a rectangular array") from None
    if arr.dtype == object and all(_is_number(v) for v in arr.flat):
        # Python ints past int64: numbers all the same, as far as a float64 reaches
        arr = np.array([_as_float(v, op) for v in arr.flat], np.float64).reshape(arr.shape)
    if arr.dtype.kind not in "biuf":
        raise ShapeError(f"{op}: values of dtype {arr.dtype} are not real numbers")
    return arr


def _is_number(value: Any) -> bool:
    """A real number, as a binary op takes one for an operand (not a bool, not an array)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _as_float(value: Any, op: str, what: str = "the number") -> float:
    """A number (``_is_number``) as a float, or one sentence where a Python int is past a
    float64's range.  Its digits are counted from its bit length: ``str`` of an int over 4300
    digits raises."""
    try:
        return float(value)
    except OverflowError:
        n = builtins.abs(int(value))  # the module's own abs, if any, is the op
        digits = int((n.bit_length() - 1) * 0.30102999566398120) + 1  # the count, or one less
        digits += n >= 10**digits
        raise ShapeError(f"{op}: {what} ({digits} digits) is beyond a float64") from None


def _as_seed(seed: Any, op: str) -> int | None:
    """``seed`` for numpy's default generator: None or a non-negative int."""
    if seed is None:
        return None
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0:
        return int(seed)
    raise ShapeError(f"{op}: seed must be None or a non-negative int, got {excerpt(seed)}")


def _as_shape(shape: Any) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        dims = tuple(dims)
    except TypeError:
        raise ShapeError(f"a shape is an int or a sequence of ints, got {shape!r}") from None
    if not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims
    ):
        raise ShapeError(f"a shape is made of non-negative ints, got {shape!r}")
    return tuple(int(d) for d in dims)


def _as_tensor(value: Any, like: Tensor, op: str) -> Tensor:
    """A binary op's operand as a Tensor beside the Tensor ``like``.  A number (a Python or a
    numpy scalar) is weak: it takes ``like``'s dtype, as in numpy 2 and PyTorch.  An array is
    held to the rule for two tensors: of another dtype it is refused, never cast unseen."""
    if isinstance(value, Tensor):
        return value
    if _is_number(value):
        number = _as_float(value, op)
        node = tensor(np.asarray(number, dtype=like.dtype))
        node.attrs["value"] = number
        return node
    if isinstance(value, np.ndarray):
        if value.dtype != like.dtype:
            raise ShapeError(
                f"{op}: the array's dtype {value.dtype} (shape {value.shape}) differs from the "
                f"tensor's {like.dtype} (shape {like.dims}); cast it explicitly "
                f"(.astype(np.{like.dtype}))"
            )
        return tensor(value)
    raise ShapeError(f"{op}: cannot combine a tensor with {type(value).__name__}")


# ---- op constructors ----------------------------------------------------------------------------


def _binary(op: str, x: Any, y: Any) -> Tensor:
    if not isinstance(x, Tensor):
        if not isinstance(y, Tensor):
            names = (type(x).__name__, type(y).__name__)
            raise ShapeError(f"{op}: one operand must be a Tensor, got {names[0]} and {names[1]}")
        x = _as_tensor(x, y, op)
    y = _as_tensor(y, x, op)
    if x.dtype != y.dtype:
        raise ShapeError(
            f"{op}: dtypes {x.dtype} (shape {x.dims}) and {y.dtype} (shape {y.dims}) differ"
        )
    return Tensor(op, _ops.broadcast_shape(op, x.dims, y.dims), x.dtype, a=x, b=y)


def _unary(op: str, x: Tensor) -> Tensor:
    if not isinstance(x, Tensor):
        raise ShapeError(f"{op}: expected a Tensor, got {type(x).__name__}")
    return Tensor(op, x.dims, x.dtype, a=x)


def _reduce(op: str, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
    if not isinstance(x, Tensor):
        raise ShapeError(f"{op}: expected a Tensor, got {type(x).__name__}")
    if not isinstance(keepdims, (bool, np.bool_)):
        raise ShapeError(f"{op}: keepdims must be True or False, got {keepdims!r}")
    axis = _ops.normalize_axis(op, x.dims, axis)
    if op == "max" and (x.size == 0 if axis is None else x.dims[axis] == 0):
        raise ShapeError(
            f"max: shape {x.dims} has nothing to reduce along "
            f"{'its elements' if axis is None else f'axis {axis}'}"
        )
    dims = _ops.reduction_shape(x.dims, axis, keepdims)
    return Tensor(op, dims, x.dtype, a=x, attrs={"axis": axis, "keepdims": bool(keepdims)})


def matmul(x: Any, y: Any) -> Tensor:
    if not isinstance(x, Tensor) or not isinstance(y, Tensor):
        names = (type(x).__name__, type(y).__name__)
        raise ShapeError(f"matmul: both operands must be Tensors, got {names[0]} and {names[1]}")
    if x.dtype != y.dtype:
        raise ShapeError(
            f"matmul: dtypes {x.dtype} (shape {x.dims}) and {y.dtype} (shape {y.dims}) differ"
        )
    return Tensor("matmul", _ops.matmul_shape(x.dims, y.dims), x.dtype, a=x, b=y)


def pow(x: Tensor, exponent: float) -> Tensor:  # noqa: A001 - numpy's and torch's name
    """``x ** exponent`` elementwise, for a number ``exponent`` (a kernel argument, not a
    tensor).  As in numpy, a negative base to a non-integer power is NaN."""
    if not isinstance(x, Tensor):
        raise ShapeError(f"pow: expected a Tensor, got {type(x).__name__}")
    if not _is_number(exponent):
        raise ShapeError(f"pow: the exponent must be a number, got {type(exponent).__name__}")
    value = _as_float(exponent, "pow", "the exponent")
    return Tensor("pow", x.dims, x.dtype, a=x, attrs={"exponent": value})


def softmax(x: Tensor, axis: int | None = -1) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (None: over every element); the
    shift by the maximum keeps exp from overflowing."""
    if not isinstance(x, Tensor):
        raise ShapeError(f"softmax: expected a Tensor, got {type(x).__name__}")
    axis = _ops.normalize_axis("softmax", x.dims, axis)
    return _row_op("softmax", x, axis)


def log_softmax(x: Tensor, axis: int | None = -1) -> Tensor:
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (None: over every element): the
    logarithm of softmax, finite where softmax's float32 values underflow to 0 (logits spread
    over more than about 100)."""
    if not isinstance(x, Tensor):
        raise ShapeError(f"log_softmax: expected a Tensor, got {type(x).__name__}")
    axis = _ops.normalize_axis("log_softmax", x.dims, axis)
    return _row_op("log_softmax", x, axis)


def _row_op(op: str, x: Tensor, axis: int | None) -> Tensor:
    """A softmax or log_softmax node of ``x`` (``_scaled_row_input`` may take a product by a
    number apart; the node then keeps the product for its gradient)."""
    read, attrs = _scaled_row_input(x, axis)
    node = Tensor(op, x.dims, x.dtype, a=read, attrs=attrs)
    if read is not x:
        node._product = x
    return node


def _scaled_row_input(x: Tensor, axis: int | None) -> tuple[Tensor, dict]:
    """The input a softmax reads and its attributes: of ``t * c`` (or ``c * t``) for a number
    ``c``, ``t`` and ``scale`` c, so that the kernel multiplies as it reads (attention's
    ``softmax(q kᵀ * d ** -0.5)``: on the GPU it saves a pass of the scores written and read
    again, about a tenth of the head's time at s = 4096).  The values are the same: the kernel
    rounds the product as the mul would (no fused multiply-add), and where the product is read
    elsewhere too, the mul stays for that reader.  A division by a number is left as it is:
    x * (1/c) may round otherwise than x / c."""
    attrs: dict = {"axis": axis}
    if x.op == "mul" and x.a is not None and x.b is not None:
        for tensor_side, number_side in ((x.a, x.b), (x.b, x.a)):
            if _is_number_leaf(number_side) and tensor_side.dims == x.dims:
                attrs["scale"] = float(number_side.attrs["value"])
                return tensor_side, attrs
    return x, attrs


def _is_number_leaf(t: Tensor) -> bool:
    """A number a binary op was given (``_as_tensor``): a 0-d leaf that keeps its value."""
    return t.op == "none" and t.dims == () and "value" in t.attrs


def cross_entropy(logits: Tensor, target: Any) -> Tensor:
    """The mean over rows of ``-sum(target * log_softmax(logits, axis=-1))``: ``logits`` is
    (rows, classes) (or (classes,), one row); ``target`` an integer numpy array of class indices,
    one per row, or a Tensor of probabilities shaped like ``logits``.  Built of registry ops
    (log_softmax, mul, sum, mean), so it runs on every backend and fuses; its gradient with
    respect to ``logits`` comes out as (softmax(logits) - target) / rows.  Stable at any logit
    scale: log_softmax subtracts the maximum and never takes the log of an underflowed 0.  The
    logits must be finite: a -inf logit (a masked class) gives NaN, since the target's 0 there
    multiplies log_softmax's -inf."""
    if not isinstance(logits, Tensor):
        raise ShapeError(f"cross_entropy: logits must be a Tensor, got {type(logits).__name__}")
    if logits.ndims not in (1, 2) or logits.dims[-1] == 0:
        raise ShapeError(
            f"cross_entropy: logits must be (rows, classes) or (classes,) with classes > 0, "
            f"got shape {logits.dims}"
        )
    rows = 1 if logits.ndims == 1 else logits.dims[0]
    classes = logits.dims[-1]
    if isinstance(target, Tensor):
        if target.dims != logits.dims or target.dtype != logits.dtype:
            raise ShapeError(
                f"cross_entropy: a target Tensor of probabilities must match the logits "
                f"({logits.dims}, {logits.dtype}), got ({target.dims}, {target.dtype})"
            )
        probs = target
    else:
        labels = np.asarray(target)
        want = (rows,) if logits.ndims == 2 else ()
        if labels.dtype.kind not in "iu" or labels.shape != want:
            raise ShapeError(
                f"cross_entropy: class indices must be an integer array of shape {want} (one "
                f"per row of logits {logits.dims}), got {labels.dtype} of shape {labels.shape}"
            )
        if labels.size and (labels.min() < 0 or labels.max() >= classes):
            bad = int(labels.min() if labels.min() < 0 else labels.max())
            raise ShapeError(
                f"cross_entropy: class index {bad} is out of range for {classes} classes "
                f"(logits {logits.dims})"
            )
        onehot = np.zeros(logits.dims, dtype=logits.dtype)
        if logits.ndims == 2:
            onehot[np.arange(rows), labels] = 1
        else:
            onehot[labels] = 1
        probs = frozen(tensor(onehot, logits.dtype))
    picked = (probs * log_softmax(logits, -1)).sum(-1)
    return -(picked.mean() if logits.ndims == 2 else picked)


# ---- the constructors the registry generates ----------------------------------------------------


def _unary_function(name: str) -> Callable[..., Tensor]:
    def function(x: Tensor) -> Tensor:
        return _unary(name, x)

    return function


def _binary_function(name: str) -> Callable[..., Tensor]:
    def function(x: Any, y: Any) -> Tensor:
        return _binary(name, x, y)

    return function


def _reduction_function(name: str) -> Callable[..., Tensor]:
    def function(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return _reduce(name, x, axis, keepdims)

    return function


_MAKERS = {"unary": _unary_function, "binary": _binary_function, "reduce": _reduction_function}


def _generate() -> tuple[str, ...]:
    """For every unary, binary and reduction op of the registry, its constructor ``<op>(x, ...)``
    as a function of this module, and the same function as the method ``Tensor.<op>``, its
    docstring the entry's ``doc``.  Returns their names, in the registry's order."""
    made = []
    for name, op in _ops.OPS.items():
        maker = _MAKERS.get(op.family)
        if maker is None:  # pow, softmax, matmul, views and leaves: written above
            continue
        function = maker(name)
        function.__name__ = function.__qualname__ = name
        function.__module__ = __name__
        function.__doc__ = op.doc
        globals()[name] = function
        setattr(Tensor, name, function)
        made.append(name)
    return tuple(made)


GENERATED: tuple[str, ...] = _generate()
"""The names ``_generate`` made: functions here, methods of Tensor, exports of the package."""

if TYPE_CHECKING:  # what a type checker cannot see: the generated functions and methods

    def __getattr__(name: str) -> Callable[..., Tensor]: ...
