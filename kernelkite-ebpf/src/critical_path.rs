//! `--critical-path`: a stream of the traced threads' wakeups (record kind WAKEUP on the
//! EVENTS ring buffer), from which userspace follows a process's wall time back through
//! the threads that woke it (`analysis::critical_path`).
//!
//! Bounded: a record is sent only while the ring buffer is less than half full (the
//! other half stays for lifecycle records and slow calls); the rest are counted in
//! `CRITICAL_PATH_LOST`. Its own counter map, not a `lost::*` slot, keeps it apart from
//! the other programs' counters.

use aya_ebpf::bindings::{BPF_RB_AVAIL_DATA, BPF_RB_RING_SIZE};
use aya_ebpf::macros::map;
use aya_ebpf::maps::PerCpuArray;
use kernelkite_common::bpf::{record_kind, ThreadState};
use kernelkite_common::wake::{WakerKey, WakeupRecord, NEW_TASK};
use kernelkite_common::LatencyClass;

use crate::maps::EVENTS;

/// Wakeup records not sent (ring buffer half full or full), per CPU.
#[map]
pub static CRITICAL_PATH_LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// 1 when userspace asked for the stream (`--critical-path`).
#[unsafe(no_mangle)]
static CRITICAL_PATH_ON: u32 = 0;

#[inline(always)]
pub fn on() -> bool {
    // SAFETY: reading our own static, patched by the loader.
    unsafe { core::ptr::read_volatile(&CRITICAL_PATH_ON) != 0 }
}

fn count_lost() {
    if let Some(p) = CRITICAL_PATH_LOST.get_ptr_mut(0) {
        // SAFETY: per-CPU slot.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
fn send(record: WakeupRecord) {
    let size = EVENTS.query(BPF_RB_RING_SIZE as u64);
    let queued = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    if queued + core::mem::size_of::<WakeupRecord>() as u64 > size / 2 {
        count_lost();
        return;
    }
    match EVENTS.reserve::<WakeupRecord>(0) {
        Some(mut entry) => {
            entry.write(record);
            entry.submit(0);
        }
        None => count_lost(),
    }
}

/// A sleep of `tid` (state `t`, not yet closed) ended at `now`, ended by `waker`.
#[inline(always)]
pub fn on_woken(tid: u32, t: &ThreadState, waker: &WakerKey, now: u64) {
    send(WakeupRecord {
        kind: record_kind::WAKEUP,
        tgid: t.tgid,
        tid,
        class: waker.class,
        sleep_start_ns: t.since_ns,
        wake_ns: now,
        waker_kind: waker.kind,
        waker_source: waker.source,
        waker_tgid: waker.waker_tgid,
        waker_tid: waker.waker_tid,
        on_cpu_ns: t.class_ns[LatencyClass::OnCpu as usize],
        runqueue_ns: t.class_ns[LatencyClass::Runqueue as usize],
        steal_ns: t.class_ns[LatencyClass::Steal as usize],
    });
}

/// The first wakeup of a new traced task, in the context of the thread that created it
/// (`wake_up_new_task` runs in the forking thread): the edge from a thread's start back
/// to its creator.
#[inline(always)]
pub fn on_new_task(tid: u32, t: &ThreadState) {
    let pid_tgid = aya_ebpf::helpers::bpf_get_current_pid_tgid();
    // SAFETY: helper call without preconditions.
    let now = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    send(WakeupRecord {
        kind: record_kind::WAKEUP,
        tgid: t.tgid,
        tid,
        class: NEW_TASK,
        sleep_start_ns: now,
        wake_ns: now,
        waker_kind: kernelkite_common::wake::waker_kind::THREAD,
        waker_source: 0,
        waker_tgid: (pid_tgid >> 32) as u32,
        waker_tid: pid_tgid as u32,
        on_cpu_ns: 0,
        runqueue_ns: 0,
        steal_ns: 0,
    });
}
