/*
 * topo_nocuda.c - st_topo_cuda_busid in builds without CUDA (see topo_gpu.h): there is no device
 * to ask, so a rank's GPU comes from STRATA_GPU_BUSID alone.
 */
#include "config.h"
#include "topo/topo_gpu.h"

st_status_t st_topo_cuda_busid(char *busid ST_UNUSED, size_t len ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}
