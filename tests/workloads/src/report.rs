//! The one-line JSON result every workload prints on stdout when it is done.
//! Hand-written (keys and values are plain ASCII) so the crate needs only `libc`.

use std::fmt::Write as _;
use std::io::Write as _;

pub struct Report {
    out: String,
}

impl Report {
    pub fn new(workload: &str) -> Report {
        let mut r = Report {
            out: String::from("{"),
        };
        r.str("workload", workload);
        r
    }

    fn key(&mut self, key: &str) {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        let _ = write!(self.out, "\"{key}\":");
    }

    pub fn u64(&mut self, key: &str, v: u64) -> &mut Report {
        self.key(key);
        let _ = write!(self.out, "{v}");
        self
    }

    /// A float with three decimals (enough for seconds and ns-per-call figures).
    pub fn f64(&mut self, key: &str, v: f64) -> &mut Report {
        self.key(key);
        let _ = write!(self.out, "{v:.3}");
        self
    }

    pub fn bool(&mut self, key: &str, v: bool) -> &mut Report {
        self.key(key);
        let _ = write!(self.out, "{v}");
        self
    }

    pub fn str(&mut self, key: &str, v: &str) -> &mut Report {
        self.key(key);
        self.out.push('"');
        for c in v.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(self.out, "\\u{:04x}", c as u32);
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
        self
    }

    /// Print the line (one `write` of the whole line) and flush.
    pub fn print(&mut self) {
        self.out.push_str("}\n");
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(self.out.as_bytes());
        let _ = stdout.flush();
    }
}
