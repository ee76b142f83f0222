//! Test support: a fake /proc tree on disk with realistic file contents, for pointing a
//! [`Sampler`](super::Sampler) at processes whose every counter is known.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::model::{IoCounters, Schedstat};

/// PF_KTHREAD in the stat flags field.
pub const PF_KTHREAD: u32 = 0x0020_0000;

/// One fake process and its threads.
#[derive(Clone, Debug)]
pub struct FakeProcess {
    pub pid: i32,
    pub ppid: i32,
    pub comm: String,
    pub state: char,
    /// stat field 9.
    pub flags: u32,
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub cutime_ticks: u64,
    pub cstime_ticks: u64,
    pub start_time_ticks: u64,
    pub rss_pages: u64,
    /// `None`: an `io` the sampler cannot read (a directory in its place, because tests
    /// may run as root, for whom permission bits do not deny reads).
    pub io: Option<IoCounters>,
    /// num_threads in stat is the length of this list.
    pub threads: Vec<FakeThread>,
}

/// One fake thread under /proc/<pid>/task/<tid>.
#[derive(Clone, Debug)]
pub struct FakeThread {
    pub tid: i32,
    pub comm: String,
    pub state: char,
    pub schedstat: Option<Schedstat>,
    /// Contents of the `syscall` file, e.g. "7 0x1 0x2 0x3 0x0 0x0 0x0 0x7ffd 0x7f00" or
    /// "running"; `None`: no such file.
    pub syscall: Option<String>,
}

impl FakeProcess {
    /// A sleeping single-threaded process with small, distinct counters.
    pub fn new(pid: i32, ppid: i32, comm: &str) -> FakeProcess {
        FakeProcess {
            pid,
            ppid,
            comm: comm.to_string(),
            state: 'S',
            flags: 0x0040_0000,
            utime_ticks: 10 + pid as u64,
            stime_ticks: 5,
            cutime_ticks: 0,
            cstime_ticks: 0,
            start_time_ticks: 1000 + pid as u64,
            rss_pages: 256,
            io: Some(IoCounters {
                rchar_bytes: 4096,
                wchar_bytes: 512,
                read_syscalls: 7,
                write_syscalls: 3,
                read_bytes: 0,
                write_bytes: 8192,
                cancelled_write_bytes: 0,
            }),
            threads: vec![FakeThread::new(pid, comm)],
        }
    }
}

impl FakeThread {
    /// A thread sleeping in read(2) (syscall 0 on x86_64).
    pub fn new(tid: i32, comm: &str) -> FakeThread {
        FakeThread {
            tid,
            comm: comm.to_string(),
            state: 'S',
            schedstat: Some(Schedstat {
                on_cpu_ns: 1_000_000 + tid as u64,
                runqueue_ns: 20_000,
                timeslices: 12,
            }),
            syscall: Some("0 0x3 0x7ffd5f0 0x1000 0x0 0x0 0x0 0x7ffd5e8 0x7f3a1b2".to_string()),
        }
    }
}

/// A fake procfs root.
#[derive(Debug)]
pub struct FakeProc {
    root: PathBuf,
}

impl FakeProc {
    /// Use (and create) `root` as the fake /proc.
    pub fn new(root: &Path) -> io::Result<FakeProc> {
        fs::create_dir_all(root)?;
        Ok(FakeProc {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Write a process, or update it. Like real procfs, the same process (same pid and
    /// start time) keeps its files, so a sampler's open files see the new contents; a
    /// new process with a used pid (pid reuse) gets a new directory, built beside the
    /// tree and renamed into place.
    pub fn add(&self, p: &FakeProcess) -> io::Result<()> {
        let dest = self.root.join(p.pid.to_string());
        if start_time_of(&dest) == Some(p.start_time_ticks) {
            return write_process(&dest, p);
        }
        let staging = self.root.join(format!(".staging-{}", p.pid));
        let _ = fs::remove_dir_all(&staging);
        write_process(&staging, p)?;
        let old = self.root.join(format!(".old-{}", p.pid));
        if dest.exists() {
            fs::rename(&dest, &old)?;
        }
        fs::rename(&staging, &dest)?;
        let _ = fs::remove_dir_all(&old);
        Ok(())
    }

    /// Remove a process entirely (it exited and was reaped).
    pub fn remove(&self, pid: i32) -> io::Result<()> {
        // A dead process's files cannot be read any more, even through descriptors
        // kept open (the kernel answers ESRCH); emptying them before unlinking is the
        // closest a plain directory gets.
        fn empty_files(dir: &Path) -> io::Result<()> {
            for entry in fs::read_dir(dir)? {
                let path = entry?.path();
                if path.is_dir() {
                    empty_files(&path)?;
                } else {
                    fs::File::create(&path)?;
                }
            }
            Ok(())
        }
        let dir = self.root.join(pid.to_string());
        empty_files(&dir)?;
        fs::remove_dir_all(dir)
    }

    /// Remove one file or directory below /proc/<pid>, e.g. "task" or "stat".
    pub fn remove_part(&self, pid: i32, rel: &str) -> io::Result<()> {
        let path = self.root.join(pid.to_string()).join(rel);
        if path.is_dir() {
            fs::remove_dir_all(path)
        } else {
            fs::remove_file(path)
        }
    }

    /// Write /proc/loadavg naming `latest_pid` as the most recently allocated pid. Without
    /// this file the sampler lists the tree on every tick; with it, only when the pid
    /// changes (so a test must bump it to make a new process visible). Note that a
    /// removed process stays readable through the sampler's open files until the next
    /// listing, unlike in real procfs, where those reads fail with ESRCH.
    pub fn set_loadavg(&self, latest_pid: u32) -> io::Result<()> {
        fs::write(
            self.root.join("loadavg"),
            format!("0.52 0.58 0.59 2/213 {latest_pid}\n"),
        )
    }

    /// Write /proc/net/dev with (interface, rx_bytes, rx_packets, tx_bytes, tx_packets).
    pub fn set_net_dev(&self, rows: &[(&str, u64, u64, u64, u64)]) -> io::Result<()> {
        let mut text = String::from(
            "Inter-|   Receive                                                |  Transmit\n \
             face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n",
        );
        for (name, rxb, rxp, txb, txp) in rows {
            text.push_str(&format!(
                "{name:>6}: {rxb:>8} {rxp:>7}    0    0    0     0          0         0 {txb:>8} {txp:>7}    0    0    0     0       0          0\n"
            ));
        }
        fs::create_dir_all(self.root.join("net"))?;
        fs::write(self.root.join("net").join("dev"), text)
    }
}

/// Write a process's files into `dir` (existing files are overwritten in place).
fn write_process(dir: &Path, p: &FakeProcess) -> io::Result<()> {
    fs::create_dir_all(dir.join("task"))?;
    let num_threads = p.threads.len().max(1) as u64;
    fs::write(
        dir.join("stat"),
        stat_line(p.pid, &p.comm, p.state, p.ppid, p.flags, p, num_threads),
    )?;
    let io_path = dir.join("io");
    match &p.io {
        Some(io) => {
            if io_path.is_dir() {
                fs::remove_dir(&io_path)?;
            }
            fs::write(&io_path, io_text(io))?
        }
        None => {
            if io_path.is_file() {
                fs::remove_file(&io_path)?;
            }
            fs::create_dir_all(&io_path)?
        }
    }
    fs::write(dir.join("comm"), format!("{}\n", p.comm))?;
    // Threads that exited.
    for entry in fs::read_dir(dir.join("task"))? {
        let entry = entry?;
        let keep = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
            .is_some_and(|tid| p.threads.iter().any(|t| t.tid == tid));
        if !keep {
            fs::remove_dir_all(entry.path())?;
        }
    }
    for t in &p.threads {
        let tdir = dir.join("task").join(t.tid.to_string());
        fs::create_dir_all(&tdir)?;
        fs::write(
            tdir.join("stat"),
            stat_line(t.tid, &t.comm, t.state, p.ppid, p.flags, p, num_threads),
        )?;
        fs::write(tdir.join("comm"), format!("{}\n", t.comm))?;
        write_or_remove(
            &tdir.join("schedstat"),
            t.schedstat
                .map(|s| format!("{} {} {}\n", s.on_cpu_ns, s.runqueue_ns, s.timeslices)),
        )?;
        write_or_remove(
            &tdir.join("syscall"),
            t.syscall.as_ref().map(|sc| format!("{sc}\n")),
        )?;
    }
    Ok(())
}

fn write_or_remove(path: &Path, contents: Option<String>) -> io::Result<()> {
    match contents {
        Some(text) => fs::write(path, text),
        None if path.exists() => fs::remove_file(path),
        None => Ok(()),
    }
}

/// Field 22 of an existing fake stat, if there is one.
fn start_time_of(dir: &Path) -> Option<u64> {
    let stat = fs::read_to_string(dir.join("stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 2..];
    // Fields from 3 (state) on; starttime is field 22.
    after_comm.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// A /proc/<pid>/stat line with all 52 fields, as Linux 6.x prints it.
fn stat_line(
    id: i32,
    comm: &str,
    state: char,
    ppid: i32,
    flags: u32,
    p: &FakeProcess,
    num_threads: u64,
) -> String {
    let fields: Vec<String> = vec![
        ppid.to_string(),               // 4 ppid
        p.pid.to_string(),              // 5 pgrp
        p.pid.to_string(),              // 6 session
        "34816".into(),                 // 7 tty_nr
        p.pid.to_string(),              // 8 tpgid
        flags.to_string(),              // 9 flags
        "1200".into(),                  // 10 minflt
        "3400".into(),                  // 11 cminflt
        "0".into(),                     // 12 majflt
        "5".into(),                     // 13 cmajflt
        p.utime_ticks.to_string(),      // 14 utime
        p.stime_ticks.to_string(),      // 15 stime
        p.cutime_ticks.to_string(),     // 16 cutime
        p.cstime_ticks.to_string(),     // 17 cstime
        "20".into(),                    // 18 priority
        "0".into(),                     // 19 nice
        num_threads.to_string(),        // 20 num_threads
        "0".into(),                     // 21 itrealvalue
        p.start_time_ticks.to_string(), // 22 starttime
        "9453568".into(),               // 23 vsize
        p.rss_pages.to_string(),        // 24 rss
        "18446744073709551615".into(),  // 25 rsslim
        "94251430000640".into(),        // 26 startcode
        "94251430912465".into(),        // 27 endcode
        "140726349413632".into(),       // 28 startstack
        "0".into(),                     // 29 kstkesp
        "0".into(),                     // 30 kstkeip
        "0".into(),                     // 31 signal
        "65536".into(),                 // 32 blocked
        "3670020".into(),               // 33 sigignore
        "1266777851".into(),            // 34 sigcatch
        "1".into(),                     // 35 wchan
        "0".into(),                     // 36 nswap
        "0".into(),                     // 37 cnswap
        "17".into(),                    // 38 exit_signal
        "1".into(),                     // 39 processor
        "0".into(),                     // 40 rt_priority
        "0".into(),                     // 41 policy
        "0".into(),                     // 42 delayacct_blkio_ticks
        "0".into(),                     // 43 guest_time
        "0".into(),                     // 44 cguest_time
        "94251431000000".into(),        // 45 start_data
        "94251431050000".into(),        // 46 end_data
        "94251460000000".into(),        // 47 start_brk
        "140726349418000".into(),       // 48 arg_start
        "140726349418020".into(),       // 49 arg_end
        "140726349418020".into(),       // 50 env_start
        "140726349422000".into(),       // 51 env_end
        "0".into(),                     // 52 exit_code
    ];
    format!("{id} ({comm}) {state} {}\n", fields.join(" "))
}

fn io_text(io: &IoCounters) -> String {
    format!(
        "rchar: {}\nwchar: {}\nsyscr: {}\nsyscw: {}\nread_bytes: {}\nwrite_bytes: {}\ncancelled_write_bytes: {}\n",
        io.rchar_bytes,
        io.wchar_bytes,
        io.read_syscalls,
        io.write_syscalls,
        io.read_bytes,
        io.write_bytes,
        io.cancelled_write_bytes
    )
}
