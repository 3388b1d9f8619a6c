/*
flce_lt.cu - the cuBLASLt path: cuBLASLt's GEMMs and the row kernels of flce_kernels.cuh, on
every GPU and for fp32 inputs (and wherever a context is switched to it, flce_set_hopper):

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
The call's prepare and finalize steps are flce.cu's. The buffer's row stride ldl is the tile
(Vp) rounded up to 64 elements, and every GEMM over the vocabulary is cut at a multiple of 64:
an odd stride or extent (V = 176245) makes cuBLASLt several times slower.
*/
#include "flce_call.cuh"

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

// The gradient GEMMs of vocabulary columns v0 .. v0+w for the `rows` tokens at c0, from the
// dlogits the row kernel wrote over their logits (row stride ldd), as both schedules run
// them per tile (and the Hopper path's lt_backward, over the real classes, whose d_b is its
// own kernel's: with_db 0): d_h (+)= dlogits @ W[tile], d_W[tile] (+)= dlogits^T @ h, d_b[tile] (+)=
// dlogits^T @ ones. A bf16 d_W or d_b goes to its fp32 accumulator (added to the output in
// finalize), and a bf16 d_h summed over several GEMMs (tiles, or the cut of an odd Vp) is
// summed in fp32 and rounded once, after the last tile.
template <typename T, typename TL, typename Tgt>
flce_status flce_tile_backward(flce_call_state<T, TL, Tgt> *s, int64_t c0, int64_t rows, int64_t v0, int64_t w,
                               int with_db) {
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

// The plan's schedule over every chunk of the call.
template <typename T, typename TL, typename Tgt> flce_status flce_run_lt(flce_call_state<T, TL, Tgt> *s) {
    return s->p->n_vtiles > 1 || s->cfg->vocab_parallel ? flce_run_tiles(s) : flce_run_chunks(s);
}

// the combinations flce.cu dispatches: fp32 inputs with fp32 logits, bf16 inputs with bf16 or
// fp32 logits, int32 or int64 targets; and the Hopper path's lt_backward (bf16, bf16)
typedef __nv_bfloat16 bf16;
template flce_status flce_run_lt<float, float, int32_t>(flce_call_state<float, float, int32_t> *);
template flce_status flce_run_lt<float, float, int64_t>(flce_call_state<float, float, int64_t> *);
template flce_status flce_run_lt<bf16, bf16, int32_t>(flce_call_state<bf16, bf16, int32_t> *);
template flce_status flce_run_lt<bf16, bf16, int64_t>(flce_call_state<bf16, bf16, int64_t> *);
template flce_status flce_run_lt<bf16, float, int32_t>(flce_call_state<bf16, float, int32_t> *);
template flce_status flce_run_lt<bf16, float, int64_t>(flce_call_state<bf16, float, int64_t> *);
template flce_status flce_tile_backward<bf16, bf16, int32_t>(flce_call_state<bf16, bf16, int32_t> *, int64_t, int64_t,
                                                             int64_t, int64_t, int);
template flce_status flce_tile_backward<bf16, bf16, int64_t>(flce_call_state<bf16, bf16, int64_t> *, int64_t, int64_t,
                                                             int64_t, int64_t, int);
