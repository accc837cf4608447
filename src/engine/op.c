/*
 * op.c - the names of the collectives (engine/op.h).
 */
#include "config.h"
#include "engine/op.h"

const char *st_coll_name(st_coll_type_t type)
{
    static const char *const names[] = {
        "AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "Send", "Recv"
    };
    return (type < ST_COLL_LAST) ? names[type] : "unknown";
}
