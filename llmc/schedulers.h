/*
schedulers.h - the learning-rate schedules of llm.c: cosine, linear, constant and wsd
(warm-up, stable, 1 - sqrt decay), each after a linear warm-up, each ending at lr * final_frac.
*/
#ifndef LLMC_SCHEDULERS_H
#define LLMC_SCHEDULERS_H

#include <math.h>
#include <string.h>

typedef enum { LR_COSINE, LR_LINEAR, LR_CONSTANT, LR_WSD } LRSchedule;

static const char *const lr_schedule_names[] = {"cosine", "linear", "constant", "wsd"};

// The schedule named name; 0, or -1 for an unknown name.
static inline int lr_schedule_parse(const char *name, LRSchedule *out) {
    for (int k = 0; k < (int)(sizeof(lr_schedule_names) / sizeof(lr_schedule_names[0])); k++) {
        if (strcmp(name, lr_schedule_names[k]) == 0) {
            *out = (LRSchedule)k;
            return 0;
        }
    }
    return -1;
}

// The learning rate of step (from 0) of total steps.
static inline float learning_rate(LRSchedule kind, int step, int total, int warmup, float lr, float final_frac) {
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    const float lr_min = lr * final_frac;
    if (total <= warmup) return lr;
    const float progress = (float)(step - warmup) / (float)(total - warmup);
    switch (kind) {
    case LR_CONSTANT: return lr;
    case LR_LINEAR: return lr - (lr - lr_min) * progress;
    case LR_WSD: {
        // stable to 80% of the run, then 1 - sqrt decay to lr_min
        const int decay_start = (int)(0.8f * (float)total);
        if (step < decay_start) return lr;
        const float p = (float)(step - decay_start) / (float)(total - decay_start);
        return lr_min + (lr - lr_min) * (1.0f - sqrtf(p));
    }
    case LR_COSINE: break;
    }
    // M_PI's value: M_PI itself is not in strict C11
    return lr_min + 0.5f * (lr - lr_min) * (1.0f + cosf((float)3.14159265358979323846 * progress));
}

#endif // LLMC_SCHEDULERS_H
