"""softcuda: a lazy tensor library whose backends are chosen once, per (op, size bucket).

Nothing runs when an op is defined; ``compile`` reads CONFIG.soft once, bakes a backend into
every node and plans every buffer; ``Plan.evaluate`` only runs prebound kernels.  CuPy is
optional and imported only when a plan uses a CUDA backend.
"""

from __future__ import annotations

from . import optim
from . import tensor as _tensor_module
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
    GENERATED,
    Tensor,
    cross_entropy,
    log_softmax,
    matmul,
    ones,
    pow,
    randn,
    softmax,
    tensor,
    zeros,
)
from .version import __version__

# The registry's unary, binary and reduction ops (sc.exp, sc.add, sc.sum, ...): their functions
# are generated in ``tensor`` from ``ops.OPS``, and exported here under their own names.
globals().update({name: getattr(_tensor_module, name) for name in GENERATED})

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
    "compile",
    "cross_entropy",
    "default_config",
    "format_bytes",
    "format_seconds",
    "grad",
    "load_config",
    "load_graph",
    "log_softmax",
    "matmul",
    "ones",
    "optim",
    "pow",
    "randn",
    "softmax",
    "tensor",
    "zeros",
    *GENERATED,
]
