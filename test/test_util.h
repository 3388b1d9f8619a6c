/*
test_util.h - the small pieces every test program shares: pass/fail bookkeeping with a
closing "N passed, M failed" line, relative L2 errors that fail on NaN, and bf16 rounding.
*/
#ifndef FLCE_TEST_UTIL_H
#define FLCE_TEST_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int test_passed = 0, test_failed = 0;

// Records one check; prints a line for failures always and for passes when verbose.
static inline int test_check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "  ok  " : "FAIL  ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) test_passed++; else test_failed++;
    return ok;
}

// Prints the closing summary line and returns the process exit code.
static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed == 0 ? 0 : 1;
}

// ||out - ref|| / ||ref||; NaN or inf anywhere in out gives INFINITY, so it never passes.
// When ref is all zero the absolute norm of out is returned.
static inline double rel_l2_f64(const float *out, const double *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) return INFINITY;
        double d = (double)out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static inline double rel_l2_f32(const float *out, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) return INFINITY;
        double d = (double)out[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

// Round-to-nearest-even float -> bf16 bits, and back (NaN stays NaN).
static inline uint16_t f32_to_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_bits_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Fills x[n] with reproducible uniform values in [-scale, scale) from a 64-bit LCG state.
static inline void fill_uniform(float *x, size_t n, float scale, uint64_t *state) {
    for (size_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(*state >> 11) * (1.0 / 9007199254740992.0);
        x[i] = (float)((2.0 * u - 1.0) * scale);
    }
}

#endif // FLCE_TEST_UTIL_H
