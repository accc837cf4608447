/*
 * reduce_kernels.c - bandwidth of strata's host reduction kernels on one core, beside memcpy of
 * the same bytes in the same run (the peer: a reduction reads two inputs and writes one output,
 * so memcpy of the output bytes is an upper bound it can approach, not beat).
 *
 * Built and run by bench/reduce_kernels.sh against a build tree's libstrata_internal.a.
 * Prints, per datatype, GB/s of output written by st_reduce_apply(sum) and by memcpy, and the
 * ratio kernel/memcpy.
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

int main(int argc, char **argv)
{
    size_t                 count = (argc > 1) ? strtoull(argv[1], NULL, 0) : (size_t)2 << 20;
    int                    iters = (argc > 2) ? atoi(argv[2]) : 20;
    const strataDataType_t types[] = {strataFloat32, strataFloat16, strataBfloat16, strataInt32,
                                      strataFloat64};

    printf("# %zu elements, %d iterations; GB/s of output written on one core\n", count, iters);
    printf("# %-9s %12s %12s %8s\n", "type", "sum kernel", "memcpy", "ratio");
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        size_t     es = st_dtype_size(types[t]);
        uint16_t  *a = malloc(count * es), *b = malloc(count * es), *d = malloc(count * es);
        st_redop_t op;
        double     t0, tk, tm;

        /* 1.0 + small steps: normal values in every type (no subnormal slow paths) */
        for (size_t i = 0; i < count * es / 2; i++) {
            a[i] = (uint16_t)(0x3c00 + (i % 512));
            b[i] = 0x4000;
        }
        st_redop_init(&op, strataSum, types[t], 2);
        st_reduce_apply(&op, d, a, b, count); /* warm: page faults, ifunc resolution */
        t0 = now();
        for (int it = 0; it < iters; it++) {
            st_reduce_apply(&op, d, a, b, count);
        }
        tk = now() - t0;
        memcpy(d, a, count * es);
        t0 = now();
        for (int it = 0; it < iters; it++) {
            memcpy(d, (it & 1) ? a : b, count * es);
        }
        tm = now() - t0;
        printf("  %-9s %12.2f %12.2f %8.2f\n", st_dtype_name(types[t]),
               (double)iters * count * es / tk / 1e9, (double)iters * count * es / tm / 1e9,
               tm / tk);
        free(a);
        free(b);
        free(d);
    }
    return 0;
}
