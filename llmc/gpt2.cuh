/*
gpt2.cuh - the GPT-2 family on the GPU (llmc/model.cuh's interface): token and position
embeddings, L pre-LayerNorm blocks (causal self-attention, GELU MLP), the final LayerNorm. Its
host half (configuration, parameter table, files) is llmc/gpt2.h.

The LM head is the trainer's (flce on wte, tied); what the backward gets from it is d(lnf),
and wte's gradient, which the head accumulates too, is final after the encoder's backward (the
last bucket). The biases of the two projections that write the residual stream (attprojb,
fcprojb) get their gradient, the column sums of dresidual, from the layernorm backward that
leaves dresidual at its final value (the lnf one for the last layer's fcprojb, ln1 of layer
l + 1 for layer l's, ln2 of layer l for attprojb), so their matmul_backward skips it.
*/
#ifndef LLMC_GPT2_CUH
#define LLMC_GPT2_CUH

#include "attention.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "gpt2.h"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "model.cuh"

// named bf16 parameters, from llmc/gpt2.h's table (the fp32 gradients: GPT2FloatTensors)
GPT2_DEFINE_TENSORS(GPT2Params, gpt2_point_params, floatX)

typedef struct {
    GPT2Params params;                    // named, into Model.params
    GPT2FloatTensors grads;               // named, into Model.grads
    int *inputs;                          // (B,T) on the device
    EncoderBuckets buckets;               // the batch's tokens, for the encoder's backward
    // the per-layer activations the backward needs
    floatX *encoded;                      // (B,T,C)
    floatX *ln1, *qkv, *atty, *residual2, *ln2, *fch_pre, *residual3;  // per layer, stacked
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;                  // (L,B,T)
    unsigned char *att_saved;             // per layer: attention_saved_bytes
    float *lnf_mean, *lnf_rstd;
    floatX *fch_gelu;                     // -r 1: (B,T,4C), one buffer, recomputed in the backward;
                                          // -r 0: (L,B,T,4C), each layer's kept from the forward
    int recompute;                        // -r: 1 recomputes fch_gelu in the backward, 0 keeps it
    // backward scratch (d_hidden, the model's dln, serves as the layernorms' dout too)
    floatX *dresidual, *datty, *dqkv, *dfch;   // (B,T,C) x2, (B,T,3C), (B,T,4C)
    float *ln_scratch;
    unsigned char *att_scratch;
    size_t att_saved_bytes;               // per layer
} GPT2Model;

static inline GPT2Model *gpt2_impl(Model *m) { return (GPT2Model *)m->impl; }

static floatX *gpt2_act(Model *m, size_t elems) { return (floatX *)model_alloc_act(m, elems * sizeof(floatX)); }
static float *gpt2_actf(Model *m, size_t elems) { return (float *)model_alloc_act(m, elems * sizeof(float)); }

static void gpt2_model_alloc(Model *m, int B, int T, int recompute) {
    const GPT2Config *c = gpt2_config_of(m->spec);
    const size_t BT = (size_t)B * T, C = (size_t)c->channels, L = (size_t)c->num_layers;
    const int NH = c->num_heads;
    GPT2Model *g = (GPT2Model *)calloc(1, sizeof(GPT2Model));
    require(g != NULL, "gpt2_model_alloc: out of host memory");
    m->impl = g;
    m->B = B;
    m->T = T;
    gpt2_point_params(&g->params, m->params, m->spec->tensors);
    gpt2_point_floats(&g->grads, m->grads, m->spec->tensors);
    g->encoded = gpt2_act(m, BT * C);
    g->ln1 = gpt2_act(m, L * BT * C);
    g->qkv = gpt2_act(m, L * BT * 3 * C);
    g->atty = gpt2_act(m, L * BT * C);
    g->residual2 = gpt2_act(m, L * BT * C);
    g->ln2 = gpt2_act(m, L * BT * C);
    g->fch_pre = gpt2_act(m, L * BT * 4 * C);
    g->residual3 = gpt2_act(m, L * BT * C);
    g->ln1_mean = gpt2_actf(m, L * BT);
    g->ln1_rstd = gpt2_actf(m, L * BT);
    g->ln2_mean = gpt2_actf(m, L * BT);
    g->ln2_rstd = gpt2_actf(m, L * BT);
    const AttentionShape att = attention_shape_packed(B, T, NH, NH, (int)C / NH);  // q, k, v: views of qkv
    g->att_saved_bytes = attention_saved_bytes(&att);
    g->att_saved = (unsigned char *)model_alloc_act(m, L * g->att_saved_bytes);
    g->lnf_mean = gpt2_actf(m, BT);
    g->lnf_rstd = gpt2_actf(m, BT);
    g->recompute = recompute != 0;
    g->fch_gelu = gpt2_act(m, (g->recompute ? 1 : L) * BT * 4 * C);
    g->dresidual = gpt2_act(m, BT * C);
    m->d_hidden = gpt2_act(m, BT * C);
    g->datty = gpt2_act(m, BT * C);
    g->dqkv = gpt2_act(m, BT * 3 * C);
    g->dfch = gpt2_act(m, BT * 4 * C);
    g->ln_scratch = gpt2_actf(m, layernorm_backward_scratch_floats((int)BT, (int)C));
    g->att_scratch = (unsigned char *)model_alloc_act(m, attention_scratch_bytes(&att));
    cudaCheck(cudaMalloc(&g->inputs, BT * sizeof(int)));
    encoder_buckets_init(&g->buckets, B, T, c->channels);
}

// Copies a batch's inputs to the device (and the encoder's token buckets for the backward).
static void gpt2_model_set_inputs(Model *m, const int *inputs, int B, int T, int with_buckets, cudaStream_t s) {
    GPT2Model *g = gpt2_impl(m);
    cudaCheck(cudaMemcpyAsync(g->inputs, inputs, (size_t)B * T * sizeof(int), cudaMemcpyHostToDevice, s));
    // copies from pageable memory return once the data is staged, and the buckets are built
    // into their own pinned buffer: the loader may refill its arrays as soon as we return
    if (with_buckets) encoder_buckets_build(&g->buckets, inputs, B, T, s);
}

// The transformer up to the final layernorm, for the B x T tokens of set_inputs, into hidden.
static void gpt2_model_forward(Model *m, int B, int T, cudaStream_t s) {
    const GPT2Config *c = gpt2_config_of(m->spec);
    const int C = c->channels, NH = c->num_heads, L = c->num_layers;
    const size_t BT = (size_t)B * T, stride = (size_t)m->B * m->T * C;  // per-layer slices
    const AttentionShape att = attention_shape_packed(B, T, NH, NH, C / NH);  // q, k, v: views of qkv
    GPT2Model *a = gpt2_impl(m);
    const GPT2Params *p = &a->params;
    encoder_forward(a->encoded, a->inputs, p->wte, p->wpe, B, T, C, s);
    for (int l = 0; l < L; l++) {
        const floatX *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * stride;
        floatX *ln1 = a->ln1 + l * stride, *qkv = a->qkv + l * 3 * stride, *atty = a->atty + l * stride;
        floatX *res2 = a->residual2 + l * stride, *ln2 = a->ln2 + l * stride;
        floatX *fch_pre = a->fch_pre + l * 4 * stride, *res3 = a->residual3 + l * stride;
        floatX *fch_gelu = a->fch_gelu + (a->recompute ? 0 : l * 4 * stride);
        const size_t ml = (size_t)l * m->B * m->T;
        const size_t lc = (size_t)l * C, lcc = (size_t)l * C * C;  // layer l's slice of (L, C) and (L, C, C)
        layernorm_forward(ln1, a->ln1_mean + ml, a->ln1_rstd + ml, residual, p->ln1w + lc, p->ln1b + lc, (int)BT, C, s);
        matmul_forward(m->mm, qkv, NULL, ln1, p->qkvw + 3 * lcc, p->qkvb + 3 * lc, (int)BT, C, 3 * C, s);
        attention_forward(atty, a->att_saved + (size_t)l * a->att_saved_bytes, a->att_scratch, qkv, qkv + C,
                          qkv + 2 * C, &att, s);
        // the projections add the residual stream in their GEMM (res2 = residual + ..., res3 = res2 + ...)
        matmul_forward_residual(m->mm, res2, residual, atty, p->attprojw + lcc, p->attprojb + lc, (int)BT, C, C, s);
        layernorm_forward(ln2, a->ln2_mean + ml, a->ln2_rstd + ml, res2, p->ln2w + lc, p->ln2b + lc, (int)BT, C, s);
        matmul_forward(m->mm, fch_gelu, fch_pre, ln2, p->fcw + 4 * lcc, p->fcb + 4 * lc, (int)BT, C, 4 * C, s);
        matmul_forward_residual(m->mm, res3, res2, fch_gelu, p->fcprojw + 4 * lcc, p->fcprojb + lc, (int)BT, 4 * C,
                                C, s);
    }
    const floatX *last = a->residual3 + (size_t)(L - 1) * stride;
    layernorm_forward(m->hidden, a->lnf_mean, a->lnf_rstd, last, p->lnfw, p->lnfb, (int)BT, C, s);
}

// From d(lnf) (in d_hidden) down to the embeddings; every parameter gradient accumulated (+=).
static void gpt2_model_backward(Model *m, int B, int T, const GradReadyHook *hook, cudaStream_t s) {
    const GPT2Config *c = gpt2_config_of(m->spec);
    const int C = c->channels, NH = c->num_heads, L = c->num_layers;
    const size_t BT = (size_t)B * T, stride = (size_t)m->B * m->T * C;
    const AttentionShape att = attention_shape_packed(B, T, NH, NH, C / NH);  // q, k, v: views of qkv
    GPT2Model *a = gpt2_impl(m);
    const GPT2Params *p = &a->params;
    const GPT2FloatTensors *g = &a->grads;
    floatX *dln = m->d_hidden;
    cudaCheck(cudaMemsetAsync(a->dresidual, 0, BT * C * sizeof(floatX), s));
    const floatX *last = a->residual3 + (size_t)(L - 1) * stride;
    layernorm_backward_colsum(a->dresidual, g->lnfw, g->lnfb, g->fcprojb + (size_t)(L - 1) * C, a->ln_scratch, dln,
                              last, p->lnfw, a->lnf_mean, a->lnf_rstd, (int)BT, C, s);
    for (int l = L - 1; l >= 0; l--) {
        const floatX *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * stride;
        floatX *ln1 = a->ln1 + l * stride, *qkv = a->qkv + l * 3 * stride, *atty = a->atty + l * stride;
        floatX *res2 = a->residual2 + l * stride, *ln2 = a->ln2 + l * stride;
        floatX *fch_pre = a->fch_pre + l * 4 * stride;
        floatX *fch_gelu = a->fch_gelu + (a->recompute ? 0 : l * 4 * stride);
        const size_t ml = (size_t)l * m->B * m->T;
        const size_t lc = (size_t)l * C, lcc = (size_t)l * C * C;
        // MLP: -r 1 recomputes gelu(fch_pre) into the one buffer; -r 0 kept it per layer
        if (a->recompute) gelu_forward(fch_gelu, fch_pre, BT * 4 * C, s);
        // dfch = d(fch_pre): the GELU backward is in the epilogue of fcproj's dinp GEMM
        matmul_backward_dgelu(m->mm, a->dfch, g->fcprojw + 4 * lcc, NULL, a->dresidual, fch_gelu, p->fcprojw + 4 * lcc,
                              fch_pre, (int)BT, 4 * C, C, s);
        matmul_backward(m->mm, dln, g->fcw + 4 * lcc, g->fcb + 4 * lc, a->dfch, ln2, p->fcw + 4 * lcc, NULL, (int)BT, C,
                        4 * C, s);
        layernorm_backward_colsum(a->dresidual, g->ln2w + lc, g->ln2b + lc, g->attprojb + lc, a->ln_scratch, dln, res2,
                                  p->ln2w + lc, a->ln2_mean + ml, a->ln2_rstd + ml, (int)BT, C, s);
        // attention
        matmul_backward(m->mm, a->datty, g->attprojw + lcc, NULL, a->dresidual, atty, p->attprojw + lcc, NULL, (int)BT,
                        C, C, s);
        attention_backward(a->dqkv, a->dqkv + C, a->dqkv + 2 * C, a->att_scratch, a->datty, qkv, qkv + C, qkv + 2 * C,
                           atty, a->att_saved + (size_t)l * a->att_saved_bytes, &att, s);
        matmul_backward(m->mm, dln, g->qkvw + 3 * lcc, g->qkvb + 3 * lc, a->dqkv, ln1, p->qkvw + 3 * lcc, NULL, (int)BT,
                        C, 3 * C, s);
        layernorm_backward_colsum(a->dresidual, g->ln1w + lc, g->ln1b + lc, l > 0 ? g->fcprojb + lc - C : NULL,
                                  a->ln_scratch, dln, residual, p->ln1w + lc, a->ln1_mean + ml, a->ln1_rstd + ml,
                                  (int)BT, C, s);
        if (hook) hook->ready(hook->ctx, l, s);  // layer l's gradients are final
    }
    encoder_backward(g->wte, g->wpe, a->dresidual, &a->buckets, B, T, C, s);
    if (hook) hook->ready(hook->ctx, L, s);  // wte, wpe, lnfw, lnfb
}

static void gpt2_model_free(Model *m) {
    GPT2Model *a = gpt2_impl(m);
    if (a == NULL) return;
    void *ptrs[] = {a->encoded, a->ln1, a->qkv, a->atty, a->residual2, a->ln2, a->fch_pre, a->residual3, a->ln1_mean,
                    a->ln1_rstd, a->ln2_mean, a->ln2_rstd, a->att_saved, a->lnf_mean, a->lnf_rstd, a->fch_gelu,
                    a->dresidual, m->d_hidden, a->datty, a->dqkv, a->dfch, a->ln_scratch, a->att_scratch, a->inputs};
    for (size_t k = 0; k < sizeof(ptrs) / sizeof(ptrs[0]); k++) cudaCheck(cudaFree(ptrs[k]));
    encoder_buckets_free(&a->buckets);
    free(a);
    m->impl = NULL;
    m->d_hidden = NULL;
}

static const ModelOps gpt2_ops = {gpt2_model_alloc, gpt2_model_set_inputs, gpt2_model_forward, gpt2_model_backward,
                                  gpt2_model_free};

#endif // LLMC_GPT2_CUH
