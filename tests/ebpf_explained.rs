//! Issue 22's acceptance on real programs: a process stuck in one call, an idle server
//! and a busy one are each explained by name: which syscall, which stack, or why there
//! is none. The programs are Debian's own (coreutils `sleep` and `cat`, util-linux
//! `flock`, `redis-server` under `redis-benchmark`), stripped, reaching the kernel
//! through glibc; each is traced with `trace --pid` as an operator would.

#[path = "support/ebpf.rs"]
mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kernelkite::analysis::SyscallState;
use kernelkite::model::{load_bundle, Bundle, StackFrame};
use support::*;

/// A child killed (and reaped) when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Killed {
    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

/// The syscall number /proc shows `pid` blocked in, once it is (within 10 s).
fn wait_blocked(pid: i32) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let sleeping = state
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'));
        if let Some(nr) = text.split_whitespace().next().and_then(|f| f.parse().ok()) {
            if nr >= 0 && sleeping {
                return nr;
            }
        }
        assert!(Instant::now() < deadline, "{pid} never blocked: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`ebpf_ready`], and BTF tracepoints (`--stacks` needs them; under
/// `KERNELKITE_HOOKS=classic` the test is skipped, saying so).
fn stacks_ready(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    let serial = ebpf_ready(test)?;
    if classic_hooks() {
        eprintln!("skipped {test}: --stacks needs BTF tracepoints");
        return None;
    }
    Some(serial)
}

/// `kernelkite ARGS`: its stdout, after asserting it succeeded.
fn kk(args: &[&str]) -> String {
    let out = Command::new(kernelkite_bin()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "kernelkite {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `trace --pid PID --duration S --stacks -o B`: its stdout and bundle.
fn trace_pid(pid: i32, seconds: &str, dir: &Path) -> (String, Bundle, std::path::PathBuf) {
    let bundle = dir.join(format!("{pid}.bundle.json"));
    let stdout = kk(&[
        "trace",
        "--pid",
        &pid.to_string(),
        "--duration",
        seconds,
        "--stacks",
        "-o",
        bundle.to_str().unwrap(),
    ]);
    (stdout, load_bundle(&bundle).unwrap(), bundle)
}

fn frames_of(bundle: &Bundle, stack: Option<u32>) -> Vec<&StackFrame> {
    let profile = bundle.stacks.as_ref().unwrap();
    stack
        .map(|i| {
            (profile.stacks[i as usize].iter())
                .map(|&f| &profile.frames[f as usize])
                .collect()
        })
        .unwrap_or_default()
}

fn module_is(f: &StackFrame, file: &str) -> bool {
    f.module
        .as_deref()
        .is_some_and(|m| Path::new(m).file_name().is_some_and(|n| n == file))
}

/// A process blocked in one call before tracing began, and still in it when tracing
/// ends: `sleep` in `clock_nanosleep`, `cat` in `read` on a pipe nobody writes, and
/// `flock` waiting for a lock another process holds. The summary names the call in
/// progress; the call and its wait carry the stack /proc shows (user frames unwound
/// from the saved registers and a copy of the stack: the libc function and, directly
/// above it, the program's own code that called it; the kernel frames of the wait),
/// and `stacks` shows it with the class's whole time, rather than "no stack".
#[test]
fn a_process_stuck_before_tracing_began_is_explained_by_its_call_and_stack() {
    let Some(_serial) =
        stacks_ready("a_process_stuck_before_tracing_began_is_explained_by_its_call_and_stack")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("lock");
    // We hold the lock for the test's whole run (a holder process would leave
    // children behind).
    let held = std::fs::File::create(&lock).unwrap();
    // SAFETY: flock on a descriptor we own.
    let locked = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&held), libc::LOCK_EX) };
    assert_eq!(locked, 0);
    let lock = lock.to_str().unwrap();
    let cases: [(&[&str], &str, &str, &str); 3] = [
        (&["sleep", "1000"], "clock_nanosleep", "nanosleep", "sleep"),
        (&["cat"], "read", "pipe_read", "cat"),
        (&["flock", lock, "true"], "flock", "flock", "flock"),
    ];
    for (argv, call, kernel_frame, program) in cases {
        // `cat`'s stdin is a pipe whose write end we hold and never write.
        let stuck = Killed(
            Command::new(argv[0])
                .args(&argv[1..])
                .stdin(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let pid = stuck.pid();
        wait_blocked(pid);
        let (stdout, bundle, path) = trace_pid(pid, "1", dir.path());

        // The summary's syscall table names the call, in progress since the start.
        let row = (stdout.lines())
            .find(|l| l.contains("(in progress since start)"))
            .unwrap_or_else(|| panic!("{program}: no call in progress: {stdout}"));
        assert!(row.contains(call), "{program}: {row}");
        // And ends with where it waits.
        let at_end = (stdout.split("heaviest ").nth(1))
            .unwrap_or_else(|| panic!("{program}: no stacks: {stdout}"));
        assert!(at_end.contains(kernel_frame), "{program}: {at_end}");
        assert!(at_end.contains("asleep through the session"), "{at_end}");
        let calls: Vec<_> = (bundle.syscalls_in_progress.iter())
            .filter(|c| c.pid == pid && c.before_start)
            .collect();
        assert_eq!(
            calls.len(),
            1,
            "{program}: {:?}",
            bundle.syscalls_in_progress
        );
        assert_eq!(calls[0].name, call);
        let analysis = kernelkite::analysis::analyze(&bundle);
        assert!(
            (analysis.syscalls.iter())
                .any(|s| s.name == call && s.state == SyscallState::InProgressSinceStart),
            "{program}: {:?}",
            analysis.syscalls
        );

        // Its stack: the call's, from /proc.
        let user = frames_of(&bundle, calls[0].user_stack);
        let profile = bundle.stacks.as_ref().unwrap();
        let waits: Vec<_> = (profile.samples.iter())
            .filter(|s| s.pid == pid && s.in_progress)
            .collect();
        assert_eq!(waits.len(), 1, "{program}: {:?}", profile.samples);
        assert_eq!(waits[0].user_stack, calls[0].user_stack);
        let kernel = frames_of(&bundle, waits[0].kernel_stack);
        assert!(
            (kernel.iter()).any(|f| f.kernel
                && f.symbol
                    .as_deref()
                    .is_some_and(|s| s.contains(kernel_frame))),
            "{program}: kernel frames {kernel:?}"
        );
        // Innermost first: glibc's wrapper, then the program's own code that called it
        // (stripped: named by module and offset).
        let libc = (user.iter())
            .position(|f| module_is(f, "libc.so.6"))
            .unwrap_or_else(|| panic!("{program}: no libc frame in {user:?}"));
        let caller = (user[libc..].iter())
            .position(|f| !module_is(f, "libc.so.6"))
            .map(|i| user[libc + i])
            .unwrap_or_else(|| panic!("{program}: nothing called libc in {user:?}"));
        assert!(module_is(caller, program), "{program}: {user:?}");
        assert!(
            user.iter().all(|f| f.module.is_some()),
            "{program}: a frame in no mapping: {user:?}"
        );
        // The wait's whole time has that stack.
        let text = kk(&["stacks", path.to_str().unwrap()]);
        assert!(!text.contains("no stack: "), "{program}: {text}");
        let class_line = (text.lines())
            .find(|l| l.contains(" with stacks = 100.0% of the class's"))
            .unwrap_or_else(|| panic!("{program}: no class fully with stacks: {text}"));
        assert!(class_line.contains(", 0 ns without"), "{class_line}");
        assert!(text.contains(kernel_frame), "{program}: {text}");
    }
}

/// A `redis-server` of Debian's on a unix socket in `dir` (no TCP port), once it
/// serves; `None` (the test skipped, said why) when it is not installed.
fn start_redis(dir: &Path) -> Option<(Killed, std::path::PathBuf)> {
    if !Path::new("/usr/bin/redis-server").exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-server is not installed (apt-get install redis-server)"
        );
        eprintln!("skipped: redis-server is not installed");
        return None;
    }
    let socket = dir.join("redis.sock");
    let server = Killed(
        Command::new("/usr/bin/redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--dir"])
            .arg(dir)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !redis_cli(&socket, &["ping"]).contains("PONG") {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some((server, socket))
}

fn redis_cli(socket: &Path, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-s")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A stat of redis's own `INFO`.
fn redis_stat(socket: &Path, section: &str, name: &str) -> u64 {
    let info = redis_cli(socket, &["info", section]);
    (info.lines())
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {info}"))
}

/// The summed ns and count of `call` in the trace's syscall table (every state).
fn syscall_time(a: &kernelkite::analysis::Analysis, call: &str) -> (u64, u64) {
    (a.syscalls.iter())
        .filter(|s| s.name == call)
        .fold((0, 0), |(ns, n), s| (ns + s.total_ns, n + s.count))
}

/// An idle `redis-server`: its main thread waits in `epoll_wait` (redis wakes 10 times
/// a second for its timers), its background threads sleep in a futex since before
/// tracing began. The syscall table explains the main thread's syscall_blocked time
/// with `epoll_wait`, whose stack names redis's event loop (`aeMain`) under the kernel's
/// `do_epoll_wait`, and `trace` shows that stack, not the idle threads' futex waits;
/// `waits` lists the background threads as idle, and their lock_wait has the stack
/// /proc showed (`bioProcessBackgroundJobs`).
#[test]
fn an_idle_redis_is_explained_as_waiting_in_epoll_wait() {
    let Some(_serial) = stacks_ready("an_idle_redis_is_explained_as_waiting_in_epoll_wait") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some((server, _socket)) = start_redis(dir.path()) else {
        return;
    };
    let pid = server.pid();
    let (stdout, bundle, path) = trace_pid(pid, "2", dir.path());
    let a = kernelkite::analysis::analyze(&bundle);
    let main = (a.threads.iter())
        .find(|t| t.tid == pid)
        .unwrap_or_else(|| panic!("no main thread: {stdout}"));
    let blocked = main
        .classes
        .get(kernelkite_common::LatencyClass::SyscallBlocked);
    assert!(blocked > 1_000_000_000, "{stdout}");
    let (epoll_ns, epoll_calls) = syscall_time(&a, "epoll_wait");
    // 2 s at redis's 10 wakeups a second.
    assert!(epoll_calls >= 10, "{stdout}");
    assert!(
        epoll_ns as f64 >= 0.95 * blocked as f64,
        "epoll_wait {epoll_ns} ns of syscall_blocked {blocked} ns: {stdout}"
    );
    let at_end = stdout
        .split("heaviest ")
        .nth(1)
        .unwrap_or_else(|| panic!("no stacks: {stdout}"));
    assert!(at_end.starts_with("syscall_blocked stacks:"), "{at_end}");
    assert!(at_end.contains("aeMain"), "{at_end}");
    assert!(
        at_end.contains("idle, left out above (4 thread(s)"),
        "{at_end}"
    );

    // Its stack: redis's event loop under the kernel's epoll wait.
    let text = kk(&[
        "stacks",
        path.to_str().unwrap(),
        "--class",
        "syscall_blocked",
    ]);
    let heaviest = text
        .split("  #1 ")
        .nth(1)
        .and_then(|s| s.split("  #2 ").next())
        .unwrap_or_else(|| panic!("no heaviest stack: {text}"));
    // (`aeProcessEvents` calls the static `aeApiPoll`: stripped, it is an offset.)
    for frame in ["do_epoll_wait", "epoll_wait", "aeMain"] {
        assert!(heaviest.contains(frame), "no {frame} in {heaviest}");
    }

    // The background threads: idle, and each one's wait with its stack.
    let waits = kk(&["waits", path.to_str().unwrap()]);
    let idle = waits
        .split("idle (")
        .nth(1)
        .unwrap_or_else(|| panic!("no idle threads: {waits}"));
    for name in ["bio_close_file", "bio_aof_fsync", "bio_lazy_free"] {
        assert!(idle.contains(name), "{name} not idle: {waits}");
    }
    let locks = kk(&["stacks", path.to_str().unwrap(), "--class", "lock_wait"]);
    assert!(locks.contains("bioProcessBackgroundJobs"), "{locks}");
    assert!(!locks.contains("no stack: "), "{locks}");
}

/// A busy `redis-server` under `redis-benchmark`: the syscall table counts its reads
/// and writes (at least one of each per command, held against redis's own count of
/// commands processed), nothing is lost, and the on-CPU stacks name where it ran
/// (redis's command path, `processCommand` → `call`).
#[test]
fn a_busy_redis_is_explained_by_its_calls_and_on_cpu_stacks() {
    let Some(_serial) = stacks_ready("a_busy_redis_is_explained_by_its_calls_and_on_cpu_stacks")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some((server, socket)) = start_redis(dir.path()) else {
        return;
    };
    let pid = server.pid();
    let before = redis_stat(&socket, "stats", "total_commands_processed");
    let trace = RunningTrace::start(&[pid], &["--stacks", "--sample-hz", "499"]);
    let status = Command::new("redis-benchmark")
        .arg("-s")
        .arg(&socket)
        .args(["-n", "20000", "-c", "4", "-t", "set,get", "-q"])
        .stdout(Stdio::null())
        .status()
        .expect("redis-benchmark");
    assert!(status.success());
    // `info` and `shutdown` are commands too: counted before the trace ends.
    let commands = redis_stat(&socket, "stats", "total_commands_processed") - before;
    assert!(commands >= 40_000, "{commands}");
    let _ = redis_cli(&socket, &["shutdown", "nosave"]);
    let t = trace.finish();
    drop(server);

    let (_, reads) = syscall_time(&t.analysis, "read");
    let (_, writes) = syscall_time(&t.analysis, "write");
    let (_, writevs) = syscall_time(&t.analysis, "writev");
    assert!(reads >= commands, "{reads} reads for {commands} commands");
    assert!(
        writes + writevs >= commands,
        "{writes} writes for {commands} commands"
    );
    assert!(syscall_time(&t.analysis, "epoll_wait").1 > 0);
    t.assert_no_events_lost();
    let on_cpu = analyze_on_cpu_stacks(&t);
    for frame in ["processCommand", "call", "aeMain"] {
        assert!(on_cpu.contains(frame), "no {frame} in {on_cpu}");
    }
}

/// `kernelkite stacks --class on_cpu` of a traced bundle, every stack (on a loaded
/// machine the samples spread over many stacks: redis's command path need not be in the
/// top 20 of some 90).
fn analyze_on_cpu_stacks(t: &Traced) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.json");
    std::fs::write(&path, &t.bundle_bytes).unwrap();
    kk(&[
        "stacks",
        path.to_str().unwrap(),
        "--class",
        "on_cpu",
        "--top",
        "100000",
    ])
}
