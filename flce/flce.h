/*
flce.h - fused linear cross-entropy on CUDA, public C API.

Computes, for hidden states h (N, H), an LM-head weight W (Vp, H) with V <= Vp real
classes, an optional bias b (Vp) and integer targets y (N):

    z      = h @ W^T + b                      (N, V)   never stored whole
    z      = softcap * tanh(z / softcap)               if softcap > 0
    z      = z / temperature                           (default 1; after the softcap, as
                                                       verl and vLLM apply it last)
    lse_i  = log sum_j exp(z_ij)                       over the V real classes only
    loss_i = (1 - eps) w_y (lse_i - z_i,y) + (eps / V) sum_j w_j (lse_i - z_ij) + zl * lse_i^2
    loss   = mean over non-ignored tokens | sum | none (per-token)
with class weights w (all 1 unless has_class_weights: F.cross_entropy's `weight`, its
label-smoothing term included); a mean divides by sum_i w_{y_i} over the non-ignored tokens
(PyTorch's weighted mean; the count of them without weights; 0 when that is 0). The z-loss
term is not weighted (as Liger). Optional per-token outputs: the entropy
H_i = lse_i - sum_j p_ij z_ij and the target log-probability z_i,y - lse_i, each with an
optional upstream gradient (grad_entropy, grad_logprob) that adds to the loss's:
    d H_i / d z_ij = -p_ij (z_ij - sum_k p_ik z_ik),  d logprob_i / d z_ij = [j == y] - p_ij.

and, in the same call, d_hidden = dL/dh, d_weight = dL/dW, d_bias = dL/db, without ever
holding the (N, V) logits. Two schedules, chosen from the caller's workspace by a cost model:
  chunks  tokens in chunks, the whole vocabulary per chunk: 3 GEMMs (logits, d_h, d_W); the
          default whenever a chunk of useful size fits (a 1 GiB workspace at V = 176K)
  tiles   chunks x vocabulary tiles: the logits of a tile are computed twice, once for the
          row statistics and once for the gradients (4 GEMMs; on the Hopper path the first
          tile's once), but d_W is re-read once per chunk of thousands of tokens rather
          than of a few hundred: the fast way under a small workspace (~160 MiB) at large
          vocabularies.
Rows V..Vp-1 of W are padding: never a target, excluded from the softmax, and their gradient
is zero.

Usage (all pointers are device pointers unless noted):

    flce_context *ctx;  flce_create(&ctx);
    flce_config cfg;    flce_config_init(&cfg, N, H, V);   // then set options
    size_t ws_bytes;    flce_workspace_size(&cfg, 256 << 20, &ws_bytes);
    void *ws;           cudaMalloc(&ws, ws_bytes);
    flce_tensors t = {0};
    t.hidden = h; t.weight = W; t.targets = y; t.loss = d_loss;
    t.d_hidden = dh; t.d_weight = dW;
    flce_status st = flce_forward_backward(ctx, &cfg, &t, ws, ws_bytes, stream);
    if (st != FLCE_OK) fprintf(stderr, "%s\n", flce_last_error(ctx));
    ...
    flce_destroy(ctx);

GEMMs are cuBLASLt's (common/gemm_lt.cuh). By default a context autotunes them: the first
call that meets a GEMM shape times cuBLASLt's candidate algorithms for it (synchronizing the
stream, and allocating for the moment 64 MiB plus, for an accumulating GEMM, a copy of its
output: at most Vp x H x 4 bytes, for d_weight) and keeps the fastest, because the
heuristic's first pick is not always the fastest on operands that arrive from HBM
(dev/RESULTS.md). Later calls reuse the choice; a run's bits can therefore differ from another
process's in the last place.
flce_set_autotune(ctx, 0) keeps the heuristic's pick: deterministic across processes. Apart
from that first call per shape, no call allocates device memory or synchronises the host, so
calls can be captured into CUDA graphs (a capture skips the tuning). Target ids outside
[0, V) (other than ignore_index) are detected on the device: the row is treated as ignored
(nothing is read out of bounds), the loss is set to NaN, and the error is reported by
flce_check_errors() or by the next call.
A context is not thread-safe; use one per thread or stream. The library reads no environment
variable: what a program may choose is the config's fields and the setters below.
*/
#ifndef FLCE_H
#define FLCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    FLCE_OK = 0,
    FLCE_ERR_NULL_POINTER,      // a required pointer is NULL
    FLCE_ERR_INVALID_SIZE,      // N, H, V, Vp non-positive or inconsistent
    FLCE_ERR_INVALID_VALUE,     // an option out of its range (smoothing, softcap, ...)
    FLCE_ERR_MISALIGNED,        // a pointer or a row stride is not aligned as required
    FLCE_ERR_WORKSPACE,         // the workspace is too small for even one chunk
    FLCE_ERR_TARGET,            // a target id outside [0, V) that is not ignore_index
    FLCE_ERR_CUDA,              // a CUDA runtime call failed
    FLCE_ERR_CUBLAS,            // a cuBLASLt call failed or found no algorithm
    FLCE_ERR_OUT_OF_MEMORY,     // a host allocation failed (flce_create)
    FLCE_ERR_COMM,              // vocab_parallel: no communicator, or its allreduce failed
} flce_status;

typedef enum { FLCE_BF16 = 0, FLCE_FP32 = 1 } flce_dtype;
typedef enum { FLCE_INT32 = 0, FLCE_INT64 = 1 } flce_index_type;
typedef enum {
    FLCE_REDUCTION_MEAN = 0,    // sum of per-token losses / number of non-ignored tokens
    FLCE_REDUCTION_SUM = 1,
    FLCE_REDUCTION_NONE = 2,    // per-token losses; loss (if given) receives their sum
} flce_reduction;

typedef struct {
    int64_t n_tokens;           // N
    int64_t hidden;             // H; a multiple of 8 (bf16) or 4 (fp32)
    int64_t vocab;              // V: real classes
    int64_t vocab_padded;       // Vp >= V: rows of W (and of d_weight, bias); default V
    flce_dtype dtype;           // of hidden, weight, bias (fp32 inputs need fp32 gradients)
    flce_index_type target_type;
    int64_t ignore_index;       // default -100
    flce_reduction reduction;   // default mean
    float label_smoothing;      // eps in [0, 1); default 0
    float z_loss_scale;         // zl >= 0; default 0
    float softcap;              // > 0 enables cap * tanh(z / cap); default 0 (off)
    float grad_scale;           // multiplies every gradient (upstream grad, 1/grad_accum); default 1
    int has_bias;               // bias (Vp) is given; default 0
    // gradient outputs: dtype and whether the call adds into the buffer (1) or overwrites (0)
    flce_dtype d_hidden_dtype;  int accumulate_d_hidden;
    flce_dtype d_weight_dtype;  int accumulate_d_weight;
    flce_dtype d_bias_dtype;    int accumulate_d_bias;
    int64_t max_chunk_tokens;   // 0 = as large as the workspace allows; else an upper bound
    // 0 = the planner's choice; else at most this many vocabulary columns per tile (>= 64;
    // < Vp forces the tile schedule, see below; the Hopper path's tiles are multiples of its
    // statistics tile, 256 or 192 columns (flce_set_hopper says when), at least one)
    int64_t max_vocab_tile;
    // bf16 inputs only, cuBLASLt path: keep the chunk's logits in bf16, as PyTorch and Liger
    // do (faster: the row pass moves 8 instead of 14 bytes a logit; but the LSE and loss carry
    // an error of about 2^-9 |z| and the gradients a little more). Default 0: fp32 logits,
    // exact LSE. The Hopper path needs neither: its statistics come from the fp32
    // accumulators and its buffer holds bf16 exponentials of z against each tile's max.
    int bf16_logits;
    // --- since 1.1 (flce_config_init sets these; a config made without it must set
    // temperature = 1) ---
    float temperature;          // finite > 0; default 1: logits divided by it after the softcap
    int has_class_weights;      // class_weights (V, fp32) is given; default 0 (all weights 1)
    // --- since 2.0 (flce_config_init sets them 0) ---
    // Vocabulary parallelism (see "Vocabulary parallel" below). 1: W, bias, d_weight and d_bias
    // are this rank's rows, global classes [vocab_offset, vocab_offset + vocab_padded), of
    // which `vocab` are real (and class_weights this rank's `vocab` classes); targets are
    // global ids in [0, vocab_total); hidden and targets are the same on every rank. Needs a
    // communicator (flce_set_comm). Default 0: the three fields below must then be 0.
    int vocab_parallel;
    int d_hidden_partial;       // vocab_parallel: 1 = d_hidden is this rank's partial sum (the
                                // caller reduces it); 0 (default) = summed over the ranks by flce
    int64_t vocab_offset;       // global id of this rank's row 0
    int64_t vocab_total;        // real classes over all ranks: vocab_offset + vocab <= vocab_total
} flce_config;

typedef struct {
    // inputs
    const void *hidden;         // (N, H) dtype, 16-byte aligned
    const void *weight;         // (Vp, H) dtype, 16-byte aligned
    const void *bias;           // (Vp) dtype, required iff has_bias
    const void *targets;        // (N) target_type
    const float *grad_token_loss; // optional (N): upstream gradient per token, reduction none only
    // outputs (any may be NULL unless stated)
    float *loss;                // scalar; required unless reduction is none
    float *token_loss;          // (N) per-token loss (0 for ignored tokens); required for none
    float *token_lse;           // (N) per-token log-sum-exp over the V classes
    void *d_hidden;             // (N, H) d_hidden_dtype, 16-byte aligned
    void *d_weight;             // (Vp, H) d_weight_dtype, 16-byte aligned; rows >= V get 0
    void *d_bias;               // (Vp) d_bias_dtype; requires has_bias
    // --- since 1.1 (a tensors struct zeroed as `= {0}` leaves them off) ---
    const float *class_weights; // (V) fp32 per-class weights, finite; required iff has_class_weights
                                // (vocab_parallel: this rank's V classes, as bias)
    float *token_entropy;       // (N) optional output: entropy of every token's softmax (ignored too)
    float *token_logprob;       // (N) optional output: z_y - lse (0 for ignored tokens)
    // optional upstream gradients (times grad_scale, like every gradient), used by
    // flce_forward_backward only: of token_entropy (every token) and of token_logprob (the
    // non-ignored ones); they add to the loss's gradient whatever the reduction
    const float *grad_entropy;  // (N)
    const float *grad_logprob;  // (N)
} flce_tensors;

typedef struct flce_context flce_context;

/*
Vocabulary parallel: P ranks (processes or GPUs) each hold a slice of the vocabulary's rows
of W, the same hidden states and targets. Per chunk of tokens each rank computes its columns'
row statistics (max, sum of exp relative to it, sum of logits, and the entropy's sum of
p (max - z) relative to it) and they are combined through the caller's all-reduce in two
collectives: MAX of the maxima, then SUM of each rank's sum of exp and entropy sum rescaled to
the global max (with the sums of logits in the same buffer). The exact target logits are
summed once per call (each target lies on exactly one rank; the others give 0); with class
weights, in the same collective, each target's weight (from the rank that holds it) and the
ranks' sums of their classes' weights. Every option of flce 1.1 applies as without
vocab_parallel: the temperature and the softcap per logit, class weights (this rank's
classes; the weighted sum of logits of label smoothing is the summed statistic), the entropy
and log-probability outputs and their gradients (from the combined statistics).
Every rank then has bitwise the same LSE and loss, forms the gradients of its own columns,
d_W and d_bias of its rows locally, and a partial d_hidden that is summed in fp32 per chunk
(another collective) unless d_hidden_partial = 1. Two collectives and not one packed
(max, sumexp) exchange, because a plain all-reduce is what every communicator has (NCCL, MPI,
a callback over anything) and a packed merge would need a custom reduction operator.
The library calls allreduce with FLCE_COMM_FP32 buffers in device memory, on the call's stream:
the callback must enqueue the collective on that stream (ncclAllReduce(buf, buf, count,
ncclFloat32, op, comm, stream) does) or otherwise order it with the stream's work, and must
return 0 on success. Every rank makes the same calls in the same order (the count of chunks
depends on the config and workspace: give every rank the same ones). A deterministic
all-reduce (NCCL's, for a fixed communicator and count) keeps the whole call deterministic.
The CPU reference (flce_ref.h) calls it with FLCE_COMM_FP64 host buffers.
*/
typedef enum { FLCE_COMM_SUM = 0, FLCE_COMM_MAX = 1 } flce_comm_op;
typedef enum { FLCE_COMM_FP32 = 0, FLCE_COMM_FP64 = 1 } flce_comm_dtype;
typedef struct {
    void *user;                 // passed back to allreduce
    // in place: buf[0 .. count) = op over the ranks of each rank's buf; 0 = success
    int (*allreduce)(void *user, void *buf, size_t count, flce_comm_dtype dtype, flce_comm_op op,
                     void *cuda_stream);
} flce_comm;

// Fills cfg with defaults for an (n_tokens, hidden, vocab) problem.
void flce_config_init(flce_config *cfg, int64_t n_tokens, int64_t hidden, int64_t vocab);

// Checks every field of cfg; on failure writes a message naming the field into msg.
flce_status flce_config_check(const flce_config *cfg, char *msg, size_t msg_len);

// Workspace bytes a call needs when the module may use at most budget_bytes (0 = 1 GiB): the
// planner's schedule (chunks, or chunks x vocabulary tiles) for that budget on the GEMM path a
// new context takes on the current device (see flce_set_hopper), for a call with d_weight. The
// other path, and a call without d_weight, run in it too, in chunks planned within it.
// *bytes <= budget_bytes unless even one token with one tile of the narrowest width does not
// fit (a bf16 d_weight over several chunks: beside its fp32 accumulator, V x H x 4 bytes; where
// every token fits one chunk in such tiles, none), in which case *bytes is that minimum and
// FLCE_ERR_WORKSPACE is returned.
flce_status flce_workspace_size(const flce_config *cfg, size_t budget_bytes, size_t *bytes);

// The number of tokens per chunk a call with d_weight and this workspace will use (0 if too
// small). On the Hopper path a call with an entropy gradient (grad_entropy) or without d_weight
// may plan other chunks: its gradients take another route (see flce_set_hopper), planned within
// the same workspace.
int64_t flce_chunk_tokens(const flce_config *cfg, size_t workspace_bytes);

// The vocabulary columns per tile that call will use: Vp for the chunk schedule (0 if the
// workspace is too small).
int64_t flce_vocab_tile(const flce_config *cfg, size_t workspace_bytes);

// Creates a context (a cuBLASLt handle, a small device error record) on the current device;
// FLCE_ERR_OUT_OF_MEMORY, FLCE_ERR_CUBLAS or FLCE_ERR_CUDA when one of them cannot be made. A
// context keeps its last call's plan: a call with the same config, workspace size and outputs
// (a training loop's) takes it again instead of planning (~40 us of host time before its first
// kernel).
flce_status flce_create(flce_context **ctx);
void flce_destroy(flce_context *ctx);

// 1 (the default): time cuBLASLt's candidates for each new GEMM shape; 0: take the
// heuristic's first pick (reproducible across processes). Shapes already met keep their
// algorithm.
void flce_set_autotune(flce_context *ctx, int on);

// 1 (the default where available, see flce_set_hopper_default): bf16 calls on a compute 9.0
// GPU, in a build for sm_90a (the Makefile's default), run flce's own Hopper GEMMs with the loss
// fused into them (flce_sm90.cuh): no logits buffer beyond a bf16 one, no row pass. 0:
// cuBLASLt's GEMMs and the row kernels, as on every other GPU and for fp32 inputs. Both are
// exact to the bf16 floor and deterministic. The planner (flce_workspace_size,
// flce_chunk_tokens, flce_vocab_tile) plans for the path a new context takes on the current
// device; a call re-plans for its own path within the workspace it is given. On the Hopper path
// the logits GEMM takes the wide schedule (128 x 192 tiles a warpgroup, ping-pong) where there
// is no bias, softcap or weighted smoothing, else the ping-pong one for H <= 2048 and the
// cooperative one above; its gradients come from GEMMs that form dlogits from the stored bf16
// exponentials as they load them for H < 3072 (H < 2048 with vocabulary tiles) and, where the
// direct gradients run (below), in most plans above that (flce_plan.c's rule by H and chunk),
// and else from cuBLASLt's GEMMs on dlogits a pass writes over them, for H >= 512 whose last
// tile is mostly empty (the scaled gradient GEMMs take 224-column tiles where those cover H
// better, 256-column ones elsewhere: H = 896 fits the first), and for a softcap, smoothing with
// class weights or an entropy gradient (the pass forms their dz once, 35% faster at 16384 x 2048
// x 128256). Without a softcap, an entropy gradient or label smoothing, and with an fp32 d_W (or
// its accumulator), the fused d_W GEMM scales the exponentials by exact powers of two and
// carries each row's factor in its other operand (a bf16 copy of the chunk's h times it), and
// the targets' terms are added after it, from the exact target logits.
void flce_set_hopper(flce_context *ctx, int on);

// (since 2.2) The GEMM path of the contexts flce_create makes from now on, and the one the
// planner (flce_workspace_size, flce_chunk_tokens, flce_vocab_tile) plans for: 1 (the default)
// the Hopper path where it runs (see flce_set_hopper), 0 cuBLASLt's GEMMs on every GPU.
// Process-wide: call it before sizing workspaces and creating contexts, not while another
// thread does either. Contexts made before keep their path (flce_set_hopper changes one).
void flce_set_hopper_default(int on);

// Whether a new context on the current device takes the Hopper path: flce_set_hopper_default's
// choice, where this build and GPU have the Hopper path.
int flce_hopper_default(void);

// The communicator of vocab_parallel calls (copied; NULL or a NULL allreduce detaches it).
// Calls without vocab_parallel never use it.
void flce_set_comm(flce_context *ctx, const flce_comm *comm);

// Loss and every requested gradient in one pass over the token chunks, on stream.
flce_status flce_forward_backward(flce_context *ctx, const flce_config *cfg,
                                  const flce_tensors *t, void *workspace,
                                  size_t workspace_bytes, void *cuda_stream);

// Loss (and per-token loss / lse) only, for evaluation; gradient pointers are ignored.
flce_status flce_forward(flce_context *ctx, const flce_config *cfg, const flce_tensors *t,
                         void *workspace, size_t workspace_bytes, void *cuda_stream);

// Waits for stream, then reports a device-side error (bad target) of earlier calls.
flce_status flce_check_errors(flce_context *ctx, void *cuda_stream);

// The message of the last failing call of this context ("" if none).
const char *flce_last_error(const flce_context *ctx);
const char *flce_status_string(flce_status status);

// (since 2.1) x[i] *= *scale for i < n on the stream, x of dtype (FLCE_FP32 or FLCE_BF16,
// products rounded once), scale a device pointer: for a binding's backward, which gets the
// upstream gradient of a mean or sum (computed by flce with the loss) as a device scalar. The
// kernel reads it and leaves x alone when it is exactly 1, so that the common loss.backward()
// costs no pass over d_weight and the host never waits for the value. Checked: x and scale not
// NULL (unless n = 0), n >= 0, dtype.
flce_status flce_scale_device(void *x, flce_dtype dtype, int64_t n, const float *scale, void *cuda_stream);

// (since 2.3) out[i] = x[i] * *scale for i < n on the stream: x fp32, out of out_dtype
// (FLCE_BF16 or FLCE_FP32), each product rounded once; scale a device pointer, or NULL for 1.
// For a binding that hands out a d_weight accumulated in fp32 (several chunks) in the inputs'
// dtype with its upstream gradient: one pass of 6 bytes an element in bf16, 16-byte loads and
// stores. x and out must not overlap. Checked: x and out not NULL (unless n = 0), n >= 0,
// out_dtype.
flce_status flce_cast_scaled_device(const float *x, void *out, flce_dtype out_dtype, int64_t n, const float *scale,
                                    void *cuda_stream);

/*
ABI check, for bindings that load the library at run time (flce/python, through ctypes) and
mirror the structs and enums above by hand: they compare the library's flce_version() and
struct sizes with the ones they were written for, and refuse a library that differs.
FLCE_VERSION_MAJOR changes whenever a struct's fields, an enum's values or a function's
signature change (a binding must be updated); FLCE_VERSION_MINOR when something is only added
(a function, a trailing enum value). A field added to flce_config or flce_tensors changes
its size too, so an old binding refuses the new library even if the version was not bumped;
flce/python's CPU test also compares every field's offset and every enum value with this header.
History: 1.0; 1.1 the temperature, class weights, entropy and log-probability (fields appended
to flce_config and flce_tensors); 2.0 vocabulary parallelism (flce_config's fields appended
after 1.1's, FLCE_ERR_COMM, flce_comm, flce_set_comm), with every option of 1.1; 2.1
flce_scale_device; 2.2 flce_set_hopper_default (in place of the environment variables the
library read before: it reads none); 2.3 flce_cast_scaled_device.
*/
#define FLCE_VERSION_MAJOR 2
#define FLCE_VERSION_MINOR 3
#define FLCE_VERSION (FLCE_VERSION_MAJOR * 1000 + FLCE_VERSION_MINOR)

int flce_version(void);             // FLCE_VERSION of the library's build
size_t flce_config_size(void);      // sizeof(flce_config) in the library
size_t flce_tensors_size(void);     // sizeof(flce_tensors) in the library

#ifdef __cplusplus
}
#endif
#endif // FLCE_H
