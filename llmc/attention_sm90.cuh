/*
attention_sm90.cuh - causal attention on Hopper (sm_90a), head sizes 64 and 128: the products
on wgmma, the tiles brought by TMA into mbarrier-guarded rings, warpgroups specialised as one
producer and two consumers, in the manner of FlashAttention-3. Same inputs, outputs and saved
state as attention.cuh's kernels, which dispatch here where this applies (see its layouts):

  forward   q (rows ldq apart, NH heads), k, v (rows ldkv apart, NKV heads; NKV divides NH;
            query head h reads K/V head h / (NH/NKV)) -> out (B, T, NH*hs); lse (B, NH, T):
            base-2 log-sum-exp of the scaled scores (P = 2^(s log2(e) / sqrt(hs) - lse))
  backward  dout, q, k, v, lse and Dvec = rowsum(dout * out) -> dq, dk, dv (the layouts of
            q, k, v)

Every kernel runs persistent CTAs (one per SM, at most one per work tile) over work tiles of
128 rows: the forward's and the dQ kernel's of one (b, query head), the dK/dV kernel's of one
(b, K/V head); handed out at run time (att90_next_tile) in groups of a few heads (query heads,
or K/V heads for dK/dV: each kernel counts its own tiles and heads), heaviest first within a
group (att90_tile), so that the tiles running at one time share their heads' K/V (or Q/dO) in
L2. In each CTA, one thread of warpgroup 0 issues the TMA loads (3-D tensor maps, one per
tensor, over (B, T, the tensor's heads * hs columns) with its row stride ldq, ldkv or NH*hs: a
box is 64 columns (128 bytes, the 128-byte swizzle's widest: one head at hs = 64, half of one
at 128) by 64 or 128 tokens of one sequence, tokens past T read as zeros; GQA reads K/V head h
/ group in place), and in the backward warp 1 brings the rows' lse and D into shared memory;
warpgroups 1 and 2 each own 64 of the tile's 128 rows and share its stages, so each K/V (or
Q/dO) tile crosses L2 once for 128 rows.

Forward, per 128-key stage:  S = Q K^T (wgmma m64n128k16, both from shared memory); online
  softmax on the fp32 S in registers (row max over a quad, O and the row sum rescaled);
  O += P V (m64n{hs}k16, P from registers: the S accumulator layout is the A fragment layout).
  Head size 128: each 128-row tile of Q, K or V is two 64-column halves (two TMA boxes) one
  after the other in shared memory, each 128 rows of 128 swizzled bytes; Q K^T's 8 K steps
  take 4 from each half, and P V's B operand (V, MN-major) spans both halves with the
  descriptor's leading byte offset = one half (att90_scores, att90_pv). O is 64 fp32 a thread
  (32 at hs = 64); 2 K/V stages of 32 KiB each for K and V (4 of 16 KiB at hs = 64).
Backward, as attention.cuh's (so that each gradient is written once, without atomics):
  dK/dV kernel, per 128 keys and 64-query stage: S^T = K Q^T, dP^T = V dO^T (m64n64k16, K
    and V in registers for the whole work tile), P^T from lse, dS^T = P^T (dP^T - D);
    dV += P^T dO, dK += dS^T Q (P^T, dS^T from registers). With GQA (NKV < NH) the stages walk
    the query tiles of each of the group's query heads in turn, in increasing head order,
    accumulating dK and dV in registers across them: one fixed order, no atomics. GQA is a
    template parameter: GPT-2's NKV = NH calls run the instantiation without the head loop.
  dQ kernel, per 128 queries and 64-key stage: S = Q K^T, dP = dO V^T (Q, dO in registers),
    dS = P (dP - D); dQ += dS K (dS from registers).
  Head size 128 (att90_bwd_cfg): tiles in 64-column halves as the forward's; dK, dV (dQ) are
    64 x 128 fp32 a warpgroup, 64 registers each, so K, V (Q, dO) stay in shared memory and
    the score products read both operands there (m64n64k16 over 8 K steps, 4 per half);
    dV += P^T dO, dK += dS^T Q, dQ += dS K are m64n128k16 with the MN-major B spanning both
    halves (lbo = one half of the 64-row tile). 2 stages (32 KiB each) beside the two 64 KiB
    work-tile buffers. The dK/dV consumer waits for its dV, dK products before it issues the
    next S^T, dP^T (att90_dkv_tail128): dK, dV, P^T, dS^T and the next S^T, dP^T in flight
    together would not fit its registers; the other consumer's products fill the gap.
Within a consumer (but head size 128's dK/dV one), the next stage's score products are issued
before this stage's accumulating products, so that the softmax (or the P, dS transform) of one
stage runs while the previous stage's products are on the tensor cores (across the heads of a
GQA group too); the two consumers interleave as well. The diagonal tiles mask keys past the row
(and with it the zero keys past T).

Requirements (attention_sm90_usable; attention.cuh checks the rest): an sm_90a build
(SM90_GEMM_BUILD) on a 9.0 device, hs = 64 or 128 (128 unless attention_set_sm90_hs128(0)),
16-byte aligned tensors and row strides; T, B, NH, NKV any; one call at a time on a device (its
kernels' tile counters are per device: two forwards, or two backwards, on concurrent streams of
one device would share them). No float atomics (an integer counter hands out the tiles, whose
arithmetic is the same whichever CTA runs them): bitwise repeatable.
*/
#ifndef LLMC_ATTENTION_SM90_CUH
#define LLMC_ATTENTION_SM90_CUH

#include "cuda_common.cuh"
#include "gemm_sm90.cuh"

#define ATT90_BM 128        // query rows per work tile (64 per consumer warpgroup)
#define ATT90_BN 128        // keys per K/V stage
#define ATT90_SWZ_COLS 64   // bf16 columns of one 128-byte swizzle row: a TMA box's width
#define ATT90_THREADS 384   // producer warpgroup + 2 consumer warpgroups
#define ATT90_MAX_DEVICES 64  // devices a process may use (per-device host state)

// The forward's sizes at head size HS (64 or 128). A head of HS columns is HS / 64 "halves" of
// 64 columns (one 128-byte swizzle row each), every tile stored half after half: half c of a
// tile of R rows is R 128-byte rows at c R 128 bytes from its start, as one TMA box writes them
// (the 128-byte swizzle limits a box to 128 bytes of columns). At HS = 64 a tile is one half.
// Shared memory: Q in 2 tile buffers, K and V in rings of STAGES stages, then barriers: at HS =
// 64 2 x 16 + 2 x 4 x 16 KiB, at HS = 128 2 x 32 + 2 x 2 x 32 KiB (of the 227 KiB an SM has).
template <int HS>
struct att90_fwd_cfg {
    static constexpr int HALVES = HS / ATT90_SWZ_COLS;
    static constexpr int STAGES = HS == 64 ? 4 : 2;
    static constexpr int Q_HALF = ATT90_BM * 128;   // bytes of one half of a Q tile
    static constexpr int KV_HALF = ATT90_BN * 128;  // of a K or V stage
    static constexpr int Q_BYTES = HALVES * Q_HALF;
    static constexpr int KV_BYTES = HALVES * KV_HALF;
    static constexpr int SMEM = 2 * Q_BYTES + 2 * STAGES * KV_BYTES + 256 + 1024;
};

// S (64 x 128 fp32 per warpgroup) (+)= Q (64 x 16, shared) K^T (16 x 128, shared, K-major)
__device__ __forceinline__ void att90_mma_qk(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#ifdef SM90_DEVICE_CODE
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, "
                 "%39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
                 "%58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : SM90_D16(0), SM90_D16(16), SM90_D16(32), SM90_D16(48)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
}

// S (64 x 128 per warpgroup) = Q K^T over the head's HS channels: issued and committed.
// Both operands K-major (rows along the channels): K step kk (channels 16 kk .. 16 kk + 15)
// is in half kk / 4 of each tile, 32 (kk % 4) bytes into its 128-byte rows; within a half the
// 8-row groups are 1024 bytes apart (sbo; lbo unused for K-major with the 128-byte swizzle).
// q_addr, k_addr: half 0 of the warpgroup's 64 rows of Q, of the stage's K; the next half is
// Q_HALF (KV_HALF) bytes on. At HS = 64 kk / 4 is 0: the head-size-64 code.
template <int HS>
__device__ __forceinline__ void att90_scores(float (&sc)[64], uint32_t q_addr, uint32_t k_addr) {
    typedef att90_fwd_cfg<HS> C;
    sm90_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++)
        att90_mma_qk(sc, sm90_desc(q_addr + (kk / 4) * C::Q_HALF + (kk % 4) * 32, 16, 1024),
                     sm90_desc(k_addr + (kk / 4) * C::KV_HALF + (kk % 4) * 32, 16, 1024), kk);
    sm90_wgmma_commit();
}

// O (64 x 64 fp32 per warpgroup) += P (64 x 16, registers) V (16 x 64, shared, MN-major)
__device__ __forceinline__ void att90_mma_pv(float (&d)[32], const uint32_t *a, uint64_t desc_b) {
#ifdef SM90_DEVICE_CODE
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, "
                 "1;\n"
                 : SM90_D16(0), SM90_D16(16)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
#endif
}

// O (64 x 128 fp32 per warpgroup) += P (64 x 16, registers) V (16 x 128, shared, MN-major):
// head size 128's P V, one instruction over both halves of V (see att90_pv)
__device__ __forceinline__ void att90_mma_pv(float (&d)[64], const uint32_t *a, uint64_t desc_b) {
#ifdef SM90_DEVICE_CODE
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, "
                 "%39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
                 "%58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                 : SM90_D16(0), SM90_D16(16), SM90_D16(32), SM90_D16(48)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
#endif
}

// O (64 x HS) += P (64 x 128 keys, registers: pa, 8 K steps of 4) V (128 keys x HS, shared at
// v_addr). V is the B operand MN-major (transposed: its rows run along K = the keys, its
// columns along N = the channels). With the 128-byte swizzle an MN-major operand is read in
// atoms of 64 N (one 128-byte row) x 8 K (8 rows, 1024 bytes): sbo is the step between the
// 8-key row groups (1024), lbo the step between the 64-channel column blocks along N. K step kk
// (keys 16 kk ..) starts 16 rows = 2048 bytes on. HS = 64: N = 64 is one column block (lbo
// unused; 8192 as the GEMM's). HS = 128: N = 128 is the two halves of the stage, KV_HALF =
// 128 keys x 128 bytes apart, so lbo = KV_HALF (the GEMM's MN-major B uses lbo = its box size
// the same way) and one m64n128k16 covers both halves.
template <int HS>
__device__ __forceinline__ void att90_pv(float (&o)[HS / 2], const uint32_t (&pa)[32], uint32_t v_addr) {
    constexpr uint32_t lbo = HS == 64 ? 8192 : att90_fwd_cfg<HS>::KV_HALF;
#pragma unroll
    for (int kk = 0; kk < ATT90_BN / 16; kk++) att90_mma_pv(o, pa + 4 * kk, sm90_desc(v_addr + kk * 2048, lbo, 1024));
}

// The producer's loads of two row tiles that a stage holds side by side (K and V, Q and dO):
// rows row.. of batch b, head columns col0.. in HALVES boxes of 64 columns (half bytes apart),
// the first tile's at d1, the second's at d2, both completing on bar.
template <int HALVES>
__device__ __forceinline__ void att90_load_pair(uint8_t *d1, uint8_t *d2, int half, const CUtensorMap *m1,
                                                const CUtensorMap *m2, int col0, int row, int b, uint64_t *bar) {
#pragma unroll
    for (int c = 0; c < HALVES; c++) {
        sm90_tma_load_3d(d1 + c * half, m1, col0 + c * ATT90_SWZ_COLS, row, b, bar);
        sm90_tma_load_3d(d2 + c * half, m2, col0 + c * ATT90_SWZ_COLS, row, b, bar);
    }
}

__device__ __forceinline__ float att90_exp2(float x) {  // 2^-inf = 0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Work tile t -> (tile, bh): the query tile (rows_from_last: the heaviest is the last) or the
// key tile (the heaviest is the first) of n, and bh = b NH + h of BH = B NH heads (the forward,
// dQ: query heads; dK/dV: K/V heads, bh = b NKV + g of B NKV). The tiles go G heads at a time,
// all n of each head in that group before the next group, heaviest first within it: the CTAs
// that run at one time share a few heads' K and V (or Q and dO), read from DRAM once and kept
// in L2. (Heaviest first over all heads made every running tile a different head's: each
// head's K and V were read from DRAM once per tile, the forward's DRAM 67% busy.)
__device__ __forceinline__ void att90_tile(int t, int BH, int n, int G, bool rows_from_last, int *tile, int *bh) {
    const int grp = t / (G * n), r = t - grp * G * n, g = min(G, BH - grp * G);
    *tile = rows_from_last ? n - 1 - r / g : r / g;
    *bh = grp * G + r % g;
}

// Work tiles are handed out as CTAs ask for them: a CTA's first is its blockIdx.x, each further
// one the next of a counter (one per kernel), so that a CTA that drew light tiles takes more.
// The producer thread asks, ahead of its consumers, and publishes each tile in the barriers'
// tile slots; the last CTA to draw past the end resets the counters for the next launch (so
// launches of one of these kernels on a device must not overlap: each is on one stream).
__device__ int att90_counter[3][2];  // per kernel: tiles handed out past the grid's, CTAs done

__device__ __forceinline__ int att90_next_tile(int kernel, int ti, int n_tiles) {
    if (ti == 0) return blockIdx.x;
    const int t = gridDim.x + atomicAdd(&att90_counter[kernel][0], 1);
    if (t >= n_tiles && atomicAdd(&att90_counter[kernel][1], 1) == (int)gridDim.x - 1) {
        att90_counter[kernel][0] = 0;  // every CTA has drawn its last: none will draw again
        att90_counter[kernel][1] = 0;
    }
    return t;
}

// The barriers of each kernel here, after its buffers: a ring of 2 work-tile buffers and a
// ring of `stages` stages, each slot with a "full" barrier (the producer's TMA bytes, and in
// the backward the 32 arrivals of the warp that brings the rows' lse and D: tile_arrivals,
// st_arrivals) and an "empty" one (one arrival per consumer warpgroup); each tile buffer also
// has its tile's index (n_tiles or more: no more tiles) and a "sched" barrier, on which the
// producer arrives once it has written the index (for the rows' warp, which must not wait on a
// "full" barrier it is part of). Initialised by thread 0; all threads wait.
typedef struct {
    uint64_t *tile_full, *tile_empty, *st_full, *st_empty, *tile_sched;
    int *tile_idx;
} att90_bars;

__device__ __forceinline__ att90_bars att90_bars_init(uint8_t *at, int stages, int tile_arrivals = 1,
                                                     int st_arrivals = 1) {
    att90_bars b;
    b.tile_full = (uint64_t *)at;
    b.tile_empty = b.tile_full + 2;
    b.st_full = b.tile_empty + 2;
    b.st_empty = b.st_full + stages;
    b.tile_sched = b.st_empty + stages;
    b.tile_idx = (int *)(b.tile_sched + 2);
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; i++) {
            sm90_mbar_init(&b.tile_full[i], tile_arrivals);
            sm90_mbar_init(&b.tile_empty[i], 2);
            sm90_mbar_init(&b.tile_sched[i], 1);
        }
        for (int i = 0; i < stages; i++) {
            sm90_mbar_init(&b.st_full[i], st_arrivals);
            sm90_mbar_init(&b.st_empty[i], 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    return b;
}

// The producer's next tile (att90_next_tile) into tile buffer ti & 1 once its consumers have
// left it: its index published, the sched barrier arrived on; past the end, also the buffer's
// full barrier (without bytes), so that the consumers read the end. Returns the tile.
__device__ __forceinline__ int att90_publish_tile(const att90_bars &b, int kernel, int ti, int n_tiles) {
    const int t = att90_next_tile(kernel, ti, n_tiles), buf = ti & 1;
    sm90_mbar_wait(&b.tile_empty[buf], ((ti >> 1) & 1) ^ 1);
    b.tile_idx[buf] = t;
    sm90_mbar_arrive(&b.tile_sched[buf]);
    if (t >= n_tiles) sm90_mbar_arrive(&b.tile_full[buf]);
    return t;
}

// A consumer's (or the rows' warp's) tile of tile buffer ti & 1, after waiting on `bar` (the
// buffer's full or sched barrier)
__device__ __forceinline__ int att90_read_tile(const att90_bars &b, uint64_t *bar, int ti) {
    sm90_mbar_wait(&bar[ti & 1], (ti >> 1) & 1);
    return sm90_lds_i(sm90_smem(&b.tile_idx[ti & 1]));
}

// What a consumer's step of the forward needs besides its registers.
typedef struct {
    uint8_t *sk, *sv;
    uint64_t *kv_full, *kv_empty;
    uint32_t q_addr;
    int it, qt, row0, tq, lt;
    float scale_log2;
} att90_fwd_ctx;

// Key tile j of the work tile: S_j (in sc) through the online softmax into O (64 x HS); with
// NEXT, S_{j+1} is issued before P_j V_j, and in sc when this returns.
template <int HS, bool NEXT>
__device__ __forceinline__ void att90_fwd_step(const att90_fwd_ctx &c, int j, float (&sc)[64], float (&o)[HS / 2],
                                               float (&m)[2], float (&l)[2]) {
    typedef att90_fwd_cfg<HS> C;
    const int s = (c.it + j) % C::STAGES, s1 = (c.it + j + 1) % C::STAGES;
    // sc[4 i + e]: row row0 + 8 (e >> 1), key j BN + 8 i + 2 tq + (e & 1)
    if (j == c.qt) {  // the diagonal tile: keys past the row drop out
#pragma unroll
        for (int i = 0; i < 16; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = j * ATT90_BN + 8 * i + 2 * c.tq + (e & 1);
                if (key > c.row0 + 8 * (e >> 1)) sc[4 * i + e] = -INFINITY;
            }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 16; i++) {
        mx[0] = fmaxf(mx[0], fmaxf(sc[4 * i], sc[4 * i + 1]));
        mx[1] = fmaxf(mx[1], fmaxf(sc[4 * i + 2], sc[4 * i + 3]));
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        // key 0 is in every row's first tile, so the max is finite from there on
        const float mnew = fmaxf(m[r], mx[r] * c.scale_log2);
        alpha[r] = att90_exp2(m[r] - mnew);
        m[r] = mnew;
        l[r] *= alpha[r];
    }
#pragma unroll
    for (int i = 0; i < 64; i++) {  // P in place, in fp32 (P_{j-1} may still be read)
        sc[i] = att90_exp2(fmaf(sc[i], c.scale_log2, -m[(i >> 1) & 1]));
        l[(i >> 1) & 1] += sc[i];  // this thread's share; the quad's are added at the end
    }
    sm90_wgmma_wait<0>();  // P_{j-1} V_{j-1} is done: O and the P registers are free
    sm90_fence_acc(o);
    if (j > 0 && c.lt == 0) sm90_mbar_arrive(&c.kv_empty[(c.it + j - 1) % C::STAGES]);
    if (NEXT) sm90_mbar_wait(&c.kv_full[s1], ((c.it + j + 1) / C::STAGES) & 1);
#pragma unroll
    for (int i = 0; i < HS / 8; i++) {  // o[4 i + e]: row row0 + 8 (e >> 1), channel 8 i + 2 tq + (e & 1)
        o[4 * i] *= alpha[0];
        o[4 * i + 1] *= alpha[0];
        o[4 * i + 2] *= alpha[1];
        o[4 * i + 3] *= alpha[1];
    }
    sm90_fence_acc(o);
    // the A fragment of keys 16 kk .. of wgmma's m64k16: (g, 2tq), (g + 8, 2tq),
    // (g, 2tq + 8), (g + 8, 2tq + 8): S's columns 8 i with i = 2 kk, 2 kk + 1
    uint32_t pa[32];
    sm90_pack_acc(pa, sc);
    sm90_fence_regs(pa);
    if (NEXT) att90_scores<HS>(sc, c.q_addr, sm90_smem(c.sk + s1 * C::KV_BYTES));
    sm90_wgmma_fence();
    att90_pv<HS>(o, pa, sm90_smem(c.sv + s * C::KV_BYTES));
    sm90_wgmma_commit();
    if (NEXT) {
        sm90_wgmma_wait<1>();  // S_{j+1} is in; P_j V_j may still run
        sm90_fence_acc(sc);
    }
}

template <int HS>
__global__ void __launch_bounds__(ATT90_THREADS, 1)
att90_fwd_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                 const __grid_constant__ CUtensorMap map_v, floatX *__restrict__ out, float *__restrict__ lse, int T,
                 int NH, int group, int BH, int n_qt, int G, float scale_log2) {
#ifdef SM90_DEVICE_CODE
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    typedef att90_fwd_cfg<HS> C;
    uint8_t *sq = smem, *sk = sq + 2 * C::Q_BYTES, *sv = sk + C::STAGES * C::KV_BYTES;
    const att90_bars bars = att90_bars_init(sv + C::STAGES * C::KV_BYTES, C::STAGES);
    uint64_t *q_full = bars.tile_full, *q_empty = bars.tile_empty, *kv_full = bars.st_full, *kv_empty = bars.st_empty;
    const int wg = sm90_warpgroup();
    const int n_tiles = n_qt * BH;

    if (wg == 0) {
        sm90_setmaxnreg_dec<24>();
        if (threadIdx.x != 0) return;
        int it = 0;
        for (int qi = 0;; qi++) {
            const int t = att90_publish_tile(bars, 0, qi, n_tiles);
            if (t >= n_tiles) break;
            int qt, bh;
            att90_tile(t, BH, n_qt, G, true, &qt, &bh);
            const int b = bh / NH, h = bh % NH, hk = h / group;  // hk: the head's K/V head
            const int qb = qi & 1;
            // each half a box of 64 columns (Q_HALF, KV_HALF bytes: the maps' boxes, att90_map)
            sm90_mbar_expect_tx(&q_full[qb], C::Q_BYTES);
#pragma unroll
            for (int c = 0; c < C::HALVES; c++)
                sm90_tma_load_3d(sq + qb * C::Q_BYTES + c * C::Q_HALF, &map_q, h * HS + c * ATT90_SWZ_COLS,
                                 qt * ATT90_BM, b, &q_full[qb]);
            for (int j = 0; j <= qt; j++, it++) {
                const int s = it % C::STAGES;
                sm90_mbar_wait(&kv_empty[s], ((it / C::STAGES) & 1) ^ 1);
                sm90_mbar_expect_tx(&kv_full[s], 2 * C::KV_BYTES);
                att90_load_pair<C::HALVES>(sk + s * C::KV_BYTES, sv + s * C::KV_BYTES, C::KV_HALF, &map_k, &map_v,
                                           hk * HS, j * ATT90_BN, b, &kv_full[s]);
            }
        }
        return;
    }

    sm90_setmaxnreg_inc<240>();
    const int cw = wg - 1, lt = threadIdx.x % 128, w = lt / 32, g = (lt % 32) / 4, tq = lt % 4;
    int it = 0;
    for (int qi = 0;; qi++) {
        const int t = att90_read_tile(bars, q_full, qi);
        if (t >= n_tiles) break;
        int qt, bh;
        att90_tile(t, BH, n_qt, G, true, &qt, &bh);
        const int b = bh / NH, h = bh % NH;
        const int qb = qi & 1;
        const int row0 = qt * ATT90_BM + 64 * cw + 16 * w + g;  // this thread's rows: row0, row0 + 8
        // the warpgroup's 64 rows of half 0 (64 rows of 128 bytes on per consumer)
        const uint32_t q_addr = sm90_smem(sq + qb * C::Q_BYTES) + cw * 8192;
        float o[HS / 2], sc[64];
#pragma unroll
        for (int i = 0; i < HS / 2; i++) o[i] = 0.0f;
        sm90_fence_acc(o);  // set before any product is in flight (else ptxas serializes them)
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
        const int n = qt + 1;  // key tiles up to the diagonal
        sm90_mbar_wait(&kv_full[it % C::STAGES], (it / C::STAGES) & 1);
        att90_scores<HS>(sc, q_addr, sm90_smem(sk + (it % C::STAGES) * C::KV_BYTES));
        sm90_wgmma_wait<0>();
        sm90_fence_acc(sc);
        // Per key tile j: the softmax of S_j runs while P_{j-1} V_{j-1} is on the tensor cores;
        // then S_{j+1} and P_j V_j are issued together, and the wait returns once S_{j+1} is in.
        // The last tile has no next one: a step of its own, so that no branch sits between the
        // rescaling of O and the products (ptxas would move it past them and serialize them).
        att90_fwd_ctx c = {sk, sv, kv_full, kv_empty, q_addr, it, qt, row0, tq, lt, scale_log2};
        for (int j = 0; j + 1 < n; j++) att90_fwd_step<HS, true>(c, j, sc, o, m, l);
        att90_fwd_step<HS, false>(c, n - 1, sc, o, m, l);
        sm90_wgmma_wait<0>();
        sm90_fence_acc(o);
        if (lt == 0) {
            sm90_mbar_arrive(&kv_empty[(it + n - 1) % C::STAGES]);
            sm90_mbar_arrive(&q_empty[qb]);
        }
        it += n;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
            const int row = row0 + 8 * r;
            if (row < T) {
                const float inv = 1.0f / l[r];
                floatX *orow = out + ((size_t)b * T + row) * ((size_t)NH * HS) + (size_t)h * HS + 2 * tq;
#pragma unroll
                for (int i = 0; i < HS / 8; i++)
                    *reinterpret_cast<uint32_t *>(orow + 8 * i) =
                        sm90_pack_bf16(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
                if (lse != nullptr && tq == 0) lse[(size_t)bh * T + row] = m[r] + log2f(l[r]);
            }
        }
    }
#endif
}

// ---------------------------------------------------------------------------------------
// backward: two kernels, as attention.cuh's (dK and dV per key tile, then dQ per query tile,
// each recomputing S and dP), so that every gradient is written once: no atomics

#ifndef ATT90_BWD_STAGES
#define ATT90_BWD_STAGES 6  // 4: 3% slower (dev/attention_bench), 8: 1%
#endif
// The rows' lse and D in shared memory, brought by a warp of the producer warpgroup ahead of
// the consumers (loaded by the consumers themselves, their latency was the dK/dV kernel's
// largest stall): a stage's 64 rows (dK/dV: 4 ATT90_QUAD_STRIDE floats) x STAGES, or a tile
// buffer's 128 rows (dQ: 256 floats) x 2
#define ATT90_QUAD_STRIDE 36

// The backward's sizes at head size HS (64 or 128), its tiles stored in 64-column halves as the
// forward's (att90_fwd_cfg). Shared memory: 128-row pair buffers (K and V, or Q and dO) x 2 |
// 64-row pair stages x STAGES | barriers | rows. HS = 64: 2 x 32 + 6 x 16 KiB; HS = 128: 2 x 64
// + 2 x 32 KiB. At HS = 64 the work tile's A operands (K and V, or Q and dO) are read into
// registers once a tile (att90_frags, AOP = their 16 registers each); at HS = 128 that would
// be 32 registers each beside 64 + 64 of dK, dV: they stay in shared memory, and the score
// products read both operands from there (AOP = the warpgroup's shared-memory address).
template <int HS>
struct att90_bwd_cfg {
    static constexpr int HALVES = HS / ATT90_SWZ_COLS;
    static constexpr int STAGES = HS == 64 ? ATT90_BWD_STAGES : 2;
    static constexpr int TILE_HALF = 128 * 128;  // bytes of one half of a 128-row tile
    static constexpr int TILE_BYTES = HALVES * TILE_HALF;
    static constexpr int T64_HALF = 64 * 128;    // of a 64-row tile (a stage's Q, dO, K or V)
    static constexpr int T64_BYTES = HALVES * T64_HALF;
    static constexpr int ROWS_BYTES =
        (STAGES * 4 * ATT90_QUAD_STRIDE > 2 * 256 ? STAGES * 4 * ATT90_QUAD_STRIDE : 2 * 256) * 4;
    static constexpr int SMEM = 2 * 2 * TILE_BYTES + 2 * STAGES * T64_BYTES + 256 + ROWS_BYTES + 1024;
    // the dK/dV kernel's registers a thread (setmaxnreg; 128 x (PRODUCER + 2 CONSUMER) within the
    // 384 x 168 of the launch): at HS = 128 its lse/D warp (in the producer warpgroup) spilled
    // with 24, and its consumers need fewer than 232 (att90_dkv_tail128)
    static constexpr int PRODUCER_REGS = HS == 64 ? 24 : 32;
    static constexpr int CONSUMER_REGS = HS == 64 ? 240 : 232;
};
template <int HS> struct att90_aop { typedef uint32_t type[16]; };
template <> struct att90_aop<128> { typedef uint32_t type; };
static_assert(att90_fwd_cfg<64>::SMEM <= 227 * 1024 && att90_fwd_cfg<128>::SMEM <= 227 * 1024 &&
                  att90_bwd_cfg<64>::SMEM <= 227 * 1024 && att90_bwd_cfg<128>::SMEM <= 227 * 1024,
              "attention (Hopper): shared memory past the 227 KiB of a CTA");

// The lse and D of `n` rows from row r0 of one (b, h) into shared memory (rows past T: lse inf,
// D 0, so that P = 0), by the 32 lanes of a warp, each of which then arrives on bar (its own
// stores released by its own arrival). Plain: lse at rows[0, n), D at rows[n, 2n). QUADS (the
// dK/dV kernel's 64 rows): in the order a consumer thread reads them, one 16-byte load for its
// 2 rows of each 8: row 8 j + 2 tq + e at tq ATT90_QUAD_STRIDE + 4 j + e (lse) and + 2 (D);
// the stride of 36 floats puts the 4 tq's loads in different banks.
template <bool QUADS>
__device__ __forceinline__ void att90_load_rows(float *rows, const float *lse, const float *D, int r0, int n, int T,
                                                int lane, uint64_t *bar) {
    const uint32_t a = sm90_smem(rows);
    for (int r = lane; r < n; r += 32) {
        const int q = r0 + r;
        const int pl = QUADS ? ((r >> 1) & 3) * ATT90_QUAD_STRIDE + 4 * (r >> 3) + (r & 1) : r;
        const int pd = QUADS ? pl + 2 : n + r;
        sm90_sts_f(a + 4 * pl, q < T ? lse[q] : INFINITY);
        sm90_sts_f(a + 4 * pd, q < T ? D[q] : 0.0f);
    }
    sm90_mbar_arrive(bar);
}

// d (64 x 64 fp32 per warpgroup) (+)= A (64 x 16, registers) B^T (16 x 64, shared, K-major)
__device__ __forceinline__ void att90_mma_rs64(float (&d)[32], const uint32_t *a, uint64_t desc_b, int scale_d) {
#ifdef SM90_DEVICE_CODE
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, "
                 "0;\n}\n"
                 : SM90_D16(0), SM90_D16(16)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
#endif
}

// The A fragments of a warpgroup's 64 rows x 64 channels of a tile in shared memory (128-byte
// rows, swizzled as TMA wrote them; base 1024-aligned): 4 K steps of 4 registers, for the
// backward's score-like products, whose A (K and V, or Q and dO) is the same for a whole work
// tile. Loaded once a tile, they halve those products' shared-memory reads (B alone); from
// shared memory both ways the backward took 6% longer.
__device__ __forceinline__ void att90_frags(uint32_t (&a)[16], uint32_t base, int w, int lane) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t r[4];
        sm90_ldmatrix_x4(r, base + sm90_swz(16 * w + (lane % 8) + 8 * ((lane / 8) & 1), 2 * kk + lane / 16));
#pragma unroll
        for (int e = 0; e < 4; e++) a[4 * kk + e] = r[e];
    }
}

// d (64 x 64 fp32 per warpgroup) (+)= A (64 x 16, shared, K-major) B^T (16 x 64, shared, K-major)
__device__ __forceinline__ void att90_mma_ss64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#ifdef SM90_DEVICE_CODE
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : SM90_D16(0), SM90_D16(16)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
}

// Head size 128's score-like products: x = A1 B1^T, y = A2 B2^T over 128 channels (8 K steps),
// every operand K-major in shared memory. a1, a2: the warpgroup's 64 rows of half 0 of the
// work tile's 128-row tiles (half 1 TILE_HALF on); b1, b2: half 0 of the stage's 64-row tiles
// (half 1 T64_HALF on). K step kk reads half kk / 4, 32 (kk % 4) bytes into the rows; 8-row
// groups 1024 bytes apart (sbo) in each.
__device__ __forceinline__ void att90_two_products(float (&x)[32], float (&y)[32], uint32_t a1, uint32_t b1,
                                                      uint32_t a2, uint32_t b2) {
    typedef att90_bwd_cfg<128> C;
    sm90_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        att90_mma_ss64(x, sm90_desc(a1 + (kk / 4) * C::TILE_HALF + (kk % 4) * 32, 16, 1024),
                       sm90_desc(b1 + (kk / 4) * C::T64_HALF + (kk % 4) * 32, 16, 1024), kk);
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        att90_mma_ss64(y, sm90_desc(a2 + (kk / 4) * C::TILE_HALF + (kk % 4) * 32, 16, 1024),
                       sm90_desc(b2 + (kk / 4) * C::T64_HALF + (kk % 4) * 32, 16, 1024), kk);
    sm90_wgmma_commit();
}

// x (64 x 64 per warpgroup) = A1 B1^T and y = A2 B2^T over the head's 64 channels (4 K steps):
// the two score-like products of the backward, S (or S^T) and dP (or dP^T); A1, A2 from
// registers (att90_frags), B1, B2 from shared memory
__device__ __forceinline__ void att90_two_products(float (&x)[32], float (&y)[32], const uint32_t (&a1)[16],
                                                      uint32_t b1, const uint32_t (&a2)[16], uint32_t b2) {
    sm90_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) att90_mma_rs64(x, a1 + 4 * kk, sm90_desc(b1 + kk * 32, 16, 1024), kk);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) att90_mma_rs64(y, a2 + 4 * kk, sm90_desc(b2 + kk * 32, 16, 1024), kk);
    sm90_wgmma_commit();
}

// d (64 x 64) += A (64 x 64, registers: 4 K steps of 4) B (64 x 64, shared, MN-major: rows along K)
__device__ __forceinline__ void att90_product_rs(float (&d)[32], const uint32_t (&a)[16], uint32_t b) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) att90_mma_pv(d, a + 4 * kk, sm90_desc(b + kk * 2048, 8192, 1024));
}

// Head size 128: d (64 x 128) += A (64 x 64, registers) B (64 x 128, shared, MN-major: a stage's
// 64-row tile, its two 64-column halves T64_HALF = 8192 bytes apart = lbo, the step between
// column blocks along N, as att90_pv's; K step kk: rows 16 kk .., 2048 bytes on)
__device__ __forceinline__ void att90_product_rs(float (&d)[64], const uint32_t (&a)[16], uint32_t b) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        att90_mma_pv(d, a + 4 * kk, sm90_desc(b + kk * 2048, att90_bwd_cfg<128>::T64_HALF, 1024));
}

// What a consumer's step of the dK/dV kernel needs besides its registers.
typedef struct {
    uint8_t *sst;
    uint64_t *st_full, *st_empty;
    const float *rows;  // the stages' lse and D (att90_load_rows)
    int it, kt, key0, tq, lt;
    float scale_log2;
} att90_dkv_ctx;

// The lse and D of this thread's 16 query columns of query tile i, from its stage (full)
template <int HS>
__device__ __forceinline__ void att90_dkv_rows(const att90_dkv_ctx &c, int i, float (&lq)[16], float (&dd)[16]) {
    const uint32_t rows = sm90_smem(c.rows + ((c.it + i) % att90_bwd_cfg<HS>::STAGES) * 4 * ATT90_QUAD_STRIDE) +
                          4 * ATT90_QUAD_STRIDE * c.tq;  // bytes
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const uint4 v = sm90_lds_u4(rows + 16 * j);
        lq[2 * j] = __uint_as_float(v.x);
        lq[2 * j + 1] = __uint_as_float(v.y);
        dd[2 * j] = __uint_as_float(v.z);
        dd[2 * j + 1] = __uint_as_float(v.w);
    }
}

// Head size 128's end of a dK/dV step (att90_dkv_step), once P^T and dS^T are in st, dpt: dV +=
// P^T dO and dK += dS^T Q, then (NEXT) step i+1's S^T and dP^T, each product group waited for
// before the next is issued. dK and dV (128 registers) with P^T and dS^T (32) in flight beside
// the next S^T and dP^T (64) exceed the 240 registers (ptxas spills and serializes the
// products), so a consumer's products do not overlap its own transform here; the other
// consumer's run meanwhile.
template <bool NEXT>
__device__ __forceinline__ void att90_dkv_tail128(const att90_dkv_ctx &c, int i, float (&st)[32], float (&dpt)[32],
                                                  float (&dk)[64], float (&dv)[64], uint32_t ka) {
    typedef att90_bwd_cfg<128> C;
    const int s = (c.it + i) % C::STAGES, s1 = (c.it + i + 1) % C::STAGES;
    uint32_t pa[16], da[16];
    sm90_pack_acc2(pa, st, da, dpt);
    sm90_fence_regs(pa);
    sm90_fence_regs(da);
    const uint32_t q_addr = sm90_smem(c.sst + s * 2 * C::T64_BYTES), do_addr = q_addr + C::T64_BYTES;
    sm90_wgmma_fence();
    att90_product_rs(dv, pa, do_addr);
    att90_product_rs(dk, da, q_addr);
    sm90_wgmma_commit();
    sm90_wgmma_wait<0>();
    sm90_fence_acc(dk);
    sm90_fence_acc(dv);
    if (c.lt == 0) sm90_mbar_arrive(&c.st_empty[s]);  // this stage's Q, dO, lse and D read
    if (NEXT) {
        sm90_mbar_wait(&c.st_full[s1], ((c.it + i + 1) / C::STAGES) & 1);
        const uint32_t q1 = sm90_smem(c.sst + s1 * 2 * C::T64_BYTES);
        att90_two_products(st, dpt, ka, q1, ka + C::TILE_BYTES, q1 + C::T64_BYTES);  // K Q^T, V dO^T
        sm90_wgmma_wait<0>();
        sm90_fence_acc(st);
        sm90_fence_acc(dpt);
    }
}

// Step i of the work tile (its stage c.it + i): query tile qi of its query head (qi = i but with
// GQA, where the steps walk the group's heads one after another). S^T, dP^T (in st, dpt)
// into P^T, dS^T, then dV += P^T dO, dK += dS^T Q. With NEXT, step i+1's S^T and dP^T (the next
// tile, of this head or of the next one) are issued first, and are in st, dpt (at HS = 64 its
// lse and D in lq, dd) when this returns. HS = 128 reads each step's lse and D at its start
// instead (att90_dkv_rows), so that they are not held beside dK, dV (64 + 64 registers) across
// the products. ka, va: the K and V operand (att90_aop).
template <int HS, bool NEXT>
__device__ __forceinline__ void att90_dkv_step(const att90_dkv_ctx &c, int i, int qi, float (&st)[32],
                                               float (&dpt)[32], float (&dk)[HS / 2], float (&dv)[HS / 2],
                                               float (&lq)[16], float (&dd)[16],
                                               const typename att90_aop<HS>::type &ka,
                                               const typename att90_aop<HS>::type &va) {
    typedef att90_bwd_cfg<HS> C;
    const int s = (c.it + i) % C::STAGES, s1 = (c.it + i + 1) % C::STAGES;
    const int q0 = (2 * c.kt + qi) * 64;
    if constexpr (HS != 64) {
        // as below, with this step's lse and D read from its stage 2 rows at a time (16 bytes: see
        // att90_load_rows), so that they do not add 32 registers to dK, dV, S^T and dP^T
        const uint32_t rows = sm90_smem(c.rows + s * 4 * ATT90_QUAD_STRIDE) + 4 * ATT90_QUAD_STRIDE * c.tq;
        // query - key less its j and e terms (past the first two query tiles at least 9: no mask)
        const int qd = q0 + 2 * c.tq - c.key0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint4 v = sm90_lds_u4(rows + 16 * j);
            const float lj[2] = {__uint_as_float(v.x), __uint_as_float(v.y)};
            const float dj[2] = {__uint_as_float(v.z), __uint_as_float(v.w)};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                // query q0 + 8 j + 2 tq + (e & 1) before key key0 + 8 (e >> 1): P = 0
                const float x = att90_exp2(fmaf(st[4 * j + e], c.scale_log2, -lj[e & 1]));
                const float p = qd < 8 * ((e >> 1) - j) - (e & 1) ? 0.0f : x;
                st[4 * j + e] = p;
                dpt[4 * j + e] = p * (dpt[4 * j + e] - dj[e & 1]);
            }
        }
        att90_dkv_tail128<NEXT>(c, i, st, dpt, dk, dv, ka);  // (va = ka + TILE_BYTES)
        return;
    }
    // st[4 j + e]: key key0 + 8 (e >> 1), query q0 + 8 j + 2 tq + (e & 1); P^T and dS^T in place.
    // Only the first two query tiles reach below the diagonal (queries before keys: P = 0); past
    // them the mask's compares would be a third of the loop's instructions
    if (qi < 2) {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int q = q0 + 8 * j + 2 * c.tq + (e & 1), key = c.key0 + 8 * (e >> 1);
                const float x = att90_exp2(fmaf(st[4 * j + e], c.scale_log2, -lq[2 * j + (e & 1)]));
                const float p = q < key ? 0.0f : x;
                st[4 * j + e] = p;
                dpt[4 * j + e] = p * (dpt[4 * j + e] - dd[2 * j + (e & 1)]);
            }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = att90_exp2(fmaf(st[4 * j + e], c.scale_log2, -lq[2 * j + (e & 1)]));
                st[4 * j + e] = p;
                dpt[4 * j + e] = p * (dpt[4 * j + e] - dd[2 * j + (e & 1)]);
            }
    }
    sm90_wgmma_wait<0>();  // tile i-1's dV, dK products are done: their operands are free
    if (i > 0 && c.lt == 0) sm90_mbar_arrive(&c.st_empty[(c.it + i - 1) % C::STAGES]);
    if (NEXT) {
        sm90_mbar_wait(&c.st_full[s1], ((c.it + i + 1) / C::STAGES) & 1);
        // tile i's are used up; these are needed after the products
        if constexpr (HS == 64) att90_dkv_rows<HS>(c, i + 1, lq, dd);
    }
    uint32_t pa[16], da[16];
    sm90_pack_acc2(pa, st, da, dpt);
    sm90_fence_regs(pa);
    sm90_fence_regs(da);
    if (NEXT) {
        const uint32_t q1 = sm90_smem(c.sst + s1 * 2 * C::T64_BYTES);
        att90_two_products(st, dpt, ka, q1, va, q1 + C::T64_BYTES);
    }
    const uint32_t q_addr = sm90_smem(c.sst + s * 2 * C::T64_BYTES), do_addr = q_addr + C::T64_BYTES;
    sm90_wgmma_fence();
    att90_product_rs(dv, pa, do_addr);
    att90_product_rs(dk, da, q_addr);
    sm90_wgmma_commit();
    if (NEXT) {
        sm90_wgmma_wait<1>();  // tile i+1's S^T, dP^T are in; dV, dK may still run
        sm90_fence_acc(st);
        sm90_fence_acc(dpt);
    } else {
        sm90_wgmma_wait<0>();
        sm90_fence_acc(dk);
        sm90_fence_acc(dv);
        if (c.lt == 0) sm90_mbar_arrive(&c.st_empty[s]);
    }
}

// What a consumer's step of the dQ kernel needs besides its registers.
typedef struct {
    uint8_t *sst;
    uint64_t *st_full, *st_empty;
    int it, row0, row_first, tq, lt;  // row_first: the work tile's first row
    float scale_log2;
    float lr[2], dr[2];  // lse and D of the thread's two rows
} att90_dq_ctx;

// Key tile j: S, dP (in sc, dp) into dS, then dQ (64 x HS) += dS K. With NEXT, tile j+1's S
// and dP are issued first, and are in sc, dp when this returns. qa, oa: the Q and dO operand
// (att90_aop).
template <int HS, bool NEXT>
__device__ __forceinline__ void att90_dq_step(const att90_dq_ctx &c, int j, float (&sc)[32], float (&dp)[32],
                                              float (&dq)[HS / 2], const typename att90_aop<HS>::type &qa,
                                              const typename att90_aop<HS>::type &oa) {
    typedef att90_bwd_cfg<HS> C;
    const int s = (c.it + j) % C::STAGES, s1 = (c.it + j + 1) % C::STAGES;
    // sc[4 i + e]: row row0 + 8 (e >> 1), key 64 j + 8 i + 2 tq + (e & 1); dS in place in dp.
    // Only the last two key tiles (from the work tile's first row) reach past the diagonal
    if (64 * j + 63 > c.row_first) {
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = 64 * j + 8 * i + 2 * c.tq + (e & 1), row = c.row0 + 8 * (e >> 1);
                const float x = att90_exp2(fmaf(sc[4 * i + e], c.scale_log2, -c.lr[e >> 1]));
                const float p = key > row ? 0.0f : x;
                dp[4 * i + e] = p * (dp[4 * i + e] - c.dr[e >> 1]);
            }
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = att90_exp2(fmaf(sc[4 * i + e], c.scale_log2, -c.lr[e >> 1]));
                dp[4 * i + e] = p * (dp[4 * i + e] - c.dr[e >> 1]);
            }
    }
    sm90_wgmma_wait<0>();  // tile j-1's dQ product is done: its operands are free
    if (j > 0 && c.lt == 0) sm90_mbar_arrive(&c.st_empty[(c.it + j - 1) % C::STAGES]);
    if (NEXT) sm90_mbar_wait(&c.st_full[s1], ((c.it + j + 1) / C::STAGES) & 1);
    uint32_t da[16];
    sm90_pack_acc(da, dp);
    sm90_fence_regs(da);
    if (NEXT) {
        const uint32_t k1 = sm90_smem(c.sst + s1 * 2 * C::T64_BYTES);
        att90_two_products(sc, dp, qa, k1, oa, k1 + C::T64_BYTES);
    }
    sm90_wgmma_fence();
    att90_product_rs(dq, da, sm90_smem(c.sst + s * 2 * C::T64_BYTES));
    sm90_wgmma_commit();
    if (NEXT) {
        sm90_wgmma_wait<1>();  // tile j+1's S, dP are in; the dQ product may still run
        sm90_fence_acc(sc);
        sm90_fence_acc(dp);
    } else {
        sm90_wgmma_wait<0>();
        sm90_fence_acc(dq);
        if (c.lt == 0) sm90_mbar_arrive(&c.st_empty[s]);
    }
}

// dK and dV of 128 keys of one (b, kv head hk) per work tile (BKV = B NKV heads of n_kt tiles),
// the lightest (last keys) last; each consumer warpgroup owns 64 of the keys and walks the
// 64-query tiles at and after them, of each query head of the group in turn (GQA: the `group`
// heads hk group .. hk group + group - 1, in that order; without, group is 1 and the head is hk):
//   S^T = K Q^T, dP^T = V dO^T (K, V as A: from registers, read once a tile, at HS = 64; from
//   shared memory at 128), P^T from the saved lse, dS^T = P^T (dP^T - D);  dV += P^T dO,
//   dK += dS^T Q (P^T, dS^T from registers; dK, dV 64 x HS fp32 a warpgroup)
// so that dK and dV sum over the group's heads in registers, in a fixed order. GQA is a template
// parameter so that the kernel for NKV = NH (GPT-2's) is the one without the head loop.
template <int HS, bool GQA>
__global__ void __launch_bounds__(ATT90_THREADS, 1)
att90_bwd_dkv_kernel(const __grid_constant__ CUtensorMap map_k128, const __grid_constant__ CUtensorMap map_v128,
                     const __grid_constant__ CUtensorMap map_q64, const __grid_constant__ CUtensorMap map_do64,
                     floatX *__restrict__ dK, floatX *__restrict__ dV, const float *__restrict__ lse,
                     const float *__restrict__ Dvec, int T, int NKV, int group, int ldkv, int BKV, int n_kt, int G,
                     float scale_log2, float scale) {
#ifdef SM90_DEVICE_CODE
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    typedef att90_bwd_cfg<HS> C;
    uint8_t *skv = smem, *sst = skv + 4 * C::TILE_BYTES;
    const att90_bars bars = att90_bars_init(sst + 2 * C::STAGES * C::T64_BYTES, C::STAGES, 1, 33);
    float *rows = (float *)(sst + 2 * C::STAGES * C::T64_BYTES + 256);
    uint64_t *kv_full = bars.tile_full, *kv_empty = bars.tile_empty, *st_full = bars.st_full, *st_empty = bars.st_empty;
    const int wg = sm90_warpgroup();
    const int n_tiles = n_kt * BKV, n_q64 = (T + 63) / 64;
    const int grp = GQA ? group : 1, NH = NKV * grp;  // query heads per K/V head, query heads

    if (wg == 0) {
        sm90_setmaxnreg_dec<C::PRODUCER_REGS>();
        if (threadIdx.x / 32 == 1) {  // warp 1: each stage's 64 rows of lse and D
            int it = 0;
            for (int ti = 0;; ti++) {
                const int t = att90_read_tile(bars, bars.tile_sched, ti);
                if (t >= n_tiles) break;
                int kt, bk;
                att90_tile(t, BKV, n_kt, G, false, &kt, &bk);
                // query tile i of (b, h) per stage, for the group's heads h in turn (the producer's
                // order), in one loop (this warp has C::PRODUCER_REGS registers)
                const size_t bh0 = (size_t)(bk / NKV) * NH + (size_t)(bk % NKV) * grp;
                const float *lh = lse + bh0 * T, *dh = Dvec + bh0 * T;
                for (int j = grp * (n_q64 - 2 * kt), i = 2 * kt; j > 0; j--, it++) {
                    const int s = it % C::STAGES;
                    sm90_mbar_wait(&st_empty[s], ((it / C::STAGES) & 1) ^ 1);
                    att90_load_rows<true>(rows + s * 4 * ATT90_QUAD_STRIDE, lh, dh, i * 64, 64, T, threadIdx.x % 32,
                                          &st_full[s]);
                    if (++i == n_q64) {  // the next head's first tile
                        i = 2 * kt;
                        lh += T;
                        dh += T;
                    }
                }
            }
            return;
        }
        if (threadIdx.x != 0) return;
        int it = 0;
        for (int ti = 0;; ti++) {
            const int t = att90_publish_tile(bars, 1, ti, n_tiles);
            if (t >= n_tiles) break;
            int kt, bk;
            att90_tile(t, BKV, n_kt, G, false, &kt, &bk);
            const int b = bk / NKV, hk = bk % NKV, kb = ti & 1;
            // K then V, each HALVES boxes of 64 columns (TILE_HALF bytes) one after the other
            uint8_t *sk = skv + kb * 2 * C::TILE_BYTES;
            sm90_mbar_expect_tx(&kv_full[kb], 2 * C::TILE_BYTES);
            att90_load_pair<C::HALVES>(sk, sk + C::TILE_BYTES, C::TILE_HALF, &map_k128, &map_v128, hk * HS, kt * 128, b,
                                       &kv_full[kb]);
            for (int h = hk * grp; h < (hk + 1) * grp; h++)  // the group's query heads, in order
                for (int i = 2 * kt; i < n_q64; i++, it++) {
                    const int s = it % C::STAGES;
                    uint8_t *sq = sst + s * 2 * C::T64_BYTES;
                    sm90_mbar_wait(&st_empty[s], ((it / C::STAGES) & 1) ^ 1);
                    sm90_mbar_expect_tx(&st_full[s], 2 * C::T64_BYTES);
                    att90_load_pair<C::HALVES>(sq, sq + C::T64_BYTES, C::T64_HALF, &map_q64, &map_do64, h * HS, i * 64,
                                               b, &st_full[s]);
                }
        }
        return;
    }

    sm90_setmaxnreg_inc<C::CONSUMER_REGS>();
    const int cw = wg - 1, lt = threadIdx.x % 128, w = lt / 32, g = (lt % 32) / 4, tq = lt % 4;
    int it = 0;
    for (int ti = 0;; ti++) {
        const int t = att90_read_tile(bars, kv_full, ti);
        if (t >= n_tiles) break;
        int kt, bk;
        att90_tile(t, BKV, n_kt, G, false, &kt, &bk);
        const int b = bk / NKV, hk = bk % NKV, kb = ti & 1;
        const int key0 = kt * 128 + 64 * cw + 16 * w + g;  // this thread's keys: key0, key0 + 8
        // the warpgroup's 64 keys of half 0 (64 rows of 128 bytes on per consumer)
        const uint32_t k_addr = sm90_smem(skv + kb * 2 * C::TILE_BYTES) + cw * 8192;
        const uint32_t v_addr = k_addr + C::TILE_BYTES;
        float dk[HS / 2], dv[HS / 2], st[32], dpt[32];
#pragma unroll
        for (int i = 0; i < HS / 2; i++) dk[i] = dv[i] = 0.0f;
        // the zeros are set before any product is in flight (else ptxas serializes them: C7515)
        sm90_fence_acc(dk);
        sm90_fence_acc(dv);
        const int n = n_q64 - 2 * kt, n_steps = grp * n;  // query tiles per head; steps over the group
        att90_dkv_ctx c = {sst, st_full, st_empty, rows, it, kt, key0, tq, lt, scale_log2};
        float lq[16], dd[16];
        typename att90_aop<HS>::type ka, va;
        if constexpr (HS == 64) {
            att90_frags(ka, k_addr, w, lt % 32);
            att90_frags(va, v_addr, w, lt % 32);
            sm90_fence_regs(ka);
            sm90_fence_regs(va);
        } else {
            ka = k_addr;
            va = v_addr;
        }
        sm90_mbar_wait(&st_full[it % C::STAGES], (it / C::STAGES) & 1);
        if constexpr (HS == 64) att90_dkv_rows<HS>(c, 0, lq, dd);
        {
            const uint32_t q_addr = sm90_smem(sst + (it % C::STAGES) * 2 * C::T64_BYTES);
            att90_two_products(st, dpt, ka, q_addr, va, q_addr + C::T64_BYTES);
            sm90_wgmma_wait<0>();
            sm90_fence_acc(st);
            sm90_fence_acc(dpt);
        }
        // per step i (query tile qi of its head): P^T and dS^T of step i are formed while step
        // i-1's dV and dK products run; then step i+1's S^T, dP^T and step i's dV, dK are issued
        // together (across the heads of a group as within one)
        for (int i = 0, qi = 0; i + 1 < n_steps; i++) {
            att90_dkv_step<HS, true>(c, i, GQA ? qi : i, st, dpt, dk, dv, lq, dd, ka, va);
            if (GQA && ++qi == n) qi = 0;
        }
        att90_dkv_step<HS, false>(c, n_steps - 1, n - 1, st, dpt, dk, dv, lq, dd, ka, va);
        if (lt == 0) sm90_mbar_arrive(&kv_empty[kb]);  // K, V read for the last time
        it += n_steps;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int key = key0 + 8 * r;
            if (key < T) {
                const size_t at = ((size_t)b * T + key) * (size_t)ldkv + (size_t)hk * HS + 2 * tq;
                floatX *dkrow = dK + at, *dvrow = dV + at;
#pragma unroll
                for (int j = 0; j < HS / 8; j++) {
                    *reinterpret_cast<uint32_t *>(dkrow + 8 * j) =
                        sm90_pack_bf16(dk[4 * j + 2 * r] * scale, dk[4 * j + 2 * r + 1] * scale);
                    *reinterpret_cast<uint32_t *>(dvrow + 8 * j) = sm90_pack_bf16(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
                }
            }
        }
    }
#endif
}

// dQ of 128 queries of one (b, h) per work tile (BH = B NH heads of n_qt tiles), heaviest first;
// each consumer warpgroup owns 64 of them and walks the 64-key tiles (of K/V head h / group) up
// to the diagonal:
//   S = Q K^T, dP = dO V^T (Q, dO as A: from registers, read once a tile, at HS = 64; from
//   shared memory at 128), P from the saved lse, dS = P (dP - D);  dQ += dS K (dS from registers)
template <int HS>
__global__ void __launch_bounds__(ATT90_THREADS, 1)
att90_bwd_dq_kernel(const __grid_constant__ CUtensorMap map_q128, const __grid_constant__ CUtensorMap map_do128,
                    const __grid_constant__ CUtensorMap map_k64, const __grid_constant__ CUtensorMap map_v64,
                    floatX *__restrict__ dQ, const float *__restrict__ lse, const float *__restrict__ Dvec, int T,
                    int NH, int group, int ldq, int BH, int n_qt, int G, float scale_log2, float scale) {
#ifdef SM90_DEVICE_CODE
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    typedef att90_bwd_cfg<HS> C;
    uint8_t *sqd = smem, *sst = sqd + 4 * C::TILE_BYTES;
    const att90_bars bars = att90_bars_init(sst + 2 * C::STAGES * C::T64_BYTES, C::STAGES, 33, 1);
    float *rows = (float *)(sst + 2 * C::STAGES * C::T64_BYTES + 256);
    uint64_t *q_full = bars.tile_full, *q_empty = bars.tile_empty, *st_full = bars.st_full, *st_empty = bars.st_empty;
    const int wg = sm90_warpgroup();
    const int n_tiles = n_qt * BH, n_k64 = (T + 63) / 64;

    if (wg == 0) {
        sm90_setmaxnreg_dec<24>();
        if (threadIdx.x / 32 == 1) {  // warp 1: each work tile's 128 rows of lse and D
            for (int ti = 0;; ti++) {
                const int t = att90_read_tile(bars, bars.tile_sched, ti), qb = ti & 1;
                if (t >= n_tiles) {  // the consumers' full barrier needs this warp's arrivals too
                    sm90_mbar_arrive(&q_full[qb]);
                    break;
                }
                int qt, bh;
                att90_tile(t, BH, n_qt, G, true, &qt, &bh);
                att90_load_rows<false>(rows + qb * 256, lse + (size_t)bh * T, Dvec + (size_t)bh * T, qt * 128,
                                       128, T, threadIdx.x % 32, &q_full[qb]);
            }
            return;
        }
        if (threadIdx.x != 0) return;
        int it = 0;
        for (int ti = 0;; ti++) {
            const int t = att90_publish_tile(bars, 2, ti, n_tiles);
            if (t >= n_tiles) break;
            int qt, bh;
            att90_tile(t, BH, n_qt, G, true, &qt, &bh);
            const int b = bh / NH, h = bh % NH, hk = h / group, qb = ti & 1;  // hk: the head's K/V head
            // Q then dO, each HALVES boxes of 64 columns (TILE_HALF bytes) one after the other
            uint8_t *sq = sqd + qb * 2 * C::TILE_BYTES;
            sm90_mbar_expect_tx(&q_full[qb], 2 * C::TILE_BYTES);
            att90_load_pair<C::HALVES>(sq, sq + C::TILE_BYTES, C::TILE_HALF, &map_q128, &map_do128, h * HS, qt * 128, b,
                                       &q_full[qb]);
            const int n = min(2 * qt + 2, n_k64);
            for (int j = 0; j < n; j++, it++) {
                const int s = it % C::STAGES;
                uint8_t *sk = sst + s * 2 * C::T64_BYTES;
                sm90_mbar_wait(&st_empty[s], ((it / C::STAGES) & 1) ^ 1);
                sm90_mbar_expect_tx(&st_full[s], 2 * C::T64_BYTES);
                att90_load_pair<C::HALVES>(sk, sk + C::T64_BYTES, C::T64_HALF, &map_k64, &map_v64, hk * HS, j * 64, b,
                                           &st_full[s]);
            }
        }
        return;
    }

    sm90_setmaxnreg_inc<240>();
    const int cw = wg - 1, lt = threadIdx.x % 128, w = lt / 32, g = (lt % 32) / 4, tq = lt % 4;
    int it = 0;
    for (int ti = 0;; ti++) {
        const int t = att90_read_tile(bars, q_full, ti);
        if (t >= n_tiles) break;
        int qt, bh;
        att90_tile(t, BH, n_qt, G, true, &qt, &bh);
        const int b = bh / NH, h = bh % NH, qb = ti & 1;
        const int row0 = qt * 128 + 64 * cw + 16 * w + g;  // this thread's rows: row0, row0 + 8
        // the warpgroup's 64 rows of half 0 (64 rows of 128 bytes on per consumer)
        const uint32_t q_addr = sm90_smem(sqd + qb * 2 * C::TILE_BYTES) + cw * 8192;
        const uint32_t do_addr = q_addr + C::TILE_BYTES;
        float dq[HS / 2], sc[32], dp[32];
#pragma unroll
        for (int i = 0; i < HS / 2; i++) dq[i] = 0.0f;
        sm90_fence_acc(dq);  // (see the dK/dV kernel)
        const int n = min(2 * qt + 2, n_k64);
        typename att90_aop<HS>::type qa, oa;
        if constexpr (HS == 64) {
            att90_frags(qa, q_addr, w, lt % 32);
            att90_frags(oa, do_addr, w, lt % 32);
            sm90_fence_regs(qa);
            sm90_fence_regs(oa);
        } else {
            qa = q_addr;
            oa = do_addr;
        }
        float lr[2], dr[2];  // lse and D of the thread's rows, from the tile's buffer
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int tr = 64 * cw + 16 * w + g + 8 * r;
            lr[r] = sm90_lds_f(sm90_smem(rows + qb * 256 + tr));
            dr[r] = sm90_lds_f(sm90_smem(rows + qb * 256 + 128 + tr));
        }
        sm90_mbar_wait(&st_full[it % C::STAGES], (it / C::STAGES) & 1);
        {
            const uint32_t k_addr = sm90_smem(sst + (it % C::STAGES) * 2 * C::T64_BYTES);
            att90_two_products(sc, dp, qa, k_addr, oa, k_addr + C::T64_BYTES);
            sm90_wgmma_wait<0>();
            sm90_fence_acc(sc);
            sm90_fence_acc(dp);
        }
        // per key tile j, as the dK/dV kernel: dS of tile j formed while tile j-1's dQ product
        // runs, then tile j+1's S, dP and tile j's dQ product issued together
        att90_dq_ctx c = {sst, st_full, st_empty, it, row0, qt * 128, tq, lt, scale_log2, {lr[0], lr[1]},
                          {dr[0], dr[1]}};
        for (int j = 0; j + 1 < n; j++) att90_dq_step<HS, true>(c, j, sc, dp, dq, qa, oa);
        att90_dq_step<HS, false>(c, n - 1, sc, dp, dq, qa, oa);
        if (lt == 0) sm90_mbar_arrive(&q_empty[qb]);  // Q, dO read for the last time
        it += n;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row0 + 8 * r;
            if (row < T) {
                floatX *dqrow = dQ + ((size_t)b * T + row) * (size_t)ldq + (size_t)h * HS + 2 * tq;
#pragma unroll
                for (int i = 0; i < HS / 8; i++)
                    *reinterpret_cast<uint32_t *>(dqrow + 8 * i) =
                        sm90_pack_bf16(dq[4 * i + 2 * r] * scale, dq[4 * i + 2 * r + 1] * scale);
            }
        }
    }
#endif
}

// ---------------------------------------------------------------------------------------
// host side

static int att90_enabled = 1;  // attention_set_sm90: 0 sends every call to attention.cuh's kernels
static int att90_hs128 = 1;    // attention_set_sm90_hs128: 0 sends head size 128 there

static inline void attention_set_sm90(int on) { att90_enabled = on; }
// For measurements and tests (dev/attention_bench): 0 runs head size 128 on attention.cuh's
// mma.sync kernels while head size 64 stays here; 1 (the default) runs it here.
static inline void attention_set_sm90_hs128(int on) { att90_hs128 = on; }

// Whether the Hopper kernels run a call of head size hs, forward and backward (see the
// requirements above; the caller has checked the rest of the call): hs = 64, or 128 unless
// attention_set_sm90_hs128(0).
static inline int attention_sm90_usable(int hs) {
    if (!att90_enabled || !(hs == 64 || (hs == 128 && att90_hs128))) return 0;
    static signed char avail[ATT90_MAX_DEVICES + 1];  // per device: 0 not asked yet, 1 yes, -1 no
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= ATT90_MAX_DEVICES) dev = ATT90_MAX_DEVICES;
    if (avail[dev] == 0) avail[dev] = dev < ATT90_MAX_DEVICES && sm90_available() ? 1 : -1;
    return avail[dev] > 0;
}

// sizes within the kernels' int arithmetic (work tiles, token coordinates)
static inline void att90_check(int B, int T, int NH) {
    require((long long)B * NH * ((T + 63) / 64) <= 2147483647LL, "attention (Hopper): B * NH * T / 64 exceeds 2^31");
    require(T <= 2147483647 - 256, "attention (Hopper): T too large");
}

// A tensor map of the heads of a (B, T, ld) bf16 tensor whose rows start at p, ld elements
// apart: `cols` = heads * hs columns (q: NH heads, k and v: NKV, dout: NH with ld = NH * hs), in
// boxes of 64 columns (one head at hs = 64, one half of it at 128) by `rows` tokens of one
// sequence: ATT90_SWZ_COLS x rows x 2 bytes, the byte counts the kernels expect (Q_HALF,
// KV_HALF, TILE_HALF, T64_HALF); tokens past T read as zeros.
static inline void att90_map(CUtensorMap *map, const floatX *p, int cols, int ld, int T, int B, int rows) {
    sm90_matrix m;
    m.ptr = p;
    m.rows = T;
    m.cols = cols;
    m.ld = ld;
    cudaCheck(sm90_make_map(map, m, 2, ATT90_SWZ_COLS, rows, 3, B, (int64_t)T * ld));
}

// Persistent CTAs: one per SM (at most one per work tile). The first call on a device also
// opts the kernels into their shared memory there.
static inline unsigned att90_grid(long long tiles) {
    static int sms[ATT90_MAX_DEVICES];
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    require(dev < ATT90_MAX_DEVICES, "attention (Hopper): device index past ATT90_MAX_DEVICES");
    if (sms[dev] == 0) {
        cudaCheck(cudaFuncSetAttribute(att90_fwd_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       att90_fwd_cfg<64>::SMEM));
        cudaCheck(cudaFuncSetAttribute(att90_fwd_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       att90_fwd_cfg<128>::SMEM));
        const int smem64 = att90_bwd_cfg<64>::SMEM, smem128 = att90_bwd_cfg<128>::SMEM;
        const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
        cudaCheck(cudaFuncSetAttribute(att90_bwd_dkv_kernel<64, false>, a, smem64));
        cudaCheck(cudaFuncSetAttribute(att90_bwd_dkv_kernel<64, true>, a, smem64));
        cudaCheck(cudaFuncSetAttribute(att90_bwd_dq_kernel<64>, a, smem64));
        cudaCheck(cudaFuncSetAttribute(att90_bwd_dkv_kernel<128, false>, a, smem128));
        cudaCheck(cudaFuncSetAttribute(att90_bwd_dkv_kernel<128, true>, a, smem128));
        cudaCheck(cudaFuncSetAttribute(att90_bwd_dq_kernel<128>, a, smem128));
        cudaCheck(cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev));
    }
    return (unsigned)(tiles < sms[dev] ? tiles : sms[dev]);
}

// Heads per group of work tiles (att90_tile): enough that a group's tiles fill the grid.
// att90_set_group sets it instead, for measurements (dev/attention_bench -g): 0 all heads in
// one group, heaviest tiles first over all of them (the order before the groups); -1 this choice.
static int att90_group_set = -1;
static inline void att90_set_group(int heads) { att90_group_set = heads; }
static inline int att90_group(unsigned grid, int n, int BH) {
    const int G = att90_group_set == 0 ? BH : att90_group_set > 0 ? att90_group_set : (int)grid / n;
    return G < 1 ? 1 : G > BH ? BH : G;
}

template <int HS>
static inline void att90_forward(floatX *out, float *lse, const floatX *q, const floatX *k, const floatX *v, int B,
                                 int T, int NH, int NKV, int ldq, int ldkv, cudaStream_t s) {
    att90_check(B, T, NH);
    CUtensorMap mq, mk, mv;
    att90_map(&mq, q, NH * HS, ldq, T, B, ATT90_BM);
    att90_map(&mk, k, NKV * HS, ldkv, T, B, ATT90_BN);
    att90_map(&mv, v, NKV * HS, ldkv, T, B, ATT90_BN);
    const int n_qt = (T + ATT90_BM - 1) / ATT90_BM, BH = B * NH;
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)HS);
    const unsigned grid = att90_grid((long long)n_qt * BH);
    att90_fwd_kernel<HS><<<grid, ATT90_THREADS, att90_fwd_cfg<HS>::SMEM, s>>>(
        mq, mk, mv, out, lse, T, NH, NH / NKV, BH, n_qt, att90_group(grid, n_qt, BH), scale_log2);
    cudaLaunchCheck("att90_fwd_kernel");
}

// out (B, T, NH hs) = causal attention of q (rows ldq apart, NH heads of hs = 64 or 128) over k
// and v (rows ldkv apart, NKV heads, NKV dividing NH), lse (B, NH, T) (skipped when NULL), on
// the Hopper kernel; the caller (attention.cuh) has checked the call and attention_sm90_usable.
static inline void attention_forward_sm90(floatX *out, float *lse, const floatX *q, const floatX *k, const floatX *v,
                                          int B, int T, int NH, int NKV, int hs, int ldq, int ldkv, cudaStream_t s) {
    if (hs == 128) att90_forward<128>(out, lse, q, k, v, B, T, NH, NKV, ldq, ldkv, s);
    else att90_forward<64>(out, lse, q, k, v, B, T, NH, NKV, ldq, ldkv, s);
}

template <int HS>
static inline void att90_backward(floatX *dq, floatX *dk, floatX *dv, const float *Dvec, const floatX *dout,
                                  const floatX *q, const floatX *k, const floatX *v, const float *lse, int B, int T,
                                  int NH, int NKV, int ldq, int ldkv, cudaStream_t s) {
    typedef att90_bwd_cfg<HS> C;
    att90_check(B, T, NH);
    CUtensorMap k128, v128, q64, do64, q128, do128, k64, v64;
    att90_map(&k128, k, NKV * HS, ldkv, T, B, 128);
    att90_map(&v128, v, NKV * HS, ldkv, T, B, 128);
    att90_map(&q64, q, NH * HS, ldq, T, B, 64);
    att90_map(&do64, dout, NH * HS, NH * HS, T, B, 64);
    att90_map(&q128, q, NH * HS, ldq, T, B, 128);
    att90_map(&do128, dout, NH * HS, NH * HS, T, B, 128);
    att90_map(&k64, k, NKV * HS, ldkv, T, B, 64);
    att90_map(&v64, v, NKV * HS, ldkv, T, B, 64);
    const int BH = B * NH, BKV = B * NKV, group = NH / NKV, n_t128 = (T + 127) / 128;
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = 1.4426950408889634f * scale;
    const unsigned grid_kv = att90_grid((long long)n_t128 * BKV);
    const int G_kv = att90_group(grid_kv, n_t128, BKV);
    if (group == 1) {
        att90_bwd_dkv_kernel<HS, false><<<grid_kv, ATT90_THREADS, C::SMEM, s>>>(
            k128, v128, q64, do64, dk, dv, lse, Dvec, T, NKV, 1, ldkv, BKV, n_t128, G_kv, scale_log2, scale);
    } else {
        att90_bwd_dkv_kernel<HS, true><<<grid_kv, ATT90_THREADS, C::SMEM, s>>>(
            k128, v128, q64, do64, dk, dv, lse, Dvec, T, NKV, group, ldkv, BKV, n_t128, G_kv, scale_log2, scale);
    }
    cudaLaunchCheck("att90_bwd_dkv_kernel");
    const unsigned grid = att90_grid((long long)n_t128 * BH);
    att90_bwd_dq_kernel<HS><<<grid, ATT90_THREADS, C::SMEM, s>>>(q128, do128, k64, v64, dq, lse, Dvec, T, NH, group,
                                                                  ldq, BH, n_t128, att90_group(grid, n_t128, BH),
                                                                  scale_log2, scale);
    cudaLaunchCheck("att90_bwd_dq_kernel");
}

// dq, dk, dv (the layouts of q, k, v) = the gradient through the forward's (out, lse) given dout
// (B, T, NH hs) and the row dot products Dvec = rowsum(dout * out) (B, NH, T), on the Hopper
// kernels; the caller has checked the call and attention_sm90_usable and computed Dvec
// (attention.cuh's attention_backward). The dK/dV kernel's work tiles are per K/V head (B NKV
// of them per key tile), the dQ kernel's per query head; each has its own grid and head groups.
static inline void attention_backward_sm90(floatX *dq, floatX *dk, floatX *dv, const float *Dvec, const floatX *dout,
                                           const floatX *q, const floatX *k, const floatX *v, const float *lse, int B,
                                           int T, int NH, int NKV, int hs, int ldq, int ldkv, cudaStream_t s) {
    if (hs == 128) att90_backward<128>(dq, dk, dv, Dvec, dout, q, k, v, lse, B, T, NH, NKV, ldq, ldkv, s);
    else att90_backward<64>(dq, dk, dv, Dvec, dout, q, k, v, lse, B, T, NH, NKV, ldq, ldkv, s);
}

#endif // LLMC_ATTENTION_SM90_CUH
