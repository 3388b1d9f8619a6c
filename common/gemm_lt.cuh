/*
gemm_lt.cuh - the cuBLASLt GEMM that flce/, llmc/ and dev/ share: D = alpha op(A) op(B) +
beta D in cuBLASLt's column-major convention, fp32 accumulation (CUBLAS_COMPUTE_32F: exact fp32
for fp32 inputs, no TF32), with a small cache of descriptors and algorithms so that the
per-chunk or per-layer calls of a step pay the heuristic query once per distinct shape.

A row-major (rows, cols) matrix with row stride ld is, to cuBLASLt, a column-major
(cols, rows) matrix with leading dimension ld; callers state each GEMM in that form, as a
gemm_problem of three gemm_operands.

  gemm_lt      one GEMM, optionally with a bias / GELU epilogue (gemm_epilogue)
  gemm_lt_c    the same with a separate input C: D = alpha op(A) op(B) + beta C (+ epilogue)
  gemm_split   one GEMM cut in two along one dimension (an aligned bulk and a remainder)
  gemm_cache   the cuBLASLt handle, the cache, and optional autotuning of new shapes
*/
#ifndef COMMON_GEMM_LT_CUH
#define COMMON_GEMM_LT_CUH

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda_util.cuh"

#ifndef GEMM_CACHE_SIZE
#define GEMM_CACHE_SIZE 64  // distinct (shape, epilogue, alignment) keys kept
#endif

// One matrix of a GEMM: device pointer, element type, leading dimension in elements.
typedef struct {
    const void *ptr;
    cudaDataType_t type;
    int64_t ld;
} gemm_operand;

// D (m x n) = alpha op(A) op(B) + beta D, op(X) = X^T when trans; op(A) is m x k, op(B) k x n.
// d.ptr is written (const only so that one operand type serves all three); D must not alias
// A or B. With beta = 0, D is not read.
typedef struct {
    int transa, transb;
    int64_t m, n, k;
    gemm_operand a, b, d;
    float alpha, beta;
} gemm_problem;

/*
The epilogues of cuBLASLt that callers use (llmc/matmul.cuh's forward), in D's column-major
terms (D is m x n):
  DEFAULT        nothing (the same as no epilogue)
  BIAS           D[i,j] += bias[i]; bias has m elements of D's type
  GELU_AUX       D = gelu(acc); aux (m x n, aux_ld, D's type) receives the GELU input acc
  GELU_AUX_BIAS  D = gelu(acc + bias[i]); aux receives acc + bias[i] (the pre-activation)
  DGELU          D = acc * gelu'(aux): aux (m x n, aux_ld, D's type) is read, the pre-activation
                 of a GELU whose output gradient acc is (the GELU backward in a GEMM's epilogue)
Requirements checked here (CUBLAS_STATUS_NOT_SUPPORTED when unmet, so that a caller can fall
back on separate kernels): aux_ld a multiple of 8 and >= m (cublasLt.h,
CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD); aux and bias 16-byte aligned (our conservative rule,
not a documented one: llm.c requires it of every cuBLASLt pointer, and Marian reports bias
epilogues failing on A100 below 16). A NULL bias or aux where the epilogue needs one, or
another epilogue, is CUBLAS_STATUS_INVALID_VALUE.
cuBLASLt does not document which GELU its epilogues compute; llm.c fuses GPT-2's tanh GELU with
them and matches PyTorch's tanh form. In bf16 storage the tanh and erf forms (at most 4.7e-4
apart) are not distinguishable anyway.
*/
typedef struct {
    cublasLtEpilogue_t epilogue;
    const void *bias;  // BIAS, GELU_AUX_BIAS: read
    void *aux;         // GELU_AUX, GELU_AUX_BIAS: written; DGELU: read
    int64_t aux_ld;    // in elements
} gemm_epilogue;

typedef struct {
    // everything that decides descriptors and algorithm (not the pointers themselves)
    int transa, transb;
    int64_t m, n, k, lda, ldb, ldd;
    cudaDataType_t type_a, type_b, type_d;
    int beta_zero;
    int align_a, align_b, align_d;  // pointer alignment in bytes (power of 2, <= 256)
    // the epilogue (all zero for none/DEFAULT); the heuristic reads the pointers' alignment
    int epilogue, uses_bias, uses_aux;
    int64_t aux_ld;
    int align_bias, align_aux;
    int align_c;  // C's alignment: align_d unless gemm_lt_c reads a separate C
    size_t ws_bytes;  // the workspace the algorithm was chosen within (a call with less cannot run it)
    int sm_target;    // gemm_cache.sm_target when it was chosen
} gemm_key;

typedef struct {
    gemm_key key;
    int used;
    unsigned long long last_use;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} gemm_entry;

typedef struct {
    cublasLtHandle_t handle;
    gemm_entry entries[GEMM_CACHE_SIZE];
    unsigned long long clock;
    int autotune;        // 1: a new key times the heuristic's candidates (gemm_entry_tune)
    int tuned, retuned;  // keys timed, and of those where a candidate other than the first won
    FILE *report;        // with autotune: one line per key timed (shape, epilogue, the pick's and the best ms)
    // 0, or the SMs a GEMM is to run on (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: its heuristic and
    // persistent grids for that many, while another stream's kernel has the rest); set around
    // such a call
    int sm_target;
} gemm_cache;

// the largest power of two (<= 256) that divides p's address
static int gemm_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int align = 256;
    while (align > 1 && (a % (uintptr_t)align) != 0) align /= 2;
    return align;
}

static size_t gemm_type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

static void gemm_entry_release(gemm_entry *e) {
    if (!e->used) return;
    if (e->la) cublasLtMatrixLayoutDestroy(e->la);
    if (e->lb) cublasLtMatrixLayoutDestroy(e->lb);
    if (e->ld) cublasLtMatrixLayoutDestroy(e->ld);
    if (e->desc) cublasLtMatmulDescDestroy(e->desc);
    memset(e, 0, sizeof(*e));
}

static void gemm_cache_release(gemm_cache *c) {
    for (int i = 0; i < GEMM_CACHE_SIZE; i++) gemm_entry_release(&c->entries[i]);
}

// The heuristic's preferences for key: workspace, fp32 split-K reduction, pointer alignment.
static cublasStatus_t gemm_preference(const gemm_key *key, size_t ws_bytes,
                                      cublasLtMatmulPreference_t *pref) {
    cublasStatus_t st = cublasLtMatmulPreferenceCreate(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    uint64_t ws = ws_bytes;
    uint32_t aa = key->align_a, ab = key->align_b, ac = key->align_c, ad = key->align_d;
    // split-K partial sums in fp32 only: reducing them in a bf16 output would round each
    // partial, adding error on top of the one rounding of the result
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    // the heuristic assumes 256-byte aligned pointers unless told otherwise
    const struct { cublasLtMatmulPreferenceAttributes_t attr; const void *v; size_t n; } prefs[] = {
        {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)},
        {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof(reduction)},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac)},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof(ad)},
    };
    for (int i = 0; i < 6 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(*pref, prefs[i].attr, prefs[i].v, prefs[i].n);
    if (st != CUBLAS_STATUS_SUCCESS) cublasLtMatmulPreferenceDestroy(*pref);
    return st;
}

// Builds descriptors and picks an algorithm for key; returns a cuBLAS status, and in
// *no_algo whether the heuristic found none.
static cublasStatus_t gemm_entry_build(gemm_cache *c, gemm_entry *e, const gemm_key *key,
                                       const gemm_epilogue *ep, size_t ws_bytes, int *no_algo) {
    *no_algo = 0;
    memset(e, 0, sizeof(*e));
    e->key = *key;
    cublasStatus_t st;
    cublasOperation_t opa = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    st = cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    e->used = 1;  // from here on gemm_entry_release frees whatever was created
    st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa));
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb));
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (key->sm_target > 0) {
        int32_t sms = key->sm_target;
        st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof(sms));
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    if (key->epilogue != 0) {
        // the pointers of this first call are set too: the heuristic reads their alignment
        // (every call sets its own before the matmul)
        uint32_t epi = (uint32_t)key->epilogue;
        st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
        if (st == CUBLAS_STATUS_SUCCESS && key->uses_bias) {
            int32_t bt = (int32_t)key->type_d;  // the bias has D's type
            st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
            if (st == CUBLAS_STATUS_SUCCESS)
                st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &ep->bias, sizeof(ep->bias));
        }
        if (st == CUBLAS_STATUS_SUCCESS && key->uses_aux) {
            // the aux type is left unset: that means D's type
            int64_t ald = key->aux_ld;
            st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ald, sizeof(ald));
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
    st = gemm_preference(key, ws_bytes, &pref);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    cublasLtMatmulHeuristicResult_t result;
    int returned = 0;
    st = cublasLtMatmulAlgoGetHeuristic(c->handle, e->desc, e->la, e->lb, e->ld, e->ld, pref, 1,
                                        &result, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && returned == 0) *no_algo = 1;
    if (st == CUBLAS_STATUS_SUCCESS && returned > 0) e->algo = result.algo;
    return st;
}

/*
Autotuning: cuBLASLt's heuristic ranks candidates by a model; with c->autotune, the first call
of a key times the heuristic's pick (the algorithm the entry was built with) against up to
GEMM_TUNE_CANDIDATES more candidates: a warm-up round, then GEMM_TUNE_ROUNDS rounds that
run the candidates in turn (clock drift spread over all of them rather than penalising the
first), each scored by its best round. Before every timed trial a 64 MiB memset empties L2:
in flce's pipeline the operands arrive from HBM (the row kernel streams the whole chunk in
between), and trials on L2-hot operands picked algorithms that lost there (dev/RESULTS.md).
Another candidate replaces the pick only if it is GEMM_TUNE_MARGIN faster, so that timing
noise does not flip the choice between runs.
With beta = 0 the trials write D, which the real call that follows overwrites whole; with
beta != 0 (accumulation) they write a scratch output of D's size, so that D keeps what it is
to be added to. No input is ever written by a trial (D must not alias A or B, as for any
GEMM); an epilogue's aux output is written by the trials and then by the real call. The
scratch (and the 64 MiB flush buffer) is a cudaMalloc: tuning is skipped, and the heuristic's
pick kept, while the stream is being captured or when the allocation fails.
A tuning call synchronizes the stream.
*/
#define GEMM_TUNE_CANDIDATES 8
#define GEMM_TUNE_RUNS 1
#define GEMM_TUNE_ROUNDS 3
#define GEMM_TUNE_FLUSH_BYTES ((size_t)64 << 20)  // more than the H100/H200 L2 (50 / 60 MB)
#define GEMM_TUNE_MARGIN 0.10f

static void gemm_entry_tune(gemm_cache *c, gemm_entry *e, const gemm_key *key,
                            const gemm_problem *p, void *ws, size_t ws_bytes, cudaStream_t stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone)
        return;
    cublasLtMatmulPreference_t pref;
    if (gemm_preference(key, ws_bytes, &pref) != CUBLAS_STATUS_SUCCESS) return;
    // Candidate 0 is the entry's algorithm, the pick of a one-result query: a query for several
    // results does not return it first (and its first result can be slower), so the rest come
    // after it.
    cublasLtMatmulHeuristicResult_t res[GEMM_TUNE_CANDIDATES + 1], more[GEMM_TUNE_CANDIDATES];
    int n_more = 0, returned = 1;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->handle, e->desc, e->la, e->lb, e->ld, e->ld,
                                                       pref, GEMM_TUNE_CANDIDATES, more, &n_more);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return;
    res[0].algo = e->algo;
    for (int i = 0; i < n_more; i++)
        if (memcmp(&more[i].algo, &e->algo, sizeof(e->algo)) != 0) res[returned++] = more[i];
    if (returned < 2) return;
    // beta = 0: the trials write D itself, which the real call then overwrites whole; beta != 0
    // reads D, so the trials get a scratch output of its size
    const float alpha = p->alpha, beta = p->beta;
    const size_t d_bytes =
        beta == 0.0f ? 0 : ((size_t)key->ldd * (size_t)key->n * gemm_type_size(key->type_d) + 255) / 256 * 256;
    char *scratch = NULL;
    cudaEvent_t t0 = NULL, t1 = NULL;
    if (cudaMalloc((void **)&scratch, d_bytes + GEMM_TUNE_FLUSH_BYTES) != cudaSuccess) {
        (void)cudaGetLastError();  // an out-of-memory here only costs the tuning
        return;
    }
    char *flush = scratch + d_bytes;
    void *out = beta == 0.0f ? (void *)p->d.ptr : (void *)scratch;
    int ok = cudaEventCreate(&t0) == cudaSuccess && cudaEventCreate(&t1) == cudaSuccess &&
             (d_bytes == 0 || cudaMemsetAsync(scratch, 0, d_bytes, stream) == cudaSuccess);
    // Round r runs every candidate in turn, GEMM_TUNE_RUNS times back to back; round 0 warms
    // them up (clocks, instruction caches) and is not scored. Interleaving the candidates
    // spreads clock and cache drift over all of them instead of penalising whichever is timed
    // first; a candidate's score is its best round.
    float score[GEMM_TUNE_CANDIDATES + 1];
    int usable[GEMM_TUNE_CANDIDATES + 1];
    for (int i = 0; i < returned; i++) { score[i] = 1e30f; usable[i] = 1; }
    for (int round = 0; ok && round <= GEMM_TUNE_ROUNDS; round++) {
        for (int i = 0; i < returned; i++) {
            if (!usable[i]) continue;
            float ms = 0.0f;
            // L2 emptied of the operands, as the pipeline's row kernel leaves it
            int good = cudaMemsetAsync(flush, round, GEMM_TUNE_FLUSH_BYTES, stream) == cudaSuccess &&
                       cudaEventRecord(t0, stream) == cudaSuccess;
            for (int r = 0; r < GEMM_TUNE_RUNS && good; r++)
                good = cublasLtMatmul(c->handle, e->desc, &alpha, p->a.ptr, e->la, p->b.ptr, e->lb,
                                      &beta, out, e->ld, out, e->ld, &res[i].algo, ws, ws_bytes,
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
        const int fastest = best;
        if (best != 0 && score[best] > (1.0f - GEMM_TUNE_MARGIN) * score[0]) best = 0;
        if (c->report != NULL)
            fprintf(c->report, "gemm tune | %c%c m %lld n %lld k %lld | epilogue %d beta %g | pick %.4f ms"
                    " %.0f TFLOP/s | fastest of %d: #%d %.4f ms | kept #%d\n",
                    key->transa ? 'T' : 'N', key->transb ? 'T' : 'N', (long long)key->m, (long long)key->n,
                    (long long)key->k, key->epilogue, beta, score[0],
                    2e-9 * (double)key->m * (double)key->n * (double)key->k / score[0], returned, fastest,
                    score[fastest], best);
        e->algo = res[best].algo;
        c->tuned++;
        if (best != 0) c->retuned++;
    }
    if (t0) cudaEventDestroy(t0);
    if (t1) cudaEventDestroy(t1);
    cudaFree(scratch);
}

// The key of a GEMM without an epilogue (gemm_lt adds the epilogue's fields).
static inline gemm_key gemm_make_key(const gemm_problem *p) {
    gemm_key key;
    memset(&key, 0, sizeof(key));  // the key is compared with memcmp: padding too
    key.transa = p->transa; key.transb = p->transb;
    key.m = p->m; key.n = p->n; key.k = p->k;
    key.lda = p->a.ld; key.ldb = p->b.ld; key.ldd = p->d.ld;
    key.type_a = p->a.type; key.type_b = p->b.type; key.type_d = p->d.type;
    key.beta_zero = p->beta == 0.0f;
    key.align_a = gemm_alignment(p->a.ptr);
    key.align_b = gemm_alignment(p->b.ptr);
    key.align_d = gemm_alignment(p->d.ptr);
    key.align_c = key.align_d;  // C is D
    return key;
}

// gemm_lt with the addend C read from its own buffer: D = alpha op(A) op(B) + beta C, then the
// epilogue (cuBLASLt applies it to that sum: BIAS gives alpha op(A) op(B) + beta C + bias,
// rounded once into D). C has D's type, shape and leading dimension; C == D is gemm_lt (in
// place), otherwise C must not overlap D (cuBLASLt's out-of-place form, which it supports
// when C and D have the same type and layout). C is read only when beta != 0. Its alignment
// is part of the cache key, as D's is.
static inline cublasStatus_t gemm_lt_c(gemm_cache *c, cudaStream_t stream, const gemm_problem *p,
                                       const void *C, const gemm_epilogue *ep, void *ws, size_t ws_bytes) {
    gemm_key key = gemm_make_key(p);
    key.align_c = gemm_alignment(C);
    key.ws_bytes = ws_bytes;
    key.sm_target = c->sm_target;
    if (ep != NULL && ep->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        const cublasLtEpilogue_t epi = ep->epilogue;
        const int uses_bias = epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        const int uses_aux = epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
                             epi == CUBLASLT_EPILOGUE_DGELU;
        if (!uses_bias && !uses_aux) return CUBLAS_STATUS_INVALID_VALUE;
        if ((uses_bias && ep->bias == NULL) || (uses_aux && ep->aux == NULL))
            return CUBLAS_STATUS_INVALID_VALUE;
        if (uses_bias && !aligned16(ep->bias)) return CUBLAS_STATUS_NOT_SUPPORTED;
        if (uses_aux && (ep->aux_ld < p->m || ep->aux_ld % 8 != 0 || !aligned16(ep->aux)))
            return CUBLAS_STATUS_NOT_SUPPORTED;
        key.epilogue = (int)epi;
        key.uses_bias = uses_bias;
        key.uses_aux = uses_aux;
        if (uses_bias) key.align_bias = gemm_alignment(ep->bias);
        if (uses_aux) {
            key.aux_ld = ep->aux_ld;
            key.align_aux = gemm_alignment(ep->aux);
        }
    }

    gemm_entry *e = NULL, *victim = &c->entries[0];
    for (int i = 0; i < GEMM_CACHE_SIZE; i++) {
        gemm_entry *x = &c->entries[i];
        if (x->used && memcmp(&x->key, &key, sizeof(key)) == 0) { e = x; break; }
        if (!x->used || (victim->used && x->last_use < victim->last_use)) victim = x;
    }
    if (e == NULL) {
        gemm_entry_release(victim);
        int no_algo = 0;
        cublasStatus_t st = gemm_entry_build(c, victim, &key, ep, ws_bytes, &no_algo);
        if (st != CUBLAS_STATUS_SUCCESS || no_algo) {
            gemm_entry_release(victim);
            return st != CUBLAS_STATUS_SUCCESS ? st : CUBLAS_STATUS_NOT_SUPPORTED;
        }
        e = victim;
        if (c->autotune) gemm_entry_tune(c, e, &key, p, ws, ws_bytes, stream);
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
    void *D = (void *)p->d.ptr;
    return cublasLtMatmul(c->handle, e->desc, &p->alpha, p->a.ptr, e->la, p->b.ptr, e->lb, &p->beta,
                          C, e->ld, D, e->ld, &e->algo, ws, ws_bytes, stream);
}

// The GEMM p on stream, followed by the epilogue ep (NULL: none; see gemm_epilogue), with
// cuBLASLt workspace ws of ws_bytes. On failure returns the cuBLAS status:
// CUBLAS_STATUS_NOT_SUPPORTED when no algorithm exists for the shape or the epilogue's
// requirements (aux_ld, pointer alignment) are not met, CUBLAS_STATUS_INVALID_VALUE for an
// unknown epilogue or a missing bias/aux pointer, or whatever cuBLASLt returned.
static inline cublasStatus_t gemm_lt(gemm_cache *c, cudaStream_t stream, const gemm_problem *p,
                                     const gemm_epilogue *ep, void *ws, size_t ws_bytes) {
    return gemm_lt_c(c, stream, p, p->d.ptr, ep, ws, ws_bytes);
}

typedef enum { GEMM_SPLIT_M, GEMM_SPLIT_N, GEMM_SPLIT_K } gemm_split_dim;

// gemm_lt (no epilogue) with dimension dim cut at `at` into two GEMMs: cuBLASLt runs several
// times slower on a whole GEMM whose extent along the vocabulary is not aligned
// (dev/RESULTS.md), so a caller cuts it at an aligned `at` (flce: a multiple of 64) and only
// the remainder goes through a slow kernel. `at` outside (0, extent) runs p whole.
// An m or n cut writes two disjoint parts of D; a k cut adds the second product (beta 1),
// so D should then be fp32 to avoid a second rounding.
static cublasStatus_t gemm_split(gemm_cache *c, cudaStream_t stream, const gemm_problem *p,
                                 gemm_split_dim dim, int64_t at, void *ws, size_t ws_bytes) {
    const int64_t extent = dim == GEMM_SPLIT_M ? p->m : dim == GEMM_SPLIT_N ? p->n : p->k;
    if (at <= 0 || at >= extent) return gemm_lt(c, stream, p, NULL, ws, ws_bytes);
    const size_t ea = gemm_type_size(p->a.type), eb = gemm_type_size(p->b.type),
                 ed = gemm_type_size(p->d.type);
    gemm_problem first = *p, second = *p;
    const char *A2 = (const char *)p->a.ptr, *B2 = (const char *)p->b.ptr, *D2 = (const char *)p->d.ptr;
    if (dim == GEMM_SPLIT_M) {  // rows of op(A) and of D
        first.m = at; second.m = p->m - at;
        A2 += (size_t)(p->transa ? at * p->a.ld : at) * ea;
        D2 += (size_t)at * ed;
    } else if (dim == GEMM_SPLIT_N) {  // columns of op(B) and of D
        first.n = at; second.n = p->n - at;
        B2 += (size_t)(p->transb ? at : at * p->b.ld) * eb;
        D2 += (size_t)at * p->d.ld * ed;
    } else {  // the summed dimension: the second part adds onto the first
        first.k = at; second.k = p->k - at;
        A2 += (size_t)(p->transa ? at : at * p->a.ld) * ea;
        B2 += (size_t)(p->transb ? at * p->b.ld : at) * eb;
        second.beta = 1.0f;
    }
    second.a.ptr = A2;
    second.b.ptr = B2;
    second.d.ptr = D2;
    cublasStatus_t st = gemm_lt(c, stream, &first, NULL, ws, ws_bytes);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    return gemm_lt(c, stream, &second, NULL, ws, ws_bytes);
}

#endif // COMMON_GEMM_LT_CUH
