/*
gemm_algos.cu - is cuBLASLt's first heuristic choice the fastest for flce's GEMMs?

For each benchmark shape and workspace budget (1 GiB and 160 MiB), asks the library for its
schedule (flce_chunk_tokens, flce_vocab_tile), states the three GEMMs a chunk runs exactly as
flce.cu states them (the aligned part of the vocabulary cut; operands, strides, output types
and beta as the library passes them), and times every algorithm cuBLASLt's heuristic returns
for each (up to -n, default 16), and the one-result query's pick "h" that gemm_lt runs without
autotuning (a query for several results need not return it first): median of 5 runs after 2
warm-ups, CUDA events. Prints h's time, the best candidate and its index. It answers
whether an autotuning step in gemm_lt would pay; it reports, never asserts.

./gemm_algos [-s shapes] [-n candidates]      shapes as in flce_bench: 1,2,3,4 (default all)
*/
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

static const int64_t g_shapes[4][3] = {
    {8192, 768, 50304}, {4096, 4096, 128256}, {16384, 4096, 151936}, {65535, 1024, 176245}};

typedef struct {
    const char *name;
    gemm_problem p;
} GemmSpec;

// Times one cuBLASLt algorithm on spec: median ms of 5 runs after 2 warm-ups.
static float time_algo(gemm_cache *cache, gemm_entry *e, const cublasLtMatmulAlgo_t *algo,
                       const gemm_problem *p, void *ws, cudaStream_t s) {
    void *D = (void *)p->d.ptr;
    float ms[5];
    time_runs(ms, 2, 5, s, [&] {
        cublasCheck(cublasLtMatmul(cache->handle, e->desc, &p->alpha, p->a.ptr, e->la, p->b.ptr, e->lb,
                                   &p->beta, D, e->ld, D, e->ld, algo, ws, LT_WORKSPACE, s));
    });
    return median_of(ms, 5);
}

static void tune_one(gemm_cache *cache, const GemmSpec *g, int max_algos, void *ws, cudaStream_t s) {
    const gemm_problem *p = &g->p;
    gemm_key key = gemm_make_key(p);
    gemm_entry e;
    int no_algo = 0;
    cublasCheck(gemm_entry_build(cache, &e, &key, NULL, LT_WORKSPACE, &no_algo));
    if (no_algo) {
        printf("| %s | %lld x %lld x %lld | no algorithm | | | |\n", g->name, (long long)p->m,
               (long long)p->n, (long long)p->k);
        gemm_entry_release(&e);
        return;
    }
    cublasLtMatmulPreference_t pref;
    cublasCheck(gemm_preference(&key, LT_WORKSPACE, &pref));
    cublasLtMatmulHeuristicResult_t res[32];
    int returned = 0;
    if (max_algos > 32) max_algos = 32;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(cache->handle, e.desc, e.la, e.lb, e.ld, e.ld, pref,
                                               max_algos, res, &returned));
    cublasLtMatmulPreferenceDestroy(pref);
    // "h" is the one-result query's pick (what gemm_lt runs without autotuning): a query
    // for several results need not return it first
    const float first = time_algo(cache, &e, &e.algo, p, ws, s);
    float best = first;
    int best_i = -1;
    for (int i = 0; i < returned; i++) {
        const float ms = time_algo(cache, &e, &res[i].algo, p, ws, s);
        if (ms < best) { best = ms; best_i = i; }
    }
    const double flop = 2.0 * (double)p->m * (double)p->n * (double)p->k;
    char which[16];
    if (best_i < 0) snprintf(which, sizeof(which), "h");
    else snprintf(which, sizeof(which), "#%d", best_i);
    printf("| %s | %lld x %lld x %lld | %d | %.3f (%.0f TFLOP/s) | %.3f (%.0f TFLOP/s) %s | %.1f%% |\n",
           g->name, (long long)p->m, (long long)p->n, (long long)p->k, returned, first,
           flop / first * 1e-9, best, flop / best * 1e-9, which, 100.0 * (first - best) / first);
    fflush(stdout);
    gemm_entry_release(&e);
}

int main(int argc, char **argv) {
    int use[4] = {1, 1, 1, 1}, max_algos = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-s") == 0) {
            memset(use, 0, sizeof(use));
            for (const char *c = argv[i + 1]; *c; c++)
                if (*c >= '1' && *c <= '4') use[*c - '1'] = 1;
        } else if (strcmp(argv[i], "-n") == 0) {
            max_algos = atoi(argv[i + 1]);
        } else {
            fprintf(stderr, "usage: %s [-s shapes 1234] [-n candidates]\n", argv[0]);
            return 1;
        }
    }
    gemm_cache cache;
    memset(&cache, 0, sizeof(cache));
    cublasCheck(cublasLtCreate(&cache.handle));
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    void *ws;
    cudaCheck(cudaMalloc(&ws, LT_WORKSPACE));
    printf("| GEMM | m x n x k | more candidates | heuristic's pick h, ms | best ms (h or #i) | gain |\n");
    printf("|---|---|---:|---:|---:|---:|\n");
    for (int si = 0; si < 4; si++) {
        if (!use[si]) continue;
        const int64_t N = g_shapes[si][0], H = g_shapes[si][1], V = g_shapes[si][2];
        for (int b = 0; b < 2; b++) {
            const size_t budget = b == 0 ? (size_t)1 << 30 : (size_t)160 << 20;
            flce_config cfg;
            flce_config_init(&cfg, N, H, V);
            size_t bytes = 0;
            flceCheck(flce_workspace_size(&cfg, budget, &bytes), NULL);
            const int64_t C = flce_chunk_tokens(&cfg, bytes), T = flce_vocab_tile(&cfg, bytes);
            const int tiled = T < V;
            // as flce.cu: buffer stride = tile rounded up to 64; the aligned part of the tile
            const int64_t ldl = (T + 63) / 64 * 64, w = T / 64 * 64;
            const int dh32 = tiled || w < V;  // bf16 d_h summed in fp32
            printf("| **%lldx%lldx%lld, %zu MiB: chunk %lld, %s** | | | | | |\n", (long long)N,
                   (long long)H, (long long)V, budget >> 20, (long long)C,
                   tiled ? "vocabulary tiles" : "whole vocabulary");
            bf16 *W, *h, *dh;
            float *logits, *dW, *dh_f32;
            cudaCheck(cudaMalloc(&W, (size_t)V * H * sizeof(bf16)));
            cudaCheck(cudaMalloc(&h, (size_t)C * H * sizeof(bf16)));
            cudaCheck(cudaMalloc(&dh, (size_t)C * H * sizeof(bf16)));
            cudaCheck(cudaMalloc(&dh_f32, (size_t)C * H * sizeof(float)));
            cudaCheck(cudaMalloc(&logits, (size_t)C * ldl * sizeof(float)));
            cudaCheck(cudaMalloc(&dW, (size_t)V * H * sizeof(float)));
            fill_uniform_bf16_kernel<<<1024, 256, 0, s>>>(W, V * H, 0.1f, 1);
            fill_uniform_bf16_kernel<<<1024, 256, 0, s>>>(h, C * H, 0.1f, 2);
            // dlogits: bf16 over the logits buffer (row stride 2 ldl), small values
            fill_uniform_bf16_kernel<<<1024, 256, 0, s>>>((bf16 *)logits, C * ldl * 2, 1e-3f, 3);
            cudaCheck(cudaGetLastError());
            cudaCheck(cudaMemsetAsync(dW, 0, (size_t)V * H * sizeof(float), s));
            cudaCheck(cudaMemsetAsync(dh_f32, 0, (size_t)C * H * sizeof(float), s));
            // the bf16 dlogits over the logits buffer: row stride 2 ldl
            const gemm_operand dlogits = {logits, CUDA_R_16BF, 2 * ldl};
            const GemmSpec specs[3] = {
                {"logits", {1, 0, w, C, H, {W, CUDA_R_16BF, H}, {h, CUDA_R_16BF, H},
                            {logits, CUDA_R_32F, ldl}, 1.0f, 0.0f}},
                {"d_hidden", {0, 0, H, C, w, {W, CUDA_R_16BF, H}, dlogits,
                              {dh32 ? (void *)dh_f32 : (void *)dh, dh32 ? CUDA_R_32F : CUDA_R_16BF, H},
                              1.0f, tiled ? 1.0f : 0.0f}},
                {"d_weight", {0, 1, H, w, C, {h, CUDA_R_16BF, H}, dlogits, {dW, CUDA_R_32F, H}, 1.0f, 1.0f}},
            };
            for (int g = 0; g < 3; g++) {
                tune_one(&cache, &specs[g], max_algos, ws, s);
                // the logits GEMM wrote fp32 over the bf16 dlogits the other two read
                if (g == 0) fill_uniform_bf16_kernel<<<1024, 256, 0, s>>>((bf16 *)logits, C * ldl * 2, 1e-3f, 3);
                cudaCheck(cudaGetLastError());
            }
            cudaCheck(cudaFree(W)); cudaCheck(cudaFree(h)); cudaCheck(cudaFree(dh));
            cudaCheck(cudaFree(dh_f32)); cudaCheck(cudaFree(logits)); cudaCheck(cudaFree(dW));
        }
    }
    cudaCheck(cudaFree(ws));
    cublasLtDestroy(cache.handle);
    return 0;
}
