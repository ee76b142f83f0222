//! Each process's cgroup and namespace pids (`Bundle::process_identities`), read once
//! per program: when a session first sees a process, and again after its exec (a
//! runtime moves a container's first process into its cgroup before the exec). One
//! home for the eBPF session, `run` on /proc and `top`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::Sampler;
use crate::model::ProcessIdentity;
use crate::source::cgroups;

/// Which processes were read, and the v2 mount their cgroup ids are found below.
#[derive(Debug)]
pub struct IdentityReader {
    v2_mount: Option<PathBuf>,
    /// Read since their last exec.
    known: BTreeSet<i32>,
    /// The last reading kept per pid (cgroup, namespace pids): one equal to it is not
    /// kept again.
    last: BTreeMap<i32, (Option<String>, Vec<i32>)>,
}

impl IdentityReader {
    /// A reader, and when this host has no cgroup v2 hierarchy the line that says so.
    pub fn new() -> (IdentityReader, Option<String>) {
        let (v2_mount, note) = match cgroups::v2_mount() {
            Ok(mount) => (Some(mount), None),
            Err(e) => (None, Some(format!("no cgroup attribution: {e}"))),
        };
        let reader = IdentityReader {
            v2_mount,
            known: BTreeSet::new(),
            last: BTreeMap::new(),
        };
        (reader, note)
    }

    /// `pid`'s identity and its parent's pid, unless it was read since its last exec
    /// or its reading equals the last one kept (the parent's pid is given either way
    /// when read). `None` once it is gone.
    pub fn read(
        &mut self,
        sampler: &mut Sampler,
        pid: i32,
        t_ns: u64,
    ) -> Option<(Option<ProcessIdentity>, Option<i32>)> {
        if !self.known.insert(pid) {
            return None;
        }
        let (identity, ppid) = sampler.identity(pid, t_ns, self.v2_mount.as_deref())?;
        let key = (identity.cgroup.clone(), identity.ns_pids.clone());
        if self.last.get(&pid) == Some(&key) {
            return Some((None, ppid));
        }
        self.last.insert(pid, key);
        Some((Some(identity), ppid))
    }

    /// `pid` exec'd: read it again.
    pub fn exec(&mut self, pid: i32) {
        self.known.remove(&pid);
    }

    /// Forget the processes `live` no longer holds.
    pub fn retain(&mut self, live: impl Fn(i32) -> bool) {
        self.known.retain(|&pid| live(pid));
        self.last.retain(|&pid, _| live(pid));
    }
}
