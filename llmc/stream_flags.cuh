/*
 * stream_flags.cuh: 32-bit counters in GPU memory that streams write and wait for, in stream order, without the host:
 * how SP's ring (llmc/peer_ring.cuh) and GTP's copy-engine gathers (llmc/gtp.cuh) tell a peer that bytes have landed
 * or been read, and how the compute stream waits for a collective on another stream (llmc/comm.cuh's CommSignal).
 *
 * Writes: cuStreamWriteValue32, which orders the stream's work before it as __threadfence_system does, so a flag
 * written after a copy announces the copy's bytes. Waits, two kinds:
 *   flag_wait: cuStreamWaitValue32 (GEQ, flushing remote writes where the GPU can), for the communication streams'
 *     own waits (a slot freed, a peer's read done);
 *   flag_wait_timed: a kernel of one thread that polls the flag (ld.acquire.sys) and adds the time it polled to a
 *     counter, for the compute stream's waits for communication: the wait times itself. Timing a wait with a CUDA
 *     event on each side instead cost the step more than the waits did: each timing event holds its stream ~2.9 us
 *     on an H200, where a disable-timing event costs nothing, cuStreamWaitValue32 2.0 us and the polling kernel
 *     1.6 us (dev/ring_latency.cu), and a TP=2+SP step makes ~870 such waits.
 * Both compare modulo 2^32 ((int32_t)(flag - value) >= 0), so a counter may wrap as long as its waiter is less than
 * 2^31 behind. The driver functions are taken from the driver the runtime loaded (cudaGetDriverEntryPointByVersion)
 * rather than linked, so that a binary that never waits for a flag starts where no driver is installed (--help, the
 * CPU machine's checks).
 */
#ifndef LLMC_STREAM_FLAGS_CUH
#define LLMC_STREAM_FLAGS_CUH

#include <cuda.h>
#include <cudaTypedefs.h>

#include "cuda_common.cuh"

// The driver functions the flags call (flag_driver_load), at the ABI versions these signatures are.
#define FLAG_DRIVER_WAIT_WRITE_VERSION 11070
#define FLAG_DRIVER_ERROR_VERSION 6000
static struct {
    PFN_cuStreamWaitValue32_v11070 wait_value;
    PFN_cuStreamWriteValue32_v11070 write_value;
    PFN_cuGetErrorString_v6000 error_string;
} g_flag_driver;

// user: who needs the driver and how to do without it, for the error line (e.g. "the SP ring; pass --sp-overlap 0").
static void *flag_driver_symbol(const char *name, unsigned version, const char *user) {
    void *fn = NULL;
    cudaDriverEntryPointQueryResult found;
    cudaCheck(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !fn) {
        fail("the CUDA driver has no %s (version %u) for %s, or update the driver", name, version, user);
    }
    return fn;
}

static void flag_driver_load(const char *user) {
    if (g_flag_driver.wait_value) { return; }
    g_flag_driver.wait_value = (PFN_cuStreamWaitValue32_v11070)flag_driver_symbol(
        "cuStreamWaitValue32", FLAG_DRIVER_WAIT_WRITE_VERSION, user);
    g_flag_driver.write_value = (PFN_cuStreamWriteValue32_v11070)flag_driver_symbol(
        "cuStreamWriteValue32", FLAG_DRIVER_WAIT_WRITE_VERSION, user);
    g_flag_driver.error_string =
        (PFN_cuGetErrorString_v6000)flag_driver_symbol("cuGetErrorString", FLAG_DRIVER_ERROR_VERSION, user);
}

#define cuCheck(call) cu_check_((call), #call, __FILE__, __LINE__)
static inline void cu_check_(CUresult r, const char *what, const char *file, int line) {
    if (r != CUDA_SUCCESS) {
        const char *s = NULL;
        g_flag_driver.error_string(r, &s);
        fail("CUDA driver error '%s' at %s:%d (%s)", s ? s : "unknown", file, line, what);
    }
}

static inline CUdeviceptr flag_dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

// Stream s writes value into the flag at p (this GPU's memory or a peer's), after the work queued on s before it.
static inline void flag_write(cudaStream_t s, uint32_t *p, uint32_t value) {
    cuCheck(g_flag_driver.write_value((CUstream)s, flag_dptr(p), value, CU_STREAM_WRITE_VALUE_DEFAULT));
}

// Stream s waits until the flag at p (this GPU's memory) is >= value, modulo 2^32; flags: flag_wait_flags().
static inline void flag_wait(cudaStream_t s, uint32_t *p, uint32_t value, unsigned flags) {
    cuCheck(g_flag_driver.wait_value((CUstream)s, flag_dptr(p), value, flags));
}

// cuStreamWaitValue32's flags on GPU `device`: GEQ, and a flush of remote writes where the GPU has one. The flag
// arrives after the bytes it announces (its writer's write orders them before it), but a GPU may reorder remote writes
// as they land: where it can, the wait flushes them, so the bytes are visible to the work after it.
static unsigned flag_wait_flags(int device) {
    int flush = 0;
    cudaCheck(cudaDeviceGetAttribute(&flush, cudaDevAttrCanFlushRemoteWrites, device));
    return CU_STREAM_WAIT_VALUE_GEQ | (flush ? CU_STREAM_WAIT_VALUE_FLUSH : 0);
}

__device__ __forceinline__ unsigned long long flag_clock_ns(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One thread: polls *flag until it reaches value (modulo 2^32), then adds the nanoseconds it polled to *waited_ns and
// one to *waits (atomically: waits of several streams may share the counters). The acquire load orders the bytes the
// flag announces before the work behind this kernel on its stream.
__global__ void __launch_bounds__(1) flag_wait_timed_kernel(const uint32_t *flag, uint32_t value,
                                                            unsigned long long *waited_ns, unsigned long long *waits) {
    unsigned long long t0 = flag_clock_ns();
    uint32_t v;
    do {
        asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    } while ((int32_t)(v - value) < 0);
    atomicAdd(waited_ns, flag_clock_ns() - t0);
    atomicAdd(waits, 1ull);
}

// Stream s waits until the flag at p (this GPU's memory) is >= value, modulo 2^32, adding the time it waited to
// *waited_ns and one to *waits (device counters).
static void flag_wait_timed(cudaStream_t s, const uint32_t *p, uint32_t value, unsigned long long *waited_ns,
                            unsigned long long *waits) {
    flag_wait_timed_kernel<<<1, 1, 0, s>>>(p, value, waited_ns, waits);
    cudaCheckLaunch();
}

#endif // LLMC_STREAM_FLAGS_CUH
