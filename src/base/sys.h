/*
 * sys.h - the small system helpers every floor needs once: a monotonic clock, the FNV-1a hash
 * that ranks agree on, and the %h / %p expansion of file name patterns.
 */
#ifndef ST_SYS_H
#define ST_SYS_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic clock (CLOCK_MONOTONIC) in seconds. */
double st_time_now(void);

/* A cheaper timestamp for the latency path (a clock read is 20 ns of a 400 ns all-reduce here):
 * the CPU's time-stamp counter on x86-64 (constant rate on the CPUs strata runs on: Linux's
 * constant_tsc), else CLOCK_MONOTONIC's nanoseconds. Differences only: st_ticks_seconds turns
 * one into seconds, calibrated against CLOCK_MONOTONIC over the process's life so far (from the
 * first call of st_ticks_seconds or st_ticks_start, refined until 10 ms have passed). */
#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t st_ticks(void)
{
    return __rdtsc();
}
#else
uint64_t st_ticks(void);
#endif
void   st_ticks_start(void);
double st_ticks_seconds(uint64_t ticks);

/* FNV-1a, 64 bits (Fowler, Noll, Vo; offset basis ST_HASH_SEED, prime 2^40 + 2^8 + 0xb3):
 * h updated by len bytes of data. The same bytes give the same hash on every rank, which is what
 * the agreements compare. */
#define ST_HASH_SEED UINT64_C(0xcbf29ce484222325)
uint64_t st_hash(uint64_t h, const void *data, size_t len);

/* Writes pattern into out (capacity len, always terminated, cut short if it does not fit) with
 * every "%h" replaced by host and every "%p" by the process id: the file names of
 * STRATA_DEBUG_FILE and STRATA_TOPO_DUMP_FILE. */
void st_path_expand(const char *pattern, const char *host, char *out, size_t len);

/* Tells the core a spin-wait is running (x86 pause, arm yield): cheaper for the sibling thread
 * and the memory system than an empty loop. */
static inline void st_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* CPUs this process may run on (its affinity mask; when that cannot be read, or names one CPU
 * (a launcher that binds each rank to a core), the CPUs online). */
int st_cpus_usable(void);
/* This process's affinity mask as bytes (bit c of byte c/8: CPU c), at most len bytes (the rest
 * zero); 0 when it cannot be read. */
int st_cpus_mask(unsigned char *mask, size_t len);

#endif
