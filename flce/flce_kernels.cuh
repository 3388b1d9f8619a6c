/*
flce_kernels.cuh - the CUDA kernels of the fused linear cross-entropy, apart from the GEMMs
(which cuBLASLt does):

  flce_prepare_kernel   once per call: checks every target, counts the non-ignored tokens
                        (the divisor of a mean), and computes each target's logit exactly in
                        fp32 from h and W, so the loss does not inherit the rounding of the
                        bf16 logits buffer.
  flce_ce_rows_kernel   once per chunk (or vocabulary tile): one block per row of logits:
                        max / sum-exp / LSE / loss, and (backward) dlogits = dL/dz written
                        in place of the logits; in the tile schedule, a statistics pass and a
                        gradient pass per tile, with flce_tile_finish_kernel between them.
  flce_weight_sum_kernel  with class weights, once per call after prepare: the weighted
                        mean's divisor (the targets' weights) and the weights' sum, in a fixed
                        order (deterministic); under vocab_parallel from the targets' weights
                        and the ranks' sums that flce_vp_weights_kernel's exchange combined.
  flce_vp_*             vocab_parallel: the rows' statistics in the exchange buffer, and
                        rescaled to the ranks' common max between the two all-reduces.
  flce_finalize_kernel  once per call: the loss scalar from the per-token losses (fixed order,
                        deterministic), NaN and a host-visible error record on a bad target.
  flce_add_f32_kernel   bf16 gradient outputs from their fp32 accumulators.

Indices that can exceed 2^31 (row * stride, token * H) are 64-bit throughout.
*/
#ifndef FLCE_KERNELS_CUH
#define FLCE_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

#include "cuda_util.cuh"  // to_float, from_float, Packed128, load128, block_sum_f64 (common/)
#include "flce_internal.h"  // the workspace's records: flce_call_scalars, flce_row_stats, flce_row_grad

#define FLCE_CE_THREADS 512
#define FLCE_CE_UNROLL_ELEMS 16                    // logits loaded per thread before use (64 B)
#define FLCE_NO_BAD_TOKEN 0xffffffffffffffffULL

// What the host sees of a device-side error; lives in mapped pinned memory of the context.
typedef struct {
    volatile int code;                   // 1 once a bad target was seen (flce_finalize_kernel)
    volatile int pad;
    volatile long long position;         // token index
    volatile long long value;            // its target id
} flce_host_status;

// The loss options the row kernel needs, by value.
typedef struct {
    float label_smoothing;
    float z_loss_scale;
    float softcap;                       // 0 = off
    float grad_scale;
    int reduction;                       // flce_reduction
    float temperature;
    float inv_temp;                      // 1 / temperature
    float k;                             // log2(e) / temperature: raw (capped) logit -> base 2
    int want_entropy;                    // the statistics carry q (entropy output or gradient)
} flce_loss_params;

// target ids come as int32 or int64; out-of-range ones must never be used as an index
template <typename Tgt>
__device__ __forceinline__ int flce_target_state(Tgt t, long long ignore_index, long long V) {
    long long tl = (long long)t;
    if (tl == ignore_index) return 0;    // ignored
    if (tl < 0 || tl >= V) return -1;    // bad
    return 1;                            // valid
}

__device__ __forceinline__ float flce_softcap(float z, float cap) {
    return cap > 0.0f ? cap * tanhf(z / cap) : z;
}

// ----------------------------------------------------------------------------------------
// prepare: one warp per token

// Targets are global class ids in [0, V_total); this call's W holds classes v_off .. v_off + V
// (vocab_parallel; else v_off = 0, V_total = V). A target held elsewhere gets target logit 0,
// as do ignored and bad ones: the sum of the ranks' arrays is then every target's logit.
template <typename T, typename Tgt>
__global__ void flce_prepare_kernel(const T *hidden, const T *weight, const T *bias,
                                    const Tgt *targets, int64_t N, int64_t H, int64_t V,
                                    int64_t v_off, int64_t V_total, long long ignore_index,
                                    float *target_logit, flce_call_scalars *scalars) {
    const int lane = threadIdx.x % 32;
    const int64_t i = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int valid = 0;
    if (i < N) {
        const Tgt t = targets[i];
        const int state = flce_target_state(t, ignore_index, V_total);
        if (state < 0 && lane == 0) atomicMin(&scalars->first_bad_token, (unsigned long long)i);
        const int64_t tl = (int64_t)t - v_off;  // the target's row of this W
        if (state > 0) valid = 1;
        if (state <= 0 || tl < 0 || tl >= V) {
            if (lane == 0) target_logit[i] = 0.0f;
        } else {
            const T *hrow = hidden + i * H;
            const T *wrow = weight + tl * H;
            constexpr int VEC = Packed128<T>::size;
            float acc = 0.0f;
            for (int64_t k = (int64_t)lane * VEC; k < H; k += 32 * VEC) {
                Packed128<T> a = load128(hrow + k), b = load128(wrow + k);
#pragma unroll
                for (int e = 0; e < VEC; e++) acc += to_float(a.v[e]) * to_float(b.v[e]);
            }
            for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
            if (bias != NULL) acc += to_float(bias[tl]);
            if (lane == 0) target_logit[i] = acc;
        }
    }
    // one atomic per block: integer, so the count is exact and order-independent
    __shared__ int block_valid;
    if (threadIdx.x == 0) block_valid = 0;
    __syncthreads();
    if (lane == 0 && valid) atomicAdd(&block_valid, 1);
    __syncthreads();
    if (threadIdx.x == 0 && block_valid) atomicAdd(&scalars->n_valid, block_valid);
}

// ----------------------------------------------------------------------------------------
// the row kernel

// The row math runs in base 2: z2 = z * log2(e), sums of 2^(z2 - m2), and one MUFU.EX2 per
// exponential; lse = ln(2) * (m2 + log2(sum)). The row kernels are compute-bound before they
// are memory-bound (a 16-byte load brings 4 to 8 logits), so every instruction per logit
// counts: column indices are 32-bit (Vp < 2^31), and with SIMPLE (no bias, no softcap) the
// per-logit work is a conversion, a target select, an FFMA, an EX2 and an add.
#define FLCE_LOG2E 1.4426950408889634f
#define FLCE_LN2 0.6931471805599453f

__device__ __forceinline__ float flce_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// flce_row_stats (flce_internal.h): a set's running statistics in base 2

// q of a set rescaled from max m to max mn >= m (s its sum of exp): 2^(m - mn) (q + s (mn - m))
__device__ __forceinline__ float flce_q_rescale(float q, float s, float m, float mn, float f) {
    return s == 0.0f ? 0.0f : f * (q + s * (mn - m));
}

__device__ __forceinline__ flce_row_stats flce_stats_merge(flce_row_stats a, flce_row_stats b) {
    flce_row_stats r;
    r.m = fmaxf(a.m, b.m);
    // an empty side has m = -inf and s = 0; skip it rather than form 2^(-inf - -inf)
    const float fa = a.s == 0.0f ? 0.0f : flce_exp2(a.m - r.m);
    const float fb = b.s == 0.0f ? 0.0f : flce_exp2(b.m - r.m);
    const float sa = a.s == 0.0f ? 0.0f : a.s * fa;
    const float sb = b.s == 0.0f ? 0.0f : b.s * fb;
    r.s = sa + sb;
    r.sz = a.sz + b.sz;
    r.q = flce_q_rescale(a.q, a.s, a.m, r.m, fa) + flce_q_rescale(b.q, b.s, b.m, r.m, fb);
    return r;
}

__device__ __forceinline__ flce_row_stats flce_warp_reduce_stats(flce_row_stats st) {
    for (int off = 16; off > 0; off /= 2) {
        flce_row_stats o;
        o.m = __shfl_xor_sync(0xffffffffu, st.m, off);
        o.s = __shfl_xor_sync(0xffffffffu, st.s, off);
        o.sz = __shfl_xor_sync(0xffffffffu, st.sz, off);
        o.q = __shfl_xor_sync(0xffffffffu, st.q, off);
        st = flce_stats_merge(st, o);
    }
    return st;
}

static __device__ flce_row_stats flce_block_reduce_stats(flce_row_stats st) {
    __shared__ flce_row_stats warp_stats[32];
    __shared__ flce_row_stats result;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    st = flce_warp_reduce_stats(st);
    if (lane == 0) warp_stats[warp] = st;
    __syncthreads();
    if (warp == 0) {
        st = lane < n_warps ? warp_stats[lane] : flce_row_stats{-INFINITY, 0.0f, 0.0f, 0.0f};
        st = flce_warp_reduce_stats(st);
        if (lane == 0) result = st;
    }
    __syncthreads();
    return result;
}

// Logit j (< V) as the loss sees it, in base 2: bias added, softcapped, divided by the
// temperature (k = log2(e) / temperature: the temperature costs nothing per logit).
template <typename T, bool SIMPLE>
__device__ __forceinline__ float flce_logit2(float z, const T *bias, int j, float cap, float k) {
    if (!SIMPLE) {
        if (bias != NULL) z += to_float(bias[j]);
        z = flce_softcap(z, cap);
    }
    return z * k;
}

// What the statistics pass folds in besides the logits (none of it under SIMPLE).
struct flce_stats_opts {
    float cap, k;       // softcap (0 = off), log2(e) / temperature
    int want_sum;       // label smoothing: the sum of the logits
    const float *w;     // class weights of the buffer's column 0 when they weight that sum, or NULL
    int want_q;         // the entropy's q
};

// Folds one vector of logits (columns j0 .. j0+VEC; those >= V are skipped) into the running
// base-2 stats. zt2 replaces the target's own logit (column t) by its exact value.
template <typename T, typename TL, bool SIMPLE>
__device__ __forceinline__ void flce_stats_add_vec(flce_row_stats &st, const Packed128<TL> &x,
                                                   int j0, int V, const T *bias, int t, float zt2,
                                                   const flce_stats_opts &o) {
    constexpr int VEC = Packed128<TL>::size;
    float z2[VEC];
    float vmax = -INFINITY;
#pragma unroll
    for (int e = 0; e < VEC; e++) {
        const int j = j0 + e;
        z2[e] = j < V ? flce_logit2<T, SIMPLE>(to_float(x.v[e]), bias, j, o.cap, o.k) : -INFINITY;
        z2[e] = j == t ? zt2 : z2[e];
        if (o.want_sum && j < V) st.sz += !SIMPLE && o.w != NULL ? o.w[j] * z2[e] : z2[e];
        vmax = fmaxf(vmax, z2[e]);
    }
    // one rescale per vector rather than per element; 2^(-inf) = 0 drops columns >= V
    const float m_new = fmaxf(st.m, vmax);
    const float f = st.s == 0.0f ? 0.0f : flce_exp2(st.m - m_new);
    float s = st.s == 0.0f ? 0.0f : st.s * f;
    if (!SIMPLE && o.want_q) {
        float q = flce_q_rescale(st.q, st.s, st.m, m_new, f);
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            const float ex = flce_exp2(z2[e] - m_new);
            s += ex;
            // a column >= V has ex = 0 and m_new - z2 = inf (NaN if m_new = -inf): 256 instead
            q += ex * fminf(m_new - z2[e], 256.0f);
        }
        st.q = q;
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++) s += flce_exp2(z2[e] - m_new);
    }
    st.m = m_new;
    st.s = s;
}

// flce_row_grad (flce_internal.h): what the gradient of a row needs, besides its logits

// The row's loss, LSE, entropy and log-probability (written by one thread) and its gradient
// coefficients, with g the token's weight in the reduced loss, w the class weights (1 without),
// W their sum, and g_H, g_P the upstream gradients of the entropy and log-probability:
//   d loss_i / d z_j = g [ p_j ((1 - eps) w_t + eps W / V + 2 zl lse) - eps w_j / V
//                          - (1 - eps) w_t [j == t] ]
//                      + g_H p_j (mu - z_j) + g_P ([j == t] - p_j)
// Without weights (1 - eps) w_t + eps W / V is 1, computed as before (bitwise the results of
// flce 1.0 at temperature 1). V: every class, over all ranks under vocab_parallel, and st the
// statistics over all of them (combined over the ranks); w_t from the per-token target_weight
// there (the rank that holds the target's weight gave it to the others).
template <typename T, typename Tgt> struct flce_rows_args;

template <typename T, typename Tgt>
__device__ __forceinline__ flce_row_grad flce_row_finish(flce_row_stats st, int valid, int t, float zt, int64_t i,
                                                         const flce_rows_args<T, Tgt> &a, int write_loss) {
    const flce_loss_params &p = a.p;
    const int V = (int)a.V_total;
    flce_row_grad rg;
    rg.t = t;
    rg.zt2 = zt * FLCE_LOG2E;
    rg.cap = p.softcap;
    rg.k = p.k;
    rg.temp = p.temperature;
    rg.lse2 = st.m + log2f(st.s);
    const float lse = rg.lse2 * FLCE_LN2;
    const float *cw = a.class_weights;
    // (t is this rank's column of the target, -1 on another rank's: vocab_parallel reads w_t from
    // the target weights summed over the ranks)
    const float wt = valid && cw != NULL ? (a.target_weight != NULL ? a.target_weight[i] : cw[t]) : 1.0f;
    const float w_all = cw != NULL ? (float)a.scalars->class_weight_sum : 0.0f;
    // lse >= zt holds exactly (zt is one of the summed terms); clamp fp32 rounding
    const float nll = valid ? fmaxf(lse - zt, 0.0f) : 0.0f;
    float ent = 0.0f;
    if (p.want_entropy) ent = FLCE_LN2 * (log2f(st.s) + st.q / st.s);
    rg.mu2 = rg.lse2 - ent * FLCE_LOG2E;
    if (write_loss) {
        float loss = 0.0f;
        if (valid && cw != NULL) {
            // (eps / V) sum_j w_j (lse - z_j); weights may be negative, so no clamp
            const float smooth = (w_all * lse - st.sz * FLCE_LN2) / (float)V;
            loss = (1.0f - p.label_smoothing) * wt * nll + p.label_smoothing * smooth +
                   p.z_loss_scale * lse * lse;
        } else if (valid) {
            const float smooth = fmaxf(lse - st.sz * FLCE_LN2 / (float)V, 0.0f);
            loss = (1.0f - p.label_smoothing) * nll + p.label_smoothing * smooth +
                   p.z_loss_scale * lse * lse;
        }
        a.token_loss[i] = loss;
        a.token_lse[i] = lse;
        if (a.token_entropy != NULL) a.token_entropy[i] = ent;
        if (a.token_logprob != NULL) a.token_logprob[i] = -nll;
    }
    float g = 0.0f, g_p = 0.0f;
    if (valid) {
        g = p.grad_scale;
        if (p.reduction == 0) {  // n_valid >= 1 here; a weight sum may be 0 (then no gradient)
            if (cw == NULL) g /= (float)a.scalars->n_valid;
            else g = a.scalars->target_weight_sum != 0.0 ? g / (float)a.scalars->target_weight_sum : 0.0f;
        }
        if (p.reduction == 2 && a.grad_token_loss != NULL) g *= a.grad_token_loss[i];
        if (a.grad_logprob != NULL) g_p = p.grad_scale * a.grad_logprob[i];
    }
    const float g_h = a.grad_entropy != NULL ? p.grad_scale * a.grad_entropy[i] : 0.0f;
    const float pw = cw != NULL ? (1.0f - p.label_smoothing) * wt + p.label_smoothing * w_all / (float)V : 1.0f;
    rg.coef_p = p.inv_temp * (g * (pw + 2.0f * p.z_loss_scale * lse) - g_p);
    rg.coef_smooth = p.inv_temp * (g * p.label_smoothing / (float)V);
    rg.coef_target = p.inv_temp * (g * (1.0f - p.label_smoothing) * wt - g_p);
    rg.coef_e = p.inv_temp * (g_h * FLCE_LN2);
    return rg;
}

// dL/dz of one vector of logits (columns j0 .. j0+VEC; 0 at columns >= V); w: the class
// weights of column 0 when they weight the smoothing term, else NULL (never under SIMPLE)
template <typename T, typename TL, bool SIMPLE>
__device__ __forceinline__ void flce_grad_vec(float *d, const Packed128<TL> &x, int j0, int V,
                                              const T *bias, const float *w, const flce_row_grad &rg) {
    constexpr int VEC = Packed128<TL>::size;
#pragma unroll
    for (int e = 0; e < VEC; e++) {
        const int j = j0 + e;
        float z2 = j < V ? flce_logit2<T, SIMPLE>(to_float(x.v[e]), bias, j, rg.cap, rg.k) : 0.0f;
        z2 = j == rg.t ? rg.zt2 : z2;
        const float pj = flce_exp2(z2 - rg.lse2);
        float de;
        if (SIMPLE) {
            de = rg.coef_p * pj - rg.coef_smooth;
        } else {
            const float wj = w != NULL && j < V ? w[j] : 1.0f;
            de = rg.coef_p * pj - rg.coef_smooth * wj;
            // + g_H p_j (mu - z_j); exactly + 0 without an entropy gradient
            de += rg.coef_e * pj * (rg.mu2 - z2);
        }
        de -= j == rg.t ? rg.coef_target : 0.0f;
        if (!SIMPLE && rg.cap > 0.0f) {
            const float c = z2 * FLCE_LN2 * rg.temp / rg.cap;  // tanh of the capped logit
            de *= 1.0f - c * c;
        }
        d[e] = j < V ? de : 0.0f;
    }
}

// VEC values of T stored at p as one 16- or 8-byte access
template <typename T, int VEC>
__device__ __forceinline__ void flce_store_vec(T *p, const float *d) {
    constexpr int BYTES = VEC * (int)sizeof(T);
    static_assert(BYTES == 16 || BYTES == 8, "flce_store_vec stores 8 or 16 bytes");
    union { int4 v16; uint2 v8; T e[VEC]; } u;
#pragma unroll
    for (int e = 0; e < VEC; e++) u.e[e] = from_float<T>(d[e]);
    if constexpr (BYTES == 16) *reinterpret_cast<int4 *>(p) = u.v16;
    else *reinterpret_cast<uint2 *>(p) = u.v8;
}

// Pass 1 of a row: its base-2 statistics over columns 0..Vl of a buffer row (Vl may be 0: a
// tile of padding columns), reduced over the block. tl is the target's column in this row
// (-1 if none here), bias_l the bias of column 0.
template <typename T, typename TL, bool SIMPLE>
__device__ __forceinline__ flce_row_stats flce_row_stats_pass(const TL *row, int Vl,
                                                              const T *bias_l, int tl, float zt2,
                                                              const flce_stats_opts &o) {
    constexpr int VEC = Packed128<TL>::size, U = FLCE_CE_UNROLL_ELEMS / VEC;
    const int v_end = (Vl + VEC - 1) / VEC * VEC;  // <= the row stride: it is padded
    const int stride = (int)blockDim.x * VEC;
    // U loads in flight per thread before their first use
    flce_row_stats st = {-INFINITY, 0.0f, 0.0f, 0.0f};
    for (int j0 = (int)threadIdx.x * VEC; j0 < v_end; j0 += U * stride) {
        Packed128<TL> x[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (j0 + u * stride < v_end) x[u] = load128(row + j0 + u * stride);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (j0 + u * stride < v_end)
                flce_stats_add_vec<T, TL, SIMPLE>(st, x[u], j0 + u * stride, Vl, bias_l, tl, zt2, o);
    }
    return flce_block_reduce_stats(st);
}

// Pass 2 of a row: dL/dz of columns 0..Vl written as T over the same row (columns Vl..w_end
// get zeros), rg.t being the target's column in this row. When TL is wider than T (fp32
// logits, bf16 dlogits) the writes of tile k land on bytes that tiles 0..k were read from;
// the barrier between each tile's reads and writes keeps every read ahead of the write that
// overlaps it.
template <typename T, typename TL, bool SIMPLE>
__device__ __forceinline__ void flce_row_grad_pass(TL *row, int Vl, int w_end, const T *bias_l,
                                                   const float *w_l, const flce_row_grad &rg) {
    constexpr int VEC = Packed128<TL>::size, U = FLCE_CE_UNROLL_ELEMS / VEC;
    const int v_end = (Vl + VEC - 1) / VEC * VEC;
    const int stride = (int)blockDim.x * VEC;
    T *drow = reinterpret_cast<T *>(row);
    const int live = rg.coef_p != 0.0f || rg.coef_target != 0.0f || rg.coef_smooth != 0.0f || rg.coef_e != 0.0f;
    for (int base = 0; base < w_end; base += U * stride) {
        const int j0 = base + (int)threadIdx.x * VEC;
        Packed128<TL> x[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (live && j0 + u * stride < v_end) x[u] = load128(row + j0 + u * stride);
        float d[U][VEC];
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
            for (int e = 0; e < VEC; e++) d[u][e] = 0.0f;  // pad columns, and all of an ignored row
            if (live && j0 + u * stride < v_end)
                flce_grad_vec<T, TL, SIMPLE>(d[u], x[u], j0 + u * stride, Vl, bias_l, w_l, rg);
        }
        if (sizeof(T) != sizeof(TL)) __syncthreads();  // this tile read before it is overwritten
#pragma unroll
        for (int u = 0; u < U; u++)
            if (j0 + u * stride < w_end) flce_store_vec<T, VEC>(drow + j0 + u * stride, d[u]);
    }
}

// What the row kernel does at its place in the schedule.
enum {
    FLCE_ROWS_FORWARD = 0,   // whole rows: statistics, loss
    FLCE_ROWS_BACKWARD = 1,  // whole rows: statistics, loss, dlogits in place
    FLCE_ROWS_TILE_STATS = 2,// a vocabulary tile: statistics merged into tile_stats
    FLCE_ROWS_TILE_GRAD = 3, // a vocabulary tile: dlogits in place, from tile_grad
};

// The row kernel's arguments besides the buffer. The buffer holds logits of tokens row0.. in
// rows of stride ldl; its column j is vocabulary column col0 + j, for j < ncols (the whole
// rows: col0 = 0, ncols = Vp).
template <typename T, typename Tgt> struct flce_rows_args {
    int64_t ldl, row0, V;
    int col0, ncols;
    const T *bias;
    const Tgt *targets;
    long long ignore_index;
    const float *target_logit, *grad_token_loss;
    const flce_call_scalars *scalars;
    flce_loss_params p;
    float *token_loss, *token_lse;
    // flce 1.1: class weights (V) or NULL; optional outputs and upstream gradients (N)
    const float *class_weights;
    const float *target_weight;   // vocab_parallel with class weights: (N) each token's w_t; else NULL
    float *token_entropy, *token_logprob;
    const float *grad_entropy, *grad_logprob;
    flce_row_stats *tile_stats;   // (rows) statistics over the tiles so far (TILE_STATS)
    flce_row_grad *tile_grad;     // (rows) written by flce_tile_finish_kernel, read by TILE_GRAD
    int first_tile;               // TILE_STATS: the first tile overwrites tile_stats
    // vocab_parallel: the buffer's columns are classes v_off .. v_off + V of V_total (else
    // v_off = 0, V_total = V), and the finish reads the rows' statistics combined over the
    // ranks from vp_stats (max, sum of exp, sum of logits, q: four arrays of the chunk's rows,
    // flce_vp_*); NULL: from tile_stats
    int64_t v_off, V_total;
    const float *vp_stats;
};

// Token i's target as the row kernels see it: returns whether it counts (not ignored, in
// range); *t is its column (-1 if it does not count), *zt its exact logit, softcapped.
// Under vocab_parallel *t is the target's column among this rank's (-1 on another rank's) and
// *zt its logit from whichever rank holds it (the target logits were summed over the ranks).
template <typename T, typename Tgt>
__device__ __forceinline__ int flce_row_target(const flce_rows_args<T, Tgt> &a, int64_t i, int *t,
                                               float *zt) {
    const Tgt tg = a.targets[i];
    const int valid = flce_target_state(tg, a.ignore_index, a.V_total) > 0;
    const long long tl = (long long)tg - a.v_off;
    *t = valid && tl >= 0 && tl < a.V ? (int)tl : -1;
    *zt = valid ? flce_softcap(a.target_logit[i], a.p.softcap) * a.p.inv_temp : 0.0f;
    return valid;
}

// One block per row of the buffer (token row0 + blockIdx.x), logits of type TL; dlogits are
// written as T (the GEMM input type) over the same row: dlogits row r starts where logits row
// r starts, so its stride is ldl * sizeof(TL) / sizeof(T) elements of T.
template <typename T, typename TL, typename Tgt, int MODE, bool SIMPLE>
__global__ void __launch_bounds__(FLCE_CE_THREADS, 2)
flce_ce_rows_kernel(TL *logits, flce_rows_args<T, Tgt> a) {
    constexpr int VEC = Packed128<TL>::size;
    const int64_t r = blockIdx.x, i = a.row0 + r;
    TL *row = logits + r * a.ldl;
    // the tile's coefficients carry the target; the other modes read it
    flce_row_grad rg;
    int t = -1, valid = 0;
    float zt = 0.0f;
    if (MODE == FLCE_ROWS_TILE_GRAD) {
        rg = a.tile_grad[r];
        t = rg.t;
    } else {
        valid = flce_row_target(a, i, &t, &zt);
    }
    // the buffer's view: its columns 0..Vl are real classes, tl is the target's column in it
    const int Vi = (int)a.V, end = a.col0 + a.ncols < Vi ? a.col0 + a.ncols : Vi;
    const int Vl = end > a.col0 ? end - a.col0 : 0;
    const int tl = t >= a.col0 ? t - a.col0 : -1;
    // bias is read per element; a vector read would run past the end of a (Vp) bias
    const T *bias_l = a.bias != NULL ? a.bias + a.col0 : NULL;
    const int w_end = (a.ncols + VEC - 1) / VEC * VEC;  // <= ldl: the stride is padded

    // class weights enter per column only through the label-smoothing term
    const float *w_l = a.class_weights != NULL && a.p.label_smoothing > 0.0f ? a.class_weights + a.col0 : NULL;
    if (MODE != FLCE_ROWS_TILE_GRAD) {
        flce_stats_opts o;
        o.cap = a.p.softcap;
        o.k = a.p.k;
        o.want_sum = a.p.label_smoothing > 0.0f;
        o.w = w_l;
        o.want_q = a.p.want_entropy;
        const flce_row_stats st = flce_row_stats_pass<T, TL, SIMPLE>(row, Vl, bias_l, tl, zt * FLCE_LOG2E, o);
        if (MODE == FLCE_ROWS_TILE_STATS) {
            if (threadIdx.x == 0)
                a.tile_stats[r] = a.first_tile ? st : flce_stats_merge(a.tile_stats[r], st);
            return;
        }
        rg = flce_row_finish(st, valid, t, zt, i, a, threadIdx.x == 0);
        if (MODE == FLCE_ROWS_FORWARD) return;
    }
    rg.t = tl;
    flce_row_grad_pass<T, TL, SIMPLE>(row, Vl, w_end, bias_l, w_l, rg);
}

// The tile schedule, after the statistics pass over every tile: one thread per row of the
// chunk (a.row0..) turns its statistics into the loss and the gradient coefficients the
// TILE_GRAD passes read.
template <typename T, typename Tgt>
__global__ void flce_tile_finish_kernel(flce_rows_args<T, Tgt> a, int64_t rows) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const int64_t i = a.row0 + r;
    int t;
    float zt;
    const int valid = flce_row_target(a, i, &t, &zt);
    const flce_row_stats st = a.vp_stats != NULL ? flce_row_stats{a.vp_stats[r], a.vp_stats[rows + r],
                                                                  a.vp_stats[2 * rows + r], a.vp_stats[3 * rows + r]}
                                                 : a.tile_stats[r];
    a.tile_grad[r] = flce_row_finish(st, valid, t, zt, i, a, 1);
}

// ----------------------------------------------------------------------------------------
// vocab_parallel: the rows' statistics combined over the ranks. The exchange buffer of a
// chunk of `rows` rows holds five arrays of rows floats: the local max (kept), then the four
// that go through the communicator: max (MAX over the ranks), sum of exp (rescaled to that
// max, then SUM), sum of logits (of w_j z_j with class weights; SUM) and the entropy's q
// (rescaled to that max, then SUM; 0 unless the call wants the entropy); all base 2, as
// flce_row_stats.

// from the cuBLASLt path's merged statistics (the Hopper path's merge kernel writes them itself)
static __global__ void flce_vp_local_kernel(const flce_row_stats *st, float *vp, int64_t rows) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const flce_row_stats s = st[r];
    vp[r] = s.m;
    vp[rows + r] = s.m;
    vp[2 * rows + r] = s.s;
    vp[3 * rows + r] = s.sz;
    vp[4 * rows + r] = s.q;
}

// after the MAX: each rank's sum of exp and q relative to the global max (a rank whose
// columns all lie far below it contributes 0, never 0 * inf)
static __global__ void flce_vp_rescale_kernel(float *vp, int64_t rows) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float s = vp[2 * rows + r], m = vp[r], mg = vp[rows + r];
    const float f = s == 0.0f ? 0.0f : flce_exp2(m - mg);
    vp[2 * rows + r] = s == 0.0f ? 0.0f : s * f;
    vp[4 * rows + r] = flce_q_rescale(vp[4 * rows + r], s, m, mg, f);
}

// ----------------------------------------------------------------------------------------
// class weights

// With class weights, once per call after prepare (one block): the weighted mean's divisor,
// the sum of the valid targets' weights, and the sum of all V weights (the label-smoothing
// term's), each in double in a fixed order. A bad target is left out (the call fails anyway).
// vocab_parallel: V is vocab_total and tw holds each token's target weight and at [N] the sum
// of every class's weight, both combined over the ranks (flce_vp_weights_kernel); else NULL.
template <typename Tgt>
__global__ void flce_weight_sum_kernel(const Tgt *targets, int64_t N, int64_t V, long long ignore_index,
                                       const float *w, const float *tw, flce_call_scalars *scalars) {
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        const Tgt t = targets[i];
        if (flce_target_state(t, ignore_index, V) > 0) acc += tw != NULL ? (double)tw[i] : (double)w[(int64_t)t];
    }
    const double targets_sum = block_sum_f64(acc);
    __syncthreads();  // thread 0 has read block_sum_f64's shared partials before they are reused
    double class_sum = 0.0;
    if (tw != NULL) {
        class_sum = (double)tw[N];
    } else {
        acc = 0.0;
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) acc += (double)w[j];
        class_sum = block_sum_f64(acc);
    }
    if (threadIdx.x == 0) {
        scalars->target_weight_sum = targets_sum;
        scalars->class_weight_sum = class_sum;
    }
}

// vocab_parallel with class weights, once per call before the exchange of the target logits
// (one block): tw[i] = the weight of token i's target where this rank holds its class (V
// classes from v_off; class_weights are this rank's), else 0, and tw[N] the sum of this rank's
// weights (in double, rounded once). Summed over the ranks with the target logits, in whose
// buffer tw follows them.
template <typename Tgt>
__global__ void flce_vp_weights_kernel(const Tgt *targets, int64_t N, int64_t V, int64_t v_off, int64_t V_total,
                                       long long ignore_index, const float *w, float *tw) {
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        const Tgt t = targets[i];
        const int64_t tl = (int64_t)t - v_off;
        tw[i] = flce_target_state(t, ignore_index, V_total) > 0 && tl >= 0 && tl < V ? w[tl] : 0.0f;
    }
    double acc = 0.0;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) acc += (double)w[j];
    const double sum = block_sum_f64(acc);
    if (threadIdx.x == 0) tw[N] = (float)sum;
}

// ----------------------------------------------------------------------------------------
// finalize: one block

template <typename Tgt>
__global__ void flce_finalize_kernel(const float *token_loss, int64_t N, int reduction, int weighted,
                                     const flce_call_scalars *scalars, const Tgt *targets,
                                     float *loss_out, flce_host_status *host_status) {
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) acc += (double)token_loss[i];
    double total = block_sum_f64(acc);
    if (threadIdx.x != 0) return;
    if (reduction == 0 && weighted)
        total = scalars->target_weight_sum != 0.0 ? total / scalars->target_weight_sum : 0.0;
    else if (reduction == 0)
        total = scalars->n_valid > 0 ? total / (double)scalars->n_valid : 0.0;
    const unsigned long long bad = scalars->first_bad_token;
    if (bad != FLCE_NO_BAD_TOKEN) {
        // never a silently wrong loss: the bad rows were skipped, so the value is poisoned
        total = (double)NAN;
        host_status->position = (long long)bad;
        host_status->value = (long long)targets[bad];
        __threadfence_system();
        host_status->code = 1;
        __threadfence_system();
    }
    if (loss_out != NULL) *loss_out = (float)total;
}

// out[k] = (accumulate ? out[k] : 0) + acc[k], for the bf16 d_weight / d_bias outputs (and
// a d_hidden of either type summed over the ranks in fp32)
template <typename TO>
__global__ void flce_add_f32_kernel(TO *out, const float *acc, int64_t n, int accumulate) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        float v = acc[k];
        if (accumulate) v += to_float(out[k]);
        out[k] = from_float<TO>(v);
    }
}

// x[k] = 1, the vector that turns a GEMM into the column sums d_bias needs
template <typename T>
__global__ void flce_fill_ones_kernel(T *x, int64_t n) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x)
        x[k] = from_float<T>(1.0f);
}

#endif // FLCE_KERNELS_CUH
