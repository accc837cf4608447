/*
 * fatbin_none.c - the GPU kernels' fatbin (kernel.h) in a build without nvcc: empty, so that the
 * device layer finds no kernels to load and says so. A build with nvcc links reduce_fatbin.S.
 */
#include "config.h"
#include "reduce/kernel.h"

const unsigned char st_reduce_fatbin[1];
const size_t        st_reduce_fatbin_size = 0;
