/*
 * collbench.c - entry point of collbench: nccl-tests' command line, plus strata's launch options.
 *
 * Users of nccl-tests should feel at home: the same short and long flags (-b -e -f -i -n -w -c -d
 * -o -r -z, --minbytes ...), the same defaults where they make sense on host memory, and the
 * collective named either as an argument (all_reduce, all-reduce, all_reduce_perf, ...), with -t,
 * or by the name the binary is invoked under (a symlink all_reduce_perf -> collbench works). -t
 * selects the collective here (nccl-tests' thread count has no meaning for host ranks; "-t 1" and
 * "-g 1" are still accepted so that existing scripts run). Parsing ends in a cb_opts_t that
 * launch.c and bench.c read; nothing here touches strata except --print-config, because launch.c
 * may fork ranks and strata must initialise in each child (STRATA_HOSTID differs per child).
 * strata's own options: -A sets STRATA_ALGO in this process's environment before anything else
 * runs (strata reads its parameters at the first call of each process, and every launch mode
 * either forks the ranks from here or is the rank), --device sim|cuda sets STRATA_DEVICE the same
 * way, --phases and --mem-alloc are read by bench.c. --compress SPEC is read here with the codecs'
 * own parser (st_codec_parse, a pure function: no strata state in this process) and refused, one
 * line and status 2, with anything strataAllReduceCompressed does not take (another collective,
 * datatype or op, device buffers); bench.c runs it.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codec/codec.h"
#include "collbench.h"
#include "tune/tune.h"

/* Long-only options get values past the char range. */
enum {
    CB_OPT_NP = 256,
    CB_OPT_NODES,
    CB_OPT_LAYOUT,
    CB_OPT_RANK,
    CB_OPT_NRANKS,
    CB_OPT_NTHREADS,
    CB_OPT_PRINT_CONFIG,
    CB_OPT_TOPO_FILE,
    CB_OPT_JSON,
    CB_OPT_PHASES,
    CB_OPT_MEM_ALLOC,
    CB_OPT_OUT,
    CB_OPT_PROFILE,
    CB_OPT_COMPARE,
    CB_OPT_DEVICE,
    CB_OPT_SKEW,
    CB_OPT_COMPRESS
};

static const char cb_short_opts[] = "t:g:b:e:i:f:n:w:c:d:o:r:z:T:R:A:h";

static const struct option cb_long_opts[] = {
    {"coll",           required_argument, NULL, 't'},
    {"nthreads",       required_argument, NULL, CB_OPT_NTHREADS},
    {"ngpus",          required_argument, NULL, 'g'},
    {"minbytes",       required_argument, NULL, 'b'},
    {"maxbytes",       required_argument, NULL, 'e'},
    {"stepbytes",      required_argument, NULL, 'i'},
    {"stepfactor",     required_argument, NULL, 'f'},
    {"iters",          required_argument, NULL, 'n'},
    {"warmup_iters",   required_argument, NULL, 'w'},
    {"check",          required_argument, NULL, 'c'},
    {"datatype",       required_argument, NULL, 'd'},
    {"op",             required_argument, NULL, 'o'},
    {"root",           required_argument, NULL, 'r'},
    {"blocking",       required_argument, NULL, 'z'},
    {"timeout",        required_argument, NULL, 'T'},
    {"local_register", required_argument, NULL, 'R'},
    {"algo",           required_argument, NULL, 'A'},
    {"phases",         no_argument,       NULL, CB_OPT_PHASES},
    {"mem-alloc",      no_argument,       NULL, CB_OPT_MEM_ALLOC},
    {"mem_alloc",      no_argument,       NULL, CB_OPT_MEM_ALLOC},
    {"np",             required_argument, NULL, CB_OPT_NP},
    {"nodes",          required_argument, NULL, CB_OPT_NODES},
    {"layout",         required_argument, NULL, CB_OPT_LAYOUT},
    {"rank",           required_argument, NULL, CB_OPT_RANK},
    {"nranks",         required_argument, NULL, CB_OPT_NRANKS},
    {"print-config",   no_argument,       NULL, CB_OPT_PRINT_CONFIG},
    {"print_config",   no_argument,       NULL, CB_OPT_PRINT_CONFIG},
    {"topo-file",      required_argument, NULL, CB_OPT_TOPO_FILE},
    {"topo_file",      required_argument, NULL, CB_OPT_TOPO_FILE},
    {"json",           no_argument,       NULL, CB_OPT_JSON},
    {"out",            required_argument, NULL, CB_OPT_OUT},
    {"profile",        required_argument, NULL, CB_OPT_PROFILE},
    {"compare",        no_argument,       NULL, CB_OPT_COMPARE},
    {"device",         required_argument, NULL, CB_OPT_DEVICE},
    {"skew",           required_argument, NULL, CB_OPT_SKEW},
    {"compress",       required_argument, NULL, CB_OPT_COMPRESS},
    {"help",           no_argument,       NULL, 'h'},
    {NULL,             0,                 NULL, 0}
};

/* A name and the bit it selects, for the comma lists of -d and -o. */
typedef struct {
    const char *name;
    int         value;
} cb_alias_t;

static const cb_alias_t cb_dtype_aliases[] = {
    {"int8", strataInt8},       {"char", strataInt8},        {"uint8", strataUint8},
    {"int32", strataInt32},     {"int", strataInt32},        {"uint32", strataUint32},
    {"int64", strataInt64},     {"uint64", strataUint64},    {"half", strataFloat16},
    {"float16", strataFloat16}, {"fp16", strataFloat16},     {"float", strataFloat32},
    {"float32", strataFloat32}, {"fp32", strataFloat32},     {"double", strataFloat64},
    {"float64", strataFloat64}, {"fp64", strataFloat64},     {"bfloat16", strataBfloat16},
    {"bf16", strataBfloat16},
};

static const cb_alias_t cb_op_aliases[] = {
    {"sum", CB_OP_SUM}, {"prod", CB_OP_PROD}, {"max", CB_OP_MAX}, {"min", CB_OP_MIN},
    {"avg", CB_OP_AVG}, {"premulsum", CB_OP_PREMULSUM}, {"mulsum", CB_OP_PREMULSUM},
};

#define CB_ARRAY_LEN(_a) (sizeof(_a) / sizeof((_a)[0]))

static void cb_usage(FILE *out, const char *prog)
{
    fprintf(out,
"Usage: %s [COLL] [options]\n"
"       %s topo [--topo-file F] [--json] [launch options]\n"
"       %s model [--preset seed] [parameters]   (first argument; model --help)\n"
"       %s calibrate|tune --out F [--profile P] [launch options] [-b -e -f -n]\n"
"       %s model --profile P --compare [launch options] [-b -e -f -n]   (\"Fabric\" below)\n"
"  COLL: all_reduce reduce_scatter all_gather broadcast reduce sendrecv alltoall alltoallv\n"
"        gather scatter all (default all_reduce; also all-reduce, all_reduce_perf ...; several\n"
"        with commas). Sizes are one rank's larger buffer: all_gather, gather, scatter and the\n"
"        all-to-alls move size/nranks bytes per rank (pair); alltoall and alltoallv are never\n"
"        in place (N/A in the in-place columns)\n"
"  topo: print the topology instead: per node its ranks by NUMA domain with GPU, NIC and rail,\n"
"        the rails, the ring order and one line per rank, of the communicator of the launched\n"
"        ranks; with --topo-file F (an hwloc XML) no ranks are started: one rank per GPU of F\n"
"        (per NUMA domain without GPU) and its GPU -> NIC -> NUMA mapping; with neither, the\n"
"        same for this machine\n"
"      --json                  machine-readable output (topo)\n"
"  model: print step-time tables of the cost model (docs/model.md); no rank is started.\n"
"        --preset seed: first the figures of the texts on data-parallel communication\n"
"        that strata grew from (docs/model.md), then the faithful model\n"
"\n"
"nccl-tests options:\n"
"  -t,--coll <COLL>            collective, as the COLL argument (-t 1: nccl-tests' thread count)\n"
"  -b,--minbytes <size>        smallest size in bytes, k/M/G suffixes (default 8)\n"
"  -e,--maxbytes <size>        largest size (default 64M)\n"
"  -f,--stepfactor <n>         multiply the size by n each step (default 2)\n"
"  -i,--stepbytes <size>       add size each step instead of multiplying\n"
"  -n,--iters <n>              timed iterations per size (default 20)\n"
"  -w,--warmup_iters <n>       warmup iterations (default 5)\n"
"  -c,--check <0/1>            verify results and count #wrong (default 1)\n"
"  -d,--datatype <type>        int8 uint8 int32 uint32 int64 uint64 half float double bfloat16,\n"
"                              or all (default float)\n"
"  -o,--op <op>                sum prod max min avg premulsum (mulsum), or all (default sum)\n"
"  -r,--root <root>            root of broadcast, reduce, gather and scatter, or all\n"
"                              (default 0)\n"
"  -z,--blocking <0/1>         0: queue on a strata host stream (with --device: a device\n"
"                              stream) and synchronize; 1: NULL stream, every call returns when\n"
"                              complete (with --device: the legacy default stream, synchronized\n"
"                              after each call) (default 0)\n"
"  -T,--timeout <seconds>      kill the run after this long, 0 for never (default 1800)\n"
"  -R,--local_register <0/1>   1: as --mem-alloc (nccl-tests registers its ncclMemAlloc\n"
"                              buffers; strata's zero-copy buffers are strataMemAlloc's)\n"
"  -h,--help                   this text\n"
"\n"
"strata options:\n"
"  -A,--algo <algo>            ring hier small auto: STRATA_ALGO for every rank, overriding\n"
"                              the environment (default: STRATA_ALGO, else auto); small runs\n"
"                              all_reduce of at most 128 KiB only (an error when no collective\n"
"                              or size asked for fits), hier runs from 2 ranks on: a row\n"
"                              that ran another algorithm is named on a '#  ^ ran' line\n"
"      --phases                under each row, where the time of the last timed call went\n"
"                              (strataCommGetPhaseTimes, slowest rank per phase): for hier the\n"
"                              intra-node reduce-scatter (GB/s = size/time), the inter-node\n"
"                              all-reduce of the shards (busbw over the nodes) and the intra-node\n"
"                              all-gather, '*' on the longest; for the others the total time\n"
"      --skew <F>              alltoallv's load (default 1: alltoall's): every rank sends size\n"
"                              bytes in all, F x the mean per-pair count to rank 0 (a hot\n"
"                              MoE expert), the rest evenly to the others, 1 <= F <= nranks;\n"
"                              busbw is the busiest rank's bytes to or from the others over\n"
"                              the time; buffers take F x -e\n"
"      --mem-alloc             send/recv buffers from strataMemAlloc (node-shared memory: the\n"
"                              zero-copy intra-node path) instead of malloc\n"
"      --device <host|sim|cuda> where the buffers live (default host): sim or cuda sets\n"
"                              STRATA_DEVICE for every rank; each rank makes device (local rank\n"
"                              %% devices) current, puts its buffers in device memory (those of\n"
"                              strataMemAlloc with --mem-alloc), copies inputs in and results\n"
"                              out, and calls on a device stream (-z 1: the legacy default\n"
"                              stream), timed up to its stream_sync; the checked call is ordered\n"
"                              by the stream alone (producer kernel, call, consumer kernel). sim\n"
"                              is the simulated device on the CPU, a testing aid: its times are\n"
"                              never GPU performance\n"
"      --compress <spec>       all_reduce through strataAllReduceCompressed, the inter-node\n"
"                              phase compressed: none fp16 bf16 int8[:block] topk:<density>\n"
"                              sign[:block] (block default 256), ',noef' for no error feedback\n"
"                              (float, half, bfloat16; sum, avg; host buffers). Each size gets a\n"
"                              fresh compressor per rank (reset before the checked call); the\n"
"                              plain strataAllReduce runs the same iterations on the same inputs\n"
"                              (|partial sums| <= 32768, in fp16's range, for every type). Extra\n"
"                              columns: wire (B), the bytes the busiest rank sent over the\n"
"                              network in the last timed call's inter-node phase\n"
"                              (strataCommGetPhaseTimes bytes[1], max over ranks; 0 on one\n"
"                              node), and speedup, out of place and in place: plain time /\n"
"                              compressed time. -c 1: none and topk:1 must be exact; the others\n"
"                              count an element wrong when |got - exact| > eps x (N x A + S) + 0\n"
"                              (collbench's tolerance), N nodes, A = ranks of the largest node x\n"
"                              max |input| (avg: x 1/nranks; bounds a node's partial sum), S =\n"
"                              max |exact result|; eps: fp16 2^-11 + u, bf16 2^-8 + u, int8\n"
"                              1/254 + u (u: float 2^-24, half 2^-11, bfloat16 2^-8), topk and\n"
"                              sign 1; and a rank whose result is not bitwise rank 0's adds 1 to\n"
"                              #wrong\n"
"\n"
"Launch (one of):\n"
"  -np,--np <N>                fork N ranks on this machine\n"
"      --nodes <K>             ... as K emulated nodes of contiguous ranks\n"
"                              (STRATA_HOSTID=node<k>)\n"
"      --layout <n0,n1,...>    ... with these ranks per node (implies -np and --nodes; also\n"
"                              written n0+n1+...)\n"
"      --layout rr[K]          ... rank r on node r %% K (round-robin; K from --nodes)\n"
"  mpirun / srun               rank from OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID; the id\n"
"                              from STRATA_COMM_ID=host:port%s\n"
"  --rank <R> --nranks <N>     one rank, with STRATA_COMM_ID=host:port\n"
"\n"
"  --print-config              print every STRATA_* parameter and exit\n"
"\n"
"Fabric (docs/model.md), with the launch options above, all-reduce of float sums:\n"
"  calibrate --out F           measure each level (window latency, copy and reduce bandwidth;\n"
"                              each rail's latency and bandwidth, both directions at once) and\n"
"                              write the fabric profile F (JSON) for STRATA_PROFILE_FILE\n"
"  tune --out F [--profile P]  time small, ring and hier (chunk 256k..4m, depth 2 and 4, even or\n"
"                              rail-proportional shares) at every size of -b/-e/-f, write the\n"
"                              tuning table F for STRATA_TUNE_FILE, then time the tuned library\n"
"                              against the best forced configuration (calibrates first unless\n"
"                              --profile P is given)\n"
"  model --profile P --compare the model's choice per size, measured next to predicted (total\n"
"                              and hier phases, error in percent); --profile needs --compare\n"
"                              (plain model takes the fabric from its parameters: model --help)\n"
"\n"
"Exit status: 0 when every result is right, 1 when some #wrong is not 0, 2 when a call fails.\n",
            prog, prog, prog, prog, prog,
#ifdef HAVE_MPI
            " or, when unset, MPI_Bcast"
#else
            ""
#endif
            );
}

static void cb_lower(char *dst, size_t len, const char *src)
{
    size_t i;

    for (i = 0; i + 1 < len && src[i] != '\0'; i++) {
        dst[i] = (char)tolower((unsigned char)src[i]);
    }
    dst[i] = '\0';
}

/* A collective's name as compared: lower case, no '-' or '_', no "perf" suffix. */
static void cb_coll_norm(char *norm, size_t size, const char *name)
{
    size_t len = 0;

    for (size_t i = 0; name[i] != '\0' && len + 1 < size; i++) {
        if (name[i] != '_' && name[i] != '-') {
            norm[len++] = (char)tolower((unsigned char)name[i]);
        }
    }
    norm[len] = '\0';
    if (len > 4 && strcmp(norm + len - 4, "perf") == 0) {
        norm[len - 4] = '\0';
    }
}

/* The bits (opts->colls) of what `name` names: a collective of cb_colls by its nccl-tests name
 * (engine/op.h's short name: all_reduce, all-reduce, allreduce_perf ...), "bcast" for broadcast,
 * or "all"; 0 for none. */
static unsigned cb_coll_lookup(const char *name)
{
    char     norm[64], known[64];
    unsigned all = 0;

    cb_coll_norm(norm, sizeof(norm), name);
    for (size_t i = 0; i < CB_NUM_COLLS; i++) {
        cb_coll_norm(known, sizeof(known), st_coll_info(cb_colls[i])->short_name);
        if (strcmp(norm, known) == 0) {
            return 1u << cb_colls[i];
        }
        all |= 1u << cb_colls[i];
    }
    if (strcmp(norm, "bcast") == 0) {
        return 1u << ST_COLL_BROADCAST;
    }
    return strcmp(norm, "all") == 0 ? all : 0;
}

/* Bits of the collectives of a comma-separated list; 0 when one is unknown. */
static unsigned cb_parse_colls(const char *arg)
{
    char     buf[256], *tok, *save = NULL;
    unsigned bits = 0, coll;

    snprintf(buf, sizeof(buf), "%s", arg);
    for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        coll = cb_coll_lookup(tok);
        if (coll == 0) {
            return 0;
        }
        bits |= coll;
    }
    return bits;
}

/* A comma list of names from aliases[0..n) (or "all": the nall lowest bits) as a bit set of their
 * values; 0 when a name is unknown. */
static unsigned cb_parse_names(const char *arg, const cb_alias_t *aliases, size_t n, int nall)
{
    char     buf[256], low[32], *tok, *save = NULL;
    unsigned bits = 0, found;

    snprintf(buf, sizeof(buf), "%s", arg);
    for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        cb_lower(low, sizeof(low), tok);
        found = (strcmp(low, "all") == 0) ? (1u << nall) - 1 : 0;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(low, aliases[i].name) == 0) {
                found = 1u << aliases[i].value;
            }
        }
        if (found == 0) {
            return 0;
        }
        bits |= found;
    }
    return bits;
}

static int cb_parse_int(const char *arg, long min, long max, int *value_p)
{
    char *end;
    long  v;

    errno = 0;
    v     = strtol(arg, &end, 10);
    if (end == arg || *end != '\0' || errno != 0 || v < min || v > max) {
        return -1;
    }
    *value_p = (int)v;
    return 0;
}

/* "3,1" into opts->layout; "rr" or "rrK" for round-robin numbering. */
static int cb_parse_layout(const char *arg, cb_opts_t *opts)
{
    const char *p = arg;
    char       *end;
    long        v;

    opts->nlayout   = 0;
    opts->layout_rr = 0;
    if (strncmp(arg, "rr", 2) == 0) {
        opts->layout_rr = 1;
        opts->rr_nodes  = 0;
        if (arg[2] == '\0') {
            return 0;
        }
        errno = 0;
        v     = strtol(arg + 2, &end, 10);
        if (*end != '\0' || errno != 0 || v < 1 || v > CB_MAX_NODES) {
            return -1;
        }
        opts->rr_nodes = (int)v;
        return 0;
    }
    while (*p != '\0') {
        errno = 0;
        v     = strtol(p, &end, 10);
        if (end == p || errno != 0 || v < 1 || v > 1000000 || opts->nlayout == CB_MAX_NODES) {
            return -1;
        }
        opts->layout[opts->nlayout++] = (int)v;
        p = end;
        if (*p == ',' || *p == '+') { /* "3,1" or "3+1" */
            p++;
            if (*p == '\0') {
                return -1;
            }
        } else if (*p != '\0') {
            return -1;
        }
    }
    return opts->nlayout > 0 ? 0 : -1;
}

/* calibrate, tune, model --compare: what would spoil the run, refused before any rank starts. */
static int cb_fab_check_args(const cb_opts_t *opts)
{
    struct stat st;
    char        dir[4096];
    const char *slash, *var, *val;

    if (opts->algo != NULL) {
        fprintf(stderr, "%s: -A would override the configurations that calibrate, tune and "
                "compare choose themselves: leave it out\n", opts->prog);
        return -1;
    }
    var = st_tune_env_override(&val);
    if (var != NULL) {
        fprintf(stderr, "%s: %s=%s is set: calibrate, tune and compare choose the "
                "configurations themselves; unset it\n", opts->prog, var, val);
        return -1;
    }
    if (opts->fab_profile != NULL && access(opts->fab_profile, R_OK) != 0) {
        fprintf(stderr, "%s: --profile %s: %s\n", opts->prog, opts->fab_profile, strerror(errno));
        return -1;
    }
    if (opts->fab_out != NULL) {
        slash = strrchr(opts->fab_out, '/');
        snprintf(dir, sizeof(dir), "%.*s", slash == NULL ? 1 : (int)(slash - opts->fab_out + 1),
                 slash == NULL ? "." : opts->fab_out);
        if ((stat(opts->fab_out, &st) == 0 && !S_ISREG(st.st_mode)) || access(dir, W_OK) != 0) {
            fprintf(stderr, "%s: --out %s: cannot write a file there\n", opts->prog,
                    opts->fab_out);
            return -1;
        }
    }
    return 0;
}

/* --compress: what strataAllReduceCompressed does not take, refused before any rank starts. */
static int cb_compress_check_args(const cb_opts_t *opts)
{
    const unsigned dtypes = 1u << strataFloat32 | 1u << strataFloat16 | 1u << strataBfloat16;
    const unsigned ops    = 1u << CB_OP_SUM | 1u << CB_OP_AVG;
    int            i;

    if (opts->topo || opts->fab_mode != CB_FAB_NONE) {
        fprintf(stderr, "%s: --compress applies to the benchmark, not to topo, calibrate, tune or "
                "model\n", opts->prog);
        return -1;
    }
    if ((opts->colls & ~(1u << ST_COLL_ALLREDUCE)) != 0 &&
        __builtin_popcount(opts->colls) > 2) { /* "all", or a list */
        fprintf(stderr, "%s: --compress applies to all_reduce only, not to %d collectives\n",
                opts->prog, __builtin_popcount(opts->colls));
        return -1;
    }
    for (i = 0; i < CB_NUM_COLLS; i++) {
        if (cb_colls[i] != ST_COLL_ALLREDUCE && (opts->colls & (1u << cb_colls[i]))) {
            fprintf(stderr, "%s: --compress applies to all_reduce only, not %s\n", opts->prog,
                    st_coll_info(cb_colls[i])->short_name);
            return -1;
        }
    }
    for (i = 0; i < strataNumTypes; i++) {
        if ((opts->dtypes & ~dtypes) & (1u << i)) {
            fprintf(stderr, "%s: --compress takes float, half and bfloat16 data, not %s (-d)\n",
                    opts->prog, cb_dtype_name((strataDataType_t)i));
            return -1;
        }
    }
    for (i = 0; i < CB_NUM_OPS; i++) {
        if ((opts->ops & ~ops) & (1u << i)) {
            fprintf(stderr, "%s: --compress reduces with sum or avg, not %s (-o)\n", opts->prog,
                    cb_op_name(i));
            return -1;
        }
    }
    if (opts->device != CB_DEVICE_HOST) {
        fprintf(stderr, "%s: --compress runs on host buffers (strataAllReduceCompressed), not "
                "--device %s\n", opts->prog, cb_device_name(opts->device));
        return -1;
    }
    return 0;
}

const char *cb_algo_forced(void)
{
    const char *algo = getenv("STRATA_ALGO");

    if (algo != NULL && (strcmp(algo, "small") == 0 || strcmp(algo, "hier") == 0)) {
        return algo;
    }
    return NULL;
}

const char *cb_algo_scope(const char *forced)
{
    if (strcmp(forced, "small") == 0) {
        return "small applies to all_reduce of at most 131072 B (the windows' small area); "
               "other rows run as under auto";
    }
    return "hier runs all_reduce, reduce_scatter, all_gather, broadcast, reduce and alltoall "
           "(host buffers) on any layout of 2 ranks or more (a node of one rank reduces in a "
           "private window); with 1 rank nothing moves; sendrecv, alltoallv, gather and scatter "
           "run as under auto";
}

/* A forced small that no row can use (no all_reduce, or every size above its limit): the run
 * would measure something else under its name. */
static int cb_check_forced(const cb_opts_t *opts)
{
    const char *forced = cb_algo_forced();
    const char *opt    = opts->algo != NULL ? "-A small" : "STRATA_ALGO=small";

    if (forced == NULL || strcmp(forced, "small") != 0) {
        return 0;
    }
    if (!(opts->colls & (1u << ST_COLL_ALLREDUCE))) {
        fprintf(stderr, "%s: %s applies to all_reduce only, which is not among the collectives "
                "asked for (add all_reduce, or leave %s out)\n", opts->prog, opt, opt);
        return -1;
    }
    if (opts->minbytes > CB_SMALL_MAX) {
        fprintf(stderr, "%s: %s applies to all_reduce of at most %zu B, and every size from -b "
                "%zu is larger (lower -b, or leave %s out)\n", opts->prog, opt, CB_SMALL_MAX,
                opts->minbytes, opt);
        return -1;
    }
    return 0;
}

static void cb_opts_default(cb_opts_t *opts, const char *argv0)
{
    const char *base  = strrchr(argv0, '/');
    unsigned    colls = cb_coll_lookup(base != NULL ? base + 1 : argv0);

    memset(opts, 0, sizeof(*opts));
    /* a symlink named like an nccl-tests binary picks its collective */
    opts->colls      = (colls == 0) ? 1u << ST_COLL_ALLREDUCE : colls;
    opts->minbytes   = 8;
    opts->maxbytes   = 64ULL << 20;
    opts->stepbytes  = 1ULL << 20;
    opts->stepfactor = 2;
    opts->iters      = 20;
    opts->warmup     = 5;
    opts->check      = 1;
    opts->blocking   = 0;
    opts->dtypes     = 1u << strataFloat32;
    opts->ops        = 1u << CB_OP_SUM;
    opts->root       = 0;
    opts->skew       = 1;
    opts->rank       = -1;
    opts->timeout    = 1800;
    opts->prog       = argv0;
}

static int cb_bad(const cb_opts_t *opts, const char *what, const char *arg)
{
    fprintf(stderr, "%s: invalid %s '%s' (see --help)\n", opts->prog, what, arg);
    return -1;
}

/* Fills opts from argv. Returns 0 to run, 1 when done (help, print-config), -1 on error. */
static int cb_parse_args(int argc, char **argv, cb_opts_t *opts, int *print_config_p)
{
    int      c, v, colls_given = 0, skew_given = 0;
    unsigned bits;

    while ((c = getopt_long(argc, argv, cb_short_opts, cb_long_opts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (strcmp(optarg, "topo") == 0) {
                opts->topo = 1;
                break;
            }
            if (isdigit((unsigned char)optarg[0])) {
                /* nccl-tests' -t: threads per process; host ranks are processes */
                if (cb_parse_int(optarg, 1, 1, &v) != 0) {
                    return cb_bad(opts, "thread count (only 1 is supported)", optarg);
                }
                break;
            }
            if ((bits = cb_parse_colls(optarg)) == 0) {
                return cb_bad(opts, "collective", optarg);
            }
            opts->colls = colls_given ? opts->colls | bits : bits;
            colls_given = 1;
            break;
        case CB_OPT_NTHREADS:
        case 'g':
            if (cb_parse_int(optarg, 1, 1, &v) != 0) {
                return cb_bad(opts, "thread or GPU count (only 1 is supported)", optarg);
            }
            break;
        case 'b':
            if (cb_parse_size(optarg, &opts->minbytes) != 0) {
                return cb_bad(opts, "minbytes", optarg);
            }
            break;
        case 'e':
            if (cb_parse_size(optarg, &opts->maxbytes) != 0) {
                return cb_bad(opts, "maxbytes", optarg);
            }
            break;
        case 'i':
            if (cb_parse_size(optarg, &opts->stepbytes) != 0 || opts->stepbytes == 0) {
                return cb_bad(opts, "stepbytes", optarg);
            }
            opts->stepfactor = 1;
            break;
        case 'f':
            if (cb_parse_int(optarg, 2, 1 << 20, &opts->stepfactor) != 0) {
                return cb_bad(opts, "stepfactor (2 or more; use -i to add bytes)", optarg);
            }
            break;
        case 'n':
            if (cb_parse_int(optarg, 1, 1 << 30, &opts->iters) != 0) {
                return cb_bad(opts, "iters", optarg);
            }
            break;
        case 'w':
            if (cb_parse_int(optarg, 0, 1 << 30, &opts->warmup) != 0) {
                return cb_bad(opts, "warmup_iters", optarg);
            }
            break;
        case 'c':
            if (cb_parse_int(optarg, 0, 1, &opts->check) != 0) {
                return cb_bad(opts, "check (0 or 1)", optarg);
            }
            break;
        case 'd':
            opts->dtypes = cb_parse_names(optarg, cb_dtype_aliases,
                                          CB_ARRAY_LEN(cb_dtype_aliases), strataNumTypes);
            if (opts->dtypes == 0) {
                return cb_bad(opts, "datatype", optarg);
            }
            break;
        case 'o':
            if ((opts->ops = cb_parse_names(optarg, cb_op_aliases, CB_ARRAY_LEN(cb_op_aliases),
                                            CB_NUM_OPS)) == 0) {
                return cb_bad(opts, "op", optarg);
            }
            break;
        case 'r':
            if (strcmp(optarg, "all") == 0) {
                opts->root = -1;
            } else if (cb_parse_int(optarg, -1, 1 << 30, &opts->root) != 0) {
                return cb_bad(opts, "root (a rank, all or -1)", optarg);
            }
            break;
        case 'z':
            if (cb_parse_int(optarg, 0, 1, &opts->blocking) != 0) {
                return cb_bad(opts, "blocking (0 or 1)", optarg);
            }
            break;
        case 'R':
            if (cb_parse_int(optarg, 0, 1, &opts->mem_alloc) != 0) {
                return cb_bad(opts, "local_register (0 or 1)", optarg);
            }
            break;
        case 'A': {
            char      low[16];
            st_algo_t algo;

            cb_lower(low, sizeof(low), optarg);
            algo       = st_algo_parse(low); /* the library checks STRATA_ALGO again at init */
            opts->algo = algo < ST_ALGO_LAST ? st_algo_name(algo) : NULL;
            if (opts->algo == NULL) {
                return cb_bad(opts, "algorithm (ring, hier, small or auto)", optarg);
            }
            break;
        }
        case CB_OPT_PHASES:
            opts->phases = 1;
            break;
        case CB_OPT_MEM_ALLOC:
            opts->mem_alloc = 1;
            break;
        case 'T': {
            char *end;

            errno         = 0;
            opts->timeout = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || errno != 0 || opts->timeout < 0) {
                return cb_bad(opts, "timeout (seconds)", optarg);
            }
            break;
        }
        case CB_OPT_NP:
            if (cb_parse_int(optarg, 1, 1 << 20, &opts->np) != 0) {
                return cb_bad(opts, "-np", optarg);
            }
            break;
        case CB_OPT_NODES:
            if (cb_parse_int(optarg, 1, CB_MAX_NODES, &opts->nnodes) != 0) {
                return cb_bad(opts, "--nodes", optarg);
            }
            break;
        case CB_OPT_LAYOUT:
            if (cb_parse_layout(optarg, opts) != 0) {
                return cb_bad(opts, "--layout (ranks per node, e.g. 3,1; or rr)", optarg);
            }
            break;
        case CB_OPT_RANK:
            if (cb_parse_int(optarg, 0, 1 << 30, &opts->rank) != 0) {
                return cb_bad(opts, "--rank", optarg);
            }
            break;
        case CB_OPT_NRANKS:
            if (cb_parse_int(optarg, 1, 1 << 30, &opts->nranks) != 0) {
                return cb_bad(opts, "--nranks", optarg);
            }
            break;
        case CB_OPT_PRINT_CONFIG:
            *print_config_p = 1;
            break;
        case CB_OPT_TOPO_FILE:
            opts->topo_file = optarg;
            opts->topo      = 1;
            break;
        case CB_OPT_JSON:
            opts->json = 1;
            break;
        case CB_OPT_OUT:
            opts->fab_out = optarg;
            break;
        case CB_OPT_PROFILE:
            opts->fab_profile = optarg;
            break;
        case CB_OPT_COMPARE:
            opts->fab_mode = CB_FAB_COMPARE;
            break;
        case CB_OPT_DEVICE:
            if ((opts->device = cb_device_parse(optarg)) < 0) {
                return cb_bad(opts, "device (host, sim or cuda)", optarg);
            }
            break;
        case CB_OPT_SKEW: {
            char *end;

            errno      = 0;
            opts->skew = strtod(optarg, &end);
            /* !(x >= 1) also refuses NaN; the upper bound, nranks, is checked by each rank */
            if (end == optarg || *end != '\0' || errno != 0 || !(opts->skew >= 1) ||
                opts->skew > 1 << 20) {
                return cb_bad(opts, "skew (a number from 1 to the rank count)", optarg);
            }
            skew_given = 1;
            break;
        }
        case CB_OPT_COMPRESS: {
            const char *why = st_codec_parse(optarg, &opts->codec);

            if (why != NULL) {
                fprintf(stderr, "%s: invalid --compress '%s': %s (see --help)\n", opts->prog,
                        optarg, why);
                return -1;
            }
            opts->compress = optarg;
            break;
        }
        case 'h':
            cb_usage(stdout, opts->prog);
            return 1;
        default:
            cb_usage(stderr, opts->prog);
            return -1;
        }
    }

    /* positional collectives, nccl-tests' binary names included */
    for (; optind < argc; optind++) {
        if (strcmp(argv[optind], "topo") == 0) {
            opts->topo = 1;
            continue;
        }
        if (strcmp(argv[optind], "model") == 0 && opts->fab_mode == CB_FAB_COMPARE) {
            continue; /* model --compare: launched like the benchmark */
        }
        if (strcmp(argv[optind], "calibrate") == 0 || strcmp(argv[optind], "tune") == 0) {
            opts->fab_mode = argv[optind][0] == 'c' ? CB_FAB_CALIBRATE : CB_FAB_TUNE;
            continue;
        }
        if ((bits = cb_parse_colls(argv[optind])) == 0) {
            return cb_bad(opts, "collective", argv[optind]);
        }
        opts->colls = colls_given ? opts->colls | bits : bits;
        colls_given = 1;
    }

    if ((opts->fab_mode == CB_FAB_CALIBRATE || opts->fab_mode == CB_FAB_TUNE) &&
        opts->fab_out == NULL) {
        fprintf(stderr, "%s: %s needs --out FILE (the %s it writes)\n", opts->prog,
                opts->fab_mode == CB_FAB_TUNE ? "tune" : "calibrate",
                opts->fab_mode == CB_FAB_TUNE ? "tuning table" : "fabric profile");
        return -1;
    }
    if (opts->fab_mode != CB_FAB_NONE && colls_given) {
        fprintf(stderr, "%s: %s takes no collective: it measures all-reduce%s\n", opts->prog,
                opts->fab_mode == CB_FAB_TUNE ? "tune" : opts->fab_mode == CB_FAB_CALIBRATE
                ? "calibrate" : "model --compare", opts->fab_mode == CB_FAB_TUNE
                ? ", then ring against hier for reduce_scatter, all_gather and alltoall" : "");
        return -1;
    }
    if (opts->fab_mode == CB_FAB_COMPARE && opts->fab_profile == NULL) {
        fprintf(stderr, "%s: model --compare needs --profile FILE (from collbench calibrate)\n",
                opts->prog);
        return -1;
    }
    if (opts->fab_mode != CB_FAB_NONE && cb_fab_check_args(opts) != 0) {
        return -1;
    }
    if (opts->device != CB_DEVICE_HOST && (opts->topo || opts->fab_mode != CB_FAB_NONE)) {
        fprintf(stderr, "%s: --device applies to the benchmark, not to topo, calibrate, tune or "
                "model\n", opts->prog);
        return -1;
    }
    if (opts->compress != NULL && cb_compress_check_args(opts) != 0) {
        return -1;
    }
    if (skew_given && !(opts->colls & (1u << ST_COLL_ALLTOALLV))) {
        fprintf(stderr, "%s: --skew applies to alltoallv only, which is not among the collectives "
                "asked for\n", opts->prog);
        return -1;
    }
    {
        /* The rank count where the command line gives it (-np, --layout's sum, --nranks): a
         * root or skew beyond it is refused here, before any rank starts (the ranks check them
         * again when an outside launcher gives the count: there rank 0 says why). */
        int known = opts->np, k;

        if (known == 0 && opts->nlayout > 0 && !opts->layout_rr) {
            for (k = 0; k < opts->nlayout; k++) {
                known += opts->layout[k];
            }
        }
        if (known == 0 && opts->nranks > 0) {
            known = opts->nranks;
        }
        if (known > 0 && opts->root >= known) {
            fprintf(stderr, "%s: root %d out of range for %d ranks\n", opts->prog, opts->root,
                    known);
            return -1;
        }
        if (known > 0 && opts->skew > known) {
            fprintf(stderr, "%s: --skew %g is more than the %d ranks: rank 0 cannot receive more "
                    "than everything (1 <= F <= nranks)\n", opts->prog, opts->skew, known);
            return -1;
        }
    }
    if (opts->minbytes > opts->maxbytes) {
        fprintf(stderr, "%s: minbytes %zu is larger than maxbytes %zu\n", opts->prog,
                opts->minbytes, opts->maxbytes);
        return -1;
    }
    if (opts->minbytes == 0 && opts->stepfactor > 1) {
        fprintf(stderr, "%s: minbytes 0 never grows with -f; use -b 1 or more, or -i\n",
                opts->prog);
        return -1;
    }
    return 0;
}

/* getopt_long knows only "-x" and "--long"; mpirun users type "-np 4". */
static void cb_rewrite_np(int argc, char **argv)
{
    static char np_long[] = "--np";
    int         i;

    for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "-np") == 0) {
            argv[i] = np_long;
        }
    }
}

double cb_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    static cb_opts_t opts; /* the layout table makes it too big for a comfortable stack */
    int              print_config = 0, ret;
    strataResult_t   res;

    /* a subcommand with its own options, which launches nothing; with --compare it launches
     * ranks with the benchmark's options (fabric.c) */
    if (argc > 1 && strcmp(argv[1], "model") == 0) {
        int compare = 0;

        for (int i = 2; i < argc; i++) {
            compare |= strcmp(argv[i], "--compare") == 0;
        }
        if (!compare) {
            return cb_model_run(stdout, stderr, argc - 1, argv + 1, argv[0]);
        }
    }
    cb_opts_default(&opts, argv[0]);
    cb_rewrite_np(argc, argv);
    ret = cb_parse_args(argc, argv, &opts, &print_config);
    if (ret != 0) {
        return (ret > 0) ? 0 : 2;
    }
    /* before any strata call: forked ranks inherit it, and a rank started by mpirun, srun or
     * --rank is this process */
    if (opts.algo != NULL && setenv("STRATA_ALGO", opts.algo, 1) != 0) {
        fprintf(stderr, "%s: cannot set STRATA_ALGO: %s\n", opts.prog, strerror(errno));
        return 2;
    }
    /* the same for the device layer: sim or cuda for --device sim|cuda; none for host, so that
     * an inherited STRATA_DEVICE=sim cannot turn --mem-alloc's buffers into device memory */
    if (setenv("STRATA_DEVICE", opts.device == CB_DEVICE_HOST ? "none"
                                                              : cb_device_name(opts.device),
               1) != 0) {
        fprintf(stderr, "%s: cannot set STRATA_DEVICE: %s\n", opts.prog, strerror(errno));
        return 2;
    }
    if (!print_config && !opts.topo && opts.fab_mode == CB_FAB_NONE &&
        cb_check_forced(&opts) != 0) {
        return 2;
    }
    if (print_config) {
        res = strataParamsPrint(stdout);
        if (res != strataSuccess) {
            fprintf(stderr, "%s: strataParamsPrint failed: %s (%s)\n", opts.prog,
                    strataGetErrorString(res), strataGetLastError(NULL));
            return 2;
        }
        return 0;
    }
    if (opts.topo && opts.topo_file != NULL) {
        return cb_topo_file(&opts);
    }
    return cb_launch(&opts);
}
