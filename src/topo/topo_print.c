/*
 * topo_print.c - what `collbench topo` and STRATA_TOPO_DUMP_FILE show: the machine (GPUs, fabric
 * NICs, GPU -> NIC -> NUMA) and the hierarchy (per node a picture of its ranks by NUMA domain,
 * the rails, the ring order, one line per rank), as text for people or as JSON for scripts.
 *
 * NCCL's misdetections in VMs and containers are hard to see because it prints little of what it
 * decided; the point here is that every decision strata takes from the topology (which NIC, why
 * that one, which ring) can be read back, and compared with the machine's documentation. The
 * text form of a topology file is also what users compare against tests/topologies/README.md,
 * so it writes ancestors as hwloc's tools do ("PCIBridge L#8 [0000:5a:00.0]").
 */
#include "config.h"
#include "topo/topo_machine.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"

#define ST_DASH(_s) ((_s)[0] != '\0' ? (_s) : "-")

/* A JSON string, or null for "". */
static void st_json_str(FILE *f, const char *s)
{
    if (s == NULL || s[0] == '\0') {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
        } else {
            fputc(c, f);
        }
    }
    fputc('"', f);
}

/* A comma-separated list as a JSON array of strings. */
static void st_json_list(FILE *f, const char *list)
{
    const char *p = list;

    fputc('[', f);
    while (p != NULL && *p != '\0') {
        const char *end = strchr(p, ',');
        char        item[ST_TOPO_NAME_LEN];

        snprintf(item, sizeof(item), "%.*s", (int)(end ? (size_t)(end - p) : strlen(p)), p);
        st_json_str(f, item);
        p = end ? end + 1 : NULL;
        if (p != NULL) {
            fputc(',', f);
        }
    }
    fputc(']', f);
}

static void st_json_int_or_null(FILE *f, int v)
{
    if (v < 0) {
        fputs("null", f);
    } else {
        fprintf(f, "%d", v);
    }
}

/* The host part of a node id ("host:bootid" -> "host"). */
static void st_topo_node_label(const char *node_id, char *buf, size_t len)
{
    const char *colon = strchr(node_id, ':');

    snprintf(buf, len, "%.*s", (int)(colon ? (size_t)(colon - node_id) : strlen(node_id)),
             node_id);
}

/* The NUMA domain(s) a rank is near: its GPU's, else its CPUs'. */
static void st_topo_rank_numa(const st_topo_rec_t *rec, char *buf, size_t len)
{
    if (rec->gpu[0] != '\0' && rec->gpu_numa >= 0) {
        snprintf(buf, len, "%d", rec->gpu_numa);
    } else {
        snprintf(buf, len, "%s", ST_DASH(rec->numas));
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* The hierarchy                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

static void st_topo_print_text(const st_topo_t *t, FILE *f)
{
    int  n = st_topo_nranks(t), nnodes = st_topo_nnodes(t), nrails = st_topo_nrails(t);
    char label[ST_NODE_ID_LEN], numa[ST_TOPO_LIST_LEN], last[ST_TOPO_LIST_LEN];

    fprintf(f, "# %d rank%s on %d node%s, %d rail%s\n", n, n == 1 ? "" : "s", nnodes,
            nnodes == 1 ? "" : "s", nrails, nrails == 1 ? "" : "s");
    for (int k = 0, pos = 0; k < nnodes; k++) {
        int size = st_topo_local_size(t, k);

        st_topo_node_label(st_topo_rec(t, st_topo_node_rank(t, k, 0))->node_id, label,
                           sizeof(label));
        fprintf(f, "node %d (%s): %d rank%s\n", k, label, size, size == 1 ? "" : "s");
        last[0] = '\0';
        /* in ring order, which groups a node's ranks by NUMA domain */
        for (int i = 0; i < size; i++, pos++) {
            int                  r   = st_topo_ring_rank(t, pos);
            const st_topo_rec_t *rec = st_topo_rec(t, r);

            st_topo_rank_numa(rec, numa, sizeof(numa));
            if (i == 0 || strcmp(numa, last) != 0) {
                fprintf(f, "  NUMA %s\n", numa);
                snprintf(last, sizeof(last), "%s", numa);
            }
            fprintf(f, "    local %-3d rank %-5d gpu %-13s nic %-12s rail %d\n",
                    st_topo_local_rank(t, r), r, ST_DASH(rec->gpu), ST_DASH(rec->nic),
                    st_topo_local_rank(t, r));
        }
    }
    for (int l = 0; l < nrails; l++) {
        fprintf(f, "rail %d:", l);
        for (int i = 0; i < st_topo_rail_size(t, l); i++) {
            int r = st_topo_rail_rank(t, l, i);

            fprintf(f, " %d (node %d, nic %s)", r, st_topo_node(t, r),
                    ST_DASH(st_topo_rec(t, r)->nic));
        }
        fputc('\n', f);
    }
    fputs("ring:", f);
    for (int pos = 0; pos < n; pos++) {
        int r = st_topo_ring_rank(t, pos);

        if (pos > 0 && st_topo_node(t, r) != st_topo_node(t, st_topo_ring_rank(t, pos - 1))) {
            fputs(" |", f);
        }
        fprintf(f, " %d", r);
    }
    fputc('\n', f);
    for (int r = 0; r < n; r++) {
        const st_topo_rec_t *rec = st_topo_rec(t, r);

        st_topo_rank_numa(rec, numa, sizeof(numa));
        fprintf(f, "rank %d: node %d local %d/%d cpus %s (%u cores) numa %s gpu %s nic %s "
                "rail %d ring %d\n", r, st_topo_node(t, r), st_topo_local_rank(t, r),
                st_topo_local_size(t, st_topo_node(t, r)), ST_DASH(rec->cpus), rec->ncores, numa,
                ST_DASH(rec->gpu), ST_DASH(rec->nic), st_topo_local_rank(t, r),
                st_topo_ring_pos(t, r));
    }
}

static void st_topo_print_json(const st_topo_t *t, FILE *f)
{
    int  n = st_topo_nranks(t);
    char numa[ST_TOPO_LIST_LEN];

    fprintf(f, "{\"nranks\": %d, \"nnodes\": %d, \"nrails\": %d,\n \"nodes\": [", n,
            st_topo_nnodes(t), st_topo_nrails(t));
    for (int k = 0; k < st_topo_nnodes(t); k++) {
        fprintf(f, "%s\n  {\"node\": %d, \"id\": ", k ? "," : "", k);
        st_json_str(f, st_topo_rec(t, st_topo_node_rank(t, k, 0))->node_id);
        fputs(", \"ranks\": [", f);
        for (int i = 0; i < st_topo_local_size(t, k); i++) {
            fprintf(f, "%s%d", i ? ", " : "", st_topo_node_rank(t, k, i));
        }
        fputs("]}", f);
    }
    fputs("],\n \"rails\": [", f);
    for (int l = 0; l < st_topo_nrails(t); l++) {
        fprintf(f, "%s\n  {\"rail\": %d, \"ranks\": [", l ? "," : "", l);
        for (int i = 0; i < st_topo_rail_size(t, l); i++) {
            fprintf(f, "%s%d", i ? ", " : "", st_topo_rail_rank(t, l, i));
        }
        fputs("], \"nics\": [", f);
        for (int i = 0; i < st_topo_rail_size(t, l); i++) {
            fputs(i ? ", " : "", f);
            st_json_str(f, st_topo_rec(t, st_topo_rail_rank(t, l, i))->nic);
        }
        fputs("]}", f);
    }
    fputs("],\n \"ring\": [", f);
    for (int pos = 0; pos < n; pos++) {
        fprintf(f, "%s%d", pos ? ", " : "", st_topo_ring_rank(t, pos));
    }
    fputs("],\n \"ranks\": [", f);
    for (int r = 0; r < n; r++) {
        const st_topo_rec_t *rec = st_topo_rec(t, r);

        st_topo_rank_numa(rec, numa, sizeof(numa));
        fprintf(f, "%s\n  {\"rank\": %d, \"node\": %d, \"local_rank\": %d, \"local_size\": %d, "
                "\"cpus\": ", r ? "," : "", r, st_topo_node(t, r), st_topo_local_rank(t, r),
                st_topo_local_size(t, st_topo_node(t, r)));
        st_json_str(f, rec->cpus);
        fprintf(f, ", \"cores\": %u, \"numa\": ", rec->ncores);
        st_json_str(f, numa);
        fputs(", \"gpu\": ", f);
        st_json_str(f, rec->gpu);
        fputs(", \"nic\": ", f);
        st_json_str(f, rec->nic);
        fputs(", \"nearest\": ", f);
        st_json_list(f, rec->near);
        fprintf(f, ", \"rail\": %d, \"ring_pos\": %d}", st_topo_local_rank(t, r),
                st_topo_ring_pos(t, r));
    }
    fputs("]}", f);
}

void st_topo_print(const st_topo_t *t, FILE *f, int json)
{
    if (json) {
        st_topo_print_json(t, f);
        fputc('\n', f);
    } else {
        st_topo_print_text(t, f);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* The machine                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

static void st_topo_near_text(const st_topo_machine_t *m, const st_topo_dev_t *dev, char *buf,
                              size_t len)
{
    char   anc[96];
    size_t o = 0;

    if (dev->nnear == 0) {
        snprintf(buf, len, "no fabric NIC");
        return;
    }
    o += (size_t)snprintf(buf, len, "nearest");
    for (int j = 0; j < dev->nnear && o < len; j++) {
        o += (size_t)snprintf(buf + o, len - o, "%s%s", j ? "," : " ", m->nics[dev->near[j]].name);
    }
    st_topo_obj_name(dev->ancestor, anc, sizeof(anc));
    if (o < len) {
        snprintf(buf + o, len - o, " @ %s", anc);
    }
}

static void st_topo_machine_text(const st_topo_machine_t *m, FILE *f)
{
    char why[512];

    fprintf(f, "# %s: %d package%s, %d NUMA domain%s, %d cores, %d PUs\n",
            m->source ? m->source : "this machine", m->npackages, m->npackages == 1 ? "" : "s",
            m->nnumas, m->nnumas == 1 ? "" : "s", m->ncores, m->npus);
    fprintf(f, "# %d GPU%s:", m->ngpus, m->ngpus == 1 ? "" : "s");
    for (int i = 0; i < m->ngpus; i++) {
        fprintf(f, " %s", m->gpus[i].busid);
    }
    fprintf(f, "\n# %d fabric NIC%s:", m->nnics, m->nnics == 1 ? "" : "s");
    for (int i = 0; i < m->nnics; i++) {
        fprintf(f, " %s (%s, NUMA %s)", m->nics[i].name, m->nics[i].busid,
                ST_DASH(m->nics[i].numas));
    }
    fputc('\n', f);
    if (m->ngpus > 0) {
        fputs("# GPU -> NIC -> NUMA (nearest NICs: deepest common ancestor with the GPU; ties "
              "spread over the GPUs)\n", f);
        for (int i = 0; i < m->ngpus; i++) {
            const st_topo_dev_t *g = &m->gpus[i];

            st_topo_near_text(m, g, why, sizeof(why));
            fprintf(f, "GPU %s -> %s -> NUMA %s  (%s)\n", g->busid,
                    g->nic >= 0 ? m->nics[g->nic].name : "-", ST_DASH(g->numas), why);
        }
        fputs("# one rank per GPU\n", f);
    } else {
        fputs("# no GPU: one rank per NUMA domain (nearest NICs: deepest common ancestor with its "
              "CPUs)\n", f);
        for (int i = 0; i < m->nlocs; i++) {
            const st_topo_dev_t *l = &m->locs[i];

            st_topo_near_text(m, l, why, sizeof(why));
            fprintf(f, "NUMA %s -> %s  (%s)\n", ST_DASH(l->numas),
                    l->nic >= 0 ? m->nics[l->nic].name : "-", why);
        }
    }
}

static void st_topo_dev_json(const st_topo_machine_t *m, const st_topo_dev_t *d, FILE *f)
{
    char anc[96] = "";

    if (d->busid[0] != '\0') {
        fputs("\"busid\": ", f);
        st_json_str(f, d->busid);
        fputs(", ", f);
    }
    fputs("\"numa\": ", f);
    st_json_str(f, d->numas);
    fputs(", \"nic\": ", f);
    st_json_str(f, d->nic >= 0 ? m->nics[d->nic].name : "");
    fputs(", \"nearest\": [", f);
    for (int j = 0; j < d->nnear; j++) {
        fputs(j ? ", " : "", f);
        st_json_str(f, m->nics[d->near[j]].name);
    }
    if (d->ancestor != NULL) {
        st_topo_obj_name(d->ancestor, anc, sizeof(anc));
    }
    fputs("], \"ancestor\": ", f);
    st_json_str(f, anc);
}

static void st_topo_machine_json(const st_topo_machine_t *m, FILE *f)
{
    fputs("\"source\": ", f);
    st_json_str(f, m->source ? m->source : "");
    fprintf(f, ", \"packages\": %d, \"numa_domains\": %d, \"cores\": %d, \"pus\": %d,\n",
            m->npackages, m->nnumas, m->ncores, m->npus);
    fputs(" \"gpus\": [", f);
    for (int i = 0; i < m->ngpus; i++) {
        fputs(i ? ",\n  {" : "\n  {", f);
        st_topo_dev_json(m, &m->gpus[i], f);
        fputs(", \"osdev\": ", f);
        st_json_str(f, m->gpus[i].name);
        fputc('}', f);
    }
    fputs("],\n \"nics\": [", f);
    for (int i = 0; i < m->nnics; i++) {
        fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", f);
        st_json_str(f, m->nics[i].name);
        fputs(", \"busid\": ", f);
        st_json_str(f, m->nics[i].busid);
        fputs(", \"numa\": ", f);
        st_json_str(f, m->nics[i].numas);
        fputc('}', f);
    }
    fputs("],\n \"numa_localities\": [", f);
    for (int i = 0; i < m->nlocs; i++) {
        fputs(i ? ",\n  {" : "\n  {", f);
        st_topo_dev_json(m, &m->locs[i], f);
        fputs(", \"first_numa\": ", f);
        st_json_int_or_null(f, m->locs[i].numa);
        fputc('}', f);
    }
    fputs("]", f);
}

void st_topo_machine_print(const st_topo_machine_t *m, FILE *f, int json)
{
    if (json) {
        st_topo_machine_json(m, f);
    } else {
        st_topo_machine_text(m, f);
    }
}

st_status_t st_topo_file_print(const char *path, FILE *f, int json)
{
    hwloc_topology_t      topo;
    st_topo_machine_t    *m = NULL;
    st_topo_rec_t        *recs = NULL;
    const st_topo_rec_t **ptrs = NULL;
    st_topo_t            *t = NULL;
    st_status_t           status;
    int                   n = 0;

    ST_CHECK(st_topo_hwloc_load(path, "topology file", 0, &topo));
    ST_CHECK(st_topo_machine_create(topo, path, &m));
    ST_CHECK_GOTO(st_topo_machine_place(m, &recs, &n), status, out);
    ptrs = malloc((size_t)n * sizeof(*ptrs));
    if (ptrs == NULL) {
        status = ST_ERR_NO_MEMORY;
        goto out;
    }
    for (int r = 0; r < n; r++) {
        ptrs[r] = &recs[r];
    }
    ST_CHECK_GOTO(st_topo_create(ptrs, n, &t), status, out);
    if (json) {
        fputs("{", f);
        st_topo_machine_print(m, f, 1);
        fputs(",\n \"hierarchy\": ", f);
        st_topo_print(t, f, 1);
        fputs("}\n", f);
    } else {
        st_topo_machine_print(m, f, 0);
        st_topo_print(t, f, 0);
    }
    status = ST_OK;
out:
    st_topo_destroy(t);
    free(ptrs);
    free(recs);
    st_topo_machine_destroy(m);
    return status;
}
