//! Hash maps keyed by pids and tids. The sampler looks several of them up per process
//! per tick; the keys are small integers chosen by the kernel, not by an attacker, so a
//! multiply-rotate hash (FxHash) replaces the default SipHash.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`FxHasher`].
pub(crate) type PidMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// The rustc/Firefox hash: fast for integer keys.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FxHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_i32(&mut self, i: i32) {
        self.add(i as u32 as u64);
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_a_map() {
        let mut m: PidMap<(i32, i32), u64> = PidMap::default();
        for pid in 1..2000 {
            m.insert((pid, pid + 1), pid as u64);
        }
        assert_eq!(m.len(), 1999);
        assert_eq!(m.get(&(1234, 1235)), Some(&1234));
        assert_eq!(m.get(&(1235, 1234)), None);
    }
}
