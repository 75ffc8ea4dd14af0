"""Fused groups on the CPU: one generated C++ kernel per group, on the native layer's threads.

A group (``softcuda.groups``: elementwise members, at most one reduction at the end) becomes one
loop that reads each input once at each element, computes every member in registers with the
same functors the one-op kernels use (``native.functors()``: the same bits, fused or not) and
writes the root once, or adds it up; a group of several heavy members (tanh, exp, sigmoid)
runs one loop per heavy member over tiles of 256 elements that stay in L1 (``stages``), so
that each loop's elements are independent again.  The walk is the group's, collapsed: a flat
walk of rows (the inner dimension a loop the compiler vectorizes, each input's inner stride 0,
1 or any, baked in), or for a reduction along an axis the input seen as (outer, len, inner).
Sums add every value in double (the one-op float32 sums add blocks of 256 in float first, for
speed; a group's arithmetic already costs more than the conversion).

Code: ``prepare`` takes every group a plan will bind, writes the kernels missing from this
process into one source, compiles it once (``native``'s compiler, flags and cache folder) into
``fused-<hash>.so``, keyed by the source, the compiler and the flags, and loads it; a second
process loads it without compiling.  A kernel depends on the arithmetic, the dtype and the walk's
form, never on the numbers (constants are arguments) or the sizes.  The kernels claim chunks
from the library's one pool (``sc_parallel``), so fused and one-op kernels never compete for the
cores; the chunk count is the library's rule (``sc_chunk_count``), fixed at bind.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import threading
from functools import partial

import numpy as np

from .. import groups as _groups
from . import native

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_TILE = 256
_P, _I, _N = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
_ARGS = [_P, _P, _P, _P, _I, _I, _N, _P, _P]
_VAR = re.compile(r"\bt[0-9]+\b")  # a statement's variable, where a sink reads it

_lock = threading.Lock()
_loaded: dict[str, object] = {}  # kernel key -> its ctypes function
_failed: dict[str, str] = {}  # kernel key -> why its build failed (not tried again)


def _stride_class(stride: int) -> str:
    return "0" if stride == 0 else "1" if stride == 1 else "r"


class Spec:
    """One group as its kernel walks it here: the arrays' strides collapsed, and the key of
    the code that walks them."""

    def __init__(
        self,
        group: _groups.Group,
        inputs: list[np.ndarray],
        out: np.ndarray,
        extras: list[np.ndarray] = (),  # type: ignore[assignment]
    ) -> None:
        self.group = group
        self.extras = list(extras)
        if len(self.extras) != len(group.extras):
            raise ValueError("a fused group's extra outputs and their arrays differ in number")
        self.ctype = _TYPES[np.dtype(out.dtype)]
        shape = group.shape
        item = out.itemsize
        strides = []
        for a in inputs:
            view = np.broadcast_to(a, shape)
            if any(s % item for s in view.strides):
                raise ValueError("an input's strides are not whole elements")
            strides.append(tuple(s // item for s in view.strides))
        self.inputs, self.out = inputs, out
        root = group.root
        self.reduce = root.op if group.reduce is not None else ""
        axis = root.attrs.get("axis") if self.reduce else None
        found = _groups.walk(shape, strides, axis)
        if found is None:
            raise ValueError("the reduction's walk does not collapse to (outer, len, inner)")
        self.form, self.dims, self.walks = found
        if self.form == "flat":  # a flat walk of rows, the inner one vectorized
            self.classes = tuple(_stride_class(w[-1]) for w in self.walks)
        elif self.dims[2] == 1:
            self.form = "rows"  # whole rows, along len
            self.classes = tuple(_stride_class(w[1]) for w in self.walks)
        else:
            self.form = "tiles"  # tiles of inner, len walked in each
            self.classes = tuple(_stride_class(w[2]) for w in self.walks)
        self.statements = _groups.statements(group)
        self.extra_vars = _groups.extra_variables(group)
        self.key = "g" + _groups.kernel_key(group, self.ctype, self.form, self.dims, self.classes)

    @property
    def work(self) -> int:
        """One-flop elements of work, for the chunk count: each heavy member counts several."""
        weight = sum(native.weight(op) for op in self.group.ops if op not in _groups.REDUCING)
        return self.group.size * max(1, weight)

    @property
    def items(self) -> int:
        """What chunks are cut from: elements (flat), rows, or tiles of inner columns."""
        if self.form == "flat":
            return int(np.prod(self.dims))
        outer, _, inner = self.dims
        return outer if self.form == "rows" else outer * -(-inner // _TILE)

    def meta(self) -> np.ndarray:
        """The walk, as the kernel reads it: the dims, then each input's strides."""
        values = list(self.dims)
        for w in self.walks:
            values += list(w)
        return np.array(values or [0], dtype=np.int64)


# ---- code -------------------------------------------------------------------------------------


def _call(op: str, args: tuple[str, ...]) -> str:
    from ..ops import OPS

    if OPS[op].family == "binary":
        return f"SC_B_{op}::f({args[0]}, {args[1]})"
    second = args[1] if len(args) > 1 else "T(0)"
    return f"SC_U_{op}::f({args[0]}, {second})"


def _body(spec: Spec, index: list[str]) -> tuple[str, str]:
    """The statements of one element (inputs read at ``index[k]``), and the value's name."""
    lines = [f"const T in{k} = a{k}[{index[k]}];" for k in range(len(spec.inputs))]
    for var, op, args in spec.statements:
        lines.append(f"const T {var} = {_call(op, args)};")
    last = spec.statements[-1][0] if spec.statements else "in0"
    return " ".join(lines), last


def _at(cls: str, var: str, k: int) -> str:
    return "0" if cls == "0" else var if cls == "1" else f"{var} * z{k}"


def stages(statements: list[tuple[str, str, tuple[str, ...]]]) -> list[list]:
    """The statements cut so that each part holds at most one heavy member (exp, tanh,
    sigmoid, log, pow): each part becomes its own loop over a tile of ``_TILE`` elements.

    Why: one loop computing tanh(tanh(tanh(tanh(x)))) makes every element a chain of four
    dependent polynomials and divisions, longer than the core's reorder window can overlap
    across elements; it ran 1.7x slower than four one-op passes (in cache, AVX-512 and AVX2
    alike).  One loop per heavy member over a tile that stays in L1 gives each loop independent
    elements again and keeps the fused kernel's one read and one write of memory."""
    parts: list[list] = [[]]
    heavy = False
    for statement in statements:
        is_heavy = native.weight(statement[1]) > 1
        if is_heavy and heavy:
            parts.append([])
            heavy = False
        parts[-1].append(statement)
        heavy = heavy or is_heavy
    return parts


def _loop(spec: Spec, lo: str, hi: str, index, sink: str, pragma: str = "") -> str:
    """A loop of j over [lo, hi) computing every statement at j (inputs read at
    ``index(j, k)``), then ``sink`` (which names the last value as ``{last}`` and may read
    any statement's variable); ``pragma`` adds clauses (a reduction) to the last loop's
    ``omp simd``.  Statements in several ``stages`` run as one loop per stage over tiles of
    ``_TILE``, the values one stage passes to a later one kept in per-tile arrays."""
    last = spec.statements[-1][0] if spec.statements else "in0"
    sink = sink.format(last=last)
    sunk = set(_VAR.findall(sink))
    parts, defined_in, used_later = _staging(spec, sunk)
    if len(parts) == 1:
        body, _ = _body(spec, [index("j", k) for k in range(len(spec.inputs))])
        return f"#pragma omp simd {pragma}\nfor (i64 j = {lo}; j < {hi}; ++j) {{ {body} {sink} }}\n"
    lines = [f"for (i64 jb = {lo}; jb < {hi}; jb += {_TILE}) {{"]
    lines.append(f"  const i64 je = {hi} - jb < {_TILE} ? {hi} : jb + {_TILE};")
    for n, part in enumerate(parts):
        final = n == len(parts) - 1
        here = {var for var, _, _ in part}
        needs = {a for _, _, args in part for a in args} | (sunk if final else set())
        code = [
            f"const T {a} = a{a[2:]}[{index('j', int(a[2:]))}];"
            for a in sorted(needs)
            if a.startswith("in")
        ]
        code += [
            f"const T {a} = v_{a}[j - jb];"
            for a in sorted(needs)
            if a in defined_in and defined_in[a] < n
        ]
        code += [f"const T {var} = {_call(op, args)};" for var, op, args in part]
        code += [f"v_{v}[j - jb] = {v};" for v in sorted(used_later & here)]
        if final:
            code.append(sink)
        clauses = pragma if final else ""
        lines.append(f"#pragma omp simd {clauses}")
        lines.append(f"  for (i64 j = jb; j < je; ++j) {{ {' '.join(code)} }}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _staging(spec: Spec, sunk: set[str]) -> tuple[list[list], dict[str, int], set[str]]:
    """The group's ``stages``, the stage defining each variable, and the variables a later
    stage reads (or the last stage's sink, ``sunk``: an extra output), which pass between
    stages in per-tile arrays."""
    parts = stages(spec.statements)
    defined_in = {var: n for n, part in enumerate(parts) for var, _, _ in part}
    passed = {v for v in sunk if defined_in.get(v, len(parts) - 1) < len(parts) - 1}
    for n, part in enumerate(parts):
        passed |= {a for _, _, args in part for a in args if defined_in.get(a, n) < n}
    return parts, defined_in, passed


def _buffers(spec: Spec) -> list[str]:
    """The per-tile arrays ``_loop`` passes values between stages in (declared once per
    chunk); a value the sink reads (an extra output) from an earlier stage is one of them."""
    _, _, passed = _staging(spec, set(spec.extra_vars))
    return [f"  alignas(64) T v_{v}[{_TILE}];" for v in sorted(passed)]


def _sum_into(spec: Spec, acc: str, lo: str, hi: str, index) -> str:
    """Add the values of [lo, hi) into the double ``acc``, each in double."""
    return _loop(spec, lo, hi, index, f"{acc} += (double){{last}};", f"reduction(+ : {acc})")


def _max_into(spec: Spec, m: str, nan: str, lo: str, hi: str, index) -> str:
    sink = f"{m} = {{last}} > {m} ? {{last}} : {m}; {nan} |= {{last}} != {{last}};"
    return _loop(spec, lo, hi, index, sink, f"reduction(max : {m}) reduction(| : {nan})")


def _kernel_source(spec: Spec) -> str:
    """The namespace and entry point ``sc_<key>`` of one group's kernel."""
    ni, k, ns = len(spec.inputs), spec.key, len(spec.group.scalars)
    d = len(spec.dims)
    head = [
        f"namespace {k} {{",
        f"typedef {spec.ctype} T;",
        f"struct Ctx {{ const T* in[{max(ni, 1)}]; T* ex[{max(len(spec.extras), 1)}]; "
        "T* out; const i64* meta; "
        f"const double* s; i64 n; i64 chunks; double* part; }};",
        "static void chunk(void* v, i64 c) {",
        "  const Ctx& x = *(const Ctx*)v;",
        "  const i64* dims = x.meta;",
    ]
    head += [f"  const T s{j} = (T)x.s[{j}];" for j in range(ns)]
    head += _buffers(spec)
    head.append("  i64 lo, hi; sc_part(x.n, x.chunks, c, &lo, &hi);")
    body: list[str] = []
    if spec.form == "flat":
        body.append(f"  const i64 inner = dims[{d - 1}];")
        for q in range(ni):
            body.append(f"  const i64 z{q} = x.meta[{d + q * d + d - 1}]; (void)z{q};")
        if spec.reduce in ("sum", "mean"):
            body.append("  double acc = 0;")
        elif spec.reduce == "max":
            body.append("  T m = -INFINITY; int nan = 0;")
        # The walk's position (its row's index in the outer dims, each input's offset) is
        # found by division once per chunk and then advanced row by row like an odometer: a
        # division per dim per row cost more than the row itself where rows are short (a
        # classifier's 10 logits against a broadcast column)
        body.append("  i64 row = lo / inner, j0 = lo - row * inner;")
        body.append(f"  i64 idx[{max(d - 1, 1)}]; (void)idx;")
        body.append("  " + " ".join(f"i64 o{q} = 0;" for q in range(ni)))
        if d > 1:
            add = " ".join(f"o{q} += idx[k] * x.meta[{d} + {q * d} + k];" for q in range(ni))
            body.append(
                f"  {{ i64 r = row; for (int k = {d - 2}; k >= 0; --k) "
                f"{{ idx[k] = r % dims[k]; r /= dims[k]; {add} }} }}"
            )
        body.append("  for (i64 p = lo; p < hi;) {")
        body.append("    const i64 j1 = inner < j0 + (hi - p) ? inner : j0 + (hi - p);")
        for q in range(ni):
            body.append(f"    const T* __restrict a{q} = x.in[{q}] + o{q};")

        def index(var: str, q: int) -> str:
            return _at(spec.classes[q], var, q)

        if not spec.reduce:
            body.append("    T* __restrict o = x.out + row * inner;")
            stores = "o[j] = {last};"
            for q, var in enumerate(spec.extra_vars):
                body.append(f"    T* __restrict e{q} = x.ex[{q}] + row * inner;")
                stores += f" e{q}[j] = {var};"
            # omp simd: vectorized whatever gcc's cost model says
            body.append(_loop(spec, "j0", "j1", index, stores))
        elif spec.reduce == "max":
            body.append(_max_into(spec, "m", "nan", "j0", "j1", index))
        else:
            body.append(_sum_into(spec, "acc", "j0", "j1", index))
        body.append("    p += j1 - j0; j0 = 0; ++row;")
        if d > 1:
            step = " ".join(f"o{q} += x.meta[{d} + {q * d} + k];" for q in range(ni))
            back = " ".join(f"o{q} -= dims[k] * x.meta[{d} + {q * d} + k];" for q in range(ni))
            body.append(
                f"    if (p < hi) for (int k = {d - 2}; k >= 0; --k) {{ ++idx[k]; {step} "
                f"if (idx[k] < dims[k]) break; {back} idx[k] = 0; }}"
            )
        body.append("  }")
        if spec.reduce == "max":
            body.append("  x.part[c] = nan ? (double)NAN : (double)m;")
        elif spec.reduce:
            body.append("  x.part[c] = acc;")
    elif spec.form == "rows":  # one output per row of len, rows spread over the chunks
        body.append("  const i64 len = dims[1];")
        for q in range(ni):
            body.append(f"  const i64 y{q} = x.meta[3 + {3 * q}], z{q} = x.meta[4 + {3 * q}];")
            body.append(f"  (void)z{q};")
        body.append("  for (i64 r = lo; r < hi; ++r) {")
        for q in range(ni):
            body.append(f"    const T* __restrict a{q} = x.in[{q}] + r * y{q};")

        def index(var: str, q: int) -> str:
            return _at(spec.classes[q], var, q)

        if spec.reduce == "max":
            body.append("    T m = -INFINITY; int nan = 0;")
            body.append(_max_into(spec, "m", "nan", "0", "len", index))
            body.append("    x.out[r] = nan ? (T)NAN : m;")
        else:
            body.append("    double acc = 0;")
            body.append(_sum_into(spec, "acc", "0", "len", index))
            scale = " / (double)len" if spec.reduce == "mean" else ""
            body.append(f"    x.out[r] = (T)(acc{scale});")
        body.append("  }")
    else:  # tiles: outputs of one outer index, TILE at a time, len walked for each tile
        body.append("  const i64 len = dims[1], inner = dims[2];")
        body.append(f"  const i64 tiles = (inner + {_TILE - 1}) / {_TILE};")
        for q in range(ni):
            body.append(
                f"  const i64 y{q} = x.meta[3 + {3 * q}], w{q} = x.meta[4 + {3 * q}], "
                f"z{q} = x.meta[5 + {3 * q}]; (void)z{q};"
            )
        acc_t = "T" if spec.reduce == "max" else "double"
        body.append(f"  {acc_t} acc[{_TILE}]; int nan[{_TILE}];")
        body.append("  for (i64 t = lo; t < hi; ++t) {")
        body.append(f"    const i64 r = t / tiles, i0 = (t % tiles) * {_TILE};")
        body.append(f"    const i64 width = inner - i0 < {_TILE} ? inner - i0 : {_TILE};")
        init = "-INFINITY" if spec.reduce == "max" else "0"
        body.append(f"    for (i64 i = 0; i < width; ++i) {{ acc[i] = {init}; nan[i] = 0; }}")
        body.append("    for (i64 l = 0; l < len; ++l) {")
        for q in range(ni):
            step = {"0": "0", "1": "1"}.get(spec.classes[q], f"z{q}")
            body.append(
                f"      const T* __restrict a{q} = x.in[{q}] + r * y{q} + l * w{q} + i0 * {step};"
            )
        inner_body, last = _body(spec, [_at(spec.classes[q], "i", q) for q in range(ni)])
        if spec.reduce == "max":
            body.append(
                f"      for (i64 i = 0; i < width; ++i) {{ {inner_body} "
                f"acc[i] = {last} > acc[i] ? {last} : acc[i]; nan[i] |= {last} != {last}; }}"
            )
        else:
            body.append(
                f"      for (i64 i = 0; i < width; ++i) {{ {inner_body} acc[i] += {last}; }}"
            )
        body.append("    }")
        scale = " / (double)len" if spec.reduce == "mean" else ""
        if spec.reduce == "max":
            value = "nan[i] ? (T)NAN : acc[i]"
        else:
            value = f"(T)(acc[i]{scale})"
        body.append(f"    for (i64 i = 0; i < width; ++i) x.out[r * inner + i0 + i] = {value};")
        body.append("  }")
    tail = ["}", "}  // namespace " + k]
    entry = [
        f'extern "C" void sc_{k}(const void* const* in, void* out, const i64* meta, '
        "const double* s, i64 n, i64 chunks, int most, sc_par_fn par, double* part) {",
        f"  {k}::Ctx x;",
        f"  for (int q = 0; q < {ni}; ++q) x.in[q] = (const {k}::T*)in[q];",
        f"  for (int q = 0; q < {len(spec.extras)}; ++q) x.ex[q] = ({k}::T*)in[{ni} + q];",
        f"  x.out = ({k}::T*)out; x.meta = meta; x.s = s; x.n = n; x.chunks = chunks; "
        "x.part = part;",
        f"  par({k}::chunk, &x, chunks, most);",
    ]
    if spec.form == "flat" and spec.reduce:
        if spec.reduce == "max":
            entry += [
                "  double r = part[0];",
                "  for (i64 c = 1; c < chunks; ++c)",
                "    if (r == r && (part[c] > r || part[c] != part[c])) r = part[c];",
            ]
        else:
            entry += ["  double r = 0;", "  for (i64 c = 0; c < chunks; ++c) r += part[c];"]
            if spec.reduce == "mean":
                entry.append("  r /= (double)n;")
        entry.append(f"  (({k}::T*)out)[0] = ({k}::T)r;")
    entry.append("}")
    return "\n".join(head + body + tail + entry)


_PRELUDE = """
typedef void (*sc_task)(void*, i64);
typedef void (*sc_par_fn)(sc_task, void*, i64, int);
static inline void sc_part(i64 n, i64 parts, i64 i, i64* lo, i64* hi) {
    i64 base = n / parts, extra = n % parts;
    *lo = i * base + (i < extra ? i : extra);
    *hi = *lo + base + (i < extra ? 1 : 0);
}
"""


def source(specs: list[Spec]) -> str:
    """The whole source of one build: the math, the functors, a kernel per distinct key."""
    parts = [(native._DIR / "cpu_math.hpp").read_text(encoding="utf-8"), native.functors()]
    parts.append(_PRELUDE)
    seen: set[str] = set()
    for spec in specs:
        if spec.key not in seen:
            seen.add(spec.key)
            parts.append(_kernel_source(spec))
    return "\n".join(parts) + "\n"


def unavailable() -> str | None:
    """Why fused CPU kernels cannot be had here, or None: they need the native library (its
    pool) and a compiler."""
    return native.unavailable()


def prepare(specs: list[Spec]) -> str | None:
    """Compile and load the kernels of ``specs`` not yet loaded in this process, all in one
    build; the reason it failed, or None."""
    lib = native.library()
    if lib is None:
        return native.unavailable()
    with _lock:
        for spec in specs:
            if spec.key in _failed:
                return _failed[spec.key]
        missing = [s for s in specs if s.key not in _loaded]
        if not missing:
            return None
        text = source(missing)
        identity = str(native._state.get("identity", ""))
        key = hashlib.sha256(
            "\0".join((text, identity, " ".join(native._FLAGS))).encode()
        ).hexdigest()[:16]
        folder = native.cache_dir()
        target = folder / f"fused-{key}.so"
        if not target.exists():
            cxx = native.compiler()
            if cxx is None:
                return "no C++ compiler was found to build the fused kernels"
            target, reason, refused = native._build(cxx, text, folder, target, "the fused kernels")
            if reason:
                # the group's own code, refused: said at compile time (a plan's build of
                # several is tried again group by group, to name the one at fault); the
                # machine's trouble is not kept, and the group runs op by op, said so
                if refused and len(missing) == 1:
                    _failed[missing[0].key] = reason
                return reason
        built, reason = native.open_built(target, "the fused kernels")
        if built is None:
            return reason
        for spec in missing:
            fn = getattr(built, f"sc_{spec.key}")
            fn.argtypes, fn.restype = _ARGS, None
            _loaded[spec.key] = fn
        _loaded.setdefault("__libs__", [])
        _loaded["__libs__"].append(built)  # type: ignore[union-attr]
    return None


def failed(spec: Spec) -> str | None:
    """Why this group's own code did not compile (the compiler's first error), or None: a
    failure the plan must report, where ``unavailable()`` is one it runs around."""
    return _failed.get(spec.key)


def kernel(spec: Spec, threads: int):
    """The group's kernel bound to its arrays (``prepare`` first), or None where it is not
    loaded."""
    fn = _loaded.get(spec.key)
    lib = native.library()
    if fn is None or lib is None:
        return None
    pointers = [a.ctypes.data for a in [*spec.inputs, *spec.extras]]
    ins = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
    meta = spec.meta()
    values = spec.group.scalar_values()
    scalars = np.array(values or [0.0], dtype=np.float64)
    chunks = native.chunks(spec.work, spec.items, threads)
    part = np.zeros(max(1, chunks), dtype=np.float64)
    parallel = ctypes.cast(lib.sc_parallel, ctypes.c_void_p).value
    args = (
        ctypes.addressof(ins),
        spec.out.ctypes.data,
        meta.ctypes.data,
        scalars.ctypes.data,
        spec.items,
        chunks,
        threads,
        parallel,
        part.ctypes.data,
    )
    run = partial(fn, *native.as_ctypes(fn, args))
    run.arrays = (ins, meta, scalars, part, spec.inputs, spec.extras, spec.out)  # type: ignore[attr-defined]
    return run
