//! Reading a whole BPF hash map with `BPF_MAP_LOOKUP_BATCH`: a few hundred entries per
//! syscall, where aya's iterator costs two syscalls per entry (next key, then lookup).
//! A system-wide session holds thousands of threads, so a snapshot's map reads were
//! most of `top`'s cost. Kernels without batch support (before 5.6) get the iterator.

use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{HashMap, IterableMap, MapData};
use aya::Pod;

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// Entries asked for per call; a hash bucket holding more than this gets ENOSPC, and
/// the call is retried with room for more.
const CHUNK: usize = 256;

/// `union bpf_attr`'s `batch` member.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Every (key, value) of a hash map, in one pass of batch lookups (or, where the kernel
/// cannot, through aya's iterator). Entries changed during the read may be seen in
/// either state, as with any map read.
pub fn read_all<K: Pod, V: Pod>(map: &HashMap<MapData, K, V>) -> Vec<(K, V)> {
    lookup_batch::<K, V>(map.map()).unwrap_or_else(|| map.iter().filter_map(Result::ok).collect())
}

/// `None` when the kernel has no batch lookup for this map.
fn lookup_batch<K: Pod, V: Pod>(map: &MapData) -> Option<Vec<(K, V)>> {
    let fd = map.fd().as_fd().as_raw_fd();
    let mut out = Vec::new();
    let mut chunk = CHUNK;
    // The kernel's position token for hash maps (a bucket index, u32); u64 for room.
    let mut token_in = 0u64;
    let mut token_out = 0u64;
    let mut first = true;
    loop {
        let mut keys: Vec<K> = vec![unsafe_zeroed(); chunk];
        let mut values: Vec<V> = vec![unsafe_zeroed(); chunk];
        let mut attr = BatchAttr {
            in_batch: if first { 0 } else { &raw mut token_in as u64 },
            out_batch: &raw mut token_out as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: chunk as u32,
            map_fd: fd as u32,
            ..BatchAttr::default()
        };
        // SAFETY: attr points at buffers of `count` keys and values of the map's types
        // and at two tokens, all alive for the call.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                &raw mut attr,
                std::mem::size_of::<BatchAttr>() as u32,
            )
        };
        let errno = if ret < 0 {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        } else {
            0
        };
        if ret < 0 && errno != libc::ENOENT {
            if errno == libc::ENOSPC && chunk < 1 << 16 {
                chunk *= 4;
                continue;
            }
            // EINVAL/ENOTSUPP: no batch ops here. Anything read so far is discarded:
            // the iterator reads everything again.
            return None;
        }
        let n = (attr.count as usize).min(chunk);
        keys.truncate(n);
        values.truncate(n);
        out.extend(keys.into_iter().zip(values));
        if ret < 0 {
            // ENOENT: that was the last batch.
            return Some(out);
        }
        token_in = token_out;
        first = false;
    }
}

/// A zeroed Pod value (every bit pattern of a Pod type is valid).
fn unsafe_zeroed<T: Pod>() -> T {
    // SAFETY: T is Pod: all-zero bytes are a valid T.
    unsafe { std::mem::zeroed() }
}
