/*
 * harness.c - the multi-process runner and check helpers of the integration tests (harness.h).
 *
 * Process tree of one run: the test program (cmocka; never calls strata) -> a driver in its own
 * process group (makes the unique ids, so the bootstrap roots live there) -> one process per rank.
 * Every wait has a deadline and ends with kill -9, so no library hang can hang `make check`.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IT_DEFAULT_TIMEOUT_S 90
#define IT_BACKSTOP_S        15   /* extra time the test program gives the driver */
#define IT_MAX_PROCS         64
#define IT_MAX_MESSAGES      25   /* failure lines printed per process */
#define IT_GRACE_S           10   /* how long the others may run on after a rank failed */

int       it_nfail;
it_ctx_t *it_self;

static void *it_shared_mem;

double it_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------------------------ */
/* failures                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static void it_vfail(const char *file, int line, const char *fmt, va_list ap)
{
    char msg[1024];

    it_nfail++;
    if (it_nfail > IT_MAX_MESSAGES) {
        if (it_nfail == IT_MAX_MESSAGES + 1) {
            fprintf(stderr, "[pid %d] further failures not printed\n", (int)getpid());
        }
        return;
    }
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (it_self != NULL) {
        fprintf(stderr, "FAIL [rank %d/%d node %d] %s:%d: %s\n", it_self->rank, it_self->nranks,
                it_self->node, file, line, msg);
    } else {
        fprintf(stderr, "FAIL [pid %d] %s:%d: %s\n", (int)getpid(), file, line, msg);
    }
    fflush(stderr);
}

void it_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    it_vfail(file, line, fmt, ap);
    va_end(ap);
}

int it_ok(strataResult_t res, const char *call, const char *file, int line)
{
    if (res == strataSuccess) {
        return 1;
    }
    it_fail(file, line, "%s returned %d (%s): %s", call, (int)res, strataGetErrorString(res),
            strataGetLastError(NULL));
    return 0;
}

int it_res(strataResult_t res, strataResult_t want, const char *call, const char *file, int line)
{
    const char *msg = strataGetLastError(NULL);

    if (res != want) {
        it_fail(file, line, "%s returned %d (%s), expected %d (%s); last error: %s", call,
                (int)res, strataGetErrorString(res), (int)want, strataGetErrorString(want),
                msg != NULL ? msg : "(NULL)");
        return 0;
    }
    if (want != strataSuccess && (msg == NULL || msg[0] == '\0')) {
        it_fail(file, line, "%s returned %s as expected but strataGetLastError is empty", call,
                strataGetErrorString(want));
        return 0;
    }
    if (want != strataSuccess && getenv("IT_VERBOSE") != NULL) {
        fprintf(stderr, "  ok: %s -> %s: %s\n", call, strataGetErrorString(res), msg);
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* layouts                                                                                     */
/* ------------------------------------------------------------------------------------------ */

int it_layout_node(const char *layout, int nranks, int rank, int *nnodes_p)
{
    int nnodes = 1;
    int node   = 0;

    if (rank < 0 || rank >= nranks) {
        return -1;
    }
    if (layout == NULL || layout[0] == '\0' || strcmp(layout, "1") == 0) {
        node = 0;
    } else if (strncmp(layout, "rr", 2) == 0) {
        int k = atoi(layout + 2);

        if (k < 1) {
            return -1;
        }
        nnodes = k < nranks ? k : nranks;
        node   = rank % k;
    } else if (strchr(layout, 'x') != NULL) {
        int a = 0, b = 0;

        if (sscanf(layout, "%dx%d", &a, &b) != 2 || a < 1 || b < 1 || a * b != nranks) {
            return -1;
        }
        nnodes = a;
        node   = rank / b;
    } else {
        const char *p     = layout;
        int         first = 0;

        nnodes = 0;
        node   = -1;
        while (*p != '\0') {
            char *end;
            long  cnt = strtol(p, &end, 10);

            if (end == p || cnt < 1) {
                return -1;
            }
            if (rank >= first && rank < first + cnt) {
                node = nnodes;
            }
            first += (int)cnt;
            nnodes++;
            p = end;
            if (*p == '+') {
                p++;
            } else if (*p != '\0') {
                return -1;
            }
        }
        if (first != nranks) {
            return -1;
        }
    }
    if (nnodes_p != NULL) {
        *nnodes_p = nnodes;
    }
    return node;
}

/* ------------------------------------------------------------------------------------------ */
/* processes                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void it_apply_env(const char *env)
{
    char  copy[2048];
    char *save = NULL;

    if (env == NULL) {
        return;
    }
    snprintf(copy, sizeof(copy), "%s", env);
    for (char *tok = strtok_r(copy, " \t", &save); tok != NULL; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');

        if (eq == NULL) {
            continue;
        }
        *eq = '\0';
        setenv(tok, eq + 1, 1);
    }
}

static int it_rank_main(const it_opts_t *o, it_ctx_t *ctx, it_fn_t fn)
{
    char hostid[32];
    int  ret;

    it_self  = ctx;
    it_nfail = 0;
    snprintf(hostid, sizeof(hostid), "node%d", ctx->node);
    setenv("STRATA_HOSTID", hostid, 1);
    if (!o->no_init) {
        strataResult_t res = strataCommInitRank(&ctx->comm, ctx->nranks, ctx->id, ctx->rank);

        if (res != strataSuccess) {
            IT_FAIL("strataCommInitRank(nranks %d, rank %d) returned %d (%s): %s", ctx->nranks,
                    ctx->rank, (int)res, strataGetErrorString(res), strataGetLastError(NULL));
            return 1;
        }
    }
    ret = fn(ctx);
    if (ctx->comm != NULL) {
        IT_OK(strataCommDestroy(ctx->comm));
        ctx->comm = NULL;
    }
    if (ret != 0 && it_nfail == 0) {
        IT_FAIL("rank function returned %d", ret);
    }
    fflush(stdout);
    fflush(stderr);
    return it_nfail != 0 ? 1 : 0;
}

static const char *it_status_str(int status, char *buf, size_t len)
{
    if (WIFEXITED(status)) {
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    } else {
        snprintf(buf, len, "ended with wait status 0x%x", status);
    }
    return buf;
}

/* IT_HANG_BT=1: print every thread's stack of a hung rank (gdb), to see where it waits. */
static void it_backtrace(pid_t pid)
{
    char cmd[256];

    if (getenv("IT_HANG_BT") == NULL) {
        return;
    }
    snprintf(cmd, sizeof(cmd), "gdb -q -batch -p %d -ex 'thread apply all bt' 2>&1 | "
             "grep -E '^(#|Thread)' 1>&2", (int)pid);
    if (system(cmd) != 0) {
        fprintf(stderr, "harness: no backtrace (is gdb installed?)\n");
    }
}

static int it_make_ids(strataUniqueId *ids, int nids)
{
    for (int k = 0; k < nids; k++) {
        strataResult_t res = strataGetUniqueId(&ids[k]);

        if (res != strataSuccess) {
            fprintf(stderr, "harness: strataGetUniqueId returned %d (%s): %s\n", (int)res,
                    strataGetErrorString(res), strataGetLastError(NULL));
            return -1;
        }
    }
    return 0;
}

/* Reads exactly len bytes (the ids the driver sends once it has made them). */
static int it_read_full(int fd, void *buf, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t got = read(fd, (char *)buf + off, len - off);

        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            return -1;
        }
        off += (size_t)got;
    }
    return 0;
}

static int it_driver(const it_opts_t *o, it_fn_t fn, void *arg, int timeout)
{
    pid_t          pids[IT_MAX_PROCS];
    int            pipes[IT_MAX_PROCS][2];
    int            done[IT_MAX_PROCS] = {0};
    strataUniqueId ids[IT_MAX_IDS];
    int            nids   = o->nids > 0 ? o->nids : 1;
    int            nprocs = o->nprocs > 0 ? o->nprocs : o->nranks;
    int            nnodes = 1;
    int            failed = 0;
    int            left;
    double         deadline;
    char           sbuf[128];

    it_apply_env(o->env);
    if (nprocs > IT_MAX_PROCS || nids > IT_MAX_IDS || nprocs > o->nranks) {
        fprintf(stderr, "harness: bad options (nprocs %d, nids %d)\n", nprocs, nids);
        return 2;
    }
    if (it_layout_node(o->layout, o->nranks, 0, &nnodes) < 0) {
        fprintf(stderr, "harness: layout \"%s\" does not fit %d ranks\n", o->layout, o->nranks);
        return 2;
    }
    memset(ids, 0, sizeof(ids));
    if (o->fork_after_id && it_make_ids(ids, nids) != 0) {
        return 2;
    }
    for (int r = 0; r < nprocs; r++) {
        if (!o->fork_after_id && pipe(pipes[r]) != 0) {
            fprintf(stderr, "harness: pipe: %s\n", strerror(errno));
            return 2;
        }
        fflush(stdout);
        fflush(stderr);
        pids[r] = fork();
        if (pids[r] < 0) {
            fprintf(stderr, "harness: fork: %s\n", strerror(errno));
            for (int k = 0; k < r; k++) {
                kill(pids[k], SIGKILL);
            }
            return 2;
        }
        if (pids[r] == 0) {
            it_ctx_t ctx;

            memset(&ctx, 0, sizeof(ctx));
            if (!o->fork_after_id) {
                for (int k = 0; k <= r; k++) {
                    close(pipes[k][1]);
                }
                if (it_read_full(pipes[r][0], ids, sizeof(ids)) != 0) {
                    _exit(2); /* the driver could not make the ids (it says why) */
                }
                close(pipes[r][0]);
            }
            ctx.rank   = r;
            ctx.nranks = o->nranks;
            ctx.node   = it_layout_node(o->layout, o->nranks, r, &ctx.nnodes);
            ctx.id     = ids[0];
            memcpy(ctx.ids, ids, sizeof(ids));
            ctx.shared = it_shared_mem;
            ctx.arg    = arg;
            _exit(it_rank_main(o, &ctx, fn));
        }
        if (!o->fork_after_id) {
            close(pipes[r][0]);
        }
    }
    if (!o->fork_after_id) {
        /* Every rank exists: only now does this process make strata calls (and threads). */
        int ok = it_make_ids(ids, nids) == 0;

        for (int r = 0; r < nprocs; r++) {
            if (ok && write(pipes[r][1], ids, sizeof(ids)) != (ssize_t)sizeof(ids)) {
                fprintf(stderr, "harness: write of the ids to rank %d: %s\n", r,
                        strerror(errno));
            }
            close(pipes[r][1]);
        }
        if (!ok) {
            failed = 1;
        }
    }

    deadline = it_now() + timeout;
    left     = nprocs;
    while (left > 0) {
        int   status;
        pid_t pid = waitpid(-1, &status, WNOHANG);

        if (pid > 0) {
            for (int r = 0; r < nprocs; r++) {
                if (pids[r] == pid && !done[r]) {
                    done[r] = 1;
                    left--;
                    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                        fprintf(stderr, "harness: rank %d (node %d, layout %s, %d ranks) %s\n", r,
                                it_layout_node(o->layout, o->nranks, r, NULL),
                                o->layout != NULL ? o->layout : "1", o->nranks,
                                it_status_str(status, sbuf, sizeof(sbuf)));
                        /* The others may now wait for it until their STRATA_TIMEOUT: give them
                         * a little time to finish and report, not the whole deadline. */
                        if (!failed && it_now() + IT_GRACE_S < deadline) {
                            deadline = it_now() + IT_GRACE_S;
                        }
                        failed = 1;
                    }
                }
            }
            continue;
        }
        if (pid < 0 && errno != EINTR) {
            break;
        }
        if (it_now() > deadline) {
            for (int r = 0; r < nprocs; r++) {
                if (!done[r]) {
                    fprintf(stderr, "harness: rank %d (pid %d) still running after %d s: kill -9\n",
                            r, (int)pids[r], timeout);
                    it_backtrace(pids[r]);
                    kill(pids[r], SIGKILL);
                }
            }
            for (int r = 0; r < nprocs; r++) {
                if (!done[r]) {
                    waitpid(pids[r], NULL, 0);
                }
            }
            return 3;
        }
        usleep(5000);
    }
    return failed;
}

static void it_global_init(void)
{
    if (it_shared_mem != NULL) {
        return;
    }
    /* Defaults for every run; the caller's environment wins so a run can be debugged. */
    setenv("STRATA_SOCKET_IFNAME", "lo", 0);
    setenv("STRATA_BOOTSTRAP_TIMEOUT", "30s", 0);
    setenv("STRATA_TIMEOUT", "30s", 0);
    it_shared_mem = mmap(NULL, IT_SHARED_BYTES, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (it_shared_mem == MAP_FAILED) {
        perror("harness: mmap");
        abort();
    }
    memset(it_shared_mem, 0, IT_SHARED_BYTES);
}

int it_run(const it_opts_t *o, it_fn_t fn, void *arg)
{
    int    timeout = o->timeout_s > 0 ? o->timeout_s : IT_DEFAULT_TIMEOUT_S;
    int    status;
    pid_t  drv;
    double deadline;
    double t0 = it_now();
    char   sbuf[128];

    it_global_init();
    if (o->timeout_s <= 0 && getenv("IT_TIMEOUT") != NULL && atoi(getenv("IT_TIMEOUT")) > 0) {
        timeout = atoi(getenv("IT_TIMEOUT"));
    }
    fflush(stdout);
    fflush(stderr);
    drv = fork();
    if (drv < 0) {
        perror("harness: fork");
        return -1;
    }
    if (drv == 0) {
        /* cmocka's handlers would longjmp back into its runner in this process: a crash here
         * (and in the ranks, which inherit this) must just kill the process. */
        static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS, SIGABRT};

        for (size_t k = 0; k < sizeof(sigs) / sizeof(sigs[0]); k++) {
            signal(sigs[k], SIG_DFL);
        }
        setpgid(0, 0);
        _exit(it_driver(o, fn, arg, timeout));
    }
    setpgid(drv, drv); /* both sides, so the group exists before either relies on it */

    deadline = it_now() + timeout + IT_BACKSTOP_S;
    for (;;) {
        pid_t pid = waitpid(drv, &status, WNOHANG);

        if (pid == drv) {
            break;
        }
        if (pid < 0 && errno != EINTR) {
            perror("harness: waitpid");
            return -1;
        }
        if (it_now() > deadline) {
            fprintf(stderr, "harness: driver still running after %d s: kill -9 of its group\n",
                    timeout + IT_BACKSTOP_S);
            kill(-drv, SIGKILL);
            kill(drv, SIGKILL);
            waitpid(drv, &status, 0);
            return -1;
        }
        usleep(5000);
    }
    if (!WIFEXITED(status)) {
        /* The driver died: its ranks may be orphans still in its group. */
        kill(-drv, SIGKILL);
    }
    if (getenv("IT_VERBOSE") != NULL) {
        fprintf(stderr, "harness: %d ranks, layout %s, env \"%s\": %.2f s\n", o->nranks,
                o->layout != NULL ? o->layout : "1", o->env != NULL ? o->env : "",
                it_now() - t0);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "harness: run of %d ranks (layout %s, env \"%s\") failed: driver %s\n",
                o->nranks, o->layout != NULL ? o->layout : "1", o->env != NULL ? o->env : "",
                it_status_str(status, sbuf, sizeof(sbuf)));
        return 1;
    }
    return 0;
}

int it_run_simple(int nranks, const char *layout, const char *env, it_fn_t fn, void *arg)
{
    it_opts_t o;

    memset(&o, 0, sizeof(o));
    o.nranks = nranks;
    o.layout = layout;
    o.env    = env;
    return it_run(&o, fn, arg);
}

/* ------------------------------------------------------------------------------------------ */
/* buffers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static uint8_t it_guard_byte(size_t off)
{
    return (uint8_t)(0xA5u ^ (uint8_t)(off * 29u));
}

void *it_buf_alloc(it_buf_t *b, size_t bytes, size_t misalign, int fill)
{
    size_t head = IT_GUARD_BYTES + misalign;
    size_t total = (head + bytes + IT_GUARD_BYTES + 63) & ~(size_t)63;

    b->base = aligned_alloc(64, total);
    if (b->base == NULL) {
        fprintf(stderr, "harness: out of memory (%zu bytes)\n", total);
        abort();
    }
    b->total    = total;
    b->ptr      = b->base + head;
    b->bytes    = bytes;
    b->misalign = misalign;
    for (size_t k = 0; k < head; k++) {
        b->base[k] = it_guard_byte(k);
    }
    for (size_t k = head + bytes; k < total; k++) {
        b->base[k] = it_guard_byte(k);
    }
    memset(b->ptr, fill, bytes);
    return b->ptr;
}

int it_buf_guards(const it_buf_t *b, const char *what)
{
    size_t head = (size_t)(b->ptr - b->base);

    for (size_t k = 0; k < head; k++) {
        if (b->base[k] != it_guard_byte(k)) {
            IT_FAIL("%s: guard before the buffer overwritten at byte -%zu (0x%02x)", what,
                    head - k, b->base[k]);
            return 0;
        }
    }
    for (size_t k = head + b->bytes; k < b->total; k++) {
        if (b->base[k] != it_guard_byte(k)) {
            IT_FAIL("%s: guard after the buffer (%zu bytes) overwritten at byte +%zu (0x%02x)",
                    what, b->bytes, k - head - b->bytes, b->base[k]);
            return 0;
        }
    }
    return 1;
}

void it_buf_free(it_buf_t *b)
{
    free(b->base);
    memset(b, 0, sizeof(*b));
}

/* ------------------------------------------------------------------------------------------ */
/* data types                                                                                  */
/* ------------------------------------------------------------------------------------------ */

size_t it_dtype_size(strataDataType_t dt)
{
    switch (dt) {
    case strataInt8: case strataUint8: return 1;
    case strataFloat16: case strataBfloat16: return 2;
    case strataInt32: case strataUint32: case strataFloat32: return 4;
    case strataInt64: case strataUint64: case strataFloat64: return 8;
    default: return 0;
    }
}

const char *it_dtype_name(strataDataType_t dt)
{
    static const char *names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                  "fp16", "fp32", "fp64", "bf16"};

    return (unsigned)dt < strataNumTypes ? names[dt] : "?";
}

const char *it_op_name(strataRedOp_t op)
{
    static const char *names[] = {"sum", "prod", "max", "min", "avg"};

    return (unsigned)op < strataNumOps ? names[op] : "premulsum";
}

int it_dtype_is_float(strataDataType_t dt)
{
    return dt == strataFloat16 || dt == strataFloat32 || dt == strataFloat64 ||
           dt == strataBfloat16;
}

int it_dtype_is_signed(strataDataType_t dt)
{
    return dt == strataInt8 || dt == strataInt32 || dt == strataInt64 || it_dtype_is_float(dt);
}

uint16_t it_f2h(float f)
{
    uint32_t x;
    uint32_t sign;
    uint32_t absx;

    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000u;
    absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) {
        return (uint16_t)(sign | 0x7e00u | ((absx >> 13) & 0x3ffu));
    }
    if (absx >= 0x477ff000u) { /* >= 65520: rounds to infinity (and infinity itself) */
        return (uint16_t)(sign | 0x7c00u);
    }
    if (absx < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
        float af;

        memcpy(&af, &absx, 4);
        return (uint16_t)(sign | (uint32_t)nearbyintf(af * 16777216.0f));
    }
    {
        uint32_t mant = absx & 0x7fffffu;
        uint32_t exp  = (absx >> 23) - 127 + 15;
        uint32_t h    = (exp << 10) | (mant >> 13);
        uint32_t rem  = mant & 0x1fffu;

        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) {
            h++;
        }
        return (uint16_t)(sign | h);
    }
}

float it_h2f(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp  = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t mant = (uint32_t)h & 0x3ffu;
    uint32_t x;
    float    f;

    if (exp == 0) {
        f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    }
    if (exp == 31) {
        x = sign | 0x7f800000u | (mant << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    memcpy(&f, &x, 4);
    return f;
}

uint16_t it_f2bf(float f)
{
    uint32_t x;

    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((x >> 16) | 0x40u);
    }
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float it_bf2f(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float    f;

    memcpy(&f, &x, 4);
    return f;
}

void it_set_i(strataDataType_t dt, void *buf, size_t i, int64_t v)
{
    uint64_t u = (uint64_t)v;

    switch (dt) {
    case strataInt8:   ((int8_t *)buf)[i] = (int8_t)(uint8_t)u; break;
    case strataUint8:  ((uint8_t *)buf)[i] = (uint8_t)u; break;
    case strataInt32:  ((int32_t *)buf)[i] = (int32_t)(uint32_t)u; break;
    case strataUint32: ((uint32_t *)buf)[i] = (uint32_t)u; break;
    case strataInt64:  ((int64_t *)buf)[i] = v; break;
    case strataUint64: ((uint64_t *)buf)[i] = u; break;
    default:           it_set(dt, buf, i, (double)v); break;
    }
}

int64_t it_get_i(strataDataType_t dt, const void *buf, size_t i)
{
    switch (dt) {
    case strataInt8:   return ((const int8_t *)buf)[i];
    case strataUint8:  return ((const uint8_t *)buf)[i];
    case strataInt32:  return ((const int32_t *)buf)[i];
    case strataUint32: return ((const uint32_t *)buf)[i];
    case strataInt64:  return ((const int64_t *)buf)[i];
    case strataUint64: return (int64_t)((const uint64_t *)buf)[i];
    default:           return (int64_t)it_get(dt, buf, i);
    }
}

void it_set(strataDataType_t dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case strataFloat16:  ((uint16_t *)buf)[i] = it_f2h((float)v); break;
    case strataBfloat16: ((uint16_t *)buf)[i] = it_f2bf((float)v); break;
    case strataFloat32:  ((float *)buf)[i] = (float)v; break;
    case strataFloat64:  ((double *)buf)[i] = v; break;
    default:             it_set_i(dt, buf, i, (int64_t)v); break;
    }
}

double it_get(strataDataType_t dt, const void *buf, size_t i)
{
    switch (dt) {
    case strataFloat16:  return it_h2f(((const uint16_t *)buf)[i]);
    case strataBfloat16: return it_bf2f(((const uint16_t *)buf)[i]);
    case strataFloat32:  return ((const float *)buf)[i];
    case strataFloat64:  return ((const double *)buf)[i];
    case strataUint64:   return (double)((const uint64_t *)buf)[i];
    default:             return (double)it_get_i(dt, buf, i);
    }
}

static void it_elem_hex(strataDataType_t dt, const void *buf, size_t i, char *out, size_t len)
{
    size_t         sz = it_dtype_size(dt);
    const uint8_t *p  = (const uint8_t *)buf + i * sz;
    size_t         o  = 0;

    o += (size_t)snprintf(out, len, "0x");
    for (size_t k = sz; k-- > 0 && o + 3 < len;) { /* little endian: print most significant first */
        o += (size_t)snprintf(out + o, len - o, "%02x", p[k]);
    }
}

int it_expect_equal(strataDataType_t dt, const void *got, const void *expect, size_t count,
                    const char *what)
{
    size_t sz    = it_dtype_size(dt);
    size_t first = 0;
    size_t nbad  = 0;

    if (memcmp(got, expect, count * sz) == 0) {
        return 1;
    }
    for (size_t i = 0; i < count; i++) {
        if (memcmp((const uint8_t *)got + i * sz, (const uint8_t *)expect + i * sz, sz) != 0) {
            if (nbad++ == 0) {
                first = i;
            }
        }
    }
    {
        char hg[40], he[40];

        it_elem_hex(dt, got, first, hg, sizeof(hg));
        it_elem_hex(dt, expect, first, he, sizeof(he));
        IT_FAIL("%s: %zu of %zu %s elements differ; first at [%zu]: got %.17g (%s), expected "
                "%.17g (%s)", what, nbad, count, it_dtype_name(dt), first,
                it_get(dt, got, first), hg, it_get(dt, expect, first), he);
    }
    return 0;
}

uint64_t it_hash(const void *buf, size_t bytes)
{
    const uint8_t *p = buf;
    uint64_t       h = 0xcbf29ce484222325ull;

    for (size_t k = 0; k < bytes; k++) {
        h ^= p[k];
        h *= 0x100000001b3ull;
    }
    return h;
}

int it_same_on_all(strataComm_t comm, const void *buf, size_t bytes, const char *what)
{
    uint64_t  h = it_hash(buf, bytes);
    uint64_t *all;
    int       n = 0;
    int       ok = 1;

    if (!IT_OK(strataCommCount(comm, &n)) || n < 1) {
        return 0;
    }
    all = calloc((size_t)n, sizeof(*all));
    if (all == NULL) {
        abort();
    }
    if (!IT_OK(strataAllGather(&h, all, 1, strataUint64, comm, NULL))) {
        free(all);
        return 0;
    }
    for (int k = 0; k < n; k++) {
        if (all[k] != h) {
            ok = IT_EXPECT(0, "%s: result differs between ranks (hash here %016llx, rank %d has "
                           "%016llx)", what, (unsigned long long)h, k, (unsigned long long)all[k]);
            break;
        }
    }
    free(all);
    return ok;
}

/* A loopback port for a fixed root: below the kernel's ephemeral range (ip_local_port_range), so
 * no outgoing connection of this or another test is handed it while the root is down between
 * inits (a port from inside that range made bind fail with EADDRINUSE in CI), starting from a
 * per-process offset so parallel runs do not meet, and bindable right now. */
int it_root_port(void)
{
    FILE *f  = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int   lo = 32768, hi = 60999, base = 10000;

    if (f != NULL) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2) {
            lo = 32768;
        }
        fclose(f);
    }
    if (lo - base < 1000) {
        base = 1024;
    }
    for (int k = 0; k < 64; k++) {
        int                port = base + (int)((getpid() + k * 7919) % (lo - base));
        int                fd   = socket(AF_INET, SOCK_STREAM, 0);
        int                one  = 1;
        struct sockaddr_in a;

        memset(&a, 0, sizeof(a));
        a.sin_family      = AF_INET;
        a.sin_port        = htons((uint16_t)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0) {
            return -1;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
            close(fd);
            return port;
        }
        close(fd);
    }
    return -1;
}

void it_rm_dir(const char *dir)
{
    DIR           *d = opendir(dir);
    struct dirent *e;
    char           path[512];

    if (d != NULL) {
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
                snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
                unlink(path);
            }
        }
        closedir(d);
    }
    rmdir(dir);
}

size_t it_count_lines(const char *text, const char *needle)
{
    size_t n = 0;

    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) {
        n++;
    }
    return n;
}

char *it_read_log(void)
{
    const char *pattern = getenv("STRATA_DEBUG_FILE");
    const char *pp = pattern != NULL ? strstr(pattern, "%p") : NULL;
    char        path[512];
    char       *text;
    FILE       *f;
    long        len;

    if (pp == NULL) {
        return NULL;
    }
    snprintf(path, sizeof(path), "%.*s%d%s", (int)(pp - pattern), pattern, (int)getpid(),
             pp + 2);
    f = fopen(path, "r");
    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    len  = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = calloc((size_t)len + 1, 1);
    if (text != NULL && fread(text, 1, (size_t)len, f) != (size_t)len) {
        text[0] = '\0';
    }
    fclose(f);
    return text;
}
