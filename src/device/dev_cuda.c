/*
 * dev_cuda.c - the device operations table (dev.h) over the CUDA driver API.
 *
 * No link dependency on libcuda or libcudart: libcuda.so.1 is opened at run time, at the first
 * st_dev_cuda_probe, and every entry point is resolved through cuGetProcAddress_v2 at the ABI
 * version that the cuda.h this file is compiled against declares under that name (the PFN types
 * of cudaTypedefs.h, checked below against cuda.h's own declarations). Asking for the header's
 * CUDA_VERSION instead would be wrong: the driver answers with the newest variant up to that
 * version, and some changed their arguments (CUDA 13's cuCtxGetDevice takes a context, while
 * cuda.h's cuCtxGetDevice is the 2.0 one). Streams resolve to their legacy-default-stream variants
 * (a NULL user stream is CU_STREAM_LEGACY, as cudaStream_t 0 is for the runtime).
 *
 * Contexts: every slot acts on the calling thread's current context, as the runtime does;
 * set_current(dev) retains dev's primary context (once, then kept for the life of the process, as
 * the runtime keeps it) and makes it current. The reduction kernels' module (reduce/kernel.h's
 * embedded fatbin) is loaded once per context, lazily, and each kernel is looked up once by name.
 *
 * Waits never spin: without a limit on an event created with CU_EVENT_BLOCKING_SYNC (the thread
 * sleeps in the driver), with one by polling cuEventQuery between nanosleeps that double from
 * 2 us to 200 us. Every failed call is logged once, here, as "<call> failed: CUDA_ERROR_<name>
 * (<text>)".
 */
#include "config.h"
#include "device/dev.h"
#include "device/dev_cuda.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>

#include "base/log.h"

/* The subsystem of this file's messages (dev.h's layer has none of its own yet). */
#define ST_CUDA_SUB ST_SUB_INIT

/* Sleeps of a timed wait: the first, and the most one poll of cuEventQuery waits. */
#define ST_CUDA_POLL_MIN_NS 2000L
#define ST_CUDA_POLL_MAX_NS 200000L

/* Every driver entry point this file calls, with the CUDA version of the variant cuda.h declares
 * under that name (cuda.h maps cuMemAlloc to cuMemAlloc_v2, new in CUDA 3.2: 3020). The error
 * texts come first: a later failure can then be named. */
#define ST_CUDA_SYMS(_X)                                                                         \
    _X(cuGetErrorName, 6000)                                                                     \
    _X(cuGetErrorString, 6000)                                                                   \
    _X(cuInit, 2000)                                                                             \
    _X(cuDriverGetVersion, 2020)                                                                 \
    _X(cuDeviceGetCount, 2000)                                                                   \
    _X(cuDeviceGet, 2000)                                                                        \
    _X(cuDeviceGetAttribute, 2000)                                                               \
    _X(cuCtxGetCurrent, 4000)                                                                    \
    _X(cuCtxSetCurrent, 4000)                                                                    \
    _X(cuCtxGetDevice, 2000)                                                                     \
    _X(cuCtxGetStreamPriorityRange, 5050)                                                        \
    _X(cuDevicePrimaryCtxRetain, 7000)                                                           \
    _X(cuPointerGetAttributes, 7000)                                                             \
    _X(cuMemAlloc, 3020)                                                                         \
    _X(cuMemFree, 3020)                                                                          \
    _X(cuMemGetAllocationGranularity, 10020)                                                     \
    _X(cuMemCreate, 10020)                                                                       \
    _X(cuMemAddressReserve, 10020)                                                               \
    _X(cuMemMap, 10020)                                                                          \
    _X(cuMemSetAccess, 10020)                                                                    \
    _X(cuMemExportToShareableHandle, 10020)                                                      \
    _X(cuMemImportFromShareableHandle, 10020)                                                    \
    _X(cuMemUnmap, 10020)                                                                        \
    _X(cuMemAddressFree, 10020)                                                                  \
    _X(cuMemRelease, 10020)                                                                      \
    _X(cuMemHostAlloc, 2020)                                                                     \
    _X(cuMemFreeHost, 2000)                                                                      \
    _X(cuMemHostGetDevicePointer, 3020)                                                          \
    _X(cuStreamCreateWithPriority, 5050)                                                         \
    _X(cuStreamDestroy, 4000)                                                                    \
    _X(cuStreamIsCapturing, 10000)                                                               \
    _X(cuStreamSynchronize, 2000)                                                                \
    _X(cuMemcpyAsync, 4000)                                                                      \
    _X(cuMemsetD8Async, 3020)                                                                    \
    _X(cuModuleLoadData, 2000)                                                                   \
    _X(cuModuleGetFunction, 2000)                                                                \
    _X(cuLaunchKernel, 4000)                                                                     \
    _X(cuStreamWaitValue64, 11070)                                                               \
    _X(cuEventCreate, 2000)                                                                      \
    _X(cuEventDestroy, 4000)                                                                     \
    _X(cuEventRecord, 2000)                                                                      \
    _X(cuEventQuery, 2000)                                                                       \
    _X(cuEventSynchronize, 2000)

/* The version given is the one cuda.h means: its PFN type is the type of cuda.h's declaration
 * (cuda.h's renaming macros apply to the unpasted name). */
#define ST_CUDA_SYM_CHECK(_sym, _ver)                                                            \
    _Static_assert(__builtin_types_compatible_p(PFN_##_sym##_v##_ver, __typeof__(&_sym)),        \
                   #_sym " at version " #_ver " is not the function cuda.h declares");
ST_CUDA_SYMS(ST_CUDA_SYM_CHECK)

#define ST_CUDA_SYM_FIELD(_sym, _ver) PFN_##_sym##_v##_ver p_##_sym;
#define ST_CU(_sym)                   (st_cuda.fn.p_##_sym)

/* A shareable allocation of mem_alloc_shared: what mem_free_shared and mem_export need. */
typedef struct st_cuda_shared {
    void                         *ptr;
    size_t                        bytes;
    CUmemGenericAllocationHandle  handle;
    struct st_cuda_shared        *next;
} st_cuda_shared_t;

/* A kernel looked up in a context's module. */
typedef struct st_cuda_func {
    const char          *name;
    CUfunction           func;
    struct st_cuda_func *next;
} st_cuda_func_t;

/* The reduction kernels' module of one context. Kept for the life of the process, as the
 * primary contexts are; a context destroyed by its owner (cuCtxDestroy, cudaDeviceReset) leaves
 * a stale entry, and a launch there fails and is logged. */
typedef struct st_cuda_module {
    CUcontext              ctx;
    CUmodule               module;
    st_cuda_func_t        *funcs;
    struct st_cuda_module *next;
} st_cuda_module_t;

static struct {
    pthread_once_t    once;
    int               usable;    /* the probe said 1 */
    int               no_driver; /* the probe failed before the driver answered anything */
    char              why[512];  /* the probe's reason for 0 */
    void             *lib;       /* libcuda.so.1 */
    PFN_cuGetProcAddress_v12000 get_proc;
    int               ndev;
    int               driver_version;
    int               uva;       /* every device shares one address space with the host */
    CUdevice         *devs;      /* by ordinal */
    pthread_mutex_t   lock;      /* primary, shared, modules */
    CUcontext        *primary;   /* retained primary contexts by ordinal, NULL until needed */
    st_cuda_shared_t *shared;
    st_cuda_module_t *modules;
    struct {
        ST_CUDA_SYMS(ST_CUDA_SYM_FIELD)
    } fn;
} st_cuda = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- errors ---- */

static st_status_t st_cuda_status(CUresult res)
{
    switch (res) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        return ST_ERR_NO_MEMORY;
    case CUDA_ERROR_NOT_SUPPORTED:
        return ST_ERR_UNSUPPORTED;
    default:
        return ST_ERR_IO;
    }
}

/* "CUDA_ERROR_X (text)" for res into buf. */
static const char *st_cuda_describe(CUresult res, char *buf, size_t len)
{
    const char *name = NULL, *text = NULL;

    if (ST_CU(cuGetErrorName) == NULL || ST_CU(cuGetErrorName)(res, &name) != CUDA_SUCCESS) {
        name = NULL;
    }
    if (ST_CU(cuGetErrorString) == NULL || ST_CU(cuGetErrorString)(res, &text) != CUDA_SUCCESS) {
        text = NULL;
    }
    if (name != NULL) {
        snprintf(buf, len, "%s (%s)", name, text != NULL ? text : "no description");
    } else {
        snprintf(buf, len, "CUresult %d", (int)res);
    }
    return buf;
}

/* Logs "<call> failed: CUDA_ERROR_X (text)" as the calling thread's error; returns res's status.
 * The call is printf-formatted by the caller (the function and its arguments). */
static st_status_t __attribute__((format(printf, 4, 5)))
st_cuda_error(CUresult res, const char *file, int line, const char *fmt, ...)
{
    char    call[256], desc[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(call, sizeof(call), fmt, ap);
    va_end(ap);
    st_log_error(ST_CUDA_SUB, file, line, "%s failed: %s", call,
                 st_cuda_describe(res, desc, sizeof(desc)));
    return st_cuda_status(res);
}

#define st_cuda_fail(_res, _fmt, ...)                                                            \
    st_cuda_error((_res), __FILE__, __LINE__, _fmt, ##__VA_ARGS__)

/* ---- loading the driver ---- */

static int st_cuda_resolve(const char *symbol, int version, void **pfn_p)
{
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult                       res;
    char                           desc[256];

    *pfn_p = NULL;
    res    = st_cuda.get_proc(symbol, pfn_p, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
    if (res == CUDA_SUCCESS && found == CU_GET_PROC_ADDRESS_SUCCESS && *pfn_p != NULL) {
        return 0;
    }
    snprintf(st_cuda.why, sizeof(st_cuda.why), "cuGetProcAddress(%s, %d): %s", symbol, version,
             res != CUDA_SUCCESS ? st_cuda_describe(res, desc, sizeof(desc))
             : found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                 ? "the driver's version is older than the one asked for"
                 : "symbol not found");
    *pfn_p = NULL;
    return -1;
}

static int st_cuda_ordinal(CUdevice dev)
{
    for (int i = 0; i < st_cuda.ndev; i++) {
        if (st_cuda.devs[i] == dev) {
            return i;
        }
    }
    return -1;
}

/* Steps of the probe; each failure leaves the reason in st_cuda.why. */
static int st_cuda_load_driver(void)
{
    const char *err;

    st_cuda.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (st_cuda.lib == NULL) {
        err = dlerror();
        snprintf(st_cuda.why, sizeof(st_cuda.why), "%s",
                 err != NULL ? err : "libcuda.so.1: dlopen failed");
        return -1;
    }
    /* cuGetProcAddress_v2 (CUDA 12.0) says whether a symbol was missing or too new */
    *(void **)&st_cuda.get_proc = dlsym(st_cuda.lib, "cuGetProcAddress_v2");
    if (st_cuda.get_proc == NULL) {
        snprintf(st_cuda.why, sizeof(st_cuda.why),
                 "libcuda.so.1 has no cuGetProcAddress_v2: a driver older than CUDA 12.0");
        return -1;
    }
#define ST_CUDA_SYM_RESOLVE(_sym, _ver)                                                          \
    if (st_cuda_resolve(#_sym, _ver, (void **)&st_cuda.fn.p_##_sym) != 0) {                      \
        return -1;                                                                               \
    }
    ST_CUDA_SYMS(ST_CUDA_SYM_RESOLVE)
#undef ST_CUDA_SYM_RESOLVE
    return 0;
}

static int st_cuda_init_devices(void)
{
    CUresult res;
    char     desc[256];
    int      count = 0, uva = 1, value;

    res = ST_CU(cuInit)(0);
    if (res != CUDA_SUCCESS) {
        snprintf(st_cuda.why, sizeof(st_cuda.why), "cuInit(0) failed: %s",
                 st_cuda_describe(res, desc, sizeof(desc)));
        return -1;
    }
    (void)ST_CU(cuDriverGetVersion)(&st_cuda.driver_version);
    res = ST_CU(cuDeviceGetCount)(&count);
    if (res != CUDA_SUCCESS || count < 1) {
        snprintf(st_cuda.why, sizeof(st_cuda.why), "no CUDA device (cuDeviceGetCount: %s, %d)",
                 res != CUDA_SUCCESS ? st_cuda_describe(res, desc, sizeof(desc)) : "ok", count);
        return -1;
    }
    st_cuda.devs    = calloc(count, sizeof(*st_cuda.devs));
    st_cuda.primary = calloc(count, sizeof(*st_cuda.primary));
    if (st_cuda.devs == NULL || st_cuda.primary == NULL) {
        snprintf(st_cuda.why, sizeof(st_cuda.why), "out of memory for %d devices", count);
        return -1;
    }
    for (int i = 0; i < count; i++) {
        res = ST_CU(cuDeviceGet)(&st_cuda.devs[i], i);
        if (res != CUDA_SUCCESS) {
            snprintf(st_cuda.why, sizeof(st_cuda.why), "cuDeviceGet(%d) failed: %s", i,
                     st_cuda_describe(res, desc, sizeof(desc)));
            return -1;
        }
        value = 0;
        res   = ST_CU(cuDeviceGetAttribute)(&value, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING,
                                            st_cuda.devs[i]);
        uva   = uva && res == CUDA_SUCCESS && value == 1;
    }
    st_cuda.ndev = count;
    st_cuda.uva  = uva;
    return 0;
}

static void st_cuda_probe_once(void)
{
    if (st_cuda_load_driver() != 0) {
        st_cuda.no_driver = 1;
    } else if (st_cuda_init_devices() == 0) {
        st_cuda.usable = 1;
        st_debug(ST_CUDA_SUB, "cuda: driver %d.%d, %d device(s)%s",
                 st_cuda.driver_version / 1000, st_cuda.driver_version % 1000 / 10, st_cuda.ndev,
                 st_cuda.uva ? "" : ", without unified addressing");
        return;
    }
    st_debug(ST_CUDA_SUB, "cuda device backend unusable: %s", st_cuda.why);
}

int st_dev_cuda_probe(void)
{
    pthread_once(&st_cuda.once, st_cuda_probe_once);
    return st_cuda.usable;
}

const char *st_dev_cuda_why(int *no_driver_p)
{
    if (no_driver_p != NULL) {
        *no_driver_p = st_cuda.no_driver;
    }
    return st_cuda.usable ? "" : st_cuda.why;
}

void *st_dev_cuda_proc(const char *symbol, int version)
{
    CUdriverProcAddressQueryResult found;
    void                          *pfn = NULL;

    pthread_once(&st_cuda.once, st_cuda_probe_once);
    if (st_cuda.get_proc == NULL ||
        st_cuda.get_proc(symbol, &pfn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) !=
            CUDA_SUCCESS ||
        found != CU_GET_PROC_ADDRESS_SUCCESS) {
        return NULL;
    }
    return pfn;
}

/* Every slot starts here: the table is usable only after the probe said so. */
static int st_cuda_ready(void)
{
    return st_dev_cuda_probe();
}

static st_status_t st_cuda_not_ready(const char *slot)
{
    st_error(ST_CUDA_SUB, "cuda %s: no usable CUDA driver or device (%s)", slot, st_cuda.why);
    return ST_ERR_NO_DEVICE;
}

static CUstream st_cuda_stream(st_dev_stream_t *s)
{
    return s != NULL ? (CUstream)s : CU_STREAM_LEGACY;
}

static CUdeviceptr st_cuda_dptr(const void *ptr)
{
    return (CUdeviceptr)(uintptr_t)ptr;
}

/* ---- devices ---- */

static int st_cuda_count(void)
{
    return st_cuda_ready() ? st_cuda.ndev : 0;
}

/* The calling thread's current device, or -1; *dev_p its CUdevice. */
static int st_cuda_current_dev(CUdevice *dev_p)
{
    CUcontext ctx = NULL;
    CUdevice  dev;

    if (!st_cuda_ready() || ST_CU(cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS || ctx == NULL ||
        ST_CU(cuCtxGetDevice)(&dev) != CUDA_SUCCESS) {
        return -1;
    }
    if (dev_p != NULL) {
        *dev_p = dev;
    }
    return st_cuda_ordinal(dev);
}

static int st_cuda_current(void)
{
    return st_cuda_current_dev(NULL);
}

static st_status_t st_cuda_set_current(int dev)
{
    CUcontext ctx, cur = NULL;
    CUresult  res;

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("set_current");
    }
    if (dev < 0 || dev >= st_cuda.ndev) {
        st_error(ST_CUDA_SUB, "cuda set_current: device %d does not exist (%d devices)", dev,
                 st_cuda.ndev);
        return ST_ERR_INVALID;
    }
    pthread_mutex_lock(&st_cuda.lock);
    ctx = st_cuda.primary[dev];
    if (ctx == NULL) {
        res = ST_CU(cuDevicePrimaryCtxRetain)(&ctx, st_cuda.devs[dev]);
        if (res != CUDA_SUCCESS) {
            pthread_mutex_unlock(&st_cuda.lock);
            return st_cuda_fail(res, "cuDevicePrimaryCtxRetain(device %d)", dev);
        }
        st_cuda.primary[dev] = ctx;
    }
    pthread_mutex_unlock(&st_cuda.lock);
    if (ST_CU(cuCtxGetCurrent)(&cur) == CUDA_SUCCESS && cur == ctx) {
        return ST_OK;
    }
    res = ST_CU(cuCtxSetCurrent)(ctx);
    if (res != CUDA_SUCCESS) {
        return st_cuda_fail(res, "cuCtxSetCurrent(primary context of device %d)", dev);
    }
    return ST_OK;
}

static st_dev_ptr_t st_cuda_ptr_type(const void *ptr, int *dev_p)
{
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    unsigned int        type     = 0; /* a CUmemorytype; 0 for memory the driver does not know */
    int                 ordinal  = -1;
    void               *data[2]  = {&type, &ordinal};

    if (ptr == NULL || !st_cuda_ready() ||
        ST_CU(cuPointerGetAttributes)(2, attrs, data, st_cuda_dptr(ptr)) != CUDA_SUCCESS) {
        return ST_DEV_PTR_HOST;
    }
    /* managed memory says UNIFIED: the device may touch it, kernels take it */
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) {
        return ST_DEV_PTR_HOST;
    }
    if (dev_p != NULL) {
        *dev_p = ordinal;
    }
    return ST_DEV_PTR_DEVICE;
}

/* ---- memory ---- */

static st_status_t st_cuda_mem_alloc(size_t bytes, void **ptr_p)
{
    CUdeviceptr d;
    CUresult    res;

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("mem_alloc");
    }
    if (bytes == 0) {
        st_error(ST_CUDA_SUB, "cuda mem_alloc: 0 bytes");
        return ST_ERR_INVALID;
    }
    res = ST_CU(cuMemAlloc)(&d, bytes);
    if (res != CUDA_SUCCESS) {
        return st_cuda_fail(res, "cuMemAlloc(%zu bytes)", bytes);
    }
    *ptr_p = (void *)(uintptr_t)d;
    return ST_OK;
}

static st_status_t st_cuda_mem_free(void *ptr)
{
    CUresult res;

    if (ptr == NULL) {
        return ST_OK;
    }
    if (!st_cuda_ready()) {
        return st_cuda_not_ready("mem_free");
    }
    res = ST_CU(cuMemFree)(st_cuda_dptr(ptr));
    if (res != CUDA_SUCCESS) {
        return st_cuda_fail(res, "cuMemFree(%p)", ptr);
    }
    return ST_OK;
}

/* Zeros fresh device memory on a stream of its own, non-blocking, so that the fill never waits
 * behind a gate on the legacy default stream. */
static st_status_t st_cuda_zero_now(CUdeviceptr d, size_t bytes)
{
    st_status_t status = ST_OK;
    CUstream    s;
    CUresult    res;

    res = ST_CU(cuStreamCreateWithPriority)(&s, CU_STREAM_NON_BLOCKING, 0);
    if (res != CUDA_SUCCESS) {
        return st_cuda_fail(res, "cuStreamCreateWithPriority(non-blocking) to zero memory");
    }
    res = ST_CU(cuMemsetD8Async)(d, 0, bytes, s);
    if (res != CUDA_SUCCESS) {
        status = st_cuda_fail(res, "cuMemsetD8Async(0x%llx, 0, %zu bytes)", (unsigned long long)d,
                              bytes);
    } else if ((res = ST_CU(cuStreamSynchronize)(s)) != CUDA_SUCCESS) {
        status = st_cuda_fail(res, "cuStreamSynchronize(after zeroing %zu bytes)", bytes);
    }
    (void)ST_CU(cuStreamDestroy)(s);
    return status;
}

static void st_cuda_location(CUmemLocation *loc, int ordinal)
{
    memset(loc, 0, sizeof(*loc));
    loc->type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc->id   = ordinal;
}

static st_status_t st_cuda_mem_alloc_shared(size_t bytes, void **ptr_p, size_t *alloc_bytes_p)
{
    CUmemGenericAllocationHandle handle;
    CUmemAllocationProp          prop;
    CUmemAccessDesc              access;
    st_cuda_shared_t            *sh;
    st_status_t                  status;
    CUdeviceptr                  d;
    CUdevice                     dev;
    CUresult                     res;
    size_t                       gran = 0, size;
    int                          ordinal, vmm = 0, posix_fd = 0;

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("mem_alloc_shared");
    }
    if (bytes == 0) {
        st_error(ST_CUDA_SUB, "cuda mem_alloc_shared: 0 bytes");
        return ST_ERR_INVALID;
    }
    ordinal = st_cuda_current_dev(&dev);
    if (ordinal < 0) {
        st_error(ST_CUDA_SUB, "cuda mem_alloc_shared: no current CUDA context on this thread");
        return ST_ERR_INVALID;
    }
    (void)ST_CU(cuDeviceGetAttribute)(&vmm,
                                      CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    (void)ST_CU(cuDeviceGetAttribute)(
        &posix_fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
    if (!vmm || !posix_fd) {
        /* an answer about the device, not a failure: the caller may fall back */
        st_info(ST_CUDA_SUB,
                "cuda: device %d cannot share memory (virtual memory management %d, POSIX file "
                "descriptor handles %d)", ordinal, vmm, posix_fd);
        return ST_ERR_UNSUPPORTED;
    }

    memset(&prop, 0, sizeof(prop));
    prop.type                 = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    st_cuda_location(&prop.location, ordinal);
    res = ST_CU(cuMemGetAllocationGranularity)(&gran, &prop,
                                               CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (res != CUDA_SUCCESS) {
        return st_cuda_fail(res, "cuMemGetAllocationGranularity(device %d)", ordinal);
    }
    if (gran == 0) {
        st_error(ST_CUDA_SUB, "cuda: device %d reports an allocation granularity of 0", ordinal);
        return ST_ERR_IO;
    }
    if (bytes > SIZE_MAX - gran) {
        st_error(ST_CUDA_SUB, "cuda mem_alloc_shared: %zu bytes is too large", bytes);
        return ST_ERR_INVALID;
    }
    size = ST_DIV_ROUND_UP(bytes, gran) * gran;

    sh = calloc(1, sizeof(*sh));
    if (sh == NULL) {
        st_error(ST_CUDA_SUB, "cuda mem_alloc_shared: out of host memory");
        return ST_ERR_NO_MEMORY;
    }
    res = ST_CU(cuMemCreate)(&handle, size, &prop, 0);
    if (res != CUDA_SUCCESS) {
        status = st_cuda_fail(res, "cuMemCreate(%zu bytes, device %d, POSIX fd handle)", size,
                              ordinal);
        goto err_free;
    }
    res = ST_CU(cuMemAddressReserve)(&d, size, gran, 0, 0);
    if (res != CUDA_SUCCESS) {
        status = st_cuda_fail(res, "cuMemAddressReserve(%zu bytes)", size);
        goto err_release;
    }
    res = ST_CU(cuMemMap)(d, size, 0, handle, 0);
    if (res != CUDA_SUCCESS) {
        status = st_cuda_fail(res, "cuMemMap(%zu bytes)", size);
        goto err_address_free;
    }
    access.location = prop.location;
    access.flags    = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    res             = ST_CU(cuMemSetAccess)(d, size, &access, 1);
    if (res != CUDA_SUCCESS) {
        status = st_cuda_fail(res, "cuMemSetAccess(%zu bytes, device %d, read-write)", size,
                              ordinal);
        goto err_unmap;
    }
    ST_CHECK_GOTO(st_cuda_zero_now(d, size), status, err_unmap);

    sh->ptr    = (void *)(uintptr_t)d;
    sh->bytes  = size;
    sh->handle = handle;
    pthread_mutex_lock(&st_cuda.lock);
    sh->next       = st_cuda.shared;
    st_cuda.shared = sh;
    pthread_mutex_unlock(&st_cuda.lock);
    *ptr_p = sh->ptr;
    if (alloc_bytes_p != NULL) {
        *alloc_bytes_p = size;
    }
    return ST_OK;

err_unmap:
    (void)ST_CU(cuMemUnmap)(d, size);
err_address_free:
    (void)ST_CU(cuMemAddressFree)(d, size);
err_release:
    (void)ST_CU(cuMemRelease)(handle);
err_free:
    free(sh);
    return status;
}

/* Takes ptr's entry out of the table (unlink 1) or only finds it; NULL when ptr is not one.
 * *handle_p (may be NULL) gets its handle while the table's lock is held: without unlink the
 * entry may be freed by another thread as soon as this returns. */
static st_cuda_shared_t *st_cuda_shared_find(const void *ptr, int unlink,
                                             CUmemGenericAllocationHandle *handle_p)
{
    st_cuda_shared_t **pp, *sh = NULL;

    pthread_mutex_lock(&st_cuda.lock);
    for (pp = &st_cuda.shared; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->ptr == ptr) {
            sh = *pp;
            if (handle_p != NULL) {
                *handle_p = sh->handle;
            }
            if (unlink) {
                *pp = sh->next;
            }
            break;
        }
    }
    pthread_mutex_unlock(&st_cuda.lock);
    return sh;
}

static st_status_t st_cuda_mem_free_shared(void *ptr)
{
    st_cuda_shared_t *sh;
    st_status_t       status = ST_OK;
    CUdeviceptr       d      = st_cuda_dptr(ptr);
    CUresult          res;

    if (ptr == NULL) {
        return ST_OK;
    }
    if (!st_cuda_ready()) {
        return st_cuda_not_ready("mem_free_shared");
    }
    sh = st_cuda_shared_find(ptr, 1, NULL);
    if (sh == NULL) {
        st_error(ST_CUDA_SUB, "cuda mem_free_shared: %p is not shareable memory of this process",
                 ptr);
        return ST_ERR_INVALID;
    }
    /* each step runs even when one before failed: release what can be released */
    if ((res = ST_CU(cuMemUnmap)(d, sh->bytes)) != CUDA_SUCCESS) {
        status = st_cuda_fail(res, "cuMemUnmap(%p, %zu bytes)", ptr, sh->bytes);
    }
    if ((res = ST_CU(cuMemAddressFree)(d, sh->bytes)) != CUDA_SUCCESS && status == ST_OK) {
        status = st_cuda_fail(res, "cuMemAddressFree(%p, %zu bytes)", ptr, sh->bytes);
    }
    if ((res = ST_CU(cuMemRelease)(sh->handle)) != CUDA_SUCCESS && status == ST_OK) {
        status = st_cuda_fail(res, "cuMemRelease(allocation at %p)", ptr);
    }
    free(sh);
    return status;
}

static st_status_t st_cuda_mem_export(void *ptr, int *fd_p)
{
    CUmemGenericAllocationHandle handle;
    st_cuda_shared_t            *sh;
    CUresult                     res;
    int                          fd = -1;

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("mem_export");
    }
    sh = st_cuda_shared_find(ptr, 0, &handle);
    if (sh == NULL) {
        st_error(ST_CUDA_SUB, "cuda mem_export: %p does not start a shareable allocation", ptr);
        return ST_ERR_INVALID;
    }
    res = ST_CU(cuMemExportToShareableHandle)(&fd, handle,
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (res != CUDA_SUCCESS) {
        return st_cuda_fail(res, "cuMemExportToShareableHandle(%p, POSIX fd)", ptr);
    }
    /* the driver does not promise close-on-exec; an exec'd child must not keep the memory */
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    *fd_p = fd;
    return ST_OK;
}

static st_status_t st_cuda_mem_import(int fd, size_t bytes, void **ptr_p)
{
    CUmemGenericAllocationHandle handle;
    CUmemAccessDesc              access;
    CUdeviceptr                  d;
    CUresult                     res;
    int                          ordinal;

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("mem_import");
    }
    if (fd < 0 || bytes == 0) {
        st_error(ST_CUDA_SUB, "cuda mem_import: fd %d, %zu bytes", fd, bytes);
        return ST_ERR_INVALID;
    }
    ordinal = st_cuda_current();
    if (ordinal < 0) {
        st_error(ST_CUDA_SUB, "cuda mem_import: no current CUDA context on this thread");
        return ST_ERR_INVALID;
    }
    /* every failure is ST_ERR_IO: the peer's memory cannot be reached, whatever the cause */
    res = ST_CU(cuMemImportFromShareableHandle)(&handle, (void *)(uintptr_t)fd,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuMemImportFromShareableHandle(fd %d)", fd);
        return ST_ERR_IO;
    }
    res = ST_CU(cuMemAddressReserve)(&d, bytes, 0, 0, 0);
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuMemAddressReserve(%zu bytes) to import fd %d", bytes, fd);
        goto err_release;
    }
    res = ST_CU(cuMemMap)(d, bytes, 0, handle, 0);
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuMemMap(%zu bytes) of imported fd %d", bytes, fd);
        goto err_address_free;
    }
    st_cuda_location(&access.location, ordinal);
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    res          = ST_CU(cuMemSetAccess)(d, bytes, &access, 1);
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuMemSetAccess(%zu bytes, device %d) of imported fd %d", bytes, ordinal,
                     fd);
        goto err_unmap;
    }
    /* the mapping holds the memory from now on: mem_unimport needs no handle */
    (void)ST_CU(cuMemRelease)(handle);
    *ptr_p = (void *)(uintptr_t)d;
    return ST_OK;

err_unmap:
    (void)ST_CU(cuMemUnmap)(d, bytes);
err_address_free:
    (void)ST_CU(cuMemAddressFree)(d, bytes);
err_release:
    (void)ST_CU(cuMemRelease)(handle);
    return ST_ERR_IO;
}

static void st_cuda_mem_unimport(void *ptr, size_t bytes)
{
    CUresult res;

    if (ptr == NULL || !st_cuda_ready()) {
        return;
    }
    if ((res = ST_CU(cuMemUnmap)(st_cuda_dptr(ptr), bytes)) != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuMemUnmap(%p, %zu bytes) of imported memory", ptr, bytes);
    }
    if ((res = ST_CU(cuMemAddressFree)(st_cuda_dptr(ptr), bytes)) != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuMemAddressFree(%p, %zu bytes) of imported memory", ptr, bytes);
    }
}

static st_status_t st_cuda_host_alloc(size_t bytes, void **ptr_p)
{
    CUresult res;
    void    *p;

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("host_alloc");
    }
    if (bytes == 0) {
        st_error(ST_CUDA_SUB, "cuda host_alloc: 0 bytes");
        return ST_ERR_INVALID;
    }
    res = ST_CU(cuMemHostAlloc)(&p, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    if (res != CUDA_SUCCESS) { /* out of memory, or no context current: said as it is */
        return st_cuda_fail(res, "cuMemHostAlloc(%zu bytes, devicemap|portable)", bytes);
    }
    memset(p, 0, bytes);
    *ptr_p = p;
    return ST_OK;
}

static void st_cuda_host_free(void *ptr)
{
    CUresult res;

    if (ptr == NULL || !st_cuda_ready()) {
        return;
    }
    res = ST_CU(cuMemFreeHost)(ptr);
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuMemFreeHost(%p)", ptr);
    }
}

/* ---- streams and events ---- */

static st_status_t st_cuda_stream_create(st_dev_stream_t **s_p)
{
    CUstream s;
    CUresult res;
    int      least = 0, greatest = 0;

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("stream_create");
    }
    res = ST_CU(cuCtxGetStreamPriorityRange)(&least, &greatest);
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuCtxGetStreamPriorityRange");
        return ST_ERR_IO;
    }
    res = ST_CU(cuStreamCreateWithPriority)(&s, CU_STREAM_NON_BLOCKING, greatest);
    if (res != CUDA_SUCCESS) {
        return st_cuda_fail(res, "cuStreamCreateWithPriority(non-blocking, priority %d)",
                            greatest);
    }
    *s_p = (st_dev_stream_t *)s;
    return ST_OK;
}

static void st_cuda_stream_destroy(st_dev_stream_t *s)
{
    CUresult res;

    if (s == NULL || !st_cuda_ready()) {
        return;
    }
    res = ST_CU(cuStreamDestroy)((CUstream)s);
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuStreamDestroy(%p)", (void *)s);
    }
}

static int st_cuda_stream_capturing(st_dev_stream_t *s)
{
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult              res;
    char                  desc[256];

    if (!st_cuda_ready()) {
        return -1;
    }
    res = ST_CU(cuStreamIsCapturing)(st_cuda_stream(s), &capture);
    if (res == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) {
        /* the legacy stream while another stream captures in global mode: work queued on it
         * would break that capture, which is what refusing a capturing stream is for */
        return 1;
    }
    if (res != CUDA_SUCCESS) {
        st_debug(ST_CUDA_SUB, "cuda stream_capturing: cuStreamIsCapturing(%p): %s", (void *)s,
                 st_cuda_describe(res, desc, sizeof(desc)));
        return -1;
    }
    /* an invalidated capture is still a capture until the user ends it */
    return capture != CU_STREAM_CAPTURE_STATUS_NONE;
}

static uint64_t st_cuda_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits for e: sleeping in the driver without a limit, else polling between growing sleeps.
 * what names the wait in a failure. */
static st_status_t st_cuda_event_poll(CUevent e, long timeout_us, const char *what)
{
    struct timespec ts;
    uint64_t        now, deadline;
    long            sleep_ns = ST_CUDA_POLL_MIN_NS;
    CUresult        res;

    if (timeout_us < 0) {
        res = ST_CU(cuEventSynchronize)(e);
        if (res != CUDA_SUCCESS) {
            st_cuda_fail(res, "cuEventSynchronize (%s)", what);
            return ST_ERR_IO;
        }
        return ST_OK;
    }
    deadline = st_cuda_now_ns() + (uint64_t)timeout_us * 1000u;
    for (;;) {
        res = ST_CU(cuEventQuery)(e);
        if (res == CUDA_SUCCESS) {
            return ST_OK;
        }
        if (res != CUDA_ERROR_NOT_READY) {
            st_cuda_fail(res, "cuEventQuery (%s)", what);
            return ST_ERR_IO;
        }
        now = st_cuda_now_ns();
        if (now >= deadline) {
            return ST_INPROGRESS;
        }
        ts.tv_sec  = 0;
        ts.tv_nsec = (long)ST_MIN((uint64_t)sleep_ns, deadline - now);
        nanosleep(&ts, NULL);
        sleep_ns = ST_MIN(sleep_ns * 2, ST_CUDA_POLL_MAX_NS);
    }
}

static st_status_t st_cuda_event_new(CUevent *e_p)
{
    CUresult res;

    res = ST_CU(cuEventCreate)(e_p, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING);
    if (res != CUDA_SUCCESS) {
        return st_cuda_fail(res, "cuEventCreate(blocking-sync, no timing)");
    }
    return ST_OK;
}

static st_status_t st_cuda_stream_sync(st_dev_stream_t *s, long timeout_us)
{
    st_status_t status;
    CUevent     e;
    CUresult    res;

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("stream_sync");
    }
    /* an event marks "so far": work queued later by other threads is not waited for, and a
     * blocking-sync event sleeps where cuStreamSynchronize may spin (the context's schedule) */
    ST_CHECK(st_cuda_event_new(&e));
    res = ST_CU(cuEventRecord)(e, st_cuda_stream(s));
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuEventRecord(stream %p) for stream_sync", (void *)s);
        status = ST_ERR_IO;
    } else {
        status = st_cuda_event_poll(e, timeout_us, "stream_sync");
    }
    /* an event still pending is released by the driver once it completes */
    (void)ST_CU(cuEventDestroy)(e);
    return status;
}

static st_status_t st_cuda_copy(void *dst, const void *src, size_t bytes, st_dev_stream_t *s)
{
    CUresult res;

    if (bytes == 0) {
        return ST_OK;
    }
    if (!st_cuda_ready()) {
        return st_cuda_not_ready("copy");
    }
    res = ST_CU(cuMemcpyAsync)(st_cuda_dptr(dst), st_cuda_dptr(src), bytes, st_cuda_stream(s));
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuMemcpyAsync(%p <- %p, %zu bytes, stream %p)", dst, src, bytes,
                     (void *)s);
        return ST_ERR_IO;
    }
    return ST_OK;
}

static st_status_t st_cuda_zero(void *dst, size_t bytes, st_dev_stream_t *s)
{
    CUresult res;

    if (bytes == 0) {
        return ST_OK;
    }
    if (!st_cuda_ready()) {
        return st_cuda_not_ready("zero");
    }
    res = ST_CU(cuMemsetD8Async)(st_cuda_dptr(dst), 0, bytes, st_cuda_stream(s));
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuMemsetD8Async(%p, 0, %zu bytes, stream %p)", dst, bytes, (void *)s);
        return ST_ERR_IO;
    }
    return ST_OK;
}

/* ---- the reduction kernels ---- */

/* Loads the kernels' fatbin into ctx (lock held). */
static st_status_t st_cuda_module_load(CUcontext ctx, st_cuda_module_t **mod_p)
{
    st_cuda_module_t *mod;
    const void       *image = st_reduce_fatbin;
    void             *copy  = NULL;
    CUresult          res;

    mod = calloc(1, sizeof(*mod));
    if (mod == NULL) {
        st_error(ST_CUDA_SUB, "cuda reduce: out of host memory");
        return ST_ERR_NO_MEMORY;
    }
    /* a fatbin is read as 8-byte words: give the driver an aligned copy if need be */
    if ((uintptr_t)image % 8 != 0) {
        if (posix_memalign(&copy, 8, st_reduce_fatbin_size) != 0) {
            free(mod);
            st_error(ST_CUDA_SUB, "cuda reduce: out of host memory");
            return ST_ERR_NO_MEMORY;
        }
        memcpy(copy, st_reduce_fatbin, st_reduce_fatbin_size);
        image = copy;
    }
    res = ST_CU(cuModuleLoadData)(&mod->module, image);
    free(copy);
    if (res != CUDA_SUCCESS) {
        free(mod);
        st_cuda_fail(res, "cuModuleLoadData(the reduction kernels, %zu bytes)",
                     st_reduce_fatbin_size);
        return res == CUDA_ERROR_NO_BINARY_FOR_GPU ? ST_ERR_UNSUPPORTED : ST_ERR_IO;
    }
    mod->ctx        = ctx;
    mod->next       = st_cuda.modules;
    st_cuda.modules = mod;
    *mod_p          = mod;
    return ST_OK;
}

/* The kernel name of the current context's module, loaded and looked up at the first use. */
static st_status_t st_cuda_function(const char *name, CUfunction *func_p)
{
    st_cuda_module_t *mod;
    st_cuda_func_t   *f;
    st_status_t       status = ST_OK;
    CUcontext         ctx    = NULL;
    CUresult          res;

    res = ST_CU(cuCtxGetCurrent)(&ctx);
    if (res != CUDA_SUCCESS || ctx == NULL) {
        st_error(ST_CUDA_SUB, "cuda reduce: no current CUDA context on this thread");
        return ST_ERR_IO;
    }
    pthread_mutex_lock(&st_cuda.lock);
    for (mod = st_cuda.modules; mod != NULL && mod->ctx != ctx; mod = mod->next) {
    }
    if (mod == NULL) {
        ST_CHECK_GOTO(st_cuda_module_load(ctx, &mod), status, out);
    }
    for (f = mod->funcs; f != NULL && strcmp(f->name, name) != 0; f = f->next) {
    }
    if (f == NULL) {
        f = calloc(1, sizeof(*f));
        if (f != NULL && (f->name = strdup(name)) == NULL) {
            free(f);
            f = NULL;
        }
        if (f == NULL) {
            st_error(ST_CUDA_SUB, "cuda reduce: out of host memory");
            status = ST_ERR_NO_MEMORY;
            goto out;
        }
        res = ST_CU(cuModuleGetFunction)(&f->func, mod->module, name);
        if (res != CUDA_SUCCESS) {
            free((char *)f->name);
            free(f);
            st_cuda_fail(res, "cuModuleGetFunction(%s)", name);
            status = ST_ERR_IO;
            goto out;
        }
        f->next    = mod->funcs;
        mod->funcs = f;
    }
    *func_p = f->func;
out:
    pthread_mutex_unlock(&st_cuda.lock);
    return status;
}

static st_status_t st_cuda_reduce(const st_reduce_job_t *job, st_dev_stream_t *s)
{
    st_reduce_job_t job_v;
    const char     *name;
    CUfunction      func;
    CUresult        res;
    unsigned        grid = 1, block = 1;
    void           *params[1];

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("reduce");
    }
    if (st_reduce_job_check(job) != ST_OK) {
        st_error(ST_CUDA_SUB, "cuda reduce: invalid job (%d sources, dtype %d, %zu elements)",
                 job != NULL ? job->nsrcs : 0, job != NULL ? (int)job->redop.dtype : -1,
                 job != NULL ? job->count : 0);
        return ST_ERR_INVALID;
    }
    if (job->count == 0) {
        return ST_OK;
    }
    if (st_reduce_fatbin_size == 0) {
        st_error(ST_CUDA_SUB, "cuda reduce: this build has no GPU reduction kernels (no nvcc)");
        return ST_ERR_UNSUPPORTED;
    }
    name = st_reduce_kernel_name(job);
    if (name == NULL) {
        st_error(ST_CUDA_SUB, "cuda reduce: no kernel for dtype %s, op %d",
                 st_dtype_name(job->redop.dtype), (int)job->redop.kind);
        return ST_ERR_UNSUPPORTED;
    }
    ST_CHECK(st_cuda_function(name, &func));
    st_reduce_job_geometry(job, &grid, &block);
    job_v     = *job; /* the kernel takes the job by value; the driver copies it at launch */
    params[0] = &job_v;
    res = ST_CU(cuLaunchKernel)(func, grid, 1, 1, block, 1, 1, 0, st_cuda_stream(s), params,
                                NULL);
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuLaunchKernel(%s, %u x %u, %zu elements, stream %p)", name, grid,
                     block, job->count, (void *)s);
        return ST_ERR_IO;
    }
    return ST_OK;
}

/* ---- gates ---- */

static st_status_t st_cuda_wait_value(st_dev_stream_t *s, uint64_t *word, uint64_t value)
{
    CUdeviceptr addr;
    CUresult    res;

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("wait_value");
    }
    if (word == NULL || (uintptr_t)word % sizeof(uint64_t) != 0) {
        st_error(ST_CUDA_SUB, "cuda wait_value: word %p is not an aligned 64-bit word",
                 (void *)word);
        return ST_ERR_INVALID;
    }
    if (st_cuda.uva) {
        addr = st_cuda_dptr(word); /* pinned host memory has one address under unified addressing */
    } else {
        res = ST_CU(cuMemHostGetDevicePointer)(&addr, word, 0);
        if (res != CUDA_SUCCESS) {
            st_cuda_fail(res, "cuMemHostGetDevicePointer(%p)", (void *)word);
            return ST_ERR_IO;
        }
    }
    res = ST_CU(cuStreamWaitValue64)(st_cuda_stream(s), addr, value, CU_STREAM_WAIT_VALUE_GEQ);
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuStreamWaitValue64(stream %p, %p >= %llu)", (void *)s, (void *)word,
                     (unsigned long long)value);
        return ST_ERR_IO;
    }
    return ST_OK;
}

static void st_cuda_write_value(uint64_t *word, uint64_t value)
{
    /* the device polls the word over the bus: a release store orders the host's writes before */
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
}

static st_status_t st_cuda_event_create(st_dev_event_t **e_p)
{
    CUevent e;

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("event_create");
    }
    ST_CHECK(st_cuda_event_new(&e));
    *e_p = (st_dev_event_t *)e;
    return ST_OK;
}

static void st_cuda_event_destroy(st_dev_event_t *e)
{
    CUresult res;

    if (e == NULL || !st_cuda_ready()) {
        return;
    }
    res = ST_CU(cuEventDestroy)((CUevent)e);
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuEventDestroy(%p)", (void *)e);
    }
}

static st_status_t st_cuda_event_record(st_dev_event_t *e, st_dev_stream_t *s)
{
    CUresult res;

    if (!st_cuda_ready()) {
        return st_cuda_not_ready("event_record");
    }
    res = ST_CU(cuEventRecord)((CUevent)e, st_cuda_stream(s));
    if (res != CUDA_SUCCESS) {
        st_cuda_fail(res, "cuEventRecord(%p, stream %p)", (void *)e, (void *)s);
        return ST_ERR_IO;
    }
    return ST_OK;
}

static st_status_t st_cuda_event_wait(st_dev_event_t *e, long timeout_us)
{
    if (!st_cuda_ready()) {
        return st_cuda_not_ready("event_wait");
    }
    /* a never recorded event is complete for cuEventQuery and cuEventSynchronize alike */
    return st_cuda_event_poll((CUevent)e, timeout_us, "event_wait");
}

const st_dev_ops_t st_dev_cuda_ops = {
    .name             = "cuda",
    .count            = st_cuda_count,
    .current          = st_cuda_current,
    .set_current      = st_cuda_set_current,
    .ptr_type         = st_cuda_ptr_type,
    .mem_alloc        = st_cuda_mem_alloc,
    .mem_free         = st_cuda_mem_free,
    .mem_alloc_shared = st_cuda_mem_alloc_shared,
    .mem_free_shared  = st_cuda_mem_free_shared,
    .mem_export       = st_cuda_mem_export,
    .mem_import       = st_cuda_mem_import,
    .mem_unimport     = st_cuda_mem_unimport,
    .host_alloc       = st_cuda_host_alloc,
    .host_free        = st_cuda_host_free,
    .stream_create    = st_cuda_stream_create,
    .stream_destroy   = st_cuda_stream_destroy,
    .stream_capturing = st_cuda_stream_capturing,
    .stream_sync      = st_cuda_stream_sync,
    .copy             = st_cuda_copy,
    .zero             = st_cuda_zero,
    .reduce           = st_cuda_reduce,
    .wait_value       = st_cuda_wait_value,
    .write_value      = st_cuda_write_value,
    .event_create     = st_cuda_event_create,
    .event_destroy    = st_cuda_event_destroy,
    .event_record     = st_cuda_event_record,
    .event_wait       = st_cuda_event_wait,
};
