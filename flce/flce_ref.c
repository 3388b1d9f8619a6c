/*
flce_ref.c - CPU reference for flce.h; see flce_ref.h for the contract.

Per token i (z over the V real classes only, after bias, softcap and temperature T):
    lse_i  = log sum_j exp(z_ij),  p_ij = exp(z_ij - lse_i)
    loss_i = (1 - eps) (lse_i - z_iy) + eps (lse_i - mean_j z_ij) + zl lse_i^2
    dloss_i/dz_ij = p_ij (1 + 2 zl lse_i) - (1 - eps) [j == y] - eps / V
and with class weights w (Wsum = sum_j w_j; PyTorch's weighted label smoothing):
    loss_i = (1 - eps) w_y (lse_i - z_iy) + (eps / V) sum_j w_j (lse_i - z_ij) + zl lse_i^2
    dloss_i/dz_ij = p_ij ((1 - eps) w_y + eps Wsum / V + 2 zl lse_i) - (1 - eps) w_y [j == y]
                    - eps w_j / V
(the unweighted formulas are kept as they were where there are no weights, so that results
without the new options are bitwise the old ones). With softcap c, the capped logit is
c tanh(a / c) of the raw logit a and z = that / T, so dz/da = (1 - (z T / c)^2) / T.
Each token's row of dL/da is that times g_i, the token's weight in the reduced loss
(grad_scale / divisor for mean, the divisor being the count of non-ignored tokens or the sum
of their w_y; grad_scale for sum, grad_scale * grad_token_loss_i for none, 0 for ignored
tokens), plus grad_scale times the entropy's and log-probability's upstream gradients times
    dH_i/dz_ij = p_ij (mu_i - z_ij),  mu_i = sum_k p_ik z_ik = lse_i - H_i
    dlogprob_i/dz_ij = [j == y] - p_ij;
then d_h_i = sum_j dL/da_ij W_j, d_W_j = sum_i dL/da_ij h_i and d_b_j = sum_i dL/da_ij.
Under vocab_parallel (flce_reference_vp_ex) V in these formulas is vocab_total and the sums
over j run over every rank's classes: this rank's partial statistics go through comm (see
flce_ref.h), the entropy from them as log(se) + q / se.

Tokens are processed in blocks of REF_BLOCK so that every row of W (and of d_W) is
brought into cache once per block rather than once per token: the loops run j over the
vocabulary outside and the block's tokens inside, and the innermost loops walk H
contiguously. All sums are in double; the float inputs are widened, and a product of two
floats is exact in double, so the logits round only in their additions.
*/
#include "flce_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REF_BLOCK 16

// Dot product of two length-n double vectors with four independent partial sums, so the
// loop is not one long chain of dependent additions (the order is fixed, so the result is
// still deterministic).
static double ref_dot(const double *a, const double *b, int64_t n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) {
        s0 += a[k] * b[k];
        s1 += a[k + 1] * b[k + 1];
        s2 += a[k + 2] * b[k + 2];
        s3 += a[k + 3] * b[k + 3];
    }
    for (; k < n; k++) s0 += a[k] * b[k];
    return (s0 + s1) + (s2 + s3);
}

// The dot products of four vectors a0..a3 with one b, sharing its loads; out[r] = a_r . b.
static void ref_dot4(const double *a0, const double *a1, const double *a2, const double *a3,
                     const double *b, int64_t n, double *out) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (int64_t k = 0; k < n; k++) {
        const double bk = b[k];
        s0 += a0[k] * bk;
        s1 += a1[k] * bk;
        s2 += a2[k] * bk;
        s3 += a3[k] * bk;
    }
    out[0] = s0; out[1] = s1; out[2] = s2; out[3] = s3;
}

static void ref_axpy(double *y, double a, const double *x, int64_t n) {
    for (int64_t k = 0; k < n; k++) y[k] += a * x[k];
}

// y += a[0] x0 + a[1] x1 + a[2] x2 + a[3] x3: one pass over y for four updates, which is
// what keeps the backward sweep from being bound by loads and stores of y
static void ref_axpy4(double *y, const double *a, const double *x0, const double *x1,
                      const double *x2, const double *x3, int64_t n) {
    const double a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
    for (int64_t k = 0; k < n; k++) y[k] += (a0 * x0[k] + a1 * x1[k]) + (a2 * x2[k] + a3 * x3[k]);
}

static void ref_widen(double *dst, const float *src, int64_t n) {
    for (int64_t k = 0; k < n; k++) dst[k] = (double)src[k];
}

flce_status flce_reference(const flce_config *cfg, const float *h, const float *W,
                           const float *bias, const int32_t *targets,
                           const float *grad_token_loss, double *loss, double *token_loss,
                           double *token_lse, double *d_h, double *d_W, double *d_bias,
                           int64_t *bad_position) {
    return flce_reference_vp_ex(cfg, NULL, h, W, bias, targets, grad_token_loss, NULL, loss,
                                token_loss, token_lse, d_h, d_W, d_bias, bad_position);
}

flce_status flce_reference_ex(const flce_config *cfg, const float *h, const float *W,
                              const float *bias, const int32_t *targets,
                              const float *grad_token_loss, const flce_reference_extra *extra,
                              double *loss, double *token_loss, double *token_lse, double *d_h,
                              double *d_W, double *d_bias, int64_t *bad_position) {
    return flce_reference_vp_ex(cfg, NULL, h, W, bias, targets, grad_token_loss, extra, loss,
                                token_loss, token_lse, d_h, d_W, d_bias, bad_position);
}

flce_status flce_reference_vp(const flce_config *cfg, const flce_comm *comm, const float *h,
                              const float *W, const float *bias, const int32_t *targets,
                              const float *grad_token_loss, double *loss, double *token_loss,
                              double *token_lse, double *d_h, double *d_W, double *d_bias,
                              int64_t *bad_position) {
    return flce_reference_vp_ex(cfg, comm, h, W, bias, targets, grad_token_loss, NULL, loss,
                                token_loss, token_lse, d_h, d_W, d_bias, bad_position);
}

// comm->allreduce over n doubles; 0 on success
static int ref_allreduce(const flce_comm *comm, double *buf, size_t n, flce_comm_op op) {
    return comm->allreduce(comm->user, buf, n, FLCE_COMM_FP64, op, NULL);
}

flce_status flce_reference_vp_ex(const flce_config *cfg, const flce_comm *comm, const float *h,
                                 const float *W, const float *bias, const int32_t *targets,
                                 const float *grad_token_loss, const flce_reference_extra *extra,
                                 double *loss, double *token_loss, double *token_lse, double *d_h,
                                 double *d_W, double *d_bias, int64_t *bad_position) {
    static const flce_reference_extra no_extra = {NULL, NULL, NULL, NULL, NULL};
    if (extra == NULL) extra = &no_extra;
    if (bad_position) *bad_position = -1;
    if (cfg == NULL || h == NULL || W == NULL || targets == NULL) return FLCE_ERR_NULL_POINTER;
    const int64_t N = cfg->n_tokens, H = cfg->hidden, V = cfg->vocab, Vp = cfg->vocab_padded;
    if (N <= 0 || H <= 0 || V <= 0 || Vp < V) return FLCE_ERR_INVALID_SIZE;
    // vocabulary parallel: this rank's columns are global classes v0 .. v0 + V of Vt
    const int vp = cfg->vocab_parallel;
    if (vp != 0 && vp != 1) return FLCE_ERR_INVALID_VALUE;
    if (!vp && (cfg->vocab_offset != 0 || cfg->vocab_total != 0 || cfg->d_hidden_partial != 0))
        return FLCE_ERR_INVALID_VALUE;
    if (vp && (cfg->vocab_offset < 0 || cfg->vocab_total < V ||
               cfg->vocab_offset > cfg->vocab_total - V))
        return FLCE_ERR_INVALID_SIZE;
    if (vp && cfg->d_hidden_partial != 0 && cfg->d_hidden_partial != 1) return FLCE_ERR_INVALID_VALUE;
    if (vp && (comm == NULL || comm->allreduce == NULL)) return FLCE_ERR_COMM;
    const int64_t v0 = vp ? cfg->vocab_offset : 0, Vt = vp ? cfg->vocab_total : V;
    if (cfg->has_bias && bias == NULL) return FLCE_ERR_NULL_POINTER;
    if (!cfg->has_bias && d_bias != NULL) return FLCE_ERR_INVALID_VALUE;
    const double eps = cfg->label_smoothing, zl = cfg->z_loss_scale, cap = cfg->softcap;
    const double gscale = cfg->grad_scale;
    // written so that a NaN fails every test
    if (!(eps >= 0.0 && eps < 1.0) || !(zl >= 0.0 && isfinite(zl)) ||
        !(cap >= 0.0 && isfinite(cap)) || !isfinite(gscale))
        return FLCE_ERR_INVALID_VALUE;
    if (cfg->reduction != FLCE_REDUCTION_MEAN && cfg->reduction != FLCE_REDUCTION_SUM &&
        cfg->reduction != FLCE_REDUCTION_NONE)
        return FLCE_ERR_INVALID_VALUE;
    const double temp = cfg->temperature;
    if (!(temp > 0.0 && isfinite(temp))) return FLCE_ERR_INVALID_VALUE;
    const float *cw = extra->class_weights;
    if (cfg->has_class_weights != 0 && cfg->has_class_weights != 1) return FLCE_ERR_INVALID_VALUE;
    if (cfg->has_class_weights && cw == NULL) return FLCE_ERR_NULL_POINTER;
    if (!cfg->has_class_weights && cw != NULL) return FLCE_ERR_INVALID_VALUE;
    double w_sum = 0.0;  // Wsum, the smoothing term's (this rank's classes until the exchange)
    for (int64_t j = 0; cw && j < V; j++) {
        if (!isfinite(cw[j])) return FLCE_ERR_INVALID_VALUE;
        w_sum += (double)cw[j];
    }

    // Every target is validated before anything is read through it or written, so a bad
    // one can neither index W out of bounds nor leave half-written outputs behind.
    for (int64_t i = 0; i < N; i++) {
        const int64_t y = targets[i];
        if (y == cfg->ignore_index) continue;
        if (y < 0 || y >= Vt) {
            if (bad_position) *bad_position = i;
            return FLCE_ERR_TARGET;
        }
    }

    double *hd = (double *)malloc((size_t)(REF_BLOCK * H) * sizeof(double));
    double *wd = (double *)malloc((size_t)(4 * H) * sizeof(double));
    double *z = (double *)malloc((size_t)(REF_BLOCK * V) * sizeof(double));
    // with class weights: each token's target weight w_y, and at [N] the sum of all classes'
    double *tw = cw ? (double *)malloc((size_t)(N + 1) * sizeof(double)) : NULL;
    double g[REF_BLOCK];  // each token's weight in the reduced loss
    int live[REF_BLOCK];  // whether the token's row has a gradient at all
    if (!hd || !wd || !z || (cw && !tw)) {
        // there is no allocation status; "workspace" is the closest meaning
        free(hd); free(wd); free(z); free(tw);
        return FLCE_ERR_WORKSPACE;
    }
    // vocab_parallel: each weight from the one rank that holds the target's class (the others
    // give 0), and the ranks' sums of their classes' weights, summed in one collective
    for (int64_t i = 0; cw && i < N; i++) {
        const int64_t yl = (int64_t)targets[i] - v0;
        tw[i] = targets[i] != cfg->ignore_index && yl >= 0 && yl < V ? (double)cw[yl] : 0.0;
    }
    if (cw) tw[N] = w_sum;
    if (vp && cw && ref_allreduce(comm, tw, (size_t)(N + 1), FLCE_COMM_SUM) != 0) goto comm_failed;
    if (cw) w_sum = tw[N];
    // The mean's divisor: the non-ignored tokens, or the sum of their targets' weights.
    double divisor = 0.0;
    for (int64_t i = 0; i < N; i++)
        if (targets[i] != cfg->ignore_index) divisor += cw ? tw[i] : 1.0;

    // gradients are overwritten, and the padding rows are simply never touched again
    if (d_h) memset(d_h, 0, (size_t)(N * H) * sizeof(double));
    if (d_W) memset(d_W, 0, (size_t)(Vp * H) * sizeof(double));
    if (d_bias) memset(d_bias, 0, (size_t)Vp * sizeof(double));
    const int want_grad = d_h != NULL || d_W != NULL || d_bias != NULL;

    // Mean over zero tokens (or zero total weight) is defined as 0 with zero gradients,
    // never 0/0.
    double token_weight = gscale;
    if (cfg->reduction == FLCE_REDUCTION_MEAN)
        token_weight = divisor != 0.0 ? gscale / divisor : 0.0;
    double loss_sum = 0.0;

    for (int64_t i0 = 0; i0 < N; i0 += REF_BLOCK) {
        const int64_t nb = N - i0 < REF_BLOCK ? N - i0 : REF_BLOCK;
        ref_widen(hd, h + i0 * H, nb * H);

        // logits of the block: W row j is widened once and dotted with every token, four
        // tokens at a time
        for (int64_t j = 0; j < V; j++) {
            ref_widen(wd, W + j * H, H);
            const double b = cfg->has_bias ? (double)bias[j] : 0.0;
            int64_t t = 0;
            double d[4];
            for (; t + 4 <= nb; t += 4) {
                const double *ht = hd + t * H;
                ref_dot4(ht, ht + H, ht + 2 * H, ht + 3 * H, wd, H, d);
                for (int r = 0; r < 4; r++) z[(t + r) * V + j] = d[r] + b;
            }
            for (; t < nb; t++) z[t * V + j] = ref_dot(hd + t * H, wd, H) + b;
            if (cap > 0.0)
                for (t = 0; t < nb; t++) z[t * V + j] = cap * tanh(z[t * V + j] / cap);
            if (temp != 1.0)
                for (t = 0; t < nb; t++) z[t * V + j] /= temp;
        }

        // softmax statistics of the block's rows over this rank's columns: max, sum of exp
        // relative to it, sum of logits (of w_j z_j with class weights), the target's logit where
        // this rank holds it (else 0: exactly one rank does), and for the entropy under
        // vocab_parallel q = sum_j exp(z_j - max) (max - z_j) (non-negative terms); with
        // vocab_parallel combined over the ranks as flce.h describes (the maxima first, then the
        // sums rescaled to the global max: se by exp(m - M), q to exp(m - M) (q + se (M - m)))
        const int want_ent = extra->token_entropy != NULL || extra->grad_entropy != NULL;
        double zmax[REF_BLOCK], lmax[REF_BLOCK], x[4 * REF_BLOCK];  // x: se, zsum, z_y, q
        memset(x, 0, sizeof(x));  // a short last block sends zeros past nb
        for (int64_t t = 0; t < nb; t++) {
            const double *zt = z + t * V;
            double m = zt[0], se = 0.0, zsum = 0.0, q = 0.0;
            for (int64_t j = 1; j < V; j++) m = zt[j] > m ? zt[j] : m;
            for (int64_t j = 0; j < V; j++) {
                se += exp(zt[j] - m);
                zsum += cw ? (double)cw[j] * zt[j] : zt[j];
            }
            if (vp && want_ent)
                for (int64_t j = 0; j < V; j++) q += exp(zt[j] - m) * (m - zt[j]);
            const int64_t yl = (int64_t)targets[i0 + t] - v0;
            const int here = targets[i0 + t] != cfg->ignore_index && yl >= 0 && yl < V;
            zmax[t] = lmax[t] = m;
            x[t] = se;
            x[REF_BLOCK + t] = zsum;
            x[2 * REF_BLOCK + t] = here ? zt[yl] : 0.0;
            x[3 * REF_BLOCK + t] = q;
        }
        if (vp) {
            if (ref_allreduce(comm, zmax, (size_t)nb, FLCE_COMM_MAX) != 0) goto comm_failed;
            for (int64_t t = 0; t < nb; t++) {
                const double f = exp(lmax[t] - zmax[t]);
                x[3 * REF_BLOCK + t] = f * (x[3 * REF_BLOCK + t] + x[t] * (zmax[t] - lmax[t]));
                x[t] *= f;
            }
            if (ref_allreduce(comm, x, 4 * REF_BLOCK, FLCE_COMM_SUM) != 0) goto comm_failed;
        }

        // per-token loss, and dL/da written over the logits
        for (int64_t t = 0; t < nb; t++) {
            const int64_t i = i0 + t;
            double *zt = z + t * V;
            const double lse = zmax[t] + log(x[t]), zsum = x[REF_BLOCK + t], zy = x[2 * REF_BLOCK + t];
            if (token_lse) token_lse[i] = lse;
            // the entropy as a sum of non-negative terms p_j (lse - z_j): no cancellation (under
            // vocab_parallel from the combined statistics: log(se) + q / se, the same sum)
            double ent = 0.0;
            if (want_ent && vp) ent = log(x[t]) + x[3 * REF_BLOCK + t] / x[t];
            else if (want_ent)
                for (int64_t j = 0; j < V; j++) ent += exp(zt[j] - lse) * (lse - zt[j]);
            if (extra->token_entropy) extra->token_entropy[i] = ent;

            const int64_t y = targets[i];
            const int ignored = y == cfg->ignore_index;
            const double wy = cw && !ignored ? tw[i] : 1.0;
            double li = 0.0;
            if (!ignored && cw)  // zsum is sum_j w_j z_j
                li = (1.0 - eps) * wy * (lse - zy) + eps / (double)Vt * (w_sum * lse - zsum) + zl * lse * lse;
            else if (!ignored)
                li = (1.0 - eps) * (lse - zy) + eps * (lse - zsum / (double)Vt) + zl * lse * lse;
            if (token_loss) token_loss[i] = li;
            if (extra->token_logprob) extra->token_logprob[i] = ignored ? 0.0 : zy - lse;
            loss_sum += li;

            g[t] = 0.0;
            live[t] = 0;
            if (!want_grad) continue;
            if (!ignored) {
                g[t] = token_weight;
                if (cfg->reduction == FLCE_REDUCTION_NONE && grad_token_loss)
                    g[t] *= (double)grad_token_loss[i];
            }
            const double gh = extra->grad_entropy ? gscale * (double)extra->grad_entropy[i] : 0.0;
            const double gp = extra->grad_logprob && !ignored ? gscale * (double)extra->grad_logprob[i] : 0.0;
            if (g[t] == 0.0 && gh == 0.0 && gp == 0.0) continue;
            live[t] = 1;
            const double mu = lse - ent;
            const double pscale = cw ? (1.0 - eps) * wy + eps * w_sum / (double)Vt + 2.0 * zl * lse
                                     : 1.0 + 2.0 * zl * lse;
            const double smooth = eps / (double)Vt, target = cw ? (1.0 - eps) * wy : 1.0 - eps;
            const int64_t yl = y - v0;  // the target's column here (none if outside [0, V))
            for (int64_t j = 0; j < V; j++) {
                const double pj = exp(zt[j] - lse);
                double d = pj * pscale - (cw ? smooth * (double)cw[j] : smooth);
                if (j == yl) d -= target;
                double capf = 1.0;
                if (cap > 0.0) {
                    const double th = zt[j] * temp / cap;
                    capf = 1.0 - th * th;
                    d *= capf;
                }
                double dz = g[t] * d;
                if (gh != 0.0 || gp != 0.0)
                    dz += (gh * pj * (mu - zt[j]) + gp * ((j == yl ? 1.0 : 0.0) - pj)) * capf;
                zt[j] = dz / temp;
            }
        }
        if (!want_grad) continue;

        // d_h, d_W and d_bias of the block in one sweep over the vocabulary, four rows of W
        // at a time; tokens without a gradient (ignored, or zero weight) are left out
        int64_t act[REF_BLOCK], na = 0;
        for (int64_t t = 0; t < nb; t++)
            if (live[t]) act[na++] = t;
        for (int64_t j0 = 0; j0 < V; j0 += 4) {
            const int64_t nj = V - j0 < 4 ? V - j0 : 4;
            if (d_h) ref_widen(wd, W + j0 * H, nj * H);
            for (int64_t a = 0; a < na; a++) {
                const double *zt = z + act[a] * V + j0;
                double *dht = d_h ? d_h + (i0 + act[a]) * H : NULL;
                if (d_bias)
                    for (int64_t jj = 0; jj < nj; jj++) d_bias[j0 + jj] += zt[jj];
                if (dht == NULL) continue;
                if (nj == 4) ref_axpy4(dht, zt, wd, wd + H, wd + 2 * H, wd + 3 * H, H);
                else
                    for (int64_t jj = 0; jj < nj; jj++) ref_axpy(dht, zt[jj], wd + jj * H, H);
            }
            for (int64_t jj = 0; d_W && jj < nj; jj++) {
                const int64_t j = j0 + jj;
                double *dWj = d_W + j * H;
                int64_t a = 0;
                for (; a + 4 <= na; a += 4) {
                    const double c[4] = {z[act[a] * V + j], z[act[a + 1] * V + j],
                                         z[act[a + 2] * V + j], z[act[a + 3] * V + j]};
                    ref_axpy4(dWj, c, hd + act[a] * H, hd + act[a + 1] * H, hd + act[a + 2] * H,
                              hd + act[a + 3] * H, H);
                }
                for (; a < na; a++) ref_axpy(dWj, z[act[a] * V + j], hd + act[a] * H, H);
            }
        }
    }

    // each rank's d_h is the part of its columns: summed over the ranks in one collective
    if (vp && d_h && !cfg->d_hidden_partial &&
        ref_allreduce(comm, d_h, (size_t)(N * H), FLCE_COMM_SUM) != 0)
        goto comm_failed;
    if (cfg->reduction == FLCE_REDUCTION_MEAN)
        loss_sum = divisor != 0.0 ? loss_sum / divisor : 0.0;
    if (loss) *loss = loss_sum;
    free(hd); free(wd); free(z); free(tw);
    return FLCE_OK;
comm_failed:
    free(hd); free(wd); free(z); free(tw);
    return FLCE_ERR_COMM;
}
