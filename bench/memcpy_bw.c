/*
 * memcpy_bw.c - memory bandwidth of this machine as memcpy sees it, for the one-node ceiling of
 * bench/intra_node.sh (the traffic model is in bench/README.md).
 *
 *   memcpy_bw THREADS [BYTES_PER_THREAD|auto] [TRIALS]      (default auto, 5 trials; k/M/G)
 *
 * THREADS threads (one per rank of the benchmark it goes with) copy, all at the same time, each
 * its own BYTES_PER_THREAD buffer into another one, 4 times per trial. Buffers are touched
 * before the first trial (no page faults are timed) and must be larger than the last-level
 * cache, so that the copy streams from and to DRAM: auto is 64 MiB, or more where the caches
 * are large, so that the buffers of all threads together span 4 times the last-level cache (a
 * server part with 3D V-Cache has 0.5-1 GiB of L3 and would otherwise measure its L3). One line
 * on stdout:
 *   memcpy threads T bytes B GB/s M min m max x trials N
 * M is the median over trials of the aggregate rate, in bytes copied per second / 1e9 (a copy of
 * S bytes counts S, not the 2S of memory traffic it causes: STREAM's "Copy" would print 2M).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define COPIES_PER_TRIAL 4

typedef struct {
    char             *src, *dst;
    size_t            bytes;
    pthread_barrier_t *start, *done;
    int               trials;
} worker_t;

static size_t parse_size(const char *s)
{
    char  *end;
    double v = strtod(s, &end);

    switch (*end) {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024.0; break;
    case 'g': case 'G': v *= 1024.0 * 1024.0 * 1024.0; break;
    default: break;
    }
    return (size_t)v;
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *worker(void *arg)
{
    worker_t *w = arg;

    for (int t = 0; t < w->trials; t++) {
        pthread_barrier_wait(w->start);
        for (int c = 0; c < COPIES_PER_TRIAL; c++) {
            memcpy(w->dst, w->src, w->bytes);
            /* A different byte each round: the copies cannot be merged or skipped. */
            w->src[(size_t)c * 4099 % w->bytes]++;
        }
        pthread_barrier_wait(w->done);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int               nthreads, trials;
    size_t            bytes;
    pthread_barrier_t start, done;
    pthread_t        *tids;
    worker_t         *w;
    double           *rate;
    unsigned          sum = 0;

    if (argc < 2 || (nthreads = atoi(argv[1])) < 1) {
        fprintf(stderr, "usage: %s THREADS [BYTES_PER_THREAD] [TRIALS]\n", argv[0]);
        return 2;
    }
    if (argc > 2 && strcmp(argv[2], "auto") != 0) {
        bytes = parse_size(argv[2]);
    } else {
        long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);

        bytes = 64u << 20;
        if (llc > 0 && (size_t)llc * 2 / nthreads > bytes) {
            bytes = ((size_t)llc * 2 / nthreads + 4095) & ~(size_t)4095;
        }
    }
    trials = (argc > 3) ? atoi(argv[3]) : 5;
    if (bytes < 4096 || trials < 1) {
        fprintf(stderr, "%s: need BYTES_PER_THREAD >= 4096 and TRIALS >= 1\n", argv[0]);
        return 2;
    }
    tids = calloc(nthreads, sizeof(*tids));
    w    = calloc(nthreads, sizeof(*w));
    rate = calloc(trials, sizeof(*rate));
    if (tids == NULL || w == NULL || rate == NULL) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 2;
    }
    pthread_barrier_init(&start, NULL, nthreads + 1);
    pthread_barrier_init(&done, NULL, nthreads + 1);
    for (int i = 0; i < nthreads; i++) {
        w[i].src = malloc(bytes);
        w[i].dst = malloc(bytes);
        if (w[i].src == NULL || w[i].dst == NULL) {
            fprintf(stderr, "%s: cannot allocate 2 x %zu bytes\n", argv[0], bytes);
            return 2;
        }
        memset(w[i].src, i + 1, bytes);
        memset(w[i].dst, 0, bytes);
        w[i].bytes  = bytes;
        w[i].start  = &start;
        w[i].done   = &done;
        w[i].trials = trials;
        pthread_create(&tids[i], NULL, worker, &w[i]);
    }
    for (int t = 0; t < trials; t++) {
        double t0;

        pthread_barrier_wait(&start);
        t0 = now();
        pthread_barrier_wait(&done);
        rate[t] = (double)nthreads * COPIES_PER_TRIAL * (double)bytes / (now() - t0) / 1e9;
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(tids[i], NULL);
        sum += (unsigned char)w[i].dst[bytes / 2];
    }
    qsort(rate, trials, sizeof(*rate), cmp_double);
    printf("memcpy threads %d bytes %zu GB/s %.3f min %.3f max %.3f trials %d\n", nthreads, bytes,
           (trials % 2) ? rate[trials / 2] : 0.5 * (rate[trials / 2 - 1] + rate[trials / 2]),
           rate[0], rate[trials - 1], trials);
    if (sum == 0) { /* the copies' results are used: they cannot be optimized away */
        fprintf(stderr, "memcpy_bw: copies did not arrive\n");
        return 1;
    }
    return 0;
}
