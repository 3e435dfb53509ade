/*
 * matmul.cuh: the one path every linear layer takes (the four GEMMs of each block and the LM head).
 *
 * A Linear maps x (N, in) to y = x W^T + b, W (out, in) row-major as config.h lays it out. Backward, given
 * dy = dL/dy (N, out):
 *   wgrad  dW += dy^T x     (fp32, accumulated over micro-steps: beta = 1 into the fp32 gradient; beta = 0 on the
 *          first micro-step of an optimizer step, which writes the gradient instead of zeroing it first)
 *   bgrad  db += sum_rows dy: not here, and not cuBLASLt's BGRADB epilogue, which slows the wgrad GEMM by 25-35%;
 *          the caller sums dy where some kernel reads it anyway, or beside the GEMMs with column_sum (a
 *          deterministic pass per row chunk, then the chunks in order)
 *   dgrad  dx  = dy W       (times gelu'(a) when x was gelu(a): the fused DGELU epilogue of fc2's dgrad)
 * The forward of fc fuses the bias and the GELU and keeps the pre-GELU activation a ("aux") for that backward.
 * GELU is the tanh approximation: gelu(a) = a/2 (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))).
 *
 * All GEMMs go through cuBLASLt with fp32 accumulation (CUBLAS_COMPUTE_32F; no TF32, so fp32 mode matches the CPU
 * build). Row-major (N, F) is column-major (F, N), so y^T = W x^T is the column-major product with A = W transposed.
 * Algorithms: cuBLASLt's heuristic ranks candidates by a model, and its first is up to 20% slower than the best of
 * its first eight on some GPT-2 shapes (dev/log/2026-11-22.md). So GEMMs first run during a tuning pass
 * time each candidate and keep the fastest; as algorithms sum in different orders, the choices are saved and a
 * resumed run loads them (llmc/gemm_algos.cuh), so it computes the same bits.
 * A Linear with FP8 state runs its three GEMMs in FP8 (llmc/fp8.cuh casts the operands): forward x (E4M3) W (E4M3),
 * input gradient dy (E5M2) W, weight gradient dy x, each summing in fp32 and scaled by its operands' scale_inv; the
 * callers are the same in every precision. No collective runs here: a linear layer runs through
 * llmc/tensor_parallel.cuh's linear_forward / linear_backward_*, which issue a split layer's collectives around the
 * GEMMs here (one GPU: none); under GTP the caller points the Linear at its gathered weight first.
 */
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include "cuda_common.cuh"
#include "fp8.cuh"

// How a Linear is split over the TP group: column-parallel ranks hold rows of W (output features), row-parallel ranks
// columns (input features; the replicated bias is added by TP rank 0 only). The split and the group are the layer's
// description, which llmc/tensor_parallel.cuh's linear_forward / linear_backward_* read to issue its collectives
// around the GEMMs here; nothing in this file reads them.
typedef enum { LINEAR_WHOLE, LINEAR_COLUMN, LINEAR_ROW } LinearSplit;
typedef struct TensorParallel TensorParallel;

/*
 * A linear layer's FP8 operands (llmc/fp8.cuh), its three tensors fp8_tensor(layer, linear, role): the weight in E4M3
 * and transposed, cast after every update; the input in E4M3, row-major for the forward GEMM (a scratch every layer
 * shares) and transposed for the weight gradient (kept from the forward, or cast again in backward); the output
 * gradient in E5M2, row-major for the input gradient (a shared scratch) and transposed for the weight gradient (from
 * the input gradient's cast until the weight gradient).
 */
typedef struct Fp8Linear {
    Fp8Device *dev;
    int layer, linear;
    uint8_t *w, *w_t;                  // (out, in), (in, out); under GTP a pool buffer's, while its GEMMs are queued
    uint8_t *x, *x_t;                  // (N, in), (in, N)
    uint8_t *dy, *dy_t;                // (N, out), (out, N)
    float *partials;                   // the compute stream's amax-pass scratch (Fp8Device::amax_blocks floats)
    // fc and the fc projection, whose input is the MLP's activation of fc's output (act: config.h's MlpKind, GELU or
    // SwiGLU over its [gate | up] halves): fc casts that input (act_consumer), and the fc projection casts fc's output
    // gradient, its own input gradient through the activation's backward (act_producer), with the column sums that
    // make fc's bias gradient where fc has one (dbias_partials, fp8_col_sums_floats(N, out)). The activation and its
    // backward then cost no pass of their own (cuBLASLt would run gelu' after an FP8 GEMM as a slow one, and SwiGLU's
    // bf16 output would be written only to be read by the cast)
    struct Fp8Linear *act_consumer, *act_producer;
    int act;
    int input_from_producer, grad_from_consumer;
    float *dbias_partials;
    int keeps_input;                   // the forward writes x_t; else it is cast again before the weight gradient
} Fp8Linear;

template <typename T> struct Linear {
    int in, out;  // this rank's features (its slice under TP)
    const T *w;   // (out, in)
    const T *b;   // (out), NULL for no bias
    float *dw;    // (out, in) fp32 gradient
    LinearSplit split;
    TensorParallel *tp; // NULL (or a group of one): no collectives
    Fp8Linear *fp8;     // NULL: the GEMMs run in T
    const char *name;   // for the lines that name its collectives (NULL: unnamed)
};

template <typename T> static int fp8_tensor_of(const Linear<T> &lin, int role) {
    return fp8_tensor(lin.fp8->layer, lin.fp8->linear, role);
}

// ----------------------------------------------------------------------------------------------------------------
// GELU kernels: the recompute of gelu(a) in backward, and the unfused epilogues where cuBLASLt offers no fused one

// out = gelu(a), one thread per pack. Assumes n % Packed<T>::N == 0.
template <typename T> __global__ void __launch_bounds__(256) gelu_forward_kernel(T *out, const T *a, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * Packed<T>::N;
    if (i >= n) { return; }
    Packed<T> x = load_packed(a + i), y;
    for (int j = 0; j < Packed<T>::N; j++) { y.set(j, gelu_of(x[j])); }
    store_packed(out + i, y);
}

// d *= gelu'(a), one thread per pack. Assumes n % Packed<T>::N == 0.
template <typename T> __global__ void __launch_bounds__(256) gelu_backward_kernel(T *d, const T *a, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * Packed<T>::N;
    if (i >= n) { return; }
    Packed<T> x = load_packed(a + i), g = load_packed(d + i);
    for (int j = 0; j < Packed<T>::N; j++) { g.set(j, g[j] * gelu_grad_of(x[j])); }
    store_packed(d + i, g);
}

template <typename T> static void gelu_forward(T *out, const T *a, size_t n, cudaStream_t stream) {
    const int threads = 256;
    gelu_forward_kernel<<<grid_for(n / Packed<T>::N, threads), threads, 0, stream>>>(out, a, n);
    cudaCheckLaunch();
}

// out (rows, cols) += bias per row, one thread per pack: where cuBLASLt has no bias epilogue for a GEMM (FP8 into
// fp32). Assumes cols % Packed<T>::N == 0.
template <typename T>
__global__ void __launch_bounds__(256) add_bias_kernel(T *out, const T *bias, size_t n, int cols) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * Packed<T>::N;
    if (i >= n) { return; }
    Packed<T> y = load_packed(out + i), b = load_packed(bias + i % cols);
    for (int j = 0; j < Packed<T>::N; j++) { y.set(j, y[j] + b[j]); }
    store_packed(out + i, y);
}

// ----------------------------------------------------------------------------------------------------------------
// bias gradient: deterministic column sums

#define COLSUM_PACKS_PER_BLOCK 32
#define COLSUM_ROW_GROUPS 8
#define COLSUM_BLOCKS_PER_SM 4

// grid (column strips of 32 packs, row chunks); block (32 packs, COLSUM_ROW_GROUPS). Group g sums rows g, g + 8, ...
// of the chunk; the groups are added in order. partial[chunk * cols + c]. Assumes cols % Packed<T>::N == 0.
template <typename T>
__global__ void __launch_bounds__(COLSUM_PACKS_PER_BLOCK *COLSUM_ROW_GROUPS)
    column_sum_partial_kernel(float *partial, const T *x, int rows, int cols, int rows_per_chunk) {
    constexpr int PN = Packed<T>::N;
    __shared__ float sums[COLSUM_ROW_GROUPS][COLSUM_PACKS_PER_BLOCK * PN];
    int c = (blockIdx.x * COLSUM_PACKS_PER_BLOCK + threadIdx.x) * PN;
    int r0 = blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
    float acc[PN] = {0.0f};
    if (c < cols) {
#pragma unroll 4 // loads in flight: one 16-byte load per thread per row would leave bandwidth unused
        for (int r = r0 + threadIdx.y; r < r1; r += COLSUM_ROW_GROUPS) {
            Packed<T> v = load_packed(x + (size_t)r * cols + c);
            for (int j = 0; j < PN; j++) { acc[j] += v[j]; }
        }
    }
    for (int j = 0; j < PN; j++) { sums[threadIdx.y][threadIdx.x * PN + j] = acc[j]; }
    __syncthreads();
    if (threadIdx.y != 0 || c >= cols) { return; }
    for (int j = 0; j < PN; j++) {
        float s = 0.0f;
        for (int g = 0; g < COLSUM_ROW_GROUPS; g++) { s += sums[g][threadIdx.x * PN + j]; }
        partial[(size_t)blockIdx.y * cols + c + j] = s;
    }
}

// Row chunks for a column sum: enough blocks to fill the GPU, at least a row group's worth of rows each.
static inline int column_sum_chunks(int rows, int strips) {
    int want = g_cuda.props.multiProcessorCount * COLSUM_BLOCKS_PER_SM / strips;
    int most = ceil_div_int(rows, COLSUM_ROW_GROUPS);
    return want < 1 ? 1 : (want > most ? most : want);
}

// Floats of scratch column_sum needs for `out` columns, an upper bound over row counts
// and types: chunks x out, where chunks <= SMs x COLSUM_BLOCKS_PER_SM / strips and a strip spans at most
// COLSUM_PACKS_PER_BLOCK packs of 8, or one chunk when there are more strips than that.
static inline size_t column_sum_scratch_floats(int out) {
    size_t fill = (size_t)g_cuda.props.multiProcessorCount * COLSUM_BLOCKS_PER_SM * COLSUM_PACKS_PER_BLOCK * 8;
    return fill > (size_t)out ? fill : (size_t)out;
}

// dst[c] += sum_r x[r, c] (dst[c] = ... when not accumulate).
template <typename T>
static void column_sum(float *dst, float *scratch, const T *x, int rows, int cols, int accumulate,
                       cudaStream_t stream) {
    int strips = ceil_div_int(cols, COLSUM_PACKS_PER_BLOCK * Packed<T>::N);
    int chunks = column_sum_chunks(rows, strips);
    int rows_per_chunk = ceil_div_int(rows, chunks);
    chunks = ceil_div_int(rows, rows_per_chunk);
    column_sum_partial_kernel<<<dim3(strips, chunks), dim3(COLSUM_PACKS_PER_BLOCK, COLSUM_ROW_GROUPS), 0, stream>>>(
        scratch, x, rows, cols, rows_per_chunk);
    cudaCheckLaunch();
    PartialSumDsts dsts = {{dst}};
    add_partial_sums(dsts, 1, scratch, chunks, cols, cols, accumulate, stream);
}

// ----------------------------------------------------------------------------------------------------------------
// cuBLASLt

// Largest power of two (<= 256) dividing the address: the alignment cuBLASLt may assume.
static inline uint32_t pointer_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t align = 256;
    while (align > 1 && a % align != 0) { align /= 2; }
    return align;
}

/*
 * One operand of a GEMM, as TransformerEngine's tensors describe one: the matrix as the product is written (ptr), its
 * element type, and for FP8 the device pointer to its scale_inv (the GEMM multiplies its sum by both operands') and a
 * transposed copy: Hopper's FP8 GEMMs read only K-major operands ("TN"), so where the product needs the other layout
 * gemm_lt reads ptr_t (the matrix transposed, its leading dimension the product's k) instead.
 */
typedef struct {
    const void *ptr;        // NULL where only the transposed copy exists
    const void *ptr_t;      // FP8: the transposed copy, or NULL
    cudaDataType_t type;
    const float *scale_inv; // FP8: on the device; NULL otherwise
} GemmOperand;

static GemmOperand gemm_operand(const void *ptr, cudaDataType_t type) {
    GemmOperand o = {ptr, NULL, type, NULL};
    return o;
}

static bool type_is_fp8(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

typedef struct {
    cublasLtEpilogue_t epilogue;
    const void *bias; // BIAS / GELU_AUX_BIAS (read), of D's type
    void *aux;        // GELU_AUX_BIAS (written) / DGELU (read); same shape and type as D
} GemmEpilogue;

static const GemmEpilogue GEMM_PLAIN = {CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL};

/*
 * A GEMM configuration's cuBLASLt objects and its algorithm, made once: the heuristic query costs tens of
 * microseconds of host time, about what a small GEMM takes on the GPU, so asking per call would leave the GPU
 * waiting for the host.
 */
#define GEMM_CANDIDATES 8 // the heuristic's best-ranked algorithms a tuning pass times
#define GEMM_TUNE_REPS 5  // timed runs per candidate, after one untimed
typedef struct {
    int m, n, k, transa, transb, lda, ldb;
    cudaDataType_t at, bt, dt; // A, B, and C = D (and the bias)
    cublasLtEpilogue_t epilogue;
    uint32_t align_a, align_b, align_d;
    int has_bias, has_aux;
    int fast_accum; // FP8: cuBLASLt's fast accumulation (no periodic promotion of the partial sums to fp32)
    // made from the above
    int found; // 0: cuBLASLt has no algorithm for it
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    int chosen;     // algo was timed or loaded (and goes into the saved choices); else it is the heuristic's first
    int candidates; // > 0: to be timed at the first call, candidate[0 .. candidates)
    cublasLtMatmulAlgo_t candidate[GEMM_CANDIDATES];
} GemmPlan;

#define GEMM_PLANS_MAX 256 // distinct configurations; a model uses a few dozen
static GemmPlan g_gemm_plans[GEMM_PLANS_MAX];
static int g_num_gemm_plans = 0;
static int g_gemm_tuning = 0; // plans made while set time their candidates (gemm_tuning)

// Choices loaded from a previous run (llmc/gemm_algos.cuh: gemm_algos_load): a plan's key as text and its algorithm.
#define GEMM_KEY_CHARS 160
typedef struct {
    char key[GEMM_KEY_CHARS];
    cublasLtMatmulAlgo_t algo;
} GemmChoice;
static GemmChoice g_gemm_loaded[GEMM_PLANS_MAX];
static int g_num_gemm_loaded = 0;

static int gemm_plan_matches(const GemmPlan *a, const GemmPlan *b) {
    return a->m == b->m && a->n == b->n && a->k == b->k && a->transa == b->transa && a->transb == b->transb &&
           a->lda == b->lda && a->ldb == b->ldb && a->at == b->at && a->bt == b->bt && a->dt == b->dt &&
           a->epilogue == b->epilogue && a->align_a == b->align_a && a->align_b == b->align_b &&
           a->align_d == b->align_d && a->has_bias == b->has_bias && a->has_aux == b->has_aux &&
           a->fast_accum == b->fast_accum;
}

// The plan's key as text, for the saved choices: GEMMs of one type for A and B (and no fast accumulation) keep the
// key of the files written before operands had types of their own, so those still resume exactly.
static void gemm_plan_key(const GemmPlan *p, char *out) {
    char types[48];
    if (p->at == p->bt && !p->fast_accum) {
        snprintf(types, sizeof(types), "ab%d", (int)p->at);
    } else {
        snprintf(types, sizeof(types), "a%d,b%d fa%d", (int)p->at, (int)p->bt, p->fast_accum);
    }
    snprintf(out, GEMM_KEY_CHARS, "m%d n%d k%d t%d%d ld%d,%d %s d%d e%d al%u,%u,%u b%d x%d", p->m, p->n, p->k,
             p->transa, p->transb, p->lda, p->ldb, types, (int)p->dt, (int)p->epilogue, p->align_a, p->align_b,
             p->align_d, p->has_bias, p->has_aux);
}

// Plans made from now until gemm_tuning(0) time the heuristic's candidates at their first call, on its operands.
// The timed runs overwrite D (or add to it: beta = 1), so the caller's pass must be one whose results it discards.
static void gemm_tuning(int on) { g_gemm_tuning = on; }

static void gemm_plan_make(GemmPlan *p) {
    cublasOperation_t opa = p->transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p->epilogue,
                                               sizeof(p->epilogue)));
    if (p->has_aux) {
        int64_t ldaux = p->m;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux,
                                                   sizeof(ldaux)));
    }
    if (type_is_fp8(p->at)) {
        // the bias of an FP8 GEMM is read as D's type (cuBLASLt's default for it is not D's)
        int8_t fast = (int8_t)p->fast_accum;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
        if (p->has_bias) {
            cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &p->dt,
                                                       sizeof(p->dt)));
        }
    }
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, p->at, p->transa ? p->k : p->m, p->transa ? p->m : p->k, p->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, p->bt, p->transb ? p->n : p->k, p->transb ? p->k : p->n, p->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->ld, p->dt, p->m, p->n, p->m));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = CUBLASLT_WORKSPACE_BYTES;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->align_a, 4));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->align_b, 4));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->align_d, 4));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->align_d, 4));
    cublasLtMatmulHeuristicResult_t heur[GEMM_CANDIDATES];
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_cuda.lt, p->desc, p->la, p->lb, p->ld, p->ld, pref,
                                                       GEMM_CANDIDATES, heur, &found);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    p->found = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (!p->found) { return; }
    p->algo = heur[0].algo;
    char key[GEMM_KEY_CHARS];
    gemm_plan_key(p, key);
    for (int i = 0; i < g_num_gemm_loaded; i++) {
        if (strcmp(g_gemm_loaded[i].key, key) != 0) { continue; }
        p->algo = g_gemm_loaded[i].algo;
        p->chosen = 1;
        cublasLtMatmulHeuristicResult_t check;
        if (cublasLtMatmulAlgoCheck(g_cuda.lt, p->desc, p->la, p->lb, p->ld, p->ld, &p->algo, &check) !=
            CUBLAS_STATUS_SUCCESS) {
            fail("a saved GEMM algorithm (%s) does not run here: the run was started with another cuBLAS or GPU", key);
        }
        return;
    }
    if (g_gemm_tuning) {
        p->candidates = found;
        for (int i = 0; i < found; i++) { p->candidate[i] = heur[i].algo; }
    }
}

static cublasStatus_t gemm_run(const GemmPlan *p, const cublasLtMatmulAlgo_t *algo, void *d, const void *a,
                               const void *b, float beta, cudaStream_t stream) {
    float alpha = 1.0f;
    return cublasLtMatmul(g_cuda.lt, p->desc, &alpha, a, p->la, b, p->lb, &beta, d, p->ld, d, p->ld, algo,
                          g_cuda.lt_workspace, CUBLASLT_WORKSPACE_BYTES, stream);
}

// Times every candidate on these operands (the mean of GEMM_TUNE_REPS runs) and keeps the fastest. A candidate
// that refuses to run (some need more workspace than the heuristic promised) is passed over.
static void gemm_plan_tune(GemmPlan *p, void *d, const void *a, const void *b, float beta, cudaStream_t stream) {
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    float best = INFINITY;
    for (int i = 0; i < p->candidates; i++) {
        if (gemm_run(p, &p->candidate[i], d, a, b, beta, stream) != CUBLAS_STATUS_SUCCESS) { continue; }
        cudaCheck(cudaEventRecord(start, stream));
        for (int r = 0; r < GEMM_TUNE_REPS; r++) { cublasCheck(gemm_run(p, &p->candidate[i], d, a, b, beta, stream)); }
        cudaCheck(cudaEventRecord(stop, stream));
        cudaCheck(cudaEventSynchronize(stop));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, start, stop));
        if (ms < best) {
            best = ms;
            p->algo = p->candidate[i];
        }
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    p->candidates = 0;
    p->chosen = 1;
}

/*
 * Column-major D (m x n, ld m) = op(A) op(B) + beta D, op(A) m x k, op(B) k x n; A stored k x m when transa,
 * B stored n x k when transb; D of type dt, fp32 accumulation. FP8 operands are read K-major (A transposed, B not:
 * their transposed copies where the product as written says otherwise), their sum scaled by both scale_inv's;
 * fast_accum applies to FP8 only. Returns 0 (and does nothing) when cuBLASLt has no algorithm for this epilogue, so
 * the caller can run it unfused.
 */
static int gemm_lt(void *d, cudaDataType_t dt, GemmOperand a, int transa, int lda, GemmOperand b, int transb, int ldb,
                   int m, int n, int k, float beta, GemmEpilogue ep, int fast_accum, cudaStream_t stream) {
    if (type_is_fp8(a.type) && !transa) {
        a.ptr = a.ptr_t;
        transa = 1;
        lda = k;
    }
    if (type_is_fp8(b.type) && transb) {
        b.ptr = b.ptr_t;
        transb = 0;
        ldb = k;
    }
    if (!a.ptr || !b.ptr) { fail("an FP8 GEMM operand lacks the K-major copy Hopper's FP8 GEMMs read"); }
    if (type_is_fp8(a.type) && (pointer_alignment(a.scale_inv) < 16 || pointer_alignment(b.scale_inv) < 16)) {
        fail("an FP8 GEMM's scale_inv is not 16-byte aligned, which cuBLASLt requires (llmc/fp8.cuh: fp8_scale_inv)");
    }
    GemmPlan key;
    memset(&key, 0, sizeof(key));
    key.m = m; key.n = n; key.k = k; key.transa = transa; key.transb = transb; key.lda = lda; key.ldb = ldb;
    key.at = a.type; key.bt = b.type; key.dt = dt; key.epilogue = ep.epilogue;
    key.align_a = pointer_alignment(a.ptr); key.align_b = pointer_alignment(b.ptr); key.align_d = pointer_alignment(d);
    key.has_bias = ep.bias != NULL; key.has_aux = ep.aux != NULL;
    key.fast_accum = type_is_fp8(a.type) && fast_accum;
    GemmPlan *plan = NULL;
    for (int i = 0; i < g_num_gemm_plans && !plan; i++) {
        if (gemm_plan_matches(&g_gemm_plans[i], &key)) { plan = &g_gemm_plans[i]; }
    }
    if (!plan) {
        if (g_num_gemm_plans == GEMM_PLANS_MAX) {
            fail("more than %d distinct GEMM shapes; raise GEMM_PLANS_MAX in llmc/matmul.cuh", GEMM_PLANS_MAX);
        }
        plan = &g_gemm_plans[g_num_gemm_plans++];
        *plan = key;
        gemm_plan_make(plan);
    }
    if (!plan->found) {
        if (ep.epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
            fail("cuBLASLt has no algorithm for a %dx%dx%d GEMM; check the CUDA/cuBLAS install", m, n, k);
        }
        return 0;
    }
    if (ep.bias) {
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ep.bias,
                                                   sizeof(ep.bias)));
    }
    if (ep.aux) {
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep.aux,
                                                   sizeof(ep.aux)));
    }
    if (type_is_fp8(a.type)) {
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a.scale_inv,
                                                   sizeof(a.scale_inv)));
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b.scale_inv,
                                                   sizeof(b.scale_inv)));
    }
    if (plan->candidates > 0) { gemm_plan_tune(plan, d, a.ptr, b.ptr, beta, stream); }
    cublasStatus_t st = gemm_run(plan, &plan->algo, d, a.ptr, b.ptr, beta, stream);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED && ep.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        // the heuristic offered an algorithm that then refuses these operands (FP8 with some epilogues): unfused
        plan->found = 0;
        plan->chosen = 0;
        return 0;
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
        char key[GEMM_KEY_CHARS];
        gemm_plan_key(plan, key);
        fail("cuBLAS error %d running a GEMM (%s); the shape or the cuBLASLt version is not supported", (int)st, key);
    }
    return 1;
}

// ----------------------------------------------------------------------------------------------------------------
// the linear layer

// out (n, lin.out) = x w^T + bias (bias may be NULL), fused where cuBLASLt can.
template <typename T>
static void linear_gemm_bias(const Linear<T> &lin, T *out, GemmOperand w, GemmOperand x, const T *bias, int n,
                             int fast_accum, cudaStream_t stream) {
    cudaDataType_t t = TypeInfo<T>::cuda;
    GemmEpilogue ep = {bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL};
    if (gemm_lt(out, t, w, 1, lin.in, x, 0, lin.in, lin.out, n, lin.in, 0.0f, ep, fast_accum, stream)) { return; }
    gemm_lt(out, t, w, 1, lin.in, x, 0, lin.in, lin.out, n, lin.in, 0.0f, GEMM_PLAIN, fast_accum, stream);
    size_t count = (size_t)n * lin.out;
    add_bias_kernel<<<grid_for(count / Packed<T>::N, 256), 256, 0, stream>>>(out, bias, count, lin.out);
    cudaCheckLaunch();
}

// The MLP activation's output features from fc's (MlpKind): SwiGLU's are half ([gate | up] make one).
static int mlp_act_features(int act, int fc_out) { return act == MLP_SWIGLU ? fc_out / 2 : fc_out; }

/*
 * The FP8 forward of a block of rows [row, row + rows) of the layer's N, in parts that SP's ring can move the codes
 * between (llmc/tensor_parallel.cuh: each rank casts its own rows, the ring gathers their codes):
 *   fp8_linear_cast_input: the input's rows (inp at the block's first row, wherever its rows are) cast to E4M3,
 *     row-major into the layer's codes q->x at those rows, and (with kept) into the kept transposed copy at the rows'
 *     columns; without, the codes alone, which is all a transfer waits for (SP's ring sends them first).
 *   fp8_linear_keep_input: the kept transposed copy's columns of a block whose codes x came from elsewhere (they are
 *     the bytes fp8_linear_cast_input would have written there).
 *   fp8_linear_rows_gemm: the GEMM on the block's codes x (wherever they are: SP's ring reads a peer's where they
 *     landed); fc (act_consumer) then casts the activation of its output as the fc projection's input: with gelu_aux
 *     (GELU) the GEMM writes the pre-GELU activation there and out is not written; SwiGLU's GEMM writes out (fch),
 *     which its backward reads.
 *   fp8_linear_rows_forward: the cast (unless fc cast the input already: input_from_producer), then the GEMM.
 */
template <typename T>
static void fp8_linear_cast_input(const Linear<T> &lin, const T *inp, int row, int rows, int N, bool kept,
                                  cudaStream_t stream) {
    const Fp8Linear *q = lin.fp8;
    Fp8CastOut o = {q->x + (size_t)row * lin.in, kept && q->keeps_input ? q->x_t : NULL, N, row, NULL};
    fp8_cast(q->dev, fp8_tensor_of(lin, FP8_INPUT), Fp8Plain<T>{inp}, rows, lin.in, o, q->dev->recording,
             FP8_SCALE_RECIPE, q->partials, stream);
}

// Whether a layer's forward may take its codes from elsewhere (fp8_linear_keep_input, fp8_linear_rows_gemm): it
// casts its own input, not fc's activation, and keeps the transposed copy, which the weight gradient reads.
static bool fp8_input_as_codes(const Fp8Linear *q) { return q && !q->input_from_producer && q->keeps_input; }

template <typename T>
static void fp8_linear_keep_input(const Linear<T> &lin, const uint8_t *x, int row, int rows, int N,
                                  cudaStream_t stream) {
    fp8_transpose(x, lin.fp8->x_t, rows, lin.in, N, row, stream);
}

template <typename T>
static void fp8_linear_rows_gemm(const Linear<T> &lin, const T *bias, T *out, const uint8_t *x, T *gelu_aux, int row,
                                 int rows, int N, cudaStream_t stream) {
    const Fp8Linear *q = lin.fp8;
    const Fp8Device *d = q->dev;
    size_t r0 = (size_t)row;
    int tx = fp8_tensor_of(lin, FP8_INPUT), tw = fp8_tensor_of(lin, FP8_WEIGHT);
    GemmOperand w = {q->w, q->w_t, CUDA_R_8F_E4M3, fp8_scale_inv(d, tw)};
    GemmOperand xo = {x, NULL, CUDA_R_8F_E4M3, fp8_scale_inv(d, tx)};
    T *y = (gelu_aux ? gelu_aux : out) + r0 * lin.out;
    linear_gemm_bias(lin, y, w, xo, bias, rows, d->recipe.fast_accum, stream);
    if (q->act_consumer) {
        const Fp8Linear *c = q->act_consumer;
        int F = mlp_act_features(q->act, lin.out), tc = fp8_tensor(c->layer, c->linear, FP8_INPUT);
        Fp8CastOut o = {c->x + r0 * F, c->keeps_input ? c->x_t : NULL, N, row, NULL};
        if (q->act == MLP_SWIGLU) {
            fp8_cast(d, tc, Fp8SwigluOf<T>{y, F}, rows, F, o, d->recording, FP8_SCALE_RECIPE, q->partials, stream);
        } else {
            fp8_cast(d, tc, Fp8GeluOf<T>{y}, rows, F, o, d->recording, FP8_SCALE_RECIPE, q->partials, stream);
        }
    }
}

template <typename T>
static void fp8_linear_rows_forward(const Linear<T> &lin, const T *bias, T *out, const T *inp, T *gelu_aux,
                                    int row, int rows, int N, cudaStream_t stream) {
    if (!lin.fp8->input_from_producer) { fp8_linear_cast_input(lin, inp, row, rows, N, true, stream); }
    fp8_linear_rows_gemm(lin, bias, out, lin.fp8->x + (size_t)row * lin.in, gelu_aux, row, rows, N, stream);
}

// Rows [r0, r1) of the N rows of out = inp W^T + bias (bias may be NULL), inp pointing at row r0's input (the block's
// rows, wherever they are); with gelu_aux: gelu_aux = that, and out = gelu(that) (but in FP8: fp8_linear_rows_forward).
template <typename T>
static void linear_rows_forward(const Linear<T> &lin, const T *bias, T *out, const T *inp, int r0, int r1, int N,
                                T *gelu_aux, cudaStream_t stream) {
    if (lin.fp8) {
        fp8_linear_rows_forward(lin, bias, out, inp, gelu_aux, r0, r1 - r0, N, stream);
        return;
    }
    cudaDataType_t t = TypeInfo<T>::cuda;
    int n = r1 - r0;
    if (n <= 0) { return; }
    out += (size_t)r0 * lin.out;
    GemmOperand w = gemm_operand(lin.w, t), x = gemm_operand(inp, t);
    if (gelu_aux) {
        gelu_aux += (size_t)r0 * lin.out;
        GemmEpilogue gelu = {bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, bias, gelu_aux};
        if (gemm_lt(out, t, w, 1, lin.in, x, 0, lin.in, lin.out, n, lin.in, 0.0f, gelu, 0, stream)) { return; }
        linear_gemm_bias(lin, gelu_aux, w, x, bias, n, 0, stream);
        gelu_forward(out, gelu_aux, (size_t)n * lin.out, stream);
        return;
    }
    linear_gemm_bias(lin, out, w, x, bias, n, 0, stream);
}

// The columns of a row of act_aux, the activation's input that the fc projection's input gradient reads (fc's output):
// as many as the projection's inputs, or twice as many under SwiGLU, whose [gate | up] make one (in FP8 only: a bf16
// SwiGLU block runs swiglu_backward itself). A block of rows' act_aux starts that many elements a row further in.
template <typename T> static int linear_act_aux_cols(const Linear<T> &lin) {
    const Fp8Linear *p = lin.fp8 ? lin.fp8->act_producer : NULL;
    return p && p->act == MLP_SWIGLU ? 2 * lin.in : lin.in;
}

/*
 * In FP8: dout cast first (for this GEMM, and transposed for the weight gradient), unless the layer above cast it
 * (fc: grad_from_consumer); the product, and for the fc projection (act_aux: fc's output, the activation's input) the
 * activation's backward of it cast as fc's output gradient (gelu', with the column sums of fc's bias gradient; or
 * SwiGLU's [dgate | dup], twice as wide): dinp holds the product, the gradient of the activation's output.
 * dinp, dout and act_aux point at a block of `rows` rows that starts at row `row` of the layer's N: the codes land
 * at those rows (and columns of the transposed copies, and tiles of the column sums: row % FP8_TILE_ROWS == 0), so
 * that blocks cast one after another (SP's ring, llmc/tensor_parallel.cuh) leave what one cast of all N leaves, given
 * scales from the history (a block's own amax would scale it apart from the others: fp8_dgrad_by_rows).
 */
template <typename T>
static void fp8_linear_dgrad(const Linear<T> &lin, T *dinp, const T *dout, const T *act_aux, int rows, int row, int N,
                             cudaStream_t stream) {
    const Fp8Linear *q = lin.fp8;
    const Fp8Device *d = q->dev;
    if (rows < N && (fp8_scales_current(d) || row % FP8_TILE_ROWS != 0)) {
        fail("fp8_linear_dgrad: rows [%d, %d) of %d cast alone (needs scales from the history and a first row that is "
             "a multiple of %d)", row, row + rows, N, FP8_TILE_ROWS);
    }
    int tg = fp8_tensor_of(lin, FP8_GRAD), tw = fp8_tensor_of(lin, FP8_WEIGHT);
    size_t r0 = (size_t)row;
    if (!q->grad_from_consumer) {
        Fp8CastOut o = {q->dy + r0 * lin.out, q->dy_t, N, row, NULL};
        fp8_cast(d, tg, Fp8Plain<T>{dout}, rows, lin.out, o, d->recording, FP8_SCALE_RECIPE, q->partials, stream);
    }
    GemmOperand w = {q->w, q->w_t, CUDA_R_8F_E4M3, fp8_scale_inv(d, tw)};
    GemmOperand dy = {q->dy + r0 * lin.out, NULL, CUDA_R_8F_E5M2, fp8_scale_inv(d, tg)};
    gemm_lt(dinp, TypeInfo<T>::cuda, w, 0, lin.in, dy, 0, lin.out, lin.in, rows, lin.out, 0.0f, GEMM_PLAIN, 0, stream);
    if (act_aux) {
        const Fp8Linear *p = q->act_producer;
        int F = linear_act_aux_cols(lin); // fc's output gradient: [dgate | dup], or d fch
        float *sums = p->dbias_partials ? p->dbias_partials + (size_t)(row / FP8_TILE_ROWS) * F : (float *)NULL;
        Fp8CastOut o = {p->dy + r0 * F, p->dy_t, N, row, sums};
        int tdfch = fp8_tensor(p->layer, p->linear, FP8_GRAD);
        if (p->act == MLP_SWIGLU) {
            fp8_cast(d, tdfch, Fp8DswigluOf<T>{dinp, act_aux, lin.in}, rows, F, o, d->recording, FP8_SCALE_RECIPE,
                     q->partials, stream);
        } else {
            fp8_cast(d, tdfch, Fp8DgeluOf<T>{dinp, act_aux}, rows, F, o, d->recording, FP8_SCALE_RECIPE, q->partials,
                     stream);
        }
    }
}

// Whether an FP8 layer's input gradient may run a block of rows at a time (fp8_linear_dgrad): scales from the
// history, and blocks of whole cast tiles.
static bool fp8_dgrad_by_rows(const Fp8Device *d, int block_rows) {
    return !fp8_scales_current(d) && block_rows % FP8_TILE_ROWS == 0;
}

/*
 * dinp = dout W, times gelu'(gelu_aux) when that is given (in FP8: fp8_linear_dgrad, gelu_aux the activation's
 * input), for `rows` rows; the pointers at the block's first row. In FP8 the block is rows [row, row + rows) of the
 * layer's `of` rows, where the codes are kept (a whole tensor: the defaults).
 */
template <typename T>
static void linear_dgrad(const Linear<T> &lin, T *dinp, const T *dout, const T *gelu_aux, int rows, cudaStream_t stream,
                         int row = 0, int of = 0) {
    if (lin.fp8) {
        fp8_linear_dgrad(lin, dinp, dout, gelu_aux, rows, row, of > 0 ? of : rows, stream);
        return;
    }
    cudaDataType_t t = TypeInfo<T>::cuda;
    GemmOperand w = gemm_operand(lin.w, t), dy = gemm_operand(dout, t);
    if (gelu_aux) {
        GemmEpilogue dgelu = {CUBLASLT_EPILOGUE_DGELU, NULL, (void *)gelu_aux};
        if (gemm_lt(dinp, t, w, 0, lin.in, dy, 0, lin.out, lin.in, rows, lin.out, 0.0f, dgelu, 0, stream)) { return; }
    }
    gemm_lt(dinp, t, w, 0, lin.in, dy, 0, lin.out, lin.in, rows, lin.out, 0.0f, GEMM_PLAIN, 0, stream);
    if (gelu_aux) {
        const int threads = 256;
        size_t n = (size_t)rows * lin.in;
        gelu_backward_kernel<<<grid_for(n / Packed<T>::N, threads), threads, 0, stream>>>(dinp, gelu_aux, n);
        cudaCheckLaunch();
    }
}

// lin.dw += dout^T inp (written rather than added to when not accumulate): the part of a linear layer's backward
// that no collective touches (the other parts: llmc/tensor_parallel.cuh, linear_backward_*).
template <typename T>
static void linear_backward_weight(const Linear<T> &lin, const T *dout, const T *inp, int N, int accumulate,
                                   cudaStream_t stream) {
    cudaDataType_t t = TypeInfo<T>::cuda;
    GemmOperand x = gemm_operand(inp, t), dy = gemm_operand(dout, t);
    if (lin.fp8) { // the transposed copies: the input's from the forward (or cast again), dout's from its cast
        const Fp8Linear *q = lin.fp8;
        x = {NULL, q->x_t, CUDA_R_8F_E4M3, fp8_scale_inv(q->dev, fp8_tensor_of(lin, FP8_INPUT))};
        dy = {NULL, q->dy_t, CUDA_R_8F_E5M2, fp8_scale_inv(q->dev, fp8_tensor_of(lin, FP8_GRAD))};
    }
    gemm_lt(lin.dw, CUDA_R_32F, x, 0, lin.in, dy, 1, lin.out, lin.in, lin.out, N, accumulate ? 1.0f : 0.0f,
            GEMM_PLAIN, 0, stream);
}

#endif // LLMC_MATMUL_CUH
