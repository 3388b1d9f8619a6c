/*
cuda_common.cuh - what every CUDA module of the trainer shares: the bf16 activation type,
check macros that name the failing call, 16-byte vector access, and small index helpers.

Conventions of the kernels in llmc/ (the .cuh files):
  - activations and parameters are floatX (bf16), row-major (B*T, C) unless stated;
  - parameter gradients are fp32 and every backward kernel *adds* into them (+=), so gradient
    accumulation over micro-steps needs nothing more than zeroing at the first one;
  - activation gradients (d of a floatX tensor) are floatX; "dinp +=" vs "dinp =" is stated per
    function;
  - every index that can pass 2^31 (B*T*C at B >= 171, T = 1024, C = 12288; B*NH*T*T) is
    size_t / int64_t;
  - everything runs on the stream it is given and never synchronises the host;
  - reductions are deterministic: no floating-point atomics, fixed reduction orders.
*/
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef __nv_bfloat16 floatX;

static inline void cuda_check_at(cudaError_t err, const char *what, const char *file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "[CUDA ERROR] %s: %s\n  at %s:%d\n", what, cudaGetErrorString(err), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(call) cuda_check_at((call), #call, __FILE__, __LINE__)
// after a kernel launch: the launch error, named by the kernel
#define cudaLaunchCheck(name) cuda_check_at(cudaGetLastError(), "launch of " name, __FILE__, __LINE__)

static inline void cublas_check_at(cublasStatus_t st, const char *what, const char *file, int line) {
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "[cuBLAS ERROR] %s: status %d\n  at %s:%d\n", what, (int)st, file, line);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(call) cublas_check_at((call), #call, __FILE__, __LINE__)

static inline size_t llmc_ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// 16 bytes of T: 8 bf16 or 4 fp32, loaded and stored as one access
template <typename T> struct alignas(16) Packed128 {
    static constexpr int size = (int)(16 / sizeof(T));
    T v[size];
    __device__ __forceinline__ T &operator[](int i) { return v[i]; }
    __device__ __forceinline__ const T &operator[](int i) const { return v[i]; }
};

template <typename T>
__device__ __forceinline__ Packed128<T> load128(const T *p) {
    Packed128<T> r;
    *reinterpret_cast<int4 *>(r.v) = *reinterpret_cast<const int4 *>(p);
    return r;
}

// streaming load: data read once, not worth keeping in L1/L2
template <typename T>
__device__ __forceinline__ Packed128<T> load128cs(const T *p) {
    Packed128<T> r;
    *reinterpret_cast<int4 *>(r.v) = __ldcs(reinterpret_cast<const int4 *>(p));
    return r;
}

template <typename T>
__device__ __forceinline__ void store128(T *p, const Packed128<T> &x) {
    *reinterpret_cast<int4 *>(p) = *reinterpret_cast<const int4 *>(x.v);
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(floatX x) { return __bfloat162float(x); }

__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), the same on every thread;
// fixed order, so deterministic. Uses 33 floats of shared memory; call from all threads.
__device__ __forceinline__ float block_reduce_sum(float v) {
    __shared__ float warp_sums[33];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    v = warp_reduce_sum(v);
    __syncthreads();  // warp_sums may still be read by a previous call
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < n_warps ? warp_sums[lane] : 0.0f;
        w = warp_reduce_sum(w);
        if (lane == 0) warp_sums[32] = w;
    }
    __syncthreads();
    return warp_sums[32];
}

#endif // LLMC_CUDA_COMMON_CUH
