//! `--format pprof`: a bundle's stacks as a gzip-compressed `profile.proto` (the format
//! of `go tool pprof`, Parca and Grafana Pyroscope), one sample type per latency class
//! in nanoseconds plus `samples` (the blocks or on-CPU samples each stack adds up).
//!
//! Each (thread, class, stack) of the bundle is one sample: its class's column holds
//! its time (exact, plus the estimate of sampled short blocks: docs/STACKS.md), the
//! other class columns 0, and `samples` its count; labels `pid`, `tid` (numbers),
//! `comm` and `class`, and `cgroup` and `container_id` where the bundle knows them. Locations are the report's frames (a symbol, else
//! `module+0xoffset`), leaf first, kernel frames named with `_[k]` as in folded stacks.
//! The default sample type is the class with the most time. Encoded with `prost` from
//! the message definitions of github.com/google/pprof `proto/profile.proto`.

use std::collections::HashMap;

use kernelkite_common::LatencyClass;
use prost::Message;

use super::ExportError;
use crate::analysis::stacks::stack_rows;
use crate::model::Bundle;

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// The string table: index 0 is "", as the format requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The profile of a bundle recorded with `--stacks`.
pub fn profile(bundle: &Bundle) -> Result<Profile, ExportError> {
    let stacks = stack_rows(bundle).ok_or(ExportError::NoStacks)?;
    let mut strings = Strings::new();
    let nanoseconds = strings.id("nanoseconds");
    let mut sample_type: Vec<ValueType> = (LatencyClass::ALL.iter())
        .map(|c| ValueType {
            r#type: strings.id(c.name()),
            unit: nanoseconds,
        })
        .collect();
    sample_type.push(ValueType {
        r#type: strings.id("samples"),
        unit: strings.id("count"),
    });
    // One function and one location per distinct frame view.
    let mut function = Vec::with_capacity(stacks.views.len());
    let mut location = Vec::with_capacity(stacks.views.len());
    for (i, view) in stacks.views.iter().enumerate() {
        let id = i as u64 + 1;
        let name = strings.id(&view.folded_name());
        function.push(Function {
            id,
            name,
            system_name: name,
            filename: strings.id(view
                .file
                .as_deref()
                .or(view.module.as_deref())
                .unwrap_or("")),
        });
        location.push(Location {
            id,
            line: vec![Line {
                function_id: id,
                line: view.line.map_or(0, i64::from),
            }],
        });
    }
    let (pid, tid, comm, class) = (
        strings.id("pid"),
        strings.id("tid"),
        strings.id("comm"),
        strings.id("class"),
    );
    let (cgroup, container_id) = (strings.id("cgroup"), strings.id("container_id"));
    let placements = crate::analysis::placement::latest_by_pid(bundle);
    let mut class_ns = [0u64; LatencyClass::ALL.len()];
    let sample = (stacks.rows.iter())
        .map(|row| {
            let column = row.class.id() as usize;
            class_ns[column] = class_ns[column].saturating_add(row.time_ns);
            let mut value = vec![0i64; sample_type.len()];
            value[column] = i64::try_from(row.time_ns).unwrap_or(i64::MAX);
            value[LatencyClass::ALL.len()] = i64::try_from(row.count).unwrap_or(i64::MAX);
            let mut label = vec![
                Label {
                    key: pid,
                    str: 0,
                    num: row.pid.into(),
                },
                Label {
                    key: tid,
                    str: 0,
                    num: row.tid.into(),
                },
                Label {
                    key: class,
                    str: strings.id(row.class.name()),
                    num: 0,
                },
            ];
            if let Some(c) = &row.comm {
                label.push(Label {
                    key: comm,
                    str: strings.id(&crate::format::clean(c)),
                    num: 0,
                });
            }
            // Its cgroup and container, where the bundle knows them.
            let place = placements.get(&row.pid);
            for (key, value) in [
                (cgroup, place.and_then(|p| p.cgroup.as_deref())),
                (container_id, place.and_then(|p| p.container_id.as_deref())),
            ] {
                if let Some(value) = value {
                    label.push(Label {
                        key,
                        str: strings.id(value),
                        num: 0,
                    });
                }
            }
            Sample {
                location_id: row
                    .frames_leaf_first
                    .iter()
                    .map(|&v| v as u64 + 1)
                    .collect(),
                value,
                label,
            }
        })
        .collect();
    let heaviest = (0..class_ns.len()).max_by_key(|&i| (class_ns[i], std::cmp::Reverse(i)));
    let duration_ns = bundle.frames.last().map_or(0, |f| f.t_ns);
    Ok(Profile {
        default_sample_type: heaviest.map_or(0, |i| sample_type[i].r#type),
        sample_type,
        sample,
        mapping: Vec::new(),
        location,
        function,
        string_table: strings.table,
        time_nanos: 0,
        duration_nanos: i64::try_from(duration_ns).unwrap_or(i64::MAX),
    })
}

/// The profile, protobuf-encoded and gzip-compressed (what `go tool pprof` reads).
pub fn render(bundle: &Bundle) -> Result<Vec<u8>, ExportError> {
    Ok(gzip(&profile(bundle)?.encode_to_vec()))
}

/// One gzip member (RFC 1952) of `data`: header, raw deflate, CRC-32 and length.
fn gzip(data: &[u8]) -> Vec<u8> {
    // Magic, deflate, no flags, no mtime, no extra flags, OS unknown.
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    out.extend(miniz_oxide::deflate::compress_to_vec(data, 6));
    out.extend(crc32fast::hash(data).to_le_bytes());
    out.extend((data.len() as u32).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixture::committed as fixture;

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        assert_eq!(&bytes[..3], &[0x1f, 0x8b, 8]);
        let body = &bytes[10..bytes.len() - 8];
        let data = miniz_oxide::inflate::decompress_to_vec(body).unwrap();
        let crc = u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap());
        assert_eq!(crc, crc32fast::hash(&data));
        data
    }

    #[test]
    fn every_stack_is_a_sample_with_its_class_time() {
        let bundle = fixture("stacks-demo.json");
        let bytes = render(&bundle).unwrap();
        let p = Profile::decode(gunzip(&bytes).as_slice()).unwrap();
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.sample_type.len(), LatencyClass::ALL.len() + 1);
        // The fixture's 21 stack samples, and per class the sum of their total_ns
        // (added up from fixtures/stacks-demo.json by hand).
        assert_eq!(p.sample.len(), 21);
        let want = [
            (LatencyClass::OnCpu, 1_515_151_517),
            (LatencyClass::Runqueue, 86_000_000),
            (LatencyClass::IoWait, 1_550_355_100),
            (LatencyClass::LockWait, 1_857_099_800),
            (LatencyClass::SyscallBlocked, 2_712_173_000),
            (LatencyClass::UnknownWait, 0),
            (LatencyClass::Steal, 0),
        ];
        assert_eq!(want.len(), LatencyClass::ALL.len());
        for (class, want) in want {
            let column = class.id() as usize;
            let exported: i64 = p.sample.iter().map(|s| s.value[column]).sum();
            assert_eq!(exported, want, "{class:?}");
        }
        // Every location id names a location, and every location a function.
        let ids = p.location.len() as u64;
        assert!(p
            .sample
            .iter()
            .flat_map(|s| &s.location_id)
            .all(|&l| l >= 1 && l <= ids));
        assert!(p.location.iter().all(|l| l.line[0].function_id == l.id));
    }

    #[test]
    fn a_bundle_without_stacks_is_refused() {
        let err = render(&fixture("api-server-ebpf.json")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bundle has no stacks; record with --stacks"
        );
    }
}
