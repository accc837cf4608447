/*
 * topo_machine.c - reading a machine from its hwloc topology, and the record of a rank on it.
 *
 * st_topo_machine_create finds the GPUs, the fabric NICs and the NUMA localities once (the rules
 * are in topo_machine.h), computes for every GPU and locality its equally near NICs and spreads
 * ties, so that a rank's record (st_topo_machine_rec) is only a lookup, given the rank's binding
 * and GPU. Nothing here reads the environment or asks about the calling process: which machine,
 * binding and GPU are this rank's is topo_detect.c's to say. PCI bus ids are written and read
 * here too.
 *
 * "Nearest" compares the deepest common ancestor of two objects in hops from the root, not
 * hwloc's depth: I/O objects (bridges, PCI devices) have negative virtual depths, which is also
 * why hwloc_get_common_ancestor_obj cannot be used here (it requires objects with CPU sets).
 */
#include "config.h"
#include "topo/topo_machine.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "topo/topo_gpu.h"

/* ---------------------------------------------------------------------------------------------- */
/* Small helpers                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

static void st_topo_busid(hwloc_obj_t pci, char *buf, size_t len)
{
    snprintf(buf, len, "%04x:%02x:%02x.%x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
             pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

/* One field of a bus id at *p: 1 to 8 hex digits; *p moves past it. 0 on success. */
static int st_topo_hex_field(const char **p, unsigned *value_p)
{
    unsigned value = 0;
    int      n;

    for (n = 0; isxdigit((unsigned char)(*p)[n]); n++) {
        char c = (char)tolower((unsigned char)(*p)[n]);

        if (n == 8) {
            return -1;
        }
        value = value * 16 + (unsigned)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    *p += n;
    *value_p = value;
    return n > 0 ? 0 : -1;
}

int st_topo_busid_scan(const char *text, unsigned *domain, unsigned *bus, unsigned *dev,
                       unsigned *func)
{
    const char *p = text;
    unsigned    f[4];

    if (st_topo_hex_field(&p, &f[0]) != 0 || *p++ != ':' || st_topo_hex_field(&p, &f[1]) != 0) {
        return -1;
    }
    if (*p == '.') {
        p++;
        if (st_topo_hex_field(&p, &f[2]) != 0 || *p != '\0') {
            return -1;
        }
        *domain = 0;
        *bus    = f[0];
        *dev    = f[1];
        *func   = f[2];
    } else if (*p == ':') {
        p++;
        if (st_topo_hex_field(&p, &f[2]) != 0 || *p++ != '.' ||
            st_topo_hex_field(&p, &f[3]) != 0 || *p != '\0') {
            return -1;
        }
        *domain = f[0];
        *bus    = f[1];
        *dev    = f[2];
        *func   = f[3];
    } else {
        return -1;
    }
    return (*bus > 0xff || *dev > 0x1f || *func > 7) ? -1 : 0;
}

st_status_t st_topo_busid_parse(const char *text, char *busid, size_t len)
{
    unsigned domain, bus, dev, func;
    char     out[32];
    int      n;

    if (st_topo_busid_scan(text, &domain, &bus, &dev, &func) != 0) {
        return ST_ERR_INVALID;
    }
    n = snprintf(out, sizeof(out), "%04x:%02x:%02x.%x", domain, bus, dev, func);
    if (n < 0 || (size_t)n >= len) {
        return ST_ERR_INVALID;
    }
    memcpy(busid, out, (size_t)n + 1);
    return ST_OK;
}

/* hwloc's list syntax of set into buf; a '+' at the end says the list did not fit. */
static void st_topo_list(hwloc_const_bitmap_t set, char *buf, size_t len)
{
    int ret = hwloc_bitmap_list_snprintf(buf, len, set);

    if (ret >= (int)len && len >= 2) {
        buf[len - 2] = '+';
    }
}

/* Hops from the root: how deep an object is, I/O objects included. */
static int st_topo_hops(hwloc_obj_t obj)
{
    int hops = 0;

    for (; obj->parent != NULL; obj = obj->parent) {
        hops++;
    }
    return hops;
}

static hwloc_obj_t st_topo_common_ancestor(hwloc_obj_t a, hwloc_obj_t b)
{
    for (hwloc_obj_t x = a; x != NULL; x = x->parent) {
        for (hwloc_obj_t y = b; y != NULL; y = y->parent) {
            if (x == y) {
                return x;
            }
        }
    }
    return NULL;
}

void st_topo_obj_name(hwloc_obj_t obj, char *buf, size_t len)
{
    char type[64];
    int  n;

    hwloc_obj_type_snprintf(type, sizeof(type), obj, 1); /* 1: "L3Cache", as hwloc-info */
    n = snprintf(buf, len, "%s L#%u", type, obj->logical_index);
    if (obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type ==
                                             HWLOC_OBJ_BRIDGE_PCI && n > 0 && (size_t)n < len) {
        char busid[ST_TOPO_BUSID_LEN];

        st_topo_busid(obj, busid, sizeof(busid));
        snprintf(buf + n, len - (size_t)n, " [%s]", busid);
    }
}

/* The NUMA domains (logical indexes) whose PUs meet cpus; returns the first, -1 for none. */
static int st_topo_numas_of(hwloc_topology_t topo, hwloc_const_cpuset_t cpus, char *buf,
                            size_t len)
{
    hwloc_bitmap_t idx = hwloc_bitmap_alloc();
    hwloc_obj_t    numa = NULL;
    int            first;

    if (idx == NULL) {
        snprintf(buf, len, "?");
        return -1;
    }
    while ((numa = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, numa)) != NULL) {
        if (numa->cpuset != NULL && hwloc_bitmap_intersects(numa->cpuset, cpus)) {
            hwloc_bitmap_set(idx, numa->logical_index);
        }
    }
    st_topo_list(idx, buf, len);
    first = hwloc_bitmap_first(idx);
    hwloc_bitmap_free(idx);
    return first;
}

/* The OS device below pci of one of the types, or NULL. */
static hwloc_obj_t st_topo_osdev(hwloc_obj_t pci, hwloc_obj_osdev_type_t type)
{
    for (hwloc_obj_t c = pci->io_first_child; c != NULL; c = c->next_sibling) {
        if (c->type == HWLOC_OBJ_OS_DEVICE && c->attr->osdev.type == type) {
            return c;
        }
    }
    return NULL;
}

/* A CUDA, NVML or RSMI OS device below pci (by subtype, backend or name), or NULL. */
static hwloc_obj_t st_topo_gpu_osdev(hwloc_obj_t pci)
{
    static const char *const kinds[] = {"CUDA", "NVML", "RSMI"};

    for (hwloc_obj_t c = pci->io_first_child; c != NULL; c = c->next_sibling) {
        const char *backend;

        if (c->type != HWLOC_OBJ_OS_DEVICE || (c->attr->osdev.type != HWLOC_OBJ_OSDEV_GPU &&
                                               c->attr->osdev.type != HWLOC_OBJ_OSDEV_COPROC)) {
            continue;
        }
        backend = hwloc_obj_get_info_by_name(c, "Backend");
        for (size_t i = 0; i < ST_ARRAY_SIZE(kinds); i++) {
            if ((c->subtype != NULL && strcasecmp(c->subtype, kinds[i]) == 0) ||
                (backend != NULL && strcasecmp(backend, kinds[i]) == 0) ||
                (c->name != NULL && strncasecmp(c->name, kinds[i], strlen(kinds[i])) == 0)) {
                return c;
            }
        }
    }
    return NULL;
}

static int st_topo_is_gpu(hwloc_obj_t pci)
{
    return st_topo_gpu_osdev(pci) != NULL ||
           st_topo_pci_gpu_ids(pci->attr->pcidev.vendor_id, pci->attr->pcidev.class_id);
}

static int st_topo_is_fabric_nic(hwloc_obj_t pci)
{
    return st_topo_pci_fabric_ids(pci->attr->pcidev.vendor_id, pci->attr->pcidev.class_id,
                                  st_topo_osdev(pci, HWLOC_OBJ_OSDEV_OPENFABRICS) != NULL);
}

hwloc_const_cpuset_t st_topo_io_cpuset(hwloc_topology_t topo, hwloc_obj_t obj)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);

    return (anc != NULL && anc->cpuset != NULL) ? anc->cpuset
                                                : hwloc_topology_get_topology_cpuset(topo);
}

/* ---------------------------------------------------------------------------------------------- */
/* The machine                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

/* The NICs of machine that are nearest to obj: fills dev->near, nnear and ancestor. */
static st_status_t st_topo_near(const st_topo_machine_t *m, hwloc_obj_t obj, st_topo_dev_t *dev)
{
    int best = -1;

    dev->nnear    = 0;
    dev->ancestor = NULL;
    dev->nic      = -1;
    if (m->nnics == 0) {
        return ST_OK;
    }
    dev->near = malloc((size_t)m->nnics * sizeof(*dev->near));
    if (dev->near == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    for (int i = 0; i < m->nnics; i++) {
        hwloc_obj_t anc = st_topo_common_ancestor(obj, m->nics[i].obj);
        int         hops;

        if (anc == NULL) {
            continue; /* cannot happen in one tree; be safe */
        }
        hops = st_topo_hops(anc);
        if (hops > best) {
            best          = hops;
            dev->nnear    = 0;
            dev->ancestor = anc;
        }
        if (hops == best) {
            dev->near[dev->nnear++] = i;
        }
    }
    return ST_OK;
}

/* Spreads equally near NICs over devs: the most constrained first, each to its least used. */
static st_status_t st_topo_spread(const st_topo_machine_t *m, st_topo_dev_t *devs, int ndevs)
{
    int *load, *order;

    if (m->nnics == 0 || ndevs == 0) {
        return ST_OK;
    }
    load  = calloc((size_t)m->nnics, sizeof(*load));
    order = malloc((size_t)ndevs * sizeof(*order));
    if (load == NULL || order == NULL) {
        free(load);
        free(order);
        return ST_ERR_NO_MEMORY;
    }
    /* insertion sort by (nnear, index): stable, and ndevs is small */
    for (int i = 0; i < ndevs; i++) {
        int j = i;

        while (j > 0 && devs[order[j - 1]].nnear > devs[i].nnear) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (int k = 0; k < ndevs; k++) {
        st_topo_dev_t *dev = &devs[order[k]];
        int            pick = -1;

        for (int j = 0; j < dev->nnear; j++) {
            if (pick < 0 || load[dev->near[j]] < load[pick]) {
                pick = dev->near[j];
            }
        }
        dev->nic = pick;
        if (pick >= 0) {
            load[pick]++;
        }
    }
    free(load);
    free(order);
    return ST_OK;
}

static st_status_t st_topo_find_devices(st_topo_machine_t *m)
{
    hwloc_topology_t topo = m->topo;
    hwloc_obj_t      pci  = NULL;
    int              npci = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PCI_DEVICE);

    m->gpus = calloc((size_t)ST_MAX(npci, 1), sizeof(*m->gpus));
    m->nics = calloc((size_t)ST_MAX(npci, 1), sizeof(*m->nics));
    if (m->gpus == NULL || m->nics == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    while ((pci = hwloc_get_next_pcidev(topo, pci)) != NULL) {
        st_topo_dev_t *dev;
        hwloc_obj_t    os;
        int            is_nic = 0;

        if (st_topo_is_gpu(pci)) {
            dev = &m->gpus[m->ngpus++];
            os  = st_topo_gpu_osdev(pci);
            if (os == NULL) {
                os = st_topo_osdev(pci, HWLOC_OBJ_OSDEV_GPU);
            }
        } else if (st_topo_is_fabric_nic(pci)) {
            dev    = &m->nics[m->nnics++];
            is_nic = 1;
            os     = st_topo_osdev(pci, HWLOC_OBJ_OSDEV_OPENFABRICS);
            if (os == NULL) {
                os = st_topo_osdev(pci, HWLOC_OBJ_OSDEV_NETWORK);
            }
        } else {
            continue;
        }
        dev->obj = pci;
        dev->nic = -1;
        st_topo_busid(pci, dev->busid, sizeof(dev->busid));
        /* a NIC without OS device (a driver not loaded) is still a NIC: name it by bus id */
        snprintf(dev->name, sizeof(dev->name), "%s",
                 (os != NULL && os->name != NULL) ? os->name : is_nic ? dev->busid : "");
        dev->numa = st_topo_numas_of(topo, st_topo_io_cpuset(topo, pci), dev->numas,
                                     sizeof(dev->numas));
    }
    return ST_OK;
}

/* One locality per NUMA domain with PUs, skipping a domain whose PUs an earlier one has (the
 * MCDRAM or HBM next to DDR): a rank per locality is a rank per set of cores. */
static st_status_t st_topo_find_localities(st_topo_machine_t *m)
{
    hwloc_topology_t topo = m->topo;
    hwloc_obj_t      numa = NULL;

    m->locs = calloc((size_t)ST_MAX(m->nnumas, 1), sizeof(*m->locs));
    if (m->locs == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    while ((numa = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, numa)) != NULL) {
        int dup = 0;

        if (numa->cpuset == NULL || hwloc_bitmap_iszero(numa->cpuset)) {
            continue;
        }
        for (int i = 0; i < m->nlocs && !dup; i++) {
            dup = hwloc_bitmap_isequal(m->locs[i].cpuset, numa->cpuset);
        }
        if (dup) {
            continue;
        }
        m->locs[m->nlocs].cpuset = numa->cpuset;
        m->locs[m->nlocs].obj    = hwloc_get_obj_covering_cpuset(topo, numa->cpuset);
        if (m->locs[m->nlocs].obj == NULL) {
            m->locs[m->nlocs].obj = hwloc_get_root_obj(topo);
        }
        m->locs[m->nlocs].nic  = -1;
        m->locs[m->nlocs].numa = st_topo_numas_of(topo, numa->cpuset, m->locs[m->nlocs].numas,
                                                  sizeof(m->locs[m->nlocs].numas));
        m->nlocs++;
    }
    return ST_OK;
}

st_status_t st_topo_machine_create(hwloc_topology_t topo, const char *source,
                                   st_topo_machine_t **machine_p)
{
    st_topo_machine_t *m = calloc(1, sizeof(*m));
    st_status_t        status = ST_ERR_NO_MEMORY;

    if (m == NULL) {
        hwloc_topology_destroy(topo);
        return ST_ERR_NO_MEMORY;
    }
    m->topo      = topo;
    m->npackages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    m->nnumas    = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    m->ncores    = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    m->npus      = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    if (source != NULL && (m->source = strdup(source)) == NULL) {
        goto err_destroy;
    }
    ST_CHECK_GOTO(st_topo_find_devices(m), status, err_destroy);
    ST_CHECK_GOTO(st_topo_find_localities(m), status, err_destroy);
    for (int i = 0; i < m->ngpus; i++) {
        ST_CHECK_GOTO(st_topo_near(m, m->gpus[i].obj, &m->gpus[i]), status, err_destroy);
    }
    for (int i = 0; i < m->nlocs; i++) {
        ST_CHECK_GOTO(st_topo_near(m, m->locs[i].obj, &m->locs[i]), status, err_destroy);
    }
    ST_CHECK_GOTO(st_topo_spread(m, m->gpus, m->ngpus), status, err_destroy);
    ST_CHECK_GOTO(st_topo_spread(m, m->locs, m->nlocs), status, err_destroy);
    *machine_p = m;
    return ST_OK;

err_destroy:
    st_topo_machine_destroy(m);
    return status;
}

void st_topo_machine_destroy(st_topo_machine_t *m)
{
    if (m == NULL) {
        return;
    }
    for (int i = 0; m->gpus != NULL && i < m->ngpus; i++) {
        free(m->gpus[i].near);
    }
    for (int i = 0; m->locs != NULL && i < m->nlocs; i++) {
        free(m->locs[i].near);
    }
    free(m->gpus);
    free(m->nics);
    free(m->locs);
    free(m->source);
    hwloc_topology_destroy(m->topo);
    free(m);
}

/* ---------------------------------------------------------------------------------------------- */
/* Records                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

static void st_topo_near_names(const st_topo_machine_t *m, const st_topo_dev_t *dev, char *buf,
                               size_t len)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int j = 0; j < dev->nnear && o < len; j++) {
        o += (size_t)snprintf(buf + o, len - o, "%s%s", j ? "," : "", m->nics[dev->near[j]].name);
    }
}

static int st_topo_same_near(const st_topo_dev_t *a, const st_topo_dev_t *b)
{
    return a->nnear == b->nnear &&
           (a->nnear == 0 || memcmp(a->near, b->near, (size_t)a->nnear * sizeof(int)) == 0);
}

st_status_t st_topo_machine_rec(const st_topo_machine_t *m, hwloc_const_cpuset_t cpus,
                                hwloc_obj_t gpu, const char *node_id, st_topo_rec_t *rec_p)
{
    st_topo_rec_t        out, *rec = &out; /* *rec_p is set on success only */
    hwloc_topology_t     topo = m->topo;
    hwloc_const_cpuset_t all  = hwloc_topology_get_topology_cpuset(topo);
    hwloc_bitmap_t       set  = hwloc_bitmap_alloc();
    const st_topo_dev_t *pick = NULL;
    st_topo_dev_t        own;
    hwloc_obj_t          core = NULL;
    st_status_t          status;

    if (set == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    memset(rec, 0, sizeof(*rec));
    memset(&own, 0, sizeof(own));
    snprintf(rec->node_id, sizeof(rec->node_id), "%s", node_id);
    /* a binding outside this topology (an XML of another machine) means no binding */
    if (cpus != NULL) {
        hwloc_bitmap_and(set, cpus, all);
    }
    if (hwloc_bitmap_iszero(set)) {
        hwloc_bitmap_copy(set, all);
    }
    st_topo_list(set, rec->cpus, sizeof(rec->cpus));
    rec->numa     = st_topo_numas_of(topo, set, rec->numas, sizeof(rec->numas));
    rec->first_pu = hwloc_bitmap_first(set);
    rec->gpu_numa = -1;
    while ((core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core)) != NULL) {
        rec->ncores += hwloc_bitmap_intersects(core->cpuset, set) ? 1 : 0;
    }
    if (hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) == 0) {
        rec->ncores = (uint32_t)hwloc_bitmap_weight(set); /* an XML without cores */
    }

    if (gpu != NULL) {
        char numas[ST_TOPO_LIST_LEN];

        st_topo_busid(gpu, rec->gpu, sizeof(rec->gpu));
        rec->gpu_numa = st_topo_numas_of(topo, st_topo_io_cpuset(topo, gpu), numas,
                                         sizeof(numas));
        for (int i = 0; i < m->ngpus && pick == NULL; i++) {
            pick = (m->gpus[i].obj == gpu) ? &m->gpus[i] : NULL;
        }
        if (pick == NULL) {
            /* a PCI device that is not a GPU by our rules: its nearest, without spreading */
            ST_CHECK_GOTO(st_topo_near(m, gpu, &own), status, out);
            own.nic = own.nnear > 0 ? own.near[0] : -1;
            pick    = &own;
        }
    } else {
        hwloc_obj_t anchor = hwloc_get_obj_covering_cpuset(topo, set);

        ST_CHECK_GOTO(st_topo_near(m, anchor != NULL ? anchor : hwloc_get_root_obj(topo), &own),
                      status, out);
        own.nic = own.nnear > 0 ? own.near[0] : -1;
        pick    = &own;
        /* inside one locality with the same choice of NICs: take the locality's spread pick */
        for (int i = 0; i < m->nlocs; i++) {
            if (hwloc_bitmap_isincluded(set, m->locs[i].cpuset) &&
                st_topo_same_near(&m->locs[i], &own)) {
                pick = &m->locs[i];
                break;
            }
        }
        if (pick == &own && own.nnear > 1) {
            rec->flags |= ST_TOPO_REC_NIC_SPREAD;
        }
    }
    if (pick->nic >= 0) {
        snprintf(rec->nic, sizeof(rec->nic), "%s", m->nics[pick->nic].name);
        st_topo_near_names(m, pick, rec->near, sizeof(rec->near));
    }
    *rec_p = out;
    status = ST_OK;
out:
    free(own.near);
    hwloc_bitmap_free(set);
    return status;
}

st_status_t st_topo_machine_place(const st_topo_machine_t *m, st_topo_rec_t **recs_p, int *n_p)
{
    int            n = m->ngpus > 0 ? m->ngpus : ST_MAX(m->nlocs, 1);
    st_topo_rec_t *recs = calloc((size_t)n, sizeof(*recs));
    st_status_t    status;

    if (recs == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    for (int r = 0; r < n; r++) {
        if (m->ngpus > 0) {
            status = st_topo_machine_rec(m, st_topo_io_cpuset(m->topo, m->gpus[r].obj),
                                         m->gpus[r].obj, "node0", &recs[r]);
        } else {
            status = st_topo_machine_rec(m, m->nlocs > 0 ? m->locs[r].cpuset : NULL, NULL,
                                         "node0", &recs[r]);
        }
        if (status != ST_OK) {
            free(recs);
            return status;
        }
    }
    *recs_p = recs;
    *n_p    = n;
    return ST_OK;
}
