/*
 * topo.c - `collbench topo`: the topology test.
 *
 * Two uses. With launched ranks (-np 8 --nodes 2, mpirun, --rank) every rank initialises the
 * communicator, which is where strata detects each rank's topology and builds the hierarchy, and
 * rank 0 prints it (strataCommTopoPrint): what the algorithms will see, node by node, with the
 * rails and the ring. With --topo-file F no rank is started: strata loads the hwloc XML F, places
 * a rank per GPU (per NUMA domain without GPU) and prints the machine's GPU -> NIC -> NUMA mapping
 * and the hierarchy (strataTopoFilePrint), so a machine one does not have can be checked from its
 * lstopo export. Only the public API is used, as everywhere in collbench.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "collbench.h"

int cb_topo_rank_main(const cb_opts_t *opts, int rank, int nranks, const strataUniqueId *id)
{
    strataComm_t   comm;
    strataResult_t res;
    int            ret = 0;

    res = strataCommInitRank(&comm, nranks, *id, rank);
    if (res != strataSuccess) {
        fprintf(stderr, "collbench: rank %d: strataCommInitRank failed: %s: %s\n", rank,
                strataGetErrorString(res), strataGetLastError(NULL));
        return 2;
    }
    if (rank == 0) {
        res = strataCommTopoPrint(comm, stdout, opts->json);
        fflush(stdout);
        if (res != strataSuccess) {
            fprintf(stderr, "collbench: rank 0: strataCommTopoPrint failed: %s: %s\n",
                    strataGetErrorString(res), strataGetLastError(comm));
            ret = 2;
        }
    }
    res = strataCommDestroy(comm);
    if (res != strataSuccess) {
        fprintf(stderr, "collbench: rank %d: strataCommDestroy failed: %s: %s\n", rank,
                strataGetErrorString(res), strataGetLastError(NULL));
        ret = 2;
    }
    return ret;
}

int cb_topo_file(const cb_opts_t *opts)
{
    strataResult_t res;

    /* the reason is printed below, in one line; strata's own warning would repeat it (an explicit
     * STRATA_DEBUG still wins) */
    setenv("STRATA_DEBUG", "NONE", 0);
    res = strataTopoFilePrint(opts->topo_file, stdout, opts->json);
    fflush(stdout);
    if (res != strataSuccess) {
        fprintf(stderr, "%s: topo: %s\n", opts->prog, strataGetLastError(NULL));
        return 2;
    }
    return 0;
}
