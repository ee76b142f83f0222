/* The library lateload.c loads late: it blocks in nanosleep for the time asked. */
#include <time.h>

__attribute__((noinline)) void kk_block_in_library(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
    /* After the call: the call stays a call (not a tail jump), so this frame is on the
     * stack while nanosleep blocks. */
    __asm__ volatile("" ::: "memory");
}
