//! What a cgroup v2 path names: the container, Kubernetes pod and systemd unit.
//!
//! Container runtimes name the cgroups they make after the container's id (64 hex
//! digits), in these shapes (`fixtures/cgroups/paths.txt` has one of each):
//!
//! | runtime | cgroup driver | shape |
//! |---|---|---|
//! | Docker | systemd | `/system.slice/docker-<id>.scope` |
//! | Docker | cgroupfs | `/docker/<id>` |
//! | containerd (Kubernetes) | systemd | `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid, _ for ->.slice/cri-containerd-<id>.scope` |
//! | any CRI (Kubernetes) | cgroupfs | `/kubepods/<qos>/pod<uid>/<id>` |
//! | CRI-O | systemd | `…/crio-<id>.scope` (`crio-conmon-<id>.scope` is its monitor) |
//! | Podman | systemd | `/machine.slice/libpod-<id>.scope`, rootless below `user@UID.service` (`libpod-conmon-<id>.scope` is its monitor) |
//! | Podman | cgroupfs | `/libpod_parent/libpod-<id>` |
//!
//! A process below a container's cgroup (a sub-cgroup the container made, `init.scope`
//! of a systemd container) belongs to that container: the outermost component that
//! names a container wins, so a container's own cgroups cannot rename it. A monitor's
//! scope (conmon) names no container. The systemd unit is the innermost component that
//! is one (`.service`, `.scope`, `.socket`, `.mount`, `.swap`); slices group units and
//! are not. Paths are untrusted text (a delegated cgroup's owner names its children):
//! parsing never fails, and only exact shapes are recognised (64 lowercase hex digits,
//! a 36-character pod uid).

use serde::Serialize;

use super::bundle::MAX_CGROUP_PATH_BYTES as MAX_PATH_BYTES;

/// What a cgroup path names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CgroupLabels {
    /// The container's full id (64 hex digits).
    pub container_id: Option<String>,
    /// The runtime its cgroup's name shows: `docker`, `containerd`, `cri-o`, `podman`
    /// (`None` where the shape does not say, as with a cgroupfs-driver Kubernetes node).
    pub runtime: Option<&'static str>,
    /// The Kubernetes pod's uid (with dashes).
    pub pod_uid: Option<String>,
    /// The innermost systemd unit (`nginx.service`, `docker-<id>.scope`).
    pub systemd_unit: Option<String>,
}

/// The cgroup v2 path in a /proc/PID/cgroup text: its `0::/path` line (hybrid hosts
/// list their v1 hierarchies too). `None` without one, or past [`MAX_PATH_BYTES`].
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .filter(|p| p.starts_with('/') && p.len() <= MAX_PATH_BYTES)
        .map(str::to_string)
}

/// A container's id as `docker ps` shows it: its first 12 characters.
pub fn short_container_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A pod uid in a cgroup name: 36 characters, `-` (cgroupfs) or `_` (systemd) at the
/// UUID's dash positions, hex elsewhere; returned with dashes.
fn pod_uid(s: &str) -> Option<String> {
    if s.len() != 36 {
        return None;
    }
    let mut out = String::with_capacity(36);
    for (i, b) in s.bytes().enumerate() {
        match (i, b) {
            (8 | 13 | 18 | 23, b'-' | b'_') => out.push('-'),
            (8 | 13 | 18 | 23, _) => return None,
            (_, b'0'..=b'9' | b'a'..=b'f') => out.push(b as char),
            _ => return None,
        }
    }
    Some(out)
}

/// The container a path component names, and its runtime.
fn container_of(component: &str, parent: Option<&str>) -> Option<(String, Option<&'static str>)> {
    const SCOPES: [(&str, &str); 4] = [
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-", "cri-o"),
        ("libpod-", "podman"),
    ];
    let stem = component.strip_suffix(".scope").unwrap_or(component);
    for (prefix, runtime) in SCOPES {
        if let Some(id) = stem.strip_prefix(prefix).filter(|id| is_container_id(id)) {
            return Some((id.to_string(), Some(runtime)));
        }
    }
    // Bare ids: Docker's cgroupfs driver (`/docker/<id>`) and Kubernetes' (`…/pod<uid>/<id>`).
    if is_container_id(component) {
        let runtime = match parent {
            Some("docker") => Some("docker"),
            _ => None,
        };
        return Some((component.to_string(), runtime));
    }
    None
}

fn is_unit(component: &str) -> bool {
    [".service", ".scope", ".socket", ".mount", ".swap"]
        .iter()
        .any(|suffix| component.len() > suffix.len() && component.ends_with(suffix))
}

/// What `path` (from the hierarchy's root) names.
pub fn labels(path: &str) -> CgroupLabels {
    let mut l = CgroupLabels::default();
    let mut parent: Option<&str> = None;
    for component in path.split('/').filter(|c| !c.is_empty()) {
        if l.container_id.is_none() {
            if let Some((id, runtime)) = container_of(component, parent) {
                l.container_id = Some(id);
                l.runtime = runtime;
            }
        }
        if l.pod_uid.is_none() {
            // `kubepods-burstable-pod<uid>.slice` (systemd), `pod<uid>` (cgroupfs).
            let stem = component.strip_suffix(".slice").unwrap_or(component);
            if let Some(at) = stem.rfind("pod") {
                l.pod_uid = pod_uid(&stem[at + 3..]);
            }
        }
        if is_unit(component) {
            l.systemd_unit = Some(component.to_string());
        }
        parent = Some(component);
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fixtures/cgroups/paths.txt`: `path<TAB>container<TAB>runtime<TAB>pod<TAB>unit`,
    /// `-` for none; `#` lines are comments.
    #[test]
    fn real_world_paths_name_their_container_pod_and_unit() {
        let fixture = include_str!("../../../fixtures/cgroups/paths.txt");
        let mut checked = 0;
        for (n, line) in fixture.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 5, "line {}: {line:?}", n + 1);
            let want = |i: usize| (fields[i] != "-").then(|| fields[i].to_string());
            let got = labels(fields[0]);
            assert_eq!(got.container_id, want(1), "line {}: {}", n + 1, fields[0]);
            assert_eq!(got.runtime.map(str::to_string), want(2), "line {}", n + 1);
            assert_eq!(got.pod_uid, want(3), "line {}", n + 1);
            assert_eq!(got.systemd_unit, want(4), "line {}", n + 1);
            checked += 1;
        }
        assert!(checked >= 15, "{checked} fixture lines");
    }

    #[test]
    fn the_v2_line_of_proc_cgroup_is_the_path() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/x\n0::/kk.slice\n";
        assert_eq!(parse_proc_cgroup(hybrid).as_deref(), Some("/kk.slice"));
        assert_eq!(parse_proc_cgroup("0::/\n").as_deref(), Some("/"));
        assert_eq!(parse_proc_cgroup("4:cpu:/x\n"), None);
        let long = format!("0::/{}\n", "a".repeat(MAX_PATH_BYTES));
        assert_eq!(parse_proc_cgroup(&long), None);
        assert_eq!(short_container_id("abc"), "abc");
    }

    #[test]
    fn odd_paths_never_panic() {
        for path in [
            "",
            "/",
            "//",
            "/ü/pod",
            "/pod",
            "/x.service/",
            "/docker/",
            "/\u{0}",
        ] {
            let _ = labels(path);
        }
    }
}
