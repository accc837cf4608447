/*
 * topo_gpu.h - the calling rank's GPU as the GPU runtime names it.
 *
 * The one seam between topology detection and CUDA. topo_cuda.c implements it in builds with
 * CUDA, topo_nocuda.c in builds without; the build picks the file, so topo_detect.c calls it
 * unconditionally and no source tests HAVE_CUDA. Detection uses it when STRATA_GPU_BUSID is
 * unset (STRATA_GPU_BUSID always wins).
 */
#ifndef ST_TOPO_GPU_H
#define ST_TOPO_GPU_H

#include <stddef.h>

#include "base/status.h"

/* Writes the PCI bus id of the calling thread's current CUDA device (cudaGetDevice: device 0
 * unless the thread chose another with cudaSetDevice) into busid as "dddd:bb:dd.f", lower case,
 * the form of st_topo_rec_t.gpu; len should be ST_TOPO_BUSID_LEN. It asks cudaGetDeviceCount
 * first and queries the device only when there is one: no CUDA context is created (the driver is
 * loaded), so a process that never uses a GPU pays no context's memory or time. Thread-safe;
 * busid is set on ST_OK only.
 * Returns ST_OK; ST_ERR_NO_DEVICE when CUDA sees no device (no GPU, no driver, a driver older
 * than the runtime, CUDA already initialised before a fork: the cause at STRATA_DEBUG=DEBUG);
 * ST_ERR_UNSUPPORTED in a build without CUDA; ST_ERR_IO (logged) when a device exists but the
 * runtime cannot name it; ST_ERR_INVALID when len is too short. */
st_status_t st_topo_cuda_busid(char *busid, size_t len);

/* Normalises the PCI bus id text, "domain:bus:device.function" or "bus:device.function" in hex
 * of either case with any number of domain digits (CUDA writes "0000:5F:00.0", NVML
 * "00000000:5F:00.0"), into busid as "dddd:bb:dd.f" in lower case (domain 0 when absent).
 * ST_ERR_INVALID, not logged (the caller knows where text came from), when text is not such an
 * id (a bus above ff, a device above 1f, a function above 7) or len is too short. */
st_status_t st_topo_busid_parse(const char *text, char *busid, size_t len);

#endif
