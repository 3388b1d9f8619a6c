/*
fault.h - TRAIN_FAULT, a testing aid: a failure injected into one process of a run, so that a
test can watch the other processes stop with its message instead of hanging
(scripts/test_multigpu.sh train-fault, train-fault-tcp, train-fault-fs).

TRAIN_FAULT=rank:step[:exit|cuda|kill]: that rank stops at the start of that training step
(1-based, as printed): exit(1) with a message (the default), a CUDA error through the trainer's
cudaCheck, or SIGKILL (no message at all).

The launch plan reads the variable with the rest of the environment (llmc/launch_plan.h), so
that a malformed value stops the run before anything starts; multi_gpu_fault (llmc/multi_gpu.h)
is the trainer's one call, at the start of each step, and acts on fault_due. Unset, nothing here
does anything. C11, no CUDA, no NCCL: test_train_host checks the parser.
*/
#ifndef LLMC_FAULT_H
#define LLMC_FAULT_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FAULT_NONE = 0, FAULT_EXIT = 1, FAULT_CUDA = 2, FAULT_KILL = 3 };

typedef struct {
    int rank, step, mode;  // step 0: no fault; mode FAULT_*
} Fault;

// TRAIN_FAULT=rank:step[:exit|cuda|kill] (v, NULL when unset) into *f, rank below max_rank: 0
// (also when unset: no fault), or -1 with a message.
static inline int fault_parse(const char *v, int max_rank, Fault *f, char *err, size_t err_len) {
    f->rank = f->step = 0;
    f->mode = FAULT_NONE;
    if (v == NULL || v[0] == 0) return 0;
    char buf[64];
    const char *bad = "TRAIN_FAULT=%s: expected rank:step[:exit|cuda|kill] (rank >= 0, step >= 1; a testing aid)";
    if (strlen(v) >= sizeof(buf)) {
        llmc_set_error(err, err_len, bad, v);
        return -1;
    }
    snprintf(buf, sizeof(buf), "%s", v);
    char *colon1 = strchr(buf, ':');
    if (colon1 == NULL) {
        llmc_set_error(err, err_len, bad, v);
        return -1;
    }
    *colon1 = 0;
    char *s_step = colon1 + 1, *colon2 = strchr(s_step, ':');
    const char *s_mode = "exit";
    if (colon2 != NULL) {
        *colon2 = 0;
        s_mode = colon2 + 1;
    }
    char *end1 = NULL, *end2 = NULL;
    errno = 0;
    const long r = strtol(buf, &end1, 10), st = strtol(s_step, &end2, 10);
    const int m = strcmp(s_mode, "exit") == 0 ? FAULT_EXIT : strcmp(s_mode, "cuda") == 0 ? FAULT_CUDA
                : strcmp(s_mode, "kill") == 0 ? FAULT_KILL : FAULT_NONE;
    if (buf[0] == 0 || s_step[0] == 0 || *end1 != 0 || *end2 != 0 || errno != 0 || r < 0 || r >= max_rank ||
        st < 1 || st > INT_MAX || m == FAULT_NONE || buf[0] == '+' || s_step[0] == '+') {
        llmc_set_error(err, err_len, bad, v);
        return -1;
    }
    f->rank = (int)r;
    f->step = (int)st;
    f->mode = m;
    return 0;
}

// The fault due at the start of training step `step` (1-based) on rank: its mode, or FAULT_NONE.
static inline int fault_due(const Fault *f, int rank, int step) {
    return f->step == step && f->rank == rank ? f->mode : FAULT_NONE;
}

#endif // LLMC_FAULT_H
