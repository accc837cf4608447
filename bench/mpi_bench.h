/*
 * mpi_bench.h - what bench/mpi_allreduce.c and bench/mpi_alltoall.c share (header-only, static):
 * collbench's options (-b -e -f -n -w -c), its table header and the printing of one half of a
 * row, so that an MPI collective's table reads like collbench's and bench/lib.sh parses both.
 */
#ifndef BENCH_MPI_BENCH_H
#define BENCH_MPI_BENCH_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct {
    size_t minbytes, maxbytes;
    int    factor, iters, warmup, check;
} opts_t;

/* A size with an optional k/M/G suffix (powers of 1024). */
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

/* collbench's options into *o (defaults: 1 KiB .. 64 MiB x2, -n 20, -w 5, -c 1). 0, or 2 after
 * the usage line on rank 0 (the caller finalizes and exits with it). */
static int parse_opts(int argc, char **argv, int rank, opts_t *o)
{
    int c;

    *o = (opts_t){1024, (size_t)64 << 20, 2, 20, 5, 1};
    while ((c = getopt(argc, argv, "b:e:f:n:w:c:")) != -1) {
        switch (c) {
        case 'b': o->minbytes = parse_size(optarg); break;
        case 'e': o->maxbytes = parse_size(optarg); break;
        case 'f': o->factor = atoi(optarg); break;
        case 'n': o->iters = atoi(optarg); break;
        case 'w': o->warmup = atoi(optarg); break;
        case 'c': o->check = atoi(optarg); break;
        default:
            if (rank == 0) {
                fprintf(stderr, "usage: %s [-b min] [-e max] [-f factor] [-n iters] [-w warmup] "
                        "[-c 0/1]\n", argv[0]);
            }
            return 2;
        }
    }
    return 0;
}

/* collbench's header lines (rank 0). */
static void print_header(const opts_t *o)
{
    printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %d(factor) warmup iters: %d "
           "iters: %d agg iters: 1 validation: %d graph: 0\n", o->minbytes, o->maxbytes,
           o->factor, o->warmup, o->iters, o->check);
    printf("#\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size",
           "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
           "algbw", "busbw", "#wrong");
}

/* One half of a row as collbench prints it (rank 0): time (us), algbw, busbw, #wrong (N/A
 * without -c 1). */
static void print_half(const opts_t *o, double sec, double algbw, double busbw,
                       unsigned long long wrong)
{
    double usec = sec * 1e6;

    printf((usec >= 10000.0) ? "  %7.0f" : (usec >= 100.0) ? "  %7.1f" : "  %7.2f", usec);
    if (o->check) {
        printf("  %6.2f  %6.2f  %5llu", algbw, busbw, wrong);
    } else {
        printf("  %6.2f  %6.2f  %5s", algbw, busbw, "N/A");
    }
}

/* MPI_Init, the rank and size, and the options. 0, or 2 (MPI finalized: exit with it). */
static int mpi_start(int *argc, char ***argv, int *rank, int *nranks, opts_t *o)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, nranks);
    if (parse_opts(*argc, *argv, *rank, o) != 0) {
        MPI_Finalize();
        return 2;
    }
    return 0;
}

/* The end of one half of a row, on every rank: time = the largest over ranks of this rank's
 * seconds per call, #wrong summed over ranks (with -c 1), algbw = bytes / time and busbw = algbw x
 * busf x (n-1)/n (nccl-tests: busf 2 for all-reduce, 1 for all-to-all); printed on rank 0.
 * Returns the #wrong of all ranks. */
static unsigned long long finish_half(const opts_t *o, double sec, unsigned long long wrong,
                                      size_t bytes, double busf, int rank, int nranks)
{
    unsigned long long wrong_all = 0;
    double             algbw;

    MPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (o->check) {
        MPI_Allreduce(&wrong, &wrong_all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    }
    algbw = (double)bytes / sec / 1e9;
    if (rank == 0) {
        print_half(o, sec, algbw, algbw * busf * (nranks - 1) / nranks, wrong_all);
    }
    return wrong_all;
}

#endif
