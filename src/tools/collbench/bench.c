/*
 * bench.c - one rank of collbench: the nccl-tests measurement loop and its table.
 *
 * For every selected collective, datatype, op and root (nccl-tests' TimeTest), each rank warms up
 * at the largest and the smallest size, then for every size runs the collective out of place and in
 * place: `iters` timed calls (queued on a strata host stream and synchronized once with -z 0, or
 * each returning when complete with a NULL stream, -z 1), then, with -c 1, one more call on fresh
 * inputs whose elements it checks (data.c). The time of a size is the slowest rank's average (a
 * strataAllReduce max), #wrong the sum over ranks; rank 0 prints the row in nccl-tests' format so
 * that the tools that parse nccl-tests' output read collbench's unchanged. Sizes, counts, in-place
 * offsets and bus-bandwidth factors follow nccl-tests' getCollByteCount and getBw exactly.
 * Any failing strata call ends the rank (exit status 2) with strataGetErrorString and
 * strataGetLastError: the other ranks then fail too, and the launcher ends the run.
 * With --phases every rank reads strataCommGetPhaseTimes right after the last timed call of each
 * half of a row (before the bookkeeping all-reduces, which are collectives too and would replace
 * it), the slowest rank's time per phase is taken with one more all-reduce, outside the timing,
 * and rank 0 prints it under the row as '#' lines, which tools that parse nccl-tests skip. With
 * --mem-alloc the buffers come from strataMemAlloc, the memory strata's node peers can map. With
 * --device sim|cuda (device.c) the buffers are device memory: data.c fills and checks pinned host
 * mirrors of them, the inputs are copied in after every fill and the receive buffer copied out
 * before every check, the calls take a device stream (the legacy default one with -z 1) and a
 * timed region ends when that stream is synchronized; a call that fails after it was queued is
 * the communicator's async error, read after each synchronize.
 * Ranks with different STRATA_ALGO (or another setting every rank must share) fail init with
 * strataInvalidUsage, naming it (the library's own check, core/init.c): status 2.
 *
 * --compress SPEC (all-reduce only; collbench.c refuses the rest): every row's size gets a fresh
 * compressor per rank (strataCompressorCreate, destroyed after the row; the warmups get their own),
 * and each half times the plain strataAllReduce loop and then the strataAllReduceCompressed loop,
 * the same iterations on the same inputs (data.c's coded draws); the row's time, algbw and busbw
 * are the compressed loop's, and three columns follow the in-place half: wire, the bytes the
 * busiest rank sent over the network in the last compressed call's inter-node phase
 * (strataCommGetPhaseTimes bytes[1], read as --phases reads it; 0 on one node, where nothing is
 * compressed), and the speedup of each half, plain time / compressed time. The checked call comes
 * right after strataCompressorReset, so error feedback from the timed calls does not reach it:
 * with codec none or topk:1 it must be exact, with the others within data.c's bound
 * (cb_data_check_bound); and every rank compares a hash of its result with rank 0's: a rank whose
 * result is not bitwise rank 0's adds 1 to #wrong (cb_check_coded).
 *
 * The all-to-alls, gather and scatter follow nccl-tests' alltoall_perf, gather_perf and
 * scatter_perf: size is the bytes of one rank's larger buffer (nranks x count elements: count is
 * per rank pair, or per rank), busbw = algbw x (n-1)/n, -r picks gather's and scatter's root, and
 * the all-to-alls, which strata never runs in place, print N/A in the in-place half. alltoallv
 * runs the skewed load of cb_a2av_load: every rank sends a size's bytes in all, `--skew F` times
 * the mean per-pair count of them to rank 0 (MoE's hot expert), the rest evenly to the others;
 * its algbw is that size over the time, its busbw the most bytes any rank sends to or receives
 * from the other ranks over the time (the busiest rank's traffic, which bounds the time; at F 1 it
 * is alltoall's busbw). With -c 1 every element a rank receives is checked against the input of
 * its sender at a key unique per (sender, receiver, index).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collbench.h"

#define CB_HOST_LEN 56
#define CB_ALGO_LEN 16

/* What rank 0 prints about every rank under "# Using devices". */
typedef struct cb_rankinfo {
    int32_t pid;
    int32_t device; /* --device: the rank's device ordinal; -1 for host buffers */
    char    host[CB_HOST_LEN];
} cb_rankinfo_t;

/* What --phases prints of one half of a row: per phase the slowest rank's time and the largest
 * byte count (the shards of phase 1 differ between ranks on uneven nodes). */
typedef struct cb_phases {
    char   algorithm[CB_ALGO_LEN]; /* rank 0's */
    int    mixed;                  /* 1: some rank ran another algorithm */
    double total;
    double seconds[3];
    double bytes[3];
} cb_phases_t;

typedef struct cb_bench {
    const cb_opts_t *opts;
    int              rank;
    int              nranks;
    strataComm_t     comm;
    strataStream_t   stream;      /* NULL with -z 1 (for device buffers: the legacy default) */
    int              nnodes;      /* of comm; read with --phases only */
    cb_device_t     *device;      /* --device sim or cuda; NULL for host buffers */
    char            *sendbuf;     /* what data.c fills and checks: the buffers, or with --device */
    char            *recvbuf;     /* their pinned host mirrors */
    char            *callsend;    /* what the calls take: the buffers, or the device buffers */
    char            *callrecv;
    size_t           bufbytes;
    uint64_t         rep;         /* data seed, advanced in lockstep on every rank */
    uint64_t         wrong_total; /* of the collective being run */
    double           bw_sum;
    int              bw_count;
    int              status;      /* exit status so far: 0 or 1 */
    char             ran[2][CB_ALGO_LEN]; /* rank 0: what the row's halves ran (forced -A) */
    size_t          *a2av;        /* alltoallv's arguments, 4 x nranks: send counts, send
                                   * displacements, receive counts, receive displacements */
    /* --compress */
    int              node_max;    /* ranks of comm's largest node */
    double           wire;        /* the row's wire column (max over ranks and halves) */
    double           speedup[2];  /* the row's plain / compressed time, out of place, in place */
    int              differ[2];   /* ranks whose checked result is not bitwise rank 0's */
} cb_bench_t;

/* One test (collective x datatype x op x root) at one size. */
typedef struct cb_test {
    st_coll_type_t   coll;        /* one of cb_colls */
    strataDataType_t dtype;
    int              op;          /* cb_op_t */
    strataRedOp_t    redop;       /* what strata is passed */
    int              root;        /* -1 for the collectives without one */
    size_t           tsize;
    size_t           count;       /* the count argument */
    size_t           sendcount;   /* elements in sendbuff */
    size_t           recvcount;   /* elements in recvbuff */
    size_t           send_ip_off; /* in place: sendbuff = recvbuff + rank * send_ip_off elements */
    size_t           recv_ip_off; /* in place: recvbuff = recvbuff + rank * recv_ip_off elements */
    size_t           bytes;       /* the size column: the larger buffer's bytes (alltoallv: what
                                   * every rank sends in all) */
    size_t           stride;      /* alltoallv: the data key of element i from s to d is
                                   * d * stride + i */
    double           moved;       /* alltoallv: the most bytes any rank sends to or receives
                                   * from the other ranks (its busbw's numerator) */
    int              coded;       /* --compress and count > 0: the row runs compressed */
    strataCompressor_t cz;        /* what all-reduce calls take: NULL for strataAllReduce, the
                                   * row's compressor for strataAllReduceCompressed */
} cb_test_t;

const st_coll_type_t cb_colls[CB_NUM_COLLS] = {
    ST_COLL_ALLREDUCE, ST_COLL_REDUCESCATTER, ST_COLL_ALLGATHER, ST_COLL_BROADCAST, ST_COLL_REDUCE,
    ST_COLL_SEND, ST_COLL_ALLTOALL, ST_COLL_ALLTOALLV, ST_COLL_GATHER, ST_COLL_SCATTER
};

/* Ends the rank after a failed call: the result, strata's explanation, and what we were doing. */
static void cb_fatal(const cb_bench_t *b, const cb_test_t *t, const char *call,
                     strataResult_t res)
{
    char what[160] = "";

    if (t != NULL) {
        snprintf(what, sizeof(what), " (%s, count %zu, %s%s%s, root %d)",
                 st_coll_info(t->coll)->short_name, t->count, cb_dtype_name(t->dtype),
                 t->op >= 0 ? " " : "", cb_op_name(t->op), t->root);
    }
    fprintf(stderr, "collbench: rank %d: %s failed%s: %s: %s\n", b->rank, call, what,
            strataGetErrorString(res), strataGetLastError(b->comm));
    fflush(stderr);
    exit(2);
}

/* Elements rank src sends to rank dst in alltoallv's skewed load, c being the mean per rank pair
 * (the size's count). Every rank sends n * c elements in all: round(skew * c) of them (at most
 * n * c) to rank 0, the hot destination, and the rest split evenly over ranks 1 .. n-1, the
 * remainder's extra elements going one each to the first ranks of that list rotated by src (so
 * every pair's count is fixed by (c, n, skew, src, dst) alone and the sum is exact). Rank 0 thus
 * receives about skew x the mean that a rank receives, the others (n - skew) / (n - 1) x it;
 * skew 1 is alltoall's load, skew n sends everything to rank 0. */
static size_t cb_a2av_load(size_t c, int n, double skew, int src, int dst)
{
    size_t total = c * (size_t)n, hot, rest, others = (size_t)n - 1;
    size_t slot;

    hot = (size_t)(skew * (double)c + 0.5);
    hot = (hot > total) ? total : hot;
    if (dst == 0 || n == 1) {
        return (dst == 0 && n == 1) ? total : hot;
    }
    rest = total - hot;
    slot = ((size_t)dst - 1 + (size_t)src) % others;
    return rest / others + (slot < rest % others);
}

/* alltoallv at mean count c: this rank's four arrays (packed displacements), its totals, and the
 * most bytes any rank moves to or from the others. */
static void cb_a2av_shape(const cb_bench_t *b, cb_test_t *t, size_t c)
{
    size_t *sc = b->a2av, *sd = sc + b->nranks, *rc = sd + b->nranks, *rd = rc + b->nranks;
    size_t  recv_off, most = 0;
    int     n = b->nranks, p, q, s;

    t->sendcount = t->recvcount = 0;
    for (p = 0; p < n; p++) {
        sc[p]         = cb_a2av_load(c, n, b->opts->skew, b->rank, p);
        rc[p]         = cb_a2av_load(c, n, b->opts->skew, p, b->rank);
        sd[p]         = t->sendcount;
        rd[p]         = t->recvcount;
        t->sendcount += sc[p];
        t->recvcount += rc[p];
    }
    for (q = 0; q < n; q++) {
        recv_off = 0;
        for (s = 0; s < n; s++) {
            recv_off += (s != q) ? cb_a2av_load(c, n, b->opts->skew, s, q) : 0;
        }
        if (recv_off > most) {
            most = recv_off;
        }
        /* every rank sends n * c elements, its own block aside */
        if (c * (size_t)n - cb_a2av_load(c, n, b->opts->skew, q, q) > most) {
            most = c * (size_t)n - cb_a2av_load(c, n, b->opts->skew, q, q);
        }
    }
    t->count  = c;
    t->stride = c * (size_t)n;
    t->moved  = (double)most * (double)t->tsize;
    t->bytes  = c * (size_t)n * t->tsize;
}

/* nccl-tests' getCollByteCount: count = bytes / element size, divided among the ranks where the
 * count is one rank's block (all_gather, reduce_scatter, gather, scatter) or one rank pair's
 * (alltoall, and alltoallv's mean); in place, the block sits at the rank's offset of the larger
 * buffer (engine/op.h's in-place rule). */
static void cb_test_shape(const cb_bench_t *b, cb_test_t *t, size_t bytes)
{
    const st_coll_info_t *info  = st_coll_info(t->coll);
    size_t                count = bytes / t->tsize, n = (size_t)b->nranks;

    t->send_ip_off = 0;
    t->recv_ip_off = 0;
    if (t->coll == ST_COLL_ALLTOALLV) {
        cb_a2av_shape(b, t, count / n);
        return;
    }
    t->count       = info->per_rank ? count / n : count;
    t->sendcount   = t->count;
    t->recvcount   = t->count;
    if (t->coll == ST_COLL_ALLTOALL) {
        t->sendcount = t->recvcount = t->count * n;
    } else if (info->in_place == ST_INPLACE_SEND_AT_RANK) { /* all_gather, gather */
        t->recvcount   = t->count * n;
        t->send_ip_off = t->count;
    } else if (info->in_place == ST_INPLACE_RECV_AT_RANK) { /* reduce_scatter, scatter */
        t->sendcount   = t->count * n;
        t->recv_ip_off = t->count;
    }
    t->bytes = ((t->sendcount > t->recvcount) ? t->sendcount : t->recvcount) * t->tsize;
}

/* Whether the collective has an in-place form (the all-to-alls have none; sendrecv's in-place
 * half sends and receives on one buffer, as nccl-tests' does). */
static int cb_has_in_place(st_coll_type_t coll)
{
    const st_coll_info_t *info = st_coll_info(coll);

    return info->in_place != ST_INPLACE_NONE || info->p2p;
}

/* nccl-tests' getBw: algbw over the bytes one rank sees (all of them for all_gather and
 * reduce_scatter), busbw scaled to what the busiest link carries in a ring (st_coll_busbw). */
static void cb_test_bw(const cb_test_t *t, int nranks, double sec, double *algbw_p,
                       double *busbw_p)
{
    double bytes = (double)(t->count * t->tsize);

    if (st_coll_info(t->coll)->per_rank || t->coll == ST_COLL_ALLTOALLV) {
        bytes *= nranks;
    }
    *algbw_p = (sec > 0) ? bytes / 1.0e9 / sec : 0;
    *busbw_p = *algbw_p * st_coll_busbw(t->coll, nranks);
    if (t->coll == ST_COLL_ALLTOALLV) { /* the bytes the busiest rank actually moved */
        *busbw_p = (sec > 0) ? t->moved / 1.0e9 / sec : 0;
    }
}

/* Starts one call of the test (returns when it completed with a NULL stream). */
static strataResult_t cb_issue(const cb_bench_t *b, const cb_test_t *t, int in_place)
{
    size_t         ts   = t->tsize, r = (size_t)b->rank;
    char          *recv = b->callrecv;
    const char    *send = in_place ? recv + r * t->send_ip_off * ts : b->callsend;
    strataResult_t res, res2;
    int            n = b->nranks;

    if (in_place) {
        recv += r * t->recv_ip_off * ts;
    }
    switch (t->coll) {
    case ST_COLL_ALLREDUCE:
        if (t->cz != NULL) {
            return strataAllReduceCompressed(send, recv, t->count, t->dtype, t->redop, t->cz,
                                             b->comm, b->stream);
        }
        return strataAllReduce(send, recv, t->count, t->dtype, t->redop, b->comm, b->stream);
    case ST_COLL_REDUCESCATTER:
        return strataReduceScatter(send, recv, t->count, t->dtype, t->redop, b->comm, b->stream);
    case ST_COLL_ALLGATHER:
        return strataAllGather(send, recv, t->count, t->dtype, b->comm, b->stream);
    case ST_COLL_BROADCAST:
        return strataBroadcast(send, recv, t->count, t->dtype, t->root, b->comm, b->stream);
    case ST_COLL_REDUCE:
        return strataReduce(send, recv, t->count, t->dtype, t->redop, t->root, b->comm,
                            b->stream);
    case ST_COLL_ALLTOALL:
        return strataAlltoAll(send, recv, t->count, t->dtype, b->comm, b->stream);
    case ST_COLL_ALLTOALLV:
        return strataAlltoAllv(send, b->a2av, b->a2av + n, recv, b->a2av + 2 * n,
                               b->a2av + 3 * n, t->dtype, b->comm, b->stream);
    case ST_COLL_GATHER:
        return strataGather(send, recv, t->count, t->dtype, t->root, b->comm, b->stream);
    case ST_COLL_SCATTER:
        return strataScatter(send, recv, t->count, t->dtype, t->root, b->comm, b->stream);
    default:
        /* a ring shift: every rank sends to the next and receives from the previous one */
        res = strataGroupStart();
        if (res != strataSuccess) {
            return res;
        }
        res = strataSend(send, t->count, t->dtype, (b->rank + 1) % n, b->comm, b->stream);
        if (res == strataSuccess) {
            res = strataRecv(recv, t->count, t->dtype, (b->rank - 1 + n) % n, b->comm, b->stream);
        }
        res2 = strataGroupEnd();
        return (res != strataSuccess) ? res : res2;
    }
}

/* Device buffers: waits for the device stream (the gate of the last call opens when it is over),
 * then asks whether a queued call failed after it returned (the communicator's async error). */
static void cb_device_complete(const cb_bench_t *b, const cb_test_t *t)
{
    strataResult_t res, async = strataSuccess;

    if (cb_device_sync(b->device) != 0) {
        fprintf(stderr, "collbench: rank %d: stream_sync of the device stream failed: %s\n",
                b->rank, strataGetLastError(NULL));
        exit(2);
    }
    res = strataCommGetAsyncError(b->comm, &async);
    if (res != strataSuccess) {
        cb_fatal(b, t, "strataCommGetAsyncError", res);
    }
    if (async != strataSuccess && async != strataInProgress) {
        cb_fatal(b, t, "a call queued on the device stream (strataCommGetAsyncError)", async);
    }
}

/* Bytes of a buffer that a call of t may read or write: in place, the receive buffer holds the
 * send buffer too (reduce_scatter's input is count * nranks elements of it). */
static size_t cb_span(const cb_test_t *t)
{
    return ((t->sendcount > t->recvcount) ? t->sendcount : t->recvcount) * t->tsize;
}

/* Device buffers: the inputs and poison cb_prepare wrote into the host mirrors, copied in. */
static void cb_copy_in(const cb_bench_t *b, const cb_test_t *t)
{
    if (cb_device_copy(b->device, b->callsend, b->sendbuf, cb_span(t)) != 0 ||
        cb_device_copy(b->device, b->callrecv, b->recvbuf, cb_span(t)) != 0) {
        fprintf(stderr, "collbench: rank %d: copy of the inputs to the device failed: %s\n",
                b->rank, strataGetLastError(NULL));
        exit(2);
    }
    cb_device_complete(b, t);
}

/* Waits for what was queued on the stream (nothing to do with -z 1 on host buffers). */
static void cb_complete(const cb_bench_t *b, const cb_test_t *t)
{
    strataResult_t res;

    if (b->device != NULL) {
        cb_device_complete(b, t);
    } else if (b->stream != NULL) {
        res = strataStreamSynchronize(b->stream);
        if (res != strataSuccess) {
            cb_fatal(b, t, "strataStreamSynchronize", res);
        }
    }
}

static void cb_allreduce_values(const cb_bench_t *b, void *values, size_t count,
                                strataDataType_t dtype, strataRedOp_t op)
{
    strataResult_t res = strataAllReduce(values, values, count, dtype, op, b->comm, NULL);

    if (res != strataSuccess) {
        cb_fatal(b, NULL, "strataAllReduce (collbench bookkeeping)", res);
    }
}

static void cb_allreduce_scalar(const cb_bench_t *b, void *value, strataDataType_t dtype,
                                strataRedOp_t op)
{
    cb_allreduce_values(b, value, 1, dtype, op);
}

/* Keeps the timed region free of skew from the previous size (nccl-tests' Barrier). */
static void cb_barrier(const cb_bench_t *b)
{
    int32_t one = 1;

    cb_allreduce_scalar(b, &one, strataInt32, strataSum);
}

/* Sets the buffers of one call: inputs where the call reads, poison where it must write (so a
 * block it forgets shows as wrong) and where it must not (non-root recvbuff of reduce). */
static void cb_prepare(const cb_bench_t *b, const cb_test_t *t, const cb_data_t *data,
                       int in_place)
{
    size_t ts = t->tsize, r = (size_t)b->rank;
    char  *in = in_place ? b->recvbuf : b->sendbuf;

    switch (t->coll) {
    case ST_COLL_BROADCAST:
        cb_data_poison(b->recvbuf, t->recvcount * ts);
        if (b->rank == t->root) {
            cb_data_fill(data, t->root, in, 0, t->count);
        }
        break;
    case ST_COLL_ALLGATHER:
    case ST_COLL_GATHER:
        cb_data_poison(b->recvbuf, t->recvcount * ts);
        in += in_place ? r * t->send_ip_off * ts : 0;
        cb_data_fill(data, b->rank, in, r * t->count, t->count);
        break;
    case ST_COLL_SCATTER: /* in place, the input is the receive buffer on every rank */
        cb_data_poison(b->recvbuf, (in_place ? t->sendcount : t->recvcount) * ts);
        if (b->rank == t->root) {
            cb_data_fill(data, t->root, in, 0, t->sendcount);
        }
        break;
    case ST_COLL_ALLTOALLV: { /* block for rank d at its displacement, keyed d * stride + i */
        const size_t *sc = b->a2av, *sd = sc + b->nranks;
        int           d;

        cb_data_poison(b->recvbuf, t->recvcount * ts);
        for (d = 0; d < b->nranks; d++) {
            cb_data_fill(data, b->rank, b->sendbuf + sd[d] * ts, (size_t)d * t->stride, sc[d]);
        }
        break;
    }
    default: /* all_reduce, reduce_scatter, reduce, sendrecv, alltoall: everybody's input at
              * offset 0 (alltoall: block d keyed d * count + i) */
        if (!in_place) {
            cb_data_poison(b->recvbuf, t->recvcount * ts);
        }
        cb_data_fill(data, b->rank, in, 0, t->sendcount);
        break;
    }
}

/* Wrong elements of this rank's output of the call cb_prepare set up. */
static size_t cb_check(const cb_bench_t *b, const cb_test_t *t, const cb_data_t *data,
                       int in_place)
{
    size_t ts = t->tsize, r = (size_t)b->rank, wrong = 0, blk;
    int    n  = b->nranks;

    switch (t->coll) {
    case ST_COLL_ALLREDUCE:
        return cb_data_check_reduce(data, b->recvbuf, 0, t->count);
    case ST_COLL_REDUCESCATTER:
        return cb_data_check_reduce(data, b->recvbuf + (in_place ? r * t->recv_ip_off * ts : 0),
                                    r * t->count, t->count);
    case ST_COLL_ALLGATHER:
        for (blk = 0; blk < (size_t)n; blk++) {
            wrong += cb_data_check_copy(data, (int)blk, b->recvbuf + blk * t->count * ts,
                                        blk * t->count, t->count);
        }
        return wrong;
    case ST_COLL_BROADCAST:
        return cb_data_check_copy(data, t->root, b->recvbuf, 0, t->count);
    case ST_COLL_ALLTOALL: /* block s: what s sent to this rank */
        for (blk = 0; blk < (size_t)n; blk++) {
            wrong += cb_data_check_copy(data, (int)blk, b->recvbuf + blk * t->count * ts,
                                        r * t->count, t->count);
        }
        return wrong;
    case ST_COLL_ALLTOALLV: {
        const size_t *rc = b->a2av + 2 * n, *rd = rc + n;

        for (blk = 0; blk < (size_t)n; blk++) {
            wrong += cb_data_check_copy(data, (int)blk, b->recvbuf + rd[blk] * ts,
                                        r * t->stride, rc[blk]);
        }
        return wrong;
    }
    case ST_COLL_GATHER:
        for (blk = 0; blk < (size_t)n; blk++) {
            const char *at = b->recvbuf + blk * t->count * ts;

            if (b->rank == t->root) {
                wrong += cb_data_check_copy(data, (int)blk, at, blk * t->count, t->count);
            } else if (in_place && blk == r) { /* the rank's input, read in place */
                wrong += cb_data_check_copy(data, b->rank, at, r * t->count, t->count);
            } else { /* strata.h: recvbuff is used only on root */
                wrong += cb_data_check_poison(data, at, t->count);
            }
        }
        return wrong;
    case ST_COLL_SCATTER:
        if (!in_place) {
            return cb_data_check_copy(data, t->root, b->recvbuf, r * t->count, t->count);
        }
        for (blk = 0; blk < (size_t)n; blk++) {
            const char *at = b->recvbuf + blk * t->count * ts;

            if (blk == r || b->rank == t->root) {
                wrong += cb_data_check_copy(data, t->root, at, blk * t->count, t->count);
            } else { /* strata.h: sendbuff is read only on root */
                wrong += cb_data_check_poison(data, at, t->count);
            }
        }
        return wrong;
    case ST_COLL_REDUCE:
        if (b->rank == t->root) {
            return cb_data_check_reduce(data, b->recvbuf, 0, t->count);
        }
        /* strata.h: non-root buffers are never written */
        return in_place ? cb_data_check_copy(data, b->rank, b->recvbuf, 0, t->count)
                        : cb_data_check_poison(data, b->recvbuf, t->count);
    default:
        return cb_data_check_copy(data, (b->rank - 1 + n) % n, b->recvbuf, 0, t->count);
    }
}

/* One call of the test; a failure ends the rank, naming the call as strata.h does. */
static void cb_call(const cb_bench_t *b, const cb_test_t *t, int in_place)
{
    strataResult_t res = cb_issue(b, t, in_place);
    char           call[64];

    if (res != strataSuccess) {
        if (st_coll_info(t->coll)->p2p) {
            snprintf(call, sizeof(call), "strata%s/strata%s group", st_coll_name(ST_COLL_SEND),
                     st_coll_name(ST_COLL_RECV));
        } else {
            snprintf(call, sizeof(call), "strata%s%s", st_coll_name(t->coll),
                     t->cz != NULL ? "Compressed" : "");
        }
        cb_fatal(b, t, call, res);
    }
}

static void cb_run_iters(const cb_bench_t *b, const cb_test_t *t, int in_place, int iters)
{
    int i;

    for (i = 0; i < iters; i++) {
        cb_call(b, t, in_place);
        if (b->device != NULL && b->opts->blocking) {
            cb_complete(b, t); /* -z 1: each call waited for, as nccl-tests' blocking mode */
        }
    }
    cb_complete(b, t);
}

/* The checked call. On device buffers it is ordered by the stream alone (device.c): the producer
 * that writes its inputs, the call and the consumer that reads its result are queued back to
 * back, and one synchronize ends them; so #wrong also tells whether strata kept the stream's
 * order. */
static void cb_checked_call(const cb_bench_t *b, const cb_test_t *t, int in_place)
{
    if (b->device != NULL && cb_device_produce(b->device, cb_span(t)) != 0) {
        fprintf(stderr, "collbench: rank %d: queueing the producer of the inputs failed: %s\n",
                b->rank, strataGetLastError(NULL));
        exit(2);
    }
    cb_call(b, t, in_place);
    if (b->device != NULL && cb_device_consume(b->device, cb_span(t)) != 0) {
        fprintf(stderr, "collbench: rank %d: queueing the consumer of the result failed: %s\n",
                b->rank, strataGetLastError(NULL));
        exit(2);
    }
    cb_complete(b, t);
}

/* nccl-tests' time column: 2 decimals below 100 us, 1 below 10 ms, none above. */
static void cb_format_time(char *buf, size_t len, double usec)
{
    snprintf(buf, len, (usec >= 10000.0) ? "%7.0f" : (usec >= 100.0) ? "%7.1f" : "%7.2f", usec);
}

/* An algorithm name as a number a double holds exactly (its first 6 characters, injective), so
 * that one max all-reduce of key and -key tells whether every rank ran the same algorithm. */
static double cb_algo_key(const char *name)
{
    uint64_t key = 0;
    size_t   i;

    for (i = 0; i < 6 && name[i] != '\0'; i++) {
        key = key << 8 | (unsigned char)name[i];
    }
    return (double)key;
}

/* --phases, on every rank, right after the last timed call completed and before any other call on
 * the communicator: strataCommGetPhaseTimes describes the last collective only. */
static void cb_phases_read(const cb_bench_t *b, const cb_test_t *t, cb_phases_t *ph)
{
    strataPhaseTimes_t times;
    strataResult_t     res;
    double             v[9]; /* total, seconds[3], bytes[3], key, -key */
    int                i;

    memset(&times, 0, sizeof(times));
    res = strataCommGetPhaseTimes(b->comm, &times);
    if (res != strataSuccess) {
        cb_fatal(b, t, "strataCommGetPhaseTimes", res);
    }
    times.algorithm[sizeof(times.algorithm) - 1] = '\0';
    v[0] = times.totalSeconds;
    for (i = 0; i < 3; i++) {
        v[1 + i] = times.seconds[i];
        v[4 + i] = (double)times.bytes[i];
    }
    v[7] = cb_algo_key(times.algorithm);
    v[8] = -v[7];
    cb_allreduce_values(b, v, 9, strataFloat64, strataMax);

    snprintf(ph->algorithm, sizeof(ph->algorithm), "%s", times.algorithm);
    ph->mixed = v[7] != -v[8];
    ph->total = v[0];
    for (i = 0; i < 3; i++) {
        ph->seconds[i] = v[1 + i];
        ph->bytes[i]   = v[4 + i];
    }
}

/* One '#' line under the row (rank 0). hier: each phase's time and bandwidth ('*' on the longest):
 * the intra-node ones over the collective's size, the inter-node one as busbw over the nodes, the
 * bytes the busiest rank sent over its rail per second of that phase; its label names the
 * inter-node step of the collective (inter-AR: the ring's all-reduce; inter-RS, inter-AG: that
 * half of the ring; inter-BC, inter-RD: the chain of broadcast, reduce); every algorithm: the
 * total. */
static void cb_phases_print(st_coll_type_t coll, const cb_phases_t *ph, int in_place)
{
    const char *label[3] = {"intra-RS", "inter-AR", "intra-AG"};
    char                     timestr[32], tag[16];
    double                   gbs;
    int                      i, slow = 0;

    printf("#  %12s %s%s:", in_place ? "in-place" : "out-of-place", ph->algorithm,
           ph->mixed ? " (not on every rank)" : "");
    label[1] = coll == ST_COLL_REDUCESCATTER ? "inter-RS" : coll == ST_COLL_ALLGATHER ? "inter-AG"
               : coll == ST_COLL_BROADCAST ? "inter-BC" : coll == ST_COLL_REDUCE ? "inter-RD"
               : coll == ST_COLL_ALLTOALL ? "inter-A2A" : "inter-AR";
    if (strcmp(ph->algorithm, "hier") == 0) {
        for (i = 1; i < 3; i++) {
            slow = (ph->seconds[i] > ph->seconds[slow]) ? i : slow;
        }
        for (i = 0; i < 3; i++) {
            gbs = (ph->seconds[i] > 0) ? ph->bytes[i] / 1.0e9 / ph->seconds[i] : 0;
            snprintf(tag, sizeof(tag), "%s%s", label[i], (i == slow) ? "*" : "");
            cb_format_time(timestr, sizeof(timestr), ph->seconds[i] * 1.0e6);
            printf(" %-10s%s us %6.2f GB/s%s |", tag, timestr, gbs, (i == 1) ? " busbw" : "");
        }
    }
    cb_format_time(timestr, sizeof(timestr), ph->total * 1.0e6);
    printf(" total %s us\n", timestr);
}

/* The inputs of a test: data.c's draws, the coded ones for a compressed row. */
static void cb_data_for(const cb_bench_t *b, const cb_test_t *t, uint64_t seed, cb_data_t *data)
{
    if (t->coded) {
        cb_data_init_coded(data, t->dtype, t->op, b->nranks, seed);
    } else {
        cb_data_init(data, t->dtype, t->op, b->nranks, seed);
    }
}

/* iters timed calls from a barrier on: this rank's seconds per call. */
static double cb_time_iters(const cb_bench_t *b, const cb_test_t *t, int in_place)
{
    double t0;

    cb_barrier(b);
    t0 = cb_now();
    cb_run_iters(b, t, in_place, b->opts->iters);
    return (cb_now() - t0) / b->opts->iters;
}

/* --compress: the checked call's wrong elements (none and topk:1 must be exact, the other codecs
 * within cb_data_check_bound's bound), plus 1 on a rank whose result is not bitwise rank 0's: a
 * 64-bit FNV-1a hash of the result, rank 0's reaching every rank through a sum all-reduce (the
 * others add 0), which every -A algorithm runs, unlike a broadcast; a second one counts the ranks
 * that differ, for rank 0's line under the row. */
static uint64_t cb_check_coded(cb_bench_t *b, const cb_test_t *t, const cb_data_t *data,
                               int in_place)
{
    const strataCompressParams_t *p   = &b->opts->codec;
    const unsigned char          *res = (const unsigned char *)b->recvbuf;
    uint64_t                      wrong, h = 1469598103934665603ULL, h0;
    int32_t                       differ;
    size_t                        i;

    if (p->codec == strataCodecNone || (p->codec == strataCodecTopk && p->density >= 1.0)) {
        wrong = cb_data_check_reduce(data, b->recvbuf, 0, t->count);
    } else {
        wrong = cb_data_check_bound(data, b->recvbuf, 0, t->count,
                                    cb_data_codec_eps(p, t->dtype), b->nnodes, b->node_max, NULL);
    }
    for (i = 0; i < t->count * t->tsize; i++) {
        h = (h ^ res[i]) * 1099511628211ULL;
    }
    h0 = (b->rank == 0) ? h : 0;
    cb_allreduce_scalar(b, &h0, strataUint64, strataSum);
    differ = h != h0;
    wrong += (uint64_t)differ;
    cb_allreduce_scalar(b, &differ, strataInt32, strataSum);
    b->differ[in_place] = differ;
    return wrong;
}

/* One half of a row: out of place or in place. With --phases, ph receives where its time went.
 * A compressed row times the plain loop first, then the compressed one on the same inputs (in
 * place, the plain loop overwrote them: they are written again, outside the timing). */
static void cb_bench_one(cb_bench_t *b, cb_test_t *t, int in_place, cb_phases_t *ph)
{
    cb_data_t          data;
    cb_phases_t        own, *rd = b->opts->phases ? ph : &own;
    strataCompressor_t cz     = t->cz;
    double             sec[2] = {0, 0}, algbw, busbw; /* the row's calls; the plain ones */
    uint64_t           wrong  = 0;
    strataResult_t     res;
    char               timestr[32];

    /* defined inputs for the timed calls too, so no NaN or subnormal skews them */
    cb_data_for(b, t, b->rep, &data);
    cb_prepare(b, t, &data, in_place);
    if (b->device != NULL) {
        cb_copy_in(b, t);
    }
    if (t->coded) {
        t->cz  = NULL;
        sec[1] = cb_time_iters(b, t, in_place);
        t->cz  = cz;
        cb_prepare(b, t, &data, in_place);
    }
    sec[0] = cb_time_iters(b, t, in_place);
    if (b->rank == 0 && cb_algo_forced() != NULL) {
        strataPhaseTimes_t times; /* local: what the last call ran on this rank */

        memset(&times, 0, sizeof(times));
        if (strataCommGetPhaseTimes(b->comm, &times) == strataSuccess) {
            times.algorithm[sizeof(times.algorithm) - 1] = '\0';
            snprintf(b->ran[in_place], sizeof(b->ran[in_place]), "%s", times.algorithm);
        }
    }
    /* the wire column: 0 on one node, where nothing crosses a network (and with one rank no
     * call records phase times) */
    if (b->opts->phases || (t->coded && b->nnodes > 1)) {
        cb_phases_read(b, t, rd);
    }
    if (t->coded && b->nnodes > 1 && rd->bytes[1] > b->wire) {
        b->wire = rd->bytes[1];
    }
    cb_allreduce_values(b, sec, 2, strataFloat64, strataMax);
    if (t->coded) {
        b->speedup[in_place] = (sec[0] > 0) ? sec[1] / sec[0] : 0;
    }

    if (b->opts->check) {
        cb_data_for(b, t, ++b->rep * 0x2545f4914f6cdd1dULL, &data);
        cb_prepare(b, t, &data, in_place);
        if (t->cz != NULL) { /* the first call of a fresh residual: what the bound is about */
            res = strataCompressorReset(t->cz);
            if (res != strataSuccess) {
                cb_fatal(b, t, "strataCompressorReset", res);
            }
        }
        cb_checked_call(b, t, in_place);
        wrong = t->coded ? cb_check_coded(b, t, &data, in_place) : cb_check(b, t, &data, in_place);
        cb_allreduce_scalar(b, &wrong, strataUint64, strataSum);
        b->wrong_total += wrong;
        if (wrong != 0) {
            b->status = 1;
        }
    }

    cb_test_bw(t, b->nranks, sec[0], &algbw, &busbw);
    b->bw_sum += busbw;
    b->bw_count++;
    if (b->rank == 0) {
        cb_format_time(timestr, sizeof(timestr), sec[0] * 1.0e6);
        if (b->opts->check) {
            printf("  %7s  %6.2f  %6.2f  %5g", timestr, algbw, busbw, (double)wrong);
        } else {
            printf("  %7s  %6.2f  %6.2f  %5s", timestr, algbw, busbw, "N/A");
        }
    }
}

/* --compress: a row of all-reduce gets its compressor (t->cz, fresh, for its count and datatype)
 * and its columns start over; count 0 runs uncompressed (a compressor holds 1 element or more).
 * Returns t->coded. */
static int cb_coded_begin(cb_bench_t *b, cb_test_t *t)
{
    strataResult_t res;

    t->cz    = NULL;
    t->coded = b->opts->compress != NULL && t->coll == ST_COLL_ALLREDUCE && t->count > 0;
    b->wire  = 0;
    b->speedup[0] = b->speedup[1] = 0;
    b->differ[0]  = b->differ[1]  = 0;
    if (t->coded) {
        res = strataCompressorCreate(&t->cz, &b->opts->codec, t->count, t->dtype);
        if (res != strataSuccess) {
            cb_fatal(b, t, "strataCompressorCreate", res);
        }
        /* writing the residual's zeros maps its pages now, outside the timing (a training run's
         * compressor has them from its first step; the timed loop would pay the page faults) */
        res = strataCompressorReset(t->cz);
        if (res != strataSuccess) {
            cb_fatal(b, t, "strataCompressorReset", res);
        }
    }
    return t->coded;
}

static void cb_coded_end(cb_bench_t *b, cb_test_t *t)
{
    strataResult_t res = strataCompressorDestroy(t->cz);

    if (res != strataSuccess) {
        cb_fatal(b, t, "strataCompressorDestroy", res);
    }
    t->cz = NULL;
}

/* nccl-tests' warmup at one size; with --compress the compressed calls too, with a compressor of
 * their own. */
static void cb_warmup(cb_bench_t *b, cb_test_t *t)
{
    cb_run_iters(b, t, 0, b->opts->warmup);
    if (cb_coded_begin(b, t)) {
        cb_run_iters(b, t, 0, b->opts->warmup);
        cb_coded_end(b, t);
    }
}

static size_t cb_next_size(const cb_opts_t *opts, size_t size)
{
    size_t next = (opts->stepfactor > 1) ? size * (size_t)opts->stepfactor
                                         : size + opts->stepbytes;

    return (next <= size) ? 0 : next; /* 0: overflow, stop */
}

/* Under a row where the algorithm -A or STRATA_ALGO forced did not run (it does not apply to
 * that collective or size), what did: a '#' line, which parsers of the rows skip. */
static void cb_print_ran(cb_bench_t *b, const cb_test_t *t)
{
    const char *forced = cb_algo_forced();
    const char *ran    = b->ran[0];

    if (forced == NULL || st_coll_info(t->coll)->p2p || ran[0] == '\0') {
        return;
    }
    if (strcmp(ran, forced) != 0 || strcmp(b->ran[1], forced) != 0) {
        if (strcmp(ran, b->ran[1]) == 0) {
            printf("#  ^ ran %s, not %s: %s\n", ran, forced, cb_algo_scope(forced));
        } else {
            printf("#  ^ ran %s out of place, %s in place, not %s: %s\n", ran, b->ran[1],
                   forced, cb_algo_scope(forced));
        }
    }
    b->ran[0][0] = b->ran[1][0] = '\0';
}

/* nccl-tests' TimeTest: warm up at the largest and the smallest size, then one row per size. */
static void cb_time_test(cb_bench_t *b, cb_test_t *t)
{
    const cb_opts_t *opts = b->opts;
    unsigned char    scalar[16];
    strataResult_t   res;
    size_t           size;
    cb_phases_t      ph[2];

    t->tsize = cb_dtype_size(t->dtype);
    t->redop = (t->op >= 0 && t->op < CB_OP_PREMULSUM) ? (strataRedOp_t)t->op : strataSum;
    if (t->op == CB_OP_PREMULSUM) {
        cb_data_premul_scalar(t->dtype, b->rank, scalar);
        res = strataRedOpCreatePreMulSum(&t->redop, scalar, t->dtype, strataScalarHostImmediate,
                                         b->comm);
        if (res != strataSuccess) {
            cb_fatal(b, t, "strataRedOpCreatePreMulSum", res);
        }
    }

    cb_test_shape(b, t, opts->maxbytes);
    cb_warmup(b, t);
    cb_test_shape(b, t, opts->minbytes);
    cb_warmup(b, t);

    for (size = opts->minbytes; size != 0 && size <= opts->maxbytes;
         size = cb_next_size(opts, size)) {
        cb_test_shape(b, t, size);
        cb_coded_begin(b, t);
        if (b->rank == 0) {
            printf("%12zu  %12zu  %8s  %6s  %6i", t->bytes, t->count, cb_dtype_name(t->dtype),
                   cb_op_name(t->op), t->root);
        }
        cb_bench_one(b, t, 0, &ph[0]);
        if (cb_has_in_place(t->coll)) {
            cb_bench_one(b, t, 1, &ph[1]);
        } else if (b->rank == 0) {
            printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
            snprintf(b->ran[1], sizeof(b->ran[1]), "%s", b->ran[0]);
        }
        if (t->coded) {
            cb_coded_end(b, t);
        }
        if (b->rank == 0) {
            if (t->coded) {
                printf("  %10.0f  %7.2f  %7.2f\n", b->wire, b->speedup[0], b->speedup[1]);
            } else if (opts->compress != NULL) {
                printf("  %10s  %7s  %7s\n", "N/A", "N/A", "N/A");
            } else {
                printf("\n");
            }
            for (int h = 0; h < 2; h++) {
                if (b->differ[h] != 0) {
                    printf("#  ^ %s: the result of %d rank%s is not bitwise rank 0's\n",
                           h ? "in-place" : "out-of-place", b->differ[h],
                           b->differ[h] == 1 ? "" : "s");
                }
            }
            cb_print_ran(b, t);
            if (opts->phases) {
                cb_phases_print(t->coll, &ph[0], 0);
                if (cb_has_in_place(t->coll)) {
                    cb_phases_print(t->coll, &ph[1], 1);
                }
            }
            fflush(stdout);
        }
    }

    if (t->op == CB_OP_PREMULSUM) {
        res = strataRedOpDestroy(t->redop, b->comm);
        if (res != strataSuccess) {
            cb_fatal(b, t, "strataRedOpDestroy", res);
        }
    }
}

/* What the --phases lines under the rows say (once per collective, under the table's header). */
static void cb_print_phases_legend(const cb_bench_t *b)
{
    printf("# --phases: under each row, the last timed call of each half, per phase its slowest "
           "rank (strataCommGetPhaseTimes)\n"
           "#   hier: intra-RS copy-in and intra-node reduce-scatter, GB/s = size/time; inter-XX "
           "inter-node step of the shards\n"
           "#   over N = %d nodes (AR ring all-reduce, RS/AG half ring, BC/RD chain), busbw = bytes "
           "sent / time; intra-AG intra-node all-gather, size/time\n"
           "#   * marks the longest phase (the bottleneck); phases of successive chunks overlap, "
           "so they may add up to more than total\n", b->nnodes);
}

/* nccl-tests' column heads; --compress adds wire and the two speedups after them. */
static void cb_print_table_header(const cb_bench_t *b)
{
    int coded = b->opts->compress != NULL;

    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place%s\n",
           "", "", "", "", "", coded ? "                            compressed" : "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size", "count",
           "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong");
    printf(coded ? "  %10s  %7s  %7s\n" : "\n", "wire", "speedup", "speedup");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)");
    printf(coded ? "  %5s  %10s  %7s  %7s\n" : "\n", "", "(B)", "(oop)", "(ip)");
}

/* --compress: what the rows measure and check (once per table, under the collective's header). */
static void cb_print_compress_legend(const cb_bench_t *b)
{
    const strataCompressParams_t *p = &b->opts->codec;
    char                          spec[64] = "?";
    int                           exact;

    exact = p->codec == strataCodecNone || (p->codec == strataCodecTopk && p->density >= 1.0);
    if (strataCompressFormat(p, spec, sizeof(spec)) != strataSuccess) {
        snprintf(spec, sizeof(spec), "%s", b->opts->compress);
    }
    printf("# Compression: %s (strataAllReduceCompressed, error feedback %s) over %d node%s of at "
           "most %d rank%s%s\n", spec, p->errorFeedback ? "on" : "off", b->nnodes,
           b->nnodes == 1 ? "" : "s", b->node_max, b->node_max == 1 ? "" : "s",
           b->nnodes == 1 ? ": on one node nothing is compressed (strataAllReduce runs)" : "");
    printf("#   time, algbw, busbw: the compressed calls, a fresh compressor per size; wire: bytes "
           "the busiest rank sent over the network\n#   in the last call's inter-node phase "
           "(strataCommGetPhaseTimes bytes[1]); speedup: plain strataAllReduce time (same "
           "iterations, same inputs) / compressed time\n");
    if (b->opts->check) {
        if (exact) {
            printf("#   #wrong: elements other than the exact result (%s is exact), + 1 per rank "
                   "whose result is not bitwise rank 0's\n", spec);
        } else {
            printf("#   #wrong: elements with |got - exact| > eps x (N x A + S), N = %d nodes, "
                   "A = %d x max |input|, S = max |exact|, eps %s; + 1 per rank whose result "
                   "is not bitwise rank 0's\n", b->nnodes, b->node_max,
                   p->codec == strataCodecFp16   ? "2^-11 + u"
                   : p->codec == strataCodecBf16 ? "2^-8 + u"
                   : p->codec == strataCodecInt8 ? "1/254 + u"
                                                 : "1");
            if (p->codec == strataCodecFp16 || p->codec == strataCodecBf16 ||
                p->codec == strataCodecInt8) {
                printf("#     (u, the datatype's unit roundoff: float 2^-24, half 2^-11, "
                       "bfloat16 2^-8)\n");
            }
        }
    }
}

/* Every selected datatype x op x root of one collective, between nccl-tests' header and footer. */
static void cb_bench_coll(cb_bench_t *b, st_coll_type_t coll)
{
    const cb_opts_t      *opts = b->opts;
    const st_coll_info_t *info = st_coll_info(coll);
    cb_test_t             t;
    int                   dt, op, root, root_lo, root_hi;

    if (b->rank == 0) {
        printf("#\n# Collective test starting: %s_perf\n", info->short_name);
        if (opts->phases) {
            cb_print_phases_legend(b);
        }
        if (coll == ST_COLL_ALLTOALL || coll == ST_COLL_ALLTOALLV) {
            printf("# %s is never in place in strata: the in-place columns say N/A\n",
                   info->short_name);
        }
        if (coll == ST_COLL_ALLTOALLV) {
            printf("# alltoallv load: --skew %g: each rank sends size bytes in all, %g x the mean "
                   "per-pair count to rank 0, the rest evenly to the others;\n# count: the mean "
                   "per rank pair; busbw: the most bytes any rank sends to or receives from the "
                   "other ranks, over the time\n", opts->skew, opts->skew);
        }
        if (opts->compress != NULL) {
            cb_print_compress_legend(b);
        }
        cb_print_table_header(b);
        fflush(stdout);
    }
    b->wrong_total = 0;
    b->bw_sum      = 0;
    b->bw_count    = 0;
    root_lo        = info->rooted ? ((opts->root < 0) ? 0 : opts->root) : -1;
    root_hi        = info->rooted ? ((opts->root < 0) ? b->nranks - 1 : opts->root) : -1;

    for (dt = 0; dt < strataNumTypes; dt++) {
        if (!(opts->dtypes & (1u << dt))) {
            continue;
        }
        for (op = 0; op < CB_NUM_OPS; op++) {
            if (info->reduces && !(opts->ops & (1u << op))) {
                continue;
            }
            for (root = root_lo; root <= root_hi; root++) {
                memset(&t, 0, sizeof(t));
                t.coll  = coll;
                t.dtype = (strataDataType_t)dt;
                t.op    = info->reduces ? op : CB_OP_NONE;
                t.root  = root;
                cb_time_test(b, &t);
            }
            if (!info->reduces) {
                break; /* one pass: the op does not apply */
            }
        }
    }

    if (b->rank == 0) {
        printf("# Out of bounds values : %llu %s\n", (unsigned long long)b->wrong_total,
               b->wrong_total ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g\n", b->bw_count ? b->bw_sum / b->bw_count : 0.0);
        if (opts->device == CB_DEVICE_SIM) {
            printf("# device sim: times and bandwidths above are of the simulated device on the "
                   "CPU, never GPU performance\n");
        }
        printf("#\n# Collective test concluded: %s_perf\n", info->short_name);
        fflush(stdout);
    }
}

/* This process's STRATA_ALGO, as strata reads it ("auto" when unset or empty). */
static const char *cb_algo_env(void)
{
    const char *algo = getenv("STRATA_ALGO");

    return (algo != NULL && algo[0] != '\0') ? algo : "auto";
}

/* nccl-tests' preamble: the parameters, then one line per rank with its host (node) and pid. */
static void cb_print_header(const cb_bench_t *b)
{
    const cb_opts_t *opts = b->opts;
    cb_rankinfo_t    mine, *all;
    strataResult_t   res;
    int              version = 0, r, q, node, local, nnodes = 0, *node_of;
    const char      *hostid = getenv("STRATA_HOSTID");
    const char      *algo   = getenv("STRATA_ALGO"); /* main() put -A there */

    memset(&mine, 0, sizeof(mine));
    mine.pid    = (int32_t)getpid();
    mine.device = (b->device != NULL) ? cb_device_ordinal(b->device) : -1;
    /* the node name strata uses: STRATA_HOSTID, else the host name */
    if (hostid != NULL && hostid[0] != '\0') {
        snprintf(mine.host, sizeof(mine.host), "%s", hostid);
    } else if (gethostname(mine.host, sizeof(mine.host) - 1) != 0) {
        snprintf(mine.host, sizeof(mine.host), "unknown");
    }
    all     = calloc((size_t)b->nranks, sizeof(*all));
    node_of = calloc((size_t)b->nranks, sizeof(*node_of));
    if (all == NULL || node_of == NULL) {
        fprintf(stderr, "collbench: rank %d: out of memory\n", b->rank);
        exit(2);
    }
    /* an all-reduce (sum over a table that is zero but in each rank's own row), not an
     * all-gather: every -A algorithm runs all-reduce, so this exchange never makes the library
     * say that a forced algorithm does not apply to a collective the user did not ask for */
    all[b->rank] = mine;
    res = strataAllReduce(all, all, (size_t)b->nranks * sizeof(mine), strataUint8, strataSum,
                          b->comm, NULL);
    if (res != strataSuccess) {
        cb_fatal(b, NULL, "strataAllReduce (rank information)", res);
    }

    if (b->rank == 0) {
        /* nodes numbered by first appearance in rank order */
        for (r = 0; r < b->nranks; r++) {
            for (q = 0; q < r && strcmp(all[q].host, all[r].host) != 0; q++) {
            }
            node_of[r] = (q < r) ? node_of[q] : nnodes++;
        }
        strataGetVersion(&version);
        printf("# collbench: strata %d.%d.%d\n", version / 10000, (version / 100) % 100,
               version % 100);
        printf("# device: %s\n", cb_device_caption(opts->device));
        printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
               "iters: %d agg iters: 1 validation: %d graph: 0\n",
               opts->minbytes, opts->maxbytes,
               (opts->stepfactor > 1) ? (size_t)opts->stepfactor : opts->stepbytes,
               (opts->stepfactor > 1) ? "factor" : "bytes", opts->warmup, opts->iters,
               opts->check);
        printf("# nRanks %d nNodes %d\n", b->nranks, nnodes);
        printf("# Algorithm: %s (%s)%s%s\n", cb_algo_env(),
               (opts->algo != NULL)                ? "STRATA_ALGO, set by -A"
               : (algo != NULL && algo[0] != '\0') ? "STRATA_ALGO"
                                                   : "default: strata chooses per call",
               cb_algo_forced() != NULL ? "; " : "",
               cb_algo_forced() != NULL ? cb_algo_scope(cb_algo_forced()) : "");
        if (b->device != NULL) {
            printf("# Buffers: device memory from %s; inputs filled on the host and copied "
                   "in, results copied out to check\n", opts->mem_alloc ? "strataMemAlloc "
                   "(shareable: the zero-copy intra-node path)" : "the device layer's mem_alloc");
            if (opts->check) {
                printf("# Stream order: each checked call is queued as %s (a copy of the "
                       "inputs, one of the result) with a single stream_sync\n",
                       cb_device_order(b->device));
            }
            if (opts->blocking) {
                printf("# Blocking Enabled: NULL stream (the legacy default stream), each call "
                       "followed by stream_sync\n");
            } else {
                printf("# Stream: calls on a device stream of collbench (the user's stream), "
                       "timed from the first call to stream_sync after the last\n");
            }
        } else {
            printf("# Buffers: %s\n", opts->mem_alloc ? "strataMemAlloc (node-shared memory, "
                   "zero-copy intra-node path)" : "malloc");
            if (opts->blocking) {
                printf("# Blocking Enabled: NULL stream, every call returns when complete\n");
            } else {
                printf("# Stream: calls queued on a strata host stream, synchronized per size\n");
            }
        }
        printf("#\n# Using devices\n");
        for (r = 0; r < b->nranks; r++) {
            node = node_of[r];
            for (q = 0, local = 0; q < r; q++) {
                local += node_of[q] == node;
            }
            all[r].host[CB_HOST_LEN - 1] = '\0';
            printf("#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s] node %d\n", r,
                   (int)all[r].pid, all[r].host, all[r].device >= 0 ? (int)all[r].device : local,
                   cb_device_name(opts->device), node);
        }
        fflush(stdout);
    }
    free(node_of);
    free(all);
}

int cb_rank_main(const cb_opts_t *opts, int rank, int nranks, const strataUniqueId *id)
{
    cb_bench_t     b;
    strataResult_t res;
    int            coll;

    if (opts->topo) {
        return cb_topo_rank_main(opts, rank, nranks, id);
    }
    if (opts->fab_mode != CB_FAB_NONE) {
        return cb_fabric_rank_main(opts, rank, nranks, id);
    }
    memset(&b, 0, sizeof(b));
    b.opts   = opts;
    b.rank   = rank;
    b.nranks = nranks;
    b.rep    = 1;

    if (opts->root >= nranks) {
        if (rank == 0) {
            fprintf(stderr, "collbench: root %d out of range for %d ranks\n", opts->root, nranks);
        }
        return 2;
    }
    if (opts->skew > nranks) {
        if (rank == 0) {
            fprintf(stderr, "collbench: --skew %g is more than the %d ranks: rank 0 cannot "
                    "receive more than everything (1 <= F <= nranks)\n", opts->skew, nranks);
        }
        return 2;
    }
    b.a2av = calloc(4 * (size_t)nranks, sizeof(*b.a2av));
    if (b.a2av == NULL) {
        fprintf(stderr, "collbench: rank %d: out of memory\n", rank);
        return 2;
    }
    /* the communicator's device is the one current at init */
    if (opts->device != CB_DEVICE_HOST && cb_device_open(opts, rank, &b.device) != 0) {
        return 2;
    }
    res = strataCommInitRank(&b.comm, nranks, *id, rank);
    if (res != strataSuccess) {
        cb_fatal(&b, NULL, "strataCommInitRank", res);
    }
    if (cb_spread_rank >= 0) {
        cb_spread(cb_spread_rank); /* init's wake-ups may have put the ranks on one CPU */
    }
    if (opts->phases || opts->compress != NULL) {
        int32_t node_max; /* --compress's bound: the ranks of the largest node */

        res = strataCommTopoRank(b.comm, NULL, &b.nnodes, NULL, &b.node_max);
        if (res != strataSuccess) {
            cb_fatal(&b, NULL, "strataCommTopoRank", res);
        }
        node_max = b.node_max;
        cb_allreduce_scalar(&b, &node_max, strataInt32, strataMax);
        b.node_max = node_max;
    }
    if (b.device != NULL) {
        b.stream = cb_device_stream(b.device);
    } else if (!opts->blocking) {
        res = strataStreamCreate(&b.stream);
        if (res != strataSuccess) {
            cb_fatal(&b, NULL, "strataStreamCreate", res);
        }
    }

    /* the largest buffer any collective needs is maxbytes (nccl-tests' sizes never exceed it),
     * but for alltoallv's rank 0, which receives up to skew x maxbytes, plus the rounding of
     * cb_a2av_load (under one element per sender) */
    b.bufbytes = opts->maxbytes;
    if (opts->colls & (1u << ST_COLL_ALLTOALLV)) {
        b.bufbytes = (size_t)(opts->skew * (double)opts->maxbytes) + (size_t)nranks * 8;
    }
    b.bufbytes = (b.bufbytes + 4095) & ~(size_t)4095;
    if (b.bufbytes == 0) {
        b.bufbytes = 4096;
    }
    if (b.device != NULL) {
        if (cb_device_alloc(b.device, opts, rank, b.bufbytes, &b.callsend, &b.callrecv,
                            &b.sendbuf, &b.recvbuf) != 0) {
            exit(2);
        }
    } else if (opts->mem_alloc) {
        res = strataMemAlloc((void **)&b.sendbuf, b.bufbytes);
        if (res == strataSuccess) {
            res = strataMemAlloc((void **)&b.recvbuf, b.bufbytes);
        }
        if (res != strataSuccess) {
            char what[64];

            snprintf(what, sizeof(what), "strataMemAlloc (2 x %zu bytes; lower -e)", b.bufbytes);
            cb_fatal(&b, NULL, what, res);
        }
    } else if (posix_memalign((void **)&b.sendbuf, 4096, b.bufbytes) != 0 ||
               posix_memalign((void **)&b.recvbuf, 4096, b.bufbytes) != 0) {
        fprintf(stderr, "collbench: rank %d: cannot allocate 2 x %zu bytes (lower -e)\n", rank,
                b.bufbytes);
        exit(2);
    }
    /* touch every page now, not inside the first timed call */
    memset(b.sendbuf, 0, b.bufbytes);
    memset(b.recvbuf, 0, b.bufbytes);
    if (b.device == NULL) {
        b.callsend = b.sendbuf;
        b.callrecv = b.recvbuf;
    }

    cb_print_header(&b);
    for (coll = 0; coll < CB_NUM_COLLS; coll++) {
        if (opts->colls & (1u << cb_colls[coll])) {
            cb_bench_coll(&b, cb_colls[coll]);
        }
    }
    if (rank == 0) {
        printf("#\n");
        fflush(stdout);
    }

    if (b.stream != NULL && b.device == NULL) {
        res = strataStreamDestroy(b.stream);
        if (res != strataSuccess) {
            cb_fatal(&b, NULL, "strataStreamDestroy", res);
        }
    }
    res = strataCommDestroy(b.comm);
    b.comm = NULL;
    if (res != strataSuccess) {
        cb_fatal(&b, NULL, "strataCommDestroy", res);
    }
    /* after the communicator that may have mapped them is gone */
    if (b.device != NULL) {
        cb_device_close(b.device);
    } else if (opts->mem_alloc) {
        res = strataMemFree(b.sendbuf);
        if (res == strataSuccess) {
            res = strataMemFree(b.recvbuf);
        }
        if (res != strataSuccess) {
            cb_fatal(&b, NULL, "strataMemFree", res);
        }
    } else {
        free(b.sendbuf);
        free(b.recvbuf);
    }
    free(b.a2av);
    return b.status;
}
