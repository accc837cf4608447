/*
 * fuzz_records.c - libFuzzer harness over what a rank builds from the other ranks' records at
 * communicator init: the records arrive as bytes through the bootstrap (or the split's
 * all-gather) and st_topo_create turns them into the hierarchy (nodes, local ranks, rails, ring
 * order), which every later step indexes with. A record may come from a buggy or hostile peer:
 * its strings may be unterminated and its numbers anything.
 *
 * Input: one byte n (1..16 ranks), then per rank one byte choosing its node id among four (so that
 * nodes of several ranks happen; random node ids would almost never be equal) followed by the raw
 * bytes of its st_topo_rec_t; missing bytes are zero. Oracles: every accessor stays in range and
 * agrees with the others (the ring is a permutation, each rank is on its node and rail, local
 * ranks count up within a node), and printing the hierarchy (what INFO logs and collbench show)
 * touches only terminated strings.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "topo/topo.h"

#define FZ_MAX_RANKS 16

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_ASSERT(_cond)                                                                           \
    do {                                                                                           \
        if (!(_cond)) {                                                                            \
            fprintf(stderr, "fuzz_records: %s:%d: %s\n", __FILE__, __LINE__, #_cond);             \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static FILE *fz_null;

static void fz_check(const st_topo_t *t, int n)
{
    int seen[FZ_MAX_RANKS] = {0};
    int nnodes             = st_topo_nnodes(t);
    int nrails             = st_topo_nrails(t);
    int total              = 0;

    FZ_ASSERT(st_topo_nranks(t) == n);
    FZ_ASSERT(nnodes >= 1 && nnodes <= n);
    FZ_ASSERT(nrails >= 1 && nrails <= n);
    for (int pos = 0; pos < n; pos++) {
        int r = st_topo_ring_rank(t, pos);

        FZ_ASSERT(r >= 0 && r < n && !seen[r]);
        seen[r] = 1;
        FZ_ASSERT(st_topo_ring_pos(t, r) == pos);
    }
    for (int k = 0; k < nnodes; k++) {
        int size = st_topo_local_size(t, k);

        FZ_ASSERT(size >= 1 && size <= nrails);
        for (int l = 0; l < size; l++) {
            int r = st_topo_node_rank(t, k, l);

            FZ_ASSERT(r >= 0 && r < n);
            FZ_ASSERT(st_topo_node(t, r) == k && st_topo_local_rank(t, r) == l);
        }
        total += size;
    }
    FZ_ASSERT(total == n);
    for (int l = 0; l < nrails; l++) {
        int size = st_topo_rail_size(t, l);

        FZ_ASSERT(size >= 1 && size <= nnodes);
        for (int i = 0; i < size; i++) {
            int r = st_topo_rail_rank(t, l, i);

            FZ_ASSERT(r >= 0 && r < n && st_topo_local_rank(t, r) == l);
        }
    }
    for (int r = 0; r < n; r++) {
        const st_topo_rec_t *rec = st_topo_rec(t, r);

        FZ_ASSERT(memchr(rec->node_id, '\0', sizeof(rec->node_id)) != NULL);
        FZ_ASSERT(memchr(rec->nic, '\0', sizeof(rec->nic)) != NULL);
        FZ_ASSERT(memchr(rec->near, '\0', sizeof(rec->near)) != NULL);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    st_log_init();
    st_log_level = ST_LOG_NONE;
    fz_null = fopen("/dev/null", "w");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static st_topo_rec_t       recs[FZ_MAX_RANKS];
    const st_topo_rec_t       *ptrs[FZ_MAX_RANKS];
    st_topo_t                 *t;
    int                        n;
    size_t                     off = 1;

    if (size < 1) {
        return 0;
    }
    n = 1 + data[0] % FZ_MAX_RANKS;
    for (int r = 0; r < n; r++) {
        size_t take;
        int    node = 0;

        memset(&recs[r], 0, sizeof(recs[r]));
        if (off < size) {
            node = data[off++];
        }
        take = (off < size) ? size - off : 0;
        take = take < sizeof(recs[r]) ? take : sizeof(recs[r]);
        memcpy(&recs[r], data + off, take);
        off += take;
        if (node < 0xf0) {
            /* one of four node ids; 0xf0 and above keep the node id bytes of the input */
            snprintf(recs[r].node_id, sizeof(recs[r].node_id), "node%d", node % 4);
        }
        ptrs[r] = &recs[r];
    }
    if (st_topo_create(ptrs, n, &t) != ST_OK) {
        return 0;
    }
    fz_check(t, n);
    if (fz_null != NULL) {
        st_topo_print(t, fz_null, 0);
        st_topo_print(t, fz_null, 1);
    }
    st_topo_destroy(t);
    return 0;
}
