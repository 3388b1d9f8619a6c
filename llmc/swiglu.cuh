/*
swiglu.cuh - the SwiGLU of the Llama 3 / Qwen2.5 MLP: h = silu(gate) * up, where gate and up are
the two halves of one GEMM's output (the gate and up projections stacked, so that one matmul
makes both): a token-major buffer gu (N, 2I) whose row is [gate (I) | up (I)].

  forward   out[n][i] = silu(g) * u                        g = gu[n][i], u = gu[n][I + i]  (out =)
  backward  dgu[n][i] = dh[n][i] * u * silu'(g)            (dgate)                         (dgu =)
            dgu[n][I + i] = dh[n][i] * silu(g)             (dup)

with silu(x) = x * sigmoid(x) and silu'(x) = sigmoid(x) * (1 + x * (1 - sigmoid(x))). fp32 math on
the bf16 values, one rounding to bf16 at the store; sigmoid(x) = 1 / (1 + expf(-x)) is 0 when
expf(-x) overflows (x < -88), which is silu's value to within 2^-126 of it. transformers'
act_fn(gate_proj(x)) * up_proj(x) in bf16 rounds silu(g) to bf16 before the product: ours rounds
once, so it is at least as accurate and agrees to about one bf16 ulp.

Each thread moves 8 channels: 16-byte loads of gate, up (and dh), 16-byte stores. The backward
may run in place (dgu == gu): every element of gu is read, then written, by the same thread.

Requirements (checked on the host): I % 8 == 0, every pointer 16-byte aligned; out must not
overlap gu, nor dh overlap dgu.

On Hopper both can run in GEMM epilogues (llmc/matmul.cuh's matmul_forward_swiglu and
matmul_backward_dswiglu, llmc/matmul_sm90.cuh's MM90_SWIGLU and MM90_DSWIGLU) with this file's
swiglu_sigmoid and expressions: the forward's h is swiglu_forward's of the gu it writes,
bitwise; the backward's dh is the fp32 accumulator, not rounded to bf16 first. The trainer
takes the fused forward (the fused backward measured slower than the dinp GEMM and
swiglu_backward: dev/RESULTS.md). These kernels remain the path elsewhere, the backward's,
and the recompute of h (-r 1).
*/
#ifndef LLMC_SWIGLU_CUH
#define LLMC_SWIGLU_CUH

#include <stdio.h>

#include "cuda_common.cuh"

static __device__ __forceinline__ float swiglu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// item i: 8 channels of row n = i / (I/8); grid-stride
static __global__ void swiglu_forward_kernel(floatX *out, const floatX *gu, int I, size_t n_items) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, vpr = (size_t)(I / 8);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_items; i += stride) {
        const size_t n = i / vpr, c = (i - n * vpr) * 8;
        const floatX *row = gu + n * 2 * (size_t)I;
        const Packed128<floatX> g = load128(row + c), u = load128(row + I + c);
        Packed128<floatX> h;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float x = to_float(g[k]);
            h[k] = __float2bfloat16(x * swiglu_sigmoid(x) * to_float(u[k]));
        }
        store128(out + n * (size_t)I + c, h);
    }
}

static __global__ void swiglu_backward_kernel(floatX *dgu, const floatX *dh, const floatX *gu, int I, size_t n_items) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, vpr = (size_t)(I / 8);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_items; i += stride) {
        const size_t n = i / vpr, c = (i - n * vpr) * 8;
        const floatX *row = gu + n * 2 * (size_t)I;
        const Packed128<floatX> g = load128(row + c), u = load128(row + I + c);
        const Packed128<floatX> d = load128(dh + n * (size_t)I + c);
        Packed128<floatX> dg, du;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float x = to_float(g[k]), sg = swiglu_sigmoid(x), dk = to_float(d[k]);
            dg[k] = __float2bfloat16(dk * to_float(u[k]) * (sg * (1.0f + x * (1.0f - sg))));
            du[k] = __float2bfloat16(dk * (x * sg));
        }
        floatX *drow = dgu + n * 2 * (size_t)I;
        store128(drow + c, dg);
        store128(drow + I + c, du);
    }
}

static inline void swiglu_check(const char *name, int N, int I) {
    char msg[160];
    snprintf(msg, sizeof(msg), "%s: need N >= 0, I > 0 and I %% 8 == 0 (got N = %d, I = %d)", name, N, I);
    require(N >= 0 && I > 0 && I % 8 == 0, msg);
}

static inline unsigned swiglu_grid(size_t n_items, int block) {
    const size_t max_grid = 132 * 64;  // enough blocks to fill any GPU; the loop covers the rest
    size_t grid = llmc_ceil_div(n_items, block);
    return (unsigned)(grid > max_grid ? max_grid : grid);
}

// out (N, I) = silu(gate) * up, gu (N, 2I) = [gate | up] per row
static inline void swiglu_forward(floatX *out, const floatX *gu, int N, int I, cudaStream_t s) {
    swiglu_check("swiglu_forward", N, I);
    require(aligned16(out) && aligned16(gu), "swiglu_forward: out and gu must be 16-byte aligned");
    if (N == 0) return;
    const size_t n_items = (size_t)N * (size_t)(I / 8);
    const int block = 256;
    swiglu_forward_kernel<<<swiglu_grid(n_items, block), block, 0, s>>>(out, gu, I, n_items);
    cudaLaunchCheck("swiglu_forward_kernel");
}

// dgu (N, 2I) = [dgate | dup] from dh (N, I), the gradient of the forward's out, and the
// forward's input gu; dgu may be gu itself (in place)
static inline void swiglu_backward(floatX *dgu, const floatX *dh, const floatX *gu, int N, int I, cudaStream_t s) {
    swiglu_check("swiglu_backward", N, I);
    require(aligned16(dgu) && aligned16(dh) && aligned16(gu),
            "swiglu_backward: dgu, dh and gu must be 16-byte aligned");
    if (N == 0) return;
    const size_t n_items = (size_t)N * (size_t)(I / 8);
    const int block = 256;
    swiglu_backward_kernel<<<swiglu_grid(n_items, block), block, 0, s>>>(dgu, dh, gu, I, n_items);
    cudaLaunchCheck("swiglu_backward_kernel");
}

#endif // LLMC_SWIGLU_CUH
