/* stackwork: one thread per latency class, each blocking inside a function of known
 * name, for the --stacks tests. Built by the test with frame pointers and DWARF:
 *   gcc -O0 -g -fno-omit-frame-pointer -pthread stackwork.c -o stackwork
 * Every blocking syscall is made with an inline `syscall` instruction from the named
 * function itself, so the frame-pointer walk starts inside it (a libc wrapper without
 * a frame would hide its caller).
 * Usage: stackwork DIR SECONDS */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int lock_word; /* 0 free, 1 held */
static volatile int stop;
static const char *dir;

static long raw3(long nr, long a, long b, long c) {
    long ret;
    register long r10 __asm__("r10") = 0;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
    return ret;
}

/* Inlined so the syscall instruction is in the named function. */
#define RAW_FUTEX_WAIT(addr, val)                                                  \
    do {                                                                           \
        long ret_;                                                                 \
        register long r10_ __asm__("r10") = 0;                                     \
        __asm__ volatile("syscall"                                                 \
                         : "=a"(ret_)                                              \
                         : "a"(SYS_futex), "D"(addr), "S"(FUTEX_WAIT_PRIVATE),     \
                           "d"(val), "r"(r10_)                                     \
                         : "rcx", "r11", "memory");                                \
        (void)ret_;                                                                \
    } while (0)

__attribute__((noinline)) void kk_block_on_mutex(void) {
    while (__sync_lock_test_and_set(&lock_word, 1)) {
        RAW_FUTEX_WAIT(&lock_word, 1);
    }
}

__attribute__((noinline)) void kk_release_mutex(void) {
    __sync_lock_release(&lock_word);
    raw3(SYS_futex, (long)&lock_word, FUTEX_WAKE_PRIVATE, 1);
}

__attribute__((noinline)) void kk_nanosleep_loop(void) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    while (!stop) {
        long ret;
        register long r10 __asm__("r10") = 0;
        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "a"(SYS_nanosleep), "D"(&ts), "S"(0), "d"(0), "r"(r10)
                         : "rcx", "r11", "memory");
        (void)ret;
    }
}

__attribute__((noinline)) void kk_fsync_loop(int fd) {
    static char block[4096];
    while (!stop) {
        pwrite(fd, block, sizeof block, 0);
        long ret;
        register long r10 __asm__("r10") = 0;
        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "a"(SYS_fsync), "D"((long)fd), "S"(0), "d"(0), "r"(r10)
                         : "rcx", "r11", "memory");
        (void)ret;
    }
}

__attribute__((noinline)) void kk_spin(void) {
    volatile unsigned long x = 0;
    while (!stop) {
        for (int i = 0; i < 100000; i++) x += i;
    }
}

static void *holder(void *arg) {
    (void)arg;
    struct timespec hold = {0, 20 * 1000 * 1000}, gap = {0, 200 * 1000};
    while (!stop) {
        kk_block_on_mutex();
        nanosleep(&hold, 0); /* the waiter blocks meanwhile */
        kk_release_mutex();
        nanosleep(&gap, 0);
    }
    return 0;
}

static void *waiter(void *arg) {
    (void)arg;
    while (!stop) {
        kk_block_on_mutex();
        kk_release_mutex();
    }
    return 0;
}

static void *sleeper(void *arg) {
    (void)arg;
    kk_nanosleep_loop();
    return 0;
}

static void *syncer(void *arg) {
    (void)arg;
    char path[4096];
    snprintf(path, sizeof path, "%s/stackwork-%d", dir, getpid());
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    kk_fsync_loop(fd);
    close(fd);
    unlink(path);
    return 0;
}

static void *spinner(void *arg) {
    (void)arg;
    kk_spin();
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: stackwork DIR SECONDS\n");
        return 2;
    }
    dir = argv[1];
    pthread_t t[5];
    void *(*fns[5])(void *) = {holder, waiter, sleeper, syncer, spinner};
    for (int i = 0; i < 5; i++) pthread_create(&t[i], 0, fns[i], 0);
    usleep((useconds_t)(atof(argv[2]) * 1e6));
    stop = 1;
    kk_release_mutex();
    for (int i = 0; i < 5; i++) pthread_join(t[i], 0);
    return 0;
}
