/*
 * cuda_ipc.h - private to transports/cuda_ipc: the file descriptor passing that its windows
 * (cuda_ipc_win.c) and its shareable device memory (cuda_ipc_mem.c) share (cuda_ipc_sock.c), and
 * the memory slots of the window table. Contracts of the slots: st_win_ops_t in
 * transports/transport.h.
 *
 * Device memory is shared the way NCCL shares cuMem memory: its owner exports the allocation as
 * a file descriptor (st_dev_ops_t's mem_export) and hands it to a node peer over a UNIX socket
 * with SCM_RIGHTS; the peer maps it (mem_import). The sockets live in the abstract namespace (no
 * file to remove, gone when closed or when the process dies; per network namespace, which the
 * ranks of a node share) and answer only processes of the owner's user (SO_PEERCRED).
 */
#ifndef ST_CUDA_IPC_H
#define ST_CUDA_IPC_H

#include <stddef.h>
#include <stdint.h>

#include "device/dev.h"
#include "transports/transport.h"

/* Bytes of an abstract socket name (without the leading NUL that marks the namespace). */
#define ST_CIPC_SOCK_NAME_LEN 100

#define ST_CIPC_MAGIC_WIN UINT32_C(0x57504943) /* "CIPW": a window's answer */
#define ST_CIPC_MAGIC_MEM UINT32_C(0x4d504943) /* "CIPM": a shareable buffer's handle, answer */

/* What a packed handle (st_win_memh_t) holds for device memory: the owner's pid, the allocation's
 * id (unique beyond the process: a random per-process prefix), its address in the owner (the
 * pointer itself for a rank of the same process) and size, and the owner's st_cipc_self_key(),
 * which names its memory socket ("strata-cipc-mem-<pid>-<key>"): a peer asks there for the
 * allocation's fd. */
typedef struct st_cipc_memh {
    uint32_t magic; /* ST_CIPC_MAGIC_MEM */
    uint32_t pid;
    uint64_t id;
    uint64_t addr;  /* the allocation's start in the owner */
    uint64_t bytes; /* its size as allocated (the device's granularity) */
    uint32_t key;
    uint32_t reserved[7];
} st_cipc_memh_t;

_Static_assert(sizeof(st_cipc_memh_t) == ST_WIN_MEMH_BYTES, "packed device handle size");

/* An answer to a peer (window or buffer): who owns it and what it is; the allocation's fd rides
 * with it (SCM_RIGHTS) when status is 0. */
typedef struct st_cipc_reply {
    uint32_t magic;  /* ST_CIPC_MAGIC_WIN or ST_CIPC_MAGIC_MEM */
    int32_t  status; /* 0: found, fd attached; -1: no such allocation (freed) */
    uint32_t pid;
    uint32_t key;    /* the owner's st_cipc_self_key() */
    uint64_t addr;   /* the allocation's start in the owner */
    uint64_t bytes;  /* its size as allocated: what mem_import maps */
    uint64_t size;   /* a window's size as asked for (cfg->size): peers must agree */
} st_cipc_reply_t;

/* A request for a shareable buffer (the memory socket): which allocation. */
typedef struct st_cipc_request {
    uint32_t magic; /* ST_CIPC_MAGIC_MEM */
    uint32_t reserved;
    uint64_t id;
} st_cipc_request_t;

/* ---- sockets (cuda_ipc_sock.c) ---------------------------------------------------------------
 * Every call logs its own system call failures under ST_SUB_IPC naming the socket; timeouts and a
 * peer that hung up are not logged (the caller knows whom it waited for). */

/* A random number drawn once per process. With the pid it tells this process from another that
 * has the same pid in another pid namespace but shares the network namespace (the containers of
 * a pod): only this process may take a peer's pointer as its own. */
uint32_t            st_cipc_self_key(void);
/* Whether pid and key (a peer's answer or handle) are this process's. */
int                 st_cipc_is_self(uint32_t pid, uint32_t key);

/* The device, or NULL after logging that what (a phrase: "window x") needs one. */
const st_dev_ops_t *st_cipc_dev(const char *what);

/* A listening socket on the abstract name, close-on-exec. ST_ERR_IO (EADDRINUSE: a name taken). */
st_status_t st_cipc_listen(const char *name, int backlog, int *fd_p);
/* Connects to the abstract name, retrying while nobody listens there yet (refused) or its
 * backlog is full, until the absolute deadline (st_time_now() seconds): ST_ERR_TIMEOUT then. */
st_status_t st_cipc_connect(const char *name, double deadline, int *fd_p);
/* Accepts one connection on listen_fd when it has one; *fd_p = -1 when none was pending or the
 * caller is another user (refused, logged at INFO). */
st_status_t st_cipc_accept(int listen_fd, const char *name, int *fd_p);
/* Sends len bytes of buf and, when fd >= 0, fd (SCM_RIGHTS) in one message, without blocking (the
 * answers are small). ST_ERR_REMOTE when the peer has gone. */
st_status_t st_cipc_send_fd(int sock, const void *buf, size_t len, int fd, const char *name);
/* Receives exactly len bytes and the fd that rides with them (*fd_p = -1 if none) before the
 * absolute deadline. ST_ERR_TIMEOUT, ST_ERR_REMOTE (closed early), ST_ERR_IO. */
st_status_t st_cipc_recv_fd(int sock, void *buf, size_t len, double deadline, const char *name,
                            int *fd_p);
/* Seconds an exchange with a node peer may take: STRATA_CONNECT_TIMEOUT (else the bootstrap's,
 * like init's other wire-up steps; at least 1 s, so that an unset one never means forever). */
double      st_cipc_timeout(void);

/* A server: a thread answering connections on a listening socket until stopped. */
typedef struct st_cipc_server st_cipc_server_t;
/* Answers one accepted connection (sock is closed afterwards by the server). */
typedef void (*st_cipc_serve_fn)(void *arg, int sock);
/* Starts a thread serving listen_fd (which the server then owns and closes) with fn(arg, sock).
 * ST_ERR_IO, ST_ERR_NO_MEMORY; listen_fd is closed on failure too. */
st_status_t st_cipc_server_start(int listen_fd, const char *name, st_cipc_serve_fn fn, void *arg,
                                 st_cipc_server_t **srv_p);
/* Stops the thread, joins it and closes every fd of the server: the name is free after it. */
void        st_cipc_server_stop(st_cipc_server_t *srv);
/* After fork, in the child: the thread did not follow; closes the fds and frees the server. */
void        st_cipc_server_forget(st_cipc_server_t *srv);

/* ---- shareable device memory (cuda_ipc_mem.c) ---------------------------------------------- */
st_status_t st_cipc_mem_alloc(size_t size, void **ptr_p);
st_status_t st_cipc_mem_free(void *ptr);
int         st_cipc_mem_pack(const void *ptr, size_t len, st_win_memh_t *memh_p,
                             size_t *offset_p);
void       *st_cipc_mem_map(const st_win_memh_t *memh);
void        st_cipc_mem_unmap_all(void);
/* Device memory cannot be read with process_vm_readv: ST_ERR_UNSUPPORTED, always. */
st_status_t st_cipc_peer_read(int pid, void *dst, const void *remote, size_t len);
st_status_t st_cipc_peer_write(int pid, void *remote, const void *src, size_t len);

#endif
