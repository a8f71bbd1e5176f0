/* STREAM triad a[i] = b[i] + s*c[i] with OpenMP: the machine's sustainable memory
 * bandwidth, the bound a memory-bound sparse kernel is measured against.
 *
 *   triad N REPS   ->   prints "threads best_seconds GB/s checksum"
 *
 * Bytes per triad are counted as STREAM does: 3 arrays x 8 bytes x N (the write-allocate
 * read of a[] is not counted, as the kernels' byte counts do not count it either). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s N REPS\n", argv[0]);
        return 2;
    }
    long n = atol(argv[1]);
    int reps = atoi(argv[2]);
    double *a = malloc(n * sizeof(double));
    double *b = malloc(n * sizeof(double));
    double *c = malloc(n * sizeof(double));
    if (!a || !b || !c) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    /* first touch by the same static schedule as the triad, so each thread's pages are
     * mapped where it runs */
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        a[i] = 0.0;
        b[i] = 1.0;
        c[i] = 2.0;
    }
    const double s = 3.0;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
        t = omp_get_wtime() - t;
        if (t < best) best = t;
    }
    double checksum = 0.0; /* reading a[] keeps the compiler from dropping the triad */
    for (long i = 0; i < n; i += 4096) checksum += a[i];
    printf("%d %.9f %.3f %g\n", omp_get_max_threads(), best, 24.0 * n / best / 1e9, checksum);
    free(a);
    free(b);
    free(c);
    return 0;
}
