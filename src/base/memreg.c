/*
 * memreg.c - the list of strataMemAlloc host allocations (memreg.h). A few allocations per
 * process at most (users allocate their buffers once), so a locked array is enough.
 */
#include "config.h"
#include "base/memreg.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct st_memreg_ent {
    uintptr_t base;
    size_t    size;
} st_memreg_ent_t;

#define ST_MEMREG_LISTENERS 64

static pthread_mutex_t  st_memreg_lock = PTHREAD_MUTEX_INITIALIZER;
static st_memreg_ent_t *st_memreg_ents;
static size_t           st_memreg_n, st_memreg_cap;
static struct {
    st_memreg_cb_t cb;
    void          *arg;
} st_memreg_cbs[ST_MEMREG_LISTENERS];

void st_memreg_add(void *base, size_t size)
{
    pthread_mutex_lock(&st_memreg_lock);
    if (st_memreg_n == st_memreg_cap) {
        size_t           cap = st_memreg_cap ? st_memreg_cap * 2 : 16;
        st_memreg_ent_t *ents = realloc(st_memreg_ents, cap * sizeof(*ents));

        if (ents == NULL) {
            pthread_mutex_unlock(&st_memreg_lock);
            return;
        }
        st_memreg_ents = ents;
        st_memreg_cap  = cap;
    }
    st_memreg_ents[st_memreg_n].base = (uintptr_t)base;
    st_memreg_ents[st_memreg_n].size = size;
    st_memreg_n++;
    pthread_mutex_unlock(&st_memreg_lock);
}

void st_memreg_del(void *base)
{
    pthread_mutex_lock(&st_memreg_lock);
    for (size_t i = 0; i < st_memreg_n; i++) {
        if (st_memreg_ents[i].base != (uintptr_t)base) {
            continue;
        }
        for (int k = 0; k < ST_MEMREG_LISTENERS; k++) {
            if (st_memreg_cbs[k].cb != NULL) {
                st_memreg_cbs[k].cb(st_memreg_cbs[k].arg, base, st_memreg_ents[i].size);
            }
        }
        st_memreg_ents[i] = st_memreg_ents[--st_memreg_n];
        break;
    }
    pthread_mutex_unlock(&st_memreg_lock);
}

int st_memreg_find(const void *ptr, size_t len, void **base_p, size_t *size_p)
{
    uintptr_t p = (uintptr_t)ptr;
    int       found = 0;

    pthread_mutex_lock(&st_memreg_lock);
    for (size_t i = 0; i < st_memreg_n && !found; i++) {
        const st_memreg_ent_t *e = &st_memreg_ents[i];

        if (p >= e->base && len <= e->size && p - e->base <= e->size - len) {
            found = 1;
            if (base_p != NULL) {
                *base_p = (void *)e->base;
            }
            if (size_p != NULL) {
                *size_p = e->size;
            }
        }
    }
    pthread_mutex_unlock(&st_memreg_lock);
    return found;
}

int st_memreg_listen(st_memreg_cb_t cb, void *arg)
{
    int ret = -1;

    pthread_mutex_lock(&st_memreg_lock);
    for (int k = 0; k < ST_MEMREG_LISTENERS && ret < 0; k++) {
        if (st_memreg_cbs[k].cb == NULL) {
            st_memreg_cbs[k].cb  = cb;
            st_memreg_cbs[k].arg = arg;
            ret = 0;
        }
    }
    pthread_mutex_unlock(&st_memreg_lock);
    return ret;
}

void st_memreg_unlisten(st_memreg_cb_t cb, void *arg)
{
    pthread_mutex_lock(&st_memreg_lock);
    for (int k = 0; k < ST_MEMREG_LISTENERS; k++) {
        if (st_memreg_cbs[k].cb == cb && st_memreg_cbs[k].arg == arg) {
            st_memreg_cbs[k].cb  = NULL;
            st_memreg_cbs[k].arg = NULL;
        }
    }
    pthread_mutex_unlock(&st_memreg_lock);
}
