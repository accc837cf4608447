/*
 * kernel.h - a reduction job as the device runs it: the one kernel strata launches on a GPU
 * (reduce_cuda.cu) and that the simulated device runs on the CPU (device/dev_sim.c), with the same
 * element code as the host kernels (elem.h) and the same block decomposition (decomp.h), so that
 * the CPU tests check the GPU's arithmetic and its split of the work.
 *
 * A job computes, for i < count (elements of redop->dtype):
 *   acc    = pre_first ? prescale(srcs[0][i]) : srcs[0][i]
 *   acc    = acc OP srcs[s][i]                for s = 1 .. nsrcs-1, in that order, rounding after
 *                                             each operation (fp16/bf16: in fp32, to nearest even)
 *   dst[i] = post ? postop(acc) : acc
 * so nsrcs 1 without pre_first or post is a copy; the host's st_reduce_pre is {src}, pre_first;
 * st_reduce_apply is {local, in}, pre_first; st_reduce_combine is {a, b}; st_intra_reduce is the
 * m sources in local-rank order. dst may alias any source exactly; no other overlap. Pointers may
 * be device memory, the pinned host memory the device maps, or (simulated device) host memory;
 * no alignment is required (16-byte packs are used where every pointer lies at dst's offset modulo
 * 16, typed element accesses where every pointer is aligned to the element, byte accesses
 * otherwise). A NaN the job computes is its type's canonical quiet NaN (reduce.h), as on the host.
 */
#ifndef ST_REDUCE_KERNEL_H
#define ST_REDUCE_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "reduce/reduce.h"

#define ST_REDUCE_MAX_SRCS 16 /* sources of one job; a caller with more chains jobs */

typedef struct st_reduce_job {
    st_redop_t  redop;
    void       *dst;
    const void *srcs[ST_REDUCE_MAX_SRCS];
    int         nsrcs;     /* 1 .. ST_REDUCE_MAX_SRCS */
    int         pre_first; /* prescale srcs[0] (premul-sum, floating avg) */
    int         post;      /* apply the post op (integer avg's division) to the result */
    size_t      count;     /* elements */
} st_reduce_job_t;

/* ST_OK when job can run: nsrcs in range, a known dtype and op, non-NULL pointers unless count is
 * 0, dst overlapping no source other than exactly; ST_ERR_INVALID otherwise (not logged: the caller
 * says where). */
st_status_t st_reduce_job_check(const st_reduce_job_t *job);

/* The launch geometry of job on a GPU: *grid blocks of *block threads (grid >= 1). The kernels are
 * compiled for blocks of *block threads at most (__launch_bounds__): launch with these values;
 * each thread loops over its share, so any grid is correct, this one fills an H200 once. */
void st_reduce_job_geometry(const st_reduce_job_t *job, unsigned *grid, unsigned *block);

/* Runs job on the calling CPU thread through the kernel's own decomposition: every (block,
 * thread) of st_reduce_job_geometry in turn, each doing exactly what it does on the GPU (16-byte
 * packs where every pointer is 16-aligned, elements otherwise, the tail). What the simulated
 * device executes and what the unit tests compare, bit for bit, with the host kernels. */
void st_reduce_job_run_host(const st_reduce_job_t *job);

/* The name of the __global__ function (extern "C", in reduce_cuda.cu) that runs job: one per
 * dtype x op; it takes the st_reduce_job_t by value. NULL for an invalid job. */
const char *st_reduce_kernel_name(const st_reduce_job_t *job);

/* The kernels compiled by nvcc for the GPUs strata targets (a fatbin: sm_80, sm_90 and
 * compute_90 PTX), embedded in the library; st_reduce_fatbin_size is 0 in a build without nvcc.
 * device/dev_cuda.c loads it with cuModuleLoadData. */
extern const unsigned char st_reduce_fatbin[];
extern const size_t        st_reduce_fatbin_size;

#endif
