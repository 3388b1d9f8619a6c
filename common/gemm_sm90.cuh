/*
gemm_sm90.cuh - our own Hopper GEMM (sm_90a): wgmma on operands that TMA bulk tensor copies
bring into shared memory, for the products cuBLASLt cannot fuse our work into.

    D (M x N) (+)= A (M x K) B (K x N), bf16 operands, fp32 accumulation

Each operand is a row-major matrix in global memory with a row stride, in either orientation
("K-major": its rows run along K; "MN-major": its rows run along M or N), so the three
products of a linear layer and its gradients need no transposed copies:
    y  = x W^T     A = x (K-major),      B = W (K-major: N rows of K)
    dx = dy W      A = dy (K-major),     B = W (MN-major: K rows of N)
    dW = dy^T x    A = dy (MN-major),    B = x (MN-major)

The kernel (one CTA per SM, persistent): warpgroup 0 is the producer, one thread of which
issues the TMA loads of 128 x 64 A tiles and 64 x 256 B tiles into a ring of stages, each
completing on its "full" mbarrier; warpgroups 1 and 2 are consumers, each computing 64 rows
of a 128 x 256 output tile with wgmma (m64n256k16) and releasing a stage through its "empty"
mbarrier once the tensor cores have read it. setmaxnreg moves registers from the producer to
the consumers (128 fp32 accumulators each). Tiles are visited in groups of 8 row tiles so
that CTAs running at the same time share their operand tiles in L2. The epilogue stages the
output through shared memory, each warp its own 16 rows in boxes of 128-byte rows, and writes
them with TMA stores (or TMA reduce-adds, for D += ...) that run on while the warp goes on.

What a product does besides multiplying is its policy, a struct of static device functions
that the kernel calls at fixed points (see sm90_plain below):
  - A_REGS: A is not read by wgmma from shared memory but by the policy, which loads the
    stage's A tile (ldmatrix) and may transform it in registers before the product
    (flce turns stored probabilities into dlogits there). ptxas serializes the products
    (info C7513) when it can move a K step's fragment loads next to that step's product: it
    can within one basic block, so policies compute their fragments in straight-line code
    behind a warp-uniform branch (flce's two cases; dev/gemm_sm90.cu's probe shows it);
  - STAGE_EXTRA: bytes the producer brings into each stage beside A and B (per-row data);
  - epilogue: what happens to the fp32 accumulators of a finished tile;
  - PINGPONG: the two consumer warpgroups take turns over tiles of 64 x 256 instead of
    sharing tiles of 128 x 256, so that one's epilogue runs while the other's products keep
    the tensor cores busy (CUTLASS's "ping-pong" schedule). It pays where the epilogue is long
    against the main loop (flce's logits: an exponential per element, K = H of ~1K); each
    stage then brings half the A rows for the same B, so more operand traffic per product.
  - WIDE (sm90_wide_base): ping-pong over tiles of 128 x 192, each warpgroup's own, as two
    m64n192k16 products per K step of 16 on the same B (192 accumulators a thread). Per
    product it moves ~8% more shared memory than the cooperative 128 x 256 tile, whose
    tensor time alone fills the SM's 128 bytes a clock (dev/RESULTS.md), and ~13% less than
    the 64 x 256 ping-pong, while each warpgroup's epilogue runs beside the other's products:
    the tile for short K with a heavy epilogue (QuACK's logits GEMM takes it too). SS only.
  - BN = 224 ("narrow"): cooperative tiles of 128 x 224 (m64n224k16, 112 accumulators a
    thread) on an MN-major B, A in registers: an N of 896 in four tiles where 256-column ones
    leave an eighth of the products on zero columns (flce's gradient GEMMs at Qwen2.5-0.5B's
    hidden size). B still comes in whole 64-column boxes, the last half of the fourth unread.
  - B_HALVES, TILE_N: a K-major B tile made of two boxes, rows n0 .. of each half of a stacked
    weight (a 3-D map the caller makes, sm90_gemm_run), the tile advancing by TILE_N = BN / 2
    columns: llmc/matmul_sm90.cuh's SwiGLU forward gets a channel's gate and up columns into
    the same thread's accumulators that way.
  - CLUSTER_M = 2: CTAs in clusters of two on adjacent row tiles of one column (cooperative
    tiles, an MN-major B): each CTA's producer loads half of a stage's B box and multicasts
    it into both CTAs, and each consumer warpgroup frees a stage in both, so that B crosses
    from L2 once for the pair (flce's two d_W GEMMs, whose B, h or v' h, every row tile of
    the vocabulary reads again). The remote release is the arrive's default (CTA-scope) one:
    at cluster scope it stalled the kernel to 1.7x its cycles (dev/RESULTS.md). Wide tiles on
    a K-major B pair the same way: each CTA loads BN / 2 of the box's rows (flce's logits GEMM,
    whose two token tiles of a cluster read the same rows of W).
Split-K: the K range can be cut into `splits` parts, each writing its own slice of a 3-D
output (split, M, N), summed afterwards in a fixed order; no float atomics anywhere, so every
result is bitwise repeatable.

Requirements (checked by sm90_gemm_check): pointers 16-byte aligned, row strides multiples of
8 elements (16 bytes), K >= 1. M, N, K need not be multiples of the tile: TMA fills reads past
the edge with zeros and clips writes.

The device code needs the sm_90a target (`-gencode arch=compute_90a,code=sm_90a`): builds for
other targets compile it to nothing, define no SM90_GEMM_BUILD, and callers use cuBLASLt.
*/
#ifndef GEMM_SM90_CUH
#define GEMM_SM90_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SM90_DEVICE_CODE 1
#endif

#define SM90_BM 128            // output rows per CTA tile: 64 per consumer warpgroup
#define SM90_BN 256            // output columns per CTA tile
#define SM90_BK 64             // K per stage: one 128-byte swizzle row of bf16
#define SM90_THREADS 384       // producer warpgroup + 2 consumer warpgroups
#define SM90_GROUP_M 8         // row tiles per raster group
#define SM90_BOX_BYTES 2048    // an epilogue box: a warp's 16 rows x 128 bytes
#define SM90_CONSUMER_WARPS 8
#define SM90_SMEM_LIMIT 232448 // the sm_90 per-block opt-in maximum (227 KiB)
#define SM90_MAX_DEVICES 64    // devices whose cluster occupancy a launch remembers

// ---------------------------------------------------------------------------------------
// PTX wrappers

__device__ __forceinline__ uint32_t sm90_smem(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// The thread's warpgroup, broadcast from lane 0 so that the compiler sees it warp-uniform: what
// a kernel computes from it, down to its stages and wgmma descriptors, stays in uniform registers
__device__ __forceinline__ int sm90_warpgroup() {
    return __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
}

// Loads by shared address. Through a C pointer into the kernel's aligned dynamic buffer (its
// address passed through an integer) the compiler emits generic loads, which wait on the long
// scoreboard like global ones; volatile keeps them after the stage's mbarrier wait.
__device__ __forceinline__ float2 sm90_lds_f2(uint32_t addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
    return v;
}
__device__ __forceinline__ int2 sm90_lds_i2(uint32_t addr) {
    int2 v;
    asm volatile("ld.shared.v2.s32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr));
    return v;
}
__device__ __forceinline__ uint32_t sm90_lds_u32(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr));
    return v;
}
__device__ __forceinline__ uint4 sm90_lds_u4(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
    return v;
}
__device__ __forceinline__ uint32_t sm90_lds_u8(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.u8 %0, [%1];" : "=r"(v) : "r"(addr));
    return v;
}
__device__ __forceinline__ float sm90_lds_f(uint32_t addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
    return v;
}
__device__ __forceinline__ void sm90_sts_f(uint32_t addr, float v) {
    asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}
__device__ __forceinline__ int sm90_lds_i(uint32_t addr) {
    int v;
    asm volatile("ld.shared.s32 %0, [%1];" : "=r"(v) : "r"(addr));
    return v;
}

__device__ __forceinline__ void sm90_mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sm90_smem(bar)), "r"(count) : "memory");
}

// the producer's arrival: the stage will be full once `bytes` have landed
__device__ __forceinline__ void sm90_mbar_expect_tx(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sm90_smem(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void sm90_mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sm90_smem(bar)) : "memory");
}

__device__ __forceinline__ void sm90_mbar_wait(uint64_t *bar, unsigned parity) {
    const uint32_t addr = sm90_smem(bar);
    uint32_t done = 0;
    do {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(addr), "r"(parity)
            : "memory");
    } while (!done);
}

// a 2-D box of a tensor map into shared memory, completing on bar
__device__ __forceinline__ void sm90_tma_load(void *dst, const CUtensorMap *map, int c0, int c1, uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(sm90_smem(dst)), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(sm90_smem(bar))
        : "memory");
}

// a 3-D box of a tensor map into shared memory, completing on bar
__device__ __forceinline__ void sm90_tma_load_3d(void *dst, const CUtensorMap *map, int c0, int c1, int c2,
                                                 uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];" ::"r"(sm90_smem(dst)), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(sm90_smem(bar))
        : "memory");
}

// A 2-D box into the same shared-memory offset of every CTA of the cluster in cta_mask, each
// completing on its own barrier at bar's offset.
__device__ __forceinline__ void sm90_tma_load_mc(void *dst, const CUtensorMap *map, int c0, int c1, uint64_t *bar,
                                                 uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
        "[%1, {%2, %3}], [%4], %5;" ::"r"(sm90_smem(dst)), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(sm90_smem(bar)),
        "h"(cta_mask)
        : "memory");
}

// This CTA's rank in its cluster.
__device__ __forceinline__ uint32_t sm90_cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// An arrival on the barrier at bar's offset in CTA `cta` of the cluster, with the arrive's
// default release at CTA scope (one at cluster scope, every K step, stalled the kernel:
// dev/RESULTS.md).
__device__ __forceinline__ void sm90_mbar_arrive_remote(uint64_t *bar, uint32_t cta) {
    asm volatile(
        "{ .reg .b32 ra; mapa.shared::cluster.u32 ra, %0, %1; "
        "mbarrier.arrive.shared::cluster.b64 _, [ra]; }" ::"r"(sm90_smem(bar)), "r"(cta)
        : "memory");
}

// Every non-exited thread of the cluster, whole warps.
__device__ __forceinline__ void sm90_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// a plain copy of `bytes` (a multiple of 16, both addresses 16-byte aligned), completing on bar
__device__ __forceinline__ void sm90_bulk_load(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(sm90_smem(dst)), "l"((uint64_t)src), "r"(bytes), "r"(sm90_smem(bar))
                 : "memory");
}

// a box of shared memory to a 3-D tensor map: stored, or added to what is there
template <bool ADD>
__device__ __forceinline__ void sm90_tma_store(const CUtensorMap *map, const void *src, int c0, int c1, int c2) {
    if (ADD)
        asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];"
                     ::"l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(sm90_smem(src))
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];"
                     ::"l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(sm90_smem(src))
                     : "memory");
}

__device__ __forceinline__ void sm90_bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// until at most N committed store groups are still reading shared memory
template <int N>
__device__ __forceinline__ void sm90_bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void sm90_bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// shared memory written by ordinary stores, next read by the TMA unit
__device__ __forceinline__ void sm90_fence_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void sm90_setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void sm90_setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

__device__ __forceinline__ void sm90_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void sm90_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void sm90_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accesses of the accumulators across the wgmma waits: the
// asm statements of wgmma name them, but an ordinary read could otherwise be scheduled early.
template <int N>
__device__ __forceinline__ void sm90_fence_acc(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
template <int B, int N>
__device__ __forceinline__ void sm90_fence_acc(float (&d)[B][N]) {
#pragma unroll
    for (int b = 0; b < B; b++) sm90_fence_acc(d[b]);
}

// The same for an A operand in registers, before the wgmma fence: all of it is computed by
// then. Otherwise the compiler may sink the computation of a later K step's fragment past the
// first wgmma, and ptxas, finding registers of a wgmma defined inside its pipeline stage,
// serializes every wgmma (its info C7513).
template <int N>
__device__ __forceinline__ void sm90_fence_regs(uint32_t (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i])::"memory");
}

// A shared-memory matrix descriptor with the 128-byte swizzle. For a K-major tile (rows of 64
// bf16 along K, 8-row groups 1024 bytes apart) lbo is unused and sbo = 1024. For an MN-major
// tile (TMA boxes of 64 MN x 64 K, 8 K-rows 1024 bytes apart, the next 64 MN one box = 8 KiB
// further) lbo = 8192 and sbo = 1024.
__device__ __forceinline__ uint64_t sm90_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
           (1ull << 62);
}

// desc moved `bytes` (a multiple of 16) further along shared memory: one add on its low word,
// whose start address field (a CTA's shared memory is below 256 KiB) does not carry out
__device__ __forceinline__ uint64_t sm90_desc_at(uint64_t desc, uint32_t bytes) {
    return (desc & 0xFFFFFFFF00000000ull) | (uint32_t)((uint32_t)desc + (bytes >> 4));
}

// A stage's operand tile (TRANS: MN-major, TMA boxes of 64 MN x 64 K 8 KiB apart; else K-major
// rows of 64) as a descriptor at addr, and the bytes to its K step kk of 16 from there: 16 rows
// (2 KiB) down an MN-major box, 32 bytes along a K-major row
template <int TRANS>
__device__ __forceinline__ uint64_t sm90_operand_desc(uint32_t addr) {
    return TRANS ? sm90_desc(addr, 8192, 1024) : sm90_desc(addr, 16, 1024);
}
template <int TRANS>
__device__ __forceinline__ uint32_t sm90_kstep_bytes(int kk) {
    return TRANS ? kk * 2048 : kk * 32;
}

#define SM90_D4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define SM90_D16(i) SM90_D4(i), SM90_D4((i) + 4), SM90_D4((i) + 8), SM90_D4((i) + 12)
#define SM90_D96 SM90_D16(0), SM90_D16(16), SM90_D16(32), SM90_D16(48), SM90_D16(64), SM90_D16(80)
#define SM90_D112 SM90_D96, SM90_D16(96)
#define SM90_D128 SM90_D112, SM90_D16(112)
// the accumulators' operands of the products below: %0 .. %95, then on to %111 or %127
#define SM90_R0_95                                                                  \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "       \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "  \
    "%31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "  \
    "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, "  \
    "%61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, "  \
    "%76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, "  \
    "%91, %92, %93, %94, %95"
#define SM90_R96_111 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define SM90_R96 "{" SM90_R0_95 "}"
#define SM90_R112 "{" SM90_R0_95 ", " SM90_R96_111 "}"
#define SM90_R128                                                                                                  \
    "{" SM90_R0_95 ", " SM90_R96_111 ", %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, " \
    "%124, %125, %126, %127}"

// d (64 x 256 fp32 per warpgroup) (+)= A (64 x 16, shared memory) B (16 x 256, shared memory)
template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void sm90_mma_ss(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#ifdef SM90_DEVICE_CODE
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " SM90_R128
                 ", %128, %129, p, 1, 1, %131, %132;\n}\n"
                 : SM90_D128
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
#endif
}

// d (64 x 192 fp32 per warpgroup) (+)= A (64 x 16, shared memory) B (16 x 192, shared memory):
// the wide schedule's product (see WG_M below), two of them per K step of 16
template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void sm90_mma_ss(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#ifdef SM90_DEVICE_CODE
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 " SM90_R96
                 ", %96, %97, p, 1, 1, %99, %100;\n}\n"
                 : SM90_D96
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
#endif
}

// the same with A (64 x 16) in registers: the m16n8k16 A fragment of each warp's 16 rows
template <int TRANS_B>
__device__ __forceinline__ void sm90_mma_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#ifdef SM90_DEVICE_CODE
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " SM90_R128
                 ", {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
                 : SM90_D128
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));
#endif
}

// ... and on a B of 224 columns (the narrow cooperative tile: BN = 224 in the header)
template <int TRANS_B>
__device__ __forceinline__ void sm90_mma_rs(float (&d)[112], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#ifdef SM90_DEVICE_CODE
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %117, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n224k16.f32.bf16.bf16 " SM90_R112
                 ", {%112, %113, %114, %115}, %116, p, 1, 1, %118;\n}\n"
                 : SM90_D112
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));
#endif
}

__device__ __forceinline__ void sm90_ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void sm90_ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// Byte offset of (row, 16-byte chunk) in a tile of 128-byte rows with the 128-byte swizzle
// (the chunk index is XORed with the row's position in its 8-row group). Tiles and boxes
// start 1024-byte aligned, so this is the layout TMA writes and wgmma reads.
__device__ __forceinline__ uint32_t sm90_swz(int row, int chunk) {
    return (uint32_t)(row * 128 + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ float sm90_bf16_lo(uint32_t x) { return __uint_as_float(x << 16); }
__device__ __forceinline__ float sm90_bf16_hi(uint32_t x) { return __uint_as_float(x & 0xffff0000u); }
// a * b + c on bf16 pairs, the exact product rounded once (HFMA2.BF16)
__device__ __forceinline__ uint32_t sm90_fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ uint32_t sm90_mul_bf16x2(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t sm90_pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
// an fp32 accumulator fragment (2N floats) as bf16 pairs: with wgmma's m64nNk16 accumulator
// layout this is the A fragment of the product that takes it from registers (k16 steps of it)
template <int N>
__device__ __forceinline__ void sm90_pack_acc(uint32_t (&a)[N], const float (&d)[2 * N]) {
#pragma unroll
    for (int i = 0; i < N; i++) a[i] = sm90_pack_bf16(d[2 * i], d[2 * i + 1]);
}
// two fragments at once, their pairs interleaved (the instruction order the products after
// them were tuned with)
template <int N>
__device__ __forceinline__ void sm90_pack_acc2(uint32_t (&a)[N], const float (&d)[2 * N], uint32_t (&b)[N],
                                               const float (&e)[2 * N]) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
        a[i] = sm90_pack_bf16(d[2 * i], d[2 * i + 1]);
        a[i + 1] = sm90_pack_bf16(d[2 * i + 2], d[2 * i + 3]);
        b[i] = sm90_pack_bf16(e[2 * i], e[2 * i + 1]);
        b[i + 1] = sm90_pack_bf16(e[2 * i + 2], e[2 * i + 3]);
    }
}

// ---------------------------------------------------------------------------------------
// what a tile and a thread are

typedef struct {
    int M, N, K;
    int splits;            // K cut into this many parts, each over k_tiles_per_split 64-wide steps
    int k_tiles_per_split;
    int tiles_m, tiles_n;  // output tiles per split
    int bm;                // output rows per tile: SM90_BM, or 64 for a ping-pong policy
    int bn;                // output columns per tile: SM90_BN, or 192 for a wide policy
    int ctas;              // at most this many CTAs (0: one an SM): an SM share for a GEMM beside another
    int group_m;           // row tiles per raster group (the same rows either way)
} sm90_shape;

typedef struct {
    int m0, n0, split;     // the tile's first output row and column, and its K part
    int kb0, kb1;          // its K steps [kb0, kb1) of SM90_BK
} sm90_tile;

__device__ __forceinline__ sm90_tile sm90_tile_at(const sm90_shape &s, int t) {
    sm90_tile r;
    const int per_split = s.tiles_m * s.tiles_n;
    r.split = t / per_split;
    t -= r.split * per_split;
    // groups of group_m row tiles; row tiles fastest within a group
    const int group = t / (s.group_m * s.tiles_n);
    const int first_m = group * s.group_m;
    const int rows = min(s.group_m, s.tiles_m - first_m);
    const int in_group = t - group * s.group_m * s.tiles_n;
    r.m0 = (first_m + in_group % rows) * s.bm;
    r.n0 = (in_group / rows) * s.bn;
    const int k_tiles = (s.K + SM90_BK - 1) / SM90_BK;
    r.kb0 = r.split * s.k_tiles_per_split;
    r.kb1 = min(k_tiles, r.kb0 + s.k_tiles_per_split);
    return r;
}

// A consumer thread's place: warpgroup wg (0, 1) owns tile rows 64 wg .. 64 wg + 63; warp w
// (0..3) of it rows 16 w .. 16 w + 15 of those; lane = 4 g + t. Its accumulators d[4j + e]
// hold row 16 w + g (e = 0, 1) and 16 w + g + 8 (e = 2, 3) at column 8 j + 2 t + (e & 1).
// Under a ping-pong policy a warpgroup owns whole tiles of 64 rows: wg is 0 for both (rows
// and shared-memory halves are the tile's first), their staging boxes apart all the same.
// Under a wide policy (WG_M = 128) it owns whole tiles of 128 x 192 as two blocks of 64 rows:
// accumulators d[b][4j + e] at row 64 b + 16 w + g (+ 8) and column 8 j + 2 t + (e & 1).
typedef struct {
    int wg, w, g, t, lt;   // lt: thread index within the warpgroup
} sm90_thread;

// The epilogue's staging: each consumer warp stages its 16 rows through its own boxes of
// 16 rows x 128 bytes (64 bf16 or 32 fp32 columns) in the 128-byte swizzle, and its lane 0
// sends each out with a TMA store while the warp writes the next: no barrier wider than the
// warp. `buffers` (1, 2 or 4) boxes per warp, used in turn: two let a box be written while the
// last one is still being read by the TMA unit; one saves shared memory for the pipeline's
// stages; four serve a policy that writes two outputs, or loads a box of an input matrix
// into the box it then computes in (X_IN: each box has an mbarrier for its load).
typedef struct {
    uint8_t *box0;         // the warp's first box; box i at box0 + i SM90_BOX_BYTES
    uint64_t *bar;         // X_IN: box i's mbarrier at bar[i]
    int next;              // boxes used so far: the next is next % buffers, in its (next / buffers)-th use
    int buffers;
} sm90_staging;

__device__ __forceinline__ uint8_t *sm90_box(const sm90_staging &st, int i) {
    return st.box0 + (i % st.buffers) * SM90_BOX_BYTES;
}

// Lane 0 waits until at most n of its store groups are still reading their boxes; then the warp.
__device__ __forceinline__ void sm90_box_wait_read(const sm90_thread &th, int n) {
    if (th.lt % 32 == 0) {
        if (n >= 3) sm90_bulk_wait_read<3>();
        else if (n == 2) sm90_bulk_wait_read<2>();
        else if (n == 1) sm90_bulk_wait_read<1>();
        else sm90_bulk_wait_read<0>();
    }
    __syncwarp();
}

// Waits until the next box is free (the store that read it last has read it), then returns it.
__device__ __forceinline__ uint8_t *sm90_box_begin(sm90_staging &st, const sm90_thread &th) {
    sm90_box_wait_read(th, st.buffers - 1);
    return sm90_box(st, st.next);
}

// The box is written: lane 0 sends it to (c0 = column, c1 = row, c2 = split) of map.
template <bool ADD>
__device__ __forceinline__ void sm90_box_commit(sm90_staging &st, const sm90_thread &th, const CUtensorMap *map,
                                                int c0, int c1, int c2) {
    sm90_fence_async_smem();
    __syncwarp();
    if (th.lt % 32 == 0) {
        sm90_tma_store<ADD>(map, sm90_box(st, st.next), c0, c1, c2);
        sm90_bulk_commit();
    }
    st.next++;
}

// X_IN: lane 0 loads the box of map at (c0 = column, c1 = row) into box i (the caller has made
// sure no store still reads it), completing on its mbarrier.
__device__ __forceinline__ void sm90_box_load(const sm90_staging &st, const sm90_thread &th, const CUtensorMap *map,
                                              int i, int c0, int c1) {
    if (th.lt % 32 == 0) {
        uint64_t *bar = &st.bar[i % st.buffers];
        sm90_mbar_expect_tx(bar, SM90_BOX_BYTES);
        sm90_tma_load_3d(sm90_box(st, i), map, c0, c1, 0, bar);
    }
}

// X_IN: waits for box i's load (the i-th box of this warp, from the start)
__device__ __forceinline__ void sm90_box_wait_load(const sm90_staging &st, int i) {
    sm90_mbar_wait(&st.bar[i % st.buffers], (unsigned)(i / st.buffers) & 1u);
}

// Writes the warp's accumulators of tile columns [32 q, 32 q + 32) as fp32, or of
// [64 q, 64 q + 64) as bf16, into a box (its 16 rows are the warp's).
template <typename OutT, int N>
__device__ __forceinline__ void sm90_box_write(uint8_t *box, const float (&d)[N], int q, const sm90_thread &th) {
    const int r0 = th.g, r1 = r0 + 8;
    if (sizeof(OutT) == 4) {
#pragma unroll
        for (int b = 0; b < 4; b++) {  // the box's 4 column groups of 8
            const int j = 4 * q + b, chunk = 2 * b + (th.t >> 1), off = (th.t & 1) * 8;
            *reinterpret_cast<float2 *>(box + sm90_swz(r0, chunk) + off) = make_float2(d[4 * j], d[4 * j + 1]);
            *reinterpret_cast<float2 *>(box + sm90_swz(r1, chunk) + off) = make_float2(d[4 * j + 2], d[4 * j + 3]);
        }
    } else {
#pragma unroll
        for (int b = 0; b < 8; b++) {
            const int j = 8 * q + b;
            *reinterpret_cast<uint32_t *>(box + sm90_swz(r0, b) + 4 * th.t) = sm90_pack_bf16(d[4 * j], d[4 * j + 1]);
            *reinterpret_cast<uint32_t *>(box + sm90_swz(r1, b) + 4 * th.t) =
                sm90_pack_bf16(d[4 * j + 2], d[4 * j + 3]);
        }
    }
}

// A warp's rows of a block of 64 tile rows (its accumulators d: N per thread, 2 N columns)
// out through its staging boxes: stored, or added (ADD) to D. row0: the block's first row
// within the tile (64 wg for a cooperative tile, 64 b for block b of a wide one).
template <typename OutT, bool ADD, int N>
__device__ __forceinline__ void sm90_store_rows(sm90_staging &st, const sm90_thread &th, const CUtensorMap *map,
                                                const float (&d)[N], const sm90_tile &tile, int row0) {
    constexpr int COLS = 128 / (int)sizeof(OutT);  // columns per box
    static_assert((2 * N) % COLS == 0, "a block's columns are whole boxes");
#pragma unroll
    for (int q = 0; q < 2 * N / COLS; q++) {
        uint8_t *box = sm90_box_begin(st, th);
        sm90_box_write<OutT>(box, d, q, th);
        sm90_box_commit<ADD>(st, th, map, tile.n0 + q * COLS, tile.m0 + row0 + 16 * th.w, tile.split);
    }
}

// A warp's rows of the tile: a cooperative or ping-pong tile's (128 accumulators a thread, 112
// on the narrow tile)...
template <typename OutT, bool ADD, int N>
__device__ __forceinline__ void sm90_store_tile(sm90_staging &st, const sm90_thread &th, const CUtensorMap *map,
                                                const float (&d)[N], const sm90_tile &tile) {
    sm90_store_rows<OutT, ADD>(st, th, map, d, tile, 64 * th.wg);
}

// ... or a wide one's (two blocks of 64 rows)
template <typename OutT, bool ADD, int B, int N>
__device__ __forceinline__ void sm90_store_tile(sm90_staging &st, const sm90_thread &th, const CUtensorMap *map,
                                                const float (&d)[B][N], const sm90_tile &tile) {
#pragma unroll
    for (int b = 0; b < B; b++) sm90_store_rows<OutT, ADD>(st, th, map, d[b], tile, 64 * b);
}

// ---------------------------------------------------------------------------------------
// policies

// What a policy does not change: A read by wgmma from shared memory, no per-stage data, two
// staging boxes per warp, no per-tile state. A policy derives from it, defines Args and its
// epilogue, and hides whichever of these it does differently.
struct sm90_policy_base {
    struct TileState {};
    static constexpr bool A_REGS = false;
    static constexpr bool PINGPONG = false;
    static constexpr int WG_M = 64;       // rows of a tile per consumer warpgroup (see WIDE)
    static constexpr int BN = SM90_BN;    // columns of a tile
    static constexpr bool X_OUT = false;  // the epilogue also writes a second bf16 matrix
                                          // (sm90_problem.x, through map_x: D's shape)
    static constexpr bool X_IN = false;   // or reads one through map_x, box by box (sm90_box_load)
    static constexpr int STAGE_EXTRA = 0;
    static constexpr int EPI_BUFFERS = 2;
    // Output columns a tile advances by (0: BN). B_HALVES (K-major B only): the BN rows of a
    // stage's B tile are two halves of BN / 2 rows, each one box of a 3-D map of B as
    // (K, rows, 2), at (k0, n0, 0) and (k0, n0, 1), so that a tile of TILE_N = BN / 2
    // columns n0 .. gets rows n0 .. of both halves of a stacked weight (the SwiGLU's gate and
    // up projections); rows past the map's second dimension are zeros, not the other half's.
    static constexpr int TILE_N = 0;
    static constexpr bool B_HALVES = false;
    // 2: CTAs in clusters of two on adjacent row tiles of one column (cooperative on a (K, N)
    // B, or wide on an (N, K) one): each loads half of a stage's B box and multicasts it into
    // both, and frees a stage in both
    static constexpr int CLUSTER_M = 1;
    template <class Args>
    __device__ static void stage_extra(const Args &, void *, uint64_t *, const sm90_tile &, int) {}
    template <class Args, class TS>
    __device__ static void tile_begin(const Args &, TS &, const sm90_tile &, const sm90_thread &) {}
    // Before a tile's main loop (before a ping-pong warpgroup waits for its turn, so that what
    // it loads arrives while the other warpgroup's products run): the accumulators' initial
    // values instead of zeros (return 1 where it wrote them), loads for the epilogue.
    template <class Args, class Acc>
    __device__ static int tile_start(const Args &, Acc &, const sm90_tile &, const sm90_thread &, sm90_staging &,
                                     const CUtensorMap *) {
        return 0;
    }
    template <class Args, class TS>
    __device__ static void load_a(const Args &, TS &, const uint8_t *, const uint8_t *, const sm90_tile &, int,
                                  const sm90_thread &, uint32_t (&)[16]) {}
};

// The wide schedule (WIDE below): ping-pong over tiles of 128 x 192, each consumer
// warpgroup's own. A policy derives from this instead of sm90_policy_base; its epilogue
// takes float (&d)[2][96] (sm90_thread's layout).
struct sm90_wide_base : sm90_policy_base {
    static constexpr bool PINGPONG = true;
    static constexpr int WG_M = 128;
    static constexpr int BN = 192;
};

// The plain product: D stored (or added to) as OutT, on the cooperative, ping-pong or wide
// schedule.
enum { SM90_COOPERATIVE = 0, SM90_PINGPONG = 1, SM90_WIDE = 2 };

template <typename OutT, bool ADD, int SCHED>
struct sm90_plain_epilogue {
    template <class Args, class Acc>
    __device__ static void epilogue(const Args &, Acc &d, const sm90_tile &tile, const sm90_thread &th,
                                    sm90_staging &st, const CUtensorMap *map_d) {
        sm90_store_tile<OutT, ADD>(st, th, map_d, d, tile);
    }
};
template <typename OutT, bool ADD, int SCHED = SM90_COOPERATIVE>
struct sm90_plain : sm90_policy_base, sm90_plain_epilogue<OutT, ADD, SCHED> {
    static constexpr bool PINGPONG = SCHED == SM90_PINGPONG;
    struct Args {};
};
template <typename OutT, bool ADD>
struct sm90_plain<OutT, ADD, SM90_WIDE> : sm90_wide_base, sm90_plain_epilogue<OutT, ADD, SM90_WIDE> {
    struct Args {};
};

// ---------------------------------------------------------------------------------------
// the kernel

// A policy's tile: BM rows (128, or the 64 of a ping-pong tile, or a wide warpgroup's 128),
// P::BN columns; the A and B bytes of a stage; MB blocks of 64 rows per consumer warpgroup,
// each with ACC accumulators a thread.
template <class P>
struct sm90_tile_of {
    static constexpr int BM = P::PINGPONG ? P::WG_M : 2 * P::WG_M;
    static constexpr int A_BYTES = BM * SM90_BK * 2;
    // (the narrow tile's MN-major B comes in whole boxes of 64 columns: 256 of them)
    static constexpr int B_BYTES = (P::BN + 63) / 64 * 64 * SM90_BK * 2;
    static constexpr int MB = P::WG_M / 64;
    static constexpr int ACC = P::BN / 2;
    static_assert(P::WG_M == 64 || (P::WG_M == 128 && P::PINGPONG && !P::A_REGS), "the wide tile is ping-pong, SS");
    static_assert(P::BN == 256 || (P::BN == 192 && P::WG_M == 128) ||
                      (P::BN == 224 && P::WG_M == 64 && !P::PINGPONG && P::A_REGS && !P::B_HALVES),
                  "tile widths: 256, 192 wide, or 224 narrow (cooperative, A in registers)");
    static_assert(!P::B_HALVES || P::BN % 16 == 0, "B halves: whole 8-row groups each");
    // the columns a tile advances by
    static constexpr int TN = P::TILE_N > 0 ? P::TILE_N : P::BN;
};

// The accumulators of a consumer thread: float[128] for a 64-row block, float[2][96] wide.
template <int MB, int ACC>
struct sm90_acc_t {
    typedef float type[MB][ACC];
};
template <int ACC>
struct sm90_acc_t<1, ACC> {
    typedef float type[ACC];
};

template <int STAGES, int EXTRA, int EPI_BUFFERS, int A_BYTES, int B_BYTES, bool X_IN>
struct sm90_smem_layout {
    static constexpr int A = 0;
    static constexpr int B = A + STAGES * A_BYTES;
    static constexpr int EPI = B + STAGES * B_BYTES;
    static constexpr int EXTRA_OFF = EPI + SM90_CONSUMER_WARPS * EPI_BUFFERS * SM90_BOX_BYTES;
    static constexpr int BARS = EXTRA_OFF + STAGES * EXTRA;
    // full and empty per stage, ping-pong's two turn barriers, X_IN's box barriers (BOX_BARS);
    // + slack to align the base
    static constexpr int BOX_BARS = BARS + 2 * STAGES * 8 + 16;
    static constexpr int TOTAL = BOX_BARS + (X_IN ? SM90_CONSUMER_WARPS * EPI_BUFFERS * 8 : 0) + 1024;
};

template <class P>
struct sm90_stages {
    // as many stages as fit beside the epilogue staging, at most 4
    static constexpr int per_stage = sm90_tile_of<P>::A_BYTES + sm90_tile_of<P>::B_BYTES + P::STAGE_EXTRA;
    static constexpr int fit = (SM90_SMEM_LIMIT - SM90_CONSUMER_WARPS * P::EPI_BUFFERS * SM90_BOX_BYTES - 1024 - 64 - 16 -
                                (P::X_IN ? SM90_CONSUMER_WARPS * P::EPI_BUFFERS * 8 : 0)) /
                               (per_stage + 16);
    static constexpr int value = fit > 4 ? 4 : fit;
};

// One K step of a consumer warpgroup on stage s: A from the policy (registers, buffer BUF of
// two, so that the next step's transform can run while this step's products are in flight)
// or from shared memory, B from shared memory. A 64-row block per warpgroup (d: 128
// accumulators, 112 on the narrow tile) ...
template <class P, int TRANS_A, int TRANS_B, int BUF, int N>
__device__ __forceinline__ void sm90_consumer_step(const typename P::Args &args, typename P::TileState &ts,
                                                   float (&d)[N], uint32_t (&af)[2][16], const uint8_t *sa,
                                                   const uint8_t *sb, const uint8_t *sx, const sm90_tile &tile,
                                                   int kb, int acc0, const sm90_thread &th) {
    if constexpr (P::A_REGS) {
        P::load_a(args, ts, sa, sx, tile, kb, th, af[BUF]);
        sm90_fence_regs(af[BUF]);
    }
    sm90_wgmma_fence();
    const uint32_t b_addr = sm90_smem(sb);
    // this warpgroup's 64 rows of A: one 8 KiB half of a K-major tile, or one of the two
    // 64-row boxes of an MN-major one: 8 KiB further either way
    const uint32_t a_addr = sm90_smem(sa) + th.wg * 8192;
    const uint64_t db0 = sm90_operand_desc<TRANS_B>(b_addr), da0 = sm90_operand_desc<TRANS_A>(a_addr);
#pragma unroll
    for (int kk = 0; kk < SM90_BK / 16; kk++) {
        const int scale_d = (acc0 || kb > tile.kb0 || kk > 0) ? 1 : 0;  // acc0: d starts from tile_start's values
        const uint64_t db = sm90_desc_at(db0, sm90_kstep_bytes<TRANS_B>(kk));
        if constexpr (P::A_REGS) {
            const uint32_t a4[4] = {af[BUF][4 * kk], af[BUF][4 * kk + 1], af[BUF][4 * kk + 2], af[BUF][4 * kk + 3]};
            sm90_mma_rs<TRANS_B>(d, a4, db, scale_d);
        } else {
            sm90_mma_ss<TRANS_A, TRANS_B>(d, sm90_desc_at(da0, sm90_kstep_bytes<TRANS_A>(kk)), db, scale_d);
        }
    }
    sm90_wgmma_commit();
}

// ... or the wide tile's two blocks (d[b]: rows 64 b ..), both products of a K step of 16
// on the same B. A's blocks are 8 KiB apart in either layout, as the cooperative halves.
template <class P, int TRANS_A, int TRANS_B, int BUF>
__device__ __forceinline__ void sm90_consumer_step(const typename P::Args &, typename P::TileState &,
                                                   float (&d)[2][96], uint32_t (&)[2][16], const uint8_t *sa,
                                                   const uint8_t *sb, const uint8_t *, const sm90_tile &tile,
                                                   int kb, int acc0, const sm90_thread &) {
    sm90_wgmma_fence();
    const uint64_t db0 = sm90_operand_desc<TRANS_B>(sm90_smem(sb)), da0 = sm90_operand_desc<TRANS_A>(sm90_smem(sa));
#pragma unroll
    for (int kk = 0; kk < SM90_BK / 16; kk++) {
        const int scale_d = (acc0 || kb > tile.kb0 || kk > 0) ? 1 : 0;  // acc0: d starts from tile_start's values
        const uint64_t db = sm90_desc_at(db0, sm90_kstep_bytes<TRANS_B>(kk));
#pragma unroll
        for (int b = 0; b < 2; b++)
            sm90_mma_ss<TRANS_A, TRANS_B>(d[b], sm90_desc_at(da0, b * 8192 + sm90_kstep_bytes<TRANS_A>(kk)), db, scale_d);
    }
    sm90_wgmma_commit();
}

template <class P, int TRANS_A, int TRANS_B>
__global__ void __launch_bounds__(SM90_THREADS, 1)
sm90_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                 const __grid_constant__ CUtensorMap map_d, const __grid_constant__ CUtensorMap map_x,
                 const sm90_shape shape, const typename P::Args args) {
#ifdef SM90_DEVICE_CODE
    constexpr int STAGES = sm90_stages<P>::value;
    typedef sm90_tile_of<P> TL;
    constexpr int A_BYTES = TL::A_BYTES, B_BYTES = TL::B_BYTES;
    typedef sm90_smem_layout<STAGES, P::STAGE_EXTRA, P::EPI_BUFFERS, A_BYTES, B_BYTES, P::X_IN> L;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint64_t *full = (uint64_t *)(smem + L::BARS), *empty = full + STAGES;
    // ping-pong: turn[w] completes a phase each time warpgroup w has waited for the last stage
    // of one of its tiles; the other then starts its next tile's waits. Without it a warpgroup
    // could wait on a stage two phases ahead of where its barrier is, which a parity wait
    // cannot tell from the phase before (and the turns keep the products one tile at a time).
    uint64_t *turn_bar = empty + STAGES;
    constexpr bool MC = P::CLUSTER_M == 2;
    static_assert(TRANS_B || P::BN % 64 == 0, "the narrow tile: an MN-major B");
    static_assert(!MC || (TRANS_B && !P::PINGPONG && P::WG_M == 64 && !P::B_HALVES && P::BN >= 224) ||
                      (!TRANS_B && P::PINGPONG && P::WG_M == 128 && !P::B_HALVES && P::BN == 192),
                  "clusters: cooperative tiles on a (K, N) B, or wide ones on an (N, K) B");
    const uint32_t rank = MC ? sm90_cluster_rank() : 0u;
    const int wg = sm90_warpgroup();
    const int n_tiles = shape.tiles_m * shape.tiles_n * shape.splits;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            sm90_mbar_init(&full[s], 1);      // the producer's expect_tx
            // one per warpgroup that reads it, in both CTAs of a cluster (each loads into both)
            sm90_mbar_init(&empty[s], (P::PINGPONG ? 1 : 2) * P::CLUSTER_M);
        }
        sm90_mbar_init(&turn_bar[0], 1);
        sm90_mbar_init(&turn_bar[1], 1);
        if (P::X_IN)
            for (int i = 0; i < SM90_CONSUMER_WARPS * P::EPI_BUFFERS; i++)
                sm90_mbar_init((uint64_t *)(smem + L::BOX_BARS) + i, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (MC) sm90_cluster_sync();  // the pair's barriers initialized before either signals the other's
    else __syncthreads();

    if (wg == 0) {
        sm90_setmaxnreg_dec<40>();
        if (threadIdx.x != 0) return;
        int it = 0;
        for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
            const sm90_tile tile = sm90_tile_at(shape, t);
            for (int kb = tile.kb0; kb < tile.kb1; kb++, it++) {
                const int s = it % STAGES;
                sm90_mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                sm90_mbar_expect_tx(&full[s], A_BYTES + B_BYTES + P::STAGE_EXTRA);
                uint8_t *sa = smem + L::A + s * A_BYTES, *sb = smem + L::B + s * B_BYTES;
                const int k0 = kb * SM90_BK;
                if (TRANS_A) {  // (K, M) rows: BM / 64 boxes of 64 M x 64 K
                    for (int i = 0; i < TL::BM / 64; i++) sm90_tma_load(sa + i * 8192, &map_a, tile.m0 + 64 * i, k0, &full[s]);
                } else {        // (M, K) rows: one box of 64 K x BM rows
                    sm90_tma_load(sa, &map_a, k0, tile.m0, &full[s]);
                }
                if (TRANS_B) {  // (K, N) rows: BN / 64 boxes of 64 N x 64 K (narrow: 4, half the last read)
                    static_assert(!(TRANS_B && P::B_HALVES), "B halves: K-major B");
                    for (int i = 0; i < (P::BN + 63) / 64; i++) {
                        if (!MC) sm90_tma_load(sb + i * 8192, &map_b, tile.n0 + 64 * i, k0, &full[s]);
                        else if (i / 2 == (int)rank)  // this CTA's half, into both
                            sm90_tma_load_mc(sb + i * 8192, &map_b, tile.n0 + 64 * i, k0, &full[s], 0x3);
                    }
                } else if (P::B_HALVES) {  // two boxes of 64 K x BN / 2 rows: rows n0 .. of each half
                    sm90_tma_load_3d(sb, &map_b, k0, tile.n0, 0, &full[s]);
                    sm90_tma_load_3d(sb + B_BYTES / 2, &map_b, k0, tile.n0, 1, &full[s]);
                } else if (MC) {  // (N, K) rows, this CTA's half: 64 K x BN / 2 rows, into both
                    sm90_tma_load_mc(sb + rank * (B_BYTES / 2), &map_b, k0, tile.n0 + rank * (P::BN / 2), &full[s],
                                     0x3);
                } else {        // (N, K) rows: one box of 64 K x BN rows
                    sm90_tma_load(sb, &map_b, k0, tile.n0, &full[s]);
                }
                if (P::STAGE_EXTRA > 0) P::stage_extra(args, smem + L::EXTRA_OFF + s * P::STAGE_EXTRA, &full[s], tile, k0);
            }
        }
        return;
    }

    sm90_setmaxnreg_inc<232>();
    sm90_thread th;
    th.wg = wg - 1;
    th.lt = threadIdx.x % 128;
    th.w = th.lt / 32;
    th.g = (th.lt % 32) / 4;
    th.t = th.lt % 4;
    sm90_staging st;
    st.buffers = P::EPI_BUFFERS;
    st.box0 = smem + L::EPI + (4 * th.wg + th.w) * P::EPI_BUFFERS * SM90_BOX_BYTES;
    st.bar = (uint64_t *)(smem + L::BOX_BARS) + (4 * th.wg + th.w) * P::EPI_BUFFERS;
    st.next = 0;
    const int turn = th.wg;  // ping-pong: this warpgroup takes the CTA's tiles of this parity
    if (P::PINGPONG) th.wg = 0;
    typename sm90_acc_t<TL::MB, TL::ACC>::type d;
    uint32_t af[2][16];
    int it = 0, local = 0, turns = 0;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, local++) {
        const sm90_tile tile = sm90_tile_at(shape, t);
        if (P::PINGPONG && (local & 1) != turn) {  // the other warpgroup's: skip its stages
            it += tile.kb1 - tile.kb0;
            continue;
        }
        const int acc0 = P::tile_start(args, d, tile, th, st, &map_x);  // d holds initial values
        if (P::PINGPONG && local > 0) {  // the other has waited for its last stage of tile local - 1
            sm90_mbar_wait(&turn_bar[turn ^ 1], turns & 1);
            turns++;
        }
        typename P::TileState ts;
        P::tile_begin(args, ts, tile, th);
        int prev = -1;
        // two steps per round, so that the A register buffer of each is a constant
        for (int kb = tile.kb0; kb < tile.kb1; kb += 2) {
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int k = kb + half;
                if (k >= tile.kb1) break;
                const int s = it % STAGES;
                sm90_mbar_wait(&full[s], (it / STAGES) & 1);
                const uint8_t *sa = smem + L::A + s * A_BYTES, *sb = smem + L::B + s * B_BYTES;
                const uint8_t *sx = smem + L::EXTRA_OFF + s * P::STAGE_EXTRA;
                if (half == 0) sm90_consumer_step<P, TRANS_A, TRANS_B, 0>(args, ts, d, af, sa, sb, sx, tile, k, acc0, th);
                else sm90_consumer_step<P, TRANS_A, TRANS_B, 1>(args, ts, d, af, sa, sb, sx, tile, k, acc0, th);
                // the previous step's products are done: its stage (and A registers) are free
                sm90_wgmma_wait<1>();
                if (prev >= 0 && th.lt == 0) {
                    sm90_mbar_arrive(&empty[prev]);
                    if (MC) sm90_mbar_arrive_remote(&empty[prev], rank ^ 1u);
                }
                prev = s;
                it++;
            }
        }
        if (P::PINGPONG && th.lt == 0) sm90_mbar_arrive(&turn_bar[turn]);
        sm90_wgmma_wait<0>();
        if (prev >= 0 && th.lt == 0) {
            sm90_mbar_arrive(&empty[prev]);
            if (MC) sm90_mbar_arrive_remote(&empty[prev], rank ^ 1u);
        }
        sm90_fence_acc(d);
        if constexpr (P::X_OUT || P::X_IN) P::epilogue(args, d, tile, th, st, &map_d, &map_x);
        else P::epilogue(args, d, tile, th, st, &map_d);
    }
    if (th.lt % 32 == 0) sm90_bulk_wait_all();
    if (MC) {  // no CTA leaves while the other may still arrive on its barriers
        __syncwarp();
        sm90_cluster_sync();
    }
#endif
}

// ---------------------------------------------------------------------------------------
// host side

// A row-major bf16 (or fp32, for outputs) matrix in global memory.
typedef struct {
    const void *ptr;
    int64_t rows, cols, ld;   // ld: row stride in elements
} sm90_matrix;

typedef PFN_cuTensorMapEncodeTiled_v12000 sm90_encode_fn;

// cuTensorMapEncodeTiled through the runtime's driver entry point, so that programs need not
// link libcuda themselves; NULL if the driver does not have it.
static inline sm90_encode_fn sm90_encoder(void) {
    static sm90_encode_fn fn = NULL;
    static int tried = 0;
    if (!tried) {
        cudaDriverEntryPointQueryResult q;
        void *p = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess && q == cudaDriverEntryPointSuccess)
            fn = (sm90_encode_fn)p;
        else
            (void)cudaGetLastError();
        tried = 1;
    }
    return fn;
}

// A tensor map (rank 2 or 3; bf16 or fp32 by elem) of the array at ptr with dimensions dims
// (dims[0] contiguous), strides[i] elements between consecutive indices of dimension i + 1
// (multiples of 16 bytes), in boxes of box[0] x box[1] x box[2] with the given swizzle (the
// inner box 128 bytes or less for the 128-byte swizzle, 64 or less for the 64-byte one).
static inline cudaError_t sm90_make_map_3d(CUtensorMap *map, const void *ptr, int elem, int rank,
                                           const int64_t (&dims)[3], const int64_t (&strides)[2],
                                           const int (&box)[3], CUtensorMapSwizzle swizzle) {
    sm90_encode_fn enc = sm90_encoder();
    if (enc == NULL) return cudaErrorNotSupported;
    const cuuint64_t d[3] = {(cuuint64_t)dims[0], (cuuint64_t)dims[1], (cuuint64_t)dims[2]};
    const cuuint64_t str[2] = {(cuuint64_t)(strides[0] * elem), (cuuint64_t)(strides[1] * elem)};
    const cuuint32_t b[3] = {(cuuint32_t)box[0], (cuuint32_t)box[1], (cuuint32_t)box[2]};
    const cuuint32_t estr[3] = {1, 1, 1};
    CUresult r = enc(map, elem == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                     (cuuint32_t)rank, (void *)ptr, d, str, b, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// A tensor map of m (rows x cols, bf16 or fp32 by elem) in boxes of box_cols x box_rows, with
// the 128-byte swizzle. rank 2, or rank 3 with `depth` slices split_stride elements apart (the
// outputs: split-K parts); the rank must match the instructions that use it (.2d loads, .3d
// stores).
static inline cudaError_t sm90_make_map(CUtensorMap *map, const sm90_matrix &m, int elem, int box_cols, int box_rows,
                                 int rank, int depth, int64_t split_stride) {
    const int64_t dims[3] = {m.cols, m.rows, depth}, strides[2] = {m.ld, split_stride};
    const int box[3] = {box_cols, box_rows, 1};
    return sm90_make_map_3d(map, m.ptr, elem, rank, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

static inline cudaError_t sm90_make_operand_map(CUtensorMap *map, const sm90_matrix &m, int box_cols, int box_rows) {
    return sm90_make_map(map, m, 2, box_cols, box_rows, 2, 1, 0);
}

// Whether this build and device can run the kernels: an sm_90a build on a 9.0 device.
static inline int sm90_available(void) {
#ifdef SM90_GEMM_BUILD
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major == 9 && minor == 0 && sm90_encoder() != NULL;
#else
    return 0;
#endif
}

static inline int sm90_aligned(const void *p, int64_t ld, int elem) {
    return ((uintptr_t)p % 16) == 0 && (ld * elem) % 16 == 0;
}

// A problem for the kernel: D (M x N) (+)= op(A) op(B), with
//   a: (M, K) rows if !trans_a, else (K, M) rows;   b: (N, K) rows if !trans_b, else (K, N)
//   d: (splits * M) rows of N, slice s (rows s M ..) holding split s's part
//   x: a policy's second output (X_OUT) or input (X_IN), bf16 (M, N) rows; not used otherwise
//   group_rows: the output rows of a raster group (0, as in a zeroed problem: SM90_GROUP_M
//     tiles of SM90_BM). A group sweeps all of B, so B is read from DRAM once per group: a short
//     A (a few MB) in one group reads B once in all.
//   ctas: at most this many persistent CTAs (0, as in a zeroed problem: one an SM), so that
//     another stream's kernel has the other SMs
typedef struct {
    sm90_matrix a, b, d, x;
    int trans_a, trans_b;
    int64_t M, N, K;
    int splits;
    int64_t group_rows;
    int ctas;
} sm90_problem;

// cudaSuccess if the kernel can run p (sizes, alignment, 32-bit coordinates), else why not.
static inline cudaError_t sm90_gemm_check(const sm90_problem &p, int d_elem) {
    if (p.M <= 0 || p.N <= 0 || p.K <= 0 || p.splits < 1) return cudaErrorInvalidValue;
    if (p.M > INT32_MAX - 2 * SM90_BM || p.N > INT32_MAX - 2 * SM90_BN || p.K > INT32_MAX - 2 * SM90_BK)
        return cudaErrorInvalidValue;
    if (!sm90_aligned(p.a.ptr, p.a.ld, 2) || !sm90_aligned(p.b.ptr, p.b.ld, 2) ||
        !sm90_aligned(p.d.ptr, p.d.ld, d_elem))
        return cudaErrorMisalignedAddress;
    return cudaSuccess;
}

// Number of output tiles (per split) of bm rows and the K steps of each split.
static inline sm90_shape sm90_make_shape(const sm90_problem &p, int bm = SM90_BM, int bn = SM90_BN) {
    sm90_shape s;
    s.M = (int)p.M;
    s.N = (int)p.N;
    s.K = (int)p.K;
    s.bm = bm;
    s.bn = bn;
    s.group_m = p.group_rows > 0 ? (int)((p.group_rows + bm - 1) / bm) : SM90_GROUP_M * SM90_BM / bm;
    s.ctas = p.ctas > 0 ? p.ctas : 0;
    s.tiles_m = (int)((p.M + bm - 1) / bm);
    s.tiles_n = (int)((p.N + bn - 1) / bn);
    const int k_tiles = (int)((p.K + SM90_BK - 1) / SM90_BK);
    s.splits = p.splits < k_tiles ? p.splits : k_tiles;
    s.k_tiles_per_split = (k_tiles + s.splits - 1) / s.splits;
    s.splits = (k_tiles + s.k_tiles_per_split - 1) / s.k_tiles_per_split;  // no empty split
    return s;
}

// Launches policy P on the tensor maps made by the caller (operands in the layout TRANS_A,
// TRANS_B; map_x zeroed where P has no X_OUT or X_IN) over shape (sm90_make_shape with P's
// tile), on stream: for policies whose maps are not sm90_gemm_launch's.
template <class P, int TRANS_A, int TRANS_B>
static cudaError_t sm90_gemm_run(const CUtensorMap &ma, const CUtensorMap &mb, const CUtensorMap &md,
                                 const CUtensorMap &mx, const sm90_shape &shape, const typename P::Args &args,
                                 cudaStream_t stream) {
    constexpr int STAGES = sm90_stages<P>::value;
    typedef sm90_tile_of<P> TL;
    typedef sm90_smem_layout<STAGES, P::STAGE_EXTRA, P::EPI_BUFFERS, TL::A_BYTES, TL::B_BYTES, P::X_IN> L;
    static_assert(L::TOTAL <= SM90_SMEM_LIMIT, "shared memory");
    auto kernel = sm90_gemm_kernel<P, TRANS_A, TRANS_B>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::TOTAL);
    if (e != cudaSuccess) return e;
    int dev = 0, sms = 0;
    e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
    // clusters of two: pairs of row tiles, an even count (a last tile past M loads zeros and
    // stores nothing) in raster groups of an even count, so that tiles 2i and 2i + 1 are
    // adjacent rows of one column
    sm90_shape sh = shape;
    if (P::CLUSTER_M == 2) {
        sh.tiles_m += sh.tiles_m & 1;
        sh.group_m += sh.group_m & 1;
    }
    const long long tiles = (long long)sh.tiles_m * sh.tiles_n * sh.splits;
    if (sh.ctas > 0 && sh.ctas < sms) sms = sh.ctas;
    unsigned grid = (unsigned)(tiles < sms ? tiles : sms);
    if (P::CLUSTER_M == 2) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 2;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.blockDim = dim3(SM90_THREADS);
        cfg.dynamicSmemBytes = L::TOTAL;
        cfg.stream = stream;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        // an even grid of at most the clusters resident at once; that count is fixed for a
        // kernel on a device, so it is asked once per device
        static int max_clusters[SM90_MAX_DEVICES];
        int clusters = dev < SM90_MAX_DEVICES ? __atomic_load_n(&max_clusters[dev], __ATOMIC_RELAXED) : 0;
        if (clusters < 1) {
            cfg.gridDim = dim3(2);
            e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
            if (e != cudaSuccess) return e;
            if (clusters < 1) return cudaErrorInvalidConfiguration;
            if (dev < SM90_MAX_DEVICES) __atomic_store_n(&max_clusters[dev], clusters, __ATOMIC_RELAXED);
        }
        if (grid > 2u * (unsigned)clusters) grid = 2u * (unsigned)clusters;
        cfg.gridDim = dim3(grid & ~1u);
        return cudaLaunchKernelEx(&cfg, kernel, ma, mb, md, mx, sh, args);
    }
    kernel<<<grid, SM90_THREADS, L::TOTAL, stream>>>(ma, mb, md, mx, sh, args);
    return cudaGetLastError();
}

// Launches policy P on problem p (D of OutT, operands in the layout TRANS_A, TRANS_B, which
// must be p's), on stream. The caller has checked p.
template <class P, typename OutT, int TRANS_A, int TRANS_B>
static cudaError_t sm90_gemm_launch(const sm90_problem &p, const typename P::Args &args, cudaStream_t stream) {
    typedef sm90_tile_of<P> TL;
    constexpr int BM = TL::BM;
    static_assert(!P::B_HALVES, "B halves: the caller makes its maps (sm90_gemm_run)");
    if (p.trans_a != TRANS_A || p.trans_b != TRANS_B) return cudaErrorInvalidValue;
    CUtensorMap ma, mb, md;
    const sm90_shape shape = sm90_make_shape(p, BM, TL::TN);
    cudaError_t e = TRANS_A ? sm90_make_operand_map(&ma, p.a, 64, 64) : sm90_make_operand_map(&ma, p.a, 64, BM);
    // (N, K) B in clusters: each CTA loads half of a stage's box
    if (e == cudaSuccess)
        e = TRANS_B ? sm90_make_operand_map(&mb, p.b, 64, 64)
                    : sm90_make_operand_map(&mb, p.b, 64, P::CLUSTER_M == 2 ? P::BN / 2 : P::BN);
    if (e == cudaSuccess)
        e = sm90_make_map(&md, p.d, (int)sizeof(OutT), 128 / (int)sizeof(OutT), 16, 3, shape.splits, p.M * p.d.ld);
    CUtensorMap mx;
    memset(&mx, 0, sizeof(mx));
    if (e == cudaSuccess && (P::X_OUT || P::X_IN)) {
        if (!sm90_aligned(p.x.ptr, p.x.ld, 2)) return cudaErrorMisalignedAddress;
        e = sm90_make_map(&mx, p.x, 2, 64, 16, 3, 1, 0);
    }
    if (e != cudaSuccess) return e;
    return sm90_gemm_run<P, TRANS_A, TRANS_B>(ma, mb, md, mx, shape, args, stream);
}

// The plain policy in p's layout, on schedule SCHED (SM90_COOPERATIVE, _PINGPONG, _WIDE).
template <typename OutT, bool ADD, int SCHED = SM90_COOPERATIVE>
static cudaError_t sm90_gemm_plain(const sm90_problem &p, cudaStream_t stream) {
    typedef sm90_plain<OutT, ADD, SCHED> P;
    if (p.trans_a)
        return p.trans_b ? sm90_gemm_launch<P, OutT, 1, 1>(p, {}, stream) : sm90_gemm_launch<P, OutT, 1, 0>(p, {}, stream);
    return p.trans_b ? sm90_gemm_launch<P, OutT, 0, 1>(p, {}, stream) : sm90_gemm_launch<P, OutT, 0, 0>(p, {}, stream);
}

template <int SCHED>
static cudaError_t sm90_gemm_sched(const sm90_problem &p, int d_fp32, int add, cudaStream_t stream) {
    if (d_fp32)
        return add ? sm90_gemm_plain<float, true, SCHED>(p, stream) : sm90_gemm_plain<float, false, SCHED>(p, stream);
    // bf16 additions would round twice: callers add in fp32
    if (add) return cudaErrorInvalidValue;
    return sm90_gemm_plain<__nv_bfloat16, false, SCHED>(p, stream);
}

// The plain product D (+)= op(A) op(B) in bf16 or fp32 (d_fp32), added to D when add;
// sched: SM90_COOPERATIVE, SM90_PINGPONG or SM90_WIDE (see the policies above).
static inline cudaError_t sm90_gemm(const sm90_problem &p, int d_fp32, int add, cudaStream_t stream,
                                    int sched = SM90_COOPERATIVE) {
    cudaError_t e = sm90_gemm_check(p, d_fp32 ? 4 : 2);
    if (e != cudaSuccess) return e;
    if (sched == SM90_WIDE) return sm90_gemm_sched<SM90_WIDE>(p, d_fp32, add, stream);
    if (sched == SM90_PINGPONG) return sm90_gemm_sched<SM90_PINGPONG>(p, d_fp32, add, stream);
    return sm90_gemm_sched<SM90_COOPERATIVE>(p, d_fp32, add, stream);
}

#endif // GEMM_SM90_CUH
