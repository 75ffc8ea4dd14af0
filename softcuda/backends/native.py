"""The native CPU kernel layer: C++ on a pool of threads, compiled once per machine and cached.

Why not numpy on Python threads (what cpu_threads did first): a Python worker must wake and take
the GIL to start its piece, so a hand-off costs tens of microseconds and pieces had to be
megabytes; PyTorch hands 32 K-element grains to native threads, and was 3-18x faster on the same
cores from 2^18 to 2^23 elements.  Why not numba: without Intel's SVML (not on the GPU machine,
nor on a plain pip install) its exp and tanh call libm per element, 5-15x slower than numpy's
own vectorized loops; and its default thread layer aborts when two Python threads run parallel
code at once.  docs/design.md ("The native CPU kernels") gives the measurements.

So: ``kernels/cpu.cpp`` (loops written to vectorize, float32 exp/log/tanh as polynomials) plus
one functor per registry op, made from the op's own C++ expression (``ops.OpDef.cuda``, the
expression the CUDA kernels compile), and the entry points instantiated from them.  The source
is compiled by the machine's C++ compiler (``$CXX``, else c++, g++ or clang++) with
``-O3 -march=native -fopenmp-simd -fno-math-errno -fno-trapping-math -pthread`` into
``<cache>/cpu-<hash>.so``, where the hash covers the source, the compiler's identity and the
flags; a second process loads it without compiling.  The cache
folder is ``$SOFTCUDA_CACHE``, else ``$XDG_CACHE_HOME/softcuda``, else ``~/.cache/softcuda``.

Where the library cannot be had (no compiler, a compile error, a cache folder that cannot be
written) ``library()`` returns None and ``unavailable()`` says why in one sentence; cpu_threads
then runs cpu_fallback's one-thread kernels, warns once, and ``explain()`` names them.
``SOFTCUDA_NATIVE=0`` turns the layer off on purpose (the same fallback).

Threads: the kernels' own pool (kernels/cpu.cpp), not OpenMP's.  Work is cut into chunks that
threads claim, each its own first (so a chunk stays on one core's cache from call to call),
then any left; the calling thread is one of them and never waits for a worker that has not
started: OpenMP's static teams made every op wait for its slowest thread, and on a virtual
machine a sleeping thread's core took up to a millisecond to wake, or several where another
library's threads (BLAS's after a matmul) held the cores; an op then ran 10-20x slower than on
one core (docs/design.md, "One thread budget").  Idle workers spin 200 us, then sleep.  A child
process forked after the kernels ran on threads runs them on one thread (the pool's threads do
not survive a fork).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from ..ops import OPS, collapse_dims, heavy, ops_of, split_axis

WEIGHT = 8
"""How many simple ops a heavy op's element (``ops.heavy``) counts as: its threads start at
that fraction of the grain."""

_DIR = Path(__file__).parent / "kernels"
_TYPES = (("float", "f32"), ("double", "f64"))
_FLAGS = (
    "-O3",
    "-march=native",
    "-fopenmp-simd",
    "-pthread",
    "-fPIC",
    "-shared",
    "-std=c++17",
    "-fno-math-errno",
    # Floating-point exceptions are never read here; under gcc's default (trapping math) a
    # compare or a division may trap, so a select over them is not run on every lane, and
    # without AVX-512's masks no loop holding exp, tanh or sigmoid vectorized (gcc 12, AVX2).
    # NaN and infinities are kept as they are.
    "-fno-trapping-math",
    # Where the machine has AVX-512, loops use it: gcc's tuning for Intel's server cores
    # (Sapphire Rapids, the H100 host's) prefers 256-bit vectors, where AMD's Zen 4 gets 512;
    # exp and sigmoid, compute-bound, ran 1.3 to 1.7 times PyTorch's CPU time on that host
    # (results/nvidia-h100/vs-torch.txt), PyTorch's own kernels using AVX-512.  No effect
    # without AVX-512.
    "-mprefer-vector-width=512",
)
# retried without these where the compiler refuses them (the simd hints only speed up sums)
_OPTIONAL = ("-march=native", "-fopenmp-simd", "-mprefer-vector-width=512")


def weight(op: str) -> int:
    """How many simple ops one element of ``op`` counts as, for choosing its threads (a
    softmax row's element as a heavy op's: its kernel counts it so, ``sc_softmax``)."""
    if OPS[op].family == "softmax":
        return WEIGHT
    return WEIGHT if heavy(op) else 1


def source() -> str:
    """kernels/cpu.cpp as it is compiled: the math header and the file, then a functor per unary
    and binary op from its registry expression (``functors``), and the entry points (float32
    and float64) for every op."""
    parts = [(_DIR / name).read_text(encoding="utf-8") for name in ("cpu_math.hpp", "cpu.cpp")]
    parts.append(functors())
    parts.append(
        "template <class F> struct SC_Lift { template <class T> SC_INLINE T f(T x, T y) "
        "{ return F::f(x, T(0)); } };"
    )
    for name in ops_of("unary") + ("pow",):
        for ctype, sfx in _TYPES:
            parts.append(
                f'extern "C" void sc_{name}_{sfx}(const {ctype}* a, {ctype}* out, i64 n, '
                f"double s, int most) {{ sc_unary<SC_U_{name}, {ctype}>(a, out, n, ({ctype})s, "
                f"most, {weight(name)}); }}"
            )
            if name != "pow":
                parts.append(
                    f'extern "C" void sc_{name}_{sfx}_rows(const {ctype}* a, {ctype}* out, '
                    f"int ndim, const i64* shape, const i64* sa, int most) {{ "
                    f"sc_binary_rows<SC_Lift<SC_U_{name}>, {ctype}>(a, a, out, ndim, shape, sa, "
                    f"sa, most); }}"
                )
    for name in ops_of("binary"):
        for ctype, sfx in _TYPES:
            parts.append(
                f'extern "C" void sc_{name}_{sfx}(const {ctype}* a, const {ctype}* b, '
                f"{ctype}* out, i64 n, double s, int mode, int most) {{ "
                f"sc_binary<SC_B_{name}, {ctype}>(a, b, out, n, ({ctype})s, mode, most); }}"
            )
            parts.append(
                f'extern "C" void sc_{name}_{sfx}_rows(const {ctype}* a, const {ctype}* b, '
                f"{ctype}* out, int ndim, const i64* shape, const i64* sa, const i64* sb, "
                f"int most) {{ sc_binary_rows<SC_B_{name}, {ctype}>(a, b, out, ndim, shape, sa, "
                f"sb, most); }}"
            )
    for ctype, sfx in _TYPES:
        parts.append(
            f'extern "C" void sc_reduce_{sfx}(const {ctype}* x, {ctype}* out, i64 outer, i64 len, '
            f"i64 inner, int op, int most) {{ sc_reduce(x, out, outer, len, inner, op, most); }}"
        )
        for name, log in (("softmax", "false"), ("log_softmax", "true")):
            parts.append(
                f'extern "C" void sc_{name}_{sfx}(const {ctype}* x, {ctype}* out, i64 outer, '
                f"i64 len, i64 inner, int most) {{ sc_softmax<{ctype}, {log}>(x, out, outer, "
                f"len, inner, most); }}"
            )
    return "\n".join(parts) + "\n"


def functors() -> str:
    """One functor per unary op (``SC_U_<op>::f(x, s)``, pow's exponent as ``s``) and per binary
    op (``SC_B_<op>::f(x, y)``), each the op's registry expression: what both the library's
    entry points and the fused kernels (native_fused.py) compute an op with."""
    parts = []
    for name in ops_of("unary") + ("pow",):
        expr = "sc_pow(x, s)" if name == "pow" else OPS[name].cuda
        parts.append(
            f"struct SC_U_{name} {{ template <class T> SC_INLINE T f(T x, T s) "
            f"{{ (void)s; return {expr}; }} }};"
        )
    for name in ops_of("binary"):
        parts.append(
            f"struct SC_B_{name} {{ template <class T> SC_INLINE T f(T x, T y) "
            f"{{ return {OPS[name].cuda}; }} }};"
        )
    return "\n".join(parts)


def cache_dir() -> Path:
    """Where compiled kernels are kept (see the module's docstring)."""
    if os.environ.get("SOFTCUDA_CACHE"):
        return Path(os.environ["SOFTCUDA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "softcuda"


def compiler() -> str | None:
    """The C++ compiler: ``$CXX`` as given, else the first of c++, g++, clang++ on the PATH."""
    if os.environ.get("CXX"):
        return os.environ["CXX"]
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


_lock = threading.Lock()
_state: dict[str, object] = {}


def unavailable() -> str | None:
    """Why the native kernels cannot run here (one sentence), or None once they loaded."""
    library()
    reason = _state.get("reason")
    return str(reason) if reason else None


def compile_seconds() -> float:
    """What compiling native code cost this process: the library, and fused kernels' libraries
    (0 where everything came from the cache)."""
    library()
    return float(_state.get("compile_s", 0.0))  # type: ignore[arg-type]


def library() -> ctypes.CDLL | None:
    """The compiled kernels, loaded once per process (compiled first where not cached), or None
    where they cannot be had (``unavailable()`` says why)."""
    with _lock:
        if "lib" not in _state:
            _state["lib"], _state["reason"] = _load()
        return _state["lib"]  # type: ignore[return-value]


def _load() -> tuple[ctypes.CDLL | None, str | None]:
    if os.environ.get("SOFTCUDA_NATIVE", "1") == "0":
        return None, "SOFTCUDA_NATIVE=0 turns the native CPU kernels off"
    cxx = compiler()
    if cxx is None:
        return None, "no C++ compiler was found ($CXX, c++, g++ or clang++) to build them"
    text = source()
    identity = _state["identity"] = _identity(cxx)
    if identity is None:
        return None, f"the C++ compiler {cxx} did not run"
    key = hashlib.sha256("\0".join((text, identity, " ".join(_FLAGS))).encode()).hexdigest()[:16]
    folder = cache_dir()
    target = folder / f"cpu-{key}.so"
    if not target.exists():
        target, reason, _ = _build(cxx, text, folder, target)
        if reason:
            return None, reason
    lib, reason = open_built(target, "the compiled kernels")
    if lib is None:
        return None, reason
    _declare(lib)
    return lib, None


def _identity(cxx: str) -> str | None:
    try:
        done = subprocess.run(
            [cxx, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _build(
    cxx: str, text: str, folder: Path, target: Path, what: str = "them"
) -> tuple[Path, str | None, bool]:
    """Compile ``text`` into ``target`` (written whole or not at all): (the file to load, None,
    False), or (target, the reason it failed, whether the compiler ran and refused the code
    itself: ``refuses_code``; a machine's trouble, a timeout, a full disk, a killed compiler,
    is not that).  Where the cache cannot be written (a read-only home), the library is built
    in a temporary folder for this process alone, said once: the file returned is then
    there, and ``open_built`` removes the folder once loaded."""
    kept = True
    try:
        folder.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="build-", dir=folder))
    except OSError as e:
        try:
            work = Path(tempfile.mkdtemp(prefix="softcuda-build-"))
        except OSError as again:
            return (
                target,
                (
                    f"the kernel cache {folder} cannot be written ({e.strerror or e}), nor a "
                    f"temporary folder ({again.strerror or again})"
                ),
                False,
            )
        kept = False
        unkept = (
            f"softcuda: the kernel cache {folder} cannot be written ({e.strerror or e}): native "
            "kernels are compiled for this process only (set SOFTCUDA_CACHE to a writable folder "
            "to keep them)"
        )
    handed = False
    try:
        src = work / "cpu.cpp"
        src.write_text(text, encoding="utf-8")
        flags = list(_FLAGS)
        start = time.perf_counter()
        for drop in ((), ("-mprefer-vector-width=512",), ("-march=native",), _OPTIONAL):
            use = [f for f in flags if f not in drop]
            done = subprocess.run(
                [cxx, *use, str(src), "-o", str(work / "cpu.so")],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if done.returncode == 0:
                break
        else:
            said = f"{cxx} could not compile {what} ({first_error(done.stderr)})"
            return target, said, refuses_code(done.returncode, done.stderr)
        _state["compile_s"] = float(_state.get("compile_s", 0.0)) + time.perf_counter() - start
        if not kept:
            _say_once(unkept)
            with _lock_temporary:
                _temporary.add(work)
            handed = True
            return work / "cpu.so", None, False
        os.replace(work / "cpu.so", target)
        return target, None, False
    except subprocess.TimeoutExpired:
        return target, f"{cxx} took more than 600 s to compile {what}", False
    except (OSError, subprocess.SubprocessError) as e:
        return target, f"building {what} in {folder} failed ({e})", False
    finally:
        if not handed:
            shutil.rmtree(work, ignore_errors=True)


_temporary: set[Path] = set()  # folders _build made for this process alone (open_built removes)
_lock_temporary = threading.Lock()
_ERROR_LINE = re.compile(r"\berror\b\s*:|:\s*error\b", re.IGNORECASE)
# what a compiler says when the machine, not the code, stopped it
_NOT_THE_CODE = (
    "no space left",
    "error writing",
    "cannot open output",
    "virtual memory exhausted",
    "out of memory",
    "killed",
)


def first_error(log: str) -> str:
    """A compiler's first error line (``path:line:col: error: ...``, not its last: that is
    often a caret or a count), or its first line; "no message" for none."""
    lines = [line.strip() for line in log.strip().splitlines() if line.strip()]
    errors = [line for line in lines if _ERROR_LINE.search(line)]
    return (errors or lines or ["no message"])[0]


def refuses_code(returncode: int, log: str) -> bool:
    """Whether a failed compile is the code's fault: the compiler exited by itself with an
    error line, and nothing in its output names the machine (a full disk, memory, a kill)."""
    if returncode <= 0:  # killed by a signal
        return False
    low = log.lower()
    return bool(_ERROR_LINE.search(log)) and not any(s in low for s in _NOT_THE_CODE)


def open_built(path: Path, what: str) -> tuple[ctypes.CDLL | None, str | None]:
    """Load a built library: (it, None) or (None, why).  One ``_build`` made for this process
    alone (in a temporary folder, the cache being read-only) has its folder removed once
    loaded; nothing else is removed."""
    try:
        return ctypes.CDLL(str(path)), None
    except OSError as e:
        return None, f"{what} {path} did not load ({e})"
    finally:
        with _lock_temporary:
            made = path.parent in _temporary
            _temporary.discard(path.parent)
        if made:
            shutil.rmtree(path.parent, ignore_errors=True)


def _say_once(message: str) -> None:
    """One warning per process for each message."""
    said = _state.setdefault("said", set())
    if message not in said:  # type: ignore[operator]
        said.add(message)  # type: ignore[union-attr]
        warnings.warn(message, RuntimeWarning, stacklevel=4)


_P = ctypes.c_void_p
_I = ctypes.c_int64
_N = ctypes.c_int
_D = ctypes.c_double


def _declare(lib: ctypes.CDLL) -> None:
    for _ctype, sfx in _TYPES:
        for name in ops_of("unary") + ("pow",):
            getattr(lib, f"sc_{name}_{sfx}").argtypes = [_P, _P, _I, _D, _N]
            if name != "pow":
                getattr(lib, f"sc_{name}_{sfx}_rows").argtypes = [_P, _P, _N, _P, _P, _N]
        for name in ops_of("binary"):
            getattr(lib, f"sc_{name}_{sfx}").argtypes = [_P, _P, _P, _I, _D, _N, _N]
            getattr(lib, f"sc_{name}_{sfx}_rows").argtypes = [_P, _P, _P, _N, _P, _P, _P, _N]
        getattr(lib, f"sc_reduce_{sfx}").argtypes = [_P, _P, _I, _I, _I, _N, _N]
        getattr(lib, f"sc_softmax_{sfx}").argtypes = [_P, _P, _I, _I, _I, _N]
        getattr(lib, f"sc_log_softmax_{sfx}").argtypes = [_P, _P, _I, _I, _I, _N]
        for fn in ("sc_reduce", "sc_softmax", "sc_log_softmax"):
            getattr(lib, f"{fn}_{sfx}").restype = None
    lib.sc_after_fork.restype = None
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lib.sc_after_fork)
    lib.sc_chunk_count.argtypes = [_I, _I, _N]
    lib.sc_chunk_count.restype = _I
    lib.sc_set_grain.argtypes = [_I]
    lib.sc_set_grain.restype = _I
    lib.sc_pool_ready.argtypes = [_N, _N]
    lib.sc_pool_ready.restype = _N


def set_grain(elements: int) -> int:
    """Set the work (in one-flop elements) each thread must have before a kernel uses another
    one, and return the last value; 0 where the library is unavailable.  Tests lower it so
    that small arrays run on several threads; the kernels' own value is PyTorch's grain."""
    lib = library()
    return int(lib.sc_set_grain(elements)) if lib is not None else 0


def chunks(work: int, items: int, threads: int) -> int:
    """How many chunks (so, at most, threads) a kernel of ``work`` one-flop elements over
    ``items`` items runs in, by the library's rule; 1 where the library is unavailable."""
    lib = library()
    return int(lib.sc_chunk_count(work, max(1, items), threads)) if lib is not None else 1


def team(work: int, items: int, threads: int) -> int:
    """How many of at most ``threads`` threads a kernel of ``work`` one-flop elements over
    ``items`` items runs on (``chunks``, a thread taking several): 1 where it runs alone.
    What the sweep wakes the pool for before a timed call, and a plan before its CPU steps."""
    return min(threads, chunks(work, items, threads))


def ready(threads: int, wait_us: int = 2000) -> int:
    """Wake the kernels' pool and wait until ``threads`` threads take part in one job (at most
    ``wait_us``), so that the next kernel finds them spinning; how many did (1 where the
    library is unavailable or one thread is asked).  The sweep's timed calls of cpu_threads
    plans come right after it (``sweep.measure``)."""
    lib = library()
    return int(lib.sc_pool_ready(threads, wait_us)) if lib is not None else 1


def wake(threads: int) -> None:
    """Wake the pool's sleeping threads (up to ``threads``, the caller one of them) and return
    at once: they spin for the pool's spin time from when they wake.  A plan calls it just
    before it waits for the GPU where pooled CPU steps come next (``bind``), so that the
    wake-up (``extra/pool_states.py`` times it) passes while the GPU works.  It is ``ready``
    without the wait: a job of no work that the caller finishes alone, which every thread of
    the team is woken for."""
    lib = library()
    if lib is not None and threads > 1:
        lib.sc_pool_ready(threads, 0)


def warn_once() -> None:
    """One warning per process where the native kernels are unavailable (the reason)."""
    reason = unavailable()
    if reason and not _state.get("warned"):
        _state["warned"] = True
        warnings.warn(
            f"softcuda: cpu_threads runs cpu_fallback's one-thread kernels: {reason}",
            RuntimeWarning,
            stacklevel=3,
        )


def _forget() -> None:
    """Drop what this process knows (tests build and load under other settings)."""
    with _lock:
        _state.clear()


if sys.platform == "win32":  # pragma: no cover - the build uses a POSIX toolchain
    _state["lib"], _state["reason"] = None, "the native CPU kernels are not built on Windows"


# ---- kernels: a native entry point bound to a node's arrays ---------------------------------

_REDUCE_CODE = {"sum": 0, "mean": 1, "max": 2}
_MAX_DIMS = 8


def kernel(op: str, attrs: dict, inputs: list, out, threads: int):
    """A zero-argument callable running ``op`` on the native kernels into ``out`` with at most
    ``threads`` threads, or None where the library is unavailable or this layout is not one it
    covers (the caller then runs cpu_fallback's kernel).  Arrays are fixed here, as for every
    backend: the callable is the entry point with its pointers and sizes bound."""
    import numpy as np

    lib = library()
    if lib is None or out.dtype not in (np.float32, np.float64) or not out.flags.c_contiguous:
        return None
    sfx = "f32" if out.dtype == np.float32 else "f64"
    family = OPS[op].family
    if family == "reduce" or family == "softmax":
        return _along(lib, op, sfx, attrs, inputs[0], out, threads)
    if family in ("unary", "power"):
        x = inputs[0]
        s = float(attrs.get("exponent", 0.0))
        if x.shape == out.shape and x.flags.c_contiguous:
            fn = getattr(lib, f"sc_{op}_{sfx}")
            return _bound(fn, (x.ctypes.data, out.ctypes.data, out.size, s, threads), (x, out))
        if family == "power":
            return None
        return _rows(lib, f"sc_{op}_{sfx}_rows", [x], out, threads)
    if family == "binary":
        a, b = inputs
        fn = getattr(lib, f"sc_{op}_{sfx}")
        dense = [
            isinstance(v, np.ndarray) and v.shape == out.shape and v.flags.c_contiguous
            for v in (a, b)
        ]
        if dense[0] and dense[1]:
            args = (a.ctypes.data, b.ctypes.data, out.ctypes.data, out.size, 0.0, 0, threads)
        elif dense[0] and isinstance(b, np.generic):
            args = (a.ctypes.data, None, out.ctypes.data, out.size, float(b), 1, threads)
        elif dense[1] and isinstance(a, np.generic):
            args = (None, b.ctypes.data, out.ctypes.data, out.size, float(a), 2, threads)
        else:
            return _rows(lib, f"sc_{op}_{sfx}_rows", [a, b], out, threads)
        return _bound(fn, args, (a, b, out))
    return None


def _bound(fn, args: tuple, keep: tuple):
    """``fn(*args)``, holding ``keep`` (the arrays whose pointers ``args`` carries) alive.  The
    arguments are made ctypes objects of ``fn``'s argument types here, once: ctypes converts
    plain ints and floats on every call, which cost 0.7 us of a 1.7 us call of a 4,096-element
    add (1.0 us with the conversion done at bind time, numpy's own add 1.0 us)."""
    from functools import partial

    run = partial(fn, *as_ctypes(fn, args))
    run.arrays = keep  # type: ignore[attr-defined]
    return run


def as_ctypes(fn, args: tuple) -> tuple:
    """``args`` as instances of ``fn.argtypes`` (each argument converted once)."""
    return tuple(kind(value) for kind, value in zip(fn.argtypes, args, strict=True))


def _rows(lib, name: str, operands: list, out, threads: int):
    """An operand broadcast or strided: the rows entry point, with shapes and strides (in
    elements) collapsed where dims run on contiguously for every operand."""
    import numpy as np

    views = [np.broadcast_to(np.asarray(v, out.dtype), out.shape) for v in operands]
    if any(s % out.itemsize for v in views for s in v.strides):
        return None
    strides = [[s // out.itemsize for s in v.strides] for v in views]
    shape, strides = collapse_dims(out.shape, strides)
    if not shape or len(shape) > _MAX_DIMS or 0 in shape:
        return None
    dims = (ctypes.c_int64 * len(shape))(*shape)
    given = [(ctypes.c_int64 * len(shape))(*s) for s in strides]
    args = [*(v.ctypes.data for v in views), out.ctypes.data, len(shape), ctypes.addressof(dims)]
    args += [ctypes.addressof(g) for g in given]
    args.append(threads)
    return _bound(getattr(lib, name), tuple(args), (*views, out, dims, *given))


def _along(lib, op: str, sfx: str, attrs: dict, x, out, threads: int):
    """A reduction or softmax along one axis (or all): the input seen as (outer, len, inner).
    A transposed input whose axes can be put in memory order without reordering the outputs
    is reduced in that order; any other strided input returns None."""

    axis = attrs.get("axis")
    if axis is not None and axis < 0:  # graphs hold it normalized; a direct call may not
        axis += x.ndim
    if not x.flags.c_contiguous and op not in ("softmax", "log_softmax"):
        order = sorted(range(x.ndim), key=lambda d: -x.strides[d])
        kept = [d for d in order if d != axis]
        if axis is not None and kept != sorted(kept):
            return None
        x = x.transpose(order)
        axis = None if axis is None else order.index(axis)
        if not x.flags.c_contiguous:
            return None
    if not x.flags.c_contiguous:
        return None
    outer, length, inner = split_axis(x.shape, axis)
    if op in ("softmax", "log_softmax"):
        fn = getattr(lib, f"sc_{op}_{sfx}")
        args = (x.ctypes.data, out.ctypes.data, outer, length, inner, threads)
    else:
        fn = getattr(lib, f"sc_reduce_{sfx}")
        args = (x.ctypes.data, out.ctypes.data, outer, length, inner, _REDUCE_CODE[op], threads)
    return _bound(fn, args, (x, out))
