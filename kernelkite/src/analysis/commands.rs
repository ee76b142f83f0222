//! Processes named the way their users name them: from each process's command line
//! (`Bundle::command_lines`), the part that tells one `rustc` or `python3` from the
//! next (`rustc --crate-name serde`, `python3 manage.py runserver`).

use std::collections::BTreeMap;

use crate::model::{Bundle, CommandLine};

/// The most characters of a short command.
const MAX_SHORT_CHARS: usize = 60;
/// Arguments after the program name a short command keeps (options are skipped).
const MAX_SHORT_ARGS: usize = 2;

/// Each pid's latest command line (the program it ran last).
pub fn latest_by_pid(bundle: &Bundle) -> BTreeMap<i32, &CommandLine> {
    let mut out: BTreeMap<i32, &CommandLine> = BTreeMap::new();
    for line in &bundle.command_lines {
        let later = out.get(&line.pid).is_none_or(|l| l.t_ns <= line.t_ns);
        if later {
            out.insert(line.pid, line);
        }
    }
    out
}

/// The distinguishing part of a command line: the program's file name, then the crate
/// a `rustc` builds (`--crate-name NAME`), or else the first arguments that are not
/// options (`python3 manage.py runserver`, `cc foo.c`; an absolute path by its file
/// name); at most 60 characters.
pub fn short_command(argv: &[String]) -> String {
    let Some(program) = argv.first() else {
        return String::new();
    };
    let name = program.rsplit('/').next().unwrap_or(program);
    let mut out = name.to_string();
    let args = &argv[1..];
    if is_process_title(program) {
        // The program wrote its own title over its arguments (setproctitle): nginx's
        // "nginx: master process /usr/sbin/nginx", postgres's "postgres: walwriter". It
        // is its name as `ps` shows it, paths and all (its last path's file name read
        // "nginx -g daemon on;", or "ngx" once cut).
        let parts: Vec<&str> = (argv.iter())
            .map(|a| a.trim())
            .filter(|a| !a.is_empty())
            .collect();
        out = parts.join(" ");
    } else if let Some(i) = args.iter().position(|a| a == "--crate-name") {
        if let Some(krate) = args.get(i + 1) {
            out.push_str(" --crate-name ");
            out.push_str(krate);
        }
    } else {
        for a in args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .take(MAX_SHORT_ARGS)
        {
            // An absolute path by its file name: `cc symbols.o`, not the build
            // directory (`if=/dev/zero` and `src/lib.rs` stay as they are).
            let a = match a.rsplit_once('/') {
                Some((_, file)) if a.starts_with('/') && !file.is_empty() && !a.contains(' ') => {
                    file
                }
                _ => a,
            };
            out.push(' ');
            out.push_str(a);
        }
    }
    if out.chars().count() > MAX_SHORT_CHARS {
        out = out.chars().take(MAX_SHORT_CHARS - 1).collect();
        out.push('…');
    }
    // One line, whatever the arguments held.
    out.replace(['\n', '\r', '\t'], " ")
}

/// Whether `argv[0]` is a title a program set for itself rather than the program it
/// ran: a word followed by a colon and a space (`nginx: worker process`, `postgres:
/// checkpointer`, `sshd: root@pts/0`), which no path-like program name starts with.
fn is_process_title(program: &str) -> bool {
    program
        .split_once(": ")
        .is_some_and(|(head, _)| !head.is_empty() && !head.contains('/') && !head.contains(' '))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nginx's and postgres's titles, as /proc/PID/cmdline holds them (one argument,
    /// padded with empty ones, or split at spaces).
    #[test]
    fn process_titles_read_as_ps_shows_them() {
        let nginx = argv(&[
            "nginx: master process /usr/sbin/nginx -g daemon on; master_process on;",
            "",
            "",
        ]);
        assert_eq!(
            short_command(&nginx),
            "nginx: master process /usr/sbin/nginx -g daemon on; master_…"
        );
        let worker = argv(&["nginx: worker process", ""]);
        assert_eq!(short_command(&worker), "nginx: worker process");
        let pg_one = argv(&["postgres: 15/main: checkpointer "]);
        assert_eq!(short_command(&pg_one), "postgres: 15/main: checkpointer");
        // A program path with a colon in a directory name is no title.
        let odd = argv(&["/opt/a: b/bin/tool", "x"]);
        assert_eq!(short_command(&odd), "tool x");
    }

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn short_commands_name_what_tells_runs_apart() {
        let rustc = argv(&[
            "/root/.rustup/toolchains/stable/bin/rustc",
            "--edition=2021",
            "--crate-name",
            "serde",
            "src/lib.rs",
        ]);
        assert_eq!(short_command(&rustc), "rustc --crate-name serde");
        let py = argv(&["python3", "-u", "manage.py", "runserver", "0:8000"]);
        assert_eq!(short_command(&py), "python3 manage.py runserver");
        assert_eq!(short_command(&argv(&["/bin/sleep", "5"])), "sleep 5");
        let cc = argv(&["cc", "/tmp/b/deps/x/symbols.o", "-o", "/tmp/b/app"]);
        assert_eq!(short_command(&cc), "cc symbols.o app");
        let dd = argv(&["dd", "if=/dev/zero", "bs=64k"]);
        assert_eq!(short_command(&dd), "dd if=/dev/zero bs=64k");
        assert_eq!(short_command(&argv(&["cc", "-c", "-O2"])), "cc");
        assert_eq!(short_command(&[]), "");
        let long = argv(&["sh", "-c", &"x".repeat(200)]);
        assert_eq!(short_command(&long).chars().count(), MAX_SHORT_CHARS);
        assert_eq!(short_command(&argv(&["sh", "-c", "a\nb"])), "sh a b");
    }

    #[test]
    fn the_latest_command_line_of_a_pid_wins() {
        let host = crate::model::HostConstants {
            clock_ticks_per_sec: 100,
            page_size_bytes: 4096,
            num_cpus: 1,
            kernel_release: None,
            arch: "x86_64".into(),
            time_accounting: None,
        };
        let mut bundle = Bundle::new(crate::model::Backend::Ebpf, host, 100);
        for (t_ns, a) in [(5, "sh"), (9, "make"), (1, "kernelkite")] {
            bundle.command_lines.push(CommandLine {
                t_ns,
                pid: 7,
                argv: argv(&[a]),
            });
        }
        assert_eq!(latest_by_pid(&bundle)[&7].argv, argv(&["make"]));
    }
}
