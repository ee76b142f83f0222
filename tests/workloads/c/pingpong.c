/* Two threads ping-pong one byte through two pipes (on two CPUs when the machine has
 * them), gated: both threads print their tid and wait; the first line on stdin starts
 * SECONDS of ping-pong, after which the second thread prints "done" and both park; the
 * second line on stdin ends the process. Used by xtask/scripts/schedstat_pingpong.py
 * to hold kernelkite's per-thread classes against schedstat while the threads live.
 *
 * Build: gcc -O2 -pthread -o pingpong pingpong.c; run: pingpong SECONDS */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2], gate[2];
static double seconds;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *ping(void *unused) {
    char c = 'x';
    printf("tid %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    if (read(gate[0], &c, 1) != 1) return NULL;
    double end = now() + seconds;
    while (now() < end) {
        if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) return NULL;
    }
    c = 'q';
    if (write(ab[1], &c, 1) != 1) return NULL;
    (void)read(gate[0], &c, 1);
    return unused;
}

static void *pong(void *unused) {
    char c;
    printf("tid %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    for (;;) {
        if (read(ab[0], &c, 1) != 1) return NULL;
        if (c == 'q') break;
        if (write(ba[1], &c, 1) != 1) return NULL;
    }
    printf("done\n");
    fflush(stdout);
    (void)read(gate[0], &c, 1);
    return unused;
}

int main(int argc, char **argv) {
    if (argc != 2 || (seconds = atof(argv[1])) <= 0) {
        fprintf(stderr, "usage: pingpong SECONDS\n");
        return 2;
    }
    if (pipe(ab) || pipe(ba) || pipe(gate)) return 1;
    pthread_t a, b;
    pthread_create(&a, NULL, ping, NULL);
    pthread_create(&b, NULL, pong, NULL);
    char line[64], go = 'g';
    if (!fgets(line, sizeof line, stdin) || write(gate[1], &go, 1) != 1) return 1;
    if (!fgets(line, sizeof line, stdin)) return 1;
    if (write(gate[1], &go, 1) != 1 || write(gate[1], &go, 1) != 1) return 1;
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}
