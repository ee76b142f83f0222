/* A program that loads a library after it has started and then blocks in it (issue 16).
 * kernelkite reads a process's mappings when its first stack copy arrives; the library
 * mapped after that read must still be unwound through with its unwind information,
 * not by frame pointer (this file and the library are built without one).
 *
 * lateload LIBRARY: block 3 ms, then 40 ms (the mappings are read meanwhile), then
 * dlopen LIBRARY and call its kk_block_in_library(300). */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: lateload LIBRARY\n");
        return 2;
    }
    sleep_ms(3);
    sleep_ms(40);
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    void (*block)(long) = (void (*)(long))dlsym(lib, "kk_block_in_library");
    if (!block) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    block(300);
    return 0;
}
