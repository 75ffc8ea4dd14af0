"""Gradients as more lazy graph: reverse accumulation over the nodes, with each op's rule from
the registry (``OpDef.vjp``, kept on every node as ``grad_compute``).

``grad`` defines nodes and runs nothing: every gradient it returns is an ordinary lazy Tensor,
built from the ordinary ops, which ``compile`` places, plans and runs like any other node (a
forward and a backward pass compile into one plan when asked for together).

Invariants: nodes are visited in reverse topological order, so a node's gradient holds every
consumer's contribution (summed with ``add``) before its own rule runs; only nodes on a path to
a requested tensor get a gradient, so constants and unrelated branches add no nodes.
"""

from __future__ import annotations

import warnings
from typing import Any

from .errors import ShapeError, SoftcudaError
from .graph import topological_order
from .tensor import Tensor, frozen, ones, tensor, zeros


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

    order = topological_order([loss])
    wanted = {id(t) for t in targets}
    leads = set(wanted)  # nodes on a path to a requested tensor (inputs come first in order)
    for node in order:
        if any(id(x) in leads for x in node.inputs):
            leads.add(id(node))

    grads: dict[int, Tensor] = {id(loss): start}
    for node in reversed(order):
        g = grads.get(id(node))
        if g is None or node.grad_compute is None or id(node) not in leads:
            continue
        for x, part in zip(node.inputs, node.grad_compute(node, g)):
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
