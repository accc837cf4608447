/*
 * dev_cuda.h - what the CUDA backend of the device table (dev_cuda.c; dev_nocuda.c in a build
 * without CUDA headers) offers besides st_dev_cuda_ops: whether it can be used here, why not, and
 * the driver's entry points for tools and tests that need a call the table does not make (graph
 * capture, timing events). Includes no CUDA header.
 */
#ifndef ST_DEVICE_DEV_CUDA_H
#define ST_DEVICE_DEV_CUDA_H

/* 1 when libcuda.so.1 loads, every entry point st_dev_cuda_ops calls resolves, cuInit(0) succeeds
 * and a device exists; 0 otherwise (logged at debug once, with the reason). Decided at the first
 * call, thread-safe; only after a 1 may st_dev_cuda_ops be used. A process that forks after it
 * said 1 must not use CUDA in the child (CUDA's rule): fork first. */
int st_dev_cuda_probe(void);

/* Why the probe said 0 (the dlerror text when the driver library did not load, else the failed
 * step); "" before the probe or when it said 1. *no_driver_p (may be NULL): 1 when there is no
 * usable driver library at all (no libcuda.so.1, a driver too old, a build without CUDA). */
const char *st_dev_cuda_why(int *no_driver_p);

/* The driver's entry point for symbol at the ABI of CUDA version (cuGetProcAddress: "cuMemAlloc",
 * 3020), or NULL (no driver, or not found); the first call runs the probe. For tests and tools;
 * the library itself calls only what st_dev_cuda_ops resolves. */
void *st_dev_cuda_proc(const char *symbol, int version);

#endif
