/*
 * reduce_fatbin.S - the GPU kernels' fatbin (kernel.h), built by nvcc from reduce_cuda.cu, as
 * read-only data of the library: st_reduce_fatbin, its bytes, and st_reduce_fatbin_size. Both
 * symbols are hidden, like every internal symbol of libstrata. The .incbin path is relative to
 * the directory make runs in, the top of the build tree, where the fatbin is built.
 */
        .section .rodata.st_reduce_fatbin, "a"
        .balign 64
        .globl  st_reduce_fatbin
        .hidden st_reduce_fatbin
        .type   st_reduce_fatbin, %object
st_reduce_fatbin:
        .incbin "src/reduce/reduce_cuda.fatbin"
.Lst_reduce_fatbin_end:
        .size   st_reduce_fatbin, .Lst_reduce_fatbin_end - st_reduce_fatbin

        .balign 8
        .globl  st_reduce_fatbin_size
        .hidden st_reduce_fatbin_size
        .type   st_reduce_fatbin_size, %object
st_reduce_fatbin_size:
        .quad   .Lst_reduce_fatbin_end - st_reduce_fatbin
        .size   st_reduce_fatbin_size, 8

        /* No executable stack. */
        .section .note.GNU-stack, "", %progbits
