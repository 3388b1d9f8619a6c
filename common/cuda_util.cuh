/*
cuda_util.cuh - the device basics that flce/, llmc/ and dev/ share: float <-> bf16 element
access, the 16-byte vector Packed128 with its loads and stores (and 8 elements as fp32 through
them), the 16-byte alignment test that guards them, and a fixed-order block sum in double.

Nothing here reports or exits on an error, so that the library (flce/) can use all of it; the
programs' exiting checks are in cuda_check.cuh.
*/
#ifndef COMMON_CUDA_UTIL_CUH
#define COMMON_CUDA_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

// element access for the two storage types
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// 16 bytes of T (8 bf16 or 4 fp32), loaded and stored as one access through the int4 view
// (the pointer must pass aligned16). The int4 member keeps a loaded vector one 128-bit value
// to the compiler until its elements are read: flce's row kernels were tuned in this form, and
// an alignas(16) array of T compiles them to other code.
template <typename T> struct Packed128 {
    static constexpr int size = (int)(16 / sizeof(T));
    union { int4 raw; T v[size]; };
    __device__ __forceinline__ T &operator[](int i) { return v[i]; }
    __device__ __forceinline__ const T &operator[](int i) const { return v[i]; }
};

template <typename T>
__device__ __forceinline__ Packed128<T> load128(const T *p) {
    Packed128<T> r;
    r.raw = *reinterpret_cast<const int4 *>(p);
    return r;
}

// streaming load: data read once, not worth keeping in L1/L2
template <typename T>
__device__ __forceinline__ Packed128<T> load128cs(const T *p) {
    Packed128<T> r;
    r.raw = __ldcs(reinterpret_cast<const int4 *>(p));
    return r;
}

template <typename T>
__device__ __forceinline__ void store128(T *p, const Packed128<T> &x) {
    *reinterpret_cast<int4 *>(p) = x.raw;
}

// 8 consecutive elements in registers as fp32, loaded or stored with 16-byte accesses (aligned16
// p): 8 fp32 are two, 8 bf16 one (a bf16 widens exactly)
__device__ __forceinline__ void load8(float (&x)[8], const float *p) {
    const Packed128<float> a = load128(p), b = load128(p + 4);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        x[j] = a[j];
        x[4 + j] = b[j];
    }
}
__device__ __forceinline__ void load8(float (&x)[8], const __nv_bfloat16 *p) {
    const Packed128<__nv_bfloat16> a = load128(p);
#pragma unroll
    for (int j = 0; j < 8; j++) x[j] = to_float(a[j]);
}
__device__ __forceinline__ void store8(float *p, const float (&x)[8]) {
    Packed128<float> a, b;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        a[j] = x[j];
        b[j] = x[4 + j];
    }
    store128(p, a);
    store128(p + 4, b);
}

static inline int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// The sum of every thread's acc over the block (blockDim.x a multiple of 32), returned on
// thread 0 only: warps by shuffles, then thread 0 adds the warp sums in order, so the result
// does not depend on timing (deterministic). Call from all threads.
static __device__ double block_sum_f64(double acc) {
    __shared__ double warp_sums[32];
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
    __syncthreads();
    double total = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < (int)(blockDim.x / 32); w++) total += warp_sums[w];
    return total;
}

#endif // COMMON_CUDA_UTIL_CUH
