//! Stacks: where each latency class's time went, by call stack.
//!
//! A bundle's [`StackProfile`] holds time per (thread, class, user stack, kernel stack).
//! Reports join the two stacks of a sample into one, outermost frame first: the user
//! stack from its root (`_start`, `clone3`) to its leaf (the libc call), then the kernel
//! stack from the syscall entry to the scheduler. Samples whose joined stacks read the
//! same (same frame names, modules and source lines) are one stack here, whatever their
//! addresses or threads.
//!
//! Two views: the heaviest stacks per class ([`analyze_stacks`], [`top_stacks`]) and
//! folded-stack lines for flame graphs and other tools ([`folded_lines`]), where frames
//! are compared by their folded text only.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kernelkite_common::LatencyClass;
use serde::Serialize;

use super::Analysis;
use crate::model::{Bundle, ClassTimes, StackFrame, StackProfile, StackSample};

/// One frame of a joined stack, as reports show it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct FrameView {
    /// [`StackFrame::display_name`]: the symbol, else `module+0xoffset`, else the address.
    pub name: String,
    pub kernel: bool,
    /// The module's file name (no directory), when known.
    pub module: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// The frame shown above a user stack that was not unwound to its end
/// (`StackProfile::truncated_stacks`): its callers are unknown, never silently missing.
pub const TRUNCATED_FRAME: &str = "[truncated]";

impl FrameView {
    fn truncated() -> FrameView {
        FrameView {
            name: TRUNCATED_FRAME.to_string(),
            kernel: false,
            module: None,
            file: None,
            line: None,
        }
    }

    fn of(frame: &StackFrame) -> FrameView {
        FrameView {
            name: frame.display_name(),
            kernel: frame.kernel,
            module: frame
                .module
                .as_deref()
                .map(|m| m.rsplit('/').next().unwrap_or(m).to_string()),
            file: frame.file.clone(),
            line: frame.line,
        }
    }

    /// The frame in a folded-stack line: the name with `;` (the frame separator) shown
    /// as `:` and control characters escaped; kernel frames end in `_[k]` (Brendan
    /// Gregg's annotation, which flame graph tools colour and strip for display).
    pub fn folded_name(&self) -> String {
        let mut name = crate::format::clean(&self.name).replace(';', ":");
        if name.is_empty() {
            name.push_str("[unknown]");
        }
        if self.kernel {
            name.push_str("_[k]");
        }
        name
    }
}

/// A thread that spent time in a stack.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ThreadRef {
    pub pid: i32,
    pub tid: i32,
    /// The thread's name (its last comm in the bundle's frames), or `""` when unseen.
    pub comm: String,
}

/// One of the heaviest stacks of a class.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HeavyStack {
    /// The joined stack, outermost frame first (user root ... user leaf, kernel entry ...
    /// kernel leaf). Empty when neither stack was captured.
    pub frames: Vec<FrameView>,
    /// Off-CPU: summed intervals; on_cpu: samples / sample_hz; ns.
    pub total_ns: u64,
    /// Off-CPU intervals, or on-CPU samples.
    pub count: u64,
    /// `total_ns` over the class's time with stacks (0..=1).
    pub share_of_stacks: f64,
    /// `total_ns` over the class's time in the latency classes; `None` when that is 0.
    pub share_of_class: Option<f64>,
    /// The threads that spent time in this stack, by pid and tid.
    pub threads: Vec<ThreadRef>,
}

/// The stacks of one latency class.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassStacks {
    pub class: LatencyClass,
    /// The class's time in the latency classes (every thread, with or without stacks).
    pub class_ns: u64,
    /// The class's time that has a stack. Off-CPU intervals shorter than `min_block_ns`
    /// have none, so this is usually below `class_ns`; on-CPU time is estimated from
    /// samples and may differ from `class_ns` either way.
    pub stack_ns: u64,
    /// `stack_ns` by how it was measured.
    pub parts: TimeParts,
    /// Intervals (off-CPU) or samples (on_cpu) with a stack.
    pub count: u64,
    /// Distinct joined stacks of the class.
    pub distinct_stacks: usize,
    /// The heaviest stacks, by time (ties: by frames), at most the requested number.
    pub top: Vec<HeavyStack>,
}

/// A class's time with stacks, by how it was measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TimeParts {
    /// Intervals at least `min_block_ns` long (and on-CPU samples), ns.
    pub exact_ns: u64,
    /// The estimate for the shorter intervals: each captured with probability
    /// `len / min_block_ns` and counted as `min_block_ns`, ns.
    pub estimated_ns: u64,
    /// Short intervals captured so.
    pub sampled_count: u64,
    /// The part of `exact_ns` of waits still in progress at the end (their time so far).
    pub in_progress_ns: u64,
    /// One standard deviation of `estimated_ns`, bounded from above: the estimate's
    /// variance is `Σ len (threshold - len) ≤ threshold × Σ len`, so with Σ len taken
    /// as the estimate itself, `sqrt(min_block_ns × estimated_ns)`.
    pub estimated_sd_ns: u64,
}

impl TimeParts {
    fn add(&mut self, s: &StackSample, min_block_ns: u64) {
        self.exact_ns = self.exact_ns.saturating_add(s.total_ns);
        self.estimated_ns = self.estimated_ns.saturating_add(s.estimated_ns);
        self.sampled_count = self.sampled_count.saturating_add(s.sampled_count);
        if s.in_progress {
            self.in_progress_ns = self.in_progress_ns.saturating_add(s.total_ns);
        }
        self.estimated_sd_ns = ((min_block_ns as f64) * (self.estimated_ns as f64)).sqrt() as u64;
    }
}

impl ClassStacks {
    /// `stack_ns / class_ns`; `None` when the class has no time.
    pub fn share_of_class(&self) -> Option<f64> {
        share(self.stack_ns, self.class_ns)
    }

    /// The class's time without a stack (0 when sampled on-CPU stacks exceed the
    /// class's exact time).
    pub fn without_stack_ns(&self) -> u64 {
        self.class_ns.saturating_sub(self.stack_ns)
    }
}

/// The heaviest stacks of every class with stacks.
#[derive(Clone, Debug, PartialEq)]
pub struct StacksAnalysis {
    pub sample_hz: u64,
    pub min_block_ns: u64,
    pub captures_lost: u64,
    /// Stack copies the kernel did not send (rate bound, ring half full): those
    /// stacks are frame-pointer walks, cut at the first caller built without one.
    pub stack_copies_lost: u64,
    /// Every class with time in the latency classes or with stack time (those without
    /// stacks have an empty `top`), the class with the most time first (ties: class
    /// order).
    pub classes: Vec<ClassStacks>,
}

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// The class of a sample (validated bundles only name known classes).
fn sample_class(s: &StackSample) -> Option<LatencyClass> {
    LatencyClass::from_name(&s.class)
}

/// The frames of a profile as reports show them, each distinct view once: a bundle has
/// many frames per function (one per return address), and comparing stacks by view ids
/// instead of strings keeps large profiles fast.
struct FrameViews {
    /// Distinct views, in first-seen order.
    views: Vec<FrameView>,
    /// For every frame of the profile, the index of its view.
    of_frame: Vec<u32>,
    /// The view of [`TRUNCATED_FRAME`].
    truncated: u32,
}

impl FrameViews {
    fn new(profile: &StackProfile) -> FrameViews {
        let mut index: HashMap<FrameView, u32> = HashMap::new();
        let mut views = Vec::new();
        let of_frame = profile
            .frames
            .iter()
            .map(|f| {
                *index.entry(FrameView::of(f)).or_insert_with_key(|v| {
                    views.push(v.clone());
                    (views.len() - 1) as u32
                })
            })
            .collect();
        views.push(FrameView::truncated());
        FrameViews {
            truncated: (views.len() - 1) as u32,
            views,
            of_frame,
        }
    }

    /// The joined stack of a sample as view ids, outermost frame first.
    fn joined(&self, profile: &StackProfile, sample: &StackSample) -> Vec<u32> {
        let mut out = Vec::new();
        if sample.user_stack.is_some_and(|u| profile.is_truncated(u)) {
            out.push(self.truncated);
        }
        for stack in [sample.user_stack, sample.kernel_stack]
            .into_iter()
            .flatten()
        {
            // Stacks are stored innermost first.
            for &f in profile.stacks[stack as usize].iter().rev() {
                out.push(self.of_frame[f as usize]);
            }
        }
        out
    }

    fn frames(&self, ids: &[u32]) -> Vec<FrameView> {
        ids.iter()
            .map(|&i| self.views[i as usize].clone())
            .collect()
    }

    /// Stacks in the order of their frames' views (a deterministic tie-break).
    fn cmp(&self, a: &[u32], b: &[u32]) -> std::cmp::Ordering {
        a.iter()
            .map(|&i| &self.views[i as usize])
            .cmp(b.iter().map(|&i| &self.views[i as usize]))
    }
}

/// The last comm of every thread and process seen in the bundle's frames.
/// Every stack sample of a profile with its frames as views, for formats that keep
/// stacks apart per thread (pprof).
pub struct StackRows {
    /// Distinct frames as reports show them; rows index into it.
    pub views: Vec<FrameView>,
    pub rows: Vec<StackRow>,
}

/// One (thread, class, stack)'s time.
pub struct StackRow {
    pub pid: i32,
    pub tid: i32,
    /// Its process's comm (the last frame's), when sampled.
    pub comm: Option<String>,
    pub class: LatencyClass,
    /// Leaf first: kernel frames, then user frames, then `[truncated]` above a user
    /// stack not unwound to its end.
    pub frames_leaf_first: Vec<u32>,
    /// Its time (exact, plus estimated for sampled blocks), ns.
    pub time_ns: u64,
    /// Blocks or on-CPU samples it adds up.
    pub count: u64,
}

/// The rows of `bundle`'s stacks with any time; `None` without stacks.
pub fn stack_rows(bundle: &Bundle) -> Option<StackRows> {
    let profile = bundle.stacks.as_ref()?;
    let (process_names, _) = names(bundle);
    let views = FrameViews::new(profile);
    let rows = (profile.samples.iter())
        .filter(|s| s.time_ns() > 0)
        .filter_map(|s| {
            let mut frames = views.joined(profile, s);
            frames.reverse();
            Some(StackRow {
                pid: s.pid,
                tid: s.tid,
                comm: process_names.get(&s.pid).cloned(),
                class: sample_class(s)?,
                frames_leaf_first: frames,
                time_ns: s.time_ns(),
                count: s.count.saturating_add(s.sampled_count),
            })
        })
        .collect();
    Some(StackRows {
        views: views.views,
        rows,
    })
}

fn names(bundle: &Bundle) -> (BTreeMap<i32, String>, BTreeMap<(i32, i32), String>) {
    let mut procs = BTreeMap::new();
    let mut threads = BTreeMap::new();
    for frame in &bundle.frames {
        for p in &frame.processes {
            procs.insert(p.pid, p.comm.to_string());
            for t in &p.threads {
                threads.insert((p.pid, t.tid), t.comm.to_string());
            }
        }
    }
    (procs, threads)
}

/// The heaviest `top` stacks of each class (or of `only` that class) with time and
/// shares; `None` when the bundle has no stacks.
pub fn analyze_stacks(
    bundle: &Bundle,
    a: &Analysis,
    only: Option<LatencyClass>,
    top: usize,
) -> Option<StacksAnalysis> {
    analyze_stacks_of(bundle, &a.latency_classes, only, top, &BTreeSet::new())
}

/// [`analyze_stacks`] of every thread but those in `leave_out` ((pid, tid)), whose
/// class times are `classes`.
fn analyze_stacks_of(
    bundle: &Bundle,
    classes: &ClassTimes,
    only: Option<LatencyClass>,
    top: usize,
    leave_out: &BTreeSet<(i32, i32)>,
) -> Option<StacksAnalysis> {
    let profile = bundle.stacks.as_ref()?;
    let (_, thread_names) = names(bundle);
    let views = FrameViews::new(profile);
    type Acc = (u64, u64, BTreeSet<(i32, i32)>);
    let mut by_class: BTreeMap<LatencyClass, HashMap<Vec<u32>, Acc>> = BTreeMap::new();
    let mut parts: BTreeMap<LatencyClass, TimeParts> = BTreeMap::new();
    for s in &profile.samples {
        let Some(class) = sample_class(s) else {
            continue;
        };
        if only.is_some_and(|c| c != class) || leave_out.contains(&(s.pid, s.tid)) {
            continue;
        }
        let entry = by_class
            .entry(class)
            .or_default()
            .entry(views.joined(profile, s))
            .or_default();
        entry.0 = entry.0.saturating_add(s.time_ns());
        entry.1 = entry
            .1
            .saturating_add(s.count)
            .saturating_add(s.sampled_count);
        entry.2.insert((s.pid, s.tid));
        parts.entry(class).or_default().add(s, profile.min_block_ns);
    }
    // Every class with time gets a row, stacks or not: a class left out would read as
    // having no time.
    for class in LatencyClass::ALL {
        if classes.get(class) > 0 && only.is_none_or(|c| c == class) {
            by_class.entry(class).or_default();
        }
    }
    let mut classes: Vec<ClassStacks> = by_class
        .into_iter()
        .map(|(class, stacks)| {
            let class_ns = classes.get(class);
            let stack_ns = stacks.values().fold(0u64, |t, v| t.saturating_add(v.0));
            let count = stacks.values().fold(0u64, |t, v| t.saturating_add(v.1));
            let distinct_stacks = stacks.len();
            let mut rows: Vec<(Vec<u32>, Acc)> = stacks.into_iter().collect();
            rows.sort_by(|(xf, x), (yf, y)| y.0.cmp(&x.0).then_with(|| views.cmp(xf, yf)));
            rows.truncate(top);
            let top = rows
                .into_iter()
                .map(|(ids, (total_ns, count, tids))| HeavyStack {
                    frames: views.frames(&ids),
                    total_ns,
                    count,
                    share_of_stacks: share(total_ns, stack_ns).unwrap_or(0.0),
                    share_of_class: share(total_ns, class_ns),
                    threads: tids
                        .into_iter()
                        .map(|(pid, tid)| ThreadRef {
                            pid,
                            tid,
                            comm: thread_names.get(&(pid, tid)).cloned().unwrap_or_default(),
                        })
                        .collect(),
                })
                .collect();
            ClassStacks {
                class,
                class_ns,
                stack_ns,
                parts: parts.get(&class).copied().unwrap_or_default(),
                count,
                distinct_stacks,
                top,
            }
        })
        .collect();
    classes.sort_by(|x, y| y.class_ns.cmp(&x.class_ns).then(x.class.cmp(&y.class)));
    Some(StacksAnalysis {
        sample_hz: profile.sample_hz,
        min_block_ns: profile.min_block_ns,
        captures_lost: profile.captures_lost,
        stack_copies_lost: profile.stack_copies_lost,
        classes,
    })
}

/// The `n` heaviest stacks of `class` (empty when the bundle has no stacks of it).
pub fn top_stacks(bundle: &Bundle, a: &Analysis, class: LatencyClass, n: usize) -> Vec<HeavyStack> {
    analyze_stacks(bundle, a, Some(class), n)
        .and_then(|s| s.classes.into_iter().next())
        .map(|c| c.top)
        .unwrap_or_default()
}

/// The threads that were not idle (the idle rule, `analysis::waits`): the class with the
/// most of their time among those their stacks have, and its `n` heaviest stacks over
/// them; `None` without stacks. Idle threads (parked pool workers, a server's
/// background threads) would otherwise make an idle class look dominant.
pub fn dominant_busy_stacks(
    bundle: &Bundle,
    idle: &crate::analysis::waits::IdleSplit,
    n: usize,
) -> Option<(LatencyClass, Vec<HeavyStack>)> {
    let profile = bundle.stacks.as_ref()?;
    let leave_out: BTreeSet<(i32, i32)> = idle.idle.iter().map(|t| (t.0, t.1)).collect();
    let classes = &idle.busy_classes;
    let class = (profile.samples.iter())
        .filter(|s| s.time_ns() > 0 && !leave_out.contains(&(s.pid, s.tid)))
        .filter_map(sample_class)
        .max_by(|x, y| classes.get(*x).cmp(&classes.get(*y)).then(y.cmp(x)))?;
    let top = analyze_stacks_of(bundle, classes, Some(class), n, &leave_out)
        .and_then(|s| s.classes.into_iter().next())
        .map(|c| c.top)
        .unwrap_or_default();
    Some((class, top))
}

/// The class with the most time in the latency classes among those that have stacks
/// (what `trace` shows the stacks of); `None` without stacks.
pub fn dominant_stack_class(bundle: &Bundle, a: &Analysis) -> Option<LatencyClass> {
    let profile = bundle.stacks.as_ref()?;
    profile
        .samples
        .iter()
        .filter(|s| s.time_ns() > 0)
        .filter_map(sample_class)
        .max_by(|x, y| {
            a.latency_classes
                .get(*x)
                .cmp(&a.latency_classes.get(*y))
                .then(y.cmp(x))
        })
}

/// A single slow syscall with the user stack that made it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlowCallStack {
    /// Start, ns since the session's start.
    pub t_ns: u64,
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    pub name: String,
    /// Its time (so far, when in progress).
    pub duration_ns: u64,
    /// Still running at the end (`Bundle::syscalls_in_progress`).
    pub in_progress: bool,
    /// The caller's user stack, outermost frame first.
    pub frames: Vec<FrameView>,
}

/// The `n` slowest single syscalls that have a user stack, slowest first (ties: earlier
/// first).
pub fn slow_call_stacks(bundle: &Bundle, n: usize) -> Vec<SlowCallStack> {
    let Some(profile) = bundle.stacks.as_ref() else {
        return Vec::new();
    };
    let (_, thread_names) = names(bundle);
    // (t_ns, pid, tid, name, duration, in progress, stack): the completed slow calls,
    // and the calls still running at the end with their time so far.
    type Call<'a> = (u64, i32, i32, &'a str, u64, bool, u32);
    let mut calls: Vec<Call<'_>> = bundle
        .slow_syscalls
        .iter()
        .filter_map(|s| {
            let stack = s.user_stack?;
            Some((
                s.t_ns,
                s.pid,
                s.tid,
                s.name.as_str(),
                s.duration_ns,
                false,
                stack,
            ))
        })
        .chain(bundle.syscalls_in_progress.iter().filter_map(|c| {
            let stack = c.user_stack?;
            Some((
                c.t_ns,
                c.pid,
                c.tid,
                c.name.as_str(),
                c.elapsed_ns,
                true,
                stack,
            ))
        }))
        .collect();
    calls.sort_by(|x, y| y.4.cmp(&x.4).then(x.0.cmp(&y.0)).then(x.2.cmp(&y.2)));
    calls
        .into_iter()
        .take(n)
        .map(
            |(t_ns, pid, tid, name, duration_ns, in_progress, stack)| SlowCallStack {
                t_ns,
                pid,
                tid,
                comm: thread_names.get(&(pid, tid)).cloned().unwrap_or_default(),
                name: name.to_string(),
                duration_ns,
                in_progress,
                frames: (profile
                    .is_truncated(stack)
                    .then(FrameView::truncated)
                    .into_iter())
                .chain(
                    (profile.stacks[stack as usize].iter().rev())
                        .map(|&f| FrameView::of(&profile.frames[f as usize])),
                )
                .collect(),
            },
        )
        .collect()
}

/// What [`folded_lines`] puts in each line besides the frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoldOptions {
    /// Only this class's samples.
    pub class: Option<LatencyClass>,
    /// Start every line with the class name (one graph of all classes).
    pub class_root: bool,
    /// Then the process's comm (one tower per process).
    pub per_process: bool,
}

/// Folded-stack lines (`[class;][comm;]root;...;leaf ns`), one per distinct stack text,
/// sorted, with the summed nanoseconds of every sample that folds to it. Frames are
/// [`FrameView::folded_name`]s; a sample with neither stack is the single frame
/// `[unknown]`. Empty when the bundle has no stacks (or none of the class).
pub fn folded_lines(bundle: &Bundle, opts: &FoldOptions) -> Vec<String> {
    let Some(profile) = bundle.stacks.as_ref() else {
        return Vec::new();
    };
    let (process_names, _) = names(bundle);
    let views = FrameViews::new(profile);
    // Views that fold to the same text (they differ in module or line) are one frame
    // here: `text_of[view]` indexes `texts`.
    let mut texts: Vec<String> = Vec::new();
    let mut text_index: HashMap<String, u32> = HashMap::new();
    let text_of: Vec<u32> = views
        .views
        .iter()
        .map(|v| {
            *text_index.entry(v.folded_name()).or_insert_with_key(|t| {
                texts.push(t.clone());
                (texts.len() - 1) as u32
            })
        })
        .collect();
    // (root frames, joined stack as text ids) -> ns; the line is made once per key.
    let mut sums: HashMap<(Vec<String>, Vec<u32>), u64> = HashMap::new();
    for s in &profile.samples {
        let Some(class) = sample_class(s) else {
            continue;
        };
        if opts.class.is_some_and(|c| c != class) || s.time_ns() == 0 {
            continue;
        }
        let mut roots: Vec<String> = Vec::new();
        if opts.class_root {
            roots.push(class.name().to_string());
        }
        if opts.per_process {
            let comm = process_names
                .get(&s.pid)
                .map(|c| crate::format::clean(c).replace(';', ":"))
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| format!("pid {}", s.pid));
            roots.push(comm);
        }
        let ids = views
            .joined(profile, s)
            .into_iter()
            .map(|v| text_of[v as usize])
            .collect();
        let sum = sums.entry((roots, ids)).or_default();
        *sum = sum.saturating_add(s.time_ns());
    }
    let mut lines: Vec<String> = sums
        .into_iter()
        .map(|((roots, ids), ns)| {
            let mut parts = roots;
            if ids.is_empty() {
                parts.push("[unknown]".to_string());
            }
            parts.extend(ids.iter().map(|&i| texts[i as usize].clone()));
            format!("{} {ns}", parts.join(";"))
        })
        .collect();
    lines.sort();
    lines
}

/// The stack time of `later` that `earlier` did not have yet: two profiles of one
/// running capture (`Session::stack_profile_so_far`), whose frame and stack tables only
/// grow, so a sample's key means the same in both. The agent's
/// `/debug/pprof/profile?seconds=N` is the profile between its start and its end.
pub fn profile_between(earlier: &StackProfile, later: &StackProfile) -> StackProfile {
    fn key(s: &StackSample) -> (i32, i32, &str, Option<u32>, Option<u32>, bool) {
        (
            s.pid,
            s.tid,
            s.class.as_str(),
            s.user_stack,
            s.kernel_stack,
            s.in_progress,
        )
    }
    let before: HashMap<_, &StackSample> = earlier.samples.iter().map(|s| (key(s), s)).collect();
    let samples = (later.samples.iter())
        .filter_map(|s| {
            let mut d = s.clone();
            if let Some(b) = before.get(&key(s)) {
                d.total_ns = s.total_ns.saturating_sub(b.total_ns);
                d.count = s.count.saturating_sub(b.count);
                d.estimated_ns = s.estimated_ns.saturating_sub(b.estimated_ns);
                d.sampled_count = s.sampled_count.saturating_sub(b.sampled_count);
            }
            (d.total_ns > 0 || d.count > 0 || d.estimated_ns > 0).then_some(d)
        })
        .collect();
    StackProfile {
        samples,
        captures_lost: later.captures_lost.saturating_sub(earlier.captures_lost),
        stack_copies: later.stack_copies.saturating_sub(earlier.stack_copies),
        stack_copies_short: later
            .stack_copies_short
            .saturating_sub(earlier.stack_copies_short),
        stack_copies_lost: later
            .stack_copies_lost
            .saturating_sub(earlier.stack_copies_lost),
        ..later.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixture::fixture_to_bundle;

    fn fixture(stacks: serde_json::Value) -> Bundle {
        let v = serde_json::json!({
            "format": "kernelkite-fixture", "version": 1, "backend": "ebpf",
            "host": {"clock_ticks_per_sec": 100, "page_size_bytes": 4096, "num_cpus": 2,
                     "kernel_release": null, "arch": "x86_64"},
            "interval_ms": 1000, "frames_ms": [0, 1000],
            "processes": [{
                "pid": 10, "ppid": 1, "comm": "svc;x", "start_time_ticks": 5,
                "first_frame": 0, "last_frame": 1,
                "utime_ticks": [0, 50], "stime_ticks": [0, 0], "rss_kib": [4, 4],
                "threads": [
                  {"tid": 10, "states": "SS", "class_ns": {"on_cpu": [0, 500000000],
                    "runqueue": [0, 0], "io_wait": [0, 0], "lock_wait": [0, 500000000],
                    "syscall_blocked": [0, 0], "unknown_wait": [0, 0]}},
                  {"tid": 11, "comm": "w1", "states": "SS", "class_ns": {"on_cpu": [0, 0],
                    "runqueue": [0, 0], "io_wait": [0, 0], "lock_wait": [0, 1000000000],
                    "syscall_blocked": [0, 0], "unknown_wait": [0, 0]}}
                ]
            }],
            "stacks": stacks
        });
        fixture_to_bundle(&serde_json::to_vec(&v).unwrap(), "t.json").unwrap()
    }

    fn demo() -> Bundle {
        fixture(serde_json::json!({
            "sample_hz": 100, "min_block_us": 1000,
            "frames": [
                {"id": "lock", "addr": 1, "symbol": "pthread_mutex_lock"},
                {"id": "get", "addr": 2, "symbol": "Cache::get", "file": "c.cc", "line": 8},
                {"id": "get2", "addr": 3, "symbol": "Cache::get", "file": "c.cc", "line": 8},
                {"id": "main", "addr": 4, "symbol": "main"},
                {"id": "strip", "addr": 5, "module": "/lib/libz.so", "module_offset": 4660},
                {"id": "fw", "addr": 6, "kernel": true, "symbol": "futex_wait"},
                {"id": "sys", "addr": 7, "kernel": true, "symbol": "__x64_sys_futex"}
            ],
            "stacks": [
                {"id": "u1", "frames": ["lock", "get", "main"]},
                {"id": "u2", "frames": ["lock", "get2", "main"]},
                {"id": "u3", "frames": ["strip", "main"]},
                {"id": "k", "frames": ["fw", "sys"]}
            ],
            "samples": [
                {"pid": 10, "tid": 10, "class": "lock_wait", "user_stack": "u1",
                 "kernel_stack": "k", "total_ns": 300000000, "count": 3},
                {"pid": 10, "tid": 11, "class": "lock_wait", "user_stack": "u2",
                 "kernel_stack": "k", "total_ns": 600000000, "count": 6},
                {"pid": 10, "tid": 11, "class": "lock_wait", "kernel_stack": "k",
                 "total_ns": 100000000, "count": 1},
                {"pid": 10, "tid": 10, "class": "on_cpu", "user_stack": "u3",
                 "total_ns": 400000000, "count": 40},
                {"pid": 10, "tid": 10, "class": "unknown_wait", "total_ns": 5, "count": 1}
            ]
        }))
    }

    #[test]
    fn heaviest_stacks_join_user_and_kernel_root_first_and_merge_equal_text() {
        let b = demo();
        let a = crate::analysis::analyze(&b);
        let s = analyze_stacks(&b, &a, None, 10).unwrap();
        let classes: Vec<_> = s.classes.iter().map(|c| c.class).collect();
        // By the class's time: lock_wait 1.5 s, on_cpu 0.5 s, unknown_wait 0 s.
        assert_eq!(
            classes,
            [
                LatencyClass::LockWait,
                LatencyClass::OnCpu,
                LatencyClass::UnknownWait
            ]
        );
        let lock = &s.classes[0];
        assert_eq!(lock.class_ns, 1_500_000_000);
        assert_eq!(lock.stack_ns, 1_000_000_000);
        assert_eq!(lock.count, 10);
        // u1 and u2 differ only in an address: one stack.
        assert_eq!(lock.distinct_stacks, 2);
        let top = &lock.top[0];
        assert_eq!(top.total_ns, 900_000_000);
        assert_eq!(top.count, 9);
        assert!((top.share_of_stacks - 0.9).abs() < 1e-12);
        assert!((top.share_of_class.unwrap() - 0.6).abs() < 1e-12);
        let names: Vec<_> = top.frames.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "main",
                "Cache::get",
                "pthread_mutex_lock",
                "__x64_sys_futex",
                "futex_wait"
            ]
        );
        assert_eq!(top.frames[1].line, Some(8));
        let tids: Vec<_> = top
            .threads
            .iter()
            .map(|t| (t.tid, t.comm.as_str()))
            .collect();
        assert_eq!(tids, [(10, "svc;x"), (11, "w1")]);
        // The kernel-only sample.
        assert_eq!(lock.top[1].frames.len(), 2);
        assert!(lock.top[1].frames.iter().all(|f| f.kernel));
        assert_eq!(s.classes[1].top[0].frames[1].name, "libz.so+0x1234");
        assert_eq!(s.classes[2].share_of_class(), None);

        let only = top_stacks(&b, &a, LatencyClass::LockWait, 1);
        assert_eq!(only.len(), 1);
        assert_eq!(only[0], *top);
        assert!(top_stacks(&b, &a, LatencyClass::IoWait, 3).is_empty());
        assert!(slow_call_stacks(&b, 3).is_empty());
        assert_eq!(dominant_stack_class(&b, &a), Some(LatencyClass::LockWait));
    }

    #[test]
    fn slow_calls_with_stacks_slowest_first() {
        let mut b = demo();
        let call = |t_ns, duration_ns, user_stack| crate::model::SlowSyscall {
            t_ns,
            pid: 10,
            tid: 11,
            nr: 202,
            name: "futex".into(),
            duration_ns,
            ret: 0,
            user_stack,
        };
        b.slow_syscalls = vec![
            call(1, 20, Some(0)),
            call(2, 90, None),
            call(3, 50, Some(2)),
            call(4, 50, Some(0)),
        ];
        let calls = slow_call_stacks(&b, 2);
        let got: Vec<_> = calls.iter().map(|c| (c.t_ns, c.duration_ns)).collect();
        assert_eq!(got, [(3, 50), (4, 50)]);
        assert_eq!(calls[0].comm, "w1");
        let names: Vec<_> = calls[0].frames.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["main", "libz.so+0x1234"]);
    }

    #[test]
    fn folded_lines_are_merged_sorted_and_annotated() {
        let b = demo();
        let lines = folded_lines(&b, &FoldOptions::default());
        assert_eq!(
            lines,
            [
                "[unknown] 5",
                "__x64_sys_futex_[k];futex_wait_[k] 100000000",
                "main;Cache::get;pthread_mutex_lock;__x64_sys_futex_[k];futex_wait_[k] 900000000",
                "main;libz.so+0x1234 400000000",
            ]
        );
        let opts = FoldOptions {
            class: Some(LatencyClass::OnCpu),
            class_root: true,
            per_process: true,
        };
        assert_eq!(
            folded_lines(&b, &opts),
            ["on_cpu;svc:x;main;libz.so+0x1234 400000000"]
        );
        // Frames that differ only in their line are one frame in folded text, and two
        // in the heaviest stacks.
        let mut lines_differ = b.clone();
        lines_differ.stacks.as_mut().unwrap().frames[2].line = Some(9);
        assert_eq!(folded_lines(&lines_differ, &FoldOptions::default()), lines);
        let a = crate::analysis::analyze(&lines_differ);
        let s = analyze_stacks(&lines_differ, &a, Some(LatencyClass::LockWait), 5).unwrap();
        assert_eq!(s.classes[0].distinct_stacks, 3);
        let mut none = b.clone();
        none.stacks = None;
        assert!(folded_lines(&none, &FoldOptions::default()).is_empty());
        let a = crate::analysis::analyze(&none);
        assert!(analyze_stacks(&none, &a, None, 3).is_none());
        assert_eq!(dominant_stack_class(&none, &a), None);
    }
}
