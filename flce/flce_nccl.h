/*
flce_nccl.h - flce's communicator (flce.h, flce_comm) over an NCCL communicator, header only, for
programs built with NCCL (nccl.h, -lnccl): flce_comm_nccl(comm) gives what flce_set_comm takes.
flce calls the all-reduce on its own stream with device buffers, so the collective is enqueued
there like any other work of the call; an NCCL error comes back to flce as -1 (FLCE_ERR_COMM).
A caller that needs time limits or fault handling (the trainer's llmc/comm.h) writes its
own allreduce instead.
*/
#ifndef FLCE_NCCL_H
#define FLCE_NCCL_H

#include <cuda_runtime.h>
#include <nccl.h>

#include "flce.h"

static inline int flce_nccl_allreduce(void *user, void *buf, size_t count, flce_comm_dtype dtype, flce_comm_op op,
                                      void *stream) {
    return ncclAllReduce(buf, buf, count, dtype == FLCE_COMM_FP64 ? ncclFloat64 : ncclFloat32,
                         op == FLCE_COMM_MAX ? ncclMax : ncclSum, (ncclComm_t)user, (cudaStream_t)stream) ==
                   ncclSuccess
               ? 0
               : -1;
}

static inline flce_comm flce_comm_nccl(ncclComm_t comm) {
    flce_comm c;
    c.user = comm;
    c.allreduce = flce_nccl_allreduce;
    return c;
}

#endif // FLCE_NCCL_H
