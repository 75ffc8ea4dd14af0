// softmax and log_softmax along one axis in one pass over the data and one over its output:
// each row's maximum m and the sum s of exp(x - m) are found together (an online softmax: a
// larger x rescales the sum so far by exp(m_old - x)), then every element is written, as
// exp(x - m) / s or (x - m) - log(s).  The composed launches this replaces (max, sub, exp, sum,
// div: five kernels and three scratch arrays) read the input three times and wrote it twice.
//
// Compiled after cuda_math.cuh (sc_exp, sc_log) and reduce.cu's device templates (sc_neg_inf).
// Rows are C-contiguous (inner == 1: one warp or one block per row) or columns of an
// (outer, R, inner) array (one thread per column, its neighbours the next columns: coalesced).
//
// Special values as numpy's float64 reference gives them: a NaN anywhere in a row makes the row
// NaN; +inf makes it NaN (inf - inf); a row of -inf is NaN (-inf - -inf); a -inf among finite
// values gives 0 (its log: -inf).  A -inf seen while the maximum is still -inf adds nothing, so
// the running sum never becomes NaN from -inf alone.
//
// Determinism: no atomics; the combination order is fixed by the launch shape.

// x * by as a mul kernel rounds it: never contracted with the subtraction that follows into a
// fused multiply-add, so a softmax that takes its input's scale (softmax(x * c), tensor.py's
// _scaled_row_input) sees the very values the mul would have written; by 1 leaves x as it is
__device__ __forceinline__ float sm_by(float x, float by) { return __fmul_rn(x, by); }
__device__ __forceinline__ double sm_by(double x, double by) { return __dmul_rn(x, by); }

template <class T>
struct SmPair {
    T m, s;  // the running maximum and the sum of exp(x - m)
};

template <class T>
__device__ __forceinline__ SmPair<T> sm_identity() {
    SmPair<T> p;
    sc_neg_inf(p.m);
    p.s = T(0);
    return p;
}

// One element into the running pair.  NaN takes the maximum's place (and stays: nothing
// compares greater than NaN, and every later term is exp(x - NaN)).
template <class T>
__device__ __forceinline__ void sm_add(SmPair<T>& p, T x) {
    if (x > p.m || x != x) {
        p.s = p.s * sc_exp(p.m - x) + T(1);  // p.m == -inf: 0 * 0 + 1
        p.m = x;
    } else {
        T neg_inf;
        sc_neg_inf(neg_inf);
        p.s += p.m == neg_inf ? T(0) : sc_exp(x - p.m);
    }
}

template <class T>
__device__ __forceinline__ SmPair<T> sm_combine(SmPair<T> a, SmPair<T> b) {
    T neg_inf;
    sc_neg_inf(neg_inf);
    SmPair<T> r;
    r.m = (b.m > a.m || b.m != b.m) ? b.m : a.m;
    if (a.m != a.m) r.m = a.m;
    if (r.m == neg_inf) {  // both empty, or every element so far -inf
        r.s = T(0);
        return r;
    }
    r.s = (a.m == neg_inf ? T(0) : a.s * sc_exp(a.m - r.m)) +
          (b.m == neg_inf ? T(0) : b.s * sc_exp(b.m - r.m));
    return r;
}

// Every lane ends with the warp's pair (a butterfly: no broadcast needed afterwards).
template <class T>
__device__ __forceinline__ SmPair<T> sm_warp(SmPair<T> p) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        SmPair<T> o;
        o.m = __shfl_xor_sync(0xffffffffu, p.m, off);
        o.s = __shfl_xor_sync(0xffffffffu, p.s, off);
        p = sm_combine(p, o);
    }
    return p;
}

// Every thread of the block ends with the block's pair.  Ends with a barrier, so that the next
// row's call cannot overwrite `parts` before every warp has read it.
template <class T>
__device__ __forceinline__ SmPair<T> sm_block(SmPair<T> p) {
    __shared__ T part_m[32], part_s[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    p = sm_warp(p);
    if (lane == 0) {
        part_m[warp] = p.m;
        part_s[warp] = p.s;
    }
    __syncthreads();
    SmPair<T> q = sm_identity<T>();
    if (lane < nwarps) {
        q.m = part_m[lane];
        q.s = part_s[lane];
    }
    q = sm_warp(q);
    __syncthreads();
    return q;
}

template <class T, bool LOG>
__device__ __forceinline__ T sm_out(T x, SmPair<T> p, T scale) {
    // scale: 1 / s for softmax, log(s) for log_softmax
    return LOG ? (x - p.m) - scale : sc_exp(x - p.m) * scale;
}

template <class T, bool LOG>
__device__ __forceinline__ T sm_scale(SmPair<T> p) {
    return LOG ? sc_log(p.s) : T(1) / p.s;
}

// Short rows: one warp per row (grid-stride over rows).
template <class T, bool LOG>
__device__ __forceinline__ void softmax_rows_warp(const T* x, T* out, long long rows,
                                                  long long R, T by) {
    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long nwarps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long row = warp; row < rows; row += nwarps) {
        const T* p = x + row * R;
        SmPair<T> acc = sm_identity<T>();
        for (long long j = lane; j < R; j += 32) sm_add(acc, sm_by(p[j], by));
        acc = sm_warp(acc);
        const T scale = sm_scale<T, LOG>(acc);
        T* o = out + row * R;
        for (long long j = lane; j < R; j += 32) o[j] = sm_out<T, LOG>(sm_by(p[j], by), acc, scale);
    }
}

// Long rows: one block per row (grid-stride over rows).
template <class T, bool LOG>
__device__ __forceinline__ void softmax_rows_block(const T* x, T* out, long long rows,
                                                   long long R, T by) {
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* p = x + row * R;
        SmPair<T> acc = sm_identity<T>();
        for (long long j = threadIdx.x; j < R; j += blockDim.x) sm_add(acc, sm_by(p[j], by));
        acc = sm_block(acc);
        const T scale = sm_scale<T, LOG>(acc);
        T* o = out + row * R;
        for (long long j = threadIdx.x; j < R; j += blockDim.x)
            o[j] = sm_out<T, LOG>(sm_by(p[j], by), acc, scale);
    }
}

// A thread's held values into its own pair: their maximum m (NaN, once seen, stays) and,
// unless every value is -inf (or padding), the sum of e = exp(v - m), each v replaced by its e
// for softmax (log_softmax keeps v).
template <class T, bool LOG, int N>
__device__ __forceinline__ SmPair<T> sm_held_pair(T (&v)[N], T neg_inf) {
    SmPair<T> own;
    own.m = neg_inf;
#pragma unroll
    for (int k = 0; k < N; ++k)
        if (v[k] > own.m || v[k] != v[k]) own.m = v[k];
    own.s = T(0);
    if (own.m != neg_inf) {
#pragma unroll
        for (int k = 0; k < N; ++k) {
            const T e = sc_exp(v[k] - own.m);  // padding is -inf: 0
            own.s += e;
            if (!LOG) v[k] = e;
        }
    }
    return own;
}

// What every held value of a thread whose own maximum is ``m`` is scaled by, once the row's
// pair ``acc`` is known: log S for log_softmax, exp(m - M) / S for softmax (a thread of -inf
// alone holds no e: 0, or NaN in a row of -inf)
template <class T, bool LOG>
__device__ __forceinline__ T sm_held_scale(T m, SmPair<T> acc, T neg_inf) {
    if (LOG) return sc_log(acc.s);
    return (m == neg_inf ? T(0) : sc_exp(m - acc.m)) / acc.s;
}

// One held value's output: (x - M) - log S, in that order (M + log S would round at M's scale,
// 1e4 in float32: a thousandth, what the difference keeps exact), or e times the thread's scale
template <class T, bool LOG>
__device__ __forceinline__ T sm_held_out(T v, T m, SmPair<T> acc, T scale, T neg_inf) {
    if (LOG) return (v - acc.m) - scale;
    return (m == neg_inf ? T(0) : v) * scale;
}

// Rows of at most K * width elements (width: 32 lanes of a warp, or the block), held in
// registers: each thread reads its K elements once (coalesced: element k of a thread is
// tid + k * width), takes its own maximum m_t, then e = exp(x - m_t) once per element and their
// sum; the threads' (m_t, sum) pairs combine as the online kernels' do, and each thread writes
// e * (exp(m_t - M) / S) (log: (x - M) - log S).  The row is read once and exp taken once per
// element, where the online kernels read it twice and take exp twice: what made them half
// PyTorch's speed in kernel time on rows of 4096.  A thread whose elements are all -inf (or
// none) is an empty pair, so a row of -inf is still NaN as numpy's reference makes it.
template <class T, bool LOG, int K, bool WARP>
__device__ __forceinline__ void softmax_rows_held(const T* x, T* out, long long rows,
                                                  long long R, T by) {
    const int tid = WARP ? (threadIdx.x & 31) : threadIdx.x;
    const int width = WARP ? 32 : blockDim.x;
    const long long first = WARP ? (((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5)
                                 : (long long)blockIdx.x;
    const long long stride = WARP ? (((long long)gridDim.x * blockDim.x) >> 5)
                                  : (long long)gridDim.x;
    T neg_inf;
    sc_neg_inf(neg_inf);
    for (long long row = first; row < rows; row += stride) {
        const T* p = x + row * R;
        T v[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const long long j = tid + (long long)k * width;
            v[k] = j < R ? sm_by(p[j], by) : neg_inf;
        }
        const SmPair<T> own = sm_held_pair<T, LOG>(v, neg_inf);
        const SmPair<T> acc = WARP ? sm_warp(own) : sm_block(own);
        const T scale = sm_held_scale<T, LOG>(own.m, acc, neg_inf);
        T* o = out + row * R;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const long long j = tid + (long long)k * width;
            if (j < R) o[j] = sm_held_out<T, LOG>(v[k], own.m, acc, scale, neg_inf);
        }
    }
}

// Along a non-last axis: x viewed as (outer, R, inner), one thread per (o, j) column.
template <class T, bool LOG>
__device__ __forceinline__ void softmax_cols(const T* x, T* out, long long outer,
                                             long long R, long long inner, T by) {
    const long long columns = outer * inner;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < columns; c += step) {
        const long long o = c / inner, j = c - o * inner;
        const T* p = x + o * R * inner + j;
        SmPair<T> acc = sm_identity<T>();
        for (long long r = 0; r < R; ++r) sm_add(acc, sm_by(p[r * inner], by));
        const T scale = sm_scale<T, LOG>(acc);
        T* q = out + o * R * inner + j;
        for (long long r = 0; r < R; ++r)
            q[r * inner] = sm_out<T, LOG>(sm_by(p[r * inner], by), acc, scale);
    }
}

// Rows of R floats, R a multiple of 4 and the arrays 16-byte aligned (so is every row), at most
// THREADS * V * 4: each thread holds V float4 vectors, vector k of thread t at
// (k * THREADS + t) * 4, read and written with one 16-byte access each.  Otherwise as
// softmax_rows_held.  On the H100, 256 threads of 4 vectors took 0.59-0.95 of the scalar held
// kernel's time on rows of 2,048 and 4,096 (extra/softmax_variants.py).
template <bool LOG, int THREADS, int V>
__device__ __forceinline__ void softmax_rows_vec4(const float* x, float* out, long long rows,
                                                  long long R, float by) {
    const int t = threadIdx.x;
    const long long R4 = R >> 2;
    float neg_inf;
    sc_neg_inf(neg_inf);
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float4* p = reinterpret_cast<const float4*>(x + row * R);
        float v[V * 4];
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const long long j = t + (long long)k * THREADS;
            float4 q;
            if (j < R4) {
                q = p[j];
            } else {
                q.x = q.y = q.z = q.w = neg_inf;
            }
            v[4 * k] = sm_by(q.x, by);
            v[4 * k + 1] = sm_by(q.y, by);
            v[4 * k + 2] = sm_by(q.z, by);
            v[4 * k + 3] = sm_by(q.w, by);
        }
        const SmPair<float> own = sm_held_pair<float, LOG>(v, neg_inf);
        const SmPair<float> acc = sm_block(own);
        const float scale = sm_held_scale<float, LOG>(own.m, acc, neg_inf);
        float4* o = reinterpret_cast<float4*>(out + row * R);
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const long long j = t + (long long)k * THREADS;
            if (j >= R4) continue;
            float r[4];
#pragma unroll
            for (int w = 0; w < 4; ++w)
                r[w] = sm_held_out<float, LOG>(v[4 * k + w], own.m, acc, scale, neg_inf);
            float4 q;  // (make_float4 is a CUDA runtime header's, which NVRTC may lack)
            q.x = r[0];
            q.y = r[1];
            q.z = r[2];
            q.w = r[3];
            o[j] = q;
        }
    }
}

#ifndef SC_TUNING  // the kernels softcuda launches (cuda_kernels.py builds this file twice)

// rows of at most K * 32 (warp) or K * SC_RED_THREADS (block) elements, held in registers
#define SC_SOFTMAX_HELD(NAME, LOG, T, SUF, BY, K, WARP)                                        \
    extern "C" __global__ void __launch_bounds__(SC_RED_THREADS)                               \
        NAME##_rows_##BY##_held##K##_##SUF(const T* x, T* out, long long rows, long long R,    \
                                           T by) {                                             \
        softmax_rows_held<T, LOG, K, WARP>(x, out, rows, R, by);                               \
    }

#define SC_SOFTMAX(NAME, LOG, T, SUF)                                                          \
    extern "C" __global__ void __launch_bounds__(SC_RED_THREADS) NAME##_rows_warp_##SUF(       \
        const T* x, T* out, long long rows, long long R, T by) {                               \
        softmax_rows_warp<T, LOG>(x, out, rows, R, by);                                        \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(SC_RED_THREADS) NAME##_rows_block_##SUF(      \
        const T* x, T* out, long long rows, long long R, T by) {                               \
        softmax_rows_block<T, LOG>(x, out, rows, R, by);                                       \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(SC_RED_THREADS) NAME##_cols_##SUF(            \
        const T* x, T* out, long long outer, long long R, long long inner, T by) {             \
        softmax_cols<T, LOG>(x, out, outer, R, inner, by);                                     \
    }                                                                                          \
    SC_SOFTMAX_HELD(NAME, LOG, T, SUF, warp, 8, true)                                          \
    SC_SOFTMAX_HELD(NAME, LOG, T, SUF, warp, 32, true)                                         \
    SC_SOFTMAX_HELD(NAME, LOG, T, SUF, block, 16, false)                                       \
    SC_SOFTMAX_HELD(NAME, LOG, T, SUF, block, 32, false)

SC_SOFTMAX(softmax, false, float, f32)
SC_SOFTMAX(softmax, false, double, f64)
SC_SOFTMAX(log_softmax, true, float, f32)
SC_SOFTMAX(log_softmax, true, double, f64)

// float32 rows of 2,048 to 4,096 (a multiple of 4), 16-byte aligned: 256 threads of 4 float4s
#define SC_SOFTMAX_VEC4_ROWS(NAME, LOG)                                                        \
    extern "C" __global__ void __launch_bounds__(SC_RED_THREADS)                               \
        NAME##_rows_vec4_f32(const float* x, float* out, long long rows, long long R,         \
                             float by) {                                                       \
        softmax_rows_vec4<LOG, SC_RED_THREADS, 4>(x, out, rows, R, by);                        \
    }

SC_SOFTMAX_VEC4_ROWS(softmax, false)
SC_SOFTMAX_VEC4_ROWS(log_softmax, true)

#else  // SC_TUNING: variants of the held block rows, timed beside the production kernels by
       // extra/softmax_variants.py (float32 only; none is launched by a plan; 256 threads of 4
       // float4s, the production kernel above, is not repeated here)

#define SC_SOFTMAX_VEC4(THREADS, V)                                                            \
    extern "C" __global__ void __launch_bounds__(THREADS)                                      \
        softmax_rows_vec4_t##THREADS##_v##V##_f32(const float* x, float* out, long long rows, \
                                                  long long R, float by) {                     \
        softmax_rows_vec4<false, THREADS, V>(x, out, rows, R, by);                             \
    }

SC_SOFTMAX_VEC4(512, 2)   // rows of up to 4,096
SC_SOFTMAX_VEC4(1024, 1)  // rows of up to 4,096
SC_SOFTMAX_VEC4(1024, 2)  // rows of up to 8,192

// the production held kernel with more threads a block: 1,024 threads of 4 (rows to 4,096)
extern "C" __global__ void __launch_bounds__(1024)
    softmax_rows_block_held4_t1024_f32(const float* x, float* out, long long rows, long long R,
                                       float by) {
    softmax_rows_held<float, false, 4, false>(x, out, rows, R, by);
}

#endif  // SC_TUNING
