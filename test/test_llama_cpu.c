/*
test_llama_cpu.c - CPU tests of the Llama 3 / Qwen2.5 family: the reference (test/llama_ref.c)
against central finite differences in double on tiny models of every variant (tied or untied
head, q/k/v biases or none, llama3 rope scaling or none, grouped or plain multi-head attention),
its RoPE frequencies against bands counted by hand, and its loss at transformers' init (near
ln V); then llmc/llama.h: the descriptors' published values and parameter counts, the table
against the reference's layout, the Hugging Face names, the initialisation's order and
statistics, the model file (round trip; every bad header field, truncation and trailing bytes
refused, naming the file and the field), llama_config_check's refusals, the family functions,
and llmc/models.h picking the family of each descriptor and file (GPT-2's path unchanged).
Needs no GPU.

    build/test_llama_cpu          (the last line is "N passed, M failed")
Temporary files go to a fresh /tmp/test_llama_cpu_XXXXXX directory, removed at the end.
*/
#define _POSIX_C_SOURCE 200809L  // mkdtemp
#include "../llmc/models.h"
#include "llama_ref.h"
#include "test_util.h"
#include "test_files.h"

#include <sys/stat.h>

// the reference's configuration of a llmc/llama.h model (maxT capped: the reference's sizes)
static LlamaRefConfig ref_config_of(const LlamaConfig *c, int max_seq_len) {
    LlamaRefConfig r;
    memset(&r, 0, sizeof(r));
    r.vocab_size = c->vocab_size;
    r.padded_vocab_size = c->padded_vocab_size;
    r.channels = c->hidden_size;
    r.num_layers = c->num_hidden_layers;
    r.num_heads = c->num_attention_heads;
    r.num_kv_heads = c->num_key_value_heads;
    r.head_dim = c->head_dim;
    r.intermediate = c->intermediate_size;
    r.max_seq_len = max_seq_len < c->max_position_embeddings ? max_seq_len : c->max_position_embeddings;
    r.tied = c->tie_word_embeddings;
    r.qkv_bias = c->attention_bias;
    r.rms_eps = c->rms_norm_eps;
    r.rope_theta = c->rope_theta;
    r.rope_llama3 = c->rope_scaling == LLAMA_ROPE_LLAMA3;
    r.rope_factor = c->rope_factor;
    r.rope_low_freq_factor = c->rope_low_freq_factor;
    r.rope_high_freq_factor = c->rope_high_freq_factor;
    r.rope_original_max_pos = c->rope_original_max_position_embeddings;
    return r;
}

// a descriptor's configuration (they are the test's fixed inputs: a failure ends the test)
static LlamaConfig desc_config(const char *name) {
    LlamaConfig c;
    char err[512];
    memset(&c, 0, sizeof(c));
    if (llama_config_from_descriptor(name, 0, &c, err, sizeof(err)) != 0) {
        printf("FAIL  descriptor %s: %s\n", name, err);
        exit(1);
    }
    return c;
}

// small models llama_config_check accepts (head_dim 16): a Llama with rope scaling and an untied
// head, a Qwen2 with biases and a tied one
static LlamaConfig small_llama(void) {
    LlamaConfig c;
    memset(&c, 0, sizeof(c));
    c.model_type = LLAMA_TYPE_LLAMA;
    c.hidden_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.intermediate_size = 128;
    c.vocab_size = 300;
    c.padded_vocab_size = 384;
    c.max_position_embeddings = 256;
    c.tie_word_embeddings = 0;
    c.attention_bias = 0;
    c.rope_scaling = LLAMA_ROPE_LLAMA3;
    c.rope_original_max_position_embeddings = 64;
    c.bos_token_id = 0;
    c.eos_token_id = 1;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.rope_factor = 8.0;
    c.rope_low_freq_factor = 1.0;
    c.rope_high_freq_factor = 4.0;
    c.initializer_range = 0.02;
    return c;
}

static LlamaConfig small_qwen(void) {
    LlamaConfig c = small_llama();
    c.model_type = LLAMA_TYPE_QWEN2;
    c.hidden_size = 32;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.intermediate_size = 64;
    c.vocab_size = 100;
    c.padded_vocab_size = 128;
    c.max_position_embeddings = 64;
    c.tie_word_embeddings = 1;
    c.attention_bias = 1;
    c.rope_scaling = LLAMA_ROPE_NONE;
    c.rope_original_max_position_embeddings = 0;
    c.rope_factor = c.rope_low_freq_factor = c.rope_high_freq_factor = 0.0;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1e6;
    return c;
}

// ----------------------------------------------------------------------------
// the reference: finite differences

enum { FD_B = 2, FD_T = 5 };
#define FD_H_DIR 1e-5     // step along a whole tensor's random +-1 direction
#define FD_H_ONE 1e-4     // step of a single element
#define TOL_FD_DIR 1e-7   // |D - A| / sum |g_i d_i|; ~1e-10 seen
#define TOL_FD_ONE 1e-6   // |D - A| / |A|; ~1e-9 seen

typedef struct {
    const char *what;
    LlamaRefConfig c;
} FdVariant;

static const FdVariant fd_variants[] = {
    {"untied, bias, llama3 scaling (all 3 bands), GQA 2/1, hd 8",
     {.vocab_size = 37, .padded_vocab_size = 48, .channels = 16, .num_layers = 2, .num_heads = 2, .num_kv_heads = 1,
      .head_dim = 8, .intermediate = 24, .max_seq_len = 8, .tied = 0, .qkv_bias = 1, .rms_eps = 1e-5,
      .rope_theta = 10000.0, .rope_llama3 = 1, .rope_factor = 8.0, .rope_low_freq_factor = 1.0,
      .rope_high_freq_factor = 4.0, .rope_original_max_pos = 1000.0}},
    {"tied, no bias, no scaling, MHA 4/4, hd 4",
     {.vocab_size = 37, .padded_vocab_size = 40, .channels = 16, .num_layers = 2, .num_heads = 4, .num_kv_heads = 4,
      .head_dim = 4, .intermediate = 24, .max_seq_len = 8, .tied = 1, .qkv_bias = 0, .rms_eps = 1e-5,
      .rope_theta = 10000.0}},
    {"tied, bias, llama3 scaling, GQA 4/2, hd 4",
     {.vocab_size = 37, .padded_vocab_size = 48, .channels = 16, .num_layers = 2, .num_heads = 4, .num_kv_heads = 2,
      .head_dim = 4, .intermediate = 24, .max_seq_len = 8, .tied = 1, .qkv_bias = 1, .rms_eps = 1e-6,
      .rope_theta = 10000.0, .rope_llama3 = 1, .rope_factor = 32.0, .rope_low_freq_factor = 1.0,
      .rope_high_freq_factor = 4.0, .rope_original_max_pos = 64.0}},
    {"untied, no bias, no scaling, GQA 4/2, hd 6, L 3, no padding rows",
     {.vocab_size = 37, .padded_vocab_size = 37, .channels = 24, .num_layers = 3, .num_heads = 4, .num_kv_heads = 2,
      .head_dim = 6, .intermediate = 16, .max_seq_len = 8, .tied = 0, .qkv_bias = 0, .rms_eps = 1e-5,
      .rope_theta = 500000.0}},
};

static double fd_loss(LlamaRef *m, const int *x, const int *y) {
    if (llamaref_forward(m, x, y, FD_B, FD_T) != 0) return NAN;
    return m->loss;
}

// the central difference along d of the n parameters at p, and the analytic sum g . d
static void fd_step(LlamaRef *m, const int *x, const int *y, double *p, const double *g, const double *d, size_t n,
                    double h, double *D, double *A, double *scale) {
    double *save = (double *)malloc(n * sizeof(double));
    if (save == NULL) abort();
    memcpy(save, p, n * sizeof(double));
    for (size_t i = 0; i < n; i++) p[i] = save[i] + h * d[i];
    const double lp = fd_loss(m, x, y);
    for (size_t i = 0; i < n; i++) p[i] = save[i] - h * d[i];
    const double lm = fd_loss(m, x, y);
    memcpy(p, save, n * sizeof(double));
    free(save);
    *D = (lp - lm) / (2.0 * h);
    *A = *scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        *A += g[i] * d[i];
        *scale += fabs(g[i] * d[i]);
    }
}

static void fd_variant(const FdVariant *v) {
    printf("-- finite differences: %s\n", v->what);
    LlamaRef m;
    const int built = llamaref_build(&m, &v->c) == 0;
    if (!test_check(built, "build%s%s", built ? "" : ": ", m.error)) return;
    const LlamaRefConfig *c = &m.config;
    uint64_t st = 12345;
    for (int k = 0; k < LLAMAREF_NUM_TENSORS; k++) {
        const size_t n = m.tensor_sizes[k];
        float *tmp = (float *)malloc((n ? n : 1) * sizeof(float));
        if (tmp == NULL) abort();
        // norms near 1, biases and matrices away from 0: every term of every gradient counts
        fill_uniform(tmp, n, llamaref_is_decayed(k) ? 0.4f : 0.3f, &st);
        const int norm = k == LLAMAREF_LN1W || k == LLAMAREF_LN2W || k == LLAMAREF_LNFW;
        for (size_t i = 0; i < n; i++) m.params[m.tensor_offsets[k] + i] = tmp[i] + (norm ? 1.0 : 0.0);
        free(tmp);
    }
    // large padding rows: any leak of them into the softmax would move the loss a lot
    const size_t C = (size_t)c->channels, V = (size_t)c->vocab_size, Vp = (size_t)c->padded_vocab_size;
    const int heads[2] = {LLAMAREF_EMBED, LLAMAREF_LM_HEAD};
    for (int j = 0; j < 2; j++)
        if (m.tensor_sizes[heads[j]] > 0)
            for (size_t i = V * C; i < Vp * C; i++) m.params[m.tensor_offsets[heads[j]] + i] = 3.0;
    int x[FD_B * FD_T], y[FD_B * FD_T];
    for (int i = 0; i < FD_B * FD_T; i++) {
        x[i] = (i * 7 + 3) % c->vocab_size;
        y[i] = (i * 5 + 1) % c->vocab_size;
    }
    y[3] = LLAMAREF_IGNORE_INDEX;     // one ignored target: the mean runs over the other 9
    x[FD_T + 2] = x[FD_T + 4] = x[1];  // a repeated token: its embedding row sums positions
    int ok = llamaref_forward(&m, x, y, FD_B, FD_T) == 0 && llamaref_backward(&m) == 0;
    if (!test_check(ok && m.n_targets == FD_B * FD_T - 1 && isfinite(m.loss),
                    "forward + backward (loss %.6f over %d targets)%s%s", m.loss, m.n_targets, ok ? "" : ": ",
                    ok ? "" : m.error)) {
        llamaref_free(&m);
        return;
    }
    // RoPE at position 0 is the identity: the rotated q/k of the first token equal the projections
    const size_t QKV = ((size_t)c->num_heads + 2 * (size_t)c->num_kv_heads) * (size_t)c->head_dim;
    test_check(memcmp(m.qkv, m.qkvr, QKV * sizeof(double)) == 0 &&
               memcmp(m.qkv + QKV, m.qkvr + QKV, QKV * sizeof(double)) != 0,
               "RoPE: position 0 unrotated, position 1 rotated");

    const size_t np = m.num_parameters;
    double *g = (double *)malloc(np * sizeof(double)), *d = (double *)malloc(np * sizeof(double));
    if (g == NULL || d == NULL) abort();
    memcpy(g, m.grads, np * sizeof(double));
    for (size_t i = 0; i < np; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        d[i] = (st >> 63) ? 1.0 : -1.0;
    }
    double worst = 0.0;
    for (int k = 0; k < LLAMAREF_NUM_TENSORS; k++) {
        const size_t o = m.tensor_offsets[k], n = m.tensor_sizes[k];
        if (n == 0) continue;
        double D, A, S;
        fd_step(&m, x, y, m.params + o, g + o, d + o, n, FD_H_DIR, &D, &A, &S);
        const double e = S > 0.0 ? fabs(D - A) / S : INFINITY;
        worst = e > worst || isnan(e) ? e : worst;
        test_check(e < TOL_FD_DIR, "d %-8s (%5zu) along a +-1 direction: D %+.10e A %+.10e rel %.1e", llamaref_tensor_names[k],
                   n, D, A, e);
    }
    // single elements: an input's embedding row, a k row of the last layer, a v bias, an up row
    // of gateupw, downw, the norms, and lm_head's row of a target
    const int Lm1 = c->num_layers - 1, NHhd = c->num_heads * c->head_dim, NKVhd = c->num_kv_heads * c->head_dim;
    const struct { int k; size_t i; const char *what; } one[] = {
        {LLAMAREF_EMBED, (size_t)x[1] * C + 3, "embed[x1][3]"},
        {LLAMAREF_QKVW, ((size_t)Lm1 * QKV + NHhd + 1) * C + 2, "qkvw[L-1][k row 1][2]"},
        {LLAMAREF_QKVB, (size_t)Lm1 * QKV + NHhd + NKVhd + 2, "qkvb[L-1][v 2]"},
        {LLAMAREF_ATTPROJW, (size_t)1 * NHhd + 5, "attprojw[0][1][5]"},
        {LLAMAREF_GATEUPW, ((size_t)c->intermediate + 3) * C + 1, "gateupw[0][up 3][1]"},
        {LLAMAREF_DOWNW, (size_t)Lm1 * C * c->intermediate + 7, "downw[L-1][0][7]"},
        {LLAMAREF_LN1W, 2, "ln1w[0][2]"},
        {LLAMAREF_LN2W, (size_t)Lm1 * C + 4, "ln2w[L-1][4]"},
        {LLAMAREF_LNFW, 1, "lnfw[1]"},
        {LLAMAREF_LM_HEAD, (size_t)y[0] * C + 2, "lm_head[y0][2]"},
    };
    const double one_d = 1.0;
    for (size_t j = 0; j < sizeof(one) / sizeof(one[0]); j++) {
        if (m.tensor_sizes[one[j].k] == 0) continue;
        const size_t at = m.tensor_offsets[one[j].k] + one[j].i;
        double D, A, S;
        fd_step(&m, x, y, m.params + at, g + at, &one_d, 1, FD_H_ONE, &D, &A, &S);
        const double e = fabs(D - A) / fabs(A);
        test_check(e < TOL_FD_ONE && A != 0.0, "d %-24s: D %+.10e A %+.10e rel %.1e", one[j].what, D, A, e);
    }
    // the padding rows: outside the softmax and never an input, so exactly no gradient, and the
    // loss does not move at all when they do
    size_t nonzero = 0, rows = 0;
    for (int j = 0; j < 2; j++) {
        if (m.tensor_sizes[heads[j]] == 0 || Vp == V) continue;
        const size_t o = m.tensor_offsets[heads[j]] + V * C;
        for (size_t i = 0; i < (Vp - V) * C; i++) nonzero += g[o + i] != 0.0;
        double D, A, S;
        fd_step(&m, x, y, m.params + o, g + o, d + o, (Vp - V) * C, 0.5, &D, &A, &S);
        nonzero += D != 0.0;
        rows += Vp - V;
    }
    if (Vp > V)
        test_check(nonzero == 0, "padding rows V..Vp (%zu rows): gradient exactly 0, loss unmoved by them", rows);
    printf("  (largest direction error %.1e)\n", worst);
    free(g);
    free(d);
    llamaref_free(&m);
}

// RoPE's frequencies: the llama3 bands of Llama 3.1 (hd 128) and 3.2 (hd 64), counted by hand:
// wavelength 2 pi 500000^(2i/hd) is below 8192/4 for i <= 28 (hd 128) or 14 (hd 64), above
// 8192/1 for i >= 35 or 18
static void test_rope_frequencies(void) {
    printf("-- RoPE frequencies\n");
    const struct { int hd; double factor; int keep, blend, scaled; } cases[] = {{128, 8.0, 29, 6, 29}, {64, 32.0, 15, 3, 14}};
    for (int k = 0; k < 2; k++) {
        LlamaRefConfig c;
        memset(&c, 0, sizeof(c));
        c.head_dim = cases[k].hd;
        c.rope_theta = 500000.0;
        double plain[64], scaled[64];
        llamaref_rope_inv_freq(&c, plain);
        c.rope_llama3 = 1;
        c.rope_factor = cases[k].factor;
        c.rope_low_freq_factor = 1.0;
        c.rope_high_freq_factor = 4.0;
        c.rope_original_max_pos = 8192.0;
        llamaref_rope_inv_freq(&c, scaled);
        int keep = 0, blend = 0, div = 0, ok = plain[0] == 1.0, monotone = 1;
        for (int i = 0; i < cases[k].hd / 2; i++) {
            const double want = 1.0 / pow(500000.0, 2.0 * i / cases[k].hd);
            ok = ok && plain[i] == (double)(float)want;
            if (scaled[i] == plain[i]) keep += blend == 0 && div == 0;
            else if (scaled[i] == (double)(float)(want / cases[k].factor)) div++;
            else if (scaled[i] < plain[i] && scaled[i] > plain[i] / cases[k].factor) blend += div == 0;
            if (i > 0) monotone = monotone && scaled[i] < scaled[i - 1];
        }
        test_check(ok && monotone && keep == cases[k].keep && blend == cases[k].blend && div == cases[k].scaled,
                   "hd %d, theta 500000, llama3 x%g (1, 4, 8192): %d kept, %d blended, %d divided (want %d, %d, %d); "
                   "plain ones theta^(-2i/hd) in float32", cases[k].hd, cases[k].factor, keep, blend, div, cases[k].keep,
                   cases[k].blend, cases[k].scaled);
    }
}

// the loss of a model at transformers' init is near ln V (logits of std ~0.02 sqrt(C))
static void test_init_loss(void) {
    printf("-- the loss at init\n");
    const LlamaConfig cs[2] = {small_llama(), small_qwen()};
    for (int k = 0; k < 2; k++) {
        const LlamaConfig *c = &cs[k];
        const LlamaRefConfig rc = ref_config_of(c, 64);
        LlamaRef m;
        const size_t n = llama_num_parameters(c);
        float *p = (float *)malloc(n * sizeof(float));
        if (p == NULL || llamaref_build(&m, &rc) != 0) abort();
        llama_init_random(c, p);
        llamaref_set_params_f32(&m, p);
        enum { B = 2, T = 32 };
        int x[B * T], y[B * T];
        uint64_t st = 99;
        for (int i = 0; i < B * T; i++) {
            st = st * 6364136223846793005ULL + 1442695040888963407ULL;
            x[i] = (int)((st >> 33) % (uint64_t)c->vocab_size);
            y[i] = (int)((st >> 13) % (uint64_t)c->vocab_size);
        }
        const int ok = llamaref_forward(&m, x, y, B, T) == 0;
        const double lnv = log((double)c->vocab_size);
        test_check(ok && fabs(m.loss - lnv) < 0.05, "%s (V %d): loss %.4f vs ln V %.4f", llama_model_type_name(c->model_type),
                   c->vocab_size, m.loss, lnv);
        llamaref_free(&m);
        free(p);
    }
}

// ----------------------------------------------------------------------------
// llmc/llama.h: descriptors, table, names, init

typedef struct {
    const char *name;
    int type, C, L, NH, NKV, I, V, maxT, tied, bias, scaling, original, bos, eos;
    double eps, theta, factor, low, high;
    size_t params;     // as published (Hugging Face's model cards / num_parameters())
    size_t hf_tensors; // tensors in the published checkpoint
} Published;

static const Published published[] = {
    {"llama3.2-1b", LLAMA_TYPE_LLAMA, 2048, 16, 32, 8, 8192, 128256, 131072, 1, 0, 1, 8192, 128000, 128001,
     1e-5, 500000.0, 32.0, 1.0, 4.0, 1235814400u, 146},
    {"llama3.2-3b", LLAMA_TYPE_LLAMA, 3072, 28, 24, 8, 8192, 128256, 131072, 1, 0, 1, 8192, 128000, 128001,
     1e-5, 500000.0, 32.0, 1.0, 4.0, 3212749824u, 254},
    {"llama3.1-8b", LLAMA_TYPE_LLAMA, 4096, 32, 32, 8, 14336, 128256, 131072, 0, 0, 1, 8192, 128000, 128001,
     1e-5, 500000.0, 8.0, 1.0, 4.0, (size_t)8030261248ull, 291},
    {"qwen2.5-0.5b", LLAMA_TYPE_QWEN2, 896, 24, 14, 2, 4864, 151936, 32768, 1, 1, 0, 0, 151643, 151643,
     1e-6, 1000000.0, 0.0, 0.0, 0.0, 494032768u, 290},
    {"qwen2.5-1.5b", LLAMA_TYPE_QWEN2, 1536, 28, 12, 2, 8960, 151936, 32768, 1, 1, 0, 0, 151643, 151643,
     1e-6, 1000000.0, 0.0, 0.0, 0.0, 1543714304u, 338},
};

static void test_descriptors(void) {
    printf("-- descriptors\n");
    char err[1024] = "";
    for (size_t k = 0; k < sizeof(published) / sizeof(published[0]); k++) {
        const Published *p = &published[k];
        LlamaConfig c;
        const int rc = llama_config_from_descriptor(p->name, 0, &c, err, sizeof(err));
        const int ok = rc == 0 && llama_config_check(&c, err, sizeof(err)) == 0 && c.model_type == p->type &&
                       c.hidden_size == p->C && c.num_hidden_layers == p->L && c.num_attention_heads == p->NH &&
                       c.num_key_value_heads == p->NKV && c.head_dim == p->C / p->NH && c.intermediate_size == p->I &&
                       c.vocab_size == p->V && c.padded_vocab_size == p->V && c.max_position_embeddings == p->maxT &&
                       c.tie_word_embeddings == p->tied && c.attention_bias == p->bias && c.rope_scaling == p->scaling &&
                       c.rope_original_max_position_embeddings == p->original && c.bos_token_id == p->bos &&
                       c.eos_token_id == p->eos && c.rms_norm_eps == p->eps && c.rope_theta == p->theta &&
                       c.rope_factor == p->factor && c.rope_low_freq_factor == p->low &&
                       c.rope_high_freq_factor == p->high && c.initializer_range == 0.02;
        test_check(ok && llama_num_parameters(&c) == p->params && llama_hf_num_tensors(&c) == p->hf_tensors,
                   "%-12s: config.json's values, %zu parameters (published %zu), %zu checkpoint tensors%s%s", p->name,
                   rc == 0 ? llama_num_parameters(&c) : 0, p->params, rc == 0 ? llama_hf_num_tensors(&c) : 0,
                   ok ? "" : ": ", ok ? "" : err);
    }
    // the test models: every feature at head_dim 64
    LlamaConfig t, q;
    int ok = llama_config_from_descriptor("llama-test", 0, &t, err, sizeof(err)) == 0 &&
             llama_config_check(&t, err, sizeof(err)) == 0 &&
             llama_config_from_descriptor("qwen-test", 0, &q, err, sizeof(err)) == 0 &&
             llama_config_check(&q, err, sizeof(err)) == 0;
    test_check(ok && t.head_dim == 64 && t.num_hidden_layers == 4 && t.hidden_size == 512 && t.num_attention_heads == 8 &&
               t.num_key_value_heads == 2 && t.intermediate_size == 1408 && t.vocab_size == 128256 &&
               t.rope_scaling == LLAMA_ROPE_LLAMA3 && !t.tie_word_embeddings && !t.attention_bias &&
               t.max_position_embeddings >= 1024 && t.rms_norm_eps == 1e-5,
               "llama-test: 4 layers of 512, 8/2 heads of 64, 1408, V 128256, llama3 scaling, untied%s%s",
               ok ? "" : ": ", ok ? "" : err);
    test_check(ok && q.head_dim == 64 && q.num_hidden_layers == 4 && q.hidden_size == 512 && q.num_attention_heads == 8 &&
               q.num_key_value_heads == 2 && q.intermediate_size == 1408 && q.vocab_size == 151936 &&
               q.rope_scaling == LLAMA_ROPE_NONE && q.tie_word_embeddings && q.attention_bias &&
               q.max_position_embeddings >= 1024 && q.rms_norm_eps == 1e-6 && q.rope_theta == 1e6,
               "qwen-test: 4 layers of 512, 8/2 heads of 64, 1408, V 151936, q/k/v bias, tied, eps 1e-6, theta 1e6");
    // a fresh model's vocabulary (-V)
    LlamaConfig v;
    ok = llama_config_from_descriptor("qwen2.5-0.5b", 50257, &v, err, sizeof(err)) == 0 &&
         llama_config_check(&v, err, sizeof(err)) == 0;
    test_check(ok && v.vocab_size == 50257 && v.padded_vocab_size == 50304 && v.bos_token_id == -1 &&
                   v.eos_token_id == -1 && v.hidden_size == 896,
               "-V 50257: padded to 50304, bos/eos outside the vocabulary become -1%s%s", ok ? "" : ": ", ok ? "" : err);
    ok = llama_config_from_descriptor("llama3.2-1b", LLAMA_MAX_VOCAB, &v, err, sizeof(err)) == 0;
    test_check(ok && v.padded_vocab_size == LLAMA_MAX_VOCAB && v.bos_token_id == 128000,
               "the largest vocabulary pads without overflow (%d)", v.padded_vocab_size);
    test_check(llama_config_from_descriptor("llama3.2-1b", -1, &v, err, sizeof(err)) != 0 && contains(err, "-1 outside"),
               "a negative vocabulary is refused: %s", err);
    test_check(llama_config_from_descriptor("llama3.2-2b", 0, &v, err, sizeof(err)) != 0 && contains(err, "'llama3.2-2b'"),
               "an unknown descriptor is refused: %s", err);
    test_check(llama_is_descriptor("qwen2.5-0.5b") && llama_is_descriptor("llama-test") &&
                   !llama_is_descriptor("qwen2.5-0.5b/model.bin") && !llama_is_descriptor("Qwen2.5-0.5B") &&
                   !llama_is_descriptor("d12") && !llama_is_descriptor(""),
               "descriptors are whole names: qwen2.5-0.5b/model.bin is a path");
}

// the table against the reference's own layout, and against its definition
static void test_table(void) {
    printf("-- the parameter table\n");
    const LlamaConfig cs[2] = {small_llama(), small_qwen()};
    for (int k = 0; k < 2; k++) {
        const LlamaConfig *c = &cs[k];
        ParameterTensor t[LLAMA_MAX_TENSORS];
        const int n = llama_parameter_tensors(c, t);
        const LlamaRefConfig rc = ref_config_of(c, 8);
        LlamaRef m;
        if (llamaref_build(&m, &rc) != 0) abort();
        int ok = (size_t)llama_num_parameters(c) == m.num_parameters, j = 0, decay = 0;
        for (int r = 0; r < LLAMAREF_NUM_TENSORS; r++) {
            if (m.tensor_sizes[r] == 0) continue;
            ok = ok && j < n && strcmp(t[j].name, llamaref_tensor_names[r]) == 0 && t[j].numel == m.tensor_sizes[r] &&
                 t[j].offset == m.tensor_offsets[r] && t[j].weight_decay == llamaref_is_decayed(r) &&
                 t[j].layered == (r != LLAMAREF_EMBED && r != LLAMAREF_LNFW && r != LLAMAREF_LM_HEAD) &&
                 (!t[j].layered || t[j].shape[0] == (size_t)c->num_hidden_layers);
            decay += t[j].weight_decay;
            j++;
        }
        const size_t C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
        const ParameterTensor *qkvw = &t[2], *gate = &t[c->attention_bias ? 6 : 5];
        const size_t QKV = ((size_t)c->num_attention_heads + 2 * (size_t)c->num_key_value_heads) * (size_t)c->head_dim;
        ok = ok && j == n && strcmp(qkvw->name, "qkvw") == 0 && qkvw->ndim == 3 && qkvw->shape[1] == QKV &&
             qkvw->shape[2] == C && strcmp(gate->name, "gateupw") == 0 && gate->shape[1] == 2 * I && gate->shape[2] == C;
        ModelSpec s;
        llama_spec(c, &s);
        ok = ok && s.family == llama_family() && s.num_tensors == n && s.num_parameters == m.num_parameters &&
             s.vocab_size == c->vocab_size && s.padded_vocab_size == c->padded_vocab_size && s.channels == (int)C &&
             s.num_layers == c->num_hidden_layers && s.max_seq_len == c->max_position_embeddings &&
             strcmp(s.tensors[s.head].name, c->tie_word_embeddings ? "embed" : "lm_head") == 0 &&
             s.tensors[s.head].shape[0] == (size_t)c->padded_vocab_size && s.tensors[s.head].shape[1] == C &&
             memcmp(llama_config_of(&s), c, sizeof(*c)) == 0;
        LlamaFloatTensors p;
        float *base = (float *)malloc(m.num_parameters * sizeof(float));
        llama_point_floats(&p, base, c);
        ok = ok && p.embed == base && p.lnfw == base + t[c->attention_bias ? 8 : 7].offset &&
             (p.qkvb == NULL) == !c->attention_bias && (p.lm_head == NULL) == c->tie_word_embeddings;
        test_check(ok && decay == (c->tie_word_embeddings ? 5 : 6),
                   "%s (%s, %s): %d tensors in the reference's order and offsets, %d decayed, the spec's head %s",
                   llama_model_type_name(c->model_type), c->tie_word_embeddings ? "tied" : "untied",
                   c->attention_bias ? "bias" : "no bias", n, decay, s.tensors[s.head].name);
        free(base);
        llamaref_free(&m);
    }
}

// field by field (the struct has padding)
static int hf_equal(const LlamaHFTensor *a, const LlamaHFTensor *b) {
    return strcmp(a->name, b->name) == 0 && a->tensor == b->tensor && a->layer == b->layer && a->row0 == b->row0 &&
           a->rows == b->rows && a->cols == b->cols && a->ndim == b->ndim && a->offset == b->offset;
}

static void test_hf_names(void) {
    printf("-- Hugging Face names\n");
    const LlamaConfig c = desc_config("llama3.2-1b");
    ParameterTensor t[LLAMA_MAX_TENSORS];
    llama_parameter_tensors(&c, t);
    LlamaHFTensor parts[LLAMA_HF_MAX_PARTS];
    const size_t C = 2048, NHhd = 2048, KV = 512, I = 8192;
    int np = llama_hf_parts(&c, 2, 3, parts);  // qkvw, layer 3
    const size_t layer3 = t[2].offset + 3 * (NHhd + 2 * KV) * C;
    test_check(np == 3 && strcmp(parts[0].name, "model.layers.3.self_attn.q_proj.weight") == 0 && parts[0].row0 == 0 &&
                   parts[0].rows == NHhd && parts[0].cols == C && parts[0].ndim == 2 && parts[0].offset == layer3 &&
                   strcmp(parts[1].name, "model.layers.3.self_attn.k_proj.weight") == 0 && parts[1].row0 == NHhd &&
                   parts[1].rows == KV && parts[1].offset == layer3 + NHhd * C &&
                   strcmp(parts[2].name, "model.layers.3.self_attn.v_proj.weight") == 0 &&
                   parts[2].row0 == NHhd + KV && parts[2].rows == KV && parts[2].offset == layer3 + (NHhd + KV) * C,
               "qkvw layer 3: q_proj rows [0, 2048), k_proj [2048, 2560), v_proj [2560, 3072)");
    np = llama_hf_parts(&c, 5, 15, parts);  // gateupw (no qkvb in Llama), layer 15
    test_check(np == 2 && strcmp(parts[0].name, "model.layers.15.mlp.gate_proj.weight") == 0 && parts[0].rows == I &&
                   strcmp(parts[1].name, "model.layers.15.mlp.up_proj.weight") == 0 && parts[1].row0 == I &&
                   parts[1].offset == t[5].offset + 15 * 2 * I * C + I * C,
               "gateupw layer 15: gate_proj rows [0, 8192), up_proj [8192, 16384)");
    np = llama_hf_parts(&c, 0, 7, parts);
    LlamaHFTensor norm[LLAMA_HF_MAX_PARTS];
    const int np_norm = llama_hf_parts(&c, 1, 0, norm);
    test_check(np == 1 && np_norm == 1 && strcmp(parts[0].name, "model.embed_tokens.weight") == 0 && parts[0].layer == -1 &&
                   parts[0].rows == 128256 && parts[0].ndim == 2 &&
                   strcmp(norm[0].name, "model.layers.0.input_layernorm.weight") == 0 && norm[0].ndim == 1 &&
                   norm[0].rows == C && norm[0].cols == 1,
               "embed: model.embed_tokens.weight (V rows, layer ignored); ln1w: a vector");
    test_check(llama_hf_parts(&c, 2, 16, parts) == -1 && llama_hf_parts(&c, 2, -1, parts) == -1 &&
                   llama_hf_parts(&c, 9, -1, parts) == -1 && llama_hf_parts(&c, -1, 0, parts) == -1,
               "no layer 16 of 16, no tensor 9 (tied: no lm_head)");

    // every tensor of two published models: names unique, findable, and together covering every
    // element of the flat buffer once but the padding rows
    const char *models[] = {"qwen2.5-0.5b", "llama3.1-8b"};
    for (int k = 0; k < 2; k++) {
        const LlamaConfig m = desc_config(models[k]);
        const size_t n = llama_hf_num_tensors(&m);
        LlamaHFTensor *all = (LlamaHFTensor *)malloc(n * sizeof(LlamaHFTensor));
        size_t covered = 0, found = 0, unique = 1, contiguous = 1;
        for (size_t i = 0; i < n; i++) {
            LlamaHFTensor f;
            if (llama_hf_tensor(&m, i, &all[i]) != 0) break;
            covered += all[i].rows * all[i].cols;
            found += llama_hf_find(&m, all[i].name, &f) == 0 && hf_equal(&f, &all[i]);
            if (i > 0) {
                const size_t end = all[i - 1].offset + all[i - 1].rows * all[i - 1].cols;
                const int padding_gap = all[i].offset == end + (size_t)(m.padded_vocab_size - m.vocab_size) *
                                                                   (size_t)m.hidden_size;
                contiguous = contiguous && (all[i].offset == end || padding_gap);
            }
        }
        for (size_t i = 0; i < n && unique; i++)
            for (size_t j = i + 1; j < n && unique; j++) unique = strcmp(all[i].name, all[j].name) != 0;
        LlamaHFTensor extra;
        const size_t pad = (size_t)(m.padded_vocab_size - m.vocab_size) * m.hidden_size * (m.tie_word_embeddings ? 1 : 2);
        test_check(covered + pad == llama_num_parameters(&m) && found == n && unique && contiguous &&
                       llama_hf_tensor(&m, n, &extra) != 0,
                   "%s: %zu tensors, unique, each found by name, covering the %zu parameters in order", models[k], n,
                   llama_num_parameters(&m));
        free(all);
    }
    const LlamaConfig qw = desc_config("qwen2.5-0.5b");
    LlamaHFTensor f;
    const int bias = llama_hf_find(&qw, "model.layers.23.self_attn.v_proj.bias", &f) == 0 && f.tensor == 3 &&
                     f.layer == 23 && f.row0 == 14 * 64 + 128 && f.rows == 128 && f.ndim == 1;
    test_check(bias, "qwen2.5-0.5b: model.layers.23.self_attn.v_proj.bias is qkvb layer 23 rows [1024, 1152)");
    const char *bad[] = {"lm_head.weight", "model.layers.24.mlp.up_proj.weight", "model.layers.03.mlp.up_proj.weight",
                         "model.layers.-1.mlp.up_proj.weight", "model.layers.1.self_attn.o_proj.bias",
                         "model.layers.1", "model.layers.1.", "model.norm.weight.x", "model.embed_tokens.weight ",
                         "layers.1.mlp.up_proj.weight", "model.layers.99999999999.mlp.up_proj.weight"};
    int refused = 1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const int r = llama_hf_find(&qw, bad[i], &f) != 0;
        if (!r) printf("  (accepted '%s')\n", bad[i]);
        refused = refused && r;
    }
    const LlamaConfig l1 = desc_config("llama3.2-1b");
    refused = refused && llama_hf_find(&l1, "model.layers.0.self_attn.q_proj.bias", &f) != 0 &&
              llama_hf_find(&qw, "model.norm.weight", &f) == 0;
    test_check(refused, "names the model lacks are refused (lm_head when tied, layer 24 of 24, 03, biases of Llama, ...)");
}

static void test_init(void) {
    printf("-- initialisation\n");
    const LlamaConfig cs[2] = {small_llama(), small_qwen()};
    for (int k = 0; k < 2; k++) {
        LlamaConfig c = cs[k];
        c.hidden_size = 128;
        c.num_attention_heads = 8;
        c.head_dim = 16;
        c.num_key_value_heads = 2;
        c.intermediate_size = 256;
        c.vocab_size = 1000;
        c.padded_vocab_size = 1024;
        char err[512] = "";
        const int valid = llama_config_check(&c, err, sizeof(err)) == 0;
        if (!test_check(valid, "init config (C 128, 8/2 heads, I 256, V 1000)%s%s", valid ? "" : ": ", err)) continue;
        const size_t n = llama_num_parameters(&c), C = 128, L = 2, V = 1000, Vp = 1024, I = 256;
        const size_t QKV = (8 + 4) * 16;
        float *a = (float *)malloc(n * sizeof(float)), *b = (float *)malloc(n * sizeof(float));
        llama_init_random(&c, a);
        llama_init_random(&c, b);
        int same = memcmp(a, b, n * sizeof(float)) == 0;
        // the documented order, drawn here one call at a time
        memset(b, 0, n * sizeof(float));
        LlamaFloatTensors p, q;
        llama_point_floats(&p, a, &c);
        llama_point_floats(&q, b, &c);
        mt19937_state rng;
        manual_seed(&rng, 42);
        normal_(q.embed, V * C, 0.0, 0.02, &rng);
        for (size_t l = 0; l < L; l++) {
            normal_(q.qkvw + l * QKV * C, 128 * C, 0.0, 0.02, &rng);
            normal_(q.qkvw + l * QKV * C + 128 * C, 32 * C, 0.0, 0.02, &rng);
            normal_(q.qkvw + l * QKV * C + 160 * C, 32 * C, 0.0, 0.02, &rng);
            normal_(q.attprojw + l * C * 128, C * 128, 0.0, 0.02, &rng);
            normal_(q.gateupw + l * 2 * I * C, I * C, 0.0, 0.02, &rng);
            normal_(q.gateupw + l * 2 * I * C + I * C, I * C, 0.0, 0.02, &rng);
            normal_(q.downw + l * C * I, C * I, 0.0, 0.02, &rng);
        }
        if (q.lm_head) normal_(q.lm_head, V * C, 0.0, 0.02, &rng);
        for (size_t i = 0; i < L * C; i++) q.ln1w[i] = q.ln2w[i] = 1.0f;
        for (size_t i = 0; i < C; i++) q.lnfw[i] = 1.0f;
        same = same && memcmp(a, b, n * sizeof(float)) == 0;
        test_check(same, "%s: the same bits twice, and those of the documented order (embed; per layer q, k, v, o, "
                   "gate, up, down; lm_head)", llama_model_type_name(c.model_type));
        // statistics: each matrix's real rows mean ~0, std ~0.02; norms 1; biases and padding 0
        ParameterTensor t[LLAMA_MAX_TENSORS];
        const int nt = llama_parameter_tensors(&c, t);
        int ok = 1;
        char line[1024] = "";
        size_t used = 0;
        for (int i = 0; i < nt; i++) {
            const int head = strcmp(t[i].name, "embed") == 0 || strcmp(t[i].name, "lm_head") == 0;
            const size_t real = head ? V * C : t[i].numel;
            const float *x = a + t[i].offset;
            double s = 0.0, s2 = 0.0;
            for (size_t j = 0; j < real; j++) {
                s += x[j];
                s2 += (double)x[j] * x[j];
            }
            const double mean = s / real, sd = sqrt(s2 / real - mean * mean);
            if (t[i].weight_decay) {
                ok = ok && fabs(mean) < 5.0 * 0.02 / sqrt((double)real) && fabs(sd - 0.02) < 0.02 * 0.02;
                for (size_t j = real; j < (head ? Vp * C : real); j++) ok = ok && x[j] == 0.0f;
            } else {
                const float want = strcmp(t[i].name, "qkvb") == 0 ? 0.0f : 1.0f;
                for (size_t j = 0; j < real; j++) ok = ok && x[j] == want;
            }
            const int w = snprintf(line + used, sizeof(line) - used, "%s%s %.5f/%.5f", i ? ", " : "", t[i].name, mean, sd);
            if (w > 0 && used + (size_t)w < sizeof(line)) used += (size_t)w;
        }
        test_check(ok, "%s: matrices mean ~0 std 0.02 (padding rows 0), norms 1, biases 0: %s",
                   llama_model_type_name(c.model_type), line);
        free(a);
        free(b);
    }
}

// ----------------------------------------------------------------------------
// llama_config_check and the model file

static void test_config_check(void) {
    printf("-- llama_config_check\n");
    char err[1024];
    const LlamaConfig good = small_llama(), goodq = small_qwen();
    test_check(llama_config_check(&good, err, sizeof(err)) == 0 && llama_config_check(&goodq, err, sizeof(err)) == 0,
               "the small Llama and Qwen2 pass");
    struct {
        const char *what, *msg;
        LlamaConfig c;
    } bad[40];
    int n = 0;
#define BAD_(WHAT, MSG, FIELD, VALUE)     \
    bad[n].what = WHAT;                   \
    bad[n].msg = MSG;                     \
    bad[n].c = good;                      \
    bad[n].c.FIELD = VALUE;               \
    n++;
    BAD_("model_type 0", "model_type 0", model_type, 0)
    BAD_("hidden_size 0", "hidden_size 0 must be >= 1", hidden_size, 0)
    BAD_("num_hidden_layers -1", "num_hidden_layers -1 must be >= 1", num_hidden_layers, -1)
    BAD_("heads not dividing hidden", "num_attention_heads 3 does not divide hidden_size 64", num_attention_heads, 3)
    BAD_("head_dim not hidden / heads", "head_dim 32 is not hidden_size / num_attention_heads", head_dim, 32)
    BAD_("kv heads not dividing heads", "num_key_value_heads 3 does not divide num_attention_heads 4", num_key_value_heads, 3)
    BAD_("more kv heads than heads", "num_key_value_heads 8 does not divide", num_key_value_heads, 8)
    BAD_("kv heads 0", "num_key_value_heads 0 must be >= 1", num_key_value_heads, 0)
    BAD_("intermediate not a multiple of 8", "intermediate_size 100 is not a multiple of 8", intermediate_size, 100)
    BAD_("vocab 0", "vocab_size 0 must be >= 1", vocab_size, 0)
    BAD_("vocab above Vp", "padded_vocab_size 384 is not a multiple of 128 >= vocab_size 385", vocab_size, 385)
    BAD_("Vp not a multiple of 128", "padded_vocab_size 320 is not a multiple of 128", padded_vocab_size, 320)
    BAD_("vocab too large", "vocab_size 2147483647 is above", vocab_size, INT_MAX)
    BAD_("maxT 0", "max_position_embeddings 0 must be >= 1", max_position_embeddings, 0)
    BAD_("tie 2", "tie_word_embeddings 2 is neither 0 nor 1", tie_word_embeddings, 2)
    BAD_("Llama with attention_bias", "attention_bias 1 with model_type llama", attention_bias, 1)
    BAD_("bos >= V", "bos_token_id 300 is neither -1 (none) nor in [0, vocab_size 300)", bos_token_id, 300)
    BAD_("eos -2", "eos_token_id -2", eos_token_id, -2)
    BAD_("eps 0", "rms_norm_eps 0 must be finite and > 0", rms_norm_eps, 0.0)
    BAD_("eps NaN", "rms_norm_eps nan must be finite", rms_norm_eps, NAN)
    BAD_("theta -1", "rope_theta -1 must be a finite number > 0", rope_theta, -1.0)
    BAD_("theta inf", "rope_theta inf must be a finite number", rope_theta, INFINITY)
    BAD_("initializer_range 0", "initializer_range 0 must be finite and > 0", initializer_range, 0.0)
    BAD_("rope_scaling 2", "rope_scaling 2 is neither 0 (none) nor 1 (llama3)", rope_scaling, 2)
    BAD_("factor < 1", "rope_scaling.factor 0.5 must be a finite number >= 1", rope_factor, 0.5)
    BAD_("factor NaN", "rope_scaling.factor nan", rope_factor, NAN)
    BAD_("low 0", "rope_scaling.low_freq_factor 0 must be a finite number > 0", rope_low_freq_factor, 0.0)
    BAD_("high == low", "rope_scaling.high_freq_factor 1 must be finite and greater than low_freq_factor 1", rope_high_freq_factor, 1.0)
    BAD_("original 0", "rope_scaling.original_max_position_embeddings 0 must be >= 1",
         rope_original_max_position_embeddings, 0)
    BAD_("no scaling but a factor", "rope_scaling none with factor 8", rope_scaling, LLAMA_ROPE_NONE)
#undef BAD_
    bad[n].what = "Qwen2 without biases";
    bad[n].msg = "attention_bias 0 with model_type qwen2";
    bad[n].c = goodq;
    bad[n++].c.attention_bias = 0;
    bad[n].what = "hidden not a multiple of 8";
    bad[n].msg = "hidden_size 36 is not a multiple of 8";
    bad[n].c = good;
    bad[n].c.hidden_size = 36;
    bad[n].c.num_attention_heads = 2;
    bad[n++].c.head_dim = 18;
    bad[n].what = "odd head_dim";
    bad[n].msg = "head_dim 3 is odd";
    bad[n].c = good;
    bad[n].c.hidden_size = 24;
    bad[n].c.num_attention_heads = 8;
    bad[n].c.num_key_value_heads = 8;
    bad[n++].c.head_dim = 3;
    bad[n].what = "head_dim the kernels lack";
    bad[n].msg = "head_dim 24: the trainer's attention kernels take 16, 32, 64 or 128";
    bad[n].c = good;
    bad[n].c.hidden_size = 48;
    bad[n].c.num_attention_heads = 2;
    bad[n].c.num_key_value_heads = 1;
    bad[n++].c.head_dim = 24;
    bad[n].what = "sizes overflowing";
    bad[n].msg = "sizes give too many parameters";
    bad[n].c = good;
    bad[n].c.hidden_size = 1 << 30;
    bad[n].c.num_attention_heads = 1 << 23;
    bad[n].c.num_key_value_heads = 1 << 23;
    bad[n++].c.head_dim = 128;
    bad[n].what = "layers overflowing";
    bad[n].msg = "sizes give too many parameters";
    bad[n].c = good;
    bad[n].c.hidden_size = 1 << 20;
    bad[n].c.num_attention_heads = 1 << 13;
    bad[n].c.num_key_value_heads = 1 << 13;
    bad[n].c.head_dim = 128;
    bad[n].c.intermediate_size = 1 << 24;
    bad[n++].c.num_hidden_layers = INT_MAX;
    for (int k = 0; k < n; k++)
        test_check(llama_config_check(&bad[k].c, err, sizeof(err)) != 0 && contains(err, bad[k].msg),
                   "refuses %s: %s", bad[k].what, err);
}

static void put_double(unsigned char *file, int word, double v) {
    memcpy(file + 4 * word, &v, 8);  // little endian: the low word first
}

static void test_model_file(void) {
    printf("-- the model file\n");
    char err[1024] = "", path[256], bad_path[256];
    tmp_path(path, sizeof(path), "model.bin");
    tmp_path(bad_path, sizeof(bad_path), "bad.bin");
    const LlamaConfig cs[2] = {small_llama(), small_qwen()};
    for (int k = 0; k < 2; k++) {
        const LlamaConfig *c = &cs[k];
        const size_t n = llama_num_parameters(c);
        float *f = (float *)malloc(n * sizeof(float));
        uint16_t *bf = (uint16_t *)malloc(n * 2);
        llama_init_random(c, f);
        floats_to_bf16(f, bf, n);
        LlamaConfig back;
        void *raw = NULL, *wide = NULL;
        int ok = llama_model_write_checked(path, c, bf, k, err, sizeof(err)) == 0 &&
                 llama_model_read_checked(path, &back, &raw, 0, err, sizeof(err)) == 0 &&
                 memcmp(&back, c, sizeof(back)) == 0 && memcmp(raw, bf, n * 2) == 0 &&
                 llama_model_read_checked(path, &back, &wide, 1, err, sizeof(err)) == 0;
        for (size_t i = 0; ok && i < n; i++) ok = ((float *)wide)[i] == float_from_bf16(bf[i]);
        size_t bytes = 0;
        unsigned char *file = read_all(path, &bytes);
        ok = ok && file != NULL && bytes == 1024 + 2 * n;
        int32_t h[256];
        if (file) memcpy(h, file, sizeof(h));
        ok = ok && h[0] == 20241202 && h[1] == 1 && h[2] == c->model_type && h[10] == c->hidden_size &&
             h[12] == c->tie_word_embeddings;
        double eps;
        if (file) memcpy(&eps, file + 18 * 4, 8);
        ok = ok && eps == c->rms_norm_eps;
        test_check(ok, "%s: write + read round trip of %zu bf16 parameters (raw and widened), 1024 + 2n bytes, eps as "
                   "its bits in words 18-19%s%s", llama_model_type_name(c->model_type), n, ok ? "" : ": ", ok ? "" : err);
        free(raw);
        free(wide);
        free(f);
        free(bf);
        if (file == NULL) continue;

        // every header field broken in turn: refused, naming the file and the field
        struct { const char *what; int word; int32_t value; const char *msg; } bad[48];
        int nb = 0;
#define BADW_(WHAT, WORD, VALUE, MSG) \
    bad[nb].what = WHAT;              \
    bad[nb].word = WORD;              \
    bad[nb].value = VALUE;            \
    bad[nb].msg = MSG;                \
    nb++;
        BADW_("magic", 0, 20240326, "bad magic 20240326 (expected 20241202)")
        BADW_("version", 1, 5, "bad version 5")
        BADW_("model_type", 2, 3, "model_type 3 is neither")
        BADW_("max_position_embeddings", 3, 0, "max_position_embeddings 0")
        BADW_("vocab_size", 4, 0, "vocab_size 0")
        BADW_("vocab_size above Vp", 4, c->padded_vocab_size + 1, ">= vocab_size")
        BADW_("padded_vocab_size", 5, c->padded_vocab_size + 1, "padded_vocab_size")
        BADW_("padded_vocab_size larger", 5, c->padded_vocab_size + 128, "(truncated)")
        BADW_("num_hidden_layers", 6, 0, "num_hidden_layers 0")
        BADW_("more layers than the data", 6, 3, "(truncated)")
        BADW_("num_attention_heads", 7, 3, "num_attention_heads 3 does not divide hidden_size")
        BADW_("num_key_value_heads", 8, 3, "num_key_value_heads 3")
        BADW_("head_dim", 9, 8, "head_dim 8 is not hidden_size / num_attention_heads")
        BADW_("hidden_size", 10, 40, "hidden_size / num_attention_heads = 40")
        BADW_("intermediate_size", 11, 12, "intermediate_size 12 is not a multiple of 8")
        BADW_("tie_word_embeddings 2", 12, 2, "tie_word_embeddings 2 is neither 0 nor 1")
        BADW_("tie_word_embeddings flipped", 12, !c->tie_word_embeddings,
              c->tie_word_embeddings ? "(truncated)" : "(trailing bytes)")
        BADW_("attention_bias", 13, 2, "attention_bias 2 is neither 0 nor 1")
        BADW_("attention_bias flipped", 13, !c->attention_bias, "attention_bias")
        BADW_("rope_scaling", 14, 7, "rope_scaling 7 is neither")
        BADW_("rope_scaling flipped", 14, !c->rope_scaling, "rope_scaling")
        BADW_("rope original", 15, c->rope_scaling ? 0 : 5, "original_max_position_embeddings")
        BADW_("bos_token_id", 16, c->vocab_size, "bos_token_id")
        BADW_("eos_token_id", 17, -2, "eos_token_id -2")
        BADW_("rms_norm_eps sign", 19, (int32_t)0xBEB0C6F7, "rms_norm_eps -")
        BADW_("rms_norm_eps NaN", 19, (int32_t)0x7FF80000, "rms_norm_eps nan")
        BADW_("rope_theta infinite", 21, (int32_t)0x7FF00000, "rope_theta")
        BADW_("rope factor", 23, (int32_t)0x3FE00000, "factor")
        BADW_("rope low_freq_factor", 25, c->rope_scaling ? 0 : 0x3FF00000, "low_freq_factor")
        BADW_("rope high_freq_factor", 27, c->rope_scaling ? 0x3FF00000 : 0x40100000, "high_freq_factor")
        BADW_("initializer_range", 29, (int32_t)0x80000000, "initializer_range")
        BADW_("unused word 30", 30, 1, "header[30] = 1, expected 0 (unused)")
        BADW_("unused word 255", 255, -1, "header[255] = -1, expected 0 (unused)")
#undef BADW_
        unsigned char *g = (unsigned char *)malloc(bytes + 8);
        for (int i = 0; i < nb; i++) {
            memcpy(g, file, bytes);
            memcpy(g + 4 * bad[i].word, &bad[i].value, 4);
            if (bad[i].word == 19 && bad[i].value == (int32_t)0xBEB0C6F7) put_double(g, 18, -1e-6);
            if (bad[i].word == 21) put_double(g, 20, INFINITY);
            if (bad[i].word == 29) put_double(g, 28, -0.0);
            write_bytes(bad_path, g, bytes);
            LlamaConfig r;
            void *p = NULL;
            const int rc = llama_model_read_checked(bad_path, &r, &p, 0, err, sizeof(err));
            test_check(rc != 0 && p == NULL && contains(err, bad[i].msg) && contains(err, bad_path),
                       "refuses a bad %s (word %d): %s", bad[i].what, bad[i].word, err);
            free(p);
        }
        const struct { const char *what; size_t len; const char *msg; } sizes[] = {
            {"truncated by one byte", bytes - 1, "(truncated)"},
            {"one trailing byte", bytes + 1, "(trailing bytes)"},
            {"a header of 500 bytes", 500, "truncated header"},
            {"an empty file", 0, "truncated header"},
        };
        memcpy(g, file, bytes);
        memset(g + bytes, 0, 8);
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            write_bytes(bad_path, g, sizes[i].len);
            LlamaConfig r;
            void *p = NULL;
            const int rc = llama_model_read_checked(bad_path, &r, &p, 1, err, sizeof(err));
            test_check(rc != 0 && p == NULL && contains(err, sizes[i].msg) && contains(err, bad_path),
                       "refuses %s: %s", sizes[i].what, err);
        }
        free(g);
        free(file);
    }
    LlamaConfig r;
    void *p = NULL;
    remove(bad_path);
    test_check(llama_model_read_checked(bad_path, &r, &p, 0, err, sizeof(err)) != 0 &&
                   contains(err, "cannot open model file"), "refuses a missing file: %s", err);
    test_check(llama_model_read_checked(tmp_dir, &r, &p, 0, err, sizeof(err)) != 0 && contains(err, "Is a directory"),
               "refuses a directory: %s", err);
    LlamaConfig badc = small_llama();
    badc.rope_theta = 0.0;
    uint16_t dummy[1] = {0};
    test_check(llama_model_write_checked(path, &badc, dummy, 0, err, sizeof(err)) != 0 && contains(err, "rope_theta 0") &&
                   contains(err, path),
               "the writer refuses a bad config: %s", err);
    remove(path);
}

// ----------------------------------------------------------------------------
// the family functions and models.h

// two specs field by field (their tensors' padding bytes are undefined)
static int spec_equal(const ModelSpec *a, const ModelSpec *b) {
    int same = a->family == b->family && a->vocab_size == b->vocab_size && a->padded_vocab_size == b->padded_vocab_size &&
               a->channels == b->channels && a->num_layers == b->num_layers && a->max_seq_len == b->max_seq_len &&
               a->num_tensors == b->num_tensors && a->num_parameters == b->num_parameters && a->head == b->head &&
               memcmp(a->config.bytes, b->config.bytes, MODEL_CONFIG_BYTES) == 0;
    for (int i = 0; same && i < a->num_tensors; i++) {
        const ParameterTensor *x = &a->tensors[i], *y = &b->tensors[i];
        same = strcmp(x->name, y->name) == 0 && x->ndim == y->ndim && x->numel == y->numel && x->offset == y->offset &&
               x->weight_decay == y->weight_decay && x->layered == y->layered &&
               memcmp(x->shape, y->shape, sizeof(x->shape)) == 0;
    }
    return same;
}

static void test_family(void) {
    printf("-- the family (llmc/model.h) and models.h\n");
    char err[1024] = "";
    // models.h: every descriptor to its family, cheaply (no parameters)
    for (int i = 0; llama_descriptor_at(i) != NULL; i++) {
        const char *name = llama_descriptor_at(i)->name;
        ModelSpec s;
        const LlamaConfig c = desc_config(name);
        const int ok = model_is_descriptor(name) && model_load_checked(name, 0, &s, NULL, err, sizeof(err)) == 0 &&
                       s.family == llama_family() && memcmp(llama_config_of(&s), &c, sizeof(c)) == 0 &&
                       s.num_parameters == llama_num_parameters(&c);
        test_check(ok, "-e %s: the llama family, %zu parameters%s%s", name, ok ? s.num_parameters : 0, ok ? "" : ": ",
                   ok ? "" : err);
    }
    ModelSpec s;
    int ok = model_load_checked("qwen-test", 1000, &s, NULL, err, sizeof(err)) == 0 && s.vocab_size == 1000 &&
             s.padded_vocab_size == 1024 && llama_config_of(&s)->bos_token_id == -1;
    test_check(ok, "-e qwen-test -V 1000: vocabulary 1000, padded 1024%s%s", ok ? "" : ": ", ok ? "" : err);
    // GPT-2's descriptors and files stay GPT-2's, exactly as gpt2.h makes them
    const char *gpt2s[] = {"d6", "d12", "d24", "d36", "d48"};
    for (int i = 0; i < 5; i++) {
        GPT2Config g;
        ModelSpec want;
        gpt2_config_from_descriptor(gpt2s[i], 0, &g, err, sizeof(err));
        gpt2_spec(&g, &want);
        ok = model_is_descriptor(gpt2s[i]) && model_load_checked(gpt2s[i], 0, &s, NULL, err, sizeof(err)) == 0 &&
             spec_equal(&s, &want);
        test_check(ok, "-e %s: GPT-2, the spec gpt2_spec gives", gpt2s[i]);
    }
    char gpath[256], lpath[256], missing[256];
    tmp_path(gpath, sizeof(gpath), "gpt2.bin");
    tmp_path(lpath, sizeof(lpath), "llama.bin");
    tmp_path(missing, sizeof(missing), "none.bin");
    GPT2Config g = {8, 10, 16, 2, 2, 4};  // maxT, V, Vp, L, NH, C
    const size_t gn = gpt2_num_parameters(&g);
    float *gp = (float *)malloc(gn * sizeof(float));
    gpt2_init_random(&g, gp);
    const LlamaConfig lc = small_qwen();
    const size_t ln = llama_num_parameters(&lc);
    float *lp = (float *)malloc(ln * sizeof(float));
    uint16_t *lb = (uint16_t *)malloc(ln * 2);
    llama_init_random(&lc, lp);
    floats_to_bf16(lp, lb, ln);
    float *back = NULL;
    ok = model_write_checked(gpath, &g, MODEL_VERSION_FP32, gp, 0, err, sizeof(err)) == 0 &&
         llama_model_write_checked(lpath, &lc, lb, 0, err, sizeof(err)) == 0;
    int gpt2_file = ok && !model_is_descriptor(gpath) && model_load_checked(gpath, 0, &s, &back, err, sizeof(err)) == 0 &&
                    s.family == gpt2_family() && memcmp(back, gp, gn * sizeof(float)) == 0;
    free(back);
    back = NULL;
    test_check(gpt2_file, "an llm.c GPT-2 file: GPT-2's, its parameters%s%s", gpt2_file ? "" : ": ", gpt2_file ? "" : err);
    int llama_file = ok && model_load_checked(lpath, 0, &s, &back, err, sizeof(err)) == 0 &&
                     s.family == llama_family() && memcmp(llama_config_of(&s), &lc, sizeof(lc)) == 0;
    for (size_t i = 0; llama_file && i < ln; i++) llama_file = back[i] == float_from_bf16(lb[i]);
    free(back);
    back = NULL;
    test_check(llama_file, "a llama.h file: the llama family, its bf16 parameters widened%s%s", llama_file ? "" : ": ",
               llama_file ? "" : err);
    // errors of a file that is neither: GPT-2's reader's, as before
    char err2[1024];
    GPT2Config gc;
    ok = model_load_checked(missing, 0, &s, NULL, err, sizeof(err)) != 0 &&
         gpt2_load_checked(missing, 0, &gc, NULL, err2, sizeof(err2)) != 0 && strcmp(err, err2) == 0 &&
         contains(err, "cannot open model file");
    test_check(ok, "a missing file: GPT-2's message: %s", err);
    write_bytes(missing, "\x01\x02\x03\x04 not a model", 17);
    ok = model_load_checked(missing, 0, &s, NULL, err, sizeof(err)) != 0 &&
         gpt2_load_checked(missing, 0, &gc, NULL, err2, sizeof(err2)) != 0 && strcmp(err, err2) == 0;
    test_check(ok, "a short file of another kind: GPT-2's message: %s", err);
    remove(missing);
    // a llama.h file with a broken header: the llama reader's message
    size_t bytes;
    unsigned char *file = read_all(lpath, &bytes);
    if (file != NULL) {
        file[4 * 7] = 3;  // num_attention_heads
        write_bytes(missing, file, bytes);
        ok = model_load_checked(missing, 0, &s, NULL, err, sizeof(err)) != 0 &&
             contains(err, "num_attention_heads 3 does not divide");
        test_check(ok, "a llama.h file with a bad header: the llama reader's message: %s", err);
        free(file);
        remove(missing);
    }
    // checkpoints go through the family's write_file / read_file (checkpoint.h)
    llama_spec(&lc, &s);
    ModelSpec r;
    uint16_t *rb = NULL;
    ok = s.family->write_file(lpath, &s, lb, 0, err, sizeof(err)) == 0 &&
         s.family->read_file(lpath, &r, &rb, err, sizeof(err)) == 0 && spec_equal(&r, &s) &&
         memcmp(rb, lb, ln * 2) == 0 && model_spec_compare(&s, &r, err, sizeof(err)) == 0;
    free(rb);
    test_check(ok, "family write_file / read_file: the same spec and bits%s%s", ok ? "" : ": ", ok ? "" : err);
    remove(gpath);
    remove(lpath);
    free(gp);
    free(lp);
    free(lb);

    // compare, check_run, flops, describe
    LlamaConfig a = small_llama(), b = small_llama();
    b.vocab_size = 301;
    b.rope_theta = 20000.0;
    ModelSpec sa, sb, sg;
    llama_spec(&a, &sa);
    llama_spec(&b, &sb);
    GPT2Config d12;
    gpt2_config_from_descriptor("d12", 0, &d12, err, sizeof(err));
    gpt2_spec(&d12, &sg);
    ok = model_spec_compare(&sa, &sb, err, sizeof(err)) != 0 && strcmp(err, "vocab_size 300 vs 301, rope_theta 10000 vs 20000") == 0;
    test_check(ok, "compare names every differing field: %s", err);
    test_check(model_spec_compare(&sa, &sg, err, sizeof(err)) != 0 && strcmp(err, "family llama vs gpt2") == 0,
               "compare with GPT-2: %s", err);
    model_load_checked("llama3.2-1b", 0, &s, NULL, err, sizeof(err));
    test_check(s.family->check_run(&s, 131072, err, sizeof(err)) == 0 && s.family->check_run(&s, 131073, err, sizeof(err)) != 0 &&
                   contains(err, "131073 outside 1..max_position_embeddings 131072"),
               "check_run: T up to max_position_embeddings: %s", err);
    // 6 x (16 (3072 x 2048 + 2048 x 2048 + 3 x 8192 x 2048) + 128256 x 2048) + 12 x 16 x 1024 x 2048
    const double want = 6.0 * 1235746816.0 + 12.0 * 16 * 1024 * 2048;
    test_check(s.family->flops_per_token(&s, 1024) == want, "flops_per_token (llama3.2-1b, T 1024): %.6e (want %.6e)",
               s.family->flops_per_token(&s, 1024), want);
    model_load_checked("llama3.1-8b", 0, &s, NULL, err, sizeof(err));
    // untied: the head once, the input embedding not at all
    const double want8 = 6.0 * (32.0 * (6144.0 * 4096 + 4096.0 * 4096 + 3.0 * 14336 * 4096) + 128256.0 * 4096) +
                         12.0 * 32 * 2048 * 4096;
    test_check(s.family->flops_per_token(&s, 2048) == want8, "flops_per_token (llama3.1-8b, T 2048): %.6e", want8);
    char name[64], value[128], rows[2048] = "";
    int lines = 0;
    size_t used = 0;
    model_load_checked("llama3.2-1b", 0, &s, NULL, err, sizeof(err));
    for (; s.family->describe(&s, lines, name, sizeof(name), value, sizeof(value)) == 0; lines++) {
        const int w = snprintf(rows + used, sizeof(rows) - used, "%s%s: %s", lines ? " | " : "", name, value);
        if (w > 0 && used + (size_t)w < sizeof(rows)) used += (size_t)w;
        if (strlen(value) > 50) printf("  (value longer than the run table's 50 columns: %s)\n", value);
    }
    test_check(lines == 11 && contains(rows, "model type: llama") && contains(rows, "heads / kv heads: 32 / 8 (head dim 64)") &&
                   contains(rows, "rope: theta 500000, llama3 x32 low 1 high 4 orig 8192") &&
                   contains(rows, "rms_norm_eps: 1e-05") && contains(rows, "tied embeddings: yes") &&
                   contains(rows, "q/k/v bias: no") && contains(rows, "vocab size: 128256 (padded 128256)"),
               "describe: %s", rows);
}

int main(void) {
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_llama_cpu_XXXXXX");
    if (mkdtemp(tmp_dir) == NULL) {
        test_check(0, "create a temporary directory");
        return test_summary();
    }
    for (size_t k = 0; k < sizeof(fd_variants) / sizeof(fd_variants[0]); k++) fd_variant(&fd_variants[k]);
    test_rope_frequencies();
    test_init_loss();
    test_descriptors();
    test_table();
    test_hf_names();
    test_init();
    test_config_check();
    test_model_file();
    test_family();
    if (rmdir(tmp_dir) != 0) printf("  (note: %s not empty, left in place)\n", tmp_dir);
    return test_summary();
}
