//! Finding the profiled subtree: the root pids plus every descendant, from the ppid
//! links in every /proc/<pid>/stat.
//!
//! Reading every process's stat on every tick would cost more than sampling the
//! subtree itself on a busy host, so processes found outside the subtree are cached by
//! (pid, inode of /proc/<pid>) and not read again. That is sound because a process
//! outside the subtree can never enter it: children of subtree members are new
//! processes, and an orphan is reparented to one of its own ancestors, which are all
//! outside too. A reused pid gets a new /proc/<pid> inode, so it is read afresh.
//!
//! Processes inside the subtree are read every tick (their ppid may change when they
//! are orphaned), but one that did nothing since the last tick prints the same stat
//! bytes and is not parsed again.
//!
//! Listing /proc itself is skipped while no pid was allocated since the last listing
//! (the last field of /proc/loadavg, the most recently allocated pid, is unchanged): no
//! new process can exist then, so last tick's subtree is the whole candidate list. A
//! full listing still happens at least every [`FULL_LISTING_EVERY`].

use std::io;
use std::time::{Duration, Instant};

use procfs::{FromRead, LoadAverage};

use super::files::{KeptKey, ProcDir, TaskFile};
use super::parse::{self, StatFields};
use super::pidmap::PidMap;

/// Re-list /proc at least this often even when no pid was allocated, so that a pid
/// counter that wrapped all the way around cannot hide a process for long.
pub(crate) const FULL_LISTING_EVERY: Duration = Duration::from_secs(1);

/// Which processes a sample covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// These pids and all their descendants.
    Subtrees(&'a [i32]),
    /// Every descendant of this pid, but not the pid itself: `run` samples everything
    /// below kernelkite, which is the subreaper of the launched tree, so orphans that
    /// were reparented to it count as roots too.
    DescendantsOf(i32),
}

/// The cache key of a scope: the outside/inside split is only valid for one scope.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ScopeKey {
    Subtrees(Vec<i32>),
    DescendantsOf(i32),
}

impl ScopeKey {
    fn of(scope: Scope<'_>) -> ScopeKey {
        match scope {
            Scope::Subtrees(roots) => {
                let mut roots = roots.to_vec();
                roots.sort_unstable();
                roots.dedup();
                ScopeKey::Subtrees(roots)
            }
            Scope::DescendantsOf(pid) => ScopeKey::DescendantsOf(pid),
        }
    }
}

/// Walks /proc each tick and keeps what it learnt about processes outside the subtree.
#[derive(Debug, Default)]
pub(crate) struct TreeWalker {
    scope: Option<ScopeKey>,
    /// pid -> inode of /proc/<pid> for processes known to be outside the subtree.
    outsiders: PidMap<i32, u64>,
    next_outsiders: PidMap<i32, u64>,
    listing: Vec<(i32, u64)>,
    /// Processes whose stat was read this tick (not kernel threads): inode of
    /// /proc/<pid>, raw stat, parsed stat.
    fresh: Vec<(u64, Vec<u8>, StatFields)>,
    /// (ppid, index into `fresh`), sorted: the children map.
    by_ppid: Vec<(i32, usize)>,
    inside: Vec<bool>,
    queue: Vec<usize>,
    /// Last tick's raw and parsed stat of each subtree process.
    last_stat: PidMap<i32, (Vec<u8>, StatFields)>,
    next_last_stat: PidMap<i32, (Vec<u8>, StatFields)>,
    /// Stat buffers to reuse.
    spare: Vec<Vec<u8>>,
    /// The subtree found by the last walk: (pid, inode of /proc/<pid>).
    insiders: Vec<(i32, u64)>,
    /// The most recently allocated pid at the last full listing, when that was, and
    /// whether the next walk must list again.
    listed: Option<(u32, Instant, bool)>,
    loadavg_buf: Vec<u8>,
    /// Last tick's /proc/<pid>/task/<pid>/schedstat of each subtree process's leader
    /// (see `quiet_insiders`).
    last_schedstat: PidMap<i32, Vec<u8>>,
    next_last_schedstat: PidMap<i32, Vec<u8>>,
    /// Insiders this tick whose stat need not be read again.
    quiet: PidMap<i32, ()>,
}

impl TreeWalker {
    /// The stat of every process in the subtree with the inode of its /proc/<pid>,
    /// sorted by pid.
    pub(crate) fn walk(
        &mut self,
        dir: &mut ProcDir,
        scope: Scope<'_>,
    ) -> io::Result<Vec<(u64, StatFields)>> {
        let key = ScopeKey::of(scope);
        let mut full = false;
        if self.scope.as_ref() != Some(&key) {
            self.outsiders.clear();
            self.scope = Some(key);
            full = true;
        }
        let latest_pid = self.latest_pid(dir);
        let now = Instant::now();
        full |= match (self.listed, latest_pid) {
            // A process whose pid was allocated just before the last listing may not
            // have been visible in /proc yet: list once more after any listing.
            (Some((pid, at, again)), Some(latest)) => {
                again || pid != latest || now.duration_since(at) >= FULL_LISTING_EVERY
            }
            _ => true,
        };
        if full {
            dir.list_numeric(format_args!("."), &mut self.listing)?;
            let again = self
                .listed
                .is_none_or(|(pid, _, _)| Some(pid) != latest_pid);
            self.listed = latest_pid.map(|pid| (pid, now, again));
        } else {
            self.listing.clear();
            self.listing.extend_from_slice(&self.insiders);
        }

        self.quiet_insiders(dir);
        self.fresh.clear();
        self.next_outsiders.clear();
        for &(pid, ino) in &self.listing {
            if self.outsiders.get(&pid) == Some(&ino) {
                self.next_outsiders.insert(pid, ino);
                continue;
            }
            if self.quiet.contains_key(&pid) {
                if let Some((bytes, stat)) = self.last_stat.remove(&pid) {
                    self.fresh.push((ino, bytes, stat));
                    continue;
                }
            }
            // A process that vanished since the listing is simply not part of this tick.
            let mut bytes = self.spare.pop().unwrap_or_default();
            let key = KeptKey::process(pid, TaskFile::Stat);
            if dir.read_kept(key, ino, &mut bytes).is_err() {
                self.spare.push(bytes);
                continue;
            }
            let stat = match self.last_stat.remove(&pid) {
                Some((old, stat)) if old == bytes => {
                    self.spare.push(old);
                    stat
                }
                last => {
                    if let Some((old, _)) = last {
                        self.spare.push(old);
                    }
                    match parse::stat(&bytes) {
                        Some(stat) => stat,
                        None => {
                            self.spare.push(bytes);
                            continue;
                        }
                    }
                }
            };
            if stat.kernel_thread {
                self.spare.push(bytes);
                self.next_outsiders.insert(pid, ino);
                continue;
            }
            self.fresh.push((ino, bytes, stat));
        }

        self.by_ppid.clear();
        self.by_ppid.extend(
            self.fresh
                .iter()
                .enumerate()
                .map(|(i, (_, _, s))| (s.ppid, i)),
        );
        self.by_ppid.sort_unstable();

        self.inside.clear();
        self.inside.resize(self.fresh.len(), false);
        self.queue.clear();
        match scope {
            Scope::Subtrees(roots) => {
                for (i, (_, _, s)) in self.fresh.iter().enumerate() {
                    if roots.contains(&s.pid) && !self.inside[i] {
                        self.inside[i] = true;
                        self.queue.push(i);
                    }
                }
            }
            Scope::DescendantsOf(parent) => {
                for &(_, i) in children(&self.by_ppid, parent) {
                    self.inside[i] = true;
                    self.queue.push(i);
                }
            }
        }
        while let Some(i) = self.queue.pop() {
            let pid = self.fresh[i].2.pid;
            for &(_, child) in children(&self.by_ppid, pid) {
                // `inside` also guards against ppid cycles in a corrupt synthetic tree.
                if !self.inside[child] {
                    self.inside[child] = true;
                    self.queue.push(child);
                }
            }
        }

        let mut subtree = Vec::new();
        self.next_last_stat.clear();
        for (i, (ino, bytes, stat)) in self.fresh.drain(..).enumerate() {
            if self.inside[i] {
                self.next_last_stat.insert(stat.pid, (bytes, stat.clone()));
                subtree.push((ino, stat));
            } else {
                self.spare.push(bytes);
                self.next_outsiders.insert(stat.pid, ino);
            }
        }
        // What is left belonged to processes that are gone.
        self.spare
            .extend(self.last_stat.drain().map(|(_, (b, _))| b));
        std::mem::swap(&mut self.last_stat, &mut self.next_last_stat);
        if full {
            std::mem::swap(&mut self.outsiders, &mut self.next_outsiders);
        } else {
            // Without a listing what was outside stays outside, plus any insider that
            // was orphaned to a parent outside.
            let found: Vec<(i32, u64)> = self.next_outsiders.drain().collect();
            self.outsiders.extend(found);
        }
        subtree.sort_unstable_by_key(|(_, s)| s.pid);
        self.insiders.clear();
        self.insiders
            .extend(subtree.iter().map(|(ino, s)| (s.pid, *ino)));
        Ok(subtree)
    }

    /// Find the insiders whose /proc/<pid>/stat cannot have changed since the last tick,
    /// so the walk reuses it instead of reading it (stat is by far the most expensive
    /// file the sampler reads). A single-threaded process whose schedstat (time on CPU,
    /// time waiting, timeslices) did not move has not run: its CPU times, thread count,
    /// name, I/O and children's times cannot have changed. Its ppid can (its parent
    /// exited and it was reparented), which is why nothing is skipped in a tick where
    /// any insider has gone. (New processes are found by listing /proc, whose stat is
    /// always read.) What can go stale: the
    /// state of a thread woken but not yet run, and RSS shrunk by reclaim.
    fn quiet_insiders(&mut self, dir: &mut ProcDir) {
        self.quiet.clear();
        self.next_last_schedstat.clear();
        let mut any_gone = false;
        // Every insider's leader schedstat is read (it is cheap): a failed read is an
        // insider gone, whose children may have been reparented.
        for &(pid, ino) in &self.insiders {
            let single = self
                .last_stat
                .get(&pid)
                .is_some_and(|(_, s)| s.num_threads == 1 && s.state != 'Z');
            let mut bytes = self.last_schedstat.remove(&pid).unwrap_or_default();
            let before = std::mem::take(&mut bytes);
            let key = KeptKey::thread(pid, pid, TaskFile::Schedstat);
            // An empty read is a gone process too (a synthetic tree's removed files).
            if dir.read_kept(key, ino, &mut bytes).is_err() || bytes.is_empty() {
                any_gone = true;
                continue;
            }
            if single && !before.is_empty() && before == bytes {
                self.quiet.insert(pid, ());
            }
            self.next_last_schedstat.insert(pid, bytes);
        }
        if any_gone {
            self.quiet.clear();
        }
        std::mem::swap(&mut self.last_schedstat, &mut self.next_last_schedstat);
    }

    /// The schedstat of `pid`'s leader thread as this tick's walk read it.
    pub(crate) fn leader_schedstat(&self, pid: i32) -> Option<&[u8]> {
        self.last_schedstat.get(&pid).map(Vec::as_slice)
    }

    /// The most recently allocated pid, from /proc/loadavg (`None` when unreadable, e.g.
    /// in a synthetic tree without one: then every walk lists /proc).
    fn latest_pid(&mut self, dir: &mut ProcDir) -> Option<u32> {
        let key = KeptKey::process(0, TaskFile::LoadAvg);
        dir.read_kept(key, 0, &mut self.loadavg_buf).ok()?;
        LoadAverage::from_read(&self.loadavg_buf[..])
            .ok()
            .map(|l| l.latest_pid)
    }
}

fn children(by_ppid: &[(i32, usize)], ppid: i32) -> &[(i32, usize)] {
    let start = by_ppid.partition_point(|&(p, _)| p < ppid);
    let end = by_ppid.partition_point(|&(p, _)| p <= ppid);
    &by_ppid[start..end]
}
