/*
 * reduce_kernels.c - bandwidth of strata's host reduction kernels on one core, beside memcpy of
 * the same bytes in the same run (the peer: a reduction reads two inputs and writes one output,
 * so memcpy of the output bytes is an upper bound it can approach, not beat).
 *
 * Built and run by bench/reduce_kernels.sh against a build tree's libstrata_internal.a.
 * Prints, per datatype, GB/s of output written by st_reduce_apply with sum, prod and avg (a
 * premul-sum for the floating types: the scale, then the sum) and by memcpy, and the ratio
 * sum/memcpy. Each figure is the fastest of the iterations, so that other work on a shared
 * machine disturbs it less than a mean would.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reduce/reduce.h"

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Fastest of iters calls of st_reduce_apply(op) over count elements, in seconds. */
static double best_apply(const st_redop_t *op, void *d, const void *a, const void *b, size_t count,
                         int iters)
{
    double best = 1e30;

    st_reduce_apply(op, d, a, b, count); /* warm: page faults, ifunc resolution */
    for (int it = 0; it < iters; it++) {
        double t0 = now();

        st_reduce_apply(op, d, a, b, count);
        t0 = now() - t0;
        best = t0 < best ? t0 : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    size_t                 count = (argc > 1) ? strtoull(argv[1], NULL, 0) : (size_t)2 << 20;
    int                    iters = (argc > 2) ? atoi(argv[2]) : 20;
    const strataDataType_t types[] = {strataFloat32, strataFloat16, strataBfloat16, strataInt32,
                                      strataFloat64};
    const strataRedOp_t    ops[]   = {strataSum, strataProd, strataAvg};

    printf("# %zu elements, best of %d iterations; GB/s of output written on one core\n", count,
           iters);
    printf("# %-9s %10s %10s %10s %10s %8s\n", "type", "sum", "prod", "avg", "memcpy", "sum/cpy");
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        size_t    es = st_dtype_size(types[t]);
        uint16_t *a = malloc(count * es), *b = malloc(count * es), *d = malloc(count * es);
        double    gbs[3], tm = 1e30;

        /* 1.0 + small steps: normal values in every type (no subnormal slow paths) */
        for (size_t i = 0; i < count * es / 2; i++) {
            a[i] = (uint16_t)(0x3c00 + (i % 512));
            b[i] = 0x4000;
        }
        for (size_t o = 0; o < 3; o++) {
            st_redop_t op;

            st_redop_init(&op, ops[o], types[t], 4);
            gbs[o] = (double)count * es / best_apply(&op, d, a, b, count, iters) / 1e9;
        }
        memcpy(d, a, count * es);
        for (int it = 0; it < iters; it++) {
            double t0 = now();

            memcpy(d, (it & 1) ? a : b, count * es);
            t0 = now() - t0;
            tm = t0 < tm ? t0 : tm;
        }
        tm = (double)count * es / tm / 1e9;
        printf("  %-9s %10.2f %10.2f %10.2f %10.2f %8.2f\n", st_dtype_name(types[t]), gbs[0],
               gbs[1], gbs[2], tm, gbs[0] / tm);
        free(a);
        free(b);
        free(d);
    }
    return 0;
}
