/* Recycled memory for large result arrays (part of coiter.runtime._fastcall).
 *
 * A large dense result (a TTM or SpMM output of tens of megabytes) is a fresh mapping on
 * every call: the kernel's first touch of each page faults and the operating system zeroes
 * it, which took 8.6 ms of an 11.8 ms TTM call on 64 MiB. Arrays from pool_array() of at
 * least POOL_MIN_BYTES are carved from blocks this pool maps once and takes back when
 * NumPy frees the array (the array carries the pool's NumPy memory handler, so every view
 * keeps the block alive as long as it lives): the next call's result reuses the block's
 * mapped pages, zeroed by a memset, or not at all for a kernel that zeroes what it writes.
 *
 * The kernels' own heap memory (the sparse results they assemble, their workspaces) comes
 * from the same blocks through pool_allocator(), which coiter.runtime hands to each kernel
 * library it loads: otherwise a process whose heap other libraries churn (GraphBLAS calls
 * between SpAdd3 calls: 56 page faults a call on lp_ship04l, 0.08 -> 0.24 ms) or whose
 * trim threshold is set maps those arrays afresh on every call.
 *
 * Free blocks are kept up to a byte limit (pool_set_limit; 0 turns the pool off), at most
 * POOL_FREE_BLOCKS of them, the least recently freed given back to the system first. Blocks
 * in use count against nothing: they are the user's arrays. Smaller arrays, and every
 * other allocation through the handler, go to malloc/calloc/realloc/free as usual.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL coiter_fastcall_ARRAY_API
#define NO_IMPORT_ARRAY
#include <numpy/arrayobject.h>
#include <malloc.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "_pool.h"

/* glibc maps every allocation from 128 KiB on afresh once a process sets its trim threshold
   (Dask's workers do): a 3.8 MiB SpMV result then cost 6 of a 13.6 ms call in page faults */
#define POOL_MIN_BYTES ((size_t)128 << 10)
/* the kernels' arrays from 16 KiB on: a 76 KiB index array of an SpAdd3 result still took
   19 page faults a call where GraphBLAS ran between the calls */
#define KERNEL_MIN_BYTES ((size_t)16 << 10)
#define POOL_HUGE ((size_t)2 << 20) /* blocks from a huge page on are whole huge pages */
#define POOL_PAGE ((size_t)4 << 10)
#define POOL_FREE_BLOCKS 64
#define POOL_LIVE_BLOCKS 256

typedef struct { void* ptr; size_t cap; } Block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Block free_blocks[POOL_FREE_BLOCKS]; /* oldest first */
static int nfree;
static Block live[POOL_LIVE_BLOCKS];       /* handed out; ptr NULL: an empty entry */
static size_t limit, free_bytes;
static PyObject* handler;                  /* the "mem_handler" capsule */

#define RESERVED ((void*)1) /* a live entry whose block is being prepared */

/* Give the least recently freed block back to the system. Under the lock. */
static void evict_oldest(void) {
  munmap(free_blocks[0].ptr, free_blocks[0].cap);
  free_bytes -= free_blocks[0].cap;
  memmove(&free_blocks[0], &free_blocks[1], (size_t)(nfree - 1) * sizeof(Block));
  nfree--;
}

/* The unit a block of ``size`` bytes is rounded up to. */
static size_t block_align(size_t size) { return size >= POOL_HUGE ? POOL_HUGE : POOL_PAGE; }

/* Free block ``k``, taken off the free list. Under the lock. */
static Block take_at(int k) {
  Block b = free_blocks[k];
  memmove(&free_blocks[k], &free_blocks[k + 1], (size_t)(nfree - k - 1) * sizeof(Block));
  nfree--;
  free_bytes -= b.cap;
  return b;
}

/* A free block of at least ``size`` bytes and at most a quarter (plus its unit) more,
   taken off the free list; {NULL, 0} when there is none. Under the lock. */
static Block take_free(size_t size) {
  for (int k = nfree - 1; k >= 0; k--)
    if (free_blocks[k].cap >= size && free_blocks[k].cap - size <= size / 4 + block_align(size))
      return take_at(k);
  return (Block){NULL, 0};
}

/* The smallest free block of at least ``size`` bytes, taken off the free list; {NULL, 0}
   when there is none. For an array that grows: the block of the same array in an earlier
   call is as large as it grew then. Under the lock. */
static Block take_growable(size_t size) {
  int best = -1;
  for (int k = 0; k < nfree; k++)
    if (free_blocks[k].cap >= size && (best < 0 || free_blocks[k].cap < free_blocks[best].cap))
      best = k;
  return best < 0 ? (Block){NULL, 0} : take_at(best);
}

/* Put ``b`` on the free list, evicting the oldest blocks while the list is over its
   limits; ``b`` itself goes back to the system when it alone is over the limit. Under the
   lock. */
static void keep_free(Block b) {
  if (b.cap > limit) { munmap(b.ptr, b.cap); return; }
  while (nfree == POOL_FREE_BLOCKS || (nfree > 0 && free_bytes + b.cap > limit)) evict_oldest();
  free_blocks[nfree++] = b;
  free_bytes += b.cap;
}

/* The live entry of ``ptr`` (NULL: an empty entry), or -1. Under the lock. */
static int find_live(const void* ptr) {
  for (int k = 0; k < POOL_LIVE_BLOCKS; k++)
    if (live[k].ptr == ptr) return k;
  return -1;
}

/* A pool block for ``size`` bytes (at least KERNEL_MIN_BYTES): a reused one (of the size,
   or for an array that ``grows`` of any larger size), zeroed with a memset when ``zero``,
   or a new mapping (zero pages); NULL when the pool is off or full. */
static void* pool_take(size_t size, int zero, int grows) {
  pthread_mutex_lock(&lock);
  int slot = limit ? find_live(NULL) : -1;
  Block b = {NULL, 0};
  if (slot >= 0) {
    b = grows ? take_growable(size) : take_free(size);
    live[slot].ptr = RESERVED;
  }
  pthread_mutex_unlock(&lock);
  if (slot < 0) return NULL;
  if (b.ptr) {
    if (zero) memset(b.ptr, 0, size);
  } else {
    size_t align = block_align(size);
    b.cap = (size + align - 1) & ~(align - 1);
    b.ptr = mmap(NULL, b.cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b.ptr == MAP_FAILED) b = (Block){NULL, 0};
#ifdef MADV_HUGEPAGE
    else if (b.cap >= POOL_HUGE) madvise(b.ptr, b.cap, MADV_HUGEPAGE);
#endif
  }
  pthread_mutex_lock(&lock);
  live[slot] = b; /* {NULL, 0} when the mapping failed: the entry is empty again */
  pthread_mutex_unlock(&lock);
  return b.ptr;
}

/* calloc and malloc from the pool for blocks of at least ``least`` bytes */
static void* take_calloc(size_t nelem, size_t elsize, size_t least) {
  size_t size = nelem * elsize;
  void* p = (elsize && size / elsize != nelem) || size < least ? NULL : pool_take(size, 1, 0);
  return p ? p : calloc(nelem, elsize);
}

static void* take_malloc(size_t size, size_t least) {
  void* p = size < least ? NULL : pool_take(size, 0, 0);
  return p ? p : malloc(size);
}

static void* pool_calloc(void* ctx, size_t nelem, size_t elsize) {
  (void)ctx;
  return take_calloc(nelem, elsize, POOL_MIN_BYTES);
}

static void* pool_malloc(void* ctx, size_t size) {
  (void)ctx;
  return take_malloc(size, POOL_MIN_BYTES);
}

static void pool_free(void* ctx, void* ptr, size_t size) {
  (void)ctx; (void)size;
  if (!ptr) return;
  pthread_mutex_lock(&lock);
  int k = find_live(ptr);
  if (k >= 0) {
    Block b = live[k];
    live[k] = (Block){NULL, 0};
    keep_free(b);
  }
  pthread_mutex_unlock(&lock);
  if (k < 0) free(ptr);
}

/* NumPy reallocates an array's data in place only for ndarray.resize and the like: a pool
   block moves to plain memory then, and the block goes back to the pool. */
static void* pool_realloc(void* ctx, void* ptr, size_t new_size) {
  pthread_mutex_lock(&lock);
  int k = ptr ? find_live(ptr) : -1;
  Block b = k >= 0 ? live[k] : (Block){NULL, 0};
  pthread_mutex_unlock(&lock);
  if (k < 0) return realloc(ptr, new_size);
  void* p = malloc(new_size ? new_size : 1);
  if (!p) return NULL;
  memcpy(p, b.ptr, new_size < b.cap ? new_size : b.cap);
  pool_free(ctx, ptr, b.cap);
  return p;
}

static PyDataMem_Handler pool_handler = {
  "coiter_result_pool", 1, {NULL, pool_malloc, pool_calloc, pool_realloc, pool_free},
};

/* The kernels' allocator (pool_allocator): blocks from KERNEL_MIN_BYTES on come from the
   pool, smaller ones from libc; free and realloc tell them apart by the live table. */
static void* kernel_malloc(size_t size) { return take_malloc(size, KERNEL_MIN_BYTES); }

static void* kernel_calloc(size_t nelem, size_t elsize) {
  return take_calloc(nelem, elsize, KERNEL_MIN_BYTES);
}

static void kernel_free(void* ptr) { pool_free(NULL, ptr, 0); }

/* A pool block keeps its place while it is large enough (shrinking included: the block
   stays as large for the next call's array). A block that outgrows it moves to the smallest
   free block that holds it, else to a new mapping, and goes back to the system: the free
   list then holds the arrays as large as they grew, which the same arrays of the next call
   take at their first growth, neither copying nor faulting again. A libc block moves to the
   pool when it grows to KERNEL_MIN_BYTES. */
static void* kernel_realloc(void* ptr, size_t size) {
  if (!ptr) return kernel_malloc(size);
  pthread_mutex_lock(&lock);
  int k = find_live(ptr);
  Block b = k >= 0 ? live[k] : (Block){NULL, 0};
  pthread_mutex_unlock(&lock);
  size_t old = k >= 0 ? b.cap : malloc_usable_size(ptr);
  if (size <= old || (k < 0 && size < KERNEL_MIN_BYTES)) return k >= 0 ? ptr : realloc(ptr, size);
  void* p = pool_take(size, 0, 1);
  if (!p) {
    if (k < 0) return realloc(ptr, size);
    if (!(p = malloc(size))) return NULL;
  }
  memcpy(p, ptr, old);
  if (k < 0) {
    free(ptr);
    return p;
  }
  pthread_mutex_lock(&lock);
  live[find_live(ptr)] = (Block){NULL, 0};
  pthread_mutex_unlock(&lock);
  munmap(b.ptr, b.cap);
  return p;
}

static const PoolAllocator allocator = {kernel_malloc, kernel_calloc, kernel_realloc, kernel_free};

const PoolAllocator* pool_allocator(void) { return &allocator; }

int pool_init(void) {
  handler = PyCapsule_New(&pool_handler, "mem_handler", NULL);
  return handler ? 0 : -1;
}

PyObject* pool_array(npy_intp n, int typenum, int zero) {
  /* on the call path of every kernel: arrays too short for the pool at 16 bytes a value
     (complex128) skip the item size's lookup */
  int small = limit == 0 || (size_t)n < POOL_MIN_BYTES / 16;
  if (!small) {
    PyArray_Descr* descr = PyArray_DescrFromType(typenum);
    if (!descr) return NULL;
    small = (size_t)n * (size_t)PyDataType_ELSIZE(descr) < POOL_MIN_BYTES;
    Py_DECREF(descr);
  }
  if (small) return zero ? PyArray_ZEROS(1, &n, typenum, 0) : PyArray_EMPTY(1, &n, typenum, 0);
  PyObject* old = PyDataMem_SetHandler(handler);
  if (!old) return NULL;
  PyObject* arr = zero ? PyArray_ZEROS(1, &n, typenum, 0) : PyArray_EMPTY(1, &n, typenum, 0);
  PyObject* back = PyDataMem_SetHandler(old);
  Py_DECREF(old);
  if (!back) { Py_XDECREF(arr); return NULL; }
  Py_DECREF(back);
  return arr;
}

void pool_set_limit(size_t bytes) {
  pthread_mutex_lock(&lock);
  limit = bytes;
  while (nfree > 0 && free_bytes > limit) evict_oldest();
  pthread_mutex_unlock(&lock);
}

void pool_stats(size_t* limit_out, int* free_out, size_t* free_bytes_out, int* live_out) {
  pthread_mutex_lock(&lock);
  int n = 0;
  for (int k = 0; k < POOL_LIVE_BLOCKS; k++) n += live[k].ptr != NULL;
  *limit_out = limit; *free_out = nfree; *free_bytes_out = free_bytes; *live_out = n;
  pthread_mutex_unlock(&lock);
}
