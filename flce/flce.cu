/*
flce.cu - fused linear cross-entropy: argument checks, the planner, and the two schedules
(see flce.h for the math and the API).

    prepare        targets checked, non-ignored tokens counted, exact target logits
    for each chunk of C tokens:
      chunk schedule (one tile: the whole vocabulary; flce_run_chunks):
        GEMM       logits[C, Vp] = h[chunk] @ W^T           (bf16 or fp32 buffer, row stride ldl)
        row kernel LSE, loss; dlogits written in place     (pad columns V..Vp zeroed)
        GEMMs of flce_tile_backward:
                   d_h[chunk]  (+)= dlogits @ W             (k = Vp)
                   d_W         (+)= dlogits^T @ h[chunk]    (fp32 accumulation across chunks)
                   d_b         (+)= dlogits^T @ ones        (if a bias)
      tile schedule (vocabulary tiles of T columns; flce_run_tiles):
        for each tile: GEMM logits[C, T]; row kernel: the tile's statistics merged per row
        finish kernel: loss, LSE and gradient coefficients per row
        for each tile: GEMM logits[C, T] again; row kernel: dlogits in place; the GEMMs of
                   flce_tile_backward: d_h[chunk] += dlogits @ W[tile],
                   d_W[tile] (+)= dlogits^T @ h[chunk], d_b[tile]
    finalize       loss scalar, bf16 outputs from fp32 accumulators, error record
The buffer's row stride ldl is the tile (Vp) rounded up to 64 elements, and every GEMM over the
vocabulary is cut at a multiple of 64: an odd stride or extent (V = 176245) makes cuBLASLt
several times slower.
*/
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flce.h"
#include "flce_kernels.cuh"
#include "flce_sm90.cuh"
#include "gemm_lt.cuh"  // common/

#define FLCE_DEFAULT_BUDGET ((size_t)1 << 30)
#define FLCE_LT_WORKSPACE ((size_t)32 << 20)  // cuBLASLt's recommendation for Hopper
#define FLCE_ALIGN 256
#define FLCE_LDL_MULTIPLE 64
#define FLCE_CHUNK_MULTIPLE 128
#define FLCE_VOCAB_ALIGN 64  // GEMMs over the vocabulary are cut at a multiple of this

// FLCE_TIMING=1: every phase of every call is timed with events (the host waits for each
// phase, so calls lose their asynchrony) and flce_destroy prints the per-call means over the
// calls that did not autotune; for dev/ work.
enum { FLCE_T_PREPARE, FLCE_T_LOGITS, FLCE_T_ROWS, FLCE_T_DHIDDEN, FLCE_T_DWEIGHT, FLCE_T_DBIAS,
       FLCE_T_FINALIZE, FLCE_T_COUNT };
static const char *flce_phase_names[FLCE_T_COUNT] = {"prepare", "logits GEMM", "row kernel",
                                                     "d_hidden GEMM", "d_weight GEMM",
                                                     "d_bias GEMM", "finalize"};

struct flce_context {
    gemm_cache gemm;
    int hopper;       // bf16 calls take the Hopper path (flce_set_hopper)
    int timing;
    int pingpong;     // the logits GEMM's schedule: 1 ping-pong, 0 cooperative, -1 by H (FLCE_PINGPONG)
    cudaEvent_t t_start, t_stop;
    double t_ms[FLCE_T_COUNT];
    long long t_calls;
    flce_host_status *host_status;        // mapped pinned memory: written by the device
    flce_host_status *host_status_device; // the device's pointer to it
    flce_comm comm;                       // vocab_parallel's (flce_set_comm); allreduce NULL: none
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
    case FLCE_ERR_OUT_OF_MEMORY: return "out of host memory";
    case FLCE_ERR_COMM: return "communicator error";
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

// ABI check for bindings (flce.h)
int flce_version(void) { return FLCE_VERSION; }
size_t flce_config_size(void) { return sizeof(flce_config); }
size_t flce_tensors_size(void) { return sizeof(flce_tensors); }

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
    cfg->temperature = 1.0f;
}

static size_t flce_dtype_size(flce_dtype t) { return t == FLCE_FP32 ? 4 : 2; }

static int flce_is_dtype(flce_dtype t) { return t == FLCE_BF16 || t == FLCE_FP32; }

// x *= *scale unless *scale is 1: 16-byte vectors where x is aligned, then the tail. Every
// block reads the scale and leaves at once when there is nothing to do.
template <typename T>
__global__ void flce_scale_device_kernel(T *x, int64_t n, const float *scale) {
    const float g = *scale;
    if (g == 1.0f) return;
    constexpr int VEC = 16 / (int)sizeof(T);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t nvec = ((uintptr_t)x % 16 == 0) ? n / VEC : 0;
    for (int64_t i = first; i < nvec; i += stride) {
        uint4 v = reinterpret_cast<uint4 *>(x)[i];
        T *e = reinterpret_cast<T *>(&v);
#pragma unroll
        for (int k = 0; k < VEC; k++) e[k] = (T)((float)e[k] * g);
        reinterpret_cast<uint4 *>(x)[i] = v;
    }
    for (int64_t i = nvec * VEC + first; i < n; i += stride) x[i] = (T)((float)x[i] * g);
}

flce_status flce_scale_device(void *x, flce_dtype dtype, int64_t n, const float *scale, void *cuda_stream) {
    if (n < 0) return FLCE_ERR_INVALID_SIZE;
    if (!flce_is_dtype(dtype)) return FLCE_ERR_INVALID_VALUE;
    if (n == 0) return FLCE_OK;
    if (x == NULL || scale == NULL) return FLCE_ERR_NULL_POINTER;
    cudaStream_t stream = (cudaStream_t)cuda_stream;
    const int64_t vec = dtype == FLCE_BF16 ? 8 : 4;
    const int64_t blocks = (n / vec + 255) / 256;
    const unsigned grid = (unsigned)(blocks < 1 ? 1 : blocks > 2048 ? 2048 : blocks);
    if (dtype == FLCE_BF16)
        flce_scale_device_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>((__nv_bfloat16 *)x, n, scale);
    else
        flce_scale_device_kernel<float><<<grid, 256, 0, stream>>>((float *)x, n, scale);
    return cudaGetLastError() == cudaSuccess ? FLCE_OK : FLCE_ERR_CUDA;
}

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
    if (!(cfg->temperature > 0.0f && isfinite(cfg->temperature)))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE,
                         "temperature = %g must be finite and > 0 (flce_config_init sets 1)",
                         (double)cfg->temperature);
    if (!flce_is_flag(cfg->has_class_weights))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE, "has_class_weights = %d must be 0 or 1",
                         cfg->has_class_weights);
    if (cfg->max_vocab_tile != 0 && cfg->max_vocab_tile < FLCE_VOCAB_ALIGN)
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE,
                         "max_vocab_tile = %lld must be 0 (the planner's choice) or >= %d",
                         (long long)cfg->max_vocab_tile, FLCE_VOCAB_ALIGN);
    if (!flce_is_flag(cfg->vocab_parallel) || !flce_is_flag(cfg->d_hidden_partial))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE,
                         "vocab_parallel = %d and d_hidden_partial = %d must be 0 or 1", cfg->vocab_parallel,
                         cfg->d_hidden_partial);
    if (!cfg->vocab_parallel && (cfg->vocab_offset != 0 || cfg->vocab_total != 0 || cfg->d_hidden_partial != 0))
        return flce_fail(msg, msg_len, FLCE_ERR_INVALID_VALUE,
                         "vocab_offset = %lld, vocab_total = %lld, d_hidden_partial = %d need vocab_parallel = 1 "
                         "(else they must be 0)", (long long)cfg->vocab_offset, (long long)cfg->vocab_total,
                         cfg->d_hidden_partial);
    if (cfg->vocab_parallel) {
        // a target id is compared with vocab_total and its column (id - vocab_offset) is an int
        if (cfg->vocab_total > INT32_MAX - 64)
            return flce_fail(msg, msg_len, FLCE_ERR_INVALID_SIZE, "vocab_total = %lld exceeds the limit %d",
                             (long long)cfg->vocab_total, INT32_MAX - 64);
        if (cfg->vocab_offset < 0 || cfg->vocab_total < cfg->vocab ||
            cfg->vocab_offset > cfg->vocab_total - cfg->vocab)
            return flce_fail(msg, msg_len, FLCE_ERR_INVALID_SIZE,
                             "vocab_parallel: this rank's classes [vocab_offset, vocab_offset + vocab) = [%lld, %lld) "
                             "must lie in [0, vocab_total = %lld)", (long long)cfg->vocab_offset,
                             (long long)(cfg->vocab_offset + cfg->vocab), (long long)cfg->vocab_total);
    }
    return FLCE_OK;
}

// ----------------------------------------------------------------------------------------
// the planner: a schedule and the workspace layout for a config and a byte budget

typedef struct {
    int64_t chunk;       // tokens per chunk (0: does not fit)
    int64_t n_chunks;
    int64_t vocab_tile;  // vocabulary columns per tile: Vp for the chunk schedule
    int64_t n_vtiles;    // 1: chunk schedule (3 GEMMs); > 1: tile schedule (4 GEMMs)
    int64_t ldl;         // row stride of the logits buffer, in logits (of logits_size bytes)
    size_t logits_size;  // 4: fp32 logits; 2: bf16 logits (bf16_logits = 1)
    int64_t ldd;         // row stride of dlogits, written in place, in elements of dtype
    int dw_accumulator;  // an fp32 (Vp, H) buffer accumulates a bf16 d_weight
    int dh_accumulator;  // an fp32 (chunk, H) buffer sums a bf16 d_hidden over vocabulary parts
    // the Hopper path (flce_sm90.cuh): the logits buffer is E (bf16, row stride ldl), and
    int sm90;
    int dh_parts;        // K parts of the d_h GEMM (fp32 partials, summed in order)
    int lt_backward;     // the gradients from dlogits written over E, by cuBLASLt (flce_sm90_lt_backward)
    int64_t ldc;         // the chunk's rows rounded up to 64: the row statistics' stride
    int64_t n_stat;      // 256-column statistics tiles over the V real classes
    size_t off_lt, off_scalars, off_token_loss, off_token_lse, off_target_logit, off_db32,
        off_dw32, off_ones, off_dh32, off_tile_stats, off_tile_grad, off_stat, off_stat16, off_rec,
        off_dh_part, off_vp, off_logits, total;
} flce_plan;

/*
Byte counts of the layout saturate at SIZE_MAX, a size no budget admits: for absurd H and Vp
(each up to 2^31) a product such as Vp x H x 4 comes within 2^40 of 2^64, and a sum that
wrapped around would pass for a small workspace.
*/
static size_t flce_bytes(size_t a, size_t b, size_t c) {
    if (a == 0 || b == 0 || c == 0) return 0;
    if (b > SIZE_MAX / a || c > SIZE_MAX / (a * b)) return SIZE_MAX;
    return a * b * c;
}

// The offset after a region of `bytes` at offset o, rounded up to FLCE_ALIGN (saturating).
static size_t flce_append(size_t o, size_t bytes) {
    if (o > SIZE_MAX - FLCE_ALIGN || bytes > SIZE_MAX - FLCE_ALIGN - o) return SIZE_MAX;
    return (o + bytes + FLCE_ALIGN - 1) / FLCE_ALIGN * FLCE_ALIGN;
}

static int flce_fits(size_t bytes, size_t budget) { return bytes != SIZE_MAX && bytes <= budget; }

static int64_t flce_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// A GEMM over vocabulary columns v0 .. v0+w: cut at a multiple of FLCE_VOCAB_ALIGN, so that
// an odd width (V = 176245) does not send all of it to cuBLASLt's slow kernels.
static int64_t flce_vocab_cut(int64_t w) { return w / FLCE_VOCAB_ALIGN * FLCE_VOCAB_ALIGN; }

// K parts of the Hopper path's d_h GEMM for a chunk: the fewest (at most 4) with which its
// output tiles fill the multiprocessors in nearly whole waves (a chunk of ~3K tokens at
// H = 1024 has fewer tiles than an H100 or H200 has multiprocessors).
static int flce_sm90_dh_parts(int64_t chunk, int64_t H, int sms) {
    const int64_t tiles = ((chunk + SM90_BM - 1) / SM90_BM) * ((H + SM90_BN - 1) / SM90_BN);
    int best = 1;
    double best_use = 0.0;
    for (int parts = 1; parts <= 4; parts++) {
        const int64_t work = tiles * parts, waves = (work + sms - 1) / sms;
        const double use = (double)work / (double)(waves * sms);
        if (use >= 0.85) return parts;
        if (use > best_use + 1e-9) {
            best = parts;
            best_use = use;
        }
    }
    return best;
}

/*
The Hopper path's gradients come one of two ways: the fused GEMMs form dlogits from E as they
load it (flce_sm90_dh, flce_sm90_dw), or a pass writes dlogits over E (4 bytes a logit moved)
and cuBLASLt's GEMMs take them, as on the cuBLASLt path ("lt_backward"). The fused GEMMs ran
slower than cuBLASLt's on stored dlogits (the d_W GEMM most: its transform needs per-token
coefficients every K step), a cost per logit that grows with H, while the pass's cost per
logit does not: on an H200 (dev/RESULTS.md) the pass won at H = 4096 and lost at H = 768 and
1024. FLCE_LT_BACKWARD=0|1 forces either (read when a plan is made: the layouts differ).
*/
#define FLCE_LT_BACKWARD_MIN_H 2048
static int flce_sm90_lt_backward(const flce_config *cfg) {
    const char *e = getenv("FLCE_LT_BACKWARD");
    if (e != NULL && (strcmp(e, "0") == 0 || strcmp(e, "1") == 0)) return atoi(e);
    return cfg->hidden >= FLCE_LT_BACKWARD_MIN_H;
}

/*
The fused d_W GEMM's two transforms: the plain one forms dz = s e - cs - [j == y] ct in
registers from per-row coefficients that every K step reads from shared memory (26 loads a
step and thread); the scaled one (flce_sm90_dw_sc) multiplies e by an exact power of two from
one 16-byte load a stage, its B operand carries each row's factor (flce_sm90_xs_kernel) and the
target's term sits in E. Our GEMMs are bound by shared-memory bandwidth (dev/RESULTS.md: ncu's
wavefronts), to which the plain transform's loads add ~20%. The scaled one applies without a
softcap, an entropy gradient or label smoothing (their terms are not a row factor) and where d_W
is fp32 (the rare target term left out of E is added after the GEMM, in fp32). FLCE_DW_SCALED=0
turns it off (read per call).
*/
static int flce_sm90_dw_scaled(const flce_config *cfg, const flce_plan *p, const flce_tensors *t, int xf) {
    const char *e = getenv("FLCE_DW_SCALED");
    if (e != NULL && strcmp(e, "0") == 0) return 0;
    const int bf16_out = !p->dw_accumulator && cfg->d_weight_dtype == FLCE_BF16;
    // (the target's term sums a column's rows in shared memory: H up to 51,200)
    return !xf && cfg->label_smoothing == 0.0f && !p->lt_backward && t->d_weight != NULL && !bf16_out &&
           FLCE_DW_TARGET_COLS(cfg->hidden) >= 1;
}

// Lays out the workspace for chunks of `chunk` tokens and vocabulary tiles of `vtile` columns
// (>= Vp: the whole vocabulary, no tiles); returns the total bytes (SIZE_MAX: more than
// size_t can count). sms: 0 for the cuBLASLt path, else the Hopper path on a GPU of that many
// multiprocessors (its tiles are multiples of FLCE_SM90_TILE over the V real classes).
static size_t flce_layout(const flce_config *cfg, int64_t chunk, int64_t vtile, int dw_accumulator, int sms,
                          flce_plan *p) {
    const int64_t V = cfg->vocab, Vp = cfg->vocab_padded;
    size_t es = flce_dtype_size(cfg->dtype), n = (size_t)cfg->n_tokens;
    size_t o = 0;
    memset(p, 0, sizeof(*p));
    p->sm90 = sms > 0;
    p->chunk = chunk;
    const int64_t span = p->sm90 ? V : Vp;  // the columns the tiles cover
    p->vocab_tile = vtile < span ? vtile : span;
    p->n_vtiles = (span + p->vocab_tile - 1) / p->vocab_tile;
    const int tiled = p->n_vtiles > 1;
    p->lt_backward = p->sm90 && flce_sm90_lt_backward(cfg);
    p->ldl = flce_round_up(p->vocab_tile, FLCE_LDL_MULTIPLE);
    p->logits_size = (p->sm90 || (cfg->dtype == FLCE_BF16 && cfg->bf16_logits)) ? 2 : 4;
    p->ldd = p->ldl * (int64_t)(p->logits_size / es);
    // a bf16 d_h summed over several GEMMs (tiles, or the cut of an odd Vp) is summed in fp32
    // (cuBLASLt's d_h GEMM over the real classes of the Hopper path's chunk, cut the same way)
    const int64_t cut = flce_vocab_cut(span);
    p->dh_accumulator = cfg->d_hidden_dtype == FLCE_BF16 &&
                        (tiled || ((!p->sm90 || p->lt_backward) && cut > 0 && cut < span));
    // vocab_parallel: the chunk's d_h is summed over the ranks in fp32, then written out
    const int vp = cfg->vocab_parallel;
    if (vp && !cfg->d_hidden_partial) p->dh_accumulator = 1;
    p->dw_accumulator = dw_accumulator;
    const size_t H = (size_t)cfg->hidden, C = (size_t)chunk;
    if (p->sm90) {
        p->ldc = flce_round_up(chunk, 64);
        p->n_stat = (V + FLCE_SM90_TILE - 1) / FLCE_SM90_TILE;
        p->dh_parts = chunk > 0 && !p->lt_backward ? flce_sm90_dh_parts(chunk, cfg->hidden, sms) : 1;
    }
    const size_t ldc = (size_t)p->ldc;
    p->off_lt = o;            o = flce_append(o, p->sm90 && !p->lt_backward ? 0 : FLCE_LT_WORKSPACE);
    p->off_scalars = o;       o = flce_append(o, sizeof(flce_call_scalars));
    p->off_token_loss = o;    o = flce_append(o, n * sizeof(float));
    p->off_token_lse = o;     o = flce_append(o, n * sizeof(float));
    // (vocab_parallel with class weights: the targets' weights and the weights' sum follow the
    // target logits, in the one buffer the ranks sum)
    p->off_target_logit = o;  o = flce_append(o, (vp && cfg->has_class_weights ? 2 * n + 1 : n) * sizeof(float));
    p->off_db32 = o;          o = flce_append(o, cfg->has_bias ? (size_t)Vp * 4 : 0);
    p->off_dw32 = o;          o = flce_append(o, dw_accumulator ? flce_bytes((size_t)Vp, H, 4) : 0);
    p->off_ones = o;          o = flce_append(o, cfg->has_bias && !p->sm90 ? flce_bytes(C, es, 1) : 0);
    p->off_dh32 = o;          o = flce_append(o, p->dh_accumulator ? flce_bytes(C, H, 4) : 0);
    // (vocab_parallel's cuBLASLt chunks run the tile schedule's row passes over one tile)
    p->off_tile_stats = o;    o = flce_append(o, (tiled || vp) && !p->sm90 ? flce_bytes(C, sizeof(flce_row_stats), 1) : 0);
    p->off_tile_grad = o;     o = flce_append(o, (tiled || vp) && !p->sm90 ? flce_bytes(C, sizeof(flce_row_grad), 1) : 0);
    // (the fourth array, the entropy's q, is planned whether or not a call asks for the entropy:
    // the config does not say, and it is 4 bytes a row per 256 columns)
    p->off_stat = o;          o = flce_append(o, flce_bytes(4 * (size_t)p->n_stat, ldc, 4));
    // (the Hopper d_W GEMM's bf16 copies: each tile's scale as hi + lo, and -cs per row)
    p->off_stat16 = o;        o = flce_append(o, p->sm90 ? flce_bytes(2 * (size_t)p->n_stat + 1, ldc, 2) : 0);
    p->off_rec = o;           o = flce_append(o, flce_bytes(3 * ldc, 4, 1));
    p->off_dh_part = o;       o = flce_append(o, p->sm90 && !p->lt_backward ? flce_bytes((size_t)p->dh_parts * C, H, 4) : 0);
    p->off_vp = o;            o = flce_append(o, vp ? flce_bytes(5, C, 4) : 0);  // the exchange buffer
    p->off_logits = o;        o = flce_append(o, flce_bytes(C, (size_t)p->ldl, p->logits_size));
    p->total = o;
    p->n_chunks = chunk > 0 ? (cfg->n_tokens + chunk - 1) / chunk : 0;
    return o;
}

// Largest chunk (<= hi) whose layout with tiles of vtile columns fits budget; 0 if not even
// one token fits. The layout grows with the chunk, so a binary search finds it exactly.
static int64_t flce_fit_chunk(const flce_config *cfg, size_t budget, int64_t hi, int64_t vtile,
                              int dw_accumulator, int sms) {
    flce_plan p;
    int64_t lo = 0;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (flce_fits(flce_layout(cfg, mid, vtile, dw_accumulator, sms, &p), budget)) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Largest vocabulary tile (a multiple of `unit`, <= hi) for chunks of `chunk` tokens that
// fits budget; 0 if none.
static int64_t flce_fit_vtile(const flce_config *cfg, size_t budget, int64_t chunk, int64_t hi,
                              int dw_accumulator, int sms, int64_t unit) {
    flce_plan p;
    int64_t lo = 0;
    hi /= unit;  // in units
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        const size_t bytes = flce_layout(cfg, chunk, mid * unit, dw_accumulator, sms, &p);
        if (flce_fits(bytes, budget)) lo = mid;
        else hi = mid - 1;
    }
    return lo * unit;
}

// Spreads n items over parts of at most c (a multiple of `multiple` when c is): the same
// number of parts, each as even as the multiple allows, so the last is not a sliver.
static int64_t flce_balance(int64_t n, int64_t c, int64_t multiple) {
    if (c <= 0 || c >= n) return c;
    if (c >= multiple) c = c / multiple * multiple;
    int64_t parts = (n + c - 1) / c;
    int64_t even = (n + parts - 1) / parts;
    if (c >= multiple) even = flce_round_up(even, multiple);
    return even < c ? even : c;
}

// The balanced chunk (flce_balance) of at most c tokens whose layout fits budget, 0 if none.
// The layout is not monotonic in the chunk (the Hopper path's d_h partials grow as a chunk
// falls short of whole waves of tiles), so the balanced form of the largest chunk that fits
// can overshoot the budget (65536 x 768 x 50304 in 1 GiB did, by 34 MB): step down until it fits.
static int64_t flce_fit_balanced(const flce_config *cfg, size_t budget, int64_t c, int64_t vtile, int dw_accumulator,
                                 int sms) {
    flce_plan p;
    while (c > 0) {
        const int64_t cb = flce_balance(cfg->n_tokens, c, FLCE_CHUNK_MULTIPLE);
        if (flce_fits(flce_layout(cfg, cb, vtile, dw_accumulator, sms, &p), budget)) return cb;
        c = cb > FLCE_CHUNK_MULTIPLE ? cb - FLCE_CHUNK_MULTIPLE : cb - 1;
    }
    return 0;
}

/*
The modelled time of a schedule (seconds), to choose between the chunk schedule (3 GEMMs, the
whole vocabulary per chunk) and the tile schedule (4 GEMMs: the logits of a tile are computed
once for the row statistics and once more for the gradients). The terms are what the H200
measurements in dev/RESULTS.md show (the constants are fitted to them): GEMM time, longer when
the chunk or tile is short (a k or n of 128 halves the rate); the bytes the row passes and the
logits GEMMs move per logit; the fp32 d_W read and written again by every chunk after the
first; the fp32 d_h of a chunk read and written by every tile; and a fixed cost per launch.
Only the comparison of two schedules matters, not the absolute value.
*/
static double flce_plan_cost(const flce_config *cfg, const flce_plan *p, int backward, int needs_dw) {
    const double bandwidth = 3.5e12, launch = 3e-6;
    const double N = (double)cfg->n_tokens, H = (double)cfg->hidden, Vp = (double)cfg->vocab_padded;
    const int tiled = p->n_vtiles > 1;
    const double gemms = backward ? (tiled ? 4.0 : 3.0) : 1.0;
    if (p->sm90) {
        // the Hopper path: GEMMs with the loss in their epilogues and operand loads, a short
        // chunk wasting part of the 128-row tiles; per logit only E (written once, read by the
        // two gradient GEMMs); d_W added to once per chunk; the d_h partials of every tile
        const double V = (double)cfg->vocab;
        double t = gemms * 2.0 * N * V * H / 7.0e14 * (1.0 + 64.0 / (double)p->chunk);
        double bytes = backward ? N * V * 6.0 : 0.0;
        if (backward && needs_dw) bytes += ((double)p->n_chunks - 0.5) * Vp * H * 8.0;
        if (backward) bytes += (double)p->n_vtiles * N * H * 4.0 * (p->dh_parts + 2);
        if (backward && p->lt_backward) bytes += N * V * 4.0;  // dlogits written over E
        t += bytes / bandwidth;
        t += (double)(p->n_chunks * p->n_vtiles) * (backward ? 6.0 : 2.0) * launch;
        return t;
    }
    const double es = (double)flce_dtype_size(cfg->dtype), ls = (double)p->logits_size;
    const double shortest = (double)(p->chunk < p->vocab_tile ? p->chunk : p->vocab_tile);
    double t = gemms * 2.0 * N * Vp * H / 6.6e14 * (1.0 + 128.0 / shortest);
    // per logit: the GEMM writes of it and the row passes (read twice, dlogits written)
    double bytes = N * Vp * (backward ? (tiled ? 4.0 : 3.0) * ls + es : 2.0 * ls);
    if (backward && needs_dw) bytes += (double)(p->n_chunks - 1) * Vp * H * 8.0;
    if (backward && tiled) bytes += (double)p->n_vtiles * N * H * 8.0;
    t += bytes / bandwidth;
    t += (double)(p->n_chunks * p->n_vtiles) * (backward ? (tiled ? 7.0 : 5.0) : 2.0) * launch;
    return t;
}

// needs_dw: this call produces d_weight (the accumulator is only for a bf16 one); backward:
// it produces gradients at all; sms: 0 for the cuBLASLt path, else the Hopper path's GPU
// (flce_layout). The chunk schedule is taken whenever a chunk fits and the model does not
// find a tile schedule faster; max_chunk_tokens and max_vocab_tile bound both.
static void flce_make_plan(const flce_config *cfg, size_t budget, int needs_dw, int backward, int sms,
                           flce_plan *p) {
    if (cfg->vocab_parallel && cfg->vocab < cfg->vocab_padded) {
        // Every rank must cut the tokens into the same chunks (each chunk's collectives count
        // its rows), and the ranks' real classes differ where the last shard holds the padding:
        // plan as if every row were real (the Hopper path's layout grows with the real
        // classes), then lay out this rank's, which needs no more; its size stays the plan's,
        // so that a workspace sized by it gives every rank the same chunks again.
        flce_config pc = *cfg;
        pc.vocab = pc.vocab_padded;
        flce_make_plan(&pc, budget, needs_dw, backward, sms, p);
        if (p->chunk > 0) {
            const size_t all_real = p->total;
            flce_layout(cfg, p->chunk, p->vocab_tile, p->dw_accumulator, sms, p);
            if (p->total < all_real) p->total = all_real;
        }
        return;
    }
    const int64_t N = cfg->n_tokens;
    const int64_t span = sms ? cfg->vocab : cfg->vocab_padded;  // the columns the tiles cover
    const int64_t unit = sms ? FLCE_SM90_TILE : FLCE_VOCAB_ALIGN;
    int64_t max_chunk = N;
    if (cfg->max_chunk_tokens > 0 && max_chunk > cfg->max_chunk_tokens) max_chunk = cfg->max_chunk_tokens;
    const int bf16_dw = needs_dw && cfg->d_weight_dtype == FLCE_BF16;
    double best_cost = 0.0;
    flce_plan cand;
    flce_layout(cfg, 0, span, 0, sms, p);  // chunk 0: nothing fits (yet)
    // the chunk schedule: the whole vocabulary per chunk
    if (cfg->max_vocab_tile == 0 || cfg->max_vocab_tile >= span) {
        int64_t c = flce_fit_chunk(cfg, budget, max_chunk, span, 0, sms);
        int dw_acc = 0;
        if (bf16_dw && (c < N || cfg->accumulate_d_weight)) {
            // several chunks (or adding into an existing bf16 d_W) need fp32 accumulation
            dw_acc = 1;
            c = flce_fit_chunk(cfg, budget, max_chunk, span, 1, sms);
        }
        c = c > 0 ? flce_fit_balanced(cfg, budget, c, span, dw_acc, sms) : 0;
        if (c > 0) {
            flce_layout(cfg, c, span, dw_acc, sms, p);
            best_cost = flce_plan_cost(cfg, p, backward, needs_dw);
        }
    }
    // the tile schedule: chunks of 1, 2, 4, .. tokens (and the largest allowed), each with the
    // widest vocabulary tile that fits beside it
    int64_t max_vtile = span - 1;
    if (cfg->max_vocab_tile > 0 && max_vtile > cfg->max_vocab_tile) max_vtile = cfg->max_vocab_tile;
    if (max_vtile < unit) max_vtile = unit;  // the Hopper path's narrowest tile
    for (int64_t c = 1;; c = c * 2 < max_chunk ? c * 2 : max_chunk) {
        const int dw_acc = bf16_dw && (c < N || cfg->accumulate_d_weight);
        const int64_t v = flce_fit_vtile(cfg, budget, c, max_vtile, dw_acc, sms, unit);
        const int64_t vb = v > 0 ? flce_balance(span, v, unit) : 0;
        const int64_t cb = v > 0 ? flce_fit_balanced(cfg, budget, c, vb, dw_acc, sms) : 0;
        if (cb > 0) {
            flce_layout(cfg, cb, vb, dw_acc, sms, &cand);
            const double cost = flce_plan_cost(cfg, &cand, backward, needs_dw);
            if (p->chunk == 0 || cost < best_cost) {
                *p = cand;
                best_cost = cost;
            }
        }
        if (c == max_chunk) break;
    }
}

// The multiprocessors of the current GPU when a new context's call with cfg takes the Hopper
// path there (bf16 inputs; the planner's argument), else 0.
static int flce_default_sms(const flce_config *cfg) {
    if (cfg->dtype != FLCE_BF16) return 0;  // fp32 inputs run cuBLASLt's GEMMs on every GPU
    // FLCE_PLAN_SMS=n: the Hopper path's plans for a GPU of n multiprocessors, on any machine
    // (what the CPU tests check of its planner); calls still take their context's path
    const char *plan = getenv("FLCE_PLAN_SMS");
    if (plan != NULL && atoi(plan) > 0) return atoi(plan);
    if (!flce_hopper_default()) return 0;
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return sms;
}

// The planned workspace for budget on the path of sms (flce_make_plan), or the minimum with
// FLCE_ERR_WORKSPACE when nothing fits: one token and one tile of the narrowest width (or the
// whole vocabulary when it is no wider), with the accumulator a bf16 d_weight then needs.
static flce_status flce_workspace_for(const flce_config *cfg, size_t budget, int sms, size_t *bytes) {
    flce_plan p;
    flce_make_plan(cfg, budget, 1, 1, sms, &p);
    if (p.chunk == 0) {
        int bf16_dw = cfg->d_weight_dtype == FLCE_BF16 && (cfg->n_tokens > 1 || cfg->accumulate_d_weight);
        *bytes = flce_layout(cfg, 1, sms ? FLCE_SM90_TILE : FLCE_VOCAB_ALIGN, bf16_dw, sms, &p);
        return FLCE_ERR_WORKSPACE;
    }
    *bytes = p.total;
    return FLCE_OK;
}

// Where the Hopper path is the default, the workspace is its plan's, raised where needed (and
// the budget allows) to the cuBLASLt path's minimum, so that a context switched to cuBLASLt
// (flce_set_hopper) runs in it too, in chunks planned within it. Sized for both plans, it was
// up to twice what the Hopper path uses (the cuBLASLt plan's fp32 logits against bf16 E).
flce_status flce_workspace_size(const flce_config *cfg, size_t budget_bytes, size_t *bytes) {
    flce_status st = flce_config_check(cfg, NULL, 0);
    if (st != FLCE_OK) return st;
    if (bytes == NULL) return FLCE_ERR_NULL_POINTER;
    if (budget_bytes == 0) budget_bytes = FLCE_DEFAULT_BUDGET;
    const int sms = flce_default_sms(cfg);
    st = flce_workspace_for(cfg, budget_bytes, sms, bytes);
    if (st == FLCE_OK && sms > 0) {
        size_t lt_min = 0;
        (void)flce_workspace_for(cfg, 1, 0, &lt_min);  // FLCE_ERR_WORKSPACE, with the minimum
        if (lt_min > *bytes && lt_min <= budget_bytes) *bytes = lt_min;
    }
    return st;
}

int64_t flce_chunk_tokens(const flce_config *cfg, size_t workspace_bytes) {
    if (flce_config_check(cfg, NULL, 0) != FLCE_OK) return 0;
    flce_plan p;
    flce_make_plan(cfg, workspace_bytes, 1, 1, flce_default_sms(cfg), &p);
    return p.chunk;
}

int64_t flce_vocab_tile(const flce_config *cfg, size_t workspace_bytes) {
    if (flce_config_check(cfg, NULL, 0) != FLCE_OK) return 0;
    flce_plan p;
    flce_make_plan(cfg, workspace_bytes, 1, 1, flce_default_sms(cfg), &p);
    return p.chunk > 0 ? p.vocab_tile : 0;
}

// ----------------------------------------------------------------------------------------
// context

flce_status flce_create(flce_context **out) {
    if (out == NULL) return FLCE_ERR_NULL_POINTER;
    *out = NULL;
    flce_context *ctx = (flce_context *)calloc(1, sizeof(flce_context));
    if (ctx == NULL) return FLCE_ERR_OUT_OF_MEMORY;
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
    const char *autotune = getenv("FLCE_AUTOTUNE");
    ctx->gemm.autotune = !(autotune != NULL && strcmp(autotune, "0") == 0);
    ctx->hopper = flce_hopper_default();
    const char *pp = getenv("FLCE_PINGPONG");
    ctx->pingpong = pp == NULL || (strcmp(pp, "0") != 0 && strcmp(pp, "1") != 0) ? -1 : atoi(pp);
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
        fprintf(stderr, " sum %.3f; GEMM shapes autotuned %d (another algorithm won %d)\n",
                total / (double)(ctx->t_calls ? ctx->t_calls : 1), ctx->gemm.tuned, ctx->gemm.retuned);
        cudaEventDestroy(ctx->t_start);
        cudaEventDestroy(ctx->t_stop);
    }
    gemm_cache_release(&ctx->gemm);
    cublasLtDestroy(ctx->gemm.handle);
    cudaFreeHost((void *)ctx->host_status);
    free(ctx);
}

void flce_set_comm(flce_context *ctx, const flce_comm *comm) {
    if (ctx == NULL) return;
    memset(&ctx->comm, 0, sizeof(ctx->comm));
    if (comm != NULL && comm->allreduce != NULL) ctx->comm = *comm;
}

void flce_set_autotune(flce_context *ctx, int on) {
    if (ctx != NULL) ctx->gemm.autotune = on != 0;
}

int flce_hopper_default(void) {
    const char *env = getenv("FLCE_HOPPER");
    return !(env != NULL && strcmp(env, "0") == 0) && sm90_available();
}

void flce_set_hopper(flce_context *ctx, int on) {
    if (ctx != NULL) ctx->hopper = on != 0 && sm90_available();
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

// vocab_parallel: buf[0 .. n) (device, fp32) combined over the ranks by the caller's
// communicator, ordered on the call's stream
static flce_status flce_allreduce(flce_context *ctx, float *buf, size_t n, flce_comm_op op, cudaStream_t stream,
                                  const char *what) {
    if (ctx->comm.allreduce(ctx->comm.user, buf, n, FLCE_COMM_FP32, op, (void *)stream) != 0)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_COMM,
                         "the communicator's allreduce (%s) of %s, %zu floats, failed",
                         op == FLCE_COMM_MAX ? "max" : "sum", what, n);
    return FLCE_OK;
}

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
    if (cfg->has_class_weights)
        FLCE_TRY(flce_check_ptr(ctx, t->class_weights, "class_weights (has_class_weights = 1)", 4));
    else if (t->class_weights != NULL)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_INVALID_VALUE,
                         "class_weights is given but has_class_weights = 0");
    if (t->token_entropy != NULL) FLCE_TRY(flce_check_ptr(ctx, t->token_entropy, "token_entropy", 4));
    if (t->token_logprob != NULL) FLCE_TRY(flce_check_ptr(ctx, t->token_logprob, "token_logprob", 4));
    if (!backward) return FLCE_OK;
    if (t->grad_entropy != NULL) FLCE_TRY(flce_check_ptr(ctx, t->grad_entropy, "grad_entropy", 4));
    if (t->grad_logprob != NULL) FLCE_TRY(flce_check_ptr(ctx, t->grad_logprob, "grad_logprob", 4));
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

// The statements after `phase`, timed as that phase of the call under FLCE_TIMING (a
// statement that returns an error leaves the phase untimed).
#define FLCE_PHASE(ctx, stream, phase, ...)  \
    do {                                     \
        flce_phase_begin(ctx, stream);       \
        __VA_ARGS__;                         \
        flce_phase_end(ctx, stream, phase);  \
    } while (0)

static cudaDataType_t flce_cuda_type(flce_dtype t) { return t == FLCE_FP32 ? CUDA_R_32F : CUDA_R_16BF; }

// The row kernel over `rows` rows of the buffer. SIMPLE (no bias, no softcap) compiles those
// two out of the per-logit work.
// A vocabulary tile of a few thousand columns is one pass of 16 loads per thread for 512
// threads: the block's reductions then dominate (the tile schedule's row passes measured well
// below the bandwidth of whole rows, dev/RESULTS.md), so narrow rows get blocks of 128
// threads, four times as many per SM.
#define FLCE_CE_THREADS_NARROW 128
#define FLCE_CE_NARROW_COLS 16384

template <typename T, typename TL, typename Tgt, int MODE>
static cudaError_t flce_launch_rows(cudaStream_t stream, TL *logits, int64_t rows,
                                    const flce_rows_args<T, Tgt> &a) {
    const unsigned threads = a.ncols <= FLCE_CE_NARROW_COLS ? FLCE_CE_THREADS_NARROW : FLCE_CE_THREADS;
    // a temperature, and class weights without smoothing, cost SIMPLE nothing per logit; the
    // entropy and weighted smoothing do
    const int weighted_smoothing = a.class_weights != NULL && a.p.label_smoothing > 0.0f;
    if (a.bias == NULL && a.p.softcap == 0.0f && !a.p.want_entropy && !weighted_smoothing)
        flce_ce_rows_kernel<T, TL, Tgt, MODE, true><<<(unsigned)rows, threads, 0, stream>>>(logits, a);
    else
        flce_ce_rows_kernel<T, TL, Tgt, MODE, false><<<(unsigned)rows, threads, 0, stream>>>(logits, a);
    return cudaGetLastError();
}

template <typename T, typename TL, typename Tgt>
static cudaError_t flce_launch_rows_mode(cudaStream_t stream, int mode, TL *logits, int64_t rows,
                                         const flce_rows_args<T, Tgt> &a) {
    switch (mode) {
    case FLCE_ROWS_FORWARD: return flce_launch_rows<T, TL, Tgt, FLCE_ROWS_FORWARD>(stream, logits, rows, a);
    case FLCE_ROWS_BACKWARD: return flce_launch_rows<T, TL, Tgt, FLCE_ROWS_BACKWARD>(stream, logits, rows, a);
    case FLCE_ROWS_TILE_STATS: return flce_launch_rows<T, TL, Tgt, FLCE_ROWS_TILE_STATS>(stream, logits, rows, a);
    default: return flce_launch_rows<T, TL, Tgt, FLCE_ROWS_TILE_GRAD>(stream, logits, rows, a);
    }
}

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

template <typename T, typename TL, typename Tgt>
static flce_status flce_rows_tile(flce_call_state<T, TL, Tgt> *s, int64_t c0, int64_t rows, int64_t v0,
                                  int64_t w, int mode);

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

// Vocabulary columns v0 .. v0+w for the `rows` tokens at c0: their logits into the buffer
// (rows x w, row stride ldl), then the row kernel over them in `mode`.
template <typename T, typename TL, typename Tgt>
static flce_status flce_logits_tile(flce_call_state<T, TL, Tgt> *s, int64_t c0, int64_t rows,
                                    int64_t v0, int64_t w, int mode) {
    flce_context *ctx = s->ctx;
    const int64_t H = s->cfg->hidden;
    const cudaDataType_t in_type = flce_cuda_type(s->cfg->dtype);
    TL *logits = (TL *)(s->ws + s->p->off_logits);
    // logits = h_chunk @ W[v0 .. v0+w]^T, over the rows of W up to Vp: an aligned Vp (llm.c's
    // 50304 for 50257) keeps cuBLASLt on its fast kernels; columns >= V are never read
    const gemm_problem gp = {1, 0, w, rows, H,
                             {(const T *)s->t->weight + v0 * H, in_type, H},
                             {(const T *)s->t->hidden + c0 * H, in_type, H},
                             {logits, sizeof(TL) == 4 ? CUDA_R_32F : CUDA_R_16BF, s->p->ldl},
                             1.0f, 0.0f};
    FLCE_PHASE(ctx, s->stream, FLCE_T_LOGITS,
               FLCE_GEMM_TRY("logits", gemm_split(&ctx->gemm, s->stream, &gp, GEMM_SPLIT_M,
                                                  flce_vocab_cut(w), s->ws + s->p->off_lt,
                                                  FLCE_LT_WORKSPACE)));
    return flce_rows_tile(s, c0, rows, v0, w, mode);
}

// The row kernel in `mode` over the buffer, which holds the logits of vocabulary columns
// v0 .. v0+w for the `rows` tokens at c0.
template <typename T, typename TL, typename Tgt>
static flce_status flce_rows_tile(flce_call_state<T, TL, Tgt> *s, int64_t c0, int64_t rows, int64_t v0,
                                  int64_t w, int mode) {
    flce_context *ctx = s->ctx;
    TL *logits = (TL *)(s->ws + s->p->off_logits);
    s->ra.col0 = (int)v0;
    s->ra.ncols = (int)w;
    s->ra.first_tile = v0 == 0;
    FLCE_PHASE(ctx, s->stream, FLCE_T_ROWS, {
        cudaError_t err = flce_launch_rows_mode<T, TL, Tgt>(s->stream, mode, logits, rows, s->ra);
        if (err != cudaSuccess)
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUDA,
                             "row kernel launch (chunk at token %lld, tile at column %lld): %s",
                             (long long)c0, (long long)v0, cudaGetErrorString(err));
    });
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

// The gradient GEMMs of vocabulary columns v0 .. v0+w for the `rows` tokens at c0, from the
// dlogits the row kernel wrote over their logits (row stride ldd), as both schedules run
// them per tile (and the Hopper path's lt_backward, over the real classes, whose d_b is its
// own kernel's: with_db 0): d_h (+)= dlogits @ W[tile], d_W[tile] (+)= dlogits^T @ h, d_b[tile] (+)=
// dlogits^T @ ones. A bf16 d_W or d_b goes to its fp32 accumulator (added to the output in
// finalize), and a bf16 d_h summed over several GEMMs (tiles, or the cut of an odd Vp) is
// summed in fp32 and rounded once, after the last tile.
template <typename T, typename TL, typename Tgt>
static flce_status flce_tile_backward(flce_call_state<T, TL, Tgt> *s, int64_t c0, int64_t rows,
                                      int64_t v0, int64_t w, int with_db) {
    flce_context *ctx = s->ctx;
    const flce_config *cfg = s->cfg;
    const flce_tensors *t = s->t;
    const flce_plan *p = s->p;
    const int64_t H = cfg->hidden, cut = flce_vocab_cut(w);
    const int64_t span = p->sm90 ? cfg->vocab : cfg->vocab_padded;  // the columns the tiles cover
    const cudaDataType_t in_type = flce_cuda_type(cfg->dtype);
    const gemm_operand dlogits = {s->ws + p->off_logits, in_type, p->ldd};
    const T *h_chunk = (const T *)t->hidden + c0 * H, *w_tile = (const T *)t->weight + v0 * H;
    void *lt_ws = s->ws + p->off_lt;
    const int first = c0 == 0;
    if (t->d_hidden != NULL) {
        // d_h[chunk] (rows x H) (+)= dlogits (rows x w) @ W[v0 .. v0+w] (w x H)
        void *dh = (char *)t->d_hidden + (size_t)c0 * H * flce_dtype_size(cfg->d_hidden_dtype);
        float *dh32 = (float *)(s->ws + p->off_dh32);
        const int acc = p->dh_accumulator;
        const cudaDataType_t dh_type = acc ? CUDA_R_32F : flce_cuda_type(cfg->d_hidden_dtype);
        const float beta = v0 > 0 || (!acc && cfg->accumulate_d_hidden) ? 1.0f : 0.0f;
        const gemm_problem gp = {0, 0, H, rows, w, {w_tile, in_type, H}, dlogits,
                                 {acc ? (void *)dh32 : dh, dh_type, H}, 1.0f, beta};
        FLCE_PHASE(ctx, s->stream, FLCE_T_DHIDDEN, {
            FLCE_GEMM_TRY("d_hidden", gemm_split(&ctx->gemm, s->stream, &gp, GEMM_SPLIT_K, cut, lt_ws,
                                                 FLCE_LT_WORKSPACE));
            if (acc && v0 + w == span) {
                FLCE_TRY(flce_finish_dh(s, dh, dh32, rows));
            }
        });
    }
    if (t->d_weight != NULL) {
        // d_W[v0 .. v0+w] (w x H) (+)= dlogits^T (w x rows) @ h_chunk (rows x H)
        const int acc = p->dw_accumulator;
        char *dw = acc ? s->ws + p->off_dw32 : (char *)t->d_weight;
        const cudaDataType_t dw_type = acc ? CUDA_R_32F : flce_cuda_type(cfg->d_weight_dtype);
        const size_t es = acc ? 4 : flce_dtype_size(cfg->d_weight_dtype);
        const float beta = (!first || (!acc && cfg->accumulate_d_weight)) ? 1.0f : 0.0f;
        const gemm_problem gp = {0, 1, H, w, rows, {h_chunk, in_type, H}, dlogits,
                                 {dw + (size_t)v0 * H * es, dw_type, H}, 1.0f, beta};
        FLCE_PHASE(ctx, s->stream, FLCE_T_DWEIGHT,
                   FLCE_GEMM_TRY("d_weight", gemm_split(&ctx->gemm, s->stream, &gp, GEMM_SPLIT_N, cut,
                                                        lt_ws, FLCE_LT_WORKSPACE)));
    }
    if (t->d_bias != NULL && with_db) {
        // d_b[v0 .. v0+w] (+)= dlogits^T @ ones: the column sums of the chunk, in fp32
        const int acc = cfg->d_bias_dtype == FLCE_BF16;
        float *db = acc ? (float *)(s->ws + p->off_db32) : (float *)t->d_bias;
        const float beta = (!first || (!acc && cfg->accumulate_d_bias)) ? 1.0f : 0.0f;
        const gemm_problem gp = {0, 0, w, 1, rows, dlogits, {s->ws + p->off_ones, in_type, rows},
                                 {db + v0, CUDA_R_32F, w}, 1.0f, beta};
        FLCE_PHASE(ctx, s->stream, FLCE_T_DBIAS,
                   FLCE_GEMM_TRY("d_bias", gemm_split(&ctx->gemm, s->stream, &gp, GEMM_SPLIT_M, cut,
                                                      lt_ws, FLCE_LT_WORKSPACE)));
    }
    return FLCE_OK;
}

// The chunk schedule: per chunk of tokens, the logits of the whole vocabulary (one tile), the
// row kernel (loss; backward: dlogits in place), and that tile's gradient GEMMs.
template <typename T, typename TL, typename Tgt>
static flce_status flce_run_chunks(flce_call_state<T, TL, Tgt> *s) {
    const int64_t N = s->cfg->n_tokens, Vp = s->cfg->vocab_padded, C = s->p->chunk;
    const int mode = s->backward ? FLCE_ROWS_BACKWARD : FLCE_ROWS_FORWARD;
    for (int64_t c0 = 0; c0 < N; c0 += C) {
        const int64_t rows = N - c0 < C ? N - c0 : C;
        s->ra.row0 = c0;
        FLCE_TRY(flce_logits_tile(s, c0, rows, 0, Vp, mode));
        if (s->backward) FLCE_TRY(flce_tile_backward(s, c0, rows, 0, Vp, 1));
    }
    return FLCE_OK;
}

// The tile schedule: per chunk of tokens, a first pass over the vocabulary tiles that merges
// each tile's row statistics; the finish kernel (loss, LSE, gradient coefficients per row);
// then, backward, a second pass that computes each tile's logits again, turns them into
// dlogits and runs that tile's gradient GEMMs.
// vocab_parallel runs it on the cuBLASLt path, with one tile when the plan is the chunk
// schedule (its logits are computed once and stay in the buffer for the gradient pass): the
// statistics must be combined over the ranks between the two passes.
template <typename T, typename TL, typename Tgt>
static flce_status flce_run_tiles(flce_call_state<T, TL, Tgt> *s) {
    flce_context *ctx = s->ctx;
    const int64_t N = s->cfg->n_tokens, Vp = s->cfg->vocab_padded, C = s->p->chunk;
    const int64_t tile = s->p->vocab_tile;
    for (int64_t c0 = 0; c0 < N; c0 += C) {
        const int64_t rows = N - c0 < C ? N - c0 : C;
        const unsigned grid = (unsigned)((rows + 255) / 256);
        s->ra.row0 = c0;
        for (int64_t v0 = 0; v0 < Vp; v0 += tile) {
            const int64_t w = Vp - v0 < tile ? Vp - v0 : tile;
            FLCE_TRY(flce_logits_tile(s, c0, rows, v0, w, FLCE_ROWS_TILE_STATS));
        }
        if (s->cfg->vocab_parallel) {
            float *vp = (float *)(s->ws + s->p->off_vp);
            flce_vp_local_kernel<<<grid, 256, 0, s->stream>>>(s->ra.tile_stats, vp, rows);
            FLCE_LAUNCH_CHECK("flce_vp_local_kernel");
            FLCE_TRY(flce_vp_exchange(s, c0, rows));
            s->ra.vp_stats = vp + rows;
        }
        FLCE_PHASE(ctx, s->stream, FLCE_T_ROWS, {
            flce_tile_finish_kernel<T, Tgt><<<grid, 256, 0, s->stream>>>(s->ra, rows);
            FLCE_LAUNCH_CHECK("flce_tile_finish_kernel");
        });
        if (!s->backward) continue;
        if (s->p->n_vtiles == 1) {  // one tile: its logits are still in the buffer
            FLCE_TRY(flce_rows_tile(s, c0, rows, 0, Vp, FLCE_ROWS_TILE_GRAD));
            FLCE_TRY(flce_tile_backward(s, c0, rows, 0, Vp, 1));
            continue;
        }
        for (int64_t v0 = 0; v0 < Vp; v0 += tile) {
            const int64_t w = Vp - v0 < tile ? Vp - v0 : tile;
            FLCE_TRY(flce_logits_tile(s, c0, rows, v0, w, FLCE_ROWS_TILE_GRAD));
            FLCE_TRY(flce_tile_backward(s, c0, rows, v0, w, 1));
        }
    }
    return FLCE_OK;
}

// ----------------------------------------------------------------------------------------
// the Hopper path (flce_sm90.cuh): our GEMMs with the loss fused into them

#define FLCE_HOPPER_TRY(what, call)                                                            \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                               \
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUDA,              \
                             "%s (Hopper path, chunk at token %lld): %s", what, (long long)c0, \
                             cudaGetErrorString(e_));                                        \
    } while (0)

// The logits of vocabulary columns [r->voff, r->voff + w) for the chunk at c0: statistics
// and / or E from the GEMM's epilogue.
template <typename T, typename TL, typename Tgt>
static flce_status flce_hopper_logits(flce_call_state<T, TL, Tgt> *s, const flce_sm90_rows *r, int64_t c0, int64_t w,
                                    int store_e, int want_stats) {
    flce_context *ctx = s->ctx;
    const int64_t H = s->cfg->hidden;
    sm90_problem q;
    q.a = {(const T *)s->t->hidden + c0 * H, r->rows, H, H};
    q.b = {(const T *)s->t->weight + (int64_t)r->voff * H, w, H, H};
    // E: (rows x w) of the tile; the statistics-only pass over the whole vocabulary writes none
    q.d = {s->ws + s->p->off_logits, r->rows, w < s->p->ldl ? w : s->p->ldl, s->p->ldl};
    q.trans_a = 0; q.trans_b = 0;
    q.M = r->rows; q.N = w; q.K = H; q.splits = 1;
    flce_sm90_logits_args<T> a;
    a.r = *r;
    a.bias = s->ra.bias;
    a.store_e = store_e;
    a.want_stats = want_stats;
    a.want_sum = s->cfg->label_smoothing > 0.0f;
    FLCE_PHASE(ctx, s->stream, FLCE_T_LOGITS, {
        FLCE_HOPPER_TRY("logits GEMM", sm90_gemm_check(q, 2));
        const bool logit = a.bias != NULL || a.r.cap > 0.0f || a.r.want_q || a.r.cw != NULL;
        // ping-pong where the epilogue is long against a tile's products (K = H <= 2048): the
        // logits kernel alone on an H200 (ncu, same run) took 7-10% fewer cycles at H = 768 and
        // 1024, though 2-4% less time (the clock falls under the power cap); at H = 4096 it was
        // no faster (dev/RESULTS.md)
        const int pingpong = ctx->pingpong >= 0 ? ctx->pingpong : H <= 2048;
        if (pingpong && logit)
            FLCE_HOPPER_TRY("logits GEMM", (sm90_gemm_launch<flce_sm90_logits<T, true, true>, __nv_bfloat16, 0, 0>(q, a, s->stream)));
        else if (pingpong)
            FLCE_HOPPER_TRY("logits GEMM", (sm90_gemm_launch<flce_sm90_logits<T, false, true>, __nv_bfloat16, 0, 0>(q, a, s->stream)));
        else if (logit)
            FLCE_HOPPER_TRY("logits GEMM", (sm90_gemm_launch<flce_sm90_logits<T, true>, __nv_bfloat16, 0, 0>(q, a, s->stream)));
        else
            FLCE_HOPPER_TRY("logits GEMM", (sm90_gemm_launch<flce_sm90_logits<T, false>, __nv_bfloat16, 0, 0>(q, a, s->stream)));
    });
    return FLCE_OK;
}

// LSE, loss, coefficients and tile scales of the chunk at c0 from its statistics.
// vocab_parallel: the tiles merged into this rank's row statistics, those combined over the
// ranks (flce_vp_exchange), then the merge from the combined ones.
template <typename T, typename TL, typename Tgt>
static flce_status flce_hopper_merge(flce_call_state<T, TL, Tgt> *s, const flce_sm90_rows *r, int64_t c0) {
    flce_context *ctx = s->ctx;
    const unsigned grid = (unsigned)((r->ld + 31) / 32);
    const int n_stat = (int)s->p->n_stat;
    if (s->cfg->vocab_parallel) {
        float *vp = (float *)(s->ws + s->p->off_vp);
        FLCE_PHASE(ctx, s->stream, FLCE_T_ROWS, {
            flce_sm90_merge_kernel<T, Tgt><<<grid, 32 * FLCE_MERGE_WARPS, 0, s->stream>>>(s->ra, *r, n_stat,
                                                                                        FLCE_VP_LOCAL, vp);
            FLCE_HOPPER_TRY("merge kernel (this rank's statistics)", cudaGetLastError());
        });
        FLCE_TRY(flce_vp_exchange(s, c0, r->rows));
        FLCE_PHASE(ctx, s->stream, FLCE_T_ROWS, {
            flce_sm90_merge_kernel<T, Tgt><<<grid, 32 * FLCE_MERGE_WARPS, 0, s->stream>>>(s->ra, *r, n_stat,
                                                                                        FLCE_VP_GLOBAL, vp);
            FLCE_HOPPER_TRY("merge kernel (the ranks' statistics)", cudaGetLastError());
        });
        return FLCE_OK;
    }
    FLCE_PHASE(ctx, s->stream, FLCE_T_ROWS, {
        flce_sm90_merge_kernel<T, Tgt><<<grid, 32 * FLCE_MERGE_WARPS, 0, s->stream>>>(s->ra, *r, n_stat,
                                                                                    FLCE_VP_NONE, (float *)NULL);
        FLCE_HOPPER_TRY("merge kernel", cudaGetLastError());
    });
    return FLCE_OK;
}

// d_b of vocabulary columns [r->voff, r->voff + w) (and the padding on to Vp after the last
// tile) for the chunk at c0: the column sums of dlogits, formed from E, in fp32.
template <typename T, typename TL, typename Tgt>
static flce_status flce_hopper_dbias(flce_call_state<T, TL, Tgt> *s, const flce_sm90_rows *r, int64_t c0,
                                     int64_t w) {
    flce_context *ctx = s->ctx;
    const flce_config *cfg = s->cfg;
    const int64_t v0 = r->voff;
    const int64_t rows_w = v0 + w == cfg->vocab ? cfg->vocab_padded - v0 : w;
    const int acc = cfg->d_bias_dtype == FLCE_BF16;
    float *db = (acc ? (float *)(s->ws + s->p->off_db32) : (float *)s->t->d_bias) + v0;
    const int add = c0 > 0 || (!acc && cfg->accumulate_d_bias);
    FLCE_PHASE(ctx, s->stream, FLCE_T_DBIAS, {
        const unsigned grid = (unsigned)((rows_w + 511) / 512);
        flce_sm90_dbias_kernel<<<grid, 256, 0, s->stream>>>((const __nv_bfloat16 *)(s->ws + s->p->off_logits),
                                                            s->p->ldl, *r, (int)w, (int)rows_w, db, add);
        FLCE_HOPPER_TRY("d_bias kernel", cudaGetLastError());
    });
    return FLCE_OK;
}

// The gradients of vocabulary columns [r->voff, r->voff + w) (the tile whose E the buffer
// holds) for the chunk at c0.
template <typename T, typename TL, typename Tgt>
static flce_status flce_hopper_backward(flce_call_state<T, TL, Tgt> *s, const flce_sm90_rows *r, int64_t c0,
                                      int64_t w) {
    flce_context *ctx = s->ctx;
    const flce_config *cfg = s->cfg;
    const flce_tensors *t = s->t;
    const flce_plan *p = s->p;
    const int64_t H = cfg->hidden, V = cfg->vocab, Vp = cfg->vocab_padded, v0 = r->voff, rows = r->rows;
    const T *h_chunk = (const T *)t->hidden + c0 * H, *w_tile = (const T *)t->weight + v0 * H;
    const sm90_matrix E = {s->ws + p->off_logits, rows, w, p->ldl};
    const int last = v0 + w == V;
    // the last tile's d_W and d_b rows run on to Vp: the padding rows' gradient is 0
    const int64_t rows_w = last ? Vp - v0 : w;
    if (t->d_hidden != NULL) {
        // d_h[chunk] (rows x H) = dlogits (rows x w) @ W[tile] (w x H), in K parts, summed in order
        float *part = (float *)(s->ws + p->off_dh_part);
        sm90_problem q;
        q.a = E;
        q.b = {w_tile, w, H, H};
        q.d = {part, rows, H, H};
        q.trans_a = 0; q.trans_b = 1;
        q.M = rows; q.N = H; q.K = w; q.splits = p->dh_parts;
        flce_sm90_grad_args a;
        a.r = *r;
        void *dh = (char *)t->d_hidden + (size_t)c0 * H * flce_dtype_size(cfg->d_hidden_dtype);
        const int parts = sm90_make_shape(q).splits;
        const int64_t n = rows * H;
        const unsigned grid = (unsigned)((n / 4 + 255) / 256 < 4096 ? (n / 4 + 255) / 256 : 4096);
        FLCE_PHASE(ctx, s->stream, FLCE_T_DHIDDEN, {
            FLCE_HOPPER_TRY("d_hidden GEMM", sm90_gemm_check(q, 4));
            FLCE_HOPPER_TRY("d_hidden GEMM", r->xf
                                                  ? (sm90_gemm_launch<flce_sm90_dh<true>, float, 0, 1>(q, a, s->stream))
                                                  : (sm90_gemm_launch<flce_sm90_dh<false>, float, 0, 1>(q, a, s->stream)));
            if (p->dh_accumulator) {  // bf16 d_h over several tiles (or over the ranks): fp32, rounded once
                float *dh32 = (float *)(s->ws + p->off_dh32);
                flce_sm90_sum_parts_kernel<float><<<grid, 256, 0, s->stream>>>(part, parts, n, dh32, v0 > 0);
                FLCE_HOPPER_TRY("d_hidden sum", cudaGetLastError());
                if (last) FLCE_TRY(flce_finish_dh(s, dh, dh32, rows));
            } else if (cfg->d_hidden_dtype == FLCE_FP32) {
                flce_sm90_sum_parts_kernel<float><<<grid, 256, 0, s->stream>>>(
                    part, parts, n, (float *)dh, v0 > 0 || cfg->accumulate_d_hidden);
                FLCE_HOPPER_TRY("d_hidden sum", cudaGetLastError());
            } else {
                flce_sm90_sum_parts_kernel<__nv_bfloat16><<<grid, 256, 0, s->stream>>>(
                    part, parts, n, (__nv_bfloat16 *)dh, cfg->accumulate_d_hidden);
                FLCE_HOPPER_TRY("d_hidden sum", cudaGetLastError());
            }
        });
    }
    // (d_b before the d_W GEMM: the scaled d_W moves the targets' terms into E for it)
    if (t->d_bias != NULL) FLCE_TRY(flce_hopper_dbias(s, r, c0, w));
    if (t->d_weight != NULL) {
        // d_W[tile] (rows_w x H) (+)= dlogits^T (rows_w x rows) @ h_chunk (rows x H), fp32; a
        // bf16 d_W without an accumulator (one chunk of all the tokens, nothing to add to) is
        // written by the GEMM in bf16
        const int acc = p->dw_accumulator;
        const int bf16_out = !acc && cfg->d_weight_dtype == FLCE_BF16;
        char *dw = (acc ? s->ws + p->off_dw32 : (char *)t->d_weight) + (size_t)v0 * H * (bf16_out ? 2 : 4);
        const int add = c0 > 0 || (!acc && cfg->accumulate_d_weight);
        // the scaled d_W: its B operand v' h in the d_h parts' buffer (free once they are summed)
        __nv_bfloat16 *xs = (__nv_bfloat16 *)(s->ws + p->off_dh_part);
        sm90_problem q;
        q.a = E;
        q.b = {r->sc ? (const void *)xs : (const void *)h_chunk, rows, H, H};
        q.d = {dw, rows_w, H, H};
        q.trans_a = 1; q.trans_b = 1;
        q.M = rows_w; q.N = H; q.K = rows; q.splits = 1;
        flce_sm90_grad_args a;
        a.r = *r;
        FLCE_PHASE(ctx, s->stream, FLCE_T_DWEIGHT, {
            FLCE_HOPPER_TRY("d_weight GEMM", sm90_gemm_check(q, bf16_out ? 2 : 4));
            cudaError_t err;
            if (r->sc) {
                flce_sm90_xs_kernel<T><<<(unsigned)rows, 128, 0, s->stream>>>(
                    h_chunk, *r, (int)H, (int)w, (__nv_bfloat16 *)(s->ws + p->off_logits), p->ldl, xs);
                FLCE_HOPPER_TRY("d_weight operand kernel", cudaGetLastError());
                err = add ? sm90_gemm_launch<flce_sm90_dw_sc<true>, float, 1, 1>(q, a, s->stream)
                          : sm90_gemm_launch<flce_sm90_dw_sc<false>, float, 1, 1>(q, a, s->stream);
                FLCE_HOPPER_TRY("d_weight GEMM", err);
                const int cols = FLCE_DW_TARGET_COLS(H);
                const size_t smem = (size_t)cols * H * 4;
                FLCE_HOPPER_TRY("d_weight target kernel",
                                cudaFuncSetAttribute(flce_sm90_dw_target_kernel<T>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
                flce_sm90_dw_target_kernel<T><<<(unsigned)((w + cols - 1) / cols), FLCE_DW_TARGET_THREADS, smem,
                                                s->stream>>>(*r, h_chunk, (int)H, (int)w, (float *)dw);
                FLCE_HOPPER_TRY("d_weight target kernel", cudaGetLastError());
            } else if (bf16_out)
                err = r->xf ? sm90_gemm_launch<flce_sm90_dw<false, true, __nv_bfloat16>, __nv_bfloat16, 1, 1>(q, a, s->stream)
                            : sm90_gemm_launch<flce_sm90_dw<false, false, __nv_bfloat16>, __nv_bfloat16, 1, 1>(q, a, s->stream);
            else if (r->xf)
                err = add ? sm90_gemm_launch<flce_sm90_dw<true, true>, float, 1, 1>(q, a, s->stream)
                          : sm90_gemm_launch<flce_sm90_dw<false, true>, float, 1, 1>(q, a, s->stream);
            else
                err = add ? sm90_gemm_launch<flce_sm90_dw<true, false>, float, 1, 1>(q, a, s->stream)
                          : sm90_gemm_launch<flce_sm90_dw<false, false>, float, 1, 1>(q, a, s->stream);
            FLCE_HOPPER_TRY("d_weight GEMM", err);
        });
    }
    return FLCE_OK;
}

// lt_backward (flce_sm90_lt_backward): d_b from E, then dlogits written over E, then the
// cuBLASLt path's gradient GEMMs on them, over the real classes; d_W's padding rows (V .. Vp)
// are zeroed by the first chunk where it writes rather than adds.
template <typename T, typename TL, typename Tgt>
static flce_status flce_hopper_backward_lt(flce_call_state<T, TL, Tgt> *s, const flce_sm90_rows *r, int64_t c0,
                                         int64_t w) {
    flce_context *ctx = s->ctx;
    const flce_config *cfg = s->cfg;
    const int64_t V = cfg->vocab, Vp = cfg->vocab_padded, H = cfg->hidden, v0 = r->voff;
    if (s->t->d_bias != NULL) FLCE_TRY(flce_hopper_dbias(s, r, c0, w));
    FLCE_PHASE(ctx, s->stream, FLCE_T_ROWS, {
        __nv_bfloat16 *E = (__nv_bfloat16 *)(s->ws + s->p->off_logits);
        const int w_out = (int)flce_round_up(w, 8);  // within the row stride (a multiple of 64)
        if (r->xf)
            flce_sm90_dlogits_kernel<true><<<(unsigned)r->rows, 256, 0, s->stream>>>(E, s->p->ldl, *r, w_out);
        else
            flce_sm90_dlogits_kernel<false><<<(unsigned)r->rows, 256, 0, s->stream>>>(E, s->p->ldl, *r, w_out);
        FLCE_HOPPER_TRY("dlogits kernel", cudaGetLastError());
    });
    FLCE_TRY(flce_tile_backward(s, c0, r->rows, v0, w, 0));
    const int acc = s->p->dw_accumulator;
    if (s->t->d_weight != NULL && c0 == 0 && v0 + w == V && Vp > V && (acc || !cfg->accumulate_d_weight)) {
        const size_t es = acc ? 4 : flce_dtype_size(cfg->d_weight_dtype);
        char *dw = acc ? s->ws + s->p->off_dw32 : (char *)s->t->d_weight;
        FLCE_HOPPER_TRY("d_weight padding rows", cudaMemsetAsync(dw + (size_t)V * H * es, 0, (size_t)(Vp - V) * H * es,
                                                                 s->stream));
    }
    return FLCE_OK;
}

// Per chunk: the logits GEMM (statistics and E), the merge, the gradient GEMMs. With
// vocabulary tiles, a first logits GEMM over the whole vocabulary writes the statistics only,
// then each tile's E is computed again (bitwise the same accumulators) for its gradients.
template <typename T, typename TL, typename Tgt>
static flce_status flce_run_hopper(flce_call_state<T, TL, Tgt> *s) {
    const flce_config *cfg = s->cfg;
    const flce_plan *p = s->p;
    const int64_t N = cfg->n_tokens, V = cfg->vocab, C = p->chunk, tile = p->vocab_tile;
    const int tiled = p->n_vtiles > 1;
    flce_sm90_rows r;
    memset(&r, 0, sizeof(r));
    r.stat_m = (float *)(s->ws + p->off_stat);
    r.stat_s = r.stat_m + p->n_stat * p->ldc;
    r.stat_sz = r.stat_s + p->n_stat * p->ldc;
    r.stat_q = r.stat_sz + p->n_stat * p->ldc;
    r.stat_hi = (__nv_bfloat16 *)(s->ws + p->off_stat16);
    r.stat_lo = r.stat_hi + p->n_stat * p->ldc;
    r.ncs = r.stat_lo + p->n_stat * p->ldc;
    r.coef = (float *)(s->ws + p->off_rec);
    // the scaled d_W's exponents and row factors, where the plain transform's bf16 copies go
    r.ucode = (uint8_t *)r.stat_hi;
    r.vrow = (float *)(r.ucode + p->n_stat * p->ldc);
    r.untaken = (int *)(r.vrow + p->ldc);  // (the region holds (4 n_stat + 2) ldc bytes)
    r.ld = p->ldc;
    r.V = (int)V;
    r.cap = cfg->softcap;
    r.k = s->ra.p.k;
    r.temp = cfg->temperature;
    // class weights enter dz (and the epilogue's sum) only through the smoothing term
    r.cw = s->ra.class_weights != NULL && cfg->label_smoothing > 0.0f ? s->ra.class_weights : NULL;
    r.want_q = s->ra.p.want_entropy;
    // the general transform: a softcap, an entropy gradient, weighted smoothing
    r.xf = cfg->softcap > 0.0f || s->ra.grad_entropy != NULL || r.cw != NULL;
    r.sc = flce_sm90_dw_scaled(cfg, p, s->t, r.xf);
    for (int64_t c0 = 0; c0 < N; c0 += C) {
        r.rows = (int)(N - c0 < C ? N - c0 : C);
        s->ra.row0 = c0;
        if (tiled) {
            r.voff = 0;
            FLCE_TRY(flce_hopper_logits(s, &r, c0, V, 0, 1));
            FLCE_TRY(flce_hopper_merge(s, &r, c0));
            if (!s->backward) continue;
        }
        for (int64_t v0 = 0; v0 < V; v0 += tile) {
            const int64_t w = V - v0 < tile ? V - v0 : tile;
            r.voff = (int)v0;
            FLCE_TRY(flce_hopper_logits(s, &r, c0, w, s->backward, !tiled));
            if (!tiled) FLCE_TRY(flce_hopper_merge(s, &r, c0));
            if (r.sc && s->backward) {  // the targets' e out of E (flce_sm90_zero_target_kernel)
                flce_context *ctx = s->ctx;
                FLCE_PHASE(ctx, s->stream, FLCE_T_ROWS, {
                    flce_sm90_zero_target_kernel<<<(unsigned)((r.rows + 255) / 256), 256, 0, s->stream>>>(
                        (__nv_bfloat16 *)(s->ws + p->off_logits), p->ldl, r, (int)w);
                    FLCE_HOPPER_TRY("target kernel", cudaGetLastError());
                });
            }
            if (s->backward)
                FLCE_TRY(p->lt_backward ? flce_hopper_backward_lt(s, &r, c0, w) : flce_hopper_backward(s, &r, c0, w));
        }
    }
    return FLCE_OK;
}

// One call: prepare (targets checked and counted, exact target logits), the plan's schedule,
// finalize (the loss; bf16 d_W / d_b from their fp32 accumulators; the error record).
template <typename T, typename TL, typename Tgt>
static flce_status flce_run(flce_context *ctx, const flce_config *cfg, const flce_tensors *t,
                            const flce_plan *p, char *ws, cudaStream_t stream, int backward) {
    const int64_t N = cfg->n_tokens, H = cfg->hidden, V = cfg->vocab, Vp = cfg->vocab_padded;
    const Tgt *targets = (const Tgt *)t->targets;
    flce_call_scalars *scalars = (flce_call_scalars *)(ws + p->off_scalars);
    float *target_logit = (float *)(ws + p->off_target_logit);
    float *token_loss = t->token_loss ? t->token_loss : (float *)(ws + p->off_token_loss);
    // FLCE_TIMING: a call that autotuned GEMMs is left out of the per-phase times
    double t_ms_before[FLCE_T_COUNT];
    memcpy(t_ms_before, ctx->t_ms, sizeof(t_ms_before));
    const int tuned_before = ctx->gemm.tuned;

    flce_call_state<T, TL, Tgt> s;
    memset(&s, 0, sizeof(s));  // ra's padding too: it is copied into kernel parameters
    s.ctx = ctx; s.cfg = cfg; s.t = t; s.p = p;
    s.ws = ws; s.stream = stream; s.backward = backward;
    flce_rows_args<T, Tgt> &ra = s.ra;
    ra.ldl = p->ldl;
    ra.V = V;
    ra.bias = cfg->has_bias ? (const T *)t->bias : NULL;
    ra.targets = targets;
    ra.ignore_index = (long long)cfg->ignore_index;
    ra.target_logit = target_logit;
    ra.grad_token_loss = t->grad_token_loss;
    ra.scalars = scalars;
    ra.p.label_smoothing = cfg->label_smoothing;
    ra.p.z_loss_scale = cfg->z_loss_scale;
    ra.p.softcap = cfg->softcap;
    ra.p.grad_scale = cfg->grad_scale;
    ra.p.reduction = (int)cfg->reduction;
    // the temperature as a factor on the logits: log2(e) / T is log2(e) itself at T = 1
    ra.p.temperature = cfg->temperature;
    ra.p.inv_temp = 1.0f / cfg->temperature;
    ra.p.k = FLCE_LOG2E * ra.p.inv_temp;
    ra.class_weights = cfg->has_class_weights ? t->class_weights : NULL;
    ra.token_entropy = t->token_entropy;
    ra.token_logprob = t->token_logprob;
    ra.grad_entropy = backward ? t->grad_entropy : NULL;
    ra.grad_logprob = backward ? t->grad_logprob : NULL;
    ra.p.want_entropy = ra.token_entropy != NULL || ra.grad_entropy != NULL;
    ra.token_loss = token_loss;
    ra.token_lse = t->token_lse ? t->token_lse : (float *)(ws + p->off_token_lse);
    ra.tile_stats = (flce_row_stats *)(ws + p->off_tile_stats);
    ra.tile_grad = (flce_row_grad *)(ws + p->off_tile_grad);
    // vocab_parallel: this W's rows are classes v_off .. of V_total
    const int vp = cfg->vocab_parallel;
    ra.v_off = vp ? cfg->vocab_offset : 0;
    ra.V_total = vp ? cfg->vocab_total : V;
    ra.vp_stats = NULL;
    ra.target_weight = vp && ra.class_weights != NULL ? target_logit + N : NULL;

    FLCE_PHASE(ctx, stream, FLCE_T_PREPARE, {
        FLCE_CUDA_TRY(cudaMemsetAsync(scalars, 0, sizeof(flce_call_scalars), stream));
        FLCE_CUDA_TRY(cudaMemsetAsync(&scalars->first_bad_token, 0xff, sizeof(unsigned long long), stream));
        const int warps_per_block = 8;
        const unsigned grid = (unsigned)((N + warps_per_block - 1) / warps_per_block);
        flce_prepare_kernel<T, Tgt><<<grid, warps_per_block * 32, 0, stream>>>(
            (const T *)t->hidden, (const T *)t->weight, ra.bias, targets, N, H, V, ra.v_off, ra.V_total,
            ra.ignore_index, target_logit, scalars);
        FLCE_LAUNCH_CHECK("flce_prepare_kernel");
        if (vp && ra.class_weights != NULL) {  // each target's weight, from the rank that holds it
            flce_vp_weights_kernel<Tgt><<<1, 1024, 0, stream>>>(targets, N, V, ra.v_off, ra.V_total, ra.ignore_index,
                                                                ra.class_weights, target_logit + N);
            FLCE_LAUNCH_CHECK("flce_vp_weights_kernel");
        }
        // each target's logit comes from the one rank that holds its row (the others gave 0);
        // with class weights the targets' weights and the ranks' weight sums in the same buffer
        if (vp)
            FLCE_TRY(flce_allreduce(ctx, target_logit, ra.class_weights != NULL ? 2 * (size_t)N + 1 : (size_t)N,
                                    FLCE_COMM_SUM, stream,
                                    ra.class_weights != NULL ? "the target logits and weights" : "the target logits"));
        if (ra.class_weights != NULL) {
            flce_weight_sum_kernel<Tgt><<<1, 1024, 0, stream>>>(targets, N, ra.V_total, ra.ignore_index,
                                                                ra.class_weights, ra.target_weight, scalars);
            FLCE_LAUNCH_CHECK("flce_weight_sum_kernel");
        }
        if (backward && t->d_bias != NULL && !p->sm90) {
            flce_fill_ones_kernel<T><<<64, 256, 0, stream>>>((T *)(ws + p->off_ones), p->chunk);
            FLCE_LAUNCH_CHECK("flce_fill_ones_kernel");
        }
    });
    if constexpr (sizeof(T) == 2) {  // the Hopper path runs bf16 inputs only
        if (p->sm90) FLCE_TRY(flce_run_hopper(&s));
    }
    if (!p->sm90) FLCE_TRY(p->n_vtiles > 1 || vp ? flce_run_tiles(&s) : flce_run_chunks(&s));
    FLCE_PHASE(ctx, stream, FLCE_T_FINALIZE, {
        flce_finalize_kernel<Tgt><<<1, 1024, 0, stream>>>(token_loss, N, (int)cfg->reduction,
                                                           ra.class_weights != NULL, scalars, targets, t->loss,
                                                           ctx->host_status_device);
        FLCE_LAUNCH_CHECK("flce_finalize_kernel");
        if (backward && t->d_weight != NULL && p->dw_accumulator) {
            flce_add_f32_kernel<<<1024, 256, 0, stream>>>((__nv_bfloat16 *)t->d_weight,
                                                          (const float *)(ws + p->off_dw32), Vp * H,
                                                          cfg->accumulate_d_weight);
            FLCE_LAUNCH_CHECK("flce_add_f32_kernel (d_weight)");
        }
        if (backward && t->d_bias != NULL && cfg->d_bias_dtype == FLCE_BF16) {
            flce_add_f32_kernel<<<64, 256, 0, stream>>>((__nv_bfloat16 *)t->d_bias,
                                                        (const float *)(ws + p->off_db32), Vp,
                                                        cfg->accumulate_d_bias);
            FLCE_LAUNCH_CHECK("flce_add_f32_kernel (d_bias)");
        }
    });
    if (ctx->timing && ctx->gemm.tuned != tuned_before) memcpy(ctx->t_ms, t_ms_before, sizeof(t_ms_before));
    else if (ctx->timing) ctx->t_calls++;
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
    if (cfg->vocab_parallel && ctx->comm.allreduce == NULL)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_COMM,
                         "vocab_parallel = 1 needs a communicator: flce_set_comm(ctx, &comm) first");
    // the Hopper path for bf16 inputs where the context takes it (flce_set_hopper)
    int sms = 0;
    if (ctx->hopper && cfg->dtype == FLCE_BF16) {
        int dev = 0;
        FLCE_CUDA_TRY(cudaGetDevice(&dev));
        FLCE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }
    flce_plan plan;
    flce_make_plan(cfg, workspace_bytes, backward && t->d_weight != NULL, backward, sms, &plan);
    if (plan.chunk == 0) {
        size_t need = 0;
        flce_workspace_for(cfg, workspace_bytes, sms, &need);
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
    if (plan.logits_size == 2)  // bf16 logits, and the Hopper path
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
