/*
rmsnorm.cuh - RMSNorm over the last dimension C of N = B*T rows, as transformers' LlamaRMSNorm
and Qwen2RMSNorm: bf16 in and out, fp32 statistics, eps a parameter (Llama 3 1e-5, Qwen2.5 1e-6).

  forward           rstd = 1 / sqrt(mean(x^2) + eps)                            (rstd =, fp32)
                    out = bf16(weight * bf16(x * rstd))                          (out =)
  forward_residual  residual = bf16(a + b), then the forward of residual         (both =)
  backward          dinp += rstd * (g - n * mean(g * n)), g = dout * weight, n = x * rstd
                    dweight += sum over rows of dout * bf16(n)                    (fp32, +=)

The rounding order is transformers': hidden_states.to(float32); variance =
hidden_states.pow(2).mean(-1); hidden_states * rsqrt(variance + eps); then weight *
hidden_states.to(bf16), a bf16 product (PyTorch multiplies in fp32 and rounds once). So the
normalised row is rounded to bf16 before the weight multiplies it, and then the product is
rounded again; the product of two bf16 values is exact in fp32, so out differs from PyTorch's
only where our fp32 rstd (1 / sqrtf, a fixed-order sum of squares) and PyTorch's (rsqrt, its
own sum order) put x * rstd on different sides of a bf16 rounding boundary.

The backward is the exact gradient of that formula, in fp32, with the two roundings passed
through as PyTorch's autograd passes them (a dtype cast's gradient is the identity): dweight
uses bf16(n), the value the product saw, and dinp differentiates n = x * rstd(x) itself:
d/dx_i = rstd * (g_i - n_i * sum_j(g_j n_j) / C). PyTorch's bf16 autograd rounds g and the
products to bf16 on the way; ours does not, which is at least as accurate.

The backward mirrors layernorm_backward (layernorm.cuh): one pass and a reduction. Each block
owns a fixed chunk of rows; its warps read each row's dout and x once, update dinp (one row
reduction, over the warp), and keep running dweight column sums in registers, which the block
adds in warp order into scratch[chunk]; a second kernel adds the chunks in chunk order. Rows
wider than 2048 channels (Llama 3 3B and 8B: C = 3072, 4096) take a two-kernel path (dinp,
then the chunk sums) with the same chunking. No atomics, fixed orders: deterministic.

Requirements: C % 8 == 0, tensors 16-byte aligned, eps >= 0 (checked on the host); dinp must
not alias dout or inp; out must not alias the other tensors (residual may be a or b: in place).
*/
#ifndef LLMC_RMSNORM_CUH
#define LLMC_RMSNORM_CUH

#include <math.h>
#include <stdio.h>

#include "cuda_common.cuh"

// --- forward --------------------------------------------------------------------------------

// One warp per row; lane l handles the 8-channel vectors l, l+32, l+64, ... Pass 1 sums the
// squares (with RESIDUAL: of the rounded a + b, which it stores), pass 2 reads the row again
// (from cache) and writes out. The warp's lanes reduce in a fixed order: deterministic.
template <bool RESIDUAL>
static __global__ void rmsnorm_forward_kernel(floatX *out, floatX *residual, float *rstd, const floatX *inp,
                                              const floatX *inp2, const floatX *weight, float eps, int N, int C) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together, so the shuffles below stay full
    const size_t off = (size_t)row * C;

    float sq = 0.0f;
    for (int c = lane * 8; c < C; c += 32 * 8) {
        Packed128<floatX> v = load128(inp + off + c);
        if constexpr (RESIDUAL) {
            const Packed128<floatX> v2 = load128(inp2 + off + c);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = __float2bfloat16(to_float(v[k]) + to_float(v2[k]));
            store128(residual + off + c, v);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float x = to_float(v[k]);
            sq += x * x;
        }
    }
    const float rs = 1.0f / sqrtf(warp_reduce_sum(sq) / (float)C + eps);

    // pass 2: the row as stored (RESIDUAL: the residual this lane has just written)
    const floatX *x = RESIDUAL ? residual + off : inp + off;
    floatX *o = out + off;
    for (int c = lane * 8; c < C; c += 32 * 8) {
        const Packed128<floatX> v = load128(x + c);
        const Packed128<floatX> w = load128(weight + c);
        Packed128<floatX> r;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float n = to_float(__float2bfloat16(to_float(v[k]) * rs));  // hidden_states.to(bf16)
            r[k] = __float2bfloat16(to_float(w[k]) * n);                       // weight * it, in bf16
        }
        store128(o + c, r);
    }
    if (lane == 0 && rstd != NULL) rstd[row] = rs;
}

static inline void rmsnorm_forward_check(const char *name, float eps, int N, int C) {
    char msg[160];
    snprintf(msg, sizeof(msg), "%s: need N >= 0, C > 0 and C %% 8 == 0 (got N = %d, C = %d)", name, N, C);
    require(N >= 0 && C > 0 && C % 8 == 0, msg);
    snprintf(msg, sizeof(msg), "%s: eps must be a finite number >= 0 (got %g)", name, (double)eps);
    require(eps >= 0.0f && isfinite(eps), msg);
}

// out (N,C) = bf16(weight * bf16(inp * rstd)); rstd (N, fp32; NULL when no backward follows)
// gets 1 / sqrt(mean(inp^2) + eps) of each row.
static inline void rmsnorm_forward(floatX *out, float *rstd, const floatX *inp, const floatX *weight, float eps,
                                   int N, int C, cudaStream_t s) {
    rmsnorm_forward_check("rmsnorm_forward", eps, N, C);
    require(aligned16(out) && aligned16(inp) && aligned16(weight),
            "rmsnorm_forward: out, inp, weight must be 16-byte aligned");
    if (N == 0) return;
    const int block = 256, rows_per_block = block / 32;
    const int grid = (int)llmc_ceil_div((size_t)N, rows_per_block);
    rmsnorm_forward_kernel<false><<<grid, block, 0, s>>>(out, NULL, rstd, inp, NULL, weight, eps, N, C);
    cudaLaunchCheck("rmsnorm_forward_kernel");
}

// The residual stream's add and the next norm in one pass: residual (N,C) = bf16(a + b) (fp32
// sum, as residual_forward of gelu.cuh), then out and rstd as rmsnorm_forward(residual): bitwise
// the two calls, with one read of the residual less. residual may be a or b (in place: each
// element is read, then written, by one thread); out must be distinct from residual, a and b.
static inline void rmsnorm_forward_residual(floatX *residual, floatX *out, float *rstd, const floatX *a,
                                            const floatX *b, const floatX *weight, float eps, int N, int C,
                                            cudaStream_t s) {
    rmsnorm_forward_check("rmsnorm_forward_residual", eps, N, C);
    require(aligned16(residual) && aligned16(out) && aligned16(a) && aligned16(b) && aligned16(weight),
            "rmsnorm_forward_residual: residual, out, a, b, weight must be 16-byte aligned");
    require(out != residual && out != a && out != b,
            "rmsnorm_forward_residual: out must be distinct from residual, a and b");
    if (N == 0) return;
    const int block = 256, rows_per_block = block / 32;
    const int grid = (int)llmc_ceil_div((size_t)N, rows_per_block);
    rmsnorm_forward_kernel<true><<<grid, block, 0, s>>>(out, residual, rstd, a, b, weight, eps, N, C);
    cudaLaunchCheck("rmsnorm_forward_kernel");
}

// --- backward -------------------------------------------------------------------------------

#define RMS_BWD_BLOCK 128    // threads of a one-pass block: 4 warps, each one row at a time
#define RMS_BWD_MAX_VPL 8    // 8-channel vectors per lane the one-pass kernel holds: C <= 2048

// Rows per chunk of the dweight partial sums: at least 32 rows, at most 512 chunks. A function
// of N only, so the summation order (and the result) depends on nothing else.
static inline int rmsnorm_backward_rows_per_chunk(int N) {
    int r = (N + 511) / 512;
    return r < 32 ? 32 : r;
}

static inline int rmsnorm_backward_num_chunks(int N) {
    const int r = rmsnorm_backward_rows_per_chunk(N);
    return (N + r - 1) / r;
}

// Floats of scratch rmsnorm_backward needs for N rows of C channels: C * min(ceil(N/32), 512),
// one dweight partial per chunk. The value for a given N is enough for every smaller N too, so
// the caller can allocate once for the largest N it will use.
static inline size_t rmsnorm_backward_scratch_floats(int N, int C) {
    size_t chunks = llmc_ceil_div((size_t)(N > 0 ? N : 0), 32);
    if (chunks > 512) chunks = 512;
    if (chunks < 1) chunks = 1;
    return (size_t)C * chunks;
}

// The one-pass backward: block = one chunk of rows, warp w its rows w, w + 4, ...; lane l the
// 8-channel vectors l, l + 32, ... (VPL of them at most). Each row's dout, x and dinp are loaded
// once into registers, the row's sum of g * n reduced over the warp, and dinp updated; the same
// values feed the warp's running dweight in registers. At the end the warps' sums are added in
// warp order through shared memory into scratch[chunk] (C floats). Fixed rows per warp, fixed
// warp order, fixed chunk order in the reduce kernel: deterministic, no atomics.
template <int VPL>
static __global__ void __launch_bounds__(RMS_BWD_BLOCK, VPL <= 3 ? 4 : 2)
    rmsnorm_backward_fused_kernel(floatX *dinp, float *scratch, const floatX *dout, const floatX *inp,
                                  const floatX *weight, const float *rstd, int N, int C, int rows_per_chunk) {
    constexpr int NW = RMS_BWD_BLOCK / 32;
    __shared__ float part[NW][VPL * 256];  // the dweight sums of every warp: [warp][C]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int r0 = blockIdx.x * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float dw[VPL][8];
#pragma unroll
    for (int j = 0; j < VPL; j++)
#pragma unroll
        for (int k = 0; k < 8; k++) dw[j][k] = 0.0f;

    for (int r = r0 + warp; r < r1; r += NW) {
        const size_t off = (size_t)r * C;
        const float rs = rstd[r];
        // the row's dout, x and dinp in flight together: the warp waits for memory once per row
        Packed128<floatX> d[VPL], x[VPL], gin[VPL];
        float sum_gn = 0.0f;
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            const int c = (lane + 32 * j) * 8;
            if (c < C) {
                d[j] = load128cs(dout + off + c);
                x[j] = load128cs(inp + off + c);
                gin[j] = load128(dinp + off + c);
            }
        }
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            const int c = (lane + 32 * j) * 8;
            if (c < C) {
                const Packed128<floatX> w = load128(weight + c);
#pragma unroll
                for (int k = 0; k < 8; k++) sum_gn += to_float(d[j][k]) * to_float(w[k]) * (to_float(x[j][k]) * rs);
            }
        }
        const float mean_gn = warp_reduce_sum(sum_gn) / (float)C;
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            const int c = (lane + 32 * j) * 8;
            if (c < C) {
                const Packed128<floatX> w = load128(weight + c);
                Packed128<floatX> g = gin[j];
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    const float dk = to_float(d[j][k]);
                    const float n = to_float(x[j][k]) * rs;
                    g[k] = __float2bfloat16(to_float(g[k]) + rs * (dk * to_float(w[k]) - n * mean_gn));
                    dw[j][k] += dk * to_float(__float2bfloat16(n));
                }
                store128(dinp + off + c, g);
            }
        }
    }

    // every warp stores its sums, then each thread adds the warps' values of its columns in
    // warp order into scratch[chunk]
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        const int c = (lane + 32 * j) * 8;
        if (c < C) {
#pragma unroll
            for (int k = 0; k < 8; k++) part[warp][c + k] = dw[j][k];
        }
    }
    __syncthreads();
    float *p = scratch + (size_t)blockIdx.x * C;
    for (int i = threadIdx.x; i < C; i += RMS_BWD_BLOCK) {
        float sum = part[0][i];
#pragma unroll
        for (int w = 1; w < NW; w++) sum += part[w][i];
        p[i] = sum;
    }
}

// The two-kernel path, for C > 256 * RMS_BWD_MAX_VPL (rows too wide for the one-pass kernel's
// registers). dinp: one warp per row. Pass 1 forms the row's mean of g * n, pass 2 adds the
// gradient into dinp.
static __global__ void rmsnorm_backward_dinp_kernel(floatX *dinp, const floatX *dout, const floatX *inp,
                                                    const floatX *weight, const float *rstd, int N, int C) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // whole warp
    const size_t off = (size_t)row * C;
    const float rs = rstd[row];

    float sum_gn = 0.0f;
    for (int c = lane * 8; c < C; c += 32 * 8) {
        const Packed128<floatX> d = load128(dout + off + c);
        const Packed128<floatX> x = load128(inp + off + c);
        const Packed128<floatX> w = load128(weight + c);
#pragma unroll
        for (int k = 0; k < 8; k++) sum_gn += to_float(d[k]) * to_float(w[k]) * (to_float(x[k]) * rs);
    }
    const float mean_gn = warp_reduce_sum(sum_gn) / (float)C;

    for (int c = lane * 8; c < C; c += 32 * 8) {
        const Packed128<floatX> d = load128(dout + off + c);
        const Packed128<floatX> x = load128(inp + off + c);
        const Packed128<floatX> w = load128(weight + c);
        Packed128<floatX> g = load128(dinp + off + c);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float n = to_float(x[k]) * rs;
            g[k] = __float2bfloat16(to_float(g[k]) + rs * (to_float(d[k]) * to_float(w[k]) - n * mean_gn));
        }
        store128(dinp + off + c, g);
    }
}

// The two-kernel path's dweight partials: thread (x) owns 8 channels, block row (y) one chunk
// of rows; it sums its rows in order and writes scratch[chunk] (C wide).
static __global__ void rmsnorm_backward_partial_kernel(float *scratch, const floatX *dout, const floatX *inp,
                                                       const float *rstd, int N, int C, int rows_per_chunk) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= C / 8) return;
    const int c = g * 8;
    const int r0 = blockIdx.y * rows_per_chunk;
    const int r1 = min(N, r0 + rows_per_chunk);
    float dw[8];
#pragma unroll
    for (int k = 0; k < 8; k++) dw[k] = 0.0f;
    for (int r = r0; r < r1; r++) {
        const float rs = rstd[r];
        const Packed128<floatX> d = load128(dout + (size_t)r * C + c);
        const Packed128<floatX> x = load128(inp + (size_t)r * C + c);
#pragma unroll
        for (int k = 0; k < 8; k++) dw[k] += to_float(d[k]) * to_float(__float2bfloat16(to_float(x[k]) * rs));
    }
    float *p = scratch + (size_t)blockIdx.y * C;
#pragma unroll
    for (int k = 0; k < 8; k++) p[c + k] = dw[k];
}

// The chunks' sums into dweight (+=): block (32, 8) takes 32 columns; thread (x, y) adds the
// chunks y, y + 8, ... in order, then thread (x, 0) adds the 8 lane sums in order. Fixed orders
// for a given N: deterministic.
static __global__ void rmsnorm_backward_reduce_kernel(float *dweight, const float *scratch, int num_chunks, int C) {
    __shared__ float lane_sums[8][33];
    const int i = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (i < C)
        for (int j = threadIdx.y; j < num_chunks; j += 8) sum += scratch[(size_t)j * C + i];
    lane_sums[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || i >= C) return;
    float total = lane_sums[0][threadIdx.x];
#pragma unroll
    for (int y = 1; y < 8; y++) total += lane_sums[y][threadIdx.x];
    dweight[i] += total;
}

// the one-pass kernel for vpl = ceil(C / 256) vectors per lane: instantiated for VPL .. RMS_BWD_MAX_VPL
template <int VPL>
static inline void rmsnorm_backward_fused_launch(int vpl, floatX *dinp, float *scratch, const floatX *dout,
                                                 const floatX *inp, const floatX *weight, const float *rstd, int N,
                                                 int C, int rows_per_chunk, int num_chunks, cudaStream_t s) {
    if constexpr (VPL < RMS_BWD_MAX_VPL) {
        if (vpl > VPL) {
            rmsnorm_backward_fused_launch<VPL + 1>(vpl, dinp, scratch, dout, inp, weight, rstd, N, C, rows_per_chunk,
                                                   num_chunks, s);
            return;
        }
    }
    rmsnorm_backward_fused_kernel<VPL><<<num_chunks, RMS_BWD_BLOCK, 0, s>>>(dinp, scratch, dout, inp, weight, rstd, N,
                                                                           C, rows_per_chunk);
    cudaLaunchCheck("rmsnorm_backward_fused_kernel");
}

// dinp (N,C) += the input gradient; dweight (C, fp32) += the weight gradient. rstd: the
// forward's (required). scratch: at least rmsnorm_backward_scratch_floats(N, C) floats, 16-byte
// aligned; its content is not needed before or after the call (only stream order protects it:
// one scratch per stream). One pass over dout and inp (rmsnorm_backward_fused_kernel) when
// C <= 256 * RMS_BWD_MAX_VPL, the two-kernel path above that; then the chunk reduction.
static inline void rmsnorm_backward(floatX *dinp, float *dweight, float *scratch, const floatX *dout,
                                    const floatX *inp, const floatX *weight, const float *rstd, int N, int C,
                                    cudaStream_t s) {
    require(N >= 0 && C > 0 && C % 8 == 0, "rmsnorm_backward: need N >= 0, C > 0 and C % 8 == 0");
    require(rstd != NULL && dweight != NULL, "rmsnorm_backward: rstd and dweight are required");
    require(aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight) && aligned16(scratch),
            "rmsnorm_backward: dinp, dout, inp, weight, scratch must be 16-byte aligned");
    require(dinp != dout && dinp != inp, "rmsnorm_backward: dinp must not alias dout or inp");
    if (N == 0) return;
    const int rows_per_chunk = rmsnorm_backward_rows_per_chunk(N);
    const int num_chunks = rmsnorm_backward_num_chunks(N);
    const int vpl = (int)llmc_ceil_div((size_t)C, 256);
    if (vpl <= RMS_BWD_MAX_VPL) {
        rmsnorm_backward_fused_launch<1>(vpl, dinp, scratch, dout, inp, weight, rstd, N, C, rows_per_chunk,
                                         num_chunks, s);
    } else {
        const int block = 256, rows_per_block = block / 32;
        rmsnorm_backward_dinp_kernel<<<(unsigned)llmc_ceil_div((size_t)N, rows_per_block), block, 0, s>>>(
            dinp, dout, inp, weight, rstd, N, C);
        cudaLaunchCheck("rmsnorm_backward_dinp_kernel");
        const int pblock = 128;
        dim3 pgrid((unsigned)llmc_ceil_div((size_t)(C / 8), pblock), (unsigned)num_chunks);
        rmsnorm_backward_partial_kernel<<<pgrid, pblock, 0, s>>>(scratch, dout, inp, rstd, N, C, rows_per_chunk);
        cudaLaunchCheck("rmsnorm_backward_partial_kernel");
    }
    const unsigned rgrid = (unsigned)llmc_ceil_div((size_t)C, 32);
    rmsnorm_backward_reduce_kernel<<<rgrid, dim3(32, 8), 0, s>>>(dweight, scratch, num_chunks, C);
    cudaLaunchCheck("rmsnorm_backward_reduce_kernel");
}

#endif // LLMC_RMSNORM_CUH
