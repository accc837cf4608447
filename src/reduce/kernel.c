/*
 * kernel.c - the reduction job (kernel.h) on the CPU. PROVISIONAL: runs a job through the host
 * kernels (host.c) so that the device layer can be built against it; the GPU kernel's block
 * decomposition replaces it (reduce_cuda.cu, elem.h).
 */
#include "config.h"
#include "reduce/kernel.h"

#include <string.h>

st_status_t st_reduce_job_check(const st_reduce_job_t *job)
{
    if (job == NULL || job->nsrcs < 1 || job->nsrcs > ST_REDUCE_MAX_SRCS ||
        st_dtype_size(job->redop.dtype) == 0) {
        return ST_ERR_INVALID;
    }
    if (job->count == 0) {
        return ST_OK;
    }
    if (job->dst == NULL) {
        return ST_ERR_INVALID;
    }
    for (int i = 0; i < job->nsrcs; i++) {
        if (job->srcs[i] == NULL) {
            return ST_ERR_INVALID;
        }
    }
    return ST_OK;
}

void st_reduce_job_geometry(const st_reduce_job_t *job, unsigned *grid, unsigned *block)
{
    (void)job;
    *grid  = 1;
    *block = 256;
}

void st_reduce_job_run_host(const st_reduce_job_t *job)
{
    const st_redop_t *r = &job->redop;

    if (st_reduce_job_check(job) != ST_OK || job->count == 0) {
        return;
    }
    if (job->nsrcs == 1) {
        if (job->pre_first) {
            st_reduce_pre(r, job->dst, job->srcs[0], job->count);
        } else if (job->dst != job->srcs[0]) {
            memmove(job->dst, job->srcs[0], job->count * st_dtype_size(r->dtype));
        }
    } else {
        if (job->pre_first) {
            st_reduce_apply(r, job->dst, job->srcs[0], job->srcs[1], job->count);
        } else {
            st_reduce_combine(r, job->dst, job->srcs[0], job->srcs[1], job->count);
        }
        for (int i = 2; i < job->nsrcs; i++) {
            st_reduce_combine(r, job->dst, job->dst, job->srcs[i], job->count);
        }
    }
    if (job->post) {
        st_reduce_post(r, job->dst, job->count);
    }
}

const char *st_reduce_kernel_name(const st_reduce_job_t *job)
{
    (void)job;
    return NULL;
}

const unsigned char st_reduce_fatbin[1];
const size_t        st_reduce_fatbin_size = 0;
