/*
gpt2_ref.h - a CPU reference of llm.c's GPT-2 (forward, backward, AdamW) in plain C, for
checking the CUDA trainer and the PyTorch fixture (scripts/export_gpt2_debug.py) against a
third, independent computation. Written for clarity, not speed; the test-sized model of
the fixture (L 2, C 64, V 397, B*T 128) takes about 30 ms a training step at -O2.

The model: learned position embeddings; pre-LayerNorm blocks (eps 1e-5) of causal
multi-head attention with the fused qkv projection and a 4C MLP with tanh-approximated
GELU; a final LayerNorm; the LM head tied to wte, whose rows V..Vp-1 are padding (never a
target, outside the softmax, zero gradient). The loss is the mean cross-entropy over the
non-ignored targets (ignore_index -100). The LM head (loss, d_lnf, d_wte) is flce's own CPU
reference, flce_reference() of flce/flce_ref.c, so this file holds no second cross-entropy
and the trainer's head is checked against the same math the library is.

Precision: parameters and activations are float32, as in an fp32 trainer; every dot
product and every sum runs in double, and the backward carries the activation gradients
and accumulates the parameter gradients in double, rounding them to float32 once at the
end. Its results therefore sit within a few float32 roundings of the exact math of the
float32 model (about 1e-7 relative), below what any GPU implementation reaches.

Parameters live in one float array in llm.c's order (the layout of llm.c's model file and
of every gradient and optimizer buffer): wte (Vp,C), wpe (maxT,C), ln1w, ln1b (L,C),
qkvw (L,3C,C), qkvb (L,3C), attprojw (L,C,C), attprojb (L,C), ln2w, ln2b (L,C),
fcw (L,4C,C), fcb (L,4C), fcprojw (L,C,4C), fcprojb (L,C), lnfw (C), lnfb (C).

Typical use:
    GPT2Ref m;
    if (gpt2ref_load(&m, "model.bin") != 0) { fprintf(stderr, "%s\n", m.error); ... }
    for (int step = 1; ...; step++) {
        gpt2ref_forward(&m, x, y, B, T);          // m.loss
        gpt2ref_backward(&m);                     // m.grads, overwritten
        gpt2ref_update(&m, lr, 0.9f, 0.95f, 1e-8f, wd, 1.0f, step);
    }
    gpt2ref_free(&m);
Every call that can fail returns 0 on success and -1 with a message in m.error.
*/
#ifndef GPT2_REF_H
#define GPT2_REF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPT2REF_NUM_TENSORS 16
#define GPT2REF_MODEL_MAGIC 20240326   // llm.c's model file
#define GPT2REF_MODEL_VERSION 3        // fp32 parameters
#define GPT2REF_STATE_MAGIC 20240327   // llm.c's debug state
#define GPT2REF_STATE_VERSION 2
#define GPT2REF_MAX_RUNS 8
#define GPT2REF_IGNORE_INDEX -100

typedef struct {
    int max_seq_len;        // maxT: rows of wpe
    int vocab_size;         // V: real tokens
    int padded_vocab_size;  // Vp >= V: rows of wte
    int num_layers;         // L
    int num_heads;          // NH; C must be a multiple of it
    int channels;           // C
} GPT2RefConfig;

// "wte", "wpe", ... in parameter order, for messages
extern const char *const gpt2ref_tensor_names[GPT2REF_NUM_TENSORS];

typedef struct {
    GPT2RefConfig config;
    size_t tensor_sizes[GPT2REF_NUM_TENSORS];    // elements of each tensor
    size_t tensor_offsets[GPT2REF_NUM_TENSORS];  // its first element in params / grads
    size_t num_parameters;
    float *params;          // num_parameters, llm.c's order
    float *grads;           // written by gpt2ref_backward (overwritten, not accumulated)
    float *m, *v;           // AdamW moments, zero until the first update
    double loss;            // of the last forward
    int B, T;               // batch shape of the activations (0 before the first forward)
    int have_head_grads;    // forward ran and backward may use its head gradients
    // activations of the last forward, kept for the backward (float32, as a trainer has them)
    int *inputs, *targets;          // (B,T)
    float *encoded;                 // (B,T,C)  wte[x] + wpe[t]
    float *ln1, *qkv, *atty, *att;  // (L,B,T,C) (L,B,T,3C) (L,B,T,C) (L,B,NH,T,T) probabilities
    float *residual2, *ln2;         // (L,B,T,C) each
    float *fch, *fch_gelu;          // (L,B,T,4C) each
    float *residual3;               // (L,B,T,C)
    float *lnf;                     // (B,T,C)
    double *ln1_stats, *ln2_stats;  // (L,B,T,2): mean, 1/std
    double *lnf_stats;              // (B,T,2)
    // the LM head's gradients, which flce_reference computes with the loss in one pass
    double *d_lnf;                  // (B,T,C)
    double *d_wte_head;             // (Vp,C)
    // backward scratch
    double *grads64;                // num_parameters
    double *d_res, *d_ln, *d_atty, *d_qkv, *d_fch;  // (B,T,C) (B,T,C) (B,T,C) (B,T,3C) (B,T,4C)
    char error[256];
} GPT2Ref;

// Checks a config (positive sizes, C % NH == 0, Vp >= V); 0 or -1 with a message in err.
int gpt2ref_check_config(const GPT2RefConfig *config, char *err, size_t err_len);

// Allocates a model of this config with every parameter 0 (fill m->params yourself).
int gpt2ref_build(GPT2Ref *m, const GPT2RefConfig *config);

// Reads an llm.c model file (version 3: fp32); checks the header, the config and the exact
// file size. On failure m holds no memory and m->error says what is wrong.
int gpt2ref_load(GPT2Ref *m, const char *path);

void gpt2ref_free(GPT2Ref *m);

// 1 for the tensors llm.c decays (wte, wpe, qkvw, attprojw, fcw, fcprojw), else 0.
int gpt2ref_is_decayed(int tensor);

// Forward on inputs (B,T) in [0,V) and targets (B,T) in [0,V) or -100 (ignored); sets
// m->loss (mean over the non-ignored targets; 0 if there are none). B*T and T <= maxT are
// checked, and every token id before anything is computed.
int gpt2ref_forward(GPT2Ref *m, const int *inputs, const int *targets, int B, int T);

// Gradient of the last forward's loss with respect to every parameter, into m->grads.
int gpt2ref_backward(GPT2Ref *m);

// sqrt(sum of grads^2) over every parameter (padding rows included), in double.
double gpt2ref_grad_norm(const GPT2Ref *m);

// One AdamW step of llm.c's gpt2_update at step t (1-based), after global-norm clipping:
//   s = grad_clip / norm if grad_clip > 0 and norm > grad_clip, else 1
//   m = b1 m + (1 - b1) s g,  v = b2 v + (1 - b2) (s g)^2
//   p -= lr * ((m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
// with wd = weight_decay on the tensors of gpt2ref_is_decayed and 0 on the others.
// Returns the unclipped norm.
double gpt2ref_update(GPT2Ref *m, float lr, float beta1, float beta2, float eps,
                      float weight_decay, float grad_clip, int t);

// Zeroes the AdamW moments, to start a new run.
void gpt2ref_reset_optimizer(GPT2Ref *m);

/*
The debug state written by scripts/export_gpt2_debug.py (file format documented there):
one batch, PyTorch's loss and gradients for it, and the losses and gradient norms of
n_runs AdamW runs of n_steps steps on it (one run's final parameters too).
*/
typedef struct {
    int B, T;
    size_t num_parameters;
    int n_steps, n_runs;
    int final_params_run;           // -1 if no final parameters are stored
    float lr, beta1, beta2, eps, grad_clip;
    float weight_decay[GPT2REF_MAX_RUNS];
    int *x, *y;                     // (B,T)
    float loss;
    float *grads;                   // num_parameters
    float *losses, *norms;          // (n_runs, n_steps)
    float *final_params;            // num_parameters, or NULL
    char error[256];
} GPT2RefState;

// Reads a debug state for model m: checks the header against m's size and maxT, the exact
// file size, and every token id against V. On failure s holds no memory.
int gpt2ref_state_load(GPT2RefState *s, const char *path, const GPT2Ref *m);
void gpt2ref_state_free(GPT2RefState *s);

#ifdef __cplusplus
}
#endif
#endif // GPT2_REF_H
