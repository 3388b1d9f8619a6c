/*
matmul_sm90.cuh - the trainer's linear layers of short K on our Hopper GEMM (common/gemm_sm90.cuh,
its wide schedule: each consumer warpgroup computes its own 128 x 192 tiles, so that one's
epilogue runs while the other's products keep the tensor cores busy), with the epilogues that
llmc/matmul.cuh otherwise asks of cuBLASLt:

  MM90_BIAS      out = acc (+ bias)                       a forward, or a dinp (no bias)
  MM90_RESIDUAL  out = acc (+ bias) + residual            a projection that ends a block
  MM90_GELU      pre = acc (+ bias), out = gelu(pre)      both written (gelu of the fp32 sum)
  MM90_DGELU     out = acc * gelu'(aux)                   the dinp of the MLP projection

Why: at K = C = 768 (GPT-2 124M) a tile's products are short against its epilogue. cuBLASLt's
kernels and our cooperative one run the epilogue while the tensor cores wait, and cuBLASLt's
GELU epilogues (two outputs, or an aux matrix read) ran at ~540 TFLOP/s in a B = 64 step where
its plain GEMMs of those shapes ran at 720-760 (dev/RESULTS.md has both measurements).
Every sum is fp32 and rounded once to bf16, as in cuBLASLt's epilogues; the GELU is
llmc/gelu.cuh's (gelu_fwd_f, gelu_grad_f). Deterministic: no split-K, each output written once.

Row-major as matmul.cuh: out (M, N) = A (M, K) B^T with B (N, K) (a forward: B = weight), or
out = A B with B (K, N) (a dinp: B = weight (OC, C), trans_b). The bias is the accumulators'
initial value (read before the tile's products); the residual or the pre-activation comes into
the kernel's staging boxes by TMA, two boxes ahead of the one the epilogue works in, and the
result goes out from the same box by a TMA store.

Requirements (mm90_fits): an sm_90a build (SM90_GEMM_BUILD) on a compute 9.0 device, K <=
MM90_MAX_K (past it the wide tile is slower than cuBLASLt's kernels: dev/RESULTS.md), N and K
multiples of 8, every pointer 16-byte aligned, out not aliasing an input. Which kinds of call
take it is mm90_available's choice: the GELU and residual forwards, the two that measured
faster (dev/matmul_bench times every kind on both paths).
*/
#ifndef LLMC_MATMUL_SM90_CUH
#define LLMC_MATMUL_SM90_CUH

#include <stdio.h>
#include <stdlib.h>

#include "cuda_common.cuh"
#include "gelu.cuh"
#include "gemm_sm90.cuh"

#define MM90_MAX_K 1024

enum { MM90_BIAS = 0, MM90_RESIDUAL = 1, MM90_GELU = 2, MM90_DGELU = 3 };

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
// host side

// The calls that take the kernel where it fits, a bit each: MM90_BIAS .. MM90_DGELU as
// 1 << EPI, and the dinp without an epilogue as 1 << MM90_DINP. The trainer's are the two that
// measured faster than cuBLASLt at GPT-2 124M's B = 64 shapes (dev/matmul_bench: the GELU
// forward 1.14x, the residual forward 1.09x; the others 0.99-1.01x, dev/RESULTS.md); the
// tests and dev/matmul_bench set a MatmulContext's use_sm90 to others (MM90_ALL: every kind).
#define MM90_DINP 4
#define MM90_ALL 31
#define MM90_DEFAULT ((1 << MM90_RESIDUAL) | (1 << MM90_GELU))

// The bits of the calls that take it on this build and device (0 where it cannot run).
static inline int mm90_available(void) {
    static int avail = -1;
    if (avail < 0) avail = sm90_available() ? MM90_DEFAULT : 0;
    return avail;
}

// Whether the kernel takes out (M, N) = A (M, K) op(B), each pointer given (NULL: not used).
static inline int mm90_fits(int64_t M, int64_t N, int64_t K, const void *out, const void *pre, const void *a,
                            const void *b, const void *bias, const void *aux) {
    const void *p[6] = {out, pre, a, b, bias, aux};
    if (M <= 0 || N <= 0 || K <= 0 || K > MM90_MAX_K || N % 8 != 0 || K % 8 != 0 || M > INT32_MAX / 2) return 0;
    for (int i = 0; i < 6; i++)
        if (p[i] != NULL && ((uintptr_t)p[i]) % 16 != 0) return 0;
    return 1;
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

#endif // LLMC_MATMUL_SM90_CUH
