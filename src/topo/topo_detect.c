/*
 * topo_detect.c - this process's machine, and this rank's place in it.
 *
 * The process keeps one machine (st_topo_machine_get): hwloc's discovery of the live machine with
 * its PCI devices takes tens of milliseconds, too much to repeat at every communicator init or
 * split. STRATA_TOPO_FILE puts an XML in its place. st_topo_detect takes the calling thread's
 * binding and the rank's GPU and hands them to topo_machine.c for the record; st_topo_dump writes
 * STRATA_TOPO_DUMP_FILE from local rank 0 of a node.
 *
 * A rank's GPU is the PCI device STRATA_GPU_BUSID names or, when it is unset, the current CUDA
 * device (topo_gpu.h; absent in builds without CUDA and on machines without a GPU or driver).
 */
#include "config.h"
#include "topo/topo_machine.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "base/sys.h"
#include "topo/topo_gpu.h"

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
