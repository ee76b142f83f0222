//! `waits` renderers: each thread's sleeps by what ended them, as sentences and a JSON
//! document (`docs/JSON.md`, "waits").

use serde_json::{json, Value};

use super::{fmt_ns, fmt_share};
use crate::analysis::commands::short_command;
use crate::analysis::waits::{ThreadWaits, WokenBy};

/// Version of the waits JSON document.
pub const WAITS_SCHEMA_VERSION: u32 = 1;

/// Wakers listed per thread in the text (the JSON lists all).
pub const TOP_WAKERS: usize = 5;

/// The sleep class as the sentence says it.
fn class_phrase(class: &str) -> &str {
    match class {
        // Not "for the lock": a condvar or a parked runtime thread waits in a futex too.
        "lock_wait" => "in lock_wait",
        "io_wait" => "for I/O",
        "syscall_blocked" => "in blocking syscalls",
        "unknown_wait" => "outside syscalls",
        other => other,
    }
}

/// Who a waker is, in words.
fn waker_name(w: &WokenBy) -> String {
    match w.kind.as_str() {
        "thread" => format!(
            "{} (pid {}, tid {}){}",
            w.comm.as_deref().unwrap_or("?"),
            w.pid.unwrap_or(0),
            w.tid.unwrap_or(0),
            // Its own softirq, run inside its syscall: a local (loopback) send.
            w.source
                .as_deref()
                .map(|s| format!(" through its own {s} (a local send)"))
                .unwrap_or_default()
        ),
        "interrupt" => match w.source.as_deref() {
            Some("timer") => "a timer".to_string(),
            Some("unknown") | None => "an interrupt".to_string(),
            Some(s) => format!("an interrupt ({s})"),
        },
        _ if w.source.as_deref() == Some("group_exit") => {
            "nothing (its process exited while it slept)".to_string()
        }
        _ => "nothing (still asleep at the end)".to_string(),
    }
}

/// What the waker did, in the class's terms: a timer ended the wait by its own timeout
/// (it "timed out"; no one released or signalled anything); a thread's futex wake may
/// be a lock's release or a condvar's signal, which the wakeup cannot tell apart.
fn verb(class: &str, waker: &WokenBy) -> &'static str {
    if waker.kind == "interrupt" && waker.source.as_deref() == Some("timer") {
        return "ended it: the wait timed out";
    }
    match class {
        "lock_wait" => "woke it (a release or a signal)",
        "io_wait" => "completed it",
        _ => "woke it",
    }
}

/// The text report.
pub fn waits_text(threads: &[ThreadWaits]) -> String {
    let mut out = String::from("kernelkite waits: what ended each thread's sleeps\n");
    let mut ordered: Vec<&ThreadWaits> = threads.iter().collect();
    // Busy threads first, then by sleep time.
    ordered.sort_by(|a, b| a.idle.cmp(&b.idle).then(b.sleep_ns.cmp(&a.sleep_ns)));
    let idle: Vec<&&ThreadWaits> = ordered.iter().filter(|t| t.idle).collect();
    for t in ordered.iter().filter(|t| !t.idle) {
        out.push('\n');
        out.push_str(&thread_text(t));
    }
    if !idle.is_empty() {
        out.push_str(&format!(
            "\nidle ({} threads asleep through the session or never woken):\n",
            idle.len()
        ));
        for t in idle {
            out.push_str(&format!(
                "  {} (pid {}, tid {}{}): asleep {} of {}\n",
                name(t),
                t.pid,
                t.tid,
                command_suffix(t),
                fmt_ns(t.sleep_ns as f64),
                fmt_ns(t.wall_ns as f64)
            ));
        }
    }
    out
}

fn name(t: &ThreadWaits) -> &str {
    if t.comm.is_empty() {
        "?"
    } else {
        &t.comm
    }
}

/// `, COMMAND` after the ids: the distinguishing part of its process's command line,
/// when known and saying more than the comm.
fn command_suffix(t: &ThreadWaits) -> String {
    match t.argv.as_deref().map(short_command) {
        Some(short) if !short.is_empty() && short != t.comm => format!(", {short}"),
        _ => String::new(),
    }
}

fn thread_text(t: &ThreadWaits) -> String {
    let mut out = format!(
        "{} (pid {}, tid {}{}): {} asleep of {}\n",
        name(t),
        t.pid,
        t.tid,
        command_suffix(t),
        fmt_ns(t.sleep_ns as f64),
        fmt_ns(t.wall_ns as f64)
    );
    // One sentence per class, largest first, naming its main waker.
    let mut classes: Vec<(&str, u64)> = Vec::new();
    for w in &t.woken_by {
        match classes.iter_mut().find(|(c, _)| *c == w.class) {
            Some(e) => e.1 += w.ns,
            None => classes.push((&w.class, w.ns)),
        }
    }
    classes.sort_by_key(|c| std::cmp::Reverse(c.1));
    for (class, total) in classes {
        let wakers: Vec<&WokenBy> = t.woken_by.iter().filter(|w| w.class == class).collect();
        let top = wakers[0];
        let share = if total > 0 {
            top.ns as f64 / total as f64
        } else {
            0.0
        };
        out.push_str(&format!(
            "  {} waited {} {}; {} {} {} of the time\n",
            name(t),
            fmt_ns(total as f64),
            class_phrase(class),
            waker_name(top),
            verb(class, top),
            fmt_share(share)
        ));
        for w in wakers.iter().skip(1).take(TOP_WAKERS - 1) {
            out.push_str(&format!(
                "    {} {}, {} sleeps: {}\n",
                fmt_ns(w.ns as f64),
                fmt_share(w.ns as f64 / total.max(1) as f64),
                w.count,
                waker_name(w)
            ));
        }
        if wakers.len() > TOP_WAKERS {
            out.push_str(&format!(
                "    ... {} more in --json\n",
                wakers.len() - TOP_WAKERS
            ));
        }
    }
    out
}

/// The JSON document: `threads`, each with `pid`, `tid`, `comm`, `idle` and `woken_by`
/// (`class`, `kind`, `pid`, `tid`, `comm`, `ns`, `count`, and `source` for interrupts).
pub fn waits_json(threads: &[ThreadWaits]) -> Value {
    let threads: Vec<Value> = threads
        .iter()
        .map(|t| {
            json!({
                "pid": t.pid,
                "tid": t.tid,
                "comm": t.comm,
                "argv": t.argv,
                "idle": t.idle,
                "wall_ns": t.wall_ns,
                "sleep_ns": t.sleep_ns,
                "not_woken_ns": t.not_woken_ns,
                "woken_by": t.woken_by.iter().map(|w| json!({
                    "class": w.class,
                    "kind": w.kind,
                    "source": w.source,
                    "pid": w.pid,
                    "tid": w.tid,
                    "comm": w.comm,
                    "ns": w.ns,
                    "count": w.count,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "schema_version": WAITS_SCHEMA_VERSION,
        "kind": "waits",
        "threads": threads,
    })
}
