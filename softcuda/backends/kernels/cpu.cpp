// softcuda's native CPU kernels: elementwise ops, reductions and softmax on OpenMP threads.
//
// Compiled at first use by softcuda/backends/native.py with the machine's C++ compiler
// (-O3 -march=native -fopenmp, never -ffast-math: NaN and inf keep IEEE meaning), after the
// registry's functors and the entry points generated from them (native.source()).  Every loop is
// written so that the compiler vectorizes it: the float32 exp, log and tanh below are
// polynomials with integer bit tricks, no library calls, because a call to libm's expf in a loop
// stops vectorization and costs ten times more per element.  float64 calls the C++ library.
//
// Threads: an entry point takes the most threads it may use (the profile's cpu_threads) and uses
// fewer where the work is small: one thread per SC_GRAIN elements of work (an element of a
// transcendental op counts as several), so a small op runs on the calling thread alone, with no
// OpenMP region at all.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef int64_t i64;

// elements of one-flop work per thread, as PyTorch's grain; tests lower it (sc_set_grain) to
// run small arrays on several threads
static i64 SC_GRAIN = 32768;

extern "C" i64 sc_set_grain(i64 grain) {
    i64 was = SC_GRAIN;
    SC_GRAIN = grain > 0 ? grain : 1;
    return was;
}

// set in a child process after fork(): libgomp's threads do not survive a fork, and a child
// that opens a parallel region hangs, so a forked child runs every kernel on its own thread
static int SC_FORKED = 0;

extern "C" void sc_after_fork(void) { SC_FORKED = 1; }

static inline int sc_threads_for(i64 work, int most) {
    if (SC_FORKED) return 1;
    i64 want = work / SC_GRAIN;
    if (want < 1) want = 1;
    return (int)(want < most ? want : most);
}

// [lo, hi) of part i of n cut into parts nearly equal pieces
static inline void sc_part(i64 n, int parts, int i, i64* lo, i64* hi) {
    i64 base = n / parts, extra = n % parts;
    *lo = i * base + (i < extra ? i : extra);
    *hi = *lo + base + (i < extra ? 1 : 0);
}

#ifdef _OPENMP
#define SC_PARALLEL(use) _Pragma("omp parallel num_threads(use)")
#define SC_ME omp_get_thread_num()
#define SC_TEAM omp_get_num_threads()
#else
#define SC_PARALLEL(use)
#define SC_ME 0
#define SC_TEAM 1
#endif

// ---- float32 math that vectorizes ---------------------------------------------------------------

static inline float sc_bits_f(int32_t i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline int32_t sc_int_f(float f) { int32_t i; std::memcpy(&i, &f, 4); return i; }

// e^x: x = n ln2 + r with |r| <= ln2/2 (n rounded by the 1.5 * 2^23 trick), e^r by its Taylor
// polynomial to r^7 (truncation under 1e-8 relative), 2^n applied as two halves so that results
// down to the subnormals and up to overflow come out right.  NaN gives NaN.
static inline float sc_exp(float x) {
    float c = x < -104.0f ? -104.0f : x;
    c = c > 89.0f ? 89.0f : c;
    const float big = 12582912.0f;
    float n = (c * 1.44269504088896341f + big) - big;
    float r = c - n * 0.693145751953125f;
    r = r - n * 1.42860682030941723e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t k = (int32_t)n;
    int32_t h = k >> 1;
    float y = p * sc_bits_f((h + 127) << 23) * sc_bits_f((k - h + 127) << 23);
    return x != x ? x : y;
}

// log x: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m-1)/(m+1), by its
// series to s^9 (|s| < 0.172: truncation under 1e-9).  Subnormals are scaled up first; 0 gives
// -inf, negatives NaN, inf inf.
static inline float sc_log(float x) {
    bool tiny = x < 1.17549435e-38f;
    float v = tiny ? x * 8388608.0f : x;
    int32_t bits = sc_int_f(v);
    int32_t e = ((bits >> 23) & 0xff) - 127;
    float m = sc_bits_f((bits & 0x007fffff) | 0x3f800000);  // in [1, 2)
    bool high = m > 1.41421356f;
    m = high ? m * 0.5f : m;
    e = high ? e + 1 : e;
    float s = (m - 1.0f) / (m + 1.0f);
    float s2 = s * s;
    float p = 2.0f / 9.0f;
    p = p * s2 + 2.0f / 7.0f;
    p = p * s2 + 2.0f / 5.0f;
    p = p * s2 + 2.0f / 3.0f;
    p = p * s2 + 2.0f;
    float ef = (float)e - (tiny ? 23.0f : 0.0f);
    float y = ef * 0.693145751953125f + (s * p + ef * 1.42860682030941723e-6f);
    y = x == 0.0f ? -INFINITY : y;
    y = x < 0.0f ? NAN : y;
    y = x == INFINITY ? x : y;
    return x != x ? x : y;
}

// tanh x = x P(x^2) / Q(x^2) on |x| < 9 (from 9 on, tanh rounds to +-1 in float32): a rational
// approximation of degrees 5 and 4 in x^2, fitted here by Lawson's weighted least squares
// (relative error 1.3e-9 in exact arithmetic; the float32 result is within a few ulps).  One
// division and eleven multiply-adds, no exp: twice as fast as 1 - 2/(e^2x + 1).  -0 stays -0
// and NaN stays NaN (neither clamp's comparison holds for it).
static inline float sc_tanh(float x) {
    float c = x > 9.0f ? 9.0f : x;
    c = c < -9.0f ? -9.0f : c;
    float t = c * c;
    float p = -1.2246085379024462e-11f;
    p = p * t + 3.064229934576951e-08f;
    p = p * t + 2.8031212092211266e-05f;
    p = p * t + 0.0038695029823988367f;
    p = p * t + 0.13680852412882535f;
    p = p * t + 0.9999999987227117f;
    float q = 1.2890283116106779e-06f;
    q = q * t + 0.0003940704627704111f;
    q = q * t + 0.027250138179490267f;
    q = q * t + 0.47014184502316836f;
    q = q * t + 1.0f;
    float r = c * p / q;
    r = x >= 9.0f ? 1.0f : r;  // where float32 rounds tanh to +-1, exactly that
    return x <= -9.0f ? -1.0f : r;
}

static inline double sc_exp(double x) { return std::exp(x); }
static inline double sc_log(double x) { return std::log(x); }
static inline double sc_tanh(double x) { return std::tanh(x); }
static inline float sc_pow(float x, float y) { return std::pow(x, y); }
static inline double sc_pow(double x, double y) { return std::pow(x, y); }

// x > 0, and 0 for NaN, as a number of x's type
template <class T>
static inline T sc_step(T x) { return x > T(0) ? T(1) : T(0); }

// exp of -|x| only, as on the GPU: neither branch overflows, both tails stay accurate
template <class T>
static inline T sc_sigmoid(T x) {
    T e = sc_exp(x < T(0) ? x : -x);
    return x < T(0) ? e / (T(1) + e) : T(1) / (T(1) + e);
}

// ---- elementwise loops (the entry points below instantiate them per functor) ----------------

// out[i] = F(a[i]) over a contiguous range; the one loop every unary entry runs
template <class F, class T>
static void sc_unary_run(const T* __restrict a, T* __restrict out, i64 n, T s) {
    for (i64 i = 0; i < n; ++i) out[i] = F::f(a[i], s);
}

template <class F, class T>
static void sc_unary(const T* a, T* out, i64 n, T s, int most, int weight) {
    int use = sc_threads_for(n * weight, most);
    if (use <= 1) { sc_unary_run<F, T>(a, out, n, s); return; }
    SC_PARALLEL(use)
    {
        i64 lo, hi;
        sc_part(n, SC_TEAM, SC_ME, &lo, &hi);
        sc_unary_run<F, T>(a + lo, out + lo, hi - lo, s);
    }
}

// mode 0: a and b both arrays; 1: b the scalar s; 2: a the scalar s
template <class F, class T>
static void sc_binary_run(const T* __restrict a, const T* __restrict b, T* __restrict out, i64 n,
                          T s, int mode) {
    if (mode == 0) {
        for (i64 i = 0; i < n; ++i) out[i] = F::f(a[i], b[i]);
    } else if (mode == 1) {
        for (i64 i = 0; i < n; ++i) out[i] = F::f(a[i], s);
    } else {
        for (i64 i = 0; i < n; ++i) out[i] = F::f(s, b[i]);
    }
}

template <class F, class T>
static void sc_binary(const T* a, const T* b, T* out, i64 n, T s, int mode, int most) {
    int use = sc_threads_for(n, most);
    if (use <= 1) { sc_binary_run<F, T>(a, b, out, n, s, mode); return; }
    SC_PARALLEL(use)
    {
        i64 lo, hi;
        sc_part(n, SC_TEAM, SC_ME, &lo, &hi);
        sc_binary_run<F, T>(mode == 2 ? a : a + lo, mode == 1 ? b : b + lo, out + lo, hi - lo, s,
                            mode);
    }
}

// Broadcast or strided operands: out is contiguous with ``ndim`` dims (at most 8) and the
// operands' strides are in elements (0 where they broadcast).  Rows of the last dim are spread
// over threads; a row whose operands are contiguous or broadcast runs a vectorized loop.
template <class F, class T>
static void sc_binary_rows(const T* a, const T* b, T* out, int ndim, const i64* shape,
                           const i64* sa, const i64* sb, int most) {
    i64 inner = shape[ndim - 1], rows = 1;
    for (int d = 0; d < ndim - 1; ++d) rows *= shape[d];
    int use = sc_threads_for(rows * inner, most);
    if (use > rows) use = (int)(rows > 0 ? rows : 1);
    i64 ia = sa[ndim - 1], ib = sb[ndim - 1];
#ifdef _OPENMP
#pragma omp parallel for num_threads(use) schedule(static) if (use > 1)
#endif
    for (i64 row = 0; row < rows; ++row) {
        i64 oa = 0, ob = 0, rest = row;
        for (int d = ndim - 2; d >= 0; --d) {
            i64 j = rest % shape[d];
            rest /= shape[d];
            oa += j * sa[d];
            ob += j * sb[d];
        }
        const T* pa = a + oa;
        const T* pb = b + ob;
        T* po = out + row * inner;
        if (ia == 1 && ib == 1) sc_binary_run<F, T>(pa, pb, po, inner, T(0), 0);
        else if (ia == 1 && ib == 0) sc_binary_run<F, T>(pa, pb, po, inner, *pb, 1);
        else if (ia == 0 && ib == 1) sc_binary_run<F, T>(pa, pb, po, inner, *pa, 2);
        else
            for (i64 i = 0; i < inner; ++i) po[i] = F::f(pa[i * ia], pb[i * ib]);
    }
}

// ---- reductions: the input contiguous, seen as (outer, len, inner), reduced along len --------

// the sum of a contiguous run, in double
template <class T>
static double sc_run_sum(const T* __restrict x, i64 n) {
    double s = 0.0;
#ifdef _OPENMP
#pragma omp simd reduction(+ : s)
#endif
    for (i64 i = 0; i < n; ++i) s += (double)x[i];
    return s;
}

// the largest of a contiguous run (n >= 1), NaN if any is NaN, as numpy's max
template <class T>
static T sc_run_max(const T* __restrict x, i64 n) {
    T m = x[0];
    int nan = 0;
#ifdef _OPENMP
#pragma omp simd reduction(max : m) reduction(| : nan)
#endif
    for (i64 i = 0; i < n; ++i) {
        m = x[i] > m ? x[i] : m;
        nan |= x[i] != x[i];
    }
    return nan ? T(NAN) : m;
}

template <class T>
static T sc_run_reduce(const T* x, i64 n, int op) {  // op 0 sum, 1 mean, 2 max
    if (op == 2) return sc_run_max(x, n);
    double s = sc_run_sum(x, n);
    return (T)(op == 1 ? s / (double)n : s);
}

// all of a long run on many threads: partials in double (sum) or T (max), combined in order
template <class T>
static T sc_reduce_long(const T* x, i64 n, int op, int use) {
    double part[256];
    int team = 1;
    if (use > 256) use = 256;
    if (use > n) use = (int)n;  // every part holds at least one element
    SC_PARALLEL(use)
    {
        i64 lo, hi;
        int me = SC_ME;
        team = SC_TEAM;
        sc_part(n, team, me, &lo, &hi);
        part[me] = op == 2 ? (double)sc_run_max(x + lo, hi - lo) : sc_run_sum(x + lo, hi - lo);
    }
    double r = part[0];
    for (int i = 1; i < team; ++i) {
        if (op == 2) r = (part[i] > r || part[i] != part[i] || r != r) ? (r != r ? r : part[i]) : r;
        else r += part[i];
    }
    return (T)(op == 1 ? r / (double)n : r);
}

static const i64 SC_TILE = 256;  // outputs one thread keeps partials for, along inner

template <class T>
static void sc_reduce_tile(const T* x, T* out, i64 len, i64 inner, i64 j0, i64 j1, int op) {
    double acc[SC_TILE];
    int nan[SC_TILE];
    i64 w = j1 - j0;
    for (i64 j = 0; j < w; ++j) {
        acc[j] = op == 2 ? (double)x[j0 + j] : 0.0;
        nan[j] = 0;
    }
    for (i64 k = 0; k < len; ++k) {
        const T* row = x + k * inner + j0;
        if (op == 2) {
            for (i64 j = 0; j < w; ++j) {
                double v = (double)row[j];
                acc[j] = v > acc[j] ? v : acc[j];
                nan[j] |= v != v;
            }
        } else {
            for (i64 j = 0; j < w; ++j) acc[j] += (double)row[j];
        }
    }
    for (i64 j = 0; j < w; ++j) {
        double v = op == 1 ? acc[j] / (double)len : acc[j];
        out[j0 + j] = (T)(op == 2 && nan[j] ? NAN : v);
    }
}

template <class T>
static void sc_reduce(const T* x, T* out, i64 outer, i64 len, i64 inner, int op, int most) {
    if (len == 0) {  // numpy's values over nothing (max over nothing is refused at graph build)
        for (i64 i = 0; i < outer * inner; ++i) out[i] = op == 1 ? T(NAN) : T(0);
        return;
    }
    int use = sc_threads_for(outer * len * inner, most);
    if (inner == 1) {
        if (outer == 1) {
            out[0] = use > 1 ? sc_reduce_long(x, len, op, use) : sc_run_reduce(x, len, op);
            return;
        }
        if (use > outer) use = (int)outer;
#ifdef _OPENMP
#pragma omp parallel for num_threads(use) schedule(static) if (use > 1)
#endif
        for (i64 o = 0; o < outer; ++o) out[o] = sc_run_reduce(x + o * len, len, op);
        return;
    }
    i64 tiles = (inner + SC_TILE - 1) / SC_TILE;
    if (use > outer * tiles) use = (int)(outer * tiles);
#ifdef _OPENMP
#pragma omp parallel for num_threads(use) schedule(static) if (use > 1)
#endif
    for (i64 t = 0; t < outer * tiles; ++t) {
        i64 o = t / tiles, j0 = (t % tiles) * SC_TILE;
        i64 j1 = std::min(inner, j0 + SC_TILE);
        sc_reduce_tile(x + o * len * inner, out + o * inner, len, inner, j0, j1, op);
    }
}

// ---- softmax along len, same view -----------------------------------------------------------

template <class T>
static void sc_softmax_row(const T* __restrict x, T* __restrict out, i64 n) {
    T m = sc_run_max(x, n);
    double s = 0.0;
#ifdef _OPENMP
#pragma omp simd reduction(+ : s)
#endif
    for (i64 i = 0; i < n; ++i) {
        T e = sc_exp(x[i] - m);
        out[i] = e;
        s += (double)e;
    }
    T inv = (T)(1.0 / s);
    for (i64 i = 0; i < n; ++i) out[i] = out[i] * inv;
}

template <class T>
static void sc_softmax_tile(const T* x, T* out, i64 len, i64 inner, i64 j0, i64 j1) {
    T peak[SC_TILE];
    double sum[SC_TILE];
    i64 w = j1 - j0;
    for (i64 j = 0; j < w; ++j) { peak[j] = x[j0 + j]; sum[j] = 0.0; }
    for (i64 k = 0; k < len; ++k)
        for (i64 j = 0; j < w; ++j) {
            T v = x[k * inner + j0 + j];
            peak[j] = (v > peak[j] || v != v) ? v : peak[j];
        }
    for (i64 k = 0; k < len; ++k)
        for (i64 j = 0; j < w; ++j) {
            T e = sc_exp(x[k * inner + j0 + j] - peak[j]);
            out[k * inner + j0 + j] = e;
            sum[j] += (double)e;
        }
    for (i64 k = 0; k < len; ++k)
        for (i64 j = 0; j < w; ++j) out[k * inner + j0 + j] = (T)(out[k * inner + j0 + j] / sum[j]);
}

// one long softmax (axis None, or one row): max, exp and sum, scale, each pass on the team
template <class T>
static void sc_softmax_long(const T* x, T* out, i64 n, int use) {
    double part[256];
    int team = 1;
    if (use > 256) use = 256;
    if (use > n) use = (int)n;  // every part holds at least one element
    T m = sc_reduce_long(x, n, 2, use);
    SC_PARALLEL(use)
    {
        i64 lo, hi;
        int me = SC_ME;
        team = SC_TEAM;
        sc_part(n, team, me, &lo, &hi);
        double s = 0.0;
        for (i64 i = lo; i < hi; ++i) {
            T e = sc_exp(x[i] - m);
            out[i] = e;
            s += (double)e;
        }
        part[me] = s;
#ifdef _OPENMP
#pragma omp barrier
#endif
        double total = 0.0;
        for (int i = 0; i < team; ++i) total += part[i];
        T inv = (T)(1.0 / total);
        for (i64 i = lo; i < hi; ++i) out[i] = out[i] * inv;
    }
}

template <class T>
static void sc_softmax(const T* x, T* out, i64 outer, i64 len, i64 inner, int most) {
    if (outer * len * inner == 0) return;
    int use = sc_threads_for(outer * len * inner * 8, most);
    if (inner == 1) {
        if (outer == 1) {
            if (use > 1) sc_softmax_long(x, out, len, use);
            else sc_softmax_row(x, out, len);
            return;
        }
        if (use > outer) use = (int)outer;
#ifdef _OPENMP
#pragma omp parallel for num_threads(use) schedule(static) if (use > 1)
#endif
        for (i64 o = 0; o < outer; ++o) sc_softmax_row(x + o * len, out + o * len, len);
        return;
    }
    i64 tiles = (inner + SC_TILE - 1) / SC_TILE;
    if (use > outer * tiles) use = (int)(outer * tiles);
#ifdef _OPENMP
#pragma omp parallel for num_threads(use) schedule(static) if (use > 1)
#endif
    for (i64 t = 0; t < outer * tiles; ++t) {
        i64 o = t / tiles, j0 = (t % tiles) * SC_TILE;
        i64 j1 = std::min(inner, j0 + SC_TILE);
        sc_softmax_tile(x + o * len * inner, out + o * len * inner, len, inner, j0, j1);
    }
}

extern "C" int sc_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

// ---- the registry's functors and the entry points follow (generated by native.source()) -----
