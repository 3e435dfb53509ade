/*
 * bench_gemm.cu: every GEMM of a GPT-2 training step (forward, weight gradient, input gradient of the four block
 * linears and the LM head, with the epilogues llmc/matmul.cuh uses), each timed with every algorithm cuBLASLt's
 * heuristic offers (up to GEMM_CANDIDATES), so the heuristic's first choice can be compared with the best.
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -I. dev/bench_gemm.cu -o dev/bench_gemm -lcublasLt
 *   dev/bench_gemm C N [C N ...]      e.g. dev/bench_gemm 768 32768 1600 8192
 *
 * One line per GEMM: TFLOP/s of the heuristic's first algorithm, of the best one and which it is, and the
 * configuration (tile, stages, split-K, cluster) of both. Inputs are random bf16 (never zeros: see METHOD.md).
 */
#include <algorithm>
#include <vector>

#include "llmc/cuda_common.cuh"

#define GEMM_CANDIDATES 16
#define WARMUP 3
#define REPS 15
#define VOCAB_PADDED 50304

__global__ void fill_random(bf16 *x, size_t n, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    x[i] = __float2bfloat16((h & 0xffff) / 65536.0f - 0.5f);
}

static int algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint32_t v = 0; // every attribute read here fits 32 bits
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) { return -1; }
    return (int)v;
}

static void describe(char *out, size_t n, const cublasLtMatmulAlgo_t *a) {
    snprintf(out, n, "id%d tile%d st%d sk%d red%d swz%d cl%d", algo_attr(a, CUBLASLT_ALGO_CONFIG_ID),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID), algo_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), algo_attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), algo_attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
}

// D (m x n, col-major) = op(A) op(B) [+ beta D], as llmc/matmul.cuh's gemm_lt calls it.
static void bench(const char *name, int m, int n, int k, int transa, int transb, int lda, int ldb,
                  cudaDataType_t dt, float beta, cublasLtEpilogue_t epi, void *bias, void *aux, bf16 *A, bf16 *B,
                  void *D) {
    cublasLtMatmulDesc_t desc;
    cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (bias) { cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias))); }
    if (aux) {
        int64_t ld = m;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    cublasLtMatrixLayout_t la, lb, ld;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, transa ? k : m, transa ? m : k, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, transb ? n : k, transb ? k : n, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, dt, m, n, m));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = CUBLASLT_WORKSPACE_BYTES;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t heur[GEMM_CANDIDATES];
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(g_cuda.lt, desc, la, lb, ld, ld, pref, GEMM_CANDIDATES, heur, &found);
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    float alpha = 1.0f;
    double flops = 2.0 * m * n * k, first = 0, best = 0;
    int best_i = -1;
    for (int i = 0; i < found; i++) {
        std::vector<float> t;
        bool ok = true;
        for (int r = 0; r < WARMUP + REPS && ok; r++) {
            cudaCheck(cudaEventRecord(e0, g_cuda.stream));
            ok = cublasLtMatmul(g_cuda.lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &heur[i].algo,
                                g_cuda.lt_workspace, ws, g_cuda.stream) == CUBLAS_STATUS_SUCCESS;
            cudaCheck(cudaEventRecord(e1, g_cuda.stream));
            cudaCheck(cudaEventSynchronize(e1));
            float ms;
            cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= WARMUP) { t.push_back(ms); }
        }
        if (!ok) { continue; }
        std::sort(t.begin(), t.end());
        double tf = flops / (t[t.size() / 2] * 1e-3) / 1e12;
        if (i == 0) { first = tf; }
        if (tf > best) { best = tf; best_i = i; }
    }
    char d0[128] = "-", db[128] = "-";
    if (found > 0) { describe(d0, sizeof(d0), &heur[0].algo); }
    if (best_i >= 0) { describe(db, sizeof(db), &heur[best_i].algo); }
    printf("%-14s %6d %6d %6d  %2d algos  first %6.1f  best %6.1f (#%d)  [%s] -> [%s]\n", name, m, n, k, found,
           first, best, best_i, d0, db);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
}

int main(int argc, char **argv) {
    cuda_context_init();
    for (int a = 1; a + 1 < argc; a += 2) {
        int C = atoi(argv[a]), N = atoi(argv[a + 1]);
        size_t big = (size_t)N * std::max(4 * C, VOCAB_PADDED);
        bf16 *x = (bf16 *)cuda_alloc(big * sizeof(bf16), "x"), *dy = (bf16 *)cuda_alloc(big * sizeof(bf16), "dy");
        bf16 *w = (bf16 *)cuda_alloc((size_t)VOCAB_PADDED * C * sizeof(bf16), "w");
        bf16 *y = (bf16 *)cuda_alloc(big * sizeof(bf16), "y"), *aux = (bf16 *)cuda_alloc(big * sizeof(bf16), "aux");
        float *dw = (float *)cuda_alloc((size_t)VOCAB_PADDED * C * sizeof(float), "dw");
        float *db = (float *)cuda_alloc((size_t)VOCAB_PADDED * sizeof(float), "db");
        for (bf16 *p : {x, dy, y, aux}) { fill_random<<<grid_for(big, 256), 256, 0, g_cuda.stream>>>(p, big, 1); }
        fill_random<<<grid_for((size_t)VOCAB_PADDED * C, 256), 256, 0, g_cuda.stream>>>(w, (size_t)VOCAB_PADDED * C, 2);
        cudaCheck(cudaMemsetAsync(dw, 0, (size_t)VOCAB_PADDED * C * sizeof(float), g_cuda.stream));
        printf("== C %d, N %d\n", C, N);
        struct { const char *name; int in, out, bias, gelu; } lins[] = {
            {"qkv", C, 3 * C, 1, 0}, {"attproj", C, C, 1, 0}, {"fc", C, 4 * C, 1, 1}, {"fcproj", 4 * C, C, 1, 0},
            {"lmhead", C, VOCAB_PADDED, 0, 0}};
        for (auto &l : lins) {
            char nm[64];
            snprintf(nm, sizeof(nm), "%s fwd", l.name);
            cublasLtEpilogue_t fe = l.gelu ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                           : (l.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
            bench(nm, l.out, N, l.in, 1, 0, l.in, l.in, CUDA_R_16BF, 0.0f, fe, l.bias ? (void *)w : NULL,
                  l.gelu ? (void *)aux : NULL, w, x, y);
            if (l.gelu) { // the same with the weight stored transposed ([in, out]): which kernels the epilogue gets
                bench("fc fwd wT", l.out, N, l.in, 0, 0, l.out, l.in, CUDA_R_16BF, 0.0f, fe, w, aux, w, x, y);
            }
            snprintf(nm, sizeof(nm), "%s wgrad", l.name);
            bench(nm, l.in, l.out, N, 0, 1, l.in, l.out, CUDA_R_32F, 1.0f,
                  l.bias ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT, l.bias ? (void *)db : NULL, NULL, x,
                  dy, dw);
            snprintf(nm, sizeof(nm), "%s wgrad-nb", l.name);
            if (l.bias) {
                bench(nm, l.in, l.out, N, 0, 1, l.in, l.out, CUDA_R_32F, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL,
                      x, dy, dw);
            }
            snprintf(nm, sizeof(nm), "%s dgrad", l.name);
            bench(nm, l.in, N, l.out, 0, 0, l.in, l.out, CUDA_R_16BF, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, w,
                  dy, y);
            if (l.name[2] == 'p') { // fcproj: its dgrad carries gelu' of fc's pre-activation
                bench("fcproj dgelu", l.in, N, l.out, 0, 0, l.in, l.out, CUDA_R_16BF, 0.0f, CUBLASLT_EPILOGUE_DGELU,
                      NULL, aux, w, dy, y);
                bench("fcproj dgelub", l.in, N, l.out, 0, 0, l.in, l.out, CUDA_R_16BF, 0.0f,
                      CUBLASLT_EPILOGUE_DGELU_BGRAD, db, aux, w, dy, y);
                bench("fcproj dgelu wT", l.in, N, l.out, 1, 0, l.out, l.out, CUDA_R_16BF, 0.0f,
                      CUBLASLT_EPILOGUE_DGELU, NULL, aux, w, dy, y);
            }
        }
        for (void *p : {(void *)x, (void *)dy, (void *)w, (void *)y, (void *)aux, (void *)dw, (void *)db}) {
            cudaCheck(cudaFree(p));
        }
    }
    return 0;
}
