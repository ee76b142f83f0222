/* A workload that reaches the kernel only through glibc, as real programs do, built
 * -O2 -fomit-frame-pointer by tests/ebpf_stacks.rs: Debian's glibc has no frame
 * pointers either, so a frame-pointer walk skips the functions below that call into it.
 *
 *   libcwork mutex DIR SECONDS   two threads contend one pthread mutex: the waiter's
 *                                lock_wait is under kk_lock_caller -> pthread_mutex_lock
 *   libcwork fsync DIR SECONDS   write+fsync a file in DIR: io_wait under
 *                                kk_fsync_caller -> fsync
 *   libcwork deep DIR SECONDS    sleep 2 ms at a time 24 frames of 2 KiB below main:
 *                                deeper than the 16 KiB stack copy, so the stack is
 *                                truncated
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int stop;
static volatile unsigned long sink;

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Takes the lock the holder keeps for 5 ms at a time: the wait is in glibc's
 * __lll_lock_wait, called from pthread_mutex_lock, called from here. */
__attribute__((noinline)) void kk_lock_caller(void) {
    pthread_mutex_lock(&lock);
    sink++;
    pthread_mutex_unlock(&lock);
}

__attribute__((noinline)) void kk_lock_holder(void) {
    pthread_mutex_lock(&lock);
    sleep_us(5000);
    pthread_mutex_unlock(&lock);
    sleep_us(200);
}

static void *holder(void *arg) {
    (void)arg;
    while (!stop)
        kk_lock_holder();
    return NULL;
}

static void *waiter(void *arg) {
    (void)arg;
    while (!stop) {
        kk_lock_caller();
        sleep_us(100);
    }
    return NULL;
}

/* One page written, then fsync: the wait is in glibc's fsync, called from here. */
__attribute__((noinline)) void kk_fsync_caller(int fd, const char *page) {
    if (write(fd, page, 4096) != 4096) {
        perror("write");
        exit(1);
    }
    if (fsync(fd) != 0) {
        perror("fsync");
        exit(1);
    }
    sink++;
}

/* Each level keeps 2 KiB on the stack (the volatile array cannot be optimised away). */
__attribute__((noinline)) void kk_deep(int depth, double until) {
    volatile char frame[2048];
    frame[0] = (char)depth;
    if (depth > 0) {
        kk_deep(depth - 1, until);
    } else {
        struct timespec now;
        do {
            sleep_us(2000);
            clock_gettime(CLOCK_MONOTONIC, &now);
        } while (now.tv_sec + now.tv_nsec / 1e9 < until);
    }
    sink += frame[0];
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: libcwork mutex|fsync DIR SECONDS\n");
        return 2;
    }
    double seconds = atof(argv[3]);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    if (strcmp(argv[1], "mutex") == 0) {
        pthread_t h, w;
        pthread_create(&h, NULL, holder, NULL);
        pthread_create(&w, NULL, waiter, NULL);
        sleep_us((long)(seconds * 1e6));
        stop = 1;
        pthread_join(h, NULL);
        pthread_join(w, NULL);
        return 0;
    }
    if (strcmp(argv[1], "deep") == 0) {
        kk_deep(24, start.tv_sec + start.tv_nsec / 1e9 + seconds);
        return 0;
    }
    if (strcmp(argv[1], "fsync") == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/libcwork-%d", argv[2], (int)getpid());
        int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
        if (fd < 0) {
            perror("open");
            return 1;
        }
        unlink(path);
        static char page[4096];
        memset(page, 'k', sizeof page);
        do {
            kk_fsync_caller(fd, page);
            clock_gettime(CLOCK_MONOTONIC, &now);
        } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
        close(fd);
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
