/*
 * dev_sim.h - settings and test hooks of the simulated device (dev_sim.c), private to src/device
 * and to the unit tests: the library reaches the simulated device only through st_dev_sim_ops.
 */
#ifndef ST_DEVICE_DEV_SIM_H
#define ST_DEVICE_DEV_SIM_H

#include "device/dev.h"

#define ST_DEV_SIM_MAX_DEVICES 64

/* Devices of the simulated device (1 .. ST_DEV_SIM_MAX_DEVICES; default 2) and its fault
 * injection: every stream command first sleeps a pseudo-random 0 .. delay_us microseconds, the
 * same sequence for the n-th stream of a process on every run (default 0: no sleep). dev.c sets
 * them from STRATA_SIM_DEVICES and STRATA_SIM_DELAY_US when it picks the simulated device; a test
 * may change them at any time (the delay applies from the next command of every stream). */
void st_dev_sim_configure(unsigned devices, unsigned delay_us);
unsigned st_dev_sim_delay_us(void);

/* Test hook: marks stream s (NULL: the legacy default stream) as being captured into a graph, or
 * not, so that stream_capturing says 1 (or 0) and the API's refusal can be tested. While marked,
 * work queued on s is refused (ST_ERR_IO, logged): on a GPU it would be captured, not run.
 * ST_ERR_INVALID when s is not a live stream. */
st_status_t st_dev_sim_set_capturing(st_dev_stream_t *s, int capturing);

#endif
