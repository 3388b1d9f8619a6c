/*
flce_sm90.cu - the Hopper path: our wgmma/TMA GEMMs (common/gemm_sm90.cuh) with the loss fused
into them (flce_sm90.cuh), for bf16 inputs on a compute 9.0 GPU in an sm_90a build. Per chunk:
the logits GEMM writes the row statistics per statistics tile (its own tile: 192 columns on the
wide schedule where there is no bias, softcap or weighted smoothing, else 256: flce_plan.c's
flce_sm90_stat_tile) and E = exp(z - tile max) in bf16; the merge kernel turns the statistics
into the LSE, the loss and each row's and tile's coefficients; the d_h and d_W GEMMs form
dlogits from E as they load it (or, lt_backward, a pass writes dlogits over E and the cuBLASLt
path's gradient GEMMs take them: flce_lt.cu's flce_tile_backward). With vocabulary tiles a
first logits GEMM over the whole vocabulary writes the statistics and the first tile's E, and
each further tile's E is computed again, bitwise the same. The call's prepare and finalize
steps are flce.cu's.
*/
#include "flce_call.cuh"
#include "flce_sm90.cuh"

#define FLCE_HOPPER_TRY(what, call)                                                            \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                               \
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUDA,              \
                             "%s (Hopper path, chunk at token %lld): %s", what, (long long)c0, \
                             cudaGetErrorString(e_));                                        \
    } while (0)

/*
The fused gradient GEMMs' two transforms: the plain one forms dz = s e - cs - [j == y] ct in
registers from per-row coefficients (d_W's: read from shared memory every K step, 26 loads a
step and thread; d_h's: from global memory as its K loop enters a statistics tile); the scaled
one (flce_sm90_dh_sc, flce_sm90_dw_sc) multiplies e by an exact power of two that each stage
brings, the row's factor applied by d_h's epilogue and carried by d_W's B operand
(flce_sm90_xs_kernel), the target's term in E (flce_sm90_target_kernel). Our GEMMs are bound by
shared-memory bandwidth (dev/RESULTS.md: ncu's wavefronts), to which the plain d_W transform's
loads add ~20%. The scaled one applies without a softcap, an entropy gradient or label
smoothing (their terms are not a row factor) and where d_W is fp32 (the rare target term left
out of E is added after each GEMM, in fp32). flce_dev_set_dw_scaled(ctx, 0) turns it off, for
dev/ comparisons.
*/
static int flce_sm90_scaled(const flce_context *ctx, const flce_config *cfg, const flce_plan *p,
                            const flce_tensors *t, int xf) {
    if (!ctx->dw_scaled) return 0;
    return !xf && flce_sm90_scaled_config(cfg, p->dw_accumulator) && !p->lt_backward && t->d_weight != NULL;
}

/*
The direct d_W: the scaled d_W as cuBLASLt's GEMM on E itself (d_W += E^T (v' h)), with no
per-tile factor, where the statistics tiles' references lie on a grid of 126 (flce_sm90.cuh's
flce_sm90_reference) so that a row's tiles share one; the rare row whose tiles do not is scaled
to its reference in E first (flce_sm90_rescale_kernel). The same products as the fused scaled
d_W's, summed in cuBLASLt's order; in the tile schedule each vocabulary tile's rows of E are
rescaled as its buffer comes (a statistics tile lies in one vocabulary tile). Where the plan has
room for cuBLASLt's workspace beside the B operand (flce_plan.dw_direct);
flce_dev_set_dw_direct(ctx, 0) turns it off, for dev/ comparisons. With every code 1 after the
rescale, the d_h GEMM needs no transform either: our plain GEMM on E with v per row in its
epilogue (flce_sm90_dh_e) where its tiles are 256 wide; flce_dev_set_dh_direct picks another.
Not where the call wants the entropy (want_q): its ln2 (log2 s + q / s) cancels two terms of up
to ~63 bits against a reference that far below the row's max (~1e-5 absolute, against ~1e-6 on
the rounded-up references).
*/
static int flce_sm90_direct(const flce_context *ctx, const flce_plan *p, int sc, int want_q) {
    return sc && !want_q && ctx->dw_direct && p->dw_direct;
}

// The logits of vocabulary columns [r->voff, r->voff + w) for the chunk at c0: statistics
// and / or E from the GEMM's epilogue.
template <typename T, typename TL, typename Tgt>
static flce_status flce_hopper_logits(flce_call_state<T, TL, Tgt> *s, const flce_sm90_rows *r, int64_t c0, int64_t w,
                                    int store_e, int want_stats) {
    flce_context *ctx = s->ctx;
    const int64_t H = s->cfg->hidden;
    sm90_problem q = {};
    q.a = {(const T *)s->t->hidden + c0 * H, r->rows, H, H};
    q.b = {(const T *)s->t->weight + (int64_t)r->voff * H, w, H, H};
    // E: (rows x w) of the tile; the statistics-only pass over the whole vocabulary writes none
    q.d = {s->ws + s->p->off_logits, r->rows, w < s->p->ldl ? w : s->p->ldl, s->p->ldl};
    q.trans_a = 0; q.trans_b = 0;
    q.M = r->rows; q.N = w; q.K = H; q.splits = 1;
    // the chunk's rows in one raster group where they fit a few MB (all chunks of the default
    // budgets): W, swept once per group, is then read from DRAM once a chunk rather than once
    // per 1024 rows
    if ((int64_t)r->rows * H * (int64_t)sizeof(T) <= ((int64_t)24 << 20)) q.group_rows = r->rows;
    flce_sm90_logits_args<T> a;
    a.r = *r;
    a.bias = s->ra.bias;
    a.store_e = store_e;
    a.want_stats = want_stats;
    a.want_sum = s->cfg->label_smoothing > 0.0f;
    FLCE_PHASE(ctx, s->stream, FLCE_T_LOGITS, {
        FLCE_HOPPER_TRY("logits GEMM", sm90_gemm_check(q, 2));
        const bool logit = a.bias != NULL || a.r.cap > 0.0f || a.r.want_q || a.r.cw != NULL;
        // 192-column statistics: the wide schedule (each warpgroup's own 128 x 192 tiles), 13%
        // fewer cycles than the 64 x 256 ping-pong one (dev/RESULTS.md; flce_sm90_stat_tile).
        // 256: ping-pong where the epilogue is long against a tile's products (K = H <= 2048):
        // the logits kernel alone on an H200 (ncu, same run) took 7-10% fewer cycles at H = 768
        // and 1024, though 2-4% less time (the clock falls under the power cap); at H = 4096 it
        // was no faster (dev/RESULTS.md)
        const int pingpong = ctx->pingpong >= 0 ? ctx->pingpong : H <= 2048;
        if (r->tw == FLCE_SM90_STAT_WIDE)  // (no bias, softcap or weighted smoothing: flce_sm90_stat_tile)
            FLCE_HOPPER_TRY("logits GEMM", (sm90_gemm_launch<flce_sm90_logits_wide<T>, __nv_bfloat16, 0, 0>(q, a, s->stream)));
        else if (pingpong && logit)
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

// A scaled gradient GEMM (P: flce_sm90_dh_sc with TRANS_A 0, flce_sm90_dw_sc with 1), added to
// its output or not, on tiles of the plan's width (flce_plan.grad_cols: 256, or 224).
template <template <bool, int> class P, int TRANS_A>
static cudaError_t flce_sm90_scaled_gemm(const sm90_problem &q, const flce_sm90_grad_args &a, int add, int cols,
                                         cudaStream_t stream) {
    if (cols == FLCE_SM90_BN_NARROW)
        return add ? sm90_gemm_launch<P<true, FLCE_SM90_BN_NARROW>, float, TRANS_A, 1>(q, a, stream)
                   : sm90_gemm_launch<P<false, FLCE_SM90_BN_NARROW>, float, TRANS_A, 1>(q, a, stream);
    return add ? sm90_gemm_launch<P<true, SM90_BN>, float, TRANS_A, 1>(q, a, stream)
               : sm90_gemm_launch<P<false, SM90_BN>, float, TRANS_A, 1>(q, a, stream);
}

// The fused d_h GEMM of q by the call's route: where the direct d_W runs our plain GEMM on E
// (dh_e), else the scaled transform (sc), the general one (xf) or the plain one; added to its
// output where add.
static cudaError_t flce_hopper_dh_gemm(const sm90_problem &q, const flce_sm90_grad_args &a, int dh_e, int add,
                                       int cols, cudaStream_t stream) {
    if (a.r.sc && dh_e)
        return add ? sm90_gemm_launch<flce_sm90_dh_e<true>, float, 0, 1>(q, a, stream)
                   : sm90_gemm_launch<flce_sm90_dh_e<false>, float, 0, 1>(q, a, stream);
    if (a.r.sc) return flce_sm90_scaled_gemm<flce_sm90_dh_sc, 0>(q, a, add, cols, stream);
    if (a.r.xf)
        return add ? sm90_gemm_launch<flce_sm90_dh<true, true>, float, 0, 1>(q, a, stream)
                   : sm90_gemm_launch<flce_sm90_dh<true>, float, 0, 1>(q, a, stream);
    return add ? sm90_gemm_launch<flce_sm90_dh<false, true>, float, 0, 1>(q, a, stream)
               : sm90_gemm_launch<flce_sm90_dh<false>, float, 0, 1>(q, a, stream);
}

// d_W's padding rows (V .. Vp), where cuBLASLt's d_W GEMM covers the real classes alone: zeroed
// by the chunk that writes the last tile's rows first (the first; nothing to add to).
template <typename T, typename TL, typename Tgt>
static flce_status flce_hopper_zero_dw_padding(flce_call_state<T, TL, Tgt> *s, int64_t c0, int64_t v0, int64_t w,
                                               cudaStream_t stream) {
    const flce_config *cfg = s->cfg;
    const int64_t V = cfg->vocab, Vp = cfg->vocab_padded, H = cfg->hidden;
    const int acc = s->p->dw_accumulator;
    if (s->t->d_weight == NULL || c0 != 0 || v0 + w != V || Vp == V || (!acc && cfg->accumulate_d_weight))
        return FLCE_OK;
    const size_t es = acc ? 4 : flce_dtype_size(cfg->d_weight_dtype);
    char *dw = acc ? s->ws + s->p->off_dw32 : (char *)s->t->d_weight;
    flce_context *ctx = s->ctx;
    FLCE_HOPPER_TRY("d_weight padding rows",
                    cudaMemsetAsync(dw + (size_t)V * H * es, 0, (size_t)(Vp - V) * H * es, stream));
    return FLCE_OK;
}

// The context's second stream and its two events (flce_plan.side_sms), made the first time.
static flce_status flce_side_stream(flce_context *ctx, int64_t c0) {
    if (ctx->side_stream == NULL)
        FLCE_HOPPER_TRY("the side stream", cudaStreamCreateWithFlags(&ctx->side_stream, cudaStreamNonBlocking));
    if (ctx->side_fork == NULL)
        FLCE_HOPPER_TRY("the side stream's event", cudaEventCreateWithFlags(&ctx->side_fork, cudaEventDisableTiming));
    if (ctx->side_join == NULL)
        FLCE_HOPPER_TRY("the side stream's event", cudaEventCreateWithFlags(&ctx->side_join, cudaEventDisableTiming));
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
    // d_b first: the scaled gradients' target kernel moves the targets' terms into E
    if (t->d_bias != NULL) FLCE_TRY(flce_hopper_dbias(s, r, c0, w));
    if (r->direct) {
        FLCE_PHASE(ctx, s->stream, FLCE_T_ROWS, {
            const unsigned grid = (unsigned)(rows < p->sm90 ? rows : p->sm90);
            flce_sm90_rescale_kernel<<<grid, 256, 0, s->stream>>>(*r, (int)w,
                                                                (__nv_bfloat16 *)(s->ws + p->off_logits), p->ldl);
            FLCE_HOPPER_TRY("rescale kernel", cudaGetLastError());
        });
    }
    if (r->sc) {
        FLCE_PHASE(ctx, s->stream, FLCE_T_ROWS, {
            flce_sm90_target_kernel<<<(unsigned)((rows + 255) / 256), 256, 0, s->stream>>>(
                *r, (int)w, (__nv_bfloat16 *)(s->ws + p->off_logits), p->ldl);
            FLCE_HOPPER_TRY("target kernel", cudaGetLastError());
        });
    }
    // where the direct d_W runs, d_h may be our plain GEMM on E (on 256-column tiles; on the
    // 224-column ones the scaled GEMM, whose codes are all 1 there), or cuBLASLt's
    const int dh_e = r->direct && ctx->dh_direct == FLCE_DH_E && p->grad_cols == SM90_BN;
    const int dh_lt = r->direct && ctx->dh_direct == FLCE_DH_LT && !p->dh_accumulator;
    // side by side (flce_plan.side_sms): d_W's kernels on the second stream, from here until the
    // call's stream waits for them after its d_h, which is our GEMM (not under the phase timing,
    // which waits for each phase)
    const int side = p->side_sms && r->direct && !dh_lt && t->d_hidden != NULL && t->d_weight != NULL && !ctx->timing;
    cudaStream_t dws = s->stream;
    if (side) {
        FLCE_TRY(flce_side_stream(ctx, c0));
        FLCE_HOPPER_TRY("the side stream's fork", cudaEventRecord(ctx->side_fork, s->stream));
        FLCE_HOPPER_TRY("the side stream's fork", cudaStreamWaitEvent(ctx->side_stream, ctx->side_fork, 0));
        dws = ctx->side_stream;
    }
    if (t->d_hidden != NULL) {
        // d_h[chunk] (rows x H) = dlogits (rows x w) @ W[tile] (w x H), in K parts, summed in order;
        // in one part over vocabulary tiles, the GEMM adds to the fp32 accumulator itself (each
        // element once a launch, the launches in order: deterministic) with no partial to sum
        float *part = (float *)(s->ws + p->off_dh_part), *dh32 = (float *)(s->ws + p->off_dh32);
        sm90_problem q = {};
        q.a = E;
        q.b = {w_tile, w, H, H};
        q.d = {part, rows, H, H};
        q.trans_a = 0; q.trans_b = 1;
        q.M = rows; q.N = H; q.K = w; q.splits = side ? p->side_dh_parts : p->dh_parts;
        q.ctas = side ? p->side_sms : 0;
        flce_sm90_grad_args a;
        a.r = *r;
        void *dh = (char *)t->d_hidden + (size_t)c0 * H * flce_dtype_size(cfg->d_hidden_dtype);
        const int parts = sm90_make_shape(q).splits;
        const int direct = flce_plan_dh_into_accumulator(p, parts), add = direct && v0 > 0;
        if (direct) q.d.ptr = dh32;
        float *out = direct ? dh32 : part;  // where the GEMM's product lands
        const int64_t n = rows * H;
        const unsigned grid = (unsigned)((n / 4 + 255) / 256 < 4096 ? (n / 4 + 255) / 256 : 4096);
        // where the direct d_W runs: d_h by cuBLASLt on E into part (dh_lt), or our GEMM on E
        // whole tiles at full K first where the K parts fill their waves worse (flce_sm90_dh_split):
        // the rest's K parts (rows x H - fc each) at part, the full columns' product after them,
        // within the parts' bytes
        int64_t fc = 0;
        int pb = 0;
        const int split = !dh_lt && !direct && !side && flce_plan_dh_split(p, rows, H, parts, &fc, &pb);
        sm90_problem q_full = q, q_rest = q;
        float *full = NULL;
        int rest_parts = parts;
        if (split) {
            q_rest.b = {w_tile + fc, w, H - fc, H};
            q_rest.N = H - fc;
            q_rest.d = {part, rows, H - fc, H - fc};
            q_rest.splits = pb;
            rest_parts = sm90_make_shape(q_rest).splits;
            full = part + (size_t)rest_parts * (size_t)rows * (size_t)(H - fc);
            q_full.b = {w_tile, w, fc, H};
            q_full.N = fc;
            q_full.d = {full, rows, fc, fc};
            q_full.splits = 1;
        }
        FLCE_PHASE(ctx, s->stream, FLCE_T_DHIDDEN, {
            FLCE_HOPPER_TRY("d_hidden GEMM", sm90_gemm_check(q, 4));
            if (split) {
                FLCE_HOPPER_TRY("d_hidden GEMM (full columns)", sm90_gemm_check(q_full, 4));
                FLCE_HOPPER_TRY("d_hidden GEMM (the rest in K parts)", sm90_gemm_check(q_rest, 4));
            }
            if (dh_lt) {
                // part (rows x H) = E (rows x w) @ W[tile] (w x H) by cuBLASLt, then v per row
                // and an untaken target's term on the way out (one rounding)
                const gemm_problem gp = {0, 0, H, rows, w, {w_tile, CUDA_R_16BF, H}, {E.ptr, CUDA_R_16BF, p->ldl},
                                         {part, CUDA_R_32F, H}, 1.0f, 0.0f};
                FLCE_GEMM_TRY("d_hidden", gemm_split(&ctx->gemm, s->stream, &gp, GEMM_SPLIT_K, flce_vocab_cut(w),
                                                     s->ws + p->off_dh_ws, p->dh_ws_bytes));
                // (an fp32 d_h over several vocabulary tiles has no accumulator: the later
                // tiles add to it)
                const int dh_add = v0 > 0 || cfg->accumulate_d_hidden;
                if (cfg->d_hidden_dtype == FLCE_FP32)
                    flce_sm90_dh_rows_kernel<T, float><<<(unsigned)rows, 256, 0, s->stream>>>(
                        *r, w_tile, (int)H, (int)w, part, (float *)dh, dh_add);
                else
                    flce_sm90_dh_rows_kernel<T, __nv_bfloat16><<<(unsigned)rows, 256, 0, s->stream>>>(
                        *r, w_tile, (int)H, (int)w, part, (__nv_bfloat16 *)dh, dh_add);
                FLCE_HOPPER_TRY("d_hidden rows kernel", cudaGetLastError());
            } else {
                if (split) {
                    FLCE_HOPPER_TRY("d_hidden GEMM (full columns)",
                                    flce_hopper_dh_gemm(q_full, a, dh_e, 0, (int)p->grad_cols, s->stream));
                    FLCE_HOPPER_TRY("d_hidden GEMM (the rest in K parts)",
                                    flce_hopper_dh_gemm(q_rest, a, dh_e, 0, (int)p->grad_cols, s->stream));
                } else {
                    FLCE_HOPPER_TRY("d_hidden GEMM", flce_hopper_dh_gemm(q, a, dh_e, add, (int)p->grad_cols, s->stream));
                }
                if (r->sc) {
                    flce_sm90_dh_target_kernel<T><<<(unsigned)((rows + 7) / 8), 256, 0, s->stream>>>(
                        *r, w_tile, (int)H, (int)w, out, (int)fc, full);
                    FLCE_HOPPER_TRY("d_hidden target kernel", cudaGetLastError());
                }
            }
            if (dh_lt) {
                // (written above)
            } else if (split) {  // (no accumulator: one vocabulary tile)
                if (cfg->d_hidden_dtype == FLCE_FP32)
                    flce_sm90_sum_split_kernel<float><<<grid, 256, 0, s->stream>>>(
                        part, rest_parts, full, rows, (int)H, (int)fc, (float *)dh, cfg->accumulate_d_hidden);
                else
                    flce_sm90_sum_split_kernel<__nv_bfloat16><<<grid, 256, 0, s->stream>>>(
                        part, rest_parts, full, rows, (int)H, (int)fc, (__nv_bfloat16 *)dh, cfg->accumulate_d_hidden);
                FLCE_HOPPER_TRY("d_hidden sum", cudaGetLastError());
            } else if (p->dh_accumulator) {  // bf16 d_h over several tiles (or over the ranks): fp32, rounded once
                if (!direct) {
                    flce_sm90_sum_parts_kernel<float><<<grid, 256, 0, s->stream>>>(part, parts, n, dh32, v0 > 0);
                    FLCE_HOPPER_TRY("d_hidden sum", cudaGetLastError());
                }
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
    if (t->d_weight != NULL) {
        // d_W[tile] (rows_w x H) (+)= dlogits^T (rows_w x rows) @ h_chunk (rows x H), fp32; a
        // bf16 d_W without an accumulator (one chunk of all the tokens, nothing to add to) is
        // written by the GEMM in bf16
        const int acc = p->dw_accumulator;
        const int bf16_out = !acc && cfg->d_weight_dtype == FLCE_BF16;
        char *dw = (acc ? s->ws + p->off_dw32 : (char *)t->d_weight) + (size_t)v0 * H * (bf16_out ? 2 : 4);
        const int add = c0 > 0 || (!acc && cfg->accumulate_d_weight);
        // the scaled d_W: its B operand v' h in the d_h parts' buffer (free once they are summed)
        __nv_bfloat16 *xs = (__nv_bfloat16 *)(s->ws + p->off_xs);
        sm90_problem q = {};
        q.a = E;
        q.b = {r->sc ? (const void *)xs : (const void *)h_chunk, rows, H, H};
        q.d = {dw, rows_w, H, H};
        q.trans_a = 1; q.trans_b = 1;
        q.M = rows_w; q.N = H; q.K = rows; q.splits = 1;
        flce_sm90_grad_args a;
        a.r = *r;
        FLCE_PHASE(ctx, dws, FLCE_T_DWEIGHT, {
            FLCE_HOPPER_TRY("d_weight GEMM", sm90_gemm_check(q, bf16_out ? 2 : 4));
            cudaError_t err = cudaSuccess;  // (the direct d_W's GEMM is checked where it runs)
            if (r->sc) {
                flce_sm90_xs_kernel<T><<<(unsigned)rows, 128, 0, dws>>>(h_chunk, *r, (int)H, xs);
                FLCE_HOPPER_TRY("d_weight operand kernel", cudaGetLastError());
                if (r->direct) {
                    // d_W[tile] (w x H) (+)= E^T (w x rows) @ xs (rows x H), over the real
                    // classes; the padding rows on to Vp zeroed where the first chunk writes
                    const gemm_problem gp = {0, 1, H, w, rows, {xs, CUDA_R_16BF, H},
                                             {E.ptr, CUDA_R_16BF, p->ldl}, {dw, CUDA_R_32F, H},
                                             1.0f, add ? 1.0f : 0.0f};
                    ctx->gemm.sm_target = side ? p->sm90 - p->side_sms : 0;
                    const cublasStatus_t st = gemm_split(&ctx->gemm, dws, &gp, GEMM_SPLIT_N, flce_vocab_cut(w),
                                                         s->ws + p->off_lt, p->lt_bytes);
                    ctx->gemm.sm_target = 0;
                    FLCE_GEMM_TRY("d_weight", st);
                    FLCE_TRY(flce_hopper_zero_dw_padding(s, c0, v0, w, dws));
                } else {
                    err = flce_sm90_scaled_gemm<flce_sm90_dw_sc, 1>(q, a, add, p->grad_cols, dws);
                    FLCE_HOPPER_TRY("d_weight GEMM", err);
                }
                const int cols = FLCE_DW_TARGET_COLS(H);
                const size_t smem = (size_t)cols * H * 4;
                FLCE_HOPPER_TRY("d_weight target kernel",
                                cudaFuncSetAttribute(flce_sm90_dw_target_kernel<T>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
                // one block an SM (the plan's count), each over its groups of columns
                const int64_t groups = (w + cols - 1) / cols, sms = p->sm90;
                flce_sm90_dw_target_kernel<T><<<(unsigned)(groups < sms ? groups : sms), FLCE_DW_TARGET_THREADS,
                                                smem, dws>>>(*r, h_chunk, (int)H, (int)w, (float *)dw);
                FLCE_HOPPER_TRY("d_weight target kernel", cudaGetLastError());
            } else if (bf16_out)
                err = r->xf ? sm90_gemm_launch<flce_sm90_dw<false, true, __nv_bfloat16>, __nv_bfloat16, 1, 1>(q, a, dws)
                            : sm90_gemm_launch<flce_sm90_dw<false, false, __nv_bfloat16>, __nv_bfloat16, 1, 1>(q, a, dws);
            else if (r->xf)
                err = add ? sm90_gemm_launch<flce_sm90_dw<true, true>, float, 1, 1>(q, a, dws)
                          : sm90_gemm_launch<flce_sm90_dw<false, true>, float, 1, 1>(q, a, dws);
            else
                err = add ? sm90_gemm_launch<flce_sm90_dw<true, false>, float, 1, 1>(q, a, dws)
                          : sm90_gemm_launch<flce_sm90_dw<false, false>, float, 1, 1>(q, a, dws);
            FLCE_HOPPER_TRY("d_weight GEMM", err);
        });
    }
    if (side) {
        FLCE_HOPPER_TRY("the side stream's join", cudaEventRecord(ctx->side_join, ctx->side_stream));
        FLCE_HOPPER_TRY("the side stream's join", cudaStreamWaitEvent(s->stream, ctx->side_join, 0));
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
    const int64_t v0 = r->voff;
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
    return flce_hopper_zero_dw_padding(s, c0, v0, w, s->stream);
}

// Per chunk: the logits GEMM (statistics and E), the merge, the gradient GEMMs. With
// vocabulary tiles, a first logits GEMM over the whole vocabulary writes the statistics (and
// the first tile's E, which holds each statistics tile's own scale, not the row's LSE, and so
// serves that tile's gradients after the merge as it is), then each further tile's E is
// computed again (bitwise the same accumulators) for its gradients.
template <typename T, typename TL, typename Tgt> flce_status flce_run_hopper(flce_call_state<T, TL, Tgt> *s) {
    const flce_config *cfg = s->cfg;
    const flce_plan *p = s->p;
    const int64_t N = cfg->n_tokens, V = cfg->vocab, C = p->chunk, tile = p->vocab_tile;
    const int tiled = p->n_vtiles > 1;
    flce_sm90_rows r;
    memset(&r, 0, sizeof(r));
    // (q, and where the plan has the statistics shared the max and sum after it, in the d_h
    // parts' region: flce_layout; the sum of z then is not kept)
    r.stat_m = (float *)(s->ws + p->off_stat);
    r.stat_s = r.stat_m + p->n_stat * p->ldc;
    r.stat_sz = p->stats_shared ? NULL : r.stat_s + p->n_stat * p->ldc;
    r.stat_q = (float *)(s->ws + p->off_stat_q);
    r.stat_hi = (__nv_bfloat16 *)(s->ws + p->off_stat16);
    r.stat_lo = r.stat_hi + p->n_stat * p->ldc;
    r.ncs = r.stat_lo + p->n_stat * p->ldc;
    r.coef = (float *)(s->ws + p->off_rec);
    // the scaled gradients' exponents and row factors, where the plain transform's bf16 copies go
    r.ucode = (uint8_t *)r.stat_hi;
    r.vrow = (float *)(r.ucode + p->n_stat * p->ldc);
    r.vw = r.vrow + p->ldc;
    r.untaken = (int *)(r.vw + p->ldc);  // (the region holds (4 n_stat + 10) ldc bytes)
    r.ld = p->ldc;
    r.tw = (int)p->stat_tile;
    r.V = (int)V;
    r.cap = cfg->softcap;
    r.k = s->ra.p.k;
    r.temp = cfg->temperature;
    // class weights enter dz (and the epilogue's sum) only through the smoothing term
    r.cw = s->ra.class_weights != NULL && cfg->label_smoothing > 0.0f ? s->ra.class_weights : NULL;
    r.want_q = s->ra.p.want_entropy;
    // the general transform: a softcap, an entropy gradient, weighted smoothing
    r.xf = cfg->softcap > 0.0f || s->ra.grad_entropy != NULL || r.cw != NULL;
    r.sc = flce_sm90_scaled(s->ctx, cfg, p, s->t, r.xf);
    r.direct = flce_sm90_direct(s->ctx, p, r.sc, r.want_q);
    // the shared statistics' last reader must be the merge (flce_make_plan's call flags say so)
    if (p->stats_shared && s->backward && (!r.sc || s->t->d_bias != NULL))
        return flce_fail(s->ctx->message, sizeof(s->ctx->message), FLCE_ERR_INVALID_VALUE,
                         "internal: a plan with the statistics shared for a call without the scaled gradients");
    r.fix = r.untaken + 1;  // (ld ints, within the region: see flce_sm90_rows)
    r.scalars = (flce_call_scalars *)(s->ws + p->off_scalars);  // (ra.scalars is read-only)
    for (int64_t c0 = 0; c0 < N; c0 += C) {
        r.rows = (int)(N - c0 < C ? N - c0 : C);
        r.parity = (int)((c0 / C) & 1);
        s->ra.row0 = c0;
        if (tiled) {
            r.voff = 0;
            if (s->backward) {  // (a tiled plan has V > tile)
                FLCE_TRY(flce_hopper_logits(s, &r, c0, tile, 1, 1));
                r.voff = (int)tile;
                FLCE_TRY(flce_hopper_logits(s, &r, c0, V - tile, 0, 1));
                r.voff = 0;
            } else {
                FLCE_TRY(flce_hopper_logits(s, &r, c0, V, 0, 1));
            }
            FLCE_TRY(flce_hopper_merge(s, &r, c0));
            if (!s->backward) continue;
        }
        for (int64_t v0 = 0; v0 < V; v0 += tile) {
            const int64_t w = V - v0 < tile ? V - v0 : tile;
            r.voff = (int)v0;
            if (!tiled || v0 > 0) FLCE_TRY(flce_hopper_logits(s, &r, c0, w, s->backward, !tiled));
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

typedef __nv_bfloat16 bf16;
template flce_status flce_run_hopper<bf16, bf16, int32_t>(flce_call_state<bf16, bf16, int32_t> *);
template flce_status flce_run_hopper<bf16, bf16, int64_t>(flce_call_state<bf16, bf16, int64_t> *);
