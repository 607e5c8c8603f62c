/* A program of known call depth for the unwinding tests: main calls
 * level1, level2, level3, which calls the two hot leaves, for as many
 * seconds as its argument says. */
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile unsigned long sink;

NOINLINE static unsigned long leaf_a(unsigned long x)
{
	for (int i = 0; i < 1000; i++)
		x = x * 6364136223846793005UL + 1;
	return x;
}

NOINLINE static unsigned long leaf_b(unsigned long x)
{
	for (int i = 0; i < 1000; i++)
		x ^= x << 13, x ^= x >> 7;
	return x;
}

NOINLINE static unsigned long level3(unsigned long x) { return leaf_a(x) + leaf_b(x); }
NOINLINE static unsigned long level2(unsigned long x) { return level3(x) + 1; }
NOINLINE static unsigned long level1(unsigned long x) { return level2(x) + 1; }

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 1.0;
	double start = now();
	unsigned long x = 1;
	do {
		for (int i = 0; i < 100; i++)
			x = level1(x);
	} while (now() - start < seconds);
	sink = x;
	return 0;
}
