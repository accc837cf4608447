/*
 * topo_hier.c - the hierarchy of a communicator: nodes, local ranks, rails and the ring order,
 * computed from every rank's record.
 *
 * Every rank runs this on the same records and so gets the same hierarchy without talking. It
 * must hold for any numbering: nodes of different sizes (3+1, 1+3, 2+3) and ranks that do not
 * follow nodes (round-robin, reversed, irregular), so nothing here assumes that a node's ranks
 * are contiguous. Grouping sorts the ranks by node id, O(n log n), because a quadratic scan would
 * cost seconds at 100k ranks.
 *
 * The ring visits nodes in node order (by lowest rank) and, inside a node, follows the hardware:
 * NUMA domain of the GPU (or of the CPUs without GPU), then the GPU's PCI bus id, whose bus
 * numbers are handed out depth-first so GPUs behind one switch are adjacent, then the first PU,
 * then rank. Neighbours on the ring are thus as close as the machine allows, and exactly one ring
 * edge per node crosses the network in each direction.
 */
#include "config.h"
#include "topo/topo.h"

#include <stdlib.h>
#include <string.h>

struct st_topo {
    int            nranks;
    int            nnodes;
    int            nrails;
    st_topo_rec_t *recs;       /* [nranks] copies; nic may be spread */
    int           *node;       /* [nranks] node of each rank */
    int           *local;      /* [nranks] local rank of each rank */
    int           *node_first; /* [nnodes + 1] offsets into node_ranks */
    int           *node_ranks; /* [nranks] ranks by node, each node in local order */
    int           *rail_first; /* [nrails + 1] offsets into rail_ranks */
    int           *rail_ranks; /* [nranks] ranks by rail, each rail in node order */
    int           *ring;       /* [nranks] rank at each ring position */
    int           *ring_pos;   /* [nranks] ring position of each rank */
};

/* qsort has no context argument: the records being sorted, set around each sort. The hierarchy
 * is built under no lock, possibly in several threads at once (strataCommInitAll): thread-local. */
static __thread const st_topo_t *st_topo_sorting;

static int st_topo_cmp_node_id(const void *a, const void *b)
{
    int ra = *(const int *)a, rb = *(const int *)b;
    int c  = strcmp(st_topo_sorting->recs[ra].node_id, st_topo_sorting->recs[rb].node_id);

    return (c != 0) ? c : (ra > rb) - (ra < rb);
}

/* PCI bus id as a number ("dddd:bb:dd.f"); above every bus id when there is none. */
static uint64_t st_topo_pci_key(const char *busid)
{
    unsigned d, b, s, f;

    if (busid[0] == '\0' || sscanf(busid, "%x:%x:%x.%x", &d, &b, &s, &f) != 4) {
        return UINT64_MAX;
    }
    return ((uint64_t)d << 24) | ((uint64_t)b << 16) | ((uint64_t)s << 8) | f;
}

static int st_topo_cmp_ring(const void *a, const void *b)
{
    int                  ra = *(const int *)a, rb = *(const int *)b;
    const st_topo_rec_t *x = &st_topo_sorting->recs[ra], *y = &st_topo_sorting->recs[rb];
    int                  nx = x->gpu[0] ? x->gpu_numa : x->numa;
    int                  ny = y->gpu[0] ? y->gpu_numa : y->numa;
    uint64_t             px = st_topo_pci_key(x->gpu), py = st_topo_pci_key(y->gpu);

    /* NUMA -1 (unknown) is an unsigned maximum: such ranks go last */
    if (nx != ny) {
        return ((unsigned)nx > (unsigned)ny) - ((unsigned)nx < (unsigned)ny);
    }
    if (px != py) {
        return (px > py) - (px < py);
    }
    if (x->first_pu != y->first_pu) {
        return ((unsigned)x->first_pu > (unsigned)y->first_pu) -
               ((unsigned)x->first_pu < (unsigned)y->first_pu);
    }
    return (ra > rb) - (ra < rb);
}

/* Item i (0-based) of a comma-separated list into buf; "" past the end. */
static void st_topo_list_item(const char *list, int i, char *buf, size_t len)
{
    const char *p = list, *end;

    for (; i > 0 && p != NULL; i--) {
        p = strchr(p, ',');
        p = (p != NULL) ? p + 1 : NULL;
    }
    if (p == NULL) {
        buf[0] = '\0';
        return;
    }
    end = strchr(p, ',');
    snprintf(buf, len, "%.*s", (int)(end != NULL ? (size_t)(end - p) : strlen(p)), p);
}

static int st_topo_list_len(const char *list)
{
    int n = (list[0] != '\0');

    for (const char *p = list; *p != '\0'; p++) {
        n += (*p == ',');
    }
    return n;
}

/* Ranks of a node whose NIC was left open (ST_TOPO_REC_NIC_SPREAD) take the equally near NICs in
 * turn, by local rank, per set of near NICs. */
static void st_topo_spread_nics(st_topo_t *t, int node)
{
    const int *ranks = &t->node_ranks[t->node_first[node]];
    int        n     = t->node_first[node + 1] - t->node_first[node];

    for (int i = 0; i < n; i++) {
        st_topo_rec_t *rec = &t->recs[ranks[i]];
        int            turn = 0;

        if (!(rec->flags & ST_TOPO_REC_NIC_SPREAD) || st_topo_list_len(rec->near) < 2) {
            continue;
        }
        for (int j = 0; j < i; j++) {
            const st_topo_rec_t *prev = &t->recs[ranks[j]];

            turn += (prev->flags & ST_TOPO_REC_NIC_SPREAD) && strcmp(prev->near, rec->near) == 0;
        }
        st_topo_list_item(rec->near, turn % st_topo_list_len(rec->near), rec->nic,
                          sizeof(rec->nic));
    }
}

/* Nodes, numbered by lowest rank, and local ranks in rank order. */
static st_status_t st_topo_group_nodes(st_topo_t *t)
{
    int  n = t->nranks;
    int *by_id = malloc((size_t)n * sizeof(*by_id));
    int *node_min = malloc((size_t)n * sizeof(*node_min));
    int *count = NULL;
    int  groups = 0;

    if (by_id == NULL || node_min == NULL) {
        free(by_id);
        free(node_min);
        return ST_ERR_NO_MEMORY;
    }
    for (int r = 0; r < n; r++) {
        by_id[r] = r;
    }
    st_topo_sorting = t;
    qsort(by_id, (size_t)n, sizeof(*by_id), st_topo_cmp_node_id);
    /* groups of equal ids, each ascending in rank: a group's first rank is its lowest */
    for (int i = 0; i < n; i++) {
        if (i == 0 || strcmp(t->recs[by_id[i]].node_id, t->recs[by_id[i - 1]].node_id) != 0) {
            node_min[groups++] = by_id[i];
        }
        t->node[by_id[i]] = groups - 1; /* provisional: group number */
    }
    /* node order = order of lowest ranks; map group -> node by ranking the minima */
    count = calloc((size_t)n, sizeof(*count));
    if (count == NULL) {
        free(by_id);
        free(node_min);
        return ST_ERR_NO_MEMORY;
    }
    for (int g = 0; g < groups; g++) {
        count[node_min[g]] = 1; /* mark the lowest rank of every group */
    }
    for (int r = 0, k = 0; r < n; r++) {
        if (count[r]) {
            count[r] = k++; /* node index of the group whose lowest rank is r */
        }
    }
    for (int r = 0; r < n; r++) {
        t->node[r] = count[node_min[t->node[r]]];
    }
    t->nnodes = groups;
    /* local ranks in rank order, and each node's ranks */
    memset(t->node_first, 0, (size_t)(groups + 1) * sizeof(*t->node_first));
    for (int r = 0; r < n; r++) {
        t->local[r] = t->node_first[t->node[r] + 1]++;
    }
    for (int k = 0; k < groups; k++) {
        t->node_first[k + 1] += t->node_first[k];
    }
    for (int r = 0; r < n; r++) {
        t->node_ranks[t->node_first[t->node[r]] + t->local[r]] = r;
    }
    free(count);
    free(by_id);
    free(node_min);
    return ST_OK;
}

/* Rails: rail l = local rank l of every node that has one, in node order. */
static st_status_t st_topo_build_rails(st_topo_t *t)
{
    int *cursor;
    int  nrails = 0;

    for (int k = 0; k < t->nnodes; k++) {
        nrails = ST_MAX(nrails, t->node_first[k + 1] - t->node_first[k]);
    }
    t->nrails     = nrails;
    t->rail_first = calloc((size_t)nrails + 1, sizeof(*t->rail_first));
    if (t->rail_first == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    for (int r = 0; r < t->nranks; r++) {
        t->rail_first[t->local[r] + 1]++;
    }
    for (int l = 0; l < nrails; l++) {
        t->rail_first[l + 1] += t->rail_first[l];
    }
    /* node order within a rail: visit the nodes in order, each rail filling from its start */
    cursor = malloc((size_t)nrails * sizeof(*cursor));
    if (cursor == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    memcpy(cursor, t->rail_first, (size_t)nrails * sizeof(*cursor));
    for (int k = 0; k < t->nnodes; k++) {
        for (int l = 0; l < t->node_first[k + 1] - t->node_first[k]; l++) {
            t->rail_ranks[cursor[l]++] = t->node_ranks[t->node_first[k] + l];
        }
    }
    free(cursor);
    return ST_OK;
}

static void st_topo_build_ring(st_topo_t *t)
{
    memcpy(t->ring, t->node_ranks, (size_t)t->nranks * sizeof(*t->ring));
    st_topo_sorting = t;
    for (int k = 0; k < t->nnodes; k++) {
        qsort(&t->ring[t->node_first[k]], (size_t)(t->node_first[k + 1] - t->node_first[k]),
              sizeof(*t->ring), st_topo_cmp_ring);
    }
    for (int pos = 0; pos < t->nranks; pos++) {
        t->ring_pos[t->ring[pos]] = pos;
    }
}

st_status_t st_topo_create(const st_topo_rec_t *const *recs, int nranks, st_topo_t **topo_p)
{
    st_topo_t  *t;
    st_status_t status = ST_ERR_NO_MEMORY;
    size_t      n = (size_t)nranks;

    if (nranks < 1 || recs == NULL) {
        return ST_ERR_INVALID;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    t->nranks     = nranks;
    t->recs       = malloc(n * sizeof(*t->recs));
    t->node       = malloc(n * sizeof(*t->node));
    t->local      = malloc(n * sizeof(*t->local));
    t->node_first = malloc((n + 1) * sizeof(*t->node_first));
    t->node_ranks = malloc(n * sizeof(*t->node_ranks));
    t->rail_ranks = malloc(n * sizeof(*t->rail_ranks));
    t->ring       = malloc(n * sizeof(*t->ring));
    t->ring_pos   = malloc(n * sizeof(*t->ring_pos));
    if (t->recs == NULL || t->node == NULL || t->local == NULL || t->node_first == NULL ||
        t->node_ranks == NULL || t->rail_ranks == NULL || t->ring == NULL ||
        t->ring_pos == NULL) {
        goto err_destroy;
    }
    for (int r = 0; r < nranks; r++) {
        t->recs[r] = *recs[r];
        /* records come from other processes: never trust their strings to be terminated */
        t->recs[r].node_id[ST_NODE_ID_LEN - 1]       = '\0';
        t->recs[r].gpu[ST_TOPO_BUSID_LEN - 1]        = '\0';
        t->recs[r].nic[ST_TOPO_NAME_LEN - 1]         = '\0';
        t->recs[r].near[ST_TOPO_NEAR_LEN - 1]        = '\0';
        t->recs[r].cpus[ST_TOPO_LIST_LEN - 1]        = '\0';
        t->recs[r].numas[ST_TOPO_LIST_LEN - 1]       = '\0';
    }
    ST_CHECK_GOTO(st_topo_group_nodes(t), status, err_destroy);
    ST_CHECK_GOTO(st_topo_build_rails(t), status, err_destroy);
    st_topo_build_ring(t);
    for (int k = 0; k < t->nnodes; k++) {
        st_topo_spread_nics(t, k);
    }
    *topo_p = t;
    return ST_OK;

err_destroy:
    st_topo_destroy(t);
    return status;
}

void st_topo_destroy(st_topo_t *t)
{
    if (t == NULL) {
        return;
    }
    free(t->recs);
    free(t->node);
    free(t->local);
    free(t->node_first);
    free(t->node_ranks);
    free(t->rail_first);
    free(t->rail_ranks);
    free(t->ring);
    free(t->ring_pos);
    free(t);
}

int st_topo_nranks(const st_topo_t *t)
{
    return t->nranks;
}

int st_topo_nnodes(const st_topo_t *t)
{
    return t->nnodes;
}

int st_topo_node(const st_topo_t *t, int rank)
{
    return t->node[rank];
}

int st_topo_local_rank(const st_topo_t *t, int rank)
{
    return t->local[rank];
}

int st_topo_local_size(const st_topo_t *t, int node)
{
    return t->node_first[node + 1] - t->node_first[node];
}

int st_topo_node_rank(const st_topo_t *t, int node, int local)
{
    return t->node_ranks[t->node_first[node] + local];
}

int st_topo_nrails(const st_topo_t *t)
{
    return t->nrails;
}

int st_topo_rail_size(const st_topo_t *t, int rail)
{
    return t->rail_first[rail + 1] - t->rail_first[rail];
}

int st_topo_rail_rank(const st_topo_t *t, int rail, int i)
{
    return t->rail_ranks[t->rail_first[rail] + i];
}

int st_topo_ring_rank(const st_topo_t *t, int pos)
{
    return t->ring[pos];
}

int st_topo_ring_pos(const st_topo_t *t, int rank)
{
    return t->ring_pos[rank];
}

const st_topo_rec_t *st_topo_rec(const st_topo_t *t, int rank)
{
    return &t->recs[rank];
}
