/*
 * reduce_cuda.cu - the GPU reduction kernels: one __global__ function per datatype x op, named
 * st_reduce_kernel_<op>_<n> (st_reduce_kernel_name), taking an st_reduce_job_t by value. Each is
 * the block decomposition of decomp.h called with the thread's blockIdx and threadIdx, over the
 * element operations of elem.h: the code that st_reduce_job_run_host runs on the CPU and the unit
 * tests check against the host kernels.
 *
 * Built by nvcc into a fatbin (sm_80, sm_90 and compute_90 PTX; Makefile.am) that the library
 * embeds (reduce_fatbin.S) and device/dev_cuda.c loads with cuModuleLoadData; launched with
 * st_reduce_job_geometry's grid and block. Compiled with -fmad=false (a premul product is rounded
 * before its sum, as on the host) and without --use_fast_math (no flush of subnormals, exact
 * division).
 */
#include "reduce/decomp.h"

/* __launch_bounds__: blocks of ST_KDEC_BLOCK threads, at least 2 per SM, which holds every kernel
 * to 64 registers a thread; the build fails if one would spill (Makefile.am). */
#define ST_REDUCE_KERNEL(_op, _kind, _n, _dtype)                                                   \
    extern "C" __global__ void __launch_bounds__(ST_KDEC_BLOCK, 2)                                 \
        ST_KDEC_NAME(_op, _n)(const st_reduce_job_t job)                                           \
    {                                                                                              \
        st_kdec_##_op##_##_n(&job, gridDim.x, blockDim.x, blockIdx.x, threadIdx.x);                \
    }

ST_KDEC_FOREACH(ST_REDUCE_KERNEL)
