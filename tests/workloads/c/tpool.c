/* A pool of THREADS threads, each looping usleep(SLEEP_US) + getppid() until killed:
 * many threads that wake now and then, as a server's worker pool does. Used by
 * xtask/scripts/trace_cpu_pool.sh to measure what `kernelkite trace --pid` costs on it.
 *
 * Build: gcc -O2 -pthread -o tpool tpool.c; run: tpool THREADS [SLEEP_US] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static useconds_t sleep_us = 10000;

static void *worker(void *unused) {
    for (;;) {
        usleep(sleep_us);
        (void)getppid();
    }
    return unused;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    if (threads <= 0) {
        fprintf(stderr, "usage: tpool THREADS [SLEEP_US]\n");
        return 2;
    }
    if (argc > 2) sleep_us = (useconds_t)atol(argv[2]);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 65536);
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, &attr, worker, NULL) != 0) return 1;
    }
    pause();
    return 0;
}
