/*
adamw.cuh - the AdamW step of llm.c / test/gpt2_ref.c, for one parameter tensor of n elements:

  g    = grads * grad_scale                  (grad_scale: e.g. the clipping factor)
  m    = beta1 m + (1 - beta1) g
  v    = beta2 v + (1 - beta2) g^2
  p   -= lr * ( (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * p )

p is the fp32 master weight when `master` is given (then master = the new value, and the bf16
params get it stochastically rounded); without master, p is the bf16 param widened and the
result is rounded to nearest back into params. The decay term is skipped when weight_decay
== 0 (the caller passes 0 for the 1-D tensors: biases, LayerNorm weights).

Why stochastic rounding: an update smaller than half a bf16 ulp of the weight would be lost
every step with round-to-nearest; rounding up with probability (distance to the lower bf16)
/ ulp keeps the bf16 weights unbiased. The random bits come from a counter-based hash of
(seed, element index), so a step is reproducible given the seed; pass a different seed per
tensor and step (e.g. hash of step and tensor number).

Every fp32 operation uses an explicitly rounded intrinsic (__fmul_rn, __fadd_rn, ...): nvcc
would otherwise fuse some multiply-adds, and then a CPU loop could not reproduce the result
bit for bit (the test does exactly that). The cost is nil: the kernel is memory bound.
*/
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include <math.h>
#include <string.h>

#include "cuda_common.cuh"

// the per-step constants, computed once on the host (the bias corrections in double)
typedef struct {
    float lr, beta1, one_minus_beta1, beta2, one_minus_beta2;
    float bias_correction1, bias_correction2;  // 1 - beta^t
    float eps, weight_decay;
} AdamWConsts;

static inline AdamWConsts adamw_consts(float lr, float beta1, float beta2, int t, float eps, float weight_decay) {
    AdamWConsts k;
    k.lr = lr;
    k.beta1 = beta1;
    k.one_minus_beta1 = 1.0f - beta1;
    k.beta2 = beta2;
    k.one_minus_beta2 = 1.0f - beta2;
    k.bias_correction1 = (float)(1.0 - pow((double)beta1, (double)t));
    k.bias_correction2 = (float)(1.0 - pow((double)beta2, (double)t));
    k.eps = eps;
    k.weight_decay = weight_decay;
    return k;
}

// 32 random bits from (seed, index): the splitmix64 finaliser of index + golden * (seed + 1),
// i.e. seed selects a far-apart start of one splitmix64 sequence. Host and device alike.
__host__ __device__ static inline uint32_t adamw_sr_hash(unsigned int seed, size_t idx) {
    uint64_t x = (uint64_t)idx + 0x9E3779B97F4A7C15ull * ((uint64_t)seed + 1ull);
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (uint32_t)x;
}

// bf16 bits of x rounded stochastically with 16 random bits: adding r in [0, 2^16) to the
// fp32 bits and truncating rounds the magnitude up with probability (low 16 bits) / 2^16.
// NaN stays a (quiet) NaN; infinities stay; values within a rounding of the largest finite
// bf16 may round up to infinity, as they can with round-to-nearest.
__host__ __device__ static inline uint16_t adamw_sr_bf16_bits(float x, uint32_t r) {
    uint32_t u;
#ifdef __CUDA_ARCH__
    u = __float_as_uint(x);
#else
    memcpy(&u, &x, sizeof(u));
#endif
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += r & 0xffffu;
    return (uint16_t)(u >> 16);
}

static __global__ void adamw_kernel(floatX *params, float *master, const float *grads, float *m, float *v,
                                    size_t n, AdamWConsts k, float grad_scale, const float *grad_scale_dev,
                                    unsigned int seed) {
    const float scale = grad_scale_dev != NULL ? __fmul_rn(grad_scale, *grad_scale_dev) : grad_scale;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float g = __fmul_rn(grads[i], scale);
        const float mi = __fadd_rn(__fmul_rn(k.beta1, m[i]), __fmul_rn(k.one_minus_beta1, g));
        const float vi = __fadd_rn(__fmul_rn(k.beta2, v[i]), __fmul_rn(k.one_minus_beta2, __fmul_rn(g, g)));
        m[i] = mi;
        v[i] = vi;
        const float p = master != NULL ? master[i] : __bfloat162float(params[i]);
        const float mhat = __fdiv_rn(mi, k.bias_correction1);
        const float vhat = __fdiv_rn(vi, k.bias_correction2);
        float step = __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), k.eps));
        if (k.weight_decay != 0.0f) step = __fadd_rn(step, __fmul_rn(k.weight_decay, p));
        const float pn = __fsub_rn(p, __fmul_rn(k.lr, step));
        if (master != NULL) {
            master[i] = pn;
            params[i] = __ushort_as_bfloat16(adamw_sr_bf16_bits(pn, adamw_sr_hash(seed, i)));
        } else {
            params[i] = __float2bfloat16_rn(pn);
        }
    }
}

// As adamw_update, with the gradient scale multiplied by *grad_scale_dev when that is not NULL:
// the clipping factor computed on the device by clip_scale (global_norm.cuh) is used without
// a host synchronisation.
static inline void adamw_update_scaled(floatX *params, float *master, const float *grads, float *m, float *v,
                                       size_t n, float lr, float beta1, float beta2, int t, float eps,
                                       float weight_decay, float grad_scale, const float *grad_scale_dev,
                                       unsigned int seed, cudaStream_t s) {
    if (t < 1) {
        fprintf(stderr, "[adamw] step t = %d, must be >= 1\n", t);
        exit(EXIT_FAILURE);
    }
    if (n == 0) return;
    const AdamWConsts k = adamw_consts(lr, beta1, beta2, t, eps, weight_decay);
    const int block = 256;
    size_t grid = llmc_ceil_div(n, block);
    if (grid > 132 * 32) grid = 132 * 32;  // grid-stride loop over the rest
    adamw_kernel<<<(unsigned)grid, block, 0, s>>>(params, master, grads, m, v, n, k, grad_scale,
                                                   grad_scale_dev, seed);
    cudaLaunchCheck("adamw_kernel");
}

// One AdamW step (t >= 1, counted from 1) over n elements: params (bf16, =), master (fp32, =, or
// NULL), m, v (fp32, updated in place), grads (fp32, read; scaled by grad_scale first).
static inline void adamw_update(floatX *params, float *master, const float *grads, float *m, float *v, size_t n,
                                float lr, float beta1, float beta2, int t, float eps, float weight_decay,
                                float grad_scale, unsigned int seed, cudaStream_t s) {
    adamw_update_scaled(params, master, grads, m, v, n, lr, beta1, beta2, t, eps, weight_decay, grad_scale,
                        NULL, seed, s);
}

#endif // LLMC_ADAMW_CUH
