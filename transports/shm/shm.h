/*
 * shm.h - private to transports/shm: the shareable host memory of strataMemAlloc (shm_mem.c),
 * which the window transport's table (shm_win.c) offers as its mem_* slots, and the cross-memory
 * attach read and write of any node peer's memory (its peer_read and peer_write slots, shm_mem.c). Contracts: the
 * st_win_ops_t slots of the same names in transports/transport.h.
 */
#ifndef ST_SHM_H
#define ST_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "transports/transport.h"

#define ST_MEM_NAME_LEN 64 /* of a shareable allocation's (immediately unlinked) file name */

/* What a packed handle (st_win_memh_t) holds for host memory: the owner's pid and the fd it keeps
 * open (a peer opens /proc/<pid>/fd/<fd>), the allocation's size and an id unique per allocation
 * (an fd number is reused after a free). */
typedef struct st_shm_memh {
    uint32_t pid;
    int32_t  fd;
    uint64_t size;
    uint64_t id;
} st_shm_memh_t;

_Static_assert(sizeof(st_shm_memh_t) <= ST_WIN_MEMH_BYTES, "packed host handle too large");

st_status_t st_shm_mem_alloc(size_t size, void **ptr_p);
st_status_t st_shm_mem_free(void *ptr);
int         st_shm_mem_pack(const void *ptr, size_t len, st_win_memh_t *memh_p,
                            size_t *offset_p);
void       *st_shm_mem_map(const st_win_memh_t *memh);
void        st_shm_mem_unmap_all(void);
st_status_t st_shm_peer_read(int pid, void *dst, const void *remote, size_t len);
st_status_t st_shm_peer_write(int pid, void *remote, const void *src, size_t len);

#endif
