//! Every workload runs with tiny parameters, exits 0 and reports what it was asked to do.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

fn kk(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kk-workload"))
        .args(args)
        .output()
        .expect("kk-workload runs");
    assert!(
        out.status.success(),
        "{args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let last = stdout.lines().last().expect("a result line").to_string();
    assert!(last.starts_with('{') && last.ends_with('}'), "{last}");
    last
}

#[test]
fn each_workload_reports_its_counts() {
    let name = |w: &str| format!("\"workload\":\"{w}\"");
    let r = kk(&["cpu_stress", "--seconds", "0.1", "--threads", "3"]);
    assert!(
        r.contains(&name("cpu_stress")) && r.contains("\"threads\":3"),
        "{r}"
    );
    let r = kk(&["futex_stress", "--seconds", "0.1", "--hold-us", "200"]);
    assert!(r.contains(&name("futex_stress")), "{r}");
    let r = kk(&["io_stress", "--count", "5"]);
    assert!(r.contains("\"writes\":5,\"fsyncs\":5"), "{r}");
    let r = kk(&[
        "sleep_stress",
        "--nanosleeps",
        "3",
        "--reads",
        "2",
        "--sleep-ms",
        "1",
        "--delay-ms",
        "1",
    ]);
    assert!(r.contains("\"reads\":2,\"nanosleeps\":3"), "{r}");
    let r = kk(&["read_loop", "--count", "1000"]);
    assert!(r.contains("\"reads\":1000"), "{r}");
    let r = kk(&["exec_storm", "--count", "3", "--self-exec"]);
    assert!(
        r.contains("\"spawned\":3,\"succeeded\":3,\"failed\":0"),
        "{r}"
    );
    let r = kk(&["net_stress", "--count", "50"]);
    assert!(r.contains("\"messages\":50,\"echoed\":50"), "{r}");
    let r = kk(&["pipe_pingpong", "--count", "100"]);
    assert!(r.contains("\"round_trips\":100"), "{r}");
    let r = kk(&["pipe_pingpong", "--count", "100", "--processes"]);
    assert!(r.contains("\"round_trips\":100,\"processes\":true"), "{r}");
    let r = kk(&["idle_tree", "--count", "3", "--seconds", "0.05"]);
    assert!(r.contains("\"children\":3,\"failed\":0"), "{r}");
}

#[test]
fn wait_stdin_prints_ready_and_waits_for_a_line() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kk-workload"))
        .args(["read_loop", "--count", "10", "--wait-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next().unwrap().unwrap();
    assert_eq!(ready, format!("ready {}", child.id()));
    // Not started yet: still alive, no result.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(child.try_wait().unwrap().is_none());
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let result = lines.next().unwrap().unwrap();
    assert!(result.contains("\"reads\":10"), "{result}");
    assert!(child.wait().unwrap().success());
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["nope"][..],
        &["read_loop", "--bogus", "1"],
        &["read_loop", "--count"],
    ] {
        let st = Command::new(env!("CARGO_BIN_EXE_kk-workload"))
            .args(args)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(2), "{args:?}");
    }
}
