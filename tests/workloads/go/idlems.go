// A Go program with idle Ms (issue 22): a burst of goroutines blocked in syscalls
// makes the runtime start extra threads (Ms); two goroutines then contend for a
// sync.Mutex, so goroutines park through runtime.mcall; then one goroutine computes
// while the extra Ms park in runtime.stopm (a futex) until the program ends. Go
// 1.19's runtime, as Debian's golang-go builds it: frame pointers, no .eh_frame.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
)

//go:noinline
func holdLock(mu *sync.Mutex, n *int) {
	for k := 0; k < 300; k++ {
		mu.Lock()
		s := 0
		for x := 0; x < 100000; x++ {
			s += x
		}
		*n += s & 1
		mu.Unlock()
		time.Sleep(100 * time.Microsecond)
	}
}

//go:noinline
func compute(d time.Duration) int {
	s := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		for x := 0; x < 100000; x++ {
			s += x % 7
		}
	}
	return s
}

func main() {
	runtime.GOMAXPROCS(2)
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := syscall.Timespec{Nsec: 50_000_000}
			syscall.Nanosleep(&ts, nil)
		}()
	}
	wg.Wait()
	var mu sync.Mutex
	n := 0
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); holdLock(&mu, &n) }()
	}
	wg.Wait()
	seconds := 2.0
	if len(os.Args) > 1 {
		fmt.Sscan(os.Args[1], &seconds)
	}
	fmt.Println(n, compute(time.Duration(seconds*float64(time.Second))))
}
