/*
encoder.cuh - the input embedding: token embedding (wte) plus, for GPT-2, a position
embedding (wpe; NULL for a model without one, such as Llama's, whose positions are rotary).

  forward   out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]                        (out =)
  backward  dwte[v,:] += sum of dout[b,t,:] over the positions with inp[b,t] == v
            dwpe[t,:] += sum over b of dout[b,t,:]                         (fp32, +=)

Why host-side buckets: the wte gradient is a scatter-add (many positions hit the same row).
Atomics would make it non-deterministic, so the positions are grouped by token id on the
host (the ids are on the host anyway, the data loader produced them) and each (token,
8 channels) slice of dwte is then owned by exactly one GPU thread, which adds the sums of its
positions in ascending position order: directly for a token of up to ENCODER_SEGMENT
positions, through per-segment partial sums for a more frequent one. No atomics, a fixed
order, bitwise reproducible.

Requirements: C % 8 == 0 and every tensor pointer 16-byte aligned (checked on the host),
token ids in [0, rows of wte) (not checked on the device: the caller validates its data).
*/
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include <string.h>

#include "cuda_common.cuh"

// --- forward --------------------------------------------------------------------------------

// one thread per 8 output channels (one 16-byte vector) of one (b, t); POS: add wpe's row t
template <bool POS>
static __global__ void encoder_forward_kernel(floatX *out, const int *inp, const floatX *wte,
                                              const floatX *wpe, int T, int C, size_t n_vec) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_vec) return;
    const int groups = C / 8;
    const size_t bt = idx / (size_t)groups;
    const int c = (int)(idx % (size_t)groups) * 8;
    const int t = (int)(bt % (size_t)T);
    const int tok = inp[bt];
    const Packed128<floatX> te = load128(wte + (size_t)tok * C + c);
    if (!POS) {
        store128(out + bt * (size_t)C + c, te);
        return;
    }
    const Packed128<floatX> pe = load128(wpe + (size_t)t * C + c);
    Packed128<floatX> o;
#pragma unroll
    for (int k = 0; k < 8; k++) o[k] = __float2bfloat16(to_float(te[k]) + to_float(pe[k]));
    store128(out + bt * (size_t)C + c, o);
}

// out (B,T,C) = wte[inp] + wpe[t] (wpe NULL: wte[inp]); inp (B,T) device token ids
static inline void encoder_forward(floatX *out, const int *inp, const floatX *wte, const floatX *wpe,
                                   int B, int T, int C, cudaStream_t s) {
    require(B > 0 && T > 0 && C > 0 && C % 8 == 0, "encoder_forward: need B, T > 0 and C % 8 == 0");
    require(aligned16(out) && aligned16(wte) && aligned16(wpe),
            "encoder_forward: out, wte, wpe must be 16-byte aligned");
    const size_t n_vec = (size_t)B * T * (C / 8);
    const int block = 256;
    const unsigned grid = (unsigned)llmc_ceil_div(n_vec, block);
    if (wpe != NULL) encoder_forward_kernel<true><<<grid, block, 0, s>>>(out, inp, wte, wpe, T, C, n_vec);
    else encoder_forward_kernel<false><<<grid, block, 0, s>>>(out, inp, wte, wpe, T, C, n_vec);
    cudaLaunchCheck("encoder_forward_kernel");
}

// --- the buckets of the backward --------------------------------------------------------------

// The positions (b*T + t) of one batch grouped by token id (a bucket per distinct token, in
// ascending id order, its positions ascending), and each bucket cut into segments of at most
// ENCODER_SEGMENT positions, so that a frequent token's thousands of positions are summed by
// many threads (one thread per whole bucket left the longest bucket as the kernel's tail).
// A bucket of one segment is added into dwte by the thread that sums it; the segments of a
// longer bucket write partial sums ("slots"), which a second kernel adds in slot order. Host
// and device hold the same layout, ints, BT = B*T, at the offsets the struct gives:
//   positions[BT]                 bucket after bucket
//   seg_start[n_seg + 1]          each segment's first index into positions; the last = BT
//   seg_token[n_seg]              its bucket's token id
//   seg_slot[n_seg]               -1: its bucket has this segment alone; else its partial slot
//   multi_token[n_multi]          the buckets of several segments: token id
//   multi_slot[n_multi + 1]       and their slots [multi_slot[i], multi_slot[i + 1])
#define ENCODER_SEGMENT 32

typedef struct {
    int B, T, C;          // the shape the buffers were allocated for
    int num_buckets;      // distinct tokens of the last build
    int num_segments, num_multi, num_slots;
    size_t off_seg_start, off_seg_token, off_seg_slot, off_multi_token, off_multi_slot, n_ints;
    int *host;            // pinned, n_ints (the staging buffer of the upload)
    int *dev;             // device, n_ints
    float *partial;       // device: max_slots x C partial sums of the long buckets' segments
    int max_slots;
    int *counts;          // host scratch of the counting sort, one per token id (grows)
    int counts_cap;
    cudaEvent_t uploaded; // recorded after the upload; the next build waits on it before
                          // rewriting the pinned buffer that the DMA may still be reading
    int built;            // a build has happened (encoder_backward refuses to run otherwise)
} EncoderBuckets;

// Buffers for batches of B x T tokens and C channels. Bounds: a segment holds at least one
// position (n_seg <= BT); a bucket of several segments has more than ENCODER_SEGMENT positions
// (n_multi <= BT / (SEGMENT + 1)) and fewer segments than 2 count / SEGMENT (slots <= 2 BT /
// SEGMENT).
static inline void encoder_buckets_init(EncoderBuckets *eb, int B, int T, int C) {
    require(eb != NULL && B > 0 && T > 0 && C > 0 && C % 8 == 0, "encoder_buckets_init: need B, T > 0, C % 8 == 0");
    require((double)B * T * 5.0 + 8.0 < 2147483647.0, "encoder_buckets_init: B*T too large");
    memset(eb, 0, sizeof(*eb));
    eb->B = B;
    eb->T = T;
    eb->C = C;
    const size_t BT = (size_t)B * T, max_multi = BT / (ENCODER_SEGMENT + 1);
    eb->max_slots = (int)(2 * BT / ENCODER_SEGMENT + 1);
    eb->off_seg_start = BT;
    eb->off_seg_token = eb->off_seg_start + BT + 1;
    eb->off_seg_slot = eb->off_seg_token + BT;
    eb->off_multi_token = eb->off_seg_slot + BT;
    eb->off_multi_slot = eb->off_multi_token + max_multi;
    eb->n_ints = eb->off_multi_slot + max_multi + 1;
    cudaCheck(cudaMallocHost((void **)&eb->host, eb->n_ints * sizeof(int)));
    cudaCheck(cudaMalloc((void **)&eb->dev, eb->n_ints * sizeof(int)));
    cudaCheck(cudaMalloc((void **)&eb->partial, (size_t)eb->max_slots * C * sizeof(float)));
    cudaCheck(cudaEventCreateWithFlags(&eb->uploaded, cudaEventDisableTiming));
}

// Groups the positions of inp_host (B*T token ids, host memory) by token id, cuts the groups
// into segments and uploads all of it to the device on stream s. inp_host is only read during
// this call (the upload is from the struct's own pinned buffer), so the caller may reuse it at
// once. The call waits (host side) only for the upload of the previous build, if that has not
// happened yet. Must be called before each encoder_backward whose inputs differ from the last
// build's.
static inline void encoder_buckets_build(EncoderBuckets *eb, const int *inp_host, int B, int T,
                                         cudaStream_t s) {
    require(eb != NULL && eb->host != NULL, "encoder_buckets_build: not initialised");
    require(B == eb->B && T == eb->T, "encoder_buckets_build: B, T differ from encoder_buckets_init's");
    const int BT = B * T;
    int max_id = 0;
    for (int i = 0; i < BT; i++) {
        if (inp_host[i] < 0) {
            fprintf(stderr, "[encoder] encoder_buckets_build: token id %d at position %d\n", inp_host[i], i);
            exit(EXIT_FAILURE);
        }
        if (inp_host[i] > max_id) max_id = inp_host[i];
    }
    if (max_id + 1 > eb->counts_cap) {
        free(eb->counts);
        eb->counts_cap = max_id + 1;
        eb->counts = (int *)malloc((size_t)eb->counts_cap * sizeof(int));
        require(eb->counts != NULL, "encoder_buckets_build: out of host memory");
    }
    int *counts = eb->counts;
    memset(counts, 0, (size_t)(max_id + 1) * sizeof(int));
    for (int i = 0; i < BT; i++) counts[inp_host[i]]++;

    // the pinned buffer may still be the source of the previous (asynchronous) upload
    cudaCheck(cudaEventSynchronize(eb->uploaded));
    int *positions = eb->host, *seg_start = eb->host + eb->off_seg_start, *seg_token = eb->host + eb->off_seg_token;
    int *seg_slot = eb->host + eb->off_seg_slot, *multi_token = eb->host + eb->off_multi_token;
    int *multi_slot = eb->host + eb->off_multi_slot;
    // exclusive prefix sum: counts[v] becomes the first slot of token v's positions; each
    // bucket's segments as we go
    int nb = 0, nseg = 0, nmulti = 0, nslots = 0, offset = 0;
    for (int v = 0; v <= max_id; v++) {
        const int c = counts[v];
        if (c == 0) continue;
        const int pieces = (c + ENCODER_SEGMENT - 1) / ENCODER_SEGMENT;
        if (pieces > 1) {
            multi_token[nmulti] = v;
            multi_slot[nmulti] = nslots;
            nmulti++;
        }
        for (int k = 0; k < pieces; k++) {
            seg_start[nseg] = offset + k * ENCODER_SEGMENT;
            seg_token[nseg] = v;
            seg_slot[nseg] = pieces > 1 ? nslots++ : -1;
            nseg++;
        }
        nb++;
        counts[v] = offset;
        offset += c;
    }
    seg_start[nseg] = BT;
    multi_slot[nmulti] = nslots;
    require(nslots <= eb->max_slots, "encoder_buckets_build: more partial slots than the bound (a bug)");
    // positions scattered in ascending order, so each bucket lists them ascending (stable)
    for (int i = 0; i < BT; i++) positions[counts[inp_host[i]]++] = i;
    eb->num_buckets = nb;
    eb->num_segments = nseg;
    eb->num_multi = nmulti;
    eb->num_slots = nslots;
    cudaCheck(cudaMemcpyAsync(eb->dev, eb->host, eb->n_ints * sizeof(int), cudaMemcpyHostToDevice, s));
    cudaCheck(cudaEventRecord(eb->uploaded, s));
    eb->built = 1;
}

static inline void encoder_buckets_free(EncoderBuckets *eb) {
    if (eb == NULL) return;
    if (eb->host != NULL) {
        cudaCheck(cudaEventSynchronize(eb->uploaded));  // no DMA may still read the buffer
        cudaCheck(cudaFreeHost(eb->host));
        cudaCheck(cudaEventDestroy(eb->uploaded));
    }
    if (eb->dev != NULL) cudaCheck(cudaFree(eb->dev));
    if (eb->partial != NULL) cudaCheck(cudaFree(eb->partial));
    free(eb->counts);
    memset(eb, 0, sizeof(*eb));
}

// --- backward -------------------------------------------------------------------------------

// row[0..8) += acc[0..8), fp32, as two 16-byte accesses (row is 32-byte aligned: C % 8 == 0)
static __device__ __forceinline__ void encoder_add8(float *row, const float (&acc)[8]) {
    float x[8];
    load8(x, row);
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] += acc[k];
    store8(row, x);
}

// One thread per (segment, 8 channels): sums dout over the segment's positions in ascending
// order, four loads in flight at a time (the additions still one position after the other),
// then adds the sum into its token's dwte row (a bucket of one segment) or writes it to its
// partial slot.
static __global__ void encoder_backward_segments_kernel(float *dwte, float *partial, const floatX *dout,
                                                        const int *positions, const int *seg_start,
                                                        const int *seg_token, const int *seg_slot, int C,
                                                        size_t n_threads) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_threads) return;
    const int groups = C / 8;
    const int seg = (int)(idx / (size_t)groups);
    const int c = (int)(idx % (size_t)groups) * 8;
    const int start = seg_start[seg], end = seg_start[seg + 1];
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    int i = start;
    for (; i + 4 <= end; i += 4) {
        const Packed128<floatX> d0 = load128(dout + (size_t)positions[i] * C + c);
        const Packed128<floatX> d1 = load128(dout + (size_t)positions[i + 1] * C + c);
        const Packed128<floatX> d2 = load128(dout + (size_t)positions[i + 2] * C + c);
        const Packed128<floatX> d3 = load128(dout + (size_t)positions[i + 3] * C + c);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            acc[k] += to_float(d0[k]);
            acc[k] += to_float(d1[k]);
            acc[k] += to_float(d2[k]);
            acc[k] += to_float(d3[k]);
        }
    }
    for (; i < end; i++) {
        const Packed128<floatX> d = load128(dout + (size_t)positions[i] * C + c);
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += to_float(d[k]);
    }
    const int slot = seg_slot[seg];
    if (slot < 0) {
        encoder_add8(dwte + (size_t)seg_token[seg] * C + c, acc);
    } else {
        store8(partial + (size_t)slot * C + c, acc);
    }
}

// One thread per (bucket of several segments, 8 channels): its segments' partial sums added in
// slot (= position) order, then into its token's dwte row.
static __global__ void encoder_backward_merge_kernel(float *dwte, const float *partial, const int *multi_token,
                                                     const int *multi_slot, int C, size_t n_threads) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_threads) return;
    const int groups = C / 8;
    const int b = (int)(idx / (size_t)groups);
    const int c = (int)(idx % (size_t)groups) * 8;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    for (int slot = multi_slot[b]; slot < multi_slot[b + 1]; slot++) {
        const float *src = partial + (size_t)slot * C + c;
        const Packed128<float> lo = load128(src), hi = load128(src + 4);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            acc[k] += lo[k];
            acc[4 + k] += hi[k];
        }
    }
    encoder_add8(dwte + (size_t)multi_token[b] * C + c, acc);
}

// One thread per (t, 8 channels): sums dout[b, t, c..c+8) over b = 0..B-1 in order.
static __global__ void encoder_backward_wpe_kernel(float *dwpe, const floatX *dout, int B, int T, int C,
                                                   size_t n_threads) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_threads) return;
    const int groups = C / 8;
    const int t = (int)(idx / (size_t)groups);
    const int c = (int)(idx % (size_t)groups) * 8;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    for (int b = 0; b < B; b++) {
        const Packed128<floatX> d = load128(dout + ((size_t)b * T + t) * C + c);
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += to_float(d[k]);
    }
    encoder_add8(dwpe + (size_t)t * C + c, acc);
}

// dwte (rows of wte, C) += token-grouped sums of dout (B,T,C); dwpe (>= T rows, C) += sums over b
// (NULL: no position embedding).
// eb must hold the buckets of this batch's inputs (encoder_buckets_build on the same stream, or
// one ordered before s) and be made for this C. Deterministic: fixed segments and summation
// orders, no atomics.
static inline void encoder_backward(float *dwte, float *dwpe, const floatX *dout, const EncoderBuckets *eb,
                                    int B, int T, int C, cudaStream_t s) {
    require(eb != NULL && eb->built, "encoder_backward: encoder_buckets_build was not called");
    require(B == eb->B && T == eb->T && C == eb->C, "encoder_backward: B, T, C differ from the buckets'");
    require(C > 0 && C % 8 == 0, "encoder_backward: need C % 8 == 0");
    require(aligned16(dwte) && aligned16(dwpe) && aligned16(dout),
            "encoder_backward: dwte, dwpe, dout must be 16-byte aligned");
    const int block = 256;
    const int *d = eb->dev;
    const size_t n_seg = (size_t)eb->num_segments * (C / 8);
    if (n_seg > 0) {
        encoder_backward_segments_kernel<<<(unsigned)llmc_ceil_div(n_seg, block), block, 0, s>>>(
            dwte, eb->partial, dout, d, d + eb->off_seg_start, d + eb->off_seg_token, d + eb->off_seg_slot, C, n_seg);
        cudaLaunchCheck("encoder_backward_segments_kernel");
    }
    const size_t n_multi = (size_t)eb->num_multi * (C / 8);
    if (n_multi > 0) {
        encoder_backward_merge_kernel<<<(unsigned)llmc_ceil_div(n_multi, block), block, 0, s>>>(
            dwte, eb->partial, d + eb->off_multi_token, d + eb->off_multi_slot, C, n_multi);
        cudaLaunchCheck("encoder_backward_merge_kernel");
    }
    if (dwpe == NULL) return;
    const size_t n_wpe = (size_t)T * (C / 8);
    encoder_backward_wpe_kernel<<<(unsigned)llmc_ceil_div(n_wpe, block), block, 0, s>>>(dwpe, dout, B, T, C, n_wpe);
    cudaLaunchCheck("encoder_backward_wpe_kernel");
}

#endif // LLMC_ENCODER_CUH
