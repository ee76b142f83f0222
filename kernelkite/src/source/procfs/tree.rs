//! Finding the profiled subtree: the root pids plus every descendant, from the ppid
//! links in every /proc/<pid>/stat.
//!
//! Reading every process's stat on every tick would cost more than sampling the
//! subtree itself on a busy host, so processes found outside the subtree are cached by
//! (pid, inode of /proc/<pid>) and not read again. That is sound because a process
//! outside the subtree can never enter it: children of subtree members are new
//! processes, and an orphan is reparented to one of its own ancestors, which are all
//! outside too. A reused pid gets a new /proc/<pid> inode, so it is read afresh.

use std::collections::HashMap;
use std::io;

use procfs::process::Stat;

use super::files::{KeptKey, ProcDir, TaskFile};
use super::parse;

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
    outsiders: HashMap<i32, u64>,
    next_outsiders: HashMap<i32, u64>,
    listing: Vec<(i32, u64)>,
    /// Processes whose stat was read this tick (not kernel threads).
    fresh: Vec<(u64, Stat)>,
    /// (ppid, index into `fresh`), sorted: the children map.
    by_ppid: Vec<(i32, usize)>,
    inside: Vec<bool>,
    queue: Vec<usize>,
    stat_buf: Vec<u8>,
}

impl TreeWalker {
    /// The stat of every process in the subtree with the inode of its /proc/<pid>,
    /// sorted by pid.
    pub(crate) fn walk(
        &mut self,
        dir: &mut ProcDir,
        scope: Scope<'_>,
    ) -> io::Result<Vec<(u64, Stat)>> {
        let key = ScopeKey::of(scope);
        if self.scope.as_ref() != Some(&key) {
            self.outsiders.clear();
            self.scope = Some(key);
        }
        dir.list_numeric(format_args!("."), &mut self.listing)?;

        self.fresh.clear();
        self.next_outsiders.clear();
        for &(pid, ino) in &self.listing {
            if self.outsiders.get(&pid) == Some(&ino) {
                self.next_outsiders.insert(pid, ino);
                continue;
            }
            // A process that vanished since the listing is simply not part of this tick.
            let key = KeptKey::process(pid, TaskFile::Stat);
            if dir.read_kept(key, ino, &mut self.stat_buf).is_err() {
                continue;
            }
            let Some(stat) = parse::stat(&self.stat_buf) else {
                continue;
            };
            if parse::is_kernel_thread(&stat) {
                self.next_outsiders.insert(pid, ino);
                continue;
            }
            self.fresh.push((ino, stat));
        }

        self.by_ppid.clear();
        self.by_ppid
            .extend(self.fresh.iter().enumerate().map(|(i, (_, s))| (s.ppid, i)));
        self.by_ppid.sort_unstable();

        self.inside.clear();
        self.inside.resize(self.fresh.len(), false);
        self.queue.clear();
        match scope {
            Scope::Subtrees(roots) => {
                for (i, (_, s)) in self.fresh.iter().enumerate() {
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
            let pid = self.fresh[i].1.pid;
            for &(_, child) in children(&self.by_ppid, pid) {
                // `inside` also guards against ppid cycles in a corrupt synthetic tree.
                if !self.inside[child] {
                    self.inside[child] = true;
                    self.queue.push(child);
                }
            }
        }

        let mut subtree = Vec::new();
        for (i, (ino, stat)) in self.fresh.drain(..).enumerate() {
            if self.inside[i] {
                subtree.push((ino, stat));
            } else {
                self.next_outsiders.insert(stat.pid, ino);
            }
        }
        std::mem::swap(&mut self.outsiders, &mut self.next_outsiders);
        subtree.sort_unstable_by_key(|(_, s)| s.pid);
        Ok(subtree)
    }
}

fn children(by_ppid: &[(i32, usize)], ppid: i32) -> &[(i32, usize)] {
    let start = by_ppid.partition_point(|&(p, _)| p < ppid);
    let end = by_ppid.partition_point(|&(p, _)| p <= ppid);
    &by_ppid[start..end]
}
