/*
gpt2_ref.c - CPU reference of llm.c's GPT-2; see gpt2_ref.h for the contract.

The forward keeps every activation the backward needs, in float32 (as the trainer does),
but each of them is computed with double sums and rounded once. The backward runs in
double from the LM head's d_lnf down to the embeddings: activation gradients are double
buffers, parameter gradients are summed into a double copy (grads64) and rounded to float
at the very end. That makes this a reference for the math, not a model of any kernel's
rounding.

Layer by layer the backward mirrors the forward in reverse; with res = the residual
stream entering block l (encoded for l = 0, else residual3 of block l-1):
    residual2 = res + attproj(attention(qkv(ln1(res))))
    residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
so d_res first collects d(residual3), the MLP branch adds its part into it (turning it
into d(residual2)), then the attention branch adds its part (turning it into d(res)).
*/
#include "gpt2_ref.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flce_ref.h"

const char *const gpt2ref_tensor_names[GPT2REF_NUM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB,
       LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB };

#define LN_EPS 1e-5
#define GELU_SCALE 0.7978845608028654  // sqrt(2 / pi)
// a bound on header values read from files, so that sizes computed from them cannot
// overflow size_t and a corrupt header fails with a message rather than a huge malloc
#define MAX_DIM (1 << 20)

static void set_error(char *err, size_t len, const char *fmt, ...) {
    if (err == NULL || len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

int gpt2ref_is_decayed(int tensor) {
    return tensor == WTE || tensor == WPE || tensor == QKVW || tensor == ATTPROJW ||
           tensor == FCW || tensor == FCPROJW;
}

int gpt2ref_check_config(const GPT2RefConfig *c, char *err, size_t err_len) {
    if (c == NULL) {
        set_error(err, err_len, "config is NULL");
        return -1;
    }
    const int v[6] = {c->max_seq_len, c->vocab_size, c->padded_vocab_size, c->num_layers,
                      c->num_heads, c->channels};
    const char *names[6] = {"max_seq_len", "vocab_size", "padded_vocab_size", "num_layers",
                            "num_heads", "channels"};
    for (int i = 0; i < 6; i++) {
        if (v[i] <= 0 || v[i] > MAX_DIM) {
            set_error(err, err_len, "config: %s = %d, outside [1, %d]", names[i], v[i], MAX_DIM);
            return -1;
        }
    }
    if (c->padded_vocab_size < c->vocab_size) {
        set_error(err, err_len, "config: padded_vocab_size %d < vocab_size %d",
                  c->padded_vocab_size, c->vocab_size);
        return -1;
    }
    if (c->channels % c->num_heads != 0) {
        set_error(err, err_len, "config: channels %d is not a multiple of num_heads %d",
                  c->channels, c->num_heads);
        return -1;
    }
    // the largest tensor, L*4C*C elements, must stay far from overflow (and fit memory)
    if ((double)c->num_layers * 4.0 * c->channels * c->channels > 1e10 ||
        (double)c->padded_vocab_size * c->channels > 1e10) {
        set_error(err, err_len, "config: model too large for the CPU reference");
        return -1;
    }
    return 0;
}

static void param_sizes(const GPT2RefConfig *c, size_t *sizes) {
    const size_t Vp = (size_t)c->padded_vocab_size, maxT = (size_t)c->max_seq_len;
    const size_t L = (size_t)c->num_layers, C = (size_t)c->channels;
    sizes[WTE] = Vp * C;
    sizes[WPE] = maxT * C;
    sizes[LN1W] = L * C;
    sizes[LN1B] = L * C;
    sizes[QKVW] = L * 3 * C * C;
    sizes[QKVB] = L * 3 * C;
    sizes[ATTPROJW] = L * C * C;
    sizes[ATTPROJB] = L * C;
    sizes[LN2W] = L * C;
    sizes[LN2B] = L * C;
    sizes[FCW] = L * 4 * C * C;
    sizes[FCB] = L * 4 * C;
    sizes[FCPROJW] = L * C * 4 * C;
    sizes[FCPROJB] = L * C;
    sizes[LNFW] = C;
    sizes[LNFB] = C;
}

static void free_acts(GPT2Ref *m) {
    void *p[] = {m->inputs, m->targets, m->encoded, m->ln1, m->qkv, m->atty, m->att,
                 m->residual2, m->ln2, m->fch, m->fch_gelu, m->residual3, m->lnf,
                 m->ln1_stats, m->ln2_stats, m->lnf_stats, m->d_lnf, m->d_wte_head,
                 m->d_res, m->d_ln, m->d_atty, m->d_qkv, m->d_fch};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) free(p[i]);
    m->inputs = m->targets = NULL;
    m->encoded = m->ln1 = m->qkv = m->atty = m->att = m->residual2 = m->ln2 = NULL;
    m->fch = m->fch_gelu = m->residual3 = m->lnf = NULL;
    m->ln1_stats = m->ln2_stats = m->lnf_stats = m->d_lnf = m->d_wte_head = NULL;
    m->d_res = m->d_ln = m->d_atty = m->d_qkv = m->d_fch = NULL;
    m->B = m->T = 0;
    m->have_head_grads = 0;
}

void gpt2ref_free(GPT2Ref *m) {
    if (m == NULL) return;
    free_acts(m);
    free(m->params);
    free(m->grads);
    free(m->m);
    free(m->v);
    free(m->grads64);
    // keep the message of a failed call readable after the cleanup it triggers
    char error[sizeof(m->error)];
    memcpy(error, m->error, sizeof(error));
    memset(m, 0, sizeof(*m));
    memcpy(m->error, error, sizeof(error));
}

int gpt2ref_build(GPT2Ref *m, const GPT2RefConfig *config) {
    memset(m, 0, sizeof(*m));
    if (gpt2ref_check_config(config, m->error, sizeof(m->error)) != 0) return -1;
    m->config = *config;
    param_sizes(config, m->tensor_sizes);
    size_t n = 0;
    for (int i = 0; i < GPT2REF_NUM_TENSORS; i++) {
        m->tensor_offsets[i] = n;
        n += m->tensor_sizes[i];
    }
    m->num_parameters = n;
    m->params = (float *)calloc(n, sizeof(float));
    m->grads = (float *)calloc(n, sizeof(float));
    m->m = (float *)calloc(n, sizeof(float));
    m->v = (float *)calloc(n, sizeof(float));
    m->grads64 = (double *)calloc(n, sizeof(double));
    if (!m->params || !m->grads || !m->m || !m->v || !m->grads64) {
        set_error(m->error, sizeof(m->error), "out of memory for %zu parameters", n);
        gpt2ref_free(m);
        return -1;
    }
    return 0;
}

// size of an open file in bytes, or -1
static long file_size(FILE *f) {
    if (fseek(f, 0, SEEK_END) != 0) return -1;
    long size = ftell(f);
    if (fseek(f, 0, SEEK_SET) != 0) return -1;
    return size;
}

int gpt2ref_load(GPT2Ref *m, const char *path) {
    memset(m, 0, sizeof(*m));
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        set_error(m->error, sizeof(m->error), "cannot open model file %s: %s", path,
                  strerror(errno));
        return -1;
    }
    int32_t hd[256];
    const long size = file_size(f);
    if (size < (long)sizeof(hd) || fread(hd, sizeof(int32_t), 256, f) != 256) {
        set_error(m->error, sizeof(m->error), "%s: %ld bytes, shorter than the 1024-byte header",
                  path, size);
        fclose(f);
        return -1;
    }
    if (hd[0] != GPT2REF_MODEL_MAGIC) {
        set_error(m->error, sizeof(m->error), "%s: magic %d, expected %d (an llm.c model file)",
                  path, hd[0], GPT2REF_MODEL_MAGIC);
        fclose(f);
        return -1;
    }
    if (hd[1] != GPT2REF_MODEL_VERSION) {
        set_error(m->error, sizeof(m->error),
                  "%s: version %d, expected %d (fp32 parameters; 5 = bf16 is not supported)",
                  path, hd[1], GPT2REF_MODEL_VERSION);
        fclose(f);
        return -1;
    }
    GPT2RefConfig c;
    c.max_seq_len = hd[2];
    c.vocab_size = hd[3];
    c.num_layers = hd[4];
    c.num_heads = hd[5];
    c.channels = hd[6];
    c.padded_vocab_size = hd[7];
    char msg[200];
    if (gpt2ref_check_config(&c, msg, sizeof(msg)) != 0) {
        set_error(m->error, sizeof(m->error), "%s: bad header: %s", path, msg);
        fclose(f);
        return -1;
    }
    if (gpt2ref_build(m, &c) != 0) {
        fclose(f);
        return -1;
    }
    const size_t expected = sizeof(hd) + m->num_parameters * sizeof(float);
    if ((size_t)size != expected) {
        set_error(m->error, sizeof(m->error),
                  "%s: %ld bytes, expected %zu (header + %zu fp32 parameters of this config)",
                  path, size, expected, m->num_parameters);
        gpt2ref_free(m);
        fclose(f);
        return -1;
    }
    if (fread(m->params, sizeof(float), m->num_parameters, f) != m->num_parameters) {
        set_error(m->error, sizeof(m->error), "%s: read error", path);
        gpt2ref_free(m);
        fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

// (Re)allocates the activations for a (B, T) batch; they stay allocated while B, T repeat.
static int ensure_acts(GPT2Ref *m, int B, int T) {
    if (m->encoded != NULL && m->B == B && m->T == T) return 0;
    free_acts(m);
    const size_t BT = (size_t)B * T, C = (size_t)m->config.channels;
    const size_t L = (size_t)m->config.num_layers, NH = (size_t)m->config.num_heads;
    const size_t Vp = (size_t)m->config.padded_vocab_size;
    m->inputs = (int *)calloc(BT, sizeof(int));
    m->targets = (int *)calloc(BT, sizeof(int));
    m->encoded = (float *)calloc(BT * C, sizeof(float));
    m->ln1 = (float *)calloc(L * BT * C, sizeof(float));
    m->qkv = (float *)calloc(L * BT * 3 * C, sizeof(float));
    m->atty = (float *)calloc(L * BT * C, sizeof(float));
    m->att = (float *)calloc(L * BT * NH * (size_t)T, sizeof(float));
    m->residual2 = (float *)calloc(L * BT * C, sizeof(float));
    m->ln2 = (float *)calloc(L * BT * C, sizeof(float));
    m->fch = (float *)calloc(L * BT * 4 * C, sizeof(float));
    m->fch_gelu = (float *)calloc(L * BT * 4 * C, sizeof(float));
    m->residual3 = (float *)calloc(L * BT * C, sizeof(float));
    m->lnf = (float *)calloc(BT * C, sizeof(float));
    m->ln1_stats = (double *)calloc(L * BT * 2, sizeof(double));
    m->ln2_stats = (double *)calloc(L * BT * 2, sizeof(double));
    m->lnf_stats = (double *)calloc(BT * 2, sizeof(double));
    m->d_lnf = (double *)calloc(BT * C, sizeof(double));
    m->d_wte_head = (double *)calloc(Vp * C, sizeof(double));
    m->d_res = (double *)calloc(BT * C, sizeof(double));
    m->d_ln = (double *)calloc(BT * C, sizeof(double));
    m->d_atty = (double *)calloc(BT * C, sizeof(double));
    m->d_qkv = (double *)calloc(BT * 3 * C, sizeof(double));
    m->d_fch = (double *)calloc(BT * 4 * C, sizeof(double));
    if (!m->inputs || !m->targets || !m->encoded || !m->ln1 || !m->qkv || !m->atty ||
        !m->att || !m->residual2 || !m->ln2 || !m->fch || !m->fch_gelu || !m->residual3 ||
        !m->lnf || !m->ln1_stats || !m->ln2_stats || !m->lnf_stats || !m->d_lnf ||
        !m->d_wte_head || !m->d_res || !m->d_ln || !m->d_atty || !m->d_qkv || !m->d_fch) {
        free_acts(m);
        set_error(m->error, sizeof(m->error), "out of memory for activations of B=%d T=%d", B, T);
        return -1;
    }
    m->B = B;
    m->T = T;
    return 0;
}

// --- forward pieces ---------------------------------------------------------------------

// out = LayerNorm(x) * w + b per row of C; stats gets (mean, 1/std) per row for the backward
static void layernorm_forward(float *out, double *stats, const float *x, const float *w,
                              const float *b, size_t rows, int C) {
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * C;
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < C; i++) mean += xr[i];
        mean /= C;
        for (int i = 0; i < C; i++) var += ((double)xr[i] - mean) * ((double)xr[i] - mean);
        var /= C;  // biased, as torch and llm.c
        const double rstd = 1.0 / sqrt(var + LN_EPS);
        for (int i = 0; i < C; i++)
            out[r * C + i] = (float)(((double)xr[i] - mean) * rstd * w[i] + b[i]);
        stats[2 * r] = mean;
        stats[2 * r + 1] = rstd;
    }
}

// out (rows, OC) = inp (rows, IC) @ w^T + bias (+ add, a residual (rows, OC), or NULL),
// w (OC, IC) as nn.Linear stores it; the residual joins the double sum, so it rounds once
static void matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                           const float *add, size_t rows, int IC, int OC) {
    for (size_t r = 0; r < rows; r++) {
        const float *x = inp + r * IC;
        for (int o = 0; o < OC; o++) {
            const float *wo = w + (size_t)o * IC;
            double s0 = 0.0, s1 = 0.0;
            int i = 0;
            for (; i + 2 <= IC; i += 2) {
                s0 += (double)x[i] * wo[i];
                s1 += (double)x[i + 1] * wo[i + 1];
            }
            for (; i < IC; i++) s0 += (double)x[i] * wo[i];
            double y = s0 + s1 + (bias ? (double)bias[o] : 0.0);
            if (add) y += add[r * OC + o];
            out[r * OC + o] = (float)y;
        }
    }
}

// causal self-attention of one layer: qkv (B,T,3C) with q, k, v the consecutive C-wide
// slices and head h in columns h*hs..(h+1)*hs-1 of each; att gets the probabilities
// (B,NH,T,T), zero above the diagonal; out (B,T,C) the heads side by side
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    double *p = (double *)malloc((size_t)T * sizeof(double));
    if (p == NULL) abort();  // T doubles; not worth an error path in a test reference
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    double s = 0.0;
                    for (int i = 0; i < hs; i++) s += (double)q[i] * k[i];
                    p[t2] = s * scale;
                    mx = p[t2] > mx ? p[t2] : mx;
                }
                double sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    p[t2] = exp(p[t2] - mx);
                    sum += p[t2];
                }
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                for (int t2 = 0; t2 < T; t2++) {
                    if (t2 <= t) p[t2] /= sum;
                    a[t2] = t2 <= t ? (float)p[t2] : 0.0f;
                }
                float *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) {
                    double s = 0.0;
                    for (int t2 = 0; t2 <= t; t2++)
                        s += p[t2] * qkv[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs + i];
                    o[i] = (float)s;
                }
            }
    free(p);
}

static double gelu(double x) {
    return 0.5 * x * (1.0 + tanh(GELU_SCALE * (x + 0.044715 * x * x * x)));
}

static double gelu_grad(double x) {
    const double u = GELU_SCALE * (x + 0.044715 * x * x * x);
    const double th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * GELU_SCALE * (1.0 + 3.0 * 0.044715 * x * x);
}

int gpt2ref_forward(GPT2Ref *m, const int *inputs, const int *targets, int B, int T) {
    const GPT2RefConfig *c = &m->config;
    m->have_head_grads = 0;
    if (m->params == NULL) {
        set_error(m->error, sizeof(m->error), "forward: the model is not built");
        return -1;
    }
    if (inputs == NULL || targets == NULL) {
        set_error(m->error, sizeof(m->error), "forward: inputs and targets are required");
        return -1;
    }
    if (B <= 0 || T <= 0 || T > c->max_seq_len || (double)B * T > (double)MAX_DIM) {
        set_error(m->error, sizeof(m->error),
                  "forward: B=%d T=%d, need B >= 1, 1 <= T <= %d and B*T <= %d", B, T,
                  c->max_seq_len, MAX_DIM);
        return -1;
    }
    const size_t BT = (size_t)B * T, C = (size_t)c->channels;
    const int V = c->vocab_size, Vp = c->padded_vocab_size, L = c->num_layers, NH = c->num_heads;
    // every id is checked before anything is read through it
    for (size_t i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) {
            set_error(m->error, sizeof(m->error), "forward: inputs[%zu] = %d outside [0, %d)", i,
                      inputs[i], V);
            return -1;
        }
        if (targets[i] != GPT2REF_IGNORE_INDEX && (targets[i] < 0 || targets[i] >= V)) {
            set_error(m->error, sizeof(m->error),
                      "forward: targets[%zu] = %d neither -100 nor in [0, %d)", i, targets[i], V);
            return -1;
        }
    }
    if (ensure_acts(m, B, T) != 0) return -1;
    memcpy(m->inputs, inputs, BT * sizeof(int));
    memcpy(m->targets, targets, BT * sizeof(int));

    float *const P = m->params;
    const size_t *off = m->tensor_offsets;
    const float *wte = P + off[WTE], *wpe = P + off[WPE];
    for (size_t bt = 0; bt < BT; bt++) {
        const float *te = wte + (size_t)inputs[bt] * C, *pe = wpe + (bt % T) * C;
        for (size_t i = 0; i < C; i++) m->encoded[bt * C + i] = te[i] + pe[i];
    }

    const float *res = m->encoded;
    for (int l = 0; l < L; l++) {
        const size_t lc = (size_t)l * C;
        float *ln1 = m->ln1 + l * BT * C, *qkv = m->qkv + l * BT * 3 * C;
        float *atty = m->atty + l * BT * C, *att = m->att + l * BT * NH * T;
        float *res2 = m->residual2 + l * BT * C, *ln2 = m->ln2 + l * BT * C;
        float *fch = m->fch + l * BT * 4 * C, *fchg = m->fch_gelu + l * BT * 4 * C;
        float *res3 = m->residual3 + l * BT * C;
        layernorm_forward(ln1, m->ln1_stats + l * BT * 2, res, P + off[LN1W] + lc,
                          P + off[LN1B] + lc, BT, (int)C);
        matmul_forward(qkv, ln1, P + off[QKVW] + lc * 3 * C, P + off[QKVB] + lc * 3, NULL, BT,
                       (int)C, 3 * (int)C);
        attention_forward(atty, att, qkv, B, T, (int)C, NH);
        matmul_forward(res2, atty, P + off[ATTPROJW] + lc * C, P + off[ATTPROJB] + lc, res, BT,
                       (int)C, (int)C);  // residual2 = res + attproj
        layernorm_forward(ln2, m->ln2_stats + l * BT * 2, res2, P + off[LN2W] + lc,
                          P + off[LN2B] + lc, BT, (int)C);
        matmul_forward(fch, ln2, P + off[FCW] + lc * 4 * C, P + off[FCB] + lc * 4, NULL, BT,
                       (int)C, 4 * (int)C);
        for (size_t i = 0; i < BT * 4 * C; i++) fchg[i] = (float)gelu(fch[i]);
        matmul_forward(res3, fchg, P + off[FCPROJW] + lc * 4 * C, P + off[FCPROJB] + lc, res2,
                       BT, 4 * (int)C, (int)C);  // residual3 = residual2 + fcproj
        res = res3;
    }
    layernorm_forward(m->lnf, m->lnf_stats, res, P + off[LNFW], P + off[LNFB], BT, (int)C);

    // The LM head: flce's fp64 reference gives the loss and, in the same pass, d_lnf and
    // the head's share of d_wte (padding rows excluded from the softmax, zero gradient).
    flce_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.n_tokens = (int64_t)BT;
    cfg.hidden = (int64_t)C;
    cfg.vocab = V;
    cfg.vocab_padded = Vp;
    cfg.dtype = FLCE_FP32;
    cfg.target_type = FLCE_INT32;
    cfg.ignore_index = GPT2REF_IGNORE_INDEX;
    cfg.reduction = FLCE_REDUCTION_MEAN;
    cfg.grad_scale = 1.0f;
    cfg.temperature = 1.0f;  // (flce 1.1: a config not made by flce_config_init must set it)
    cfg.d_hidden_dtype = cfg.d_weight_dtype = cfg.d_bias_dtype = FLCE_FP32;
    int64_t bad = -1;
    flce_status st = flce_reference(&cfg, m->lnf, wte, NULL, (const int32_t *)m->targets, NULL,
                                    &m->loss, NULL, NULL, m->d_lnf, m->d_wte_head, NULL, &bad);
    if (st != FLCE_OK) {
        // (flce_status_string lives in the CUDA library, which this file does not link)
        set_error(m->error, sizeof(m->error), "forward: flce_reference failed: status %d (token %lld)",
                  (int)st, (long long)bad);
        return -1;
    }
    m->have_head_grads = 1;
    return 0;
}

// --- backward pieces --------------------------------------------------------------------

// d_x += LayerNorm backward of d_out for rows of C; d_w, d_b += their parameter gradients
static void layernorm_backward(double *d_x, double *d_w, double *d_b, const double *d_out,
                               const float *x, const double *stats, const float *w, size_t rows,
                               int C) {
    for (size_t r = 0; r < rows; r++) {
        const double mean = stats[2 * r], rstd = stats[2 * r + 1];
        const float *xr = x + r * C;
        const double *dor = d_out + r * C;
        double mean_dn = 0.0, mean_dn_n = 0.0;  // means of d_norm and of d_norm * norm
        for (int i = 0; i < C; i++) {
            const double n = ((double)xr[i] - mean) * rstd, dn = dor[i] * w[i];
            mean_dn += dn;
            mean_dn_n += dn * n;
            d_w[i] += dor[i] * n;
            d_b[i] += dor[i];
        }
        mean_dn /= C;
        mean_dn_n /= C;
        for (int i = 0; i < C; i++) {
            const double n = ((double)xr[i] - mean) * rstd, dn = dor[i] * w[i];
            d_x[r * C + i] += rstd * (dn - mean_dn - n * mean_dn_n);
        }
    }
}

// For out = inp @ w^T + bias: d_inp = d_out @ w (overwritten; may be NULL),
// d_w += d_out^T @ inp, d_bias += column sums of d_out
static void matmul_backward(double *d_inp, double *d_w, double *d_bias, const double *d_out,
                            const float *inp, const float *w, size_t rows, int IC, int OC) {
    if (d_inp) {
        for (size_t r = 0; r < rows; r++) {
            double *di = d_inp + r * IC;
            for (int i = 0; i < IC; i++) di[i] = 0.0;
            for (int o = 0; o < OC; o++) {
                const double d = d_out[r * OC + o];
                const float *wo = w + (size_t)o * IC;
                for (int i = 0; i < IC; i++) di[i] += d * wo[i];
            }
        }
    }
    for (int o = 0; o < OC; o++) {
        double *dw = d_w + (size_t)o * IC, db = 0.0;
        for (size_t r = 0; r < rows; r++) {
            const double d = d_out[r * OC + o];
            const float *x = inp + r * IC;
            for (int i = 0; i < IC; i++) dw[i] += d * x[i];
            db += d;
        }
        d_bias[o] += db;
    }
}

// d_qkv (B,T,3C, overwritten) from d_out (B,T,C) through softmax(q k^T / sqrt(hs)) v
static void attention_backward(double *d_qkv, const double *d_out, const float *qkv,
                               const float *att, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    double *d_att = (double *)malloc((size_t)T * sizeof(double));
    if (d_att == NULL) abort();
    memset(d_qkv, 0, (size_t)B * T * 3 * C * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *p = att + (((size_t)b * NH + h) * T + t) * T;
                const double *dout = d_out + ((size_t)b * T + t) * C + h * hs;
                const size_t row_t = ((size_t)b * T + t) * 3 * C + h * hs;
                // through out = sum_t2 p[t2] v[t2]
                double dot = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const size_t row = ((size_t)b * T + t2) * 3 * C + h * hs;
                    double s = 0.0;
                    for (int i = 0; i < hs; i++) {
                        s += dout[i] * qkv[row + 2 * C + i];
                        d_qkv[row + 2 * C + i] += p[t2] * dout[i];
                    }
                    d_att[t2] = s;
                    dot += p[t2] * s;
                }
                // through the softmax, then the scaled scores q . k
                for (int t2 = 0; t2 <= t; t2++) {
                    const size_t row = ((size_t)b * T + t2) * 3 * C + h * hs;
                    const double dpre = p[t2] * (d_att[t2] - dot) * scale;
                    for (int i = 0; i < hs; i++) {
                        d_qkv[row_t + i] += dpre * qkv[row + C + i];
                        d_qkv[row + C + i] += dpre * qkv[row_t + i];
                    }
                }
            }
    free(d_att);
}

int gpt2ref_backward(GPT2Ref *m) {
    if (!m->have_head_grads) {
        set_error(m->error, sizeof(m->error), "backward: no successful forward to go back through");
        return -1;
    }
    const GPT2RefConfig *c = &m->config;
    const int B = m->B, T = m->T, L = c->num_layers, NH = c->num_heads;
    const size_t BT = (size_t)B * T, C = (size_t)c->channels;
    const float *P = m->params;
    double *G = m->grads64;
    const size_t *off = m->tensor_offsets;
    memset(G, 0, m->num_parameters * sizeof(double));

    // the head: d_wte from the classifier, d_lnf through the final LayerNorm
    memcpy(G + off[WTE], m->d_wte_head, m->tensor_sizes[WTE] * sizeof(double));
    memset(m->d_res, 0, BT * C * sizeof(double));
    const float *res_last = L > 0 ? m->residual3 + (size_t)(L - 1) * BT * C : m->encoded;
    layernorm_backward(m->d_res, G + off[LNFW], G + off[LNFB], m->d_lnf, res_last, m->lnf_stats,
                       P + off[LNFW], BT, (int)C);

    for (int l = L - 1; l >= 0; l--) {
        const size_t lc = (size_t)l * C;
        const float *res = l == 0 ? m->encoded : m->residual3 + (size_t)(l - 1) * BT * C;
        const float *ln1 = m->ln1 + l * BT * C, *qkv = m->qkv + l * BT * 3 * C;
        const float *atty = m->atty + l * BT * C, *att = m->att + l * BT * NH * T;
        const float *res2 = m->residual2 + l * BT * C, *ln2 = m->ln2 + l * BT * C;
        const float *fch = m->fch + l * BT * 4 * C, *fchg = m->fch_gelu + l * BT * 4 * C;

        // MLP branch: d_res is d(residual3) here and becomes d(residual2)
        matmul_backward(m->d_fch, G + off[FCPROJW] + lc * 4 * C, G + off[FCPROJB] + lc, m->d_res,
                        fchg, P + off[FCPROJW] + lc * 4 * C, BT, 4 * (int)C, (int)C);
        for (size_t i = 0; i < BT * 4 * C; i++) m->d_fch[i] *= gelu_grad(fch[i]);
        matmul_backward(m->d_ln, G + off[FCW] + lc * 4 * C, G + off[FCB] + lc * 4, m->d_fch, ln2,
                        P + off[FCW] + lc * 4 * C, BT, (int)C, 4 * (int)C);
        layernorm_backward(m->d_res, G + off[LN2W] + lc, G + off[LN2B] + lc, m->d_ln, res2,
                           m->ln2_stats + l * BT * 2, P + off[LN2W] + lc, BT, (int)C);

        // attention branch: d_res becomes d(res), the gradient of the block's input
        matmul_backward(m->d_atty, G + off[ATTPROJW] + lc * C, G + off[ATTPROJB] + lc, m->d_res,
                        atty, P + off[ATTPROJW] + lc * C, BT, (int)C, (int)C);
        attention_backward(m->d_qkv, m->d_atty, qkv, att, B, T, (int)C, NH);
        matmul_backward(m->d_ln, G + off[QKVW] + lc * 3 * C, G + off[QKVB] + lc * 3, m->d_qkv,
                        ln1, P + off[QKVW] + lc * 3 * C, BT, (int)C, 3 * (int)C);
        layernorm_backward(m->d_res, G + off[LN1W] + lc, G + off[LN1B] + lc, m->d_ln, res,
                           m->ln1_stats + l * BT * 2, P + off[LN1W] + lc, BT, (int)C);
    }

    // the embeddings: each token's gradient goes to its wte row and its position's wpe row
    for (size_t bt = 0; bt < BT; bt++) {
        double *dte = G + off[WTE] + (size_t)m->inputs[bt] * C;
        double *dpe = G + off[WPE] + (bt % T) * C;
        for (size_t i = 0; i < C; i++) {
            dte[i] += m->d_res[bt * C + i];
            dpe[i] += m->d_res[bt * C + i];
        }
    }
    for (size_t i = 0; i < m->num_parameters; i++) m->grads[i] = (float)G[i];
    return 0;
}

double gpt2ref_grad_norm(const GPT2Ref *m) {
    double s = 0.0;
    for (size_t i = 0; i < m->num_parameters; i++) s += (double)m->grads[i] * m->grads[i];
    return sqrt(s);
}

double gpt2ref_update(GPT2Ref *m, float lr, float beta1, float beta2, float eps,
                      float weight_decay, float grad_clip, int t) {
    const double norm = gpt2ref_grad_norm(m);
    const double s = grad_clip > 0.0f && norm > grad_clip ? grad_clip / norm : 1.0;
    // the hyperparameters are used as the float values they are (as a float32 trainer
    // passes them), widened to double
    const double b1 = beta1, b2 = beta2, ep = eps, lrd = lr;
    const double c1 = 1.0 - pow(b1, t), c2 = 1.0 - pow(b2, t);
    for (int k = 0; k < GPT2REF_NUM_TENSORS; k++) {
        const double wd = gpt2ref_is_decayed(k) ? (double)weight_decay : 0.0;
        const size_t o = m->tensor_offsets[k];
        for (size_t i = o; i < o + m->tensor_sizes[k]; i++) {
            const double g = s * m->grads[i];
            const double mi = b1 * m->m[i] + (1.0 - b1) * g;
            const double vi = b2 * m->v[i] + (1.0 - b2) * g * g;
            m->m[i] = (float)mi;
            m->v[i] = (float)vi;
            const double p = m->params[i];
            m->params[i] = (float)(p - lrd * ((mi / c1) / (sqrt(vi / c2) + ep) + wd * p));
        }
    }
    return norm;
}

void gpt2ref_reset_optimizer(GPT2Ref *m) {
    memset(m->m, 0, m->num_parameters * sizeof(float));
    memset(m->v, 0, m->num_parameters * sizeof(float));
}

// --- the debug state ----------------------------------------------------------------------

void gpt2ref_state_free(GPT2RefState *s) {
    if (s == NULL) return;
    free(s->x);
    free(s->y);
    free(s->grads);
    free(s->losses);
    free(s->norms);
    free(s->final_params);
    char error[sizeof(s->error)];
    memcpy(error, s->error, sizeof(error));
    memset(s, 0, sizeof(*s));
    memcpy(s->error, error, sizeof(error));
}

static float header_float(const int32_t *hd, int i) {
    float f;
    memcpy(&f, &hd[i], sizeof(f));
    return f;
}

int gpt2ref_state_load(GPT2RefState *s, const char *path, const GPT2Ref *m) {
    memset(s, 0, sizeof(*s));
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        set_error(s->error, sizeof(s->error), "cannot open state file %s: %s", path,
                  strerror(errno));
        return -1;
    }
    int32_t hd[256];
    const long size = file_size(f);
    int ok = size >= (long)sizeof(hd) && fread(hd, sizeof(int32_t), 256, f) == 256;
    if (!ok) {
        set_error(s->error, sizeof(s->error), "%s: %ld bytes, shorter than the 1024-byte header",
                  path, size);
        fclose(f);
        return -1;
    }
    const char *why = NULL;
    if (hd[0] != GPT2REF_STATE_MAGIC) why = "magic is not 20240327 (an llm.c debug state)";
    else if (hd[1] != GPT2REF_STATE_VERSION) why = "version is not 2";
    else if (hd[4] != 0) why = "it stores logits (header[4] != 0), which this reader does not take";
    else if (hd[2] <= 0 || hd[3] <= 0 || hd[3] > m->config.max_seq_len ||
             (double)hd[2] * hd[3] > (double)MAX_DIM)
        why = "B or T out of range (need B >= 1 and 1 <= T <= the model's max_seq_len)";
    else if ((size_t)hd[5] != m->num_parameters)
        why = "its parameter count differs from the model's";
    else if (hd[6] < 0 || hd[6] > 100000 || hd[7] < 0 || hd[7] > GPT2REF_MAX_RUNS)
        why = "steps or runs out of range";
    else if (hd[8] < -1 || hd[8] >= hd[7])
        why = "the final-parameters run index is out of range";
    if (why) {
        set_error(s->error, sizeof(s->error), "%s: bad header: %s (header: %d %d %d %d %d %d %d %d %d)",
                  path, why, hd[0], hd[1], hd[2], hd[3], hd[4], hd[5], hd[6], hd[7], hd[8]);
        fclose(f);
        return -1;
    }
    s->B = hd[2];
    s->T = hd[3];
    s->num_parameters = m->num_parameters;
    s->n_steps = hd[6];
    s->n_runs = hd[7];
    s->final_params_run = hd[8];
    s->lr = header_float(hd, 16);
    s->beta1 = header_float(hd, 17);
    s->beta2 = header_float(hd, 18);
    s->eps = header_float(hd, 19);
    s->grad_clip = header_float(hd, 20);
    for (int r = 0; r < s->n_runs; r++) s->weight_decay[r] = header_float(hd, 21 + r);

    const size_t BT = (size_t)s->B * s->T, P = s->num_parameters;
    const size_t RS = (size_t)s->n_runs * s->n_steps;
    const size_t expected = sizeof(hd) + 2 * BT * sizeof(int32_t) + sizeof(float) +
                            P * sizeof(float) + 2 * RS * sizeof(float) +
                            (s->final_params_run >= 0 ? P * sizeof(float) : 0);
    if ((size_t)size != expected) {
        set_error(s->error, sizeof(s->error),
                  "%s: %ld bytes, expected %zu for B=%d T=%d, %zu parameters, %d runs of %d steps",
                  path, size, expected, s->B, s->T, P, s->n_runs, s->n_steps);
        fclose(f);
        return -1;
    }
    s->x = (int *)malloc(BT * sizeof(int));
    s->y = (int *)malloc(BT * sizeof(int));
    s->grads = (float *)malloc(P * sizeof(float));
    s->losses = (float *)malloc((RS ? RS : 1) * sizeof(float));
    s->norms = (float *)malloc((RS ? RS : 1) * sizeof(float));
    if (s->final_params_run >= 0) s->final_params = (float *)malloc(P * sizeof(float));
    if (!s->x || !s->y || !s->grads || !s->losses || !s->norms ||
        (s->final_params_run >= 0 && !s->final_params)) {
        set_error(s->error, sizeof(s->error), "%s: out of memory", path);
        gpt2ref_state_free(s);
        fclose(f);
        return -1;
    }
    ok = fread(s->x, sizeof(int), BT, f) == BT && fread(s->y, sizeof(int), BT, f) == BT &&
         fread(&s->loss, sizeof(float), 1, f) == 1 && fread(s->grads, sizeof(float), P, f) == P;
    for (int r = 0; ok && r < s->n_runs; r++)
        ok = fread(s->losses + (size_t)r * s->n_steps, sizeof(float), s->n_steps, f) ==
                 (size_t)s->n_steps &&
             fread(s->norms + (size_t)r * s->n_steps, sizeof(float), s->n_steps, f) ==
                 (size_t)s->n_steps;
    if (ok && s->final_params) ok = fread(s->final_params, sizeof(float), P, f) == P;
    fclose(f);
    if (!ok) {
        set_error(s->error, sizeof(s->error), "%s: read error", path);
        gpt2ref_state_free(s);
        return -1;
    }
    for (size_t i = 0; i < BT; i++) {
        if (s->x[i] < 0 || s->x[i] >= m->config.vocab_size || s->y[i] < 0 ||
            s->y[i] >= m->config.vocab_size) {
            set_error(s->error, sizeof(s->error), "%s: token %zu: x = %d, y = %d, outside [0, %d)",
                      path, i, s->x[i], s->y[i], m->config.vocab_size);
            gpt2ref_state_free(s);
            return -1;
        }
    }
    return 0;
}
