// Reduction kernels for softcuda: sum, mean, max over all elements or over one axis, in
// float32 (_f32) and float64 (_f64).
//
// Accumulation: sum and mean accumulate in double for BOTH dtypes (the kernels are bound by
// memory bandwidth, so the wider adds cost nothing measurable and a float32 sum of 2^28 terms
// stays within float32 rounding of the exact result).  max accumulates in the input type and
// propagates NaN like numpy.max.
//
// Determinism: no atomics.  Every partial result is combined in an order fixed by the grid and
// block size alone, so the same launch on the same input gives bit-identical output.
//
// Launch contract (cuda_kernels.py upholds it): inputs are C-contiguous; block size is
// SC_RED_THREADS (256) for every kernel here except reduce_all_stage2 (any multiple of 32 up to
// 1024) and reduce_cols_tile (32 x SC_COL_LANES, the same 256 threads in two dimensions); `scale` multiplies the final sum (1/count for mean, 1 for sum, ignored for max).

#define SC_RED_THREADS 256

template <typename T>
struct alignas(16) RPack {
    static constexpr int W = 16 / sizeof(T);
    T v[W];
};

struct RedSum {
    template <class A> __device__ static A identity() { return A(0); }
    template <class A> __device__ static A combine(A x, A y) { return x + y; }
    template <class T, class A> __device__ static T finish(A x, double scale) {
        return T(double(x) * scale);
    }
};
// -inf without <math.h> macros (NVRTC compiles without the host headers).
__device__ __forceinline__ void sc_neg_inf(float& x) { x = __int_as_float(0xff800000); }
__device__ __forceinline__ void sc_neg_inf(double& x) { x = __longlong_as_double(0xfff0000000000000ULL); }

struct RedMax {
    template <class A> __device__ static A identity() { A x; sc_neg_inf(x); return x; }
    // Keeps the first NaN seen: y wins only if larger or NaN, a NaN in x is never replaced.
    template <class A> __device__ static A combine(A x, A y) { return (y > x || y != y) ? y : x; }
    template <class T, class A> __device__ static T finish(A x, double) { return T(x); }
};

template <class Op, class T> struct AccOf { using type = double; };
template <class T> struct AccOf<RedMax, T> { using type = T; };

template <class Op, class A>
__device__ __forceinline__ A warp_reduce(A x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x = Op::combine(x, __shfl_down_sync(0xffffffffu, x, off));
    return x;  // valid in lane 0
}

// Whole-block reduction, result valid in thread 0.  Ends with a barrier so it can be called
// again in a loop without a fast warp overwriting `warp_part` before warp 0 has read it.
template <class Op, class A>
__device__ __forceinline__ A block_reduce(A x) {
    __shared__ A warp_part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    x = warp_reduce<Op>(x);
    if (lane == 0) warp_part[warp] = x;
    __syncthreads();
    if (warp == 0) {
        x = lane < nwarps ? warp_part[lane] : Op::template identity<A>();
        x = warp_reduce<Op>(x);
    }
    __syncthreads();
    return x;
}

// Stage 1 of an all-element reduction: block b writes partials[b], fixed grid-stride order.
template <class Op, class T, bool VEC>
__device__ __forceinline__ void reduce_all_stage1(const T* __restrict__ x, long long n,
                                                  typename AccOf<Op, T>::type* __restrict__ partials) {
    using A = typename AccOf<Op, T>::type;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    // Two accumulators halve the dependent-add chain so more loads stay in flight.
    A acc0 = Op::template identity<A>(), acc1 = Op::template identity<A>();
    long long head = 0;
    if (VEC) {
        using P = RPack<T>;
        const long long nv = n / P::W;
        const P* xv = reinterpret_cast<const P*>(x);
        // Four independent 16-byte loads per trip keep enough bytes in flight to saturate HBM;
        // a block's four loads cover 4 * blockDim consecutive vectors (DRAM-page friendly).
        const long long bstep = 4LL * blockDim.x;
        long long i = (long long)blockIdx.x * bstep + threadIdx.x;
        const long long gstep = (long long)gridDim.x * bstep;
        for (; i + 3 * blockDim.x < nv; i += gstep) {
            P p[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) p[u] = xv[i + u * blockDim.x];
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int j = 0; j < P::W; j += 2) {
                    acc0 = Op::combine(acc0, A(p[u].v[j]));
                    acc1 = Op::combine(acc1, A(p[u].v[j + 1]));
                }
        }
        // Leftover vectors (fewer than one block trip): each covered once, by a fixed thread.
        for (; i < nv; i += blockDim.x) {
            const P p = xv[i];
#pragma unroll
            for (int j = 0; j < P::W; j += 2) {
                acc0 = Op::combine(acc0, A(p.v[j]));
                acc1 = Op::combine(acc1, A(p.v[j + 1]));
            }
        }
        head = nv * P::W;
    }
    for (long long i = head + tid; i < n; i += step) acc0 = Op::combine(acc0, A(x[i]));
    A acc = block_reduce<Op>(Op::combine(acc0, acc1));
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Stage 2: one block folds the stage-1 partials into out[0].
template <class Op, class T>
__device__ __forceinline__ void reduce_all_stage2(const typename AccOf<Op, T>::type* __restrict__ partials,
                                                  int count, T* __restrict__ out, double scale) {
    using A = typename AccOf<Op, T>::type;
    A acc = Op::template identity<A>();
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc = Op::combine(acc, partials[i]);
    acc = block_reduce<Op>(acc);
    if (threadIdx.x == 0) out[0] = Op::template finish<T>(acc, scale);
}

// Reduce each of `rows` contiguous rows of length R; one whole block per row (long rows).
template <class Op, class T>
__device__ __forceinline__ void reduce_rows_block(const T* __restrict__ x, long long rows,
                                                  long long R, T* __restrict__ out, double scale) {
    using A = typename AccOf<Op, T>::type;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* p = x + row * R;
        A acc = Op::template identity<A>();
        for (long long j = threadIdx.x; j < R; j += blockDim.x) acc = Op::combine(acc, A(p[j]));
        acc = block_reduce<Op>(acc);
        if (threadIdx.x == 0) out[row] = Op::template finish<T>(acc, scale);
    }
}

// Same, one warp per row (short rows: a block would leave most threads idle).
template <class Op, class T>
__device__ __forceinline__ void reduce_rows_warp(const T* __restrict__ x, long long rows,
                                                 long long R, T* __restrict__ out, double scale) {
    using A = typename AccOf<Op, T>::type;
    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long nwarps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long row = warp; row < rows; row += nwarps) {
        const T* p = x + row * R;
        A acc = Op::template identity<A>();
        for (long long j = lane; j < R; j += 32) acc = Op::combine(acc, A(p[j]));
        acc = warp_reduce<Op>(acc);
        if (lane == 0) out[row] = Op::template finish<T>(acc, scale);
    }
}

// x viewed as (outer, R, inner) with inner > 1 (a column sum, a bias's gradient).  A block is
// 32 x SC_COL_LANES threads over 32 neighbouring outputs j of one o and one chunk of the R rows:
// the 32 threads of a warp read 32 neighbouring j (coalesced), the lanes take every
// SC_COL_LANES-th row of the chunk, and shared memory folds the lanes' results in lane order.
// The chunks (gridDim.y) split R so that even one row of outputs fills the GPU (one thread per
// output walking all of R left most SMs idle: a 1024 x 1024 column sum ran on 4 blocks).  With
// one chunk the block writes out; with several it writes its chunk's partial, and
// reduce_cols_fold combines the chunks in chunk order: fixed by the shape, no atomics.
#define SC_COL_LANES 8

template <class Op, class T>
__device__ __forceinline__ void reduce_cols_tile(const T* __restrict__ x, long long R,
                                                 long long inner, long long rows_per_chunk,
                                                 typename AccOf<Op, T>::type* __restrict__ partials,
                                                 long long total, T* __restrict__ out, double scale) {
    using A = typename AccOf<Op, T>::type;
    __shared__ A lanes[SC_COL_LANES][33];
    const long long tiles = (inner + 31) / 32;
    const long long o = blockIdx.x / tiles;
    const long long j = (blockIdx.x - o * tiles) * 32 + threadIdx.x;
    const long long r0 = (long long)blockIdx.y * rows_per_chunk;
    const long long r1 = r0 + rows_per_chunk < R ? r0 + rows_per_chunk : R;
    A acc0 = Op::template identity<A>(), acc1 = Op::template identity<A>();
    if (j < inner) {
        const T* p = x + o * R * inner + j;
        long long r = r0 + threadIdx.y;
        // two accumulators: two loads in flight per thread
        for (; r + SC_COL_LANES < r1; r += 2 * SC_COL_LANES) {
            acc0 = Op::combine(acc0, A(p[r * inner]));
            acc1 = Op::combine(acc1, A(p[(r + SC_COL_LANES) * inner]));
        }
        if (r < r1) acc0 = Op::combine(acc0, A(p[r * inner]));
    }
    lanes[threadIdx.y][threadIdx.x] = Op::combine(acc0, acc1);
    __syncthreads();
    if (threadIdx.y == 0 && j < inner) {
        A acc = lanes[0][threadIdx.x];
#pragma unroll
        for (int y = 1; y < SC_COL_LANES; ++y) acc = Op::combine(acc, lanes[y][threadIdx.x]);
        const long long idx = o * inner + j;
        if (gridDim.y == 1) out[idx] = Op::template finish<T>(acc, scale);
        else partials[(long long)blockIdx.y * total + idx] = acc;
    }
}

// The chunks' partials of reduce_cols_tile, one thread per output, combined in chunk order.
template <class Op, class T>
__device__ __forceinline__ void reduce_cols_fold(const typename AccOf<Op, T>::type* __restrict__ partials,
                                                 int chunks, long long total, T* __restrict__ out,
                                                 double scale) {
    using A = typename AccOf<Op, T>::type;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += step) {
        A acc = partials[o];
        for (int c = 1; c < chunks; ++c) acc = Op::combine(acc, partials[c * total + o]);
        out[o] = Op::template finish<T>(acc, scale);
    }
}

#define SC_RED(NAME, OP, T, SUF)                                                               \
    extern "C" __global__ void __launch_bounds__(SC_RED_THREADS)                               \
        reduce_all_stage1_##NAME##_##SUF(const T* __restrict__ x, long long n,                 \
                                          AccOf<OP, T>::type* __restrict__ partials) {         \
        reduce_all_stage1<OP, T, false>(x, n, partials);                                       \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(SC_RED_THREADS)                               \
        reduce_all_stage1_vec_##NAME##_##SUF(const T* __restrict__ x, long long n,             \
                                              AccOf<OP, T>::type* __restrict__ partials) {     \
        reduce_all_stage1<OP, T, true>(x, n, partials);                                        \
    }                                                                                          \
    extern "C" __global__ void reduce_all_stage2_##NAME##_##SUF(                               \
        const AccOf<OP, T>::type* __restrict__ partials, int count, T* __restrict__ out,       \
        double scale) {                                                                        \
        reduce_all_stage2<OP, T>(partials, count, out, scale);                                 \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(SC_RED_THREADS) reduce_rows_block_##NAME##_##SUF( \
        const T* __restrict__ x, long long rows, long long R, T* __restrict__ out,             \
        double scale) {                                                                        \
        reduce_rows_block<OP, T>(x, rows, R, out, scale);                                      \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(SC_RED_THREADS) reduce_rows_warp_##NAME##_##SUF( \
        const T* __restrict__ x, long long rows, long long R, T* __restrict__ out,             \
        double scale) {                                                                        \
        reduce_rows_warp<OP, T>(x, rows, R, out, scale);                                       \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * SC_COL_LANES) reduce_cols_tile_##NAME##_##SUF( \
        const T* __restrict__ x, long long R, long long inner, long long rows_per_chunk,       \
        AccOf<OP, T>::type* __restrict__ partials, long long total, T* __restrict__ out,       \
        double scale) {                                                                        \
        reduce_cols_tile<OP, T>(x, R, inner, rows_per_chunk, partials, total, out, scale);     \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(SC_RED_THREADS) reduce_cols_fold_##NAME##_##SUF( \
        const AccOf<OP, T>::type* __restrict__ partials, int chunks, long long total,          \
        T* __restrict__ out, double scale) {                                                   \
        reduce_cols_fold<OP, T>(partials, chunks, total, out, scale);                          \
    }

// mean is sum with scale = 1/count, so it shares the sum kernels (the Python side passes scale).
SC_RED(sum, RedSum, float, f32)
SC_RED(sum, RedSum, double, f64)
SC_RED(max, RedMax, float, f32)
SC_RED(max, RedMax, double, f64)
