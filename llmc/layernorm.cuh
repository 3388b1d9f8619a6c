/*
layernorm.cuh - LayerNorm over the last dimension C of N = B*T rows (eps 1e-5, biased
variance, as test/gpt2_ref.c and PyTorch), bf16 in and out, fp32 math.

  forward   out = (x - mean) * rstd * weight + bias                       (out =; mean, rstd =)
  backward  dinp += rstd * (dn - mean(dn) - n * mean(dn * n)), dn = dout * weight, n = normed x
            dweight += sum over rows of dout * n, dbias += sum over rows of dout   (fp32, +=)

Why the backward is three kernels: dinp needs two row reductions (one warp per row does them
with shuffles), while dweight/dbias are column sums over all rows. Doing the column sums with
atomics would be non-deterministic, so each block sums a fixed chunk of rows for its columns
into `scratch` and a second kernel adds the chunks in chunk order. Reading dout and x twice
(once per kernel) costs some bandwidth but keeps every kernel simple and valid for any C.

Requirements: C % 8 == 0, tensors 16-byte aligned (checked on the host); dinp must not
alias dout or inp.
*/
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "cuda_common.cuh"

#define LLMC_LN_EPS 1e-5f

// --- forward --------------------------------------------------------------------------------

// One warp per row; lane l handles the 8-channel vectors l, l+32, l+64, ... Two passes over
// the row (mean, then the variance of x - mean) rather than E[x^2] - mean^2, which cancels
// badly when |mean| >> std; the row is small and the second read comes from cache.
static __global__ void layernorm_forward_kernel(floatX *out, float *mean, float *rstd, const floatX *inp,
                                                const floatX *weight, const floatX *bias, int N, int C) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together, so the shuffles below stay full
    const floatX *x = inp + (size_t)row * C;

    float sum = 0.0f;
    for (int c = lane * 8; c < C; c += 32 * 8) {
        const Packed128<floatX> v = load128(x + c);
#pragma unroll
        for (int k = 0; k < 8; k++) sum += to_float(v[k]);
    }
    const float m = warp_reduce_sum(sum) / (float)C;

    float sq = 0.0f;
    for (int c = lane * 8; c < C; c += 32 * 8) {
        const Packed128<floatX> v = load128(x + c);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float d = to_float(v[k]) - m;
            sq += d * d;
        }
    }
    const float var = warp_reduce_sum(sq) / (float)C;
    const float rs = 1.0f / sqrtf(var + LLMC_LN_EPS);

    floatX *o = out + (size_t)row * C;
    for (int c = lane * 8; c < C; c += 32 * 8) {
        const Packed128<floatX> v = load128(x + c);
        const Packed128<floatX> w = load128(weight + c);
        const Packed128<floatX> b = load128(bias + c);
        Packed128<floatX> r;
#pragma unroll
        for (int k = 0; k < 8; k++)
            r[k] = __float2bfloat16((to_float(v[k]) - m) * rs * to_float(w[k]) + to_float(b[k]));
        store128(o + c, r);
    }
    if (lane == 0) {
        if (mean != NULL) mean[row] = m;
        if (rstd != NULL) rstd[row] = rs;
    }
}

// out (N,C) = LayerNorm(inp) * weight + bias; mean, rstd (N) get the row statistics (either may
// be NULL when no backward follows).
static inline void layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp,
                                     const floatX *weight, const floatX *bias, int N, int C,
                                     cudaStream_t s) {
    require(N >= 0 && C > 0 && C % 8 == 0, "layernorm_forward: need C % 8 == 0");
    require(aligned16(out) && aligned16(inp) && aligned16(weight) && aligned16(bias),
            "layernorm_forward: out, inp, weight, bias must be 16-byte aligned");
    if (N == 0) return;
    const int block = 256, rows_per_block = block / 32;
    const int grid = (int)llmc_ceil_div((size_t)N, rows_per_block);
    layernorm_forward_kernel<<<grid, block, 0, s>>>(out, mean, rstd, inp, weight, bias, N, C);
    cudaLaunchCheck("layernorm_forward_kernel");
}

// --- backward -------------------------------------------------------------------------------

// Rows per chunk of the dweight/dbias partial sums: at least 32 rows, at most 512 chunks.
// A function of N only, so the summation order (and the result) depends on nothing else.
static inline int layernorm_backward_rows_per_chunk(int N) {
    int r = (N + 511) / 512;
    return r < 32 ? 32 : r;
}

static inline int layernorm_backward_num_chunks(int N) {
    const int r = layernorm_backward_rows_per_chunk(N);
    return (N + r - 1) / r;
}

// Floats of scratch layernorm_backward needs for N rows of C channels. The value returned for
// a given N is enough for every smaller N too (it is 2*C*min(ceil(N/32), 512)), so the caller
// can allocate once for the largest N it will use.
static inline size_t layernorm_backward_scratch_floats(int N, int C) {
    size_t chunks = llmc_ceil_div((size_t)(N > 0 ? N : 0), 32);
    if (chunks > 512) chunks = 512;
    if (chunks < 1) chunks = 1;
    return 2 * (size_t)C * chunks;
}

// dinp: one warp per row. Pass 1 forms the two row means, pass 2 adds the gradient into dinp.
static __global__ void layernorm_backward_dinp_kernel(floatX *dinp, const floatX *dout, const floatX *inp,
                                                      const floatX *weight, const float *mean,
                                                      const float *rstd, int N, int C) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // whole warp
    const size_t off = (size_t)row * C;
    const float m = mean[row], rs = rstd[row];

    float sum_dn = 0.0f, sum_dn_n = 0.0f;
    for (int c = lane * 8; c < C; c += 32 * 8) {
        const Packed128<floatX> d = load128(dout + off + c);
        const Packed128<floatX> x = load128(inp + off + c);
        const Packed128<floatX> w = load128(weight + c);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float n = (to_float(x[k]) - m) * rs;
            const float dn = to_float(d[k]) * to_float(w[k]);
            sum_dn += dn;
            sum_dn_n += dn * n;
        }
    }
    const float mean_dn = warp_reduce_sum(sum_dn) / (float)C;
    const float mean_dn_n = warp_reduce_sum(sum_dn_n) / (float)C;

    for (int c = lane * 8; c < C; c += 32 * 8) {
        const Packed128<floatX> d = load128(dout + off + c);
        const Packed128<floatX> x = load128(inp + off + c);
        const Packed128<floatX> w = load128(weight + c);
        Packed128<floatX> g = load128(dinp + off + c);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float n = (to_float(x[k]) - m) * rs;
            const float dn = to_float(d[k]) * to_float(w[k]);
            g[k] = __float2bfloat16(to_float(g[k]) + rs * (dn - mean_dn - n * mean_dn_n));
        }
        store128(dinp + off + c, g);
    }
}

// dweight/dbias partials: thread (x) owns 8 channels, block row (y) owns one chunk of rows;
// it sums its rows in order and writes scratch[chunk][0..C) (dweight) and [C..2C) (dbias).
static __global__ void layernorm_backward_partial_kernel(float *scratch, const floatX *dout, const floatX *inp,
                                                         const float *mean, const float *rstd, int N, int C,
                                                         int rows_per_chunk) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= C / 8) return;
    const int c = g * 8;
    const int r0 = blockIdx.y * rows_per_chunk;
    const int r1 = min(N, r0 + rows_per_chunk);
    float dw[8], db[8];
#pragma unroll
    for (int k = 0; k < 8; k++) dw[k] = db[k] = 0.0f;
    for (int r = r0; r < r1; r++) {
        const float m = mean[r], rs = rstd[r];
        const Packed128<floatX> d = load128(dout + (size_t)r * C + c);
        const Packed128<floatX> x = load128(inp + (size_t)r * C + c);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float dk = to_float(d[k]);
            dw[k] += dk * ((to_float(x[k]) - m) * rs);
            db[k] += dk;
        }
    }
    float *p = scratch + (size_t)blockIdx.y * 2 * C;
    Packed128<float> v;
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = dw[k];
    store128(p + c, v);
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = dw[4 + k];
    store128(p + c + 4, v);
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = db[k];
    store128(p + C + c, v);
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = db[4 + k];
    store128(p + C + c + 4, v);
}

// one thread per entry of [dweight | dbias]: the chunks added in chunk order, then += into it
static __global__ void layernorm_backward_reduce_kernel(float *dweight, float *dbias, const float *scratch,
                                                        int num_chunks, int C) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 2 * C) return;
    float sum = 0.0f;
    for (int j = 0; j < num_chunks; j++) sum += scratch[(size_t)j * 2 * C + i];
    if (i < C) dweight[i] += sum;
    else dbias[i - C] += sum;
}

// dinp (N,C) += the input gradient; dweight, dbias (C, fp32) += the parameter gradients.
// mean, rstd: the forward's statistics (required). scratch: at least
// layernorm_backward_scratch_floats(N, C) floats, 16-byte aligned; its content is not needed
// before or after the call (only stream order protects it: one scratch per stream).
static inline void layernorm_backward(floatX *dinp, float *dweight, float *dbias, float *scratch,
                                      const floatX *dout, const floatX *inp, const floatX *weight,
                                      const float *mean, const float *rstd, int N, int C, cudaStream_t s) {
    require(N >= 0 && C > 0 && C % 8 == 0, "layernorm_backward: need C % 8 == 0");
    require(mean != NULL && rstd != NULL, "layernorm_backward: mean and rstd are required");
    require(aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight) &&
                aligned16(scratch),
            "layernorm_backward: dinp, dout, inp, weight, scratch must be 16-byte aligned");
    if (N == 0) return;
    const int block = 256, rows_per_block = block / 32;
    layernorm_backward_dinp_kernel<<<(unsigned)llmc_ceil_div((size_t)N, rows_per_block), block, 0, s>>>(
        dinp, dout, inp, weight, mean, rstd, N, C);
    cudaLaunchCheck("layernorm_backward_dinp_kernel");

    const int rows_per_chunk = layernorm_backward_rows_per_chunk(N);
    const int num_chunks = layernorm_backward_num_chunks(N);
    const int pblock = 128;
    dim3 pgrid((unsigned)llmc_ceil_div((size_t)(C / 8), pblock), (unsigned)num_chunks);
    layernorm_backward_partial_kernel<<<pgrid, pblock, 0, s>>>(scratch, dout, inp, mean, rstd, N, C, rows_per_chunk);
    cudaLaunchCheck("layernorm_backward_partial_kernel");

    const int rblock = 256;
    layernorm_backward_reduce_kernel<<<(unsigned)llmc_ceil_div((size_t)(2 * C), rblock), rblock, 0, s>>>(
        dweight, dbias, scratch, num_chunks, C);
    cudaLaunchCheck("layernorm_backward_reduce_kernel");
}

#endif // LLMC_LAYERNORM_CUH
