//! One sample of the subtree: a [`Frame`] of raw cumulative counters.
//!
//! Cost matters (the sampler shares the machine with what it measures), so besides
//! keeping files open (see `files`), a thread that has not been scheduled since the
//! last tick is not asked again what it is blocked in, and a process none of whose
//! threads ran is not asked again for its io counters: both can only change when a
//! thread runs. "Did not run" is: the same sleeping state as before and an unchanged
//! schedstat (its timeslice count goes up every time the thread is put on a CPU).

use compact_str::ToCompactString;
use std::io;
use std::path::Path;

use super::files::{is_gone, KeptKey, ProcDir, TaskFile};
use super::parse::{self, StatFields};
use super::pidmap::PidMap;
use super::tree::{Scope, TreeWalker};
use crate::model::{
    CommandLine, Frame, InlineStr, IoCounters, ProcessIdentity, ProcessSample, Schedstat,
    ThreadExit, ThreadSample, MAX_ARGV_BYTES,
};

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
    /// What the previous sample read, by pid.
    prev: PidMap<i32, Prev>,
    next_prev: PidMap<i32, Prev>,
    /// Threads the caller knows did not run since the previous sample read them
    /// ([`Sampler::set_unchanged_threads`]), sorted; cleared by each sample.
    unchanged: Vec<i32>,
}

/// The previous sample of a process, for skipping reads that cannot have changed.
#[derive(Debug)]
struct Prev {
    start_time_ticks: u64,
    io: Option<IoCounters>,
    /// Sorted by tid.
    threads: Vec<PrevThread>,
}

#[derive(Clone, Debug)]
struct PrevThread {
    tid: i32,
    comm: InlineStr,
    state: char,
    schedstat: Option<Schedstat>,
    syscall_nr: Option<i64>,
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
            prev: PidMap::default(),
            next_prev: PidMap::default(),
            unchanged: Vec::new(),
        })
    }

    /// Threads (by tid) that did not run since the previous sample read them: the next
    /// sample repeats that reading instead of reading their stat, schedstat and syscall
    /// files again (none of them moves while a thread is off the CPU). The eBPF session
    /// knows them from its thread table (asleep since before that read); a thread the
    /// previous sample did not read is read as usual.
    pub fn set_unchanged_threads(&mut self, tids: impl IntoIterator<Item = i32>) {
        self.unchanged.clear();
        self.unchanged.extend(tids);
        self.unchanged.sort_unstable();
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
        for (ino, stat) in stats {
            if let Ok(p) = self.process(ino, stat) {
                processes.push(p);
            }
        }
        self.dir.end_tick();
        std::mem::swap(&mut self.prev, &mut self.next_prev);
        self.next_prev.clear();
        self.unchanged.clear();
        let network = if self.options.network {
            match self.dir.read(format_args!("net/dev"), &mut self.buf) {
                Ok(()) => parse::net_dev(&self.buf),
                Err(_) => None,
            }
        } else {
            None
        };
        // Host-wide steal, so a /proc session shows what the hypervisor took per frame.
        let host_steal_ticks = match self.dir.read(format_args!("stat"), &mut self.buf) {
            Ok(()) => parse::stat_steal_ticks(&self.buf),
            Err(_) => None,
        };
        Ok(Frame {
            t_ns,
            processes,
            network,
            host_steal_ticks,
        })
    }

    /// Thread `tid`'s final counters, read at its exit stop (it cannot run, or go away,
    /// until the tracer lets it): its process's stat and io, its own stat and schedstat,
    /// and from its status the process's peak RSS and its context switches. `None`
    /// when it could not be read.
    pub fn sample_exit(&mut self, tid: i32, t_ns: u64) -> Option<ThreadExit> {
        self.dir
            .read(format_args!("{tid}/status"), &mut self.buf)
            .ok()?;
        let status = parse::status(&self.buf);
        let pid = status.tgid?;
        self.dir
            .read(format_args!("{pid}/stat"), &mut self.buf)
            .ok()?;
        let stat = parse::stat(&self.buf)?;
        let io = match self.dir.read(format_args!("{pid}/io"), &mut self.buf) {
            Ok(()) => parse::io(&self.buf),
            Err(_) => None,
        };
        // A lone thread's stat is its process's (one read fewer per process).
        let (comm, state) = if tid == pid && stat.num_threads == 1 {
            (stat.comm.clone(), stat.state)
        } else {
            self.dir
                .read(format_args!("{pid}/task/{tid}/stat"), &mut self.buf)
                .ok()?;
            let tstat = parse::stat(&self.buf)?;
            (tstat.comm, tstat.state)
        };
        let schedstat =
            match (self.dir).read(format_args!("{pid}/task/{tid}/schedstat"), &mut self.buf) {
                Ok(()) => parse::schedstat(&self.buf),
                Err(_) => None,
            };
        let mut exit = exit_record(t_ns, tid, comm, state, schedstat, stat, io);
        exit.peak_rss_kib = status.peak_rss_kib;
        exit.voluntary_switches = status.voluntary_switches;
        exit.involuntary_switches = status.involuntary_switches;
        Some(exit)
    }

    /// Thread `tid` of process `pid` after its exit, before the tracer lets it go: its
    /// final schedstat and its process's stat, which now include its teardown. Its
    /// memory is gone: no peak RSS, and its io is left to the exit stop's read.
    pub fn sample_gone(&mut self, tid: i32, pid: i32, t_ns: u64) -> Option<ThreadExit> {
        self.dir
            .read(format_args!("{pid}/stat"), &mut self.buf)
            .ok()?;
        let stat = parse::stat(&self.buf)?;
        let (comm, state) = if tid == pid {
            (stat.comm.clone(), stat.state)
        } else {
            (self.dir)
                .read(format_args!("{pid}/task/{tid}/stat"), &mut self.buf)
                .ok()?;
            let tstat = parse::stat(&self.buf)?;
            (tstat.comm, tstat.state)
        };
        (self.dir)
            .read(format_args!("{pid}/task/{tid}/schedstat"), &mut self.buf)
            .ok()?;
        let schedstat = parse::schedstat(&self.buf);
        Some(exit_record(t_ns, tid, comm, state, schedstat, stat, None))
    }

    /// Process `pid`'s command line (at its exec stop), at most [`MAX_ARGV_BYTES`].
    pub fn command_line(&mut self, pid: i32, t_ns: u64) -> Option<CommandLine> {
        (self.dir)
            .read_at_most(format_args!("{pid}/cmdline"), &mut self.buf, MAX_ARGV_BYTES)
            .ok()?;
        CommandLine::from_nul_separated(t_ns, pid, &self.buf)
    }

    /// Process `pid`'s cgroup v2 path (and, with the v2 hierarchy's mount point, the
    /// cgroup's id: its directory's inode) and its namespace pids, with its parent's
    /// pid; `None` once it is gone. The path is the process's to choose below a
    /// delegated cgroup: bounded, and only ever looked up below `v2_mount`.
    pub fn identity(
        &mut self,
        pid: i32,
        t_ns: u64,
        v2_mount: Option<&Path>,
    ) -> Option<(ProcessIdentity, Option<i32>)> {
        (self.dir)
            .read_at_most(format_args!("{pid}/status"), &mut self.buf, 64 << 10)
            .ok()?;
        let ns_pids = parse::ns_pids(&self.buf);
        let ppid = parse::status(&self.buf).ppid;
        (self.dir)
            .read_at_most(format_args!("{pid}/cgroup"), &mut self.buf, 64 << 10)
            .ok()?;
        let cgroup =
            crate::model::cgroup_path::parse_proc_cgroup(&String::from_utf8_lossy(&self.buf));
        let cgroup_id = match (&cgroup, v2_mount) {
            (Some(c), Some(mount)) => cgroup_dir_id(mount, c),
            _ => None,
        };
        let identity = ProcessIdentity {
            t_ns,
            pid,
            cgroup,
            cgroup_id,
            ns_pids,
        };
        Some((identity, ppid))
    }

    fn process(&mut self, ino: u64, stat: StatFields) -> Result<ProcessSample, Vanished> {
        let pid = stat.pid;
        // The same pid with another start time is another process.
        let prev = self
            .prev
            .remove(&pid)
            .filter(|p| p.start_time_ticks == stat.start_time_ticks);
        let (threads, none_ran) = if self.options.threads {
            self.threads(ino, &stat, prev.as_ref())?
        } else {
            (Vec::new(), false)
        };
        let io_key = KeptKey::process(pid, TaskFile::Io);
        let io = match prev {
            Some(p) if none_ran => {
                self.dir.keep(io_key);
                p.io
            }
            // Unreadable io (another user's process) is None; a process that is gone was
            // caught by the thread reads above.
            _ => match self.dir.read_kept(io_key, ino, &mut self.buf) {
                Ok(()) => parse::io(&self.buf),
                Err(_) => None,
            },
        };
        self.next_prev.insert(
            pid,
            Prev {
                start_time_ticks: stat.start_time_ticks,
                io,
                threads: threads
                    .iter()
                    .map(|t| PrevThread {
                        tid: t.tid,
                        comm: t.comm.clone(),
                        state: t.state.chars().next().unwrap_or('?'),
                        schedstat: t.schedstat,
                        syscall_nr: t.syscall_nr,
                    })
                    .collect(),
            },
        );
        Ok(process_sample(stat, io, threads))
    }

    /// The process's threads, sorted by tid, and whether none of them ran since the
    /// previous sample (the same threads, none scheduled).
    fn threads(
        &mut self,
        ino: u64,
        stat: &StatFields,
        prev: Option<&Prev>,
    ) -> Result<(Vec<ThreadSample>, bool), Vanished> {
        let pid = stat.pid;
        let prev_threads = prev.map_or(&[][..], |p| &p.threads[..]);
        // A single live thread is the leader, and task/<pid>/stat would repeat the
        // process's comm and state (both files print the same task fields): skip the
        // task directory listing and that read. A zombie leader may hide a live thread.
        if stat.num_threads == 1 && stat.state != 'Z' {
            let before = find_thread(prev_threads, pid);
            let (thread, ran) = match self.unchanged_thread(pid, pid, before) {
                Some(thread) => (thread, false),
                None => self.thread_files(ino, pid, pid, stat.comm.clone(), stat.state, before)?,
            };
            let none_ran = !ran && prev_threads.len() == 1;
            return Ok((vec![thread], none_ran));
        }
        match self
            .dir
            .list_numeric(format_args!("{pid}/task"), &mut self.tids)
        {
            Ok(()) => {}
            Err(e) if is_gone(&e) => return Err(Vanished),
            Err(_) => return Ok((Vec::new(), false)),
        }
        let mut tids = std::mem::take(&mut self.tids);
        tids.sort_unstable();
        let mut threads = Vec::with_capacity(tids.len());
        let mut any_ran = false;
        for &(tid, _) in &tids {
            let before = find_thread(prev_threads, tid);
            if let Some(thread) = self.unchanged_thread(pid, tid, before) {
                threads.push(thread);
                continue;
            }
            // /proc/<pid>/task/<tid>/stat field 2 is the same thread name as .../comm.
            let key = KeptKey::thread(pid, tid, TaskFile::TaskStat);
            if self.dir.read_kept(key, ino, &mut self.buf).is_err() {
                continue;
            }
            let Some(tstat) = parse::stat(&self.buf) else {
                continue;
            };
            if let Ok((t, ran)) = self.thread_files(ino, pid, tid, tstat.comm, tstat.state, before)
            {
                any_ran |= ran;
                threads.push(t);
            }
        }
        self.tids = tids;
        if threads.is_empty() && !self.dir.dir_exists(format_args!("{pid}/task")) {
            return Err(Vanished);
        }
        let same_threads = threads.len() == prev_threads.len()
            && threads
                .iter()
                .zip(prev_threads)
                .all(|(a, b)| a.tid == b.tid);
        Ok((threads, same_threads && !any_ran))
    }

    /// Thread `tid`'s previous reading (`before`) again, when the caller said it did not
    /// run since ([`Sampler::set_unchanged_threads`]); its files stay open.
    fn unchanged_thread(
        &mut self,
        pid: i32,
        tid: i32,
        before: Option<&PrevThread>,
    ) -> Option<ThreadSample> {
        // The previous reading must have found it off the CPU too (a thread found asleep
        // at attach but running since is not taken for one that stayed asleep).
        let before = before.filter(|b| b.state != 'R')?;
        self.unchanged.binary_search(&tid).ok()?;
        for file in [TaskFile::TaskStat, TaskFile::Schedstat, TaskFile::Syscall] {
            self.dir.keep(KeptKey::thread(pid, tid, file));
        }
        Some(ThreadSample {
            tid,
            comm: before.comm.clone(),
            state: before.state.to_compact_string(),
            schedstat: before.schedstat,
            syscall_nr: before.syscall_nr,
            class_ns: None,
        })
    }

    /// One thread's schedstat and blocked syscall, and whether it may have run since
    /// `before` (its previous sample).
    fn thread_files(
        &mut self,
        ino: u64,
        pid: i32,
        tid: i32,
        comm: String,
        state: char,
        before: Option<&PrevThread>,
    ) -> Result<(ThreadSample, bool), Vanished> {
        let key = KeptKey::thread(pid, tid, TaskFile::Schedstat);
        // The walk already read the leader's schedstat this tick.
        let walked = if tid == pid {
            self.walker.leader_schedstat(pid)
        } else {
            None
        };
        let read = match walked {
            Some(bytes) => {
                self.buf.clear();
                self.buf.extend_from_slice(bytes);
                Ok(())
            }
            None => self.dir.read_kept(key, ino, &mut self.buf),
        };
        let schedstat = match read {
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
        let idle = before.is_some_and(|b| {
            matches!(state, 'S' | 'D' | 'T' | 't' | 'I')
                && b.state == state
                && schedstat.is_some()
                && b.schedstat == schedstat
        });
        let syscall_key = KeptKey::thread(pid, tid, TaskFile::Syscall);
        let syscall_nr = if idle {
            self.dir.keep(syscall_key);
            before.and_then(|b| b.syscall_nr)
        } else if state == 'R' {
            // A running thread's syscall file says "running": don't pay for reading it.
            None
        } else {
            match self.dir.read_kept(syscall_key, ino, &mut self.buf) {
                Ok(()) => parse::syscall_nr(&self.buf),
                Err(_) => None,
            }
        };
        let thread = ThreadSample {
            tid,
            comm: comm.into(),
            state: state.to_compact_string(),
            schedstat,
            syscall_nr,
            class_ns: None,
        };
        Ok((thread, !idle))
    }
}

/// A [`ThreadExit`] of thread `tid` (its name, state and schedstat) in the process
/// `stat` describes; the status fields are left for the caller.
fn exit_record(
    t_ns: u64,
    tid: i32,
    comm: String,
    state: char,
    schedstat: Option<Schedstat>,
    stat: StatFields,
    io: Option<IoCounters>,
) -> ThreadExit {
    let thread = ThreadSample {
        tid,
        comm: comm.into(),
        state: state.to_compact_string(),
        schedstat,
        syscall_nr: None,
        class_ns: None,
    };
    ThreadExit {
        t_ns,
        process: process_sample(stat, io, vec![thread]),
        peak_rss_kib: None,
        voluntary_switches: None,
        involuntary_switches: None,
    }
}

/// A process row from its stat, io and threads.
fn process_sample(
    stat: StatFields,
    io: Option<IoCounters>,
    threads: Vec<ThreadSample>,
) -> ProcessSample {
    ProcessSample {
        pid: stat.pid,
        ppid: stat.ppid,
        state: stat.state.to_compact_string(),
        start_time_ticks: stat.start_time_ticks,
        utime_ticks: stat.utime_ticks,
        stime_ticks: stat.stime_ticks,
        cutime_ticks: stat.cutime_ticks,
        cstime_ticks: stat.cstime_ticks,
        rss_pages: stat.rss_pages,
        num_threads: stat.num_threads,
        io,
        threads,
        comm: stat.comm.into(),
    }
}

fn find_thread(threads: &[PrevThread], tid: i32) -> Option<&PrevThread> {
    threads
        .binary_search_by_key(&tid, |t| t.tid)
        .ok()
        .map(|i| &threads[i])
}

/// The id of the cgroup at `path` (from the hierarchy's root) below `v2_mount`: its
/// directory's inode, which is the kernel's cgroup id on cgroup2. Components that could
/// leave the mount (`..`, empty) are refused; cgroupfs has no symlinks.
fn cgroup_dir_id(v2_mount: &Path, path: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dir = crate::source::cgroups::below(v2_mount, path)?;
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    meta.is_dir().then(|| meta.ino())
}
