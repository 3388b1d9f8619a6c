/*
vp_comm.h - an emulated communicator for flce's vocabulary parallelism (flce.h, flce_comm):
P "ranks" are threads of one process, each with its own handle; an allreduce waits until every
rank has posted its buffer, each rank reduces all P buffers in rank order 0..P-1 (fixed order:
every rank gets bitwise the same result, as NCCL's all-reduce gives), and writes its result
back once every rank has read the inputs. Buffers are host memory by default; a test of the
library sets to_host / from_host to copy device buffers (after waiting for the stream).
Counts, dtypes and ops that differ between the ranks of one collective fail it on every rank
(return -1), as do a failing copy hook, so a mismatched schedule shows up as an error rather
than a hang.
Needs pthreads (_POSIX_C_SOURCE >= 200112L for pthread_barrier_t).
*/
#ifndef FLCE_TEST_VP_COMM_H
#define FLCE_TEST_VP_COMM_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "flce.h"

#define VP_MAX_RANKS 8

typedef struct {
    int P;
    pthread_barrier_t barrier;
    void *buf[VP_MAX_RANKS];        // each rank's host copy of its buffer
    size_t count[VP_MAX_RANKS];
    int dtype[VP_MAX_RANKS], op[VP_MAX_RANKS], failed[VP_MAX_RANKS];
    // device buffers: bytes from src (the rank's buffer) to the host copy and back; 0 = success
    int (*to_host)(void *dst, const void *src, size_t bytes, void *stream);
    int (*from_host)(void *dst, const void *src, size_t bytes, void *stream);
    int calls;                      // collectives run (counted by rank 0)
} vp_world;

typedef struct {
    vp_world *w;
    int rank;
} vp_rank;

static inline int vp_world_init(vp_world *w, int P) {
    memset(w, 0, sizeof(*w));
    if (P < 1 || P > VP_MAX_RANKS) return -1;
    w->P = P;
    return pthread_barrier_init(&w->barrier, NULL, (unsigned)P) == 0 ? 0 : -1;
}

static inline void vp_world_destroy(vp_world *w) { pthread_barrier_destroy(&w->barrier); }

static inline int vp_allreduce(void *user, void *buf, size_t count, flce_comm_dtype dtype, flce_comm_op op,
                               void *stream) {
    vp_rank *r = (vp_rank *)user;
    vp_world *w = r->w;
    const size_t es = dtype == FLCE_COMM_FP64 ? 8 : 4, bytes = count * es;
    void *mine = malloc(bytes ? bytes : 1), *out = malloc(bytes ? bytes : 1);
    int fail = mine == NULL || out == NULL;
    if (!fail && bytes) {
        if (w->to_host) fail = w->to_host(mine, buf, bytes, stream) != 0;
        else memcpy(mine, buf, bytes);
    }
    w->buf[r->rank] = mine;
    w->count[r->rank] = count;
    w->dtype[r->rank] = (int)dtype;
    w->op[r->rank] = (int)op;
    w->failed[r->rank] = fail;
    pthread_barrier_wait(&w->barrier);
    // every rank sees the same posts and so takes the same decision
    for (int k = 0; k < w->P; k++)
        if (w->failed[k] || w->count[k] != count || w->dtype[k] != (int)dtype || w->op[k] != (int)op ||
            (dtype != FLCE_COMM_FP32 && dtype != FLCE_COMM_FP64) || (op != FLCE_COMM_SUM && op != FLCE_COMM_MAX))
            fail = 1;
    if (!fail) {
        for (size_t i = 0; i < count; i++) {
            if (dtype == FLCE_COMM_FP64) {
                double acc = ((const double *)w->buf[0])[i];
                for (int k = 1; k < w->P; k++) {
                    const double x = ((const double *)w->buf[k])[i];
                    acc = op == FLCE_COMM_SUM ? acc + x : (x > acc ? x : acc);
                }
                ((double *)out)[i] = acc;
            } else {
                float acc = ((const float *)w->buf[0])[i];
                for (int k = 1; k < w->P; k++) {
                    const float x = ((const float *)w->buf[k])[i];
                    acc = op == FLCE_COMM_SUM ? acc + x : (x > acc ? x : acc);
                }
                ((float *)out)[i] = acc;
            }
        }
    }
    pthread_barrier_wait(&w->barrier);  // every input read: the posts may be replaced
    if (r->rank == 0) w->calls++;
    if (!fail && bytes) {
        if (w->from_host) fail = w->from_host(buf, out, bytes, stream) != 0;
        else memcpy(buf, out, bytes);
    }
    free(mine);
    free(out);
    return fail ? -1 : 0;
}

// The flce_comm of rank r (r must outlive it).
static inline flce_comm vp_comm_of(vp_rank *r) {
    flce_comm c;
    c.user = r;
    c.allreduce = vp_allreduce;
    return c;
}

// Rows [row0, row0 + rows) of a padded vocabulary Vp split into P nearly equal shards, and how
// many of them are real classes of V (the last shards hold the padding).
static inline void vp_shard(int64_t V, int64_t Vp, int P, int rank, int64_t *row0, int64_t *rows, int64_t *real) {
    const int64_t per = (Vp + P - 1) / P;
    int64_t a = per * rank, b = a + per;
    if (a > Vp) a = Vp;
    if (b > Vp) b = Vp;
    *row0 = a;
    *rows = b - a;
    int64_t r = V - a;
    *real = r < 0 ? 0 : (r > b - a ? b - a : r);
}

#endif // FLCE_TEST_VP_COMM_H
