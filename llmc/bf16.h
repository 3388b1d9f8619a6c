/*
bf16.h - bf16 on the host: round to nearest even (NaN stays a quiet NaN of the same sign), and
back. The model files of llm.c store bf16 as these 16 bits; the trainer uploads parameters in it.
*/
#ifndef LLMC_BF16_H
#define LLMC_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float float_from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline void floats_to_bf16(const float *in, uint16_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = bf16_from_float(in[i]);
}

static inline void bf16_to_floats(const uint16_t *in, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = float_from_bf16(in[i]);
}

#endif // LLMC_BF16_H
