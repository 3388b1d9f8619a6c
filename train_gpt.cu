/*
train_gpt.cu - GPT-2 pretraining in CUDA C, llm.c style, whose LM head is flce: the
classifier never materializes the (B*T, Vp) logits; flce computes the loss, d(lnf) and the
tied embedding's gradient chunk by chunk inside a bounded workspace.

Precision: bf16 parameters and activations, fp32 master weights, fp32 gradients (every
backward kernel accumulates into them, so gradient accumulation is free) and fp32 AdamW state.
Everything is deterministic: fixed-order reductions, no floating-point atomics, seeded
stochastic rounding; a resumed run continues with bitwise the same losses.

Files and flags follow llm.c (./train_gpt -h). Several GPUs: built with MULTI_GPU (the Makefile
does when OpenMPI and NCCL are installed) and run as `mpirun -np N ./train_gpt`: data parallel,
each rank its slice of every batch (llm.c's order), gradients averaged with one NCCL
all-reduce per step.
*/
#include "llmc/utils.h"  // first: it sets the POSIX feature macros
#include "llmc/checkpoint.h"
#include "llmc/dataloader.h"
#include "llmc/rand.h"
#include "llmc/tokenizer.h"

#include <math.h>
#include <sys/stat.h>

#include "flce/flce.h"
#include "llmc/cuda_common.cuh"
#include "llmc/adamw.cuh"
#include "llmc/attention.cuh"
#include "llmc/encoder.cuh"
#include "llmc/gelu.cuh"
#include "llmc/global_norm.cuh"
#include "llmc/layernorm.cuh"
#include "llmc/matmul.cuh"

#ifdef MULTI_GPU
#include <mpi.h>
#include <nccl.h>
#endif

// ----------------------------------------------------------------------------------------
// processes: one per GPU under mpirun, or a single one

typedef struct {
    int rank, nproc, local_rank;
#ifdef MULTI_GPU
    ncclComm_t comm;
#endif
} MultiGpu;

#ifdef MULTI_GPU
static void nccl_check_at(ncclResult_t r, const char *what, int line) {
    if (r != ncclSuccess) {
        fprintf(stderr, "[NCCL ERROR] %s: %s (train_gpt.cu:%d)\n", what, ncclGetErrorString(r), line);
        exit(EXIT_FAILURE);
    }
}
#define ncclCheck(call) nccl_check_at((call), #call, __LINE__)
static void mpi_check_at(int r, const char *what, int line) {
    if (r != MPI_SUCCESS) {
        fprintf(stderr, "[MPI ERROR] %s: error %d (train_gpt.cu:%d)\n", what, r, line);
        exit(EXIT_FAILURE);
    }
}
#define mpiCheck(call) mpi_check_at((call), #call, __LINE__)
#endif

// Under mpirun: MPI for the rank and the NCCL id, the GPU by rank within the host.
static void multi_gpu_init(MultiGpu *mg, int *argc, char ***argv) {
    memset(mg, 0, sizeof(*mg));
    mg->nproc = 1;
#ifdef MULTI_GPU
    mpiCheck(MPI_Init(argc, argv));
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &mg->rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &mg->nproc));
    MPI_Comm local;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mg->rank, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_rank(local, &mg->local_rank));
    mpiCheck(MPI_Comm_free(&local));
    int devices = 0;
    cudaCheck(cudaGetDeviceCount(&devices));
    cudaCheck(cudaSetDevice(mg->local_rank % devices));
    // NVLink multicast (NVLS) stays off unless the environment asks for it
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    ncclUniqueId id;
    if (mg->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    mpiCheck(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
    ncclCheck(ncclCommInitRank(&mg->comm, mg->nproc, id, mg->rank));
#else
    (void)argc;
    (void)argv;
    cudaCheck(cudaSetDevice(0));
#endif
}

static void multi_gpu_finish(MultiGpu *mg) {
#ifdef MULTI_GPU
    ncclCheck(ncclCommDestroy(mg->comm));
    mpiCheck(MPI_Finalize());
#else
    (void)mg;
#endif
}

// Gradients (fp32) averaged over the ranks, in place, on the compute stream.
static void multi_gpu_average(MultiGpu *mg, float *buf, size_t n, cudaStream_t s) {
#ifdef MULTI_GPU
    if (mg->nproc > 1) ncclCheck(ncclAllReduce(buf, buf, n, ncclFloat, ncclAvg, mg->comm, s));
#else
    (void)mg; (void)buf; (void)n; (void)s;
#endif
}

// A host value summed over the ranks.
static double multi_gpu_sum(MultiGpu *mg, double x) {
#ifdef MULTI_GPU
    double out = x;
    if (mg->nproc > 1) mpiCheck(MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return out;
#else
    (void)mg;
    return x;
#endif
}

static void multi_gpu_barrier(MultiGpu *mg) {
#ifdef MULTI_GPU
    if (mg->nproc > 1) mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
#else
    (void)mg;
#endif
}

// ----------------------------------------------------------------------------------------
// the model

enum { T_WTE, T_WPE, T_LN1W, T_LN1B, T_QKVW, T_QKVB, T_ATTPROJW, T_ATTPROJB, T_LN2W, T_LN2B,
       T_FCW, T_FCB, T_FCPROJW, T_FCPROJB, T_LNFW, T_LNFB };

// the per-layer activations the backward needs, and the buffers it writes into
typedef struct {
    floatX *encoded;                      // (B,T,C)
    floatX *ln1, *qkv, *atty, *residual2, *ln2, *fch_pre, *residual3;  // per layer, stacked
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;                  // (L,B,T)
    unsigned char *att_saved;             // per layer: attention_saved_bytes
    floatX *lnf;                          // (B,T,C)
    float *lnf_mean, *lnf_rstd;
    floatX *fch_gelu;                     // (B,T,4C): one buffer, recomputed in the backward
    // backward scratch
    floatX *dresidual, *dln, *datty, *dqkv, *dfch;   // (B,T,C) x3, (B,T,3C), (B,T,4C)
    float *ln_scratch;
    unsigned char *att_scratch;
    size_t att_saved_bytes;               // per layer
    // the batch on the device
    int *inputs, *targets;
    float *losses;                        // one per micro-step
    float *norm_sq, *norm_scratch;
    floatX *logits_row;                   // (Vp): one position's logits, for sampling
} Activations;

typedef struct {
    GPT2Config config;
    ParameterTensor tensors[NUM_PARAMETER_TENSORS];
    size_t num_parameters;
    floatX *params;                       // bf16, llm.c's order
    float *master;                        // fp32 master weights
    float *grads, *m, *v;                 // fp32
    int B, T;                             // activation sizes
    Activations acts;
    MatmulContext mm;
    EncoderBuckets buckets;
    flce_context *flce;
    flce_config flce_cfg;
    void *flce_ws;
    size_t flce_ws_bytes;
    size_t act_bytes;                     // for the memory report
} GPT2;

static floatX *param_ptr(GPT2 *m, int t, int layer) {
    const ParameterTensor *pt = &m->tensors[t];
    size_t per_layer = pt->ndim > 1 && (t != T_WTE && t != T_WPE) ? pt->numel / pt->shape[0] : 0;
    return m->params + pt->offset + (size_t)layer * per_layer;
}

static float *grad_ptr(GPT2 *m, int t, int layer) {
    const ParameterTensor *pt = &m->tensors[t];
    size_t per_layer = pt->ndim > 1 && (t != T_WTE && t != T_WPE) ? pt->numel / pt->shape[0] : 0;
    return m->grads + pt->offset + (size_t)layer * per_layer;
}

// GPT-2 sizes by depth, as llm.c's descriptors ("d12" = GPT-2 124M)
static int gpt2_config_from_descriptor(const char *desc, int vocab, GPT2Config *c) {
    int depth = 0;
    if (sscanf(desc, "d%d", &depth) != 1 || depth < 1) return -1;
    int channels = 0, heads = 0;
    switch (depth) {
    case 6: channels = 384; heads = 6; break;
    case 12: channels = 768; heads = 12; break;
    case 24: channels = 1024; heads = 16; break;
    case 36: channels = 1280; heads = 20; break;
    case 48: channels = 1600; heads = 25; break;
    default: return -1;
    }
    c->max_seq_len = 1024;
    // GPT-2's 50257 tokens padded to 50304, or a vocabulary of `vocab` tokens (-V), padded to a
    // multiple of 128 as llm.c pads
    c->vocab_size = vocab > 0 ? vocab : 50257;
    c->padded_vocab_size = (c->vocab_size + 127) / 128 * 128;
    c->num_layers = depth;
    c->num_heads = heads;
    c->channels = channels;
    return 0;
}

// llm.c's / PyTorch's init: mt19937 seed 42, N(0, 0.02) in module order, residual
// projections scaled by 1/sqrt(2L), layernorm weights 1, biases 0, wte pad rows 0
static void gpt2_init_random(GPT2 *m, float *host) {
    const GPT2Config *c = &m->config;
    const size_t C = (size_t)c->channels, L = (size_t)c->num_layers;
    mt19937_state rng;
    manual_seed(&rng, 42);
    memset(host, 0, m->num_parameters * sizeof(float));
    const double residual_std = 0.02 / sqrt(2.0 * (double)L);  // in double, as PyTorch computes it
    normal_(host + m->tensors[T_WTE].offset, (size_t)c->vocab_size * C, 0.0, 0.02, &rng);
    normal_(host + m->tensors[T_WPE].offset, (size_t)c->max_seq_len * C, 0.0, 0.02, &rng);
    for (size_t l = 0; l < L; l++) {
        for (size_t k = 0; k < C; k++) host[m->tensors[T_LN1W].offset + l * C + k] = 1.0f;
        normal_(host + m->tensors[T_QKVW].offset + l * 3 * C * C, 3 * C * C, 0.0, 0.02, &rng);
        normal_(host + m->tensors[T_ATTPROJW].offset + l * C * C, C * C, 0.0, residual_std, &rng);
        for (size_t k = 0; k < C; k++) host[m->tensors[T_LN2W].offset + l * C + k] = 1.0f;
        normal_(host + m->tensors[T_FCW].offset + l * 4 * C * C, 4 * C * C, 0.0, 0.02, &rng);
        normal_(host + m->tensors[T_FCPROJW].offset + l * 4 * C * C, 4 * C * C, 0.0, residual_std, &rng);
    }
    for (size_t k = 0; k < C; k++) host[m->tensors[T_LNFW].offset + k] = 1.0f;
}

// Parameters on the device from an fp32 host copy: master weights and their bf16 rounding.
static void gpt2_upload_params(GPT2 *m, const float *host) {
    const size_t n = m->num_parameters;
    uint16_t *bf = (uint16_t *)malloc_check(n * sizeof(uint16_t));
    floats_to_bf16(host, bf, n);
    cudaCheck(cudaMemcpy(m->master, host, n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->params, bf, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(bf);
}

static void gpt2_alloc_params(GPT2 *m) {
    char err[512];
    if (gpt2_config_check(&m->config, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: model config: %s\n", err);
        exit(EXIT_FAILURE);
    }
    gpt2_parameter_tensors(&m->config, m->tensors);
    m->num_parameters = gpt2_num_parameters(&m->config);
    const size_t n = m->num_parameters;
    cudaCheck(cudaMalloc(&m->params, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&m->master, n * sizeof(float)));
    cudaCheck(cudaMalloc(&m->grads, n * sizeof(float)));
    cudaCheck(cudaMalloc(&m->m, n * sizeof(float)));
    cudaCheck(cudaMalloc(&m->v, n * sizeof(float)));
    cudaCheck(cudaMemset(m->grads, 0, n * sizeof(float)));
    cudaCheck(cudaMemset(m->m, 0, n * sizeof(float)));
    cudaCheck(cudaMemset(m->v, 0, n * sizeof(float)));
}

// From an llm.c model file (v3 fp32 or v5 bf16) or a depth descriptor such as "d12".
static void gpt2_build(GPT2 *m, const char *model_arg, int vocab) {
    memset(m, 0, sizeof(*m));
    float *host = NULL;
    if (model_arg[0] == 'd' && gpt2_config_from_descriptor(model_arg, vocab, &m->config) == 0) {
        gpt2_alloc_params(m);
        host = (float *)malloc_check(m->num_parameters * sizeof(float));
        gpt2_init_random(m, host);
    } else {
        char err[1024];
        ModelFileInfo info;
        void *raw = NULL;
        if (model_read_checked(model_arg, &info, &raw, 1, err, sizeof(err)) != 0) {
            fprintf(stderr, "Error: %s\n(-e takes an llm.c model file or a descriptor d6, d12, d24, d36, d48)\n", err);
            exit(EXIT_FAILURE);
        }
        m->config = info.config;
        gpt2_alloc_params(m);
        host = (float *)raw;
    }
    gpt2_upload_params(m, host);
    free(host);
}

static floatX *alloc_act(GPT2 *m, size_t elems) {
    floatX *p;
    cudaCheck(cudaMalloc(&p, elems * sizeof(floatX)));
    m->act_bytes += elems * sizeof(floatX);
    return p;
}

static float *alloc_actf(GPT2 *m, size_t elems) {
    float *p;
    cudaCheck(cudaMalloc(&p, elems * sizeof(float)));
    m->act_bytes += elems * sizeof(float);
    return p;
}

// Activations for batches of up to B x T tokens, and flce's workspace within flce_budget.
static void gpt2_alloc_activations(GPT2 *m, int B, int T, size_t flce_budget, int grad_accum_steps,
                                   int bf16_logits) {
    const GPT2Config *c = &m->config;
    const size_t BT = (size_t)B * T, C = (size_t)c->channels, L = (size_t)c->num_layers;
    const int NH = c->num_heads;
    if (T > c->max_seq_len) {
        fprintf(stderr, "Error: sequence length -t %d exceeds the model's max_seq_len %d\n", T, c->max_seq_len);
        exit(EXIT_FAILURE);
    }
    m->B = B;
    m->T = T;
    Activations *a = &m->acts;
    a->encoded = alloc_act(m, BT * C);
    a->ln1 = alloc_act(m, L * BT * C);
    a->qkv = alloc_act(m, L * BT * 3 * C);
    a->atty = alloc_act(m, L * BT * C);
    a->residual2 = alloc_act(m, L * BT * C);
    a->ln2 = alloc_act(m, L * BT * C);
    a->fch_pre = alloc_act(m, L * BT * 4 * C);
    a->residual3 = alloc_act(m, L * BT * C);
    a->ln1_mean = alloc_actf(m, L * BT);
    a->ln1_rstd = alloc_actf(m, L * BT);
    a->ln2_mean = alloc_actf(m, L * BT);
    a->ln2_rstd = alloc_actf(m, L * BT);
    a->att_saved_bytes = attention_saved_bytes(B, T, (int)C, NH);
    cudaCheck(cudaMalloc(&a->att_saved, L * a->att_saved_bytes));
    m->act_bytes += L * a->att_saved_bytes;
    a->lnf = alloc_act(m, BT * C);
    a->lnf_mean = alloc_actf(m, BT);
    a->lnf_rstd = alloc_actf(m, BT);
    a->fch_gelu = alloc_act(m, BT * 4 * C);
    a->dresidual = alloc_act(m, BT * C);
    a->dln = alloc_act(m, BT * C);
    a->datty = alloc_act(m, BT * C);
    a->dqkv = alloc_act(m, BT * 3 * C);
    a->dfch = alloc_act(m, BT * 4 * C);
    a->ln_scratch = alloc_actf(m, layernorm_backward_scratch_floats((int)BT, (int)C));
    const size_t att_scratch = attention_scratch_bytes(B, T, (int)C, NH);
    cudaCheck(cudaMalloc(&a->att_scratch, att_scratch > 0 ? att_scratch : 16));
    m->act_bytes += att_scratch;
    cudaCheck(cudaMalloc(&a->inputs, BT * sizeof(int)));
    cudaCheck(cudaMalloc(&a->targets, BT * sizeof(int)));
    cudaCheck(cudaMalloc(&a->losses, (size_t)(grad_accum_steps > 0 ? grad_accum_steps : 1) * sizeof(float)));
    cudaCheck(cudaMalloc(&a->norm_sq, sizeof(float)));
    cudaCheck(cudaMalloc(&a->norm_scratch, global_norm_scratch_floats() * sizeof(float)));
    cudaCheck(cudaMalloc(&a->logits_row, (size_t)c->padded_vocab_size * sizeof(floatX)));
    matmul_init(&m->mm);
    encoder_buckets_init(&m->buckets, B, T);

    // the LM head: flce over the B*T positions, tied to wte (rows V..Vp are padding)
    if (flce_create(&m->flce) != FLCE_OK) {
        fprintf(stderr, "Error: flce_create failed\n");
        exit(EXIT_FAILURE);
    }
    // the heuristic's GEMM algorithms unless -fa 1: the same bits in every run and on resume
    flce_set_autotune(m->flce, 0);
    flce_config *fc = &m->flce_cfg;
    flce_config_init(fc, (int64_t)BT, (int64_t)C, c->vocab_size);
    fc->vocab_padded = c->padded_vocab_size;
    fc->dtype = FLCE_BF16;
    fc->d_hidden_dtype = FLCE_BF16;
    fc->d_weight_dtype = FLCE_FP32;
    fc->accumulate_d_weight = 1;  // onto the encoder's part of d(wte), over micro-steps too
    fc->grad_scale = 1.0f / (float)(grad_accum_steps > 0 ? grad_accum_steps : 1);
    fc->bf16_logits = bf16_logits;
    flce_status st = flce_workspace_size(fc, flce_budget, &m->flce_ws_bytes);
    if (st != FLCE_OK) {
        fprintf(stderr, "Error: flce workspace: %s (needs %zu bytes)\n", flce_status_string(st), m->flce_ws_bytes);
        exit(EXIT_FAILURE);
    }
    cudaCheck(cudaMalloc(&m->flce_ws, m->flce_ws_bytes));
}

static void flce_check_at(flce_status st, GPT2 *m, int line) {
    if (st != FLCE_OK) {
        fprintf(stderr, "[flce ERROR] %s (train_gpt.cu:%d)\n", flce_last_error(m->flce), line);
        exit(EXIT_FAILURE);
    }
}
#define flceCheck(st, m) flce_check_at((st), (m), __LINE__)

// The transformer up to the final layernorm, for the B x T tokens already in acts.inputs.
static void gpt2_forward_body(GPT2 *m, int B, int T, cudaStream_t s) {
    const GPT2Config *c = &m->config;
    const int C = c->channels, NH = c->num_heads, L = c->num_layers;
    const size_t BT = (size_t)B * T, stride = (size_t)m->B * m->T * C;  // per-layer slices
    Activations *a = &m->acts;
    encoder_forward(a->encoded, a->inputs, param_ptr(m, T_WTE, 0), param_ptr(m, T_WPE, 0), B, T, C, s);
    for (int l = 0; l < L; l++) {
        const floatX *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * stride;
        floatX *ln1 = a->ln1 + l * stride, *qkv = a->qkv + l * 3 * stride, *atty = a->atty + l * stride;
        floatX *res2 = a->residual2 + l * stride, *ln2 = a->ln2 + l * stride;
        floatX *fch_pre = a->fch_pre + l * 4 * stride, *res3 = a->residual3 + l * stride;
        const size_t ml = (size_t)l * m->B * m->T;
        layernorm_forward(ln1, a->ln1_mean + ml, a->ln1_rstd + ml, residual, param_ptr(m, T_LN1W, l),
                          param_ptr(m, T_LN1B, l), (int)BT, C, s);
        matmul_forward(&m->mm, qkv, NULL, ln1, param_ptr(m, T_QKVW, l), param_ptr(m, T_QKVB, l), (int)BT, C, 3 * C, s);
        attention_forward(atty, a->att_saved + (size_t)l * a->att_saved_bytes, a->att_scratch, qkv, B, T, C, NH, s);
        matmul_forward(&m->mm, res2, NULL, atty, param_ptr(m, T_ATTPROJW, l), param_ptr(m, T_ATTPROJB, l), (int)BT, C, C, s);
        add_inplace(res2, residual, BT * C, s);
        layernorm_forward(ln2, a->ln2_mean + ml, a->ln2_rstd + ml, res2, param_ptr(m, T_LN2W, l),
                          param_ptr(m, T_LN2B, l), (int)BT, C, s);
        matmul_forward(&m->mm, a->fch_gelu, fch_pre, ln2, param_ptr(m, T_FCW, l), param_ptr(m, T_FCB, l), (int)BT, C, 4 * C, s);
        matmul_forward(&m->mm, res3, NULL, a->fch_gelu, param_ptr(m, T_FCPROJW, l), param_ptr(m, T_FCPROJB, l), (int)BT, 4 * C, C, s);
        add_inplace(res3, res2, BT * C, s);
    }
    const floatX *last = a->residual3 + (size_t)(L - 1) * stride;
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, param_ptr(m, T_LNFW, 0), param_ptr(m, T_LNFB, 0), (int)BT, C, s);
}

// Copies a batch to the device (and the encoder's token buckets for the backward).
static void gpt2_set_batch(GPT2 *m, const int *inputs, const int *targets, int B, int T, int with_buckets,
                           cudaStream_t s) {
    const size_t BT = (size_t)B * T;
    cudaCheck(cudaMemcpyAsync(m->acts.inputs, inputs, BT * sizeof(int), cudaMemcpyHostToDevice, s));
    if (targets != NULL)
        cudaCheck(cudaMemcpyAsync(m->acts.targets, targets, BT * sizeof(int), cudaMemcpyHostToDevice, s));
    // copies from pageable memory return once the data is staged, and the buckets are built
    // into their own pinned buffer: the loader may refill its arrays as soon as we return
    if (with_buckets) encoder_buckets_build(&m->buckets, inputs, B, T, s);
}

// Training micro-step, forward half: the transformer, then flce's loss, d(lnf) (into dln) and
// d(wte) (accumulated) in one call. Writes the micro-step's mean loss to acts.losses[micro].
static void gpt2_forward_train(GPT2 *m, int B, int T, int micro, cudaStream_t s) {
    gpt2_forward_body(m, B, T, s);
    flce_config cfg = m->flce_cfg;
    cfg.n_tokens = (int64_t)B * T;
    flce_tensors t;
    memset(&t, 0, sizeof(t));
    t.hidden = m->acts.lnf;
    t.weight = param_ptr(m, T_WTE, 0);
    t.targets = m->acts.targets;
    t.loss = m->acts.losses + micro;
    t.d_hidden = m->acts.dln;
    t.d_weight = grad_ptr(m, T_WTE, 0);
    flceCheck(flce_forward_backward(m->flce, &cfg, &t, m->flce_ws, m->flce_ws_bytes, s), m);
}

// Evaluation: mean loss over the non-ignored targets into *loss_dev (and the count via flce).
static void gpt2_forward_eval(GPT2 *m, int B, int T, float *loss_dev, float *token_loss, cudaStream_t s) {
    gpt2_forward_body(m, B, T, s);
    flce_config cfg = m->flce_cfg;
    cfg.n_tokens = (int64_t)B * T;
    cfg.reduction = FLCE_REDUCTION_SUM;
    flce_tensors t;
    memset(&t, 0, sizeof(t));
    t.hidden = m->acts.lnf;
    t.weight = param_ptr(m, T_WTE, 0);
    t.targets = m->acts.targets;
    t.loss = loss_dev;
    t.token_loss = token_loss;
    flceCheck(flce_forward(m->flce, &cfg, &t, m->flce_ws, m->flce_ws_bytes, s), m);
}

// Training micro-step, backward half: from d(lnf) (in dln) down to the embeddings. Every
// parameter gradient is accumulated (+=).
static void gpt2_backward(GPT2 *m, int B, int T, cudaStream_t s) {
    const GPT2Config *c = &m->config;
    const int C = c->channels, NH = c->num_heads, L = c->num_layers;
    const size_t BT = (size_t)B * T, stride = (size_t)m->B * m->T * C;
    Activations *a = &m->acts;
    cudaCheck(cudaMemsetAsync(a->dresidual, 0, BT * C * sizeof(floatX), s));
    const floatX *last = a->residual3 + (size_t)(L - 1) * stride;
    layernorm_backward(a->dresidual, grad_ptr(m, T_LNFW, 0), grad_ptr(m, T_LNFB, 0), a->ln_scratch, a->dln,
                       last, param_ptr(m, T_LNFW, 0), a->lnf_mean, a->lnf_rstd, (int)BT, C, s);
    for (int l = L - 1; l >= 0; l--) {
        const floatX *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * stride;
        floatX *ln1 = a->ln1 + l * stride, *qkv = a->qkv + l * 3 * stride, *atty = a->atty + l * stride;
        floatX *res2 = a->residual2 + l * stride, *ln2 = a->ln2 + l * stride;
        floatX *fch_pre = a->fch_pre + l * 4 * stride;
        const size_t ml = (size_t)l * m->B * m->T;
        // MLP: recompute gelu(fch_pre) instead of keeping it per layer
        gelu_forward(a->fch_gelu, fch_pre, BT * 4 * C, s);
        matmul_backward(&m->mm, a->dfch, grad_ptr(m, T_FCPROJW, l), grad_ptr(m, T_FCPROJB, l), a->dresidual,
                        a->fch_gelu, param_ptr(m, T_FCPROJW, l), NULL, (int)BT, 4 * C, C, s);
        matmul_backward(&m->mm, a->dln, grad_ptr(m, T_FCW, l), grad_ptr(m, T_FCB, l), a->dfch, ln2,
                        param_ptr(m, T_FCW, l), fch_pre, (int)BT, C, 4 * C, s);
        layernorm_backward(a->dresidual, grad_ptr(m, T_LN2W, l), grad_ptr(m, T_LN2B, l), a->ln_scratch, a->dln,
                           res2, param_ptr(m, T_LN2W, l), a->ln2_mean + ml, a->ln2_rstd + ml, (int)BT, C, s);
        // attention
        matmul_backward(&m->mm, a->datty, grad_ptr(m, T_ATTPROJW, l), grad_ptr(m, T_ATTPROJB, l), a->dresidual,
                        atty, param_ptr(m, T_ATTPROJW, l), NULL, (int)BT, C, C, s);
        attention_backward(a->dqkv, a->att_scratch, a->datty, qkv, atty, a->att_saved + (size_t)l * a->att_saved_bytes,
                           B, T, C, NH, s);
        matmul_backward(&m->mm, a->dln, grad_ptr(m, T_QKVW, l), grad_ptr(m, T_QKVB, l), a->dqkv, ln1,
                        param_ptr(m, T_QKVW, l), NULL, (int)BT, C, 3 * C, s);
        layernorm_backward(a->dresidual, grad_ptr(m, T_LN1W, l), grad_ptr(m, T_LN1B, l), a->ln_scratch, a->dln,
                           residual, param_ptr(m, T_LN1W, l), a->ln1_mean + ml, a->ln1_rstd + ml, (int)BT, C, s);
    }
    encoder_backward(grad_ptr(m, T_WTE, 0), grad_ptr(m, T_WPE, 0), a->dresidual, &m->buckets, B, T, C, s);
}

static void gpt2_zero_grad(GPT2 *m, cudaStream_t s) {
    cudaCheck(cudaMemsetAsync(m->grads, 0, m->num_parameters * sizeof(float), s));
}

// Global gradient norm (waits for the stream: the host needs it for clipping and the log).
static float gpt2_grad_norm(GPT2 *m, cudaStream_t s) {
    global_norm_squared(m->acts.norm_sq, m->grads, m->num_parameters, m->acts.norm_scratch, 0, s);
    float norm_sq = 0.0f;
    cudaCheck(cudaMemcpyAsync(&norm_sq, m->acts.norm_sq, sizeof(float), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    return sqrtf(norm_sq);
}

// AdamW on every tensor (weight decay on the 2-D ones only), gradients scaled to clip the
// global norm at grad_clip; step t counts from 1. Stochastic rounding is seeded by (t, tensor).
static void gpt2_update(GPT2 *m, float lr, float beta1, float beta2, float eps, float weight_decay,
                        float grad_scale, int t, cudaStream_t s) {
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const ParameterTensor *pt = &m->tensors[i];
        const unsigned int seed = (unsigned int)(t * 1000003u + (unsigned int)i * 7919u + 42u);
        adamw_update(m->params + pt->offset, m->master + pt->offset, m->grads + pt->offset, m->m + pt->offset,
                     m->v + pt->offset, pt->numel, lr, beta1, beta2, t, eps,
                     pt->weight_decay ? weight_decay : 0.0f, grad_scale, seed, s);
    }
}

static void gpt2_free(GPT2 *m) {
    Activations *a = &m->acts;
    void *ptrs[] = {m->params, m->master, m->grads, m->m, m->v, a->encoded, a->ln1, a->qkv, a->atty,
                    a->residual2, a->ln2, a->fch_pre, a->residual3, a->ln1_mean, a->ln1_rstd, a->ln2_mean,
                    a->ln2_rstd, a->att_saved, a->lnf, a->lnf_mean, a->lnf_rstd, a->fch_gelu, a->dresidual,
                    a->dln, a->datty, a->dqkv, a->dfch, a->ln_scratch, a->att_scratch, a->inputs,
                    a->targets, a->losses, a->norm_sq, a->norm_scratch, a->logits_row, m->flce_ws};
    for (size_t k = 0; k < sizeof(ptrs) / sizeof(ptrs[0]); k++) cudaCheck(cudaFree(ptrs[k]));
    if (m->flce) flce_destroy(m->flce);
    if (m->B > 0) {
        matmul_free(&m->mm);
        encoder_buckets_free(&m->buckets);
    }
}

// ----------------------------------------------------------------------------------------
// learning-rate schedules (llm.c's: cosine, linear, constant, wsd; linear warm-up)

static float learning_rate(const char *kind, int step, int total, int warmup, float lr, float final_frac) {
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    const float lr_min = lr * final_frac;
    if (total <= warmup) return lr;
    const float progress = (float)(step - warmup) / (float)(total - warmup);
    if (strcmp(kind, "constant") == 0) return lr;
    if (strcmp(kind, "linear") == 0) return lr - (lr - lr_min) * progress;
    if (strcmp(kind, "wsd") == 0) {
        // warm-up, stable to 80% of the run, then 1 - sqrt decay to lr_min
        const int decay_start = (int)(0.8f * (float)total);
        if (step < decay_start) return lr;
        const float p = (float)(step - decay_start) / (float)(total - decay_start);
        return lr_min + (lr - lr_min) * (1.0f - sqrtf(p));
    }
    // cosine
    return lr_min + 0.5f * (lr - lr_min) * (1.0f + cosf((float)M_PI * progress));
}

// ----------------------------------------------------------------------------------------
// sampling: the logits of one position through a GEMM with wte (the only place logits exist)

static unsigned int random_u32(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (unsigned int)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

static int sample_softmax(const float *logits, int n, float coin) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = fmaxf(max, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)(logits[i] - max));
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)(logits[i] - max)) / sum;
        if (coin < acc) return i;
    }
    return n - 1;
}

// Generates gen_tokens tokens after EOT and prints them decoded (rank 0 only).
static void gpt2_sample(GPT2 *m, const Tokenizer *tok, int gen_tokens, int *gen_buf, uint64_t *rng, cudaStream_t s) {
    const GPT2Config *c = &m->config;
    const int T = m->T, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    const int eot = tok->init_ok ? (int)tok->eot_token : 50256;
    for (int i = 0; i < T; i++) gen_buf[i] = eot;
    float *logits = (float *)malloc_check((size_t)Vp * sizeof(float));
    uint16_t *logits_bf = (uint16_t *)malloc_check((size_t)Vp * sizeof(uint16_t));
    printf("generating:\n---\n");
    for (int pos = 1; pos < gen_tokens && pos < T; pos++) {
        gpt2_set_batch(m, gen_buf, NULL, 1, T, 0, s);
        gpt2_forward_body(m, 1, T, s);
        // logits of position pos-1: lnf row (1 x C) @ wte^T
        matmul_forward(&m->mm, m->acts.logits_row, NULL, m->acts.lnf + (size_t)(pos - 1) * C,
                       param_ptr(m, T_WTE, 0), NULL, 1, C, Vp, s);
        cudaCheck(cudaMemcpyAsync(logits_bf, m->acts.logits_row, (size_t)Vp * sizeof(uint16_t), cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        bf16_to_floats(logits_bf, logits, (size_t)Vp);
        const float coin = (float)(random_u32(rng) >> 8) / 16777216.0f;
        const int next = sample_softmax(logits, V, coin);  // the padded rows are never sampled
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
// checkpoints (llm.c's layout: model_%08d.bin, state_%08d_%05d.bin, then DONE_%08d)

static void download_floats(float *dst, const float *src, size_t n) {
    cudaCheck(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost));
}

// Rank 0 writes the model, every rank its state, then (after all have) rank 0 the DONE marker;
// each file goes to a temporary name and is renamed when complete.
static void write_checkpoint(GPT2 *m, const DataLoader *loader, const char *dir, int step, MultiGpu *mg) {
    char path[1024], err[1024];
    const size_t n = m->num_parameters;
    if (mg->rank == 0) {
        uint16_t *params = (uint16_t *)malloc_check(n * sizeof(uint16_t));
        cudaCheck(cudaMemcpy(params, m->params, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        checkpoint_model_path(path, sizeof(path), dir, step);
        if (model_write_checked(path, &m->config, MODEL_VERSION_BF16, params, 1, err, sizeof(err)) != 0) {
            fprintf(stderr, "Error: %s\n", err);
            exit(EXIT_FAILURE);
        }
        free(params);
    }
    TrainingState st;
    memset(&st, 0, sizeof(st));
    st.num_processes = mg->nproc;
    st.process_rank = mg->rank;
    st.use_master_weights = 1;
    st.step = step;
    st.num_parameters = n;
    st.m = (float *)malloc_check(n * sizeof(float));
    st.v = (float *)malloc_check(n * sizeof(float));
    st.master_weights = (float *)malloc_check(n * sizeof(float));
    download_floats(st.m, m->m, n);
    download_floats(st.v, m->v, n);
    download_floats(st.master_weights, m->master, n);
    if (dataloader_get_state(loader, &st.loader) != 0) {
        fprintf(stderr, "Error: cannot capture the data loader state\n");
        exit(EXIT_FAILURE);
    }
    checkpoint_state_path(path, sizeof(path), dir, step, mg->rank);
    if (state_write_checked(path, &st, 1, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    state_free(&st);
    multi_gpu_barrier(mg);
    if (mg->rank == 0) {
        if (done_marker_write_checked(dir, step, 1, err, sizeof(err)) != 0) {
            fprintf(stderr, "Error: %s\n", err);
            exit(EXIT_FAILURE);
        }
        printf("wrote checkpoint of step %d to %s\n", step, dir);
    }
}

// Loads the latest complete checkpoint of dir; returns its step, or -1 if there is none.
static int resume_checkpoint(GPT2 *m, DataLoader *loader, const char *dir, MultiGpu *mg) {
    char path[1024], err[1024];
    const int step = checkpoint_find_latest(dir, mg->nproc, err, sizeof(err));
    if (step < 0) return -1;
    const size_t n = m->num_parameters;
    ModelFileInfo info;
    void *raw = NULL;
    checkpoint_model_path(path, sizeof(path), dir, step);
    if (model_read_checked(path, &info, &raw, 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    if (info.num_parameters != n || info.version != MODEL_VERSION_BF16) {
        fprintf(stderr, "Error: checkpoint %s does not match the model (%zu parameters, version %d)\n", path,
                info.num_parameters, info.version);
        exit(EXIT_FAILURE);
    }
    cudaCheck(cudaMemcpy(m->params, raw, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(raw);
    TrainingState st;
    checkpoint_state_path(path, sizeof(path), dir, step, mg->rank);
    if (state_read_checked(path, n, &st, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    if (st.num_processes != mg->nproc || st.process_rank != mg->rank) {
        fprintf(stderr, "Error: %s holds rank %d of %d processes; this run is rank %d of %d\n", path,
                st.process_rank, st.num_processes, mg->rank, mg->nproc);
        exit(EXIT_FAILURE);
    }
    cudaCheck(cudaMemcpy(m->m, st.m, n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->v, st.v, n * sizeof(float), cudaMemcpyHostToDevice));
    if (st.use_master_weights) cudaCheck(cudaMemcpy(m->master, st.master_weights, n * sizeof(float), cudaMemcpyHostToDevice));
    if (dataloader_set_state_checked(loader, &st.loader, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: resuming the data loader: %s\n", err);
        exit(EXIT_FAILURE);
    }
    state_free(&st);
    return step;
}

// ----------------------------------------------------------------------------------------
// main

#ifndef TESTING
static void usage(void) {
    printf("Usage:   ./train_gpt [options]\n");
    printf("Options (llm.c's flags):\n");
    printf("  -i <string> train data glob (default data/tiny_shakespeare_train.bin)\n");
    printf("  -j <string> val data glob (default data/tiny_shakespeare_val.bin)\n");
    printf("  -e <string> model file (llm.c v3/v5) or depth descriptor d6|d12|d24|d36|d48 (default d12)\n");
    printf("  -V <int>    vocabulary of a fresh model (default GPT-2's 50257, padded to 50304; e.g. 151936,\n");
    printf("              176245: any size, padded to a multiple of 128)\n");
    printf("  -o <string> output dir for main.log and checkpoints (default none)\n");
    printf("  -b <int>    micro-batch size B (default 4)\n");
    printf("  -t <int>    sequence length T (default 1024)\n");
    printf("  -d <int>    total batch size in tokens (default B*T)\n");
    printf("  -x <int>    max steps (default -1: one epoch)\n");
    printf("  -k <string> lr schedule cosine|linear|constant|wsd (default cosine)\n");
    printf("  -l <float>  learning rate (default 3e-4)\n");
    printf("  -u <int>    warm-up steps (default 0)\n");
    printf("  -q <float>  final lr as a fraction of -l (default 1.0)\n");
    printf("  -c <float>  weight decay (default 0.0)\n");
    printf("  -v <int>    val loss every (default 20)\n");
    printf("  -m <int>    val max batches, -1 all (default 20)\n");
    printf("  -s <int>    sample every (default 20)\n");
    printf("  -g <int>    tokens to generate (default 64)\n");
    printf("  -n <int>    checkpoint every N steps, 0 never (default 0)\n");
    printf("  -y <int>    resume from the latest complete checkpoint in -o (default 0)\n");
    printf("  -r <int>    recompute: 1 recomputes GELU in the backward (default 1; 0 is the same here)\n");
    printf("  -w <int>    fp32 master weights (default 1; required)\n");
    printf("  -f <int>    flce workspace budget in MiB (default 1024)\n");
    printf("  -fl <int>   flce's logits buffer: 0 bf16 (as llm.c; 3%% faster at B=64), 1 fp32 (exact loss)\n");
    printf("              (default 0)\n");
    printf("  -fa <int>   1: flce times cuBLASLt's candidate algorithms for its GEMMs on the first step\n");
    printf("              (faster; a run's bits can then differ from another's); default 0\n");
    printf("  -h          this help\n");
}

int main(int argc, char **argv) {
    const char *train_glob = "data/tiny_shakespeare_train.bin", *val_glob = "data/tiny_shakespeare_val.bin";
    const char *model_arg = "d12", *out_dir = NULL, *schedule = "cosine";
    int B = 4, T = 1024, total_batch = -1, max_steps = -1, warmup = 0, val_every = 20, val_max = 20;
    int sample_every = 20, gen_tokens = 64, ckpt_every = 0, resume = 0, recompute = 1, master = 1;
    int vocab = 0, flce_mib = 1024, flce_fp32_logits = 0, flce_autotune = 0;
    float lr = 3e-4f, final_frac = 1.0f, weight_decay = 0.0f;
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "-h") == 0) { usage(); return 0; }
        if (i + 1 >= argc || argv[i][0] != '-' || strlen(argv[i]) < 2 || strlen(argv[i]) > 3) {
            fprintf(stderr, "Error: bad argument '%s' (flags are -x value; see -h)\n", argv[i]);
            return 1;
        }
        const char f = argv[i][1];
        const char *v = argv[i + 1];
        if (strcmp(argv[i], "-fl") == 0) flce_fp32_logits = atoi(v);
        else if (strcmp(argv[i], "-fa") == 0) flce_autotune = atoi(v);
        else if (strlen(argv[i]) != 2) { fprintf(stderr, "Error: unknown flag %s (see -h)\n", argv[i]); return 1; }
        else if (f == 'i') train_glob = v;
        else if (f == 'j') val_glob = v;
        else if (f == 'e') model_arg = v;
        else if (f == 'o') out_dir = v;
        else if (f == 'k') schedule = v;
        else if (f == 'b') B = atoi(v);
        else if (f == 't') T = atoi(v);
        else if (f == 'd') total_batch = atoi(v);
        else if (f == 'x') max_steps = atoi(v);
        else if (f == 'u') warmup = atoi(v);
        else if (f == 'v') val_every = atoi(v);
        else if (f == 'm') val_max = atoi(v);
        else if (f == 's') sample_every = atoi(v);
        else if (f == 'g') gen_tokens = atoi(v);
        else if (f == 'n') ckpt_every = atoi(v);
        else if (f == 'y') resume = atoi(v);
        else if (f == 'r') recompute = atoi(v);
        else if (f == 'w') master = atoi(v);
        else if (f == 'V') vocab = atoi(v);
        else if (f == 'f') flce_mib = atoi(v);
        else if (f == 'l') lr = (float)atof(v);
        else if (f == 'q') final_frac = (float)atof(v);
        else if (f == 'c') weight_decay = (float)atof(v);
        else { fprintf(stderr, "Error: unknown flag -%c (see -h)\n", f); return 1; }
    }
    if (B < 1 || T < 1 || flce_mib < 1 || master != 1 || (recompute != 0 && recompute != 1) ||
        (flce_fp32_logits != 0 && flce_fp32_logits != 1) || (flce_autotune != 0 && flce_autotune != 1) ||
        (strcmp(schedule, "cosine") && strcmp(schedule, "linear") && strcmp(schedule, "constant") && strcmp(schedule, "wsd"))) {
        fprintf(stderr, "Error: bad value among -b %d -t %d -f %d -fl %d -fa %d -w %d -r %d -k %s\n", B, T,
                flce_mib, flce_fp32_logits, flce_autotune, master, recompute, schedule);
        return 1;
    }

    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
        fprintf(stderr, "Error: no CUDA device\n");
        return 1;
    }
    MultiGpu mg;
    multi_gpu_init(&mg, &argc, &argv);
    const int main_rank = mg.rank == 0;
    int device = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    const int tokens_per_micro = B * T * mg.nproc;
    if (total_batch < 0) total_batch = tokens_per_micro;
    if (total_batch % tokens_per_micro != 0) {
        fprintf(stderr, "Error: total batch -d %d must be a multiple of B*T*processes = %d\n", total_batch,
                tokens_per_micro);
        return 1;
    }
    const int grad_accum = total_batch / tokens_per_micro;

    GPT2 model;
    gpt2_build(&model, model_arg, vocab);
    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, train_glob, (size_t)B, (size_t)T, mg.rank, mg.nproc, 1);
    dataloader_init_eval(&val_loader, val_glob, (size_t)B, (size_t)T, mg.rank, mg.nproc);
    if (max_steps < 0) max_steps = (int)(train_loader.num_tokens / total_batch);
    const int val_batches = val_max < 0 || (size_t)val_max > val_loader.num_batches ? (int)val_loader.num_batches : val_max;
    gpt2_alloc_activations(&model, B, T, (size_t)flce_mib << 20, grad_accum, !flce_fp32_logits);
    flce_set_autotune(model.flce, flce_autotune);
    Tokenizer tok;
    tokenizer_init(&tok, "data/gpt2_tokenizer.bin");

    const GPT2Config *c = &model.config;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const size_t np = model.num_parameters;
    if (main_rank) {
        printf("+-----------------------+----------------------------------------------------+\n");
        printf("| %-21s | %-50s |\n", "Parameter", "Value");
        printf("+-----------------------+----------------------------------------------------+\n");
        printf("| %-21s | %-50s |\n", "train data", train_glob);
        printf("| %-21s | %-50s |\n", "val data", val_glob);
        printf("| %-21s | %-50s |\n", "model", model_arg);
        printf("| %-21s | %-50s |\n", "output dir", out_dir ? out_dir : "(none)");
        printf("| %-21s | %-50d |\n", "micro batch B", B);
        printf("| %-21s | %-50d |\n", "sequence length T", T);
        printf("| %-21s | %-50d |\n", "total batch (tokens)", total_batch);
        printf("| %-21s | %-50d |\n", "grad accumulation", grad_accum);
        printf("| %-21s | %-50s |\n", "lr schedule", schedule);
        printf("| %-21s | %-50e |\n", "learning rate", lr);
        printf("| %-21s | %-50d |\n", "warm-up steps", warmup);
        printf("| %-21s | %-50f |\n", "final lr fraction", final_frac);
        printf("| %-21s | %-50f |\n", "weight decay", weight_decay);
        printf("| %-21s | %-50d |\n", "max steps", max_steps);
        printf("| %-21s | %-50d |\n", "val every / batches", val_every);
        printf("| %-21s | %-50d |\n", "max_seq_len", c->max_seq_len);
        printf("| %-21s | %-50d |\n", "vocab size", c->vocab_size);
        printf("| %-21s | %-50d |\n", "padded vocab", c->padded_vocab_size);
        printf("| %-21s | %-50d |\n", "layers", c->num_layers);
        printf("| %-21s | %-50d |\n", "heads", c->num_heads);
        printf("| %-21s | %-50d |\n", "channels", c->channels);
        printf("| %-21s | %-50zu |\n", "parameters", np);
        printf("| %-21s | %-50s |\n", "device", prop.name);
        printf("| %-21s | %-50d |\n", "processes (GPUs)", mg.nproc);
        printf("| %-21s | %-50s |\n", "flce logits", flce_fp32_logits ? "fp32 (exact LSE)" : "bf16");
        printf("| %-21s | %-50s |\n", "flce GEMM algorithms",
               flce_autotune ? "autotuned on the first step (-fa 1)" : "cuBLASLt heuristic (-fa 0)");
        printf("| %-21s | %-50s |\n", "peak bf16 (for MFU)", "H100/H200 SXM 989 TFLOP/s dense");
        printf("+-----------------------+----------------------------------------------------+\n");
        const double full_logits = (double)B * T * c->padded_vocab_size * sizeof(floatX);
        printf("memory: parameters %.2f GiB (bf16 + fp32 master), gradients %.2f GiB, AdamW %.2f GiB, activations %.2f GiB,\n"
               "        flce workspace %.2f GiB (chunks of %lld tokens); full bf16 logits would have been %.2f GiB more\n",
               np * 6.0 / gib, np * 4.0 / gib, np * 8.0 / gib, model.act_bytes / gib, model.flce_ws_bytes / gib,
               (long long)flce_chunk_tokens(&model.flce_cfg, model.flce_ws_bytes), full_logits / gib);
    }

    int start_step = 0;
    if (resume) {
        if (out_dir == NULL) { fprintf(stderr, "Error: -y 1 needs -o <dir>\n"); return 1; }
        const int step = resume_checkpoint(&model, &train_loader, out_dir, &mg);
        if (step >= 0) start_step = step;
        if (main_rank) {
            if (step >= 0) printf("resumed from step %d of %s\n", step, out_dir);
            else printf("no complete checkpoint in %s: starting fresh\n", out_dir);
        }
    }
    FILE *log = NULL;
    if (out_dir != NULL && main_rank) mkdir(out_dir, 0777);
    multi_gpu_barrier(&mg);
    if (out_dir != NULL && main_rank) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/main.log", out_dir);
        log = fopen_check(path, start_step > 0 ? "a" : "w");
    }

    // flops per token for MFU (PaLM's count): 6 per parameter plus 12 L T C for attention
    const double flops_per_token = 6.0 * (double)np + 12.0 * c->num_layers * (double)T * c->channels;
    int *gen_buf = (int *)malloc_check((size_t)T * sizeof(int));
    float *val_token_loss = NULL, *val_sum = NULL;
    cudaCheck(cudaMalloc(&val_token_loss, (size_t)B * T * sizeof(float)));
    cudaCheck(cudaMalloc(&val_sum, sizeof(float)));
    uint64_t sample_rng = 1337;
    double tok_per_s_ema = 0.0, ema_weight = 0.0;
    float *losses = (float *)malloc_check((size_t)grad_accum * sizeof(float));

    for (int step = start_step; step <= max_steps; step++) {
        const int last = step == max_steps;
        if (val_every > 0 && (step % val_every == 0 || last) && val_batches > 0) {
            dataloader_reset(&val_loader);
            double loss_sum = 0.0;
            size_t n_targets = 0;
            for (int i = 0; i < val_batches; i++) {
                dataloader_next_batch(&val_loader);
                gpt2_set_batch(&model, val_loader.inputs, val_loader.targets, B, T, 0, s);
                gpt2_forward_eval(&model, B, T, val_sum, val_token_loss, s);
                float batch_sum = 0.0f;
                cudaCheck(cudaMemcpyAsync(&batch_sum, val_sum, sizeof(float), cudaMemcpyDeviceToHost, s));
                cudaCheck(cudaStreamSynchronize(s));
                loss_sum += batch_sum;
                n_targets += val_loader.num_targets;
            }
            loss_sum = multi_gpu_sum(&mg, loss_sum);
            const double all_targets = multi_gpu_sum(&mg, (double)n_targets);
            const double val_loss = all_targets > 0 ? loss_sum / all_targets : 0.0;
            if (main_rank) printf("val loss %f (%.0f tokens)\n", val_loss, all_targets);
            if (log) { fprintf(log, "s:%d tel:%.4f\n", step, val_loss); fflush(log); }
        }
        if (main_rank && sample_every > 0 && step > 0 && (step % sample_every == 0 || last))
            gpt2_sample(&model, &tok, gen_tokens, gen_buf, &sample_rng, s);
        if (out_dir != NULL && ckpt_every > 0 && step > start_step && (step % ckpt_every == 0 || last))
            write_checkpoint(&model, &train_loader, out_dir, step, &mg);
        if (last) break;

        cudaEvent_t e0, e1;
        cudaCheck(cudaEventCreate(&e0));
        cudaCheck(cudaEventCreate(&e1));
        cudaCheck(cudaEventRecord(e0, s));
        gpt2_zero_grad(&model, s);
        for (int micro = 0; micro < grad_accum; micro++) {
            dataloader_next_batch(&train_loader);
            gpt2_set_batch(&model, train_loader.inputs, train_loader.targets, B, T, 1, s);
            gpt2_forward_train(&model, B, T, micro, s);
            gpt2_backward(&model, B, T, s);
        }
        multi_gpu_average(&mg, model.grads, model.num_parameters, s);
        const float norm = gpt2_grad_norm(&model, s);
        const float clip = 1.0f;
        const float grad_scale = norm > clip ? clip / norm : 1.0f;
        const float step_lr = learning_rate(schedule, step, max_steps, warmup, lr, final_frac);
        gpt2_update(&model, step_lr, 0.9f, 0.95f, 1e-8f, weight_decay, grad_scale, step + 1, s);
        cudaCheck(cudaMemcpyAsync(losses, model.acts.losses, (size_t)grad_accum * sizeof(float), cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaEventRecord(e1, s));
        cudaCheck(cudaEventSynchronize(e1));
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        cudaCheck(cudaEventDestroy(e0));
        cudaCheck(cudaEventDestroy(e1));
        if (flce_check_errors(model.flce, s) != FLCE_OK) {
            fprintf(stderr, "Error: %s\n", flce_last_error(model.flce));
            return 1;
        }
        double loss = 0.0;
        for (int k = 0; k < grad_accum; k++) loss += losses[k];
        loss = multi_gpu_sum(&mg, loss / grad_accum) / mg.nproc;
        if (!isfinite(loss)) {
            fprintf(stderr, "Error: the loss is %f at step %d: stopping\n", loss, step + 1);
            return 1;
        }
        // tokens/s: an exponential average (bias-corrected) from the second step on, since the
        // first carries one-time setup (cuBLASLt heuristics, allocations)
        const double tok_per_s = total_batch / (ms / 1e3);
        if (step > start_step) {
            tok_per_s_ema = 0.9 * tok_per_s_ema + 0.1 * tok_per_s;
            ema_weight = 0.9 * ema_weight + 0.1;
        }
        const double tok_per_s_shown = ema_weight > 0.0 ? tok_per_s_ema / ema_weight : tok_per_s;
        const double mfu = flops_per_token * tok_per_s_shown / 989e12 / mg.nproc * 100.0;
        if (main_rank) printf("step %4d/%d | loss %7.6f | norm %6.4f | lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s\n",
               step + 1, max_steps, loss, norm, step_lr, ms, mfu, tok_per_s_shown);
        if (log) { fprintf(log, "s:%d trl:%.4f lr:%.6f norm:%.2f\n", step, loss, step_lr, norm); fflush(log); }
    }
    if (log) fclose_check(log);
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    if (main_rank) printf("device memory in use at the end (rank 0): %.0f MiB\n", (total_b - free_b) / 1048576.0);
    free(gen_buf);
    free(losses);
    cudaCheck(cudaFree(val_token_loss));
    cudaCheck(cudaFree(val_sum));
    tokenizer_free(&tok);
    dataloader_free(&train_loader);
    dataloader_free(&val_loader);
    gpt2_free(&model);
    cudaCheck(cudaStreamDestroy(s));
    multi_gpu_finish(&mg);
    return 0;
}
#endif
