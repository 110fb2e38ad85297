// A fixed register-only loop (a xorshift chain, no memory beyond registers): its time per
// iteration tells a core's speed in the moment, apart from any cache or memory effect.
// Build: cc -O2 -o core_speed core_speed.c; run: taskset -c N ./core_speed (ns per
// iteration, then a bit that keeps the loop from being optimised away).
#include <stdio.h>
#include <stdint.h>
#include <time.h>
int main(void) {
  struct timespec a, b;
  uint64_t x = 88172645463325252ull, acc = 0;
  const long n = 60000000;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; acc += x; }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
  printf("%.4f %llu\n", ns / n, (unsigned long long)(acc & 1));
  return 0;
}
