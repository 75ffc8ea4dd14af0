// Matrix product kernels for softcuda: C[z] = A[z] @ B[z], float32 (_f32) and float64 (_f64).
//
// Operands are described by element strides, so transposed and strided views need no copy:
//   A[z][m][k] = A[z*sab + m*sam + k*sak],  B[z][k][n] = B[z*sbb + k*sbk + n*sbn]
// (a batch stride of 0 broadcasts that operand over the batch).  C is C-contiguous (batch, M, N);
// gridDim.z is the batch count.
//
// gemm_naive_<suf>: one thread per element of C, no tiling, no shared memory (the baseline).
//
// gemm_tiled_<a><b>[_bk16]_<suf>: shared-memory tiling with register blocking.
//   * 256 threads as a 16x16 grid; each thread owns a TM x TN = (2W) x (2W) block of C, where W
//     is the elements per 16-byte vector (4 for float, 2 for double).  Block tile BM = BN = 16*TM:
//     128x128 for float32, 64x64 for float64; BK = 8 (or 16 for the _bk16 float32 variant).
//   * A thread's rows are two runs of W at ty*W and BM/2 + ty*W (columns likewise), so every
//     fragment read from shared memory is one 16-byte access and a warp reads at most 2 distinct
//     A vectors (broadcast) and 16 consecutive B vectors (conflict-free).
//   * Shared tiles are stored k-major (As[k][m], Bs[k][n]) and double-buffered: the global loads
//     of tile t+1 go to registers while tile t is multiplied, so one barrier per tile suffices.
//   * How a tile is loaded depends on the layout, chosen at make time (letters in the name):
//       A: 'k' = A's k stride is 1 (row-major A): 16-byte loads along k, transposed into As;
//          'm' = A's m stride is 1 (A is a transposed view): 16-byte loads along m;
//          's' = anything else: one element per load.
//       B: 'n' = B's n stride is 1 (row-major B): 16-byte loads along n;
//          'k' = B's k stride is 1 (B is a transposed view): 16-byte loads along k, transposed;
//          's' = anything else.
//     A vector mode needs the vector dim a multiple of W, the other strides multiples of W and a
//     16-byte-aligned base, so each vector is wholly inside or wholly outside the matrix.
//   * Edge tiles: loads outside the matrix read as 0; stores outside C are skipped.
// Accumulation is in the input type (float32 sums of K products, in k order per element).

#define GEMM_THREADS 256

template <typename T>
struct alignas(16) MPack {
    static constexpr int W = 16 / sizeof(T);
    T v[W];
};

// LAY_KT: like LAY_K (vectors along k) but neighbouring threads take neighbouring rows, so the
// transposing shared-memory stores hit 32 distinct banks (LAY_K's 4-threads-per-row mapping
// conflicts 2-way at BK 16); each warp load then uses half of 32 sectors, the other half
// coming from L1 for the warp that loads the next k vector.
enum { LAY_K = 0, LAY_MN = 1, LAY_S = 2, LAY_KT = 3 };

template <class T>
__device__ __forceinline__ void gemm_naive(const T* __restrict__ A, const T* __restrict__ B,
                                           T* __restrict__ C, int M, int N, int K, long long sam,
                                           long long sak, long long sab, long long sbk,
                                           long long sbn, long long sbb) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    const long long z = blockIdx.z;
    const T* a = A + z * sab + m * sam;
    const T* b = B + z * sbb + n * sbn;
    T acc = T(0);
    for (int k = 0; k < K; ++k) acc = fma(a[k * sak], b[k * sbk], acc);
    C[z * M * (long long)N + (long long)m * N + n] = acc;
}

// Skewed k-major shared tile (SW: the _sw variants, LAY_K only, BK 16): row k starts
// skw(k) = 8 * (k / 8 % 2) floats later than the plain [BK][MN + W] layout (one slack row absorbs
// it).  LAY_K's transposing stores put a warp's 8 rows x 4 k-quads at columns 8a..8a+7 of rows
// 4q+j; with rows 132 floats apart, quads q and q+2 land 32 banks apart (2-way conflict).  The
// skew moves quads 2 and 3 by 8 banks: all 32 stores of an instruction hit distinct banks.  The
// skew keeps rows 16-byte aligned, leaves the fragment reads' bank pattern unchanged, and is a
// compile-time constant for each unrolled kk, so the reads cost no extra address register.
template <bool SW>
__device__ __forceinline__ constexpr int skw(int k) {
    return SW ? ((k >> 3) & 1) << 3 : 0;
}

// One operand tile (rows x BK for A, BK x cols for B) staged through registers.
// MN is the tile extent along m (for A) or n (for B); `s_mn` / `s_k` are the element strides.
template <class T, int MN, int BK, int LAY, bool SW = false>
struct TileLoader {
    using P = MPack<T>;
    static constexpr int W = P::W;
    static constexpr int NV = MN * BK / (W * GEMM_THREADS);  // 16-byte packs per thread
    static_assert(NV >= 1 && NV * W * GEMM_THREADS == MN * BK, "tile does not split evenly");
    P r[NV];

    // Load the tile whose corner is (mn0, k0) of a matrix with extents (ext_mn, K).
    __device__ __forceinline__ void load(const T* __restrict__ base, int tid, int mn0, int k0,
                                         int ext_mn, int K, long long s_mn, long long s_k) {
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            if (LAY == LAY_K) {  // vectors along k
                const int v = tid + i * GEMM_THREADS;
                const int mn = mn0 + v / (BK / W), k = k0 + (v % (BK / W)) * W;
                if (mn < ext_mn && k < K)
                    r[i] = *reinterpret_cast<const P*>(base + mn * s_mn + k);
                else
                    zero(r[i]);
            } else if (LAY == LAY_KT) {
                const int v = tid + i * GEMM_THREADS;
                const int mn = mn0 + v % MN, k = k0 + (v / MN) * W;
                if (mn < ext_mn && k < K)
                    r[i] = *reinterpret_cast<const P*>(base + mn * s_mn + k);
                else
                    zero(r[i]);
            } else if (LAY == LAY_MN) {  // vectors along m (A) or n (B)
                const int v = tid + i * GEMM_THREADS;
                const int mn = mn0 + (v % (MN / W)) * W, k = k0 + v / (MN / W);
                if (mn < ext_mn && k < K)
                    r[i] = *reinterpret_cast<const P*>(base + k * s_k + mn);
                else
                    zero(r[i]);
            } else {  // single elements, m/n fastest across threads
#pragma unroll
                for (int j = 0; j < W; ++j) {
                    const int e = tid + (i * W + j) * GEMM_THREADS;
                    const int mn = mn0 + e % MN, k = k0 + e / MN;
                    r[i].v[j] = (mn < ext_mn && k < K) ? base[mn * s_mn + k * s_k] : T(0);
                }
            }
        }
    }

    // Store into a k-major shared tile sm[BK][MN + W] (the +W pad keeps rows 16-byte aligned
    // and spreads the transposing stores of LAY_K over more banks).
    __device__ __forceinline__ void store(T (*sm)[MN + W], int tid) const {
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            if (LAY == LAY_K) {
                const int v = tid + i * GEMM_THREADS;
                const int mn = v / (BK / W), k = (v % (BK / W)) * W;
#pragma unroll
                for (int j = 0; j < W; ++j) sm[k + j][skw<SW>(k) + mn] = r[i].v[j];
            } else if (LAY == LAY_KT) {
                const int v = tid + i * GEMM_THREADS;
                const int mn = v % MN, k = (v / MN) * W;
#pragma unroll
                for (int j = 0; j < W; ++j) sm[k + j][mn] = r[i].v[j];
            } else if (LAY == LAY_MN) {
                const int v = tid + i * GEMM_THREADS;
                *reinterpret_cast<P*>(&sm[v / (MN / W)][(v % (MN / W)) * W]) = r[i];
            } else {
#pragma unroll
                for (int j = 0; j < W; ++j) {
                    const int e = tid + (i * W + j) * GEMM_THREADS;
                    sm[e / MN][e % MN] = r[i].v[j];
                }
            }
        }
    }

    __device__ __forceinline__ static void zero(P& p) {
#pragma unroll
        for (int j = 0; j < W; ++j) p.v[j] = T(0);
    }
};

// A thread's fragment of VW consecutive elements, read from shared memory in one access.
template <typename T, int VW>
struct alignas(VW * sizeof(T)) Frag {
    T v[VW];
};

// VW: elements per fragment read (TM = TN = 2*VW, block tile 16*TM square).
// WL: 0 = a warp is 2 rows x 16 columns of the 16x16 thread grid; 1 = a warp is 4 x 8, which
//     halves the distinct B fragments a warp reads per step (fewer shared-memory wavefronts).
// PF: 0 = the next tile's global loads sit under `if (more)`; the compiler then merges that
//        block with the stores and issues the loads after the whole multiply (no latency hidden);
//     1 = loads issued unconditionally at the top of each step (a tile past K reads as zeros
//        without touching memory) and stored unconditionally, so they overlap the multiply.
// SW: skew the transposed (LAY_K) shared tiles, see skw().
template <class T, int BK, int VW, int WL, int LA, int LB, int PF = 0, bool SW = false>
__device__ __forceinline__ void gemm_tiled(const T* __restrict__ A, const T* __restrict__ B,
                                           T* __restrict__ C, int M, int N, int K, long long sam,
                                           long long sak, long long sab, long long sbk,
                                           long long sbn, long long sbb) {
    using F = Frag<T, VW>;
    constexpr int W = MPack<T>::W;  // global-load vector width (16 bytes)
    constexpr int TM = 2 * VW, BM = 16 * TM, BN = BM;
    // One slack row per stage when skewed (SW), see skw().
    __shared__ __align__(16) T As[2][BK + SW][BM + W];
    __shared__ __align__(16) T Bs[2][BK + SW][BN + W];

    const int tid = threadIdx.x;
    int tx, ty;
    if (WL == 0) {
        tx = tid % 16;
        ty = tid / 16;
    } else {
        const int warp = tid / 32, lane = tid % 32;
        tx = (warp % 2) * 8 + lane % 8;
        ty = (warp / 2) * 4 + lane / 8;
    }
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const long long z = blockIdx.z;
    A += z * sab;
    B += z * sbb;
    C += z * M * (long long)N;

    constexpr bool SWA = SW && LA == LAY_K, SWB = SW && LB == LAY_K;
    TileLoader<T, BM, BK, LA, SWA> la;
    TileLoader<T, BN, BK, LB, SWB> lb;
    T acc[TM][TM];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TM; ++j) acc[i][j] = T(0);

    const int ktiles = (K + BK - 1) / BK;
    la.load(A, tid, m0, 0, M, K, sam, sak);
    lb.load(B, tid, n0, 0, N, K, sbn, sbk);
    la.store(As[0], tid);
    lb.store(Bs[0], tid);
    __syncthreads();

    for (int kt = 0; kt < ktiles; ++kt) {
        const int cur = kt & 1;
        const bool more = PF || kt + 1 < ktiles;
        if (more) {  // issue next tile's global loads now; they land while we compute
            la.load(A, tid, m0, (kt + 1) * BK, M, K, sam, sak);
            lb.load(B, tid, n0, (kt + 1) * BK, N, K, sbn, sbk);
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            // (a skewed row runs up to 8 floats past its nominal end, into the next row)
            const F a0 = *reinterpret_cast<const F*>(&As[cur][kk][ty * VW + skw<SWA>(kk)]);
            const F a1 = *reinterpret_cast<const F*>(&As[cur][kk][BM / 2 + ty * VW + skw<SWA>(kk)]);
            const F b0 = *reinterpret_cast<const F*>(&Bs[cur][kk][tx * VW + skw<SWB>(kk)]);
            const F b1 = *reinterpret_cast<const F*>(&Bs[cur][kk][BN / 2 + tx * VW + skw<SWB>(kk)]);
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                const T av = i < VW ? a0.v[i % VW] : a1.v[i % VW];
#pragma unroll
                for (int j = 0; j < TM; ++j) {
                    const T bv = j < VW ? b0.v[j % VW] : b1.v[j % VW];
                    acc[i][j] = fma(av, bv, acc[i][j]);
                }
            }
        }
        if (more) {  // the other buffer was last read before the previous barrier
            la.store(As[cur ^ 1], tid);
            lb.store(Bs[cur ^ 1], tid);
        }
        __syncthreads();
    }

    // Vector stores need every row of C to start aligned: N a multiple of VW.
    const bool vec_c = (N % VW) == 0;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + (i < VW ? ty * VW + i : BM / 2 + ty * VW + (i - VW));
        if (m >= M) continue;
        T* crow = C + (long long)m * N;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + h * (BN / 2) + tx * VW;
            if (vec_c) {
                if (n < N) {
                    F f;
#pragma unroll
                    for (int j = 0; j < VW; ++j) f.v[j] = acc[i][h * VW + j];
                    *reinterpret_cast<F*>(crow + n) = f;
                }
            } else {
#pragma unroll
                for (int j = 0; j < VW; ++j)
                    if (n + j < N) crow[n + j] = acc[i][h * VW + j];
            }
        }
    }
}

#define SC_GEMM_ARGS(T)                                                                         \
    const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K,  \
        long long sam, long long sak, long long sab, long long sbk, long long sbn, long long sbb
#define SC_GEMM_PASS A, B, C, M, N, K, sam, sak, sab, sbk, sbn, sbb

// CFG is a name part for the tile configuration: (BK, VW, WL, min blocks per SM).
#define SC_TILED(T, SUF, CFG, BK, VW, WL, MINB, LA, LAN, LB, LBN)                             \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, MINB)                           \
        gemm_tiled_##LAN##LBN##CFG##_##SUF(SC_GEMM_ARGS(T)) {                                  \
        gemm_tiled<T, BK, VW, WL, LA, LB>(SC_GEMM_PASS);                                       \
    }

// Like SC_TILED with the PF / SW options of gemm_tiled.
#define SC_TILED_X(T, SUF, CFG, BK, VW, WL, MINB, PF, SW, LA, LAN, LB, LBN)                   \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, MINB)                           \
        gemm_tiled_##LAN##LBN##CFG##_##SUF(SC_GEMM_ARGS(T)) {                                  \
        gemm_tiled<T, BK, VW, WL, LA, LB, PF, SW>(SC_GEMM_PASS);                               \
    }

#define SC_TILED_ALL(T, SUF, CFG, BK, VW, WL, MINB)                                            \
    SC_TILED(T, SUF, CFG, BK, VW, WL, MINB, LAY_K, k, LAY_MN, n)                               \
    SC_TILED(T, SUF, CFG, BK, VW, WL, MINB, LAY_K, k, LAY_K, k)                                \
    SC_TILED(T, SUF, CFG, BK, VW, WL, MINB, LAY_K, k, LAY_S, s)                                \
    SC_TILED(T, SUF, CFG, BK, VW, WL, MINB, LAY_MN, m, LAY_MN, n)                              \
    SC_TILED(T, SUF, CFG, BK, VW, WL, MINB, LAY_MN, m, LAY_K, k)                               \
    SC_TILED(T, SUF, CFG, BK, VW, WL, MINB, LAY_MN, m, LAY_S, s)                               \
    SC_TILED(T, SUF, CFG, BK, VW, WL, MINB, LAY_S, s, LAY_MN, n)                               \
    SC_TILED(T, SUF, CFG, BK, VW, WL, MINB, LAY_S, s, LAY_K, k)                                \
    SC_TILED(T, SUF, CFG, BK, VW, WL, MINB, LAY_S, s, LAY_S, s)

#define SC_NAIVE(T, SUF)                                                                       \
    extern "C" __global__ void gemm_naive_##SUF(SC_GEMM_ARGS(T)) { gemm_naive<T>(SC_GEMM_PASS); }

// Two builds of this file (cuda_kernels.py): without SC_TUNING, the kernels softcuda launches;
// with it, only the tuning variants the benchmark and tests time against them.  Splitting them
// keeps the first compile of a process (NVRTC, cold kernel cache) to what a sweep runs.
#ifndef SC_TUNING
SC_NAIVE(float, f32)
SC_NAIVE(double, f64)
// Production configurations (cuda_kernels.py picks "_big" or "_small" by grid size; for
// row-major a @ b it uses _pf, below, in place of _big):
//   float32 big: 128x128 tile, 8x8 per thread, BK 16 (8 for element-wise loads);  small: 64x64, 4x4 per thread, BK 16
//   float64 big: 64x64 tile, 4x4 per thread, BK 8 (float64 is correct, not tuned)
SC_TILED(float, f32, _big, 16, 4, 1, 2, LAY_K, k, LAY_MN, n)
SC_TILED(float, f32, _big, 16, 4, 1, 2, LAY_K, k, LAY_K, k)
SC_TILED(float, f32, _big, 16, 4, 1, 2, LAY_MN, m, LAY_MN, n)
SC_TILED(float, f32, _big, 16, 4, 1, 2, LAY_MN, m, LAY_K, k)
// Element-wise loading layouts stage twice the registers per operand at BK 16 and spill, so
// they keep BK 8.
SC_TILED(float, f32, _big, 8, 4, 1, 2, LAY_K, k, LAY_S, s)
SC_TILED(float, f32, _big, 8, 4, 1, 2, LAY_MN, m, LAY_S, s)
SC_TILED(float, f32, _big, 8, 4, 1, 2, LAY_S, s, LAY_MN, n)
SC_TILED(float, f32, _big, 8, 4, 1, 2, LAY_S, s, LAY_K, k)
SC_TILED(float, f32, _big, 8, 4, 1, 2, LAY_S, s, LAY_S, s)
SC_TILED_ALL(float, f32, _small, 16, 2, 1, 2)
SC_TILED_ALL(double, f64, _big, 8, 2, 1, 2)
// Row-major a @ b at the _big tile with loads overlapped with the multiply: what
// cuda_kernels._MM_KN_BIG takes for layout kn (the candidates it was measured against are below).
SC_TILED_X(float, f32, _pf, 16, 4, 1, 2, 1, false, LAY_K, k, LAY_MN, n)
#else
// Tuning variants of the row-major float32 layout, timed against each other by the benchmark:
// _t<BK>_<WL>_<MINB>.
SC_TILED(float, f32, _t8_0_2, 8, 4, 0, 2, LAY_K, k, LAY_MN, n)
SC_TILED(float, f32, _t16_0_2, 16, 4, 0, 2, LAY_K, k, LAY_MN, n)
SC_TILED(float, f32, _t8_1_2, 8, 4, 1, 2, LAY_K, k, LAY_MN, n)
SC_TILED(float, f32, _t16_1_2, 16, 4, 1, 2, LAY_K, k, LAY_MN, n)
SC_TILED(float, f32, _t8_1_1, 8, 4, 1, 1, LAY_K, k, LAY_MN, n)
SC_TILED(float, f32, _t16_1_1, 16, 4, 1, 1, LAY_K, k, LAY_MN, n)
SC_TILED(float, f32, _t16_0_1, 16, 4, 0, 1, LAY_K, k, LAY_MN, n)
// _u1: the big configuration with LAY_KT loads for the k-contiguous operands.
SC_TILED(float, f32, _u1, 16, 4, 1, 2, LAY_KT, k, LAY_MN, n)
SC_TILED(float, f32, _u1, 16, 4, 1, 2, LAY_KT, k, LAY_KT, k)
SC_TILED(float, f32, _u1, 16, 4, 1, 2, LAY_MN, m, LAY_KT, k)
SC_TILED(float, f32, _u2, 8, 4, 1, 2, LAY_KT, k, LAY_MN, n)
// Row-major a @ b candidates for the A load path (the _big configuration otherwise), measured
// against _pf (above, the default for layout kn: cuda_kernels._MM_KN_BIG):
//   _sw: skewed (conflict-free) transposed A stores;  _pfsw: _sw with _pf's overlapped loads
//   (spills 64 bytes);  _pfkt: overlapped loads with the LAY_KT (row-fastest) A mapping;
//   _pf8: overlapped loads at BK 8 (whose LAY_K stores are conflict-free unskewed).
SC_TILED_X(float, f32, _sw, 16, 4, 1, 2, 0, true, LAY_K, k, LAY_MN, n)
SC_TILED_X(float, f32, _pfsw, 16, 4, 1, 2, 1, true, LAY_K, k, LAY_MN, n)
SC_TILED_X(float, f32, _pfkt, 16, 4, 1, 2, 1, false, LAY_KT, k, LAY_MN, n)
SC_TILED_X(float, f32, _pf8, 8, 4, 1, 2, 1, false, LAY_K, k, LAY_MN, n)
#endif  // SC_TUNING
