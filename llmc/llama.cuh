/*
llama.cuh - the Llama 3 / Qwen2.5 family on the GPU (llmc/model.cuh's interface): token
embedding, L pre-RMSNorm blocks (GQA causal self-attention with rotary positions, SwiGLU MLP),
the final RMSNorm. Qwen2.5 is the same block with q/k/v biases. Its host half
(configuration, parameter table, descriptors, files) is llmc/llama.h.

Per layer l, over the B*T tokens (x the residual stream, qkv = NH + 2 NKV heads of hd):
  ln1 = rmsnorm(x; ln1w)                      rstd1 kept
  qkv = ln1 @ qkvw^T (+ qkvb)                 then RoPE on its q and k heads, in place
  att = attention(q, k, v)                    GQA: kv head h / (NH / NKV), read in place; lse kept
  x2  = x + att @ attprojw^T                  the residual added in the GEMM's epilogue
  ln2 = rmsnorm(x2; ln2w)                     rstd2 kept
  gu  = ln2 @ gateupw^T                       one GEMM: each row [gate (I) | up (I)]
  h   = silu(gate) * up                       -r 1: recomputed in the backward (one buffer)
                                              on Hopper in the GEMM's epilogue (matmul_forward_swiglu),
                                              its backward in the down dinp's (matmul_backward_dswiglu)
  x3  = x2 + h @ downw^T
then hidden = rmsnorm(x3 of the last layer; lnfw), which the trainer's LM head reads (the
head is lm_head, or embed when tied: flce adds its d_W into embed's gradient then, and the
embedding's backward adds its own after it).

The backward mirrors GPT-2's (llmc/gpt2.cuh): dresidual carries d(x) down the stream; each
RMSNorm backward adds its input gradient into it (+=) and each projection's input gradient is
written (=) into the d_hidden buffer, which the next norm backward reads. The q/k gradients
of the attention are rotated back (rope_backward) before the QKV GEMM's backward. Layer l's
gradients are final after its ln1 backward (the hook's bucket l); embed's after the
embedding's backward, lnfw's after the first norm backward, lm_head's after the head (bucket L).
*/
#ifndef LLMC_LLAMA_CUH
#define LLMC_LLAMA_CUH

#include "attention.cuh"
#include "encoder.cuh"
#include "llama.h"
#include "matmul.cuh"
#include "model.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "rope.h"
#include "swiglu.cuh"

typedef struct {
    int L, C, NH, NKV, hd, I, QKV;        // QKV = (NH + 2 NKV) hd: the width of the qkv rows
    float eps;
    int bias;                             // q/k/v biases (Qwen2)
} LlamaDims;

// the named tensors of one flat buffer (llmc/llama.h's table; absent ones NULL)
typedef struct {
    floatX *embed, *ln1w, *qkvw, *qkvb, *attprojw, *ln2w, *gateupw, *downw, *lnfw;
} LlamaParams;
typedef struct {
    float *embed, *ln1w, *qkvw, *qkvb, *attprojw, *ln2w, *gateupw, *downw, *lnfw;
} LlamaGrads;

typedef struct {
    LlamaDims d;
    LlamaParams p;
    LlamaGrads g;
    int *inputs;                          // (B,T) on the device
    EncoderBuckets buckets;               // the batch's tokens, for the embedding's backward
    float *rope_cos, *rope_sin;           // (T, hd/2) fp32: the rotary tables of positions 0..T-1
    AttentionShape att;                   // the attention's shape at alloc's B, T
    // the per-layer activations the backward needs (stacked over the layers)
    floatX *encoded;                      // (B,T,C)
    floatX *ln1, *qkv, *atty, *res2, *ln2, *gu, *res3;  // (L,B,T,C), (L,B,T,QKV), (L,B,T,2I) ...
    float *ln1_rstd, *ln2_rstd, *lnf_rstd;              // (L,B,T), (L,B,T), (B,T)
    unsigned char *att_saved;             // per layer: attention_saved_bytes
    size_t att_saved_bytes;
    floatX *h;                            // -r 1: (B,T,I), recomputed; -r 0: (L,B,T,I) kept
    int recompute;
    // backward scratch (d_hidden serves as the norms' dout). The MLP's gradients take the
    // layer's own activations once the backward has read them: dh over h (the down projection's
    // weight gradient reads h before its dinp writes dh), dgu over gu (swiglu_backward in place)
    floatX *dresidual, *datty, *dqkv;     // (B,T,C) x2, (B,T,QKV)
    float *rms_scratch;
    unsigned char *att_scratch;
} LlamaModel;

static inline LlamaModel *llama_impl(Model *m) { return (LlamaModel *)m->impl; }

static inline void llama_dims_of(const LlamaConfig *c, LlamaDims *d) {
    d->L = c->num_hidden_layers;
    d->C = c->hidden_size;
    d->NH = c->num_attention_heads;
    d->NKV = c->num_key_value_heads;
    d->hd = c->head_dim;
    d->I = c->intermediate_size;
    d->QKV = (d->NH + 2 * d->NKV) * d->hd;
    d->eps = (float)c->rms_norm_eps;
    d->bias = c->attention_bias;
}


// The element offset of tensor name in the flat buffers (-1: not in this model's table).
static inline long long llama_tensor_offset(const ModelSpec *s, const char *name) {
    const ParameterTensor *t = model_tensor(s, name);
    return t != NULL ? (long long)t->offset : -1;
}

#define LLAMA_POINT_(P, base, name) (P).name = llama_tensor_offset(spec, #name) >= 0 ? (base) + llama_tensor_offset(spec, #name) : NULL
static void llama_point(LlamaModel *g, const ModelSpec *spec, floatX *params, float *grads) {
    LLAMA_POINT_(g->p, params, embed); LLAMA_POINT_(g->g, grads, embed);
    LLAMA_POINT_(g->p, params, ln1w); LLAMA_POINT_(g->g, grads, ln1w);
    LLAMA_POINT_(g->p, params, qkvw); LLAMA_POINT_(g->g, grads, qkvw);
    LLAMA_POINT_(g->p, params, qkvb); LLAMA_POINT_(g->g, grads, qkvb);
    LLAMA_POINT_(g->p, params, attprojw); LLAMA_POINT_(g->g, grads, attprojw);
    LLAMA_POINT_(g->p, params, ln2w); LLAMA_POINT_(g->g, grads, ln2w);
    LLAMA_POINT_(g->p, params, gateupw); LLAMA_POINT_(g->g, grads, gateupw);
    LLAMA_POINT_(g->p, params, downw); LLAMA_POINT_(g->g, grads, downw);
    LLAMA_POINT_(g->p, params, lnfw); LLAMA_POINT_(g->g, grads, lnfw);
}
#undef LLAMA_POINT_

static floatX *llama_act(Model *m, size_t elems) { return (floatX *)model_alloc_act(m, elems * sizeof(floatX)); }
static float *llama_actf(Model *m, size_t elems) { return (float *)model_alloc_act(m, elems * sizeof(float)); }

static void llama_model_alloc(Model *m, int B, int T, int recompute) {
    const LlamaConfig *c = llama_config_of(m->spec);
    LlamaModel *g = (LlamaModel *)calloc(1, sizeof(LlamaModel));
    require(g != NULL, "llama_model_alloc: out of host memory");
    m->impl = g;
    m->B = B;
    m->T = T;
    LlamaDims *d = &g->d;
    llama_dims_of(c, d);
    llama_point(g, m->spec, m->params, m->grads);
    require(g->p.qkvb != NULL || !d->bias, "llama_model_alloc: the table has no qkvb for a biased model (a bug)");
    const size_t BT = (size_t)B * T, C = (size_t)d->C, L = (size_t)d->L, I = (size_t)d->I, QKV = (size_t)d->QKV;
    g->att.B = B;
    g->att.T = T;
    g->att.NH = d->NH;
    g->att.NKV = d->NKV;
    g->att.hs = d->hd;
    g->att.ldq = d->QKV;
    g->att.ldkv = d->QKV;
    g->encoded = llama_act(m, BT * C);
    g->ln1 = llama_act(m, L * BT * C);
    g->qkv = llama_act(m, L * BT * QKV);
    g->atty = llama_act(m, L * BT * C);
    g->res2 = llama_act(m, L * BT * C);
    g->ln2 = llama_act(m, L * BT * C);
    g->gu = llama_act(m, L * BT * 2 * I);
    g->res3 = llama_act(m, L * BT * C);
    g->ln1_rstd = llama_actf(m, L * BT);
    g->ln2_rstd = llama_actf(m, L * BT);
    g->lnf_rstd = llama_actf(m, BT);
    g->att_saved_bytes = attention_saved_bytes(&g->att);
    g->att_saved = (unsigned char *)model_alloc_act(m, L * g->att_saved_bytes);
    g->recompute = recompute != 0;
    g->h = llama_act(m, (g->recompute ? 1 : L) * BT * I);
    g->dresidual = llama_act(m, BT * C);
    m->d_hidden = llama_act(m, BT * C);
    g->datty = llama_act(m, BT * C);
    g->dqkv = llama_act(m, BT * QKV);
    g->rms_scratch = llama_actf(m, rmsnorm_backward_scratch_floats((int)BT, (int)C));
    g->att_scratch = (unsigned char *)model_alloc_act(m, attention_scratch_bytes(&g->att));
    cudaCheck(cudaMalloc(&g->inputs, BT * sizeof(int)));
    encoder_buckets_init(&g->buckets, B, T, d->C);
    // the rotary tables of positions 0..T-1, as transformers computes them (llmc/rope.h)
    RopeConfig rc;
    llama_rope_of(c, &rc);
    const size_t half = (size_t)d->hd / 2;
    float *cos_h = (float *)malloc_check((size_t)T * half * sizeof(float));
    float *sin_h = (float *)malloc_check((size_t)T * half * sizeof(float));
    char err[512];
    require(rope_tables_checked(cos_h, sin_h, T, &rc, err, sizeof(err)) == 0, err);
    g->rope_cos = llama_actf(m, (size_t)T * half);
    g->rope_sin = llama_actf(m, (size_t)T * half);
    cudaCheck(cudaMemcpy(g->rope_cos, cos_h, (size_t)T * half * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(g->rope_sin, sin_h, (size_t)T * half * sizeof(float), cudaMemcpyHostToDevice));
    free(cos_h);
    free(sin_h);
}

static void llama_model_set_inputs(Model *m, const int *inputs, int B, int T, int with_buckets, cudaStream_t s) {
    LlamaModel *g = llama_impl(m);
    cudaCheck(cudaMemcpyAsync(g->inputs, inputs, (size_t)B * T * sizeof(int), cudaMemcpyHostToDevice, s));
    if (with_buckets) encoder_buckets_build(&g->buckets, inputs, B, T, s);
}

// The attention's shape for a batch of B x T (alloc's strides).
static inline AttentionShape llama_att_shape(const LlamaModel *g, int B, int T) {
    AttentionShape a = g->att;
    a.B = B;
    a.T = T;
    return a;
}

static void llama_model_forward(Model *m, int B, int T, cudaStream_t s) {
    LlamaModel *g = llama_impl(m);
    const LlamaDims *d = &g->d;
    const LlamaParams *p = &g->p;
    const int C = d->C, I = d->I, QKV = d->QKV, L = d->L, BT = B * T;
    const size_t sC = (size_t)m->B * m->T * C;  // per-layer strides (alloc's sizes)
    const size_t sQKV = (size_t)m->B * m->T * QKV, sGU = (size_t)m->B * m->T * 2 * I, sI = (size_t)m->B * m->T * I;
    const size_t ml = (size_t)m->B * m->T;
    const AttentionShape att = llama_att_shape(g, B, T);
    encoder_forward(g->encoded, g->inputs, p->embed, NULL, B, T, C, s);
    for (int l = 0; l < L; l++) {
        const floatX *x = l == 0 ? g->encoded : g->res3 + (l - 1) * sC;
        floatX *ln1 = g->ln1 + l * sC, *qkv = g->qkv + l * sQKV, *atty = g->atty + l * sC;
        floatX *res2 = g->res2 + l * sC, *ln2 = g->ln2 + l * sC, *gu = g->gu + l * sGU, *res3 = g->res3 + l * sC;
        floatX *h = g->h + (g->recompute ? 0 : l * sI);
        rmsnorm_forward(ln1, g->ln1_rstd + l * ml, x, p->ln1w + (size_t)l * C, d->eps, BT, C, s);
        matmul_forward(m->mm, qkv, NULL, ln1, p->qkvw + (size_t)l * QKV * C, d->bias ? p->qkvb + (size_t)l * QKV : NULL,
                       BT, C, QKV, s);
        rope_forward(qkv, qkv + d->NH * d->hd, g->rope_cos, g->rope_sin, B, T, d->NH, d->NKV, d->hd, QKV, QKV, m->T, s);
        attention_forward(atty, g->att_saved + (size_t)l * g->att_saved_bytes, g->att_scratch, qkv,
                          qkv + d->NH * d->hd, qkv + (d->NH + d->NKV) * d->hd, &att, s);
        matmul_forward_residual(m->mm, res2, x, atty, p->attprojw + (size_t)l * C * C, NULL, BT, C, C, s);
        rmsnorm_forward(ln2, g->ln2_rstd + l * ml, res2, p->ln2w + (size_t)l * C, d->eps, BT, C, s);
        matmul_forward_swiglu(m->mm, gu, h, ln2, p->gateupw + (size_t)l * 2 * I * C, BT, C, I, s);
        matmul_forward_residual(m->mm, res3, res2, h, p->downw + (size_t)l * C * I, NULL, BT, I, C, s);
    }
    rmsnorm_forward(m->hidden, g->lnf_rstd, g->res3 + (L - 1) * sC, p->lnfw, d->eps, BT, C, s);
}

static void llama_model_backward(Model *m, int B, int T, const GradReadyHook *hook, cudaStream_t s) {
    LlamaModel *g = llama_impl(m);
    const LlamaDims *d = &g->d;
    const LlamaParams *p = &g->p;
    const LlamaGrads *gr = &g->g;
    const int C = d->C, I = d->I, QKV = d->QKV, L = d->L, BT = B * T;
    const size_t sC = (size_t)m->B * m->T * C;
    const size_t sQKV = (size_t)m->B * m->T * QKV, sGU = (size_t)m->B * m->T * 2 * I, sI = (size_t)m->B * m->T * I;
    const size_t ml = (size_t)m->B * m->T;
    const AttentionShape att = llama_att_shape(g, B, T);
    floatX *dln = m->d_hidden;
    const int kq = d->NH * d->hd, kv = (d->NH + d->NKV) * d->hd;  // k and v's columns in a qkv row
    cudaCheck(cudaMemsetAsync(g->dresidual, 0, (size_t)BT * C * sizeof(floatX), s));
    rmsnorm_backward(g->dresidual, gr->lnfw, g->rms_scratch, dln, g->res3 + (L - 1) * sC, p->lnfw, g->lnf_rstd, BT, C,
                     s);
    for (int l = L - 1; l >= 0; l--) {
        const floatX *x = l == 0 ? g->encoded : g->res3 + (l - 1) * sC;
        floatX *ln1 = g->ln1 + l * sC, *qkv = g->qkv + l * sQKV, *atty = g->atty + l * sC;
        floatX *res2 = g->res2 + l * sC, *ln2 = g->ln2 + l * sC, *gu = g->gu + l * sGU;
        floatX *h = g->h + (g->recompute ? 0 : l * sI);
        // MLP
        // h for the down projection's weight gradient (the fused forward's h is this, bitwise)
        if (g->recompute) swiglu_forward(h, gu, BT, I, s);
        matmul_backward_dswiglu(m->mm, gu, h, gr->downw + (size_t)l * C * I, g->dresidual, h,
                                p->downw + (size_t)l * C * I, gu, BT, C, I, s);
        matmul_backward(m->mm, dln, gr->gateupw + (size_t)l * 2 * I * C, NULL, gu, ln2,
                        p->gateupw + (size_t)l * 2 * I * C, NULL, BT, C, 2 * I, s);
        rmsnorm_backward(g->dresidual, gr->ln2w + (size_t)l * C, g->rms_scratch, dln, res2, p->ln2w + (size_t)l * C,
                         g->ln2_rstd + l * ml, BT, C, s);
        // attention
        matmul_backward(m->mm, g->datty, gr->attprojw + (size_t)l * C * C, NULL, g->dresidual, atty,
                        p->attprojw + (size_t)l * C * C, NULL, BT, C, C, s);
        attention_backward(g->dqkv, g->dqkv + kq, g->dqkv + kv, g->att_scratch, g->datty, qkv, qkv + kq, qkv + kv, atty,
                           g->att_saved + (size_t)l * g->att_saved_bytes, &att, s);
        rope_backward(g->dqkv, g->dqkv + kq, g->rope_cos, g->rope_sin, B, T, d->NH, d->NKV, d->hd, QKV, QKV, m->T, s);
        matmul_backward(m->mm, dln, gr->qkvw + (size_t)l * QKV * C, d->bias ? gr->qkvb + (size_t)l * QKV : NULL,
                        g->dqkv, ln1, p->qkvw + (size_t)l * QKV * C, NULL, BT, C, QKV, s);
        rmsnorm_backward(g->dresidual, gr->ln1w + (size_t)l * C, g->rms_scratch, dln, x, p->ln1w + (size_t)l * C,
                         g->ln1_rstd + l * ml, BT, C, s);
        if (hook) hook->ready(hook->ctx, l, s);  // layer l's gradients are final
    }
    encoder_backward(gr->embed, NULL, g->dresidual, &g->buckets, B, T, C, s);
    if (hook) hook->ready(hook->ctx, L, s);  // embed, lnfw (and lm_head: the head's, before the backward)
}

static void llama_model_free(Model *m) {
    LlamaModel *g = llama_impl(m);
    if (g == NULL) return;
    void *ptrs[] = {g->encoded, g->ln1,      g->qkv,       g->atty,      g->res2,       g->ln2,     g->gu,
                    g->res3,    g->ln1_rstd, g->ln2_rstd,  g->lnf_rstd,  g->att_saved,  g->h,       g->dresidual,
                    m->d_hidden, g->datty,   g->dqkv,      g->rms_scratch,
                    g->att_scratch, g->inputs, g->rope_cos, g->rope_sin};
    for (size_t k = 0; k < sizeof(ptrs) / sizeof(ptrs[0]); k++) cudaCheck(cudaFree(ptrs[k]));
    encoder_buckets_free(&g->buckets);
    free(g);
    m->impl = NULL;
    m->d_hidden = NULL;
}

static const ModelOps llama_ops = {llama_model_alloc, llama_model_set_inputs, llama_model_forward,
                                   llama_model_backward, llama_model_free};

#endif // LLMC_LLAMA_CUH
