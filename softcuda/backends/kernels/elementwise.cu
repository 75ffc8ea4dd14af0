// Elementwise kernels for softcuda: binary (add, sub, mul, div, pow), the registry's unary ops
// and copy, in float32 (_f32) and float64 (_f64).  The unary ops are not named here: each one's
// entry in softcuda/ops.py carries its CUDA expression (OpDef.cuda), and cuda_kernels.py
// appends to this file, before compiling it, one functor per unary op and its SC_UNARY
// instantiations (cuda_kernels.elementwise_source() gives the whole text; source_hash() covers
// it).  pow is a binary kernel whose exponent the Python side passes by value (value_b), or as
// a one-element operand of the strided kernel where the base is not contiguous.
//
// Launch contract (the Python side, cuda_kernels.py, upholds it):
//   * `out` is C-contiguous with n elements; every kernel writes each out[i], i < n, exactly once.
//   * *_contig_vec kernels need a, b and out 16-byte aligned: they move 16 bytes per load
//     (float4 / double2) and finish the last n % W elements with scalar accesses.
//   * *_scalar_a / *_scalar_b read one element of that operand (no host round trip) and
//     treat the other operand as contiguous.
//   * *_value_a / *_value_b take that operand as a number, `T s`, in its place in the argument
//     list (a constant of the graph: no buffer, nothing copied to the device) and treat the
//     other operand as contiguous.
//   * *_strided kernels take `meta`, a device int64 array: shape[ndim], then one stride[ndim]
//     per input, strides in ELEMENTS (0 for a broadcast dim, negative allowed).
// All loops are grid-stride, so any grid size is correct; the grid only sets occupancy.

#define SC_MAX_DIMS 16

template <typename T>
struct alignas(16) Pack {
    static constexpr int W = 16 / sizeof(T);  // elements per 16-byte access
    T v[W];
};

// sc_exp, sc_log, sc_tanh, sc_pow, sc_step and sc_sigmoid: cuda_math.cuh, compiled first

struct OpAdd { template <class T> __device__ static T f(T x, T y) { return x + y; } };
struct OpSub { template <class T> __device__ static T f(T x, T y) { return x - y; } };
struct OpMul { template <class T> __device__ static T f(T x, T y) { return x * y; } };
struct OpDiv { template <class T> __device__ static T f(T x, T y) { return x / y; } };
struct OpPow { template <class T> __device__ static T f(T x, T y) { return sc_pow(x, y); } };

struct OpCopy { template <class T> __device__ static T f(T x) { return x; } };

__device__ __forceinline__ long long sc_tid() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long sc_nthreads() { return (long long)gridDim.x * blockDim.x; }

// Contiguous binary op; ASCAL/BSCAL: that operand is the single value sa/sb broadcast to all of
// out, and its pointer is not read.
template <class Op, class T, bool VEC, bool ASCAL, bool BSCAL>
__device__ __forceinline__ void binary_contig(const T* __restrict__ a, const T* __restrict__ b,
                                              T* __restrict__ out, long long n, T sa, T sb) {
    const long long tid = sc_tid(), step = sc_nthreads();
    long long head = 0;
    if (VEC) {
        using P = Pack<T>;
        constexpr int W = P::W;
        const long long nv = n / W;
        const P* av = reinterpret_cast<const P*>(a);
        const P* bv = reinterpret_cast<const P*>(b);
        P* ov = reinterpret_cast<P*>(out);
        for (long long i = tid; i < nv; i += step) {
            P x, y, r;
            if (!ASCAL) x = av[i];
            if (!BSCAL) y = bv[i];
#pragma unroll
            for (int j = 0; j < W; ++j) r.v[j] = Op::f(ASCAL ? sa : x.v[j], BSCAL ? sb : y.v[j]);
            ov[i] = r;
        }
        head = nv * W;
    }
    for (long long i = head + tid; i < n; i += step)
        out[i] = Op::f(ASCAL ? sa : a[i], BSCAL ? sb : b[i]);
}

// General broadcast/strided binary op: decompose the C-order index of out into per-dim indices.
template <class Op, class T>
__device__ __forceinline__ void binary_strided(const T* __restrict__ a, const T* __restrict__ b,
                                               T* __restrict__ out, long long n, int ndim,
                                               const long long* __restrict__ meta) {
    __shared__ long long sm[3 * SC_MAX_DIMS];
    for (int i = threadIdx.x; i < 3 * ndim; i += blockDim.x) sm[i] = meta[i];
    __syncthreads();
    const long long step = sc_nthreads();
    for (long long i = sc_tid(); i < n; i += step) {
        long long rest = i, oa = 0, ob = 0;
        for (int d = ndim - 1; d >= 0; --d) {
            const long long q = rest / sm[d];
            const long long idx = rest - q * sm[d];
            rest = q;
            oa += idx * sm[ndim + d];
            ob += idx * sm[2 * ndim + d];
        }
        out[i] = Op::f(a[oa], b[ob]);
    }
}

template <class Op, class T, bool VEC>
__device__ __forceinline__ void unary_contig(const T* __restrict__ a, T* __restrict__ out,
                                             long long n) {
    const long long tid = sc_tid(), step = sc_nthreads();
    long long head = 0;
    if (VEC) {
        using P = Pack<T>;
        constexpr int W = P::W;
        const long long nv = n / W;
        const P* av = reinterpret_cast<const P*>(a);
        P* ov = reinterpret_cast<P*>(out);
        for (long long i = tid; i < nv; i += step) {
            P x = av[i], r;
#pragma unroll
            for (int j = 0; j < W; ++j) r.v[j] = Op::f(x.v[j]);
            ov[i] = r;
        }
        head = nv * W;
    }
    for (long long i = head + tid; i < n; i += step) out[i] = Op::f(a[i]);
}

template <class Op, class T>
__device__ __forceinline__ void unary_strided(const T* __restrict__ a, T* __restrict__ out,
                                              long long n, int ndim,
                                              const long long* __restrict__ meta) {
    __shared__ long long sm[2 * SC_MAX_DIMS];
    for (int i = threadIdx.x; i < 2 * ndim; i += blockDim.x) sm[i] = meta[i];
    __syncthreads();
    const long long step = sc_nthreads();
    for (long long i = sc_tid(); i < n; i += step) {
        long long rest = i, oa = 0;
        for (int d = ndim - 1; d >= 0; --d) {
            const long long q = rest / sm[d];
            oa += (rest - q * sm[d]) * sm[ndim + d];
            rest = q;
        }
        out[i] = Op::f(a[oa]);
    }
}

// extern "C" entry points: binary_<op>_<mode>_<f32|f64>, unary_<op>_<mode>_<f32|f64>.
// The scalar modes read their element here (a[0] only where AS: an empty a has no element).
#define SC_BIN_CONTIG(NAME, OP, T, SUF, MODE, VEC, AS, BS)                                     \
    extern "C" __global__ void binary_##NAME##_##MODE##_##SUF(                                 \
        const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, long long n) {   \
        binary_contig<OP, T, VEC, AS, BS>(a, b, out, n, AS ? a[0] : T(0), BS ? b[0] : T(0));   \
    }

#define SC_BIN_VALUE_A(NAME, OP, T, SUF, MODE, VEC)                                            \
    extern "C" __global__ void binary_##NAME##_##MODE##_##SUF(                                 \
        T s, const T* __restrict__ b, T* __restrict__ out, long long n) {                      \
        binary_contig<OP, T, VEC, true, false>(nullptr, b, out, n, s, T(0));                   \
    }

#define SC_BIN_VALUE_B(NAME, OP, T, SUF, MODE, VEC)                                            \
    extern "C" __global__ void binary_##NAME##_##MODE##_##SUF(                                 \
        const T* __restrict__ a, T s, T* __restrict__ out, long long n) {                      \
        binary_contig<OP, T, VEC, false, true>(a, nullptr, out, n, T(0), s);                   \
    }

#define SC_BINARY(NAME, OP, T, SUF)                                                            \
    SC_BIN_CONTIG(NAME, OP, T, SUF, contig, false, false, false)                               \
    SC_BIN_CONTIG(NAME, OP, T, SUF, contig_vec, true, false, false)                            \
    SC_BIN_CONTIG(NAME, OP, T, SUF, scalar_a, false, true, false)                              \
    SC_BIN_CONTIG(NAME, OP, T, SUF, scalar_a_vec, true, true, false)                           \
    SC_BIN_CONTIG(NAME, OP, T, SUF, scalar_b, false, false, true)                              \
    SC_BIN_CONTIG(NAME, OP, T, SUF, scalar_b_vec, true, false, true)                           \
    SC_BIN_VALUE_A(NAME, OP, T, SUF, value_a, false)                                           \
    SC_BIN_VALUE_A(NAME, OP, T, SUF, value_a_vec, true)                                        \
    SC_BIN_VALUE_B(NAME, OP, T, SUF, value_b, false)                                           \
    SC_BIN_VALUE_B(NAME, OP, T, SUF, value_b_vec, true)                                        \
    extern "C" __global__ void binary_##NAME##_strided_##SUF(                                  \
        const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, long long n,    \
        int ndim, const long long* __restrict__ meta) {                                        \
        binary_strided<OP, T>(a, b, out, n, ndim, meta);                                       \
    }

#define SC_UNARY(NAME, OP, T, SUF)                                                             \
    extern "C" __global__ void unary_##NAME##_contig_##SUF(                                    \
        const T* __restrict__ a, T* __restrict__ out, long long n) {                           \
        unary_contig<OP, T, false>(a, out, n);                                                 \
    }                                                                                          \
    extern "C" __global__ void unary_##NAME##_contig_vec_##SUF(                                \
        const T* __restrict__ a, T* __restrict__ out, long long n) {                           \
        unary_contig<OP, T, true>(a, out, n);                                                  \
    }                                                                                          \
    extern "C" __global__ void unary_##NAME##_strided_##SUF(                                   \
        const T* __restrict__ a, T* __restrict__ out, long long n, int ndim,                   \
        const long long* __restrict__ meta) {                                                  \
        unary_strided<OP, T>(a, out, n, ndim, meta);                                           \
    }

// copy is no op of the registry: the plan's copies (a strided view made contiguous).
#define SC_ALL_FOR(T, SUF)                                                                     \
    SC_BINARY(add, OpAdd, T, SUF)                                                              \
    SC_BINARY(sub, OpSub, T, SUF)                                                              \
    SC_BINARY(mul, OpMul, T, SUF)                                                              \
    SC_BINARY(div, OpDiv, T, SUF)                                                              \
    SC_BINARY(pow, OpPow, T, SUF)                                                              \
    SC_UNARY(copy, OpCopy, T, SUF)

SC_ALL_FOR(float, f32)
SC_ALL_FOR(double, f64)

// ---- cuda_kernels.py appends the registry's functors and instantiations below this line ----
