/*
 * kernel.c - the reduction job (kernel.h) on the host side: its check, its launch geometry, the
 * names of its GPU kernels, and its run on the CPU through the GPU kernel's own block
 * decomposition (decomp.h), which is what the simulated device executes and what the unit tests
 * compare with the host kernels (host.c) byte for byte.
 *
 * The kernels themselves are compiled by nvcc from reduce_cuda.cu into a fatbin embedded in the
 * library (reduce_fatbin.S; fatbin_none.c in a build without nvcc).
 */
#include "config.h"
#include "reduce/decomp.h"
#include "reduce/kernel.h"

#include <stdint.h>

/* Partial overlap of [a, a + n) and [b, b + n): an exact alias (a == b) is allowed. */
static int st_reduce_overlaps(const void *a, const void *b, size_t n)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

    return x != y && x < y + n && y < x + n;
}

st_status_t st_reduce_job_check(const st_reduce_job_t *job)
{
    size_t esize, bytes;

    if (job == NULL || job->nsrcs < 1 || job->nsrcs > ST_REDUCE_MAX_SRCS) {
        return ST_ERR_INVALID;
    }
    esize = st_dtype_size(job->redop.dtype);
    if (esize == 0 || (unsigned)job->redop.kind > (unsigned)ST_RED_MIN) {
        return ST_ERR_INVALID;
    }
    if (job->count == 0) {
        return ST_OK;
    }
    if (job->dst == NULL || job->count > SIZE_MAX / esize) {
        return ST_ERR_INVALID;
    }
    bytes = job->count * esize;
    for (int i = 0; i < job->nsrcs; i++) {
        if (job->srcs[i] == NULL || st_reduce_overlaps(job->dst, job->srcs[i], bytes)) {
            return ST_ERR_INVALID;
        }
    }
    return ST_OK;
}

/* One thread per 16-byte pack (an element when the pointers do not allow packs), up to
 * ST_KDEC_GRID_MAX blocks of ST_KDEC_BLOCK: a large job fills the GPU once and loops, a small one
 * takes as few blocks as it needs. */
void st_reduce_job_geometry(const st_reduce_job_t *job, unsigned *grid, unsigned *block)
{
    size_t esize = st_dtype_size(job->redop.dtype);
    size_t units = job->count;

    if (esize != 0 && st_kdec_plan(job, esize).mode == ST_KDEC_PACKS) {
        units = ST_DIV_ROUND_UP(job->count, ST_KDEC_PACK / esize);
    }
    units  = ST_DIV_ROUND_UP(units, ST_KDEC_BLOCK);
    *grid  = (unsigned)ST_MAX(ST_MIN(units, (size_t)ST_KDEC_GRID_MAX), 1);
    *block = ST_KDEC_BLOCK;
}

typedef void (*st_kdec_fn_t)(const st_reduce_job_t *job, unsigned nblocks, unsigned nthreads,
                             unsigned block, unsigned thread);

#define ST_KDEC_TABLE_ROW(_op, _kind, _n, _dtype) [_dtype][_kind] = st_kdec_##_op##_##_n,
static const st_kdec_fn_t st_kdec_table[strataNumTypes][ST_RED_MIN + 1] = {
    ST_KDEC_FOREACH(ST_KDEC_TABLE_ROW)};

#define ST_KDEC_STR(_x) #_x
#define ST_KDEC_XSTR(_x) ST_KDEC_STR(_x)
#define ST_KDEC_NAME_ROW(_op, _kind, _n, _dtype)                                                   \
    [_dtype][_kind] = ST_KDEC_XSTR(ST_KDEC_NAME(_op, _n)),
static const char *const st_kdec_names[strataNumTypes][ST_RED_MIN + 1] = {
    ST_KDEC_FOREACH(ST_KDEC_NAME_ROW)};

void st_reduce_job_run_host(const st_reduce_job_t *job)
{
    st_kdec_fn_t fn;
    unsigned     grid, block;

    if (st_reduce_job_check(job) != ST_OK || job->count == 0) {
        return;
    }
    fn = st_kdec_table[job->redop.dtype][job->redop.kind];
    st_reduce_job_geometry(job, &grid, &block);
    /* The threads in turn, as if each ran alone: they share no element, so any order gives the
     * GPU's result. */
    for (unsigned b = 0; b < grid; b++) {
        for (unsigned t = 0; t < block; t++) {
            fn(job, grid, block, b, t);
        }
    }
}

const char *st_reduce_kernel_name(const st_reduce_job_t *job)
{
    if (st_reduce_job_check(job) != ST_OK) {
        return NULL;
    }
    return st_kdec_names[job->redop.dtype][job->redop.kind];
}
