"""C back end: prints imperative IR as readable C99 with TACO's naming."""
from __future__ import annotations

import math
import re
from dataclasses import replace
from functools import singledispatch

from .outline import outline_parallel_bodies
from ..ir.nodes import (
    Assign, Bin, Block, Break, Call, Goto, Label, Region, Cast, Comment, Const, Decl, ExprStmt, For, Function, If, IRExpr,
    IRStmt, Load, Max, Min, Param, Pragma, Return, Select, Un, Var, While,
)

# Parallel regions get one thread per this many units of work (stored values read or written
# by the call) when the caller does not ask for a thread count. A 2-thread CSR SpMV with 8k
# nonzeros is slower than the serial loop on this project's machines, quiet or busy; with
# 16k it is 1.5x faster in median on both (docs/performance.md).
WORK_PER_THREAD = 16384

HEAD = """\
#define _DEFAULT_SOURCE /* madvise */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <complex.h>
#include <math.h>
#include <sys/mman.h>
/* a function the C compiler neither inlines nor clones for constant arguments, so that
   its loops are compiled once (codegen/outline.py) */
#if defined(__GNUC__) && !defined(__clang__)
#define COITER_OUT_OF_LINE __attribute__((noinline, noclone))
#else
#define COITER_OUT_OF_LINE __attribute__((noinline))
#endif
#define COITER_MIN(a, b) ((a) < (b) ? (a) : (b))
#define COITER_MAX(a, b) ((a) > (b) ? (a) : (b))
#define COITER_INDEX_MAX {index_max}
#define COITER_WORK_PER_THREAD {work_per_thread}
#ifdef _OPENMP
#include <omp.h>
#include <time.h>
static inline int64_t coiter_clock(void) {{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}}
/* A team that came late. Where another process keeps a core busy, a woken worker may wait a
   scheduler time slice (milliseconds) for a core. Thread 0 then waits for it either at the
   region's start (libgomp docks the workers of the last region before it starts the next, and
   a worker released from that region's end barrier may not have run since) or at its end
   (having done all the work of a dynamic schedule): CSR SpMV on bcsstk16 took 4 to 8 ms
   instead of 0.16 in one call of ten. A region is late when its thread 0 waited longer, at
   its start and end together, than it worked and COITER_LATE_SLACK_NS more. After two late
   regions in a row, the calls of this kernel that choose their own thread count run on one
   thread until coiter_serial_until (coiter_clock's nanoseconds): for 50 ms, doubling as long
   as the first region after the period is late too, up to 1.6 s, so that a machine that
   became quiet is noticed soon, and a busy one costs one slow call per period. One late
   region alone is not enough: a quiet virtual machine stalls a virtual core for 2 to 6 ms
   about once a second, which had sent 50 ms of calls (all of a benchmark's batch) to one
   thread; a core another process keeps busy is the load probe's to see (below) */
#define COITER_SERIAL_MIN_NS ((int64_t)50000000)
#define COITER_SERIAL_MAX_NS ((int64_t)1600000000)
/* a busy core kept a worker waiting 2 to 15 ms (a scheduler time slice); on a quiet machine
   a virtual core woke 20 to 200 us late a few times a second, which must not cost 50 ms of
   serial calls (docs/performance.md, "Threads only where they pay") */
#define COITER_LATE_SLACK_NS ((int64_t)500000)
static int64_t coiter_serial_until, coiter_serial_for = COITER_SERIAL_MIN_NS;
/* whether the last region judged was late */
static int coiter_was_late;
/* whether this library ran a region: its first may have created OpenMP's workers (6.5-7 ms
   of waiting at its start), which says nothing of the other cores */
static int coiter_team_started;
static inline void coiter_team_done(int64_t start, int64_t entered, int64_t first_done) {{
  if (!__atomic_exchange_n(&coiter_team_started, 1, __ATOMIC_RELAXED)) return;
  int64_t now = coiter_clock(), span = __atomic_load_n(&coiter_serial_for, __ATOMIC_RELAXED);
  if ((entered - start) + (now - first_done) > first_done - entered + COITER_LATE_SLACK_NS) {{
    if (!__atomic_exchange_n(&coiter_was_late, 1, __ATOMIC_RELAXED)) return;
    __atomic_store_n(&coiter_serial_until, now + span, __ATOMIC_RELAXED);
    __atomic_store_n(&coiter_serial_for, span < COITER_SERIAL_MAX_NS ? 2 * span : span, __ATOMIC_RELAXED);
  }} else {{
    __atomic_store_n(&coiter_was_late, 0, __ATOMIC_RELAXED);
    if (span != COITER_SERIAL_MIN_NS) __atomic_store_n(&coiter_serial_for, COITER_SERIAL_MIN_NS, __ATOMIC_RELAXED);
  }}
}}
/* The cores other processes leave free (coiter.runtime._fastcall's coiter_load_free_cores,
   which the runtime hands each library as it loads it; 0 until it knows): calls that choose
   their own thread count use no more threads than that. Without the extension, only the
   late-team back-off above. */
static int (*coiter_load_free)(int64_t now);
void coiter_use_load(int (*free_cores)(int64_t now)) {{ coiter_load_free = free_cores; }}
/* Calls after an idle pause: waking sleeping OpenMP workers took this project's VM 2-6 ms, so
   a small call that chooses its threads and comes COITER_IDLE_NS after the process's last
   call (one cell, coiter_share_last_call) runs on one thread (docs/performance.md). The pause
   runs from the last call's end (coiter_call_done): from its start, every call after one of
   over 5 ms (SpGEMM's) read as after a pause, and 2-thread SpGEMM ran on one thread. */
#ifndef COITER_IDLE_NS
#define COITER_IDLE_NS ((int64_t)5000000)
#endif
#ifndef COITER_IDLE_WORK
#define COITER_IDLE_WORK ((int64_t)1 << 20)
#endif
static int64_t coiter_own_last_call;
static int64_t* coiter_last_call = &coiter_own_last_call;
void coiter_share_last_call(int64_t* cell) {{ coiter_last_call = cell; }}
/* the thread count a call runs with, read once as the kernel starts (so that its regions and
   per-thread buffers agree): the caller's n; or 1 after an idle pause or a late team; or 0
   (chosen by the work), -c where others left only c cores free */
static inline int64_t coiter_call_threads(int64_t n, int64_t work) {{
  int64_t now = coiter_clock(), last = __atomic_exchange_n(coiter_last_call, now, __ATOMIC_RELAXED);
  if (n != 0) return n;
  if (now - last > COITER_IDLE_NS && work < COITER_IDLE_WORK) return 1;
  int64_t until = __atomic_load_n(&coiter_serial_until, __ATOMIC_RELAXED);
  if (until && now < until) return 1;
  int free = coiter_load_free ? coiter_load_free(now) : 0;
  return free > 0 && free < omp_get_max_threads() ? -free : 0;
}}
/* a call's end: the next call's pause starts here (the kernel calls it before it returns) */
static inline void coiter_call_done(void) {{ __atomic_store_n(coiter_last_call, coiter_clock(), __ATOMIC_RELAXED); }}
/* threads of a parallel region: the n requested, or (n = 0, or -c for at most c) OpenMP's
   default limited to one thread per COITER_WORK_PER_THREAD units of work (values the call
   reads and writes): a region costs microseconds, and a thread waiting for a busy core much
   more */
static inline int coiter_threads(int64_t n, int64_t work) {{
  if (n > 0) return (int)n;
  int64_t most = work / COITER_WORK_PER_THREAD, t = omp_get_max_threads();
  if (n < 0 && -n < t) t = -n;
  return (int)(most < 1 ? 1 : (most < t ? most : t));
}}
#define COITER_THREAD_NUM() omp_get_thread_num()
#else
static inline int coiter_threads(int64_t n, int64_t work) {{ (void)n; (void)work; return 1; }}
static inline int64_t coiter_clock(void) {{ return 0; }}
static inline void coiter_team_done(int64_t start, int64_t entered, int64_t first_done) {{
  (void)start; (void)entered; (void)first_done;
}}
static inline int64_t coiter_call_threads(int64_t n, int64_t work) {{ (void)work; return n; }}
static inline void coiter_call_done(void) {{}}
#define COITER_THREAD_NUM() 0
#endif
/* Before a sparse loop that sums into a scalar in order (SpMV's row sum): without
   reassociation GCC vectorizes only the loads and products and still adds one by one, and
   the vector loop's prologue and remainder cost more than they save on short rows (SpMV on
   rows of ~8 nonzeros: 6 to 10% slower, never faster). fast_math sums do vectorize. */
#if defined(_OPENMP) && !defined(COITER_FAST_MATH)
#define COITER_SCALAR_SUM _Pragma("omp simd simdlen(1)")
#else
#define COITER_SCALAR_SUM
#endif
/* Before a loop over positions whose last statement adds into the entries of a dense row of
   constant length (SpMM's, TTM's, a block of lower/dense_rows.py): GCC otherwise vectorized
   the positions instead of the row, gathering each column across eight positions and adding
   them one lane at a time (float32 SpMM with 4 to 16 columns: 3 to 7 times slower than
   float64; bcsstk33, 16 columns, 5.3 ms against 0.78) */
#ifdef _OPENMP
#define COITER_ROW_SUM _Pragma("omp simd simdlen(1)")
#else
#define COITER_ROW_SUM
#endif
/* Whether the short- and tiny-run helpers pay (lower/short_runs.py, lower/tiny_runs.py): they
   read runs with vector gathers, fast on Intel's AVX-512 processors and slow on AMD's Zen
   (GCC 12 names Zen 4 znver3), where the plain loop was faster on most inputs: SpMV on
   USA-road-NE 18.8 -> 9.9 ms, TTV on jf17k-3ary 0.047 -> 0.024 ms (docs/performance.md).
   -DCOITER_FAST_GATHER=0 or 1 in $COITER_CFLAGS decides instead. */
#ifndef COITER_FAST_GATHER
#if defined(__AVX512F__) && defined(__AVX512VL__) && !defined(__znver1__) && !defined(__znver2__) \\
  && !defined(__znver3__) && !defined(__znver4__) && !defined(__znver5__)
#define COITER_FAST_GATHER 1
#else
#define COITER_FAST_GATHER 0
#endif
#endif
/* Whether runs of up to four positions are summed without a loop (lower/short_runs.py): by
   the gathering helper where gathers are fast, else by one that reads the four positions
   with AVX2's plain vector loads and x with four scalar loads (AMD Zen: SpMV on USA-road-NE
   9.7 -> 6.4 ms, as-caida 0.21 -> 0.11 ms in a C harness). -DCOITER_SHORT_RUNS=0 or 1 in
   $COITER_CFLAGS decides instead. */
#ifndef COITER_SHORT_RUNS
#if COITER_FAST_GATHER || defined(__AVX2__)
#define COITER_SHORT_RUNS 1
#else
#define COITER_SHORT_RUNS 0
#endif
#endif
/* Whether rows of one or two positions are summed eight at a time (lower/tiny_runs.py): by
   a helper that gathers x where gathers are fast, else by one that reads x with scalar
   loads; both need AVX-512 (elsewhere the loop runs). -DCOITER_TINY_RUNS=0 or 1 in
   $COITER_CFLAGS decides instead. */
#ifndef COITER_TINY_RUNS
#if defined(__AVX512F__) && defined(__AVX512VL__)
#define COITER_TINY_RUNS 1
#else
#define COITER_TINY_RUNS 0
#endif
#endif
/* What the loop's exit branch cannot learn, for the plain-load helpers to pay. Called again
   and again on one operand, the branch learns the lengths of its runs by heart up to some
   80,000 bits of them per core (AMD Zen 4: coiter_runs_unlearned). -DCOITER_SHORT_RUNS_BITS=n
   in $COITER_CFLAGS decides instead; the gathering helpers, measured faster on operands the
   loop learns (TTV collegemsg-day), have no minimum. */
#ifndef COITER_SHORT_RUNS_BITS
#if COITER_FAST_GATHER
#define COITER_SHORT_RUNS_BITS 0
#else
#define COITER_SHORT_RUNS_BITS 80000
#endif
#endif
/* every kernel has the parameters coiter_nthreads and coiter_work */
#define COITER_THREADS() coiter_threads(coiter_nthreads, coiter_work)
"""

# Helpers a kernel's translation unit includes only when its code (or another included
# helper) names them: the names each defines, and its text (formatted like HEAD).
HELPERS: tuple[tuple[tuple[str, ...], str], ...] = (
    (('coiter_chunk_rows',), """\
/* rows per dynamic chunk of a loop of n rows on t threads that do `work` units in all
   (coiter_work): about 16 chunks per thread, at most 2048 rows, and at least the rows that
   hold 4096 units (a microsecond or two, which pays for taking a chunk). Fewer than 64 where
   rows are heavy: a loop of a few long rows (an LP matrix of 25 rows, 5000 entries each) in
   one 64-row chunk left every thread but one idle. More on small loops: 32 chunks of ~1000
   units (SpMV on add32's 5k rows, 2 threads) took 10.0 us, 8 of ~4100 units 8.1 us */
static inline int64_t coiter_chunk_rows(int64_t n, int64_t t, int64_t work) {{
  int64_t c = n / (16 * (t > 0 ? t : 1));
  int64_t per_row = n > 0 ? work / n : 0;
  int64_t least = per_row > 0 ? 4096 / per_row : 64;
  if (least < 1) least = 1;
  return c < least ? least : (c > 2048 ? 2048 : c);
}}
"""),
    (('coiter_balanced_start',), """\
/* the first of n iterations that part `part` of `parts` starts at, so that each part gets
   about the same work: prefix[q] is the work of iterations 0..q-1 */
static inline int64_t coiter_balanced_start(const int64_t* prefix, int64_t n, int64_t part, int64_t parts) {{
  if (part >= parts) return n;
  int64_t goal = (int64_t)((double)prefix[n] * (double)part / (double)parts), lo = 0, hi = n;
  while (lo < hi) {{
    int64_t mid = lo + (hi - lo) / 2;
    if (prefix[mid] < goal) lo = mid + 1; else hi = mid;
  }}
  return lo;
}}
"""),
    (('coiter_runs_unlearned',), """\
/* Whether `runs` runs holding `stored` positions in all, split among `threads` cores, carry
   more than COITER_SHORT_RUNS_BITS bits of run lengths per core, which repeated calls would
   teach the loop's exit branch (then it beats the short-run helper): the runs times the
   entropy of a geometric length of their mean. Loop / helper time at 1 thread, 2 where
   noted, on this estimate's order (AMD Zen 4; k = 1000 bits): loop faster at collegemsg-day's
   TTV fibers 33k (0.70), jf17k-3ary's 34k (0.71), wn18rr's at 2 threads 41k (0.78),
   as-caida's first 20k rows 66k (0.74), USA-road-NY's first 30k 77k (0.85), a random 10% of
   runs of 2-4 among 100k single ones 78k (0.82); helper faster at wn18rr 81k (1.29), as-caida
   86k (1.23), USA-road-NY's first 40k 101k (1.18), fb15k-237's fibers 283k (1.37) and 142k at
   2 threads (1.29). (luxembourg_osm's rows, nearly all of two, carry less than the estimate:
   a tie at 239k.) */
static inline int coiter_runs_unlearned(int64_t runs, int64_t stored, int64_t threads) {{
  if (COITER_SHORT_RUNS_BITS <= 0) return 1;
  if (runs <= 0 || stored <= runs) return 0;
  double p = (double)runs / (double)stored;
  double bits = (-(1 - p) * log2(1 - p) - p * log2(p)) / p;
  return (double)runs * bits >= (double)COITER_SHORT_RUNS_BITS * (double)(threads > 0 ? threads : 1);
}}
"""),
    (('coiter_l2_bytes',), """\
/* a core's L2 cache in bytes as glibc reports it (1 MiB where it reports none), read once */
#include <unistd.h>
static int64_t coiter_l2_bytes(void) {{
  static int64_t l2_bytes;
  int64_t b = __atomic_load_n(&l2_bytes, __ATOMIC_RELAXED);
  if (!b) {{
    long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    b = l2 > 0 ? (int64_t)l2 : (int64_t)1 << 20;
    __atomic_store_n(&l2_bytes, b, __ATOMIC_RELAXED);
  }}
  return b;
}}
"""),
    (('coiter_streams', 'coiter_stream_double', 'coiter_stream_float', 'coiter_stream_fence'), """\
/* Streaming (non-temporal) stores of a large dense result's rows (lower/dense_rows.py). A
   row stored the usual way is first read into the cache (its line is fetched to be written)
   and then evicts operand data; a result of many megabytes stays in no cache anyway. SSE2's
   streaming stores skip the read. TTM at rank 16, 1 thread, median ms, caches flushed
   between calls / not (benchmarks/streaming.py): gen-uniform3-25000 (61 MiB result) 10.29 ->
   6.85 / 9.61 -> 5.69, fb15k-237 (12.5 MiB) 2.70 -> 2.14 / 2.02 -> 1.46; SpMM on USA-road-NE
   (186 MiB) 51.8 -> 50.1 / 45.3 -> 42.8. In a C harness with warm caches a 2.6 MiB result took 155 -> 173 us
   and an 8.5 MiB one 1.06 -> 1.03 ms: rows stream from COITER_STREAM_MIN_BYTES of result, by
   default four times a core's L2 cache as glibc reports it (1 MiB where it reports none).
   -DCOITER_STREAM_STORES=0 turns them off. */
#ifndef COITER_STREAM_STORES
#if defined(__SSE2__)
#define COITER_STREAM_STORES 1
#else
#define COITER_STREAM_STORES 0
#endif
#endif
#if COITER_STREAM_STORES
#include <emmintrin.h>
#endif
static int64_t coiter_stream_bytes(void) {{
#ifdef COITER_STREAM_MIN_BYTES
  return COITER_STREAM_MIN_BYTES;
#else
  return 4 * coiter_l2_bytes();
#endif
}}
/* Whether a loop writing `rows` whole rows of `n` values of `size` bytes from `vals` streams
   them, by blocks of `width` values (each block's first value 16-byte aligned) */
static inline int coiter_streams(const void* vals, int64_t rows, int64_t n, int64_t size, int64_t width) {{
  (void)vals; (void)rows; (void)n; (void)size; (void)width;
#if COITER_STREAM_STORES
  return ((uintptr_t)vals & 15) == 0 && n % width == 0 && rows * n * size >= coiter_stream_bytes();
#else
  return 0;
#endif
}}
/* vals[at .. at + n) = row[0 .. n) by streaming stores (only where coiter_streams said so: a
   branch here between them and plain stores kept GCC from holding the row in registers) */
static inline void coiter_stream_double(double* restrict vals, int64_t at, const double* restrict row, int64_t n) {{
#if COITER_STREAM_STORES
  for (int64_t l = 0; l < n; l += 2) _mm_stream_pd(vals + at + l, _mm_loadu_pd(row + l));
#else
  for (int64_t l = 0; l < n; l++) vals[at + l] = row[l];
#endif
}}
static inline void coiter_stream_float(float* restrict vals, int64_t at, const float* restrict row, int64_t n) {{
#if COITER_STREAM_STORES
  for (int64_t l = 0; l < n; l += 4) _mm_stream_ps(vals + at + l, _mm_loadu_ps(row + l));
#else
  for (int64_t l = 0; l < n; l++) vals[at + l] = row[l];
#endif
}}
/* after a loop's streaming stores: they are weakly ordered, and the caller reads the result */
static inline void coiter_stream_fence(int stream) {{
#if COITER_STREAM_STORES
  if (stream) _mm_sfence();
#endif
  (void)stream;
}}
"""),
    (('coiter_far_bytes',), """\
/* bytes from which an array read at scattered places (SpMV's x) is fetched ahead: three
   times a core's L2 cache as glibc reports it (1 MiB where it reports none); smaller
   arrays stay in L2, where prefetching only costs (lower/gathers.py) */
static int64_t coiter_far_bytes(void) {{
  return 3 * coiter_l2_bytes();
}}
"""),
    (('coiter_gathers_near',), """\
/* whether the reads that crd (of `stored` coordinates) directs stay near each other: in each
   of 16 windows of 256 positions spread over it, the coordinates span fewer than 8192. A band
   or stencil matrix's columns are so; the hardware prefetcher follows such reads, and
   fetching them ahead only costs (SpMV on a band matrix of 6M rows, 1 / 2 threads: 57 / 31 ms
   without, 63 / 36 ms with; lower/gathers.py) */
#define COITER_GATHERS_NEAR(suffix, index_t) \\
static inline bool coiter_gathers_near_##suffix(const index_t* crd, int64_t stored) {{ \\
  if (stored < 16 * 256) return false; \\
  for (int64_t j = 0; j < 16; j++) {{ \\
    const index_t* w = crd + j * ((stored - 256) / 15); \\
    index_t lo = w[0], hi = w[0]; \\
    for (int q = 1; q < 256; q++) {{ \\
      lo = w[q] < lo ? w[q] : lo; \\
      hi = w[q] > hi ? w[q] : hi; \\
    }} \\
    if ((int64_t)hi - (int64_t)lo >= 8192) return false; \\
  }} \\
  return true; \\
}}
COITER_GATHERS_NEAR(i32, int32_t)
COITER_GATHERS_NEAR(i64, int64_t)
#define coiter_gathers_near(crd, stored) \\
  _Generic((crd), const int32_t*: coiter_gathers_near_i32, int32_t*: coiter_gathers_near_i32, \\
           const int64_t*: coiter_gathers_near_i64, int64_t*: coiter_gathers_near_i64)(crd, stored)
"""),
    (('coiter_advise', 'coiter_malloc', 'coiter_calloc', 'coiter_realloc', 'coiter_free'), """\
/* Heap blocks of 4 MiB and more get transparent huge pages, as NumPy's arrays do: a 64 MiB
   result then takes 32 page faults, not 16384 (a third of a large SpAdd's time). The
   advice covers the block's whole pages: advising part of a mapping splits it, and glibc
   could no longer grow it with mremap (it would copy instead) */
static inline void* coiter_advise(void* p, size_t n) {{
#ifdef MADV_HUGEPAGE
  if (p && n >= ((size_t)4 << 20)) {{
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095, b = ((uintptr_t)p + n + 4095) & ~(uintptr_t)4095;
    madvise((void*)a, b - a, MADV_HUGEPAGE);
  }}
#endif
  return p;
}}
/* The kernel's heap: libc's, or the one coiter_use_allocator installs as the runtime loads
   the library (coiter.runtime._fastcall's pool, which keeps freed blocks mapped for the next
   call's arrays; its free and realloc take libc's blocks too) */
typedef struct {{
  void* (*malloc)(size_t);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  void (*free)(void*);
}} coiter_allocator;
static coiter_allocator coiter_heap;
void coiter_use_allocator(const coiter_allocator* a) {{ coiter_heap = *a; }}
static inline void* coiter_malloc(size_t n) {{
  return coiter_heap.malloc ? coiter_heap.malloc(n) : coiter_advise(malloc(n), n);
}}
static inline void* coiter_calloc(size_t n, size_t e) {{
  return coiter_heap.calloc ? coiter_heap.calloc(n, e) : coiter_advise(calloc(n, e), n * e);
}}
/* never to 0 bytes: realloc(p, 0) may free p and return NULL, which reads as out of memory
   (a result level below which an empty dense mode leaves no values) */
static inline void* coiter_realloc(void* p, size_t n) {{
  if (!n) n = 1;
  return coiter_heap.realloc ? coiter_heap.realloc(p, n) : coiter_advise(realloc(p, n), n);
}}
static inline void coiter_free(void* p) {{
  if (coiter_heap.free) coiter_heap.free(p); else free(p);
}}
"""),
    (('coiter_expand',), """\
/* realloc for an array that grows: from 4 MiB it reserves at least 32 MiB of address space,
   which glibc maps with mmap (its threshold never rises past 32 MiB), so later growth is
   remapped, not copied, and pages never written are never touched. Smaller blocks stay on
   the heap, where repeated calls reuse them without page faults (a fresh 32 MiB mapping for
   a 3 MiB result made SpGEMM on bayer10 1.4x slower) */
static inline void* coiter_expand(void* p, size_t n) {{
  size_t big = (size_t)32 << 20;
  return coiter_realloc(p, n >= ((size_t)4 << 20) && n < big ? big : n);
}}
"""),
    (('coiter_grow',), """\
/* realloc that zero-fills the new tail, so grown arrays behave as if calloc'ed */
static void* coiter_grow(void* p, int64_t old_n, int64_t new_n, size_t elt) {{
  char* q = (char*)coiter_expand(p, (size_t)new_n * elt);
  if (q && new_n > old_n) memset(q + (size_t)old_n * elt, 0, (size_t)(new_n - old_n) * elt);
  return q;
}}
"""),
    (('coiter_run_dot_i32', 'coiter_run_dot_i64', 'coiter_run_dotf_i32', 'coiter_run_dotf_i64'), """\
/* t + v[p] * c[k[p]] for p in s..s+n, n <= 4, added one by one in position order as the
   loop would (lower/short_runs.py), without a loop exit to mispredict; lanes past the run add
   -0.0, which leaves any sum as it is: coiter_run_dot_* for double values, coiter_run_dotf_*
   for float. e: the positions stored (v and k hold at least e).
   Where gathers are fast, masked loads and a masked gather read the run alone. Elsewhere the
   four positions from s are read whole, the next run's included, as long as they lie below
   e (else the loop runs): plain loads cost less than masks whose lengths come late, and x
   at the next run's coordinates is read a little early */
#if defined(__AVX2__)
#include <immintrin.h>
/* t plus p's four lanes, one by one in lane order */
static inline double coiter_run_add4(double t, __m256d p) {{
  __m128d lo = _mm256_castpd256_pd128(p), hi = _mm256_extractf128_pd(p, 1);
  t += _mm_cvtsd_f64(lo);
  t += _mm_cvtsd_f64(_mm_unpackhi_pd(lo, lo));
  t += _mm_cvtsd_f64(hi);
  return t + _mm_cvtsd_f64(_mm_unpackhi_pd(hi, hi));
}}
static inline float coiter_run_add4f(float t, __m128 p) {{
  __m128 hi = _mm_movehl_ps(p, p);
  t += _mm_cvtss_f32(p);
  t += _mm_cvtss_f32(_mm_movehdup_ps(p));
  t += _mm_cvtss_f32(hi);
  return t + _mm_cvtss_f32(_mm_movehdup_ps(hi));
}}
#endif
#if defined(__AVX512F__) && defined(__AVX512VL__) && COITER_FAST_GATHER
#define COITER_RUN_DOT(suffix, index_t, load, gather) \\
static inline double coiter_run_dot_##suffix(double t, const double* restrict v, const index_t* restrict k, \\
                                             const double* restrict c, int64_t s, int64_t n, int64_t e) {{ \\
  (void)e; \\
  __mmask8 m = (__mmask8)((1u << n) - 1); \\
  __m256d y = gather(_mm256_setzero_pd(), m, load(m, k + s), c, 8); \\
  return coiter_run_add4(t, _mm256_mask_mul_pd(_mm256_set1_pd(-0.0), m, _mm256_maskz_loadu_pd(m, v + s), y)); \\
}}
COITER_RUN_DOT(i32, int32_t, _mm_maskz_loadu_epi32, _mm256_mmask_i32gather_pd)
COITER_RUN_DOT(i64, int64_t, _mm256_maskz_loadu_epi64, _mm256_mmask_i64gather_pd)
#define COITER_RUN_DOTF(suffix, index_t, load, gather) \\
static inline float coiter_run_dotf_##suffix(float t, const float* restrict v, const index_t* restrict k, \\
                                             const float* restrict c, int64_t s, int64_t n, int64_t e) {{ \\
  (void)e; \\
  __mmask8 m = (__mmask8)((1u << n) - 1); \\
  __m128 y = gather(_mm_setzero_ps(), m, load(m, k + s), c, 4); \\
  return coiter_run_add4f(t, _mm_mask_mul_ps(_mm_set1_ps(-0.0f), m, _mm_maskz_loadu_ps(m, v + s), y)); \\
}}
COITER_RUN_DOTF(i32, int32_t, _mm_maskz_loadu_epi32, _mm_mmask_i32gather_ps)
COITER_RUN_DOTF(i64, int64_t, _mm256_maskz_loadu_epi64, _mm256_mmask_i64gather_ps)
#elif defined(__AVX2__)
#define COITER_RUN_DOT(suffix, index_t) \\
static inline double coiter_run_dot_##suffix(double t, const double* restrict v, const index_t* restrict k, \\
                                             const double* restrict c, int64_t s, int64_t n, int64_t e) {{ \\
  if (s + 4 > e) {{ \\
    for (int64_t p = s; p < s + n; p++) t += v[p] * c[k[p]]; \\
    return t; \\
  }} \\
  const index_t* q = k + s; \\
  __m256d y = _mm256_set_pd(c[q[3]], c[q[2]], c[q[1]], c[q[0]]); \\
  __m256i lane = _mm256_set_epi64x(3, 2, 1, 0); \\
  __m256d keep = _mm256_castsi256_pd(_mm256_cmpgt_epi64(_mm256_set1_epi64x(n), lane)); \\
  return coiter_run_add4(t, _mm256_blendv_pd(_mm256_set1_pd(-0.0), _mm256_mul_pd(_mm256_loadu_pd(v + s), y), keep)); \\
}}
COITER_RUN_DOT(i32, int32_t)
COITER_RUN_DOT(i64, int64_t)
#define COITER_RUN_DOTF(suffix, index_t) \\
static inline float coiter_run_dotf_##suffix(float t, const float* restrict v, const index_t* restrict k, \\
                                             const float* restrict c, int64_t s, int64_t n, int64_t e) {{ \\
  if (s + 4 > e) {{ \\
    for (int64_t p = s; p < s + n; p++) t += v[p] * c[k[p]]; \\
    return t; \\
  }} \\
  const index_t* q = k + s; \\
  __m128 y = _mm_set_ps(c[q[3]], c[q[2]], c[q[1]], c[q[0]]); \\
  __m128 keep = _mm_castsi128_ps(_mm_cmpgt_epi32(_mm_set1_epi32((int)n), _mm_set_epi32(3, 2, 1, 0))); \\
  return coiter_run_add4f(t, _mm_blendv_ps(_mm_set1_ps(-0.0f), _mm_mul_ps(_mm_loadu_ps(v + s), y), keep)); \\
}}
COITER_RUN_DOTF(i32, int32_t)
COITER_RUN_DOTF(i64, int64_t)
#else
#define COITER_RUN_DOT(name, value_t, index_t) \\
static inline value_t name(value_t t, const value_t* restrict v, const index_t* restrict k, \\
                           const value_t* restrict c, int64_t s, int64_t n, int64_t e) {{ \\
  (void)e; \\
  for (int64_t p = s; p < s + n; p++) t += v[p] * c[k[p]]; \\
  return t; \\
}}
COITER_RUN_DOT(coiter_run_dot_i32, double, int32_t)
COITER_RUN_DOT(coiter_run_dot_i64, double, int64_t)
COITER_RUN_DOT(coiter_run_dotf_i32, float, int32_t)
COITER_RUN_DOT(coiter_run_dotf_i64, float, int64_t)
#endif
"""),
    (('coiter_runs_even',), """\
/* whether the runs of pos (runs of them) look even: of 16 runs spread over them, at least 14
   hold as many positions as the middle run (a band or stencil matrix's rows). A loop over
   such runs exits where the branch predictor expects it, and beats coiter_run_vdot's lanes on
   runs of under 16 (lower/vector_runs.py) */
#define COITER_RUNS_EVEN(suffix, index_t) \\
static inline bool coiter_runs_even_##suffix(const index_t* pos, int64_t runs) {{ \\
  if (runs < 16) return false; \\
  int64_t mid = pos[runs / 2 + 1] - pos[runs / 2], same = 0; \\
  for (int64_t j = 0; j < 16; j++) {{ \\
    int64_t r = j * (runs / 16) + runs / 32; \\
    same += pos[r + 1] - pos[r] == mid; \\
  }} \\
  return same >= 14; \\
}}
COITER_RUNS_EVEN(i32, int32_t)
COITER_RUNS_EVEN(i64, int64_t)
#define coiter_runs_even(pos, runs) \\
  _Generic((pos), const int32_t*: coiter_runs_even_i32, int32_t*: coiter_runs_even_i32, \\
           const int64_t*: coiter_runs_even_i64, int64_t*: coiter_runs_even_i64)(pos, runs)
"""),
    (('coiter_run_vdot_i32', 'coiter_run_vdot_i64', 'coiter_run_vdotf_i32', 'coiter_run_vdotf_i64'), """\
/* the sum of v[p] * c[k[p]] for p in s..e in eight lanes (lower/vector_runs.py): lane j adds
   positions s + j, s + j + 8, ... one by one from 0.0, and the lanes are added as
   ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); coiter_run_vdot_* for double values,
   coiter_run_vdotf_* for float. The order depends on the run alone, so every machine gets
   the same bits: where gathers are fast a vector loop with masked loads (nothing past the
   run is read), elsewhere eight scalar sums in the same order */
#if defined(__AVX512F__) && defined(__AVX512VL__) && COITER_FAST_GATHER
#include <immintrin.h>
#define COITER_RUN_VDOT(suffix, index_t, load, gather) \\
static inline double coiter_run_vdot_##suffix(const double* restrict v, const index_t* restrict k, \\
                                              const double* restrict c, int64_t s, int64_t e) {{ \\
  __m512d t = _mm512_setzero_pd(); \\
  for (int64_t p = s; p < e; p += 8) {{ \\
    __mmask8 m = (__mmask8)((1u << (e - p < 8 ? e - p : 8)) - 1); \\
    __m512d x = gather(_mm512_setzero_pd(), m, load(m, k + p), c, 8); \\
    t = _mm512_mask_add_pd(t, m, t, _mm512_mul_pd(_mm512_maskz_loadu_pd(m, v + p), x)); \\
  }} \\
  __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(t), _mm512_extractf64x4_pd(t, 1)); \\
  __m128d g = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1)); \\
  return _mm_cvtsd_f64(_mm_add_sd(g, _mm_unpackhi_pd(g, g))); \\
}}
COITER_RUN_VDOT(i32, int32_t, _mm256_maskz_loadu_epi32, _mm512_mask_i32gather_pd)
COITER_RUN_VDOT(i64, int64_t, _mm512_maskz_loadu_epi64, _mm512_mask_i64gather_pd)
#define COITER_RUN_VDOTF(suffix, index_t, load, gather) \\
static inline float coiter_run_vdotf_##suffix(const float* restrict v, const index_t* restrict k, \\
                                              const float* restrict c, int64_t s, int64_t e) {{ \\
  __m256 t = _mm256_setzero_ps(); \\
  for (int64_t p = s; p < e; p += 8) {{ \\
    __mmask8 m = (__mmask8)((1u << (e - p < 8 ? e - p : 8)) - 1); \\
    __m256 x = gather(_mm256_setzero_ps(), m, load(m, k + p), c, 4); \\
    t = _mm256_mask_add_ps(t, m, t, _mm256_mul_ps(_mm256_maskz_loadu_ps(m, v + p), x)); \\
  }} \\
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)); \\
  __m128 g = _mm_add_ps(h, _mm_movehl_ps(h, h)); \\
  return _mm_cvtss_f32(_mm_add_ss(g, _mm_movehdup_ps(g))); \\
}}
COITER_RUN_VDOTF(i32, int32_t, _mm256_maskz_loadu_epi32, _mm256_mmask_i32gather_ps)
COITER_RUN_VDOTF(i64, int64_t, _mm512_maskz_loadu_epi64, _mm512_mask_i64gather_ps)
#else
#define COITER_LANE_ADD(j) l##j += v[p + j] * c[k[p + j]];
/* the eight lanes' loop stays scalar: GCC 12 vectorized it for float across iterations,
   sixteen at a time with AVX-512 gathers, which are slow on AMD Zen (float32 SpMV on
   lp_fit2d, rows of 5000 entries: 0.102 ms against float64's 0.048) */
#ifdef _OPENMP
#define COITER_LANES_SCALAR _Pragma("omp simd simdlen(1)")
#else
#define COITER_LANES_SCALAR
#endif
#define COITER_RUN_VDOT(name, value_t, index_t) \\
static inline value_t name(const value_t* restrict v, const index_t* restrict k, \\
                           const value_t* restrict c, int64_t s, int64_t e) {{ \\
  value_t l0 = 0, l1 = 0, l2 = 0, l3 = 0, l4 = 0, l5 = 0, l6 = 0, l7 = 0; \\
  int64_t p, full = s + (e - s) / 8 * 8; \\
  COITER_LANES_SCALAR \\
  for (p = s; p < full; p += 8) {{ \\
    COITER_LANE_ADD(0) COITER_LANE_ADD(1) COITER_LANE_ADD(2) COITER_LANE_ADD(3) \\
    COITER_LANE_ADD(4) COITER_LANE_ADD(5) COITER_LANE_ADD(6) COITER_LANE_ADD(7) \\
  }} \\
  p = full; \\
  if (p < e) {{ COITER_LANE_ADD(0) if (p + 1 < e) {{ COITER_LANE_ADD(1) if (p + 2 < e) {{ COITER_LANE_ADD(2) \\
  if (p + 3 < e) {{ COITER_LANE_ADD(3) if (p + 4 < e) {{ COITER_LANE_ADD(4) if (p + 5 < e) {{ COITER_LANE_ADD(5) \\
  if (p + 6 < e) {{ COITER_LANE_ADD(6) }} }} }} }} }} }} }} \\
  return ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); \\
}}
COITER_RUN_VDOT(coiter_run_vdot_i32, double, int32_t)
COITER_RUN_VDOT(coiter_run_vdot_i64, double, int64_t)
COITER_RUN_VDOT(coiter_run_vdotf_i32, float, int32_t)
COITER_RUN_VDOT(coiter_run_vdotf_i64, float, int64_t)
#endif
"""),
    (('coiter_rows_dot_i32', 'coiter_rows_dot_i64', 'coiter_rows_dotf_i32', 'coiter_rows_dotf_i64'), """\
/* y[r] = the sum of v[p] * c[k[p]] for p in pos[r]..pos[r+1], for rows r in s..e, each
   sum added one by one in position order from 0.0 as the row loop would
   (lower/tiny_runs.py; coiter_rows_dot_* for double values, coiter_rows_dotf_* for float).
   Eight rows go at once, a row per lane: step j adds position pos[r] + j of each row still
   that long, so rows of one to a few positions cost no loop exit each. Where the eight rows hold at most 16 positions, their values and coordinates
   are loaded once (masked: nothing past them is read) and each step picks its lanes' by a
   permute, so that only c is gathered; otherwise each step gathers all three, and a row
   longer than COITER_ROW_LANE_STEPS goes on in a loop. Out of line: a parallel loop calls
   it on chunks of rows, its serial copy on all rows, and one copy compiles */
#define COITER_ROW_LANE_STEPS 8
#define COITER_ROWS_TAIL(value_t, r, s0) \\
  for (int64_t q = (r); q < (s0); q++) {{ \\
    value_t t = 0; \\
    for (int64_t p = pos[q]; p < pos[q + 1]; p++) t += v[p] * c[k[p]]; \\
    y[q] = t; \\
  }}
/* every 512 rows from s (a page of double results), a fetch of each stream
   COITER_PAGES_AHEAD elements ahead: the row pointers and results past row r, the values and
   coordinates past its first position (below pos[e], the range's end). Hardware
   prefetchers stop at 4 KiB pages; so fetched, the next pages' walks and first lines are
   under way when the streams reach them. AMD Zen 4, 1 thread, ms without -> with, on data
   from memory (after a pass over 64 MiB): TTV fibers of gen-uniform3 1.07 -> 0.98, wn18rr
   0.288 -> 0.275; from L3: gen-uniform3 0.586 -> 0.533; smaller inputs (jf17k-3ary,
   wikipeople-4ary, collegemsg-day, SpMV on luxembourg_osm) within 3% either way. Every 256
   rows was slower on those (up to 13%) */
#define COITER_PAGES_AHEAD 2048
#define COITER_FETCH_PAGES(r) \\
  if ((((r) - s) & 511) == 0) {{ \\
    if ((r) + COITER_PAGES_AHEAD < e) {{ \\
      __builtin_prefetch(pos + (r) + COITER_PAGES_AHEAD); \\
      __builtin_prefetch(y + (r) + COITER_PAGES_AHEAD, 1); \\
    }} \\
    if (pos[r] + COITER_PAGES_AHEAD < pos[e]) {{ \\
      __builtin_prefetch(v + pos[r] + COITER_PAGES_AHEAD); \\
      __builtin_prefetch(k + pos[r] + COITER_PAGES_AHEAD); \\
    }} \\
  }}
#if defined(__AVX512F__) && defined(__AVX512VL__)
#include <immintrin.h>
/* the group's (at most 16) coordinates from k + b in registers, and those at offsets o */
#define COITER_WINDOW_I32 __m512i k0 = _mm512_maskz_loadu_epi32(in, k + b);
#define COITER_PICK_I32(o) _mm512_castsi512_si256(_mm512_permutexvar_epi32(_mm512_castsi256_si512(o), k0))
#define COITER_WIDE_I32(o) _mm512_cvtepi32_epi64(o)
#define COITER_WINDOW_I64 __m512i k0 = _mm512_maskz_loadu_epi64((__mmask8)in, k + b), \\
                                  k1 = _mm512_maskz_loadu_epi64((__mmask8)(in >> 8), k + b + 8);
#define COITER_PICK_I64(o) _mm512_permutex2var_epi64(k0, o, k1)
#define COITER_WIDE_I64(o) (o)
/* float lanes picked at 32-bit offsets */
#define COITER_PICKF_I32(w, o) _mm512_castps512_ps256(_mm512_permutexvar_ps(_mm512_castsi256_si512(o), w))
#define COITER_PICKF_I64(w, o) COITER_PICKF_I32(w, _mm512_cvtepi64_epi32(o))
#if COITER_FAST_GATHER
#define COITER_ROWS_DOT(suffix, index_t, vec_t, load, sub, add, set1, cmpgt, gather_k, gather_pd, \\
                        window, pick, wide) \\
static COITER_OUT_OF_LINE void coiter_rows_dot_##suffix(double* restrict y, const index_t* restrict pos, \\
                                                        const index_t* restrict k, const double* restrict v, \\
                                                        const double* restrict c, int64_t s, int64_t e) {{ \\
  int64_t r = s; \\
  for (; r + 8 <= e; r += 8) {{ \\
    COITER_FETCH_PAGES(r) \\
    vec_t lo = load((const void*)(pos + r)), n = sub(load((const void*)(pos + r + 1)), lo); \\
    vec_t j = set1(0); \\
    __m512d t = _mm512_setzero_pd(); \\
    __mmask8 m = cmpgt(n, j); \\
    int64_t b = pos[r], w = pos[r + 8] - b; \\
    if (w <= 16) {{ \\
      __mmask16 in = (__mmask16)((1u << w) - 1); \\
      __m512d v0 = _mm512_maskz_loadu_pd((__mmask8)in, v + b); \\
      __m512d v1 = _mm512_maskz_loadu_pd((__mmask8)(in >> 8), v + b + 8); \\
      window \\
      vec_t o = sub(lo, set1(b)); \\
      for (; m; j = add(j, set1(1)), m = cmpgt(n, j)) {{ \\
        vec_t q = add(o, j); \\
        __m512d x = gather_pd(_mm512_setzero_pd(), m, pick(q), c, 8); \\
        t = _mm512_mask_add_pd(t, m, t, _mm512_mul_pd(_mm512_permutex2var_pd(v0, wide(q), v1), x)); \\
      }} \\
      _mm512_storeu_pd(y + r, t); \\
      continue; \\
    }} \\
    for (int step = 0; m && step < COITER_ROW_LANE_STEPS; step++) {{ \\
      vec_t p = add(lo, j); \\
      __m512d x = gather_pd(_mm512_setzero_pd(), m, gather_k(set1(0), m, p, k, sizeof(index_t)), c, 8); \\
      t = _mm512_mask_add_pd(t, m, t, _mm512_mul_pd(gather_pd(_mm512_setzero_pd(), m, p, v, 8), x)); \\
      j = add(j, set1(1)); \\
      m = cmpgt(n, j); \\
    }} \\
    _mm512_storeu_pd(y + r, t); \\
    for (; m; m &= (__mmask8)(m - 1)) {{ \\
      int64_t q = r + __builtin_ctz(m); \\
      double u = y[q]; \\
      for (int64_t p = pos[q] + COITER_ROW_LANE_STEPS; p < pos[q + 1]; p++) u += v[p] * c[k[p]]; \\
      y[q] = u; \\
    }} \\
  }} \\
  COITER_ROWS_TAIL(double, r, e) \\
}}
COITER_ROWS_DOT(i32, int32_t, __m256i, _mm256_loadu_si256, _mm256_sub_epi32, _mm256_add_epi32,
                _mm256_set1_epi32, _mm256_cmpgt_epi32_mask, _mm256_mmask_i32gather_epi32,
                _mm512_mask_i32gather_pd, COITER_WINDOW_I32, COITER_PICK_I32, COITER_WIDE_I32)
COITER_ROWS_DOT(i64, int64_t, __m512i, _mm512_loadu_si512, _mm512_sub_epi64, _mm512_add_epi64,
                _mm512_set1_epi64, _mm512_cmpgt_epi64_mask, _mm512_mask_i64gather_epi64,
                _mm512_mask_i64gather_pd, COITER_WINDOW_I64, COITER_PICK_I64, COITER_WIDE_I64)
/* the same for float: the eight rows' lanes in a 256-bit register, their (at most 16)
   values in one 512-bit one */
#define COITER_ROWS_DOTF(suffix, index_t, vec_t, load, sub, add, set1, cmpgt, gather_k, gather_ps, \\
                         window, pick, pickf) \\
static COITER_OUT_OF_LINE void coiter_rows_dotf_##suffix(float* restrict y, const index_t* restrict pos, \\
                                                         const index_t* restrict k, const float* restrict v, \\
                                                         const float* restrict c, int64_t s, int64_t e) {{ \\
  int64_t r = s; \\
  for (; r + 8 <= e; r += 8) {{ \\
    COITER_FETCH_PAGES(r) \\
    vec_t lo = load((const void*)(pos + r)), n = sub(load((const void*)(pos + r + 1)), lo); \\
    vec_t j = set1(0); \\
    __m256 t = _mm256_setzero_ps(); \\
    __mmask8 m = cmpgt(n, j); \\
    int64_t b = pos[r], w = pos[r + 8] - b; \\
    if (w <= 16) {{ \\
      __mmask16 in = (__mmask16)((1u << w) - 1); \\
      __m512 v0 = _mm512_maskz_loadu_ps(in, v + b); \\
      window \\
      vec_t o = sub(lo, set1(b)); \\
      for (; m; j = add(j, set1(1)), m = cmpgt(n, j)) {{ \\
        vec_t q = add(o, j); \\
        __m256 x = gather_ps(_mm256_setzero_ps(), m, pick(q), c, 4); \\
        t = _mm256_mask_add_ps(t, m, t, _mm256_mul_ps(pickf(v0, q), x)); \\
      }} \\
      _mm256_storeu_ps(y + r, t); \\
      continue; \\
    }} \\
    for (int step = 0; m && step < COITER_ROW_LANE_STEPS; step++) {{ \\
      vec_t p = add(lo, j); \\
      __m256 x = gather_ps(_mm256_setzero_ps(), m, gather_k(set1(0), m, p, k, sizeof(index_t)), c, 4); \\
      t = _mm256_mask_add_ps(t, m, t, _mm256_mul_ps(gather_ps(_mm256_setzero_ps(), m, p, v, 4), x)); \\
      j = add(j, set1(1)); \\
      m = cmpgt(n, j); \\
    }} \\
    _mm256_storeu_ps(y + r, t); \\
    for (; m; m &= (__mmask8)(m - 1)) {{ \\
      int64_t q = r + __builtin_ctz(m); \\
      float u = y[q]; \\
      for (int64_t p = pos[q] + COITER_ROW_LANE_STEPS; p < pos[q + 1]; p++) u += v[p] * c[k[p]]; \\
      y[q] = u; \\
    }} \\
  }} \\
  COITER_ROWS_TAIL(float, r, e) \\
}}
COITER_ROWS_DOTF(i32, int32_t, __m256i, _mm256_loadu_si256, _mm256_sub_epi32, _mm256_add_epi32,
                 _mm256_set1_epi32, _mm256_cmpgt_epi32_mask, _mm256_mmask_i32gather_epi32,
                 _mm256_mmask_i32gather_ps, COITER_WINDOW_I32, COITER_PICK_I32, COITER_PICKF_I32)
COITER_ROWS_DOTF(i64, int64_t, __m512i, _mm512_loadu_si512, _mm512_sub_epi64, _mm512_add_epi64,
                 _mm512_set1_epi64, _mm512_cmpgt_epi64_mask, _mm512_mask_i64gather_epi64,
                 _mm512_mask_i64gather_ps, COITER_WINDOW_I64, COITER_PICK_I64, COITER_PICKF_I64)
#else
/* Where gathers are slow (AMD Zen), x is read by scalar loads instead: a group whose eight
   rows hold at most 32 positions has the products of its values and x at them computed
   once, then each step picks its lanes' products by a permute (from two registers
   of 8, or from four where the group holds more than 16); a group of more positions takes
   the row loop. The products and their order are the loop's. On AMD Zen 4 at 1 thread, ms,
   without -> with it: TTV on wn18rr 0.140 -> 0.085, gen-powerlaw3 0.837 -> 0.442, SpMV on
   luxembourg_osm 0.256 -> 0.162 (docs/performance.md, "Slow gathers, tiny runs") */
/* x at the group's position i, or at its first one past them (so every read is inside the
   run; the lane is never used). Straight from k: through a buffer stored from a masked
   vector load, the reads of x waited for the store to retire, and on data from memory
   (SpMV on luxembourg_osm after other work, 1 thread) the helper ran 1.35x the short-run
   helper's time */
#define COITER_XAT(i) c[k[b + ((i) < w ? (i) : 0)]]
#define COITER_X8_PD(h) _mm512_set_pd(COITER_XAT((h) + 7), COITER_XAT((h) + 6), COITER_XAT((h) + 5), \\
                                      COITER_XAT((h) + 4), COITER_XAT((h) + 3), COITER_XAT((h) + 2), \\
                                      COITER_XAT((h) + 1), COITER_XAT(h))
#define COITER_X8_PS(h) _mm256_set_ps(COITER_XAT((h) + 7), COITER_XAT((h) + 6), COITER_XAT((h) + 5), \\
                                      COITER_XAT((h) + 4), COITER_XAT((h) + 3), COITER_XAT((h) + 2), \\
                                      COITER_XAT((h) + 1), COITER_XAT(h))
/* the products of the group's positions h..h+7 (zero values past them) */
#define COITER_PRODUCTS8(h) _mm512_mul_pd(_mm512_maskz_loadu_pd((__mmask8)(in >> (h)), v + b + (h)), COITER_X8_PD(h))
/* the opening of a group of eight rows from r: b and w, its first position and how many it
   holds (an empty group, or one of more than `most`, takes the row loop), in, a bit per
   position, and per row (lane) lo, its first position, n, its length, o, its offset in the
   group, and j, the step; then fetches of the row pointers COITER_GROUP_AHEAD rows ahead and
   of the values and coordinates COITER_GROUP_AHEAD positions past the group's first (within
   the range: below row e and position pos[e]). Hardware prefetchers alone left the helper
   waiting for memory: AMD Zen 4, 1 thread, ms without -> with, on data from memory (after a
   pass over 64 MiB): TTV fibers of gen-uniform3 1.00 -> 0.79, wn18rr 0.290 -> 0.270,
   jf17k-3ary 0.123 -> 0.112; from L3: gen-uniform3 0.58 -> 0.54, SpMV on luxembourg_osm
   within 3%. Fetching the results as well, or in every other group, was no faster */
#define COITER_GROUP_AHEAD 128
#define COITER_GROUP_HEAD(value_t, most, vec_t, load, sub, set1) \\
    int64_t b = pos[r], w = pos[r + 8] - b; \\
    if (w == 0 || w > (most)) {{ \\
      COITER_ROWS_TAIL(value_t, r, r + 8) \\
      continue; \\
    }} \\
    vec_t lo = load((const void*)(pos + r)), n = sub(load((const void*)(pos + r + 1)), lo); \\
    uint32_t in = (uint32_t)((1ull << w) - 1); \\
    vec_t o = sub(lo, set1(b)), j = set1(0); \\
    if (r + COITER_GROUP_AHEAD < e) __builtin_prefetch(pos + r + COITER_GROUP_AHEAD); \\
    if (b + COITER_GROUP_AHEAD < pos[e]) {{ \\
      __builtin_prefetch(v + b + COITER_GROUP_AHEAD); \\
      __builtin_prefetch(k + b + COITER_GROUP_AHEAD); \\
    }}
#define COITER_ROWS_DOT(suffix, index_t, vec_t, load, sub, add, set1, cmpgt, wide) \\
static COITER_OUT_OF_LINE void coiter_rows_dot_##suffix(double* restrict y, const index_t* restrict pos, \\
                                                        const index_t* restrict k, const double* restrict v, \\
                                                        const double* restrict c, int64_t s, int64_t e) {{ \\
  int64_t r = s; \\
  for (; r + 8 <= e; r += 8) {{ \\
    COITER_FETCH_PAGES(r) \\
    COITER_GROUP_HEAD(double, 32, vec_t, load, sub, set1) \\
    __m512d p0 = COITER_PRODUCTS8(0), p1 = w > 8 ? COITER_PRODUCTS8(8) : p0; \\
    __m512d t = _mm512_setzero_pd(); \\
    if (w <= 16) {{ \\
      for (__mmask8 m = cmpgt(n, j); m; j = add(j, set1(1)), m = cmpgt(n, j)) \\
        t = _mm512_mask_add_pd(t, m, t, _mm512_permutex2var_pd(p0, wide(add(o, j)), p1)); \\
    }} else {{ \\
      __m512d p2 = COITER_PRODUCTS8(16), p3 = w > 24 ? COITER_PRODUCTS8(24) : p2; \\
      for (__mmask8 m = cmpgt(n, j); m; j = add(j, set1(1)), m = cmpgt(n, j)) {{ \\
        vec_t q = add(o, j); \\
        /* offsets 16 to 31 pick from p2 and p3 (the permutes read the low four bits) */ \\
        __m512d low = _mm512_permutex2var_pd(p0, wide(q), p1), high = _mm512_permutex2var_pd(p2, wide(q), p3); \\
        t = _mm512_mask_add_pd(t, m, t, _mm512_mask_blend_pd(cmpgt(q, set1(15)), low, high)); \\
      }} \\
    }} \\
    _mm512_storeu_pd(y + r, t); \\
  }} \\
  COITER_ROWS_TAIL(double, r, e) \\
}}
COITER_ROWS_DOT(i32, int32_t, __m256i, _mm256_loadu_si256, _mm256_sub_epi32, _mm256_add_epi32,
                _mm256_set1_epi32, _mm256_cmpgt_epi32_mask, COITER_WIDE_I32)
COITER_ROWS_DOT(i64, int64_t, __m512i, _mm512_loadu_si512, _mm512_sub_epi64, _mm512_add_epi64,
                _mm512_set1_epi64, _mm512_cmpgt_epi64_mask, COITER_WIDE_I64)
/* the same for float: groups of at most 16 positions, their products in one register */
#define COITER_ROWS_DOTF(suffix, index_t, vec_t, load, sub, add, set1, cmpgt, pickf) \\
static COITER_OUT_OF_LINE void coiter_rows_dotf_##suffix(float* restrict y, const index_t* restrict pos, \\
                                                         const index_t* restrict k, const float* restrict v, \\
                                                         const float* restrict c, int64_t s, int64_t e) {{ \\
  int64_t r = s; \\
  for (; r + 8 <= e; r += 8) {{ \\
    COITER_FETCH_PAGES(r) \\
    COITER_GROUP_HEAD(float, 16, vec_t, load, sub, set1) \\
    __m256 x0 = COITER_X8_PS(0), x1 = x0; \\
    if (w > 8) x1 = COITER_X8_PS(8); \\
    __m512 x = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(x0)), \\
                                                   _mm256_castps_pd(x1), 1)); \\
    __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps((__mmask16)in, v + b), x); \\
    __m256 t = _mm256_setzero_ps(); \\
    for (__mmask8 m = cmpgt(n, j); m; j = add(j, set1(1)), m = cmpgt(n, j)) \\
      t = _mm256_mask_add_ps(t, m, t, pickf(p, add(o, j))); \\
    _mm256_storeu_ps(y + r, t); \\
  }} \\
  COITER_ROWS_TAIL(float, r, e) \\
}}
COITER_ROWS_DOTF(i32, int32_t, __m256i, _mm256_loadu_si256, _mm256_sub_epi32, _mm256_add_epi32,
                 _mm256_set1_epi32, _mm256_cmpgt_epi32_mask, COITER_PICKF_I32)
COITER_ROWS_DOTF(i64, int64_t, __m512i, _mm512_loadu_si512, _mm512_sub_epi64, _mm512_add_epi64,
                 _mm512_set1_epi64, _mm512_cmpgt_epi64_mask, COITER_PICKF_I64)
#endif
#else
#define COITER_ROWS_DOT(name, value_t, index_t) \\
static COITER_OUT_OF_LINE void name(value_t* restrict y, const index_t* restrict pos, \\
                                    const index_t* restrict k, const value_t* restrict v, \\
                                    const value_t* restrict c, int64_t s, int64_t e) {{ \\
  COITER_ROWS_TAIL(value_t, s, e) \\
}}
COITER_ROWS_DOT(coiter_rows_dot_i32, double, int32_t)
COITER_ROWS_DOT(coiter_rows_dot_i64, double, int64_t)
COITER_ROWS_DOT(coiter_rows_dotf_i32, float, int32_t)
COITER_ROWS_DOT(coiter_rows_dotf_i64, float, int64_t)
#endif
"""),
    (('coiter_insertion_sort', 'coiter_qsort_index'), """\
/* sort a few coordinates ascending, one insertion each */
static inline void coiter_insertion_sort(int64_t* a, int64_t n) {{
  for (int64_t i = 1; i < n; i++) {{
    int64_t v = a[i], j = i - 1;
    while (j >= 0 && a[j] > v) {{ a[j + 1] = a[j]; j--; }}
    a[j + 1] = v;
  }}
}}
/* sort coordinates ascending: quicksort (median of three, no comparison callback, the
   smaller side recursed) finishing short ranges by insertion sort */
static void coiter_qsort_index(int64_t* a, int64_t n) {{
  while (n > 16) {{
    int64_t x = a[0], y = a[n / 2], z = a[n - 1];
    int64_t p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
    int64_t i = 0, j = n - 1;
    for (;;) {{
      while (a[i] < p) i++;
      while (a[j] > p) j--;
      if (i >= j) break;
      int64_t t = a[i]; a[i] = a[j]; a[j] = t;
      i++; j--;
    }}
    if (j + 1 < n - j - 1) {{ coiter_qsort_index(a, j + 1); a += j + 1; n -= j + 1; }}
    else {{ coiter_qsort_index(a + j + 1, n - j - 1); n = j + 1; }}
  }}
  coiter_insertion_sort(a, n);
}}
"""),
    (('coiter_row_flag_bytes', 'coiter_row_set_bytes'), """\
/* a row workspace's flags: one byte per coordinate (dim + 1 of them), marked without a
   branch as coordinates arrive, then a zeroed two-level bitmap that sorting borrows: one bit
   per coordinate, one summary bit per 64-bit word */
static inline int64_t coiter_row_flag_bytes(int64_t dim) {{ return (dim + 8) & ~(int64_t)7; }}
static inline int64_t coiter_row_set_bytes(int64_t dim) {{
  int64_t words = (dim >> 6) + 1;
  return coiter_row_flag_bytes(dim) + 8 * (words + (words >> 6) + 1);
}}
"""),
    (('coiter_scatter_add_i32', 'coiter_scatter_add_i64'), """\
/* w[k[p]] += a * v[p] for p in s..e into a row workspace (lower/scatter_adds.py): each
   coordinate whose flag byte in set is clear is appended to list at count and flagged; returns
   the new count. The run's coordinates are distinct (a unique level's). Runs of
   COITER_SCATTER_MIN or more, where gathers are fast, go eight lanes a step: w gathered, the
   products added, w scattered back (distinct lanes, so no lane overwrites another), the
   lanes whose flag was clear listed in order. A flag is read as the low byte of a 4-byte
   gather at set + j: coiter_row_set_bytes allocates more than 3 bytes past the last flag.
   Each w[j] gets the loop's one addition, a * v[p] rounded and then added, so the result is
   the loop's bit for bit. Shorter runs take the loop (from 16, add32's A*A, of a few long rows
   among short ones, was 15% slower than with the loop; the road networks', about three a
   run, a third slower with the lanes on every run), and so do workspaces wider than
   COITER_SCATTER_MAX_DIM: on cit-HepPh's, cit-HepTh's and ca-CondMat's products (21,000 to
   35,000 columns, rows of a few dozen entries spread over them) the lanes were 25-40% slower
   than the loop, on those of up to 5,500 columns 1.2 to 1.7 times faster */
#ifndef COITER_SCATTER_MIN
#define COITER_SCATTER_MIN 32
#endif
#ifndef COITER_SCATTER_MAX_DIM
#define COITER_SCATTER_MAX_DIM 16384
#endif
#define COITER_SCATTER_LOOP() \\
  for (int64_t p = s; p < e; p++) {{ \\
    int64_t j = k[p]; \\
    list[count] = j; \\
    count += !set[j]; \\
    set[j] = 1; \\
    w[j] += a * v[p]; \\
  }}
#if defined(__AVX512F__) && defined(__AVX512VL__) && COITER_FAST_GATHER
#include <immintrin.h>
#define COITER_SCATTER_ADD(suffix, index_t, lanes_t, load, store, gather, scatter, gather_flags, listed) \\
static inline int64_t coiter_scatter_add_##suffix( \\
    double* restrict w, uint8_t* restrict set, int64_t* restrict list, int64_t count, int64_t dim, \\
    const index_t* restrict k, const double* restrict v, double a, int64_t s, int64_t e) {{ \\
  if (e - s < COITER_SCATTER_MIN || dim > COITER_SCATTER_MAX_DIM) {{ \\
    COITER_SCATTER_LOOP() \\
    return count; \\
  }} \\
  const __m512d av = _mm512_set1_pd(a); \\
  const __m256i low = _mm256_set1_epi32(0xff); \\
  for (int64_t p = s; p < e; p += 8) {{ \\
    __mmask8 m = (__mmask8)((1u << (e - p < 8 ? e - p : 8)) - 1); \\
    lanes_t j = load(m, k + p); \\
    __m512d x = gather(_mm512_setzero_pd(), m, j, w, 8); \\
    scatter(w, m, j, _mm512_add_pd(x, _mm512_mul_pd(av, _mm512_maskz_loadu_pd(m, v + p))), 8); \\
    __mmask8 fresh = _mm256_mask_testn_epi32_mask(m, gather_flags(low, m, j, set, 1), low); \\
    if (fresh) {{ \\
      /* a compress into a register and a masked store (a compress straight to memory is \\
         microcoded on AMD Zen 4); the flags from a whole store of the lanes, which later \\
         loads take straight from the store (from a masked store they wait for it) */ \\
      _mm512_mask_storeu_epi64(list + count, (__mmask8)((1u << __builtin_popcount(fresh)) - 1), \\
                               listed(fresh, j)); \\
      index_t at[8]; \\
      store(at, j); \\
      for (unsigned f = fresh; f; f &= f - 1) set[at[__builtin_ctz(f)]] = 1; \\
      count += __builtin_popcount(fresh); \\
    }} \\
  }} \\
  return count; \\
}}
static inline __m512i coiter_listed_i32(__mmask8 m, __m256i j) {{
  return _mm512_cvtepi32_epi64(_mm256_maskz_compress_epi32(m, j));
}}
static inline void coiter_store_i32(int32_t* a, __m256i j) {{ _mm256_storeu_si256((__m256i*)a, j); }}
static inline void coiter_store_i64(int64_t* a, __m512i j) {{ _mm512_storeu_si512(a, j); }}
COITER_SCATTER_ADD(i32, int32_t, __m256i, _mm256_maskz_loadu_epi32, coiter_store_i32, _mm512_mask_i32gather_pd,
                   _mm512_mask_i32scatter_pd, _mm256_mmask_i32gather_epi32, coiter_listed_i32)
COITER_SCATTER_ADD(i64, int64_t, __m512i, _mm512_maskz_loadu_epi64, coiter_store_i64, _mm512_mask_i64gather_pd,
                   _mm512_mask_i64scatter_pd, _mm512_mask_i64gather_epi32, _mm512_maskz_compress_epi64)
#else
#define COITER_SCATTER_ADD(suffix, index_t) \\
static inline int64_t coiter_scatter_add_##suffix( \\
    double* restrict w, uint8_t* restrict set, int64_t* restrict list, int64_t count, int64_t dim, \\
    const index_t* restrict k, const double* restrict v, double a, int64_t s, int64_t e) {{ \\
  (void)dim; \\
  COITER_SCATTER_LOOP() \\
  return count; \\
}}
COITER_SCATTER_ADD(i32, int32_t)
COITER_SCATTER_ADD(i64, int64_t)
#endif
"""),
    (('coiter_sort16', 'coiter_sort_network'), """\
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VBMI2__)
#define COITER_SORT_AVX512 1
#include <immintrin.h>
/* Sorting networks on 16 int32 lanes of a register, for coordinate lists of 17 to 128
   entries (distinct, below INT32_MAX, which pads): a bitonic network has no branch to
   mispredict, where insertion sort mispredicts about once an entry */
static inline __m512i coiter_exchange16(__m512i v, int dist, __mmask16 upper) {{
  __m512i p = dist == 1 ? _mm512_shuffle_epi32(v, _MM_PERM_CDAB)
            : dist == 2 ? _mm512_shuffle_epi32(v, _MM_PERM_BADC)
            : dist == 4 ? _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1))
            : _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2));
  return _mm512_mask_blend_epi32(upper, _mm512_min_epi32(v, p), _mm512_max_epi32(v, p));
}}
/* each step compares lanes dist apart; the lanes in upper keep the larger value */
static inline __m512i coiter_sort16(__m512i v) {{
  static const int dist[10] = {{1, 2, 1, 4, 2, 1, 8, 4, 2, 1}};
  static const __mmask16 upper[10] = {{0x6666, 0x3c3c, 0x5a5a, 0x0ff0, 0x33cc, 0x55aa,
                                       0xff00, 0xf0f0, 0xcccc, 0xaaaa}};
  for (int s = 0; s < 10; s++) v = coiter_exchange16(v, dist[s], upper[s]);
  return v;
}}
/* a bitonic sequence of 16 lanes, sorted */
static inline __m512i coiter_clean16(__m512i v) {{
  v = coiter_exchange16(v, 8, 0xff00);
  v = coiter_exchange16(v, 4, 0xf0f0);
  v = coiter_exchange16(v, 2, 0xcccc);
  return coiter_exchange16(v, 1, 0xaaaa);
}}
/* v[0..h) and v[h..2h) sorted (16 lanes each register) -> v[0..2h) sorted */
static inline void coiter_merge16(__m512i* v, int h) {{
  const __m512i rev = _mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i b[4];
  for (int i = 0; i < h; i++) b[i] = _mm512_permutexvar_epi32(rev, v[2 * h - 1 - i]);
  for (int i = 0; i < h; i++) {{
    __m512i lo = _mm512_min_epi32(v[i], b[i]), hi = _mm512_max_epi32(v[i], b[i]);
    v[i] = lo;
    v[h + i] = hi;
  }}
  for (__m512i* w = v; w < v + 2 * h; w += h) {{
    for (int d = h / 2; d >= 1; d /= 2)
      for (int i = 0; i < h; i++)
        if (!(i & d)) {{
          __m512i lo = _mm512_min_epi32(w[i], w[i + d]), hi = _mm512_max_epi32(w[i], w[i + d]);
          w[i] = lo;
          w[i + d] = hi;
        }}
    for (int i = 0; i < h; i++) w[i] = coiter_clean16(w[i]);
  }}
}}
/* a[0..n), n <= 128, sorted: 16 entries a register (INT32_MAX past n), registers sorted
   alone, then merged pairwise */
static void coiter_sort_network(int64_t* restrict a, int64_t n) {{
  const __m512i pad = _mm512_set1_epi64(INT32_MAX);
  int r = n <= 32 ? 2 : n <= 64 ? 4 : 8;
  __m512i v[8];
  __mmask8 lo[8], hi[8];
  for (int i = 0; i < r; i++) {{
    int64_t left = n - 16 * i;  /* entries of register i: left of a[16i..16i+8), then of the next 8 */
    lo[i] = (__mmask8)((1u << (left < 0 ? 0 : (left > 8 ? 8 : left))) - 1);
    hi[i] = (__mmask8)((1u << (left < 8 ? 0 : (left > 16 ? 8 : left - 8))) - 1);
    __m256i x = _mm512_cvtepi64_epi32(_mm512_mask_loadu_epi64(pad, lo[i], a + 16 * i));
    __m256i y = _mm512_cvtepi64_epi32(_mm512_mask_loadu_epi64(pad, hi[i], a + 16 * i + 8));
    v[i] = coiter_sort16(_mm512_inserti64x4(_mm512_castsi256_si512(x), y, 1));
  }}
  for (int h = 1; h < r; h *= 2)
    for (int s = 0; s < r; s += 2 * h) coiter_merge16(v + s, h);
  for (int i = 0; i < r; i++) {{
    _mm512_mask_storeu_epi64(a + 16 * i, lo[i], _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v[i])));
    _mm512_mask_storeu_epi64(a + 16 * i + 8, hi[i], _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v[i], 1)));
  }}
}}
#endif
"""),
    (('coiter_union_sum3', 'coiter_union_takes'), """\
/* A row of a sum of sparse vectors, A(j) + B(j) + C(j), from up to three sorted runs of
   coordinates (int32, or int64 narrowed: coiter_union_sum3) and double values
   (lower/unions.py). Rows of at most 64 entries in all: each entry's key is its coordinate
   shifted left past its lane in the runs laid end to end, so that a sorting network orders the keys by coordinate and equal
   coordinates by run; lanes that repeat the previous lane's coordinate are dropped, and the
   others add the next one or two lanes' values where those hold the same coordinate, -0.0
   where not (x + -0.0 is x for every x), which are the merge's additions in the merge's
   order. A merge of rows of a few entries mispredicts about once an entry; this takes a
   fixed count of instructions per 16 lanes. Returns the entries written to oc and ov */
#ifdef COITER_SORT_AVX512
/* lanes [lo, hi) of the w (16 or 8) starting at base */
static inline uint32_t coiter_lanes(int64_t lo, int64_t hi, int64_t base, int64_t w) {{
  int64_t a = lo - base, b = hi - base;
  a = a < 0 ? 0 : a;
  b = b > w ? w : b;
  return b > a ? ((1u << b) - 1) & ~((1u << a) - 1) : 0;
}}
/* cur's lanes plus, where e1 / e2 is set, the values one / two lanes on (next continues
   cur); -0.0 where not, which changes no sum */
static inline __m512d coiter_union_add_next(__m512d cur, __m512d next, __mmask8 e1, __mmask8 e2) {{
  const __m512d nz = _mm512_set1_pd(-0.0);
  const __m512i c = _mm512_castpd_si512(cur), n = _mm512_castpd_si512(next);
  const __m512d one = _mm512_castsi512_pd(_mm512_alignr_epi64(n, c, 1));
  const __m512d two = _mm512_castsi512_pd(_mm512_alignr_epi64(n, c, 2));
  return _mm512_add_pd(_mm512_add_pd(cur, _mm512_mask_blend_pd(e1, nz, one)),
                       _mm512_mask_blend_pd(e2, nz, two));
}}
/* R registers of 16 keys (R = 1, 2, 4): coordinates below 2^(31 - 4 - log2 R) */
static inline __attribute__((always_inline)) int64_t coiter_union_lanes(
    const int R, const int32_t* const* c, const double* const* v, const int64_t* len,
    int32_t* restrict oc, double* restrict ov) {{
  const int shift = R == 1 ? 4 : R == 2 ? 5 : 6;
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const int64_t off[3] = {{0, len[0], len[0] + len[1]}}, total = len[0] + len[1] + len[2];
  __m512i key[4], crd[4];
  __m512d val[8], sorted[8];
  /* run s fills lanes off[s] .. off[s] + len[s] of the runs laid end to end: a masked load
     from c[s] + (lane base - off[s]) reads only those lanes' entries (an expand load, which
     needs no offset, is microcoded on AMD Zen 4) */
  for (int r = 0; r < R; r++) {{
    __m512i x = _mm512_set1_epi32(INT32_MAX);  /* pads sort last */
    for (int s = 0; s < 3; s++) {{
      int64_t from = 16 * r - off[s];
      x = _mm512_mask_loadu_epi32(x, (__mmask16)coiter_lanes(off[s], off[s] + len[s], 16 * r, 16),
                                  c[s] + from);
    }}
    key[r] = coiter_sort16(_mm512_mask_or_epi32(x, (__mmask16)coiter_lanes(0, total, 16 * r, 16),
                                                _mm512_slli_epi32(x, shift),
                                                _mm512_add_epi32(iota, _mm512_set1_epi32(16 * r))));
  }}
  for (int g = 0; g < 2 * R; g++) {{
    __m512d x = _mm512_setzero_pd();
    for (int s = 0; s < 3; s++) {{
      int64_t from = 8 * g - off[s];
      x = _mm512_mask_loadu_pd(x, (__mmask8)coiter_lanes(off[s], off[s] + len[s], 8 * g, 8),
                               v[s] + from);
    }}
    val[g] = x;
  }}
  if (R >= 2) coiter_merge16(key, 1);
  if (R == 4) {{
    coiter_merge16(key + 2, 1);
    coiter_merge16(key, 2);
  }}
  double spill[64];  /* four registers' values are gathered from memory */
  if (R == 4)
    for (int g = 0; g < 8; g++) _mm512_storeu_pd(spill + 8 * g, val[g]);
  const __m512i low = _mm512_set1_epi32((1 << shift) - 1);
  for (int r = 0; r < R; r++) {{
    crd[r] = _mm512_srai_epi32(key[r], shift);
    __m512i lane = _mm512_and_si512(key[r], low);
    for (int h = 0; h < 2; h++) {{
      __m256i l = h ? _mm512_extracti64x4_epi64(lane, 1) : _mm512_castsi512_si256(lane);
      __m512i l64 = _mm512_cvtepi32_epi64(l);
      if (R == 1) {{
        sorted[2 * r + h] = _mm512_permutex2var_pd(val[0], l64, val[1]);
      }} else if (R == 2) {{
        __mmask8 high = _mm512_test_epi64_mask(l64, _mm512_set1_epi64(16));
        sorted[2 * r + h] = _mm512_mask_blend_pd(high, _mm512_permutex2var_pd(val[0], l64, val[1]),
                                                 _mm512_permutex2var_pd(val[2], l64, val[3]));
      }} else {{
        sorted[2 * r + h] = _mm512_i32gather_pd(l, spill, 8);
      }}
    }}
  }}
  const __m512i none = _mm512_set1_epi32(-1);
  const __m512d nz = _mm512_set1_pd(-0.0);
  int64_t written = 0;
  for (int r = 0; r < R; r++) {{
    __m512i before = _mm512_alignr_epi32(crd[r], r ? crd[r - 1] : none, 15);
    __m512i after = r + 1 < R ? crd[r + 1] : none;
    __mmask16 start = _mm512_mask_cmpneq_epi32_mask((__mmask16)coiter_lanes(0, total, 16 * r, 16), crd[r], before);
    __mmask16 e1 = _mm512_cmpeq_epi32_mask(crd[r], _mm512_alignr_epi32(after, crd[r], 1));
    __mmask16 e2 = _mm512_cmpeq_epi32_mask(crd[r], _mm512_alignr_epi32(after, crd[r], 2));
    /* compresses into registers and masked stores of their first lanes: a compress
       straight to memory is microcoded on AMD Zen 4 (SpAdd3 on USA-road-NE took 2.3x as long) */
    _mm512_mask_storeu_epi32(oc + written, (__mmask16)((1u << __builtin_popcount(start)) - 1),
                             _mm512_maskz_compress_epi32(start, crd[r]));
    for (int h = 0; h < 2; h++) {{
      int g = 2 * r + h;
      __m512d t = coiter_union_add_next(sorted[g], g + 1 < 2 * R ? sorted[g + 1] : nz,
                                        (__mmask8)(e1 >> (8 * h)), (__mmask8)(e2 >> (8 * h)));
      __mmask8 keep = (__mmask8)(start >> (8 * h));
      _mm512_mask_storeu_pd(ov + written, (__mmask8)((1u << __builtin_popcount(keep)) - 1),
                            _mm512_maskz_compress_pd(keep, t));
      written += __builtin_popcount(keep);
    }}
  }}
  return written;
}}
/* the least and greatest coordinates of runs c[s][0..len[s]), s < 3 (lo > hi where all
   are empty) */
static inline void coiter_union_bounds(const int32_t* const* c, const int64_t* len,
                                       int64_t* lo, int64_t* hi) {{
  *lo = INT32_MAX;
  *hi = -1;
  for (int s = 0; s < 3; s++)
    if (len[s]) {{
      *lo = c[s][0] < *lo ? c[s][0] : *lo;
      *hi = c[s][len[s] - 1] > *hi ? c[s][len[s] - 1] : *hi;
    }}
}}
/* Longer rows whose coordinates lie close together: the runs' entries are added into a
   window of COITER_SPAN_WINDOW columns at a time (values from -0.0, run after run, so each
   coordinate's values add in the merge's order) with a byte per column marking the columns
   written; a scan then compresses each 16 columns' marked values and coordinates into the
   row and clears them. Its cost is fixed per entry and per column spanned, where a merge of
   independent patterns mispredicts about once an entry: on the benchmark's SpAdd3 operands
   mbeacxc's rows (about 300 entries in 490 columns) take 0.29 instead of 0.73 ms, and rows
   spanning more than COITER_SPAN_RATIO columns an entry are no faster than the merge */
#define COITER_SPAN_WINDOW 512
#define COITER_SPAN_RATIO 8
static int64_t coiter_union_span(const int32_t* const* c, const double* const* v,
                                 const int64_t* len, int32_t* restrict oc, double* restrict ov) {{
  double acc[COITER_SPAN_WINDOW];
  uint8_t seen[COITER_SPAN_WINDOW];
  int64_t lo, hi;
  coiter_union_bounds(c, len, &lo, &hi);
  /* the scan clears what it reads, so only the first window's columns need setting */
  const int64_t first = hi - lo < COITER_SPAN_WINDOW ? (hi - lo + 16) & ~(int64_t)15 : COITER_SPAN_WINDOW;
  const __m512d nz = _mm512_set1_pd(-0.0);
  for (int64_t k = 0; k < first; k += 8) _mm512_storeu_pd(acc + k, nz);
  memset(seen, 0, first);
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  int64_t at[3] = {{0, 0, 0}}, written = 0;
  for (int64_t base = lo; base <= hi; base += COITER_SPAN_WINDOW) {{
    const int64_t limit = base + COITER_SPAN_WINDOW;
    for (int s = 0; s < 3; s++) {{
      const int32_t* cs = c[s];
      const double* vs = v[s];
      int64_t q = at[s];
      for (; q < len[s] && cs[q] < limit; q++) {{
        acc[cs[q] - base] += vs[q];
        seen[cs[q] - base] = 1;
      }}
      at[s] = q;
    }}
    const int64_t width = hi + 1 - base < COITER_SPAN_WINDOW ? hi + 1 - base : COITER_SPAN_WINDOW;
    for (int64_t k = 0; k < width; k += 16) {{
      __m128i marks = _mm_loadu_si128((const __m128i*)(seen + k));
      __mmask16 m = _mm_test_epi8_mask(marks, marks);
      int n = __builtin_popcount(m), n0 = __builtin_popcount(m & 0xff);
      /* compresses into registers, then masked stores (see coiter_union_lanes); lanes past
         INT32_MAX wrap but are never marked */
      _mm512_mask_storeu_epi32(oc + written, (__mmask16)((1u << n) - 1),
          _mm512_maskz_compress_epi32(m, _mm512_add_epi32(iota, _mm512_set1_epi32((int32_t)(base + k)))));
      _mm512_mask_storeu_pd(ov + written, (__mmask8)((1u << n0) - 1),
                            _mm512_maskz_compress_pd((__mmask8)m, _mm512_loadu_pd(acc + k)));
      _mm512_mask_storeu_pd(ov + written + n0, (__mmask8)((1u << (n - n0)) - 1),
                            _mm512_maskz_compress_pd((__mmask8)(m >> 8), _mm512_loadu_pd(acc + k + 8)));
      _mm512_storeu_pd(acc + k, nz);
      _mm512_storeu_pd(acc + k + 8, nz);
      _mm_storeu_si128((__m128i*)(seen + k), _mm_setzero_si128());
      written += n;
    }}
  }}
  return written;
}}
/* whether a row of runs c0[0..n0), c1[0..n1), c2[0..n2), coordinates below dim, takes
   coiter_union_sum3: 1 to 64 entries in all, or more spanning few columns an entry */
static inline int coiter_union_takes32(const int32_t* c0, int64_t n0, const int32_t* c1, int64_t n1,
                                       const int32_t* c2, int64_t n2, int64_t dim) {{
  const int64_t total = n0 + n1 + n2;
  if (total <= 64) return total > 0 && dim < ((int64_t)1 << 25);
  const int32_t* c[3] = {{c0, c1, c2}};
  const int64_t len[3] = {{n0, n1, n2}};
  int64_t lo, hi;
  coiter_union_bounds(c, len, &lo, &hi);
  return hi - lo < COITER_SPAN_RATIO * total;
}}
/* Rows of 1 to 8 entries in all (most rows of road networks): as coiter_union_lanes with 8
   lanes of keys, each a coordinate (below 2^25) shifted left by 3 past its lane, sorted by
   the first six steps of coiter_sort16's network (a bitonic sort of 8 lanes), and the values
   in one register: 6 network steps instead of 10 and one permute of values instead of two.
   Inlined in the kernel's loop with the 16-lane case: a call per row cost 8% on USA-road-NY */
static inline __m256i coiter_exchange8(__m256i v, int dist, __mmask8 upper) {{
  __m256i p = dist == 1 ? _mm256_shuffle_epi32(v, _MM_PERM_CDAB)
            : dist == 2 ? _mm256_shuffle_epi32(v, _MM_PERM_BADC)
            : _mm256_shuffle_i32x4(v, v, 1);
  return _mm256_mask_blend_epi32(upper, _mm256_min_epi32(v, p), _mm256_max_epi32(v, p));
}}
static inline __attribute__((always_inline)) int64_t coiter_union_lanes8(
    const int32_t* const* c, const double* const* v, const int64_t* len,
    int32_t* restrict oc, double* restrict ov) {{
  const int64_t off[3] = {{0, len[0], len[0] + len[1]}}, total = len[0] + len[1] + len[2];
  __m256i x = _mm256_set1_epi32(INT32_MAX);
  __m512d val = _mm512_setzero_pd();
  for (int s = 0; s < 3; s++) {{
    __mmask8 m = (__mmask8)coiter_lanes(off[s], off[s] + len[s], 0, 8);
    x = _mm256_mask_loadu_epi32(x, m, c[s] - off[s]);
    val = _mm512_mask_loadu_pd(val, m, v[s] - off[s]);
  }}
  const __mmask8 real = (__mmask8)coiter_lanes(0, total, 0, 8);
  __m256i key = _mm256_mask_or_epi32(x, real, _mm256_slli_epi32(x, 3),
                                     _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
  key = coiter_exchange8(key, 1, 0x66);
  key = coiter_exchange8(key, 2, 0x3c);
  key = coiter_exchange8(key, 1, 0x5a);
  key = coiter_exchange8(key, 4, 0xf0);
  key = coiter_exchange8(key, 2, 0xcc);
  key = coiter_exchange8(key, 1, 0xaa);
  const __m256i crd = _mm256_srai_epi32(key, 3), none = _mm256_set1_epi32(-1);
  const __m512d sorted = _mm512_permutexvar_pd(
      _mm512_cvtepi32_epi64(_mm256_and_si256(key, _mm256_set1_epi32(7))), val);
  const __mmask8 start = _mm256_mask_cmpneq_epi32_mask(real, crd, _mm256_alignr_epi32(crd, none, 7));
  const __mmask8 e1 = _mm256_cmpeq_epi32_mask(crd, _mm256_alignr_epi32(none, crd, 1));
  const __mmask8 e2 = _mm256_cmpeq_epi32_mask(crd, _mm256_alignr_epi32(none, crd, 2));
  const __m512d t = coiter_union_add_next(sorted, _mm512_set1_pd(-0.0), e1, e2);
  const int n = __builtin_popcount(start);
  _mm256_mask_storeu_epi32(oc, (__mmask8)((1u << n) - 1), _mm256_maskz_compress_epi32(start, crd));
  _mm512_mask_storeu_pd(ov, (__mmask8)((1u << n) - 1), _mm512_maskz_compress_pd(start, t));
  return n;
}}
/* rows of more than 16 entries: a call */
static __attribute__((noinline)) int64_t coiter_union_long3(
    const int32_t* const* c, const double* const* v, const int64_t* len,
    int32_t* restrict oc, double* restrict ov) {{
  const int64_t total = len[0] + len[1] + len[2];
  if (total <= 32) return coiter_union_lanes(2, c, v, len, oc, ov);
  if (total <= 64) return coiter_union_lanes(4, c, v, len, oc, ov);
  return coiter_union_span(c, v, len, oc, ov);
}}
static inline __attribute__((always_inline)) int64_t coiter_union_sum32(
    const int32_t* const* c, const double* const* v, const int64_t* len,
    int32_t* restrict oc, double* restrict ov) {{
  const int64_t total = len[0] + len[1] + len[2];
  if (total <= 8) return coiter_union_lanes8(c, v, len, oc, ov);
  if (total <= 16) return coiter_union_lanes(1, c, v, len, oc, ov);
  return coiter_union_long3(c, v, len, oc, ov);
}}
/* coordinate k of run c, int64 where wide */
static inline int64_t coiter_union_crd(const void* c, int wide, int64_t k) {{
  return wide ? ((const int64_t*)c)[k] : ((const int32_t*)c)[k];
}}
/* whether runs of more than 16 entries in all look alike: as many entries each (or none in
   run 2) and the same first and last coordinates. Rows of one pattern (a sum of matrices
   that share their sparsity, A + 2A) merge without a misprediction, 2x as fast as the
   helpers. Shorter rows skip the test: run lengths that agree by chance mispredict, and
   the test cost 5-10% on road networks' rows */
static inline int coiter_union_alike(int wide, const void* c0, int64_t n0, const void* c1,
                                     int64_t n1, const void* c2, int64_t n2) {{
  if (n0 != n1 || (n2 != 0 && n2 != n0)) return 0;
  const int64_t first = coiter_union_crd(c0, wide & 1, 0), last = coiter_union_crd(c0, wide & 1, n0 - 1);
  return coiter_union_crd(c1, wide & 2, 0) == first && coiter_union_crd(c1, wide & 2, n0 - 1) == last
         && (n2 == 0 || (coiter_union_crd(c2, wide & 4, 0) == first
                         && coiter_union_crd(c2, wide & 4, n0 - 1) == last));
}}
/* The kernels' entry points. wide: bit s set where run s has int64 coordinates (SciPy keeps
   the int64 indices it is given), a constant of the kernel. Rows with such runs take the
   helpers where they hold at most 64 entries, on int32 copies of those runs' coordinates
   (below 2^25 then); longer ones merge */
static inline __attribute__((always_inline)) int coiter_union_takes(
    int wide, const void* c0, int64_t n0, const void* c1, int64_t n1, const void* c2, int64_t n2,
    int64_t dim) {{
  const int64_t total = n0 + n1 + n2;
  if (total <= 16) return total > 0 && dim < ((int64_t)1 << 25);
  if (coiter_union_alike(wide, c0, n0, c1, n1, c2, n2)) return 0;
  if (!wide) return coiter_union_takes32((const int32_t*)c0, n0, (const int32_t*)c1, n1,
                                         (const int32_t*)c2, n2, dim);
  return total <= 64 && dim < ((int64_t)1 << 25);
}}
static inline __attribute__((always_inline)) int64_t coiter_union_sum3(
    int wide, const void* c0, const double* v0, int64_t n0, const void* c1, const double* v1,
    int64_t n1, const void* c2, const double* v2, int64_t n2, int32_t* restrict oc,
    double* restrict ov) {{
  const void* given[3] = {{c0, c1, c2}};
  const double* v[3] = {{v0, v1, v2}};
  const int64_t len[3] = {{n0, n1, n2}};
  int32_t narrow[3][64];
  const int32_t* c[3];
  for (int s = 0; s < 3; s++) {{
    c[s] = (const int32_t*)given[s];
    if (wide >> s & 1) {{
      const int64_t* w = (const int64_t*)given[s];
      for (int64_t k = 0; k < len[s]; k++) narrow[s][k] = (int32_t)w[k];
      c[s] = narrow[s];
    }}
  }}
  return coiter_union_sum32(c, v, len, oc, ov);
}}
#else
/* without AVX-512 every row takes the merge */
#define coiter_union_takes(wide, c0, n0, c1, n1, c2, n2, dim) 0
#define coiter_union_sum3(wide, c0, v0, n0, c1, v1, n1, c2, v2, n2, oc, ov) ((int64_t)0)
#endif
"""),
    (('coiter_sort_index',), """\
#ifdef COITER_SORT_AVX512
/* byte b of iota is b: compressed by a word, it lists the word's set bits in order */
#define COITER_IOTA64 _mm512_set_epi8(63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, \\
    48, 47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, \\
    24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
/* the coordinates of word w's set bits, in order, at a; how many. A compress instruction
   lists them without a branch per bit */
static inline int coiter_word_bits(int64_t* restrict a, int64_t w, uint64_t word) {{
  uint8_t at[64];
  _mm512_storeu_si512(at, _mm512_maskz_compress_epi8(word, COITER_IOTA64));
  __m512i base = _mm512_set1_epi64(w << 6);
  int count = __builtin_popcountll(word);
  for (int r = 0; r < count; r += 8) {{
    __m512i c = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i*)(at + r)));
    int m = count - r < 8 ? count - r : 8;
    _mm512_mask_storeu_epi64(a + r, (__mmask8)((1u << m) - 1), _mm512_add_epi64(base, c));
  }}
  return count;
}}
#else
static inline int coiter_word_bits(int64_t* restrict a, int64_t w, uint64_t word) {{
  int count = 0;
  for (; word; word &= word - 1) a[count++] = (w << 6) + __builtin_ctzll(word);
  return count;
}}
#endif
/* order a list of more than 16 coordinates a[0..n) by setting their bits in set's bitmap
   and reading them back in order, which leaves the bitmap zeroed (about 4n operations plus
   the words the list's range spans; quicksort and radix sort cost twice that on SpGEMM
   rows). Where the range spans fewer than 8n words, its words are read eight to an
   instruction (AVX-512) and the nonzero ones listed without a branch; wider ranges also
   mark a summary bit per nonzero word and read back only the words it marks. The summary
   bit of every entry is a read-modify-write of one word that the next entry waits for: on
   SpGEMM rows of a few hundred entries within 40,000 columns it made sorting a third
   slower than the scan */
static void coiter_sort_bitmap(int64_t* restrict a, int64_t n, uint8_t* restrict set,
                                                         int64_t dim) {{
  uint64_t* bits = (uint64_t*)(set + coiter_row_flag_bytes(dim));
  uint64_t* summary = bits + (dim >> 6) + 1;
  int64_t lo = a[0], hi = a[0];
  for (int64_t q = 1; q < n; q++) {{
    lo = a[q] < lo ? a[q] : lo;
    hi = a[q] > hi ? a[q] : hi;
  }}
  int64_t k = 0;
#ifdef COITER_SORT_AVX512
  if ((hi >> 6) - (lo >> 6) < 8 * n) {{
    for (int64_t q = 0; q < n; q++) bits[a[q] >> 6] |= (uint64_t)1 << (a[q] & 63);
    const __m512i lane = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    int64_t nonzero[512];  /* the nonzero words of 512 in turn */
    for (int64_t w0 = lo >> 6; w0 <= hi >> 6; w0 += 512) {{
      int64_t w1 = COITER_MIN(w0 + 512, (hi >> 6) + 1), m = 0;
      for (int64_t w = w0; w < w1; w += 8) {{
        __mmask8 in = (__mmask8)(w1 - w >= 8 ? 0xff : (1u << (w1 - w)) - 1);
        __m512i x = _mm512_maskz_loadu_epi64(in, bits + w);
        __mmask8 nz = _mm512_test_epi64_mask(x, x);
        /* a compress into a register and a whole store (m <= w - w0 <= 504, so the store stays
           in nonzero): a compress straight to memory is microcoded on AMD Zen 4 */
        __m512i words = _mm512_add_epi64(_mm512_set1_epi64(w), lane);
        _mm512_storeu_si512(nonzero + m, _mm512_maskz_compress_epi64(nz, words));
        m += __builtin_popcount(nz);
      }}
      for (int64_t q = 0; q < m; q++) {{
        k += coiter_word_bits(a + k, nonzero[q], bits[nonzero[q]]);
        bits[nonzero[q]] = 0;
      }}
    }}
    return;
  }}
#endif
  for (int64_t q = 0; q < n; q++) {{
    int64_t j = a[q];
    bits[j >> 6] |= (uint64_t)1 << (j & 63);
    summary[j >> 12] |= (uint64_t)1 << ((j >> 6) & 63);
  }}
  for (int64_t s = lo >> 12; s <= hi >> 12; s++) {{
    for (uint64_t sw = summary[s]; sw; sw &= sw - 1) {{
      int64_t w = (s << 6) + __builtin_ctzll(sw);
      k += coiter_word_bits(a + k, w, bits[w]);
      bits[w] = 0;
    }}
    summary[s] = 0;
  }}
}}
/* order a workspace's coordinate list a[0..n) (coordinates flagged in set): up to 16 by
   insertion sort; up to 128 by sorting networks where the processor has AVX-512 (32 by
   quicksort elsewhere); longer ones by the bitmap. Short rows, most rows, are sorted in the
   row loop itself: a call per row cost road networks' SpGEMM 5 to 10% */
static void coiter_sort_index(int64_t* restrict a, int64_t n, uint8_t* restrict set, int64_t dim) {{
  if (n <= 16) {{
    coiter_insertion_sort(a, n);
    return;
  }}
#ifdef COITER_SORT_AVX512
  if (n <= 128 && dim <= INT32_MAX) {{ coiter_sort_network(a, n); return; }}
#else
  if (n <= 32) {{ coiter_qsort_index(a, n); return; }}
#endif
  coiter_sort_bitmap(a, n, set, dim);
}}
"""),
    (('coiter_hash_locate',), """\
/* hashed level: bucket of coordinate c in the segment of parent position `parent`
   (W buckets, linear probing, -1 marks an empty bucket); -1 when c is absent */
#define COITER_HASH_LOCATE(T) \
static inline int64_t coiter_hash_locate_##T(const T* crd, int64_t W, int64_t parent, int64_t c) {{ \
  if (parent < 0 || W <= 0) return -1; \
  /* tables coiter packs have a power-of-two W: a mask instead of a division */ \
  int64_t mask = (W & (W - 1)) ? -1 : W - 1; \
  int64_t base = parent * W, b = mask >= 0 ? (c & mask) : c % W; \
  for (int64_t n = 0; n < W; n++) {{ \
    T v = crd[base + b]; \
    if (v == c) return base + b; \
    if (v < 0) return -1; \
    if (++b == W) b = 0; \
  }} \
  return -1; \
}}
COITER_HASH_LOCATE(int32_t)
COITER_HASH_LOCATE(int64_t)
#define coiter_hash_locate(crd, W, parent, c) _Generic((crd), \
  const int32_t*: coiter_hash_locate_int32_t, int32_t*: coiter_hash_locate_int32_t, \
  const int64_t*: coiter_hash_locate_int64_t, int64_t*: coiter_hash_locate_int64_t)(crd, W, parent, c)
"""),
    (('coiter_lower_bound',), """\
/* the first position in [lo, hi) of a sorted coordinate array whose coordinate is >= c
   (where a loop over positions starts its piece of a split coordinate range) */
#define COITER_LOWER_BOUND(T) \
__attribute__((pure)) static inline int64_t coiter_lower_bound_##T(const T* crd, int64_t lo, \
                                                                   int64_t hi, int64_t c) {{ \
  while (lo < hi) {{ int64_t mid = lo + (hi - lo) / 2; if (crd[mid] < c) lo = mid + 1; else hi = mid; }} \
  return lo; }}
COITER_LOWER_BOUND(int32_t)
COITER_LOWER_BOUND(int64_t)
#define coiter_lower_bound(crd, lo, hi, c) _Generic((crd), \
  const int32_t*: coiter_lower_bound_int32_t, int32_t*: coiter_lower_bound_int32_t, \
  const int64_t*: coiter_lower_bound_int64_t, int64_t*: coiter_lower_bound_int64_t)(crd, lo, hi, c)
"""),
    (('coiter_sum',), """\
/* sum of vals[lo..hi): the value of a coordinate stored several times (a non-unique level) */
#define COITER_SUM(T, N) \
static inline T coiter_sum_##N(const T* v, int64_t lo, int64_t hi) {{ \
  T s = 0; for (int64_t q = lo; q < hi; q++) s += v[q]; return s; }}
{value_sums}
static inline bool coiter_sum_b(const bool* v, int64_t lo, int64_t hi) {{
  for (int64_t q = lo; q < hi; q++) if (v[q]) return 1; return 0; }}
#define coiter_sum(v, lo, hi) _Generic((v), \
{value_sum_cases}
  const bool*: coiter_sum_b, bool*: coiter_sum_b)(v, lo, hi)
"""),
    (('coiter_sort_pairs',), """\
/* sort (key, position) pairs by key: orders the iteration of an unordered level */
typedef struct {{ int64_t key, at; }} coiter_pair;
static int coiter_cmp_pair(const void* a, const void* b) {{
  int64_t x = ((const coiter_pair*)a)->key, y = ((const coiter_pair*)b)->key;
  return (x > y) - (x < y);
}}
static int coiter_sort_pairs(int64_t* key, int64_t* at, int64_t n) {{
  if (n < 2) return 0;
  coiter_pair* t = (coiter_pair*)coiter_malloc((size_t)n * sizeof(coiter_pair));
  if (!t) return 1;
  for (int64_t q = 0; q < n; q++) {{ t[q].key = key[q]; t[q].at = at[q]; }}
  qsort(t, (size_t)n, sizeof(coiter_pair), coiter_cmp_pair);
  for (int64_t q = 0; q < n; q++) {{ key[q] = t[q].key; at[q] = t[q].at; }}
  coiter_free(t);
  return 0;
}}
"""),
)

# C's binary operator precedence (higher binds tighter); unary operators bind tighter still
_PREC = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7,
         ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}
_UNARY = 11


def _const(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        value = int.__index__(value)
        if -2**31 < value < 2**31:
            return str(value)
        if 2**63 <= value < 2**64:  # uint64's upper half: its max (a min's identity), literals
            return f"{value}ULL"
        if not -2**63 <= value < 2**63:
            raise ValueError(f"integer constant {value} does not fit 64 bits")
        # a suffix keeps a wide constant 64-bit; -2^63 has no literal of its own in C
        return f"({value + 1}LL - 1)" if value == -2**63 else f"{value}LL"
    if isinstance(value, float):
        if math.isnan(value):
            return "NAN"
        if math.isinf(value):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        text = float.__repr__(float.__float__(value))
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, complex):
        return f"({_const(value.real)} + {_const(value.imag)} * I)"
    raise TypeError(f"cannot print constant {value!r}")


@singledispatch
def expr(e: IRExpr, prec: int = 0) -> str:
    raise TypeError(type(e).__name__)


@expr.register
def _(e: Var, prec: int = 0) -> str:
    return e.name


@expr.register
def _(e: Const, prec: int = 0) -> str:
    return _const(e.value)


@expr.register
def _(e: Load, prec: int = 0) -> str:
    return f"{e.array}[{expr(e.index)}]"


@expr.register
def _(e: Bin, prec: int = 0) -> str:
    p = _PREC[e.op]
    # right operand of a non-associative operator needs parentheses at equal precedence
    text = f"{expr(e.a, p)} {e.op} {expr(e.b, p + 1)}"
    return f"({text})" if p < prec else text


@expr.register
def _(e: Un, prec: int = 0) -> str:
    inner = expr(e.a, _UNARY)
    if inner.startswith(("-", "+")) or (isinstance(e.a, Const) and not isinstance(e.a.value, bool)):
        inner = f"({inner})"  # never print "--x" (a decrement) or "-1e3" ambiguities
    return f"{e.op}{inner}"


@expr.register(Min)
@expr.register(Max)
def _(e: Min | Max, prec: int = 0) -> str:
    macro = "COITER_MIN" if isinstance(e, Min) else "COITER_MAX"
    out = expr(e.args[0])
    for a in e.args[1:]:
        out = f"{macro}({out}, {expr(a)})"
    return out


@expr.register
def _(e: Select, prec: int = 0) -> str:
    return f"({expr(e.cond, 1)} ? {expr(e.a, 1)} : {expr(e.b, 1)})"


# The IR's heap calls print as the preamble's wrappers: the runtime's allocator where it
# installed one (coiter_use_allocator), else libc's with huge pages for large blocks. The
# Python side frees the kernel's arrays with the same allocator.
_ALLOCATORS = {"malloc": "coiter_malloc", "calloc": "coiter_calloc", "realloc": "coiter_realloc",
               "free": "coiter_free"}


@expr.register
def _(e: Call, prec: int = 0) -> str:
    return f"{_ALLOCATORS.get(e.fn, e.fn)}({', '.join(expr(a) for a in e.args)})"


@expr.register
def _(e: Cast, prec: int = 0) -> str:
    return f"(({e.ctype}){expr(e.a, _UNARY)})"


@singledispatch
def stmt(s: IRStmt, ind: str) -> list[str]:
    raise TypeError(type(s).__name__)


def _block(b: Block, ind: str) -> list[str]:
    out: list[str] = []
    for s in b.stmts:
        out += stmt(s, ind)
    return out


@stmt.register
def _(s: Decl, ind: str) -> list[str]:
    init = f" = {expr(s.init)}" if s.init is not None else ""
    return [f"{ind}{s.ctype} {s.name}{init};"]


@stmt.register
def _(s: Assign, ind: str) -> list[str]:
    if s.op == "+=" and isinstance(s.value, Const) and s.value.value == 1:
        return [f"{ind}{expr(s.target)}++;"]
    return [f"{ind}{expr(s.target)} {s.op} {expr(s.value)};"]


@stmt.register
def _(s: ExprStmt, ind: str) -> list[str]:
    return [f"{ind}{expr(s.expr)};"]


@stmt.register
def _(s: Block, ind: str) -> list[str]:
    return [f"{ind}{{", *_block(s, ind + "  "), f"{ind}}}"]


@stmt.register
def _(s: For, ind: str) -> list[str]:
    if s.pragma and s.pragma.startswith(_PARALLEL_FOR):
        return _team(s, ind)
    init = f"{s.ctype} {s.var} = {expr(s.start)}" if s.start is not None else ""
    head = f"{ind}for ({init}; {s.var} < {expr(s.end)}; {s.var}++) {{"
    pragma = [f"{ind}#pragma {s.pragma}"] if s.pragma else []
    if s.unroll and not s.pragma:  # an OpenMP pragma must directly precede its loop
        pragma.append(f"{ind}#pragma GCC unroll {s.unroll}")
    if not pragma and _scalar_sum(s):
        pragma.append(f"{ind}COITER_SCALAR_SUM")
    elif not pragma and _row_sum(s):
        pragma.append(f"{ind}COITER_ROW_SUM")
    return [*pragma, head, *_block(s.body, ind + "  "), f"{ind}}}"]


_PARALLEL_FOR = "omp parallel for "


def _team(s: For, ind: str) -> list[str]:
    """A parallel loop as a region (``omp parallel`` with the loop's thread count) around the
    loop (``omp for`` with its other clauses, ``nowait``: the region's end is the barrier its
    reductions complete at). Under a dynamic schedule thread 0 notes when it entered the
    region and when it ran out of iterations, so that ``coiter_team_done`` sees a team that
    came late (the prelude explains); a static schedule's threads may finish apart by design."""
    clauses = _clauses(s.pragma[len(_PARALLEL_FOR):])
    team = [c for c in clauses if c.startswith("num_threads(")]
    loop = replace(s, pragma=" ".join(["omp for", *(c for c in clauses if c not in team), "nowait"]))
    region = f"#pragma {' '.join(['omp parallel', *team])}"
    inner = ind + "    "
    if not any(c.startswith("schedule(dynamic") for c in clauses):
        return [f"{ind}{region}", f"{ind}{{", *stmt(loop, ind + "  "), f"{ind}}}"]
    thread0 = f"{inner}if (COITER_THREAD_NUM() == 0) "
    return [f"{ind}{{",
            f"{ind}  int64_t coiter_team_start = coiter_clock(), coiter_team_entered = 0, "
            "coiter_team_first_done = 0;",
            f"{ind}  {region}",
            f"{ind}  {{",
            f"{thread0}coiter_team_entered = coiter_clock();",
            *stmt(loop, inner),
            f"{thread0}coiter_team_first_done = coiter_clock();",
            f"{ind}  }}",
            f"{ind}  coiter_team_done(coiter_team_start, coiter_team_entered, "
            "coiter_team_first_done);",
            f"{ind}}}"]


def _clauses(text: str) -> list[str]:
    """The top-level clauses of an OpenMP directive's text (``a(b(c)) d(e)`` -> two)."""
    out, depth, start = [], 0, 0
    for k, ch in enumerate(text + " "):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == " " and depth == 0:
            if text[start:k].strip():
                out.append(text[start:k].strip())
            start = k + 1
    return out


def _scalar_sum(s: For) -> bool:
    """Whether ``s`` is an innermost loop over a run of positions (it declares its variable,
    as an OpenMP loop must, from a value that is not a constant) that adds, subtracts or
    multiplies into a scalar declared outside it (not one its iterations each start afresh,
    as a chunk function's loop over rows does: codegen/outline.py)."""
    if s.start is None or isinstance(s.start, Const):
        return False
    stack: list[IRStmt] = list(s.body.stmts)
    summed: set[str] = set()
    local: set[str] = set()
    while stack:
        t = stack.pop()
        if isinstance(t, (For, While)):
            return False
        if isinstance(t, Assign) and isinstance(t.target, Var) and t.op in ("+=", "-=", "*="):
            if not (isinstance(t.value, Const) and t.value.value == 1):
                summed.add(t.target.name)
        elif isinstance(t, Decl):
            local.add(t.name)
        elif isinstance(t, Block):
            stack.extend(t.stmts)
        elif isinstance(t, If):
            stack.extend(x for x in (t.then, t.otherwise) if x is not None)
    return bool(summed - local)


def _row_sum(s: For) -> bool:
    """Whether ``s`` is a loop over a run of positions (from a value that is not a constant)
    whose last statement is a loop of constant bounds adding into array entries: the columns
    of a dense row, which are what should vectorize, not the positions."""
    if s.start is None or isinstance(s.start, Const) or not s.body.stmts:
        return False
    row = s.body.stmts[-1]
    if not (isinstance(row, For) and isinstance(row.start, Const) and isinstance(row.end, Const)
            and len(row.body.stmts) == 1):
        return False
    (update,) = row.body.stmts
    return isinstance(update, Assign) and update.op == "+=" and isinstance(update.target, Load)


@stmt.register
def _(s: While, ind: str) -> list[str]:
    return [f"{ind}while ({expr(s.cond)}) {{", *_block(s.body, ind + "  "), f"{ind}}}"]


@stmt.register
def _(s: If, ind: str) -> list[str]:
    out = [f"{ind}if ({expr(s.cond)}) {{", *_block(s.then, ind + "  ")]
    other = s.otherwise
    while isinstance(other, If):
        out += [f"{ind}}} else if ({expr(other.cond)}) {{", *_block(other.then, ind + "  ")]
        other = other.otherwise
    if isinstance(other, Block) and other.stmts:
        out += [f"{ind}}} else {{", *_block(other, ind + "  ")]
    out.append(f"{ind}}}")
    return out


@stmt.register
def _(s: Break, ind: str) -> list[str]:
    return [f"{ind}break;"]


@stmt.register
def _(s: Region, ind: str) -> list[str]:
    return [f"{ind}#pragma {s.pragma}", f"{ind}{{", *_block(s.body, ind + "  "), f"{ind}}}"]


@stmt.register
def _(s: Goto, ind: str) -> list[str]:
    return [f"{ind}goto {s.label};"]


@stmt.register
def _(s: Label, ind: str) -> list[str]:
    return [f"{ind}{s.name}:;"]


@stmt.register
def _(s: Pragma, ind: str) -> list[str]:
    return [f"{ind}#pragma {s.text}", *stmt(s.stmt, ind)]


@stmt.register
def _(s: Comment, ind: str) -> list[str]:
    return [f"{ind}/* {s.text.replace('*/', '* /')} */"]


@stmt.register
def _(s: Return, ind: str) -> list[str]:
    return [f"{ind}return {expr(s.value)};"]


def _param(p: Param) -> str:
    const = "const " if p.const else ""
    if p.pointers:
        return f"{const}{p.ctype}{'*' * p.pointers}{' restrict' if p.restrict else ''} {p.name}"
    return f"{const}{p.ctype} {p.name}"


def function(fn: Function) -> str:
    """One C function definition."""
    params = ",\n    ".join(_param(p) for p in fn.params) or "void"
    lines = [f"{fn.returns} {fn.name}(\n    {params}) {{", *_block(fn.body, "  "), "}"]
    return "\n".join(lines)


def packed_entry(fn: Function, returns: str = "int") -> str:
    """``<name>_packed(const int64_t* args)``: ``fn`` with every parameter (integers and
    pointers, all 64 bits wide) read from one array, so callers pass a single pointer."""
    args = ",\n      ".join(f"({_param_type(p)})coiter_args[{n}]" if not p.pointers else
                            f"({_param_type(p)})(intptr_t)coiter_args[{n}]"
                            for n, p in enumerate(fn.params))
    return (f"{returns} {fn.name}_packed(const int64_t* coiter_args) {{\n"
            f"  return {fn.name}(\n      {args});\n}}")


def _param_type(p: Param) -> str:
    return f"{'const ' if p.const else ''}{p.ctype}{'*' * p.pointers}"


# the value types kernels hold, with coiter_sum's suffix for each (bool sums as "or")
SUMMED_TYPES = (("double", "f64"), ("float", "f32"), ("_Float16", "f16"), ("int64_t", "i64"),
                ("int32_t", "i32"), ("int16_t", "i16"), ("int8_t", "i8"), ("uint64_t", "u64"),
                ("uint32_t", "u32"), ("uint16_t", "u16"), ("uint8_t", "u8"),
                ("double _Complex", "c128"), ("float _Complex", "c64"))
VALUE_SUMS = "\n".join(f"COITER_SUM({t}, {n})" for t, n in SUMMED_TYPES)
VALUE_SUM_CASES = "\n".join(f"  const {t}*: coiter_sum_{n}, {t}*: coiter_sum_{n}, \\" for t, n in SUMMED_TYPES)


def preamble(index_max: str, code: str | None = None) -> str:
    """The includes, macros and helpers a kernel's translation unit starts with: the helpers
    ``code`` uses (directly or through other helpers), or all of them without ``code``."""
    helpers = [text for _, text in HELPERS] if code is None else _used_helpers(code)
    return "\n".join([HEAD, *helpers]).format(
        index_max=index_max, work_per_thread=WORK_PER_THREAD, value_sums=VALUE_SUMS,
        value_sum_cases=VALUE_SUM_CASES)


def _used_helpers(code: str) -> list[str]:
    """The texts of the helpers ``code`` names, and of those they name, in HELPERS' order."""
    words = set(_WORD.findall(code))
    used = [False] * len(HELPERS)
    changed = True
    while changed:
        changed = False
        for k, (names, text) in enumerate(HELPERS):
            if not used[k] and words.intersection(names):
                used[k] = changed = True
                words.update(_WORD.findall(text))
    return [text for k, (_, text) in enumerate(HELPERS) if used[k]]


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BARE_HEAP = re.compile(r"(?<![\w.>])(malloc|calloc|realloc|free)\(")


def module(functions: list[Function], index_max: str, support: tuple[str, ...] = ()) -> str:
    """A complete C translation unit holding ``functions`` (parallel loop bodies outlined,
    see :mod:`coiter.codegen.outline`) and their packed entry points, after the C
    definitions in ``support``; the preamble keeps only the helpers they use."""
    parts = list(support)
    for f in functions:
        helpers, f = outline_parallel_bodies(f)
        parts.append("\n\n".join([*(function(h) for h in helpers), function(f), packed_entry(f)]))
    code = "\n\n".join(parts)
    bare = _BARE_HEAP.search(code)
    if bare:
        # the runtime may give the library the result pool's allocator (coiter_use_allocator),
        # whose blocks libc's free cannot take
        raise AssertionError(f"generated C calls {bare.group(1)}() directly; use coiter_{bare.group(1)}")
    return preamble(index_max, code) + "\n" + code + "\n"
