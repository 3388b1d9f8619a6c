/*
cuda_check.cuh - the checks of the programs (the trainer, the tests, dev/): a failing CUDA or
cuBLAS call, kernel launch or precondition prints what failed and where, and exits, so that no
later result is the product of a call that silently failed. The library (flce/) never exits: it
returns a status instead and does not include this header.
*/
#ifndef COMMON_CUDA_CHECK_CUH
#define COMMON_CUDA_CHECK_CUH

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

static inline void cuda_check_at(cudaError_t err, const char *what, const char *file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "[CUDA ERROR] %s: %s\n  at %s:%d\n", what, cudaGetErrorString(err), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(call) cuda_check_at((call), #call, __FILE__, __LINE__)
// after a kernel launch: the launch error, named by the kernel
#define cudaLaunchCheck(name) cuda_check_at(cudaGetLastError(), "launch of " name, __FILE__, __LINE__)

static inline void cublas_check_at(cublasStatus_t st, const char *what, const char *file, int line) {
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "[cuBLAS ERROR] %s: status %d (%s)\n  at %s:%d\n", what, (int)st,
                cublasLtGetStatusString(st), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(call) cublas_check_at((call), #call, __FILE__, __LINE__)

// A precondition of a host function: what names the function and the rule broken.
static inline void require(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "[ERROR] %s\n", what);
        exit(EXIT_FAILURE);
    }
}

#endif // COMMON_CUDA_CHECK_CUH
