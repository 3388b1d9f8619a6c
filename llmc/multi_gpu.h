/*
multi_gpu.h - the processes of a run, one per GPU, as main() starts and ends them: a MultiGpu
holds this process's place in the run and the parts that do the work, each in a header of its
own:
  llmc/launch_plan.h  what the flags and the environment ask for (-p flags, Slurm, mpirun)
  llmc/rendezvous.h   how the processes meet (mpi, fs, tcp) and how a failure reaches them all
  llmc/comm.h         the NCCL communicator: collectives, gradient buckets, host sums, barriers
  llmc/fault.h        TRAIN_FAULT, a failure injected for the tests
Every call is a no-op or the identity for a single process, so the trainer's code is the same
either way; the trainer's collectives take the MultiGpu's Comm.

Order in main(): launch_plan (flags and environment, no side effect), multi_gpu_init_processes
(MPI_Init under mpi), train_config_check, multi_gpu_join (fs, tcp: every process present, a
watcher thread started), the host's checks of files, then multi_gpu_device_checked and
cudaSetDevice, multi_gpu_init_comm (NCCL), training (multi_gpu_fault at the start of each step),
multi_gpu_finish. The exit path reads the MultiGpu after main() returns (a non-zero return, or
the clean end): main's is static.
*/
#ifndef LLMC_MULTI_GPU_H
#define LLMC_MULTI_GPU_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "launch_plan.h"
#include "fault.h"
#include "rendezvous.h"
#include "comm.h"

typedef struct {
    int rank, nproc, local_rank;  // local_rank: this process's GPU index on its host
    Fault fault;                  // TRAIN_FAULT (step 0: none)
    Rendezvous rv;
    Comm comm;
} MultiGpu;

// The ranks, no GPU: MPI_Init under mpi; the plan's otherwise. 0, or -1 with a message.
static inline int multi_gpu_init_processes(MultiGpu *mg, const LaunchPlan *p, char *err, size_t err_len) {
    memset(mg, 0, sizeof(*mg));
    if (launch_plan_check_build(p, err, err_len) != 0) return -1;
    mg->fault = p->fault;
    if (rv_init(&mg->rv, p, err, err_len) != 0) return -1;
    mg->rank = mg->rv.rank;
    mg->nproc = mg->rv.nproc;
    mg->local_rank = mg->rv.local_rank;
    mg->comm.rank = mg->rank;
    mg->comm.nproc = mg->nproc;
    mg->comm.timeout_s = p->timeout_s;
    if (p->method == LAUNCH_MPI && mg->fault.step > 0 && mg->fault.rank >= mg->nproc) {
        llmc_set_error(err, err_len, "TRAIN_FAULT: rank %d, and the run has %d processes", mg->fault.rank, mg->nproc);
        return -1;
    }
    return 0;
}

// fs, tcp: every process present, the watcher running (a no-op otherwise). 0, or -1 with a message.
static inline int multi_gpu_join(MultiGpu *mg, const LaunchPlan *p, char *err, size_t err_len) {
    return rv_join(&mg->rv, p, err, err_len);
}

// This process's GPU among the host's devices: 0, or -1 with a message when it has none. A
// process that sees one GPU takes it (a launcher that gives each its own: srun --gpus-per-task=1).
static inline int multi_gpu_device_checked(const MultiGpu *mg, int devices, int *device, char *err, size_t err_len) {
    *device = mg->nproc > 1 && devices > 1 ? mg->local_rank : 0;
    if (*device >= devices) {
        llmc_set_error(err, err_len, "rank %d is process %d of its host, which shows %d GPU%s: one process per GPU "
                       "(-pg <GPUs per host> numbers them as rank %% pg)", mg->rank, *device, devices,
                       devices == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

// NCCL's communicator, once this process's GPU is set (a no-op for one process).
static inline void multi_gpu_init_comm(MultiGpu *mg) {
    comm_init(&mg->comm, &mg->rv);
}

// TRAIN_FAULT at the start of training step `step` (1-based): exit and kill happen here; the
// return value is FAULT_CUDA when the caller is to make a CUDA call fail, else FAULT_NONE.
static inline int multi_gpu_fault(const MultiGpu *mg, int step) {
    const int due = fault_due(&mg->fault, mg->rank, step);
    if (due == FAULT_KILL) {
        fflush(stdout);
        raise(SIGKILL);
    }
    if (due == FAULT_EXIT)
        rv_fail(mg->rank, mg->nproc, "TRAIN_FAULT: rank %d stops at step %d (an injected failure, a testing aid)",
                mg->rank, step);
    return due;
}

// The end of a run: every rank there, the communicator and MPI closed, the link's goodbyes.
static inline void multi_gpu_finish(MultiGpu *mg) {
    comm_finish(&mg->comm);
    rv_finish(&mg->rv);
}

#endif // LLMC_MULTI_GPU_H
