/*
test_cpu.c - the CPU test suite: checks the C reference (flce/flce_ref.c) against the
PyTorch fixtures in test/fixtures, checks it on its own (finite differences, bad targets,
all-ignored batches, buffer guards) and checks the fixture reader's rejection of broken
files. Needs no GPU, so it runs everywhere CI does.

Build and run (from the repository root):
    gcc -O2 -Wall -Wextra -Werror -Iflce -Itest test/test_cpu.c flce/flce_ref.c -lm -o test_cpu
    ./test_cpu [fixture_dir]                       # default test/fixtures
Defining FLCE_HAVE_LIB (and linking libflce: its host part, flce_plan.c) adds the checks of the
library's host-only functions (config defaults and validation, workspace sizing).
*/
#define _POSIX_C_SOURCE 200809L  // opendir, getpid under -std=c99 too
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "flce.h"
#include "flce_ref.h"
#include "test_util.h"
#include "vp_comm.h"
#ifdef FLCE_HAVE_LIB
#include "flce_internal.h"  // flce_dev_set_plan_sms: the Hopper path's planner without a GPU
#endif

// The fixtures hold PyTorch's float64 results rounded to float32, and the reference
// accumulates in float64, so the two agree to float32 rounding (~1e-7). These bounds
// leave room for summation order only; a real mistake shows up as 1e-3 or more.
#define TOL_REL_L2 1e-5
#define TOL_LOSS_ABS 1e-5
#define TOL_LOSS_REL 1e-5
#define MIN_FIXTURES 10

// A config holding exactly what the reference reads. flce_config_init lives in the
// library, which this program does not need, so the defaults of flce.h are spelled out.
static flce_config make_config(int64_t N, int64_t H, int64_t V, int64_t Vp) {
    flce_config c;
    memset(&c, 0, sizeof(c));
    c.n_tokens = N; c.hidden = H; c.vocab = V; c.vocab_padded = Vp;
    c.ignore_index = -100;
    c.reduction = FLCE_REDUCTION_MEAN;
    c.grad_scale = 1.0f;
    c.temperature = 1.0f;
    return c;
}

static flce_config fixture_config(const Fixture *f) {
    flce_config c = make_config(f->N, f->H, f->V, f->Vp);
    c.ignore_index = f->ignore_index;
    c.reduction = (flce_reduction)f->reduction;
    c.has_bias = f->has_bias;
    c.label_smoothing = f->label_smoothing;
    c.z_loss_scale = f->z_loss_scale;
    c.softcap = f->softcap;
    c.grad_scale = f->grad_scale;
    c.temperature = f->temperature;
    c.has_class_weights = f->has_class_weights;
    return c;
}

static double *alloc_f64(size_t n) {
    double *p = (double *)calloc(n ? n : 1, sizeof(double));
    if (p == NULL) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}

static float *alloc_f32(size_t n) {
    float *p = (float *)calloc(n ? n : 1, sizeof(float));
    if (p == NULL) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}

// bf16-representable random values, like the fixtures', so the synthetic problems below
// are ones a bf16 run could see exactly
static void fill_bf16(float *x, size_t n, float scale, uint64_t *state) {
    fill_uniform(x, n, scale, state);
    for (size_t i = 0; i < n; i++) x[i] = bf16_bits_to_f32(f32_to_bf16_bits(x[i]));
}

static int all_bf16(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (bf16_bits_to_f32(f32_to_bf16_bits(x[i])) != x[i]) return 0;
    return 1;
}

static int all_zero_f64(const double *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0.0) return 0;
    return 1;
}

static int all_zero_f32(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0.0f) return 0;
    return 1;
}

// ---------------------------------------------------------------------------------------
// fixtures

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// The first int32 of a file, or 0 if it has none.
static int32_t file_magic(const char *path) {
    int32_t m = 0;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) return 0;
    if (fread(&m, sizeof(m), 1, fp) != 1) m = 0;
    fclose(fp);
    return m;
}

// The FLCE fixtures among the *.bin files of dir, sorted so the output is the same on
// every machine. The directory also holds other binary fixtures (the tokenizer's), told
// apart by their magic; they are listed as skipped, and the count check in main keeps a
// wholesale skip from passing.
static char **list_fixtures(const char *dir, int *count) {
    *count = 0;
    DIR *d = opendir(dir);
    if (d == NULL) { fprintf(stderr, "cannot open fixture directory %s\n", dir); return NULL; }
    int cap = 64;
    char **paths = (char **)malloc(cap * sizeof(char *));
    struct dirent *e;
    while (paths && (e = readdir(d)) != NULL) {
        if (!has_suffix(e->d_name, ".bin")) continue;
        if (*count == cap) {
            cap *= 2;
            char **p = (char **)realloc(paths, cap * sizeof(char *));
            if (p == NULL) break;
            paths = p;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *path = (char *)malloc(len);
        snprintf(path, len, "%s/%s", dir, e->d_name);
        int32_t magic = file_magic(path);
        if (magic != FIXTURE_MAGIC && magic != 0) {  // an empty or zeroed file still fails
            printf("  (skipping %s: magic %d, not an FLCE fixture)\n", path, (int)magic);
            free(path);
            continue;
        }
        paths[(*count)++] = path;
    }
    closedir(d);
    if (paths) qsort(paths, *count, sizeof(char *), cmp_str);
    return paths;
}

// Runs the reference on one fixture and compares every output with PyTorch's.
static void test_fixture(const char *path) {
    Fixture f;
    if (!test_check(fixture_load(path, &f), "load %s", path)) return;
    const size_t N = f.N, H = f.H, V = f.V, Vp = f.Vp;
    flce_config cfg = fixture_config(&f);
    double loss = NAN;
    double *tl = alloc_f64(N), *lse = alloc_f64(N), *dh = alloc_f64(N * H);
    double *dW = alloc_f64(Vp * H), *db = f.has_bias ? alloc_f64(Vp) : NULL;
    double *ent = alloc_f64(N), *lp = alloc_f64(N);
    flce_reference_extra ex = {f.class_weights, f.grad_entropy, f.grad_logprob,
                               f.has_entropy ? ent : NULL, f.has_logprob ? lp : NULL};
    int64_t bad = 12345;
    flce_status st = flce_reference_ex(&cfg, f.h, f.W, f.bias, f.targets, f.grad_token_loss, &ex,
                                       &loss, tl, lse, dh, dW, db, &bad);
    double loss_err = fabs((double)f.loss - loss);
    double e_tl = rel_l2_f64(f.token_loss, tl, N), e_lse = rel_l2_f64(f.token_lse, lse, N);
    double e_dh = rel_l2_f64(f.d_h, dh, N * H), e_dW = rel_l2_f64(f.d_W, dW, Vp * H);
    double e_db = f.has_bias ? rel_l2_f64(f.d_bias, db, Vp) : 0.0;
    double e_ent = f.has_entropy ? rel_l2_f64(f.token_entropy, ent, N) : 0.0;
    double e_lp = f.has_logprob ? rel_l2_f64(f.token_logprob, lp, N) : 0.0;
    int ok = st == FLCE_OK && bad == -1 && loss_err <= TOL_LOSS_ABS + TOL_LOSS_REL * fabs(loss) &&
             e_tl <= TOL_REL_L2 && e_lse <= TOL_REL_L2 && e_dh <= TOL_REL_L2 &&
             e_dW <= TOL_REL_L2 && e_db <= TOL_REL_L2 && e_ent <= TOL_REL_L2 && e_lp <= TOL_REL_L2;
    test_check(ok, "%s: status %d loss %.6f (err %.1e) rel L2 token_loss %.1e lse %.1e d_h %.1e "
               "d_W %.1e d_bias %.1e entropy %.1e logprob %.1e", f.name, (int)st, loss, loss_err,
               e_tl, e_lse, e_dh, e_dW, e_db, e_ent, e_lp);
    free(ent); free(lp);

    // exact structural properties, in both the reference and PyTorch's answer
    int ignored_zero = 1;
    for (size_t i = 0; i < N; i++)
        if (f.targets[i] == f.ignore_index && (tl[i] != 0.0 || f.token_loss[i] != 0.0f))
            ignored_zero = 0;
    int pad_zero = all_zero_f64(dW + V * H, (Vp - V) * H) &&
                   all_zero_f32(f.d_W + V * H, (Vp - V) * H);
    if (f.has_bias) pad_zero = pad_zero && all_zero_f64(db + V, Vp - V) &&
                               all_zero_f32(f.d_bias + V, Vp - V);
    int inputs_bf16 = all_bf16(f.h, N * H) && all_bf16(f.W, Vp * H) &&
                      (!f.has_bias || all_bf16(f.bias, Vp));
    test_check(ignored_zero && pad_zero && inputs_bf16,
               "%s: ignored tokens' loss 0 %d, pad rows' grads 0 %d, inputs bf16 %d", f.name,
               ignored_zero, pad_zero, inputs_bf16);
    free(tl); free(lse); free(dh); free(dW); free(db);
    fixture_free(&f);
}

// ---------------------------------------------------------------------------------------
// a synthetic problem for the checks that do not need PyTorch

typedef struct {
    flce_config cfg;
    float *h, *W, *bias, *gtl;
    int32_t *targets;
    // flce 1.1: class weights (used when cfg.has_class_weights), and the upstream gradients of
    // the entropy and the log-probability (passed when use_ge / use_gl)
    float *cw, *ge, *gl;
    int use_ge, use_gl;
} Problem;

static Problem make_problem(int64_t N, int64_t H, int64_t V, int64_t Vp, int has_bias,
                            uint64_t seed) {
    Problem p;
    p.cfg = make_config(N, H, V, Vp);
    p.cfg.has_bias = has_bias;
    uint64_t s = seed;
    p.h = alloc_f32(N * H); fill_bf16(p.h, N * H, 1.0f, &s);
    // uniform(-a, a) has variance a^2/3: this gives logits of standard deviation ~2
    p.W = alloc_f32(Vp * H); fill_bf16(p.W, Vp * H, 2.0f * 3.0f / sqrtf((float)H), &s);
    p.bias = NULL;
    if (has_bias) { p.bias = alloc_f32(Vp); fill_bf16(p.bias, Vp, 0.5f, &s); }
    p.gtl = alloc_f32(N); fill_bf16(p.gtl, N, 1.0f, &s);
    p.targets = (int32_t *)malloc(N * sizeof(int32_t));
    for (int64_t i = 0; i < N; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        p.targets[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
    // weights in [0.25, 2.25), upstream gradients in [-1, 1)
    p.cw = alloc_f32(V); fill_bf16(p.cw, V, 1.0f, &s);
    for (int64_t j = 0; j < V; j++) p.cw[j] += 1.25f;
    p.ge = alloc_f32(N); fill_bf16(p.ge, N, 1.0f, &s);
    p.gl = alloc_f32(N); fill_bf16(p.gl, N, 1.0f, &s);
    p.use_ge = p.use_gl = 0;
    return p;
}

static void free_problem(Problem *p) {
    free(p->h); free(p->W); free(p->bias); free(p->gtl); free(p->targets);
    free(p->cw); free(p->ge); free(p->gl);
}

// The flce 1.1 arguments of a problem: its weights (if the config has them), its upstream
// gradients (if used), and where the entropy and log-probabilities go.
static flce_reference_extra problem_extra(const Problem *p, double *ent, double *lp) {
    flce_reference_extra e = {p->cfg.has_class_weights ? p->cw : NULL, p->use_ge ? p->ge : NULL,
                              p->use_gl ? p->gl : NULL, ent, lp};
    return e;
}

// The objective whose gradient the reference returns: grad_scale times the reduced loss,
// or for reduction none grad_scale * sum_i gtl_i * loss_i.
// With the flce 1.1 options, plus sum_i ge_i H_i + sum_i gl_i logprob_i (when used).
static double objective(const Problem *p, const float *gtl) {
    const int64_t N = p->cfg.n_tokens;
    double loss = 0.0, *tl = alloc_f64(N), *ent = alloc_f64(N), *lp = alloc_f64(N);
    flce_reference_extra ex = problem_extra(p, ent, lp);
    ex.grad_entropy = ex.grad_logprob = NULL;
    flce_status st = flce_reference_ex(&p->cfg, p->h, p->W, p->bias, p->targets, gtl, &ex, &loss,
                                       tl, NULL, NULL, NULL, NULL, NULL);
    if (p->cfg.reduction == FLCE_REDUCTION_NONE && gtl) {
        loss = 0.0;
        for (int64_t i = 0; i < N; i++) loss += (double)gtl[i] * tl[i];
    }
    for (int64_t i = 0; i < N; i++) {
        if (p->use_ge) loss += (double)p->ge[i] * ent[i];
        if (p->use_gl) loss += (double)p->gl[i] * lp[i];
    }
    if (st != FLCE_OK) loss = NAN;
    free(tl); free(ent); free(lp);
    return (double)p->cfg.grad_scale * loss;
}

// Central difference of the objective in every element of x[n]; the step is taken as
// the actual difference of the two float values, so float rounding of x +- delta does
// not bias it.
static void numeric_grad(Problem *p, const float *gtl, float *x, size_t n, double *out) {
    const float delta = 1e-2f;
    for (size_t k = 0; k < n; k++) {
        float x0 = x[k], xp = x0 + delta, xm = x0 - delta;
        x[k] = xp; double fp = objective(p, gtl);
        x[k] = xm; double fm = objective(p, gtl);
        x[k] = x0;
        out[k] = (fp - fm) / ((double)xp - (double)xm);
    }
}

// rel L2 of two double vectors, through the float helper's NaN-safe rules
static double rel_l2_dd(const double *out, const double *ref, size_t n) {
    float *o = alloc_f32(n);
    for (size_t i = 0; i < n; i++) o[i] = (float)out[i];
    double e = rel_l2_f64(o, ref, n);
    free(o);
    return e;
}

// The reference's gradients against finite differences of its own loss, with every
// option on: this checks the derivative formulas independently of PyTorch.
static void test_finite_differences(flce_reduction red, int use_gtl) {
    const int64_t N = 6, H = 8, V = 7, Vp = 8;
    Problem p = make_problem(N, H, V, Vp, 1, 77 + red);
    p.cfg.reduction = red;
    p.cfg.label_smoothing = 0.1f;
    p.cfg.z_loss_scale = 0.05f;
    p.cfg.softcap = 2.0f;
    p.cfg.grad_scale = 0.5f;
    p.targets[2] = -100;
    const float *gtl = use_gtl ? p.gtl : NULL;
    double loss, *dh = alloc_f64(N * H), *dW = alloc_f64(Vp * H), *db = alloc_f64(Vp);
    flce_status st = flce_reference(&p.cfg, p.h, p.W, p.bias, p.targets, gtl, &loss, NULL,
                                    NULL, dh, dW, db, NULL);
    double *nh = alloc_f64(N * H), *nW = alloc_f64(Vp * H), *nb = alloc_f64(Vp);
    numeric_grad(&p, gtl, p.h, N * H, nh);
    numeric_grad(&p, gtl, p.W, Vp * H, nW);
    numeric_grad(&p, gtl, p.bias, Vp, nb);
    double eh = rel_l2_dd(dh, nh, N * H), eW = rel_l2_dd(dW, nW, Vp * H);
    double eb = rel_l2_dd(db, nb, Vp);
    // the difference quotient's O(delta^2) error and the float rounding of the comparison
    // allow ~1e-4; a wrong term in the derivative is off by far more
    test_check(st == FLCE_OK && eh < 1e-4 && eW < 1e-4 && eb < 1e-4,
               "finite differences (reduction %d, gtl %d, all options): rel L2 d_h %.1e "
               "d_W %.1e d_bias %.1e", (int)red, use_gtl, eh, eW, eb);
    free(dh); free(dW); free(db); free(nh); free(nW); free(nb);
    free_problem(&p);
}

// the loss and d_W only; NaN loss on failure
static void loss_and_dW(const Problem *p, double *loss, double *dW) {
    if (flce_reference(&p->cfg, p->h, p->W, p->bias, p->targets, NULL, loss, NULL, NULL, NULL,
                       dW, NULL, NULL) != FLCE_OK)
        *loss = NAN;
}

// Padding rows of W and bias must not matter at all, and reduction none with the default
// upstream gradient must give exactly the gradients of reduction sum.
static void test_padding_and_reductions(void) {
    const int64_t N = 21, H = 16, V = 13, Vp = 16;
    Problem p = make_problem(N, H, V, Vp, 1, 5);
    p.cfg.label_smoothing = 0.1f; p.cfg.z_loss_scale = 1e-2f; p.cfg.softcap = 5.0f;
    p.cfg.reduction = FLCE_REDUCTION_SUM;
    p.targets[0] = -100;
    double l1, l2, l3, *g1 = alloc_f64(Vp * H), *g2 = alloc_f64(Vp * H), *g3 = alloc_f64(Vp * H);
    loss_and_dW(&p, &l1, g1);
    for (int64_t k = V * H; k < Vp * H; k++) p.W[k] = 1e4f;
    for (int64_t j = V; j < Vp; j++) p.bias[j] = 1e4f;
    loss_and_dW(&p, &l2, g2);
    test_check(l1 == l2 && memcmp(g1, g2, Vp * H * sizeof(double)) == 0,
               "huge padding rows in W and bias change nothing (loss %.6f vs %.6f)", l1, l2);
    p.cfg.reduction = FLCE_REDUCTION_NONE;
    loss_and_dW(&p, &l3, g3);
    test_check(l3 == l2 && memcmp(g3, g2, Vp * H * sizeof(double)) == 0,
               "reduction none with default upstream ones equals reduction sum");
    free(g1); free(g2); free(g3);
    free_problem(&p);
}

// ---------------------------------------------------------------------------------------
// bad targets and buffer bounds

#define GUARD 64
#define SENTINEL 12345.5

// A double buffer of n elements followed by GUARD sentinel elements (all n + GUARD are
// sentinel at first), so both "wrote nothing" and "wrote past the end" can be checked.
static double *guarded(size_t n) {
    double *p = alloc_f64(n + GUARD);
    for (size_t i = 0; i < n + GUARD; i++) p[i] = SENTINEL;
    return p;
}

static int untouched(const double *p, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (p[i] != SENTINEL) return 0;
    return 1;
}

typedef struct { double *loss, *tl, *lse, *dh, *dW, *db; } Outputs;

static Outputs guarded_outputs(const flce_config *c) {
    Outputs o;
    o.loss = guarded(1); o.tl = guarded(c->n_tokens); o.lse = guarded(c->n_tokens);
    o.dh = guarded(c->n_tokens * c->hidden); o.dW = guarded(c->vocab_padded * c->hidden);
    o.db = guarded(c->vocab_padded);
    return o;
}

static void free_outputs(Outputs *o) {
    free(o->loss); free(o->tl); free(o->lse); free(o->dh); free(o->dW); free(o->db);
}

// whole buffers (from = 0) or only the guards (from = the buffer's length)
static int outputs_untouched(const Outputs *o, const flce_config *c, int whole) {
    const size_t N = c->n_tokens, H = c->hidden, Vp = c->vocab_padded;
    return untouched(o->loss, whole ? 0 : 1, 1 + GUARD) &&
           untouched(o->tl, whole ? 0 : N, N + GUARD) &&
           untouched(o->lse, whole ? 0 : N, N + GUARD) &&
           untouched(o->dh, whole ? 0 : N * H, N * H + GUARD) &&
           untouched(o->dW, whole ? 0 : Vp * H, Vp * H + GUARD) &&
           untouched(o->db, whole ? 0 : Vp, Vp + GUARD);
}

static void expect_bad_target(Problem *p, int64_t expect_pos, const char *what) {
    Outputs o = guarded_outputs(&p->cfg);
    int64_t bad = 999;
    flce_status st = flce_reference(&p->cfg, p->h, p->W, p->bias, p->targets, NULL, o.loss,
                                    o.tl, o.lse, o.dh, o.dW, o.db, &bad);
    test_check(st == FLCE_ERR_TARGET && bad == expect_pos && outputs_untouched(&o, &p->cfg, 1),
               "bad target %s: status %d position %lld (expected %lld), outputs untouched",
               what, (int)st, (long long)bad, (long long)expect_pos);
    free_outputs(&o);
}

static void test_bad_targets(void) {
    const int64_t N = 9, H = 8, V = 5, Vp = 8;
    Problem p = make_problem(N, H, V, Vp, 1, 11);
    const int32_t base[9] = {0, 4, -100, 2, 1, 3, -100, 0, 4};
    memcpy(p.targets, base, sizeof(base));

    p.targets[3] = (int32_t)V; expect_bad_target(&p, 3, "== V");
    p.targets[5] = -1;         expect_bad_target(&p, 3, "first of two is reported");
    p.targets[3] = 2;          expect_bad_target(&p, 5, "-1 with ignore_index -100");
    p.targets[5] = 3;
    p.targets[8] = (int32_t)Vp; expect_bad_target(&p, 8, "== Vp (a padding row)");
    p.targets[8] = INT32_MAX;   expect_bad_target(&p, 8, "INT32_MAX");
    p.targets[8] = INT32_MIN;   expect_bad_target(&p, 8, "INT32_MIN");
    p.targets[8] = 4;
    p.cfg.ignore_index = -1;    expect_bad_target(&p, 2, "-100 with ignore_index -1");

    // and a valid call, with -1 now ignored, writes every output and nothing past them
    p.targets[2] = -1;
    p.targets[6] = -1;
    Outputs o = guarded_outputs(&p.cfg);
    int64_t bad = 999;
    flce_status st = flce_reference(&p.cfg, p.h, p.W, p.bias, p.targets, NULL, o.loss, o.tl,
                                    o.lse, o.dh, o.dW, o.db, &bad);
    test_check(st == FLCE_OK && bad == -1 && outputs_untouched(&o, &p.cfg, 0) &&
               isfinite(*o.loss) && o.tl[2] == 0.0 && all_zero_f64(o.dW + V * H, (Vp - V) * H) &&
               all_zero_f64(o.db + V, Vp - V),
               "valid call: status %d, nothing written past any output, pad grads 0", (int)st);
    free_outputs(&o);

    // a config the reference cannot run is refused before anything is written
    p.cfg.vocab_padded = V - 1;
    o = guarded_outputs(&p.cfg);
    st = flce_reference(&p.cfg, p.h, p.W, p.bias, p.targets, NULL, o.loss, o.tl, o.lse, o.dh,
                        o.dW, o.db, NULL);
    test_check(st == FLCE_ERR_INVALID_SIZE && outputs_untouched(&o, &p.cfg, 1),
               "Vp < V is refused (status %d)", (int)st);
    free_outputs(&o);
    p.cfg.vocab_padded = Vp;
    p.cfg.label_smoothing = 1.0f;
    st = flce_reference(&p.cfg, p.h, p.W, p.bias, p.targets, NULL, NULL, NULL, NULL, NULL,
                        NULL, NULL, NULL);
    test_check(st == FLCE_ERR_INVALID_VALUE, "label_smoothing 1 is refused (status %d)", (int)st);
    p.cfg.label_smoothing = 0.0f;
    st = flce_reference(&p.cfg, p.h, p.W, NULL, p.targets, NULL, NULL, NULL, NULL, NULL, NULL,
                        NULL, NULL);
    test_check(st == FLCE_ERR_NULL_POINTER, "has_bias without a bias is refused (status %d)",
               (int)st);
    free_problem(&p);
}

// Every token ignored: loss 0 and gradients exactly 0 (not 0/0 = NaN) for every reduction,
// while the log-sum-exp is still computed for every token.
static void test_all_ignored(void) {
    const int64_t N = 19, H = 16, V = 11, Vp = 16;
    Problem p = make_problem(N, H, V, Vp, 1, 23);
    for (int64_t i = 0; i < N; i++) p.targets[i] = -100;
    p.cfg.label_smoothing = 0.1f; p.cfg.z_loss_scale = 1e-2f; p.cfg.softcap = 5.0f;
    for (int red = 0; red <= 2; red++) {
        p.cfg.reduction = (flce_reduction)red;
        double loss = NAN, *tl = alloc_f64(N), *lse = alloc_f64(N), *dh = alloc_f64(N * H);
        double *dW = alloc_f64(Vp * H), *db = alloc_f64(Vp);
        for (int64_t i = 0; i < N; i++) { tl[i] = NAN; lse[i] = NAN; }
        flce_status st = flce_reference(&p.cfg, p.h, p.W, p.bias, p.targets,
                                        red == 2 ? p.gtl : NULL, &loss, tl, lse, dh, dW, db, NULL);
        int lse_ok = 1;
        for (int64_t i = 0; i < N; i++) lse_ok = lse_ok && isfinite(lse[i]) && lse[i] > 0.0;
        test_check(st == FLCE_OK && loss == 0.0 && all_zero_f64(tl, N) && lse_ok &&
                   all_zero_f64(dh, N * H) && all_zero_f64(dW, Vp * H) && all_zero_f64(db, Vp),
                   "all ignored, reduction %d: loss %g, token losses and grads 0, lse finite",
                   red, loss);
        free(tl); free(lse); free(dh); free(dW); free(db);
    }
    free_problem(&p);
}

// ---------------------------------------------------------------------------------------
// vocabulary parallelism: P ranks (threads, vp_comm.h) over shards of W against one process

typedef struct {
    flce_config cfg;             // the rank's: vocab, vocab_padded, vocab_offset, vocab_total
    vp_rank rank;
    const Problem *p;
    const float *gtl;
    double loss, *tl, *lse, *ent, *lp, *dh, *dW, *db;  // dW, db: the rank's rows
    flce_status st;
} VpRank;

// ||out - ref|| / ||ref|| in double throughout (rel_l2_dd rounds out to float first)
static double rel_l2_64(const double *out, const double *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) return INFINITY;
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

// One rank: its rows of W and bias, its classes' weights, every flce 1.1 output and upstream
// gradient the problem uses.
static void *vp_rank_main(void *arg) {
    VpRank *r = (VpRank *)arg;
    const flce_comm comm = vp_comm_of(&r->rank);
    const int64_t H = r->p->cfg.hidden, row0 = r->cfg.vocab_offset;
    flce_reference_extra ex = problem_extra(r->p, r->ent, r->lp);
    if (ex.class_weights) ex.class_weights += row0;
    r->st = flce_reference_vp_ex(&r->cfg, &comm, r->p->h, r->p->W + row0 * H,
                                 r->p->bias ? r->p->bias + row0 : NULL, r->p->targets, r->gtl, &ex, &r->loss,
                                 r->tl, r->lse, r->dh, r->dW, r->db, NULL);
    return NULL;
}

// The problem p run on P ranks (shards of p's Vp rows, vp_shard) and in one: every rank's loss,
// token losses, LSEs, entropies and log-probabilities, d_h (or, with d_hidden_partial, the sum
// of the ranks' parts), and each rank's rows of d_W and d_bias against the unsharded
// reference, to fp64 rounding; every rank's loss bitwise the same. With p's flce 1.1 options:
// temperature, class weights (each rank its classes'), the entropy's and log-probability's
// upstream gradients.
static void vp_check(const Problem *p, int P, int partial, const char *what) {
    const int64_t N = p->cfg.n_tokens, H = p->cfg.hidden, V = p->cfg.vocab, Vp = p->cfg.vocab_padded;
    const float *gtl = p->cfg.reduction == FLCE_REDUCTION_NONE ? p->gtl : NULL;
    double loss = 0.0, *tl = alloc_f64(N), *lse = alloc_f64(N), *ent = alloc_f64(N), *lp = alloc_f64(N);
    double *dh = alloc_f64(N * H), *dW = alloc_f64(Vp * H), *db = alloc_f64(Vp);
    const flce_reference_extra ex = problem_extra(p, ent, lp);
    flce_status st = flce_reference_ex(&p->cfg, p->h, p->W, p->bias, p->targets, gtl, &ex, &loss, tl, lse, dh,
                                       dW, p->bias ? db : NULL, NULL);
    vp_world w;
    VpRank r[VP_MAX_RANKS];
    pthread_t th[VP_MAX_RANKS];
    int ok = st == FLCE_OK && vp_world_init(&w, P) == 0;
    for (int k = 0; ok && k < P; k++) {
        int64_t row0, rows, real;
        vp_shard(V, Vp, P, k, &row0, &rows, &real);
        r[k].cfg = p->cfg;
        r[k].cfg.vocab = real;
        r[k].cfg.vocab_padded = rows;
        r[k].cfg.vocab_parallel = 1;
        r[k].cfg.d_hidden_partial = partial;
        r[k].cfg.vocab_offset = row0;
        r[k].cfg.vocab_total = V;
        r[k].rank.w = &w;
        r[k].rank.rank = k;
        r[k].p = p;
        r[k].gtl = gtl;
        r[k].tl = alloc_f64(N); r[k].lse = alloc_f64(N); r[k].dh = alloc_f64(N * H);
        r[k].ent = alloc_f64(N); r[k].lp = alloc_f64(N);
        r[k].dW = alloc_f64(rows * H); r[k].db = p->bias ? alloc_f64(rows) : NULL;
        r[k].st = FLCE_ERR_COMM;
    }
    for (int k = 0; ok && k < P; k++) ok = pthread_create(&th[k], NULL, vp_rank_main, &r[k]) == 0;
    double e_loss = 0.0, e_tl = 0.0, e_lse = 0.0, e_ent = 0.0, e_lp = 0.0, e_dh = 0.0, e_dW = 0.0, e_db = 0.0;
    int same_loss = 1, statuses = 1;
    if (ok) {
        for (int k = 0; k < P; k++) pthread_join(th[k], NULL);
        double *dh_sum = alloc_f64(N * H);
        for (int k = 0; k < P; k++) {
            statuses = statuses && r[k].st == FLCE_OK;
            same_loss = same_loss && memcmp(&r[k].loss, &r[0].loss, sizeof(double)) == 0 &&
                        memcmp(r[k].tl, r[0].tl, N * sizeof(double)) == 0 &&
                        memcmp(r[k].ent, r[0].ent, N * sizeof(double)) == 0 &&
                        memcmp(r[k].lp, r[0].lp, N * sizeof(double)) == 0;
            const double el = fabs(r[k].loss - loss) / (fabs(loss) > 1e-300 ? fabs(loss) : 1.0);
            e_loss = el > e_loss ? el : e_loss;
            double e = rel_l2_64(r[k].tl, tl, N); e_tl = e > e_tl ? e : e_tl;
            e = rel_l2_64(r[k].lse, lse, N); e_lse = e > e_lse ? e : e_lse;
            e = rel_l2_64(r[k].ent, ent, N); e_ent = e > e_ent ? e : e_ent;
            e = rel_l2_64(r[k].lp, lp, N); e_lp = e > e_lp ? e : e_lp;
            if (partial) {
                for (int64_t i = 0; i < N * H; i++) dh_sum[i] += r[k].dh[i];
            } else {
                e = rel_l2_64(r[k].dh, dh, N * H); e_dh = e > e_dh ? e : e_dh;
            }
            const int64_t row0 = r[k].cfg.vocab_offset, rows = r[k].cfg.vocab_padded;
            e = rel_l2_64(r[k].dW, dW + row0 * H, rows * H); e_dW = e > e_dW ? e : e_dW;
            if (p->bias) { e = rel_l2_64(r[k].db, db + row0, rows); e_db = e > e_db ? e : e_db; }
        }
        if (partial) e_dh = rel_l2_64(dh_sum, dh, N * H);
        free(dh_sum);
        vp_world_destroy(&w);
    }
    // the sharded and unsharded sums differ in order only: fp64 rounding (~1e-16); a wrong
    // term would be off by 1e-3 or more
    test_check(ok && statuses && same_loss && e_loss < 1e-13 && e_tl < 1e-13 && e_lse < 1e-13 && e_ent < 1e-13 &&
                   e_lp < 1e-13 && e_dh < 1e-13 && e_dW < 1e-13 && e_db < 1e-13,
               "vocab parallel, %d ranks%s, %s: loss %.12f vs %.12f (rel %.1e, every rank the same: %d), "
               "rel L2 token loss %.1e lse %.1e entropy %.1e logprob %.1e d_h %.1e d_W %.1e d_b %.1e",
               P, partial ? " (d_h partial, summed here)" : "", what, ok ? r[0].loss : NAN, loss, e_loss,
               same_loss, e_tl, e_lse, e_ent, e_lp, e_dh, e_dW, e_db);
    for (int k = 0; k < P && st == FLCE_OK; k++) {
        free(r[k].tl); free(r[k].lse); free(r[k].ent); free(r[k].lp); free(r[k].dh); free(r[k].dW);
        free(r[k].db);
    }
    free(tl); free(lse); free(ent); free(lp); free(dh); free(dW); free(db);
}

// Sharded against unsharded on problems with every option, targets at the shards' edges and
// ignored ones, 1 to 4 ranks with uneven shards (the last holds the padding rows), d_h summed
// by the reference or returned partial; and the refusals.
static void test_vocab_parallel(void) {
    Problem p = make_problem(37, 16, 29, 32, 1, 91);
    p.targets[3] = -100;
    p.targets[4] = 0;
    p.targets[5] = 28;  // the last real class, on the last rank
    vp_check(&p, 2, 0, "mean, bias");
    vp_check(&p, 3, 0, "mean, bias, uneven shards");
    vp_check(&p, 3, 1, "mean, bias, uneven shards");
    p.cfg.label_smoothing = 0.1f; p.cfg.z_loss_scale = 1e-2f; p.cfg.softcap = 5.0f;
    p.cfg.grad_scale = 0.5f;
    for (int red = 0; red <= 2; red++) {
        p.cfg.reduction = (flce_reduction)red;
        vp_check(&p, 2, 0, red == 0 ? "mean, every option" : red == 1 ? "sum, every option" :
                                                               "none with upstream grads, every option");
        vp_check(&p, 4, red == 1, red == 0 ? "mean, every option" : red == 1 ? "sum, every option" :
                                                                  "none with upstream grads, every option");
    }
    free_problem(&p);
    // a block (16 tokens) short at the end, no bias, one rank (the exchange with itself)
    Problem q = make_problem(21, 8, 200, 256, 0, 92);
    q.cfg.label_smoothing = 0.2f;
    vp_check(&q, 1, 0, "no bias, one rank");
    vp_check(&q, 4, 0, "no bias");
    free_problem(&q);

    // the options of flce 1.1 under vocab parallelism: the temperature (per logit), class
    // weights (each rank its classes'; the targets' weights and the weights' sum exchanged,
    // the weighted sum of logits a summed statistic), the entropy (its q a summed statistic)
    // and log-probability outputs and their upstream gradients
    Problem o = make_problem(37, 16, 29, 32, 1, 94);
    o.targets[3] = -100;
    o.targets[4] = 0;
    o.targets[5] = 28;
    o.targets[6] = 15;  // the first class of the second of two shards (rows 0..15, 16..31)
    o.cfg.temperature = 0.7f;
    vp_check(&o, 2, 0, "temperature 0.7");
    o.cfg.has_class_weights = 1;
    vp_check(&o, 3, 0, "temperature 0.7, class weights, mean");
    o.cfg.label_smoothing = 0.1f;
    o.use_ge = o.use_gl = 1;
    vp_check(&o, 2, 0, "temperature 0.7, class weights + smoothing, entropy and logprob gradients, mean");
    o.cfg.z_loss_scale = 1e-2f; o.cfg.softcap = 5.0f; o.cfg.grad_scale = 0.5f; o.cfg.temperature = 1.4f;
    for (int red = 0; red <= 2; red++) {
        o.cfg.reduction = (flce_reduction)red;
        const char *what = red == 0 ? "every 1.0 and 1.1 option, mean" : red == 1 ? "every 1.0 and 1.1 option, sum"
                                                                              : "every 1.0 and 1.1 option, none";
        vp_check(&o, 3, 0, what);
        vp_check(&o, 4, red != 1, what);
    }
    // entropy and log-probability gradients alone (reduction none with a zero upstream
    // gradient of the loss: only the rows' other terms), no weights
    o.cfg.has_class_weights = 0; o.cfg.label_smoothing = 0.0f; o.cfg.z_loss_scale = 0.0f;
    for (int64_t i = 0; i < o.cfg.n_tokens; i++) o.gtl[i] = 0.0f;
    vp_check(&o, 2, 0, "entropy and log-probability gradients alone, temperature 1.4, softcap");
    // every target of weight 0 (mean): 0 with zero gradients on every rank, never 0/0
    o.cfg.has_class_weights = 1; o.cfg.reduction = FLCE_REDUCTION_MEAN; o.use_ge = o.use_gl = 0;
    for (int64_t j = 0; j < o.cfg.vocab; j++) o.cw[j] = 0.0f;
    vp_check(&o, 2, 0, "every class weight 0, mean");
    free_problem(&o);

    // refusals, before anything is written or any collective is made
    Problem b = make_problem(9, 8, 12, 16, 0, 93);
    vp_world w;
    vp_world_init(&w, 1);
    vp_rank r0 = {&w, 0};
    const flce_comm comm = vp_comm_of(&r0);
    flce_config c = b.cfg;
    c.vocab_parallel = 1; c.vocab_offset = 0; c.vocab_total = 12;
    double loss = 0.0;
    test_check(flce_reference_vp(&c, NULL, b.h, b.W, NULL, b.targets, NULL, &loss, NULL, NULL, NULL, NULL,
                                 NULL, NULL) == FLCE_ERR_COMM,
               "vocab parallel without a communicator is refused (FLCE_ERR_COMM)");
    c.vocab_offset = 1;
    test_check(flce_reference_vp(&c, &comm, b.h, b.W, NULL, b.targets, NULL, &loss, NULL, NULL, NULL, NULL,
                                 NULL, NULL) == FLCE_ERR_INVALID_SIZE,
               "vocab_offset + vocab > vocab_total is refused");
    c.vocab_offset = -1; c.vocab_total = 40;
    test_check(flce_reference_vp(&c, &comm, b.h, b.W, NULL, b.targets, NULL, &loss, NULL, NULL, NULL, NULL,
                                 NULL, NULL) == FLCE_ERR_INVALID_SIZE,
               "a negative vocab_offset is refused");
    c = b.cfg;
    c.vocab_offset = 4;
    test_check(flce_reference(&c, b.h, b.W, NULL, b.targets, NULL, &loss, NULL, NULL, NULL, NULL, NULL, NULL) ==
                   FLCE_ERR_INVALID_VALUE,
               "vocab_offset without vocab_parallel is refused");
    c = b.cfg;
    c.vocab_parallel = 1; c.vocab_offset = 4; c.vocab_total = 40;
    b.targets[2] = 40;
    int64_t bad = -1;
    flce_status st = flce_reference_vp(&c, &comm, b.h, b.W, NULL, b.targets, NULL, &loss, NULL, NULL, NULL,
                                       NULL, NULL, &bad);
    test_check(st == FLCE_ERR_TARGET && bad == 2 && w.calls == 0,
               "a target >= vocab_total is bad (position %lld), before any collective", (long long)bad);
    b.targets[2] = 39;  // another rank's class: valid here
    st = flce_reference_vp(&c, &comm, b.h, b.W, NULL, b.targets, NULL, &loss, NULL, NULL, NULL, NULL, NULL,
                           &bad);
    test_check(st == FLCE_OK && bad == -1 && w.calls > 0,
               "a target on another rank's columns is valid (%d collectives)", w.calls);
    // class weights under vocab parallelism: refused as without it when missing, before any
    // collective
    const int calls = w.calls;
    c.has_class_weights = 1;
    flce_reference_extra ex = problem_extra(&b, NULL, NULL);
    ex.class_weights = NULL;
    st = flce_reference_vp_ex(&c, &comm, b.h, b.W, NULL, b.targets, NULL, &ex, &loss, NULL, NULL, NULL, NULL,
                              NULL, NULL);
    test_check(st == FLCE_ERR_NULL_POINTER && w.calls == calls,
               "vocab parallel: has_class_weights without weights refused (%d), no collective", (int)st);
    vp_world_destroy(&w);
    free_problem(&b);
}

// ---------------------------------------------------------------------------------------
// the options of flce 1.1: temperature, class weights, entropy and log-probabilities

// The reference's gradients (with its flce 1.1 arguments) against finite differences of the
// objective, on a problem already set up; gtl is the upstream gradient of reduction none.
static void fd_check(Problem *p, const float *gtl, const char *what) {
    const int64_t N = p->cfg.n_tokens, H = p->cfg.hidden, Vp = p->cfg.vocab_padded;
    double loss, *dh = alloc_f64(N * H), *dW = alloc_f64(Vp * H), *db = alloc_f64(Vp);
    const flce_reference_extra ex = problem_extra(p, NULL, NULL);
    flce_status st = flce_reference_ex(&p->cfg, p->h, p->W, p->bias, p->targets, gtl, &ex, &loss,
                                       NULL, NULL, dh, dW, p->cfg.has_bias ? db : NULL, NULL);
    double *nh = alloc_f64(N * H), *nW = alloc_f64(Vp * H), *nb = alloc_f64(Vp);
    numeric_grad(p, gtl, p->h, N * H, nh);
    numeric_grad(p, gtl, p->W, Vp * H, nW);
    if (p->cfg.has_bias) numeric_grad(p, gtl, p->bias, Vp, nb);
    double eh = rel_l2_dd(dh, nh, N * H), eW = rel_l2_dd(dW, nW, Vp * H);
    double eb = p->cfg.has_bias ? rel_l2_dd(db, nb, Vp) : 0.0;
    test_check(st == FLCE_OK && eh < 1e-4 && eW < 1e-4 && eb < 1e-4,
               "finite differences, %s: rel L2 d_h %.1e d_W %.1e d_bias %.1e", what, eh, eW, eb);
    free(dh); free(dW); free(db); free(nh); free(nW); free(nb);
}

// Each new option alone and in combinations, each reduction. A zero upstream gradient of
// reduction none leaves the entropy's or the log-probability's gradient alone in the check.
static void test_options_finite_differences(void) {
    const int64_t N = 6, H = 8, V = 7, Vp = 8;
    float zeros[6] = {0, 0, 0, 0, 0, 0};
    struct {
        const char *what;
        flce_reduction red;
        int bias, cw, ge, gl, zero_gtl;
        float T, eps, zl, cap, gs;
    } cases[] = {
        {"temperature 0.6, mean", FLCE_REDUCTION_MEAN, 0, 0, 0, 0, 0, 0.6f, 0, 0, 0, 1},
        {"temperature 1.7 + softcap + smoothing + z-loss + bias, sum", FLCE_REDUCTION_SUM, 1, 0, 0, 0, 0,
         1.7f, 0.1f, 0.05f, 2.0f, 0.5f},
        {"class weights, mean", FLCE_REDUCTION_MEAN, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1},
        {"class weights + smoothing, mean", FLCE_REDUCTION_MEAN, 1, 1, 0, 0, 0, 1, 0.2f, 0, 0, 1},
        {"class weights + smoothing + z-loss, none with upstream", FLCE_REDUCTION_NONE, 0, 1, 0, 0, 0, 1,
         0.1f, 0.05f, 0, 0.5f},
        {"entropy gradient alone", FLCE_REDUCTION_NONE, 1, 0, 1, 0, 1, 1, 0, 0, 0, 1},
        {"entropy gradient alone, temperature 0.8 + softcap", FLCE_REDUCTION_NONE, 1, 0, 1, 0, 1, 0.8f, 0, 0,
         2.0f, 0.5f},
        {"log-probability gradient alone", FLCE_REDUCTION_NONE, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1},
        {"log-probability gradient alone, temperature 1.3 + softcap", FLCE_REDUCTION_NONE, 1, 0, 0, 1, 1,
         1.3f, 0, 0, 3.0f, 1},
        {"entropy + log-probability gradients with the loss, mean", FLCE_REDUCTION_MEAN, 0, 0, 1, 1, 0, 1, 0,
         0, 0, 1},
        {"everything, mean", FLCE_REDUCTION_MEAN, 1, 1, 1, 1, 0, 0.7f, 0.1f, 0.05f, 2.0f, 0.5f},
        {"everything, sum", FLCE_REDUCTION_SUM, 1, 1, 1, 1, 0, 1.4f, 0.1f, 0.05f, 2.0f, 0.5f},
        {"everything, none with upstream", FLCE_REDUCTION_NONE, 1, 1, 1, 1, 0, 0.7f, 0.1f, 0.05f, 2.0f,
         0.25f},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        Problem p = make_problem(N, H, V, Vp, cases[k].bias, 301 + k);
        p.cfg.reduction = cases[k].red;
        p.cfg.has_class_weights = cases[k].cw;
        p.use_ge = cases[k].ge;
        p.use_gl = cases[k].gl;
        p.cfg.temperature = cases[k].T;
        p.cfg.label_smoothing = cases[k].eps;
        p.cfg.z_loss_scale = cases[k].zl;
        p.cfg.softcap = cases[k].cap;
        p.cfg.grad_scale = cases[k].gs;
        p.targets[2] = -100;
        const float *gtl = cases[k].red != FLCE_REDUCTION_NONE ? NULL : cases[k].zero_gtl ? zeros : p.gtl;
        fd_check(&p, gtl, cases[k].what);
        free_problem(&p);
    }
}

// Every output of the reference, for the identities below.
typedef struct { double loss, *tl, *lse, *ent, *lp, *dh, *dW, *db; } RefOut;

static RefOut ref_run(const Problem *p, const float *gtl, int want_ent) {
    const int64_t N = p->cfg.n_tokens, H = p->cfg.hidden, Vp = p->cfg.vocab_padded;
    RefOut o;
    o.tl = alloc_f64(N); o.lse = alloc_f64(N); o.ent = alloc_f64(N); o.lp = alloc_f64(N);
    o.dh = alloc_f64(N * H); o.dW = alloc_f64(Vp * H); o.db = alloc_f64(Vp);
    const flce_reference_extra ex = problem_extra(p, want_ent ? o.ent : NULL, want_ent ? o.lp : NULL);
    if (flce_reference_ex(&p->cfg, p->h, p->W, p->bias, p->targets, gtl, &ex, &o.loss, o.tl, o.lse,
                          o.dh, o.dW, p->cfg.has_bias ? o.db : NULL, NULL) != FLCE_OK)
        o.loss = NAN;
    return o;
}

static void ref_free(RefOut *o) {
    free(o->tl); free(o->lse); free(o->ent); free(o->lp); free(o->dh); free(o->dW); free(o->db);
}

static int same_f64(const double *a, const double *b, size_t n) {
    return memcmp(a, b, n * sizeof(double)) == 0;
}

// max |a - b| / max(|b|, floor)
static double max_rel(const double *a, const double *b, size_t n) {
    double e = 0.0, m = 1e-300;
    for (size_t i = 0; i < n; i++) m = fabs(b[i]) > m ? fabs(b[i]) : m;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs(a[i] - b[i]) / m;
        e = d > e || d != d ? d : e;
    }
    return e;
}

static void test_options_identities(void) {
    const int64_t N = 21, H = 16, V = 13, Vp = 16;
    // temperature 1 is no temperature: outputs requested but no new option changes nothing,
    // bit for bit (the old code path)
    {
        Problem p = make_problem(N, H, V, Vp, 1, 41);
        p.cfg.label_smoothing = 0.1f; p.cfg.z_loss_scale = 1e-2f; p.cfg.softcap = 5.0f;
        p.targets[3] = -100;
        RefOut a = ref_run(&p, NULL, 0), b = ref_run(&p, NULL, 1);
        double l_old = NAN, *dh = alloc_f64(N * H), *dW = alloc_f64(Vp * H);
        flce_status st = flce_reference(&p.cfg, p.h, p.W, p.bias, p.targets, NULL, &l_old, NULL, NULL,
                                        dh, dW, NULL, NULL);
        test_check(st == FLCE_OK && a.loss == b.loss && a.loss == l_old && same_f64(a.tl, b.tl, N) &&
                       same_f64(a.dh, b.dh, N * H) && same_f64(a.dW, b.dW, Vp * H) &&
                       same_f64(a.dh, dh, N * H) && same_f64(a.dW, dW, Vp * H),
                   "temperature 1 with entropy / log-probability outputs: bitwise the plain call");
        free(dh); free(dW);
        ref_free(&a); ref_free(&b);
        free_problem(&p);
    }
    // temperature 2 on (h, W, b) is temperature 1 on (h, W / 2, b / 2), bit for bit (halving
    // is exact): the same losses, LSE, entropies, d_h, and half the parameter gradients
    {
        Problem p = make_problem(N, H, V, Vp, 1, 42);
        p.cfg.label_smoothing = 0.1f; p.cfg.z_loss_scale = 1e-2f; p.cfg.has_class_weights = 1;
        p.use_ge = p.use_gl = 1;
        p.targets[5] = -100;
        p.cfg.temperature = 2.0f;
        RefOut a = ref_run(&p, NULL, 1);
        for (int64_t k = 0; k < Vp * H; k++) p.W[k] *= 0.5f;
        for (int64_t j = 0; j < Vp; j++) p.bias[j] *= 0.5f;
        p.cfg.temperature = 1.0f;
        RefOut b = ref_run(&p, NULL, 1);
        for (int64_t k = 0; k < Vp * H; k++) b.dW[k] *= 0.5;
        for (int64_t j = 0; j < Vp; j++) b.db[j] *= 0.5;
        test_check(a.loss == b.loss && same_f64(a.tl, b.tl, N) && same_f64(a.lse, b.lse, N) &&
                       same_f64(a.ent, b.ent, N) && same_f64(a.lp, b.lp, N) && same_f64(a.dh, b.dh, N * H) &&
                       same_f64(a.dW, b.dW, Vp * H) && same_f64(a.db, b.db, Vp),
                   "temperature 2 on (h, W, b) == temperature 1 on (h, W/2, b/2), bitwise (loss %.6f)",
                   a.loss);
        ref_free(&a); ref_free(&b);
        free_problem(&p);
    }
    // class weights all 1 are no weights; a constant weight leaves a mean unchanged (no z-loss:
    // it is not weighted, but divided by the weights' sum)
    for (int red = 0; red <= 2; red++) {
        Problem p = make_problem(N, H, V, Vp, 1, 43 + red);
        p.cfg.reduction = (flce_reduction)red;
        p.cfg.label_smoothing = 0.1f; p.cfg.z_loss_scale = 1e-2f; p.cfg.softcap = 5.0f;
        p.targets[1] = -100;
        RefOut a = ref_run(&p, red == 2 ? p.gtl : NULL, 0);
        for (int64_t j = 0; j < V; j++) p.cw[j] = 1.0f;
        p.cfg.has_class_weights = 1;
        RefOut b = ref_run(&p, red == 2 ? p.gtl : NULL, 0);
        double e = fabs(a.loss - b.loss) / fabs(a.loss);
        double et = max_rel(b.tl, a.tl, N), eh = max_rel(b.dh, a.dh, N * H), eW = max_rel(b.dW, a.dW, Vp * H);
        test_check(e < 1e-13 && et < 1e-13 && eh < 1e-13 && eW < 1e-13,
                   "class weights all 1 == unweighted (reduction %d): loss %.1e token %.1e d_h %.1e d_W %.1e",
                   red, e, et, eh, eW);
        ref_free(&a); ref_free(&b);
        free_problem(&p);
    }
    {
        Problem p = make_problem(N, H, V, Vp, 0, 46);
        p.cfg.label_smoothing = 0.2f;
        p.targets[0] = -100;
        RefOut a = ref_run(&p, NULL, 0);
        for (int64_t j = 0; j < V; j++) p.cw[j] = 3.0f;
        p.cfg.has_class_weights = 1;
        RefOut b = ref_run(&p, NULL, 0);
        double e = fabs(a.loss - b.loss) / fabs(a.loss), eh = max_rel(b.dh, a.dh, N * H);
        double eW = max_rel(b.dW, a.dW, Vp * H);
        test_check(e < 1e-13 && eh < 1e-13 && eW < 1e-13,
                   "class weights all 3, mean with smoothing == unweighted: loss %.1e d_h %.1e d_W %.1e", e,
                   eh, eW);
        // a target of weight 0 costs nothing (no smoothing): its token's loss is 0
        p.cfg.label_smoothing = 0.0f;
        p.cw[p.targets[4]] = 0.0f;
        RefOut c = ref_run(&p, NULL, 0);
        test_check(c.tl[4] == 0.0 && c.tl[6] != 0.0, "a target of weight 0: token loss %g", c.tl[4]);
        // every target of weight 0: mean 0 with zero gradients (never 0/0), like all ignored
        for (int64_t j = 0; j < V; j++) p.cw[j] = 0.0f;
        RefOut d = ref_run(&p, NULL, 0);
        test_check(d.loss == 0.0 && all_zero_f64(d.dh, N * H) && all_zero_f64(d.dW, Vp * H),
                   "every weight 0, mean: loss %g, zero gradients", d.loss);
        ref_free(&a); ref_free(&b); ref_free(&c); ref_free(&d);
        free_problem(&p);
    }
    // a uniform row (W = 0, no bias): entropy log V, log-probability -log V, at any temperature
    {
        Problem p = make_problem(N, H, V, Vp, 0, 47);
        memset(p.W, 0, (size_t)(Vp * H) * sizeof(float));
        p.cfg.temperature = 0.3f;
        p.targets[2] = -100;
        RefOut a = ref_run(&p, NULL, 1);
        int ok = 1;
        for (int64_t i = 0; i < N; i++) {
            ok = ok && fabs(a.ent[i] - log((double)V)) < 1e-14 && fabs(a.lse[i] - log((double)V)) < 1e-14;
            ok = ok && (i == 2 ? a.lp[i] == 0.0 : fabs(a.lp[i] + log((double)V)) < 1e-14);
        }
        test_check(ok, "uniform rows: entropy = lse = log V = %.6f, log-probability -log V (0 if ignored)",
                   log((double)V));
        ref_free(&a);
        free_problem(&p);
    }
    // on a random problem: 0 <= H <= log V, logprob <= 0, and with neither smoothing nor z-loss
    // nor weights the token loss is exactly -logprob
    {
        Problem p = make_problem(N, H, V, Vp, 1, 48);
        p.cfg.temperature = 0.5f;
        p.cfg.reduction = FLCE_REDUCTION_NONE;
        p.targets[7] = -100;
        RefOut a = ref_run(&p, NULL, 1);
        int range = 1, nll = 1;
        for (int64_t i = 0; i < N; i++) {
            range = range && a.ent[i] >= 0.0 && a.ent[i] <= log((double)V) + 1e-12 && a.lp[i] <= 0.0;
            nll = nll && a.tl[i] == -a.lp[i];
        }
        test_check(range && nll, "0 <= entropy <= log V, logprob <= 0 (%d); token loss == -logprob bitwise (%d)",
                   range, nll);
        ref_free(&a);
        // an upstream gradient -g of the log-probability is the gradient g of the loss
        float *neg = alloc_f32(N), *zeros = alloc_f32(N);
        for (int64_t i = 0; i < N; i++) neg[i] = -p.gtl[i];
        RefOut b = ref_run(&p, p.gtl, 0);
        float *gl = p.gl;
        p.gl = neg;
        p.use_gl = 1;
        RefOut c = ref_run(&p, zeros, 0);
        p.gl = gl;
        double eh = max_rel(c.dh, b.dh, N * H), eW = max_rel(c.dW, b.dW, Vp * H);
        test_check(eh < 1e-13 && eW < 1e-13,
                   "log-probability upstream -g == loss upstream g: d_h %.1e d_W %.1e", eh, eW);
        ref_free(&b); ref_free(&c);
        free(neg); free(zeros);
        free_problem(&p);
    }
    // an entropy gradient reaches ignored tokens too (every token has a softmax); a
    // log-probability gradient does not
    {
        Problem p = make_problem(N, H, V, Vp, 0, 49);
        for (int64_t i = 0; i < N; i++) p.targets[i] = -100;
        p.use_gl = 1;
        RefOut a = ref_run(&p, NULL, 1);
        p.use_ge = 1;
        RefOut b = ref_run(&p, NULL, 1);
        test_check(a.loss == 0.0 && all_zero_f64(a.dh, N * H) && !all_zero_f64(b.dh, N * H) &&
                       all_zero_f64(b.lp, N),
                   "all ignored: the log-probability gradient is 0, the entropy gradient is not");
        ref_free(&a); ref_free(&b);
        free_problem(&p);
    }
}

// Bad flce 1.1 arguments are refused before anything is written.
static void test_options_rejected(void) {
    const int64_t N = 9, H = 8, V = 5, Vp = 8;
    Problem p = make_problem(N, H, V, Vp, 1, 51);
    const float bad_t[] = {0.0f, -1.0f, NAN, INFINITY};
    for (int k = 0; k < 4; k++) {
        p.cfg.temperature = bad_t[k];
        Outputs o = guarded_outputs(&p.cfg);
        flce_status st = flce_reference(&p.cfg, p.h, p.W, p.bias, p.targets, NULL, o.loss, o.tl, o.lse,
                                        o.dh, o.dW, o.db, NULL);
        test_check(st == FLCE_ERR_INVALID_VALUE && outputs_untouched(&o, &p.cfg, 1),
                   "reference: temperature %g refused (status %d), outputs untouched", (double)bad_t[k],
                   (int)st);
        free_outputs(&o);
    }
    p.cfg.temperature = 1.0f;
    flce_reference_extra ex = problem_extra(&p, NULL, NULL);
    p.cfg.has_class_weights = 1;
    ex.class_weights = NULL;
    flce_status st = flce_reference_ex(&p.cfg, p.h, p.W, p.bias, p.targets, NULL, &ex, NULL, NULL,
                                       NULL, NULL, NULL, NULL, NULL);
    test_check(st == FLCE_ERR_NULL_POINTER, "reference: has_class_weights without weights refused (%d)",
               (int)st);
    p.cfg.has_class_weights = 0;
    ex.class_weights = p.cw;
    st = flce_reference_ex(&p.cfg, p.h, p.W, p.bias, p.targets, NULL, &ex, NULL, NULL, NULL, NULL, NULL,
                           NULL, NULL);
    test_check(st == FLCE_ERR_INVALID_VALUE, "reference: weights without has_class_weights refused (%d)",
               (int)st);
    p.cfg.has_class_weights = 2;
    st = flce_reference_ex(&p.cfg, p.h, p.W, p.bias, p.targets, NULL, &ex, NULL, NULL, NULL, NULL, NULL,
                           NULL, NULL);
    test_check(st == FLCE_ERR_INVALID_VALUE, "reference: has_class_weights = 2 refused (%d)", (int)st);
    p.cfg.has_class_weights = 1;
    p.cw[3] = NAN;
    Outputs o = guarded_outputs(&p.cfg);
    st = flce_reference_ex(&p.cfg, p.h, p.W, p.bias, p.targets, NULL, &ex, o.loss, o.tl, o.lse, o.dh,
                           o.dW, o.db, NULL);
    test_check(st == FLCE_ERR_INVALID_VALUE && outputs_untouched(&o, &p.cfg, 1),
               "reference: a NaN class weight refused (%d), outputs untouched", (int)st);
    free_outputs(&o);
    free_problem(&p);
}

// ---------------------------------------------------------------------------------------
// the fixture reader

static int write_file(const char *path, const unsigned char *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (fp == NULL) return 0;
    size_t w = fwrite(data, 1, n, fp);
    return fclose(fp) == 0 && w == n;
}

static int load_should_fail(const char *path) {
    Fixture f;
    int ok = fixture_load(path, &f);
    if (ok) fixture_free(&f);
    return !ok;
}

static void test_fixture_reader(const char *good_path) {
    FILE *fp = fopen(good_path, "rb");
    if (!test_check(fp != NULL, "open %s for the reader checks", good_path)) return;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *data = (unsigned char *)malloc(n + 1);
    size_t got = fread(data, 1, n, fp);
    fclose(fp);
    if (!test_check(n > 1024 && got == (size_t)n, "read %s (%ld bytes)", good_path, n)) {
        free(data);
        return;
    }
    char tmp[256];
    snprintf(tmp, sizeof(tmp), "/tmp/flce_test_cpu_%d.bin", (int)getpid());
    printf("  (the reader messages below are expected)\n");
    fflush(stdout);

    // an unchanged copy loads and holds the same numbers, so the failures below are due
    // to the damage alone
    Fixture a, b;
    int ok = write_file(tmp, data, n) && fixture_load(good_path, &a);
    if (ok) {
        ok = fixture_load(tmp, &b);
        if (ok) {
            ok = rel_l2_f32(b.h, a.h, (size_t)a.N * a.H) == 0.0 &&
                 rel_l2_f32(b.d_W, a.d_W, (size_t)a.Vp * a.H) == 0.0 && a.loss == b.loss;
            fixture_free(&b);
        }
        fixture_free(&a);
    }
    test_check(ok, "reader: an intact copy loads identically");

    test_check(write_file(tmp, data, n - 4) && load_should_fail(tmp),
               "reader: rejects a file missing its last 4 bytes");
    test_check(write_file(tmp, data, 100) && load_should_fail(tmp),
               "reader: rejects a file cut inside the header");
    test_check(write_file(tmp, data, 0) && load_should_fail(tmp), "reader: rejects an empty file");
    data[n] = 0;
    test_check(write_file(tmp, data, n + 1) && load_should_fail(tmp),
               "reader: rejects a trailing byte");
    unsigned char saved[4];
    memcpy(saved, data, 4);
    data[0] ^= 0x5a;
    test_check(write_file(tmp, data, n) && load_should_fail(tmp), "reader: rejects a bad magic");
    memcpy(data, saved, 4);
    data[4] ^= 0x02;  // version 1 -> 3
    test_check(write_file(tmp, data, n) && load_should_fail(tmp), "reader: rejects a bad version");
    data[4] ^= 0x02;
    int32_t neg = -5;
    memcpy(data + 4 * 4, &neg, 4);  // V
    test_check(write_file(tmp, data, n) && load_should_fail(tmp), "reader: rejects V < 0");
    remove(tmp);
    free(data);
}


// A version 2 fixture written here from the reference's own answer (what export_fixtures.py
// writes from PyTorch's, in the layout of fixture.h): the reader must load every array of it,
// and test_fixture must pass on it. Then a header flag other than 0 or 1 is refused.
static void put_f32(FILE *fp, const double *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float v = (float)x[i];
        fwrite(&v, 4, 1, fp);
    }
}

static void test_fixture_v2_roundtrip(void) {
    const int64_t N = 13, H = 16, V = 11, Vp = 16;
    Problem p = make_problem(N, H, V, Vp, 1, 61);
    p.cfg.reduction = FLCE_REDUCTION_MEAN;
    p.cfg.temperature = 0.75f; p.cfg.has_class_weights = 1; p.cfg.label_smoothing = 0.1f;
    p.use_ge = p.use_gl = 1;
    p.targets[3] = -100;
    RefOut o = ref_run(&p, NULL, 1);
    char path[256];
    snprintf(path, sizeof(path), "/tmp/flce_test_cpu_v2_%d.bin", (int)getpid());
    FILE *fp = fopen(path, "wb");
    if (!test_check(fp != NULL, "write %s", path)) { ref_free(&o); free_problem(&p); return; }
    int32_t hd[256];
    memset(hd, 0, sizeof(hd));
    hd[0] = FIXTURE_MAGIC; hd[1] = 2; hd[2] = (int32_t)N; hd[3] = (int32_t)H; hd[4] = (int32_t)V;
    hd[5] = (int32_t)Vp; hd[6] = 1; hd[7] = 0; hd[8] = -100; hd[9] = 0;
    hd[10] = 1; hd[11] = 1; hd[12] = 1; hd[13] = 1; hd[14] = 1;
    memcpy(&hd[16], &p.cfg.label_smoothing, 4); memcpy(&hd[17], &p.cfg.z_loss_scale, 4);
    memcpy(&hd[18], &p.cfg.softcap, 4); memcpy(&hd[19], &p.cfg.grad_scale, 4);
    memcpy(&hd[20], &p.cfg.temperature, 4);
    fwrite(hd, 4, 256, fp);
    fwrite(p.h, 4, N * H, fp); fwrite(p.W, 4, Vp * H, fp); fwrite(p.bias, 4, Vp, fp);
    fwrite(p.targets, 4, N, fp);
    fwrite(p.cw, 4, V, fp); fwrite(p.ge, 4, N, fp); fwrite(p.gl, 4, N, fp);
    put_f32(fp, &o.loss, 1); put_f32(fp, o.tl, N); put_f32(fp, o.lse, N); put_f32(fp, o.dh, N * H);
    put_f32(fp, o.dW, Vp * H); put_f32(fp, o.db, Vp); put_f32(fp, o.ent, N); put_f32(fp, o.lp, N);
    const int closed = fclose(fp) == 0;
    Fixture f;
    int ok = closed && fixture_load(path, &f);
    if (ok) {
        ok = f.version == 2 && f.temperature == 0.75f && f.has_class_weights && f.has_entropy &&
             f.has_logprob && f.has_grad_entropy && f.has_grad_logprob && fixture_has_new_options(&f) &&
             memcmp(f.class_weights, p.cw, V * 4) == 0 && memcmp(f.grad_logprob, p.gl, N * 4) == 0 &&
             f.token_entropy[5] == (float)o.ent[5] && f.token_logprob[N - 1] == (float)o.lp[N - 1];
        fixture_free(&f);
    }
    test_check(ok, "reader: a version 2 fixture (temperature, weights, entropy, log-probabilities) loads");
    if (ok) test_fixture(path);
    // a flag of 2 is refused
    fp = fopen(path, "r+b");
    if (fp != NULL) {
        const int32_t two = 2;
        fseek(fp, 11 * 4, SEEK_SET);
        fwrite(&two, 4, 1, fp);
        fclose(fp);
    }
    printf("  (the reader message below is expected)\n");
    fflush(stdout);
    test_check(fp != NULL && load_should_fail(path), "reader: refuses a version 2 header flag of 2");
    remove(path);
    ref_free(&o);
    free_problem(&p);
}

// The fixtures of the flce 1.1 options come from scripts/export_fixtures.py, which needs
// PyTorch: where they have not been exported yet, say so (not a failure).
static void note_option_fixtures(char **paths, int n_paths, const char *dir) {
    int n_new = 0;
    for (int k = 0; k < n_paths; k++) {
        Fixture f;
        if (!fixture_load(paths[k], &f)) continue;
        n_new += fixture_has_new_options(&f);
        fixture_free(&f);
    }
    if (n_new == 0)
        printf("  (note: no fixtures of the temperature / class-weight / entropy / log-probability "
               "options in %s; `python3 scripts/export_fixtures.py %s` on a machine with PyTorch writes "
               "them)\n", dir, dir);
    else
        printf("  (%d fixtures of the flce 1.1 options checked above)\n", n_new);
}

// ---------------------------------------------------------------------------------------
// host-only library functions (flce_plan.c), compiled in with -DFLCE_HAVE_LIB

#ifdef FLCE_HAVE_LIB
static void test_library_host(char **paths, int n_paths) {
    flce_config c;
    flce_config_init(&c, 37, 64, 1001);
    test_check(c.n_tokens == 37 && c.hidden == 64 && c.vocab == 1001 && c.vocab_padded == 1001 &&
               c.ignore_index == -100 && c.reduction == FLCE_REDUCTION_MEAN &&
               c.label_smoothing == 0.0f && c.z_loss_scale == 0.0f && c.softcap == 0.0f &&
               c.grad_scale == 1.0f && c.has_bias == 0 && c.max_chunk_tokens == 0 &&
               c.temperature == 1.0f && c.has_class_weights == 0,
               "lib: flce_config_init sets the documented defaults");
    char msg[256];
    test_check(flce_config_check(&c, msg, sizeof(msg)) == FLCE_OK, "lib: defaults pass the check");

    // each broken field alone must be refused, with a message
    struct { const char *what; flce_config c; flce_status expect; const char *field; } bad[24];
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) bad[k].field = NULL;
    int nb = 0;
    bad[nb].what = "vocab_padded < vocab"; bad[nb].c = c; bad[nb].c.vocab_padded = 1000;
    bad[nb++].expect = FLCE_ERR_INVALID_SIZE;
    bad[nb].what = "n_tokens 0"; bad[nb].c = c; bad[nb].c.n_tokens = 0;
    bad[nb++].expect = FLCE_ERR_INVALID_SIZE;
    // hidden is the row stride of h and W, so an odd one is a misalignment (bf16: 8 elements)
    bad[nb].what = "hidden not a multiple of 8"; bad[nb].c = c; bad[nb].c.hidden = 60;
    bad[nb++].expect = FLCE_ERR_MISALIGNED;
    bad[nb].what = "label_smoothing 1"; bad[nb].c = c; bad[nb].c.label_smoothing = 1.0f;
    bad[nb++].expect = FLCE_ERR_INVALID_VALUE;
    bad[nb].what = "z_loss_scale < 0"; bad[nb].c = c; bad[nb].c.z_loss_scale = -1.0f;
    bad[nb++].expect = FLCE_ERR_INVALID_VALUE;
    bad[nb].what = "softcap < 0"; bad[nb].c = c; bad[nb].c.softcap = -1.0f;
    bad[nb++].expect = FLCE_ERR_INVALID_VALUE;
    bad[nb].what = "grad_scale NaN"; bad[nb].c = c; bad[nb].c.grad_scale = NAN;
    bad[nb++].expect = FLCE_ERR_INVALID_VALUE;
    bad[nb].what = "max_vocab_tile 63"; bad[nb].c = c; bad[nb].c.max_vocab_tile = 63;
    bad[nb++].expect = FLCE_ERR_INVALID_VALUE;
    bad[nb].what = "reduction 7"; bad[nb].c = c; bad[nb].c.reduction = (flce_reduction)7;
    bad[nb++].expect = FLCE_ERR_INVALID_VALUE;
    // vocabulary parallelism's fields
    bad[nb].what = "vocab_offset without vocab_parallel"; bad[nb].c = c; bad[nb].c.vocab_offset = 5;
    bad[nb++].expect = FLCE_ERR_INVALID_VALUE;
    bad[nb].what = "vocab_parallel 2"; bad[nb].c = c; bad[nb].c.vocab_parallel = 2;
    bad[nb++].expect = FLCE_ERR_INVALID_VALUE;
    bad[nb].what = "vocab_offset + vocab > vocab_total"; bad[nb].c = c; bad[nb].c.vocab_parallel = 1;
    bad[nb].c.vocab_offset = 1000; bad[nb].c.vocab_total = 2000;
    bad[nb++].expect = FLCE_ERR_INVALID_SIZE;
    bad[nb].what = "vocab_offset < 0"; bad[nb].c = c; bad[nb].c.vocab_parallel = 1;
    bad[nb].c.vocab_offset = -1; bad[nb].c.vocab_total = 2000;
    bad[nb++].expect = FLCE_ERR_INVALID_SIZE;
    // flce 1.1: the message names the field
    const float bad_t[] = {0.0f, -2.0f, NAN, INFINITY};
    const char *bad_t_what[] = {"temperature 0", "temperature -2", "temperature NaN", "temperature inf"};
    for (int k = 0; k < 4; k++) {
        bad[nb].what = bad_t_what[k]; bad[nb].c = c; bad[nb].c.temperature = bad_t[k];
        bad[nb].field = "temperature"; bad[nb++].expect = FLCE_ERR_INVALID_VALUE;
    }
    bad[nb].what = "has_class_weights 2"; bad[nb].c = c; bad[nb].c.has_class_weights = 2;
    bad[nb].field = "has_class_weights"; bad[nb++].expect = FLCE_ERR_INVALID_VALUE;
    for (int k = 0; k < nb; k++) {
        msg[0] = 0;
        flce_status st = flce_config_check(&bad[k].c, msg, sizeof(msg));
        test_check(st == bad[k].expect && msg[0] != 0 && (!bad[k].field || strstr(msg, bad[k].field)),
                   "lib: config_check refuses %s (%d: %s)", bad[k].what, (int)st, msg);
    }
    flce_config tc = c;
    tc.temperature = 0.5f; tc.has_class_weights = 1;
    test_check(flce_config_check(&tc, msg, sizeof(msg)) == FLCE_OK,
               "lib: temperature 0.5 with class weights is a valid config");

    // a valid vocab-parallel config; ranks with the same rows but fewer real classes (the last
    // shard) are planned the same chunks, on either path (the collectives count the chunks)
    {
        flce_config r0 = c, r1 = c;
        r0.vocab_parallel = r1.vocab_parallel = 1;
        r0.vocab_total = r1.vocab_total = 2 * 1001 - 77;
        r0.vocab_offset = 0; r1.vocab_offset = 1001; r1.vocab = 1001 - 77;  // (its E rows 960 wide against 1024)
        r0.n_tokens = r1.n_tokens = 700;  // (enough tokens for several chunks in the budgets below)
        msg[0] = 0;
        test_check(flce_config_check(&r0, msg, sizeof(msg)) == FLCE_OK &&
                       flce_config_check(&r1, msg, sizeof(msg)) == FLCE_OK,
                   "lib: vocab-parallel configs of two ranks pass the check %s", msg);
        int same = 1;
        for (int opts = 0; opts < 2; opts++) {
            // with flce 1.1's options too (class weights add the targets' weights to the buffer
            // the ranks sum with the target logits)
            if (opts) {
                r0.temperature = r1.temperature = 0.6f;
                r0.has_class_weights = r1.has_class_weights = 1;
                r0.label_smoothing = r1.label_smoothing = 0.1f;
                msg[0] = 0;
                test_check(flce_config_check(&r0, msg, sizeof(msg)) == FLCE_OK &&
                               flce_config_check(&r1, msg, sizeof(msg)) == FLCE_OK,
                           "lib: vocab-parallel configs with temperature, class weights, smoothing pass %s", msg);
            }
            for (int hop = 0; hop < 2; hop++) {
                // (the Hopper path's planner without a GPU: flce_dev_set_plan_sms, bf16 inputs);
                // each rank in its own workspace too, as a program sizes them (flce_workspace_size)
                flce_set_hopper_default(hop);
                if (hop) flce_dev_set_plan_sms(132);
                r0.dtype = r1.dtype = hop ? FLCE_BF16 : c.dtype;
                for (size_t budget = (size_t)40 << 10; budget <= (size_t)4 << 20; budget *= 2) {
                    size_t b0 = 0, b1 = 0;
                    const flce_status s0 = flce_workspace_size(&r0, budget, &b0);
                    const flce_status s1 = flce_workspace_size(&r1, budget, &b1);
                    if (s0 == FLCE_ERR_WORKSPACE && s1 == FLCE_ERR_WORKSPACE) continue;  // (below the minimum)
                    same = same && s0 == FLCE_OK && s1 == FLCE_OK && b1 <= b0 &&
                           flce_chunk_tokens(&r0, b0) == flce_chunk_tokens(&r1, b0) &&
                           flce_chunk_tokens(&r0, b0) == flce_chunk_tokens(&r1, b1);
                }
                flce_dev_set_plan_sms(0);
            }
            r0.dtype = r1.dtype = c.dtype;
        }
        flce_set_hopper_default(0);
        test_check(same, "lib: vocab-parallel ranks of equal rows are planned the same chunks (with and "
                         "without the 1.1 options)");
    }

    // workspace sizing: within budget, a chunk of at least one token, no more than N
    size_t bytes = 0, budget = (size_t)256 << 20;
    flce_status st = flce_workspace_size(&c, budget, &bytes);
    int64_t chunk = flce_chunk_tokens(&c, bytes);
    test_check(st == FLCE_OK && bytes > 0 && bytes <= budget && chunk >= 1 && chunk <= c.n_tokens,
               "lib: workspace %zu bytes for a 256 MiB budget, chunk %lld tokens", bytes,
               (long long)chunk);
    // too small a budget: the error, and the true minimum, i.e. exactly enough for a chunk
    size_t min_bytes = 0;
    st = flce_workspace_size(&c, 1, &min_bytes);
    int64_t at_min = flce_chunk_tokens(&c, min_bytes), below = flce_chunk_tokens(&c, min_bytes - 1);
    test_check(st == FLCE_ERR_WORKSPACE && min_bytes > 1 && at_min >= 1 && below == 0,
               "lib: a 1-byte budget gives status %d and minimum %zu bytes, with chunks of %lld "
               "tokens at it and %lld one byte below", (int)st, min_bytes, (long long)at_min,
               (long long)below);
    c.max_chunk_tokens = 8;
    test_check(flce_chunk_tokens(&c, bytes) >= 1 && flce_chunk_tokens(&c, bytes) <= 8,
               "lib: max_chunk_tokens bounds the chunk");

    // the planner at the benchmark's seed shape: whole multiples of 128 tokens within the
    // budget; a bf16 d_W over several chunks adds its fp32 accumulator to the workspace
    flce_config big;
    flce_config_init(&big, 65535, 1024, 176245);
    size_t big_bytes = 0, gib = (size_t)1 << 30;
    st = flce_workspace_size(&big, gib, &big_bytes);
    int64_t big_chunk = flce_chunk_tokens(&big, big_bytes);
    size_t ldl = (176245 + 63) / 64 * 64;
    // fp32 logits by default: 4 bytes a logit
    test_check(st == FLCE_OK && big_bytes <= gib && big_chunk % 128 == 0 && big_chunk >= 1024 &&
                   big_bytes >= (size_t)big_chunk * ldl * 4,
               "lib: 65535x1024x176245 in 1 GiB: %zu bytes, chunks of %lld tokens", big_bytes,
               (long long)big_chunk);
    test_check(flce_vocab_tile(&big, big_bytes) == 176245,
               "lib: 65535x1024x176245 in 1 GiB takes the chunk schedule (whole vocabulary)");
    big.d_weight_dtype = FLCE_BF16;
    st = flce_workspace_size(&big, gib, &big_bytes);
    int64_t bf16_chunk = flce_chunk_tokens(&big, big_bytes);
    int64_t bf16_tile = flce_vocab_tile(&big, big_bytes);
    test_check(st == FLCE_OK && big_bytes <= gib && bf16_chunk >= 1 &&
                   big_bytes >= (size_t)176245 * 1024 * 4 + (size_t)bf16_chunk * bf16_tile * 4,
               "lib: a bf16 d_W adds its fp32 accumulator: %zu bytes, chunks of %lld tokens, "
               "tiles of %lld columns", big_bytes, (long long)bf16_chunk, (long long)bf16_tile);
    // the tile schedule: at 160 MiB, chunks of thousands of tokens with vocabulary tiles, where
    // the chunk schedule would have to take chunks of ~100 tokens
    big.d_weight_dtype = FLCE_FP32;
    size_t lean = (size_t)160 << 20;
    st = flce_workspace_size(&big, lean, &big_bytes);
    int64_t lean_chunk = flce_chunk_tokens(&big, big_bytes), lean_tile = flce_vocab_tile(&big, big_bytes);
    test_check(st == FLCE_OK && big_bytes <= lean && lean_chunk >= 1024 && lean_tile < 176245 &&
                   lean_tile % 64 == 0 && big_bytes >= (size_t)lean_chunk * lean_tile * 4,
               "lib: 65535x1024x176245 in 160 MiB: tiles of %lld tokens x %lld columns (%zu bytes)",
               (long long)lean_chunk, (long long)lean_tile, big_bytes);
    big.max_vocab_tile = 1000;
    test_check(flce_vocab_tile(&big, big_bytes) <= 1000 && flce_vocab_tile(&big, big_bytes) % 64 == 0,
               "lib: max_vocab_tile = 1000 bounds the tile: %lld columns",
               (long long)flce_vocab_tile(&big, big_bytes));
    big.max_vocab_tile = 0;
    // the minimum workspace is one token by one tile of 64 columns
    st = flce_workspace_size(&big, 1, &min_bytes);
    test_check(st == FLCE_ERR_WORKSPACE && flce_chunk_tokens(&big, min_bytes) == 1 &&
                   flce_vocab_tile(&big, min_bytes) == 64 && flce_chunk_tokens(&big, min_bytes - 1) == 0,
               "lib: 65535x1024x176245 needs at least %zu bytes: 1 token x 64 columns", min_bytes);
    // the chunk schedule at 1 GiB for the other benchmark shapes
    {
        const int64_t shapes[3][3] = {{8192, 768, 50304}, {4096, 4096, 128256}, {16384, 4096, 151936}};
        for (int k = 0; k < 3; k++) {
            flce_config sc;
            flce_config_init(&sc, shapes[k][0], shapes[k][1], shapes[k][2]);
            size_t sb = 0;
            st = flce_workspace_size(&sc, gib, &sb);
            test_check(st == FLCE_OK && flce_vocab_tile(&sc, sb) == shapes[k][2],
                       "lib: %lldx%lldx%lld in 1 GiB takes the chunk schedule (chunk %lld)",
                       (long long)shapes[k][0], (long long)shapes[k][1], (long long)shapes[k][2],
                       (long long)flce_chunk_tokens(&sc, sb));
        }
    }
    // bf16 logits halve the chunk buffer
    big.d_weight_dtype = FLCE_FP32;
    big.bf16_logits = 1;
    st = flce_workspace_size(&big, gib, &big_bytes);
    test_check(st == FLCE_OK && flce_chunk_tokens(&big, big_bytes) >= 2 * big_chunk,
               "lib: bf16 logits at least double the chunk: %lld tokens",
               (long long)flce_chunk_tokens(&big, big_bytes));
    // one chunk needs no accumulator; a problem that fits whole gets exactly one chunk
    flce_config small;
    flce_config_init(&small, 4096, 768, 50304);
    small.d_weight_dtype = FLCE_BF16;
    st = flce_workspace_size(&small, gib, &big_bytes);
    test_check(st == FLCE_OK && flce_chunk_tokens(&small, big_bytes) == 4096 &&
                   big_bytes < (size_t)50304 * 768 * 4 + (size_t)4096 * 50304 * 4,
               "lib: 4096x768x50304 in one chunk, without a d_W accumulator (%zu bytes)", big_bytes);

    // every fixture's options are a valid config
    for (int k = 0; k < n_paths; k++) {
        Fixture f;
        if (!fixture_load(paths[k], &f)) continue;
        flce_config fc;
        flce_config_init(&fc, f.N, f.H, f.V);
        fc.vocab_padded = f.Vp; fc.has_bias = f.has_bias;
        fc.reduction = (flce_reduction)f.reduction; fc.ignore_index = f.ignore_index;
        fc.label_smoothing = f.label_smoothing; fc.z_loss_scale = f.z_loss_scale;
        fc.softcap = f.softcap; fc.grad_scale = f.grad_scale;
        fc.temperature = f.temperature; fc.has_class_weights = f.has_class_weights;
        msg[0] = 0;
        test_check(flce_config_check(&fc, msg, sizeof(msg)) == FLCE_OK,
                   "lib: config of %s is valid %s", f.name, msg);
        fixture_free(&f);
    }
}

// A config of N x H x V with a softcap and label smoothing (0: off).
static flce_config config_with(int64_t N, int64_t H, int64_t V, float cap, float eps) {
    flce_config c;
    flce_config_init(&c, N, H, V);
    c.softcap = cap;
    c.label_smoothing = eps;
    return c;
}

// A lower bound of the workspace a plan with chunks of C tokens and tiles of T columns holds,
// in long double (no wrap-around): its logits buffer (fp32 logits, the stride T rounded up to
// 64), its per-token arrays, and the fp32 accumulator of a bf16 d_W split over chunks.
static long double planned_bytes_min(const flce_config *c, int64_t C, int64_t T) {
    long double b = (long double)C * (long double)((T + 63) / 64 * 64) * 4.0L + 12.0L * c->n_tokens;
    if (c->d_weight_dtype == FLCE_BF16 && C < c->n_tokens)
        b += (long double)c->vocab_padded * (long double)c->hidden * 4.0L;
    return b;
}

// The workspace arithmetic at the largest sizes flce_config_check admits: with a bf16 d_W its
// fp32 accumulator alone is Vp x H x 4 bytes, within 2^40 of 2^64, and the sums of the layout
// used to wrap around size_t into a small number that the planner returned with FLCE_OK. Every
// answer must now be either a plan whose size holds what it plans, within the budget, or
// FLCE_ERR_WORKSPACE with a true minimum above the budget. And the status list: out of
// memory has a status of its own, appended so that the older values keep their numbers.
// The Hopper path's planner, without a GPU (flce_dev_set_plan_sms): a bf16 d_W that one chunk writes
// whole needs no fp32 accumulator (the workspace of an fp32 d_W, but for the statistics that its
// plain gradients keep apart); over several chunks it needs one (V x H x 4 bytes more), within
// the budget.
static void test_hopper_plans(void) {
    flce_dev_set_plan_sms(132);
    for (int big = 0; big < 2; big++) {
        flce_config c;
        flce_config_init(&c, big ? 16384 : 4096, 1024, 50304);
        const size_t budget = big ? (size_t)512 << 20 : (size_t)4 << 30;
        size_t b32 = 0, b16 = 0;
        const flce_status s32 = flce_workspace_size(&c, budget, &b32);
        const int64_t c32 = flce_chunk_tokens(&c, b32);
        c.d_weight_dtype = FLCE_BF16;
        const flce_status s16 = flce_workspace_size(&c, budget, &b16);
        const int64_t c16 = flce_chunk_tokens(&c, b16);
        const size_t acc = (size_t)c.vocab_padded * (size_t)c.hidden * 4;
        const int ok = s32 == FLCE_OK && s16 == FLCE_OK && b16 <= budget && b32 <= budget &&
                       (big ? c16 < c.n_tokens && b16 >= acc
                            : c16 == c.n_tokens && c32 == c.n_tokens && b32 <= b16 && b16 < b32 + acc);
        test_check(ok, "lib: Hopper plans (132 SMs, no GPU), N %lld, budget %zu MiB: fp32 d_W %zu bytes, chunks of "
                   "%lld; bf16 d_W %zu bytes, chunks of %lld (%s)", (long long)c.n_tokens, budget >> 20, b32,
                   (long long)c32, b16, (long long)c16,
                   big ? "several chunks: an fp32 accumulator of V H 4 bytes" : "one chunk: no accumulator");
    }
    // one chunk's bf16 d_W where the accumulator alone would not fit the budget (the binding's
    // call at the Llama 3 8B head: 1 GiB + V H 2 bytes, against V H 4 = 2.1 GB): a workspace
    // within the budget, not FLCE_ERR_WORKSPACE with the accumulator's minimum
    {
        flce_config c;
        flce_config_init(&c, 4096, 4096, 128256);
        c.d_weight_dtype = FLCE_BF16;
        const size_t budget = ((size_t)1 << 30) + (size_t)c.vocab_padded * (size_t)c.hidden * 2;
        size_t bytes = 0;
        const flce_status st = flce_workspace_size(&c, budget, &bytes);
        const int64_t chunk = st == FLCE_OK ? flce_chunk_tokens(&c, bytes) : 0;
        test_check(st == FLCE_OK && bytes <= budget && chunk == c.n_tokens,
                   "lib: Hopper plan at 4096 x 4096 x 128256, bf16 d_W, budget %zu: %s, %zu bytes, one chunk (%lld)",
                   budget, flce_status_string(st), bytes, (long long)chunk);
    }
    // every plan within its budget: the Hopper path's layout is not monotonic in the chunk
    // (its d_h partials), and the balanced chunk of 65536 x 768 x 50304 in 1 GiB (GPT-2 at
    // B = 64, the trainer's default -f) once came to 1,107,589,888 bytes
    const int64_t shapes[][3] = {{65536, 768, 50304}, {131072, 768, 50304}, {16384, 4096, 151936},
                                 {65535, 1024, 176245}, {8192, 768, 50304}, {9000, 2048, 32000}};
    const size_t mibs[] = {160, 512, 1024, 2048, 4096};
    int over = 0, plans = 0;
    char first[160] = "";
    for (int sh = 0; sh < 6; sh++)
        for (int b = 0; b < 5; b++)
            for (int bf16_dw = 0; bf16_dw < 2; bf16_dw++) {
                flce_config c;
                flce_config_init(&c, shapes[sh][0], shapes[sh][1], shapes[sh][2]);
                if (bf16_dw) c.d_weight_dtype = FLCE_BF16;
                const size_t budget = mibs[b] << 20;
                size_t bytes = 0;
                if (flce_workspace_size(&c, budget, &bytes) != FLCE_OK) continue;
                plans++;
                if (bytes > budget || flce_chunk_tokens(&c, bytes) < 1) {
                    if (over++ == 0)
                        snprintf(first, sizeof(first), "%lld x %lld x %lld in %zu MiB: %zu bytes",
                                 (long long)c.n_tokens, (long long)c.hidden, (long long)c.vocab, mibs[b], bytes);
                }
            }
    test_check(plans > 0 && over == 0, "lib: Hopper plans (132 SMs) within their budgets: %d of %d over%s%s", over,
               plans, over ? ", first " : "", first);
    // where the Hopper path is the default the workspace is its plan's, not the larger
    // cuBLASLt plan's (fp32 logits), and the cuBLASLt path still plans chunks within it
    flce_config c;
    flce_config_init(&c, 4096, 1024, 50304);
    const size_t budget = (size_t)4 << 30;
    size_t hop = 0, lt = 0;
    const flce_status sh = flce_workspace_size(&c, budget, &hop);
    const int64_t ch = flce_chunk_tokens(&c, hop);
    flce_dev_set_plan_sms(0);  // (flce_set_hopper_default(0): the cuBLASLt path's planner)
    const flce_status sl = flce_workspace_size(&c, budget, &lt);
    const int64_t cl_own = flce_chunk_tokens(&c, lt), cl_in_hop = flce_chunk_tokens(&c, hop);
    test_check(sh == FLCE_OK && sl == FLCE_OK && ch == c.n_tokens && hop < lt && cl_own == c.n_tokens &&
                   cl_in_hop >= 1 && cl_in_hop < c.n_tokens,
               "lib: Hopper-path workspace at 4096 x 1024 x 50304, 4 GiB: %zu bytes (one chunk of %lld), "
               "not the cuBLASLt plan's %zu (one chunk of %lld); cuBLASLt within it: chunks of %lld",
               hop, (long long)ch, lt, (long long)cl_own, (long long)cl_in_hop);
}

// The Hopper planner's choices at the Llama 3.2 / Qwen2.5 heads (132 SMs, no GPU): the chunk
// whose fused d_h GEMM fills whole waves of tiles (a shorter one than the largest that fits,
// the workspace staying the largest one's, so that a call planning again from that size takes
// the same chunk), and cuBLASLt's gradients where neither the 256- nor the 224-column tiles of
// the fused gradient GEMMs fit H (their last tile mostly empty).
static void test_hopper_plan_choices(void) {
    flce_dev_set_plan_sms(132);
    // the fused gradient GEMMs' tile width: 224 where it covers H in fewer columns and the scaled
    // kernels run (fp32 d_W, no smoothing); at H = 896 then the fused route, else cuBLASLt's
    {
        const int64_t hs[] = {896, 64, 320, 768, 1024, 1152, 1536, 2048, 3584}, want[] = {224, 224, 224, 256, 256,
                                                                                       256, 256, 256, 256};
        int ok = 1;
        for (unsigned i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
            flce_config c;
            flce_config_init(&c, 8192, hs[i], 50304);
            flce_plan p;
            flce_make_plan(&c, (size_t)1 << 30, 1, 1, 132, 0, &p);
            ok = ok && p.grad_cols == want[i];
        }
        test_check(ok, "lib: the fused gradient GEMMs' tile width by H (224 at 896, 64 and 320; 256 at 768 .. 3584)");
        // (label smoothing; a bf16 d_W written whole by one chunk: the plain fused kernels)
        flce_config c;
        flce_config_init(&c, 32768, 896, 151936);
        c.label_smoothing = 0.1f;
        flce_plan p, q;
        flce_make_plan(&c, (size_t)1 << 30, 1, 1, 132, 0, &p);
        flce_config_init(&c, 2048, 896, 151936);
        c.d_weight_dtype = FLCE_BF16;
        flce_make_plan(&c, (size_t)1 << 30, 1, 1, 132, 0, &q);
        test_check(p.grad_cols == 256 && p.lt_backward && q.n_chunks == 1 && !q.dw_accumulator && q.grad_cols == 256 &&
                       q.lt_backward,
                   "lib: at H = 896 with label smoothing, or a bf16 d_W in one chunk, cuBLASLt's gradients (no 224-column "
                   "plain kernels)");
    }
    // (1 GiB: the chunk schedule, the direct d_W's fused route at every H; 160 MiB at H = 2048:
    // vocabulary tiles on the direct route, whose d_W's accumulation a chunk of 512 tokens would
    // not cover with its products; at H = 3072 and 4096 vocabulary tiles in chunks of 1024 on the
    // direct route side by side; 300 and 512 MiB at H = 3072: chunks too short for the direct
    // route there; from H = 4096 the direct route in short chunks too, unless the cost model finds
    // the pass's longer chunks faster, as at H = 8192 in 300 MiB: 1024 tokens against 768)
    struct { int64_t N, H, V, mib; int lt; } cases[] = {
        {32768, 896, 151936, 1024, 0},  {32768, 1536, 151936, 1024, 0}, {16384, 2048, 128256, 1024, 0},
        {32768, 2048, 128256, 1024, 0}, {16384, 3072, 128256, 1024, 0}, {16384, 4096, 151936, 1024, 0},
        {65536, 768, 50304, 1024, 0},   {65536, 1024, 176256, 1024, 0}, {16384, 1152, 128256, 1024, 1},
        {16384, 2048, 128256, 160, 0},  {65536, 1024, 176256, 160, 0},  {16384, 3072, 128256, 160, 0},
        {16384, 3072, 128256, 300, 1},  {16384, 3072, 128256, 512, 1},  {16384, 4096, 151936, 160, 0},
        {16384, 4096, 151936, 512, 0},  {16384, 8192, 128256, 300, 1},
        {16384, 8192, 128256, 512, 0},  {4096, 4096, 128256, 512, 0}};
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        flce_config c;
        flce_config_init(&c, cases[i].N, cases[i].H, cases[i].V);
        size_t ws = 0;
        const flce_status st = flce_workspace_size(&c, (size_t)cases[i].mib << 20, &ws);
        flce_plan p;
        flce_make_plan(&c, ws, 1, 1, 132, 0, &p);
        test_check(st == FLCE_OK && p.lt_backward == cases[i].lt,
                   "lib: Hopper plan at %lld x %lld x %lld in %lld MiB: %s gradients (%lld vocabulary tile(s))",
                   (long long)c.n_tokens, (long long)c.hidden, (long long)c.vocab, (long long)cases[i].mib,
                   p.lt_backward ? "cuBLASLt's" : "fused", (long long)p.n_vtiles);
    }
    {
        // at H = 2048 in 160 MiB: chunks of 1024 tokens in vocabulary tiles on the direct route;
        // with label smoothing (no direct d_W) the tiles' rule by H takes cuBLASLt's gradients
        flce_config c;
        flce_config_init(&c, 16384, 2048, 128256);
        flce_plan p, q;
        flce_make_plan(&c, (size_t)160 << 20, 1, 1, 132, 0, &p);
        c.label_smoothing = 0.1f;
        flce_make_plan(&c, (size_t)160 << 20, 1, 1, 132, 0, &q);
        test_check(p.n_vtiles > 1 && p.chunk >= 1024 && p.dw_direct && !p.lt_backward && q.lt_backward &&
                       (q.n_vtiles > 1 || q.chunk < 1024),
                   "lib: Hopper plan at 16384 x 2048 x 128256 in 160 MiB: chunks of %lld in %lld vocabulary tiles, "
                   "d_W by cuBLASLt on E; with smoothing, cuBLASLt's gradients",
                   (long long)p.chunk, (long long)p.n_vtiles);
    }
    {
        // side by side, the d_h GEMM's K parts fill its half of the multiprocessors: at H = 2048
        // chunks of 1024 in one part (64 tiles on 66 SMs, not two parts for 132), which leaves room
        // in 160 MiB for 2 vocabulary tiles; at 65536 x 1024 x 176256 two parts, not four; at H =
        // 1536 (48 tiles: four parts on 66 SMs) the two of the whole GPU, never more. A call that
        // runs them one after the other keeps the whole GPU's parts. cuBLASLt's d_W beside them
        // keeps FLCE_DW_LT_WORKSPACE: 8191 x 2560 x 151669 in 3 tiles, not 4 beside 25 MiB.
        // One part over the bf16 d_h's accumulator needs no room of its own: 4096 x 4096 x 128256
        // in 2 tiles (not 3), 16384 x 8192 x 128256 in 3 (not 4).
        struct { int64_t N, H, V; size_t mib; int64_t chunk, tiles; int parts; } cases[] = {
            {16384, 2048, 128256, 160, 1024, 2, 1}, {32768, 2048, 128256, 160, 1024, 2, 1},
            {65536, 1024, 176256, 160, 1024, 3, 2}, {32768, 1536, 151936, 100, 1024, 6, 2},
            {8191, 2560, 151669, 160, 1024, 3, 3},  {4096, 4096, 128256, 160, 1024, 2, 1},
            {16384, 8192, 128256, 160, 1024, 3, 1}};
        for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            flce_config c;
            flce_config_init(&c, cases[i].N, cases[i].H, cases[i].V);
            flce_plan p;
            flce_make_plan(&c, cases[i].mib << 20, 1, 1, 132, 0, &p);
            test_check(p.chunk == cases[i].chunk && p.n_vtiles == cases[i].tiles &&
                           p.side_dh_parts == cases[i].parts && p.dh_parts >= p.side_dh_parts && p.side_sms == 66 &&
                           p.lt_bytes <= FLCE_DW_LT_WORKSPACE && p.total <= (cases[i].mib << 20),
                       "lib: Hopper plan at %lld x %lld x %lld in %zu MiB: side by side (d_h on %d SMs) in chunks "
                       "of %lld, %lld tile(s), d_h in %d K part(s) (%d when not side by side)",
                       (long long)c.n_tokens, (long long)c.hidden, (long long)c.vocab, cases[i].mib, p.side_sms,
                       (long long)p.chunk, (long long)p.n_vtiles, p.side_dh_parts, p.dh_parts);
        }
    }
    {
        // the tile schedule's chunks between powers of two: at 32768 x 1536 x 151936 in 160 MiB
        // chunks of 1280 tokens in 3 tiles (not 2048 in 7), the same plan again from the workspace
        // sized for it; in 100 MiB chunks of 1024 side by side, which no chunk between displaces
        flce_config c;
        flce_config_init(&c, 32768, 1536, 151936);
        size_t ws = 0;
        const flce_status st = flce_workspace_size(&c, (size_t)160 << 20, &ws);
        flce_plan p, q, r;
        flce_make_plan(&c, (size_t)160 << 20, 1, 1, 132, 0, &p);
        flce_make_plan(&c, ws, 1, 1, 132, 0, &q);
        flce_make_plan(&c, (size_t)100 << 20, 1, 1, 132, 0, &r);
        test_check(st == FLCE_OK && p.chunk == 1280 && p.n_vtiles == 3 && q.chunk == p.chunk &&
                       q.vocab_tile == p.vocab_tile && r.chunk == 1024 && r.side_sms > 0,
                   "lib: Hopper plan at 32768 x 1536 x 151936 in 160 MiB: chunks of %lld in %lld vocabulary tiles "
                   "(again from its %.1f MiB: %lld x %lld); in 100 MiB %lld side by side",
                   (long long)p.chunk, (long long)p.n_vtiles, ws / 1048576.0, (long long)q.chunk,
                   (long long)q.n_vtiles, (long long)r.chunk);
    }
    {
        // the largest chunk that fits lies past a dip (a chunk between needs more d_h parts and
        // does not fit): Qwen2.5-7B's head in 1 GiB chunks of 3328 tokens, not 2816; 65536 x 2560
        // x 50304 in 160 MiB 1152, not 896
        struct { int64_t N, H, V; size_t mib; int64_t chunk; } cases[] = {
            {16384, 3584, 152064, 1024, 3328}, {32768, 3584, 152064, 1024, 3328}, {65536, 2560, 50304, 160, 1152}};
        for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            flce_config c;
            flce_config_init(&c, cases[i].N, cases[i].H, cases[i].V);
            flce_plan p;
            flce_make_plan(&c, cases[i].mib << 20, 1, 1, 132, 0, &p);
            test_check(p.chunk == cases[i].chunk && p.total <= (cases[i].mib << 20),
                       "lib: Hopper plan at %lld x %lld x %lld in %zu MiB: chunks of %lld (want %lld)",
                       (long long)c.n_tokens, (long long)c.hidden, (long long)c.vocab, cases[i].mib,
                       (long long)p.chunk, (long long)cases[i].chunk);
        }
    }
    // the options whose dz needs the general transform take cuBLASLt's gradients at any H (a
    // softcap, smoothing with class weights, a call's entropy gradient: within the workspace
    // sized without it); class weights or smoothing alone keep the rule by H
    struct { float cap, eps; int cw, eg, lt; } opts[] = {{30.0f, 0.0f, 0, 0, 1}, {0.0f, 0.1f, 1, 0, 1},
                                                         {0.0f, 0.0f, 0, 1, 1}, {0.0f, 0.1f, 0, 0, 0},
                                                         {0.0f, 0.0f, 1, 0, 0}};
    for (unsigned i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        flce_config c = config_with(16384, 2048, 128256, opts[i].cap, opts[i].eps);
        c.has_class_weights = opts[i].cw;
        size_t ws = 0;
        const flce_status st = flce_workspace_size(&c, (size_t)1 << 30, &ws);
        flce_plan p;
        flce_make_plan(&c, ws, 1, 1, 132, opts[i].eg, &p);
        test_check(st == FLCE_OK && p.lt_backward == opts[i].lt && p.chunk > 0 && p.total <= ws,
                   "lib: Hopper plan at 16384 x 2048 x 128256, softcap %g, smoothing %g, class weights %d, entropy "
                   "gradient %d: %s gradients, chunks of %lld in %zu bytes",
                   opts[i].cap, opts[i].eps, opts[i].cw, opts[i].eg, p.lt_backward ? "cuBLASLt's" : "fused",
                   (long long)p.chunk, ws);
    }
    // an entropy gradient's plan in a workspace too small for cuBLASLt's (a budget of 8 MiB) has
    // no chunk, and the call (flce.cu) plans the fused route instead, which fits
    {
        flce_config c;
        flce_config_init(&c, 600, 64, 1003);
        size_t ws = 0;
        const flce_status st = flce_workspace_size(&c, (size_t)8 << 20, &ws);
        flce_plan p, q;
        flce_make_plan(&c, ws, 1, 1, 132, 1, &p);
        flce_make_plan(&c, ws, 1, 1, 132, 0, &q);
        test_check(st == FLCE_OK && p.chunk == 0 && q.chunk > 0 && !q.lt_backward,
                   "lib: an entropy gradient's Hopper plan in %zu bytes (8 MiB budget): chunk %lld; without it %lld, "
                   "fused", ws, (long long)p.chunk, (long long)q.chunk);
    }
    // every dev switch that changes plans is counted, so that a context's kept plan is made again
    {
        const unsigned n0 = flce_plan_switches();
        flce_dev_set_lt_backward(-1);
        const unsigned n1 = flce_plan_switches();
        flce_dev_set_wide_stats(-1);
        const unsigned n2 = flce_plan_switches();
        flce_dev_set_plan_chunk(0, 0);
        const unsigned n3 = flce_plan_switches();
        flce_dev_set_plan_sms(132);
        test_check(n1 == n0 + 1 && n2 == n1 + 1 && n3 == n2 + 1 && flce_plan_switches() == n3 + 1,
                   "lib: the planner's dev switches are counted (a context's kept plan is made again after one)");
    }
    // dev/'s sweeps: flce_dev_set_plan_chunk caps the chunk with no shorter one for whole waves
    // and sets the d_h parts (32768 x 2048 x 128256 in 1 GiB: 3712 tokens in one part, where the
    // planner takes 3328 in three), keeps the chunk schedule where a chunk fits (160 MiB), and
    // (0, 0) gives the planner's plans back
    {
        flce_config c;
        flce_config_init(&c, 32768, 2048, 128256);
        flce_plan base, forced, again, lean;
        flce_make_plan(&c, (size_t)1 << 30, 1, 1, 132, 0, &base);
        flce_dev_set_plan_chunk(4096, 1);
        flce_make_plan(&c, (size_t)1 << 30, 1, 1, 132, 0, &forced);
        flce_config c2;
        flce_config_init(&c2, 65536, 1024, 176256);
        flce_make_plan(&c2, (size_t)160 << 20, 1, 1, 132, 0, &lean);
        flce_dev_set_plan_chunk(0, 0);
        flce_make_plan(&c, (size_t)1 << 30, 1, 1, 132, 0, &again);
        test_check(base.chunk == 3328 && base.dh_parts == 3 && forced.chunk == 3712 && forced.dh_parts == 1 &&
                       forced.n_vtiles == 1 && forced.total <= ((size_t)1 << 30) && lean.n_vtiles == 1 &&
                       lean.chunk > 0 && lean.dh_parts == 1 && again.chunk == base.chunk &&
                       again.dh_parts == base.dh_parts && again.total == base.total,
                   "lib: the planner's chunk and d_h parts for dev/'s sweeps (3712 x 1 part against %lld x %d), and "
                   "back", (long long)base.chunk, base.dh_parts);
    }
    // the fused d_h in whole waves at 32768 x 1536 x 151936 and 32768 x 896 x 151936 (fused forced),
    // and the same chunk from the workspace it sized, at several budgets
    flce_dev_set_lt_backward(0);
    const int64_t hs[] = {1536, 896};
    for (int k = 0; k < 2; k++) {
        flce_config c;
        flce_config_init(&c, 32768, hs[k], 151936);
        int same = 1, waves = 1, shorter = 0;
        for (size_t mib = 512; mib <= 2048; mib += 128) {
            size_t ws = 0;
            if (flce_workspace_size(&c, mib << 20, &ws) != FLCE_OK) { same = 0; continue; }
            flce_plan p, q;
            flce_make_plan(&c, mib << 20, 1, 1, 132, 0, &p);
            flce_make_plan(&c, ws, 1, 1, 132, 0, &q);
            same = same && ws <= (mib << 20) && p.chunk == q.chunk && p.dh_parts == q.dh_parts &&
                   flce_chunk_tokens(&c, ws) == p.chunk;
            if (mib == 1024) {
                const int64_t cols = p.grad_cols;
                const int64_t tiles = (p.chunk + 127) / 128 * ((hs[k] + cols - 1) / cols) * p.dh_parts;
                waves = tiles % 132 == 0 || tiles % 132 >= 112;  // whole waves, or nearly
                // (the largest chunk that fits 1 GiB: 3072 tokens at H = 1536, 3328 at 896)
                shorter = p.chunk < (hs[k] == 1536 ? 3072 : 3328);
            }
        }
        test_check(same && waves && shorter, "lib: Hopper plans at 32768 x %lld x 151936 (fused gradients): the "
                   "chunk that fills d_h's waves, the same again from its workspace (512..2048 MiB)", (long long)hs[k]);
    }
    flce_dev_set_lt_backward(-1);
    // on the fused route the entropy's sums share the d_h parts' region: 65536 x 1024 x 176256
    // in 1 GiB takes chunks of 2816 tokens (22 x 4 d_h tiles in 3 K parts, two whole waves),
    // where a region of their own left room for 2688
    {
        flce_config c;
        flce_config_init(&c, 65536, 1024, 176256);
        flce_plan p;
        flce_make_plan(&c, (size_t)1 << 30, 1, 1, 132, 0, &p);
        const size_t q = (size_t)p.n_stat * (size_t)p.ldc * 4, parts = (size_t)p.dh_parts * p.chunk * 1024 * 4;
        test_check(!p.lt_backward && p.chunk == 2816 && p.off_stat_q == p.off_dh_part &&
                       p.off_vp - p.off_dh_part >= (q > parts ? q : parts),
                   "lib: Hopper plan at 65536 x 1024 x 176256 (1 GiB): chunks of %lld, the entropy's sums in the "
                   "d_h parts' region", (long long)p.chunk);
        // the direct d_W (cuBLASLt's GEMM on E): v' h (chunk x H bf16) and then cuBLASLt's
        // workspace in that region, the workspace within it and no larger than the lt route's
        const size_t xs = ((size_t)p.chunk * 1024 * 2 + 255) / 256 * 256;
        const size_t prod = ((size_t)p.chunk * 1024 * 4 + 255) / 256 * 256;
        test_check(p.dw_direct && p.off_lt == p.off_dh_part + xs && p.lt_bytes >= ((size_t)16 << 20) &&
                       p.lt_bytes <= FLCE_LT_WORKSPACE && p.off_lt + p.lt_bytes <= p.off_vp &&
                       p.off_dh_ws == p.off_dh_part + prod && p.off_dh_ws + p.dh_ws_bytes <= p.off_vp &&
                       p.dh_ws_bytes >= ((size_t)8 << 20),
                   "lib: Hopper plan at 65536 x 1024 x 176256 (1 GiB): the direct d_W's workspace (%.1f MiB) in the "
                   "d_h parts' region after v' h", (double)p.lt_bytes / (1 << 20));
        // and where the direct d_W runs besides: the tile schedule, vocab_parallel, H = 4096 (the
        // chunk schedule's rule by H yields to it); where it does not: cuBLASLt's gradients (H =
        // 4096 in vocabulary tiles of chunks longer than the side by side's), label smoothing (no
        // scaled gradients)
        flce_plan t, l, sm, vp, h4;
        flce_make_plan(&c, (size_t)160 << 20, 1, 1, 132, 0, &t);
        flce_config c2 = c;
        c2.hidden = 4096;
        c2.max_vocab_tile = 32768;
        flce_make_plan(&c2, (size_t)1 << 30, 1, 1, 132, 0, &l);
        c2.max_vocab_tile = 0;
        flce_make_plan(&c2, (size_t)1 << 30, 1, 1, 132, 0, &h4);
        c2 = c;
        c2.label_smoothing = 0.1f;
        flce_make_plan(&c2, (size_t)1 << 30, 1, 1, 132, 0, &sm);
        c2 = c;
        c2.vocab_parallel = 1;
        c2.vocab_total = 2 * c.vocab;
        flce_make_plan(&c2, (size_t)1 << 30, 1, 1, 132, 0, &vp);
        test_check(t.n_vtiles > 1 && t.dw_direct && t.off_lt + t.lt_bytes <= t.off_vp && t.lt_bytes > 0 &&
                       l.n_vtiles > 1 && l.chunk > 1024 && l.lt_backward && !l.dw_direct &&
                       l.lt_bytes == FLCE_LT_WORKSPACE &&
                       sm.chunk > 0 && !sm.dw_direct && vp.chunk > 0 && vp.dw_direct && h4.n_vtiles == 1 &&
                       !h4.lt_backward && h4.dw_direct,
                   "lib: the direct d_W in the tile schedule, under vocab_parallel and at H = 4096 in 1 GiB, not on "
                   "cuBLASLt's gradients nor with smoothing");
    }
    // the tile schedule (160 MiB) takes vocabulary tiles whose GEMMs fill their waves (the fused
    // d_W's tiles where it runs: cuBLASLt's direct d_W has tiles of its own), and a plan made
    // again from its workspace is the same
    {
        flce_config c;
        flce_config_init(&c, 65536, 1024, 176256);
        flce_plan p;
        flce_make_plan(&c, (size_t)160 << 20, 1, 1, 132, 0, &p);
        const int64_t dw_tiles = (p.vocab_tile + 127) / 128 * 4, waves = (dw_tiles + 131) / 132;
        flce_plan q;  // the same plan again from its workspace
        flce_make_plan(&c, p.total, 1, 1, 132, 0, &q);
        test_check(p.n_vtiles > 1 && p.chunk >= 1024 && p.vocab_tile % p.stat_tile == 0 && p.total <= (size_t)160 << 20 &&
                       (p.dw_direct || (double)dw_tiles / (double)(waves * 132) >= 0.95) && q.chunk == p.chunk &&
                       q.vocab_tile == p.vocab_tile && q.total == p.total,
                   "lib: Hopper plan at 65536 x 1024 x 176256 (160 MiB): chunks of %lld, vocabulary tiles of %lld "
                   "(%lld d_W tiles, %lld waves)", (long long)p.chunk, (long long)p.vocab_tile, (long long)dw_tiles,
                   (long long)waves);
    }
    // at H = 4096 the direct route in short chunks too, d_h and d_W side by side: 300 MiB at
    // 16384 x 4096 x 151936 takes chunks of the whole vocabulary (896 tokens), which ran 7% faster
    // than cuBLASLt's gradients in chunks of 768 there (dev/RESULTS.md)
    {
        flce_config c;
        flce_config_init(&c, 16384, 4096, 151936);
        flce_plan p;
        flce_make_plan(&c, (size_t)300 << 20, 1, 1, 132, 0, &p);
        test_check(!p.lt_backward && p.dw_direct && p.side_sms == 66 && p.n_vtiles == 1 && p.chunk >= 768,
                   "lib: Hopper plan at 16384 x 4096 x 151936 (300 MiB): chunks of %lld, %lld vocabulary tile(s), "
                   "side by side",
                   (long long)p.chunk, (long long)p.n_vtiles);
    }
    flce_dev_set_plan_sms(0);
}

// The Hopper planner's statistics tile (the logits GEMM's tile width): 192 columns where the
// epilogue has no bias, softcap or weighted smoothing, on either gradient route, else 256; the
// counts, and vocabulary tiles in multiples of it (160 MiB).
static void test_hopper_stat_tiles(void) {
    flce_dev_set_plan_sms(132);
    struct { int64_t N, H, V; int bias, cw_smooth; int64_t want; } cases[] = {
        {32768, 896, 151936, 0, 0, 192},  {16384, 2048, 128256, 0, 0, 192}, {16384, 4096, 151936, 0, 0, 192},
        {32768, 1536, 151936, 0, 0, 192}, {65536, 768, 50304, 0, 0, 192},   {65536, 1024, 176256, 0, 0, 192},
        {16384, 2048, 128256, 1, 0, 256}, {16384, 2048, 128256, 0, 1, 256}, {4096, 2048, 193, 0, 0, 192}};
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        flce_config c;
        flce_config_init(&c, cases[i].N, cases[i].H, cases[i].V);
        c.has_bias = cases[i].bias;
        if (cases[i].cw_smooth) {
            c.has_class_weights = 1;
            c.label_smoothing = 0.1f;
        }
        int ok = 1;
        for (int lean = 0; lean < 2; lean++) {
            flce_plan p;
            flce_make_plan(&c, lean ? (size_t)160 << 20 : (size_t)1 << 30, 1, 1, 132, 0, &p);
            ok = ok && p.chunk > 0 && p.stat_tile == cases[i].want &&
                 p.n_stat == (c.vocab + p.stat_tile - 1) / p.stat_tile &&
                 (p.n_vtiles == 1 || p.vocab_tile % p.stat_tile == 0);
        }
        test_check(ok, "lib: Hopper plan at %lld x %lld x %lld%s: statistics tiles of %lld columns, tiles in multiples",
                   (long long)c.n_tokens, (long long)c.hidden, (long long)c.vocab,
                   c.has_bias ? " with a bias" : c.has_class_weights ? " with weighted smoothing" : "",
                   (long long)cases[i].want);
    }
    flce_dev_set_plan_sms(0);
}

// The workspace is the plan's own layout where a plan made from that size is the same: where
// the planner took a shorter chunk for whole waves (16384 x 4096 x 151936 in 1 GiB: 2048 tokens
// where the largest that fits is ~2816) it no longer sizes the workspace for the largest. Every
// case: a plan made from the workspace is the budget's, and needs no more than it (then three
// of the tile schedule's chunks between powers of two, 1280 and 1408 tokens; and two whose
// tokens fit one chunk, which a search for the largest fitting chunk must try first: the
// layout is not monotonic in the chunk, and a bisection from the workspace found two chunks).
static void test_hopper_exact_workspace(void) {
    flce_dev_set_plan_sms(132);
    struct { int64_t N, H, V; size_t mib, most; } cases[] = {
        {16384, 4096, 151936, 1024, 640}, {16384, 3072, 128256, 1024, 740}, {32768, 2048, 128256, 1536, 1050},
        {32768, 896, 151936, 1536, 1240}, {65536, 1024, 176256, 1024, 1000}, {65536, 1024, 176256, 160, 160},
        {32768, 1536, 151936, 160, 160},  {8192, 768, 50304, 1024, 1024},  {16384, 1536, 176256, 160, 160},
        {4096, 1536, 151936, 160, 160},   {16384, 768, 176256, 200, 200},  {2048, 3072, 128256, 1024, 600},
        {8192, 1024, 32000, 1024, 600}};
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        flce_config c;
        flce_config_init(&c, cases[i].N, cases[i].H, cases[i].V);
        const size_t budget = cases[i].mib << 20;
        size_t ws = 0;
        const flce_status st = flce_workspace_size(&c, budget, &ws);
        flce_plan p, q;
        flce_make_plan(&c, budget, 1, 1, 132, 0, &p);
        flce_make_plan(&c, ws, 1, 1, 132, 0, &q);
        test_check(st == FLCE_OK && ws <= (cases[i].most << 20) && q.chunk == p.chunk &&
                       q.vocab_tile == p.vocab_tile && q.dh_parts == p.dh_parts && q.lt_backward == p.lt_backward &&
                       q.dw_direct == p.dw_direct && q.off_logits == p.off_logits && q.total <= ws,
                   "lib: Hopper workspace at %lld x %lld x %lld in %zu MiB: %.1f MiB for chunks of %lld x %lld tile(s), "
                   "the same plan from it", (long long)c.n_tokens, (long long)c.hidden, (long long)c.vocab,
                   cases[i].mib, (double)ws / 1048576.0, (long long)q.chunk, (long long)q.n_vtiles);
    }
    flce_dev_set_plan_sms(0);
}

// The row statistics in the d_h parts' region (flce_layout): where the call's gradients are the
// scaled ones, the max and sum follow q there, apart from it, and the region holds them; every
// other call (no d_weight, the scaled transform off, an entropy gradient, a bias, a softcap,
// smoothing, a bf16 d_W in one chunk, vocab_parallel) keeps all three arrays apart, and fits the
// workspace sized for the first in chunks of its own.
static void test_hopper_stats_shared(void) {
    flce_dev_set_plan_sms(132);
    struct { int64_t N, H, V; size_t mib; } shapes[] = {
        {16384, 2048, 128256, 1536}, {16384, 2048, 128256, 1024}, {65536, 1024, 176256, 1024},
        {32768, 896, 151936, 1024},  {65536, 1024, 176256, 160},  {8192, 768, 50304, 1024}};
    for (unsigned i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        flce_config c;
        flce_config_init(&c, shapes[i].N, shapes[i].H, shapes[i].V);
        size_t ws = 0;
        const flce_status st = flce_workspace_size(&c, shapes[i].mib << 20, &ws);
        flce_plan p, plain, nodw, fwd;
        flce_make_plan(&c, ws, 1, 1, 132, 0, &p);
        flce_make_plan(&c, ws, 1, 1, 132, FLCE_CALL_PLAIN, &plain);
        flce_make_plan(&c, ws, 0, 1, 132, 0, &nodw);
        flce_make_plan(&c, ws, 0, 0, 132, 0, &fwd);
        const size_t q = (size_t)p.n_stat * (size_t)p.ldc * 4, stats = 2 * q;
        const int inside = p.off_stat >= p.off_stat_q + q && p.off_stat + stats <= p.off_vp &&
                           p.off_stat_q >= p.off_dh_part && p.off_stat_q + q <= p.off_stat;
        const size_t parts = (size_t)p.dh_parts * (size_t)p.chunk * (size_t)c.hidden * 4;
        const int apart = !plain.stats_shared && plain.chunk > 0 && plain.chunk <= p.chunk && plain.total <= ws &&
                          plain.off_stat + 3 * (size_t)plain.n_stat * (size_t)plain.ldc * 4 <= plain.off_stat16 &&
                          !nodw.stats_shared && nodw.chunk > 0 && nodw.total <= ws;
        test_check(st == FLCE_OK && p.stats_shared && !p.lt_backward && inside && p.off_dh_part + parts <= p.off_vp &&
                       apart && fwd.chunk > 0 && fwd.total <= ws,
                   "lib: Hopper plan at %lld x %lld x %lld in %zu MiB: the statistics in the d_h parts' region after "
                   "q (chunks of %lld); apart for the plain gradients (chunks of %lld)",
                   (long long)c.n_tokens, (long long)c.hidden, (long long)c.vocab, shapes[i].mib, (long long)p.chunk,
                   (long long)plain.chunk);
    }
    // the calls and configs whose kernels read the statistics after the merge
    struct { const char *what; int call, bias, bf16_dw, vp; float cap, eps; } apart[] = {
        {"an entropy gradient", FLCE_CALL_ENTROPY_GRAD, 0, 0, 0, 0.0f, 0.0f},
        {"the scaled transform off", FLCE_CALL_PLAIN, 0, 0, 0, 0.0f, 0.0f},
        {"a bias", 0, 1, 0, 0, 0.0f, 0.0f},
        {"a softcap", 0, 0, 0, 0, 30.0f, 0.0f},
        {"label smoothing", 0, 0, 0, 0, 0.0f, 0.1f},
        {"a bf16 d_W in one chunk", 0, 0, 1, 0, 0.0f, 0.0f},
        {"vocab_parallel", 0, 0, 0, 1, 0.0f, 0.0f}};
    for (unsigned i = 0; i < sizeof(apart) / sizeof(apart[0]); i++) {
        flce_config c = config_with(4096, 2048, 128256, apart[i].cap, apart[i].eps);
        c.has_bias = apart[i].bias;
        if (apart[i].bf16_dw) c.d_weight_dtype = FLCE_BF16;
        if (apart[i].vp) {
            c.vocab_parallel = 1;
            c.vocab_total = 2 * c.vocab;
        }
        flce_plan p;
        flce_make_plan(&c, (size_t)4 << 30, 1, 1, 132, apart[i].call, &p);
        test_check(p.chunk > 0 && !p.stats_shared && p.off_stat + 3 * (size_t)p.n_stat * (size_t)p.ldc * 4 <= p.off_stat16,
                   "lib: Hopper plan at 4096 x 2048 x 128256 with %s: the statistics apart (chunks of %lld)",
                   apart[i].what, (long long)p.chunk);
    }
    // QuACK's chunk of 4096 tokens at Llama 3.2 1B's head, in less than its 1,055 MiB (dev/PEERS-llama.md)
    flce_config c;
    flce_config_init(&c, 16384, 2048, 128256);
    size_t ws = 0;
    flce_workspace_size(&c, (size_t)1536 << 20, &ws);
    test_check(flce_chunk_tokens(&c, ws) == 4096 && ws <= ((size_t)1045 << 20),
               "lib: Hopper workspace at 16384 x 2048 x 128256 in 1536 MiB: chunks of 4096 in %.1f MiB",
               (double)ws / 1048576.0);
    flce_dev_set_plan_sms(0);
}

// The Hopper path's layout over random configs, budgets and calls: what each buffer holds lies
// before the next one, the statistics where the plan says (apart, or in the d_h parts' region
// after q, not on it), the region holds the d_h parts (one after the other's, and side by side
// its own beside v' h) and the direct d_W's and d_h's workspaces, E ends within the total; and
// every call fits the workspace sized for the config.
static void test_hopper_layout_sweep(void) {
    flce_dev_set_plan_sms(132);
    const int64_t Hs[] = {64, 768, 896, 1024, 1536, 2048, 3072, 4096};
    const int64_t Vs[] = {193, 5003, 32000, 50304, 128256, 151936, 176256};
    const int64_t Ns[] = {1, 100, 1000, 4096, 16384, 65536};
    const size_t mibs[] = {40, 160, 300, 1024, 1536};
    uint64_t seed = 20261205;
    int bad = 0, plans = 0, shared = 0, side = 0;
    char first[256] = "";
    for (int i = 0; i < 600; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const uint64_t x = seed >> 11;
        flce_config c;
        flce_config_init(&c, Ns[x % 6], Hs[(x / 6) % 8], Vs[(x / 48) % 7]);
        const int opt = (int)((x / 336) % 8);
        c.has_bias = opt == 1;
        c.softcap = opt == 2 ? 30.0f : 0.0f;
        c.label_smoothing = opt == 3 ? 0.1f : 0.0f;
        if (opt == 4) c.d_weight_dtype = FLCE_BF16;
        if (opt == 5) c.vocab_padded = (c.vocab + 127) / 128 * 128;
        const size_t budget = mibs[(x / 2688) % 5] << 20;
        size_t ws = 0;
        if (flce_workspace_size(&c, budget, &ws) != FLCE_OK) continue;
        const int calls[4][3] = {{1, 1, 0}, {1, 1, FLCE_CALL_PLAIN}, {0, 1, 0}, {1, 1, FLCE_CALL_ENTROPY_GRAD}};
        for (int k = 0; k < 4; k++) {
            flce_plan p;
            flce_make_plan(&c, ws, calls[k][0], calls[k][1], 132, calls[k][2], &p);
            if (p.chunk == 0 && k == 3) flce_make_plan(&c, ws, 1, 1, 132, FLCE_CALL_PLAIN, &p);  // flce.cu's fallback
            plans++;
            shared += p.stats_shared;
            const size_t ldc = (size_t)p.ldc, ns = (size_t)p.n_stat, C = (size_t)p.chunk, H = (size_t)c.hidden;
            const size_t q = ns * ldc * 4, stats = (p.stats_shared ? 2 : 3) * ns * ldc * 4;
            const size_t region_end = p.off_vp;
            int ok = p.chunk > 0 && p.total <= ws;
            ok &= p.off_stat16 + (2 * ns + 5) * ldc * 2 <= p.off_rec;
            ok &= p.off_stat_q == p.off_dh_part && p.off_stat_q + q <= region_end;
            if (p.stats_shared)
                ok &= p.off_stat >= p.off_stat_q + q && p.off_stat + stats <= region_end && k != 1 && k != 2 &&
                      !c.has_bias && c.softcap == 0.0f && c.label_smoothing == 0.0f && !p.lt_backward;
            else
                ok &= p.off_stat + stats <= p.off_stat16;
            // (one part over an accumulator: the d_h GEMM adds to it, and the region holds v' h
            // and cuBLASLt's workspace)
            const int own = p.dh_accumulator && p.dh_parts == 1, side_own = p.dh_accumulator && p.side_dh_parts == 1;
            if (!p.lt_backward)
                ok &= p.off_dh_part + (own ? C * H * 2 + FLCE_DW_LT_WORKSPACE : (size_t)p.dh_parts * C * H * 4) <=
                      region_end;
            // side by side (flce_plan.c's rule: half the SMs, chunks of up to 1024 tokens): the d_h
            // parts it takes (no more than one after the other's), v' h and cuBLASLt's workspace
            // apart; else v' h at the region's start
            if (p.side_sms)
                ok &= p.dw_direct && p.side_sms == 66 && C <= 1024 && !c.vocab_parallel &&
                      p.side_dh_parts >= 1 && p.side_dh_parts <= p.dh_parts && p.lt_bytes <= FLCE_DW_LT_WORKSPACE &&
                      p.off_xs >= p.off_dh_part + (side_own ? 0 : (size_t)p.side_dh_parts * C * H * 4) &&
                      p.off_xs + C * H * 2 <= p.off_lt;
            else
                ok &= p.off_xs == p.off_dh_part && (!p.dw_direct || C > 1024);
            side += p.side_sms > 0;
            if (p.dw_direct) {
                ok &= p.off_lt >= p.off_dh_part + C * H * 2 && p.off_lt + p.lt_bytes <= region_end;
                ok &= p.dh_ws_bytes == 0 || (p.off_dh_ws >= p.off_dh_part + C * H * 4 &&
                                             p.off_dh_ws + p.dh_ws_bytes <= region_end);
            }
            ok &= p.off_logits >= region_end && p.off_logits + C * (size_t)p.ldl * 2 <= p.total;
            if (!ok && !bad)
                snprintf(first, sizeof(first), "%lld x %lld x %lld (Vp %lld) option %d in %zu MiB, call %d",
                         (long long)c.n_tokens, (long long)c.hidden, (long long)c.vocab, (long long)c.vocab_padded,
                         opt, budget >> 20, k);
            bad += !ok;
        }
    }
    test_check(bad == 0 && plans > 1000 && shared > 100 && side > 100,
               "lib: Hopper layouts of %d plans (%d with the statistics shared, %d with the gradients side by side) "
               "over random configs, budgets and calls: every buffer in its place, every call fits%s%s",
               plans, shared, side, bad ? "; first bad: " : "", first);
    flce_dev_set_plan_sms(0);
}

// The Hopper d_h GEMM's split (flce_sm90_dh_split): whole tiles at full K first, the rest in K
// parts, only where that takes 2% fewer full-K tile times than the plan's K parts and its products
// fit theirs: at 16384 x 2048's chunks of 3328 on 132 SMs 5 columns of tiles, then 5 parts (1.6
// against 1.67); not at 2816 (4 whole waves in 3 parts) nor at H = 1024; and over a grid of rows,
// H and parts every split it takes keeps to those bounds.
static void test_hopper_dh_split(void) {
    int64_t fc = 0;
    int pb = 0;
    const int at3328 = flce_sm90_dh_split(3328, 2048, 256, 132, 3, &fc, &pb) && fc == 1280 && pb == 5;
    const int64_t fc3328 = fc;
    const int pb3328 = pb;
    const int not2816 = !flce_sm90_dh_split(2816, 2048, 256, 132, 3, &fc, &pb);
    const int not1024 = !flce_sm90_dh_split(2816, 1024, 256, 132, 3, &fc, &pb);
    int bad = 0, splits = 0;
    for (int64_t rows = 128; rows <= 8192; rows += 128)
        for (int64_t H = 768; H <= 8192; H += 256)
            for (int parts = 1; parts <= 4; parts++)
                for (int cols = 224; cols <= 256; cols += 32) {
                    if (!flce_sm90_dh_split(rows, H, cols, 132, parts, &fc, &pb)) continue;
                    splits++;
                    const int64_t rt = (rows + 127) / 128, ct = (H + cols - 1) / cols, ft = fc / cols;
                    const double uniform = (double)((rt * ct * parts + 131) / 132) / parts;
                    const double t = (double)((rt * ft + 131) / 132) + (double)((rt * (ct - ft) * pb + 131) / 132) / pb;
                    bad += fc % cols != 0 || fc <= 0 || fc >= H || rt * ft > 132 || pb < 1 || pb > 8 ||
                           t > 0.98 * uniform + 1e-9 || pb * (H - fc) + fc > parts * H;
                }
    test_check(at3328 && not2816 && not1024 && bad == 0 && splits > 0,
               "lib: the Hopper d_h split: 3328 x 2048 on 132 SMs %lld columns at full K, then %d K parts; none at "
               "2816 x 2048 (%d) nor 2816 x 1024 (%d); %d splits over rows, H and parts within the bounds (%d not)",
               (long long)fc3328, pb3328, not2816, not1024, splits, bad);
}

static void test_library_limits(void) {
    const size_t budgets[] = {(size_t)1 << 30, (size_t)1 << 40, (size_t)1 << 50, SIZE_MAX / 2, SIZE_MAX};
    const char *budget_names[] = {"1 GiB", "1 TiB", "1 PiB", "SIZE_MAX / 2", "SIZE_MAX"};
    for (int bf16_dw = 0; bf16_dw < 2; bf16_dw++) {
        flce_config c;
        flce_config_init(&c, INT32_MAX, INT32_MAX - 7, INT32_MAX - 64);
        if (bf16_dw) c.d_weight_dtype = FLCE_BF16;
        char msg[256] = "";
        test_check(flce_config_check(&c, msg, sizeof(msg)) == FLCE_OK,
                   "lib: N = H = Vp ~ 2^31 is a valid config %s", msg);
        for (int k = 0; k < 5; k++) {
            size_t bytes = 0;
            const flce_status st = flce_workspace_size(&c, budgets[k], &bytes);
            const int64_t C = flce_chunk_tokens(&c, bytes), T = flce_vocab_tile(&c, bytes);
            const long double need = planned_bytes_min(&c, C > 0 ? C : 1, T > 0 ? T : 64);
            const int ok = st == FLCE_OK ? bytes <= budgets[k] && C >= 1 && (long double)bytes >= need
                                         : st == FLCE_ERR_WORKSPACE && bytes > budgets[k] &&
                                               (long double)bytes >= need &&
                                               flce_chunk_tokens(&c, budgets[k]) == 0;
            test_check(ok, "lib: %s d_W, N = H = Vp ~ 2^31, budget %s: status %d, %zu bytes for "
                       "chunks of %lld x tiles of %lld (at least %.4Le needed)",
                       bf16_dw ? "bf16" : "fp32", budget_names[k], (int)st, bytes, (long long)C,
                       (long long)T, need);
        }
    }

    test_check(FLCE_ERR_OUT_OF_MEMORY == FLCE_ERR_CUBLAS + 1 && FLCE_ERR_CUBLAS == 8 &&
                   FLCE_ERR_COMM == FLCE_ERR_OUT_OF_MEMORY + 1,
               "lib: FLCE_ERR_OUT_OF_MEMORY (%d) and FLCE_ERR_COMM (%d) are appended, older statuses keep "
               "their numbers", (int)FLCE_ERR_OUT_OF_MEMORY, (int)FLCE_ERR_COMM);
    int distinct = 1;
    for (int a = FLCE_OK; a <= FLCE_ERR_COMM; a++) {
        const char *sa = flce_status_string((flce_status)a);
        if (strcmp(sa, flce_status_string((flce_status)999)) == 0) distinct = 0;
        for (int b = a + 1; b <= FLCE_ERR_COMM; b++)
            if (strcmp(sa, flce_status_string((flce_status)b)) == 0) distinct = 0;
    }
    test_check(distinct, "lib: every status has a string of its own (out of memory: \"%s\")",
               flce_status_string(FLCE_ERR_OUT_OF_MEMORY));
}
#endif

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "test/fixtures";
#ifdef FLCE_HAVE_LIB
    // the planner checks below are the cuBLASLt path's, the one every machine has: on a Hopper
    // machine with an sm_90a build, new contexts and the planner would take the other path
    flce_set_hopper_default(0);
#endif
    int n_paths = 0;
    char **paths = list_fixtures(dir, &n_paths);
    test_check(n_paths >= MIN_FIXTURES, "found %d fixtures in %s (need at least %d)", n_paths,
               dir, MIN_FIXTURES);
    for (int k = 0; k < n_paths; k++) test_fixture(paths[k]);

    test_finite_differences(FLCE_REDUCTION_MEAN, 0);
    test_finite_differences(FLCE_REDUCTION_SUM, 0);
    test_finite_differences(FLCE_REDUCTION_NONE, 1);
    test_padding_and_reductions();
    test_bad_targets();
    test_all_ignored();
    test_options_finite_differences();
    test_options_identities();
    test_options_rejected();
    test_vocab_parallel();
    if (n_paths > 0) test_fixture_reader(paths[0]);
    test_fixture_v2_roundtrip();
    note_option_fixtures(paths, n_paths, dir);

#ifdef FLCE_HAVE_LIB
    test_library_host(paths, n_paths);
    test_library_limits();
    test_hopper_plans();
    test_hopper_plan_choices();
    test_hopper_stat_tiles();
    test_hopper_exact_workspace();
    test_hopper_stats_shared();
    test_hopper_layout_sweep();
    test_hopper_dh_split();
#else
    printf("  (library host checks skipped: built without -DFLCE_HAVE_LIB)\n");
#endif
    for (int k = 0; k < n_paths; k++) free(paths[k]);
    free(paths);
    return test_summary();
}
