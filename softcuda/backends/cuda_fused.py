"""Fused groups on the GPU: one generated CUDA kernel per group (two where it sums everything).

The same description of a group as on the CPU (``softcuda.groups``: its members' statements,
its inputs' walks) becomes CUDA source: a grid-stride loop that reads each input once per
element, computes every member in registers with the registry's own expressions (the helpers
of ``kernels/cuda_math.cuh``, which elementwise.cu compiles too) and writes the root once.  A
group ending in a reduction of every element writes one double (or, for max, one value) per
block, folded by a second launch in a fixed order, as reduce.cu does: no atomics, the same bits
every run.  A reduction along an axis of whole rows (inner 1) takes a block per row; a
reduction over a leading axis is not fused on the GPU (``groups.form`` leaves it to reduce.cu's
column kernels, which split long columns).

Each group's source is compiled once per process through CuPy (``RawModule``), whose kernel
cache on disk (``CUPY_CACHE_DIR``) serves a second process without compiling.  The source
depends on the arithmetic, the dtype, the walk's form and which inputs walk contiguously, never
on the numbers (constants are arguments) or the sizes (the walk's dims and strides are a small
device array made at bind).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .. import groups as _groups
from ..errors import SoftcudaError
from ..ops import OPS
from . import cuda_kernels, native

_THREADS = 256
_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_lock = threading.Lock()
_modules: dict[str, Any] = {}


class Spec:
    """One group as its kernel walks it: the dims collapsed, each input's strides, and whether
    it walks the output's elements in order ("c"), one element ("0") or by its strides ("s")."""

    def __init__(self, group: _groups.Group, inputs: list, out: Any, extras: list = ()) -> None:
        self.group, self.inputs, self.out = group, inputs, out
        self.extras = list(extras)
        if len(self.extras) != len(group.extras):
            raise ValueError("a fused group's extra outputs and their arrays differ in number")
        self.ctype = _TYPES[np.dtype(out.dtype)]
        shape = group.shape
        strides = [tuple(cuda_kernels._broadcast_strides(a, shape)) for a in inputs]
        root = group.root
        self.reduce = root.op if group.reduce is not None else ""
        axis = root.attrs.get("axis") if self.reduce else None
        found = _groups.walk(shape, strides, axis)
        if found is None or found[0] == "axis" and found[1][2] != 1:
            raise ValueError("a reduction along a leading axis is not fused on the GPU")
        self.form, self.dims, self.walks = found
        if self.form == "axis":  # a block per row of len
            self.form = "rows"
            self.dims = self.dims[:2]
            self.walks = [w[:2] for w in self.walks]
            self.classes = tuple("s" for _ in inputs)
        else:
            contiguous = list(_contiguous(self.dims))
            self.classes = tuple(
                "0" if all(s == 0 for s in w) else "c" if list(w) == contiguous else "s"
                for w in self.walks
            )
        self.statements = _groups.statements(group)
        self.extra_vars = _groups.extra_variables(group)
        self.key = "scf_" + _groups.kernel_key(
            group, self.ctype, self.form, self.dims, self.classes
        )

    def meta(self) -> np.ndarray:
        values = list(self.dims)
        for w in self.walks:
            values += list(w)
        return np.array(values, dtype=np.int64)


def _contiguous(dims: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for d in reversed(dims):
        out.append(step)
        step *= d
    return tuple(reversed(out))


def _call(op: str, args: tuple[str, ...]) -> str:
    if OPS[op].family == "binary":
        return f"SCF_{op}::f({args[0]}, {args[1]})"
    second = args[1] if len(args) > 1 else "V(0)"
    return f"SCF_{op}::f({args[0]}, {second})"


def _functors() -> str:
    parts = []
    for name, op in OPS.items():
        if op.family == "binary":
            parts.append(
                f"struct SCF_{name} {{ template <class T> __device__ static T f(T x, T y) "
                f"{{ return {op.cuda}; }} }};"
            )
        elif op.family == "unary":
            parts.append(
                f"struct SCF_{name} {{ template <class T> __device__ static T f(T x, T s) "
                f"{{ (void)s; return {op.cuda}; }} }};"
            )
        elif op.family == "power":
            parts.append(
                f"struct SCF_{name} {{ template <class T> __device__ static T f(T x, T s) "
                "{ return sc_pow(x, s); } };"
            )
    return "\n".join(parts)


def source(spec: Spec) -> str:
    """The module of one group: the math, the functors, the kernel (and its fold)."""
    k, ni, ns, d = spec.key, len(spec.inputs), len(spec.group.scalars), len(spec.dims)
    parts = [(cuda_kernels._KERNEL_DIR / "cuda_math.cuh").read_text(encoding="utf-8")]
    parts.append(_functors())
    if spec.reduce:
        parts.append(cuda_kernels.reduce_helpers())
    parts.append(f"typedef {spec.ctype} V;  // the group's dtype")
    params = [f"const V* __restrict__ in_{q}" for q in range(ni)]
    params += ["V* __restrict__ out", "long long n", "const long long* __restrict__ meta"]
    params += [f"V* __restrict__ ex_{q}" for q in range(len(spec.extras))]
    params += [f"V s{j}" for j in range(ns)]
    op = "RedMax" if spec.reduce == "max" else "RedSum"
    acc = "V" if spec.reduce == "max" else "double"
    if spec.reduce:
        params += [f"{acc}* __restrict__ part", "double scale"]
    body: list[str] = []
    lines = []
    for var, name, args in spec.statements:
        lines.append(f"const V {var} = {_call(name, args)};")
    last = spec.statements[-1][0]
    if spec.form == "flat":
        loads = []
        strided = [q for q, c in enumerate(spec.classes) if c == "s"]
        if strided:
            body += [
                f"__shared__ long long sm[{d * (ni + 1)}];",
                f"for (int i = threadIdx.x; i < {d * (ni + 1)}; i += blockDim.x) sm[i] = meta[i];",
                "__syncthreads();",
            ]
            loads.append(" ".join(f"long long o{q} = 0;" for q in strided))
            step = " ".join(f"o{q} += j * sm[{d} + {q * d} + k];" for q in strided)
            loads.append(
                f"{{ long long r = i; for (int k = {d - 1}; k >= 0; --k) {{ "
                f"const long long j = r % sm[k]; r /= sm[k]; {step} }} }}"
            )
        for q, c in enumerate(spec.classes):
            where = "i" if c == "c" else "0" if c == "0" else f"o{q}"
            loads.append(f"const V in{q} = in_{q}[{where}];")
        element = " ".join(loads + lines)
        loop = (
            "for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; "
            "i += (long long)gridDim.x * blockDim.x)"
        )
        if not spec.reduce:
            stores = f"out[i] = {last};"
            stores += "".join(f" ex_{q}[i] = {v};" for q, v in enumerate(spec.extra_vars))
            body.append(f"{loop} {{ {element} {stores} }}")
        else:
            body.append(f"{acc} acc = {op}::template identity<{acc}>();")
            body.append(f"{loop} {{ {element} acc = {op}::combine(acc, ({acc}){last}); }}")
            body.append(f"acc = block_reduce<{op}>(acc);")
            body.append("if (threadIdx.x == 0) part[blockIdx.x] = acc;")
    else:  # rows: a block per row of len
        body.append("const long long rows = meta[0], len = meta[1];")
        for q in range(ni):
            body.append(f"const long long y{q} = meta[2 + {2 * q}], z{q} = meta[3 + {2 * q}];")
        body.append("for (long long r = blockIdx.x; r < rows; r += gridDim.x) {")
        body.append(f"  {acc} acc = {op}::template identity<{acc}>();")
        loads = " ".join(f"const V in{q} = in_{q}[r * y{q} + l * z{q}];" for q in range(ni))
        body.append(
            f"  for (long long l = threadIdx.x; l < len; l += blockDim.x) {{ {loads} "
            f"{' '.join(lines)} acc = {op}::combine(acc, ({acc}){last}); }}"
        )
        body.append(f"  acc = block_reduce<{op}>(acc);")
        body.append(f"  if (threadIdx.x == 0) out[r] = {op}::template finish<V>(acc, scale);")
        body.append("}")
    parts.append(
        f'extern "C" __global__ void {k}({", ".join(params)}) {{\n  ' + "\n  ".join(body) + "\n}"
    )
    if spec.form == "flat" and spec.reduce:
        parts.append(
            f'extern "C" __global__ void {k}_fold(const {acc}* __restrict__ part, int count, '
            f"{spec.ctype}* __restrict__ out, double scale) {{ "
            f"reduce_all_stage2<{op}, {spec.ctype}>(part, count, out, scale); }}"
        )
    return "\n".join(parts) + "\n"


def _module(spec: Spec) -> Any:
    """The group's compiled module, compiled outside the lock (several threads compile side by
    side; two compiling one key keep the first that lands)."""
    with _lock:
        mod = _modules.get(spec.key)
    if mod is None:
        import cupy

        mod = cupy.RawModule(code=source(spec), options=("-std=c++17",))
        try:
            mod.compile()
        except Exception as exc:  # CuPy's CompileException carries NVRTC's log
            if type(exc).__name__ != "CompileException" or not native.refuses_code(1, str(exc)):
                raise  # not an error line about the code (NVRTC out of memory, say): as it came
            said = _groups.refused(spec.group, " for the GPU", native.first_error(str(exc)))
            raise SoftcudaError(said) from None
        with _lock:
            mod = _modules.setdefault(spec.key, mod)
    return mod


def prepare_fused(found: list) -> None:
    """Compile the modules of a plan's groups ((group, inputs, out) each) before the first is
    bound, side by side (NVRTC compiles several at once much faster than in turn)."""
    from concurrent.futures import ThreadPoolExecutor

    specs = []
    for group, inputs, out, extras in found:
        try:
            specs.append(Spec(group, inputs, out, extras))
        except ValueError:
            continue
    todo = list({s.key: s for s in specs if s.key not in _modules}.values())
    if todo:
        with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
            list(pool.map(_module, todo))


def make_fused(group: _groups.Group, inputs: list, out: Any, extras: list = ()):
    """The group's kernel (and fold) bound to its arrays: launches on the current stream."""
    import cupy

    spec = Spec(group, inputs, out, extras)
    mod = _module(spec)
    dtype = np.dtype(out.dtype)
    meta = cupy.asarray(spec.meta())
    scalars = tuple(dtype.type(v) for v in group.scalar_values())
    kernel = mod.get_function(spec.key)
    n = int(np.prod(spec.dims)) if spec.form == "flat" else int(spec.dims[0])
    args: tuple = (*inputs, out, np.int64(n), meta, *spec.extras, *scalars)
    if not spec.reduce:
        grid = cuda_kernels._grid_1d(n)
        return cuda_kernels._launcher(kernel, (grid,), (_THREADS,), args)
    count = group.size if spec.form == "flat" else int(spec.dims[1])
    scale = cuda_kernels._mean_scale(spec.reduce, count)
    acc = dtype if spec.reduce == "max" else np.dtype(np.float64)
    if spec.form == "rows":
        part = cupy.empty(1, dtype=acc)  # unused: rows write their outputs directly
        grid = max(1, min(n, 65535))
        return cuda_kernels._launcher(kernel, (grid,), (_THREADS,), (*args, part, scale))
    blocks = max(1, min(-(-n // (_THREADS * 8)), 8 * cuda_kernels._sm_count(), 2048))
    part = cupy.empty(blocks, dtype=acc)
    fold = mod.get_function(f"{spec.key}_fold")
    return cuda_kernels._sequence(
        cuda_kernels._launcher(kernel, (blocks,), (_THREADS,), (*args, part, scale)),
        cuda_kernels._launcher(fold, (1,), (1024,), (part, np.int32(blocks), out, scale)),
    )
