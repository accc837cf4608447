/*
 * topo_machine.h - strata's reading of one hwloc topology (private to src/topo/ and its tests).
 *
 * A machine is an hwloc topology (live, or loaded from XML) plus what strata draws from it once:
 * the counts (packages, NUMA domains, cores, PUs), the GPUs, the fabric NICs, the NUMA
 * localities, and for every GPU and locality its equally near NICs and the one it uses. Per-rank
 * records are then cheap: a binding query and a lookup.
 *
 * What counts as what (the rules of tests/topologies/README.md, which the tests check):
 *  - GPU: a PCI device with a CUDA, NVML or RSMI OS device, or else of vendor NVIDIA (0x10de) or
 *    AMD (0x1002) and class display VGA/3D/other (0x0300, 0x0302, 0x0380) or processing
 *    accelerator (0x1200). NVSwitches (class 0x0680) are not GPUs.
 *  - fabric NIC: a network PCI device (class 0x02xx) with an OpenFabrics OS device (mlx5_0,
 *    hfi1_0, EFA's rdmap...), or of class InfiniBand (0x0207) or Fabric (0x0208, Omni-Path), or
 *    from Mellanox (0x15b3) or Cray/HPE Slingshot (0x17db). Its name is its OpenFabrics OS device,
 *    else its network OS device (hsi0), else its bus id. Plain Ethernet is not a fabric NIC.
 *  - nearest NICs of a GPU: those whose deepest common ancestor with the GPU's PCI device is
 *    deepest (fewest hops below the root), ties kept; of a CPU locality: the same with the
 *    smallest object covering its PUs.
 *  - the NIC used: equally near NICs are spread over the GPUs (or localities) that share them: the
 *    most constrained first (fewest near NICs), each taking the least used of its near NICs.
 *    Every rank of a machine computes the same assignment, independently.
 */
#ifndef ST_TOPO_MACHINE_H
#define ST_TOPO_MACHINE_H

#include <hwloc.h>

#include "topo/topo.h"

#define ST_PCI_VENDOR_NVIDIA   0x10de
#define ST_PCI_VENDOR_AMD      0x1002
#define ST_PCI_VENDOR_MELLANOX 0x15b3
#define ST_PCI_VENDOR_CRAY     0x17db /* HPE Slingshot (Cassini) */

/* A GPU by PCI ids alone (class_id: class << 8 | subclass, as hwloc's pcidev.class_id). */
static inline int st_topo_pci_gpu_ids(unsigned vendor, unsigned class_id)
{
    return (vendor == ST_PCI_VENDOR_NVIDIA || vendor == ST_PCI_VENDOR_AMD) &&
           (class_id == 0x0300 || class_id == 0x0302 || class_id == 0x0380 || class_id == 0x1200);
}

/* A fabric NIC by PCI ids alone; with an OpenFabrics device any network device is one too.
 * 0x0c06 is InfiniBand as a serial bus (the oldest HCAs). */
static inline int st_topo_pci_fabric_ids(unsigned vendor, unsigned class_id, int has_ofed)
{
    if (class_id == 0x0c06) {
        return 1;
    }
    return (class_id >> 8) == 0x02 &&
           (has_ofed || class_id == 0x0207 || class_id == 0x0208 ||
            vendor == ST_PCI_VENDOR_MELLANOX || vendor == ST_PCI_VENDOR_CRAY);
}

/* A GPU, a NIC or a CPU locality (a NUMA domain's PUs). */
typedef struct st_topo_dev {
    hwloc_obj_t          obj;                      /* PCI device; locality: covering object */
    hwloc_const_cpuset_t cpuset;                   /* locality: the NUMA domain's PUs */
    char                 busid[ST_TOPO_BUSID_LEN]; /* PCI bus id ("" for a locality) */
    char                 name[ST_TOPO_NAME_LEN];   /* NIC name; GPU OS device ("" when none) */
    char                 numas[ST_TOPO_LIST_LEN];  /* local NUMA domains, logical indexes */
    int                  numa;                     /* first of them, -1 when none */
    hwloc_obj_t          ancestor;                 /* deepest common ancestor with near NICs */
    int                  nnear;                    /* GPU, locality: equally near NICs ... */
    int                 *near;                     /* ... their indexes in machine->nics */
    int                  nic;                      /* GPU, locality: the NIC used, -1: none */
} st_topo_dev_t;

typedef struct st_topo_machine {
    hwloc_topology_t topo;
    char            *source;    /* XML path; NULL for the live machine */
    int              npackages;
    int              nnumas;
    int              ncores;
    int              npus;
    int              ngpus;
    int              nnics;
    int              nlocs;
    st_topo_dev_t   *gpus;      /* in hwloc's PCI order */
    st_topo_dev_t   *nics;      /* in hwloc's PCI order */
    st_topo_dev_t   *locs;      /* one per distinct NUMA cpuset, in NUMA order */
} st_topo_machine_t;

/* ---- topo_xml.c ------------------------------------------------------------------------------ */

/* Live machine only: skip hwloc's I/O discovery (the slow part, tens of ms where PCI
 * configuration reads trap to a hypervisor) when sysfs shows no PCI device that could be a GPU or
 * a fabric NIC, so the answer cannot change. */
#define ST_TOPO_LOAD_LAZY_IO 1u

/* Loads an hwloc topology with I/O devices kept: from the XML at path, or the live machine when
 * path is NULL. what names the source in errors ("STRATA_TOPO_FILE", "topology file"); flags:
 * ST_TOPO_LOAD_*. ST_ERR_INVALID (logged: the file and why: missing, unreadable, empty, not XML,
 * an XML version this hwloc cannot import, truncated, or hwloc's own error) for a bad file;
 * ST_ERR_IO when the live discovery fails; ST_ERR_NO_MEMORY. */
st_status_t st_topo_hwloc_load(const char *path, const char *what, unsigned flags,
                               hwloc_topology_t *topo_p);

/* The XML of topo with text appended as an XML comment (pairs of dashes in text are broken up,
 * as a comment may not hold "--"). *xml_p is malloc'd. ST_ERR_IO (a warning, not an error: a dump
 * is never worth failing for) when hwloc cannot export it; ST_ERR_NO_MEMORY. */
st_status_t st_topo_xml_export(hwloc_topology_t topo, const char *text, char **xml_p);

/* ---- topo_machine.c -------------------------------------------------------------------------- */

/* Reads a loaded topology (takes ownership of topo, even on failure; source may be NULL).
 * ST_ERR_NO_MEMORY. */
st_status_t st_topo_machine_create(hwloc_topology_t topo, const char *source,
                                   st_topo_machine_t **machine_p);
void        st_topo_machine_destroy(st_topo_machine_t *machine);

/* The record of a rank of machine bound to cpus (NULL: the whole machine) driving the PCI device
 * gpu (NULL: none); node_id is copied. ST_ERR_NO_MEMORY. */
st_status_t st_topo_machine_rec(const st_topo_machine_t *machine, hwloc_const_cpuset_t cpus,
                                hwloc_obj_t gpu, const char *node_id, st_topo_rec_t *rec_p);

/* The ranks topology-file mode places: one per GPU, or one per locality without GPUs. Fills
 * recs[0 .. *n_p - 1] (allocated by the callee) with node id "node0". ST_ERR_NO_MEMORY. */
st_status_t st_topo_machine_place(const st_topo_machine_t *machine, st_topo_rec_t **recs_p,
                                  int *n_p);

/* "PCIBridge L#8 [0000:5a:00.0]", "Package L#1": how the README names an ancestor. */
void st_topo_obj_name(hwloc_obj_t obj, char *buf, size_t len);

/* The CPU set an I/O object is local to (its first non-I/O ancestor's). */
hwloc_const_cpuset_t st_topo_io_cpuset(hwloc_topology_t topo, hwloc_obj_t obj);

/* Reads "domain:bus:device.function" or "bus:device.function" (hex, either case, nothing else
 * around it) within PCI's ranges; 0 on success. (st_topo_busid_parse, topo_gpu.h, normalises.) */
int st_topo_busid_scan(const char *text, unsigned *domain, unsigned *bus, unsigned *dev,
                       unsigned *func);

/* ---- topo_detect.c --------------------------------------------------------------------------- */

/* The process's machine: STRATA_TOPO_FILE or the live one, loaded at the first call and kept
 * (again when STRATA_TOPO_FILE changes, as in a forked child, which frees the previous one: the
 * pointer is valid until then). Errors as st_topo_hwloc_load. */
st_status_t st_topo_machine_get(st_topo_machine_t **machine_p);

/* ---- topo_print.c ---------------------------------------------------------------------------- */

/* Writes the machine part of a topology-file print (text or JSON members, no braces). */
void st_topo_machine_print(const st_topo_machine_t *machine, FILE *stream, int json);

#endif
