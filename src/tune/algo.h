/*
 * algo.h - strata's algorithms by number and by name: the one enum and the one list of names that
 * STRATA_ALGO (coll/select.c), the tuning table files (table.c), the cost model (model.c) and
 * collbench all use. Which collectives each algorithm runs, when it fits a call and which code
 * makes its op is coll/select.c's table of algorithms.
 */
#ifndef ST_TUNE_ALGO_H
#define ST_TUNE_ALGO_H

typedef enum {
    ST_ALGO_AUTO = 0, /* none named: coll/select.c chooses (STRATA_ALGO=auto; zeroed arguments) */
    ST_ALGO_RING,     /* flat ring over all ranks (coll/ring.c: AR, RS, AG); chain (coll/chain.c:
                       * broadcast, reduce) */
    ST_ALGO_HIER,     /* intra-node windows + inter-node ring per rail (coll/hier.c) */
    ST_ALGO_SMALL,    /* latency: one round through the windows, node leaders exchange directly
                       * (coll/small.c) */
    ST_ALGO_LAST
} st_algo_t;

/* The first algorithm that runs: ST_ALGO_FIRST .. ST_ALGO_LAST - 1 are what a tuning table entry
 * may name and what the cost model prices (ties go to the lower value). */
#define ST_ALGO_FIRST ST_ALGO_RING

/* The name of algo: "auto", "ring", "hier" or "small"; "unknown" for any other value. */
const char *st_algo_name(int algo);
/* The algorithm that `name` names (exactly, as st_algo_name spells it, "auto" included), or
 * ST_ALGO_LAST for NULL or any other name. */
st_algo_t   st_algo_parse(const char *name);

#endif
