"""softcuda's own CUDA kernels: compile once, choose a variant at make time, launch prebound.

This is the only module that reads the ``.cu`` sources in ``kernels/``.  Each source is its own
``cupy.RawModule``, compiled the first time one of its kernels is needed in a process and kept:
a process that only adds never compiles a GEMM.  ``matmul.cu`` and ``softmax.cu`` have a
second build, with ``SC_TUNING`` defined, holding only the tuning variants; it is compiled only
when a benchmark or a test forces one of them, so a cold first sweep compiles no more than it
launches.

Every ``make_*`` function takes CuPy arrays (``make_binary`` also a numpy scalar as either
operand: a number passed to the kernel by value) and does all of the work up front: it checks
the dtype, picks the entry point for the layout (contiguous and 16-byte aligned, one-element
operand, number, strided, transposed matmul operand, ...), computes the grid, uploads any
shape/stride metadata to the device and allocates any scratch buffer.  It returns ``run()``, a
zero-argument callable that only launches the kernel(s) on the current CuPy stream.  ``run()``
reads the input arrays' memory at launch time, so new values written into the same arrays are
picked up; the arrays (and their strides) must stay the ones given to ``make_*``.

Invariants the caller upholds (the graph executor has checked them before calling):
    * all arrays are float32 or all float64, on the current device;
    * shapes are valid (broadcast shapes, reduction axis, matmul inner dims);
    * ``out`` is C-contiguous and freshly allocated; it may hold garbage, every element is written.

CuPy is imported lazily inside functions: importing this module needs only the standard
library and numpy, and ``source_hash()`` works without CuPy.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..ops import OPS, collapse_dims, ops_of, split_axis

__all__ = [
    "source_hash",
    "elementwise_source",
    "compile_builds",
    "make_binary",
    "make_unary",
    "make_copy",
    "make_power",
    "make_softmax",
    "make_reduce",
    "make_matmul",
    "BINARY_OPS",
    "UNARY_OPS",
    "REDUCE_OPS",
    "MATMUL_VARIANTS",
]

# The entry points elementwise.cu and reduce.cu define, read off the op registry: binary and
# unary kernels are named after their op (pow's is binary: the exponent is its second operand).
BINARY_OPS = ops_of("binary")
UNARY_OPS = ops_of("unary")
REDUCE_OPS = ops_of("reduce")
_BINARY_KERNELS = (*BINARY_OPS, *ops_of("power"))
MATMUL_VARIANTS = ("naive", "tiled")

_KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
_SOURCES = ("elementwise.cu", "reduce.cu", "matmul.cu", "softmax.cu")
_THREADS = 256  # block size of every 1-D kernel; the reduce kernels assume exactly this
_MAX_DIMS = 16  # SC_MAX_DIMS in elementwise.cu (after merging dims)
_VEC_BYTES = 16  # float4 / double2 accesses
_MM_THREADS = 256  # GEMM_THREADS in matmul.cu
# float32 matmul takes 64x64 tiles when 128x128 ones give fewer blocks than this many per SM.
_SMALL_TILE_BELOW = 1.0

# Tiled matmul configurations: name part in matmul.cu -> block tile edge (BM = BN).
_MM_TILE = {"_big": 128, "_small": 64}
# Row-major a @ b (layout kn) candidates for the "_big" slot (all 128x128 tiles, matmul.cu):
# _sw skewed transposed A stores, _pf loads overlapped with the multiply, _pfsw both, _pfkt
# overlapped loads with row-fastest A vectors, _pf8 overlapped loads at BK 8.
_MM_KN_ONLY = ("_sw", "_pf", "_pfsw", "_pfkt", "_pf8", "_u2")
# The configuration make_matmul uses for layout kn where it would use "_big", chosen by
# benchmarks/kernels_gpu.py (float32, TF32 off, fraction of cuBLAS at large n): the variants
# that overlap the loads with the multiply (_pf*) beat _big and _sw, _pf and _pfsw most.  _pfsw
# edges out _pf but spills at the 128-register cap, so the default is _pf, which does not spill.
_MM_KN_BIG = "_pf"
# The configurations of matmul.cu's production build; every other one is a tuning variant.
_MM_BUILT = ("_big", "_small", _MM_KN_BIG)
_MM_TILE_F64 = 64

# Build name -> (source file, extra NVRTC options).
_BUILDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "elementwise": ("elementwise.cu", ()),
    "reduce": ("reduce.cu", ()),
    "matmul": ("matmul.cu", ()),
    "matmul_tuning": ("matmul.cu", ("-DSC_TUNING",)),
    "softmax": ("softmax.cu", ()),
    "softmax_tuning": ("softmax.cu", ("-DSC_TUNING",)),
}

# The builds a sweep or a graph launches (everything but the tuning variants).
PRODUCTION_BUILDS = ("elementwise", "reduce", "matmul", "softmax")

_locks = {build: threading.Lock() for build in _BUILDS}  # one per build: they compile side by side
_modules: dict[str, Any] = {}
_props: dict[str, int] = {}

Launch = Callable[[], None]


# ----------------------------------------------------------------------------- sources


def elementwise_source() -> str:
    """elementwise.cu as it is compiled: the file, then what the registry adds to it -- for
    each unary op a functor whose body is the entry's CUDA expression (``ops.OpDef.cuda``),
    instantiated in float32 and float64 by the file's SC_UNARY macro, which names the entry
    points after the op.  (The binary functors are the file's own, in SC_ALL_FOR.)"""
    parts = [
        (_KERNEL_DIR / f).read_text(encoding="utf-8") for f in ("cuda_math.cuh", "elementwise.cu")
    ]
    for name in UNARY_OPS:
        if not OPS[name].cuda:
            raise ValueError(f"unary op {name!r} has no CUDA expression in the registry")
        parts.append(
            f"struct SC_OP_{name} {{ template <class T> __device__ static T f(T x) "
            f"{{ return {OPS[name].cuda}; }} }};"
        )
        for ctype, suffix in (("float", "f32"), ("double", "f64")):
            parts.append(f"SC_UNARY({name}, SC_OP_{name}, {ctype}, {suffix})")
    return "\n".join(parts) + "\n"


def reduce_helpers() -> str:
    """reduce.cu's device templates (block and warp reductions, the fold of partials), without
    its entry points: what softmax.cu and the fused kernels build on."""
    text = (_KERNEL_DIR / "reduce.cu").read_text(encoding="utf-8")
    return text[: text.index("#define SC_RED(")]


def _source_text(name: str) -> str:
    """One of _SOURCES as it is compiled: elementwise.cu with the registry's ops added,
    softmax.cu after the math and reduce.cu's device templates it calls."""
    if name == "elementwise.cu":
        return elementwise_source()
    text = (_KERNEL_DIR / name).read_text(encoding="utf-8")
    if name == "softmax.cu":
        math = (_KERNEL_DIR / "cuda_math.cuh").read_text(encoding="utf-8")
        return "\n".join((math, reduce_helpers(), text))
    return text


def _read_sources() -> list[bytes]:
    return [_source_text(name).encode() for name in _SOURCES]


def source_hash() -> str:
    """sha256 (hex) over the .cu sources as compiled (elementwise.cu with the registry's CUDA
    expressions), in a fixed order; changes whenever a kernel changes."""
    h = hashlib.sha256()
    for name, data in zip(_SOURCES, _read_sources(), strict=True):
        # Length-prefix each part so moving text between files changes the hash.
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _get_module(build: str) -> Any:
    """The compiled RawModule of one build (a key of _BUILDS), built once per process."""
    mod = _modules.get(build)
    if mod is None:
        with _locks[build]:
            mod = _modules.get(build)
            if mod is None:
                import cupy

                source, defines = _BUILDS[build]
                code = _source_text(source)
                mod = cupy.RawModule(code=code, options=("-std=c++17", *defines))
                mod.compile()  # compile now, not at the first launch inside someone's timing
                _modules[build] = mod
    return mod


def _kernel(build: str, name: str) -> Any:
    return _get_module(build).get_function(name)


def compile_builds(builds: Sequence[str] = PRODUCTION_BUILDS) -> float:
    """Compile these builds now, each in its own thread, and return the seconds it took.

    NVRTC compiles them side by side in much less time than one after another
    (benchmarks/compile_time.py; results/nvidia-h200/compile-time.txt).  A sweep calls this
    before it settles, so that no compile lands in its timings or its settling windows.
    A build already compiled costs nothing; a compile error is raised here.
    """
    started = time.perf_counter()
    todo = [b for b in builds if b not in _modules]
    if todo:
        with ThreadPoolExecutor(max_workers=len(todo)) as pool:
            list(pool.map(_get_module, todo))  # re-raises the first compile error
    return time.perf_counter() - started


def _sm_count() -> int:
    import cupy

    dev = cupy.cuda.Device()
    key = f"sm{dev.id}"
    if key not in _props:
        _props[key] = int(dev.attributes["MultiProcessorCount"])
    return _props[key]


# ----------------------------------------------------------------------------- helpers


def _suffix(*arrays: Any) -> str:
    dtype = arrays[0].dtype
    for a in arrays:
        if a.dtype != dtype:
            raise TypeError(f"all arrays must share one dtype, got {a.dtype} and {dtype}")
    if dtype == np.float32:
        return "f32"
    if dtype == np.float64:
        return "f64"
    raise TypeError(f"only float32 and float64 are supported, got {dtype}")


def _aligned(*arrays: Any) -> bool:
    return all(a.data.ptr % _VEC_BYTES == 0 for a in arrays)


def _elem_strides(a: Any) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


def _grid_1d(work_items: int) -> int:
    """Blocks for a grid-stride loop over `work_items`: one full-occupancy wave at most.

    2048 resident threads per SM on sm_90 -> 8 blocks of 256; more blocks would only queue.
    """
    return max(1, min(-(-work_items // _THREADS), _sm_count() * (2048 // _THREADS)))


def _broadcast_strides(a: Any, out_shape: tuple[int, ...]) -> list[int]:
    """Element strides of `a` broadcast to out_shape (0 where a has size 1 or no dim)."""
    pad = len(out_shape) - a.ndim
    strides = [0] * pad
    for size, st in zip(a.shape, _elem_strides(a), strict=True):
        strides.append(0 if size == 1 else st)
    return strides


def _upload_meta(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> Any:
    import cupy

    if len(shape) > _MAX_DIMS:
        raise ValueError(f"at most {_MAX_DIMS} non-mergeable dims are supported, got {len(shape)}")
    flat = list(shape)
    for s in strides:
        flat.extend(s)
    return cupy.asarray(np.asarray(flat, dtype=np.int64))


def _launcher(kernel: Any, grid: tuple[int, ...], block: tuple[int, ...], args: tuple) -> Launch:
    """Bind everything now; the returned run() is one RawKernel call on the current stream."""

    def run() -> None:
        kernel(grid, block, args)

    # Keep the arrays (inputs, scratch, metadata) alive as long as run() is.
    run.keepalive = args  # type: ignore[attr-defined]
    return run


def _sequence(*steps: Launch) -> Launch:
    def run() -> None:
        for step in steps:
            step()

    run.keepalive = steps  # type: ignore[attr-defined]
    return run


# ----------------------------------------------------------------------------- elementwise


def make_binary(op: str, a: Any, b: Any, out: Any) -> Launch:
    """out = a <op> b with numpy broadcasting of a and b to out.shape (op: add, sub, mul, div,
    pow).  Either operand, not both, may be a numpy scalar of out's dtype instead of an array:
    a constant of the graph, which no run copies to the device.

    Paths: a number and a contiguous array of out's size -> value_a/value_b, the number a kernel
    argument (16-byte vectors when the array and out are aligned); both operands contiguous with
    out's size -> contig (vectors when a, b and out are aligned); one operand a single element
    and the other contiguous -> scalar_a/scalar_b; otherwise the general strided kernel (stride
    0 on broadcast dims), where a number becomes a one-element device array made here, once.
    """
    if op not in _BINARY_KERNELS:
        raise ValueError(f"unknown binary op {op!r}; expected one of {_BINARY_KERNELS}")
    a_value, b_value = isinstance(a, np.generic), isinstance(b, np.generic)
    if a_value and b_value:
        raise ValueError(f"binary {op}: at most one operand may be a number, got {a!r} and {b!r}")
    suf = _suffix(a, b, out)
    n = int(out.size)
    n64 = np.int64(n)
    a_full = not a_value and a.size == n and a.flags.c_contiguous
    b_full = not b_value and b.size == n and b.flags.c_contiguous
    if a_value and b_full:
        vec = _aligned(b, out)
        mode = "value_a_vec" if vec else "value_a"
    elif b_value and a_full:
        vec = _aligned(a, out)
        mode = "value_b_vec" if vec else "value_b"
    elif a_full and b_full:
        vec = _aligned(a, b, out)
        mode = "contig_vec" if vec else "contig"
    elif a.size == 1 and b_full:
        vec = _aligned(b, out)
        mode = "scalar_a_vec" if vec else "scalar_a"
    elif b.size == 1 and a_full:
        vec = _aligned(a, out)
        mode = "scalar_b_vec" if vec else "scalar_b"
    else:
        if a_value or b_value:  # the strided kernel reads both operands from device memory
            import cupy

            if a_value:
                a = cupy.full((), a, dtype=a.dtype)
            else:
                b = cupy.full((), b, dtype=b.dtype)
        shape, (sa, sb) = collapse_dims(
            out.shape, [_broadcast_strides(a, out.shape), _broadcast_strides(b, out.shape)]
        )
        meta = _upload_meta(shape, [sa, sb])
        kern = _kernel("elementwise", f"binary_{op}_strided_{suf}")
        args = (a, b, out, n64, np.int32(len(shape)), meta)
        return _launcher(kern, (_grid_1d(n),), (_THREADS,), args)
    per_thread = (_VEC_BYTES // out.itemsize) if vec else 1
    kern = _kernel("elementwise", f"binary_{op}_{mode}_{suf}")
    return _launcher(kern, (_grid_1d(-(-n // per_thread)),), (_THREADS,), (a, b, out, n64))


def _make_unary_any(op: str, a: Any, out: Any) -> Launch:
    suf = _suffix(a, out)
    n = int(out.size)
    n64 = np.int64(n)
    if a.flags.c_contiguous:
        vec = _aligned(a, out)
        kern = _kernel("elementwise", f"unary_{op}_{'contig_vec' if vec else 'contig'}_{suf}")
        per_thread = (_VEC_BYTES // out.itemsize) if vec else 1
        return _launcher(kern, (_grid_1d(-(-n // per_thread)),), (_THREADS,), (a, out, n64))
    shape, (sa,) = collapse_dims(a.shape, [list(_elem_strides(a))])
    meta = _upload_meta(shape, [sa])
    kern = _kernel("elementwise", f"unary_{op}_strided_{suf}")
    args = (a, out, n64, np.int32(len(shape)), meta)
    return _launcher(kern, (_grid_1d(n),), (_THREADS,), args)


def make_unary(op: str, a: Any, out: Any) -> Launch:
    """out = op(a) elementwise, op one of UNARY_OPS (the registry's unary ops).

    a has out's shape with any strides. relu propagates NaN; sigmoid never overflows; step
    gives 0 for NaN.
    """
    if op not in UNARY_OPS:
        raise ValueError(f"unknown unary op {op!r}; expected one of {UNARY_OPS}")
    return _make_unary_any(op, a, out)


def make_power(a: Any, exponent: float, out: Any) -> Launch:
    """out = a ** exponent: the binary pow kernel, its exponent a number of out's dtype (passed
    by value where a is contiguous; make_binary says how otherwise)."""
    return make_binary("pow", a, out.dtype.type(exponent), out)


# One pass suits any row the GPU can spread: a few very long rows (a softmax over everything)
# would sit on a few SMs, and a few columns on a few threads; those keep the composed launches,
# whose reductions spread one row over many blocks.
# a row this long or shorter is one block's work, however few: one block took 129 us over a
# row of 2^16 on the H100 (the composed launches about 20), 17 us over 2^13
_SOFTMAX_ONE_ROW_MAX = 8192
_SOFTMAX_MIN_COLUMNS = 16384  # columns (one thread each) that fill an H100/H200's SMs


def make_softmax(
    a: Any, out: Any, axis: int | None, log: bool = False, scale: float = 1.0
) -> Launch:
    """out = exp(a - max) / sum(exp(a - max)) along ``axis`` (None: everything); ``log``:
    log_softmax, (a - max) - log(sum(exp(a - max))); of ``a * scale`` where ``scale`` is not
    1, the product rounded as the mul kernel rounds it (softmax.cu multiplies as it reads; the
    composed launches multiply into a scratch array first).

    Along rows (the last axis, contiguous) one warp per row (one block per row for rows of
    2048 or more, or too few rows to fill the GPU by warps), along another axis one thread
    per column: softmax.cu's one pass.  A row of up to 1,024 (warp) or 8,192 elements (block)
    is held in registers, read once and exp taken once an element (``_held``); float32 rows of
    2,048 to 4,096 read and write 16 bytes at a time (``_vec4_rows``).  A few very
    long rows, or a few columns, keep the composed launches (``_softmax_composed``).  A
    strided ``a`` is copied first."""
    import cupy

    if out.size == 0:
        return _sequence()
    if axis is not None:
        axis %= a.ndim  # the composed launches' kept shape compares it with each dimension
    outer, red, inner = split_axis(a.shape, axis)
    sms = _sm_count()
    rows = inner == 1 and (outer >= sms or red <= _SOFTMAX_ONE_ROW_MAX)
    by = out.dtype.type(scale)
    if not rows and not (inner > 1 and outer * inner >= _SOFTMAX_MIN_COLUMNS):
        if scale == 1.0:
            return _softmax_composed(a, out, axis, log)
        scaled = cupy.empty(a.shape, dtype=out.dtype)
        first = make_binary("mul", a, by, scaled)
        return _sequence(first, _softmax_composed(scaled, out, axis, log))
    name = "log_softmax" if log else "softmax"
    suf = _suffix(a, out)
    steps: list[Launch] = []
    src = a
    if not a.flags.c_contiguous:
        src = cupy.empty(a.shape, dtype=a.dtype)
        steps.append(make_copy(a, src))
    if rows:
        if red >= 2048 or outer < 4 * sms:
            aligned = src.data.ptr % 16 == 0 and out.data.ptr % 16 == 0
            if _vec4_rows(red, out.dtype, aligned):
                kern = _kernel("softmax", f"{name}_rows_vec4_f32")
            else:
                held = _held(red, _THREADS, (16, 32))
                kern = _kernel("softmax", f"{name}_rows_block{held}_{suf}")
            grid = max(1, min(outer, 65535))
        else:
            held = _held(red, 32, (8, 32))
            kern = _kernel("softmax", f"{name}_rows_warp{held}_{suf}")
            grid = _grid_1d(outer * 32)
        args: tuple[Any, ...] = (src, out, np.int64(outer), np.int64(red), by)
    else:
        kern = _kernel("softmax", f"{name}_cols_{suf}")
        args = (src, out, np.int64(outer), np.int64(red), np.int64(inner), by)
        grid = _grid_1d(outer * inner)
    steps.append(_launcher(kern, (grid,), (_THREADS,), args))
    return _sequence(*steps)


def _vec4_rows(red: int, dtype: Any, aligned: bool) -> bool:
    """Whether block rows of ``red`` elements take softmax.cu's float4 kernel (256 threads of
    4 vectors): float32 rows of 2,048 to 4,096 elements, a multiple of 4, in arrays on 16-byte
    boundaries (so every row starts on one).  Where it was timed on the H100 it took 0.59-0.95
    of the scalar held kernel's time; shorter rows with few of them (block rows below 2,048)
    were not timed, and keep the scalar kernel."""
    return np.dtype(dtype) == np.float32 and 2048 <= red <= 4096 and red % 4 == 0 and aligned


def _held(red: int, width: int, ks: tuple[int, ...]) -> str:
    """The suffix of softmax.cu's kernel that holds a row of ``red`` elements in registers, K
    of them per thread of ``width`` (the smallest K of ``ks`` that fits), or "" for the online
    kernel that reads longer rows twice."""
    for k in ks:
        if red <= k * width:
            return f"_held{k}"
    return ""


def _softmax_composed(a: Any, out: Any, axis: int | None, log: bool) -> Launch:
    """make_softmax as this module's reduce and elementwise launches: the maximum, the sum and
    exp's result live in scratch arrays made here once; no launch writes an array it reads."""
    import cupy

    kept = tuple(1 if axis is None or i == axis else d for i, d in enumerate(a.shape))
    peak = cupy.empty(kept, dtype=out.dtype)
    total = cupy.empty(kept, dtype=out.dtype)
    powers = cupy.empty(out.shape, dtype=out.dtype)
    if log:
        shifted = cupy.empty(out.shape, dtype=out.dtype)
        logs = cupy.empty(kept, dtype=out.dtype)
        return _sequence(
            make_reduce("max", a, peak, axis, True),
            make_binary("sub", a, peak, shifted),
            make_unary("exp", shifted, powers),
            make_reduce("sum", powers, total, axis, True),
            make_unary("log", total, logs),
            make_binary("sub", shifted, logs, out),
        )
    return _sequence(
        make_reduce("max", a, peak, axis, True),
        make_binary("sub", a, peak, out),
        make_unary("exp", out, powers),
        make_reduce("sum", powers, total, axis, True),
        make_binary("div", powers, total, out),
    )


def make_copy(a: Any, out: Any) -> Launch:
    """out[...] = a: any-strided a of out's shape into C-contiguous out (reshape of a view)."""
    return _make_unary_any("copy", a, out)


# ----------------------------------------------------------------------------- reductions


def _mean_scale(op: str, count: int) -> np.float64:
    """What the summing kernels multiply their sum by: 1/count for mean, 1 for sum.  A mean of
    nothing is NaN, as numpy's is: 0 * NaN."""
    if op != "mean":
        return np.float64(1.0)
    return np.float64(1.0 / count if count > 0 else np.nan)


def make_reduce(op: str, a: Any, out: Any, axis: int | None, keepdims: bool) -> Launch:
    """out = op(a, axis=axis, keepdims=keepdims), op in sum, mean, max.

    axis None reduces everything (out is 0-d, or all ones with keepdims); an int (negative
    allowed) reduces one axis.  A non-contiguous `a` is first copied, at each run, into a scratch
    buffer allocated here once.  Sums (and means) accumulate in float64 for both dtypes; all
    partial results combine in a fixed order (no atomics), so results are deterministic.  The
    sum of nothing is 0 and its mean NaN, as in numpy.
    """
    import cupy

    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction {op!r}; expected one of {REDUCE_OPS}")
    suf = _suffix(a, out)
    kname = "max" if op == "max" else "sum"
    steps: list[Launch] = []
    src = a
    if not a.flags.c_contiguous:
        src = cupy.empty(a.shape, dtype=a.dtype)
        steps.append(make_copy(a, src))
    n = int(a.size)

    if axis is None or a.ndim == 0:
        scale = _mean_scale(op, n)
        vec = _aligned(src)
        per_thread = (_VEC_BYTES // a.itemsize) if vec else 1
        # Fixed by n alone (never by timing), so the combination order is reproducible.
        # Each stage-1 block sums >= 8 vectors per thread once n is large.
        blocks = max(1, min(-(-n // (_THREADS * per_thread * 8)), 8 * _sm_count(), 2048))
        part_dtype = np.float64 if op != "max" else a.dtype
        partials = cupy.empty(blocks, dtype=part_dtype)
        s1 = _kernel("reduce", f"reduce_all_stage1_{'vec_' if vec else ''}{kname}_{suf}")
        s2 = _kernel("reduce", f"reduce_all_stage2_{kname}_{suf}")
        steps.append(_launcher(s1, (blocks,), (_THREADS,), (src, np.int64(n), partials)))
        steps.append(_launcher(s2, (1,), (1024,), (partials, np.int32(blocks), out, scale)))
        return _sequence(*steps)

    outer, red, inner = split_axis(a.shape, axis)
    scale = _mean_scale(op, red)
    if inner == 1:
        if red >= 2048 or outer < 4 * _sm_count():
            # Long rows (or too few rows to fill the GPU by warps): a block per row.
            kern = _kernel("reduce", f"reduce_rows_block_{kname}_{suf}")
            grid = max(1, min(outer, 65535))
        else:
            kern = _kernel("reduce", f"reduce_rows_warp_{kname}_{suf}")
            grid = _grid_1d(outer * 32)
        args: tuple[Any, ...] = (src, np.int64(outer), np.int64(red), out, scale)
        steps.append(_launcher(kern, (grid,), (_THREADS,), args))
    else:
        steps.extend(_reduce_cols(kname, suf, src, outer, red, inner, out, scale, op != "max"))
    return _sequence(*steps)


_COL_LANES = 8  # SC_COL_LANES in reduce.cu: a column tile's block is 32 x _COL_LANES threads
_COL_ROWS = 16 * _COL_LANES  # the fewest rows a chunk takes: 16 loads per thread


def _reduce_cols(
    kname: str,
    suf: str,
    src: Any,
    outer: int,
    red: int,
    inner: int,
    out: Any,
    scale: Any,
    wide: bool,
) -> list[Launch]:
    """Reduce the middle axis of ``src`` viewed as (outer, red, inner), inner > 1.

    Tiles of 32 outputs by chunks of rows: enough chunks that the grid fills the GPU about
    four times over, each at least _COL_ROWS rows; several chunks leave partials (float64 for
    sums, ``wide``) that a second kernel folds in chunk order.  Fixed by the shape alone.
    """
    import cupy

    total = outer * inner
    if total == 0:
        return []  # nothing to write (a zero extent in the grid is an invalid launch)
    tiles = outer * -(-inner // 32)
    chunks = max(1, min(-(-4 * _sm_count() // tiles), -(-red // _COL_ROWS), 65535))
    rows = max(1, -(-red // chunks))
    chunks = max(1, -(-red // rows))  # no chunk left empty
    part_dtype = np.float64 if wide else out.dtype
    partials = cupy.empty(chunks * total if chunks > 1 else 1, dtype=part_dtype)
    tile = _kernel("reduce", f"reduce_cols_tile_{kname}_{suf}")
    args = (src, np.int64(red), np.int64(inner), np.int64(rows), partials, np.int64(total))
    steps = [_launcher(tile, (tiles, chunks), (32, _COL_LANES), (*args, out, scale))]
    if chunks > 1:
        fold = _kernel("reduce", f"reduce_cols_fold_{kname}_{suf}")
        fold_args = (partials, np.int32(chunks), np.int64(total), out, scale)
        steps.append(_launcher(fold, (_grid_1d(total),), (_THREADS,), fold_args))
    return steps


# ----------------------------------------------------------------------------- matmul


def _vec_ok(a: Any, contiguous_dim: int, other_dims: Sequence[int], extent: int) -> bool:
    """Can `a` be read in 16-byte vectors along `contiguous_dim` without straddling an edge?"""
    w = _VEC_BYTES // a.itemsize
    st = _elem_strides(a)
    return (
        st[contiguous_dim] == 1
        and extent % w == 0
        and all(st[d] % w == 0 for d in other_dims)
        and a.data.ptr % _VEC_BYTES == 0
    )


def _matmul_args(a: Any, b: Any, out: Any, m: int, n: int, k: int) -> tuple[Any, ...]:
    """The arguments every gemm entry point of matmul.cu takes: the arrays, the extents, and
    a's and b's element strides (row, column, batch; batch 0 where that operand broadcasts),
    so that any strided view runs without a copy."""
    sa = _elem_strides(a)
    sb = _elem_strides(b)
    sam, sak = sa[-2], sa[-1]
    sbk, sbn = sb[-2], sb[-1]
    sab = sa[0] if a.ndim == 3 and a.shape[0] != 1 else 0
    sbb = sb[0] if b.ndim == 3 and b.shape[0] != 1 else 0
    return (
        a,
        b,
        out,
        np.int32(m),
        np.int32(n),
        np.int32(k),
        np.int64(sam),
        np.int64(sak),
        np.int64(sab),
        np.int64(sbk),
        np.int64(sbn),
        np.int64(sbb),
    )


def _matmul_layouts(a: Any, b: Any, m: int, n: int, k: int) -> tuple[str, str]:
    """The letters of the tiled entry point for a's and b's layouts: the dim that 16-byte
    vectors can read ("k"/"m" for a, "n"/"k" for b), or "s" (general strides, scalar loads)."""
    a_batch = [0] if a.ndim == 3 else []
    b_batch = [0] if b.ndim == 3 else []
    if _vec_ok(a, a.ndim - 1, [a.ndim - 2, *a_batch], k):
        la = "k"
    elif _vec_ok(a, a.ndim - 2, [a.ndim - 1, *a_batch], m):
        la = "m"
    else:
        la = "s"
    if _vec_ok(b, b.ndim - 1, [b.ndim - 2, *b_batch], n):
        lb = "n"
    elif _vec_ok(b, b.ndim - 2, [b.ndim - 1, *b_batch], k):
        lb = "k"
    else:
        lb = "s"
    return la, lb


def _matmul_config(
    suf: str, _cfg: str | None, m: int, n: int, batch: int, la: str, lb: str
) -> tuple[str, int]:
    """The tiled configuration (name part in matmul.cu) and its block tile edge: float64 has
    one; float32 takes 64x64 tiles when 128x128 ones would leave SMs idle, and _MM_KN_BIG for
    row-major a and b; ``_cfg`` forces one.  ValueError for a forced one that does not exist
    for the layout (it would be a missing kernel at launch)."""
    if suf == "f64":
        cfg, tile = "_big", _MM_TILE_F64
    elif _cfg is not None:
        cfg = _cfg
        tile = _MM_TILE["_small" if cfg == "_small" else "_big"]
    else:
        # Too few 128x128 blocks to give every SM one: 64x64 tiles make four times as many blocks.
        blocks = -(-m // 128) * -(-n // 128) * batch
        cfg = "_small" if blocks < _SMALL_TILE_BELOW * _sm_count() else "_big"
        tile = _MM_TILE[cfg]
        if cfg == "_big" and la + lb == "kn":
            cfg = _MM_KN_BIG
    only_kn = cfg.startswith("_t") or cfg in _MM_KN_ONLY
    if (only_kn and la + lb != "kn") or (cfg == "_u1" and la + lb not in ("kn", "kk", "mk")):
        raise ValueError(f"tuning configuration {cfg} does not exist for layout {la}{lb}")
    return cfg, tile


def make_matmul(variant: str, a: Any, b: Any, out: Any, *, _cfg: str | None = None) -> Launch:
    """out = a @ b for (M,K)/(batch,M,K) by (K,N)/(batch,K,N), any element strides.

    A batch dim of size 1, or a 2-D operand against a 3-D one, broadcasts over the batch.
    variant "naive": one thread per output element.  variant "tiled": shared-memory tiles with
    register blocking; the entry point is chosen from a's and b's layouts (row-major, transposed,
    or general strides) so transposed views run without a copy; float32 uses 64x64 blocks
    instead of 128x128 when the larger ones would leave SMs idle.  `_cfg` forces a float32
    configuration ("_big", "_small", "_u1" for layouts kn/kk/mk, one of _MM_KN_ONLY for kn, or
    a "_t..." tuning variant for row-major a and b); it exists for the benchmark and tests.
    """
    if variant not in MATMUL_VARIANTS:
        raise ValueError(f"unknown matmul variant {variant!r}; expected one of {MATMUL_VARIANTS}")
    suf = _suffix(a, b, out)
    m, k = int(a.shape[-2]), int(a.shape[-1])
    n = int(b.shape[-1])
    batch = int(out.shape[0]) if out.ndim == 3 else 1
    if batch > 65535:
        raise ValueError(f"batch {batch} exceeds the grid's z limit of 65535")
    if out.size == 0:
        # Nothing to write, and a grid with a zero dimension is an invalid launch.  (k = 0 with
        # a non-empty out launches: every kernel writes its zero sums.)
        return _sequence()
    args = _matmul_args(a, b, out, m, n, k)
    if variant == "naive":
        kern = _kernel("matmul", f"gemm_naive_{suf}")
        grid = (-(-n // 32), -(-m // 8), batch)
        return _launcher(kern, grid, (32, 8), args)

    la, lb = _matmul_layouts(a, b, m, n, k)
    cfg, tile = _matmul_config(suf, _cfg, m, n, batch, la, lb)
    build = "matmul" if cfg in _MM_BUILT else "matmul_tuning"
    kern = _kernel(build, f"gemm_tiled_{la}{lb}{cfg}_{suf}")
    grid = (-(-n // tile), -(-m // tile), batch)
    return _launcher(kern, grid, (_MM_THREADS,), args)
