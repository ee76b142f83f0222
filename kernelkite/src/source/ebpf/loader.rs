//! Loading the embedded BPF object, patching in the kernel layout and options, and
//! attaching every program. Dropping [`Probes`] detaches and unloads everything.

use std::path::Path;
use std::time::Instant;

use aya::maps::{Array, MapData};
use aya::programs::{BtfTracePoint, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use kernelkite_common::bpf::{hist_slots, map_names, thread_slots};
use kernelkite_common::wake::waker_slots;

use super::btf_layout::{read_layout, KernelLayout};
use super::syscall_table;
use super::tracefs::{ClassicLayout, Tracefs};
use crate::model::OnCpuSource;

/// The BPF object built from `kernelkite-ebpf` by `cargo xtask build-ebpf` and committed,
/// so building kernelkite needs only stable Rust. `cargo xtask ci` rebuilds it and fails
/// if the committed bytes differ.
pub static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!("../../../bpf/kernelkite.bpf.o");

/// Where the running kernel's BTF lives.
pub const KERNEL_BTF_PATH: &str = "/sys/kernel/btf/vmlinux";

/// Environment variable that picks the hooks: `classic` forces classic tracepoints (as
/// on a kernel without BTF; for tests and diagnosis), `tp_btf` forbids the fallback.
pub const HOOKS_ENV: &str = "KERNELKITE_HOOKS";

/// Environment variable that turns waker aggregation off (`off`): the waker hooks are
/// not attached and the wakeup path skips its map update. For measuring its cost
/// (`cargo xtask bench`); bundles then have no waker data.
pub const WAKERS_ENV: &str = "KERNELKITE_WAKERS";

/// Environment variable that turns the switch hook's read of `se.sum_exec_runtime` off
/// (`off`): on_cpu is then timed by the clock, as on classic tracepoints, and steal is
/// not measured. Only for measuring that read's cost per context switch (`cargo xtask
/// bench --only ebpf`); bundles say `on_cpu_source: clock`.
pub const TASK_RUNTIME_ENV: &str = "KERNELKITE_TASK_RUNTIME";

/// Environment variable that sets the thread table's slot count (a power of two, at
/// most `thread_slots::DEFAULT`; `1` puts every thread but one in the overflow map).
/// For tests of the overflow path and for measuring what the slots save.
pub const THREAD_SLOTS_ENV: &str = "KERNELKITE_THREAD_SLOTS";

/// The thread table's slot count for `max_threads` (`--max-threads`; `None`: 65,536),
/// or `KERNELKITE_THREAD_SLOTS` when it is set to a power of two no larger.
pub fn thread_slot_count(max_threads: Option<u32>) -> u32 {
    let slots = thread_slots::for_max_threads(max_threads.unwrap_or(65_536));
    slot_count_from_env(THREAD_SLOTS_ENV, slots)
}

/// Environment variable that sets the syscall histograms' slot count (a power of two,
/// at most `hist_slots::DEFAULT`; `1` puts every (process, syscall) but one in the
/// overflow map). For tests of the overflow path.
pub const HIST_SLOTS_ENV: &str = "KERNELKITE_HIST_SLOTS";

/// The syscall histograms' slot count: `KERNELKITE_HIST_SLOTS` when it is set to a
/// power of two no larger than the default.
pub fn hist_slot_count() -> u32 {
    slot_count_from_env(HIST_SLOTS_ENV, hist_slots::DEFAULT)
}

/// `env`'s value when it is a power of two no larger than `default`, else `default`.
fn slot_count_from_env(env: &str, default: u32) -> u32 {
    match std::env::var(env).ok().and_then(|v| v.parse::<u32>().ok()) {
        Some(n) if n.is_power_of_two() && n <= default => n,
        _ => default,
    }
}

/// Environment variable that sets the waker slot count (a power of two, at most
/// `waker_slots::DEFAULT`; `1` puts every (wakee, class, waker) but one in the
/// overflow map). For tests of the overflow path.
pub const WAKER_SLOTS_ENV: &str = "KERNELKITE_WAKER_SLOTS";

/// The waker slot count: `KERNELKITE_WAKER_SLOTS` when it is set to a power of two no
/// larger than the default.
pub fn waker_slot_count() -> u32 {
    slot_count_from_env(WAKER_SLOTS_ENV, waker_slots::DEFAULT)
}

/// Size the thread table (its overflow to `max_threads`, its slots and their holders),
/// the syscall histograms' and the wakers' slots and holders on `loader`; the slots'
/// index masks, for `THREAD_SLOTS_MASK`, `HIST_SLOTS_MASK` and `WAKER_SLOTS_MASK`.
fn size_slot_tables(loader: &mut EbpfLoader, max_threads: Option<u32>) -> [u32; 3] {
    if let Some(n) = max_threads {
        loader.map_max_entries(map_names::THREADS, n);
    }
    let thread_slots = thread_slot_count(max_threads);
    loader.map_max_entries(map_names::THREAD_SLOTS, thread_slots);
    loader.map_max_entries(map_names::THREAD_HOLDERS, thread_slots);
    let hist_slots = hist_slot_count();
    loader.map_max_entries(map_names::HIST_SLOTS, hist_slots);
    loader.map_max_entries(map_names::HIST_HOLDERS, hist_slots);
    let waker_slots = waker_slot_count();
    loader.map_max_entries(map_names::WAKER_SLOTS, waker_slots);
    loader.map_max_entries(map_names::WAKER_HOLDERS, waker_slots);
    [thread_slots - 1, hist_slots - 1, waker_slots - 1]
}

/// Whether the switch hook reads the kernel's runtime (`KERNELKITE_TASK_RUNTIME` is not
/// `off`).
pub fn task_runtime_on() -> bool {
    std::env::var(TASK_RUNTIME_ENV).ok().as_deref() != Some("off")
}

/// Whether waker aggregation is on (`KERNELKITE_WAKERS` is not `off`).
pub fn wakers_on() -> bool {
    std::env::var(WAKERS_ENV).ok().as_deref() != Some("off")
}

/// The programs of waker aggregation, left out when it is off.
const WAKER_PROGRAMS: [&str; 14] = [
    "irq_handler_entry",
    "irq_handler_exit",
    "softirq_entry",
    "softirq_exit",
    "hrtimer_expire_entry",
    "hrtimer_expire_exit",
    "sched_waking",
    "classic_irq_handler_entry",
    "classic_irq_handler_exit",
    "classic_softirq_entry",
    "classic_softirq_exit",
    "classic_hrtimer_expire_entry",
    "classic_hrtimer_expire_exit",
    "classic_sched_waking",
];

/// How the programs attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// BTF-enabled tracepoints: typed arguments, `task_struct` reads at BTF offsets.
    TpBtf,
    /// Classic tracepoints (kernels without BTF): their records, at tracefs offsets.
    Classic,
}

impl HookKind {
    /// tp_btf when the kernel has BTF, else classic; `KERNELKITE_HOOKS` overrides.
    pub fn choose() -> Result<HookKind, ProbeError> {
        match std::env::var(HOOKS_ENV).ok().as_deref() {
            Some("classic") => Ok(HookKind::Classic),
            Some("tp_btf") => Ok(HookKind::TpBtf),
            None | Some("") => Ok(if Path::new(KERNEL_BTF_PATH).exists() {
                HookKind::TpBtf
            } else {
                HookKind::Classic
            }),
            Some(other) => Err(ProbeError::Load(format!(
                "{HOOKS_ENV}={other}: expected classic or tp_btf"
            ))),
        }
    }
}

/// Options the programs are loaded with.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProbeOptions {
    /// Track processes forked by targets too.
    pub follow: bool,
    /// Stream calls at least this slow over the ring buffer; 0 disables.
    pub min_latency_ns: u64,
    /// Capture stacks (`--stacks`).
    pub stacks: Option<StackOptions>,
    /// Threads the thread table holds at least (`--max-threads`): the overflow map's
    /// entries, beside its slots (the largest power of two not above it, at most
    /// 16,384); `None`: 65,536.
    pub max_threads: Option<u32>,
    /// Stream every wakeup of the traced threads (`--critical-path`); it needs the waker
    /// hooks, attached then even with `KERNELKITE_WAKERS=off`.
    pub critical_path: bool,
    /// `--cgroup`: also make targets of the processes that fork or exec inside this
    /// cgroup v2 subtree (`kernelkite-ebpf`'s `cgroup` module).
    pub cgroup: Option<TargetCgroup>,
}

/// The cgroup v2 subtree a session traces: its root's id (the directory's inode) and
/// depth below the hierarchy's root (the root is 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetCgroup {
    pub id: u64,
    pub level: u32,
}

/// What `--stacks` captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackOptions {
    /// Off-CPU periods at least this long get a stack and their exact time; shorter ones
    /// are sampled (`--min-block-us`); at least 1.
    pub min_block_ns: u64,
    /// On-CPU stack samples per second per CPU (`--sample-hz`); 0 samples none.
    pub sample_hz: u64,
}

/// `--stacks`: user stack copies sent per second per CPU at most, on average (each is
/// up to 16 KiB through the ring buffer and one unwind in userspace; past it a stack
/// is walked by frame pointers only, counted in `events_lost`).
pub const STACK_COPIES_PER_SEC: u64 = 1000;

/// [`STACK_COPIES_PER_SEC`], or less with `KERNELKITE_DEBUG_STACK_COPIES_PER_SEC` (tests:
/// a budget the scheduler's copies always spend, docs/TESTING.md); never more.
fn stack_copies_per_sec() -> u64 {
    (std::env::var("KERNELKITE_DEBUG_STACK_COPIES_PER_SEC").ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&n| n > 0)
        .map_or(STACK_COPIES_PER_SEC, |n| n.min(STACK_COPIES_PER_SEC))
}
/// `--stacks`: the ring buffer's size (copies use at most half of it): 64 copies
/// between two drains at 16 KiB each.
const STACKS_RING_BYTES: u32 = 16 << 20;

/// The maps only `--stacks` uses; without it they are created with one entry.
const STACK_MAPS: [&str; 3] = [
    map_names::USER_STACKS,
    map_names::KERNEL_STACKS,
    map_names::STACK_TIMES,
];

/// The loaded, attached programs and their maps.
pub struct Probes {
    pub ebpf: Ebpf,
    /// `program (tracepoint)` for every attached hook, in attach order.
    pub hooks: Vec<String>,
    /// What the user should know about how the hooks attached (the classic fallback,
    /// tracefs mounted by us), one line each.
    pub notes: Vec<String>,
    /// Time from starting the load to the last program attached.
    pub attach_ms: f64,
    /// Where the programs take on_cpu from: the kernel's runtime (tp_btf) or the clock.
    pub on_cpu_source: OnCpuSource,
    /// Programs loaded but not attached yet (`attach_deferred`): the tp_btf syscall
    /// hooks, which note tasks they find untraced (kernelkite-ebpf's `UNTRACED_CPU`)
    /// and go live only once userspace has set the targets' bits.
    deferred: Vec<(&'static str, &'static str)>,
    /// When loading began, for `attach_ms`.
    started: Instant,
}

/// Programs `load_programs` loads but leaves to `Probes::attach_deferred`: a note
/// taken by these before a process's bit was set would hide its syscalls, and
/// userspace sets bits only before they attach.
const DEFERRED_PROGRAMS: [&str; 2] = ["sys_enter", "sys_exit"];

impl Probes {
    /// Attach the programs `load_programs` left loaded (the syscall hooks), once the
    /// targets' bits are set; `attach_ms` then runs to the last of them.
    pub fn attach_deferred(&mut self) -> Result<(), ProbeError> {
        for (program, tracepoint) in std::mem::take(&mut self.deferred) {
            let fail = |message: String| ProbeError::Program {
                program: program.to_string(),
                message,
            };
            let prog: &mut BtfTracePoint = self
                .ebpf
                .program_mut(program)
                .ok_or_else(|| fail("missing from object".into()))?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| fail(error_chain(&e)))?;
            prog.attach().map_err(|e| fail(error_chain(&e)))?;
            self.hooks.push(format!("{program} (tp_btf/{tracepoint})"));
        }
        self.attach_ms = self.started.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }

    /// Runs of the attached programs the kernel skipped because the program was already
    /// running on that CPU (`recursion_misses` in each program's fdinfo, 5.12+; 0 where
    /// the kernel does not say): events the programs never saw.
    pub fn recursion_misses(&self) -> u64 {
        use std::os::fd::{AsFd, AsRawFd};
        self.ebpf
            .programs()
            .filter_map(|(_, program)| program.fd().ok())
            .filter_map(|fd| {
                let path = format!("/proc/self/fdinfo/{}", fd.as_fd().as_raw_fd());
                let info = std::fs::read_to_string(path).ok()?;
                info.lines()
                    .find_map(|l| l.strip_prefix("recursion_misses:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .sum()
    }
}

/// Why a BPF map could not be used.
#[derive(Debug, thiserror::Error)]
pub enum MapAccessError {
    #[error("missing from object")]
    Missing,
    #[error("programs already detached")]
    Detached,
    #[error(transparent)]
    Aya(#[from] aya::maps::MapError),
    #[error("cannot map it into memory: {0}")]
    Mmap(std::io::Error),
}

impl MapAccessError {
    /// The error of `map` as a [`ProbeError`].
    pub fn of(map: &'static str) -> impl Fn(aya::maps::MapError) -> ProbeError {
        move |e| ProbeError::Map {
            map,
            source: e.into(),
        }
    }
}

/// Why the eBPF backend could not be started. Rendered as one line.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("reading kernel layout: {0}")]
    Layout(#[from] super::btf_layout::LayoutError),
    #[error("loading BPF object: {0}")]
    Load(String),
    #[error("BPF program {program} rejected or not attachable: {message}")]
    Program { program: String, message: String },
    #[error("BPF map {map}: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: MapAccessError,
    },
    #[error("classic tracepoints: {0}")]
    Tracefs(#[from] super::tracefs::TracefsError),
    #[error("{0}")]
    Unsupported(String),
}

/// (program name in the object, tracepoint) in attach order: lifecycle first so no
/// fork is missed once the scheduler hooks run.
fn program_plan(layout: &KernelLayout) -> [(&'static str, &'static str); 15] {
    let switch = if layout.switch_has_prev_state {
        "sched_switch"
    } else {
        "sched_switch_legacy"
    };
    [
        ("sched_process_fork", "sched_process_fork"),
        ("sched_process_exec", "sched_process_exec"),
        ("sched_process_exit", "sched_process_exit"),
        // Wakers: the interrupt context notes, then the waker, before the wakeup.
        ("irq_handler_entry", "irq_handler_entry"),
        ("irq_handler_exit", "irq_handler_exit"),
        ("softirq_entry", "softirq_entry"),
        ("softirq_exit", "softirq_exit"),
        ("hrtimer_expire_entry", "hrtimer_expire_entry"),
        ("hrtimer_expire_exit", "hrtimer_expire_exit"),
        ("sched_waking", "sched_waking"),
        ("sched_wakeup", "sched_wakeup"),
        ("sched_wakeup_new", "sched_wakeup_new"),
        (switch, "sched_switch"),
        ("sys_enter", "sys_enter"),
        ("sys_exit", "sys_exit"),
    ]
}

/// The same hooks as classic tracepoints: (program, category/name).
const CLASSIC_PLAN: [(&str, &str); 15] = [
    ("classic_sched_process_fork", "sched/sched_process_fork"),
    ("classic_sched_process_exec", "sched/sched_process_exec"),
    ("classic_sched_process_exit", "sched/sched_process_exit"),
    ("classic_irq_handler_entry", "irq/irq_handler_entry"),
    ("classic_irq_handler_exit", "irq/irq_handler_exit"),
    ("classic_softirq_entry", "irq/softirq_entry"),
    ("classic_softirq_exit", "irq/softirq_exit"),
    ("classic_hrtimer_expire_entry", "timer/hrtimer_expire_entry"),
    ("classic_hrtimer_expire_exit", "timer/hrtimer_expire_exit"),
    ("classic_sched_waking", "sched/sched_waking"),
    ("classic_sched_wakeup", "sched/sched_wakeup"),
    ("classic_sched_wakeup_new", "sched/sched_wakeup_new"),
    ("classic_sched_switch", "sched/sched_switch"),
    ("classic_sys_enter", "raw_syscalls/sys_enter"),
    ("classic_sys_exit", "raw_syscalls/sys_exit"),
];

/// Load and attach every program, as tp_btf or (no kernel BTF) classic tracepoints.
pub fn load(options: ProbeOptions) -> Result<Probes, ProbeError> {
    match HookKind::choose()? {
        HookKind::TpBtf => load_programs(options, |layout| {
            let on = wakers_on() || options.critical_path;
            (program_plan(layout).into_iter())
                .filter(|(p, _)| on || !WAKER_PROGRAMS.contains(p))
                .collect()
        }),
        HookKind::Classic => load_classic(options),
    }
}

/// Load the object but attach only the reference programs of the overhead benchmark
/// (`cargo xtask bench`; see kernelkite-ebpf's floor.rs).
pub fn load_floor(floor: Floor) -> Result<Probes, ProbeError> {
    load_programs(ProbeOptions::default(), |_| match floor {
        Floor::Empty => vec![
            ("floor_sys_enter", "sys_enter"),
            ("floor_sys_exit", "sys_exit"),
        ],
        Floor::Bit => vec![
            ("floor_bit_sys_enter", "sys_enter"),
            ("floor_bit_sys_exit", "sys_exit"),
        ],
        Floor::Clock => vec![
            ("floor_clock_sys_enter", "sys_enter"),
            ("floor_clock_sys_exit", "sys_exit"),
        ],
        Floor::Sched => vec![
            ("floor_sched_switch", "sched_switch"),
            ("floor_sched_wakeup", "sched_wakeup"),
        ],
        Floor::Wakers => vec![
            ("floor_sched_switch", "sched_switch"),
            ("floor_sched_waking", "sched_waking"),
            ("floor_wakers_sched_wakeup", "sched_wakeup"),
        ],
    })
}

/// The overhead benchmark's reference programs (kernelkite-ebpf's `floor` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Floor {
    /// Empty sys_enter/sys_exit programs.
    Empty,
    /// The target bit test alone on sys_enter/sys_exit.
    Bit,
    /// A target test and a clock read on sys_enter and sys_exit.
    Clock,
    /// On sched_switch and sched_wakeup: a target test, one clock read, each traced
    /// thread's interval closed.
    Sched,
    /// The scheduler floor, and a traced thread's waker noted at sched_waking and its
    /// sleep added to that waker's total at sched_wakeup.
    Wakers,
}

fn load_programs(
    options: ProbeOptions,
    plan: impl FnOnce(&KernelLayout) -> Vec<(&'static str, &'static str)>,
) -> Result<Probes, ProbeError> {
    let started = Instant::now();
    let layout = read_layout(Path::new(KERNEL_BTF_PATH))?;
    let btf = Btf::from_sys_fs().map_err(|e| ProbeError::Load(format!("kernel BTF: {e}")))?;
    crate::source::limits::raise_memlock_limit();

    let (iowait_byte, iowait_mask) = layout.task_in_iowait.map_or((0, 0), |(b, m)| (b, m as u32));
    let exit_has_group_dead = u32::from(layout.exit_has_group_dead);
    // 0 tells the switch hook there is no runtime to read (the clock times on_cpu).
    let runtime_on = task_runtime_on();
    let sum_exec_runtime_offset = if runtime_on {
        layout.task_sum_exec_runtime_offset
    } else {
        0
    };
    let follow = u32::from(options.follow);
    let (cgroup_id, cgroup_level) = options.cgroup.map_or((0, 0), |c| (c.id, c.level));
    let min_block_ns = options.stacks.map_or(0, |s| s.min_block_ns.max(1));
    let sample_period_ns = options
        .stacks
        .filter(|s| s.sample_hz > 0)
        .map_or(0, |s| 1_000_000_000 / s.sample_hz);
    let wakers_flag = u32::from(wakers_on());
    let critical_path_flag = u32::from(options.critical_path);
    // x86_64 only (the unwinder's architecture): elsewhere stacks are frame pointers only.
    let (ip_offset, sp_offset, bp_offset) = layout.pt_regs_ip_sp_bp.unwrap_or_default();
    let copy_interval_ns = match (options.stacks, layout.pt_regs_ip_sp_bp) {
        (Some(_), Some(_)) => 1_000_000_000 / stack_copies_per_sec(),
        _ => 0,
    };
    let mut loader = EbpfLoader::new();
    if options.stacks.is_none() {
        for name in STACK_MAPS {
            loader.map_max_entries(name, 1);
        }
    } else {
        loader.map_max_entries(map_names::EVENTS, STACKS_RING_BYTES);
    }
    let [thread_slots_mask, hist_slots_mask, waker_slots_mask] =
        size_slot_tables(&mut loader, options.max_threads);
    loader
        .override_global("TASK_PID_OFFSET", &layout.task_pid_offset, true)
        .override_global("TASK_TGID_OFFSET", &layout.task_tgid_offset, true)
        .override_global("TASK_STATE_OFFSET", &layout.task_state_offset, true)
        .override_global("TASK_EXIT_CODE_OFFSET", &layout.task_exit_code_offset, true)
        .override_global("TASK_IN_IOWAIT_BYTE", &iowait_byte, true)
        .override_global("TASK_IN_IOWAIT_MASK", &iowait_mask, true)
        .override_global("TASK_ON_CPU_OFFSET", &layout.task_on_cpu_offset, true)
        .override_global("TASK_FLAGS_OFFSET", &layout.task_flags_offset, true)
        .override_global(
            "PT_REGS_SYSCALL_NR_OFFSET",
            &layout.pt_regs_syscall_nr_offset,
            true,
        )
        .override_global("PT_REGS_ARG1_OFFSET", &layout.pt_regs_arg1_offset, true)
        .override_global("EXIT_HAS_GROUP_DEAD", &exit_has_group_dead, true)
        .override_global("TASK_SIGNAL_OFFSET", &layout.task_signal_offset, true)
        .override_global("SIGNAL_LIVE_OFFSET", &layout.signal_live_offset, true)
        .override_global("SIGNAL_FLAGS_OFFSET", &layout.signal_flags_offset, true)
        .override_global("TASK_MM_OFFSET", &layout.task_mm_offset, true)
        .override_global("MM_ARG_START_OFFSET", &layout.mm_arg_start_offset, true)
        .override_global("MM_ARG_END_OFFSET", &layout.mm_arg_end_offset, true)
        .override_global(
            "TASK_SUM_EXEC_RUNTIME_OFFSET",
            &sum_exec_runtime_offset,
            true,
        )
        .override_global("TASK_COMM_OFFSET", &layout.task_comm_offset, true)
        .override_global("MIN_LATENCY_NS", &options.min_latency_ns, true)
        .override_global("FOLLOW", &follow, true)
        .override_global("TARGET_CGROUP_ID", &cgroup_id, true)
        .override_global("TARGET_CGROUP_LEVEL", &cgroup_level, true)
        .override_global("STACK_MIN_BLOCK_NS", &min_block_ns, true)
        .override_global("SAMPLE_PERIOD_NS", &sample_period_ns, true)
        .override_global("WAKERS_ON", &wakers_flag, true)
        .override_global("THREAD_SLOTS_MASK", &thread_slots_mask, true)
        .override_global("HIST_SLOTS_MASK", &hist_slots_mask, true)
        .override_global("WAKER_SLOTS_MASK", &waker_slots_mask, true)
        .override_global("CRITICAL_PATH_ON", &critical_path_flag, true)
        .override_global("STACK_COPY_INTERVAL_NS", &copy_interval_ns, true)
        .override_global("PT_REGS_IP_OFFSET", &ip_offset, true)
        .override_global("PT_REGS_SP_OFFSET", &sp_offset, true)
        .override_global("PT_REGS_BP_OFFSET", &bp_offset, true);
    let mut ebpf = loader
        .load(BPF_OBJECT)
        .map_err(|e| ProbeError::Load(error_chain(&e)))?;

    fill_syscall_kinds(&mut ebpf)?;

    let mut hooks = Vec::new();
    let mut deferred = Vec::new();
    for (program, tracepoint) in plan(&layout) {
        let fail = |message: String| ProbeError::Program {
            program: program.to_string(),
            message,
        };
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(program)
            .ok_or_else(|| fail("missing from object".into()))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| fail(error_chain(&e)))?;
        prog.load(tracepoint, &btf)
            .map_err(|e| fail(error_chain(&e)))?;
        if DEFERRED_PROGRAMS.contains(&program) {
            deferred.push((program, tracepoint));
            continue;
        }
        prog.attach().map_err(|e| fail(error_chain(&e)))?;
        hooks.push(format!("{program} (tp_btf/{tracepoint})"));
    }
    if let Some(stacks) = options.stacks.filter(|s| s.sample_hz > 0) {
        hooks.push(attach_cpu_sampler(&mut ebpf, stacks.sample_hz)?);
    }
    let attach_ms = started.elapsed().as_secs_f64() * 1e3;
    drop(btf);
    release_freed_memory();
    Ok(Probes {
        ebpf,
        hooks,
        notes: Vec::new(),
        attach_ms,
        on_cpu_source: if runtime_on {
            OnCpuSource::SumExecRuntime
        } else {
            OnCpuSource::Clock
        },
        deferred,
        started,
    })
}

/// The classic-tracepoint fallback (kernelkite-ebpf's classic.rs says what it cannot
/// know). Needs tracefs, for the tracepoints' ids and record layouts: mounted if absent.
fn load_classic(options: ProbeOptions) -> Result<Probes, ProbeError> {
    let started = Instant::now();
    if options.stacks.is_some() {
        return Err(ProbeError::Unsupported(format!(
            "--stacks needs BTF-enabled tracepoints (kernel BTF at {KERNEL_BTF_PATH}); this session uses classic tracepoints"
        )));
    }
    let why = if std::env::var_os(HOOKS_ENV).is_some() {
        format!("classic tracepoints ({HOOKS_ENV}=classic)")
    } else {
        format!("the kernel has no BTF ({KERNEL_BTF_PATH}): using classic tracepoints")
    };
    let mut notes = vec![format!(
        "{why}: no in_iowait (io_wait only from D-state sleeps in I/O syscalls), exit codes only from exit/exit_group"
    )];
    let fs = Tracefs::find_or_mount()?;
    if fs.mounted_by_us {
        notes.push(format!("mounted tracefs at {}", fs.root.display()));
    }
    let layout = ClassicLayout::read(&fs)?;
    crate::source::limits::raise_memlock_limit();
    let nr = |name: &str| {
        crate::model::syscalls::syscall_number(std::env::consts::ARCH, name).unwrap_or(u32::MAX)
    };
    let (nr_clone, nr_clone3, nr_fork, nr_vfork, nr_exit, nr_exit_group) = (
        nr("clone"),
        nr("clone3"),
        nr("fork"),
        nr("vfork"),
        nr("exit"),
        nr("exit_group"),
    );
    let follow = u32::from(options.follow);
    let (cgroup_id, cgroup_level) = options.cgroup.map_or((0, 0), |c| (c.id, c.level));
    let wakers_flag = u32::from(wakers_on());
    let critical_path_flag = u32::from(options.critical_path);
    let mut loader = EbpfLoader::new();
    for name in STACK_MAPS {
        loader.map_max_entries(name, 1);
    }
    let [thread_slots_mask, hist_slots_mask, waker_slots_mask] =
        size_slot_tables(&mut loader, options.max_threads);
    loader
        .override_global("CLASSIC_SWITCH_PREV_STATE", &layout.switch_prev_state, true)
        .override_global("CLASSIC_SWITCH_NEXT_PID", &layout.switch_next_pid, true)
        .override_global("CLASSIC_WAKEUP_PID", &layout.wakeup_pid, true)
        .override_global("CLASSIC_IRQ_HANDLER_IRQ", &layout.irq_handler_irq, true)
        .override_global("CLASSIC_SOFTIRQ_VEC", &layout.softirq_vec, true)
        .override_global("CLASSIC_FORK_CHILD_PID", &layout.fork_child_pid, true)
        .override_global("CLASSIC_SYS_ENTER_ID", &layout.sys_enter_id, true)
        .override_global("CLASSIC_SYS_ENTER_ARGS", &layout.sys_enter_args, true)
        .override_global("CLASSIC_SYS_EXIT_RET", &layout.sys_exit_ret, true)
        .override_global("CLASSIC_EXIT_GROUP_DEAD", &layout.exit_group_dead, true)
        .override_global("NR_CLONE", &nr_clone, true)
        .override_global("NR_CLONE3", &nr_clone3, true)
        .override_global("NR_FORK", &nr_fork, true)
        .override_global("NR_VFORK", &nr_vfork, true)
        .override_global("NR_EXIT", &nr_exit, true)
        .override_global("NR_EXIT_GROUP", &nr_exit_group, true)
        .override_global("MIN_LATENCY_NS", &options.min_latency_ns, true)
        .override_global("FOLLOW", &follow, true)
        .override_global("TARGET_CGROUP_ID", &cgroup_id, true)
        .override_global("TARGET_CGROUP_LEVEL", &cgroup_level, true)
        .override_global("WAKERS_ON", &wakers_flag, true)
        .override_global("THREAD_SLOTS_MASK", &thread_slots_mask, true)
        .override_global("HIST_SLOTS_MASK", &hist_slots_mask, true)
        .override_global("WAKER_SLOTS_MASK", &waker_slots_mask, true)
        .override_global("CRITICAL_PATH_ON", &critical_path_flag, true);
    let mut ebpf = loader
        .load(BPF_OBJECT)
        .map_err(|e| ProbeError::Load(error_chain(&e)))?;
    fill_syscall_kinds(&mut ebpf)?;
    let mut hooks = Vec::new();
    let wakers = wakers_on() || options.critical_path;
    let plan = CLASSIC_PLAN
        .into_iter()
        .filter(|(p, _)| wakers || !WAKER_PROGRAMS.contains(p));
    for (program, tracepoint) in plan {
        let fail = |message: String| ProbeError::Program {
            program: program.to_string(),
            message,
        };
        let (category, name) = tracepoint.split_once('/').expect("category/name");
        let prog: &mut TracePoint = ebpf
            .program_mut(program)
            .ok_or_else(|| fail("missing from object".into()))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| fail(error_chain(&e)))?;
        prog.load().map_err(|e| fail(error_chain(&e)))?;
        prog.attach(category, name)
            .map_err(|e| fail(error_chain(&e)))?;
        hooks.push(format!("{program} (tracepoint/{tracepoint})"));
    }
    Ok(Probes {
        ebpf,
        hooks,
        notes,
        attach_ms: started.elapsed().as_secs_f64() * 1e3,
        // Classic tracepoints cannot read task_struct (kernelkite-ebpf's classic.rs).
        on_cpu_source: OnCpuSource::Clock,
        // Classic sys_enter/sys_exit take no notes: everything attached.
        deferred: Vec::new(),
        started,
    })
}

/// How a sleep in each syscall is classified (`SYSCALL_KIND`), for this architecture.
fn fill_syscall_kinds(ebpf: &mut Ebpf) -> Result<(), ProbeError> {
    let map = ebpf
        .map_mut(map_names::SYSCALL_KIND)
        .ok_or(ProbeError::Map {
            map: map_names::SYSCALL_KIND,
            source: MapAccessError::Missing,
        })?;
    let mut kinds: Array<&mut MapData, u8> =
        Array::try_from(map).map_err(MapAccessError::of(map_names::SYSCALL_KIND))?;
    for (nr, kind) in syscall_table::kind_table() {
        kinds
            .set(nr, kind, 0)
            .map_err(MapAccessError::of(map_names::SYSCALL_KIND))?;
    }
    Ok(())
}

/// Attach the on-CPU stack sampler to a CPU-clock perf event on every online CPU.
fn attach_cpu_sampler(ebpf: &mut Ebpf, sample_hz: u64) -> Result<String, ProbeError> {
    use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
    use aya::programs::PerfEvent;
    const PROGRAM: &str = "on_cpu_sample";
    let fail = |message: String| ProbeError::Program {
        program: PROGRAM.to_string(),
        message,
    };
    let cpus = aya::util::online_cpus().map_err(|(path, e)| fail(format!("{path}: {e}")))?;
    let prog: &mut PerfEvent = ebpf
        .program_mut(PROGRAM)
        .ok_or_else(|| fail("missing from object".into()))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| fail(error_chain(&e)))?;
    prog.load().map_err(|e| fail(error_chain(&e)))?;
    for &cpu in &cpus {
        prog.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Frequency(sample_hz),
            false,
        )
        .map_err(|e| fail(format!("CPU {cpu}: {}", error_chain(&e))))?;
    }
    Ok(format!(
        "{PROGRAM} (perf_event/cpu-clock at {sample_hz} Hz on {} CPUs)",
        cpus.len()
    ))
}

/// Parsing the kernel's BTF for the load needs ~15 MB of heap that is free again
/// afterwards; hand it back to the OS so it does not stay in the tracer's RSS.
fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// An error and its sources on one line (verifier logs are cut to their last line).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        // A verifier log ends with statistics ("processed N insns ..."); the reason for a
        // rejection is the last line before them.
        let last = text
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| {
                !l.is_empty() && !l.starts_with("processed ") && !l.starts_with("verification time")
            })
            .unwrap_or("");
        out.push_str(": ");
        out.push_str(last);
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names userspace opens maps by are the object's own: every name in
    /// `map_names` is a map of the embedded object (the others, scratch space and
    /// budgets, only the programs use).
    #[test]
    fn the_map_names_are_maps_of_the_object() {
        let object = aya_obj::Object::parse(BPF_OBJECT).expect("the embedded object parses");
        for name in map_names::ALL {
            assert!(
                object.maps.contains_key(*name),
                "{name} is not a map of the object: {:?}",
                object.maps.keys().collect::<Vec<_>>()
            );
        }
    }
}
