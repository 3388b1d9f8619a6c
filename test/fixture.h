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
    everything else 0
  then, in this order:
    inputs:  float32 h[N*H], W[Vp*H], bias[Vp] (if has_bias), int32 targets[N],
             float32 grad_token_loss[N] (if has_grad_token_loss)
    outputs: float32 loss[1], token_loss[N], token_lse[N], d_h[N*H], d_W[Vp*H],
             d_bias[Vp] (if has_bias)
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
#define FIXTURE_VERSION 1

typedef struct {
    char name[256];
    int N, H, V, Vp, has_bias, reduction, ignore_index, has_grad_token_loss;
    float label_smoothing, z_loss_scale, softcap, grad_scale;
    // inputs
    float *h, *W, *bias, *grad_token_loss;
    int32_t *targets;
    // PyTorch's outputs
    float loss;
    float *token_loss, *token_lse, *d_h, *d_W, *d_bias;
} Fixture;

static void fixture_free(Fixture *f) {
    free(f->h); free(f->W); free(f->bias); free(f->grad_token_loss); free(f->targets);
    free(f->token_loss); free(f->token_lse); free(f->d_h); free(f->d_W); free(f->d_bias);
    memset(f, 0, sizeof(*f));
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
    if (ok && (hd[0] != FIXTURE_MAGIC || hd[1] != FIXTURE_VERSION)) {
        fprintf(stderr, "fixture %s: bad header (magic %d version %d, expected %d %d)\n", path,
                hd[0], hd[1], FIXTURE_MAGIC, FIXTURE_VERSION);
        ok = 0;
    }
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
    if (ok) ok = fixture_read(fp, &f->loss, sizeof(float), 1, path, "loss");
    if (ok) ok = (f->token_loss = fixture_alloc_read(fp, N, path, "token_loss")) != NULL;
    if (ok) ok = (f->token_lse = fixture_alloc_read(fp, N, path, "token_lse")) != NULL;
    if (ok) ok = (f->d_h = fixture_alloc_read(fp, N * H, path, "d_h")) != NULL;
    if (ok) ok = (f->d_W = fixture_alloc_read(fp, Vp * H, path, "d_W")) != NULL;
    if (ok && f->has_bias) ok = (f->d_bias = fixture_alloc_read(fp, Vp, path, "d_bias")) != NULL;
    if (ok && fgetc(fp) != EOF) {
        fprintf(stderr, "fixture %s: trailing bytes after the last array\n", path);
        ok = 0;
    }
    fclose(fp);
    if (!ok) fixture_free(f);
    return ok;
}

#endif // FLCE_TEST_FIXTURE_H
