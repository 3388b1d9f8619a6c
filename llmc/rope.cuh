/*
rope.cuh - rotary position embeddings of Llama 3 and Qwen2.5 (Hugging Face's rotate-half
layout), applied in place to the query and key heads of a token-major buffer, and the backward.

  forward   per head x (hd channels) of the token at position t, j < hd/2, c = cos[t][j], s = sin[t][j]:
              x[j]        <- x[j] c - x[j + hd/2] s
              x[j + hd/2] <- x[j + hd/2] c + x[j] s
            which is transformers' q * cos + rotate_half(q) * sin with rotate_half(x) =
            cat(-x2, x1) and cos = cat(freqs, freqs).cos(): channel j pairs with j + hd/2
            (not with j + 1, as Meta's original complex layout does).
  backward  the transpose rotation (a rotation's inverse), in place on the gradients:
              d[j]        <- d[j] c + d[j + hd/2] s
              d[j + hd/2] <- d[j + hd/2] c - d[j] s

Layout: token n = b*T + t (position t = n % T: every sequence starts at 0) has its NH query heads
at q + n*ldq + h*hd and its NKV key heads at k + n*ldk + h*hd; a fused QKV buffer [q | k | v]
per token is q = qkv, k = qkv + NH*hd, ldq = ldk = (NH + 2*NKV)*hd, and v is not touched. One
launch rotates both q and k. cos, sin: the fp32 tables (max_seq_len, hd/2) of llmc/rope.h on the
device.

Rounding: fp32 math on the bf16 values and the fp32 table entries, one rounding to bf16 at the
store. transformers with a bf16 model differs: its cos/sin are cast to bf16 (cos.to(x.dtype)),
and (q * cos) + (rotate_half(q) * sin) rounds each product and the sum to bf16: four roundings
of bf16 size against our one, so ours is at least as accurate, and the two agree to about one
bf16 ulp (not bitwise).

Any even hd. When hd % 16 == 0, ldq and ldk are multiples of 8 and q, k, cos, sin are 16-byte
aligned (the usual case: hd = 64, 128), each thread moves 8 channels and their partners as
16-byte vectors; otherwise a thread handles one pair.

Requirements (checked on the host): hd even, ldq >= NH*hd, ldk >= NKV*hd, T <= max_seq_len
(the tables' rows). The query and key heads of the buffer must not overlap (each element is
read and written by one thread).
*/
#ifndef LLMC_ROPE_CUH
#define LLMC_ROPE_CUH

#include <stdio.h>

#include "cuda_common.cuh"

// V channels at p and their partners at p + half, as floats
template <int V> __device__ __forceinline__ void rope_load(float *a, float *b, const floatX *p, int half) {
    if constexpr (V == 8) {
        const Packed128<floatX> va = load128(p), vb = load128(p + half);
#pragma unroll
        for (int v = 0; v < 8; v++) {
            a[v] = to_float(va[v]);
            b[v] = to_float(vb[v]);
        }
    } else {
#pragma unroll
        for (int v = 0; v < V; v++) {
            a[v] = to_float(p[v]);
            b[v] = to_float(p[v + half]);
        }
    }
}

template <int V> __device__ __forceinline__ void rope_store(floatX *p, int half, const float *a, const float *b) {
    if constexpr (V == 8) {
        Packed128<floatX> va, vb;
#pragma unroll
        for (int v = 0; v < 8; v++) {
            va[v] = __float2bfloat16(a[v]);
            vb[v] = __float2bfloat16(b[v]);
        }
        store128(p, va);
        store128(p + half, vb);
    } else {
#pragma unroll
        for (int v = 0; v < V; v++) {
            p[v] = __float2bfloat16(a[v]);
            p[v + half] = __float2bfloat16(b[v]);
        }
    }
}

// V consecutive table entries (fp32)
template <int V> __device__ __forceinline__ void rope_load_table(float *c, const float *p) {
    if constexpr (V == 8) {
        const Packed128<float> lo = load128(p), hi = load128(p + 4);
#pragma unroll
        for (int v = 0; v < 4; v++) {
            c[v] = lo[v];
            c[v + 4] = hi[v];
        }
    } else {
#pragma unroll
        for (int v = 0; v < V; v++) c[v] = p[v];
    }
}

// Item i: token n = i / per_token, then head h and channel group g of V pairs within the token
// (per_token = (NH + NKV) * groups). Grid-stride over the items; each element of the q and k
// heads belongs to exactly one item. BWD: the transpose rotation (sin negated).
template <int V, bool BWD>
static __global__ void rope_kernel(floatX *q, floatX *k, const float *cos_t, const float *sin_t, int T, int NH,
                                   int hd, int ldq, int ldk, int per_token, size_t n_items) {
    const int half = hd / 2, groups = half / V;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_items; i += stride) {
        const size_t n = i / (size_t)per_token;
        const int r = (int)(i - n * (size_t)per_token);
        const int h = r / groups, j = (r - h * groups) * V;
        const int t = (int)(n % (size_t)T);
        floatX *x = h < NH ? q + n * (size_t)ldq + (size_t)h * hd : k + n * (size_t)ldk + (size_t)(h - NH) * hd;
        float x1[V], x2[V], c[V], s[V];
        rope_load<V>(x1, x2, x + j, half);
        rope_load_table<V>(c, cos_t + (size_t)t * half + j);
        rope_load_table<V>(s, sin_t + (size_t)t * half + j);
        float y1[V], y2[V];
#pragma unroll
        for (int v = 0; v < V; v++) {
            const float sn = BWD ? -s[v] : s[v];
            y1[v] = x1[v] * c[v] - x2[v] * sn;
            y2[v] = x2[v] * c[v] + x1[v] * sn;
        }
        rope_store<V>(x + j, half, y1, y2);
    }
}

template <bool BWD>
static inline void rope_launch(const char *name, floatX *q, floatX *k, const float *cos_t, const float *sin_t, int B,
                               int T, int NH, int NKV, int hd, int ldq, int ldk, int max_seq_len, cudaStream_t s) {
    char msg[256];
    snprintf(msg, sizeof(msg), "%s: need B >= 0, T >= 1, NH >= 0, NKV >= 0 and an even hd >= 2 (got B = %d, T = %d, "
             "NH = %d, NKV = %d, hd = %d)", name, B, T, NH, NKV, hd);
    require(B >= 0 && T >= 1 && NH >= 0 && NKV >= 0 && hd >= 2 && hd % 2 == 0, msg);
    snprintf(msg, sizeof(msg), "%s: T = %d is longer than the tables' %d positions (max_seq_len)", name, T,
             max_seq_len);
    require(T <= max_seq_len, msg);
    snprintf(msg, sizeof(msg), "%s: the row strides must hold the heads: ldq = %d < NH*hd = %lld or ldk = %d < "
             "NKV*hd = %lld", name, ldq, (long long)NH * hd, ldk, (long long)NKV * hd);
    require((NH == 0 || (long long)ldq >= (long long)NH * hd) && (NKV == 0 || (long long)ldk >= (long long)NKV * hd),
            msg);
    snprintf(msg, sizeof(msg), "%s: q (NH > 0), k (NKV > 0), cos and sin must not be NULL", name);
    require((NH == 0 || q != NULL) && (NKV == 0 || k != NULL) && cos_t != NULL && sin_t != NULL, msg);
    const int heads = NH + NKV;
    if (B == 0 || heads == 0) return;
    const int vec = (hd / 2) % 8 == 0 && (NH == 0 || (aligned16(q) && ldq % 8 == 0)) &&
                    (NKV == 0 || (aligned16(k) && ldk % 8 == 0)) && aligned16(cos_t) && aligned16(sin_t);
    const int V = vec ? 8 : 1;
    const int per_token = heads * (hd / 2 / V);
    const size_t n_items = (size_t)B * T * per_token;
    const int block = 256;
    const size_t max_grid = 132 * 64;  // enough blocks to fill any GPU; the loop covers the rest
    size_t grid = llmc_ceil_div(n_items, block);
    if (grid > max_grid) grid = max_grid;
    if (vec)
        rope_kernel<8, BWD><<<(unsigned)grid, block, 0, s>>>(q, k, cos_t, sin_t, T, NH, hd, ldq, ldk, per_token,
                                                             n_items);
    else
        rope_kernel<1, BWD><<<(unsigned)grid, block, 0, s>>>(q, k, cos_t, sin_t, T, NH, hd, ldq, ldk, per_token,
                                                             n_items);
    cudaLaunchCheck("rope_kernel");
}

// q (B*T rows of stride ldq: NH heads of hd), k (stride ldk: NKV heads) rotated in place by the
// angles of their positions t = 0 .. T-1 in each of the B sequences. cos_t, sin_t: the device
// tables (max_seq_len, hd/2) of rope_tables_checked (llmc/rope.h). NH or NKV may be 0 (then q
// or k may be NULL).
static inline void rope_forward(floatX *q, floatX *k, const float *cos_t, const float *sin_t, int B, int T, int NH,
                                int NKV, int hd, int ldq, int ldk, int max_seq_len, cudaStream_t s) {
    rope_launch<false>("rope_forward", q, k, cos_t, sin_t, B, T, NH, NKV, hd, ldq, ldk, max_seq_len, s);
}

// dq, dk (the layout of rope_forward's q, k): the gradients of the rotated heads in, those of
// the heads before the rotation out (the transpose rotation, in place; dq = and dk =, not +=).
static inline void rope_backward(floatX *dq, floatX *dk, const float *cos_t, const float *sin_t, int B, int T, int NH,
                                 int NKV, int hd, int ldq, int ldk, int max_seq_len, cudaStream_t s) {
    rope_launch<true>("rope_backward", dq, dk, cos_t, sin_t, B, T, NH, NKV, hd, ldq, ldk, max_seq_len, s);
}

#endif // LLMC_ROPE_CUH
