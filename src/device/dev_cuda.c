/*
 * dev_cuda.c - PLACEHOLDER for the CUDA device backend, so that this branch links: the real file
 * (the CUDA driver API through dlopen, written on another branch) replaces it at merge.
 * The probe says there is no usable driver, so st_dev() never hands out this table, which has
 * only its name.
 */
#include "config.h"
#include "device/dev.h"

const st_dev_ops_t st_dev_cuda_ops = {
    .name = "cuda",
};

int st_dev_cuda_probe(void)
{
    return 0;
}
