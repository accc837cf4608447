/*
 * algo.c - the names of strata's algorithms (tune/algo.h).
 */
#include "config.h"

#include <string.h>

#include "tune/algo.h"

static const char *const st_algo_names[ST_ALGO_LAST] = {"auto", "ring", "hier", "small"};

const char *st_algo_name(int algo)
{
    return (algo >= 0 && algo < ST_ALGO_LAST) ? st_algo_names[algo] : "unknown";
}

st_algo_t st_algo_parse(const char *name)
{
    for (int a = 0; a < ST_ALGO_LAST; a++) {
        if (name != NULL && strcmp(name, st_algo_names[a]) == 0) {
            return (st_algo_t)a;
        }
    }
    return ST_ALGO_LAST;
}
