//! `cargo xtask readme [--check]`: the README's examples, run.
//!
//! A ```console block right after a `<!-- readme-check ... -->` comment is a script:
//! its lines that start with `$ ` (or `# `, a root prompt) are commands (a line ending
//! in `\` goes on), the other lines what they print (stdout and stderr). The block runs
//! as one `bash` script in a scratch directory shared by the whole README (so a later
//! block reads what an earlier one wrote), with `samples/`, `fixtures/` and `tests/`
//! linked in, `kernelkite` and `kk-workload` (just built, debug) first on the PATH, and
//! a `CARGO_HOME` of its own.
//! Options in the comment:
//! - `root`: needs root (real eBPF runs); skipped with a note otherwise, an error with
//!   `CI=true`;
//! - `off-path`: `kernelkite` is not on the PATH (as after `sudo`, or before `cargo
//!   install`), only `kk-workload`;
//! - `alias WORD`: WORD in a command stands for the built kernelkite
//!   (`./target/release/kernelkite`).
//!
//! Output lines are compared after [`mask`]: every number (with its unit), hex word and
//! scratch path becomes `#`, runs of spaces one space, so numbers that vary from run to
//! run do not count, but sections, column names and wording do. A line `...` in the
//! README stands for any number of lines, and a line ending in ` ...` for any line that
//! starts with the rest (a part that changes from run to run, cut).
//!
//! `--check` fails listing the blocks whose output drifted; without it the blocks are
//! rewritten with the fresh output (keeping their `...` where the rest still matches).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

const USAGE: &str = "usage: cargo xtask readme [--check]
  Runs every README.md console block marked <!-- readme-check ... --> and compares its
  output, numbers masked, with what the README shows.
  --check: fail when a block drifted (CI); without it, rewrite the blocks.";

const MARKER: &str = "<!-- readme-check";

pub fn run(args: &[String]) -> Result<()> {
    let mut check = false;
    for arg in args {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let root = crate::workspace_root();
    let readme_path = root.join("README.md");
    let readme = fs::read_to_string(&readme_path).context("cannot read README.md")?;
    let blocks = parse(&readme)?;
    let bin_dir = build(&root)?;
    let scratch = std::env::temp_dir().join(format!("kernelkite-readme-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch)?;
    for dir in ["samples", "fixtures", "tests"] {
        std::os::unix::fs::symlink(root.join(dir), scratch.join(dir))?;
    }
    // The PATH's first directory: both programs, or (`off-path`) kk-workload only.
    for (dir, programs) in [
        (".kk-bin", &["kernelkite", "kk-workload"][..]),
        (".kk-workload-bin", &["kk-workload"][..]),
    ] {
        fs::create_dir(scratch.join(dir))?;
        for program in programs {
            std::os::unix::fs::symlink(bin_dir.join(program), scratch.join(dir).join(program))?;
        }
    }
    let is_root = effective_uid() == 0;
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let mut drifted = Vec::new();
    let mut replacements: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let result = (|| -> Result<()> {
        for block in &blocks {
            if block.options.root && !is_root {
                if ci {
                    bail!(
                        "README.md:{}: the block needs root (a real eBPF run), and CI=true",
                        block.first_line + 1
                    );
                }
                println!(
                    "note: README.md:{}: skipped (needs root)",
                    block.first_line + 1
                );
                continue;
            }
            let started = std::time::Instant::now();
            let fresh: Vec<String> = run_block(block, &bin_dir, &scratch)?
                .iter()
                .map(|l| as_shown(l, block, &bin_dir, &scratch, &root))
                .collect();
            println!(
                "README.md:{}: ran in {:.1} s",
                block.first_line + 1,
                started.elapsed().as_secs_f64()
            );
            let masks = Masks::new(&scratch, &root, &bin_dir);
            match compare(&block.lines, &fresh, &masks) {
                Ok(updated) => replacements.push((block.first_line, block.lines.len(), updated)),
                Err(diff) => {
                    drifted.push(format!("README.md:{}: {diff}", block.first_line + 1));
                    replacements.push((block.first_line, block.lines.len(), fresh));
                }
            }
        }
        Ok(())
    })();
    let _ = fs::remove_dir_all(&scratch);
    result?;
    if check {
        if drifted.is_empty() {
            println!("README.md: {} examples match the program", blocks.len());
            return Ok(());
        }
        for d in &drifted {
            eprintln!("{d}");
        }
        bail!(
            "{} README example(s) no longer match what the program prints; run `cargo xtask readme` and review the result",
            drifted.len()
        );
    }
    let mut lines: Vec<String> = readme.lines().map(str::to_string).collect();
    for (first, len, new) in replacements.into_iter().rev() {
        lines.splice(first..first + len, new);
    }
    fs::write(&readme_path, lines.join("\n") + "\n")?;
    println!(
        "README.md: rewrote {} block(s), {} of them drifted",
        blocks.len(),
        drifted.len()
    );
    Ok(())
}

fn effective_uid() -> u32 {
    // /proc/self/status: "Uid: real effective saved fs".
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).and_then(|u| u.parse().ok()))
        })
        .unwrap_or(u32::MAX)
}

#[derive(Debug, Default, PartialEq)]
struct Options {
    root: bool,
    off_path: bool,
    aliases: Vec<String>,
}

/// One checked block: its lines (without the fences) and where they start.
#[derive(Debug)]
struct Block {
    options: Options,
    first_line: usize,
    lines: Vec<String>,
}

fn parse_options(comment: &str) -> Result<Options> {
    let inner = comment
        .trim()
        .strip_prefix(MARKER)
        .and_then(|s| s.strip_suffix("-->"))
        .with_context(|| format!("malformed marker {comment:?}"))?;
    let inner = inner.trim_start_matches(':');
    let mut options = Options::default();
    let mut words = inner.split_whitespace();
    while let Some(word) = words.next() {
        match word {
            "root" => options.root = true,
            "off-path" => options.off_path = true,
            "alias" => options.aliases.push(
                words
                    .next()
                    .with_context(|| format!("`alias` needs a word in {comment:?}"))?
                    .to_string(),
            ),
            other => bail!("unknown readme-check option {other:?} in {comment:?}"),
        }
    }
    Ok(options)
}

fn parse(readme: &str) -> Result<Vec<Block>> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start().starts_with(MARKER) {
            let options = parse_options(lines[i])?;
            let fence = i + 1;
            if lines.get(fence).map(|l| l.trim()) != Some("```console") {
                bail!(
                    "README.md:{}: a readme-check marker must be followed by a ```console block",
                    i + 1
                );
            }
            let end = (fence + 1..lines.len())
                .find(|&j| lines[j].trim() == "```")
                .with_context(|| format!("README.md:{}: unterminated block", fence + 1))?;
            blocks.push(Block {
                options,
                first_line: fence + 1,
                lines: lines[fence + 1..end]
                    .iter()
                    .map(|l| l.to_string())
                    .collect(),
            });
            i = end;
        }
        i += 1;
    }
    Ok(blocks)
}

/// The commands of a block: each with its displayed lines (prompt and continuations).
fn commands(lines: &[String]) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = &lines[i];
        if let Some(cmd) = line.strip_prefix("$ ").or_else(|| line.strip_prefix("# ")) {
            let mut shown = vec![line.clone()];
            let mut text = cmd.to_string();
            while text.ends_with('\\') && i + 1 < lines.len() {
                i += 1;
                shown.push(lines[i].clone());
                text.push('\n');
                text.push_str(&lines[i]);
            }
            out.push((shown, text));
        }
        i += 1;
    }
    out
}

const SEPARATOR: &str = "\u{1e}kernelkite-readme-next\u{1e}";

/// Run a block's commands; the block as it should read: each command's lines followed
/// by what it printed.
fn run_block(block: &Block, bin_dir: &Path, scratch: &Path) -> Result<Vec<String>> {
    let cmds = commands(&block.lines);
    if cmds.is_empty() {
        bail!(
            "README.md:{}: a checked block without a command",
            block.first_line + 1
        );
    }
    let kernelkite = bin_dir.join("kernelkite");
    let mut script = String::from("exec 2>&1\n");
    for (_, text) in &cmds {
        script.push_str(&format!("printf '%s\\n' '{SEPARATOR}'\n"));
        let mut text = text.clone();
        for alias in &block.options.aliases {
            text = text.replace(alias.as_str(), &kernelkite.display().to_string());
        }
        script.push_str(&text);
        script.push('\n');
    }
    let dir = if block.options.off_path {
        ".kk-workload-bin"
    } else {
        ".kk-bin"
    };
    let path = format!(
        "{}:{}",
        scratch.join(dir).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut bash = Command::new("timeout");
    // Not the environment cargo gives xtask (CARGO_TARGET_DIR would send a block's own
    // `cargo build` into the workspace's target directory).
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_") && key != "CARGO_HOME" || key.starts_with("RUSTC") {
            bash.env_remove(&*key);
        }
    }
    // A block that hangs (a server that never says it is ready) fails, after 5 minutes;
    // what a block leaves running in the background is stopped when it ends (its
    // process group), so that it cannot hold the output open or outlive the check.
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut child = bash
        .args(["300", "bash", "--noprofile", "--norc", "-c", &script])
        .current_dir(scratch)
        .env("PATH", path)
        .env_remove("CARGO")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LOG")
        .env("TERM", "dumb")
        // A cargo of its own: a block's `cargo build` then never waits for another
        // cargo's lock on the package cache (it prints that it does).
        .env("CARGO_HOME", scratch.join(".cargo-home"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .context("cannot run timeout(1) and bash")?;
    let mut stdout = child.stdout.take().context("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let status = child.wait()?;
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{}", child.id())])
        .stderr(std::process::Stdio::null())
        .status();
    let out_bytes = reader
        .join()
        .map_err(|_| anyhow::anyhow!("reading a block's output failed"))?;
    if status.code() == Some(124) {
        bail!(
            "README.md:{}: the block did not finish in 5 minutes",
            block.first_line + 1
        );
    }
    let text = String::from_utf8_lossy(&out_bytes);
    let mut parts = text.split(SEPARATOR);
    let _before_first = parts.next();
    let mut fresh = Vec::new();
    for ((shown, _), output) in cmds.iter().zip(parts) {
        fresh.extend(shown.iter().cloned());
        let output = output.strip_prefix('\n').unwrap_or(output);
        fresh.extend(output.lines().map(|l| l.trim_end().to_string()));
    }
    Ok(fresh)
}

/// Build kernelkite and kk-workload (debug, as the tests build them); the directory
/// that holds both.
fn build(root: &Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(cargo)
        .args([
            "build",
            "-p",
            "kernelkite",
            "--bin",
            "kernelkite",
            "-p",
            "kernelkite-workloads",
            "--bin",
            "kk-workload",
        ])
        .current_dir(root)
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build of kernelkite and kk-workload failed");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_absolute() { p } else { root.join(p) })
        .unwrap_or_else(|| root.join("target"));
    let dir = target.join("debug");
    for bin in ["kernelkite", "kk-workload"] {
        if !dir.join(bin).exists() {
            bail!("{} was not built", dir.join(bin).display());
        }
    }
    Ok(dir)
}

/// A fresh line as the README shows it: the scratch directory as `/tmp/demo`, the
/// checkout as `/home/you/kernelkite`, and the built binary as what the block calls it
/// (its `alias`, in the checkout) or `/usr/bin/kernelkite`. The check masks these paths
/// anyway; this keeps the machine's own out of the README.
fn as_shown(line: &str, block: &Block, bin_dir: &Path, scratch: &Path, root: &Path) -> String {
    let checkout = "/home/you/kernelkite";
    let binary = match block.options.aliases.first() {
        Some(alias) => format!("{checkout}/{}", alias.trim_start_matches("./")),
        None => "/usr/bin/kernelkite".to_string(),
    };
    let real_binary = bin_dir
        .join("kernelkite")
        .canonicalize()
        .unwrap_or_else(|_| bin_dir.join("kernelkite"));
    line.replace(&real_binary.display().to_string(), &binary)
        .replace(&scratch.display().to_string(), "/tmp/demo")
        .replace(&root.display().to_string(), checkout)
}

/// Paths that differ from machine to machine, masked like numbers.
struct Masks {
    prefixes: Vec<String>,
}

impl Masks {
    fn new(scratch: &Path, root: &Path, bin_dir: &Path) -> Masks {
        let mut prefixes: Vec<String> = [scratch, bin_dir, root]
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        prefixes.extend(["/tmp/", "/work/", "/home/", "/root/"].map(String::from));
        Masks { prefixes }
    }
}

/// Units that follow a number after a space (`1.5 ms`, `12 MiB`).
const UNITS: &[&str] = &[
    "ns", "µs", "us", "ms", "s", "B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "%", "Hz",
];

/// A line with every varying part replaced: numbers (with a sign, a unit, or letters
/// glued to them: `47s`, `9f3f3d8c`, `0x5d26`) and the varying paths become `#`, a run
/// of `#`s separated by spaces one `#`, a bar of `█` one `█`, and runs of spaces one
/// space.
fn mask(line: &str, masks: &Masks) -> String {
    let mut line = line.to_string();
    for prefix in &masks.prefixes {
        while let Some(at) = line.find(prefix.as_str()) {
            let end = line[at..]
                .find(|c: char| c.is_whitespace() || c == ':' || c == ')' || c == ',')
                .map_or(line.len(), |e| at + e);
            line.replace_range(at..end, "#");
        }
    }
    let chars: Vec<char> = line.chars().collect();
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let prev = if i > 0 { Some(chars[i - 1]) } else { None };
        // A hex word (a checksum, an address): six or more hex digits, one a digit.
        if !prev.is_some_and(is_word) {
            let word: String = chars[i..].iter().take_while(|c| is_word(**c)).collect();
            if word.len() >= 6
                && word
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
                && word.chars().any(|c| c.is_ascii_digit())
            {
                out.push('#');
                i += word.chars().count();
                continue;
            }
        }
        let starts_number = c.is_ascii_digit() && !prev.is_some_and(is_word);
        let signed = (c == '+' || c == '-' || c == '±')
            && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())
            && !prev.is_some_and(is_word);
        if !(starts_number || signed) {
            // A bar or a rule, whose length follows the numbers beside it.
            if c == '█' || c == '─' {
                while chars.get(i + 1) == Some(&c) {
                    i += 1;
                }
            }
            out.push(c);
            i += 1;
            continue;
        }
        i += 1;
        // Digits, and `.`/`,` between digits.
        while i < chars.len()
            && (chars[i].is_ascii_digit()
                || ((chars[i] == '.' || chars[i] == ',')
                    && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())))
        {
            i += 1;
        }
        // Glued letters (`47s`, `0x5d26`, `9f3f3d8c`, `2m`) or `%`.
        while i < chars.len() && (is_word(chars[i]) || chars[i] == '%') {
            i += 1;
        }
        // A unit after a space.
        if chars.get(i) == Some(&' ') {
            let rest: String = chars[i + 1..].iter().collect();
            if let Some(unit) = UNITS.iter().find(|u| {
                rest.starts_with(*u) && !rest[u.len()..].starts_with(|c: char| is_word(c))
            }) {
                i += 1 + unit.chars().count();
            }
        }
        out.push('#');
    }
    // Collapse spaces, then runs of `#`.
    let words: Vec<&str> = out.split_whitespace().collect();
    let mut collapsed: Vec<&str> = Vec::new();
    for w in words {
        if w == "#" && collapsed.last() == Some(&"#") {
            continue;
        }
        collapsed.push(w);
    }
    collapsed.join(" ")
}

/// Whether `expected` (with `...` lines) matches `actual` once masked; on a match, the
/// block as it should now read (`actual`'s lines, the `...` kept); otherwise the first
/// line that differs.
fn compare(expected: &[String], actual: &[String], masks: &Masks) -> Result<Vec<String>, String> {
    let e: Vec<Option<String>> = expected
        .iter()
        .map(|l| (l.trim() != "...").then(|| mask(l, masks)))
        .collect();
    let a: Vec<String> = actual.iter().map(|l| mask(l, masks)).collect();
    // matches[i][j]: e[i..] matches a[j..].
    let (n, m) = (e.len(), a.len());
    let mut matches = vec![vec![false; m + 1]; n + 1];
    matches[n][m] = true;
    for i in (0..n).rev() {
        for j in (0..=m).rev() {
            matches[i][j] = match &e[i] {
                None => matches[i + 1][j] || (j < m && matches[i][j + 1]),
                Some(line) => j < m && line_matches(line, &a[j]) && matches[i + 1][j + 1],
            };
        }
    }
    if !matches[0][0] {
        return Err(first_difference(&e, &a));
    }
    // Walk the match: literal lines take the fresh text, `...` stays.
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n {
        match &e[i] {
            None => {
                if matches[i + 1][j] {
                    out.push(expected[i].clone());
                    i += 1;
                } else {
                    j += 1;
                }
            }
            Some(line) => {
                // A line cut with ` ...` stays cut.
                out.push(if line.ends_with(" ...") {
                    expected[i].clone()
                } else {
                    actual[j].clone()
                });
                i += 1;
                j += 1;
            }
        }
    }
    Ok(out)
}

/// Whether a masked README line matches a masked output line: equal, or, for a README
/// line ending in ` ...`, the output line starts with the rest.
fn line_matches(expected: &str, actual: &str) -> bool {
    match expected.strip_suffix(" ...") {
        Some(prefix) => actual.starts_with(prefix),
        None => expected == actual,
    }
}

/// The first README line with no counterpart in the fresh output, for the error.
fn first_difference(e: &[Option<String>], a: &[String]) -> String {
    let mut j = 0;
    for (i, line) in e.iter().enumerate() {
        let Some(line) = line else {
            // After `...`: find the next literal line anywhere later.
            let Some(next) = e[i + 1..].iter().flatten().next() else {
                return "the output differs".into();
            };
            match a[j..].iter().position(|l| line_matches(next, l)) {
                Some(p) => j += p,
                None => return format!("expected {next:?}, which is not in the output"),
            }
            continue;
        };
        match a.get(j) {
            Some(got) if line_matches(line, got) => j += 1,
            Some(got) => return format!("expected {line:?}, got {got:?} (numbers masked)"),
            None => return format!("expected {line:?}, but the output ended"),
        }
    }
    format!("the output goes on past the README's block: {:?}", a.get(j))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masks() -> Masks {
        Masks::new(
            Path::new("/tmp/kernelkite-readme-1"),
            Path::new("/work/main"),
            Path::new("/work/target/debug"),
        )
    }

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn numbers_units_pids_and_paths_are_masked_but_words_are_not() {
        let m = masks();
        assert_eq!(mask("  on_cpu           279.60 ms   17.7%", &m), "on_cpu #");
        assert_eq!(
            mask("  futex      2431    2.930 s    304 ns", &m),
            "futex #"
        );
        assert_eq!(
            mask(
                "kernelkite: wrote b.json (ebpf backend, 639 ms, 11 processes)",
                &m
            ),
            "kernelkite: wrote b.json (ebpf backend, #, # processes)"
        );
        // Names with digits stay; hex and glued units go.
        assert_eq!(mask("wait4 x86_64 cat+0x5d26", &m), "wait4 x86_64 cat+#");
        assert_eq!(mask("stored 9f3f3d8c, in 2m 47s", &m), "stored #, in #");
        assert_eq!(mask("computed b939a706 decade", &m), "computed # decade");
        assert_eq!(mask("+134.234 ms -90.0% ±1.2 ms", &m), "#");
        assert_eq!(
            mask("details: /work/target/debug/kernelkite summary x.json", &m),
            "details: # summary x.json"
        );
        assert_eq!(mask("3 sleeps: an interrupt", &m), "# sleeps: an interrupt");
        assert_eq!(mask("████████ lock_wait 74%", &m), "█ lock_wait #");
    }

    #[test]
    fn a_changed_column_name_fails_the_check() {
        let m = masks();
        let readme = lines(
            "$ kernelkite summary b.json\n  class                 time   share\n  on_cpu           279.60 ms   17.7%",
        );
        let same = lines(
            "$ kernelkite summary b.json\n  class           time   share\n  on_cpu            1.002 s   3.1%",
        );
        assert_eq!(compare(&readme, &same, &m).unwrap(), same);
        let renamed = lines(
            "$ kernelkite summary b.json\n  class                 time   fraction\n  on_cpu           279.60 ms   17.7%",
        );
        let err = compare(&readme, &renamed, &m).unwrap_err();
        assert!(err.contains("share"), "{err}");
        // A column more, or a section heading reworded, fails too.
        let extra = lines(
            "$ kernelkite summary b.json\n  class                 time   share   steal\n  on_cpu           279.60 ms   17.7%   0 ns",
        );
        assert!(compare(&readme, &extra, &m).is_err());
    }

    #[test]
    fn an_ellipsis_stands_for_any_lines_and_is_kept_on_rewrite() {
        let m = masks();
        let readme = lines("$ cmd\nheader 1\n...\nfooter 2");
        let fresh = lines("$ cmd\nheader 7\nrow a\nrow b\nfooter 9");
        assert_eq!(
            compare(&readme, &fresh, &m).unwrap(),
            lines("$ cmd\nheader 7\n...\nfooter 9")
        );
        let none_between = lines("$ cmd\nheader 7\nfooter 9");
        assert!(compare(&readme, &none_between, &m).is_ok());
        let wrong_footer = lines("$ cmd\nheader 7\nrow a\nfooter changed 9");
        assert!(compare(&readme, &wrong_footer, &m).is_err());
        // A line cut with ` ...` matches what starts the same, and stays cut.
        let readme = lines("$ cmd\nthreads 1/2 ...");
        let fresh = lines("$ cmd\nthreads 7/8 libcwork");
        assert_eq!(compare(&readme, &fresh, &m).unwrap(), readme);
        assert!(compare(&readme, &lines("$ cmd\nthread 7/8 libcwork"), &m).is_err());
        // A rule's length follows the numbers in its title.
        assert_eq!(
            mask("syscalls · pid 1 ───", &m),
            mask("syscalls · pid 12345 ─", &m)
        );
        // Without an ellipsis, a missing or extra line fails.
        let readme = lines("$ cmd\nheader 1");
        assert!(compare(&readme, &lines("$ cmd\nheader 1\nmore"), &m).is_err());
        assert!(compare(&readme, &lines("$ cmd"), &m).is_err());
    }

    #[test]
    fn markers_commands_and_options_are_parsed() {
        let readme = "text\n<!-- readme-check: root alias ./target/release/kernelkite -->\n```console\n# ./target/release/kernelkite run x.json -- true\nkernelkite: wrote x.json\n$ echo a \\\n  b\na b\n```\n";
        let blocks = parse(readme).unwrap();
        assert_eq!(blocks.len(), 1);
        assert!(blocks[0].options.root);
        assert_eq!(blocks[0].options.aliases, ["./target/release/kernelkite"]);
        assert_eq!(blocks[0].first_line, 3);
        let cmds = commands(&blocks[0].lines);
        assert_eq!(cmds.len(), 2);
        assert_eq!(cmds[1].1, "echo a \\\n  b");
        assert!(parse("<!-- readme-check: sometimes -->\n```console\n$ x\n```\n").is_err());
        assert!(parse("<!-- readme-check -->\n```text\n$ x\n```\n").is_err());
    }
}
