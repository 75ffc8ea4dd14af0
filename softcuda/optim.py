"""Optimizers whose update is more lazy graph: a training step is one plan.

An optimizer holds its parameters (leaves) and its state (more leaves: momentum, Adam's moments
and its bias corrections).  ``updates(grads)`` defines, as ordinary lazy nodes, the new value
of every parameter and every state leaf, and returns them as ``{leaf: new value}``, which is
what ``compile(..., updates=)`` writes back in place after each run::

    opt = sc.optim.Adam([w, b], lr=1e-2)
    plan = sc.compile({"loss": loss}, updates=opt.minimize(loss))  # forward, backward, update
    for batch in batches:
        x.assign(batch)
        plan.evaluate()  # one step: nothing is compiled or allocated again

The update nodes are placed and explained like any other node.  The learning rate and the
coefficients are numbers baked into the plan (kernel arguments): changing one means building
and compiling the step again.  Build one update graph per optimizer: its state leaves are
shared by every graph built from it.

The rules are PyTorch's: SGD ``v <- momentum v + g; p <- p - lr v`` (without momentum,
``p <- p - lr g``); Adam ``m <- b1 m + (1 - b1) g; v <- b2 v + (1 - b2) g^2;
p <- p - lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps)``.  Each correction
``c = 1 - b^t`` is a leaf of the parameters' dtype, advanced as ``c <- c + (1 - b) (1 - c)`` with
``1 - b`` taken in double on the host: a float32 ``b^t`` would carry b's own rounding (float32
0.99999 is 0.99998999), 1e-3 of ``1 - b^t`` and so of every step, where PyTorch takes the
corrections in double.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .autograd import grad
from .errors import OptimizerError
from .tensor import Tensor, zeros


def _positive(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise OptimizerError(
            f"{owner}: the {name} must be a finite positive number, got {type(value).__name__}"
        )
    if not (math.isfinite(value) and value > 0):
        raise OptimizerError(f"{owner}: the {name} must be a finite positive number, got {value}")
    return float(value)


def _fraction(owner: str, name: str, value: Any) -> float:
    """A coefficient in [0, 1): momentum, Adam's betas."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise OptimizerError(f"{owner}: {name} must be a number in [0, 1), got {value!r}")
    if not 0.0 <= value < 1.0:  # NaN fails this too
        raise OptimizerError(f"{owner}: {name} must be a number in [0, 1), got {value}")
    return float(value)


class Optimizer:
    """What SGD and Adam share: the parameters, checked, and ``minimize``."""

    def __init__(self, params: Any, lr: Any) -> None:
        owner = type(self).__name__
        self.params: list[Tensor] = _leaves(owner, params)
        self.lr = _positive(owner, "learning rate", lr)
        self.state: list[Tensor] = []  # leaves the updates write besides the parameters

    def updates(self, grads: Sequence[Tensor]) -> dict[Tensor, Tensor]:
        """``{leaf: new value}`` for every parameter and state leaf, from one gradient per
        parameter (lazy Tensors, in the order of ``params``), for ``compile(updates=)``."""
        owner = type(self).__name__
        grads = list(grads)
        if len(grads) != len(self.params):
            raise OptimizerError(
                f"{owner}: {len(grads)} gradients for {len(self.params)} parameters"
            )
        for p, g in zip(self.params, grads):
            if not isinstance(g, Tensor) or g.dims != p.dims or g.dtype != p.dtype:
                what = f"({g.dims}, {g.dtype})" if isinstance(g, Tensor) else type(g).__name__
                raise OptimizerError(
                    f"{owner}: the gradient of {p.label} must be a Tensor of its shape and "
                    f"dtype ({p.dims}, {p.dtype}), got {what}"
                )
        return self._updates(grads)

    def minimize(self, loss: Tensor) -> dict[Tensor, Tensor]:
        """The updates that take one step down ``loss``'s gradient (``sc.grad``)."""
        return self.updates(grad(loss, self.params))

    def _updates(self, grads: list[Tensor]) -> dict[Tensor, Tensor]:
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent, with momentum when ``momentum`` > 0 (one velocity leaf per
    parameter, starting at zero)."""

    def __init__(self, params: Any, lr: Any, momentum: Any = 0.0) -> None:
        super().__init__(params, lr)
        self.momentum = _fraction("SGD", "momentum", momentum)
        self.velocity = [zeros(p.dims, p.dtype) for p in self.params] if self.momentum else []
        self.state = list(self.velocity)

    def _updates(self, grads: list[Tensor]) -> dict[Tensor, Tensor]:
        if not self.momentum:
            return {p: p - g * self.lr for p, g in zip(self.params, grads)}
        out = {}
        for p, v, g in zip(self.params, self.velocity, grads):
            out[v] = v * self.momentum + g
            out[p] = p - out[v] * self.lr
        return out


class Adam(Optimizer):
    """Adam (Kingma and Ba, 2015) with bias correction.  State: the moments ``m`` and ``v`` per
    parameter, and ``1 - beta1^t``, ``1 - beta2^t`` per dtype (shape (), starting at 0), all
    leaves."""

    def __init__(
        self,
        params: Any,
        lr: Any = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: Any = 1e-8,
    ) -> None:
        super().__init__(params, lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise OptimizerError(f"Adam: betas must be a pair of numbers, got {betas!r}")
        self.betas = (
            _fraction("Adam", "beta1", betas[0]),
            _fraction("Adam", "beta2", betas[1]),
        )
        self.eps = _positive("Adam", "eps", eps)
        self.m = [zeros(p.dims, p.dtype) for p in self.params]
        self.v = [zeros(p.dims, p.dtype) for p in self.params]
        # 1 - beta^t after the steps taken so far: one pair per dtype, since an op's operands
        # share theirs
        self.corrections: dict[np.dtype, tuple[Tensor, Tensor]] = {}
        for p in self.params:
            if p.dtype not in self.corrections:
                self.corrections[p.dtype] = (zeros((), p.dtype), zeros((), p.dtype))
        pairs = self.corrections.values()
        self.state = [*self.m, *self.v, *(c for pair in pairs for c in pair)]

    def _updates(self, grads: list[Tensor]) -> dict[Tensor, Tensor]:
        beta1, beta2 = self.betas
        out: dict[Tensor, Tensor] = {}
        scales = {}  # dtype -> (lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t)), shape ()
        for dtype, (c1, c2) in self.corrections.items():
            # 1 - b^t = (1 - b^(t-1)) + (1 - b) b^(t-1): only 1 - b, exact in double, is rounded
            out[c1] = c1 + (1.0 - c1) * (1.0 - beta1)
            out[c2] = c2 + (1.0 - c2) * (1.0 - beta2)
            scales[dtype] = (self.lr / out[c1], out[c2] ** -0.5)
        for p, m, v, g in zip(self.params, self.m, self.v, grads):
            step, unbias = scales[p.dtype]
            out[m] = m * beta1 + g * (1.0 - beta1)
            out[v] = v * beta2 + g.square() * (1.0 - beta2)
            out[p] = p - out[m] * step / (out[v] ** 0.5 * unbias + self.eps)
        return out


def _leaves(owner: str, params: Any) -> list[Tensor]:
    """``params`` as a list of distinct leaves, or one sentence saying which is not one."""
    found = [params] if isinstance(params, Tensor) else params
    try:
        found = list(found)
    except TypeError:
        raise OptimizerError(
            f"{owner}: params must be a Tensor or a sequence of them, got {type(params).__name__}"
        ) from None
    if not found:
        raise OptimizerError(f"{owner}: no parameters given")
    seen = set()
    for p in found:
        if not isinstance(p, Tensor):
            raise OptimizerError(
                f"{owner}: every parameter must be a leaf Tensor, but one is a {type(p).__name__}"
            )
        if not p.is_leaf:
            raise OptimizerError(
                f"{owner}: parameter {p.label} is a {p.op} node, not a leaf; optimize the "
                "leaves it is computed from (sc.tensor, sc.randn, ...)"
            )
        if "value" in p.attrs:
            raise OptimizerError(
                f"{owner}: parameter {p.label} is a constant (a Python number in the graph)"
            )
        if id(p) in seen:
            raise OptimizerError(f"{owner}: parameter {p.label} is given twice")
        seen.add(id(p))
    return found
