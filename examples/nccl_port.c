/*
 * nccl_port.c - a program written against NCCL's API for device buffers, ported to strata by
 * renaming identifiers only: every nccl of the original is strata here (ncclAllReduce ->
 * strataAllReduce, ncclComm_t -> strataComm_t, ncclFloat32 -> strataFloat32, nccl.h ->
 * strata.h), and nothing else differs. `make check` proves it: it builds this file against
 * strata.h and libstrata, and tests/tools/test_nccl_port.sh renames strata back to nccl and
 * compiles the result against the CUDA prefix's nccl.h.
 *
 * Two parts, each one of NCCL's documented patterns, every rank checking its result:
 *  1. one thread drives all ranks: strataCommInitAll over a device list, an all-reduce of each
 *     rank's buffer on its own stream inside strataGroupStart/End, cudaStreamSynchronize;
 *  2. one thread per rank: strataGetUniqueId, strataCommInitRank, an in-place all-reduce, then a
 *     ring shift with strataSend/strataRecv in a group, all on the rank's stream, which the host
 *     synchronizes once at the end (the calls are ordered on the stream, nothing in between).
 * Ranks take devices round-robin, so with fewer GPUs than ranks several ranks share one (strata
 * allows that; NCCL up to 2.29 refuses it ("Duplicate GPU detected"), 2.30 only with its
 * experimental NCCL_MULTI_RANK_GPU_ENABLE=1, so with NCCL run it with one GPU per rank).
 *
 * Usage: nccl_port [nranks] (default 4). Prints one line per part; exits 0 when every element
 * is right, 1 when some are wrong, 2 when a call fails, 77 (automake's SKIP) without a GPU.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>
#include "strata.h"

#define COUNT     (1 << 20) /* elements per rank */
#define MAX_RANKS 64

#define CUDACHECK(cmd)                                                                            \
    do {                                                                                          \
        cudaError_t e_ = (cmd);                                                                   \
        if (e_ != cudaSuccess) {                                                                  \
            printf("Failed: CUDA error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

#define STRATACHECK(cmd)                                                                          \
    do {                                                                                          \
        strataResult_t r_ = (cmd);                                                                \
        if (r_ != strataSuccess) {                                                                \
            printf("Failed: strata error %s:%d '%s': %s\n", __FILE__, __LINE__,                   \
                   strataGetErrorString(r_), strataGetLastError(NULL));                           \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

static int nranks, ndevices;

/* Rank r's input at element i: small integers, so every sum is exact in float. */
static float input(int r, size_t i)
{
    return (float)((r + 1) * (int)(i % 7 + 1));
}

/* Elements of got (count elements, device memory) that differ from what rank r's result must be:
 * the sum over all ranks (sum != 0), or rank r's own input (sum == 0). */
static size_t wrong_elements(const float *got, int r, int sum)
{
    float *host = malloc(COUNT * sizeof(float));
    size_t wrong = 0, i;

    if (host == NULL) {
        printf("Failed: out of memory\n");
        exit(2);
    }
    CUDACHECK(cudaMemcpy(host, got, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
    for (i = 0; i < COUNT; i++) {
        float want = sum ? (float)(nranks * (nranks + 1) / 2 * (int)(i % 7 + 1)) : input(r, i);

        wrong += host[i] != want;
    }
    free(host);
    return wrong;
}

static float *device_input(int r)
{
    float *host = malloc(COUNT * sizeof(float)), *dev;
    size_t i;

    if (host == NULL) {
        printf("Failed: out of memory\n");
        exit(2);
    }
    for (i = 0; i < COUNT; i++) {
        host[i] = input(r, i);
    }
    CUDACHECK(cudaMalloc((void **)&dev, COUNT * sizeof(float)));
    CUDACHECK(cudaMemcpy(dev, host, COUNT * sizeof(float), cudaMemcpyHostToDevice));
    free(host);
    return dev;
}

/* Part 1: one thread, all ranks (strataCommInitAll and a group). */
static size_t single_thread(void)
{
    strataComm_t comms[MAX_RANKS];
    cudaStream_t streams[MAX_RANKS];
    float       *sendbuff[MAX_RANKS], *recvbuff[MAX_RANKS];
    int          devlist[MAX_RANKS], r;
    size_t       wrong = 0;

    for (r = 0; r < nranks; r++) {
        devlist[r] = r % ndevices;
    }
    STRATACHECK(strataCommInitAll(comms, nranks, devlist));
    for (r = 0; r < nranks; r++) {
        CUDACHECK(cudaSetDevice(devlist[r]));
        sendbuff[r] = device_input(r);
        CUDACHECK(cudaMalloc((void **)&recvbuff[r], COUNT * sizeof(float)));
        CUDACHECK(cudaStreamCreate(&streams[r]));
    }

    STRATACHECK(strataGroupStart());
    for (r = 0; r < nranks; r++) {
        STRATACHECK(strataAllReduce(sendbuff[r], recvbuff[r], COUNT, strataFloat32, strataSum,
                                    comms[r], streams[r]));
    }
    STRATACHECK(strataGroupEnd());

    for (r = 0; r < nranks; r++) {
        CUDACHECK(cudaSetDevice(devlist[r]));
        CUDACHECK(cudaStreamSynchronize(streams[r]));
        wrong += wrong_elements(recvbuff[r], r, 1);
    }
    for (r = 0; r < nranks; r++) {
        CUDACHECK(cudaSetDevice(devlist[r]));
        CUDACHECK(cudaStreamDestroy(streams[r]));
        CUDACHECK(cudaFree(sendbuff[r]));
        CUDACHECK(cudaFree(recvbuff[r]));
        STRATACHECK(strataCommDestroy(comms[r]));
    }
    return wrong;
}

typedef struct {
    strataUniqueId id;
    int            rank;
    size_t         wrong;
} rank_args_t;

/* Part 2: one rank of one thread (strataCommInitRank, all-reduce in place, send/recv ring). */
static void *rank_thread(void *arg)
{
    rank_args_t *a = arg;
    strataComm_t comm;
    cudaStream_t stream;
    float       *buff, *ring, *from_prev;
    int          next = (a->rank + 1) % nranks, prev = (a->rank + nranks - 1) % nranks;

    CUDACHECK(cudaSetDevice(a->rank % ndevices));
    /* Ranks as threads that may share one GPU: a non-blocking stream, and every synchronous
     * cudaMalloc/cudaMemcpy before the first collective. A blocking stream held by one rank's
     * queued collective would stall another thread's synchronous copy until that collective,
     * which needs the other thread, completed (NCCL's kernels have the same hazard). */
    CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    buff = device_input(a->rank);
    ring = device_input(a->rank);
    CUDACHECK(cudaMalloc((void **)&from_prev, COUNT * sizeof(float)));
    STRATACHECK(strataCommInitRank(&comm, nranks, a->id, a->rank));

    /* buff becomes the sum; ring goes to the next rank, from_prev receives the previous one's */
    STRATACHECK(strataAllReduce(buff, buff, COUNT, strataFloat32, strataSum, comm, stream));
    STRATACHECK(strataGroupStart());
    STRATACHECK(strataSend(ring, COUNT, strataFloat32, next, comm, stream));
    STRATACHECK(strataRecv(from_prev, COUNT, strataFloat32, prev, comm, stream));
    STRATACHECK(strataGroupEnd());
    CUDACHECK(cudaStreamSynchronize(stream));

    a->wrong = wrong_elements(buff, a->rank, 1) + wrong_elements(from_prev, prev, 0);
    CUDACHECK(cudaFree(buff));
    CUDACHECK(cudaFree(ring));
    CUDACHECK(cudaFree(from_prev));
    CUDACHECK(cudaStreamDestroy(stream));
    STRATACHECK(strataCommDestroy(comm));
    return NULL;
}

static size_t thread_per_rank(void)
{
    rank_args_t    args[MAX_RANKS];
    pthread_t      threads[MAX_RANKS];
    strataUniqueId id;
    size_t         wrong = 0;
    int            r;

    STRATACHECK(strataGetUniqueId(&id));
    for (r = 0; r < nranks; r++) {
        args[r].id    = id;
        args[r].rank  = r;
        args[r].wrong = 0;
        if (pthread_create(&threads[r], NULL, rank_thread, &args[r]) != 0) {
            printf("Failed: cannot start the thread of rank %d\n", r);
            exit(2);
        }
    }
    for (r = 0; r < nranks; r++) {
        pthread_join(threads[r], NULL);
        wrong += args[r].wrong;
    }
    return wrong;
}

int main(int argc, char **argv)
{
    cudaError_t err;
    size_t      wrong1, wrong2;

    nranks = (argc > 1) ? atoi(argv[1]) : 4;
    if (nranks < 2 || nranks > MAX_RANKS) {
        printf("usage: %s [nranks: 2..%d]\n", argv[0], MAX_RANKS);
        return 2;
    }
    err = cudaGetDeviceCount(&ndevices);
    if (err != cudaSuccess || ndevices == 0) {
        printf("SKIPPED: no CUDA device (%s)\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return 77;
    }

    wrong1 = single_thread();
    printf("one thread, %d ranks on %d device(s): all-reduce of %d floats: %zu wrong\n", nranks,
           ndevices < nranks ? ndevices : nranks, COUNT, wrong1);
    wrong2 = thread_per_rank();
    printf("a thread per rank: in-place all-reduce and send/recv ring: %zu wrong\n", wrong2);
    return (wrong1 + wrong2 == 0) ? 0 : 1;
}
