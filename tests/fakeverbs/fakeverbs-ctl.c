/* fakeverbs-ctl: inspect and remove a fakeverbs fabric, and probe whether this machine lets one
 * process write into another (what the fake's data path and completion channels need).
 *
 *   fakeverbs-ctl stats [FABRIC]   per port: node, device, LID, bytes and messages sent/received
 *   fakeverbs-ctl clean [FABRIC]   remove the fabric's segment (and leftovers of its creation)
 *   fakeverbs-ctl probe            exit 0 if process_vm_writev and pidfd_getfd work into a child,
 *                                  77 (automake's SKIP) with a one-line reason on stderr if not
 *
 * FABRIC defaults to $FAKEVERBS_FABRIC, then to the user id, as in the library. */
#define _GNU_SOURCE
#include "fv.h"

#include <errno.h>
#include <glob.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>

static int usage(void)
{
    fprintf(stderr, "usage: fakeverbs-ctl stats [FABRIC] | clean [FABRIC] | probe\n");
    return 2;
}

static const char *fabric_arg(int argc, char **argv)
{
    return argc > 2 ? argv[2] : getenv("FAKEVERBS_FABRIC");
}

static int stats(const char *fabric)
{
    char path[256];
    if (fv_fabric_path(path, sizeof(path), fabric) != 0) {
        fprintf(stderr, "fakeverbs-ctl: bad fabric name '%s'\n", fabric ? fabric : "");
        return 2;
    }
    struct fv_seg *s;
    int e = fv_open_segment(path, 0, &s);
    if (e) {
        fprintf(stderr, "fakeverbs-ctl: %s: %s\n", path, strerror(e));
        return 1;
    }
    /* Counters are read without the lock: a snapshot that may be a message behind. */
    int procs = 0, qps = 0, mrs = 0, cqs = 0;
    for (unsigned i = 0; i < FV_MAX_PROCS; i++)
        procs += s->procs[i].pid && fv_pid_alive(s->procs[i].pid);
    for (unsigned i = 0; i < FV_MAX_QPS; i++)
        qps += s->qps[i].serial != 0;
    for (unsigned i = 0; i < FV_MAX_CQS; i++)
        cqs += s->cqs[i].serial != 0;
    for (unsigned i = 0; i < FV_MAX_MRS; i++)
        mrs += s->mrs[i].key != 0;
    printf("fabric %s: %d live processes, %d QPs, %d CQs, %d MRs, %llu send WRs, %llu registrations\n",
           path, procs, qps, cqs, mrs, (unsigned long long)s->send_wrs,
           (unsigned long long)s->reg_mrs);
    printf("%-20s %-7s %5s %16s %12s %16s %12s\n", "node", "device", "LID", "bytes_sent", "msgs_sent",
           "bytes_recv", "msgs_recv");
    for (unsigned i = 0; i < s->nports && i < FV_MAX_PORTS; i++) {
        const struct fv_port *p = &s->ports[i];
        printf("%-20.63s fake%-3u %5u %16llu %12llu %16llu %12llu\n", p->node, p->dev, p->lid,
               (unsigned long long)p->tx_bytes, (unsigned long long)p->tx_msgs,
               (unsigned long long)p->rx_bytes, (unsigned long long)p->rx_msgs);
    }
    munmap(s, FV_SEG_BYTES);
    return 0;
}

static int clean(const char *fabric)
{
    char path[256], pat[300];
    if (fv_fabric_path(path, sizeof(path), fabric) != 0) {
        fprintf(stderr, "fakeverbs-ctl: bad fabric name '%s'\n", fabric ? fabric : "");
        return 2;
    }
    int rc = 0;
    if (unlink(path) != 0 && errno != ENOENT) {
        fprintf(stderr, "fakeverbs-ctl: %s: %s\n", path, strerror(errno));
        rc = 1;
    }
    /* A creator killed between creating and publishing leaves its private file. */
    snprintf(pat, sizeof(pat), "%s.tmp.*", path);
    glob_t g;
    if (glob(pat, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            unlink(g.gl_pathv[i]);
        globfree(&g);
    }
    return rc;
}

static volatile uint64_t probe_target;

static int probe(void)
{
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) {
        fprintf(stderr, "fakeverbs-ctl probe: pipe: %s\n", strerror(errno));
        return 77;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "fakeverbs-ctl probe: fork: %s\n", strerror(errno));
        return 77;
    }
    if (pid == 0) {
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
        int efd = eventfd(0, EFD_CLOEXEC);
        char c;
        if (write(up[1], &efd, sizeof(efd)) != (ssize_t)sizeof(efd) || read(down[0], &c, 1) != 1)
            _exit(3);
        struct pollfd p = {efd, POLLIN, 0};
        int ok = probe_target == 0x5eedULL && poll(&p, 1, 2000) == 1;
        _exit(ok ? 0 : 1);
    }
    int efd = -1;
    const char *why = NULL;
    char reason[200];
    if (read(up[0], &efd, sizeof(efd)) != (ssize_t)sizeof(efd) || efd < 0) {
        why = "the child could not make an eventfd";
    } else {
        uint64_t v = 0x5eedULL;
        struct iovec l = {&v, sizeof(v)}, r = {(void *)&probe_target, sizeof(v)};
        if (process_vm_writev(pid, &l, 1, &r, 1, 0) != (ssize_t)sizeof(v)) {
            snprintf(reason, sizeof(reason), "process_vm_writev into a child: %s (seccomp or ptrace "
                     "policy denies cross-memory attach)", strerror(errno));
            why = reason;
        } else {
            int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
            int lfd = pfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pfd, efd, 0) : -1;
            if (lfd < 0) {
                snprintf(reason, sizeof(reason), "pidfd_open/pidfd_getfd on a child: %s (needed "
                         "for completion channels)", strerror(errno));
                why = reason;
            } else {
                uint64_t one = 1;
                if (write(lfd, &one, sizeof(one)) != (ssize_t)sizeof(one))
                    why = "writing a child's eventfd failed";
                close(lfd);
            }
            if (pfd >= 0)
                close(pfd);
        }
    }
    char c = 'g';
    if (write(down[1], &c, 1) != 1 && !why)
        why = "lost the child";
    int st = 0;
    if (why)
        kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    if (!why && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        why = "the child did not see the bytes or the event";
    if (why) {
        fprintf(stderr, "fakeverbs-ctl probe: SKIP: %s\n", why);
        return 77;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (strcmp(argv[1], "stats") == 0)
        return stats(fabric_arg(argc, argv));
    if (strcmp(argv[1], "clean") == 0)
        return clean(fabric_arg(argc, argv));
    if (strcmp(argv[1], "probe") == 0)
        return probe();
    return usage();
}
