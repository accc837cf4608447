/*
 * launch.c - how collbench's ranks come to exist, and how each of them gets the unique id.
 *
 * Three modes, tried in this order:
 *  1. -np N [--nodes K | --layout n0,n1,.. | --layout rr]: this process forks N ranks as K
 *     emulated nodes (contiguous blocks of ranks, as even as possible unless --layout says
 *     otherwise; with --layout rr rank r on node r % K, numbering that does not follow nodes),
 *     each child with STRATA_HOSTID=node<k>, and supervises them: the first rank that fails (a
 *     signal, or exit status 2: a strata call failed) or the --timeout ends the others (SIGTERM,
 *     then SIGKILL), since they would otherwise wait for it until their own timeouts. Status 1
 *     (some #wrong != 0) is a completed run. The exit status is the first failing rank's.
 *     The children are forked BEFORE this process makes any strata call, and the id reaches them
 *     afterwards through a shared page (a pipe closing says it is there): strata reads its
 *     STRATA_* parameters once per process, at its first call, so a child forked after the parent
 *     called strataGetUniqueId would inherit the parent's parsed STRATA_HOSTID and ignore its own;
 *     and forking a process whose strata threads (the bootstrap root) may hold locks is unsafe.
 *     The parent's strataGetUniqueId starts the bootstrap root thread here, which this process
 *     keeps alive by waiting for the children.
 *  2. Under a launcher (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE or SLURM_PROCID/NTASKS, the first
 *     found): with STRATA_COMM_ID=host:port every rank's strataGetUniqueId names that address and
 *     rank 0's strataCommInitRank starts the root there; built with MPI (HAVE_MPI) and without
 *     STRATA_COMM_ID, rank 0 makes the id and MPI_Bcast's it.
 *  3. --rank R --nranks N with STRATA_COMM_ID: one rank, started by someone else (the emulation
 *     scripts start each rank inside its own network namespace).
 * In modes 2 and 3 the --timeout is an alarm in each rank.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include "collbench.h"

/* What the parent of -np publishes to its children (a MAP_SHARED page made before fork). */
typedef struct cb_shared_id {
    volatile int   ready; /* 1: id is valid; 0: the parent failed and the children must exit */
    strataUniqueId id;
} cb_shared_id_t;

/* Seconds the children get between SIGTERM and SIGKILL. */
#define CB_KILL_GRACE 5.0

static volatile sig_atomic_t cb_stop_signal;

static void cb_on_stop_signal(int sig)
{
    cb_stop_signal = sig;
}

static void cb_on_alarm(int sig)
{
    static const char msg[] = "collbench: the run passed its --timeout, exiting\n";
    ssize_t           ret   = write(STDERR_FILENO, msg, sizeof(msg) - 1);

    (void)ret;
    (void)sig;
    _exit(2);
}

/* Modes 2 and 3 have no supervisor: each rank ends itself when the run is too long. */
static void cb_arm_timeout(const cb_opts_t *opts)
{
    if (opts->timeout > 0) {
        signal(SIGALRM, cb_on_alarm);
        alarm((unsigned)ceil(opts->timeout));
    }
}

/* Ranks per emulated node into counts; returns the number of nodes, or -1 (reported). */
static int cb_layout(const cb_opts_t *opts, int *np_p, int *counts)
{
    int np = opts->np, nodes, sum = 0, k;

    if (opts->layout_rr) {
        if (opts->rr_nodes > 0 && opts->nnodes > 0 && opts->rr_nodes != opts->nnodes) {
            fprintf(stderr, "%s: --layout rr%d but --nodes %d\n", opts->prog, opts->rr_nodes,
                    opts->nnodes);
            return -1;
        }
        nodes = opts->rr_nodes > 0 ? opts->rr_nodes : opts->nnodes;
        if (np == 0 || nodes == 0 || nodes > np) {
            fprintf(stderr, "%s: --layout rr needs -np N and --nodes K (or rrK) with K <= N\n",
                    opts->prog);
            return -1;
        }
        for (k = 0; k < nodes; k++) {
            counts[k] = np / nodes + (k < np % nodes);
        }
        *np_p = np;
        return nodes;
    }
    if (opts->nlayout > 0) {
        for (k = 0; k < opts->nlayout; k++) {
            counts[k] = opts->layout[k];
            sum      += counts[k];
        }
        if (np == 0) {
            np = sum;
        } else if (np != sum) {
            fprintf(stderr, "%s: --layout has %d ranks but -np says %d\n", opts->prog, sum, np);
            return -1;
        }
        if (opts->nnodes != 0 && opts->nnodes != opts->nlayout) {
            fprintf(stderr, "%s: --layout has %d nodes but --nodes says %d\n", opts->prog,
                    opts->nlayout, opts->nnodes);
            return -1;
        }
        *np_p = np;
        return opts->nlayout;
    }
    nodes = (opts->nnodes > 0) ? opts->nnodes : 1;
    if (nodes > np) {
        fprintf(stderr, "%s: --nodes %d is more than -np %d\n", opts->prog, nodes, np);
        return -1;
    }
    /* the first np % nodes nodes take one rank more */
    for (k = 0; k < nodes; k++) {
        counts[k] = np / nodes + (k < np % nodes);
    }
    *np_p = np;
    return nodes;
}

int cb_spread_rank = -1;

/* Moves rank r to CPU r mod (the CPUs it may use), then gives back the whole mask: a placement,
 * not a binding. Forked children start on their parent's CPU, and the wake-ups of init (each
 * rank sleeps while the others join) pull them together again; two ranks that spin on one CPU
 * until the kernel's load balancer moves one (4-7 ms here) take 5-7 us per 8-byte all-reduce
 * instead of 0.4 us, which a short run measures instead of the library. Called at fork and once
 * init is done (bench.c); ranks started by mpirun or a launcher are left where it put them. */
void cb_spread(int rank)
{
#ifdef __linux__
    cpu_set_t all, one;
    int       n, k = 0;

    if (sched_getaffinity(0, sizeof(all), &all) != 0 || (n = CPU_COUNT(&all)) < 2) {
        return;
    }
    CPU_ZERO(&one);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &all) && k++ == rank % n) {
            CPU_SET(cpu, &one);
            break;
        }
    }
    if (sched_setaffinity(0, sizeof(one), &one) == 0) {
        (void)sched_setaffinity(0, sizeof(all), &all); /* it runs there now; free to move */
    }
#else
    (void)rank;
#endif
}

/* A forked rank: waits for the id, then runs the benchmark. Returns its exit status. */
static int cb_child(const cb_opts_t *opts, int rank, int nranks, int node, int local, int rfd,
                    const cb_shared_id_t *shared, pid_t parent)
{
    strataUniqueId id;
    char           hostid[32], c;
    ssize_t        n;

#ifdef __linux__
    /* never outlive the supervisor: nobody else would end a rank stuck waiting for its peers */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    if (getppid() != parent) {
        return 2;
    }
    cb_spread_rank = rank;
    cb_spread(rank);
    snprintf(hostid, sizeof(hostid), "node%d", node);
    setenv("STRATA_HOSTID", hostid, 1);
    cb_local_rank = local; /* --device: the rank's device is its local rank modulo the devices */

    /* the parent closes its end once the id is published, or when it failed */
    do {
        n = read(rfd, &c, 1);
    } while (n > 0 || (n < 0 && errno == EINTR));
    close(rfd);
    if (!shared->ready) {
        return 2; /* the parent said why */
    }
    memcpy(&id, &shared->id, sizeof(id));
    return cb_rank_main(opts, rank, nranks, &id);
}

/* Sends sig to every child still running. */
static void cb_kill_all(const pid_t *pids, int np, int sig)
{
    int r;

    for (r = 0; r < np; r++) {
        if (pids[r] > 0) {
            kill(pids[r], sig);
        }
    }
}

static void cb_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Waits for the np children; ends them all at the first failure, signal or timeout. Returns the
 * exit status of the run. */
static int cb_supervise(const cb_opts_t *opts, pid_t *pids, int np)
{
    double deadline = (opts->timeout > 0) ? cb_now() + opts->timeout : 0;
    double kill_at  = 0;
    int    live = np, ret = 0, killing = 0, stopped = 0, st, r;
    pid_t  pid;

    while (live > 0) {
        pid = waitpid(-1, &st, WNOHANG);
        if (pid < 0 && errno != EINTR) {
            fprintf(stderr, "%s: waitpid failed: %s\n", opts->prog, strerror(errno));
            cb_kill_all(pids, np, SIGKILL);
            return 2;
        }
        if (pid > 0) {
            for (r = 0; r < np && pids[r] != pid; r++) {
            }
            if (r == np) {
                continue; /* not one of ours */
            }
            pids[r] = 0;
            live--;
            if (WIFEXITED(st) && WEXITSTATUS(st) <= 1) {
                /* 1: the run completed with #wrong != 0; every rank knows it and ends the same */
                ret = (ret == 0) ? WEXITSTATUS(st) : ret;
                continue;
            }
            if (killing) {
                stopped++; /* ended by us, or failing after the first failure */
                continue;
            }
            if (WIFEXITED(st)) {
                fprintf(stderr, "%s: rank %d (pid %d) exited with status %d\n", opts->prog, r,
                        (int)pid, WEXITSTATUS(st));
                ret = WEXITSTATUS(st);
            } else {
                fprintf(stderr, "%s: rank %d (pid %d) was killed by signal %d (%s)\n", opts->prog,
                        r, (int)pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
                ret = 2;
            }
            if (live > 0) {
                /* the others would wait for this rank until their own timeouts */
                cb_kill_all(pids, np, SIGTERM);
                killing = 1;
                kill_at = cb_now() + CB_KILL_GRACE;
            }
            continue;
        }

        if (!killing && (cb_stop_signal != 0 || (deadline > 0 && cb_now() > deadline))) {
            if (cb_stop_signal != 0) {
                fprintf(stderr, "%s: got signal %d, stopping the ranks\n", opts->prog,
                        (int)cb_stop_signal);
            } else {
                fprintf(stderr, "%s: the run passed its --timeout of %g s, stopping the ranks\n",
                        opts->prog, opts->timeout);
            }
            ret = 2;
            cb_kill_all(pids, np, SIGTERM);
            killing = 1;
            kill_at = cb_now() + CB_KILL_GRACE;
        } else if (killing && kill_at > 0 && cb_now() > kill_at) {
            cb_kill_all(pids, np, SIGKILL);
            kill_at = 0;
        }
        cb_sleep_ms(10);
    }
    if (stopped > 0) {
        fprintf(stderr, "%s: %d more rank(s) ended after that (stopped, or failing in turn)\n",
                opts->prog, stopped);
    }
    return ret;
}

/* Mode 1: fork np ranks as emulated nodes and supervise them. */
static int cb_launch_local(const cb_opts_t *opts)
{
    static int      counts[CB_MAX_NODES];
    cb_shared_id_t *shared;
    strataResult_t  res;
    pid_t          *pids, parent = getpid();
    int             np, nodes, node, first, r, ret, pipefd[2];

    nodes = cb_layout(opts, &np, counts);
    if (nodes < 0) {
        return 2;
    }
    if (cb_device_probe(opts) != 0) {
        return 2; /* no device layer for --device: said in one line */
    }
    pids   = calloc((size_t)np, sizeof(*pids));
    shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                  0);
    if (pids == NULL || shared == MAP_FAILED || pipe(pipefd) != 0) {
        fprintf(stderr, "%s: cannot set up %d ranks: %s\n", opts->prog, np, strerror(errno));
        return 2;
    }
    shared->ready = 0;
    fflush(NULL); /* or every child prints what stdio still buffers */

    for (r = 0, node = 0, first = 0; r < np; r++) {
        if (r >= first + counts[node]) {
            first += counts[node++];
        }
        pids[r] = fork();
        if (pids[r] == 0) {
            close(pipefd[1]);
            /* exit(), not _exit(): rank 0's table is in stdio buffers */
            exit(cb_child(opts, r, np, opts->layout_rr ? r % nodes : node,
                          opts->layout_rr ? r / nodes : r - first, pipefd[0], shared, parent));
        }
        if (pids[r] < 0) {
            fprintf(stderr, "%s: fork of rank %d failed: %s\n", opts->prog, r, strerror(errno));
            pids[r] = 0;
            close(pipefd[1]); /* ready is 0: the children started so far exit */
            close(pipefd[0]);
            cb_supervise(opts, pids, r);
            return 2;
        }
    }
    close(pipefd[0]);
    signal(SIGINT, cb_on_stop_signal);
    signal(SIGTERM, cb_on_stop_signal);
    signal(SIGHUP, cb_on_stop_signal);

    /* the bootstrap root thread this starts lives as long as this process, past the children */
    res = strataGetUniqueId(&shared->id);
    if (res == strataSuccess) {
        shared->ready = 1;
    } else {
        fprintf(stderr, "%s: strataGetUniqueId failed: %s: %s\n", opts->prog,
                strataGetErrorString(res), strataGetLastError(NULL));
    }
    close(pipefd[1]);

    ret = cb_supervise(opts, pids, np);
    free(pids);
    munmap(shared, sizeof(*shared));
    return (res == strataSuccess) ? ret : 2;
}

/* Modes 2 and 3 with STRATA_COMM_ID: every rank derives the id from that address. */
static int cb_run_comm_id(const cb_opts_t *opts, int rank, int nranks)
{
    strataUniqueId id;
    strataResult_t res;

    cb_arm_timeout(opts);
    res = strataGetUniqueId(&id);
    if (res != strataSuccess) {
        fprintf(stderr, "%s: rank %d: strataGetUniqueId (STRATA_COMM_ID=%s) failed: %s: %s\n",
                opts->prog, rank, getenv("STRATA_COMM_ID"), strataGetErrorString(res),
                strataGetLastError(NULL));
        return 2;
    }
    return cb_rank_main(opts, rank, nranks, &id);
}

#ifdef HAVE_MPI
/* Mode 2 without STRATA_COMM_ID: rank 0 makes the id, MPI carries it. */
static int cb_run_mpi(const cb_opts_t *opts)
{
    strataUniqueId id;
    strataResult_t res = strataSuccess;
    int            rank, nranks, ok, ret;

    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    cb_arm_timeout(opts);
    memset(&id, 0, sizeof(id));
    if (rank == 0) {
        res = strataGetUniqueId(&id);
        if (res != strataSuccess) {
            fprintf(stderr, "%s: rank 0: strataGetUniqueId failed: %s: %s\n", opts->prog,
                    strataGetErrorString(res), strataGetLastError(NULL));
        }
    }
    ok = res == strataSuccess;
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok) {
        MPI_Finalize();
        return 2;
    }
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ret = cb_rank_main(opts, rank, nranks, &id);
    MPI_Finalize();
    return ret;
}
#endif

/* Rank and size from the first launcher whose variables are set; 0 when none is. */
static int cb_env_rank(const cb_opts_t *opts, int *rank_p, int *nranks_p, int *valid_p)
{
    static const char *const vars[][3] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", NULL},
        {"PMI_RANK", "PMI_SIZE", NULL},
        {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS"},
    };
    const char *rank, *size;
    size_t      i;

    for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        rank = getenv(vars[i][0]);
        if (rank == NULL) {
            continue;
        }
        size = getenv(vars[i][1]);
        if (size == NULL && vars[i][2] != NULL) {
            size = getenv(vars[i][2]);
        }
        *rank_p   = (size != NULL) ? atoi(rank) : -1;
        *nranks_p = (size != NULL) ? atoi(size) : 0;
        *valid_p  = *nranks_p > 0 && *rank_p >= 0 && *rank_p < *nranks_p;
        if (!*valid_p) {
            fprintf(stderr, "%s: %s=%s with %s=%s is not a valid rank and size\n", opts->prog,
                    vars[i][0], rank, vars[i][1], size != NULL ? size : "(unset)");
        }
        return 1;
    }
    return 0;
}

int cb_launch(const cb_opts_t *opts)
{
    const char *comm_id = getenv("STRATA_COMM_ID");
    int         rank, nranks, valid;

    if (opts->np > 0 || opts->nlayout > 0 || opts->layout_rr) {
        if (opts->rank >= 0 || opts->nranks > 0) {
            fprintf(stderr, "%s: -np and --rank/--nranks exclude each other\n", opts->prog);
            return 2;
        }
        return cb_launch_local(opts);
    }
    if (opts->nnodes > 0) {
        fprintf(stderr, "%s: --nodes needs -np (ranks forked here)\n", opts->prog);
        return 2;
    }

    if (opts->rank >= 0 || opts->nranks > 0) {
        if (opts->rank < 0 || opts->nranks <= 0 || opts->rank >= opts->nranks) {
            fprintf(stderr, "%s: --rank R --nranks N need each other, with 0 <= R < N\n",
                    opts->prog);
            return 2;
        }
        if (comm_id == NULL || comm_id[0] == '\0') {
            fprintf(stderr, "%s: --rank/--nranks need STRATA_COMM_ID=host:port, the bootstrap "
                    "address rank 0 listens on\n", opts->prog);
            return 2;
        }
        return cb_run_comm_id(opts, opts->rank, opts->nranks);
    }

    if (cb_env_rank(opts, &rank, &nranks, &valid)) {
        if (!valid) {
            return 2;
        }
        if (comm_id != NULL && comm_id[0] != '\0') {
            return cb_run_comm_id(opts, rank, nranks);
        }
#ifdef HAVE_MPI
        return cb_run_mpi(opts);
#else
        fprintf(stderr, "%s: started by a launcher (rank %d of %d) but STRATA_COMM_ID is unset, "
                "and this collbench has no MPI to pass the id (configure --with-mpi): set "
                "STRATA_COMM_ID=host:port, an address of rank 0's host every rank can reach\n",
                opts->prog, rank, nranks);
        return 2;
#endif
    }

    if (opts->topo) {
        return cb_topo_file(opts); /* `collbench topo` alone: this machine, no ranks */
    }
    fprintf(stderr, "%s: no way to start ranks: use -np N [--nodes K] to fork them here, run "
            "under mpirun/srun with STRATA_COMM_ID=host:port%s, or pass --rank R --nranks N with "
            "STRATA_COMM_ID (see --help)\n", opts->prog,
#ifdef HAVE_MPI
            " (or without it: the id goes by MPI)"
#else
            ""
#endif
            );
    return 2;
}
