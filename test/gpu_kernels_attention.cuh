/*
gpu_kernels_attention.cuh - GPU test of llmc/attention.cuh (flash-style causal attention,
forward and backward) against a CPU reference computed here in double precision from the
same bf16 inputs. Include after test/test_util.h and llmc/cuda_common.cuh, then call
test_attention() (needs a CUDA GPU).

What is checked:
  - out and each of dq, dk, dv against the reference, rel L2 <= 1e-2 (bf16 P and dS, bf16
    outputs), for (B,T,C,NH) = (2,64,128,2), (3,37,64,1) (T below one tile), (1,256,768,12),
    and head sizes 16 (the debug model's), 32 and 128 with T not a multiple of 64;
  - coverage: out, dqkv, the saved lse and the scratch are filled with 0xFF bytes (NaN)
    before every call; an unwritten element of out / dqkv is non-finite, and an unwritten
    lse / Dvec row turns its gradients into NaN;
  - determinism: forward and backward twice, bitwise the same out, lse and dqkv;
  - a forward without saved state (saved = NULL) gives the same out;
  - 64-bit indexing: the index helpers and the grid at sizes past 2^31 / 2^32 (host math),
    and one real run with B*T*3C > 2^31 (B = 1024, T = 1024, C = 768: about 13 GB of GPU
    memory, skipped when it cannot be allocated), checked on three sampled heads, including
    the last one, plus a full non-finite scan of out and dqkv on the GPU; its forward and
    backward times are printed (an "info" line, not a check).
*/
#ifndef GPU_KERNELS_ATTENTION_CUH
#define GPU_KERNELS_ATTENTION_CUH

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../llmc/attention.cuh"
#include "../llmc/cuda_common.cuh"
#include "test_util.h"

#define GKA_TOL 1e-2

// the large-index run; override to shrink (the defaults need about 13 GB of GPU memory)
#ifndef GKA_LARGE_B
#define GKA_LARGE_B 1024
#define GKA_LARGE_T 1024
#define GKA_LARGE_C 768
#define GKA_LARGE_NH 12
#endif

// --- helpers (gka_: gpu kernels attention) -------------------------------------------------

static inline void *gka_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "gpu_kernels_attention: out of host memory (%zu bytes)\n", bytes);
        exit(EXIT_FAILURE);
    }
    return p;
}

// One head (b, h) of the reference, in double: q, k, v, dout are (T, hs) row-major slices;
// out, dq, dk, dv (T, hs) are written. The math of test/gpt2_ref.c's attention forward and
// backward: causal softmax of q.k / sqrt(hs), out = P v, then back through both.
static void gka_ref_head(const float *q, const float *k, const float *v, const float *dout, int T, int hs,
                         double *out, double *dq, double *dk, double *dv) {
    const double scale = 1.0 / sqrt((double)hs);
    double *p = (double *)gka_xmalloc((size_t)T * sizeof(double));
    double *dp = (double *)gka_xmalloc((size_t)T * sizeof(double));
    memset(dq, 0, (size_t)T * hs * sizeof(double));
    memset(dk, 0, (size_t)T * hs * sizeof(double));
    memset(dv, 0, (size_t)T * hs * sizeof(double));
    for (int t = 0; t < T; t++) {
        const float *qt = q + (size_t)t * hs, *dot = dout + (size_t)t * hs;
        double mx = -INFINITY;
        for (int j = 0; j <= t; j++) {
            double s = 0.0;
            for (int i = 0; i < hs; i++) s += (double)qt[i] * k[(size_t)j * hs + i];
            p[j] = s * scale;
            mx = p[j] > mx ? p[j] : mx;
        }
        double sum = 0.0;
        for (int j = 0; j <= t; j++) {
            p[j] = exp(p[j] - mx);
            sum += p[j];
        }
        for (int j = 0; j <= t; j++) p[j] /= sum;
        for (int i = 0; i < hs; i++) {
            double s = 0.0;
            for (int j = 0; j <= t; j++) s += p[j] * v[(size_t)j * hs + i];
            out[(size_t)t * hs + i] = s;
        }
        double D = 0.0;
        for (int j = 0; j <= t; j++) {
            double s = 0.0;
            for (int i = 0; i < hs; i++) {
                s += (double)dot[i] * v[(size_t)j * hs + i];
                dv[(size_t)j * hs + i] += p[j] * dot[i];
            }
            dp[j] = s;
            D += p[j] * s;
        }
        for (int j = 0; j <= t; j++) {
            const double ds = p[j] * (dp[j] - D) * scale;
            for (int i = 0; i < hs; i++) {
                dq[(size_t)t * hs + i] += ds * k[(size_t)j * hs + i];
                dk[(size_t)j * hs + i] += ds * qt[i];
            }
        }
    }
    free(p);
    free(dp);
}

// rel L2 of n rows of width w: got (float) against ref (double), both row-major with
// strides gs and rs. Non-finite got gives INFINITY.
static double gka_rel_l2_rows(const float *got, size_t gs, const double *ref, size_t rs, size_t n, int w) {
    double num = 0.0, den = 0.0;
    for (size_t r = 0; r < n; r++)
        for (int i = 0; i < w; i++) {
            const float g = got[r * gs + i];
            if (!isfinite(g)) return INFINITY;
            const double d = (double)g - ref[r * rs + i];
            num += d * d;
            den += ref[r * rs + i] * ref[r * rs + i];
        }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static inline void gka_bits_to_float(float *x, const uint16_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_bits_to_f32(b[i]);
}

// --- the small cases: everything against the reference -------------------------------------

static void gka_case(int B, int T, int C, int NH, uint64_t seed) {
    const int hs = C / NH;
    const size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
    const size_t saved_bytes = attention_saved_bytes(B, T, C, NH), scratch_bytes = attention_scratch_bytes(B, T, C, NH);
    uint64_t st = seed;
    float *qkv = (float *)gka_xmalloc(n_qkv * sizeof(float)), *dout = (float *)gka_xmalloc(n_out * sizeof(float));
    fill_uniform(qkv, n_qkv, 2.0f, &st);  // scores of std ~1.3 at hs = 64: a peaked softmax
    fill_uniform(dout, n_out, 1.0f, &st);
    uint16_t *qkv_b = (uint16_t *)gka_xmalloc(n_qkv * 2), *dout_b = (uint16_t *)gka_xmalloc(n_out * 2);
    for (size_t i = 0; i < n_qkv; i++) qkv_b[i] = f32_to_bf16_bits(qkv[i]);
    for (size_t i = 0; i < n_out; i++) dout_b[i] = f32_to_bf16_bits(dout[i]);
    gka_bits_to_float(qkv, qkv_b, n_qkv);  // the reference sees the bf16 values
    gka_bits_to_float(dout, dout_b, n_out);

    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    floatX *d_qkv, *d_dout, *d_out, *d_dqkv;
    void *d_saved, *d_scratch;
    cudaCheck(cudaMalloc(&d_qkv, n_qkv * 2));
    cudaCheck(cudaMalloc(&d_dout, n_out * 2));
    cudaCheck(cudaMalloc(&d_out, n_out * 2));
    cudaCheck(cudaMalloc(&d_dqkv, n_qkv * 2));
    cudaCheck(cudaMalloc(&d_saved, saved_bytes));
    cudaCheck(cudaMalloc(&d_scratch, scratch_bytes));
    cudaCheck(cudaMemcpy(d_qkv, qkv_b, n_qkv * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_dout, dout_b, n_out * 2, cudaMemcpyHostToDevice));

    uint16_t *out_b[2], *dqkv_b[2];
    unsigned char *saved_h[2];
    for (int run = 0; run < 2; run++) {
        cudaCheck(cudaMemsetAsync(d_out, 0xFF, n_out * 2, s));
        cudaCheck(cudaMemsetAsync(d_dqkv, 0xFF, n_qkv * 2, s));
        cudaCheck(cudaMemsetAsync(d_saved, 0xFF, saved_bytes, s));
        cudaCheck(cudaMemsetAsync(d_scratch, 0xFF, scratch_bytes, s));
        attention_forward(d_out, d_saved, d_scratch, d_qkv, B, T, C, NH, s);
        attention_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_saved, B, T, C, NH, s);
        cudaCheck(cudaStreamSynchronize(s));
        out_b[run] = (uint16_t *)gka_xmalloc(n_out * 2);
        dqkv_b[run] = (uint16_t *)gka_xmalloc(n_qkv * 2);
        saved_h[run] = (unsigned char *)gka_xmalloc(saved_bytes);
        cudaCheck(cudaMemcpy(out_b[run], d_out, n_out * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(dqkv_b[run], d_dqkv, n_qkv * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(saved_h[run], d_saved, saved_bytes, cudaMemcpyDeviceToHost));
    }
    // a forward without saved state
    cudaCheck(cudaMemsetAsync(d_out, 0xFF, n_out * 2, s));
    attention_forward(d_out, NULL, NULL, d_qkv, B, T, C, NH, s);
    cudaCheck(cudaStreamSynchronize(s));
    uint16_t *out_nosave = (uint16_t *)gka_xmalloc(n_out * 2);
    cudaCheck(cudaMemcpy(out_nosave, d_out, n_out * 2, cudaMemcpyDeviceToHost));

    // the reference, head by head
    double *ref_out = (double *)gka_xmalloc(n_out * sizeof(double));
    double *ref_dqkv = (double *)gka_xmalloc(n_qkv * sizeof(double));
    const size_t th = (size_t)T * hs;
    float *sl = (float *)gka_xmalloc(4 * th * sizeof(float));  // q, k, v, dout slices
    double *rs = (double *)gka_xmalloc(4 * th * sizeof(double));  // out, dq, dk, dv
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++)
                for (int i = 0; i < hs; i++) {
                    for (int part = 0; part < 3; part++)
                        sl[part * th + (size_t)t * hs + i] = qkv[attn_qkv_index(b, t, T, C, part, h, hs, i)];
                    sl[3 * th + (size_t)t * hs + i] = dout[attn_out_index(b, t, T, C, h, hs, i)];
                }
            gka_ref_head(sl, sl + th, sl + 2 * th, sl + 3 * th, T, hs, rs, rs + th, rs + 2 * th, rs + 3 * th);
            for (int t = 0; t < T; t++)
                for (int i = 0; i < hs; i++) {
                    ref_out[attn_out_index(b, t, T, C, h, hs, i)] = rs[(size_t)t * hs + i];
                    for (int part = 0; part < 3; part++)
                        ref_dqkv[attn_qkv_index(b, t, T, C, part, h, hs, i)] = rs[(1 + part) * th + (size_t)t * hs + i];
                }
        }

    float *out_f = (float *)gka_xmalloc(n_out * sizeof(float)), *dqkv_f = (float *)gka_xmalloc(n_qkv * sizeof(float));
    gka_bits_to_float(out_f, out_b[0], n_out);
    gka_bits_to_float(dqkv_f, dqkv_b[0], n_qkv);
    const size_t rows = (size_t)B * T;
    const double e_out = gka_rel_l2_rows(out_f, C, ref_out, C, rows, C);
    double e_part[3];
    for (int part = 0; part < 3; part++)
        e_part[part] = gka_rel_l2_rows(dqkv_f + (size_t)part * C, 3 * (size_t)C, ref_dqkv + (size_t)part * C,
                                       3 * (size_t)C, rows, C);
    test_check(e_out <= GKA_TOL, "attention B=%d T=%d C=%d NH=%d (hs %d): out rel L2 %.2e (bound %.0e)", B, T, C,
               NH, hs, e_out, GKA_TOL);
    test_check(e_part[0] <= GKA_TOL && e_part[1] <= GKA_TOL && e_part[2] <= GKA_TOL,
               "attention B=%d T=%d C=%d NH=%d: dq %.2e, dk %.2e, dv %.2e rel L2 (bound %.0e)", B, T, C, NH,
               e_part[0], e_part[1], e_part[2], GKA_TOL);
    test_check(memcmp(out_b[0], out_b[1], n_out * 2) == 0 && memcmp(dqkv_b[0], dqkv_b[1], n_qkv * 2) == 0 &&
                   memcmp(saved_h[0], saved_h[1], saved_bytes) == 0,
               "attention B=%d T=%d C=%d NH=%d: twice, bitwise the same out, lse and dqkv", B, T, C, NH);
    test_check(memcmp(out_b[0], out_nosave, n_out * 2) == 0,
               "attention B=%d T=%d C=%d NH=%d: forward with saved = NULL gives the same out", B, T, C, NH);

    for (int run = 0; run < 2; run++) {
        free(out_b[run]);
        free(dqkv_b[run]);
        free(saved_h[run]);
    }
    free(out_nosave); free(out_f); free(dqkv_f); free(ref_out); free(ref_dqkv); free(sl); free(rs);
    free(qkv); free(dout); free(qkv_b); free(dout_b);
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dqkv));
    cudaCheck(cudaFree(d_saved)); cudaCheck(cudaFree(d_scratch));
    cudaCheck(cudaStreamDestroy(s));
}

// --- 64-bit indexing -------------------------------------------------------------------------

// index math at sizes far past 2^31 (host only: nothing is allocated)
static void gka_index_math(void) {
    int ok = 1;
    {   // B*T*3C = 2^31 * 2.34 elements; B*NH*T*T = 1.35e10
        const int B = 1024, T = 1024, C = 1600, NH = 25, hs = 64;
        const uint64_t bt = (uint64_t)B * T;
        ok &= attn_qkv_index(B - 1, T - 1, T, C, 2, NH - 1, hs, hs - 1) == bt * 3 * C - 1;
        ok &= attn_qkv_index(B - 1, T - 1, T, C, 0, 0, hs, 0) == (bt - 1) * 3 * C;
        ok &= attn_out_index(B - 1, T - 1, T, C, NH - 1, hs, hs - 1) == bt * C - 1;
        ok &= attn_out_index(700, 3, T, C, 5, hs, 7) == (700ull * T + 3) * C + 5 * 64 + 7;
        const dim3 g = attn_grid(B, T, NH);
        ok &= g.x == (unsigned)(B * NH) && g.y == 16 && g.z == 1;
    }
    {   // B*T = 2^31 * 1.5: b*T itself overflows int; B*NH*T*4 bytes > 2^32
        const int B = 1572864, T = 2048, C = 1024, NH = 1, hs = 1024;  // hs only enters the index math
        const uint64_t bt = (uint64_t)B * T;
        ok &= attn_out_index(B - 1, T - 1, T, C, 0, hs, C - 1) == bt * C - 1;
        ok &= attn_qkv_index(B - 1, T - 1, T, C, 1, 0, hs, 5) == (bt - 1) * 3 * C + C + 5;
        ok &= attn_row_index(B * NH - 1, T - 1, T) == (uint64_t)B * NH * T - 1;
        ok &= attention_saved_bytes(B, T, C, NH) >= (uint64_t)B * NH * T * 4 &&
              attention_saved_bytes(B, T, C, NH) < (uint64_t)B * NH * T * 4 + 256;
        ok &= attention_scratch_bytes(B, T, C, NH) >= (uint64_t)B * NH * T * 4;
        const dim3 g = attn_grid(B, T, NH);
        ok &= g.x == (unsigned)B && g.y == 32;
    }
    test_check(ok, "attention index math at B*T*3C > 2^32 and B*T > 2^31 (host): exact");
}

static __host__ __device__ inline uint64_t gka_mix(uint64_t x) {  // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

// element i of a hashed tensor: a multiple of 1/64 in [-2, 2), exact in bf16
static __host__ __device__ inline float gka_hash_value(uint64_t i, uint64_t seed) {
    return (float)((int)(gka_mix(i * 0x9e3779b97f4a7c15ull + seed) >> 56) - 128) * (1.0f / 64.0f);
}

static __global__ void gka_fill_kernel(floatX *x, size_t n, uint64_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16(gka_hash_value(i, seed));
}

static __global__ void gka_count_nonfinite_kernel(unsigned long long *count, const floatX *x, size_t n) {
    unsigned long long c = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        c += (__bfloat16_as_ushort(x[i]) & 0x7f80u) == 0x7f80u;
    if (c) atomicAdd(count, c);
}

static unsigned long long gka_count_nonfinite(const floatX *x, size_t n, cudaStream_t s) {
    unsigned long long *d_c, c = 0;
    cudaCheck(cudaMalloc(&d_c, sizeof(*d_c)));
    cudaCheck(cudaMemsetAsync(d_c, 0, sizeof(*d_c), s));
    gka_count_nonfinite_kernel<<<1024, 256, 0, s>>>(d_c, x, n);
    cudaLaunchCheck("gka_count_nonfinite_kernel");
    cudaCheck(cudaMemcpyAsync(&c, d_c, sizeof(c), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    cudaCheck(cudaFree(d_c));
    return c;
}

static void *gka_try_malloc(size_t bytes, int *ok) {
    void *p = NULL;
    if (*ok && cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the allocation error so later launch checks pass
        *ok = 0;
        p = NULL;
    }
    return p;
}

// A run with B*T*3C > 2^31 elements (qkv and dqkv indices past int), checked on sampled heads
// against the reference and for non-finite values everywhere.
static void gka_large(int B, int T, int C, int NH) {
    const int hs = C / NH;
    const size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
    const size_t saved_bytes = attention_saved_bytes(B, T, C, NH), scratch_bytes = attention_scratch_bytes(B, T, C, NH);
    int ok = 1;
    floatX *d_qkv = (floatX *)gka_try_malloc(n_qkv * 2, &ok), *d_dqkv = (floatX *)gka_try_malloc(n_qkv * 2, &ok);
    floatX *d_out = (floatX *)gka_try_malloc(n_out * 2, &ok), *d_dout = (floatX *)gka_try_malloc(n_out * 2, &ok);
    void *d_saved = gka_try_malloc(saved_bytes, &ok), *d_scratch = gka_try_malloc(scratch_bytes, &ok);
    if (!ok) {
        printf("  skip  attention B=%d T=%d C=%d NH=%d (%.1f GB): not enough GPU memory\n", B, T, C, NH,
               (double)(2 * n_qkv + 2 * n_out) * 2 / 1e9);
        void *ps[6] = {d_qkv, d_dqkv, d_out, d_dout, d_saved, d_scratch};
        for (int i = 0; i < 6; i++)
            if (ps[i]) cudaCheck(cudaFree(ps[i]));
        return;
    }
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    const uint64_t seed_qkv = 17, seed_dout = 91;
    gka_fill_kernel<<<4096, 256, 0, s>>>(d_qkv, n_qkv, seed_qkv);
    cudaLaunchCheck("gka_fill_kernel");
    gka_fill_kernel<<<4096, 256, 0, s>>>(d_dout, n_out, seed_dout);
    cudaLaunchCheck("gka_fill_kernel");
    cudaCheck(cudaMemsetAsync(d_out, 0xFF, n_out * 2, s));
    cudaCheck(cudaMemsetAsync(d_dqkv, 0xFF, n_qkv * 2, s));
    cudaCheck(cudaMemsetAsync(d_saved, 0xFF, saved_bytes, s));
    cudaCheck(cudaMemsetAsync(d_scratch, 0xFF, scratch_bytes, s));
    attention_forward(d_out, d_saved, d_scratch, d_qkv, B, T, C, NH, s);
    attention_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_saved, B, T, C, NH, s);
    cudaCheck(cudaStreamSynchronize(s));
    const unsigned long long bad = gka_count_nonfinite(d_out, n_out, s) + gka_count_nonfinite(d_dqkv, n_qkv, s);
    test_check(bad == 0, "attention B=%d T=%d C=%d NH=%d (B*T*3C = %.2e > 2^31): %llu non-finite in out and dqkv",
               B, T, C, NH, (double)n_qkv, bad);

    // sampled heads: the last one (largest indices), the first, one in the middle
    const int pick[3][2] = {{B - 1, NH - 1}, {0, 0}, {B / 2, NH / 2}};
    const size_t th = (size_t)T * hs;
    float *sl = (float *)gka_xmalloc(4 * th * sizeof(float));
    double *rs = (double *)gka_xmalloc(4 * th * sizeof(double));
    uint16_t *gb = (uint16_t *)gka_xmalloc(th * 2);
    float *gf = (float *)gka_xmalloc(4 * th * sizeof(float));  // out, dq, dk, dv from the GPU
    double worst = 0.0;
    for (int pi = 0; pi < 3; pi++) {
        const int b = pick[pi][0], h = pick[pi][1];
        for (int t = 0; t < T; t++)
            for (int i = 0; i < hs; i++) {
                for (int part = 0; part < 3; part++)
                    sl[part * th + (size_t)t * hs + i] = gka_hash_value(attn_qkv_index(b, t, T, C, part, h, hs, i), seed_qkv);
                sl[3 * th + (size_t)t * hs + i] = gka_hash_value(attn_out_index(b, t, T, C, h, hs, i), seed_dout);
            }
        gka_ref_head(sl, sl + th, sl + 2 * th, sl + 3 * th, T, hs, rs, rs + th, rs + 2 * th, rs + 3 * th);
        for (int part = 0; part < 4; part++) {
            const floatX *src = part == 0 ? d_out + attn_out_index(b, 0, T, C, h, hs, 0)
                                          : d_dqkv + attn_qkv_index(b, 0, T, C, part - 1, h, hs, 0);
            const size_t pitch = (part == 0 ? (size_t)C : 3 * (size_t)C) * 2;
            cudaCheck(cudaMemcpy2D(gb, (size_t)hs * 2, src, pitch, (size_t)hs * 2, T, cudaMemcpyDeviceToHost));
            gka_bits_to_float(gf + part * th, gb, th);
            const double e = gka_rel_l2_rows(gf + part * th, hs, rs + part * th, hs, T, hs);
            worst = e > worst ? e : worst;
        }
    }
    test_check(worst <= GKA_TOL,
               "attention B=%d T=%d C=%d NH=%d: heads (%d,%d), (0,0), (%d,%d): worst rel L2 of out/dq/dk/dv %.2e "
               "(bound %.0e)", B, T, C, NH, B - 1, NH - 1, B / 2, NH / 2, worst, GKA_TOL);
    free(sl); free(rs); free(gb); free(gf);
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dqkv)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_saved)); cudaCheck(cudaFree(d_scratch));
    cudaCheck(cudaStreamDestroy(s));
}

static void test_attention(void) {
    // hs = 64 runs the Hopper forward (llmc/attention_sm90.cuh) where the build and GPU have
    // it, so those cases run twice: with it and with attention.cuh's own forward
    attention_set_sm90(1);
    const int sm90 = attention_sm90_usable(NULL, 768, 12);
    for (int pass = sm90 ? 0 : 1; pass < 2; pass++) {
        attention_set_sm90(pass == 0);
        printf("attention (llmc/attention.cuh), forward on %s\n",
               pass == 0 ? "the Hopper kernel (attention_sm90.cuh) where hs = 64" : "mma.sync everywhere");
        gka_case(2, 64, 128, 2, 1);     // hs 64, one tile
        gka_case(3, 37, 64, 1, 2);      // T below one tile
        gka_case(1, 256, 768, 12, 3);   // GPT-2 small heads, four tiles
        gka_case(2, 200, 128, 2, 4);    // hs 64, a partial fourth tile
        gka_case(2, 1000, 768, 12, 8);  // hs 64: 192 work tiles of 128 rows, more than the SMs
        if (pass == 1) {
            gka_case(2, 50, 64, 4, 5);      // hs 16 (the debug model)
            gka_case(2, 130, 64, 2, 6);     // hs 32, three tiles, the last of two rows
            gka_case(2, 100, 256, 2, 7);    // hs 128 (dK/dV query tile of 32)
        }
        gka_large(GKA_LARGE_B, GKA_LARGE_T, GKA_LARGE_C, GKA_LARGE_NH);
    }
    attention_set_sm90(1);
    gka_index_math();
}

#endif // GPU_KERNELS_ATTENTION_CUH
