/* A plain STREAM triad, the yardstick for dtune-probe memory: a[j] = b[j] + s*c[j] over three
 * arrays of N doubles, OpenMP static schedule, first touch by the same threads, best of ITERS
 * (the first not counted), GB/s = 3 x 8 x N bytes / time / 1e9 (STREAM's count).
 * Build and run: cc -O3 -march=native -fopenmp triad.c -o triad && OMP_NUM_THREADS=2 ./triad N ITERS
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 1L << 24;
  const int iters = argc > 2 ? atoi(argv[2]) : 20;
  double* a = aligned_alloc(64, ((n * sizeof(double) + 63) / 64) * 64);
  double* b = aligned_alloc(64, ((n * sizeof(double) + 63) / 64) * 64);
  double* c = aligned_alloc(64, ((n * sizeof(double) + 63) / 64) * 64);
  if (!a || !b || !c) return 1;
#pragma omp parallel for schedule(static)
  for (long j = 0; j < n; ++j) {
    a[j] = 1.0;
    b[j] = 2.0;
    c[j] = 0.5;
  }
  const double s = 3.0;
  double best = 0;
  for (int it = 0; it <= iters; ++it) {
    const double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
    for (long j = 0; j < n; ++j) a[j] = b[j] + s * c[j];
    const double t = omp_get_wtime() - t0;
    const double gbps = 3.0 * 8.0 * (double)n / t / 1e9;
    if (it > 0 && gbps > best) best = gbps;
  }
  printf("{\"triad_gbps\": %.4f, \"n\": %ld, \"threads\": %d, \"check\": %.1f}\n", best, n,
         omp_get_max_threads(), a[n / 2]);
  free(a);
  free(b);
  free(c);
  return 0;
}
