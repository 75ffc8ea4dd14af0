"""softcuda: a lazy tensor library whose backends are chosen once, per (op, size bucket).

Nothing runs when an op is defined; ``compile`` reads CONFIG.soft once, bakes a backend into
every node and plans every buffer; ``Plan.evaluate`` only runs prebound kernels.  CuPy is
optional and imported only when a plan uses a CUDA backend.
"""

from __future__ import annotations

from . import optim
from .autograd import grad
from .config import Config, default_config, load_config
from .errors import (
    BackendUnavailable,
    ConfigError,
    OptimizerError,
    PoolError,
    ShapeError,
    SoftcudaError,
)
from .graph import Graph, Plan, compile
from .plan import format_seconds
from .planner import PLACEMENTS
from .pool import format_bytes
from .script import load_graph
from .tensor import (
    Tensor,
    add,
    div,
    exp,
    log,
    matmul,
    max,
    mean,
    mul,
    neg,
    ones,
    pow,
    randn,
    relu,
    sigmoid,
    softmax,
    square,
    step,
    sub,
    sum,
    tanh,
    tensor,
    zeros,
)
from .version import __version__

__all__ = [
    "BackendUnavailable",
    "Config",
    "ConfigError",
    "Graph",
    "PLACEMENTS",
    "OptimizerError",
    "Plan",
    "PoolError",
    "ShapeError",
    "SoftcudaError",
    "Tensor",
    "__version__",
    "add",
    "compile",
    "default_config",
    "div",
    "exp",
    "format_bytes",
    "format_seconds",
    "grad",
    "load_config",
    "load_graph",
    "log",
    "matmul",
    "max",
    "mean",
    "mul",
    "neg",
    "ones",
    "optim",
    "pow",
    "randn",
    "relu",
    "sigmoid",
    "softmax",
    "square",
    "step",
    "sub",
    "sum",
    "tanh",
    "tensor",
    "zeros",
]
