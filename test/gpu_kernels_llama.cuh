/*
gpu_kernels_llama.cuh - GPU tests of the Llama 3 / Qwen2.5 block kernels (llmc/rmsnorm.cuh,
rope.cuh, swiglu.cuh) against CPU references computed here in double precision from the same
bf16 inputs (and, for RoPE, the same fp32 tables of llmc/rope.h). Include after
test/test_util.h and llmc/cuda_common.cuh, then call test_llama_kernels() (needs a CUDA GPU).

What is checked, per kernel:
  - values: every bf16 result within one bf16 ulp (the spacing of bf16 values at the
    reference) of the double reference, plus an absolute allowance only where fp32 itself
    cannot do better (cancellation; stated per check, each far below a bf16 ulp); fp32
    results by rel L2 at fp32's floor. A non-finite value never passes;
  - RMSNorm's rounding order (transformers': the normalised row rounded to bf16 before the
    weight multiplies it): out bit-equal to the CPU's fp32 bf16(w * bf16(x * rstd)) from the
    kernel's own rstd (itself within 1e-5 of the double one), where a single rounding of
    w * x * rstd would differ in a sizeable fraction (printed); and, from double alone, out
    within 1.5 bf16 ulps (the two roundings' bound) of the exact w * x * rstd;
  - coverage: every `=` output and scratch is filled with 0xFF bytes (NaN) first, so an
    unwritten element fails; RoPE works in place, so it is also run on synthetic tables
    (cos 2, sin 0: every q/k element exactly doubled, v and row padding untouched; cos 0,
    sin 1: bitwise [-x2, x1] forward and [dy2, -dy1] backward, which pins the rotate-half
    pairing of channel j with j + hd/2 and the signs);
  - `+=` semantics (RMSNorm's dinp and dweight): accumulators start from random values and
    the backward runs twice; each call's increment is compared with the reference;
  - bitwise equalities: rmsnorm_forward with rstd = NULL; rmsnorm_forward_residual against
    bf16(a + b) and rmsnorm_forward on it, also in place; swiglu_backward in place (dgu = gu);
  - determinism: the backward from the same state again gives the same bits;
  - shapes: N = 1, 33, 45, 77, 299, 1000, 20000 (500 chunks), C = 8, 64, 896 (Qwen2.5-0.5B),
    1536, 2048 (the one-pass kernel at 1, 4, 6 and 8 vectors a lane), 3072 and 4104 (the
    two-kernel path); RoPE hd 64 and 128 with NH/NKV 32/8, 14/2, 12/2, odd T (up to 4099), fused QKV rows
    and separate padded buffers, and the one-pair-per-thread path (hd = 40; a row stride not a
    multiple of 8); SwiGLU I = 8, 4864, 8192, 8960, 14336.
*/
#ifndef GPU_KERNELS_LLAMA_CUH
#define GPU_KERNELS_LLAMA_CUH

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../llmc/cuda_common.cuh"
#include "../llmc/rmsnorm.cuh"
#include "../llmc/rope.cuh"
#include "../llmc/rope.h"
#include "../llmc/swiglu.cuh"
#include "test_util.h"

// --- helpers (gkl_: gpu kernels llama) ----------------------------------------------------------

static cudaStream_t gkl_stream;

static inline void *gkl_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "gpu_kernels_llama: out of host memory (%zu bytes)\n", bytes);
        exit(EXIT_FAILURE);
    }
    return p;
}

static inline void *gkl_dmalloc(size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}

static inline void gkl_sync(void) { cudaCheck(cudaStreamSynchronize(gkl_stream)); }

static inline void gkl_poison(void *d, size_t bytes) { cudaCheck(cudaMemsetAsync(d, 0xFF, bytes, gkl_stream)); }

static inline float gkl_bf16r(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }

// n uniform values in [-scale, scale), rounded to bf16 values when bf16 != 0
static inline float *gkl_random(size_t n, float scale, int bf16, uint64_t *st) {
    float *x = (float *)gkl_xmalloc(n * sizeof(float));
    fill_uniform(x, n, scale, st);
    if (bf16)
        for (size_t i = 0; i < n; i++) x[i] = gkl_bf16r(x[i]);
    return x;
}

static inline void gkl_put_bf16(floatX *d, const float *x, size_t n) {
    uint16_t *b = (uint16_t *)gkl_xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) b[i] = f32_to_bf16_bits(x[i]);
    cudaCheck(cudaMemcpyAsync(d, b, n * 2, cudaMemcpyHostToDevice, gkl_stream));
    gkl_sync();
    free(b);
}

static inline void gkl_get_bits(uint16_t *b, const floatX *d, size_t n) {
    gkl_sync();
    cudaCheck(cudaMemcpyAsync(b, d, n * 2, cudaMemcpyDeviceToHost, gkl_stream));
    gkl_sync();
}

static inline void gkl_get_bf16(float *x, const floatX *d, size_t n) {
    uint16_t *b = (uint16_t *)gkl_xmalloc(n * 2);
    gkl_get_bits(b, d, n);
    for (size_t i = 0; i < n; i++) x[i] = bf16_bits_to_f32(b[i]);
    free(b);
}

static inline void gkl_put_f32(float *d, const float *x, size_t n) {
    cudaCheck(cudaMemcpyAsync(d, x, n * 4, cudaMemcpyHostToDevice, gkl_stream));
    gkl_sync();
}

static inline void gkl_get_f32(float *x, const float *d, size_t n) {
    gkl_sync();
    cudaCheck(cudaMemcpyAsync(x, d, n * 4, cudaMemcpyDeviceToHost, gkl_stream));
    gkl_sync();
}

static inline int gkl_same(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

// the spacing of bf16 values around |r| (2^(e-8) for |r| in [2^(e-1), 2^e)): one bf16 ulp
static inline double gkl_spacing(double r) {
    int e = 0;
    frexp(fabs(r), &e);
    return r == 0.0 ? ldexp(1.0, -133) : ldexp(1.0, e - 8);
}

// whether the bf16 result x is within one bf16 ulp of ref plus atol (a non-finite x is not)
static inline int gkl_near(float x, double ref, double atol) {
    return isfinite(x) && fabs((double)x - ref) <= gkl_spacing(ref) + atol;
}

// ||(after - before) - ref|| / ||ref||, in double; INFINITY when after has a non-finite value
static inline double gkl_rel_delta(const float *after, const float *before, const double *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(after[i])) return INFINITY;
        const double d = ((double)after[i] - (double)before[i]) - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

// --- RMSNorm -----------------------------------------------------------------------------------

static void gkl_test_rmsnorm(int N, int C, float eps, uint64_t *st) {
    const size_t n = (size_t)N * C;
    // rows of rms from 0.03 to 1.7: rstd over two decades
    float *x = gkl_random(n, 1.0f, 0, st);
    for (int r = 0; r < N; r++) {
        const float scale = 0.05f + 2.95f * (float)((r * 37) % 101) / 100.0f;
        for (int c = 0; c < C; c++) x[(size_t)r * C + c] = gkl_bf16r(x[(size_t)r * C + c] * scale);
    }
    float *w = gkl_random((size_t)C, 1.0f, 0, st);  // |w| in [0.5, 1.5)
    for (int c = 0; c < C; c++) w[c] = gkl_bf16r(w[c] + (w[c] >= 0 ? 0.5f : -0.5f));
    float *dout = gkl_random(n, 1.0f, 1, st), *dinp0 = gkl_random(n, 0.25f, 1, st);
    float *dw0 = gkl_random((size_t)C, 0.5f, 0, st);

    // reference in double: rstd, the exact w * x * rstd, dinp's increment
    double *ref_rstd = (double *)gkl_xmalloc((size_t)N * sizeof(double));
    double *ref_out = (double *)gkl_xmalloc(n * sizeof(double));
    double *ref_inc = (double *)gkl_xmalloc(n * sizeof(double)), *atol_inc = (double *)gkl_xmalloc(n * sizeof(double));
    double *ref_dw = (double *)calloc((size_t)C, sizeof(double));
    if (ref_dw == NULL) exit(EXIT_FAILURE);
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * C, *dr = dout + (size_t)r * C;
        double ms = 0.0;
        for (int c = 0; c < C; c++) ms += (double)xr[c] * xr[c];
        const double rstd = 1.0 / sqrt(ms / C + (double)eps);
        ref_rstd[r] = rstd;
        double sum_gn = 0.0;
        for (int c = 0; c < C; c++) {
            ref_out[(size_t)r * C + c] = w[c] * (xr[c] * rstd);
            sum_gn += (double)dr[c] * w[c] * (xr[c] * rstd);
        }
        const double mgn = sum_gn / C;
        for (int c = 0; c < C; c++) {
            const double nd = xr[c] * rstd, g = (double)dr[c] * w[c];
            ref_inc[(size_t)r * C + c] = rstd * (g - nd * mgn);
            // fp32's own error on the two terms (rstd from an fp32 sum of squares: ~1e-6
            // relative), far below a bf16 ulp of the increment
            atol_inc[(size_t)r * C + c] = 3e-5 * rstd * (fabs(g) + fabs(nd * mgn));
        }
    }

    floatX *d_x = (floatX *)gkl_dmalloc(n * 2), *d_out = (floatX *)gkl_dmalloc(n * 2);
    floatX *d_out2 = (floatX *)gkl_dmalloc(n * 2), *d_w = (floatX *)gkl_dmalloc((size_t)C * 2);
    floatX *d_dout = (floatX *)gkl_dmalloc(n * 2), *d_dinp = (floatX *)gkl_dmalloc(n * 2);
    float *d_rstd = (float *)gkl_dmalloc((size_t)N * 4), *d_rstd2 = (float *)gkl_dmalloc((size_t)N * 4);
    float *d_dw = (float *)gkl_dmalloc((size_t)C * 4);
    const size_t scratch_floats = rmsnorm_backward_scratch_floats(N, C);
    float *d_scratch = (float *)gkl_dmalloc(scratch_floats * 4);
    gkl_put_bf16(d_x, x, n);
    gkl_put_bf16(d_w, w, (size_t)C);
    gkl_put_bf16(d_dout, dout, n);

    // forward
    gkl_poison(d_out, n * 2);
    gkl_poison(d_rstd, (size_t)N * 4);
    rmsnorm_forward(d_out, d_rstd, d_x, d_w, eps, N, C, gkl_stream);
    uint16_t *ob = (uint16_t *)gkl_xmalloc(n * 2), *ob2 = (uint16_t *)gkl_xmalloc(n * 2);
    float *rstd = (float *)gkl_xmalloc((size_t)N * 4), *rstd2 = (float *)gkl_xmalloc((size_t)N * 4);
    gkl_get_bits(ob, d_out, n);
    gkl_get_f32(rstd, d_rstd, (size_t)N);
    // (1) rstd against the double one; (2) out against the exact w * x * rstd: two bf16
    // roundings stay within 1.5 bf16 ulps of it (half an ulp of the result, plus |w| times half
    // an ulp of x * rstd, which is at most 2^-8 of w * x * rstd); (3) the rounding order, bit
    // for bit: the CPU's fp32 bf16(w * bf16(x * rstd)) from the kernel's own rstd (one fp32
    // product, then an exact one: nothing left to differ in but the order), and with it
    // dweight's reference, the column sums of dout * bf16(x * rstd) that the kernel adds
    double max_rel_rstd = 0.0;
    for (int r = 0; r < N; r++) {
        const double e = fabs((double)rstd[r] - ref_rstd[r]) / ref_rstd[r];
        if (!isfinite(rstd[r])) max_rel_rstd = INFINITY;
        else if (e > max_rel_rstd) max_rel_rstd = e;
    }
    test_check(max_rel_rstd <= 1e-5, "rmsnorm_forward N=%d C=%d eps=%g: rstd max rel error %.2e (tol 1e-5: an fp32 "
               "sum of %d squares)", N, C, (double)eps, max_rel_rstd, C);
    size_t far = 0, differ = 0, order_matters = 0;
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++) {
            const size_t i = (size_t)r * C + c;
            const float v = bf16_bits_to_f32(ob[i]);
            far += !gkl_near(v, ref_out[i], 0.51 * gkl_spacing(ref_out[i]));  // + fp32 rstd's 1e-6
            const float nb = gkl_bf16r(x[i] * rstd[r]);       // hidden_states.to(bf16)
            const uint16_t want = f32_to_bf16_bits(w[c] * nb);  // weight * it: exact in fp32, one rounding
            differ += ob[i] != want;
            order_matters += want != f32_to_bf16_bits(w[c] * (x[i] * rstd[r]));
            ref_dw[c] += (double)dout[i] * nb;
        }
    test_check(far == 0, "rmsnorm_forward N=%d C=%d: %zu of %zu elements beyond 1.51 bf16 ulps of the double "
               "w * x * rstd", N, C, far, n);
    test_check(differ == 0, "rmsnorm_forward N=%d C=%d: out bit-equal to bf16(w * bf16(x * rstd)), transformers' "
               "order, from the kernel's rstd: %zu differ (a single rounding of w * x * rstd would differ in %.1f%%)",
               N, C, differ, 100.0 * (double)order_matters / (double)n);
    gkl_poison(d_out2, n * 2);
    rmsnorm_forward(d_out2, NULL, d_x, d_w, eps, N, C, gkl_stream);
    gkl_get_bits(ob2, d_out2, n);
    test_check(gkl_same(ob, ob2, n * 2), "rmsnorm_forward N=%d C=%d: rstd = NULL gives the same bits", N, C);

    // the fused residual: residual = bf16(a + b) bitwise (fp32 sum, as the CPU's), then out and
    // rstd bitwise those of rmsnorm_forward on it
    {
        float *a = gkl_random(n, 1.0f, 1, st), *b = gkl_random(n, 1.0f, 1, st);
        floatX *d_a = (floatX *)gkl_dmalloc(n * 2), *d_b = (floatX *)gkl_dmalloc(n * 2);
        floatX *d_res = (floatX *)gkl_dmalloc(n * 2);
        gkl_put_bf16(d_a, a, n);
        gkl_put_bf16(d_b, b, n);
        gkl_poison(d_res, n * 2);
        gkl_poison(d_out, n * 2);
        gkl_poison(d_rstd, (size_t)N * 4);
        rmsnorm_forward_residual(d_res, d_out, d_rstd, d_a, d_b, d_w, eps, N, C, gkl_stream);
        uint16_t *rb = (uint16_t *)gkl_xmalloc(n * 2);
        gkl_get_bits(rb, d_res, n);
        gkl_get_bits(ob, d_out, n);
        gkl_get_f32(rstd, d_rstd, (size_t)N);
        size_t res_bad = 0;
        for (size_t i = 0; i < n; i++) res_bad += rb[i] != f32_to_bf16_bits(a[i] + b[i]);
        gkl_poison(d_out2, n * 2);
        gkl_poison(d_rstd2, (size_t)N * 4);
        rmsnorm_forward(d_out2, d_rstd2, d_res, d_w, eps, N, C, gkl_stream);
        gkl_get_bits(ob2, d_out2, n);
        gkl_get_f32(rstd2, d_rstd2, (size_t)N);
        test_check(res_bad == 0 && gkl_same(ob, ob2, n * 2) && gkl_same(rstd, rstd2, (size_t)N * 4),
                   "rmsnorm_forward_residual N=%d C=%d: residual = bf16(a + b) bitwise (%zu differ), out and rstd "
                   "bitwise rmsnorm_forward's on it", N, C, res_bad);
        // in place (residual = a): the same residual, out and rstd
        gkl_poison(d_out2, n * 2);
        gkl_poison(d_rstd2, (size_t)N * 4);
        rmsnorm_forward_residual(d_a, d_out2, d_rstd2, d_a, d_b, d_w, eps, N, C, gkl_stream);
        uint16_t *rb2 = (uint16_t *)gkl_xmalloc(n * 2);
        gkl_get_bits(rb2, d_a, n);
        gkl_get_bits(ob2, d_out2, n);
        gkl_get_f32(rstd2, d_rstd2, (size_t)N);
        test_check(gkl_same(rb, rb2, n * 2) && gkl_same(ob, ob2, n * 2) && gkl_same(rstd, rstd2, (size_t)N * 4),
                   "rmsnorm_forward_residual N=%d C=%d in place (residual = a): the same residual, out and rstd bits",
                   N, C);
        free(rb2);
        cudaCheck(cudaFree(d_a)); cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_res));
        free(a); free(b); free(rb);
        // the plain forward's rstd again, for the backward
        rmsnorm_forward(d_out, d_rstd, d_x, d_w, eps, N, C, gkl_stream);
    }

    // backward, twice (accumulation)
    gkl_put_bf16(d_dinp, dinp0, n);
    gkl_put_f32(d_dw, dw0, (size_t)C);
    float *dinp[3], *dw[3];
    for (int k = 0; k < 3; k++) {
        dinp[k] = (float *)gkl_xmalloc(n * 4);
        dw[k] = (float *)gkl_xmalloc((size_t)C * 4);
    }
    for (int call = 0; call < 2; call++) {
        gkl_poison(d_scratch, scratch_floats * 4);
        rmsnorm_backward(d_dinp, d_dw, d_scratch, d_dout, d_x, d_w, d_rstd, N, C, gkl_stream);
        gkl_get_bf16(dinp[call], d_dinp, n);
        gkl_get_f32(dw[call], d_dw, (size_t)C);
    }
    const char *path = C <= 256 * RMS_BWD_MAX_VPL ? "one pass" : "two kernels";
    for (int call = 0; call < 2; call++) {
        const float *bi = call == 0 ? dinp0 : dinp[0], *bw = call == 0 ? dw0 : dw[0];
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += !gkl_near(dinp[call][i], (double)bi[i] + ref_inc[i], atol_inc[i]);
        const double e_dinp = gkl_rel_delta(dinp[call], bi, ref_inc, n);
        test_check(bad == 0 && e_dinp <= 1e-2,
                   "rmsnorm_backward dinp += (call %d) N=%d C=%d (%s): %zu elements beyond 1 bf16 ulp of before + "
                   "increment (+ fp32 allowance 3e-5 rstd (|g| + |n mean(g n)|)); rel L2 of the increment %.2e "
                   "(tol 1e-2: a bf16 sum)", call + 1, N, C, path, bad, e_dinp);
        const double e_dw = gkl_rel_delta(dw[call], bw, ref_dw, (size_t)C);
        test_check(e_dw <= 1e-5, "rmsnorm_backward dweight += (call %d) N=%d C=%d: rel L2 of the increment %.2e "
                   "(tol 1e-5: fp32 sums over %d rows)", call + 1, N, C, e_dw, N);
    }
    // determinism: from the same state again
    gkl_put_bf16(d_dinp, dinp0, n);
    gkl_put_f32(d_dw, dw0, (size_t)C);
    gkl_poison(d_scratch, scratch_floats * 4);
    rmsnorm_backward(d_dinp, d_dw, d_scratch, d_dout, d_x, d_w, d_rstd, N, C, gkl_stream);
    gkl_get_bf16(dinp[2], d_dinp, n);
    gkl_get_f32(dw[2], d_dw, (size_t)C);
    test_check(gkl_same(dinp[0], dinp[2], n * 4) && gkl_same(dw[0], dw[2], (size_t)C * 4),
               "rmsnorm_backward N=%d C=%d: a rerun is bitwise identical (%d row chunks)", N, C,
               rmsnorm_backward_num_chunks(N));

    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_out2)); cudaCheck(cudaFree(d_w));
    cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_dinp)); cudaCheck(cudaFree(d_rstd)); cudaCheck(cudaFree(d_rstd2));
    cudaCheck(cudaFree(d_dw)); cudaCheck(cudaFree(d_scratch));
    for (int k = 0; k < 3; k++) { free(dinp[k]); free(dw[k]); }
    free(x); free(w); free(dout); free(dinp0); free(dw0); free(ref_rstd); free(ref_out); free(ref_inc); free(atol_inc);
    free(ref_dw); free(ob); free(ob2); free(rstd); free(rstd2);
}

// --- RoPE --------------------------------------------------------------------------------------

// The buffers of one RoPE case: fused (pad < 0): one (N, (NH + 2 NKV) hd) QKV buffer, k after
// the NH query heads, v last; otherwise separate q (N, NH hd + pad) and k (N, NKV hd + pad)
// buffers whose rows end in pad untouched elements. host: the whole buffer(s), q then k.
typedef struct {
    int B, T, NH, NKV, hd, pad, ldq, ldk;
    size_t nq, nk;    // elements of the q buffer and of the k buffer (nk = 0 when fused)
    floatX *d_q, *d_k;
} GklRope;

static GklRope gkl_rope_make(int B, int T, int NH, int NKV, int hd, int pad) {
    GklRope r;
    const size_t N = (size_t)B * T;
    r.B = B; r.T = T; r.NH = NH; r.NKV = NKV; r.hd = hd; r.pad = pad;
    if (pad < 0) {
        r.ldq = r.ldk = (NH + 2 * NKV) * hd;
        r.nq = N * r.ldq;
        r.nk = 0;
        r.d_q = (floatX *)gkl_dmalloc(r.nq * 2);
        r.d_k = r.d_q + (size_t)NH * hd;
    } else {
        r.ldq = NH * hd + pad;
        r.ldk = NKV * hd + pad;
        r.nq = N * r.ldq;
        r.nk = N * r.ldk;
        r.d_q = (floatX *)gkl_dmalloc(r.nq * 2);
        r.d_k = (floatX *)gkl_dmalloc(r.nk * 2);
    }
    return r;
}

static void gkl_rope_put(const GklRope *r, const float *host) {
    gkl_put_bf16(r->d_q, host, r->nq);
    if (r->nk) gkl_put_bf16(r->d_k, host + r->nq, r->nk);
}

static void gkl_rope_get(const GklRope *r, uint16_t *bits) {
    gkl_get_bits(bits, r->d_q, r->nq);
    if (r->nk) gkl_get_bits(bits + r->nq, r->d_k, r->nk);
}

// where element (token n, head h of the NH + NKV, channel i) lives in the host copy
static size_t gkl_rope_at(const GklRope *r, size_t n, int h, int i) {
    if (h < r->NH) return n * r->ldq + (size_t)h * r->hd + i;
    if (r->pad < 0) return n * r->ldq + (size_t)h * r->hd + i;  // k follows q in the same row
    return r->nq + n * r->ldk + (size_t)(h - r->NH) * r->hd + i;
}

// the host reference of the rotation (bwd: its transpose) on the bits x (the whole buffers),
// cos/sin from the fp32 tables: y in double for every q/k element, atol the fp32 allowance;
// rotated[] marks the q/k elements (the rest must stay as they were)
static void gkl_rope_ref(const GklRope *r, const uint16_t *x, const float *cos_t, const float *sin_t, int bwd,
                         double *y, double *atol, unsigned char *rotated) {
    const size_t total = r->nq + r->nk, N = (size_t)r->B * r->T;
    const int half = r->hd / 2;
    memset(rotated, 0, total);
    for (size_t n = 0; n < N; n++) {
        const int t = (int)(n % (size_t)r->T);
        for (int h = 0; h < r->NH + r->NKV; h++)
            for (int j = 0; j < half; j++) {
                const size_t a = gkl_rope_at(r, n, h, j), b = gkl_rope_at(r, n, h, j + half);
                const double c = cos_t[(size_t)t * half + j], s = sin_t[(size_t)t * half + j] * (bwd ? -1.0 : 1.0);
                const double x1 = bf16_bits_to_f32(x[a]), x2 = bf16_bits_to_f32(x[b]);
                y[a] = x1 * c - x2 * s;
                y[b] = x2 * c + x1 * s;
                // fp32 products and difference: a few fp32 ulps of the terms (cancellation)
                atol[a] = atol[b] = ldexp(fabs(x1 * c) + fabs(x2 * s), -21);
                rotated[a] = rotated[b] = 1;
            }
    }
}

static void gkl_test_rope(const char *label, const RopeConfig *rc, int B, int T, int NH, int NKV, int pad,
                          uint64_t *st) {
    const int hd = rc->head_dim, half = hd / 2, max_seq_len = T + 3;
    char err[256];
    float *cos_t = (float *)gkl_xmalloc((size_t)max_seq_len * half * 4);
    float *sin_t = (float *)gkl_xmalloc((size_t)max_seq_len * half * 4);
    require(rope_tables_checked(cos_t, sin_t, max_seq_len, rc, err, sizeof(err)) == 0, err);
    float *d_cos = (float *)gkl_dmalloc((size_t)max_seq_len * half * 4);
    float *d_sin = (float *)gkl_dmalloc((size_t)max_seq_len * half * 4);
    gkl_put_f32(d_cos, cos_t, (size_t)max_seq_len * half);
    gkl_put_f32(d_sin, sin_t, (size_t)max_seq_len * half);

    GklRope r = gkl_rope_make(B, T, NH, NKV, hd, pad);
    const size_t total = r.nq + r.nk;
    const int vec = half % 8 == 0 && r.ldq % 8 == 0 && r.ldk % 8 == 0;
    char name[200];
    snprintf(name, sizeof(name), "%s: B=%d T=%d NH/NKV=%d/%d hd=%d, %s, %s", label, B, T, NH, NKV, hd,
             pad < 0 ? "fused QKV rows" : "separate q, k buffers", vec ? "8 pairs a thread" : "1 pair a thread");
    float *x = gkl_random(total, 1.0f, 1, st);
    uint16_t *xb = (uint16_t *)gkl_xmalloc(total * 2), *yb = (uint16_t *)gkl_xmalloc(total * 2);
    uint16_t *yb2 = (uint16_t *)gkl_xmalloc(total * 2);
    for (size_t i = 0; i < total; i++) xb[i] = f32_to_bf16_bits(x[i]);
    double *ref = (double *)gkl_xmalloc(total * sizeof(double)), *atol = (double *)gkl_xmalloc(total * sizeof(double));
    unsigned char *rotated = (unsigned char *)gkl_xmalloc(total);

    for (int bwd = 0; bwd < 2; bwd++) {
        gkl_rope_put(&r, x);
        if (bwd) rope_backward(r.d_q, r.d_k, d_cos, d_sin, B, T, NH, NKV, hd, r.ldq, r.ldk, max_seq_len, gkl_stream);
        else rope_forward(r.d_q, r.d_k, d_cos, d_sin, B, T, NH, NKV, hd, r.ldq, r.ldk, max_seq_len, gkl_stream);
        gkl_rope_get(&r, yb);
        gkl_rope_ref(&r, xb, cos_t, sin_t, bwd, ref, atol, rotated);
        size_t bad = 0, touched = 0, nrot = 0;
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < total; i++) {
            if (rotated[i]) {
                const float v = bf16_bits_to_f32(yb[i]);
                bad += !gkl_near(v, ref[i], atol[i]);
                num += ((double)v - ref[i]) * ((double)v - ref[i]);
                den += ref[i] * ref[i];
                nrot++;
            } else {
                touched += yb[i] != xb[i];
            }
        }
        const double e = den > 0.0 ? sqrt(num / den) : sqrt(num);
        test_check(bad == 0 && touched == 0 && e <= 5e-3,
                   "rope_%s %s: %zu of %zu q/k elements beyond 1 bf16 ulp (+ fp32 allowance 2^-21 (|x1 c| + |x2 s|)) "
                   "of the double rotation, rel L2 %.2e (tol 5e-3); %zu other elements changed",
                   bwd ? "backward" : "forward", name, bad, nrot, isfinite(e) ? e : INFINITY, touched);
        if (bwd) {  // determinism
            gkl_rope_put(&r, x);
            rope_backward(r.d_q, r.d_k, d_cos, d_sin, B, T, NH, NKV, hd, r.ldq, r.ldk, max_seq_len, gkl_stream);
            gkl_rope_get(&r, yb2);
            test_check(gkl_same(yb, yb2, total * 2), "rope_backward %s: a rerun is bitwise identical", name);
        }
    }

    // synthetic tables: (cos, sin) = (2, 0) doubles every q/k element exactly (coverage), and
    // (0, 1) swaps the halves: [-x2, x1] forward, [x2, -x1] backward, bit for bit
    float *syn_c = (float *)gkl_xmalloc((size_t)max_seq_len * half * 4);
    float *syn_s = (float *)gkl_xmalloc((size_t)max_seq_len * half * 4);
    for (int kind = 0; kind < 2; kind++) {
        for (size_t i = 0; i < (size_t)max_seq_len * half; i++) {
            syn_c[i] = kind == 0 ? 2.0f : 0.0f;
            syn_s[i] = kind == 0 ? 0.0f : 1.0f;
        }
        gkl_put_f32(d_cos, syn_c, (size_t)max_seq_len * half);
        gkl_put_f32(d_sin, syn_s, (size_t)max_seq_len * half);
        for (int bwd = 0; bwd < 2; bwd++) {
            gkl_rope_put(&r, x);
            if (bwd)
                rope_backward(r.d_q, r.d_k, d_cos, d_sin, B, T, NH, NKV, hd, r.ldq, r.ldk, max_seq_len, gkl_stream);
            else
                rope_forward(r.d_q, r.d_k, d_cos, d_sin, B, T, NH, NKV, hd, r.ldq, r.ldk, max_seq_len, gkl_stream);
            gkl_rope_get(&r, yb);
            // expected bits: start from the input, then the q/k heads
            memcpy(yb2, xb, total * 2);
            for (size_t n = 0; n < (size_t)B * T; n++)
                for (int h = 0; h < NH + NKV; h++)
                    for (int j = 0; j < half; j++) {
                        const size_t a = gkl_rope_at(&r, n, h, j), b = gkl_rope_at(&r, n, h, j + half);
                        if (kind == 0) {
                            yb2[a] = f32_to_bf16_bits(2.0f * bf16_bits_to_f32(xb[a]));
                            yb2[b] = f32_to_bf16_bits(2.0f * bf16_bits_to_f32(xb[b]));
                        } else if (!bwd) {
                            yb2[a] = (uint16_t)(xb[b] ^ 0x8000u);
                            yb2[b] = xb[a];
                        } else {
                            yb2[a] = xb[b];
                            yb2[b] = (uint16_t)(xb[a] ^ 0x8000u);
                        }
                    }
            size_t differ = 0;
            for (size_t i = 0; i < total; i++) differ += yb[i] != yb2[i];
            const char *what = kind == 0 ? "(2, 0): every q/k element doubled, the rest untouched"
                               : bwd     ? "(0, 1): [x2, -x1] bitwise"
                                         : "(0, 1): [-x2, x1] bitwise";
            test_check(differ == 0, "rope_%s %s, table (cos, sin) = %s: %zu of %zu elements differ",
                       bwd ? "backward" : "forward", name, what, differ, total);
        }
    }

    cudaCheck(cudaFree(r.d_q));
    if (r.nk) cudaCheck(cudaFree(r.d_k));
    cudaCheck(cudaFree(d_cos)); cudaCheck(cudaFree(d_sin));
    free(cos_t); free(sin_t); free(x); free(xb); free(yb); free(yb2); free(ref); free(atol); free(rotated);
    free(syn_c); free(syn_s);
}

// --- SwiGLU ------------------------------------------------------------------------------------

static void gkl_test_swiglu(int N, int I, uint64_t *st) {
    const size_t nh = (size_t)N * I, ng = 2 * nh;
    // gate in [-6, 6) with some saturated values (+-20, +-50, +-100: the logistic's tails), up
    // in [-2, 2), dh in [-1, 1)
    float *gu = gkl_random(ng, 1.0f, 0, st);
    for (size_t n = 0; n < (size_t)N; n++)
        for (int i = 0; i < I; i++) {
            float *g = gu + n * 2 * I + i, *u = g + I;
            const size_t e = n * I + i;
            *g = e % 97 == 5 ? (e % 2 ? 1.0f : -1.0f) * (e % 3 == 0 ? 20.0f : e % 3 == 1 ? 50.0f : 100.0f)
                             : gkl_bf16r(*g * 6.0f);
            *u = gkl_bf16r(*u * 2.0f);
        }
    float *dh = gkl_random(nh, 1.0f, 1, st);

    // reference in double; the absolute floor 2^-126 lets sigmoid's flush to 0 below
    // expf's range (gate < -88, where silu is below 2^-126 in size) pass
    const double floor_abs = ldexp(1.0, -126);
    double *ref_h = (double *)gkl_xmalloc(nh * sizeof(double)), *ref_d = (double *)gkl_xmalloc(ng * sizeof(double));
    double *atol_d = (double *)gkl_xmalloc(ng * sizeof(double));
    for (size_t n = 0; n < (size_t)N; n++)
        for (int i = 0; i < I; i++) {
            const double g = gu[n * 2 * I + i], u = gu[n * 2 * I + I + i], d = dh[n * I + i];
            const double s = 1.0 / (1.0 + exp(-g));
            ref_h[n * I + i] = g * s * u;
            ref_d[n * 2 * I + i] = d * u * (s * (1.0 + g * (1.0 - s)));
            ref_d[n * 2 * I + I + i] = d * g * s;
            // silu' crosses 0 at gate ~ -1.28, where 1 + g (1 - s) cancels: fp32's error there is
            // absolute, ~1e-7 |dh u|
            atol_d[n * 2 * I + i] = floor_abs + 1e-6 * fabs(d * u);
            atol_d[n * 2 * I + I + i] = floor_abs;
        }

    floatX *d_gu = (floatX *)gkl_dmalloc(ng * 2), *d_h = (floatX *)gkl_dmalloc(nh * 2);
    floatX *d_dh = (floatX *)gkl_dmalloc(nh * 2), *d_dgu = (floatX *)gkl_dmalloc(ng * 2);
    gkl_put_bf16(d_gu, gu, ng);
    gkl_put_bf16(d_dh, dh, nh);

    gkl_poison(d_h, nh * 2);
    swiglu_forward(d_h, d_gu, N, I, gkl_stream);
    float *h = (float *)gkl_xmalloc(nh * 4);
    gkl_get_bf16(h, d_h, nh);
    size_t bad = 0;
    for (size_t i = 0; i < nh; i++) bad += !gkl_near(h[i], ref_h[i], floor_abs);
    test_check(bad == 0, "swiglu_forward N=%d I=%d: %zu of %zu elements beyond 1 bf16 ulp of the double silu(g) u", N,
               I, bad, nh);

    gkl_poison(d_dgu, ng * 2);
    swiglu_backward(d_dgu, d_dh, d_gu, N, I, gkl_stream);
    uint16_t *db = (uint16_t *)gkl_xmalloc(ng * 2), *db2 = (uint16_t *)gkl_xmalloc(ng * 2);
    gkl_get_bits(db, d_dgu, ng);
    size_t bad_g = 0, bad_u = 0;
    for (size_t n = 0; n < (size_t)N; n++)
        for (int i = 0; i < I; i++) {
            const size_t a = n * 2 * I + i, b = a + I;
            bad_g += !gkl_near(bf16_bits_to_f32(db[a]), ref_d[a], atol_d[a]);
            bad_u += !gkl_near(bf16_bits_to_f32(db[b]), ref_d[b], atol_d[b]);
        }
    test_check(bad_g == 0 && bad_u == 0,
               "swiglu_backward N=%d I=%d: dgate %zu, dup %zu of %zu elements each beyond 1 bf16 ulp of the double "
               "gradient (dgate + 1e-6 |dh up|)", N, I, bad_g, bad_u, nh);

    // determinism, and in place (dgu = gu): the same bits
    gkl_poison(d_dgu, ng * 2);
    swiglu_backward(d_dgu, d_dh, d_gu, N, I, gkl_stream);
    gkl_get_bits(db2, d_dgu, ng);
    const int rerun_same = gkl_same(db, db2, ng * 2);
    swiglu_backward(d_gu, d_dh, d_gu, N, I, gkl_stream);
    gkl_get_bits(db2, d_gu, ng);
    test_check(rerun_same && gkl_same(db, db2, ng * 2),
               "swiglu_backward N=%d I=%d: a rerun%s and the in-place call (dgu = gu)%s give the same bits", N, I,
               rerun_same ? "" : " (DIFFERS)", gkl_same(db, db2, ng * 2) ? "" : " (DIFFERS)");

    cudaCheck(cudaFree(d_gu)); cudaCheck(cudaFree(d_h)); cudaCheck(cudaFree(d_dh)); cudaCheck(cudaFree(d_dgu));
    free(gu); free(dh); free(ref_h); free(ref_d); free(atol_d); free(h); free(db); free(db2);
}

// --- all of it ---------------------------------------------------------------------------------

static void test_llama_kernels(void) {
    printf("llama kernels (rmsnorm, rope, swiglu)\n");
    cudaCheck(cudaStreamCreateWithFlags(&gkl_stream, cudaStreamNonBlocking));
    uint64_t st = 0x5eed11a3ULL;

    gkl_test_rmsnorm(1, 8, 1e-5f, &st);        // one row, one lane with data
    gkl_test_rmsnorm(77, 896, 1e-6f, &st);     // Qwen2.5-0.5B: 3.5 vectors a lane, one chunk
    gkl_test_rmsnorm(1000, 2048, 1e-5f, &st);  // Llama-3.2-1B: 8 vectors a lane (the one-pass limit), 32 chunks
    gkl_test_rmsnorm(33, 1536, 1e-6f, &st);    // Qwen2.5-1.5B: 6 vectors a lane, 2 chunks, the last of 1 row
    gkl_test_rmsnorm(20000, 64, 1e-5f, &st);   // 40-row chunks, 500 of them
    gkl_test_rmsnorm(45, 3072, 1e-5f, &st);    // Llama-3.2-3B: the two-kernel path
    gkl_test_rmsnorm(299, 4104, 1e-5f, &st);   // wider than 4096, not a multiple of 256

    const RopeConfig llama32 = {ROPE_LLAMA3, 64, 500000.0, 32.0, 1.0, 4.0, 8192};
    const RopeConfig llama31 = {ROPE_LLAMA3, 128, 500000.0, 8.0, 1.0, 4.0, 8192};
    const RopeConfig qwen64 = {ROPE_DEFAULT, 64, 1000000.0, 0.0, 0.0, 0.0, 0};
    const RopeConfig qwen128 = {ROPE_DEFAULT, 128, 1000000.0, 0.0, 0.0, 0.0, 0};
    const RopeConfig odd40 = {ROPE_DEFAULT, 40, 10000.0, 0.0, 0.0, 0.0, 0};
    gkl_test_rope("Llama-3.2-1B", &llama32, 2, 77, 32, 8, -1, &st);
    gkl_test_rope("Llama-3.1-8B", &llama31, 3, 33, 32, 8, 8, &st);
    gkl_test_rope("Qwen2.5-0.5B", &qwen64, 1, 4099, 14, 2, -1, &st);  // positions to 4098: large angles
    gkl_test_rope("Qwen2.5-1.5B", &qwen128, 2, 129, 12, 2, -1, &st);
    gkl_test_rope("one token", &qwen64, 1, 1, 14, 2, -1, &st);
    gkl_test_rope("hd 40", &odd40, 3, 17, 3, 1, -1, &st);              // hd/2 = 20: one pair a thread
    gkl_test_rope("row stride % 8 != 0", &llama32, 2, 21, 4, 2, 4, &st);  // one pair a thread

    gkl_test_swiglu(1, 8, &st);
    gkl_test_swiglu(1000, 8, &st);
    gkl_test_swiglu(77, 4864, &st);    // Qwen2.5-0.5B
    gkl_test_swiglu(5, 8192, &st);     // Llama-3.2-1B / 3B
    gkl_test_swiglu(33, 8960, &st);    // Qwen2.5-1.5B
    gkl_test_swiglu(7, 14336, &st);    // Llama-3.1-8B
    gkl_test_swiglu(1000, 4864, &st);

    cudaCheck(cudaStreamDestroy(gkl_stream));
    gkl_stream = NULL;
}

#endif // GPU_KERNELS_LLAMA_CUH
