/*
matmul.cuh - the trainer's linear layers: forward with bias and (optionally) GELU fused into
cuBLASLt's epilogue, and the backward (input, weight and bias gradients).

  matmul_forward   out (BT,OC) = inp (BT,C) @ weight (OC,C)^T + bias (OC)          (out =)
                   with pre_gelu: pre_gelu = that, out = gelu(that)     (both written, =)
  matmul_forward_residual  out = residual + inp @ weight^T + bias                  (out =)
  matmul_backward  with pre_gelu: dout = dout * gelu'(pre_gelu)            (dout in place)
                   dbias   (OC)    += column sums of dout       (fp32, +=, deterministic)
                   dweight (OC,C)  += dout^T @ inp              (fp32, +=: beta 1)
                   dinp    (BT,C)   = dout @ weight             (bf16, =: overwritten)
  matmul_backward_dgelu  the same, dinp = (dout @ weight) * gelu'(inp_pre_gelu)  (=)
  matmul_forward_swiglu    gu (BT,2I) = inp (BT,C) @ gateupw (2I,C)^T, h (BT,I) = silu(gate) * up
  matmul_backward_dswiglu  dweight (C,I) += dout^T @ h, dgu (BT,2I) = swiglu_backward(dout @ weight, gu)

Row-major as llm.c (weight (OC, C): out = inp @ W^T + b); the GELU is the tanh form of
test/gpt2_ref.c. The GEMMs go through gemm_lt (common/gemm_lt.cuh: cuBLASLt, fp32
accumulation, cached descriptors and algorithms) on the stream given, except on Hopper calls
of short K (a forward with K = C <= 1024, a dinp with K = OC <= 1024) of the kinds that
ctx->use_sm90 names (by default the GELU, residual and SwiGLU forwards: mm90_available), which run
with their epilogues on our own GEMM (llmc/matmul_sm90.cuh); nothing synchronises the host. The forward's epilogue: CUBLASLT_EPILOGUE_BIAS, _GELU_AUX or _GELU_AUX_BIAS (the aux
matrix is pre_gelu, leading dimension OC). cuBLASLt needs OC % 8 == 0 and pre_gelu and bias
16-byte aligned for them; otherwise (or if cuBLASLt has no algorithm with the epilogue) the
same result comes from a plain GEMM and separate kernels (bias add, gelu_forward of
llmc/gelu.cuh), and ctx->n_fallback counts it. The residual forward passes the residual to
cuBLASLt as C (beta 1) with out as D (gemm_lt_c: C != D, same type and layout), so the
bias epilogue adds to the sum and the residual stream is written once; its fallback adds
the residual with add_inplace after the unfused path. matmul_backward_dgelu puts the GELU
backward of the layer below into the dinp GEMM (CUBLASLT_EPILOGUE_DGELU, aux = that layer's
pre-activation), falling back on gelu_backward_inplace after a plain GEMM.
The Llama / Qwen MLP's SwiGLU (llmc/swiglu.cuh) can go into the epilogues of the gate/up
forward and of the down projection's dinp on the Hopper path (MM90_SWIGLU, MM90_DSWIGLU of
llmc/matmul_sm90.cuh, K = C <= 2048; the trainer's kinds take the forward only, the faster
one); elsewhere the two calls are the GEMM and swiglu_forward, or matmul_backward's dinp into
a dh buffer and swiglu_backward.
The bias gradient is our own deterministic two-pass column sum, not cuBLASLt's BGRADB
epilogue: BGRADB writes (=) its vector in D's type, while our gradients accumulate (+=) in
fp32, and its reduction order is cuBLASLt's to choose. With pre_gelu, the GELU backward is
done by the column sum's pass over dout (it reads dout anyway), not by a separate kernel.

Memory: the caller allocates every tensor argument; MatmulContext holds the cuBLASLt handle,
its 32 MiB workspace and a 512 KiB scratch for the bias reduction (matmul_init allocates them,
matmul_free releases them). One context per stream: calls sharing a context must be ordered
(the workspace and scratch are reused by every call).
Aliasing: out must not alias inp, weight, pre_gelu or residual. dinp may alias inp (it is
written last) but not dout or weight. dout is modified only when pre_gelu != NULL.
Indices: every product that can pass 2^31 (BT*OC, BT*C) is 64-bit.
*/
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include "cuda_common.cuh"
#include "gelu.cuh"
#include "gemm_lt.cuh"
#include "matmul_sm90.cuh"
#include "swiglu.cuh"

#define MATMUL_LT_WORKSPACE ((size_t)32 << 20)  // cuBLASLt's recommendation for Hopper
#define MATMUL_DBIAS_LANES 32                    // threads of a block along the columns
#define MATMUL_DBIAS_ROWS 8                      // threads of a block along the rows
#define MATMUL_DBIAS_COLS (MATMUL_DBIAS_LANES * 8)  // columns of a block: 8 per thread
#define MATMUL_DBIAS_MAX_BLOCKS 512
// the partial sums of one dbias call: nsplit * OC <= (MAX_BLOCKS / col_tiles) * col_tiles * COLS
#define MATMUL_DBIAS_SCRATCH ((size_t)MATMUL_DBIAS_MAX_BLOCKS * MATMUL_DBIAS_COLS)

static_assert(sizeof(floatX) == 2, "matmul.cuh passes floatX to cuBLASLt as CUDA_R_16BF");

typedef struct {
    gemm_cache gemm;         // owns the cuBLASLt handle; descriptor/algorithm cache
    void *workspace;         // cuBLASLt workspace, MATMUL_LT_WORKSPACE bytes
    float *dbias_partials;   // MATMUL_DBIAS_SCRATCH floats
    int fuse_epilogues;      // 1 (matmul_init): bias/GELU in cuBLASLt's epilogue; 0: separate kernels
    int use_cublaslt;        // 1 (matmul_init); 0: the simple GEMM kernel below everywhere (tests)
    int use_sm90;            // our Hopper GEMM for short K: the calls of these kinds (mm90_available's bits)
    long long n_sm90;        // calls it took
    long long n_swiglu;      // of those, the SwiGLU calls fused into its epilogues (MM90_SWIGLU, MM90_DSWIGLU)
    long long n_fallback;    // calls that took the unfused/kernel path though the flags asked otherwise
    int warned;              // the fallback note is printed once
} MatmulContext;

static inline void matmul_init(MatmulContext *ctx) {
    memset(ctx, 0, sizeof(*ctx));
    cublasCheck(cublasLtCreate(&ctx->gemm.handle));
    cudaCheck(cudaMalloc(&ctx->workspace, MATMUL_LT_WORKSPACE));
    cudaCheck(cudaMalloc((void **)&ctx->dbias_partials, MATMUL_DBIAS_SCRATCH * sizeof(float)));
    ctx->fuse_epilogues = 1;
    ctx->use_cublaslt = 1;
    ctx->use_sm90 = mm90_available();
}

static inline void matmul_free(MatmulContext *ctx) {
    gemm_cache_release(&ctx->gemm);
    if (ctx->gemm.handle) cublasCheck(cublasLtDestroy(ctx->gemm.handle));
    if (ctx->workspace) cudaCheck(cudaFree(ctx->workspace));
    if (ctx->dbias_partials) cudaCheck(cudaFree(ctx->dbias_partials));
    memset(ctx, 0, sizeof(*ctx));
}

// ----------------------------------------------------------------------------------------
// kernels

// D (m x n, ldd; column-major as cuBLASLt) = alpha op(A) op(B) + beta D; bf16 A and B, fp32
// accumulation in a fixed order. Only for shapes where cuBLASLt has no algorithm (and for
// the tests): 16x16 tiles through shared memory, nothing clever. Block (16, 16); grid.x
// covers n, grid.y (looping) covers m.
template <typename TD>
static __global__ void matmul_fallback_gemm_kernel(int transa, int transb, int64_t m, int64_t n, int64_t k,
                                            const floatX *A, int64_t lda, const floatX *B,
                                            int64_t ldb, TD *D, int64_t ldd, float alpha, float beta) {
    __shared__ float As[16][17], Bs[16][17];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t j = (int64_t)blockIdx.x * 16 + ty;     // column of D this thread computes
    const int64_t jb = (int64_t)blockIdx.x * 16 + tx;    // column of op(B) this thread loads
    const int64_t m_blocks = (m + 15) / 16;
    for (int64_t bi = blockIdx.y; bi < m_blocks; bi += gridDim.y) {
        const int64_t i = bi * 16 + tx;  // row of D (and of op(A)) of this thread
        const int64_t ib = bi * 16 + ty;  // row of op(A) this thread loads
        float acc = 0.0f;
        for (int64_t p0 = 0; p0 < k; p0 += 16) {
            const int64_t pa = p0 + tx, pb = p0 + ty;
            // As[p][r] = op(A)(bi*16 + r, p0 + p); Bs[p][c] = op(B)(p0 + p, blockIdx.x*16 + c)
            float a = 0.0f, b = 0.0f;
            if (ib < m && pa < k) a = to_float(transa ? A[pa + ib * lda] : A[ib + pa * lda]);
            if (jb < n && pb < k) b = to_float(transb ? B[jb + pb * ldb] : B[pb + jb * ldb]);
            As[tx][ty] = a;
            Bs[ty][tx] = b;
            __syncthreads();
#pragma unroll
            for (int p = 0; p < 16; p++) acc += As[p][tx] * Bs[p][ty];
            __syncthreads();
        }
        if (i < m && j < n) {
            float v = alpha * acc;
            if (beta != 0.0f) v += beta * to_float(D[i + j * ldd]);  // beta 0: D is not read
            if constexpr (sizeof(TD) == 4) D[i + j * ldd] = v;
            else D[i + j * ldd] = __float2bfloat16(v);
        }
    }
}

// x (rows, OC) += bias (OC), broadcast over the rows (the unfused forward path)
static __global__ void matmul_add_bias_kernel(floatX *x, const floatX *bias, size_t n, int OC) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = __float2bfloat16(to_float(x[i]) + to_float(bias[i % (size_t)OC]));
}

// Column sums of dout (BT, OC) over the rows [split * rows_per_split, +rows_per_split) of
// blockIdx.y = split, for the MATMUL_DBIAS_COLS columns of blockIdx.x. Thread (lane, ry) adds
// 8 consecutive columns over the rows ry, ry + 8, ...; the 8 row lanes are then summed in
// order. accumulate: dst[col] += sum (a single split); else dst[split * OC + col] = sum.
// VEC: OC % 8 == 0 and dout (and pre_gelu) 16-byte aligned, so 8 columns are one 16-byte load.
// GELU: first dout = dout * gelu'(pre_gelu) in place (gelu_backward_inplace's operation and
// rounding), and the sums are of those bf16 values: the GELU backward and the bias gradient
// of the layer before it in one pass over dout.
template <bool VEC, bool GELU>
static __global__ void matmul_dbias_partial_kernel(float *dst, int accumulate, floatX *dout,
                                                   const floatX *pre_gelu, int BT, int OC, int rows_per_split) {
    __shared__ float sums[MATMUL_DBIAS_ROWS][MATMUL_DBIAS_COLS];
    const int lane = threadIdx.x, ry = threadIdx.y;
    const int col0 = blockIdx.x * MATMUL_DBIAS_COLS + lane * 8;
    const int split = blockIdx.y;
    const int r_begin = split * rows_per_split;
    const int r_end = min(BT, r_begin + rows_per_split);
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    if (col0 < OC) {
        if (VEC && GELU) {
            // two rows per step: both rows' loads are issued before either store
            int r = r_begin + ry;
            for (; r + MATMUL_DBIAS_ROWS < r_end; r += 2 * MATMUL_DBIAS_ROWS) {
                floatX *row0 = dout + (size_t)r * OC + col0, *row1 = row0 + (size_t)MATMUL_DBIAS_ROWS * OC;
                const floatX *pre0 = pre_gelu + (size_t)r * OC + col0, *pre1 = pre0 + (size_t)MATMUL_DBIAS_ROWS * OC;
                const Packed128<floatX> v0 = load128(row0), p0 = load128cs(pre0);
                const Packed128<floatX> v1 = load128(row1), p1 = load128cs(pre1);
                Packed128<floatX> g0, g1;
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    g0[k] = __float2bfloat16(llmc_ew_op<LLMC_EW_GELU_BWD>(to_float(v0[k]), to_float(p0[k])));
                    g1[k] = __float2bfloat16(llmc_ew_op<LLMC_EW_GELU_BWD>(to_float(v1[k]), to_float(p1[k])));
                }
                store128(row0, g0);
                store128(row1, g1);
#pragma unroll
                for (int k = 0; k < 8; k++) acc[k] += to_float(g0[k]);
#pragma unroll
                for (int k = 0; k < 8; k++) acc[k] += to_float(g1[k]);
            }
            if (r < r_end) {
                floatX *row = dout + (size_t)r * OC + col0;
                const Packed128<floatX> v = load128(row), p = load128cs(pre_gelu + (size_t)r * OC + col0);
                Packed128<floatX> g;
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    g[k] = __float2bfloat16(llmc_ew_op<LLMC_EW_GELU_BWD>(to_float(v[k]), to_float(p[k])));
                    acc[k] += to_float(g[k]);
                }
                store128(row, g);
            }
        } else {
            for (int r = r_begin + ry; r < r_end; r += MATMUL_DBIAS_ROWS) {
                floatX *row = dout + (size_t)r * OC + col0;
                if (VEC) {
                    const Packed128<floatX> v = load128cs(row);
#pragma unroll
                    for (int k = 0; k < 8; k++) acc[k] += to_float(v[k]);
                } else {
                    const floatX *pre = GELU ? pre_gelu + (size_t)r * OC + col0 : NULL;
#pragma unroll
                    for (int k = 0; k < 8; k++)
                        if (col0 + k < OC) {
                            float v = to_float(row[k]);
                            if (GELU) {
                                const floatX gk = __float2bfloat16(llmc_ew_op<LLMC_EW_GELU_BWD>(v, to_float(pre[k])));
                                row[k] = gk;
                                v = to_float(gk);
                            }
                            acc[k] += v;
                        }
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) sums[ry][lane * 8 + k] = acc[k];
    __syncthreads();
    const int t = ry * MATMUL_DBIAS_LANES + lane;  // 0 .. COLS-1: one column each
    const int col = blockIdx.x * MATMUL_DBIAS_COLS + t;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < MATMUL_DBIAS_ROWS; j++) s += sums[j][t];
    if (col < OC) {
        if (accumulate) dst[col] += s;
        else dst[(size_t)split * OC + col] = s;
    }
}

// dbias[col] += sum over the splits, in order, of partials[split * OC + col]
static __global__ void matmul_dbias_sum_kernel(float *dbias, const float *partials, int OC, int nsplit) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    float s = 0.0f;
    for (int j = 0; j < nsplit; j++) s += partials[(size_t)j * OC + col];
    dbias[col] += s;
}

// ----------------------------------------------------------------------------------------
// host side

static inline void matmul_fail(const char *what, const char *fmt, long long a, long long b, long long c) {
    fprintf(stderr, "[matmul ERROR] %s: ", what);
    fprintf(stderr, fmt, a, b, c);
    fprintf(stderr, "\n");
    exit(EXIT_FAILURE);
}

static inline void matmul_note_fallback(MatmulContext *ctx, const char *what, int64_t m, int64_t n,
                                        int64_t k) {
    ctx->n_fallback++;
    if (!ctx->warned) {
        fprintf(stderr, "note: matmul: cuBLASLt cannot do the %s GEMM (m=%lld n=%lld k=%lld) as asked; "
                "using the unfused path for such calls (counted in n_fallback)\n",
                what, (long long)m, (long long)n, (long long)k);
        ctx->warned = 1;
    }
}

static inline void matmul_gemm_status(cublasStatus_t st, const char *what, int64_t m, int64_t n,
                                      int64_t k) {
    if (st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED) return;
    fprintf(stderr, "[cuBLASLt ERROR] status %d (%s): matmul %s GEMM m=%lld n=%lld k=%lld\n",
            (int)st, cublasLtGetStatusString(st), what, (long long)m, (long long)n, (long long)k);
    exit(EXIT_FAILURE);
}

// D = op(A) op(B) + beta D with bf16 A, B (column-major terms, see gemm_lt.cuh): cuBLASLt,
// or the fallback kernel when it has no algorithm (or ctx->use_cublaslt is 0).
static inline void matmul_gemm(MatmulContext *ctx, cudaStream_t s, const char *what, int transa,
                               int transb, int64_t m, int64_t n, int64_t k, const floatX *A,
                               int64_t lda, const floatX *B, int64_t ldb, void *D,
                               cudaDataType_t type_d, int64_t ldd, float beta) {
    if (ctx->use_cublaslt) {
        const gemm_problem p = {transa, transb, m, n, k, {A, CUDA_R_16BF, lda}, {B, CUDA_R_16BF, ldb},
                                {D, type_d, ldd}, 1.0f, beta};
        cublasStatus_t st = gemm_lt(&ctx->gemm, s, &p, NULL, ctx->workspace, MATMUL_LT_WORKSPACE);
        matmul_gemm_status(st, what, m, n, k);
        if (st == CUBLAS_STATUS_SUCCESS) return;
        matmul_note_fallback(ctx, what, m, n, k);
    }
    const int64_t n_blocks = (n + 15) / 16, m_blocks = (m + 15) / 16;
    if (n_blocks > 0x7fffffffLL) matmul_fail(what, "n = %lld too large (m %lld, k %lld)", n, m, k);
    dim3 block(16, 16), grid((unsigned)n_blocks, (unsigned)(m_blocks < 65535 ? m_blocks : 65535));
    if (type_d == CUDA_R_32F)
        matmul_fallback_gemm_kernel<float><<<grid, block, 0, s>>>(transa, transb, m, n, k, A, lda, B, ldb,
                                                                  (float *)D, ldd, 1.0f, beta);
    else
        matmul_fallback_gemm_kernel<floatX><<<grid, block, 0, s>>>(transa, transb, m, n, k, A, lda, B, ldb,
                                                                   (floatX *)D, ldd, 1.0f, beta);
    cudaLaunchCheck("matmul_fallback_gemm_kernel");
}

static inline void matmul_sm90_status(MatmulContext *ctx, cudaError_t e, const char *what, int64_t m, int64_t n,
                                      int64_t k) {
    if (e != cudaSuccess) {
        fprintf(stderr, "[CUDA ERROR] %s (%s): matmul %s GEMM on the Hopper path, M=%lld N=%lld K=%lld\n",
                cudaGetErrorString(e), cudaGetErrorName(e), what, (long long)m, (long long)n, (long long)k);
        exit(EXIT_FAILURE);
    }
    ctx->n_sm90++;
}

static inline void matmul_check_args(const char *what, int BT, int C, int OC, int null_pointer) {
    if (BT <= 0 || C <= 0 || OC <= 0) matmul_fail(what, "invalid sizes BT %lld, C %lld, OC %lld", BT, C, OC);
    if (null_pointer) matmul_fail(what, "a required pointer is NULL (BT %lld, C %lld, OC %lld)", BT, C, OC);
}

// The forwards below: out (BT,OC) = inp @ weight^T (+ bias) (+ residual), or with pre_gelu the
// GELU pair (never together with a residual). Fused: one cuBLASLt call, the residual as its
// C (beta 1, D = out) and the bias or GELU in its epilogue, rounded once. Unfused (no
// algorithm, or ctx flags): the GEMM, then the bias, the GELU and the residual add as
// separate kernels, each rounding to bf16 (the trainer's results before the fusion).
static inline void matmul_forward_impl(MatmulContext *ctx, floatX *out, floatX *pre_gelu, const floatX *residual,
                                       const floatX *inp, const floatX *weight, const floatX *bias, int BT, int C,
                                       int OC, cudaStream_t s) {
    const int gelu = pre_gelu != NULL;
    // (our kernel fuses the epilogue: not where the caller asked for separate kernels)
    const int kind = gelu ? MM90_GELU : residual != NULL ? MM90_RESIDUAL : MM90_BIAS;
    if ((ctx->use_sm90 >> kind & 1) && ctx->fuse_epilogues &&
        mm90_fits(BT, OC, C, out, pre_gelu, inp, weight, bias, residual)) {
        const char *what = gelu ? "forward (gelu)" : residual != NULL ? "forward (residual)" : "forward";
        cudaError_t e = gelu ? mm90_gemm<MM90_GELU>(out, pre_gelu, inp, weight, 0, bias, NULL, BT, OC, C, s)
                        : residual != NULL
                            ? mm90_gemm<MM90_RESIDUAL>(out, NULL, inp, weight, 0, bias, residual, BT, OC, C, s)
                            : mm90_gemm<MM90_BIAS>(out, NULL, inp, weight, 0, bias, NULL, BT, OC, C, s);
        matmul_sm90_status(ctx, e, what, BT, OC, C);
        return;
    }
    if (ctx->use_cublaslt && ctx->fuse_epilogues && (bias != NULL || gelu || residual != NULL)) {
        const gemm_epilogue ep = {gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                       : bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT,
                                  bias, pre_gelu, OC};
        const gemm_problem p = {1, 0, OC, BT, C, {weight, CUDA_R_16BF, C}, {inp, CUDA_R_16BF, C},
                                {out, CUDA_R_16BF, OC}, 1.0f, residual != NULL ? 1.0f : 0.0f};
        const char *what = residual != NULL ? "forward (residual)" : "forward (epilogue)";
        cublasStatus_t st = gemm_lt_c(&ctx->gemm, s, &p, residual != NULL ? (const void *)residual : (const void *)out,
                                      &ep, ctx->workspace, MATMUL_LT_WORKSPACE);
        matmul_gemm_status(st, what, OC, BT, C);
        if (st == CUBLAS_STATUS_SUCCESS) return;
        matmul_note_fallback(ctx, what, OC, BT, C);
    }
    // unfused: the GEMM into pre_gelu (or out), then the bias, the GELU, the residual
    floatX *pre = gelu ? pre_gelu : out;
    matmul_gemm(ctx, s, "forward", 1, 0, OC, BT, C, weight, C, inp, C, pre, CUDA_R_16BF, OC, 0.0f);
    const size_t n = (size_t)BT * (size_t)OC;
    if (bias != NULL) {
        const int block = 256;
        size_t grid = llmc_ceil_div(n, block);
        if (grid > 132 * 64) grid = 132 * 64;
        matmul_add_bias_kernel<<<(unsigned)grid, block, 0, s>>>(pre, bias, n, OC);
        cudaLaunchCheck("matmul_add_bias_kernel");
    }
    if (gelu) gelu_forward(out, pre, n, s);
    if (residual != NULL) add_inplace(out, residual, n, s);
}

// out (BT,OC) = inp (BT,C) @ weight (OC,C)^T + bias (OC); bias may be NULL (none). With
// pre_gelu != NULL: pre_gelu (BT,OC) = that, out = gelu(that) (cuBLASLt GELU_AUX_BIAS: gelu of
// the fp32 value, both rounded once to bf16). out and pre_gelu are overwritten.
static inline void matmul_forward(MatmulContext *ctx, floatX *out, floatX *pre_gelu,
                                  const floatX *inp, const floatX *weight, const floatX *bias,
                                  int BT, int C, int OC, cudaStream_t s) {
    matmul_check_args("matmul_forward", BT, C, OC, out == NULL || inp == NULL || weight == NULL);
    matmul_forward_impl(ctx, out, pre_gelu, NULL, inp, weight, bias, BT, C, OC, s);
}

// out (BT,OC) = residual (BT,OC) + inp (BT,C) @ weight (OC,C)^T + bias (OC): a projection that
// ends a transformer block adds the residual stream itself, so that the stream is not read
// and written once more by a separate add. bias may be NULL. Fused, the sum is fp32 and
// rounded once; unfused (see matmul_forward_impl) it is bf16(bf16(bf16(gemm) + bias) + residual).
// out must not alias residual (the unfused GEMM would overwrite it before the add).
static inline void matmul_forward_residual(MatmulContext *ctx, floatX *out, const floatX *residual,
                                           const floatX *inp, const floatX *weight, const floatX *bias,
                                           int BT, int C, int OC, cudaStream_t s) {
    matmul_check_args("matmul_forward_residual", BT, C, OC,
                      out == NULL || residual == NULL || inp == NULL || weight == NULL);
    if ((const floatX *)out == residual)
        matmul_fail("matmul_forward_residual", "out aliases residual (BT %lld, C %lld, OC %lld)", BT, C, OC);
    matmul_forward_impl(ctx, out, NULL, residual, inp, weight, bias, BT, C, OC, s);
}

// dbias (OC) += column sums of dout (BT, OC), deterministic (fixed splits and orders). With
// pre_gelu != NULL, first dout = dout * gelu'(pre_gelu) in place, in the same pass.
static inline void matmul_dbias_gelu(MatmulContext *ctx, float *dbias, floatX *dout, const floatX *pre_gelu, int BT,
                                     int OC, cudaStream_t s) {
    const int col_tiles = (int)llmc_ceil_div((size_t)OC, MATMUL_DBIAS_COLS);
    int nsplit = col_tiles >= MATMUL_DBIAS_MAX_BLOCKS ? 1 : MATMUL_DBIAS_MAX_BLOCKS / col_tiles;
    const int row_chunks = (int)llmc_ceil_div((size_t)BT, 64);  // about 64 rows a split or more
    if (nsplit > row_chunks) nsplit = row_chunks;
    if (nsplit < 1) nsplit = 1;
    const int rows_per_split = (int)llmc_ceil_div((size_t)BT, (size_t)nsplit);
    if (nsplit > 1 && (size_t)nsplit * OC > MATMUL_DBIAS_SCRATCH)
        matmul_fail("matmul_backward dbias", "scratch too small: %lld splits x %lld columns (%lld)",
                    nsplit, OC, (long long)MATMUL_DBIAS_SCRATCH);
    const int vec = OC % 8 == 0 && aligned16(dout) && (pre_gelu == NULL || aligned16(pre_gelu));
    dim3 block(MATMUL_DBIAS_LANES, MATMUL_DBIAS_ROWS), grid((unsigned)col_tiles, (unsigned)nsplit);
    float *dst = nsplit == 1 ? dbias : ctx->dbias_partials;
    const int accumulate = nsplit == 1;
    if (pre_gelu != NULL) {
        if (vec)
            matmul_dbias_partial_kernel<true, true><<<grid, block, 0, s>>>(dst, accumulate, dout, pre_gelu, BT, OC,
                                                                           rows_per_split);
        else
            matmul_dbias_partial_kernel<false, true><<<grid, block, 0, s>>>(dst, accumulate, dout, pre_gelu, BT, OC,
                                                                            rows_per_split);
    } else {
        if (vec)
            matmul_dbias_partial_kernel<true, false><<<grid, block, 0, s>>>(dst, accumulate, dout, NULL, BT, OC,
                                                                            rows_per_split);
        else
            matmul_dbias_partial_kernel<false, false><<<grid, block, 0, s>>>(dst, accumulate, dout, NULL, BT, OC,
                                                                             rows_per_split);
    }
    cudaLaunchCheck("matmul_dbias_partial_kernel");
    if (nsplit > 1) {
        matmul_dbias_sum_kernel<<<(unsigned)llmc_ceil_div((size_t)OC, 256), 256, 0, s>>>(
            dbias, ctx->dbias_partials, OC, nsplit);
        cudaLaunchCheck("matmul_dbias_sum_kernel");
    }
}

// dbias (OC) += column sums of dout (BT, OC), deterministic (fixed splits and orders)
static inline void matmul_dbias(MatmulContext *ctx, float *dbias, const floatX *dout, int BT, int OC,
                                cudaStream_t s) {
    // without pre_gelu the kernel only reads dout: the cast drops a const it does not need
    matmul_dbias_gelu(ctx, dbias, (floatX *)dout, NULL, BT, OC, s);
}

// The backward of matmul_forward. With pre_gelu != NULL (the forward's pre_gelu), first
// dout = dout * gelu'(pre_gelu) in place (in the bias gradient's pass when dbias != NULL, else
// by gelu_backward_inplace of llmc/gelu.cuh). Then:
//   dbias   (OC)   += column sums of dout     fp32, +=   (skipped when NULL)
//   dweight (OC,C) += dout^T @ inp            fp32, +=   (skipped when NULL)
//   dinp    (BT,C)  = dout @ weight           bf16, =    (skipped when NULL)
static inline void matmul_backward(MatmulContext *ctx, floatX *dinp, float *dweight, float *dbias,
                                   floatX *dout, const floatX *inp, const floatX *weight,
                                   const floatX *pre_gelu, int BT, int C, int OC, cudaStream_t s) {
    matmul_check_args("matmul_backward", BT, C, OC,
                      dout == NULL || (dweight != NULL && inp == NULL) || (dinp != NULL && weight == NULL));
    if (dbias != NULL) matmul_dbias_gelu(ctx, dbias, dout, pre_gelu, BT, OC, s);  // GELU backward in the same pass
    else if (pre_gelu != NULL) gelu_backward_inplace(dout, pre_gelu, (size_t)BT * (size_t)OC, s);
    // dweight^T (C, OC) += inp^T (C, BT) @ dout (BT, OC), column-major
    if (dweight != NULL)
        matmul_gemm(ctx, s, "backward dweight", 0, 1, C, OC, BT, inp, C, dout, OC, dweight, CUDA_R_32F, C, 1.0f);
    // dinp^T (C, BT) = weight^T (C, OC) @ dout^T (OC, BT), column-major; last, so dinp may alias inp
    if (dinp != NULL) {
        if ((ctx->use_sm90 >> MM90_DINP & 1) && mm90_fits(BT, C, OC, dinp, NULL, dout, weight, NULL, NULL))
            matmul_sm90_status(ctx, mm90_gemm<MM90_BIAS>(dinp, NULL, dout, weight, 1, NULL, NULL, BT, C, OC, s),
                               "backward dinp", BT, C, OC);
        else
            matmul_gemm(ctx, s, "backward dinp", 0, 0, C, BT, OC, weight, C, dout, OC, dinp, CUDA_R_16BF, C, 0.0f);
    }
}

// matmul_backward (without pre_gelu) of a layer whose input was inp = gelu(inp_pre_gelu), with
// that GELU's backward folded in: dinp (BT,C) = (dout @ weight) * gelu'(inp_pre_gelu), the
// gradient of the pre-activation, as matmul_backward with pre_gelu would make of dinp in the
// layer before. Fused: cuBLASLt's DGELU epilogue on the dinp GEMM (the product is rounded once,
// and the GELU pass over dinp is saved). Unfused (no algorithm, OC or pointers unfit, or ctx
// flags): the GEMM, then gelu_backward_inplace. dinp must not alias inp_pre_gelu.
static inline void matmul_backward_dgelu(MatmulContext *ctx, floatX *dinp, float *dweight, float *dbias,
                                         floatX *dout, const floatX *inp, const floatX *weight,
                                         const floatX *inp_pre_gelu, int BT, int C, int OC, cudaStream_t s) {
    matmul_check_args("matmul_backward_dgelu", BT, C, OC,
                      dinp == NULL || inp_pre_gelu == NULL || weight == NULL || dout == NULL ||
                          (dweight != NULL && inp == NULL));
    matmul_backward(ctx, NULL, dweight, dbias, dout, inp, weight, NULL, BT, C, OC, s);
    if ((ctx->use_sm90 >> MM90_DGELU & 1) && ctx->fuse_epilogues &&
        mm90_fits(BT, C, OC, dinp, NULL, dout, weight, NULL, inp_pre_gelu)) {
        matmul_sm90_status(ctx, mm90_gemm<MM90_DGELU>(dinp, NULL, dout, weight, 1, NULL, inp_pre_gelu, BT, C, OC, s),
                           "backward dinp (dgelu)", BT, C, OC);
        return;
    }
    if (ctx->use_cublaslt && ctx->fuse_epilogues) {
        // aux is only read by DGELU: the cast drops a const the epilogue struct does not carry
        const gemm_epilogue ep = {CUBLASLT_EPILOGUE_DGELU, NULL, (void *)inp_pre_gelu, C};
        const gemm_problem p = {0, 0, C, BT, OC, {weight, CUDA_R_16BF, C}, {dout, CUDA_R_16BF, OC},
                                {dinp, CUDA_R_16BF, C}, 1.0f, 0.0f};
        cublasStatus_t st = gemm_lt(&ctx->gemm, s, &p, &ep, ctx->workspace, MATMUL_LT_WORKSPACE);
        matmul_gemm_status(st, "backward dinp (dgelu)", C, BT, OC);
        if (st == CUBLAS_STATUS_SUCCESS) return;
        matmul_note_fallback(ctx, "backward dinp (dgelu)", C, BT, OC);
    }
    matmul_gemm(ctx, s, "backward dinp", 0, 0, C, BT, OC, weight, C, dout, OC, dinp, CUDA_R_16BF, C, 0.0f);
    gelu_backward_inplace(dinp, inp_pre_gelu, (size_t)BT * (size_t)C, s);
}

// The Llama / Qwen MLP's gate/up projection and SwiGLU: gu (BT, 2I) = inp (BT, C) @ gateupw
// (2I, C)^T (each row [gate (I) | up (I)]; no bias), h (BT, I) = silu(gate) * up. Fused (the
// Hopper path): one GEMM whose tiles hold a gate column and its up column in the same thread;
// gu rounded once from fp32, h is swiglu_forward's of that gu (bitwise), so the backward's
// recompute of h from gu (-r 1) gives the same h. Unfused: matmul_forward, then
// swiglu_forward. gu and h are overwritten and must not overlap each other or the inputs.
static inline void matmul_forward_swiglu(MatmulContext *ctx, floatX *gu, floatX *h, const floatX *inp,
                                         const floatX *gateupw, int BT, int C, int I, cudaStream_t s) {
    matmul_check_args("matmul_forward_swiglu", BT, C, I, gu == NULL || h == NULL || inp == NULL || gateupw == NULL);
    if ((ctx->use_sm90 >> MM90_SWIGLU & 1) && ctx->fuse_epilogues &&
        mm90_fits_swiglu(BT, C, I, gu, h, inp, gateupw, NULL)) {
        matmul_sm90_status(ctx, mm90_swiglu(gu, h, inp, gateupw, BT, C, I, s), "forward (swiglu)", BT, 2 * (int64_t)I,
                           C);
        ctx->n_swiglu++;
        return;
    }
    matmul_forward(ctx, gu, NULL, inp, gateupw, NULL, BT, C, 2 * I, s);
    swiglu_forward(h, gu, BT, I, s);
}

// The backward of the MLP's down projection (out = h @ weight^T, weight (C, I), no bias) and
// of the SwiGLU that made its input h from gu, given dout (BT, C):
//   dweight (C,I)  += dout^T @ h                             fp32, +=   (skipped when NULL)
//   dgu    (BT,2I)  = [dh u silu'(g) | dh silu(g)], dh = dout @ weight     bf16, =
// Fused (the Hopper path): dh lives in the dinp GEMM's accumulators only, its epilogue reads
// gate and up and writes dgu (dh not rounded to bf16 first). Unfused: matmul_backward writes
// dh (BT, I) into the scratch dh, then swiglu_backward. dgu may be gu (in place), dh may be h
// (matmul_backward writes its dinp after the weight gradient has read h); dh must not overlap
// dgu, gu or dout (it is not written on the fused path).
static inline void matmul_backward_dswiglu(MatmulContext *ctx, floatX *dgu, floatX *dh, float *dweight, floatX *dout,
                                           const floatX *h, const floatX *weight, const floatX *gu, int BT, int C,
                                           int I, cudaStream_t s) {
    matmul_check_args("matmul_backward_dswiglu", BT, I, C,
                      dgu == NULL || dh == NULL || dout == NULL || weight == NULL || gu == NULL ||
                          (dweight != NULL && h == NULL));
    if ((ctx->use_sm90 >> MM90_DSWIGLU & 1) && ctx->fuse_epilogues &&
        mm90_fits_swiglu(BT, C, I, dgu, NULL, dout, weight, gu)) {
        matmul_backward(ctx, NULL, dweight, NULL, dout, h, weight, NULL, BT, I, C, s);
        matmul_sm90_status(ctx, mm90_dswiglu(dgu, dout, weight, gu, BT, C, I, s), "backward dinp (dswiglu)", BT, I, C);
        ctx->n_swiglu++;
        return;
    }
    matmul_backward(ctx, dh, dweight, NULL, dout, h, weight, NULL, BT, I, C, s);
    swiglu_backward(dgu, dh, gu, BT, I, s);
}

#endif // LLMC_MATMUL_CUH
