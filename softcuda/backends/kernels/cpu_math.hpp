// softcuda's float32 math that vectorizes, and the helpers the registry's C++ expressions call
// (ops.OpDef.cuda): the head of kernels/cpu.cpp's library and of every fused kernels' library
// (native.py, native_fused.py), so that one op computes the same bits fused or not.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

typedef int64_t i64;

// the math below must inline into the loops, or they call it per element and do not vectorize
// (gcc stopped inlining sc_exp once softmax's loops called it too)
#define SC_INLINE static inline __attribute__((always_inline))

// ---- float32 math that vectorizes ---------------------------------------------------------------

SC_INLINE float sc_bits_f(int32_t i) { float f; std::memcpy(&f, &i, 4); return f; }
SC_INLINE int32_t sc_int_f(float f) { int32_t i; std::memcpy(&i, &f, 4); return i; }

// e^x: x = n ln2 + r with |r| <= ln2/2 (n rounded by the 1.5 * 2^23 trick), e^r by its Taylor
// polynomial to r^7 (truncation under 1e-8 relative), 2^n applied as two halves so that results
// down to the subnormals and up to overflow come out right.  NaN gives NaN.
SC_INLINE float sc_exp(float x) {
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
// series to s^9 (|s| < 0.172: truncation under 1e-9).  The split is integer arithmetic on the
// bits, without a select: subtracting sqrt(1/2)'s bits borrows from the exponent exactly when the
// mantissa lies below sqrt(2)'s, so the shifted difference is e and the low bits put back over
// sqrt(1/2)'s are m (gcc 13 left the loop scalar, "control flow in loop", when m was halved and e
// raised by a select).  Subnormals are scaled up first; 0 gives -inf, negatives NaN, inf inf.
SC_INLINE float sc_log(float x) {
    bool tiny = x < 1.17549435e-38f;
    float v = tiny ? x * 8388608.0f : x;
    const int32_t half_root = 0x3f3504f3;  // sqrt(1/2)'s bits
    // (in unsigned arithmetic: a negative x's bits would overflow a signed difference; its
    // result is replaced by NaN below)
    int32_t i = (int32_t)((uint32_t)sc_int_f(v) - (uint32_t)half_root);
    int32_t e = i >> 23;  // arithmetic shift: a negative difference (x < sqrt(1/2)) stays so
    float m = sc_bits_f((i & 0x007fffff) + half_root);
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
SC_INLINE float sc_tanh(float x) {
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

SC_INLINE double sc_exp(double x) { return std::exp(x); }
SC_INLINE double sc_log(double x) { return std::log(x); }
SC_INLINE double sc_tanh(double x) { return std::tanh(x); }
// pow, with the exponents that have an exact cheaper form taken apart (the exponent is the same
// for every element, so gcc unswitches the loop and the common case vectorizes): 0.5 is a square
// root (Adam's sqrt of its second moment, which libm's pow ran one element at a time), as numpy's
// power takes it too (-0 gives -0, -inf NaN); 2 is x * x, which pow rounds alike
template <class T>
SC_INLINE T sc_pow_any(T x, T y) {
    if (y == T(0.5)) return std::sqrt(x);
    if (y == T(2)) return x * x;
    return std::pow(x, y);
}
SC_INLINE float sc_pow(float x, float y) { return sc_pow_any(x, y); }
SC_INLINE double sc_pow(double x, double y) { return sc_pow_any(x, y); }

// x > 0, and 0 for NaN, as a number of x's type
template <class T>
SC_INLINE T sc_step(T x) { return x > T(0) ? T(1) : T(0); }

// exp of -|x| only, as on the GPU: nothing overflows, both tails stay accurate.  One division,
// outside the select: a division in each arm is one gcc will not run speculatively, and without
// AVX-512's masks it left every loop holding sigmoid scalar (fused chains 20x slower)
template <class T>
SC_INLINE T sc_sigmoid(T x) {
    T e = sc_exp(x < T(0) ? x : -x);
    T d = T(1) / (T(1) + e);
    return x < T(0) ? e * d : d;
}

