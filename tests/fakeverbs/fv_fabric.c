/* fakeverbs: the shared fabric segment (creation, lock, reclaim of dead processes, ports and
 * LIDs), completion/async event delivery across processes, configuration and logging. */
#define _GNU_SOURCE
#include "fv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>

struct fv_config fv_cfg;
struct fv_seg *fv_seg;

static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static int attach_count;
static pid_t attach_pid;
static char seg_path[256];

double fv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void fv_log(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(buf) - 2)
        n = sizeof(buf) - 2;
    buf[n++] = '\n';
    /* One write so that lines of several processes do not interleave. */
    char line[600];
    int m = snprintf(line, sizeof(line), "fakeverbs[%d]: %.*s", (int)getpid(), n, buf);
    if (m > 0 && write(2, line, (size_t)(m < (int)sizeof(line) ? m : (int)sizeof(line) - 1)) < 0) {
        /* nothing to do: stderr is gone */
    }
}

static uint64_t parse_u64(const char *s, uint64_t dflt)
{
    if (!s || !*s)
        return dflt;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s)
        return dflt;
    switch (*end) {  /* accept K/M/G suffixes for sizes */
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    default: break;
    }
    return v;
}

/* FAKEVERBS_FAULTS: send_err=<status>@<n>,drop_qp@<n>,reg_fail@<n>. Unknown items are reported
 * and ignored rather than failing the open: a typo should be visible, not fatal. */
static void parse_faults(const char *s)
{
    if (!s)
        return;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *at = strchr(tok, '@');
        uint64_t n = at ? parse_u64(at + 1, 0) : 0;
        if (!at || n == 0) {
            fv_log("FAKEVERBS_FAULTS: ignoring '%s' (want name@n, n >= 1)", tok);
            continue;
        }
        *at = '\0';
        if (strncmp(tok, "send_err=", 9) == 0) {
            int st = atoi(tok + 9);
            if (st <= 0 || st > IBV_WC_TM_RNDV_INCOMPLETE) {
                fv_log("FAKEVERBS_FAULTS: bad status in send_err=%s", tok + 9);
                continue;
            }
            fv_cfg.send_err_status = st;
            fv_cfg.send_err_at = n;
        } else if (strcmp(tok, "drop_qp") == 0) {
            fv_cfg.drop_qp_at = n;
        } else if (strcmp(tok, "reg_fail") == 0) {
            fv_cfg.reg_fail_at = n;
        } else {
            fv_log("FAKEVERBS_FAULTS: unknown fault '%s'", tok);
        }
    }
}

void fv_read_config(void)
{
    memset(&fv_cfg, 0, sizeof(fv_cfg));
    fv_cfg.debug = getenv("FAKEVERBS_DEBUG") && atoi(getenv("FAKEVERBS_DEBUG")) > 0;
    uint64_t nd = parse_u64(getenv("FAKEVERBS_NDEV"), 2);
    fv_cfg.ndev = nd > FV_MAX_DEV ? FV_MAX_DEV : (int)nd;
    const char *link = getenv("FAKEVERBS_LINK");
    fv_cfg.eth = link && (strcmp(link, "eth") == 0 || strcmp(link, "roce") == 0);
    fv_cfg.max_msg = parse_u64(getenv("FAKEVERBS_MAX_MSG"), 1ull << 30);
    if (fv_cfg.max_msg == 0 || fv_cfg.max_msg > 0xffffffffull)
        fv_cfg.max_msg = 1ull << 30;
    const char *ts = getenv("FAKEVERBS_TIME_SCALE");
    fv_cfg.time_scale = ts ? strtod(ts, NULL) : 1.0;
    if (!(fv_cfg.time_scale > 0) || fv_cfg.time_scale > 1e6)
        fv_cfg.time_scale = 1.0;
    fv_cfg.scramble = getenv("FAKEVERBS_SCRAMBLE") && atoi(getenv("FAKEVERBS_SCRAMBLE")) > 0;
    fv_cfg.keep = getenv("FAKEVERBS_KEEP") && atoi(getenv("FAKEVERBS_KEEP")) > 0;
    const char *down = getenv("FAKEVERBS_PORT_DOWN");
    if (down) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", down);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            int k;
            if (sscanf(t, "fake%d", &k) == 1 && k >= 0 && k < FV_MAX_DEV)
                fv_cfg.port_down |= 1u << k;
        }
    }
    parse_faults(getenv("FAKEVERBS_FAULTS"));
}

int fv_fabric_path(char *buf, size_t len, const char *fabric)
{
    char dflt[32];
    if (!fabric || !*fabric) {
        snprintf(dflt, sizeof(dflt), "%u", (unsigned)getuid());
        fabric = dflt;
    }
    /* The name becomes a file name: no slashes, no dot-dot games. */
    for (const char *p = fabric; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || (*p == '.' && p != fabric)))
            return EINVAL;
    int n = snprintf(buf, len, "/dev/shm/fakeverbs-%s", fabric);
    return n < 0 || (size_t)n >= len ? ENAMETOOLONG : 0;
}

void fv_lock(void)
{
    int r = pthread_mutex_lock(&fv_seg->lock);
    /* A process died holding the lock: its half-done update is at worst a leaked entry that the
     * reclaim of dead processes frees. */
    if (r == EOWNERDEAD)
        pthread_mutex_consistent(&fv_seg->lock);
    else if (r != 0) {
        fv_log("fabric lock unusable (%s)", strerror(r));
        abort();
    }
}

void fv_unlock(void)
{
    pthread_mutex_unlock(&fv_seg->lock);
}

int fv_pid_alive(pid_t pid)
{
    if (pid <= 0)
        return 0;
    return kill(pid, 0) == 0 || errno != ESRCH;
}

static void init_segment(struct fv_seg *s)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&s->lock, &a);
    pthread_mutexattr_destroy(&a);
    s->next_pd = 1;
    s->next_serial = 1;
    s->next_gen = 1;
    s->layout = FV_LAYOUT;
    __atomic_store_n(&s->magic, FV_MAGIC, __ATOMIC_RELEASE);
}

/* Opens (and with create, makes) the segment. Creation is race-free: the segment is built under a
 * private name and published with link(), which fails if another process published first. */
int fv_open_segment(const char *path, int create, struct fv_seg **out)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && create) {
            char tmp[300];
            snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
            int tfd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            if (tfd < 0)
                return errno;
            if (ftruncate(tfd, (off_t)FV_SEG_BYTES) != 0) {
                int e = errno;
                close(tfd);
                unlink(tmp);
                return e;
            }
            void *m = mmap(NULL, FV_SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, tfd, 0);
            if (m == MAP_FAILED) {
                int e = errno;
                close(tfd);
                unlink(tmp);
                return e;
            }
            init_segment(m);
            int lr = link(tmp, path);
            int le = errno;
            unlink(tmp);
            close(tfd);
            if (lr == 0) {
                *out = m;
                return 0;
            }
            munmap(m, FV_SEG_BYTES);
            if (le != EEXIST)
                return le;
            continue;  /* someone else published first: use theirs */
        }
        if (fd < 0)
            return errno;
        struct stat st;
        if (fstat(fd, &st) != 0 || (size_t)st.st_size != FV_SEG_BYTES) {
            close(fd);
            return EPROTO;  /* another layout, or not ours */
        }
        void *m = mmap(NULL, FV_SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
            return errno;
        struct fv_seg *s = m;
        if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != FV_MAGIC || s->layout != FV_LAYOUT) {
            munmap(m, FV_SEG_BYTES);
            return EPROTO;
        }
        *out = s;
        return 0;
    }
    return EAGAIN;
}

static int same_file(const char *path, const struct fv_seg *s)
{
    /* The segment we hold is still the one the name refers to unless it was declared dead. */
    struct stat st;
    return !s->dead && stat(path, &st) == 0;
}

void fv_reclaim_dead(void)
{
    struct fv_seg *s = fv_seg;
    for (unsigned i = 0; i < FV_MAX_PROCS; i++)
        if (s->procs[i].pid && !fv_pid_alive(s->procs[i].pid))
            memset(&s->procs[i], 0, sizeof(s->procs[i]));
    for (unsigned i = 0; i < FV_MAX_CTXS; i++)
        if (s->ctxs[i].serial && !fv_pid_alive(s->ctxs[i].pid))
            s->ctxs[i].serial = 0, s->ctxs[i].pid = 0;
    for (unsigned i = 0; i < FV_MAX_CHANS; i++)
        if (s->chans[i].serial && !fv_pid_alive(s->chans[i].pid))
            s->chans[i].serial = 0, s->chans[i].pid = 0;
    for (unsigned i = 0; i < FV_MAX_CQS; i++)
        if (s->cqs[i].serial && !fv_pid_alive(s->cqs[i].pid))
            s->cqs[i].serial = 0, s->cqs[i].pid = 0;
    for (unsigned i = 0; i < FV_MAX_QPS; i++)
        if (s->qps[i].serial && !fv_pid_alive(s->qps[i].pid))
            s->qps[i].serial = 0, s->qps[i].pid = 0;
    for (unsigned i = 0; i < FV_MAX_MRS; i++)
        if (s->mrs[i].key && !fv_pid_alive(s->mrs[i].pid))
            s->mrs[i].key = 0, s->mrs[i].pid = 0;
}

int fv_attach(void)
{
    pthread_mutex_lock(&attach_lock);
    if (attach_count > 0 && attach_pid != getpid()) {
        /* A forked child inherited our mapping but is not registered: start over. */
        attach_count = 0;
        fv_seg = NULL;
    }
    if (attach_count == 0) {
        fv_read_config();
        int e = fv_fabric_path(seg_path, sizeof(seg_path), getenv("FAKEVERBS_FABRIC"));
        if (e) {
            pthread_mutex_unlock(&attach_lock);
            return e;
        }
        for (int attempt = 0;; attempt++) {
            struct fv_seg *s;
            e = fv_open_segment(seg_path, 1, &s);
            if (e) {
                fv_log("cannot open fabric %s: %s", seg_path, strerror(e));
                pthread_mutex_unlock(&attach_lock);
                return e;
            }
            fv_seg = s;
            fv_lock();
            if (same_file(seg_path, s))
                break;
            /* The last user unlinked it between our open and our lock: take the next one. */
            fv_unlock();
            munmap(s, FV_SEG_BYTES);
            fv_seg = NULL;
            if (attempt > 100) {
                pthread_mutex_unlock(&attach_lock);
                return EAGAIN;
            }
        }
        fv_reclaim_dead();
        attach_pid = getpid();
    } else {
        fv_lock();
    }
    /* Register (or count) this process. */
    struct fv_proc *p = NULL, *free_p = NULL;
    for (unsigned i = 0; i < FV_MAX_PROCS; i++) {
        if (fv_seg->procs[i].pid == attach_pid)
            p = &fv_seg->procs[i];
        else if (!fv_seg->procs[i].pid && !free_p)
            free_p = &fv_seg->procs[i];
    }
    if (!p && !free_p) {
        fv_unlock();
        if (attach_count == 0) {
            munmap(fv_seg, FV_SEG_BYTES);
            fv_seg = NULL;
        }
        pthread_mutex_unlock(&attach_lock);
        return ENOSPC;
    }
    if (!p) {
        p = free_p;
        p->pid = attach_pid;
        p->nopen = 0;
    }
    p->nopen++;
    fv_unlock();
    attach_count++;
    pthread_mutex_unlock(&attach_lock);
    return 0;
}

void fv_detach(void)
{
    pthread_mutex_lock(&attach_lock);
    if (attach_count <= 0 || !fv_seg || attach_pid != getpid()) {
        pthread_mutex_unlock(&attach_lock);
        return;
    }
    fv_lock();
    int live = 0;
    for (unsigned i = 0; i < FV_MAX_PROCS; i++) {
        struct fv_proc *p = &fv_seg->procs[i];
        if (p->pid == attach_pid && --p->nopen == 0)
            p->pid = 0;
    }
    int last = --attach_count == 0;
    if (last) {
        fv_reclaim_dead();
        for (unsigned i = 0; i < FV_MAX_PROCS; i++)
            live += fv_seg->procs[i].pid != 0;
        if (live == 0 && !fv_cfg.keep) {
            /* Last live process of the fabric: remove the name while holding the lock, and mark
             * the segment so that a process that opened it meanwhile moves to a fresh one. */
            fv_seg->dead = 1;
            unlink(seg_path);
            FV_DBG("last user: removed %s", seg_path);
        }
    }
    fv_unlock();
    if (last) {
        munmap(fv_seg, FV_SEG_BYTES);
        fv_seg = NULL;
    }
    pthread_mutex_unlock(&attach_lock);
}

int fv_node_name(char *buf, size_t len)
{
    const char *n = getenv("FAKEVERBS_NODE");
    struct utsname u;
    if (!n || !*n) {
        if (uname(&u) != 0)
            return errno;
        n = u.nodename;
    }
    snprintf(buf, len, "%s", n);
    return 0;
}

int fv_port_get(const char *node, uint32_t dev)
{
    struct fv_seg *s = fv_seg;
    int node_no = -1;
    for (unsigned i = 0; i < s->nports && i < FV_MAX_PORTS; i++) {
        if (strncmp(s->ports[i].node, node, FV_NODE_LEN) != 0)
            continue;
        if (s->ports[i].dev == dev)
            return (int)i;
        node_no = (int)s->ports[i].node_no;
    }
    if (s->nports >= FV_MAX_PORTS)
        return -1;
    unsigned i = s->nports++;
    struct fv_port *p = &s->ports[i];
    snprintf(p->node, sizeof(p->node), "%s", node);
    p->dev = dev;
    p->node_no = node_no >= 0 ? (uint32_t)node_no : s->nnodes++;
    p->lid = (uint16_t)(i + 1);  /* LIDs start at 1: 0 is "no LID" */
    p->guid = 0x0002c90300000000ull | ((uint64_t)(p->node_no & 0xffff) << 16) | (dev + 1);
    p->used = 1;
    return (int)i;
}

void fv_port_gid(uint32_t port, int index, union ibv_gid *gid)
{
    const struct fv_port *p = &fv_seg->ports[port];
    memset(gid, 0, sizeof(*gid));
    if (index == 1) {
        /* RoCE v2, IPv4-mapped: ::ffff:10.200.<node>.<dev> */
        gid->raw[10] = 0xff;
        gid->raw[11] = 0xff;
        gid->raw[12] = 10;
        gid->raw[13] = 200;
        gid->raw[14] = (uint8_t)p->node_no;
        gid->raw[15] = (uint8_t)p->dev;
        return;
    }
    gid->global.subnet_prefix = htobe64(0xfe80000000000000ull);
    gid->global.interface_id = htobe64(p->guid);
}

int fv_port_by_lid(uint16_t lid)
{
    if (lid == 0 || lid > fv_seg->nports || lid > FV_MAX_PORTS)
        return -1;
    return lid - 1;
}

int fv_port_by_gid(const union ibv_gid *gid)
{
    for (unsigned i = 0; i < fv_seg->nports && i < FV_MAX_PORTS; i++)
        for (int k = 0; k < 2; k++) {
            union ibv_gid g;
            fv_port_gid(i, k, &g);
            if (memcmp(&g, gid, sizeof(g)) == 0)
                return (int)i;
        }
    return -1;
}

uint32_t fv_new_serial(void)
{
    uint32_t s = fv_seg->next_serial++;
    if (fv_seg->next_serial == 0)
        fv_seg->next_serial = 1;
    return s;
}

struct fv_swc *fv_cq_ring(uint32_t cq)
{
    return (struct fv_swc *)((char *)fv_seg + FV_HDR_BYTES + (size_t)cq * FV_CQ_RING_BYTES);
}

struct fv_rwr *fv_rq_ring(uint32_t qp)
{
    return (struct fv_rwr *)((char *)fv_seg + FV_HDR_BYTES + FV_MAX_CQS * FV_CQ_RING_BYTES +
                             (size_t)qp * FV_RQ_RING_BYTES);
}

/* Makes another process's eventfd readable. We get our own descriptor of its file with
 * pidfd_getfd (same PID namespace; works across network namespaces and leaves no files behind)
 * and close it at once: only an armed CQ is signalled (a waiter about to sleep), so this is rare,
 * and holding no descriptor of other processes keeps every process's descriptor count its own
 * (strata's lifecycle test counts them). */
void fv_signal_fd(pid_t pid, int fd, uint32_t serial)
{
    uint64_t one = 1;
    (void)serial;
    if (pid == getpid()) {
        if (write(fd, &one, sizeof(one)) < 0)
            FV_DBG("eventfd %d: %s", fd, strerror(errno));
        return;
    }
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd < 0)
        return;  /* the owner is gone */
    int lfd = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
    close(pfd);
    if (lfd < 0) {
        FV_DBG("pidfd_getfd(%d, %d): %s", (int)pid, fd, strerror(errno));
        return;
    }
    if (write(lfd, &one, sizeof(one)) < 0)
        FV_DBG("remote eventfd: %s", strerror(errno));
    close(lfd);
}

void fv_async_push(uint32_t ctx, uint32_t type, uint32_t kind, uint32_t idx, uint32_t serial)
{
    struct fv_sctx *c = &fv_seg->ctxs[ctx];
    if (!c->serial)
        return;
    if (c->tail - c->head >= FV_ASYNC_RING) {
        FV_DBG("async queue of context %u full: event %u lost", ctx, type);
        return;
    }
    struct fv_event *e = &c->ev[c->tail % FV_ASYNC_RING];
    e->type = type;
    e->kind = kind;
    e->idx = idx;
    e->serial = serial;
    c->tail++;
    fv_signal_fd(c->pid, c->fd, c->serial);
}

void fv_cq_push(uint32_t cq, const struct fv_swc *swc)
{
    struct fv_scq *c = &fv_seg->cqs[cq];
    if (!c->serial)
        return;  /* destroyed: the completion goes nowhere, as on hardware */
    uint32_t head = __atomic_load_n(&c->head, __ATOMIC_ACQUIRE);
    if (c->tail - head >= c->cap) {
        if (!c->overrun) {
            c->overrun = 1;
            FV_DBG("CQ %u overrun (%u entries)", cq, c->cap);
            fv_async_push(c->ctx, IBV_EVENT_CQ_ERR, FV_OBJ_CQ, cq, c->serial);
        }
        return;
    }
    fv_cq_ring(cq)[c->tail % c->cap] = *swc;
    __atomic_store_n(&c->tail, c->tail + 1, __ATOMIC_RELEASE);
    int fire = c->armed == FV_ARM_ALL ||
               (c->armed == FV_ARM_SOLICITED && (swc->solicited || swc->wc.status != IBV_WC_SUCCESS));
    if (fire && c->chan >= 0) {
        c->armed = 0;
        struct fv_schan *ch = &fv_seg->chans[c->chan];
        if (ch->serial != c->chan_serial)
            return;
        if (ch->tail - ch->head < FV_CHAN_RING) {
            ch->cq[ch->tail % FV_CHAN_RING] = cq | (c->serial << FV_CQ_BITS);
            ch->tail++;
            fv_signal_fd(ch->pid, ch->fd, ch->serial);
        }
    }
}

void fv_qp_to_err(uint32_t qp)
{
    struct fv_sqp *q = &fv_seg->qps[qp];
    if (!q->serial)
        return;
    q->state = IBV_QPS_ERR;
    struct fv_rwr *ring = fv_rq_ring(qp);
    for (; q->rq_head != q->rq_tail; q->rq_head++) {
        struct fv_swc w;
        memset(&w, 0, sizeof(w));
        w.wc.wr_id = ring[q->rq_head % q->max_recv_wr].wr_id;
        w.wc.status = IBV_WC_WR_FLUSH_ERR;
        w.wc.opcode = IBV_WC_RECV;
        w.wc.qp_num = q->qpn;
        fv_cq_push(q->recv_cq, &w);
    }
}
