/*
attention_bench.cu - the trainer's causal attention (llmc/attention.cuh) timed, llm.c dev/cuda
style: the forward and the backward on the Hopper kernels (llmc/attention_sm90.cuh, hs = 64 or
128) against the mma.sync ones, at GPT-2 124M's shape by default; -k sets the key/value heads
(GQA: -c 2048 -n 32 -k 8 is Llama 3.2 1B's attention, -c 896 -n 14 -k 2 Qwen2.5 0.5B's).

./attention_bench [-s shape] [-b B] [-t T] [-c C] [-n NH] [-k NKV] [-r repeats] [-g heads]

-s sets B, T, C, NH, NKV to a named model's attention (flags after it change single values):
  gpt2      B 64, T 1024, C  768, NH 12, NKV 12 (hs  64; the default)
  llama1b   B  8, T 2048, C 2048, NH 32, NKV  8 (hs  64; Llama 3.2 1B)
  qwen0.5b  B 32, T 1024, C  896, NH 14, NKV  2 (hs  64; Qwen2.5 0.5B)
  qwen1.5b  B 32, T 1024, C 1536, NH 12, NKV  2 (hs 128; Qwen2.5 1.5B)
  llama3b   B  8, T 2048, C 3072, NH 24, NKV  8 (hs 128; Llama 3.2 3B)
  llama8b   B  4, T 2048, C 4096, NH 32, NKV  8 (hs 128; Llama 3.1 8B)

-g sets the heads per group of the Hopper kernels' work tiles (att90_set_group; 0: all heads
in one group, the order before the groups) in place of the kernels' own choice, enough heads
that a group's tiles fill the grid.
Random bf16 q, k, v packed per token in one (B, T, (NH + 2 NKV) hs) buffer, as the trainer's
qkv (uniform, scores of std ~1); each version's median time over the repeats (CUDA events,
after a warm-up), its TFLOP/s counting the causal half of the products (forward 2 products,
backward 5, of 2 B NH T^2 hs / 2 flops each), and the Hopper forward's out and lse against the
mma.sync forward's (rel L2 and max |difference|): the two differ by bf16 rounding of P, not
more (rel L2 over the finite values, the non-finite ones counted). Reports, never asserts
(test/gpu_kernels_attention.cuh checks correctness).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../llmc/attention.cuh"
#include "../llmc/bf16.h"
#include "../llmc/rand.h"
#include "common.cuh"  // time_runs, median_of, rel_l2_bf16_host

// the -s shape sets
typedef struct {
    const char *name;
    int B, T, C, NH, NKV;
} att_shape;
static const att_shape att_shapes[] = {
    {"gpt2", 64, 1024, 768, 12, 12},      {"llama1b", 8, 2048, 2048, 32, 8}, {"qwen0.5b", 32, 1024, 896, 14, 2},
    {"qwen1.5b", 32, 1024, 1536, 12, 2}, {"llama3b", 8, 2048, 3072, 24, 8}, {"llama8b", 4, 2048, 4096, 32, 8},
};

// median ms of `repeats` runs of the forward (which = 0) or the backward (1) of q, k, v packed
// in qkv (a's layout; the gradients in dqkv likewise)
static float time_it(int which, int repeats, floatX *out, void *saved, void *scratch, floatX *dqkv, const floatX *qkv,
                     const floatX *dout, const AttentionShape *a, cudaStream_t s) {
    const size_t k_off = (size_t)a->NH * a->hs, v_off = k_off + (size_t)a->NKV * a->hs;  // in a token's row
    float *ms = (float *)malloc((size_t)repeats * sizeof(float));
    time_runs(ms, 1, repeats, s, [&] {
        if (which == 0) attention_forward(out, saved, scratch, qkv, qkv + k_off, qkv + v_off, a, s);
        else attention_backward(dqkv, dqkv + k_off, dqkv + v_off, scratch, dout, qkv, qkv + k_off, qkv + v_off, out,
                                saved, a, s);
    });
    const float m = median_of(ms, repeats);
    free(ms);
    return m;
}

int main(int argc, char **argv) {
    int B = 64, T = 1024, C = 768, NH = 12, NKV = 0, repeats = 20, group = -1;  // NKV 0: NH; group -1: the kernels' own
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-s") == 0) {
            const int n_shapes = (int)(sizeof(att_shapes) / sizeof(att_shapes[0]));
            int found = 0;
            for (int j = 0; j < n_shapes; j++)
                if (strcmp(argv[i + 1], att_shapes[j].name) == 0) {
                    const att_shape *sh = &att_shapes[j];
                    B = sh->B, T = sh->T, C = sh->C, NH = sh->NH, NKV = sh->NKV;
                    found = 1;
                }
            if (!found) {
                fprintf(stderr, "attention_bench: -s takes one of");
                for (int j = 0; j < n_shapes; j++) fprintf(stderr, " %s", att_shapes[j].name);
                fprintf(stderr, "\n");
                return 1;
            }
        } else if (strcmp(argv[i], "-b") == 0) B = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-t") == 0) T = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-c") == 0) C = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-n") == 0) NH = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-k") == 0) NKV = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-r") == 0) repeats = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-g") == 0) group = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [-s shape] [-b B] [-t T] [-c C] [-n NH] [-k NKV] [-r repeats] [-g heads]\n",
                    argv[0]);
            return 1;
        }
    }
    if (NKV == 0) NKV = NH;
    if (B < 1 || T < 1 || NH < 1 || NKV < 1 || NH % NKV != 0 || C < NH || C % NH != 0 || repeats < 1 || group < -1) {
        fprintf(stderr, "attention_bench: need B, T, NH, NKV, repeats >= 1, NKV dividing NH, C a multiple of NH and "
                "-g >= 0\n");
        return 1;
    }
    att90_set_group(group);
    const int hs = C / NH, ckv = NKV * hs;  // ckv: the columns of k (and of v)
    const AttentionShape att = attention_shape_packed(B, T, NH, NKV, hs);
    const size_t n_qkv = (size_t)B * T * att.ldq, n_out = (size_t)B * T * C;
    uint16_t *h = (uint16_t *)malloc(n_qkv * 2);
    mt19937_state rng;
    manual_seed(&rng, 1337);
    for (size_t i = 0; i < n_qkv; i++) {
        // uniform in [-amp, amp] with amp = sqrt(3) hs^-1/4: q.k / sqrt(hs) of std ~1
        const float amp = sqrtf(3.0f) / sqrtf(sqrtf((float)hs));
        h[i] = bf16_from_float((2.0f * randfloat32(&rng) - 1.0f) * amp);
    }
    floatX *qkv, *out, *out_ref, *dqkv, *dout;
    void *saved, *saved_ref, *scratch;
    const size_t saved_bytes = attention_saved_bytes(&att);
    cudaCheck(cudaMalloc(&qkv, n_qkv * 2));
    cudaCheck(cudaMalloc(&dqkv, n_qkv * 2));
    cudaCheck(cudaMalloc(&out, n_out * 2));
    cudaCheck(cudaMalloc(&out_ref, n_out * 2));
    cudaCheck(cudaMalloc(&dout, n_out * 2));
    cudaCheck(cudaMalloc(&saved, saved_bytes));
    cudaCheck(cudaMalloc(&saved_ref, saved_bytes));
    cudaCheck(cudaMalloc(&scratch, attention_scratch_bytes(&att)));
    cudaCheck(cudaMemcpy(qkv, h, n_qkv * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dout, h, n_out * 2, cudaMemcpyHostToDevice));  // any values of the right scale
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));

    const double flop = 2.0 * B * NH * (double)T * T * hs / 2.0;  // one causal T x T x hs product
    printf("attention B=%d T=%d C=%d NH=%d NKV=%d (hs %d), median of %d", B, T, C, NH, NKV, hs, repeats);
    if (group >= 0) printf(", Hopper work tiles in groups of %d heads (-g; 0: all)", group);
    printf("\n");
    printf("| version | ms | TFLOP/s |\n|---|---|---|\n");
    attention_set_sm90(0);
    const float f_ref = time_it(0, repeats, out_ref, saved_ref, scratch, dqkv, qkv, dout, &att, s);
    printf("| forward, mma.sync | %.3f | %.0f |\n", f_ref, 2 * flop / f_ref / 1e9);
    const float bwd = time_it(1, repeats, out_ref, saved_ref, scratch, dqkv, qkv, dout, &att, s);
    printf("| backward (mma.sync, 3 kernels) | %.3f | %.0f |\n", bwd, 5 * flop / bwd / 1e9);
    attention_set_sm90(1);
    const int sm90 = attention_sm90_usable(hs);
    double out_l2 = 0.0, dl = 0.0, part_l2[3] = {0.0, 0.0, 0.0};  // the comparisons, printed after the table
    size_t bad = 0, gbad = 0;
    if (sm90) {
        cudaCheck(cudaMemset(out, 0xFF, n_out * 2));
        const float f90 = time_it(0, repeats, out, saved, scratch, dqkv, qkv, dout, &att, s);
        printf("| forward, Hopper (wgmma) | %.3f | %.0f |\n", f90, 2 * flop / f90 / 1e9);
        uint16_t *a = (uint16_t *)malloc(n_out * 2), *b = (uint16_t *)malloc(n_out * 2);
        cudaCheck(cudaMemcpy(a, out, n_out * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(b, out_ref, n_out * 2, cudaMemcpyDeviceToHost));
        out_l2 = rel_l2_bf16_host(a, b, n_out, &bad);
        const size_t n_rows = (size_t)B * NH * T;
        float *la = (float *)malloc(n_rows * 4), *lb = (float *)malloc(n_rows * 4);
        cudaCheck(cudaMemcpy(la, saved, n_rows * 4, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(lb, saved_ref, n_rows * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n_rows; i++) dl = fmax(dl, isfinite(la[i]) ? fabs((double)la[i] - lb[i]) : INFINITY);
        free(a); free(b); free(la); free(lb);
    }
    if (sm90) {
        // the backward from the same forward state (the mma.sync forward's), both ways
        floatX *dqkv_ref;
        cudaCheck(cudaMalloc(&dqkv_ref, n_qkv * 2));
        attention_set_sm90(0);
        attention_backward(dqkv_ref, dqkv_ref + C, dqkv_ref + C + ckv, scratch, dout, qkv, qkv + C, qkv + C + ckv,
                           out_ref, saved_ref, &att, s);
        attention_set_sm90(1);
        cudaCheck(cudaMemset(dqkv, 0xFF, n_qkv * 2));
        const float b90 = time_it(1, repeats, out_ref, saved_ref, scratch, dqkv, qkv, dout, &att, s);
        printf("| backward, Hopper (wgmma, 3 kernels) | %.3f | %.0f |\n", b90, 5 * flop / b90 / 1e9);
        uint16_t *ga = (uint16_t *)malloc(n_qkv * 2), *gb = (uint16_t *)malloc(n_qkv * 2);
        cudaCheck(cudaMemcpy(ga, dqkv, n_qkv * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(gb, dqkv_ref, n_qkv * 2, cudaMemcpyDeviceToHost));
        // dq, dk, dv: the three parts of each token's row (C, ckv, ckv wide), gathered part by part
        const size_t n_part = (size_t)B * T * C;
        uint16_t *pa = (uint16_t *)malloc(n_part * 2), *pb = (uint16_t *)malloc(n_part * 2);
        for (int part = 0; part < 3; part++) {
            const size_t w = part == 0 ? (size_t)C : (size_t)ckv, off = part == 0 ? 0 : (size_t)C + (part - 1) * ckv;
            for (size_t r = 0; r < (size_t)B * T; r++) {
                memcpy(pa + r * w, ga + r * att.ldq + off, w * 2);
                memcpy(pb + r * w, gb + r * att.ldq + off, w * 2);
            }
            part_l2[part] = rel_l2_bf16_host(pa, pb, (size_t)B * T * w, &gbad);
        }
        free(pa);
        free(pb);
        free(ga); free(gb);
        cudaCheck(cudaFree(dqkv_ref));
    }
    if (sm90) {
        printf("\nHopper forward vs mma.sync: out rel L2 %.2e, %zu non-finite; lse max |diff| %.2e\n", out_l2, bad,
               dl);
        printf("Hopper backward vs mma.sync: dq %.2e, dk %.2e, dv %.2e rel L2, %zu non-finite\n", part_l2[0],
               part_l2[1], part_l2[2], gbad);
    } else {
        printf("\n(no Hopper kernels: need an sm_90a build on a 9.0 GPU and hs = 64 or 128)\n");
    }
    cudaCheck(cudaFree(qkv)); cudaCheck(cudaFree(dqkv)); cudaCheck(cudaFree(out)); cudaCheck(cudaFree(out_ref));
    cudaCheck(cudaFree(dout)); cudaCheck(cudaFree(saved)); cudaCheck(cudaFree(saved_ref)); cudaCheck(cudaFree(scratch));
    cudaCheck(cudaStreamDestroy(s));
    free(h);
    return 0;
}
