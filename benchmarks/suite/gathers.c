/* The floor under CSR SpMV where x is read at random: a loop that does nothing but read
 * A's column indices and x at them, summing what it reads in vector lanes (`omp parallel
 * for simd`, static schedule over the threads the environment gives), so that no chain of
 * dependent adds bounds it.
 * An SpMV reads the same indices and the same places of x, and A's values and y besides.
 *
 *   double gathers_best_s(crd, width, n, x, reps, &sum)
 *
 * crd holds n indices of `width` bytes (4 or 8); returns the best of `reps` timed passes
 * (after one untimed pass) in seconds, and the sum of x[crd[p]] over p in *sum (kept, so
 * that the compiler keeps the reads). */
#include <omp.h>
#include <stdint.h>

#define PASS(type)                                                     \
    do {                                                               \
        const type* restrict c = (const type*)crd;                     \
        _Pragma("omp parallel for simd schedule(static) reduction(+ : s)")  \
        for (int64_t p = 0; p < n; p++) s += x[c[p]];                  \
    } while (0)

static double pass(const void* crd, int width, int64_t n, const double* restrict x) {
    double s = 0.0;
    if (width == 4)
        PASS(int32_t);
    else
        PASS(int64_t);
    return s;
}

double gathers_best_s(const void* crd, int width, int64_t n, const double* x, int reps, double* sum) {
    *sum = pass(crd, width, n, x);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = omp_get_wtime();
        *sum = pass(crd, width, n, x);
        t = omp_get_wtime() - t;
        if (t < best) best = t;
    }
    return best;
}
