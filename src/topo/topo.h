/*
 * topo.h - what strata knows about where its ranks run, and the hierarchy built from it.
 *
 * Two halves. The record (st_topo_rec_t) is what one rank detects about itself at communicator
 * init (topo_detect.c: node identity, CPU binding and NUMA domains, GPU, nearest fabric NIC) and
 * publishes to every rank through the bootstrap; it is fixed-size and pointer-free so it travels
 * as bytes. The hierarchy (st_topo_t, topo_hier.c) is computed identically on every rank from all
 * records: nodes (ranks with equal node ids), local ranks, rails (the ranks with one local index
 * across nodes, each with its NIC) and the ring order (node-contiguous; inside a node by NUMA
 * domain, then PCI position of the GPU). Algorithms read the hierarchy only through the accessors
 * below, never its fields, so how it is stored can change under them.
 *
 * Numbering conventions: nodes are numbered by their lowest rank (node 0 holds rank 0); local
 * ranks follow rank order within a node (as OMPI_COMM_WORLD_LOCAL_RANK does); rail l holds local
 * rank l of every node that has one, in node order, so with uneven nodes (3+1) the higher rails
 * are shorter. NUMA indexes are hwloc logical indexes.
 */
#ifndef ST_TOPO_H
#define ST_TOPO_H

#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "topo/node.h"

#define ST_TOPO_BUSID_LEN 16  /* "dddd:bb:dd.f" and NUL */
#define ST_TOPO_NAME_LEN  32  /* a NIC name: mlx5_0, hfi1_0, rdmap197s0, hsi0, or a bus id */
#define ST_TOPO_NEAR_LEN  128 /* equally near NICs, comma-separated */
#define ST_TOPO_LIST_LEN  64  /* an index list in hwloc's syntax ("0-23,48-71"); '+' if cut */

/* The NIC of this record was picked among equally near NICs without a locality to decide (no GPU
 * and a binding over several NUMA domains): the hierarchy spreads such ranks of a node over the
 * NICs, by local rank. */
#define ST_TOPO_REC_NIC_SPREAD 1u

typedef struct st_topo st_topo_t; /* the hierarchy; see below */

/* One rank's view of itself. Strings are NUL-terminated; "" means none. */
typedef struct st_topo_rec {
    char     node_id[ST_NODE_ID_LEN];
    char     gpu[ST_TOPO_BUSID_LEN];  /* PCI bus id of the rank's GPU */
    char     nic[ST_TOPO_NAME_LEN];   /* the fabric NIC the rank uses (nearest; ties spread) */
    char     near[ST_TOPO_NEAR_LEN];  /* every equally near fabric NIC, nic among them */
    char     cpus[ST_TOPO_LIST_LEN];  /* PUs the rank is bound to (OS indexes) */
    char     numas[ST_TOPO_LIST_LEN]; /* NUMA domains of those PUs (logical indexes) */
    int32_t  numa;                    /* first NUMA domain of cpus, -1 when unknown */
    int32_t  gpu_numa;                /* first NUMA domain local to the GPU, -1 without GPU */
    int32_t  first_pu;                /* lowest PU of cpus (ring tie-break), -1 when unknown */
    uint32_t ncores;                  /* cores with at least one PU in cpus */
    uint32_t flags;                   /* ST_TOPO_REC_* */
} st_topo_rec_t;

/* ---- detection (topo_detect.c) --------------------------------------------------------------- */

/* Fills *rec_p (on success only) for the calling process: node identity (STRATA_HOSTID or host
 * and boot id), the calling thread's CPU binding and its NUMA domains, the GPU, and the nearest
 * fabric NIC. The GPU is the PCI device STRATA_GPU_BUSID names; when it is unset, the calling
 * thread's current CUDA device (topo_gpu.h), and none in a build without CUDA, without a CUDA
 * device or driver (said once at INFO), or when the device is no PCI device of the topology (a
 * warning once). The hwloc topology (STRATA_TOPO_FILE, else the live machine with its I/O
 * devices) is loaded once per process and kept; later calls only query the binding and the CUDA
 * device. ST_ERR_INVALID (logged, naming the file or bus id and the reason) when STRATA_TOPO_FILE
 * cannot be loaded or STRATA_GPU_BUSID names no PCI device of the topology; ST_ERR_IO when hwloc
 * cannot discover the live machine, or a CUDA device exists but the runtime cannot name it;
 * ST_ERR_NO_MEMORY. */
st_status_t st_topo_detect(st_topo_rec_t *rec_p);

/* Writes STRATA_TOPO_DUMP_FILE (%h host, %p pid) when rank is local rank 0 of its node in topo,
 * once per process: the hwloc XML that detection used, followed by an XML comment with strata's
 * view of the machine and of topo. The file loads back with STRATA_TOPO_FILE or lstopo. Does
 * nothing when the parameter is unset. Failures are logged and otherwise ignored: a dump never
 * fails an init. */
void st_topo_dump(const st_topo_t *topo, int rank);

/* ---- the hierarchy (topo_hier.c) ------------------------------------------------------------- */

/* Builds the hierarchy of nranks ranks; recs[r] is rank r's record. Deterministic: every rank
 * computes the same from the same records. ST_ERR_INVALID for nranks < 1, ST_ERR_NO_MEMORY. */
st_status_t st_topo_create(const st_topo_rec_t *const *recs, int nranks, st_topo_t **topo_p);
void        st_topo_destroy(st_topo_t *topo);

int st_topo_nranks(const st_topo_t *topo);
int st_topo_nnodes(const st_topo_t *topo);
/* Node index of rank (0 .. nnodes-1). */
int st_topo_node(const st_topo_t *topo, int rank);
/* Rank's index among the ranks of its node, and the number of ranks of a node. */
int st_topo_local_rank(const st_topo_t *topo, int rank);
int st_topo_local_size(const st_topo_t *topo, int node);
/* The rank with local index `local` on node `node`. */
int st_topo_node_rank(const st_topo_t *topo, int node, int local);
/* Rails: nrails = the largest local size; rail l has one member per node with a local rank l. */
int st_topo_nrails(const st_topo_t *topo);
int st_topo_rail_size(const st_topo_t *topo, int rail);
/* The i-th member of rail (0 .. rail_size-1), in node order. */
int st_topo_rail_rank(const st_topo_t *topo, int rail, int i);
/* Ring order: the rank at position pos (0 .. nranks-1), and the position of rank. */
int st_topo_ring_rank(const st_topo_t *topo, int pos);
int st_topo_ring_pos(const st_topo_t *topo, int rank);
/* Rank's record as the hierarchy holds it (its nic may differ from what the rank detected when
 * ST_TOPO_REC_NIC_SPREAD spread it). */
const st_topo_rec_t *st_topo_rec(const st_topo_t *topo, int rank);

/* ---- printing (topo_print.c) ----------------------------------------------------------------- */

/* Writes the hierarchy: per node a picture of its ranks by NUMA domain with GPU, NIC and rail,
 * then the rails, the ring order, and one line per rank. json = 1: one JSON object instead. */
void st_topo_print(const st_topo_t *topo, FILE *stream, int json);

/* Loads the hwloc XML at path (the live machine when NULL; never the process's cached topology),
 * places one rank per GPU (one per NUMA domain when it has no GPU) on one node, and writes the
 * machine (counts, GPUs, fabric NICs, GPU -> NIC -> NUMA with the nearest NICs and their common
 * ancestor) and the hierarchy of those ranks. ST_ERR_INVALID (logged, naming the file and hwloc's
 * complaint) when the file is missing or not a topology hwloc can load; ST_ERR_IO when the live
 * discovery fails; ST_ERR_NO_MEMORY. */
st_status_t st_topo_file_print(const char *path, FILE *stream, int json);

#endif
