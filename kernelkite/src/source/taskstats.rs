//! The kernel's per-task exit statistics (taskstats, over generic netlink), for one
//! figure rusage cannot give: the peak RSS of `run`'s command itself.
//!
//! `wait4`'s `ru_maxrss` of the command's process is the larger of the program's peak and
//! that of kernelkite's copy of itself which exec'd it (exec_mmap keeps the old mm's
//! high-water mark in `signal->maxrss`). taskstats' `hiwater_rss` is read from the
//! exiting task's own mm (`xacct_add_tsk`, before `exit_mm`): after the exec, that is the
//! program's alone. A listener registered for every CPU gets one message per exiting task
//! of the machine; this one keeps each process's largest, from the command's start on.
//! Registering needs CAP_NET_ADMIN; without it (or without CONFIG_TASKSTATS) there is no
//! listener and `run` says the figure is a bound, as before.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const NETLINK_GENERIC: libc::c_int = 16;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const TASKSTATS_CMD_GET: u8 = 1;
const TASKSTATS_CMD_NEW: u8 = 2;
const TASKSTATS_GENL_VERSION: u8 = 1;
const TASKSTATS_CMD_ATTR_REGISTER_CPUMASK: u16 = 3;
const TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK: u16 = 4;
const TASKSTATS_TYPE_PID: u16 = 1;
const TASKSTATS_TYPE_STATS: u16 = 3;
const TASKSTATS_TYPE_AGGR_PID: u16 = 4;
/// Offsets in `struct taskstats` (include/uapi/linux/taskstats.h; the struct only grows
/// at its end, each version keeping every earlier field where it was).
const STATS_HIWATER_RSS_KIB: usize = 200;
const STATS_AC_TGID: usize = 368;

/// A registered taskstats listener, read on a thread of its own until dropped.
pub struct ExitWatch {
    shared: Arc<Shared>,
    reader: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

struct Shared {
    /// From the first watched process on, every exit is kept: the tree's processes are
    /// known only at the end (a descendant reaped by its own parent is never ours).
    watching: AtomicBool,
    /// The largest `hiwater_rss` (KiB) of each process's exits so far.
    peaks_kib: std::sync::Mutex<std::collections::HashMap<u32, u64>>,
    /// Messages the socket dropped (ENOBUFS), or processes past the map's bound: a
    /// peak of ours may be among them.
    overruns: AtomicU64,
    stop: AtomicBool,
}

/// Processes whose peaks are kept: past it, the figures are not known to be whole.
const PEAKS_KEPT: usize = 1 << 16;

impl ExitWatch {
    /// Register for every CPU's task exits. Fails without CAP_NET_ADMIN or taskstats.
    pub fn register() -> io::Result<ExitWatch> {
        let cpus = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
        let cpus = cpus.trim().to_owned();
        let socket = Socket::open()?;
        let family = socket.family_id("TASKSTATS")?;
        socket.send_cpumask(family, TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, &cpus)?;
        let shared = Arc::new(Shared {
            watching: AtomicBool::new(false),
            peaks_kib: Default::default(),
            overruns: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let reader = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("kk-taskstats".into())
                .spawn(move || {
                    socket.read_exits(family, &shared);
                    let _ =
                        socket.send_cpumask(family, TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK, &cpus);
                })?
        };
        Ok(ExitWatch {
            shared,
            reader: std::sync::Mutex::new(Some(reader)),
        })
    }

    /// Keep exits from now on (the command's process exists, held at its gate).
    pub fn watch(&self) {
        self.shared.watching.store(true, Ordering::Relaxed);
    }

    /// The largest peak RSS in KiB, each as its process's own address space held it, of
    /// the processes `pids` once they all exited. Call after they were reaped: the
    /// kernel queues the message before a task becomes a zombie, and this stops the
    /// listener once it has read what is queued. None when an exit of one of them did
    /// not arrive, or the socket dropped any message.
    pub fn largest_peak_kib(&self, pids: impl IntoIterator<Item = u32>) -> Option<u64> {
        self.finish();
        if self.shared.overruns.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let peaks = self
            .shared
            .peaks_kib
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut largest = None;
        for pid in pids {
            let kib = *peaks.get(&pid)?;
            largest = Some(largest.map_or(kib, |l: u64| l.max(kib)));
        }
        largest
    }

    fn finish(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let reader = self.reader.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(reader) = reader {
            let _ = reader.join();
        }
    }
}

impl std::fmt::Debug for ExitWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExitWatch")
            .field("watching", &self.shared.watching.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Drop for ExitWatch {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A generic netlink socket.
struct Socket {
    fd: OwnedFd,
}

impl Socket {
    fn open() -> io::Result<Socket> {
        // SAFETY: plain socket creation.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_GENERIC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero sockaddr_nl binds to a port the kernel picks.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: addr is a valid sockaddr_nl of the given size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let socket = Socket { fd };
        // A busy machine's exits come in bursts (a build): room for them, and a
        // timeout so the reader sees its stop flag.
        socket.set_option(libc::SO_RCVBUFFORCE, 8 << 20);
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 50_000,
        };
        // SAFETY: a timeval of the size given.
        unsafe {
            libc::setsockopt(
                socket.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const timeout).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
        Ok(socket)
    }

    fn set_option(&self, name: libc::c_int, value: libc::c_int) {
        // SAFETY: an int option of the size given.
        unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                name,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }

    fn send(&self, msg: &[u8]) -> io::Result<()> {
        // SAFETY: msg is readable for its length; the kernel is the default peer.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn recv(&self, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
        // SAFETY: buf is writable for its length.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                flags,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// The generic netlink family id of `name`.
    fn family_id(&self, name: &str) -> io::Result<u16> {
        let mut value = name.as_bytes().to_vec();
        value.push(0);
        self.send(&message(
            GENL_ID_CTRL,
            CTRL_CMD_GETFAMILY,
            &[(CTRL_ATTR_FAMILY_NAME, &value)],
        ))?;
        let mut buf = vec![0u8; 16 << 10];
        let n = self.recv(&mut buf, 0)?;
        for (kind, payload) in messages(&buf[..n]) {
            if kind == NLMSG_ERROR {
                return Err(netlink_error(payload));
            }
            if kind == GENL_ID_CTRL && payload.len() >= 4 {
                if let Some(id) = attrs(&payload[4..])
                    .find(|(t, v)| *t == CTRL_ATTR_FAMILY_ID && v.len() >= 2)
                    .map(|(_, v)| u16::from_ne_bytes([v[0], v[1]]))
                {
                    return Ok(id);
                }
            }
        }
        Err(io::Error::other(format!(
            "no generic netlink family {name}"
        )))
    }

    fn send_cpumask(&self, family: u16, attr: u16, cpus: &str) -> io::Result<()> {
        let mut value = cpus.as_bytes().to_vec();
        value.push(0);
        self.send(&message(family, TASKSTATS_CMD_GET, &[(attr, &value)]))?;
        // The kernel acknowledges only failures (no NLM_F_ACK): an error now is one.
        Ok(())
    }

    /// Read exit messages until told to stop, keeping the watched process's.
    fn read_exits(&self, family: u16, shared: &Shared) {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            // Once told to stop, what is queued is read without waiting, then no more.
            let stopping = shared.stop.load(Ordering::Relaxed);
            let flags = if stopping { libc::MSG_DONTWAIT } else { 0 };
            let n = match self.recv(&mut buf, flags) {
                Err(e) if stopping && e.kind() == io::ErrorKind::WouldBlock => return,
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    shared.overruns.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(_) => {
                    // A socket that fails cannot say what it missed.
                    shared.overruns.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            if !shared.watching.load(Ordering::Relaxed) {
                continue;
            }
            let mut peaks = shared.peaks_kib.lock().unwrap_or_else(|e| e.into_inner());
            for exit in exits(&buf[..n], family) {
                // A kernel without ac_tgid names threads only: a thread's own id then
                // stands for its process (right for single-threaded processes).
                let tgid = exit.tgid.unwrap_or(exit.tid);
                if peaks.len() >= PEAKS_KEPT && !peaks.contains_key(&tgid) {
                    shared.overruns.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let peak = peaks.entry(tgid).or_insert(0);
                *peak = (*peak).max(exit.hiwater_kib);
            }
        }
    }
}

/// One task's exit as taskstats reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TaskExit {
    tid: u32,
    /// Its process, where the kernel's struct has the field (version 10 on).
    tgid: Option<u32>,
    hiwater_kib: u64,
}

/// The task exits in a buffer of netlink messages of family `family`.
fn exits(buf: &[u8], family: u16) -> Vec<TaskExit> {
    let mut out = Vec::new();
    for (kind, payload) in messages(buf) {
        if kind != family || payload.len() < 4 || payload[0] != TASKSTATS_CMD_NEW {
            continue;
        }
        for (t, nested) in attrs(&payload[4..]) {
            if t != TASKSTATS_TYPE_AGGR_PID {
                continue;
            }
            let mut tid = None;
            let mut stats: Option<&[u8]> = None;
            for (t, v) in attrs(nested) {
                match t {
                    TASKSTATS_TYPE_PID if v.len() >= 4 => tid = Some(read_u32(v, 0)),
                    TASKSTATS_TYPE_STATS => stats = Some(v),
                    _ => {}
                }
            }
            let (Some(tid), Some(stats)) = (tid, stats) else {
                continue;
            };
            if stats.len() < STATS_HIWATER_RSS_KIB + 8 {
                continue;
            }
            out.push(TaskExit {
                tid,
                tgid: (stats.len() >= STATS_AC_TGID + 4).then(|| read_u32(stats, STATS_AC_TGID)),
                hiwater_kib: u64::from_ne_bytes(
                    stats[STATS_HIWATER_RSS_KIB..STATS_HIWATER_RSS_KIB + 8]
                        .try_into()
                        .unwrap_or([0; 8]),
                ),
            });
        }
    }
    out
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// A request: netlink header, generic netlink header, attributes.
fn message(kind: u16, cmd: u8, attributes: &[(u16, &[u8])]) -> Vec<u8> {
    let mut body = vec![cmd, TASKSTATS_GENL_VERSION, 0, 0];
    for (t, v) in attributes {
        let len = 4 + v.len();
        body.extend_from_slice(&(len as u16).to_ne_bytes());
        body.extend_from_slice(&t.to_ne_bytes());
        body.extend_from_slice(v);
        body.resize(align4(body.len()), 0);
    }
    let mut msg = Vec::with_capacity(16 + body.len());
    msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    msg.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel fills it
    msg.extend_from_slice(&body);
    msg
}

/// (type, payload) of each netlink message in `buf`; a malformed one ends the list.
fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let header = buf.get(at..at + 16)?;
        let len = read_u32(header, 0) as usize;
        let kind = u16::from_ne_bytes([header[4], header[5]]);
        let payload = buf.get(at + 16..at.checked_add(len)?)?;
        at += align4(len.max(16));
        Some((kind, payload))
    })
}

/// (type, value) of each attribute in `buf` (the nested and byte-order bits cleared);
/// a malformed one ends the list.
fn attrs(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let header = buf.get(at..at + 4)?;
        let len = u16::from_ne_bytes([header[0], header[1]]) as usize;
        let kind = u16::from_ne_bytes([header[2], header[3]]) & 0x3fff;
        if len < 4 {
            return None;
        }
        let value = buf.get(at + 4..at + len)?;
        at += align4(len);
        Some((kind, value))
    })
}

fn netlink_error(payload: &[u8]) -> io::Error {
    match payload.get(..4) {
        Some(b) => {
            io::Error::from_raw_os_error(-i32::from_ne_bytes(b.try_into().unwrap_or([0; 4])))
        }
        None => io::Error::other("a malformed netlink error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel exit message, as `taskstats_exit` builds it: AGGR_PID { PID, STATS }.
    fn exit_message(family: u16, tid: u32, tgid: u32, hiwater_kib: u64) -> Vec<u8> {
        let mut stats = vec![0u8; 416];
        stats[0..2].copy_from_slice(&13u16.to_ne_bytes());
        stats[STATS_HIWATER_RSS_KIB..STATS_HIWATER_RSS_KIB + 8]
            .copy_from_slice(&hiwater_kib.to_ne_bytes());
        stats[STATS_AC_TGID..STATS_AC_TGID + 4].copy_from_slice(&tgid.to_ne_bytes());
        let mut nested = Vec::new();
        for (t, v) in [
            (TASKSTATS_TYPE_PID, tid.to_ne_bytes().to_vec()),
            (TASKSTATS_TYPE_STATS, stats),
        ] {
            nested.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
            nested.extend_from_slice(&t.to_ne_bytes());
            nested.extend_from_slice(&v);
            nested.resize(align4(nested.len()), 0);
        }
        let mut msg = message(
            family,
            TASKSTATS_CMD_NEW,
            &[(TASKSTATS_TYPE_AGGR_PID | 0x8000, &nested)],
        );
        msg[16] = TASKSTATS_CMD_NEW;
        msg
    }

    #[test]
    fn exit_messages_give_each_tasks_process_and_peak() {
        let mut buf = exit_message(27, 101, 100, 1004);
        buf.extend(exit_message(27, 100, 100, 1016));
        buf.extend(exit_message(99, 5, 5, 7)); // another family
        assert_eq!(
            exits(&buf, 27),
            [
                TaskExit {
                    tid: 101,
                    tgid: Some(100),
                    hiwater_kib: 1004
                },
                TaskExit {
                    tid: 100,
                    tgid: Some(100),
                    hiwater_kib: 1016
                },
            ]
        );
    }

    #[test]
    fn truncated_and_malformed_messages_give_nothing_and_never_panic() {
        let whole = exit_message(27, 101, 100, 1004);
        for cut in 0..whole.len() {
            let _ = exits(&whole[..cut], 27);
        }
        let mut bad = whole.clone();
        bad[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(exits(&bad, 27).is_empty());
        let mut zero_attr = whole;
        zero_attr[20..22].copy_from_slice(&0u16.to_ne_bytes());
        assert!(exits(&zero_attr, 27).is_empty());
    }

    /// The real kernel: as root, an exit of a child of ours is reported with its own
    /// peak, whatever this process's size (the child execs `true`).
    #[test]
    fn a_real_exit_is_reported_with_the_programs_own_peak() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return crate::test_skip::required(
                "a_real_exit_is_reported_with_the_programs_own_peak",
                "needs root (CAP_NET_ADMIN)",
            );
        }
        let watch = ExitWatch::register().expect("taskstats listener");
        // This test binary's own RSS is far above `true`'s.
        let _ballast = vec![1u8; 32 << 20];
        // Held until watched: it execs `true` once its stdin says so.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read _ && exec true"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        watch.watch();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"go\n").unwrap();
        child.wait().unwrap();
        let kib = (watch.largest_peak_kib([child.id()])).expect("the exit of true was reported");
        assert!(kib > 100 && kib < 8 << 10, "true's peak {kib} KiB");
    }
}
