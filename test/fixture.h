/*
fixture.h - reader for the FLCE reference fixtures (the .bin files in test/fixtures), which
scripts/export_fixtures.py writes with PyTorch.

File layout (little endian):
  int32 header[256]:
    [0] = 20261130 (magic)    [1] = 1 (version)
    [2] = N   [3] = H   [4] = V   [5] = Vp (rows of W, >= V)
    [6] = has_bias            [7] = reduction (0 mean, 1 sum, 2 none)
    [8] = ignore_index        [9] = has_grad_token_loss (upstream per-token grads, none only)
    [16..19] = float32 bit patterns of label_smoothing, z_loss_scale, softcap, grad_scale
  version 2 only (the options of flce 1.1; a version 1 file has none of them):
    [10] = has_class_weights  [11] = has_entropy (token_entropy stored)
    [12] = has_logprob (token_logprob stored)
    [13] = has_grad_entropy   [14] = has_grad_logprob
    [20] = float32 bit pattern of temperature
    everything else 0
  then, in this order:
    inputs:  float32 h[N*H], W[Vp*H], bias[Vp] (if has_bias), int32 targets[N],
             float32 grad_token_loss[N] (if has_grad_token_loss),
             float32 class_weights[V], grad_entropy[N], grad_logprob[N] (each if its flag)
    outputs: float32 loss[1], token_loss[N], token_lse[N], d_h[N*H], d_W[Vp*H],
             d_bias[Vp] (if has_bias), token_entropy[N], token_logprob[N] (each if its flag)
h, W and bias hold bf16-representable values, so a bf16 run sees exactly the same inputs.
The outputs are PyTorch's, computed in float64 and stored as float32.
*/
#ifndef FLCE_TEST_FIXTURE_H
#define FLCE_TEST_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE_MAGIC 20261130
#define FIXTURE_VERSION 2  // the newest the reader knows; it reads 1 too

typedef struct {
    char name[256];
    int N, H, V, Vp, has_bias, reduction, ignore_index, has_grad_token_loss;
    float label_smoothing, z_loss_scale, softcap, grad_scale;
    // version 2 (version 1 files: 0, temperature 1)
    int version, has_class_weights, has_entropy, has_logprob, has_grad_entropy, has_grad_logprob;
    float temperature;
    // inputs
    float *h, *W, *bias, *grad_token_loss;
    int32_t *targets;
    float *class_weights, *grad_entropy, *grad_logprob;
    // PyTorch's outputs
    float loss;
    float *token_loss, *token_lse, *d_h, *d_W, *d_bias;
    float *token_entropy, *token_logprob;
} Fixture;

static void fixture_free(Fixture *f) {
    free(f->h); free(f->W); free(f->bias); free(f->grad_token_loss); free(f->targets);
    free(f->token_loss); free(f->token_lse); free(f->d_h); free(f->d_W); free(f->d_bias);
    free(f->class_weights); free(f->grad_entropy); free(f->grad_logprob);
    free(f->token_entropy); free(f->token_logprob);
    memset(f, 0, sizeof(*f));
}

// Whether a fixture uses any option of flce 1.1 (a version 2 file).
static int fixture_has_new_options(const Fixture *f) {
    return f->temperature != 1.0f || f->has_class_weights || f->has_entropy || f->has_logprob ||
           f->has_grad_entropy || f->has_grad_logprob;
}

// reads count items of size bytes; returns 0 and prints what is missing on a short read
static int fixture_read(FILE *fp, void *dst, size_t size, size_t count, const char *path,
                        const char *what) {
    if (fread(dst, size, count, fp) != count) {
        fprintf(stderr, "fixture %s: truncated while reading %s (%zu x %zu bytes)\n", path,
                what, count, size);
        return 0;
    }
    return 1;
}

static float *fixture_alloc_read(FILE *fp, size_t count, const char *path, const char *what) {
    float *p = (float *)malloc((count ? count : 1) * sizeof(float));
    if (p == NULL) { fprintf(stderr, "fixture %s: out of memory for %s\n", path, what); return NULL; }
    if (!fixture_read(fp, p, sizeof(float), count, path, what)) { free(p); return NULL; }
    return p;
}

// Loads path into f; returns 1 on success, 0 (with a message naming the problem) on failure.
static int fixture_load(const char *path, Fixture *f) {
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "%.255s", path);
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) { fprintf(stderr, "fixture %s: cannot open\n", path); return 0; }
    int32_t hd[256];
    int ok = fixture_read(fp, hd, sizeof(int32_t), 256, path, "header");
    if (ok && (hd[0] != FIXTURE_MAGIC || hd[1] < 1 || hd[1] > FIXTURE_VERSION)) {
        fprintf(stderr, "fixture %s: bad header (magic %d version %d, expected %d and 1..%d)\n",
                path, hd[0], hd[1], FIXTURE_MAGIC, FIXTURE_VERSION);
        ok = 0;
    }
    f->temperature = 1.0f;
    if (ok && hd[1] >= 2) {
        f->has_class_weights = hd[10]; f->has_entropy = hd[11]; f->has_logprob = hd[12];
        f->has_grad_entropy = hd[13]; f->has_grad_logprob = hd[14];
        memcpy(&f->temperature, &hd[20], 4);
        for (int k = 10; k <= 14; k++)
            if (hd[k] != 0 && hd[k] != 1) {
                fprintf(stderr, "fixture %s: header flag [%d] = %d is not 0 or 1\n", path, k, hd[k]);
                ok = 0;
            }
        if (!(f->temperature > 0.0f && f->temperature < 1e30f)) {
            fprintf(stderr, "fixture %s: bad temperature %g\n", path, (double)f->temperature);
            ok = 0;
        }
    }
    if (ok) f->version = hd[1];
    if (ok) {
        f->N = hd[2]; f->H = hd[3]; f->V = hd[4]; f->Vp = hd[5];
        f->has_bias = hd[6]; f->reduction = hd[7]; f->ignore_index = hd[8];
        f->has_grad_token_loss = hd[9];
        memcpy(&f->label_smoothing, &hd[16], 4); memcpy(&f->z_loss_scale, &hd[17], 4);
        memcpy(&f->softcap, &hd[18], 4); memcpy(&f->grad_scale, &hd[19], 4);
        if (f->N <= 0 || f->H <= 0 || f->V <= 0 || f->Vp < f->V || f->reduction < 0 ||
            f->reduction > 2 || (f->N > (1 << 20)) || ((long long)f->Vp * f->H > (1LL << 28))) {
            fprintf(stderr, "fixture %s: bad sizes N=%d H=%d V=%d Vp=%d reduction=%d\n", path,
                    f->N, f->H, f->V, f->Vp, f->reduction);
            ok = 0;
        }
    }
    size_t N = ok ? (size_t)f->N : 0, H = (size_t)f->H, Vp = (size_t)f->Vp;
    if (ok) ok = (f->h = fixture_alloc_read(fp, N * H, path, "h")) != NULL;
    if (ok) ok = (f->W = fixture_alloc_read(fp, Vp * H, path, "W")) != NULL;
    if (ok && f->has_bias) ok = (f->bias = fixture_alloc_read(fp, Vp, path, "bias")) != NULL;
    if (ok) {
        f->targets = (int32_t *)malloc(N * sizeof(int32_t));
        ok = f->targets && fixture_read(fp, f->targets, sizeof(int32_t), N, path, "targets");
    }
    if (ok && f->has_grad_token_loss)
        ok = (f->grad_token_loss = fixture_alloc_read(fp, N, path, "grad_token_loss")) != NULL;
    if (ok && f->has_class_weights)
        ok = (f->class_weights = fixture_alloc_read(fp, (size_t)f->V, path, "class_weights")) != NULL;
    if (ok && f->has_grad_entropy)
        ok = (f->grad_entropy = fixture_alloc_read(fp, N, path, "grad_entropy")) != NULL;
    if (ok && f->has_grad_logprob)
        ok = (f->grad_logprob = fixture_alloc_read(fp, N, path, "grad_logprob")) != NULL;
    if (ok) ok = fixture_read(fp, &f->loss, sizeof(float), 1, path, "loss");
    if (ok) ok = (f->token_loss = fixture_alloc_read(fp, N, path, "token_loss")) != NULL;
    if (ok) ok = (f->token_lse = fixture_alloc_read(fp, N, path, "token_lse")) != NULL;
    if (ok) ok = (f->d_h = fixture_alloc_read(fp, N * H, path, "d_h")) != NULL;
    if (ok) ok = (f->d_W = fixture_alloc_read(fp, Vp * H, path, "d_W")) != NULL;
    if (ok && f->has_bias) ok = (f->d_bias = fixture_alloc_read(fp, Vp, path, "d_bias")) != NULL;
    if (ok && f->has_entropy)
        ok = (f->token_entropy = fixture_alloc_read(fp, N, path, "token_entropy")) != NULL;
    if (ok && f->has_logprob)
        ok = (f->token_logprob = fixture_alloc_read(fp, N, path, "token_logprob")) != NULL;
    if (ok && fgetc(fp) != EOF) {
        fprintf(stderr, "fixture %s: trailing bytes after the last array\n", path);
        ok = 0;
    }
    fclose(fp);
    if (!ok) fixture_free(f);
    return ok;
}

#endif // FLCE_TEST_FIXTURE_H
