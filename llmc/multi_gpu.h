/*
multi_gpu.h - the processes of a run: one per GPU under mpirun (built with MULTI_GPU: MPI for
the ranks and host reductions, NCCL for the gradients), or a single one. Every call is a no-op
or the identity for a single process, so the trainer's code is the same either way.

Order: multi_gpu_init_processes (MPI only: ranks, no GPU), then, when every flag and file
checks out, cudaSetDevice(multi_gpu_device(&mg, devices)) and multi_gpu_init_comm (NCCL).
*/
#ifndef LLMC_MULTI_GPU_H
#define LLMC_MULTI_GPU_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MULTI_GPU
#include <mpi.h>
#include <nccl.h>
#endif

typedef struct {
    int rank, nproc, local_rank;  // local_rank: among the processes of this host
#ifdef MULTI_GPU
    ncclComm_t comm;
#endif
} MultiGpu;

#ifdef MULTI_GPU
// A failed MPI or NCCL call: which, why and where; then exit.
static inline void multi_gpu_check_at(int ok, const char *lib, const char *what, const char *why, const char *file,
                                      int line) {
    if (ok) return;
    fprintf(stderr, "[%s ERROR] %s: %s\n  at %s:%d\n", lib, what, why, file, line);
    exit(EXIT_FAILURE);
}
#define ncclCheck(call)                                                                                      \
    do {                                                                                                     \
        const ncclResult_t r_ = (call);                                                                      \
        multi_gpu_check_at(r_ == ncclSuccess, "NCCL", #call, ncclGetErrorString(r_), __FILE__, __LINE__);   \
    } while (0)
#define mpiCheck(call)                                                                                       \
    do {                                                                                                     \
        const int r_ = (call);                                                                               \
        char why_[MPI_MAX_ERROR_STRING] = "";                                                                \
        int len_ = 0;                                                                                        \
        if (r_ != MPI_SUCCESS) MPI_Error_string(r_, why_, &len_);                                            \
        multi_gpu_check_at(r_ == MPI_SUCCESS, "MPI", #call, why_, __FILE__, __LINE__);                       \
    } while (0)
#endif

// The ranks: MPI under mpirun; rank 0 of 1 otherwise. Touches no GPU.
static inline void multi_gpu_init_processes(MultiGpu *mg, int *argc, char ***argv) {
    memset(mg, 0, sizeof(*mg));
    mg->nproc = 1;
#ifdef MULTI_GPU
    mpiCheck(MPI_Init(argc, argv));
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &mg->rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &mg->nproc));
    MPI_Comm local;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mg->rank, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_rank(local, &mg->local_rank));
    mpiCheck(MPI_Comm_free(&local));
#else
    (void)argc;
    (void)argv;
#endif
}

// The GPU of this process among the host's devices: by rank within the host.
static inline int multi_gpu_device(const MultiGpu *mg, int devices) {
    return devices > 0 ? mg->local_rank % devices : 0;
}

// NCCL's communicator, once this process's GPU is set.
static inline void multi_gpu_init_comm(MultiGpu *mg) {
#ifdef MULTI_GPU
    // NVLink multicast (NVLS) stays off unless the environment asks for it
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    ncclUniqueId id;
    if (mg->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    mpiCheck(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
    ncclCheck(ncclCommInitRank(&mg->comm, mg->nproc, id, mg->rank));
#else
    (void)mg;
#endif
}

// with_comm: multi_gpu_init_comm was called (an error before the GPU leaves none to destroy)
static inline void multi_gpu_finish(MultiGpu *mg, int with_comm) {
#ifdef MULTI_GPU
    if (with_comm) ncclCheck(ncclCommDestroy(mg->comm));
    mpiCheck(MPI_Finalize());
#else
    (void)mg;
    (void)with_comm;
#endif
}

// fp32 gradients averaged over the ranks, in place, on a CUDA stream (cudaStream_t).
static inline void multi_gpu_average(MultiGpu *mg, float *buf, size_t n, void *stream) {
#ifdef MULTI_GPU
    if (mg->nproc > 1) ncclCheck(ncclAllReduce(buf, buf, n, ncclFloat, ncclAvg, mg->comm, (cudaStream_t)stream));
#else
    (void)mg; (void)buf; (void)n; (void)stream;
#endif
}

// A host value summed over the ranks.
static inline double multi_gpu_sum(MultiGpu *mg, double x) {
#ifdef MULTI_GPU
    double out = x;
    if (mg->nproc > 1) mpiCheck(MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return out;
#else
    (void)mg;
    return x;
#endif
}

static inline void multi_gpu_barrier(MultiGpu *mg) {
#ifdef MULTI_GPU
    if (mg->nproc > 1) mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
#else
    (void)mg;
#endif
}

// multi_gpu_barrier as a callback (CheckpointWrite's barrier)
static inline void multi_gpu_barrier_cb(void *mg) {
    multi_gpu_barrier((MultiGpu *)mg);
}

#endif // LLMC_MULTI_GPU_H
