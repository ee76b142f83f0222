// std::mutex contention through libstdc++ and glibc, built -O2 -fomit-frame-pointer by
// tests/ebpf_stacks.rs: the waiter's lock_wait must be under kk_cxx_lock_caller (which
// std::mutex::lock, inlined, calls pthread_mutex_lock from).
//
//   cxxwork SECONDS
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

static std::mutex lock;
static std::atomic<bool> stop{false};
static volatile unsigned long sink;

__attribute__((noinline)) void kk_cxx_lock_caller() {
    lock.lock();
    sink++;
    lock.unlock();
}

__attribute__((noinline)) void kk_cxx_lock_holder() {
    std::lock_guard<std::mutex> held(lock);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
    std::thread holder([] {
        while (!stop) {
            kk_cxx_lock_holder();
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    });
    std::thread waiter([] {
        while (!stop) {
            kk_cxx_lock_caller();
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    });
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    holder.join();
    waiter.join();
    return 0;
}
