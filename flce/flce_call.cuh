/*
flce_call.cuh - what the library's three CUDA files share (flce.cu: the API and one call's
dispatch; flce_lt.cu: the cuBLASLt path; flce_sm90.cu: the Hopper path): the context, one
call's state as its phases see it, the error and timing macros, and the few steps both GEMM
paths take (vocab_parallel's exchange of the rows' statistics, a chunk's d_hidden written out).
Internal: C++ for nvcc, never included by programs that use the library.
*/
#ifndef FLCE_CALL_CUH
#define FLCE_CALL_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "flce_internal.h"
#include "flce_kernels.cuh"
#include "gemm_lt.cuh"  // common/

// The phases of a call, as flce_dev_set_timing times them.
enum { FLCE_T_PREPARE, FLCE_T_LOGITS, FLCE_T_ROWS, FLCE_T_DHIDDEN, FLCE_T_DWEIGHT, FLCE_T_DBIAS,
       FLCE_T_FINALIZE, FLCE_T_COUNT };

// What a call's plan is made from (flce.cu's flce_call_plan): compared byte for byte, so it is
// zeroed before it is filled (padding bytes of a caller's config that differ only cost a plan).
typedef struct {
    flce_config cfg;
    size_t workspace_bytes;
    int needs_dw, backward, sms, call;  // (call: FLCE_CALL_* flags)
    unsigned switches;  // flce_plan_switches()
} flce_plan_key;

struct flce_context {
    gemm_cache gemm;
    // the last call's plan and its key: a call like the one before it (a training loop's) is
    // not planned again
    flce_plan_key plan_key;
    flce_plan plan;
    int has_plan;
    int hopper;       // bf16 calls take the Hopper path (flce_set_hopper)
    // dev switches (flce_internal.h)
    int pingpong;     // the Hopper logits GEMM's schedule: 1 ping-pong, 0 cooperative, -1 by H
    int dw_scaled;    // 1: the scaled d_W transform where it applies; 0: never
    int dw_direct;    // 1: the scaled d_W by cuBLASLt's GEMM on E where the plan allows; 0: never
    int dh_direct;    // where the direct d_W runs, its d_h GEMM (FLCE_DH_SCALED, _E, _LT)
    // the second stream of the direct gradients side by side (flce_plan.side_sms), made the
    // first time: it waits for fork on the call's stream, which waits for join after
    cudaStream_t side_stream;
    cudaEvent_t side_fork, side_join;
    int timing;       // 1: every phase timed (t_start, t_stop made)
    cudaEvent_t t_start, t_stop;
    double t_ms[FLCE_T_COUNT];
    long long t_calls;
    flce_host_status *host_status;        // mapped pinned memory: written by the device
    flce_host_status *host_status_device; // the device's pointer to it
    flce_comm comm;                       // vocab_parallel's (flce_set_comm); allreduce NULL: none
    char message[512];
};

#define FLCE_CUDA_TRY(call)                                                                  \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                               \
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUDA, "%s: %s (%s:%d)", \
                             #call, cudaGetErrorString(e_), __FILE__, __LINE__);             \
    } while (0)

// a cuBLASLt GEMM of the chunk at c0 (flce_lt.cu, and the Hopper path's direct gradients)
#define FLCE_GEMM_TRY(what, call)                                                            \
    do {                                                                                     \
        cublasStatus_t s_ = (call);                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                     \
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUBLAS,            \
                             "%s GEMM failed with cuBLAS status %d (chunk %lld)", what,       \
                             (int)s_, (long long)c0);                                        \
    } while (0)

#define FLCE_LAUNCH_CHECK(name)                                                              \
    do {                                                                                     \
        cudaError_t e_ = cudaGetLastError();                                                 \
        if (e_ != cudaSuccess)                                                               \
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUDA,              \
                             "launch of %s: %s", name, cudaGetErrorString(e_));              \
    } while (0)

#define FLCE_TRY(x)                        \
    do {                                   \
        flce_status s_ = (x);              \
        if (s_ != FLCE_OK) return s_;      \
    } while (0)

// vocab_parallel: buf[0 .. n) (device, fp32) combined over the ranks by the caller's
// communicator, ordered on the call's stream
static inline flce_status flce_allreduce(flce_context *ctx, float *buf, size_t n, flce_comm_op op,
                                         cudaStream_t stream, const char *what) {
    if (ctx->comm.allreduce(ctx->comm.user, buf, n, FLCE_COMM_FP32, op, (void *)stream) != 0)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_COMM,
                         "the communicator's allreduce (%s) of %s, %zu floats, failed",
                         op == FLCE_COMM_MAX ? "max" : "sum", what, n);
    return FLCE_OK;
}

// flce_dev_set_timing: marks the start of a phase / adds its time (waits for the stream)
static inline void flce_phase_begin(flce_context *ctx, cudaStream_t stream) {
    if (ctx->timing) cudaEventRecord(ctx->t_start, stream);
}

static inline void flce_phase_end(flce_context *ctx, cudaStream_t stream, int phase) {
    if (!ctx->timing) return;
    float ms = 0.0f;
    cudaEventRecord(ctx->t_stop, stream);
    if (cudaEventSynchronize(ctx->t_stop) == cudaSuccess &&
        cudaEventElapsedTime(&ms, ctx->t_start, ctx->t_stop) == cudaSuccess)
        ctx->t_ms[phase] += ms;
}

// The statements after `phase`, timed as that phase of the call when the context times them
// (a statement that returns an error leaves the phase untimed).
#define FLCE_PHASE(ctx, stream, phase, ...)  \
    do {                                     \
        flce_phase_begin(ctx, stream);       \
        __VA_ARGS__;                         \
        flce_phase_end(ctx, stream, phase);  \
    } while (0)

// One call as its phases see it: the arguments, the plan, the workspace, and the row kernels'
// arguments (flce_logits_tile sets the tile of each launch). T: the input type; TL: the
// logits buffer's; Tgt: the targets'.
template <typename T, typename TL, typename Tgt> struct flce_call_state {
    flce_context *ctx;
    const flce_config *cfg;
    const flce_tensors *t;
    const flce_plan *p;
    char *ws;
    cudaStream_t stream;
    int backward;
    flce_rows_args<T, Tgt> ra;
};

// vocab_parallel: the statistics of the chunk's `rows` rows over this rank's columns, in the
// exchange buffer (flce_kernels.cuh, flce_vp_*), combined over the ranks: the maxima by one
// all-reduce (max), then each rank's sum of exp and entropy sum q rescaled to them and its sum
// of logits by another (sum; q is 0 unless the call wants the entropy, but always sent: the
// count is the same on every rank whatever the outputs). After it the buffer holds at
// rows .. 5 rows the statistics every rank shares.
template <typename T, typename TL, typename Tgt>
static flce_status flce_vp_exchange(flce_call_state<T, TL, Tgt> *s, int64_t c0, int64_t rows) {
    flce_context *ctx = s->ctx;
    float *vp = (float *)(s->ws + s->p->off_vp);
    const unsigned grid = (unsigned)((rows + 255) / 256);
    FLCE_PHASE(ctx, s->stream, FLCE_T_ROWS, {
        FLCE_TRY(flce_allreduce(ctx, vp + rows, (size_t)rows, FLCE_COMM_MAX, s->stream, "the rows' maxima"));
        flce_vp_rescale_kernel<<<grid, 256, 0, s->stream>>>(vp, rows);
        FLCE_LAUNCH_CHECK("flce_vp_rescale_kernel");
        FLCE_TRY(flce_allreduce(ctx, vp + 2 * rows, 3 * (size_t)rows, FLCE_COMM_SUM, s->stream,
                                "the rows' sums of exp, of logits and the entropy's"));
    });
    (void)c0;
    return FLCE_OK;
}

// The chunk's d_h, summed in fp32 over the vocabulary (dh32, rows x H), written out: first
// summed over the ranks under vocab_parallel (unless d_hidden_partial), then rounded to the
// output's type once and added to it or written over it.
template <typename T, typename TL, typename Tgt>
static flce_status flce_finish_dh(flce_call_state<T, TL, Tgt> *s, void *dh, float *dh32, int64_t rows) {
    flce_context *ctx = s->ctx;
    const flce_config *cfg = s->cfg;
    const int64_t n = rows * cfg->hidden;
    if (cfg->vocab_parallel && !cfg->d_hidden_partial)
        FLCE_TRY(flce_allreduce(ctx, dh32, (size_t)n, FLCE_COMM_SUM, s->stream, "the chunk's d_hidden"));
    if (cfg->d_hidden_dtype == FLCE_BF16)
        flce_add_f32_kernel<<<256, 256, 0, s->stream>>>((__nv_bfloat16 *)dh, dh32, n, cfg->accumulate_d_hidden);
    else
        flce_add_f32_kernel<<<256, 256, 0, s->stream>>>((float *)dh, dh32, n, cfg->accumulate_d_hidden);
    FLCE_LAUNCH_CHECK("flce_add_f32_kernel (d_hidden)");
    return FLCE_OK;
}

// ----------------------------------------------------------------------------------------
// the two GEMM paths, for every combination of types flce.cu dispatches (T: the inputs', TL:
// the logits buffer's, Tgt: the targets')

// The cuBLASLt path (flce_lt.cu): every chunk on the plan's schedule (the chunk schedule, or
// the tile schedule, which vocab_parallel always takes).
template <typename T, typename TL, typename Tgt> FLCE_HIDDEN flce_status flce_run_lt(flce_call_state<T, TL, Tgt> *s);

// The cuBLASLt path's gradient GEMMs of vocabulary columns v0 .. v0+w for the `rows` tokens at
// c0 (flce_lt.cu), which the Hopper path's lt_backward runs too (T = TL = bf16).
template <typename T, typename TL, typename Tgt>
FLCE_HIDDEN flce_status flce_tile_backward(flce_call_state<T, TL, Tgt> *s, int64_t c0, int64_t rows, int64_t v0,
                                           int64_t w, int with_db);

// The Hopper path (flce_sm90.cu): bf16 inputs, E in a bf16 buffer (T = TL = bf16).
template <typename T, typename TL, typename Tgt>
FLCE_HIDDEN flce_status flce_run_hopper(flce_call_state<T, TL, Tgt> *s);

#endif // FLCE_CALL_CUH
