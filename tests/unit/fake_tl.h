/*
 * fake_tl.h - fake transports for tests: a net transport and a window transport that live in one
 * process (ranks are threads), written against the contracts of transports/transport.h alone.
 *
 * fake net: an address is a context's number; a send copies the message into the receiving
 * context's inbox at once and rings its eventfd; the receiver matches its posted receives against
 * the inbox in arrival order, on its own progress calls (as a real transport completes a request
 * only when its owner progresses). A send completes at once (eager), or with fake_tl_rendezvous
 * set only after a receiver matched it (as a large message's rendezvous: a step's receive may then
 * complete before its send, and destroying an op must cancel sends). No peer failure detection.
 * fake window: windows and shareable buffers are plain heap memory of the process; a packed handle
 * is the allocation's number; wait/wake are futexes on the word.
 *
 * The counters say how much went through each, so a test can assert that the fakes, and not the
 * builtin transports, carried its traffic.
 */
#ifndef ST_FAKE_TL_H
#define ST_FAKE_TL_H

#include <stdatomic.h>

#include "transports/transport.h"

extern const st_net_ops_t fake_net;
extern const st_win_ops_t fake_win;

typedef struct fake_tl_counts {
    atomic_long net_opens;   /* contexts opened */
    atomic_long net_sends;   /* messages sent */
    atomic_long net_bytes;   /* bytes sent */
    atomic_long net_matched; /* sends completed only once matched (rendezvous mode) */
    atomic_long win_creates; /* windows created */
    atomic_long mem_allocs;  /* shareable buffers allocated */
    atomic_long mem_maps;    /* mem_map calls that found a buffer */
} fake_tl_counts_t;

extern fake_tl_counts_t fake_tl_counts;

/* 0 (default): sends complete when posted; 1: when matched. Set between communicators' runs. */
extern int fake_tl_rendezvous;

/* Net contexts, windows and shareable buffers still alive (0 once every communicator is freed
 * and every buffer released). */
int fake_tl_live(void);

#endif
