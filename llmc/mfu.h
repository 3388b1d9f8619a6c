/*
mfu.h - model flops utilisation: the flops of a training token, and the dense bf16 peak of
the GPUs it is measured against (their data sheets; tensor cores, no sparsity).
*/
#ifndef LLMC_MFU_H
#define LLMC_MFU_H

#include <string.h>

typedef struct {
    const char *name_part;  // a part of cudaDeviceProp.name; the first matching row counts
    const char *label;
    double bf16_flops;
} GpuPeak;

// the more specific names first: "H100 PCIe" before "H100"
static const GpuPeak mfu_gpu_peaks[] = {
    {"H200 NVL", "H200 NVL", 835e12},
    {"H100 NVL", "H100 NVL", 835e12},
    {"H100 PCIe", "H100 PCIe", 756e12},
    {"GH200", "GH200", 989e12},
    {"H200", "H200 SXM", 989e12},
    {"H100", "H100 SXM", 989e12},
    {"A100", "A100", 312e12},
    {"L40S", "L40S", 362e12},
};

// The peak of the GPU named device_name, or NULL for a GPU not in the table (no MFU then).
static inline const GpuPeak *mfu_gpu_peak(const char *device_name) {
    for (size_t i = 0; i < sizeof(mfu_gpu_peaks) / sizeof(mfu_gpu_peaks[0]); i++)
        if (strstr(device_name, mfu_gpu_peaks[i].name_part) != NULL) return &mfu_gpu_peaks[i];
    return NULL;
}

// Flops of one training token (forward and backward; PaLM's count): 6 per parameter, plus
// 12 L T C for attention over a sequence of T.
static inline double mfu_flops_per_token(size_t num_parameters, int num_layers, int T, int channels) {
    return 6.0 * (double)num_parameters + 12.0 * num_layers * (double)T * channels;
}

// Utilisation in percent of nproc GPUs of the given peak at tokens_per_s (all GPUs together).
static inline double mfu_percent(double flops_per_token, double tokens_per_s, const GpuPeak *peak, int nproc) {
    return flops_per_token * tokens_per_s / peak->bf16_flops / nproc * 100.0;
}

#endif // LLMC_MFU_H
