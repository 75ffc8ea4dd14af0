"""Gradients as more lazy graph: reverse accumulation over the nodes, with each op's rule from
``GRADIENTS`` (one table keyed by op, the layer above the registry and the node; a node's
``grad_compute`` reads its rule there).

``grad`` defines nodes and runs nothing: every gradient it returns is an ordinary lazy Tensor,
built from the ordinary ops, which ``compile`` places, plans and runs like any other node (a
forward and a backward pass compile into one plan when asked for together).

Invariants: nodes are visited in reverse topological order, so a node's gradient holds every
consumer's contribution (summed with ``add``) before its own rule runs; only nodes on a path to
a requested tensor get a gradient, so constants and unrelated branches add no nodes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import ShapeError, SoftcudaError
from .ops import Shape, numel, reduction_shape
from .tensor import Tensor, differentiated_inputs, frozen, ones, tensor, topological_order, zeros

Rule = Callable[[Tensor, Tensor], tuple[Tensor, ...]]


def grad(loss: Tensor, wrt: Any, seed: Any = None) -> list[Tensor]:
    """The gradients of ``loss`` with respect to each tensor of ``wrt`` (a Tensor or a sequence
    of them), lazy, in the same order.

    ``seed`` is the gradient of ``loss`` itself (v in vᵀJ): values or a Tensor of ``loss``'s
    shape; without it ``loss`` must have one element and its seed is 1.  A tensor that ``loss``
    does not depend on gets zeros of its shape, with a warning naming it.
    """
    if not isinstance(loss, Tensor):
        raise ShapeError(f"grad: the loss must be a Tensor, got {type(loss).__name__}")
    try:
        targets = [wrt] if isinstance(wrt, Tensor) else list(wrt)
    except TypeError:  # not iterable: None, a number
        raise ShapeError(
            f"grad: wrt must be a Tensor or a sequence of Tensors, got {type(wrt).__name__}"
        ) from None
    for t in targets:
        if not isinstance(t, Tensor):
            raise ShapeError(f"grad: gradients are taken with respect to Tensors, got {t!r}")
    start = _seed(loss, seed)

    order = topological_order([loss], differentiated_inputs)
    wanted = {id(t) for t in targets}
    leads = set(wanted)  # nodes on a path to a requested tensor (inputs come first in order)
    for node in order:
        if any(id(x) in leads for x in differentiated_inputs(node)):
            leads.add(id(node))

    grads: dict[int, Tensor] = {id(loss): start}
    for node in reversed(order):
        g = grads.get(id(node))
        if g is None or node.grad_compute is None or id(node) not in leads:
            continue
        for x, part in zip(differentiated_inputs(node), node.grad_compute(node, g)):
            if id(x) in leads:
                before = grads.get(id(x))
                grads[id(x)] = part if before is None else before + part

    out = []
    for t in targets:
        g = grads.get(id(t))
        if g is None:
            warnings.warn(
                f"grad: the loss {loss.label} does not depend on {t.label} {t.dims}; its "
                "gradient is zero",
                stacklevel=2,
            )
            g = frozen(zeros(t.dims, t.dtype))
        out.append(g)
    return out


def backward(loss: Tensor, seed: Any = None) -> None:
    """``Tensor.backward``: add ``loss``'s gradient to ``.grad`` of each leaf beneath it made
    with ``requires_grad=True`` (accumulating, as a reused leaf's contributions do; set ``.grad``
    to None to start afresh)."""
    leaves = [n for n in topological_order([loss]) if n.is_leaf and n.requires_grad]
    if not leaves:
        raise SoftcudaError(
            f"backward: no leaf beneath {loss.label} was made with requires_grad=True"
        )
    for leaf, g in zip(leaves, grad(loss, leaves, seed)):
        leaf.grad = g if leaf.grad is None else leaf.grad + g


Tensor.backward_hook = backward


def _seed(loss: Tensor, seed: Any) -> Tensor:
    if seed is None:
        if loss.size != 1:
            raise ShapeError(
                f"grad: the loss {loss.label} has shape {loss.dims}, not one element; reduce "
                "it (sum, mean) or pass seed= of its shape"
            )
        return frozen(ones(loss.dims, loss.dtype))
    start = seed if isinstance(seed, Tensor) else tensor(seed, dtype=loss.dtype)
    if start.dims != loss.dims or start.dtype != loss.dtype:
        raise ShapeError(
            f"grad: the seed ({start.dims}, {start.dtype}) must match the loss "
            f"({loss.dims}, {loss.dtype})"
        )
    return start


# ---- the rules ---------------------------------------------------------------------------------
# Each takes the node and g, the gradient of its output (same shape), and builds its inputs'
# gradients from the lazy ops.


def sum_to_shape(g: Tensor, shape: Shape) -> Tensor:
    """``g`` summed over the axes that broadcasting added or stretched from ``shape``: the
    gradient of an input that broadcast to ``g``'s shape."""
    while g.ndims > len(shape):
        g = g.sum(axis=0)
    for i, dim in enumerate(shape):
        if dim == 1 and g.dims[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


def _ones(shape: Shape, dtype: np.dtype) -> Tensor:
    return frozen(ones(shape, dtype))


def _broadcast_back(node: Tensor, g: Tensor) -> Tensor:
    """g (a reduction's output gradient) in the keepdims shape, ready to broadcast against the
    reduction's input."""
    x = node.a
    keep = reduction_shape(x.dims, node.attrs["axis"], True)
    return g if g.dims == keep else g.reshape(keep)


def _vjp_add(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    return sum_to_shape(g, node.a.dims), sum_to_shape(g, node.b.dims)


def _vjp_sub(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    return sum_to_shape(g, node.a.dims), sum_to_shape(-g, node.b.dims)


def _vjp_mul(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    a, b = node.inputs
    return sum_to_shape(g * b, a.dims), sum_to_shape(g * a, b.dims)


def _vjp_div(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    a, b = node.inputs
    return sum_to_shape(g / b, a.dims), sum_to_shape(-(g * a) / b.square(), b.dims)


def _vjp_sum(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    x = node.a
    return (_broadcast_back(node, g) * _ones(x.dims, x.dtype),)


def _vjp_mean(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    x = node.a
    axis = node.attrs["axis"]
    count = max(numel(x.dims) if axis is None else x.dims[axis], 1)  # empty: no elements anyway
    return (_broadcast_back(node, g) * _ones(x.dims, x.dtype) / float(count),)


def _vjp_max(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    # Ties share: the positions equal to the maximum split g evenly.  max - x is exactly 0
    # there and positive elsewhere; it is NaN where both are the same infinity, a tie too, as
    # step gives 0 for NaN (so a NaN maximum makes every position of its row a tie).
    x, axis = node.a, node.attrs["axis"]
    top = _broadcast_back(node, node)
    mask = 1.0 - (top - x).step()
    return (_broadcast_back(node, g) * mask / mask.sum(axis, keepdims=True),)


def _swap_last(t: Tensor) -> Tensor:
    return t.transpose() if t.ndims == 2 else t.transpose(0, 2, 1)


def _vjp_matmul(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    a, b = node.inputs
    return (
        sum_to_shape(g @ _swap_last(b), a.dims),
        sum_to_shape(_swap_last(a) @ g, b.dims),
    )


def _vjp_softmax(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    s = node
    return (s * (g - (g * s).sum(node.attrs["axis"], keepdims=True)),)


def _vjp_log_softmax(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    # d/dx (x - logsumexp x) = g - softmax(x) * sum(g); softmax(x) = exp(log_softmax(x))
    # (a softmax of x * c reading x is differentiated through the product,
    # tensor.differentiated_inputs: the mul's own rule takes c to x)
    return (g - node.exp() * g.sum(node.attrs["axis"], keepdims=True),)


def _vjp_transpose(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    perm = node.attrs["axes"]
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return (g.transpose(tuple(inverse)),)


def _vjp_reshape(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    return (g.reshape(node.a.dims),)


def _vjp_step(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    # Zero everywhere, built from g so that it stays on g's device: step(g) is 0 or 1 for every
    # g, NaN and +-inf included, so times 0 it is exactly 0 (g * 0 would be NaN for an infinite
    # g).  Two elementwise kernels and no buffer of g's size, as a zeros leaf would be.
    return (g.step() * 0.0,)


def _vjp_pow(node: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    p = node.attrs["exponent"]
    return (g * p * node.a.pow(p - 1.0),)


GRADIENTS: dict[str, Rule] = {
    "add": _vjp_add,
    "sub": _vjp_sub,
    "mul": _vjp_mul,
    "div": _vjp_div,
    "neg": lambda n, g: (-g,),
    "relu": lambda n, g: (g * n.a.step(),),
    "exp": lambda n, g: (g * n,),
    "log": lambda n, g: (g / n.a,),
    "tanh": lambda n, g: (g * (1.0 - n.square()),),
    "sigmoid": lambda n, g: (g * n * (1.0 - n),),
    "square": lambda n, g: (g * n.a * 2.0,),
    "step": _vjp_step,
    # sign(x) as step(x) - step(-x): 0 at 0 and for NaN, where x / |x| would be NaN
    "abs": lambda n, g: (g * (n.a.step() - (-n.a).step()),),
    "pow": _vjp_pow,
    "softmax": _vjp_softmax,
    "log_softmax": _vjp_log_softmax,
    "sum": _vjp_sum,
    "mean": _vjp_mean,
    "max": _vjp_max,
    "matmul": _vjp_matmul,
    "transpose": _vjp_transpose,
    "reshape": _vjp_reshape,
}
"""Each op's gradient rule (a leaf has none): ``rule(node, g)`` gives one lazy Tensor per input
of ``node``, that input's share of ``g``, the gradient of the node's output."""
Tensor.gradient_rules = GRADIENTS
