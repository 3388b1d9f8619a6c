/*
global_norm.cuh - the squared L2 norm of the (fp32) gradients, and the clipping factor from it,
without a host synchronisation.

  global_norm_squared  out[0] = (accumulate ? out[0] : 0) + sum of grads[i]^2
  clip_scale           scale_out[0] = norm > max_norm ? max_norm / norm : 1, norm = sqrt(norm_sq[0])

Why a fixed grid and a scratch: a deterministic sum needs a fixed order. Each of
GLOBAL_NORM_BLOCKS blocks sums a fixed strided subset of the elements (thread partials, then
block_reduce_sum's fixed tree) into scratch[block]; one block then reduces the partials in a
fixed tree and adds the total into out[0]. The same n gives the same bits every time.
To sum over several tensors call it once per tensor, accumulate = 0 for the first and 1 after
(all on one stream; the scratch may be shared by the calls, stream order protects it).

  sum_in_order         out[0] = x[0] + x[1] + ... + x[n-1], left to right

Several GPUs: each slice of the flat gradient vector gets its own global_norm_squared, and
sum_in_order adds the slices' sums in rank order: under ZeRO-1 each rank sums its own slice
and the partial sums are all-gathered; under ZeRO-0 a rank sums every slice itself. Both give
the same bits, and one slice (one GPU) the same as a plain global_norm_squared.
*/
#ifndef LLMC_GLOBAL_NORM_CUH
#define LLMC_GLOBAL_NORM_CUH

#include "cuda_common.cuh"

#define GLOBAL_NORM_BLOCKS 512
#define GLOBAL_NORM_THREADS 512

// floats of scratch global_norm_squared needs (any n)
static inline size_t global_norm_scratch_floats(void) { return GLOBAL_NORM_BLOCKS; }

static __global__ void global_norm_partial_kernel(float *partials, const float *grads, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float g = grads[i];
        acc += g * g;
    }
    const float block_sum = block_reduce_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = block_sum;
}

// one block of GLOBAL_NORM_BLOCKS threads, one partial each
static __global__ void global_norm_final_kernel(float *out, const float *partials, int accumulate) {
    const float total = block_reduce_sum(partials[threadIdx.x]);
    if (threadIdx.x == 0) out[0] = accumulate ? out[0] + total : total;
}

// out[0] (device) = or += the sum of squares of grads[0..n); scratch: global_norm_scratch_floats()
static inline void global_norm_squared(float *out, const float *grads, size_t n, float *scratch, int accumulate,
                                       cudaStream_t s) {
    global_norm_partial_kernel<<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_THREADS, 0, s>>>(scratch, grads, n);
    cudaLaunchCheck("global_norm_partial_kernel");
    global_norm_final_kernel<<<1, GLOBAL_NORM_BLOCKS, 0, s>>>(out, scratch, accumulate);
    cudaLaunchCheck("global_norm_final_kernel");
}

static __global__ void sum_in_order_kernel(float *out, const float *x, int n) {
    float acc = x[0];
    for (int i = 1; i < n; i++) acc += x[i];
    out[0] = acc;
}

// out[0] (device) = the sum of x[0..n) (device, n >= 1) in index order: a fixed order, so that
// the bits do not depend on a reduction tree's shape.
static inline void sum_in_order(float *out, const float *x, int n, cudaStream_t s) {
    sum_in_order_kernel<<<1, 1, 0, s>>>(out, x, n);
    cudaLaunchCheck("sum_in_order_kernel");
}

static __global__ void clip_scale_kernel(float *scale_out, const float *norm_sq, float max_norm) {
    const float norm = sqrtf(norm_sq[0]);
    scale_out[0] = (max_norm > 0.0f && norm > max_norm) ? max_norm / norm : 1.0f;
}

// scale_out[0] (device) = the gradient clipping factor for the squared norm norm_sq[0] (device);
// max_norm <= 0 means no clipping (factor 1). Feed it to adamw_update_scaled.
static inline void clip_scale(float *scale_out, const float *norm_sq, float max_norm, cudaStream_t s) {
    clip_scale_kernel<<<1, 1, 0, s>>>(scale_out, norm_sq, max_norm);
    cudaLaunchCheck("clip_scale_kernel");
}

#endif // LLMC_GLOBAL_NORM_CUH
