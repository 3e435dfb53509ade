/*
 * bench_gemm.cu: every GEMM of a GPT-2 training step (forward, weight gradient, input gradient of the four block
 * linears and the LM head, with the epilogues llmc/matmul.cuh uses), each timed with every algorithm cuBLASLt's
 * heuristic offers (up to GEMM_CANDIDATES), so the heuristic's first choice can be compared with the best.
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -I. dev/bench_gemm.cu -o dev/bench_gemm -lcublasLt
 *   dev/bench_gemm C N [C N ...]      e.g. dev/bench_gemm 768 32768 1600 8192
 *   dev/bench_gemm --space C N ...    the GELU epilogues' GEMMs over every configuration cuBLASLt has (space())
 *   dev/bench_gemm --energy C N ...   the card's energy per unit of work (dev/cuda_energy.cuh): the fc GEMMs with
 *                                     and without their GELU epilogues, the block's weight gradients written in
 *                                     fp32 and in bf16, a memory-bound pass, and the card idle
 *   dev/bench_gemm --space-energy C N ...  the largest GEMMs of a step (SPACE_ENERGY_GEMMS) over every
 *                                     configuration, then the energy of the heuristic's first choice and of the
 *                                     fastest configurations found: at the power cap a step's time is its energy, so
 *                                     a configuration is worth adding to the trainer's tuning only if it costs less
 *
 * One line per GEMM: TFLOP/s of the heuristic's first algorithm, of the best one and which it is, and the
 * configuration (tile, stages, split-K, cluster) of both. Inputs are random bf16 (never zeros: see METHOD.md).
 */
#include <algorithm>
#include <vector>

#include "dev/cuda_energy.cuh"
#include "llmc/cuda_common.cuh"
#include "test/gpu_test_util.cuh"

#define GEMM_CANDIDATES 16
#define WARMUP 3
#define REPS 15
#define VOCAB_PADDED 50304

// An algorithm's configuration attribute (V: its type in cublasLt.h), or -1 if it has none.
template <typename V> static int algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t attr) {
    V v = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) { return -1; }
    return (int)v;
}

static void describe(char *out, size_t n, const cublasLtMatmulAlgo_t *a) {
    snprintf(out, n, "id%d tile%d st%d sk%d red%d swz%d cl%d", algo_attr<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID),
             algo_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
             algo_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
             algo_attr<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
             algo_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
             algo_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
             algo_attr<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
}

// D (m x n, col-major) = op(A) op(B) [+ beta D], as llmc/matmul.cuh's gemm_lt calls it: its descriptors and operands.
struct Gemm {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    bf16 *A, *B;
    void *D;
    cudaDataType_t dt; // D's type
    float beta;
    int m, n, k;
};

static Gemm gemm_make(int m, int n, int k, int transa, int transb, int lda, int ldb, cudaDataType_t dt, float beta,
                      cublasLtEpilogue_t epi, void *bias, void *aux, bf16 *A, bf16 *B, void *D) {
    Gemm g = {};
    cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    cublasCheck(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (bias) {
        cublasCheck(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (aux) {
        int64_t ld = m;
        cublasCheck(
            cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    cublasCheck(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_16BF, transa ? k : m, transa ? m : k, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&g.lb, CUDA_R_16BF, transb ? n : k, transb ? k : n, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&g.ld, dt, m, n, m));
    g.A = A, g.B = B, g.D = D, g.dt = dt, g.beta = beta, g.m = m, g.n = n, g.k = k;
    return g;
}

static void gemm_destroy(Gemm &g) {
    cublasLtMatrixLayoutDestroy(g.la); cublasLtMatrixLayoutDestroy(g.lb); cublasLtMatrixLayoutDestroy(g.ld);
    cublasLtMatmulDescDestroy(g.desc);
}

// TFLOP/s of the median of `reps` runs after `warmup`, or 0 if the algorithm does not run.
static double gemm_time(const Gemm &g, const cublasLtMatmulAlgo_t *algo, int warmup, int reps) {
    static cudaEvent_t e0, e1;
    if (!e0) { cudaCheck(cudaEventCreate(&e0)); cudaCheck(cudaEventCreate(&e1)); }
    float alpha = 1.0f;
    std::vector<float> t;
    for (int r = 0; r < warmup + reps; r++) {
        cudaCheck(cudaEventRecord(e0, g_cuda.stream));
        if (cublasLtMatmul(g_cuda.lt, g.desc, &alpha, g.A, g.la, g.B, g.lb, &g.beta, g.D, g.ld, g.D, g.ld, algo,
                           g_cuda.lt_workspace, CUBLASLT_WORKSPACE_BYTES, g_cuda.stream) != CUBLAS_STATUS_SUCCESS) {
            cudaCheck(cudaStreamSynchronize(g_cuda.stream));
            return 0.0;
        }
        cudaCheck(cudaEventRecord(e1, g_cuda.stream));
        cudaCheck(cudaEventSynchronize(e1));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= warmup) { t.push_back(ms); }
    }
    std::sort(t.begin(), t.end());
    return 2.0 * g.m * g.n * g.k / (t[t.size() / 2] * 1e-3) / 1e12;
}

// The heuristic's algorithms for g (at most GEMM_CANDIDATES, best-ranked first); returns how many.
static int heuristic_algos(const Gemm &g, cublasLtMatmulHeuristicResult_t (&heur)[GEMM_CANDIDATES]) {
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = CUBLASLT_WORKSPACE_BYTES;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(g_cuda.lt, g.desc, g.la, g.lb, g.ld, g.ld, pref, GEMM_CANDIDATES, heur, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    return found;
}

static void bench(const char *name, const Gemm &g) {
    cublasLtMatmulHeuristicResult_t heur[GEMM_CANDIDATES];
    int found = heuristic_algos(g, heur), best_i = -1;
    double first = 0, best = 0;
    for (int i = 0; i < found; i++) {
        double tf = gemm_time(g, &heur[i].algo, WARMUP, REPS);
        if (i == 0) { first = tf; }
        if (tf > best) { best = tf; best_i = i; }
    }
    char d0[128] = "-", db[128] = "-";
    if (found > 0) { describe(d0, sizeof(d0), &heur[0].algo); }
    if (best_i >= 0) { describe(db, sizeof(db), &heur[best_i].algo); }
    printf("%-14s %6d %6d %6d  %2d algos  first %6.1f  best %6.1f (#%d)  [%s] -> [%s]\n", name, g.m, g.n, g.k, found,
           first, best, best_i, d0, db);
}

/*
 * Beyond the heuristic: every algorithm cuBLASLt has for these types (cublasLtMatmulAlgoGetIds) that supports the
 * epilogue, in every tile and stage configuration its capabilities list and a few cluster shapes (no split-K), each
 * checked with cublasLtMatmulAlgoCheck and the valid ones timed: one run, and SPACE_REPS more for those within
 * SPACE_NEAR of the heuristic's best, then the SPACE_TOP fastest timed again as the heuristic's are. Asks whether the
 * epilogue GEMMs' gap (GELU_AUX_BIAS, DGELU) is cuBLASLt's kernels or its heuristic's choice among them.
 */
#define SPACE_ALGO_IDS 128
#define SPACE_REPS 3
#define SPACE_NEAR 0.8 // of the heuristic's best TFLOP/s: a configuration slower at its first run is not timed again
#define SPACE_TOP 3
// the cluster shapes tried: the library's choice, and those the heuristic's Hopper kernels use (1 x 2, 2 x 1) and near
static const uint16_t SPACE_CLUSTERS[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1,
                                          CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                                          CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                                          CUBLASLT_CLUSTER_SHAPE_1x4x1};

// An algorithm's capability that is a list (V: its element type in cublasLt.h); empty if it has none.
template <typename V>
static std::vector<V> algo_cap_list(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoCapAttributes_t c) {
    size_t bytes = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(a, c, NULL, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0) { return {}; }
    std::vector<V> v(bytes / sizeof(V));
    cublasCheck(cublasLtMatmulAlgoCapGetAttribute(a, c, v.data(), bytes, &bytes));
    return v;
}

// The GEMMs --space-energy searches: the block's largest products in each pass (fc and fcproj), qkv's forward, and
// the fc pair's weight gradients without BGRADB (as the trainer runs them).
static const char *const SPACE_ENERGY_GEMMS[] = {"qkv fwd", "fc fwd", "fcproj dgrad", "fcproj dgelu", "fc dgrad",
                                                 "fc wgrad-nb", "fcproj wgrad-nb"};

// Joules per TFLOP of g with `algo`, at the cap (dev/cuda_energy.cuh).
static void gemm_energy_with(const Nvml &n, const char *name, const Gemm &g, const cublasLtMatmulAlgo_t *algo) {
    float alpha = 1.0f;
    energy(n, name, [&] {
        cublasCheck(cublasLtMatmul(g_cuda.lt, g.desc, &alpha, g.A, g.la, g.B, g.lb, &g.beta, g.D, g.ld, g.D, g.ld,
                                   algo, g_cuda.lt_workspace, CUBLASLT_WORKSPACE_BYTES, g_cuda.stream));
    }, g_cuda.stream, 2.0 * g.m * g.n * g.k * 1e-12, "TFLOP");
}

// nvml: also the energy of the heuristic's first algorithm and of the SPACE_TOP fastest configurations (NULL: none).
static void space(const char *name, const Gemm &g, const Nvml *nvml) {
    const cudaDataType_t dt = g.dt;
    cublasLtMatmulHeuristicResult_t heur[GEMM_CANDIDATES];
    int found = heuristic_algos(g, heur);
    double heur_best = 0;
    for (int i = 0; i < found; i++) { heur_best = std::max(heur_best, gemm_time(g, &heur[i].algo, WARMUP, REPS)); }
    int ids[SPACE_ALGO_IDS], nids = 0;
    cublasCheck(cublasLtMatmulAlgoGetIds(g_cuda.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, dt, dt,
                                         SPACE_ALGO_IDS, ids, &nids));
    uint32_t epi = 0;
    size_t written = 0;
    cublasCheck(cublasLtMatmulDescGetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi), &written));
    std::vector<std::pair<double, cublasLtMatmulAlgo_t>> timed;
    int checked = 0;
    for (int a = 0; a < nids; a++) {
        cublasLtMatmulAlgo_t algo;
        if (cublasLtMatmulAlgoInit(g_cuda.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, dt, dt, ids[a],
                                   &algo) != CUBLAS_STATUS_SUCCESS) {
            continue;
        }
        uint32_t epis = 0; // the epilogues it has; where it does not say, cublasLtMatmulAlgoCheck decides
        if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_EPILOGUE_MASK, &epis, sizeof(epis), &written) ==
                CUBLAS_STATUS_SUCCESS &&
            (epis & epi) != epi) {
            continue;
        }
        std::vector<uint32_t> tiles = algo_cap_list<uint32_t>(&algo, CUBLASLT_ALGO_CAP_TILE_IDS);
        std::vector<uint32_t> stages = algo_cap_list<uint32_t>(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
        if (tiles.empty()) { tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED); }
        if (stages.empty()) { stages.push_back(CUBLASLT_MATMUL_STAGES_UNDEFINED); }
        for (uint32_t tile : tiles) {
            for (uint32_t stage : stages) {
                for (uint16_t cluster : SPACE_CLUSTERS) {
                    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
                    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stage, sizeof(stage));
                    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                                         sizeof(cluster));
                    cublasLtMatmulHeuristicResult_t check;
                    if (cublasLtMatmulAlgoCheck(g_cuda.lt, g.desc, g.la, g.lb, g.ld, g.ld, &algo, &check) !=
                            CUBLAS_STATUS_SUCCESS ||
                        check.workspaceSize > CUBLASLT_WORKSPACE_BYTES) {
                        continue;
                    }
                    checked++;
                    // one untimed run first: a kernel's first launch loads its module (lazy loading) and would
                    // fail the SPACE_NEAR test whatever its speed
                    double tf = gemm_time(g, &algo, 1, 1);
                    if (tf > SPACE_NEAR * heur_best) { timed.push_back({gemm_time(g, &algo, 0, SPACE_REPS), algo}); }
                }
            }
        }
    }
    std::sort(timed.begin(), timed.end(), [](const auto &x, const auto &y) { return x.first > y.first; });
    printf("%-16s %6d %6d %6d  %d algorithm ids, %d valid configurations; heuristic's best %6.1f TFLOP/s\n", name,
           g.m, g.n, g.k, nids, checked, heur_best);
    for (int i = 0; i < (int)timed.size() && i < SPACE_TOP; i++) {
        char d[128];
        describe(d, sizeof(d), &timed[i].second);
        printf("    %6.1f TFLOP/s  [%s]\n", gemm_time(g, &timed[i].second, WARMUP, REPS), d);
    }
    if (!nvml || found == 0) { return; }
    gemm_energy_with(*nvml, "  heuristic #0", g, &heur[0].algo);
    for (int i = 0; i < (int)timed.size() && i < SPACE_TOP; i++) {
        char label[32];
        snprintf(label, sizeof(label), "  space #%d", i);
        gemm_energy_with(*nvml, label, g, &timed[i].second);
    }
}

// out = in, n16 pieces of 16 bytes (8 bf16), one a thread: a pass at the memory's bandwidth.
__global__ void copy_bf16(bf16 *out, const bf16 *in, size_t n16) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n16) { reinterpret_cast<int4 *>(out)[i] = reinterpret_cast<const int4 *>(in)[i]; }
}

// The linears of a GPT-2 block of width C (qkv, attention projection, fc, fc projection), then the LM head: their
// input and output features, whether they add a bias and whether GELU follows.
struct LinearShape { const char *name; int in, out, bias, gelu; };
#define BLOCK_LINEARS 4 // linear_shapes()'s first, the block's; the LM head comes last
static std::vector<LinearShape> linear_shapes(int C) {
    return {{"qkv", C, 3 * C, 1, 0}, {"attproj", C, C, 1, 0}, {"fc", C, 4 * C, 1, 1}, {"fcproj", 4 * C, C, 1, 0},
            {"lmhead", C, VOCAB_PADDED, 0, 0}};
}

static void energy_all(int C, int N, bf16 *x, bf16 *dy, bf16 *w, bf16 *y, bf16 *aux, float *dw, size_t big) {
    Nvml n = nvml_open();
    energy_idle(n);
    auto gemm_energy = [&](const char *name, Gemm g) {
        cublasLtMatmulHeuristicResult_t heur[GEMM_CANDIDATES];
        if (heuristic_algos(g, heur) == 0) { printf("%-18s no algorithm\n", name); }
        else { gemm_energy_with(n, name, g, &heur[0].algo); }
        gemm_destroy(g);
    };
    gemm_energy("fc fwd bias", gemm_make(4 * C, N, C, 1, 0, C, C, CUDA_R_16BF, 0.0f, CUBLASLT_EPILOGUE_BIAS, w, NULL,
                                         w, x, y));
    gemm_energy("fc fwd gelu", gemm_make(4 * C, N, C, 1, 0, C, C, CUDA_R_16BF, 0.0f, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                         w, aux, w, x, y));
    gemm_energy("fcproj dgrad", gemm_make(4 * C, N, C, 0, 0, 4 * C, C, CUDA_R_16BF, 0.0f, CUBLASLT_EPILOGUE_DEFAULT,
                                          NULL, NULL, w, x, y));
    gemm_energy("fcproj dgelu", gemm_make(4 * C, N, C, 0, 0, 4 * C, C, CUDA_R_16BF, 0.0f, CUBLASLT_EPILOGUE_DGELU,
                                          NULL, aux, w, x, y));
    // The block's weight gradients of one micro-step (beta 0) written as the trainer writes them, in fp32, and in
    // bf16 as PyTorch's autocast does: what the fp32-gradient decision costs in these GEMMs (dev/DESIGN.md,
    // "Decisions", and dev/log/2026-11-27.md).
    const std::vector<LinearShape> lins = linear_shapes(C);
    for (int i = 0; i < BLOCK_LINEARS; i++) {
        const LinearShape &s = lins[i];
        char nm[64];
        snprintf(nm, sizeof(nm), "%s wgrad fp32", s.name);
        gemm_energy(nm, gemm_make(s.in, s.out, N, 0, 1, s.in, s.out, CUDA_R_32F, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL,
                                  NULL, x, dy, dw));
        snprintf(nm, sizeof(nm), "%s wgrad bf16", s.name);
        gemm_energy(nm, gemm_make(s.in, s.out, N, 0, 1, s.in, s.out, CUDA_R_16BF, 0.0f, CUBLASLT_EPILOGUE_DEFAULT,
                                  NULL, NULL, x, dy, y));
    }
    size_t n16 = big * sizeof(bf16) / 16;
    energy(n, "copy (memory)", [&] {
        copy_bf16<<<grid_for(n16, 256), 256, 0, g_cuda.stream>>>(y, x, n16);
        cudaCheckLaunch();
    }, g_cuda.stream, 2.0 * big * sizeof(bf16) * 1e-9, "GB");
}

int main(int argc, char **argv) {
    cuda_context_init();
    const bool space_energy = argc > 1 && strcmp(argv[1], "--space-energy") == 0;
    const bool search = space_energy || (argc > 1 && strcmp(argv[1], "--space") == 0);
    const bool energy_mode = argc > 1 && strcmp(argv[1], "--energy") == 0;
    Nvml nvml = {};
    if (space_energy) { nvml = nvml_open(); }
    for (int a = search || energy_mode ? 2 : 1; a + 1 < argc; a += 2) {
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
        auto free_all = [&] {
            for (void *p : {(void *)x, (void *)dy, (void *)w, (void *)y, (void *)aux, (void *)dw, (void *)db}) {
                cudaCheck(cudaFree(p));
            }
        };
        printf("== C %d, N %d\n", C, N);
        if (energy_mode) {
            energy_all(C, N, x, dy, w, y, aux, dw, big);
            free_all();
            continue;
        }
        // Which GEMMs each mode takes: plain timing all of them; --space those marked searched (the GELU epilogues'
        // GEMMs and, for comparison, the fcproj input gradient without its epilogue); --space-energy those that
        // SPACE_ENERGY_GEMMS names, whatever the flag
        auto one = [&](const char *name, bool searched, Gemm g) {
            if (space_energy) {
                for (const char *e : SPACE_ENERGY_GEMMS) {
                    if (strcmp(e, name) == 0) { space(name, g, &nvml); }
                }
            } else if (!search) {
                bench(name, g);
            } else if (searched) {
                space(name, g, NULL);
            }
            gemm_destroy(g);
        };
        for (const LinearShape &l : linear_shapes(C)) {
            const bool fcproj = l.name[2] == 'p'; // its dgrad carries gelu' of fc's pre-activation
            char nm[64];
            snprintf(nm, sizeof(nm), "%s fwd", l.name);
            cublasLtEpilogue_t fe = l.gelu ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                           : (l.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
            one(nm, l.gelu, gemm_make(l.out, N, l.in, 1, 0, l.in, l.in, CUDA_R_16BF, 0.0f, fe,
                                      l.bias ? (void *)w : NULL, l.gelu ? (void *)aux : NULL, w, x, y));
            if (l.gelu) { // the same with the weight stored transposed ([in, out]): which kernels the epilogue gets
                one("fc fwd wT", false,
                    gemm_make(l.out, N, l.in, 0, 0, l.out, l.in, CUDA_R_16BF, 0.0f, fe, w, aux, w, x, y));
            }
            snprintf(nm, sizeof(nm), "%s wgrad", l.name);
            one(nm, false, gemm_make(l.in, l.out, N, 0, 1, l.in, l.out, CUDA_R_32F, 1.0f,
                                     l.bias ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT,
                                     l.bias ? (void *)db : NULL, NULL, x, dy, dw));
            if (l.bias) {
                snprintf(nm, sizeof(nm), "%s wgrad-nb", l.name);
                one(nm, false, gemm_make(l.in, l.out, N, 0, 1, l.in, l.out, CUDA_R_32F, 1.0f,
                                         CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, x, dy, dw));
            }
            snprintf(nm, sizeof(nm), "%s dgrad", l.name);
            one(nm, fcproj, gemm_make(l.in, N, l.out, 0, 0, l.in, l.out, CUDA_R_16BF, 0.0f,
                                      CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, w, dy, y));
            if (fcproj) {
                one("fcproj dgelu", true, gemm_make(l.in, N, l.out, 0, 0, l.in, l.out, CUDA_R_16BF, 0.0f,
                                                    CUBLASLT_EPILOGUE_DGELU, NULL, aux, w, dy, y));
                one("fcproj dgelub", false, gemm_make(l.in, N, l.out, 0, 0, l.in, l.out, CUDA_R_16BF, 0.0f,
                                                      CUBLASLT_EPILOGUE_DGELU_BGRAD, db, aux, w, dy, y));
                one("fcproj dgelu wT", false, gemm_make(l.in, N, l.out, 1, 0, l.out, l.out, CUDA_R_16BF, 0.0f,
                                                        CUBLASLT_EPILOGUE_DGELU, NULL, aux, w, dy, y));
            }
        }
        free_all();
    }
    return 0;
}
