//! The start gate: lets a tracer attach (by pid) before the measured part begins.
//!
//! Protocol, shared by every workload:
//! - `--wait-stdin`: after the setup (threads spawned, files opened, sockets bound), print
//!   `ready <pid>` on stdout, then block until stdin has a line (or is closed), then run.
//! - `--start-delay-ms N`: print `ready <pid>`, sleep N ms, then run. Combinable with
//!   `--wait-stdin` (the delay comes first).
//! - `--spin-wait` (with `--wait-stdin`): wait for the line without blocking, polling
//!   stdin with a zero timeout in a loop, so the process stays on its CPU through a
//!   tracer's attach and leaves it only when preempted.
//!
//! Without either option nothing is printed and the workload starts at once. The final
//! JSON result is always the last line on stdout.
//!
//! The wait does not use `read(2)`: it `poll(2)`s stdin and consumes the line with
//! `readv(2)`. A tracer that attaches while the workload is blocked would otherwise see
//! one extra `read` returning after it attached, and `read_loop` promises an exact count.

use std::io::Write as _;

use crate::args::Args;

pub struct Start {
    wait_stdin: bool,
    spin_wait: bool,
    delay_ms: u64,
}

impl Start {
    pub fn from_args(args: &mut Args) -> Result<Start, crate::args::UsageError> {
        Ok(Start {
            wait_stdin: args.flag("wait-stdin")?,
            spin_wait: args.flag("spin-wait")?,
            delay_ms: args.u64("start-delay-ms", 0)?,
        })
    }

    /// Block until the measured part may begin (see the module docs).
    pub fn wait(&self) -> Result<(), String> {
        if !self.wait_stdin && self.delay_ms == 0 {
            return Ok(());
        }
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "ready {}", std::process::id()).map_err(|e| e.to_string())?;
            out.flush().map_err(|e| e.to_string())?;
        }
        if self.delay_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(self.delay_ms));
        }
        if self.wait_stdin {
            wait_for_stdin_line(if self.spin_wait { 0 } else { -1 })?;
        }
        Ok(())
    }
}

/// Wait until stdin has a line (consumed) or is closed, polling with `timeout_ms` (-1:
/// block; 0: spin).
pub fn wait_for_stdin_line(timeout_ms: i32) -> Result<(), String> {
    loop {
        let mut pfd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("waiting on stdin: {err}"));
        }
        if pfd.revents & libc::POLLNVAL != 0 {
            return Err("--wait-stdin: stdin is closed".into());
        }
        if pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            break;
        }
    }
    // Consume what is there (the "go" line) so it is not left for a child to read.
    let mut buf = [0u8; 256];
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec pointing at a live local buffer.
    unsafe { libc::readv(0, &iov, 1) };
    Ok(())
}
