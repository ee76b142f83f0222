//! Finding cgroups on the cgroup v2 hierarchy: where it is mounted, a directory given
//! by the user, a container given by an id prefix, the processes in a cgroup subtree,
//! the cgroup of a process.
//!
//! - The mount is the first `cgroup2` line of `/proc/self/mountinfo`: `/sys/fs/cgroup`
//!   on a pure v2 host, `/sys/fs/cgroup/unified` on a hybrid one. A v1-only host has
//!   none, and says so.
//! - A cgroup is given as a directory below the mount (`/sys/fs/cgroup/my.slice`) or as
//!   a path inside the hierarchy (`/my.slice`, tried below the mount when it is not
//!   itself below it). It is canonicalized, must stay below the mount, and must be a
//!   directory on a cgroup2 file system (statfs); its id is its inode number there,
//!   which is the kernel's cgroup id (what `bpf_get_current_cgroup_id` returns).
//! - A container is found by walking the hierarchy and naming each cgroup with
//!   [`labels`] (the shapes: `model::cgroup_path`). The outermost cgroup naming the
//!   container is its own; the sub-cgroups it made carry the same id.
//! - Walks never follow symlinks and stop at [`MAX_DEPTH`] levels and [`MAX_DIRS`]
//!   directories: a container can make cgroups below its own.

use std::ffi::{CString, OsString};
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use crate::model::cgroup_path::{labels, parse_proc_cgroup, short_container_id};

/// statfs f_type of a cgroup2 file system (linux/magic.h).
pub const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// How deep a walk goes below its starting cgroup.
pub const MAX_DEPTH: usize = 32;

/// How many directories a walk visits at most.
pub const MAX_DIRS: usize = 100_000;

/// The most of a `/proc/PID/cgroup` file read (a path is at most 4 KiB per hierarchy).
pub const MAX_PROC_CGROUP_BYTES: u64 = 64 << 10;

/// The most of a `cgroup.procs` file read: 4M pids (the largest pid_max) of 8 bytes.
pub const MAX_PROCS_BYTES: u64 = 32 << 20;

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// Why a cgroup could not be found. Each renders as one line saying what to do.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroup v2 is not mounted (this host has cgroup v1 only): mount it with `mount -t cgroup2 none /sys/fs/cgroup/unified`, or trace by --pid")]
    V1Only,
    #[error("cgroup v2 is not mounted: mount it with `mount -t cgroup2 none /sys/fs/cgroup`, or trace by --pid")]
    NotMounted,
    #[error("cannot read /proc/self/mountinfo: {source}: is /proc mounted?")]
    Mountinfo {
        #[source]
        source: io::Error,
    },
    #[error("no cgroup at {}: list the hierarchy with `ls {}`", path.display(), mount.display())]
    Missing { path: PathBuf, mount: PathBuf },
    #[error("{} is outside the cgroup v2 mount {}: give a directory below it, or a path in the hierarchy such as /system.slice", path.display(), mount.display())]
    Outside { path: PathBuf, mount: PathBuf },
    #[error("{} is not a directory on a cgroup2 file system: give one below {}", path.display(), mount.display())]
    NotCgroup2 { path: PathBuf, mount: PathBuf },
    #[error("cannot read {}: {source}: run kernelkite as root, or trace by --pid", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("container id prefix {prefix:?} is not 1 to 64 hex characters: give the id `docker ps` or `crictl ps` shows")]
    BadPrefix { prefix: String },
    #[error("{name:?} is neither a container id (hex) nor a systemd unit name: give the id `docker ps` or `crictl ps` shows, or a unit such as nginx.service")]
    BadUnit { name: String },
    #[error("no systemd unit {name:?}{} has a cgroup below {}: list them with `systemd-cgls` or `systemctl list-units`", Truncated(*truncated), mount.display())]
    NoUnit {
        name: String,
        mount: PathBuf,
        truncated: bool,
    },
    #[error("{count} cgroups are named {name:?} ({}, {}): give the cgroup path to --cgroup", first.display(), second.display())]
    AmbiguousUnit {
        name: String,
        count: usize,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("no container matches {prefix:?}{}: searched the cgroup names of docker (docker-<id>.scope, /docker/<id>), containerd (cri-containerd-<id>.scope, nerdctl-<id>.scope), CRI-O (crio-<id>.scope), podman (libpod-<id>) and 64-hex names (/kubepods/…/<id>) below {}; check the id with `docker ps --no-trunc` or `crictl ps`", Truncated(*truncated), mount.display())]
    NoContainer {
        prefix: String,
        mount: PathBuf,
        truncated: bool,
    },
    #[error(
        "container id prefix {prefix:?} matches {count} containers ({}): give more characters",
        ShortIds(ids)
    )]
    Ambiguous {
        prefix: String,
        count: usize,
        /// Up to 3 of the matching ids, sorted.
        ids: Vec<String>,
    },
    #[error("container {} names {count} separate cgroups ({}, {}): give the cgroup directory instead", short_container_id(id), first.display(), second.display())]
    Scattered {
        id: String,
        count: usize,
        first: PathBuf,
        second: PathBuf,
    },
}

/// " (the search stopped at N directories)" when a walk was cut short.
struct Truncated(bool);

impl fmt::Display for Truncated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 {
            write!(
                f,
                " (the search stopped at {MAX_DIRS} directories or {MAX_DEPTH} levels)"
            )
        } else {
            Ok(())
        }
    }
}

/// "ab12…, ab34…": short ids, each followed by an ellipsis.
struct ShortIds<'a>(&'a [String]);

impl fmt::Display for ShortIds<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, id) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}…", short_container_id(id))?;
        }
        Ok(())
    }
}

/// A cgroup on the v2 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupDir {
    /// Absolute, below the v2 mount.
    pub dir: PathBuf,
    /// In-hierarchy path: "/" for the root, "/a/b" else (non-UTF-8 bytes replaced).
    pub path: String,
    /// The kernel's cgroup id: the directory's inode number on cgroup2.
    pub id: u64,
    /// Components below the root; the root is 0.
    pub level: u32,
}

/// The mount points and super options of the file systems of type `fstype` in a
/// `/proc/self/mountinfo` text, in order.
///
/// A line: `id parent major:minor root mountpoint options [optional fields…] - fstype
/// source superoptions`; the mount point has `\ooo` octal escapes (`\040` for a space).
pub fn mounts_of_type<'a>(
    text: &'a str,
    fstype: &'a str,
) -> impl Iterator<Item = (PathBuf, &'a str)> + 'a {
    text.lines().filter_map(move |line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let dash = fields.iter().skip(6).position(|f| *f == "-")? + 6;
        (fields.get(dash + 1) == Some(&fstype)).then(|| {
            (
                unescape(fields[4]),
                fields.get(dash + 3).copied().unwrap_or(""),
            )
        })
    })
}

/// The mount point of the first `cgroup2` file system in a `/proc/self/mountinfo` text.
pub fn v2_mount_from_mountinfo(text: &str) -> Option<PathBuf> {
    mounts_of_type(text, "cgroup2")
        .next()
        .map(|(mount, _)| mount)
}

/// Whether a mountinfo text has a cgroup v1 hierarchy.
fn has_v1(text: &str) -> bool {
    mounts_of_type(text, "cgroup").next().is_some()
}

/// A mountinfo field with its `\ooo` escapes decoded.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| {
            bytes[i] == b'\\' && d[0] <= b'3' && d.iter().all(|b| (b'0'..=b'7').contains(b))
        });
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
    PathBuf::from(OsString::from_vec(out))
}

/// The directory of hierarchy path `path` (as /proc/PID/cgroup gives it) below the
/// hierarchy mounted at `mount`, component by component; `None` for a `.` or `..`
/// component, which could leave the mount (cgroupfs has no symlinks).
pub fn below(mount: &Path, path: &str) -> Option<PathBuf> {
    let mut dir = mount.to_path_buf();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if part == "." || part == ".." {
            return None;
        }
        dir.push(part);
    }
    Some(dir)
}

/// The cgroup v2 mount point of this host.
pub fn v2_mount() -> Result<PathBuf, CgroupError> {
    let text = fs::read_to_string(MOUNTINFO).map_err(|source| CgroupError::Mountinfo { source })?;
    v2_mount_from_mountinfo(&text).ok_or(if has_v1(&text) {
        CgroupError::V1Only
    } else {
        CgroupError::NotMounted
    })
}

/// A cgroup given by the user: a directory below the v2 mount, or a path in the
/// hierarchy (module doc).
pub fn resolve_dir(arg: &Path) -> Result<CgroupDir, CgroupError> {
    let mount = v2_mount()?;
    let found = locate(&mount, arg)?;
    check_cgroup2(&found.dir, &mount)?;
    Ok(found)
}

/// `arg` below `mount`, canonicalized, checked to stay below it and to be a directory;
/// no file system type check (tests run it on plain directories).
fn locate(mount: &Path, arg: &Path) -> Result<CgroupDir, CgroupError> {
    let io_err = |path: &Path, source: io::Error| match source.kind() {
        io::ErrorKind::NotFound => CgroupError::Missing {
            path: path.to_owned(),
            mount: mount.to_owned(),
        },
        _ => CgroupError::Io {
            path: path.to_owned(),
            source,
        },
    };
    let root = fs::canonicalize(mount).map_err(|e| io_err(mount, e))?;
    let candidate = if arg.is_absolute() && (arg.starts_with(mount) || arg.starts_with(&root)) {
        arg.to_owned()
    } else {
        // In-hierarchy: its components below the mount ("/" alone is the root).
        let mut joined = root.clone();
        joined.extend(
            arg.components()
                .filter(|c| !matches!(c, Component::RootDir)),
        );
        joined
    };
    let dir = fs::canonicalize(&candidate).map_err(|e| io_err(&candidate, e))?;
    let Ok(below) = dir.strip_prefix(&root) else {
        return Err(CgroupError::Outside {
            path: arg.to_owned(),
            mount: mount.to_owned(),
        });
    };
    let meta = fs::metadata(&dir).map_err(|e| io_err(&dir, e))?;
    if !meta.is_dir() {
        return Err(CgroupError::NotCgroup2 {
            path: dir,
            mount: mount.to_owned(),
        });
    }
    let mut path = String::new();
    let mut level = 0u32;
    for name in below.iter() {
        path.push('/');
        path.push_str(&name.to_string_lossy());
        level += 1;
    }
    if path.is_empty() {
        path.push('/');
    }
    Ok(CgroupDir {
        id: meta.ino(),
        dir,
        path,
        level,
    })
}

/// Refuses a directory that is not on a cgroup2 file system.
fn check_cgroup2(dir: &Path, mount: &Path) -> Result<(), CgroupError> {
    let not_cgroup2 = || CgroupError::NotCgroup2 {
        path: dir.to_owned(),
        mount: mount.to_owned(),
    };
    let c_path = CString::new(dir.as_os_str().as_bytes()).map_err(|_| not_cgroup2())?;
    // SAFETY: statfs is plain old data, all zeroes is a valid value.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a buffer of the right type, both live for the call.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut buf) } != 0 {
        return Err(CgroupError::Io {
            path: dir.to_owned(),
            source: io::Error::last_os_error(),
        });
    }
    // f_type's integer type differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    let f_type = buf.f_type as i64;
    if f_type == CGROUP2_SUPER_MAGIC {
        Ok(())
    } else {
        Err(not_cgroup2())
    }
}

/// The cgroup of the container whose id starts with `prefix` (hex), or else of the
/// systemd unit named `prefix` (`nginx.service`, `nginx`, a `systemd-nspawn` machine's
/// `machine-web.scope`), on this host's v2 hierarchy.
pub fn resolve_container(prefix: &str) -> Result<CgroupDir, CgroupError> {
    let mount = v2_mount()?;
    check_cgroup2(&mount, &mount)?;
    if !prefix.is_empty() && prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        resolve_container_under(&mount, prefix)
    } else {
        resolve_unit_under(&mount, prefix)
    }
}

/// The cgroup of systemd unit `name` below `root`: the one cgroup whose last component
/// is `name` (or, without a unit suffix, `name.service` or `name.scope`).
pub fn resolve_unit_under(root: &Path, name: &str) -> Result<CgroupDir, CgroupError> {
    let valid = |b: u8| b.is_ascii_alphanumeric() || b":_.@-\\".contains(&b);
    if name.is_empty() || name.len() > 255 || !name.bytes().all(valid) {
        return Err(CgroupError::BadUnit {
            name: name.to_owned(),
        });
    }
    let wanted: Vec<String> = if crate::model::cgroup_path::is_unit_name(name) {
        vec![name.to_owned()]
    } else {
        vec![format!("{name}.service"), format!("{name}.scope")]
    };
    let mut matches: Vec<CgroupDir> = Vec::new();
    let complete = walk(root, |dir, path, level, ino| {
        let last = path.rsplit('/').next().unwrap_or("");
        if wanted.iter().any(|w| w == last) {
            matches.push(CgroupDir {
                dir: dir.to_owned(),
                path: path.to_owned(),
                id: ino,
                level,
            });
        }
    });
    match matches.len() {
        0 => Err(CgroupError::NoUnit {
            name: name.to_owned(),
            mount: root.to_owned(),
            truncated: !complete,
        }),
        1 => Ok(matches.swap_remove(0)),
        count => {
            matches.sort_by(|a, b| a.dir.cmp(&b.dir));
            Err(CgroupError::AmbiguousUnit {
                name: name.to_owned(),
                count,
                first: matches[0].dir.clone(),
                second: matches[1].dir.clone(),
            })
        }
    }
}

/// The cgroup of the container whose id starts with `prefix` (1 to 64 hex characters,
/// any case), below `root` taken as the hierarchy's root: the outermost cgroup naming
/// it. No file system type check.
pub fn resolve_container_under(root: &Path, prefix: &str) -> Result<CgroupDir, CgroupError> {
    if prefix.is_empty() || prefix.len() > 64 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CgroupError::BadPrefix {
            prefix: prefix.to_owned(),
        });
    }
    let prefix_lower = prefix.to_ascii_lowercase();
    // (container id, cgroup) for every cgroup naming a matching container.
    let mut matches: Vec<(String, CgroupDir)> = Vec::new();
    let complete = walk(root, |dir, path, level, ino| {
        if let Some(id) = labels(path).container_id {
            if id.starts_with(&prefix_lower) {
                matches.push((
                    id,
                    CgroupDir {
                        dir: dir.to_owned(),
                        path: path.to_owned(),
                        id: ino,
                        level,
                    },
                ));
            }
        }
    });
    let mut ids: Vec<&str> = matches.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    match ids.len() {
        0 => {
            return Err(CgroupError::NoContainer {
                prefix: prefix.to_owned(),
                mount: root.to_owned(),
                truncated: !complete,
            })
        }
        1 => {}
        count => {
            return Err(CgroupError::Ambiguous {
                prefix: prefix.to_owned(),
                count,
                ids: ids.iter().take(3).map(|id| (*id).to_owned()).collect(),
            })
        }
    }
    let id = ids[0].to_owned();
    // The container's own cgroups: those with no matching ancestor. Paths sort
    // component by component, so a cgroup's descendants follow it (linear, however
    // many sub-cgroups a container makes).
    let mut dirs: Vec<CgroupDir> = matches.into_iter().map(|(_, cg)| cg).collect();
    dirs.sort_by(|a, b| a.dir.cmp(&b.dir));
    let mut own: Vec<CgroupDir> = Vec::new();
    for cg in dirs {
        if own.last().is_some_and(|top| cg.dir.starts_with(&top.dir)) {
            continue;
        }
        own.push(cg);
    }
    if own.len() > 1 {
        // A container can name its sub-cgroups after another: refuse to guess.
        return Err(CgroupError::Scattered {
            id,
            count: own.len(),
            first: own[0].dir.clone(),
            second: own[1].dir.clone(),
        });
    }
    Ok(own.swap_remove(0))
}

/// Every pid in `cgroup.procs` of `dir` and of its descendant cgroups, sorted, without
/// duplicates. Unreadable files are skipped; the walk is bounded (module doc).
pub fn processes_in(dir: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    walk(dir, |cgroup, _, _, _| {
        let Ok(file) = fs::File::open(cgroup.join("cgroup.procs")) else {
            return;
        };
        let mut text = String::new();
        if file
            .take(MAX_PROCS_BYTES)
            .read_to_string(&mut text)
            .is_err()
        {
            return;
        }
        pids.extend(
            text.lines()
                .filter_map(|line| line.trim().parse::<i32>().ok())
                .filter(|pid| *pid > 0),
        );
    });
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The cgroup v2 path of a process: `<proc_root>/<pid>/cgroup` through
/// [`parse_proc_cgroup`]. None when unreadable, larger than 64 KiB, or malformed.
pub fn cgroup_of_pid(proc_root: &Path, pid: i32) -> Option<String> {
    let file = fs::File::open(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_PROC_CGROUP_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() as u64 > MAX_PROC_CGROUP_BYTES {
        return None;
    }
    parse_proc_cgroup(std::str::from_utf8(&bytes).ok()?)
}

/// Visits `start` and its descendant directories, pre-order, with (directory,
/// in-hierarchy path relative to `start`, level below `start`, inode). Never follows
/// symlinks; stops below [`MAX_DEPTH`] levels and after [`MAX_DIRS`] directories.
/// Returns whether it saw everything.
fn walk(start: &Path, visit: impl FnMut(&Path, &str, u32, u64)) -> bool {
    walk_at_most(start, MAX_DIRS, visit)
}

fn walk_at_most(
    start: &Path,
    max_dirs: usize,
    mut visit: impl FnMut(&Path, &str, u32, u64),
) -> bool {
    let Ok(meta) = fs::symlink_metadata(start) else {
        return true;
    };
    if !meta.is_dir() {
        return true;
    }
    let mut complete = true;
    let mut visited = 0usize;
    let mut stack: Vec<(PathBuf, String, u32, u64)> =
        vec![(start.to_owned(), "/".to_owned(), 0, meta.ino())];
    while let Some((dir, path, level, ino)) = stack.pop() {
        if visited == max_dirs {
            return false;
        }
        visited += 1;
        visit(&dir, &path, level, ino);
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            // file_type does not follow symlinks.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if !kind.is_dir() {
                continue;
            }
            // Bounds what is queued as well as what is visited.
            if level as usize >= MAX_DEPTH || visited + stack.len() >= max_dirs {
                complete = false;
                break;
            }
            let Ok(child_meta) = entry.metadata() else {
                continue;
            };
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let child_path = if level == 0 {
                format!("/{name}")
            } else {
                format!("{path}/{name}")
            };
            stack.push((entry.path(), child_path, level + 1, child_meta.ino()));
        }
    }
    complete
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "3f8c1d2e9a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d";
    const A2: &str = "3f8c99999a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d";
    const B: &str = "b1d2c3e4f5a6978877665544332211ffeeddccbbaa99887766554433221100ab";
    const C: &str = "7e2a9c4b1f0d3e6a8b5c2d9f4e1a7b0c3d6e9f2a5b8c1d4e7f0a3b6c9d2e5f8a";

    #[test]
    fn mountinfo_hybrid_host() {
        let text = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            v2_mount_from_mountinfo(text),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert!(has_v1(text));
    }

    #[test]
    fn mountinfo_pure_v2_with_optional_fields() {
        let text = "\
24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
99 35 0:30 / /mnt/again rw master:9 propagate_from:2 - cgroup2 cgroup2 rw
";
        assert_eq!(
            v2_mount_from_mountinfo(text),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert!(!has_v1(text));
    }

    #[test]
    fn mountinfo_escapes() {
        let text = "50 1 0:40 / /mnt/my\\040cg\\134x\\011y\\9 rw - cgroup2 none rw\n";
        assert_eq!(
            v2_mount_from_mountinfo(text),
            Some(PathBuf::from("/mnt/my cg\\x\ty\\9"))
        );
        // A truncated escape at the end stays as written.
        assert_eq!(unescape("/a\\04"), PathBuf::from("/a\\04"));
    }

    #[test]
    fn mountinfo_without_v2() {
        let v1 = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n";
        assert_eq!(v2_mount_from_mountinfo(v1), None);
        assert!(has_v1(v1));
        assert_eq!(v2_mount_from_mountinfo(""), None);
        assert!(!has_v1(""));
        // A mount point named "cgroup2" or a source "-" is no file system type.
        let odd = "1 2 0:1 / /cgroup2 rw - ext4 - rw\n3 4 0:1 / /x rw\n";
        assert_eq!(v2_mount_from_mountinfo(odd), None);
    }

    #[test]
    fn error_lines() {
        let err = CgroupError::Ambiguous {
            prefix: "ab".into(),
            count: 2,
            ids: vec![
                format!("ab12{}", "0".repeat(60)),
                format!("ab34{}", "0".repeat(60)),
            ],
        };
        assert_eq!(
            err.to_string(),
            "container id prefix \"ab\" matches 2 containers (ab1200000000…, ab3400000000…): give more characters"
        );
        for err in [
            CgroupError::V1Only,
            CgroupError::NotMounted,
            CgroupError::NoContainer {
                prefix: "abc".into(),
                mount: "/sys/fs/cgroup".into(),
                truncated: true,
            },
        ] {
            assert!(!err.to_string().contains('\n'), "{err}");
        }
    }

    /// A tree of plain directories: (in-hierarchy path, pids in its cgroup.procs).
    fn tree(dirs: &[(&str, &[i32])]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (path, pids) in dirs {
            let dir = root.path().join(path.trim_start_matches('/'));
            fs::create_dir_all(&dir).unwrap();
            let text: String = pids.iter().map(|p| format!("{p}\n")).collect();
            fs::write(dir.join("cgroup.procs"), text).unwrap();
        }
        root
    }

    fn k8s_and_docker() -> tempfile::TempDir {
        let uid = "1a2b3c4d_5e6f_4a7b_8c9d_0e1f2a3b4c5d";
        tree(&[
            ("/", &[1]),
            ("/system.slice/sshd.service", &[100]),
            (&format!("/system.slice/docker-{A}.scope"), &[200]),
            (&format!("/system.slice/docker-{A}.scope/init.scope"), &[201]),
            (&format!("/system.slice/docker-{A}.scope/app/worker"), &[202, 203]),
            (&format!("/docker/{A2}"), &[300]),
            (
                &format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/cri-containerd-{B}.scope"
                ),
                &[400],
            ),
            (&format!("/kubepods/besteffort/pod{}/{C}", uid.replace('_', "-")), &[500]),
        ])
    }

    #[test]
    fn container_by_prefix_is_its_outermost_cgroup() {
        let root = k8s_and_docker();
        let found = resolve_container_under(root.path(), "3F8C1").unwrap();
        assert_eq!(found.path, format!("/system.slice/docker-{A}.scope"));
        assert_eq!(found.level, 2);
        assert_eq!(found.dir, root.path().join(&found.path[1..]));
        assert_eq!(found.id, fs::metadata(&found.dir).unwrap().ino());

        let full = resolve_container_under(root.path(), B).unwrap();
        assert!(full.path.ends_with(&format!("cri-containerd-{B}.scope")));
        assert_eq!(full.level, 4);

        let cgroupfs = resolve_container_under(root.path(), "7e2a").unwrap();
        assert_eq!(cgroupfs.level, 4);
        assert!(cgroupfs.path.starts_with("/kubepods/besteffort/pod"));
        let docker = resolve_container_under(root.path(), "3f8c9").unwrap();
        assert_eq!(docker.path, format!("/docker/{A2}"));
    }

    #[test]
    fn container_prefix_ambiguous_or_unknown() {
        let root = k8s_and_docker();
        let err = resolve_container_under(root.path(), "3f8c").unwrap_err();
        assert!(
            matches!(&err, CgroupError::Ambiguous { count: 2, ids, .. } if ids == &[A.to_owned(), A2.to_owned()]),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "container id prefix \"3f8c\" matches 2 containers (3f8c1d2e9a7b…, 3f8c99999a7b…): give more characters"
        );
        let err = resolve_container_under(root.path(), "ffff").unwrap_err();
        assert!(
            matches!(
                err,
                CgroupError::NoContainer {
                    truncated: false,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("crio-<id>.scope"), "{err}");
        for bad in ["", "xyz", "3f8c-", &"a".repeat(65)] {
            let err = resolve_container_under(root.path(), bad).unwrap_err();
            assert!(
                matches!(err, CgroupError::BadPrefix { .. }),
                "{bad}: {err:?}"
            );
        }
    }

    #[test]
    fn container_named_in_two_places_is_refused() {
        // Another container names a sub-cgroup after A.
        let root = tree(&[
            (&format!("/system.slice/docker-{A}.scope"), &[1]),
            (
                &format!("/system.slice/docker-{B}.scope/docker-{A}.scope"),
                &[2],
            ),
        ]);
        let err = resolve_container_under(root.path(), "3f8c").unwrap_err();
        assert!(
            matches!(err, CgroupError::Scattered { count: 2, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn walks_do_not_follow_symlinks() {
        let outside = tree(&[(&format!("/docker/{A}"), &[7])]);
        let root = tree(&[("/x", &[1])]);
        std::os::unix::fs::symlink(outside.path(), root.path().join("x/link")).unwrap();
        assert!(matches!(
            resolve_container_under(root.path(), "3f8c"),
            Err(CgroupError::NoContainer { .. })
        ));
        assert_eq!(processes_in(root.path()), vec![1]);
        // Nor does a directory argument resolve out of the mount.
        let err = locate(root.path(), Path::new("/x/link")).unwrap_err();
        assert!(matches!(err, CgroupError::Outside { .. }), "{err:?}");
        let err = locate(root.path(), Path::new("/x/../..")).unwrap_err();
        assert!(matches!(err, CgroupError::Outside { .. }), "{err:?}");
    }

    #[test]
    fn a_systemd_unit_is_found_by_its_name() {
        let root = tree(&[
            ("/system.slice/nginx.service", &[3]),
            (
                "/user.slice/user-1000.slice/user@1000.service/app.slice/nginx.service",
                &[4],
            ),
            ("/system.slice/redis-server.service", &[5]),
            ("/machine.slice/machine-web.scope", &[6]),
        ]);
        let redis = resolve_unit_under(root.path(), "redis-server").unwrap();
        assert_eq!(redis.path, "/system.slice/redis-server.service");
        assert_eq!(redis.level, 2);
        let web = resolve_unit_under(root.path(), "machine-web.scope").unwrap();
        assert_eq!(web.path, "/machine.slice/machine-web.scope");
        let err = resolve_unit_under(root.path(), "nginx.service").unwrap_err();
        assert!(
            matches!(err, CgroupError::AmbiguousUnit { count: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("--cgroup"), "{err}");
        let err = resolve_unit_under(root.path(), "postgres").unwrap_err();
        assert!(matches!(err, CgroupError::NoUnit { .. }), "{err}");
        let err = resolve_unit_under(root.path(), "../etc").unwrap_err();
        assert!(matches!(err, CgroupError::BadUnit { .. }), "{err}");
    }

    #[test]
    fn walks_are_bounded_in_depth() {
        let deep: String = (0..MAX_DEPTH + 3).map(|i| format!("/d{i}")).collect();
        let root = tree(&[(&deep, &[9]), ("/d0", &[1])]);
        // The deepest cgroup.procs is below the bound, the first one is read.
        assert_eq!(processes_in(root.path()), vec![1]);
    }

    #[test]
    fn walks_are_bounded_in_directories() {
        let root = tree(&[("/a/b/c", &[]), ("/d/e", &[]), ("/f", &[])]);
        let mut seen = 0;
        assert!(!walk_at_most(root.path(), 4, |_, _, _, _| seen += 1));
        assert!(seen <= 4, "{seen}");
        let mut seen = 0;
        assert!(walk_at_most(root.path(), 7, |_, _, _, _| seen += 1));
        assert_eq!(seen, 7);
    }

    #[test]
    fn processes_of_a_subtree() {
        let root = k8s_and_docker();
        let scope = root.path().join(format!("system.slice/docker-{A}.scope"));
        assert_eq!(processes_in(&scope), vec![200, 201, 202, 203]);
        // Unreadable or malformed files and lines are skipped.
        fs::write(scope.join("app/cgroup.procs"), "x\n-4\n0\n204\n").unwrap();
        fs::remove_file(scope.join("init.scope/cgroup.procs")).unwrap();
        assert_eq!(processes_in(&scope), vec![200, 202, 203, 204]);
        assert_eq!(
            processes_in(&root.path().join("nothing")),
            Vec::<i32>::new()
        );
    }

    #[test]
    fn locate_directories_and_hierarchy_paths() {
        let root = k8s_and_docker();
        let top = locate(root.path(), Path::new("/")).unwrap();
        assert_eq!((top.path.as_str(), top.level), ("/", 0));
        let by_path = locate(root.path(), Path::new("/system.slice/sshd.service")).unwrap();
        assert_eq!(by_path.path, "/system.slice/sshd.service");
        assert_eq!(by_path.level, 2);
        let by_dir = locate(root.path(), &root.path().join("system.slice/sshd.service")).unwrap();
        assert_eq!(by_dir, by_path);
        assert_eq!(by_dir.id, fs::metadata(&by_dir.dir).unwrap().ino());
        let err = locate(root.path(), Path::new("/nope")).unwrap_err();
        assert!(matches!(err, CgroupError::Missing { .. }), "{err:?}");
        assert!(
            err.to_string().contains("list the hierarchy with `ls "),
            "{err}"
        );
        let err = locate(
            root.path(),
            Path::new("/system.slice/sshd.service/cgroup.procs"),
        )
        .unwrap_err();
        assert!(matches!(err, CgroupError::NotCgroup2 { .. }), "{err:?}");
    }

    #[test]
    fn cgroup_of_a_pid_below_a_proc_root() {
        let proc_root = tempfile::tempdir().unwrap();
        let dir = proc_root.path().join("42");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("cgroup"), "4:memory:/x\n0::/a/b\n").unwrap();
        assert_eq!(cgroup_of_pid(proc_root.path(), 42).as_deref(), Some("/a/b"));
        assert_eq!(cgroup_of_pid(proc_root.path(), 43), None);
        let big = format!("0::/a\n{}", "1:cpu:/\n".repeat(10_000));
        fs::write(dir.join("cgroup"), big).unwrap();
        assert_eq!(cgroup_of_pid(proc_root.path(), 42), None);
        // Our own, from the real /proc.
        let own = cgroup_of_pid(Path::new("/proc"), std::process::id() as i32);
        if v2_mount().is_ok() {
            assert!(own.is_some_and(|p| p.starts_with('/')));
        }
    }

    /// Kills the sleep, waits for it, and removes the test cgroup, however the test ends.
    struct Cleanup {
        child: Option<std::process::Child>,
        dir: PathBuf,
    }

    impl Drop for Cleanup {
        fn drop(&mut self) {
            if let Some(child) = self.child.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
            let _ = fs::remove_dir(&self.dir);
        }
    }

    #[test]
    fn root_real_cgroup_of_a_sleep() {
        const TEST: &str = "root_real_cgroup_of_a_sleep";
        if !crate::test_skip::root_or_required(TEST) {
            return;
        }
        // CI runs as root on a host with cgroup v2 (/sys/fs/cgroup/unified).
        let mount = match v2_mount() {
            Ok(mount) => mount,
            Err(e) => return crate::test_skip::required(TEST, &e.to_string()),
        };
        let name = format!("kk-test-{}", std::process::id());
        let dir = mount.join(&name);
        if let Err(e) = fs::create_dir(&dir) {
            let why = format!("cannot make {}: {e}", dir.display());
            return crate::test_skip::required(TEST, &why);
        }
        let mut guard = Cleanup {
            child: None,
            dir: dir.clone(),
        };
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        guard.child = Some(child);
        fs::write(dir.join("cgroup.procs"), format!("{pid}\n")).unwrap();

        let found = resolve_dir(&dir).unwrap();
        assert_eq!(found.id, fs::metadata(&dir).unwrap().ino());
        assert_eq!(found.level, 1);
        assert_eq!(found.path, format!("/{name}"));
        assert_eq!(resolve_dir(Path::new(&format!("/{name}"))).unwrap(), found);
        assert_eq!(processes_in(&found.dir), vec![pid]);
        assert_eq!(
            cgroup_of_pid(Path::new("/proc"), pid).as_deref(),
            Some(format!("/{name}").as_str())
        );
        // The mount's own files are no cgroup2 directory.
        assert!(matches!(
            resolve_dir(&dir.join("cgroup.procs")),
            Err(CgroupError::NotCgroup2 { .. })
        ));
    }
}
