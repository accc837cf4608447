/*
 * topo_detect.c - reading a machine from its hwloc topology, and each rank's record.
 *
 * st_topo_machine_create finds the GPUs, the fabric NICs and the NUMA localities once (the rules
 * are in topo_machine.h), computes for every GPU and locality its equally near NICs and spreads
 * ties, so that a rank's record is only a binding query and a lookup. The process keeps one
 * machine (st_topo_machine_get): hwloc's discovery of the live machine with its PCI devices takes
 * tens of milliseconds, too much to repeat at every communicator init or split.
 *
 * A rank's GPU is the PCI device STRATA_GPU_BUSID names or, when it is unset, the current CUDA
 * device (topo_gpu.h; absent in builds without CUDA and on machines without a GPU or driver).
 *
 * "Nearest" compares the deepest common ancestor of two objects in hops from the root, not
 * hwloc's depth: I/O objects (bridges, PCI devices) have negative virtual depths, which is also
 * why hwloc_get_common_ancestor_obj cannot be used here (it requires objects with CPU sets).
 */
#include "config.h"
#include "topo/topo_machine.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "base/sys.h"
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

/* Reads "domain:bus:device.function" or "bus:device.function" (hex, either case, nothing else
 * around it) within PCI's ranges; 0 on success. */
static int st_topo_busid_scan(const char *text, unsigned *domain, unsigned *bus, unsigned *dev,
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

/* The CPU set an I/O object is local to (its first non-I/O ancestor's). */
static hwloc_const_cpuset_t st_topo_io_cpuset(hwloc_topology_t topo, hwloc_obj_t obj)
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

/* ---------------------------------------------------------------------------------------------- */
/* The process's machine and this rank's record                                                   */
/* ---------------------------------------------------------------------------------------------- */

/* One machine per process, guarded by a lock that is held across fork (as the logger's), so a
 * child never inherits it locked, nor a machine half made. */
static pthread_mutex_t    st_topo_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t     st_topo_once = PTHREAD_ONCE_INIT;
static st_topo_machine_t *st_topo_cached;
static int                st_topo_dumped; /* STRATA_TOPO_DUMP_FILE written by this process */
static int                st_topo_gpu_logged; /* why ranks have no GPU: said, by this process */

static void st_topo_atfork_prepare(void)
{
    pthread_mutex_lock(&st_topo_lock);
}

static void st_topo_atfork_parent(void)
{
    pthread_mutex_unlock(&st_topo_lock);
}

/* The child keeps the machine (same hardware) but is a new process for the dump. */
static void st_topo_atfork_child(void)
{
    st_topo_dumped     = 0;
    st_topo_gpu_logged = 0;
    pthread_mutex_unlock(&st_topo_lock);
}

static void st_topo_init_once(void)
{
    pthread_atfork(st_topo_atfork_prepare, st_topo_atfork_parent, st_topo_atfork_child);
}

/* The cached machine, (re)loaded when STRATA_TOPO_FILE differs from what it was made of. want_gpu:
 * a GPU is to be found in it. Called with st_topo_lock held. */
static st_status_t st_topo_machine_get_locked(int want_gpu, st_topo_machine_t **machine_p)
{
    const char        *file = st_core_config.topo_file;
    st_topo_machine_t *m;
    hwloc_topology_t   topo;
    double             t0 = st_time_now();
    int                lazy;

    if (file != NULL && file[0] == '\0') {
        file = NULL;
    }
    m = st_topo_cached;
    if (m != NULL && ((file == NULL && m->source == NULL) ||
                      (file != NULL && m->source != NULL && strcmp(file, m->source) == 0))) {
        *machine_p = m;
        return ST_OK;
    }
    /* a GPU to find or a dump to write need the PCI devices even where sysfs shows none */
    lazy = !want_gpu &&
           (st_core_config.gpu_busid == NULL || st_core_config.gpu_busid[0] == '\0') &&
           (st_core_config.topo_dump_file == NULL || st_core_config.topo_dump_file[0] == '\0');
    ST_CHECK(st_topo_hwloc_load(file, "STRATA_TOPO_FILE", lazy ? ST_TOPO_LOAD_LAZY_IO : 0, &topo));
    ST_CHECK(st_topo_machine_create(topo, file, &m));
    st_info(ST_SUB_TOPO, "topology of %s: %d packages, %d NUMA, %d cores, %d PUs, %d GPUs, "
            "%d fabric NICs (%.1f ms)", file != NULL ? file : "this machine", m->npackages,
            m->nnumas, m->ncores, m->npus, m->ngpus, m->nnics, (st_time_now() - t0) * 1e3);
    st_topo_machine_destroy(st_topo_cached); /* users hold the lock: nobody reads it now */
    st_topo_cached = m;
    *machine_p     = m;
    return ST_OK;
}

st_status_t st_topo_machine_get(st_topo_machine_t **machine_p)
{
    st_status_t status;

    pthread_once(&st_topo_once, st_topo_init_once);
    pthread_mutex_lock(&st_topo_lock);
    status = st_topo_machine_get_locked(0, machine_p);
    pthread_mutex_unlock(&st_topo_lock);
    return status;
}

/* "dddd:bb:dd.f" or "bb:dd.f" (hex) into the PCI device of topo; ST_ERR_INVALID (logged). */
static st_status_t st_topo_find_busid(const st_topo_machine_t *m, const char *busid,
                                      hwloc_obj_t *obj_p)
{
    unsigned    domain, bus, dev, func;
    hwloc_obj_t obj;
    char        gpus[256] = "";
    size_t      o = 0;

    if (st_topo_busid_scan(busid, &domain, &bus, &dev, &func) != 0) {
        st_error(ST_SUB_TOPO, "STRATA_GPU_BUSID '%s' is not a PCI bus id "
                 "(domain:bus:device.function in hex, as 0000:5f:00.0)", busid);
        return ST_ERR_INVALID;
    }
    obj = hwloc_get_pcidev_by_busid(m->topo, domain, bus, dev, func);
    if (obj == NULL) {
        for (int i = 0; i < m->ngpus && o < sizeof(gpus); i++) {
            o += (size_t)snprintf(gpus + o, sizeof(gpus) - o, " %s", m->gpus[i].busid);
        }
        st_error(ST_SUB_TOPO, "STRATA_GPU_BUSID %s names no PCI device of %s (GPUs:%s)", busid,
                 m->source != NULL ? m->source : "this machine", m->ngpus ? gpus : " none");
        return ST_ERR_INVALID;
    }
    for (int i = 0; i < m->ngpus && obj != NULL; i++) {
        if (m->gpus[i].obj == obj) {
            *obj_p = obj;
            return ST_OK;
        }
    }
    /* used anyway (a GPU of a vendor or class the rules miss), but a typo is likelier */
    st_warn(ST_SUB_TOPO, "STRATA_GPU_BUSID %s is PCI device %04x:%04x of class 0x%04x, not a GPU "
            "by vendor and class: used as this rank's GPU anyway", busid,
            obj->attr->pcidev.vendor_id, obj->attr->pcidev.device_id, obj->attr->pcidev.class_id);
    *obj_p = obj;
    return ST_OK;
}

/* Says once per process, at INFO, why a rank has no GPU when STRATA_GPU_BUSID is unset. */
static void st_topo_no_gpu_info(st_status_t why)
{
    if (__atomic_exchange_n(&st_topo_gpu_logged, 1, __ATOMIC_RELAXED)) {
        return;
    }
    if (why == ST_ERR_UNSUPPORTED) {
        st_info(ST_SUB_TOPO, "no GPU: STRATA_GPU_BUSID is unset and strata is built without CUDA");
    } else {
        st_info(ST_SUB_TOPO, "no GPU: STRATA_GPU_BUSID is unset and CUDA sees no device (no GPU "
                "or no driver; STRATA_DEBUG=DEBUG says which)");
    }
}

/* The PCI device of the CUDA device's bus id in m; NULL (a warning once per process) when m has
 * none: an XML of another machine, or hwloc without sight of the PCI bus (a container). A GPU
 * found this way never fails an init: without it the rank is placed as one without GPU. */
static hwloc_obj_t st_topo_find_cuda_gpu(const st_topo_machine_t *m, const char *busid)
{
    unsigned    domain, bus, dev, func;
    hwloc_obj_t obj = NULL;

    if (st_topo_busid_scan(busid, &domain, &bus, &dev, &func) == 0) {
        obj = hwloc_get_pcidev_by_busid(m->topo, domain, bus, dev, func);
    }
    if (obj == NULL && !__atomic_exchange_n(&st_topo_gpu_logged, 1, __ATOMIC_RELAXED)) {
        st_warn(ST_SUB_TOPO, "the CUDA device %s is no PCI device of %s (%d PCI devices): the "
                "rank is placed as one without GPU; STRATA_GPU_BUSID or STRATA_TOPO_FILE can "
                "name it", busid, m->source != NULL ? m->source : "this machine",
                hwloc_get_nbobjs_by_type(m->topo, HWLOC_OBJ_PCI_DEVICE));
    }
    return obj;
}

st_status_t st_topo_detect(st_topo_rec_t *rec_p)
{
    const char        *busid = st_core_config.gpu_busid;
    char               cuda_busid[ST_TOPO_BUSID_LEN] = "";
    st_topo_machine_t *m;
    hwloc_bitmap_t     bound = NULL;
    hwloc_obj_t        gpu = NULL;
    char               node_id[ST_NODE_ID_LEN];
    st_status_t        status;

    st_node_id(node_id, sizeof(node_id));
    pthread_once(&st_topo_once, st_topo_init_once);
    if (busid == NULL || busid[0] == '\0') {
        /* outside the lock: the first CUDA call loads the driver, which takes a while */
        status = st_topo_cuda_busid(cuda_busid, sizeof(cuda_busid));
        if (status == ST_ERR_NO_DEVICE || status == ST_ERR_UNSUPPORTED) {
            st_topo_no_gpu_info(status);
        } else if (status != ST_OK) {
            return status;
        }
    }
    pthread_mutex_lock(&st_topo_lock);
    ST_CHECK_GOTO(st_topo_machine_get_locked(cuda_busid[0] != '\0', &m), status, out);
    if (busid != NULL && busid[0] != '\0') {
        ST_CHECK_GOTO(st_topo_find_busid(m, busid, &gpu), status, out);
    } else if (cuda_busid[0] != '\0') {
        gpu = st_topo_find_cuda_gpu(m, cuda_busid);
    }
    bound = hwloc_bitmap_alloc();
    if (bound == NULL) {
        status = ST_ERR_NO_MEMORY;
        goto out;
    }
    if (hwloc_topology_is_thissystem(m->topo)) {
        /* the thread's binding: what numactl, taskset or a launcher's pinning gave it */
        if (hwloc_get_cpubind(m->topo, bound, HWLOC_CPUBIND_THREAD) != 0 &&
            hwloc_get_cpubind(m->topo, bound, HWLOC_CPUBIND_PROCESS) != 0) {
            hwloc_bitmap_zero(bound);
        }
    } else if (gpu != NULL) {
        /* an XML of some machine: this process's binding means nothing there; use the GPU's */
        hwloc_bitmap_copy(bound, st_topo_io_cpuset(m->topo, gpu));
    }
    status = st_topo_machine_rec(m, hwloc_bitmap_iszero(bound) ? NULL : bound, gpu, node_id,
                                 rec_p);
out:
    pthread_mutex_unlock(&st_topo_lock);
    hwloc_bitmap_free(bound);
    return status;
}

/* ---------------------------------------------------------------------------------------------- */
/* STRATA_TOPO_DUMP_FILE                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/* Writes xml to path through a temporary file and a rename, so a reader (or another node's rank
 * writing the same shared path) never sees half a file. */
static void st_topo_dump_write(const char *path, const char *xml)
{
    char   tmp[4200];
    FILE  *f;
    size_t len = strlen(xml);

    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    f = fopen(tmp, "w");
    if (f == NULL) {
        st_warn(ST_SUB_TOPO, "STRATA_TOPO_DUMP_FILE: cannot create %s: %m", tmp);
        return;
    }
    if (fwrite(xml, 1, len, f) != len || fclose(f) != 0) {
        st_warn(ST_SUB_TOPO, "STRATA_TOPO_DUMP_FILE: cannot write %s: %m", tmp);
        unlink(tmp);
        return;
    }
    if (rename(tmp, path) != 0) {
        st_warn(ST_SUB_TOPO, "STRATA_TOPO_DUMP_FILE: cannot rename %s to %s: %m", tmp, path);
        unlink(tmp);
        return;
    }
    st_info(ST_SUB_TOPO, "topology written to %s", path);
}

void st_topo_dump(const st_topo_t *topo, int rank)
{
    const char *pattern = st_core_config.topo_dump_file;
    char        path[4096];
    char       *text = NULL, *xml = NULL;
    size_t      len = 0;
    FILE       *mem;

    if (pattern == NULL || pattern[0] == '\0' || st_topo_local_rank(topo, rank) != 0) {
        return;
    }
    pthread_once(&st_topo_once, st_topo_init_once);
    pthread_mutex_lock(&st_topo_lock);
    if (st_topo_dumped || st_topo_cached == NULL) {
        goto out;
    }
    st_topo_dumped = 1;
    mem = open_memstream(&text, &len);
    if (mem == NULL) {
        st_warn(ST_SUB_TOPO, "STRATA_TOPO_DUMP_FILE: out of memory");
        goto out;
    }
    fprintf(mem, "strata's view, written by rank %d of %d (node %s)\n", rank,
            st_topo_nranks(topo), st_topo_rec(topo, rank)->node_id);
    st_topo_machine_print(st_topo_cached, mem, 0);
    st_topo_print(topo, mem, 0);
    fclose(mem);
    {
        char host[256] = "unknown";

        gethostname(host, sizeof(host) - 1);
        st_path_expand(pattern, host, path, sizeof(path));
    }
    if (st_topo_xml_export(st_topo_cached->topo, text, &xml) == ST_OK) {
        st_topo_dump_write(path, xml);
    }
out:
    pthread_mutex_unlock(&st_topo_lock);
    free(xml);
    free(text);
}
