//! Decoding ring-buffer records (pure: bytes in, records out; tested without a kernel).

use kernelkite_common::bpf::{
    record_kind, ArgvRecord, LifecycleRecord, SlowSyscallRecord, StackCaptureRecord,
};
use kernelkite_common::wake::WakeupRecord;

/// One decoded ring-buffer record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    Lifecycle(LifecycleRecord),
    SlowSyscall(SlowSyscallRecord),
    /// A user stack copy (or the times of one); the stack bytes follow it in the record
    /// ([`stack_bytes`]).
    StackCapture(StackCaptureRecord),
    /// `--critical-path`: one wakeup of a traced thread.
    Wakeup(WakeupRecord),
    /// An exec's argv; the bytes follow it in the record ([`argv_bytes`]).
    Argv(ArgvRecord),
}

/// The argv bytes after an ARGV record (what its `len` says, or less if the record is
/// shorter).
pub fn argv_bytes<'a>(bytes: &'a [u8], r: &ArgvRecord) -> &'a [u8] {
    let start = std::mem::size_of::<ArgvRecord>();
    let end = start.saturating_add(r.len as usize).min(bytes.len());
    bytes.get(start..end).unwrap_or_default()
}

/// The stack bytes after a STACK_COPY record (what the record's `stack_len` says, or
/// less if the record is shorter).
pub fn stack_bytes<'a>(bytes: &'a [u8], r: &StackCaptureRecord) -> &'a [u8] {
    let start = std::mem::size_of::<StackCaptureRecord>();
    let end = start.saturating_add(r.stack_len as usize).min(bytes.len());
    bytes.get(start..end).unwrap_or_default()
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("ring-buffer record of {0} bytes is too short")]
    Short(usize),
    #[error("ring-buffer record of unknown kind {0}")]
    UnknownKind(u32),
}

/// Copy a `T` out of the front of `bytes` (which may be unaligned).
fn read_pod<T: aya::Pod>(bytes: &[u8]) -> Result<T, RecordError> {
    if bytes.len() < std::mem::size_of::<T>() {
        return Err(RecordError::Short(bytes.len()));
    }
    // SAFETY: length checked above; T is Pod, so every bit pattern is a valid T, and
    // read_unaligned has no alignment requirement.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// Decode one record; the first u32 says which kind it is.
pub fn decode(bytes: &[u8]) -> Result<Record, RecordError> {
    let kind = bytes
        .get(..4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(RecordError::Short(bytes.len()))?;
    match kind {
        record_kind::FORK | record_kind::EXEC | record_kind::EXIT => {
            read_pod(bytes).map(Record::Lifecycle)
        }
        record_kind::SLOW_SYSCALL => read_pod(bytes).map(Record::SlowSyscall),
        record_kind::STACK_COPY | record_kind::STACK_PERIOD => {
            read_pod(bytes).map(Record::StackCapture)
        }
        record_kind::WAKEUP => read_pod(bytes).map(Record::Wakeup),
        record_kind::ARGV => read_pod(bytes).map(Record::Argv),
        other => Err(RecordError::UnknownKind(other)),
    }
}

/// A NUL-padded kernel `comm` as text.
pub fn comm_string(comm: &[u8]) -> String {
    let end = comm.iter().position(|b| *b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T: aya::Pod>(v: &T) -> Vec<u8> {
        // SAFETY: T is Pod (no padding bytes with undefined content in our types).
        unsafe {
            std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>())
        }
        .to_vec()
    }

    #[test]
    fn decodes_exit_and_slow_syscall_even_when_unaligned() {
        let mut comm = [0u8; 16];
        comm[..4].copy_from_slice(b"make");
        let exit = LifecycleRecord {
            kind: record_kind::EXIT,
            tgid: 10,
            tid: 11,
            ts_ns: 99,
            exit_code: 256,
            class_ns: [1, 2, 3, 4, 5, 6, 7],
            comm,
            ..Default::default()
        };
        let mut buf = vec![0u8];
        buf.extend(bytes_of(&exit));
        assert_eq!(decode(&buf[1..]), Ok(Record::Lifecycle(exit)));
        assert_eq!(comm_string(&exit.comm), "make");

        let slow = SlowSyscallRecord {
            kind: record_kind::SLOW_SYSCALL,
            tgid: 1,
            tid: 2,
            nr: 0,
            start_ns: 5,
            duration_ns: 7,
            ret: -4,
            user_stack_id: 9,
            _pad: 0,
        };
        assert_eq!(decode(&bytes_of(&slow)), Ok(Record::SlowSyscall(slow)));
    }

    #[test]
    fn rejects_short_and_unknown_records() {
        assert_eq!(decode(&[1, 0]), Err(RecordError::Short(2)));
        assert_eq!(decode(&[1, 0, 0, 0, 5]), Err(RecordError::Short(5)));
        assert_eq!(decode(&[77, 0, 0, 0]), Err(RecordError::UnknownKind(77)));
    }
}
