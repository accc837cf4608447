/*
 * test_dev_sim.c - the simulated device (src/device/dev_sim.c) through the device operations
 * table, and the choice of a backend (src/device/dev.c).
 *
 * main sets STRATA_DEVICE=sim, STRATA_SIM_DEVICES=2 and STRATA_SIM_DELAY_US=200 before the first
 * st_dev(), so every test runs with the fault injection on: each stream command first sleeps
 * 0..200 us, and the results must still be exact. The choice of a backend for other values is checked in children
 * that exec this binary again (st_dev() decides once per process) with their stderr captured, to
 * count what was logged. Forked children report through their exit status, never through cmocka.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "device/dev.h"
#include "device/dev_sim.h"
#include "reduce/kernel.h"
#include "transports/transport.h"

#define DELAY_US 200

static const st_dev_ops_t *dev;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------------------------------- */
/* The backend's choice                                                                           */
/* ---------------------------------------------------------------------------------------------- */

/* Child mode (--choice): st_dev() twice; exit 0 when NULL, 10 + count() for the simulated device,
 * 2 for another table, 3 when the second call logged again. */
static int choice_child(void)
{
    const st_dev_ops_t *d = st_dev();

    st_log_clear_error();
    if (st_dev() != d || st_log_last_error()[0] != '\0') {
        return 3;
    }
    if (d == NULL) {
        return 0;
    }
    return (d == &st_dev_sim_ops) ? 10 + d->count() : 2;
}

/* Runs this binary in --choice mode with STRATA_DEVICE=value (and STRATA_SIM_DEVICES=devices when
 * not NULL); returns its exit status and the number of lines of its stderr holding `needle`. */
static int run_choice(const char *value, const char *devices, const char *needle, int *lines_p)
{
    char  buf[8192];
    int   fds[2], status, len = 0;
    pid_t pid;

    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char *argv[] = {"test_dev_sim", "--choice", NULL};
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        setenv("STRATA_DEVICE", value, 1);
        unsetenv("STRATA_SIM_DELAY_US");
        unsetenv("STRATA_DEBUG");
        if (devices != NULL) {
            setenv("STRATA_SIM_DEVICES", devices, 1);
        }
        execv("/proc/self/exe", argv);
        _exit(99);
    }
    close(fds[1]);
    for (ssize_t n; (n = read(fds[0], buf + len, sizeof(buf) - 1 - (size_t)len)) > 0;) {
        len += (int)n;
    }
    buf[len] = '\0';
    close(fds[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    *lines_p = 0;
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        *lines_p += (strstr(line, needle) != NULL);
    }
    return WEXITSTATUS(status);
}

static void test_choice(void **state)
{
    const st_config_table_t *const *tables = st_transport_config_tables();
    int                              lines, found = 0;

    /* this process: STRATA_DEVICE=sim, STRATA_SIM_DELAY_US=200 from main */
    assert_ptr_equal(dev, &st_dev_sim_ops);
    assert_string_equal(dev->name, "sim");
    assert_int_equal(dev->count(), 2);
    assert_int_equal(st_dev_sim_delay_us(), DELAY_US);
    assert_ptr_equal(st_dev(), dev);
    /* the device table travels with the transports' to st_param_init */
    for (int i = 0; tables[i] != NULL; i++) {
        found += (tables[i] == st_dev_config_table());
    }
    assert_int_equal(found, 1);
    assert_int_equal(st_param_init(tables), ST_OK);

    /* a wrong value: NULL, one error naming the parameter, not repeated by a second call */
    assert_int_equal(run_choice("gpu", NULL, "STRATA_DEVICE 'gpu'", &lines), 0);
    assert_int_equal(lines, 1);
    /* cuda without a usable driver (this build's probe): NULL, said once */
    assert_int_equal(run_choice("cuda", NULL, "STRATA_DEVICE cuda", &lines), 0);
    assert_int_equal(lines, 1);
    assert_int_equal(run_choice("none", NULL, "STRATA_DEVICE", &lines), 0);
    assert_int_equal(lines, 0);
    assert_int_equal(run_choice("auto", NULL, "STRATA_DEVICE", &lines), 0);
    assert_int_equal(lines, 0);
    assert_int_equal(run_choice("SIM", "3", "STRATA_", &lines), 13);
    assert_int_equal(lines, 0);
    /* out of range: raised to 1, said at WARN naming the variable */
    assert_int_equal(run_choice("sim", "0", "STRATA_SIM_DEVICES", &lines), 11);
    assert_int_equal(lines, 1);
    /* malformed: an error naming it, no device */
    assert_int_equal(run_choice("sim", "two", "STRATA_SIM_DEVICES 'two'", &lines), 0);
    assert_int_equal(lines, 1);
}

/* ---------------------------------------------------------------------------------------------- */
/* Streams                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

#define N 4099 /* odd: no whole number of 16-byte packs */

static st_reduce_job_t sum_job(strataDataType_t dtype, void *dst, const void *a, const void *b,
                               size_t count)
{
    st_reduce_job_t job;

    memset(&job, 0, sizeof(job));
    assert_int_equal(st_redop_init(&job.redop, strataSum, dtype, 1), ST_OK);
    job.dst     = dst;
    job.srcs[0] = a;
    job.srcs[1] = b;
    job.nsrcs   = 2;
    job.count   = count;
    return job;
}

/* copy -> reduce -> copy on one stream, then the sources overwritten behind the reduction: every
 * command must see its predecessors' results and none of its successors'. */
static void test_one_stream_order(void **state)
{
    float           *a, *b, *out, *out2, *junk;
    void            *da, *db, *dc;
    st_dev_stream_t *s;
    st_reduce_job_t  job;
    size_t           bytes = N * sizeof(float);

    assert_int_equal(dev->host_alloc(bytes, (void **)&a), ST_OK);
    assert_int_equal(dev->host_alloc(bytes, (void **)&b), ST_OK);
    assert_int_equal(dev->host_alloc(bytes, (void **)&out), ST_OK);
    out2 = malloc(bytes); /* pageable host memory: copy takes it too */
    junk = malloc(bytes);
    assert_non_null(out2);
    assert_non_null(junk);
    for (int i = 0; i < N; i++) {
        a[i]    = (float)i * 0.25f;
        b[i]    = 1000.0f - (float)i;
        junk[i] = -1.0f;
        out[i] = out2[i] = 7.0f;
    }
    assert_int_equal(dev->mem_alloc(bytes, &da), ST_OK);
    assert_int_equal(dev->mem_alloc(bytes, &db), ST_OK);
    assert_int_equal(dev->mem_alloc(bytes, &dc), ST_OK);
    assert_int_equal(dev->stream_create(&s), ST_OK);

    assert_int_equal(dev->copy(da, a, bytes, s), ST_OK);
    assert_int_equal(dev->copy(db, b, bytes, s), ST_OK);
    assert_int_equal(dev->zero(dc, bytes, s), ST_OK);
    job = sum_job(strataFloat32, dc, da, db, N);
    assert_int_equal(dev->reduce(&job, s), ST_OK);
    assert_int_equal(dev->copy(out, dc, bytes, s), ST_OK);
    assert_int_equal(dev->copy(da, junk, bytes, s), ST_OK); /* after the reduction read it */
    assert_int_equal(dev->copy(out2, da, bytes, s), ST_OK);
    assert_int_equal(dev->stream_sync(s, -1), ST_OK);
    for (int i = 0; i < N; i++) {
        float want = (float)i * 0.25f + (1000.0f - (float)i);
        if (out[i] != want || out2[i] != -1.0f) {
            fail_msg("element %d: %g (want %g), %g (want -1)", i, out[i], want, out2[i]);
        }
    }
    /* an invalid job is refused at once */
    job.nsrcs = 0;
    assert_int_equal(dev->reduce(&job, s), ST_ERR_INVALID);

    dev->stream_destroy(s);
    assert_int_equal(dev->mem_free(da), ST_OK);
    assert_int_equal(dev->mem_free(db), ST_OK);
    assert_int_equal(dev->mem_free(dc), ST_OK);
    dev->host_free(a);
    dev->host_free(b);
    dev->host_free(out);
    free(out2);
    free(junk);
}

/* Work on s2 ordered after s1's by an event the host waits on (the proxy's pattern); s1 held by a
 * gate so that the event is seen pending first. */
static void test_two_streams_event(void **state)
{
    st_dev_stream_t *s1, *s2;
    st_dev_event_t  *e, *never;
    uint64_t        *gate;
    int32_t         *src, *out;
    void            *d;
    size_t           bytes = N * sizeof(int32_t);
    double           t0;

    assert_int_equal(dev->host_alloc(4096, (void **)&gate), ST_OK);
    assert_int_equal(dev->host_alloc(bytes, (void **)&src), ST_OK);
    assert_int_equal(dev->host_alloc(bytes, (void **)&out), ST_OK);
    assert_int_equal(dev->mem_alloc(bytes, &d), ST_OK);
    for (int i = 0; i < N; i++) {
        src[i] = 3 * i - 5;
    }
    assert_int_equal(dev->stream_create(&s1), ST_OK);
    assert_int_equal(dev->stream_create(&s2), ST_OK);
    assert_int_equal(dev->event_create(&e), ST_OK);
    assert_int_equal(dev->event_create(&never), ST_OK);
    assert_int_equal(dev->event_wait(never, 0), ST_OK); /* never recorded: done */

    assert_int_equal(dev->wait_value(s1, gate, 1), ST_OK);
    assert_int_equal(dev->copy(d, src, bytes, s1), ST_OK);
    assert_int_equal(dev->event_record(e, s1), ST_OK);
    t0 = now();
    assert_int_equal(dev->event_wait(e, 5000), ST_INPROGRESS); /* the timeout is honoured */
    assert_true(now() - t0 >= 0.004);
    assert_int_equal(dev->event_wait(e, 0), ST_INPROGRESS);
    dev->write_value(gate, 1);
    assert_int_equal(dev->event_wait(e, -1), ST_OK);
    assert_int_equal(dev->copy(out, d, bytes, s2), ST_OK);
    assert_int_equal(dev->stream_sync(s2, 1000000), ST_OK);
    assert_memory_equal(out, src, bytes);

    /* a later record moves the mark: pending again until the new work is done */
    assert_int_equal(dev->wait_value(s1, gate, 2), ST_OK);
    assert_int_equal(dev->event_record(e, s1), ST_OK);
    assert_int_equal(dev->event_wait(e, 1000), ST_INPROGRESS);
    dev->write_value(gate, 2);
    assert_int_equal(dev->event_wait(e, 1000000), ST_OK);

    dev->event_destroy(e);
    dev->event_destroy(never);
    dev->stream_destroy(s1);
    dev->stream_destroy(s2);
    assert_int_equal(dev->mem_free(d), ST_OK);
    dev->host_free(gate);
    dev->host_free(src);
    dev->host_free(out);
}

/* A gate holds its stream until write_value reaches the value; the wait sleeps. */
static void test_wait_value(void **state)
{
    st_dev_stream_t *s;
    uint64_t        *gate, stack_word = 0;
    uint8_t         *src, *dst;
    double           cpu0, cpu;

    assert_int_equal(dev->host_alloc(4096, (void **)&gate), ST_OK);
    assert_int_equal(dev->host_alloc(4096, (void **)&src), ST_OK);
    assert_int_equal(dev->mem_alloc(4096, (void **)&dst), ST_OK);
    memset(src, 0x5a, 4096);
    assert_int_equal(dev->stream_create(&s), ST_OK);

    assert_int_equal(dev->wait_value(s, gate, 5), ST_OK);
    assert_int_equal(dev->copy(dst, src, 4096, s), ST_OK);
    cpu0 = cpu_now();
    assert_int_equal(dev->stream_sync(s, 1000000), ST_INPROGRESS);
    cpu = cpu_now() - cpu0;
    assert_true(cpu < 0.25); /* 1 s gated and waited on: asleep (a spin would take ~1 s) */
    assert_int_equal(dst[0], 0);
    assert_int_equal(dst[4095], 0);
    dev->write_value(gate, 4); /* below the value: still held */
    assert_int_equal(dev->stream_sync(s, 20000), ST_INPROGRESS);
    assert_int_equal(dst[0], 0);
    dev->write_value(gate, 5);
    assert_int_equal(dev->stream_sync(s, 1000000), ST_OK);
    assert_int_equal(dst[0], 0x5a);
    assert_int_equal(dst[4095], 0x5a);

    /* a word stored without write_value (another process's store) is seen by the safety net */
    assert_int_equal(dev->wait_value(s, gate + 1, 1), ST_OK);
    assert_int_equal(dev->stream_sync(s, 5000), ST_INPROGRESS);
    __atomic_store_n(gate + 1, 1, __ATOMIC_RELEASE);
    assert_int_equal(dev->stream_sync(s, 1000000), ST_OK);

    /* what cuStreamWaitValue64 could not take */
    assert_int_equal(dev->wait_value(s, &stack_word, 1), ST_ERR_INVALID);
    assert_int_equal(dev->wait_value(s, (uint64_t *)((char *)gate + 4), 1), ST_ERR_INVALID);
    assert_int_equal(dev->wait_value(s, NULL, 1), ST_ERR_INVALID);

    dev->stream_destroy(s);
    assert_int_equal(dev->mem_free(dst), ST_OK);
    dev->host_free(gate);
    dev->host_free(src);
}

/* ---------------------------------------------------------------------------------------------- */
/* Memory                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

static int send_fd(int sock, int fd)
{
    char            byte = 'f';
    struct iovec    iov  = {&byte, 1};
    union {
        struct cmsghdr hdr;
        char           buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr   msg = {0};
    struct cmsghdr *c;

    memset(&ctl, 0, sizeof(ctl));
    msg.msg_iov        = &iov;
    msg.msg_iovlen     = 1;
    msg.msg_control    = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    c                  = CMSG_FIRSTHDR(&msg);
    c->cmsg_level      = SOL_SOCKET;
    c->cmsg_type       = SCM_RIGHTS;
    c->cmsg_len        = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
    char            byte;
    struct iovec    iov = {&byte, 1};
    union {
        struct cmsghdr hdr;
        char           buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr   msg = {0};
    struct cmsghdr *c;
    int             fd;

    msg.msg_iov        = &iov;
    msg.msg_iovlen     = 1;
    msg.msg_control    = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    if (recvmsg(sock, &msg, 0) != 1) {
        return -1;
    }
    c = CMSG_FIRSTHDR(&msg);
    if (c == NULL || c->cmsg_type != SCM_RIGHTS) {
        return -1;
    }
    memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
}

/* The child of test_export_fork: imports the parent's allocation on device 1 and writes a pattern
 * into it through its own (fresh) default stream and a stream of its own. Exit 0, or the step
 * that failed. */
static int import_child(int sock, size_t alloc_bytes, st_dev_stream_t *parent_stream)
{
    st_dev_stream_t *s;
    uint32_t        *q, *h;
    int              fd, d = -1;

    alarm(20);
    fd = recv_fd(sock);
    if (fd < 0) {
        return 1;
    }
    if (dev->set_current(1) != ST_OK || dev->mem_import(fd, alloc_bytes, (void **)&q) != ST_OK) {
        return 2;
    }
    close(fd);
    if (dev->ptr_type(q, &d) != ST_DEV_PTR_DEVICE || d != 1) {
        return 3;
    }
    /* the parent's streams did not survive the fork */
    if (dev->stream_capturing(parent_stream) != -1) {
        return 4;
    }
    if (dev->host_alloc(8192, (void **)&h) != ST_OK) {
        return 5;
    }
    for (uint32_t i = 0; i < 2048; i++) {
        h[i] = 0xc0de0000u + i;
    }
    if (dev->copy(q, h, 4096, NULL) != ST_OK || dev->stream_sync(NULL, 2000000) != ST_OK) {
        return 6;
    }
    if (dev->stream_create(&s) != ST_OK || dev->copy(q + 1024, h + 1024, 4096, s) != ST_OK ||
        dev->stream_sync(s, 2000000) != ST_OK) {
        return 7;
    }
    dev->stream_destroy(s);
    dev->mem_unimport(q, alloc_bytes);
    if (dev->ptr_type(q, NULL) != ST_DEV_PTR_HOST) {
        return 8;
    }
    return (write(sock, "k", 1) == 1) ? 0 : 9;
}

/* mem_export -> fork -> the child imports the fd received over a socketpair (SCM_RIGHTS) and
 * writes; the parent sees the data in its own mapping. The parent's streams, threads included,
 * were running before the fork and keep working after it. */
static void test_export_fork(void **state)
{
    st_dev_stream_t *s;
    uint32_t        *p;
    size_t           alloc_bytes = 0;
    int              sv[2], fd, status, d = -1;
    char             ack;
    pid_t            pid;

    assert_int_equal(dev->mem_alloc_shared(10000, (void **)&p, &alloc_bytes), ST_OK);
    assert_true(alloc_bytes >= 10000);
    assert_int_equal(alloc_bytes % (2 << 20), 0); /* cuMem's granularity */
    assert_int_equal(dev->ptr_type(p + 100, &d), ST_DEV_PTR_DEVICE);
    assert_int_equal(d, 0);
    assert_int_equal(p[0], 0); /* zero-filled */
    assert_int_equal(dev->stream_create(&s), ST_OK);
    assert_int_equal(dev->zero(p, alloc_bytes, NULL), ST_OK); /* the default stream runs */
    assert_int_equal(dev->stream_sync(NULL, -1), ST_OK);
    assert_int_equal(dev->mem_export(p, &fd), ST_OK);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        _exit(import_child(sv[1], alloc_bytes, s));
    }
    close(sv[1]);
    assert_int_equal(send_fd(sv[0], fd), 0);
    close(fd);
    assert_int_equal(read(sv[0], &ack, 1), 1);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    close(sv[0]);
    for (uint32_t i = 0; i < 2048; i++) {
        if (p[i] != 0xc0de0000u + i) {
            fail_msg("word %u: 0x%x", i, p[i]);
        }
    }
    assert_int_equal(p[2048], 0);

    /* the parent's own streams still run */
    assert_int_equal(dev->zero(p, 16, s), ST_OK);
    assert_int_equal(dev->stream_sync(s, 1000000), ST_OK);
    assert_int_equal(p[0], 0);
    assert_int_equal(dev->zero(p + 4, 16, NULL), ST_OK);
    assert_int_equal(dev->stream_sync(NULL, 1000000), ST_OK);
    assert_int_equal(p[4], 0);
    dev->stream_destroy(s);
    assert_int_equal(dev->mem_free_shared(p), ST_OK);
}

static void *current_of_thread(void *arg)
{
    *(int *)arg = dev->current();
    return NULL;
}

static void test_ptr_type(void **state)
{
    char     *d0, *d1, *sh, *h, *m, stack[64];
    int       d = 42, other = -2;
    pthread_t t;

    assert_int_equal(dev->current(), 0);
    assert_int_equal(dev->mem_alloc(100, (void **)&d0), ST_OK);
    assert_int_equal(dev->ptr_type(d0, &d), ST_DEV_PTR_DEVICE);
    assert_int_equal(d, 0);
    assert_int_equal(dev->ptr_type(d0 + 99, NULL), ST_DEV_PTR_DEVICE);

    assert_int_equal(dev->set_current(1), ST_OK);
    assert_int_equal(dev->current(), 1);
    assert_int_equal(pthread_create(&t, NULL, current_of_thread, &other), 0);
    pthread_join(t, NULL);
    assert_int_equal(other, 0); /* per thread */
    assert_int_equal(dev->mem_alloc(100, (void **)&d1), ST_OK);
    assert_int_equal(dev->ptr_type(d1 + 50, &d), ST_DEV_PTR_DEVICE);
    assert_int_equal(d, 1);
    assert_int_equal(dev->mem_alloc_shared(100, (void **)&sh, NULL), ST_OK);
    assert_int_equal(dev->ptr_type(sh, &d), ST_DEV_PTR_DEVICE);
    assert_int_equal(d, 1);
    assert_int_equal(dev->ptr_type(d0, &d), ST_DEV_PTR_DEVICE);
    assert_int_equal(d, 0);

    assert_int_equal(dev->host_alloc(100, (void **)&h), ST_OK);
    assert_int_equal(((uintptr_t)h) % (uintptr_t)sysconf(_SC_PAGESIZE), 0);
    assert_int_equal(h[99], 0);
    assert_int_equal(dev->ptr_type(h, &d), ST_DEV_PTR_HOST);
    m = malloc(100);
    assert_int_equal(dev->ptr_type(m, NULL), ST_DEV_PTR_HOST);
    assert_int_equal(dev->ptr_type(stack, NULL), ST_DEV_PTR_HOST);
    assert_int_equal(dev->ptr_type(NULL, NULL), ST_DEV_PTR_HOST);

    assert_int_equal(dev->set_current(2), ST_ERR_INVALID); /* two devices */
    assert_int_equal(dev->set_current(-1), ST_ERR_INVALID);
    assert_int_equal(dev->current(), 1);
    assert_int_equal(dev->set_current(0), ST_OK);

    assert_int_equal(dev->mem_free(d0), ST_OK);
    assert_int_equal(dev->mem_free(d1), ST_OK);
    assert_int_equal(dev->mem_free_shared(sh), ST_OK);
    assert_int_equal(dev->ptr_type(d0, NULL), ST_DEV_PTR_HOST); /* freed */
    dev->host_free(h);
    free(m);
}

static void test_mem_free_foreign(void **state)
{
    char *d, *sh, *h, *m, stack[16];
    int   fd;

    assert_int_equal(dev->mem_alloc(0, (void **)&d), ST_ERR_INVALID);
    assert_int_equal(dev->mem_alloc(SIZE_MAX - 5, (void **)&d), ST_ERR_NO_MEMORY);
    assert_int_equal(dev->mem_alloc_shared(SIZE_MAX / 2, (void **)&d, NULL), ST_ERR_NO_MEMORY);
    assert_int_equal(dev->host_alloc(SIZE_MAX - 5, (void **)&d), ST_ERR_NO_MEMORY);
    /* more than the machine can back, yet a size a memfd would grow to page by page until the
     * OOM killer came (a new-user trial's 1 TiB did): refused at once */
    st_log_clear_error();
    assert_int_equal(dev->mem_alloc((size_t)1 << 44, (void **)&d), ST_ERR_NO_MEMORY);
    assert_non_null(strstr(st_log_last_error(), "cannot be backed"));
    assert_int_equal(dev->mem_alloc_shared((size_t)1 << 44, (void **)&d, NULL), ST_ERR_NO_MEMORY);
    assert_int_equal(dev->mem_alloc(1000, (void **)&d), ST_OK);
    assert_int_equal(dev->mem_alloc_shared(1000, (void **)&sh, NULL), ST_OK);
    assert_int_equal(dev->host_alloc(1000, (void **)&h), ST_OK);
    m = malloc(1000);

    st_log_clear_error();
    assert_int_equal(dev->mem_free(stack), ST_ERR_INVALID);
    assert_non_null(strstr(st_log_last_error(), "mem_free")); /* logged */
    assert_int_equal(dev->mem_free(m), ST_ERR_INVALID);
    assert_int_equal(dev->mem_free(NULL), ST_ERR_INVALID);
    assert_int_equal(dev->mem_free(d + 8), ST_ERR_INVALID);   /* inside, not the start */
    assert_int_equal(dev->mem_free(sh), ST_ERR_INVALID);      /* another kind */
    assert_int_equal(dev->mem_free(h), ST_ERR_INVALID);
    assert_int_equal(dev->mem_free_shared(d), ST_ERR_INVALID);
    assert_int_equal(dev->mem_export(d, &fd), ST_ERR_INVALID); /* not shareable */
    assert_int_equal(dev->mem_export(sh + 64, &fd), ST_ERR_INVALID);
    assert_int_equal(dev->mem_import(-1, 4096, (void **)&m), ST_ERR_IO);

    assert_int_equal(dev->mem_free(d), ST_OK);
    assert_int_equal(dev->mem_free(d), ST_ERR_INVALID); /* twice */
    assert_int_equal(dev->mem_free_shared(sh), ST_OK);
    dev->host_free(h);
    free(m);
}

/* ---------------------------------------------------------------------------------------------- */
/* Capture, fault injection                                                                       */
/* ---------------------------------------------------------------------------------------------- */

static void test_capturing(void **state)
{
    long             garbage[8] = {0};
    st_dev_stream_t *s, *bad = (st_dev_stream_t *)garbage;
    char            *d;

    assert_int_equal(dev->stream_capturing(bad), -1);
    assert_int_equal(dev->stream_capturing(NULL), 0); /* the legacy default stream */
    assert_int_equal(dev->stream_create(&s), ST_OK);
    assert_int_equal(dev->mem_alloc(64, (void **)&d), ST_OK);
    assert_int_equal(dev->stream_capturing(s), 0);
    assert_int_equal(st_dev_sim_set_capturing(s, 1), ST_OK);
    assert_int_equal(dev->stream_capturing(s), 1);
    assert_int_equal(dev->zero(d, 64, s), ST_ERR_IO); /* a GPU would capture it, not run it */
    assert_int_equal(st_dev_sim_set_capturing(s, 0), ST_OK);
    assert_int_equal(dev->stream_capturing(s), 0);
    assert_int_equal(dev->zero(d, 64, s), ST_OK);
    assert_int_equal(dev->stream_sync(s, -1), ST_OK);
    dev->stream_destroy(s);
    assert_int_equal(dev->stream_capturing(s), -1); /* destroyed */

    assert_int_equal(st_dev_sim_set_capturing(bad, 1), ST_ERR_INVALID);
    assert_int_equal(dev->zero(d, 64, bad), ST_ERR_INVALID);
    assert_int_equal(dev->stream_sync(bad, 0), ST_ERR_INVALID);
    assert_int_equal(garbage[0], 0); /* never written through */
    assert_int_equal(dev->mem_free(d), ST_OK);
}

/* STRATA_SIM_DELAY_US=200: a chain of reductions alternating between two streams, each step
 * ordered after the previous one by an event, still gives the exact sums; and the delays are
 * really slept. */
static void test_delay_exact(void **state)
{
    enum { STEPS = 32, M = 1001 };
    st_dev_stream_t *s[2];
    st_dev_event_t  *e[2];
    int64_t         *v[STEPS], *out;
    void            *acc;
    st_reduce_job_t  job;
    double           t0, elapsed;

    assert_int_equal(st_dev_sim_delay_us(), DELAY_US);
    /* pauses of 0..2 ms here: their sum must show (a check 200 us pauses could not fail, the
     * round trips alone take longer) */
    st_dev_sim_configure(2, 2000);
    assert_int_equal(dev->mem_alloc(M * sizeof(int64_t), &acc), ST_OK);
    assert_int_equal(dev->host_alloc(M * sizeof(int64_t), (void **)&out), ST_OK);
    for (int i = 0; i < STEPS; i++) {
        assert_int_equal(dev->host_alloc(M * sizeof(int64_t), (void **)&v[i]), ST_OK);
        for (int j = 0; j < M; j++) {
            v[i][j] = (int64_t)i * j + 1;
        }
    }
    for (int k = 0; k < 2; k++) {
        assert_int_equal(dev->stream_create(&s[k]), ST_OK);
        assert_int_equal(dev->event_create(&e[k]), ST_OK);
    }

    t0 = now();
    assert_int_equal(dev->zero(acc, M * sizeof(int64_t), s[1]), ST_OK);
    assert_int_equal(dev->event_record(e[1], s[1]), ST_OK);
    for (int i = 0; i < STEPS; i++) {
        int k = i & 1;
        /* acc += v[i] on s[k] once s[1-k]'s previous step is done: a step that ran early would
         * lose the previous one's addition */
        assert_int_equal(dev->event_wait(e[1 - k], -1), ST_OK);
        job = sum_job(strataInt64, acc, acc, v[i], M);
        assert_int_equal(dev->reduce(&job, s[k]), ST_OK);
        assert_int_equal(dev->event_record(e[k], s[k]), ST_OK);
    }
    assert_int_equal(dev->event_wait(e[(STEPS - 1) & 1], -1), ST_OK);
    assert_int_equal(dev->copy(out, acc, M * sizeof(int64_t), s[0]), ST_OK);
    assert_int_equal(dev->stream_sync(s[0], -1), ST_OK);
    elapsed = now() - t0;
    for (int j = 0; j < M; j++) {
        int64_t want = (int64_t)j * (STEPS * (STEPS - 1) / 2) + STEPS;
        if (out[j] != want) {
            fail_msg("element %d: %lld, want %lld", j, (long long)out[j], (long long)want);
        }
    }
    /* 34 commands run one after another, each after a pause of 0..2 ms: about 34 ms; a sum
     * under 15 ms is far out of reach of the pseudo-random sequence (load only adds) */
    assert_true(elapsed > 0.015);
    st_dev_sim_configure(2, DELAY_US);

    for (int k = 0; k < 2; k++) {
        dev->event_destroy(e[k]);
        dev->stream_destroy(s[k]);
    }
    for (int i = 0; i < STEPS; i++) {
        dev->host_free(v[i]);
    }
    dev->host_free(out);
    assert_int_equal(dev->mem_free(acc), ST_OK);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_one_stream_order),
        cmocka_unit_test(test_two_streams_event),
        cmocka_unit_test(test_wait_value),
        cmocka_unit_test(test_export_fork),
        cmocka_unit_test(test_ptr_type),
        cmocka_unit_test(test_mem_free_foreign),
        cmocka_unit_test(test_capturing),
        cmocka_unit_test(test_delay_exact),
    };

    if (argc > 1 && strcmp(argv[1], "--choice") == 0) {
        return choice_child();
    }
    setenv("STRATA_DEVICE", "sim", 1);
    setenv("STRATA_SIM_DELAY_US", "200", 1);
    setenv("STRATA_SIM_DEVICES", "2", 1);
    setenv("STRATA_DEBUG", "NONE", 0); /* the refusals tested are logged at WARN */
    dev = st_dev();
    if (dev == NULL) {
        fprintf(stderr, "test_dev_sim: STRATA_DEVICE=sim gave no device: %s\n",
                st_log_last_error());
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
