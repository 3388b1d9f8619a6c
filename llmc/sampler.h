/*
sampler.h - sampling a token from one position's logits, as llm.c samples: an xorshift*
generator for the coin, then the first token whose cumulative softmax probability exceeds it.
The logits themselves come from the GPU (train_gpt.cu); this is the host half.
*/
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <math.h>
#include <stdint.h>

static inline unsigned int random_u32(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (unsigned int)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

// uniform in [0, 1): the top 24 bits of a draw, exact in a float
static inline float random_f32(uint64_t *state) {
    return (float)(random_u32(state) >> 8) / 16777216.0f;
}

// The token a sample starts from: eot, the tokenizer's end of text, when the model has it
// (eot < vocab_size); -1 otherwise (data of another tokenizer), and there is nothing to sample.
static inline int sampler_start_token(int eot, int vocab_size) {
    return eot >= 0 && eot < vocab_size ? eot : -1;
}

// A token of logits[0..n) drawn with softmax probabilities, for coin in [0, 1).
static inline int sample_softmax(const float *logits, int n, float coin) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = fmaxf(max, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)(logits[i] - max));
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)(logits[i] - max)) / sum;
        if (coin < acc) return i;
    }
    return n - 1;
}

#endif // LLMC_SAMPLER_H
