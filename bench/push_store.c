/*
 * push_store.c - one core's rate for the push's inner loop (src/coll/hier.c st_hier_zc_push):
 * reduce N float inputs a piece at a time into an L1 buffer, then store the piece into 1 or N
 * outputs, with plain stores (memcpy), 16-byte streaming stores or 32-byte ones, for pieces of
 * 2-16 KiB, and for N = 4 the sum folded in one pass or in three. Prints the memory traffic it
 * moved (N inputs read, the outputs written once) per second, the best of 4 passes. The figures
 * of docs/performance.md's push section come from it:
 *
 *     cc -O3 -mavx2 -o /tmp/push_store bench/push_store.c
 *     /tmp/push_store 256 2 1; /tmp/push_store 256 2 2; /tmp/push_store 64 4 4
 *     (/tmp/push_store 64 4 4 & /tmp/push_store 64 4 4; wait)   # two cores at once
 *
 * Arguments: MiB per array, N inputs (2..8), outputs (1 or N). A benchmark, not a test.
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((noinline)) static void add(float *d, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        d[i] = a[i] + b[i];
    }
}

__attribute__((noinline)) static void add4(float *d, const float *a, const float *b,
                                           const float *c, const float *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        d[i] = ((a[i] + b[i]) + c[i]) + e[i];
    }
}

static void store(int mode, void *dst, const void *src, size_t bytes)
{
    char       *d = dst;
    const char *s = src;

    if (mode == 0) {
        memcpy(dst, src, bytes);
        return;
    }
    for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
        if (mode == 1) {
            for (int k = 0; k < 64; k += 16) {
                _mm_stream_si128((__m128i *)(void *)(d + k),
                                 _mm_load_si128((const __m128i *)(const void *)(s + k)));
            }
        } else {
            _mm256_stream_si256((__m256i *)(void *)d,
                                _mm256_load_si256((const __m256i *)(const void *)s));
            _mm256_stream_si256((__m256i *)(void *)(d + 32),
                                _mm256_load_si256((const __m256i *)(const void *)(s + 32)));
        }
    }
}

static float piece_buf[4096] __attribute__((aligned(64)));

int main(int argc, char **argv)
{
    static const char *const modes[] = {"plain", "stream16", "stream32"};
    size_t n = (argc > 1 ? (size_t)atol(argv[1]) : 256) << 18; /* floats */
    int    nin = argc > 2 ? atoi(argv[2]) : 2, nout = argc > 3 ? atoi(argv[3]) : 1;
    float *in[8], *out[8];

    if (nin < 2 || nin > 8 || (nout != 1 && nout != nin) || n == 0) {
        fprintf(stderr, "usage: %s MiB N(2..8) OUTPUTS(1|N)\n", argv[0]);
        return 2;
    }
    for (int k = 0; k < nin; k++) {
        in[k]  = aligned_alloc(64, n * 4);
        out[k] = aligned_alloc(64, n * 4);
        if (in[k] == NULL || out[k] == NULL) {
            return 1;
        }
        memset(in[k], 1, n * 4);
        memset(out[k], 1, n * 4);
    }
    for (int fused = 0; fused <= (nin == 4); fused++) {
        for (int mode = 0; mode < 3; mode++) {
            for (size_t piece = 512; piece <= 4096; piece *= 2) { /* floats: 2..16 KiB */
                double best = 1e9;

                for (int rep = 0; rep < 4; rep++) {
                    double t0 = now();

                    for (size_t o = 0; o + piece <= n; o += piece) {
                        if (fused) {
                            add4(piece_buf, in[0] + o, in[1] + o, in[2] + o, in[3] + o, piece);
                        } else {
                            add(piece_buf, in[0] + o, in[1] + o, piece);
                            for (int k = 2; k < nin; k++) {
                                add(piece_buf, piece_buf, in[k] + o, piece);
                            }
                        }
                        for (int k = 0; k < nout; k++) {
                            store(mode, out[k] + o, piece_buf, piece * 4);
                        }
                    }
                    _mm_sfence();
                    best = (now() - t0 < best) ? now() - t0 : best;
                }
                printf("N=%d outputs=%d %-8s %s piece %5zu B: %6.2f GB/s of traffic, %5.2f GB/s "
                       "of reduced output\n", nin, nout, modes[mode], fused ? "fused" : "pairs",
                       piece * 4, (double)(nin + nout) * n * 4 / best / 1e9, n * 4 / best / 1e9);
            }
        }
    }
    return 0;
}
