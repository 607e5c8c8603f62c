/* Reads the clock in a loop: most samples fall in the vDSO and libc. */
#include <time.h>

int main(void)
{
	struct timespec t;
	for (long i = 0; i < 20000000; i++)
		clock_gettime(CLOCK_MONOTONIC, &t);
	return 0;
}
