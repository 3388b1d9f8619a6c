/*
matmul_bench.cu - the trainer's linear layers (llmc/matmul.cuh) timed on both of their paths,
llm.c dev/cuda style: cuBLASLt with its epilogues, and our Hopper GEMM for the calls of short K
(llmc/matmul_sm90.cuh), at GPT-2's shapes of one B x T step (default d12, B = 64, T = 1024).

./matmul_bench [-b B] [-t T] [-c C] [-r repeats] [-a 1] [-s swiglu]

Each row is one call of the forward or of the backward's input gradient (the weight gradients
are cuBLASLt's on both paths and are not timed), random bf16 inputs, outputs poisoned (NaN)
before every call; median ms over the repeats (CUDA events, after a warm-up), the two paths
alternated; TFLOP/s count the product (2 M N K). "differ" is the rel L2 of the Hopper path's
output against cuBLASLt's, and "unwritten" counts its elements still NaN. The last rows sum
the calls on each path and on the trainer's choice (mm90_available: our kernel for the kinds of
MM90_DEFAULT, cuBLASLt for the others). -a 1 autotunes cuBLASLt's calls (gemm_lt times its
candidates on the warm-up call and reports each shape's times on stderr), which the trainer
leaves off: a timed pick can differ between runs, and its runs and resumes are bitwise alike.
Reports, never asserts (test/gpu_kernels_matmul.cuh checks correctness against CPU references).

-s swiglu: the Llama / Qwen MLP's SwiGLU calls instead (B x T tokens, default B = 32), at the
shapes of Qwen2.5-0.5B (C 896, I 4864), Qwen2.5-1.5B (1536, 8960) and Llama-3.2-1B (2048, 8192):
matmul_forward_swiglu (gu and h) and matmul_backward_dswiglu's dgu (its weight gradient, the
same cuBLASLt call on both paths, not timed), each as the unfused pair (cuBLASLt GEMM +
llmc/swiglu.cuh's kernel) against the fused Hopper kind (MM90_SWIGLU, MM90_DSWIGLU). "differ":
h's (forward) or dgu's (backward) rel L2 between the paths, "unwritten": the Hopper path's NaNs
in gu and h, or dgu.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../llmc/bf16.h"
#include "../llmc/matmul.cuh"
#include "common.cuh"

// a call's kind: its bit in MatmulContext's use_sm90 (llmc/matmul_sm90.cuh) is 1 << kind
enum { FWD = MM90_BIAS, FWD_RES = MM90_RESIDUAL, FWD_GELU = MM90_GELU, DINP_DGELU = MM90_DGELU, DINP = MM90_DINP };

typedef struct {
    const char *what;
    int kind;
    int K, N;  // the product: out (BT, N) from a K-long reduction
} Call;

// n bf16 uniform in [-scale, scale) (dev/common.cuh's fill), never zeros
static floatX *random_bf16(size_t n, float scale, uint64_t seed) {
    floatX *d;
    cudaCheck(cudaMalloc(&d, n * sizeof(floatX)));
    fill_uniform_bf16_kernel<<<1024, 256>>>(d, (int64_t)n, scale, seed);
    cudaCheck(cudaGetLastError());
    return d;
}

// The -s swiglu rows: see the header. Returns main's exit status.
static int swiglu_bench(MatmulContext *ctx, int BT, int reps, cudaStream_t s) {
    typedef struct {
        const char *model;
        int C, I;
    } Shape;
    const Shape shapes[] = {{"Qwen2.5-0.5B", 896, 4864}, {"Qwen2.5-1.5B", 1536, 8960}, {"Llama-3.2-1B", 2048, 8192}};
    const int have_sm90 = sm90_available();
    int maxC = 0, maxI = 0;
    for (const Shape &sh : shapes) {
        maxC = sh.C > maxC ? sh.C : maxC;
        maxI = sh.I > maxI ? sh.I : maxI;
    }
    const size_t nA = (size_t)BT * maxC, nI = (size_t)BT * maxI, nW = (size_t)2 * maxI * maxC;
    floatX *a = random_bf16(nA, 1.0f, 11), *w = random_bf16(nW, 1.0f / sqrtf((float)maxC), 12);
    floatX *gu_in = random_bf16(2 * nI, 3.0f, 13), *dh;
    floatX *gu[2], *h[2], *dgu[2];
    cudaCheck(cudaMalloc(&dh, nI * sizeof(floatX)));
    for (int p = 0; p < 2; p++) {
        cudaCheck(cudaMalloc(&gu[p], 2 * nI * sizeof(floatX)));
        cudaCheck(cudaMalloc(&h[p], nI * sizeof(floatX)));
        cudaCheck(cudaMalloc(&dgu[p], 2 * nI * sizeof(floatX)));
    }
    uint16_t *h0 = (uint16_t *)malloc(2 * nI * sizeof(uint16_t)), *h1 = (uint16_t *)malloc(2 * nI * sizeof(uint16_t));
    float *ms[2] = {(float *)malloc(reps * sizeof(float)), (float *)malloc(reps * sizeof(float))};
    if (h0 == NULL || h1 == NULL || ms[0] == NULL || ms[1] == NULL) {
        fprintf(stderr, "matmul_bench: out of host memory\n");
        return 1;
    }
    EventTimer timer;
    timer_init(&timer);
    printf("SwiGLU: BT = %d, median of %d, the two paths alternated\n\n", BT, reps);
    printf("| model | call | M x N x K | unfused ms | TFLOP/s | Hopper path | ms | TFLOP/s | speed-up | differ | "
           "unwritten |\n");
    printf("|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|\n");
    for (const Shape &sh : shapes) {
        const int C = sh.C, I = sh.I;
        for (int bwd = 0; bwd < 2; bwd++) {
            long long took = 0;
            for (int r = -2; r < reps; r++)
                for (int p = 0; p < 2; p++) {
                    ctx->use_sm90 = p == 1 && have_sm90 ? MM90_ALL : 0;
                    const long long before = ctx->n_sm90;
                    if (bwd) {
                        cudaCheck(cudaMemsetAsync(dgu[p], 0xFF, (size_t)BT * 2 * I * sizeof(floatX), s));
                    } else {
                        cudaCheck(cudaMemsetAsync(gu[p], 0xFF, (size_t)BT * 2 * I * sizeof(floatX), s));
                        cudaCheck(cudaMemsetAsync(h[p], 0xFF, (size_t)BT * I * sizeof(floatX), s));
                    }
                    timer_start(&timer, s);
                    // the forward: gu, h from a (BT, C), w (2I, C); the backward: dgu from a as
                    // dout (BT, C), w as downw (C, I), gu_in
                    if (bwd) matmul_backward_dswiglu(ctx, dgu[p], dh, NULL, a, NULL, w, gu_in, BT, C, I, s);
                    else matmul_forward_swiglu(ctx, gu[p], h[p], a, w, BT, C, I, s);
                    const float call_ms = timer_stop(&timer, s);
                    if (p == 1) took += ctx->n_sm90 > before;
                    if (r >= 0) ms[p][r] = call_ms;
                }
            size_t nan = 0;
            const size_t n = (size_t)BT * I * (bwd ? 2 : 1);
            cudaCheck(cudaMemcpy(h0, bwd ? dgu[0] : h[0], n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(h1, bwd ? dgu[1] : h[1], n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
            const double differ = rel_l2_bf16_host(h1, h0, n, &nan);
            if (!bwd) {  // gu's unwritten elements too
                size_t nan_gu = 0;
                cudaCheck(cudaMemcpy(h1, gu[1], 2 * n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
                cudaCheck(cudaMemcpy(h0, gu[0], 2 * n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
                (void)rel_l2_bf16_host(h1, h0, 2 * n, &nan_gu);
                nan += nan_gu;
            }
            const float m0 = median_of(ms[0], reps), m1 = median_of(ms[1], reps);
            const double flop = 2.0 * BT * (double)I * C * (bwd ? 1 : 2);
            printf("| %s | %s | %d x %d x %d | %.3f | %.0f | %s | %.3f | %.0f | %.2fx | %.1e | %zu |\n", sh.model,
                   bwd ? "down dinp + swiglu_backward" : "gate/up forward + swiglu_forward", BT, bwd ? I : 2 * I, C,
                   m0, flop / m0 / 1e9, took ? "fused" : "unfused", m1, flop / m1 / 1e9, m0 / m1, differ, nan);
        }
    }
    timer_free(&timer);
    for (int p = 0; p < 2; p++) {
        cudaCheck(cudaFree(gu[p]));
        cudaCheck(cudaFree(h[p]));
        cudaCheck(cudaFree(dgu[p]));
    }
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(w));
    cudaCheck(cudaFree(gu_in));
    cudaCheck(cudaFree(dh));
    free(h0);
    free(h1);
    free(ms[0]);
    free(ms[1]);
    return 0;
}

// one call of c on the path the context is set to
static void run(MatmulContext *ctx, const Call *c, floatX *out, floatX *pre, floatX *a, floatX *w, floatX *bias,
                floatX *res, int BT, cudaStream_t s) {
    switch (c->kind) {
    case FWD: matmul_forward(ctx, out, NULL, a, w, bias, BT, c->K, c->N, s); break;
    case FWD_RES: matmul_forward_residual(ctx, out, res, a, w, bias, BT, c->K, c->N, s); break;
    case FWD_GELU: matmul_forward(ctx, out, pre, a, w, bias, BT, c->K, c->N, s); break;
    // dinp (BT, N) = dout (BT, K) @ w (K, N): matmul_backward's C = N, OC = K
    case DINP: matmul_backward(ctx, out, NULL, NULL, a, NULL, w, NULL, BT, c->N, c->K, s); break;
    case DINP_DGELU: matmul_backward_dgelu(ctx, out, NULL, NULL, a, NULL, w, res, BT, c->N, c->K, s); break;
    }
}

int main(int argc, char **argv) {
    int B = 0, T = 1024, C = 768, reps = 20, tune = 0, swiglu = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-s") && !strcmp(argv[i + 1], "swiglu")) swiglu = 1;
        else if (!strcmp(argv[i], "-t")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) C = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-a")) tune = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [-b B] [-t T] [-c C] [-r repeats] [-a 1] [-s swiglu]\n", argv[0]);
            return 2;
        }
    }
    if (B == 0) B = swiglu ? 32 : 64;
    if (B < 1 || T < 1 || C < 8 || C % 8 != 0 || reps < 1 || reps > 1000 || tune < 0 || tune > 1) {
        fprintf(stderr, "matmul_bench: B, T >= 1, C a multiple of 8, 1 <= repeats <= 1000, -a 0 or 1\n");
        return 2;
    }
    const int BT = B * T;
    MatmulContext ctx;
    matmul_init(&ctx);
    if (tune) {
        ctx.gemm.autotune = 1;
        ctx.gemm.report = stderr;
    }
    if (!sm90_available()) printf("note: no Hopper path here (not an sm_90a build on a compute 9.0 GPU)\n");
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    if (swiglu) {
        const int rc = swiglu_bench(&ctx, BT, reps, s);
        cudaCheck(cudaStreamDestroy(s));
        matmul_free(&ctx);
        return rc;
    }
    const Call calls[] = {
        {"qkv forward (bias)", FWD, C, 3 * C},
        {"attention proj forward (bias, residual)", FWD_RES, C, C},
        {"fc forward (bias, GELU: two outputs)", FWD_GELU, C, 4 * C},
        {"fc proj forward (bias, residual)", FWD_RES, 4 * C, C},
        {"qkv dinp", DINP, 3 * C, C},
        {"attention proj dinp", DINP, C, C},
        {"fc dinp", DINP, 4 * C, C},
        {"fc proj dinp (GELU backward)", DINP_DGELU, C, 4 * C},
    };
    const int n_calls = (int)(sizeof(calls) / sizeof(calls[0]));
    const size_t big = (size_t)BT * 4 * C;
    floatX *a = random_bf16(big, 1.0f, 1), *res = random_bf16(big, 2.0f, 2);
    floatX *w = random_bf16((size_t)4 * C * C, 1.0f / sqrtf((float)C), 3);
    floatX *bias = random_bf16((size_t)4 * C, 0.5f, 4);
    floatX *out[2], *pre;
    cudaCheck(cudaMalloc(&out[0], big * sizeof(floatX)));
    cudaCheck(cudaMalloc(&out[1], big * sizeof(floatX)));
    cudaCheck(cudaMalloc(&pre, big * sizeof(floatX)));
    uint16_t *h0 = (uint16_t *)malloc(big * sizeof(uint16_t)), *h1 = (uint16_t *)malloc(big * sizeof(uint16_t));
    float *ms[2] = {(float *)malloc(reps * sizeof(float)), (float *)malloc(reps * sizeof(float))};
    EventTimer timer;
    timer_init(&timer);
    const int have_sm90 = sm90_available();  // every kind of call, not only the trainer's

    printf("B = %d, T = %d, C = %d (BT = %d), median of %d, the two paths alternated%s\n\n", B, T, C, BT, reps,
           tune ? "; cuBLASLt autotuned (-a 1)" : "");
    printf("| call | M x N x K | cuBLASLt ms | TFLOP/s | Hopper path | ms | TFLOP/s | speed-up | differ | unwritten |\n");
    printf("|---|---|---:|---:|---|---:|---:|---:|---:|---:|\n");
    double sum[2] = {0.0, 0.0}, trainer = 0.0;  // trainer: each call on the path mm90_available picks
    for (int i = 0; i < n_calls; i++) {
        const Call *c = &calls[i];
        long long took = 0;
        for (int r = -2; r < reps; r++)
            for (int path = 0; path < 2; path++) {
                ctx.use_sm90 = path == 1 && have_sm90 ? MM90_ALL : 0;
                const long long before = ctx.n_sm90;
                cudaCheck(cudaMemsetAsync(out[path], 0xFF, (size_t)BT * c->N * sizeof(floatX), s));  // poison
                timer_start(&timer, s);
                run(&ctx, c, out[path], pre, a, w, bias, res, BT, s);
                const float call_ms = timer_stop(&timer, s);
                if (path == 1) took += ctx.n_sm90 > before;
                if (r >= 0) ms[path][r] = call_ms;
            }
        const size_t n = (size_t)BT * c->N;
        cudaCheck(cudaMemcpy(h0, out[0], n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(h1, out[1], n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        size_t nan = 0;
        const double differ = rel_l2_bf16_host(h1, h0, n, &nan);
        const float m0 = median_of(ms[0], reps), m1 = median_of(ms[1], reps);
        const double flop = 2.0 * BT * (double)c->N * c->K;
        sum[0] += m0;
        sum[1] += m1;
        trainer += took && (MM90_DEFAULT >> c->kind & 1) ? m1 : m0;
        printf("| %s | %d x %d x %d | %.3f | %.0f | %s | %.3f | %.0f | %.2fx | %.1e | %zu |\n", c->what, BT, c->N, c->K,
               m0, flop / m0 / 1e9, took ? "ours" : "cuBLASLt", m1, flop / m1 / 1e9, m0 / m1, differ, nan);
    }
    printf("| all of them | | %.3f | | | %.3f | | %.2fx | | |\n", sum[0], sum[1], sum[0] / sum[1]);
    printf("| all of them, the trainer's choice (kinds %d) | | %.3f | | mixed | %.3f | | %.2fx | | |\n", MM90_DEFAULT,
           sum[0], trainer, sum[0] / trainer);
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(res));
    cudaCheck(cudaFree(w));
    cudaCheck(cudaFree(bias));
    cudaCheck(cudaFree(out[0]));
    cudaCheck(cudaFree(out[1]));
    cudaCheck(cudaFree(pre));
    free(h0);
    free(h1);
    free(ms[0]);
    free(ms[1]);
    timer_free(&timer);
    cudaCheck(cudaStreamDestroy(s));
    matmul_free(&ctx);
    return 0;
}
