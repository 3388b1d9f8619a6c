/*
gpu_kernels_basic.cuh - GPU tests of the trainer's simple kernels (llmc/encoder.cuh,
layernorm.cuh, gelu.cuh, adamw.cuh, global_norm.cuh) against CPU references computed here in
double precision from the same bf16-rounded inputs. Include after test/test_util.h and
llmc/cuda_common.cuh, then call test_basic_kernels() (needs a CUDA GPU).

What is checked, per kernel:
  - values against the CPU reference (rel L2, per element where it is cheap: bf16 results
    within one bf16 ulp, elementwise adds bit-exact);
  - coverage: every `=` output (and every scratch buffer) is filled with 0xFF bytes (NaN)
    before the call, so an element left unwritten shows up as non-finite;
  - `+=` semantics: accumulators start from random values and the kernel runs twice; the
    increment of each call is compared with the reference (untouched rows stay bit-equal);
  - determinism: a rerun from the same state gives the same bits;
  - shapes: N not a multiple of the block size, C = 64 and C = 768, odd n and unaligned
    pointers for the elementwise kernels, grid-stride loops for AdamW.
AdamW is also compared with a CPU loop that performs the same fp32 operations in the same
order (each rounded once, as the kernel's __f*_rn intrinsics) and the same stochastic-rounding
hash, so master weights and bf16 params are expected to match bit for bit; the multi-tensor
launch is compared bitwise with one launch per tensor. The same with bf16 moments (the trainer's
-bm 1): m and v bit for bit the CPU's stochastic rounding with adamw_moment_hash's bits,
unbiased, uncorrelated with the parameters' rounding; the multi-tensor launch's m against the
CPU's for every tensor's seed, and its ZeRO-1 slices (state_offset, index0) bitwise the
unsliced. layernorm_backward_colsum is checked against the plain backward (bitwise) and a
double sum of its dinp, on the one-pass kernel (C up to 2048, every lane count) and the
two-kernel path (C = 2056).
*/
#ifndef GPU_KERNELS_BASIC_CUH
#define GPU_KERNELS_BASIC_CUH

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../llmc/adamw.cuh"
#include "../llmc/cuda_common.cuh"
#include "../llmc/encoder.cuh"
#include "../llmc/gelu.cuh"
#include "../llmc/global_norm.cuh"
#include "../llmc/layernorm.cuh"
#include "test_util.h"

// --- helpers (gkb_: gpu kernels basic) ---------------------------------------------------------

static cudaStream_t gkb_stream;

static inline void *gkb_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "gpu_kernels_basic: out of host memory (%zu bytes)\n", bytes);
        exit(EXIT_FAILURE);
    }
    return p;
}

static inline void *gkb_dmalloc(size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}

static inline void gkb_sync(void) { cudaCheck(cudaStreamSynchronize(gkb_stream)); }

static inline void gkb_poison(void *d, size_t bytes) {
    cudaCheck(cudaMemsetAsync(d, 0xFF, bytes, gkb_stream));
}

// n uniform values in [-scale, scale), rounded to bf16 values when bf16 != 0
static inline float *gkb_random(size_t n, float scale, int bf16, uint64_t *st) {
    float *x = (float *)gkb_xmalloc(n * sizeof(float));
    fill_uniform(x, n, scale, st);
    if (bf16)
        for (size_t i = 0; i < n; i++) x[i] = bf16_bits_to_f32(f32_to_bf16_bits(x[i]));
    return x;
}

static inline void gkb_put_bf16(floatX *d, const float *x, size_t n) {
    uint16_t *b = (uint16_t *)gkb_xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) b[i] = f32_to_bf16_bits(x[i]);
    cudaCheck(cudaMemcpyAsync(d, b, n * 2, cudaMemcpyHostToDevice, gkb_stream));
    gkb_sync();
    free(b);
}

static inline void gkb_get_bf16_bits(uint16_t *b, const floatX *d, size_t n) {
    gkb_sync();
    cudaCheck(cudaMemcpyAsync(b, d, n * 2, cudaMemcpyDeviceToHost, gkb_stream));
    gkb_sync();
}

static inline void gkb_get_bf16(float *x, const floatX *d, size_t n) {
    uint16_t *b = (uint16_t *)gkb_xmalloc(n * 2);
    gkb_get_bf16_bits(b, d, n);
    for (size_t i = 0; i < n; i++) x[i] = bf16_bits_to_f32(b[i]);
    free(b);
}

static inline void gkb_put_f32(float *d, const float *x, size_t n) {
    cudaCheck(cudaMemcpyAsync(d, x, n * 4, cudaMemcpyHostToDevice, gkb_stream));
    gkb_sync();
}

static inline void gkb_get_f32(float *x, const float *d, size_t n) {
    gkb_sync();
    cudaCheck(cudaMemcpyAsync(x, d, n * 4, cudaMemcpyDeviceToHost, gkb_stream));
    gkb_sync();
}

static inline size_t gkb_nonfinite(const float *x, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += !isfinite(x[i]);
    return c;
}

// ||(after - before) - ref|| / ||ref||, in double; INFINITY when after has a non-finite value
static inline double gkb_rel_delta(const float *after, const float *before, const double *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(after[i])) return INFINITY;
        const double d = ((double)after[i] - (double)before[i]) - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

// the spacing of bf16 values around |r| (2^(e-8) for |r| in [2^(e-1), 2^e))
static inline double gkb_bf16_spacing(double r) {
    int e = 0;
    frexp(fabs(r), &e);
    return r == 0.0 ? ldexp(1.0, -133) : ldexp(1.0, e - 8);
}

// elements of the bf16 result x farther than one bf16 spacing (plus atol) from ref
static inline size_t gkb_ulp_violations(const float *x, const double *ref, size_t n, double atol) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || fabs((double)x[i] - ref[i]) > gkb_bf16_spacing(ref[i]) + atol) c++;
    return c;
}

static inline int gkb_same_bytes(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

// --- encoder --------------------------------------------------------------------------------

// edges: 0 random tokens with one long bucket; 1 buckets at the segment edges as well (tokens 1,
// 2, 3 at exactly ENCODER_SEGMENT, + 1 and 2x positions: one segment, two, two full ones)
static void gkb_test_encoder(int B, int T, int C, uint64_t *st, int edges = 0) {
    const int V = 200, maxT = T + 3, BT = B * T;
    const size_t nout = (size_t)BT * C;
    int *inp = (int *)gkb_xmalloc((size_t)BT * sizeof(int));
    for (int i = 0; i < BT; i++) {
        *st = *st * 6364136223846793005ULL + 1442695040888963407ULL;
        inp[i] = (int)((*st >> 33) % (uint64_t)V);
        if (edges) inp[i] = 4 + inp[i] % (V - 4);
        else if (i % 3 == 0) inp[i] = 7;  // one long bucket (B*T/3 positions), not a multiple of 4
    }
    if (edges) {
        require(BT >= 2 * (4 * ENCODER_SEGMENT + 1), "gkb_test_encoder: B*T too small for the edge buckets");
        for (int i = 0; i < 4 * ENCODER_SEGMENT + 1; i++)  // every other position
            inp[2 * i] = i < ENCODER_SEGMENT ? 1 : i < 2 * ENCODER_SEGMENT + 1 ? 2 : 3;
    }
    float *wte = gkb_random((size_t)V * C, 1.0f, 1, st), *wpe = gkb_random((size_t)maxT * C, 1.0f, 1, st);
    float *dout = gkb_random(nout, 1.0f, 1, st);
    float *dwte0 = gkb_random((size_t)V * C, 0.1f, 0, st), *dwpe0 = gkb_random((size_t)maxT * C, 0.1f, 0, st);

    int *d_inp = (int *)gkb_dmalloc((size_t)BT * sizeof(int));
    floatX *d_wte = (floatX *)gkb_dmalloc((size_t)V * C * 2), *d_wpe = (floatX *)gkb_dmalloc((size_t)maxT * C * 2);
    floatX *d_out = (floatX *)gkb_dmalloc(nout * 2), *d_dout = (floatX *)gkb_dmalloc(nout * 2);
    float *d_dwte = (float *)gkb_dmalloc((size_t)V * C * 4), *d_dwpe = (float *)gkb_dmalloc((size_t)maxT * C * 4);
    cudaCheck(cudaMemcpyAsync(d_inp, inp, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, gkb_stream));
    gkb_put_bf16(d_wte, wte, (size_t)V * C);
    gkb_put_bf16(d_wpe, wpe, (size_t)maxT * C);
    gkb_put_bf16(d_dout, dout, nout);

    // forward: bf16(wte + wpe) with the sum in fp32 is exactly what the CPU computes here
    gkb_poison(d_out, nout * 2);
    encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C, gkb_stream);
    uint16_t *out_bits = (uint16_t *)gkb_xmalloc(nout * 2);
    gkb_get_bf16_bits(out_bits, d_out, nout);
    size_t bad = 0;
    for (int bt = 0; bt < BT; bt++)
        for (int c = 0; c < C; c++) {
            const float r = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)(bt % T) * C + c];
            bad += out_bits[(size_t)bt * C + c] != f32_to_bf16_bits(r);
        }
    test_check(bad == 0, "encoder_forward B=%d T=%d C=%d: bit-exact, all written (%zu of %zu differ)", B, T, C, bad, nout);

    // backward references in double
    double *ref_wte = (double *)calloc((size_t)V * C, sizeof(double));
    double *ref_wpe = (double *)calloc((size_t)maxT * C, sizeof(double));
    int *touched = (int *)calloc((size_t)V, sizeof(int));
    if (!ref_wte || !ref_wpe || !touched) exit(EXIT_FAILURE);
    for (int bt = 0; bt < BT; bt++) {
        touched[inp[bt]] = 1;
        for (int c = 0; c < C; c++) {
            ref_wte[(size_t)inp[bt] * C + c] += dout[(size_t)bt * C + c];
            ref_wpe[(size_t)(bt % T) * C + c] += dout[(size_t)bt * C + c];
        }
    }
    // the rows that no position touches: their increment must be exactly zero
    EncoderBuckets eb;
    encoder_buckets_init(&eb, B, T, C);
    gkb_put_f32(d_dwte, dwte0, (size_t)V * C);
    gkb_put_f32(d_dwpe, dwpe0, (size_t)maxT * C);
    encoder_buckets_build(&eb, inp, B, T, gkb_stream);
    encoder_backward(d_dwte, d_dwpe, d_dout, &eb, B, T, C, gkb_stream);
    float *dwte1 = (float *)gkb_xmalloc((size_t)V * C * 4), *dwpe1 = (float *)gkb_xmalloc((size_t)maxT * C * 4);
    float *dwte2 = (float *)gkb_xmalloc((size_t)V * C * 4), *dwpe2 = (float *)gkb_xmalloc((size_t)maxT * C * 4);
    float *dwte3 = (float *)gkb_xmalloc((size_t)V * C * 4), *dwpe3 = (float *)gkb_xmalloc((size_t)maxT * C * 4);
    gkb_get_f32(dwte1, d_dwte, (size_t)V * C);
    gkb_get_f32(dwpe1, d_dwpe, (size_t)maxT * C);
    // second call on the same buckets: accumulates again
    encoder_backward(d_dwte, d_dwpe, d_dout, &eb, B, T, C, gkb_stream);
    gkb_get_f32(dwte2, d_dwte, (size_t)V * C);
    gkb_get_f32(dwpe2, d_dwpe, (size_t)maxT * C);

    for (int call = 1; call <= 2; call++) {
        const float *after = call == 1 ? dwte1 : dwte2, *before = call == 1 ? dwte0 : dwte1;
        const float *after_p = call == 1 ? dwpe1 : dwpe2, *before_p = call == 1 ? dwpe0 : dwpe1;
        size_t untouched_changed = 0;
        for (int v = 0; v < V; v++)
            if (!touched[v])
                untouched_changed += !gkb_same_bytes(after + (size_t)v * C, before + (size_t)v * C, (size_t)C * 4);
        const double e_wte = gkb_rel_delta(after, before, ref_wte, (size_t)V * C);
        test_check(e_wte <= 1e-5 && untouched_changed == 0,
                   "encoder_backward dwte += (call %d) B=%d T=%d C=%d: rel L2 of the increment %.2e (tol 1e-5), "
                   "%zu untouched rows changed", call, B, T, C, e_wte, untouched_changed);
        const double e_wpe = gkb_rel_delta(after_p, before_p, ref_wpe, (size_t)T * C);
        const int beyond_T_same = gkb_same_bytes(after_p + (size_t)T * C, before_p + (size_t)T * C,
                                                 (size_t)(maxT - T) * C * 4);
        test_check(e_wpe <= 1e-5 && beyond_T_same,
                   "encoder_backward dwpe += (call %d) B=%d T=%d C=%d: rel L2 of the increment %.2e (tol 1e-5), "
                   "rows t >= T untouched: %s", call, B, T, C, e_wpe, beyond_T_same ? "yes" : "NO");
    }

    // no position embedding (Llama's): the forward copies wte's rows bit for bit, the
    // backward's dwte is bitwise the one with wpe (the same kernels), and no dwpe is touched
    gkb_poison(d_out, nout * 2);
    encoder_forward(d_out, d_inp, d_wte, NULL, B, T, C, gkb_stream);
    gkb_get_bf16_bits(out_bits, d_out, nout);
    bad = 0;
    for (int bt = 0; bt < BT; bt++)
        for (int c = 0; c < C; c++) bad += out_bits[(size_t)bt * C + c] != f32_to_bf16_bits(wte[(size_t)inp[bt] * C + c]);
    gkb_put_f32(d_dwte, dwte0, (size_t)V * C);
    gkb_put_f32(d_dwpe, dwpe0, (size_t)maxT * C);
    encoder_buckets_build(&eb, inp, B, T, gkb_stream);
    encoder_backward(d_dwte, NULL, d_dout, &eb, B, T, C, gkb_stream);
    gkb_get_f32(dwte3, d_dwte, (size_t)V * C);
    gkb_get_f32(dwpe3, d_dwpe, (size_t)maxT * C);
    test_check(bad == 0 && gkb_same_bytes(dwte1, dwte3, (size_t)V * C * 4) &&
               gkb_same_bytes(dwpe0, dwpe3, (size_t)maxT * C * 4),
               "encoder without wpe B=%d T=%d C=%d: the forward wte's rows bit-exact (%zu differ), dwte bitwise the "
               "one with wpe, dwpe untouched", B, T, C, bad);

    // determinism: the same state and a rebuilt bucket set give the same bits
    gkb_put_f32(d_dwte, dwte0, (size_t)V * C);
    gkb_put_f32(d_dwpe, dwpe0, (size_t)maxT * C);
    encoder_buckets_build(&eb, inp, B, T, gkb_stream);
    encoder_backward(d_dwte, d_dwpe, d_dout, &eb, B, T, C, gkb_stream);
    gkb_get_f32(dwte3, d_dwte, (size_t)V * C);
    gkb_get_f32(dwpe3, d_dwpe, (size_t)maxT * C);
    test_check(gkb_same_bytes(dwte1, dwte3, (size_t)V * C * 4) && gkb_same_bytes(dwpe1, dwpe3, (size_t)maxT * C * 4),
               "encoder_backward B=%d T=%d C=%d: a rerun is bitwise identical", B, T, C);
    encoder_buckets_free(&eb);

    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_wte)); cudaCheck(cudaFree(d_wpe)); cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_dwte)); cudaCheck(cudaFree(d_dwpe));
    free(inp); free(wte); free(wpe); free(dout); free(dwte0); free(dwpe0); free(out_bits);
    free(ref_wte); free(ref_wpe); free(touched);
    free(dwte1); free(dwpe1); free(dwte2); free(dwpe2); free(dwte3); free(dwpe3);
}

// --- layernorm ------------------------------------------------------------------------------

static void gkb_test_layernorm(int N, int C, uint64_t *st) {
    const size_t n = (size_t)N * C;
    float *x = gkb_random(n, 1.0f, 0, st);
    for (int r = 0; r < N; r++)  // row offsets up to 3: the mean is not small next to the spread
        for (int c = 0; c < C; c++) x[(size_t)r * C + c] += (float)(r % 7) * 0.5f;
    for (size_t i = 0; i < n; i++) x[i] = bf16_bits_to_f32(f32_to_bf16_bits(x[i]));
    float *w = gkb_random((size_t)C, 1.0f, 1, st), *b = gkb_random((size_t)C, 1.0f, 1, st);
    for (int c = 0; c < C; c++) w[c] = bf16_bits_to_f32(f32_to_bf16_bits(w[c] + (w[c] >= 0 ? 0.5f : -0.5f)));
    float *dout = gkb_random(n, 1.0f, 1, st);
    float *dinp0 = gkb_random(n, 0.25f, 1, st);
    float *dw0 = gkb_random((size_t)C, 0.5f, 0, st), *db0 = gkb_random((size_t)C, 0.5f, 0, st);

    // CPU reference in double (as test/gpt2_ref.c)
    double *ref_out = (double *)gkb_xmalloc(n * sizeof(double)), *ref_dinp = (double *)gkb_xmalloc(n * sizeof(double));
    double *ref_mean = (double *)gkb_xmalloc((size_t)N * sizeof(double));
    double *ref_rstd = (double *)gkb_xmalloc((size_t)N * sizeof(double));
    double *ref_dw = (double *)calloc((size_t)C, sizeof(double)), *ref_db = (double *)calloc((size_t)C, sizeof(double));
    if (!ref_dw || !ref_db) exit(EXIT_FAILURE);
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * C;
        double mean = 0.0, var = 0.0;
        for (int c = 0; c < C; c++) mean += xr[c];
        mean /= C;
        for (int c = 0; c < C; c++) var += ((double)xr[c] - mean) * ((double)xr[c] - mean);
        var /= C;
        const double rstd = 1.0 / sqrt(var + 1e-5);
        ref_mean[r] = mean;
        ref_rstd[r] = rstd;
        const float *dr = dout + (size_t)r * C;
        double mdn = 0.0, mdnn = 0.0;
        for (int c = 0; c < C; c++) {
            const double nrm = ((double)xr[c] - mean) * rstd, dn = (double)dr[c] * w[c];
            ref_out[(size_t)r * C + c] = nrm * w[c] + b[c];
            mdn += dn;
            mdnn += dn * nrm;
            ref_dw[c] += (double)dr[c] * nrm;
            ref_db[c] += dr[c];
        }
        mdn /= C;
        mdnn /= C;
        for (int c = 0; c < C; c++) {
            const double nrm = ((double)xr[c] - mean) * rstd, dn = (double)dr[c] * w[c];
            ref_dinp[(size_t)r * C + c] = rstd * (dn - mdn - nrm * mdnn);
        }
    }

    floatX *d_x = (floatX *)gkb_dmalloc(n * 2), *d_out = (floatX *)gkb_dmalloc(n * 2), *d_out2 = (floatX *)gkb_dmalloc(n * 2);
    floatX *d_w = (floatX *)gkb_dmalloc((size_t)C * 2), *d_b = (floatX *)gkb_dmalloc((size_t)C * 2);
    floatX *d_dout = (floatX *)gkb_dmalloc(n * 2), *d_dinp = (floatX *)gkb_dmalloc(n * 2);
    float *d_mean = (float *)gkb_dmalloc((size_t)N * 4), *d_rstd = (float *)gkb_dmalloc((size_t)N * 4);
    float *d_dw = (float *)gkb_dmalloc((size_t)C * 4), *d_db = (float *)gkb_dmalloc((size_t)C * 4);
    const size_t scratch_floats = layernorm_backward_scratch_floats(N, C);
    float *d_scratch = (float *)gkb_dmalloc(scratch_floats * 4);
    gkb_put_bf16(d_x, x, n);
    gkb_put_bf16(d_w, w, (size_t)C);
    gkb_put_bf16(d_b, b, (size_t)C);
    gkb_put_bf16(d_dout, dout, n);

    // forward
    gkb_poison(d_out, n * 2);
    gkb_poison(d_mean, (size_t)N * 4);
    gkb_poison(d_rstd, (size_t)N * 4);
    layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C, gkb_stream);
    float *out = (float *)gkb_xmalloc(n * 4), *mean = (float *)gkb_xmalloc((size_t)N * 4);
    float *rstd = (float *)gkb_xmalloc((size_t)N * 4);
    gkb_get_bf16(out, d_out, n);
    gkb_get_f32(mean, d_mean, (size_t)N);
    gkb_get_f32(rstd, d_rstd, (size_t)N);
    const double e_out = rel_l2_f64(out, ref_out, n);
    const size_t ulp_out = gkb_ulp_violations(out, ref_out, n, 1e-3);
    test_check(e_out <= 5e-3 && ulp_out == 0 && gkb_nonfinite(out, n) == 0,
               "layernorm_forward N=%d C=%d: out rel L2 %.2e (tol 5e-3), %zu elements beyond 1 bf16 ulp + 1e-3",
               N, C, e_out, ulp_out);
    const double e_mean = rel_l2_f64(mean, ref_mean, (size_t)N), e_rstd = rel_l2_f64(rstd, ref_rstd, (size_t)N);
    test_check(e_mean <= 1e-5 && e_rstd <= 1e-5, "layernorm_forward N=%d C=%d: mean rel L2 %.2e, rstd rel L2 %.2e (tol 1e-5)",
               N, C, e_mean, e_rstd);
    // mean/rstd NULL: the same output
    gkb_poison(d_out2, n * 2);
    layernorm_forward(d_out2, NULL, NULL, d_x, d_w, d_b, N, C, gkb_stream);
    uint16_t *o1 = (uint16_t *)gkb_xmalloc(n * 2), *o2 = (uint16_t *)gkb_xmalloc(n * 2);
    gkb_get_bf16_bits(o1, d_out, n);
    gkb_get_bf16_bits(o2, d_out2, n);
    test_check(gkb_same_bytes(o1, o2, n * 2), "layernorm_forward N=%d C=%d: mean = rstd = NULL gives the same bits", N, C);

    // backward, twice (accumulation), with the forward's mean/rstd
    gkb_put_bf16(d_dinp, dinp0, n);
    gkb_put_f32(d_dw, dw0, (size_t)C);
    gkb_put_f32(d_db, db0, (size_t)C);
    float *dinp[3], *dw[3], *db[3];
    for (int k = 0; k < 3; k++) {
        dinp[k] = (float *)gkb_xmalloc(n * 4);
        dw[k] = (float *)gkb_xmalloc((size_t)C * 4);
        db[k] = (float *)gkb_xmalloc((size_t)C * 4);
    }
    for (int call = 0; call < 2; call++) {
        gkb_poison(d_scratch, scratch_floats * 4);
        layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_x, d_w, d_mean, d_rstd, N, C, gkb_stream);
        gkb_get_bf16(dinp[call], d_dinp, n);
        gkb_get_f32(dw[call], d_dw, (size_t)C);
        gkb_get_f32(db[call], d_db, (size_t)C);
    }
    for (int call = 0; call < 2; call++) {
        const float *bi = call == 0 ? dinp0 : dinp[0], *bw = call == 0 ? dw0 : dw[0], *bb = call == 0 ? db0 : db[0];
        const double e_dinp = gkb_rel_delta(dinp[call], bi, ref_dinp, n);
        const double e_dw = gkb_rel_delta(dw[call], bw, ref_dw, (size_t)C);
        const double e_db = gkb_rel_delta(db[call], bb, ref_db, (size_t)C);
        test_check(e_dinp <= 1e-2, "layernorm_backward dinp += (call %d) N=%d C=%d: rel L2 of the increment %.2e (tol 1e-2)",
                   call + 1, N, C, e_dinp);
        test_check(e_dw <= 1e-5 && e_db <= 1e-5,
                   "layernorm_backward dweight/dbias += (call %d) N=%d C=%d: rel L2 of the increments %.2e / %.2e (tol 1e-5)",
                   call + 1, N, C, e_dw, e_db);
    }
    // determinism: from the same state again
    gkb_put_bf16(d_dinp, dinp0, n);
    gkb_put_f32(d_dw, dw0, (size_t)C);
    gkb_put_f32(d_db, db0, (size_t)C);
    gkb_poison(d_scratch, scratch_floats * 4);
    layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_x, d_w, d_mean, d_rstd, N, C, gkb_stream);
    gkb_get_bf16(dinp[2], d_dinp, n);
    gkb_get_f32(dw[2], d_dw, (size_t)C);
    gkb_get_f32(db[2], d_db, (size_t)C);
    test_check(gkb_same_bytes(dinp[0], dinp[2], n * 4) && gkb_same_bytes(dw[0], dw[2], (size_t)C * 4) &&
                   gkb_same_bytes(db[0], db[2], (size_t)C * 4),
               "layernorm_backward N=%d C=%d: a rerun is bitwise identical (%d row chunks)", N, C,
               layernorm_backward_num_chunks(N));

    // with the column sums of dinp: dinp, dweight, dbias bitwise as without; dinp_colsum +=
    // the column sums of the new dinp (as stored, bf16), against a double sum of it
    float *cs0 = gkb_random((size_t)C, 0.5f, 0, st), *cs = (float *)gkb_xmalloc((size_t)C * 4);
    float *d_cs = (float *)gkb_dmalloc((size_t)C * 4);
    double *ref_cs = (double *)calloc((size_t)C, sizeof(double));
    if (!ref_cs) exit(EXIT_FAILURE);
    gkb_put_bf16(d_dinp, dinp0, n);
    gkb_put_f32(d_dw, dw0, (size_t)C);
    gkb_put_f32(d_db, db0, (size_t)C);
    gkb_put_f32(d_cs, cs0, (size_t)C);
    gkb_poison(d_scratch, scratch_floats * 4);
    layernorm_backward_colsum(d_dinp, d_dw, d_db, d_cs, d_scratch, d_dout, d_x, d_w, d_mean, d_rstd, N, C, gkb_stream);
    gkb_get_bf16(dinp[2], d_dinp, n);
    gkb_get_f32(dw[2], d_dw, (size_t)C);
    gkb_get_f32(db[2], d_db, (size_t)C);
    gkb_get_f32(cs, d_cs, (size_t)C);
    for (size_t i = 0; i < n; i++) ref_cs[i % (size_t)C] += dinp[2][i];
    const double e_cs = gkb_rel_delta(cs, cs0, ref_cs, (size_t)C);
    test_check(gkb_same_bytes(dinp[0], dinp[2], n * 4) && gkb_same_bytes(dw[0], dw[2], (size_t)C * 4) &&
                   gkb_same_bytes(db[0], db[2], (size_t)C * 4) && e_cs <= 1e-5,
               "layernorm_backward_colsum N=%d C=%d (%s): dinp, dweight, dbias bitwise as without column sums; "
               "dinp_colsum += rel L2 of the increment %.2e (tol 1e-5)", N, C,
               C <= 256 * LN_BWD_MAX_VPL ? "one pass" : "two kernels", e_cs);
    layernorm_backward_colsum(d_dinp, d_dw, d_db, d_cs, d_scratch, d_dout, d_x, d_w, d_mean, d_rstd, N, C, gkb_stream);
    float *cs2 = (float *)gkb_xmalloc((size_t)C * 4);
    gkb_get_f32(cs2, d_cs, (size_t)C);
    gkb_get_bf16(dinp[1], d_dinp, n);
    for (int c = 0; c < C; c++) ref_cs[c] = 0.0;
    for (size_t i = 0; i < n; i++) ref_cs[i % (size_t)C] += dinp[1][i];
    const double e_cs2 = gkb_rel_delta(cs2, cs, ref_cs, (size_t)C);
    test_check(e_cs2 <= 1e-5, "layernorm_backward_colsum N=%d C=%d: a second call adds the new column sums, rel L2 %.2e",
               N, C, e_cs2);
    cudaCheck(cudaFree(d_cs));
    free(cs0); free(cs); free(cs2); free(ref_cs);

    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_out2)); cudaCheck(cudaFree(d_w));
    cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_dinp)); cudaCheck(cudaFree(d_mean));
    cudaCheck(cudaFree(d_rstd)); cudaCheck(cudaFree(d_dw)); cudaCheck(cudaFree(d_db)); cudaCheck(cudaFree(d_scratch));
    for (int k = 0; k < 3; k++) { free(dinp[k]); free(dw[k]); free(db[k]); }
    free(x); free(w); free(b); free(dout); free(dinp0); free(dw0); free(db0); free(out); free(mean); free(rstd);
    free(o1); free(o2); free(ref_out); free(ref_dinp); free(ref_mean); free(ref_rstd); free(ref_dw); free(ref_db);
}

// --- gelu and the elementwise adds ------------------------------------------------------------

static double gkb_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static double gkb_gelu_grad(double x) {
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

// n elements starting `offset` elements into the device buffers (offset 1: not 16-byte aligned)
static void gkb_test_elementwise(size_t n, size_t offset, uint64_t *st) {
    const char *path = (n % 8 == 0 && offset % 8 == 0) ? "vector" : "scalar";
    float *a = gkb_random(n, 4.0f, 1, st), *b = gkb_random(n, 1.0f, 1, st);
    floatX *da = (floatX *)gkb_dmalloc((n + offset) * 2), *db = (floatX *)gkb_dmalloc((n + offset) * 2);
    floatX *dout = (floatX *)gkb_dmalloc((n + offset) * 2);
    floatX *pa = da + offset, *pb = db + offset, *pout = dout + offset;
    gkb_put_bf16(pa, a, n);
    gkb_put_bf16(pb, b, n);
    float *res = (float *)gkb_xmalloc(n * 4);
    uint16_t *bits = (uint16_t *)gkb_xmalloc(n * 2);
    double *ref = (double *)gkb_xmalloc(n * sizeof(double));

    // gelu_forward
    gkb_poison(dout, (n + offset) * 2);
    gelu_forward(pout, pa, n, gkb_stream);
    gkb_get_bf16(res, pout, n);
    for (size_t i = 0; i < n; i++) ref[i] = gkb_gelu(a[i]);
    double e = rel_l2_f64(res, ref, n);
    size_t viol = gkb_ulp_violations(res, ref, n, 1e-6);
    test_check(e <= 5e-3 && viol == 0, "gelu_forward n=%zu offset=%zu (%s): rel L2 %.2e (tol 5e-3), %zu beyond 1 bf16 ulp",
               n, offset, path, e, viol);

    // gelu_backward_inplace: pb holds d, pa the gelu input
    gelu_backward_inplace(pb, pa, n, gkb_stream);
    gkb_get_bf16(res, pb, n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)b[i] * gkb_gelu_grad(a[i]);
    e = rel_l2_f64(res, ref, n);
    viol = gkb_ulp_violations(res, ref, n, 1e-6);
    test_check(e <= 5e-3 && viol == 0,
               "gelu_backward_inplace n=%zu offset=%zu (%s): rel L2 %.2e (tol 5e-3), %zu beyond 1 bf16 ulp", n, offset,
               path, e, viol);

    // residual_forward: bf16(a + b) with an fp32 sum, bit-exact
    gkb_put_bf16(pb, b, n);
    gkb_poison(dout, (n + offset) * 2);
    residual_forward(pout, pa, pb, n, gkb_stream);
    gkb_get_bf16_bits(bits, pout, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += bits[i] != f32_to_bf16_bits(a[i] + b[i]);
    test_check(bad == 0, "residual_forward n=%zu offset=%zu (%s): bit-exact, all written (%zu differ)", n, offset, path, bad);

    // add_inplace, twice: a + b, then (a + b) + b, each rounded once
    add_inplace(pa, pb, n, gkb_stream);
    gkb_get_bf16_bits(bits, pa, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += bits[i] != f32_to_bf16_bits(a[i] + b[i]);
    add_inplace(pa, pb, n, gkb_stream);
    uint16_t *bits2 = (uint16_t *)gkb_xmalloc(n * 2);
    gkb_get_bf16_bits(bits2, pa, n);
    for (size_t i = 0; i < n; i++) bad += bits2[i] != f32_to_bf16_bits(bf16_bits_to_f32(bits[i]) + b[i]);
    test_check(bad == 0, "add_inplace n=%zu offset=%zu (%s): two calls bit-exact (%zu differ)", n, offset, path, bad);

    cudaCheck(cudaFree(da)); cudaCheck(cudaFree(db)); cudaCheck(cudaFree(dout));
    free(a); free(b); free(res); free(bits); free(bits2); free(ref);
}

// --- AdamW ----------------------------------------------------------------------------------

// single fp32 operations rounded once to nearest: the double result of one operation on floats
// rounds to the same float as the exact result (53 >= 2*24 + 2), so these equal __f*_rn
static inline float gkb_fmul(float a, float b) { return (float)((double)a * (double)b); }
static inline float gkb_fadd(float a, float b) { return (float)((double)a + (double)b); }
static inline float gkb_fsub(float a, float b) { return (float)((double)a - (double)b); }
static inline float gkb_fdiv(float a, float b) { return (float)((double)a / (double)b); }
static inline float gkb_fsqrt(float a) { return (float)sqrt((double)a); }

// AdamW's moments on the device, fp32 or bf16 (-bm 1; the values given are bf16 values then),
// and back as fp32 (bf16 widened: bitwise comparisons of the floats compare the bf16 bits)
static inline void gkb_put_moments(float *d, const float *x, size_t n) { gkb_put_f32(d, x, n); }
static inline void gkb_put_moments(floatX *d, const float *x, size_t n) { gkb_put_bf16(d, x, n); }
static inline void gkb_get_moments(float *x, const float *d, size_t n) { gkb_get_f32(x, d, n); }
static inline void gkb_get_moments(float *x, const floatX *d, size_t n) { gkb_get_bf16(x, d, n); }

// the bf16 bits of x cut to its upper 16 (a stochastic rounding that went down in magnitude)
static inline uint16_t gkb_bf16_truncated(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

// one case: master or not, weight decay or not, a device-side scale or not; the moments of type
// TM: float, or floatX (bf16 moments, -bm 1: stored stochastically rounded)
template <typename TM = float>
static void gkb_test_adamw(size_t n, int use_master, float weight_decay, int use_dev_scale, uint64_t *st) {
    const float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, grad_scale = 0.7f, dev_scale = 0.5f;
    const int t = 5;
    const unsigned int seed = 12345u;
    const int bf16_moments = sizeof(TM) == 2;
    float *master0 = gkb_random(n, 1.0f, 0, st);
    float *p0 = (float *)gkb_xmalloc(n * 4);  // the bf16 params: master rounded to nearest
    for (size_t i = 0; i < n; i++) p0[i] = bf16_bits_to_f32(f32_to_bf16_bits(master0[i]));
    float *grads = gkb_random(n, 1.0f, 0, st), *m0 = gkb_random(n, 0.1f, bf16_moments, st);
    float *v0 = gkb_random(n, 0.01f, 0, st);
    for (size_t i = 0; i < n; i++) v0[i] = fabsf(v0[i]) + 1e-6f;
    if (bf16_moments)  // bf16 moments start from bf16 values
        for (size_t i = 0; i < n; i++) v0[i] = bf16_bits_to_f32(f32_to_bf16_bits(v0[i]));

    floatX *d_p = (floatX *)gkb_dmalloc(n * 2);
    float *d_master = (float *)gkb_dmalloc(n * 4), *d_g = (float *)gkb_dmalloc(n * 4);
    TM *d_m = (TM *)gkb_dmalloc(n * sizeof(TM)), *d_v = (TM *)gkb_dmalloc(n * sizeof(TM));
    float *d_scale = (float *)gkb_dmalloc(4);
    gkb_put_f32(d_g, grads, n);
    gkb_put_f32(d_scale, &dev_scale, 1);

    uint16_t *pbits[2];
    float *master[2], *m[2], *v[2];
    for (int run = 0; run < 2; run++) {  // run 1 repeats run 0 from the same state: determinism
        gkb_put_bf16(d_p, p0, n);
        gkb_put_f32(d_master, master0, n);
        gkb_put_moments(d_m, m0, n);
        gkb_put_moments(d_v, v0, n);
        adamw_update_scaled(d_p, use_master ? d_master : NULL, d_g, d_m, d_v, n, lr, beta1, beta2, t, eps,
                            weight_decay, grad_scale, use_dev_scale ? d_scale : NULL, seed, gkb_stream);
        pbits[run] = (uint16_t *)gkb_xmalloc(n * 2);
        master[run] = (float *)gkb_xmalloc(n * 4);
        m[run] = (float *)gkb_xmalloc(n * 4);
        v[run] = (float *)gkb_xmalloc(n * 4);
        gkb_get_bf16_bits(pbits[run], d_p, n);
        gkb_get_f32(master[run], d_master, n);
        gkb_get_moments(m[run], d_m, n);
        gkb_get_moments(v[run], d_v, n);
    }

    // the CPU loop with the kernel's operations, and a double-precision reference (gpt2_ref.c)
    const AdamWConsts k = adamw_consts(lr, beta1, beta2, t, eps, weight_decay);
    const float scale = use_dev_scale ? gkb_fmul(grad_scale, dev_scale) : grad_scale;
    const double s_d = (double)grad_scale * (use_dev_scale ? (double)dev_scale : 1.0);
    const double c1 = 1.0 - pow((double)beta1, t), c2 = 1.0 - pow((double)beta2, t);
    double *ref_p = (double *)gkb_xmalloc(n * sizeof(double)), *ref_m = (double *)gkb_xmalloc(n * sizeof(double));
    double *ref_v = (double *)gkb_xmalloc(n * sizeof(double));
    size_t master_bad = 0, mv_bad = 0, pbits_exact_bad = 0, p_ulp_bad = 0;
    double sr_err_ulps = 0.0;
    // bf16 moments: their rounding's mean error (spacings), and how often the parameter's and
    // m's roundings went up, alone and together (independent bits: together ~ the product)
    double m_err_ulps = 0.0, v_err_ulps = 0.0;
    size_t up_p = 0, up_m = 0, up_both = 0;
    for (size_t i = 0; i < n; i++) {
        const float g = gkb_fmul(grads[i], scale);
        const float mi = gkb_fadd(gkb_fmul(k.beta1, m0[i]), gkb_fmul(k.one_minus_beta1, g));
        const float vi = gkb_fadd(gkb_fmul(k.beta2, v0[i]), gkb_fmul(k.one_minus_beta2, gkb_fmul(g, g)));
        const float p = use_master ? master0[i] : p0[i];
        const float mhat = gkb_fdiv(mi, k.bias_correction1), vhat = gkb_fdiv(vi, k.bias_correction2);
        float step = gkb_fdiv(mhat, gkb_fadd(gkb_fsqrt(vhat), k.eps));
        if (k.weight_decay != 0.0f) step = gkb_fadd(step, gkb_fmul(k.weight_decay, p));
        const float pn = gkb_fsub(p, gkb_fmul(k.lr, step));
        const uint16_t want = use_master ? adamw_sr_bf16_bits(pn, adamw_sr_hash(seed, i)) : f32_to_bf16_bits(pn);
        // the double reference
        const double gd = s_d * grads[i];
        const double md = (double)beta1 * m0[i] + (1.0 - (double)beta1) * gd;
        const double vd = (double)beta2 * v0[i] + (1.0 - (double)beta2) * gd * gd;
        const double pd = p;
        ref_m[i] = md;
        ref_v[i] = vd;
        ref_p[i] = pd - (double)lr * ((md / c1) / (sqrt(vd / c2) + (double)eps) + (double)weight_decay * pd);

        if (use_master && fabs((double)master[0][i] - pn) > 1e-6 * fabs((double)pn)) master_bad++;
        if (bf16_moments) {  // the bits of the CPU's stochastic rounding of its fp32 m, v
            const uint32_t r = adamw_moment_hash(seed, i);
            const uint16_t want_m = adamw_sr_bf16_bits(mi, r), want_v = adamw_sr_bf16_bits(vi, r >> 16);
            mv_bad += f32_to_bf16_bits(m[0][i]) != want_m || f32_to_bf16_bits(v[0][i]) != want_v ||
                      bf16_bits_to_f32(want_m) != m[0][i] || bf16_bits_to_f32(want_v) != v[0][i];
            m_err_ulps += ((double)m[0][i] - (double)mi) / gkb_bf16_spacing(mi);
            v_err_ulps += ((double)v[0][i] - (double)vi) / gkb_bf16_spacing(vi);
            const int pu = pbits[0][i] != gkb_bf16_truncated(pn), mu = want_m != gkb_bf16_truncated(mi);
            up_p += pu;
            up_m += mu;
            up_both += pu && mu;
        } else if (fabs((double)m[0][i] - mi) > 1e-6 * fabs((double)mi) ||
                   fabs((double)v[0][i] - vi) > 1e-6 * fabs((double)vi)) {
            mv_bad++;
        }
        pbits_exact_bad += pbits[0][i] != want;
        // the bf16 param is within one bf16 spacing of the (CPU) new fp32 value
        const double pv = bf16_bits_to_f32(pbits[0][i]);
        const double sp = gkb_bf16_spacing(pn);
        if (!(fabs(pv - (double)pn) <= sp)) p_ulp_bad++;
        if (use_master) sr_err_ulps += (pv - (double)master[0][i]) / gkb_bf16_spacing(master[0][i]);
    }
    char label[160];
    snprintf(label, sizeof(label), "adamw_update%s master=%s wd=%g dev_scale=%s%s n=%zu",
             use_dev_scale ? "_scaled" : "", use_master ? "fp32" : "NULL", (double)weight_decay,
             use_dev_scale ? "yes" : "no", bf16_moments ? " moments=bf16" : "", n);
    if (use_master)
        test_check(master_bad == 0, "%s: fp32 master vs the CPU loop, %zu elements beyond rel 1e-6", label, master_bad);
    if (bf16_moments) {
        test_check(mv_bad == 0, "%s: bf16 m, v bit-equal to the CPU loop's stochastic rounding of its fp32 m, v "
                   "(adamw_moment_hash's bits; %zu differ)", label, mv_bad);
        test_check(fabs(m_err_ulps / (double)n) < 0.01 && fabs(v_err_ulps / (double)n) < 0.01,
                   "%s: the moments' stochastic rounding unbiased: mean (bf16 - fp32) = %.4f ulp (m), %.4f ulp (v)",
                   label, m_err_ulps / (double)n, v_err_ulps / (double)n);
        if (use_master) {
            const double pp = (double)up_p / n, pm = (double)up_m / n, pb = (double)up_both / n;
            test_check(fabs(pb - pp * pm) < 0.01 && pp > 0.2 && pm > 0.2,
                       "%s: m's rounding independent of the parameter's: both up %.4f, product of each %.4f x %.4f = "
                       "%.4f", label, pb, pp, pm, pp * pm);
        }
    } else {
        test_check(mv_bad == 0, "%s: m, v vs the CPU loop, %zu elements beyond rel 1e-6", label, mv_bad);
    }
    test_check(p_ulp_bad == 0, "%s: bf16 params within 1 bf16 ulp of the CPU's new value (%zu beyond)", label, p_ulp_bad);
    test_check(pbits_exact_bad == 0, "%s: bf16 params bit-equal to the CPU loop's %s rounding (%zu differ)", label,
               use_master ? "stochastic" : "nearest", pbits_exact_bad);
    float *p_now = (float *)gkb_xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) p_now[i] = use_master ? master[0][i] : bf16_bits_to_f32(pbits[0][i]);
    const double e_p = rel_l2_f64(p_now, ref_p, n), e_m = rel_l2_f64(m[0], ref_m, n), e_v = rel_l2_f64(v[0], ref_v, n);
    const double tol_p = use_master ? 1e-6 : 5e-3, tol_mv = bf16_moments ? 5e-3 : 1e-6;
    test_check(e_p <= tol_p && e_m <= tol_mv && e_v <= tol_mv,
               "%s: vs the double formula of gpt2_ref.c: params rel L2 %.2e (tol %.0e), m %.2e, v %.2e (tol %.0e)",
               label, e_p, tol_p, e_m, e_v, tol_mv);
    if (use_master) {
        const double mean_err = sr_err_ulps / (double)n;
        test_check(fabs(mean_err) < 0.01, "%s: stochastic rounding unbiased: mean (bf16 - fp32) = %.4f ulp", label, mean_err);
    }
    test_check(gkb_same_bytes(pbits[0], pbits[1], n * 2) && gkb_same_bytes(master[0], master[1], n * 4) &&
                   gkb_same_bytes(m[0], m[1], n * 4) && gkb_same_bytes(v[0], v[1], n * 4),
               "%s: a rerun with the same seed is bitwise identical", label);
    if (use_master) {  // another seed: some roundings change, the fp32 state does not
        gkb_put_bf16(d_p, p0, n);
        gkb_put_f32(d_master, master0, n);
        gkb_put_moments(d_m, m0, n);
        gkb_put_moments(d_v, v0, n);
        adamw_update_scaled(d_p, d_master, d_g, d_m, d_v, n, lr, beta1, beta2, t, eps, weight_decay, grad_scale,
                            use_dev_scale ? d_scale : NULL, seed + 1, gkb_stream);
        uint16_t *pb2 = (uint16_t *)gkb_xmalloc(n * 2);
        float *ms2 = (float *)gkb_xmalloc(n * 4), *mm2 = (float *)gkb_xmalloc(n * 4);
        float *mv2 = (float *)gkb_xmalloc(n * 4);
        gkb_get_bf16_bits(pb2, d_p, n);
        gkb_get_f32(ms2, d_master, n);
        gkb_get_moments(mm2, d_m, n);
        gkb_get_moments(mv2, d_v, n);
        size_t differ = 0, differ_m = 0, differ_v = 0;
        for (size_t i = 0; i < n; i++) {
            differ += pb2[i] != pbits[0][i];
            differ_m += mm2[i] != m[0][i];
            differ_v += mv2[i] != v[0][i];
        }
        if (bf16_moments)
            test_check(differ > n / 100 && differ_m > n / 100 && differ_v > n / 100 &&
                       gkb_same_bytes(ms2, master[0], n * 4),
                       "%s: another seed changes %zu parameter, %zu m and %zu v roundings and no fp32 value", label,
                       differ, differ_m, differ_v);
        else
            test_check(differ > n / 100 && gkb_same_bytes(ms2, master[0], n * 4),
                       "%s: another seed changes %zu roundings and no fp32 value", label, differ);
        free(pb2);
        free(ms2);
        free(mm2);
        free(mv2);
    }

    cudaCheck(cudaFree(d_p)); cudaCheck(cudaFree(d_master)); cudaCheck(cudaFree(d_g)); cudaCheck(cudaFree(d_m));
    cudaCheck(cudaFree(d_v)); cudaCheck(cudaFree(d_scale));
    for (int run = 0; run < 2; run++) { free(pbits[run]); free(master[run]); free(m[run]); free(v[run]); }
    free(master0); free(p0); free(grads); free(m0); free(v0); free(ref_p); free(ref_m); free(ref_v); free(p_now);
}

// adamw_update_multi over a set of tensors of one flat buffer (sizes below and above a block's
// 2048 elements, odd, one empty) against one adamw_update_scaled per tensor: every buffer
// bitwise the same, every element of each tensor updated (fp32 moments: m and v of each
// changed; bf16 moments, TM floatX: m bitwise the CPU's stochastic rounding with the tensor's
// seed and the element's index in it).
template <typename TM = float>
static void gkb_test_adamw_multi(int use_master, int use_dev_scale, uint64_t *st) {
    const int bf16_moments = sizeof(TM) == 2;
    const size_t sizes[] = {50304 * 77 + 5, 768, 1, 0, 2047, 2048, 2049, 3 * 768 * 768 + 11, 4097, 100003};
    const int nt = (int)(sizeof(sizes) / sizeof(sizes[0]));
    AdamWTensor tens[sizeof(sizes) / sizeof(sizes[0])];
    size_t n = 0;
    for (int i = 0; i < nt; i++) {
        tens[i].offset = n;
        tens[i].numel = sizes[i];
        tens[i].weight_decay = i % 2 == 0 ? 0.1f : 0.0f;
        tens[i].seed = 7u * 1000003u + (unsigned int)i * 7919u + 42u;
        tens[i].state_offset = n;
        tens[i].index0 = 0;
        n += sizes[i];
    }
    const float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, grad_scale = 0.7f, dev_scale = 0.5f;
    const int t = 7;
    float *master0 = gkb_random(n, 1.0f, 0, st), *grads = gkb_random(n, 1.0f, 0, st);
    float *m0 = gkb_random(n, 0.1f, bf16_moments, st), *v0 = gkb_random(n, 0.01f, 0, st);
    for (size_t i = 0; i < n; i++) v0[i] = fabsf(v0[i]) + 1e-6f;
    if (bf16_moments)  // bf16 moments start from bf16 values
        for (size_t i = 0; i < n; i++) v0[i] = bf16_bits_to_f32(f32_to_bf16_bits(v0[i]));
    floatX *d_p = (floatX *)gkb_dmalloc(n * 2);
    float *d_master = (float *)gkb_dmalloc(n * 4), *d_g = (float *)gkb_dmalloc(n * 4);
    TM *d_m = (TM *)gkb_dmalloc(n * sizeof(TM)), *d_v = (TM *)gkb_dmalloc(n * sizeof(TM));
    float *d_scale = (float *)gkb_dmalloc(4);
    gkb_put_f32(d_g, grads, n);
    gkb_put_f32(d_scale, &dev_scale, 1);
    uint16_t *pbits[2];
    float *master[2], *m[2], *v[2];
    for (int run = 0; run < 2; run++) {  // run 0: per tensor; run 1: one launch
        gkb_put_bf16(d_p, master0, n);
        gkb_put_f32(d_master, master0, n);
        gkb_put_moments(d_m, m0, n);
        gkb_put_moments(d_v, v0, n);
        float *dm = use_master ? d_master : NULL;
        const float *ds = use_dev_scale ? d_scale : NULL;
        if (run == 0) {
            for (int i = 0; i < nt; i++) {
                const size_t o = tens[i].offset;
                adamw_update_scaled(d_p + o, dm != NULL ? dm + o : NULL, d_g + o, d_m + o, d_v + o, tens[i].numel, lr,
                                    beta1, beta2, t, eps, tens[i].weight_decay, grad_scale, ds, tens[i].seed,
                                    gkb_stream);
            }
        } else {
            adamw_update_multi(d_p, dm, d_g, d_m, d_v, tens, nt, lr, beta1, beta2, t, eps, grad_scale, ds, gkb_stream);
        }
        pbits[run] = (uint16_t *)gkb_xmalloc(n * 2);
        master[run] = (float *)gkb_xmalloc(n * 4);
        m[run] = (float *)gkb_xmalloc(n * 4);
        v[run] = (float *)gkb_xmalloc(n * 4);
        gkb_get_bf16_bits(pbits[run], d_p, n);
        gkb_get_f32(master[run], d_master, n);
        gkb_get_moments(m[run], d_m, n);
        gkb_get_moments(v[run], d_v, n);
    }
    // elements not updated. fp32 moments: m and v both left as they were. bf16 moments (a
    // rounding may leave one as it was): m not the CPU's new m, its fp32 value rounded with the
    // tensor's seed at the element's index within the tensor
    size_t unchanged = 0;
    if (bf16_moments) {
        const AdamWConsts k = adamw_consts(lr, beta1, beta2, t, eps, 0.0f);
        const float scale = use_dev_scale ? gkb_fmul(grad_scale, dev_scale) : grad_scale;
        for (int ti = 0; ti < nt; ti++)
            for (size_t e = 0; e < tens[ti].numel; e++) {
                const size_t i = tens[ti].offset + e;
                const float g = gkb_fmul(grads[i], scale);
                const float mi = gkb_fadd(gkb_fmul(k.beta1, m0[i]), gkb_fmul(k.one_minus_beta1, g));
                unchanged += f32_to_bf16_bits(m[1][i]) != adamw_sr_bf16_bits(mi, adamw_moment_hash(tens[ti].seed, e));
            }
    } else {
        for (size_t i = 0; i < n; i++) unchanged += m[1][i] == m0[i] && v[1][i] == v0[i];
    }
    test_check(gkb_same_bytes(pbits[0], pbits[1], n * 2) && gkb_same_bytes(master[0], master[1], n * 4) &&
                   gkb_same_bytes(m[0], m[1], n * 4) && gkb_same_bytes(v[0], v[1], n * 4) && unchanged == 0,
               "adamw_update_multi master=%s dev_scale=%s moments=%s: %d tensors (%zu elements) in one launch bitwise "
               "as one adamw_update per tensor, every element updated (%zu not%s)", use_master ? "fp32" : "NULL",
               use_dev_scale ? "yes" : "no", bf16_moments ? "bf16" : "fp32", nt, n, unchanged,
               bf16_moments ? ": m not the CPU's rounding" : "");

    // ZeRO-1 (llmc/zero.h): the flat vector cut into 4 ranks' slices, boundaries inside two tensors;
    // each rank's launch covers its parts of the tensors with master, m, v of its slice alone.
    // Together they must give bitwise the one launch's params, and each slice of master, m, v.
    ParameterTensor pt[sizeof(sizes) / sizeof(sizes[0])];
    memset(pt, 0, sizeof(pt));
    for (int i = 0; i < nt; i++) {
        pt[i].offset = tens[i].offset;
        pt[i].numel = tens[i].numel;
    }
    const int nproc = 4;
    gkb_put_bf16(d_p, master0, n);
    int sliced_same = 1, entries = 0, nonempty = 0;
    for (int i = 0; i < nt; i++) nonempty += tens[i].numel > 0;
    for (int r = 0; r < nproc; r++) {
        ZeroLayout z;
        char err[256];
        require(zero_layout(&z, n, nproc, r, 1, err, sizeof(err)) == 0, err);
        ZeroRange rg[sizeof(sizes) / sizeof(sizes[0])];
        const int nr = zero_optimizer_ranges(&z, pt, nt, rg);
        entries += nr;
        AdamWTensor part[sizeof(sizes) / sizeof(sizes[0])];
        for (int k = 0; k < nr; k++) {
            part[k] = tens[rg[k].tensor];
            part[k].offset = rg[k].offset;
            part[k].numel = rg[k].numel;
            part[k].state_offset = rg[k].state_offset;
            part[k].index0 = rg[k].index0;
        }
        float *sm = (float *)gkb_dmalloc(z.count * 4);
        TM *smm = (TM *)gkb_dmalloc(z.count * sizeof(TM)), *sv = (TM *)gkb_dmalloc(z.count * sizeof(TM));
        gkb_put_f32(sm, master0 + z.lo, z.count);
        gkb_put_moments(smm, m0 + z.lo, z.count);
        gkb_put_moments(sv, v0 + z.lo, z.count);
        adamw_update_multi(d_p, use_master ? sm : NULL, d_g, smm, sv, part, nr, lr, beta1, beta2, t, eps, grad_scale,
                           use_dev_scale ? d_scale : NULL, gkb_stream);
        float *h = (float *)gkb_xmalloc(z.count * 4 + 4);
        gkb_get_moments(h, smm, z.count);
        sliced_same &= gkb_same_bytes(h, m[1] + z.lo, z.count * 4);
        gkb_get_moments(h, sv, z.count);
        sliced_same &= gkb_same_bytes(h, v[1] + z.lo, z.count * 4);
        if (use_master) {
            gkb_get_f32(h, sm, z.count);
            sliced_same &= gkb_same_bytes(h, master[1] + z.lo, z.count * 4);
        }
        free(h);
        cudaCheck(cudaFree(sm)); cudaCheck(cudaFree(smm)); cudaCheck(cudaFree(sv));
    }
    uint16_t *psliced = (uint16_t *)gkb_xmalloc(n * 2);
    gkb_get_bf16_bits(psliced, d_p, n);
    sliced_same &= gkb_same_bytes(psliced, pbits[1], n * 2);
    free(psliced);
    test_check(sliced_same && entries - nonempty == nproc - 1,
               "adamw_update_multi master=%s dev_scale=%s moments=%s, ZeRO-1 over %d ranks (%d slice boundaries inside "
               "tensors): bitwise the unsliced params, and each rank's master, m, v its slice of the unsliced ones",
               use_master ? "fp32" : "NULL", use_dev_scale ? "yes" : "no", bf16_moments ? "bf16" : "fp32", nproc,
               entries - nonempty);
    cudaCheck(cudaFree(d_p)); cudaCheck(cudaFree(d_master)); cudaCheck(cudaFree(d_g)); cudaCheck(cudaFree(d_m));
    cudaCheck(cudaFree(d_v)); cudaCheck(cudaFree(d_scale));
    for (int run = 0; run < 2; run++) { free(pbits[run]); free(master[run]); free(m[run]); free(v[run]); }
    free(master0); free(grads); free(m0); free(v0);
}

// --- global norm and the clipping factor ------------------------------------------------------

static void gkb_test_global_norm(uint64_t *st) {
    const size_t n1 = 1000003, n2 = 77;
    float *g1 = gkb_random(n1, 1.0f, 0, st), *g2 = gkb_random(n2, 3.0f, 0, st);
    double r1 = 0.0, r2 = 0.0;
    for (size_t i = 0; i < n1; i++) r1 += (double)g1[i] * g1[i];
    for (size_t i = 0; i < n2; i++) r2 += (double)g2[i] * g2[i];
    float *d_g1 = (float *)gkb_dmalloc(n1 * 4), *d_g2 = (float *)gkb_dmalloc(n2 * 4), *d_out = (float *)gkb_dmalloc(8);
    float *d_scratch = (float *)gkb_dmalloc(global_norm_scratch_floats() * 4);
    gkb_put_f32(d_g1, g1, n1);
    gkb_put_f32(d_g2, g2, n2);

    float out[4];
    for (int run = 0; run < 2; run++) {
        gkb_poison(d_out, 4);
        gkb_poison(d_scratch, global_norm_scratch_floats() * 4);
        global_norm_squared(d_out, d_g1, n1, d_scratch, 0, gkb_stream);
        gkb_get_f32(&out[2 * run], d_out, 1);
        gkb_poison(d_scratch, global_norm_scratch_floats() * 4);
        global_norm_squared(d_out, d_g2, n2, d_scratch, 1, gkb_stream);
        gkb_get_f32(&out[2 * run + 1], d_out, 1);
    }
    const double e1 = fabs(out[0] - r1) / r1, e2 = fabs(out[1] - (r1 + r2)) / (r1 + r2);
    test_check(e1 <= 1e-5, "global_norm_squared n=%zu accumulate=0: %.6e vs %.6e, rel %.2e (tol 1e-5)", n1, (double)out[0],
               r1, e1);
    test_check(e2 <= 1e-5, "global_norm_squared n=%zu accumulate=1: %.6e vs %.6e, rel %.2e (tol 1e-5)", n2, (double)out[1],
               r1 + r2, e2);
    test_check(memcmp(&out[0], &out[2], 2 * sizeof(float)) == 0, "global_norm_squared: a rerun is bitwise identical");
    float out0;
    global_norm_squared(d_out, d_g1, 0, d_scratch, 1, gkb_stream);  // n = 0 adds nothing
    gkb_get_f32(&out0, d_out, 1);
    test_check(out0 == out[3], "global_norm_squared n=0 accumulate=1 leaves the sum as it is");

    // clip_scale: squared norm 16 (norm 4)
    const float norm_sq = 16.0f;
    const float max_norms[4] = {1.0f, 10.0f, 0.0f, -1.0f}, want[4] = {0.25f, 1.0f, 1.0f, 1.0f};
    gkb_put_f32(d_out, &norm_sq, 1);
    for (int i = 0; i < 4; i++) {
        float sc;
        gkb_poison(d_out + 1, 4);
        clip_scale(d_out + 1, d_out, max_norms[i], gkb_stream);
        gkb_get_f32(&sc, d_out + 1, 1);
        test_check(fabs((double)sc - want[i]) <= 1e-6 * want[i], "clip_scale norm 4, max_norm %g: %.7f (want %g)",
                   (double)max_norms[i], (double)sc, (double)want[i]);
    }
    cudaCheck(cudaFree(d_g1)); cudaCheck(cudaFree(d_g2)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_scratch));
    free(g1); free(g2);
}

// --- all of it ------------------------------------------------------------------------------

static void test_basic_kernels(void) {
    printf("basic kernels (encoder, layernorm, gelu/residual, adamw, global norm)\n");
    cudaCheck(cudaStreamCreateWithFlags(&gkb_stream, cudaStreamNonBlocking));
    uint64_t st = 0x5eed0001ULL;

    gkb_test_encoder(3, 37, 64, &st);
    gkb_test_encoder(3, 37, 768, &st);
    gkb_test_encoder(8, 64, 64, &st);
    gkb_test_encoder(2, 150, 64, &st, 1);

    gkb_test_layernorm(299, 64, &st);    // 299 rows: 37 blocks of 8 rows and 3 more
    gkb_test_layernorm(299, 768, &st);
    gkb_test_layernorm(20000, 64, &st);  // 40-row chunks, 500 of them
    gkb_test_layernorm(4133, 768, &st);  // the trainer's C: 3 vectors a lane, 130 chunks, the last one short
    gkb_test_layernorm(77, 1600, &st);   // 7 vectors a lane, the last lanes with 6 (1600 = 6.25 * 256)
    gkb_test_layernorm(333, 1032, &st);  // 5 vectors a lane, most lanes with 4
    gkb_test_layernorm(45, 2056, &st);   // wider than 2048: the two-kernel path

    gkb_test_elementwise(8 * 4099, 0, &st);  // vector kernel
    gkb_test_elementwise(12345, 0, &st);     // odd n: scalar kernel
    gkb_test_elementwise(8 * 4098, 1, &st);  // unaligned pointers: scalar kernel

    gkb_test_adamw(1500007, 1, 0.1f, 0, &st);  // more elements than the grid: grid-stride loop
    gkb_test_adamw(100003, 1, 0.0f, 1, &st);
    gkb_test_adamw(100003, 0, 0.1f, 0, &st);
    gkb_test_adamw_multi(1, 0, &st);
    gkb_test_adamw_multi(1, 1, &st);
    gkb_test_adamw_multi(0, 0, &st);

    gkb_test_global_norm(&st);

    // bf16 moments (-bm 1), after the rest so that the other tests' inputs stay as they were
    gkb_test_adamw<floatX>(1500007, 1, 0.1f, 0, &st);
    gkb_test_adamw<floatX>(100003, 1, 0.0f, 1, &st);
    gkb_test_adamw<floatX>(100003, 0, 0.1f, 0, &st);
    gkb_test_adamw_multi<floatX>(1, 0, &st);
    gkb_test_adamw_multi<floatX>(0, 1, &st);

    cudaCheck(cudaStreamDestroy(gkb_stream));
    gkb_stream = NULL;
}

#endif // GPU_KERNELS_BASIC_CUH
