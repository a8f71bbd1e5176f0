/* Recycled memory for large result arrays: see _pool.c. Call with the GIL held. */
#ifndef COITER_POOL_H
#define COITER_POOL_H

#include <stddef.h>

int pool_init(void);                                  /* 0, or -1 with an exception set */
PyObject* pool_array(npy_intp n, int typenum, int zero); /* a new 1-D array, zeroed or not */
void pool_set_limit(size_t bytes);                    /* bytes of free blocks kept; 0: off */
void pool_stats(size_t* limit, int* nfree, size_t* free_bytes, int* nlive);

/* The kernels' heap functions over the pool (the layout of the C prelude's
   coiter_allocator, which coiter_use_allocator takes); thread-safe, no GIL needed. */
typedef struct {
  void* (*malloc)(size_t);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  void (*free)(void*);
} PoolAllocator;
const PoolAllocator* pool_allocator(void);

#endif
