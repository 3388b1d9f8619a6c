/*
flce.cu - fused linear cross-entropy: argument checks, the chunk planner, and the per-chunk
schedule (see flce.h for the math and the API).

The schedule (token chunks, the whole vocabulary per chunk):
    prepare        targets checked, non-ignored tokens counted, exact target logits
    for each chunk of C tokens:
        GEMM       logits[C, V] = h[chunk] @ W^T            (bf16 or fp32 buffer, row stride ldl)
        row kernel LSE, loss; dlogits written in place     (pad columns V..ldl zeroed)
        GEMM       d_h[chunk]  (+)= dlogits @ W             (k = Vp)
        GEMM       d_W         (+)= dlogits^T @ h[chunk]    (fp32 accumulation across chunks)
        GEMM       d_b         (+)= dlogits^T @ ones        (if a bias)
    finalize       loss scalar, bf16 outputs from fp32 accumulators, error record
The chunk buffer's row stride ldl is Vp rounded up to 64 elements: an odd stride (V=176245)
makes every cuBLAS GEMM on it several times slower.
*/
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flce.h"
#include "flce_gemm.cuh"
#include "flce_kernels.cuh"

#define FLCE_DEFAULT_BUDGET ((size_t)1 << 30)
#define FLCE_LT_WORKSPACE ((size_t)32 << 20)  // cuBLASLt's recommendation for Hopper
#define FLCE_ALIGN 256
#define FLCE_LDL_MULTIPLE 64
#define FLCE_CHUNK_MULTIPLE 128
#define FLCE_VOCAB_ALIGN 64  // GEMMs over the vocabulary are cut at a multiple of this

// FLCE_TIMING=1: every phase of every call is timed with events (the host waits for each
// phase, so calls lose their asynchrony) and flce_destroy prints the totals; for dev/ work.
enum { FLCE_T_PREPARE, FLCE_T_LOGITS, FLCE_T_ROWS, FLCE_T_DHIDDEN, FLCE_T_DWEIGHT, FLCE_T_DBIAS,
       FLCE_T_FINALIZE, FLCE_T_COUNT };
static const char *flce_phase_names[FLCE_T_COUNT] = {"prepare", "logits GEMM", "row kernel",
                                                     "d_hidden GEMM", "d_weight GEMM",
                                                     "d_bias GEMM", "finalize"};

struct flce_context {
    flce_gemm_cache gemm;
    int timing;
    cudaEvent_t t_start, t_stop;
    double t_ms[FLCE_T_COUNT];
    long long t_calls;
    flce_host_status *host_status;        // mapped pinned memory: written by the device
    flce_host_status *host_status_device; // the device's pointer to it
    char message[512];
};

// ----------------------------------------------------------------------------------------
// messages and status

const char *flce_status_string(flce_status status) {
    switch (status) {
    case FLCE_OK: return "ok";
    case FLCE_ERR_NULL_POINTER: return "a required pointer is NULL";
    case FLCE_ERR_INVALID_SIZE: return "invalid size";
    case FLCE_ERR_INVALID_VALUE: return "invalid option value";
    case FLCE_ERR_MISALIGNED: return "misaligned pointer or size";
    case FLCE_ERR_WORKSPACE: return "workspace too small";
    case FLCE_ERR_TARGET: return "target id out of range";
    case FLCE_ERR_CUDA: return "CUDA error";
    case FLCE_ERR_CUBLAS: return "cuBLASLt error";
    }
    return "unknown flce status";
}

static flce_status flce_fail(char *msg, size_t len, flce_status st, const char *fmt, ...) {
    if (msg != NULL && len > 0) {
        int n = snprintf(msg, len, "flce: %s: ", flce_status_string(st));
        va_list ap;
        va_start(ap, fmt);
        if (n >= 0 && (size_t)n < len) vsnprintf(msg + n, len - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return st;
}

const char *flce_last_error(const flce_context *ctx) { return ctx != NULL ? ctx->message : ""; }

// ----------------------------------------------------------------------------------------
// configuration

void flce_config_init(flce_config *cfg, int64_t n_tokens, int64_t hidden, int64_t vocab) {
    memset(cfg, 0, sizeof(*cfg));
    cfg->n_tokens = n_tokens;
    cfg->hidden = hidden;
    cfg->vocab = vocab;
    cfg->vocab_padded = vocab;
    cfg->dtype = FLCE_BF16;
    cfg->target_type = FLCE_INT32;
    cfg->ignore_index = -100;
    cfg->reduction = FLCE_REDUCTION_MEAN;
    cfg->grad_scale = 1.0f;
    cfg->d_hidden_dtype = FLCE_BF16;
    cfg->d_weight_dtype = FLCE_FP32;  // fp32 accumulation of d_W needs no extra buffer
    cfg->d_bias_dtype = FLCE_FP32;
}

static size_t flce_dtype_size(flce_dtype t) { return t == FLCE_FP32 ? 4 : 2; }

static int flce_is_dtype(flce_dtype t) { return t == FLCE_BF16 || t == FLCE_FP32; }

static int flce_is_flag(int x) { return x == 0 || x == 1; }

flce_status flce_config_check(const flce_config *cfg, char *msg, size_t msg_len) {
    if (cfg == NULL) return flce_fail(msg, msg_len, FLCE_ERR_NULL_POINTER, "config is NULL");
    if (cfg->n_tokens <= 0)
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_SIZE, "n_tokens = %lld must be > 0",
                         (long long)cfg->n_tokens);
    if (cfg->n_tokens > INT32_MAX)
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_SIZE,
                         "n_tokens = %lld exceeds the limit %d", (long long)cfg->n_tokens,
                         INT32_MAX);
    if (cfg->hidden <= 0)
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_SIZE, "hidden = %lld must be > 0",
                         (long long)cfg->hidden);
    if (cfg->vocab <= 0)
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_SIZE, "vocab = %lld must be > 0",
                         (long long)cfg->vocab);
    if (cfg->vocab_padded < cfg->vocab)
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_SIZE,
                         "vocab_padded = %lld is smaller than vocab = %lld",
                         (long long)cfg->vocab_padded, (long long)cfg->vocab);
    if (cfg->vocab_padded > INT32_MAX - 64 || cfg->hidden > INT32_MAX)
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_SIZE,
                         "vocab_padded = %lld or hidden = %lld exceeds the limit %d",
                         (long long)cfg->vocab_padded, (long long)cfg->hidden, INT32_MAX);
    if (!flce_is_dtype(cfg->dtype) || !flce_is_dtype(cfg->d_hidden_dtype) ||
        !flce_is_dtype(cfg->d_weight_dtype) || !flce_is_dtype(cfg->d_bias_dtype))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE,
                         "a dtype field is not FLCE_BF16 or FLCE_FP32");
    if (cfg->target_type != FLCE_INT32 && cfg->target_type != FLCE_INT64)
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE,
                         "target_type = %d is not FLCE_INT32 or FLCE_INT64", (int)cfg->target_type);
    if (cfg->reduction != FLCE_REDUCTION_MEAN && cfg->reduction != FLCE_REDUCTION_SUM &&
        cfg->reduction != FLCE_REDUCTION_NONE)
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE, "reduction = %d is not valid",
                         (int)cfg->reduction);
    // 16-byte vector loads of every row of h and W
    int64_t vec = cfg->dtype == FLCE_FP32 ? 4 : 8;
    if (cfg->hidden % vec != 0)
        return flce_fail(msg, msg_len, FLCE_ERR_MISALIGNED,
                         "hidden = %lld must be a multiple of %lld for this dtype",
                         (long long)cfg->hidden, (long long)vec);
    if (!(cfg->label_smoothing >= 0.0f && cfg->label_smoothing < 1.0f))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE,
                         "label_smoothing = %g must be in [0, 1)", (double)cfg->label_smoothing);
    if (!(cfg->z_loss_scale >= 0.0f && isfinite(cfg->z_loss_scale)))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE,
                         "z_loss_scale = %g must be finite and >= 0", (double)cfg->z_loss_scale);
    if (!(cfg->softcap >= 0.0f && isfinite(cfg->softcap)))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE,
                         "softcap = %g must be finite and >= 0 (0 = off)", (double)cfg->softcap);
    if (!isfinite(cfg->grad_scale))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE, "grad_scale = %g must be finite",
                         (double)cfg->grad_scale);
    if (!flce_is_flag(cfg->has_bias) || !flce_is_flag(cfg->accumulate_d_hidden) ||
        !flce_is_flag(cfg->accumulate_d_weight) || !flce_is_flag(cfg->accumulate_d_bias))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE,
                         "has_bias and the accumulate_* fields must be 0 or 1");
    if (cfg->dtype == FLCE_FP32 && (cfg->d_hidden_dtype != FLCE_FP32 ||
                                    cfg->d_weight_dtype != FLCE_FP32 || cfg->d_bias_dtype != FLCE_FP32))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE,
                         "with dtype FLCE_FP32 the gradient dtypes (d_hidden_dtype, d_weight_dtype, "
                         "d_bias_dtype) must be FLCE_FP32 too");
    if (!flce_is_flag(cfg->bf16_logits))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE, "bf16_logits = %d must be 0 or 1",
                         cfg->bf16_logits);
    if (cfg->max_chunk_tokens < 0)
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE, "max_chunk_tokens = %lld must be >= 0",
                         (long long)cfg->max_chunk_tokens);
    return FLCE_OK;
}

// ----------------------------------------------------------------------------------------
// the chunk planner: the workspace layout for a config and a byte budget

typedef struct {
    int64_t chunk;       // tokens per chunk (0: does not fit)
    int64_t n_chunks;
    int64_t ldl;         // row stride of the chunk buffer, in logits (of logits_size bytes)
    size_t logits_size;  // 4: fp32 logits; 2: bf16 logits (bf16_logits = 1)
    int64_t ldd;         // row stride of dlogits, written in place, in elements of dtype
    int dw_accumulator;  // an fp32 (Vp, H) buffer accumulates a bf16 d_weight
    int dh_accumulator;  // an fp32 (chunk, H) buffer sums a bf16 d_hidden cut along Vp
    int64_t vocab_cut;   // Vp rounded down to FLCE_VOCAB_ALIGN (0 or Vp: no cut)
    size_t off_lt, off_scalars, off_token_loss, off_token_lse, off_target_logit, off_db32,
        off_dw32, off_ones, off_dh32, off_logits, total;
} flce_plan;

static size_t flce_align_up(size_t x) { return (x + FLCE_ALIGN - 1) / FLCE_ALIGN * FLCE_ALIGN; }

// Lays out the workspace for chunks of `chunk` tokens; returns the total bytes.
static size_t flce_layout(const flce_config *cfg, int64_t chunk, int dw_accumulator,
                          flce_plan *p) {
    size_t es = flce_dtype_size(cfg->dtype), n = (size_t)cfg->n_tokens;
    size_t o = 0;
    p->chunk = chunk;
    p->ldl = (cfg->vocab_padded + FLCE_LDL_MULTIPLE - 1) / FLCE_LDL_MULTIPLE * FLCE_LDL_MULTIPLE;
    p->logits_size = (cfg->dtype == FLCE_BF16 && cfg->bf16_logits) ? 2 : 4;
    p->ldd = p->ldl * (int64_t)(p->logits_size / es);
    p->vocab_cut = cfg->vocab_padded / FLCE_VOCAB_ALIGN * FLCE_VOCAB_ALIGN;
    p->dh_accumulator = p->vocab_cut > 0 && p->vocab_cut < cfg->vocab_padded &&
                        cfg->d_hidden_dtype == FLCE_BF16;
    p->dw_accumulator = dw_accumulator;
    p->off_lt = o;            o = flce_align_up(o + FLCE_LT_WORKSPACE);
    p->off_scalars = o;       o = flce_align_up(o + sizeof(flce_call_scalars));
    p->off_token_loss = o;    o = flce_align_up(o + n * sizeof(float));
    p->off_token_lse = o;     o = flce_align_up(o + n * sizeof(float));
    p->off_target_logit = o;  o = flce_align_up(o + n * sizeof(float));
    p->off_db32 = o;          o = flce_align_up(o + (cfg->has_bias ? (size_t)cfg->vocab_padded * 4 : 0));
    p->off_dw32 = o;
    o = flce_align_up(o + (dw_accumulator ? (size_t)cfg->vocab_padded * cfg->hidden * 4 : 0));
    p->off_ones = o;          o = flce_align_up(o + (cfg->has_bias ? (size_t)chunk * es : 0));
    p->off_dh32 = o;          o = flce_align_up(o + (p->dh_accumulator ? (size_t)chunk * cfg->hidden * 4 : 0));
    p->off_logits = o;        o = flce_align_up(o + (size_t)chunk * p->ldl * p->logits_size);
    p->total = o;
    p->n_chunks = chunk > 0 ? (cfg->n_tokens + chunk - 1) / chunk : 0;
    return o;
}

// Largest chunk (<= N, <= max_chunk_tokens) whose layout fits budget, with or without the
// d_weight accumulator; 0 if not even one token fits. The layout grows with the chunk, so a
// binary search finds it exactly.
static int64_t flce_fit_chunk(const flce_config *cfg, size_t budget, int dw_accumulator) {
    flce_plan p;
    int64_t lo = 0, hi = cfg->n_tokens;
    if (cfg->max_chunk_tokens > 0 && hi > cfg->max_chunk_tokens) hi = cfg->max_chunk_tokens;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (flce_layout(cfg, mid, dw_accumulator, &p) <= budget) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// needs_dw: this call produces d_weight (the accumulator is only for a bf16 one).
static void flce_make_plan(const flce_config *cfg, size_t budget, int needs_dw, flce_plan *p) {
    int64_t c = flce_fit_chunk(cfg, budget, 0);
    int dw_acc = 0;
    int bf16_dw = needs_dw && cfg->d_weight_dtype == FLCE_BF16;
    if (bf16_dw && (c < cfg->n_tokens || cfg->accumulate_d_weight)) {
        // several chunks (or adding into an existing bf16 d_W) need fp32 accumulation
        dw_acc = 1;
        c = flce_fit_chunk(cfg, budget, 1);
    }
    if (c > 0 && c < cfg->n_tokens) {
        // whole multiples of the GEMM tile, balanced so the last chunk is not a sliver
        if (c >= FLCE_CHUNK_MULTIPLE) c = c / FLCE_CHUNK_MULTIPLE * FLCE_CHUNK_MULTIPLE;
        int64_t n_chunks = (cfg->n_tokens + c - 1) / c;
        int64_t balanced = (cfg->n_tokens + n_chunks - 1) / n_chunks;
        if (c >= FLCE_CHUNK_MULTIPLE)
            balanced = (balanced + FLCE_CHUNK_MULTIPLE - 1) / FLCE_CHUNK_MULTIPLE * FLCE_CHUNK_MULTIPLE;
        if (balanced < c) c = balanced;
    }
    flce_layout(cfg, c, dw_acc, p);
}

flce_status flce_workspace_size(const flce_config *cfg, size_t budget_bytes, size_t *bytes) {
    flce_status st = flce_config_check(cfg, NULL, 0);
    if (st != FLCE_OK) return st;
    if (bytes == NULL) return FLCE_ERR_NULL_POINTER;
    if (budget_bytes == 0) budget_bytes = FLCE_DEFAULT_BUDGET;
    flce_plan p;
    flce_make_plan(cfg, budget_bytes, 1, &p);
    if (p.chunk == 0) {
        // the minimum: one token per chunk, with the accumulator a bf16 d_weight then needs
        int bf16_dw = cfg->d_weight_dtype == FLCE_BF16 && (cfg->n_tokens > 1 || cfg->accumulate_d_weight);
        *bytes = flce_layout(cfg, 1, bf16_dw, &p);
        return FLCE_ERR_WORKSPACE;
    }
    *bytes = p.total;
    return FLCE_OK;
}

int64_t flce_chunk_tokens(const flce_config *cfg, size_t workspace_bytes) {
    if (flce_config_check(cfg, NULL, 0) != FLCE_OK) return 0;
    flce_plan p;
    flce_make_plan(cfg, workspace_bytes, 1, &p);
    return p.chunk;
}

// ----------------------------------------------------------------------------------------
// context

flce_status flce_create(flce_context **out) {
    if (out == NULL) return FLCE_ERR_NULL_POINTER;
    *out = NULL;
    flce_context *ctx = (flce_context *)calloc(1, sizeof(flce_context));
    if (ctx == NULL) return FLCE_ERR_INVALID_SIZE;
    if (cublasLtCreate(&ctx->gemm.handle) != CUBLAS_STATUS_SUCCESS) {
        free(ctx);
        return FLCE_ERR_CUBLAS;
    }
    void *host = NULL;
    if (cudaHostAlloc(&host, sizeof(flce_host_status), cudaHostAllocMapped) != cudaSuccess) {
        cublasLtDestroy(ctx->gemm.handle);
        free(ctx);
        return FLCE_ERR_CUDA;
    }
    memset(host, 0, sizeof(flce_host_status));
    const char *timing = getenv("FLCE_TIMING");
    if (timing != NULL && strcmp(timing, "1") == 0 &&
        cudaEventCreate(&ctx->t_start) == cudaSuccess && cudaEventCreate(&ctx->t_stop) == cudaSuccess)
        ctx->timing = 1;
    ctx->host_status = (flce_host_status *)host;
    if (cudaHostGetDevicePointer((void **)&ctx->host_status_device, host, 0) != cudaSuccess) {
        cudaFreeHost(host);
        cublasLtDestroy(ctx->gemm.handle);
        free(ctx);
        return FLCE_ERR_CUDA;
    }
    *out = ctx;
    return FLCE_OK;
}

void flce_destroy(flce_context *ctx) {
    if (ctx == NULL) return;
    if (ctx->timing) {
        double total = 0.0;
        for (int k = 0; k < FLCE_T_COUNT; k++) total += ctx->t_ms[k];
        fprintf(stderr, "flce timing over %lld calls (ms per call):", ctx->t_calls);
        for (int k = 0; k < FLCE_T_COUNT; k++)
            if (ctx->t_ms[k] > 0.0)
                fprintf(stderr, " %s %.3f,", flce_phase_names[k], ctx->t_ms[k] / (double)ctx->t_calls);
        fprintf(stderr, " sum %.3f\n", total / (double)(ctx->t_calls ? ctx->t_calls : 1));
        cudaEventDestroy(ctx->t_start);
        cudaEventDestroy(ctx->t_stop);
    }
    flce_gemm_cache_release(&ctx->gemm);
    cublasLtDestroy(ctx->gemm.handle);
    cudaFreeHost((void *)ctx->host_status);
    free(ctx);
}

// An error of an earlier call recorded by the device: reported once, then cleared.
static flce_status flce_take_device_error(flce_context *ctx) {
    flce_host_status *hs = ctx->host_status;
    if (hs->code == 0) return FLCE_OK;
    flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_TARGET,
              "target[%lld] = %lld is neither ignore_index nor in [0, vocab) "
              "(detected on the device; that call's loss was set to NaN)",
              (long long)hs->position, (long long)hs->value);
    hs->code = 0;
    return FLCE_ERR_TARGET;
}

flce_status flce_check_errors(flce_context *ctx, void *cuda_stream) {
    if (ctx == NULL) return FLCE_ERR_NULL_POINTER;
    cudaError_t err = cudaStreamSynchronize((cudaStream_t)cuda_stream);
    if (err != cudaSuccess)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUDA,
                         "cudaStreamSynchronize: %s", cudaGetErrorString(err));
    return flce_take_device_error(ctx);
}

// ----------------------------------------------------------------------------------------
// the call

#define FLCE_CUDA_TRY(call)                                                                  \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                               \
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUDA, "%s: %s (%s:%d)", \
                             #call, cudaGetErrorString(e_), __FILE__, __LINE__);             \
    } while (0)

#define FLCE_LAUNCH_CHECK(name)                                                              \
    do {                                                                                     \
        cudaError_t e_ = cudaGetLastError();                                                 \
        if (e_ != cudaSuccess)                                                               \
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUDA,              \
                             "launch of %s: %s", name, cudaGetErrorString(e_));              \
    } while (0)

#define FLCE_GEMM_TRY(what, call)                                                            \
    do {                                                                                     \
        cublasStatus_t s_ = (call);                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                     \
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUBLAS,            \
                             "%s GEMM failed with cuBLAS status %d (chunk %lld)", what,       \
                             (int)s_, (long long)c0);                                        \
    } while (0)

static flce_status flce_check_ptr(flce_context *ctx, const void *p, const char *name,
                                  size_t align) {
    if (p == NULL)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_NULL_POINTER, "%s is NULL", name);
    if ((uintptr_t)p % align != 0)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_MISALIGNED,
                         "%s = %p is not %zu-byte aligned", name, p, align);
    return FLCE_OK;
}

#define FLCE_TRY(x)                        \
    do {                                   \
        flce_status s_ = (x);              \
        if (s_ != FLCE_OK) return s_;      \
    } while (0)

static flce_status flce_check_tensors(flce_context *ctx, const flce_config *cfg,
                                      const flce_tensors *t, int backward) {
    FLCE_TRY(flce_check_ptr(ctx, t->hidden, "hidden", 16));
    FLCE_TRY(flce_check_ptr(ctx, t->weight, "weight", 16));
    FLCE_TRY(flce_check_ptr(ctx, t->targets, "targets", cfg->target_type == FLCE_INT64 ? 8 : 4));
    if (cfg->has_bias) FLCE_TRY(flce_check_ptr(ctx, t->bias, "bias (has_bias = 1)", 4));
    if (cfg->reduction == FLCE_REDUCTION_NONE)
        FLCE_TRY(flce_check_ptr(ctx, t->token_loss, "token_loss (reduction none)", 4));
    else
        FLCE_TRY(flce_check_ptr(ctx, t->loss, "loss", 4));
    if (t->token_loss != NULL) FLCE_TRY(flce_check_ptr(ctx, t->token_loss, "token_loss", 4));
    if (t->token_lse != NULL) FLCE_TRY(flce_check_ptr(ctx, t->token_lse, "token_lse", 4));
    if (t->loss != NULL) FLCE_TRY(flce_check_ptr(ctx, t->loss, "loss", 4));
    if (!backward) return FLCE_OK;
    if (t->grad_token_loss != NULL) {
        if (cfg->reduction != FLCE_REDUCTION_NONE)
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_INVALID_VALUE,
                             "grad_token_loss is only used with reduction none");
        FLCE_TRY(flce_check_ptr(ctx, t->grad_token_loss, "grad_token_loss", 4));
    }
    if (t->d_hidden != NULL) FLCE_TRY(flce_check_ptr(ctx, t->d_hidden, "d_hidden", 16));
    if (t->d_weight != NULL) FLCE_TRY(flce_check_ptr(ctx, t->d_weight, "d_weight", 16));
    if (t->d_bias != NULL) {
        if (!cfg->has_bias)
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_INVALID_VALUE,
                             "d_bias is given but has_bias = 0");
        FLCE_TRY(flce_check_ptr(ctx, t->d_bias, "d_bias", 4));
    }
    return FLCE_OK;
}

// FLCE_TIMING: marks the start of a phase / adds its time (waits for the stream)
static void flce_phase_begin(flce_context *ctx, cudaStream_t stream) {
    if (ctx->timing) cudaEventRecord(ctx->t_start, stream);
}

static void flce_phase_end(flce_context *ctx, cudaStream_t stream, int phase) {
    if (!ctx->timing) return;
    float ms = 0.0f;
    cudaEventRecord(ctx->t_stop, stream);
    if (cudaEventSynchronize(ctx->t_stop) == cudaSuccess &&
        cudaEventElapsedTime(&ms, ctx->t_start, ctx->t_stop) == cudaSuccess)
        ctx->t_ms[phase] += ms;
}

static cudaDataType_t flce_cuda_type(flce_dtype t) { return t == FLCE_FP32 ? CUDA_R_32F : CUDA_R_16BF; }

// The row kernel for one chunk. SIMPLE (no bias, no softcap) compiles those two out of the
// per-logit work.
template <typename T, typename TL, typename Tgt, bool BACKWARD, bool SIMPLE>
static cudaError_t flce_launch_rows_as(cudaStream_t stream, TL *logits, int64_t ldl, int64_t rows,
                                       int64_t row0, int64_t V, const T *bias, const Tgt *targets,
                                       long long ignore_index, const float *target_logit,
                                       const float *grad_token_loss,
                                       const flce_call_scalars *scalars, flce_loss_params lp,
                                       float *token_loss, float *token_lse) {
    flce_ce_rows_kernel<T, TL, Tgt, BACKWARD, SIMPLE><<<(unsigned)rows, FLCE_CE_THREADS, 0, stream>>>(
        logits, ldl, row0, V, bias, targets, ignore_index, target_logit, grad_token_loss, scalars,
        lp, token_loss, token_lse);
    return cudaGetLastError();
}

template <typename T, typename TL, typename Tgt, bool BACKWARD>
static cudaError_t flce_launch_rows(cudaStream_t stream, TL *logits,
                                    int64_t ldl, int64_t rows, int64_t row0, int64_t V,
                                    const T *bias, const Tgt *targets, long long ignore_index,
                                    const float *target_logit, const float *grad_token_loss,
                                    const flce_call_scalars *scalars, flce_loss_params lp,
                                    float *token_loss, float *token_lse) {
    if (bias == NULL && lp.softcap == 0.0f)
        return flce_launch_rows_as<T, TL, Tgt, BACKWARD, true>(
            stream, logits, ldl, rows, row0, V, bias, targets, ignore_index, target_logit,
            grad_token_loss, scalars, lp, token_loss, token_lse);
    return flce_launch_rows_as<T, TL, Tgt, BACKWARD, false>(
        stream, logits, ldl, rows, row0, V, bias, targets, ignore_index, target_logit,
        grad_token_loss, scalars, lp, token_loss, token_lse);
}

template <typename T, typename TL, typename Tgt>
static flce_status flce_run(flce_context *ctx, const flce_config *cfg, const flce_tensors *t,
                            const flce_plan *p, char *ws, cudaStream_t stream, int backward) {
    const int64_t N = cfg->n_tokens, H = cfg->hidden, V = cfg->vocab, Vp = cfg->vocab_padded;
    const cudaDataType_t in_type = flce_cuda_type(cfg->dtype);
    const T *hidden = (const T *)t->hidden, *weight = (const T *)t->weight;
    const T *bias = cfg->has_bias ? (const T *)t->bias : NULL;
    const Tgt *targets = (const Tgt *)t->targets;
    void *lt_ws = ws + p->off_lt;
    flce_call_scalars *scalars = (flce_call_scalars *)(ws + p->off_scalars);
    float *token_loss = t->token_loss ? t->token_loss : (float *)(ws + p->off_token_loss);
    float *token_lse = t->token_lse ? t->token_lse : (float *)(ws + p->off_token_lse);
    float *target_logit = (float *)(ws + p->off_target_logit);
    float *db32 = (float *)(ws + p->off_db32);
    float *dw32 = (float *)(ws + p->off_dw32);
    float *dh32 = (float *)(ws + p->off_dh32);
    T *ones = (T *)(ws + p->off_ones);
    TL *logits = (TL *)(ws + p->off_logits);  // then dlogits (T, row stride ldd), in place
    T *dlogits = (T *)logits;
    const cudaDataType_t logits_type = sizeof(TL) == 4 ? CUDA_R_32F : CUDA_R_16BF;
    int64_t c0 = 0;  // named in GEMM error messages

    const int want_dh = backward && t->d_hidden != NULL;
    const int want_dw = backward && t->d_weight != NULL;
    const int want_db = backward && t->d_bias != NULL;
    // d_W goes to the fp32 accumulator when the plan has one, else straight to the output
    void *dw_target = p->dw_accumulator ? (void *)dw32 : t->d_weight;
    const cudaDataType_t dw_type = p->dw_accumulator ? CUDA_R_32F : flce_cuda_type(cfg->d_weight_dtype);
    const int dw_add_first = p->dw_accumulator ? 0 : cfg->accumulate_d_weight;
    const int db_via_acc = cfg->d_bias_dtype == FLCE_BF16;
    void *db_target = db_via_acc ? (void *)db32 : t->d_bias;
    const int db_add_first = db_via_acc ? 0 : cfg->accumulate_d_bias;

    flce_phase_begin(ctx, stream);
    FLCE_CUDA_TRY(cudaMemsetAsync(scalars, 0, sizeof(flce_call_scalars), stream));
    FLCE_CUDA_TRY(cudaMemsetAsync(&scalars->first_bad_token, 0xff, sizeof(unsigned long long), stream));
    {
        const int warps_per_block = 8;
        const unsigned grid = (unsigned)((N + warps_per_block - 1) / warps_per_block);
        flce_prepare_kernel<T, Tgt><<<grid, warps_per_block * 32, 0, stream>>>(
            hidden, weight, bias, targets, N, H, V, (long long)cfg->ignore_index, target_logit,
            scalars);
        FLCE_LAUNCH_CHECK("flce_prepare_kernel");
    }
    if (want_db) {
        flce_fill_ones_kernel<T><<<64, 256, 0, stream>>>(ones, p->chunk);
        FLCE_LAUNCH_CHECK("flce_fill_ones_kernel");
    }
    flce_phase_end(ctx, stream, FLCE_T_PREPARE);

    flce_loss_params lp;
    lp.label_smoothing = cfg->label_smoothing;
    lp.z_loss_scale = cfg->z_loss_scale;
    lp.softcap = cfg->softcap;
    lp.grad_scale = cfg->grad_scale;
    lp.reduction = (int)cfg->reduction;

    for (c0 = 0; c0 < N; c0 += p->chunk) {
        const int64_t rows = (N - c0 < p->chunk) ? N - c0 : p->chunk;
        const T *h_chunk = hidden + c0 * H;
        // logits (row-major rows x ldl) = h_chunk @ W^T, over all Vp rows of W: an aligned Vp
        // (llm.c's 50304 for 50257) keeps cuBLASLt on its fast kernels; columns >= V are
        // never read
        flce_phase_begin(ctx, stream);
        FLCE_GEMM_TRY("logits", flce_gemm_split(&ctx->gemm, stream, FLCE_SPLIT_M, p->vocab_cut, 1, 0,
                                                Vp, rows, H, weight, in_type, H, h_chunk, in_type,
                                                H, logits, logits_type, p->ldl, 1.0f, 0.0f, lt_ws,
                                                FLCE_LT_WORKSPACE));
        flce_phase_end(ctx, stream, FLCE_T_LOGITS);
        flce_phase_begin(ctx, stream);
        cudaError_t row_err =
            backward ? flce_launch_rows<T, TL, Tgt, true>(stream, logits, p->ldl, rows, c0, V, bias,
                                                          targets, (long long)cfg->ignore_index,
                                                          target_logit, t->grad_token_loss, scalars,
                                                          lp, token_loss, token_lse)
                     : flce_launch_rows<T, TL, Tgt, false>(stream, logits, p->ldl, rows, c0, V, bias,
                                                           targets, (long long)cfg->ignore_index,
                                                           target_logit, t->grad_token_loss, scalars,
                                                           lp, token_loss, token_lse);
        if (row_err != cudaSuccess)
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUDA,
                             "row kernel launch (chunk at token %lld): %s", (long long)c0,
                             cudaGetErrorString(row_err));
        flce_phase_end(ctx, stream, FLCE_T_ROWS);
        if (!backward) continue;
        const int first = c0 == 0;
        if (want_dh) {
            // d_h[chunk] (rows x H) = dlogits (rows x Vp) @ W (Vp x H); with Vp cut in two, a bf16
            // d_h is summed in fp32 first and rounded once
            void *dh = (char *)t->d_hidden + (size_t)c0 * H * flce_dtype_size(cfg->d_hidden_dtype);
            void *dh_sum = p->dh_accumulator ? (void *)dh32 : dh;
            flce_phase_begin(ctx, stream);
            const float beta = (!p->dh_accumulator && cfg->accumulate_d_hidden) ? 1.0f : 0.0f;
            FLCE_GEMM_TRY("d_hidden", flce_gemm_split(&ctx->gemm, stream, FLCE_SPLIT_K, p->vocab_cut, 0, 0,
                                                      H, rows, Vp, weight, in_type, H, dlogits, in_type,
                                                      p->ldd, dh_sum,
                                                      p->dh_accumulator ? CUDA_R_32F
                                                                        : flce_cuda_type(cfg->d_hidden_dtype),
                                                      H, 1.0f, beta, lt_ws, FLCE_LT_WORKSPACE));
            if (p->dh_accumulator) {
                flce_add_f32_kernel<<<256, 256, 0, stream>>>((__nv_bfloat16 *)dh, dh32, rows * H,
                                                             cfg->accumulate_d_hidden);
                FLCE_LAUNCH_CHECK("flce_add_f32_kernel (d_hidden)");
            }
            flce_phase_end(ctx, stream, FLCE_T_DHIDDEN);
        }
        if (want_dw) {
            // d_W (Vp x H) (+)= dlogits^T (Vp x rows) @ h_chunk (rows x H)
            const float beta = (!first || dw_add_first) ? 1.0f : 0.0f;
            flce_phase_begin(ctx, stream);
            FLCE_GEMM_TRY("d_weight", flce_gemm_split(&ctx->gemm, stream, FLCE_SPLIT_N, p->vocab_cut, 0, 1,
                                                      H, Vp, rows, h_chunk, in_type, H, dlogits,
                                                      in_type, p->ldd, dw_target, dw_type, H, 1.0f,
                                                      beta, lt_ws, FLCE_LT_WORKSPACE));
            flce_phase_end(ctx, stream, FLCE_T_DWEIGHT);
        }
        if (want_db) {
            // d_b (Vp) (+)= dlogits^T @ ones: the column sums of the chunk
            const float beta = (!first || db_add_first) ? 1.0f : 0.0f;
            flce_phase_begin(ctx, stream);
            FLCE_GEMM_TRY("d_bias", flce_gemm_split(&ctx->gemm, stream, FLCE_SPLIT_M, p->vocab_cut, 0, 0,
                                                    Vp, 1, rows, dlogits, in_type, p->ldd, ones,
                                                    in_type, rows, db_target, CUDA_R_32F, Vp, 1.0f,
                                                    beta, lt_ws, FLCE_LT_WORKSPACE));
            flce_phase_end(ctx, stream, FLCE_T_DBIAS);
        }
    }

    flce_phase_begin(ctx, stream);
    flce_finalize_kernel<Tgt><<<1, 1024, 0, stream>>>(token_loss, N, (int)cfg->reduction, scalars,
                                                       targets, t->loss, ctx->host_status_device);
    FLCE_LAUNCH_CHECK("flce_finalize_kernel");
    if (want_dw && p->dw_accumulator) {
        flce_add_f32_kernel<<<1024, 256, 0, stream>>>((__nv_bfloat16 *)t->d_weight, dw32, Vp * H,
                                                      cfg->accumulate_d_weight);
        FLCE_LAUNCH_CHECK("flce_add_f32_kernel (d_weight)");
    }
    if (want_db && db_via_acc) {
        flce_add_f32_kernel<<<64, 256, 0, stream>>>((__nv_bfloat16 *)t->d_bias, db32, Vp,
                                                    cfg->accumulate_d_bias);
        FLCE_LAUNCH_CHECK("flce_add_f32_kernel (d_bias)");
    }
    flce_phase_end(ctx, stream, FLCE_T_FINALIZE);
    if (ctx->timing) ctx->t_calls++;
    return FLCE_OK;
}

static flce_status flce_call(flce_context *ctx, const flce_config *cfg, const flce_tensors *t,
                             void *workspace, size_t workspace_bytes, void *cuda_stream,
                             int backward) {
    if (ctx == NULL) return FLCE_ERR_NULL_POINTER;
    ctx->message[0] = '\0';
    FLCE_TRY(flce_take_device_error(ctx));
    FLCE_TRY(flce_config_check(cfg, ctx->message, sizeof(ctx->message)));
    if (t == NULL)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_NULL_POINTER, "tensors is NULL");
    FLCE_TRY(flce_check_tensors(ctx, cfg, t, backward));
    FLCE_TRY(flce_check_ptr(ctx, workspace, "workspace", FLCE_ALIGN));
    flce_plan plan;
    flce_make_plan(cfg, workspace_bytes, backward && t->d_weight != NULL, &plan);
    if (plan.chunk == 0) {
        size_t need = 0;
        flce_workspace_size(cfg, workspace_bytes, &need);
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_WORKSPACE,
                         "workspace_bytes = %zu; this config needs at least %zu "
                         "(see flce_workspace_size)", workspace_bytes, need);
    }
    cudaStream_t stream = (cudaStream_t)cuda_stream;
    char *ws = (char *)workspace;
    typedef __nv_bfloat16 bf16;
    const int i64 = cfg->target_type == FLCE_INT64;
    if (cfg->dtype == FLCE_FP32)
        return i64 ? flce_run<float, float, int64_t>(ctx, cfg, t, &plan, ws, stream, backward)
                   : flce_run<float, float, int32_t>(ctx, cfg, t, &plan, ws, stream, backward);
    if (plan.logits_size == 2)
        return i64 ? flce_run<bf16, bf16, int64_t>(ctx, cfg, t, &plan, ws, stream, backward)
                   : flce_run<bf16, bf16, int32_t>(ctx, cfg, t, &plan, ws, stream, backward);
    return i64 ? flce_run<bf16, float, int64_t>(ctx, cfg, t, &plan, ws, stream, backward)
               : flce_run<bf16, float, int32_t>(ctx, cfg, t, &plan, ws, stream, backward);
}

flce_status flce_forward_backward(flce_context *ctx, const flce_config *cfg, const flce_tensors *t,
                                  void *workspace, size_t workspace_bytes, void *cuda_stream) {
    return flce_call(ctx, cfg, t, workspace, workspace_bytes, cuda_stream, 1);
}

flce_status flce_forward(flce_context *ctx, const flce_config *cfg, const flce_tensors *t,
                         void *workspace, size_t workspace_bytes, void *cuda_stream) {
    return flce_call(ctx, cfg, t, workspace, workspace_bytes, cuda_stream, 0);
}
