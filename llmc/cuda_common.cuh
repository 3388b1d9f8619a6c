/*
cuda_common.cuh - what every CUDA module of the trainer shares: the bf16 activation type, the
conventions below, and warp and block sums; with them the common/ layer's check macros
(cuda_check.cuh) and 16-byte vector access (cuda_util.cuh).

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

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.cuh"  // cudaCheck, cudaLaunchCheck, cublasCheck, require (common/)
#include "cuda_util.cuh"   // to_float, Packed128, load128, store128, aligned16 (common/)

typedef __nv_bfloat16 floatX;

static inline size_t llmc_ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
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
