//! The sampler against synthetic /proc trees.

use super::synthetic::{FakeProc, FakeProcess, FakeThread, PF_KTHREAD};
use super::*;
use crate::model::{Frame, IoCounters, ProcessSample, Schedstat};

fn sampler(fake: &FakeProc) -> Sampler {
    Sampler::new(
        fake.root(),
        SamplerOptions {
            threads: true,
            network: false,
        },
    )
    .unwrap()
}

fn pids(frame: &Frame) -> Vec<i32> {
    frame.processes.iter().map(|p| p.pid).collect()
}

fn find(frame: &Frame, pid: i32) -> &ProcessSample {
    frame
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .unwrap_or_else(|| panic!("pid {pid} not sampled"))
}

/// init, kthreadd and a kernel worker, which every tree has.
fn base(fake: &FakeProc) {
    fake.add(&FakeProcess::new(1, 0, "systemd")).unwrap();
    let mut kthreadd = FakeProcess::new(2, 0, "kthreadd");
    kthreadd.flags |= PF_KTHREAD;
    fake.add(&kthreadd).unwrap();
    let mut worker = FakeProcess::new(3, 2, "kworker/0:0");
    worker.flags |= PF_KTHREAD;
    worker.io = None;
    fake.add(&worker).unwrap();
}

#[test]
fn subtree_is_roots_and_descendants_only() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    // Added out of pid order: the frame must still be sorted.
    fake.add(&FakeProcess::new(102, 101, "grandchild")).unwrap();
    fake.add(&FakeProcess::new(100, 1, "root")).unwrap();
    fake.add(&FakeProcess::new(101, 100, "child")).unwrap();
    fake.add(&FakeProcess::new(200, 1, "unrelated")).unwrap();
    fake.add(&FakeProcess::new(201, 200, "unrelated-child"))
        .unwrap();

    let frame = sampler(&fake).sample(Scope::Subtrees(&[100]), 42).unwrap();
    assert_eq!(frame.t_ns, 42);
    assert_eq!(pids(&frame), [100, 101, 102]);
    assert_eq!(find(&frame, 102).ppid, 101);
    assert_eq!(find(&frame, 101).ppid, 100);
    assert_eq!(frame.network, None);
}

#[test]
fn stat_fields_map_onto_the_sample() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    let mut p = FakeProcess::new(100, 1, "worker");
    p.state = 'D';
    p.utime_ticks = 1234;
    p.stime_ticks = 567;
    p.cutime_ticks = 89;
    p.cstime_ticks = 10;
    p.rss_pages = 4321;
    p.start_time_ticks = 987_654;
    p.threads[0].state = 'D';
    p.threads[0].schedstat = Some(Schedstat {
        on_cpu_ns: 123_456_789,
        runqueue_ns: 2_345,
        timeslices: 67,
    });
    p.threads[0].syscall = Some("17 0x3 0x7f0 0x1000 0x0 0x0 0x0 0x7ffd 0x7f3a".into());
    fake.add(&p).unwrap();

    let frame = sampler(&fake).sample(Scope::Subtrees(&[100]), 0).unwrap();
    let s = find(&frame, 100);
    assert_eq!(s.comm, "worker");
    assert_eq!(s.state, "D");
    assert_eq!(s.ppid, 1);
    assert_eq!(
        (s.utime_ticks, s.stime_ticks, s.cutime_ticks, s.cstime_ticks),
        (1234, 567, 89, 10)
    );
    assert_eq!(s.rss_pages, 4321);
    assert_eq!(s.start_time_ticks, 987_654);
    assert_eq!(s.num_threads, 1);
    assert_eq!(s.io, p.io);
    assert_eq!(s.threads.len(), 1);
    let t = &s.threads[0];
    assert_eq!(
        (t.tid, t.comm.as_str(), t.state.as_str()),
        (100, "worker", "D")
    );
    assert_eq!(
        t.schedstat,
        Some(Schedstat {
            on_cpu_ns: 123_456_789,
            runqueue_ns: 2_345,
            timeslices: 67
        })
    );
    assert_eq!(t.syscall_nr, Some(17));
    assert_eq!(t.class_ns, None);
}

#[test]
fn comm_with_spaces_and_parentheses() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    let mut p = FakeProcess::new(100, 1, "(my cmd)");
    p.utime_ticks = 77;
    fake.add(&p).unwrap();
    fake.add(&FakeProcess::new(101, 100, ") S 1 (")).unwrap();

    let frame = sampler(&fake).sample(Scope::Subtrees(&[100]), 0).unwrap();
    assert_eq!(pids(&frame), [100, 101]);
    let s = find(&frame, 100);
    assert_eq!(s.comm, "(my cmd)");
    assert_eq!(s.threads[0].comm, "(my cmd)");
    assert_eq!(s.state, "S");
    assert_eq!(s.utime_ticks, 77);
    let c = find(&frame, 101);
    assert_eq!(c.comm, ") S 1 (");
    assert_eq!(c.ppid, 100);
}

#[test]
fn kernel_threads_never_count() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    fake.add(&FakeProcess::new(100, 1, "root")).unwrap();
    // A kernel thread can only hang off kthreadd, but the flag alone must exclude it...
    let mut flagged = FakeProcess::new(101, 100, "kthread-flagged");
    flagged.flags |= PF_KTHREAD;
    fake.add(&flagged).unwrap();
    // ...and so must a parent of 2 without the flag, along with anything below it.
    fake.add(&FakeProcess::new(102, 2, "kthread-by-ppid"))
        .unwrap();
    fake.add(&FakeProcess::new(103, 102, "below-kthread"))
        .unwrap();

    let mut s = sampler(&fake);
    assert_eq!(pids(&s.sample(Scope::Subtrees(&[100]), 0).unwrap()), [100]);
    // Naming kthreadd or a kernel thread as a root does not pull kernel threads in.
    let frame = s.sample(Scope::Subtrees(&[2, 3, 102]), 0).unwrap();
    assert_eq!(pids(&frame), Vec::<i32>::new());
}

#[test]
fn descendants_of_excludes_the_parent_and_includes_adopted_orphans() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    fake.add(&FakeProcess::new(50, 1, "kernelkite")).unwrap();
    fake.add(&FakeProcess::new(60, 50, "sh")).unwrap();
    fake.add(&FakeProcess::new(61, 60, "child")).unwrap();
    // An orphan whose parent exited, reparented to the subreaper.
    fake.add(&FakeProcess::new(70, 50, "orphan")).unwrap();
    fake.add(&FakeProcess::new(71, 70, "orphan-child")).unwrap();
    fake.add(&FakeProcess::new(80, 1, "elsewhere")).unwrap();

    let frame = sampler(&fake).sample(Scope::DescendantsOf(50), 0).unwrap();
    assert_eq!(pids(&frame), [60, 61, 70, 71]);
}

#[test]
fn process_vanishing_mid_read_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    fake.add(&FakeProcess::new(100, 1, "root")).unwrap();
    // Listed, but its stat is gone: exited between readdir and read.
    fake.add(&FakeProcess::new(101, 100, "gone-stat")).unwrap();
    fake.remove_part(101, "stat").unwrap();
    // stat read, then gone before its threads were read (single-threaded path).
    fake.add(&FakeProcess::new(102, 100, "gone-task")).unwrap();
    fake.remove_part(102, "task").unwrap();
    // The same for a multi-threaded process (task directory listing path).
    let mut mt = FakeProcess::new(103, 100, "gone-mt");
    mt.threads.push(FakeThread::new(104, "gone-mt-2"));
    fake.add(&mt).unwrap();
    fake.remove_part(103, "task").unwrap();
    // Still fine: a live sibling.
    fake.add(&FakeProcess::new(105, 100, "alive")).unwrap();

    let frame = sampler(&fake).sample(Scope::Subtrees(&[100]), 0).unwrap();
    assert_eq!(pids(&frame), [100, 105]);
}

#[test]
fn thread_vanishing_mid_read_drops_only_that_thread() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    let mut p = FakeProcess::new(100, 1, "mt");
    p.threads.push(FakeThread::new(101, "worker-a"));
    p.threads.push(FakeThread::new(102, "worker-b"));
    fake.add(&p).unwrap();
    fake.remove_part(100, "task/101/stat").unwrap();

    let frame = sampler(&fake).sample(Scope::Subtrees(&[100]), 0).unwrap();
    let tids: Vec<i32> = find(&frame, 100).threads.iter().map(|t| t.tid).collect();
    assert_eq!(tids, [100, 102]);
}

#[test]
fn threads_sorted_with_names_states_and_syscalls() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    let mut p = FakeProcess::new(100, 1, "server");
    // Listed out of order; tid 1000 sorts after 999 numerically, not as text.
    let mut t_running = FakeThread::new(1000, "io worker");
    t_running.state = 'R';
    // The kernel prints "running" here; the sampler must not need to read it.
    t_running.syscall = Some("running".into());
    let mut t_user = FakeThread::new(999, "compute");
    t_user.syscall = Some("-1 0x7ffc1a2b 0x401000".into());
    let mut t_noperm = FakeThread::new(101, "no-syscall-file");
    t_noperm.syscall = None;
    t_noperm.schedstat = None;
    let mut t_futex = FakeThread::new(102, "lock waiter");
    t_futex.syscall = Some("202 0x7f00 0x80 0x2 0x0 0x0 0x0 0x7ffd 0x7f3a".into());
    p.threads.push(t_running);
    p.threads.push(t_user);
    p.threads.push(t_noperm);
    p.threads.push(t_futex);
    fake.add(&p).unwrap();

    let frame = sampler(&fake).sample(Scope::Subtrees(&[100]), 0).unwrap();
    let s = find(&frame, 100);
    assert_eq!(s.num_threads, 5);
    let got: Vec<(i32, &str, &str, Option<i64>, bool)> = s
        .threads
        .iter()
        .map(|t| {
            (
                t.tid,
                t.comm.as_str(),
                t.state.as_str(),
                t.syscall_nr,
                t.schedstat.is_some(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (100, "server", "S", Some(0), true),
            (101, "no-syscall-file", "S", None, false),
            (102, "lock waiter", "S", Some(202), true),
            (999, "compute", "S", Some(-1), true),
            (1000, "io worker", "R", None, true),
        ]
    );
}

#[test]
fn unreadable_io_is_none_and_the_process_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    fake.add(&FakeProcess::new(100, 1, "root")).unwrap();
    let mut other_user = FakeProcess::new(101, 100, "setuid-child");
    other_user.io = None;
    fake.add(&other_user).unwrap();

    let frame = sampler(&fake).sample(Scope::Subtrees(&[100]), 0).unwrap();
    assert_eq!(pids(&frame), [100, 101]);
    assert!(find(&frame, 100).io.is_some());
    assert_eq!(find(&frame, 101).io, None);
    assert_eq!(find(&frame, 101).threads.len(), 1);
}

#[test]
fn pid_reuse_is_seen_across_ticks() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    fake.add(&FakeProcess::new(100, 1, "root")).unwrap();
    let mut first = FakeProcess::new(101, 100, "first");
    first.start_time_ticks = 5000;
    first.utime_ticks = 900;
    fake.add(&first).unwrap();
    // Outside the subtree on the first tick.
    fake.add(&FakeProcess::new(200, 1, "outsider")).unwrap();

    let mut s = sampler(&fake);
    let f1 = s.sample(Scope::Subtrees(&[100]), 1).unwrap();
    assert_eq!(pids(&f1), [100, 101]);
    assert_eq!(find(&f1, 101).start_time_ticks, 5000);

    // 101 exited and its pid went to a new child; 200 exited and its pid went to a
    // grandchild of the root.
    let mut second = FakeProcess::new(101, 100, "second");
    second.start_time_ticks = 7000;
    second.utime_ticks = 3;
    fake.add(&second).unwrap();
    let mut reused = FakeProcess::new(200, 101, "reused");
    reused.start_time_ticks = 8000;
    fake.add(&reused).unwrap();

    let f2 = s.sample(Scope::Subtrees(&[100]), 2).unwrap();
    assert_eq!(pids(&f2), [100, 101, 200]);
    let p = find(&f2, 101);
    assert_eq!(
        (p.comm.as_str(), p.start_time_ticks, p.utime_ticks),
        ("second", 7000, 3)
    );
    assert_eq!(find(&f2, 200).ppid, 101);
}

#[test]
fn new_children_and_exits_between_ticks() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    fake.add(&FakeProcess::new(100, 1, "root")).unwrap();
    fake.add(&FakeProcess::new(101, 100, "short")).unwrap();
    let mut s = sampler(&fake);
    assert_eq!(
        pids(&s.sample(Scope::Subtrees(&[100]), 1).unwrap()),
        [100, 101]
    );
    fake.remove(101).unwrap();
    fake.add(&FakeProcess::new(102, 100, "next")).unwrap();
    assert_eq!(
        pids(&s.sample(Scope::Subtrees(&[100]), 2).unwrap()),
        [100, 102]
    );
    // A scope change is not confused by what was learnt for the old scope.
    fake.add(&FakeProcess::new(300, 1, "other-root")).unwrap();
    assert_eq!(pids(&s.sample(Scope::Subtrees(&[300]), 3).unwrap()), [300]);
    assert_eq!(
        pids(&s.sample(Scope::Subtrees(&[100, 300]), 4).unwrap()),
        [100, 102, 300]
    );
}

#[test]
fn blocked_syscall_and_io_are_reread_once_a_thread_ran() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    let mut p = FakeProcess::new(100, 1, "waiter");
    p.threads.push(FakeThread::new(101, "helper"));
    fake.add(&p).unwrap();
    let mut s = sampler(&fake);
    let f1 = s.sample(Scope::Subtrees(&[100]), 1).unwrap();
    assert_eq!(find(&f1, 100).threads[1].syscall_nr, Some(0));

    // Files rewritten while schedstat and state stayed put: the kernel cannot change
    // these without the threads running, so the sampler may keep its previous values.
    let mut same = p.clone();
    same.threads[1].syscall = Some("7 0x1 0x2 0x3 0x0 0x0 0x0 0x7ffd 0x7f00".into());
    same.io.as_mut().unwrap().rchar_bytes = 99_999;
    fake.add(&same).unwrap();
    let f2 = s.sample(Scope::Subtrees(&[100]), 2).unwrap();
    assert_eq!(find(&f2, 100).threads[1].syscall_nr, Some(0));
    assert_eq!(find(&f2, 100).io.unwrap().rchar_bytes, 4096);

    // Thread 101 was scheduled (one more timeslice): both are read again.
    let mut ran = same.clone();
    ran.threads[1].schedstat.as_mut().unwrap().timeslices += 1;
    fake.add(&ran).unwrap();
    let f3 = s.sample(Scope::Subtrees(&[100]), 3).unwrap();
    assert_eq!(find(&f3, 100).threads[1].syscall_nr, Some(7));
    assert_eq!(find(&f3, 100).threads[0].syscall_nr, Some(0));
    assert_eq!(find(&f3, 100).io.unwrap().rchar_bytes, 99_999);

    // A state change alone (woken, not yet run) also counts.
    let mut woken = ran.clone();
    woken.threads[0].state = 'D';
    woken.threads[0].syscall = Some("17 0x1".into());
    fake.add(&woken).unwrap();
    let f4 = s.sample(Scope::Subtrees(&[100]), 4).unwrap();
    assert_eq!(find(&f4, 100).threads[0].syscall_nr, Some(17));

    // So does pid reuse: same pid, new start time, nothing carried over.
    let mut reused = FakeProcess::new(100, 1, "reused");
    reused.start_time_ticks = 999_999;
    reused.threads[0].syscall = Some("61 0x1".into());
    fake.add(&reused).unwrap();
    let f5 = s.sample(Scope::Subtrees(&[100]), 5).unwrap();
    assert_eq!(find(&f5, 100).threads[0].syscall_nr, Some(61));
}

#[test]
fn proc_is_listed_again_only_after_a_pid_was_allocated() {
    // The walk relists on a timer too (FULL_LISTING_EVERY): a machine too slow to take
    // three samples of a fake /proc within it runs the sequence again rather than drop
    // the check that nothing was listed (five misses in a row is a failure).
    let checked = (0..5).any(|_| listed_only_after_a_pid_was_allocated());
    assert!(
        checked,
        "five tries, each slower than {:?}",
        tree::FULL_LISTING_EVERY
    );
}

/// `false` when the samples took too long to tell a relisting by pid from one by time.
fn listed_only_after_a_pid_was_allocated() -> bool {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    fake.set_loadavg(500).unwrap();
    fake.add(&FakeProcess::new(100, 1, "root")).unwrap();
    let mut s = sampler(&fake);
    assert_eq!(pids(&s.sample(Scope::Subtrees(&[100]), 1).unwrap()), [100]);
    // The walk after a listing lists again (a process may have been half-created).
    fake.add(&FakeProcess::new(101, 100, "late")).unwrap();
    let listed = std::time::Instant::now();
    assert_eq!(
        pids(&s.sample(Scope::Subtrees(&[100]), 2).unwrap()),
        [100, 101]
    );

    // No pid allocated since: /proc is not listed, the subtree is re-read.
    fake.add(&FakeProcess::new(102, 100, "unannounced"))
        .unwrap();
    let mut root = FakeProcess::new(100, 1, "root");
    root.utime_ticks = 4242;
    // It ran, so its schedstat moved too (a process whose schedstat did not move has
    // not run, and its stat is not read again).
    if let Some(st) = root.threads[0].schedstat.as_mut() {
        st.on_cpu_ns += 42_420_000_000;
        st.timeslices += 1;
    }
    fake.add(&root).unwrap();
    let f3 = s.sample(Scope::Subtrees(&[100]), 3).unwrap();
    if listed.elapsed() >= tree::FULL_LISTING_EVERY {
        return false;
    }
    assert_eq!(pids(&f3), [100, 101]);
    assert_eq!(find(&f3, 100).utime_ticks, 4242);

    // A new pid: listed, and the new process is found.
    fake.set_loadavg(502).unwrap();
    assert_eq!(
        pids(&s.sample(Scope::Subtrees(&[100]), 4).unwrap()),
        [100, 101, 102]
    );
    true
}

#[test]
fn network_rows_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    fake.add(&FakeProcess::new(100, 1, "root")).unwrap();
    fake.set_net_dev(&[("lo", 10, 1, 10, 1), ("eth0", 5000, 40, 700, 9)])
        .unwrap();
    let mut s = Sampler::new(
        fake.root(),
        SamplerOptions {
            threads: false,
            network: true,
        },
    )
    .unwrap();
    let frame = s.sample(Scope::Subtrees(&[100]), 0).unwrap();
    let net = frame.network.as_ref().unwrap();
    let rows: Vec<(&str, u64, u64, u64, u64)> = net
        .iter()
        .map(|r| {
            (
                r.interface.as_str(),
                r.rx_bytes,
                r.rx_packets,
                r.tx_bytes,
                r.tx_packets,
            )
        })
        .collect();
    assert_eq!(rows, [("eth0", 5000, 40, 700, 9), ("lo", 10, 1, 10, 1)]);
    // threads: false records no threads.
    assert!(find(&frame, 100).threads.is_empty());
}

#[test]
fn missing_root_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = Sampler::new(&dir.path().join("nope"), SamplerOptions::default()).unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn real_proc_sees_this_process_and_its_threads() {
    let me = std::process::id() as i32;
    let mut s = Sampler::new(std::path::Path::new(PROC_ROOT), SamplerOptions::default()).unwrap();
    let frame = s.sample(Scope::Subtrees(&[me]), 0).unwrap();
    let p = find(&frame, me);
    assert!(p.start_time_ticks > 0);
    assert!(!p.threads.is_empty());
    assert!(p.threads.windows(2).all(|w| w[0].tid < w[1].tid));
    assert!(p.io.is_some_and(|io: IoCounters| io.rchar_bytes > 0));
    // Our own kernel threads' parent (kthreadd) and its children never appear.
    let f2 = s.sample(Scope::Subtrees(&[2]), 0).unwrap();
    assert!(f2.processes.is_empty());
}

/// `cargo test --release -p kernelkite --lib -- --ignored --nocapture sample_cost`:
/// CPU per sample of 100 sleeping processes on the real /proc.
#[test]
#[ignore = "a measurement on the real /proc, not a check: run by hand (see above)"]
fn sample_cost_of_100_sleepers() {
    let mut children: Vec<std::process::Child> = (0..100)
        .map(|_| {
            std::process::Command::new("sleep")
                .arg("60")
                .spawn()
                .unwrap()
        })
        .collect();
    let me = std::process::id() as i32;
    let mut s = Sampler::new(std::path::Path::new(PROC_ROOT), SamplerOptions::default()).unwrap();
    let cpu = || {
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
        (ru.ru_utime.tv_sec * 1_000_000 + ru.ru_utime.tv_usec) as f64
            + (ru.ru_stime.tv_sec * 1_000_000 + ru.ru_stime.tv_usec) as f64
    };
    let _ = s.sample(Scope::DescendantsOf(me), 0).unwrap();
    let n = 300;
    let before = cpu();
    let mut frames = Vec::new();
    for i in 0..n {
        let f = s.sample(Scope::DescendantsOf(me), i).unwrap();
        assert_eq!(f.processes.len(), 100);
        frames.push(f);
    }
    let per_sample_us = (cpu() - before) / n as f64;
    let before = cpu();
    let bytes: usize = frames
        .iter()
        .map(|f| serde_json::to_vec_pretty(f).unwrap().len())
        .sum();
    let ser_us = (cpu() - before) / n as f64;
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    println!(
        "sample: {per_sample_us:.0} us CPU per frame of 100 processes ({:.2}% of a core at 100 ms); \
         serialize: {ser_us:.0} us per frame ({} bytes)",
        per_sample_us / 1000.0,
        bytes / n as usize
    );
}

#[test]
fn an_idle_orphan_is_followed_to_its_new_parent() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    fake.set_loadavg(500).unwrap();
    fake.add(&FakeProcess::new(50, 1, "kernelkite")).unwrap();
    fake.add(&FakeProcess::new(100, 50, "parent")).unwrap();
    fake.add(&FakeProcess::new(101, 100, "child")).unwrap();
    let mut s = sampler(&fake);
    for t in 1..=3 {
        // Idle ticks: the child's schedstat does not move, its stat is reused.
        assert_eq!(
            pids(&s.sample(Scope::DescendantsOf(50), t).unwrap()),
            [100, 101]
        );
    }
    // The parent exits; the child, which has not run, is reparented to the subreaper.
    fake.remove(100).unwrap();
    fake.add(&FakeProcess::new(101, 50, "child")).unwrap();
    let f = s.sample(Scope::DescendantsOf(50), 4).unwrap();
    assert_eq!(pids(&f), [101]);
    assert_eq!(find(&f, 101).ppid, 50);
}

#[test]
fn threads_said_unchanged_repeat_their_last_reading_and_others_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    base(&fake);
    let mut p = FakeProcess::new(100, 1, "pool");
    p.threads.push(FakeThread::new(101, "idle"));
    p.threads.push(FakeThread::new(102, "busy"));
    let mut running = FakeThread::new(103, "spinner");
    running.state = 'R';
    p.threads.push(running);
    fake.add(&p).unwrap();
    let mut s = sampler(&fake);
    s.sample(Scope::Subtrees(&[100]), 0).unwrap();

    // Every thread's counters move (as the files would if each had run), and all three
    // are said unchanged: 101 and 102 were asleep at the last reading and are repeated;
    // 103 was running then, so it is read again whatever the caller says.
    for t in &mut p.threads {
        t.schedstat.as_mut().unwrap().on_cpu_ns += 500;
        t.comm.push_str("-renamed");
    }
    fake.add(&p).unwrap();
    s.set_unchanged_threads([101, 103]);
    let frame = s.sample(Scope::Subtrees(&[100]), 1).unwrap();
    let got: Vec<(i32, &str, u64)> = (find(&frame, 100).threads.iter())
        .map(|t| (t.tid, t.comm.as_str(), t.schedstat.unwrap().on_cpu_ns))
        .collect();
    assert_eq!(
        got,
        [
            (100, "pool-renamed", 1_000_600),
            (101, "idle", 1_000_101),
            (102, "busy-renamed", 1_000_602),
            (103, "spinner-renamed", 1_000_603),
        ]
    );

    // The hint lasts one sample: the next one reads every file.
    let frame = s.sample(Scope::Subtrees(&[100]), 2).unwrap();
    let idle = &find(&frame, 100).threads[1];
    assert_eq!(
        (idle.comm.as_str(), idle.schedstat.unwrap().on_cpu_ns),
        ("idle-renamed", 1_000_601)
    );
}
