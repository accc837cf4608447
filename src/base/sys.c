/*
 * sys.c - monotonic clock, FNV-1a hash, %h/%p file name expansion, usable CPUs (sys.h).
 */
#include "config.h"
#include "base/sys.h"

#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

double st_time_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t st_hash(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;

    for (size_t i = 0; i < len; i++) {
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    }
    return h;
}

void st_path_expand(const char *pattern, const char *host, char *out, size_t len)
{
    size_t o = 0;

    if (len == 0) {
        return;
    }
    for (const char *p = pattern; *p != '\0' && o + 1 < len; p++) {
        int n = 0;

        if (p[0] == '%' && p[1] == 'h') {
            n = snprintf(out + o, len - o, "%s", host);
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            n = snprintf(out + o, len - o, "%d", (int)getpid());
            p++;
        } else {
            out[o++] = *p;
            continue;
        }
        o += (n > 0) ? (size_t)n : 0;
        if (o >= len) {
            o = len - 1; /* cut short */
        }
    }
    out[o] = '\0';
}

int st_cpus_usable(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return 1;
    }
    return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}
