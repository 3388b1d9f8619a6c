/*
flce_ref.h - CPU reference for the fused linear cross-entropy of flce.h, in plain C99
with fp64 accumulation. It exists to check the CUDA implementation and the PyTorch
fixtures against a third, independent computation; it is written for clarity and for
being fast enough to run on test-sized problems (N=512, H=256, V=8000 in about a second
at -O2), not for speed.

It implements every numerical option of flce_config (vocab_padded, has_bias,
ignore_index, reduction, label_smoothing, z_loss_scale, softcap, grad_scale, temperature,
has_class_weights, and vocab_parallel with its fields) and the optional per-token entropy
and target log-probability with their upstream gradients (flce_reference_ex,
flce_reference_vp_ex), with the exact math written at the top of flce.h. The storage
options (dtype, d_*_dtype, accumulate_*, target_type, max_chunk_tokens) do not apply:
inputs are float32, targets int32, outputs fp64 and always overwritten. A bf16 run is checked by giving the
reference the bf16 values widened to float.
*/
#ifndef FLCE_REF_H
#define FLCE_REF_H

#include <stdint.h>

#include "flce.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
Inputs (host memory): h (N*H), W (Vp*H), bias (Vp; read iff cfg->has_bias, then required),
targets (N), grad_token_loss (N; upstream gradient per token, used only with reduction
none; NULL means all ones).

Outputs (host memory, every one optional, NULL to skip):
  loss        the reduced loss: mean over non-ignored tokens (0 when all are ignored),
              sum, or for reduction none the sum of the per-token losses
  token_loss  (N) per-token loss, 0 for ignored tokens
  token_lse   (N) log-sum-exp over the V real classes, for every token (ignored ones too)
  d_h         (N*H)  dL/dh,  times grad_scale
  d_W         (Vp*H) dL/dW,  times grad_scale; rows V..Vp-1 are 0
  d_bias      (Vp)   dL/db,  times grad_scale; entries V..Vp-1 are 0; needs has_bias
  bad_position  set to the first token whose target is neither ignore_index nor in [0, V),
                or to -1

Returns FLCE_OK; FLCE_ERR_NULL_POINTER / FLCE_ERR_INVALID_SIZE / FLCE_ERR_INVALID_VALUE for
a missing input or an impossible config; FLCE_ERR_TARGET for a bad target. All targets
are checked before anything is computed, so on any error no output except bad_position
is written.
*/
flce_status flce_reference(const flce_config *cfg, const float *h, const float *W,
                           const float *bias, const int32_t *targets,
                           const float *grad_token_loss, double *loss, double *token_loss,
                           double *token_lse, double *d_h, double *d_W, double *d_bias,
                           int64_t *bad_position);

/*
The options of flce 1.1 (host memory, every one optional unless stated):
  class_weights   (V) per-class weights, finite; required iff cfg->has_class_weights, and
                  refused (FLCE_ERR_INVALID_VALUE) without it
  grad_entropy    (N) upstream gradient of token_entropy (every token)
  grad_logprob    (N) upstream gradient of token_logprob (non-ignored tokens)
  token_entropy   (N) output: lse - sum_j p_j z_j, for every token
  token_logprob   (N) output: z_y - lse, 0 for ignored tokens
The gradients returned are those of grad_scale * (reduced loss + sum_i grad_entropy_i H_i +
sum_i grad_logprob_i logprob_i).
*/
typedef struct {
    const float *class_weights;
    const float *grad_entropy;
    const float *grad_logprob;
    double *token_entropy;
    double *token_logprob;
} flce_reference_extra;

// flce_reference with the options above (extra may be NULL: flce_reference itself).
flce_status flce_reference_ex(const flce_config *cfg, const float *h, const float *W,
                              const float *bias, const int32_t *targets,
                              const float *grad_token_loss, const flce_reference_extra *extra,
                              double *loss, double *token_loss, double *token_lse, double *d_h,
                              double *d_W, double *d_bias, int64_t *bad_position);

/*
The same with vocabulary parallelism (cfg->vocab_parallel = 1, see flce.h): W, bias, d_W and
d_bias are this rank's vocab_padded rows (global ids vocab_offset ..), class_weights (of
flce_reference_vp_ex) this rank's vocab classes, targets are global, and the row statistics
(per block of tokens: MAX of the maxima, then SUM of the rescaled sums of exp, sums of logits,
target logits and the entropy's rescaled q), d_h (SUM over the ranks, unless
d_hidden_partial) and, with class weights, once per call every target's weight and the sum
of all classes' weights (SUM) go through comm->allreduce with FLCE_COMM_FP64 host buffers and
a NULL stream. Ranks run it concurrently (threads, or processes), each with its own comm
handle that meets the others in every collective, with the same config apart from the shard
and the same options (every rank makes the same collectives). Without vocab_parallel comm is not used (flce_reference passes NULL).
FLCE_ERR_COMM: vocab_parallel without a comm, or an allreduce that returned non-zero.
*/
flce_status flce_reference_vp(const flce_config *cfg, const flce_comm *comm, const float *h,
                              const float *W, const float *bias, const int32_t *targets,
                              const float *grad_token_loss, double *loss, double *token_loss,
                              double *token_lse, double *d_h, double *d_W, double *d_bias,
                              int64_t *bad_position);

// Both: vocabulary parallelism with the options of flce 1.1 (comm and extra as above;
// flce_reference_ex is this with comm NULL, flce_reference_vp with extra NULL).
flce_status flce_reference_vp_ex(const flce_config *cfg, const flce_comm *comm, const float *h,
                                 const float *W, const float *bias, const int32_t *targets,
                                 const float *grad_token_loss, const flce_reference_extra *extra,
                                 double *loss, double *token_loss, double *token_lse, double *d_h,
                                 double *d_W, double *d_bias, int64_t *bad_position);

#ifdef __cplusplus
}
#endif
#endif // FLCE_REF_H
