//! Log-linear latency histogram buckets, shared by the BPF programs (which count into
//! them) and userspace (which turns them into percentiles).
//!
//! Values below 2^SUB_BITS get a bucket each. Above that every power of two is split
//! into 2^SUB_BITS equal sub-buckets, so a bucket is at most 1/8 as wide as its lower
//! bound: reporting a bucket's midpoint is within ±6.25% of the true value. Values of
//! 2^MAX_EXP ns (about 18 minutes) or more share the last bucket.

/// log2 of the number of sub-buckets per power of two.
pub const SUB_BITS: u32 = 3;
const SUB_COUNT: u64 = 1 << SUB_BITS;
/// Values at or above 2^MAX_EXP land in the last bucket.
pub const MAX_EXP: u32 = 40;
/// Number of buckets in a histogram.
pub const NUM_BUCKETS: usize = (SUB_COUNT + (MAX_EXP - SUB_BITS) as u64 * SUB_COUNT) as usize;
/// Worst-case relative error of a value reported as its bucket's midpoint.
pub const MIDPOINT_RELATIVE_ERROR: f64 = 1.0 / (2 * SUB_COUNT) as f64;

/// floor(log2(v)) for v > 0, without loops or clz (the BPF verifier and ISA have neither).
#[inline(always)]
pub fn log2_floor(mut v: u64) -> u32 {
    let mut r = 0;
    if v >= 1 << 32 {
        v >>= 32;
        r += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        r += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        r += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        r += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        r += 2;
    }
    if v >= 1 << 1 {
        r += 1;
    }
    r
}

/// The bucket a value (in ns) falls in; always `< NUM_BUCKETS`.
#[inline(always)]
pub fn bucket_index(value: u64) -> usize {
    if value < SUB_COUNT {
        return value as usize;
    }
    let exp = log2_floor(value);
    if exp >= MAX_EXP {
        return NUM_BUCKETS - 1;
    }
    let sub = (value >> (exp - SUB_BITS)) - SUB_COUNT;
    (SUB_COUNT + (exp - SUB_BITS) as u64 * SUB_COUNT + sub) as usize
}

/// Smallest value that falls in bucket `index`.
pub fn bucket_lower(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB_COUNT {
        return index;
    }
    let exp = (index - SUB_COUNT) / SUB_COUNT + SUB_BITS as u64;
    let sub = (index - SUB_COUNT) % SUB_COUNT;
    (SUB_COUNT + sub) << (exp - SUB_BITS as u64)
}

/// One past the largest value in bucket `index`. The last bucket's nominal end is
/// 2^MAX_EXP; values beyond it are counted there too (reports clamp to the observed max).
pub fn bucket_upper(index: usize) -> u64 {
    if index + 1 < NUM_BUCKETS {
        bucket_lower(index + 1)
    } else {
        1 << MAX_EXP
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_matches_leading_zeros() {
        for v in [1u64, 2, 3, 7, 8, 255, 256, 1 << 40, u64::MAX] {
            assert_eq!(log2_floor(v), 63 - v.leading_zeros(), "v={v}");
        }
    }

    #[test]
    fn every_value_lies_inside_its_bucket() {
        let mut v = 0u64;
        while v < (1 << MAX_EXP) {
            let i = bucket_index(v);
            assert!(i < NUM_BUCKETS);
            assert!(bucket_lower(i) <= v && v < bucket_upper(i), "v={v} i={i}");
            // Width bound that the reports quote.
            let width = bucket_upper(i) - bucket_lower(i);
            assert!(
                v < SUB_COUNT || width * SUB_COUNT <= bucket_lower(i),
                "v={v}"
            );
            v = v * 9 / 8 + 1;
        }
        assert_eq!(bucket_index(u64::MAX), NUM_BUCKETS - 1);
    }

    #[test]
    fn buckets_are_contiguous() {
        for i in 0..NUM_BUCKETS - 1 {
            assert_eq!(bucket_upper(i), bucket_lower(i + 1));
            assert_eq!(bucket_index(bucket_lower(i)), i);
        }
    }
}
