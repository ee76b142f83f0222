//! tracefs, for the classic-tracepoint hooks of kernels without BTF: where it is
//! mounted (mounting it when it is not), and the field offsets of a tracepoint's record
//! from its `format` file.

use std::path::{Path, PathBuf};

/// Where tracefs is mounted on current systems, and where it is mounted when it is not.
const TRACEFS: &str = "/sys/kernel/tracing";
/// Where older systems have it (through debugfs).
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    #[error("tracefs is not mounted and mounting it at {TRACEFS} failed: {0}")]
    Mount(String),
    #[error("reading {path}: {message}")]
    Format { path: String, message: String },
}

/// A mounted tracefs.
#[derive(Clone, Debug)]
pub struct Tracefs {
    pub root: PathBuf,
    /// Whether kernelkite mounted it (and says so).
    pub mounted_by_us: bool,
}

impl Tracefs {
    /// The mounted tracefs; mount it at /sys/kernel/tracing when it is nowhere.
    pub fn find_or_mount() -> Result<Tracefs, TracefsError> {
        for root in [TRACEFS, DEBUGFS_TRACING] {
            if Path::new(root).join("events").is_dir() {
                return Ok(Tracefs {
                    root: root.into(),
                    mounted_by_us: false,
                });
            }
        }
        mount_tracefs()?;
        Ok(Tracefs {
            root: TRACEFS.into(),
            mounted_by_us: true,
        })
    }

    /// Byte offset of `field` in the record of tracepoint `category`/`event`, checking
    /// its size is `size` bytes.
    pub fn field_offset(
        &self,
        category: &str,
        event: &str,
        field: &str,
        size: u32,
    ) -> Result<u32, TracefsError> {
        let path = self
            .root
            .join("events")
            .join(category)
            .join(event)
            .join("format");
        let fail = |message: String| TracefsError::Format {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| fail(e.to_string()))?;
        let (offset, found_size) =
            parse_field(&text, field).ok_or_else(|| fail(format!("no field {field}")))?;
        if found_size != size {
            return Err(fail(format!(
                "field {field} is {found_size} bytes, expected {size}"
            )));
        }
        Ok(offset)
    }
}

/// Field offsets the classic-tracepoint programs read (kernelkite-ebpf's classic.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassicLayout {
    pub switch_prev_state: u32,
    pub switch_next_pid: u32,
    pub wakeup_pid: u32,
    pub fork_child_pid: u32,
    /// `irq_handler_entry`'s `irq` and `softirq_entry`'s `vec` (wakers).
    pub irq_handler_irq: u32,
    pub softirq_vec: u32,
    pub sys_enter_id: u32,
    pub sys_enter_args: u32,
    pub sys_exit_ret: u32,
    /// `sched_process_exit`'s `group_dead` (recent kernels), or u32::MAX without it.
    pub exit_group_dead: u32,
}

impl ClassicLayout {
    pub fn read(fs: &Tracefs) -> Result<ClassicLayout, TracefsError> {
        let wakeup_pid = fs.field_offset("sched", "sched_wakeup", "pid", 4)?;
        // The programs read both wakeups at one offset.
        if fs.field_offset("sched", "sched_wakeup_new", "pid", 4)? != wakeup_pid
            || fs.field_offset("sched", "sched_waking", "pid", 4)? != wakeup_pid
        {
            return Err(TracefsError::Format {
                path: "sched_wakeup_new/format".into(),
                message: "pid is not where sched_wakeup has it (sched_wakeup_new, sched_waking)"
                    .into(),
            });
        }
        Ok(ClassicLayout {
            switch_prev_state: fs.field_offset("sched", "sched_switch", "prev_state", 8)?,
            switch_next_pid: fs.field_offset("sched", "sched_switch", "next_pid", 4)?,
            wakeup_pid,
            fork_child_pid: fs.field_offset("sched", "sched_process_fork", "child_pid", 4)?,
            irq_handler_irq: fs.field_offset("irq", "irq_handler_entry", "irq", 4)?,
            softirq_vec: fs.field_offset("irq", "softirq_entry", "vec", 4)?,
            sys_enter_id: fs.field_offset("raw_syscalls", "sys_enter", "id", 8)?,
            sys_enter_args: fs.field_offset("raw_syscalls", "sys_enter", "args", 48)?,
            sys_exit_ret: fs.field_offset("raw_syscalls", "sys_exit", "ret", 8)?,
            exit_group_dead: fs
                .field_offset("sched", "sched_process_exit", "group_dead", 1)
                .unwrap_or(u32::MAX),
        })
    }
}

#[cfg(target_os = "linux")]
fn mount_tracefs() -> Result<(), TracefsError> {
    use std::ffi::CString;
    let target = CString::new(TRACEFS).expect("no NUL in a constant");
    let fs = CString::new("tracefs").expect("no NUL in a constant");
    // SAFETY: valid NUL-terminated strings; no mount data.
    let rc = unsafe {
        libc::mount(
            fs.as_ptr(),
            target.as_ptr(),
            fs.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(TracefsError::Mount(
            std::io::Error::last_os_error().to_string(),
        ));
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn mount_tracefs() -> Result<(), TracefsError> {
    Err(TracefsError::Mount("tracefs exists on Linux only".into()))
}

/// [`parse_field`] for the fuzz target (`fuzz/`).
#[doc(hidden)]
pub fn fuzz_parse_field(format: &str, field: &str) -> Option<(u32, u32)> {
    parse_field(format, field)
}

/// (offset, size) of `field` in a tracefs `format` file, whose field lines read
/// `\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;` (arrays: `args[6]`).
fn parse_field(format: &str, field: &str) -> Option<(u32, u32)> {
    for line in format.lines() {
        let mut parts = line.trim().split(';').map(str::trim);
        let Some(decl) = parts.next().and_then(|p| p.strip_prefix("field:")) else {
            continue;
        };
        let name = decl.rsplit([' ', '*']).next()?;
        let name = name.split('[').next()?;
        if name != field {
            continue;
        }
        let mut offset = None;
        let mut size = None;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.parse().ok();
            }
        }
        return Some((offset?, size?));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    // /sys/kernel/tracing/events/sched/sched_switch/format on 6.18.
    const SCHED_SWITCH: &str = "name: sched_switch
ID: 316
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;

print fmt: \"prev_comm=%s\"
";

    #[test]
    fn parses_scalar_and_array_fields() {
        assert_eq!(parse_field(SCHED_SWITCH, "prev_state"), Some((32, 8)));
        assert_eq!(parse_field(SCHED_SWITCH, "next_pid"), Some((56, 4)));
        assert_eq!(parse_field(SCHED_SWITCH, "prev_comm"), Some((8, 16)));
        assert_eq!(parse_field(SCHED_SWITCH, "common_pid"), Some((4, 4)));
        assert_eq!(parse_field(SCHED_SWITCH, "pid"), None);
        assert_eq!(
            parse_field(
                "\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;",
                "args"
            ),
            Some((16, 48))
        );
    }
}
