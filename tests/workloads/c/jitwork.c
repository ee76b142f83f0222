/* A JIT-style workload for the perf map tests (tests/ebpf_untrusted.rs): copies a
 * spin loop into an anonymous executable page, runs it on a thread, prints
 * "jit <pid> <hex address of the page>" and exits after SECONDS (argv[1]).
 *
 * With argv[2] and argv[3] it also plays the binary-swap attack: it waits for a line
 * on stdin (the trace is live) before it starts its threads, spins SECONDS, renames argv[3] over argv[2] (its own
 * binary) and only then exits. Built twice
 * with different -DSPIN names, so a frame named from the renamed file shows it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef SPIN
#define SPIN kk_spin_mapped
#endif

static void *jit(void *page) {
    ((void (*)(void))page)();
    return NULL;
}

/* Named code in the binary itself, for the swap test. */
__attribute__((noinline)) void SPIN(void) {
    for (volatile unsigned long i = 0;; i++) {
    }
}

static void *spin(void *unused) {
    (void)unused;
    SPIN();
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2;
#if defined(__x86_64__)
    unsigned char code[] = {0xeb, 0xfe}; /* jmp . */
#elif defined(__aarch64__)
    unsigned char code[] = {0x00, 0x00, 0x00, 0x14}; /* b . */
#else
#error "jitwork: no spin loop for this architecture"
#endif
    unsigned char *page =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memcpy(page, code, sizeof code);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) {
        perror("mprotect");
        return 1;
    }
    __builtin___clear_cache((char *)page, (char *)page + sizeof code);
    printf("jit %d %lx\n", getpid(), (unsigned long)page);
    fflush(stdout);
    if (argc > 3) {
        /* Nothing runs before the go: no stack of it exists until then. */
        char go[16];
        if (!fgets(go, sizeof go, stdin))
            return 1;
    }
    pthread_t t, u;
    pthread_create(&t, NULL, jit, page);
    pthread_create(&u, NULL, spin, NULL);
    usleep((useconds_t)(seconds * 1e6));
    if (argc > 3 && rename(argv[3], argv[2]) != 0) {
        perror("rename");
        return 1;
    }
    return 0;
}
