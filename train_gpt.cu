/*
train_gpt.cu - llm.c-style pretraining and fine-tuning in CUDA C, whose LM head is flce: the
classifier never materializes the (B*T, Vp) logits; flce computes the loss, d(hidden) and the
head's gradient chunk by chunk inside a bounded workspace.

One training loop for every model family: a family (llmc/gpt2.h + llmc/gpt2.cuh, picked by -e
in llmc/models.h) describes its parameters as a table of named tensors (llmc/model.h) and runs
its forward and backward over buffers this file gives it (llmc/model.cuh); this file owns the
rest: data, the flat parameter and gradient buffers, AdamW, ZeRO, the gradient reduction and
its overlap, the LM head, checkpoints, sampling and logging.

Precision: bf16 parameters and activations, fp32 master weights, fp32 gradients (every
backward kernel accumulates into them, so gradient accumulation is free) and fp32 AdamW state
(-bm 1: AdamW's m and v in bf16, stochastically rounded; llmc/adamw.cuh says why).
Everything is deterministic: fixed-order reductions, no floating-point atomics, seeded
stochastic rounding; a resumed run continues with bitwise the same losses.

Files and flags follow llm.c (./train_gpt -h). The host side lives in the .h headers of llmc/
(flags, model tables and files, data, checkpoints, schedules, sampling, MFU, processes); this
file holds the GPU side of training and main(), which checks every flag and input file before
the GPU. Several GPUs: built with MULTI_GPU (the Makefile does when OpenMPI and NCCL are
installed) and run as `mpirun -np N ./train_gpt`: data parallel, each rank its slice of every
batch (llm.c's order). The gradients are averaged in buckets, one per layer, on a second stream
while the backward pass goes on (-ov 0: in one call after it); with -z 1 (ZeRO-1, llmc/zero.h)
each rank keeps the fp32 master weights and AdamW's m, v of its 1/N slice of the parameters
only: the gradients are reduce-scattered instead of all-reduced, each rank updates its slice,
and the bf16 parameters are all-gathered after the update. ZeRO-0 and ZeRO-1 give the same steps.
*/
#include "llmc/utils.h"  // first: it sets the POSIX feature macros
#include "llmc/checkpoint.h"
#include "llmc/dataloader.h"
#include "llmc/metrics_log.h"
#include "llmc/mfu.h"
#include "llmc/models.h"
#include "llmc/multi_gpu.h"
#include "llmc/sampler.h"
#include "llmc/schedulers.h"
#include "llmc/step_profile.h"
#include "llmc/tokenizer.h"
#include "llmc/tokenizer_json.h"
#include "llmc/train_config.h"
#include "llmc/zero.h"

#include <math.h>

#include "flce/flce.h"
#include "llmc/cuda_common.cuh"
#include "llmc/adamw.cuh"
#include "llmc/global_norm.cuh"
#include "llmc/matmul.cuh"
#include "llmc/models.cuh"

// ----------------------------------------------------------------------------------------
// the trainer: one loop over llmc/model.cuh's interface, for every model family

typedef struct {
    ModelSpec spec;                       // the model's table and sizes (llmc/model.h)
    Model model;                          // the family's forward and backward (llmc/model.cuh)
    floatX *params_memory;                // bf16, the table's order; zero.padded elements (padding 0)
    float *grads_memory;                  // fp32; zero.padded elements (padding 0)
    float *master;                        // fp32 master weights, and AdamW's moments m, v (floatX
    void *m, *v;                          // with -bm 1, else float): zero.opt_count elements each,
                                          // those of parameters [zero.opt_lo, ...)
    int bf16_moments;                     // -bm 1: m, v are floatX
    // the ranks: the slices of the flat vector, the gradient buckets
    Comm *comm;                           // NULL: one process
    ZeroLayout zero;
    int overlap;                          // buckets reduced during the last micro-step's backward
    CommBuckets buckets;                  // overlap: the backward launches them (llmc/comm.h)
    float *norm_partials;                 // per rank: the squared norm of its slice of the gradients
    int B, T;                             // activation sizes
    MatmulContext mm;
    // the LM head: flce over the model's hidden states and its head tensor
    flce_context *flce;
    flce_config flce_cfg;
    void *flce_ws;
    size_t flce_ws_bytes;
    int *targets;                         // (B,T) on the device
    float *losses;                        // one per micro-step
    float *norm_sq, *norm_scratch;
    floatX *logits_row;                   // (Vp): one position's logits, for sampling
    size_t act_bytes;                     // for the memory report (the model's and the trainer's)
    // -tp 1 (trainer_alloc with a Comm of several processes): the LM head
    // vocabulary-parallel, see trainer_tp_head. NULL / 0 otherwise.
    Comm *tp;
    int tp_v0;                            // this rank's first row of the head (flce_cfg.vocab_offset)
    floatX *tp_hidden;                    // (P, B*T, C): every rank's hidden; model.hidden is this rank's block
    int *tp_targets;                      // (P, B*T): every rank's targets; targets is this rank's
    float *tp_dh;                         // (P, B*T, C) fp32: this rank's partial d(hidden) of every token
} Trainer;

// The LM head's weight (Vp, C) and its gradient: the embedding when tied.
static floatX *trainer_head_weight(Trainer *t) { return t->params_memory + t->spec.tensors[t->spec.head].offset; }
static float *trainer_head_grad(Trainer *t) { return t->grads_memory + t->spec.tensors[t->spec.head].offset; }

// Parameters on the device: bf16 (all of them, as uploaded: the bits of a model file) and this
// rank's share of the fp32 master weights (zero.opt_count of them).
static void trainer_upload(Trainer *m, const uint16_t *params_bf16, const float *master_share) {
    cudaCheck(cudaMemcpy(m->master, master_share, m->zero.opt_count * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->params_memory, params_bf16, m->spec.num_parameters * sizeof(uint16_t),
                         cudaMemcpyHostToDevice));
}

// Parameters on the device from an fp32 host copy of all of them: the bf16 rounding, and the
// share of master weights.
static void trainer_upload_params(Trainer *m, const float *host) {
    uint16_t *bf = (uint16_t *)malloc_check(m->spec.num_parameters * sizeof(uint16_t));
    floats_to_bf16(host, bf, m->spec.num_parameters);
    trainer_upload(m, bf, host + m->zero.opt_lo);
    free(bf);
}

static void *trainer_alloc_zeroed(size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes > 0 ? bytes : 16));  // a ZeRO-1 rank may own padding alone
    cudaCheck(cudaMemset(p, 0, bytes > 0 ? bytes : 16));
    return p;
}

// The bytes of one AdamW moment (m or v) element
static size_t trainer_moment_bytes(const Trainer *m) { return m->bf16_moments ? sizeof(floatX) : sizeof(float); }

// The model of spec (checked: model_load_checked) on the device, for rank comm->rank of
// comm->nproc processes (comm NULL: one process) at ZeRO stage zero_stage (-z), reducing gradients
// in buckets during the backward when overlap (-ov; several processes only), AdamW's moments
// in bf16 when bf16_moments (-bm 1): gradients and AdamW moments zero, the parameters for
// trainer_upload_params or trainer_upload_checkpoint to fill.
static void trainer_build(Trainer *m, const ModelSpec *spec, Comm *comm = NULL, int zero_stage = 0,
                          int overlap = 1, int bf16_moments = 0) {
    memset(m, 0, sizeof(*m));
    m->spec = *spec;
    m->comm = comm;
    m->bf16_moments = bf16_moments ? 1 : 0;
    char err[256];
    require(zero_layout(&m->zero, m->spec.num_parameters, comm ? comm->nproc : 1, comm ? comm->rank : 0, zero_stage,
                        err, sizeof(err)) == 0, err);
    const ZeroLayout *z = &m->zero;
    // the flat buffers are nproc slices long, so that the collectives see equal slices; their
    // padding is zero and stays so (no kernel writes past the parameters)
    m->params_memory = (floatX *)trainer_alloc_zeroed(z->padded * sizeof(floatX));
    m->grads_memory = (float *)trainer_alloc_zeroed(z->padded * sizeof(float));
    m->master = (float *)trainer_alloc_zeroed(z->opt_count * sizeof(float));
    m->m = trainer_alloc_zeroed(z->opt_count * trainer_moment_bytes(m));  // bf16 or fp32 zeros alike
    m->v = trainer_alloc_zeroed(z->opt_count * trainer_moment_bytes(m));
    m->norm_partials = (float *)trainer_alloc_zeroed((size_t)z->nproc * sizeof(float));
    Model *model = &m->model;
    model->spec = &m->spec;
    model->ops = model_ops_of(&m->spec);
    require(model->ops != NULL, "trainer_build: this build has no GPU code for the model's family");
    model->params = m->params_memory;
    model->grads = m->grads_memory;
    model->mm = &m->mm;
    if (z->nproc > 1 && overlap) {
        m->overlap = 1;
        comm_buckets_init(&m->buckets, z, &m->spec);
    }
}

// A loaded checkpoint on the device: parameters, this rank's share of master weights and AdamW
// moments (checkpoint_load_checked read it for the same layout, checkpoint_moments_for_run
// made its moments this trainer's precision: bf16 ones are bf16 values, rounded here exactly).
static void trainer_upload_checkpoint(Trainer *m, const Checkpoint *ck) {
    const size_t share = m->zero.opt_count;
    require(ck->zero.opt_lo == m->zero.opt_lo && ck->zero.opt_count == share,
            "trainer_upload_checkpoint: the checkpoint was loaded for another ZeRO layout (a bug)");
    require(ck->state.bf16_moments == m->bf16_moments,
            "trainer_upload_checkpoint: the checkpoint's moments are not of this trainer's precision "
            "(checkpoint_moments_for_run first; a bug)");
    trainer_upload(m, ck->params, ck->master);
    if (m->bf16_moments) {
        uint16_t *bf = (uint16_t *)malloc_check((share ? share : 1) * sizeof(uint16_t));
        const float *src[2] = {ck->state.m, ck->state.v};
        void *dst[2] = {m->m, m->v};
        for (int b = 0; b < 2; b++) {
            floats_to_bf16(src[b], bf, share);
            cudaCheck(cudaMemcpy(dst[b], bf, share * sizeof(uint16_t), cudaMemcpyHostToDevice));
        }
        free(bf);
    } else {
        cudaCheck(cudaMemcpy(m->m, ck->state.m, share * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(m->v, ck->state.v, share * sizeof(float), cudaMemcpyHostToDevice));
    }
}

static void *trainer_alloc_act(Trainer *m, size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes));
    m->act_bytes += bytes;
    return p;
}

// One rank's flce configuration for the LM head (its rows V..Vp are padding), and its
// workspace within budget. tp_nproc 1: data parallel, this rank's B*T positions over all Vp
// rows. tp_nproc P > 1 (-tp 1): vocabulary parallel, every rank's P*B*T positions over this
// rank's rows of the head (train_tp_shard), d_hidden this rank's fp32 partial sum (trainer_tp_head sums it).
static int trainer_flce_config_rank(const ModelSpec *c, int B, int T, int grad_accum_steps, int bf16_logits,
                                 size_t budget, int tp_nproc, int tp_rank, int64_t max_chunk, flce_config *fc,
                                 size_t *ws_bytes, char *err, size_t err_len) {
    const int P = tp_nproc > 1 ? tp_nproc : 1;
    int v0 = 0, rows = c->padded_vocab_size, real = c->vocab_size;
    if (P > 1 && train_tp_shard(c->vocab_size, c->padded_vocab_size, P, tp_rank, &v0, &rows, &real, err, err_len) != 0)
        return -1;
    flce_config_init(fc, (int64_t)P * B * T, (int64_t)c->channels, real);
    fc->vocab_padded = rows;
    fc->dtype = FLCE_BF16;
    fc->d_hidden_dtype = FLCE_BF16;
    fc->d_weight_dtype = FLCE_FP32;
    fc->accumulate_d_weight = 1;  // over micro-steps, and onto the embedding's part when tied
    fc->grad_scale = 1.0f / (float)(grad_accum_steps > 0 ? grad_accum_steps : 1);
    fc->bf16_logits = bf16_logits;
    fc->max_chunk_tokens = max_chunk;
    if (P > 1) {
        fc->vocab_parallel = 1;
        fc->vocab_offset = v0;
        fc->vocab_total = c->vocab_size;
        fc->d_hidden_partial = 1;
        fc->d_hidden_dtype = FLCE_FP32;
        // The gradient scale of -tp 1, P / grad_accum (the data-parallel one times P). flce's loss
        // L is the mean over all P*B*T tokens, i.e. the mean over the ranks of each rank's mean L_r
        // (every rank's batch has B*T real targets), what data parallel's loss is. Data parallel:
        // rank r's d(lnf) of its token i is dL_r/dh_i and its d(wte) dL_r/dW; the all-reduce with
        // ncclAvg then averages: d(wte) = (1/P) sum_r (dL_r/dW + E_r), E_r the encoder's part.
        // -tp 1 with the factor P: d(lnf) of token i summed over the ranks (the reduce-scatter) is
        // P dL/dh_i = dL_r/dh_i, data parallel's, so the whole body's gradients are the same and
        // ncclAvg averages them as before. d(wte): flce writes the rows of this rank only (the
        // others' flce adds 0 there) with P dL/dW_v, a sum over every rank's tokens; ncclAvg
        // makes it (1/P) (P dL/dW_v + sum_r E_r) = dL/dW_v + (1/P) sum_r E_r, data parallel's
        // (1/P) sum_r (dL_r/dW_v + E_r) since (1/P) sum_r dL_r/dW_v = dL/dW_v. The factor P is
        // the SUM semantics those rows need under the average; no other buffer changes. (The
        // same under -z 1 and -ov 1: their reduce-scatter and buckets' reduces are ncclAvg too.)
        fc->grad_scale = (float)P / (float)(grad_accum_steps > 0 ? grad_accum_steps : 1);
    }
    char why[512];
    if (flce_config_check(fc, why, sizeof(why)) != FLCE_OK) {
        llmc_set_error(err, err_len, "flce: %s", why);
        return -1;
    }
    const flce_status st = flce_workspace_size(fc, budget, ws_bytes);
    if (st != FLCE_OK) {
        llmc_set_error(err, err_len, "flce workspace within -f %zu MiB: %s (needs %zu bytes)", budget >> 20,
                       flce_status_string(st), *ws_bytes);
        return -1;
    }
    return 0;
}

// flce's configuration for the LM head and its workspace within budget (trainer_flce_config_rank).
// Host only, so that main() checks it before the GPU (and trainer_alloc makes it again
// on the GPU, where the planner knows the GEMM path). -tp 1: every rank must cut the P*B*T
// tokens into the same chunks (each chunk's collectives count its rows), and the ranks' row
// counts can differ by 128 (Vp / 128 blocks over P): the chunk is the smallest any rank's plan
// takes, imposed on all (max_chunk_tokens) and checked to be what every rank's plan then takes.
static int trainer_flce_config(const ModelSpec *c, int B, int T, int grad_accum_steps, int bf16_logits, size_t budget,
                            flce_config *fc, size_t *ws_bytes, char *err, size_t err_len, int tp_nproc = 1,
                            int tp_rank = 0) {
    if (tp_nproc <= 1)
        return trainer_flce_config_rank(c, B, T, grad_accum_steps, bf16_logits, budget, 1, 0, 0, fc, ws_bytes, err,
                                     err_len);
    int64_t chunk = 0;
    for (int q = 0; q < tp_nproc; q++) {
        flce_config qc;
        size_t qb = 0;
        if (trainer_flce_config_rank(c, B, T, grad_accum_steps, bf16_logits, budget, tp_nproc, q, 0, &qc, &qb, err,
                                  err_len) != 0)
            return -1;
        const int64_t k = flce_chunk_tokens(&qc, qb);
        if (q == 0 || k < chunk) chunk = k;
    }
    for (int q = 0; q < tp_nproc; q++) {
        flce_config qc;
        size_t qb = 0;
        if (trainer_flce_config_rank(c, B, T, grad_accum_steps, bf16_logits, budget, tp_nproc, q, chunk, &qc, &qb, err,
                                  err_len) != 0)
            return -1;
        const int64_t k = flce_chunk_tokens(&qc, qb);
        if (k != chunk) {
            llmc_set_error(err, err_len, "-tp 1: flce's plan for rank %d takes chunks of %lld tokens, the others' "
                           "%lld: the ranks would not make the same collectives (try another -f)", q, (long long)k,
                           (long long)chunk);
            return -1;
        }
        if (q == tp_rank) {
            *fc = qc;
            *ws_bytes = qb;
        }
    }
    return 0;
}

// Activations for batches of up to B x T tokens (the model's, then the trainer's), and flce's
// workspace within flce_budget. recompute (-r): the model's (GPT-2: 1 keeps one GELU output
// buffer and recomputes it per layer in the backward; 0 keeps every layer's).
// tp: -tp 1's processes (several; NULL or one process: the data-parallel head): the LM head
// runs vocabulary-parallel through tp's communicator (trainer_tp_head).
static void trainer_alloc(Trainer *m, int B, int T, size_t flce_budget, int grad_accum_steps, int bf16_logits,
                          int recompute = 1, Comm *tp = NULL) {
    const ModelSpec *c = &m->spec;
    const size_t BT = (size_t)B * T, C = (size_t)c->channels;
    m->B = B;
    m->T = T;
    m->tp = tp != NULL && tp->nproc > 1 ? tp : NULL;
    const int P = m->tp ? m->tp->nproc : 1, rank = m->tp ? m->tp->rank : 0;
    // -tp 1: the hidden states and the targets are this rank's blocks of every rank's (gathered in place)
    m->tp_hidden = (floatX *)trainer_alloc_act(m, (size_t)P * BT * C * sizeof(floatX));
    m->model.hidden = m->tp_hidden + (size_t)rank * BT * C;
    cudaCheck(cudaMalloc(&m->tp_targets, (size_t)P * BT * sizeof(int)));
    m->targets = m->tp_targets + (size_t)rank * BT;
    if (m->tp) m->tp_dh = (float *)trainer_alloc_act(m, (size_t)P * BT * C * sizeof(float));
    cudaCheck(cudaMalloc(&m->losses, (size_t)(grad_accum_steps > 0 ? grad_accum_steps : 1) * sizeof(float)));
    cudaCheck(cudaMalloc(&m->norm_sq, sizeof(float)));
    cudaCheck(cudaMalloc(&m->norm_scratch, global_norm_scratch_floats() * sizeof(float)));
    cudaCheck(cudaMalloc(&m->logits_row, (size_t)c->padded_vocab_size * sizeof(floatX)));
    matmul_init(&m->mm);  // cuBLASLt's heuristic picks: bitwise alike runs (dev/matmul_bench -a 1 times its candidates)
    m->model.ops->alloc(&m->model, B, T, recompute);
    m->act_bytes += m->model.act_bytes;

    // the LM head: flce over the B*T positions and the head's rows (V..Vp are padding)
    if (flce_create(&m->flce) != FLCE_OK) {
        fprintf(stderr, "Error: flce_create failed\n");
        exit(EXIT_FAILURE);
    }
    // the heuristic's GEMM algorithms unless -fa 1: the same bits in every run and on resume
    flce_set_autotune(m->flce, 0);
    char err[1024];
    if (trainer_flce_config(c, B, T, grad_accum_steps, bf16_logits, flce_budget, &m->flce_cfg, &m->flce_ws_bytes, err,
                            sizeof(err), P, rank) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    cudaCheck(cudaMalloc(&m->flce_ws, m->flce_ws_bytes));
    if (m->tp) {
        m->tp_v0 = (int)m->flce_cfg.vocab_offset;
        const flce_comm comm = comm_flce(m->tp);
        flce_set_comm(m->flce, &comm);
    }
}

static void flce_check_at(flce_status st, Trainer *m, int line) {
    if (st != FLCE_OK) {
        fprintf(stderr, "[flce ERROR] %s (train_gpt.cu:%d)\n", flce_last_error(m->flce), line);
        exit(EXIT_FAILURE);
    }
}
#define flceCheck(st, m) flce_check_at((st), (m), __LINE__)

// fp32 -> bf16 (round to nearest even), n elements
__global__ void floats_to_bf16_kernel(floatX *out, const float *in, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (floatX)in[i];
}

// -tp 1's LM head (train: grads 1; eval: 0, reduction sum into loss_dev). The head's weight
// stays replicated: when tied it is also the input embedding, whose gradient every rank has for
// its own tokens, and the one all-reduce of the gradients (ncclAvg) stays as in data parallel;
// only the head's work is split. Every rank's hidden states and targets are gathered in place
// (P*B*T tokens, the same on every rank), flce runs them against this rank's rows of the head
// (vocab_parallel, its row statistics combined through comm_flce_allreduce) and writes the
// loss over all tokens (the same on every rank), the gradient of this rank's rows and its fp32
// partial d(hidden) of every token; a reduce-scatter sums those and leaves this rank's B*T
// rows, rounded to bf16 into the model's d_hidden as its backward expects.
// The collectives are enqueued on s, not waited for (the caller's comm_wait does).
static void trainer_tp_head(Trainer *m, int grads, float *loss_dev, cudaStream_t s) {
    const size_t BT = (size_t)m->B * m->T, C = (size_t)m->spec.channels;
    Comm *tp = m->tp;
    comm_all_gather(tp, m->tp_hidden, BT * C * sizeof(floatX), s);
    comm_all_gather(tp, m->tp_targets, BT * sizeof(int), s);
    flce_config cfg = m->flce_cfg;
    flce_tensors t;
    memset(&t, 0, sizeof(t));
    t.hidden = m->tp_hidden;
    t.weight = trainer_head_weight(m) + (size_t)m->tp_v0 * C;
    t.targets = m->tp_targets;
    t.loss = loss_dev;
    if (!grads) {
        cfg.reduction = FLCE_REDUCTION_SUM;
        flceCheck(flce_forward(m->flce, &cfg, &t, m->flce_ws, m->flce_ws_bytes, s), m);
        return;
    }
    t.d_hidden = m->tp_dh;
    t.d_weight = trainer_head_grad(m) + (size_t)m->tp_v0 * C;
    flceCheck(flce_forward_backward(m->flce, &cfg, &t, m->flce_ws, m->flce_ws_bytes, s), m);
    float *own = m->tp_dh + (size_t)tp->rank * BT * C;
    comm_reduce_scatter_sum(tp, m->tp_dh, BT * C, s);
    floats_to_bf16_kernel<<<(unsigned)((BT * C + 255) / 256), 256, 0, s>>>(m->model.d_hidden, own, BT * C);
    cudaCheck(cudaGetLastError());
}

// Copies a batch to the device: the inputs to the model (with_buckets: for a backward), the
// targets to the head.
static void trainer_set_batch(Trainer *m, const int *inputs, const int *targets, int B, int T, int with_buckets,
                              cudaStream_t s) {
    const size_t BT = (size_t)B * T;
    m->model.ops->set_inputs(&m->model, inputs, B, T, with_buckets, s);
    if (targets != NULL) cudaCheck(cudaMemcpyAsync(m->targets, targets, BT * sizeof(int), cudaMemcpyHostToDevice, s));
}

// Training micro-step, forward half: the model, then flce's loss, d(hidden) (into the model's
// d_hidden) and the head's gradient (accumulated) in one call. Writes the micro-step's mean loss
// to losses[micro].
static void trainer_forward(Trainer *m, int B, int T, int micro, cudaStream_t s) {
    m->model.ops->forward(&m->model, B, T, s);
    step_profile_mark("transformer forward", s);
    if (m->tp) {  // -tp 1: every rank's full micro-batch (the gathers count B*T tokens per rank)
        if (B != m->B || T != m->T) {
            fprintf(stderr, "Error: -tp 1 trains on full micro-batches only (%d x %d, not %d x %d)\n", m->B, m->T, B, T);
            exit(EXIT_FAILURE);
        }
        trainer_tp_head(m, 1, m->losses + micro, s);
        step_profile_mark("flce head, vocab parallel: gathers, loss, d(hidden), d(head), reduce-scatter", s);
        return;
    }
    flce_config cfg = m->flce_cfg;
    cfg.n_tokens = (int64_t)B * T;
    flce_tensors t;
    memset(&t, 0, sizeof(t));
    t.hidden = m->model.hidden;
    t.weight = trainer_head_weight(m);
    t.targets = m->targets;
    t.loss = m->losses + micro;
    t.d_hidden = m->model.d_hidden;
    t.d_weight = trainer_head_grad(m);
    flceCheck(flce_forward_backward(m->flce, &cfg, &t, m->flce_ws, m->flce_ws_bytes, s), m);
    step_profile_mark("flce head: loss, d(hidden), d(head)", s);
}

// Evaluation: mean loss over the non-ignored targets into *loss_dev (and the count via flce).
// -tp 1: the sum over every rank's batch (the same on every rank), no token_loss.
static void trainer_forward_eval(Trainer *m, int B, int T, float *loss_dev, float *token_loss, cudaStream_t s) {
    m->model.ops->forward(&m->model, B, T, s);
    if (m->tp) {
        if (B != m->B || T != m->T) {
            fprintf(stderr, "Error: -tp 1 evaluates full batches only (%d x %d, not %d x %d)\n", m->B, m->T, B, T);
            exit(EXIT_FAILURE);
        }
        trainer_tp_head(m, 0, loss_dev, s);
        return;
    }
    flce_config cfg = m->flce_cfg;
    cfg.n_tokens = (int64_t)B * T;
    cfg.reduction = FLCE_REDUCTION_SUM;
    flce_tensors t;
    memset(&t, 0, sizeof(t));
    t.hidden = m->model.hidden;
    t.weight = trainer_head_weight(m);
    t.targets = m->targets;
    t.loss = loss_dev;
    t.token_loss = token_loss;
    flceCheck(flce_forward(m->flce, &cfg, &t, m->flce_ws, m->flce_ws_bytes, s), m);
}

// Bucket b of the gradients (llmc/zero.h: layer b, or the tensors outside the layers for b =
// L) is final in s's work so far: the model's backward calls it (GradReadyHook) on the step's
// last micro-step, and llmc/comm.h reduces the bucket while s goes on.
static void trainer_reduce_bucket(void *ctx, int b, cudaStream_t s) {
    Trainer *m = (Trainer *)ctx;
    comm_buckets_launch(&m->buckets, m->comm, m->grads_memory, b, s);
}

// Training micro-step, backward half: the model's backward from d(hidden), every parameter
// gradient accumulated (+=). last_micro: the step's last micro-step, whose gradients are final
// layer by layer: with several processes and overlap each layer's bucket is reduced as soon as
// its backward is done, and the tensors outside the layers (the head's and the embedding's) last.
static void trainer_backward(Trainer *m, int B, int T, cudaStream_t s, int last_micro = 0) {
    const GradReadyHook hook = {trainer_reduce_bucket, m};
    const int bucketed = last_micro && m->overlap;
    m->model.ops->backward(&m->model, B, T, bucketed ? &hook : NULL, s);
}

static void trainer_zero_grad(Trainer *m, cudaStream_t s) {
    cudaCheck(cudaMemsetAsync(m->grads_memory, 0, m->zero.padded * sizeof(float), s));
}

// Returns once s's work so far is done: with several processes by polling (so that a process
// that failed in a collective cannot hang this one), with one by a plain synchronize.
static void trainer_sync(Trainer *m, cudaStream_t s, const char *what) {
    if (m->zero.nproc > 1) comm_wait(m->comm, s, what);
    cudaCheck(cudaStreamSynchronize(s));
}

// The gradients averaged over the ranks, on s (a no-op for one process): every gradient on every
// rank under ZeRO-0, each rank's slice on it under ZeRO-1. When the backward reduced them in
// buckets (trainer_backward's last micro-step with overlap), s waits for the last bucket;
// otherwise one collective over all of them now.
static void trainer_reduce_grads(Trainer *m, cudaStream_t s) {
    const ZeroLayout *z = &m->zero;
    if (z->nproc <= 1) return;
    if (comm_buckets_wait(&m->buckets, s)) return;
    if (z->stage == 1) comm_reduce_scatter_avg(m->comm, m->grads_memory, z->slice, s);
    else comm_all_reduce_avg(m->comm, m->grads_memory, m->spec.num_parameters, s);
}

// Global gradient norm of the reduced gradients (waits for the stream: the host needs it for
// clipping and the log). The squared norm is summed per slice of the flat vector and the
// slices' sums added in rank order (global_norm.cuh): under ZeRO-1 each rank sums its own slice
// and the sums are all-gathered, under ZeRO-0 each rank sums every slice, so that both give the
// same bits; one process has one slice, whose sum is that of the whole vector (its padding
// adds zeros).
static float trainer_grad_norm(Trainer *m, cudaStream_t s) {
    const ZeroLayout *z = &m->zero;
    for (int r = 0; r < z->nproc; r++) {
        if (z->stage == 1 && r != z->rank) continue;
        global_norm_squared(m->norm_partials + r, m->grads_memory + (size_t)r * z->slice, z->slice,
                            m->norm_scratch, 0, s);
    }
    if (z->stage == 1 && z->nproc > 1) comm_all_gather(m->comm, m->norm_partials, sizeof(float), s);
    sum_in_order(m->norm_sq, m->norm_partials, z->nproc, s);
    // the wait first: a copy into pageable memory would block the host until the stream got
    // there, which a collective with a failed process never does
    trainer_sync(m, s, "the gradients' reduction and norm");
    float norm_sq = 0.0f;
    cudaCheck(cudaMemcpy(&norm_sq, m->norm_sq, sizeof(float), cudaMemcpyDeviceToHost));
    return sqrtf(norm_sq);
}

// AdamW on every tensor (weight decay on the 2-D ones only), gradients scaled to clip the
// global norm at grad_clip; step t counts from 1. Stochastic rounding is seeded by (t, tensor)
// and hashes each element's index within its tensor. One launch (adamw_update_multi) over this
// rank's share (llmc/zero.h): every tensor under ZeRO-0, the parts of the tensors within the
// rank's slice under ZeRO-1, each element getting bitwise its ZeRO-0 update; then the ranks
// all-gather their slices of the bf16 parameters. The moments are fp32 or bf16 (-bm 1): the
// kernel's instantiation for their type, the slices' offsets in elements either way.
static void trainer_update(Trainer *m, float lr, float beta1, float beta2, float eps, float weight_decay,
                        float grad_scale, int t, cudaStream_t s) {
    const ZeroLayout *z = &m->zero;
    ZeroRange ranges[MODEL_MAX_TENSORS];
    const int nr = zero_optimizer_ranges(z, m->spec.tensors, m->spec.num_tensors, ranges);
    AdamWTensor tensors[MODEL_MAX_TENSORS];
    for (int k = 0; k < nr; k++) {
        const int i = ranges[k].tensor;
        tensors[k].offset = ranges[k].offset;
        tensors[k].numel = ranges[k].numel;
        tensors[k].state_offset = ranges[k].state_offset;
        tensors[k].index0 = ranges[k].index0;
        tensors[k].weight_decay = m->spec.tensors[i].weight_decay ? weight_decay : 0.0f;
        tensors[k].seed = (unsigned int)(t * 1000003u + (unsigned int)i * 7919u + 42u);
    }
    if (m->bf16_moments)
        adamw_update_multi(m->params_memory, m->master, m->grads_memory, (floatX *)m->m, (floatX *)m->v, tensors, nr,
                           lr, beta1, beta2, t, eps, grad_scale, NULL, s);
    else
        adamw_update_multi(m->params_memory, m->master, m->grads_memory, (float *)m->m, (float *)m->v, tensors, nr,
                           lr, beta1, beta2, t, eps, grad_scale, NULL, s);
    if (z->stage == 1 && z->nproc > 1) comm_all_gather(m->comm, m->params_memory, z->slice * sizeof(floatX), s);
}

static void trainer_free(Trainer *m) {
    cudaCheck(cudaFree(m->norm_partials));
    comm_buckets_free(&m->buckets);
    if (m->B > 0) m->model.ops->free(&m->model);
    void *ptrs[] = {m->params_memory, m->master, m->grads_memory, m->m, m->v, m->tp_hidden, m->tp_targets, m->losses,
                    m->norm_sq, m->norm_scratch, m->logits_row, m->flce_ws, m->tp_dh};
    for (size_t k = 0; k < sizeof(ptrs) / sizeof(ptrs[0]); k++) cudaCheck(cudaFree(ptrs[k]));
    if (m->flce) flce_destroy(m->flce);
    if (m->B > 0) matmul_free(&m->mm);
}

// ----------------------------------------------------------------------------------------
// sampling: the logits of one position through a GEMM with the head (the only place logits exist)

// Generates gen_tokens tokens after start_token and prints them decoded (rank 0 only).
static void trainer_sample(Trainer *m, const Tokenizer *tok, int gen_tokens, int start_token, int *gen_buf, uint64_t *rng,
                        cudaStream_t s) {
    const ModelSpec *c = &m->spec;
    const int T = m->T, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    for (int i = 0; i < T; i++) gen_buf[i] = start_token;
    float *logits = (float *)malloc_check((size_t)Vp * sizeof(float));
    uint16_t *logits_bf = (uint16_t *)malloc_check((size_t)Vp * sizeof(uint16_t));
    printf("generating:\n---\n");
    for (int pos = 1; pos < gen_tokens && pos < T; pos++) {
        trainer_set_batch(m, gen_buf, NULL, 1, T, 0, s);
        m->model.ops->forward(&m->model, 1, T, s);
        // logits of position pos-1: its hidden row (1 x C) @ head^T
        matmul_forward(&m->mm, m->logits_row, NULL, m->model.hidden + (size_t)(pos - 1) * C, trainer_head_weight(m),
                       NULL, 1, C, Vp, s);
        cudaCheck(cudaMemcpyAsync(logits_bf, m->logits_row, (size_t)Vp * sizeof(uint16_t), cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        bf16_to_floats(logits_bf, logits, (size_t)Vp);
        const int next = sample_softmax(logits, V, random_f32(rng));  // the padded rows are never sampled
        gen_buf[pos] = next;
        if (tok->init_ok && (uint32_t)next < tok->vocab_size) tokenizer_print_token(stdout, tok, (uint32_t)next);
        else printf("%d ", next);
        fflush(stdout);
    }
    printf("\n---\n");
    free(logits);
    free(logits_bf);
}

// ----------------------------------------------------------------------------------------
// checkpoints (llm.c's files; the protocol is llmc/checkpoint.h's)

static void download_floats(float *dst, const float *src, size_t n) {
    cudaCheck(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost));
}

// n AdamW moments of the trainer's precision as fp32 (bf16 ones widened: exact)
static void download_moments(const Trainer *m, float *dst, const void *src, size_t n) {
    if (!m->bf16_moments) {
        download_floats(dst, (const float *)src, n);
        return;
    }
    uint16_t *bf = (uint16_t *)malloc_check((n ? n : 1) * sizeof(uint16_t));
    cudaCheck(cudaMemcpy(bf, src, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    bf16_to_floats(bf, dst, n);
    free(bf);
}

// -hf 1: what each Hugging Face directory is written with: the largest shard's bytes (-hs; 0:
// the default) and the files copied beside the model (its tokenizer, llmc/models.h)
typedef struct {
    uint64_t shard_bytes;
    const HFSideFiles *side;
} HFExport;

// -hf 1: the checkpoint's Hugging Face directory, written by rank 0 before the DONE_ marker
// (extra_ctx: the HFExport)
static int write_hf_of_checkpoint(const CheckpointWrite *w, char *err, size_t err_len) {
    const HFExport *hf = (const HFExport *)w->extra_ctx;
    return hf_checkpoint_write_checked(w->dir, w->state->step, w->model, w->params, hf->shard_bytes, hf->side,
                                       w->sync, err, err_len);
}

// The bf16 parameters on the host (malloc'd: free them).
static uint16_t *trainer_download_params(const Trainer *m) {
    const size_t n = m->spec.num_parameters;
    uint16_t *params = (uint16_t *)malloc_check((n ? n : 1) * sizeof(uint16_t));
    cudaCheck(cudaMemcpy(params, m->params_memory, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    return params;
}

// -hf 1 at the end of a run without checkpoints: the Hugging Face directory alone (rank 0)
static void write_hf_export(Trainer *m, const char *dir, int step, Comm *comm, const HFExport *hf) {
    if (comm->rank != 0) return;
    char err[1024];
    uint16_t *params = trainer_download_params(m);
    if (hf_checkpoint_write_checked(dir, step, &m->spec, params, hf->shard_bytes, hf->side, 1, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    free(params);
    printf("wrote the Hugging Face directory of step %d to %s/hf_%08d\n", step, dir, step);
}

// This rank's part of the checkpoint of step: the model (rank 0) and its optimizer and data state
// (its share of master, m and v: all of them under ZeRO-0, its slice's under ZeRO-1; bf16
// moments widened to fp32 and marked so, llmc/checkpoint.h); with the Hugging Face directory
// (-hf 1) where hf is not NULL.
static void write_checkpoint(Trainer *m, const DataLoader *loader, const char *dir, int step, Comm *comm,
                             const HFExport *hf) {
    char err[1024];
    const size_t share = m->zero.opt_count;
    uint16_t *params = comm->rank == 0 ? trainer_download_params(m) : NULL;
    TrainingState st;
    memset(&st, 0, sizeof(st));
    st.num_processes = comm->nproc;
    st.process_rank = comm->rank;
    st.use_master_weights = 1;
    st.zero_stage = m->zero.stage;
    st.bf16_moments = m->bf16_moments;
    st.step = step;
    st.num_parameters = share;
    st.m = (float *)malloc_check((share ? share : 1) * sizeof(float));
    st.v = (float *)malloc_check((share ? share : 1) * sizeof(float));
    st.master_weights = (float *)malloc_check((share ? share : 1) * sizeof(float));
    download_moments(m, st.m, m->m, share);
    download_moments(m, st.v, m->v, share);
    download_floats(st.master_weights, m->master, share);
    if (dataloader_get_state(loader, &st.loader) != 0) {
        fprintf(stderr, "Error: cannot capture the data loader state\n");
        exit(EXIT_FAILURE);
    }
    CheckpointWrite w;
    memset(&w, 0, sizeof(w));
    w.dir = dir;
    w.model = &m->spec;
    w.params = params;
    w.state = &st;
    w.sync = 1;
    w.barrier = comm_barrier_cb;
    w.barrier_ctx = comm;
    w.extra = hf != NULL ? write_hf_of_checkpoint : NULL;
    w.extra_ctx = hf;
    if (checkpoint_write_checked(&w, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    state_free(&st);
    free(params);
    if (comm->rank == 0) printf("wrote checkpoint of step %d to %s\n", step, dir);
}

// ----------------------------------------------------------------------------------------
// main

#ifndef TESTING
// Every check before the GPU ends here when it fails: the message, exit code 1.
static void require_ok(int ok, const char *err) {
    if (!ok) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
}

// DONE_ markers after the run's start belong to an older run: resume must never find them
// (rank 0, once every rank has read its checkpoint).
static void clear_stale_markers(const char *out_dir, int start_step) {
    char err[1024];
    const int removed = checkpoint_clear_stale(out_dir, start_step, err, sizeof(err));
    require_ok(removed >= 0, err);
    if (removed > 0) printf("removed %d DONE_ markers of an older run from %s\n", removed, out_dir);
}

int main(int argc, char **argv) {
    char err[4096];

    // 1. flags, processes, model, data, tokenizer, output directory and checkpoint, all on the host
    TrainConfig cfg;
    const int parsed = train_config_parse(&cfg, argc, argv, err, sizeof(err));
    if (parsed == 1) {
        if (launch_env_rank() == 0) {
            train_usage(stdout);
            launch_usage(stdout);
        }
        return 0;
    }
    require_ok(parsed == 0, err);
    // the processes (llmc/multi_gpu.h): the -p flags and the launcher's environment; MPI_Init
    // under mpi; under fs and tcp every process joins now, so that a later failure stops them all.
    // mg is static: the exit path reads it after main() returns
    LaunchPlan plan;
    static MultiGpu mg;
    require_ok(launch_plan(&plan, cfg.proc_num, cfg.proc_rank, cfg.proc_gpus, cfg.proc_init, cfg.proc_server,
                           cfg.proc_fs, NULL, err, sizeof(err)) == 0 &&
               multi_gpu_init_processes(&mg, &plan, err, sizeof(err)) == 0 &&
               train_config_check(&cfg, mg.nproc, err, sizeof(err)) == 0 &&
               multi_gpu_join(&mg, &plan, err, sizeof(err)) == 0, err);
    const int main_rank = mg.rank == 0;
    const int B = cfg.B, T = cfg.T, grad_accum = cfg.grad_accum;
    ModelSpec spec;
    require_ok(model_load_checked(cfg.model, cfg.vocab, &spec, NULL, err, sizeof(err)) == 0 &&
               train_config_check_model(&cfg, &spec, err, sizeof(err)) == 0, err);
    // -fh: the LM head's GEMM path, before flce plans or makes a context (the planner plans for it)
    flce_set_hopper_default(cfg.flce_hopper);
    flce_config flce_cfg;  // checked now; trainer_alloc makes the same one on the GPU
    size_t flce_ws_bytes = 0;
    // -tp 1: every rank's shard of the vocabulary and the chunks they share, checked now
    const int tp_nproc = cfg.tp ? mg.nproc : 1;
    require_ok(trainer_flce_config(&spec, B, T, grad_accum, !cfg.flce_fp32_logits, (size_t)cfg.flce_mib << 20,
                                   &flce_cfg, &flce_ws_bytes, err, sizeof(err), tp_nproc, mg.rank) == 0, err);
    DataLoader train_loader, val_loader;
    require_ok(dataloader_init_checked(&train_loader, cfg.train_glob, (size_t)B, (size_t)T, mg.rank, mg.nproc, 1, 0,
                                       err, sizeof(err)) == 0 &&
               dataloader_set_vocab_checked(&train_loader, spec.vocab_size, err, sizeof(err)) == 0, err);
    require_ok(dataloader_init_checked(&val_loader, cfg.val_glob, (size_t)B, (size_t)T, mg.rank, mg.nproc, 0, 1, err,
                                       sizeof(err)) == 0 &&
               dataloader_set_vocab_checked(&val_loader, spec.vocab_size, err, sizeof(err)) == 0, err);
    // the tokenizer that decodes samples: -tk's (missing or malformed: an error), else the -e
    // directory's tokenizer.json, else the family's (either missing or malformed: a note, and ids)
    Tokenizer tok;
    memset(&tok, 0, sizeof(tok));
    char dir_tokenizer[HF_PATH_MAX];
    const char *tok_path = cfg.tokenizer;  // the one that decodes them, for the run's table
    if (cfg.tokenizer != NULL) {
        require_ok(tokenizer_init_any_checked(&tok, cfg.tokenizer, err, sizeof(err)) == 0, err);
    } else {
        if (model_dir_tokenizer(cfg.model, dir_tokenizer, sizeof(dir_tokenizer))) {
            tok_path = dir_tokenizer;
            if (tokenizer_init_json_checked(&tok, dir_tokenizer, err, sizeof(err)) != 0 && main_rank)
                printf("note: %s; samples are decoded by the family's tokenizer or print as token ids (-tk names "
                       "another)\n", err);
        }
        if (!tok.init_ok && spec.tokenizer != NULL) {
            tok_path = spec.tokenizer;
            tokenizer_init(&tok, spec.tokenizer);
        }
    }
    const int eot = spec.sample_start >= 0 ? spec.sample_start : tok.init_ok ? (int)tok.eot_token : TOKENIZER_V1_EOT;
    const int start_token = sampler_start_token(eot, spec.vocab_size);
    const int sample_every = start_token >= 0 ? cfg.sample_every : 0;
    if (main_rank && cfg.sample_every > 0 && start_token < 0)
        printf("note: no samples: the start token %d is outside the model's vocabulary of %d tokens\n", eot,
               spec.vocab_size);
    const char *out_dir = cfg.out_dir;
    // -hf 1: the names fit, and the tokenizer's files to copy are read now (what a later write copies)
    HFSideFiles hf_side;
    memset(&hf_side, 0, sizeof(hf_side));
    const char *tk_json = cfg.tokenizer != NULL && tokenizer_is_json_path(cfg.tokenizer) ? cfg.tokenizer : NULL;
    if (cfg.hf_export)
        require_ok(hf_checkpoint_dir_check(out_dir, err, sizeof(err)) == 0 &&
                   model_side_files_checked(cfg.model, tk_json, &hf_side, err, sizeof(err)) == 0, err);
    const HFExport hf_export = {(uint64_t)cfg.hf_shard_mb * 1000000u, &hf_side};  // -hs, as transformers counts "5GB"
    if (out_dir != NULL) require_ok(checkpoint_dir_prepare(out_dir, mg.nproc, err, sizeof(err)) == 0, err);
    Checkpoint ck;
    memset(&ck, 0, sizeof(ck));
    int resumed = 0;
    if (cfg.resume) {
        resumed = checkpoint_load_checked(out_dir, &spec, mg.rank, mg.nproc, cfg.zero_stage, &train_loader, &ck, err,
                                          sizeof(err));
        require_ok(resumed >= 0, err);
        if (main_rank && resumed && err[0]) printf("note: %s\n", err);  // a newer checkpoint was incomplete
        if (main_rank && !resumed) printf("%s: starting fresh\n", err);
        // the moments in this run's precision (-bm): a checkpoint of the other one is converted, once, with a note
        char note[512];
        if (resumed && checkpoint_moments_for_run(&ck, cfg.bf16_moments, note, sizeof(note)) && main_rank)
            printf("note: %s\n", note);
    }
    const int start_step = resumed ? ck.step : 0;
    require_ok(train_config_steps(&cfg, train_loader.num_tokens, start_step, err, sizeof(err)) == 0, err);
    if (main_rank && resumed) printf("resumed from step %d of %s\n", start_step, out_dir);
    const int max_steps = cfg.max_steps;
    const int val_batches = cfg.val_max < 0 || (size_t)cfg.val_max > val_loader.num_batches
                                ? (int)val_loader.num_batches : cfg.val_max;
    if (out_dir != NULL && mg.nproc == 1) clear_stale_markers(out_dir, resumed ? start_step : -1);  // (one process: now)
    // the parameters to start from, unless a checkpoint has them (a descriptor's: initialised now)
    float *init_params = NULL;
    if (!resumed) require_ok(model_load_checked(cfg.model, cfg.vocab, &spec, &init_params, err, sizeof(err)) == 0, err);

    // 2. the GPU
    int devices = 0, gpu = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fprintf(stderr, "Error: no CUDA device\n");
        return 1;
    }
    require_ok(multi_gpu_device_checked(&mg, devices, &gpu, err, sizeof(err)) == 0, err);
    cudaCheck(cudaSetDevice(gpu));
    multi_gpu_init_comm(&mg);
    if (out_dir != NULL && mg.nproc > 1) {  // several processes: through NCCL's barrier
        comm_barrier(&mg.comm);  // every rank has read its checkpoint
        if (main_rank) clear_stale_markers(out_dir, resumed ? start_step : -1);
        comm_barrier(&mg.comm);
    }
    int device = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    const GpuPeak *peak = mfu_gpu_peak(prop.name);
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    step_profile_init(cfg.step_profile);
    Trainer model;
    trainer_build(&model, &spec, &mg.comm, cfg.zero_stage, cfg.overlap, cfg.bf16_moments);
    if (resumed) trainer_upload_checkpoint(&model, &ck);
    else trainer_upload_params(&model, init_params);
    free(init_params);
    checkpoint_free(&ck);
    trainer_alloc(&model, B, T, (size_t)cfg.flce_mib << 20, grad_accum, !cfg.flce_fp32_logits, cfg.recompute,
                  cfg.tp ? &mg.comm : NULL);
    flce_set_autotune(model.flce, cfg.flce_autotune);

    const ModelSpec *c = &model.spec;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const size_t np = c->num_parameters;
    if (main_rank) {
        char peak_text[64];
        snprintf(peak_text, sizeof(peak_text), peak ? "%s %.0f TFLOP/s dense" : "unknown GPU: no MFU",
                 peak ? peak->label : "", peak ? peak->bf16_flops / 1e12 : 0.0);
        printf("+-----------------------+----------------------------------------------------+\n");
        printf("| %-21s | %-50s |\n", "Parameter", "Value");
        printf("+-----------------------+----------------------------------------------------+\n");
        printf("| %-21s | %-50s |\n", "train data", cfg.train_glob);
        printf("| %-21s | %-50s |\n", "val data", cfg.val_glob);
        printf("| %-21s | %-50s |\n", "model", cfg.model);
        printf("| %-21s | %-50s |\n", "output dir", out_dir ? out_dir : "(none)");
        printf("| %-21s | %-50d |\n", "micro batch B", B);
        printf("| %-21s | %-50d |\n", "sequence length T", T);
        printf("| %-21s | %-50d |\n", "total batch (tokens)", cfg.total_batch);
        printf("| %-21s | %-50d |\n", "grad accumulation", grad_accum);
        printf("| %-21s | %-50s |\n", "lr schedule", lr_schedule_names[cfg.schedule]);
        printf("| %-21s | %-50e |\n", "learning rate", cfg.lr);
        printf("| %-21s | %-50d |\n", "warm-up steps", cfg.warmup);
        printf("| %-21s | %-50f |\n", "final lr fraction", cfg.final_frac);
        printf("| %-21s | %-50f |\n", "weight decay", cfg.weight_decay);
        printf("| %-21s | %-50d |\n", "max steps", max_steps);
        printf("| %-21s | %-50d |\n", "val every / batches", cfg.val_every);
        printf("| %-21s | %-50s |\n", "model family", c->family->name);
        printf("| %-21s | %-50s |\n", "sample tokenizer", tok.init_ok ? tok_path : "(none: samples print token ids)");
        char row_name[32], row_value[64];
        for (int line = 0; c->family->describe(c, line, row_name, sizeof(row_name), row_value, sizeof(row_value)) == 0;
             line++)
            printf("| %-21s | %-50s |\n", row_name, row_value);
        printf("| %-21s | %-50zu |\n", "parameters", np);
        printf("| %-21s | %-50s |\n", "device", prop.name);
        printf("| %-21s | %-50d |\n", "processes (GPUs)", mg.nproc);
        char head_text[64];
        if (model.tp) snprintf(head_text, sizeof(head_text), "vocab parallel: rank 0 has %lld of %d rows",
                               (long long)model.flce_cfg.vocab_padded, c->padded_vocab_size);
        else snprintf(head_text, sizeof(head_text), "%s", mg.nproc > 1 ? "data parallel (-tp 0)" : "one GPU");
        printf("| %-21s | %-50s |\n", "LM head", head_text);
        char zero_text[64], reduce_text[64];
        if (model.zero.stage == 1) snprintf(zero_text, sizeof(zero_text), "1 (master, m, v: 1/%d each)", mg.nproc);
        else snprintf(zero_text, sizeof(zero_text), "0");
        snprintf(reduce_text, sizeof(reduce_text), mg.nproc == 1 ? "none (one process)"
                 : model.overlap ? "per layer, under the backward (-ov 1)" : "after the backward (-ov 0)");
        printf("| %-21s | %-50s |\n", "ZeRO stage", zero_text);
        printf("| %-21s | %-50s |\n", "AdamW m, v",
               model.bf16_moments ? "bf16, stochastically rounded (-bm 1)" : "fp32 (-bm 0)");
        printf("| %-21s | %-50s |\n", "gradient reduction", reduce_text);
        printf("| %-21s | %-50s |\n", "flce logits", cfg.flce_fp32_logits ? "fp32 (exact LSE)" : "bf16");
        printf("| %-21s | %-50s |\n", "flce GEMMs",
               flce_hopper_default() ? "flce's Hopper GEMMs (-fh 1)"
               : cfg.flce_hopper     ? "cuBLASLt (no Hopper path on this GPU or build)"
                                     : "cuBLASLt (-fh 0)");
        printf("| %-21s | %-50s |\n", "flce GEMM algorithms",
               cfg.flce_autotune ? "autotuned on the first step (-fa 1)" : "cuBLASLt heuristic (-fa 0)");
        printf("| %-21s | %-50s |\n", "peak bf16 (for MFU)", peak_text);
        printf("+-----------------------+----------------------------------------------------+\n");
        const double full_logits = (double)B * T * c->padded_vocab_size * sizeof(floatX);
        const ZeroLayout *z = &model.zero;
        const double opt = z->opt_count * 4.0 / gib, mom = z->opt_count * (double)trainer_moment_bytes(&model) / gib;
        printf("memory per GPU: params %.3f GiB (bf16), grads %.3f GiB (fp32), master %.3f GiB (fp32), m %.3f GiB, "
               "v %.3f GiB (%s)%s,\n"
               "        activations %.3f GiB, flce workspace %.3f GiB (chunks of %lld tokens%s); full bf16 logits "
               "would have been %.2f GiB more\n", z->padded * 2.0 / gib, z->padded * 4.0 / gib, opt, mom, mom,
               model.bf16_moments ? "bf16" : "fp32", z->stage == 1 ? "; master, m, v of this GPU's slice alone" : "",
               model.act_bytes / gib,
               model.flce_ws_bytes / gib, (long long)flce_chunk_tokens(&model.flce_cfg, model.flce_ws_bytes),
               model.tp ? " of every rank's, over this rank's rows" : "", full_logits / gib);
    }
    FILE *log = NULL, *jlog = NULL;  // llm.c's main.log, and main.jsonl (llmc/metrics_log.h)
    if (out_dir != NULL && main_rank) {
        char path[CHECKPOINT_PATH_MAX];
        snprintf(path, sizeof(path), "%s/main.log", out_dir);
        log = fopen_check(path, start_step > 0 ? "a" : "w");
        jlog = metrics_log_open(out_dir, start_step > 0);
    }

    const double flops_per_token = c->family->flops_per_token(c, T);
    int *gen_buf = (int *)malloc_check((size_t)T * sizeof(int));
    float *val_token_loss = NULL, *val_sum = NULL;
    cudaCheck(cudaMalloc(&val_token_loss, (size_t)B * T * sizeof(float)));
    cudaCheck(cudaMalloc(&val_sum, sizeof(float)));
    uint64_t sample_rng = 1337;
    double tok_per_s_ema = 0.0, ema_weight = 0.0;
    float *losses = (float *)malloc_check((size_t)grad_accum * sizeof(float));

    for (int step = start_step; step <= max_steps; step++) {
        const int last = step == max_steps;
        if (cfg.val_every > 0 && (step % cfg.val_every == 0 || last) && val_batches > 0) {
            dataloader_reset(&val_loader);
            double loss_sum = 0.0;
            size_t n_targets = 0;
            for (int i = 0; i < val_batches; i++) {
                dataloader_next_batch(&val_loader);
                trainer_set_batch(&model, val_loader.inputs, val_loader.targets, B, T, 0, s);
                trainer_forward_eval(&model, B, T, val_sum, val_token_loss, s);
                if (model.tp) comm_wait(&mg.comm, s, "the vocab-parallel head's collectives (eval)");
                float batch_sum = 0.0f;
                cudaCheck(cudaMemcpyAsync(&batch_sum, val_sum, sizeof(float), cudaMemcpyDeviceToHost, s));
                cudaCheck(cudaStreamSynchronize(s));
                loss_sum += batch_sum;
                n_targets += val_loader.num_targets;
            }
            // -tp 1: each batch's sum is already over every rank's tokens (the same on every rank)
            if (!model.tp) loss_sum = comm_sum(&mg.comm, loss_sum);
            const double all_targets = comm_sum(&mg.comm, (double)n_targets);
            const double val_loss = all_targets > 0 ? loss_sum / all_targets : 0.0;
            if (main_rank) printf("val loss %f (%.0f tokens)\n", val_loss, all_targets);
            if (log) { fprintf(log, "s:%d tel:%.4f\n", step, val_loss); fflush(log); }
            if (jlog) metrics_log_val(jlog, step, (long long)step * cfg.total_batch, val_loss);
        }
        if (main_rank && sample_every > 0 && step > 0 && (step % sample_every == 0 || last))
            trainer_sample(&model, &tok, cfg.gen_tokens, start_token, gen_buf, &sample_rng, s);
        if (out_dir != NULL && cfg.ckpt_every > 0 && step > start_step && (step % cfg.ckpt_every == 0 || last))
            write_checkpoint(&model, &train_loader, out_dir, step, &mg.comm, cfg.hf_export ? &hf_export : NULL);
        else if (out_dir != NULL && cfg.hf_export && last)
            write_hf_export(&model, out_dir, step, &mg.comm, &hf_export);
        if (last) break;
        if (multi_gpu_fault(&mg, step + 1) == FAULT_CUDA) cudaCheck(cudaSetDevice(-1));  // TRAIN_FAULT: a testing aid

        cudaEvent_t e0, e1;
        cudaCheck(cudaEventCreate(&e0));
        cudaCheck(cudaEventCreate(&e1));
        cudaCheck(cudaEventRecord(e0, s));
        step_profile_mark("start", s);
        trainer_zero_grad(&model, s);
        for (int micro = 0; micro < grad_accum; micro++) {
            dataloader_next_batch(&train_loader);
            trainer_set_batch(&model, train_loader.inputs, train_loader.targets, B, T, 1, s);
            step_profile_mark("batch: load, upload (host)", s);
            trainer_forward(&model, B, T, micro, s);
            trainer_backward(&model, B, T, s, micro == grad_accum - 1);
            step_profile_mark("transformer backward", s);
            // -tp 1: the head's collectives done (polled) before the next micro-step's uploads,
            // which may block; the last one's are waited for with the gradients' reduction
            // (trainer_grad_norm's wait)
            if (model.tp && micro + 1 < grad_accum) comm_wait(&mg.comm, s, "the vocab-parallel head's collectives");
        }
        trainer_reduce_grads(&model, s);
        step_profile_mark("gradient reduction (what the backward left)", s);
        const float norm = trainer_grad_norm(&model, s);
        step_profile_mark("gradient norm (host waits)", s);
        const float clip = 1.0f;
        const float grad_scale = norm > clip ? clip / norm : 1.0f;
        const float step_lr = learning_rate(cfg.schedule, step, max_steps, cfg.warmup, cfg.lr, cfg.final_frac);
        trainer_update(&model, step_lr, 0.9f, 0.95f, 1e-8f, cfg.weight_decay, grad_scale, step + 1, s);
        cudaCheck(cudaEventRecord(e1, s));
        step_profile_mark("AdamW (ZeRO-1: and the parameters' all-gather)", s);
        // the wait (polling) before the copy into pageable memory, which would block behind the
        // all-gather: see trainer_grad_norm
        trainer_sync(&model, s, "the step (AdamW, the parameters' all-gather)");
        cudaCheck(cudaMemcpy(losses, model.losses, (size_t)grad_accum * sizeof(float), cudaMemcpyDeviceToHost));
        step_profile_end_step(step == start_step);
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        cudaCheck(cudaEventDestroy(e0));
        cudaCheck(cudaEventDestroy(e1));
        if (flce_check_errors(model.flce, s) != FLCE_OK) {
            fprintf(stderr, "Error: %s\n", flce_last_error(model.flce));
            return 1;
        }
        // -tp 1: each micro-step's loss is already the mean over every rank's tokens (the same
        // on every rank), and so is the mean of the ranks' below: data parallel's mean of the
        // ranks' means, as every batch has B*T real targets
        double loss = 0.0;
        for (int k = 0; k < grad_accum; k++) loss += losses[k];
        loss = comm_sum(&mg.comm, loss / grad_accum) / mg.nproc;
        if (!isfinite(loss)) {
            fprintf(stderr, "Error: the loss is %f at step %d: stopping\n", loss, step + 1);
            return 1;
        }
        // tokens/s: an exponential average (bias-corrected) from the second step on, since the
        // first carries one-time setup (cuBLASLt heuristics, allocations)
        const double tok_per_s = cfg.total_batch / (ms / 1e3);
        if (step > start_step) {
            tok_per_s_ema = 0.9 * tok_per_s_ema + 0.1 * tok_per_s;
            ema_weight = 0.9 * ema_weight + 0.1;
        }
        const double tok_per_s_shown = ema_weight > 0.0 ? tok_per_s_ema / ema_weight : tok_per_s;
        const double mfu_pct = peak ? mfu_percent(flops_per_token, tok_per_s_shown, peak, mg.nproc) : -1.0;
        char mfu[32] = "n/a";
        if (peak) snprintf(mfu, sizeof(mfu), "%.1f%%", mfu_pct);
        if (main_rank) printf("step %4d/%d | loss %7.6f | norm %6.4f | lr %.2e | %.2f ms | %s bf16 MFU | %.0f tok/s\n",
               step + 1, max_steps, loss, norm, step_lr, ms, mfu, tok_per_s_shown);
        if (log) { fprintf(log, "s:%d trl:%.4f lr:%.6f norm:%.2f\n", step, loss, step_lr, norm); fflush(log); }
        if (jlog) {
            size_t free_now, total_now;
            cudaCheck(cudaMemGetInfo(&free_now, &total_now));
            const TrainMetrics tm = {step, (long long)(step + 1) * cfg.total_batch, loss, step_lr, norm, ms,
                                     tok_per_s_shown, mfu_pct, (total_now - free_now) / 1048576.0};
            metrics_log_train(jlog, &tm);
        }
    }
    if (log) fclose_check(log);
    if (jlog) fclose_check(jlog);
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    if (main_rank) printf("device memory in use at the end (rank 0): %.0f MiB\n", (total_b - free_b) / 1048576.0);
    free(gen_buf);
    free(losses);
    cudaCheck(cudaFree(val_token_loss));
    cudaCheck(cudaFree(val_sum));
    if (main_rank) step_profile_print();
    step_profile_free();
    tokenizer_free(&tok);
    hf_side_files_free(&hf_side);
    dataloader_free(&train_loader);
    dataloader_free(&val_loader);
    trainer_free(&model);
    cudaCheck(cudaStreamDestroy(s));
    multi_gpu_finish(&mg);
    return 0;
}
#endif
