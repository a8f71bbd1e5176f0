/* The cores other processes leave free (part of coiter.runtime._fastcall).
 *
 * A team of as many threads as cores, on a machine where another process spins on one,
 * waits for a worker that shares a core with it. The kernels' late-team back-off (C prelude,
 * coiter_team_done) notices only the waits that outlast the work, and two threads ran
 * USA-road-NE's SpMV 0.85x as fast as one in the median (docs/performance.md, "Cores other
 * processes use"). So once per period (100 ms) the kernels' calls that choose their own
 * thread count sample the CPU time that the CPUs this thread may run on spent busy
 * (/proc/stat) and this process's own (its finished children's included); the difference
 * over the period is the other processes' share, and a call uses no more threads than the
 * cores they left free. On this project's 2-core machine the others' share measured -0.08
 * to 0.15 of a core quiet, 0.42-1.0 with a spinning process (0.5 while a worker shares its
 * core, 1.0 after); a core counts as taken from 0.3 of it.
 *
 * One state for the process, sampled first as the module loads (import coiter), so that a
 * kernel's first call, usually much later, already knows the load; every kernel library gets
 * coiter_load_free_cores through coiter_use_load as the runtime loads it.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "_load.h"

#define TAKEN 0.3 /* of a core, from which it counts as another process's */

static int64_t period = 100000000;
static int64_t sampled_at, last_busy, last_total, last_own;
static int last_cpus, free_cores, sampling;

static int64_t clock_ns(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The clock ticks that the CPUs this thread may run on (its affinity mask: a container's or a
   batch job's cpuset) spent busy (user, nice, system, irq, softirq, steal) and in all since
   boot, and how many CPUs those are, from /proc/stat's per-CPU lines; 0 where it cannot be
   read (not Linux). Other processes on CPUs this one may not use take nothing from it. */
int coiter_load_cpu_ticks(int64_t* busy, int64_t* total, int* cpus) {
  unsigned long mask[32]; /* 2048 CPUs; with more (no answer) every CPU counts */
#ifdef SYS_sched_getaffinity
  long bytes = syscall(SYS_sched_getaffinity, 0, sizeof mask, mask);
#else /* not Linux: no /proc/stat either */
  long bytes = -1;
#endif
  FILE* f = fopen("/proc/stat", "re");
  if (!f) return 0;
  char line[256];
  int64_t b = 0, t = 0;
  int n = 0;
  const size_t word = 8 * sizeof mask[0];
  while (fgets(line, sizeof line, f) && memcmp(line, "cpu", 3) == 0) {
    if (line[3] < '0' || line[3] > '9') continue; /* the line of all CPUs */
    char *p, *end;
    long id = strtol(line + 3, &end, 10);
    if (bytes > 0 && ((size_t)id >= 8 * (size_t)bytes || !(mask[id / word] >> (id % word) & 1))) continue;
    int64_t v[8];
    int k = 0;
    for (p = end; k < 8; k++, p = end) {
      v[k] = strtoll(p, &end, 10);
      if (end == p) break;
    }
    if (k < 8) continue;
    b += v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    t += v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
    n++;
  }
  fclose(f);
  if (!n) return 0;
  *busy = b, *total = t, *cpus = n;
  return 1;
}

/* The cores of ncpu that others left free over a period in which those cores ticked total
   times (of tick_ns each), busy times of them, and this process ran own_ns: at least 1. */
int coiter_load_cores_left(int64_t busy, int64_t total, int64_t own_ns, int64_t tick_ns, int ncpu) {
  if (total <= 0) return ncpu;
  double others = ncpu * ((double)busy * tick_ns - own_ns) / ((double)total * tick_ns);
  int taken = 0;
  while (taken < ncpu && others > taken + TAKEN) taken++;
  return taken < ncpu ? ncpu - taken : 1;
}

/* The CPU time of this process and of the children it waited for: a kernel compiled between
   two samples (cc, 0.4 s) is this process's work, not another's (coiter demo ran its first
   calls after a compile on one thread). */
int64_t coiter_load_own_ns(void) {
  struct rusage children;
  int64_t own = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  if (getrusage(RUSAGE_CHILDREN, &children) == 0)
    own += ((int64_t)children.ru_utime.tv_sec + children.ru_stime.tv_sec) * 1000000000
           + ((int64_t)children.ru_utime.tv_usec + children.ru_stime.tv_usec) * 1000;
  return own;
}

/* A sample at `now` (CLOCK_MONOTONIC's nanoseconds); the estimate when the last one was over
   the same CPUs. By the one thread that won `sampling`. */
static void sample(int64_t now) {
  int64_t busy, total, own = coiter_load_own_ns();
  int cpus;
  if (coiter_load_cpu_ticks(&busy, &total, &cpus)) {
    if (last_total && cpus == last_cpus)
      __atomic_store_n(&free_cores, coiter_load_cores_left(busy - last_busy, total - last_total, own - last_own,
                                                           1000000000 / sysconf(_SC_CLK_TCK), cpus),
                       __ATOMIC_RELAXED);
    last_busy = busy, last_total = total, last_own = own, last_cpus = cpus;
  }
  __atomic_store_n(&sampled_at, now, __ATOMIC_RELAXED);
}

/* The cores others left free in the last period, 0 while unknown; the call that finds a
   period over samples, the others use the last answer. */
int coiter_load_free_cores(int64_t now) {
  if (now - __atomic_load_n(&sampled_at, __ATOMIC_RELAXED) >= __atomic_load_n(&period, __ATOMIC_RELAXED)
      && !__atomic_exchange_n(&sampling, 1, __ATOMIC_ACQUIRE)) {
    sample(now);
    __atomic_store_n(&sampling, 0, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(&free_cores, __ATOMIC_RELAXED);
}

int64_t coiter_load_set_period(int64_t ns) {
  return __atomic_exchange_n(&period, ns, __ATOMIC_RELAXED);
}

void load_init(void) {
  sample(clock_ns(CLOCK_MONOTONIC));
}
