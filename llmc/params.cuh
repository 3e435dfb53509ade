/*
 * params.cuh: the parameters on the GPU: initialization and the compute-precision copy.
 *
 * Initialization runs llmc/init.h's param_init_value on the device: element e of tensor t is a pure function of
 * (seed, t, e), so the GPU starts from exactly the CPU build's weights (up to libm's last bit in Box-Muller, see
 * rng.h), and a tensor-parallel or GTP rank draws just its own shard. The GEMMs of bf16 mode read a bf16 copy of the
 * fp32 master weights; convert_from_float refreshes it whenever the masters are set from outside (AdamW keeps it
 * current during training).
 */
#ifndef LLMC_PARAMS_CUH
#define LLMC_PARAMS_CUH

#include "cuda_common.cuh"
#include "init.h"
#include "gtp_plan.h"

// Local element e of tensor t gets the value of its global element (its TP-local element by llmc/gtp_plan.h, that
// one's global element by llmc/tp_layout.h), so every TP and GTP layout starts from the single-GPU weights; GTP's
// padding gets zeros.
__global__ void __launch_bounds__(256) param_init_kernel(float *dst, InitSpec spec, uint64_t seed, int t, size_t n,
                                                         GtpMap gmap, TpMap map) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) { return; }
    size_t tp_e = gtp_map_element(&gmap, e);
    dst[e] = tp_e == GTP_PADDING ? 0.0f : param_init_value(spec, seed, t, tp_map_element(&map, tp_e));
}

// This rank's tensors (its layout `local`, llmc/gtp_plan.h) into the flat fp32 buffer params.
static void param_init_device(float *params, const GPTConfig *c, const Mesh *m, const ParamLayout *local,
                              uint64_t seed, cudaStream_t stream) {
    ParamLayout full;
    param_layout(c, &full);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (local->size[t] == 0) { continue; } // a tensor the model does not have: no launch of zero blocks
        InitSpec spec = param_init_spec(c, &full, t); // specs refer to the full tensor (wte's zero padding rows)
        param_init_kernel<<<grid_for(local->size[t], 256), 256, 0, stream>>>(
            params + local->offset[t], spec, seed, t, local->size[t], gtp_map(c, m, t), tp_map(c, m, t));
        cudaCheckLaunch();
    }
}

template <typename T> __global__ void __launch_bounds__(256) convert_kernel(T *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dst[i] = from_float<T>(src[i]); }
}

template <typename T> static void convert_from_float(T *dst, const float *src, size_t n, cudaStream_t stream) {
    convert_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dst, src, n);
    cudaCheckLaunch();
}

#endif // LLMC_PARAMS_CUH
