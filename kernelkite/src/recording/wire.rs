//! The primitive field encodings of the recording format: fixed-width little-endian
//! integers, length-prefixed strings, tagged options and counted sequences.

/// Appends fields to a byte buffer.
pub(crate) struct Put<'a>(pub &'a mut Vec<u8>);

impl Put<'_> {
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A count or length: u32. Longer sequences cannot come out of one session.
    pub fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    pub fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    pub fn opt<T>(&mut self, v: Option<T>, mut f: impl FnMut(&mut Self, T)) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                f(self, v);
            }
        }
    }
    pub fn vec<T>(&mut self, items: &[T], mut f: impl FnMut(&mut Self, &T)) {
        self.len(items.len());
        for item in items {
            f(self, item);
        }
    }
}

/// Why a body could not be read: what, and where in the (decompressed) payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub at: usize,
    pub message: String,
}

pub(crate) type FieldResult<T> = Result<T, FieldError>;

/// Reads fields from a byte slice; every read is bounds-checked.
pub(crate) struct Take<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Offset of `bytes[0]` in the payload, for error positions.
    base: usize,
    /// The file's format version: older ones have fewer fields (see `recording`).
    pub version: u16,
}

impl<'a> Take<'a> {
    pub fn new(bytes: &'a [u8], base: usize) -> Take<'a> {
        Take {
            bytes,
            pos: 0,
            base,
            version: super::FORMAT_VERSION,
        }
    }

    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub fn fail<T>(&self, message: impl Into<String>) -> FieldResult<T> {
        Err(FieldError {
            at: self.offset(),
            message: message.into(),
        })
    }

    pub fn bytes(&mut self, n: usize, what: &str) -> FieldResult<&'a [u8]> {
        if n > self.remaining() {
            return self.fail(format!(
                "{what} needs {n} bytes but only {} remain",
                self.remaining()
            ));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> FieldResult<[u8; N]> {
        let b = self.bytes(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    pub fn u8(&mut self, what: &str) -> FieldResult<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    /// A u8 that must be 0 or 1.
    pub fn bool(&mut self, what: &str) -> FieldResult<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => self.fail(format!("{what}: {b} is not a boolean (0 or 1)")),
        }
    }
    pub fn u32(&mut self, what: &str) -> FieldResult<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub fn u64(&mut self, what: &str) -> FieldResult<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub fn i32(&mut self, what: &str) -> FieldResult<i32> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    pub fn i64(&mut self, what: &str) -> FieldResult<i64> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    /// A `str` field, borrowed from the payload.
    pub fn str_ref(&mut self, what: &str) -> FieldResult<&'a str> {
        let at = self.offset();
        let n = self.u32(what)? as usize;
        let b = self.bytes(n, what)?;
        std::str::from_utf8(b).map_err(|_| FieldError {
            at,
            message: format!("{what} is not UTF-8"),
        })
    }

    pub fn str(&mut self, what: &str) -> FieldResult<String> {
        self.str_ref(what).map(str::to_string)
    }

    /// A short `str` field (a comm, a state letter), stored inline like the bundle's.
    pub fn inline_str(&mut self, what: &str) -> FieldResult<crate::model::InlineStr> {
        self.str_ref(what).map(crate::model::InlineStr::from)
    }

    pub fn opt<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Self) -> FieldResult<T>,
    ) -> FieldResult<Option<T>> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => f(self).map(Some),
            b => self.fail(format!("{what}: option tag {b} is neither 0 nor 1")),
        }
    }

    /// A counted sequence whose items take at least `min_item_bytes` each: a count the
    /// remaining bytes cannot hold is rejected before anything is allocated.
    pub fn vec<T>(
        &mut self,
        what: &str,
        min_item_bytes: usize,
        mut f: impl FnMut(&mut Self) -> FieldResult<T>,
    ) -> FieldResult<Vec<T>> {
        let at = self.offset();
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min_item_bytes.max(1)) > self.remaining() {
            return Err(FieldError {
                at,
                message: format!(
                    "{what}: count {n} cannot fit in the {} bytes that remain",
                    self.remaining()
                ),
            });
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(f(self)?);
        }
        Ok(out)
    }

    pub fn finish(&self, what: &str) -> FieldResult<()> {
        if self.remaining() != 0 {
            return self.fail(format!(
                "{what}: {} unexpected bytes after the last field",
                self.remaining()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_little_endian() {
        let mut buf = Vec::new();
        let mut p = Put(&mut buf);
        p.u32(0x0102_0304);
        p.str("ké");
        p.opt(Some(-5i64), |p, v| p.i64(v));
        p.vec(&[7u64, 8], |p, v| p.u64(*v));
        assert_eq!(&buf[..4], &[4, 3, 2, 1]);
        let mut t = Take::new(&buf, 0);
        assert_eq!(t.u32("a").unwrap(), 0x0102_0304);
        assert_eq!(t.str("b").unwrap(), "ké");
        assert_eq!(t.opt("c", |t| t.i64("c")).unwrap(), Some(-5));
        assert_eq!(t.vec("d", 8, |t| t.u64("d")).unwrap(), vec![7, 8]);
        t.finish("x").unwrap();
    }

    #[test]
    fn huge_counts_and_lengths_fail_without_allocating() {
        let buf = u32::MAX.to_le_bytes();
        let e = Take::new(&buf, 100).vec("items", 8, |t| t.u64("x"));
        assert_eq!(e.unwrap_err().at, 100);
        let e = Take::new(&buf, 0).str("name").unwrap_err();
        assert!(
            e.message.contains("needs 4294967295 bytes"),
            "{}",
            e.message
        );
        let e = Take::new(&[2], 0).opt("o", |t| t.u8("v")).unwrap_err();
        assert!(e.message.contains("option tag 2"));
    }
}
