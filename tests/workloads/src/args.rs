//! A tiny option parser: `--key value`, `--key=value` and boolean `--flag`s.
//!
//! Workloads read their options with the typed getters, then call [`Args::finish`],
//! which rejects anything that was given but never read (a typo must not silently run
//! the default workload).

use std::collections::BTreeMap;
use std::str::FromStr;

/// A mistake on the command line (exit status 2).
#[derive(Debug)]
pub struct UsageError(pub String);

/// Options that take no value.
const FLAGS: &[&str] = &[
    "wait-stdin",
    "spin-wait",
    "direct",
    "self-exec",
    "leave-parked",
    "processes",
    "leader-exits",
    "linger",
    "help",
];

pub struct Args {
    values: BTreeMap<String, String>,
    used: Vec<String>,
}

impl Args {
    pub fn parse(raw: &[String]) -> Result<Args, UsageError> {
        let mut values = BTreeMap::new();
        let mut it = raw.iter();
        while let Some(arg) = it.next() {
            let Some(body) = arg.strip_prefix("--") else {
                return Err(UsageError(format!(
                    "unexpected argument {arg:?} (options are --key value)"
                )));
            };
            let (key, value) = match body.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None if FLAGS.contains(&body) => (body.to_string(), "true".to_string()),
                None => {
                    let v = it
                        .next()
                        .ok_or_else(|| UsageError(format!("--{body} needs a value")))?;
                    (body.to_string(), v.clone())
                }
            };
            if values.insert(key.clone(), value).is_some() {
                return Err(UsageError(format!("--{key} given twice")));
            }
        }
        Ok(Args {
            values,
            used: Vec::new(),
        })
    }

    fn get<T: FromStr>(&mut self, key: &str) -> Result<Option<T>, UsageError> {
        self.used.push(key.to_string());
        match self.values.get(key) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| UsageError(format!("--{key}: cannot parse {v:?}"))),
        }
    }

    pub fn u64(&mut self, key: &str, default: u64) -> Result<u64, UsageError> {
        Ok(self.get(key)?.unwrap_or(default))
    }

    pub fn usize(&mut self, key: &str, default: usize) -> Result<usize, UsageError> {
        Ok(self.get(key)?.unwrap_or(default))
    }

    pub fn f64(&mut self, key: &str, default: f64) -> Result<f64, UsageError> {
        let v: f64 = self.get(key)?.unwrap_or(default);
        if !v.is_finite() || v < 0.0 {
            return Err(UsageError(format!("--{key} must be a non-negative number")));
        }
        Ok(v)
    }

    pub fn string(&mut self, key: &str) -> Result<Option<String>, UsageError> {
        self.get(key)
    }

    pub fn flag(&mut self, key: &str) -> Result<bool, UsageError> {
        Ok(self.get::<bool>(key)?.unwrap_or(false))
    }

    /// Fail on options nobody read.
    pub fn finish(&self) -> Result<(), UsageError> {
        for key in self.values.keys() {
            if !self.used.iter().any(|u| u == key) {
                return Err(UsageError(format!("unknown option --{key}")));
            }
        }
        Ok(())
    }
}
