/*
 * allreduce.c - the smallest strata program: N processes all-reduce a float vector.
 *
 * Every rank is started by hand with its rank and the number of ranks; STRATA_COMM_ID names the
 * bootstrap root's address, so every rank makes the same unique id without exchanging it (rank 0
 * starts the root in strataCommInitRank). From the top of the source tree, after make:
 *
 *   cc -o allreduce examples/allreduce.c -Iinclude -L.libs -lstrata -Wl,-rpath,$PWD/.libs
 *   export STRATA_COMM_ID=127.0.0.1:27500
 *   ./allreduce 0 2 & ./allreduce 1 2; wait
 *
 * Each rank prints the sum it received and exits 0 when it is right.
 */
#include <stdio.h>
#include <stdlib.h>
#include <strata.h>

#define COUNT 1024

#define CHECK(_call)                                                                        \
    do {                                                                                    \
        strataResult_t _r = (_call);                                                        \
        if (_r != strataSuccess) {                                                          \
            fprintf(stderr, "%s: %s (%s)\n", #_call, strataGetErrorString(_r),              \
                    strataGetLastError(NULL));                                              \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

int main(int argc, char **argv)
{
    strataUniqueId id;
    strataComm_t   comm;
    float         *buf;
    int            rank, nranks, wrong = 0;

    if (argc != 3 || getenv("STRATA_COMM_ID") == NULL) {
        fprintf(stderr, "usage: STRATA_COMM_ID=host:port %s RANK NRANKS\n", argv[0]);
        return 2;
    }
    rank   = atoi(argv[1]);
    nranks = atoi(argv[2]);

    buf = malloc(COUNT * sizeof(*buf)); /* host memory: strata does not take GPU buffers */
    if (buf == NULL) {
        return 1;
    }
    for (int i = 0; i < COUNT; i++) {
        buf[i] = (float)(rank + 1);
    }

    CHECK(strataGetUniqueId(&id)); /* with STRATA_COMM_ID: the same id on every rank */
    CHECK(strataCommInitRank(&comm, nranks, id, rank));
    CHECK(strataAllReduce(buf, buf, COUNT, strataFloat32, strataSum, comm, NULL)); /* in place */
    CHECK(strataCommDestroy(comm));

    for (int i = 0; i < COUNT; i++) {
        wrong += buf[i] != (float)(nranks * (nranks + 1) / 2);
    }
    printf("rank %d of %d: sum %.0f, %d wrong\n", rank, nranks, buf[0], wrong);
    free(buf);
    return wrong != 0;
}
