/*
gemm_sm90.cu - our Hopper GEMM (common/gemm_sm90.cuh) against cuBLASLt, llm.c dev/cuda style:
first every layout and output mode on odd shapes against cuBLASLt's fp32-accumulated result on
the same bf16 inputs (outputs poisoned first, every element checked), then the rate of both at
8192^3 and at the shapes of flce's three GEMMs, and of d_h and d_W with A read through
registers (probe_rs: what flce's fused products do, without their transform). The ping-pong
schedule (PINGPONG in gemm_sm90.cuh: each consumer warpgroup its own 64 x 256 tiles) and the
wide one (WIDE: its own 128 x 192 tiles) are checked the same way and timed on the logits
layout and the trainer's short-K shapes beside the cooperative one.

    build/gemm_sm90             check, then time (default shapes)
    build/gemm_sm90 -c          check only
    build/gemm_sm90 -r 20       timed repeats (median reported)
    build/gemm_sm90 -k          (after the checks) only flce's d_W shape over a range of K (its
                                chunk): what a tile's epilogue and start cost beside its K steps

The three layouts of a linear layer (see gemm_sm90.cuh): "TN" y = x W^T (both K-major),
"NN" dx = dy W (B MN-major), "NT" dW = dy^T x (both MN-major), named as in BLAS for the
row-major operands (N = not transposed in its (rows, K) storage).
*/
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"  // dev/: cudaCheck, cublasCheck, LT_WORKSPACE, EventTimer, median_of
#include "gemm_sm90.cuh"

// ---------------------------------------------------------------------------------------
// inputs: a counter hash, uniform in [-1, 1), never zeros

__global__ void fill_kernel(__nv_bfloat16 *x, size_t n, unsigned seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ (seed * 0x9E3779B9u) ^ (unsigned)(i >> 32);
        h ^= h >> 15; h *= 0x2c1b3c6du; h ^= h >> 12; h *= 0x297a2d39u; h ^= h >> 15;
        x[i] = __float2bfloat16(scale * ((float)(h >> 8) / 8388608.0f - 1.0f));
    }
}

__global__ void fill_f32_kernel(float *x, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2246822519u ^ (seed * 0x85EBCA77u);
        h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
        x[i] = (float)(h >> 8) / 8388608.0f - 1.0f;
    }
}

__global__ void poison_kernel(unsigned *x, size_t words) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x)
        x[i] = 0x7fc07fc0u;  // NaN as fp32 and as both bf16 halves
}

// ---------------------------------------------------------------------------------------
// cuBLASLt: the same row-major problem in its column-major terms (D^T = op(B)^T op(A)^T)

static cublasLtHandle_t lt;
static void *lt_ws;

static void lt_gemm(const sm90_problem &p, int d_fp32, float beta, cudaStream_t s) {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // first operand (N x K, column-major): B
    const cublasOperation_t op1 = p.trans_b ? CUBLAS_OP_N : CUBLAS_OP_T;
    const cublasOperation_t op2 = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof(op1)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof(op2)));
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.trans_b ? p.N : p.K, p.trans_b ? p.K : p.N, p.b.ld));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p.trans_a ? p.M : p.K, p.trans_a ? p.K : p.M, p.a.ld));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, d_fp32 ? CUDA_R_32F : CUDA_R_16BF, p.N, p.M, p.d.ld));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws_bytes = LT_WORKSPACE;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                     sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t res;
    int n = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &res, &n));
    if (n == 0) { fprintf(stderr, "cuBLASLt: no algorithm\n"); exit(1); }
    const float alpha = 1.0f;
    cublasCheck(cublasLtMatmul(lt, desc, &alpha, p.b.ptr, la, p.a.ptr, lb, &beta, (void *)p.d.ptr, ld, (void *)p.d.ptr,
                               ld, &res.algo, lt_ws, LT_WORKSPACE, s));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
}

// ---------------------------------------------------------------------------------------
// the register-A probe

// The kernel's A_REGS path with nothing done to A: each consumer reads its A fragments into
// registers with ldmatrix (.trans for an MN-major A), exactly as flce's d_h and d_W products
// read their E tiles, and hands them to wgmma unchanged (RS instead of SS). Timed against the
// plain product, it measures what reading A through registers costs apart from flce's
// transform (flce's fused d_W runs well below the plain product).
template <int TRANS_A, bool ADD>
struct probe_rs : sm90_policy_base {
    struct Args {
        uint32_t nonzero;  // 1: a value the compiler cannot see, so that the branch below stays
    };
    static constexpr bool A_REGS = true;
    __device__ static void load_a(const Args &a, TileState &, const uint8_t *sa, const uint8_t *, const sm90_tile &,
                                  int, const sm90_thread &th, uint32_t (&af)[16]) {
        const int lane = th.lt % 32, mi = lane / 8;
        // two straight-line copies behind a warp-uniform branch, as flce's load_a has them: in
        // one basic block with the products, ptxas moves each K step's loads next to its
        // product and serializes the products (info C7513)
        if (__all_sync(0xffffffffu, a.nonzero != 0u)) {
#pragma unroll
            for (int kk = 0; kk < SM90_BK / 16; kk++) load_step(sa, th, lane, mi, kk, af);
        } else {
#pragma unroll
            for (int kk = 0; kk < SM90_BK / 16; kk++) load_step(sa, th, lane, mi, kk, af);
        }
    }
    __device__ static __forceinline__ void load_step(const uint8_t *sa, const sm90_thread &th, int lane, int mi, int kk,
                                                     uint32_t (&af)[16]) {
        uint32_t r[4];
        if (TRANS_A) {  // (K, M) boxes of 64 x 64: this warpgroup's 64 M columns one box further
            sm90_ldmatrix_x4_trans(r, sm90_smem(sa) + th.wg * 8192 +
                                          sm90_swz(16 * kk + 8 * (mi >> 1) + (lane % 8), 2 * th.w + (mi & 1)));
        } else {        // (M, K) rows of 64 K
            const int arow = 64 * th.wg + 16 * th.w + (lane % 8) + 8 * (mi & 1);
            sm90_ldmatrix_x4(r, sm90_smem(sa) + sm90_swz(arow, 2 * kk + (mi >> 1)));
        }
#pragma unroll
        for (int q = 0; q < 4; q++) af[4 * kk + q] = r[q];
    }
    __device__ static void epilogue(const Args &, float (&d)[128], const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d) {
        sm90_store_tile<float, ADD>(st, th, map_d, d, tile);
    }
};

// p through the probe (fp32 output only), as sm90_gemm takes it.
static cudaError_t probe_gemm(const sm90_problem &p, int d_fp32, int add, cudaStream_t s) {
    if (!d_fp32) return cudaErrorInvalidValue;
    const typename probe_rs<0, false>::Args one = {1u};
    cudaError_t e = sm90_gemm_check(p, 4);
    if (e != cudaSuccess) return e;
    if (p.trans_a) {
        if (!p.trans_b) return cudaErrorInvalidValue;  // not a layout of a linear layer
        return add ? sm90_gemm_launch<probe_rs<1, true>, float, 1, 1>(p, {one.nonzero}, s)
                   : sm90_gemm_launch<probe_rs<1, false>, float, 1, 1>(p, {one.nonzero}, s);
    }
    if (p.trans_b)
        return add ? sm90_gemm_launch<probe_rs<0, true>, float, 0, 1>(p, {one.nonzero}, s)
                   : sm90_gemm_launch<probe_rs<0, false>, float, 0, 1>(p, {one.nonzero}, s);
    return add ? sm90_gemm_launch<probe_rs<0, true>, float, 0, 0>(p, {one.nonzero}, s)
               : sm90_gemm_launch<probe_rs<0, false>, float, 0, 0>(p, {one.nonzero}, s);
}

// which product check_case and time_case run: sm90_gemm (on schedule use_pp: SM90_COOPERATIVE,
// SM90_PINGPONG, SM90_WIDE), or the probe
static int use_probe = 0, use_pp = SM90_COOPERATIVE;

static cudaError_t ours(const sm90_problem &p, int d_fp32, int add, cudaStream_t s) {
    return use_probe ? probe_gemm(p, d_fp32, add, s) : sm90_gemm(p, d_fp32, add, s, use_pp);
}

// ---------------------------------------------------------------------------------------
// checks

static double *host_f64(const void *dev, size_t n, int fp32) {
    double *h = (double *)malloc(n * sizeof(double));
    if (fp32) {
        float *t = (float *)malloc(n * 4);
        cudaCheck(cudaMemcpy(t, dev, n * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) h[i] = t[i];
        free(t);
    } else {
        __nv_bfloat16 *t = (__nv_bfloat16 *)malloc(n * 2);
        cudaCheck(cudaMemcpy(t, dev, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) h[i] = __bfloat162float(t[i]);
        free(t);
    }
    return h;
}

static int failures = 0;

// D = op(A) op(B) (+ D0 when add) through both, split into `splits` K parts for ours (summed
// here); rel L2 against cuBLASLt, NaN anywhere fails.
static void check_case(const char *layout, int M, int N, int K, int d_fp32, int add, int splits) {
    const int ta = layout[0] == 'N' && layout[1] == 'T', tb = !(layout[0] == 'T');
    // TN: a (M,K) b (N,K); NN: a (M,K) b (K,N); NT: a (K,M) b (K,N)
    const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? K : N, b_cols = tb ? N : K;
    const int lda = (a_cols + 7) / 8 * 8 + 8, ldb = (b_cols + 7) / 8 * 8, ldd = (N + 7) / 8 * 8 + 8;
    __nv_bfloat16 *A, *B;
    void *D, *R;
    const int es = d_fp32 ? 4 : 2;
    cudaCheck(cudaMalloc(&A, (size_t)a_rows * lda * 2));
    cudaCheck(cudaMalloc(&B, (size_t)b_rows * ldb * 2));
    cudaCheck(cudaMalloc(&D, (size_t)splits * M * ldd * es));
    cudaCheck(cudaMalloc(&R, (size_t)M * ldd * es));
    fill_kernel<<<256, 256>>>(A, (size_t)a_rows * lda, 1 + M, 1.0f);
    fill_kernel<<<256, 256>>>(B, (size_t)b_rows * ldb, 2 + N, 1.0f);
    if (add) {
        fill_f32_kernel<<<256, 256>>>((float *)D, (size_t)M * ldd, 3);
        cudaCheck(cudaMemcpy(R, D, (size_t)M * ldd * 4, cudaMemcpyDeviceToDevice));
    } else {
        poison_kernel<<<256, 256>>>((unsigned *)D, (size_t)splits * M * ldd * es / 4);
    }
    cudaCheck(cudaGetLastError());
    sm90_problem p = {};
    p.a = {A, a_rows, a_cols, lda};
    p.b = {B, b_rows, b_cols, ldb};
    p.d = {D, M, N, ldd};
    p.trans_a = ta;
    p.trans_b = tb;
    p.M = M; p.N = N; p.K = K;
    p.splits = splits;
    cudaCheck(ours(p, d_fp32, add, 0));
    cudaCheck(cudaDeviceSynchronize());
    sm90_problem pr = p;
    pr.d.ptr = R;
    lt_gemm(pr, d_fp32, add ? 1.0f : 0.0f, 0);
    cudaCheck(cudaDeviceSynchronize());
    const int used_splits = sm90_make_shape(p).splits;
    double *d = host_f64(D, (size_t)used_splits * M * ldd, d_fp32), *r = host_f64(R, (size_t)M * ldd, d_fp32);
    double num = 0, den = 0;
    int nan = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double v = 0;
            for (int s = 0; s < used_splits; s++) v += d[((size_t)s * M + i) * ldd + j];
            if (!isfinite(v)) nan++;
            num += (v - r[(size_t)i * ldd + j]) * (v - r[(size_t)i * ldd + j]);
            den += r[(size_t)i * ldd + j] * r[(size_t)i * ldd + j];
        }
    const double rel = sqrt(num / (den > 0 ? den : 1));
    const double tol = d_fp32 ? 1e-5 : 8e-3;
    const int ok = nan == 0 && rel <= tol;
    failures += !ok;
    printf("%s %s M=%d N=%d K=%d out=%s%s splits=%d: rel L2 %.2e, non-finite %d\n", ok ? "PASS" : "FAIL", layout,
           M, N, K, d_fp32 ? "fp32" : "bf16", add ? " (+=)" : "", used_splits, rel, nan);
    free(d); free(r);
    cudaFree(A); cudaFree(B); cudaFree(D); cudaFree(R);
}

// ---------------------------------------------------------------------------------------
// timing

// Median ms of ours and of cuBLASLt on the same problem; the L2 is not flushed (the operands
// of the large shapes are far larger than it). The logits rows put all M rows in one raster
// group, as flce's logits GEMM does (sm90_problem.group_rows: B read from DRAM once).
static void time_case(const char *what, const char *layout, int M, int N, int K, int d_fp32, int add, int reps) {
    const int ta = layout[0] == 'N' && layout[1] == 'T', tb = !(layout[0] == 'T');
    const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? K : N, b_cols = tb ? N : K;
    const int lda = (a_cols + 7) / 8 * 8, ldb = (b_cols + 7) / 8 * 8, ldd = (N + 7) / 8 * 8;
    const int es = d_fp32 ? 4 : 2;
    __nv_bfloat16 *A, *B;
    void *D;
    cudaCheck(cudaMalloc(&A, (size_t)a_rows * lda * 2));
    cudaCheck(cudaMalloc(&B, (size_t)b_rows * ldb * 2));
    cudaCheck(cudaMalloc(&D, (size_t)M * ldd * es));
    fill_kernel<<<1024, 256>>>(A, (size_t)a_rows * lda, 11, 1.0f);
    fill_kernel<<<1024, 256>>>(B, (size_t)b_rows * ldb, 12, 1.0f);
    cudaCheck(cudaMemset(D, 0, (size_t)M * ldd * es));
    sm90_problem p = {};
    p.a = {A, a_rows, a_cols, lda};
    p.b = {B, b_rows, b_cols, ldb};
    p.d = {D, M, N, ldd};
    p.trans_a = ta; p.trans_b = tb;
    p.M = M; p.N = N; p.K = K; p.splits = 1;
    if (strncmp(what, "logits", 6) == 0) p.group_rows = M;
    EventTimer timer;
    timer_init(&timer);
    float t_ours[64], t_lt[64];
    if (reps > 64) reps = 64;
    for (int r = -2; r < reps; r++) {  // two warm-ups each, interleaved
        timer_start(&timer, 0);
        cudaCheck(ours(p, d_fp32, add, 0));
        const float ms_ours = timer_stop(&timer, 0);
        if (r >= 0) t_ours[r] = ms_ours;
        timer_start(&timer, 0);
        lt_gemm(p, d_fp32, add ? 1.0f : 0.0f, 0);
        const float ms_lt = timer_stop(&timer, 0);
        if (r >= 0) t_lt[r] = ms_lt;
    }
    const double flop = 2.0 * M * N * (double)K;
    const float mo = median_of(t_ours, reps), ml = median_of(t_lt, reps);
    printf("| %-34s | %s | %6d x %6d x %6d | %s%s | %8.3f | %6.1f | %8.3f | %6.1f | %5.2f |\n", what, layout, M, N, K,
           d_fp32 ? "fp32" : "bf16", add ? "+=" : "  ", mo, flop / mo / 1e9, ml, flop / ml / 1e9, ml / mo);
    timer_free(&timer);
    cudaFree(A); cudaFree(B); cudaFree(D);
}

// -k: flce's d_W (V x H += over a chunk of K tokens) at the chunks its planner takes: the time
// a tile costs beyond its K steps is the intercept of time against K; stored (fp32, no add) and
// through registers (the probe) beside the reduce-add
static void time_dw_over_k(int reps) {
    const int dw[2][2] = {{1024, 176256}, {2048, 128256}}, ks[5] = {768, 1536, 2816, 4096, 8192};
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 5; k++) {
            char what[64];
            snprintf(what, sizeof(what), "d_W H=%d V=%d", dw[s][0], dw[s][1]);
            time_case(what, "NT", dw[s][1], dw[s][0], ks[k], 1, 1, reps);
            snprintf(what, sizeof(what), "d_W H=%d V=%d, stored", dw[s][0], dw[s][1]);
            time_case(what, "NT", dw[s][1], dw[s][0], ks[k], 1, 0, reps);
            use_probe = 1;
            snprintf(what, sizeof(what), "d_W H=%d V=%d, A in registers", dw[s][0], dw[s][1]);
            time_case(what, "NT", dw[s][1], dw[s][0], ks[k], 1, 1, reps);
            use_probe = 0;
        }
}

// The default timings: 8192^3, the schedules side by side, flce's GEMMs at four shapes.
static void time_default(int reps) {
    time_case("square", "TN", 8192, 8192, 8192, 0, 0, reps);
    time_case("square", "NN", 8192, 8192, 8192, 0, 0, reps);
    time_case("square", "NT", 8192, 8192, 8192, 1, 1, reps);
    // the schedules side by side where the epilogue is long against the main loop (K ~ 1K): flce's
    // logits, and the trainer's (B = 64, d12) forward and input-gradient GEMMs of K = 768
    const char *sched_name[3] = {"", ", ping-pong", ", wide"};
    const struct {
        const char *what, *layout;
        int M, N, K;
    } sched_cases[] = {{"square", "TN", 8192, 8192, 8192},
                       {"logits H=768 V=50304", "TN", 4096, 50304, 768},
                       {"logits H=1024 V=176256", "TN", 4096, 176256, 1024},
                       {"logits H=4096 V=151936", "TN", 4096, 151936, 4096},
                       {"trainer fc fwd", "TN", 65536, 3072, 768},
                       {"trainer qkv fwd", "TN", 65536, 2304, 768},
                       {"trainer fcproj fwd", "TN", 65536, 768, 3072},
                       {"trainer fcproj dinp", "NN", 65536, 3072, 768},
                       {"trainer fc dinp", "NN", 65536, 768, 3072}};
    for (use_pp = SM90_COOPERATIVE; use_pp <= SM90_WIDE; use_pp++)
        for (size_t i = use_pp == SM90_COOPERATIVE; i < sizeof(sched_cases) / sizeof(sched_cases[0]); i++) {
            char what[80];
            snprintf(what, sizeof(what), "%s%s", sched_cases[i].what, sched_name[use_pp]);
            time_case(what, sched_cases[i].layout, sched_cases[i].M, sched_cases[i].N, sched_cases[i].K, 0, 0, reps);
        }
    use_pp = SM90_COOPERATIVE;
    // flce's GEMMs at a chunk of 4096 tokens: logits (C x V, k = H), d_h (C x H, k = V),
    // d_W (V x H += over C tokens)
    const int shapes[4][2] = {{768, 50304}, {4096, 128256}, {4096, 151936}, {1024, 176256}};
    for (int s = 0; s < 4; s++) {
        const int H = shapes[s][0], V = shapes[s][1], C = 4096;
        char what[64];
        snprintf(what, sizeof(what), "logits H=%d V=%d", H, V);
        time_case(what, "TN", C, V, H, 0, 0, reps);
        snprintf(what, sizeof(what), "d_h H=%d V=%d", H, V);
        time_case(what, "NN", C, H, V, 1, 0, reps);
        snprintf(what, sizeof(what), "d_W H=%d V=%d", H, V);
        time_case(what, "NT", V, H, C, 1, 1, reps);
        use_probe = 1;
        snprintf(what, sizeof(what), "d_h H=%d V=%d, A in registers", H, V);
        time_case(what, "NN", C, H, V, 1, 0, reps);
        snprintf(what, sizeof(what), "d_W H=%d V=%d, A in registers", H, V);
        time_case(what, "NT", V, H, C, 1, 1, reps);
        use_probe = 0;
    }
}

int main(int argc, char **argv) {
    int check_only = 0, reps = 15, k_sweep = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-c")) check_only = 1;
        else if (!strcmp(argv[i], "-k")) k_sweep = 1;
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else { fprintf(stderr, "usage: %s [-c] [-k] [-r repeats]\n", argv[0]); return 2; }
    }
    if (!sm90_available()) {
        fprintf(stderr, "gemm_sm90: needs an sm_90a build (make, GPU_COMPUTE_CAPABILITY=90) on a compute 9.0 GPU\n");
        return 1;
    }
    cublasCheck(cublasLtCreate(&lt));
    cudaCheck(cudaMalloc(&lt_ws, LT_WORKSPACE));

    // odd shapes: partial tiles on every edge, K not a multiple of 64; on the cooperative
    // schedule, the register-A probe (fp32 outputs only), the ping-pong and the wide schedules
    const char *layouts[3] = {"TN", "NN", "NT"};
    const int cases[6][6] = {// M, N, K, fp32 out, add, splits
                             {300, 520, 200, 0, 0, 1},     {300, 520, 200, 1, 0, 1},  {1000, 777, 1030, 1, 1, 1},
                             {129, 1024, 4100, 1, 0, 3},   {2048, 2048, 512, 0, 0, 1}, {385, 200, 70, 0, 0, 1}};
    const int variants[4][2] = {{SM90_COOPERATIVE, 0}, {SM90_COOPERATIVE, 1}, {SM90_PINGPONG, 0}, {SM90_WIDE, 0}};
    for (int v = 0; v < 4; v++) {
        use_pp = variants[v][0];
        use_probe = variants[v][1];
        for (int l = 0; l < 3; l++)
            for (int c = 0; c < 6; c++)
                if (cases[c][3] || !use_probe)
                    check_case(layouts[l], cases[c][0], cases[c][1], cases[c][2], cases[c][3], cases[c][4], cases[c][5]);
    }
    use_pp = SM90_COOPERATIVE;
    use_probe = 0;
    printf("checks: %d failure(s)\n", failures);
    if (check_only || failures) return failures ? 1 : 0;

    printf("\n| problem | layout | M x N x K | out | ours ms | TFLOP/s | cuBLASLt ms | TFLOP/s | ours / Lt speed |\n");
    printf("|---|---|---|---|---:|---:|---:|---:|---:|\n");
    if (k_sweep) time_dw_over_k(reps);
    else time_default(reps);
    cudaFree(lt_ws);
    cublasLtDestroy(lt);
    return 0;
}
