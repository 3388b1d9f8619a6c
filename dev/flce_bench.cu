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

The flce rows under the library's own choices by default; the -- options set its switches for
an A/B (flce.h's flce_set_autotune, flce_internal.h's dev switches): cuBLASLt's heuristic pick
instead of autotuning, per-phase times (printed to stderr per configuration), the Hopper
logits GEMM's schedule, the Hopper path's gradients from cuBLASLt's GEMMs (1) or the fused
ones (0), the scaled d_W transform off (0).

Benchmark mode, per shape, in one process: random inputs (h, W uniform with std H^-1/4 so
the logits are ~N(0, 1); targets uniform, ~5% ignored), a GPU reference (fp32 GEMMs on the
bf16-rounded inputs, exact fp32 accumulation: CUBLAS_COMPUTE_32F without TF32), the bf16
GEMM rate at 8192^3 (once) and at the shape's logits GEMM, the 3-GEMM floor 6NVH / rate,
then per version: median ms of the whole fwd+bwd (CUDA events, after warm-ups), x floor,
6NVH / t, the extra device memory its setup allocated (our own cudaMallocs, counted), the
loss's absolute error and the rel L2 of d_h and d_W against the reference. It reports,
never asserts.

Correctness mode (-c): every version on small odd shapes against a CPU fp64 reference in
this file; PASS/FAIL per version (d_h, d_W rel L2 <= 1e-2, loss abs error <= 1e-3); outputs
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

#include "common.cuh"
#include "flce.h"
#include "flce_internal.h"  // the library's dev switches (--pingpong, --lt-backward, ...)
#include "test_util.h"

#define DEFAULT_SHAPES "8192x768x50304,4096x4096x128256,16384x4096x151936,65535x1024x176245"
#define CHECK_SHAPES "300x64x1001,1000x128x5003,129x192x4099"
#define IGNORE_FRAC 0.05f
#define VERL_SPLIT 9504          // verl's vocab split upstream
#define FWD_TOKEN_TILE 4096      // fuse_MN's forward: token tiles, so its buffer stays small
#define CHECK_VERL_SPLIT 400     // -c: several splits (and a padded stride) at small V
#define CHECK_FWD_TILE 128       // -c: several token tiles
#define LD_MULTIPLE 64           // padded strides (verl's buffer, the reference's, the rate GEMM)
#define CE_THREADS 512           // row kernels over whole vocab rows
#define SPLIT_THREADS 256        // row kernels over one vocab split
#define MEM_MARGIN ((size_t)1 << 30)        // naive: free memory it must leave
#define RATE_BUF_MAX ((size_t)4 << 30)      // the at-shape rate GEMM's output buffer
#define REF_CHUNK_MAX ((size_t)2 << 30)     // the reference's fp32 logits chunk
#define SLOW_MS 2000.0f          // a first run slower than this is the only run
#define BUDGET_MS 5000.0f        // timed runs of one version at one shape, about
#define FUSE_MN_MAX_NVH 4e13     // fuse_MN is skipped above this N*V*H (seconds per call)
#define CHECK_TOL_GRAD 1e-2
#define CHECK_TOL_LOSS 1e-3
#define CHECK_TOL_REF_GRAD 1e-4  // the GPU reference (fp32) against the CPU one (fp64)
#define CHECK_TOL_REF_LOSS 1e-5

static gemm_cache g_gemm;   // the cuBLASLt handle and the descriptor cache, all versions
static flce_context *g_flce = NULL;
static int g_sm_count = 132;

// the library's switches for the flce rows (-- options): -1 leaves the library's choice
typedef struct {
    int autotune, timing, pingpong, lt_backward, dw_scaled;
} FlceSwitches;
static FlceSwitches g_switches = {-1, -1, -1, -1, -1};

// ----------------------------------------------------------------------------------------
// the report: markdown to stdout, and kept for -o

static char *g_report = NULL;
static size_t g_report_len = 0, g_report_cap = 0;

__attribute__((format(printf, 1, 2))) static void report(const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    vprintf(fmt, ap);
    va_end(ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n <= 0) return;
    if (g_report_len + (size_t)n + 1 > g_report_cap) {
        g_report_cap = (g_report_len + (size_t)n + 1) * 2;
        g_report = (char *)realloc(g_report, g_report_cap);
        if (g_report == NULL) { fprintf(stderr, "out of host memory\n"); exit(EXIT_FAILURE); }
    }
    va_start(ap, fmt);
    vsnprintf(g_report + g_report_len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    g_report_len += (size_t)n;
    fflush(stdout);
}

// ----------------------------------------------------------------------------------------
// the problem and a version's state

typedef struct {
    int64_t N, H, V;
    const bf16 *h, *W;      // (N, H), (V, H)
    const int *targets;     // (N)
    float *loss;            // scalar
    bf16 *d_h;              // (N, H)
    float *d_W;             // (V, H)
    int64_t verl_split;     // vocab columns per split (verl, fuse_MN's forward)
    int64_t fwd_tile;       // token rows per tile of fuse_MN's forward
    cudaStream_t stream;
} Problem;

typedef struct {
    DevArena arena;
    void *lt_ws;            // cuBLASLt workspace
    int *n_valid;
    float *token_loss, *lse, *m_run, *s_run, *zt;
    void *buf;              // the logits / dlogits buffer
    bf16 *buf16;            // naive: the bf16 copy of dlogits
    float *dh32;            // verl, fuse_MN: fp32 d_h accumulator
    int64_t ld;             // row stride of buf, elements
    int64_t rows;           // token rows of buf
    int64_t split;          // vocab columns per split
    flce_config cfg;
    void *flce_ws;
    size_t flce_ws_bytes;
    char note[192];         // the schedule, for the table
} Work;

typedef int (*setup_fn)(const Problem *P, Work *w, char *why, size_t why_len);
typedef void (*run_fn)(const Problem *P, Work *w);

typedef struct {
    const char *name;
    int group;              // the number -v selects
    setup_fn setup;         // 0: ready; 1: skipped, reason in why
    run_fn run;             // enqueues one fwd+bwd on P->stream
} Version;

__host__ __device__ static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t x, int64_t m) { return ceil_div(x, m) * m; }
static int64_t next_pow2(int64_t x) {
    int64_t p = 1;
    while (p < x) p *= 2;
    return p;
}
static double gib(size_t b) { return (double)b / (double)(1ull << 30); }

static unsigned grid_for(int64_t n, int threads) {
    int64_t b = ceil_div(n, threads), cap = (int64_t)g_sm_count * 16;
    if (b > cap) b = cap;
    return b < 1 ? 1u : (unsigned)b;
}

// ----------------------------------------------------------------------------------------
// row kernels

// One block per row of a (rows, ld) logits buffer, the whole vocabulary: loss, and dlogits
// = (softmax - onehot) / n_valid written in place (zeros for an ignored row). Used by the
// naive version (fp32, stride V), Liger's (bf16, stride V) and the reference (fp32, padded,
// PRECISE: accurate expf).
template <typename T, bool PRECISE>
__global__ void __launch_bounds__(CE_THREADS)
ce_row_kernel(T *logits, int64_t ld, int64_t V, const int *targets, int64_t row0,
              const int *n_valid, float *token_loss) {
    const int64_t i = row0 + blockIdx.x;
    T *row = logits + (int64_t)blockIdx.x * ld;
    const int t = targets[i];
    if (!(t >= 0 && t < V)) {  // uniform over the block
        row_transform(row, V, [](int64_t, float) { return 0.0f; });
        if (threadIdx.x == 0) token_loss[i] = 0.0f;
        return;
    }
    // every thread reads the target logit before the reduction's barriers; writes come after
    const float zt = to_float(row[t]);
    Stats st;
    st.m = -INFINITY;
    st.s = 0.0f;
    row_visit(row, V, [&](int64_t, float z) { stats_push<PRECISE>(st, z); });
    st = block_reduce_stats<PRECISE>(st);
    const float lse = st.m + logf(st.s);
    if (threadIdx.x == 0) token_loss[i] = lse - zt;
    const float inv_n = 1.0f / (float)*n_valid;
    row_transform(row, V, [=](int64_t j, float z) {
        return (fexp<PRECISE>(z - lse) - (j == t ? 1.0f : 0.0f)) * inv_n;
    });
}

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
// host: launches shared by the versions

static void launch_count_valid(const Problem *P, int *n_valid) {
    cudaCheck(cudaMemsetAsync(n_valid, 0, sizeof(int), P->stream));
    count_valid_kernel<<<grid_for(P->N, 256), 256, 0, P->stream>>>(P->targets, P->N, P->V, n_valid);
    cudaCheck(cudaGetLastError());
}

static void launch_finalize(const Problem *P, const float *token_loss, const int *n_valid,
                            float *loss, double *loss64) {
    loss_finalize_kernel<<<1, 1024, 0, P->stream>>>(token_loss, P->N, n_valid, loss, loss64);
    cudaCheck(cudaGetLastError());
}

static void launch_f32_to_bf16(bf16 *out, const float *in, int64_t n, cudaStream_t s) {
    f32_to_bf16_kernel<<<grid_for(n / 8 + 1, 256), 256, 0, s>>>(out, in, n);
    cudaCheck(cudaGetLastError());
}

// allocation in a version's setup: out of memory is a skip, with the reason
#define WORK_ALLOC(ptr, type, bytes)                                                        \
    do {                                                                                    \
        const size_t b_ = (bytes);                                                          \
        ptr = (type)arena_alloc(&w->arena, b_);                                             \
        if (ptr == NULL) {                                                                  \
            snprintf(why, why_len, "out of device memory (a %.2f GiB buffer)", gib(b_));    \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

// what every hand-written version needs: a cuBLASLt workspace, the count, per-token losses
static int alloc_common(const Problem *P, Work *w, char *why, size_t why_len) {
    WORK_ALLOC(w->lt_ws, void *, LT_WORKSPACE);
    WORK_ALLOC(w->n_valid, int *, sizeof(int));
    WORK_ALLOC(w->token_loss, float *, (size_t)P->N * sizeof(float));
    return 0;
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
    w->split = P->verl_split;
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
    const int64_t tile = P->fwd_tile < P->N ? P->fwd_tile : P->N;
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
    const int64_t chunk = flce_chunk_tokens(&w->cfg, bytes), vtile = flce_vocab_tile(&w->cfg, bytes);
    const char *path = flce_hopper_default() ? "Hopper GEMMs" : "cuBLASLt";
    char tiles[96] = "";
    if (vtile < P->V)
        snprintf(tiles, sizeof(tiles), " x vocab tiles of %lld (%lld tiles, 4 GEMMs)", (long long)vtile,
                 (long long)ceil_div(P->V, vtile));
    // a fresh context per configuration, so that --timing (which prints the per-phase times of
    // a context when it is destroyed) reports each configuration on its own
    flce_destroy(g_flce);
    g_flce = NULL;
    fprintf(stderr, "flce config: %lldx%lldx%lld, %s, budget %.0f MiB, chunk %lld%s, %s logits\n",
            (long long)P->N, (long long)P->H, (long long)P->V, path, (double)budget / 1048576.0,
            (long long)chunk, tiles, bf16_logits ? "bf16" : "fp32");
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
    return flce_setup_budget(P, w, (size_t)1 << 30, 0, 0, why, why_len);
}

static int flce_setup_lean(const Problem *P, Work *w, char *why, size_t why_len) {
    return flce_setup_budget(P, w, (size_t)160 << 20, 0, 0, why, why_len);
}

static int flce_setup_lt(const Problem *P, Work *w, char *why, size_t why_len) {
    return flce_setup_budget(P, w, (size_t)1 << 30, 0, 1, why, why_len);
}

static int flce_setup_lt_bf16_logits(const Problem *P, Work *w, char *why, size_t why_len) {
    return flce_setup_budget(P, w, (size_t)1 << 30, 1, 1, why, why_len);
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
    {"flce", 5, flce_setup_1g, flce_run},
    {"flce lean", 5, flce_setup_lean, flce_run},
    {"flce cuBLASLt", 5, flce_setup_lt, flce_run},
    {"flce cuBLASLt bf16 logits", 5, flce_setup_lt_bf16_logits, flce_run},
    {"flce cuBLASLt lean", 5, flce_setup_lt_lean, flce_run},
};
#define N_VERSIONS ((int)(sizeof(g_versions) / sizeof(g_versions[0])))

static void work_release(Work *w) {
    arena_free(&w->arena);
    // descriptors of this version's shapes; the next version builds its own (outside timing)
    gemm_cache_release(&g_gemm);
}

// ----------------------------------------------------------------------------------------
// the GPU reference: fp32 copies of the bf16 inputs, token chunks of fp32 logits, fp32
// GEMMs (CUBLAS_COMPUTE_32F with fp32 operands: plain fp32, no TF32), accurate expf

static double reference_gpu(const Problem *P, float *dh_ref, float *dW_ref, int64_t *chunk_out) {
    const int64_t N = P->N, H = P->H, V = P->V;
    const int64_t ldr = round_up(V, LD_MULTIPLE);
    int64_t C = (int64_t)(REF_CHUNK_MAX / ((size_t)ldr * sizeof(float))) / 128 * 128;
    if (C < 128) C = 128;
    if (C > N) C = N;
    *chunk_out = C;
    cudaStream_t s = P->stream;
    float *h32, *W32, *logits, *token_loss;
    int *n_valid;
    double *loss64;
    void *ws;
    cudaCheck(cudaMalloc(&h32, (size_t)N * H * sizeof(float)));
    cudaCheck(cudaMalloc(&W32, (size_t)V * H * sizeof(float)));
    cudaCheck(cudaMalloc(&logits, (size_t)C * ldr * sizeof(float)));
    cudaCheck(cudaMalloc(&token_loss, (size_t)N * sizeof(float)));
    cudaCheck(cudaMalloc(&n_valid, sizeof(int)));
    cudaCheck(cudaMalloc(&loss64, sizeof(double)));
    cudaCheck(cudaMalloc(&ws, LT_WORKSPACE));
    bf16_to_f32_kernel<<<grid_for(N * H, 256), 256, 0, s>>>(h32, P->h, N * H);
    cudaCheck(cudaGetLastError());
    bf16_to_f32_kernel<<<grid_for(V * H, 256), 256, 0, s>>>(W32, P->W, V * H);
    cudaCheck(cudaGetLastError());
    launch_count_valid(P, n_valid);
    for (int64_t c0 = 0; c0 < N; c0 += C) {
        const int64_t rows = N - c0 < C ? N - c0 : C;
        const float *hc = h32 + c0 * H;
        gemm_check("ref logits", &g_gemm, s,
                   {1, 0, V, rows, H, {W32, CUDA_R_32F, H}, {hc, CUDA_R_32F, H},
                    {logits, CUDA_R_32F, ldr}, 1.0f, 0.0f},
                   ws, LT_WORKSPACE);
        ce_row_kernel<float, true><<<(unsigned)rows, CE_THREADS, 0, s>>>(logits, ldr, V, P->targets,
                                                                         c0, n_valid, token_loss);
        cudaCheck(cudaGetLastError());
        gemm_check("ref d_h", &g_gemm, s,
                   {0, 0, H, rows, V, {W32, CUDA_R_32F, H}, {logits, CUDA_R_32F, ldr},
                    {dh_ref + c0 * H, CUDA_R_32F, H}, 1.0f, 0.0f},
                   ws, LT_WORKSPACE);
        gemm_check("ref d_W", &g_gemm, s,
                   {0, 1, H, V, rows, {hc, CUDA_R_32F, H}, {logits, CUDA_R_32F, ldr},
                    {dW_ref, CUDA_R_32F, H}, 1.0f, c0 > 0 ? 1.0f : 0.0f},
                   ws, LT_WORKSPACE);
    }
    launch_finalize(P, token_loss, n_valid, NULL, loss64);
    double loss = 0.0;
    cudaCheck(cudaMemcpyAsync(&loss, loss64, sizeof(double), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    cudaCheck(cudaFree(h32));
    cudaCheck(cudaFree(W32));
    cudaCheck(cudaFree(logits));
    cudaCheck(cudaFree(token_loss));
    cudaCheck(cudaFree(n_valid));
    cudaCheck(cudaFree(loss64));
    cudaCheck(cudaFree(ws));
    gemm_cache_release(&g_gemm);
    return loss;
}

// ||out - ref|| / ||ref|| on the GPU; INFINITY if out has a non-finite element
static double *g_diff_sums = NULL;
static unsigned long long *g_diff_bad = NULL;

template <typename T>
static double rel_l2_gpu(const T *out, const float *ref, int64_t n, cudaStream_t s) {
    cudaCheck(cudaMemsetAsync(g_diff_sums, 0, 2 * sizeof(double), s));
    cudaCheck(cudaMemsetAsync(g_diff_bad, 0, sizeof(unsigned long long), s));
    diff_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(out, ref, n, g_diff_sums, g_diff_bad);
    cudaCheck(cudaGetLastError());
    double sums[2];
    unsigned long long bad = 0;
    cudaCheck(cudaMemcpyAsync(sums, g_diff_sums, sizeof(sums), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaMemcpyAsync(&bad, g_diff_bad, sizeof(bad), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    if (bad) return INFINITY;
    return sums[1] > 0.0 ? sqrt(sums[0] / sums[1]) : sqrt(sums[0]);
}

// ----------------------------------------------------------------------------------------
// timing

// median ms of D (m x n) = A^T B, bf16 in and out, fp32 accumulation; returns TFLOP/s
static double gemm_rate(const char *what, int64_t m, int64_t n, int64_t k, const void *A,
                        int64_t lda, const void *B, int64_t ldb, void *D, int64_t ldd, void *ws,
                        cudaStream_t s) {
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    float ms[10];
    for (int it = -3; it < 10; it++) {
        cudaCheck(cudaEventRecord(e0, s));
        gemm_check(what, &g_gemm, s,
                   {1, 0, m, n, k, {A, CUDA_R_16BF, lda}, {B, CUDA_R_16BF, ldb},
                    {D, CUDA_R_16BF, ldd}, 1.0f, 0.0f},
                   ws, LT_WORKSPACE);
        cudaCheck(cudaEventRecord(e1, s));
        cudaCheck(cudaEventSynchronize(e1));
        if (it >= 0) cudaCheck(cudaEventElapsedTime(&ms[it], e0, e1));
    }
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    gemm_cache_release(&g_gemm);
    return 2.0 * (double)m * (double)n * (double)k / ((double)median_of(ms, 10) * 1e9);
}

// NaN (all-ones bits, in bf16 and fp32) in every output: an element a version does not write
// shows up as a non-finite error
static void poison_outputs(const Problem *P) {
    cudaCheck(cudaMemsetAsync(P->loss, 0xff, sizeof(float), P->stream));
    cudaCheck(cudaMemsetAsync(P->d_h, 0xff, (size_t)P->N * P->H * sizeof(bf16), P->stream));
    cudaCheck(cudaMemsetAsync(P->d_W, 0xff, (size_t)P->V * P->H * sizeof(float), P->stream));
}

// one fwd+bwd between events, outputs poisoned before (outside the events)
static float run_timed(const Version *v, const Problem *P, Work *w, cudaEvent_t e0, cudaEvent_t e1) {
    poison_outputs(P);
    cudaCheck(cudaEventRecord(e0, P->stream));
    v->run(P, w);
    cudaCheck(cudaEventRecord(e1, P->stream));
    cudaCheck(cudaEventSynchronize(e1));
    cudaCheck(cudaGetLastError());
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
}

// ----------------------------------------------------------------------------------------
// benchmark mode

typedef struct {
    int64_t N, H, V;
} Shape;

typedef struct {
    int ran;               // 0: skipped (reason in why)
    char why[160];
    char note[192];
    double ms, spread, x_floor, tflops, extra_mib, loss_err, dh_rel, dw_rel;
    int runs, cold;        // cold: the only run was the first (slower than SLOW_MS)
} Result;

typedef struct {
    unsigned mask;         // bit g-1: version group g
    char shapes[2048];
    int shapes_given;
    int repeats, warmups;
    const char *out_path;
    int check;
} Args;

static int parse_shapes(const char *s, Shape *out, int max) {
    int n = 0;
    const char *p = s;
    while (*p && n < max) {
        long long N, H, V;
        int used = 0;
        if (sscanf(p, "%lldx%lldx%lld%n", &N, &H, &V, &used) != 3 || N <= 0 || H <= 0 || V <= 0) {
            fprintf(stderr, "bad shape list '%s' (want NxHxV,NxHxV,...)\n", s);
            exit(EXIT_FAILURE);
        }
        if (H % 8 != 0 || N > INT32_MAX || V > INT32_MAX) {
            fprintf(stderr, "shape %lldx%lldx%lld: H must be a multiple of 8 (16-byte rows), N and V < 2^31\n",
                    N, H, V);
            exit(EXIT_FAILURE);
        }
        out[n].N = N;
        out[n].H = H;
        out[n].V = V;
        n++;
        p += used;
        if (*p == ',') p++;
        else if (*p) {
            fprintf(stderr, "bad shape list '%s'\n", s);
            exit(EXIT_FAILURE);
        }
    }
    return n;
}

// Inputs of one shape on the device: h, W uniform with std H^-1/4 (amplitude sqrt(3) H^-1/4)
// so the logits have variance ~1; targets uniform, IGNORE_FRAC of them -100.
static void make_inputs(Problem *P, uint64_t seed) {
    const float amp = sqrtf(3.0f) * powf((float)P->H, -0.25f);
    fill_uniform_bf16_kernel<<<grid_for(P->N * P->H, 256), 256, 0, P->stream>>>(
        (bf16 *)P->h, P->N * P->H, amp, seed * 3 + 0);
    cudaCheck(cudaGetLastError());
    fill_uniform_bf16_kernel<<<grid_for(P->V * P->H, 256), 256, 0, P->stream>>>(
        (bf16 *)P->W, P->V * P->H, amp, seed * 3 + 1);
    cudaCheck(cudaGetLastError());
    fill_targets_kernel<<<grid_for(P->N, 256), 256, 0, P->stream>>>((int *)P->targets, P->N, P->V,
                                                                     IGNORE_FRAC, seed * 3 + 2);
    cudaCheck(cudaGetLastError());
}

static void alloc_problem(Problem *P, const Shape *sh, cudaStream_t s) {
    memset(P, 0, sizeof(*P));
    P->N = sh->N;
    P->H = sh->H;
    P->V = sh->V;
    P->stream = s;
    P->verl_split = VERL_SPLIT;
    P->fwd_tile = FWD_TOKEN_TILE;
    void *p;
    cudaCheck(cudaMalloc(&p, (size_t)P->N * P->H * sizeof(bf16))); P->h = (const bf16 *)p;
    cudaCheck(cudaMalloc(&p, (size_t)P->V * P->H * sizeof(bf16))); P->W = (const bf16 *)p;
    cudaCheck(cudaMalloc(&p, (size_t)P->N * sizeof(int))); P->targets = (const int *)p;
    cudaCheck(cudaMalloc(&P->loss, sizeof(float)));
    cudaCheck(cudaMalloc(&P->d_h, (size_t)P->N * P->H * sizeof(bf16)));
    cudaCheck(cudaMalloc(&P->d_W, (size_t)P->V * P->H * sizeof(float)));
}

static void free_problem(Problem *P) {
    cudaCheck(cudaFree((void *)P->h));
    cudaCheck(cudaFree((void *)P->W));
    cudaCheck(cudaFree((void *)P->targets));
    cudaCheck(cudaFree(P->loss));
    cudaCheck(cudaFree(P->d_h));
    cudaCheck(cudaFree(P->d_W));
}

static double g_rate_8192 = 0.0;
static char g_device_line[1024] = "";

// per-shape floors, for the summary
typedef struct {
    double floor_ms;
} ShapeInfo;

static void bench_shape(const Args *a, int si, const Shape *sh, cudaStream_t s, Result *res,
                        ShapeInfo *info) {
    Problem P;
    alloc_problem(&P, sh, s);
    const int64_t N = P.N, H = P.H, V = P.V;
    make_inputs(&P, 1000 + (uint64_t)si);
    const double flop = 6.0 * (double)N * (double)V * (double)H;

    // the reference, once
    float *dh_ref, *dW_ref;
    cudaCheck(cudaMalloc(&dh_ref, (size_t)N * H * sizeof(float)));
    cudaCheck(cudaMalloc(&dW_ref, (size_t)V * H * sizeof(float)));
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    int64_t ref_chunk = 0;
    cudaCheck(cudaEventRecord(e0, s));
    const double loss_ref = reference_gpu(&P, dh_ref, dW_ref, &ref_chunk);
    cudaCheck(cudaEventRecord(e1, s));
    cudaCheck(cudaEventSynchronize(e1));
    float ref_ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ref_ms, e0, e1));

    // the logits GEMM's rate at this shape (a token slice if the output would be large)
    const int64_t ldp = round_up(V, LD_MULTIPLE);
    int64_t rate_rows = N;
    if ((size_t)N * (size_t)ldp * sizeof(bf16) > RATE_BUF_MAX)
        rate_rows = (int64_t)(RATE_BUF_MAX / ((size_t)ldp * sizeof(bf16))) / 128 * 128;
    void *rate_buf, *ws;
    cudaCheck(cudaMalloc(&rate_buf, (size_t)rate_rows * ldp * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ws, LT_WORKSPACE));
    // aligned: the vocabulary rounded down to 64 rows and a padded stride (what cuBLASLt runs
    // fast); as torch: all V rows with stride V (an odd V puts cuBLASLt on a slow path)
    const int64_t v_aligned = V >= LD_MULTIPLE ? V / LD_MULTIPLE * LD_MULTIPLE : V;
    const double rate_pad = gemm_rate("rate (aligned)", v_aligned, rate_rows, H, P.W, H, P.h, H, rate_buf, ldp, ws, s);
    const double rate_odd = gemm_rate("rate (ld = V)", V, rate_rows, H, P.W, H, P.h, H, rate_buf, V, ws, s);
    cudaCheck(cudaFree(rate_buf));
    cudaCheck(cudaFree(ws));
    // the floor is the issue's: 6NVH at the 8192^3 rate measured in this run
    const double floor_ms = flop / (g_rate_8192 * 1e9), floor_shape_ms = flop / (rate_pad * 1e9);
    info->floor_ms = floor_ms;

    report("\n## N=%lld H=%lld V=%lld\n\n", (long long)N, (long long)H, (long long)V);
    report("- bf16 GEMM rate: 8192^3 %.0f TFLOP/s; this shape's logits GEMM (%lld tokens x %lld "
           "vocab rows, k=%lld, stride padded to %d) %.0f TFLOP/s; all %lld rows with stride V "
           "(as torch) %.0f TFLOP/s\n",
           g_rate_8192, (long long)rate_rows, (long long)v_aligned, (long long)H, LD_MULTIPLE,
           rate_pad, (long long)V, rate_odd);
    report("- 3-GEMM floor 6NVH / rate: %.2f ms at the 8192^3 rate (x floor below); %.2f ms at "
           "this shape's aligned rate\n", floor_ms, floor_shape_ms);
    report("- reference: fp32 GEMMs (no TF32) in chunks of %lld tokens: loss %.6f (%.2f s)\n\n",
           (long long)ref_chunk, loss_ref, ref_ms / 1000.0f);
    report("| version | median ms | x floor | TFLOP/s | extra MiB | loss abs err | d_h rel L2 | d_W rel L2 | runs | spread | schedule |\n");
    report("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");

    for (int vi = 0; vi < N_VERSIONS; vi++) {
        const Version *v = &g_versions[vi];
        Result *r = &res[vi];
        memset(r, 0, sizeof(*r));
        if (!(a->mask & (1u << (v->group - 1)))) {
            snprintf(r->why, sizeof(r->why), "not selected");
            continue;
        }
        fprintf(stderr, "[%lldx%lldx%lld] %s ...\n", (long long)N, (long long)H, (long long)V, v->name);
        Work w;
        memset(&w, 0, sizeof(w));
        if (v->setup(&P, &w, r->why, sizeof(r->why))) {
            work_release(&w);
            report("| %s | %s | | | | | | | | | |\n", v->name, r->why);
            continue;
        }
        snprintf(r->note, sizeof(r->note), "%s", w.note);
        r->extra_mib = (double)w.arena.total / 1048576.0;

        float times[64];
        int n = 0;
        // the first call builds cuBLASLt descriptors and, in the library, autotunes its GEMMs
        // (seconds at the large shapes): never part of a measurement
        float t_first = run_timed(v, &P, &w, e0, e1);
        if (t_first > SLOW_MS) t_first = run_timed(v, &P, &w, e0, e1);
        if (t_first > SLOW_MS) {
            times[n++] = t_first;  // slow: the first run is the measurement (warm-up cost is ~ms)
            r->cold = 1;
        } else {
            float last = t_first;
            for (int k = 1; k < a->warmups; k++) last = run_timed(v, &P, &w, e0, e1);
            int reps = a->repeats;
            if (last * (float)reps > BUDGET_MS) reps = (int)(BUDGET_MS / last);
            if (reps < 1) reps = 1;
            if (reps > 64) reps = 64;
            for (int k = 0; k < reps; k++) times[n++] = run_timed(v, &P, &w, e0, e1);
        }
        float lo = times[0], hi = times[0];
        for (int k = 1; k < n; k++) {
            lo = fminf(lo, times[k]);
            hi = fmaxf(hi, times[k]);
        }
        r->ms = median_of(times, n);
        r->spread = (hi - lo) / r->ms;
        r->runs = n;
        r->x_floor = r->ms / floor_ms;
        r->tflops = flop / (r->ms * 1e9);

        // the outputs of the last timed run against the reference
        float loss = 0.0f;
        cudaCheck(cudaMemcpy(&loss, P.loss, sizeof(float), cudaMemcpyDeviceToHost));
        r->loss_err = isfinite(loss) ? fabs((double)loss - loss_ref) : INFINITY;
        r->dh_rel = rel_l2_gpu<bf16>(P.d_h, dh_ref, N * H, s);
        r->dw_rel = rel_l2_gpu<float>(P.d_W, dW_ref, V * H, s);
        r->ran = 1;
        work_release(&w);
        report("| %s | %.2f | %.2f | %.0f | %.0f | %.1e | %.1e | %.1e | %d%s | %.0f%% | %s |\n", v->name,
               r->ms, r->x_floor, r->tflops, r->extra_mib, r->loss_err, r->dh_rel, r->dw_rel, r->runs,
               r->cold ? " (cold)" : "", 100.0 * r->spread, r->note);
    }
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    cudaCheck(cudaFree(dh_ref));
    cudaCheck(cudaFree(dW_ref));
    free_problem(&P);
}

static int run_bench(const Args *a, cudaStream_t s) {
    Shape shapes[16];
    const int n_shapes = parse_shapes(a->shapes, shapes, 16);
    // the machine's bf16 GEMM ceiling, once: 8192^3 on random data (never zeros)
    {
        const int64_t M = 8192;
        Problem P;
        Shape sq = {M, M, M};
        alloc_problem(&P, &sq, s);
        make_inputs(&P, 7);
        void *ws;
        cudaCheck(cudaMalloc(&ws, LT_WORKSPACE));
        g_rate_8192 = gemm_rate("rate 8192^3", M, M, M, P.W, M, P.h, M, P.d_h, M, ws, s);
        cudaCheck(cudaFree(ws));
        free_problem(&P);
    }
    report("# flce_bench: the FLCE strategies side by side (fwd+bwd, bf16 in, bf16 d_h, fp32 d_W)\n\n");
    report("%s\n\n", g_device_line);
    report("bf16 GEMM 8192^3: %.0f TFLOP/s. Warm-ups %d, repeats up to %d (fewer when a version's runs "
           "would pass %.0f s; a first run over %.0f s is the only one: \"cold\"). x floor: against "
           "the 3-GEMM floor 6NVH at the 8192^3 rate. Extra MiB: the version's own device "
           "buffers (counted cudaMallocs), beyond inputs and gradients.\n",
           g_rate_8192, a->warmups, a->repeats, BUDGET_MS / 1000.0f, SLOW_MS / 1000.0f);

    static Result res[16][N_VERSIONS];
    ShapeInfo info[16];
    for (int si = 0; si < n_shapes; si++) bench_shape(a, si, &shapes[si], s, res[si], &info[si]);

    report("\n## Summary: median ms (x the 3-GEMM floor)\n\n| version |");
    for (int si = 0; si < n_shapes; si++)
        report(" %lldx%lldx%lld |", (long long)shapes[si].N, (long long)shapes[si].H, (long long)shapes[si].V);
    report("\n|---|");
    for (int si = 0; si < n_shapes; si++) report("---:|");
    report("\n| 3-GEMM floor |");
    for (int si = 0; si < n_shapes; si++) report(" %.2f |", info[si].floor_ms);
    report("\n");
    for (int vi = 0; vi < N_VERSIONS; vi++) {
        if (!(a->mask & (1u << (g_versions[vi].group - 1)))) continue;
        report("| %s |", g_versions[vi].name);
        for (int si = 0; si < n_shapes; si++) {
            const Result *r = &res[si][vi];
            if (r->ran) report(" %.1f (%.2fx) |", r->ms, r->x_floor);
            else report(" %s |", r->why);
        }
        report("\n");
    }
    if (a->out_path != NULL) {
        FILE *f = fopen(a->out_path, "w");
        if (f == NULL || fwrite(g_report, 1, g_report_len, f) != g_report_len || fclose(f) != 0) {
            fprintf(stderr, "could not write %s\n", a->out_path);
            return 1;
        }
        fprintf(stderr, "report written to %s\n", a->out_path);
    }
    return 0;
}

// ----------------------------------------------------------------------------------------
// correctness mode: small odd shapes against a CPU fp64 reference

// loss (mean), d_h, d_W in double from the bf16-rounded inputs (as floats)
static double cpu_reference(const float *h, const float *W, const int *t, int64_t N, int64_t H,
                            int64_t V, double *dh, double *dW) {
    memset(dh, 0, (size_t)N * H * sizeof(double));
    memset(dW, 0, (size_t)V * H * sizeof(double));
    int64_t n_valid = 0;
    for (int64_t i = 0; i < N; i++) n_valid += t[i] >= 0 && t[i] < V;
    if (n_valid == 0) return 0.0;
    double *z = (double *)malloc((size_t)V * sizeof(double));
    double loss = 0.0;
    for (int64_t i = 0; i < N; i++) {
        if (!(t[i] >= 0 && t[i] < V)) continue;
        const float *hi = h + i * H;
        double m = -INFINITY;
        for (int64_t j = 0; j < V; j++) {
            const float *wj = W + j * H;
            double acc = 0.0;
            for (int64_t k = 0; k < H; k++) acc += (double)hi[k] * (double)wj[k];
            z[j] = acc;
            if (acc > m) m = acc;
        }
        double se = 0.0;
        for (int64_t j = 0; j < V; j++) se += exp(z[j] - m);
        const double lse = m + log(se);
        loss += lse - z[t[i]];
        double *dhi = dh + i * H;
        for (int64_t j = 0; j < V; j++) {
            const double g = (exp(z[j] - lse) - (j == t[i] ? 1.0 : 0.0)) / (double)n_valid;
            const float *wj = W + j * H;
            double *dwj = dW + j * H;
            for (int64_t k = 0; k < H; k++) {
                dhi[k] += g * (double)wj[k];
                dwj[k] += g * (double)hi[k];
            }
        }
    }
    free(z);
    return loss / (double)n_valid;
}

static int run_check(const Args *a, cudaStream_t s) {
    Shape shapes[16];
    const int n_shapes = parse_shapes(a->shapes_given ? a->shapes : CHECK_SHAPES, shapes, 16);
    int failures = 0;
    printf("# flce_bench -c: every version against a CPU fp64 reference "
           "(PASS: d_h, d_W rel L2 <= %.0e, loss abs err <= %.0e; two runs each, outputs poisoned)\n",
           CHECK_TOL_GRAD, CHECK_TOL_LOSS);
    for (int si = 0; si < n_shapes; si++) {
        const int64_t N = shapes[si].N, H = shapes[si].H, V = shapes[si].V;
        // inputs on the host (test_util.h's LCG), rounded to bf16: the reference sees exactly
        // the values the device does
        uint64_t state = 0x5eed0000ULL + (uint64_t)si;
        const float amp = sqrtf(3.0f) * powf((float)H, -0.25f);
        float *h = (float *)malloc((size_t)N * H * sizeof(float));
        float *W = (float *)malloc((size_t)V * H * sizeof(float));
        float *u = (float *)malloc((size_t)N * 2 * sizeof(float));
        int *t = (int *)malloc((size_t)N * sizeof(int));
        fill_uniform(h, (size_t)(N * H), amp, &state);
        fill_uniform(W, (size_t)(V * H), amp, &state);
        fill_uniform(u, (size_t)(N * 2), 1.0f, &state);
        uint16_t *hb = (uint16_t *)malloc((size_t)N * H * 2);
        uint16_t *Wb = (uint16_t *)malloc((size_t)V * H * 2);
        for (int64_t k = 0; k < N * H; k++) { hb[k] = f32_to_bf16_bits(h[k]); h[k] = bf16_bits_to_f32(hb[k]); }
        for (int64_t k = 0; k < V * H; k++) { Wb[k] = f32_to_bf16_bits(W[k]); W[k] = bf16_bits_to_f32(Wb[k]); }
        for (int64_t i = 0; i < N; i++) {
            int64_t c = (int64_t)((u[2 * i + 1] * 0.5f + 0.5f) * (float)V);
            if (c >= V) c = V - 1;
            t[i] = (u[2 * i] * 0.5f + 0.5f) < IGNORE_FRAC ? -100 : (int)c;
        }
        double *dh_ref = (double *)malloc((size_t)N * H * sizeof(double));
        double *dW_ref = (double *)malloc((size_t)V * H * sizeof(double));
        const double loss_ref = cpu_reference(h, W, t, N, H, V, dh_ref, dW_ref);

        Problem P;
        alloc_problem(&P, &shapes[si], s);
        P.verl_split = CHECK_VERL_SPLIT;
        P.fwd_tile = CHECK_FWD_TILE;
        cudaCheck(cudaMemcpy((void *)P.h, hb, (size_t)N * H * 2, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy((void *)P.W, Wb, (size_t)V * H * 2, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy((void *)P.targets, t, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
        printf("\n%lldx%lldx%lld (verl split %d, fuse_MN forward tile %d): loss %.6f\n", (long long)N,
               (long long)H, (long long)V, CHECK_VERL_SPLIT, CHECK_FWD_TILE, loss_ref);

        uint16_t *dh_b = (uint16_t *)malloc((size_t)N * H * 2);
        float *dh_f = (float *)malloc((size_t)N * H * sizeof(float));
        float *dW_f = (float *)malloc((size_t)V * H * sizeof(float));

        // the GPU reference that benchmark mode measures every version against: fp32, so
        // it must sit far below the bf16 versions' errors
        {
            float *dh_g, *dW_g;
            int64_t chunk = 0;
            cudaCheck(cudaMalloc(&dh_g, (size_t)N * H * sizeof(float)));
            cudaCheck(cudaMalloc(&dW_g, (size_t)V * H * sizeof(float)));
            const double loss_g = reference_gpu(&P, dh_g, dW_g, &chunk);
            cudaCheck(cudaMemcpy(dh_f, dh_g, (size_t)N * H * sizeof(float), cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(dW_f, dW_g, (size_t)V * H * sizeof(float), cudaMemcpyDeviceToHost));
            cudaCheck(cudaFree(dh_g));
            cudaCheck(cudaFree(dW_g));
            const double le = isfinite(loss_g) ? fabs(loss_g - loss_ref) : INFINITY;
            const double dh_rel = rel_l2_f64(dh_f, dh_ref, (size_t)(N * H));
            const double dw_rel = rel_l2_f64(dW_f, dW_ref, (size_t)(V * H));
            const int ok = le <= CHECK_TOL_REF_LOSS && dh_rel <= CHECK_TOL_REF_GRAD && dw_rel <= CHECK_TOL_REF_GRAD;
            failures += !ok;
            printf("  %-16s %s  loss abs err %.1e  d_h rel L2 %.1e  d_W rel L2 %.1e  (fp32 tolerances %.0e, %.0e)\n",
                   "gpu reference", ok ? "PASS" : "FAIL", le, dh_rel, dw_rel, CHECK_TOL_REF_GRAD,
                   CHECK_TOL_REF_LOSS);
        }
        for (int vi = 0; vi < N_VERSIONS; vi++) {
            const Version *v = &g_versions[vi];
            if (!(a->mask & (1u << (v->group - 1)))) continue;
            Work w;
            memset(&w, 0, sizeof(w));
            char why[160];
            if (v->setup(&P, &w, why, sizeof(why))) {
                work_release(&w);
                printf("  %-16s SKIP  %s\n", v->name, why);
                continue;
            }
            double loss_err = 0.0, dh_rel = 0.0, dw_rel = 0.0;
            for (int run = 0; run < 2; run++) {  // the second run catches state left by the first
                poison_outputs(&P);
                v->run(&P, &w);
                cudaCheck(cudaStreamSynchronize(s));
                cudaCheck(cudaGetLastError());
                float loss = 0.0f;
                cudaCheck(cudaMemcpy(&loss, P.loss, sizeof(float), cudaMemcpyDeviceToHost));
                cudaCheck(cudaMemcpy(dh_b, P.d_h, (size_t)N * H * 2, cudaMemcpyDeviceToHost));
                cudaCheck(cudaMemcpy(dW_f, P.d_W, (size_t)V * H * sizeof(float), cudaMemcpyDeviceToHost));
                for (int64_t k = 0; k < N * H; k++) dh_f[k] = bf16_bits_to_f32(dh_b[k]);
                const double le = isfinite(loss) ? fabs((double)loss - loss_ref) : INFINITY;
                loss_err = fmax(loss_err, le);  // fmax would drop a NaN; le is never NaN
                dh_rel = fmax(dh_rel, rel_l2_f64(dh_f, dh_ref, (size_t)(N * H)));
                dw_rel = fmax(dw_rel, rel_l2_f64(dW_f, dW_ref, (size_t)(V * H)));
            }
            work_release(&w);
            const int ok = loss_err <= CHECK_TOL_LOSS && dh_rel <= CHECK_TOL_GRAD && dw_rel <= CHECK_TOL_GRAD;
            failures += !ok;
            printf("  %-16s %s  loss abs err %.1e  d_h rel L2 %.1e  d_W rel L2 %.1e\n", v->name,
                   ok ? "PASS" : "FAIL", loss_err, dh_rel, dw_rel);
        }
        free_problem(&P);
        free(h); free(W); free(u); free(t); free(hb); free(Wb);
        free(dh_ref); free(dW_ref); free(dh_b); free(dh_f); free(dW_f);
    }
    printf("\n%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}

// ----------------------------------------------------------------------------------------
// main

static void usage(const char *prog) {
    fprintf(stderr,
            "usage: %s [-v version|all] [-s shapes] [-r repeats] [-w warmups] [-o path] [-c]\n"
            "  -v  comma list of 1 naive, 2 liger, 3 verl, 4 fuse_mn, 5 flce (its five rows); default all\n"
            "  -s  comma list of NxHxV; default %s (with -c: %s)\n"
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
            "  --dw-scaled 0|1    0: the Hopper d_W GEMM without the scaled transform\n",
            prog, DEFAULT_SHAPES, CHECK_SHAPES);
}

// --NAME V or --NAME=V (V 0 or 1; --timing alone is 1) into g_switches; 0 for anything else
static int parse_switch(int argc, char **argv, int *i) {
    static const struct {
        const char *name;
        size_t offset;
    } names[] = {{"autotune", offsetof(FlceSwitches, autotune)},
                 {"timing", offsetof(FlceSwitches, timing)},
                 {"pingpong", offsetof(FlceSwitches, pingpong)},
                 {"lt-backward", offsetof(FlceSwitches, lt_backward)},
                 {"dw-scaled", offsetof(FlceSwitches, dw_scaled)}};
    const char *arg = argv[*i] + 2, *eq = strchr(arg, '=');
    const size_t len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        if (strlen(names[k].name) != len || strncmp(arg, names[k].name, len) != 0) continue;
        const char *v = eq != NULL ? eq + 1 : NULL;
        if (v == NULL && strcmp(names[k].name, "timing") == 0) v = "1";
        if (v == NULL && *i + 1 < argc) v = argv[++*i];
        if (v == NULL || (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)) return 0;
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
        if (strcmp(tok, "all") == 0) { mask |= 0x1f; continue; }
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
    }
    return mask;
}

int main(int argc, char **argv) {
    Args a;
    memset(&a, 0, sizeof(a));
    a.mask = 0x1f;
    snprintf(a.shapes, sizeof(a.shapes), "%s", DEFAULT_SHAPES);
    a.repeats = 7;
    a.warmups = 2;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const int has_val = i + 1 < argc;
        if (strcmp(arg, "-c") == 0) {
            a.check = 1;
        } else if (strcmp(arg, "-v") == 0 && has_val) {
            a.mask = parse_versions(argv[++i]);
        } else if (strcmp(arg, "-s") == 0 && has_val) {
            snprintf(a.shapes, sizeof(a.shapes), "%s", argv[++i]);
            a.shapes_given = 1;
        } else if (strcmp(arg, "-r") == 0 && has_val) {
            a.repeats = atoi(argv[++i]);
        } else if (strcmp(arg, "-w") == 0 && has_val) {
            a.warmups = atoi(argv[++i]);
        } else if (strcmp(arg, "-o") == 0 && has_val) {
            a.out_path = argv[++i];
        } else if (strncmp(arg, "--", 2) == 0 && parse_switch(argc, argv, &i)) {
            continue;
        } else {
            usage(argv[0]);
            return strcmp(arg, "-h") == 0 ? 0 : 2;
        }
    }
    if (a.repeats < 1) a.repeats = 1;
    if (a.repeats > 64) a.repeats = 64;
    if (a.warmups < 1) a.warmups = 1;

    int dev = 0;
    cudaCheck(cudaSetDevice(dev));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    g_sm_count = prop.multiProcessorCount;
    int rt = 0, drv = 0;
    cudaCheck(cudaRuntimeGetVersion(&rt));
    cudaCheck(cudaDriverGetVersion(&drv));
    snprintf(g_device_line, sizeof(g_device_line),
             "Device: %s, %d SMs, %.1f GiB, sm_%d%d; CUDA runtime %d, driver %d, cuBLASLt %zu.",
             prop.name, prop.multiProcessorCount, gib(prop.totalGlobalMem), prop.major, prop.minor, rt,
             drv, cublasLtGetVersion());
    fprintf(stderr, "%s\n", g_device_line);

    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    memset(&g_gemm, 0, sizeof(g_gemm));
    cublasCheck(cublasLtCreate(&g_gemm.handle));
    if (g_switches.lt_backward >= 0) flce_dev_set_lt_backward(g_switches.lt_backward);  // (process-wide)
    flce_new_context();
    cudaCheck(cudaMalloc(&g_diff_sums, 2 * sizeof(double)));
    cudaCheck(cudaMalloc(&g_diff_bad, sizeof(unsigned long long)));

    const int rc = a.check ? run_check(&a, s) : run_bench(&a, s);

    flce_destroy(g_flce);
    gemm_cache_release(&g_gemm);
    cublasCheck(cublasLtDestroy(g_gemm.handle));
    if (g_cublas != NULL) cublasCheck(cublasDestroy(g_cublas));
    cudaCheck(cudaFree(g_diff_sums));
    cudaCheck(cudaFree(g_diff_bad));
    cudaCheck(cudaStreamDestroy(s));
    free(g_report);
    return rc;
}
