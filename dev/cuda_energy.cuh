/*
 * cuda_energy.cuh: what a kind of GPU work costs in energy, for the dev benchmarks. Training runs at the card's power
 * cap (700 W on H200), where a step's time is its energy over the cap, not the sum of its kernels' times at full
 * clocks (dev/log/2026-11-26.md, "The step is bound by energy"). So each workload runs back to back for
 * ENERGY_SECONDS after ENERGY_WARMUP_SECONDS (the clocks settle at the cap), and NVML's energy counter (read through
 * libnvidia-ml, loaded at run time: the driver has it, the toolkit only a stub) gives joules per call and per unit of
 * work (TFLOP, GB), beside the mean power and the SM clock at the end.
 */
#ifndef DEV_CUDA_ENERGY_CUH
#define DEV_CUDA_ENERGY_CUH

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>

#include "llmc/cuda_common.cuh"

#define ENERGY_SECONDS 3.0
#define ENERGY_WARMUP_SECONDS 1.5
#define ENERGY_BATCH 8   // calls queued between synchronizations
#define NVML_CLOCK_SM 1

static double now_seconds(void) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Nvml {
    void *device;
    int (*energy_mj)(void *, unsigned long long *); // nvmlDeviceGetTotalEnergyConsumption
    int (*clock_mhz)(void *, int, unsigned *);      // nvmlDeviceGetClockInfo
};

static Nvml nvml_open(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) { fail("--energy needs the driver's libnvidia-ml.so.1: %s", dlerror()); }
    Nvml n = {};
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*handle)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    n.energy_mj = (int (*)(void *, unsigned long long *))dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption");
    n.clock_mhz = (int (*)(void *, int, unsigned *))dlsym(lib, "nvmlDeviceGetClockInfo");
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    if (!init || !handle || !n.energy_mj || !n.clock_mhz || init() != 0 || handle((unsigned)dev, &n.device) != 0) {
        fail("NVML did not open device %d (libnvidia-ml.so.1 lacks a function or refused)", dev);
    }
    return n;
}

static unsigned long long nvml_energy_mj(const Nvml &n) {
    unsigned long long mj = 0;
    if (n.energy_mj(n.device, &mj) != 0) { fail("NVML has no energy counter for this GPU"); }
    return mj;
}

// The card's power with nothing queued, over ENERGY_SECONDS.
static void energy_idle(const Nvml &n) {
    unsigned long long e0 = nvml_energy_mj(n);
    double t0 = now_seconds();
    sleep((unsigned)ENERGY_SECONDS);
    printf("%-20s %6.1f W\n", "idle", (nvml_energy_mj(n) - e0) * 1e-3 / (now_seconds() - t0));
}

// Runs `work` (one call, queued on `stream`) for the warm-up, then for ENERGY_SECONDS, and prints the energy per call
// and per unit (units per call: TFLOP or GB; unit names it).
template <typename F>
static void energy(const Nvml &n, const char *name, F work, cudaStream_t stream, double units, const char *unit) {
    auto run_for = [&](double seconds) {
        long calls = 0;
        double t0 = now_seconds();
        while (now_seconds() - t0 < seconds) {
            for (int i = 0; i < ENERGY_BATCH; i++, calls++) { work(); }
            cudaCheck(cudaStreamSynchronize(stream));
        }
        return calls;
    };
    run_for(ENERGY_WARMUP_SECONDS);
    unsigned long long e0 = nvml_energy_mj(n);
    double t0 = now_seconds();
    long calls = run_for(ENERGY_SECONDS);
    double seconds = now_seconds() - t0, joules = (nvml_energy_mj(n) - e0) * 1e-3;
    unsigned mhz = 0;
    n.clock_mhz(n.device, NVML_CLOCK_SM, &mhz);
    printf("%-20s %6.1f W  SM %4u MHz  %8.3f ms a call  %7.1f %s/s  %7.3f J a call  %7.3f J per %s\n", name,
           joules / seconds, mhz, seconds / calls * 1e3, units * calls / seconds, unit, joules / calls,
           joules / (units * calls), unit);
}

#endif // DEV_CUDA_ENERGY_CUH
