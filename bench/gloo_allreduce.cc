/*
 * gloo_allreduce.cc - Gloo's allreduce (TCP transport) measured the way collbench measures
 * strataAllReduce and bench/mpi_allreduce.c measures MPI_Allreduce, with the same table, so that
 * bench/intra_node.sh and bench/two_nodes.sh put the three side by side.
 *
 *   gloo_allreduce --rank R --size N --store DIR [--host ADDR] [-b min] [-e max] [-f factor]
 *                  [-n iters] [-w warmup] [-c 0/1] [--timeout S]
 *
 * Rendezvous: gloo's FileStore in DIR (a folder every rank sees: the emulated nodes share the
 * file system); each rank's TCP device listens on ADDR (default 127.0.0.1; on emulated nodes the
 * node's link address, so that the bytes cross the link). Procedure, as collbench's:
 *  - warmup: -w calls at the largest size, then -w calls at the smallest;
 *  - per size: out of place, then in place; each half is a barrier, -n timed calls, then (with
 *    -c 1) one more call on fresh inputs whose result is checked;
 *  - time = the largest over ranks of (elapsed / iterations), in microseconds;
 *  - algbw = bytes / time, busbw = algbw * 2 (n - 1) / n, in GB/s (1e9), as nccl-tests;
 *  - float sum; inputs are small integers (the same as mpi_allreduce.c), every sum is exact.
 * Built at run time by the bench scripts: c++ -O2 -std=c++17 gloo_allreduce.cc -lgloo.
 */
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <getopt.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Opts {
    size_t      minbytes = 1024, maxbytes = 64 << 20;
    int         factor = 2, iters = 20, warmup = 5, check = 1, timeout = 600;
    int         rank = -1, size = -1;
    std::string store, host = "127.0.0.1";
};

size_t parse_size(const char *s)
{
    char  *end;
    double v = strtod(s, &end);

    switch (*end) {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024.0; break;
    case 'g': case 'G': v *= 1024.0 * 1024.0 * 1024.0; break;
    default: break;
    }
    return (size_t)v;
}

/* Input of `rank` at element i for check round `seed`: integers in [-8, 8] (mpi_allreduce.c's). */
float input(int rank, size_t i, unsigned seed)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ULL + (uint64_t)rank * 0xbf58476d1ce4e5b9ULL + seed;

    x ^= x >> 31;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 29;
    return (float)((int)(x % 17) - 8);
}

void fill(float *buf, size_t count, int rank, unsigned seed)
{
    for (size_t i = 0; i < count; i++) {
        buf[i] = input(rank, i, seed);
    }
}

double count_wrong(const float *buf, size_t count, int nranks, unsigned seed)
{
    double wrong = 0;

    for (size_t i = 0; i < count; i++) {
        float expect = 0.0f;

        for (int r = 0; r < nranks; r++) {
            expect += input(r, i, seed);
        }
        wrong += (buf[i] != expect);
    }
    return wrong;
}

using Ctx = std::shared_ptr<gloo::Context>;

/* One double, reduced over all ranks with fn (sum or max). */
double reduce_one(const Ctx &ctx, double v, void (*fn)(void *, const void *, const void *, size_t),
                  uint32_t tag)
{
    gloo::AllreduceOptions opts(ctx);

    opts.setOutput(&v, 1);
    opts.setReduceFunction(fn);
    opts.setTag(tag);
    gloo::allreduce(opts);
    return v;
}

void barrier(const Ctx &ctx)
{
    gloo::BarrierOptions opts(ctx);

    gloo::barrier(opts);
}

/* Options for `count` floats; in place when send is null. The buffers stay registered for the
 * options' lifetime, so the timed loop repeats only the collective. */
std::unique_ptr<gloo::AllreduceOptions> make_opts(const Ctx &ctx, float *send, float *recv,
                                                  size_t count)
{
    auto opts = std::make_unique<gloo::AllreduceOptions>(ctx);

    if (send != nullptr) {
        opts->setInput(send, count);
    }
    opts->setOutput(recv, count);
    opts->setReduceFunction(
        static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
    opts->setTag(1);
    return opts;
}

/* One half of a row; prints time, algbw, busbw, #wrong on rank 0. Returns #wrong. */
double bench_one(const Opts &o, const Ctx &ctx, float *send, float *recv, size_t count,
                 bool in_place, unsigned *seed)
{
    using clock  = std::chrono::steady_clock;
    auto   opts  = make_opts(ctx, in_place ? nullptr : send, recv, count);
    double wrong = 0, sec, algbw, busbw;
    size_t bytes = count * sizeof(float);
    int    n     = ctx->size;

    fill(in_place ? recv : send, count, ctx->rank, 0);
    barrier(ctx);
    auto t0 = clock::now();
    for (int i = 0; i < o.iters; i++) {
        gloo::allreduce(*opts);
    }
    sec = std::chrono::duration<double>(clock::now() - t0).count() / o.iters;
    sec = reduce_one(ctx, sec, &gloo::max<double>, 2);
    if (o.check) {
        ++*seed;
        fill(in_place ? recv : send, count, ctx->rank, *seed);
        gloo::allreduce(*opts);
        wrong = reduce_one(ctx, count_wrong(recv, count, n, *seed), &gloo::sum<double>, 3);
    }
    algbw = (double)bytes / sec / 1e9;
    busbw = algbw * 2.0 * (n - 1) / n;
    if (ctx->rank == 0) {
        double usec = sec * 1e6;

        printf((usec >= 10000.0) ? "  %7.0f" : (usec >= 100.0) ? "  %7.1f" : "  %7.2f", usec);
        if (o.check) {
            printf("  %6.2f  %6.2f  %5.0f", algbw, busbw, wrong);
        } else {
            printf("  %6.2f  %6.2f  %5s", algbw, busbw, "N/A");
        }
    }
    return wrong;
}

int usage(const char *prog)
{
    fprintf(stderr, "usage: %s --rank R --size N --store DIR [--host ADDR] [-b min] [-e max] "
            "[-f factor] [-n iters] [-w warmup] [-c 0/1] [--timeout S]\n", prog);
    return 2;
}

} // namespace

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"rank", required_argument, nullptr, 'R'}, {"size", required_argument, nullptr, 'N'},
        {"store", required_argument, nullptr, 'S'}, {"host", required_argument, nullptr, 'H'},
        {"timeout", required_argument, nullptr, 'T'}, {nullptr, 0, nullptr, 0}};
    Opts     o;
    int      c;
    unsigned seed  = 1;
    double   wrong = 0;

    while ((c = getopt_long(argc, argv, "b:e:f:n:w:c:", longopts, nullptr)) != -1) {
        switch (c) {
        case 'b': o.minbytes = parse_size(optarg); break;
        case 'e': o.maxbytes = parse_size(optarg); break;
        case 'f': o.factor = atoi(optarg); break;
        case 'n': o.iters = atoi(optarg); break;
        case 'w': o.warmup = atoi(optarg); break;
        case 'c': o.check = atoi(optarg); break;
        case 'R': o.rank = atoi(optarg); break;
        case 'N': o.size = atoi(optarg); break;
        case 'S': o.store = optarg; break;
        case 'H': o.host = optarg; break;
        case 'T': o.timeout = atoi(optarg); break;
        default: return usage(argv[0]);
        }
    }
    if (o.rank < 0 || o.size < 1 || o.rank >= o.size || o.store.empty()) {
        return usage(argv[0]);
    }
    if (o.minbytes < sizeof(float) || o.maxbytes < o.minbytes || o.factor < 2 || o.iters < 1) {
        fprintf(stderr, "%s: need 4 <= min <= max, factor >= 2, iters >= 1\n", argv[0]);
        return 2;
    }

    try {
        gloo::transport::tcp::attr attr;
        attr.hostname = o.host;
        auto dev   = gloo::transport::tcp::CreateDevice(attr);
        auto store = gloo::rendezvous::FileStore(o.store);
        auto rctx  = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
        rctx->setTimeout(std::chrono::seconds(o.timeout));
        rctx->connectFullMesh(store, dev);
        Ctx ctx = rctx;

        size_t             maxcount = o.maxbytes / sizeof(float);
        std::vector<float> send(maxcount), recv(maxcount);

        fill(send.data(), maxcount, o.rank, 0);
        fill(recv.data(), maxcount, o.rank, 0);
        if (o.rank == 0) {
            printf("# gloo_allreduce: gloo::allreduce (tcp transport), float sum, %d ranks\n",
                   o.size);
            printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %d(factor) warmup iters: "
                   "%d iters: %d agg iters: 1 validation: %d graph: 0\n", o.minbytes, o.maxbytes,
                   o.factor, o.warmup, o.iters, o.check);
            printf("#\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n",
                   "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                   "time", "algbw", "busbw", "#wrong");
        }
        /* Warmup as collbench: at the largest size, then at the smallest. */
        for (size_t count : {maxcount, o.minbytes / sizeof(float)}) {
            auto opts = make_opts(ctx, send.data(), recv.data(), count);
            for (int i = 0; i < o.warmup; i++) {
                gloo::allreduce(*opts);
            }
        }
        for (size_t size = o.minbytes; size <= o.maxbytes; size *= (size_t)o.factor) {
            size_t count = size / sizeof(float);

            if (o.rank == 0) {
                printf("%12zu  %12zu  %8s  %6s  %6i", count * sizeof(float), count, "float",
                       "sum", -1);
            }
            wrong += bench_one(o, ctx, send.data(), recv.data(), count, false, &seed);
            wrong += bench_one(o, ctx, send.data(), recv.data(), count, true, &seed);
            if (o.rank == 0) {
                printf("\n");
                fflush(stdout);
            }
        }
        if (o.rank == 0) {
            printf("# Out of bounds values : %.0f %s\n", wrong, wrong ? "FAILED" : "OK");
        }
        barrier(ctx);
    } catch (const std::exception &e) {
        fprintf(stderr, "gloo_allreduce: rank %d: %s\n", o.rank, e.what());
        return 2;
    }
    return wrong ? 1 : 0;
}
