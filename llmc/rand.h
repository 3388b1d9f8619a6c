/*
rand.h - PyTorch's CPU random number generator, reproduced bit for bit, plus llm.c's
permutation helpers (used by the data loader's shuffling).

The point is that a model initialised here equals one initialised in PyTorch with
torch.manual_seed(seed) followed by the same sequence of torch.empty(n).normal_(mean, std)
/ torch.rand(n) calls on the CPU. test/test_llmc.c checks that against values PyTorch wrote
(test/fixtures/rand_torch.bin, from scripts/export_rand_fixture.py).

What PyTorch does (ATen: CPUGeneratorImpl, DistributionsHelper.h, cpu/DistributionTemplates.h,
cpu/avx_mathfun.h):
  - the engine is the standard 32-bit mt19937, seeded with the low 32 bits of the seed;
    random64() is two draws, the first one being the high half.
  - a float uniform in [0, 1) is (draw & (2^24 - 1)) * 2^-24; a double one uses 53 bits
    of random64(). uniform_(from, to) computes u * (to - from) + from in float.
  - normal_ on a contiguous float tensor with n >= 16: first n uniform floats, then a
    Box-Muller transform over each block of 16 in place (u1 = 1 - data[i], u2 = data[i+8]
    give data[i] = r cos(theta) and data[i+8] = r sin(theta), i = 0..7); if n % 16 != 0,
    16 fresh uniforms overwrite the last 16 elements, which are transformed again.
  - normal_ with n < 16: the scalar double path, one Box-Muller pair per two values from
    two 53-bit uniforms (theta from the first, the radius from log1p(-second)), the sine
    half cached *in the generator* for the next value, even across calls; the cache is
    cleared by manual_seed. Each value is (double)z * std + mean rounded to float.
The n >= 16 transform depends on the CPU kernel PyTorch picked at run time:
  - TORCH_CPU_KERNEL_AVX2: any x86-64 CPU with AVX2, including AVX-512 ones (PyTorch
    registers no AVX-512 normal kernel and falls back to the AVX2 one). log, sin and cos
    are avx_mathfun's Cephes polynomials, with the multiply-adds that GCC fused when it
    compiled PyTorch (-mfma, -ffp-contract=fast); uniform_(from, to) is also fused there.
  - TORCH_CPU_KERNEL_DEFAULT: ATEN_CPU_CAPABILITY=default (and CPUs without AVX2). libm
    logf/sinf/cosf (glibc's, which are correctly rounded in practice) with a fused final
    multiply-add; uniform_ unfused.
Every fused operation below is an explicit fmaf()/fma(), and no plain a * b + c remains
whose rounding could change, so -ffp-contract in the including translation unit does not
matter. The llm.c C port uses libm with unfused arithmetic and float math in the n < 16
path, so it matches neither kernel exactly; this file matches both.

mt19937_state keeps llm.c's field layout (it is written into llm.c's state files, see
mt19937_serialize) plus PyTorch's cached normal sample.
*/
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MT19937_N 624
#define MT19937_M 397
#define MT19937_MATRIX_A 0x9908b0dfu
#define MT19937_UPPER_MASK 0x80000000u
#define MT19937_LOWER_MASK 0x7fffffffu
// bytes of llm.c's struct mt19937_state: u64 seed, i32 left, u32 next, u32 state[624], u32 MATRIX_A[2]
#define MT19937_SERIALIZED_BYTES (8 + 4 + 4 + 4 * MT19937_N + 8)

typedef struct {
    uint64_t seed;
    int32_t left;                  // draws left before the state is regenerated (+1)
    uint32_t next;                 // index of the next state word to temper
    uint32_t state[MT19937_N];
    uint32_t matrix_a[2];          // {0, MT19937_MATRIX_A}, kept for llm.c's layout
    int has_next_normal;           // PyTorch's cached second Box-Muller value (n < 16 path)
    double next_normal;
} mt19937_state;

typedef enum {
    TORCH_CPU_KERNEL_AVX2 = 0,     // x86-64 with AVX2 or AVX-512: what PyTorch normally runs
    TORCH_CPU_KERNEL_DEFAULT = 1,  // ATEN_CPU_CAPABILITY=default
} TorchCpuKernel;

static inline void manual_seed(mt19937_state *rng, uint64_t seed) {
    rng->seed = seed;
    rng->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (uint32_t j = 1; j < MT19937_N; j++)
        rng->state[j] = 1812433253u * (rng->state[j - 1] ^ (rng->state[j - 1] >> 30)) + j;
    rng->left = 1;  // the first draw regenerates the state
    rng->next = 0;
    rng->matrix_a[0] = 0;
    rng->matrix_a[1] = MT19937_MATRIX_A;
    rng->has_next_normal = 0;
    rng->next_normal = 0.0;
}

static inline uint32_t mt19937_twist_(uint32_t a, uint32_t b, uint32_t m) {
    uint32_t y = (a & MT19937_UPPER_MASK) | (b & MT19937_LOWER_MASK);
    return m ^ (y >> 1) ^ ((y & 1u) ? MT19937_MATRIX_A : 0u);
}

static inline void mt19937_regenerate_(mt19937_state *rng) {
    uint32_t *s = rng->state;
    int j;
    for (j = 0; j < MT19937_N - MT19937_M; j++) s[j] = mt19937_twist_(s[j], s[j + 1], s[j + MT19937_M]);
    for (; j < MT19937_N - 1; j++) s[j] = mt19937_twist_(s[j], s[j + 1], s[j + MT19937_M - MT19937_N]);
    s[MT19937_N - 1] = mt19937_twist_(s[MT19937_N - 1], s[0], s[MT19937_M - 1]);
    rng->left = MT19937_N;
    rng->next = 0;
}

// One 32-bit draw (PyTorch's generator->random()).
static inline uint32_t randint32(mt19937_state *rng) {
    if (--rng->left <= 0) mt19937_regenerate_(rng);
    uint32_t y = rng->state[rng->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

// PyTorch's random64(): the first draw is the high half.
static inline uint64_t randint64(mt19937_state *rng) {
    uint64_t hi = randint32(rng);
    uint64_t lo = randint32(rng);
    return (hi << 32) | lo;
}

// One element of torch.rand: uniform float in [0, 1) with 24 random bits (exact product).
static inline float randfloat32(mt19937_state *rng) {
    return (float)(randint32(rng) & 0xffffffu) * (1.0f / 16777216.0f);
}

// Uniform double in [0, 1) with 53 random bits.
static inline double randfloat64(mt19937_state *rng) {
    return (double)(randint64(rng) & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// torch.empty(n).uniform_(from, to) on the CPU.
static inline void uniform_with_kernel_(float *data, size_t n, float from, float to,
                                        mt19937_state *rng, TorchCpuKernel kernel) {
    float range = to - from;
    for (size_t i = 0; i < n; i++) {
        float u = randfloat32(rng);
        if (kernel == TORCH_CPU_KERNEL_AVX2) {
            data[i] = fmaf(u, range, from);
        } else {
            // unfused: the float product, rounded once (the double product of two floats is
            // exact), then the add; written so that no compiler can fuse it
            float product = (float)((double)u * (double)range);
            data[i] = product + from;
        }
    }
}

static inline void uniform_(float *data, size_t n, float from, float to, mt19937_state *rng) {
    uniform_with_kernel_(data, n, from, to, rng, TORCH_CPU_KERNEL_AVX2);
}

// ----------------------------------------------------------------------------
// avx_mathfun (Cephes) log and sincos, one lane at a time

static inline float rand_bits_to_float_(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint32_t rand_float_to_bits_(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

// log256_ps for x > 0 (u1 = 1 - uniform lies in (0, 1], so the NaN/denormal lanes never occur)
static inline float cephes_logf_(float x) {
    uint32_t bits = rand_float_to_bits_(x);
    if (bits < 0x00800000u) bits = 0x00800000u;  // max(x, smallest normal)
    int exponent = (int)(bits >> 23) - 0x7f;
    x = rand_bits_to_float_((bits & ~0x7f800000u) | 0x3f000000u);  // mantissa in [0.5, 1)
    float e = (float)exponent + 1.0f;
    if (x < 0.707106781186547524f) {  // sqrt(1/2)
        e = e - 1.0f;
        x = (x - 1.0f) + x;
    } else {
        x = x - 1.0f;
    }
    float z = x * x;
    float y = fmaf(7.0376836292e-2f, x, -1.1514610310e-1f);
    y = fmaf(y, x, 1.1676998740e-1f);
    y = fmaf(y, x, -1.2420140846e-1f);
    y = fmaf(y, x, 1.4249322787e-1f);
    y = fmaf(y, x, -1.6668057665e-1f);
    y = fmaf(y, x, 2.0000714765e-1f);
    y = fmaf(y, x, -2.4999993993e-1f);
    y = fmaf(y, x, 3.3333331174e-1f);
    y = y * x;
    y = fmaf(y, z, e * -2.12194440e-4f);
    y = fmaf(-z, 0.5f, y);
    return fmaf(e, 0.693359375f, x + y);
}

// sincos256_ps
static inline void cephes_sincosf_(float x, float *sin_out, float *cos_out) {
    uint32_t sign_sin = rand_float_to_bits_(x) & 0x80000000u;
    x = fabsf(x);
    float y = x * 1.27323954473516f;  // 4 / pi
    int32_t j = (int32_t)y;
    j = (j + 1) & ~1;
    y = (float)j;
    uint32_t swap_sign_sin = ((uint32_t)j & 4u) << 29;
    int use_sin_poly_for_sin = (j & 2) == 0;
    uint32_t sign_cos = (~(uint32_t)(j - 2) & 4u) << 29;
    sign_sin ^= swap_sign_sin;
    // extended precision modular arithmetic: x = ((x - y DP1) - y DP2) - y DP3
    x = fmaf(y, -0.78515625f, x);
    x = fmaf(y, -2.4187564849853515625e-4f, x);
    x = fmaf(y, -3.77489497744594108e-8f, x);
    float z = x * x;
    float cos_poly = fmaf(2.443315711809948e-5f, z, -1.388731625493765e-3f);
    cos_poly = fmaf(cos_poly, z, 4.166664568298827e-2f);
    cos_poly = cos_poly * z;
    cos_poly = fmaf(cos_poly, z, -(z * 0.5f));
    cos_poly = cos_poly + 1.0f;
    float sin_poly = fmaf(-1.9515295891e-4f, z, 8.3321608736e-3f);
    sin_poly = fmaf(sin_poly, z, -1.6666654611e-1f);
    sin_poly = sin_poly * z;
    sin_poly = fmaf(sin_poly, x, x);
    // the vector code blends with masks and adds +0.0f to the lane it keeps
    float s = use_sin_poly_for_sin ? 0.0f + sin_poly : cos_poly + 0.0f;
    float c = use_sin_poly_for_sin ? cos_poly + 0.0f : 0.0f + sin_poly;
    *sin_out = rand_bits_to_float_(rand_float_to_bits_(s) ^ sign_sin);
    *cos_out = rand_bits_to_float_(rand_float_to_bits_(c) ^ sign_cos);
}

// Box-Muller over 16 uniforms in place (normal_fill_16_AVX2 / normal_fill_16)
static inline void normal_fill_16_(float *data, float mean, float std, TorchCpuKernel kernel) {
    for (int i = 0; i < 8; i++) {
        float u1 = 1.0f - data[i];  // [0, 1) -> (0, 1] for the log
        float u2 = data[i + 8];
        float sin_theta, cos_theta, radius;
        if (kernel == TORCH_CPU_KERNEL_AVX2) {
            radius = sqrtf(-2.0f * cephes_logf_(u1));
            float theta = (float)(2.0 * 3.14159265358979323846) * u2;
            cephes_sincosf_(theta, &sin_theta, &cos_theta);
        } else {
            radius = sqrtf(-2.0f * logf(u1));
            float theta = (float)(2.0 * 3.14159265358979323846 * (double)u2);
            sin_theta = sinf(theta);
            cos_theta = cosf(theta);
        }
        data[i] = fmaf(radius * cos_theta, std, mean);
        data[i + 8] = fmaf(radius * sin_theta, std, mean);
    }
}

// torch.empty(n).normal_(mean, std) on the CPU (float32, contiguous).
// The transform of blocks [b0, b1) of 16 values, for normal_fill_blocks_'s threads.
typedef struct {
    float *data;
    size_t b0, b1;
    float mean, std;
    TorchCpuKernel kernel;
} NormalBlocks;

static inline void *normal_fill_blocks_run_(void *arg) {
    const NormalBlocks *w = (const NormalBlocks *)arg;
    for (size_t b = w->b0; b < w->b1; b++) normal_fill_16_(w->data + 16 * b, w->mean, w->std, w->kernel);
    return NULL;
}

// normal_fill_16_ over the nb blocks of data. Each block depends on its own 16 uniforms only,
// so the blocks of a large tensor are cut among NORMAL_THREADS threads: the values are the
// same whichever thread computes them (the log and sincos of the transform are ~7x the cost
// of drawing the uniforms, which stays one sequential stream, as PyTorch's). Below
// NORMAL_THREAD_BLOCKS blocks, or if a thread cannot start, the calling thread does the rest.
#define NORMAL_THREADS 16
#define NORMAL_THREAD_BLOCKS ((size_t)1 << 16)
static inline void normal_fill_blocks_(float *data, size_t nb, float mean, float std, TorchCpuKernel kernel) {
    NormalBlocks w[NORMAL_THREADS];
    pthread_t tid[NORMAL_THREADS];
    int started[NORMAL_THREADS] = {0};
    const int nt = nb >= NORMAL_THREAD_BLOCKS ? NORMAL_THREADS : 1;
    for (int t = 0; t < nt; t++) {
        w[t].data = data;
        w[t].b0 = nb * (size_t)t / (size_t)nt;
        w[t].b1 = nb * (size_t)(t + 1) / (size_t)nt;
        w[t].mean = mean;
        w[t].std = std;
        w[t].kernel = kernel;
        if (t > 0) started[t] = pthread_create(&tid[t], NULL, normal_fill_blocks_run_, &w[t]) == 0;
    }
    normal_fill_blocks_run_(&w[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        else normal_fill_blocks_run_(&w[t]);
    }
}

static inline void normal_with_kernel_(float *data, size_t n, double mean, double std,
                                       mt19937_state *rng, TorchCpuKernel kernel) {
    if (n >= 16) {
        // the vectorised path works in float
        float mean_f = (float)mean, std_f = (float)std;
        for (size_t i = 0; i < n; i++) data[i] = randfloat32(rng);
        normal_fill_blocks_(data, n / 16, mean_f, std_f, kernel);
        if (n % 16 != 0) {
            // recompute the last 16 values from fresh uniforms
            float *tail = data + n - 16;
            for (int i = 0; i < 16; i++) tail[i] = randfloat32(rng);
            normal_fill_16_(tail, mean_f, std_f, kernel);
        }
        return;
    }
    // the scalar path: at::normal_distribution<double>, with the generator's cache
    for (size_t i = 0; i < n; i++) {
        double z;
        if (rng->has_next_normal) {
            rng->has_next_normal = 0;
            z = rng->next_normal;
        } else {
            double u1 = randfloat64(rng);
            double u2 = randfloat64(rng);
            double radius = sqrt(-2.0 * log1p(-u2));
            double theta = 2.0 * 3.14159265358979323846 * u1;
            rng->next_normal = radius * sin(theta);
            rng->has_next_normal = 1;
            z = radius * cos(theta);
        }
        data[i] = (float)fma(z, std, mean);
    }
}

static inline void normal_(float *data, size_t n, double mean, double std, mt19937_state *rng) {
    normal_with_kernel_(data, n, mean, std, rng, TORCH_CPU_KERNEL_AVX2);
}

// ----------------------------------------------------------------------------
// llm.c's permutations (data loader shuffling)

static inline void init_identity_permutation(int *data, int numel) {
    for (int i = 0; i < numel; i++) data[i] = i;
}

// Fisher-Yates from the back: for i = numel-1 .. 1, swap data[i] with data[draw % (i + 1)].
// Permutes whatever order data already holds (llm.c reshuffles the previous epoch's order).
static inline void random_permutation(int *data, int numel, mt19937_state *rng) {
    for (int i = numel - 1; i > 0; i--) {
        int j = (int)(randint32(rng) % (uint32_t)(i + 1));
        int tmp = data[i];
        data[i] = data[j];
        data[j] = tmp;
    }
}

// ----------------------------------------------------------------------------
// llm.c's on-disk mt19937_state (the shuffle generator in state files), little endian

static inline void mt19937_serialize(const mt19937_state *rng, unsigned char out[MT19937_SERIALIZED_BYTES]) {
    memcpy(out, &rng->seed, 8);
    memcpy(out + 8, &rng->left, 4);
    memcpy(out + 12, &rng->next, 4);
    memcpy(out + 16, rng->state, 4 * MT19937_N);
    memcpy(out + 16 + 4 * MT19937_N, rng->matrix_a, 8);
}

// Restores a generator; returns 0, or -1 if the fields cannot come from mt19937 (left and
// next out of range or inconsistent, wrong MATRIX_A). The normal cache starts empty.
static inline int mt19937_deserialize(mt19937_state *rng, const unsigned char in[MT19937_SERIALIZED_BYTES]) {
    mt19937_state r;
    memset(&r, 0, sizeof(r));
    memcpy(&r.seed, in, 8);
    memcpy(&r.left, in + 8, 4);
    memcpy(&r.next, in + 12, 4);
    memcpy(r.state, in + 16, 4 * MT19937_N);
    memcpy(r.matrix_a, in + 16 + 4 * MT19937_N, 8);
    // right after seeding left = 1, next = 0; after a regeneration left + next = N + 1
    int fresh = r.left == 1 && r.next == 0;
    int running = r.left >= 1 && r.left <= MT19937_N && r.next >= 1 && r.next <= MT19937_N &&
                  (uint32_t)r.left + r.next == MT19937_N + 1;
    if (!(fresh || running) || r.matrix_a[0] != 0 || r.matrix_a[1] != MT19937_MATRIX_A) return -1;
    *rng = r;
    return 0;
}

#endif // LLMC_RAND_H
