/*
models.cuh - the GPU half of every model family the trainer knows (llmc/model.cuh's
interface), and the one place that maps a ModelSpec's family to its ModelOps.
*/
#ifndef LLMC_MODELS_CUH
#define LLMC_MODELS_CUH

#include "gpt2.cuh"
#include "llama.cuh"
#include "model.cuh"
#include "models.h"

// The family's operations; NULL for a family this build has no GPU code for.
static inline const ModelOps *model_ops_of(const ModelSpec *spec) {
    if (spec->family == gpt2_family()) return &gpt2_ops;
    if (spec->family == llama_family()) return &llama_ops;
    return NULL;
}

#endif // LLMC_MODELS_CUH
