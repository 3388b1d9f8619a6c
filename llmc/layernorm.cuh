/*
layernorm.cuh - LayerNorm over the last dimension C of N = B*T rows (eps 1e-5, biased
variance, as test/gpt2_ref.c and PyTorch), bf16 in and out, fp32 math.

  forward   out = (x - mean) * rstd * weight + bias                       (out =; mean, rstd =)
  backward  dinp += rstd * (dn - mean(dn) - n * mean(dn * n)), dn = dout * weight, n = normed x
            dweight += sum over rows of dout * n, dbias += sum over rows of dout   (fp32, +=)
            optionally dinp_colsum += sum over rows of the new dinp                (fp32, +=)

The backward is one pass and a reduction: dinp needs two row reductions (one warp per row
does them with shuffles), while dweight/dbias are column sums over all rows. Each block owns
a fixed chunk of rows; its warps read each row's dout and x once, update dinp, and keep
running column sums in registers, which the block adds in warp order into scratch[chunk]. A
second kernel adds the chunks in chunk order (column sums with atomics would be
non-deterministic). The optional column sums of the new dinp are the bias gradient of the
projection whose output gradient dinp is (in the trainer, the residual stream's), taken in
the same pass. Rows wider than 2048 channels, too wide for the registers, take a two-kernel
path (dinp, then the chunk sums) with the same chunking.

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

#define LN_BWD_BLOCK 128    // threads of a one-pass block: 4 warps, each one row at a time
#define LN_BWD_MAX_VPL 8    // 8-channel vectors per lane the one-pass kernel holds: C <= 2048

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
// a given N is enough for every smaller N too (it is 3*C*min(ceil(N/32), 512): dweight, dbias
// and dinp's column sums per chunk), so the caller can allocate once for the largest N it
// will use.
static inline size_t layernorm_backward_scratch_floats(int N, int C) {
    size_t chunks = llmc_ceil_div((size_t)(N > 0 ? N : 0), 32);
    if (chunks > 512) chunks = 512;
    if (chunks < 1) chunks = 1;
    return 3 * (size_t)C * chunks;
}

// The one-pass backward: block = one chunk of rows, warp w its rows w, w + 4, ...; lane l the
// 8-channel vectors l, l + 32, ... (VPL of them at most). Each row's dout, x and dinp are loaded
// once into registers, the two row means reduced over the warp, and dinp updated; the same values
// feed the warp's running dweight/dbias (and optionally column sums of the new dinp) in
// registers. At the end the warps' sums are added in warp order through shared memory and
// written to scratch[chunk] = [dweight | dbias | dinp sums] (NSUM x C). Fixed rows per warp,
// fixed warp order, fixed chunk order in the reduce kernel: deterministic, no atomics.
// Four warps a block and 512 chunks at most (the GPT-2 batch: 65536 rows, 128 a chunk) keep
// every chunk resident at once on an H100/H200 at the registers VPL = 3 needs (128 a thread).
template <int VPL, bool COLSUM>
static __global__ void __launch_bounds__(LN_BWD_BLOCK, VPL <= 3 ? 4 : 2)
    layernorm_backward_fused_kernel(floatX *dinp, float *scratch, const floatX *dout, const floatX *inp,
                                    const floatX *weight, const float *mean, const float *rstd, int N, int C,
                                    int rows_per_chunk) {
    constexpr int NW = LN_BWD_BLOCK / 32, NSUM = COLSUM ? 3 : 2;
    __shared__ float part[NW][VPL * 256];  // one column sum of every warp: [warp][C]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int r0 = blockIdx.x * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float dw[VPL][8], db[VPL][8], cs[COLSUM ? VPL : 1][8];
#pragma unroll
    for (int j = 0; j < VPL; j++)
#pragma unroll
        for (int k = 0; k < 8; k++) {
            dw[j][k] = db[j][k] = 0.0f;
            if constexpr (COLSUM) cs[j][k] = 0.0f;
        }

    for (int r = r0 + warp; r < r1; r += NW) {
        const size_t off = (size_t)r * C;
        const float m = mean[r], rs = rstd[r];
        // the row's dout, x and dinp in flight together: the warp waits for memory once per row
        Packed128<floatX> d[VPL], x[VPL], gin[VPL];
        float sum_dn = 0.0f, sum_dn_n = 0.0f;
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
                for (int k = 0; k < 8; k++) {
                    const float n = (to_float(x[j][k]) - m) * rs;
                    const float dn = to_float(d[j][k]) * to_float(w[k]);
                    sum_dn += dn;
                    sum_dn_n += dn * n;
                }
            }
        }
        const float mean_dn = warp_reduce_sum(sum_dn) / (float)C;
        const float mean_dn_n = warp_reduce_sum(sum_dn_n) / (float)C;
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            const int c = (lane + 32 * j) * 8;
            if (c < C) {
                const Packed128<floatX> w = load128(weight + c);
                Packed128<floatX> g = gin[j];
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    const float dk = to_float(d[j][k]);
                    const float n = (to_float(x[j][k]) - m) * rs;
                    const float dn = dk * to_float(w[k]);
                    g[k] = __float2bfloat16(to_float(g[k]) + rs * (dn - mean_dn - n * mean_dn_n));
                    dw[j][k] += dk * n;
                    db[j][k] += dk;
                    if constexpr (COLSUM) cs[j][k] += to_float(g[k]);  // the bf16 value stored
                }
                store128(dinp + off + c, g);
            }
        }
    }

    // the block's sums, one of dweight, dbias, dinp sums at a time: every warp stores its own,
    // then each thread adds the warps' values of its columns in warp order into scratch[chunk]
    float *p = scratch + (size_t)blockIdx.x * NSUM * C;
#pragma unroll
    for (int q = 0; q < NSUM; q++) {
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            const int c = (lane + 32 * j) * 8;
            if (c < C) {
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    float v;
                    if (q == 0) v = dw[j][k];
                    else if (q == 1) v = db[j][k];
                    else v = cs[COLSUM ? j : 0][k];
                    part[warp][c + k] = v;
                }
            }
        }
        __syncthreads();
        for (int i = threadIdx.x; i < C; i += LN_BWD_BLOCK) {
            float sum = part[0][i];
#pragma unroll
            for (int w = 1; w < NW; w++) sum += part[w][i];
            p[(size_t)q * C + i] = sum;
        }
        __syncthreads();  // part is rewritten by the next q
    }
}

// The two-kernel path, for C > 256 * LN_BWD_MAX_VPL (rows too wide for the one-pass kernel's
// registers). dinp: one warp per row. Pass 1 forms the two row means, pass 2 adds the
// gradient into dinp.
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

// The two-kernel path's dweight/dbias partials (after the dinp kernel): thread (x) owns 8
// channels, block row (y) one chunk of rows; it sums its rows in order and writes
// scratch[chunk] = [dweight | dbias | (column sums of dinp, when colsum)], each C wide.
static __global__ void layernorm_backward_partial_kernel(float *scratch, const floatX *dout, const floatX *inp,
                                                         const floatX *dinp, int colsum, const float *mean,
                                                         const float *rstd, int N, int C, int rows_per_chunk) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= C / 8) return;
    const int c = g * 8;
    const int r0 = blockIdx.y * rows_per_chunk;
    const int r1 = min(N, r0 + rows_per_chunk);
    float dw[8], db[8], cs[8];
#pragma unroll
    for (int k = 0; k < 8; k++) dw[k] = db[k] = cs[k] = 0.0f;
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
        if (colsum) {
            const Packed128<floatX> v = load128(dinp + (size_t)r * C + c);
#pragma unroll
            for (int k = 0; k < 8; k++) cs[k] += to_float(v[k]);
        }
    }
    const int nsum = colsum ? 3 : 2;
    float *p = scratch + (size_t)blockIdx.y * nsum * C;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        p[c + k] = dw[k];
        p[C + c + k] = db[k];
        if (colsum) p[2 * C + c + k] = cs[k];
    }
}

// The chunks' sums into [dweight | dbias | dinp_colsum] (+=; dinp_colsum only when not NULL:
// then each chunk holds 3 C entries): block (32, 8) takes 32 entries; thread (x, y) adds the
// chunks y, y + 8, ... in order, then thread (x, 0) adds the 8 lane sums in order. Fixed orders
// for a given N: deterministic.
static __global__ void layernorm_backward_reduce_kernel(float *dweight, float *dbias, float *dinp_colsum,
                                                        const float *scratch, int num_chunks, int C) {
    __shared__ float lane_sums[8][33];
    const int nsum = dinp_colsum != NULL ? 3 : 2;
    const int i = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (i < nsum * C)
        for (int j = threadIdx.y; j < num_chunks; j += 8) sum += scratch[(size_t)j * nsum * C + i];
    lane_sums[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || i >= nsum * C) return;
    float total = lane_sums[0][threadIdx.x];
#pragma unroll
    for (int y = 1; y < 8; y++) total += lane_sums[y][threadIdx.x];
    if (i < C) dweight[i] += total;
    else if (i < 2 * C) dbias[i - C] += total;
    else dinp_colsum[i - 2 * C] += total;
}

// the one-pass kernel for vpl = ceil(C / 256) vectors per lane: instantiated for VPL .. LN_BWD_MAX_VPL
template <int VPL>
static inline void layernorm_backward_fused_launch(int vpl, floatX *dinp, float *scratch, int colsum,
                                                   const floatX *dout, const floatX *inp, const floatX *weight,
                                                   const float *mean, const float *rstd, int N, int C,
                                                   int rows_per_chunk, int num_chunks, cudaStream_t s) {
    if constexpr (VPL < LN_BWD_MAX_VPL) {
        if (vpl > VPL) {
            layernorm_backward_fused_launch<VPL + 1>(vpl, dinp, scratch, colsum, dout, inp, weight, mean, rstd, N, C,
                                                     rows_per_chunk, num_chunks, s);
            return;
        }
    }
    if (colsum)
        layernorm_backward_fused_kernel<VPL, true><<<num_chunks, LN_BWD_BLOCK, 0, s>>>(
            dinp, scratch, dout, inp, weight, mean, rstd, N, C, rows_per_chunk);
    else
        layernorm_backward_fused_kernel<VPL, false><<<num_chunks, LN_BWD_BLOCK, 0, s>>>(
            dinp, scratch, dout, inp, weight, mean, rstd, N, C, rows_per_chunk);
    cudaLaunchCheck("layernorm_backward_fused_kernel");
}

// dinp (N,C) += the input gradient; dweight, dbias (C, fp32) += the parameter gradients;
// dinp_colsum (C, fp32; NULL: none) += the column sums of the updated dinp (bf16 values as
// stored): the bias gradient of a linear layer whose output gradient dinp is (the residual
// stream's projections), without another pass over it.
// mean, rstd: the forward's statistics (required). scratch: at least
// layernorm_backward_scratch_floats(N, C) floats, 16-byte aligned; its content is not needed
// before or after the call (only stream order protects it: one scratch per stream).
// One pass over dout and inp (layernorm_backward_fused_kernel) when C <= 256 * LN_BWD_MAX_VPL,
// the two-kernel path above that; then the chunk reduction.
static inline void layernorm_backward_colsum(floatX *dinp, float *dweight, float *dbias, float *dinp_colsum,
                                             float *scratch, const floatX *dout, const floatX *inp,
                                             const floatX *weight, const float *mean, const float *rstd, int N, int C,
                                             cudaStream_t s) {
    require(N >= 0 && C > 0 && C % 8 == 0, "layernorm_backward: need C % 8 == 0");
    require(mean != NULL && rstd != NULL, "layernorm_backward: mean and rstd are required");
    require(aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight) &&
                aligned16(scratch),
            "layernorm_backward: dinp, dout, inp, weight, scratch must be 16-byte aligned");
    if (N == 0) return;
    const int rows_per_chunk = layernorm_backward_rows_per_chunk(N);
    const int num_chunks = layernorm_backward_num_chunks(N);
    const int colsum = dinp_colsum != NULL;
    const int vpl = (int)llmc_ceil_div((size_t)C, 256);
    if (vpl <= LN_BWD_MAX_VPL) {
        layernorm_backward_fused_launch<1>(vpl, dinp, scratch, colsum, dout, inp, weight, mean, rstd, N, C,
                                           rows_per_chunk, num_chunks, s);
    } else {
        const int block = 256, rows_per_block = block / 32;
        layernorm_backward_dinp_kernel<<<(unsigned)llmc_ceil_div((size_t)N, rows_per_block), block, 0, s>>>(
            dinp, dout, inp, weight, mean, rstd, N, C);
        cudaLaunchCheck("layernorm_backward_dinp_kernel");
        const int pblock = 128;
        dim3 pgrid((unsigned)llmc_ceil_div((size_t)(C / 8), pblock), (unsigned)num_chunks);
        layernorm_backward_partial_kernel<<<pgrid, pblock, 0, s>>>(scratch, dout, inp, dinp, colsum, mean, rstd, N, C,
                                                                   rows_per_chunk);
        cudaLaunchCheck("layernorm_backward_partial_kernel");
    }
    const unsigned rgrid = (unsigned)llmc_ceil_div((size_t)((colsum ? 3 : 2) * C), 32);
    layernorm_backward_reduce_kernel<<<rgrid, dim3(32, 8), 0, s>>>(dweight, dbias, dinp_colsum, scratch, num_chunks, C);
    cudaLaunchCheck("layernorm_backward_reduce_kernel");
}

// layernorm_backward_colsum without the column sums of dinp
static inline void layernorm_backward(floatX *dinp, float *dweight, float *dbias, float *scratch,
                                      const floatX *dout, const floatX *inp, const floatX *weight,
                                      const float *mean, const float *rstd, int N, int C, cudaStream_t s) {
    layernorm_backward_colsum(dinp, dweight, dbias, NULL, scratch, dout, inp, weight, mean, rstd, N, C, s);
}

#endif // LLMC_LAYERNORM_CUH
