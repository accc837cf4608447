/*
 * parse.c - command-line value parsers shared by collbench's subcommands (the sweep and model).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "collbench.h"

/* Bytes with an optional k/M/G/T suffix (powers of 1024, as nccl-tests), optionally followed by
 * "B" or "iB". Returns 0 on success. */
int cb_parse_size(const char *arg, size_t *size_p)
{
    unsigned long long v;
    char              *end;
    int                shift = 0;

    errno = 0;
    v     = strtoull(arg, &end, 10);
    if (end == arg || errno != 0 || arg[0] == '-') {
        return -1;
    }
    switch (tolower((unsigned char)*end)) {
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    case 't': shift = 40; end++; break;
    default: break;
    }
    if (shift != 0 && *end == 'i') {
        end++;
    }
    if (*end == 'B' || *end == 'b') {
        end++;
    }
    if (*end != '\0' || (shift != 0 && v > (~0ULL >> shift))) {
        return -1;
    }
    *size_p = (size_t)(v << shift);
    return 0;
}
