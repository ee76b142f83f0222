//! Kernel struct layout read from the running kernel's BTF (/sys/kernel/btf/vmlinux):
//! the BPF programs read `task_struct` and `pt_regs` fields at these offsets, so one
//! object file works across kernel versions without CO-RE relocations.

use std::path::Path;

use btf_rs::{Backend, Btf, Type};

/// Where the fields the BPF programs read live on this kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLayout {
    pub task_pid_offset: u32,
    pub task_tgid_offset: u32,
    /// `__state` (5.14+) or `state`.
    pub task_state_offset: u32,
    pub task_exit_code_offset: u32,
    /// Byte and mask of the `in_iowait` bitfield; `None` if the kernel has no such field.
    pub task_in_iowait: Option<(u32, u8)>,
    /// Offset of the second syscall argument in `struct pt_regs`.
    pub pt_regs_arg1_offset: u32,
    /// Offsets of the user instruction, stack and frame pointers in `struct pt_regs`
    /// (`--stacks` copies; `None` where the unwinder does not support the architecture).
    pub pt_regs_ip_sp_bp: Option<(u32, u32, u32)>,
    /// Whether `sched_switch` passes `prev_state` as a fourth argument (5.18+).
    pub switch_has_prev_state: bool,
    /// Whether `sched_process_exit` passes `group_dead` (recent kernels); else the exit
    /// hook reads `task->signal->live` at these offsets (0 = the last thread is gone).
    pub exit_has_group_dead: bool,
    pub task_signal_offset: u32,
    pub signal_live_offset: u32,
    /// `signal_struct.flags`: whether a thread group is exiting (a wakeup to die).
    pub signal_flags_offset: u32,
    /// `task_struct.mm`, `mm_struct.arg_start` and `arg_end`: the argv read at exec.
    pub task_mm_offset: u32,
    pub mm_arg_start_offset: u32,
    pub mm_arg_end_offset: u32,
    /// `task_struct.se.sum_exec_runtime`: the kernel's accounted runtime, on_cpu's source.
    pub task_sum_exec_runtime_offset: u32,
    /// `task_struct.comm`: the waker's name, loaded directly at sched_waking.
    pub task_comm_offset: u32,
    /// `task_struct.on_cpu` (SMP kernels), 0 when the kernel has none: whether a task a
    /// wakeup finds is still on a CPU.
    pub task_on_cpu_offset: u32,
    /// `task_struct.flags` and the syscall number in `pt_regs` (`orig_ax`, `syscallno`;
    /// 0 where unknown): whether a softirq ran inside its task's own syscall.
    pub task_flags_offset: u32,
    pub pt_regs_syscall_nr_offset: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("cannot read kernel BTF at {path}: {message}")]
    Btf { path: String, message: String },
    #[error("kernel BTF has no {0}")]
    Missing(String),
}

/// Read the layout from a BTF file (normally `/sys/kernel/btf/vmlinux`).
pub fn read_layout(path: &Path) -> Result<KernelLayout, LayoutError> {
    // mmap reads only the types we look up (fast, small); sysfs BTF supports mmap
    // only on recent kernels, so fall back to parsing the whole file.
    let btf = Btf::from_file_with_backend(path, Backend::Mmap)
        .or_else(|_| Btf::from_file(path))
        .map_err(|e| LayoutError::Btf {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    let field = |s: &str, f: &str| -> Result<(u32, Option<u32>), LayoutError> {
        member_bit_offset(&btf, s, f)?.ok_or_else(|| LayoutError::Missing(format!("{s}.{f}")))
    };
    let byte = |s: &str, f: &str| -> Result<u32, LayoutError> { Ok(field(s, f)?.0 / 8) };

    let task_state_offset = match member_bit_offset(&btf, "task_struct", "__state")? {
        Some((bits, _)) => bits / 8,
        None => byte("task_struct", "state")?,
    };
    let task_in_iowait = member_bit_offset(&btf, "task_struct", "in_iowait")?
        .map(|(bits, _)| (bits / 8, 1u8 << (bits % 8)));
    let pt_regs_arg1_offset = match std::env::consts::ARCH {
        "x86_64" => byte("pt_regs", "si")?,
        // struct user_pt_regs regs[31]: the second argument is regs[1].
        "aarch64" => byte("pt_regs", "regs")? + 8,
        other => {
            return Err(LayoutError::Missing(format!(
                "pt_regs argument layout for {other}"
            )))
        }
    };
    let pt_regs_ip_sp_bp = match std::env::consts::ARCH {
        "x86_64" => Some((
            byte("pt_regs", "ip")?,
            byte("pt_regs", "sp")?,
            byte("pt_regs", "bp")?,
        )),
        _ => None,
    };
    Ok(KernelLayout {
        pt_regs_ip_sp_bp,
        task_pid_offset: byte("task_struct", "pid")?,
        task_tgid_offset: byte("task_struct", "tgid")?,
        task_state_offset,
        task_exit_code_offset: byte("task_struct", "exit_code")?,
        task_in_iowait,
        pt_regs_arg1_offset,
        switch_has_prev_state: tracepoint_arg_count(&btf, "sched_switch")? >= 5,
        exit_has_group_dead: tracepoint_arg_count(&btf, "sched_process_exit")? >= 3,
        task_signal_offset: byte("task_struct", "signal")?,
        signal_live_offset: byte("signal_struct", "live")?,
        signal_flags_offset: byte("signal_struct", "flags")?,
        task_mm_offset: byte("task_struct", "mm")?,
        mm_arg_start_offset: byte("mm_struct", "arg_start")?,
        mm_arg_end_offset: byte("mm_struct", "arg_end")?,
        task_sum_exec_runtime_offset: byte("task_struct", "se")?
            + byte("sched_entity", "sum_exec_runtime")?,
        task_comm_offset: byte("task_struct", "comm")?,
        task_on_cpu_offset: member_bit_offset(&btf, "task_struct", "on_cpu")?
            .map_or(0, |(bits, _)| bits / 8),
        task_flags_offset: byte("task_struct", "flags")?,
        pt_regs_syscall_nr_offset: match std::env::consts::ARCH {
            "x86_64" => byte("pt_regs", "orig_ax")?,
            "aarch64" => byte("pt_regs", "syscallno")?,
            _ => 0,
        },
    })
}

/// Bit offset (and bitfield width) of `field` in `struct name`, looking through
/// anonymous struct/union members.
fn member_bit_offset(
    btf: &Btf,
    name: &str,
    field: &str,
) -> Result<Option<(u32, Option<u32>)>, LayoutError> {
    let types = btf
        .resolve_types_by_name(name)
        .map_err(|_| LayoutError::Missing(format!("struct {name}")))?;
    let st = types
        .iter()
        .find_map(|t| match t {
            Type::Struct(s) if !s.members.is_empty() => Some(s),
            _ => None,
        })
        .ok_or_else(|| LayoutError::Missing(format!("struct {name}")))?;
    Ok(find_member(btf, st, field, 0))
}

fn find_member(
    btf: &Btf,
    st: &btf_rs::Struct,
    field: &str,
    base_bits: u32,
) -> Option<(u32, Option<u32>)> {
    for m in &st.members {
        let name = btf.resolve_name(m).unwrap_or_default();
        if name == field {
            return Some((base_bits + m.bit_offset(), m.bitfield_size()));
        }
        if name.is_empty() {
            // Anonymous struct or union: search inside it.
            let mut ty = btf.resolve_chained_type(m).ok()?;
            loop {
                match ty {
                    Type::Struct(ref inner) | Type::Union(ref inner) => {
                        if let Some(hit) =
                            find_member(btf, inner, field, base_bits + m.bit_offset())
                        {
                            return Some(hit);
                        }
                        break;
                    }
                    Type::Const(_) | Type::Volatile(_) | Type::Typedef(_) | Type::TypeTag(_) => {
                        let Some(bt) = ty.as_btf_type() else { break };
                        ty = btf.resolve_chained_type(bt).ok()?;
                    }
                    _ => break,
                }
            }
        }
    }
    None
}

/// Number of parameters of `btf_trace_<tp>` (including the leading `void *`).
fn tracepoint_arg_count(btf: &Btf, tp: &str) -> Result<usize, LayoutError> {
    let name = format!("btf_trace_{tp}");
    let missing = || LayoutError::Missing(format!("typedef {name}"));
    let types = btf.resolve_types_by_name(&name).map_err(|_| missing())?;
    let mut ty = types.into_iter().next().ok_or_else(missing)?;
    for _ in 0..4 {
        match ty {
            Type::FuncProto(proto) => return Ok(proto.parameters.len()),
            Type::Typedef(_) | Type::Ptr(_) | Type::Const(_) => {
                let bt = ty.as_btf_type().ok_or_else(missing)?;
                ty = btf.resolve_chained_type(bt).map_err(|_| missing())?;
            }
            _ => break,
        }
    }
    Err(missing())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_kernels_layout_when_btf_is_present() {
        let path = Path::new("/sys/kernel/btf/vmlinux");
        if !path.exists() {
            let why = format!("no kernel BTF at {}", path.display());
            return crate::test_skip::required(
                "reads_this_kernels_layout_when_btf_is_present",
                &why,
            );
        }
        let layout = read_layout(path).expect("layout");
        // pid and tgid are adjacent pid_t fields in every kernel since 2.6.
        assert_eq!(layout.task_tgid_offset, layout.task_pid_offset + 4);
        assert!(layout.task_state_offset < layout.task_pid_offset);
        // se (struct sched_entity) lies between the state and the pid.
        assert!(layout.task_sum_exec_runtime_offset > layout.task_state_offset);
        assert!(layout.task_sum_exec_runtime_offset < layout.task_pid_offset);
        assert_eq!(layout.task_sum_exec_runtime_offset % 8, 0);
        // comm is loaded as two 8-byte words.
        assert!(layout.task_comm_offset > 0);
        if std::env::consts::ARCH == "x86_64" {
            // r15 r14 r13 r12 bp bx r11 r10 r9 r8 ax cx dx si: si is the 14th u64.
            assert_eq!(layout.pt_regs_arg1_offset, 13 * 8);
        }
    }
}
