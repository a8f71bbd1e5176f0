/* The cores other processes leave free: see _load.c. Thread-safe, no GIL needed. */
#ifndef COITER_LOAD_H
#define COITER_LOAD_H

#include <stdint.h>

void load_init(void);                          /* the first sample, as the module loads */
int coiter_load_free_cores(int64_t now);       /* the kernels' view (coiter_use_load) */
int coiter_load_cpu_ticks(int64_t* busy, int64_t* total, int* cpus);
int coiter_load_cores_left(int64_t busy, int64_t total, int64_t own_ns, int64_t tick_ns, int ncpu);
int64_t coiter_load_own_ns(void);              /* this process's CPU time and its children's */
int64_t coiter_load_set_period(int64_t ns);    /* the sampling period; returns the old one */

#endif
