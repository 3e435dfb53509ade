/*
 * test_ring_gemm.cu: sequence parallelism's ring collectives hidden behind GEMMs (llmc/tensor_parallel.cuh over
 * llmc/peer_ring.cuh) on one GPU, with a simulated TP group of P "ranks" (P = 2, 3, 4): each rank's ring buffer,
 * streams and events on the one device, the rings linked to each other's buffers directly instead of through IPC.
 * One host thread queues every rank's work; the GPU runs the ranks' streams side by side, the flags in GPU memory
 * ordering them as across GPUs.
 *
 *   test/gpubin/test_ring_gemm
 *
 * For fp32 and bf16:
 *   all-gather + GEMM (a column-parallel linear_forward under SP): every rank's gathered input equals the whole input
 *     bit for bit, and its output the same GEMM run row block by row block without the ring, bit for bit; against
 *     the one GEMM of all N rows it is within GEMM_ROWS_TOL (cuBLASLt may choose another algorithm, e.g. another
 *     split of the inner dimension, for N/P rows than for N; the bits then differ by the fp32 accumulation order).
 *   GEMM + reduce-scatter (a row-parallel linear_forward): each rank's own rows equal, bit for bit, the products of
 *     the same row-block GEMMs summed on the host in the ring's order, in fp32 rounded to the type at each hop; with
 *     the products the ring sends on made and sent in 1, 2 and 3 pieces (empty ones among them), each piece a GEMM.
 *   the backward: a row-parallel input gradient beside the gather of its output gradient (linear_backward_gather,
 *     linear_backward_input), a column-parallel one beside its reduce-scatter: bit for bit against the same row
 *     blocks and the ring's sum order.
 *   the collectives alone on the TP stream (tp_all_gather, tp_reduce_scatter), with slots a third of a part, so that
 *     a part moves in pieces: exact (gather) and the ring's sum order (reduce-scatter).
 *   FP8 all-gather + GEMM (fp32 and bf16 activations around it): with scales from the history, the input gathered as
 *     E4M3 codes (each rank casts its own rows; slots that hold a chunk's codes, read where they land, and slots a
 *     third of that) and as activations (--sp-fp8-codes 0); in delayed scaling's first step, gathered whole. Every
 *     rank's output, gathered codes and kept transposed codes equal, bit for bit, the same FP8 row blocks run without
 *     the ring (the first step: the one cast and GEMM of all rows), its recorded amax is the whole input's once the
 *     ranks' meet (one recipe state here, the world's max in training), and its output is within FP8_WHOLE_TOL of the
 *     one GEMM of all rows.
 *   FP8 backward of a row-parallel fc projection beside its output gradient's gather, with the activation's backward
 *     (GELU, and SwiGLU, whose [gate | up] input rows are twice as wide) cast as fc's output gradient: every rank's
 *     input gradient and both layers' gradient codes, transposed copies too, bit for bit as the same row blocks alone.
 *   FP8 backward of a column-parallel layer beside its reduce-scatter, its products sent on in 1, 2 and 3 pieces:
 *     each rank's rows in the ring's sum order of the same FP8 blocks' products, its gradient codes as their casts.
 * Streams of different simulated ranks wait for each other's flags on one GPU: CUDA_DEVICE_MAX_CONNECTIONS is raised
 * first so that no two of them share a hardware queue (where they did, a wait could hold up the write it waits for),
 * and kernels are loaded at start-up (CUDA_MODULE_LOADING=EAGER: a lazy load waits for the work in flight, which
 * waits for the ranks queued after it). A ring that stalls all the same ends the test with a FAIL naming it.
 */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

#include "llmc/tensor_parallel.cuh"
#include "test/gpu_test_util.cuh"
#include "test/test_util.h"

#define MAX_P 4
#define N_TOKENS 384   // divisible by 2, 3 and 4
#define CH 256         // the residual stream's width
#define FEAT 192       // a rank's features of the split dimension
#define GEMM_ROWS_TOL 1e-5 // fp32 relative to the largest output: another accumulation order of a 256-deep dot product
#define STREAM_CONNECTIONS "32"
#define RING_STALL_S 20  // seconds a simulated ring's collective may take before it counts as stalled
// a reduce-scatter's pieces: whole; and cut in 64-row units of chunks of 192, 128 and 96 rows (P 2, 3, 4): 64 + 128,
// 0 + 64 + 64 (an empty piece), 0 + 0 + 96
static const int RS_PIECES[] = {1, 2, 3};

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return ((*s >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

template <typename T> static std::vector<T> random_vec(size_t n, unsigned seed, float scale) {
    std::vector<T> v(n);
    for (size_t i = 0; i < n; i++) { v[i] = to_type<T>(scale * frand(&seed)); }
    return v;
}

template <typename T> static T round_to(float x) { return to_type<T>(x); }

// Rank i's copy of x (N_TOKENS rows of cols): its own n rows, the others' `garbage` until a gather writes them.
template <typename T> static T *rank_rows(const std::vector<T> &x, int i, size_t n, size_t cols, float garbage) {
    std::vector<T> mine(x.size(), to_type<T>(garbage));
    memcpy(&mine[i * n * cols], &x[i * n * cols], n * cols * sizeof(T));
    return to_device(mine);
}

// The simulated group: a TensorParallel, a compute stream, a ring and a cuBLASLt workspace per rank (the ranks' GEMMs
// run at once, and a GEMM that splits its inner dimension keeps partial sums there), the rings linked in a ring.
typedef struct {
    int P;
    TensorParallel tp[MAX_P];
    cudaStream_t compute[MAX_P];
    void *workspace[MAX_P];
} Group;

static void *g_shared_workspace; // the one the reference GEMMs use

// Rank i's work is queued next (its GEMMs take its workspace); group_done: the references' again.
static void group_rank(Group *g, int i) { g_cuda.lt_workspace = g->workspace[i]; }
static void group_done(void) { g_cuda.lt_workspace = g_shared_workspace; }

static void group_make(Group *g, int P, size_t slot_bytes) {
    memset(g, 0, sizeof(*g));
    g->P = P;
    for (int i = 0; i < P; i++) {
        Mesh m = mesh_make(P, i, P, 1);
        tp_init(&g->tp[i], &m, 1);
        peer_ring_alloc(&g->tp[i].ring, P, i, slot_bytes, RING_CE);
        g->tp[i].ring_up = 1;
        tp_ring_events(&g->tp[i]);
        cudaCheck(cudaStreamCreateWithFlags(&g->compute[i], cudaStreamNonBlocking));
        g->workspace[i] = cuda_alloc(CUBLASLT_WORKSPACE_BYTES, "a simulated rank's cuBLASLt workspace");
    }
    for (int i = 0; i < P; i++) {
        peer_ring_link(&g->tp[i].ring, g->tp[ring_next(i, P)].ring.base, g->tp[ring_prev(i, P)].ring.base);
    }
}

static void group_sync(void) { cudaCheck(cudaDeviceSynchronize()); }

// The ranks' work just queued, done within RING_STALL_S; else the test ends with a FAIL naming it (a ring that stalls
// does not come back, and the rows after it could not run).
static void group_wait(Group *g, const char *type, const char *what) {
    std::vector<cudaEvent_t> done;
    for (int i = 0; i < g->P; i++) {
        cudaStream_t streams[3] = {g->compute[i], g->tp[i].stream, g->tp[i].ring.stream};
        for (cudaStream_t st : streams) {
            cudaEvent_t e;
            cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
            cudaCheck(cudaEventRecord(e, st));
            done.push_back(e);
        }
    }
    time_t start = time(NULL);
    for (cudaEvent_t e : done) {
        cudaError_t r;
        while ((r = cudaEventQuery(e)) == cudaErrorNotReady) {
            if (time(NULL) - start > RING_STALL_S) {
                printf("FAIL %s P %d: %s: the simulated ring stalled (no progress in %d s)\n", type, g->P, what,
                       RING_STALL_S);
                fflush(stdout);
                _exit(1);
            }
            usleep(1000);
        }
        cudaCheck(r);
        cudaCheck(cudaEventDestroy(e));
    }
    group_sync();
}

static void group_free(Group *g) {
    group_sync();
    for (int i = 0; i < g->P; i++) {
        cudaCheck(cudaStreamDestroy(g->compute[i]));
        cudaCheck(cudaStreamDestroy(g->tp[i].stream));
        cudaCheck(cudaStreamDestroy(g->tp[i].ring.stream));
        cudaCheck(cudaFree(g->tp[i].ring.base));
        cudaCheck(cudaFree(g->workspace[i]));
    }
}

static ForwardChunk sp_chunk(int P, int rank) {
    Mesh m = mesh_make(P, rank, P, 1);
    return forward_chunk(&m, 1, 1, N_TOKENS, 1, 0);
}

template <typename T> static int count_diff(const std::vector<T> &a, const std::vector<T> &b, size_t from, size_t n) {
    int bad = 0;
    for (size_t i = from; i < from + n; i++) { bad += memcmp(&a[i], &b[i], sizeof(T)) != 0; }
    return bad;
}

// The ring's sum of rank products prod[r] over rows [c n, (c+1) n) (cols wide), for chunk c: rank c+1 first, c last,
// rounded to T at each hop.
template <typename T>
static std::vector<T> ring_sum(const std::vector<std::vector<T>> &prod, int P, int c, size_t part) {
    std::vector<T> acc(part);
    for (size_t i = 0; i < part; i++) { acc[i] = prod[ring_mod(c + 1, P)][(size_t)c * part + i]; }
    for (int h = 2; h <= P; h++) {
        int r = ring_mod(c + h, P);
        for (size_t i = 0; i < part; i++) {
            acc[i] = round_to<T>(host_float(acc[i]) + host_float(prod[r][(size_t)c * part + i]));
        }
    }
    return acc;
}

// Elements of each rank's own rows (rank i's: rows [i n, (i+1) n) of outs[i], part = n x cols) that differ from the
// ring's sum of the rank products over those rows.
template <typename T>
static int ring_sum_mismatches(const std::vector<T *> &outs, const std::vector<std::vector<T>> &prod, int P,
                               size_t part) {
    int bad = 0;
    for (int i = 0; i < P; i++) {
        std::vector<T> got = to_host(outs[i], (size_t)P * part), want = ring_sum(prod, P, i, part);
        for (size_t k = 0; k < part; k++) { bad += memcmp(&got[i * part + k], &want[k], sizeof(T)) != 0; }
    }
    return bad;
}

template <typename T> static Linear<T> make_linear(int in, int out, const T *w, const T *b, LinearSplit split,
                                                   TensorParallel *tp) {
    Linear<T> lin;
    memset(&lin, 0, sizeof(lin));
    lin.in = in;
    lin.out = out;
    lin.w = w;
    lin.b = b;
    lin.split = split;
    lin.tp = tp;
    return lin;
}

// The row blocks rank i makes chunk c's product in over the ring (tp_ring_reduce_scatter): a chunk it sends on in
// `pieces` pieces, its own whole; make(first row, rows) for each that is not empty.
template <typename Make> static void ring_product_blocks(int i, int c, size_t n, int pieces, Make make) {
    int k = c == i ? 1 : pieces;
    for (int p = 0; p < k; p++) {
        size_t r0 = ring_piece_first(n, RING_PIECE_ROWS, k, p), rows = ring_piece_rows(n, RING_PIECE_ROWS, k, p);
        if (rows) { make(c * n + r0, rows); }
    }
}

// What rank i's column-parallel input gradient (one: no TP group) makes for the ring to sum, dinp = dout W over N
// rows, on the host: each chunk's product in the blocks the ring makes it in (ring_product_blocks), or with by_rows
// false all N rows at once (an FP8 layer whose chunks are not whole cast tiles: the trainer then sums the whole).
template <typename T>
static std::vector<T> column_products(const Linear<T> &one, const T *dout, int i, int P, size_t n, int pieces,
                                      bool by_rows) {
    T *p = (T *)cuda_alloc((size_t)N_TOKENS * one.in * sizeof(T), "products");
    for (int c = 0; c < (by_rows ? P : 0); c++) {
        ring_product_blocks(i, c, n, pieces, [&](size_t r0, size_t rows) {
            linear_dgrad(one, p + r0 * one.in, dout + r0 * one.out, (const T *)NULL, (int)rows, g_cuda.stream,
                         (int)r0, N_TOKENS);
        });
    }
    if (!by_rows) { linear_dgrad(one, p, dout, (const T *)NULL, N_TOKENS, g_cuda.stream); }
    group_sync();
    std::vector<T> h = to_host(p, (size_t)N_TOKENS * one.in);
    cudaCheck(cudaFree(p));
    return h;
}

// The group, its reduce-scatters' products made and sent in `pieces` pieces.
static void group_pieces(Group *g, int pieces) {
    for (int i = 0; i < g->P; i++) { g->tp[i].rs_pieces = pieces; }
}

template <typename T> static void test_forward(int P, const char *type, int pieces) {
    Group g;
    size_t n = N_TOKENS / P;
    group_make(&g, P, n * CH * sizeof(T));
    group_pieces(&g, pieces);
    char name[160];
    // all-gather + GEMM: x (N, CH) whole, each rank holding its rows; W (FEAT, CH) the same on every rank here
    std::vector<T> x = random_vec<T>((size_t)N_TOKENS * CH, 1, 1.0f), w = random_vec<T>((size_t)FEAT * CH, 2, 0.1f);
    std::vector<T> b = random_vec<T>(FEAT, 3, 0.1f);
    T *dw = to_device(w), *db = to_device(b), *dx_ref = to_device(x);
    std::vector<T *> inp(P), out(P);
    for (int i = 0; i < P; i++) {
        inp[i] = rank_rows(x, i, n, CH, -7.0f);
        out[i] = (T *)cuda_alloc((size_t)N_TOKENS * FEAT * sizeof(T), "out");
    }
    for (int i = 0; i < P; i++) {
        group_rank(&g, i);
        Linear<T> lin = make_linear<T>(CH, FEAT, dw, db, LINEAR_COLUMN, &g.tp[i]);
        linear_forward(lin, out[i], inp[i], (T *)NULL, sp_chunk(P, i), g.compute[i]);
    }
    group_done();
    group_wait(&g, type, "all-gather + GEMM");
    Linear<T> plain = make_linear<T>(CH, FEAT, dw, db, LINEAR_COLUMN, (TensorParallel *)NULL);
    T *blocks = (T *)cuda_alloc((size_t)N_TOKENS * FEAT * sizeof(T), "row blocks"), *whole = (T *)cuda_alloc(
        (size_t)N_TOKENS * FEAT * sizeof(T), "whole");
    for (int c = 0; c < P; c++) {
        linear_rows_forward(plain, db, blocks, dx_ref + c * n * CH, (int)(c * n), (int)((c + 1) * n), N_TOKENS,
                            (T *)NULL, 0);
    }
    linear_rows_forward(plain, db, whole, dx_ref, 0, N_TOKENS, N_TOKENS, (T *)NULL, 0);
    group_sync();
    std::vector<T> hb = to_host(blocks, (size_t)N_TOKENS * FEAT), hw = to_host(whole, (size_t)N_TOKENS * FEAT);
    int bad_in = 0, bad_out = 0;
    double worst = 0.0, top = 0.0;
    for (int i = 0; i < P; i++) {
        std::vector<T> gi = to_host(inp[i], (size_t)N_TOKENS * CH), oi = to_host(out[i], (size_t)N_TOKENS * FEAT);
        bad_in += count_diff(gi, x, 0, gi.size());
        bad_out += count_diff(oi, hb, 0, oi.size());
        for (size_t k = 0; k < oi.size(); k++) {
            double d = fabs((double)host_float(oi[k]) - host_float(hw[k]));
            worst = d > worst ? d : worst;
            top = fabs(host_float(hw[k])) > top ? fabs(host_float(hw[k])) : top;
        }
    }
    snprintf(name, sizeof(name), "%s P %d: all-gather + GEMM, gathered input and row-block output bit for bit", type,
             P);
    check(bad_in == 0 && bad_out == 0, name, "%d input, %d output elements differ", bad_in, bad_out);
    double tol = sizeof(T) == 2 ? 1.0 / 128 : GEMM_ROWS_TOL; // bf16: at most a rounding of the output apart
    snprintf(name, sizeof(name), "%s P %d: all-gather + GEMM against the one GEMM of all rows", type, P);
    check(worst <= tol * top, name, "max |diff| %.3g of max %.3g (tol %.1g relative)", worst, top, tol);

    // GEMM + reduce-scatter: rank r's input slice (N, FEAT) and weight slice (CH, FEAT); bias on rank 0
    std::vector<std::vector<T>> prod(P);
    std::vector<T *> xr(P), wr(P), outr(P);
    std::vector<T> bias = random_vec<T>(CH, 9, 0.1f);
    T *dbias = to_device(bias);
    for (int i = 0; i < P; i++) {
        xr[i] = to_device(random_vec<T>((size_t)N_TOKENS * FEAT, 10 + i, 1.0f));
        wr[i] = to_device(random_vec<T>((size_t)CH * FEAT, 20 + i, 0.1f));
        outr[i] = (T *)cuda_alloc((size_t)N_TOKENS * CH * sizeof(T), "rs out");
        Linear<T> one = make_linear<T>(FEAT, CH, wr[i], i == 0 ? dbias : (T *)NULL, LINEAR_ROW, (TensorParallel *)NULL);
        T *p = (T *)cuda_alloc((size_t)N_TOKENS * CH * sizeof(T), "products");
        for (int c = 0; c < P; c++) {
            ring_product_blocks(i, c, n, pieces, [&](size_t r0, size_t rows) {
                linear_rows_forward(one, one.b, p, xr[i] + r0 * FEAT, (int)r0, (int)(r0 + rows), N_TOKENS, (T *)NULL,
                                    0);
            });
        }
        group_sync();
        prod[i] = to_host(p, (size_t)N_TOKENS * CH);
    }
    for (int i = 0; i < P; i++) {
        group_rank(&g, i);
        Linear<T> lin = make_linear<T>(FEAT, CH, wr[i], dbias, LINEAR_ROW, &g.tp[i]);
        linear_forward(lin, outr[i], xr[i], (T *)NULL, sp_chunk(P, i), g.compute[i]);
        tp_chunk_wait(&g.tp[i], g.compute[i], 0);
    }
    group_done();
    group_wait(&g, type, "GEMM + reduce-scatter");
    int bad = ring_sum_mismatches(outr, prod, P, n * CH);
    snprintf(name, sizeof(name),
             "%s P %d: GEMM + reduce-scatter in %d pieces, each rank's rows in the ring's sum order", type, P, pieces);
    check(bad == 0, name, "%d elements differ", bad);
    group_free(&g);
}

template <typename T> static void test_backward(int P, const char *type, int pieces) {
    Group g;
    size_t n = N_TOKENS / P;
    group_make(&g, P, n * CH * sizeof(T));
    group_pieces(&g, pieces);
    char name[160];
    // row-parallel input gradient: dout (N, CH) gathered from each rank's rows, dinp = dout W (W: (CH, FEAT))
    std::vector<T> dout = random_vec<T>((size_t)N_TOKENS * CH, 31, 1.0f);
    std::vector<T> w = random_vec<T>((size_t)CH * FEAT, 32, 0.1f);
    T *dw = to_device(w), *ddout = to_device(dout), *ref = (T *)cuda_alloc((size_t)N_TOKENS * FEAT * sizeof(T), "ref");
    Linear<T> plain = make_linear<T>(FEAT, CH, dw, (const T *)NULL, LINEAR_ROW, (TensorParallel *)NULL);
    for (int c = 0; c < P; c++) {
        linear_dgrad(plain, ref + c * n * FEAT, ddout + c * n * CH, (const T *)NULL, (int)n, 0);
    }
    group_sync();
    std::vector<T *> dy(P), dx(P);
    for (int i = 0; i < P; i++) {
        dy[i] = rank_rows(dout, i, n, CH, 5.0f);
        dx[i] = (T *)cuda_alloc((size_t)N_TOKENS * FEAT * sizeof(T), "dinp");
    }
    for (int i = 0; i < P; i++) {
        group_rank(&g, i);
        Linear<T> lin = make_linear<T>(FEAT, CH, dw, (const T *)NULL, LINEAR_ROW, &g.tp[i]);
        linear_backward_gather(lin, dy[i], N_TOKENS, g.compute[i]);
        linear_backward_input(lin, dx[i], dy[i], (const T *)NULL, (const T *)NULL, N_TOKENS, g.compute[i]);
    }
    group_done();
    group_wait(&g, type, "row-parallel input gradient");
    std::vector<T> hr = to_host(ref, (size_t)N_TOKENS * FEAT);
    int bad = 0;
    for (int i = 0; i < P; i++) {
        bad += count_diff(to_host(dy[i], (size_t)N_TOKENS * CH), dout, 0, (size_t)N_TOKENS * CH);
        bad += count_diff(to_host(dx[i], (size_t)N_TOKENS * FEAT), hr, 0, (size_t)N_TOKENS * FEAT);
    }
    snprintf(name, sizeof(name), "%s P %d: row-parallel input gradient beside its output gradient's gather", type, P);
    check(bad == 0, name, "%d elements differ", bad);

    // column-parallel input gradient: rank r's dout (N, FEAT), weight (FEAT, CH): dinp (N, CH) reduce-scattered
    std::vector<std::vector<T>> prod(P);
    std::vector<T *> dyc(P), wc(P), dxc(P);
    for (int i = 0; i < P; i++) {
        dyc[i] = to_device(random_vec<T>((size_t)N_TOKENS * FEAT, 40 + i, 1.0f));
        wc[i] = to_device(random_vec<T>((size_t)FEAT * CH, 50 + i, 0.1f));
        dxc[i] = (T *)cuda_alloc((size_t)N_TOKENS * CH * sizeof(T), "dinp");
        Linear<T> one = make_linear<T>(CH, FEAT, wc[i], (const T *)NULL, LINEAR_COLUMN, (TensorParallel *)NULL);
        prod[i] = column_products(one, dyc[i], i, P, n, pieces, true);
    }
    int beside_calls = 0; // each rank's once
    for (int i = 0; i < P; i++) {
        group_rank(&g, i);
        Linear<T> lin = make_linear<T>(CH, FEAT, wc[i], (const T *)NULL, LINEAR_COLUMN, &g.tp[i]);
        linear_backward_input(lin, dxc[i], dyc[i], (const T *)NULL, (const T *)NULL, N_TOKENS, g.compute[i],
                              [&]() { beside_calls++; });
        linear_backward_join(lin, g.compute[i]);
    }
    group_done();
    group_wait(&g, type, "column-parallel input gradient");
    bad = ring_sum_mismatches(dxc, prod, P, n * CH);
    snprintf(name, sizeof(name), "%s P %d: column-parallel input gradient beside its reduce-scatter in %d pieces",
             type, P, pieces);
    check(bad == 0 && beside_calls == P, name, "%d elements differ; the caller's work beside the sum queued %d times "
          "by %d ranks", bad, beside_calls, P);
    group_free(&g);
}

// One layer's FP8 state, delayed scaling, `steps` steps into its history (0: the first step, whose casts take the
// whole tensor's amax), the history's amax of each (tensor, amax) given (the others 0); not recording.
static void fp8_test_device(Fp8Device *d, int steps, std::initializer_list<std::pair<int, float>> amax) {
    Fp8Recipe recipe = {FP8_DELAYED, 4, 0, 1.0f, 0, 1};
    fp8_device_init(d, &recipe, 1);
    d->steps = steps;
    d->recording = 0;
    std::vector<float> history(d->tensors, 0.0f);
    for (const auto &a : amax) { history[a.first] = a.second; }
    copy_now(d->amax_scale, history.data(), history.size() * sizeof(float), cudaMemcpyHostToDevice);
}

// A weight's codes (rows x cols) and their transpose after them, as an update casts them (not recorded).
template <typename T> static uint8_t *fp8_weight_codes(Fp8Device *d, int tw, const T *w, int rows, int cols) {
    uint8_t *q = (uint8_t *)cuda_alloc((size_t)2 * rows * cols, "weight codes");
    float *partials = (float *)cuda_alloc(d->amax_blocks * sizeof(float), "amax scratch");
    fp8_cast(d, tw, Fp8Plain<T>{w}, rows, cols, Fp8CastOut{q, q + (size_t)rows * cols, rows, 0, NULL}, false,
             FP8_SCALE_RECIPE, partials, g_cuda.stream);
    return q;
}

// A code buffer, poisoned: a byte the cast should write and did not shows.
static uint8_t *poisoned_codes(size_t bytes) {
    uint8_t *c = (uint8_t *)cuda_alloc(bytes, "codes");
    cudaCheck(cudaMemsetAsync(c, POISON_BYTE, bytes, g_cuda.stream));
    return c;
}

// An FP8 layer's state for its backward: its weight's codes wq (out x in, their transpose after them), its output
// gradient's codes and their transpose (N_TOKENS x out each, poisoned), its amax scratch.
static Fp8Linear fp8_test_linear(Fp8Device *d, int linear, uint8_t *wq, size_t out, size_t in) {
    Fp8Linear q;
    memset(&q, 0, sizeof(q));
    q.dev = d;
    q.linear = linear;
    q.w = wq;
    q.w_t = wq + out * in;
    q.dy = poisoned_codes(N_TOKENS * out);
    q.dy_t = poisoned_codes(N_TOKENS * out);
    q.partials = (float *)cuda_alloc(d->amax_blocks * sizeof(float), "amax scratch");
    return q;
}

/*
 * FP8 (llmc/matmul.cuh's Fp8Linear, one layer, delayed scaling): a column-parallel layer's all-gather + GEMM, each
 * rank with its own codes and kept transposed copy, one recipe state for the group (so the ranks' recorded amaxes
 * meet in one word, as the world's max meets them at the end of a step). The modes:
 */
typedef enum {
    FP8_FIRST_STEP,  // no history yet: the activations gathered whole, then one cast and GEMM of all N rows
    FP8_ACTIVATIONS, // scales from the history, --sp-fp8-codes 0: the activations gathered, each chunk cast and GEMMed
    FP8_CODES,       // scales from the history: each rank's rows cast, their codes gathered, a chunk GEMMed as it lands
    FP8_CODES_PIECES // the same with slots a third of a chunk's codes: moved in pieces, read where they are gathered
} Fp8RingMode;
static const char *const FP8_RING_MODES[] = {"first step, whole", "activations", "codes", "codes in pieces"};
#define FP8_WHOLE_TOL (1.0 / 64) // row blocks against one GEMM of all rows: another order of fp32 (fast) accumulation
                                 // and bf16's rounding; a wrong block, code or scale is off by O(1)

template <typename T> static void test_forward_fp8(int P, const char *type, Fp8RingMode mode) {
    Group g;
    size_t n = N_TOKENS / P;
    bool codes = mode == FP8_CODES || mode == FP8_CODES_PIECES;
    size_t moved = codes ? n * CH : n * CH * sizeof(T); // a chunk's bytes
    group_make(&g, P, mode == FP8_CODES_PIECES ? (moved + 2) / 3 : moved);
    int tx = fp8_tensor(0, LIN_QKV, FP8_INPUT), tw = fp8_tensor(0, LIN_QKV, FP8_WEIGHT);
    Fp8Device d; // the input's amax below its largest |x|: its largest codes saturate, as a rising amax's do
    fp8_test_device(&d, mode == FP8_FIRST_STEP ? 0 : 1, {{tx, 0.75f}, {tw, 0.1f}});
    std::vector<T> x = random_vec<T>((size_t)N_TOKENS * CH, 81, 1.0f), w = random_vec<T>((size_t)FEAT * CH, 82, 0.1f);
    std::vector<T> b = random_vec<T>(FEAT, 83, 0.1f);
    T *dw = to_device(w), *db = to_device(b), *dx = to_device(x);
    uint8_t *wq = fp8_weight_codes(&d, tw, dw, FEAT, CH);
    auto make_fp8 = [&]() {
        Fp8Linear q;
        memset(&q, 0, sizeof(q));
        q.dev = &d;
        q.layer = 0;
        q.linear = LIN_QKV;
        q.w = wq;
        q.w_t = wq + FEAT * CH;
        q.x = (uint8_t *)cuda_alloc((size_t)N_TOKENS * CH, "input codes");
        q.x_t = poisoned_codes((size_t)N_TOKENS * CH);
        q.partials = (float *)cuda_alloc(d.amax_blocks * sizeof(float), "amax scratch");
        q.keeps_input = 1;
        return q;
    };
    Fp8Linear q[MAX_P], ref = make_fp8();
    std::vector<T *> inp(P), out(P);
    for (int i = 0; i < P; i++) {
        q[i] = make_fp8();
        inp[i] = rank_rows(x, i, n, CH, -7.0f);
        out[i] = (T *)cuda_alloc((size_t)N_TOKENS * FEAT * sizeof(T), "out");
    }
    // The reference first: the same FP8 row blocks without the ring (the first step: the one cast and GEMM of all
    // rows), not recorded. Run before the ring, it also makes the FP8 GEMMs' first launch, which loads cuBLASLt's
    // kernels and waits for the GPU's work in flight: inside the ring that would wait for a rank not yet queued.
    d.recording = 0;
    Linear<T> plain = make_linear<T>(CH, FEAT, dw, db, LINEAR_COLUMN, (TensorParallel *)NULL);
    plain.fp8 = &ref;
    T *blocks = (T *)cuda_alloc((size_t)N_TOKENS * FEAT * sizeof(T), "row blocks"), *whole = (T *)cuda_alloc(
        (size_t)N_TOKENS * FEAT * sizeof(T), "whole");
    if (mode != FP8_FIRST_STEP) {
        for (int c = 0; c < P; c++) {
            linear_rows_forward(plain, db, blocks, dx + c * n * CH, (int)(c * n), (int)((c + 1) * n), N_TOKENS,
                                (T *)NULL, g_cuda.stream);
        }
    }
    linear_rows_forward(plain, db, whole, dx, 0, N_TOKENS, N_TOKENS, (T *)NULL, g_cuda.stream);
    group_sync();
    d.recording = 1;
    for (int i = 0; i < P; i++) {
        group_rank(&g, i);
        g.tp[i].fp8_codes = mode != FP8_ACTIVATIONS; // the trainer's --sp-fp8-codes
        Linear<T> lin = make_linear<T>(CH, FEAT, dw, db, LINEAR_COLUMN, &g.tp[i]);
        lin.fp8 = &q[i];
        linear_forward(lin, out[i], inp[i], (T *)NULL, sp_chunk(P, i), g.compute[i]);
    }
    group_done();
    group_wait(&g, type, "FP8 all-gather + GEMM");
    unsigned amax_bits = to_host(d.amax_step + tx, 1)[0], want_bits = 0;
    for (const T &v : x) { want_bits = std::max(want_bits, host_bits(fabsf(host_float(v)))); }
    std::vector<T> hw = to_host(whole, (size_t)N_TOKENS * FEAT);
    std::vector<T> hb = mode == FP8_FIRST_STEP ? hw : to_host(blocks, (size_t)N_TOKENS * FEAT);
    std::vector<uint8_t> xq = to_host(ref.x, (size_t)N_TOKENS * CH), xt = to_host(ref.x_t, (size_t)N_TOKENS * CH);
    int bad_out = 0, bad_codes = 0;
    double worst = 0.0, top = 0.0;
    for (int i = 0; i < P; i++) {
        std::vector<T> oi = to_host(out[i], (size_t)N_TOKENS * FEAT);
        bad_out += count_diff(oi, hb, 0, oi.size());
        bad_codes += count_diff(to_host(q[i].x, (size_t)N_TOKENS * CH), xq, 0, xq.size());
        bad_codes += count_diff(to_host(q[i].x_t, (size_t)N_TOKENS * CH), xt, 0, xt.size());
        for (size_t k = 0; k < oi.size(); k++) {
            worst = std::max(worst, fabs((double)host_float(oi[k]) - host_float(hw[k])));
            top = std::max(top, fabs((double)host_float(hw[k])));
        }
    }
    char name[200];
    snprintf(name, sizeof(name), "fp8 %s P %d %s: output, codes and transposed codes bit for bit as %s", type, P,
             FP8_RING_MODES[mode], mode == FP8_FIRST_STEP ? "one GEMM of all rows" : "the same row blocks alone");
    check(bad_out == 0 && bad_codes == 0, name, "%d output elements, %d code bytes differ", bad_out, bad_codes);
    snprintf(name, sizeof(name), "fp8 %s P %d %s: recorded amax the whole input's", type, P, FP8_RING_MODES[mode]);
    check(amax_bits == want_bits, name, "recorded %g, the input's largest |x| %g", bits_float(amax_bits),
          bits_float(want_bits));
    snprintf(name, sizeof(name), "fp8 %s P %d %s: against one GEMM of all rows", type, P, FP8_RING_MODES[mode]);
    check(worst <= FP8_WHOLE_TOL * top, name, "max |diff| %.3g of max %.3g (tol %.2g relative)", worst, top,
          FP8_WHOLE_TOL);
    group_free(&g);
}

/*
 * FP8 backward of a row-parallel fc projection beside the gather of its output gradient (linear_backward_gather, then
 * linear_backward_input with act_aux; delayed scaling past its first step): each chunk's input-gradient GEMM as the
 * chunk lands, and the activation's backward of it cast as fc's output gradient. act_aux is fc's output, FEAT columns
 * under GELU and 2 FEAT ([gate | up]) under SwiGLU, so that chunk c's rows of it start c n rows of that width in. Every
 * rank's input gradient, its output gradient's codes and fc's, with their transposed copies, equal bit for bit the
 * same FP8 row blocks run without the ring (all N rows at once where the chunks are not whole cast tiles, as the
 * trainer then gathers first).
 */
template <typename T> static void test_backward_fp8(int P, const char *type, int act) {
    Group g;
    size_t n = N_TOKENS / P, A = act == MLP_SWIGLU ? 2 * FEAT : FEAT; // act_aux's columns
    group_make(&g, P, n * CH * sizeof(T));
    int tg = fp8_tensor(0, LIN_FCPROJ, FP8_GRAD), tw = fp8_tensor(0, LIN_FCPROJ, FP8_WEIGHT);
    Fp8Device d; // the output gradient's amax below its largest |dy|: its largest codes saturate
    fp8_test_device(&d, 1, {{tg, 0.75f}, {tw, 0.1f}, {fp8_tensor(0, LIN_FC, FP8_GRAD), 1.0f}});
    std::vector<T> dout = random_vec<T>((size_t)N_TOKENS * CH, 91, 1.0f);
    std::vector<T> w = random_vec<T>((size_t)CH * FEAT, 92, 0.1f);
    T *dw = to_device(w), *ddout = to_device(dout), *aux = to_device(random_vec<T>((size_t)N_TOKENS * A, 93, 1.0f));
    uint8_t *wq = fp8_weight_codes(&d, tw, dw, CH, FEAT);
    Fp8Linear fcproj[MAX_P + 1], fc[MAX_P + 1]; // the ranks', then the reference's
    for (int i = 0; i <= P; i++) {
        Fp8Linear &q = fcproj[i], &p = fc[i];
        q = fp8_test_linear(&d, LIN_FCPROJ, wq, CH, FEAT);
        memset(&p, 0, sizeof(p));
        p.dev = &d;
        p.linear = LIN_FC;
        q.act_producer = &p;
        p.act = act;
        p.dy = poisoned_codes((size_t)N_TOKENS * A);
        p.dy_t = poisoned_codes((size_t)N_TOKENS * A);
    }
    // the reference first (it also makes the FP8 GEMM's first launch, outside the ring: see test_forward_fp8)
    Linear<T> plain = make_linear<T>(FEAT, CH, dw, (const T *)NULL, LINEAR_ROW, (TensorParallel *)NULL);
    plain.fp8 = &fcproj[P];
    T *ref = (T *)cuda_alloc((size_t)N_TOKENS * FEAT * sizeof(T), "ref");
    bool by_rows = fp8_dgrad_by_rows(&d, (int)n);
    for (int c = 0; c < (by_rows ? P : 1); c++) {
        size_t r0 = by_rows ? c * n : 0;
        linear_dgrad(plain, ref + r0 * FEAT, ddout + r0 * CH, aux + r0 * A, by_rows ? (int)n : N_TOKENS, g_cuda.stream,
                     (int)r0, N_TOKENS);
    }
    group_sync();
    std::vector<T *> dy(P), dx(P);
    for (int i = 0; i < P; i++) {
        dy[i] = rank_rows(dout, i, n, CH, 5.0f);
        dx[i] = (T *)cuda_alloc((size_t)N_TOKENS * FEAT * sizeof(T), "dinp");
    }
    for (int i = 0; i < P; i++) {
        group_rank(&g, i);
        Linear<T> lin = make_linear<T>(FEAT, CH, dw, (const T *)NULL, LINEAR_ROW, &g.tp[i]);
        lin.fp8 = &fcproj[i];
        linear_backward_gather(lin, dy[i], N_TOKENS, g.compute[i]);
        linear_backward_input(lin, dx[i], dy[i], (const T *)NULL, aux, N_TOKENS, g.compute[i]);
    }
    group_done();
    group_wait(&g, type, "FP8 row-parallel input gradient");
    const Fp8Linear &rq = fcproj[P], &rp = fc[P];
    std::vector<uint8_t> qdy = to_host(rq.dy, (size_t)N_TOKENS * CH), qdy_t = to_host(rq.dy_t, (size_t)N_TOKENS * CH);
    std::vector<uint8_t> pdy = to_host(rp.dy, (size_t)N_TOKENS * A), pdy_t = to_host(rp.dy_t, (size_t)N_TOKENS * A);
    std::vector<T> hr = to_host(ref, (size_t)N_TOKENS * FEAT);
    int bad_dx = 0, bad_own = 0, bad_fc = 0;
    for (int i = 0; i < P; i++) {
        bad_dx += count_diff(to_host(dx[i], (size_t)N_TOKENS * FEAT), hr, 0, hr.size());
        bad_own += count_diff(to_host(fcproj[i].dy, qdy.size()), qdy, 0, qdy.size());
        bad_own += count_diff(to_host(fcproj[i].dy_t, qdy_t.size()), qdy_t, 0, qdy_t.size());
        bad_fc += count_diff(to_host(fc[i].dy, pdy.size()), pdy, 0, pdy.size());
        bad_fc += count_diff(to_host(fc[i].dy_t, pdy_t.size()), pdy_t, 0, pdy_t.size());
    }
    char name[200];
    snprintf(name, sizeof(name), "fp8 %s P %d %s: row-parallel input gradient beside its output gradient's gather, "
             "codes bit for bit as %s", type, P, act == MLP_SWIGLU ? "SwiGLU" : "GELU",
             by_rows ? "the same row blocks alone" : "all rows at once");
    check(bad_dx == 0 && bad_own == 0 && bad_fc == 0, name,
          "%d input-gradient elements, %d output-gradient code bytes, %d of fc's output-gradient code bytes differ",
          bad_dx, bad_own, bad_fc);
    group_free(&g);
}

/*
 * FP8 backward of a column-parallel layer beside the ring's reduce-scatter of its input gradient (delayed scaling past
 * its first step; the products it sends on in `pieces` pieces): each block's output gradient cast, then its GEMM. Each
 * rank's own rows equal, bit for bit, the same FP8 blocks' products summed in the ring's order (all N rows at once
 * where the chunks are not whole cast tiles, then reduce-scattered, as the trainer does), and its output gradient's
 * codes and their transposed copy the same blocks' casts.
 */
template <typename T> static void test_backward_fp8_column(int P, const char *type, int pieces) {
    Group g;
    size_t n = N_TOKENS / P;
    group_make(&g, P, n * CH * sizeof(T));
    group_pieces(&g, pieces);
    int tg = fp8_tensor(0, LIN_QKV, FP8_GRAD), tw = fp8_tensor(0, LIN_QKV, FP8_WEIGHT);
    Fp8Device d; // the output gradient's amax below its largest |dy|: its largest codes saturate
    fp8_test_device(&d, 1, {{tg, 0.75f}, {tw, 0.1f}});
    bool by_rows = fp8_dgrad_by_rows(&d, (int)n);
    std::vector<std::vector<T>> prod(P);
    std::vector<std::vector<uint8_t>> want_dy(P), want_dy_t(P);
    std::vector<T *> dyc(P), dxc(P), wc(P);
    Fp8Linear q[MAX_P];
    // each rank's dout (N, FEAT) and weight (FEAT, CH); its products first, the same blocks without the ring (which
    // also makes the FP8 GEMMs' first launches outside the ring: see test_forward_fp8)
    for (int i = 0; i < P; i++) {
        dyc[i] = to_device(random_vec<T>((size_t)N_TOKENS * FEAT, 100 + i, 1.0f));
        wc[i] = to_device(random_vec<T>((size_t)FEAT * CH, 110 + i, 0.1f));
        uint8_t *wq = fp8_weight_codes(&d, tw, wc[i], FEAT, CH);
        dxc[i] = (T *)cuda_alloc((size_t)N_TOKENS * CH * sizeof(T), "dinp");
        Fp8Linear ref = fp8_test_linear(&d, LIN_QKV, wq, FEAT, CH);
        q[i] = fp8_test_linear(&d, LIN_QKV, wq, FEAT, CH);
        Linear<T> one = make_linear<T>(CH, FEAT, wc[i], (const T *)NULL, LINEAR_COLUMN, (TensorParallel *)NULL);
        one.fp8 = &ref;
        prod[i] = column_products(one, dyc[i], i, P, n, pieces, by_rows);
        want_dy[i] = to_host(ref.dy, (size_t)N_TOKENS * FEAT);
        want_dy_t[i] = to_host(ref.dy_t, (size_t)N_TOKENS * FEAT);
    }
    for (int i = 0; i < P; i++) {
        group_rank(&g, i);
        Linear<T> lin = make_linear<T>(CH, FEAT, wc[i], (const T *)NULL, LINEAR_COLUMN, &g.tp[i]);
        lin.fp8 = &q[i];
        linear_backward_input(lin, dxc[i], dyc[i], (const T *)NULL, (const T *)NULL, N_TOKENS, g.compute[i]);
        linear_backward_join(lin, g.compute[i]);
    }
    group_done();
    group_wait(&g, type, "FP8 column-parallel input gradient");
    int bad = ring_sum_mismatches(dxc, prod, P, n * CH), bad_codes = 0;
    for (int i = 0; i < P; i++) {
        bad_codes += count_diff(to_host(q[i].dy, want_dy[i].size()), want_dy[i], 0, want_dy[i].size());
        bad_codes += count_diff(to_host(q[i].dy_t, want_dy_t[i].size()), want_dy_t[i], 0, want_dy_t[i].size());
    }
    char name[200];
    snprintf(name, sizeof(name), "fp8 %s P %d: column-parallel input gradient beside its reduce-scatter in %d pieces, "
             "%s", type, P, pieces, by_rows ? "by row blocks" : "all rows at once");
    check(bad == 0 && bad_codes == 0, name, "%d summed elements, %d output-gradient code bytes differ", bad, bad_codes);
    group_free(&g);
}

// The collectives alone, in the TP stream's order, with a part three slots long.
template <typename T> static void test_collectives(int P, const char *type, int pieces) {
    Group g;
    size_t n = (size_t)N_TOKENS / P * CH;
    group_make(&g, P, (n * sizeof(T) + 2) / 3);
    group_pieces(&g, pieces);
    char name[160];
    std::vector<T> whole = random_vec<T>(n * P, 60, 1.0f);
    std::vector<std::vector<T>> parts(P);
    std::vector<T *> buf(P), sums(P), mine(P);
    for (int i = 0; i < P; i++) {
        std::vector<T> h(n * P, to_type<T>(3.0f));
        memcpy(&h[i * n], &whole[i * n], n * sizeof(T));
        buf[i] = to_device(h);
        parts[i] = random_vec<T>(n * P, 70 + i, 1.0f);
        sums[i] = to_device(parts[i]);
        mine[i] = (T *)cuda_alloc(n * sizeof(T), "mine");
    }
    for (int i = 0; i < P; i++) {
        tp_fork(&g.tp[i], g.compute[i]);
        tp_all_gather(&g.tp[i], buf[i], n, "test gather");
        tp_reduce_scatter(&g.tp[i], sums[i], mine[i], n, "test reduce-scatter");
        tp_join(&g.tp[i], g.compute[i], "test collectives");
    }
    group_wait(&g, type, "the collectives alone");
    int bad_ag = 0, bad_rs = 0;
    for (int i = 0; i < P; i++) {
        bad_ag += count_diff(to_host(buf[i], n * P), whole, 0, n * P);
        std::vector<T> got = to_host(mine[i], n), want = ring_sum(parts, P, i, n);
        bad_rs += count_diff(got, want, 0, n);
    }
    snprintf(name, sizeof(name), "%s P %d: ring all-gather and reduce-scatter in transfers of %zu bytes (%d pieces)",
             type, P, g.tp[0].ring.slot_bytes, pieces);
    check(bad_ag == 0 && bad_rs == 0, name, "%d gathered, %d summed elements differ", bad_ag, bad_rs);
    group_free(&g);
}

int main(void) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", STREAM_CONNECTIONS, 0); // before the context exists; a caller's value stays
    // Every kernel loaded now: a kernel's first launch loads it lazily, which waits for the GPU's work in flight, and
    // one simulated rank's ring waits for a rank the host queues after it.
    setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    cuda_context_init();
    g_shared_workspace = g_cuda.lt_workspace;
    for (int P = 2; P <= MAX_P; P++) {
        for (int pieces : RS_PIECES) {
            test_forward<float>(P, "fp32", pieces);
            test_forward<bf16>(P, "bf16", pieces);
            test_backward<float>(P, "fp32", pieces);
            test_backward<bf16>(P, "bf16", pieces);
            test_collectives<float>(P, "fp32", pieces);
            test_collectives<bf16>(P, "bf16", pieces);
        }
        for (Fp8RingMode mode : {FP8_FIRST_STEP, FP8_ACTIVATIONS, FP8_CODES, FP8_CODES_PIECES}) {
            test_forward_fp8<bf16>(P, "bf16", mode);
            test_forward_fp8<float>(P, "fp32", mode);
        }
        for (int act : {MLP_GELU, MLP_SWIGLU}) {
            test_backward_fp8<bf16>(P, "bf16", act);
            test_backward_fp8<float>(P, "fp32", act);
        }
        for (int pieces : RS_PIECES) {
            test_backward_fp8_column<bf16>(P, "bf16", pieces);
            test_backward_fp8_column<float>(P, "fp32", pieces);
        }
    }
    return test_exit();
}
