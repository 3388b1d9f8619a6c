/*
matmul.cuh - the trainer's linear layers: forward with bias and (optionally) GELU fused into
cuBLASLt's epilogue, and the backward (input, weight and bias gradients).

  matmul_forward   out (BT,OC) = inp (BT,C) @ weight (OC,C)^T + bias (OC)          (out =)
                   with pre_gelu: pre_gelu = that, out = gelu(that)     (both written, =)
  matmul_backward  with pre_gelu: dout = dout * gelu'(pre_gelu)            (dout in place)
                   dbias   (OC)    += column sums of dout       (fp32, +=, deterministic)
                   dweight (OC,C)  += dout^T @ inp              (fp32, +=: beta 1)
                   dinp    (BT,C)   = dout @ weight             (bf16, =: overwritten)

Row-major as llm.c (weight (OC, C): out = inp @ W^T + b); the GELU is the tanh form of
test/gpt2_ref.c. All GEMMs go through gemm_lt (common/gemm_lt.cuh: cuBLASLt, fp32
accumulation, cached descriptors and algorithms) on the stream given; nothing synchronises the
host. The forward's epilogue: CUBLASLT_EPILOGUE_BIAS, _GELU_AUX or _GELU_AUX_BIAS (the aux
matrix is pre_gelu, leading dimension OC). cuBLASLt needs OC % 8 == 0 and pre_gelu and bias
16-byte aligned for them; otherwise (or if cuBLASLt has no algorithm with the epilogue) the
same result comes from a plain GEMM and separate kernels (bias add, gelu_forward of
llmc/gelu.cuh), and ctx->n_fallback counts it.
The bias gradient is our own deterministic two-pass column sum, not cuBLASLt's BGRADB
epilogue: BGRADB writes (=) its vector in D's type, while our gradients accumulate (+=) in
fp32, and its reduction order is cuBLASLt's to choose.

Memory: the caller allocates every tensor argument; MatmulContext holds the cuBLASLt handle,
its 32 MiB workspace and a 512 KiB scratch for the bias reduction (matmul_init allocates them,
matmul_free releases them). One context per stream: calls sharing a context must be ordered
(the workspace and scratch are reused by every call).
Aliasing: out must not alias inp, weight or pre_gelu. dinp may alias inp (it is written last)
but not dout or weight. dout is modified only when pre_gelu != NULL.
Indices: every product that can pass 2^31 (BT*OC, BT*C) is 64-bit.
*/
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include "cuda_common.cuh"
#include "gelu.cuh"
#include "gemm_lt.cuh"

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
// VEC: OC % 8 == 0 and dout 16-byte aligned, so 8 columns are one 16-byte load.
template <bool VEC>
static __global__ void matmul_dbias_partial_kernel(float *dst, int accumulate, const floatX *dout, int BT,
                                            int OC, int rows_per_split) {
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
        for (int r = r_begin + ry; r < r_end; r += MATMUL_DBIAS_ROWS) {
            const floatX *row = dout + (size_t)r * OC + col0;
            if (VEC) {
                const Packed128<floatX> v = load128cs(row);
#pragma unroll
                for (int k = 0; k < 8; k++) acc[k] += to_float(v[k]);
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++)
                    if (col0 + k < OC) acc[k] += to_float(row[k]);
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

static inline void matmul_check_args(const char *what, int BT, int C, int OC, int null_pointer) {
    if (BT <= 0 || C <= 0 || OC <= 0) matmul_fail(what, "invalid sizes BT %lld, C %lld, OC %lld", BT, C, OC);
    if (null_pointer) matmul_fail(what, "a required pointer is NULL (BT %lld, C %lld, OC %lld)", BT, C, OC);
}

// out (BT,OC) = inp (BT,C) @ weight (OC,C)^T + bias (OC); bias may be NULL (none). With
// pre_gelu != NULL: pre_gelu (BT,OC) = that, out = gelu(that) (cuBLASLt GELU_AUX_BIAS: gelu of
// the fp32 value, both rounded once to bf16). out and pre_gelu are overwritten.
static inline void matmul_forward(MatmulContext *ctx, floatX *out, floatX *pre_gelu,
                                  const floatX *inp, const floatX *weight, const floatX *bias,
                                  int BT, int C, int OC, cudaStream_t s) {
    matmul_check_args("matmul_forward", BT, C, OC, out == NULL || inp == NULL || weight == NULL);
    const int gelu = pre_gelu != NULL;
    if (ctx->use_cublaslt && ctx->fuse_epilogues && (bias != NULL || gelu)) {
        const gemm_epilogue ep = {gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                       : CUBLASLT_EPILOGUE_BIAS,
                                  bias, pre_gelu, OC};
        const gemm_problem p = {1, 0, OC, BT, C, {weight, CUDA_R_16BF, C}, {inp, CUDA_R_16BF, C},
                                {out, CUDA_R_16BF, OC}, 1.0f, 0.0f};
        cublasStatus_t st = gemm_lt(&ctx->gemm, s, &p, &ep, ctx->workspace, MATMUL_LT_WORKSPACE);
        matmul_gemm_status(st, "forward (epilogue)", OC, BT, C);
        if (st == CUBLAS_STATUS_SUCCESS) return;
        matmul_note_fallback(ctx, "forward (epilogue)", OC, BT, C);
    }
    // unfused: the GEMM into pre_gelu (or out), then the bias, then the GELU
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
}

// dbias (OC) += column sums of dout (BT, OC), deterministic (fixed splits and orders)
static inline void matmul_dbias(MatmulContext *ctx, float *dbias, const floatX *dout, int BT, int OC,
                                cudaStream_t s) {
    const int col_tiles = (int)llmc_ceil_div((size_t)OC, MATMUL_DBIAS_COLS);
    int nsplit = col_tiles >= MATMUL_DBIAS_MAX_BLOCKS ? 1 : MATMUL_DBIAS_MAX_BLOCKS / col_tiles;
    const int row_chunks = (int)llmc_ceil_div((size_t)BT, 64);  // about 64 rows a split or more
    if (nsplit > row_chunks) nsplit = row_chunks;
    if (nsplit < 1) nsplit = 1;
    const int rows_per_split = (int)llmc_ceil_div((size_t)BT, (size_t)nsplit);
    if (nsplit > 1 && (size_t)nsplit * OC > MATMUL_DBIAS_SCRATCH)
        matmul_fail("matmul_backward dbias", "scratch too small: %lld splits x %lld columns (%lld)",
                    nsplit, OC, (long long)MATMUL_DBIAS_SCRATCH);
    const int vec = OC % 8 == 0 && aligned16(dout);
    dim3 block(MATMUL_DBIAS_LANES, MATMUL_DBIAS_ROWS), grid((unsigned)col_tiles, (unsigned)nsplit);
    float *dst = nsplit == 1 ? dbias : ctx->dbias_partials;
    const int accumulate = nsplit == 1;
    if (vec) matmul_dbias_partial_kernel<true><<<grid, block, 0, s>>>(dst, accumulate, dout, BT, OC, rows_per_split);
    else matmul_dbias_partial_kernel<false><<<grid, block, 0, s>>>(dst, accumulate, dout, BT, OC, rows_per_split);
    cudaLaunchCheck("matmul_dbias_partial_kernel");
    if (nsplit > 1) {
        matmul_dbias_sum_kernel<<<(unsigned)llmc_ceil_div((size_t)OC, 256), 256, 0, s>>>(
            dbias, ctx->dbias_partials, OC, nsplit);
        cudaLaunchCheck("matmul_dbias_sum_kernel");
    }
}

// The backward of matmul_forward. With pre_gelu != NULL (the forward's pre_gelu), first
// dout = dout * gelu'(pre_gelu) in place (gelu_backward_inplace of llmc/gelu.cuh). Then:
//   dbias   (OC)   += column sums of dout     fp32, +=   (skipped when NULL)
//   dweight (OC,C) += dout^T @ inp            fp32, +=   (skipped when NULL)
//   dinp    (BT,C)  = dout @ weight           bf16, =    (skipped when NULL)
static inline void matmul_backward(MatmulContext *ctx, floatX *dinp, float *dweight, float *dbias,
                                   floatX *dout, const floatX *inp, const floatX *weight,
                                   const floatX *pre_gelu, int BT, int C, int OC, cudaStream_t s) {
    matmul_check_args("matmul_backward", BT, C, OC,
                      dout == NULL || (dweight != NULL && inp == NULL) || (dinp != NULL && weight == NULL));
    if (pre_gelu != NULL) gelu_backward_inplace(dout, pre_gelu, (size_t)BT * (size_t)OC, s);
    if (dbias != NULL) matmul_dbias(ctx, dbias, dout, BT, OC, s);
    // dweight^T (C, OC) += inp^T (C, BT) @ dout (BT, OC), column-major
    if (dweight != NULL)
        matmul_gemm(ctx, s, "backward dweight", 0, 1, C, OC, BT, inp, C, dout, OC, dweight, CUDA_R_32F, C, 1.0f);
    // dinp^T (C, BT) = weight^T (C, OC) @ dout^T (OC, BT), column-major; last, so dinp may alias inp
    if (dinp != NULL)
        matmul_gemm(ctx, s, "backward dinp", 0, 0, C, BT, OC, weight, C, dout, OC, dinp, CUDA_R_16BF, C, 0.0f);
}

#endif // LLMC_MATMUL_CUH
