/* Recycled memory for large result arrays: see _pool.c. Call with the GIL held. */
#ifndef COITER_POOL_H
#define COITER_POOL_H

#include <stddef.h>

int pool_init(void);                                  /* 0, or -1 with an exception set */
PyObject* pool_array(npy_intp n, int typenum, int zero); /* a new 1-D array, zeroed or not */
void pool_set_limit(size_t bytes);                    /* bytes of free blocks kept; 0: off */
void pool_stats(size_t* limit, int* nfree, size_t* free_bytes, int* nlive);

#endif
