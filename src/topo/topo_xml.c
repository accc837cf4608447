/*
 * topo_xml.c - loading an hwloc topology (live, or from an XML file) and exporting it as XML.
 *
 * Loading keeps the I/O devices (hwloc's default drops them all, and with them every GPU and NIC)
 * and leaves out hwloc's discovery plugins that only add OS devices strata does not need: OpenCL
 * and GL open vendor libraries, and NVML, CUDA, RSMI and Level Zero initialise a GPU runtime in
 * every rank. GPUs are recognised by their PCI class instead (topo_machine.h), so nothing is lost,
 * and an XML keeps whatever OS devices it was exported with.
 *
 * A bad file must give a clear error, never a crash and never a silent fallback: when
 * hwloc_topology_set_xml fails, hwloc goes on to discover the live machine, which would hide the
 * mistake. hwloc itself only says "Invalid argument" (its parser messages need HWLOC_XML_VERBOSE,
 * read once per process, and go to stderr), so the file is first looked at here to name the
 * likely cause: missing, unreadable, empty, not XML, an XML version this hwloc cannot import, or
 * truncated.
 */
#include "config.h"
#include "topo/topo_machine.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"

/* Plugins whose OS devices strata does not use (see above); unknown names are ignored. */
static const char *const st_topo_skip_components[] = {
    "opencl", "gl", "nvml", "cuda", "rsmi", "levelzero"
};

/* The first bytes of the file and whether it ends the topology: enough to name what is wrong. */
static void st_topo_xml_diagnose(const char *path, char *why, size_t len)
{
    char   head[512], tail[64];
    size_t n, m = 0;
    FILE  *f = fopen(path, "rb");
    char  *ver;

    snprintf(why, len, "not an hwloc topology XML");
    if (f == NULL) {
        return;
    }
    n = fread(head, 1, sizeof(head) - 1, f);
    head[n] = '\0';
    if (fseek(f, -(long)(sizeof(tail) - 1), SEEK_END) != 0) {
        rewind(f);
    }
    m = fread(tail, 1, sizeof(tail) - 1, f);
    tail[m] = '\0';
    fclose(f);

    if (n == 0) {
        snprintf(why, len, "the file is empty");
    } else if (strchr("< \t\r\n", head[0]) == NULL && (unsigned char)head[0] != 0xef) {
        snprintf(why, len, "the file is not XML (it does not start with '<')");
    } else if (strstr(head, "<topology") == NULL) {
        snprintf(why, len, "no <topology> element near the start: not an hwloc XML");
    } else if ((ver = strstr(head, "<topology version=\"")) != NULL &&
               atoi(ver + strlen("<topology version=\"")) > HWLOC_API_VERSION >> 16) {
        snprintf(why, len, "its hwloc XML version %.3s is newer than this hwloc %d.x imports "
                 "(export it with hwloc 2.x)", ver + strlen("<topology version=\""),
                 HWLOC_API_VERSION >> 16);
    } else if (strstr(tail, "</topology>") == NULL && strstr(tail, "-->") == NULL) {
        snprintf(why, len, "the file does not end with </topology>: truncated?");
    } else {
        snprintf(why, len, "hwloc's parser rejects it (HWLOC_XML_VERBOSE=1 prints where)");
    }
}

/* Checks path before hwloc sees it; ST_ERR_INVALID (logged) when it cannot be read. */
static st_status_t st_topo_xml_check_file(const char *path, const char *what)
{
    struct stat st;
    FILE       *f;

    if (path[0] == '\0') {
        st_error(ST_SUB_TOPO, "%s is empty: name an hwloc XML file", what);
        return ST_ERR_INVALID;
    }
    if (stat(path, &st) != 0) {
        st_error(ST_SUB_TOPO, "%s %s: %s", what, path, strerror(errno));
        return ST_ERR_INVALID;
    }
    if (S_ISDIR(st.st_mode)) {
        st_error(ST_SUB_TOPO, "%s %s: is a directory, not an hwloc XML file", what, path);
        return ST_ERR_INVALID;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        st_error(ST_SUB_TOPO, "%s %s: cannot open it: %s", what, path, strerror(errno));
        return ST_ERR_INVALID;
    }
    fclose(f);
    return ST_OK;
}

/* A hex number from a sysfs attribute ("0x020000\n"); -1 when unreadable. */
static long st_topo_sysfs_hex(const char *dev, const char *attr)
{
    char  path[512], buf[32];
    FILE *f;
    long  v = -1;

    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/%s", dev, attr);
    f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    if (fgets(buf, sizeof(buf), f) != NULL) {
        v = strtol(buf, NULL, 16);
    }
    fclose(f);
    return v;
}

/* 1 when sysfs shows a PCI device that may be a GPU or a fabric NIC (topo_machine.h's rules on
 * the ids sysfs gives, an "infiniband" folder standing for an OpenFabrics device), or when it
 * cannot tell (no sysfs: not Linux, or a container that hides it). */
static int st_topo_live_has_io(void)
{
    DIR           *dir = opendir("/sys/bus/pci/devices");
    struct dirent *e;
    int            found = 0;

    if (dir == NULL) {
        return 1;
    }
    while (!found && (e = readdir(dir)) != NULL) {
        char ofed[512];
        long cls, vendor;

        if (e->d_name[0] == '.') {
            continue;
        }
        cls    = st_topo_sysfs_hex(e->d_name, "class");
        vendor = st_topo_sysfs_hex(e->d_name, "vendor");
        snprintf(ofed, sizeof(ofed), "/sys/bus/pci/devices/%s/infiniband", e->d_name);
        found = cls < 0 || vendor < 0 ||
                st_topo_pci_gpu_ids((unsigned)vendor, (unsigned)(cls >> 8)) ||
                st_topo_pci_fabric_ids((unsigned)vendor, (unsigned)(cls >> 8),
                                       access(ofed, F_OK) == 0);
    }
    closedir(dir);
    return found;
}

st_status_t st_topo_hwloc_load(const char *path, const char *what, unsigned flags,
                               hwloc_topology_t *topo_p)
{
    hwloc_topology_t topo;
    st_status_t      status;
    char             why[256];
    int              err;

    if (path != NULL) {
        ST_CHECK(st_topo_xml_check_file(path, what));
    }
    if (hwloc_topology_init(&topo) != 0) {
        st_error(ST_SUB_TOPO, "hwloc_topology_init failed: %s", strerror(errno));
        return ST_ERR_NO_MEMORY;
    }
    if (path != NULL || !(flags & ST_TOPO_LOAD_LAZY_IO) || st_topo_live_has_io()) {
        hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    } else {
        st_debug(ST_SUB_TOPO, "no GPU or fabric NIC in /sys/bus/pci: hwloc's I/O discovery "
                 "skipped");
    }
    for (size_t i = 0; i < ST_ARRAY_SIZE(st_topo_skip_components); i++) {
        /* fails only for a name this hwloc does not know, which then cannot run either */
        (void)hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                            st_topo_skip_components[i]);
    }
    if (path != NULL && hwloc_topology_set_xml(topo, path) != 0) {
        err = errno;
        st_topo_xml_diagnose(path, why, sizeof(why));
        st_error(ST_SUB_TOPO, "%s %s: hwloc cannot import it (hwloc_topology_set_xml: %s): %s",
                 what, path, strerror(err), why);
        status = ST_ERR_INVALID;
        goto err_destroy;
    }
    if (hwloc_topology_load(topo) != 0) {
        err = errno;
        if (path != NULL) {
            /* the libxml2 importer parses at load time */
            st_topo_xml_diagnose(path, why, sizeof(why));
            st_error(ST_SUB_TOPO, "%s %s: hwloc cannot load it (hwloc_topology_load: %s): %s",
                     what, path, strerror(err), why);
            status = ST_ERR_INVALID;
        } else {
            st_error(ST_SUB_TOPO, "hwloc cannot discover this machine: hwloc_topology_load: %s",
                     strerror(err));
            status = ST_ERR_IO;
        }
        goto err_destroy;
    }
    *topo_p = topo;
    return ST_OK;

err_destroy:
    hwloc_topology_destroy(topo);
    return status;
}

st_status_t st_topo_xml_export(hwloc_topology_t topo, const char *text, char **xml_p)
{
    char  *buf = NULL, *xml, *o;
    int    len = 0;
    size_t tlen = strlen(text);

    if (hwloc_topology_export_xmlbuffer(topo, &buf, &len, 0) != 0 || buf == NULL) {
        st_warn(ST_SUB_TOPO, "hwloc_topology_export_xmlbuffer failed: %s", strerror(errno));
        return ST_ERR_IO;
    }
    /* len counts the final NUL; each '-' of text may become "- " */
    xml = malloc((size_t)len + 2 * tlen + 16);
    if (xml == NULL) {
        hwloc_free_xmlbuffer(topo, buf);
        return ST_ERR_NO_MEMORY;
    }
    o = xml + snprintf(xml, (size_t)len + 1, "%s", buf);
    hwloc_free_xmlbuffer(topo, buf);
    o += sprintf(o, "<!--\n");
    /* "--" may not appear inside an XML comment, nor may it end with '-' */
    for (size_t i = 0; i < tlen; i++) {
        *o++ = text[i];
        if (text[i] == '-' && (i + 1 == tlen || text[i + 1] == '-')) {
            *o++ = ' ';
        }
    }
    sprintf(o, "\n-->\n");
    *xml_p = xml;
    return ST_OK;
}
