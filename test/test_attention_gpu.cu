/*
test_attention_gpu.cu - the attention kernels' GPU test (test/gpu_kernels_attention.cuh) on
its own: the same cases test_train_gpu runs, built in seconds rather than with the trainer,
for work on llmc/attention.cuh and llmc/attention_sm90.cuh. Needs a CUDA GPU.
*/
#include <stdio.h>

#include "../llmc/cuda_common.cuh"
#include "gpu_kernels_attention.cuh"
#include "test_util.h"

int main(void) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fprintf(stderr, "test_attention_gpu: no CUDA device\n");
        return 2;
    }
    test_attention();
    return test_summary();
}
