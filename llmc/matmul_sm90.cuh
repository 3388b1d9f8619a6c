/*
matmul_sm90.cuh - the trainer's linear layers of short K on our Hopper GEMM (common/gemm_sm90.cuh,
its wide schedule: each consumer warpgroup computes its own 128 x 192 tiles, so that one's
epilogue runs while the other's products keep the tensor cores busy), with the epilogues that
llmc/matmul.cuh otherwise asks of cuBLASLt:

  MM90_BIAS      out = acc (+ bias)                       a forward, or a dinp (no bias)
  MM90_RESIDUAL  out = acc (+ bias) + residual            a projection that ends a block
  MM90_GELU      pre = acc (+ bias), out = gelu(pre)      both written (gelu of the fp32 sum)
  MM90_DGELU     out = acc * gelu'(aux)                   the dinp of the MLP projection
  MM90_SWIGLU    gu = [gate | up] = acc, h = silu(gate) * up   the Llama / Qwen gate/up forward
                 (both written; a tile's 96 gate and 96 up columns of the same channels)
  MM90_DSWIGLU   dgu = [dh u silu'(g) | dh silu(g)], dh = acc  the down projection's dinp
                 (gu read, dh never written)

Why: at K = C = 768 (GPT-2 124M) a tile's products are short against its epilogue. cuBLASLt's
kernels and our cooperative one run the epilogue while the tensor cores wait, and cuBLASLt's
GELU epilogues (two outputs, or an aux matrix read) ran well below its plain GEMMs of those
shapes in a B = 64 step (dev/RESULTS.md has both measurements).
Every sum is fp32 and rounded once to bf16, as in cuBLASLt's epilogues; the GELU is
llmc/gelu.cuh's (gelu_fwd_f, gelu_grad_f). Deterministic: no split-K, each output written once.

Row-major as matmul.cuh: out (M, N) = A (M, K) B^T with B (N, K) (a forward: B = weight), or
out = A B with B (K, N) (a dinp: B = weight (OC, C), trans_b). The bias is the accumulators'
initial value (read before the tile's products); the residual or the pre-activation comes into
the kernel's staging boxes by TMA, two boxes ahead of the one the epilogue works in, and the
result goes out from the same box by a TMA store.

The SwiGLU kinds (llmc/swiglu.cuh's operation, its same fp32 math) save the memory passes of
the separate kernels: the forward's read of gu and the backward's write and read of dh. The
forward's B tile is two boxes, W's rows n0 .. n0 + 95 of the gate half and of the up half (a
3-D map of W as (K, I, 2), which fills rows past I with zeros in each half), so that the thread
holding a gate column's accumulators holds its up column's; its outputs leave in boxes of 32
columns (96 is not a multiple of 64) with the 64-byte swizzle. The backward's epilogue brings
gate and up in by TMA, two boxes a step, and writes dgate and dup over them.

Requirements (mm90_fits): an sm_90a build (SM90_GEMM_BUILD) on a compute 9.0 device, K <=
MM90_MAX_K (past it the wide tile is slower than cuBLASLt's kernels: dev/RESULTS.md), N and K
multiples of 8, every pointer 16-byte aligned, out not aliasing an input; the SwiGLU kinds
(mm90_fits_swiglu) K = C <= MM90_SWIGLU_MAX_K, I and C multiples of 8. Which kinds of call
take it is mm90_available's choice: the GELU and residual forwards, the two that measured
faster (dev/matmul_bench times every kind on both paths), and the SwiGLU forward, whose
unfused form is a GEMM and a memory-bound kernel (dev/matmul_bench -s swiglu times both forms
of both SwiGLU kinds; the backward's fused form measured slower).
*/
#ifndef LLMC_MATMUL_SM90_CUH
#define LLMC_MATMUL_SM90_CUH

#include <stdio.h>
#include <stdlib.h>

#include "cuda_common.cuh"
#include "gelu.cuh"
#include "gemm_sm90.cuh"
#include "swiglu.cuh"

#define MM90_MAX_K 1024
#define MM90_SWIGLU_MAX_K 2048  // the SwiGLU kinds: K = C of Qwen2.5-1.5B (1536) and Llama-3.2-1B (2048)

enum { MM90_BIAS = 0, MM90_RESIDUAL = 1, MM90_GELU = 2, MM90_DGELU = 3 };
// the SwiGLU kinds' bits in use_sm90 (after MM90_DINP's, below)
enum { MM90_SWIGLU = 5, MM90_DSWIGLU = 6 };

typedef struct {
    const floatX *bias;  // (N) or NULL
    int N;               // columns of the output
} mm90_args;

#ifdef SM90_DEVICE_CODE
// two bf16 at p (4-byte aligned) as floats
__device__ __forceinline__ float2 mm90_ld2(const floatX *p) {
    const unsigned v = __ldg(reinterpret_cast<const unsigned *>(p));
    return make_float2(sm90_bf16_lo(v), sm90_bf16_hi(v));
}

// x, opaque to the compiler from here on: what is computed from it stays after this point. The
// epilogue's addresses are the same for every tile; hoisted out of the tile loop, as the
// compiler otherwise does, they would hold registers that the 192 accumulators need.
__device__ __forceinline__ uint32_t mm90_opaque(uint32_t x) {
    asm volatile("" : "+r"(x));
    return x;
}

__device__ __forceinline__ void mm90_sts(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
#endif

// A warp's boxes of a wide tile (its 16 rows of each 64-row block, 64 columns a box), k = 0 .. 5:
// block b = k / 3 (rows 64 b + 16 w ..), columns 64 q .. of the tile, q = k % 3
#define MM90_BOXES 6

template <int EPI>
struct mm90_policy : sm90_wide_base {
    typedef mm90_args Args;
    static constexpr bool X_OUT = EPI == MM90_GELU;   // pre goes out through map_x
    // the residual or the pre-activation comes in through map_x, box by box into shared memory
    // (each thread's 4-byte loads of its pairs from global memory would take the L1 pipe that
    // the products' operands fill)
    static constexpr bool X_IN = EPI == MM90_RESIDUAL || EPI == MM90_DGELU;
    static constexpr int EPI_BUFFERS = X_OUT || X_IN ? 4 : 2;

    // Before the tile's products: the accumulators start from the bias (0 without; a warp's
    // 4-byte loads of it are one wavefront each: its 8 rows read the same address), read here
    // so that the loads land while the other warpgroup's products run; X_IN's first two boxes
    // are requested.
    __device__ static int tile_start(const Args &a, float (&d)[2][96], const sm90_tile &tile, const sm90_thread &th,
                                     sm90_staging &st, const CUtensorMap *map_x) {
#ifdef SM90_DEVICE_CODE
        if (X_IN) {
            sm90_box_wait_read(th, 2);  // the boxes of this warp's last tile but two are read out
            for (int k = 0; k < 2; k++)
                sm90_box_load(st, th, map_x, st.next + k, tile.n0 + 64 * (k % 3), tile.m0 + 64 * (k / 3) + 16 * th.w);
        }
        if constexpr (EPI == MM90_DGELU) {
            return 0;  // no bias: the products start from 0
        } else {
            // without a bias zeros: a d left undefined on one path and defined on the other
            // puts register moves between the products, which ptxas then serializes (C7515)
#pragma unroll
            for (int j = 0; j < 24; j++) {
                const int n = tile.n0 + 8 * j + 2 * th.t;
                const bool cn = n < a.N;  // N % 8 == 0: a column group is in or out whole
                const float2 bb = a.bias != NULL && cn ? mm90_ld2(a.bias + n) : make_float2(0.0f, 0.0f);
#pragma unroll
                for (int b = 0; b < 2; b++)
#pragma unroll
                    for (int e = 0; e < 4; e++) d[b][4 * j + e] = e & 1 ? bb.y : bb.x;
            }
        }
#endif
        return 1;
    }

    // A warp's rows of the tile: block b's rows 64 b + 16 w + g (+ 8), its 192 columns in three
    // boxes of 64; in each, column group c (8 columns) is the thread's pair at 8 j + 2 t,
    // j = 8 q + c, which the box holds at row g (g + 8), 16-byte chunk c ^ g, byte 4 t.
    __device__ static void epilogue(const Args &, float (&d)[2][96], const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d, const CUtensorMap *map_x = NULL) {
#ifdef SM90_DEVICE_CODE
        if (!X_OUT && !X_IN) {  // the bias is in the accumulators already
            sm90_store_tile<floatX, false>(st, th, map_d, d, tile);
            return;
        }
        const uint32_t at = th.g * 128 + 4 * th.t;  // the thread's word in its box's row g
#pragma unroll
        for (int k = 0; k < MM90_BOXES; k++) {
            const int b = k / 3, q = k % 3;
            const int col = tile.n0 + 64 * q, row = tile.m0 + 64 * b + 16 * th.w;
            uint32_t box, box_x = 0;
            if (X_OUT) {  // pre and out in a pair of boxes; the pair before last must be read out
                sm90_box_wait_read(th, 1);
                box_x = mm90_opaque(sm90_smem(sm90_box(st, st.next)) + at);
                box = mm90_opaque(sm90_smem(sm90_box(st, st.next + 1)) + at);
            } else {      // the residual's or pre-activation's box, in which the result is then written
                sm90_box_wait_load(st, st.next + k);
                box = mm90_opaque(sm90_smem(sm90_box(st, st.next + k)) + at);
            }
            // the box's 32 accumulators are taken here and not before: otherwise the compiler
            // computes later boxes' GELUs ahead, beside the live accumulators, and spills
#pragma unroll
            for (int i = 0; i < 32; i++) asm volatile("" : "+f"(d[b][32 * q + i]));
#pragma unroll
            for (int c = 0; c < 8; c++) {
                float *v = &d[b][4 * (8 * q + c)];
                const uint32_t sw = (uint32_t)((c ^ th.g) << 4);
                if (X_OUT) {
                    mm90_sts(box_x + sw, sm90_pack_bf16(v[0], v[1]));
                    mm90_sts(box_x + sw + 1024, sm90_pack_bf16(v[2], v[3]));
#pragma unroll
                    for (int e = 0; e < 4; e++) v[e] = gelu_fwd_f(v[e]);
                } else {
                    const uint32_t x0 = sm90_lds_u32(box + sw), x1 = sm90_lds_u32(box + sw + 1024);
                    const float x[4] = {sm90_bf16_lo(x0), sm90_bf16_hi(x0), sm90_bf16_lo(x1), sm90_bf16_hi(x1)};
#pragma unroll
                    for (int e = 0; e < 4; e++) v[e] = EPI == MM90_RESIDUAL ? v[e] + x[e] : v[e] * gelu_grad_f(x[e]);
                }
                mm90_sts(box + sw, sm90_pack_bf16(v[0], v[1]));
                mm90_sts(box + sw + 1024, sm90_pack_bf16(v[2], v[3]));
            }
            sm90_fence_async_smem();
            __syncwarp();
            if (th.lt % 32 == 0) {
                if (X_OUT) {
                    sm90_tma_store<false>(map_x, sm90_box(st, st.next), col, row, 0);
                    sm90_tma_store<false>(map_d, sm90_box(st, st.next + 1), col, row, 0);
                } else {
                    sm90_tma_store<false>(map_d, sm90_box(st, st.next + k), col, row, 0);
                }
                sm90_bulk_commit();
            }
            if (X_OUT) {
                st.next += 2;
            } else if (k + 2 < MM90_BOXES) {  // box k + 2 into the buffer box k - 2 was stored from
                sm90_box_wait_read(th, 2);
                sm90_box_load(st, th, map_x, st.next + k + 2, tile.n0 + 64 * ((k + 2) % 3),
                              tile.m0 + 64 * ((k + 2) / 3) + 16 * th.w);
            }
        }
        if (X_IN) st.next += MM90_BOXES;
#endif
    }
};

// ---------------------------------------------------------------------------------------
// the SwiGLU kinds (llmc/swiglu.cuh's operation in the epilogue)

typedef struct {
    int unused;  // the shapes are the tensor maps'
} mm90_swiglu_args;

#ifdef SM90_DEVICE_CODE
// box i of the warp's staging (X_IN) <- the 64 x 16 box of the 3-D map at (c0, c1, c2), on its mbarrier
__device__ __forceinline__ void mm90_box_load_3d(const sm90_staging &st, const sm90_thread &th, const CUtensorMap *map,
                                                 int i, int c0, int c1, int c2) {
    if (th.lt % 32 == 0) {
        uint64_t *bar = &st.bar[i % st.buffers];
        sm90_mbar_expect_tx(bar, SM90_BOX_BYTES);
        sm90_tma_load_3d(sm90_box(st, i), map, c0, c1, c2, bar);
    }
}
#endif

// MM90_SWIGLU: gu (M, 2I) = [gate | up] = A (M, K) W^T with W = gateupw (2I, K), and
// h (M, I) = silu(gate) * up, for the tile's 96 intermediate columns n0 .. n0 + 95: its B tile
// is W's rows n0 .. of the gate half and I + n0 .. of the up half (B_HALVES: a 3-D map of W as
// (K, I, 2), rows past I zeros), so accumulator column 8 j + 2 t + e holds gate column
// n0 + 8 j + 2 t + e for j < 12 and the up column of the same channel at j + 12: the thread
// that has a gate value has its up value. Gate and up are rounded to bf16 (the stored gu, which
// the backward reads), and h is swiglu_forward's of those rounded values, so that h is the
// same whether kept or recomputed (-r 1) from gu. 96 columns are three boxes of 32: the outputs
// go out in boxes of 16 rows x 64 bytes with the 64-byte swizzle (chunk c of row r at
// c ^ ((r >> 1) & 3): conflict-free for the 4-byte stores of a warp), gate and up through
// map_d (gu as (I, 2, M): column, half, row), h through map_x ((I, M, 1)). A warp's staging
// (EPI_BUFFERS = 3 boxes of 2 KiB) holds two steps of three 1 KiB boxes (gate, up, h).
struct mm90_swiglu_policy : sm90_wide_base {
    typedef mm90_swiglu_args Args;
    static constexpr int TILE_N = 96;
    static constexpr bool B_HALVES = true;
    static constexpr bool X_OUT = true;  // h through map_x
    static constexpr int EPI_BUFFERS = 3;

    // no bias: the products start from 0 (d is not written, as MM90_DGELU's)
    __device__ static int tile_start(const Args &, float (&)[2][96], const sm90_tile &, const sm90_thread &,
                                     sm90_staging &, const CUtensorMap *) {
        return 0;
    }

    // six steps a tile: block b (rows 64 b + 16 w ..), 32 columns 32 q .. of the 96: column group
    // c (8 columns, one 16-byte chunk) is the thread's gate pair at j = 4 q + c, up at j + 12
    __device__ static void epilogue(const Args &, float (&d)[2][96], const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d, const CUtensorMap *map_x) {
#ifdef SM90_DEVICE_CODE
        const uint32_t at = th.g * 64 + 4 * th.t;  // the thread's word in row g of a box (row g + 8: + 512)
        const uint32_t swz = (uint32_t)((th.g >> 1) & 3);  // rows g and g + 8 alike
#pragma unroll
        for (int k = 0; k < 6; k++) {
            const int b = k / 3, q = k % 3;
            const int col = tile.n0 + 32 * q, row = tile.m0 + 64 * b + 16 * th.w;
            // the step before last's three boxes are read out: this step's are free
            sm90_box_wait_read(th, 1);
            uint8_t *box = st.box0 + (st.next & 1) * 3072;
            const uint32_t bg = mm90_opaque(sm90_smem(box) + at);
            // this step's accumulators are taken here and not before (see mm90_policy's epilogue)
#pragma unroll
            for (int i = 0; i < 16; i++) asm volatile("" : "+f"(d[b][16 * q + i]), "+f"(d[b][48 + 16 * q + i]));
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const float *g = &d[b][4 * (4 * q + c)], *u = &d[b][4 * (4 * q + c + 12)];
                const uint32_t sw = ((uint32_t)c ^ swz) << 4;
                const uint32_t g01 = sm90_pack_bf16(g[0], g[1]), g23 = sm90_pack_bf16(g[2], g[3]);
                const uint32_t u01 = sm90_pack_bf16(u[0], u[1]), u23 = sm90_pack_bf16(u[2], u[3]);
                const float gr[4] = {sm90_bf16_lo(g01), sm90_bf16_hi(g01), sm90_bf16_lo(g23), sm90_bf16_hi(g23)};
                const float ur[4] = {sm90_bf16_lo(u01), sm90_bf16_hi(u01), sm90_bf16_lo(u23), sm90_bf16_hi(u23)};
                float h[4];
#pragma unroll
                for (int e = 0; e < 4; e++) h[e] = gr[e] * swiglu_sigmoid(gr[e]) * ur[e];  // swiglu_forward's
                mm90_sts(bg + sw, g01);
                mm90_sts(bg + sw + 512, g23);
                mm90_sts(bg + 1024 + sw, u01);
                mm90_sts(bg + 1024 + sw + 512, u23);
                mm90_sts(bg + 2048 + sw, sm90_pack_bf16(h[0], h[1]));
                mm90_sts(bg + 2048 + sw + 512, sm90_pack_bf16(h[2], h[3]));
            }
            sm90_fence_async_smem();
            __syncwarp();
            if (th.lt % 32 == 0) {
                sm90_tma_store<false>(map_d, box, col, 0, row);          // gate
                sm90_tma_store<false>(map_d, box + 1024, col, 1, row);   // up
                sm90_tma_store<false>(map_x, box + 2048, col, row, 0);   // h
                sm90_bulk_commit();
            }
            st.next++;
        }
#endif
    }
};

// MM90_DSWIGLU: the down projection's dinp with swiglu_backward in the epilogue: the tile's
// dh (128 x 192 of (M, I)) = A (M, K) B, B = downw (K, I) rows, stays in the accumulators;
// gate and up of its columns come in from gu (map_x, (I, 2, M) as MM90_SWIGLU's map_d, boxes
// of 64 columns, 128-byte swizzle) two boxes a step, into the pair of staging boxes in which
// dgate (dh u silu'(g)) and dup (dh silu(g)) are then written and stored through map_d (dgu,
// the same view). dh is never rounded to bf16 (the unfused path rounds it once more). Each
// element of gu is read before the element of dgu at its place is written, by the same
// thread: dgu may be gu (in place). Four boxes a warp: the pairs of two steps; each step's
// pair is requested two steps ahead (the first two in tile_start, during the products).
struct mm90_dswiglu_policy : sm90_wide_base {
    typedef mm90_swiglu_args Args;
    static constexpr bool X_IN = true;
    static constexpr int EPI_BUFFERS = 4;

    // step k's pair: boxes st.next + 2 k (gate) and + 1 (up)
    __device__ static void load_pair(const sm90_staging &st, const sm90_thread &th, const CUtensorMap *map_x,
                                     const sm90_tile &tile, int k) {
#ifdef SM90_DEVICE_CODE
        const int col = tile.n0 + 64 * (k % 3), row = tile.m0 + 64 * (k / 3) + 16 * th.w;
        mm90_box_load_3d(st, th, map_x, st.next + 2 * k, col, 0, row);
        mm90_box_load_3d(st, th, map_x, st.next + 2 * k + 1, col, 1, row);
#endif
    }

    __device__ static int tile_start(const Args &, float (&)[2][96], const sm90_tile &tile, const sm90_thread &th,
                                     sm90_staging &st, const CUtensorMap *map_x) {
#ifdef SM90_DEVICE_CODE
        sm90_box_wait_read(th, 0);  // the boxes of this warp's last tile are read out
        load_pair(st, th, map_x, tile, 0);
        load_pair(st, th, map_x, tile, 1);
#endif
        return 0;  // no bias: the products start from 0
    }

    __device__ static void epilogue(const Args &, float (&d)[2][96], const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d, const CUtensorMap *map_x) {
#ifdef SM90_DEVICE_CODE
        const uint32_t at = th.g * 128 + 4 * th.t;  // the thread's word in its box's row g
#pragma unroll
        for (int k = 0; k < MM90_BOXES; k++) {
            const int b = k / 3, q = k % 3;
            const int col = tile.n0 + 64 * q, row = tile.m0 + 64 * b + 16 * th.w;
            const int i = st.next + 2 * k;
            sm90_box_wait_load(st, i);
            sm90_box_wait_load(st, i + 1);
            const uint32_t bg = mm90_opaque(sm90_smem(sm90_box(st, i)) + at);
            const uint32_t bu = mm90_opaque(sm90_smem(sm90_box(st, i + 1)) + at);
#pragma unroll
            for (int j = 0; j < 32; j++) asm volatile("" : "+f"(d[b][32 * q + j]));
#pragma unroll
            for (int c = 0; c < 8; c++) {
                const float *v = &d[b][4 * (8 * q + c)];
                const uint32_t sw = (uint32_t)((c ^ th.g) << 4);
                const uint32_t g0 = sm90_lds_u32(bg + sw), g1 = sm90_lds_u32(bg + sw + 1024);
                const uint32_t u0 = sm90_lds_u32(bu + sw), u1 = sm90_lds_u32(bu + sw + 1024);
                const float g[4] = {sm90_bf16_lo(g0), sm90_bf16_hi(g0), sm90_bf16_lo(g1), sm90_bf16_hi(g1)};
                const float u[4] = {sm90_bf16_lo(u0), sm90_bf16_hi(u0), sm90_bf16_lo(u1), sm90_bf16_hi(u1)};
                float dg[4], du[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {  // swiglu_backward's
                    const float x = g[e], sg = swiglu_sigmoid(x);
                    dg[e] = v[e] * u[e] * (sg * (1.0f + x * (1.0f - sg)));
                    du[e] = v[e] * (x * sg);
                }
                mm90_sts(bg + sw, sm90_pack_bf16(dg[0], dg[1]));
                mm90_sts(bg + sw + 1024, sm90_pack_bf16(dg[2], dg[3]));
                mm90_sts(bu + sw, sm90_pack_bf16(du[0], du[1]));
                mm90_sts(bu + sw + 1024, sm90_pack_bf16(du[2], du[3]));
            }
            sm90_fence_async_smem();
            __syncwarp();
            if (th.lt % 32 == 0) {
                sm90_tma_store<false>(map_d, sm90_box(st, i), col, 0, row);
                sm90_tma_store<false>(map_d, sm90_box(st, i + 1), col, 1, row);
                sm90_bulk_commit();
            }
            if (k + 2 < MM90_BOXES) {  // step k + 2's pair into these boxes, once the stores have read them
                sm90_box_wait_read(th, 0);
                load_pair(st, th, map_x, tile, k + 2);
            }
        }
        st.next += 2 * MM90_BOXES;
#endif
    }
};

// ---------------------------------------------------------------------------------------
// host side

// The calls that take the kernel where it fits, a bit each: MM90_BIAS .. MM90_DGELU as
// 1 << EPI, the dinp without an epilogue as 1 << MM90_DINP, the SwiGLU forward and backward as
// 1 << MM90_SWIGLU, 1 << MM90_DSWIGLU. The trainer's: the two that measured faster than
// cuBLASLt at GPT-2 124M's B = 64 shapes (dev/matmul_bench: the GELU and the residual forward;
// the others within noise of it, dev/RESULTS.md), and the SwiGLU forward (only
// the Llama / Qwen MLP calls it; faster than cuBLASLt's GEMM and the SwiGLU kernel, where the
// fused backward measured slower than its unfused pair and is not taken); the tests and
// dev/matmul_bench set a MatmulContext's use_sm90 to others (MM90_ALL: every kind).
#define MM90_DINP 4
#define MM90_ALL 127
#define MM90_DEFAULT ((1 << MM90_RESIDUAL) | (1 << MM90_GELU) | (1 << MM90_SWIGLU))

// The bits of the calls that take it on this build and device (0 where it cannot run).
static inline int mm90_available(void) {
    static int avail = -1;
    if (avail < 0) avail = sm90_available() ? MM90_DEFAULT : 0;
    return avail;
}

// Whether the kernel takes out (M, N) = A (M, K) op(B) with K <= max_k, each pointer given
// (NULL: not used).
static inline int mm90_fits_k(int64_t M, int64_t N, int64_t K, int64_t max_k, const void *out, const void *pre,
                              const void *a, const void *b, const void *bias, const void *aux) {
    const void *p[6] = {out, pre, a, b, bias, aux};
    if (M <= 0 || N <= 0 || K <= 0 || K > max_k || N % 8 != 0 || K % 8 != 0 || M > INT32_MAX / 2) return 0;
    for (int i = 0; i < 6; i++)
        if (p[i] != NULL && ((uintptr_t)p[i]) % 16 != 0) return 0;
    return 1;
}

// The same for the kinds of MM90_BIAS .. MM90_DGELU and the dinp (K <= MM90_MAX_K).
static inline int mm90_fits(int64_t M, int64_t N, int64_t K, const void *out, const void *pre, const void *a,
                            const void *b, const void *bias, const void *aux) {
    return mm90_fits_k(M, N, K, MM90_MAX_K, out, pre, a, b, bias, aux);
}

// Whether the SwiGLU kinds take M tokens of K channels into I intermediate ones (the forward:
// gu (M, 2I), h (M, I) from A (M, K) and W (2I, K); the backward: dgu (M, 2I) from A (M, K), W
// (K, I) and gu): K <= MM90_SWIGLU_MAX_K, I and K multiples of 8, every pointer 16-byte aligned.
static inline int mm90_fits_swiglu(int64_t M, int64_t K, int64_t I, const void *out, const void *out2, const void *a,
                                   const void *w, const void *gu) {
    return mm90_fits_k(M, I, K, MM90_SWIGLU_MAX_K, out, out2, a, w, gu, NULL) && I <= INT32_MAX / 2;
}

// out (M, N) = A (M, K) B^T, B (N, K) rows (a forward), or with trans_b out = A B, B (K, N) rows
// (a dinp), through epilogue EPI (pre: GELU's pre-activation output). The caller has checked
// mm90_fits; the return is the launch's status.
template <int EPI>
static inline cudaError_t mm90_gemm(floatX *out, floatX *pre, const floatX *A, const floatX *B, int trans_b,
                                    const floatX *bias, const floatX *aux, int M, int N, int K, cudaStream_t s) {
    sm90_problem p;
    memset(&p, 0, sizeof(p));
    p.a = {A, M, K, K};
    p.b = trans_b ? sm90_matrix{B, K, N, N} : sm90_matrix{B, N, K, K};
    p.d = {out, M, N, N};
    p.x = {mm90_policy<EPI>::X_IN ? aux : pre, M, N, N};  // X_OUT's pre, X_IN's residual or pre-activation
    p.trans_a = 0;
    p.trans_b = trans_b;
    p.M = M;
    p.N = N;
    p.K = K;
    p.splits = 1;
    cudaError_t e = sm90_gemm_check(p, 2);
    if (e != cudaSuccess) return e;
    const mm90_args a = {bias, N};
    return trans_b ? sm90_gemm_launch<mm90_policy<EPI>, floatX, 0, 1>(p, a, s)
                   : sm90_gemm_launch<mm90_policy<EPI>, floatX, 0, 0>(p, a, s);
}

// gu (M, 2I) as a 3-D array (I, 2, M): column, half (0 gate, 1 up), row; boxes of box_cols x 16 rows
static inline cudaError_t mm90_gu_map(CUtensorMap *map, const floatX *gu, int M, int I, int box_cols,
                                      CUtensorMapSwizzle swizzle) {
    const int64_t dims[3] = {I, 2, M}, strides[2] = {I, 2 * (int64_t)I};
    const int box[3] = {box_cols, 1, 16};
    return sm90_make_map_3d(map, gu, 2, 3, dims, strides, box, swizzle);
}

// MM90_SWIGLU: gu (M, 2I) = A (M, K) W^T, W = gateupw (2I, K), and h (M, I) = silu(gate) * up.
// The caller has checked mm90_fits_swiglu; the return is the launch's status.
static inline cudaError_t mm90_swiglu(floatX *gu, floatX *h, const floatX *A, const floatX *W, int M, int K, int I,
                                      cudaStream_t s) {
    typedef mm90_swiglu_policy P;
    sm90_problem p;
    memset(&p, 0, sizeof(p));
    p.a = {A, M, K, K};
    p.M = M;
    p.N = I;
    p.K = K;
    p.splits = 1;
    const sm90_shape shape = sm90_make_shape(p, sm90_tile_of<P>::BM, P::TILE_N);
    CUtensorMap ma, mb, md, mx;
    cudaError_t e = sm90_make_operand_map(&ma, p.a, 64, sm90_tile_of<P>::BM);
    if (e == cudaSuccess) {  // W as (K, I, 2): the gate rows, then the up rows; boxes of 64 K x 96 rows
        const int64_t dims[3] = {K, I, 2}, strides[2] = {K, (int64_t)I * K};
        const int box[3] = {64, P::BN / 2, 1};
        e = sm90_make_map_3d(&mb, W, 2, 3, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
    }
    if (e == cudaSuccess) e = mm90_gu_map(&md, gu, M, I, 32, CU_TENSOR_MAP_SWIZZLE_64B);
    if (e == cudaSuccess) {  // h (M, I) as (I, M, 1)
        const int64_t dims[3] = {I, M, 1}, strides[2] = {I, (int64_t)I * M};
        const int box[3] = {32, 16, 1};
        e = sm90_make_map_3d(&mx, h, 2, 3, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_64B);
    }
    if (e != cudaSuccess) return e;
    const mm90_swiglu_args a = {0};
    return sm90_gemm_run<P, 0, 0>(ma, mb, md, mx, shape, a, s);
}

// MM90_DSWIGLU: dgu (M, 2I) = swiglu_backward of dh = A (M, K) B, B = downw (K, I) rows, with
// gu the forward's (M, 2I); dgu may be gu. The caller has checked mm90_fits_swiglu.
static inline cudaError_t mm90_dswiglu(floatX *dgu, const floatX *A, const floatX *B, const floatX *gu, int M, int K,
                                       int I, cudaStream_t s) {
    typedef mm90_dswiglu_policy P;
    sm90_problem p;
    memset(&p, 0, sizeof(p));
    p.a = {A, M, K, K};
    p.b = {B, K, I, I};
    p.M = M;
    p.N = I;
    p.K = K;
    p.splits = 1;
    const sm90_shape shape = sm90_make_shape(p, sm90_tile_of<P>::BM, P::BN);
    CUtensorMap ma, mb, md, mx;
    cudaError_t e = sm90_make_operand_map(&ma, p.a, 64, sm90_tile_of<P>::BM);
    if (e == cudaSuccess) e = sm90_make_operand_map(&mb, p.b, 64, 64);
    if (e == cudaSuccess) e = mm90_gu_map(&md, dgu, M, I, 64, CU_TENSOR_MAP_SWIZZLE_128B);
    if (e == cudaSuccess) e = mm90_gu_map(&mx, gu, M, I, 64, CU_TENSOR_MAP_SWIZZLE_128B);
    if (e != cudaSuccess) return e;
    const mm90_swiglu_args a = {0};
    return sm90_gemm_run<P, 0, 1>(ma, mb, md, mx, shape, a, s);
}

#endif // LLMC_MATMUL_SM90_CUH
