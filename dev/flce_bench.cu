/*
flce_bench.cu - the four fused-linear-cross-entropy strategies side by side, in one binary
(llm.c dev/cuda style). Every version computes, for bf16 h (N, H), W (V, H) and int32
targets (ignore_index -100):

    loss = mean over non-ignored tokens of (lse_i - z_i,t_i),   z = h @ W^T
    d_h  = dL/dh  (N, H) bf16,     d_W = dL/dW  (V, H) fp32

  v1 naive     the full (N, V) fp32 logits from one cuBLASLt GEMM, a row kernel for the
               loss and dlogits (in place), a bf16 copy of dlogits, then the d_h and d_W
               GEMMs over all N. Stride V, unpadded, as torch's (N, V) tensor has.
  v2 liger     Liger's token chunks: C = next_pow2(ceil(N / ceil(V/H))); per chunk a bf16
               (C, V) logits buffer with the unpadded stride V (what Liger and PyTorch
               allocate; at odd V its rows are not 16-byte aligned, cuBLAS's slow path), a
               row kernel writing dlogits in place, d_h[chunk] = dlogits @ W, and
               d_W += dlogits^T @ h[chunk] in fp32 (beta = 1).
  v3 verl      verl's Split_Dlogits_N: vocab splits of 9504 columns. Forward: per split,
               logits (N, split) into one bf16 buffer (stride padded to a multiple of 64),
               merged into per-row running (max, sum-exp) and the target logit. Backward:
               per split, recompute the logits, turn them into dlogits with the saved lse,
               d_h += buf @ W_split (accumulated in fp32, then converted; verl itself
               accumulates in bf16) and d_W_split = buf^T @ h. Four GEMMs' worth of work.
  v4 fuse_MN   verl's Total_Fuse_MN: after v3's forward (run in token tiles of 4096 so its
               buffer stays small), one WMMA (bf16 mma.sync) kernel per (128-token,
               128-vocab) tile recomputes the logits tile, forms dlogits in shared memory,
               and adds its d_h and d_W contributions with fp32 float4 atomics. No (N, split)
               buffer; every vocab tile races on the same d_h rows (not deterministic).
  v5 flce      the library (flce/flce.h), flce_forward_backward with a 1 GiB workspace
               budget and "flce lean" with 160 MiB, on its default path (its own Hopper
               GEMMs with the loss fused, on an sm_90a build and a 9.0 GPU); then the
               cuBLASLt path (flce_set_hopper_default(0)) with 1 GiB and fp32 logits, bf16
               logits, and 160 MiB. The planner takes the tile schedule where it models it
               faster.

./flce_bench [-v version|all] [-s shapes] [-r repeats] [-w warmups] [-o path] [-c]
             [--autotune 0|1] [--timing] [--pingpong 0|1] [--lt-backward 0|1] [--dw-scaled 0|1]
             [--dw-direct 0|1] [--dh-direct 0|1|2] [--wide-stats 0|1] [--budget MiB]
             [--chunk tokens] [--vtile columns] [--dh-parts P] [--side S]

Shapes: -s takes NxHxV and the named sets "default" (the four below), "llama" (the LM heads of
Llama-3.2-1B and 3B at 16384 tokens and of Qwen2.5-0.5B and 1.5B at 32768 tokens) and "all"
(both); "llama" is not in the default run, which it would make about twice as long. -v flce
runs every flce row, -v flce1 the default one ("flce") alone.

The flce rows under the library's own choices by default; the -- options set its switches for
an A/B (flce.h's flce_set_autotune, flce_internal.h's dev switches): cuBLASLt's heuristic pick
instead of autotuning, per-phase times (printed to stderr per configuration), the Hopper
logits GEMM's schedule, the Hopper path's gradients from cuBLASLt's GEMMs (1) or the fused
ones (0), the scaled d_W transform off (0); --budget sets the workspace budget of the rows
that take 1 GiB by default (larger chunks: fewer d_W accumulations and W reads per call);
--chunk and --dh-parts set the Hopper plan's chunk and d_h K parts, --vtile the widest
vocabulary tile (the config's max_vocab_tile: the tile schedule), for sweeps of the planner's
choices; --side the SMs of the d_h GEMM where the gradient GEMMs run side by side.

Benchmark mode, per shape, in one process: random inputs (h, W uniform with std H^-1/4 so
the logits are ~N(0, 1); targets uniform, ~5% ignored), a GPU reference (fp32 GEMMs on the
bf16-rounded inputs, exact fp32 accumulation: CUBLAS_COMPUTE_32F without TF32), the bf16
GEMM rate at 8192^3 (once) and at the shape's logits GEMM, the 3-GEMM floor 6NVH / rate,
then per version: median ms of the whole fwd+bwd (CUDA events, after warm-ups), x floor,
6NVH / t, the extra device memory its setup allocated (our own cudaMallocs, counted), the
loss's absolute error and the rel L2 of d_h and d_W against the reference. It reports,
never asserts. Both modes are dev/common.cuh's FLCE harness; this file holds the versions.

Correctness mode (-c): every version on small odd shapes against a CPU fp64 reference;
PASS/FAIL per version (d_h, d_W rel L2 <= 1e-2, loss abs error <= 1e-3); outputs
poisoned with NaN before each of two runs per version; the GPU reference of benchmark mode
is checked too (rel L2 <= 1e-4, loss <= 1e-5); exit code 1 if any fails.
*/
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"       // the FLCE harness: problem, inputs, references, the two modes
#include "flce.h"
#include "flce_internal.h"  // the library's dev switches (--pingpong, --lt-backward, ...)
#include "shapes.h"         // DEFAULT_SHAPES, LLAMA_SHAPES, expand_shapes

#define CHECK_SHAPES "300x64x1001,1000x128x5003,129x192x4099"
#define VERL_SPLIT 9504          // verl's vocab split upstream
#define FWD_TOKEN_TILE 4096      // fuse_MN's forward: token tiles, so its buffer stays small
#define CHECK_VERL_SPLIT 400     // -c: several splits (and a padded stride) at small V
#define CHECK_FWD_TILE 128       // -c: several token tiles
#define SPLIT_THREADS 256        // row kernels over one vocab split
#define MEM_MARGIN ((size_t)1 << 30)        // naive: free memory it must leave
#define FUSE_MN_MAX_NVH 4e13     // fuse_MN is skipped above this N*V*H (seconds per call)

static flce_context *g_flce = NULL;

// the library's switches for the flce rows (-- options): -1 leaves the library's choice
typedef struct {
    int autotune, timing, pingpong, lt_backward, dw_scaled, dw_direct, dh_direct, wide_stats;
} FlceSwitches;
static FlceSwitches g_switches = {-1, -1, -1, -1, -1, -1, -1, -1};
static size_t g_budget = (size_t)1 << 30;  // --budget: the rows that take 1 GiB by default
static int64_t g_chunk = 0;   // --chunk, --dh-parts: the Hopper path's chunks (flce_dev_set_plan_chunk)
static int g_dh_parts = 0;
static int64_t g_vtile = 0;   // --vtile: the config's max_vocab_tile (0: the planner's choice)
static int g_side = -1;       // --side: the direct gradients side by side, d_h on this many SMs (0: never)

// ----------------------------------------------------------------------------------------
// row kernels of verl's split schedule (the whole-row kernel, ce_row_kernel, is common.cuh's)

// verl's forward, one block per row of one (tile, split) block of logits: the split's
// (max, sum-exp) merged into the row's running pair; the target logit picked up in its
// split; after the last split, lse and the per-token loss.
template <typename T>
__global__ void __launch_bounds__(SPLIT_THREADS)
split_stats_kernel(const T *buf, int64_t ld, int64_t col0, int64_t width, int64_t V,
                   const int *targets, int64_t row0, float *m_run, float *s_run, float *zt,
                   int first, int last, float *lse, float *token_loss) {
    const int64_t i = row0 + blockIdx.x;
    const T *row = buf + (int64_t)blockIdx.x * ld;
    Stats st;
    st.m = -INFINITY;
    st.s = 0.0f;
    row_visit(row, width, [&](int64_t, float z) { stats_push<false>(st, z); });
    st = block_reduce_stats<false>(st);
    if (threadIdx.x != 0) return;
    const int t = targets[i];
    if (t >= col0 && t < col0 + width) zt[i] = to_float(row[t - col0]);
    if (!first) {
        Stats run;
        run.m = m_run[i];
        run.s = s_run[i];
        st = stats_merge<false>(run, st);
    }
    m_run[i] = st.m;
    s_run[i] = st.s;
    if (last) {
        const float l = st.m + logf(st.s);
        lse[i] = l;
        token_loss[i] = (t >= 0 && t < V) ? l - zt[i] : 0.0f;
    }
}

// verl's backward, one block per row of one split of recomputed logits: dlogits in place
// from the saved lse.
template <typename T>
__global__ void __launch_bounds__(SPLIT_THREADS)
split_dlogits_kernel(T *buf, int64_t ld, int64_t col0, int64_t width, int64_t V,
                     const int *targets, int64_t row0, const float *lse, const int *n_valid) {
    const int64_t i = row0 + blockIdx.x;
    T *row = buf + (int64_t)blockIdx.x * ld;
    const int t = targets[i];
    if (!(t >= 0 && t < V)) {
        row_transform(row, width, [](int64_t, float) { return 0.0f; });
        return;
    }
    const float l = lse[i], inv_n = 1.0f / (float)*n_valid;
    const int64_t tc = (int64_t)t - col0;  // the target's column in this split, if any
    row_transform(row, width, [=](int64_t j, float z) {
        return (__expf(z - l) - (j == tc ? 1.0f : 0.0f)) * inv_n;
    });
}

// ----------------------------------------------------------------------------------------
// fuse_MN: one kernel, one block per (128 tokens x 128 vocab) tile, bf16 WMMA fragments
// (mma.sync on sm_90; no TMA / wgmma, no cp.async pipelining: this version is about the
// schedule, and its cost is dominated by the atomics anyway).
//
//   phase 1  Z = h[m0:+128] @ W[n0:+128]^T          k = H in steps of 32, fp32 fragments
//   phase 2  D = (exp(Z - lse) - onehot) / n_valid   bf16, in shared memory; 0 outside N, V
//   phase 3  d_h[m0:+128, :] += D @ W[n0:+128, :]    64 columns of H at a time, float4 atomics
//   phase 4  d_W[n0:+128, :] += D^T @ h[m0:+128, :]  likewise
//
// Shared memory: sZ (fp32 Z, then the 128 x 64 output staging), sD (bf16 D), one operand
// area (the two 128 x 32 tiles of phase 1, or one 128 x 64 tile of phases 3/4), lse and
// targets of the tile's rows. Strides are padded by 8 bf16 / 4 fp32 against bank conflicts,
// and keep every fragment pointer 32-byte aligned as WMMA requires.

#define FM_BM 128
#define FM_BN 128
#define FM_BK 32
#define FM_BH 64
#define FM_THREADS 256
#define FM_LDA (FM_BK + 8)
#define FM_LDD (FM_BN + 8)
#define FM_LDZ (FM_BN + 4)
#define FM_LDT (FM_BH + 8)
#define FM_LDO (FM_BH + 4)
#define FM_SZ_BYTES (FM_BM * FM_LDZ * 4)
#define FM_SD_BYTES (FM_BM * FM_LDD * 2)
#define FM_SOP_BYTES (2 * FM_BM * FM_LDA * 2)
#define FM_SMEM (FM_SZ_BYTES + FM_SD_BYTES + FM_SOP_BYTES + FM_BM * 8)
static_assert(FM_BM * FM_LDT * 2 <= FM_SOP_BYTES, "phase 3/4 operand tile fits");
static_assert(FM_BM * FM_LDO * 4 <= FM_SZ_BYTES, "output staging fits in sZ");
static_assert(FM_SZ_BYTES % 128 == 0 && FM_SD_BYTES % 128 == 0 && FM_SOP_BYTES % 128 == 0,
              "shared regions 128-byte aligned");

__device__ __forceinline__ void fm_atomic_add4(float *dst, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4 *>(dst), v);  // one 16-byte reduction (sm_90)
#else
    atomicAdd(dst, v.x); atomicAdd(dst + 1, v.y); atomicAdd(dst + 2, v.z); atomicAdd(dst + 3, v.w);
#endif
}

// a (128 x 64) tile of rows r0.. of a row-major (rows, H) bf16 matrix into shared (stride
// FM_LDT), zero rows at and past n_rows
__device__ __forceinline__ void fm_load_tile64(bf16 *dst, const bf16 *src, int64_t r0,
                                               int64_t n_rows, int64_t H, int64_t h0) {
    for (int idx = threadIdx.x; idx < FM_BM * (FM_BH / 8); idx += FM_THREADS) {
        const int r = idx / (FM_BH / 8), c = (idx % (FM_BH / 8)) * 8;
        int4 x = make_int4(0, 0, 0, 0);
        if (r0 + r < n_rows) x = *reinterpret_cast<const int4 *>(src + (r0 + r) * H + h0 + c);
        *reinterpret_cast<int4 *>(dst + r * FM_LDT + c) = x;
    }
}

__global__ void __launch_bounds__(FM_THREADS)
fuse_mn_kernel(const bf16 *h, const bf16 *W, const int *targets, const float *lse,
               const int *n_valid, int64_t N, int64_t H, int64_t V, float *dh32, float *dW) {
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char smem[];
    float *sZ = reinterpret_cast<float *>(smem);
    bf16 *sD = reinterpret_cast<bf16 *>(smem + FM_SZ_BYTES);
    bf16 *sOp = reinterpret_cast<bf16 *>(smem + FM_SZ_BYTES + FM_SD_BYTES);
    float *sLse = reinterpret_cast<float *>(smem + FM_SZ_BYTES + FM_SD_BYTES + FM_SOP_BYTES);
    int *sT = reinterpret_cast<int *>(sLse + FM_BM);
    bf16 *sA = sOp, *sB = sOp + FM_BM * FM_LDA;
    float *sO = sZ;

    // Diagonal order: the ~132 blocks in flight have distinct token tiles and distinct vocab
    // tiles, so they do not all hammer the same d_h (or d_W) rows at once.
    const int64_t Mt = ceil_div(N, FM_BM), Nt = ceil_div(V, FM_BN);
    const int64_t b = blockIdx.x;
    const int64_t mt = b % Mt, nt = (b / Mt + mt) % Nt;
    const int64_t m0 = mt * FM_BM, n0 = nt * FM_BN;
    const int tid = threadIdx.x, warp = tid / 32;

    int any = 0;
    if (tid < FM_BM) {
        const int64_t i = m0 + tid;
        int t = -1;
        float l = 0.0f;
        if (i < N) {
            const int ti = targets[i];
            if (ti >= 0 && ti < V) { t = ti; l = lse[i]; }
        }
        sT[tid] = t;  // -1: the row contributes nothing (ignored, or past N)
        sLse[tid] = l;
        any = t >= 0;
    }
    if (!__syncthreads_or(any)) return;  // D = 0: nothing to add
    const float inv_n = 1.0f / (float)*n_valid;

    // phase 1: each warp owns 32 rows x 64 columns of Z (2 x 4 fragments)
    {
        const int wr = warp / 2, wc = warp % 2;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][4];
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) wmma::fill_fragment(acc[i][j], 0.0f);
        for (int64_t k0 = 0; k0 < H; k0 += FM_BK) {
            for (int idx = tid; idx < FM_BM * (FM_BK / 8); idx += FM_THREADS) {
                const int r = idx / (FM_BK / 8), c = (idx % (FM_BK / 8)) * 8;
                int4 a = make_int4(0, 0, 0, 0), w = make_int4(0, 0, 0, 0);
                if (m0 + r < N) a = *reinterpret_cast<const int4 *>(h + (m0 + r) * H + k0 + c);
                if (n0 + r < V) w = *reinterpret_cast<const int4 *>(W + (n0 + r) * H + k0 + c);
                *reinterpret_cast<int4 *>(sA + r * FM_LDA + c) = a;
                *reinterpret_cast<int4 *>(sB + r * FM_LDA + c) = w;
            }
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < FM_BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[2];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[4];
#pragma unroll
                for (int i = 0; i < 2; i++)
                    wmma::load_matrix_sync(fa[i], sA + (wr * 32 + i * 16) * FM_LDA + kk, FM_LDA);
                // B = W_tile^T: element (k, n) is sB[n][k], a column-major matrix
#pragma unroll
                for (int j = 0; j < 4; j++)
                    wmma::load_matrix_sync(fb[j], sB + (wc * 64 + j * 16) * FM_LDA + kk, FM_LDA);
#pragma unroll
                for (int i = 0; i < 2; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                wmma::store_matrix_sync(sZ + (wr * 32 + i * 16) * FM_LDZ + wc * 64 + j * 16,
                                        acc[i][j], FM_LDZ, wmma::mem_row_major);
    }
    __syncthreads();

    // phase 2: dlogits of the tile, bf16 (as the peers' dlogits buffers are)
    for (int idx = tid; idx < FM_BM * FM_BN; idx += FM_THREADS) {
        const int r = idx / FM_BN, c = idx % FM_BN;
        const int t = sT[r];
        float d = 0.0f;
        if (t >= 0 && n0 + c < V)
            d = (__expf(sZ[r * FM_LDZ + c] - sLse[r]) - (n0 + c == t ? 1.0f : 0.0f)) * inv_n;
        sD[r * FM_LDD + c] = __float2bfloat16_rn(d);
    }
    __syncthreads();

    // phases 3 and 4: each warp owns 32 x 32 of a 128 x 64 output block (2 x 2 fragments)
    const int wr = warp / 2, wc = warp % 2;
    for (int phase = 0; phase < 2; phase++) {
        // phase 0 (d_h): A = D (tokens x vocab), B = W tile (vocab x H cols), rows m0.., N
        // phase 1 (d_W): A = D^T (vocab x tokens), B = h tile (tokens x H cols), rows n0.., V
        const bf16 *src = phase == 0 ? W : h;
        const int64_t src_r0 = phase == 0 ? n0 : m0, src_rows = phase == 0 ? V : N;
        float *dst = phase == 0 ? dh32 : dW;
        const int64_t dst_r0 = phase == 0 ? m0 : n0, dst_rows = phase == 0 ? N : V;
        for (int64_t h0 = 0; h0 < H; h0 += FM_BH) {
            fm_load_tile64(sOp, src, src_r0, src_rows, H, h0);
            __syncthreads();
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
#pragma unroll
            for (int kk = 0; kk < FM_BN; kk += 16) {  // FM_BN == FM_BM: k is 128 either way
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb[2];
#pragma unroll
                for (int j = 0; j < 2; j++)
                    wmma::load_matrix_sync(fb[j], sOp + kk * FM_LDT + wc * 32 + j * 16, FM_LDT);
                if (phase == 0) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[2];
#pragma unroll
                    for (int i = 0; i < 2; i++)
                        wmma::load_matrix_sync(fa[i], sD + (wr * 32 + i * 16) * FM_LDD + kk, FM_LDD);
#pragma unroll
                    for (int i = 0; i < 2; i++)
#pragma unroll
                        for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
                } else {
                    // D^T: element (n, m) is sD[m][n], a column-major matrix with stride FM_LDD
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> fa[2];
#pragma unroll
                    for (int i = 0; i < 2; i++)
                        wmma::load_matrix_sync(fa[i], sD + kk * FM_LDD + wr * 32 + i * 16, FM_LDD);
#pragma unroll
                    for (int i = 0; i < 2; i++)
#pragma unroll
                        for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
                }
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++)
                    wmma::store_matrix_sync(sO + (wr * 32 + i * 16) * FM_LDO + wc * 32 + j * 16,
                                            acc[i][j], FM_LDO, wmma::mem_row_major);
            __syncthreads();
            for (int idx = tid; idx < FM_BM * (FM_BH / 4); idx += FM_THREADS) {
                const int r = idx / (FM_BH / 4), c = (idx % (FM_BH / 4)) * 4;
                // d_h: rows of ignored tokens are exactly zero, skip their atomics
                const bool live = phase == 0 ? sT[r] >= 0 : dst_r0 + r < dst_rows;
                if (live) {
                    const float4 v = *reinterpret_cast<const float4 *>(sO + r * FM_LDO + c);
                    fm_atomic_add4(dst + (dst_r0 + r) * H + h0 + c, v);
                }
            }
            __syncthreads();  // sOp and sO are rewritten by the next step
        }
    }
}

// ----------------------------------------------------------------------------------------
// v1 naive

static int naive_setup(const Problem *P, Work *w, char *why, size_t why_len) {
    const size_t NV = (size_t)P->N * (size_t)P->V;
    const size_t need = NV * (sizeof(float) + sizeof(bf16)) + LT_WORKSPACE + (size_t)P->N * 4;
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    if (need + MEM_MARGIN > free_b) {
        snprintf(why, why_len, "does not fit: needs %.1f GiB, %.1f GiB free", gib(need), gib(free_b));
        return 1;
    }
    if (alloc_common(P, w, why, why_len)) return 1;
    WORK_ALLOC(w->buf, void *, NV * sizeof(float));
    WORK_ALLOC(w->buf16, bf16 *, NV * sizeof(bf16));
    w->ld = P->V;
    w->rows = P->N;
    snprintf(w->note, sizeof(w->note), "fp32 logits + bf16 dlogits (N, V), stride V");
    return 0;
}

static void naive_run(const Problem *P, Work *w) {
    const int64_t N = P->N, H = P->H, V = P->V;
    cudaStream_t s = P->stream;
    launch_count_valid(P, w->n_valid);
    // logits (row-major N x V) = h @ W^T: column-major (V x N) = W (H x V)^T @ h (H x N)
    gemm_check("naive logits", &g_gemm, s,
               {1, 0, V, N, H, {P->W, CUDA_R_16BF, H}, {P->h, CUDA_R_16BF, H},
                {w->buf, CUDA_R_32F, V}, 1.0f, 0.0f},
               w->lt_ws, LT_WORKSPACE);
    ce_row_kernel<float, false><<<(unsigned)N, CE_THREADS, 0, s>>>(
        (float *)w->buf, V, V, P->targets, 0, w->n_valid, w->token_loss);
    cudaCheck(cudaGetLastError());
    launch_f32_to_bf16(w->buf16, (const float *)w->buf, N * V, s);
    // d_h (N x H) = dlogits (N x V) @ W (V x H)
    gemm_check("naive d_h", &g_gemm, s,
               {0, 0, H, N, V, {P->W, CUDA_R_16BF, H}, {w->buf16, CUDA_R_16BF, V},
                {P->d_h, CUDA_R_16BF, H}, 1.0f, 0.0f},
               w->lt_ws, LT_WORKSPACE);
    // d_W (V x H) = dlogits^T (V x N) @ h (N x H)
    gemm_check("naive d_W", &g_gemm, s,
               {0, 1, H, V, N, {P->h, CUDA_R_16BF, H}, {w->buf16, CUDA_R_16BF, V},
                {P->d_W, CUDA_R_32F, H}, 1.0f, 0.0f},
               w->lt_ws, LT_WORKSPACE);
    launch_finalize(P, w->token_loss, w->n_valid, P->loss, NULL);
}

// ----------------------------------------------------------------------------------------
// v2 liger

static int liger_setup(const Problem *P, Work *w, char *why, size_t why_len) {
    // Liger: inc_factor = ceil(V / H), chunk = next_pow2(ceil(BT / inc_factor)), so C*V ~ N*H
    const int64_t chunk = next_pow2(ceil_div(P->N, ceil_div(P->V, P->H)));
    w->rows = chunk < P->N ? chunk : P->N;
    w->ld = P->V;  // unpadded, as torch allocates (C, V)
    if (alloc_common(P, w, why, why_len)) return 1;
    WORK_ALLOC(w->buf, void *, (size_t)w->rows * (size_t)w->ld * sizeof(bf16));
    snprintf(w->note, sizeof(w->note), "chunk %lld tokens (%lld chunks), bf16 (C, V) stride V, fp32 d_W",
             (long long)w->rows, (long long)ceil_div(P->N, w->rows));
    return 0;
}

static void liger_run(const Problem *P, Work *w) {
    const int64_t N = P->N, H = P->H, V = P->V;
    cudaStream_t s = P->stream;
    bf16 *buf = (bf16 *)w->buf;
    launch_count_valid(P, w->n_valid);
    for (int64_t c0 = 0; c0 < N; c0 += w->rows) {
        const int64_t rows = N - c0 < w->rows ? N - c0 : w->rows;
        const bf16 *hc = P->h + c0 * H;
        gemm_check("liger logits", &g_gemm, s,
                   {1, 0, V, rows, H, {P->W, CUDA_R_16BF, H}, {hc, CUDA_R_16BF, H},
                    {buf, CUDA_R_16BF, V}, 1.0f, 0.0f},
                   w->lt_ws, LT_WORKSPACE);
        ce_row_kernel<bf16, false><<<(unsigned)rows, CE_THREADS, 0, s>>>(
            buf, V, V, P->targets, c0, w->n_valid, w->token_loss);
        cudaCheck(cudaGetLastError());
        gemm_check("liger d_h", &g_gemm, s,
                   {0, 0, H, rows, V, {P->W, CUDA_R_16BF, H}, {buf, CUDA_R_16BF, V},
                    {P->d_h + c0 * H, CUDA_R_16BF, H}, 1.0f, 0.0f},
                   w->lt_ws, LT_WORKSPACE);
        gemm_check("liger d_W", &g_gemm, s,
                   {0, 1, H, V, rows, {hc, CUDA_R_16BF, H}, {buf, CUDA_R_16BF, V},
                    {P->d_W, CUDA_R_32F, H}, 1.0f, c0 > 0 ? 1.0f : 0.0f},
                   w->lt_ws, LT_WORKSPACE);
    }
    launch_finalize(P, w->token_loss, w->n_valid, P->loss, NULL);
}

// ----------------------------------------------------------------------------------------
// v3 verl split-N, and the forward fuse_MN shares

// rows: token rows of the buffer (N for v3; a tile for fuse_MN)
static int verl_alloc(const Problem *P, Work *w, int64_t rows, char *why, size_t why_len) {
    const size_t n4 = (size_t)P->N * sizeof(float);
    w->split = P->check ? CHECK_VERL_SPLIT : VERL_SPLIT;
    const int64_t width = w->split < P->V ? w->split : P->V;
    w->ld = round_up(width, LD_MULTIPLE);  // padded; the pad columns are never read
    w->rows = rows;
    if (alloc_common(P, w, why, why_len)) return 1;
    WORK_ALLOC(w->lse, float *, n4);
    WORK_ALLOC(w->m_run, float *, n4);
    WORK_ALLOC(w->s_run, float *, n4);
    WORK_ALLOC(w->zt, float *, n4);
    WORK_ALLOC(w->buf, void *, (size_t)rows * (size_t)w->ld * sizeof(bf16));
    WORK_ALLOC(w->dh32, float *, (size_t)P->N * (size_t)P->H * sizeof(float));
    return 0;
}

// Per (token tile, vocab split): logits into the buffer, merged into the rows' running
// (max, sum-exp). Ends with lse, per-token losses and the loss.
static void verl_forward(const Problem *P, Work *w) {
    const int64_t N = P->N, H = P->H, V = P->V;
    cudaStream_t s = P->stream;
    bf16 *buf = (bf16 *)w->buf;
    launch_count_valid(P, w->n_valid);
    for (int64_t t0 = 0; t0 < N; t0 += w->rows) {
        const int64_t rows = N - t0 < w->rows ? N - t0 : w->rows;
        for (int64_t col0 = 0; col0 < V; col0 += w->split) {
            const int64_t width = V - col0 < w->split ? V - col0 : w->split;
            // buf (rows x width, stride ld) = h[t0:] @ W[col0:col0+width]^T
            gemm_check("verl fwd logits", &g_gemm, s,
                       {1, 0, width, rows, H, {P->W + col0 * H, CUDA_R_16BF, H},
                        {P->h + t0 * H, CUDA_R_16BF, H}, {buf, CUDA_R_16BF, w->ld}, 1.0f, 0.0f},
                       w->lt_ws, LT_WORKSPACE);
            split_stats_kernel<bf16><<<(unsigned)rows, SPLIT_THREADS, 0, s>>>(
                buf, w->ld, col0, width, V, P->targets, t0, w->m_run, w->s_run, w->zt,
                col0 == 0, col0 + width == V, w->lse, w->token_loss);
            cudaCheck(cudaGetLastError());
        }
    }
    launch_finalize(P, w->token_loss, w->n_valid, P->loss, NULL);
}

static int verl_setup(const Problem *P, Work *w, char *why, size_t why_len) {
    if (verl_alloc(P, w, P->N, why, why_len)) return 1;
    snprintf(w->note, sizeof(w->note), "split %lld (%lld splits), bf16 buffer (N, %lld), fp32 d_h acc",
             (long long)w->split, (long long)ceil_div(P->V, w->split), (long long)w->ld);
    return 0;
}

static void verl_run(const Problem *P, Work *w) {
    const int64_t N = P->N, H = P->H, V = P->V;
    cudaStream_t s = P->stream;
    bf16 *buf = (bf16 *)w->buf;
    verl_forward(P, w);
    for (int64_t col0 = 0; col0 < V; col0 += w->split) {
        const int64_t width = V - col0 < w->split ? V - col0 : w->split;
        const bf16 *Ws = P->W + col0 * H;
        gemm_check("verl bwd logits", &g_gemm, s,
                   {1, 0, width, N, H, {Ws, CUDA_R_16BF, H}, {P->h, CUDA_R_16BF, H},
                    {buf, CUDA_R_16BF, w->ld}, 1.0f, 0.0f},
                   w->lt_ws, LT_WORKSPACE);
        split_dlogits_kernel<bf16><<<(unsigned)N, SPLIT_THREADS, 0, s>>>(
            buf, w->ld, col0, width, V, P->targets, 0, w->lse, w->n_valid);
        cudaCheck(cudaGetLastError());
        // d_h (N x H, fp32) += dlogits (N x width) @ W_split (width x H)
        gemm_check("verl d_h", &g_gemm, s,
                   {0, 0, H, N, width, {Ws, CUDA_R_16BF, H}, {buf, CUDA_R_16BF, w->ld},
                    {w->dh32, CUDA_R_32F, H}, 1.0f, col0 > 0 ? 1.0f : 0.0f},
                   w->lt_ws, LT_WORKSPACE);
        // d_W[split] (width x H) = dlogits^T (width x N) @ h (N x H)
        gemm_check("verl d_W", &g_gemm, s,
                   {0, 1, H, width, N, {P->h, CUDA_R_16BF, H}, {buf, CUDA_R_16BF, w->ld},
                    {P->d_W + col0 * H, CUDA_R_32F, H}, 1.0f, 0.0f},
                   w->lt_ws, LT_WORKSPACE);
    }
    launch_f32_to_bf16(P->d_h, w->dh32, N * H, s);
}

// ----------------------------------------------------------------------------------------
// v4 fuse_MN

static int fuse_mn_setup(const Problem *P, Work *w, char *why, size_t why_len) {
    const int64_t tiles = ceil_div(P->N, FM_BM) * ceil_div(P->V, FM_BN);
    if (P->H % FM_BH != 0) {
        snprintf(why, why_len, "skipped: H must be a multiple of %d", FM_BH);
        return 1;
    }
    if ((double)P->N * (double)P->V * (double)P->H > FUSE_MN_MAX_NVH) {
        snprintf(why, why_len, "skipped: N*V*H above %.0e (would take many seconds)", FUSE_MN_MAX_NVH);
        return 1;
    }
    if (tiles > INT32_MAX) {
        snprintf(why, why_len, "skipped: %lld tiles exceed the grid", (long long)tiles);
        return 1;
    }
    const int64_t fwd_tile = P->check ? CHECK_FWD_TILE : FWD_TOKEN_TILE;
    const int64_t tile = fwd_tile < P->N ? fwd_tile : P->N;
    if (verl_alloc(P, w, tile, why, why_len)) return 1;
    cudaCheck(cudaFuncSetAttribute(fuse_mn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, FM_SMEM));
    snprintf(w->note, sizeof(w->note), "fwd: verl's in %lld-token tiles; bwd: %lld WMMA tiles 128x128, float4 atomics",
             (long long)tile, (long long)tiles);
    return 0;
}

static void fuse_mn_run(const Problem *P, Work *w) {
    const int64_t N = P->N, H = P->H, V = P->V;
    cudaStream_t s = P->stream;
    verl_forward(P, w);
    cudaCheck(cudaMemsetAsync(w->dh32, 0, (size_t)N * H * sizeof(float), s));
    cudaCheck(cudaMemsetAsync(P->d_W, 0, (size_t)V * H * sizeof(float), s));
    const int64_t tiles = ceil_div(N, FM_BM) * ceil_div(V, FM_BN);
    fuse_mn_kernel<<<(unsigned)tiles, FM_THREADS, FM_SMEM, s>>>(P->h, P->W, P->targets, w->lse,
                                                               w->n_valid, N, H, V, w->dh32, P->d_W);
    cudaCheck(cudaGetLastError());
    launch_f32_to_bf16(P->d_h, w->dh32, N * H, s);
}

// ----------------------------------------------------------------------------------------
// v5 the library

// A fresh context with the switches of the command line.
static void flce_new_context(void) {
    flce_destroy(g_flce);
    flceCheck(flce_create(&g_flce), NULL);
    if (g_switches.autotune >= 0) flce_set_autotune(g_flce, g_switches.autotune);
    if (g_switches.timing >= 0) flce_dev_set_timing(g_flce, g_switches.timing);
    if (g_switches.pingpong >= 0) flce_dev_set_pingpong(g_flce, g_switches.pingpong);
    if (g_switches.dw_scaled >= 0) flce_dev_set_dw_scaled(g_flce, g_switches.dw_scaled);
    if (g_switches.dw_direct >= 0) flce_dev_set_dw_direct(g_flce, g_switches.dw_direct);
    if (g_switches.dh_direct >= 0) flce_dev_set_dh_direct(g_flce, g_switches.dh_direct);
}

// the library's defaults (bf16 in, int32 targets, mean, bf16 d_h, fp32 d_W, fp32 logits)
// except the budget, the GEMM path (cublaslt: flce_set_hopper_default(0) while the
// configuration is planned and its context made, so that the plan printed is the one that
// runs) and, for the "bf16 logits" row, the logits buffer's dtype
static int flce_setup_budget(const Problem *P, Work *w, size_t budget, int bf16_logits, int cublaslt, char *why,
                             size_t why_len) {
    if (cublaslt) flce_set_hopper_default(0);
    flce_config_init(&w->cfg, P->N, P->H, P->V);
    w->cfg.bf16_logits = bf16_logits;
    w->cfg.max_vocab_tile = g_vtile;
    size_t bytes = 0;
    flce_status st = flce_workspace_size(&w->cfg, budget, &bytes);
    if (st == FLCE_ERR_WORKSPACE) {
        snprintf(why, why_len, "budget %.0f MiB too small: needs %.0f MiB", (double)budget / 1048576.0,
                 (double)bytes / 1048576.0);
        if (cublaslt) flce_set_hopper_default(1);
        return 1;
    }
    flceCheck(st, NULL);
    WORK_ALLOC(w->flce_ws, void *, bytes);
    w->flce_ws_bytes = bytes;
    int64_t chunk = 0, vtile = 0;
    // the Hopper plan's gradient route, for sweeps of the planner's choices (--chunk, --dh-parts),
    // as the calls make it (the plain gradients under --dw-scaled 0 keep the statistics apart)
    char route[192] = "";
    if (!flce_hopper_default()) {
        chunk = flce_chunk_tokens(&w->cfg, bytes);
        vtile = flce_vocab_tile(&w->cfg, bytes);
    } else {
        flce_plan pl;
        flce_make_plan(&w->cfg, bytes, 1, 1, flce_device_hopper_sms(), g_switches.dw_scaled == 0 ? FLCE_CALL_PLAIN : 0,
                       &pl);
        chunk = pl.chunk;
        vtile = pl.chunk > 0 ? pl.vocab_tile : 0;
        // (a full chunk's d_h in two launches: flce_sm90_dh_split)
        int64_t fc = 0;
        int pb = 0;
        char split[64] = "";
        if (pl.chunk > 0 && flce_plan_dh_split(&pl, pl.chunk, P->H, pl.dh_parts, &fc, &pb))
            snprintf(split, sizeof(split), " (%lld columns at full K, the rest in %d)", (long long)fc, pb);
        if (pl.lt_backward) snprintf(route, sizeof(route), ", gradients by cuBLASLt on dlogits");
        else {
            const int parts = pl.side_sms ? pl.side_dh_parts : pl.dh_parts;  // (side by side: its own)
            snprintf(route, sizeof(route), ", d_h in %d K part%s%s%s%s", parts, parts > 1 ? "s" : "", split,
                     pl.dw_direct ? (pl.side_sms ? ", d_W by cuBLASLt on E beside d_h" : ", d_W by cuBLASLt on E") : "",
                     pl.stats_shared ? ", statistics in the d_h region" : "");
        }
    }
    const char *path = flce_hopper_default() ? "Hopper GEMMs" : "cuBLASLt";
    char tiles[96] = "";
    if (vtile < P->V)
        snprintf(tiles, sizeof(tiles), " x vocab tiles of %lld (%lld tiles, 4 GEMMs)", (long long)vtile,
                 (long long)ceil_div(P->V, vtile));
    // a fresh context per configuration, so that --timing (which prints the per-phase times of
    // a context when it is destroyed) reports each configuration on its own
    flce_destroy(g_flce);
    g_flce = NULL;
    fprintf(stderr, "flce config: %lldx%lldx%lld, %s, budget %.0f MiB (workspace %.0f), chunk %lld%s%s, %s logits\n",
            (long long)P->N, (long long)P->H, (long long)P->V, path, (double)budget / 1048576.0,
            (double)bytes / 1048576.0, (long long)chunk, tiles, route, bf16_logits ? "bf16" : "fp32");
    flce_new_context();
    snprintf(w->note, sizeof(w->note), "%s, budget %.0f MiB: chunk %lld tokens (%lld chunks)%s%s", path,
             (double)budget / 1048576.0, (long long)chunk, (long long)(chunk > 0 ? ceil_div(P->N, chunk) : 0),
             tiles, cublaslt ? (bf16_logits ? ", bf16 logits" : ", fp32 logits") : "");
    if (cublaslt) flce_set_hopper_default(1);
    return 0;
}

// the default path (flce's Hopper GEMMs where they run) with 1 GiB and 160 MiB, and the
// cuBLASLt path with fp32 and bf16 logits
static int flce_setup_1g(const Problem *P, Work *w, char *why, size_t why_len) {
    return flce_setup_budget(P, w, g_budget, 0, 0, why, why_len);
}

static int flce_setup_lean(const Problem *P, Work *w, char *why, size_t why_len) {
    return flce_setup_budget(P, w, (size_t)160 << 20, 0, 0, why, why_len);
}

static int flce_setup_lt(const Problem *P, Work *w, char *why, size_t why_len) {
    return flce_setup_budget(P, w, g_budget, 0, 1, why, why_len);
}

static int flce_setup_lt_bf16_logits(const Problem *P, Work *w, char *why, size_t why_len) {
    return flce_setup_budget(P, w, g_budget, 1, 1, why, why_len);
}

static int flce_setup_lt_lean(const Problem *P, Work *w, char *why, size_t why_len) {
    return flce_setup_budget(P, w, (size_t)160 << 20, 0, 1, why, why_len);
}

static void flce_run(const Problem *P, Work *w) {
    flce_tensors t;
    memset(&t, 0, sizeof(t));
    t.hidden = P->h;
    t.weight = P->W;
    t.targets = P->targets;
    t.loss = P->loss;
    t.d_hidden = P->d_h;
    t.d_weight = P->d_W;
    flceCheck(flce_forward_backward(g_flce, &w->cfg, &t, w->flce_ws, w->flce_ws_bytes, (void *)P->stream),
              g_flce);
}

static const Version g_versions[] = {
    {"naive", 1, naive_setup, naive_run},
    {"liger", 2, liger_setup, liger_run},
    {"verl split-N", 3, verl_setup, verl_run},
    {"fuse_MN", 4, fuse_mn_setup, fuse_mn_run},
    {"flce", 6, flce_setup_1g, flce_run},  // (group 6: -v flce1 selects it alone)
    {"flce lean", 5, flce_setup_lean, flce_run},
    {"flce cuBLASLt", 5, flce_setup_lt, flce_run},
    {"flce cuBLASLt bf16 logits", 5, flce_setup_lt_bf16_logits, flce_run},
    {"flce cuBLASLt lean", 5, flce_setup_lt_lean, flce_run},
};
#define N_VERSIONS ((int)(sizeof(g_versions) / sizeof(g_versions[0])))


// ----------------------------------------------------------------------------------------
// main

static void usage(const char *prog) {
    fprintf(stderr,
            "usage: %s [-v version|all] [-s shapes] [-r repeats] [-w warmups] [-o path] [-c] [--switch V ...]\n"
            "  -v  comma list of 1 naive, 2 liger, 3 verl, 4 fuse_mn, 5 flce (its five rows); default all\n"
            "  -s  comma list of NxHxV and of the named sets default, llama and all (the two);\n"
            "      default = %s\n"
            "      llama = %s\n"
            "      (the default list; with -c: %s)\n"
            "  -r  timed repeats per version and shape (default 7; fewer for slow versions)\n"
            "  -w  warm-up runs (default 2, at least 1)\n"
            "  -o  also write the markdown report to path\n"
            "  -c  correctness mode: small odd shapes against a CPU fp64 reference; exit 1 on a failure\n"
            "  the flce rows' library switches (default: the library's choice; NAME=V works too):\n"
            "  --autotune 0|1     0: cuBLASLt's heuristic pick, no autotuning (flce_set_autotune)\n"
            "  --timing           every phase of every call timed; per-call means on stderr\n"
            "  --pingpong 0|1     the Hopper logits GEMM: 0 cooperative, 1 ping-pong (default: by H)\n"
            "  --lt-backward 0|1  the Hopper path's gradients: 1 cuBLASLt's GEMMs on dlogits, 0 the\n"
            "                     fused GEMMs (default: by H)\n"
            "  --dw-scaled 0|1    0: the Hopper gradient GEMMs without the scaled transform\n"
            "  --dw-direct 0|1    0: the scaled d_W always by its fused GEMM, never cuBLASLt's on E\n"
            "  --dh-direct 0|1|2  where d_W is cuBLASLt's on E, d_h: 0 the scaled GEMM, 1 our plain\n"
            "                     GEMM on E (the default), 2 cuBLASLt's on E (then scaled per row)\n"
            "  --wide-stats 0|1   the Hopper path's statistics: 1 the wide logits GEMM's 192 columns\n"
            "                     where its epilogue serves (the default), 0 256 columns\n"
            "  --budget MiB       the workspace budget of the rows that take 1 GiB by default\n"
            "  --chunk T          the Hopper path's chunks: at most T tokens, the largest that fits (no\n"
            "                     shorter one for whole waves), the chunk schedule wherever one fits\n"
            "  --vtile T          vocabulary tiles of at most T columns (>= %d: the tile schedule)\n"
            "  --dh-parts P       the Hopper path's fused d_h GEMM in P K parts (1..%d)\n"
            "  --side S           the direct gradients side by side on two streams, d_h on S SMs\n"
            "                     in every chunk; 0 never (default: in chunks of up to 1024 tokens)\n",
            prog, DEFAULT_SHAPES, LLAMA_SHAPES, CHECK_SHAPES, FLCE_VOCAB_ALIGN, FLCE_DEV_MAX_DH_PARTS);
}

// --NAME N or --NAME=N for the numeric options (--budget MiB, --chunk tokens, --dh-parts P,
// --side S, --vtile columns);
// 0 if the argument is none of them or its value is out of range
static int parse_number(int argc, char **argv, int *i) {
    static const struct {
        const char *name;
        long long lo, hi;
    } names[] = {{"budget", 1, 1ll << 20}, {"chunk", 1, 1ll << 24}, {"dh-parts", 1, FLCE_DEV_MAX_DH_PARTS},
                 {"side", 0, 1024}, {"vtile", FLCE_VOCAB_ALIGN, 1ll << 30}};
    const char *arg = argv[*i] + 2, *eq = strchr(arg, '=');
    const size_t len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        if (strlen(names[k].name) != len || strncmp(arg, names[k].name, len) != 0) continue;
        const char *v = eq != NULL ? eq + 1 : (*i + 1 < argc ? argv[*i + 1] : NULL);
        if (v == NULL) return 0;
        char *end = NULL;
        const long long x = strtoll(v, &end, 10);
        if (end == v || *end != '\0' || x < names[k].lo || x > names[k].hi) return 0;
        if (eq == NULL) ++*i;
        if (k == 0) g_budget = (size_t)x << 20;
        else if (k == 1) g_chunk = x;
        else if (k == 2) g_dh_parts = (int)x;
        else if (k == 3) g_side = (int)x;
        else g_vtile = x;
        return 1;
    }
    return 0;
}

// --NAME V or --NAME=V (V 0 or 1, up to 2 for --dh-direct; --timing alone is 1) into
// g_switches; 0 for anything else
static int parse_switch(int argc, char **argv, int *i) {
    static const struct {
        const char *name;
        size_t offset;
        char max;  // the largest value
    } names[] = {{"autotune", offsetof(FlceSwitches, autotune), '1'},
                 {"timing", offsetof(FlceSwitches, timing), '1'},
                 {"pingpong", offsetof(FlceSwitches, pingpong), '1'},
                 {"lt-backward", offsetof(FlceSwitches, lt_backward), '1'},
                 {"dw-scaled", offsetof(FlceSwitches, dw_scaled), '1'},
                 {"dw-direct", offsetof(FlceSwitches, dw_direct), '1'},
                 {"dh-direct", offsetof(FlceSwitches, dh_direct), '2'},
                 {"wide-stats", offsetof(FlceSwitches, wide_stats), '1'}};
    const char *arg = argv[*i] + 2, *eq = strchr(arg, '=');
    const size_t len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        if (strlen(names[k].name) != len || strncmp(arg, names[k].name, len) != 0) continue;
        const char *v = eq != NULL ? eq + 1 : NULL;
        if (v == NULL && strcmp(names[k].name, "timing") == 0) v = "1";
        if (v == NULL && *i + 1 < argc) v = argv[++*i];
        if (v == NULL || v[0] < '0' || v[0] > names[k].max || v[1] != '\0') return 0;
        *(int *)((char *)&g_switches + names[k].offset) = v[0] - '0';
        return 1;
    }
    return 0;
}

static unsigned parse_versions(const char *s) {
    static const char *names[] = {"naive", "liger", "verl", "fuse_mn", "flce"};
    unsigned mask = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *tok = strtok(buf, ","); tok != NULL; tok = strtok(NULL, ",")) {
        if (strcmp(tok, "all") == 0) { mask |= 0x3f; continue; }
        if (strcmp(tok, "flce1") == 0) { mask |= 0x20; continue; }  // the default flce row alone
        int g = 0;
        if (tok[0] >= '1' && tok[0] <= '5' && tok[1] == '\0') g = tok[0] - '0';
        for (int k = 0; k < 5; k++)
            if (strcmp(tok, names[k]) == 0) g = k + 1;
        if (strcmp(tok, "fusemn") == 0 || strcmp(tok, "fuse_MN") == 0) g = 4;
        if (g == 0) {
            fprintf(stderr, "unknown version '%s'\n", tok);
            exit(EXIT_FAILURE);
        }
        mask |= 1u << (g - 1);
        if (g == 5) mask |= 0x20;  // every flce row
    }
    return mask;
}

int main(int argc, char **argv) {
    BenchArgs a;
    memset(&a, 0, sizeof(a));
    a.versions = g_versions;
    a.n_versions = N_VERSIONS;
    a.mask = 0x3f;
    snprintf(a.shapes, sizeof(a.shapes), "%s", DEFAULT_SHAPES);
    a.repeats = 7;
    a.warmups = 2;
    a.name = "flce_bench";
    a.what = "the FLCE strategies side by side";
    char check_note[96];
    snprintf(check_note, sizeof(check_note), "verl split %d, fuse_MN forward tile %d", CHECK_VERL_SPLIT,
             CHECK_FWD_TILE);
    a.check_note = check_note;
    int check = 0, shapes_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const int has_val = i + 1 < argc;
        if (strcmp(arg, "-c") == 0) {
            check = 1;
        } else if (strcmp(arg, "-v") == 0 && has_val) {
            a.mask = parse_versions(argv[++i]);
        } else if (strcmp(arg, "-s") == 0 && has_val) {
            if (!expand_shapes(argv[++i], a.shapes, sizeof(a.shapes))) {
                fprintf(stderr, "shape list too long: %s\n", argv[i]);
                return 2;
            }
            shapes_given = 1;
        } else if (strcmp(arg, "-r") == 0 && has_val) {
            a.repeats = atoi(argv[++i]);
        } else if (strcmp(arg, "-w") == 0 && has_val) {
            a.warmups = atoi(argv[++i]);
        } else if (strcmp(arg, "-o") == 0 && has_val) {
            a.out_path = argv[++i];
        } else if (strncmp(arg, "--", 2) == 0 && (parse_number(argc, argv, &i) || parse_switch(argc, argv, &i))) {
            continue;
        } else {
            // (the argument and, where it takes one, the value after it)
            const char *next = i + 1 < argc && strchr(arg, '=') == NULL ? argv[i + 1] : NULL;
            if (strcmp(arg, "-h") != 0)
                fprintf(stderr, "%s: unknown option, a missing value or one out of range: %s%s%s\n", argv[0], arg,
                        next != NULL ? " " : "", next != NULL ? next : "");
            usage(argv[0]);
            return strcmp(arg, "-h") == 0 ? 0 : 2;
        }
    }
    if (check && !shapes_given) snprintf(a.shapes, sizeof(a.shapes), "%s", CHECK_SHAPES);
    if (a.repeats < 1) a.repeats = 1;
    if (a.repeats > 64) a.repeats = 64;
    if (a.warmups < 1) a.warmups = 1;

    cudaStream_t s = bench_init();
    if (g_switches.lt_backward >= 0) flce_dev_set_lt_backward(g_switches.lt_backward);  // (process-wide)
    if (g_switches.wide_stats >= 0) flce_dev_set_wide_stats(g_switches.wide_stats);
    if (g_chunk > 0 || g_dh_parts > 0) flce_dev_set_plan_chunk(g_chunk, g_dh_parts);
    if (g_side >= 0) flce_dev_set_side(g_side);
    flce_new_context();
    const int rc = check ? run_check(&a, s) : run_bench(&a, s);
    flce_destroy(g_flce);
    bench_free(s);
    return rc;
}
