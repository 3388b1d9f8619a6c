/*
zero.h - ZeRO-1's arithmetic on the host (llm.c's -z 1): how the flat parameter vector is cut
into one slice per rank, which part of each tensor a rank's AdamW updates, and the gradient
buckets that are reduced while the backward pass runs. C11, no CUDA, no NCCL: the trainer
(train_gpt.cu) and llmc/comm.h act on what it computes, test_train_host checks it.

Slices: the flat vector of n parameters (the model's table order, llmc/model.h) is cut into nproc slices of
S elements each, S = ceil(n / nproc) rounded up to ZERO_ALIGN, so that every slice is the same
size (what ncclReduceScatter and ncclAllGather take) and starts aligned; rank r owns
[r S, (r + 1) S), of which [r S, min(n, (r + 1) S)) are real parameters and the rest padding.
The gradient and bf16 parameter buffers hold nproc * S elements (the padding stays zero); with
ZeRO-1 the fp32 master weights and AdamW's m and v hold only the rank's slice, with ZeRO-0 all n.
Unlike llm.c, which cuts every tensor into nproc parts (and needs each divisible by nproc), a
slice boundary may fall inside a tensor: the rank's AdamW covers the part of each tensor within
its slice (zero_optimizer_ranges), and each element keeps the stochastic-rounding counter of its
index within its whole tensor, so that its random bits are those of ZeRO-0.

Buckets (gradient reduction overlapped with the backward, -ov 1): bucket l < L is layer l's
slice of each tensor stacked over the layers, which the model's backward reports final once
layer l is done (GPT-2: its fcprojb gradient is written earlier, by the lnf backward for the
last layer, by layer l + 1's ln1 backward otherwise); bucket L holds the tensors outside the
layers (GPT-2: wte, wpe, lnfw and lnfb: wte's gradient is complete only after the encoder's
backward, the flce head writes it too). A bucket is a list of pieces of the flat
vector: its tensors' ranges, adjacent ones merged; with ZeRO-1 also cut at the slice boundaries,
each piece reduced to the rank that owns it. The boundaries depend on the model and nproc
alone, so the reduction is the same from step to step.
*/
#ifndef LLMC_ZERO_H
#define LLMC_ZERO_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <stdint.h>
#include <string.h>

#include "model.h"

// elements: each slice starts at a multiple of 4 KiB in the fp32 buffers, 2 KiB in the bf16 one
#define ZERO_ALIGN 1024

typedef struct {
    int stage;             // 0: every rank holds the whole optimizer state; 1: its slice
    int nproc, rank;
    size_t n;              // parameters
    size_t slice;          // S: elements of each rank's slice, a multiple of ZERO_ALIGN
    size_t padded;         // nproc * S: the gradient and bf16 parameter buffers' length
    size_t lo, count;      // this rank's slice: real elements [lo, lo + count), count <= S
    size_t opt_lo, opt_count;  // the optimizer state this rank keeps and updates: the slice
                               // under ZeRO-1, [0, n) under ZeRO-0
} ZeroLayout;

// The real elements of rank r's slice.
static inline size_t zero_slice_count(size_t n, size_t slice, int r) {
    const size_t lo = (size_t)r * slice;
    return n > lo ? (n - lo < slice ? n - lo : slice) : 0;
}

// The layout of n parameters over nproc ranks at ZeRO stage (0 or 1), seen from rank. 0, or -1
// with a message.
static inline int zero_layout(ZeroLayout *z, size_t n, int nproc, int rank, int stage, char *err, size_t err_len) {
    memset(z, 0, sizeof(*z));
    if (stage != 0 && stage != 1) {
        llmc_set_error(err, err_len, "ZeRO stage %d: this trainer has stages 0 and 1 (-z)", stage);
        return -1;
    }
    if (nproc < 1 || rank < 0 || rank >= nproc || n == 0) {
        llmc_set_error(err, err_len, "ZeRO layout: rank %d of %d processes, %zu parameters", rank, nproc, n);
        return -1;
    }
    const size_t per_rank = n / (size_t)nproc + (n % (size_t)nproc != 0);
    const size_t slice = (per_rank + ZERO_ALIGN - 1) / ZERO_ALIGN * ZERO_ALIGN;
    if (slice < per_rank || slice > SIZE_MAX / (size_t)nproc / sizeof(float)) {
        llmc_set_error(err, err_len, "ZeRO layout: %zu parameters over %d processes overflow", n, nproc);
        return -1;
    }
    z->stage = stage;
    z->nproc = nproc;
    z->rank = rank;
    z->n = n;
    z->slice = slice;
    z->padded = slice * (size_t)nproc;
    z->lo = (size_t)rank * slice;
    z->count = zero_slice_count(n, slice, rank);
    z->opt_lo = stage == 1 ? z->lo : 0;
    z->opt_count = stage == 1 ? z->count : n;
    return 0;
}

// The rank whose slice holds flat element i.
static inline int zero_owner(const ZeroLayout *z, size_t i) { return (int)(i / z->slice); }

// ----------------------------------------------------------------------------
// the optimizer's share of each tensor

// One tensor's part of this rank's optimizer share: elements [offset, offset + numel) of the
// flat vector (params, grads), stored from state_offset in the rank's master, m and v, the
// first of them element index0 of its tensor (the stochastic rounding's counter).
typedef struct {
    int tensor;
    size_t offset, state_offset, numel, index0;
} ZeroRange;

// The non-empty parts of the nt tensors within [opt_lo, opt_lo + opt_count), in table order;
// out holds nt entries. Their count.
static inline int zero_optimizer_ranges(const ZeroLayout *z, const ParameterTensor *t, int nt, ZeroRange *out) {
    const size_t lo = z->opt_lo, hi = z->opt_lo + z->opt_count;
    int k = 0;
    for (int i = 0; i < nt; i++) {
        const size_t a = t[i].offset > lo ? t[i].offset : lo;
        const size_t b = t[i].offset + t[i].numel < hi ? t[i].offset + t[i].numel : hi;
        if (a >= b) continue;
        out[k].tensor = i;
        out[k].offset = a;
        out[k].state_offset = a - lo;
        out[k].numel = b - a;
        out[k].index0 = a - t[i].offset;
        k++;
    }
    return k;
}

// ----------------------------------------------------------------------------
// gradient buckets

// A piece of the flat gradient vector reduced as one NCCL call: averaged on every rank (owner
// -1: ZeRO-0) or onto the rank that owns it (ZeRO-1).
typedef struct {
    size_t offset, count;
    int owner;
} ZeroPiece;

static inline int zero_num_buckets(const ModelSpec *s) { return s->num_layers + 1; }

// Pieces a bucket can have at most: one per tensor, plus one per slice boundary.
static inline int zero_bucket_pieces_max(const ZeroLayout *z, const ModelSpec *s) { return s->num_tensors + z->nproc; }

// Bucket b's pieces (b < L: layer b; b = L: the tensors outside the layers) in increasing
// offset, adjacent ranges merged, with ZeRO-1 cut at the slice boundaries and owned; out holds
// zero_bucket_pieces_max(z, s). Their count (0 for a bad b).
static inline int zero_bucket_pieces(const ZeroLayout *z, const ModelSpec *s, int b, ZeroPiece *out) {
    const int L = s->num_layers;
    const ParameterTensor *t = s->tensors;
    if (b < 0 || b > L) return 0;
    // the bucket's ranges, merged where adjacent (the table is in offset order)
    size_t start[MODEL_MAX_TENSORS], len[MODEL_MAX_TENSORS];
    int nr = 0;
    for (int i = 0; i < s->num_tensors; i++) {
        const int global = !t[i].layered;
        if ((b == L) != global) continue;
        const size_t per = global ? t[i].numel : t[i].numel / (size_t)L;
        const size_t a = t[i].offset + (global ? 0 : (size_t)b * per);
        if (per == 0) continue;
        if (nr > 0 && start[nr - 1] + len[nr - 1] == a) {
            len[nr - 1] += per;
        } else {
            start[nr] = a;
            len[nr] = per;
            nr++;
        }
    }
    int k = 0;
    for (int r = 0; r < nr; r++) {
        size_t a = start[r];
        const size_t end = start[r] + len[r];
        while (a < end) {
            size_t e = end;
            int owner = -1;
            if (z->stage == 1) {
                owner = zero_owner(z, a);
                const size_t slice_end = (size_t)(owner + 1) * z->slice;
                if (slice_end < e) e = slice_end;
            }
            out[k].offset = a;
            out[k].count = e - a;
            out[k].owner = owner;
            k++;
            a = e;
        }
    }
    return k;
}

#endif // LLMC_ZERO_H
