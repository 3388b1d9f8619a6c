/*
flce_vp_bench.cu - flce's vocabulary-parallel mode on P GPUs of one host against flce on one GPU
on the same inputs, llm.c dev/cuda style.

./flce_vp_bench [-p P] [-s NxHxV[,NxHxV...]] [-r repeats] [-w warmups]
  -p  ranks, one GPU each (default: every GPU, at most 8; 1 runs the mode on one rank)
  -s  shapes (default 16384x4096x151936,8192x768x50304)

Per shape, GPU 0 makes bf16 h (N, H) and W (V, H), uniform with std H^-1/4 (logits ~N(0, 1)),
and int32 targets uniform over V with ~5% ignored (-100), mean reduction:
  one GPU   flce_forward_backward on GPU 0 (1 GiB workspace budget, bf16 d_h, fp32 d_W): the
            reference for the errors, and the time the ranks are compared with;
  P GPUs    rank r on GPU r holds W's rows [v0, v0 + Vr) (Vr = ceil(V / P), copied from GPU 0),
            h and the targets; one thread per rank, an NCCL communicator (ncclCommInitAll) that
            flce calls through flce_set_comm (flce_nccl.h: its all-reduce enqueued on flce's stream); flce sums
            d_h over the ranks. Every repeat starts the ranks together (a barrier) and times each
            rank's call between CUDA events on its stream; a repeat's time is its slowest rank's.
Reported: median ms of each, the speed-up, the per-call time a rank spends on the statistics'
exchange is inside it (two all-reduces of a few floats per token per chunk); errors against one
GPU: loss abs, d_h rel L2 (rank 0's, summed), d_W rel L2 over all ranks' rows; per-GPU extra
memory (the workspace). It reports, never asserts: the exit code is 1 only for a failed call or
a non-finite result.
*/
#include <pthread.h>

#include "common.cuh"
#include "flce_nccl.h"  // flce/: flce_comm_nccl

#define VPB_MAX_RANKS 8

#define ncclCheck(x)                                                                                     \
    do {                                                                                                 \
        ncclResult_t r_ = (x);                                                                           \
        if (r_ != ncclSuccess) {                                                                         \
            fprintf(stderr, "[NCCL ERROR] at %s:%d: %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); \
            exit(EXIT_FAILURE);                                                                          \
        }                                                                                                \
    } while (0)

typedef struct {
    // in
    int rank, P, warmups, repeats;
    Shape s;
    int64_t v0, vr;              // this rank's rows of W
    const bf16 *h0, *W0;         // GPU 0's inputs
    const int *t0;
    ncclComm_t comm;
    pthread_barrier_t *barrier;
    int *ready;                  // (P) whether each rank's setup succeeded
    // out
    float *ms;                   // (repeats) this rank's time per call
    float loss;
    flce_status status;
    char message[256];
    size_t ws_bytes;
    bf16 *d_h;                   // on this rank's GPU (N, H)
    float *d_W;                  // (vr, H)
} Rank;

static void *rank_main(void *arg) {
    Rank *k = (Rank *)arg;
    const int64_t N = k->s.N, H = k->s.H;
    cudaCheck(cudaSetDevice(k->rank));
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    bf16 *h, *W;
    int *t;
    float *loss;
    void *ws = NULL;
    cudaCheck(cudaMalloc(&h, (size_t)N * H * sizeof(bf16)));
    cudaCheck(cudaMalloc(&W, (size_t)k->vr * H * sizeof(bf16)));
    cudaCheck(cudaMalloc(&t, (size_t)N * sizeof(int)));
    cudaCheck(cudaMalloc(&loss, sizeof(float)));
    cudaCheck(cudaMalloc(&k->d_h, (size_t)N * H * sizeof(bf16)));
    cudaCheck(cudaMalloc(&k->d_W, (size_t)k->vr * H * sizeof(float)));
    cudaCheck(cudaMemcpyPeer(h, k->rank, k->h0, 0, (size_t)N * H * sizeof(bf16)));
    cudaCheck(cudaMemcpyPeer(W, k->rank, k->W0 + k->v0 * H, 0, (size_t)k->vr * H * sizeof(bf16)));
    cudaCheck(cudaMemcpyPeer(t, k->rank, k->t0, 0, (size_t)N * sizeof(int)));
    flce_context *ctx = NULL;
    flceCheck(flce_create(&ctx), NULL);
    const flce_comm comm = flce_comm_nccl(k->comm);
    flce_set_comm(ctx, &comm);
    flce_config cfg;
    flce_config_init(&cfg, N, H, k->vr);
    cfg.vocab_parallel = 1;
    cfg.vocab_offset = k->v0;
    cfg.vocab_total = k->s.V;
    k->status = flce_workspace_size(&cfg, (size_t)1 << 30, &k->ws_bytes);
    if (k->status == FLCE_OK) cudaCheck(cudaMalloc(&ws, k->ws_bytes));
    flce_tensors tn;
    memset(&tn, 0, sizeof(tn));
    tn.hidden = h; tn.weight = W; tn.targets = t; tn.loss = loss; tn.d_hidden = k->d_h; tn.d_weight = k->d_W;
    EventTimer timer;
    timer_init(&timer);
    // the calls' all-reduces need every rank: none calls unless every setup succeeded
    k->ready[k->rank] = k->status == FLCE_OK;
    pthread_barrier_wait(k->barrier);
    int all_ready = 1;
    for (int r = 0; r < k->P; r++) all_ready &= k->ready[r];
    if (!all_ready && k->status == FLCE_OK) {
        k->status = FLCE_ERR_COMM;
        snprintf(k->message, sizeof(k->message), "another rank's setup failed");
    }
    for (int it = 0; it < k->warmups + k->repeats && all_ready; it++) {
        pthread_barrier_wait(k->barrier);
        if (k->status != FLCE_OK) break;  // (a failed call: its peers' next collective would wait)
        timer_start(&timer, stream);
        k->status = flce_forward_backward(ctx, &cfg, &tn, ws, k->ws_bytes, stream);
        const float ms = timer_stop(&timer, stream);
        if (k->status == FLCE_OK) k->status = flce_check_errors(ctx, stream);
        if (it >= k->warmups) k->ms[it - k->warmups] = ms;
    }
    if (k->status != FLCE_OK && k->message[0] == 0) snprintf(k->message, sizeof(k->message), "%s", flce_last_error(ctx));
    cudaCheck(cudaMemcpy(&k->loss, loss, sizeof(float), cudaMemcpyDeviceToHost));
    timer_free(&timer);
    flce_destroy(ctx);
    cudaCheck(cudaFree(h));
    cudaCheck(cudaFree(W));
    cudaCheck(cudaFree(t));
    cudaCheck(cudaFree(loss));
    cudaCheck(cudaFree(ws));
    cudaCheck(cudaStreamDestroy(stream));
    return NULL;
}

// rel L2 of out (n, bf16 or fp32, on GPU 0) against ref (fp32, GPU 0), accumulated into sums
template <typename T>
static void diff_into(const T *out, const float *ref, int64_t n, double *sums_d, unsigned long long *bad_d) {
    diff_kernel<T><<<1024, 256>>>(out, ref, n, sums_d, bad_d);
    cudaCheck(cudaGetLastError());
}

int main(int argc, char **argv) {
    int n_dev = 0;
    cudaCheck(cudaGetDeviceCount(&n_dev));
    int P = n_dev < VPB_MAX_RANKS ? n_dev : VPB_MAX_RANKS, warmups = 2, repeats = 7;
    Shape shapes[16] = {{16384, 4096, 151936}, {8192, 768, 50304}};
    int n_shapes = 2;
    for (int i = 1; i < argc; i++) {
        const int has_val = i + 1 < argc;
        if (strcmp(argv[i], "-p") == 0 && has_val) P = atoi(argv[++i]);
        else if (strcmp(argv[i], "-r") == 0 && has_val) repeats = atoi(argv[++i]);
        else if (strcmp(argv[i], "-w") == 0 && has_val) warmups = atoi(argv[++i]);
        else if (strcmp(argv[i], "-s") == 0 && has_val) {
            n_shapes = parse_shapes(argv[++i], shapes, 16);  // (dev/common.cuh: a message when it fails)
            if (n_shapes < 1) {
                fprintf(stderr, "flce_vp_bench: -s takes NxHxV[,NxHxV...] with H a multiple of 8, got %s\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: %s [-p ranks] [-s NxHxV[,...]] [-r repeats] [-w warmups]\n", argv[0]);
            return 2;
        }
    }
    if (P < 1 || P > VPB_MAX_RANKS || P > n_dev || repeats < 1 || warmups < 0) {
        fprintf(stderr, "flce_vp_bench: -p %d needs 1..%d ranks and as many GPUs (%d here); -r >= 1, -w >= 0\n", P,
                VPB_MAX_RANKS, n_dev);
        return 2;
    }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("flce_vp_bench: %d rank(s) on %s x%d; flce %d.%d; median of %d after %d warm-ups\n\n", P, prop.name, n_dev,
           flce_version() / 1000, flce_version() % 1000, repeats, warmups);
    printf("| N x H x V | one GPU ms | %d GPUs ms (slowest rank) | speed-up | loss abs err | d_h rel L2 | d_W rel L2 | workspace MiB per GPU |\n", P);
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    int devices[VPB_MAX_RANKS];
    for (int r = 0; r < P; r++) devices[r] = r;
    ncclComm_t comms[VPB_MAX_RANKS];
    ncclCheck(ncclCommInitAll(comms, P, devices));
    int failed = 0;
    for (int si = 0; si < n_shapes; si++) {
        const Shape s = shapes[si];
        const int64_t N = s.N, H = s.H, V = s.V;
        cudaCheck(cudaSetDevice(0));
        // inputs on GPU 0
        bf16 *h, *W, *d_h;
        int *t;
        float *d_W, *loss, *ref_dh, *tmp = NULL;
        double *sums;
        unsigned long long *bad;
        cudaCheck(cudaMalloc(&h, (size_t)N * H * sizeof(bf16)));
        cudaCheck(cudaMalloc(&W, (size_t)V * H * sizeof(bf16)));
        cudaCheck(cudaMalloc(&t, (size_t)N * sizeof(int)));
        cudaCheck(cudaMalloc(&d_h, (size_t)N * H * sizeof(bf16)));
        cudaCheck(cudaMalloc(&d_W, (size_t)V * H * sizeof(float)));
        cudaCheck(cudaMalloc(&loss, sizeof(float)));
        cudaCheck(cudaMalloc(&ref_dh, (size_t)N * H * sizeof(float)));
        cudaCheck(cudaMalloc(&sums, 4 * sizeof(double)));
        cudaCheck(cudaMalloc(&bad, 2 * sizeof(unsigned long long)));
        const uint64_t seeds[3] = {1000 + (uint64_t)si, 2000 + (uint64_t)si, 3000 + (uint64_t)si};
        fill_flce_inputs(h, W, t, N, H, V, seeds, 0);  // (dev/common.cuh: flce_bench's distribution)
        // one GPU
        flce_context *ctx = NULL;
        flceCheck(flce_create(&ctx), NULL);
        flce_config cfg;
        flce_config_init(&cfg, N, H, V);
        size_t ws_bytes = 0;
        void *ws = NULL;
        flceCheck(flce_workspace_size(&cfg, (size_t)1 << 30, &ws_bytes), NULL);
        cudaCheck(cudaMalloc(&ws, ws_bytes));
        flce_tensors tn;
        memset(&tn, 0, sizeof(tn));
        tn.hidden = h; tn.weight = W; tn.targets = t; tn.loss = loss; tn.d_hidden = d_h; tn.d_weight = d_W;
        float *one = (float *)malloc(repeats * sizeof(float));
        time_runs(one, warmups, repeats, 0, [&] { flceCheck(flce_forward_backward(ctx, &cfg, &tn, ws, ws_bytes, 0), ctx); });
        flceCheck(flce_check_errors(ctx, 0), ctx);
        float ref_loss = 0.0f;
        cudaCheck(cudaMemcpy(&ref_loss, loss, sizeof(float), cudaMemcpyDeviceToHost));
        bf16_to_f32_kernel<<<1024, 256>>>(ref_dh, d_h, N * H);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaFree(ws));
        flce_destroy(ctx);
        const float one_ms = median_of(one, repeats);
        // P ranks
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, NULL, (unsigned)P);
        Rank ranks[VPB_MAX_RANKS];
        pthread_t threads[VPB_MAX_RANKS];
        int ready[VPB_MAX_RANKS] = {0};
        const int64_t Vr = (V + P - 1) / P;
        for (int r = 0; r < P; r++) {
            Rank *k = &ranks[r];
            memset(k, 0, sizeof(*k));
            k->rank = r; k->P = P; k->warmups = warmups; k->repeats = repeats; k->s = s;
            k->v0 = r * Vr;
            k->vr = V - k->v0 < Vr ? V - k->v0 : Vr;
            k->h0 = h; k->W0 = W; k->t0 = t;
            k->comm = comms[r];
            k->barrier = &barrier;
            k->ready = ready;
            k->ms = (float *)calloc((size_t)repeats, sizeof(float));
            k->status = k->vr > 0 ? FLCE_OK : FLCE_ERR_INVALID_SIZE;
        }
        for (int r = 0; r < P; r++) pthread_create(&threads[r], NULL, rank_main, &ranks[r]);
        for (int r = 0; r < P; r++) pthread_join(threads[r], NULL);
        pthread_barrier_destroy(&barrier);
        cudaCheck(cudaSetDevice(0));
        int ok = 1;
        for (int r = 0; r < P; r++)
            if (ranks[r].status != FLCE_OK) {
                fprintf(stderr, "rank %d: %s: %s\n", r, flce_status_string(ranks[r].status), ranks[r].message);
                ok = 0;
            }
        float *slowest = (float *)malloc(repeats * sizeof(float));
        for (int it = 0; it < repeats; it++) {
            slowest[it] = 0.0f;
            for (int r = 0; r < P; r++) slowest[it] = fmaxf(slowest[it], ranks[r].ms[it]);
        }
        const float vp_ms = ok ? median_of(slowest, repeats) : NAN;
        // errors against one GPU, on GPU 0: rank 0's d_h; every rank's d_W rows
        double hs[2] = {0, 0}, ws_[2] = {0, 0};
        unsigned long long nb[2] = {0, 0};
        if (ok) {
            cudaCheck(cudaMemset(sums, 0, 4 * sizeof(double)));
            cudaCheck(cudaMemset(bad, 0, 2 * sizeof(unsigned long long)));
            diff_into<bf16>(ranks[0].d_h, ref_dh, N * H, sums, bad);
            cudaCheck(cudaMalloc(&tmp, (size_t)Vr * H * sizeof(float)));
            for (int r = 0; r < P; r++) {
                cudaCheck(cudaMemcpyPeer(tmp, 0, ranks[r].d_W, r, (size_t)ranks[r].vr * H * sizeof(float)));
                diff_into<float>(tmp, d_W + ranks[r].v0 * H, ranks[r].vr * H, sums + 2, bad + 1);
            }
            cudaCheck(cudaMemcpy(hs, sums, 2 * sizeof(double), cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(ws_, sums + 2, 2 * sizeof(double), cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(nb, bad, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        }
        const double e_loss = fabs((double)ranks[0].loss - (double)ref_loss);
        const double e_dh = hs[1] > 0 ? sqrt(hs[0] / hs[1]) : 0.0, e_dw = ws_[1] > 0 ? sqrt(ws_[0] / ws_[1]) : 0.0;
        if (!ok || nb[0] || nb[1] || !isfinite(ranks[0].loss)) failed = 1;
        printf("| %lldx%lldx%lld | %.2f | %.2f | %.2fx | %.1e | %.1e | %.1e | %.0f |%s\n", (long long)N, (long long)H,
               (long long)V, one_ms, vp_ms, one_ms / vp_ms, e_loss, e_dh, e_dw, ranks[0].ws_bytes / 1048576.0,
               nb[0] || nb[1] ? " non-finite gradients" : "");
        fflush(stdout);
        for (int r = 0; r < P; r++) {
            cudaCheck(cudaSetDevice(r));
            cudaCheck(cudaFree(ranks[r].d_h));
            cudaCheck(cudaFree(ranks[r].d_W));
            free(ranks[r].ms);
        }
        cudaCheck(cudaSetDevice(0));
        free(slowest);
        free(one);
        cudaCheck(cudaFree(tmp));
        cudaCheck(cudaFree(h));
        cudaCheck(cudaFree(W));
        cudaCheck(cudaFree(t));
        cudaCheck(cudaFree(d_h));
        cudaCheck(cudaFree(d_W));
        cudaCheck(cudaFree(loss));
        cudaCheck(cudaFree(ref_dh));
        cudaCheck(cudaFree(sums));
        cudaCheck(cudaFree(bad));
    }
    for (int r = 0; r < P; r++) ncclCheck(ncclCommDestroy(comms[r]));
    return failed;
}
