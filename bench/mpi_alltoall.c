/*
 * mpi_alltoall.c - Open MPI's MPI_Alltoall measured the way collbench measures strataAlltoAll
 * (`collbench alltoall`, nccl-tests' alltoall_perf), so that bench/alltoall.sh can put the two
 * tables side by side.
 *
 * Same procedure as collbench (src/tools/collbench/bench.c), step for step:
 *  - sizes: the size column is one rank's send buffer, nranks blocks of `count` floats, count =
 *    size / 4 / nranks (rounded down); -b, -e (k/M/G suffixes), -f factor;
 *  - warmup: -w calls at the largest size, then -w calls at the smallest;
 *  - per size: out of place only (strata's all-to-all has no in-place form: the in-place half
 *    prints N/A, as collbench's does); a barrier, -n timed calls, then (with -c 1) one more call
 *    on fresh inputs into a poisoned receive buffer, every element of which is checked;
 *  - time = the largest over ranks of (elapsed / iterations), in microseconds;
 *  - algbw = size / time, busbw = algbw * (n - 1) / n, in GB/s (1e9), as nccl-tests' alltoall;
 *  - block d of rank s's input holds key (s, d * count + i, round): integers below 2^24, exact in
 *    float, so #wrong counts real errors (a block from the wrong sender or place, a stale one).
 * Only MPI is used.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_bench.h"

/* What rank `src` sends at key `key` (block d, element i: key = d * count + i) in round `seed`:
 * an integer in [0, 2^24), exact in float. */
static float input(int src, size_t key, unsigned seed)
{
    uint64_t x = (uint64_t)key * 0x9e3779b97f4a7c15ULL + (uint64_t)src * 0xbf58476d1ce4e5b9ULL +
                 (uint64_t)seed * 0xd6e8feb86659fd93ULL;

    x ^= x >> 31;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 29;
    return (float)(x & 0xffffff);
}

/* This rank's send buffer: nranks blocks of count elements, block d keyed d * count + i. */
static void fill(float *buf, size_t count, int nranks, int rank, unsigned seed)
{
    for (size_t i = 0; i < count * (size_t)nranks; i++) {
        buf[i] = input(rank, i, seed);
    }
}

/* Block s of the receive buffer must be what s sent to this rank: its block `rank`. */
static unsigned long long count_wrong(const float *buf, size_t count, int nranks, int rank,
                                      unsigned seed)
{
    unsigned long long wrong = 0;

    for (int s = 0; s < nranks; s++) {
        for (size_t i = 0; i < count; i++) {
            wrong += (buf[(size_t)s * count + i] != input(s, (size_t)rank * count + i, seed));
        }
    }
    return wrong;
}

static void run(const float *send, float *recv, size_t count, int iters)
{
    for (int i = 0; i < iters; i++) {
        MPI_Alltoall(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
    }
}

/* One row's out-of-place half; prints time, algbw, busbw, #wrong on rank 0. Returns #wrong. */
static unsigned long long bench_one(const opts_t *o, float *send, float *recv, size_t count,
                                    int rank, int nranks, unsigned *seed)
{
    unsigned long long wrong = 0;
    double             t0, sec;
    size_t             bytes = count * (size_t)nranks * sizeof(float);

    fill(send, count, nranks, rank, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    run(send, recv, count, o->iters);
    sec = (MPI_Wtime() - t0) / o->iters;

    if (o->check) {
        ++*seed;
        fill(send, count, nranks, rank, *seed);
        memset(recv, 0xff, bytes); /* poison: NaN, never an input */
        run(send, recv, count, 1);
        wrong = count_wrong(recv, count, nranks, rank, *seed);
    }
    return finish_half(o, sec, wrong, bytes, 1.0, rank, nranks);
}

int main(int argc, char **argv)
{
    opts_t             o;
    int                rank, nranks;
    unsigned           seed = 1;
    unsigned long long wrong = 0;
    float             *send, *recv;
    size_t             maxcount, size;

    if (mpi_start(&argc, &argv, &rank, &nranks, &o) != 0) {
        return 2;
    }
    if (o.minbytes < sizeof(float) * (size_t)nranks || o.maxbytes < o.minbytes || o.factor < 2 ||
        o.iters < 1 || o.maxbytes / sizeof(float) / (size_t)nranks > (size_t)INT32_MAX) {
        if (rank == 0) {
            fprintf(stderr, "%s: need 4 x nranks <= min <= max, a count per block that fits an "
                    "int, factor >= 2, iters >= 1\n", argv[0]);
        }
        MPI_Finalize();
        return 2;
    }
    maxcount = o.maxbytes / sizeof(float) / (size_t)nranks;
    send = malloc(maxcount * (size_t)nranks * sizeof(float));
    recv = malloc(maxcount * (size_t)nranks * sizeof(float));
    if (send == NULL || recv == NULL) {
        fprintf(stderr, "%s: rank %d: cannot allocate 2 x %zu bytes\n", argv[0], rank, o.maxbytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    fill(send, maxcount, nranks, rank, 0);
    memset(recv, 0, maxcount * (size_t)nranks * sizeof(float));

    if (rank == 0) {
        printf("# mpi_alltoall: MPI_Alltoall, float, %d ranks; out of place only (the in-place "
               "columns say N/A, as collbench's alltoall)\n", nranks);
        print_header(&o);
    }
    /* Warmup as collbench: at the largest size, then at the smallest. */
    run(send, recv, maxcount, o.warmup);
    run(send, recv, o.minbytes / sizeof(float) / (size_t)nranks, o.warmup);

    for (size = o.minbytes; size <= o.maxbytes; size *= (size_t)o.factor) {
        size_t count = size / sizeof(float) / (size_t)nranks;

        if (rank == 0) {
            /* collbench's row: the size is the send buffer, count the elements per rank pair */
            printf("%12zu  %12zu  %8s  %6s  %6i", count * (size_t)nranks * sizeof(float), count,
                   "float", "none", -1);
        }
        wrong += bench_one(&o, send, recv, count, rank, nranks, &seed);
        if (rank == 0) {
            printf("  %7s  %6s  %6s  %5s\n", "N/A", "N/A", "N/A", "N/A");
            fflush(stdout);
        }
    }
    if (rank == 0) {
        printf("# Out of bounds values : %llu %s\n", wrong, wrong ? "FAILED" : "OK");
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return wrong ? 1 : 0;
}
