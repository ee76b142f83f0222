//! Finding cgroups: where the cgroup v2 hierarchy is mounted, the directory
//! `--cgroup PATH` names, the cgroup `--container ID` names, and the processes below one.
//!
//! The v2 hierarchy is wherever /proc/self/mountinfo shows a `cgroup2` file system:
//! /sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid one. A cgroup's
//! id (what the BPF programs compare) is its directory's inode number on cgroup2, and
//! its level the number of components below the hierarchy's root. Container ids come
//! from the cgroups' names (`model::cgroup_path`). Walks of the hierarchy are bounded
//! and never follow a link (cgroupfs has none, but a path given can).

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use crate::model::cgroup_path::{labels, short_container_id};

/// `statfs` f_type of cgroup2.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
/// Deepest a walk goes (the kernel's default `cgroup.max.depth` is unlimited; real
/// hierarchies are under 10 deep).
const MAX_WALK_DEPTH: usize = 32;
/// Most directories a walk visits.
const MAX_WALK_DIRS: usize = 100_000;

/// A cgroup v2 directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupDir {
    /// Its directory below the v2 mount.
    pub dir: PathBuf,
    /// Its path from the hierarchy's root ("/" for the root), as /proc/PID/cgroup shows.
    pub path: String,
    /// The kernel's cgroup id: the directory's inode.
    pub id: u64,
    /// Components below the hierarchy's root (the root: 0).
    pub level: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(
        "cgroup v2 is not mounted (this host has cgroup v1 only): mount it (`mount -t cgroup2 none /sys/fs/cgroup/unified`) or trace by --pid"
    )]
    NoV2,
    #[error("no cgroup at {0}: list the hierarchy with `ls {1}` (or `systemd-cgls`)")]
    Missing(String, String),
    #[error("{0} is not a cgroup v2 directory (the v2 hierarchy is mounted at {1})")]
    NotV2(String, String),
    #[error(
        "no container's cgroup matches \"{0}\" (looked for docker-, cri-containerd-, crio- and libpod- scopes and /docker/, /kubepods/ ids below {1}): check the id with `docker ps --no-trunc` or `crictl ps`"
    )]
    NoContainer(String, String),
    #[error("container id prefix \"{0}\" matches {1} containers ({2}): give more characters")]
    Ambiguous(String, usize, String),
    #[error("\"{0}\" is not a container id (hex digits)")]
    BadId(String),
}

/// The mount points and super options of the file systems of type `fstype` in a
/// /proc/self/mountinfo text, in order.
pub fn mounts_of_type<'a>(
    mountinfo: &'a str,
    fstype: &'a str,
) -> impl Iterator<Item = (PathBuf, &'a str)> + 'a {
    mountinfo.lines().filter_map(move |line| {
        // `id parent major:minor root mount-point options [optional…] - fstype source super-options`
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split(' ');
        if right.next()? != fstype {
            return None;
        }
        let super_options = right.nth(1).unwrap_or("");
        let mount_point = left.split(' ').nth(4)?;
        Some((PathBuf::from(unescape_octal(mount_point)), super_options))
    })
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = (bytes.get(i + 1..i + 4))
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The first cgroup2 mount point in a mountinfo text.
pub fn v2_mount_from_mountinfo(mountinfo: &str) -> Option<PathBuf> {
    mounts_of_type(mountinfo, "cgroup2").next().map(|(p, _)| p)
}

/// Where this host mounts the cgroup v2 hierarchy.
pub fn v2_mount() -> Result<PathBuf, CgroupError> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    v2_mount_from_mountinfo(&mountinfo).ok_or(CgroupError::NoV2)
}

/// The cgroup `arg` names: a directory below the v2 mount, or a path from the
/// hierarchy's root (`/system.slice/nginx.service`).
pub fn resolve_dir(arg: &Path) -> Result<CgroupDir, CgroupError> {
    let mount = v2_mount()?;
    let shown = || arg.display().to_string();
    let candidate = if arg.starts_with(&mount) {
        arg.to_path_buf()
    } else {
        mount.join(arg.strip_prefix("/").unwrap_or(arg))
    };
    let missing = || CgroupError::Missing(shown(), mount.display().to_string());
    let dir = candidate.canonicalize().map_err(|_| missing())?;
    if !dir.starts_with(&mount) {
        return Err(CgroupError::NotV2(shown(), mount.display().to_string()));
    }
    if !is_cgroup2(&dir) {
        return Err(CgroupError::NotV2(shown(), mount.display().to_string()));
    }
    cgroup_dir(&mount, dir).ok_or_else(missing)
}

/// `dir` (canonical, below `mount`) as a [`CgroupDir`].
fn cgroup_dir(mount: &Path, dir: PathBuf) -> Option<CgroupDir> {
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    if !meta.is_dir() {
        return None;
    }
    let below = dir.strip_prefix(mount).ok()?;
    let parts: Vec<String> = (below.components())
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    Some(CgroupDir {
        path: format!("/{}", parts.join("/")),
        level: parts.len() as u32,
        id: meta.ino(),
        dir,
    })
}

fn is_cgroup2(dir: &Path) -> bool {
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into the zeroed struct; the path is NUL-terminated.
    unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        libc::statfs(path.as_ptr(), &mut fs) == 0 && fs.f_type as i64 == CGROUP2_SUPER_MAGIC
    }
}

/// The cgroup of the container whose id is or starts with `prefix`.
pub fn resolve_container(prefix: &str) -> Result<CgroupDir, CgroupError> {
    let mount = v2_mount()?;
    resolve_container_under(&mount, prefix)
}

/// [`resolve_container`] in the hierarchy mounted at `mount` (tests: any directory).
pub fn resolve_container_under(mount: &Path, prefix: &str) -> Result<CgroupDir, CgroupError> {
    let prefix = prefix.to_ascii_lowercase();
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CgroupError::BadId(prefix));
    }
    // Outermost matches only: a container's own sub-cgroups name it too.
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    walk(mount, &mut |dir, path| match labels(path).container_id {
        Some(id) if id.starts_with(&prefix) => {
            if !found.iter().any(|(f, _)| *f == id) {
                found.push((id, dir.to_path_buf()));
            }
            false
        }
        _ => true,
    });
    match found.len() {
        0 => Err(CgroupError::NoContainer(
            prefix,
            mount.display().to_string(),
        )),
        1 => {
            let dir = found.pop().expect("one").1;
            cgroup_dir(mount, dir)
                .ok_or_else(|| CgroupError::Missing(prefix, mount.display().to_string()))
        }
        n => {
            found.sort();
            let some: Vec<&str> = (found.iter().take(3))
                .map(|(id, _)| short_container_id(id))
                .collect();
            Err(CgroupError::Ambiguous(prefix, n, some.join(", ")))
        }
    }
}

/// Visit the cgroups below `root` (not `root`), parents first, with their path from
/// `root`; `visit` returns whether to go below one. Bounded by [`MAX_WALK_DEPTH`] and
/// [`MAX_WALK_DIRS`]; links are not followed.
fn walk(root: &Path, visit: &mut impl FnMut(&Path, &str) -> bool) {
    let mut stack: Vec<(PathBuf, String, usize)> = vec![(root.to_path_buf(), String::new(), 0)];
    let mut visited = 0;
    while let Some((dir, path, depth)) = stack.pop() {
        if depth >= MAX_WALK_DEPTH {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            visited += 1;
            if visited > MAX_WALK_DIRS {
                return;
            }
            let child = format!("{path}/{}", entry.file_name().to_string_lossy());
            if visit(&entry.path(), &child) {
                stack.push((entry.path(), child, depth + 1));
            }
        }
    }
}

/// Every pid in `cgroup.procs` of `dir` and of the cgroups below it (bounded as
/// [`walk`]); unreadable files are skipped.
pub fn processes_in(dir: &Path) -> Vec<i32> {
    let mut pids = procs_of(dir);
    walk(dir, &mut |child, _| {
        pids.extend(procs_of(child));
        true
    });
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn procs_of(dir: &Path) -> Vec<i32> {
    (std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default())
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 1 0:23 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev shared:10 - cgroup2 cgroup2 rw
27 25 0:25 / /sys/fs/cgroup/cpu rw,nosuid shared:11 - cgroup cgroup rw,cpu
";

    #[test]
    fn the_v2_mount_is_found_in_mountinfo() {
        assert_eq!(
            v2_mount_from_mountinfo(HYBRID),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let pure =
            "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            v2_mount_from_mountinfo(pure),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        let escaped = "30 1 0:26 / /mnt/my\\040cgroups rw - cgroup2 none rw\n";
        assert_eq!(
            v2_mount_from_mountinfo(escaped),
            Some(PathBuf::from("/mnt/my cgroups"))
        );
        let v1_only = HYBRID
            .lines()
            .filter(|l| !l.contains("cgroup2"))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(v2_mount_from_mountinfo(&v1_only), None);
        assert!(CgroupError::NoV2.to_string().contains("cgroup v1 only"));
        let cpu: Vec<_> = mounts_of_type(HYBRID, "cgroup").collect();
        assert_eq!(cpu, vec![(PathBuf::from("/sys/fs/cgroup/cpu"), "rw,cpu")]);
    }

    fn tree(paths: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for p in paths {
            std::fs::create_dir_all(root.path().join(p.trim_start_matches('/'))).unwrap();
        }
        root
    }

    #[test]
    fn a_container_is_found_by_a_unique_prefix_and_two_are_refused() {
        let a = format!("ab12{}", "0".repeat(60));
        let b = format!("ab34{}", "0".repeat(60));
        let root = tree(&[
            &format!("/system.slice/docker-{a}.scope/init.scope"),
            &format!("/kubepods/burstable/pod8f4b2c1e-3d5a-4b6c-9e7f-0a1b2c3d4e5f/{b}"),
            "/system.slice/nginx.service",
        ]);
        let found = resolve_container_under(root.path(), "AB12").unwrap();
        assert_eq!(found.path, format!("/system.slice/docker-{a}.scope"));
        assert_eq!(found.level, 2);
        assert_eq!(resolve_container_under(root.path(), &b).unwrap().level, 4);
        let err = resolve_container_under(root.path(), "ab")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("2 containers (ab1200000000, ab3400000000)"),
            "{err}"
        );
        let err = resolve_container_under(root.path(), "ff")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no container"), "{err}");
        assert!(matches!(
            resolve_container_under(root.path(), "xyz"),
            Err(CgroupError::BadId(_))
        ));
    }

    #[test]
    fn processes_in_a_subtree_come_from_every_cgroup_procs() {
        let root = tree(&["/a/b", "/a/c", "/d"]);
        let write = |p: &str, s: &str| std::fs::write(root.path().join(p), s).unwrap();
        write("a/cgroup.procs", "1\n2\n");
        write("a/b/cgroup.procs", "3\n");
        write("a/c/cgroup.procs", "");
        write("d/cgroup.procs", "9\n");
        assert_eq!(processes_in(&root.path().join("a")), vec![1, 2, 3]);
    }
}
