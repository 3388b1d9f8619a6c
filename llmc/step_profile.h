/*
step_profile.h - where a training step's time goes, measured in the run itself: CUDA events
recorded on the step's stream at phase boundaries, the time between consecutive events
summed per phase over the steps. Off unless the trainer's flag -sp 1 asks for it (then the
trainer prints the table at the end); a mark costs one cudaEventRecord. Phases of the same
name (each micro-step's) are added together.

The phases tile the step (the first event is the step's own start event), so they add up to
the step time that the log prints, host gaps included: a phase's time runs from the previous
mark to its own, so time the GPU spends waiting for the host (loading a batch, a host sync)
lands in the phase during which the host was busy. The first step (setup, autotuning) is
left out of the sums.
*/
#ifndef LLMC_STEP_PROFILE_H
#define LLMC_STEP_PROFILE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda_check.cuh"

#define STEP_PROFILE_MAX 64  // marks a step (micro-steps repeat theirs; more are dropped)

typedef struct {
    int on;
    int n;                              // marks recorded in this step
    int steps;                          // steps summed
    cudaEvent_t ev[STEP_PROFILE_MAX];
    const char *name[STEP_PROFILE_MAX]; // the phase that ends at mark i
    int n_phases;                       // distinct phase names, in the order first seen
    const char *phase[STEP_PROFILE_MAX];
    double sum_ms[STEP_PROFILE_MAX];    // per phase
    double total_ms;
} StepProfile;

static StepProfile step_profile;

static inline void step_profile_init(int on) {
    memset(&step_profile, 0, sizeof(step_profile));
    step_profile.on = on;
    if (!step_profile.on) return;
    for (int i = 0; i < STEP_PROFILE_MAX; i++) cudaCheck(cudaEventCreate(&step_profile.ev[i]));
}

// The phase `name` ends here (the first mark of a step starts it; its name is not used).
static inline void step_profile_mark(const char *name, cudaStream_t s) {
    StepProfile *p = &step_profile;
    if (!p->on || p->n >= STEP_PROFILE_MAX) return;
    p->name[p->n] = name;
    cudaCheck(cudaEventRecord(p->ev[p->n], s));
    p->n++;
}

// The step is over: its phases are added (from the second step on; waits for the last mark).
static inline void step_profile_end_step(int first_step) {
    StepProfile *p = &step_profile;
    if (!p->on) return;
    if (p->n > 1 && !first_step) {
        cudaCheck(cudaEventSynchronize(p->ev[p->n - 1]));
        for (int i = 1; i < p->n; i++) {
            float ms = 0.0f;
            cudaCheck(cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]));
            int k = 0;
            while (k < p->n_phases && strcmp(p->phase[k], p->name[i]) != 0) k++;
            if (k == p->n_phases) p->phase[p->n_phases++] = p->name[i];
            p->sum_ms[k] += ms;
            p->total_ms += ms;
        }
        p->steps++;
    }
    p->n = 0;
}

static inline void step_profile_print(void) {
    StepProfile *p = &step_profile;
    if (!p->on || p->steps == 0) return;
    printf("step profile (-sp 1): mean of %d steps, %.2f ms a step\n", p->steps, p->total_ms / p->steps);
    printf("| phase | ms | share |\n|---|---|---|\n");
    for (int k = 0; k < p->n_phases; k++)
        printf("| %s | %.2f | %.1f%% |\n", p->phase[k], p->sum_ms[k] / p->steps, 100.0 * p->sum_ms[k] / p->total_ms);
}

static inline void step_profile_free(void) {
    if (!step_profile.on) return;
    for (int i = 0; i < STEP_PROFILE_MAX; i++) cudaCheck(cudaEventDestroy(step_profile.ev[i]));
    step_profile.on = 0;
}

#endif // LLMC_STEP_PROFILE_H
