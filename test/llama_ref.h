/*
llama_ref.h - a CPU reference of the Llama 3 / Qwen2.5 model (transformers' LlamaForCausalLM
and Qwen2ForCausalLM) in plain C: forward, loss and the backward to every parameter, for
checking the CUDA trainer's kernels and llmc/llama.h's layout against an independent
computation. Written for clarity, not speed. It includes no other header of this repository
(RoPE's frequencies, their llama3 scaling, the norms and the attention are all computed here).

The model, per layer (h: the residual stream, B x T rows of C):
    a = RMSNorm(h) * ln1w                    RMSNorm(x) = x / sqrt(mean(x^2) + eps)
    [q | k | v] = a @ qkvw^T (+ qkvb)        q: NH heads, k and v: NKV heads, each of head_dim
    q, k = RoPE(q), RoPE(k)                  rotate-half at positions 0..T-1 of each sequence
    y = softmax(q k^T / sqrt(head_dim) + causal mask) v,  query head h reads kv head h / (NH / NKV)
    h = h + y @ attprojw^T
    m = RMSNorm(h) * ln2w
    [g | u] = m @ gateupw^T
    h = h + (silu(g) * u) @ downw^T
then logits = (RMSNorm(h) * lnfw) @ W^T over the V real rows of W (lm_head, or embed when tied;
rows V..Vp are padding: outside the softmax, zero gradient), and the loss is the mean
cross-entropy over the targets that are not -100.

RoPE: inv_freq[i] = theta^(-2i / head_dim), i < head_dim / 2, rescaled by Llama 3.1's rule when
rope_llama3 (transformers' _compute_llama3_parameters: wavelength 2 pi / f above
original / low_freq_factor: f / factor; below original / high_freq_factor: f; between: the
blend (1 - s) f / factor + s f with s = (original / wavelength - low) / (high - low)); then
rounded to float32, as transformers keeps it. Dimension i < head_dim / 2 pairs with
i + head_dim / 2: out_i = x_i cos - x_{i+hd/2} sin, out_{i+hd/2} = x_{i+hd/2} cos + x_i sin, at
angle position * inv_freq[i]. (transformers also rounds that angle to float32: a difference of
up to position * 2^-24 rad, left out here.)

Precision: double throughout (parameters, activations, gradients), so finite differences
check the backward to ~1e-9 and a float32 or bf16 implementation is far from its rounding.

Parameters: one flat double array in llmc/llama.h's table order, the per-layer tensors stacked
over the layers: embed (Vp,C), ln1w (L,C), qkvw (L,(NH+2NKV)hd,C) [q rows, k rows, v rows],
qkvb (L,(NH+2NKV)hd) only with qkv_bias, attprojw (L,C,NH hd), ln2w (L,C), gateupw (L,2I,C)
[gate rows, up rows], downw (L,C,I), lnfw (C), lm_head (Vp,C) only when untied. An absent
tensor has size 0 in tensor_sizes.

    LlamaRef m;
    if (llamaref_build(&m, &config) != 0) { fprintf(stderr, "%s\n", m.error); ... }
    llamaref_set_params_f32(&m, params);          // or write m.params directly
    llamaref_forward(&m, x, y, B, T);             // m.loss, the activations below
    llamaref_backward(&m);                        // m.grads (overwritten), m.d_lnf
    llamaref_free(&m);
*/
#ifndef LLAMA_REF_H
#define LLAMA_REF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LLAMAREF_IGNORE_INDEX -100

enum {
    LLAMAREF_EMBED,
    LLAMAREF_LN1W,
    LLAMAREF_QKVW,
    LLAMAREF_QKVB,
    LLAMAREF_ATTPROJW,
    LLAMAREF_LN2W,
    LLAMAREF_GATEUPW,
    LLAMAREF_DOWNW,
    LLAMAREF_LNFW,
    LLAMAREF_LM_HEAD,
    LLAMAREF_NUM_TENSORS
};

// "embed", "ln1w", ... in parameter order (llmc/llama.h's names)
extern const char *const llamaref_tensor_names[LLAMAREF_NUM_TENSORS];

typedef struct {
    int vocab_size;         // V
    int padded_vocab_size;  // Vp >= V
    int channels;           // C (hidden_size)
    int num_layers;         // L
    int num_heads;          // NH
    int num_kv_heads;       // NKV: divides NH
    int head_dim;           // hd: even (NH hd need not be C)
    int intermediate;       // I
    int max_seq_len;        // the longest T
    int tied;               // 1: the LM head is embed
    int qkv_bias;           // 1: q/k/v biases (Qwen2)
    double rms_eps;
    double rope_theta;
    int rope_llama3;        // 1: Llama 3.1's frequency scaling with the four values below
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_pos;
} LlamaRefConfig;

typedef struct {
    LlamaRefConfig config;
    size_t tensor_sizes[LLAMAREF_NUM_TENSORS];    // elements; 0 for an absent tensor
    size_t tensor_offsets[LLAMAREF_NUM_TENSORS];  // first element in params / grads
    size_t num_parameters;
    double *params;
    double *grads;            // llamaref_backward's (overwritten)
    double *inv_freq;         // (hd/2) RoPE's inverse frequencies (llamaref_rope_inv_freq)
    double loss;              // of the last forward
    int n_targets;            // targets that count (not -100)
    int B, T;                 // the activations' batch (0 before the first forward)
    int have_forward;         // a successful forward the backward may use
    // the last forward's activations, row-major, layer-major for the per-layer ones
    int *inputs, *targets;    // (B,T)
    double *x;                // (B,T,C) embed[inputs]
    double *ln1, *ln1_rstd;   // (L,B,T,C) RMSNorm output; (L,B,T) 1/sqrt(mean(x^2) + eps)
    double *qkv;              // (L,B,T,(NH+2NKV)hd) the projections (+ bias), before RoPE
    double *qkvr;             // (L,B,T,(NH+2NKV)hd) q and k after RoPE, v as is
    double *att;              // (L,B,NH,T,T) probabilities, 0 above the diagonal
    double *atty;             // (L,B,T,NH hd) the heads' outputs side by side
    double *res_att;          // (L,B,T,C) h after the attention's residual
    double *ln2, *ln2_rstd;   // (L,B,T,C), (L,B,T)
    double *gateup;           // (L,B,T,2I) [gate | up]
    double *swiglu;           // (L,B,T,I) silu(gate) * up
    double *res_mlp;          // (L,B,T,C) the layer's output
    double *lnf, *lnf_rstd;   // (B,T,C) the final norm's output (the LM head's input), (B,T)
    double *lse;              // (B,T) log-sum-exp of each token's V logits
    double *token_loss;       // (B,T) lse - logit[target]; 0 for an ignored target
    double *rope_cos, *rope_sin;  // (T, hd/2)
    // the backward's
    double *d_lnf;            // (B,T,C) the loss's gradient at the final norm's output
    double *d_res, *d_ln, *d_atty, *d_qkv, *d_gateup, *d_swiglu, *d_logits;  // scratch
    char error[256];
} LlamaRef;

// Checks a config (positive sizes, even head_dim, NKV | NH, Vp >= V, eps and theta > 0, the
// scaling's factor >= 1 and 0 < low < high, original > 0); 0 or -1 with a message in err.
int llamaref_check_config(const LlamaRefConfig *config, char *err, size_t err_len);

// Allocates a model with every parameter 0; 0 or -1 with m->error.
int llamaref_build(LlamaRef *m, const LlamaRefConfig *config);
void llamaref_free(LlamaRef *m);

// Copies num_parameters floats (llmc/llama.h's flat buffer) into m->params.
void llamaref_set_params_f32(LlamaRef *m, const float *params);

// 1 for the matrices llmc/llama.h decays (embed, qkvw, attprojw, gateupw, downw, lm_head).
int llamaref_is_decayed(int tensor);

// RoPE's head_dim / 2 inverse frequencies of config (see above).
void llamaref_rope_inv_freq(const LlamaRefConfig *config, double *inv_freq);

// Forward on inputs (B,T) in [0,V) and targets in [0,V) or -100; sets m->loss (0 without any
// target). Checks the shape (T <= max_seq_len) and every id first.
int llamaref_forward(LlamaRef *m, const int *inputs, const int *targets, int B, int T);

// The gradient of the last forward's loss to every parameter, into m->grads; also m->d_lnf.
int llamaref_backward(LlamaRef *m);

#ifdef __cplusplus
}
#endif
#endif // LLAMA_REF_H
