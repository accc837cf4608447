/*
 * harness.h - runs a rank function on N forked processes, through strata's public API only.
 *
 * it_run() forks a driver process (its own process group) that applies the run's environment,
 * forks one process per rank, and only then calls strataGetUniqueId (which starts the bootstrap
 * root thread in the driver, so the root outlives the ranks) and hands the id to each rank through
 * a pipe, as collbench does (fork_after_id = 1 makes the id first and forks afterwards). Each rank
 * sets STRATA_HOSTID=node<k> from the layout (strata re-parses its STRATA_* environment after
 * fork, at its first call), calls strataCommInitRank and the run's function, destroys its
 * communicator and exits 0 when every check passed. The driver waits with the run's deadline (kill -9 of every rank left when
 * it passes) and the calling process waits for the driver with a backstop, so a hung library
 * fails the test instead of hanging it. The calling process never calls strata itself.
 *
 * Checks inside rank functions do not abort: IT_EXPECT and friends print one line to stderr
 * naming the rank, node, file and line, and count the failure; the rank exits non-zero at the
 * end. Result buffers get guard bytes (it_buf_t) and cross-rank comparisons (it_same_on_all)
 * all-gather a hash of the result with strataAllGather.
 */
#ifndef IT_HARNESS_H
#define IT_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "strata.h"

#define IT_MAX_IDS 4

typedef struct it_ctx {
    int            rank;
    int            nranks;
    int            node;      /* index of this rank's emulated node */
    int            nnodes;
    strataUniqueId id;        /* the id the communicator was made from (ids[0]) */
    strataUniqueId ids[IT_MAX_IDS]; /* ids[1..nids-1]: further ids, one root each */
    strataComm_t   comm;      /* NULL when the run has no_init */
    void          *shared;    /* IT_SHARED_BYTES shared by every process of the test program */
    void          *arg;
} it_ctx_t;

/* Returns the number of failed checks (0: pass). May also just count with IT_EXPECT. */
typedef int (*it_fn_t)(it_ctx_t *ctx);

typedef struct it_opts {
    int         nranks;
    /* NULL or "1": one node. "a+b+c": contiguous ranks per node. "AxB": A nodes of B ranks.
     * "rrK": node = rank % K (numbering that does not follow nodes). */
    const char *layout;
    /* "NAME=VALUE NAME=VALUE": set in the driver (before strataGetUniqueId) and so in every rank. */
    const char *env;
    int         timeout_s; /* whole run; 0: 90 s */
    int         no_init;   /* 1: the function makes (and destroys) its communicators itself */
    int         nprocs;    /* processes to fork (ranks 0..nprocs-1); 0: nranks */
    int         nids;      /* unique ids to make in the driver; 0: 1 */
    /* 0 (default): the driver forks the ranks first, then makes the ids and sends them down a
     * pipe (as collbench does), so no rank is forked from a process with strata threads.
     * 1: the driver makes the ids (starting the bootstrap root threads) and then forks. */
    int         fork_after_id;
} it_opts_t;

#define IT_SHARED_BYTES (1u << 20)

/* Runs fn on every rank as described above. Returns 0 when every rank exited 0 in time. */
int it_run(const it_opts_t *opts, it_fn_t fn, void *arg);

/* Shortcut: it_run with nranks, layout and env. */
int it_run_simple(int nranks, const char *layout, const char *env, it_fn_t fn, void *arg);

/* Node index of rank in layout (for tests that reason about nodes), -1 for a bad layout. */
int it_layout_node(const char *layout, int nranks, int rank, int *nnodes_p);

/* ------------------------------------------------------------------------------------------ */
/* checks inside a rank                                                                        */
/* ------------------------------------------------------------------------------------------ */

extern int      it_nfail;   /* failed checks in this process */
extern it_ctx_t *it_self;   /* the running rank (for messages) */

void it_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* 1 when res == strataSuccess, else counts a failure naming call and strataGetLastError. */
int it_ok(strataResult_t res, const char *call, const char *file, int line);
/* 1 when res == want and strataGetLastError is non-empty (for want != strataSuccess). */
int it_res(strataResult_t res, strataResult_t want, const char *call, const char *file, int line);

#define IT_FAIL(...)          it_fail(__FILE__, __LINE__, __VA_ARGS__)
#define IT_EXPECT(_cond, ...) ((_cond) ? 1 : (it_fail(__FILE__, __LINE__, __VA_ARGS__), 0))
#define IT_OK(_call)          it_ok((_call), #_call, __FILE__, __LINE__)
#define IT_RES(_call, _want)  it_res((_call), (_want), #_call, __FILE__, __LINE__)

double it_now(void); /* monotonic seconds */

/* This rank's log (STRATA_DEBUG_FILE with %p, the run's environment), read whole into a malloc'd
 * string (the caller frees it); NULL when the variable has no %p or the file cannot be read. */
char *it_read_log(void);
/* Removes dir and the files in it (not subdirectories): a test's STRATA_DEBUG_FILE directory. */
void  it_rm_dir(const char *dir);
/* Lines of text (a log) that contain needle. */
size_t it_count_lines(const char *text, const char *needle);

/* A loopback port for a fixed bootstrap root (STRATA_COMM_ID=127.0.0.1:<port>), bindable now and
 * below the kernel's ephemeral range; -1 when none was found. */
int it_root_port(void);

/* In a test program's main, after including cmocka.h: IT_FILTER=<glob> runs only matching tests
 * (e.g. IT_FILTER='test_b13*'). IT_TIMEOUT=<s> changes the default run deadline (90 s). IT_VERBOSE=1 prints each run's time and each expected error;
 * IT_HANG_BT=1 prints the stacks of a hung rank (gdb) before killing it. */
#define it_cmocka_filter()                                   \
    do {                                                     \
        if (getenv("IT_FILTER") != NULL) {                   \
            cmocka_set_test_filter(getenv("IT_FILTER"));     \
        }                                                    \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* buffers with guards                                                                         */
/* ------------------------------------------------------------------------------------------ */

#define IT_GUARD_BYTES 256

typedef struct it_buf {
    uint8_t *base;   /* the allocation */
    size_t   total;
    uint8_t *ptr;    /* the user area: 64-byte aligned + misalign */
    size_t   bytes;
    size_t   misalign;
} it_buf_t;

/* Allocates bytes (may be 0) with IT_GUARD_BYTES of sentinel on both sides; the user area starts
 * misalign bytes after a 64-byte boundary and is filled with fill. Returns ptr (never NULL). */
void *it_buf_alloc(it_buf_t *b, size_t bytes, size_t misalign, int fill);
/* 1 when both guards are intact; else counts a failure naming what (and the first bad offset). */
int   it_buf_guards(const it_buf_t *b, const char *what);
void  it_buf_free(it_buf_t *b);

/* ------------------------------------------------------------------------------------------ */
/* data types                                                                                  */
/* ------------------------------------------------------------------------------------------ */

size_t      it_dtype_size(strataDataType_t dt);
const char *it_dtype_name(strataDataType_t dt);
const char *it_op_name(strataRedOp_t op);
int         it_dtype_is_float(strataDataType_t dt);
int         it_dtype_is_signed(strataDataType_t dt);

uint16_t it_f2h(float f);    /* fp32 -> fp16, round to nearest even */
float    it_h2f(uint16_t h);
uint16_t it_f2bf(float f);   /* fp32 -> bf16, round to nearest even */
float    it_bf2f(uint16_t b);

/* Element i of buf as dt, from/to double. Integers convert modulo 2^bits (wrap). */
void   it_set(strataDataType_t dt, void *buf, size_t i, double v);
double it_get(strataDataType_t dt, const void *buf, size_t i);
/* Integers exactly (64-bit two's complement, wrapped to the type on set). */
void    it_set_i(strataDataType_t dt, void *buf, size_t i, int64_t v);
int64_t it_get_i(strataDataType_t dt, const void *buf, size_t i);

/* Compares count elements bitwise with expect; on a difference counts one failure naming what,
 * the first bad index, expected and actual values, and how many differ. Returns 1 when equal. */
int it_expect_equal(strataDataType_t dt, const void *got, const void *expect, size_t count,
                    const char *what);

/* 64-bit FNV-1a of bytes. */
uint64_t it_hash(const void *buf, size_t bytes);

/* All-gathers the hash of bytes over comm and checks every rank's is equal (bitwise identical
 * results). Returns 1 when equal. */
int it_same_on_all(strataComm_t comm, const void *buf, size_t bytes, const char *what);

#endif
