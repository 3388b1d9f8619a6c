/*
common.cuh - what the dev/ benchmarks share, header-only (llm.c dev/cuda style):

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
  device code   online (max, sum-exp) statistics and their block reduction, row visitors that
                vectorise rows of any alignment (Packed128 of common/cuda_util.cuh), random
                fills, conversions, the valid-token count, the loss finalisation and a GPU
                rel-L2.

Indices that can exceed 2^31 (row * stride, N * V, N * H) are int64_t everywhere.
*/
#ifndef DEV_COMMON_CUH
#define DEV_COMMON_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.cuh"  // common/: cudaCheck, cublasCheck
#include "cuda_util.cuh"   // common/: to_float, from_float, Packed128, block_sum_f64
#include "flce.h"
#include "gemm_lt.cuh"     // common/

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

#endif // DEV_COMMON_CUH
