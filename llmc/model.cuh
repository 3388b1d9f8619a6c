/*
model.cuh - the interface between the training loop and a model family on the GPU. A family
(llmc/gpt2.cuh, ...) owns its activations and its forward and backward over buffers it is
given: the bf16 parameters and fp32 gradients (the trainer's flat buffers, in the order of the
family's ModelSpec table, llmc/model.h), a matmul context, and the buffer of its output. It
knows nothing of the optimizer, the LM head, ZeRO or NCCL; the trainer knows nothing of the
family's layers.

The contract:
  forward   the B x T tokens of set_inputs -> hidden (B, T, C) bf16: the final norm's output,
            which the trainer's LM head (flce) reads;
  backward  d_hidden (B, T, C) bf16, which the trainer's head wrote (the model's buffer; the
            backward may overwrite it) -> every parameter gradient accumulated (+=) into
            grads. With a hook, the backward calls hook->ready(ctx, l, s) once layer l's
            gradients (its slices of the tensors stacked over the layers) are final in s's
            work, from l = L - 1 down to 0, then ready(ctx, L, s) once the tensors outside the
            layers are (the trainer reduces each bucket while the backward goes on).
B x T may be smaller than the sizes alloc was given (evaluation, sampling with B = 1).
*/
#ifndef LLMC_MODEL_CUH
#define LLMC_MODEL_CUH

#include "cuda_common.cuh"
#include "matmul.cuh"
#include "model.h"

typedef struct Model Model;

typedef struct {
    void (*ready)(void *ctx, int bucket, cudaStream_t s);
    void *ctx;
} GradReadyHook;

typedef struct {
    // activations for up to B x T tokens; recompute (-r): 1 recomputes what the family can
    // recompute in the backward (less memory), 0 keeps it from the forward
    void (*alloc)(Model *m, int B, int T, int recompute);
    // a batch's input ids (host) to the device; with_buckets: the backward will follow
    void (*set_inputs)(Model *m, const int *inputs, int B, int T, int with_buckets, cudaStream_t s);
    void (*forward)(Model *m, int B, int T, cudaStream_t s);
    void (*backward)(Model *m, int B, int T, const GradReadyHook *hook, cudaStream_t s);
    void (*free)(Model *m);
} ModelOps;

struct Model {
    const ModelSpec *spec;
    const ModelOps *ops;
    floatX *params;       // the trainer's: bf16, the table's order
    float *grads;         // the trainer's: fp32, the table's order
    MatmulContext *mm;    // the trainer's
    floatX *hidden;       // the trainer's: (B, T, C), the forward's output
    floatX *d_hidden;     // the model's: (B, T, C), the backward's input
    int B, T;             // alloc's sizes
    size_t act_bytes;     // the model's activation memory (for the memory report)
    void *impl;           // the family's state
};

// Device memory that counts in m->act_bytes.
static inline void *model_alloc_act(Model *m, size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes > 0 ? bytes : 16));
    m->act_bytes += bytes;
    return p;
}

#endif // LLMC_MODEL_CUH
