/*
flce_gemm.cuh - the one GEMM entry point of the module: D = alpha op(A) op(B) + beta D in
cuBLASLt's column-major convention, fp32 accumulation (CUBLAS_COMPUTE_32F: exact fp32 for
fp32 inputs, no TF32), with a small cache of descriptors and heuristic results so that the
per-chunk calls of a step pay the heuristic query once per distinct shape.

A row-major (rows, cols) matrix with row stride ld is, to cuBLASLt, a column-major
(cols, rows) matrix with leading dimension ld; flce.cu states each GEMM in that form.

flce_gemm_ex adds cuBLASLt's epilogues (bias, GELU with its input kept, their gradients); see
flce_gemm_epilogue for what each needs. flce_gemm is flce_gemm_ex without one.
*/
#ifndef FLCE_GEMM_CUH
#define FLCE_GEMM_CUH

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#ifndef FLCE_GEMM_CACHE
#define FLCE_GEMM_CACHE 64  // distinct (shape, epilogue, alignment) keys kept
#endif

/*
An epilogue of cuBLASLt applied to D = alpha op(A) op(B) + beta C, in D's column-major terms
(D is m x n). Per cublasLt.h (CUDA 13.1) and the cuBLASLt documentation:
  DEFAULT        nothing (the same as no epilogue)
  BIAS           D[i,j] += bias[i]; bias has m elements (one per row of D, packed)
  GELU_AUX       D = gelu(acc); aux (m x n, aux_ld) receives the GELU input acc
  GELU_AUX_BIAS  D = gelu(acc + bias[i]); aux receives acc + bias[i] (the pre-activation)
  DGELU          D = acc * gelu'(aux): aux (read) is the GELU input the forward kept
  DGELU_BGRAD    DGELU and, in bias (m elements), the bias gradient (written, not accumulated)
  BGRADA         bias[i] = sum over k of op(A)[i, :]  (m elements; written, not accumulated)
  BGRADB         bias[j] = sum over k of op(B)[:, j]  (n elements; written, not accumulated)
The bias gradient of the *BGRAD* epilogues is written (=): beta applies to C/D only, and its
elements have D's type. Callers that accumulate gradients (+=) must compute into scratch and
add. Requirements checked here (CUBLAS_STATUS_NOT_SUPPORTED when unmet, so that a caller can
fall back on separate kernels): GELU aux_ld a multiple of 8 and >= m, ReLU bit-mask aux_ld a
multiple of 128 (both from cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD); aux and bias
pointers 16-byte aligned (our conservative rule, not a documented one: llm.c requires it of
every cuBLASLt pointer, and Marian reports bias epilogues failing on A100 below 16). A NULL
bias or aux pointer where the epilogue needs one is CUBLAS_STATUS_INVALID_VALUE.
bias_type is D's type for bf16/fp16/fp32 GEMMs (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE); aux_type
is D's type too except in fp8 cases (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: the attribute
is set only when aux_type differs from D's, as unset means "D's type").
cuBLASLt does not document which GELU its epilogues compute; llm.c fuses GPT-2's tanh GELU with
them and matches PyTorch's tanh form. In bf16 storage the tanh and erf forms (at most 4.7e-4
apart) are not distinguishable anyway.
*/
typedef struct {
    cublasLtEpilogue_t epilogue;
    void *bias;               // BIAS: read; BGRAD: written. NULL when the epilogue has no bias
    cudaDataType_t bias_type;
    void *aux;                // *_AUX: written; DGELU/DRELU: read. NULL when it has no aux
    int64_t aux_ld;           // in elements (bits for the ReLU mask)
    cudaDataType_t aux_type;
} flce_gemm_epilogue;

typedef struct {
    // everything that decides descriptors and algorithm (not the pointers themselves)
    int transa, transb;
    int64_t m, n, k, lda, ldb, ldd;
    cudaDataType_t type_a, type_b, type_d;
    int beta_zero;
    int align_a, align_b, align_d;  // pointer alignment in bytes (power of 2, <= 256)
    // the epilogue (all zero for none/DEFAULT); the heuristic reads the pointers' alignment
    int epilogue, uses_bias, uses_aux;
    int bias_type, aux_type;
    int64_t aux_ld;
    int align_bias, align_aux;
} flce_gemm_key;

typedef struct {
    flce_gemm_key key;
    int used;
    unsigned long long last_use;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} flce_gemm_entry;

typedef struct {
    cublasLtHandle_t handle;
    flce_gemm_entry entries[FLCE_GEMM_CACHE];
    unsigned long long clock;
    int autotune;        // 1: a new key times the heuristic's candidates (flce_gemm_entry_tune)
    int tuned, retuned;  // keys timed, and of those where a candidate other than the first won
} flce_gemm_cache;

static int flce_ptr_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int align = 256;
    while (align > 1 && (a % (uintptr_t)align) != 0) align /= 2;
    return align;
}

static size_t flce_type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

static void flce_gemm_entry_release(flce_gemm_entry *e) {
    if (!e->used) return;
    if (e->la) cublasLtMatrixLayoutDestroy(e->la);
    if (e->lb) cublasLtMatrixLayoutDestroy(e->lb);
    if (e->ld) cublasLtMatrixLayoutDestroy(e->ld);
    if (e->desc) cublasLtMatmulDescDestroy(e->desc);
    memset(e, 0, sizeof(*e));
}

static void flce_gemm_cache_release(flce_gemm_cache *c) {
    for (int i = 0; i < FLCE_GEMM_CACHE; i++) flce_gemm_entry_release(&c->entries[i]);
}

// The heuristic's preferences for key: workspace, fp32 split-K reduction, pointer alignment.
static cublasStatus_t flce_gemm_preference(const flce_gemm_key *key, size_t ws_bytes,
                                           cublasLtMatmulPreference_t *pref) {
    cublasStatus_t st = cublasLtMatmulPreferenceCreate(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    uint64_t ws = ws_bytes;
    uint32_t aa = key->align_a, ab = key->align_b, ad = key->align_d;
    // split-K partial sums in fp32 only: reducing them in a bf16 output would round each
    // partial, adding error on top of the one rounding of the result
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    // the heuristic assumes 256-byte aligned pointers unless told otherwise
    const struct { cublasLtMatmulPreferenceAttributes_t attr; const void *v; size_t n; } prefs[] = {
        {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)},
        {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof(reduction)},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof(ad)},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof(ad)},
    };
    for (int i = 0; i < 6 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(*pref, prefs[i].attr, prefs[i].v, prefs[i].n);
    if (st != CUBLAS_STATUS_SUCCESS) cublasLtMatmulPreferenceDestroy(*pref);
    return st;
}

// Builds descriptors and picks an algorithm for key; returns a cuBLAS status, and in
// *no_algo whether the heuristic found none.
static cublasStatus_t flce_gemm_entry_build(flce_gemm_cache *c, flce_gemm_entry *e,
                                            const flce_gemm_key *key,
                                            const flce_gemm_epilogue *ep, size_t ws_bytes,
                                            int *no_algo) {
    *no_algo = 0;
    memset(e, 0, sizeof(*e));
    e->key = *key;
    cublasStatus_t st;
    cublasOperation_t opa = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    st = cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    e->used = 1;  // from here on flce_gemm_entry_release frees whatever was created
    st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa));
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb));
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (key->epilogue != 0) {
        // the pointers of this first call are set too: the heuristic reads their alignment
        // (every call sets its own before the matmul)
        uint32_t epi = (uint32_t)key->epilogue;
        st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
        if (st == CUBLAS_STATUS_SUCCESS && key->uses_bias) {
            int32_t bt = (int32_t)key->bias_type;
            st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
            if (st == CUBLAS_STATUS_SUCCESS)
                st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &ep->bias, sizeof(ep->bias));
        }
        if (st == CUBLAS_STATUS_SUCCESS && key->uses_aux) {
            int64_t ald = key->aux_ld;
            st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ald, sizeof(ald));
            if (st == CUBLAS_STATUS_SUCCESS && key->aux_type != (int)key->type_d) {
                int32_t at = (int32_t)key->aux_type;
                st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                                    &at, sizeof(at));
            }
            if (st == CUBLAS_STATUS_SUCCESS)
                st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &ep->aux, sizeof(ep->aux));
        }
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    // stored shapes: A is (m,k) or (k,m) when transposed; B likewise with (k,n)
    uint64_t a_rows = key->transa ? key->k : key->m, a_cols = key->transa ? key->m : key->k;
    uint64_t b_rows = key->transb ? key->n : key->k, b_cols = key->transb ? key->k : key->n;
    st = cublasLtMatrixLayoutCreate(&e->la, key->type_a, a_rows, a_cols, key->lda);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&e->lb, key->type_b, b_rows, b_cols, key->ldb);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&e->ld, key->type_d, key->m, key->n, key->ldd);
    if (st != CUBLAS_STATUS_SUCCESS) return st;

    cublasLtMatmulPreference_t pref;
    st = flce_gemm_preference(key, ws_bytes, &pref);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    cublasLtMatmulHeuristicResult_t result;
    int returned = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(c->handle, e->desc, e->la, e->lb, e->ld, e->ld, pref,
                                            1, &result, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && returned == 0) *no_algo = 1;
    if (st == CUBLAS_STATUS_SUCCESS && returned > 0) e->algo = result.algo;
    return st;
}

/*
Autotuning: cuBLASLt's heuristic ranks candidates by a model; with c->autotune, the first call
of a key times the heuristic's pick (the algorithm the entry was built with) against up to
FLCE_TUNE_CANDIDATES more candidates: a warm-up round, then FLCE_TUNE_ROUNDS rounds that
run the candidates in turn (clock drift spread over all of them rather than penalising the
first), each scored by its best round. Before every timed trial a 64 MiB memset empties L2:
in flce's pipeline the operands arrive from HBM (the row kernel streams the whole chunk in
between), and trials on L2-hot operands picked algorithms that lost there (8192x768x50304,
bf16 logits: 3.2 -> 3.6 ms). Another candidate replaces the pick only if it is
FLCE_TUNE_MARGIN (10%) faster, so that timing noise does not flip the choice between runs.
With beta = 0 the trials write D, which the real call that follows overwrites whole; with
beta != 0 (accumulation) they write a scratch output of D's size, so that D keeps what it is
to be added to. No input is ever written by a trial (D must not alias A or B, as for any
GEMM); an epilogue's aux or bias-gradient output is written by the trials and then by the
real call. The scratch (and the 64 MiB flush buffer) is a cudaMalloc: tuning is skipped, and
the heuristic's pick kept, while the stream is being captured or when the allocation fails.
A tuning call synchronizes the stream.
*/
#define FLCE_TUNE_CANDIDATES 8
#define FLCE_TUNE_RUNS 1
#define FLCE_TUNE_ROUNDS 3
#define FLCE_TUNE_FLUSH_BYTES ((size_t)64 << 20)  // more than the H100/H200 L2 (50 / 60 MB)
#define FLCE_TUNE_MARGIN 0.10f

static void flce_gemm_entry_tune(flce_gemm_cache *c, flce_gemm_entry *e, const flce_gemm_key *key,
                                 const void *A, const void *B, void *D, float alpha, float beta,
                                 void *ws, size_t ws_bytes, cudaStream_t stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone)
        return;
    cublasLtMatmulPreference_t pref;
    if (flce_gemm_preference(key, ws_bytes, &pref) != CUBLAS_STATUS_SUCCESS) return;
    // Candidate 0 is the entry's algorithm, the pick of a one-result query: a query for several
    // results does not return it first (measured: its first result ran the 8192x768x50304
    // logits GEMM at 588 TFLOP/s, the one-result pick at 716), so the rest come after it.
    cublasLtMatmulHeuristicResult_t res[FLCE_TUNE_CANDIDATES + 1], more[FLCE_TUNE_CANDIDATES];
    int n_more = 0, returned = 1;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->handle, e->desc, e->la, e->lb, e->ld, e->ld,
                                                       pref, FLCE_TUNE_CANDIDATES, more, &n_more);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return;
    res[0].algo = e->algo;
    for (int i = 0; i < n_more; i++)
        if (memcmp(&more[i].algo, &e->algo, sizeof(e->algo)) != 0) res[returned++] = more[i];
    if (returned < 2) return;
    // beta = 0: the trials write D itself, which the real call then overwrites whole; beta != 0
    // reads D, so the trials get a scratch output of its size
    const size_t d_bytes =
        beta == 0.0f ? 0 : ((size_t)key->ldd * (size_t)key->n * flce_type_size(key->type_d) + 255) / 256 * 256;
    char *scratch = NULL;
    cudaEvent_t t0 = NULL, t1 = NULL;
    if (cudaMalloc((void **)&scratch, d_bytes + FLCE_TUNE_FLUSH_BYTES) != cudaSuccess) {
        (void)cudaGetLastError();  // an out-of-memory here only costs the tuning
        return;
    }
    char *flush = scratch + d_bytes;
    void *out = beta == 0.0f ? D : (void *)scratch;
    int ok = cudaEventCreate(&t0) == cudaSuccess && cudaEventCreate(&t1) == cudaSuccess &&
             (d_bytes == 0 || cudaMemsetAsync(scratch, 0, d_bytes, stream) == cudaSuccess);
    // Round r runs every candidate in turn, FLCE_TUNE_RUNS times back to back; round 0 warms
    // them up (clocks, instruction caches) and is not scored. Interleaving the candidates
    // spreads clock and cache drift over all of them instead of penalising whichever is timed
    // first; a candidate's score is its best round.
    float score[FLCE_TUNE_CANDIDATES + 1];
    int usable[FLCE_TUNE_CANDIDATES + 1];
    for (int i = 0; i < returned; i++) { score[i] = 1e30f; usable[i] = 1; }
    for (int round = 0; ok && round <= FLCE_TUNE_ROUNDS; round++) {
        for (int i = 0; i < returned; i++) {
            if (!usable[i]) continue;
            float ms = 0.0f;
            // L2 emptied of the operands, as the pipeline's row kernel leaves it
            int good = cudaMemsetAsync(flush, round, FLCE_TUNE_FLUSH_BYTES, stream) == cudaSuccess &&
                       cudaEventRecord(t0, stream) == cudaSuccess;
            for (int r = 0; r < FLCE_TUNE_RUNS && good; r++)
                good = cublasLtMatmul(c->handle, e->desc, &alpha, A, e->la, B, e->lb, &beta, out,
                                      e->ld, out, e->ld, &res[i].algo, ws, ws_bytes,
                                      stream) == CUBLAS_STATUS_SUCCESS;
            good = good && cudaEventRecord(t1, stream) == cudaSuccess &&
                   cudaEventSynchronize(t1) == cudaSuccess &&
                   cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess;
            if (!good) {  // a candidate that fails to run is passed over; the first must run
                (void)cudaGetLastError();
                usable[i] = 0;
                if (i == 0) ok = 0;
                continue;
            }
            if (round > 0 && ms < score[i]) score[i] = ms;
        }
    }
    if (ok) {
        int best = 0;
        for (int i = 1; i < returned; i++)
            if (usable[i] && score[i] < score[best]) best = i;
        if (best != 0 && score[best] > (1.0f - FLCE_TUNE_MARGIN) * score[0]) best = 0;
        e->algo = res[best].algo;
        c->tuned++;
        if (best != 0) c->retuned++;
    }
    if (t0) cudaEventDestroy(t0);
    if (t1) cudaEventDestroy(t1);
    cudaFree(scratch);
}

// What an epilogue needs: a bias vector, an aux matrix, and which kind of aux (0 none, 1 the
// GELU input matrix, 2 the ReLU bit-mask). Returns 0 for an epilogue not known here.
static inline int flce_epilogue_needs(cublasLtEpilogue_t epi, int *bias, int *aux) {
    *bias = 0;
    *aux = 0;
    switch (epi) {
    case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_RELU: case CUBLASLT_EPILOGUE_GELU:
        return 1;
    case CUBLASLT_EPILOGUE_BIAS: case CUBLASLT_EPILOGUE_RELU_BIAS: case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_BGRADA: case CUBLASLT_EPILOGUE_BGRADB:
        *bias = 1;
        return 1;
    case CUBLASLT_EPILOGUE_GELU_AUX: case CUBLASLT_EPILOGUE_DGELU:
        *aux = 1;
        return 1;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: case CUBLASLT_EPILOGUE_DGELU_BGRAD:
        *bias = 1;
        *aux = 1;
        return 1;
    case CUBLASLT_EPILOGUE_RELU_AUX: case CUBLASLT_EPILOGUE_DRELU:
        *aux = 2;
        return 1;
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: case CUBLASLT_EPILOGUE_DRELU_BGRAD:
        *bias = 1;
        *aux = 2;
        return 1;
    default:
        return 0;
    }
}

// The key of a GEMM without an epilogue (flce_gemm_ex adds the epilogue's fields).
static inline flce_gemm_key flce_gemm_make_key(int transa, int transb, int64_t m, int64_t n,
                                               int64_t k, const void *A, cudaDataType_t type_a,
                                               int64_t lda, const void *B, cudaDataType_t type_b,
                                               int64_t ldb, const void *D, cudaDataType_t type_d,
                                               int64_t ldd, float beta) {
    flce_gemm_key key;
    memset(&key, 0, sizeof(key));
    key.transa = transa; key.transb = transb;
    key.m = m; key.n = n; key.k = k; key.lda = lda; key.ldb = ldb; key.ldd = ldd;
    key.type_a = type_a; key.type_b = type_b; key.type_d = type_d;
    key.beta_zero = beta == 0.0f;
    key.align_a = flce_ptr_alignment(A);
    key.align_b = flce_ptr_alignment(B);
    key.align_d = flce_ptr_alignment(D);
    return key;
}

// D (m x n, ldd) = alpha * op(A) * op(B) + beta * D, on stream, followed by the epilogue ep
// (NULL: none; see flce_gemm_epilogue). On failure returns the cuBLAS status:
// CUBLAS_STATUS_NOT_SUPPORTED when no algorithm exists for the shape or the epilogue's
// requirements (aux_ld, pointer alignment) are not met, CUBLAS_STATUS_INVALID_VALUE for an
// unknown epilogue or a missing bias/aux pointer, or whatever cuBLASLt returned.
static inline cublasStatus_t flce_gemm_ex(flce_gemm_cache *c, cudaStream_t stream, int transa,
                                          int transb, int64_t m, int64_t n, int64_t k,
                                          const void *A, cudaDataType_t type_a, int64_t lda,
                                          const void *B, cudaDataType_t type_b, int64_t ldb,
                                          void *D, cudaDataType_t type_d, int64_t ldd, float alpha,
                                          float beta, const flce_gemm_epilogue *ep, void *ws,
                                          size_t ws_bytes) {
    flce_gemm_key key = flce_gemm_make_key(transa, transb, m, n, k, A, type_a, lda, B, type_b,
                                           ldb, D, type_d, ldd, beta);
    if (ep != NULL && ep->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        int uses_bias = 0, uses_aux = 0;
        if (!flce_epilogue_needs(ep->epilogue, &uses_bias, &uses_aux))
            return CUBLAS_STATUS_INVALID_VALUE;
        if ((uses_bias && ep->bias == NULL) || (uses_aux && ep->aux == NULL))
            return CUBLAS_STATUS_INVALID_VALUE;
        if (uses_bias && flce_ptr_alignment(ep->bias) < 16) return CUBLAS_STATUS_NOT_SUPPORTED;
        if (uses_aux) {
            const int64_t multiple = uses_aux == 2 ? 128 : 8;
            if (ep->aux_ld < m || ep->aux_ld % multiple != 0 || flce_ptr_alignment(ep->aux) < 16)
                return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        key.epilogue = (int)ep->epilogue;
        key.uses_bias = uses_bias;
        key.uses_aux = uses_aux;
        if (uses_bias) {
            key.bias_type = (int)ep->bias_type;
            key.align_bias = flce_ptr_alignment(ep->bias);
        }
        if (uses_aux) {
            key.aux_type = (int)ep->aux_type;
            key.aux_ld = ep->aux_ld;
            key.align_aux = flce_ptr_alignment(ep->aux);
        }
    }

    flce_gemm_entry *e = NULL, *victim = &c->entries[0];
    for (int i = 0; i < FLCE_GEMM_CACHE; i++) {
        flce_gemm_entry *x = &c->entries[i];
        if (x->used && memcmp(&x->key, &key, sizeof(key)) == 0) { e = x; break; }
        if (!x->used || (victim->used && x->last_use < victim->last_use)) victim = x;
    }
    if (e == NULL) {
        flce_gemm_entry_release(victim);
        int no_algo = 0;
        cublasStatus_t st = flce_gemm_entry_build(c, victim, &key, ep, ws_bytes, &no_algo);
        if (st != CUBLAS_STATUS_SUCCESS || no_algo) {
            flce_gemm_entry_release(victim);
            return st != CUBLAS_STATUS_SUCCESS ? st : CUBLAS_STATUS_NOT_SUPPORTED;
        }
        e = victim;
        if (c->autotune)
            flce_gemm_entry_tune(c, e, &key, A, B, D, alpha, beta, ws, ws_bytes, stream);
    } else if (key.epilogue != 0) {
        // the pointers are attributes of the (cached) descriptor: this call's, every call;
        // cublasLtMatmul reads them on the host when it launches, so a later change is safe
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        if (key.uses_bias)
            st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &ep->bias, sizeof(ep->bias));
        if (st == CUBLAS_STATUS_SUCCESS && key.uses_aux)
            st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &ep->aux, sizeof(ep->aux));
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    e->last_use = ++c->clock;
    return cublasLtMatmul(c->handle, e->desc, &alpha, A, e->la, B, e->lb, &beta, D, e->ld, D,
                          e->ld, &e->algo, ws, ws_bytes, stream);
}

// D (m x n, ldd) = alpha * op(A) * op(B) + beta * D, on stream. On failure returns the cuBLAS
// status (CUBLAS_STATUS_NOT_SUPPORTED when no algorithm exists for the shape).
static cublasStatus_t flce_gemm(flce_gemm_cache *c, cudaStream_t stream, int transa, int transb,
                                int64_t m, int64_t n, int64_t k, const void *A,
                                cudaDataType_t type_a, int64_t lda, const void *B,
                                cudaDataType_t type_b, int64_t ldb, void *D,
                                cudaDataType_t type_d, int64_t ldd, float alpha, float beta,
                                void *ws, size_t ws_bytes) {
    return flce_gemm_ex(c, stream, transa, transb, m, n, k, A, type_a, lda, B, type_b, ldb, D,
                        type_d, ldd, alpha, beta, NULL, ws, ws_bytes);
}

typedef enum { FLCE_SPLIT_M, FLCE_SPLIT_N, FLCE_SPLIT_K } flce_split_dim;

// flce_gemm with one dimension (the vocabulary's) cut at `at` into an aligned part and a
// remainder: cuBLASLt runs several times slower on the whole GEMM when that dimension is
// not a multiple of 8 (seen at V = 176245: 106 TFLOP/s instead of ~700), so the aligned
// bulk goes through the fast kernels and only the few remaining rows through a slow one.
// An m or n cut writes two disjoint parts of D; a k cut adds the second product (beta 1),
// so D should then be fp32 to avoid a second rounding.
static cublasStatus_t flce_gemm_split(flce_gemm_cache *c, cudaStream_t stream, flce_split_dim dim,
                                      int64_t at, int transa, int transb, int64_t m, int64_t n,
                                      int64_t k, const void *A, cudaDataType_t type_a, int64_t lda,
                                      const void *B, cudaDataType_t type_b, int64_t ldb, void *D,
                                      cudaDataType_t type_d, int64_t ldd, float alpha, float beta,
                                      void *ws, size_t ws_bytes) {
    const int64_t extent = dim == FLCE_SPLIT_M ? m : dim == FLCE_SPLIT_N ? n : k;
    if (at <= 0 || at >= extent)
        return flce_gemm(c, stream, transa, transb, m, n, k, A, type_a, lda, B, type_b, ldb, D,
                         type_d, ldd, alpha, beta, ws, ws_bytes);
    const size_t ea = flce_type_size(type_a), eb = flce_type_size(type_b), ed = flce_type_size(type_d);
    const char *A2 = (const char *)A, *B2 = (const char *)B;
    char *D2 = (char *)D;
    int64_t m1 = m, n1 = n, k1 = k, m2 = m, n2 = n, k2 = k;
    float beta2 = beta;
    if (dim == FLCE_SPLIT_M) {  // rows of op(A) and of D
        m1 = at; m2 = m - at;
        A2 += (size_t)(transa ? at * lda : at) * ea;
        D2 += (size_t)at * ed;
    } else if (dim == FLCE_SPLIT_N) {  // columns of op(B) and of D
        n1 = at; n2 = n - at;
        B2 += (size_t)(transb ? at : at * ldb) * eb;
        D2 += (size_t)at * ldd * ed;
    } else {  // the summed dimension: the second part adds onto the first
        k1 = at; k2 = k - at;
        A2 += (size_t)(transa ? at : at * lda) * ea;
        B2 += (size_t)(transb ? at * ldb : at) * eb;
        beta2 = 1.0f;
    }
    cublasStatus_t st = flce_gemm(c, stream, transa, transb, m1, n1, k1, A, type_a, lda, B, type_b,
                                  ldb, D, type_d, ldd, alpha, beta, ws, ws_bytes);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    return flce_gemm(c, stream, transa, transb, m2, n2, k2, A2, type_a, lda, B2, type_b, ldb, D2,
                     type_d, ldd, alpha, beta2, ws, ws_bytes);
}

#endif // FLCE_GEMM_CUH
