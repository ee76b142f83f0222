//! Where each process lives beyond its host pid (`Bundle::process_identities`): its
//! cgroup v2 path and id, the container, Kubernetes pod and systemd unit that path
//! names (`model::cgroup_path`), and its pid inside its own pid namespace.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use crate::model::cgroup_path::labels;
use crate::model::{Bundle, ProcessIdentity};

/// A process's cgroup and namespace, derived from its latest identity reading.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Placement {
    /// Its cgroup v2 path from the hierarchy's root (/proc/PID/cgroup).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The kernel's id of that cgroup (its directory's inode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_id: Option<u64>,
    /// The container the path names (64 hex digits), and its runtime.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<String>,
    /// The Kubernetes pod's uid the path names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The innermost systemd unit the path names (`nginx.service`, `session-3.scope`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub systemd_unit: Option<String>,
    /// Its pid in its own pid namespace (the last `NSpid`), when that is not the host's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_pid: Option<i32>,
}

impl Placement {
    /// What one identity reading says.
    pub fn of(identity: &ProcessIdentity) -> Placement {
        let l = identity.cgroup.as_deref().map(labels).unwrap_or_default();
        Placement {
            cgroup: identity.cgroup.clone(),
            cgroup_id: identity.cgroup_id,
            container_id: l.container_id,
            container_runtime: l.runtime.map(str::to_string),
            pod_uid: l.pod_uid,
            systemd_unit: l.systemd_unit,
            ns_pid: (identity.ns_pids.len() > 1)
                .then(|| identity.ns_pids.last().copied())
                .flatten(),
        }
    }

    /// How a report names the group it belongs to: the container (short id), else the
    /// systemd unit, else the cgroup path.
    pub fn group_name(&self) -> Option<String> {
        if let Some(id) = &self.container_id {
            return Some(format!(
                "container {}",
                crate::model::cgroup_path::short_container_id(id)
            ));
        }
        self.systemd_unit.clone().or_else(|| self.cgroup.clone())
    }
}

/// Each pid's latest placement (the identity read last: after its last exec).
pub fn latest_by_pid(bundle: &Bundle) -> BTreeMap<i32, Placement> {
    let mut latest: BTreeMap<i32, &ProcessIdentity> = BTreeMap::new();
    for identity in &bundle.process_identities {
        if latest
            .get(&identity.pid)
            .is_none_or(|l| l.t_ns <= identity.t_ns)
        {
            latest.insert(identity.pid, identity);
        }
    }
    latest
        .into_iter()
        .map(|(pid, i)| (pid, Placement::of(i)))
        .collect()
}

/// The processes of one container, unit or cgroup together.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct GroupRow {
    /// `container <short id>`, a systemd unit, or a cgroup path ([`Placement::group_name`]).
    pub name: String,
    /// The cgroup of its first process (a container's processes can sit in sub-cgroups).
    pub cgroup: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    pub processes: u64,
    /// Σ of its processes' CPU (as each process row's `cpu_seconds`).
    pub cpu_seconds: f64,
    /// Σ of its processes' classes.
    #[schemars(with = "crate::model::schema::ClassTimes")]
    #[serde(serialize_with = "crate::model::class_times_by_name")]
    pub classes: crate::model::ClassTimes,
}

/// The processes grouped by container, unit or cgroup, most CPU first; empty when no
/// process's cgroup is known.
pub fn groups(processes: &[super::ProcessRow]) -> Vec<GroupRow> {
    let mut by_name: BTreeMap<String, GroupRow> = BTreeMap::new();
    for p in processes {
        let Some(place) = &p.placement else { continue };
        let Some(name) = place.group_name() else {
            continue;
        };
        let row = by_name.entry(name.clone()).or_insert_with(|| GroupRow {
            name,
            cgroup: place.cgroup.clone(),
            container_id: place.container_id.clone(),
            pod_uid: place.pod_uid.clone(),
            processes: 0,
            cpu_seconds: 0.0,
            classes: Default::default(),
        });
        row.processes += 1;
        row.cpu_seconds += p.cpu_seconds.unwrap_or(0.0);
        row.classes = row.classes.saturating_add(&p.classes);
    }
    let mut rows: Vec<GroupRow> = by_name.into_values().collect();
    rows.sort_by(|a, b| {
        b.cpu_seconds
            .total_cmp(&a.cpu_seconds)
            .then(a.name.cmp(&b.name))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::test_builders::host;
    use crate::model::Backend;

    #[test]
    fn the_latest_reading_names_the_container_and_the_namespace_pid() {
        let mut bundle = Bundle::new(Backend::Ebpf, host(), 100);
        let id = "a".repeat(64);
        bundle.process_identities = vec![
            ProcessIdentity {
                t_ns: 0,
                pid: 7,
                cgroup: Some("/user.slice".into()),
                cgroup_id: Some(1),
                ns_pids: vec![7],
            },
            ProcessIdentity {
                t_ns: 5,
                pid: 7,
                cgroup: Some(format!("/system.slice/docker-{id}.scope")),
                cgroup_id: Some(2),
                ns_pids: vec![7, 1],
            },
        ];
        let p = &latest_by_pid(&bundle)[&7];
        assert_eq!(p.container_id.as_deref(), Some(id.as_str()));
        assert_eq!(p.container_runtime.as_deref(), Some("docker"));
        assert_eq!(p.cgroup_id, Some(2));
        assert_eq!(p.ns_pid, Some(1));
        assert_eq!(p.group_name().unwrap(), format!("container {}", &id[..12]));
    }
}
