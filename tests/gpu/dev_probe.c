/*
 * dev_probe.c - every slot of the CUDA device table (st_dev_cuda_ops, src/device/dev_cuda.c) on a
 * real GPU, with one line per item, "PASS|FAIL|SKIP name: detail", and a final JSON object:
 *   devices, pointers, pinned host memory, copies (device, pinned, pageable, the legacy stream);
 *   streams and graph capture; the gate (wait_value / write_value) holding and releasing a
 *   stream, stream_sync and event_wait with and without a limit;
 *   shareable memory exported, passed over a socketpair (SCM_RIGHTS) to a child process that
 *   imports it, reads what the parent wrote and writes back;
 *   the reduction kernel against st_reduce_job_run_host, byte for byte: every dtype x op (sum,
 *   prod, max, min, avg, premul-sum) x sources {1,2,3,4,8} x {aligned, misaligned} x counts
 *   {1, 7, 4097, 1M+3}, random data with special values mixed in;
 *   bandwidths: a device-to-device copy (the anchor, read+write bytes per second) and the kernel
 *   at 2, 4, 8 sources of int8, bf16, fp32, 1 GiB each ((sources+1) x bytes per second);
 *   latencies: host write_value -> the event after a stream's wait_value completes; event_wait.
 * Without a driver: "SKIP all: no CUDA driver (...)" and exit 77 (automake's SKIP). Exit 1 when
 * an item FAILs, 0 otherwise.
 *
 * The child of the IPC item is forked first thing, before this process touches CUDA (CUDA may not
 * be used in a child forked after the parent initialised it); it waits on the socket until the
 * parent reaches that item (or closes the socket).
 *
 * Usage: dev_probe [--quick] [--json FILE]    (--quick: small sizes, a few seconds)
 */
#include "config.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/status.h"
#include "device/dev.h"
#include "device/dev_cuda.h"
#include "reduce/half.h"
#include "reduce/kernel.h"

#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)

static const st_dev_ops_t *D = &st_dev_cuda_ops;
static int                 quick;

/* ---- results ---- */

typedef struct {
    char result[8];
    char name[96];
    char detail[512];
} item_t;

static item_t *items;
static int     nitems, nfail, npass, nskip;
static char    metrics[16384]; /* "key": value, ... */
static char    env_json[2048];

static void report(const char *result, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void report(const char *result, const char *name, const char *fmt, ...)
{
    item_t *it;
    va_list ap;

    items = realloc(items, (nitems + 1) * sizeof(*items));
    if (items == NULL) {
        perror("realloc");
        exit(2);
    }
    it = &items[nitems++];
    snprintf(it->result, sizeof(it->result), "%s", result);
    snprintf(it->name, sizeof(it->name), "%s", name);
    va_start(ap, fmt);
    vsnprintf(it->detail, sizeof(it->detail), fmt, ap);
    va_end(ap);
    nfail += strcmp(result, "FAIL") == 0;
    npass += strcmp(result, "PASS") == 0;
    nskip += strcmp(result, "SKIP") == 0;
    printf("%s %s: %s\n", it->result, it->name, it->detail);
    fflush(stdout);
}

static void metric(const char *key, double value)
{
    size_t len = strlen(metrics);

    snprintf(metrics + len, sizeof(metrics) - len, "%s\"%s\": %.6g", len ? ", " : "", key, value);
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') {
            fprintf(f, "\\%c", *s);
        } else if ((unsigned char)*s < 0x20) {
            fprintf(f, "\\u%04x", (unsigned char)*s);
        } else {
            fputc(*s, f);
        }
    }
    fputc('"', f);
}

static void json_write(FILE *f, const char *skipped)
{
    fprintf(f, "{\"probe\": \"dev_probe\", \"quick\": %s, ", quick ? "true" : "false");
    if (skipped != NULL) {
        fprintf(f, "\"skipped\": ");
        json_string(f, skipped);
        fprintf(f, ", ");
    }
    fprintf(f, "\"env\": {%s}, \"summary\": {\"pass\": %d, \"fail\": %d, \"skip\": %d}, ",
            env_json, npass, nfail, nskip);
    fprintf(f, "\"metrics\": {%s}, \"items\": [", metrics);
    for (int i = 0; i < nitems; i++) {
        fprintf(f, "%s{\"result\": \"%s\", \"name\": ", i ? ", " : "", items[i].result);
        json_string(f, items[i].name);
        fprintf(f, ", \"detail\": ");
        json_string(f, items[i].detail);
        fprintf(f, "}");
    }
    fprintf(f, "]}\n");
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};

    nanosleep(&ts, NULL);
}

/* Around the calls that are meant to fail: their errors are the library's, not this run's. */
static int saved_level;
static void quiet(int on)
{
    if (on) {
        saved_level  = st_log_level;
        st_log_level = ST_LOG_NONE;
    } else {
        st_log_level = saved_level;
        st_log_clear_error();
    }
}

static const char *why_last(st_status_t status)
{
    static char buf[600];

    snprintf(buf, sizeof(buf), "%s: %s", st_status_str(status), st_log_last_error());
    return buf;
}

/* splitmix64: the data of every item, reproducible from its seed */
static uint64_t mix(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static void fill_pattern(void *buf, size_t bytes, uint64_t seed)
{
    uint64_t state = seed, v;
    size_t   i;

    for (i = 0; i + 8 <= bytes; i += 8) {
        v = mix(&state);
        memcpy((char *)buf + i, &v, 8);
    }
    v = mix(&state);
    memcpy((char *)buf + i, &v, bytes - i);
}

/* Offset of the first difference of a and b, or -1. */
static long first_diff(const void *a, const void *b, size_t bytes)
{
    const unsigned char *x = a, *y = b;

    if (memcmp(a, b, bytes) == 0) {
        return -1;
    }
    for (size_t i = 0; i < bytes; i++) {
        if (x[i] != y[i]) {
            return (long)i;
        }
    }
    return -1;
}

/* ---- driver calls the table does not make (timing events, graph capture, attributes) ---- */

static struct {
    PFN_cuDriverGetVersion_v2020     DriverGetVersion;
    PFN_cuDeviceGet_v2000            DeviceGet;
    PFN_cuDeviceGetName_v2000        DeviceGetName;
    PFN_cuDeviceGetAttribute_v2000   DeviceGetAttribute;
    PFN_cuDeviceTotalMem_v3020       DeviceTotalMem;
    PFN_cuEventCreate_v2000          EventCreate;
    PFN_cuEventDestroy_v4000         EventDestroy;
    PFN_cuEventElapsedTime_v2000     EventElapsedTime; /* same arguments as the 12.8 variant */
    PFN_cuStreamBeginCapture_v10010  StreamBeginCapture;
    PFN_cuStreamEndCapture_v10000    StreamEndCapture;
    PFN_cuGraphDestroy_v10000        GraphDestroy;
} cu;

static int load_extra(void)
{
#define LOAD(_field, _sym, _ver)                                                                 \
    if ((*(void **)&cu._field = st_dev_cuda_proc(_sym, _ver)) == NULL) {                         \
        return report("FAIL", "driver_symbols", "%s (version %d) not found", _sym, _ver), -1;    \
    }
    LOAD(DriverGetVersion, "cuDriverGetVersion", 2020);
    LOAD(DeviceGet, "cuDeviceGet", 2000);
    LOAD(DeviceGetName, "cuDeviceGetName", 2000);
    LOAD(DeviceGetAttribute, "cuDeviceGetAttribute", 2000);
    LOAD(DeviceTotalMem, "cuDeviceTotalMem", 3020);
    LOAD(EventCreate, "cuEventCreate", 2000);
    LOAD(EventDestroy, "cuEventDestroy", 4000);
    LOAD(StreamBeginCapture, "cuStreamBeginCapture", 10010);
    LOAD(StreamEndCapture, "cuStreamEndCapture", 10000);
    LOAD(GraphDestroy, "cuGraphDestroy", 10000);
#undef LOAD
    *(void **)&cu.EventElapsedTime = st_dev_cuda_proc("cuEventElapsedTime", 12080);
    if (cu.EventElapsedTime == NULL) {
        *(void **)&cu.EventElapsedTime = st_dev_cuda_proc("cuEventElapsedTime", 2000);
    }
    if (cu.EventElapsedTime == NULL) {
        report("FAIL", "driver_symbols", "cuEventElapsedTime not found");
        return -1;
    }
    return 0;
}

/* A timing event (the table's events do not time); recorded and waited on through the table. */
static st_dev_event_t *timing_event(void)
{
    CUevent e = NULL;

    if (cu.EventCreate(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        return NULL;
    }
    return (st_dev_event_t *)e;
}

static double elapsed_ms(st_dev_event_t *a, st_dev_event_t *b)
{
    float ms = -1;

    if (cu.EventElapsedTime(&ms, (CUevent)a, (CUevent)b) != CUDA_SUCCESS) {
        return -1;
    }
    return ms;
}

/* ---- the IPC child ---- */

typedef struct {
    uint64_t bytes; /* 0: nothing to import, exit */
    uint64_t seed_parent, seed_child;
} ipc_msg_t;

typedef struct {
    int32_t ok;
    char    detail[400];
} ipc_reply_t;

static int send_fd(int sock, const void *msg, size_t len, int fd)
{
    char            ctl[CMSG_SPACE(sizeof(int))];
    struct iovec    iov = {(void *)msg, len};
    struct msghdr   mh  = {0};
    struct cmsghdr *cm;

    mh.msg_iov    = &iov;
    mh.msg_iovlen = 1;
    if (fd >= 0) {
        memset(ctl, 0, sizeof(ctl));
        mh.msg_control    = ctl;
        mh.msg_controllen = sizeof(ctl);
        cm                = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level    = SOL_SOCKET;
        cm->cmsg_type     = SCM_RIGHTS;
        cm->cmsg_len      = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

static ssize_t recv_fd(int sock, void *msg, size_t len, int *fd_p)
{
    char            ctl[CMSG_SPACE(sizeof(int))];
    struct iovec    iov = {msg, len};
    struct msghdr   mh  = {0};
    struct cmsghdr *cm;
    ssize_t         n;

    *fd_p             = -1;
    mh.msg_iov        = &iov;
    mh.msg_iovlen     = 1;
    mh.msg_control    = ctl;
    mh.msg_controllen = sizeof(ctl);
    do {
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    for (cm = CMSG_FIRSTHDR(&mh); n > 0 && cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
            memcpy(fd_p, CMSG_DATA(cm), sizeof(int));
        }
    }
    return n;
}

/* The child: import the parent's allocation, check the parent's pattern, write its own. */
static void ipc_child(int sock)
{
    st_dev_stream_t *s = NULL;
    ipc_reply_t      r = {0};
    ipc_msg_t        m;
    st_status_t      status;
    void            *p = NULL, *h = NULL, *want = NULL;
    long             off;
    int              fd;

    if (recv_fd(sock, &m, sizeof(m), &fd) != (ssize_t)sizeof(m) || m.bytes == 0) {
        _exit(0); /* the parent skipped the item, or is gone */
    }
    if (!st_dev_cuda_probe()) {
        snprintf(r.detail, sizeof(r.detail), "child: no CUDA (%s)", st_dev_cuda_why(NULL));
        goto out;
    }
    if (fd < 0) {
        snprintf(r.detail, sizeof(r.detail), "child: no file descriptor came with the message");
        goto out;
    }
    if ((status = D->set_current(0)) != ST_OK ||
        (status = D->mem_import(fd, m.bytes, &p)) != ST_OK) {
        snprintf(r.detail, sizeof(r.detail), "child: import failed: %s", why_last(status));
        goto out;
    }
    close(fd);
    want = malloc(m.bytes);
    if (want == NULL || (status = D->host_alloc(m.bytes, &h)) != ST_OK ||
        (status = D->stream_create(&s)) != ST_OK) {
        snprintf(r.detail, sizeof(r.detail), "child: setup failed");
        goto out_unimport;
    }
    if ((status = D->copy(h, p, m.bytes, s)) != ST_OK ||
        (status = D->stream_sync(s, 10000000)) != ST_OK) {
        snprintf(r.detail, sizeof(r.detail), "child: reading the import: %s", why_last(status));
        goto out_unimport;
    }
    fill_pattern(want, m.bytes, m.seed_parent);
    if ((off = first_diff(h, want, m.bytes)) >= 0) {
        snprintf(r.detail, sizeof(r.detail),
                 "child: the parent's bytes differ at offset %ld of %llu", off,
                 (unsigned long long)m.bytes);
        goto out_unimport;
    }
    fill_pattern(h, m.bytes, m.seed_child);
    if ((status = D->copy(p, h, m.bytes, s)) != ST_OK ||
        (status = D->stream_sync(s, 10000000)) != ST_OK) {
        snprintf(r.detail, sizeof(r.detail), "child: writing the import: %s", why_last(status));
        goto out_unimport;
    }
    r.ok = 1;
    snprintf(r.detail, sizeof(r.detail), "child pid %d mapped %llu bytes, read the parent's, "
             "wrote its own", (int)getpid(), (unsigned long long)m.bytes);
out_unimport:
    D->stream_destroy(s);
    D->host_free(h);
    free(want);
    D->mem_unimport(p, m.bytes);
out:
    (void)send(sock, &r, sizeof(r), MSG_NOSIGNAL);
    _exit(0);
}

/* ---- items ---- */

static int dev0_attr(CUdevice_attribute a)
{
    CUdevice dev;
    int      v = -1;

    if (cu.DeviceGet(&dev, 0) != CUDA_SUCCESS || cu.DeviceGetAttribute(&v, a, dev) != CUDA_SUCCESS) {
        return -1;
    }
    return v;
}

static void probe_env(void)
{
    CUdevice dev;
    char     name[128] = "?";
    size_t   total     = 0;
    int      drv = 0, vmm, fd, mem64, uva, major, minor, sms;

    cu.DriverGetVersion(&drv);
    if (cu.DeviceGet(&dev, 0) == CUDA_SUCCESS) {
        cu.DeviceGetName(name, sizeof(name), dev);
        cu.DeviceTotalMem(&total, dev);
    }
    vmm   = dev0_attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
    fd    = dev0_attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
    mem64 = dev0_attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS);
    uva   = dev0_attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
    major = dev0_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    minor = dev0_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    sms   = dev0_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    report("PASS", "env",
           "driver %d.%d, %d device(s), device 0 \"%s\" sm_%d%d, %d SMs, %.1f GiB, vmm %d, "
           "posix_fd %d, 64-bit memops %d, unified addressing %d, kernels fatbin %zu bytes",
           drv / 1000, drv % 1000 / 10, D->count(), name, major, minor, sms,
           (double)total / GIB, vmm, fd, mem64, uva, st_reduce_fatbin_size);
    snprintf(env_json, sizeof(env_json),
             "\"driver\": %d, \"devices\": %d, \"name\": \"%s\", \"cc\": %d, \"sms\": %d, "
             "\"mem_bytes\": %zu, \"vmm\": %d, \"posix_fd\": %d, \"memops64\": %d, \"uva\": %d, "
             "\"fatbin_bytes\": %zu",
             drv, D->count(), name, major * 10 + minor, sms, total, vmm, fd, mem64, uva,
             st_reduce_fatbin_size);
}

static void probe_devices(void)
{
    st_status_t status;
    int         n = D->count(), cur, ok;

    if (n < 1) {
        report("FAIL", "count", "%d devices after a successful probe", n);
        return;
    }
    if ((status = D->set_current(0)) != ST_OK) {
        report("FAIL", "set_current", "set_current(0): %s", why_last(status));
        return;
    }
    cur = D->current();
    if (cur != 0) {
        report("FAIL", "current", "current() is %d after set_current(0)", cur);
        return;
    }
    quiet(1);
    ok = D->set_current(n) == ST_ERR_INVALID && D->set_current(-1) == ST_ERR_INVALID;
    quiet(0);
    if (!ok) {
        report("FAIL", "set_current", "a device out of range was not ST_ERR_INVALID");
        return;
    }
    status = D->set_current(n - 1);
    cur    = D->current();
    if (status != ST_OK || cur != n - 1 || D->set_current(0) != ST_OK || D->current() != 0) {
        report("FAIL", "set_current", "set_current(%d) then current() = %d (%s)", n - 1, cur,
               st_status_str(status));
        return;
    }
    report("PASS", "devices", "count %d; set_current(0), set_current(%d) and back; current() "
           "follows; -1 and %d are ST_ERR_INVALID", n, n - 1, n);
}

static void probe_memory(void)
{
    st_status_t status;
    char        stack_byte = 0, *dev = NULL, *pinned = NULL, *heap = NULL;
    int         d = -7, d2 = -7, zeroes = 1;
    size_t      bytes = MIB;
    void       *p;

    quiet(1);
    status = D->mem_alloc(0, &p);
    quiet(0);
    if (status != ST_ERR_INVALID) {
        report("FAIL", "mem_alloc", "0 bytes was not ST_ERR_INVALID");
    }
    if ((status = D->mem_alloc(bytes, (void **)&dev)) != ST_OK ||
        (status = D->host_alloc(bytes, (void **)&pinned)) != ST_OK) {
        report("FAIL", "mem_alloc", "%s", why_last(status));
        goto out;
    }
    for (size_t i = 0; i < bytes; i++) {
        zeroes &= pinned[i] == 0;
    }
    report(zeroes ? "PASS" : "FAIL", "host_alloc", "%zu bytes pinned, %szero-filled", bytes,
           zeroes ? "" : "NOT ");
    heap = malloc(64);
    if (D->ptr_type(dev, &d) != ST_DEV_PTR_DEVICE || d != 0 ||
        D->ptr_type(dev + bytes - 1, &d2) != ST_DEV_PTR_DEVICE || d2 != 0 ||
        D->ptr_type(pinned, NULL) != ST_DEV_PTR_HOST || D->ptr_type(heap, NULL) != ST_DEV_PTR_HOST ||
        D->ptr_type(&stack_byte, NULL) != ST_DEV_PTR_HOST ||
        D->ptr_type(NULL, NULL) != ST_DEV_PTR_HOST) {
        report("FAIL", "ptr_type", "device %d/%d (dev %d, %d); pinned %d heap %d stack %d NULL %d",
               D->ptr_type(dev, NULL), D->ptr_type(dev + bytes - 1, NULL), d, d2,
               D->ptr_type(pinned, NULL), D->ptr_type(heap, NULL), D->ptr_type(&stack_byte, NULL),
               D->ptr_type(NULL, NULL));
    } else {
        report("PASS", "ptr_type", "mem_alloc start and last byte: device 0; host_alloc, malloc, "
               "stack, NULL: host");
    }
    if ((status = D->mem_free(dev)) != ST_OK || (status = D->mem_free(NULL)) != ST_OK) {
        report("FAIL", "mem_free", "%s", why_last(status));
    } else {
        report("PASS", "mem_free", "a mem_alloc pointer and NULL");
    }
    dev = NULL;
out:
    D->mem_free(dev);
    D->host_free(pinned);
    D->host_free(NULL);
    free(heap);
}

/* Host -> device -> device -> host round trips on a strata stream and the legacy stream, pinned
 * and pageable, and zero() of an inner range. */
static void probe_copy(st_dev_stream_t *s)
{
    const size_t sizes[] = {1, 4097, 64 * MIB + 3};
    st_status_t  status  = ST_OK;
    char        *a = NULL, *b = NULL, *h1 = NULL, *h2 = NULL, *pg = NULL;
    size_t       max = sizes[2];
    long         off;

    if ((status = D->mem_alloc(max, (void **)&a)) != ST_OK ||
        (status = D->mem_alloc(max, (void **)&b)) != ST_OK ||
        (status = D->host_alloc(max, (void **)&h1)) != ST_OK ||
        (status = D->host_alloc(max, (void **)&h2)) != ST_OK || (pg = malloc(max)) == NULL) {
        report("FAIL", "copy", "allocations: %s", why_last(status));
        goto out;
    }
    for (size_t k = 0; k < ST_ARRAY_SIZE(sizes); k++) {
        size_t n = sizes[k];

        for (int legacy = 0; legacy < 2; legacy++) {
            st_dev_stream_t *q = legacy ? NULL : s;

            fill_pattern(h1, n, 100 + k * 2 + legacy);
            memset(h2, 0xee, n);
            memset(pg, 0xdd, n);
            ST_CHECK_GOTO(D->copy(a, h1, n, q), status, fail);  /* pinned -> device */
            ST_CHECK_GOTO(D->copy(b, a, n, q), status, fail);   /* device -> device */
            ST_CHECK_GOTO(D->copy(h2, b, n, q), status, fail);  /* device -> pinned */
            ST_CHECK_GOTO(D->copy(pg, b, n, q), status, fail);  /* device -> pageable */
            ST_CHECK_GOTO(D->stream_sync(q, -1), status, fail);
            if ((off = first_diff(h1, h2, n)) >= 0 || (off = first_diff(h1, pg, n)) >= 0) {
                report("FAIL", "copy", "%zu bytes on the %s stream differ at offset %ld", n,
                       legacy ? "legacy" : "strata", off);
                goto out;
            }
            /* pageable -> device, then zero an inner range */
            fill_pattern(pg, n, 200 + k);
            ST_CHECK_GOTO(D->copy(a, pg, n, q), status, fail);
            if (n > 2) {
                ST_CHECK_GOTO(D->zero(a + 1, n - 2, q), status, fail);
            }
            ST_CHECK_GOTO(D->copy(h2, a, n, q), status, fail);
            ST_CHECK_GOTO(D->stream_sync(q, -1), status, fail);
            if (n > 2) {
                memset(pg + 1, 0, n - 2);
            }
            if ((off = first_diff(pg, h2, n)) >= 0) {
                report("FAIL", "zero", "%zu bytes (zero of [1, %zu)) on the %s stream differ at "
                       "offset %ld", n, n - 1, legacy ? "legacy" : "strata", off);
                goto out;
            }
        }
    }
    report("PASS", "copy", "1, 4097 and 64 MiB+3 bytes pinned->device->device->pinned and "
           "->pageable, pageable->device, on a strata stream and the legacy stream: exact");
    report("PASS", "zero", "inner ranges of 4097 and 64 MiB+3 bytes zeroed, neighbours kept");
    goto out;
fail:
    report("FAIL", "copy", "%s", why_last(status));
out:
    D->mem_free(a);
    D->mem_free(b);
    D->host_free(h1);
    D->host_free(h2);
    free(pg);
}

static void probe_capture(st_dev_stream_t *s)
{
    CUgraph graph = NULL;
    CUresult res;
    int      before, during, after, legacy;

    before = D->stream_capturing(s);
    legacy = D->stream_capturing(NULL);
    res    = cu.StreamBeginCapture((CUstream)s, CU_STREAM_CAPTURE_MODE_RELAXED);
    if (res != CUDA_SUCCESS) {
        report("FAIL", "stream_capturing", "cuStreamBeginCapture failed: %d", (int)res);
        return;
    }
    during = D->stream_capturing(s);
    res    = cu.StreamEndCapture((CUstream)s, &graph);
    if (graph != NULL) {
        cu.GraphDestroy(graph);
    }
    after = D->stream_capturing(s);
    report(before == 0 && legacy == 0 && during == 1 && after == 0 && res == CUDA_SUCCESS ? "PASS"
                                                                                       : "FAIL",
           "stream_capturing",
           "strata stream %d, legacy stream %d, during cuStreamBeginCapture %d, after "
           "cuStreamEndCapture %d (want 0 0 1 0)", before, legacy, during, after);
    report("SKIP", "stream_capturing_invalid",
           "a destroyed handle is not probed: the driver does not promise to detect one (-1 is "
           "what a detected invalid handle gives)");
}

/* The gate holds a stream until the host writes the word; GEQ; stream_sync and event_wait time
 * out while it holds and return once it opens. */
static void probe_gate(st_dev_stream_t *s, uint64_t *word)
{
    st_dev_event_t *e = NULL;
    st_status_t     status, held_e, held_s, opened_e, opened_s;
    double          t0, t_e, t_s;

    if ((status = D->event_create(&e)) != ST_OK) {
        report("FAIL", "event_create", "%s", why_last(status));
        return;
    }
    t0     = now_s();
    status = D->event_wait(e, -1);
    if (status != ST_OK || D->event_wait(e, 0) != ST_OK || now_s() - t0 > 0.1) {
        report("FAIL", "event_wait", "a never recorded event is not done at once (%s)",
               st_status_str(status));
    }
    quiet(1);
    status = D->wait_value(s, (uint64_t *)((char *)word + 4), 1);
    quiet(0);
    if (status != ST_ERR_INVALID) {
        report("FAIL", "wait_value", "a misaligned word was not ST_ERR_INVALID");
    }
    D->write_value(word, 1);
    if ((status = D->wait_value(s, word, 3)) != ST_OK ||
        (status = D->event_record(e, s)) != ST_OK) {
        report("FAIL", "wait_value", "%s", why_last(status));
        goto out;
    }
    t0       = now_s();
    held_e   = D->event_wait(e, 2000);
    t_e      = now_s() - t0;
    t0       = now_s();
    held_s   = D->stream_sync(s, 3000);
    t_s      = now_s() - t0;
    D->write_value(word, 2); /* still below 3 */
    sleep_us(2000);
    status   = D->event_wait(e, 0);
    D->write_value(word, 5); /* >= 3 opens */
    opened_e = D->event_wait(e, 1000000);
    opened_s = D->stream_sync(s, 1000000);
    if (held_e != ST_INPROGRESS || held_s != ST_INPROGRESS || status != ST_INPROGRESS ||
        opened_e != ST_OK || opened_s != ST_OK) {
        report("FAIL", "gate",
               "held: event_wait(2 ms) %s after %.2f ms, stream_sync(3 ms) %s after %.2f ms; at 2 "
               "< 3 %s; opened at 5: event_wait %s, stream_sync %s",
               st_status_str(held_e), t_e * 1e3, st_status_str(held_s), t_s * 1e3,
               st_status_str(status), st_status_str(opened_e), st_status_str(opened_s));
    } else {
        report("PASS", "gate",
               "wait_value(>= 3) held the stream: event_wait(2 ms) ST_INPROGRESS after %.2f ms, "
               "stream_sync(3 ms) after %.2f ms, still held at 2; write_value 5 opened it",
               t_e * 1e3, t_s * 1e3);
    }
    if ((status = D->event_record(e, NULL)) != ST_OK ||
        (status = D->stream_sync(NULL, 1000000)) != ST_OK ||
        (status = D->event_wait(e, -1)) != ST_OK) {
        report("FAIL", "legacy_stream", "event_record / stream_sync on NULL: %s", why_last(status));
    } else {
        report("PASS", "legacy_stream", "event_record, stream_sync and event_wait on the NULL "
               "stream (CU_STREAM_LEGACY)");
    }
out:
    D->event_destroy(e);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static void stats(const char *key, double *us, int n, char *out, size_t len)
{
    char k[96];

    qsort(us, n, sizeof(*us), cmp_double);
    snprintf(out, len, "median %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us (%d iterations)",
             us[n / 2], us[n * 9 / 10], us[n * 99 / 100], us[n - 1], n);
    snprintf(k, sizeof(k), "%s_median_us", key);
    metric(k, us[n / 2]);
    snprintf(k, sizeof(k), "%s_p99_us", key);
    metric(k, us[n * 99 / 100]);
}

/* Latencies: the gate's release seen by polling the event after the wait; event_wait with a limit
 * (the backoff) and without (blocking sync); event_wait on a completed event. */
static void probe_latency(st_dev_stream_t *s, uint64_t *word)
{
    const int       n     = quick ? 200 : 1000;
    st_dev_event_t *e     = NULL;
    double         *us    = calloc(n, sizeof(double));
    char            text[256];
    st_status_t     status = ST_OK;
    uint64_t        v      = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    double          t0;
    const char     *names[3] = {"gate_latency", "event_wait_timed", "event_wait_blocking"};

    if (us == NULL || (status = D->event_create(&e)) != ST_OK) {
        report("FAIL", "gate_latency", "setup: %s", st_status_str(status));
        goto out;
    }
    for (int mode = 0; mode < 3; mode++) {
        for (int i = 0; i < n; i++) {
            v++;
            ST_CHECK_GOTO(D->wait_value(s, word, v), status, fail);
            ST_CHECK_GOTO(D->event_record(e, s), status, fail);
            sleep_us(30); /* the stream reaches its wait */
            t0 = now_s();
            D->write_value(word, v);
            if (mode == 0) {
                while ((status = D->event_wait(e, 0)) == ST_INPROGRESS) {
                    if (now_s() - t0 > 1.0) {
                        break;
                    }
                }
            } else {
                status = D->event_wait(e, mode == 1 ? 1000000 : -1);
            }
            us[i] = (now_s() - t0) * 1e6;
            if (status != ST_OK) {
                goto fail;
            }
        }
        stats(names[mode], us, n, text, sizeof(text));
        report("PASS", names[mode], "%s; %s", text,
               mode == 0   ? "host write_value -> the event after wait_value, polled"
               : mode == 1 ? "write_value -> event_wait(1 s) returns (2-200 us sleeps)"
                           : "write_value -> event_wait(no limit) returns (blocking sync)");
    }
    for (int i = 0; i < n; i++) {
        t0     = now_s();
        status = D->event_wait(e, -1);
        us[i]  = (now_s() - t0) * 1e6;
    }
    stats("event_wait_done", us, n, text, sizeof(text));
    report("PASS", "event_wait_done", "%s; on an event already complete", text);
    goto out;
fail:
    report("FAIL", "gate_latency", "%s", why_last(status));
    D->write_value(word, UINT64_MAX / 2); /* never leave the stream held */
out:
    D->event_destroy(e);
    free(us);
}

static void probe_ipc(int sock, pid_t child)
{
    const size_t bytes  = 32 * MIB + 1;
    ipc_msg_t    m      = {0};
    ipc_reply_t  r      = {0};
    st_status_t  status = ST_OK;
    char        *sh = NULL, *h = NULL, *want = NULL, *dev = NULL;
    size_t       alloc_bytes = 0;
    long         off;
    int          fd = -1, zero = 1, ok, wst = 0;
    struct pollfd pfd = {sock, POLLIN, 0};

    status = D->mem_alloc_shared(bytes, (void **)&sh, &alloc_bytes);
    if (status == ST_ERR_UNSUPPORTED) {
        report("SKIP", "ipc", "mem_alloc_shared is ST_ERR_UNSUPPORTED: the device cannot share "
               "memory (virtual memory management %d, POSIX fd handles %d)",
               dev0_attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
               dev0_attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED));
        goto out;
    }
    if (status != ST_OK) {
        report("FAIL", "mem_alloc_shared", "%s", why_last(status));
        goto out;
    }
    if ((status = D->host_alloc(alloc_bytes, (void **)&h)) != ST_OK ||
        (want = malloc(alloc_bytes)) == NULL ||
        (status = D->mem_alloc(4096, (void **)&dev)) != ST_OK) {
        report("FAIL", "ipc", "setup: %s", why_last(status));
        goto out;
    }
    ST_CHECK_GOTO(D->copy(h, sh, alloc_bytes, NULL), status, fail);
    ST_CHECK_GOTO(D->stream_sync(NULL, -1), status, fail);
    for (size_t i = 0; i < alloc_bytes; i++) {
        zero &= h[i] == 0;
    }
    report(zero && alloc_bytes >= bytes ? "PASS" : "FAIL", "mem_alloc_shared",
           "%zu bytes asked, %zu given (the granularity), %szero-filled; ptr_type %s", bytes,
           alloc_bytes, zero ? "" : "NOT ",
           D->ptr_type(sh, NULL) == ST_DEV_PTR_DEVICE ? "device" : "HOST (wrong)");
    m.bytes       = alloc_bytes;
    m.seed_parent = 0x5eed0001;
    m.seed_child  = 0x5eed0002;
    fill_pattern(h, alloc_bytes, m.seed_parent);
    ST_CHECK_GOTO(D->copy(sh, h, alloc_bytes, NULL), status, fail);
    ST_CHECK_GOTO(D->stream_sync(NULL, -1), status, fail);
    quiet(1);
    ok = D->mem_export(dev, &fd) == ST_ERR_INVALID && D->mem_export(sh + 1, &fd) == ST_ERR_INVALID;
    quiet(0);
    if (!ok) {
        report("FAIL", "mem_export", "a pointer that does not start a shareable allocation was "
               "not ST_ERR_INVALID");
    }
    ST_CHECK_GOTO(D->mem_export(sh, &fd), status, fail);
    if (child <= 0 || send_fd(sock, &m, sizeof(m), fd) != 0) {
        report("FAIL", "ipc", "could not hand the fd to the child: %s", strerror(errno));
        goto out;
    }
    close(fd);
    fd = -1;
    if (poll(&pfd, 1, 60000) != 1 || recv(sock, &r, sizeof(r), MSG_WAITALL) != sizeof(r)) {
        report("FAIL", "ipc", "no answer from the child within 60 s");
        goto out;
    }
    if (!r.ok) {
        report("FAIL", "ipc", "%s", r.detail);
        goto out;
    }
    ST_CHECK_GOTO(D->copy(h, sh, alloc_bytes, NULL), status, fail);
    ST_CHECK_GOTO(D->stream_sync(NULL, -1), status, fail);
    fill_pattern(want, alloc_bytes, m.seed_child);
    off = first_diff(h, want, alloc_bytes);
    if (off >= 0) {
        report("FAIL", "ipc", "%s; but the parent reads different bytes at offset %ld", r.detail,
               off);
    } else {
        report("PASS", "ipc", "mem_export fd over SCM_RIGHTS; %s; the parent reads them back",
               r.detail);
    }
    status = D->mem_free_shared(sh);
    sh     = NULL;
    quiet(1);
    ok = D->mem_free_shared(h) == ST_ERR_INVALID;
    quiet(0);
    if (status != ST_OK || !ok) {
        report("FAIL", "mem_free_shared", "%s, or a foreign pointer was not ST_ERR_INVALID",
               st_status_str(status));
    } else {
        report("PASS", "mem_free_shared", "freed after the child unmapped; a pinned host pointer "
               "is ST_ERR_INVALID");
    }
    goto out;
fail:
    report("FAIL", "ipc", "%s", why_last(status));
out:
    if (fd >= 0) {
        close(fd);
    }
    m.bytes = 0;
    (void)send(sock, &m, sizeof(m), MSG_NOSIGNAL); /* a child still waiting leaves */
    if (child > 0) {
        waitpid(child, &wst, 0);
    }
    D->mem_free_shared(sh);
    D->mem_free(dev);
    D->host_free(h);
    free(want);
}

/* ---- the reduction kernel, byte for byte against the CPU ---- */

static const strataDataType_t dtypes[] = {strataInt8,    strataUint8,   strataInt32, strataUint32,
                                          strataInt64,   strataUint64,  strataFloat16,
                                          strataFloat32, strataFloat64, strataBfloat16};
static const char *const      opnames[] = {"sum", "prod", "max", "min", "avg", "premul"};

static uint64_t specials(strataDataType_t dt, uint64_t r)
{
    static const uint64_t f16[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7d01, 0x7e55,
                                   0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0xbc00};
    static const uint64_t b16[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0x7fd5,
                                   0x0001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80};
    static const uint64_t f32[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000,
                                   0xffc00000, 0x7fa00001, 0x7fc12345, 0x00000001, 0x007fffff,
                                   0x00800000, 0x7f7fffff, 0xff7fffff, 0x3f800000, 0xbf800000};
    static const uint64_t f64[] = {
        0, UINT64_C(0x8000000000000000), UINT64_C(0x7ff0000000000000),
        UINT64_C(0xfff0000000000000), UINT64_C(0x7ff8000000000000), UINT64_C(0xfff8000000000000),
        UINT64_C(0x7ff4000000000001), UINT64_C(0x7ff8000000012345), 1,
        UINT64_C(0x000fffffffffffff), UINT64_C(0x0010000000000000), UINT64_C(0x7fefffffffffffff),
        UINT64_C(0xffefffffffffffff), UINT64_C(0x3ff0000000000000), UINT64_C(0xbff0000000000000)};
    static const uint64_t ints[] = {0, 1, UINT64_MAX, 2, 0x7f, 0x80, 0xff, 0x7fffffff, 0x80000000,
                                    0xffffffff, UINT64_C(0x7fffffffffffffff),
                                    UINT64_C(0x8000000000000000), 0x55, 0xaa, 3};

    switch (dt) {
    case strataFloat16: return f16[r % ST_ARRAY_SIZE(f16)];
    case strataBfloat16: return b16[r % ST_ARRAY_SIZE(b16)];
    case strataFloat32: return f32[r % ST_ARRAY_SIZE(f32)];
    case strataFloat64: return f64[r % ST_ARRAY_SIZE(f64)];
    default: return ints[r % ST_ARRAY_SIZE(ints)];
    }
}

/* One element: 1/16 special values, 1/4 random bits, else a value of magnitude 1/4 .. 4 (floats)
 * or -8 .. 8 (integers), so that sums and products round rather than saturate at once. */
static uint64_t element(strataDataType_t dt, uint64_t *state)
{
    uint64_t r = mix(state), sign = r >> 63, e = (r >> 8) % 5, m = r >> 16;

    if (r % 16 == 0) {
        return specials(dt, r >> 4);
    }
    if (r % 4 == 1) {
        return mix(state);
    }
    switch (dt) {
    case strataFloat16: return sign << 15 | (15 + e - 2) << 10 | (m & 0x3ff);
    case strataBfloat16: return sign << 15 | (127 + e - 2) << 7 | (m & 0x7f);
    case strataFloat32: return sign << 31 | (127 + e - 2) << 23 | (m & 0x7fffff);
    case strataFloat64: return sign << 63 | (1023 + e - 2) << 52 | (m & UINT64_C(0xfffffffffffff));
    default: return (uint64_t)((int64_t)(m % 17) - 8);
    }
}

static int elem_is_nan(strataDataType_t dt, uint64_t b)
{
    switch (dt) {
    case strataFloat16: return (b & 0x7fff) > 0x7c00;
    case strataBfloat16: return (b & 0x7fff) > 0x7f80;
    case strataFloat32: return (b & 0x7fffffff) > 0x7f800000;
    case strataFloat64: return (b & UINT64_C(0x7fffffffffffffff)) > UINT64_C(0x7ff0000000000000);
    default: return 0;
    }
}

static uint64_t elem_get(const void *buf, size_t i, size_t esize)
{
    uint64_t v = 0;

    memcpy(&v, (const char *)buf + i * esize, esize); /* little-endian */
    return v;
}

static st_status_t redop_for(int op, strataDataType_t dt, int nsrcs, st_redop_t *r)
{
    union {
        int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64;
        uint16_t h16; float f32; double f64;
    } scalar;

    if (op < 5) {
        return st_redop_init(r, (strataRedOp_t)op, dt, nsrcs);
    }
    memset(&scalar, 0, sizeof(scalar));
    switch (dt) {
    case strataInt8: scalar.i8 = -3; break;
    case strataUint8: scalar.u8 = 3; break;
    case strataInt32: scalar.i32 = -3; break;
    case strataUint32: scalar.u32 = 3; break;
    case strataInt64: scalar.i64 = -3; break;
    case strataUint64: scalar.u64 = 3; break;
    case strataFloat16: scalar.h16 = st_float_to_half(0.3f); break;
    case strataFloat32: scalar.f32 = 0.3f; break;
    case strataFloat64: scalar.f64 = 0.3; break;
    default: scalar.h16 = st_float_to_bf16(0.3f); break;
    }
    return st_redop_init_premul(r, dt, &scalar);
}

typedef struct {
    size_t stride;                /* elements between sources (a multiple of 256) */
    size_t region;                /* elements of dst compared: misalignment, count, guard */
    char  *dsrc, *ddst;           /* device: 8 sources, dst */
    char  *hsrc, *hres;           /* pinned: the sources' host copy, the result read back */
    char  *href;                  /* the CPU's result */
} exact_t;

#define EXACT_GUARD 16

/* One case; 0 equal, 1 different (described in *diff), -1 a device error (logged). */
static int exact_case(exact_t *x, st_dev_stream_t *s, strataDataType_t dt, int op, int nsrcs,
                      int misaligned, size_t count, char *diff, size_t difflen)
{
    const size_t    esize = st_dtype_size(dt);
    st_reduce_job_t job, hjob;
    size_t          off_dst = misaligned ? 1 : 0, bytes = (off_dst + count + EXACT_GUARD) * esize;
    size_t          ndiff = 0, nnan = 0, first = 0;
    st_status_t     status;

    memset(&job, 0, sizeof(job));
    if (redop_for(op, dt, nsrcs, &job.redop) != ST_OK) {
        snprintf(diff, difflen, "no redop for %s %s", st_dtype_name(dt), opnames[op]);
        return 1;
    }
    job.nsrcs     = nsrcs;
    job.count     = count;
    job.pre_first = job.redop.premul;
    job.post      = st_redop_has_post(&job.redop);
    hjob          = job;
    for (int i = 0; i < nsrcs; i++) {
        /* misaligned: every pointer one element off, the last source two (mixed offsets) */
        size_t off = !misaligned ? 0 : (nsrcs > 1 && i == nsrcs - 1) ? 2 : 1;

        job.srcs[i]  = x->dsrc + (i * x->stride + off) * esize;
        hjob.srcs[i] = x->hsrc + (i * x->stride + off) * esize;
    }
    job.dst  = x->ddst + off_dst * esize;
    hjob.dst = x->href + off_dst * esize;

    if ((status = D->zero(x->ddst, bytes, s)) != ST_OK || (status = D->reduce(&job, s)) != ST_OK ||
        (status = D->copy(x->hres, x->ddst, bytes, s)) != ST_OK) {
        snprintf(diff, difflen, "%s", why_last(status));
        return -1;
    }
    memset(x->href, 0, bytes);
    st_reduce_job_run_host(&hjob); /* while the GPU works */
    if ((status = D->stream_sync(s, 60000000)) != ST_OK) {
        snprintf(diff, difflen, "stream_sync: %s", why_last(status));
        return -1;
    }
    if (memcmp(x->hres, x->href, bytes) == 0) {
        return 0;
    }
    for (size_t i = 0; i < off_dst + count + EXACT_GUARD; i++) {
        uint64_t g = elem_get(x->hres, i, esize), c = elem_get(x->href, i, esize);

        if (g != c) {
            first = ndiff++ == 0 ? i : first;
            nnan += elem_is_nan(dt, g) && elem_is_nan(dt, c);
        }
    }
    snprintf(diff, difflen,
             "%d sources, %s, count %zu: element %ld gpu 0x%llx cpu 0x%llx%s; %zu elements "
             "differ, %zu of them NaN on both sides (payload only)",
             nsrcs, misaligned ? "misaligned" : "aligned", count, (long)first - (long)off_dst,
             (unsigned long long)elem_get(x->hres, first, esize),
             (unsigned long long)elem_get(x->href, first, esize),
             first < off_dst || first >= off_dst + count ? " (outside dst: written past it)" : "",
             ndiff, nnan);
    return 1;
}

static void probe_exact(st_dev_stream_t *s)
{
    static const int    nsrcs_list[] = {1, 2, 3, 4, 8};
    const size_t        counts[]     = {1, 7, 4097, ((size_t)1 << 20) + 3};
    const int           ncounts      = quick ? 3 : 4;
    const size_t        maxcount     = counts[ncounts - 1];
    st_reduce_job_t     probe_job;
    exact_t             x;
    st_status_t         status = ST_OK;
    char                diff[700], first_diff_text[700];
    int                 total_fail = 0, total = 0, dead = 0;
    double              t0 = now_s();

    memset(&probe_job, 0, sizeof(probe_job));
    st_redop_init(&probe_job.redop, strataSum, strataFloat32, 2);
    probe_job.nsrcs = 2;
    if (st_reduce_fatbin_size == 0 || st_reduce_kernel_name(&probe_job) == NULL) {
        report("SKIP", "reduce_exact", "this build has no GPU reduction kernels "
               "(st_reduce_fatbin_size %zu, kernel name of a float sum %s)", st_reduce_fatbin_size,
               st_reduce_kernel_name(&probe_job) ? st_reduce_kernel_name(&probe_job) : "NULL");
        return;
    }
    memset(&x, 0, sizeof(x));
    x.stride = ST_DIV_ROUND_UP(maxcount + 64, 256) * 256;
    x.region = x.stride;
    if ((status = D->mem_alloc(8 * x.stride * 8, (void **)&x.dsrc)) != ST_OK ||
        (status = D->mem_alloc(x.region * 8, (void **)&x.ddst)) != ST_OK ||
        (status = D->host_alloc(8 * x.stride * 8, (void **)&x.hsrc)) != ST_OK ||
        (status = D->host_alloc(x.region * 8, (void **)&x.hres)) != ST_OK ||
        (x.href = malloc(x.region * 8)) == NULL) {
        report("FAIL", "reduce_exact", "allocations: %s", why_last(status));
        goto out;
    }
    for (size_t d = 0; d < ST_ARRAY_SIZE(dtypes) && !dead; d++) {
        const strataDataType_t dt    = dtypes[d];
        const size_t           esize = st_dtype_size(dt);
        uint64_t               state = 0x1234 + d, v;

        for (size_t i = 0; i < 8 * x.stride; i++) {
            v = element(dt, &state);
            memcpy(x.hsrc + i * esize, &v, esize);
        }
        if ((status = D->copy(x.dsrc, x.hsrc, 8 * x.stride * esize, s)) != ST_OK ||
            (status = D->stream_sync(s, -1)) != ST_OK) {
            report("FAIL", "reduce_exact", "uploading the sources: %s", why_last(status));
            goto out;
        }
        for (int op = 0; op < 6 && !dead; op++) {
            char name[64];
            int  cases = 0, failed = 0, ret;

            snprintf(name, sizeof(name), "reduce_exact_%s_%s", st_dtype_name(dt), opnames[op]);
            for (size_t k = 0; k < ST_ARRAY_SIZE(nsrcs_list) && !dead; k++) {
                for (int mis = 0; mis < 2 && !dead; mis++) {
                    for (int c = 0; c < ncounts; c++) {
                        ret = exact_case(&x, s, dt, op, nsrcs_list[k], mis, counts[c], diff,
                                         sizeof(diff));
                        cases++;
                        if (ret < 0) {
                            report("FAIL", name, "device error, the rest not run: %s", diff);
                            dead = 1;
                            break;
                        }
                        if (ret > 0 && failed++ == 0) {
                            snprintf(first_diff_text, sizeof(first_diff_text), "%s", diff);
                        }
                    }
                }
            }
            total += cases;
            total_fail += failed;
            if (dead) {
                break;
            }
            if (failed) {
                report("FAIL", name, "%d of %d cases differ; first: %s", failed, cases,
                       first_diff_text);
            } else {
                report("PASS", name, "%d cases (sources 1,2,3,4,8 x aligned,misaligned x counts "
                       "1,7,4097%s) byte for byte with st_reduce_job_run_host", cases,
                       quick ? "" : ",1M+3");
            }
        }
    }
    metric("reduce_exact_cases", total);
    metric("reduce_exact_failed", total_fail);
    metric("reduce_exact_seconds", now_s() - t0);
out:
    D->mem_free(x.dsrc);
    D->mem_free(x.ddst);
    D->host_free(x.hsrc);
    D->host_free(x.hres);
    free(x.href);
}

/* ---- bandwidth ---- */

/* Seconds per repetition of what run() queues on s, timed with events; < 0 on failure. */
static double timed(st_dev_stream_t *s, int reps, st_status_t (*run)(void *, st_dev_stream_t *),
                    void *arg)
{
    st_dev_event_t *a = timing_event(), *b = timing_event();
    double          ms = -1;

    if (a == NULL || b == NULL || run(arg, s) != ST_OK || D->stream_sync(s, -1) != ST_OK ||
        D->event_record(a, s) != ST_OK) {
        goto out;
    }
    for (int i = 0; i < reps; i++) {
        if (run(arg, s) != ST_OK) {
            goto out;
        }
    }
    if (D->event_record(b, s) != ST_OK || D->event_wait(b, -1) != ST_OK) {
        goto out;
    }
    ms = elapsed_ms(a, b);
out:
    if (a != NULL) {
        cu.EventDestroy((CUevent)a);
    }
    if (b != NULL) {
        cu.EventDestroy((CUevent)b);
    }
    return ms < 0 ? -1 : ms * 1e-3 / reps;
}

typedef struct {
    void       *dst;
    const void *src;
    size_t      bytes;
} copy_arg_t;

static st_status_t run_copy(void *arg, st_dev_stream_t *s)
{
    copy_arg_t *c = arg;

    return D->copy(c->dst, c->src, c->bytes, s);
}

static st_status_t run_reduce(void *arg, st_dev_stream_t *s)
{
    return D->reduce(arg, s);
}

static void probe_bandwidth(st_dev_stream_t *s)
{
    static const int              nsrcs_list[] = {2, 4, 8};
    static const strataDataType_t bw_types[]   = {strataInt8, strataBfloat16, strataFloat32};
    const size_t                  per_src      = quick ? 64 * MIB : GIB;
    const size_t                  copy_bytes   = quick ? 256 * MIB : 2 * GIB;
    const int                     reps         = quick ? 3 : 10;
    st_status_t                   status;
    char                         *src = NULL, *dst = NULL, key[96];
    double                        t, anchor = 0;
    copy_arg_t                    c;

    if ((status = D->mem_alloc(8 * per_src, (void **)&src)) != ST_OK ||
        (status = D->mem_alloc(ST_MAX(per_src, copy_bytes), (void **)&dst)) != ST_OK ||
        (status = D->zero(src, 8 * per_src, s)) != ST_OK ||
        (status = D->stream_sync(s, -1)) != ST_OK) {
        report("FAIL", "copy_bw", "allocations of %zu MiB: %s", (9 * per_src) / MIB,
               why_last(status));
        goto out;
    }
    c.dst   = dst;
    c.src   = src;
    c.bytes = copy_bytes;
    t       = timed(s, quick ? 5 : 20, run_copy, &c);
    if (t <= 0) {
        report("FAIL", "copy_bw", "timing the copy failed: %s", st_log_last_error());
        goto out;
    }
    anchor = 2.0 * copy_bytes / t / 1e9;
    metric("copy_d2d_GBps", anchor);
    report("PASS", "copy_bw", "cuMemcpyAsync device to device, %zu MiB: %.0f GB/s read+write "
           "(the anchor)", copy_bytes / MIB, anchor);

    if (st_reduce_fatbin_size == 0) {
        report("SKIP", "reduce_bw", "this build has no GPU reduction kernels");
        goto out;
    }
    for (size_t d = 0; d < ST_ARRAY_SIZE(bw_types); d++) {
        for (size_t k = 0; k < ST_ARRAY_SIZE(nsrcs_list); k++) {
            st_reduce_job_t job;
            const int       n = nsrcs_list[k];
            char            name[64];
            double          gbs;

            memset(&job, 0, sizeof(job));
            st_redop_init(&job.redop, strataSum, bw_types[d], n);
            job.nsrcs = n;
            job.count = per_src / st_dtype_size(bw_types[d]);
            job.dst   = dst;
            for (int i = 0; i < n; i++) {
                job.srcs[i] = src + i * per_src;
            }
            snprintf(name, sizeof(name), "reduce_bw_%s_%d", st_dtype_name(bw_types[d]), n);
            t = timed(s, reps, run_reduce, &job);
            if (t <= 0) {
                report("FAIL", name, "%s", st_log_last_error());
                continue;
            }
            gbs = (n + 1.0) * per_src / t / 1e9;
            snprintf(key, sizeof(key), "%s_GBps", name);
            metric(key, gbs);
            snprintf(key, sizeof(key), "%s_of_copy", name);
            metric(key, gbs / anchor);
            report("PASS", name, "%d sources x %zu MiB sum: %.0f GB/s ((sources+1) x bytes / "
                   "time), %.0f%% of the copy anchor", n, per_src / MIB, gbs,
                   100.0 * gbs / anchor);
        }
    }
out:
    D->mem_free(src);
    D->mem_free(dst);
}

/* ---- main ---- */

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s [--quick] [--json FILE]\n", prog);
    exit(2);
}

int main(int argc, char **argv)
{
    const char      *json = NULL, *why;
    st_dev_stream_t *s    = NULL;
    uint64_t        *word = NULL;
    st_status_t      status;
    double           t0 = now_s();
    pid_t            child;
    int              sv[2], no_driver = 0, wst;
    FILE            *f;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json = argv[++i];
        } else {
            usage(argv[0]);
        }
    }
    st_log_init(); /* STRATA_DEBUG=TRACE shows the backend's debug lines (the probe's reason) */
    /* fork first: the child initialises CUDA on its own, after the fork */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        perror("socketpair");
        return 2;
    }
    fflush(stdout);
    child = fork();
    if (child == 0) {
        close(sv[0]);
        ipc_child(sv[1]);
    }
    close(sv[1]);

    if (!st_dev_cuda_probe()) {
        char text[700];

        why = st_dev_cuda_why(&no_driver);
        snprintf(text, sizeof(text), "%s (%s)", no_driver ? "no CUDA driver" : "no usable CUDA "
                 "device", why);
        report("SKIP", "all", "%s", text);
        close(sv[0]); /* the child sees the end of the socket and leaves */
        if (child > 0) {
            waitpid(child, &wst, 0);
        }
        if (json != NULL && (f = fopen(json, "w")) != NULL) {
            json_write(f, text);
            fclose(f);
        }
        json_write(stdout, text);
        return 77;
    }
    if (load_extra() != 0) {
        return 1;
    }
    probe_env();
    probe_devices();
    if ((status = D->set_current(0)) != ST_OK || (status = D->stream_create(&s)) != ST_OK ||
        (status = D->host_alloc(64, (void **)&word)) != ST_OK) {
        report("FAIL", "setup", "device 0, a stream, a gate word: %s", why_last(status));
        return 1;
    }
    report("PASS", "stream_create", "non-blocking, the greatest priority");
    probe_memory();
    probe_copy(s);
    probe_capture(s);
    probe_gate(s, word);
    probe_latency(s, word);
    probe_ipc(sv[0], child);
    probe_exact(s);
    probe_bandwidth(s);
    D->stream_destroy(s);
    D->host_free(word);
    close(sv[0]);
    metric("seconds", now_s() - t0);
    if (json != NULL) {
        if ((f = fopen(json, "w")) == NULL) {
            perror(json);
        } else {
            json_write(f, NULL);
            fclose(f);
        }
    }
    json_write(stdout, NULL);
    return nfail ? 1 : 0;
}
