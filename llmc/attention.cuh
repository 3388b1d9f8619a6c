/*
attention.cuh - causal multi-head self-attention with grouped-query heads (GQA), bf16 in and
out, fp32 softmax: a FlashAttention-2 style forward and a deterministic backward, on mma.sync
tensor cores. On an sm_90a build and a 9.0 GPU, head sizes 64 and 128 run on the Hopper
kernels of attention_sm90.cuh instead (wgmma and TMA; the same algorithm, inputs, outputs and
saved state), forward and backward; attention_set_sm90(0) keeps every call here (the tests run
both), attention_set_sm90_hs128(0) the calls of head size 128 (A/B measurements).

Layouts (AttentionShape: B, T, NH, NKV, hs, ldq, ldkv; token t of sequence b is row b*T + t):
  q    rows ldq elements apart: query head h in columns h*hs .. h*hs+hs-1 (NH heads)
  k, v rows ldkv elements apart: K/V head g in columns g*hs .. g*hs+hs-1 (NKV heads each)
  out  (B, T, NH*hs) contiguous: out_h = softmax(q_h k_g^T / sqrt(hs), causal) v_g
  dq, dk, dv: the layouts of q, k, v (strides ldq, ldkv);  dout: that of out
NKV divides NH, and query head h reads K/V head g = h / (NH/NKV) in place: no copy of K or V.
The strides let q, k, v be views of one packed buffer: GPT-2's qkv (B, T, 3C) is q = qkv,
k = qkv + C, v = qkv + 2C, ldq = ldkv = 3C, NKV = NH, hs = C/NH, and dq, dk, dv the same views
of dqkv (attention_shape_packed); or three separate contiguous tensors (ldq = NH*hs, ldkv =
NKV*hs). hs must be 16, 32, 64 or 128 (GPT-2: 64; the debug fixture: 16; Llama 3.2 1B, Qwen2.5
0.5B: 64 with NH/NKV = 32/8, 14/2).

Forward (attention_forward, out =): one block of 4 warps per 64 query rows of one (b, h);
each warp owns 16 rows. The block walks the key/value tiles of 64 keys up to the diagonal:
S = Q K^T (bf16 mma, fp32 accumulate), an online softmax in base 2 on the fp32 scores, then
O += P V with P rounded to bf16. Only the per-row log-sum-exp is saved for the backward
(`saved`: fp32 (B, NH, T), base-2 of the scaled scores: P = exp2(s * log2(e)/sqrt(hs) - lse)).

Backward (attention_backward, dq, dk, dv =): three kernels, no atomics, so bitwise
deterministic.
  1. Dvec = rowsum(dout * out), fp32 (B, NH, T) in `scratch`;
  2. per key tile of 64 of one (b, K/V head g) (4 warps x 16 keys): loop over the group's
     query heads h = g*NH/NKV .. in increasing order and, within each, over the query tiles
     at or after the key tile: recompute S^T and P^T from the saved lse, dP^T = V dO^T, dS^T =
     P^T (dP^T - Dvec); dV += P^T dO, dK += dS^T Q in registers; written once at the end. So dK
     and dV sum over the group's heads in one fixed order, in registers: no float atomics;
  3. per query tile of 64 of one (b, h): loop over the key tiles up to the diagonal, recompute
     P and dP, dQ += dS K; written once at the end.
The backward thus recomputes S and dP twice (7 tile matmuls against FA2's 5 with atomics);
that is the price of determinism without a dS buffer. With NKV = NH the dK/dV kernel is the
instantiation without the loop over heads (GQA = false): multi-head calls (GPT-2's) run the
plain multi-head schedule. Layouts and strides change addresses only, never the arithmetic or
its order: the packed and the separate layouts give bitwise the same results.

Fragments: mma.sync.m16n8k16 bf16 with fp32 accumulators, operands read with ldmatrix (.trans
for the k-major operands V, dO, Q, K of the second matmuls) from padded shared-memory rows
(hs + 8 elements: 16-byte aligned, no bank conflicts); -DATTN_LDMATRIX=0 reads them with plain
loads instead (a cross-check). Tiles are copied with 16-byte cp.async, rows past T zero-filled;
no double buffering: the 2-4 resident blocks per SM hide the load latency.

Indices: everything that scales with B*T*ld or B*NH*T is size_t (attn_index, attn_row_index;
the test checks their math past 2^32 and runs B*T*3C > 2^31 for real); nothing of size
B*NH*T*T exists. The grids are (B*NH, ceil(T/64)) (forward, dQ) and (B*NKV, ceil(T/64)) (dK/dV),
the heaviest tiles first. dK/dV use query tiles of 32 at hs = 128 (registers). ptxas: no spills
at any hs (sm_90; 128-179 registers at hs = 64, 168-239 at hs = 128).
Requirements (checked on the host: attention_shape_error, attention_forward_error,
attention_backward_error name the problem, and attention_forward/backward exit with it): NKV
divides NH; hs in {16, 32, 64, 128}; ldq >= NH*hs and ldkv >= NKV*hs, both multiples of 8
(16-byte aligned rows); q, k, v, out, dout, dq, dk, dv 16-byte aligned; B*NH <= 2^31 - 1 and
T <= 64 * 65535; out must not overlap q, k, v; dq, dk, dv share no element with one another
(they may interleave in one packed buffer), with the inputs, saved or scratch.
No cuBLAS handle is used. The forward needs no scratch; `saved` may be NULL for a forward
that will not be followed by a backward (inference).
*/
#ifndef LLMC_ATTENTION_CUH
#define LLMC_ATTENTION_CUH

#include "attention_sm90.cuh"
#include "cuda_common.cuh"

#define ATTN_THREADS 128  // 4 warps
#define ATTN_TILE 64      // query rows per forward / dQ block, keys per key tile
#define ATTN_LOG2E 1.4426950408889634f

// --- index helpers (host and device; 64-bit) ---------------------------------------------

// element d of head h of token t of sequence b of a tensor whose tokens are ld elements apart:
// q and dq (ld = ldq), k, v, dk and dv (ldkv), out and dout (NH hs)
static __host__ __device__ __forceinline__ size_t attn_index(int b, int t, int T, int ld, int h, int hs, int d) {
    return ((size_t)b * T + t) * (size_t)ld + (size_t)h * hs + d;
}
// row t of (b, h) = bh in the per-row vectors (B, NH, T): lse, Dvec
static __host__ __device__ __forceinline__ size_t attn_row_index(int bh, int t, int T) {
    return (size_t)bh * T + t;
}

// --- warp-level pieces --------------------------------------------------------------------

// D += A B, A 16x16 (row), B 16x8 (col), bf16 in, fp32 accumulate. Fragment layout per lane
// (g = lane / 4, t = lane % 4): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8,
// 2t+8..); b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); d0,d1 (g, 2t..2t+1), d2,d3 (g+8, 2t..).
// The lower-index element of a pair sits in the low 16 bits.
static __device__ __forceinline__ void attn_mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#if defined(__CUDA_ARCH__)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d; (void)a; (void)b;
#endif
}

static __device__ __forceinline__ float attn_exp2(float x) {  // exp2(-inf) = 0
#if defined(__CUDA_ARCH__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

static __device__ __forceinline__ uint32_t attn_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo in the low half
    return *reinterpret_cast<uint32_t *>(&v);
}

static __device__ __forceinline__ uint32_t attn_ld32(const floatX *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}

static __device__ __forceinline__ uint32_t attn_ld_pair(const floatX *lo, const floatX *hi) {
    return (uint32_t)*reinterpret_cast<const unsigned short *>(lo) |
           ((uint32_t)*reinterpret_cast<const unsigned short *>(hi) << 16);
}

// ldmatrix .x4: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of matrix i;
// r[i] gets (row lane/4, columns 2*(lane%4), +1) of matrix i, or with .trans (rows 2*(lane%4),
// +1, column lane/4): the matrix transposed.
static __device__ __forceinline__ void attn_ldsm_x4(uint32_t r[4], const floatX *p) {
#if defined(__CUDA_ARCH__)
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
#else
    (void)r; (void)p;
#endif
}

static __device__ __forceinline__ void attn_ldsm_x4_trans(uint32_t r[4], const floatX *p) {
#if defined(__CUDA_ARCH__)
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
#else
    (void)r; (void)p;
#endif
}

// Fragment loads from shared memory. ATTN_LDMATRIX 0 swaps ldmatrix for plain 32-bit and
// 16-bit loads that follow the mma layout above element by element (slower; a cross-check).
#ifndef ATTN_LDMATRIX
#define ATTN_LDMATRIX 1
#endif

// A fragment: rows r0..r0+15, columns c0..c0+15 of a row-major bf16 matrix (leading dim ld)
static __device__ __forceinline__ void attn_load_a(uint32_t a[4], const floatX *m, int ld, int r0, int c0,
                                                   int lane) {
#if ATTN_LDMATRIX
    const int i = lane >> 3;  // matrices: rows +0 / +8 (i & 1), columns +0 / +8 (i >> 1)
    attn_ldsm_x4(a, m + (r0 + (i & 1) * 8 + (lane & 7)) * ld + c0 + (i >> 1) * 8);
#else
    const floatX *p = m + (r0 + (lane >> 2)) * ld + c0 + 2 * (lane & 3);
    a[0] = attn_ld32(p);
    a[1] = attn_ld32(p + 8 * ld);
    a[2] = attn_ld32(p + 8);
    a[3] = attn_ld32(p + 8 * ld + 8);
#endif
}

// B fragments (k0..k0+15) x (n0..n0+7) in b[0..1] and x (n0+8..n0+15) in b[2..3] of a matrix
// stored n-major: element (k, n) at m[n*ld + k]
static __device__ __forceinline__ void attn_load_b2_nk(uint32_t b[4], const floatX *m, int ld, int n0, int k0,
                                                       int lane) {
#if ATTN_LDMATRIX
    const int i = lane >> 3;  // matrices: k +0 / +8 (i & 1), n +0 / +8 (i >> 1)
    attn_ldsm_x4(b, m + (n0 + (i >> 1) * 8 + (lane & 7)) * ld + k0 + (i & 1) * 8);
#else
    const floatX *p = m + (n0 + (lane >> 2)) * ld + k0 + 2 * (lane & 3);
    b[0] = attn_ld32(p);
    b[1] = attn_ld32(p + 8);
    b[2] = attn_ld32(p + 8 * ld);
    b[3] = attn_ld32(p + 8 * ld + 8);
#endif
}

// acc1 = A1 B1^T and acc2 = A2 B2^T for this warp's 16 rows of A1, A2 (rows warp*16..) and the
// N*8 rows of B1, B2, k = KD*16 deep (row-major tiles in shared memory, leading dimension ld):
// the two products of each backward kernel's tile (S and dP, or their transposes).
template <int N, int KD>
static __device__ __forceinline__ void attn_two_products(float (*acc1)[4], float (*acc2)[4],
                                                         const floatX *A1, const floatX *A2,
                                                         const floatX *B1, const floatX *B2, int ld,
                                                         int warp, int lane) {
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc1[n][e] = acc2[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; kk++) {
        uint32_t a1[4], a2[4];
        attn_load_a(a1, A1, ld, warp * 16, kk * 16, lane);
        attn_load_a(a2, A2, ld, warp * 16, kk * 16, lane);
#pragma unroll
        for (int n = 0; n < N; n += 2) {
            uint32_t b1[4], b2[4];
            attn_load_b2_nk(b1, B1, ld, n * 8, kk * 16, lane);
            attn_mma(acc1[n], a1, b1);
            attn_mma(acc1[n + 1], a1, b1 + 2);
            attn_load_b2_nk(b2, B2, ld, n * 8, kk * 16, lane);
            attn_mma(acc2[n], a2, b2);
            attn_mma(acc2[n + 1], a2, b2 + 2);
        }
    }
}

// B fragments as attn_load_b2_nk, of a matrix stored k-major: element (k, n) at m[k*ld + n]
static __device__ __forceinline__ void attn_load_b2_kn(uint32_t b[4], const floatX *m, int ld, int k0, int n0,
                                                       int lane) {
#if ATTN_LDMATRIX
    const int i = lane >> 3;  // matrices: k +0 / +8 (i & 1), n +0 / +8 (i >> 1)
    attn_ldsm_x4_trans(b, m + (k0 + (i & 1) * 8 + (lane & 7)) * ld + n0 + (i >> 1) * 8);
#else
    const floatX *p = m + (k0 + 2 * (lane & 3)) * ld + n0 + (lane >> 2);
    b[0] = attn_ld_pair(p, p + ld);
    b[1] = attn_ld_pair(p + 8 * ld, p + 9 * ld);
    b[2] = attn_ld_pair(p + 8, p + ld + 8);
    b[3] = attn_ld_pair(p + 8 * ld + 8, p + 9 * ld + 8);
#endif
}

// the A fragment (16 x 16, bf16) made of two neighbouring 16x8 accumulator tiles c0 | c1
static __device__ __forceinline__ void attn_c_to_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = attn_pack(c0[0], c0[1]);
    a[1] = attn_pack(c0[2], c0[3]);
    a[2] = attn_pack(c1[0], c1[1]);
    a[3] = attn_pack(c1[2], c1[3]);
}

// acc (16 x 8*ND) += C (16 x 8*NT: the accumulator tiles of an earlier product, rounded to
// bf16 as the A operand) times M (8*NT x 8*ND), stored k-major in shared memory, row stride ld
template <int NT, int ND>
static __device__ __forceinline__ void attn_mma_c_kn(float acc[ND][4], const float c[NT][4],
                                                     const floatX *m, int ld, int lane) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        uint32_t a[4];
        attn_c_to_a(a, c[2 * kk], c[2 * kk + 1]);
#pragma unroll
        for (int nd = 0; nd < ND; nd += 2) {
            uint32_t b[4];
            attn_load_b2_kn(b, m, ld, kk * 16, nd * 8, lane);
            attn_mma(acc[nd], a, b);
            attn_mma(acc[nd + 1], a, b + 2);
        }
    }
}

// 16 bytes global -> shared without a register round trip (cp.async, sm_80+); complete after
// attn_cp_wait() in the issuing thread, visible to the block after a __syncthreads() that follows
static __device__ __forceinline__ void attn_cp16(floatX *sdst, const floatX *gsrc) {
#if defined(__CUDA_ARCH__)
    const unsigned d = (unsigned)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(gsrc) : "memory");
#else
    *reinterpret_cast<int4 *>(sdst) = *reinterpret_cast<const int4 *>(gsrc);
#endif
}

static __device__ __forceinline__ void attn_cp_wait(void) {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// rows t0 .. t0+rows-1 (HS wide; row t at src + t*stride) into shared dst (leading dim HS+8);
// rows at or past T are zero. All threads of the block take part; asynchronous: the data is
// there after attn_cp_wait() and a __syncthreads().
template <int HS>
static __device__ __forceinline__ void attn_load_tile(floatX *dst, const floatX *src, size_t stride, int t0,
                                                      int rows, int T) {
    constexpr int CH = HS / 8;  // 16-byte chunks per row
    for (int c = threadIdx.x; c < rows * CH; c += ATTN_THREADS) {
        const int r = c / CH, cc = (c % CH) * 8;
        floatX *d = dst + r * (HS + 8) + cc;
        if (t0 + r < T) attn_cp16(d, src + (size_t)(t0 + r) * stride + cc);
        else *reinterpret_cast<int4 *>(d) = make_int4(0, 0, 0, 0);
    }
}

// --- shared-memory sizes ------------------------------------------------------------------

static inline size_t attn_fwd_smem(int hs) { return (size_t)3 * ATTN_TILE * (hs + 8) * sizeof(floatX); }
static inline int attn_dkv_bq(int hs) { return hs >= 128 ? 32 : 64; }  // query tile of the dK/dV kernel
static inline size_t attn_dkv_smem(int hs) {
    const int bq = attn_dkv_bq(hs);
    return (size_t)(2 * ATTN_TILE + 2 * bq) * (hs + 8) * sizeof(floatX) + (size_t)2 * bq * sizeof(float);
}
static inline size_t attn_dq_smem(int hs) { return (size_t)4 * ATTN_TILE * (hs + 8) * sizeof(floatX); }

// --- forward ------------------------------------------------------------------------------

// grid (B*NH, ceil(T/64)); block 128. out (B,T,NH*HS) =, lse (B,NH,T) = (skipped when NULL).
// Query head h reads K/V head h / group.
template <int HS>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_fwd_kernel(floatX *__restrict__ out, float *__restrict__ lse, const floatX *__restrict__ q,
                    const floatX *__restrict__ k, const floatX *__restrict__ v, int T, int NH, int group, int ldq,
                    int ldkv, float scale_log2) {
    constexpr int LD = HS + 8, KD = HS / 16, ND = HS / 8, NT = ATTN_TILE / 8;
    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX *Qs = reinterpret_cast<floatX *>(attn_smem);
    floatX *Ks = Qs + ATTN_TILE * LD;
    floatX *Vs = Ks + ATTN_TILE * LD;

    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hk = h / group;
    const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * ATTN_TILE;  // the longest rows first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tg = lane & 3;
    const floatX *qbase = q + attn_index(b, 0, T, ldq, h, HS, 0);

    attn_load_tile<HS>(Qs, qbase, (size_t)ldq, q0, ATTN_TILE, T);
    attn_cp_wait();
    __syncthreads();
    uint32_t qf[KD][4];
#pragma unroll
    for (int kk = 0; kk < KD; kk++) attn_load_a(qf[kk], Qs, LD, warp * 16, kk * 16, lane);

    float o[ND][4];
#pragma unroll
    for (int nd = 0; nd < ND; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows row0 and row0 + 8
    const int row0 = q0 + warp * 16 + g;
    const int kend = min(T, q0 + ATTN_TILE);  // keys 0 .. kend-1 can be seen by this block
    const int nkt = (kend + ATTN_TILE - 1) / ATTN_TILE;

    for (int kt = 0; kt < nkt; kt++) {
        const int k0 = kt * ATTN_TILE;
        __syncthreads();  // the previous K/V tile is no longer read
        // from key k0 of K/V head hk (addressed from the tile's first row, not from the head's:
        // two live pointers fewer, which keeps the kernel within 128 registers at hs = 64)
        const size_t kv_at = attn_index(b, k0, T, ldkv, hk, HS, 0);
        attn_load_tile<HS>(Ks, k + kv_at, (size_t)ldkv, 0, ATTN_TILE, T - k0);
        attn_load_tile<HS>(Vs, v + kv_at, (size_t)ldkv, 0, ATTN_TILE, T - k0);
        attn_cp_wait();
        __syncthreads();

        float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KD; kk++)
#pragma unroll
            for (int nt = 0; nt < NT; nt += 2) {
                uint32_t bf[4];
                attn_load_b2_nk(bf, Ks, LD, nt * 8, kk * 16, lane);
                attn_mma(s[nt], qf[kk], bf);
                attn_mma(s[nt + 1], qf[kk], bf + 2);
            }

        // scale, mask (keys past the row or past T), row max
        const bool need_mask = k0 + ATTN_TILE > q0 || k0 + ATTN_TILE > T;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[nt][e] * scale_log2;
                if (need_mask) {
                    const int key = k0 + nt * 8 + 2 * tg + (e & 1), row = row0 + (e >> 1) * 8;
                    if (key > row || key >= T) x = -INFINITY;
                }
                s[nt][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        float mu[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float mnew = fmaxf(m[r], mx[r]);
            mu[r] = mnew == -INFINITY ? 0.0f : mnew;  // a row with nothing seen yet stays at zero
            const float alpha = attn_exp2(m[r] - mu[r]);
            m[r] = mnew;
            l[r] *= alpha;
#pragma unroll
            for (int nd = 0; nd < ND; nd++) {
                o[nd][2 * r] *= alpha;
                o[nd][2 * r + 1] *= alpha;
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = attn_exp2(s[nt][e] - mu[e >> 1]);
                s[nt][e] = p;
                l[e >> 1] += p;  // this lane's share; the 4 lanes of a row are added at the end
            }

        // O += P V
        attn_mma_c_kn<NT, ND>(o, s, Vs, LD, lane);
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int row = row0 + 8 * r;
        if (row < T) {
            const float inv = 1.0f / l[r];
            floatX *orow = out + attn_index(b, row, T, NH * HS, h, HS, 2 * tg);
#pragma unroll
            for (int nd = 0; nd < ND; nd++)
                *reinterpret_cast<uint32_t *>(orow + nd * 8) = attn_pack(o[nd][2 * r] * inv, o[nd][2 * r + 1] * inv);
            if (lse != nullptr && tg == 0) lse[attn_row_index(bh, row, T)] = m[r] + log2f(l[r]);
        }
    }
}

// --- backward -----------------------------------------------------------------------------

// Dvec (B,NH,T) = rowsum(dout * out) per (token, head). Rows r = (b*T + t)*NH + h are HS
// contiguous elements at r*HS of both (B,T,NH*HS) tensors; HS/8 lanes take one row.
template <int HS>
__global__ void attn_bwd_dot_kernel(float *__restrict__ Dvec, const floatX *__restrict__ dout,
                                    const floatX *__restrict__ out, size_t rows, int T, int NH) {
    constexpr int CH = HS / 8;  // 2, 4, 8 or 16 lanes per row
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t r = idx / CH;
    const int c = (int)(idx % CH);
    float acc = 0.0f;
    if (r < rows) {
        const Packed128<floatX> a = load128(dout + r * HS + c * 8), o = load128(out + r * HS + c * 8);
#pragma unroll
        for (int k = 0; k < 8; k++) acc += to_float(a[k]) * to_float(o[k]);
    }
#pragma unroll
    for (int off = 1; off < CH; off *= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (r < rows && c == 0) {
        const int h = (int)(r % NH);
        const size_t bt = r / NH;
        const int t = (int)(bt % T), b = (int)(bt / T);
        Dvec[attn_row_index(b * NH + h, t, T)] = acc;
    }
}

// grid (B*NKV, ceil(T/64)): one block per 64 keys of one (b, K/V head hk); block 128; each
// warp owns 16 keys of the block's 64. dK, dV of those keys =: summed in registers over the
// group's query heads hk*group .. hk*group + group-1 in that order, each over its query tiles
// in order, written once. Without GQA, group is 1: the head hk alone, and the kernel is the
// plain multi-head one, without the loop over heads (NKV = NH: GPT-2's).
template <int HS, int BQ, bool GQA>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_bwd_dkv_kernel(floatX *__restrict__ dK, floatX *__restrict__ dV, const floatX *__restrict__ dout,
                        const floatX *__restrict__ q, const floatX *__restrict__ k, const floatX *__restrict__ v,
                        const float *__restrict__ lse, const float *__restrict__ Dvec, int T, int NKV, int group,
                        int ldq, int ldkv, float scale_log2, float scale) {
    constexpr int LD = HS + 8, KD = HS / 16, ND = HS / 8, NQ = BQ / 8;
    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX *Ks = reinterpret_cast<floatX *>(attn_smem);
    floatX *Vs = Ks + ATTN_TILE * LD;
    floatX *Qs = Vs + ATTN_TILE * LD;
    floatX *dOs = Qs + BQ * LD;
    float *lse_s = reinterpret_cast<float *>(dOs + BQ * LD);
    float *D_s = lse_s + BQ;

    const int grp = GQA ? group : 1, bk = blockIdx.x, b = bk / NKV, hk = bk % NKV, NH = NKV * grp;
    const int k0 = (int)blockIdx.y * ATTN_TILE;  // the first key tiles see the most queries
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tg = lane & 3;

    attn_load_tile<HS>(Ks, k + attn_index(b, 0, T, ldkv, hk, HS, 0), (size_t)ldkv, k0, ATTN_TILE, T);
    attn_load_tile<HS>(Vs, v + attn_index(b, 0, T, ldkv, hk, HS, 0), (size_t)ldkv, k0, ATTN_TILE, T);

    float dk[ND][4], dv[ND][4];
#pragma unroll
    for (int nd = 0; nd < ND; nd++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[nd][e] = dv[nd][e] = 0.0f;
    const int key0 = k0 + warp * 16 + g;  // this lane's keys: key0 and key0 + 8
    const int nqt = (T + BQ - 1) / BQ;

    for (int h = hk * grp; h < (hk + 1) * grp; h++) {  // the group's query heads, in order
        const int bh = b * NH + h;
        const floatX *qbase = q + attn_index(b, 0, T, ldq, h, HS, 0);
        const floatX *dobase = dout + attn_index(b, 0, T, NH * HS, h, HS, 0);
        for (int qt = k0 / BQ; qt < nqt; qt++) {
            const int q0 = qt * BQ;
            __syncthreads();  // the previous Q/dO tile is no longer read
            attn_load_tile<HS>(Qs, qbase, (size_t)ldq, q0, BQ, T);
            attn_load_tile<HS>(dOs, dobase, (size_t)(NH * HS), q0, BQ, T);
            for (int i = threadIdx.x; i < BQ; i += ATTN_THREADS) {
                const bool in = q0 + i < T;
                lse_s[i] = in ? lse[attn_row_index(bh, q0 + i, T)] : 0.0f;
                D_s[i] = in ? Dvec[attn_row_index(bh, q0 + i, T)] : 0.0f;
            }
            attn_cp_wait();  // (the first time also the K/V tile)
            __syncthreads();

            // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x BQ queries
            float st[NQ][4], dpt[NQ][4];
            attn_two_products<NQ, KD>(st, dpt, Ks, Vs, Qs, dOs, LD, warp, lane);

            // P^T from the saved lse (zero for query < key and for queries past T); dS^T
            const bool need_mask = q0 < k0 + ATTN_TILE || q0 + BQ > T;
#pragma unroll
            for (int nq = 0; nq < NQ; nq++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qi = nq * 8 + 2 * tg + (e & 1);  // query within the tile
                    float p = attn_exp2(st[nq][e] * scale_log2 - lse_s[qi]);
                    if (need_mask) {
                        const int query = q0 + qi, key = key0 + (e >> 1) * 8;
                        if (query < key || query >= T) p = 0.0f;
                    }
                    st[nq][e] = p;
                    dpt[nq][e] = p * (dpt[nq][e] - D_s[qi]);
                }

            // dV += P^T dO, dK += dS^T Q (the scale is applied once at the end)
            attn_mma_c_kn<NQ, ND>(dv, st, dOs, LD, lane);
            attn_mma_c_kn<NQ, ND>(dk, dpt, Qs, LD, lane);
        }
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = key0 + 8 * r;
        if (key < T) {
            floatX *dkrow = dK + attn_index(b, key, T, ldkv, hk, HS, 2 * tg);
            floatX *dvrow = dV + attn_index(b, key, T, ldkv, hk, HS, 2 * tg);
#pragma unroll
            for (int nd = 0; nd < ND; nd++) {
                *reinterpret_cast<uint32_t *>(dkrow + nd * 8) =
                    attn_pack(dk[nd][2 * r] * scale, dk[nd][2 * r + 1] * scale);
                *reinterpret_cast<uint32_t *>(dvrow + nd * 8) = attn_pack(dv[nd][2 * r], dv[nd][2 * r + 1]);
            }
        }
    }
}

// grid (B*NH, ceil(T/64)); block 128; each warp owns 16 query rows of the block's 64. dQ of
// those rows =, over the keys of K/V head h / group.
template <int HS>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_bwd_dq_kernel(floatX *__restrict__ dQ, const floatX *__restrict__ dout, const floatX *__restrict__ q,
                       const floatX *__restrict__ k, const floatX *__restrict__ v, const float *__restrict__ lse,
                       const float *__restrict__ Dvec, int T, int NH, int group, int ldq, int ldkv, float scale_log2,
                       float scale) {
    constexpr int LD = HS + 8, KD = HS / 16, ND = HS / 8, NT = ATTN_TILE / 8;
    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX *Qs = reinterpret_cast<floatX *>(attn_smem);
    floatX *dOs = Qs + ATTN_TILE * LD;
    floatX *Ks = dOs + ATTN_TILE * LD;
    floatX *Vs = Ks + ATTN_TILE * LD;

    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hk = h / group;
    const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * ATTN_TILE;  // the longest rows first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tg = lane & 3;
    const floatX *kbase = k + attn_index(b, 0, T, ldkv, hk, HS, 0), *vbase = v + attn_index(b, 0, T, ldkv, hk, HS, 0);

    attn_load_tile<HS>(Qs, q + attn_index(b, 0, T, ldq, h, HS, 0), (size_t)ldq, q0, ATTN_TILE, T);
    attn_load_tile<HS>(dOs, dout + attn_index(b, 0, T, NH * HS, h, HS, 0), (size_t)(NH * HS), q0, ATTN_TILE, T);

    const int row0 = q0 + warp * 16 + g;  // this lane's rows: row0 and row0 + 8
    float lr[2], dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const bool in = row0 + 8 * r < T;
        lr[r] = in ? lse[attn_row_index(bh, row0 + 8 * r, T)] : 0.0f;
        dr[r] = in ? Dvec[attn_row_index(bh, row0 + 8 * r, T)] : 0.0f;
    }
    float dq[ND][4];
#pragma unroll
    for (int nd = 0; nd < ND; nd++) dq[nd][0] = dq[nd][1] = dq[nd][2] = dq[nd][3] = 0.0f;
    const int kend = min(T, q0 + ATTN_TILE);
    const int nkt = (kend + ATTN_TILE - 1) / ATTN_TILE;

    for (int kt = 0; kt < nkt; kt++) {
        const int k0 = kt * ATTN_TILE;
        __syncthreads();  // the previous K/V tile is no longer read
        attn_load_tile<HS>(Ks, kbase, (size_t)ldkv, k0, ATTN_TILE, T);
        attn_load_tile<HS>(Vs, vbase, (size_t)ldkv, k0, ATTN_TILE, T);
        attn_cp_wait();  // (the first time also the Q/dO tile)
        __syncthreads();

        // S = Q K^T and dP = dO V^T for this warp's 16 queries x 64 keys
        float s[NT][4], dp[NT][4];
        attn_two_products<NT, KD>(s, dp, Qs, dOs, Ks, Vs, LD, warp, lane);

        const bool need_mask = k0 + ATTN_TILE > q0 || k0 + ATTN_TILE > T;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                float p = attn_exp2(s[nt][e] * scale_log2 - lr[r]);
                if (need_mask) {
                    const int key = k0 + nt * 8 + 2 * tg + (e & 1);
                    if (key > row0 + 8 * r || key >= T) p = 0.0f;
                }
                s[nt][e] = p * (dp[nt][e] - dr[r]);  // dS
            }

        // dQ += dS K
        attn_mma_c_kn<NT, ND>(dq, s, Ks, LD, lane);
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + 8 * r;
        if (row < T) {
            floatX *dqrow = dQ + attn_index(b, row, T, ldq, h, HS, 2 * tg);
#pragma unroll
            for (int nd = 0; nd < ND; nd++)
                *reinterpret_cast<uint32_t *>(dqrow + nd * 8) =
                    attn_pack(dq[nd][2 * r] * scale, dq[nd][2 * r + 1] * scale);
        }
    }
}

// --- host side ----------------------------------------------------------------------------

// The shape of a call (see the layouts above).
typedef struct {
    int B, T;       // sequences, tokens per sequence
    int NH, NKV;    // query heads, key/value heads: NKV divides NH; query head h reads K/V head h / (NH/NKV)
    int hs;         // head size: 16, 32, 64 or 128
    int ldq, ldkv;  // elements from one token's row to the next: of q and dq; of k, v, dk and dv
} AttentionShape;

// The shape of q, k and v packed per token in one (B, T, (NH + 2 NKV) hs) buffer qkv as
// [q | k | v]: q = qkv, k = qkv + NH hs, v = qkv + (NH + NKV) hs (and dq, dk, dv likewise in a
// dqkv of the same layout). GPT-2's qkv (B, T, 3C) is this with NKV = NH, hs = C / NH.
static inline AttentionShape attention_shape_packed(int B, int T, int NH, int NKV, int hs) {
    AttentionShape a;
    a.B = B;
    a.T = T;
    a.NH = NH;
    a.NKV = NKV;
    a.hs = hs;
    a.ldq = a.ldkv = (NH + 2 * NKV) * hs;
    return a;
}

// the launch grid: (B*heads, ceil(T/64)); checked against CUDA's grid limits
static inline dim3 attn_grid(int B, int T, int heads) {
    require(B > 0 && T > 0 && heads > 0, "attention: B, T and the head count must be positive");
    require((long long)B * heads <= 2147483647LL, "attention: B * NH exceeds the grid's x limit");
    const size_t ntiles = llmc_ceil_div((size_t)T, ATTN_TILE);
    require(ntiles <= 65535, "attention: T exceeds 64 * 65535");
    return dim3((unsigned)(B * heads), (unsigned)ntiles, 1);
}

// What is wrong with a call's shape, or NULL if nothing is. attention_forward and
// attention_backward exit with this message (through require); the tests call it directly.
static inline const char *attention_shape_error(const AttentionShape *a) {
    if (a == NULL) return "attention: no shape (NULL)";
    if (a->B <= 0 || a->T <= 0 || a->NH <= 0 || a->NKV <= 0) return "attention: B, T, NH and NKV must be positive";
    if (a->NH % a->NKV != 0) return "attention: NKV (key/value heads) must divide NH (query heads)";
    if (a->hs != 16 && a->hs != 32 && a->hs != 64 && a->hs != 128)
        return "attention: head size hs must be 16, 32, 64 or 128";
    if ((long long)a->NH * a->hs > a->ldq)
        return "attention: ldq must be at least NH * hs (a row of q holds its heads)";
    if ((long long)a->NKV * a->hs > a->ldkv)
        return "attention: ldkv must be at least NKV * hs (a row of k or v holds its heads)";
    if (a->ldq % 8 != 0 || a->ldkv % 8 != 0)
        return "attention: ldq and ldkv must be multiples of 8 elements (rows 16-byte aligned)";
    if ((long long)a->B * a->NH > 2147483647LL) return "attention: B * NH exceeds the grid's x limit";
    if (((long long)a->T + ATTN_TILE - 1) / ATTN_TILE > 65535) return "attention: T exceeds 64 * 65535";
    return NULL;
}

// n rows of w bf16 elements, ld apart, from p: what a call reads or writes of one tensor
typedef struct {
    const void *p;
    long long ld, w, n;
} attn_view;

// Whether two views share no element. Views whose extents overlap can still be disjoint: the
// tensors of one packed buffer (q, k and v in a qkv) interleave row by row.
static inline int attn_disjoint(attn_view x, attn_view y) {
    const long long px = (long long)(uintptr_t)x.p, py = (long long)(uintptr_t)y.p;  // bytes
    const long long ex = px + 2 * ((x.n - 1) * x.ld + x.w), ey = py + 2 * ((y.n - 1) * y.ld + y.w);
    if (ex <= py || ey <= px) return 1;
    if (x.ld != y.ld || (py - px) % 2 != 0) return 0;  // (overlapping extents of other strides: refused)
    const long long d = (py - px) / 2, dm = (d % x.ld + x.ld) % x.ld;  // y's rows start dm into x's
    return dm >= x.w && dm + y.w <= x.ld;
}

// The problem with a forward call, or NULL.
static inline const char *attention_forward_error(const floatX *out, const floatX *q, const floatX *k, const floatX *v,
                                                  const AttentionShape *a) {
    const char *e = attention_shape_error(a);
    if (e != NULL) return e;
    if (out == NULL || q == NULL || k == NULL || v == NULL) return "attention_forward: out, q, k and v are required";
    if (!aligned16(out) || !aligned16(q) || !aligned16(k) || !aligned16(v))
        return "attention_forward: out, q, k and v must be 16-byte aligned";
    const long long n = (long long)a->B * a->T, wq = (long long)a->NH * a->hs, wkv = (long long)a->NKV * a->hs;
    const attn_view vo = {out, wq, wq, n};
    const attn_view vq = {q, a->ldq, wq, n}, vk = {k, a->ldkv, wkv, n}, vv = {v, a->ldkv, wkv, n};
    if (!attn_disjoint(vo, vq) || !attn_disjoint(vo, vk) || !attn_disjoint(vo, vv))
        return "attention_forward: out must not overlap q, k or v";
    return NULL;
}

// The problem with a backward call, or NULL. dq, dk and dv may interleave in one packed buffer
// (their rows' columns apart), but share no element with one another, with the inputs, or
// with saved and scratch; scratch shares none with the inputs either.
static inline const char *attention_backward_error(const floatX *dq, const floatX *dk, const floatX *dv,
                                                   const void *scratch, const floatX *dout, const floatX *q,
                                                   const floatX *k, const floatX *v, const floatX *out,
                                                   const void *saved, const AttentionShape *a) {
    const char *e = attention_shape_error(a);
    if (e != NULL) return e;
    if (dq == NULL || dk == NULL || dv == NULL || scratch == NULL || dout == NULL || q == NULL || k == NULL ||
        v == NULL || out == NULL || saved == NULL)
        return "attention_backward: dq, dk, dv, scratch, dout, q, k, v, out and saved are required";
    if (!aligned16(dq) || !aligned16(dk) || !aligned16(dv) || !aligned16(dout) || !aligned16(q) || !aligned16(k) ||
        !aligned16(v) || !aligned16(out))
        return "attention_backward: dq, dk, dv, dout, q, k, v and out must be 16-byte aligned";
    const long long n = (long long)a->B * a->T, wq = (long long)a->NH * a->hs, wkv = (long long)a->NKV * a->hs;
    const long long wrows = 2 * (long long)a->B * a->NH * a->T;  // lse or Dvec (fp32) in bf16 elements
    const attn_view outs[3] = {{dq, a->ldq, wq, n}, {dk, a->ldkv, wkv, n}, {dv, a->ldkv, wkv, n}};
    const attn_view ins[5] = {{q, a->ldq, wq, n}, {k, a->ldkv, wkv, n}, {v, a->ldkv, wkv, n}, {out, wq, wq, n},
                              {dout, wq, wq, n}};
    const attn_view vs = {saved, wrows, wrows, 1}, vd = {scratch, wrows, wrows, 1};
    for (int i = 0; i < 3; i++) {
        for (int j = i + 1; j < 3; j++)
            if (!attn_disjoint(outs[i], outs[j])) return "attention_backward: dq, dk and dv must not overlap";
        for (int j = 0; j < 5; j++)
            if (!attn_disjoint(outs[i], ins[j]))
                return "attention_backward: dq, dk and dv must not overlap q, k, v, out or dout";
        if (!attn_disjoint(outs[i], vs) || !attn_disjoint(outs[i], vd))
            return "attention_backward: dq, dk and dv must not overlap saved or scratch";
    }
    for (int j = 0; j < 5; j++)
        if (!attn_disjoint(vd, ins[j])) return "attention_backward: scratch must not overlap q, k, v, out or dout";
    if (!attn_disjoint(vd, vs)) return "attention_backward: scratch must not overlap saved";
    return NULL;
}

// dynamic shared memory above 48 KiB has to be opted into, once per kernel
template <typename K>
static inline void attn_smem_optin(K kernel, size_t bytes, bool *done) {
    if (bytes > 48 * 1024 && !*done)
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = true;
}

static inline size_t attn_round256(size_t n) { return (n + 255) & ~(size_t)255; }

// per-forward state kept for the backward: the row log-sum-exps, fp32 (B, NH, T)
static inline size_t attention_saved_bytes(const AttentionShape *a) {
    return attn_round256((size_t)a->B * a->NH * a->T * sizeof(float));
}

// workspace of attention_backward: Dvec, fp32 (B, NH, T). The forward uses none.
static inline size_t attention_scratch_bytes(const AttentionShape *a) {
    return attn_round256((size_t)a->B * a->NH * a->T * sizeof(float));
}

template <int HS>
static inline void attn_forward_hs(floatX *out, float *lse, const floatX *q, const floatX *k, const floatX *v,
                                   const AttentionShape *a, cudaStream_t s) {
    static bool optin = false;
    const size_t smem = attn_fwd_smem(HS);
    attn_smem_optin(attn_fwd_kernel<HS>, smem, &optin);
    const float scale_log2 = ATTN_LOG2E / sqrtf((float)HS);
    attn_fwd_kernel<HS><<<attn_grid(a->B, a->T, a->NH), ATTN_THREADS, smem, s>>>(
        out, lse, q, k, v, a->T, a->NH, a->NH / a->NKV, a->ldq, a->ldkv, scale_log2);
    cudaLaunchCheck("attn_fwd_kernel");
}

// out (B, T, NH*hs) = causal attention of q over k, v (layouts above); saved
// (attention_saved_bytes) = the row log-sum-exps, or NULL to skip them. scratch is unused (may
// be NULL).
static inline void attention_forward(floatX *out, void *saved, void *scratch, const floatX *q, const floatX *k,
                                     const floatX *v, const AttentionShape *a, cudaStream_t s) {
    (void)scratch;
    const char *err = attention_forward_error(out, q, k, v, a);
    require(err == NULL, err);
    float *lse = (float *)saved;
    if (attention_sm90_usable(a->hs)) {
        attention_forward_sm90(out, lse, q, k, v, a->B, a->T, a->NH, a->NKV, a->hs, a->ldq, a->ldkv, s);
        return;
    }
    switch (a->hs) {
    case 16: attn_forward_hs<16>(out, lse, q, k, v, a, s); break;
    case 32: attn_forward_hs<32>(out, lse, q, k, v, a, s); break;
    case 64: attn_forward_hs<64>(out, lse, q, k, v, a, s); break;
    default: attn_forward_hs<128>(out, lse, q, k, v, a, s); break;
    }
}

template <int HS>
static inline void attn_backward_hs(floatX *dq, floatX *dk, floatX *dv, float *Dvec, const floatX *dout,
                                    const floatX *q, const floatX *k, const floatX *v, const floatX *out,
                                    const float *lse, const AttentionShape *a, cudaStream_t s) {
    constexpr int BQ = HS >= 128 ? 32 : 64;  // = attn_dkv_bq(HS)
    static bool optin_dkv = false, optin_dkv_gqa = false, optin_dq = false;
    const int B = a->B, T = a->T, NH = a->NH, NKV = a->NKV, group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = ATTN_LOG2E / sqrtf((float)HS);

    const size_t rows = (size_t)B * T * NH, threads = rows * (HS / 8);
    attn_bwd_dot_kernel<HS><<<(unsigned)llmc_ceil_div(threads, 256), 256, 0, s>>>(Dvec, dout, out, rows, T, NH);
    cudaLaunchCheck("attn_bwd_dot_kernel");
    if (attention_sm90_usable(HS)) {
        attention_backward_sm90(dq, dk, dv, Dvec, dout, q, k, v, lse, B, T, NH, NKV, HS, a->ldq, a->ldkv, s);
        return;
    }

    // dK, dV per (b, K/V head, key tile); dQ per (b, query head, query tile)
    const size_t smem_dkv = attn_dkv_smem(HS);
    const dim3 grid_kv = attn_grid(B, T, NKV);
    if (group == 1) {
        attn_smem_optin(attn_bwd_dkv_kernel<HS, BQ, false>, smem_dkv, &optin_dkv);
        attn_bwd_dkv_kernel<HS, BQ, false><<<grid_kv, ATTN_THREADS, smem_dkv, s>>>(
            dk, dv, dout, q, k, v, lse, Dvec, T, NKV, 1, a->ldq, a->ldkv, scale_log2, scale);
    } else {
        attn_smem_optin(attn_bwd_dkv_kernel<HS, BQ, true>, smem_dkv, &optin_dkv_gqa);
        attn_bwd_dkv_kernel<HS, BQ, true><<<grid_kv, ATTN_THREADS, smem_dkv, s>>>(
            dk, dv, dout, q, k, v, lse, Dvec, T, NKV, group, a->ldq, a->ldkv, scale_log2, scale);
    }
    cudaLaunchCheck("attn_bwd_dkv_kernel");

    const size_t smem_dq = attn_dq_smem(HS);
    attn_smem_optin(attn_bwd_dq_kernel<HS>, smem_dq, &optin_dq);
    attn_bwd_dq_kernel<HS><<<attn_grid(B, T, NH), ATTN_THREADS, smem_dq, s>>>(
        dq, dout, q, k, v, lse, Dvec, T, NH, group, a->ldq, a->ldkv, scale_log2, scale);
    cudaLaunchCheck("attn_bwd_dq_kernel");
}

// dq, dk, dv (the layouts of q, k, v) = the gradient of the attention forward that produced out
// (B, T, NH*hs) and saved from q, k, v, given dout (B, T, NH*hs). scratch: attention_scratch_bytes.
static inline void attention_backward(floatX *dq, floatX *dk, floatX *dv, void *scratch, const floatX *dout,
                                      const floatX *q, const floatX *k, const floatX *v, const floatX *out,
                                      const void *saved, const AttentionShape *a, cudaStream_t s) {
    const char *err = attention_backward_error(dq, dk, dv, scratch, dout, q, k, v, out, saved, a);
    require(err == NULL, err);
    float *Dvec = (float *)scratch;
    const float *lse = (const float *)saved;
    switch (a->hs) {
    case 16: attn_backward_hs<16>(dq, dk, dv, Dvec, dout, q, k, v, out, lse, a, s); break;
    case 32: attn_backward_hs<32>(dq, dk, dv, Dvec, dout, q, k, v, out, lse, a, s); break;
    case 64: attn_backward_hs<64>(dq, dk, dv, Dvec, dout, q, k, v, out, lse, a, s); break;
    default: attn_backward_hs<128>(dq, dk, dv, Dvec, dout, q, k, v, out, lse, a, s); break;
    }
}

#endif // LLMC_ATTENTION_CUH
