/*
comm.h - the NCCL communicator the processes of a run share, and everything that goes through
it: the gradients' and parameters' collectives (all-reduce, reduce-scatter, all-gather), the
gradient buckets reduced during the backward (-ov 1, llmc/zero.h's pieces), those of the
vocab-parallel LM head under -tp 1 (the all-gathers of lnf and the targets, flce's all-reduces
through comm_flce, the reduce-scatter of d(lnf)), and the host values' sums and barriers (NCCL on
a small device buffer, so that they need no MPI). For one process every call is a no-op or the
identity, so the trainer's code is the same either way; a build without MULTI_GPU has no NCCL
and runs one process.

The collectives are enqueued on the caller's stream and return once NCCL has taken them,
without waiting for the GPU; comm_wait waits. The communicator is nonblocking and every wait
polls NCCL's state and a deadline (TRAIN_COMM_TIMEOUT), so that a process that failed cannot
hang the others: an NCCL or CUDA error, or the deadline, ends this process with a message
(rv_fail: its exit path tells the others and aborts the communicator, llmc/rendezvous.h).
Averages are ncclAvg: on two processes every element is the same a/2 + b/2 whichever collective
computes it, so ZeRO-0 and ZeRO-1, bucketed or not, give bitwise the same gradients; on more,
NCCL's summation order can differ between collectives (by rounding), while one configuration
repeats its bits.
*/
#ifndef LLMC_COMM_H
#define LLMC_COMM_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../flce/flce.h"  // flce_comm: the LM head's collectives under -tp 1

#ifdef MULTI_GPU
#include <cuda_runtime.h>
#include <nccl.h>
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the trainer needs NCCL 2.14 or later (nonblocking communicators)"
#endif
#endif
#ifdef __CUDACC__
#include "cuda_check.cuh"  // the gradient buckets' streams and events: cudaCheck, as the trainer's
#endif

#include "rendezvous.h"  // NCCL's id from rank 0, the exit path's abort, rv_fail
#include "zero.h"        // the gradient buckets' pieces

typedef struct {
    int rank, nproc;
    int timeout_s;        // the longest wait on another process
#ifdef MULTI_GPU
    int ready;            // the communicator exists: an exit aborts it
    ncclComm_t nccl;
    cudaStream_t stream;  // the host sums' (a small device buffer)
    cudaEvent_t done;
    double *dev_value, *host_value;
#endif
} Comm;

#ifdef MULTI_GPU
typedef char comm_nccl_id_fits[sizeof(ncclUniqueId) == RV_ID_BYTES ? 1 : -1];

// the exit path's abort of the communicator (rv_on_abort)
static void comm_abort(void *ctx) {
    Comm *c = (Comm *)ctx;
    if (c->ready) {
        c->ready = 0;
        ncclCommAbort(c->nccl);
    }
}

static inline void comm_fail_timeout(const Comm *c, const char *what) {
    rv_fail(c->rank, c->nproc, "NCCL: %s did not complete within %d s (another process is stuck or gone; "
            "TRAIN_COMM_TIMEOUT)", what, c->timeout_s);
}

// Waits for an NCCL call that returned ncclInProgress (a nonblocking communicator), polling
// its state; any error ends the process with what and NCCL's words.
static inline void comm_settle(Comm *c, ncclResult_t r, const char *what, double deadline) {
    while (r == ncclInProgress) {
        if (rv_now() > deadline) comm_fail_timeout(c, what);
        rv_sleep_us(100);
        if (ncclCommGetAsyncError(c->nccl, &r) != ncclSuccess) r = ncclInternalError;
    }
    if (r != ncclSuccess)
        rv_fail(c->rank, c->nproc, "NCCL: %s: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(c->nccl));
}

// Waits until stream's work so far is done, polling NCCL's state and the deadline.
static inline void comm_wait_stream(Comm *c, cudaStream_t stream, const char *what) {
    const double deadline = rv_now() + c->timeout_s;
    cudaError_t ce = cudaEventRecord(c->done, stream);
    if (ce != cudaSuccess) rv_fail(c->rank, c->nproc, "CUDA: %s: %s", what, cudaGetErrorString(ce));
    long spins = 0;
    while ((ce = cudaEventQuery(c->done)) == cudaErrorNotReady) {
        ncclResult_t a = ncclSuccess;
        ncclCommGetAsyncError(c->nccl, &a);
        if (a != ncclSuccess && a != ncclInProgress)
            rv_fail(c->rank, c->nproc, "NCCL: %s: %s (%s)", what, ncclGetErrorString(a), ncclGetLastError(c->nccl));
        if ((++spins & 1023) == 0 && rv_now() > deadline) comm_fail_timeout(c, what);
        if (spins > 2000) rv_sleep_us(20);
    }
    if (ce != cudaSuccess) rv_fail(c->rank, c->nproc, "CUDA: %s: %s", what, cudaGetErrorString(ce));
}

// an NCCL call's result: taken (ncclSuccess), or in progress until settled; an error ends the run
static inline void comm_enqueued(Comm *c, ncclResult_t r, const char *what) {
    if (r != ncclSuccess && r != ncclInProgress)
        rv_fail(c->rank, c->nproc, "NCCL: %s: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(c->nccl));
    comm_settle(c, r, what, rv_now() + c->timeout_s);
}
#endif

// NCCL's communicator of c's rank and nproc, once this process's GPU is set (a no-op for one
// process): the id from rank 0 through rv, and from now on an exit aborts it.
static inline void comm_init(Comm *c, Rendezvous *rv) {
#ifdef MULTI_GPU
    if (c->nproc <= 1) return;
    // NVLink multicast (NVLS) stays off unless the environment asks for it
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    char err[1024];
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    ncclResult_t r = ncclSuccess;
    if (c->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
        rv_fail(c->rank, c->nproc, "NCCL: ncclGetUniqueId: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
    if (rv_share_id(rv, (unsigned char *)&id, err, sizeof(err)) != 0) rv_fail(c->rank, c->nproc, "%s", err);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const double deadline = rv_now() + c->timeout_s;
    r = ncclCommInitRankConfig(&c->nccl, c->nproc, id, c->rank, &config);
    if (r != ncclSuccess && r != ncclInProgress)
        rv_fail(c->rank, c->nproc, "NCCL: ncclCommInitRankConfig: %s (%s)", ncclGetErrorString(r),
                ncclGetLastError(NULL));
    c->ready = 1;  // from here on an exit aborts it
    rv_on_abort(rv, comm_abort, c);
    comm_settle(c, r, "creating the communicator (ncclCommInitRankConfig)", deadline);
    rv_id_used(rv);
    cudaError_t ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaMalloc((void **)&c->dev_value, sizeof(double));
    if (ce == cudaSuccess) ce = cudaMallocHost((void **)&c->host_value, sizeof(double));
    if (ce != cudaSuccess)
        rv_fail(c->rank, c->nproc, "CUDA: the buffers of the host sums: %s", cudaGetErrorString(ce));
#else
    (void)c;
    (void)rv;
#endif
}

// ----------------------------------------------------------------------------------------
// the collectives: each is enqueued on a CUDA stream (a cudaStream_t, passed as void *) and
// returns once NCCL has taken it, without waiting for the GPU; comm_wait waits, polling

// fp32 buf[0..n) averaged over the ranks, in place, on every rank (ZeRO-0).
static inline void comm_all_reduce_avg(Comm *c, float *buf, size_t n, void *stream) {
#ifdef MULTI_GPU
    if (c->nproc <= 1) return;
    comm_enqueued(c, ncclAllReduce(buf, buf, n, ncclFloat, ncclAvg, c->nccl, (cudaStream_t)stream),
                  "ncclAllReduce of the gradients");
#else
    (void)c; (void)buf; (void)n; (void)stream;
#endif
}

// fp32 buf of nproc slices of n floats: this rank's slice (at rank * n) becomes the average, or
// with sum the sum, over the ranks of their copies of it, in place; the other slices keep this
// rank's own values. what: the collective in messages.
static inline void comm_reduce_scatter_(Comm *c, float *buf, size_t n, int sum, void *stream, const char *what) {
#ifdef MULTI_GPU
    if (c->nproc <= 1) return;
    comm_enqueued(c, ncclReduceScatter(buf, buf + (size_t)c->rank * n, n, ncclFloat, sum ? ncclSum : ncclAvg, c->nccl,
                                       (cudaStream_t)stream), what);
#else
    (void)c; (void)buf; (void)n; (void)sum; (void)stream; (void)what;
#endif
}

// The average of the gradients' slices (ZeRO-1): slice floats each.
static inline void comm_reduce_scatter_avg(Comm *c, float *buf, size_t slice, void *stream) {
    comm_reduce_scatter_(c, buf, slice, 0, stream, "ncclReduceScatter of the gradients");
}

// The sum of blocks of n floats (-tp 1: the LM head's partial d(lnf)).
static inline void comm_reduce_scatter_sum(Comm *c, float *buf, size_t n, void *stream) {
    comm_reduce_scatter_(c, buf, n, 1, stream, "ncclReduceScatter of the LM head's d(lnf)");
}

// buf of nproc slices of slice_bytes: every rank's slice r becomes rank r's, in place (ZeRO-1:
// the parameters each rank updated; the gradient norm's partial sums; -tp 1: every rank's lnf
// and targets for the vocab-parallel LM head). A copy: exact.
static inline void comm_all_gather(Comm *c, void *buf, size_t slice_bytes, void *stream) {
#ifdef MULTI_GPU
    if (c->nproc <= 1) return;
    comm_enqueued(c, ncclAllGather((char *)buf + (size_t)c->rank * slice_bytes, buf, slice_bytes, ncclUint8, c->nccl,
                                   (cudaStream_t)stream), "ncclAllGather");
#else
    (void)c; (void)buf; (void)slice_bytes; (void)stream;
#endif
}

// One bucket of fp32 gradients (llmc/zero.h's pieces of buf) averaged in one NCCL group: a piece
// of owner -1 on every rank (ncclAllReduce), one of owner r onto rank r (ncclReduce: ZeRO-1,
// where only the owner's slice is used; the others' copies keep their own values).
static inline void comm_reduce_bucket(Comm *c, float *buf, const ZeroPiece *pieces, int n, void *stream) {
#ifdef MULTI_GPU
    if (c->nproc <= 1 || n == 0) return;
    const cudaStream_t st = (cudaStream_t)stream;
    comm_enqueued(c, ncclGroupStart(), "ncclGroupStart of a gradient bucket");
    for (int i = 0; i < n; i++) {
        float *p = buf + pieces[i].offset;
        const ncclResult_t r = pieces[i].owner < 0
                                   ? ncclAllReduce(p, p, pieces[i].count, ncclFloat, ncclAvg, c->nccl, st)
                                   : ncclReduce(p, p, pieces[i].count, ncclFloat, ncclAvg, pieces[i].owner, c->nccl, st);
        if (r != ncclSuccess && r != ncclInProgress)
            rv_fail(c->rank, c->nproc, "NCCL: a gradient bucket's %s: %s (%s)",
                    pieces[i].owner < 0 ? "ncclAllReduce" : "ncclReduce", ncclGetErrorString(r),
                    ncclGetLastError(c->nccl));
    }
    comm_enqueued(c, ncclGroupEnd(), "a gradient bucket (ncclGroupEnd)");
#else
    (void)c; (void)buf; (void)pieces; (void)n; (void)stream;
#endif
}

// Returns when stream's work so far is done; polls NCCL's state and the deadline meanwhile,
// so that a failed process cannot hang this one (several processes; one: a no-op, the caller
// synchronizes as it likes).
static inline void comm_wait(Comm *c, void *stream, const char *what) {
#ifdef MULTI_GPU
    if (c->nproc <= 1) return;
    comm_wait_stream(c, (cudaStream_t)stream, what);
#else
    (void)c; (void)stream; (void)what;
#endif
}

// flce_comm's allreduce over this run's communicator (user: the Comm), for flce's
// vocab_parallel calls (-tp 1): ncclAllReduce in place on the call's stream. Its enqueue is
// polled (a nonblocking communicator: NCCL errors and the deadline end the process with a
// message, never a hang); its completion is not waited for, so that flce's chunks stay
// asynchronous: the caller waits with comm_wait before its next blocking CUDA call. Device
// fp32 buffers only (what flce's GPU calls pass): -1 for anything else.
static inline int comm_flce_allreduce(void *user, void *buf, size_t count, flce_comm_dtype dtype, flce_comm_op op,
                                      void *cuda_stream) {
    Comm *c = (Comm *)user;
    if (c == NULL || dtype != FLCE_COMM_FP32) return -1;
    if (c->nproc <= 1 || count == 0) return 0;
#ifdef MULTI_GPU
    if (!c->ready) return -1;
    comm_enqueued(c, ncclAllReduce(buf, buf, count, ncclFloat, op == FLCE_COMM_MAX ? ncclMax : ncclSum, c->nccl,
                                   (cudaStream_t)cuda_stream), "ncclAllReduce of flce's vocab-parallel statistics");
    return 0;
#else
    (void)buf; (void)op; (void)cuda_stream;
    return -1;
#endif
}

// The flce_comm of comm_flce_allreduce over c (for flce_set_comm).
static inline flce_comm comm_flce(Comm *c) {
    flce_comm f;
    f.user = c;
    f.allreduce = comm_flce_allreduce;
    return f;
}

// A host value summed over the ranks (NCCL on a small device buffer: no MPI needed).
static inline double comm_sum(Comm *c, double x) {
#ifdef MULTI_GPU
    if (c->nproc <= 1) return x;
    if (!c->ready) rv_fail(c->rank, c->nproc, "comm_sum before comm_init (a bug)");
    *c->host_value = x;
    cudaError_t ce = cudaMemcpyAsync(c->dev_value, c->host_value, sizeof(double), cudaMemcpyHostToDevice, c->stream);
    if (ce != cudaSuccess) rv_fail(c->rank, c->nproc, "CUDA: a host sum's copy: %s", cudaGetErrorString(ce));
    const ncclResult_t r = ncclAllReduce(c->dev_value, c->dev_value, 1, ncclDouble, ncclSum, c->nccl, c->stream);
    comm_settle(c, r, "ncclAllReduce of a host value", rv_now() + c->timeout_s);
    ce = cudaMemcpyAsync(c->host_value, c->dev_value, sizeof(double), cudaMemcpyDeviceToHost, c->stream);
    if (ce != cudaSuccess) rv_fail(c->rank, c->nproc, "CUDA: a host sum's copy: %s", cudaGetErrorString(ce));
    comm_wait_stream(c, c->stream, "ncclAllReduce of a host value");
    return *c->host_value;
#else
    (void)c;
    return x;
#endif
}

// Every rank reaches it before any leaves (after comm_init).
static inline void comm_barrier(Comm *c) {
    if (c->nproc > 1) comm_sum(c, 0.0);
}

// comm_barrier as a callback (CheckpointWrite's barrier)
static inline void comm_barrier_cb(void *c) {
    comm_barrier((Comm *)c);
}

// The communicator's end: every rank there, then it and the host sums' buffers go (a no-op
// without one).
static inline void comm_finish(Comm *c) {
#ifdef MULTI_GPU
    if (c->ready) {
        comm_barrier(c);
        const double deadline = rv_now() + c->timeout_s;
        comm_settle(c, ncclCommFinalize(c->nccl), "ncclCommFinalize", deadline);
        c->ready = 0;
        const ncclResult_t r = ncclCommDestroy(c->nccl);
        if (r != ncclSuccess) rv_fail(c->rank, c->nproc, "NCCL: ncclCommDestroy: %s", ncclGetErrorString(r));
        cudaEventDestroy(c->done);
        cudaStreamDestroy(c->stream);
        cudaFree(c->dev_value);
        cudaFreeHost(c->host_value);
    }
#else
    (void)c;
#endif
}

// ----------------------------------------------------------------------------------------
// the gradient buckets (-ov 1; CUDA code only): on the step's last micro-step the model's
// backward reports each bucket final (llmc/model.cuh's GradReadyHook: layer b for b < L, the
// tensors outside the layers for b = L); comm_buckets_launch reduces it on a stream of its own
// while the backward goes on, comm_buckets_wait makes the main stream wait for them all. The
// buckets are fixed by the model and nproc (llmc/zero.h), so a step is bitwise repeatable.

#ifdef __CUDACC__
typedef struct {
    int n;                 // buckets (0: none made)
    ZeroPiece *pieces;     // bucket b: pieces[first[b] .. first[b + 1])
    int *first;
    cudaStream_t stream;   // the buckets' reductions
    cudaEvent_t ready, done;
    int pending;           // launched since the last comm_buckets_wait
} CommBuckets;

// The buckets of spec's gradients in the layout z (llmc/zero.h), their stream and events.
static inline void comm_buckets_init(CommBuckets *b, const ZeroLayout *z, const ModelSpec *spec) {
    memset(b, 0, sizeof(*b));
    const int nb = zero_num_buckets(spec);
    b->pieces = (ZeroPiece *)malloc_check((size_t)nb * zero_bucket_pieces_max(z, spec) * sizeof(ZeroPiece));
    b->first = (int *)malloc_check((size_t)(nb + 1) * sizeof(int));
    int k = 0;
    for (int i = 0; i < nb; i++) {
        b->first[i] = k;
        k += zero_bucket_pieces(z, spec, i, b->pieces + k);
    }
    b->first[nb] = k;
    b->n = nb;
    // the highest priority: a bucket's reduction takes SMs as soon as the backward's kernels
    // free some, so that it finishes under the backward rather than after it
    int least = 0, greatest = 0;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithPriority(&b->stream, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaEventCreateWithFlags(&b->ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming));
}

// Bucket `bucket` of the gradients grads, final in s's work so far, averaged over c's ranks on
// the buckets' stream while s goes on.
static inline void comm_buckets_launch(CommBuckets *b, Comm *c, float *grads, int bucket, cudaStream_t s) {
    cudaCheck(cudaEventRecord(b->ready, s));
    cudaCheck(cudaStreamWaitEvent(b->stream, b->ready, 0));
    const int first = b->first[bucket];
    comm_reduce_bucket(c, grads, b->pieces + first, b->first[bucket + 1] - first, b->stream);
    b->pending = 1;
}

// s waits for the buckets launched since the last call: 1, or 0 when none were (the gradients
// are to be reduced another way).
static inline int comm_buckets_wait(CommBuckets *b, cudaStream_t s) {
    if (!b->pending) return 0;
    b->pending = 0;
    cudaCheck(cudaEventRecord(b->done, b->stream));
    cudaCheck(cudaStreamWaitEvent(s, b->done, 0));
    return 1;
}

static inline void comm_buckets_free(CommBuckets *b) {
    if (b->n > 0) {
        cudaCheck(cudaStreamDestroy(b->stream));
        cudaCheck(cudaEventDestroy(b->ready));
        cudaCheck(cudaEventDestroy(b->done));
    }
    free(b->pieces);
    free(b->first);
    memset(b, 0, sizeof(*b));
}
#endif

#endif // LLMC_COMM_H
