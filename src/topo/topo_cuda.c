/*
 * topo_cuda.c - st_topo_cuda_busid in builds with CUDA (see topo_gpu.h): the PCI bus id of the
 * calling thread's current device, from the CUDA runtime.
 *
 * Only device queries are made (cudaGetDeviceCount, cudaGetDevice, cudaDeviceGetPCIBusId); none
 * of them creates a context, and the last two run only when a device exists. A failed query also
 * sets the runtime's last error, which the application would otherwise find at its next
 * cudaGetLastError: it is cleared here, where it is understood.
 */
#include "config.h"
#include "topo/topo_gpu.h"

#include <cuda_runtime_api.h>

#include "base/log.h"

st_status_t st_topo_cuda_busid(char *busid, size_t len)
{
    char        raw[64]; /* CUDA asks for 13 bytes ("dddd:bb:dd.f"); room for wider domains */
    int         count = 0, dev = -1;
    cudaError_t err;

    err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        /* no driver, no device, an old driver, a fork after CUDA's init: all mean no GPU here */
        st_debug(ST_SUB_TOPO, "cudaGetDeviceCount failed: %s (%s): no CUDA device",
                 cudaGetErrorString(err), cudaGetErrorName(err));
        (void)cudaGetLastError();
        return ST_ERR_NO_DEVICE;
    }
    if (count <= 0) {
        st_debug(ST_SUB_TOPO, "cudaGetDeviceCount gives %d devices", count);
        return ST_ERR_NO_DEVICE;
    }
    err = cudaGetDevice(&dev);
    if (err != cudaSuccess) {
        st_error(ST_SUB_TOPO, "cudaGetDevice failed with %d devices: %s (%s)", count,
                 cudaGetErrorString(err), cudaGetErrorName(err));
        (void)cudaGetLastError();
        return ST_ERR_IO;
    }
    err = cudaDeviceGetPCIBusId(raw, (int)sizeof(raw), dev);
    if (err != cudaSuccess) {
        st_error(ST_SUB_TOPO, "cudaDeviceGetPCIBusId(device %d) failed: %s (%s)", dev,
                 cudaGetErrorString(err), cudaGetErrorName(err));
        (void)cudaGetLastError();
        return ST_ERR_IO;
    }
    raw[sizeof(raw) - 1] = '\0';
    if (st_topo_busid_parse(raw, busid, len) != ST_OK) {
        st_error(ST_SUB_TOPO, "cudaDeviceGetPCIBusId(device %d) gives '%s', not a PCI bus id",
                 dev, raw);
        return ST_ERR_IO;
    }
    st_debug(ST_SUB_TOPO, "CUDA device %d of %d is PCI %s", dev, count, busid);
    return ST_OK;
}
