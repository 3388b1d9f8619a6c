/*
test_gpt2_cpu.c - checks the CPU GPT-2 reference (test/gpt2_ref.c) against PyTorch's answer
for a tiny llm.c model (test/fixtures/gpt2_debug.bin + gpt2_debug_state.bin, written by
scripts/export_gpt2_debug.py): the loss and every parameter gradient of one batch, then
two runs of 10 AdamW steps (weight decay 0 and 0.1) on that batch. Then checks the
backward on its own with finite differences on an even smaller model, and the readers'
rejection of broken files. Needs no GPU.

Build and run (from the repository root):
    gcc -O2 -std=c11 -Wall -Wextra -Werror -Iflce -Itest test/test_gpt2_cpu.c \
        test/gpt2_ref.c flce/flce_ref.c -lm -o build/test_gpt2_cpu
    build/test_gpt2_cpu [fixture_dir]              # default test/fixtures
*/
#define _POSIX_C_SOURCE 200809L  // getpid
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt2_ref.h"
#include "test_util.h"

/*
Tolerances. PyTorch's numbers are float64 results rounded to float32, and the reference
keeps float32 activations but sums in double, so gradients agree to a few float32
roundings: about 1e-7..1e-6 relative (the export script prints how far a plain float32
PyTorch run lands: ~5e-7). The bounds leave an order of magnitude or two for that; a real
mistake (a missing term, a wrong transpose) shows up as 1e-2 or more.
*/
#define TOL_LOSS_ABS 1e-5       // the fixture's loss
#define TOL_GRAD_REL_L2 1e-5    // each gradient tensor
#define TOL_STEP_LOSS_ABS 1e-4  // the losses of the AdamW steps (~2e-7 seen)
#define TOL_NORM_REL 1e-5       // the gradient norms of the AdamW steps
// After 10 steps each parameter has moved by about 10 lr = 1e-3. Its float32 storage
// rounds each update at 2^-24 of the parameter's size: 1e-5 of the move for weights near
// 0.02, 1e-3 for LayerNorm weights near 1. The change of each tensor is compared, not the
// tensor, so that the 1e-3 moves are what is measured.
#define TOL_DELTA_REL_L2 3e-3
// wpe rows T..maxT-1 get no gradient, so only weight decay moves them: by lr wd = 1e-5 of
// their value a step, which float32 resolves to about 2^-24 / 1e-5 = 1% a step
#define TOL_DECAY_ONLY_REL_L2 5e-2
// finite differences, after Richardson extrapolation (see fd_check); ~1e-4 at worst seen
#define TOL_FD_REL 1e-3

// --- the fixture ----------------------------------------------------------------------

static float *tensor_of(const GPT2Ref *m, float *base, int k) {
    return base + m->tensor_offsets[k];
}

static void fixture_tests(const char *dir) {
    char mpath[1024], spath[1024];
    snprintf(mpath, sizeof(mpath), "%s/gpt2_debug.bin", dir);
    snprintf(spath, sizeof(spath), "%s/gpt2_debug_state.bin", dir);
    // (each call runs before its test_check: argument evaluation order is unspecified)
    GPT2Ref m;
    const int loaded = gpt2ref_load(&m, mpath) == 0;
    if (!test_check(loaded, "load model %s%s%s", mpath, loaded ? "" : ": ", m.error)) return;
    const GPT2RefConfig *c = &m.config;
    GPT2RefState s;
    const int state_loaded = gpt2ref_state_load(&s, spath, &m) == 0;
    if (!test_check(state_loaded, "load debug state %s%s%s", spath, state_loaded ? "" : ": ",
                    state_loaded ? "" : s.error)) {
        gpt2ref_free(&m);
        return;
    }
    printf("  model: maxT %d V %d Vp %d L %d NH %d C %d, %zu parameters; batch B %d T %d\n",
           c->max_seq_len, c->vocab_size, c->padded_vocab_size, c->num_layers, c->num_heads,
           c->channels, m.num_parameters, s.B, s.T);

    // one forward + backward against PyTorch
    int ok = gpt2ref_forward(&m, s.x, s.y, s.B, s.T) == 0 && gpt2ref_backward(&m) == 0;
    if (!test_check(ok, "forward + backward run%s%s", ok ? "" : ": ", ok ? "" : m.error)) {
        gpt2ref_state_free(&s);
        gpt2ref_free(&m);
        return;
    }
    const double dloss = fabs(m.loss - (double)s.loss);
    test_check(dloss < TOL_LOSS_ABS, "loss %.7f vs PyTorch %.7f: |diff| %.2e (< %.0e)", m.loss,
               (double)s.loss, dloss, TOL_LOSS_ABS);
    for (int k = 0; k < GPT2REF_NUM_TENSORS; k++) {
        const double e = rel_l2_f32(tensor_of(&m, m.grads, k), tensor_of(&m, s.grads, k),
                                    m.tensor_sizes[k]);
        test_check(e < TOL_GRAD_REL_L2, "grad %-8s (%7zu) rel L2 %.2e (< %.0e)",
                   gpt2ref_tensor_names[k], m.tensor_sizes[k], e, TOL_GRAD_REL_L2);
    }
    // the padding rows of wte are outside the softmax and never an input: exactly 0
    const float *dwte = tensor_of(&m, m.grads, 0);
    size_t nonzero = 0;
    for (size_t i = (size_t)c->vocab_size * c->channels; i < m.tensor_sizes[0]; i++)
        nonzero += dwte[i] != 0.0f;
    test_check(nonzero == 0, "grad wte padding rows %d..%d exactly 0 (%zu nonzero)",
               c->vocab_size, c->padded_vocab_size - 1, nonzero);

    // the AdamW runs, each from the stored parameters with fresh moments
    float *init = (float *)malloc(m.num_parameters * sizeof(float));
    if (!init) abort();
    memcpy(init, m.params, m.num_parameters * sizeof(float));
    printf("  AdamW: lr %g betas %g %g eps %g clip %g, %d steps\n", (double)s.lr,
           (double)s.beta1, (double)s.beta2, (double)s.eps, (double)s.grad_clip, s.n_steps);
    for (int r = 0; r < s.n_runs; r++) {
        const float wd = s.weight_decay[r];
        memcpy(m.params, init, m.num_parameters * sizeof(float));
        gpt2ref_reset_optimizer(&m);
        double max_dl = 0.0, max_dn = 0.0;
        int run_ok = 1;
        printf("  wd %.2f losses:", (double)wd);
        for (int t = 1; t <= s.n_steps && run_ok; t++) {
            run_ok = gpt2ref_forward(&m, s.x, s.y, s.B, s.T) == 0 && gpt2ref_backward(&m) == 0;
            if (!run_ok) break;
            const double norm = gpt2ref_update(&m, s.lr, s.beta1, s.beta2, s.eps, wd,
                                               s.grad_clip, t);
            const float ref_l = s.losses[(size_t)r * s.n_steps + t - 1];
            const float ref_n = s.norms[(size_t)r * s.n_steps + t - 1];
            const double dl = fabs(m.loss - ref_l), dn = fabs(norm - ref_n) / ref_n;
            max_dl = isnan(dl) || dl > max_dl ? dl : max_dl;  // a NaN sticks and fails
            max_dn = isnan(dn) || dn > max_dn ? dn : max_dn;
            printf(" %.6f", m.loss);
        }
        printf("\n");
        if (!test_check(run_ok, "AdamW run wd %.2f%s%s", (double)wd, run_ok ? "" : ": ",
                        run_ok ? "" : m.error))
            continue;
        test_check(max_dl < TOL_STEP_LOSS_ABS,
                   "AdamW wd %.2f: %d step losses vs PyTorch, max |diff| %.2e (< %.0e)",
                   (double)wd, s.n_steps, max_dl, TOL_STEP_LOSS_ABS);
        test_check(max_dn < TOL_NORM_REL,
                   "AdamW wd %.2f: %d gradient norms vs PyTorch, max rel diff %.2e (< %.0e)",
                   (double)wd, s.n_steps, max_dn, TOL_NORM_REL);
        if (r != s.final_params_run) continue;

        // the parameters after the last update, compared as changes from the start
        float *dc = (float *)malloc(m.num_parameters * sizeof(float));
        float *dr = (float *)malloc(m.num_parameters * sizeof(float));
        if (!dc || !dr) abort();
        for (size_t i = 0; i < m.num_parameters; i++) {
            dc[i] = m.params[i] - init[i];
            dr[i] = s.final_params[i] - init[i];
        }
        double worst = 0.0;
        int worst_k = 0;
        for (int k = 0; k < GPT2REF_NUM_TENSORS; k++) {
            const double e = rel_l2_f32(tensor_of(&m, dc, k), tensor_of(&m, dr, k),
                                        m.tensor_sizes[k]);
            if (isnan(e) || e > worst) { worst = e; worst_k = k; }
            test_check(e < TOL_DELTA_REL_L2, "AdamW wd %.2f: change of %-8s after %d steps, "
                       "rel L2 %.2e (< %.0e)", (double)wd, gpt2ref_tensor_names[k], s.n_steps,
                       e, TOL_DELTA_REL_L2);
        }
        printf("  (largest parameter-change error: %s %.2e)\n", gpt2ref_tensor_names[worst_k],
               worst);
        // rows of wpe past T have zero gradient: weight decay alone moves them, so they
        // show that it is applied, and at the right rate
        const size_t o = (size_t)s.T * c->channels;
        const size_t n = m.tensor_sizes[1] - o;
        if (n > 0 && wd > 0.0f) {
            float *wc = tensor_of(&m, dc, 1) + o, *wr = tensor_of(&m, dr, 1) + o;
            double moved = 0.0;
            for (size_t i = 0; i < n; i++) moved += fabs((double)wr[i]);
            const double e = rel_l2_f32(wc, wr, n);
            test_check(moved > 0.0 && e < TOL_DECAY_ONLY_REL_L2,
                       "AdamW wd %.2f: wpe rows %d..%d (no gradient) moved by weight decay "
                       "alone, rel L2 %.2e (< %.0e)", (double)wd, s.T, c->max_seq_len - 1, e,
                       TOL_DECAY_ONLY_REL_L2);
        }
        free(dc);
        free(dr);
    }
    free(init);
    gpt2ref_state_free(&s);
    gpt2ref_free(&m);
}

// --- finite differences on a smaller model ----------------------------------------------

/*
The backward checked on its own, without PyTorch: for a model with random parameters
(biases and LayerNorm parameters away from their 0/1 init, so that every term of every
gradient is exercised), the loss's central difference along a direction d,
D(h) = L(p + h d) - L(p - h d), is compared with the analytic A(h) = sum_i g_i (p+_i - p-_i)
(p+- as rounded to float, so the rounding of the step does not count as an error). One
check per tensor, along a random +-1 direction, covers every element at once; a few
single-element checks follow.

The error e(h) = (D(h) - A(h)) / sum_i |g_i (p+_i - p-_i)| has a truncation part c h^2 and
a noise part from the float32 activations (the loss moves in steps of ~1e-8). A single
element needs a large h to rise above that noise, where c h^2 alone reaches 1e-3, so the
two are combined as Richardson does, (4 e(h/2) - e(h)) / 3, which cancels the h^2 term and
leaves ~1e-5..1e-4. A gradient that is exactly 0 (a padding row) must give D = 0 exactly.
*/
static const GPT2RefConfig FD_CONFIG = {.max_seq_len = 8, .vocab_size = 11,
                                        .padded_vocab_size = 16, .num_layers = 2,
                                        .num_heads = 2, .channels = 8};
enum { FD_B = 2, FD_T = 6 };

static double fd_loss(GPT2Ref *m, const int *x, const int *y) {
    if (gpt2ref_forward(m, x, y, FD_B, FD_T) != 0) return NAN;
    return m->loss;
}

// D(h), A(h) and the sum of |terms| of A for a step h along d (n elements at p)
static void fd_step(GPT2Ref *m, const int *x, const int *y, float *p, const double *g,
                    const float *d, size_t n, double h, double *D, double *A, double *scale) {
    float *save = (float *)malloc(n * sizeof(float));
    float *plus = (float *)malloc(n * sizeof(float));
    if (!save || !plus) abort();
    memcpy(save, p, n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = plus[i] = (float)(save[i] + h * d[i]);
    const double lp = fd_loss(m, x, y);
    for (size_t i = 0; i < n; i++) p[i] = (float)(save[i] - h * d[i]);
    const double lm = fd_loss(m, x, y);
    *A = *scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double step = (double)plus[i] - p[i];
        *A += g[i] * step;
        *scale += fabs(g[i] * step);
    }
    *D = lp - lm;
    memcpy(p, save, n * sizeof(float));
    free(save);
    free(plus);
}

static int fd_check(GPT2Ref *m, const int *x, const int *y, float *p, const double *g,
                    const float *d, size_t n, double h, const char *what) {
    double D1, A1, S1, D2, A2, S2;
    fd_step(m, x, y, p, g, d, n, h, &D1, &A1, &S1);
    fd_step(m, x, y, p, g, d, n, h / 2, &D2, &A2, &S2);
    double err;
    if (S1 == 0.0 || S2 == 0.0) err = fabs(D1) + fabs(D2);  // zero gradient: no change at all
    else err = fabs((4.0 * (D2 - A2) / S2 - (D1 - A1) / S1) / 3.0);
    return test_check(err < TOL_FD_REL, "finite diff %-22s D %+.6e A %+.6e rel %.1e "
                      "(without Richardson %.1e)", what, D1, A1, err,
                      S1 > 0.0 ? fabs(D1 - A1) / S1 : fabs(D1));
}

static void finite_difference_tests(void) {
    GPT2Ref m;
    const int built = gpt2ref_build(&m, &FD_CONFIG) == 0;
    if (!test_check(built, "build the finite-difference model%s%s", built ? "" : ": ", m.error))
        return;
    const GPT2RefConfig *c = &m.config;
    uint64_t st = 12345;
    for (int k = 0; k < GPT2REF_NUM_TENSORS; k++) {
        float *t = tensor_of(&m, m.params, k);
        const size_t n = m.tensor_sizes[k];
        const char *name = gpt2ref_tensor_names[k];
        const int is_lnw = strcmp(name, "ln1w") == 0 || strcmp(name, "ln2w") == 0 ||
                           strcmp(name, "lnfw") == 0;
        fill_uniform(t, n, gpt2ref_is_decayed(k) ? 0.5f : 0.3f, &st);
        if (is_lnw)
            for (size_t i = 0; i < n; i++) t[i] += 1.0f;
    }
    // large padding rows: any leak of them into the softmax would move the loss a lot
    float *wte = tensor_of(&m, m.params, 0);
    for (size_t i = (size_t)c->vocab_size * c->channels; i < m.tensor_sizes[0]; i++) wte[i] = 3.0f;
    int x[FD_B * FD_T], y[FD_B * FD_T];
    for (int i = 0; i < FD_B * FD_T; i++) {
        x[i] = (i * 7 + 3) % c->vocab_size;
        y[i] = (i * 5 + 1) % c->vocab_size;
    }
    y[4] = GPT2REF_IGNORE_INDEX;  // one ignored target: the mean runs over the other 11
    x[FD_T + 2] = x[FD_T + 4] = x[1];  // repeated tokens: wte rows summed over positions

    const int ok = gpt2ref_forward(&m, x, y, FD_B, FD_T) == 0 && gpt2ref_backward(&m) == 0;
    if (!test_check(ok, "finite-difference model forward + backward (loss %.4f)%s%s", m.loss,
                    ok ? "" : ": ", ok ? "" : m.error)) {
        gpt2ref_free(&m);
        return;
    }
    double *g = (double *)malloc(m.num_parameters * sizeof(double));
    float *d = (float *)malloc(m.num_parameters * sizeof(float));
    if (!g || !d) abort();
    for (size_t i = 0; i < m.num_parameters; i++) g[i] = m.grads[i];
    for (size_t i = 0; i < m.num_parameters; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        d[i] = (st >> 63) ? 1.0f : -1.0f;
    }
    char what[64];
    for (int k = 0; k < GPT2REF_NUM_TENSORS; k++) {
        const size_t o = m.tensor_offsets[k];
        snprintf(what, sizeof(what), "%s (direction)", gpt2ref_tensor_names[k]);
        fd_check(&m, x, y, m.params + o, g + o, d + o, m.tensor_sizes[k], 2e-3, what);
    }
    // single elements: a token's embedding, a key weight of the top layer, an MLP weight,
    // a LayerNorm bias, the final LayerNorm weight, and a padding row (gradient exactly 0)
    const int C = c->channels;
    const struct { int k; size_t i; const char *what; } one[] = {
        {0, (size_t)x[1] * C + 3, "wte[x1][3]"},
        {4, (size_t)(1 * 3 * C + C + 2) * C + 5, "qkvw[1][C+2][5]"},
        {10, (size_t)(0 * 4 * C + 17) * C + 6, "fcw[0][17][6]"},
        {3, (size_t)1 * C + 1, "ln1b[1][1]"},
        {14, 2, "lnfw[2]"},
        {0, (size_t)(c->vocab_size + 2) * C + 1, "wte[V+2][1] (padding)"},
    };
    const float one_d = 1.0f;
    for (size_t j = 0; j < sizeof(one) / sizeof(one[0]); j++) {
        const size_t at = m.tensor_offsets[one[j].k] + one[j].i;
        fd_check(&m, x, y, m.params + at, g + at, &one_d, 1, 2e-2, one[j].what);
    }
    free(g);
    free(d);
    gpt2ref_free(&m);
}

// --- readers and argument checks ----------------------------------------------------------

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    const int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

// reads a whole file into memory (NULL on failure), with 16 zero bytes after its end so
// that a copy with trailing bytes can be written from it
static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = size > 0 ? (unsigned char *)calloc((size_t)size + 16, 1) : NULL;
    if (data && fread(data, 1, (size_t)size, f) != (size_t)size) {
        free(data);
        data = NULL;
    }
    fclose(f);
    *n = data ? (size_t)size : 0;
    return data;
}

static int model_load_fails(const char *path) {
    GPT2Ref m;
    const int failed = gpt2ref_load(&m, path) != 0 && m.error[0] != '\0' && m.params == NULL;
    if (failed) printf("        (%s)\n", m.error);
    gpt2ref_free(&m);
    return failed;
}

static int state_load_fails(const char *path, const GPT2Ref *m) {
    GPT2RefState s;
    const int failed = gpt2ref_state_load(&s, path, m) != 0 && s.error[0] != '\0' && s.x == NULL;
    if (failed) printf("        (%s)\n", s.error);
    gpt2ref_state_free(&s);
    return failed;
}

static void reader_tests(const char *dir) {
    char mpath[1024], spath[1024], tmp[256];
    snprintf(mpath, sizeof(mpath), "%s/gpt2_debug.bin", dir);
    snprintf(spath, sizeof(spath), "%s/gpt2_debug_state.bin", dir);
    snprintf(tmp, sizeof(tmp), "/tmp/gpt2_test_cpu_%d.bin", (int)getpid());
    size_t n = 0, ns = 0;
    unsigned char *data = read_all(mpath, &n);
    unsigned char *state = read_all(spath, &ns);
    GPT2Ref m;
    if (!test_check(data && state && n > 1024 && ns > 1024 && gpt2ref_load(&m, mpath) == 0,
                    "readers: fixture files readable")) {
        free(data);
        free(state);
        return;
    }
    int32_t *hd = (int32_t *)data;
    test_check(model_load_fails("/nonexistent/gpt2.bin"), "model reader: rejects a missing file");
    test_check(write_file(tmp, data, n - 4) && model_load_fails(tmp),
               "model reader: rejects a truncated file");
    test_check(write_file(tmp, data, 100) && model_load_fails(tmp),
               "model reader: rejects a file shorter than the header");
    test_check(write_file(tmp, data, n + 4) && model_load_fails(tmp),
               "model reader: rejects trailing bytes");
    hd[0] = 20240520;  // a data shard's magic
    test_check(write_file(tmp, data, n) && model_load_fails(tmp), "model reader: rejects a bad magic");
    hd[0] = GPT2REF_MODEL_MAGIC;
    hd[1] = 5;  // bf16
    test_check(write_file(tmp, data, n) && model_load_fails(tmp), "model reader: rejects version 5 (bf16)");
    hd[1] = GPT2REF_MODEL_VERSION;
    const int32_t heads = hd[5];
    hd[5] = 3;  // C = 64 is no multiple of 3
    test_check(write_file(tmp, data, n) && model_load_fails(tmp),
               "model reader: rejects C not a multiple of NH");
    hd[5] = heads;
    const int32_t vp = hd[7];
    hd[7] = hd[3] - 1;  // Vp < V
    test_check(write_file(tmp, data, n) && model_load_fails(tmp), "model reader: rejects Vp < V");
    hd[7] = vp;

    int32_t *sh = (int32_t *)state;
    test_check(write_file(tmp, state, ns - 4) && state_load_fails(tmp, &m),
               "state reader: rejects a truncated file");
    sh[4] = 1;  // claims to store logits
    test_check(write_file(tmp, state, ns) && state_load_fails(tmp, &m),
               "state reader: rejects a file with logits");
    sh[4] = 0;
    sh[3] = m.config.max_seq_len + 1;
    test_check(write_file(tmp, state, ns) && state_load_fails(tmp, &m), "state reader: rejects T > maxT");
    sh[3] = 32;
    sh[5] += 1;
    test_check(write_file(tmp, state, ns) && state_load_fails(tmp, &m),
               "state reader: rejects a parameter count that is not the model's");
    sh[5] -= 1;
    int32_t *xs = sh + 256;
    const int32_t x0 = xs[0];
    xs[0] = m.config.vocab_size;
    test_check(write_file(tmp, state, ns) && state_load_fails(tmp, &m),
               "state reader: rejects a token id >= V");
    xs[0] = x0;
    remove(tmp);

    // forward refuses bad ids and shapes before touching anything
    int x[4] = {0, 1, 2, 3}, y[4] = {1, 2, 3, 4};
    x[2] = m.config.vocab_size;
    int failed = gpt2ref_forward(&m, x, y, 1, 4) != 0;
    test_check(failed, "forward: rejects an input id >= V (%s)", m.error);
    x[2] = 2;
    y[1] = -1;
    failed = gpt2ref_forward(&m, x, y, 1, 4) != 0;
    test_check(failed, "forward: rejects a target -1 (%s)", m.error);
    y[1] = GPT2REF_IGNORE_INDEX;
    test_check(gpt2ref_forward(&m, x, y, 1, 4) == 0 && isfinite(m.loss),
               "forward: accepts a target -100 (ignored)");
    failed = gpt2ref_forward(&m, x, y, 1, m.config.max_seq_len + 1) != 0;
    test_check(failed, "forward: rejects T > maxT (%s)", m.error);
    test_check(gpt2ref_backward(&m) != 0, "backward: refuses to run after a failed forward");
    gpt2ref_free(&m);
    free(data);
    free(state);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "test/fixtures";
    printf("GPT-2 CPU reference vs PyTorch (%s)\n", dir);
    fixture_tests(dir);
    printf("finite differences on a smaller model\n");
    finite_difference_tests();
    printf("readers and argument checks\n");
    reader_tests(dir);
    return test_summary();
}
