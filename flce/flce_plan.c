/*
flce_plan.c - the host side of the library that needs no GPU: configuration defaults and
checks, status messages, and the planner with its cost model (flce.h's flce_workspace_size,
flce_chunk_tokens and flce_vocab_tile). Plain C; the CPU tests (test/test_cpu.c,
flce/python/tests/test_cpu.py) check it on machines without a GPU.

The planner lays out both schedules for the budget (the largest chunk; or, for chunks of 1, 2,
4, ... tokens, the widest vocabulary tile that fits beside it) and takes the one its cost model
finds faster; the layout (flce_plan's offsets) is what the cuBLASLt path (flce_lt.cu) and the
Hopper path (flce_sm90.cu) run in. The only question it asks the device, which path new
contexts take there and on how many multiprocessors, goes to flce.cu (flce_device_hopper_sms).
*/
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "flce_internal.h"

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

flce_status flce_fail(char *msg, size_t len, flce_status st, const char *fmt, ...) {
    if (msg != NULL && len > 0) {
        int n = snprintf(msg, len, "flce: %s: ", flce_status_string(st));
        va_list ap;
        va_start(ap, fmt);
        if (n >= 0 && (size_t)n < len) vsnprintf(msg + n, len - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return st;
}

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

size_t flce_dtype_size(flce_dtype t) { return t == FLCE_FP32 ? 4 : 2; }

int flce_is_dtype(flce_dtype t) { return t == FLCE_BF16 || t == FLCE_FP32; }

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

// The fused gradient GEMMs' tile width: the narrow 224 columns where they cover H in fewer
// columns than 256 and the scaled kernels run (flce_sm90_scaled_plan; the other fused kernels
// have 256-column tiles only). A call without d_W then runs the plain d_h on 256-column tiles.
static int64_t flce_sm90_grad_cols(const flce_config *cfg, int dw_accumulator) {
    const int64_t H = cfg->hidden;
    const int64_t wide = (H + FLCE_SM90_BN - 1) / FLCE_SM90_BN * FLCE_SM90_BN;
    const int64_t narrow = (H + FLCE_SM90_BN_NARROW - 1) / FLCE_SM90_BN_NARROW * FLCE_SM90_BN_NARROW;
    return flce_sm90_scaled_plan(cfg, dw_accumulator) && narrow < wide ? FLCE_SM90_BN_NARROW : FLCE_SM90_BN;
}

// The Hopper path's d_h output tiles for a chunk of `rows` tokens, `cols` wide.
static int64_t flce_sm90_dh_tiles(int64_t rows, int64_t H, int64_t cols) {
    return ((rows + FLCE_SM90_BM - 1) / FLCE_SM90_BM) * ((H + cols - 1) / cols);
}

// K parts of the Hopper path's d_h GEMM for a chunk: the fewest (at most 4) with which its
// output tiles fill the multiprocessors in nearly whole waves (a chunk of ~3K tokens at
// H = 1024 has fewer tiles than an H100 or H200 has multiprocessors).
static int flce_sm90_dh_parts(int64_t chunk, int64_t H, int64_t cols, int sms) {
    const int64_t tiles = flce_sm90_dh_tiles(chunk, H, cols);
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
The modelled time (seconds) of the Hopper path's fused d_h GEMMs over all chunks and tiles:
whole waves of 128 x 256 output tiles, each K part a wave at the rate per multiprocessor. A
chunk's tiles rarely fill the multiprocessors in whole waves (at H = 896, chunks of 3328 make
104 tiles for 132 SMs in every split: a 79% wave), which the cost of a GEMM per logit misses.
*/
static double flce_sm90_dh_time(const flce_config *cfg, const flce_plan *p, double rate) {
    const int64_t N = cfg->n_tokens, C = p->chunk;
    const double wave = 2.0 * FLCE_SM90_BM * (double)p->grad_cols * ((double)p->vocab_tile / p->dh_parts) /
                        (rate / p->sm90);
    const int64_t last = N - (p->n_chunks - 1) * C;  // the last chunk's rows
    double t = 0.0;
    for (int k = 0; k < 2; k++) {
        const int64_t rows = k == 0 ? C : last, count = k == 0 ? p->n_chunks - 1 : 1;
        const int64_t work = flce_sm90_dh_tiles(rows, cfg->hidden, p->grad_cols) * p->dh_parts;
        t += (double)count * (double)((work + p->sm90 - 1) / p->sm90) * wave;
    }
    return t * (double)p->n_vtiles;
}

/*
The modelled time (seconds) of one launch of a Hopper GEMM with M x N outputs in tiles of bm x bn
and K deep, in whole waves over the multiprocessors. The tile schedule launches its GEMMs per
vocabulary tile, a few waves each: at 65536 x 1024 x 176256 in 160 MiB, tiles of 8832 columns
make 276 d_W tiles (2.09 waves, the third a tenth full) where 8448 make 264 (2 waves), and the
call runs 4% faster on the narrower tile (dev/RESULTS.md).
*/
static double flce_sm90_waves_time(int64_t M, int64_t N, int64_t K, int64_t bm, int64_t bn, int sms, double rate) {
    const int64_t tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn), waves = (tiles + sms - 1) / sms;
    return (double)waves * 2.0 * (double)bm * (double)bn * (double)K / (rate / sms);
}

/*
The Hopper path's gradients come one of two ways: the fused GEMMs form dlogits from E as they load
it (flce_sm90_dh, flce_sm90_dw), or a pass writes dlogits over E (4 bytes a logit moved) and
cuBLASLt's GEMMs take them, as on the cuBLASLt path ("lt_backward"). The fused GEMMs' cost per logit
grows with H (the d_W GEMM's transform needs per-token coefficients every K step), the pass's does
not: on an H200 (dev/RESULTS.md, with both d_W GEMMs in clusters of two) the fused route wins at H =
2048 in the chunk schedule (0.5-1% at 16384 x 2048 x 128256, 2-4% at 32768 x 2048) and loses at 3072
(2-3%) and 4096 (up to 2%), and in the tile schedule (lean workspaces) at 2048 too (up to 2%). Where
the direct d_W runs (cuBLASLt's GEMM on E, no transform: flce_sm90.cu) the fused route has no d_W
transform left, and in the chunk schedule it is 2-6% faster than the pass at H = 3072 and 4096 too
(16384 x 3072 x 128256, 16384 x 4096 x 151936, chunks of 2816 and 2048 tokens; 4096 x 4096 x 128256,
2048): there the H rule yields to it (`direct`: the config's scaled gradients; a call without d_W
then runs the fused d_h, which at H = 4096 was level with the pass and cuBLASLt's d_h). Not in short
chunks: at 16384 x 3072 x 128256 in 300 MiB the direct route's chunks of 896 tokens (its d_h parts
take room) ran 4.5% slower than the pass's chunks of 1024, so at H = 3072 the rule yields from
FLCE_DIRECT_MIN_CHUNK tokens on. From H = 4096 it yields at every chunk: there, with d_h and the
direct d_W side by side in short chunks, the direct route took 4-8% off a call on an H100
(16384 x 4096 x 151936 in 300 MiB, 896 tokens against the pass's 768; 4096 x 4096 x 128256 in
300 MiB, 1024) and 3-8% in chunks of 1536 (16384 x 4096 x 151936 and 16384 x 8192 x 128256 in 512
MiB); but its d_h parts can leave a shorter chunk than the pass's (16384 x 8192 x 128256 in 300
MiB: 768 tokens against 1024, 3% slower), so flce_make_plan weighs the pass's own chunks against
it by the cost model there (FLCE_CALL_PASS). In the tile schedule the direct route beat the pass
at H = 2048 (on an H100, 16384 x 2048 x 128256 in chunks of 2048 tokens and 5 tiles: 51.1
against 52.3 ms; level in chunks of 4096 and 17 tiles), so there the rule yields to it below H =
3072; from H = 3072 it yields where the chunk runs side by side (flce_side_chunk): in 160 MiB,
chunks of 1024, 5% faster at 16384 x 3072 x 128256, 8% at 16384 x 4096 x 151936, 4% at 4096 x
4096 x 128256, 1-4% at 16384 x 8192 x 128256; in chunks of 2048 the two routes were level (0-2%
either way). The pass also wins where the fused GEMMs' tiles fit H badly: at H = 896 on 256-column
tiles (3.5 tiles, 12.5% of their products on zero columns) cuBLASLt's gradients made the call 3-8%
faster; on the 224-column tiles that the scaled GEMMs take there (flce_sm90_grad_cols: four whole
tiles) the fused route is 2.5-3% faster than cuBLASLt's at 1 GiB and 7% at 1.5 GiB. The rule takes
the pass for any H of 512 or more whose last tile of the better width is mostly empty. And it wins
wherever dz needs the general transform (a softcap, smoothing with class weights): the fused GEMMs
then form each element's dz from a log2 and a dozen FMAs in the products' registers, in both GEMMs
(by instruction count their issue slots, not the tensor cores, bound them), where the pass forms it
once at memory speed: a softcap's call 73.0 -> 47.2 ms at 16384 x 2048 x 128256 and 127.8 -> 88.1 at
32768 x 1536 x 151936 (the plain call 40.1 and 71.3; Liger 0.8.5 49.6 and 96.8). An entropy
gradient, a call's argument rather than the config's, does the same through flce_make_plan's
FLCE_CALL_ENTROPY_GRAD (the call's plan, within a workspace sized without it). Known from those and whether
the plan has vocabulary tiles. flce_dev_set_lt_backward (flce_internal.h) forces either, for dev/
and the tests (read when a plan is made: the layouts differ).
*/
#define FLCE_LT_BACKWARD_MIN_H 3072        // the chunk schedule
#define FLCE_LT_BACKWARD_MIN_H_TILED 2048  // the tile schedule
#define FLCE_DIRECT_MIN_CHUNK 2048         // the chunk schedule's rule yields to the direct d_W from here
#define FLCE_DIRECT_ALL_H 4096             // and at every chunk from this H
// d_h and the direct d_W run side by side in chunks of up to this many tokens (flce_side_sms)
#define FLCE_SIDE_MAX_CHUNK 1024
static int flce_side_chunk(const flce_config *cfg, int64_t chunk) {
    return !cfg->vocab_parallel && chunk <= FLCE_SIDE_MAX_CHUNK;
}
static int g_lt_backward = -1;  // flce_dev_set_lt_backward: -1 by H, else 0 or 1
static unsigned g_plan_switches;  // counts the dev switches' changes: a kept plan is stale after one

unsigned flce_plan_switches(void) { return g_plan_switches; }

void flce_dev_set_lt_backward(int mode) {
    g_lt_backward = mode == 0 || mode == 1 ? mode : -1;
    g_plan_switches++;
}

// The config's options whose dz needs the general transform (and whose logits epilogue keeps
// the 256-column statistics: flce_sm90_stat_tile): a softcap, smoothing with class weights.
static int flce_general_dz(const flce_config *cfg) {
    return cfg->softcap > 0.0f || (cfg->has_class_weights && cfg->label_smoothing > 0.0f);
}

static int flce_sm90_lt_backward(const flce_config *cfg, int tiled, int forced, int64_t cols, int direct,
                                 int64_t chunk) {
    if (g_lt_backward >= 0) return g_lt_backward;
    const int64_t H = cfg->hidden, covered = (H + cols - 1) / cols * cols;
    const int by_h = tiled ? H >= FLCE_LT_BACKWARD_MIN_H_TILED &&
                                 !(direct && (H < FLCE_LT_BACKWARD_MIN_H || flce_side_chunk(cfg, chunk)))
                           : H >= FLCE_LT_BACKWARD_MIN_H &&
                                 !(direct && (chunk >= FLCE_DIRECT_MIN_CHUNK || H >= FLCE_DIRECT_ALL_H));
    return forced || flce_general_dz(cfg) || by_h || (H >= 512 && (covered - H) * 10 > H);
}

/*
The Hopper path's statistics tile: the logits GEMM's tile width. Its wide schedule (128 x 192
tiles a warpgroup, ping-pong) took 13% fewer cycles than the 64 x 256 ping-pong one in flce's
logits GEMM (ncu, 4096 x 176256 x 1024), and a call 0.5-2.7% less time on either gradient route
(dev/RESULTS.md: the fused d_h GEMM finds a K step's statistics tile by a compare, not a
division by 192). The epilogues of a bias, a softcap or smoothing with class weights keep 256
columns (they need more registers than the wide tile's 192 accumulators a thread leave). The
fused gradient GEMMs read either width (flce_dev_set_wide_stats for dev/ comparisons). Known
from the config alone, so that every call of a plan (and every rank of a vocabulary-parallel
group) agrees.
*/
static int g_wide_stats = -1;  // flce_dev_set_wide_stats: -1 the rule above, else 0 or 1

void flce_dev_set_wide_stats(int mode) {
    g_wide_stats = mode == 0 || mode == 1 ? mode : -1;
    g_plan_switches++;
}

static int64_t g_plan_chunk;  // flce_dev_set_plan_chunk: 0, or the Hopper path's chunk cap
static int g_dh_parts;        // and 0, or its d_h GEMM's K parts

void flce_dev_set_plan_chunk(int64_t chunk, int dh_parts) {
    g_plan_chunk = chunk > 0 ? chunk : 0;
    g_dh_parts = dh_parts > 0 ? (dh_parts < FLCE_DEV_MAX_DH_PARTS ? dh_parts : FLCE_DEV_MAX_DH_PARTS) : 0;
    g_plan_switches++;
}

/*
The direct gradients side by side: where the chunk is short, cuBLASLt's d_W GEMM on E reads and
writes the fp32 d_W (8 bytes an element) for few products (2 C flops an element), more bytes
than its FLOPs take time for, while our d_h GEMM on E is bound by its products. Run one after the
other, the d_W leaves the tensor cores idle for its traffic; side by side on two streams, the
d_h GEMM's CTAs on half the SMs and cuBLASLt targeting the other half, the traffic runs under
the d_h's products. Measured on an H100 (dev/RESULTS.md): 3-9% off a call in chunks of 512 to
1024 tokens, 0-1% at 1408 and 1536, 5-8% slower in chunks of 3328 (a 1 GiB plan), where the d_W
has products enough to hide its traffic and half the SMs are too few for them; half the SMs each
was the best split (48 to 88 for d_h tried). So up to FLCE_SIDE_MAX_CHUNK. Not under
vocab_parallel (its d_h is summed over the ranks beside the d_W: not measured).
*/
static int g_side_sms = -1;  // flce_dev_set_side: -1 the rule above, 0 never, else d_h's SMs

void flce_dev_set_side(int dh_sms) {
    g_side_sms = dh_sms >= 0 ? dh_sms : -1;
    g_plan_switches++;
}

static int flce_side_sms(const flce_config *cfg, int64_t chunk, int sms) {
    if (g_side_sms >= 0) return g_side_sms < sms ? g_side_sms : 0;
    return flce_side_chunk(cfg, chunk) ? sms / 2 : 0;
}

static int64_t flce_sm90_stat_tile(const flce_config *cfg) {
    const int logit = cfg->has_bias || flce_general_dz(cfg);
    return logit || g_wide_stats == 0 ? FLCE_SM90_STAT_FULL : FLCE_SM90_STAT_WIDE;
}

// Lays out the workspace for chunks of `chunk` tokens and vocabulary tiles of `vtile` columns
// (>= Vp: the whole vocabulary, no tiles); returns the total bytes (SIZE_MAX: more than
// size_t can count). sms: 0 for the cuBLASLt path, else the Hopper path on a GPU of that many
// multiprocessors (its tiles are multiples of the statistics tile over the V real classes).
static size_t flce_layout(const flce_config *cfg, int64_t chunk, int64_t vtile, int dw_accumulator, int sms,
                          int call, flce_plan *p) {
    const int64_t V = cfg->vocab, Vp = cfg->vocab_padded;
    size_t es = flce_dtype_size(cfg->dtype), n = (size_t)cfg->n_tokens;
    size_t o = 0;
    memset(p, 0, sizeof(*p));
    p->sm90 = sms > 0 ? sms : 0;
    p->chunk = chunk;
    const int64_t span = p->sm90 ? V : Vp;  // the columns the tiles cover
    p->vocab_tile = vtile < span ? vtile : span;
    p->n_vtiles = (span + p->vocab_tile - 1) / p->vocab_tile;
    const int tiled = p->n_vtiles > 1;
    // (the route by the padded vocabulary's tiles under vocab_parallel, as the plan every rank
    // shares saw them: the last rank's fewer real classes may fit one tile)
    const int scaled = flce_sm90_scaled_plan(cfg, dw_accumulator);  // the scaled gradients may run
    p->grad_cols = p->sm90 ? flce_sm90_grad_cols(cfg, dw_accumulator) : FLCE_SM90_BN;
    p->lt_backward = p->sm90 && flce_sm90_lt_backward(cfg, vtile < (cfg->vocab_parallel ? Vp : span),
                                                      call & (FLCE_CALL_ENTROPY_GRAD | FLCE_CALL_PASS), p->grad_cols,
                                                      scaled, chunk);
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
        p->stat_tile = flce_sm90_stat_tile(cfg);
        p->n_stat = (V + p->stat_tile - 1) / p->stat_tile;
        p->dh_parts = chunk <= 0 || p->lt_backward ? 1
                      : g_dh_parts > 0             ? g_dh_parts
                                                   : flce_sm90_dh_parts(chunk, cfg->hidden, p->grad_cols, sms);
        p->side_dh_parts = p->dh_parts;  // (fewer where the side by side is planned, below)
        // (not over vocabulary tiles, whose d_h the GEMM may add to the accumulator itself, nor
        // where a sweep sets the parts)
        p->dh_split = chunk > 0 && !p->lt_backward && !tiled && !p->dh_accumulator && g_dh_parts == 0;
    }
    const size_t ldc = (size_t)p->ldc;
    p->lt_bytes = p->sm90 && !p->lt_backward ? 0 : FLCE_LT_WORKSPACE;
    p->off_lt = o;            o = flce_append(o, p->lt_bytes);
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
    // The row statistics: three arrays, the tiles' max, sum and sum of z (the fourth, the
    // entropy's q, below). Where the call's gradients are the scaled ones (flce_sm90.cu's
    // flce_sm90_scaled: no softcap or entropy gradient, whose general transform reads them, and
    // no label smoothing, the one reader of the sum of z) and there is no bias (d_b reads the
    // tiles' scales), the merge is their last reader: the max and sum then share the d_h parts'
    // region below, 31 MiB at 16384 x 2048 x 128256 in chunks of 4096.
    p->stats_shared = p->sm90 && !vp && !(call & (FLCE_CALL_ENTROPY_GRAD | FLCE_CALL_PLAIN)) &&
                      flce_sm90_scaled_config(cfg, dw_accumulator) && !p->lt_backward && !cfg->has_bias;
    const size_t stats = flce_bytes((p->stats_shared ? 2 : 3) * (size_t)p->n_stat, ldc, 4);
    p->off_stat = o;          o = flce_append(o, p->stats_shared ? 0 : stats);
    // (the Hopper d_W GEMM's bf16 copies: each tile's scale as hi + lo, and -cs per row; or the
    // scaled gradients' exponents per tile and two row factors)
    p->off_stat16 = o;        o = flce_append(o, p->sm90 ? flce_bytes(2 * (size_t)p->n_stat + 5, ldc, 2) : 0);
    p->off_rec = o;           o = flce_append(o, flce_bytes(3 * ldc, 4, 1));
    // The entropy's q per row and statistics tile (planned whether or not a call asks for the
    // entropy: the config does not say) is written by the logits GEMM and last read by the
    // merge, before the chunk's d_h parts and the scaled d_W's operand use this region (one
    // stream orders them): on the fused route they share it, which at 65536 x 1024 x 176256 in
    // 1 GiB is the 10 MB between chunks of 2688 and 2816 tokens. The shared statistics follow q.
    {
        // (one K part over an fp32 accumulator: the d_h GEMM adds to it itself, and the region
        // need only hold v' h, the d_W's B operand, and a little of cuBLASLt's workspace)
        const size_t xs = flce_append(0, flce_bytes(C, H, 2));
        const size_t parts = !p->sm90 || p->lt_backward                     ? 0
                             : flce_plan_dh_into_accumulator(p, p->dh_parts) ? flce_append(xs, FLCE_DW_LT_WORKSPACE)
                                                                              : flce_bytes((size_t)p->dh_parts * C, H, 4);
        const size_t q = p->sm90 ? flce_bytes((size_t)p->n_stat, ldc, 4) : 0;
        const size_t qs = p->stats_shared ? flce_append(flce_append(0, q), stats) : q;
        size_t region = parts > qs ? parts : qs;
        p->off_dh_part = o;
        p->off_stat_q = o;
        p->off_xs = o;
        if (p->stats_shared) p->off_stat = o + flce_append(0, q);
        // The scaled d_W by cuBLASLt on E: its B operand v' h, then cuBLASLt's workspace in
        // what the region has left (the d_h parts are summed by then): at least v' h's size, as
        // the parts are fp32 (28 MB at 65536 x 1024 x 176256 in 1 GiB, where 5 MB more would
        // shorten the chunk)
        p->dw_direct = p->sm90 && !p->lt_backward && scaled;
        if (p->dw_direct && o != SIZE_MAX && region != SIZE_MAX && xs < region) {
            p->off_lt = o + xs;
            p->lt_bytes = region - xs < FLCE_LT_WORKSPACE ? region - xs : FLCE_LT_WORKSPACE;
            p->side_sms = flce_side_sms(cfg, chunk, p->sm90);
            if (p->side_sms) {
                // side by side, fewer parts where they fill the d_h GEMM's share of the
                // multiprocessors as well (never more: each part is the chunk's fp32 d_h); a call
                // that does not run them side by side (no d_W, an entropy output) takes dh_parts
                if (g_dh_parts == 0 && chunk > 0) {
                    const int fewer = flce_sm90_dh_parts(chunk, cfg->hidden, p->grad_cols, p->side_sms);
                    if (fewer < p->dh_parts) p->side_dh_parts = fewer;
                }
                // the d_h parts, v' h and cuBLASLt's workspace (as much as one after the other
                // has with those parts, at most FLCE_DW_LT_WORKSPACE: the kernels cuBLASLt
                // ranks for this d_W on its share of the SMs need 4 bytes of it, and the rest of
                // the region is E's) all live at once
                const size_t pa = flce_plan_dh_into_accumulator(p, p->side_dh_parts)
                                      ? 0 : flce_append(0, flce_bytes((size_t)p->side_dh_parts * C, H, 4));
                const size_t base = pa > qs ? pa : qs;
                const size_t room = pa < parts && base != SIZE_MAX && base > xs ? base - xs : p->lt_bytes;
                p->lt_bytes = room < FLCE_DW_LT_WORKSPACE ? room : FLCE_DW_LT_WORKSPACE;
                p->off_xs = o + pa;
                p->off_lt = o + pa + xs;
                const size_t side = flce_append(flce_append(pa, xs), p->lt_bytes);
                if (side > region) region = side;
            }
            const size_t prod = flce_append(0, flce_bytes(C, H, 4));  // the direct d_h's product
            p->off_dh_ws = o + (prod < region ? prod : region);
            p->dh_ws_bytes = prod >= region                       ? 0
                             : region - prod < FLCE_LT_WORKSPACE ? region - prod
                                                                 : FLCE_LT_WORKSPACE;
        } else {
            p->dw_direct = 0;
        }
        o = flce_append(o, region);
    }
    p->off_vp = o;            o = flce_append(o, vp ? flce_bytes(5, C, 4) : 0);  // the exchange buffer
    p->off_logits = o;        o = flce_append(o, flce_bytes(C, (size_t)p->ldl, p->logits_size));
    p->total = o;
    p->n_chunks = chunk > 0 ? (cfg->n_tokens + chunk - 1) / chunk : 0;
    return o;
}

// Largest chunk (<= hi) whose layout with tiles of vtile columns fits budget; 0 if not even
// one token fits. The layout grows with the chunk but for the Hopper path's d_h parts, chosen
// per chunk, which can make a shorter chunk need more: hi itself is tried first (a call whose
// tokens fit one chunk, given the workspace that chunk needs, bisected down to two), then a
// binary search, which may settle a little below the largest.
static int64_t flce_fit_chunk(const flce_config *cfg, size_t budget, int64_t hi, int64_t vtile,
                              int dw_accumulator, int sms, int call) {
    flce_plan p;
    if (hi > 0 && flce_fits(flce_layout(cfg, hi, vtile, dw_accumulator, sms, call, &p), budget)) return hi;
    const int64_t top = hi;
    int64_t lo = 0;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (flce_fits(flce_layout(cfg, mid, vtile, dw_accumulator, sms, call, &p), budget)) lo = mid;
        else hi = mid - 1;
    }
    // (the next multiples of FLCE_CHUNK_MULTIPLE above it, past a dip of more d_h parts)
    const int64_t base = lo / FLCE_CHUNK_MULTIPLE * FLCE_CHUNK_MULTIPLE;
    for (int64_t k = 1; k <= 8 && base + k * FLCE_CHUNK_MULTIPLE <= top; k++)
        if (flce_fits(flce_layout(cfg, base + k * FLCE_CHUNK_MULTIPLE, vtile, dw_accumulator, sms, call, &p), budget))
            lo = base + k * FLCE_CHUNK_MULTIPLE;
    return lo;
}

// Largest vocabulary tile (a multiple of `unit`, <= hi) for chunks of `chunk` tokens that
// fits budget; 0 if none.
static int64_t flce_fit_vtile(const flce_config *cfg, size_t budget, int64_t chunk, int64_t hi,
                              int dw_accumulator, int sms, int call, int64_t unit) {
    flce_plan p;
    int64_t lo = 0;
    hi /= unit;  // in units
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        const size_t bytes = flce_layout(cfg, chunk, mid * unit, dw_accumulator, sms, call, &p);
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
                                 int sms, int call) {
    flce_plan p;
    while (c > 0) {
        const int64_t cb = flce_balance(cfg->n_tokens, c, FLCE_CHUNK_MULTIPLE);
        if (flce_fits(flce_layout(cfg, cb, vtile, dw_accumulator, sms, call, &p), budget)) return cb;
        c = cb > FLCE_CHUNK_MULTIPLE ? cb - FLCE_CHUNK_MULTIPLE : cb - 1;
    }
    return 0;
}

// The chunk schedule's plan in p: the largest chunk (<= hi) of the whole vocabulary that fits,
// in its balanced form; 0 (p untouched) where none does.
static int64_t flce_fit_whole_vocab(const flce_config *cfg, size_t budget, int64_t hi, int64_t span,
                                    int dw_accumulator, int sms, int call, flce_plan *p) {
    int64_t c = flce_fit_chunk(cfg, budget, hi, span, dw_accumulator, sms, call);
    c = c > 0 ? flce_fit_balanced(cfg, budget, c, span, dw_accumulator, sms, call) : 0;
    if (c > 0) flce_layout(cfg, c, span, dw_accumulator, sms, call, p);
    return c;
}

/*
The modelled time of a schedule (seconds), to choose between the chunk schedule (3 GEMMs, the
whole vocabulary per chunk) and the tile schedule (4 GEMMs: the logits of a tile are computed
once for the row statistics and once more for the gradients, on the Hopper path but for the
first tile, whose E the statistics pass writes). The terms are what the H200 measurements in
dev/RESULTS.md show (the constants are fitted to them): GEMM time, longer when the chunk or
tile is short (a k or n of 128 halves the rate); the bytes the row passes and the logits GEMMs
move per logit; the fp32 d_W read and written again by every chunk after the first (with the
Hopper path's cuBLASLt gradients only what their d_W GEMM's products do not cover: counted in
full, they sent 16384 x 4096 x 151936 in 300 MiB to tiles that ran 5% slower than chunks of
768 tokens; and of a chunk under FLCE_DW_COVER_CHUNK tokens only that share of the products
covers, as its few K steps leave each tile's fp32 read and write in the open: on an H100 the
chunks of 512 tokens that this sends to tiles at 16384 x 2048 x 128256 and 32768 x 2048 x
128256 in 160 MiB were 5.5% slower than the tiles, d_W alone there taking 3x its products'
time); the fp32 d_h of a chunk read and written by every tile; and a fixed cost per
launch.
Only the comparison of two schedules matters, not the absolute value.
*/
#define FLCE_DW_COVER_CHUNK 1024  // (the cost model below)
double flce_plan_cost(const flce_config *cfg, const flce_plan *p, int backward, int needs_dw) {
    const double bandwidth = 3.5e12, launch = 3e-6;
    const double N = (double)cfg->n_tokens, H = (double)cfg->hidden, Vp = (double)cfg->vocab_padded;
    const int tiled = p->n_vtiles > 1;
    const double gemms = backward ? (tiled ? 4.0 : 3.0) : 1.0;
    if (p->sm90) {
        // the Hopper path: GEMMs with the loss in their epilogues and operand loads, a short
        // chunk wasting part of the 128-row tiles; per logit only E (written once, read by the
        // two gradient GEMMs); d_W added to once per chunk; the d_h partials of every tile.
        // cuBLASLt's d_W (on dlogits, or the direct d_W on E) counts as cuBLASLt's route does.
        const double V = (double)cfg->vocab, rate = 7.0e14;
        const int fused_dw = !p->lt_backward && !p->dw_direct;
        const double gemm = 2.0 * N * V * H / rate * (1.0 + 64.0 / (double)p->chunk);
        double t = gemms * gemm;
        if (backward && !p->lt_backward)  // the fused d_h GEMM in its waves of tiles
            t += flce_sm90_dh_time(cfg, p, rate) - gemm;
        if (tiled) {
            // the tile schedule's GEMMs of a chunk and tile, a few waves each: the logits GEMM
            // (once for the statistics and, backward, once more but for the first tile, whose E
            // comes with the statistics), and the fused d_W GEMM (cuBLASLt's tiles are its own)
            const int64_t C = p->chunk, last = cfg->n_tokens - (p->n_chunks - 1) * C;
            const int64_t lastv = cfg->vocab - (p->n_vtiles - 1) * p->vocab_tile;
            double waves = 0.0;
            for (int k = 0; k < 4; k++) {  // (full or last chunk) x (full or last tile)
                const int64_t rows = k & 1 ? last : C, cols = k & 2 ? lastv : p->vocab_tile;
                const double chunks = (double)(k & 1 ? 1 : p->n_chunks - 1);
                const double tiles = (double)(k & 2 ? 1 : p->n_vtiles - 1);
                const double logits = backward ? 2.0 * tiles - (k & 2 ? 0.0 : 1.0) : tiles;
                double one = logits * flce_sm90_waves_time(rows, cols, cfg->hidden, FLCE_SM90_BM, p->stat_tile,
                                                           p->sm90, rate);
                if (backward && fused_dw)
                    one += tiles * flce_sm90_waves_time(cols, cfg->hidden, rows, FLCE_SM90_BM, p->grad_cols,
                                                        p->sm90, rate);
                waves += chunks * one;
            }
            t += waves - (backward ? (fused_dw ? 3.0 : 2.0) : 1.0) * gemm;
        }
        double bytes = backward ? N * V * 6.0 : 0.0;
        if (backward && needs_dw) {
            // the fp32 d_W read and written again by each chunk; cuBLASLt's d_W GEMM does that
            // behind its products (beta = 1): only what its product's time does not cover shows
            // (in a chunk under FLCE_DW_COVER_CHUNK tokens, that share of the products covers)
            const double cover = p->chunk < FLCE_DW_COVER_CHUNK ? (double)p->chunk / FLCE_DW_COVER_CHUNK : 1.0;
            const double over = Vp * H * 8.0 / bandwidth - cover * 2.0 * (double)p->chunk * V * H / rate;
            if (fused_dw) bytes += ((double)p->n_chunks - 0.5) * Vp * H * 8.0;
            else if (over > 0.0) t += ((double)p->n_chunks - 0.5) * over;
        }
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

// The tile schedule's chunks between powers of two: tried from this many tokens (measured at
// 32768 x 1536 x 151936 in 160 MiB on an H100: 1280 tokens in 3 tiles 7% faster than 2048 in 7;
// chunks of 896 in fewer tiles 8-13% slower than 1024 at H = 2048 to 4096, dev/RESULTS.md)
#define FLCE_TILE_CHUNK_QUARTERS_FROM 1024

// Whether a bf16 d_weight in chunks of `chunk` tokens is summed in an fp32 accumulator: over
// several chunks, or added onto an existing one; one chunk of every token writes it whole.
static int flce_dw_accumulated(const flce_config *cfg, int64_t chunk) {
    return cfg->d_weight_dtype == FLCE_BF16 && (chunk < cfg->n_tokens || cfg->accumulate_d_weight);
}

// needs_dw: this call produces d_weight (the accumulator is only for a bf16 one); backward:
// it produces gradients at all; sms: 0 for the cuBLASLt path, else the Hopper path's GPU
// (flce_layout); call: FLCE_CALL_* (a call with gradients and no d_weight takes the plain
// ones). The chunk schedule is taken whenever a chunk fits and the model does not find a tile
// schedule faster; max_chunk_tokens and max_vocab_tile bound both.
void flce_make_plan(const flce_config *cfg, size_t budget, int needs_dw, int backward, int sms, int call,
                    flce_plan *p) {
    if (backward && !needs_dw) call |= FLCE_CALL_PLAIN;
    if (cfg->vocab_parallel && cfg->vocab < cfg->vocab_padded) {
        // Every rank must cut the tokens into the same chunks (each chunk's collectives count
        // its rows), and the ranks' real classes differ where the last shard holds the padding:
        // plan as if every row were real (the Hopper path's layout grows with the real
        // classes), then lay out this rank's, which needs no more; its size stays the plan's,
        // so that a workspace sized by it gives every rank the same chunks again.
        flce_config pc = *cfg;
        pc.vocab = pc.vocab_padded;
        flce_make_plan(&pc, budget, needs_dw, backward, sms, call, p);
        if (p->chunk > 0) {
            const size_t all_real = p->total;
            flce_layout(cfg, p->chunk, p->vocab_tile, p->dw_accumulator, sms, call, p);
            if (p->total < all_real) p->total = all_real;
        }
        return;
    }
    const int64_t N = cfg->n_tokens;
    const int64_t span = sms ? cfg->vocab : cfg->vocab_padded;  // the columns the tiles cover
    const int64_t unit = sms ? flce_sm90_stat_tile(cfg) : FLCE_VOCAB_ALIGN;
    int64_t max_chunk = N;
    if (cfg->max_chunk_tokens > 0 && max_chunk > cfg->max_chunk_tokens) max_chunk = cfg->max_chunk_tokens;
    if (sms > 0 && g_plan_chunk > 0 && max_chunk > g_plan_chunk) max_chunk = g_plan_chunk;
    double best_cost = 0.0;
    flce_plan cand;
    flce_layout(cfg, 0, span, 0, sms, call, p);  // chunk 0: nothing fits (yet)
    // the chunk schedule: the whole vocabulary per chunk
    if (cfg->max_vocab_tile == 0 || cfg->max_vocab_tile >= span) {
        int64_t c = flce_fit_chunk(cfg, budget, max_chunk, span, 0, sms, call);
        int dw_acc = 0;
        if (needs_dw && flce_dw_accumulated(cfg, c)) {
            // several chunks (or adding into an existing bf16 d_W) need fp32 accumulation
            dw_acc = 1;
            c = flce_fit_chunk(cfg, budget, max_chunk, span, 1, sms, call);
        }
        c = c > 0 ? flce_fit_whole_vocab(cfg, budget, c, span, dw_acc, sms, call, p) : 0;
        if (c > 0) best_cost = flce_plan_cost(cfg, p, backward, needs_dw);
        if (c > 0 && sms > 0 && backward && !p->lt_backward && g_plan_chunk == 0) {
            // a shorter chunk (down to 3/4) whose d_h tiles fill whole waves can be faster:
            // taken when the model finds it 1% faster. The plan's total stays the largest chunk's,
            // so that a plan made again from that size (a call's) chooses the same chunk
            // (flce_workspace_for sizes the workspace to the chunk taken where that holds too).
            const size_t total = p->total;
            for (int64_t c2 = c - FLCE_CHUNK_MULTIPLE; c2 >= c - c / 4 && c2 > 0; c2 -= FLCE_CHUNK_MULTIPLE) {
                const int64_t cb = flce_balance(N, c2, FLCE_CHUNK_MULTIPLE);
                if (cb >= p->chunk || cb <= 0) continue;
                flce_layout(cfg, cb, span, dw_acc, sms, call, &cand);
                const double cost = flce_plan_cost(cfg, &cand, backward, needs_dw);
                if (flce_fits(cand.total, budget) && cost < best_cost * 0.99) {
                    *p = cand;
                    best_cost = cost;
                }
            }
            if (p->total < total) p->total = total;
        }
        if (c > 0 && backward && p->dw_direct && cfg->hidden >= FLCE_DIRECT_ALL_H &&
            p->chunk < FLCE_DIRECT_MIN_CHUNK && g_lt_backward < 0) {
            // from FLCE_DIRECT_ALL_H the rule takes the direct route in short chunks too, whose d_h
            // parts can make the chunk shorter than the pass's (16384 x 8192 x 128256 in 300 MiB:
            // 768 tokens against 1024, 3% slower): the pass in its own chunks where the model
            // finds it faster (it ranked the two routes as measured at all six chunk schedules
            // measured from H = 4096, dev/RESULTS.md)
            if (flce_fit_whole_vocab(cfg, budget, max_chunk, span, dw_acc, sms, call | FLCE_CALL_PASS, &cand) > 0) {
                const double cost = flce_plan_cost(cfg, &cand, backward, needs_dw);
                if (cost < best_cost) {
                    *p = cand;
                    best_cost = cost;
                }
            }
        }
    }
    // the tile schedule: chunks of 1, 2, 4, .. tokens (and the largest allowed), each with the
    // widest vocabulary tile that fits beside it; on the Hopper path from
    // FLCE_TILE_CHUNK_QUARTERS_FROM tokens also the quarters between two powers of two (1280,
    // 1536 and 1792 after 1024): the chunk sets how often the fp32 d_W is read and written, the
    // tile how many logits are computed twice, and a chunk between may cost less than both
    int64_t max_vtile = span - 1;
    if (cfg->max_vocab_tile > 0 && max_vtile > cfg->max_vocab_tile) max_vtile = cfg->max_vocab_tile;
    if (max_vtile < unit) max_vtile = unit;  // the Hopper path's narrowest tile
    // (flce_dev_set_plan_chunk: not where the chunk schedule fits)
    const int tiles_too = !(sms > 0 && g_plan_chunk > 0 && p->chunk > 0);
    flce_plan between_best;  // the best of the chunks between powers of two
    double between_cost = 0.0;
    between_best.chunk = 0;
    for (int64_t pow2 = 1, quarter = 0; tiles_too;) {
        const int64_t step = pow2 + pow2 / 4 * quarter < max_chunk ? pow2 + pow2 / 4 * quarter : max_chunk;
        const int between = quarter > 0 && step < max_chunk;
        // (a chunk between as balanced over the tokens first, so that its widest tile is the one
        // a plan made again from its workspace finds)
        const int64_t c = between ? flce_balance(N, step, FLCE_CHUNK_MULTIPLE) : step;
        const int dw_acc = needs_dw && flce_dw_accumulated(cfg, c);
        const int64_t v = flce_fit_vtile(cfg, budget, c, max_vtile, dw_acc, sms, call, unit);
        const int64_t vb = v > 0 ? flce_balance(span, v, unit) : 0;
        const int64_t cb = v > 0 ? flce_fit_balanced(cfg, budget, c, vb, dw_acc, sms, call) : 0;
        // On the Hopper path also a few narrower tiles, which may fill the GEMMs' waves better;
        // the plan's total stays the widest tile's, so that a plan made again from that size (a
        // call's) chooses the same tile.
        const int64_t widest = cb > 0 ? (span + vb - 1) / vb : 0;
        size_t widest_total = 0;
        for (int64_t n = widest; cb > 0 && n <= widest + (sms ? 8 : 0); n++) {
            const int64_t vt = n == widest ? vb : flce_round_up((span + n - 1) / n, unit);
            if (n > widest && (vt >= vb || (span + vt - 1) / vt != n)) continue;
            flce_layout(cfg, cb, vt, dw_acc, sms, call, &cand);
            if (n == widest) widest_total = cand.total;
            if (!flce_fits(cand.total, budget)) continue;
            const double cost = flce_plan_cost(cfg, &cand, backward, needs_dw);
            flce_plan *best = between ? &between_best : p;
            double *best_c = between ? &between_cost : &best_cost;
            if (best->chunk == 0 || cost < *best_c) {
                *best = cand;
                if (best->total < widest_total) best->total = widest_total;
                *best_c = cost;
            }
        }
        if (step == max_chunk) break;
        if (sms > 0 && pow2 >= FLCE_TILE_CHUNK_QUARTERS_FROM && quarter < 3) {
            quarter++;
        } else {
            pow2 *= 2;
            quarter = 0;
        }
    }
    // A chunk between never displaces a plan run side by side, whose gain of 4-9% over the same
    // plan one GEMM after the other the model does not count. The plan's total stays at least
    // the displaced plan's, so that a plan made again from that size (a call's) finds the same
    // two and chooses the same.
    if (between_best.chunk > 0 && (p->chunk == 0 || (between_cost < best_cost && !p->side_sms))) {
        const size_t displaced = p->chunk > 0 ? p->total : 0;
        *p = between_best;
        if (p->total < displaced) p->total = displaced;
    }
}

static int g_plan_sms = 0;  // flce_dev_set_plan_sms: 0, or the Hopper path for that many multiprocessors

void flce_dev_set_plan_sms(int sms) {
    g_plan_sms = sms > 0 ? sms : 0;
    g_plan_switches++;
}

// The multiprocessors of the current GPU when a new context's call with cfg takes the Hopper
// path there (bf16 inputs; the planner's argument), else 0.
static int flce_default_sms(const flce_config *cfg) {
    if (cfg->dtype != FLCE_BF16) return 0;  // fp32 inputs run cuBLASLt's GEMMs on every GPU
    // the Hopper path's plans for a GPU of g_plan_sms multiprocessors, on any machine (what the
    // CPU tests check of its planner); calls still take their context's path
    if (g_plan_sms > 0) return g_plan_sms;
    return flce_device_hopper_sms();
}

// Whether two plans of one config, path and call run the same schedule in the same layout
// (their totals aside): a layout follows from the chunk, the tile and the d_W accumulator alone.
static int flce_same_plan(const flce_plan *a, const flce_plan *b) {
    return a->chunk == b->chunk && a->vocab_tile == b->vocab_tile && a->dw_accumulator == b->dw_accumulator;
}

// The planned workspace for budget on the path of sms (flce_make_plan, for a call with every
// gradient), or the minimum with FLCE_ERR_WORKSPACE when nothing fits: one token and one tile of
// the narrowest width (or the whole vocabulary when it is no wider), with the accumulator a bf16
// d_weight then needs (or, where less, one chunk of every token in that tile, which needs none),
// and the statistics apart (what the plain gradients need: then every call fits, in chunks of
// its own).
// The plan's own layout where a plan made from that size is the same one: the planner keeps
// the largest chunk's (or widest tile's) size where it took a shorter chunk (or narrower tile)
// for whole waves, which at 16384 x 4096 x 151936 in 1 GiB is 869 MiB for a chunk that needs
// 632. (Not under vocab_parallel, whose ranks must plan the same chunks from their own sizes.)
flce_status flce_workspace_for(const flce_config *cfg, size_t budget, int sms, size_t *bytes) {
    flce_plan p;
    const int acc_one = flce_dw_accumulated(cfg, 1);  // chunks of one token need the accumulator
    const int64_t narrowest = sms ? flce_sm90_stat_tile(cfg) : FLCE_VOCAB_ALIGN;
    size_t least = flce_layout(cfg, 1, narrowest, acc_one, sms, FLCE_CALL_PLAIN, &p);
    if (acc_one && !flce_dw_accumulated(cfg, cfg->n_tokens) && !cfg->vocab_parallel &&
        (cfg->max_chunk_tokens <= 0 || cfg->max_chunk_tokens >= cfg->n_tokens)) {
        // one chunk of every token writes a bf16 d_weight whole, with no accumulator: in the
        // narrowest tiles that may be far less than one token beside V x H x 4 bytes (4096 x
        // 4096 x 128256: ~0.1 against 2.1 GB), and every call plans that chunk where it fits
        const size_t whole = flce_layout(cfg, cfg->n_tokens, narrowest, 0, sms, FLCE_CALL_PLAIN, &p);
        if (whole < least) least = whole;
    }
    flce_make_plan(cfg, budget, 1, 1, sms, 0, &p);
    if (p.chunk == 0 || least > budget) {
        *bytes = least;
        return FLCE_ERR_WORKSPACE;
    }
    *bytes = p.total;
    if (!cfg->vocab_parallel) {
        flce_plan own, again;
        const size_t exact = flce_layout(cfg, p.chunk, p.vocab_tile, p.dw_accumulator, sms,
                                         p.lt_backward ? FLCE_CALL_PASS : 0, &own);
        if (exact < p.total) {
            flce_make_plan(cfg, exact, 1, 1, sms, 0, &again);
            if (flce_same_plan(&again, &p) && again.total <= exact) *bytes = exact;
        }
    }
    if (*bytes < least) *bytes = least;  // (a few MB: a budget that the plain gradients' one token fills)
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
    flce_make_plan(cfg, workspace_bytes, 1, 1, flce_default_sms(cfg), 0, &p);
    return p.chunk;
}

int64_t flce_vocab_tile(const flce_config *cfg, size_t workspace_bytes) {
    if (flce_config_check(cfg, NULL, 0) != FLCE_OK) return 0;
    flce_plan p;
    flce_make_plan(cfg, workspace_bytes, 1, 1, flce_default_sms(cfg), 0, &p);
    return p.chunk > 0 ? p.vocab_tile : 0;
}
