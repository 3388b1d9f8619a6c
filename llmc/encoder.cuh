/*
encoder.cuh - the GPT-2 input embedding: token embedding (wte) plus position embedding (wpe).

  forward   out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]                        (out =)
  backward  dwte[v,:] += sum of dout[b,t,:] over the positions with inp[b,t] == v
            dwpe[t,:] += sum over b of dout[b,t,:]                         (fp32, +=)

Why host-side buckets: the wte gradient is a scatter-add (many positions hit the same row).
Atomics would make it non-deterministic, so the positions are grouped by token id on the
host (the ids are on the host anyway, the data loader produced them) and each (token,
8 channels) slice of dwte is then owned by exactly one GPU thread, which sums its positions
in ascending position order. No atomics, a fixed order, bitwise reproducible.

Requirements: C % 8 == 0 and every tensor pointer 16-byte aligned (checked on the host),
token ids in [0, rows of wte) (not checked on the device: the caller validates its data).
*/
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include <string.h>

#include "cuda_common.cuh"

// --- forward --------------------------------------------------------------------------------

// one thread per 8 output channels (one 16-byte vector) of one (b, t)
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
    const Packed128<floatX> pe = load128(wpe + (size_t)t * C + c);
    Packed128<floatX> o;
#pragma unroll
    for (int k = 0; k < 8; k++) o[k] = __float2bfloat16(to_float(te[k]) + to_float(pe[k]));
    store128(out + bt * (size_t)C + c, o);
}

// out (B,T,C) = wte[inp] + wpe[t]; inp (B,T) device token ids
static inline void encoder_forward(floatX *out, const int *inp, const floatX *wte, const floatX *wpe,
                                   int B, int T, int C, cudaStream_t s) {
    require(B > 0 && T > 0 && C > 0 && C % 8 == 0, "encoder_forward: need B, T > 0 and C % 8 == 0");
    require(aligned16(out) && aligned16(wte) && aligned16(wpe),
            "encoder_forward: out, wte, wpe must be 16-byte aligned");
    const size_t n_vec = (size_t)B * T * (C / 8);
    const int block = 256;
    encoder_forward_kernel<<<(unsigned)llmc_ceil_div(n_vec, block), block, 0, s>>>(out, inp, wte, wpe, T, C, n_vec);
    cudaLaunchCheck("encoder_forward_kernel");
}

// --- the buckets of the backward --------------------------------------------------------------

// The positions (b*T + t) of one batch grouped by token id. Buckets are in ascending token id
// order, positions within a bucket in ascending order. Host and device hold the same layout:
//   [0, BT)             positions, bucket after bucket
//   [BT, 2BT+1)         bucket_start[0..num_buckets] (offsets into positions; last = BT)
//   [2BT+1, 3BT+1)      bucket_token[0..num_buckets)
typedef struct {
    int B, T;             // the shape the buffers were allocated for
    int num_buckets;      // distinct tokens of the last build
    int *host;            // pinned, 3*B*T+1 ints (the staging buffer of the upload)
    int *dev;             // device, 3*B*T+1 ints
    int *counts;          // host scratch of the counting sort, one per token id (grows)
    int counts_cap;
    cudaEvent_t uploaded; // recorded after the upload; the next build waits on it before
                          // rewriting the pinned buffer that the DMA may still be reading
    int built;            // a build has happened (encoder_backward refuses to run otherwise)
} EncoderBuckets;

static inline void encoder_buckets_init(EncoderBuckets *eb, int B, int T) {
    require(eb != NULL && B > 0 && T > 0, "encoder_buckets_init: need B, T > 0");
    require((double)B * T * 3.0 + 1.0 < 2147483647.0, "encoder_buckets_init: B*T too large");
    memset(eb, 0, sizeof(*eb));
    eb->B = B;
    eb->T = T;
    const size_t n = 3 * (size_t)B * T + 1;
    cudaCheck(cudaMallocHost((void **)&eb->host, n * sizeof(int)));
    cudaCheck(cudaMalloc((void **)&eb->dev, n * sizeof(int)));
    cudaCheck(cudaEventCreateWithFlags(&eb->uploaded, cudaEventDisableTiming));
}

// Groups the positions of inp_host (B*T token ids, host memory) by token id and uploads the
// groups to the device on stream s. inp_host is only read during this call (the upload is
// from the struct's own pinned buffer), so the caller may reuse it at once. The call waits
// (host side) only for the upload of the previous build, if that has not happened yet.
// Must be called before each encoder_backward whose inputs differ from the last build's.
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
    int *positions = eb->host, *bucket_start = eb->host + BT, *bucket_token = eb->host + 2 * BT + 1;
    // exclusive prefix sum: counts[v] becomes the first slot of token v's positions
    int nb = 0, offset = 0;
    for (int v = 0; v <= max_id; v++) {
        const int c = counts[v];
        if (c == 0) continue;
        bucket_start[nb] = offset;
        bucket_token[nb] = v;
        nb++;
        counts[v] = offset;
        offset += c;
    }
    bucket_start[nb] = BT;
    // positions scattered in ascending order, so each bucket lists them ascending (stable)
    for (int i = 0; i < BT; i++) positions[counts[inp_host[i]]++] = i;
    eb->num_buckets = nb;
    cudaCheck(cudaMemcpyAsync(eb->dev, eb->host, (3 * (size_t)BT + 1) * sizeof(int),
                              cudaMemcpyHostToDevice, s));
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
    free(eb->counts);
    memset(eb, 0, sizeof(*eb));
}

// --- backward -------------------------------------------------------------------------------

// row[0..8) += acc[0..8), fp32, as two 16-byte accesses (row is 32-byte aligned: C % 8 == 0)
static __device__ __forceinline__ void encoder_add8(float *row, const float acc[8]) {
    Packed128<float> lo = load128(row), hi = load128(row + 4);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        lo[k] += acc[k];
        hi[k] += acc[4 + k];
    }
    store128(row, lo);
    store128(row + 4, hi);
}

// One thread per (bucket, 8 channels): sums dout over the bucket's positions in ascending order,
// then adds the sum into its token's dwte row. Four positions are loaded per step so that
// several loads are in flight (frequent tokens make long buckets); the additions still happen
// one position after the other, so the order is fixed.
static __global__ void encoder_backward_wte_kernel(float *dwte, const floatX *dout, const int *positions,
                                                   const int *bucket_start, const int *bucket_token,
                                                   int C, size_t n_threads) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_threads) return;
    const int groups = C / 8;
    const int bucket = (int)(idx / (size_t)groups);
    const int c = (int)(idx % (size_t)groups) * 8;
    const int start = bucket_start[bucket], end = bucket_start[bucket + 1];
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
    encoder_add8(dwte + (size_t)bucket_token[bucket] * C + c, acc);
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

// dwte (rows of wte, C) += token-grouped sums of dout (B,T,C); dwpe (>= T rows, C) += sums over b.
// eb must hold the buckets of this batch's inputs (encoder_buckets_build on the same stream, or
// one ordered before s). Deterministic: fixed summation orders, no atomics.
static inline void encoder_backward(float *dwte, float *dwpe, const floatX *dout, const EncoderBuckets *eb,
                                    int B, int T, int C, cudaStream_t s) {
    require(eb != NULL && eb->built, "encoder_backward: encoder_buckets_build was not called");
    require(B == eb->B && T == eb->T, "encoder_backward: B, T differ from the buckets'");
    require(C > 0 && C % 8 == 0, "encoder_backward: need C % 8 == 0");
    require(aligned16(dwte) && aligned16(dwpe) && aligned16(dout),
            "encoder_backward: dwte, dwpe, dout must be 16-byte aligned");
    const int BT = B * T, block = 256;
    const int *positions = eb->dev, *bucket_start = eb->dev + BT, *bucket_token = eb->dev + 2 * BT + 1;
    const size_t n_wte = (size_t)eb->num_buckets * (C / 8);
    if (n_wte > 0) {
        encoder_backward_wte_kernel<<<(unsigned)llmc_ceil_div(n_wte, block), block, 0, s>>>(
            dwte, dout, positions, bucket_start, bucket_token, C, n_wte);
        cudaLaunchCheck("encoder_backward_wte_kernel");
    }
    const size_t n_wpe = (size_t)T * (C / 8);
    encoder_backward_wpe_kernel<<<(unsigned)llmc_ceil_div(n_wpe, block), block, 0, s>>>(dwpe, dout, B, T, C, n_wpe);
    cudaLaunchCheck("encoder_backward_wpe_kernel");
}

#endif // LLMC_ENCODER_CUH
