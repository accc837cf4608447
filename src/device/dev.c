/*
 * dev.c - which device backend strata uses (STRATA_DEVICE), and the device layer's parameters.
 *
 * The choice is made once, at the first st_dev(): the parameters are read then from the
 * environment, through the same table that st_param_init parses for --print-config and the INFO
 * log (the library hands it down with the transports' tables). st_dev() parses its own copy so
 * that it neither depends on st_param_init having run first nor races with it: the values are
 * the same, both come from the environment.
 */
#include "config.h"
#include "device/dev.h"

#include <pthread.h>
#include <stddef.h>
#include <strings.h>

#include "base/log.h"
#include "base/param.h"
#include "device/dev_cuda.h"
#include "device/dev_sim.h"

typedef struct st_dev_config {
    char    *device;       /* auto, cuda, sim, none */
    unsigned sim_devices;  /* devices of the simulated device */
    unsigned sim_delay_us; /* fault injection: the most a stream command first sleeps */
} st_dev_config_t;

static const st_config_field_t st_dev_config_fields[] = {
    {"DEVICE", "auto", "device backend for device buffers: auto (cuda when a CUDA driver and a "
     "GPU are usable, else none), cuda, sim (a simulated device on the CPU, for tests: nothing "
     "measured on it is GPU performance), none", offsetof(st_dev_config_t, device), ST_CFG_STRING},
    {"SIM_DEVICES", "2", "devices of the simulated device (STRATA_DEVICE=sim), 1..64",
     offsetof(st_dev_config_t, sim_devices), ST_CFG_UINT},
    {"SIM_DELAY_US", "0", "fault injection on the simulated device: each stream command first "
     "sleeps a pseudo-random 0..N microseconds (the same sequence per stream on every run)",
     offsetof(st_dev_config_t, sim_delay_us), ST_CFG_UINT},
    {NULL, NULL, NULL, 0, 0}
};

/* What st_param_init fills (printed by --print-config, logged at INFO). */
static st_dev_config_t st_dev_config;

static const st_config_table_t st_dev_table = {
    "", "device", st_dev_config_fields, &st_dev_config
};

const struct st_config_table *st_dev_config_table(void)
{
    return &st_dev_table;
}

static pthread_once_t      st_dev_once = PTHREAD_ONCE_INIT;
static const st_dev_ops_t *st_dev_chosen;

/* The simulated device's settings, within its limits (a changed value is said once, at WARN). */
static void st_dev_sim_setup(const st_dev_config_t *cfg)
{
    unsigned devices = cfg->sim_devices;

    if (devices < 1 || devices > ST_DEV_SIM_MAX_DEVICES) {
        devices = (devices < 1) ? 1 : ST_DEV_SIM_MAX_DEVICES;
        st_param_adjusted("STRATA_SIM_DEVICES", ST_CFG_UINT, &cfg->sim_devices, &devices,
                          "the simulated device has 1 to 64 devices");
    }
    st_dev_sim_configure(devices, cfg->sim_delay_us);
    st_info(ST_SUB_INIT, "device sim: %u simulated devices, stream commands delayed up to %u us",
            devices, cfg->sim_delay_us);
}

static void st_dev_choose(void)
{
    st_dev_config_t   cfg   = {0};
    st_config_table_t table = {"", "device", st_dev_config_fields, &cfg};
    const char       *name;

    st_log_init();
    if (st_config_table_parse(&table) != ST_OK) {
        st_config_table_release(&table); /* logged with the variable and its value */
        return;
    }
    name = cfg.device;
    if (strcasecmp(name, "none") == 0) {
        st_info(ST_SUB_INIT, "device none (STRATA_DEVICE)");
    } else if (strcasecmp(name, "sim") == 0) {
        st_dev_sim_setup(&cfg);
        st_dev_chosen = &st_dev_sim_ops;
    } else if (strcasecmp(name, "cuda") == 0) {
        if (st_dev_cuda_probe()) {
            st_dev_chosen = &st_dev_cuda_ops;
            st_info(ST_SUB_INIT, "device cuda (STRATA_DEVICE)");
        } else {
            st_error(ST_SUB_INIT, "STRATA_DEVICE cuda: no usable CUDA driver or device (%s); "
                     "device buffers are not supported", st_dev_cuda_why(NULL));
        }
    } else if (strcasecmp(name, "auto") == 0) {
        if (st_dev_cuda_probe()) {
            st_dev_chosen = &st_dev_cuda_ops;
        }
        st_info(ST_SUB_INIT, "device %s%s%s (STRATA_DEVICE auto)",
                st_dev_chosen != NULL ? "cuda" : "none: no usable CUDA driver or device",
                st_dev_chosen != NULL ? "" : ": ",
                st_dev_chosen != NULL ? "" : st_dev_cuda_why(NULL));
    } else {
        st_error(ST_SUB_ENV, "STRATA_DEVICE '%s' is not a valid value (auto, cuda, sim, none); "
                 "device buffers are not supported", name);
    }
    st_config_table_release(&table);
}

const st_dev_ops_t *st_dev(void)
{
    pthread_once(&st_dev_once, st_dev_choose);
    return st_dev_chosen;
}
