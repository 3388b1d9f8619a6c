/*
gpu_kernels_matmul.cuh - matmul_forward and matmul_backward (llmc/matmul.cuh) on the GPU
against CPU double references computed here, for test_train_gpu.cu (which includes
test/test_util.h and llmc/cuda_common.cuh first).

Inputs are bf16-representable random values (never zero), so the references see exactly what
the GPU sees; every output is poisoned with 0xFF bytes (NaN) before each call and compared in
full (a NaN anywhere fails rel_l2), and MMT_GUARD elements after each output must still be
0xFF afterwards. Shapes: BT not a multiple of 128; C 64 / OC 256, C 768 / OC 3072, and an
odd C 40 / OC 100 (no 16-byte vectors, no GELU epilogue: the unfused paths). Each runs with
and without bias and GELU, in four modes: cuBLASLt epilogues, cuBLASLt GEMMs with separate
kernels, the fallback GEMM kernel alone, and "hopper" (what the trainer runs on an H100/H200:
our GEMM, llmc/matmul_sm90.cuh, for the calls of short K, which must take it there; the rest
cuBLASLt's epilogues). The backward runs
twice on the same inputs: dinp must be the same (=, bitwise), dweight and dbias must hold
their initial (non-zero) values plus twice the gradient (+=). matmul_forward_residual runs at
the trainer's projection shapes (where the epilogue mode must not fall back), a small and an
odd shape, and with residual and out off 16-byte alignment; matmul_backward_dgelu (the GELU
backward in the dinp GEMM's epilogue) at the trainer's MLP projection shape and two others.
The backward with GELU and bias runs the GELU backward inside the bias gradient's pass.
matmul_forward_swiglu and matmul_backward_dswiglu (the Llama / Qwen MLP's SwiGLU, fused into
the Hopper GEMM's epilogues) run unfused and fused at intermediate sizes that are not multiples
of the tiles (96 columns forward, 192 backward) and K = C up to 2048; see mmt_run_swiglu.
*/
#ifndef TEST_GPU_KERNELS_MATMUL_CUH
#define TEST_GPU_KERNELS_MATMUL_CUH

#include "../llmc/matmul.cuh"

#define MMT_GUARD 64   // elements after each output that no call may touch
#define MMT_TOL 1e-2   // rel L2 for bf16 results (expected ~3e-3)

static void *mmt_malloc(size_t bytes) {
    void *p = malloc(bytes > 0 ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "test_matmul: out of host memory (%zu bytes)\n", bytes);
        exit(EXIT_FAILURE);
    }
    return p;
}

// uniform in [-scale, scale), rounded to bf16
static void mmt_fill_bf16(float *x, size_t n, float scale, uint64_t *state) {
    fill_uniform(x, n, scale, state);
    for (size_t i = 0; i < n; i++) x[i] = bf16_bits_to_f32(f32_to_bf16_bits(x[i]));
}

// device buffer of n elements of elem bytes plus the guard, all bytes 0xFF
static void *mmt_dev_alloc(size_t n, size_t elem) {
    void *d = NULL;
    cudaCheck(cudaMalloc(&d, (n + MMT_GUARD) * elem));
    cudaCheck(cudaMemset(d, 0xFF, (n + MMT_GUARD) * elem));
    return d;
}

static void mmt_upload_bf16(floatX *d, const float *x, size_t n) {
    uint16_t *h = (uint16_t *)mmt_malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16_bits(x[i]);
    cudaCheck(cudaMemcpy(d, h, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(h);
}

static void mmt_download_bf16(float *x, const floatX *d, size_t n) {
    uint16_t *h = (uint16_t *)mmt_malloc(n * sizeof(uint16_t));
    cudaCheck(cudaMemcpy(h, d, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) x[i] = bf16_bits_to_f32(h[i]);
    free(h);
}

// the MMT_GUARD elements after the n of d are all 0xFF bytes
static int mmt_guard_ok(const void *d, size_t n, size_t elem) {
    unsigned char g[MMT_GUARD * 4];
    cudaCheck(cudaMemcpy(g, (const char *)d + n * elem, MMT_GUARD * elem, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < MMT_GUARD * elem; i++)
        if (g[i] != 0xFF) return 0;
    return 1;
}

static double mmt_gelu(double x) {
    const double s = 0.7978845608028654;  // sqrt(2 / pi)
    return 0.5 * x * (1.0 + tanh(s * (x + 0.044715 * x * x * x)));
}

static double mmt_gelu_grad(double x) {
    const double s = 0.7978845608028654;
    const double th = tanh(s * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

static const char *mmt_mode_name(int mode) {
    return mode == 0 ? "epilogue" : mode == 1 ? "unfused" : mode == 2 ? "kernel-gemm" : "hopper";
}

// mode 0: cuBLASLt with epilogues; 1: cuBLASLt GEMMs, separate kernels; 2: fallback GEMM kernel;
// 3: our Hopper GEMM where it applies (on a device that has it), else as 0
#define MMT_MODES 4
static void mmt_set_mode(MatmulContext *ctx, int mode) {
    ctx->fuse_epilogues = mode == 0 || mode == 3;
    ctx->use_cublaslt = mode != 2;
    ctx->use_sm90 = mode == 3 && sm90_available() ? MM90_ALL : 0;  // every kind, not only the trainer's
}

// the path a call took: "hopper" where mode 3 had to take it (expect: mm90_fits of the call)
// and did; ok is cleared where it had to and did not, or took it where it must not
static const char *mmt_path(const MatmulContext *ctx, long long sm90_before, int expect, int *ok) {
    const int took = ctx->n_sm90 > sm90_before;
    if (took != (ctx->use_sm90 && expect)) *ok = 0;
    return took ? "hopper" : ctx->use_sm90 && expect ? "NOT HOPPER" : "cuBLASLt/kernel";
}

static void mmt_run_shape(MatmulContext *ctx, cudaStream_t s, int BT, int C, int OC, uint64_t *rng) {
    const size_t nin = (size_t)BT * C, nw = (size_t)OC * C, nout = (size_t)BT * OC;
    float *inp = (float *)mmt_malloc(nin * sizeof(float));
    float *w = (float *)mmt_malloc(nw * sizeof(float));
    float *bias = (float *)mmt_malloc((size_t)OC * sizeof(float));
    float *dout = (float *)mmt_malloc(nout * sizeof(float));
    float *pre_in = (float *)mmt_malloc(nout * sizeof(float));  // the backward's pre_gelu
    float *dw0 = (float *)mmt_malloc(nw * sizeof(float));
    float *db0 = (float *)mmt_malloc((size_t)OC * sizeof(float));
    mmt_fill_bf16(inp, nin, 1.0f, rng);
    mmt_fill_bf16(w, nw, 3.0f / sqrtf((float)C), rng);  // pre-activations of std ~1
    mmt_fill_bf16(bias, (size_t)OC, 0.5f, rng);
    mmt_fill_bf16(dout, nout, 1.0f, rng);
    mmt_fill_bf16(pre_in, nout, 3.0f, rng);
    fill_uniform(dw0, nw, 2.0f, rng);  // the accumulators' previous contents (fp32)
    fill_uniform(db0, (size_t)OC, 2.0f, rng);

    // references: pre0 = inp @ w^T; per gelu in {0,1}: g = dout (* gelu'(pre_in)), dinp = g @ w,
    // dw = g^T @ inp, db = column sums of g
    double *pre0 = (double *)mmt_malloc(nout * sizeof(double));
    double *g_ref[2], *dinp_ref[2], *dw_ref[2], *db_ref[2];
    for (size_t r = 0; r < (size_t)BT; r++)
        for (size_t o = 0; o < (size_t)OC; o++) {
            double acc = 0.0;
            for (size_t c = 0; c < (size_t)C; c++) acc += (double)inp[r * C + c] * (double)w[o * C + c];
            pre0[r * OC + o] = acc;
        }
    for (int gl = 0; gl < 2; gl++) {
        double *g = g_ref[gl] = (double *)mmt_malloc(nout * sizeof(double));
        double *di = dinp_ref[gl] = (double *)calloc(nin, sizeof(double));
        double *dw = dw_ref[gl] = (double *)calloc(nw, sizeof(double));
        double *db = db_ref[gl] = (double *)calloc((size_t)OC, sizeof(double));
        if (di == NULL || dw == NULL || db == NULL) {
            fprintf(stderr, "test_matmul: out of host memory\n");
            exit(EXIT_FAILURE);
        }
        for (size_t i = 0; i < nout; i++) g[i] = (double)dout[i] * (gl ? mmt_gelu_grad((double)pre_in[i]) : 1.0);
        for (size_t r = 0; r < (size_t)BT; r++)
            for (size_t o = 0; o < (size_t)OC; o++) {
                const double gv = g[r * OC + o];
                db[o] += gv;
                for (size_t c = 0; c < (size_t)C; c++) {
                    di[r * C + c] += gv * (double)w[o * C + c];
                    dw[o * C + c] += gv * (double)inp[r * C + c];
                }
            }
    }

    // device buffers (inputs too get guards: nothing may write them)
    floatX *d_inp = (floatX *)mmt_dev_alloc(nin, 2), *d_w = (floatX *)mmt_dev_alloc(nw, 2);
    floatX *d_bias = (floatX *)mmt_dev_alloc((size_t)OC, 2), *d_out = (floatX *)mmt_dev_alloc(nout, 2);
    floatX *d_pre = (floatX *)mmt_dev_alloc(nout, 2), *d_dout = (floatX *)mmt_dev_alloc(nout, 2);
    floatX *d_pre_in = (floatX *)mmt_dev_alloc(nout, 2), *d_dinp = (floatX *)mmt_dev_alloc(nin, 2);
    float *d_dw = (float *)mmt_dev_alloc(nw, 4), *d_db = (float *)mmt_dev_alloc((size_t)OC, 4);
    mmt_upload_bf16(d_inp, inp, nin);
    mmt_upload_bf16(d_w, w, nw);
    mmt_upload_bf16(d_bias, bias, (size_t)OC);
    mmt_upload_bf16(d_pre_in, pre_in, nout);

    float *h_out = (float *)mmt_malloc(nout * sizeof(float));
    float *h_pre = (float *)mmt_malloc(nout * sizeof(float));
    float *h_dinp = (float *)mmt_malloc(nin * sizeof(float));
    float *h_dinp1 = (float *)mmt_malloc(nin * sizeof(float));
    float *h_dw = (float *)mmt_malloc(nw * sizeof(float));
    float *h_db = (float *)mmt_malloc((size_t)OC * sizeof(float));
    double *expect = (double *)mmt_malloc((nout > nw ? nout : nw) * sizeof(double));
    double *expect_pre = (double *)mmt_malloc(nout * sizeof(double));

    // ---- forward
    for (int mode = 0; mode < MMT_MODES; mode++)
        for (int has_bias = 0; has_bias < 2; has_bias++)
            for (int gl = 0; gl < 2; gl++) {
                mmt_set_mode(ctx, mode);
                cudaCheck(cudaMemsetAsync(d_out, 0xFF, (nout + MMT_GUARD) * 2, s));
                cudaCheck(cudaMemsetAsync(d_pre, 0xFF, (nout + MMT_GUARD) * 2, s));
                const long long sm90_before = ctx->n_sm90;
                matmul_forward(ctx, d_out, gl ? d_pre : NULL, d_inp, d_w, has_bias ? d_bias : NULL, BT, C, OC, s);
                int path_ok = 1;
                const char *path = mmt_path(ctx, sm90_before, mm90_fits(BT, OC, C, d_out, d_pre, d_inp, d_w, d_bias, NULL),
                                            &path_ok);
                cudaCheck(cudaStreamSynchronize(s));
                cudaCheck(cudaGetLastError());
                for (size_t r = 0; r < (size_t)BT; r++)
                    for (size_t o = 0; o < (size_t)OC; o++) {
                        const double v = pre0[r * OC + o] + (has_bias ? (double)bias[o] : 0.0);
                        expect_pre[r * OC + o] = v;
                        expect[r * OC + o] = gl ? mmt_gelu(v) : v;
                    }
                mmt_download_bf16(h_out, d_out, nout);
                const double e_out = rel_l2_f64(h_out, expect, nout);
                double e_pre = 0.0;
                int pre_untouched = 1;
                if (gl) {
                    mmt_download_bf16(h_pre, d_pre, nout);
                    e_pre = rel_l2_f64(h_pre, expect_pre, nout);
                } else {
                    pre_untouched = mmt_guard_ok(d_pre, 0, 2);  // its first elements: still poison
                }
                const int guards = mmt_guard_ok(d_out, nout, 2) && mmt_guard_ok(d_pre, nout, 2) &&
                                   mmt_guard_ok(d_inp, nin, 2) && mmt_guard_ok(d_w, nw, 2) &&
                                   mmt_guard_ok(d_bias, (size_t)OC, 2) && pre_untouched;
                test_check(e_out <= MMT_TOL && e_pre <= MMT_TOL && guards && path_ok,
                           "matmul_forward BT=%d C=%d OC=%d bias=%d gelu=%d %-11s (%s): out rel L2 %.2e, "
                           "pre_gelu %.2e, guards %s", BT, C, OC, has_bias, gl, mmt_mode_name(mode), path,
                           e_out, e_pre, guards ? "intact" : "WRITTEN");
            }

    // ---- backward, twice on the same inputs (modes 0, 2, 3)
    for (int mode = 0; mode < MMT_MODES; mode += mode == 0 ? 2 : 1)
        for (int has_bias = 0; has_bias < 2; has_bias++)
            for (int gl = 0; gl < 2; gl++) {
                mmt_set_mode(ctx, mode);
                const long long sm90_before = ctx->n_sm90;
                cudaCheck(cudaMemcpy(d_dw, dw0, nw * sizeof(float), cudaMemcpyHostToDevice));
                cudaCheck(cudaMemcpy(d_db, db0, (size_t)OC * sizeof(float), cudaMemcpyHostToDevice));
                double worst[4] = {0.0, 0.0, 0.0, 0.0};  // dinp, dweight, dbias, dout
                int ok = 1, same_dinp = 1;
                for (int call = 1; call <= 2; call++) {
                    mmt_upload_bf16(d_dout, dout, nout);  // restored: the GELU backward is in place
                    cudaCheck(cudaMemsetAsync(d_dinp, 0xFF, (nin + MMT_GUARD) * 2, s));
                    matmul_backward(ctx, d_dinp, d_dw, has_bias ? d_db : NULL, d_dout, d_inp, d_w,
                                    gl ? d_pre_in : NULL, BT, C, OC, s);
                    cudaCheck(cudaStreamSynchronize(s));
                    cudaCheck(cudaGetLastError());
                    double e[4] = {0.0, 0.0, 0.0, 0.0};
                    mmt_download_bf16(h_dinp, d_dinp, nin);
                    e[0] = rel_l2_f64(h_dinp, dinp_ref[gl], nin);
                    if (call == 1) memcpy(h_dinp1, h_dinp, nin * sizeof(float));
                    else same_dinp = memcmp(h_dinp1, h_dinp, nin * sizeof(float)) == 0;
                    cudaCheck(cudaMemcpy(h_dw, d_dw, nw * sizeof(float), cudaMemcpyDeviceToHost));
                    for (size_t i = 0; i < nw; i++) expect[i] = (double)dw0[i] + call * dw_ref[gl][i];
                    e[1] = rel_l2_f64(h_dw, expect, nw);
                    cudaCheck(cudaMemcpy(h_db, d_db, (size_t)OC * sizeof(float), cudaMemcpyDeviceToHost));
                    for (size_t o = 0; o < (size_t)OC; o++)
                        expect[o] = (double)db0[o] + (has_bias ? call * db_ref[gl][o] : 0.0);
                    e[2] = rel_l2_f64(h_db, expect, (size_t)OC);  // without bias: untouched
                    mmt_download_bf16(h_out, d_dout, nout);  // dout: g with GELU, unchanged without
                    for (size_t i = 0; i < nout; i++) expect[i] = gl ? g_ref[gl][i] : (double)dout[i];
                    e[3] = rel_l2_f64(h_out, expect, nout);
                    if (!gl && memcmp(h_out, dout, nout * sizeof(float)) != 0) e[3] = INFINITY;
                    for (int q = 0; q < 4; q++) {
                        if (e[q] > worst[q] || e[q] != e[q]) worst[q] = e[q];
                        if (!(e[q] <= MMT_TOL)) ok = 0;
                    }
                }
                const int guards = mmt_guard_ok(d_dinp, nin, 2) && mmt_guard_ok(d_dw, nw, 4) &&
                                   mmt_guard_ok(d_db, (size_t)OC, 4) && mmt_guard_ok(d_dout, nout, 2) &&
                                   mmt_guard_ok(d_inp, nin, 2) && mmt_guard_ok(d_w, nw, 2) &&
                                   mmt_guard_ok(d_pre_in, nout, 2);
                // two calls: each dinp on the Hopper path where it fits
                const int fits = mm90_fits(BT, C, OC, d_dinp, NULL, d_dout, d_w, NULL, NULL);
                const int took = (int)(ctx->n_sm90 - sm90_before);
                if (took != (ctx->use_sm90 && fits ? 2 : 0)) ok = 0;
                test_check(ok && same_dinp && guards,
                           "matmul_backward BT=%d C=%d OC=%d bias=%d gelu=%d %-11s (dinp %s) x2: worst rel L2 dinp "
                           "%.2e (=, %s), dweight %.2e (+=), dbias %.2e (+=), dout %.2e, guards %s",
                           BT, C, OC, has_bias, gl, mmt_mode_name(mode),
                           took ? "hopper" : ctx->use_sm90 && fits ? "NOT HOPPER" : "cuBLASLt/kernel", worst[0],
                           worst[1], worst[2],
                           worst[3], same_dinp ? "bitwise repeatable" : "NOT REPEATABLE",
                           guards ? "intact" : "WRITTEN");
            }
    mmt_set_mode(ctx, 0);

    void *dev[] = {d_inp, d_w, d_bias, d_out, d_pre, d_dout, d_pre_in, d_dinp, d_dw, d_db};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) cudaCheck(cudaFree(dev[i]));
    void *host[] = {inp, w, bias, dout, pre_in, dw0, db0, pre0, h_out, h_pre, h_dinp, h_dinp1,
                    h_dw, h_db, expect, expect_pre};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) free(host[i]);
    for (int gl = 0; gl < 2; gl++) {
        free(g_ref[gl]);
        free(dinp_ref[gl]);
        free(dw_ref[gl]);
        free(db_ref[gl]);
    }
}

// matmul_forward_residual in the three modes: out = residual + inp @ w^T (+ bias) against a
// double reference, every element written (out poisoned), residual, inputs and the guards
// untouched, a second call bitwise the same. res_offset elements shift residual and out off
// 16-byte alignment. expect_fused: in the epilogue mode cuBLASLt must take the fused call (C =
// residual != D = out, beta 1, BIAS epilogue) without falling back: the trainer's shapes.
static void mmt_run_residual(MatmulContext *ctx, cudaStream_t s, int BT, int C, int OC, int res_offset,
                             int expect_fused, uint64_t *rng) {
    const size_t nin = (size_t)BT * C, nw = (size_t)OC * C, nout = (size_t)BT * OC;
    float *inp = (float *)mmt_malloc(nin * sizeof(float)), *w = (float *)mmt_malloc(nw * sizeof(float));
    float *bias = (float *)mmt_malloc((size_t)OC * sizeof(float)), *res = (float *)mmt_malloc(nout * sizeof(float));
    mmt_fill_bf16(inp, nin, 1.0f, rng);
    mmt_fill_bf16(w, nw, 3.0f / sqrtf((float)C), rng);
    mmt_fill_bf16(bias, (size_t)OC, 0.5f, rng);
    mmt_fill_bf16(res, nout, 2.0f, rng);
    double *pre0 = (double *)mmt_malloc(nout * sizeof(double)), *expect = (double *)mmt_malloc(nout * sizeof(double));
    for (size_t r = 0; r < (size_t)BT; r++)
        for (size_t o = 0; o < (size_t)OC; o++) {
            double acc = 0.0;
            for (size_t c = 0; c < (size_t)C; c++) acc += (double)inp[r * C + c] * (double)w[o * C + c];
            pre0[r * OC + o] = acc + (double)res[r * OC + o];
        }
    floatX *d_inp = (floatX *)mmt_dev_alloc(nin, 2), *d_w = (floatX *)mmt_dev_alloc(nw, 2);
    floatX *d_bias = (floatX *)mmt_dev_alloc((size_t)OC, 2);
    floatX *d_res_buf = (floatX *)mmt_dev_alloc(nout + res_offset, 2);
    floatX *d_out_buf = (floatX *)mmt_dev_alloc(nout + res_offset, 2);
    floatX *d_res = d_res_buf + res_offset, *d_out = d_out_buf + res_offset;
    mmt_upload_bf16(d_inp, inp, nin);
    mmt_upload_bf16(d_w, w, nw);
    mmt_upload_bf16(d_bias, bias, (size_t)OC);
    mmt_upload_bf16(d_res, res, nout);
    float *h_out = (float *)mmt_malloc(nout * sizeof(float)), *h_out1 = (float *)mmt_malloc(nout * sizeof(float));
    float *h_res = (float *)mmt_malloc(nout * sizeof(float));
    for (int mode = 0; mode < MMT_MODES; mode++)
        for (int has_bias = 0; has_bias < 2; has_bias++) {
            mmt_set_mode(ctx, mode);
            const long long fallbacks = ctx->n_fallback, sm90_before = ctx->n_sm90;
            int same = 1;
            for (int call = 0; call < 2; call++) {
                cudaCheck(cudaMemsetAsync(d_out_buf, 0xFF, (nout + res_offset + MMT_GUARD) * 2, s));
                matmul_forward_residual(ctx, d_out, d_res, d_inp, d_w, has_bias ? d_bias : NULL, BT, C, OC, s);
                cudaCheck(cudaStreamSynchronize(s));
                cudaCheck(cudaGetLastError());
                mmt_download_bf16(call == 0 ? h_out1 : h_out, d_out, nout);
            }
            same = memcmp(h_out1, h_out, nout * sizeof(float)) == 0;
            const int fused = ctx->n_fallback == fallbacks;
            const int fits = mm90_fits(BT, OC, C, d_out, NULL, d_inp, d_w, d_bias, d_res);
            const int hopper = ctx->n_sm90 - sm90_before == 2;  // both calls
            const int hopper_ok = hopper == (ctx->use_sm90 && fits) && (hopper || ctx->n_sm90 == sm90_before);
            for (size_t r = 0; r < (size_t)BT; r++)
                for (size_t o = 0; o < (size_t)OC; o++)
                    expect[r * OC + o] = pre0[r * OC + o] + (has_bias ? (double)bias[o] : 0.0);
            const double e_out = rel_l2_f64(h_out, expect, nout);
            // fused at the trainer's shapes, the sum is rounded once: within one bf16 spacing
            // (plus fp32 accumulation). Odd shapes and unaligned pointers get other cuBLASLt
            // kernels, measured farther from the exact sum than one rounding (within MMT_TOL).
            size_t far = 0;
            if (((mode == 0 || mode == 3) && fused && expect_fused) || hopper)
                for (size_t i = 0; i < nout; i++) {
                    int ex = 0;
                    frexp(fabs(expect[i]), &ex);
                    const double spacing = expect[i] == 0.0 ? 0.0 : ldexp(1.0, ex - 8);
                    if (!(fabs((double)h_out[i] - expect[i]) <= spacing + 1e-3)) far++;
                }
            mmt_download_bf16(h_res, d_res, nout);
            const int res_same = memcmp(h_res, res, nout * sizeof(float)) == 0;
            const int guards = mmt_guard_ok(d_out, nout, 2) && mmt_guard_ok(d_res, nout, 2) &&
                               mmt_guard_ok(d_inp, nin, 2) && mmt_guard_ok(d_w, nw, 2) &&
                               mmt_guard_ok(d_bias, (size_t)OC, 2);
            const int path_ok = (!((mode == 0 || mode == 3) && expect_fused) || fused) && hopper_ok;
            test_check(e_out <= MMT_TOL && far == 0 && same && res_same && guards && path_ok,
                       "matmul_forward_residual BT=%d C=%d OC=%d bias=%d offset=%d %-11s (%s): out rel L2 %.2e, "
                       "%zu beyond 1 bf16 spacing, rerun %s, residual %s, guards %s", BT, C, OC, has_bias,
                       res_offset, mmt_mode_name(mode),
                       !hopper_ok ? "WRONG PATH" : hopper ? "hopper" : mode == 1 || mode == 2 ? "unfused"
                       : fused ? "fused" : "FELL BACK",
                       e_out, far, same ? "bitwise equal" : "DIFFERS", res_same ? "untouched" : "WRITTEN",
                       guards ? "intact" : "WRITTEN");
        }
    mmt_set_mode(ctx, 0);
    void *dev[] = {d_inp, d_w, d_bias, d_res_buf, d_out_buf};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) cudaCheck(cudaFree(dev[i]));
    void *host[] = {inp, w, bias, res, pre0, expect, h_out, h_out1, h_res};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) free(host[i]);
}

// matmul_backward_dgelu in the three modes: dinp = (dout @ w) * gelu'(pre) against a double
// reference, every element written, dweight/dbias as matmul_backward's (+=), inputs and guards
// untouched. expect_fused: the epilogue mode must use cuBLASLt's DGELU (the trainer's shape).
static void mmt_run_dgelu(MatmulContext *ctx, cudaStream_t s, int BT, int C, int OC, int expect_fused, uint64_t *rng) {
    const size_t nin = (size_t)BT * C, nw = (size_t)OC * C, nout = (size_t)BT * OC;
    float *inp = (float *)mmt_malloc(nin * sizeof(float)), *w = (float *)mmt_malloc(nw * sizeof(float));
    float *dout = (float *)mmt_malloc(nout * sizeof(float)), *pre = (float *)mmt_malloc(nin * sizeof(float));
    mmt_fill_bf16(inp, nin, 1.0f, rng);
    mmt_fill_bf16(w, nw, 3.0f / sqrtf((float)OC), rng);
    mmt_fill_bf16(dout, nout, 1.0f, rng);
    mmt_fill_bf16(pre, nin, 3.0f, rng);
    double *ref = (double *)calloc(nin, sizeof(double)), *ref_dw = (double *)calloc(nw, sizeof(double));
    double *ref_db = (double *)calloc((size_t)OC, sizeof(double));
    if (ref == NULL || ref_dw == NULL || ref_db == NULL) exit(EXIT_FAILURE);
    for (size_t r = 0; r < (size_t)BT; r++)
        for (size_t o = 0; o < (size_t)OC; o++) {
            const double gv = dout[r * OC + o];
            ref_db[o] += gv;
            for (size_t c = 0; c < (size_t)C; c++) {
                ref[r * C + c] += gv * (double)w[o * C + c];
                ref_dw[o * C + c] += gv * (double)inp[r * C + c];
            }
        }
    for (size_t i = 0; i < nin; i++) ref[i] *= mmt_gelu_grad((double)pre[i]);
    floatX *d_inp = (floatX *)mmt_dev_alloc(nin, 2), *d_w = (floatX *)mmt_dev_alloc(nw, 2);
    floatX *d_dout = (floatX *)mmt_dev_alloc(nout, 2), *d_pre = (floatX *)mmt_dev_alloc(nin, 2);
    floatX *d_dinp = (floatX *)mmt_dev_alloc(nin, 2);
    float *d_dw = (float *)mmt_dev_alloc(nw, 4), *d_db = (float *)mmt_dev_alloc((size_t)OC, 4);
    mmt_upload_bf16(d_inp, inp, nin);
    mmt_upload_bf16(d_w, w, nw);
    mmt_upload_bf16(d_dout, dout, nout);
    mmt_upload_bf16(d_pre, pre, nin);
    float *h = (float *)mmt_malloc(nin * sizeof(float)), *h_dw = (float *)mmt_malloc(nw * sizeof(float));
    float *h_db = (float *)mmt_malloc((size_t)OC * sizeof(float)), *h_dout = (float *)mmt_malloc(nout * sizeof(float));
    for (int mode = 0; mode < MMT_MODES; mode++) {
        mmt_set_mode(ctx, mode);
        cudaCheck(cudaMemset(d_dw, 0, nw * sizeof(float)));
        cudaCheck(cudaMemset(d_db, 0, (size_t)OC * sizeof(float)));
        cudaCheck(cudaMemsetAsync(d_dinp, 0xFF, (nin + MMT_GUARD) * 2, s));
        const long long fallbacks = ctx->n_fallback, sm90_before = ctx->n_sm90;
        matmul_backward_dgelu(ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_pre, BT, C, OC, s);
        cudaCheck(cudaStreamSynchronize(s));
        cudaCheck(cudaGetLastError());
        const int fused = ctx->n_fallback == fallbacks;
        mmt_download_bf16(h, d_dinp, nin);
        mmt_download_bf16(h_dout, d_dout, nout);
        cudaCheck(cudaMemcpy(h_dw, d_dw, nw * sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(h_db, d_db, (size_t)OC * sizeof(float), cudaMemcpyDeviceToHost));
        const double e = rel_l2_f64(h, ref, nin), e_dw = rel_l2_f64(h_dw, ref_dw, nw);
        const double e_db = rel_l2_f64(h_db, ref_db, (size_t)OC);
        const int dout_same = memcmp(h_dout, dout, nout * sizeof(float)) == 0;
        const int guards = mmt_guard_ok(d_dinp, nin, 2) && mmt_guard_ok(d_pre, nin, 2) && mmt_guard_ok(d_inp, nin, 2) &&
                           mmt_guard_ok(d_w, nw, 2) && mmt_guard_ok(d_dout, nout, 2) && mmt_guard_ok(d_dw, nw, 4) &&
                           mmt_guard_ok(d_db, (size_t)OC, 4);
        int hopper_ok = 1;
        const char *hpath = mmt_path(ctx, sm90_before, mm90_fits(BT, C, OC, d_dinp, NULL, d_dout, d_w, NULL, d_pre),
                                     &hopper_ok);
        const int hopper = ctx->n_sm90 > sm90_before;
        const int path_ok = (!((mode == 0 || mode == 3) && expect_fused) || fused) && hopper_ok;
        test_check(e <= MMT_TOL && e_dw <= MMT_TOL && e_db <= MMT_TOL && dout_same && guards && path_ok,
                   "matmul_backward_dgelu BT=%d C=%d OC=%d %-11s (%s): dinp rel L2 %.2e, dweight %.2e, dbias %.2e, "
                   "dout %s, guards %s", BT, C, OC, mmt_mode_name(mode),
                   !hopper_ok ? hpath : hopper ? "hopper DGELU" : mode == 1 || mode == 2 ? "unfused"
                   : fused ? "DGELU epilogue" : "FELL BACK", e, e_dw, e_db,
                   dout_same ? "untouched" : "WRITTEN", guards ? "intact" : "WRITTEN");
    }
    mmt_set_mode(ctx, 0);
    void *dev[] = {d_inp, d_w, d_dout, d_pre, d_dinp, d_dw, d_db};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) cudaCheck(cudaFree(dev[i]));
    void *host[] = {inp, w, dout, pre, ref, ref_dw, ref_db, h, h_dw, h_db, h_dout};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) free(host[i]);
}

static double mmt_silu(double x) { return x / (1.0 + exp(-x)); }

// matmul_forward_swiglu and matmul_backward_dswiglu in mode 0 (cuBLASLt's GEMMs, then
// llmc/swiglu.cuh's kernels: there is no cuBLASLt epilogue for it) and mode 3 (the fused Hopper
// kinds MM90_SWIGLU / MM90_DSWIGLU where mm90_fits_swiglu; elsewhere as mode 0), against
// double references:
//   forward:  gu = x @ wgu^T (BT, 2I) within one bf16 spacing (+ 1e-3 for fp32 accumulation) of
//             the exact value on the Hopper path (rounded once from fp32), rel L2 <= MMT_TOL on
//             both; h rel L2 <= MMT_TOL against silu(g) u of the exact gu, and bitwise what
//             swiglu_forward makes of the gu written (so that -r 1's recompute is the same h);
//   backward: dgu = swiglu_backward(dout @ wd, gu_in), dweight = dw0 + dout^T @ h_in (+=), rel
//             L2 <= MMT_TOL; again in place (dgu = gu) bitwise the same; the Hopper path never
//             writes the dh scratch (it stays poison).
// Every output poisoned first, guards after each buffer, inputs untouched. Reported, not
// bounded: the largest difference in bf16 ulps between the two paths' gu (accumulation order).
static void mmt_run_swiglu(MatmulContext *ctx, cudaStream_t s, int BT, int C, int I, uint64_t *rng) {
    const size_t nx = (size_t)BT * C, nwgu = (size_t)2 * I * C, ngu = (size_t)BT * 2 * I, nh = (size_t)BT * I;
    const size_t nwd = (size_t)C * I;
    float *x = (float *)mmt_malloc(nx * sizeof(float)), *wgu = (float *)mmt_malloc(nwgu * sizeof(float));
    float *dout = (float *)mmt_malloc(nx * sizeof(float)), *wd = (float *)mmt_malloc(nwd * sizeof(float));
    float *gu_in = (float *)mmt_malloc(ngu * sizeof(float)), *h_in = (float *)mmt_malloc(nh * sizeof(float));
    float *dw0 = (float *)mmt_malloc(nwd * sizeof(float));
    mmt_fill_bf16(x, nx, 1.0f, rng);
    mmt_fill_bf16(wgu, nwgu, 3.0f / sqrtf((float)C), rng);  // gate and up of std ~1
    mmt_fill_bf16(dout, nx, 1.0f, rng);
    mmt_fill_bf16(wd, nwd, 3.0f / sqrtf((float)C), rng);
    mmt_fill_bf16(gu_in, ngu, 3.0f, rng);
    mmt_fill_bf16(h_in, nh, 1.0f, rng);
    fill_uniform(dw0, nwd, 2.0f, rng);
    double *gu_ref = (double *)mmt_malloc(ngu * sizeof(double)), *h_ref = (double *)mmt_malloc(nh * sizeof(double));
    double *dgu_ref = (double *)mmt_malloc(ngu * sizeof(double)), *dw_ref = (double *)calloc(nwd, sizeof(double));
    if (dw_ref == NULL) exit(EXIT_FAILURE);
    float *wgu_t = (float *)mmt_malloc(nwgu * sizeof(float));  // (C, 2I): the reference's loops run along rows
    for (size_t o = 0; o < (size_t)2 * I; o++)
        for (size_t c = 0; c < (size_t)C; c++) wgu_t[c * 2 * I + o] = wgu[o * C + c];
    for (size_t r = 0; r < (size_t)BT; r++) {
        double *acc = gu_ref + r * 2 * I;
        for (size_t o = 0; o < (size_t)2 * I; o++) acc[o] = 0.0;
        for (size_t c = 0; c < (size_t)C; c++) {
            const double xv = x[r * C + c];
            for (size_t o = 0; o < (size_t)2 * I; o++) acc[o] += xv * (double)wgu_t[c * 2 * I + o];
        }
        for (size_t i = 0; i < (size_t)I; i++) {
            const double g = gu_ref[r * 2 * I + i], u = gu_ref[r * 2 * I + I + i];
            h_ref[r * I + i] = mmt_silu(g) * u;
        }
    }
    for (size_t r = 0; r < (size_t)BT; r++) {
        for (size_t i = 0; i < (size_t)I; i++) dgu_ref[r * 2 * I + i] = 0.0;  // dh's row, then dgu's
        for (size_t c = 0; c < (size_t)C; c++) {
            const double dv = dout[r * C + c];
            for (size_t i = 0; i < (size_t)I; i++) dgu_ref[r * 2 * I + i] += dv * (double)wd[c * I + i];
            for (size_t i = 0; i < (size_t)I; i++) dw_ref[c * I + i] += dv * (double)h_in[r * I + i];
        }
        for (size_t i = 0; i < (size_t)I; i++) {
            const double dh = dgu_ref[r * 2 * I + i], g = gu_in[r * 2 * I + i], u = gu_in[r * 2 * I + I + i];
            const double sg = 1.0 / (1.0 + exp(-g));
            dgu_ref[r * 2 * I + i] = dh * u * sg * (1.0 + g * (1.0 - sg));
            dgu_ref[r * 2 * I + I + i] = dh * g * sg;
        }
    }
    floatX *d_x = (floatX *)mmt_dev_alloc(nx, 2), *d_wgu = (floatX *)mmt_dev_alloc(nwgu, 2);
    floatX *d_dout = (floatX *)mmt_dev_alloc(nx, 2), *d_wd = (floatX *)mmt_dev_alloc(nwd, 2);
    floatX *d_guin = (floatX *)mmt_dev_alloc(ngu, 2), *d_hin = (floatX *)mmt_dev_alloc(nh, 2);
    floatX *d_gu = (floatX *)mmt_dev_alloc(ngu, 2), *d_h = (floatX *)mmt_dev_alloc(nh, 2);
    floatX *d_h2 = (floatX *)mmt_dev_alloc(nh, 2), *d_dh = (floatX *)mmt_dev_alloc(nh, 2);
    floatX *d_dgu = (floatX *)mmt_dev_alloc(ngu, 2), *d_dgu2 = (floatX *)mmt_dev_alloc(ngu, 2);
    float *d_dw = (float *)mmt_dev_alloc(nwd, 4);
    mmt_upload_bf16(d_x, x, nx);
    mmt_upload_bf16(d_wgu, wgu, nwgu);
    mmt_upload_bf16(d_dout, dout, nx);
    mmt_upload_bf16(d_wd, wd, nwd);
    mmt_upload_bf16(d_guin, gu_in, ngu);
    mmt_upload_bf16(d_hin, h_in, nh);
    float *h_gu = (float *)mmt_malloc(ngu * sizeof(float)), *h_gu0 = (float *)mmt_malloc(ngu * sizeof(float));
    float *h_h = (float *)mmt_malloc(nh * sizeof(float)), *h_h2 = (float *)mmt_malloc(nh * sizeof(float));
    float *h_dgu = (float *)mmt_malloc(ngu * sizeof(float)), *h_dgu2 = (float *)mmt_malloc(ngu * sizeof(float));
    float *h_dgu0 = (float *)mmt_malloc(ngu * sizeof(float)), *h_dw = (float *)mmt_malloc(nwd * sizeof(float));
    float *h_chk = (float *)mmt_malloc(ngu * sizeof(float));
    double *expect = (double *)mmt_malloc(nwd * sizeof(double));
    for (int mode = 0; mode < MMT_MODES; mode += 3) {
        mmt_set_mode(ctx, mode);
        // ---- forward
        cudaCheck(cudaMemsetAsync(d_gu, 0xFF, (ngu + MMT_GUARD) * 2, s));
        cudaCheck(cudaMemsetAsync(d_h, 0xFF, (nh + MMT_GUARD) * 2, s));
        long long before = ctx->n_sm90;
        matmul_forward_swiglu(ctx, d_gu, d_h, d_x, d_wgu, BT, C, I, s);
        int ok = 1;
        const char *path = mmt_path(ctx, before, mm90_fits_swiglu(BT, C, I, d_gu, d_h, d_x, d_wgu, NULL), &ok);
        const int hopper = ctx->n_sm90 > before;
        cudaCheck(cudaMemsetAsync(d_h2, 0xFF, (nh + MMT_GUARD) * 2, s));
        swiglu_forward(d_h2, d_gu, BT, I, s);
        cudaCheck(cudaStreamSynchronize(s));
        cudaCheck(cudaGetLastError());
        mmt_download_bf16(h_gu, d_gu, ngu);
        mmt_download_bf16(h_h, d_h, nh);
        mmt_download_bf16(h_h2, d_h2, nh);
        const double e_gu = rel_l2_f64(h_gu, gu_ref, ngu), e_h = rel_l2_f64(h_h, h_ref, nh);
        size_t far = 0;
        for (size_t i = 0; i < ngu; i++) {
            int ex = 0;
            frexp(fabs(gu_ref[i]), &ex);
            const double spacing = gu_ref[i] == 0.0 ? 0.0 : ldexp(1.0, ex - 8);
            if (!(fabs((double)h_gu[i] - gu_ref[i]) <= spacing + 1e-3)) far++;
        }
        const int h_same = memcmp(h_h, h_h2, nh * sizeof(float)) == 0;
        int worst_ulp = 0;  // against mode 0's gu
        if (mode == 0) {
            memcpy(h_gu0, h_gu, ngu * sizeof(float));
        } else {
            for (size_t i = 0; i < ngu; i++) {  // bf16 bits as ordered integers: their difference counts ulps
                const int a = f32_to_bf16_bits(h_gu[i]), b = f32_to_bf16_bits(h_gu0[i]);
                const int d = abs((a & 0x8000 ? -(a & 0x7fff) : a) - (b & 0x8000 ? -(b & 0x7fff) : b));
                if (d > worst_ulp) worst_ulp = d;
            }
        }
        int guards = mmt_guard_ok(d_gu, ngu, 2) && mmt_guard_ok(d_h, nh, 2) && mmt_guard_ok(d_x, nx, 2) &&
                     mmt_guard_ok(d_wgu, nwgu, 2);
        test_check(e_gu <= MMT_TOL && e_h <= MMT_TOL && (!hopper || far == 0) && h_same && guards && ok,
                   "matmul_forward_swiglu BT=%d C=%d I=%d %-8s (%s): gu rel L2 %.2e (%zu beyond 1 bf16 spacing; "
                   "%d ulps at most from the unfused gu), h rel L2 %.2e (%s swiglu_forward of gu), guards %s",
                   BT, C, I, mode == 0 ? "unfused" : "hopper", hopper ? "fused" : path, e_gu, far, worst_ulp, e_h,
                   h_same ? "bitwise" : "NOT", guards ? "intact" : "WRITTEN");
        // ---- backward, out of place and in place
        cudaCheck(cudaMemcpy(d_dw, dw0, nwd * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemsetAsync(d_dgu, 0xFF, (ngu + MMT_GUARD) * 2, s));
        cudaCheck(cudaMemsetAsync(d_dh, 0xFF, (nh + MMT_GUARD) * 2, s));
        before = ctx->n_sm90;
        matmul_backward_dswiglu(ctx, d_dgu, d_dh, d_dw, d_dout, d_hin, d_wd, d_guin, BT, C, I, s);
        ok = 1;
        path = mmt_path(ctx, before, mm90_fits_swiglu(BT, C, I, d_dgu, NULL, d_dout, d_wd, d_guin), &ok);
        const int bhopper = ctx->n_sm90 > before;
        cudaCheck(cudaMemcpyAsync(d_dgu2, d_guin, ngu * 2, cudaMemcpyDeviceToDevice, s));
        matmul_backward_dswiglu(ctx, d_dgu2, d_dh, NULL, d_dout, NULL, d_wd, d_dgu2, BT, C, I, s);
        cudaCheck(cudaStreamSynchronize(s));
        cudaCheck(cudaGetLastError());
        mmt_download_bf16(h_dgu, d_dgu, ngu);
        mmt_download_bf16(h_dgu2, d_dgu2, ngu);
        cudaCheck(cudaMemcpy(h_dw, d_dw, nwd * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < nwd; i++) expect[i] = (double)dw0[i] + dw_ref[i];
        const double e_dgu = rel_l2_f64(h_dgu, dgu_ref, ngu), e_dw = rel_l2_f64(h_dw, expect, nwd);
        const int inplace_same = memcmp(h_dgu, h_dgu2, ngu * sizeof(float)) == 0;
        double e_paths = 0.0;  // the fused dgu against the unfused one
        if (mode == 0) {
            memcpy(h_dgu0, h_dgu, ngu * sizeof(float));
        } else {
            double num = 0.0, den = 0.0;
            for (size_t i = 0; i < ngu; i++) {
                num += ((double)h_dgu[i] - h_dgu0[i]) * ((double)h_dgu[i] - h_dgu0[i]);
                den += (double)h_dgu0[i] * h_dgu0[i];
            }
            e_paths = sqrt(num / den);
        }
        mmt_download_bf16(h_chk, d_guin, ngu);
        const int gu_same = memcmp(h_chk, gu_in, ngu * sizeof(float)) == 0;
        const int dh_untouched = !bhopper || mmt_guard_ok(d_dh, 0, 2);  // its first elements: still poison
        guards = mmt_guard_ok(d_dgu, ngu, 2) && mmt_guard_ok(d_dgu2, ngu, 2) && mmt_guard_ok(d_dh, nh, 2) &&
                 mmt_guard_ok(d_dw, nwd, 4) && mmt_guard_ok(d_guin, ngu, 2) && mmt_guard_ok(d_dout, nx, 2) &&
                 mmt_guard_ok(d_wd, nwd, 2) && mmt_guard_ok(d_hin, nh, 2);
        test_check(e_dgu <= MMT_TOL && e_dw <= MMT_TOL && inplace_same && gu_same && dh_untouched && guards && ok,
                   "matmul_backward_dswiglu BT=%d C=%d I=%d %-8s (%s): dgu rel L2 %.2e (%.2e from the unfused), "
                   "dweight %.2e (+=), in place %s, gu %s, dh %s, guards %s", BT, C, I,
                   mode == 0 ? "unfused" : "hopper", bhopper ? "fused" : path, e_dgu, e_paths, e_dw,
                   inplace_same ? "bitwise the same" : "DIFFERS", gu_same ? "untouched" : "WRITTEN",
                   bhopper ? (dh_untouched ? "not written" : "WRITTEN") : "the unfused scratch",
                   guards ? "intact" : "WRITTEN");
    }
    mmt_set_mode(ctx, 0);
    void *dev[] = {d_x, d_wgu, d_dout, d_wd, d_guin, d_hin, d_gu, d_h, d_h2, d_dh, d_dgu, d_dgu2, d_dw};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) cudaCheck(cudaFree(dev[i]));
    void *host[] = {x, wgu, wgu_t, dout, wd, gu_in, h_in, dw0, gu_ref, h_ref, dgu_ref, dw_ref, h_gu, h_gu0, h_h, h_h2,
                    h_dgu, h_dgu2, h_dgu0, h_dw, h_chk, expect};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) free(host[i]);
}

// The trainer's kinds: the GELU and residual forwards where the Hopper GEMM runs, none elsewhere
static void test_matmul_kinds(void) {
    const int got = mm90_available(), want = sm90_available() ? MM90_DEFAULT : 0;
    test_check(got == want, "mm90_available: kinds %d (expected %d)", got, want);
}

static void test_matmul(void) {
    test_matmul_kinds();
    printf("matmul (llmc/matmul.cuh) against CPU double references, rel L2 <= %.0e:\n", MMT_TOL);
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    MatmulContext ctx;
    matmul_init(&ctx);
    uint64_t rng = 0x6d61746d756cULL;
    // BT, C, OC; the last: BT <= 64, a single dbias split that adds into dbias directly
    const int shapes[][3] = {{200, 64, 256}, {136, 768, 3072}, {61, 40, 100}, {40, 64, 256}};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        mmt_run_shape(&ctx, s, shapes[i][0], shapes[i][1], shapes[i][2], &rng);
    printf("      (%lld calls fell back from cuBLASLt epilogues/GEMMs to the unfused path; expected: the odd shape's GELU ones)\n",
           ctx.n_fallback);
    // the residual forward: the trainer's attention and MLP projections (fused), a small and an
    // odd shape, and a residual / out 2 bytes off 16-byte alignment
    const int rshapes[][5] = {{200, 64, 256, 0, 1}, {1000, 768, 768, 0, 1}, {333, 3072, 768, 0, 1},
                              {61, 40, 100, 0, 0}, {128, 768, 768, 1, 0}};  // BT, C, OC, offset, expect fused
    for (size_t i = 0; i < sizeof(rshapes) / sizeof(rshapes[0]); i++)
        mmt_run_residual(&ctx, s, rshapes[i][0], rshapes[i][1], rshapes[i][2], rshapes[i][3], rshapes[i][4], &rng);
    // the GELU backward in the dinp GEMM: the trainer's MLP projection (fused), a small and an odd shape
    mmt_run_dgelu(&ctx, s, 333, 3072, 768, 1, &rng);
    mmt_run_dgelu(&ctx, s, 200, 256, 64, 1, &rng);
    mmt_run_dgelu(&ctx, s, 61, 100, 40, 0, &rng);
    // the SwiGLU kinds: Qwen2.5-0.5B's C and I (I = 50.67 tiles of 96), a small odd one, and
    // K = C of Qwen2.5-1.5B and Llama-3.2-1B (I partial tiles forward and backward)
    const int sshapes[][3] = {{384, 896, 4864}, {200, 128, 136}, {130, 1536, 1000}, {136, 2048, 520}};  // BT, C, I
    for (size_t i = 0; i < sizeof(sshapes) / sizeof(sshapes[0]); i++)
        mmt_run_swiglu(&ctx, s, sshapes[i][0], sshapes[i][1], sshapes[i][2], &rng);
    matmul_free(&ctx);
    cudaCheck(cudaStreamDestroy(s));
}

#endif // TEST_GPU_KERNELS_MATMUL_CUH
