//! Flame graphs of a bundle's stacks, drawn by the `inferno` crate from the folded lines
//! of [`crate::analysis::stacks::folded_lines`].
//!
//! Widths are nanoseconds (inferno's `count_name` is `ns`). One class: on_cpu in
//! inferno's `hot` palette, the off-CPU classes in its `blue` one. All classes: one graph
//! whose root frames are the classes, each root in its class's colour from the HTML
//! report; a frame above them is hot when most of its time is on-CPU, else blue (inferno
//! colours by frame name, so a function under several classes has one colour). Colours
//! are derived from the frame's name, never random: the same bundle gives the same SVG.

use std::collections::BTreeMap;

use inferno::flamegraph::color::{BackgroundColor, BasicPalette, Color, PaletteMap};
use inferno::flamegraph::{self, Options, Palette};
use kernelkite_common::LatencyClass;
use quick_xml::events::attributes::Attribute;
use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, Writer};

use crate::analysis::stacks::{folded_lines, FoldOptions};
use crate::model::Bundle;

/// Frames narrower than this share of the graph (percent; 1.2 px of its 1200) are left
/// out, their time staying in their parent's width. inferno's default (0.01%) keeps
/// every sliver: tens of MB of SVG for a bundle with thousands of stacks.
pub const MIN_WIDTH_PCT: f64 = 0.1;

/// Which flame graph to draw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlameGraphSpec {
    /// One class, or every class under its own root frame.
    pub class: Option<LatencyClass>,
    /// A frame per process (its comm) under the class.
    pub per_process: bool,
}

impl FlameGraphSpec {
    fn fold_options(&self) -> FoldOptions {
        FoldOptions {
            class: self.class,
            class_root: self.class.is_none(),
            per_process: self.per_process,
        }
    }
}

/// The folded lines of a graph, newline-terminated (what `flamegraph --folded` writes).
pub fn folded_text(bundle: &Bundle, spec: &FlameGraphSpec) -> String {
    let mut out = String::new();
    for line in folded_lines(bundle, &spec.fold_options()) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The hue of a class's frames: hot on-CPU, blue off-CPU.
fn palette_of(class: LatencyClass) -> BasicPalette {
    if class.is_off_cpu() {
        BasicPalette::Blue
    } else {
        BasicPalette::Hot
    }
}

/// A shade of `palette` picked by the name's FNV-1a hash, with inferno's ranges for its
/// `hot` and `blue` palettes.
fn shade(palette: BasicPalette, name: &str) -> Color {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        hash ^= b as u64;
        hash = hash.wrapping_mul(0x100_0000_01b3);
    }
    let v = |shift: u32| ((hash >> shift) & 0xffff) as f64 / 65535.0;
    let t = |base: u8, range: f64, x: f64| base.saturating_add((range * x) as u8);
    match palette {
        BasicPalette::Hot => Color {
            r: t(205, 50.0, v(0)),
            g: t(0, 230.0, v(16)),
            b: t(0, 55.0, v(32)),
        },
        _ => {
            let x = v(0);
            Color {
                r: t(80, 60.0, x),
                g: t(80, 60.0, x),
                b: t(205, 50.0, v(16)),
            }
        }
    }
}

/// The class colours of the HTML report, for the root frames of a merged graph.
fn class_colour(class: LatencyClass) -> Color {
    let (r, g, b) = match class {
        LatencyClass::OnCpu => (0x2f, 0x85, 0x5a),
        LatencyClass::Runqueue => (0xd6, 0x9e, 0x2e),
        LatencyClass::IoWait => (0x2b, 0x6c, 0xb0),
        LatencyClass::LockWait => (0xc5, 0x30, 0x30),
        LatencyClass::SyscallBlocked => (0x80, 0x5a, 0xd5),
        LatencyClass::UnknownWait => (0x71, 0x80, 0x96),
        LatencyClass::Steal => (0x31, 0x97, 0x95),
    };
    Color { r, g, b }
}

/// Colours of every frame of a merged graph: roots by class, other frames hot or blue
/// by where most of their time is.
fn merged_palette(lines: &[String]) -> PaletteMap {
    // frame name -> (on-CPU ns, off-CPU ns)
    let mut time: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for line in lines {
        let Some((stack, ns)) = line.rsplit_once(' ') else {
            continue;
        };
        let ns: u64 = ns.parse().unwrap_or(0);
        let mut frames = stack.split(';');
        let on_cpu = frames.next() == Some(LatencyClass::OnCpu.name());
        for f in frames {
            let e = time.entry(f).or_default();
            if on_cpu {
                e.0 = e.0.saturating_add(ns);
            } else {
                e.1 = e.1.saturating_add(ns);
            }
        }
    }
    let mut map = PaletteMap::default();
    for (name, (on, off)) in time {
        let palette = if on > off {
            BasicPalette::Hot
        } else {
            BasicPalette::Blue
        };
        map.insert(name, shade(palette, name));
    }
    // Roots last: a class name wins over a function of the same name.
    for class in LatencyClass::ALL {
        map.insert(class.name(), class_colour(class));
    }
    map
}

/// Why a flame graph could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum FlameGraphError {
    #[error("has no stacks (record with --stacks)")]
    NoStacks,
    #[error("has no {0} stacks")]
    NoClassStacks(&'static str),
    #[error("has no stack with any time")]
    NoTime,
    #[error("could not be drawn: inferno: {0}")]
    Inferno(#[from] std::io::Error),
}

/// The flame graph of `bundle` as a standalone SVG document (inferno's, with its
/// zoom-and-search script).
pub fn flamegraph_svg(bundle: &Bundle, spec: &FlameGraphSpec) -> Result<String, FlameGraphError> {
    let Some(profile) = bundle.stacks.as_ref() else {
        return Err(FlameGraphError::NoStacks);
    };
    let lines = folded_lines(bundle, &spec.fold_options());
    if lines.is_empty() {
        return Err(match spec.class {
            Some(c) => FlameGraphError::NoClassStacks(c.name()),
            None => FlameGraphError::NoTime,
        });
    }
    let label = bundle.label.as_deref().map(crate::report::clean);
    let (title, mut palette_map) = match spec.class {
        Some(LatencyClass::OnCpu) => (
            format!(
                "on_cpu: CPU time by stack (sampled at {} Hz)",
                profile.sample_hz
            ),
            None,
        ),
        Some(c) => (format!("{}: off-CPU time by stack", c.name()), None),
        None => (
            "Time by latency class and stack".to_string(),
            Some(merged_palette(&lines)),
        ),
    };
    let mut opts = Options::default();
    opts.title = title;
    opts.subtitle = Some(match &label {
        Some(l) => format!("{l} \u{2014} frame width is time in ns"),
        None => "frame width is time in ns".to_string(),
    });
    opts.count_name = "ns".to_string();
    opts.name_type = "Function:".to_string();
    opts.deterministic = true;
    opts.min_width = MIN_WIDTH_PCT;
    opts.colors = Palette::Basic(spec.class.map_or(BasicPalette::Blue, palette_of));
    if spec.class.is_none() {
        opts.bgcolors = Some(BackgroundColor::Grey);
    }
    opts.palette_map = palette_map.as_mut();
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)?;
    Ok(String::from_utf8_lossy(&svg).into_owned())
}

/// Text elements of inferno's interactive user interface, useless without its script.
const SCRIPT_UI_IDS: [&[u8]; 4] = [b"unzoom", b"search", b"matched", b"details"];

/// inferno's SVG made fit to sit inside an HTML page: no XML prolog, comments, script,
/// style sheet, event handlers, namespace URLs or script-only text; ids prefixed with
/// `uid` so several graphs can share a page. Hover details stay (SVG `<title>`). The
/// root gets `class="flamegraph"`; the page's CSS styles it.
pub fn inline_svg(svg: &str, uid: &str) -> Result<String, quick_xml::Error> {
    let mut reader = Reader::from_str(svg);
    let mut writer = Writer::new(Vec::new());
    // Depth inside an element being dropped (0: not dropping).
    let mut skip = 0usize;
    let mut root = true;
    loop {
        let event = reader.read_event()?;
        if skip > 0 {
            match event {
                Event::Start(_) => skip += 1,
                Event::End(_) => skip -= 1,
                Event::Eof => break,
                _ => {}
            }
            continue;
        }
        match event {
            Event::Eof => break,
            Event::Decl(_) | Event::DocType(_) | Event::Comment(_) | Event::PI(_) => {}
            Event::Start(e) => {
                if drop_element(&e) {
                    skip = 1;
                    continue;
                }
                let e = rewrite(&e, uid, std::mem::take(&mut root));
                writer.write_event(Event::Start(e))?;
            }
            Event::Empty(e) => {
                if !drop_element(&e) {
                    writer.write_event(Event::Empty(rewrite(&e, uid, false)))?;
                }
            }
            other => writer.write_event(other)?,
        }
    }
    Ok(String::from_utf8_lossy(&writer.into_inner()).into_owned())
}

fn drop_element(e: &BytesStart) -> bool {
    match e.name().as_ref() {
        b"script" | b"style" => true,
        b"text" => e
            .attributes()
            .flatten()
            .any(|a| a.key.as_ref() == b"id" && SCRIPT_UI_IDS.contains(&a.value.as_ref())),
        _ => false,
    }
}

fn rewrite(e: &BytesStart, uid: &str, root: bool) -> BytesStart<'static> {
    let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
    let mut out = BytesStart::new(name);
    if root {
        out.push_attribute(("class", "flamegraph"));
    }
    for a in e.attributes().flatten() {
        let key = a.key.as_ref();
        if key == b"onload" || key.starts_with(b"xmlns") || key.starts_with(b"fg:") {
            continue;
        }
        if root && (key == b"width" || key == b"height") {
            continue;
        }
        let value = String::from_utf8_lossy(&a.value).into_owned();
        let value = match key {
            b"id" => {
                if value == "title" || value == "subtitle" {
                    out.push_attribute(("text-anchor", "middle"));
                    out.push_attribute(("class", value.as_str()));
                }
                format!("{uid}-{value}")
            }
            _ => value.replace("url(#", &format!("url(#{uid}-")),
        };
        let key = String::from_utf8_lossy(key).into_owned();
        out.push_attribute(Attribute::from((key.as_bytes(), value.as_bytes())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> Bundle {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/stacks-demo.json");
        crate::model::fixture::load_fixture(&path).unwrap()
    }

    #[test]
    fn graphs_are_deterministic_and_coloured_by_class() {
        let b = demo();
        let lock = FlameGraphSpec {
            class: Some(LatencyClass::LockWait),
            per_process: false,
        };
        let svg = flamegraph_svg(&b, &lock).unwrap();
        assert_eq!(svg, flamegraph_svg(&b, &lock).unwrap());
        assert!(svg.contains("lock_wait: off-CPU time by stack"));
        assert!(svg.contains("kv::Cache::get(std::string const&amp;)"));
        assert!(svg.contains(" ns, "), "count name ns");
        // Blue palette: every frame's fill has more blue than red.
        let fills: Vec<(u8, u8, u8)> = svg
            .split("fill=\"rgb(")
            .skip(1)
            .map(|s| {
                let v: Vec<u8> = s
                    .split(')')
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|x| x.parse().unwrap())
                    .collect();
                (v[0], v[1], v[2])
            })
            // Black is inferno's text colour.
            .filter(|&c| c != (0, 0, 0))
            .collect();
        assert!(!fills.is_empty());
        assert!(fills.iter().all(|(r, _, b)| b > r), "{fills:?}");

        let cpu = FlameGraphSpec {
            class: Some(LatencyClass::OnCpu),
            per_process: false,
        };
        let svg = flamegraph_svg(&b, &cpu).unwrap();
        assert!(svg.contains("sampled at 99 Hz"));
        assert!(svg.contains("libsnappy.so.1+0x6c40"));

        let merged = flamegraph_svg(&b, &FlameGraphSpec::default()).unwrap();
        // The lock_wait root frame in the report's lock_wait colour.
        assert!(
            merged.contains("<title>lock_wait ("),
            "root frames are the classes"
        );
        assert!(merged.contains("fill=\"rgb(197,48,48)\""));

        let io = FlameGraphSpec {
            class: Some(LatencyClass::UnknownWait),
            per_process: false,
        };
        assert_eq!(
            flamegraph_svg(&b, &io).unwrap_err().to_string(),
            "has no unknown_wait stacks"
        );
        let mut none = b.clone();
        none.stacks = None;
        assert!(matches!(
            flamegraph_svg(&none, &lock),
            Err(FlameGraphError::NoStacks)
        ));
    }

    #[test]
    fn inline_svg_has_no_script_style_urls_or_handlers() {
        let b = demo();
        let svg = flamegraph_svg(&b, &FlameGraphSpec::default()).unwrap();
        assert!(svg.contains("<script") && svg.contains("http://"));
        let inline = inline_svg(&svg, "fg-all").unwrap();
        for bad in [
            "<script",
            "<style",
            "http",
            "onload",
            "<?xml",
            "<!--",
            "fg:x",
            "Reset Zoom",
        ] {
            assert!(!inline.contains(bad), "{bad}");
        }
        assert!(inline.starts_with("<svg class=\"flamegraph\""));
        assert!(inline.contains("id=\"fg-all-background\""));
        assert!(inline.contains("url(#fg-all-background)"));
        assert!(inline.contains("<title>lock_wait ("));
        assert!(inline.contains("text-anchor=\"middle\""));
        // Still well-formed XML.
        let mut r = Reader::from_str(&inline);
        while !matches!(r.read_event().unwrap(), Event::Eof) {}
    }
}
