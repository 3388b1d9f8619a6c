/*
flce_internal.h - what the library's files share and its tests and dev/ benchmarks may reach,
beyond the public API (flce.h). Plain C, so that the planner (flce_plan.c) compiles as C.

  the workspace  its alignment, the cuBLASLt share of it, the records it holds per call and
                 per row (their sizes are what the planner lays out)
  the planner    flce_plan: a schedule and the workspace layout for a config and a byte budget
                 (flce_plan.c), and the messages every file writes (flce_fail)
  dev switches   choices that exist to compare kernels, not for users: dev/flce_bench and the
                 tests set them; a program that never calls them gets the library's own
                 choices. What users may set is flce.h's (its setters) and the trainer's flags.

Files: flce_plan.c (configuration, planner, cost model), flce.cu (the API and the dispatch of
one call), flce_lt.cu (the cuBLASLt path), flce_sm90.cu (the Hopper path), flce_call.cuh (what
the three CUDA files share).
*/
#ifndef FLCE_INTERNAL_H
#define FLCE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "flce.h"

#ifdef __cplusplus
extern "C" {
#endif

// the functions between the library's files: not exported from libflce.so, which exports the
// API (flce.h) and the dev switches below
#if defined(__GNUC__)
#define FLCE_HIDDEN __attribute__((visibility("hidden")))
#else
#define FLCE_HIDDEN
#endif

#define FLCE_DEFAULT_BUDGET ((size_t)1 << 30)
#define FLCE_LT_WORKSPACE ((size_t)32 << 20)  // cuBLASLt's recommendation for Hopper
#define FLCE_DW_LT_WORKSPACE ((size_t)4 << 20)  // its d_W on E where E would have the room (flce_plan.c)
#define FLCE_ALIGN 256
#define FLCE_LDL_MULTIPLE 64
#define FLCE_CHUNK_MULTIPLE 128
#define FLCE_VOCAB_ALIGN 64  // GEMMs over the vocabulary are cut at a multiple of this
// the Hopper GEMM's output tile (common/gemm_sm90.cuh's SM90_BM x SM90_BN; flce_sm90.cuh checks
// that they agree), for the planner in plain C
#define FLCE_SM90_BM 128
#define FLCE_SM90_BN 256
// the narrow tile's width (gemm_sm90.cuh's BN = 224), which the scaled gradient GEMMs take
// where it covers H in fewer columns than 256-column tiles (H = 896: 4 x 224 against 4 x 256;
// flce_plan.grad_cols)
#define FLCE_SM90_BN_NARROW 224
// What of the scaled gradient kernels' conditions the config and plan decide (flce_sm90.cu's
// flce_sm90_scaled adds the call's): no label smoothing, and an fp32 d_W or its accumulator (a
// bf16 d_W written whole by one chunk takes the plain kernels).
static inline int flce_sm90_scaled_plan(const flce_config *cfg, int dw_accumulator) {
    return cfg->label_smoothing == 0.0f && (dw_accumulator || cfg->d_weight_dtype != FLCE_BF16);
}
// the scaled d_W's target kernel (flce_sm90.cuh): its shared memory, a column group's fp32 rows of
// H; the scaled gradients run where one column fits (H up to 51,200)
#define FLCE_DW_TARGET_SMEM (200 * 1024)
// What of the scaled gradients' conditions the config and plan decide, with the kernels' own
// limits (no softcap, whose dz is not a row factor; one target column's rows of H in the target
// kernel's shared memory): flce_sm90.cu's flce_sm90_scaled adds the call's, flce_layout's shared
// statistics rely on it.
static inline int flce_sm90_scaled_config(const flce_config *cfg, int dw_accumulator) {
    return flce_sm90_scaled_plan(cfg, dw_accumulator) && cfg->softcap == 0.0f &&
           cfg->hidden <= FLCE_DW_TARGET_SMEM / 4;
}
// The Hopper d_h GEMM of a chunk of `rows` tokens in two launches: the first *full_cols output
// columns (whole tiles of `cols`, their tiles within one wave of the `sms` multiprocessors) at
// full K, then the rest in *rest_parts K parts, where that takes 2% fewer full-K tile times than
// all of them in `parts` K parts and its products fit theirs (the plan's region is sized for
// `parts`: the layout and the plan stay as they are). 16384 x 2048 x 128256 in chunks of 3328 on
// 132 SMs: 26 x 8 tiles in 3 parts are 5 waves of thirds, 1.67 tile times; 26 x 5 tiles at full
// K, then 26 x 3 in 5 parts, 1 + 3 fifths = 1.6, in 5/6 of the parts' bytes. 0: one launch.
static inline int flce_sm90_dh_split(int64_t rows, int64_t H, int64_t cols, int sms, int parts, int64_t *full_cols,
                                     int *rest_parts) {
    const int64_t rt = (rows + FLCE_SM90_BM - 1) / FLCE_SM90_BM, ct = (H + cols - 1) / cols;
    if (sms <= 0 || parts <= 0) return 0;
    double best = 0.98 * (double)((rt * ct * parts + sms - 1) / sms) / parts;
    int found = 0;
    for (int64_t ft = 1; ft < ct && rt * ft <= sms; ft++)
        for (int pb = 1; pb <= 8 && pb * (H - ft * cols) + ft * cols <= parts * H; pb++) {
            const double t = (double)((rt * ft + sms - 1) / sms) + (double)((rt * (ct - ft) * pb + sms - 1) / sms) / pb;
            if (t < best - 1e-9) {
                best = t;
                *full_cols = ft * cols;
                *rest_parts = pb;
                found = 1;
            }
        }
    return found;
}
// columns per statistics tile: the logits GEMM's tile width, 192 on its wide schedule (128 x 192
// a warpgroup) where there is no bias, softcap or weighted smoothing, else 256 (flce_plan.c's
// flce_sm90_stat_tile)
#define FLCE_SM90_STAT_WIDE 192
#define FLCE_SM90_STAT_FULL 256

// ----------------------------------------------------------------------------------------
// the workspace's records

// Device scalars of one call, in the workspace; reset by cudaMemsetAsync at the call's start.
typedef struct {
    unsigned long long first_bad_token;  // smallest token index with an out-of-range target
    int n_valid;                         // tokens whose target is not ignore_index (nor bad)
    int pad;
    double target_weight_sum;            // class weights: sum of the valid targets' weights
    double class_weight_sum;             // class weights: sum over the V classes
    // the direct d_W's grid of references (flce_sm90.cuh's flce_sm90_reference): its centre for
    // chunk j in centre[j & 1], which chunk j - 1's merge wrote from the rows' rounded base-2
    // LSEs summed so far (centre_sum over centre_rows); centre_done counts a merge's blocks
    long long centre_sum;
    int centre_rows;
    unsigned centre_done;
    int centre[2];
} flce_call_scalars;

// Running (max, sum of 2^(z2 - max), sum of z2 (or of w_j z2 with class weights), and for the
// entropy q = sum of 2^(z2 - max) (max - z2)) of a set of logits in base 2 (z2 = z log2 e).
// q is a sum of non-negative terms, and so is the entropy formed from it,
//     H = ln 2 (log2(s) + q / s)     (= sum_j p_j (lse - z_j)),
// where lse - sum_j p_j z_j would cancel catastrophically for a peaked row.
typedef struct flce_row_stats {
    float m, s, sz, q;
} flce_row_stats;

// What the gradient of a row needs, besides its logits. Every coefficient already carries
// 1 / temperature (dz/d(capped logit)), and
//   dL/dz_j = p_j (coef_p + coef_e (mu2 - z2_j)) - coef_smooth w_j - coef_target [j == t]
// with p_j = 2^(z2_j - lse2), times 1 - tanh^2 under a softcap.
typedef struct flce_row_grad {
    int t;                       // target column, -1 if none
    float zt2, lse2, cap;        // base 2: target logit, log2-sum-exp2
    float k, temp;               // log2(e) / temperature, temperature
    float coef_p, coef_smooth, coef_target;  // all 0 for an ignored row
    float coef_e, mu2;           // entropy gradient: g_H ln 2 / T, sum_j p_j z2_j
} flce_row_grad;

// ----------------------------------------------------------------------------------------
// the planner (flce_plan.c)

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
    int sm90;            // the multiprocessors the plan is for (0: the cuBLASLt path)
    int dh_parts;        // K parts of the d_h GEMM (fp32 partials, summed in order)
    int dh_split;        // a chunk's d_h may run as whole tiles at full K first, the rest in K
                         // parts (flce_sm90_dh_split decides per chunk, within the parts' bytes)
    int lt_backward;     // the gradients from dlogits written over E, by cuBLASLt (flce_sm90_lt_backward)
    int dw_direct;       // the scaled d_W may run as cuBLASLt's GEMM on E itself (flce_sm90.cu's
                         // flce_sm90_direct): off_lt is then its workspace, in the d_h parts'
                         // region after the d_W's B operand
    size_t lt_bytes;     // cuBLASLt's workspace at off_lt (FLCE_LT_WORKSPACE, or on the direct
                         // d_W what that region leaves, up to it)
    int side_sms;        // 0, or the direct gradients side by side (flce_dev_set_side): the d_h
                         // GEMM on this many SMs, cuBLASLt's d_W on the others, on a second stream
    int side_dh_parts;   // the d_h GEMM's K parts when it runs side by side (<= dh_parts: those
                         // that fill its share of the SMs)
    size_t off_xs;       // the direct d_W's B operand v' h (in the d_h parts' region, after the
                         // parts where the two GEMMs run side by side)
    size_t off_dh_ws, dh_ws_bytes;  // the direct d_h's (cuBLASLt's GEMM on E, a dev switch):
                         // its workspace in the d_h parts' region after its fp32 product
    int grad_cols;       // the fused gradient GEMMs' tile width: FLCE_SM90_BN_NARROW where the
                         // scaled ones run and it covers H better (flce_sm90_grad_cols), else 256
    int64_t ldc;         // the chunk's rows rounded up to 64: the row statistics' stride
    int64_t stat_tile;   // columns per statistics tile (FLCE_SM90_STAT_WIDE or _FULL); vocabulary
                         // tiles are multiples of it
    int64_t n_stat;      // statistics tiles over the V real classes
    int stats_shared;    // the fp32 statistics (max and sum; no sum of z) in the d_h parts'
                         // region, after q: the call's gradients are the scaled ones (flce_layout)
    size_t off_lt, off_scalars, off_token_loss, off_token_lse, off_target_logit, off_db32,
        off_dw32, off_ones, off_dh32, off_tile_stats, off_tile_grad, off_stat, off_stat16, off_rec,
        off_dh_part, off_stat_q, off_vp, off_logits, total;
} flce_plan;

// The d_h GEMM in `parts` K parts adds to the plan's fp32 d_h accumulator itself (one part): no
// part buffer of its own (flce_plan.c's layout, flce_sm90.cu's d_h)
static inline int flce_plan_dh_into_accumulator(const flce_plan *p, int parts) {
    return p->dh_accumulator && parts == 1;
}

// Whether a chunk of `rows` tokens runs its d_h GEMM split (flce_sm90_dh_split) under plan p, its
// d_h in `parts` K parts: the plan allows it and the split fills the waves better.
static inline int flce_plan_dh_split(const flce_plan *p, int64_t rows, int64_t H, int parts, int64_t *full_cols,
                                     int *rest_parts) {
    return p->dh_split && flce_sm90_dh_split(rows, H, p->grad_cols, p->sm90, parts, full_cols, rest_parts);
}

// What a call asks of its plan beyond the config (flce_make_plan's `call`, 0 or these or'ed):
//   FLCE_CALL_ENTROPY_GRAD: an entropy gradient (its dz needs the general transform:
//     flce_sm90_lt_backward)
//   FLCE_CALL_PLAIN: not the scaled gradients where the plan has them (flce_dev_set_dw_scaled
//     off); a call with gradients and no d_weight is planned so whatever it passes
//   FLCE_CALL_PASS: cuBLASLt's gradients on dlogits (the planner's own: the alternative it
//     weighs against the direct route, flce_make_plan)
#define FLCE_CALL_ENTROPY_GRAD 1
#define FLCE_CALL_PLAIN 2
#define FLCE_CALL_PASS 4

// The schedule for cfg within budget bytes (flce_plan.c says how it chooses). needs_dw: the
// call produces d_weight; backward: it produces gradients at all; sms: 0 for the cuBLASLt
// path, else the Hopper path on a GPU of that many multiprocessors; call: FLCE_CALL_* flags.
// p->chunk = 0: nothing fits.
FLCE_HIDDEN void flce_make_plan(const flce_config *cfg, size_t budget, int needs_dw, int backward, int sms,
                                int call, flce_plan *p);
// The planner's cost model's time for plan p, in seconds (what flce_make_plan compares; dev/flce_plans)
FLCE_HIDDEN double flce_plan_cost(const flce_config *cfg, const flce_plan *p, int backward, int needs_dw);

// How many times a dev switch that changes plans (flce_dev_set_plan_sms, _lt_backward,
// _wide_stats, _plan_chunk) was set: a plan kept from before (a context's, flce.cu) is made again.
FLCE_HIDDEN unsigned flce_plan_switches(void);

// The planned workspace for budget on the path of sms, or the minimum with FLCE_ERR_WORKSPACE
// when nothing fits.
FLCE_HIDDEN flce_status flce_workspace_for(const flce_config *cfg, size_t budget, int sms, size_t *bytes);

// The multiprocessors of the current GPU where new contexts take the Hopper path, else 0
// (flce.cu: it asks the device).
FLCE_HIDDEN int flce_device_hopper_sms(void);

// Writes "flce: <status>: <message>" into msg (when msg is not NULL) and returns st.
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
FLCE_HIDDEN flce_status flce_fail(char *msg, size_t len, flce_status st, const char *fmt, ...);

FLCE_HIDDEN size_t flce_dtype_size(flce_dtype t);
FLCE_HIDDEN int flce_is_dtype(flce_dtype t);

static inline int64_t flce_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// A GEMM over vocabulary columns v0 .. v0+w: cut at a multiple of FLCE_VOCAB_ALIGN, so that
// an odd width (V = 176245) does not send all of it to cuBLASLt's slow kernels.
static inline int64_t flce_vocab_cut(int64_t w) { return w / FLCE_VOCAB_ALIGN * FLCE_VOCAB_ALIGN; }

// ----------------------------------------------------------------------------------------
// dev switches: the kernels a benchmark or test compares. Every default is the library's own
// choice; a program that never calls these gets exactly what flce.h documents.

// Process-wide, read whenever a plan is made (flce_workspace_size and every call), because they
// change the workspace's layout: set them before sizing a workspace and keep them for its calls.
//   sms > 0: plan the Hopper path for a GPU of sms multiprocessors on any machine, for bf16
//   inputs (the CPU tests check its planner so); calls still take their context's path.
//   0 (the default): plan the path new contexts take on the current device.
void flce_dev_set_plan_sms(int sms);
//   The Hopper path's gradients: 1 from dlogits written over E, by cuBLASLt's GEMMs; 0 from the
//   fused GEMMs; -1 (the default): by H and the schedule (flce_plan.c's flce_sm90_lt_backward).
void flce_dev_set_lt_backward(int mode);
//   The Hopper path's statistics tile for the plans made from then on (process-wide): 1 the
//   192-column tiles of the wide logits schedule wherever its epilogue serves (no bias, softcap
//   or weighted smoothing), 0 256 columns, -1 (the default): flce_plan.c's rule (that of 1).
void flce_dev_set_wide_stats(int mode);
//   The Hopper path's chunks for the plans made from then on (process-wide), for dev/'s sweeps
//   of the planner's choices: chunk > 0 caps them at that many tokens (the largest that fits,
//   balanced over the tokens, with no shorter chunk taken for whole waves of d_h tiles) and
//   keeps the chunk schedule wherever a chunk fits (the tile schedule only where none does);
//   dh_parts > 0 cuts the fused d_h GEMM's K into that many parts (at most
//   FLCE_DEV_MAX_DH_PARTS). 0 for either: the planner's choice (the default).
#define FLCE_DEV_MAX_DH_PARTS 8
void flce_dev_set_plan_chunk(int64_t chunk, int dh_parts);
//   Where the direct gradients run (cuBLASLt's d_W on E, a d_h GEMM of ours), the two GEMMs of a
//   chunk side by side on two streams (their buffers then all live at once: a larger d_h parts'
//   region): dh_sms > 0 in every chunk, the d_h GEMM's CTAs on dh_sms SMs and cuBLASLt targeting
//   the others; 0 never; -1 (the default): flce_plan.c's rule (half the SMs each, in chunks of
//   up to 1024 tokens).
void flce_dev_set_side(int dh_sms);

// Per context, for its calls from then on:
//   The Hopper logits GEMM's schedule on 256-column statistics tiles (flce_plan.c's
//   flce_sm90_stat_tile; the 192-column ones have the wide schedule only): 1 ping-pong, 0
//   cooperative, -1 (the default): ping-pong for H <= 2048. Both run the same arithmetic in the
//   same order: only which warpgroup runs a tile changes.
void flce_dev_set_pingpong(flce_context *ctx, int mode);
//   0: never the scaled gradient transforms; 1 (the default): where they apply (flce_sm90.cu's
//   flce_sm90_scaled).
void flce_dev_set_dw_scaled(flce_context *ctx, int on);
//   0: the scaled d_W always by its fused GEMM; 1 (the default): by cuBLASLt's GEMM on E where
//   the plan allows it (flce_sm90.cu's flce_sm90_direct).
void flce_dev_set_dw_direct(flce_context *ctx, int on);
//   Where the direct d_W runs, the d_h GEMM: FLCE_DH_SCALED the scaled d_h GEMM (its transform by
//   the codes, every one 1 there), FLCE_DH_E (the default) our plain GEMM on E with v per row in
//   its epilogue (flce_sm90_dh_e; bitwise the scaled one's) where the gradient tiles are 256
//   columns wide, FLCE_DH_LT cuBLASLt's GEMM on E, its product scaled per row by a pass (where
//   the d_h needs no fp32 accumulator: a bf16 d_h over one vocabulary tile, or an fp32 d_h;
//   elsewhere the scaled d_h runs).
enum { FLCE_DH_SCALED = 0, FLCE_DH_E = 1, FLCE_DH_LT = 2 };
void flce_dev_set_dh_direct(flce_context *ctx, int mode);
//   1: every phase of every call timed with events (the host waits for each phase, so calls
//   lose their asynchrony), and flce_destroy prints the means per call over the calls that did
//   not autotune to stderr ("flce timing over N calls (ms per call): ..."); 0 (the default).
void flce_dev_set_timing(flce_context *ctx, int on);

#ifdef __cplusplus
}
#endif
#endif // FLCE_INTERNAL_H
