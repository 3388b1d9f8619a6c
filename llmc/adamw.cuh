/*
adamw.cuh - the AdamW step of llm.c / test/gpt2_ref.c, for one parameter tensor of n elements:

  g    = grads * grad_scale                  (grad_scale: e.g. the clipping factor)
  m    = beta1 m + (1 - beta1) g
  v    = beta2 v + (1 - beta2) g^2
  p   -= lr * ( (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * p )

p is the fp32 master weight when `master` is given (then master = the new value, and the bf16
params get it stochastically rounded); without master, p is the bf16 param widened and the
result is rounded to nearest back into params. The decay term is skipped when weight_decay
== 0 (the caller passes 0 for the 1-D tensors: biases, LayerNorm weights).

Why stochastic rounding: an update smaller than half a bf16 ulp of the weight would be lost
every step with round-to-nearest; rounding up with probability (distance to the lower bf16)
/ ulp keeps the bf16 weights unbiased. The random bits come from a counter-based hash of
(seed, element index), so a step is reproducible given the seed; pass a different seed per
tensor and step (e.g. hash of step and tensor number).

Every fp32 operation uses an explicitly rounded intrinsic (__fmul_rn, __fadd_rn, ...): nvcc
would otherwise fuse some multiply-adds, and then a CPU loop could not reproduce the result
bit for bit (the test does exactly that). The cost is nil: the kernel is memory bound.

adamw_update_multi steps many tensors of the same flat buffers in one launch (a table of
offset, size, decay and seed per tensor, passed by value), with the same per-element code and
hence bitwise the same results as one adamw_update per tensor: the trainer's 16 tensors
otherwise cost 16 launches, most of them too small to fill the GPU. An entry may also be part
of a tensor whose optimizer state lives elsewhere (ZeRO-1, llmc/zero.h: a rank keeps master,
m and v of its slice of the flat vector only): state_offset places it in master, m and v, and
index0, its first element's index within the whole tensor, keeps each element's random bits
those of the unsliced update.

The moments m and v are fp32 or bf16 (the trainer's -bm 1: half their memory, 4 bytes per
parameter instead of 8; Llama-3.1-8B then fits one H200), the moment type TM a template
parameter of the kernels and their launchers (float or floatX; the pointer's type picks it).
The fp32 instantiation's operations are those of the fp32-only kernels before it (the same
machine code). With bf16 moments each element's m and v
are widened to fp32, the step is the same fp32 arithmetic (the weight's update uses the fp32 m
and v of this step), and the new m and v are stored rounded to bf16 stochastically, with 16
random bits each from adamw_moment_hash(seed, index): the parameter's hash on another stream
(index + 2^63), so independent of the parameter's rounding, and the same under ZeRO-1's
slicing (the index within the tensor, as the parameter's).

Why stochastic rounding for the moments: a bf16 moment has 8 significant bits (a spacing of
0.4-0.8% of its value), and with round-to-nearest an update smaller than half that spacing
is lost, every step. m moves by (1 - beta1)(g - m) and v by (1 - beta2)(g^2 - v): with the
trainer's beta2 = 0.95, v would stop following g^2 once they differ by less than 4-8%, and
with beta2 = 0.999 v could never decay by its 0.1% a step (g -> 0) at all: a biased,
stalling optimizer state. Rounded stochastically, each stored moment is the fp32 recursion's
value in expectation, at a cost of under one bf16 spacing of noise per step (under 0.8% of
m, 0.4% of sqrt(v)), far below the gradient's own. llm.q (IST-DASLab/llmq, src/kernels/adamw.cu)
does the same for its bf16 v and bf16/fp8 m (its random bits: rotations of the parameter's for
v, and a fixed seed for m), as does an llm.c-derived AdamW with bf16 `floatOpt` moments (m and
v from rotations of the parameter's bits); here the moments' bits are a separate stream of the
hash, uncorrelated with the parameter's and changing with each step's seed.
*/
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include <math.h>
#include <string.h>

#include "cuda_common.cuh"

// the per-step constants, computed once on the host (the bias corrections in double)
typedef struct {
    float lr, beta1, one_minus_beta1, beta2, one_minus_beta2;
    float bias_correction1, bias_correction2;  // 1 - beta^t
    float eps, weight_decay;
} AdamWConsts;

static inline AdamWConsts adamw_consts(float lr, float beta1, float beta2, int t, float eps, float weight_decay) {
    AdamWConsts k;
    k.lr = lr;
    k.beta1 = beta1;
    k.one_minus_beta1 = 1.0f - beta1;
    k.beta2 = beta2;
    k.one_minus_beta2 = 1.0f - beta2;
    k.bias_correction1 = (float)(1.0 - pow((double)beta1, (double)t));
    k.bias_correction2 = (float)(1.0 - pow((double)beta2, (double)t));
    k.eps = eps;
    k.weight_decay = weight_decay;
    return k;
}

// 32 random bits from (seed, index): the splitmix64 finaliser of index + golden * (seed + 1),
// i.e. seed selects a far-apart start of one splitmix64 sequence. Host and device alike.
__host__ __device__ static inline uint32_t adamw_sr_hash(unsigned int seed, size_t idx) {
    uint64_t x = (uint64_t)idx + 0x9E3779B97F4A7C15ull * ((uint64_t)seed + 1ull);
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (uint32_t)x;
}

// The moments' random bits (bf16 moments): the same hash at index + 2^63, a stream that no
// parameter index reaches, so independent of the parameter's bits; m takes the low 16 bits, v
// the high 16. Host and device alike.
#define ADAMW_MOMENT_STREAM 0x8000000000000000ull
__host__ __device__ static inline uint32_t adamw_moment_hash(unsigned int seed, size_t idx) {
    return adamw_sr_hash(seed, (size_t)((uint64_t)idx + ADAMW_MOMENT_STREAM));
}

// bf16 bits of x rounded stochastically with 16 random bits: adding r in [0, 2^16) to the
// fp32 bits and truncating rounds the magnitude up with probability (low 16 bits) / 2^16.
// NaN stays a (quiet) NaN; infinities stay; values within a rounding of the largest finite
// bf16 may round up to infinity, as they can with round-to-nearest.
__host__ __device__ static inline uint16_t adamw_sr_bf16_bits(float x, uint32_t r) {
    uint32_t u;
#ifdef __CUDA_ARCH__
    u = __float_as_uint(x);
#else
    memcpy(&u, &x, sizeof(u));
#endif
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += r & 0xffffu;
    return (uint16_t)(u >> 16);
}

// The step of one element from its loaded values g (the unscaled gradient), m, v and p (the
// weight: master or widened bf16): the new m, v and weight. The single-tensor and the
// multi-tensor kernels share it, so that both give the same bits.
static __device__ __forceinline__ void adamw_math(float grad, float &m, float &v, float p, float &pn,
                                                  const AdamWConsts &k, float weight_decay, float scale) {
    const float g = __fmul_rn(grad, scale);
    m = __fadd_rn(__fmul_rn(k.beta1, m), __fmul_rn(k.one_minus_beta1, g));
    v = __fadd_rn(__fmul_rn(k.beta2, v), __fmul_rn(k.one_minus_beta2, __fmul_rn(g, g)));
    const float mhat = __fdiv_rn(m, k.bias_correction1);
    const float vhat = __fdiv_rn(v, k.bias_correction2);
    float step = __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), k.eps));
    if (weight_decay != 0.0f) step = __fadd_rn(step, __fmul_rn(weight_decay, p));
    pn = __fsub_rn(p, __fmul_rn(k.lr, step));
}

// the bf16 parameter of the new weight pn: stochastically rounded from the master weight
// (hashed by seed and the element's index i within its tensor), or to nearest without one
static __device__ __forceinline__ floatX adamw_param(float pn, int has_master, unsigned int seed, size_t i) {
    return has_master ? __ushort_as_bfloat16(adamw_sr_bf16_bits(pn, adamw_sr_hash(seed, i))) : __float2bfloat16_rn(pn);
}

// A moment as fp32: fp32 as is, bf16 widened (exact)
static __device__ __forceinline__ float adamw_moment_load(const float *p) { return *p; }
static __device__ __forceinline__ float adamw_moment_load(const floatX *p) { return __bfloat162float(*p); }

// The new m and v of the element of index i within its tensor (hashed with seed): fp32 as
// they are; bf16 rounded stochastically with the two halves of adamw_moment_hash's bits
static __device__ __forceinline__ void adamw_moments_store(float *m, float *v, float mi, float vi, unsigned int seed,
                                                           size_t i) {
    (void)seed;
    (void)i;
    *m = mi;
    *v = vi;
}
static __device__ __forceinline__ void adamw_moments_store(floatX *m, floatX *v, float mi, float vi, unsigned int seed,
                                                           size_t i) {
    const uint32_t r = adamw_moment_hash(seed, i);
    *m = __ushort_as_bfloat16(adamw_sr_bf16_bits(mi, r));
    *v = __ushort_as_bfloat16(adamw_sr_bf16_bits(vi, r >> 16));
}

// TM: the moments' type, float or floatX (bf16)
template <typename TM>
static __global__ void adamw_kernel(floatX *params, float *master, const float *grads, TM *m, TM *v,
                                    size_t n, AdamWConsts k, float grad_scale, const float *grad_scale_dev,
                                    unsigned int seed) {
    const float scale = grad_scale_dev != NULL ? __fmul_rn(grad_scale, *grad_scale_dev) : grad_scale;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float mi = adamw_moment_load(m + i), vi = adamw_moment_load(v + i), pn;
        adamw_math(grads[i], mi, vi, master != NULL ? master[i] : __bfloat162float(params[i]), pn, k,
                   k.weight_decay, scale);
        adamw_moments_store(m + i, v + i, mi, vi, seed, i);
        if (master != NULL) master[i] = pn;
        params[i] = adamw_param(pn, master != NULL, seed, i);
    }
}

// As adamw_update, with the gradient scale multiplied by *grad_scale_dev when that is not NULL:
// the clipping factor computed on the device by clip_scale (global_norm.cuh) is used without
// a host synchronisation.
template <typename TM>
static inline void adamw_update_scaled(floatX *params, float *master, const float *grads, TM *m, TM *v,
                                       size_t n, float lr, float beta1, float beta2, int t, float eps,
                                       float weight_decay, float grad_scale, const float *grad_scale_dev,
                                       unsigned int seed, cudaStream_t s) {
    if (t < 1) {
        fprintf(stderr, "[adamw] step t = %d, must be >= 1\n", t);
        exit(EXIT_FAILURE);
    }
    if (n == 0) return;
    const AdamWConsts k = adamw_consts(lr, beta1, beta2, t, eps, weight_decay);
    const int block = 256;
    size_t grid = llmc_ceil_div(n, block);
    if (grid > 132 * 32) grid = 132 * 32;  // grid-stride loop over the rest
    adamw_kernel<<<(unsigned)grid, block, 0, s>>>(params, master, grads, m, v, n, k, grad_scale,
                                                   grad_scale_dev, seed);
    cudaLaunchCheck("adamw_kernel");
}

// One AdamW step (t >= 1, counted from 1) over n elements: params (bf16, =), master (fp32, =, or
// NULL), m, v (fp32 or bf16, updated in place), grads (fp32, read; scaled by grad_scale first).
template <typename TM>
static inline void adamw_update(floatX *params, float *master, const float *grads, TM *m, TM *v, size_t n,
                                float lr, float beta1, float beta2, int t, float eps, float weight_decay,
                                float grad_scale, unsigned int seed, cudaStream_t s) {
    adamw_update_scaled(params, master, grads, m, v, n, lr, beta1, beta2, t, eps, weight_decay, grad_scale,
                        NULL, seed, s);
}

// --- all tensors in one launch -----------------------------------------------------------------

#define ADAMW_MAX_TENSORS 32
#define ADAMW_MULTI_BLOCK 256
#define ADAMW_MULTI_ITEMS 8  // elements per thread: a block covers 2048 consecutive elements

// One tensor (or part of one) of a multi-tensor step: its elements [offset, offset + numel) of
// the flat params and grads, [state_offset, state_offset + numel) of master, m and v (the
// same as offset when they are as long as params), its weight decay (0: none), its
// stochastic-rounding seed and the index within its tensor of its first element (0 for a
// whole tensor): element k is hashed as index0 + k.
typedef struct {
    size_t offset, numel;
    float weight_decay;
    unsigned int seed;
    size_t state_offset, index0;
} AdamWTensor;

// The kernel's table, passed by value (under 1.5 KiB of the 4 KiB of parameters): tensor t
// owns blocks [first_block[t], first_block[t + 1]).
typedef struct {
    int n;
    unsigned int first_block[ADAMW_MAX_TENSORS + 1];
    AdamWTensor t[ADAMW_MAX_TENSORS];
} AdamWTable;

// ADAMW_MULTI_ITEMS consecutive elements move with 16-byte accesses (cuda_util.cuh's load8 and
// store8 as fp32; a stored bf16 is given as bits)
static __device__ __forceinline__ void adamw_store8_bits(floatX *p, const uint16_t (&b)[8]) {
    Packed128<floatX> a;
#pragma unroll
    for (int j = 0; j < 8; j++) a[j] = __ushort_as_bfloat16(b[j]);
    store128(p, a);
}
// the new moments of 8 consecutive elements, the first of index i within its tensor, as
// adamw_moments_store stores them one by one
static __device__ __forceinline__ void adamw_moments_store8(float *m, float *v, const float (&mi)[8],
                                                            const float (&vi)[8], unsigned int, size_t) {
    store8(m, mi);
    store8(v, vi);
}
static __device__ __forceinline__ void adamw_moments_store8(floatX *m, floatX *v, const float (&mi)[8],
                                                            const float (&vi)[8], unsigned int seed, size_t i) {
    uint16_t mb[8], vb[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const uint32_t r = adamw_moment_hash(seed, i + j);
        mb[j] = adamw_sr_bf16_bits(mi[j], r);
        vb[j] = adamw_sr_bf16_bits(vi[j], r >> 16);
    }
    adamw_store8_bits(m, mb);
    adamw_store8_bits(v, vb);
}

// Block b finds its tensor, then covers that tensor's elements [j * 2048, (j + 1) * 2048) for
// its block number j within the tensor. Where the block's 2048 elements are all in the entry
// and every array's first element of them is 16-byte aligned (every block of the trainer's
// tensors, whose sizes are multiples of 8, but each one's last), each thread takes 8
// consecutive elements with 16-byte loads and stores (with bf16 moments the element-wise
// accesses held the kernel at 2.8 TB/s, these 3.4 at Qwen2.5-1.5B's parameters); otherwise (an
// entry's last, partial block, a ZeRO-1 slice cut at an odd element) thread by
// thread at a stride of the block, loading all its elements before it computes and stores any,
// so that its loads are in flight together (the stores could alias the loads of a later element
// for all the compiler knows). Each element gets adamw_math with the tensor's decay and seed
// and its index within the tensor (index0 + its index in the entry): the same bits as
// adamw_update on that tensor alone, in either path, any launch shape, and however the tensor
// is cut into entries.
static_assert(ADAMW_MULTI_ITEMS == 8, "adamw_multi_kernel's vector path moves 8 elements a thread");
template <typename TM>
static __global__ void __launch_bounds__(ADAMW_MULTI_BLOCK)
    adamw_multi_kernel(floatX *params, float *master, const float *grads, TM *m, TM *v, AdamWTable tab,
                       AdamWConsts k, float grad_scale, const float *grad_scale_dev) {
    const float scale = grad_scale_dev != NULL ? __fmul_rn(grad_scale, *grad_scale_dev) : grad_scale;
    int t = 0;
    while (t + 1 < tab.n && blockIdx.x >= tab.first_block[t + 1]) t++;
    const size_t o = tab.t[t].offset, n = tab.t[t].numel, so = tab.t[t].state_offset, i0 = tab.t[t].index0;
    const float wd = tab.t[t].weight_decay;
    const unsigned int seed = tab.t[t].seed;
    const size_t base = (size_t)(blockIdx.x - tab.first_block[t]) * (ADAMW_MULTI_BLOCK * ADAMW_MULTI_ITEMS);
    const uintptr_t misaligned = (uintptr_t)(params + o + base) | (uintptr_t)(grads + o + base) |
                                 (uintptr_t)(m + so + base) | (uintptr_t)(v + so + base) |
                                 (master != NULL ? (uintptr_t)(master + so + base) : 0);
    float g[ADAMW_MULTI_ITEMS], mi[ADAMW_MULTI_ITEMS], vi[ADAMW_MULTI_ITEMS], p[ADAMW_MULTI_ITEMS];
    if (base + ADAMW_MULTI_BLOCK * ADAMW_MULTI_ITEMS <= n && (misaligned & 15) == 0) {
        const size_t e = base + (size_t)threadIdx.x * ADAMW_MULTI_ITEMS;  // the thread's first element
        load8(g, grads + o + e);
        load8(mi, m + so + e);
        load8(vi, v + so + e);
        if (master != NULL) load8(p, master + so + e);
        else load8(p, params + o + e);
        float pn[ADAMW_MULTI_ITEMS];
        uint16_t pb[ADAMW_MULTI_ITEMS];
#pragma unroll
        for (int j = 0; j < ADAMW_MULTI_ITEMS; j++) {
            adamw_math(g[j], mi[j], vi[j], p[j], pn[j], k, wd, scale);
            pb[j] = __bfloat16_as_ushort(adamw_param(pn[j], master != NULL, seed, i0 + e + j));
        }
        adamw_moments_store8(m + so + e, v + so + e, mi, vi, seed, i0 + e);
        if (master != NULL) store8(master + so + e, pn);
        adamw_store8_bits(params + o + e, pb);
        return;
    }
#pragma unroll
    for (int it = 0; it < ADAMW_MULTI_ITEMS; it++) {
        const size_t i = base + (size_t)it * ADAMW_MULTI_BLOCK + threadIdx.x;
        if (i < n) {
            g[it] = grads[o + i];
            mi[it] = adamw_moment_load(m + so + i);
            vi[it] = adamw_moment_load(v + so + i);
            p[it] = master != NULL ? master[so + i] : __bfloat162float(params[o + i]);
        }
    }
#pragma unroll
    for (int it = 0; it < ADAMW_MULTI_ITEMS; it++) {
        const size_t i = base + (size_t)it * ADAMW_MULTI_BLOCK + threadIdx.x;
        if (i < n) {
            float pn;
            adamw_math(g[it], mi[it], vi[it], p[it], pn, k, wd, scale);
            adamw_moments_store(m + so + i, v + so + i, mi[it], vi[it], seed, i0 + i);
            if (master != NULL) master[so + i] = pn;
            params[o + i] = adamw_param(pn, master != NULL, seed, i0 + i);
        }
    }
}

// One AdamW step (t >= 1) over n_tensors tensors of the flat buffers params (bf16), master (fp32
// or NULL), grads (fp32), m, v (TM: fp32 or bf16), in one launch: tensors[i] gives each one's
// ranges, weight decay, seed and first index. The per-tensor constants are those of
// adamw_update_scaled; the result is bitwise that of one adamw_update_scaled call per whole
// tensor (with tensor i's pointers at offset, its decay and seed), the entries of a cut tensor
// together giving that tensor's. grad_scale_dev as adamw_update_scaled (NULL: none). Ranges
// must not overlap.
template <typename TM>
static inline void adamw_update_multi(floatX *params, float *master, const float *grads, TM *m, TM *v,
                                      const AdamWTensor *tensors, int n_tensors, float lr, float beta1, float beta2,
                                      int t, float eps, float grad_scale, const float *grad_scale_dev,
                                      cudaStream_t s) {
    if (t < 1) {
        fprintf(stderr, "[adamw] step t = %d, must be >= 1\n", t);
        exit(EXIT_FAILURE);
    }
    require(n_tensors >= 0 && n_tensors <= ADAMW_MAX_TENSORS, "adamw_update_multi: at most ADAMW_MAX_TENSORS tensors");
    AdamWTable tab;
    memset(&tab, 0, sizeof(tab));
    const size_t per_block = (size_t)ADAMW_MULTI_BLOCK * ADAMW_MULTI_ITEMS;
    size_t blocks = 0;
    for (int i = 0; i < n_tensors; i++) {
        tab.t[tab.n] = tensors[i];
        tab.first_block[tab.n] = (unsigned int)blocks;
        if (tensors[i].numel == 0) continue;  // no blocks: the search never stops at it
        blocks += llmc_ceil_div(tensors[i].numel, per_block);
        require(blocks <= 0x7fffffffu, "adamw_update_multi: too many elements for one launch");
        tab.n++;
    }
    tab.first_block[tab.n] = (unsigned int)blocks;
    if (blocks == 0) return;
    // weight_decay here is a placeholder: each tensor's own is passed to adamw_math
    const AdamWConsts k = adamw_consts(lr, beta1, beta2, t, eps, 0.0f);
    adamw_multi_kernel<<<(unsigned)blocks, ADAMW_MULTI_BLOCK, 0, s>>>(params, master, grads, m, v, tab, k, grad_scale,
                                                                      grad_scale_dev);
    cudaLaunchCheck("adamw_multi_kernel");
}

#endif // LLMC_ADAMW_CUH
