/*
flce.cu - the library's API (flce.h) and one call's dispatch: the context and its setters,
the tensors' checks, and a call's three steps:

    prepare        targets checked, non-ignored tokens counted, exact target logits
    the schedule   the plan's (flce_plan.c) on the context's GEMM path: the cuBLASLt path
                   (flce_lt.cu) or, for bf16 inputs on a compute 9.0 GPU, the Hopper path
                   (flce_sm90.cu)
    finalize       loss scalar, bf16 outputs from fp32 accumulators, error record

Configuration, messages and the planner are flce_plan.c's (no GPU needed).
*/
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flce.h"
#include "flce_call.cuh"
#include "gemm_sm90.cuh"  // common/: sm90_available

static const char *flce_phase_names[FLCE_T_COUNT] = {"prepare", "logits GEMM", "row kernel",
                                                     "d_hidden GEMM", "d_weight GEMM",
                                                     "d_bias GEMM", "finalize"};

const char *flce_last_error(const flce_context *ctx) { return ctx != NULL ? ctx->message : ""; }

// x *= *scale unless *scale is 1: 16-byte vectors where x is aligned (vec), then the tail. Every
// block reads the scale and leaves at once when there is nothing to do.
template <typename T>
__global__ void flce_scale_device_kernel(T *x, int64_t n, const float *scale, int vec) {
    const float g = *scale;
    if (g == 1.0f) return;
    constexpr int VEC = Packed128<T>::size;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t nvec = vec ? n / VEC : 0;
    for (int64_t i = first; i < nvec; i += stride) {
        Packed128<T> v = load128(x + VEC * i);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = from_float<T>(to_float(v[k]) * g);
        store128(x + VEC * i, v);
    }
    for (int64_t i = nvec * VEC + first; i < n; i += stride) x[i] = from_float<T>(to_float(x[i]) * g);
}

flce_status flce_scale_device(void *x, flce_dtype dtype, int64_t n, const float *scale, void *cuda_stream) {
    if (n < 0) return FLCE_ERR_INVALID_SIZE;
    if (!flce_is_dtype(dtype)) return FLCE_ERR_INVALID_VALUE;
    if (n == 0) return FLCE_OK;
    if (x == NULL || scale == NULL) return FLCE_ERR_NULL_POINTER;
    cudaStream_t stream = (cudaStream_t)cuda_stream;
    const int64_t vec = dtype == FLCE_BF16 ? 8 : 4;
    const int64_t blocks = (n / vec + 255) / 256;
    const unsigned grid = (unsigned)(blocks < 1 ? 1 : blocks > 2048 ? 2048 : blocks);
    const int aligned = aligned16(x);
    if (dtype == FLCE_BF16)
        flce_scale_device_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>((__nv_bfloat16 *)x, n, scale, aligned);
    else
        flce_scale_device_kernel<float><<<grid, 256, 0, stream>>>((float *)x, n, scale, aligned);
    return cudaGetLastError() == cudaSuccess ? FLCE_OK : FLCE_ERR_CUDA;
}

// out = x * g (g = *scale, or 1 without one), rounded once to TO: 8 elements a thread with
// 16-byte accesses where both pointers are 16-byte aligned (vec), the rest one by one
template <typename TO>
__global__ void flce_cast_scaled_kernel(const float *x, TO *out, int64_t n, const float *scale, int vec) {
    const float g = scale != NULL ? *scale : 1.0f;
    constexpr int OV = Packed128<TO>::size;  // outputs a 16-byte store: 8 bf16 or 4 fp32
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t nvec = vec ? n / 8 : 0;
    for (int64_t i = first; i < nvec; i += stride) {
        const Packed128<float> a = load128(x + 8 * i), b = load128(x + 8 * i + 4);
        Packed128<TO> o[8 / OV];
#pragma unroll
        for (int k = 0; k < 8; k++) o[k / OV][k % OV] = from_float<TO>((k < 4 ? a[k] : b[k - 4]) * g);
#pragma unroll
        for (int j = 0; j < 8 / OV; j++) store128(out + 8 * i + OV * j, o[j]);
    }
    for (int64_t i = nvec * 8 + first; i < n; i += stride) out[i] = from_float<TO>(x[i] * g);
}

flce_status flce_cast_scaled_device(const float *x, void *out, flce_dtype out_dtype, int64_t n, const float *scale,
                                    void *cuda_stream) {
    if (n < 0) return FLCE_ERR_INVALID_SIZE;
    if (!flce_is_dtype(out_dtype)) return FLCE_ERR_INVALID_VALUE;
    if (n == 0) return FLCE_OK;
    if (x == NULL || out == NULL) return FLCE_ERR_NULL_POINTER;
    cudaStream_t stream = (cudaStream_t)cuda_stream;
    const int64_t blocks = (n / 8 + 255) / 256;
    const unsigned grid = (unsigned)(blocks < 1 ? 1 : blocks > 2048 ? 2048 : blocks);
    const int vec = aligned16(x) && aligned16(out);
    if (out_dtype == FLCE_BF16)
        flce_cast_scaled_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(x, (__nv_bfloat16 *)out, n, scale, vec);
    else
        flce_cast_scaled_kernel<float><<<grid, 256, 0, stream>>>(x, (float *)out, n, scale, vec);
    return cudaGetLastError() == cudaSuccess ? FLCE_OK : FLCE_ERR_CUDA;
}

// ----------------------------------------------------------------------------------------
// context

flce_status flce_create(flce_context **out) {
    if (out == NULL) return FLCE_ERR_NULL_POINTER;
    *out = NULL;
    flce_context *ctx = (flce_context *)calloc(1, sizeof(flce_context));
    if (ctx == NULL) return FLCE_ERR_OUT_OF_MEMORY;
    if (cublasLtCreate(&ctx->gemm.handle) != CUBLAS_STATUS_SUCCESS) {
        free(ctx);
        return FLCE_ERR_CUBLAS;
    }
    void *host = NULL;
    if (cudaHostAlloc(&host, sizeof(flce_host_status), cudaHostAllocMapped) != cudaSuccess) {
        cublasLtDestroy(ctx->gemm.handle);
        free(ctx);
        return FLCE_ERR_CUDA;
    }
    memset(host, 0, sizeof(flce_host_status));
    ctx->gemm.autotune = 1;
    ctx->hopper = flce_hopper_default();
    ctx->pingpong = -1;
    ctx->dw_scaled = 1;
    ctx->dw_direct = 1;
    ctx->dh_direct = FLCE_DH_E;
    ctx->host_status = (flce_host_status *)host;
    if (cudaHostGetDevicePointer((void **)&ctx->host_status_device, host, 0) != cudaSuccess) {
        cudaFreeHost(host);
        cublasLtDestroy(ctx->gemm.handle);
        free(ctx);
        return FLCE_ERR_CUDA;
    }
    *out = ctx;
    return FLCE_OK;
}

void flce_destroy(flce_context *ctx) {
    if (ctx == NULL) return;
    if (ctx->timing) {
        double total = 0.0;
        for (int k = 0; k < FLCE_T_COUNT; k++) total += ctx->t_ms[k];
        fprintf(stderr, "flce timing over %lld calls (ms per call):", ctx->t_calls);
        for (int k = 0; k < FLCE_T_COUNT; k++)
            if (ctx->t_ms[k] > 0.0)
                fprintf(stderr, " %s %.3f,", flce_phase_names[k], ctx->t_ms[k] / (double)ctx->t_calls);
        fprintf(stderr, " sum %.3f; GEMM shapes autotuned %d (another algorithm won %d)\n",
                total / (double)(ctx->t_calls ? ctx->t_calls : 1), ctx->gemm.tuned, ctx->gemm.retuned);
    }
    if (ctx->t_start != NULL) cudaEventDestroy(ctx->t_start);
    if (ctx->t_stop != NULL) cudaEventDestroy(ctx->t_stop);
    if (ctx->side_fork != NULL) cudaEventDestroy(ctx->side_fork);
    if (ctx->side_join != NULL) cudaEventDestroy(ctx->side_join);
    if (ctx->side_stream != NULL) cudaStreamDestroy(ctx->side_stream);
    gemm_cache_release(&ctx->gemm);
    cublasLtDestroy(ctx->gemm.handle);
    cudaFreeHost((void *)ctx->host_status);
    free(ctx);
}

void flce_set_comm(flce_context *ctx, const flce_comm *comm) {
    if (ctx == NULL) return;
    memset(&ctx->comm, 0, sizeof(ctx->comm));
    if (comm != NULL && comm->allreduce != NULL) ctx->comm = *comm;
}

void flce_set_autotune(flce_context *ctx, int on) {
    if (ctx != NULL) ctx->gemm.autotune = on != 0;
}

// flce_set_hopper_default's choice: process-wide, like the planner it steers
static int g_hopper_default = 1;

void flce_set_hopper_default(int on) { g_hopper_default = on != 0; }

int flce_hopper_default(void) { return g_hopper_default && sm90_available(); }

void flce_set_hopper(flce_context *ctx, int on) {
    if (ctx != NULL) ctx->hopper = on != 0 && sm90_available();
}

void flce_dev_set_pingpong(flce_context *ctx, int mode) {
    if (ctx != NULL) ctx->pingpong = mode == 0 || mode == 1 ? mode : -1;
}

void flce_dev_set_dw_scaled(flce_context *ctx, int on) {
    if (ctx != NULL) ctx->dw_scaled = on != 0;
}

void flce_dev_set_dw_direct(flce_context *ctx, int on) {
    if (ctx != NULL) ctx->dw_direct = on != 0;
}

void flce_dev_set_dh_direct(flce_context *ctx, int mode) {
    if (ctx != NULL && mode >= FLCE_DH_SCALED && mode <= FLCE_DH_LT) ctx->dh_direct = mode;
}

// The events are made the first time; a context whose events cannot be made is not timed.
void flce_dev_set_timing(flce_context *ctx, int on) {
    if (ctx == NULL) return;
    ctx->timing = 0;
    if (!on) return;
    if (ctx->t_start == NULL && cudaEventCreate(&ctx->t_start) != cudaSuccess) {
        ctx->t_start = NULL;
        return;
    }
    if (ctx->t_stop == NULL && cudaEventCreate(&ctx->t_stop) != cudaSuccess) {
        ctx->t_stop = NULL;
        return;
    }
    ctx->timing = 1;
}

// An error of an earlier call recorded by the device: reported once, then cleared.
static flce_status flce_take_device_error(flce_context *ctx) {
    flce_host_status *hs = ctx->host_status;
    if (hs->code == 0) return FLCE_OK;
    flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_TARGET,
              "target[%lld] = %lld is neither ignore_index nor in [0, vocab) "
              "(detected on the device; that call's loss was set to NaN)",
              (long long)hs->position, (long long)hs->value);
    hs->code = 0;
    return FLCE_ERR_TARGET;
}

flce_status flce_check_errors(flce_context *ctx, void *cuda_stream) {
    if (ctx == NULL) return FLCE_ERR_NULL_POINTER;
    cudaError_t err = cudaStreamSynchronize((cudaStream_t)cuda_stream);
    if (err != cudaSuccess)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_CUDA,
                         "cudaStreamSynchronize: %s", cudaGetErrorString(err));
    return flce_take_device_error(ctx);
}

// The planner's question to the device (flce_plan.c).
int flce_device_hopper_sms(void) {
    if (!flce_hopper_default()) return 0;
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return sms;
}

// ----------------------------------------------------------------------------------------
// the call

static flce_status flce_check_ptr(flce_context *ctx, const void *p, const char *name,
                                  size_t align) {
    if (p == NULL)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_NULL_POINTER, "%s is NULL", name);
    if ((uintptr_t)p % align != 0)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_MISALIGNED,
                         "%s = %p is not %zu-byte aligned", name, p, align);
    return FLCE_OK;
}

static flce_status flce_check_tensors(flce_context *ctx, const flce_config *cfg,
                                      const flce_tensors *t, int backward) {
    FLCE_TRY(flce_check_ptr(ctx, t->hidden, "hidden", 16));
    FLCE_TRY(flce_check_ptr(ctx, t->weight, "weight", 16));
    FLCE_TRY(flce_check_ptr(ctx, t->targets, "targets", cfg->target_type == FLCE_INT64 ? 8 : 4));
    if (cfg->has_bias) FLCE_TRY(flce_check_ptr(ctx, t->bias, "bias (has_bias = 1)", 4));
    if (cfg->reduction == FLCE_REDUCTION_NONE)
        FLCE_TRY(flce_check_ptr(ctx, t->token_loss, "token_loss (reduction none)", 4));
    else
        FLCE_TRY(flce_check_ptr(ctx, t->loss, "loss", 4));
    if (t->token_loss != NULL) FLCE_TRY(flce_check_ptr(ctx, t->token_loss, "token_loss", 4));
    if (t->token_lse != NULL) FLCE_TRY(flce_check_ptr(ctx, t->token_lse, "token_lse", 4));
    if (t->loss != NULL) FLCE_TRY(flce_check_ptr(ctx, t->loss, "loss", 4));
    if (cfg->has_class_weights)
        FLCE_TRY(flce_check_ptr(ctx, t->class_weights, "class_weights (has_class_weights = 1)", 4));
    else if (t->class_weights != NULL)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_INVALID_VALUE,
                         "class_weights is given but has_class_weights = 0");
    if (t->token_entropy != NULL) FLCE_TRY(flce_check_ptr(ctx, t->token_entropy, "token_entropy", 4));
    if (t->token_logprob != NULL) FLCE_TRY(flce_check_ptr(ctx, t->token_logprob, "token_logprob", 4));
    if (!backward) return FLCE_OK;
    if (t->grad_entropy != NULL) FLCE_TRY(flce_check_ptr(ctx, t->grad_entropy, "grad_entropy", 4));
    if (t->grad_logprob != NULL) FLCE_TRY(flce_check_ptr(ctx, t->grad_logprob, "grad_logprob", 4));
    if (t->grad_token_loss != NULL) {
        if (cfg->reduction != FLCE_REDUCTION_NONE)
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_INVALID_VALUE,
                             "grad_token_loss is only used with reduction none");
        FLCE_TRY(flce_check_ptr(ctx, t->grad_token_loss, "grad_token_loss", 4));
    }
    if (t->d_hidden != NULL) FLCE_TRY(flce_check_ptr(ctx, t->d_hidden, "d_hidden", 16));
    if (t->d_weight != NULL) FLCE_TRY(flce_check_ptr(ctx, t->d_weight, "d_weight", 16));
    if (t->d_bias != NULL) {
        if (!cfg->has_bias)
            return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_INVALID_VALUE,
                             "d_bias is given but has_bias = 0");
        FLCE_TRY(flce_check_ptr(ctx, t->d_bias, "d_bias", 4));
    }
    return FLCE_OK;
}

// One call: prepare (targets checked and counted, exact target logits), the plan's schedule,
// finalize (the loss; bf16 d_W / d_b from their fp32 accumulators; the error record).
template <typename T, typename TL, typename Tgt>
static flce_status flce_run(flce_context *ctx, const flce_config *cfg, const flce_tensors *t,
                            const flce_plan *p, char *ws, cudaStream_t stream, int backward) {
    const int64_t N = cfg->n_tokens, H = cfg->hidden, V = cfg->vocab, Vp = cfg->vocab_padded;
    const Tgt *targets = (const Tgt *)t->targets;
    flce_call_scalars *scalars = (flce_call_scalars *)(ws + p->off_scalars);
    float *target_logit = (float *)(ws + p->off_target_logit);
    float *token_loss = t->token_loss ? t->token_loss : (float *)(ws + p->off_token_loss);
    // flce_dev_set_timing: a call that autotuned GEMMs is left out of the per-phase times
    double t_ms_before[FLCE_T_COUNT];
    memcpy(t_ms_before, ctx->t_ms, sizeof(t_ms_before));
    const int tuned_before = ctx->gemm.tuned;

    flce_call_state<T, TL, Tgt> s;
    memset(&s, 0, sizeof(s));  // ra's padding too: it is copied into kernel parameters
    s.ctx = ctx; s.cfg = cfg; s.t = t; s.p = p;
    s.ws = ws; s.stream = stream; s.backward = backward;
    flce_rows_args<T, Tgt> &ra = s.ra;
    ra.ldl = p->ldl;
    ra.V = V;
    ra.bias = cfg->has_bias ? (const T *)t->bias : NULL;
    ra.targets = targets;
    ra.ignore_index = (long long)cfg->ignore_index;
    ra.target_logit = target_logit;
    ra.grad_token_loss = t->grad_token_loss;
    ra.scalars = scalars;
    ra.p.label_smoothing = cfg->label_smoothing;
    ra.p.z_loss_scale = cfg->z_loss_scale;
    ra.p.softcap = cfg->softcap;
    ra.p.grad_scale = cfg->grad_scale;
    ra.p.reduction = (int)cfg->reduction;
    // the temperature as a factor on the logits: log2(e) / T is log2(e) itself at T = 1
    ra.p.temperature = cfg->temperature;
    ra.p.inv_temp = 1.0f / cfg->temperature;
    ra.p.k = FLCE_LOG2E * ra.p.inv_temp;
    ra.class_weights = cfg->has_class_weights ? t->class_weights : NULL;
    ra.token_entropy = t->token_entropy;
    ra.token_logprob = t->token_logprob;
    ra.grad_entropy = backward ? t->grad_entropy : NULL;
    ra.grad_logprob = backward ? t->grad_logprob : NULL;
    ra.p.want_entropy = ra.token_entropy != NULL || ra.grad_entropy != NULL;
    ra.token_loss = token_loss;
    ra.token_lse = t->token_lse ? t->token_lse : (float *)(ws + p->off_token_lse);
    ra.tile_stats = (flce_row_stats *)(ws + p->off_tile_stats);
    ra.tile_grad = (flce_row_grad *)(ws + p->off_tile_grad);
    // vocab_parallel: this W's rows are classes v_off .. of V_total
    const int vp = cfg->vocab_parallel;
    ra.v_off = vp ? cfg->vocab_offset : 0;
    ra.V_total = vp ? cfg->vocab_total : V;
    ra.vp_stats = NULL;
    ra.target_weight = vp && ra.class_weights != NULL ? target_logit + N : NULL;

    FLCE_PHASE(ctx, stream, FLCE_T_PREPARE, {
        FLCE_CUDA_TRY(cudaMemsetAsync(scalars, 0, sizeof(flce_call_scalars), stream));
        FLCE_CUDA_TRY(cudaMemsetAsync(&scalars->first_bad_token, 0xff, sizeof(unsigned long long), stream));
        const int warps_per_block = 8;
        const unsigned grid = (unsigned)((N + warps_per_block - 1) / warps_per_block);
        flce_prepare_kernel<T, Tgt><<<grid, warps_per_block * 32, 0, stream>>>(
            (const T *)t->hidden, (const T *)t->weight, ra.bias, targets, N, H, V, ra.v_off, ra.V_total,
            ra.ignore_index, target_logit, scalars);
        FLCE_LAUNCH_CHECK("flce_prepare_kernel");
        if (vp && ra.class_weights != NULL) {  // each target's weight, from the rank that holds it
            flce_vp_weights_kernel<Tgt><<<1, 1024, 0, stream>>>(targets, N, V, ra.v_off, ra.V_total, ra.ignore_index,
                                                                ra.class_weights, target_logit + N);
            FLCE_LAUNCH_CHECK("flce_vp_weights_kernel");
        }
        // each target's logit comes from the one rank that holds its row (the others gave 0);
        // with class weights the targets' weights and the ranks' weight sums in the same buffer
        if (vp)
            FLCE_TRY(flce_allreduce(ctx, target_logit, ra.class_weights != NULL ? 2 * (size_t)N + 1 : (size_t)N,
                                    FLCE_COMM_SUM, stream,
                                    ra.class_weights != NULL ? "the target logits and weights" : "the target logits"));
        if (ra.class_weights != NULL) {
            flce_weight_sum_kernel<Tgt><<<1, 1024, 0, stream>>>(targets, N, ra.V_total, ra.ignore_index,
                                                                ra.class_weights, ra.target_weight, scalars);
            FLCE_LAUNCH_CHECK("flce_weight_sum_kernel");
        }
        if (backward && t->d_bias != NULL && !p->sm90) {
            flce_fill_ones_kernel<T><<<64, 256, 0, stream>>>((T *)(ws + p->off_ones), p->chunk);
            FLCE_LAUNCH_CHECK("flce_fill_ones_kernel");
        }
    });
    if constexpr (sizeof(T) == 2 && sizeof(TL) == 2) {  // the Hopper path: bf16 inputs, E in bf16
        if (p->sm90) FLCE_TRY(flce_run_hopper(&s));
    }
    if (!p->sm90) FLCE_TRY(flce_run_lt(&s));
    FLCE_PHASE(ctx, stream, FLCE_T_FINALIZE, {
        flce_finalize_kernel<Tgt><<<1, 1024, 0, stream>>>(token_loss, N, (int)cfg->reduction,
                                                           ra.class_weights != NULL, scalars, targets, t->loss,
                                                           ctx->host_status_device);
        FLCE_LAUNCH_CHECK("flce_finalize_kernel");
        if (backward && t->d_weight != NULL && p->dw_accumulator) {
            flce_add_f32_kernel<<<1024, 256, 0, stream>>>((__nv_bfloat16 *)t->d_weight,
                                                          (const float *)(ws + p->off_dw32), Vp * H,
                                                          cfg->accumulate_d_weight);
            FLCE_LAUNCH_CHECK("flce_add_f32_kernel (d_weight)");
        }
        if (backward && t->d_bias != NULL && cfg->d_bias_dtype == FLCE_BF16) {
            flce_add_f32_kernel<<<64, 256, 0, stream>>>((__nv_bfloat16 *)t->d_bias,
                                                        (const float *)(ws + p->off_db32), Vp,
                                                        cfg->accumulate_d_bias);
            FLCE_LAUNCH_CHECK("flce_add_f32_kernel (d_bias)");
        }
    });
    if (ctx->timing && ctx->gemm.tuned != tuned_before) memcpy(ctx->t_ms, t_ms_before, sizeof(t_ms_before));
    else if (ctx->timing) ctx->t_calls++;
    return FLCE_OK;
}

// A call's plan (flce_make_plan), or the context's kept one where the call is like the last
// (its config, workspace, outputs and path the same): a plan is ~40-50 us of host time before
// the call's first kernel, time that an idle GPU waits. An entropy gradient takes the Hopper
// path's dlogits pass (flce_plan.c's flce_sm90_lt_backward) where its plan fits the workspace,
// sized from the config alone, and else the fused GEMMs' general transform (the plain
// gradients' layout).
static void flce_call_plan(flce_context *ctx, const flce_config *cfg, size_t workspace_bytes, int needs_dw,
                           int backward, int sms, int entropy_grad, flce_plan *plan) {
    const int call = (entropy_grad ? FLCE_CALL_ENTROPY_GRAD : 0) | (ctx->dw_scaled ? 0 : FLCE_CALL_PLAIN);
    flce_plan_key key;
    memset(&key, 0, sizeof(key));
    memcpy(&key.cfg, cfg, sizeof(*cfg));
    key.workspace_bytes = workspace_bytes;
    key.needs_dw = needs_dw;
    key.backward = backward;
    key.sms = sms;
    key.call = call;
    key.switches = flce_plan_switches();
    if (ctx->has_plan && memcmp(&key, &ctx->plan_key, sizeof(key)) == 0) {
        *plan = ctx->plan;
        return;
    }
    flce_make_plan(cfg, workspace_bytes, needs_dw, backward, sms, call, plan);
    if (plan->chunk == 0 && entropy_grad)
        flce_make_plan(cfg, workspace_bytes, needs_dw, backward, sms,
                       (call & ~FLCE_CALL_ENTROPY_GRAD) | FLCE_CALL_PLAIN, plan);
    memcpy(&ctx->plan_key, &key, sizeof(key));
    ctx->plan = *plan;
    ctx->has_plan = plan->chunk > 0;
}

static flce_status flce_call(flce_context *ctx, const flce_config *cfg, const flce_tensors *t,
                             void *workspace, size_t workspace_bytes, void *cuda_stream,
                             int backward) {
    if (ctx == NULL) return FLCE_ERR_NULL_POINTER;
    ctx->message[0] = '\0';
    FLCE_TRY(flce_take_device_error(ctx));
    FLCE_TRY(flce_config_check(cfg, ctx->message, sizeof(ctx->message)));
    if (t == NULL)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_NULL_POINTER, "tensors is NULL");
    FLCE_TRY(flce_check_tensors(ctx, cfg, t, backward));
    FLCE_TRY(flce_check_ptr(ctx, workspace, "workspace", FLCE_ALIGN));
    if (cfg->vocab_parallel && ctx->comm.allreduce == NULL)
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_COMM,
                         "vocab_parallel = 1 needs a communicator: flce_set_comm(ctx, &comm) first");
    // the Hopper path for bf16 inputs where the context takes it (flce_set_hopper)
    int sms = 0;
    if (ctx->hopper && cfg->dtype == FLCE_BF16) {
        int dev = 0;
        FLCE_CUDA_TRY(cudaGetDevice(&dev));
        FLCE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }
    flce_plan plan;
    const int needs_dw = backward && t->d_weight != NULL;
    flce_call_plan(ctx, cfg, workspace_bytes, needs_dw, backward, sms, backward && t->grad_entropy != NULL, &plan);
    if (plan.chunk == 0) {
        size_t need = 0;
        flce_workspace_for(cfg, workspace_bytes, sms, &need);
        return flce_fail(ctx->message, sizeof(ctx->message), FLCE_ERR_WORKSPACE,
                         "workspace_bytes = %zu; this config needs at least %zu "
                         "(see flce_workspace_size)", workspace_bytes, need);
    }
    cudaStream_t stream = (cudaStream_t)cuda_stream;
    char *ws = (char *)workspace;
    typedef __nv_bfloat16 bf16;
    const int i64 = cfg->target_type == FLCE_INT64;
    if (cfg->dtype == FLCE_FP32)
        return i64 ? flce_run<float, float, int64_t>(ctx, cfg, t, &plan, ws, stream, backward)
                   : flce_run<float, float, int32_t>(ctx, cfg, t, &plan, ws, stream, backward);
    if (plan.logits_size == 2)  // bf16 logits, and the Hopper path
        return i64 ? flce_run<bf16, bf16, int64_t>(ctx, cfg, t, &plan, ws, stream, backward)
                   : flce_run<bf16, bf16, int32_t>(ctx, cfg, t, &plan, ws, stream, backward);
    return i64 ? flce_run<bf16, float, int64_t>(ctx, cfg, t, &plan, ws, stream, backward)
               : flce_run<bf16, float, int32_t>(ctx, cfg, t, &plan, ws, stream, backward);
}

flce_status flce_forward_backward(flce_context *ctx, const flce_config *cfg, const flce_tensors *t,
                                  void *workspace, size_t workspace_bytes, void *cuda_stream) {
    return flce_call(ctx, cfg, t, workspace, workspace_bytes, cuda_stream, 1);
}

flce_status flce_forward(flce_context *ctx, const flce_config *cfg, const flce_tensors *t,
                         void *workspace, size_t workspace_bytes, void *cuda_stream) {
    return flce_call(ctx, cfg, t, workspace, workspace_bytes, cuda_stream, 0);
}
