/*
 * sys.c - monotonic clock and ticks, FNV-1a hash, %h/%p file name expansion, usable CPUs (sys.h).
 */
#include "config.h"
#include "base/sys.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double st_time_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#if !defined(__x86_64__)
uint64_t st_ticks(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif

/* The calibration: (ticks, seconds) at the start, and seconds per tick once 10 ms have passed
 * (0 until then). Racy writers store the same kind of value; readers take either. */
static uint64_t st_ticks_t0_ticks;
static double   st_ticks_t0_s, st_ticks_period;
static int      st_ticks_period_bits; /* 1 once st_ticks_period is set */

static pthread_once_t st_ticks_once = PTHREAD_ONCE_INIT;

static void st_ticks_init(void)
{
    st_ticks_t0_s = st_time_now();
    __atomic_store_n(&st_ticks_t0_ticks, st_ticks() | 1, __ATOMIC_RELEASE);
}

void st_ticks_start(void)
{
    pthread_once(&st_ticks_once, st_ticks_init);
}

double st_ticks_seconds(uint64_t ticks)
{
    double period = __atomic_load_n(&st_ticks_period_bits, __ATOMIC_ACQUIRE) != 0
                        ? st_ticks_period : 0;

    if ((int64_t)ticks < 0) {
        return 0; /* a counter that went back (unsynchronised sockets, a VM's migration) */
    }
    if (period == 0) {
        uint64_t t0, t;
        double   s;

        st_ticks_start();
        t0 = __atomic_load_n(&st_ticks_t0_ticks, __ATOMIC_ACQUIRE);
        s  = st_time_now() - st_ticks_t0_s;
        t  = st_ticks();
        if (t <= t0 || s <= 0) {
            return 0;
        }
        period = s / (double)(t - t0);
        if (s >= 0.01) {
            st_ticks_period = period; /* good to a part in 10^5 or better */
            __atomic_store_n(&st_ticks_period_bits, 1, __ATOMIC_RELEASE);
        }
    }
    return (double)ticks * period;
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
    long      online = sysconf(_SC_NPROCESSORS_ONLN);

    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) <= 1) {
        return online > 0 ? (int)online : 1;
    }
    return CPU_COUNT(&set);
}

int st_cpus_mask(unsigned char *mask, size_t len)
{
    cpu_set_t set;

    memset(mask, 0, len);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return 0;
    }
    for (size_t c = 0; c < 8 * len && c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &set)) {
            mask[c / 8] |= (unsigned char)(1u << (c % 8));
        }
    }
    return 1;
}
