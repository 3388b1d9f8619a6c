/*
gelu.cuh - the elementwise kernels of the trainer: GELU (tanh approximation, as
test/gpt2_ref.c, computed through the logistic function: gelu_half_f) forward and backward,
the residual add, and an in-place add. gelu_fwd_f and gelu_grad_f are also the GELU of
matmul_sm90.cuh's epilogues.

  gelu_forward           out = gelu(inp)                                    (out =)
  gelu_backward_inplace  d = d * gelu'(inp)                                 (in place)
  residual_forward       out = a + b                                        (out =)
  add_inplace            dst = dst + src                                    (+=)

All are fp32 math on bf16 values, rounded to nearest once at the store. Any n and any
alignment: when n % 8 == 0 and every pointer is 16-byte aligned (the usual case) the kernel
moves 16-byte vectors, otherwise a scalar kernel runs. out may alias an input (in place).
*/
#ifndef LLMC_GELU_CUH
#define LLMC_GELU_CUH

#include "cuda_common.cuh"

#define LLMC_GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)

enum { LLMC_EW_GELU_FWD = 0, LLMC_EW_GELU_BWD = 1, LLMC_EW_ADD = 2 };

// 0.5 (1 + tanh u) of the tanh form, u = sqrt(2/pi) (x + 0.044715 x^3), as the logistic
// function 1 / (1 + 2^(-2u log2 e)), its constants folded into one polynomial: three FP32
// instructions, one exponential and one fast reciprocal instead of tanhf's ~20 instructions
// (the GEMM epilogues of matmul_sm90.cuh run it on every element beside the products), within
// a few fp32 ulps, and without the cancellation of 1 + tanh u for x << 0. 2^(-2u log2 e) = inf
// (x < ~-10) gives 0.
#define LLMC_GELU_C0 (-2.0f * 1.4426950408889634f * LLMC_GELU_SCALE)
#define LLMC_GELU_C1 (LLMC_GELU_C0 * 0.044715f)
static __device__ __forceinline__ float gelu_half_f(float x) {
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * fmaf(x * x, LLMC_GELU_C1, LLMC_GELU_C0)));
    return __fdividef(1.0f, 1.0f + e);
}

static __device__ __forceinline__ float gelu_fwd_f(float x) { return x * gelu_half_f(x); }

// d/dx of gelu_fwd_f: s + x s' with s = 0.5 (1 + tanh u), s' = 2 s (1 - s) du/dx,
// du/dx = sqrt(2/pi) (1 + 3 0.044715 x^2)
static __device__ __forceinline__ float gelu_grad_f(float x) {
    const float s = gelu_half_f(x);
    const float du = fmaf(x * x, 2.0f * LLMC_GELU_SCALE * 3.0f * 0.044715f, 2.0f * LLMC_GELU_SCALE);
    return fmaf(x * s * (1.0f - s), du, s);
}

// the operation, on (a, b): gelu(a) | a * gelu'(b) | a + b
template <int OP> static __device__ __forceinline__ float llmc_ew_op(float a, float b) {
    if (OP == LLMC_EW_GELU_FWD) return gelu_fwd_f(a);
    if (OP == LLMC_EW_GELU_BWD) return a * gelu_grad_f(b);
    return a + b;
}

// out[i] = op(a[i], b[i]) on 8-element vectors; grid-stride over n / 8 vectors
template <int OP>
static __global__ void llmc_ew_vec_kernel(floatX *out, const floatX *a, const floatX *b, size_t n_vec) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_vec; i += stride) {
        const Packed128<floatX> va = load128(a + i * 8);
        const Packed128<floatX> vb = load128(b + i * 8);
        Packed128<floatX> r;
#pragma unroll
        for (int k = 0; k < 8; k++) r[k] = __float2bfloat16(llmc_ew_op<OP>(to_float(va[k]), to_float(vb[k])));
        store128(out + i * 8, r);
    }
}

// the same, one element at a time (odd n or unaligned pointers)
template <int OP>
static __global__ void llmc_ew_scalar_kernel(floatX *out, const floatX *a, const floatX *b, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = __float2bfloat16(llmc_ew_op<OP>(to_float(a[i]), to_float(b[i])));
}

template <int OP>
static inline void llmc_ew_launch(floatX *out, const floatX *a, const floatX *b, size_t n, cudaStream_t s) {
    if (n == 0) return;
    const int block = 256;
    const size_t max_grid = 132 * 64;  // enough blocks to fill any GPU; the loop covers the rest
    const int aligned = aligned16(out) && aligned16(a) && aligned16(b);
    if (aligned && n % 8 == 0) {
        size_t grid = llmc_ceil_div(n / 8, block);
        if (grid > max_grid) grid = max_grid;
        llmc_ew_vec_kernel<OP><<<(unsigned)grid, block, 0, s>>>(out, a, b, n / 8);
        cudaLaunchCheck("llmc_ew_vec_kernel");
    } else {
        size_t grid = llmc_ceil_div(n, block);
        if (grid > max_grid) grid = max_grid;
        llmc_ew_scalar_kernel<OP><<<(unsigned)grid, block, 0, s>>>(out, a, b, n);
        cudaLaunchCheck("llmc_ew_scalar_kernel");
    }
}

// out (n) = gelu(inp)
static inline void gelu_forward(floatX *out, const floatX *inp, size_t n, cudaStream_t s) {
    llmc_ew_launch<LLMC_EW_GELU_FWD>(out, inp, inp, n, s);
}

// d_in_out (n) *= gelu'(inp): turns d(gelu output) into d(gelu input)
static inline void gelu_backward_inplace(floatX *d_in_out, const floatX *inp, size_t n, cudaStream_t s) {
    llmc_ew_launch<LLMC_EW_GELU_BWD>(d_in_out, d_in_out, inp, n, s);
}

// out (n) = a + b
static inline void residual_forward(floatX *out, const floatX *a, const floatX *b, size_t n, cudaStream_t s) {
    llmc_ew_launch<LLMC_EW_ADD>(out, a, b, n, s);
}

// dst (n) += src
static inline void add_inplace(floatX *dst, const floatX *src, size_t n, cudaStream_t s) {
    llmc_ew_launch<LLMC_EW_ADD>(dst, dst, src, n, s);
}

#endif // LLMC_GELU_CUH
