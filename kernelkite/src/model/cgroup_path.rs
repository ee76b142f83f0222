//! Naming cgroups: the cgroup v2 path of a process (from `/proc/PID/cgroup`) and the
//! container, pod and systemd unit a path names. Pure functions of strings, no I/O.
//!
//! Shapes recognised, one path component at a time (`<id>` is exactly 64 lowercase hex
//! characters, as every runtime below writes it; shorter hex names such as
//! `deadbeef.service` are never container ids):
//!
//! | component | runtime | what it is |
//! |---|---|---|
//! | `docker-<id>.scope` | docker | docker, systemd cgroup driver |
//! | `<id>` below a component `docker` | docker | docker, cgroupfs driver (`/docker/<id>`) |
//! | `cri-containerd-<id>.scope` | containerd | Kubernetes on containerd, systemd driver |
//! | `nerdctl-<id>.scope` | containerd | nerdctl, systemd driver |
//! | `crio-<id>.scope` | cri-o | Kubernetes on CRI-O |
//! | `libpod-<id>.scope`, `libpod-<id>` | podman | podman, systemd (also rootless) and cgroupfs (`/libpod_parent/libpod-<id>`) drivers |
//! | `<id>` anywhere else | none | e.g. Kubernetes, cgroupfs driver (`/kubepods/burstable/pod<uid>/<id>`), where the runtime is not in the name |
//!
//! `crio-conmon-<id>.scope` and `libpod-conmon-<id>.scope` hold the runtime's monitor
//! (conmon), not the container: they name no container and no runtime (the unit field
//! still names the scope). `runtime` is only ever set with `container_id`.
//!
//! Pods: `kubepods[-burstable|-besteffort]-pod<uid>.slice` (systemd driver, the uid's
//! dashes written as `_`, possibly behind a prefix such as kind's `kubelet-`), and
//! `pod<uid>` directly below `kubepods` or `kubepods/{burstable,besteffort}` (cgroupfs
//! driver). A uid is a 36-character UUID, or 32 hex characters (a static pod's uid is
//! the MD5 of its manifest). Reported with dashes.
//!
//! Nesting: a process below a container's cgroup (`docker-<id>.scope/init.scope`, a
//! sub-cgroup the container made) belongs to that container. When several components
//! name containers (docker in docker, a kind node running pods), the innermost one wins,
//! and the pod is the innermost pod component above it. A container names its own
//! sub-cgroups, so it can put a name there that looks like another container's: labels
//! describe a path, they do not authenticate it.
//!
//! The systemd unit is the innermost component that is a unit name (`.service`,
//! `.scope`, `.socket`, `.mount`, `.swap`, `.timer`, `.path`, `.device`, `.target`);
//! slices are not units here. A container's scope is a transient systemd unit, so
//! docker with the systemd driver reports `docker-<id>.scope` as the unit (and
//! `init.scope` for a process of a systemd inside that container).

use serde::Serialize;

/// The longest v2 path [`parse_proc_cgroup`] accepts, in bytes (the kernel's PATH_MAX).
pub const MAX_PATH_BYTES: usize = super::bundle::MAX_CGROUP_PATH_BYTES;

/// The length of a container id, in hex characters.
pub const CONTAINER_ID_CHARS: usize = 64;

/// The length docker and crictl show an id at.
pub const SHORT_ID_CHARS: usize = 12;

/// The cgroup v2 path in a `/proc/PID/cgroup` text: the `0::/path` line. Hybrid hosts
/// also list v1 hierarchies (`4:memory:/x`), which are ignored.
///
/// The kernel does not escape cgroup names there, and a name may hold a newline, so a
/// process could forge lines: a text with a line that is not `N:controllers:path`, or
/// with more than one `0::` line, gives None. So does a path over [`MAX_PATH_BYTES`].
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    let mut found = None;
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        let (hierarchy, rest) = line.split_once(':')?;
        let (controllers, path) = rest.split_once(':')?;
        if hierarchy.is_empty() || !hierarchy.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if hierarchy == "0" && controllers.is_empty() {
            if found.is_some() {
                return None;
            }
            found = Some(path);
        }
    }
    let path = found?;
    if path.is_empty() || path.len() > MAX_PATH_BYTES {
        return None;
    }
    Some(path.to_owned())
}

/// What a cgroup path names. Every field is None when the path does not name it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct CgroupLabels {
    /// The full 64-hex-character container id.
    pub container_id: Option<String>,
    /// "docker", "containerd", "cri-o" or "podman", when the cgroup name says it.
    pub runtime: Option<&'static str>,
    /// The Kubernetes pod uid, with dashes.
    pub pod_uid: Option<String>,
    /// The innermost systemd unit (not slice) in the path.
    pub systemd_unit: Option<String>,
}

/// The labels of a cgroup v2 path (module doc: the shapes). Never panics; allocates
/// only the fields it returns.
pub fn labels(path: &str) -> CgroupLabels {
    let mut parent: Option<&str> = None;
    let mut grandparent: Option<&str> = None;
    let mut container: Option<(&str, Option<&'static str>)> = None;
    let mut pod: Option<&str> = None;
    let mut pod_of_container: Option<&str> = None;
    let mut unit: Option<&str> = None;
    for component in path.split('/').filter(|c| !c.is_empty()) {
        if let Some(uid) = pod_in(component, parent, grandparent) {
            pod = Some(uid);
        }
        if let Some(found) = container_in(component, parent) {
            container = Some(found);
            pod_of_container = pod;
        }
        if is_unit(component) {
            unit = Some(component);
        }
        grandparent = parent;
        parent = Some(component);
    }
    let pod = if container.is_some() {
        pod_of_container
    } else {
        pod
    };
    CgroupLabels {
        container_id: container.map(|(id, _)| id.to_owned()),
        runtime: container.and_then(|(_, runtime)| runtime),
        pod_uid: pod.map(|uid| uid.replace('_', "-")),
        systemd_unit: unit.map(str::to_owned),
    }
}

/// The first 12 characters of a container id, as docker shows it (the whole id when
/// shorter).
pub fn short_container_id(id: &str) -> &str {
    match id.char_indices().nth(SHORT_ID_CHARS) {
        Some((at, _)) => &id[..at],
        None => id,
    }
}

/// Whether `s` is a container id: exactly 64 lowercase hex characters.
pub fn is_container_id(s: &str) -> bool {
    s.len() == CONTAINER_ID_CHARS && is_lower_hex(s)
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Systemd-driver scopes of a container: (prefix, runtime). The monitors'
/// `crio-conmon-`/`libpod-conmon-` scopes fail the id check after the prefix.
const CONTAINER_SCOPES: &[(&str, &str)] = &[
    ("docker-", "docker"),
    ("cri-containerd-", "containerd"),
    ("nerdctl-", "containerd"),
    ("crio-", "cri-o"),
    ("libpod-", "podman"),
];

/// The container id and runtime a component names, given its parent component.
fn container_in<'a>(
    component: &'a str,
    parent: Option<&str>,
) -> Option<(&'a str, Option<&'static str>)> {
    if let Some(stem) = component.strip_suffix(".scope") {
        for &(prefix, runtime) in CONTAINER_SCOPES {
            if let Some(id) = stem.strip_prefix(prefix) {
                if is_container_id(id) {
                    return Some((id, Some(runtime)));
                }
            }
        }
        return None;
    }
    if let Some(id) = component.strip_prefix("libpod-") {
        return is_container_id(id).then_some((id, Some("podman")));
    }
    if is_container_id(component) {
        let runtime = (parent == Some("docker")).then_some("docker");
        return Some((component, runtime));
    }
    None
}

/// The pod uid a component names (as written: `_` for `-` under the systemd driver).
fn pod_in<'a>(
    component: &'a str,
    parent: Option<&str>,
    grandparent: Option<&str>,
) -> Option<&'a str> {
    if let Some(stem) = component.strip_suffix(".slice") {
        let at = stem.rfind("-pod")?;
        let head = &stem[..at];
        let head = head
            .strip_suffix("-burstable")
            .or_else(|| head.strip_suffix("-besteffort"))
            .unwrap_or(head);
        if head != "kubepods" && !head.ends_with("-kubepods") {
            return None;
        }
        let uid = &stem[at + "-pod".len()..];
        return is_pod_uid(uid, b'_').then_some(uid);
    }
    let uid = component.strip_prefix("pod")?;
    let placed = parent == Some("kubepods")
        || (matches!(parent, Some("burstable" | "besteffort")) && grandparent == Some("kubepods"));
    (placed && is_pod_uid(uid, b'-')).then_some(uid)
}

/// A UUID with `separator` between its groups, or 32 hex characters (a static pod).
fn is_pod_uid(s: &str, separator: u8) -> bool {
    let bytes = s.as_bytes();
    match bytes.len() {
        32 => is_lower_hex(s),
        36 => bytes.iter().enumerate().all(|(i, &b)| match i {
            8 | 13 | 18 | 23 => b == separator,
            _ => matches!(b, b'0'..=b'9' | b'a'..=b'f'),
        }),
        _ => false,
    }
}

/// Unit types a cgroup component can be named after (slices excluded on purpose).
const UNIT_SUFFIXES: &[&str] = &[
    ".service", ".scope", ".socket", ".mount", ".swap", ".timer", ".path", ".device", ".target",
];

/// Whether `component` is named like a systemd unit (`nginx.service`; slices are not).
pub fn is_unit_name(component: &str) -> bool {
    is_unit(component)
}

fn is_unit(component: &str) -> bool {
    UNIT_SUFFIXES.iter().any(|suffix| {
        component
            .strip_suffix(suffix)
            .is_some_and(|stem| !stem.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One fixture line: path, container id, runtime, pod uid, unit (tab-separated, `-`
    /// for none).
    fn expected(fields: &[&str]) -> CgroupLabels {
        let opt = |s: &str| (s != "-").then(|| s.to_owned());
        let runtime = match fields[2] {
            "-" => None,
            "docker" => Some("docker"),
            "containerd" => Some("containerd"),
            "cri-o" => Some("cri-o"),
            "podman" => Some("podman"),
            other => panic!("unknown runtime {other:?} in the fixture"),
        };
        CgroupLabels {
            container_id: opt(fields[1]),
            runtime,
            pod_uid: opt(fields[3]),
            systemd_unit: opt(fields[4]),
        }
    }

    #[test]
    fn fixture_paths_have_their_labels() {
        let text = include_str!("../../../fixtures/cgroups/paths.txt");
        let mut checked = 0;
        for (n, line) in text.lines().enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 5, "line {}: {line:?}", n + 1);
            assert_eq!(
                labels(fields[0]),
                expected(&fields),
                "line {}: {}",
                n + 1,
                fields[0]
            );
            checked += 1;
        }
        assert!(checked >= 15, "only {checked} fixture lines");
    }

    #[test]
    fn proc_cgroup_v2_line() {
        assert_eq!(
            parse_proc_cgroup("0::/system.slice/sshd.service\n").as_deref(),
            Some("/system.slice/sshd.service")
        );
        // This host's hybrid shape: v1 lines first, the v2 line last.
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/09cb\n1:cpu:/\n0::/\n";
        assert_eq!(parse_proc_cgroup(hybrid).as_deref(), Some("/"));
        // A colon in the path is part of the path.
        assert_eq!(parse_proc_cgroup("0::/a:b\n").as_deref(), Some("/a:b"));
        // v1 only, nothing, garbage.
        assert_eq!(parse_proc_cgroup("4:memory:/x\n1:cpu:/\n"), None);
        assert_eq!(parse_proc_cgroup(""), None);
        assert_eq!(parse_proc_cgroup("0::\n"), None);
        assert_eq!(parse_proc_cgroup("not a cgroup file"), None);
    }

    #[test]
    fn proc_cgroup_refuses_forged_lines() {
        // A v1 cgroup named "x\n0::/docker/…" would print a second v2 line.
        let forged = format!("4:memory:/x\n0::/docker/{}\n0::/\n", "a".repeat(64));
        assert_eq!(parse_proc_cgroup(&forged), None);
        // A v2 name with a newline leaves a line that is no cgroup line.
        assert_eq!(parse_proc_cgroup("0::/a\nb\n"), None);
        assert_eq!(parse_proc_cgroup("x::/a\n"), None);
    }

    #[test]
    fn proc_cgroup_bounds_the_path() {
        let longest = format!("/{}", "a".repeat(MAX_PATH_BYTES - 1));
        assert_eq!(
            parse_proc_cgroup(&format!("0::{longest}\n")).as_deref(),
            Some(longest.as_str())
        );
        let over = format!("0::/{}\n", "a".repeat(MAX_PATH_BYTES));
        assert_eq!(parse_proc_cgroup(&over), None);
    }

    #[test]
    fn short_ids() {
        let id = "0123456789abcdef".repeat(4);
        assert_eq!(short_container_id(&id), "0123456789ab");
        assert_eq!(short_container_id("abc"), "abc");
        assert_eq!(short_container_id(""), "");
        // Never splits a character.
        assert_eq!(short_container_id("ééééééééééééé"), "éééééééééééé");
    }

    #[test]
    fn container_ids_are_exactly_64_lowercase_hex() {
        let id = "ab".repeat(32);
        assert!(is_container_id(&id));
        assert!(!is_container_id(&id[1..]));
        assert!(!is_container_id(&format!("{id}0")));
        assert!(!is_container_id(&id.to_uppercase()));
    }

    #[test]
    fn odd_paths_never_panic() {
        let id = "c".repeat(64);
        let odd = [
            "",
            "/",
            "//",
            "///docker//",
            "docker-.scope",
            ".scope",
            "-pod.slice",
            "kubepods-pod.slice",
            "/kubepods/pod",
            "/\u{0}/\u{fffd}é/🦀.service",
            &format!("/docker-{id}.scope\n/x"),
            &format!("/docker-{}.scope", &id[..63]),
        ];
        for path in odd {
            let _ = labels(path);
        }
        // Deep and long paths are linear work.
        let deep = format!("/docker-{id}.scope").repeat(10_000);
        assert_eq!(labels(&deep).container_id.as_deref(), Some(id.as_str()));
    }

    #[test]
    fn labels_serialize() {
        let json = serde_json::to_string(&labels("/system.slice/x.service")).unwrap();
        assert_eq!(
            json,
            r#"{"container_id":null,"runtime":null,"pod_uid":null,"systemd_unit":"x.service"}"#
        );
    }
}
