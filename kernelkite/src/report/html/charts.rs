//! The timeline charts: CPU, memory, I/O and network over the session, as inline SVG.

use std::fmt::Write as _;

use super::*;

// ---------------------------------------------------------------------------------------
// Timeline charts

pub(super) const SVG_W: f64 = 1000.0;
pub(super) const PLOT_L: f64 = 190.0;
pub(super) const PLOT_R: f64 = 16.0;

pub(super) const COLOR_CPU: &str = "#2f855a";
pub(super) const COLOR_RSS: &str = "#6b46c1";
pub(super) const COLOR_READ: &str = "#2b6cb0";
pub(super) const COLOR_WRITE: &str = "#dd6b20";
pub(super) const COLOR_RX: &str = "#319795";
pub(super) const COLOR_TX: &str = "#b83280";

/// Time → x mapping shared by every chart of the page.
#[derive(Clone, Copy)]
pub(super) struct XScale {
    t0: u64,
    t1: u64,
}

impl XScale {
    pub(super) fn new(tl: &Timeline) -> XScale {
        let t0 = tl.start_ns.min(
            tl.processes
                .iter()
                .map(|p| p.start_ns())
                .min()
                .unwrap_or(u64::MAX),
        );
        let t1 = tl
            .end_ns
            .max(tl.processes.iter().map(|p| p.end_ns()).max().unwrap_or(0));
        XScale { t0, t1: t1.max(t0) }
    }

    pub(super) fn x(&self, t: u64) -> f64 {
        let w = SVG_W - PLOT_L - PLOT_R;
        if self.t1 == self.t0 {
            return PLOT_L;
        }
        PLOT_L + (t.clamp(self.t0, self.t1) - self.t0) as f64 / (self.t1 - self.t0) as f64 * w
    }

    /// Tick times and the step between them.
    pub(super) fn ticks(&self) -> (Vec<u64>, u64) {
        let span = self.t1 - self.t0;
        if span == 0 {
            return (vec![self.t0], 1);
        }
        let step = nice_step(span as f64 / 8.0).max(1.0) as u64;
        let mut ticks = Vec::new();
        let mut t = self.t0.div_ceil(step).checked_mul(step);
        while let Some(tick) = t.filter(|&tick| tick <= self.t1) {
            ticks.push(tick);
            t = tick.checked_add(step);
        }
        (ticks, step)
    }
}

/// Draws a panel's contents into the page at `(y, height)`.
pub(super) type DrawFn<'a> = Box<dyn Fn(&mut String, f64, f64) + 'a>;

/// One chart of the timeline: a name, a height and a function drawing it.
pub(super) struct Panel<'a> {
    name: &'a str,
    unit: &'a str,
    height: f64,
    draw: DrawFn<'a>,
}

pub(super) type RateSeries<'a> = (&'a IntervalSeries<u64>, &'a str, &'a str);

/// A panel of two byte-count series drawn as rates (bytes per second).
pub(super) fn rate_panel<'a>(
    name: &'a str,
    unit: &'a str,
    xs: &'a XScale,
    a: RateSeries<'a>,
    b: RateSeries<'a>,
) -> Panel<'a> {
    let (ra, rb) = (rates(a.0), rates(b.0));
    let max = ra.iter().chain(rb.iter()).copied().fold(0.0f64, f64::max);
    let top = nice_ceil_bytes(max.max(1024.0));
    Panel {
        name,
        unit,
        height: 90.0,
        draw: Box::new(move |h, y, ph| {
            axis_labels(
                h,
                y,
                ph,
                &format!("{}/s", fmt_bytes_compact(top as u64)),
                "0",
            );
            step_path(h, xs, &a.0.start_ns, &a.0.end_ns, &ra, top, y, ph, a.2);
            step_path(h, xs, &b.0.start_ns, &b.0.end_ns, &rb, top, y, ph, b.2);
            legend(h, y, &[(a.1, a.2), (b.1, b.2)]);
            hover_bars(h, xs, &a.0.start_ns, &a.0.end_ns, y, ph, |i| {
                format!(
                    "{} to {}: {} {}, {} {}",
                    fmt_ns_compact(a.0.start_ns[i]),
                    fmt_ns_compact(a.0.end_ns[i]),
                    a.1,
                    fmt_bytes_compact(a.0.values[i]),
                    b.1,
                    fmt_bytes_compact(b.0.values.get(i).copied().unwrap_or(0))
                )
            });
        }),
    }
}

/// The series of the charts after [`downsample_mean`] and friends.
pub(super) struct Downsampled {
    cpu_cores: IntervalSeries<f64>,
    rss_bytes: InstantSeries<u64>,
}

/// At most about this many intervals or points are drawn per chart.
pub(super) const MAX_POINTS: usize = 800;

/// The bucket (of `MAX_POINTS` equal slices of the session) that `t` falls in.
pub(super) fn bucket_of(xs: &XScale, t: u64) -> usize {
    let span = (xs.t1 - xs.t0).max(1) as u128;
    let i = (t.saturating_sub(xs.t0) as u128 * MAX_POINTS as u128 / span) as usize;
    i.min(MAX_POINTS - 1)
}

/// Merge consecutive intervals that start in the same bucket: `fold(acc, value, dt)`
/// accumulates, `finish(acc, total_dt)` gives the merged value.
pub(super) fn merge_intervals<T: Copy, A: Copy>(
    s: &IntervalSeries<T>,
    xs: &XScale,
    zero: A,
    fold: impl Fn(A, T, u64) -> A,
    finish: impl Fn(A, u64) -> T,
) -> IntervalSeries<T> {
    if s.len() <= MAX_POINTS {
        return s.clone();
    }
    let mut out = IntervalSeries {
        start_ns: Vec::new(),
        end_ns: Vec::new(),
        values: Vec::new(),
    };
    let mut cur: Option<(usize, u64, u64, A, u64)> = None; // bucket, start, end, acc, dt
    for i in 0..s.len() {
        let b = bucket_of(xs, s.start_ns[i]);
        let dt = s.end_ns[i] - s.start_ns[i];
        cur = match cur {
            Some((cb, st, _, acc, tdt)) if cb == b => {
                Some((cb, st, s.end_ns[i], fold(acc, s.values[i], dt), tdt + dt))
            }
            prev => {
                if let Some((_, st, en, acc, tdt)) = prev {
                    out.start_ns.push(st);
                    out.end_ns.push(en);
                    out.values.push(finish(acc, tdt));
                }
                Some((
                    b,
                    s.start_ns[i],
                    s.end_ns[i],
                    fold(zero, s.values[i], dt),
                    dt,
                ))
            }
        };
    }
    if let Some((_, st, en, acc, tdt)) = cur {
        out.start_ns.push(st);
        out.end_ns.push(en);
        out.values.push(finish(acc, tdt));
    }
    out
}

/// Time-weighted mean (CPU cores).
pub(super) fn downsample_mean(s: &IntervalSeries<f64>, xs: &XScale) -> IntervalSeries<f64> {
    merge_intervals(
        s,
        xs,
        0.0f64,
        |acc, v, dt| acc + v * dt as f64,
        |acc, dt| if dt == 0 { 0.0 } else { acc / dt as f64 },
    )
}

/// Sums (byte counts).
pub(super) fn downsample_sum(s: &IntervalSeries<u64>, xs: &XScale) -> IntervalSeries<u64> {
    merge_intervals(s, xs, 0u64, |acc, v, _| acc.saturating_add(v), |acc, _| acc)
}

/// The largest point of each bucket (memory peaks survive).
pub(super) fn downsample_max(s: &InstantSeries<u64>, xs: &XScale) -> InstantSeries<u64> {
    if s.t_ns.len() <= MAX_POINTS {
        return s.clone();
    }
    let mut out = InstantSeries::default();
    let mut last_bucket = None;
    for i in 0..s.t_ns.len() {
        let b = bucket_of(xs, s.t_ns[i]);
        if last_bucket == Some(b) {
            let last = out.values.len() - 1;
            if s.values[i] > out.values[last] {
                out.values[last] = s.values[i];
                out.t_ns[last] = s.t_ns[i];
            }
        } else {
            out.t_ns.push(s.t_ns[i]);
            out.values.push(s.values[i]);
            last_bucket = Some(b);
        }
    }
    out
}

pub(super) fn timeline_section(h: &mut String, bundle: &Bundle, tl: &Timeline) {
    let xs = XScale::new(tl);
    let (ticks, step) = xs.ticks();
    h.push_str("<section id=\"timeline\">\n<h2>Timeline</h2>\n");
    if xs.t1 == xs.t0 {
        let _ = writeln!(
            h,
            "<p class=\"hint\">The session is a single instant ({}): there is no timeline \
             to draw.</p>\n</section>",
            esc(&fmt_ns_compact(xs.t0))
        );
        return;
    }
    h.push_str(
        "<p class=\"hint\">CPU, memory and disk traffic of the observed processes per sampling \
         interval. Hover a chart for its values.</p>\n",
    );

    // Long sessions are drawn at about one interval per pixel.
    let cpu_cores = downsample_mean(&tl.cpu_cores, &xs);
    let rss_bytes = downsample_max(&tl.rss_bytes, &xs);
    let disk_read = downsample_sum(&tl.disk_read_bytes, &xs);
    let disk_write = downsample_sum(&tl.disk_write_bytes, &xs);
    let net_rx = tl.net_rx_bytes.as_ref().map(|s| downsample_sum(s, &xs));
    let net_tx = tl.net_tx_bytes.as_ref().map(|s| downsample_sum(s, &xs));
    let tl = Downsampled {
        cpu_cores,
        rss_bytes,
    };

    let mut panels: Vec<Panel> = Vec::new();

    // CPU
    let cpu_max = tl.cpu_cores.values.iter().cloned().fold(0.0f64, f64::max);
    let cpu_top = nice_ceil(cpu_max.max(1.0));
    let ncpu = bundle.host.num_cpus as f64;
    panels.push(Panel {
        name: "CPU",
        unit: "cores",
        height: 120.0,
        draw: Box::new(move |h, y, ph| {
            axis_labels(h, y, ph, &fmt_num(cpu_top), "0");
            if ncpu > 0.0 && ncpu <= cpu_top {
                let yy = y + ph - ncpu / cpu_top * ph;
                let _ = writeln!(
                    h,
                    "<line class=\"limit\" x1=\"{PLOT_L:.1}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\"/>\
                     <text class=\"limit-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{} CPUs</text>",
                    SVG_W - PLOT_R,
                    SVG_W - PLOT_R - 4.0,
                    if yy - y < 14.0 { yy + 12.0 } else { yy - 3.0 },
                    bundle.host.num_cpus
                );
            }
            let s = &tl.cpu_cores;
            step_path(h, &xs, &s.start_ns, &s.end_ns, &s.values, cpu_top, y, ph, COLOR_CPU);
            hover_bars(h, &xs, &s.start_ns, &s.end_ns, y, ph, |i| {
                format!(
                    "{} to {}: {:.2} cores",
                    fmt_ns_compact(s.start_ns[i]),
                    fmt_ns_compact(s.end_ns[i]),
                    s.values[i]
                )
            });
        }),
    });

    // Memory
    let rss_max = tl.rss_bytes.values.iter().copied().max().unwrap_or(0) as f64;
    let rss_top = nice_ceil_bytes(rss_max.max(1.0));
    panels.push(Panel {
        name: "Memory",
        unit: "RSS, all processes",
        height: 90.0,
        draw: Box::new(move |h, y, ph| {
            axis_labels(h, y, ph, &fmt_bytes_compact(rss_top as u64), "0");
            line_area(h, &xs, &tl.rss_bytes, rss_top, y, ph, COLOR_RSS);
            // Each point's tooltip covers the half-way marks to its neighbours.
            let t = &tl.rss_bytes.t_ns;
            let mid = |i: usize, j: usize| t[i] / 2 + t[j] / 2 + (t[i] % 2 + t[j] % 2) / 2;
            let starts: Vec<u64> = (0..t.len())
                .map(|i| if i == 0 { t[0] } else { mid(i - 1, i) })
                .collect();
            let ends: Vec<u64> = (0..t.len())
                .map(|i| {
                    if i + 1 == t.len() {
                        t[i]
                    } else {
                        mid(i, i + 1)
                    }
                })
                .collect();
            hover_bars(h, &xs, &starts, &ends, y, ph, |i| {
                format!(
                    "{}: {} resident",
                    fmt_ns_compact(t[i]),
                    fmt_bytes_compact(tl.rss_bytes.values[i])
                )
            });
        }),
    });

    // Disk and network: bytes per second over each interval.
    panels.push(rate_panel(
        "Disk I/O",
        "per second",
        &xs,
        (&disk_read, "read", COLOR_READ),
        (&disk_write, "written", COLOR_WRITE),
    ));
    if let (Some(rx), Some(tx)) = (&net_rx, &net_tx) {
        panels.push(rate_panel(
            "Network",
            "host-wide, per second",
            &xs,
            (rx, "received", COLOR_RX),
            (tx, "sent", COLOR_TX),
        ));
    }

    let gap = 22.0;
    let axis_h = 28.0;
    let total_h: f64 = panels.iter().map(|p| p.height + gap).sum::<f64>() + axis_h;
    let _ = writeln!(
        h,
        "<svg class=\"chart\" viewBox=\"0 0 {SVG_W:.0} {total_h:.0}\" role=\"img\" \
         aria-label=\"Timeline of CPU, memory and disk I/O\">"
    );
    let mut y = 8.0;
    for p in &panels {
        let _ = writeln!(
            h,
            "<rect class=\"plot\" x=\"{PLOT_L:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\"/>",
            SVG_W - PLOT_L - PLOT_R,
            p.height
        );
        grid(h, &xs, &ticks, y, p.height);
        let _ = writeln!(
            h,
            "<text class=\"panel-name\" x=\"8\" y=\"{:.1}\">{}</text>\
             <text class=\"panel-unit\" x=\"8\" y=\"{:.1}\">{}</text>",
            y + p.height / 2.0 - 2.0,
            esc(p.name),
            y + p.height / 2.0 + 14.0,
            esc(p.unit)
        );
        (p.draw)(h, y, p.height);
        y += p.height + gap;
    }
    time_axis(h, &xs, &ticks, step, y - gap + 4.0);
    h.push_str("</svg>\n</section>\n");
}

pub(super) fn grid(h: &mut String, xs: &XScale, ticks: &[u64], y: f64, ph: f64) {
    for &t in ticks {
        let x = xs.x(t);
        let _ = writeln!(
            h,
            "<line class=\"grid\" x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>",
            y + ph
        );
    }
    let mid = y + ph / 2.0;
    let _ = writeln!(
        h,
        "<line class=\"grid\" x1=\"{PLOT_L:.1}\" y1=\"{mid:.1}\" x2=\"{:.1}\" y2=\"{mid:.1}\"/>",
        SVG_W - PLOT_R
    );
}

pub(super) fn time_axis(h: &mut String, xs: &XScale, ticks: &[u64], step: u64, y: f64) {
    for &t in ticks {
        let _ = writeln!(
            h,
            "<text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            xs.x(t),
            y + 12.0,
            esc(&fmt_tick(t, step))
        );
    }
}

pub(super) fn axis_labels(h: &mut String, y: f64, ph: f64, top: &str, bottom: &str) {
    let _ = writeln!(
        h,
        "<text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
         <text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
        PLOT_L - 6.0,
        y + 10.0,
        esc(top),
        PLOT_L - 6.0,
        y + ph,
        esc(bottom)
    );
}

pub(super) fn legend(h: &mut String, y: f64, items: &[(&str, &str)]) {
    let mut x = SVG_W - PLOT_R;
    for (name, color) in items.iter().rev() {
        let w = 14.0 + 7.0 * name.len() as f64;
        x -= w;
        let _ = writeln!(
            h,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/>\
             <text class=\"legend\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            y - 14.0,
            x + 14.0,
            y - 5.0,
            esc(name)
        );
        x -= 10.0;
    }
}

/// A step chart: each interval `start[i]..end[i]` is a flat segment at `values[i]`.
#[allow(
    clippy::too_many_arguments,
    reason = "a chart's geometry: origin, size, scales and series"
)]
pub(super) fn step_path(
    h: &mut String,
    xs: &XScale,
    start: &[u64],
    end: &[u64],
    values: &[f64],
    top: f64,
    y: f64,
    ph: f64,
    color: &str,
) {
    if values.is_empty() {
        return;
    }
    let base = y + ph;
    let mut d = String::new();
    let mut prev_end = None;
    for i in 0..values.len() {
        let (x0, x1) = (xs.x(start[i]), xs.x(end[i]));
        match prev_end {
            None => {
                let _ = write!(d, "M{x0:.1},{base:.1}");
            }
            Some(pe) if pe != start[i] => {
                let _ = write!(d, "L{:.1},{base:.1}L{x0:.1},{base:.1}", xs.x(pe));
            }
            _ => {}
        }
        let v = base - (values[i] / top).clamp(0.0, 1.0) * ph;
        let _ = write!(d, "L{x0:.1},{v:.1}L{x1:.1},{v:.1}");
        prev_end = Some(end[i]);
    }
    let _ = write!(d, "L{:.1},{base:.1}Z", xs.x(prev_end.unwrap_or(0)));
    let _ = writeln!(
        h,
        "<path d=\"{d}\" fill=\"{color}\" fill-opacity=\"0.25\" stroke=\"{color}\" \
         stroke-width=\"1.4\" stroke-linejoin=\"round\"/>"
    );
}

/// Bytes per second over each interval of a byte-count series.
pub(super) fn rates(s: &IntervalSeries<u64>) -> Vec<f64> {
    (0..s.len())
        .map(|i| s.values[i] as f64 / ((s.end_ns[i] - s.start_ns[i]) as f64 / 1e9))
        .collect()
}

/// Invisible full-height rectangles per interval carrying a `<title>` tooltip.
#[allow(
    clippy::too_many_arguments,
    reason = "a chart's geometry: origin, size, scales and series"
)]
pub(super) fn hover_bars(
    h: &mut String,
    xs: &XScale,
    start: &[u64],
    end: &[u64],
    y: f64,
    ph: f64,
    text: impl Fn(usize) -> String,
) {
    h.push_str("<g class=\"hover\">");
    for i in 0..start.len() {
        let (x0, x1) = (xs.x(start[i]), xs.x(end[i]));
        let _ = write!(
            h,
            "<rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{ph:.1}\"><title>{}</title></rect>",
            (x1 - x0).max(0.5),
            esc(&text(i))
        );
    }
    h.push_str("</g>\n");
}

/// An area under the line through instant samples.
pub(super) fn line_area(
    h: &mut String,
    xs: &XScale,
    s: &InstantSeries<u64>,
    top: f64,
    y: f64,
    ph: f64,
    color: &str,
) {
    let base = y + ph;
    let yv = |v: u64| base - (v as f64 / top).clamp(0.0, 1.0) * ph;
    match s.t_ns.len() {
        0 => {}
        1 => {
            let _ = writeln!(
                h,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"><title>{}</title></circle>",
                xs.x(s.t_ns[0]),
                yv(s.values[0]),
                esc(&format!("{}: {}", fmt_ns_compact(s.t_ns[0]), fmt_bytes_compact(s.values[0])))
            );
        }
        n => {
            let mut d = format!("M{:.1},{base:.1}", xs.x(s.t_ns[0]));
            for i in 0..n {
                let _ = write!(d, "L{:.1},{:.1}", xs.x(s.t_ns[i]), yv(s.values[i]));
            }
            let _ = write!(d, "L{:.1},{base:.1}Z", xs.x(s.t_ns[n - 1]));
            let _ = writeln!(
                h,
                "<path d=\"{d}\" fill=\"{color}\" fill-opacity=\"0.25\" stroke=\"{color}\" \
                 stroke-width=\"1.4\" stroke-linejoin=\"round\"/>"
            );
        }
    }
}

pub(super) fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

pub(super) fn fmt_tick(t: u64, step: u64) -> String {
    let digits = (step as f64).log10().floor() as i32;
    if step >= 1_000_000 {
        let decimals = (9 - digits).clamp(0, 3) as usize;
        format!("{:.*} s", decimals, t as f64 / 1e9)
    } else {
        let decimals = (6 - digits).clamp(0, 3) as usize;
        format!("{:.*} ms", decimals, t as f64 / 1e6)
    }
}

/// The smallest of 1, 2, 5 × 10^k at least `v`.
pub(super) fn nice_step(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

/// A round upper bound for an axis: 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10 × 10^k.
pub(super) fn nice_ceil(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * p >= v * (1.0 - 1e-12) {
            return m * p;
        }
    }
    10.0 * p
}

/// A round upper bound for a bytes axis: a nice multiple of a power of 1024.
pub(super) fn nice_ceil_bytes(v: f64) -> f64 {
    let mut unit = 1.0;
    while v / unit >= 1024.0 {
        unit *= 1024.0;
    }
    nice_ceil(v / unit) * unit
}
