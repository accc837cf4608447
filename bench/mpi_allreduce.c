/*
 * mpi_allreduce.c - Open MPI's MPI_Allreduce measured the way collbench measures strataAllReduce,
 * so that bench/allreduce_vs_mpi.sh can put the two tables side by side.
 *
 * Same procedure as collbench (src/tools/collbench/bench.c), step for step:
 *  - warmup: -w calls at the largest size, then -w calls at the smallest;
 *  - per size: out of place, then in place (MPI_IN_PLACE); each half is a barrier, -n timed calls,
 *    then (with -c 1) one more call on fresh inputs whose result is checked;
 *  - time = the largest over ranks of (elapsed / iterations), in microseconds;
 *  - algbw = bytes / time, busbw = algbw * 2 (n - 1) / n, in GB/s (1e9), as nccl-tests;
 *  - float sum; inputs are small integers, so every sum is exact and #wrong counts real errors.
 * Sizes: -b, -e (k/M/G suffixes), -f factor, all rounded down to whole floats. Only MPI is used.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_bench.h"

/* Input of `rank` at element i for check round `seed`: integers in [-8, 8], exact in float. */
static float input(int rank, size_t i, unsigned seed)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ULL + (uint64_t)rank * 0xbf58476d1ce4e5b9ULL + seed;

    x ^= x >> 31;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 29;
    return (float)((int)(x % 17) - 8);
}

static void fill(float *buf, size_t count, int rank, unsigned seed)
{
    for (size_t i = 0; i < count; i++) {
        buf[i] = input(rank, i, seed);
    }
}

static unsigned long long count_wrong(const float *buf, size_t count, int nranks, unsigned seed)
{
    unsigned long long wrong = 0;

    for (size_t i = 0; i < count; i++) {
        float expect = 0.0f;

        for (int r = 0; r < nranks; r++) {
            expect += input(r, i, seed);
        }
        wrong += (buf[i] != expect);
    }
    return wrong;
}

static void run(float *send, float *recv, size_t count, int in_place, int iters)
{
    for (int i = 0; i < iters; i++) {
        MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
    }
}

/* One half of a row; prints time, algbw, busbw, #wrong on rank 0. Returns #wrong. */
static unsigned long long bench_one(const opts_t *o, float *send, float *recv, size_t count,
                                    int in_place, int rank, int nranks, unsigned *seed)
{
    unsigned long long wrong = 0;
    double             t0, sec;
    size_t             bytes = count * sizeof(float);

    fill(in_place ? recv : send, count, rank, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    run(send, recv, count, in_place, o->iters);
    sec = (MPI_Wtime() - t0) / o->iters;

    if (o->check) {
        ++*seed;
        fill(in_place ? recv : send, count, rank, *seed);
        run(send, recv, count, in_place, 1);
        wrong = count_wrong(recv, count, nranks, *seed);
    }
    return finish_half(o, sec, wrong, bytes, 2.0, rank, nranks);
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
    if (o.minbytes < sizeof(float) || o.maxbytes < o.minbytes || o.factor < 2 || o.iters < 1) {
        if (rank == 0) {
            fprintf(stderr, "%s: need 4 <= min <= max, factor >= 2, iters >= 1\n", argv[0]);
        }
        MPI_Finalize();
        return 2;
    }
    maxcount = o.maxbytes / sizeof(float);
    send = malloc(maxcount * sizeof(float));
    recv = malloc(maxcount * sizeof(float));
    if (send == NULL || recv == NULL) {
        fprintf(stderr, "%s: rank %d: cannot allocate 2 x %zu bytes\n", argv[0], rank, o.maxbytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    fill(send, maxcount, rank, 0);
    fill(recv, maxcount, rank, 0);

    if (rank == 0) {
        printf("# mpi_allreduce: MPI_Allreduce, float sum, %d ranks\n", nranks);
        print_header(&o);
    }
    /* Warmup as collbench: at the largest size, then at the smallest. */
    run(send, recv, maxcount, 0, o.warmup);
    run(send, recv, o.minbytes / sizeof(float), 0, o.warmup);

    for (size = o.minbytes; size <= o.maxbytes; size *= (size_t)o.factor) {
        size_t count = size / sizeof(float);

        if (rank == 0) {
            printf("%12zu  %12zu  %8s  %6s  %6i", count * sizeof(float), count, "float", "sum", -1);
        }
        wrong += bench_one(&o, send, recv, count, 0, rank, nranks, &seed);
        wrong += bench_one(&o, send, recv, count, 1, rank, nranks, &seed);
        if (rank == 0) {
            printf("\n");
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
