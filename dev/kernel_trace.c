/*
 * kernel_trace.c: a CUPTI injection library that records when every kernel, copy and memset ran on the GPU and on
 * which stream, without serializing them (CUPTI's concurrent-kernel activity), and writes one CSV line each at exit:
 * start_ns,end_ns,stream,name. A copy's name is "memcpy KIND BYTES" (KIND: CUPTI's copy kind, e.g. DtoD, or PtoP for
 * a copy between two GPUs, which CUPTI reports as an activity of its own: the SP ring's transfers). dev/trace.sh
 * builds it, runs train_gpt under it and summarizes the steady-state steps with dev/trace_summary.py: where the GPU
 * was idle, and the time per kernel family as it runs in training (at the power limit, streams overlapping), which
 * ncu's one-kernel-at-a-time replay does not show. Under a launcher, "%r" in KTRACE_OUT becomes the process's rank
 * (RANK, or Open MPI's OMPI_COMM_WORLD_RANK), one file a rank.
 *   gcc -O2 -shared -fPIC -I$CUDA_HOME/include dev/kernel_trace.c -o libktrace.so -L$CUDA_HOME/lib64 -lcupti
 *   KTRACE_OUT=trace.csv CUDA_INJECTION64_PATH=$PWD/libktrace.so ./train_gpt ...
 */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KTRACE_BUFFER_BYTES (8u << 20) // per CUPTI activity buffer; CUPTI asks for more as they fill
#define KTRACE_ALIGN 8                 // CUPTI's required buffer alignment

#define KTRACE_PATH_MAX 4096

static FILE *g_out;

// CUPTI's copy kinds as the CSV names them (CUpti_ActivityMemcpyKind's order).
static const char *copy_kind(uint8_t kind) {
    static const char *names[] = {"unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH",
                                  "PtoP"};
    return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "other";
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = (uint8_t *)aligned_alloc(KTRACE_ALIGN, KTRACE_BUFFER_BYTES);
    *size = *buffer ? KTRACE_BUFFER_BYTES : 0;
    *max_records = 0; // as many as fit
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            fprintf(g_out, "%llu,%llu,%u,%s\n", (unsigned long long)k->start, (unsigned long long)k->end, k->streamId,
                    k->name);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            fprintf(g_out, "%llu,%llu,%u,memcpy %s %llu\n", (unsigned long long)m->start, (unsigned long long)m->end,
                    m->streamId, copy_kind(m->copyKind), (unsigned long long)m->bytes);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY2) {
            const CUpti_ActivityMemcpyPtoP4 *m = (const CUpti_ActivityMemcpyPtoP4 *)rec;
            fprintf(g_out, "%llu,%llu,%u,memcpy %s %llu\n", (unsigned long long)m->start, (unsigned long long)m->end,
                    m->streamId, copy_kind(m->copyKind), (unsigned long long)m->bytes);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            fprintf(g_out, "%llu,%llu,%u,memset\n", (unsigned long long)m->start, (unsigned long long)m->end,
                    m->streamId);
        }
    }
    free(buffer);
}

static void flush_at_exit(void) {
    cuptiActivityFlushAll(1);
    fclose(g_out);
}

// Called by the CUDA driver when it loads the library named in CUDA_INJECTION64_PATH; nonzero means success.
// KTRACE_OUT (ktrace.csv) with "%r" replaced by the rank (0 without a launcher).
static void out_path(char *path, size_t size) {
    const char *want = getenv("KTRACE_OUT"), *rank = getenv("RANK");
    if (!want) { want = "ktrace.csv"; }
    if (!rank) { rank = getenv("OMPI_COMM_WORLD_RANK"); }
    const char *at = strstr(want, "%r");
    if (!at) {
        snprintf(path, size, "%s", want);
        return;
    }
    snprintf(path, size, "%.*s%s%s", (int)(at - want), want, rank ? rank : "0", at + 2);
}

int InitializeInjection(void) {
    char path[KTRACE_PATH_MAX];
    out_path(path, sizeof(path));
    g_out = fopen(path, "w");
    if (!g_out) {
        fprintf(stderr, "kernel_trace: cannot write '%s'; set KTRACE_OUT to a writable path\n", path);
        return 0;
    }
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY2) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel_trace: CUPTI refused activity tracing (another profiler attached?)\n");
        return 0;
    }
    atexit(flush_at_exit);
    return 1;
}
