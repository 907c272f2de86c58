/* The smallest honest MPI_Allreduce benchmark: the baseline dtune-comm's overhead is measured
 * against (benchmarks/comm/overhead_vs_minimal.sh). float32 sum, out-of-place, buffers allocated
 * once; per size: warm-up, MPI_Barrier, then each iteration timed on its own with
 * clock_gettime(CLOCK_MONOTONIC), back to back, as dtune does. Rank 0 prints its median per size.
 * Usage: mpirun -np 2 minimal_allreduce ITERS WARMUP SIZE_BYTES...
 * Output: one line per size, `size_bytes median_us` (median as numpy: mean of the middle two). */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c99 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc < 4) {
    if (rank == 0) fprintf(stderr, "usage: %s ITERS WARMUP SIZE_BYTES...\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const int iters = atoi(argv[1]), warmup = atoi(argv[2]);
  if (iters < 1 || warmup < 0) {
    if (rank == 0) fprintf(stderr, "ITERS must be >= 1 and WARMUP >= 0\n");
    MPI_Finalize();
    return 2;
  }
  size_t max_bytes = 0;
  for (int a = 3; a < argc; ++a) {
    size_t b = strtoull(argv[a], NULL, 10);
    if (b > max_bytes) max_bytes = b;
  }
  size_t max_count = max_bytes / sizeof(float) + 1;
  float* send = malloc(max_count * sizeof(float));
  float* recv = malloc(max_count * sizeof(float));
  double* times_us = malloc(iters * sizeof(double));
  if (!send || !recv || !times_us) {
    fprintf(stderr, "rank %d: out of memory for %zu bytes\n", rank, max_bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* Small exact values (no denormals, no overflow), and every page touched before timing. */
  for (size_t i = 0; i < max_count; ++i) send[i] = (float)((rank + i) % 8);
  memset(recv, 0, max_count * sizeof(float));

  for (int a = 3; a < argc; ++a) {
    const size_t bytes = strtoull(argv[a], NULL, 10);
    const int count = (int)(bytes / sizeof(float)); /* nccl-tests rounds down the same way */
    for (int w = 0; w < warmup; ++w)
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int it = 0; it < iters; ++it) {
      const long long t0 = now_ns();
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times_us[it] = (now_ns() - t0) * 1e-3;
    }
    if (rank == 0) printf("%zu %.3f\n", (size_t)count * sizeof(float), median(times_us, iters));
  }
  free(times_us);
  free(recv);
  free(send);
  MPI_Finalize();
  return 0;
}
