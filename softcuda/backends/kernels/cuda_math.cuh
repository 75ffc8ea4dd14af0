// The device math softcuda's CUDA kernels and the registry's CUDA expressions call (ops.OpDef.cuda):
// the head of elementwise.cu as compiled (cuda_kernels.elementwise_source()) and of every fused
// kernel (cuda_fused.py), so that an op computes the same function fused or not.

__device__ __forceinline__ float sc_exp(float x) { return expf(x); }
__device__ __forceinline__ double sc_exp(double x) { return exp(x); }
__device__ __forceinline__ float sc_log(float x) { return logf(x); }
__device__ __forceinline__ double sc_log(double x) { return log(x); }
__device__ __forceinline__ float sc_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double sc_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float sc_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double sc_pow(double x, double y) { return pow(x, y); }

// Device helpers the registry's unary CUDA expressions call (softcuda/ops.py, OpDef.cuda).
// x > 0 read off the bits: a positive sign, not +0, and at most +inf (above it lie the NaNs,
// which give 0).  A float comparison gave 0 for a positive subnormal on the H200 even in a build
// without -ftz; on the bits nothing is flushed, so every positive value gives 1, as on the CPU.
__device__ inline float sc_step(float x) {
    const int bits = __float_as_int(x);
    return (bits > 0 && bits <= 0x7f800000) ? 1.0f : 0.0f;
}
__device__ inline double sc_step(double x) {
    const long long bits = __double_as_longlong(x);
    return (bits > 0 && bits <= 0x7ff0000000000000LL) ? 1.0 : 0.0;
}
// Never exponentiate a positive number: exp(-|x|) lies in (0, 1], so neither branch overflows
// and 1/(1+e) or e/(1+e) stays accurate for large |x| (gives exactly 0 or 1 in the limit).
template <class T>
__device__ inline T sc_sigmoid(T x) {
    T e = sc_exp(x < T(0) ? x : -x);
    return x < T(0) ? e / (T(1) + e) : T(1) / (T(1) + e);
}

