/*
common.cuh - what the dev/ benchmarks share, header-only (llm.c dev/cuda style): each benchmark
is one file of versions and a main(); the machinery to run, time and check them is here.

  checks        flceCheck (cudaCheck / cublasCheck come from common/cuda_check.cuh): every
                CUDA, cuBLAS and flce call is checked, and a failure exits with file:line, so a
                number in a table is never the product of a call that silently failed.
  DevArena      the benchmark's own cudaMallocs, counted: "extra device memory" of a version
                is the sum of what its setup allocated through one arena (exact, no
                allocator rounding and no other process in the number).
  gemm_check    gemm_lt (common/gemm_lt.cuh: the cached cuBLASLt GEMM the library uses) with a
                check, and a fallback to cublasGemmEx_64 when cuBLASLt's heuristic finds no
                algorithm (the unpadded odd-stride buffers of the naive and Liger versions are
                the shapes where that could happen).
  timing        CUDA events around a run (EventTimer, time_runs) and the median of the runs.
  report        markdown to stdout, kept to be written to a file too (-o).
  device code   online (max, sum-exp) statistics and their block reduction, row visitors that
                vectorise rows of any alignment (Packed128 of common/cuda_util.cuh), random
                fills, conversions, the valid-token count, the loss finalisation and a GPU
                rel-L2.
  the FLCE harness  the problem every fused-linear-cross-entropy version solves (bf16 h (N, H),
                W (V, H), int32 targets, mean loss, bf16 d_h, fp32 d_W), its random inputs, a
                GPU fp32 reference and a CPU fp64 one, and the two modes that run a table of
                versions: benchmark (run_bench: per shape the GEMM rate, the 3-GEMM floor, every
                version's median time, memory and errors, then a summary) and correctness
                (run_check: small odd shapes against the CPU reference). dev/flce_bench.cu is
                its versions and main().

Indices that can exceed 2^31 (row * stride, N * V, N * H) are int64_t everywhere.
*/
#ifndef DEV_COMMON_CUH
#define DEV_COMMON_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.cuh"  // common/: cudaCheck, cublasCheck
#include "cuda_util.cuh"   // common/: to_float, from_float, Packed128, block_sum_f64
#include "flce.h"
#include "gemm_lt.cuh"     // common/
#include "test_util.h"     // test/: fill_uniform, bf16 bits, rel_l2_f64 (the CPU reference's inputs)

typedef __nv_bfloat16 bf16;

// ----------------------------------------------------------------------------------------
// checks

static inline void flce_check(flce_status st, const flce_context *ctx, const char *file, int line) {
    if (st != FLCE_OK) {
        fprintf(stderr, "[flce ERROR] at %s:%d: %s: %s\n", file, line, flce_status_string(st),
                ctx != NULL ? flce_last_error(ctx) : "");
        exit(EXIT_FAILURE);
    }
}
#define flceCheck(st, ctx) (flce_check((st), (ctx), __FILE__, __LINE__))

// ----------------------------------------------------------------------------------------
// counted device allocations

#define ARENA_MAX 32

typedef struct {
    void *ptr[ARENA_MAX];
    size_t bytes[ARENA_MAX];
    int n;
    size_t total;  // bytes requested through this arena and not yet freed
} DevArena;

// Returns NULL (and clears the sticky error) when the device is out of memory, so that a
// version that does not fit is reported as such instead of ending the run.
static inline void *arena_alloc(DevArena *a, size_t bytes) {
    if (a->n == ARENA_MAX) {
        fprintf(stderr, "arena_alloc: more than %d buffers\n", ARENA_MAX);
        exit(EXIT_FAILURE);
    }
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 16);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return NULL;
    }
    cudaCheck(err);
    a->ptr[a->n] = p;
    a->bytes[a->n] = bytes;
    a->n++;
    a->total += bytes;
    return p;
}

static inline void arena_free(DevArena *a) {
    for (int i = 0; i < a->n; i++) cudaCheck(cudaFree(a->ptr[i]));
    a->n = 0;
    a->total = 0;
}

// ----------------------------------------------------------------------------------------
// GEMM: D (m x n, ldd) = alpha op(A) op(B) + beta D, column-major (cuBLASLt's convention; a
// row-major (rows, cols) matrix with stride ld is a column-major (cols, rows) one)

#define LT_WORKSPACE ((size_t)32 << 20)  // cuBLASLt's recommendation for Hopper

static cublasHandle_t g_cublas = NULL;  // only for the fallback below; created on first use

static inline void gemm_check(const char *what, gemm_cache *cache, cudaStream_t stream,
                              gemm_problem p, void *ws, size_t ws_bytes) {
    cublasStatus_t st = gemm_lt(cache, stream, &p, NULL, ws, ws_bytes);
    if (st == CUBLAS_STATUS_SUCCESS) return;
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) {
        fprintf(stderr, "[cuBLASLt ERROR] %d (%s): %s GEMM m=%lld n=%lld k=%lld lda=%lld ldb=%lld ldd=%lld\n",
                (int)st, cublasGetStatusString(st), what, (long long)p.m, (long long)p.n, (long long)p.k,
                (long long)p.a.ld, (long long)p.b.ld, (long long)p.d.ld);
        exit(EXIT_FAILURE);
    }
    // no cuBLASLt algorithm for this layout: the legacy API (what PyTorch's mm uses) instead
    static int warned = 0;
    if (!warned) {
        fprintf(stderr, "note: cuBLASLt found no algorithm for the %s GEMM (m=%lld n=%lld k=%lld "
                "ldd=%lld); using cublasGemmEx_64 for such shapes\n", what, (long long)p.m,
                (long long)p.n, (long long)p.k, (long long)p.d.ld);
        warned = 1;
    }
    if (g_cublas == NULL) cublasCheck(cublasCreate(&g_cublas));
    cublasCheck(cublasSetStream(g_cublas, stream));
    cublasCheck(cublasSetWorkspace(g_cublas, ws, ws_bytes));
    cublasCheck(cublasGemmEx_64(g_cublas, p.transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                                p.transb ? CUBLAS_OP_T : CUBLAS_OP_N, p.m, p.n, p.k, &p.alpha, p.a.ptr,
                                p.a.type, p.a.ld, p.b.ptr, p.b.type, p.b.ld, &p.beta, (void *)p.d.ptr,
                                p.d.type, p.d.ld, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// ----------------------------------------------------------------------------------------
// sizes and grids

__host__ __device__ static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t round_up(int64_t x, int64_t m) { return ceil_div(x, m) * m; }
static inline int64_t next_pow2(int64_t x) {
    int64_t p = 1;
    while (p < x) p *= 2;
    return p;
}
static inline double gib(size_t b) { return (double)b / (double)(1ull << 30); }

static int g_sm_count = 132;  // the device's, once bench_init has asked

// blocks for a grid-stride loop over n items: enough to fill the GPU, at most 16 per SM
static inline unsigned grid_for(int64_t n, int threads) {
    int64_t b = ceil_div(n, threads), cap = (int64_t)g_sm_count * 16;
    if (b > cap) b = cap;
    return b < 1 ? 1u : (unsigned)b;
}

// ----------------------------------------------------------------------------------------
// timing

static inline int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// median of n values (sorts them)
static inline float median_of(float *x, int n) {
    qsort(x, (size_t)n, sizeof(float), cmp_float);
    return n % 2 ? x[n / 2] : 0.5f * (x[n / 2 - 1] + x[n / 2]);
}

// Two events around work on a stream: timer_start, the work, timer_stop (which waits for it)
// gives its milliseconds.
typedef struct {
    cudaEvent_t e0, e1;
} EventTimer;

static inline void timer_init(EventTimer *t) {
    cudaCheck(cudaEventCreate(&t->e0));
    cudaCheck(cudaEventCreate(&t->e1));
}

static inline void timer_free(EventTimer *t) {
    cudaCheck(cudaEventDestroy(t->e0));
    cudaCheck(cudaEventDestroy(t->e1));
}

static inline void timer_start(EventTimer *t, cudaStream_t s) { cudaCheck(cudaEventRecord(t->e0, s)); }

static inline float timer_stop(EventTimer *t, cudaStream_t s) {
    float ms = 0.0f;
    cudaCheck(cudaEventRecord(t->e1, s));
    cudaCheck(cudaEventSynchronize(t->e1));
    cudaCheck(cudaEventElapsedTime(&ms, t->e0, t->e1));
    return ms;
}

// ms[0 .. repeats) of run() on stream s, each between events, after `warmups` untimed runs
template <typename F>
static inline void time_runs(float *ms, int warmups, int repeats, cudaStream_t s, F run) {
    EventTimer t;
    timer_init(&t);
    for (int r = -warmups; r < repeats; r++) {
        timer_start(&t, s);
        run();
        const float took = timer_stop(&t, s);
        if (r >= 0) ms[r] = took;
    }
    timer_free(&t);
}

// ||a - b|| / ||b|| over n bf16 values (bit patterns, host), a's non-finite values counted
// into *bad and left out of the sums
static inline double rel_l2_bf16_host(const uint16_t *a, const uint16_t *b, size_t n, size_t *bad) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double x = bf16_bits_to_f32(a[i]), y = bf16_bits_to_f32(b[i]);
        if (!isfinite(x)) {
            (*bad)++;
            continue;
        }
        num += (x - y) * (x - y);
        den += y * y;
    }
    return sqrt(num / den);
}

// ----------------------------------------------------------------------------------------
// the report: markdown to stdout, and kept for -o (report_write)

static char *g_report = NULL;
static size_t g_report_len = 0, g_report_cap = 0;

__attribute__((format(printf, 1, 2))) static inline void report(const char *fmt, ...) {
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

// The report so far into path; 0, or 1 with a message.
static inline int report_write(const char *path) {
    FILE *f = fopen(path, "w");
    if (f == NULL || fwrite(g_report, 1, g_report_len, f) != g_report_len || fclose(f) != 0) {
        fprintf(stderr, "could not write %s\n", path);
        return 1;
    }
    fprintf(stderr, "report written to %s\n", path);
    return 0;
}


// ----------------------------------------------------------------------------------------
// device: online softmax statistics

// the reference takes the accurate expf; the timed versions the fast one, as their peers do
template <bool PRECISE> __device__ __forceinline__ float fexp(float x) {
    return PRECISE ? expf(x) : __expf(x);
}

struct Stats {
    float m;  // running max
    float s;  // sum of exp(z - m)
};

template <bool P>
__device__ __forceinline__ void stats_push(Stats &st, float z) {
    // one exp per element; the rescale happens only when the max moves
    if (z > st.m) {
        st.s = st.s * fexp<P>(st.m - z) + 1.0f;  // exp(-inf) = 0 covers the first element
        st.m = z;
    } else {
        st.s += fexp<P>(z - st.m);  // a NaN z lands here and poisons s, as it should
    }
}

template <bool P>
__device__ __forceinline__ Stats stats_merge(Stats a, Stats b) {
    Stats r;
    r.m = fmaxf(a.m, b.m);
    if (r.m == -INFINITY) { r.s = 0.0f; return r; }  // both empty: avoid exp(-inf - -inf)
    r.s = a.s * fexp<P>(a.m - r.m) + b.s * fexp<P>(b.m - r.m);
    return r;
}

// All threads of the block get the merged statistics.
template <bool P>
__device__ Stats block_reduce_stats(Stats st) {
    __shared__ Stats warp_st[32];
    __shared__ Stats result;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    for (int off = 16; off > 0; off /= 2) {
        Stats o;
        o.m = __shfl_xor_sync(0xffffffffu, st.m, off);
        o.s = __shfl_xor_sync(0xffffffffu, st.s, off);
        st = stats_merge<P>(st, o);
    }
    if (lane == 0) warp_st[warp] = st;
    __syncthreads();
    if (warp == 0) {
        if (lane < n_warps) {
            st = warp_st[lane];
        } else {
            st.m = -INFINITY;
            st.s = 0.0f;
        }
        for (int off = 16; off > 0; off /= 2) {
            Stats o;
            o.m = __shfl_xor_sync(0xffffffffu, st.m, off);
            o.s = __shfl_xor_sync(0xffffffffu, st.s, off);
            st = stats_merge<P>(st, o);
        }
        if (lane == 0) result = st;
    }
    __syncthreads();
    return result;
}

// ----------------------------------------------------------------------------------------
// device: rows of any alignment, vectorised
//
// A row of an (rows, V) buffer with an odd stride V starts on any element boundary, so 16-byte
// loads cannot start at element 0. Each visitor handles a scalar head up to the first 16-byte
// boundary, then 16-byte vectors, then a scalar tail; with a padded stride the head is empty.
// The vectors move through Packed128's raw view in place rather than load128's return value:
// the kernels built on these visitors keep the code their RESULTS.md timings were taken with.

template <typename T, typename F>
__device__ __forceinline__ void row_visit(const T *row, int64_t n, F f) {
    constexpr int VEC = Packed128<T>::size;
    int64_t head = (int64_t)((16 - ((uintptr_t)row & 15)) & 15) / (int64_t)sizeof(T);
    if (head > n) head = n;
    const int64_t nvec = (n - head) / VEC;
    for (int64_t j = threadIdx.x; j < head; j += blockDim.x) f(j, to_float(row[j]));
    for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
        const int64_t j0 = head + v * VEC;
        Packed128<T> x;
        x.raw = *reinterpret_cast<const int4 *>(row + j0);
#pragma unroll
        for (int e = 0; e < VEC; e++) f(j0 + e, to_float(x.v[e]));
    }
    for (int64_t j = head + nvec * VEC + threadIdx.x; j < n; j += blockDim.x) f(j, to_float(row[j]));
}

// row[j] = f(j, row[j]) for j < n, in place
template <typename T, typename F>
__device__ __forceinline__ void row_transform(T *row, int64_t n, F f) {
    constexpr int VEC = Packed128<T>::size;
    int64_t head = (int64_t)((16 - ((uintptr_t)row & 15)) & 15) / (int64_t)sizeof(T);
    if (head > n) head = n;
    const int64_t nvec = (n - head) / VEC;
    for (int64_t j = threadIdx.x; j < head; j += blockDim.x) row[j] = from_float<T>(f(j, to_float(row[j])));
    for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
        const int64_t j0 = head + v * VEC;
        Packed128<T> x;
        x.raw = *reinterpret_cast<const int4 *>(row + j0);
#pragma unroll
        for (int e = 0; e < VEC; e++) x.v[e] = from_float<T>(f(j0 + e, to_float(x.v[e])));
        *reinterpret_cast<int4 *>(row + j0) = x.raw;
    }
    for (int64_t j = head + nvec * VEC + threadIdx.x; j < n; j += blockDim.x)
        row[j] = from_float<T>(f(j, to_float(row[j])));
}

// ----------------------------------------------------------------------------------------
// device: random inputs (a counter-based hash, so any element is reproducible on its own)

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

// uniform in [0, 1) with 24 random bits
__device__ __forceinline__ float unit_uniform(uint64_t seed, uint64_t i) {
    return (float)(mix64(seed ^ mix64(i)) >> 40) * (1.0f / 16777216.0f);
}

// x[k] uniform in [-amp, amp), rounded to bf16
__global__ void fill_uniform_bf16_kernel(bf16 *x, int64_t n, float amp, uint64_t seed) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x)
        x[k] = __float2bfloat16_rn((2.0f * unit_uniform(seed, (uint64_t)k) - 1.0f) * amp);
}

// targets uniform over [0, V), a fraction ignore_frac set to -100
__global__ void fill_targets_kernel(int *t, int64_t n, int64_t V, float ignore_frac, uint64_t seed) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        const uint64_t r = mix64(seed ^ mix64(2 * (uint64_t)k + 1));
        t[k] = unit_uniform(seed, 2 * (uint64_t)k) < ignore_frac ? -100 : (int)(r % (uint64_t)V);
    }
}

// ----------------------------------------------------------------------------------------
// device: conversions (flat, over contiguous cudaMalloc'ed buffers: 16-byte aligned bases)

__global__ void bf16_to_f32_kernel(float *out, const bf16 *in, int64_t n) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x)
        out[k] = __bfloat162float(in[k]);
}

// 8 elements per step: two 16-byte loads, one 16-byte store
__global__ void f32_to_bf16_kernel(bf16 *out, const float *in, int64_t n) {
    const int64_t n8 = n / 8, stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t v = tid; v < n8; v += stride) {
        const float4 a = reinterpret_cast<const float4 *>(in)[2 * v];
        const float4 b = reinterpret_cast<const float4 *>(in)[2 * v + 1];
        Packed128<bf16> o;
        o.v[0] = __float2bfloat16_rn(a.x); o.v[1] = __float2bfloat16_rn(a.y);
        o.v[2] = __float2bfloat16_rn(a.z); o.v[3] = __float2bfloat16_rn(a.w);
        o.v[4] = __float2bfloat16_rn(b.x); o.v[5] = __float2bfloat16_rn(b.y);
        o.v[6] = __float2bfloat16_rn(b.z); o.v[7] = __float2bfloat16_rn(b.w);
        store128(out + 8 * v, o);
    }
    for (int64_t k = n8 * 8 + tid; k < n; k += stride) out[k] = __float2bfloat16_rn(in[k]);
}

// ----------------------------------------------------------------------------------------
// device: the loss bookkeeping every version shares

// tokens whose target is in [0, V): the divisor of the mean; *n_valid must be zeroed first
__global__ void count_valid_kernel(const int *targets, int64_t N, int64_t V, int *n_valid) {
    int c = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N;
         i += (int64_t)gridDim.x * blockDim.x)
        c += targets[i] >= 0 && targets[i] < V;
    for (int off = 16; off > 0; off /= 2) c += __shfl_xor_sync(0xffffffffu, c, off);
    if (threadIdx.x % 32 == 0 && c > 0) atomicAdd(n_valid, c);  // integer: exact in any order
}

// one block: the mean of the per-token losses in a fixed order (deterministic), in double
__global__ void loss_finalize_kernel(const float *token_loss, int64_t N, const int *n_valid,
                                     float *loss, double *loss64) {
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) acc += (double)token_loss[i];
    double total = block_sum_f64(acc);
    if (threadIdx.x != 0) return;
    total = *n_valid > 0 ? total / (double)*n_valid : 0.0;
    if (loss != NULL) *loss = (float)total;
    if (loss64 != NULL) *loss64 = total;
}

// sums[0] += sum (out - ref)^2 over finite out, sums[1] += sum ref^2, *nonfinite += count
template <typename T>
__global__ void diff_kernel(const T *out, const float *ref, int64_t n, double *sums,
                            unsigned long long *nonfinite) {
    double num = 0.0, den = 0.0;
    unsigned long long bad = 0;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        const float o = to_float(out[k]), r = ref[k];
        if (isfinite(o)) {
            const double d = (double)o - (double)r;
            num += d * d;
        } else {
            bad++;
        }
        den += (double)r * (double)r;
    }
    for (int off = 16; off > 0; off /= 2) {
        num += __shfl_xor_sync(0xffffffffu, num, off);
        den += __shfl_xor_sync(0xffffffffu, den, off);
        bad += __shfl_xor_sync(0xffffffffu, bad, off);
    }
    if (threadIdx.x % 32 == 0) {
        atomicAdd(&sums[0], num);
        atomicAdd(&sums[1], den);
        if (bad) atomicAdd(nonfinite, bad);
    }
}

// ----------------------------------------------------------------------------------------
// the FLCE harness: the problem, its inputs and references, and the benchmark and correctness
// modes over a table of versions (dev/flce_bench.cu's)

#define IGNORE_FRAC 0.05f
#define LD_MULTIPLE 64           // padded strides (the reference's, the rate GEMM's; verl's buffer)
#define CE_THREADS 512           // row kernels over whole vocab rows
#define RATE_BUF_MAX ((size_t)4 << 30)      // the at-shape rate GEMM's output buffer
#define REF_CHUNK_MAX ((size_t)2 << 30)     // the reference's fp32 logits chunk
#define SLOW_MS 2000.0f          // a first run slower than this is the only run
#define BUDGET_MS 5000.0f        // timed runs of one version at one shape, about
#define CHECK_TOL_GRAD 1e-2
#define CHECK_TOL_LOSS 1e-3
#define CHECK_TOL_REF_GRAD 1e-4  // the GPU reference (fp32) against the CPU one (fp64)
#define CHECK_TOL_REF_LOSS 1e-5
#define BENCH_MAX_SHAPES 16
#define BENCH_MAX_VERSIONS 16

static gemm_cache g_gemm;   // the cuBLASLt handle and the descriptor cache, all versions

// the problem and a version's state

typedef struct {
    int64_t N, H, V;
    const bf16 *h, *W;      // (N, H), (V, H)
    const int *targets;     // (N)
    float *loss;            // scalar
    bf16 *d_h;              // (N, H)
    float *d_W;             // (V, H)
    int check;              // correctness mode's small shapes: versions shrink their splits and tiles
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

// host: launches the versions and the reference share

static inline void launch_count_valid(const Problem *P, int *n_valid) {
    cudaCheck(cudaMemsetAsync(n_valid, 0, sizeof(int), P->stream));
    count_valid_kernel<<<grid_for(P->N, 256), 256, 0, P->stream>>>(P->targets, P->N, P->V, n_valid);
    cudaCheck(cudaGetLastError());
}

static inline void launch_finalize(const Problem *P, const float *token_loss, const int *n_valid,
                                   float *loss, double *loss64) {
    loss_finalize_kernel<<<1, 1024, 0, P->stream>>>(token_loss, P->N, n_valid, loss, loss64);
    cudaCheck(cudaGetLastError());
}

static inline void launch_f32_to_bf16(bf16 *out, const float *in, int64_t n, cudaStream_t s) {
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
static inline int alloc_common(const Problem *P, Work *w, char *why, size_t why_len) {
    WORK_ALLOC(w->lt_ws, void *, LT_WORKSPACE);
    WORK_ALLOC(w->n_valid, int *, sizeof(int));
    WORK_ALLOC(w->token_loss, float *, (size_t)P->N * sizeof(float));
    return 0;
}

static inline void work_release(Work *w) {
    arena_free(&w->arena);
    // descriptors of this version's shapes; the next version builds its own (outside timing)
    gemm_cache_release(&g_gemm);
}

// the GPU reference: fp32 copies of the bf16 inputs, token chunks of fp32 logits, fp32
// GEMMs (CUBLAS_COMPUTE_32F with fp32 operands: plain fp32, no TF32), accurate expf

static inline double reference_gpu(const Problem *P, float *dh_ref, float *dW_ref, int64_t *chunk_out) {
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
static inline double rel_l2_gpu(const T *out, const float *ref, int64_t n, cudaStream_t s) {
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

// median ms of D (m x n) = A^T B, bf16 in and out, fp32 accumulation; returns TFLOP/s
static inline double gemm_rate(const char *what, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                               const void *B, int64_t ldb, void *D, int64_t ldd, void *ws, cudaStream_t s) {
    float ms[10];
    time_runs(ms, 3, 10, s, [&] {
        gemm_check(what, &g_gemm, s,
                   {1, 0, m, n, k, {A, CUDA_R_16BF, lda}, {B, CUDA_R_16BF, ldb},
                    {D, CUDA_R_16BF, ldd}, 1.0f, 0.0f},
                   ws, LT_WORKSPACE);
    });
    gemm_cache_release(&g_gemm);
    return 2.0 * (double)m * (double)n * (double)k / ((double)median_of(ms, 10) * 1e9);
}

// NaN (all-ones bits, in bf16 and fp32) in every output: an element a version does not write
// shows up as a non-finite error
static inline void poison_outputs(const Problem *P) {
    cudaCheck(cudaMemsetAsync(P->loss, 0xff, sizeof(float), P->stream));
    cudaCheck(cudaMemsetAsync(P->d_h, 0xff, (size_t)P->N * P->H * sizeof(bf16), P->stream));
    cudaCheck(cudaMemsetAsync(P->d_W, 0xff, (size_t)P->V * P->H * sizeof(float), P->stream));
}

// one fwd+bwd between events, outputs poisoned before (outside the events)
static inline float run_timed(const Version *v, const Problem *P, Work *w, EventTimer *timer) {
    poison_outputs(P);
    timer_start(timer, P->stream);
    v->run(P, w);
    const float ms = timer_stop(timer, P->stream);
    cudaCheck(cudaGetLastError());
    return ms;
}

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
    const Version *versions;  // the table's rows, in order
    int n_versions;
    unsigned mask;            // bit g-1: version group g
    char shapes[2048];        // NxHxV,NxHxV,...
    int repeats, warmups;
    const char *out_path;     // also the markdown report there (benchmark mode)
    const char *name;         // the benchmark, and what it compares: the report's first line
    const char *what;
    const char *check_note;   // correctness mode: what the versions change at its small shapes
} BenchArgs;

// NxHxV,NxHxV,... into out (at most max); the count, or -1 with a message on stderr
static inline int parse_shapes(const char *s, Shape *out, int max) {
    int n = 0;
    const char *p = s;
    while (*p && n < max) {
        long long N, H, V;
        int used = 0;
        if (sscanf(p, "%lldx%lldx%lld%n", &N, &H, &V, &used) != 3 || N <= 0 || H <= 0 || V <= 0) {
            fprintf(stderr, "bad shape list '%s' (want NxHxV,NxHxV,...)\n", s);
            return -1;
        }
        if (H % 8 != 0 || N > INT32_MAX || V > INT32_MAX) {
            fprintf(stderr, "shape %lldx%lldx%lld: H must be a multiple of 8 (16-byte rows), N and V < 2^31\n",
                    N, H, V);
            return -1;
        }
        out[n].N = N;
        out[n].H = H;
        out[n].V = V;
        n++;
        p += used;
        if (*p == ',') p++;
        else if (*p) {
            fprintf(stderr, "bad shape list '%s'\n", s);
            return -1;
        }
    }
    return n;
}

// Random inputs of one shape on the device: h, W uniform with std H^-1/4 (amplitude
// sqrt(3) H^-1/4) so the logits have variance ~1; targets uniform, IGNORE_FRAC of them -100.
// One seed for each of the three (counter-based: the values do not depend on the grid).
static inline void fill_flce_inputs(bf16 *h, bf16 *W, int *targets, int64_t N, int64_t H, int64_t V,
                                    const uint64_t seeds[3], cudaStream_t s) {
    const float amp = sqrtf(3.0f) * powf((float)H, -0.25f);
    fill_uniform_bf16_kernel<<<grid_for(N * H, 256), 256, 0, s>>>(h, N * H, amp, seeds[0]);
    cudaCheck(cudaGetLastError());
    fill_uniform_bf16_kernel<<<grid_for(V * H, 256), 256, 0, s>>>(W, V * H, amp, seeds[1]);
    cudaCheck(cudaGetLastError());
    fill_targets_kernel<<<grid_for(N, 256), 256, 0, s>>>(targets, N, V, IGNORE_FRAC, seeds[2]);
    cudaCheck(cudaGetLastError());
}

static inline void make_inputs(Problem *P, uint64_t seed) {
    const uint64_t seeds[3] = {seed * 3 + 0, seed * 3 + 1, seed * 3 + 2};
    fill_flce_inputs((bf16 *)P->h, (bf16 *)P->W, (int *)P->targets, P->N, P->H, P->V, seeds, P->stream);
}

static inline void alloc_problem(Problem *P, const Shape *sh, cudaStream_t s) {
    memset(P, 0, sizeof(*P));
    P->N = sh->N;
    P->H = sh->H;
    P->V = sh->V;
    P->stream = s;
    void *p;
    cudaCheck(cudaMalloc(&p, (size_t)P->N * P->H * sizeof(bf16))); P->h = (const bf16 *)p;
    cudaCheck(cudaMalloc(&p, (size_t)P->V * P->H * sizeof(bf16))); P->W = (const bf16 *)p;
    cudaCheck(cudaMalloc(&p, (size_t)P->N * sizeof(int))); P->targets = (const int *)p;
    cudaCheck(cudaMalloc(&P->loss, sizeof(float)));
    cudaCheck(cudaMalloc(&P->d_h, (size_t)P->N * P->H * sizeof(bf16)));
    cudaCheck(cudaMalloc(&P->d_W, (size_t)P->V * P->H * sizeof(float)));
}

static inline void free_problem(Problem *P) {
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

static inline void bench_shape(const BenchArgs *a, int si, const Shape *sh, cudaStream_t s, Result *res,
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
    EventTimer timer;
    timer_init(&timer);
    int64_t ref_chunk = 0;
    timer_start(&timer, s);
    const double loss_ref = reference_gpu(&P, dh_ref, dW_ref, &ref_chunk);
    const float ref_ms = timer_stop(&timer, s);

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

    for (int vi = 0; vi < a->n_versions; vi++) {
        const Version *v = &a->versions[vi];
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
        float t_first = run_timed(v, &P, &w, &timer);
        if (t_first > SLOW_MS) t_first = run_timed(v, &P, &w, &timer);
        if (t_first > SLOW_MS) {
            times[n++] = t_first;  // slow: the first run is the measurement (warm-up cost is ~ms)
            r->cold = 1;
        } else {
            float last = t_first;
            for (int k = 1; k < a->warmups; k++) last = run_timed(v, &P, &w, &timer);
            int reps = a->repeats;
            if (last * (float)reps > BUDGET_MS) reps = (int)(BUDGET_MS / last);
            if (reps < 1) reps = 1;
            if (reps > 64) reps = 64;
            for (int k = 0; k < reps; k++) times[n++] = run_timed(v, &P, &w, &timer);
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
    timer_free(&timer);
    cudaCheck(cudaFree(dh_ref));
    cudaCheck(cudaFree(dW_ref));
    free_problem(&P);
}

static inline int run_bench(const BenchArgs *a, cudaStream_t s) {
    Shape shapes[BENCH_MAX_SHAPES];
    const int n_shapes = parse_shapes(a->shapes, shapes, BENCH_MAX_SHAPES);
    if (n_shapes < 0 || a->n_versions > BENCH_MAX_VERSIONS) return 2;
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
    report("# %s: %s (fwd+bwd, bf16 in, bf16 d_h, fp32 d_W)\n\n", a->name, a->what);
    report("%s\n\n", g_device_line);
    report("bf16 GEMM 8192^3: %.0f TFLOP/s. Warm-ups %d, repeats up to %d (fewer when a version's runs "
           "would pass %.0f s; a first run over %.0f s is the only one: \"cold\"). x floor: against "
           "the 3-GEMM floor 6NVH at the 8192^3 rate. Extra MiB: the version's own device "
           "buffers (counted cudaMallocs), beyond inputs and gradients.\n",
           g_rate_8192, a->warmups, a->repeats, BUDGET_MS / 1000.0f, SLOW_MS / 1000.0f);

    static Result res[BENCH_MAX_SHAPES][BENCH_MAX_VERSIONS];
    ShapeInfo info[BENCH_MAX_SHAPES];
    for (int si = 0; si < n_shapes; si++) bench_shape(a, si, &shapes[si], s, res[si], &info[si]);

    report("\n## Summary: median ms (x the 3-GEMM floor)\n\n| version |");
    for (int si = 0; si < n_shapes; si++)
        report(" %lldx%lldx%lld |", (long long)shapes[si].N, (long long)shapes[si].H, (long long)shapes[si].V);
    report("\n|---|");
    for (int si = 0; si < n_shapes; si++) report("---:|");
    report("\n| 3-GEMM floor |");
    for (int si = 0; si < n_shapes; si++) report(" %.2f |", info[si].floor_ms);
    report("\n");
    for (int vi = 0; vi < a->n_versions; vi++) {
        if (!(a->mask & (1u << (a->versions[vi].group - 1)))) continue;
        report("| %s |", a->versions[vi].name);
        for (int si = 0; si < n_shapes; si++) {
            const Result *r = &res[si][vi];
            if (r->ran) report(" %.1f (%.2fx) |", r->ms, r->x_floor);
            else report(" %s |", r->why);
        }
        report("\n");
    }
    return a->out_path != NULL ? report_write(a->out_path) : 0;
}

// correctness mode: small odd shapes against a CPU fp64 reference

// loss (mean), d_h, d_W in double from the bf16-rounded inputs (as floats)
static inline double cpu_reference(const float *h, const float *W, const int *t, int64_t N, int64_t H,
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

static inline int run_check(const BenchArgs *a, cudaStream_t s) {
    Shape shapes[BENCH_MAX_SHAPES];
    const int n_shapes = parse_shapes(a->shapes, shapes, BENCH_MAX_SHAPES);
    if (n_shapes < 0) return 2;
    int failures = 0;
    printf("# %s -c: every version against a CPU fp64 reference "
           "(PASS: d_h, d_W rel L2 <= %.0e, loss abs err <= %.0e; two runs each, outputs poisoned)\n",
           a->name, CHECK_TOL_GRAD, CHECK_TOL_LOSS);
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
        P.check = 1;
        cudaCheck(cudaMemcpy((void *)P.h, hb, (size_t)N * H * 2, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy((void *)P.W, Wb, (size_t)V * H * 2, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy((void *)P.targets, t, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
        printf("\n%lldx%lldx%lld (%s): loss %.6f\n", (long long)N, (long long)H, (long long)V, a->check_note,
               loss_ref);

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
        for (int vi = 0; vi < a->n_versions; vi++) {
            const Version *v = &a->versions[vi];
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

// The device (0), its line for the report, the harness's cuBLASLt handle and buffers; the
// stream the modes run on.
static inline cudaStream_t bench_init(void) {
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
    cudaCheck(cudaMalloc(&g_diff_sums, 2 * sizeof(double)));
    cudaCheck(cudaMalloc(&g_diff_bad, sizeof(unsigned long long)));
    return s;
}

static inline void bench_free(cudaStream_t s) {
    gemm_cache_release(&g_gemm);
    cublasCheck(cublasLtDestroy(g_gemm.handle));
    if (g_cublas != NULL) cublasCheck(cublasDestroy(g_cublas));
    cudaCheck(cudaFree(g_diff_sums));
    cudaCheck(cudaFree(g_diff_bad));
    cudaCheck(cudaStreamDestroy(s));
    free(g_report);
    g_report = NULL;
}

#endif // DEV_COMMON_CUH
