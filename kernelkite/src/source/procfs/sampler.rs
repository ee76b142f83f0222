//! One sample of the subtree: a [`Frame`] of raw cumulative counters.

use std::io;
use std::path::Path;

use procfs::process::Stat;

use super::files::{is_gone, ProcDir};
use super::parse;
use super::tree::{Scope, TreeWalker};
use crate::model::{Frame, ProcessSample, ThreadSample};

/// What a sample records besides /proc/<pid>/{stat,io}.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplerOptions {
    /// Per-thread samples (state, schedstat, blocked syscall).
    pub threads: bool,
    /// Host-wide /proc/net/dev (`--network`).
    pub network: bool,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            threads: true,
            network: false,
        }
    }
}

/// Samples a process tree from a procfs root. Buffers are reused across samples.
#[derive(Debug)]
pub struct Sampler {
    dir: ProcDir,
    options: SamplerOptions,
    walker: TreeWalker,
    buf: Vec<u8>,
    tids: Vec<(i32, u64)>,
}

/// The process or thread disappeared while it was being read.
struct Vanished;

impl Sampler {
    /// A sampler reading the procfs mounted (or built, in tests) at `proc_root`.
    pub fn new(proc_root: &Path, options: SamplerOptions) -> io::Result<Sampler> {
        Ok(Sampler {
            dir: ProcDir::open(proc_root)?,
            options,
            walker: TreeWalker::default(),
            buf: Vec::with_capacity(4096),
            tids: Vec::new(),
        })
    }

    /// The procfs root this sampler reads.
    pub fn proc_root(&self) -> &Path {
        self.dir.path()
    }

    /// Sample every process in `scope` now, stamping the frame with `t_ns`. Processes that
    /// exit while being read are left out; only an unreadable procfs root is an error.
    pub fn sample(&mut self, scope: Scope<'_>, t_ns: u64) -> io::Result<Frame> {
        let stats = self.walker.walk(&mut self.dir, scope)?;
        let mut processes = Vec::with_capacity(stats.len());
        for stat in stats {
            if let Ok(p) = self.process(stat) {
                processes.push(p);
            }
        }
        let network = if self.options.network {
            match self.dir.read(format_args!("net/dev"), &mut self.buf) {
                Ok(()) => parse::net_dev(&self.buf),
                Err(_) => None,
            }
        } else {
            None
        };
        Ok(Frame {
            t_ns,
            processes,
            network,
        })
    }

    fn process(&mut self, stat: Stat) -> Result<ProcessSample, Vanished> {
        let pid = stat.pid;
        // Unreadable io (another user's process) is recorded as None; a process that is
        // gone is caught by the thread reads below.
        let io = match self.dir.read(format_args!("{pid}/io"), &mut self.buf) {
            Ok(()) => parse::io(&self.buf),
            Err(_) => None,
        };
        let threads = if self.options.threads {
            self.threads(&stat)?
        } else {
            Vec::new()
        };
        Ok(ProcessSample {
            pid,
            ppid: stat.ppid,
            state: stat.state.to_string(),
            start_time_ticks: stat.starttime,
            utime_ticks: stat.utime,
            stime_ticks: stat.stime,
            cutime_ticks: parse::non_negative(stat.cutime),
            cstime_ticks: parse::non_negative(stat.cstime),
            rss_pages: stat.rss,
            num_threads: parse::non_negative(stat.num_threads),
            io,
            threads,
            comm: stat.comm,
        })
    }

    fn threads(&mut self, stat: &Stat) -> Result<Vec<ThreadSample>, Vanished> {
        let pid = stat.pid;
        // A single live thread is the leader, and task/<pid>/stat would repeat the
        // process's comm and state (both files print the same task fields): skip the
        // task directory listing and that read. A zombie leader may hide a live thread.
        if stat.num_threads == 1 && stat.state != 'Z' {
            let thread = self.thread_files(pid, pid, stat.comm.clone(), stat.state)?;
            return Ok(vec![thread]);
        }
        match self
            .dir
            .list_numeric(format_args!("{pid}/task"), &mut self.tids)
        {
            Ok(()) => {}
            Err(e) if is_gone(&e) => return Err(Vanished),
            Err(_) => return Ok(Vec::new()),
        }
        let mut tids = std::mem::take(&mut self.tids);
        tids.sort_unstable();
        let mut threads = Vec::with_capacity(tids.len());
        for &(tid, _) in &tids {
            // /proc/<pid>/task/<tid>/stat field 2 is the same thread name as .../comm.
            if self
                .dir
                .read(format_args!("{pid}/task/{tid}/stat"), &mut self.buf)
                .is_err()
            {
                continue;
            }
            let Some(tstat) = parse::stat(&self.buf) else {
                continue;
            };
            if let Ok(t) = self.thread_files(pid, tid, tstat.comm, tstat.state) {
                threads.push(t);
            }
        }
        self.tids = tids;
        if threads.is_empty() && !self.dir.dir_exists(format_args!("{pid}/task")) {
            return Err(Vanished);
        }
        Ok(threads)
    }

    fn thread_files(
        &mut self,
        pid: i32,
        tid: i32,
        comm: String,
        state: char,
    ) -> Result<ThreadSample, Vanished> {
        let schedstat = match self
            .dir
            .read(format_args!("{pid}/task/{tid}/schedstat"), &mut self.buf)
        {
            Ok(()) => parse::schedstat(&self.buf),
            // No schedstat file (no CONFIG_SCHED_INFO) or no thread any more: tell apart.
            Err(e) if is_gone(&e) => {
                if !self.dir.dir_exists(format_args!("{pid}/task/{tid}")) {
                    return Err(Vanished);
                }
                None
            }
            Err(_) => None,
        };
        // A running thread's syscall file says "running": don't pay for reading it.
        let syscall_nr = if state == 'R' {
            None
        } else {
            match self
                .dir
                .read(format_args!("{pid}/task/{tid}/syscall"), &mut self.buf)
            {
                Ok(()) => parse::syscall_nr(&self.buf),
                Err(_) => None,
            }
        };
        Ok(ThreadSample {
            tid,
            comm,
            state: state.to_string(),
            schedstat,
            syscall_nr,
            class_ns: None,
        })
    }
}
