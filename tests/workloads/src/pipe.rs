//! pipe_pingpong: two threads pass one byte back and forth over two pipes
//! `--count N` times (default 100,000). Every round trip is two wake-ups, so this is
//! context-switch heavy: each thread mostly blocks in `read` (syscall_blocked).
//! With `--processes` the responder is a forked child process instead of a thread.
//! Exact counts: 2N `read`s and 2N `write`s in total (N of each per side).

use std::time::Instant;

use crate::args::Args;
use crate::report::Report;

fn pipe() -> Result<[libc::c_int; 2], String> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(crate::os_err("pipe2"));
    }
    Ok(fds)
}

fn read1(fd: libc::c_int) -> Result<(), String> {
    let mut b = 0u8;
    // SAFETY: reads one byte into a live local.
    if unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) } != 1 {
        return Err(crate::os_err("read"));
    }
    Ok(())
}

fn write1(fd: libc::c_int) -> Result<(), String> {
    // SAFETY: writes one byte from a live local.
    if unsafe { libc::write(fd, [7u8].as_ptr().cast(), 1) } != 1 {
        return Err(crate::os_err("write"));
    }
    Ok(())
}

pub fn run(args: &mut Args) -> Result<(), crate::Fail> {
    let count = args.u64("count", 100_000)?;
    let processes = args.flag("processes")?;
    let start = crate::gate(args)?;

    let [ping_r, ping_w] = pipe()?;
    let [pong_r, pong_w] = pipe()?;
    let respond = move || -> Result<(), String> {
        for _ in 0..count {
            read1(ping_r)?;
            write1(pong_w)?;
        }
        Ok(())
    };
    let responder = if processes {
        // Forked before the gate, while this process has a single thread.
        // SAFETY: single-threaded here; the child only makes raw syscalls and _exits.
        match unsafe { libc::fork() } {
            -1 => return Err(crate::os_err("fork").into()),
            0 => {
                let code = if respond().is_ok() { 0 } else { 1 };
                // SAFETY: leave the child without running the parent's exit handlers.
                unsafe { libc::_exit(code) }
            }
            pid => Responder::Process(pid),
        }
    } else {
        Responder::Thread(
            std::thread::Builder::new()
                .name("pong".into())
                .spawn(respond)
                .map_err(|e| format!("spawning thread: {e}"))?,
        )
    };

    start.wait()?;
    let t0 = Instant::now();
    for _ in 0..count {
        write1(ping_w)?;
        read1(pong_r)?;
    }
    let elapsed = crate::elapsed_ns(t0);
    responder.join()?;
    for fd in [ping_r, ping_w, pong_r, pong_w] {
        // SAFETY: each descriptor is open and unused from here on.
        unsafe { libc::close(fd) };
    }

    Report::new("pipe_pingpong")
        .u64("round_trips", count)
        .bool("processes", processes)
        .u64("reads", 2 * count)
        .u64("writes", 2 * count)
        .u64("elapsed_ns", elapsed)
        .f64("ns_per_round_trip", elapsed as f64 / count.max(1) as f64)
        .print();
    Ok(())
}

enum Responder {
    Thread(std::thread::JoinHandle<Result<(), String>>),
    Process(libc::pid_t),
}

impl Responder {
    fn join(self) -> Result<(), String> {
        match self {
            Responder::Thread(h) => h.join().map_err(|_| "responder panicked".to_string())?,
            Responder::Process(pid) => {
                let mut status = 0;
                // SAFETY: pid is our child; status is a valid out-pointer.
                if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
                    return Err(crate::os_err("waitpid"));
                }
                if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                    Ok(())
                } else {
                    Err(format!("responder process failed (wait status {status})"))
                }
            }
        }
    }
}
