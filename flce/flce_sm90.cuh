/*
flce_sm90.cuh - the cross-entropy fused into our Hopper GEMMs (common/gemm_sm90.cuh): the
policies of flce's three products and the small kernels between them.

Per chunk of C tokens and vocabulary range [v0, v0 + W) (the whole vocabulary unless the
workspace forces tiles):
  logits GEMM  z = h W^T on 64 x 256 or 128 x 256 tiles, or on 128 x 192 tiles a warpgroup
               (the wide schedule: without a bias, a softcap or weighted smoothing; in
               clusters of two CTAs whose token tiles share W's box of each stage); its
               epilogue works on the fp32 accumulators: bias and softcap applied, then per
               row and statistics tile (the GEMM's tile: 256 or 192 columns, flce_plan.c's
               flce_sm90_stat_tile) the max m_t, the sum of exp(z - m_t) and the sum of z
               (label smoothing) go to the statistics, and e = exp(z - m_t) (in [0, 1]: bf16
               keeps it to 2^-9 relative) is stored as the chunk's bf16 buffer E. No fp32
               logits, no row pass.
  merge        32 rows a block, their tiles spread over its warps: the tiles' statistics give
               the LSE, the loss (from fp32 accumulators, exact) and the row's coefficients
               (grad scale, mean divisor, upstream gradient, z-loss, smoothing), and each
               tile's scale s_t = g (1 + 2 zl lse) exp(m_t - lse), over its sum of exp.
  d_h GEMM     d_h = dlogits W with dlogits formed from E in registers as the A operand is
               loaded: dz = s_t e - g eps / V - [j == y] g (1 - eps), times 1 - tanh^2 under
               a softcap, 0 past V. Split over K (the vocabulary) into a few parts when the
               chunk has too few output tiles to fill the GPU; the parts are summed in order.
               The scaled d_h (sc, below): A = u_t e, the row's v in the epilogue.
  d_W GEMM     d_W (+)= dlogits^T h with the same transform of E read column-wise (ldmatrix
               .trans); fp32 d_W accumulates with TMA reduce-adds, one per element per chunk.
               The scaled d_W (sc; flce_sm90.cu's flce_sm90_scaled says when): E holds e
               against each tile's max rounded up to an integer, so that s_t = 2^(m_t - m_r) v
               with an exact power of two per row and tile; the transform is one bf16x2 multiply
               a pair, B is v' h (per row) and the target's term is in E (flce_sm90_dw_sc).
  d_b          a column-sum kernel over E with the same transform.
  (lt_backward, the planner's choice for H >= 3072 where the direct d_W does not run or the
  chunk is short, or 2048 with vocabulary tiles (flce_plan.c):
  instead of the two fused gradient GEMMs, a pass writes dz over E (flce_sm90_dlogits_kernel)
  and cuBLASLt's GEMMs take it.)
With tiles, a first logits GEMM over the whole vocabulary writes only the statistics; the
second, per tile, recomputes the same accumulators bit for bit and stores E.

The options of flce 1.1:
  temperature  a scale on the accumulators (log2(e) / T in place of log2(e)); the gradient's
               1 / T is in the merge's coefficients. Nothing per element.
  class weights  w_t in the row's coefficients (merge); per element only with label smoothing
               (dz has -cs w_j, and the epilogue sums w_j z_j).
  entropy      the epilogue also sums q = sum e (m - z2) per tile (non-negative terms), the
               merge forms H = ln 2 (log2 S + Q / S) of the row. Its gradient
               g_H p_j (mu - z_j) needs z_j per element, which E gives back:
               z2_j = m_t + log2(e_j), so that with the tile's u_t = 2^(m_t - lse2) g_H ln 2 / T
               and s_t = 2^(m_t - lse2) (coef_p + g_H ln2 / T (mu2 - m_t)),
                   dz = s_t e - u_t e log2(e) - ...
               E holds e to 2^-9 relative, so log2(e) is good to ~2^-8.5 absolute: the term is
               known to about p_j g_H 2^-9 absolute, the bf16 rounding of dz itself; where
               z_j ~ mu the term is small and its relative error large, but not its absolute.
  log-probability  a coefficient only (its gradient is [j == y] - p_j).
The products whose dz needs more than the FFMA s e - cs (softcap, entropy gradient, weighted
smoothing) run the general transform (XF), the softcap's variant before; the planner sends a
softcap and weighted smoothing to the dlogits pass and cuBLASLt's GEMMs instead, which form
that dz once rather than in both products (flce_plan.c's flce_sm90_lt_backward).

vocab_parallel (flce.h): the tiles are this rank's columns (V its real classes, class weights
its own); the merge runs twice around the exchange of the rows' statistics (m, S, the sum of
(weighted) logits and Q, flce_kernels.cuh's flce_vp_*), and the second pass forms the LSE,
entropy and coefficients from the combined ones, then this rank's tiles' scales as above.
*/
#ifndef FLCE_SM90_CUH
#define FLCE_SM90_CUH

#include "flce_kernels.cuh"
#include "gemm_sm90.cuh"

// the planner's copy of the GEMMs' tiles (flce_internal.h, plain C)
static_assert(FLCE_SM90_BM == SM90_BM && FLCE_SM90_BN == SM90_BN && FLCE_SM90_STAT_FULL == SM90_BN &&
                  FLCE_SM90_STAT_WIDE == sm90_wide_base::BN,
              "flce_internal.h's FLCE_SM90_BM, FLCE_SM90_BN, FLCE_SM90_STAT_* are gemm_sm90.cuh's tiles");
static_assert(FLCE_SM90_BN_NARROW == 224, "flce_internal.h's FLCE_SM90_BN_NARROW is gemm_sm90.cuh's narrow tile");

// 1 / x to ~1 ulp in one instruction (the IEEE-rounded reciprocal is a subroutine call, whose
// calling convention costs the epilogue's registers)
__device__ __forceinline__ float flce_rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// What the three products share: the chunk's per-row data.
typedef struct {
    float *stat_m;        // (tiles, ld): base-2 max of the tile's logits per row (z log2 e),
                          // under the scaled gradients the tile's reference (flce_sm90_reference)
    float *stat_s;        // (tiles, ld): sum of 2^(z2 - m); after the merge, the tile's scale
    float *stat_sz;       // (tiles, ld): sum of z2 (w_j z2 with class weights) over the real
                          // classes (label smoothing); after the merge, under XF, the tile's u;
                          // NULL where the plan shares the statistics (no smoothing, no XF)
    float *stat_q;        // (tiles, ld): sum of e (m - z2) (entropy)
    // after the merge, for the d_W GEMM's plain transform on bf16 pairs (flce_sm90_split):
    __nv_bfloat16 *stat_hi, *stat_lo;  // (tiles, ld): the tile's scale as hi + lo
    __nv_bfloat16 *ncs;                // (ld): -cs
    // per row, in blocks of 64 rows (one copy per d_W stage): cs[64] = g eps / V (every
    // column's term), y[64] (int bits: the target column, -1 for none), ct[64] = g (1 - eps)
    // (the target's term); see flce_sm90_coef
    float *coef;
    // the scaled gradients (flce_sm90_dh_sc, flce_sm90_dw_sc, when sc): per row and statistics
    // tile the byte 127 + m_t - m_r (m_t, m_r = max over t: integers, so its power of two is
    // exact; 0 where 127 below), in each 64-row block in the order d_W's stage reads
    // (flce_sm90_sc_pos); per row v = coef_p 2^(m_r - lse2), which d_h's epilogue applies
    uint8_t *ucode;
    float *vrow;
    float *vw;            // (ld): v' per row, d_W's row factor with the target's term in E
                          // (flce_sm90_target_kernel)
    int *untaken;         // set where a target's term stays for flce_sm90_dw_target_kernel
    int sc;
    // the scaled d_W by cuBLASLt's GEMM on E (flce_sm90.cu's flce_sm90_direct): the logits
    // GEMM's references on a grid of 126 (flce_sm90_reference), so that a row's tiles share one
    // and E needs no per-tile factor; fix (ld) marks the rows whose tiles do not, whose E
    // flce_sm90_rescale_kernel scales to the row's reference
    int direct;
    int *fix;
    flce_call_scalars *scalars;  // the call's: the grid's centre (flce_sm90_reference)
    int parity;           // the chunk's index & 1: which centre its logits read
    int64_t ld;           // rows of the chunk rounded up to 64: the stride of the statistics
    int rows;             // rows of the chunk
    int V;                // real classes
    int voff;             // vocabulary column of the E buffer's column 0 (a multiple of tw)
    int tw;               // columns per statistics tile: 192 or 256 (flce_plan.stat_tile)
    float cap;            // softcap, 0 = off
    float k;              // log2(e) / temperature: accumulator -> base-2 logit
    float temp;           // temperature
    const float *cw;      // class weights (V) when they weight the smoothing term, else NULL
    int want_q;           // the epilogue sums q (entropy)
    int xf;               // the gradient products run the general transform (merge writes u)
} flce_sm90_rows;

enum { FLCE_COEF_CS = 0, FLCE_COEF_Y = 1, FLCE_COEF_CT = 2 };

// Where a row's coefficient `field` lives in flce_sm90_rows.coef.
__host__ __device__ __forceinline__ int64_t flce_sm90_coef(int64_t row, int field) {
    return (row >> 6) * 192 + field * 64 + (row & 63);
}

// Where row `row`'s byte of a tile's ucode lives: within its block of 64 rows (a d_W stage),
// the 16 rows 8 j + 2 t + {0, 1} (j = 0 .. 7) that the fragments of the lanes with t read
// (flce_sm90_dw_sc) are the 16 bytes at 16 t, so that one 16-byte load brings them.
__host__ __device__ __forceinline__ int64_t flce_sm90_sc_pos(int64_t row) {
    const int k = (int)(row & 63);
    return (row & ~(int64_t)63) + 16 * ((k & 7) >> 1) + 2 * (k >> 3) + (k & 1);
}

/*
The scaled gradients' reference of a statistics tile whose base-2 max is m: an integer at or
above m, so that e = 2^(z2 - ref) <= 1 and the tiles' ratios are exact powers of two. For the
direct d_W (cuBLASLt's GEMM on E, which applies no per-tile factor) the point nearest to m of a
grid of 126 around the chunk's centre c (an integer): every tile of a row whose maxima lie
within c +- 63 then shares the reference c, and e lies in (0, 2^63]. c is 0 for a call's first
chunk (|z| < 43.6 nats), then 24 below the mean of the rows' base-2 LSEs so far (the merge's
flce_sm90_centre), so that a head whose logits sit far from 0 stays on one reference; it
depends on the call's inputs alone. A bf16 keeps every e down to 2^-126,
at least 2^-63 of its tile's max. A row whose maxima straddle c +- 63 is scaled to its own
reference after the merge (flce_sm90_rescale_kernel). 126 and not a rounder 128: the ratio of
two neighbouring references, 2^-126, is still a normal float, which the merge's exp2 (flushing
subnormals) and the codes (1, not 0) keep, and a tile two references below the row's lies at
least 126 below its max, where nothing of it counts. (On a grid of 128 a tile just below a
multiple of 64 and the row's max just above it are 2^-128 apart: its code clamps to 0 and the
tile, as large as the max, is dropped.)
*/
__device__ __forceinline__ float flce_sm90_reference(float m, int direct, float c) {
    return direct ? c + 126.0f * rintf((m - c) * (1.0f / 126.0f)) : ceilf(m);
}

#define FLCE_CENTRE_BELOW 24  // the grid's centre below the mean base-2 LSE (flce_sm90_reference)

// The statistics tile of vocabulary column j (>= 0): a division by a constant either way.
__host__ __device__ __forceinline__ int flce_sm90_stat_of(const flce_sm90_rows &r, int j) {
    return r.tw == FLCE_SM90_STAT_WIDE ? j / FLCE_SM90_STAT_WIDE : j / FLCE_SM90_STAT_FULL;
}

// The statistics tile of K step kb (64 columns from the chunk's column voff) and, in kb_next,
// the first K step past it. The d_h GEMMs' K loops call it only when they reach kb_next, so a
// K step costs one compare: the tile's index (a division by 192 at the wide width) computed
// every step stalled the consumers before their wgmmas and cost the wide width's d_h
// GEMM 6% (dev/RESULTS.md).
__device__ __forceinline__ int flce_sm90_next_tile(const flce_sm90_rows &r, int kb, int &kb_next) {
    const int t = flce_sm90_stat_of(r, r.voff + kb * SM90_BK);
    kb_next = ((t + 1) * r.tw - r.voff) / SM90_BK;  // (voff and tw multiples of 64)
    return t;
}

// ---------------------------------------------------------------------------------------
// the logits GEMM: statistics and E from the accumulators

// The logits GEMM's arguments.
template <typename T>
struct flce_sm90_logits_args {
    flce_sm90_rows r;
    const T *bias;    // (Vp) or NULL
    int store_e;      // write E (else statistics only: the tile schedule's first pass)
    int want_stats;   // write the statistics (else E only: its second pass)
    int want_sum;     // label smoothing: the sum of the logits too
};

// base-2 logit of accumulator x at vocabulary column j (< V) with a bias or a softcap;
// inv_cap = 1 / softcap. tanh through one exponential and one reciprocal (absolute error ~1e-7,
// far below the bf16 of E) keeps the 128 of a thread within its registers.
template <typename T>
__device__ __forceinline__ float flce_sm90_logit2(const flce_sm90_logits_args<T> &a, float x, int j, float inv_cap) {
    if (a.bias != NULL) x += to_float(a.bias[j]);
    if (a.r.cap > 0.0f) {
        const float e = flce_exp2(fminf(2.0f * FLCE_LOG2E * inv_cap * x, 126.0f));
        x = a.r.cap * (1.0f - 2.0f * flce_rcp(e + 1.0f));
    }
    return x * a.r.k;
}

// The epilogue's work on a block of 64 tile rows of 8 J columns (a statistics tile: J = 32 on
// the 256-column tiles, 24 on the wide ones' 192), the thread's accumulators d in
// sm90_thread's layout: bias and softcap applied (LOGIT), then per row the max, the sums of
// the statistics and e = 2^(z2 - m) in place of d. n_abs: the vocabulary column of the
// block's column 0; row0: the chunk row of its row 0. Q: the entropy's sum may be asked for.
template <typename T, bool LOGIT, bool Q, int J>
__device__ __forceinline__ void flce_sm90_logits_block(const flce_sm90_logits_args<T> &a, float (&d)[4 * J], int n_abs,
                                                       int row0, const sm90_thread &th) {
    const int col0 = n_abs + 2 * th.t;  // vocabulary column of d[0]
    const bool plain = !LOGIT;
    const bool simple = plain && n_abs + 8 * J <= a.r.V;
    float m0 = -INFINITY, m1 = -INFINITY;
    // Plain tiles keep the raw accumulators x and fold log2(e) / T into what follows: the
    // max of k x is k times the max of x bit for bit (k > 0, rounding is monotonic), and
    // each exponent's argument k x - m is one FFMA (no multiply pass over the 128).
    const float k = plain ? a.r.k : 1.0f;
    if (plain && !simple) {  // the last tile: columns past V drop out
#pragma unroll
        for (int j = 0; j < J; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) d[4 * j + e] = col0 + 8 * j + (e & 1) < a.r.V ? d[4 * j + e] : -INFINITY;
    } else if (!plain) {
        const float inv_cap = a.r.cap > 0.0f ? flce_rcp(a.r.cap) : 0.0f;
#pragma unroll
        for (int j = 0; j < J; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = col0 + 8 * j + (e & 1);
                d[4 * j + e] = col < a.r.V ? flce_sm90_logit2(a, d[4 * j + e], col, inv_cap) : -INFINITY;
            }
    }
#pragma unroll
    for (int j = 0; j < J; j++) {
        m0 = fmaxf(m0, fmaxf(d[4 * j], d[4 * j + 1]));
        m1 = fmaxf(m1, fmaxf(d[4 * j + 2], d[4 * j + 3]));
    }
    // the row's 8 J columns sit in the 4 threads of a quad
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 1));
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 2));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 1));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 2));
    m0 *= k;
    m1 *= k;
    // the scaled d_W: the tile's reference rounded up to an integer, so that e = 2^(z2 - m)
    // stays in (0, 1] and the ratio of two tiles' references is a power of two, exact in
    // bf16 (the target's e, no longer exact where it is the max, is replaced by the merge);
    // for the direct d_W the nearest point of a grid of 126 around the chunk's centre
    // (flce_sm90_reference)
    if (a.r.sc) {
        const float c = a.r.direct ? (float)a.r.scalars->centre[a.r.parity] : 0.0f;
        m0 = flce_sm90_reference(m0, a.r.direct, c);
        m1 = flce_sm90_reference(m1, a.r.direct, c);
    }
    float s0 = 0.0f, s1 = 0.0f, z0 = 0.0f, z1 = 0.0f, q0 = 0.0f, q1 = 0.0f;
    if (LOGIT && a.want_sum && a.r.cw != NULL) {  // class weights: sum of w_j z2_j
#pragma unroll
        for (int j = 0; j < J; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int col = col0 + 8 * j + e;
                const float w = col < a.r.V ? a.r.cw[col] : 0.0f;
                z0 += col < a.r.V ? w * d[4 * j + e] : 0.0f;
                z1 += col < a.r.V ? w * d[4 * j + 2 + e] : 0.0f;
            }
    } else if (a.want_sum) {
#pragma unroll
        for (int j = 0; j < J; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const bool ok = simple || col0 + 8 * j + e < a.r.V;
                z0 += ok ? d[4 * j + e] : 0.0f;
                z1 += ok ? d[4 * j + 2 + e] : 0.0f;
            }
        z0 *= k;  // plain tiles summed the raw accumulators
        z1 *= k;
    }
    if (Q && a.r.want_q) {
        // q = sum e (m - z2): a column past V has e = 0 and m - z2 = inf, so 256 instead
        // (k is 1 where LOGIT transformed d: the argument is then d - m exactly)
#pragma unroll
        for (int j = 0; j < J; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float x0 = fmaf(d[4 * j + e], k, -m0), x1 = fmaf(d[4 * j + 2 + e], k, -m1);
                d[4 * j + e] = flce_exp2(x0);
                d[4 * j + 2 + e] = flce_exp2(x1);
                s0 += d[4 * j + e];
                s1 += d[4 * j + 2 + e];
                q0 -= d[4 * j + e] * fmaxf(x0, -256.0f);
                q1 -= d[4 * j + 2 + e] * fmaxf(x1, -256.0f);
            }
    } else {
#pragma unroll
        for (int j = 0; j < J; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {  // 2^(-inf) = 0: columns past V add nothing, store 0
                d[4 * j + e] = flce_exp2(fmaf(d[4 * j + e], k, -m0));
                d[4 * j + 2 + e] = flce_exp2(fmaf(d[4 * j + 2 + e], k, -m1));
                s0 += d[4 * j + e];
                s1 += d[4 * j + 2 + e];
            }
    }
#pragma unroll
    for (int off = 1; off <= 2; off *= 2) {
        s0 += __shfl_xor_sync(0xffffffffu, s0, off);
        s1 += __shfl_xor_sync(0xffffffffu, s1, off);
        z0 += __shfl_xor_sync(0xffffffffu, z0, off);
        z1 += __shfl_xor_sync(0xffffffffu, z1, off);
        if (Q) {
            q0 += __shfl_xor_sync(0xffffffffu, q0, off);
            q1 += __shfl_xor_sync(0xffffffffu, q1, off);
        }
    }
    if (a.want_stats && th.t == 0) {
        const int64_t base = (int64_t)(n_abs / (8 * J)) * a.r.ld;
        const int r0 = row0 + 16 * th.w + th.g, r1 = r0 + 8;
        if (r0 < a.r.rows) {
            a.r.stat_m[base + r0] = m0;
            a.r.stat_s[base + r0] = s0;
            if (a.r.stat_sz != NULL) a.r.stat_sz[base + r0] = z0;
            if (Q && a.r.want_q) a.r.stat_q[base + r0] = q0;
        }
        if (r1 < a.r.rows) {
            a.r.stat_m[base + r1] = m1;
            a.r.stat_s[base + r1] = s1;
            if (a.r.stat_sz != NULL) a.r.stat_sz[base + r1] = z1;
            if (Q && a.r.want_q) a.r.stat_q[base + r1] = q1;
        }
    }
}

// The 256-column statistics tiles (tw = 256). LOGIT: bias and / or softcap on the
// accumulators (a kernel of its own: the register budget of the plain one has no room for
// them), or the entropy's sums. PP: the ping-pong schedule (gemm_sm90.cuh), so that this
// epilogue (an exponential per element) runs beside the other warpgroup's products.
template <typename T, bool LOGIT, bool PP = false>
struct flce_sm90_logits : sm90_policy_base {
    typedef flce_sm90_logits_args<T> Args;
    static constexpr bool PINGPONG = PP;

    __device__ static void epilogue(const Args &a, float (&d)[128], const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d) {
        flce_sm90_logits_block<T, LOGIT, LOGIT, 32>(a, d, a.r.voff + tile.n0, tile.m0 + 64 * th.wg, th);
        if (a.store_e) sm90_store_tile<__nv_bfloat16, false>(st, th, map_d, d, tile);
    }
};

// The 192-column statistics tiles (tw = 192) on the wide schedule: each warpgroup's own
// 128 x 192 tiles (two blocks of 64 rows, 96 accumulators a thread each), ping-pong; the
// entropy's sums included (no bias, softcap or weighted smoothing: flce_plan.c). Block 0's E
// goes out by TMA while block 1 is computed.
template <typename T>
struct flce_sm90_logits_wide : sm90_wide_base {
    typedef flce_sm90_logits_args<T> Args;
    static constexpr int CLUSTER_M = 2;  // the pair's token tiles share W's box of each stage

    __device__ static void epilogue(const Args &a, float (&d)[2][96], const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d) {
#pragma unroll
        for (int b = 0; b < 2; b++) {
            flce_sm90_logits_block<T, false, true, 24>(a, d[b], a.r.voff + tile.n0, tile.m0 + 64 * b, th);
            if (a.store_e) sm90_store_rows<__nv_bfloat16, false>(st, th, map_d, d[b], tile, 64 * b);
        }
    }
};

// ---------------------------------------------------------------------------------------
// dlogits from E, element by element

// What the general transform (XF) needs beyond the plain one, per row and statistics tile
// (u, the base-2 max m2), per column (the class weight w) and per call (kcap, th0).
struct flce_sm90_xf_call {
    float kcap;   // ln 2 temperature / softcap: base-2 logit -> tanh of the capped logit; 0 = no cap
    float th0;    // the tanh taken where e == 0: -1 under a cap, else 0
};

__device__ __forceinline__ flce_sm90_xf_call flce_sm90_xf_init(const flce_sm90_rows &r) {
    flce_sm90_xf_call x;
    x.kcap = r.cap > 0.0f ? FLCE_LN2 * r.temp * flce_rcp(r.cap) : 0.0f;
    x.th0 = r.cap > 0.0f ? -1.0f : 0.0f;
    return x;
}

// dz of one element of E (e) at vocabulary column j of a row with scale s, target y and
// coefficients ct (the target's term), cs = g eps / V / T. XF: u is the tile's entropy scale,
// w the column's class weight (1 without), m2 the tile's base-2 max; the base-2 logit comes back
// from e = 2^(z2 - m2) as m2 + log2(e) (for the entropy term and the softcap's tanh; e == 0,
// below 2^-133 of the max, happens only with a cap over ~44 and is taken as tanh = -1, and it
// adds no entropy term: e log2(max(e, 1e-30)) = 0).
template <bool XF>
__device__ __forceinline__ float flce_sm90_dz(float e, float s, int j, int y, float ct, float cs, float u, float w,
                                              float m2, const flce_sm90_xf_call &x, int V) {
    float dz;
    if (XF) {
        const float l = __log2f(fmaxf(e, 1e-30f));
        dz = s * e - cs * w - u * e * l;
        dz -= j == y ? ct : 0.0f;
        const float th = e > 0.0f ? (m2 + l) * x.kcap : x.th0;
        dz *= 1.0f - th * th;
    } else {
        dz = s * e - cs;
        dz -= j == y ? ct : 0.0f;
    }
    return j < V ? dz : 0.0f;
}

// The class weight of column j (< V, else the last: its dz is masked) when weights enter dz
__device__ __forceinline__ float flce_sm90_weight(const flce_sm90_rows &r, int j) {
    return r.cw != NULL ? r.cw[min(j, r.V - 1)] : 1.0f;
}

// ---------------------------------------------------------------------------------------
// the d_h GEMM: A = dlogits (rows of the chunk x vocabulary), from E as it is loaded (a K step's
// 64 columns lie in one statistics tile of either width)

// s as two bf16 (s_hi + s_lo, s to ~2^-16 relative), each in both halves of a bf16 pair, for
// the plain transform dz = e s - cs done as two bf16x2 FMAs: e s_hi + (e s_lo - cs). The inner
// FMA's rounding is ~2^-9 of a term 2^-8 of e s or of cs itself; the outer one rounds dz once
// to bf16, as the fp32 FFMA and its conversion did.
__device__ __forceinline__ void flce_sm90_split(float s, uint32_t &hi2, uint32_t &lo2) {
    const float hi = sm90_bf16_lo(sm90_pack_bf16(s, 0.0f));
    hi2 = sm90_pack_bf16(hi, hi);
    lo2 = sm90_pack_bf16(s - hi, s - hi);
}

// The gradient products' arguments: the chunk's rows.
struct flce_sm90_grad_args {
    flce_sm90_rows r;
};

// ADD: the product is added to D (a d_h summed over vocabulary tiles in one K part), else stored
template <bool XF, bool ADD = false>
struct flce_sm90_dh : sm90_policy_base {
    typedef flce_sm90_grad_args Args;
    struct TileState {
        int row[2];                // the thread's two chunk rows
        int y[2];                  // their targets (vocabulary column, -1 none)
        float ct[2], cs[2];
        float s[2], m2[2], u[2];   // the current statistics tile's scale, max and entropy scale
        // the plain case's dz = s e - cs on bf16 pairs: s as hi + lo (bf16 each, s to ~2^-16),
        // -cs, each in both halves (flce_sm90_split)
        uint32_t s_hi[2], s_lo[2], ncs[2];
        int kb_next;               // the first K step past that tile (flce_sm90_next_tile)
    };
    static constexpr bool A_REGS = true;

    __device__ static void tile_begin(const Args &a, TileState &ts, const sm90_tile &tile, const sm90_thread &th) {
        ts.row[0] = tile.m0 + 64 * th.wg + 16 * th.w + th.g;
        ts.row[1] = ts.row[0] + 8;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const bool in = ts.row[h] < a.r.rows;
            ts.y[h] = in ? __float_as_int(a.r.coef[flce_sm90_coef(ts.row[h], FLCE_COEF_Y)]) : -1;
            ts.ct[h] = in ? a.r.coef[flce_sm90_coef(ts.row[h], FLCE_COEF_CT)] : 0.0f;
            ts.cs[h] = in ? a.r.coef[flce_sm90_coef(ts.row[h], FLCE_COEF_CS)] : 0.0f;
            ts.s[h] = 0.0f;
            ts.m2[h] = 0.0f;
            ts.u[h] = 0.0f;
            ts.ncs[h] = sm90_pack_bf16(-ts.cs[h], -ts.cs[h]);
            ts.s_hi[h] = ts.s_lo[h] = 0u;
        }
        ts.kb_next = -1;
    }

    __device__ static void load_a(const Args &a, TileState &ts, const uint8_t *sa, const uint8_t *, const sm90_tile &,
                                  int kb, const sm90_thread &th, uint32_t (&af)[16]) {
        const int j0 = a.r.voff + kb * SM90_BK;  // vocabulary column of the step's first K
        if (kb >= ts.kb_next) {  // a new statistics tile (the same in the whole warpgroup)
            const int t = flce_sm90_next_tile(a.r, kb, ts.kb_next);
#pragma unroll
            for (int h = 0; h < 2; h++)
                if (ts.row[h] < a.r.rows) {
                    ts.s[h] = a.r.stat_s[(int64_t)t * a.r.ld + ts.row[h]];
                    if (XF) ts.m2[h] = a.r.stat_m[(int64_t)t * a.r.ld + ts.row[h]];
                    if (XF) ts.u[h] = a.r.stat_sz[(int64_t)t * a.r.ld + ts.row[h]];
                    flce_sm90_split(ts.s[h], ts.s_hi[h], ts.s_lo[h]);
                }
        }
        const int lane = th.lt % 32, mi = lane / 8;
        const int arow = 64 * th.wg + 16 * th.w + (lane % 8) + 8 * (mi & 1);
        const uint32_t base = sm90_smem(sa);
        // the common case, decided for the whole warp: no target of its rows in these 64
        // columns, all of them real classes: dz = s e - cs, one FFMA
        const bool plain = !XF && __all_sync(0xffffffffu, j0 + SM90_BK <= a.r.V &&
                                                              (unsigned)(ts.y[0] - j0) >= (unsigned)SM90_BK &&
                                                              (unsigned)(ts.y[1] - j0) >= (unsigned)SM90_BK);
        const flce_sm90_xf_call x = flce_sm90_xf_init(a.r);
        // one straight line of code per case: ptxas serializes the wgmmas (info C7513) when
        // their register operands come out of branches inside the K loop
        if (plain) {
#pragma unroll
            for (int kk = 0; kk < SM90_BK / 16; kk++) {
                uint32_t r[4];
                sm90_ldmatrix_x4(r, base + sm90_swz(arow, 2 * kk + (mi >> 1)));
                // r[q]: row q & 1, columns 16 kk + 8 (q >> 1) + 2 t + {0, 1}; dz = e s_hi + (e s_lo - cs)
#pragma unroll
                for (int q = 0; q < 4; q++)
                    af[4 * kk + q] = sm90_fma_bf16x2(r[q], ts.s_hi[q & 1],
                                                     sm90_fma_bf16x2(r[q], ts.s_lo[q & 1], ts.ncs[q & 1]));
            }
        } else {
#pragma unroll
            for (int kk = 0; kk < SM90_BK / 16; kk++) {
                uint32_t r[4];
                sm90_ldmatrix_x4(r, base + sm90_swz(arow, 2 * kk + (mi >> 1)));
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int h = q & 1, j = j0 + 16 * kk + 8 * (q >> 1) + 2 * th.t;
                    const float w0 = XF ? flce_sm90_weight(a.r, j) : 1.0f;
                    const float w1 = XF ? flce_sm90_weight(a.r, j + 1) : 1.0f;
                    const float d0 = flce_sm90_dz<XF>(sm90_bf16_lo(r[q]), ts.s[h], j, ts.y[h], ts.ct[h], ts.cs[h],
                                                      ts.u[h], w0, ts.m2[h], x, a.r.V);
                    const float d1 = flce_sm90_dz<XF>(sm90_bf16_hi(r[q]), ts.s[h], j + 1, ts.y[h], ts.ct[h],
                                                      ts.cs[h], ts.u[h], w1, ts.m2[h], x, a.r.V);
                    af[4 * kk + q] = sm90_pack_bf16(d0, d1);
                }
            }
        }
    }

    // the fp32 partial of this K part (ADD: the tile's product added to the accumulator)
    __device__ static void epilogue(const Args &, float (&d)[128], const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d) {
        sm90_store_tile<float, ADD>(st, th, map_d, d, tile);
    }
};

// The scaled d_h's epilogue: the fp32 partial of this K part (or, ADD, added to the
// accumulator), each row times its v.
template <bool ADD, int N>
__device__ __forceinline__ void flce_sm90_dh_v_epilogue(const flce_sm90_grad_args &a, float (&d)[N],
                                                        const sm90_tile &tile, const sm90_thread &th, sm90_staging &st,
                                                        const CUtensorMap *map_d) {
    const int r0 = tile.m0 + 64 * th.wg + 16 * th.w + th.g;
    const float v0 = r0 < a.r.rows ? a.r.vrow[r0] : 0.0f, v1 = r0 + 8 < a.r.rows ? a.r.vrow[r0 + 8] : 0.0f;
#pragma unroll
    for (int i = 0; i < N; i++) d[i] *= (i & 2) ? v1 : v0;
    sm90_store_tile<float, ADD>(st, th, map_d, d, tile);
}

// The scaled d_h (sc, as the scaled d_W below): dz = u_t e v per row, u_t = 2^(m_t - m_r) per
// row and statistics tile (exact in bf16), v per row. The GEMM takes A = u_t e (one bf16x2
// multiply a pair, exact) and applies each row's v to the accumulators in the epilogue; the
// target's term is in E by then (flce_sm90_target_kernel; where it could not be,
// flce_sm90_dh_target_kernel adds it to the GEMM's output). Each stage brings the exponents of its
// 128 rows for its statistics tile (128 bytes), where the plain transform reads every row's
// scale from global memory as its K loop enters a tile and forms dz with two bf16x2 FMAs a
// pair and a vote for the target. ADD as flce_sm90_dh's.
template <bool ADD = false, int BN_ = SM90_BN>
struct flce_sm90_dh_sc : sm90_policy_base {
    typedef flce_sm90_grad_args Args;
    static constexpr int BN = BN_;  // 256, or 224 where H fits it better (flce_sm90_grad_cols)
    struct TileState {
        uint32_t u2[2];  // the thread's two rows' u_t as bf16 pairs
        int kb_next;     // the first K step past that statistics tile (flce_sm90_next_tile)
    };
    static constexpr bool A_REGS = true;
    static constexpr int STAGE_EXTRA = 128;

    // the exponents of the tile's two blocks of 64 rows (flce_sm90_sc_pos's order); a second
    // block past the statistics' rows (ld) is read from the last block instead: its rows are
    // past the chunk and their products are clipped
    __device__ static void stage_extra(const Args &a, void *dst, uint64_t *bar, const sm90_tile &tile, int k0) {
        const int64_t t = flce_sm90_stat_of(a.r, a.r.voff + k0);
        const uint8_t *u = a.r.ucode + t * a.r.ld;
        sm90_bulk_load(dst, u + tile.m0, 64, bar);
        sm90_bulk_load((uint8_t *)dst + 64, u + min((int64_t)tile.m0 + 64, a.r.ld - 64), 64, bar);
    }

    __device__ static void tile_begin(const Args &, TileState &ts, const sm90_tile &, const sm90_thread &) {
        ts.u2[0] = ts.u2[1] = 0u;
        ts.kb_next = -1;
    }

    __device__ static void load_a(const Args &a, TileState &ts, const uint8_t *sa, const uint8_t *sx, const sm90_tile &,
                                  int kb, const sm90_thread &th, uint32_t (&af)[16]) {
        if (kb >= ts.kb_next) {  // a new statistics tile (the same in the whole warpgroup)
            flce_sm90_next_tile(a.r, kb, ts.kb_next);
            const int lr = 64 * th.wg + 16 * th.w + th.g;  // the thread's first row in the tile
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t n = sm90_lds_u8(sm90_smem(sx) + (uint32_t)flce_sm90_sc_pos(lr + 8 * h));
                ts.u2[h] = (n << 7) | (n << 23);  // 2^(n - 127) in both halves' exponents
            }
        }
        // behind a branch (always taken): see flce_sm90_dw_sc
        if (!a.r.sc) {
#pragma unroll
            for (int i = 0; i < 16; i++) af[i] = 0u;
            return;
        }
        const int lane = th.lt % 32, mi = lane / 8;
        const int arow = 64 * th.wg + 16 * th.w + (lane % 8) + 8 * (mi & 1);
        const uint32_t base = sm90_smem(sa);
#pragma unroll
        for (int kk = 0; kk < SM90_BK / 16; kk++) {
            uint32_t r[4];
            sm90_ldmatrix_x4(r, base + sm90_swz(arow, 2 * kk + (mi >> 1)));
            // r[q]: row q & 1 (+ 8), columns 16 kk + 8 (q >> 1) + 2 t + {0, 1}
#pragma unroll
            for (int q = 0; q < 4; q++) af[4 * kk + q] = sm90_mul_bf16x2(r[q], ts.u2[q & 1]);
        }
    }

    template <int N>
    __device__ static void epilogue(const Args &a, float (&d)[N], const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d) {
        flce_sm90_dh_v_epilogue<ADD>(a, d, tile, th, st, map_d);
    }
};

// The d_h GEMM on E as it is, where the direct d_W runs (flce_sm90.cu's flce_sm90_direct):
// after the rescale every row's statistics tiles share its reference (every code says 1), so
// dz = e v per row, the target's term in E as for the scaled d_h. The plain product (A read by
// wgmma from shared memory, no per-stage data) with each row's v in the epilogue: the scaled
// d_h's products bitwise (its transform multiplies by 1), without its fragment loads and
// multiplies in the consumers. 256-column tiles only (the narrow tile takes A from registers:
// there the scaled d_h runs). ADD as flce_sm90_dh's.
template <bool ADD = false>
struct flce_sm90_dh_e : sm90_policy_base {
    typedef flce_sm90_grad_args Args;
    __device__ static void epilogue(const Args &a, float (&d)[128], const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d) {
        flce_sm90_dh_v_epilogue<ADD>(a, d, tile, th, st, map_d);
    }
};

// ---------------------------------------------------------------------------------------
// the d_W GEMM: A = dlogits^T (vocabulary x rows of the chunk), from E read column-wise; each
// stage brings the 64 rows' scales for each warpgroup's statistics tile (a warpgroup's 64
// vocabulary rows lie in one of either width), records and maxima

// d_W's A fragment of K step kk, E's stage tile read column-wise (its stored rows are chunk
// rows, K; its 16-byte chunks 8 vocabulary rows, M): r[2 kh + h] holds vocabulary row
// 16 w + 8 h + g and chunk rows 16 kk + 8 kh + 2 t + {0, 1}; base: the warpgroup's 64 rows.
__device__ __forceinline__ void flce_sm90_dw_frag(uint32_t (&r)[4], uint32_t base, int kk, const sm90_thread &th) {
    const int lane = th.lt % 32, mi = lane / 8;
    sm90_ldmatrix_x4_trans(r, base + sm90_swz(16 * kk + 8 * (mi >> 1) + (lane % 8), 2 * th.w + (mi & 1)));
}

// A d_W stage's per-row data of its 64 chunk rows: cs, y, ct (fp32) and -cs (bf16), then for
// each warpgroup's statistics tile (its 64 vocabulary rows lie in one; the tile's 128 may span
// two 192-column ones) the scale (fp32) and for the general transform m2 and u (fp32), else the
// scale's bf16 hi and lo
#define FLCE_SM90_DW_ROWS (3 * 64 * 4 + 64 * 2)
#define FLCE_SM90_DW_TILE(XF) ((XF) ? 3 * 64 * 4 : 64 * 4 + 2 * 64 * 2)
#define FLCE_SM90_DW_EXTRA(XF) (FLCE_SM90_DW_ROWS + 2 * FLCE_SM90_DW_TILE(XF))

// The statistics tile of the vocabulary rows of warpgroup wg of the d_W tile at m0 (rows past V,
// the padding of W, take the last tile's: their dz is 0 anyway)
__device__ __forceinline__ int64_t flce_sm90_dw_stat(const flce_sm90_rows &r, int m0, int wg) {
    return flce_sm90_stat_of(r, min(r.voff + m0 + 64 * wg, r.V - 1));
}

// OutT: fp32 (added over chunks with ADD), or bf16 for a d_W that one GEMM writes whole (one
// chunk, nothing to add to)
template <bool ADD, bool XF, typename OutT = float>
struct flce_sm90_dw : sm90_policy_base {
    static_assert(sizeof(OutT) == 4 || !ADD, "a bf16 d_W is written, not added to");
    typedef flce_sm90_grad_args Args;
    static constexpr int CLUSTER_M = 2;  // adjacent vocabulary tiles share h's box of each stage
    struct TileState {
        int v[2];                  // the thread's two vocabulary rows: 16 w + g, + 8
        float w[2];                // XF: their class weights
    };
    static constexpr bool A_REGS = true;
    static constexpr int STAGE_EXTRA = FLCE_SM90_DW_EXTRA(XF);
    // one staging box per warp leaves room for four stages beside the per-row data
    static constexpr int EPI_BUFFERS = 1;

    __device__ static void stage_extra(const Args &a, void *dst, uint64_t *bar, const sm90_tile &tile, int k0) {
        uint8_t *x = (uint8_t *)dst;
        sm90_bulk_load(x, a.r.coef + flce_sm90_coef(k0, 0), 768, bar);
        sm90_bulk_load(x + 768, a.r.ncs + k0, 128, bar);
        for (int wg = 0; wg < 2; wg++) {
            const int64_t o = flce_sm90_dw_stat(a.r, tile.m0, wg) * a.r.ld + k0;
            uint8_t *y = x + FLCE_SM90_DW_ROWS + wg * FLCE_SM90_DW_TILE(XF);
            sm90_bulk_load(y, a.r.stat_s + o, 256, bar);
            if (XF) {
                sm90_bulk_load(y + 256, a.r.stat_m + o, 256, bar);
                sm90_bulk_load(y + 512, a.r.stat_sz + o, 256, bar);
            } else {
                sm90_bulk_load(y + 256, a.r.stat_hi + o, 128, bar);
                sm90_bulk_load(y + 384, a.r.stat_lo + o, 128, bar);
            }
        }
    }

    __device__ static void tile_begin(const Args &a, TileState &ts, const sm90_tile &tile, const sm90_thread &th) {
        ts.v[0] = a.r.voff + tile.m0 + 64 * th.wg + 16 * th.w + th.g;
        ts.v[1] = ts.v[0] + 8;
        ts.w[0] = XF ? flce_sm90_weight(a.r, ts.v[0]) : 1.0f;
        ts.w[1] = XF ? flce_sm90_weight(a.r, ts.v[1]) : 1.0f;
    }

    __device__ static void load_a(const Args &a, TileState &ts, const uint8_t *sa, const uint8_t *sx, const sm90_tile &,
                                  int, const sm90_thread &th, uint32_t (&af)[16]) {
        // the stage's per-row arrays (stage_extra), read by shared address (sm90_lds_*): cs,
        // target, ct, -cs, and of this warpgroup's statistics tile the scale and with XF the tile
        // max and entropy scale, else the bf16 scale hi and lo, 64 chunk rows each
        const uint32_t xs = sm90_smem(sx), cs = xs, ys = xs + 256, ct = xs + 512, ncs = xs + 768,
                       sc = xs + FLCE_SM90_DW_ROWS + th.wg * FLCE_SM90_DW_TILE(XF), mx = sc + 256, us = sc + 512,
                       shi = sc + 256, slo = sc + 384;
        const int lane = th.lt % 32;
        const uint32_t base = sm90_smem(sa) + th.wg * 8192;  // this warpgroup's 64 vocabulary rows
        // the common case, decided for the warp: none of the 64 rows' targets among its 16
        // vocabulary rows, all of them real classes: dz = s e - cs, one FFMA
        const int vw = ts.v[0] - th.g;
        const bool plain = !XF && vw + 16 <= a.r.V &&
                           !__any_sync(0xffffffffu, (unsigned)(sm90_lds_i(ys + 4 * lane) - vw) < 16u ||
                                                        (unsigned)(sm90_lds_i(ys + 4 * (lane + 32)) - vw) < 16u);
        const flce_sm90_xf_call xc = flce_sm90_xf_init(a.r);
        // one straight line of code per case (see flce_sm90_dh)
        if (plain) {
#pragma unroll
            for (int kk = 0; kk < SM90_BK / 16; kk++) {
                uint32_t r[4];
                flce_sm90_dw_frag(r, base, kk, th);
                // r[2 kh + h]: vocabulary row 16 w + 8 h + g, chunk rows k = 16 kk + 8 kh + 2 t + {0, 1};
                // dz = e s_hi + (e s_lo - cs) on the pair, with the pair's rows' s_hi, s_lo, -cs
#pragma unroll
                for (int kh = 0; kh < 2; kh++) {
                    const int k = 16 * kk + 8 * kh + 2 * th.t;
                    const uint32_t hi2 = sm90_lds_u32(shi + 2 * k), lo2 = sm90_lds_u32(slo + 2 * k),
                                   nc2 = sm90_lds_u32(ncs + 2 * k);
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        af[4 * kk + 2 * kh + h] =
                            sm90_fma_bf16x2(r[2 * kh + h], hi2, sm90_fma_bf16x2(r[2 * kh + h], lo2, nc2));
                }
            }
        } else {
#pragma unroll
            for (int kk = 0; kk < SM90_BK / 16; kk++) {
                uint32_t r[4];
                flce_sm90_dw_frag(r, base, kk, th);
#pragma unroll
                for (int kh = 0; kh < 2; kh++) {
                    const int k = 16 * kk + 8 * kh + 2 * th.t;
                    const float2 s2 = sm90_lds_f2(sc + 4 * k);
                    const float2 c2 = sm90_lds_f2(cs + 4 * k);
                    const int2 y2 = sm90_lds_i2(ys + 4 * k);
                    const float2 t2 = sm90_lds_f2(ct + 4 * k);
                    const float2 m2 = XF ? sm90_lds_f2(mx + 4 * k) : make_float2(0.0f, 0.0f);
                    const float2 u2 = XF ? sm90_lds_f2(us + 4 * k) : make_float2(0.0f, 0.0f);
                    const float m0 = m2.x, m1 = m2.y, u0 = u2.x, u1 = u2.y;
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint32_t x = r[2 * kh + h];
                        const float d0 = flce_sm90_dz<XF>(sm90_bf16_lo(x), s2.x, ts.v[h], y2.x, t2.x, c2.x, u0,
                                                          ts.w[h], m0, xc, a.r.V);
                        const float d1 = flce_sm90_dz<XF>(sm90_bf16_hi(x), s2.y, ts.v[h], y2.y, t2.y, c2.y, u1,
                                                          ts.w[h], m1, xc, a.r.V);
                        af[4 * kk + 2 * kh + h] = sm90_pack_bf16(d0, d1);
                    }
                }
            }
        }
    }

    __device__ static void epilogue(const Args &, float (&d)[128], const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d) {
        sm90_store_tile<OutT, ADD>(st, th, map_d, d, tile);
    }
};

// The scaled d_W (sc: no softcap, entropy gradient or smoothing): dz = s_t e - [j == y] ct with
// s_t = u_t v, u_t = 2^(m_t - m_r) per row and statistics tile (exact in bf16), v per row. The
// GEMM takes A = u_t e (one bf16x2 multiply a pair, exact) and B = v' h, and the target's term
// is in E by then (flce_sm90_target_kernel; in the rare case it cannot be, it is added to d_W's
// target row after the GEMM, flce_sm90_dw_target_kernel). Its stage brings the 64 bytes of
// u_t's exponents where the plain transform brings 1,408 bytes of coefficients read with 26
// shared loads a step: the d_W GEMM's shared-memory traffic is what bounds it (dev/RESULTS.md),
// so that is the gain. Its CTAs run in clusters of two that share v' h's box of each stage
// (CLUSTER_M, common/gemm_sm90.cuh): 19% fewer bytes from L2, 1-4% off the GEMM.
template <bool ADD, int BN_ = SM90_BN>
struct flce_sm90_dw_sc : sm90_policy_base {
    typedef flce_sm90_grad_args Args;
    static constexpr int BN = BN_;  // as flce_sm90_dh_sc's
    static constexpr bool A_REGS = true;
    static constexpr int STAGE_EXTRA = 128;
    static constexpr int CLUSTER_M = 2;

    // each warpgroup's exponents (its statistics tile: flce_sm90_dw_stat)
    __device__ static void stage_extra(const Args &a, void *dst, uint64_t *bar, const sm90_tile &tile, int k0) {
        for (int wg = 0; wg < 2; wg++)
            sm90_bulk_load((uint8_t *)dst + 64 * wg, a.r.ucode + flce_sm90_dw_stat(a.r, tile.m0, wg) * a.r.ld + k0, 64,
                           bar);
    }

    __device__ static void load_a(const Args &a, TileState &, const uint8_t *sa, const uint8_t *sx, const sm90_tile &,
                                  int, const sm90_thread &th, uint32_t (&af)[16]) {
        // behind a branch (always taken): in the products' basic block ptxas would move each K
        // step's loads next to its product and serialize them (C7513; see flce_sm90_dh)
        if (!a.r.sc) {
#pragma unroll
            for (int i = 0; i < 16; i++) af[i] = 0u;
            return;
        }
        const uint32_t base = sm90_smem(sa) + th.wg * 8192;  // this warpgroup's 64 vocabulary rows
        // the exponents of chunk rows 8 j + 2 t + {0, 1}: bytes 2 j, 2 j + 1 (flce_sm90_sc_pos)
        const uint4 c = sm90_lds_u4(sm90_smem(sx) + 64 * th.wg + 16 * th.t);
        const uint32_t cw[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
        for (int kk = 0; kk < SM90_BK / 16; kk++) {
            uint32_t r[4];
            flce_sm90_dw_frag(r, base, kk, th);
            // r[2 kh + h]: vocabulary row 16 w + 8 h + g, chunk rows 16 kk + 8 kh + 2 t + {0, 1}
            // (j = 2 kk + kh); their u as a bf16 pair: each byte into its half's exponent
#pragma unroll
            for (int kh = 0; kh < 2; kh++) {
                const uint32_t u2 = __byte_perm(cw[kk], 0u, kh ? 0x4342u : 0x4140u) << 7;
                af[4 * kk + 2 * kh] = sm90_mul_bf16x2(r[2 * kh], u2);
                af[4 * kk + 2 * kh + 1] = sm90_mul_bf16x2(r[2 * kh + 1], u2);
            }
        }
    }

    template <int N>
    __device__ static void epilogue(const Args &, float (&d)[N], const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d) {
        sm90_store_tile<float, ADD>(st, th, map_d, d, tile);
    }
};

// ---------------------------------------------------------------------------------------
// between the products

// LSE, loss and coefficients of the chunk's rows from the statistics of the tiles
// [0, n_tiles); each tile's sum of exp becomes its scale. A block holds 32 rows (its lanes)
// and spreads the tiles over its FLCE_MERGE_WARPS warps, so that a row's thousand tiles are
// read by many loads in flight (they are 8 KiB a row at V = 176K); the warps' partials merge
// in a fixed order. A chunk of ~3,000 rows makes fewer blocks than the GPU has SMs, and each
// warp's loop waits on its loads once a tile: 32 warps a block (each ~20 of 689 tiles at V =
// 176K) rather than 8. Padding rows (rows .. ld) get zeros, so that the d_W stages that read
// them add nothing.
// vocab_parallel runs it twice around the exchange (flce_kernels.cuh, flce_vp_*): vp_mode
// FLCE_VP_LOCAL merges the tiles into the exchange buffer vp and stops; FLCE_VP_GLOBAL takes
// the rows' statistics from it, combined over the ranks, and goes on as the plain merge.
#define FLCE_MERGE_WARPS 32
enum { FLCE_VP_NONE = 0, FLCE_VP_LOCAL = 1, FLCE_VP_GLOBAL = 2 };

// The direct d_W's grid centre for the next chunk (flce_sm90_reference), by one warp of each
// merge block: its rows' base-2 LSEs rounded (NaN: none) added to the call's sums in integers
// (the same sums in any order), and the block that finishes last writes the centre. The same on
// every rank of a vocabulary-parallel group (the LSEs are the group's).
__device__ void flce_sm90_centre(const flce_sm90_rows &r, float lse2) {
    const int lane = threadIdx.x % 32;
    long long sum = isnan(lse2) ? 0 : (long long)rintf(fminf(fmaxf(lse2, -1e6f), 1e6f));
    int n = isnan(lse2) ? 0 : 1;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
        n += __shfl_xor_sync(0xffffffffu, n, off);
    }
    if (lane != 0) return;
    flce_call_scalars *sc = r.scalars;
    atomicAdd((unsigned long long *)&sc->centre_sum, (unsigned long long)sum);
    atomicAdd(&sc->centre_rows, n);
    __threadfence();
    if (atomicAdd(&sc->centre_done, 1u) != gridDim.x - 1) return;
    __threadfence();  // every block's sums are in
    const long long total = (long long)atomicAdd((unsigned long long *)&sc->centre_sum, 0ull);
    const int rows = atomicAdd(&sc->centre_rows, 0);
    sc->centre[r.parity ^ 1] = rows > 0 ? (int)llrint((double)total / rows) - FLCE_CENTRE_BELOW : 0;
    sc->centre_done = 0;
}

template <typename T, typename Tgt>
__global__ void __launch_bounds__(32 * FLCE_MERGE_WARPS)
flce_sm90_merge_kernel(flce_rows_args<T, Tgt> a, flce_sm90_rows r, int n_tiles, int vp_mode, float *vp) {
    __shared__ float part_m[FLCE_MERGE_WARPS][32], part_s[FLCE_MERGE_WARPS][32], part_z[FLCE_MERGE_WARPS][32];
    __shared__ float part_q[FLCE_MERGE_WARPS][32];
    __shared__ float row_lse2[32], row_coef[32], row_ce[32], row_mu2[32], row_m[32];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    const int64_t row = (int64_t)blockIdx.x * 32 + lane;
    const bool real = row < r.rows;
    float m = -INFINITY, s = 0.0f, z = 0.0f, q = 0.0f;
    if (real && vp_mode != FLCE_VP_GLOBAL) {
        for (int t = w; t < n_tiles; t += FLCE_MERGE_WARPS) {
            const int64_t k = (int64_t)t * r.ld + row;
            const float mt = r.stat_m[k], st = r.stat_s[k];
            const float mx = fmaxf(m, mt);
            const float fa = flce_exp2(m - mx), fb = flce_exp2(mt - mx);
            if (r.want_q) q = flce_q_rescale(q, s, m, mx, fa) + fb * (r.stat_q[k] + st * (mx - mt));
            s = s * fa + st * fb;
            m = mx;
            if (r.stat_sz != NULL) z += r.stat_sz[k];
        }
    }
    part_m[w][lane] = m;
    part_s[w][lane] = s;
    part_z[w][lane] = z;
    part_q[w][lane] = q;
    __syncthreads();
    if (w == 0 && real) {
        flce_row_stats st = {-INFINITY, 0.0f, 0.0f, 0.0f};
        for (int k = 0; k < FLCE_MERGE_WARPS; k++)
            if (part_s[k][lane] > 0.0f)  // a warp with no tiles (n_tiles < warps) has s = 0
                st = flce_stats_merge(st, flce_row_stats{part_m[k][lane], part_s[k][lane], part_z[k][lane],
                                                         part_q[k][lane]});
        const int64_t rows = r.rows;
        if (vp_mode == FLCE_VP_LOCAL) {
            vp[row] = st.m;
            vp[rows + row] = st.m;
            vp[2 * rows + row] = st.s;
            vp[3 * rows + row] = st.sz;
            vp[4 * rows + row] = st.q;
        } else if (vp_mode == FLCE_VP_GLOBAL) {
            st = flce_row_stats{vp[rows + row], vp[2 * rows + row], vp[3 * rows + row], vp[4 * rows + row]};
        }
        if (vp_mode != FLCE_VP_LOCAL) {
            const int64_t i = a.row0 + row;
            int y;
            float zt;
            const int valid = flce_row_target(a, i, &y, &zt);
            const flce_row_grad g = flce_row_finish(st, valid, y, zt, i, a, 1);
            r.coef[flce_sm90_coef(row, FLCE_COEF_Y)] = __int_as_float(y);
            // the scaled d_W: the target's whole dz from the exact target logit (its e is zeroed
            // in E: e_y rounded against an integer reference would cost p_y 2^-9 of p_y - 1,
            // all of it where p_y ~ 1)
            r.coef[flce_sm90_coef(row, FLCE_COEF_CT)] =
                r.sc ? g.coef_target - g.coef_p * flce_exp2(g.zt2 - g.lse2) : g.coef_target;
            r.coef[flce_sm90_coef(row, FLCE_COEF_CS)] = g.coef_smooth;
            if (!r.sc) r.ncs[row] = __float2bfloat16_rn(-g.coef_smooth);
            row_lse2[lane] = g.lse2;
            row_coef[lane] = g.coef_p;
            row_ce[lane] = g.coef_e;
            row_mu2[lane] = g.mu2;
            row_m[lane] = st.m;
            if (r.sc) r.vrow[row] = g.coef_p * flce_exp2(st.m - g.lse2);
        }
    } else if (w == 0 && row < r.ld && vp_mode != FLCE_VP_LOCAL) {
        r.coef[flce_sm90_coef(row, FLCE_COEF_Y)] = __int_as_float(-1);
        r.coef[flce_sm90_coef(row, FLCE_COEF_CT)] = 0.0f;
        r.coef[flce_sm90_coef(row, FLCE_COEF_CS)] = 0.0f;
        if (r.sc) r.vrow[row] = 0.0f;
        else r.ncs[row] = __float2bfloat16_rn(0.0f);
    }
    if (vp_mode == FLCE_VP_LOCAL) return;  // the whole block: no barrier is left waiting
    if (r.direct && w == 0 && row < r.ld) r.fix[row] = 0;
    __syncthreads();
    if (r.direct && w == 0) flce_sm90_centre(r, real && isfinite(row_lse2[lane]) ? row_lse2[lane] : NAN);
    if (row >= r.ld) return;
    // s_t = 2^(m_t - lse2) (coef_p + coef_e (mu2 - m_t)), and under XF u_t = 2^(m_t - lse2) coef_e
    // (in stat_sz, read by no one after this); see the top of this file
    for (int t = w; t < n_tiles; t += FLCE_MERGE_WARPS) {
        const int64_t k = (int64_t)t * r.ld + row;
        float sv = 0.0f;
        if (real) {
            const float mt = r.stat_m[k], f = flce_exp2(mt - row_lse2[lane]);
            sv = f * (row_coef[lane] + row_ce[lane] * (row_mu2[lane] - mt));
            if (r.xf) r.stat_sz[k] = f * row_ce[lane];
        } else {
            r.stat_m[k] = 0.0f;
            if (r.xf) r.stat_sz[k] = 0.0f;
        }
        r.stat_s[k] = sv;
        if (r.sc) {  // s_t = 2^(m_t - m_r) v, the power of two as its bf16 exponent
            const float n = real ? fmaxf(r.stat_m[k] - row_m[lane] + 127.0f, 0.0f) : 0.0f;
            r.ucode[(int64_t)t * r.ld + flce_sm90_sc_pos(row)] = (uint8_t)n;
            if (r.direct && real && n != 127.0f) atomicOr(r.fix + row, 1);  // (rare: no contention)
        } else {
            const __nv_bfloat16 hi = __float2bfloat16_rn(sv);
            r.stat_hi[k] = hi;
            r.stat_lo[k] = __float2bfloat16_rn(sv - __bfloat162float(hi));
        }
    }
}

// d_b[j] (+)= sum over the chunk's rows of dz at column j, for the columns [0, w) of a tile
// (vocabulary voff ..) whose E holds the first w_e; the rest (padding rows of W past V) get 0.
// Two columns per thread, rows in order (deterministic).
__global__ void flce_sm90_dbias_kernel(const __nv_bfloat16 *E, int64_t lde, flce_sm90_rows r, int w_e, int w,
                                       float *db, int accumulate) {
    const int c = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= w) return;
    const int j = r.voff + c;
    const int64_t t = flce_sm90_stat_of(r, j);  // (j even: j + 1 in the same tile)
    float acc0 = 0.0f, acc1 = 0.0f;
    if (c < w_e) {  // (c + 1 may be past w_e: the buffer's stride is padded, and dz masks j >= V)
        const flce_sm90_xf_call x = flce_sm90_xf_init(r);
        const float w0 = r.xf ? flce_sm90_weight(r, j) : 1.0f, w1 = r.xf ? flce_sm90_weight(r, j + 1) : 1.0f;
        for (int i = 0; i < r.rows; i++) {
            const uint32_t e2 = *reinterpret_cast<const uint32_t *>(E + (int64_t)i * lde + c);
            const float s = r.stat_s[t * r.ld + i];
            const int y = __float_as_int(r.coef[flce_sm90_coef(i, FLCE_COEF_Y)]);
            const float ct = r.coef[flce_sm90_coef(i, FLCE_COEF_CT)], cs = r.coef[flce_sm90_coef(i, FLCE_COEF_CS)];
            if (r.xf) {
                const float m2 = r.stat_m[t * r.ld + i], u = r.stat_sz[t * r.ld + i];
                acc0 += flce_sm90_dz<true>(sm90_bf16_lo(e2), s, j, y, ct, cs, u, w0, m2, x, r.V);
                acc1 += flce_sm90_dz<true>(sm90_bf16_hi(e2), s, j + 1, y, ct, cs, u, w1, m2, x, r.V);
            } else {
                acc0 += flce_sm90_dz<false>(sm90_bf16_lo(e2), s, j, y, ct, cs, 0.0f, 1.0f, 0.0f, x, r.V);
                acc1 += flce_sm90_dz<false>(sm90_bf16_hi(e2), s, j + 1, y, ct, cs, 0.0f, 1.0f, 0.0f, x, r.V);
            }
        }
    }
    db[c] = (accumulate ? db[c] : 0.0f) + acc0;
    if (c + 1 < w) db[c + 1] = (accumulate ? db[c + 1] : 0.0f) + acc1;
}

// lt_backward (flce_plan.c, flce_sm90.cu): dlogits written over E, one block per row of the chunk, 8 columns
// a thread (16-byte loads and stores), columns [0, w_out) (a multiple of 8 within the row
// stride): past the V real classes (the last tile's padding on to Vp, whose E the logits GEMM
// did not write) dz is 0. dz in fp32 and rounded to bf16 once, as the fused GEMMs' general
// transform does.
template <bool XF>
__global__ void __launch_bounds__(256) flce_sm90_dlogits_kernel(__nv_bfloat16 *E, int64_t lde, flce_sm90_rows r,
                                                                int w_out) {
    const int i = blockIdx.x;
    __nv_bfloat16 *row = E + (int64_t)i * lde;
    const int y = __float_as_int(r.coef[flce_sm90_coef(i, FLCE_COEF_Y)]);
    const float ct = r.coef[flce_sm90_coef(i, FLCE_COEF_CT)], cs = r.coef[flce_sm90_coef(i, FLCE_COEF_CS)];
    const flce_sm90_xf_call x = flce_sm90_xf_init(r);
    for (int c = 8 * threadIdx.x; c < w_out; c += 8 * blockDim.x) {
        const int j = r.voff + c;  // 8 columns of one statistics tile (voff and c multiples of 8)
        const int64_t k = (int64_t)flce_sm90_stat_of(r, min(j, r.V - 1)) * r.ld + i;
        const float s = r.stat_s[k];
        const float m2 = XF ? r.stat_m[k] : 0.0f, u = XF ? r.stat_sz[k] : 0.0f;
        uint4 v = *reinterpret_cast<const uint4 *>(row + c);
        uint32_t e2[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int jq = j + 2 * q;
            const float w0 = XF ? flce_sm90_weight(r, jq) : 1.0f, w1 = XF ? flce_sm90_weight(r, jq + 1) : 1.0f;
            const float d0 = flce_sm90_dz<XF>(sm90_bf16_lo(e2[q]), s, jq, y, ct, cs, u, w0, m2, x, r.V);
            const float d1 = flce_sm90_dz<XF>(sm90_bf16_hi(e2[q]), s, jq + 1, y, ct, cs, u, w1, m2, x, r.V);
            e2[q] = sm90_pack_bf16(d0, d1);
        }
        *reinterpret_cast<uint4 *>(row + c) = make_uint4(e2[0], e2[1], e2[2], e2[3]);
    }
}

// The scaled gradients: the target's e set to 0 in E (where the tile in the buffer, columns
// [voff, voff + w), holds it), one thread a row: the target's term carries its whole dz from
// the exact target logit (the merge), which d_b adds as it forms dz_y and
// flce_sm90_target_kernel then moves into E for the gradient GEMMs (or the target kernels add).
__global__ void flce_sm90_zero_target_kernel(__nv_bfloat16 *E, int64_t lde, flce_sm90_rows r, int w) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) *r.untaken = 0;
    if (i >= r.rows) return;
    const int y = __float_as_int(r.coef[flce_sm90_coef(i, FLCE_COEF_Y)]);
    if (y >= r.voff && y < r.voff + w) E[(int64_t)i * lde + (y - r.voff)] = __float2bfloat16_rn(0.0f);
}

// The direct d_W (flce_sm90.cu's flce_sm90_direct): the E of each row whose statistics tiles
// do not share one reference (r.fix, from the merge) scaled to the row's, u e rounded once as
// the scaled GEMMs' transform forms it (u a power of two: exact unless the result is below
// bf16's normals; u = 0 for a code of 0), for the columns [voff, voff + w) in the buffer; the
// rows' codes then say 1 (127). One block a row, the blocks over the rows in turn: where no row
// is marked (every tile's max within +-43 nats) every block returns after its flags. Runs after d_b
// (which forms dz from E and the tiles' own scales) and before the target kernel.
__global__ void __launch_bounds__(256) flce_sm90_rescale_kernel(flce_sm90_rows r, int w, __nv_bfloat16 *E,
                                                               int64_t lde) {
    for (int i = blockIdx.x; i < r.rows; i += gridDim.x) {
        if (!r.fix[i]) continue;  // (the same i for the whole block)
        __nv_bfloat16 *row = E + (int64_t)i * lde;
        const int64_t pos = flce_sm90_sc_pos(i);
        for (int c = threadIdx.x; c < w; c += blockDim.x) {
            const int n = r.ucode[(int64_t)flce_sm90_stat_of(r, r.voff + c) * r.ld + pos];
            if (n != 127) {
                const float u = n == 0 ? 0.0f : ldexpf(1.0f, n - 127);
                row[c] = __float2bfloat16_rn(__bfloat162float(row[c]) * u);
            }
        }
        __syncthreads();  // every column read its code before the codes change
        const int t0 = flce_sm90_stat_of(r, r.voff), t1 = flce_sm90_stat_of(r, r.voff + w - 1);
        for (int t = t0 + (int)threadIdx.x; t <= t1; t += blockDim.x) r.ucode[(int64_t)t * r.ld + pos] = 127;
        __syncthreads();
    }
}

// The direct d_h (cuBLASLt's product of E and W, fp32 in part): each row times its v, less an
// untaken target's term (as flce_sm90_dh_target_kernel), into out (rounded once; added to it
// where accumulate). One block a row, 4 columns a thread (H a multiple of 8).
template <typename T, typename TO>
__global__ void __launch_bounds__(256) flce_sm90_dh_rows_kernel(flce_sm90_rows r, const T *w_tile, int H, int w,
                                                               const float *part, TO *out, int accumulate) {
    const int i = blockIdx.x;
    const float v = r.vrow[i];
    const int y = __float_as_int(r.coef[flce_sm90_coef(i, FLCE_COEF_Y)]);
    const float ct = *r.untaken && y >= r.voff && y < r.voff + w ? r.coef[flce_sm90_coef(i, FLCE_COEF_CT)] : 0.0f;
    const T *x = w_tile + (int64_t)(ct != 0.0f ? y - r.voff : 0) * H;
    for (int c = 4 * threadIdx.x; c < H; c += 4 * blockDim.x) {
        const int64_t k = (int64_t)i * H + c;
        const float4 p4 = *reinterpret_cast<const float4 *>(part + k);
        float o[4] = {v * p4.x, v * p4.y, v * p4.z, v * p4.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (ct != 0.0f) o[e] -= ct * to_float(x[c + e]);
            if (accumulate) o[e] += to_float(out[k + e]);
            out[k + e] = from_float<TO>(o[e]);
        }
    }
}

// The scaled gradients' target terms moved into E, one thread a row: where the tile (columns
// [voff, voff + w) in the buffer) holds row i's target y, e_y becomes Q = bf16(dz_y / (u_y v)),
// so that the d_h GEMM forms u_y Q v = dz_y to one rounding (Q's), as the plain transform's bf16
// dz_y did, and d_W's row factor becomes v' = dz_y / (u_y Q) (vw), with which d_W's GEMM forms
// u_y Q v' = dz_y exactly and the row's other terms see v' / v = q / Q, within 2^-9 of 1. The
// term is then 0. Where Q is not a normal bf16 (the target's tile ~88 nats below the row's max,
// or a NaN) e_y stays 0 (flce_sm90_zero_target_kernel), v' = v, and the term is added after
// each GEMM (flce_sm90_dh_target_kernel, flce_sm90_dw_target_kernel). Runs after d_b, which
// takes the term as the merge left it.
__global__ void flce_sm90_target_kernel(flce_sm90_rows r, int w, __nv_bfloat16 *E, int64_t lde) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= r.rows) return;
    float v = r.vrow[i];
    const int y = __float_as_int(r.coef[flce_sm90_coef(i, FLCE_COEF_Y)]);
    if (y >= r.voff && y < r.voff + w) {
        const int64_t kt = flce_sm90_coef(i, FLCE_COEF_CT);
        const float dz = -r.coef[kt];
        const int code = r.ucode[(int64_t)flce_sm90_stat_of(r, y) * r.ld + flce_sm90_sc_pos(i)];
        const float u = ldexpf(1.0f, code - 127);
        const float q = __bfloat162float(__float2bfloat16_rn(dz / (u * v)));
        if (dz == 0.0f) {
            r.coef[kt] = 0.0f;
        } else if (code > 0 && fabsf(q) >= 0x1p-126f && fabsf(q) < 0x1p126f) {
            v = dz / (u * q);
            E[(int64_t)i * lde + (y - r.voff)] = __float2bfloat16_rn(q);
            r.coef[kt] = 0.0f;
        } else {
            *r.untaken = 1;
        }
    }
    r.vw[i] = v;
}

// The scaled d_W's B operand xs = bf16(v' h) for row i of the chunk (a block a row), v' from
// flce_sm90_target_kernel.
template <typename T>
__global__ void flce_sm90_xs_kernel(const T *h, flce_sm90_rows r, int H, __nv_bfloat16 *xs) {
    const int i = blockIdx.x;
    const float v = r.vw[i];
    const T *x = h + (int64_t)i * H;
    __nv_bfloat16 *o = xs + (int64_t)i * H;
    for (int c = 8 * threadIdx.x; c < H; c += 8 * blockDim.x) {
        uint32_t p[4];
#pragma unroll
        for (int e = 0; e < 4; e++) p[e] = sm90_pack_bf16(v * to_float(x[c + 2 * e]), v * to_float(x[c + 2 * e + 1]));
        *reinterpret_cast<uint4 *>(o + c) = make_uint4(p[0], p[1], p[2], p[3]);
    }
}

// The scaled d_h's target terms where flce_sm90_target_kernel could not move them into E (rare:
// the term is then still non-zero): the first K part's partial (or the d_h accumulator the GEMM
// added to) of row i gains dz_y W[y_i] for the chunk's rows whose target is in the tile's columns
// [voff, voff + w), a warp a row (each row's own, in place: deterministic). w_tile: W's rows of
// the tile. A split d_h (fc > 0, flce_sm90_dh_split): columns [0, fc) in the full columns'
// product `full` (rows x fc), the rest in the first part (rows x H - fc).
template <typename T>
__global__ void flce_sm90_dh_target_kernel(flce_sm90_rows r, const T *w_tile, int H, int w, float *part, int fc,
                                           float *full) {
    if (*r.untaken == 0) return;  // (the common case: every term went into E)
    const int i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (i >= r.rows) return;
    const int y = __float_as_int(r.coef[flce_sm90_coef(i, FLCE_COEF_Y)]);
    const float ct = r.coef[flce_sm90_coef(i, FLCE_COEF_CT)];
    if (y < r.voff || y >= r.voff + w || ct == 0.0f) return;
    const T *x = w_tile + (int64_t)(y - r.voff) * H;
    float *d = part + (int64_t)i * (H - fc), *f = full + (int64_t)i * fc;
    for (int c = lane; c < H; c += 32) {
        if (c < fc) f[c] -= ct * to_float(x[c]);
        else d[c - fc] -= ct * to_float(x[c]);
    }
}

// The scaled d_W's target term where flce_sm90_xs_kernel could not move it into E (rare: the
// term is then still non-zero): d_W[y_i - voff] -= ct_i h_i for the chunk's rows i whose target
// is in the tile's columns [voff, voff + w). Each block owns FLCE_DW_TARGET_COLS(H) of those
// columns, takes its rows in order (a ballot per warp, the warps in order) and sums each
// column's rows in shared memory, in fp32, then adds the sums to d_W: rows with one target add
// in one order, whatever the grid (deterministic), and a frequent target (text has many) costs
// shared-memory adds, not a chain of global read-modify-writes. The grid is at most the SMs'
// count (one block fills an SM's shared memory), each block taking column groups blockIdx.x,
// + gridDim.x, ...: in the common case (no term left) the launch is that many blocks that
// return at once, not one a column group (3,526 at V = 176256, H = 1024).
#define FLCE_DW_TARGET_THREADS 256
#define FLCE_DW_TARGET_COLS(H) ((int)min((int64_t)64, (int64_t)FLCE_DW_TARGET_SMEM / (4 * (int64_t)(H))))
template <typename T>
__global__ void __launch_bounds__(FLCE_DW_TARGET_THREADS)
flce_sm90_dw_target_kernel(flce_sm90_rows r, const T *h, int H, int w, float *dw) {
    extern __shared__ float acc[];  // (cols, H)
    __shared__ unsigned mask[FLCE_DW_TARGET_THREADS / 32];
    if (*r.untaken == 0) return;  // (the common case: every term went into E)
    const int cols = FLCE_DW_TARGET_COLS(H);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int group = blockIdx.x; group * cols < w; group += gridDim.x) {
        const int lo = r.voff + group * cols, hi = min(lo + cols, r.voff + w);
        uint64_t touched = 0;  // the same in every thread: all take every row, in order
        for (int i0 = 0; i0 < r.rows; i0 += FLCE_DW_TARGET_THREADS) {
            const int i = i0 + threadIdx.x;
            const int y = i < r.rows ? __float_as_int(r.coef[flce_sm90_coef(i, FLCE_COEF_Y)]) : -1;
            const bool in = y >= lo && y < hi && r.coef[flce_sm90_coef(min(i, r.rows - 1), FLCE_COEF_CT)] != 0.0f;
            const unsigned m = __ballot_sync(0xffffffffu, in);
            if (lane == 0) mask[warp] = m;
            __syncthreads();
            for (int wi = 0; wi < FLCE_DW_TARGET_THREADS / 32; wi++)
                for (unsigned b = mask[wi]; b != 0; b &= b - 1) {
                    const int row = i0 + 32 * wi + __ffs(b) - 1;
                    const int j = __float_as_int(r.coef[flce_sm90_coef(row, FLCE_COEF_Y)]) - lo;
                    const float ct = r.coef[flce_sm90_coef(row, FLCE_COEF_CT)];
                    const T *x = h + (int64_t)row * H;
                    float *a = acc + (int64_t)j * H;
                    const bool first = !((touched >> j) & 1);
                    for (int c = threadIdx.x; c < H; c += FLCE_DW_TARGET_THREADS)
                        a[c] = (first ? 0.0f : a[c]) - ct * to_float(x[c]);
                    touched |= 1ull << j;
                }
            __syncthreads();
        }
        for (int j = 0; j < hi - lo; j++)
            if ((touched >> j) & 1) {
                float *d = dw + (int64_t)(lo - r.voff + j) * H;
                for (int c = threadIdx.x; c < H; c += FLCE_DW_TARGET_THREADS) d[c] += acc[(int64_t)j * H + c];
            }
    }
}

// The sum of `parts` fp32 partials x, x + stride, ... at 4 consecutive elements, in order.
__device__ __forceinline__ float4 flce_sm90_sum4(const float *x, int parts, int64_t stride) {
    float4 acc = *reinterpret_cast<const float4 *>(x);
    for (int p = 1; p < parts; p++) {
        const float4 y = *reinterpret_cast<const float4 *>(x + (int64_t)p * stride);
        acc.x += y.x; acc.y += y.y; acc.z += y.z; acc.w += y.w;
    }
    return acc;
}

// out[k .. k + 3] (+)= acc, rounded once to TO.
template <typename TO>
__device__ __forceinline__ void flce_sm90_out4(TO *out, int64_t k, float4 acc, int accumulate) {
    float v[4] = {acc.x, acc.y, acc.z, acc.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
        if (accumulate) v[e] += to_float(out[k + e]);
        out[k + e] = from_float<TO>(v[e]);
    }
}

// out (rows x H, bf16 or fp32) (+)= the sum of `parts` fp32 partials (rows x H each, part
// stride rows * H), in order; 4 elements per thread (H is a multiple of 4 for these).
template <typename TO>
__global__ void flce_sm90_sum_parts_kernel(const float *part, int parts, int64_t n, TO *out, int accumulate) {
    for (int64_t k = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x); k < n;
         k += 4 * (int64_t)gridDim.x * blockDim.x)
        flce_sm90_out4(out, k, flce_sm90_sum4(part + k, parts, n), accumulate);
}

// The split d_h (flce_sm90_dh_split): out (rows x H, bf16 or fp32) (+)= the full columns'
// product (rows x fc) in columns [0, fc), the sum of the rest's `parts` fp32 partials (rows x
// H - fc each, part stride rows (H - fc)), in order, in [fc, H); 4 elements per thread (H and fc
// multiples of 4: no 4 straddle a row or fc).
template <typename TO>
__global__ void flce_sm90_sum_split_kernel(const float *part, int parts, const float *full, int64_t rows, int H,
                                           int fc, TO *out, int accumulate) {
    const int hb = H - fc;
    const int64_t n = rows * H, stride = rows * hb;
    for (int64_t k = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x); k < n;
         k += 4 * (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = k / H;
        const int c = (int)(k - i * H);
        const float4 acc = c < fc ? *reinterpret_cast<const float4 *>(full + i * fc + c)
                                  : flce_sm90_sum4(part + i * hb + (c - fc), parts, stride);
        flce_sm90_out4(out, k, acc, accumulate);
    }
}

#endif // FLCE_SM90_CUH
