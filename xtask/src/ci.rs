//! `cargo xtask ci`: everything CI checks, in order, failing fast. `.ci/run` calls
//! exactly this, on a fresh Debian 12 machine as root with only Rust installed.
//!
//! Steps:
//! 1. install what the later steps need, when missing (skipped with `KK_CI_NO_INSTALL=1`
//!    or `--no-install`): `apt-get update` once, then `apt-get install -y` of chromium,
//!    time, tmux, curl, strace, bpftool, nodejs (a real perf map), gcc and binutils (the --stacks C workload), g++
//!    (libFuzzer), redis-server and redis-tools (a real server), golang-go, nginx,
//!    apache2-utils and bpftrace (real runtimes and servers, another tracer), make (a real build),
//!    postgresql (a real database under pgbench), gdb (a debugger under exit accounting),
//!    prometheus (promtool), man-db, python3-pip and llvm-22-dev;
//!    `pip install opentelemetry-proto protobuf kubernetes-validate`; `rustup component add rust-src`; bpf-linker
//!    (`cargo install`, built against LLVM 22) when the eBPF crate is present;
//!    cargo-fuzz and cargo-deb (`cargo install`);
//! 2. `cargo fmt --all -- --check`;
//! 3. `cargo clippy --workspace --all-targets -- -D warnings`;
//! 4. the eBPF object check and the BPF crate's fmt and clippy (`cargo xtask build-ebpf --check`);
//! 5. `cargo test --workspace --no-fail-fast` with `CI=true` (real-kernel tests fail instead of
//!    skipping when they cannot run), then the `test result:` lines again as a summary,
//!    with every test that skipped for want of what a CI machine may lack (tests/support/skip.rs
//!    appends `test: reason` to the file `KK_SKIP_LOG` names), counted and listed;
//! 6. the real-kernel eBPF tests again with `KERNELKITE_HOOKS=classic` (the
//!    classic-tracepoint fallback of kernels without BTF);
//! 7. `cargo xtask samples --check`, then `cargo xtask readme --check` (README.md's
//!    examples run and compared, numbers masked);
//! 8. a short pass of every fuzz target, 10 s each (`cargo xtask fuzz --seconds 10`);
//! 9. the Debian package: built with `cargo deb`, installed with `dpkg -i`, its
//!    `kernelkite --version`, `doctor` and `man kernelkite` run, and purged again with
//!    nothing left behind (`cargo xtask package --check`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

const USAGE: &str = "usage: cargo xtask ci [--no-install] [--from N]
  Runs, failing fast: dependency install, cargo fmt --check, clippy -D warnings,
  the eBPF object check with its fmt and clippy, cargo test --workspace (CI=true), the eBPF tests again on
  classic tracepoints (KERNELKITE_HOOKS=classic), cargo xtask samples --check and
  readme --check,
  a 10 s pass of every fuzz target (cargo xtask fuzz --seconds 10), and the Debian
  package round trip (cargo xtask package --check).
  --no-install (or KK_CI_NO_INSTALL=1): do not install system packages or tools.
  --from N: start at step N (to re-run locally after a fix; CI always runs them all).";

pub fn run(args: &[String]) -> Result<()> {
    let mut install = std::env::var("KK_CI_NO_INSTALL").map_or(true, |v| v != "1");
    let mut from = 1usize;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--no-install" => install = false,
            "--from" => {
                from = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .with_context(|| format!("--from needs a step number\n{USAGE}"))?;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let root = crate::workspace_root();
    std::env::set_current_dir(&root).with_context(|| format!("cd {}", root.display()))?;

    // The skips the test steps reported, for the closing summary.
    let skips: std::cell::RefCell<Vec<String>> = std::cell::RefCell::new(Vec::new());
    type Step<'a> = (&'a str, Box<dyn Fn() -> Result<()> + 'a>);
    let steps: Vec<Step> = vec![
        (
            "install dependencies",
            Box::new(|| {
                if install {
                    install_dependencies()
                } else {
                    println!("skipped (KK_CI_NO_INSTALL=1 or --no-install)");
                    Ok(())
                }
            }),
        ),
        (
            "cargo fmt --all -- --check",
            Box::new(|| {
                cargo(&["fmt", "--all", "--", "--check"])
                    .context("code is not formatted: run `cargo fmt --all`")
            }),
        ),
        (
            "cargo clippy --workspace --all-targets -- -D warnings",
            Box::new(|| {
                cargo(&[
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ])
            }),
        ),
        (
            "eBPF object check (cargo xtask build-ebpf --check)",
            Box::new(ebpf_check),
        ),
        (
            "cargo test --workspace --no-fail-fast (CI=true)",
            Box::new(|| test_workspace(&root, &skips)),
        ),
        (
            "eBPF tests on classic tracepoints (KERNELKITE_HOOKS=classic)",
            Box::new(|| test_classic_hooks(&root, &skips)),
        ),
        (
            "cargo xtask samples --check, cargo xtask readme --check",
            Box::new(|| {
                crate::samples::run(&["--check".into()])
                    .context("samples are out of date: run `cargo xtask samples`")?;
                crate::readme::run(&["--check".into()])
                    .context("README.md's examples drifted: run `cargo xtask readme`")
            }),
        ),
        (
            "fuzz every target briefly (cargo xtask fuzz --seconds 10)",
            Box::new(|| crate::fuzz::run(&["--seconds".into(), "10".into()])),
        ),
        (
            "Debian package round trip (cargo xtask package --check)",
            Box::new(|| crate::package::run(&["--check".into()])),
        ),
    ];

    let total = steps.len();
    let mut timings: Vec<(&str, Duration)> = Vec::new();
    let t_all = Instant::now();
    for (i, (name, step)) in steps.iter().enumerate() {
        if i + 1 < from {
            println!(
                "\n==> ci [{}/{total}] {name}: skipped (--from {from})",
                i + 1
            );
            continue;
        }
        println!("\n==> ci [{}/{total}] {name}", i + 1);
        let t = Instant::now();
        if let Err(e) = step() {
            print_timings(&timings);
            print_skips(&skips.borrow());
            eprintln!("\nci FAILED at step {}/{total} ({name}): {e:#}", i + 1);
            // Exit here rather than return the error: main would print it again, with a
            // backtrace when RUST_BACKTRACE is set.
            std::process::exit(1);
        }
        timings.push((name, t.elapsed()));
    }
    print_timings(&timings);
    print_skips(&skips.borrow());
    let skipped = if from > 1 {
        format!(
            " (steps 1-{} skipped with --from {from}: not a full CI run)",
            from - 1
        )
    } else {
        String::new()
    };
    println!(
        "\nci passed: {} steps in {:.1} s{skipped}",
        timings.len(),
        t_all.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The tests that reported a skip (`test: reason`), or that none did.
fn print_skips(skips: &[String]) {
    println!("\n==> tests skipped: {}", skips.len());
    for s in skips {
        println!("  {s}");
    }
}

fn print_timings(timings: &[(&str, Duration)]) {
    if timings.is_empty() {
        return;
    }
    println!("\n==> ci steps that passed");
    for (name, d) in timings {
        println!("  {:>7.1} s  {name}", d.as_secs_f64());
    }
}

/// The cargo that runs us (set by `cargo run`), so nested calls use the same toolchain.
pub(crate) fn cargo_bin() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// Run cargo with inherited output; fail with the command line when it fails.
fn cargo(args: &[&str]) -> Result<()> {
    let mut cmd = Command::new(cargo_bin());
    cmd.args(args);
    run_cmd(&mut cmd)
}

/// `cargo fmt --all` rather than `"/root/.rustup/…/cargo" "fmt" "--all"`.
fn show(cmd: &Command) -> String {
    let program = Path::new(cmd.get_program());
    let mut s = program
        .file_name()
        .unwrap_or(program.as_os_str())
        .to_string_lossy()
        .into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

pub(crate) fn run_cmd(cmd: &mut Command) -> Result<()> {
    let line = show(cmd);
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {line}"))?;
    if !status.success() {
        bail!("{line} failed ({status})");
    }
    Ok(())
}

fn ebpf_check() -> Result<()> {
    let ebpf = crate::workspace_root()
        .join("kernelkite-ebpf")
        .join("Cargo.toml");
    if !ebpf.exists() {
        println!("skipped: {} does not exist yet", ebpf.display());
        return Ok(());
    }
    crate::build_ebpf::run(&["--check".into()])
        .context("the eBPF object check failed (`cargo xtask build-ebpf --check`)")
}

/// `cargo test --workspace` with `CI=true`, echoing the runner's output as it comes and
/// repeating every `test result:` line, and the failures, at the end.
fn test_workspace(root: &Path, skips: &std::cell::RefCell<Vec<String>>) -> Result<()> {
    run_tests(root, "workspace", &["--workspace"], &[], skips)
}

/// The real-kernel eBPF tests once more with the programs attached as classic
/// tracepoints, as on a kernel without BTF (`--stacks` needs BTF: there its tests check
/// that it is refused).
fn test_classic_hooks(root: &Path, skips: &std::cell::RefCell<Vec<String>>) -> Result<()> {
    run_tests(
        root,
        "classic",
        &[
            "-p",
            "kernelkite",
            "--test",
            "ebpf_trace",
            "--test",
            "ebpf_run",
            "--test",
            "ebpf_export",
            "--test",
            "ebpf_waits",
            "--test",
            "ebpf_cgroup",
            "--test",
            "ebpf_agent",
        ],
        &[("KERNELKITE_HOOKS", "classic")],
        skips,
    )
}

/// `cargo test <which> --no-fail-fast` with `CI=true` and `env`; the skips the tests
/// reported (`pass: test: reason`) are added to `skips`.
fn run_tests(
    root: &Path,
    pass: &str,
    which: &[&str],
    env: &[(&str, &str)],
    skips: &std::cell::RefCell<Vec<String>>,
) -> Result<()> {
    // Binaries first, so tests that run kernelkite or kk-workload find them.
    cargo(&["build", "--workspace", "--bins"])?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), std::path::PathBuf::from);
    let workload = target.join("debug").join("kk-workload");
    // Where tests/support/skip.rs appends the skips: empty at the start of the pass.
    let skip_log = target.join(format!("ci-skips-{pass}.log"));
    std::fs::create_dir_all(&target).with_context(|| format!("mkdir {}", target.display()))?;
    std::fs::write(&skip_log, "")
        .with_context(|| format!("cannot write {}", skip_log.display()))?;

    let mut cmd = Command::new(cargo_bin());
    cmd.arg("test")
        .args(which)
        .arg("--no-fail-fast")
        .env("CI", "true")
        .env("KK_WORKLOAD", &workload)
        .env("KK_SKIP_LOG", &skip_log)
        .envs(env.iter().copied())
        .stdout(Stdio::piped());
    let line = show(&cmd);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {line}"))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for l in BufReader::new(stdout).lines() {
        let l = l.context("reading cargo test output")?;
        println!("{l}");
        if l.starts_with("test result:") {
            results.push(l.clone());
        } else if l.starts_with("test ") && (l.ends_with("FAILED")) {
            failures.push(l.clone());
        }
    }
    let status = child.wait()?;

    println!("\n==> test summary");
    let (mut passed, mut failed, mut ignored) = (0u64, 0u64, 0u64);
    for r in &results {
        println!("  {r}");
        passed += count_before(r, " passed");
        failed += count_before(r, " failed");
        ignored += count_before(r, " ignored");
    }
    println!(
        "  {} test binaries: {passed} passed, {failed} failed, {ignored} ignored",
        results.len()
    );
    for f in &failures {
        println!("  {f}");
    }
    let reported = reported_skips(&skip_log)?;
    println!("  skipped: {}", reported.len());
    for s in &reported {
        println!("    {s}");
    }
    skips
        .borrow_mut()
        .extend(reported.iter().map(|s| format!("{pass}: {s}")));
    if !status.success() {
        bail!("{line} failed ({status})");
    }
    if ignored > 0 {
        println!("  note: {ignored} tests are #[ignore]d");
    }
    Ok(())
}

/// The `test: reason` lines tests/support/skip.rs appended to `log` (one per skip).
fn reported_skips(log: &Path) -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(log).with_context(|| format!("cannot read {}", log.display()))?;
    Ok((text.lines())
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect())
}

/// In "test result: ok. 12 passed; 0 failed; ...", the number before `what`.
fn count_before(line: &str, what: &str) -> u64 {
    line.find(what)
        .and_then(|end| {
            let head = &line[..end];
            let start = head
                .rfind(|c: char| !c.is_ascii_digit())
                .map_or(0, |i| i + 1);
            head[start..].parse().ok()
        })
        .unwrap_or(0)
}

/// A tool CI needs: present when any of `present` exists (a command on PATH or an
/// absolute path), otherwise installed from the first package group apt knows.
struct Need {
    what: &'static str,
    present: &'static [&'static str],
    packages: &'static [&'static [&'static str]],
}

const NEEDS: &[Need] = &[
    Need {
        what: "chromium (HTML report tests)",
        present: &[
            "chromium",
            "chromium-browser",
            "google-chrome",
            "google-chrome-stable",
        ],
        packages: &[&["chromium"], &["chromium-browser"]],
    },
    Need {
        what: "/usr/bin/time",
        present: &["/usr/bin/time"],
        packages: &[&["time"]],
    },
    Need {
        what: "tmux (top's real-terminal tests)",
        present: &["tmux"],
        packages: &[&["tmux"]],
    },
    Need {
        what: "curl (README examples: a /metrics scrape)",
        present: &["curl"],
        packages: &[&["curl"]],
    },
    Need {
        what: "node (a genuine JIT perf map, --stacks)",
        present: &["node", "nodejs"],
        packages: &[&["nodejs"]],
    },
    Need {
        what: "strace",
        present: &["strace"],
        packages: &[&["strace"]],
    },
    Need {
        what: "bpftool",
        present: &["bpftool", "/usr/sbin/bpftool"],
        packages: &[&["bpftool"], &["linux-tools-common", "linux-tools-generic"]],
    },
    Need {
        what: "C compiler and strip (the --stacks tests build a C workload)",
        present: &["gcc"],
        packages: &[&["gcc", "binutils"]],
    },
    Need {
        what: "C++ compiler (cargo fuzz builds libFuzzer)",
        present: &["c++", "g++", "clang++"],
        packages: &[&["g++"]],
    },
    Need {
        what: "redis-server and redis-benchmark (a real idle and busy server, tests/ebpf_explained.rs)",
        present: &["/usr/bin/redis-server"],
        packages: &[&["redis-server", "redis-tools"]],
    },
    Need {
        what: "go (a real Go runtime's idle Ms and g0 stacks, tests/ebpf_explained.rs)",
        present: &["go"],
        packages: &[&["golang-go"]],
    },
    Need {
        what: "nginx (a real server under load, tests/ebpf_explained.rs)",
        present: &["/usr/sbin/nginx"],
        packages: &[&["nginx"], &["nginx-light"]],
    },
    Need {
        what: "ab (the load on nginx)",
        present: &["ab"],
        packages: &[&["apache2-utils"]],
    },
    Need {
        what: "bpftrace (another tracer's syscall counts beside kernelkite's, tests/ebpf_explained.rs)",
        present: &["bpftrace"],
        packages: &[&["bpftrace"]],
    },
    Need {
        what: "gdb (a debugger under exit accounting, tests/run_exit_accounting.rs)",
        present: &["gdb"],
        packages: &[&["gdb"]],
    },
    Need {
        what: "PostgreSQL 15 and pgbench (a real database under load, tests/ebpf_explained.rs)",
        present: &["/usr/lib/postgresql/15/bin/postgres"],
        packages: &[&["postgresql-15"], &["postgresql"]],
    },
    Need {
        what: "make (a real two-stage build, tests/ebpf_critical_path.rs)",
        present: &["make"],
        packages: &[&["make"]],
    },
    Need {
        what: "promtool (Prometheus export tests)",
        present: &["promtool"],
        packages: &[&["prometheus"]],
    },
    Need {
        what: "systemd-analyze (the agent's unit, tests/agent_deploy.rs)",
        present: &["systemd-analyze"],
        packages: &[&["systemd"]],
    },
    Need {
        what: "python3 and pip3 (OTLP export tests)",
        present: &["pip3"],
        packages: &[&["python3", "python3-pip"]],
    },
    Need {
        what: "man (the installed package's man page)",
        present: &["man"],
        packages: &[&["man-db"]],
    },
    Need {
        what: "LLVM 22 development files (bpf-linker)",
        present: &["/usr/lib/llvm-22/bin/llvm-config"],
        packages: &[&["llvm-22-dev"]],
    },
];

fn is_present(candidates: &[&str]) -> bool {
    candidates.iter().any(|c| {
        if c.starts_with('/') {
            Path::new(c).exists()
        } else {
            on_path(c)
        }
    })
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .chain(["/usr/sbin".into(), "/sbin".into()])
            .any(|dir| dir.join(cmd).is_file())
    })
}

fn apt_knows(package: &str) -> bool {
    Command::new("apt-cache")
        .args(["show", "--no-all-versions", package])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn install_dependencies() -> Result<()> {
    let missing: Vec<&Need> = NEEDS.iter().filter(|n| !is_present(n.present)).collect();
    for n in NEEDS {
        let state = if missing.iter().any(|m| m.what == n.what) {
            "missing"
        } else {
            "ok"
        };
        println!("  {:<42} {state}", n.what);
    }
    if !missing.is_empty() {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let sudo: &[&str] = if root { &[] } else { &["sudo", "-E"] };
        let apt = |args: &[&str]| {
            let mut argv: Vec<&str> = sudo.to_vec();
            argv.extend_from_slice(args);
            let mut cmd = Command::new(argv[0]);
            cmd.args(&argv[1..])
                .env("DEBIAN_FRONTEND", "noninteractive");
            run_cmd(&mut cmd)
        };
        apt(&["apt-get", "update"]).context("apt-get update failed")?;
        let mut packages: Vec<&str> = Vec::new();
        for n in &missing {
            let group = n
                .packages
                .iter()
                .find(|g| g.iter().all(|p| apt_knows(p)))
                .with_context(|| {
                    format!(
                        "no package providing {} is available from apt ({:?})",
                        n.what, n.packages
                    )
                })?;
            packages.extend_from_slice(group);
        }
        let mut args = vec!["apt-get", "install", "-y"];
        args.extend_from_slice(&packages);
        apt(&args).with_context(|| format!("apt-get install {} failed", packages.join(" ")))?;
    }

    ensure_python_packages()?;
    crate::fuzz::ensure_cargo_fuzz()?;
    crate::package::ensure_cargo_deb()?;
    // rust-src and bpf-linker, for building the BPF programs (one place knows how).
    crate::build_ebpf::ensure_tools()
}

/// The official OpenTelemetry protobuf bindings the OTLP export tests parse with, and
/// kubernetes-validate (the Kubernetes schemas, bundled; PyYAML with it) for the
/// DaemonSet in tests/agent_deploy.rs.
const PYTHON_IMPORT_CHECK: &str = "import google.protobuf, \
    opentelemetry.proto.collector.trace.v1.trace_service_pb2, kubernetes_validate, yaml";
const PYTHON_PACKAGES: &[&str] = &["opentelemetry-proto", "protobuf", "kubernetes-validate"];

/// `pip install` the Python packages the tests need, when they do not import yet.
/// Debian's own python3 refuses pip installs outside a venv (PEP 668); the packages
/// are test-only and not shipped, so that refusal is overridden.
fn ensure_python_packages() -> Result<()> {
    let imports = || {
        Command::new("python3")
            .args(["-c", PYTHON_IMPORT_CHECK])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let state = if imports() { "ok" } else { "missing" };
    println!(
        "  {:<42} {state}",
        "python opentelemetry-proto, protobuf, kubernetes-validate"
    );
    if imports() {
        return Ok(());
    }
    let pip = |extra: &[&str]| {
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "pip", "install", "--quiet"])
            .args(extra)
            .args(PYTHON_PACKAGES);
        run_cmd(&mut cmd)
    };
    if pip(&[]).is_err() {
        pip(&["--break-system-packages"])
            .with_context(|| format!("pip install {} failed", PYTHON_PACKAGES.join(" ")))?;
    }
    if !imports() {
        bail!("the Python packages were installed but do not import ({PYTHON_IMPORT_CHECK})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{count_before, reported_skips};

    #[test]
    fn reads_the_skips_the_tests_reported() {
        let dir = std::env::temp_dir().join(format!("kk-ci-skips-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips.log");
        std::fs::write(&log, "").unwrap();
        assert!(reported_skips(&log).unwrap().is_empty());
        std::fs::write(&log, "a_test: /x is a tmpfs\n\nother: nosuid mount\n").unwrap();
        assert_eq!(
            reported_skips(&log).unwrap(),
            ["a_test: /x is a tmpfs", "other: nosuid mount"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(reported_skips(&log).is_err(), "a missing log is an error");
    }

    /// Lines of `text` that print a skip with no CI check just before: a test that
    /// would pass under CI without checking anything (docs/TESTING.md, "Skips").
    fn silent_skips(text: &str) -> Vec<usize> {
        let lines: Vec<&str> = text.lines().collect();
        (0..lines.len())
            .filter(|&i| (lines[i].to_ascii_lowercase()).contains("eprintln!(\"skip"))
            .filter(|&i| {
                !lines[i.saturating_sub(8)..i]
                    .iter()
                    .any(|l| l.contains("var_os(\"CI\")"))
            })
            .map(|i| i + 1)
            .collect()
    }

    #[test]
    fn a_skip_is_a_failure_under_ci_or_reported() {
        let silent =
            "    if !ok {\n        eprintln!(\"skipped: no tool\");\n        return;\n    }\n";
        assert_eq!(silent_skips(silent), [2]);
        let checked = "    if std::env::var_os(\"CI\").is_some() {\n        panic!(\"no tool\");\n    }\n    eprintln!(\"SKIP: no tool\");\n";
        assert!(silent_skips(checked).is_empty());

        let root = crate::workspace_root();
        let mut files = Vec::new();
        let mut dirs = vec![root.join("tests"), root.join("kernelkite/src")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        assert!(files.len() > 50, "{} files", files.len());
        let mut found = Vec::new();
        for f in files {
            // The helper itself prints the skips it fails or reports.
            if f.ends_with("tests/support/skip.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            for line in silent_skips(&text) {
                found.push(format!(
                    "{}:{line}",
                    f.strip_prefix(&root).unwrap().display()
                ));
            }
        }
        assert!(
            found.is_empty(),
            "skips printed with no CI check (use tests/support/skip.rs): {found:?}"
        );
    }

    #[test]
    fn parses_test_result_lines() {
        let l = "test result: ok. 12 passed; 1 failed; 3 ignored; 0 measured; 0 filtered out";
        assert_eq!(count_before(l, " passed"), 12);
        assert_eq!(count_before(l, " failed"), 1);
        assert_eq!(count_before(l, " ignored"), 3);
        assert_eq!(count_before("nothing", " passed"), 0);
    }
}
