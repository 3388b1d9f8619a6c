/*
gpu_kernels_attention.cuh - GPU test of llmc/attention.cuh (flash-style causal attention with
grouped-query heads, forward and backward) against a CPU reference computed here in double
precision from the same bf16 inputs. Include after test/test_util.h and llmc/cuda_common.cuh,
then call test_attention() (needs a CUDA GPU).

What is checked:
  - out and each of dq, dk, dv against the reference, rel L2 <= 1e-2 (bf16 P and dS, bf16
    outputs). GPT-2's heads (NKV = NH, q, k, v the views of one packed qkv as the trainer
    passes them): (B,T,C,NH) = (2,64,128,2), (3,37,64,1) (T below one tile), (1,256,768,12),
    and head sizes 16 (the debug model's), 32 and 128 with T not a multiple of 64. Grouped
    query heads (NH/NKV): 32/8 at hs 64 (Llama 3.2 1B's), 14/2 at hs 64 (Qwen2.5 0.5B's), 12/2
    at hs 128, 4/1, and more, at T = 1, 77, 200, 300, 600; the reference sums dk, dv over each
    K/V head's query heads;
  - layouts: every case runs with q, k, v (and dq, dk, dv) in one packed (B, T, (NH + 2 NKV)
    hs) buffer, as three separate contiguous tensors, and as three tensors with padded rows
    (ldq = NH hs + 8, ldkv = NKV hs + 24); the last two must give bitwise the packed layout's
    out, lse, dq, dk, dv, and leave every element outside dq, dk, dv unwritten (the gaps of the
    inputs hold NaN, so a read outside q, k, v would show in the results too);
  - GQA reads K/V in place: with NKV < NH, the out, lse and dq bitwise those of NKV = NH on
    K, V repeated for each query head;
  - coverage: out, the gradients, the saved lse and the scratch are filled with 0xFF bytes
    (NaN) before every call; an unwritten element of out / dq / dk / dv is non-finite, and an
    unwritten lse / Dvec row turns its gradients into NaN;
  - determinism: forward and backward twice, bitwise the same out, lse and gradients (no
    float atomics: dK, dV sum over a group's heads in one fixed order);
  - a forward without saved state (saved = NULL) gives the same out;
  - the host checks (no GPU work): each broken rule (NKV not dividing NH, head size, strides,
    alignment, outputs overlapping inputs or each other) is named, and the trainer's packed
    GPT-2 call and separate GQA tensors pass;
  - 64-bit indexing: the index helpers and the grid at sizes past 2^31 / 2^32 (host math),
    and one real run with B*T*3C > 2^31 (B = 1024, T = 1024, C = 768: about 13 GB of GPU
    memory, skipped when it cannot be allocated), checked on three sampled heads, including
    the last one, plus a full non-finite scan of out and dqkv on the GPU.
Every case runs on the Hopper kernels (attention_sm90.cuh: hs = 64 and 128) where the build
and GPU have them, and again on the mma.sync kernels (attention_set_sm90(0));
on the Hopper pass each such case is also compared with the mma.sync kernels' results on the
same inputs (out, dq, dk, dv rel L2 <= 1e-2, lse within 1e-3). Head size 128 runs at T = 100,
130, 77, 1000 and 1024 with NH/NKV = 2/2, 12/2, 6/2 and 4/4.
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

// One query head (b, h) of the reference, in double: q, dout (T, hs) are its slices, k, v
// (T, hs) those of its K/V head; out, dq, dk, dv (T, hs) are written (dk, dv: this query
// head's share of its K/V head's gradient). The math of test/gpt2_ref.c's attention forward
// and backward: causal softmax of q.k / sqrt(hs), out = P v, then back through both.
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

// --- layouts of q, k, v (and dq, dk, dv) ----------------------------------------------------

#define GKA_PACKED 0    // one (B, T, (NH + 2 NKV) hs) buffer, per token [q | k | v] (GPT-2's qkv)
#define GKA_SEPARATE 1  // three contiguous tensors, 64 elements apart
#define GKA_PADDED 2    // three tensors with padded rows: ldq = NH hs + 8, ldkv = NKV hs + 24
static const char *gka_layout_name[3] = {"packed", "separate", "padded"};

// where q, k and v lie in a buffer of n elements: their offsets and row strides (the
// gradients' buffer has the same layout)
typedef struct {
    size_t off_q, off_k, off_v, n;
    int ldq, ldkv;
} gka_layout;

static gka_layout gka_layout_of(int kind, int B, int T, int NH, int NKV, int hs) {
    gka_layout L;
    const size_t bt = (size_t)B * T;
    if (kind == GKA_PACKED) {
        L.ldq = L.ldkv = (NH + 2 * NKV) * hs;
        L.off_q = 0;
        L.off_k = (size_t)NH * hs;
        L.off_v = (size_t)(NH + NKV) * hs;
        L.n = bt * L.ldq;
    } else {
        const int pad = kind == GKA_PADDED;
        const size_t gap = 64;  // elements around each tensor, never to be read or written
        L.ldq = NH * hs + 8 * pad;
        L.ldkv = NKV * hs + 24 * pad;
        L.off_q = gap;
        L.off_k = L.off_q + bt * L.ldq + gap;
        L.off_v = L.off_k + bt * L.ldkv + gap;
        L.n = L.off_v + bt * L.ldkv + gap;
    }
    return L;
}

// One forward + backward on the GPU from the host buffers in (the layout's q, k, v; NaN
// elsewhere) and dout: out, the saved lse and the gradients' buffer (dq, dk, dv in the
// layout) come back, every output poisoned (0xFF bytes: NaN) first. With out_nosave, also a
// forward without saved state.
static void gka_run(const gka_layout *L, const AttentionShape *a, const uint16_t *in, const uint16_t *dout,
                    uint16_t *out, unsigned char *saved, uint16_t *grad, uint16_t *out_nosave) {
    const size_t n_out = (size_t)a->B * a->T * a->NH * a->hs;
    const size_t saved_bytes = attention_saved_bytes(a), scratch_bytes = attention_scratch_bytes(a);
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    floatX *d_in, *d_grad, *d_out, *d_dout;
    void *d_saved, *d_scratch;
    cudaCheck(cudaMalloc(&d_in, L->n * 2));
    cudaCheck(cudaMalloc(&d_grad, L->n * 2));
    cudaCheck(cudaMalloc(&d_out, n_out * 2));
    cudaCheck(cudaMalloc(&d_dout, n_out * 2));
    cudaCheck(cudaMalloc(&d_saved, saved_bytes));
    cudaCheck(cudaMalloc(&d_scratch, scratch_bytes));
    cudaCheck(cudaMemcpy(d_in, in, L->n * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_dout, dout, n_out * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemsetAsync(d_out, 0xFF, n_out * 2, s));
    cudaCheck(cudaMemsetAsync(d_grad, 0xFF, L->n * 2, s));
    cudaCheck(cudaMemsetAsync(d_saved, 0xFF, saved_bytes, s));
    cudaCheck(cudaMemsetAsync(d_scratch, 0xFF, scratch_bytes, s));
    const floatX *q = d_in + L->off_q, *k = d_in + L->off_k, *v = d_in + L->off_v;
    attention_forward(d_out, d_saved, d_scratch, q, k, v, a, s);
    attention_backward(d_grad + L->off_q, d_grad + L->off_k, d_grad + L->off_v, d_scratch, d_dout, q, k, v, d_out,
                       d_saved, a, s);
    cudaCheck(cudaStreamSynchronize(s));
    cudaCheck(cudaMemcpy(out, d_out, n_out * 2, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(saved, d_saved, saved_bytes, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(grad, d_grad, L->n * 2, cudaMemcpyDeviceToHost));
    if (out_nosave != NULL) {
        cudaCheck(cudaMemsetAsync(d_out, 0xFF, n_out * 2, s));
        attention_forward(d_out, NULL, NULL, q, k, v, a, s);
        cudaCheck(cudaStreamSynchronize(s));
        cudaCheck(cudaMemcpy(out_nosave, d_out, n_out * 2, cudaMemcpyDeviceToHost));
    }
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_grad)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_saved)); cudaCheck(cudaFree(d_scratch));
    cudaCheck(cudaStreamDestroy(s));
}

// rows of w elements between a layout's buffer (from off, ld apart) and a contiguous
// (rows, w) array: into the array (gather) or out of it (scatter)
static void gka_gather(const uint16_t *buf, size_t off, int ld, uint16_t *arr, size_t rows, int w) {
    for (size_t r = 0; r < rows; r++) memcpy(arr + r * w, buf + off + r * ld, (size_t)w * 2);
}

static void gka_scatter(uint16_t *buf, size_t off, int ld, const uint16_t *arr, size_t rows, int w) {
    for (size_t r = 0; r < rows; r++) memcpy(buf + off + r * ld, arr + r * w, (size_t)w * 2);
}

// whether every element of a layout's buffer outside its q, k, v rows is still the poison
static int gka_outside_untouched(const gka_layout *L, const uint16_t *buf, size_t rows, int wq, int wkv) {
    unsigned char *in = (unsigned char *)gka_xmalloc(L->n);
    memset(in, 0, L->n);
    for (size_t r = 0; r < rows; r++) {
        memset(in + L->off_q + r * L->ldq, 1, (size_t)wq);
        memset(in + L->off_k + r * L->ldkv, 1, (size_t)wkv);
        memset(in + L->off_v + r * L->ldkv, 1, (size_t)wkv);
    }
    int ok = 1;
    for (size_t i = 0; i < L->n; i++) ok &= in[i] || buf[i] == 0xFFFFu;
    free(in);
    return ok;
}

// --- the small cases: everything against the reference -------------------------------------

// The results of one layout's run in a layout-free form: out (B*T, NH*hs), the lse bytes, and
// dq (B*T, NH*hs), dk, dv (B*T, NKV*hs), all bf16 bits.
typedef struct {
    uint16_t *out, *dq, *dk, *dv;
    unsigned char *saved;
} gka_result;

static void gka_result_free(gka_result *r) {
    free(r->out); free(r->dq); free(r->dk); free(r->dv); free(r->saved);
}

static int gka_result_same(const gka_result *x, const gka_result *y, size_t n_q, size_t n_kv, size_t saved_bytes,
                           int grads_kv) {
    return memcmp(x->out, y->out, n_q * 2) == 0 && memcmp(x->dq, y->dq, n_q * 2) == 0 &&
           memcmp(x->saved, y->saved, saved_bytes) == 0 &&
           (!grads_kv || (memcmp(x->dk, y->dk, n_kv * 2) == 0 && memcmp(x->dv, y->dv, n_kv * 2) == 0));
}

// q, k, v of (B, T) with NH query heads and NKV K/V heads of size hs in layout `kind`, from
// the logical tensors q (B*T, NH*hs), k, v (B*T, NKV*hs): runs gka_run twice into r (and
// *repeat: whether the two runs agree bitwise, *outside: whether nothing outside dq, dk, dv
// was written); with out_nosave, also the forward without saved state.
static void gka_layout_run(int kind, int B, int T, int NH, int NKV, int hs, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, const uint16_t *dout, gka_result *r, int *repeat, int *outside,
                           uint16_t *out_nosave) {
    const gka_layout L = gka_layout_of(kind, B, T, NH, NKV, hs);
    AttentionShape a = {B, T, NH, NKV, hs, L.ldq, L.ldkv};
    const size_t rows = (size_t)B * T, n_q = rows * NH * hs, n_kv = rows * NKV * hs;
    const int wq = NH * hs, wkv = NKV * hs;
    const size_t saved_bytes = attention_saved_bytes(&a);
    uint16_t *in = (uint16_t *)gka_xmalloc(L.n * 2);
    for (size_t i = 0; i < L.n; i++) in[i] = 0x7FC0u;  // NaN where no q, k, v element is
    gka_scatter(in, L.off_q, L.ldq, q, rows, wq);
    gka_scatter(in, L.off_k, L.ldkv, k, rows, wkv);
    gka_scatter(in, L.off_v, L.ldkv, v, rows, wkv);
    uint16_t *grad = (uint16_t *)gka_xmalloc(L.n * 2);
    gka_result run[2];
    *outside = 1;
    for (int i = 0; i < 2; i++) {
        run[i].out = (uint16_t *)gka_xmalloc(n_q * 2);
        run[i].dq = (uint16_t *)gka_xmalloc(n_q * 2);
        run[i].dk = (uint16_t *)gka_xmalloc(n_kv * 2);
        run[i].dv = (uint16_t *)gka_xmalloc(n_kv * 2);
        run[i].saved = (unsigned char *)gka_xmalloc(saved_bytes);
        gka_run(&L, &a, in, dout, run[i].out, run[i].saved, grad, i == 0 ? out_nosave : NULL);
        gka_gather(grad, L.off_q, L.ldq, run[i].dq, rows, wq);
        gka_gather(grad, L.off_k, L.ldkv, run[i].dk, rows, wkv);
        gka_gather(grad, L.off_v, L.ldkv, run[i].dv, rows, wkv);
        *outside &= gka_outside_untouched(&L, grad, rows, wq, wkv);
    }
    *repeat = gka_result_same(&run[0], &run[1], n_q, n_kv, saved_bytes, 1);
    *r = run[0];
    gka_result_free(&run[1]);
    free(in);
    free(grad);
}

// B sequences of T tokens, NH query heads over NKV K/V heads of size hs: the reference
// checks on the packed layout (the trainer's call for NKV = NH), the other layouts bitwise
// against it, and with NKV < NH the comparison with K, V repeated per query head.
static void gka_case(int B, int T, int NH, int NKV, int hs, uint64_t seed) {
    const size_t rows = (size_t)B * T, n_q = rows * NH * hs, n_kv = rows * NKV * hs;
    const int wq = NH * hs, wkv = NKV * hs, ld = (NH + 2 * NKV) * hs, group = NH / NKV;
    const size_t n_qkv = rows * ld;
    char name[96];
    snprintf(name, sizeof(name), "attention B=%d T=%d NH=%d NKV=%d (hs %d)", B, T, NH, NKV, hs);
    // the inputs, drawn in the packed layout (for NKV = NH the draws of GPT-2's qkv (B, T, 3C))
    uint64_t st = seed;
    float *qkv = (float *)gka_xmalloc(n_qkv * sizeof(float)), *dout = (float *)gka_xmalloc(n_q * sizeof(float));
    fill_uniform(qkv, n_qkv, 2.0f, &st);  // scores of std ~1.3 at hs = 64: a peaked softmax
    fill_uniform(dout, n_q, 1.0f, &st);
    uint16_t *qkv_b = (uint16_t *)gka_xmalloc(n_qkv * 2), *dout_b = (uint16_t *)gka_xmalloc(n_q * 2);
    for (size_t i = 0; i < n_qkv; i++) qkv_b[i] = f32_to_bf16_bits(qkv[i]);
    for (size_t i = 0; i < n_q; i++) dout_b[i] = f32_to_bf16_bits(dout[i]);
    gka_bits_to_float(qkv, qkv_b, n_qkv);  // the reference sees the bf16 values
    gka_bits_to_float(dout, dout_b, n_q);
    uint16_t *q_b = (uint16_t *)gka_xmalloc(n_q * 2), *k_b = (uint16_t *)gka_xmalloc(n_kv * 2);
    uint16_t *v_b = (uint16_t *)gka_xmalloc(n_kv * 2);
    gka_gather(qkv_b, 0, ld, q_b, rows, wq);
    gka_gather(qkv_b, (size_t)wq, ld, k_b, rows, wkv);
    gka_gather(qkv_b, (size_t)wq + wkv, ld, v_b, rows, wkv);

    // the reference, query head by query head; dk, dv summed over each K/V head's group
    double *ref_out = (double *)gka_xmalloc(n_q * sizeof(double));
    double *ref_dq = (double *)gka_xmalloc(n_q * sizeof(double));
    double *ref_dk = (double *)gka_xmalloc(n_kv * sizeof(double));
    double *ref_dv = (double *)gka_xmalloc(n_kv * sizeof(double));
    memset(ref_dk, 0, n_kv * sizeof(double));
    memset(ref_dv, 0, n_kv * sizeof(double));
    const size_t th = (size_t)T * hs;
    float *sl = (float *)gka_xmalloc(4 * th * sizeof(float));  // q, k, v, dout slices
    double *rs = (double *)gka_xmalloc(4 * th * sizeof(double));  // out, dq, dk, dv
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int g = h / group;
            for (int t = 0; t < T; t++)
                for (int i = 0; i < hs; i++) {
                    sl[(size_t)t * hs + i] = qkv[attn_index(b, t, T, ld, h, hs, i)];
                    sl[th + (size_t)t * hs + i] = qkv[wq + attn_index(b, t, T, ld, g, hs, i)];
                    sl[2 * th + (size_t)t * hs + i] = qkv[wq + wkv + attn_index(b, t, T, ld, g, hs, i)];
                    sl[3 * th + (size_t)t * hs + i] = dout[attn_index(b, t, T, wq, h, hs, i)];
                }
            gka_ref_head(sl, sl + th, sl + 2 * th, sl + 3 * th, T, hs, rs, rs + th, rs + 2 * th, rs + 3 * th);
            for (int t = 0; t < T; t++)
                for (int i = 0; i < hs; i++) {
                    const size_t iq = attn_index(b, t, T, wq, h, hs, i), ik = attn_index(b, t, T, wkv, g, hs, i);
                    ref_out[iq] = rs[(size_t)t * hs + i];
                    ref_dq[iq] = rs[th + (size_t)t * hs + i];
                    ref_dk[ik] += rs[2 * th + (size_t)t * hs + i];
                    ref_dv[ik] += rs[3 * th + (size_t)t * hs + i];
                }
        }

    // the packed layout against the reference
    gka_result res[3];
    int repeat[3], outside[3];
    uint16_t *out_nosave = (uint16_t *)gka_xmalloc(n_q * 2);
    const size_t saved_bytes = (size_t)B * NH * T * sizeof(float);  // the lse, less attention_saved_bytes' padding
    gka_layout_run(GKA_PACKED, B, T, NH, NKV, hs, q_b, k_b, v_b, dout_b, &res[0], &repeat[0], &outside[0],
                   out_nosave);
    float *fq = (float *)gka_xmalloc(n_q * sizeof(float)), *fkv = (float *)gka_xmalloc(n_kv * sizeof(float));
    gka_bits_to_float(fq, res[0].out, n_q);
    const double e_out = gka_rel_l2_rows(fq, wq, ref_out, wq, rows, wq);
    gka_bits_to_float(fq, res[0].dq, n_q);
    const double e_dq = gka_rel_l2_rows(fq, wq, ref_dq, wq, rows, wq);
    gka_bits_to_float(fkv, res[0].dk, n_kv);
    const double e_dk = gka_rel_l2_rows(fkv, wkv, ref_dk, wkv, rows, wkv);
    gka_bits_to_float(fkv, res[0].dv, n_kv);
    const double e_dv = gka_rel_l2_rows(fkv, wkv, ref_dv, wkv, rows, wkv);
    test_check(e_out <= GKA_TOL, "%s: out rel L2 %.2e (bound %.0e)", name, e_out, GKA_TOL);
    test_check(e_dq <= GKA_TOL && e_dk <= GKA_TOL && e_dv <= GKA_TOL,
               "%s: dq %.2e, dk %.2e, dv %.2e rel L2 (bound %.0e)", name, e_dq, e_dk, e_dv, GKA_TOL);
    test_check(repeat[0], "%s: twice, bitwise the same out, lse, dq, dk and dv", name);
    test_check(memcmp(res[0].out, out_nosave, n_q * 2) == 0, "%s: forward with saved = NULL gives the same out", name);

    // where this call ran the Hopper forward: against attention.cuh's kernels on the same inputs
    // (out and the gradients within bf16 rounding of each other, lse within fp32 rounding)
    if (attention_sm90_usable(hs)) {
        gka_result mma;
        int mma_repeat, mma_outside;
        attention_set_sm90(0);
        gka_layout_run(GKA_PACKED, B, T, NH, NKV, hs, q_b, k_b, v_b, dout_b, &mma, &mma_repeat, &mma_outside, NULL);
        attention_set_sm90(1);
        double e[4], dl = 0.0;
        const uint16_t *x[4] = {res[0].out, res[0].dq, res[0].dk, res[0].dv}, *y[4] = {mma.out, mma.dq, mma.dk, mma.dv};
        for (int part = 0; part < 4; part++) {
            const size_t n = part < 2 ? n_q : n_kv;
            const int w = part < 2 ? wq : wkv;
            double *ref = (double *)gka_xmalloc(n * sizeof(double));
            for (size_t i = 0; i < n; i++) ref[i] = bf16_bits_to_f32(y[part][i]);
            float *got = part < 2 ? fq : fkv;
            gka_bits_to_float(got, x[part], n);
            e[part] = gka_rel_l2_rows(got, w, ref, w, rows, w);
            free(ref);
        }
        const float *la = (const float *)res[0].saved, *lb = (const float *)mma.saved;
        for (size_t i = 0; i < (size_t)B * NH * T; i++) {
            const double d = isfinite(la[i]) ? fabs((double)la[i] - lb[i]) : INFINITY;
            dl = d > dl ? d : dl;
        }
        test_check(e[0] <= GKA_TOL && e[1] <= GKA_TOL && e[2] <= GKA_TOL && e[3] <= GKA_TOL && dl <= 1e-3,
                   "%s: Hopper vs mma.sync: out %.2e, dq %.2e, dk %.2e, dv %.2e rel L2 (bound %.0e), lse max |diff| "
                   "%.2e (bound 1e-3)", name, e[0], e[1], e[2], e[3], GKA_TOL, dl);
        gka_result_free(&mma);
    }

    // the other layouts: bitwise the packed layout's results, nothing written outside dq, dk, dv
    for (int kind = GKA_SEPARATE; kind <= GKA_PADDED; kind++) {
        gka_layout_run(kind, B, T, NH, NKV, hs, q_b, k_b, v_b, dout_b, &res[kind], &repeat[kind], &outside[kind],
                       NULL);
        const gka_layout L = gka_layout_of(kind, B, T, NH, NKV, hs);
        test_check(repeat[kind] && outside[kind] && gka_result_same(&res[kind], &res[0], n_q, n_kv, saved_bytes, 1),
                   "%s, %s layout (ldq %d, ldkv %d): twice bitwise the packed layout's out, lse, dq, dk, dv; "
                   "nothing written outside dq, dk, dv", name, gka_layout_name[kind], L.ldq, L.ldkv);
    }

    // GQA reads K/V head h / group in place: the same as K, V repeated for each query head
    if (NKV < NH) {
        uint16_t *k_rep = (uint16_t *)gka_xmalloc(n_q * 2), *v_rep = (uint16_t *)gka_xmalloc(n_q * 2);
        for (size_t r = 0; r < rows; r++)
            for (int h = 0; h < NH; h++) {
                memcpy(k_rep + r * wq + (size_t)h * hs, k_b + r * wkv + (size_t)(h / group) * hs, (size_t)hs * 2);
                memcpy(v_rep + r * wq + (size_t)h * hs, v_b + r * wkv + (size_t)(h / group) * hs, (size_t)hs * 2);
            }
        gka_result rep;
        int rep_repeat, rep_outside;
        gka_layout_run(GKA_SEPARATE, B, T, NH, NH, hs, q_b, k_rep, v_rep, dout_b, &rep, &rep_repeat, &rep_outside,
                       NULL);
        test_check(gka_result_same(&rep, &res[0], n_q, 0, saved_bytes, 0),
                   "%s: out, lse and dq bitwise those of NKV = NH with K, V repeated per query head", name);
        gka_result_free(&rep);
        free(k_rep);
        free(v_rep);
    }

    for (int kind = 0; kind < 3; kind++) gka_result_free(&res[kind]);
    free(out_nosave); free(fq); free(fkv); free(ref_out); free(ref_dq); free(ref_dk); free(ref_dv); free(sl); free(rs);
    free(qkv); free(dout); free(qkv_b); free(dout_b); free(q_b); free(k_b); free(v_b);
}

// --- the host checks -------------------------------------------------------------------------

// whether err names the problem: not NULL and containing what
static int gka_names(const char *err, const char *what) { return err != NULL && strstr(err, what) != NULL; }

// attention_shape_error, attention_forward_error and attention_backward_error on made-up
// (never dereferenced) device addresses: each broken rule named, good calls let through
static void gka_host_checks(void) {
    const uintptr_t base = (uintptr_t)1 << 32;  // a 16-byte aligned made-up address
    const int B = 2, T = 100;
    // GPT-2's call: q, k, v (and dq, dk, dv) the views of one packed qkv (dqkv)
    {
        const int NH = 12, hs = 64, C = NH * hs;
        const AttentionShape a = attention_shape_packed(B, T, NH, NH, hs);
        const size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
        const floatX *qkv = (const floatX *)base, *out = qkv + n_qkv, *dout = out + n_out;
        floatX *dqkv = (floatX *)(dout + n_out);
        const void *saved = dqkv + n_qkv, *scratch = (const char *)saved + attention_saved_bytes(&a);
        const floatX *q = qkv, *k = qkv + C, *v = qkv + 2 * C;
        test_check(a.ldq == 3 * C && a.ldkv == 3 * C && attention_forward_error(out, q, k, v, &a) == NULL &&
                       attention_backward_error(dqkv, dqkv + C, dqkv + 2 * C, scratch, dout, q, k, v, out,
                                                saved, &a) == NULL,
                   "attention host checks: the trainer's packed GPT-2 call (ldq = ldkv = 3C, dq, dk, dv interleaved "
                   "in dqkv) passes");
        // dk reaching into dq's columns of the packed buffer
        const char *e = attention_backward_error(dqkv, dqkv + C - 8, dqkv + 2 * C, scratch, dout, q, k, v, out,
                                                 saved, &a);
        test_check(gka_names(e, "dq, dk and dv must not overlap"),
                   "attention host checks: dk overlapping dq's columns of a packed dqkv is named (\"%s\")",
                   e ? e : "none");
        e = attention_backward_error(dqkv, dqkv + C, dqkv + 2 * C, scratch, dout, dqkv, k, v, out, saved, &a);
        test_check(gka_names(e, "must not overlap q, k, v, out or dout"),
                   "attention host checks: dq aliasing q is named (\"%s\")", e ? e : "none");
        e = attention_backward_error(dqkv, dqkv + C, dqkv + 2 * C, dqkv, dout, q, k, v, out, saved, &a);
        test_check(gka_names(e, "saved or scratch"), "attention host checks: scratch overlapping dq is named (\"%s\")",
                   e ? e : "none");
        e = attention_forward_error(qkv + 2 * C, q, k, v, &a);
        test_check(gka_names(e, "out must not overlap"), "attention host checks: out overlapping v is named (\"%s\")",
                   e ? e : "none");
        e = attention_forward_error(out, q + 4, k, v, &a);
        test_check(gka_names(e, "16-byte aligned"), "attention host checks: a misaligned q is named (\"%s\")",
                   e ? e : "none");
    }
    // GQA with separate tensors: q (B, T, NH hs), k, v (B, T, NKV hs)
    {
        const int NH = 32, NKV = 8, hs = 64;
        AttentionShape a = {B, T, NH, NKV, hs, NH * hs, NKV * hs};
        const size_t nq = (size_t)B * T * NH * hs, nkv = (size_t)B * T * NKV * hs;
        const floatX *q = (const floatX *)base, *k = q + nq, *v = k + nkv, *out = v + nkv, *dout = out + nq;
        floatX *dq = (floatX *)(dout + nq), *dk = dq + nq, *dv = dk + nkv;
        const void *saved = dv + nkv, *scratch = (const char *)saved + attention_saved_bytes(&a);
        test_check(attention_forward_error(out, q, k, v, &a) == NULL &&
                       attention_backward_error(dq, dk, dv, scratch, dout, q, k, v, out, saved, &a) == NULL,
                   "attention host checks: GQA 32/8 on separate q, k, v passes");
        const char *e = attention_backward_error(dq, dk, dk + 8, scratch, dout, q, k, v, out, saved, &a);
        test_check(gka_names(e, "dq, dk and dv must not overlap"),
                   "attention host checks: dv overlapping dk is named (\"%s\")", e ? e : "none");
        AttentionShape bad = a;
        bad.NKV = 3;
        e = attention_shape_error(&bad);
        test_check(gka_names(e, "NKV (key/value heads) must divide NH"),
                   "attention host checks: NKV = 3 for NH = 32 is named (\"%s\")", e ? e : "none");
        bad = a;
        bad.hs = 48;
        e = attention_shape_error(&bad);
        test_check(gka_names(e, "head size"), "attention host checks: hs = 48 is named (\"%s\")", e ? e : "none");
        bad = a;
        bad.ldq = NH * hs - 8;
        e = attention_shape_error(&bad);
        test_check(gka_names(e, "ldq must be at least NH * hs"),
                   "attention host checks: ldq < NH * hs is named (\"%s\")", e ? e : "none");
        bad = a;
        bad.ldkv = NKV * hs + 4;
        e = attention_shape_error(&bad);
        test_check(gka_names(e, "multiples of 8"),
                   "attention host checks: ldkv not a multiple of 8 (rows not 16-byte aligned) is named (\"%s\")",
                   e ? e : "none");
        bad = a;
        bad.NH = 0;
        e = attention_shape_error(&bad);
        test_check(gka_names(e, "must be positive"), "attention host checks: NH = 0 is named (\"%s\")",
                   e ? e : "none");
    }
}

// --- 64-bit indexing -------------------------------------------------------------------------

// index math at sizes far past 2^31 (host only: nothing is allocated)
static void gka_index_math(void) {
    int ok = 1;
    {   // B*T*3C = 2^31 * 2.34 elements; B*NH*T*T = 1.35e10
        const int B = 1024, T = 1024, C = 1600, NH = 25, hs = 64;
        const uint64_t bt = (uint64_t)B * T;
        ok &= 2 * (uint64_t)C + attn_index(B - 1, T - 1, T, 3 * C, NH - 1, hs, hs - 1) == bt * 3 * C - 1;
        ok &= attn_index(B - 1, T - 1, T, 3 * C, 0, hs, 0) == (bt - 1) * 3 * C;
        ok &= attn_index(B - 1, T - 1, T, C, NH - 1, hs, hs - 1) == bt * C - 1;
        ok &= attn_index(700, 3, T, C, 5, hs, 7) == (700ull * T + 3) * C + 5 * 64 + 7;
        const dim3 g = attn_grid(B, T, NH);
        ok &= g.x == (unsigned)(B * NH) && g.y == 16 && g.z == 1;
    }
    {   // B*T = 2^31 * 1.5: b*T itself overflows int; B*NH*T*4 bytes > 2^32
        const int B = 1572864, T = 2048, C = 1024, NH = 1, hs = 1024;  // hs only enters the index math
        const uint64_t bt = (uint64_t)B * T;
        ok &= attn_index(B - 1, T - 1, T, C, 0, hs, C - 1) == bt * C - 1;
        ok &= C + attn_index(B - 1, T - 1, T, 3 * C, 0, hs, 5) == (bt - 1) * 3 * C + C + 5;
        ok &= attn_row_index(B * NH - 1, T - 1, T) == (uint64_t)B * NH * T - 1;
        const AttentionShape a = attention_shape_packed(B, T, NH, NH, C);
        ok &= attention_saved_bytes(&a) >= (uint64_t)B * NH * T * 4 &&
              attention_saved_bytes(&a) < (uint64_t)B * NH * T * 4 + 256;
        ok &= attention_scratch_bytes(&a) >= (uint64_t)B * NH * T * 4;
        const dim3 g = attn_grid(B, T, NH);
        ok &= g.x == (unsigned)B && g.y == 32;
    }
    {   // GQA: the last K/V element of separate k (B, T, NKV hs) at B*T = 2^31 * 1.5
        const int B = 1572864, T = 2048, NH = 32, NKV = 8, hs = 64;
        const uint64_t bt = (uint64_t)B * T;
        ok &= attn_index(B - 1, T - 1, T, NKV * hs, NKV - 1, hs, hs - 1) == bt * NKV * hs - 1;
        ok &= attn_index(B - 1, T - 1, T, (NH + 2 * NKV) * hs, NH + NKV - 1, hs, hs - 1) ==
              (bt - 1) * (NH + 2 * NKV) * hs + (uint64_t)(NH + NKV) * hs - 1;
        const AttentionShape a = {B, T, NH, NKV, hs, NH * hs, NKV * hs};
        ok &= attention_saved_bytes(&a) >= (uint64_t)B * NH * T * 4;  // per query head, not per K/V head
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
// against the reference and for non-finite values everywhere. q, k, v: GPT-2's packed qkv.
static void gka_large(int B, int T, int C, int NH) {
    const int hs = C / NH;
    const AttentionShape a = attention_shape_packed(B, T, NH, NH, hs);
    const size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
    const size_t saved_bytes = attention_saved_bytes(&a), scratch_bytes = attention_scratch_bytes(&a);
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
    attention_forward(d_out, d_saved, d_scratch, d_qkv, d_qkv + C, d_qkv + 2 * C, &a, s);
    attention_backward(d_dqkv, d_dqkv + C, d_dqkv + 2 * C, d_scratch, d_dout, d_qkv, d_qkv + C, d_qkv + 2 * C, d_out,
                       d_saved, &a, s);
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
                    sl[part * th + (size_t)t * hs + i] =
                        gka_hash_value((size_t)part * C + attn_index(b, t, T, 3 * C, h, hs, i), seed_qkv);
                sl[3 * th + (size_t)t * hs + i] = gka_hash_value(attn_index(b, t, T, C, h, hs, i), seed_dout);
            }
        gka_ref_head(sl, sl + th, sl + 2 * th, sl + 3 * th, T, hs, rs, rs + th, rs + 2 * th, rs + 3 * th);
        for (int part = 0; part < 4; part++) {
            const floatX *src = part == 0 ? d_out + attn_index(b, 0, T, C, h, hs, 0)
                                          : d_dqkv + (size_t)(part - 1) * C + attn_index(b, 0, T, 3 * C, h, hs, 0);
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
    // hs = 64 and 128 run the Hopper kernels (llmc/attention_sm90.cuh) where the build and GPU
    // have them, so those cases run twice: with them and with attention.cuh's own kernels
    attention_set_sm90(1);
    attention_set_sm90_hs128(1);
    const int sm90 = attention_sm90_usable(64);
    for (int pass = sm90 ? 0 : 1; pass < 2; pass++) {
        attention_set_sm90(pass == 0);
        printf("attention (llmc/attention.cuh), on %s\n",
               pass == 0 ? "the Hopper kernels (attention_sm90.cuh) where hs = 64 or 128"
                         : "mma.sync everywhere");
        // GPT-2's heads (NKV = NH; the packed layout is the trainer's qkv (B, T, 3C))
        gka_case(2, 64, 2, 2, 64, 1);      // hs 64, one tile
        gka_case(3, 37, 1, 1, 64, 2);      // T below one tile
        gka_case(1, 256, 12, 12, 64, 3);   // GPT-2 small heads, four tiles
        gka_case(2, 200, 2, 2, 64, 4);     // hs 64, a partial fourth tile
        gka_case(2, 1000, 12, 12, 64, 8);  // hs 64: 192 work tiles of 128 rows, more than the SMs
        // grouped-query heads (NH / NKV)
        gka_case(2, 200, 32, 8, 64, 11);   // Llama 3.2 1B's heads
        gka_case(1, 77, 14, 2, 64, 12);    // Qwen2.5 0.5B's heads, T odd
        gka_case(3, 1, 4, 1, 64, 13);      // one token; one K/V head for all
        gka_case(2, 300, 6, 2, 64, 14);    // three Hopper key tiles, the last partial
        gka_case(4, 600, 16, 8, 64, 15);   // 160 dK/dV work tiles (per K/V head), 320 dQ ones
        // hs 128 (Qwen2.5 1.5B-7B, Llama 3.2 3B, Llama 3.1 8B): the Hopper kernels' two 64-column
        // halves per row, 2 stages; the mma.sync dK/dV query tile of 32
        gka_case(2, 100, 2, 2, 128, 7);     // one work tile, partial
        gka_case(2, 130, 12, 2, 128, 16);   // GQA 12/2, the second tile of two rows
        gka_case(2, 1024, 12, 2, 128, 19);  // Qwen2.5 1.5B's heads at T = 1024: 8 key tiles per row tile
        gka_case(2, 1000, 6, 2, 128, 20);   // GQA 6/2, T = 1000: the last tile partial
        gka_case(3, 77, 4, 4, 128, 21);     // NKV = NH, T odd, below one tile
        if (pass == 1) {
            gka_case(2, 50, 4, 4, 16, 5);      // hs 16 (the debug model)
            gka_case(2, 130, 2, 2, 32, 6);     // hs 32, three tiles, the last of two rows
            gka_case(2, 77, 4, 1, 32, 17);     // GQA 4/1 at hs 32
            gka_case(3, 50, 8, 2, 16, 18);     // GQA 8/2 at hs 16
        }
        gka_large(GKA_LARGE_B, GKA_LARGE_T, GKA_LARGE_C, GKA_LARGE_NH);
    }
    attention_set_sm90(1);
    gka_index_math();
    gka_host_checks();
}

#endif // GPU_KERNELS_ATTENTION_CUH
