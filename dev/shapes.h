/*
shapes.h - the benchmark shapes dev/'s FLCE programs share (flce_bench, flce_plans) and the
expansion of -s's list, whose named sets stand for them. Plain C, for C and CUDA C alike.
*/
#ifndef DEV_SHAPES_H
#define DEV_SHAPES_H

#include <stdio.h>
#include <string.h>

// N x H x V
#define DEFAULT_SHAPES "8192x768x50304,4096x4096x128256,16384x4096x151936,65535x1024x176245"
// -s llama: N x H x V of Llama-3.2-1B, Llama-3.2-3B (16384 tokens), Qwen2.5-0.5B, Qwen2.5-1.5B
// (32768 tokens); their 3-GEMM floors add up to about the default four's
#define LLAMA_SHAPES "16384x2048x128256,16384x3072x128256,32768x896x151936,32768x1536x151936"

// -s's list with the named sets (default, llama, all) replaced by their shapes, into out; 0 if
// it does not fit
static int expand_shapes(const char *list, char *out, size_t cap) {
    char buf[2048];
    snprintf(buf, sizeof(buf), "%s", list);
    size_t used = 0;
    out[0] = '\0';
    for (char *tok = strtok(buf, ","); tok != NULL; tok = strtok(NULL, ",")) {
        const char *add = tok;
        if (strcmp(tok, "default") == 0) add = DEFAULT_SHAPES;
        else if (strcmp(tok, "llama") == 0) add = LLAMA_SHAPES;
        else if (strcmp(tok, "all") == 0) add = DEFAULT_SHAPES "," LLAMA_SHAPES;
        const int n = snprintf(out + used, cap - used, "%s%s", used > 0 ? "," : "", add);
        if (n < 0 || (size_t)n >= cap - used) return 0;
        used += (size_t)n;
    }
    return 1;
}

#endif  // DEV_SHAPES_H
