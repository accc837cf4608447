/*
 * test_topo.c - src/topo/: detection on recorded machines, the hierarchy, printing, errors.
 *
 * Every hwloc XML of tests/topologies/ is loaded as a rank would load STRATA_TOPO_FILE and checked
 * against the table below, which repeats tests/topologies/README.md's source record (computed
 * with hwloc 2.9's own tools): package / NUMA / core / PU counts, the GPUs and fabric NICs in
 * hwloc's order, and for each GPU its local NUMA domain, its equally near NICs with their deepest
 * common ancestor, and the NIC it gets once ties are spread over the GPUs sharing them. Variants
 * of those files made here check that GPUs are found without their OS devices and by their OS
 * devices alone. The live machine is only required to give a valid view (whatever it has). The
 * hierarchy builder is fed hand-made records for the layouts strata must handle, and bad files
 * must fail with ST_ERR_INVALID naming the file and the cause, never crash.
 *
 * The GPU from CUDA (topo_gpu.h): without a GPU, st_topo_cuda_busid says ST_ERR_NO_DEVICE in a
 * CUDA build (ST_TEST_HAVE_CUDA) and ST_ERR_UNSUPPORTED otherwise, and detection goes on without
 * GPU. In a CUDA build the runtime's device queries are wrapped (-Wl,--wrap, calling the real
 * ones by default) so that a made-up device checks the rest: the bus id normalised, the GPU found
 * in a recorded machine, STRATA_GPU_BUSID winning, no device query without a device.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"
#include "base/param.h"
#include "topo/topo.h"
#include "topo/topo_gpu.h"
#include "topo/topo_machine.h"
#include "transports/transport.h"

#ifdef ST_TEST_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define TOPO_DIR ST_TOP_SRCDIR "/tests/topologies/"

/* ---------------------------------------------------------------------------------------------- */
/* Expected facts of every recorded machine                                                      */
/* ---------------------------------------------------------------------------------------------- */

typedef struct exp_gpu {
    const char *busid;
    int         numa;     /* first local NUMA domain */
    const char *near;     /* equally near NICs, hwloc order; NULL: none */
    const char *ancestor; /* their deepest common ancestor with the GPU */
    const char *nic;      /* after ties are spread */
} exp_gpu_t;

typedef struct exp_machine {
    const char *file;
    int         packages, numas, cores, pus;
    const char *nics;     /* "name=busid" comma-separated, hwloc order; "" none */
    int         nlocs;    /* ranks without GPU: distinct NUMA cpusets */
    int         ngpus;
    exp_gpu_t   gpus[16];
} exp_machine_t;

#define NONE NULL, NULL, NULL

static const exp_machine_t machines[] = {
    {"nvidia-dgx2h-16gpu-nvswitch.xml", 2, 2, 4, 4, "", 2, 16, {
        {"0000:34:00.0", 0, NONE}, {"0000:36:00.0", 0, NONE}, {"0000:39:00.0", 0, NONE},
        {"0000:3b:00.0", 0, NONE}, {"0000:57:00.0", 0, NONE}, {"0000:59:00.0", 0, NONE},
        {"0000:5c:00.0", 0, NONE}, {"0000:5e:00.0", 0, NONE}, {"0000:b7:00.0", 1, NONE},
        {"0000:b9:00.0", 1, NONE}, {"0000:bc:00.0", 1, NONE}, {"0000:be:00.0", 1, NONE},
        {"0000:e0:00.0", 1, NONE}, {"0000:e2:00.0", 1, NONE}, {"0000:e5:00.0", 1, NONE},
        {"0000:e7:00.0", 1, NONE}}},
    {"dell-xe8640-4xh100-3hca-snc4.xml", 2, 8, 112, 224,
     "mlx5_2=0000:5e:00.0,mlx5_0=0000:4d:00.0,mlx5_1=0000:4d:00.1,mlx5_3=0000:da:00.0", 8, 4, {
        {"0000:5f:00.0", 1, "mlx5_2", "PCIBridge L#8 [0000:5a:00.0]", "mlx5_2"},
        {"0000:4e:00.0", 3, "mlx5_0,mlx5_1", "PCIBridge L#14 [0000:49:00.0]", "mlx5_0"},
        {"0000:db:00.0", 5, "mlx5_3", "PCIBridge L#22 [0000:d8:00.0]", "mlx5_3"},
        {"0000:cb:00.0", 7, "mlx5_3", "L3Cache L#1", "mlx5_3"}}},
    /* two GPUs share two ports at Package level: one port each */
    {"ibm-ac922-lassen-4xv100-4mlx5.xml", 2, 2, 40, 160,
     "mlx5_0=0003:01:00.0,mlx5_1=0003:01:00.1,mlx5_2=0033:01:00.0,mlx5_3=0033:01:00.1", 2, 4, {
        {"0004:04:00.0", 0, "mlx5_0,mlx5_1", "Package L#0", "mlx5_0"},
        {"0004:05:00.0", 0, "mlx5_0,mlx5_1", "Package L#0", "mlx5_1"},
        {"0035:03:00.0", 1, "mlx5_2,mlx5_3", "Package L#1", "mlx5_2"},
        {"0035:04:00.0", 1, "mlx5_2,mlx5_3", "Package L#1", "mlx5_3"}}},
    {"aws-g4dn-metal-8xt4-efa.xml", 2, 2, 48, 96, "rdmap197s0=0000:c5:00.0", 2, 8, {
        {"0000:18:00.0", 0, "rdmap197s0", "Machine L#0", "rdmap197s0"},
        {"0000:19:00.0", 0, "rdmap197s0", "Machine L#0", "rdmap197s0"},
        {"0000:35:00.0", 0, "rdmap197s0", "Machine L#0", "rdmap197s0"},
        {"0000:36:00.0", 0, "rdmap197s0", "Machine L#0", "rdmap197s0"},
        {"0000:e7:00.0", 1, "rdmap197s0", "Package L#1", "rdmap197s0"},
        {"0000:e8:00.0", 1, "rdmap197s0", "Package L#1", "rdmap197s0"},
        {"0000:f4:00.0", 1, "rdmap197s0", "Package L#1", "rdmap197s0"},
        {"0000:f5:00.0", 1, "rdmap197s0", "Package L#1", "rdmap197s0"}}},
    {"relion-x1904gt-2xp100-1hca-pcieswitch.xml", 2, 2, 36, 72, "mlx5_0=0000:08:00.0", 2, 2, {
        {"0000:04:00.0", 0, "mlx5_0", "PCIBridge L#2 [0000:02:00.0]", "mlx5_0"},
        {"0000:07:00.0", 0, "mlx5_0", "PCIBridge L#2 [0000:02:00.0]", "mlx5_0"}}},
    {"ibm-power8-minsky-4gpu-nvlink.xml", 2, 2, 8, 16, "", 2, 4, {
        {"0002:01:00.0", 0, NONE}, {"0003:01:00.0", 0, NONE}, {"000a:01:00.0", 1, NONE},
        {"000b:01:00.0", 1, NONE}}},
    {"hpe-ex235a-mi250x-8gcd-4slingshot.xml", 1, 4, 64, 128,
     "hsi2=0000:d5:00.0,hsi1=0000:cd:00.0,hsi3=0000:dd:00.0,hsi0=0000:c5:00.0", 4, 8, {
        {"0000:d1:00.0", 0, "hsi2", "Group0 L#0", "hsi2"},
        {"0000:d6:00.0", 0, "hsi2", "HostBridge L#2", "hsi2"},
        {"0000:c9:00.0", 1, "hsi1", "Group0 L#1", "hsi1"},
        {"0000:ce:00.0", 1, "hsi1", "HostBridge L#29", "hsi1"},
        {"0000:d9:00.0", 2, "hsi3", "Group0 L#2", "hsi3"},
        {"0000:de:00.0", 2, "hsi3", "HostBridge L#34", "hsi3"},
        {"0000:c1:00.0", 3, "hsi0", "Group0 L#3", "hsi0"},
        {"0000:c6:00.0", 3, "hsi0", "HostBridge L#39", "hsi0"}}},
    {"hpe-ex255a-4xmi300a-spx-4slingshot.xml", 4, 4, 96, 192,
     "hsi0=0000:01:00.0,hsi1=0001:01:00.0,hsi2=0002:01:00.0,hsi3=0003:01:00.0", 4, 4, {
        {"0000:02:00.0", 0, "hsi0", "HostBridge L#0", "hsi0"},
        {"0001:02:00.0", 1, "hsi1", "HostBridge L#5", "hsi1"},
        {"0002:02:00.0", 2, "hsi2", "HostBridge L#27", "hsi2"},
        {"0003:02:00.0", 3, "hsi3", "HostBridge L#30", "hsi3"}}},
    {"relion-2900e-2socket-1opa.xml", 2, 2, 36, 36, "hfi1_0=0000:83:00.0", 2, 0, {{0}}},
    {"sgi-uv2000-24socket-24numa-1ib.xml", 24, 24, 192, 384, "mlx4_0=0003:01:00.0", 24, 0, {{0}}},
    /* the Omni-Path HFI has no OS device: named by its bus id; MCDRAM shares DDR's cores */
    {"intel-knl7250-snc4-flat-hwloc1.xml", 1, 8, 68, 272,
     "0000:01:00.0=0000:01:00.0,mlx5_0=0000:02:00.0", 4, 0, {{0}}},
    {"dual-xeon-gold-6126-cpuonly.xml", 2, 2, 24, 48, "", 2, 0, {{0}}},
    {"single-core-i7-4790.xml", 1, 1, 4, 8, "", 1, 0, {{0}}},
};

/* ---------------------------------------------------------------------------------------------- */
/* Helpers                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

static st_topo_machine_t *load_machine(const char *path)
{
    hwloc_topology_t   topo;
    st_topo_machine_t *m = NULL;

    assert_int_equal(st_topo_hwloc_load(path, "test file", 0, &topo), ST_OK);
    assert_int_equal(st_topo_machine_create(topo, path, &m), ST_OK);
    return m;
}

static char *read_file(const char *path)
{
    FILE  *f = fopen(path, "rb");
    long   len;
    char  *buf;

    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    rewind(f);
    buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    buf[len] = '\0';
    fclose(f);
    return buf;
}

static void write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
}

static const char *tmp_path(const char *name)
{
    static char path[4][256];
    static int  next;
    const char *dir = getenv("TMPDIR");
    char       *p = path[next++ % 4];

    snprintf(p, sizeof(path[0]), "%s/strata-test-topo-%d-%s", dir ? dir : "/tmp", (int)getpid(),
             name);
    return p;
}

/* The near NICs of a device as a comma list. */
static void near_names(const st_topo_machine_t *m, const st_topo_dev_t *d, char *buf, size_t len)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int j = 0; j < d->nnear; j++) {
        o += (size_t)snprintf(buf + o, len - o, "%s%s", j ? "," : "", m->nics[d->near[j]].name);
    }
}

/* Checks the GPUs of m against e (GPU list, NUMA, near NICs, ancestor, spread NIC). */
static void check_gpus(const exp_machine_t *e, const st_topo_machine_t *m)
{
    char near[256], anc[96];

    assert_int_equal(m->ngpus, e->ngpus);
    for (int i = 0; i < e->ngpus; i++) {
        const st_topo_dev_t *g = &m->gpus[i];
        const exp_gpu_t     *x = &e->gpus[i];

        assert_string_equal(g->busid, x->busid);
        assert_int_equal(g->numa, x->numa);
        near_names(m, g, near, sizeof(near));
        assert_string_equal(near, x->near ? x->near : "");
        if (x->near != NULL) {
            st_topo_obj_name(g->ancestor, anc, sizeof(anc));
            assert_string_equal(anc, x->ancestor);
            assert_true(g->nic >= 0);
            assert_string_equal(m->nics[g->nic].name, x->nic);
        } else {
            assert_int_equal(g->nic, -1);
        }
    }
}

static void check_machine(const exp_machine_t *e, const st_topo_machine_t *m)
{
    char nics[512] = "";
    size_t o = 0;

    assert_int_equal(m->npackages, e->packages);
    assert_int_equal(m->nnumas, e->numas);
    assert_int_equal(m->ncores, e->cores);
    assert_int_equal(m->npus, e->pus);
    for (int i = 0; i < m->nnics; i++) {
        o += (size_t)snprintf(nics + o, sizeof(nics) - o, "%s%s=%s", i ? "," : "",
                              m->nics[i].name, m->nics[i].busid);
    }
    assert_string_equal(nics, e->nics);
    assert_int_equal(m->nlocs, e->nlocs);
    check_gpus(e, m);
}

/* ---------------------------------------------------------------------------------------------- */
/* Recorded machines                                                                              */
/* ---------------------------------------------------------------------------------------------- */

static void test_machines(void **state)
{
    char path[1024];

    for (size_t k = 0; k < ST_ARRAY_SIZE(machines); k++) {
        st_topo_machine_t *m;

        snprintf(path, sizeof(path), TOPO_DIR "%s", machines[k].file);
        print_message("    %s\n", machines[k].file);
        m = load_machine(path);
        check_machine(&machines[k], m);
        st_topo_machine_destroy(m);
    }
}

/* The ranks topology-file mode places, and their records: one per GPU (its NIC, NUMA and GPU),
 * or one per locality; all on one node, ring in NUMA then PCI order. */
static void test_machine_ranks(void **state)
{
    char path[1024];

    for (size_t k = 0; k < ST_ARRAY_SIZE(machines); k++) {
        const exp_machine_t  *e = &machines[k];
        st_topo_machine_t    *m;
        st_topo_rec_t        *recs;
        const st_topo_rec_t **ptrs;
        st_topo_t            *t;
        int                   n;

        snprintf(path, sizeof(path), TOPO_DIR "%s", e->file);
        m = load_machine(path);
        assert_int_equal(st_topo_machine_place(m, &recs, &n), ST_OK);
        assert_int_equal(n, e->ngpus > 0 ? e->ngpus : e->nlocs);
        ptrs = calloc((size_t)n, sizeof(*ptrs));
        for (int r = 0; r < n; r++) {
            ptrs[r] = &recs[r];
            assert_string_equal(recs[r].node_id, "node0");
            assert_true(recs[r].ncores > 0);
            assert_true(recs[r].numa >= 0);
            assert_true(recs[r].cpus[0] != '\0');
            if (e->ngpus > 0) {
                assert_string_equal(recs[r].gpu, e->gpus[r].busid);
                assert_int_equal(recs[r].gpu_numa, e->gpus[r].numa);
                assert_string_equal(recs[r].nic, e->gpus[r].nic ? e->gpus[r].nic : "");
                assert_string_equal(recs[r].near, e->gpus[r].near ? e->gpus[r].near : "");
            } else {
                assert_string_equal(recs[r].gpu, "");
                assert_int_equal(recs[r].gpu_numa, -1);
                assert_int_equal(recs[r].nic[0] != '\0', e->nics[0] != '\0');
            }
        }
        assert_int_equal(st_topo_create(ptrs, n, &t), ST_OK);
        assert_int_equal(st_topo_nnodes(t), 1);
        assert_int_equal(st_topo_nrails(t), n);
        for (int pos = 1; pos < n; pos++) {
            const st_topo_rec_t *a = st_topo_rec(t, st_topo_ring_rank(t, pos - 1));
            const st_topo_rec_t *b = st_topo_rec(t, st_topo_ring_rank(t, pos));
            int                  na = a->gpu[0] ? a->gpu_numa : a->numa;
            int                  nb = b->gpu[0] ? b->gpu_numa : b->numa;

            assert_true(na < nb || (na == nb && strcmp(a->gpu, b->gpu) <= 0));
        }
        st_topo_destroy(t);
        free(ptrs);
        free(recs);
        st_topo_machine_destroy(m);
    }
}

/* What users read: the GPU -> NIC -> NUMA lines of the text print, and valid-looking JSON. */
static void test_file_print(void **state)
{
    char path[1024], line[256];

    for (size_t k = 0; k < ST_ARRAY_SIZE(machines); k++) {
        const exp_machine_t *e = &machines[k];
        char                *out = NULL;
        size_t               len = 0;
        FILE                *f = open_memstream(&out, &len);

        snprintf(path, sizeof(path), TOPO_DIR "%s", e->file);
        assert_int_equal(st_topo_file_print(path, f, 0), ST_OK);
        fclose(f);
        for (int i = 0; i < e->ngpus; i++) {
            snprintf(line, sizeof(line), "GPU %s -> %s -> NUMA %d", e->gpus[i].busid,
                     e->gpus[i].nic ? e->gpus[i].nic : "-", e->gpus[i].numa);
            if (strstr(out, line) == NULL) {
                fail_msg("%s: no line \"%s\" in:\n%s", e->file, line, out);
            }
        }
        assert_non_null(strstr(out, "ring: "));
        free(out);

        f = open_memstream(&out, &len);
        assert_int_equal(st_topo_file_print(path, f, 1), ST_OK);
        fclose(f);
        assert_true(out[0] == '{');
        assert_non_null(strstr(out, "\"hierarchy\": {\"nranks\": "));
        assert_non_null(strstr(out, "\"ring\": ["));
        free(out);
    }
}

/* Removes from xml every OSDev element of the given osdev_type ("1" GPU, "5" co-processor). */
static size_t strip_osdevs(char *xml, const char *type)
{
    char   attr[32];
    size_t removed = 0;
    char  *p = xml;

    snprintf(attr, sizeof(attr), "osdev_type=\"%s\"", type);
    while ((p = strstr(p, "<object type=\"OSDev\"")) != NULL) {
        char *gt = strchr(p, '>'), *end;

        assert_non_null(gt);
        if (memmem(p, (size_t)(gt - p), attr, strlen(attr)) == NULL) {
            p = gt;
            continue;
        }
        /* an OS device has no child objects: it ends at "/>" or at the next "</object>" */
        end = (gt[-1] == '/') ? gt + 1 : strstr(gt, "</object>") + strlen("</object>");
        memmove(p, end, strlen(end) + 1);
        removed++;
    }
    return removed;
}

/* The GPUs of AWS and Lassen (CUDA, OpenCL and NVML OS devices) without any GPU OS device: still
 * found, by PCI vendor and class, with the same NICs. */
static void test_gpus_without_osdevs(void **state)
{
    static const char *const files[] = {"aws-g4dn-metal-8xt4-efa.xml",
                                        "ibm-ac922-lassen-4xv100-4mlx5.xml",
                                        "hpe-ex235a-mi250x-8gcd-4slingshot.xml"};

    for (size_t i = 0; i < ST_ARRAY_SIZE(files); i++) {
        const exp_machine_t *e = NULL;
        char                 path[1024];
        char                *xml;
        const char          *tmp = tmp_path("nogpuosdev.xml");
        st_topo_machine_t   *m;
        size_t               removed;

        for (size_t k = 0; k < ST_ARRAY_SIZE(machines); k++) {
            e = strcmp(machines[k].file, files[i]) == 0 ? &machines[k] : e;
        }
        snprintf(path, sizeof(path), TOPO_DIR "%s", files[i]);
        xml     = read_file(path);
        removed = strip_osdevs(xml, "1") + strip_osdevs(xml, "5");
        assert_true(removed >= (size_t)e->ngpus);
        assert_null(strstr(xml, "osdev_type=\"1\""));
        assert_null(strstr(xml, "osdev_type=\"5\""));
        write_file(tmp, xml, strlen(xml));
        m = load_machine(tmp);
        check_gpus(e, m);
        for (int g = 0; g < m->ngpus; g++) {
            assert_string_equal(m->gpus[g].name, ""); /* really no OS device left */
        }
        st_topo_machine_destroy(m);
        unlink(tmp);
        free(xml);
    }
}

/* Minsky's GPUs with a PCI class that is not a GPU's: found by their CUDA OS devices alone; and
 * without those either, not GPUs at all (as an NVSwitch). */
static void test_gpus_by_osdev_only(void **state)
{
    char               path[1024];
    const char        *tmp = tmp_path("osdevonly.xml");
    char              *xml, *p;
    st_topo_machine_t *m;
    int                changed = 0;

    snprintf(path, sizeof(path), TOPO_DIR "ibm-power8-minsky-4gpu-nvlink.xml");
    xml = read_file(path);
    for (p = xml; (p = strstr(p, "pci_type=\"0302 [10de")) != NULL; p++) {
        memcpy(p + strlen("pci_type=\""), "0680", 4);
        changed++;
    }
    assert_int_equal(changed, 4);
    write_file(tmp, xml, strlen(xml));
    m = load_machine(tmp);
    check_gpus(&machines[5], m);
    st_topo_machine_destroy(m);

    strip_osdevs(xml, "1");
    strip_osdevs(xml, "5");
    write_file(tmp, xml, strlen(xml));
    m = load_machine(tmp);
    assert_int_equal(m->ngpus, 0);
    st_topo_machine_destroy(m);
    unlink(tmp);
    free(xml);
}

/* ---------------------------------------------------------------------------------------------- */
/* The CUDA runtime, stood in for                                                                 */
/* ---------------------------------------------------------------------------------------------- */

#ifdef ST_TEST_HAVE_CUDA
/* The wrapped queries call through this table; the real runtime unless a test says otherwise.
 * ndev_queries counts the queries that need a device (a context must never be at stake when
 * cudaGetDeviceCount says there is none). */
cudaError_t __real_cudaGetDeviceCount(int *count);
cudaError_t __real_cudaGetDevice(int *device);
cudaError_t __real_cudaDeviceGetPCIBusId(char *busid, int len, int device);

static struct {
    cudaError_t (*get_device_count)(int *count);
    cudaError_t (*get_device)(int *device);
    cudaError_t (*get_pci_bus_id)(char *busid, int len, int device);
    int ndev_queries;
} cuda_mock = {__real_cudaGetDeviceCount, __real_cudaGetDevice, __real_cudaDeviceGetPCIBusId, 0};

cudaError_t __wrap_cudaGetDeviceCount(int *count);
cudaError_t __wrap_cudaGetDevice(int *device);
cudaError_t __wrap_cudaDeviceGetPCIBusId(char *busid, int len, int device);

cudaError_t __wrap_cudaGetDeviceCount(int *count)
{
    return cuda_mock.get_device_count(count);
}

cudaError_t __wrap_cudaGetDevice(int *device)
{
    cuda_mock.ndev_queries++;
    return cuda_mock.get_device(device);
}

cudaError_t __wrap_cudaDeviceGetPCIBusId(char *busid, int len, int device)
{
    cuda_mock.ndev_queries++;
    return cuda_mock.get_pci_bus_id(busid, len, device);
}

static const char *fake_busid = "0000:5F:00.0"; /* as CUDA writes it: upper case */

static cudaError_t fake_count_none(int *count)
{
    *count = 0;
    return cudaErrorNoDevice;
}

static cudaError_t fake_count_nodriver(int *count)
{
    *count = 0;
    return cudaErrorInsufficientDriver;
}

static cudaError_t fake_count_two(int *count)
{
    *count = 2;
    return cudaSuccess;
}

static cudaError_t fake_device_one(int *device)
{
    *device = 1;
    return cudaSuccess;
}

static cudaError_t fake_pci_bus_id(char *busid, int len, int device)
{
    assert_int_equal(device, 1); /* the current device's */
    snprintf(busid, (size_t)len, "%s", fake_busid);
    return cudaSuccess;
}

static cudaError_t fake_pci_bus_id_fails(char *busid, int len, int device)
{
    return cudaErrorInvalidDevice;
}

static void cuda_mock_real(void)
{
    cuda_mock.get_device_count = __real_cudaGetDeviceCount;
    cuda_mock.get_device       = __real_cudaGetDevice;
    cuda_mock.get_pci_bus_id   = __real_cudaDeviceGetPCIBusId;
}
#endif

/* No GPU from CUDA, whatever this machine has: recorded machines must not see the host's GPU. */
static void cuda_none(void)
{
#ifdef ST_TEST_HAVE_CUDA
    cuda_mock.get_device_count = fake_count_none;
#endif
}

static void cuda_real(void)
{
#ifdef ST_TEST_HAVE_CUDA
    cuda_mock_real();
#endif
}

/* ---------------------------------------------------------------------------------------------- */
/* The live machine, the process cache, STRATA_GPU_BUSID, the dump                                */
/* ---------------------------------------------------------------------------------------------- */

static void set_param(char **field, const char *value)
{
    free(*field);
    *field = value ? strdup(value) : NULL;
}

/* Whatever it has, this machine gives a valid one-rank-per-GPU (or per-NUMA-domain) view. */
static void test_live_machine(void **state)
{
    hwloc_topology_t      topo;
    st_topo_machine_t    *m;
    st_topo_rec_t        *recs, rec;
    const st_topo_rec_t **ptrs;
    st_topo_t            *t;
    int                   n;
    char                 *out = NULL;
    size_t                len = 0;
    FILE                 *f;

    assert_int_equal(st_topo_hwloc_load(NULL, "live", 0, &topo), ST_OK);
    assert_int_equal(st_topo_machine_create(topo, NULL, &m), ST_OK);
    assert_true(m->nnumas >= 1 && m->npus >= 1 && m->nlocs >= 1);
    print_message("    this machine: %d packages, %d NUMA, %d cores, %d PUs, %d GPUs, %d NICs\n",
                  m->npackages, m->nnumas, m->ncores, m->npus, m->ngpus, m->nnics);
    assert_int_equal(st_topo_machine_place(m, &recs, &n), ST_OK);
    assert_int_equal(n, m->ngpus > 0 ? m->ngpus : m->nlocs);
    ptrs = calloc((size_t)n, sizeof(*ptrs));
    for (int r = 0; r < n; r++) {
        ptrs[r] = &recs[r];
        assert_true(recs[r].numa >= 0);
        assert_true(recs[r].ncores >= 1);
        assert_true(recs[r].first_pu >= 0);
    }
    assert_int_equal(st_topo_create(ptrs, n, &t), ST_OK);
    assert_int_equal(st_topo_nnodes(t), 1);
    assert_int_equal(st_topo_local_size(t, 0), n);
    st_topo_destroy(t);
    free(ptrs);
    free(recs);

    /* skipping the I/O discovery where sysfs shows nothing of interest changes nothing */
    {
        hwloc_topology_t   lazy_topo;
        st_topo_machine_t *lazy;

        assert_int_equal(st_topo_hwloc_load(NULL, "live", ST_TOPO_LOAD_LAZY_IO, &lazy_topo),
                         ST_OK);
        assert_int_equal(st_topo_machine_create(lazy_topo, NULL, &lazy), ST_OK);
        assert_int_equal(lazy->ngpus, m->ngpus);
        assert_int_equal(lazy->nnics, m->nnics);
        assert_int_equal(lazy->nlocs, m->nlocs);
        assert_int_equal(lazy->ncores, m->ncores);
        st_topo_machine_destroy(lazy);
    }
    st_topo_machine_destroy(m);

    /* the public form, as `collbench topo` without arguments */
    f = open_memstream(&out, &len);
    assert_int_equal(strataTopoFilePrint(NULL, f, 0), strataSuccess);
    fclose(f);
    assert_non_null(strstr(out, "# this machine: "));
    free(out);

    /* a rank's record here: bound to what this thread may use */
    set_param(&st_core_config.topo_file, NULL);
    set_param(&st_core_config.gpu_busid, NULL);
    assert_int_equal(st_topo_detect(&rec), ST_OK);
    assert_true(rec.numa >= 0 && rec.ncores >= 1 && rec.cpus[0] != '\0');
    assert_true(rec.node_id[0] != '\0');
}

/* STRATA_TOPO_FILE and STRATA_GPU_BUSID as a rank sees them; the cache follows the file. */
static void test_detect_with_file(void **state)
{
    st_topo_rec_t      rec;
    st_topo_machine_t *m1, *m2;

    cuda_none();
    set_param(&st_core_config.topo_file, TOPO_DIR "ibm-ac922-lassen-4xv100-4mlx5.xml");
    set_param(&st_core_config.gpu_busid, "0035:04:00.0");
    assert_int_equal(st_topo_detect(&rec), ST_OK);
    assert_string_equal(rec.gpu, "0035:04:00.0");
    assert_string_equal(rec.nic, "mlx5_3"); /* the second GPU of package 1 gets the second port */
    assert_string_equal(rec.near, "mlx5_2,mlx5_3");
    assert_int_equal(rec.gpu_numa, 1);
    assert_int_equal(rec.numa, 1); /* an XML: the GPU's CPUs, not this process's binding */
    assert_int_equal(st_topo_machine_get(&m1), ST_OK);
    assert_int_equal(st_topo_machine_get(&m2), ST_OK);
    assert_ptr_equal(m1, m2); /* loaded once */

    /* short bus id form, another file */
    set_param(&st_core_config.topo_file, TOPO_DIR "dell-xe8640-4xh100-3hca-snc4.xml");
    set_param(&st_core_config.gpu_busid, "5F:00.0");
    assert_int_equal(st_topo_detect(&rec), ST_OK);
    assert_string_equal(rec.gpu, "0000:5f:00.0");
    assert_string_equal(rec.nic, "mlx5_2");
    assert_int_equal(rec.gpu_numa, 1);

    /* no GPU: the whole machine, every NIC equally near, the choice left to the hierarchy */
    set_param(&st_core_config.gpu_busid, NULL);
    assert_int_equal(st_topo_detect(&rec), ST_OK);
    assert_string_equal(rec.gpu, "");
    assert_string_equal(rec.near, "mlx5_2,mlx5_0,mlx5_1,mlx5_3");
    assert_true(rec.flags & ST_TOPO_REC_NIC_SPREAD);
    assert_int_equal(rec.ncores, 112);

    /* a bus id that is not there, or not a bus id */
    set_param(&st_core_config.gpu_busid, "0000:77:00.0");
    assert_int_equal(st_topo_detect(&rec), ST_ERR_INVALID);
    assert_non_null(strstr(st_log_last_error(), "0000:77:00.0"));
    assert_non_null(strstr(st_log_last_error(), "0000:5f:00.0")); /* lists the GPUs there */
    set_param(&st_core_config.gpu_busid, "gpu0");
    assert_int_equal(st_topo_detect(&rec), ST_ERR_INVALID);
    assert_non_null(strstr(st_log_last_error(), "not a PCI bus id"));

    set_param(&st_core_config.gpu_busid, NULL);
    set_param(&st_core_config.topo_file, NULL);
    cuda_real();
}

/* STRATA_TOPO_DUMP_FILE: an XML that loads back, with strata's view in a comment. */
static void test_dump(void **state)
{
    const char          *path = tmp_path("dump.xml");
    st_topo_rec_t        rec[2];
    const st_topo_rec_t *ptrs[2] = {&rec[0], &rec[1]};
    st_topo_t           *t;
    st_topo_machine_t   *m;
    char                *xml;

    set_param(&st_core_config.topo_file, TOPO_DIR "relion-x1904gt-2xp100-1hca-pcieswitch.xml");
    set_param(&st_core_config.gpu_busid, "0000:07:00.0");
    assert_int_equal(st_topo_detect(&rec[0]), ST_OK);
    set_param(&st_core_config.gpu_busid, "0000:04:00.0");
    assert_int_equal(st_topo_detect(&rec[1]), ST_OK);
    assert_int_equal(st_topo_create(ptrs, 2, &t), ST_OK);
    /* ring by PCI position: rank 1 (04:00.0) before rank 0 (07:00.0) */
    assert_int_equal(st_topo_ring_rank(t, 0), 1);
    assert_int_equal(st_topo_ring_rank(t, 1), 0);

    unlink(path);
    set_param(&st_core_config.topo_dump_file, path);
    st_topo_dump(t, 1); /* local rank 1: not the one that writes */
    assert_int_equal(access(path, F_OK), -1);
    st_topo_dump(t, 0);
    xml = read_file(path);
    assert_non_null(strstr(xml, "<topology"));
    assert_non_null(strstr(xml, "strata's view, written by rank 0 of 2"));
    assert_non_null(strstr(xml, "GPU 0000:07:00.0 -> mlx5_0 -> NUMA 0"));
    free(xml);
    m = load_machine(path); /* loads back as a topology file */
    assert_int_equal(m->ngpus, 2);
    st_topo_machine_destroy(m);
    unlink(path);
    /* once per process */
    st_topo_dump(t, 0);
    assert_int_equal(access(path, F_OK), -1);

    set_param(&st_core_config.topo_dump_file, NULL);
    set_param(&st_core_config.gpu_busid, NULL);
    set_param(&st_core_config.topo_file, NULL);
    st_topo_destroy(t);
}

/* The comment of a dump never holds "--": dashes from the text are broken up. */
static void test_xml_export_comment(void **state)
{
    st_topo_machine_t *m = load_machine(TOPO_DIR "single-core-i7-4790.xml");
    char              *xml, *c;

    assert_int_equal(st_topo_xml_export(m->topo, "a -- b - c-", &xml), ST_OK);
    c = strstr(xml, "<!--");
    assert_non_null(c);
    c += 4;
    assert_true(strstr(c, "--") == strstr(c, "-->")); /* only the closing one */
    assert_non_null(strstr(c, "a - - b - c- \n-->"));
    free(xml);
    st_topo_machine_destroy(m);
}

/* ---------------------------------------------------------------------------------------------- */
/* The GPU from CUDA                                                                              */
/* ---------------------------------------------------------------------------------------------- */

/* CUDA's and NVML's forms, and what is not a bus id. */
static void test_busid_parse(void **state)
{
    static const char *const good[][2] = {
        {"0000:5F:00.0", "0000:5f:00.0"},     {"00000000:5F:00.0", "0000:5f:00.0"},
        {"5f:00.0", "0000:5f:00.0"},          {"0035:04:1f.7", "0035:04:1f.7"},
        {"10000:E1:00.0", "10000:e1:00.0"}, /* a VMD domain: five digits */
    };
    static const char *const bad[] = {"", "gpu0", "0000:5f:00", "0000:100:00.0", "0000:5f:20.0",
                                      "0000:5f:00.8", "0x0:5f:00.0", " 5f:00.0", "5f:00.0 ",
                                      "0000:5f:00.0.0", "-1:5f:00.0", "ffffffffff:5f:00.0",
                                      "0000::00.0", "0000:5f:.0", "0000:5f:00."};
    char busid[ST_TOPO_BUSID_LEN];

    for (size_t i = 0; i < ST_ARRAY_SIZE(good); i++) {
        assert_int_equal(st_topo_busid_parse(good[i][0], busid, sizeof(busid)), ST_OK);
        assert_string_equal(busid, good[i][1]);
    }
    for (size_t i = 0; i < ST_ARRAY_SIZE(bad); i++) {
        snprintf(busid, sizeof(busid), "unchanged");
        if (st_topo_busid_parse(bad[i], busid, sizeof(busid)) != ST_ERR_INVALID) {
            fail_msg("'%s' taken for a bus id (%s)", bad[i], busid);
        }
        assert_string_equal(busid, "unchanged");
    }
    assert_int_equal(st_topo_busid_parse("0000:5f:00.0", busid, 12), ST_ERR_INVALID); /* NUL */
    assert_int_equal(st_topo_busid_parse("0000:5f:00.0", busid, 13), ST_OK);
}

/* This machine and CI have CUDA's runtime (maybe) but no GPU: no device, or no CUDA at all, and
 * a rank is still detected, without GPU; STRATA_GPU_BUSID still names one. */
static void test_cuda_busid_here(void **state)
{
    char          busid[ST_TOPO_BUSID_LEN] = "unchanged";
    st_topo_rec_t rec;
    st_status_t   status;

    cuda_real();
    status = st_topo_cuda_busid(busid, sizeof(busid));
    if (status == ST_OK) {
        char again[ST_TOPO_BUSID_LEN];

        /* a machine with a GPU: the id is in the normal form */
        print_message("    CUDA's current device is %s\n", busid);
        assert_int_equal(st_topo_busid_parse(busid, again, sizeof(again)), ST_OK);
        assert_string_equal(again, busid);
        return;
    }
    assert_true(status == ST_ERR_NO_DEVICE || status == ST_ERR_UNSUPPORTED);
#ifdef ST_TEST_HAVE_CUDA
    assert_int_equal(status, ST_ERR_NO_DEVICE);
#else
    assert_int_equal(status, ST_ERR_UNSUPPORTED);
#endif
    assert_string_equal(busid, "unchanged");

    set_param(&st_core_config.topo_file, NULL);
    set_param(&st_core_config.gpu_busid, NULL);
    assert_int_equal(st_topo_detect(&rec), ST_OK);
    assert_string_equal(rec.gpu, "");
    assert_int_equal(rec.gpu_numa, -1);

    set_param(&st_core_config.topo_file, TOPO_DIR "dell-xe8640-4xh100-3hca-snc4.xml");
    assert_int_equal(st_topo_detect(&rec), ST_OK);
    assert_string_equal(rec.gpu, "");
    set_param(&st_core_config.gpu_busid, "0000:db:00.0");
    assert_int_equal(st_topo_detect(&rec), ST_OK);
    assert_string_equal(rec.gpu, "0000:db:00.0");
    assert_string_equal(rec.nic, "mlx5_3");

    set_param(&st_core_config.gpu_busid, NULL);
    set_param(&st_core_config.topo_file, NULL);
}

/* A made-up CUDA device (CUDA builds only): its bus id, found in a recorded machine. */
static void test_cuda_gpu(void **state)
{
#ifdef ST_TEST_HAVE_CUDA
    char          busid[ST_TOPO_BUSID_LEN] = "unchanged";
    st_topo_rec_t rec;

    /* no device, or no usable driver: no device query at all */
    cuda_mock.get_device_count = fake_count_none;
    cuda_mock.get_device       = fake_device_one;
    cuda_mock.get_pci_bus_id   = fake_pci_bus_id;
    cuda_mock.ndev_queries     = 0;
    assert_int_equal(st_topo_cuda_busid(busid, sizeof(busid)), ST_ERR_NO_DEVICE);
    cuda_mock.get_device_count = fake_count_nodriver;
    assert_int_equal(st_topo_cuda_busid(busid, sizeof(busid)), ST_ERR_NO_DEVICE);
    assert_int_equal(cuda_mock.ndev_queries, 0);
    assert_string_equal(busid, "unchanged");

    /* two devices, the thread's is the second */
    cuda_mock.get_device_count = fake_count_two;
    assert_int_equal(st_topo_cuda_busid(busid, sizeof(busid)), ST_OK);
    assert_string_equal(busid, "0000:5f:00.0");
    assert_int_equal(cuda_mock.ndev_queries, 2);

    /* as a rank sees it on the Dell XE8640: the first H100, its own HCA */
    set_param(&st_core_config.topo_file, TOPO_DIR "dell-xe8640-4xh100-3hca-snc4.xml");
    set_param(&st_core_config.gpu_busid, NULL);
    assert_int_equal(st_topo_detect(&rec), ST_OK);
    assert_string_equal(rec.gpu, "0000:5f:00.0");
    assert_string_equal(rec.nic, "mlx5_2");
    assert_int_equal(rec.gpu_numa, 1);
    assert_int_equal(rec.numa, 1); /* an XML: the GPU's CPUs */

    /* STRATA_GPU_BUSID wins, and CUDA is not asked */
    cuda_mock.ndev_queries = 0;
    set_param(&st_core_config.gpu_busid, "0000:4e:00.0");
    assert_int_equal(st_topo_detect(&rec), ST_OK);
    assert_string_equal(rec.gpu, "0000:4e:00.0");
    assert_string_equal(rec.nic, "mlx5_0");
    assert_int_equal(cuda_mock.ndev_queries, 0);
    set_param(&st_core_config.gpu_busid, NULL);

    /* a device that the topology does not have (another machine's XML): no GPU, no failure */
    fake_busid = "0000:77:00.0";
    assert_int_equal(st_topo_detect(&rec), ST_OK);
    assert_string_equal(rec.gpu, "");
    assert_int_equal(rec.gpu_numa, -1);
    fake_busid = "0000:5F:00.0";

    /* a device the runtime cannot name: an error, said where it happens */
    cuda_mock.get_pci_bus_id = fake_pci_bus_id_fails;
    assert_int_equal(st_topo_cuda_busid(busid, sizeof(busid)), ST_ERR_IO);
    assert_non_null(strstr(st_log_last_error(), "cudaDeviceGetPCIBusId"));
    assert_int_equal(st_topo_detect(&rec), ST_ERR_IO);

    set_param(&st_core_config.topo_file, NULL);
    cuda_mock_real();
#else
    skip(); /* built without CUDA */
#endif
}

/* ---------------------------------------------------------------------------------------------- */
/* Bad files                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

static void expect_bad_file(const char *path, const char *why)
{
    hwloc_topology_t topo;
    st_topo_rec_t    rec;
    FILE            *f = fopen("/dev/null", "w");

    assert_int_equal(st_topo_hwloc_load(path, "STRATA_TOPO_FILE", 0, &topo), ST_ERR_INVALID);
    if (strstr(st_log_last_error(), path) == NULL || strstr(st_log_last_error(), why) == NULL) {
        fail_msg("error \"%s\" does not name %s and \"%s\"", st_log_last_error(), path, why);
    }
    /* as a rank at init, and through the public API */
    set_param(&st_core_config.topo_file, path);
    assert_int_equal(st_topo_detect(&rec), ST_ERR_INVALID);
    assert_non_null(strstr(st_log_last_error(), "STRATA_TOPO_FILE"));
    assert_int_equal(strataTopoFilePrint(path, f, 0), strataInvalidArgument);
    assert_non_null(strstr(strataGetLastError(NULL), path));
    set_param(&st_core_config.topo_file, NULL);
    fclose(f);
}

static void test_bad_files(void **state)
{
    const char *p;
    char       *xml;
    size_t      len;

    expect_bad_file("/nonexistent/strata/topo.xml", "No such file or directory");
    expect_bad_file(ST_TOP_SRCDIR "/tests", "is a directory");

    p = tmp_path("empty.xml");
    write_file(p, "", 0);
    expect_bad_file(p, "the file is empty");
    unlink(p);

    p = tmp_path("garbage.xml");
    write_file(p, "\x7f" "ELF\x02\x01 garbage", 14);
    expect_bad_file(p, "not XML");
    unlink(p);

    p = tmp_path("nottopo.xml");
    write_file(p, "<?xml version=\"1.0\"?>\n<html><body/></html>\n", 43);
    expect_bad_file(p, "no <topology> element");
    unlink(p);

    xml = read_file(TOPO_DIR "dell-xe8640-4xh100-3hca-snc4.xml");
    len = strlen(xml);
    p   = tmp_path("truncated.xml");
    write_file(p, xml, len / 2);
    expect_bad_file(p, "truncated");
    unlink(p);

    p = tmp_path("v3.xml");
    memcpy(strstr(xml, "<topology version=\"2.0\">") + strlen("<topology version=\""), "3", 1);
    write_file(p, xml, len);
    expect_bad_file(p, "version 3.0");
    unlink(p);
    free(xml);
}

/* Cut anywhere, a topology never crashes the loader: it loads or it is ST_ERR_INVALID. */
static void test_truncations(void **state)
{
    static const char *const files[] = {"ibm-ac922-lassen-4xv100-4mlx5.xml",
                                        "intel-knl7250-snc4-flat-hwloc1.xml"};
    const char              *p = tmp_path("cut.xml");
    hwloc_topology_t         topo;

    for (size_t i = 0; i < ST_ARRAY_SIZE(files); i++) {
        char   path[1024];
        char  *xml;
        size_t len;

        snprintf(path, sizeof(path), TOPO_DIR "%s", files[i]);
        xml = read_file(path);
        len = strlen(xml);
        for (int k = 1; k < 40; k++) {
            size_t      cut = len * (size_t)k / 40 + (size_t)k;
            st_status_t status;

            write_file(p, xml, ST_MIN(cut, len - 1));
            status = st_topo_hwloc_load(p, "cut", 0, &topo);
            if (status == ST_OK) {
                hwloc_topology_destroy(topo);
            } else {
                assert_int_equal(status, ST_ERR_INVALID);
            }
        }
        free(xml);
    }
    unlink(p);
}

/* ---------------------------------------------------------------------------------------------- */
/* The hierarchy                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

/* Records for ranks on nodes nodes[r] (a letter each), no GPU, one NUMA domain. */
static st_topo_t *make_hier(const char *nodes)
{
    int                   n = (int)strlen(nodes);
    st_topo_rec_t        *recs = calloc((size_t)n, sizeof(*recs));
    const st_topo_rec_t **ptrs = calloc((size_t)n, sizeof(*ptrs));
    st_topo_t            *t;

    for (int r = 0; r < n; r++) {
        snprintf(recs[r].node_id, sizeof(recs[r].node_id), "host-%c:0f3e", nodes[r]);
        recs[r].numa     = 0;
        recs[r].gpu_numa = -1;
        recs[r].first_pu = 0;
        ptrs[r]          = &recs[r];
    }
    assert_int_equal(st_topo_create(ptrs, n, &t), ST_OK);
    free(ptrs);
    free(recs); /* the hierarchy keeps copies */
    return t;
}

/* A list of ints as "a b c". */
static void ints(char *buf, size_t len, int n, int (*get)(const st_topo_t *, int),
                 const st_topo_t *t)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? " " : "", get(t, i));
    }
}

static int get_local(const st_topo_t *t, int r)
{
    return st_topo_local_rank(t, r);
}

static int get_node(const st_topo_t *t, int r)
{
    return st_topo_node(t, r);
}

static int get_ring(const st_topo_t *t, int pos)
{
    return st_topo_ring_rank(t, pos);
}

/* "0 4|1 5|..." : the members of every rail. */
static void rails(char *buf, size_t len, const st_topo_t *t)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int l = 0; l < st_topo_nrails(t); l++) {
        o += (size_t)snprintf(buf + o, len - o, "%s", l ? "|" : "");
        for (int i = 0; i < st_topo_rail_size(t, l); i++) {
            o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? " " : "",
                                  st_topo_rail_rank(t, l, i));
        }
    }
}

typedef struct hier_case {
    const char *name;
    const char *nodes;  /* node letter of each rank */
    const char *node;   /* expected node of each rank */
    const char *local;  /* expected local rank of each rank */
    const char *rails;  /* expected rails */
    const char *ring;   /* expected ring order */
} hier_case_t;

static const hier_case_t hier_cases[] = {
    {"2x2", "AABB", "0 0 1 1", "0 1 0 1", "0 2|1 3", "0 1 2 3"},
    {"2x4", "AAAABBBB", "0 0 0 0 1 1 1 1", "0 1 2 3 0 1 2 3", "0 4|1 5|2 6|3 7",
     "0 1 2 3 4 5 6 7"},
    {"3+1", "AAAB", "0 0 0 1", "0 1 2 0", "0 3|1|2", "0 1 2 3"},
    {"1+3", "ABBB", "0 1 1 1", "0 0 1 2", "0 1|2|3", "0 1 2 3"},
    {"2+3", "AABBB", "0 0 1 1 1", "0 1 0 1 2", "0 2|1 3|4", "0 1 2 3 4"},
    {"round-robin 2x4", "ABABABAB", "0 1 0 1 0 1 0 1", "0 0 1 1 2 2 3 3", "0 1|2 3|4 5|6 7",
     "0 2 4 6 1 3 5 7"},
    {"round-robin 5 on 2", "ABABA", "0 1 0 1 0", "0 0 1 1 2", "0 1|2 3|4", "0 2 4 1 3"},
    {"round-robin 3 nodes", "ABCABCAB", "0 1 2 0 1 2 0 1", "0 0 0 1 1 1 2 2",
     "0 1 2|3 4 5|6 7", "0 3 6 1 4 7 2 5"},
    /* node ids sort opposite to rank order: nodes still numbered by their lowest rank */
    {"reversed", "DDCCBBAA", "0 0 1 1 2 2 3 3", "0 1 0 1 0 1 0 1", "0 2 4 6|1 3 5 7",
     "0 1 2 3 4 5 6 7"},
    {"irregular", "BAACBCAB", "0 1 1 2 0 2 1 0", "0 0 1 0 1 1 2 2", "0 1 3|4 2 5|7 6",
     "0 4 7 1 2 6 3 5"},
    {"one rank", "A", "0", "0", "0", "0"},
};

static void test_hier_layouts(void **state)
{
    char buf[256];

    for (size_t k = 0; k < ST_ARRAY_SIZE(hier_cases); k++) {
        const hier_case_t *c = &hier_cases[k];
        st_topo_t         *t = make_hier(c->nodes);
        int                n = (int)strlen(c->nodes);

        print_message("    %s\n", c->name);
        assert_int_equal(st_topo_nranks(t), n);
        ints(buf, sizeof(buf), n, get_node, t);
        assert_string_equal(buf, c->node);
        ints(buf, sizeof(buf), n, get_local, t);
        assert_string_equal(buf, c->local);
        rails(buf, sizeof(buf), t);
        assert_string_equal(buf, c->rails);
        ints(buf, sizeof(buf), n, get_ring, t);
        assert_string_equal(buf, c->ring);
        /* consistency of the accessors */
        for (int r = 0; r < n; r++) {
            int node = st_topo_node(t, r), local = st_topo_local_rank(t, r);

            assert_int_equal(st_topo_node_rank(t, node, local), r);
            assert_true(local < st_topo_local_size(t, node));
            assert_int_equal(st_topo_ring_rank(t, st_topo_ring_pos(t, r)), r);
        }
        st_topo_destroy(t);
    }
}

/* Inside a node the ring follows NUMA domain, then GPU bus id, then first PU; nodes stay in
 * order of their lowest rank. */
static void test_hier_ring_proximity(void **state)
{
    static const struct {
        char        node;
        int         numa, gpu_numa, first_pu;
        const char *gpu;
    } spec[] = {
        {'A', 1, 1, 40, "0000:b1:00.0"}, /* 0 */
        {'A', 0, 0, 0, "0000:1a:00.0"},  /* 1 */
        {'A', 1, 1, 41, "0000:af:00.0"}, /* 2 */
        {'A', 0, 0, 1, "0000:18:00.0"},  /* 3 */
        {'B', 0, -1, 7, ""},             /* 4 */
        {'B', 0, -1, 3, ""},             /* 5 */
        {'B', 1, -1, 0, ""},             /* 6 */
    };
    st_topo_rec_t        recs[7];
    const st_topo_rec_t *ptrs[7];
    st_topo_t           *t;
    char                 buf[64];

    memset(recs, 0, sizeof(recs));
    for (int r = 0; r < 7; r++) {
        snprintf(recs[r].node_id, sizeof(recs[r].node_id), "%c", spec[r].node);
        snprintf(recs[r].gpu, sizeof(recs[r].gpu), "%s", spec[r].gpu);
        recs[r].numa     = spec[r].numa;
        recs[r].gpu_numa = spec[r].gpu_numa;
        recs[r].first_pu = spec[r].first_pu;
        ptrs[r]          = &recs[r];
    }
    assert_int_equal(st_topo_create(ptrs, 7, &t), ST_OK);
    ints(buf, sizeof(buf), 7, get_ring, t);
    assert_string_equal(buf, "3 1 2 0 5 4 6");
    ints(buf, sizeof(buf), 7, get_local, t);
    assert_string_equal(buf, "0 1 2 3 0 1 2"); /* local ranks stay in rank order */
    st_topo_destroy(t);
}

/* Ranks whose NIC was left open take the equally near NICs in turn, by local rank. */
static void test_hier_nic_spread(void **state)
{
    st_topo_rec_t        recs[6];
    const st_topo_rec_t *ptrs[6];
    st_topo_t           *t;
    static const char *const want[] = {"mlx5_0", "mlx5_1", "mlx5_0", "mlx5_0", "mlx5_1",
                                       "hfi1_0"};

    memset(recs, 0, sizeof(recs));
    for (int r = 0; r < 6; r++) {
        snprintf(recs[r].node_id, sizeof(recs[r].node_id), "%s", r < 3 ? "a" : "b");
        snprintf(recs[r].near, sizeof(recs[r].near), "mlx5_0,mlx5_1");
        snprintf(recs[r].nic, sizeof(recs[r].nic), "mlx5_0");
        recs[r].flags = ST_TOPO_REC_NIC_SPREAD;
        ptrs[r]       = &recs[r];
    }
    recs[5].flags = 0; /* decided by locality: kept */
    snprintf(recs[5].nic, sizeof(recs[5].nic), "hfi1_0");
    assert_int_equal(st_topo_create(ptrs, 6, &t), ST_OK);
    for (int r = 0; r < 6; r++) {
        assert_string_equal(st_topo_rec(t, r)->nic, want[r]);
    }
    st_topo_destroy(t);
}

/* Records come from other processes: unterminated strings must not be read past. */
static void test_hier_untrusted_strings(void **state)
{
    st_topo_rec_t        rec;
    const st_topo_rec_t *ptr = &rec;
    st_topo_t           *t;
    char                *out = NULL;
    size_t               len = 0;
    FILE                *f;

    memset(&rec, 'x', sizeof(rec));
    rec.numa = rec.gpu_numa = rec.first_pu = -1;
    rec.flags = 0;
    assert_int_equal(st_topo_create(&ptr, 1, &t), ST_OK);
    assert_int_equal(strlen(st_topo_rec(t, 0)->node_id), ST_NODE_ID_LEN - 1);
    f = open_memstream(&out, &len);
    st_topo_print(t, f, 0);
    st_topo_print(t, f, 1);
    fclose(f);
    free(out);
    st_topo_destroy(t);
    assert_int_equal(st_topo_create(&ptr, 0, &t), ST_ERR_INVALID);
}

/* 100k ranks on 12.5k nodes, numbered round-robin: fast enough for init (no quadratic step). */
static void test_hier_large(void **state)
{
    int                   n = 100000, nodes = 12500;
    st_topo_rec_t        *recs = calloc((size_t)n, sizeof(*recs));
    const st_topo_rec_t **ptrs = calloc((size_t)n, sizeof(*ptrs));
    st_topo_t            *t;

    for (int r = 0; r < n; r++) {
        snprintf(recs[r].node_id, sizeof(recs[r].node_id), "node%05d", r % nodes);
        ptrs[r] = &recs[r];
    }
    assert_int_equal(st_topo_create(ptrs, n, &t), ST_OK);
    assert_int_equal(st_topo_nnodes(t), nodes);
    assert_int_equal(st_topo_nrails(t), 8);
    assert_int_equal(st_topo_rail_size(t, 7), nodes);
    assert_int_equal(st_topo_rail_rank(t, 3, 2), 3 * nodes + 2);
    assert_int_equal(st_topo_ring_rank(t, 1), nodes);
    st_topo_destroy(t);
    free(ptrs);
    free(recs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_machines),
        cmocka_unit_test(test_machine_ranks),
        cmocka_unit_test(test_file_print),
        cmocka_unit_test(test_gpus_without_osdevs),
        cmocka_unit_test(test_gpus_by_osdev_only),
        cmocka_unit_test(test_live_machine),
        cmocka_unit_test(test_detect_with_file),
        cmocka_unit_test(test_dump),
        cmocka_unit_test(test_busid_parse),
        cmocka_unit_test(test_cuda_busid_here),
        cmocka_unit_test(test_cuda_gpu),
        cmocka_unit_test(test_xml_export_comment),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_hier_layouts),
        cmocka_unit_test(test_hier_ring_proximity),
        cmocka_unit_test(test_hier_nic_spread),
        cmocka_unit_test(test_hier_untrusted_strings),
        cmocka_unit_test(test_hier_large),
    };

    setenv("STRATA_DEBUG", "NONE", 1);
    unsetenv("STRATA_TOPO_FILE");
    unsetenv("STRATA_TOPO_DUMP_FILE");
    unsetenv("STRATA_GPU_BUSID");
    if (st_param_init(st_transport_config_tables()) != ST_OK) {
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
