/*
 * intra.c - the node's windows (see intra.h): creation over a window transport, the counters and
 * doorbell that order the intra-node phases, and the reduction over windows.
 *
 * Creation is collective: every local rank creates its window, a barrier, every rank maps its
 * peers', a barrier, every rank removes its name. From then on nothing is left in /dev/shm even if
 * a rank is killed. A node of one rank needs no shared memory: its window is private. Then the
 * cross-memory attach probe: before the second barrier every rank wrote, in its control area, its
 * pid and where a magic word lies in its private memory; after it each reads every local peer's
 * word with peer_read and writes what it found; after a third barrier all take the same decision
 * from the same records (intra->cma).
 */
#include "config.h"
#include "coll/intra.h"

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "base/sys.h"
#include "coll/coll.h"
#include "device/dev.h"
#include "engine/comm.h"
#include "tune/policy.h"

#define ST_INTRA_CTRL_BYTES 4096
/* network bytes per rail shard of a chunk under STRATA_HIER_CHUNK_SIZE=auto */
#define ST_INTRA_NET_SHARD_BYTES ((size_t)256 << 10)

/* The mismatch check's board (engine/comm.h): ST_INTRA_BOARD_SLOTS entries per rank in its
 * window's control area, after the zero-copy descriptor and the cross-memory attach probe's
 * record (ST_INTRA_CTRL_FREE below). */
#define ST_INTRA_BOARD_OFF   2560
#define ST_INTRA_BOARD_SLOTS 8
_Static_assert(ST_INTRA_BOARD_OFF + ST_INTRA_BOARD_SLOTS * ST_BOARD_ENTRY_BYTES <=
                   ST_INTRA_CTRL_BYTES, "the board fits in the control area");

static void st_intra_wake(st_intra_t *intra);

static void st_intra_ring(void *arg)
{
    st_intra_wake(arg);
}

static uint32_t st_intra_bell(void *arg)
{
    return st_intra_doorbell(arg);
}

/* One node of several ranks: the board in the windows; local rank = rank (one node). */
static st_status_t st_intra_board_init(st_comm_t *comm, st_intra_t *intra)
{
    st_board_t *b = &intra->board;
    int         m = intra->local_size;

    for (int lr = 0; lr < m; lr++) {
        if (st_topo_node_rank(comm->topo, 0, lr) != lr) {
            return ST_OK; /* ranks numbered otherwise on the node: the network check stays */
        }
    }
    b->entries = calloc((size_t)m, sizeof(*b->entries));
    if (b->entries == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    for (int lr = 0; lr < m; lr++) {
        b->entries[lr] = intra->base[lr] + ST_INTRA_BOARD_OFF;
    }
    b->me       = intra->local_rank;
    b->n        = m;
    b->nslots   = ST_INTRA_BOARD_SLOTS;
    b->ring     = st_intra_ring;
    b->ring_arg = intra;
    b->sleep_on = intra;
    b->sleep    = st_intra_sleep_hook;
    b->arm      = st_intra_arm_hook;
    b->bell     = st_intra_bell;
    comm->board = b;
    return ST_OK;
}

/* A local rank's zero-copy descriptor for one operation, in its window's control area. */
typedef struct st_intra_zc_desc {
    uint64_t      op_id;    /* the operation it describes */
    uint32_t      want;     /* 1: this rank's call may run zero-copy (either flavour) */
    uint32_t      ok;       /* 1: both buffers below are shareable (send, recv, offsets) */
    st_win_memh_t send, recv;
    uint64_t      send_off, recv_off;
    uint64_t      send_addr, recv_addr; /* the buffers' addresses in the rank's process (cma) */
    uint32_t      pid;                  /* the rank's process (cma) */
    uint32_t      may_cma;              /* 1: this rank may take cma for this call (its
                                         * STRATA_CMA, the algorithm's rule): cma runs only when
                                         * every local rank's says so */
    uint64_t      bytes;                /* of each buffer: zero-copy runs only when every local
                                         * rank's call has the same (owners read and write the
                                         * peers' buffers up to their own size) */
} st_intra_zc_desc_t;

/* A local rank's record for the cross-memory attach probe of st_intra_create. */
typedef struct st_intra_cma_rec {
    uint64_t magic;  /* the value at addr */
    uint64_t addr;   /* of the rank's intra->cma_magic: private memory of its process */
    uint32_t pid;    /* the rank's process */
    int32_t  result; /* after its probe: an st_intra_cma_result_t */
    int32_t  peer;   /* the local rank whose read failed, or -1 */
    int32_t  pad;
} st_intra_cma_rec_t;

#define ST_INTRA_ZC_DESC_OFF 2048 /* in the control area, after the counters and doorbell */
#define ST_INTRA_CMA_REC_OFF 2304 /* the probe's record, after the descriptor */
#define ST_INTRA_CTRL_FREE   2560 /* from here: the mismatch check's board (ST_INTRA_BOARD_OFF) */
/* after the counters (64 B each), the doorbell's line and the sleepers' line */
_Static_assert(ST_INTRA_ZC_DESC_OFF >= 64 * (ST_INTRA_NCNT + 2) &&
               ST_INTRA_ZC_DESC_OFF + sizeof(st_intra_zc_desc_t) <= ST_INTRA_CMA_REC_OFF,
               "the zero-copy descriptor fits before the probe's record");
_Static_assert(ST_INTRA_CMA_REC_OFF + sizeof(st_intra_cma_rec_t) <= ST_INTRA_CTRL_FREE &&
               ST_INTRA_CTRL_FREE <= ST_INTRA_CTRL_BYTES,
               "the cross-memory attach probe's record fits below the control area's free part");
_Static_assert(ST_INTRA_BOARD_OFF == ST_INTRA_CTRL_FREE, "the board starts where the probe's record ends");
/* Each rank's CPU affinity mask (1024 CPUs), after the board: the node's ranks count the CPUs
 * they share (comm->intra_oversub). */
#define ST_INTRA_CPUS_OFF   3584
#define ST_INTRA_CPUS_BYTES 128
_Static_assert(ST_INTRA_BOARD_OFF + ST_INTRA_BOARD_SLOTS * ST_BOARD_ENTRY_BYTES <= ST_INTRA_CPUS_OFF &&
                   ST_INTRA_CPUS_OFF + ST_INTRA_CPUS_BYTES <= ST_INTRA_CTRL_BYTES,
               "the CPU masks fit after the board");

static st_intra_zc_desc_t *st_intra_zc_desc(const st_intra_t *intra, int lr)
{
    return (st_intra_zc_desc_t *)(intra->base[lr] + ST_INTRA_ZC_DESC_OFF);
}

static st_intra_cma_rec_t *st_intra_cma_rec(const st_intra_t *intra, int lr)
{
    return (st_intra_cma_rec_t *)(intra->base[lr] + ST_INTRA_CMA_REC_OFF);
}

/* ---- the cross-memory attach probe ----------------------------------------------------------- */

/* What a rank's probe found (its record's result). */
typedef enum {
    ST_INTRA_CMA_OK          = 1,  /* it read every local peer's magic */
    ST_INTRA_CMA_OFF         = 0,  /* STRATA_CMA=0 on this rank */
    ST_INTRA_CMA_REFUSED     = -1, /* the kernel refused a read or write (EPERM, ENOSYS) */
    ST_INTRA_CMA_FAILED      = -2, /* a read or write failed otherwise (ESRCH, EFAULT) */
    ST_INTRA_CMA_WRONG       = -3, /* a read brought other bytes than the peer's magic */
    ST_INTRA_CMA_PIDNS       = -4, /* a local peer is in another pid namespace */
    ST_INTRA_CMA_NO_READ     = -5, /* the window transport has no peer_read or peer_write */
    ST_INTRA_CMA_NO_STAGING  = -6  /* the in slots cannot hold local_size pieces of 64 B */
} st_intra_cma_result_t;

/* Why the node has no cross-memory attach: local rank lr's record rec says what it found. */
static void st_intra_cma_why(const st_intra_t *intra, int lr, const st_intra_cma_rec_t *rec,
                             char *buf, size_t len)
{
    int p = (int)rec->peer;

    switch ((st_intra_cma_result_t)rec->result) {
    case ST_INTRA_CMA_OFF:
        snprintf(buf, len, "local rank %d has STRATA_CMA=0", lr);
        break;
    case ST_INTRA_CMA_REFUSED:
        snprintf(buf, len, "the kernel does not let local rank %d read and write local rank %d's "
                 "memory (ptrace rules, Yama's ptrace_scope, seccomp; STRATA_DEBUG=DEBUG on it "
                 "says which error)", lr, p);
        break;
    case ST_INTRA_CMA_FAILED:
        snprintf(buf, len, "local rank %d could not read or write local rank %d's memory "
                 "(STRATA_DEBUG=DEBUG on it says why)", lr, p);
        break;
    case ST_INTRA_CMA_WRONG:
        snprintf(buf, len, "local rank %d read other bytes than local rank %d wrote", lr, p);
        break;
    case ST_INTRA_CMA_PIDNS:
        snprintf(buf, len, "local rank %d is in another pid namespace than local rank %d", p, lr);
        break;
    case ST_INTRA_CMA_NO_READ:
        snprintf(buf, len, "the window transport %s has no cross-memory attach", intra->win->name);
        break;
    case ST_INTRA_CMA_NO_STAGING:
        snprintf(buf, len, "the windows' in slots (%d x %zu B) cannot stage %d pieces of 64 B",
                 intra->depth, intra->chunk_bytes, intra->local_size);
        break;
    default:
        snprintf(buf, len, "local rank %d's probe said %d", lr, (int)rec->result);
        break;
    }
}

st_status_t st_intra_cma_param(int *mode_p)
{
    const char *v = st_core_config.cma != NULL ? st_core_config.cma : "auto";
    int         on;

    if (strcmp(v, "auto") == 0) {
        *mode_p = -1;
        return ST_OK;
    }
    if (st_config_parse_value(ST_CFG_BOOL, v, &on) != ST_OK) {
        st_error(ST_SUB_COLL, "STRATA_CMA '%s' is not auto, 0 or 1", v);
        return ST_ERR_INVALID;
    }
    *mode_p = on;
    return ST_OK;
}

/* This rank's part of the probe, before the barrier of the attach agreement: its record says
 * where its magic word lies in its own (private) memory. */
static void st_intra_cma_publish(const st_comm_t *comm, st_intra_t *intra)
{
    st_intra_cma_rec_t *rec = st_intra_cma_rec(intra, intra->local_rank);
    uint64_t            who[2] = {comm->uid, (uint64_t)getpid()};

    intra->cma_magic = st_hash(ST_HASH_SEED, who, sizeof(who)) | 1;
    rec->magic       = intra->cma_magic;
    rec->addr        = (uint64_t)(uintptr_t)&intra->cma_magic;
    rec->pid         = (uint32_t)getpid();
    rec->peer        = -1;
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* before the agreement the peers wait for */
}

/* After every local rank published (the attach agreement): reads every local peer's magic with
 * peer_read and writes it back with peer_write, publishes the result, waits for the others' (one
 * agreement over comm, which every rank makes, a node of one rank too) and sets intra->cma when
 * all succeeded. Every local rank
 * probes every other, not only a neighbour: ptrace rules may allow some pairs and not others
 * (Yama's ptrace_scope 1 lets a process read its descendants only). A failed probe is no error:
 * only a failed agreement is returned. */
static st_status_t st_intra_cma_probe(st_comm_t *comm, st_intra_agree_fn agree, st_intra_t *intra)
{
    st_intra_cma_rec_t *own = st_intra_cma_rec(intra, intra->local_rank);
    int32_t             result = ST_INTRA_CMA_OK, peer = -1;
    st_status_t         status;
    int                 mode = -1, bad = -1;

    (void)st_intra_cma_param(&mode); /* checked at init (st_coll_config_check) */
    intra->cma_forced = (mode == 1);
    if (mode == 0) {
        result = ST_INTRA_CMA_OFF;
    } else if (intra->win->peer_read == NULL || intra->win->peer_write == NULL) { /* a test's
                                                                                 * fake */
        result = ST_INTRA_CMA_NO_READ;
    } else if (intra->zc_piece == 0) {
        result = ST_INTRA_CMA_NO_STAGING;
    }
    for (int lr = 0; lr < intra->local_size && result == ST_INTRA_CMA_OK; lr++) {
        const st_intra_cma_rec_t *rec = st_intra_cma_rec(intra, lr);
        int                       r = st_topo_node_rank(comm->topo, comm->node, lr);
        uint64_t                  got = 0;

        if (lr == intra->local_rank) {
            continue;
        }
        peer = lr;
        if (!comm->peers[r].same_pidns) {
            result = ST_INTRA_CMA_PIDNS;
            break;
        }
        status = intra->win->peer_read((int)rec->pid, &got, (const void *)(uintptr_t)rec->addr,
                                       sizeof(got));
        if (status != ST_OK) {
            result = status == ST_ERR_UNSUPPORTED ? ST_INTRA_CMA_REFUSED : ST_INTRA_CMA_FAILED;
        } else if (got != rec->magic) {
            result = ST_INTRA_CMA_WRONG;
        } else if ((status = intra->win->peer_write((int)rec->pid, (void *)(uintptr_t)rec->addr,
                                                    &got, sizeof(got))) != ST_OK) {
            /* the same value back: the push writes into the peers' buffers (a seccomp filter
             * may allow process_vm_readv and not process_vm_writev) */
            result = status == ST_ERR_UNSUPPORTED ? ST_INTRA_CMA_REFUSED : ST_INTRA_CMA_FAILED;
        } else {
            peer = -1;
        }
    }
    own->result = result;
    own->peer   = peer;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    ST_CHECK(agree(comm, ST_OK)); /* a barrier: every local rank's result is written */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    intra->cma = 1;
    for (int lr = 0; lr < intra->local_size && intra->cma; lr++) {
        if (st_intra_cma_rec(intra, lr)->result != ST_INTRA_CMA_OK) {
            intra->cma = 0;
            bad        = lr;
        }
    }
    if (intra->cma) {
        st_info(ST_SUB_SHM, "%s: rank %d: the %d local ranks can read each other's ordinary "
                "buffers by cross-memory attach (zero-copy all-reduce with "
                "process_vm_readv/writev); STRATA_CMA%s", comm->name, comm->rank,
                intra->local_size,
                intra->cma_forced ? "=1: every all-reduce it can take"
                : comm->intra_oversub ? "=auto: all-reduces of 1-8 MiB (the node's ranks "
                                        "outnumber its CPUs)"
                : intra->local_size > 2 ? "=auto: all-reduces up to 8 MiB"
                                        : "=auto: every all-reduce it can take");
    } else {
        char why[256];

        st_intra_cma_why(intra, bad, st_intra_cma_rec(intra, bad), why, sizeof(why));
        st_log(mode == 1 && st_intra_cma_rec(intra, bad)->result != ST_INTRA_CMA_OFF
                   ? ST_LOG_WARN : ST_LOG_INFO,
               ST_SUB_SHM, "%s: rank %d: no cross-memory attach on this node (all-reduces on "
               "buffers not from strataMemAlloc copy through the windows): %s", comm->name,
               comm->rank, why);
    }
    return ST_OK;
}

/* After the attach agreement: the node's ranks are oversubscribed when the ranks of this host
 * outnumber the CPUs in the union of the node's affinity masks (a launcher that binds each rank
 * to its own core leaves one CPU in each mask, and none is oversubscribed). A rank whose mask
 * could not be read keeps init's estimate. */
static void st_intra_count_cpus(st_comm_t *comm, const st_intra_t *intra)
{
    unsigned char all[ST_INTRA_CPUS_BYTES] = {0};
    int           n = 0, known = 1;

    for (int lr = 0; lr < intra->local_size; lr++) {
        const unsigned char *m = (const unsigned char *)intra->base[lr] + ST_INTRA_CPUS_OFF;
        int                  any = 0;

        for (int i = 0; i < ST_INTRA_CPUS_BYTES; i++) {
            all[i] |= m[i];
            any |= m[i];
        }
        known &= any != 0;
    }
    for (int i = 0; i < ST_INTRA_CPUS_BYTES; i++) {
        n += __builtin_popcount(all[i]);
    }
    if (known && n > 0) {
        comm->intra_oversub = comm->host_ranks > n;
    }
}

st_status_t st_intra_create(st_comm_t *comm, st_intra_agree_fn agree, st_mem_type_t mem_type,
                            st_intra_t **intra_p)
{
    const st_topo_t *topo = comm->topo;
    st_intra_t      *intra;
    st_win_config_t  cfg;
    st_status_t      status;
    uint64_t         node_hash;
    int              leader;

    intra = calloc(1, sizeof(*intra));
    if (intra == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    intra->win = st_win_find(comm->tl->win, mem_type);
    if (intra->win == NULL) {
        st_error(ST_SUB_SHM, "%s: no window transport of this build serves %s memory", comm->name,
                 mem_type == ST_MEM_HOST ? "host" : "device");
        free(intra);
        return ST_ERR_UNSUPPORTED;
    }
    intra->local_rank  = st_topo_local_rank(topo, comm->rank);
    intra->local_size  = st_topo_local_size(topo, comm->node);
    /* STRATA_PIPELINE_DEPTH, or a tuning table's (tune/policy.h) */
    intra->depth       = (int)(comm->tune != NULL ? comm->tune->depth
                                                  : st_core_config.pipeline_depth);
    intra->chunk_bytes = st_core_config.hier_chunk_size;
    if (intra->chunk_bytes != ST_SIZE_AUTO) {
        /* slots hold whole 64-byte lines (the reductions' and copies' unit) */
        size_t given = intra->chunk_bytes;

        intra->chunk_bytes = ST_DIV_ROUND_UP(ST_MAX(given, 64), 64) * 64;
        if (intra->chunk_bytes != given) {
            st_param_adjusted("STRATA_HIER_CHUNK_SIZE", ST_CFG_SIZE, &given, &intra->chunk_bytes,
                              "a hierarchical chunk is a whole number of 64-byte lines, at "
                              "least one");
        }
    } else {
        /* One node: chunks that stay in cache (1 MiB). Several: each rail's shard of a chunk is one
         * network message of ST_INTRA_NET_SHARD_BYTES, so a chunk is that times the number of
         * rails (the same on every node: nodes must agree on chunk boundaries), within
         * [512k, 4m]. Measured on 2 emulated nodes (2 Gbit/s, MTU 9000, 2 ranks each: 512k
         * reaches 0.95-0.97 of the link ceiling, 2m 0.92-0.94; 1 Gbit/s, 4 ranks each: 1m and
         * 2m 0.19-0.20 GB/s busbw, 512k 0.13-0.17, 4m 0.18). */
        if (comm->nnodes > 1) {
            size_t bytes = ST_INTRA_NET_SHARD_BYTES * (size_t)st_topo_nrails(topo);

            intra->chunk_bytes = ST_MIN(ST_MAX(bytes, (size_t)512 << 10), (size_t)4 << 20);
        } else {
            /* 1 MiB: half the chunks (and system calls) of 512 KiB for the single-copy paths;
             * collbench -np 2 all_reduce -b 4M -e 64M -f 4 -n 5 -w 5, three runs, busbw GB/s:
             * cma 5.5-5.8 -> 6.0-6.8 at 4 MiB, level from 16 MiB; the copying path level at
             * 256 KiB-64 MiB on 2 and 4 ranks (STRATA_CMA=0) */
            intra->chunk_bytes = (size_t)1 << 20;
        }
    }
    if (comm->tune != NULL && comm->tune->window_chunk != 0) {
        /* a tuning table's largest hier chunk: slots hold it (smaller chunks are per call) */
        intra->chunk_bytes = ST_MAX(intra->chunk_bytes, comm->tune->window_chunk);
    }
    intra->chunk_bytes = ST_MAX(intra->chunk_bytes, 64);
    intra->chunk_bytes = ST_DIV_ROUND_UP(intra->chunk_bytes, 64) * 64;
    /* Across nodes, twice the default slots when they are 1 MiB or less (windows of 16 MiB at
     * most): the compressed inter-node step (hier.c, docs/compression.md) sends each chunk's
     * shards smaller by the codec's ratio, so it needs more chunks in flight to keep a link full
     * (bench/compress.sh --reps 3, 2 x 2 ranks at 1 Gbit/s, against STRATA_PIPELINE_DEPTH=4:
     * fp16 1.91x -> 1.99x, sign 6.33x -> 7.42x over the uncompressed call, which stays at
     * 0.178-0.179 GB/s busbw either way; docs/compression.md "Pipeline depth").
     * The same on every rank: the layout and the agreed tuning decide it. */
    if (comm->tune != NULL && comm->tune->depth_auto && comm->nnodes > 1 &&
        intra->chunk_bytes <= ((size_t)1 << 20) && 2 * intra->depth <= ST_PIPE_MAX_DEPTH) {
        intra->depth *= 2;
    }
    intra->win_bytes   = ST_INTRA_CTRL_BYTES + 2 * ST_INTRA_SMALL_BYTES +
                         2 * (size_t)intra->depth * intra->chunk_bytes;
    /* the zero-copy reduce-scatter's staging: local_size pieces in the in slots, whole lines */
    intra->zc_piece    = ST_MIN((size_t)intra->depth * intra->chunk_bytes /
                                (size_t)intra->local_size, ST_INTRA_ZC_PIECE) / 64 * 64;
    intra->base        = calloc((size_t)intra->local_size, sizeof(*intra->base));
    if (intra->base == NULL) {
        status = ST_ERR_NO_MEMORY;
        goto err_free;
    }
    if (intra->local_size == 1) {
        intra->private_mem = aligned_alloc(4096, ST_DIV_ROUND_UP(intra->win_bytes, 4096) * 4096);
        if (intra->private_mem == NULL) {
            st_error(ST_SUB_SHM, "%s: cannot allocate a %zu B window", comm->name,
                     intra->win_bytes);
            status = ST_ERR_NO_MEMORY;
            goto err_free;
        }
        memset(intra->private_mem, 0, intra->win_bytes);
        intra->base[0] = intra->private_mem;
        /* the agreements below (create, attach, the cross-memory attach probe) are all-reduces
         * over the whole communicator: a node of one rank takes part when other nodes have
         * windows to make */
        if (st_topo_nrails(topo) > 1) {
            ST_CHECK_GOTO(agree(comm, ST_OK), status, err_free);
            ST_CHECK_GOTO(agree(comm, ST_OK), status, err_free);
            ST_CHECK_GOTO(agree(comm, ST_OK), status, err_free);
        }
        goto done;
    }

    /* names: the communicator's id, the node's identity and its local rank 0's pid (unique among
     * live processes, so even a reused STRATA_COMM_ID cannot meet a stale segment) */
    leader    = st_topo_node_rank(topo, comm->node, 0);
    node_hash = st_hash(ST_HASH_SEED, comm->peers[comm->rank].node_id,
                             strlen(comm->peers[comm->rank].node_id));
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.name, sizeof(cfg.name), "%016llx-%08llx-%u", (unsigned long long)comm->uid,
             (unsigned long long)(node_hash & 0xffffffffu), (unsigned)comm->peers[leader].pid);
    cfg.local_rank = intra->local_rank;
    cfg.local_size = intra->local_size;
    cfg.size       = intra->win_bytes;
    cfg.numa       = st_topo_rec(topo, comm->rank)->numa;
    snprintf(intra->win_name, sizeof(intra->win_name), "%.79s", cfg.name);
    /* a failure of one rank must not leave the others in a barrier: every rank goes through both
     * barriers and the result is agreed on by an all-reduce of the statuses */
    status = intra->win->create(&cfg, &intra->ctx);
    ST_CHECK_GOTO(agree(comm, status), status, err_ctx);
    status = intra->win->attach(intra->ctx);
    if (status == ST_OK) {
        for (int lr = 0; lr < intra->local_size; lr++) {
            intra->base[lr] = intra->win->base(intra->ctx, lr);
        }
        st_intra_cma_publish(comm, intra); /* the agreement is the probe's first barrier */
        (void)st_cpus_mask((unsigned char *)intra->base[intra->local_rank] + ST_INTRA_CPUS_OFF,
                           ST_INTRA_CPUS_BYTES); /* all zero when unreadable */
    }
    ST_CHECK_GOTO(agree(comm, status), status, err_ctx);
    intra->win->unlink(intra->ctx);
    st_intra_count_cpus(comm, intra);
    ST_CHECK_GOTO(st_intra_cma_probe(comm, agree, intra), status, err_ctx);
done:
    intra->doorbell = (uint32_t *)(intra->base[0] + 64 * ST_INTRA_NCNT);
    intra->sleepers = intra->doorbell + 16;
    if (comm->nnodes == 1 && intra->local_size > 1) {
        status = st_intra_board_init(comm, intra);
        if (status != ST_OK) {
            goto err_ctx;
        }
    }
    st_info(ST_SUB_SHM, "%s: rank %d: windows of %zu B x %d local ranks (%d slots of %zu B)",
            comm->name, comm->rank, intra->win_bytes, intra->local_size, intra->depth,
            intra->chunk_bytes);
    *intra_p = intra;
    return ST_OK;

err_ctx:
    if (intra->ctx != NULL) {
        intra->win->destroy(intra->ctx);
    }
err_free:
    free(intra->private_mem);
    free(intra->base);
    free(intra);
    return status;
}

/* Drops the device windows (st_intra_create_device). */
static void st_intra_destroy_device(st_intra_t *intra)
{
    const st_dev_ops_t *dev = st_dev();

    if (dev == NULL) {
        return;
    }
    if (intra->dstream != NULL || intra->dprivate != NULL || intra->dmirror != NULL) {
        (void)dev->set_current(intra->dev_id); /* destroy may run on another thread */
    }
    if (intra->dstream != NULL) {
        dev->stream_destroy(intra->dstream);
    }
    if (intra->dctx != NULL) {
        intra->dwin->destroy(intra->dctx);
    }
    if (intra->dprivate != NULL) {
        dev->mem_free(intra->dprivate);
    }
    if (intra->dmirror != NULL) {
        dev->host_free(intra->dmirror);
    }
    free(intra->dbase);
    intra->dbase = NULL;
}

st_status_t st_intra_create_device(st_comm_t *comm, st_intra_agree_fn agree, st_intra_t *intra)
{
    const st_dev_ops_t *dev  = st_dev();
    const st_win_ops_t *dwin = st_win_find(comm->tl->win, ST_MEM_CUDA);
    st_win_config_t     cfg;
    st_status_t         status;

    /* every rank must have a device, or none uses device windows (the hier path's ranks of a
     * node read each other's) */
    status = (dev != NULL && dwin != NULL && comm->dev_id >= 0) ? ST_OK : ST_ERR_UNSUPPORTED;
    if (agree(comm, status) != ST_OK) {
        st_debug(ST_SUB_SHM, "%s: rank %d: no device windows (%s)", comm->name, comm->rank,
                 status == ST_OK ? "a rank has no device" : "no device here");
        return ST_OK;
    }
    intra->dwin   = dwin;
    intra->dev_id = comm->dev_id;
    status        = dev->set_current(comm->dev_id); /* init may run on a thread of its own */
    if (status == ST_OK) {
        status = dev->host_alloc((size_t)intra->depth * intra->chunk_bytes,
                                 (void **)&intra->dmirror);
    }
    intra->dbase = calloc((size_t)intra->local_size, sizeof(*intra->dbase));
    if (status == ST_OK && intra->dbase == NULL) {
        status = ST_ERR_NO_MEMORY;
    }
    if (intra->local_size == 1) {
        if (status == ST_OK) {
            status = dev->mem_alloc(intra->win_bytes, &intra->dprivate);
        }
        if (status == ST_OK) {
            intra->dbase[0] = intra->dprivate;
        }
        /* the same agreements as a node of several ranks makes */
        ST_CHECK_GOTO(agree(comm, status), status, err);
        ST_CHECK_GOTO(agree(comm, ST_OK), status, err);
    } else {
        memset(&cfg, 0, sizeof(cfg));
        snprintf(cfg.name, sizeof(cfg.name), "%s-d", intra->win_name);
        cfg.local_rank = intra->local_rank;
        cfg.local_size = intra->local_size;
        cfg.size       = intra->win_bytes;
        cfg.numa       = -1;
        if (status == ST_OK) {
            status = dwin->create(&cfg, &intra->dctx);
        }
        ST_CHECK_GOTO(agree(comm, status), status, err);
        status = dwin->attach(intra->dctx);
        ST_CHECK_GOTO(agree(comm, status), status, err);
        dwin->unlink(intra->dctx);
        for (int lr = 0; lr < intra->local_size; lr++) {
            intra->dbase[lr] = dwin->base(intra->dctx, lr);
        }
    }
    st_info(ST_SUB_SHM, "%s: rank %d: device windows of %zu B x %d local ranks on device %d (%s)",
            comm->name, comm->rank, intra->win_bytes, intra->local_size, comm->dev_id,
            dwin->name);
    return ST_OK;

err:
    st_intra_destroy_device(intra);
    return status;
}

void st_intra_destroy(st_intra_t *intra)
{
    if (intra == NULL) {
        return;
    }
    st_intra_destroy_device(intra);
    free(intra->board.entries);
    free(intra->small_spare);
    if (intra->ctx != NULL) {
        intra->win->destroy(intra->ctx);
    }
    free(intra->private_mem);
    free(intra->base);
    free(intra);
}

/* Wakes the node's sleepers, if any, after a store they may wait for. The fence orders that
 * store before the load of the sleepers' count; a sleeper counts itself (st_intra_arm) before
 * its last look at the counters and reads the doorbell between the two (the engine's pass after
 * arming), so either that look sees the store or this load sees the sleeper, which then finds
 * the doorbell changed or is woken. No sleeper (the latency path): no write to the shared line. */
static void st_intra_wake(st_intra_t *intra)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(intra->sleepers, __ATOMIC_RELAXED) != 0) {
        __atomic_add_fetch(intra->doorbell, 1, __ATOMIC_SEQ_CST);
        intra->win->wake(intra->ctx, intra->doorbell);
    }
}

void st_intra_publish(st_intra_t *intra, st_intra_cnt_t c, uint64_t value)
{
    __atomic_store_n(st_intra_cnt_ptr(intra, intra->local_rank, c), value, __ATOMIC_RELEASE);
    if (intra->local_size > 1) {
        st_intra_wake(intra);
    }
}

void st_intra_publish_at(st_intra_t *intra, uint64_t *word, uint64_t value)
{
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
    if (intra->local_size > 1) {
        st_intra_wake(intra);
    }
}

int st_intra_reached(const st_intra_t *intra, int lr, st_intra_cnt_t c, uint64_t value)
{
    return __atomic_load_n(st_intra_cnt_ptr(intra, lr, c), __ATOMIC_ACQUIRE) >= value;
}

int st_intra_all_reached(const st_intra_t *intra, st_intra_cnt_t c, uint64_t value,
                         int *laggard_p)
{
    for (int lr = 0; lr < intra->local_size; lr++) {
        if (!st_intra_reached(intra, lr, c, value)) {
            if (laggard_p != NULL) {
                *laggard_p = lr;
            }
            return 0;
        }
    }
    return 1;
}

uint32_t st_intra_doorbell(const st_intra_t *intra)
{
    return __atomic_load_n(intra->doorbell, __ATOMIC_SEQ_CST);
}

void st_intra_arm(st_intra_t *intra, int delta)
{
    if (intra->local_size > 1) {
        __atomic_add_fetch(intra->sleepers, (uint32_t)delta, __ATOMIC_SEQ_CST);
        /* the other half of st_intra_wake's fence: the count before the next look at the
         * counters, in the C11 model too (an acquire load may pass a plain RMW on some CPUs) */
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    }
}

void st_intra_sleep(st_intra_t *intra, uint32_t seen, long timeout_us)
{
    if (intra->local_size == 1) {
        return;
    }
    intra->win->wait(intra->ctx, intra->doorbell, seen, timeout_us);
}

st_status_t st_intra_zc_init(const st_intra_t *intra, st_intra_zc_t *zc, int may,
                             st_mem_type_t mem)
{
    memset(zc, 0, sizeof(*zc));
    zc->win = (mem == ST_MEM_CUDA) ? intra->dwin : intra->win;
    may     = may && zc->win != NULL;
    if (!may || intra->local_size == 1) {
        zc->state = 2; /* no negotiation: the others never look */
        return ST_OK;
    }
    /* cma: host buffers read with the host window transport (the device one has no peer_read) */
    zc->may_cma = intra->cma && mem == ST_MEM_HOST && zc->win == intra->win;
    zc->send    = calloc((size_t)intra->local_size, sizeof(*zc->send));
    zc->recv    = calloc((size_t)intra->local_size, sizeof(*zc->recv));
    zc->pid     = calloc((size_t)intra->local_size, sizeof(*zc->pid));
    if (zc->send == NULL || zc->recv == NULL || zc->pid == NULL) {
        st_intra_zc_fini(zc);
        return ST_ERR_NO_MEMORY;
    }
    return ST_OK;
}

void st_intra_zc_fini(st_intra_zc_t *zc)
{
    free(zc->send);
    free(zc->recv);
    free(zc->pid);
    zc->send = NULL;
    zc->recv = NULL;
    zc->pid  = NULL;
}

st_status_t st_intra_zc_negotiate(st_intra_t *intra, st_intra_zc_t *zc, uint64_t op_id, int want,
                                  const void *send, void *recv, size_t bytes, int *lag_p)
{
    int all = 1, all_want = 1, all_cma = 1;

    if (zc->state == 0) {
        st_intra_zc_desc_t *d = st_intra_zc_desc(intra, intra->local_rank);
        size_t              soff = 0, roff = 0;
        int                 ok;

        ok = want && zc->win->mem_pack(send, bytes, &d->send, &soff) &&
             zc->win->mem_pack(recv, bytes, &d->recv, &roff);
        d->op_id     = op_id;
        d->want      = (uint32_t)(want != 0);
        d->ok        = (uint32_t)ok;
        d->send_off  = ok ? soff : 0;
        d->recv_off  = ok ? roff : 0;
        d->send_addr = (uint64_t)(uintptr_t)send;
        d->recv_addr = (uint64_t)(uintptr_t)recv;
        d->pid       = (uint32_t)getpid();
        d->may_cma   = (uint32_t)(zc->may_cma != 0);
        d->bytes     = (uint64_t)bytes;
        zc->state    = 1;
        if (!ok && !(want && zc->may_cma)) {
            /* off whatever the peers publish (neither mapped nor cma can run with this rank's
             * descriptor): no wait for theirs. They decide off from it too. What keeps them
             * reading this operation's descriptor (plain stores: a rewrite under a reader could
             * tear): this rank cannot publish the next one before every local rank has decided,
             * because its operation ends only after every local rank's IN for the first chunk
             * (hier.c: the reduce-scatter waits for all IN), which each publishes after its own
             * negotiation; that needs the same op_id on every local rank, as matched calls give
             * (the mismatch check). Published without the doorbell: the caller's next publish,
             * copy-in's IN after its first chunk is copied, rings it, so a peer asleep on this
             * descriptor is woken once, not twice (and sleeps are bounded: exec.c). */
            __atomic_store_n(st_intra_cnt_ptr(intra, intra->local_rank, ST_INTRA_ZC), op_id + 1,
                             __ATOMIC_RELEASE);
            zc->state = 2;
            return ST_OK;
        }
        st_intra_publish(intra, ST_INTRA_ZC, op_id + 1);
    }
    if (zc->state == 2) {
        return ST_OK;
    }
    if (!st_intra_all_reached(intra, ST_INTRA_ZC, op_id + 1, lag_p)) {
        return ST_INPROGRESS;
    }
    for (int lr = 0; lr < intra->local_size; lr++) {
        const st_intra_zc_desc_t *d = st_intra_zc_desc(intra, lr);

        int same = d->op_id == op_id && d->bytes == (uint64_t)bytes; /* else the mismatch
                                                                       * check reports it */

        all      &= (same && d->ok);
        all_want &= (same && d->want);
        all_cma  &= (same && d->may_cma);
    }
    zc->state = 2;
    /* every rank decides from the same descriptors: alike, whatever each one's settings */
    if (!all && all_want && all_cma) {
        /* cma: the peers' raw addresses, read only through peer_read (intra.h) */
        for (int lr = 0; lr < intra->local_size; lr++) {
            const st_intra_zc_desc_t *d = st_intra_zc_desc(intra, lr);

            zc->send[lr] = (const char *)(uintptr_t)d->send_addr;
            zc->recv[lr] = (char *)(uintptr_t)d->recv_addr;
            zc->pid[lr]  = (int)d->pid;
        }
        zc->on  = 1;
        zc->cma = 1;
        return ST_OK;
    }
    if (!all) {
        return ST_OK;
    }
    for (int lr = 0; lr < intra->local_size; lr++) {
        const st_intra_zc_desc_t *d = st_intra_zc_desc(intra, lr);
        char *sbase = zc->win->mem_map(&d->send), *rbase = zc->win->mem_map(&d->recv);

        if (sbase == NULL || rbase == NULL) {
            if (lag_p != NULL) {
                *lag_p = lr;
            }
            return ST_ERR_IO;
        }
        zc->send[lr] = sbase + d->send_off;
        zc->recv[lr] = rbase + d->recv_off;
    }
    zc->on = 1;
    return ST_OK;
}

int st_intra_zc_push_begin(st_intra_t *intra, uint64_t op_id, int *left_p)
{
    __atomic_store_n(st_intra_cnt_ptr(intra, intra->local_rank, ST_INTRA_ZC_PUSH), op_id + 1,
                     __ATOMIC_SEQ_CST);
    for (int lr = 0; lr < intra->local_size; lr++) {
        if (lr != intra->local_rank &&
            __atomic_load_n(st_intra_cnt_ptr(intra, lr, ST_INTRA_ZC_LEFT), __ATOMIC_SEQ_CST) >=
                op_id + 1) {
            st_intra_zc_push_end(intra);
            *left_p = lr;
            return 0;
        }
    }
    return 1;
}

void st_intra_zc_push_end(st_intra_t *intra)
{
    __atomic_store_n(st_intra_cnt_ptr(intra, intra->local_rank, ST_INTRA_ZC_PUSH), 0,
                     __ATOMIC_RELEASE);
}

void st_intra_zc_leave(st_intra_t *intra, uint64_t op_id)
{
    __atomic_store_n(st_intra_cnt_ptr(intra, intra->local_rank, ST_INTRA_ZC_LEFT), op_id + 1,
                     __ATOMIC_SEQ_CST);
}

int st_intra_zc_pushing(const st_intra_t *intra, int lr, uint64_t op_id)
{
    return __atomic_load_n(st_intra_cnt_ptr(intra, lr, ST_INTRA_ZC_PUSH), __ATOMIC_SEQ_CST) ==
           op_id + 1;
}

void st_intra_reduce(const st_redop_t *redop, void *dst, const void *const *srcs, int n,
                     size_t count)
{
    size_t es = st_dtype_size(redop->dtype);

    if (count == 0) {
        return;
    }
    if (n == 1) {
        if (dst != srcs[0]) {
            memcpy(dst, srcs[0], count * es);
        }
        return;
    }
    st_reduce_combine_n(redop, dst, srcs, n, count); /* the same order, fused */
}

void st_intra_sleep_hook(void *intra, uint32_t seen, long timeout_us)
{
    st_intra_sleep(intra, seen, timeout_us);
}

void st_intra_arm_hook(void *intra, int delta)
{
    st_intra_arm(intra, delta);
}
