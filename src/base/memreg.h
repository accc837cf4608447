/*
 * memreg.h - the process's list of host memory strata allocated for the user (strataMemAlloc),
 * so that a layer below core can tell such memory from any other and learn when it goes: the
 * verbs transport registers an allocation whole with its HCA at first use (zero-copy) and must
 * deregister it before the memory is freed (a registration pins its pages; on hardware a stale
 * one writes silently into the old pages). core/memalloc.c adds and removes; thread-safe.
 */
#ifndef ST_MEMREG_H
#define ST_MEMREG_H

#include <stddef.h>

/* Records [base, base+size) (bytes). Silently ignored when out of memory: the memory then only
 * misses the zero-copy path. */
void st_memreg_add(void *base, size_t size);

/* Calls every listener with the allocation at base, then forgets it. Nothing when base is not
 * recorded. */
void st_memreg_del(void *base);

/* 1 when [ptr, ptr+len) lies inside one recorded allocation, with its start and size in *base_p
 * and *size_p (both may be NULL); 0 otherwise. */
int st_memreg_find(const void *ptr, size_t len, void **base_p, size_t *size_p);

/* A listener of removals: cb(arg, base, size) runs in st_memreg_del's thread, before the memory
 * is freed. listen returns 0, or -1 when the table of listeners (64) is full. */
typedef void (*st_memreg_cb_t)(void *arg, void *base, size_t size);
int  st_memreg_listen(st_memreg_cb_t cb, void *arg);
void st_memreg_unlisten(st_memreg_cb_t cb, void *arg);

#endif
